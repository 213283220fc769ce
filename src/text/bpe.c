/* text/bpe.c - the tokenizer's models (BPE with merge ranks, WordPiece), the hash maps
 * they use (xxHash), and a per-call cache of pre-token words.
 *
 * BPE: a word becomes initial symbols (bytes for byte-level vocabularies, characters with
 * byte fallback otherwise), then the adjacent pair with the lowest merge rank is merged,
 * leftmost first on ties, until no pair has a rank (exactly HF's merge loop). Short words
 * use a scan; long ones a binary heap over a linked list, O(n log n).
 */
#include <stdatomic.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "text/tok_impl.h"
#include "text/unicode.h"

uint64_t tk_hash_bytes(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

/* ---- string table ---------------------------------------------------------------------- */

static rp_status strtab_grow(tk_strtab *t, int n)
{
    if (n <= t->n)
        return RP_OK;
    uint32_t *off = rp_realloc(t->off, (size_t)n * sizeof(*off));
    if (!off)
        return RP_ERR_NOMEM;
    t->off = off;
    uint32_t *len = rp_realloc(t->len, (size_t)n * sizeof(*len));
    if (!len)
        return RP_ERR_NOMEM;
    t->len = len;
    for (int i = t->n; i < n; i++)
        t->off[i] = 0, t->len[i] = UINT32_MAX;
    t->n = n;
    return RP_OK;
}

rp_status tk_strtab_reserve(tk_strtab *t, int n_entries, size_t pool_bytes)
{
    rp_status st = strtab_grow(t, n_entries);
    if (st)
        return st;
    if (pool_bytes > t->pool_cap) {
        char *p = rp_realloc(t->pool, pool_bytes);
        if (!p)
            return RP_ERR_NOMEM;
        t->pool = p;
        t->pool_cap = pool_bytes;
    }
    return RP_OK;
}

rp_status tk_strtab_set(tk_strtab *t, int i, const char *s, size_t n)
{
    if (i < 0 || n >= UINT32_MAX / 2)
        return RP_ERR_INVALID;
    if (i >= t->n) {
        int nn = t->n ? t->n : 1024;
        while (nn <= i)
            nn *= 2;
        rp_status st = strtab_grow(t, nn);
        if (st)
            return st;
    }
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 65536;
        while (cap < t->pool_len + n + 1)
            cap *= 2;
        if (cap > UINT32_MAX)
            return RP_ERR_LIMIT;
        char *p = rp_realloc(t->pool, cap);
        if (!p)
            return RP_ERR_NOMEM;
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, s, n);
    t->pool[t->pool_len + n] = 0;
    t->off[i] = (uint32_t)t->pool_len;
    t->len[i] = (uint32_t)n;
    t->pool_len += n + 1;
    return RP_OK;
}

const char *tk_strtab_get(const tk_strtab *t, int i, size_t *n)
{
    if (i < 0 || i >= t->n || t->len[i] == UINT32_MAX)
        return NULL;
    if (n)
        *n = t->len[i];
    return t->pool + t->off[i];
}

void tk_strtab_free(tk_strtab *t)
{
    rp_free(t->pool);
    rp_free(t->off);
    rp_free(t->len);
    memset(t, 0, sizeof(*t));
}

/* Pieces are short: an inlined hash of up to 16 bytes (two loads, one multiply-mix each),
 * XXH3 beyond. */
static inline uint64_t short_hash(const char *s, size_t n)
{
    if (n > 16)
        return XXH3_64bits(s, n);
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
    } else if (n >= 4) {
        uint32_t x, y;
        memcpy(&x, s, 4);
        memcpy(&y, s + n - 4, 4);
        a = x, b = y;
    } else if (n > 0) {
        a = (uint8_t)s[0] | ((uint64_t)(uint8_t)s[n / 2] << 8) | ((uint64_t)(uint8_t)s[n - 1] << 16);
    }
    uint64_t h = (a ^ 0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL;
    h ^= (b + n) * 0x94D049BB133111EBULL;
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD93ULL;
    return h ^ (h >> 32);
}

/* ---- string map ------------------------------------------------------------------------ */

/* A slot holds the hash, the table index and the string's place in the pool, so a lookup
 * touches the slot and the pool bytes only. */

rp_status tk_strmap_init(tk_strmap *m, uint32_t n_expected)
{
    uint32_t cap = 64;
    while (cap < n_expected + n_expected / 2 + 16u) /* load <= 2/3: a smaller table caches */
        cap *= 2;
    m->slots = rp_calloc(cap, sizeof(tk_strslot)); /* val 0 = empty (stored + 1) */
    if (!m->slots)
        return RP_ERR_NOMEM;
    m->cap = cap;
    m->n = 0;
    return RP_OK;
}

