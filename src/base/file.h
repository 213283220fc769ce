/* base/file.h - whole-file reads, read-only memory maps and small path helpers.
 *
 * Ownership: rp_file_read returns a NUL-terminated heap buffer (rp_free). rp_mmap_open maps a
 *            file read-only; the mapping lives until rp_mmap_close.
 * Threading: any thread.
 * Errors:    RP_ERR_NOT_FOUND (no such file), RP_ERR_IO (anything else), RP_ERR_NOMEM.
 */
#ifndef RP_BASE_FILE_H
#define RP_BASE_FILE_H

#include <stddef.h>

#include "base/status.h"

typedef struct rp_mmap {
    const void *data;
    size_t n_bytes;
} rp_mmap;

rp_status rp_file_read(const char *path, char **out, size_t *out_len, rp_err *err);
rp_status rp_file_write(const char *path, const void *data, size_t n, rp_err *err);
rp_status rp_mmap_open(const char *path, rp_mmap *out, rp_err *err);
void rp_mmap_close(rp_mmap *m);

int rp_path_exists(const char *path);
int rp_path_is_dir(const char *path);
/* Joins a and b with one '/'; heap string (rp_free), NULL on OOM. */
char *rp_path_join(const char *a, const char *b);

#endif
