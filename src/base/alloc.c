/* base/alloc.c - malloc wrapper with per-tag counters and an OOM test hook.
 *
 * Each block carries a 16-byte header {size, tag} so rp_free can update the counters without
 * the caller passing sizes. Aligned blocks use posix_memalign and a header of 64 bytes.
 */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct hdr {
    uint64_t n_bytes;
    uint32_t tag;
    uint32_t magic;
} hdr;
_Static_assert(sizeof(hdr) == 16, "header keeps 16-byte alignment");

#define MAGIC_PLAIN 0x52504131u
#define MAGIC_ALIGNED 0x52504132u
#define ALIGNED_HDR 64

static _Atomic int64_t g_live[RP_TAG_COUNT];
static _Atomic int64_t g_count;
static _Atomic int64_t g_fail_after;

static int should_fail(void)
{
    int64_t n = atomic_load(&g_fail_after);
    if (n <= 0)
        return 0;
    if (atomic_fetch_sub(&g_fail_after, 1) == 1)
        return 1;
    return 0;
}

static void account(rp_alloc_tag tag, int64_t delta)
{
    atomic_fetch_add(&g_live[tag], delta);
}

void *rp_alloc_tagged(size_t n_bytes, rp_alloc_tag tag)
{
    if (should_fail() || n_bytes > SIZE_MAX - sizeof(hdr))
        return NULL;
    hdr *h = malloc(sizeof(hdr) + n_bytes);
    if (!h)
        return NULL;
    h->n_bytes = n_bytes;
    h->tag = tag;
    h->magic = MAGIC_PLAIN;
    account(tag, (int64_t)n_bytes);
    atomic_fetch_add(&g_count, 1);
    return h + 1;
}

void *rp_alloc(size_t n_bytes) { return rp_alloc_tagged(n_bytes, RP_TAG_MISC); }

void *rp_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = rp_alloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void rp_free(void *p)
{
    if (!p)
        return;
    hdr *h = (hdr *)p - 1;
    if (h->magic != MAGIC_PLAIN)
        abort(); /* freed twice, or not ours: a bug */
    h->magic = 0;
    account(h->tag, -(int64_t)h->n_bytes);
    free(h);
}

void *rp_realloc(void *p, size_t n_bytes)
{
    if (!p)
        return rp_alloc(n_bytes);
    if (should_fail() || n_bytes > SIZE_MAX - sizeof(hdr))
        return NULL;
    hdr *h = (hdr *)p - 1;
    if (h->magic != MAGIC_PLAIN)
        abort();
    uint64_t old = h->n_bytes;
    hdr *nh = realloc(h, sizeof(hdr) + n_bytes);
    if (!nh)
        return NULL;
    nh->n_bytes = n_bytes;
    account(nh->tag, (int64_t)n_bytes - (int64_t)old);
    atomic_fetch_add(&g_count, 1);
    return nh + 1;
}

char *rp_strndup(const char *s, size_t n)
{
    char *d = rp_alloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *rp_strdup(const char *s) { return rp_strndup(s, strlen(s)); }

void *rp_alloc_aligned(size_t n_bytes, rp_alloc_tag tag)
{
    if (should_fail() || n_bytes > SIZE_MAX - ALIGNED_HDR)
        return NULL;
    void *raw = NULL;
    if (posix_memalign(&raw, 64, ALIGNED_HDR + n_bytes) != 0)
        return NULL;
    hdr *h = (hdr *)((char *)raw + ALIGNED_HDR - sizeof(hdr));
    h->n_bytes = n_bytes;
    h->tag = tag;
    h->magic = MAGIC_ALIGNED;
    account(tag, (int64_t)n_bytes);
    atomic_fetch_add(&g_count, 1);
    return (char *)raw + ALIGNED_HDR;
}

void rp_free_aligned(void *p)
{
    if (!p)
        return;
    hdr *h = (hdr *)((char *)p - sizeof(hdr));
    if (h->magic != MAGIC_ALIGNED)
        abort();
    h->magic = 0;
    account(h->tag, -(int64_t)h->n_bytes);
    free((char *)p - ALIGNED_HDR);
}

int64_t rp_alloc_live_bytes(rp_alloc_tag tag) { return atomic_load(&g_live[tag]); }

int64_t rp_alloc_live_total(void)
{
    int64_t t = 0;
    for (int i = 0; i < RP_TAG_COUNT; i++)
        t += atomic_load(&g_live[i]);
    return t;
}

int64_t rp_alloc_count(void) { return atomic_load(&g_count); }

void rp_alloc_fail_after(int64_t n) { atomic_store(&g_fail_after, n); }