static rp_status strmap_rehash(tk_strmap *m)
{
    tk_strmap nm;
    rp_status st = tk_strmap_init(&nm, m->cap);
    if (st)
        return st;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].val)
            continue;
        uint32_t j = m->slots[i].hash & (nm.cap - 1);
        while (nm.slots[j].val)
            j = (j + 1) & (nm.cap - 1);
        nm.slots[j] = m->slots[i];
        nm.n++;
    }
    tk_strmap_free(m);
    *m = nm;
    return RP_OK;
}

static inline int key_eq(const char *a, const char *b, size_t n)
{
    if (n <= 8) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i])
                return 0;
        return 1;
    }
    return memcmp(a, b, n) == 0;
}

rp_status tk_strmap_put(tk_strmap *m, const tk_strtab *t, int i)
{
    size_t n;
    const char *s = tk_strtab_get(t, i, &n);
    if (!s)
        return RP_ERR_INVALID;
    if ((m->n + 1) * 3 > m->cap * 2) {
        rp_status st = strmap_rehash(m);
        if (st)
            return st;
    }
    uint32_t h = (uint32_t)short_hash(s, n);
    uint32_t j = h & (m->cap - 1);
    while (m->slots[j].val) {
        const tk_strslot *sl = &m->slots[j];
        if (sl->hash == h && sl->len == n && key_eq(t->pool + sl->off, s, n))
            return RP_OK; /* keep the first */
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tk_strslot){h, i + 1, t->off[i], (uint32_t)n};
    m->n++;
    return RP_OK;
}

uint32_t tk_strmap_hash(const char *s, size_t n)
{
    return (uint32_t)short_hash(s, n);
}

void tk_strmap_prefetch(const tk_strmap *m, uint32_t h)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[h & (m->cap - 1)]);
}

rp_status tk_strmap_put_all(tk_strmap *m, const tk_strtab *t, int *n_dups)
{
    uint32_t before = m->n, n_put = 0;
    /* in table order, with the slot of the entry 16 ahead prefetched: the inserts' cache
     * misses overlap */
    enum { AHEAD = 16 };
    for (int i = 0; i < t->n && i < AHEAD; i++)
        if (t->len[i] != UINT32_MAX)
            tk_strmap_prefetch(m, tk_strmap_hash(t->pool + t->off[i], t->len[i]));
    for (int i = 0; i < t->n; i++) {
        int a = i + AHEAD;
        if (a < t->n && t->len[a] != UINT32_MAX)
            tk_strmap_prefetch(m, tk_strmap_hash(t->pool + t->off[a], t->len[a]));
        if (t->len[i] != UINT32_MAX) {
            rp_status st = tk_strmap_put(m, t, i);
            if (st)
                return st;
            n_put++;
        }
    }
    if (n_dups)
        *n_dups = (int)(n_put - (m->n - before));
    return RP_OK;
}

int32_t tk_strmap_get(const tk_strmap *m, const tk_strtab *t, const char *s, size_t n)
{
    return tk_strmap_get_h(m, t, s, n, (uint32_t)short_hash(s, n));
}

int32_t tk_strmap_get_h(const tk_strmap *m, const tk_strtab *t, const char *s, size_t n,
                        uint32_t h)
{
    if (!m->cap)
        return -1;
    uint32_t j = h & (m->cap - 1);
    for (;;) {
        const tk_strslot *sl = &m->slots[j];
        if (!sl->val)
            return -1;
        if (sl->hash == h && sl->len == n && key_eq(t->pool + sl->off, s, n))
            return sl->val - 1;
        j = (j + 1) & (m->cap - 1);
    }
}

void tk_strmap_free(tk_strmap *m)
{
    rp_free(m->slots);
    memset(m, 0, sizeof(*m));
}

/* ---- merge map ------------------------------------------------------------------------- */

static inline uint32_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

rp_status tk_mergemap_init(tk_mergemap *m, uint32_t n_expected)
{
    uint32_t cap = 64;
    while (cap < n_expected + n_expected / 2 + 16u) /* load <= 2/3: a smaller table caches */
        cap *= 2;
    m->slots = rp_calloc(cap, sizeof(tk_merge)); /* key 0 = empty (keys are stored + 1) */
    if (!m->slots)
        return RP_ERR_NOMEM;
    m->cap = cap;
    m->n = 0;
    return RP_OK;
}

