/* base/arena.h - bump allocator for per-request and per-render memory, with cleanup handlers.
 *
 * Memory comes from chunks that are freed together by rp_arena_free. Non-memory resources
 * register a cleanup with rp_arena_on_free; cleanups run in reverse order of registration.
 *
 * Ownership: everything allocated from an arena lives until rp_arena_free(arena).
 * Threading: one thread at a time per arena.
 * Errors:    allocation returns NULL when memory runs out.
 */
#ifndef RP_BASE_ARENA_H
#define RP_BASE_ARENA_H

#include <stddef.h>

typedef struct rp_arena rp_arena;

rp_arena *rp_arena_new(size_t chunk_bytes); /* 0 = default (16 KiB) */
void rp_arena_free(rp_arena *a);             /* NULL ok */
void *rp_arena_alloc(rp_arena *a, size_t n_bytes); /* 16-byte aligned, zeroed */
char *rp_arena_strndup(rp_arena *a, const char *s, size_t n);
char *rp_arena_strdup(rp_arena *a, const char *s);
int rp_arena_on_free(rp_arena *a, void (*fn)(void *), void *data); /* 0 ok, -1 nomem */
size_t rp_arena_used(const rp_arena *a);

#define RP_ARENA_NEW(a, type, count) ((type *)rp_arena_alloc((a), sizeof(type) * (size_t)(count)))

#endif
