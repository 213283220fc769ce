/* base/alloc.h - the allocation choke point.
 *
 * Every heap allocation in rapid goes through these functions, so that byte counters per tag
 * feed /metrics, tests can make the N-th allocation fail (OOM sweeps), and the allocator can be
 * swapped in one place. Sizes are tracked in a small header before each block.
 *
 * Ownership: rp_alloc/rp_calloc/rp_realloc/rp_strdup results are freed with rp_free (NULL ok).
 * Threading: any thread; counters are atomic.
 * Errors:    allocation functions return NULL on failure; callers turn that into RP_ERR_NOMEM.
 */
#ifndef RP_BASE_ALLOC_H
#define RP_BASE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef enum rp_alloc_tag {
    RP_TAG_MISC = 0,
    RP_TAG_MODEL,   /* weights converted at load, activations */
    RP_TAG_KV,      /* KV cache */
    RP_TAG_REQUEST, /* per-request memory */
    RP_TAG_TEXT,    /* tokenizer, templates */
    RP_TAG_COUNT
} rp_alloc_tag;

void *rp_alloc(size_t n_bytes);
void *rp_calloc(size_t n, size_t size);
void *rp_realloc(void *p, size_t n_bytes);
char *rp_strdup(const char *s);
char *rp_strndup(const char *s, size_t n);
void rp_free(void *p);

/* Tagged variants count their bytes under `tag`. */
void *rp_alloc_tagged(size_t n_bytes, rp_alloc_tag tag);
/* 64-byte aligned (for SIMD rows); free with rp_free_aligned. */
void *rp_alloc_aligned(size_t n_bytes, rp_alloc_tag tag);
void rp_free_aligned(void *p);

/* Live bytes per tag and in total (all tags). */
int64_t rp_alloc_live_bytes(rp_alloc_tag tag);
int64_t rp_alloc_live_total(void);
/* Number of successful allocations so far (for "the decode step allocates nothing" tests). */
int64_t rp_alloc_count(void);

/* Test hook: the n-th allocation from now fails (1 = the next one); 0 disables. */
void rp_alloc_fail_after(int64_t n);

#endif