rp_status tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if ((m->n + 1) * 3 > m->cap * 2) {
        tk_mergemap nm;
        if (tk_mergemap_init(&nm, m->cap))
            return RP_ERR_NOMEM;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (m->slots[i].key == 0)
                continue;
            uint32_t j = mix64(m->slots[i].key) & (nm.cap - 1);
            while (nm.slots[j].key != 0)
                j = (j + 1) & (nm.cap - 1);
            nm.slots[j] = m->slots[i];
            nm.n++;
        }
        tk_mergemap_free(m);
        *m = nm;
    }
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t j = mix64(key) & (m->cap - 1);
    while (m->slots[j].key != 0) {
        if (m->slots[j].key == key) {
            if (rank < m->slots[j].rank) {
                m->slots[j].rank = rank;
                m->slots[j].id = id;
            }
            return RP_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j].key = key;
    m->slots[j].rank = rank;
    m->slots[j].id = id;
    m->n++;
    return RP_OK;
}

void tk_mergemap_prefetch(const tk_mergemap *m, int32_t a, int32_t b)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    if (m->cap)
        __builtin_prefetch(&m->slots[mix64(key) & (m->cap - 1)]);
}

const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t j = mix64(key) & (m->cap - 1);
    for (;;) {
        const tk_merge *s = &m->slots[j];
        if (s->key == key)
            return s;
        if (s->key == 0)
            return NULL;
        j = (j + 1) & (m->cap - 1);
    }
}

void tk_mergemap_free(tk_mergemap *m)
{
    rp_free(m->slots);
    memset(m, 0, sizeof(*m));
}

rp_status tk_ids_push(tk_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        int cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = rp_realloc(ids->v, (size_t)cap * sizeof(int32_t));
        if (!v)
            return RP_ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return RP_OK;
}

/* ---- word cache ------------------------------------------------------------------------ */

/* Per encode call: piece bytes -> ids, for pieces up to CACHE_MAX_KEY bytes. Slots are
 * single structs so that a probe costs one cache line; keys and ids live in pools. */
#define CACHE_MAX_KEY 48
#define CACHE_MAX_SLOTS (1u << 17)

static rp_status cache_get(tk_scratch *sc, const char *s, size_t n, uint64_t h, tk_ids *out,
                           int *hit)
{
    *hit = 0;
    if (!sc->c_cap)
        return RP_OK;
    uint32_t j = (uint32_t)(h >> 32) & (sc->c_cap - 1);
    for (;;) {
        const tk_cslot *c = &sc->cache[j];
        if (!c->n_ids)
            return RP_OK;
        if (c->hash == (uint32_t)(h >> 32) && c->key_len == n &&
            key_eq(sc->c_keys.data + c->key_off, s, n)) {
            if (out->n + c->n_ids > out->cap) {
                int cap = out->cap ? out->cap : 64;
                while (cap < out->n + c->n_ids)
                    cap *= 2;
                int32_t *v = rp_realloc(out->v, (size_t)cap * sizeof(int32_t));
                if (!v)
                    return RP_ERR_NOMEM;
                out->v = v;
                out->cap = cap;
            }
            if (c->n_ids == 1)
                out->v[out->n] = (int32_t)c->ids_off; /* a single id is kept in the slot */
            else
                memcpy(out->v + out->n, sc->c_ids + c->ids_off,
                       (size_t)c->n_ids * sizeof(int32_t));
            out->n += c->n_ids;
            *hit = 1;
            return RP_OK;
        }
        j = (j + 1) & (sc->c_cap - 1);
    }
}

static int cache_resize(tk_scratch *sc, uint32_t cap)
{
    tk_cslot *nc = rp_calloc(cap, sizeof(tk_cslot));
    if (!nc)
        return -1;
    for (uint32_t i = 0; i < sc->c_cap; i++) {
        if (!sc->cache[i].n_ids)
            continue;
        uint32_t j = sc->cache[i].hash & (cap - 1);
        while (nc[j].n_ids)
            j = (j + 1) & (cap - 1);
        nc[j] = sc->cache[i];
    }
    rp_free(sc->cache);
    sc->cache = nc;
    sc->c_cap = cap;
    return 0;
}

