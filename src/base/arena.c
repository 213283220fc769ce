/* base/arena.c - chunked bump allocator. Large requests get a chunk of their own. */
#include "base/arena.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

typedef struct chunk {
    struct chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
} chunk;

typedef struct cleanup {
    struct cleanup *next;
    void (*fn)(void *);
    void *data;
} cleanup;

struct rp_arena {
    chunk *head;
    cleanup *cleanups;
    size_t chunk_bytes;
    size_t used;
};

rp_arena *rp_arena_new(size_t chunk_bytes)
{
    rp_arena *a = rp_calloc(1, sizeof *a);
    if (a)
        a->chunk_bytes = chunk_bytes ? chunk_bytes : 16384;
    return a;
}

void rp_arena_free(rp_arena *a)
{
    if (!a)
        return;
    for (cleanup *c = a->cleanups; c; c = c->next)
        c->fn(c->data);
    for (chunk *c = a->head; c;) {
        chunk *next = c->next;
        rp_free(c);
        c = next;
    }
    rp_free(a);
}

void *rp_arena_alloc(rp_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > a->chunk_bytes ? n : a->chunk_bytes;
        if (cap > SIZE_MAX - sizeof(chunk))
            return NULL;
        chunk *nc = rp_alloc_tagged(sizeof(chunk) + cap, RP_TAG_REQUEST);
        if (!nc)
            return NULL;
        nc->cap = cap;
        nc->used = 0;
        if (c && n > a->chunk_bytes) { /* big block: keep filling the current chunk */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *rp_arena_strndup(rp_arena *a, const char *s, size_t n)
{
    char *d = rp_arena_alloc(a, n + 1);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *rp_arena_strdup(rp_arena *a, const char *s) { return rp_arena_strndup(a, s, strlen(s)); }

int rp_arena_on_free(rp_arena *a, void (*fn)(void *), void *data)
{
    cleanup *c = rp_arena_alloc(a, sizeof *c);
    if (!c)
        return -1;
    c->fn = fn;
    c->data = data;
    c->next = a->cleanups;
    a->cleanups = c;
    return 0;
}

size_t rp_arena_used(const rp_arena *a) { return a->used; }
