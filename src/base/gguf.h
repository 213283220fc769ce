/* base/gguf.h - a reader for GGUF v2/v3 containers (llama.cpp's model files): header,
 * metadata key/values of every type (arrays included), tensor infos, alignment and the data
 * section. The file is memory-mapped; nothing is copied but small index tables.
 *
 * Layout: "GGUF" u32 version, u64 n_tensors, u64 n_kv, then n_kv x (string key, u32 type,
 * value), then n_tensors x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type,
 * u64 offset), padding to general.alignment (default 32), then the tensor data. Strings are
 * u64 length + bytes (not NUL-terminated). Little-endian only.
 *
 * Every length, count and offset is checked against the file size before use, so a
 * truncated or hostile file gives RP_ERR_INVALID, never a read out of bounds.
 *
 * Ownership: rp_gguf_open -> rp_gguf_close. Strings and tensor data returned are borrowed
 *            from the mapping and stay valid until rp_gguf_close.
 * Threading: immutable after open: any number of readers.
 * Errors:    RP_ERR_NOT_FOUND (file or key missing), RP_ERR_INVALID (malformed file, or a
 *            key of another type), RP_ERR_IO, RP_ERR_NOMEM.
 */
#ifndef RP_BASE_GGUF_H
#define RP_BASE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum rp_gguf_type {
    RP_GGUF_UINT8 = 0,
    RP_GGUF_INT8 = 1,
    RP_GGUF_UINT16 = 2,
    RP_GGUF_INT16 = 3,
    RP_GGUF_UINT32 = 4,
    RP_GGUF_INT32 = 5,
    RP_GGUF_FLOAT32 = 6,
    RP_GGUF_BOOL = 7,
    RP_GGUF_STRING = 8,
    RP_GGUF_ARRAY = 9,
    RP_GGUF_UINT64 = 10,
    RP_GGUF_INT64 = 11,
    RP_GGUF_FLOAT64 = 12,
    RP_GGUF_TYPE_COUNT
} rp_gguf_type;

#define RP_GGUF_MAX_DIMS 4

typedef struct rp_gguf_tensor {
    const char *name; /* borrowed, NOT NUL-terminated */
    size_t name_len;
    int n_dims;
    int64_t dims[RP_GGUF_MAX_DIMS]; /* ne[0] is the fastest-moving dimension; unused = 1 */
    uint32_t type;                  /* ggml type id */
    uint64_t offset;                /* relative to the data section */
    const void *data;               /* borrowed; NULL when the size is unknown */
    uint64_t n_bytes;               /* 0 when the ggml type is not known to this reader */
} rp_gguf_tensor;

typedef struct rp_gguf rp_gguf;

rp_status rp_gguf_open(const char *path, rp_gguf **out, rp_err *err);
/* Parses a buffer the caller keeps alive (tests, fuzzing). */
rp_status rp_gguf_open_mem(const void *data, size_t n_bytes, rp_gguf **out, rp_err *err);
void rp_gguf_close(rp_gguf *g);

uint32_t rp_gguf_version(const rp_gguf *g);
uint32_t rp_gguf_alignment(const rp_gguf *g);
uint64_t rp_gguf_data_offset(const rp_gguf *g); /* file offset of the data section */
const void *rp_gguf_base(const rp_gguf *g, size_t *n_bytes); /* the whole mapping */

/* Metadata by index (0..n_kv-1) or by key. rp_gguf_find returns -1 when absent. */
int64_t rp_gguf_n_kv(const rp_gguf *g);
int64_t rp_gguf_find(const rp_gguf *g, const char *key);
const char *rp_gguf_key(const rp_gguf *g, int64_t i, size_t *len);
rp_gguf_type rp_gguf_kv_type(const rp_gguf *g, int64_t i);
const char *rp_gguf_type_name(rp_gguf_type t);

/* Typed getters by key. Integers convert between widths when the value fits (a u8 key read
 * as i64 works; a negative i32 read as u32 does not: RP_ERR_INVALID); floats accept f32/f64;
 * bool accepts bool and integers. */
rp_status rp_gguf_get_i64(const rp_gguf *g, const char *key, int64_t *out, rp_err *err);
rp_status rp_gguf_get_u64(const rp_gguf *g, const char *key, uint64_t *out, rp_err *err);
rp_status rp_gguf_get_i32(const rp_gguf *g, const char *key, int32_t *out, rp_err *err);
rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out, rp_err *err);
rp_status rp_gguf_get_f64(const rp_gguf *g, const char *key, double *out, rp_err *err);
rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out, rp_err *err);
rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, int *out, rp_err *err);
/* Borrowed bytes, not NUL-terminated. */
rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, const char **s, size_t *len,
                          rp_err *err);
/* Heap copy, NUL-terminated (rp_free). */
rp_status rp_gguf_get_strdup(const rp_gguf *g, const char *key, char **out, rp_err *err);

/* Arrays: element type and count of the array at key. */
rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_type *elem_type,
                          uint64_t *n, rp_err *err);
/* Element i of the array in kv i_kv (no type conversion across int/float/string). Return
 * RP_ERR_INVALID when i_kv is not such an array or i is out of range. */
rp_status rp_gguf_arr_str(const rp_gguf *g, int64_t i_kv, uint64_t i, const char **s,
                          size_t *len);
rp_status rp_gguf_arr_i64(const rp_gguf *g, int64_t i_kv, uint64_t i, int64_t *out);
rp_status rp_gguf_arr_f64(const rp_gguf *g, int64_t i_kv, uint64_t i, double *out);
/* Raw element bytes of a numeric array (little-endian, possibly unaligned). */
const void *rp_gguf_arr_data(const rp_gguf *g, int64_t i_kv, size_t *elem_size, uint64_t *n);

/* Tensors. rp_gguf_find_tensor returns -1 when absent. */
int64_t rp_gguf_n_tensors(const rp_gguf *g);
int64_t rp_gguf_find_tensor(const rp_gguf *g, const char *name);
rp_status rp_gguf_tensor_info(const rp_gguf *g, int64_t i, rp_gguf_tensor *out);
/* Bytes of n elements of ggml type `type` (0 when unknown or n is not a block multiple). */
uint64_t rp_gguf_type_bytes(uint32_t type, int64_t n);

#endif