static void cache_put(tk_scratch *sc, const char *s, size_t n, uint64_t h, const int32_t *ids,
                      int n_ids)
{
    if (n_ids <= 0 || n_ids > 0xFFFF)
        return;
    if ((sc->c_used + 1) * 2 > sc->c_cap) {
        if (sc->c_cap >= CACHE_MAX_SLOTS || cache_resize(sc, sc->c_cap ? sc->c_cap * 2 : 4096))
            return;
    }
    if (n_ids > 1 && sc->c_ids_n + (uint32_t)n_ids > sc->c_ids_cap) {
        uint32_t cap = sc->c_ids_cap ? sc->c_ids_cap : 8192;
        while (cap < sc->c_ids_n + (uint32_t)n_ids)
            cap *= 2;
        int32_t *v = rp_realloc(sc->c_ids, (size_t)cap * sizeof(int32_t));
        if (!v)
            return;
        sc->c_ids = v;
        sc->c_ids_cap = cap;
    }
    uint32_t key_off = (uint32_t)sc->c_keys.len;
    if (rp_buf_append(&sc->c_keys, s, n))
        return;
    uint32_t j = (uint32_t)(h >> 32) & (sc->c_cap - 1);
    while (sc->cache[j].n_ids)
        j = (j + 1) & (sc->c_cap - 1);
    uint32_t ids_off = (uint32_t)ids[0];
    if (n_ids > 1) {
        memcpy(sc->c_ids + sc->c_ids_n, ids, (size_t)n_ids * sizeof(int32_t));
        ids_off = sc->c_ids_n;
        sc->c_ids_n += (uint32_t)n_ids;
    }
    sc->cache[j] = (tk_cslot){(uint32_t)(h >> 32), ids_off, key_off, (uint16_t)n_ids,
                              (uint16_t)n};
    sc->c_used++;
}

void tk_scratch_free(tk_scratch *sc)
{
    rp_buf_deinit(&sc->store);
    rp_free(sc->a.v);
    rp_free(sc->b.v);
    if (sc->md)
        pcre2_match_data_free(sc->md);
    rp_free(sc->cache);
    rp_buf_deinit(&sc->c_keys);
    rp_free(sc->c_ids);
    rp_free(sc->sym_id);
    rp_free(sc->sym_prev);
    rp_free(sc->sym_next);
    rp_free(sc->sym_len);
    rp_free(sc->heap);
    memset(sc, 0, sizeof(*sc));
}

/* ---- BPE ------------------------------------------------------------------------------- */

static rp_status sym_reserve(tk_scratch *sc, size_t n)
{
    if ((size_t)sc->sym_cap >= n)
        return RP_OK;
    if (n > INT32_MAX / 4)
        return RP_ERR_LIMIT;
    int cap = sc->sym_cap ? sc->sym_cap : 256;
    while ((size_t)cap < n)
        cap *= 2;
    int32_t *a = rp_realloc(sc->sym_id, (size_t)cap * sizeof(int32_t));
    if (!a)
        return RP_ERR_NOMEM;
    sc->sym_id = a;
    a = rp_realloc(sc->sym_prev, (size_t)cap * sizeof(int32_t));
    if (!a)
        return RP_ERR_NOMEM;
    sc->sym_prev = a;
    a = rp_realloc(sc->sym_next, (size_t)cap * sizeof(int32_t));
    if (!a)
        return RP_ERR_NOMEM;
    sc->sym_next = a;
    a = rp_realloc(sc->sym_len, (size_t)cap * sizeof(int32_t));
    if (!a)
        return RP_ERR_NOMEM;
    sc->sym_len = a;
    uint64_t *h = rp_realloc(sc->heap, (size_t)cap * 3 * sizeof(uint64_t));
    if (!h)
        return RP_ERR_NOMEM;
    sc->heap = h;
    sc->heap_cap = cap * 3;
    sc->sym_cap = cap;
    return RP_OK;
}

/* Initial symbols of a word. Returns the count in *n_sym. */
static rp_status bpe_initial(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                             int *n_sym)
{
    rp_status st = sym_reserve(sc, n + 1);
    if (st)
        return st;
    int k = 0;
    if (tok->byte_level) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = tok->byte_ids[(uint8_t)s[i]];
            if (id < 0) {
                if (tok->unk_id < 0)
                    continue;
                id = tok->unk_id;
            }
            sc->sym_id[k++] = id;
        }
        *n_sym = k;
        return RP_OK;
    }
    char tmp[64];
    size_t i = 0;
    int prev_unk = 0;
    while (i < n) {
        uint32_t cp;
        int l = rp_utf8_decode(s + i, n - i, &cp);
        if (!l)
            l = 1;
        int32_t id;
        if (i > 0 && tok->cont_prefix_len && tok->cont_prefix_len + (size_t)l <= sizeof(tmp)) {
            memcpy(tmp, tok->cont_prefix, tok->cont_prefix_len);
            memcpy(tmp + tok->cont_prefix_len, s + i, (size_t)l);
            id = tk_strmap_get(&tok->raw_map, tok->raw, tmp, tok->cont_prefix_len + (size_t)l);
        } else if (i + (size_t)l == n && tok->eow_suffix_len &&
                   tok->eow_suffix_len + (size_t)l <= sizeof(tmp)) {
            memcpy(tmp, s + i, (size_t)l);
            memcpy(tmp + l, tok->eow_suffix, tok->eow_suffix_len);
            id = tk_strmap_get(&tok->raw_map, tok->raw, tmp, tok->eow_suffix_len + (size_t)l);
        } else {
            id = tk_strmap_get(&tok->raw_map, tok->raw, s + i, (size_t)l);
        }
        if (id >= 0) {
            sc->sym_id[k++] = id;
            prev_unk = 0;
        } else {
            int done = 0;
            if (tok->byte_fallback) {
                int ok = 1;
                for (int b = 0; b < l; b++)
                    if (tok->byte_ids[(uint8_t)s[i + b]] < 0)
                        ok = 0;
                if (ok) {
                    for (int b = 0; b < l; b++)
                        sc->sym_id[k++] = tok->byte_ids[(uint8_t)s[i + b]];
                    done = 1;
                    prev_unk = 0;
                }
            }
            if (!done && tok->unk_id >= 0) {
                if (!(tok->fuse_unk && prev_unk))
                    sc->sym_id[k++] = tok->unk_id;
                prev_unk = 1;
            }
        }
        i += (size_t)l;
    }
    *n_sym = k;
    return RP_OK;
}

