/* model/safetensors.h - Hugging Face safetensors checkpoints, single file or sharded.
 *
 * Format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N,
 * N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"},
 * then the tensor bytes (offsets relative to the end of the header). A sharded checkpoint has
 * model.safetensors.index.json whose "weight_map" names the shard of every tensor.
 *
 * Every file is mmap'd read-only; tensors are views into the maps (never copied).
 *
 * Ownership: rp_st_open -> rp_st_close; tensor views live as long as the rp_st.
 * Threading: immutable after open.
 * Errors:    RP_ERR_NOT_FOUND (no weights file), RP_ERR_INVALID (malformed header, offsets out
 *            of bounds, size not matching the shape; the message names file and tensor).
 */
#ifndef RP_MODEL_SAFETENSORS_H
#define RP_MODEL_SAFETENSORS_H

#include <stdint.h>

#include "backend/backend.h"
#include "base/status.h"

typedef struct rp_st rp_st;

typedef struct rp_st_tensor {
    const char *name;
    char dtype[8];  /* as in the file: F32, F16, BF16, U32, I8, ... */
    int known;      /* 1 when dtype maps to an rp_dtype (t.dtype valid) */
    rp_tensor t;    /* data/n_bytes/shape always set; dtype only when known */
} rp_st_tensor;

/* dir: a model directory (model.safetensors, or the index and its shards). */
rp_status rp_st_open(const char *dir, rp_st **out, rp_err *err);
void rp_st_close(rp_st *st);

int rp_st_count(const rp_st *st);
const rp_st_tensor *rp_st_at(const rp_st *st, int i);
const rp_st_tensor *rp_st_find(const rp_st *st, const char *name); /* NULL: absent */
/* A checkpoint filled by another loader (model/gguf_model.c): rp_st_new, rp_st_add for each
 * tensor (a view; `owned`, may be NULL, is rp_free'd at close), rp_st_on_close for the
 * container the views point into, then rp_st_finish (sorts, rejects duplicates). */
rp_st *rp_st_new(void);
rp_status rp_st_add(rp_st *st, const char *name, const char *dtype, int known,
                    const rp_tensor *t, void *owned, rp_err *err);
void rp_st_on_close(rp_st *st, void (*fn)(void *), void *ctx);
rp_status rp_st_finish(rp_st *st, rp_err *err);

/* Mutable views, for loaders that reinterpret raw tensors at open (model/mlx.c). */
rp_st_tensor *rp_st_at_mut(rp_st *st, int i);
rp_st_tensor *rp_st_find_mut(rp_st *st, const char *name);

#endif