/* Short words: the rank of every adjacent pair is kept in an array, so each merge costs a
 * scan of that array and two lookups for the new neighbours. */
static void merge_small(const rp_tokenizer *tok, int32_t *ids, int *pn)
{
    int n = *pn;
    int32_t rank[64], merged[64];
    for (int i = 0; i + 1 < n; i++) /* the pairs' slots first: their misses overlap */
        tk_mergemap_prefetch(&tok->merges, ids[i], ids[i + 1]);
    for (int i = 0; i + 1 < n; i++) {
        const tk_merge *m = tk_mergemap_get(&tok->merges, ids[i], ids[i + 1]);
        rank[i] = m ? m->rank : INT32_MAX;
        merged[i] = m ? m->id : -1;
    }
    while (n > 1) {
        int32_t best = INT32_MAX;
        int pos = -1;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                pos = i;
            }
        if (pos < 0)
            break;
        ids[pos] = merged[pos];
        int tail = n - pos - 2;
        memmove(ids + pos + 1, ids + pos + 2, (size_t)tail * sizeof(int32_t));
        if (tail > 1) {
            memmove(rank + pos + 1, rank + pos + 2, (size_t)(tail - 1) * sizeof(int32_t));
            memmove(merged + pos + 1, merged + pos + 2, (size_t)(tail - 1) * sizeof(int32_t));
        }
        n--;
        /* pairs (pos-1, pos) and (pos, pos+1) changed */
        if (pos > 0) {
            const tk_merge *m = tk_mergemap_get(&tok->merges, ids[pos - 1], ids[pos]);
            rank[pos - 1] = m ? m->rank : INT32_MAX;
            merged[pos - 1] = m ? m->id : -1;
        }
        if (pos + 1 < n) {
            const tk_merge *m = tk_mergemap_get(&tok->merges, ids[pos], ids[pos + 1]);
            rank[pos] = m ? m->rank : INT32_MAX;
            merged[pos] = m ? m->id : -1;
        }
    }
    *pn = n;
}

static void heap_push(uint64_t *h, int *n, uint64_t v)
{
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, int *n)
{
    uint64_t top = h[0];
    uint64_t v = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = v;
    return top;
}

static rp_status merge_large(const rp_tokenizer *tok, tk_scratch *sc, int *pn)
{
    int n = *pn;
    int32_t *id = sc->sym_id, *prev = sc->sym_prev, *next = sc->sym_next;
    uint64_t *heap = sc->heap;
    int nh = 0;
    for (int i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < n; i++) {
        const tk_merge *m = tk_mergemap_get(&tok->merges, id[i], id[i + 1]);
        if (m)
            heap_push(heap, &nh, ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)i);
    }
    while (nh > 0) {
        uint64_t top = heap_pop(heap, &nh);
        int32_t rank = (int32_t)(top >> 32);
        int pos = (int)(uint32_t)top;
        if (id[pos] < 0 || next[pos] < 0)
            continue;
        int nx = next[pos];
        const tk_merge *m = tk_mergemap_get(&tok->merges, id[pos], id[nx]);
        if (!m || m->rank != rank)
            continue;
        id[pos] = m->id;
        id[nx] = -1;
        next[pos] = next[nx];
        if (next[nx] >= 0)
            prev[next[nx]] = pos;
        if (nh + 2 > sc->heap_cap)
            return RP_ERR_LIMIT; /* cannot happen: at most n-1 live merges + stale ones */
        if (prev[pos] >= 0) {
            const tk_merge *pm = tk_mergemap_get(&tok->merges, id[prev[pos]], id[pos]);
            if (pm)
                heap_push(heap, &nh, ((uint64_t)(uint32_t)pm->rank << 32) | (uint32_t)prev[pos]);
        }
        if (next[pos] >= 0) {
            const tk_merge *nm = tk_mergemap_get(&tok->merges, id[pos], id[next[pos]]);
            if (nm)
                heap_push(heap, &nh, ((uint64_t)(uint32_t)nm->rank << 32) | (uint32_t)pos);
        }
    }
    int k = 0;
    for (int i = 0; i >= 0 && i < n; i = next[i])
        id[k++] = id[i];
    *pn = k;
    return RP_OK;
}

static rp_status bpe_word(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                          tk_ids *out)
{
    if (tok->ignore_merges) {
        int32_t id = tk_strmap_get(&tok->raw_map, tok->raw, s, n);
        if (id >= 0)
            return tk_ids_push(out, id);
    }
    int k;
    rp_status st = bpe_initial(tok, sc, s, n, &k);
    if (st)
        return st;
    if (k <= 48)
        merge_small(tok, sc->sym_id, &k);
    else if ((st = merge_large(tok, sc, &k)))
        return st;
    for (int i = 0; i < k; i++)
        if ((st = tk_ids_push(out, sc->sym_id[i])))
            return st;
    return RP_OK;
}

/* ---- WordPiece ------------------------------------------------------------------------- */

static rp_status wordpiece_word(const rp_tokenizer *tok, const char *s, size_t n, tk_ids *out)
{
    size_t n_chars = 0;
    for (size_t i = 0; i < n; i++)
        n_chars += ((uint8_t)s[i] & 0xC0) != 0x80;
    int start_n = out->n;
    if ((int)n_chars > tok->wp_max_chars)
        return tk_ids_push(out, tok->unk_id);
    char buf[512];
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        int32_t found = -1;
        while (end > start) {
            const char *k = s + start;
            size_t kl = end - start;
            if (start > 0) {
                if (tok->cont_prefix_len + kl > sizeof(buf)) {
                    end--;
                    continue;
                }
                memcpy(buf, tok->cont_prefix, tok->cont_prefix_len);
                memcpy(buf + tok->cont_prefix_len, s + start, kl);
                k = buf;
                kl += tok->cont_prefix_len;
            }
            found = tk_strmap_get(&tok->raw_map, tok->raw, k, kl);
            if (found >= 0)
                break;
            /* step back one character */
            end--;
            while (end > start && ((uint8_t)s[end] & 0xC0) == 0x80)
                end--;
        }
        if (found < 0) {
            out->n = start_n;
            return tk_ids_push(out, tok->unk_id);
        }
        rp_status st = tk_ids_push(out, found);
        if (st)
            return st;
        start = end;
    }
    return RP_OK;
}

/* ---- shared word cache ----------------------------------------------------------------- */

/* One per tokenizer, shared by all threads: direct-mapped entries of one cache line, each a
 * seqlock (seq odd while written, 0 never written) over relaxed atomic words, so readers
 * never block and never see a torn entry. Pieces up to 16 bytes with up to 4 ids. */
struct tk_shared_cache {
    tk_sentry e[TK_SHARED_CACHE_N];
};

tk_shared_cache *tk_shared_cache_new(void)
{
    tk_shared_cache *c = rp_alloc_aligned(sizeof(tk_shared_cache), RP_TAG_TEXT);
    if (!c)
        return NULL;
    memset(c, 0, sizeof(*c));
    return c;
}

void tk_shared_cache_free(tk_shared_cache *c)
{
    if (c)
        rp_free_aligned(c);
}

static void key_words(const char *s, size_t n, uint64_t k[2])
{
    k[0] = k[1] = 0;
    memcpy(k, s, n); /* n <= 16 */
}

static int entry_get(const tk_sentry *e, const char *s, size_t n, uint64_t h, tk_ids *out)
{
    uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (s1 == 0 || (s1 & 1))
        return 0;
    uint64_t eh = atomic_load_explicit(&e->w[0], memory_order_relaxed);
    uint64_t meta = atomic_load_explicit(&e->w[1], memory_order_relaxed);
    uint64_t k0 = atomic_load_explicit(&e->w[2], memory_order_relaxed);
    uint64_t k1 = atomic_load_explicit(&e->w[3], memory_order_relaxed);
    uint64_t i0 = atomic_load_explicit(&e->w[4], memory_order_relaxed);
    uint64_t i1 = atomic_load_explicit(&e->w[5], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1)
        return 0;
    uint64_t k[2];
    key_words(s, n, k);
    if (eh != h || (meta & 0xFF) != n || k0 != k[0] || k1 != k[1])
        return 0;
    int n_ids = (int)(meta >> 8);
    if (n_ids < 1 || n_ids > 4)
        return 0;
    uint32_t ids[4] = {(uint32_t)i0, (uint32_t)(i0 >> 32), (uint32_t)i1, (uint32_t)(i1 >> 32)};
    for (int i = 0; i < n_ids; i++)
        if (tk_ids_push(out, (int32_t)ids[i]))
            return -1;
    return 1;
}

/* Two-way sets: a piece may sit in either entry of its pair. */
static int shared_get(const tk_shared_cache *c, const char *s, size_t n, uint64_t h, tk_ids *out)
{
    uint32_t i = (uint32_t)h & (TK_SHARED_CACHE_N - 2);
    int r = entry_get(&c->e[i], s, n, h, out);
    return r ? r : entry_get(&c->e[i + 1], s, n, h, out);
}

static void shared_put(tk_shared_cache *c, const char *s, size_t n, uint64_t h,
                       const int32_t *ids, int n_ids)
{
    if (n_ids < 1 || n_ids > 4)
        return;
    uint32_t i = (uint32_t)h & (TK_SHARED_CACHE_N - 2);
    /* an empty entry of the pair first, else the one picked by another hash bit */
    if (atomic_load_explicit(&c->e[i].seq, memory_order_relaxed) != 0)
        i += atomic_load_explicit(&c->e[i + 1].seq, memory_order_relaxed) == 0 ? 1
                                                                               : (h >> 40) & 1;
    tk_sentry *e = &c->e[i];
    uint64_t s0 = atomic_load_explicit(&e->seq, memory_order_relaxed);
    if ((s0 & 1) || !atomic_compare_exchange_strong_explicit(&e->seq, &s0, s0 + 1,
                                                              memory_order_acq_rel,
                                                              memory_order_relaxed))
        return; /* another writer is on it: skip */
    atomic_thread_fence(memory_order_release);
    uint64_t k[2];
    key_words(s, n, k);
    uint32_t v[4] = {0, 0, 0, 0};
    for (int i = 0; i < n_ids; i++)
        v[i] = (uint32_t)ids[i];
    atomic_store_explicit(&e->w[0], h, memory_order_relaxed);
    atomic_store_explicit(&e->w[1], (uint64_t)n | ((uint64_t)n_ids << 8), memory_order_relaxed);
    atomic_store_explicit(&e->w[2], k[0], memory_order_relaxed);
    atomic_store_explicit(&e->w[3], k[1], memory_order_relaxed);
    atomic_store_explicit(&e->w[4], v[0] | ((uint64_t)v[1] << 32), memory_order_relaxed);
    atomic_store_explicit(&e->w[5], v[2] | ((uint64_t)v[3] << 32), memory_order_relaxed);
    atomic_store_explicit(&e->seq, s0 + 2, memory_order_release);
}

static rp_status model_piece(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                             tk_ids *out);

#define META "\xe2\x96\x81" /* U+2581, SentencePiece's space */

static int is_meta(const char *s)
{
    return s[0] == '\xe2' && s[1] == '\x96' && s[2] == '\x81';
}

/* A boundary before the U+2581 at s[p] (preceded by another character) is crossed only by
 * the vocabulary's few "bad" tokens, those holding U+2581 after another character. */
static int meta_boundary_safe(const rp_tokenizer *tok, const char *s, size_t n, size_t p)
{
    for (int i = 0; i < tok->n_spm_bad; i++) {
        size_t l = 0;
        const char *t = tk_strtab_get(tok->raw, tok->spm_bad[i], &l);
        for (size_t j = 1; j + 3 <= l; j++) {
            if (!is_meta(t + j) || j > p || p - j + l > n)
                continue;
            if (memcmp(s + p - j, t, l) == 0)
                return 0;
        }
    }
    return 1;
}

void tk_spm_split_init(rp_tokenizer *tok)
{
    tok->spm_split = 0;
    tok->n_spm_bad = 0;
    if (tok->model != TK_MODEL_BPE || tok->byte_level ||
        tk_strmap_get(&tok->raw_map, tok->raw, META, 3) < 0)
        return;
    for (int i = 0; i < tok->n_vocab; i++) {
        size_t l;
        const char *t = tk_strtab_get(tok->raw, i, &l);
        if (!t)
            continue;
        for (size_t j = 1; j + 3 <= l; j++) {
            if (!is_meta(t + j))
                continue;
            if (j >= 3 && is_meta(t + j - 3))
                continue;
            if (tok->n_spm_bad == (int)RP_ARRAY_LEN(tok->spm_bad))
                return; /* too many: no splitting */
            tok->spm_bad[tok->n_spm_bad++] = i;
            break;
        }
    }
    tok->spm_split = 1;
}

/* SentencePiece-style BPE has no pre-tokenizer: the model sees whole sections. Merges never
 * cross a boundary before U+2581 (after another character) that no vocabulary token spans,
 * so the model runs on the pieces between such boundaries: identical ids, linear time, and
 * the word caches work. */
rp_status tk_model_encode(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                          tk_ids *out)
{
    if (!tok->spm_split || n < 4)
        return model_piece(tok, sc, s, n, out);
    size_t start = 0;
    for (size_t p = 1; p + 3 <= n; p++) {
        if (!is_meta(s + p) || (p >= 3 && is_meta(s + p - 3)) ||
            (tok->n_spm_bad && !meta_boundary_safe(tok, s, n, p)))
            continue;
        rp_status st = model_piece(tok, sc, s + start, p - start, out);
        if (st)
            return st;
        start = p;
        p += 2;
    }
    return model_piece(tok, sc, s + start, n - start, out);
}

static rp_status model_piece_h(const rp_tokenizer *tok, tk_scratch *sc, const char *s,
                               size_t n, uint64_t h, tk_ids *out);

static rp_status model_piece(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                             tk_ids *out)
{
    if (n == 0)
        return RP_OK;
    if (tok->model == TK_MODEL_WORDPIECE)
        return wordpiece_word(tok, s, n, out);
    if (n > CACHE_MAX_KEY)
        return bpe_word(tok, sc, s, n, out);
    return model_piece_h(tok, sc, s, n, short_hash(s, n), out);
}

/* Pieces in batches: the hashes of a batch are computed first and the cache lines they will
 * probe prefetched, so that the (mostly missing) cache loads of a batch overlap instead of
 * each piece waiting for its own. */
#define PIECE_BATCH 32

rp_status tk_model_encode_pieces(const rp_tokenizer *tok, tk_scratch *sc, const char *base,
                                 const tk_piece *v, int n, tk_ids *out)
{
    rp_status st = RP_OK;
    if (tok->model != TK_MODEL_BPE || tok->spm_split) {
        for (int i = 0; i < n && !st; i++)
            st = tk_model_encode(tok, sc, base + v[i].off, v[i].len, out);
        return st;
    }
    uint64_t h[PIECE_BATCH];
    for (int b = 0; b < n && !st; b += PIECE_BATCH) {
        int k = n - b < PIECE_BATCH ? n - b : PIECE_BATCH;
        for (int i = 0; i < k; i++) {
            const tk_piece *pc = &v[b + i];
            if (pc->len == 0 || pc->len > CACHE_MAX_KEY)
                continue;
            h[i] = short_hash(base + pc->off, pc->len);
            if (pc->len <= 16 && tok->shared_cache) {
                uint32_t si = (uint32_t)h[i] & (TK_SHARED_CACHE_N - 2);
                const tk_sentry *e = &tok->shared_cache->e[si];
                __builtin_prefetch(e);
                __builtin_prefetch(e + 1);
            } else if (sc->c_cap) {
                __builtin_prefetch(&sc->cache[(uint32_t)(h[i] >> 32) & (sc->c_cap - 1)]);
            }
        }
        for (int i = 0; i < k && !st; i++) {
            const tk_piece *pc = &v[b + i];
            if (pc->len == 0)
                continue;
            if (pc->len > CACHE_MAX_KEY)
                st = bpe_word(tok, sc, base + pc->off, pc->len, out);
            else
                st = model_piece_h(tok, sc, base + pc->off, pc->len, h[i], out);
        }
    }
    return st;
}

static rp_status model_piece_h(const rp_tokenizer *tok, tk_scratch *sc, const char *s,
                               size_t n, uint64_t h, tk_ids *out)
{
    /* shared cache first (pieces <= 16 bytes), then this call's cache, then BPE */
    int shared = n <= 16 && tok->shared_cache;
    if (shared) {
        int r = shared_get(tok->shared_cache, s, n, h, out);
        if (r)
            return r < 0 ? RP_ERR_NOMEM : RP_OK;
    }
    int hit;
    rp_status st = cache_get(sc, s, n, h, out, &hit);
    if (st || hit)
        return st;
    int before = out->n;
    if ((st = bpe_word(tok, sc, s, n, out)))
        return st;
    if (shared && out->n - before <= 4)
        shared_put(tok->shared_cache, s, n, h, out->v + before, out->n - before);
    cache_put(sc, s, n, h, out->v + before, out->n - before);
    return RP_OK;
}
