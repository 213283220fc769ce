/* model/kv_cache.c - the paged KV cache: block pool, block tables, prefix index, snapshots
 * (design notes in kv_cache.h). */
#include "model/kv_cache.h"

#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/log.h"
#include "model/model_impl.h"

#define BT RP_KV_BLOCK_TOKENS
#define ROOT_SEED 0x9e3779b97f4a7c15ull

struct rp_kv_pool {
    rp_model *model;
    rp_kv_layout layout;
    int n_blocks;
    int prefix;
    int32_t *ref;
    uint8_t *cached;
    uint64_t *hash;
    int32_t *parent;     /* -1: the first block of a sequence */
    uint32_t *parent_gen;
    uint32_t *gen;       /* bumped whenever the block stops holding what it held */
    int32_t *hnext;      /* hash bucket chain */
    int32_t *lru_prev, *lru_next;
    int32_t *tokens;     /* [n_blocks][BT] */
    rp_kv_snap **snap;   /* hybrids: the recurrent state at the block's end (or NULL) */
    int32_t *buckets;
    uint32_t bucket_mask;
    int32_t *free_stack;
    int n_free;
    int lru_head, lru_tail, n_lru;
    int n_cached;
    int64_t n_evicted;
};

/* ---- geometry ---------------------------------------------------------------------------- */

rp_status rp_kv_probe(rp_model *m, rp_err *err)
{
    m->kv_layer = rp_alloc(sizeof(int) * (size_t)(m->cfg.n_layers ? m->cfg.n_layers : 1));
    if (!m->kv_layer)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int l = 0; l < m->cfg.n_layers; l++)
        m->kv_layer[l] = l;
    m->n_kv_layers = m->cfg.n_layers;
    rp_kv probe = {.model = m, .probe = 1};
    return m->arch->kv_init(m, &probe, err);
}

size_t rp_kv_block_bytes(const rp_model *m, rp_kv_dtype dt)
{
    size_t row = rp_kv_row_bytes(dt, m->cfg.head_dim);
    return row * (size_t)m->cfg.n_kv_heads * BT * 2 * (size_t)(m->n_kv_layers ? m->n_kv_layers : 1);
}

/* ---- the pool ---------------------------------------------------------------------------- */

static void lru_unlink(rp_kv_pool *p, int b)
{
    int pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx; else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr; else p->lru_tail = pr;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_lru--;
}

static void lru_append(rp_kv_pool *p, int b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b; else p->lru_head = b;
    p->lru_tail = b;
    p->n_lru++;
}

static void index_remove(rp_kv_pool *p, int b)
{
    int32_t *pp = &p->buckets[p->hash[b] & p->bucket_mask];
    while (*pp != b) {
        RP_ASSERT(*pp >= 0);
        pp = &p->hnext[*pp];
    }
    *pp = p->hnext[b];
    p->cached[b] = 0;
    p->gen[b]++;
    p->n_cached--;
    rp_kv_snapshot_free(p->snap[b]);
    p->snap[b] = NULL;
}

/* A block for writing (ref 1): a free one, else the least recently used unreferenced cached
 * one (evicted); -1 when there is neither. */
static int block_alloc(rp_kv_pool *p)
{
    int b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_unlink(p, b);
        index_remove(p, b);
        p->n_evicted++;
    } else {
        return -1;
    }
    p->ref[b] = 1;
    return b;
}

static void block_ref(rp_kv_pool *p, int b)
{
    if (p->ref[b]++ == 0)
        lru_unlink(p, b); /* only cached blocks are found unreferenced */
}

static void block_unref(rp_kv_pool *p, int b)
{
    RP_ASSERT(p->ref[b] > 0);
    if (--p->ref[b] > 0)
        return;
    if (p->cached[b])
        lru_append(p, b);
    else
        p->free_stack[p->n_free++] = b;
}

static int index_find(const rp_kv_pool *p, uint64_t h, int parent, const int32_t *toks)
{
    for (int b = p->buckets[h & p->bucket_mask]; b >= 0; b = p->hnext[b])
        if (p->hash[b] == h && p->parent[b] == parent &&
            (parent < 0 || p->parent_gen[b] == p->gen[parent]) &&
            memcmp(p->tokens + (size_t)b * BT, toks, sizeof(int32_t) * BT) == 0)
            return b;
    return -1;
}

static void index_insert(rp_kv_pool *p, int b, uint64_t h, int parent, const int32_t *toks)
{
    p->cached[b] = 1;
    p->hash[b] = h;
    p->parent[b] = parent;
    p->parent_gen[b] = parent >= 0 ? p->gen[parent] : 0;
    memcpy(p->tokens + (size_t)b * BT, toks, sizeof(int32_t) * BT);
    int32_t *bk = &p->buckets[h & p->bucket_mask];
    p->hnext[b] = *bk;
    *bk = b;
    p->n_cached++;
}

static uint64_t chain_hash(uint64_t parent_hash, const int32_t *toks)
{
    return XXH64(toks, sizeof(int32_t) * BT, parent_hash);
}

void rp_kv_pool_free(rp_kv_pool *p)
{
    if (!p)
        return;
    if (p->snap)
        for (int b = 0; b < p->n_blocks; b++)
            rp_kv_snapshot_free(p->snap[b]);
    rp_backend_buf_free(p->model->be, p->layout.base);
    void *arrays[] = {p->ref,      p->cached,   p->hash,     p->parent,   p->parent_gen,
                      p->gen,      p->hnext,    p->lru_prev, p->lru_next, p->tokens,
                      p->snap,     p->buckets,  p->free_stack};
    for (size_t i = 0; i < RP_ARRAY_LEN(arrays); i++)
        rp_free(arrays[i]);
    rp_free(p);
}

rp_status rp_kv_pool_new(rp_model *m, const rp_kv_pool_opts *o, rp_kv_pool **out, rp_err *err)
{
    rp_model_config *c = &m->cfg;
    size_t row = rp_kv_row_bytes(o->dtype, c->head_dim);
    if (!row)
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "--kv-cache-dtype %s needs a head_dim that is a multiple of %d (this "
                          "model has %d)", rp_kv_dtype_name(o->dtype),
                          o->dtype == RP_KV_INT4 ? 8 : 4, c->head_dim);
    if (!rp_backend_kv_dtype_ok(m->be, o->dtype))
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "--kv-cache-dtype %s is not supported on %s yet (use f32, bf16 or "
                          "f16)",
                          rp_kv_dtype_name(o->dtype), rp_backend_describe(m->be));
    size_t bb = rp_kv_block_bytes(m, o->dtype);
    long n = o->n_blocks > 0 ? o->n_blocks : (long)(o->max_bytes / bb);
    if (n < 1)
        return rp_err_set(err, RP_ERR_LIMIT,
                          "the KV cache of %zu bytes holds no block (one block of %d tokens "
                          "takes %zu bytes): raise --kv-cache-mb", o->max_bytes, BT, bb);
    if (n > (1L << 30))
        return rp_err_set(err, RP_ERR_LIMIT, "a KV cache of %ld blocks is too large", n);
    rp_kv_pool *p = rp_calloc(1, sizeof *p);
    if (!p)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    p->model = m;
    p->n_blocks = (int)n;
    p->prefix = o->prefix_cache;
    uint32_t nb = 1;
    while (nb < (uint32_t)n * 2u)
        nb <<= 1;
    p->bucket_mask = nb - 1;
    size_t N = (size_t)n;
    p->ref = rp_calloc(N, sizeof(int32_t));
    p->cached = rp_calloc(N, 1);
    p->hash = rp_calloc(N, sizeof(uint64_t));
    p->parent = rp_calloc(N, sizeof(int32_t));
    p->parent_gen = rp_calloc(N, sizeof(uint32_t));
    p->gen = rp_calloc(N, sizeof(uint32_t));
    p->hnext = rp_calloc(N, sizeof(int32_t));
    p->lru_prev = rp_calloc(N, sizeof(int32_t));
    p->lru_next = rp_calloc(N, sizeof(int32_t));
    p->tokens = p->prefix ? rp_calloc(N * BT, sizeof(int32_t)) : rp_calloc(1, sizeof(int32_t));
    p->snap = rp_calloc(N, sizeof(rp_kv_snap *));
    p->buckets = rp_alloc(sizeof(int32_t) * nb);
    p->free_stack = rp_alloc(sizeof(int32_t) * N);
    /* Not zeroed: only positions < len are read, so untouched pages never get committed. */
    p->layout.base = rp_backend_buf_alloc(m->be, N * bb, RP_TAG_KV);
    if (!p->ref || !p->cached || !p->hash || !p->parent || !p->parent_gen || !p->gen ||
        !p->hnext || !p->lru_prev || !p->lru_next || !p->tokens || !p->snap || !p->buckets ||
        !p->free_stack || !p->layout.base) {
        rp_kv_pool_free(p);
        return rp_err_set(err, RP_ERR_NOMEM,
                          "out of memory for a KV cache of %ld blocks (%.1f MiB, %s)", n,
                          (double)(N * bb) / (1 << 20), rp_backend_describe(m->be));
    }
    memset(p->buckets, 0xff, sizeof(int32_t) * nb);
    for (long i = 0; i < n; i++) { /* popped lowest first: the touched pages stay together */
        p->free_stack[i] = (int32_t)(n - 1 - i);
        p->lru_prev[i] = p->lru_next[i] = -1;
    }
    p->n_free = (int)n;
    p->lru_head = p->lru_tail = -1;
    p->layout.dtype = o->dtype;
    p->layout.block_tokens = BT;
    p->layout.n_layers = m->n_kv_layers;
    p->layout.n_kv_heads = c->n_kv_heads;
    p->layout.head_dim = c->head_dim;
    p->layout.row_bytes = row;
    p->layout.half_bytes = row * (size_t)c->n_kv_heads * BT;
    p->layout.block_bytes = bb;
    *out = p;
    return RP_OK;
}

void rp_kv_pool_get_stats(const rp_kv_pool *p, rp_kv_pool_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n_blocks = p->n_blocks;
    out->n_free = p->n_free;
    out->n_cached = p->n_cached;
    out->n_used = p->n_blocks - p->n_free - p->n_lru;
    out->block_tokens = BT;
    out->block_bytes = p->layout.block_bytes;
    out->bytes = p->layout.block_bytes * (size_t)p->n_blocks;
    out->bytes_per_token = (double)p->layout.block_bytes / BT;
    out->n_evicted = p->n_evicted;
}

int rp_kv_pool_available(const rp_kv_pool *p) { return p->n_free + p->n_lru; }
const rp_kv_layout *rp_kv_pool_layout(const rp_kv_pool *p) { return &p->layout; }

/* ---- sequences --------------------------------------------------------------------------- */

rp_status rp_kv_new_in(rp_kv_pool *pool, int max_tokens, rp_kv **out, rp_err *err)
{
    rp_model *m = pool->model;
    rp_kv *kv = rp_calloc(1, sizeof *kv);
    if (!kv)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    kv->model = m;
    kv->pool = pool;
    kv->cap = max_tokens > 0 ? max_tokens : m->info.max_context;
    kv->max_blocks = (kv->cap + BT - 1) / BT;
    kv->blocks = rp_alloc(sizeof(int32_t) * (size_t)kv->max_blocks);
    kv->ids = rp_alloc(sizeof(int32_t) * (size_t)kv->cap);
    kv->idx_prev = -1;
    rp_status rc = !kv->blocks || !kv->ids ? rp_err_set(err, RP_ERR_NOMEM, "out of memory")
                                            : m->arch->kv_init(m, kv, err);
    if (rc) {
        rp_free(kv->blocks);
        rp_free(kv->ids);
        rp_free(kv);
        return rc;
    }
    *out = kv;
    return RP_OK;
}

rp_status rp_kv_new(rp_model *m, int max_tokens, rp_kv **out, rp_err *err)
{
    int cap = max_tokens > 0 ? max_tokens : m->info.max_context;
    rp_kv_pool_opts o = {.dtype = RP_KV_F32, .n_blocks = (cap + BT - 1) / BT};
    rp_kv_pool *pool;
    rp_status rc = rp_kv_pool_new(m, &o, &pool, err);
    if (rc)
        return rc;
    if ((rc = rp_kv_new_in(pool, cap, out, err))) {
        rp_kv_pool_free(pool);
        return rc;
    }
    (*out)->own_pool = 1;
    return RP_OK;
}

rp_kv_pool *rp_kv_get_pool(const rp_kv *kv) { return kv->pool; }

void rp_kv_free(rp_kv *kv)
{
    if (!kv)
        return;
    rp_kv_truncate(kv, 0);
    kv->model->arch->kv_deinit(kv);
    if (kv->own_pool)
        rp_kv_pool_free(kv->pool);
    rp_free(kv->blocks);
    rp_free(kv->ids);
    rp_free(kv);
}

int rp_kv_len(const rp_kv *kv) { return kv->len; }
const int32_t *rp_kv_tokens(const rp_kv *kv) { return kv->ids; }
int rp_kv_capacity(const rp_kv *kv) { return kv->cap; }

static void set_idx_prev(rp_kv *kv);

void rp_kv_truncate(rp_kv *kv, int n)
{
    if (n >= 0 && n < kv->len)
        kv->len = n;
    int keep = (kv->len + BT - 1) / BT;
    while (kv->n_blocks > keep) /* last first: a sequence's leaves come first in the LRU */
        block_unref(kv->pool, kv->blocks[--kv->n_blocks]);
    if (kv->n_indexed > kv->len / BT) {
        kv->n_indexed = kv->len / BT;
        set_idx_prev(kv);
    }
    if (n == 0 && kv->rec_n) { /* the state at the start of a sequence is all zeros */
        memset(kv->rec, 0, kv->rec_n * sizeof(float));
        kv->rec_pos = 0;
    }
}

static int cow_needed(const rp_kv *kv, int n)
{
    if (kv->len % BT == 0 || kv->len >= n || kv->len / BT >= kv->n_blocks)
        return 0;
    int b = kv->blocks[kv->len / BT];
    return kv->pool->ref[b] > 1 || kv->pool->cached[b];
}

int rp_kv_blocks_needed(const rp_kv *kv, int n)
{
    int want = (n + BT - 1) / BT;
    return (want > kv->n_blocks ? want - kv->n_blocks : 0) + cow_needed(kv, n);
}

static rp_status pool_full(const rp_kv *kv, rp_err *err)
{
    return rp_err_set(err, RP_ERR_LIMIT,
                      "the KV cache is full (%d blocks of %d tokens, all in use): raise "
                      "--kv-cache-mb or lower --max-num-seqs", kv->pool->n_blocks, BT);
}

rp_status rp_kv_reserve(rp_kv *kv, int n, rp_err *err)
{
    rp_kv_pool *p = kv->pool;
    if (n > kv->cap)
        return rp_err_set(err, RP_ERR_LIMIT, "%d positions do not fit: the context holds %d",
                          n, kv->cap);
    if (cow_needed(kv, n)) {
        int i = kv->len / BT, old = kv->blocks[i], b = block_alloc(p);
        if (b < 0)
            return pool_full(kv, err);
        rp_op_kv_copy_block(kv->model->be, &p->layout, b, old);
        block_unref(p, old);
        kv->blocks[i] = b;
    }
    while (kv->n_blocks * BT < n) {
        int b = block_alloc(p);
        if (b < 0)
            return pool_full(kv, err);
        kv->blocks[kv->n_blocks++] = b;
    }
    return RP_OK;
}

rp_status rp_kv_prepare(rp_kv *kv, const int32_t *ids, int n, rp_err *err)
{
    rp_status rc = rp_kv_reserve(kv, kv->len + n, err);
    if (rc)
        return rc;
    memcpy(kv->ids + kv->len, ids, sizeof(int32_t) * (size_t)n);
    return RP_OK;
}

/* Where the index chain of kv stands after n_indexed blocks (its last block, if indexed). */
static void set_idx_prev(rp_kv *kv)
{
    int b = kv->n_indexed > 0 ? kv->blocks[kv->n_indexed - 1] : -1;
    kv->idx_prev = b >= 0 && kv->pool->cached[b] ? b : -1;
    kv->idx_prev_gen = kv->idx_prev >= 0 ? kv->pool->gen[b] : 0;
}

void rp_kv_indexed(rp_kv *kv)
{
    rp_kv_pool *p = kv->pool;
    if (!p->prefix)
        return;
    int full = kv->len / BT;
    while (kv->n_indexed < full) {
        int i = kv->n_indexed, b = kv->blocks[i], parent = kv->idx_prev;
        if (i > 0 && (parent < 0 || !p->cached[parent] || p->gen[parent] != kv->idx_prev_gen))
            return; /* the chain above this block is gone from the index */
        int canon = b;
        if (!p->cached[b]) {
            const int32_t *toks = kv->ids + (size_t)i * BT;
            uint64_t h = chain_hash(parent >= 0 ? p->hash[parent] : ROOT_SEED, toks);
            int twin = index_find(p, h, parent, toks);
            if (twin >= 0) {
                canon = twin; /* same tokens, same prefix: ours stays private, the chain goes on */
            } else {
                index_insert(p, b, h, parent, toks);
                if (kv->rec_n && (i + 1) * BT == kv->len && kv->rec_pos == kv->len) {
                    rp_err e;
                    if (rp_kv_snapshot(kv, &p->snap[b], &e)) /* out of memory: no snapshot */
                        p->snap[b] = NULL;
                }
            }
        }
        kv->idx_prev = canon;
        kv->idx_prev_gen = p->gen[canon];
        kv->n_indexed++;
    }
}

int rp_kv_attach_prefix(rp_kv *kv, const int32_t *ids, int n)
{
    rp_kv_pool *p = kv->pool;
    RP_ASSERT(kv->len == 0 && kv->n_blocks == 0);
    if (!p->prefix || n < 2)
        return 0;
    int limit = kv->rec_n ? (n - 1) / BT : n / BT, best = 0, parent = -1;
    uint64_t h = ROOT_SEED;
    for (int i = 0; i < limit; i++) {
        const int32_t *toks = ids + (size_t)i * BT;
        h = chain_hash(h, toks);
        int b = index_find(p, h, parent, toks);
        if (b < 0)
            break;
        block_ref(p, b);
        kv->blocks[kv->n_blocks++] = b;
        parent = b;
        if (!kv->rec_n || p->snap[b])
            best = i + 1;
    }
    while (kv->n_blocks > best)
        block_unref(p, kv->blocks[--kv->n_blocks]);
    kv->n_indexed = best;
    set_idx_prev(kv);
    if (best == 0)
        return 0;
    memcpy(kv->ids, ids, sizeof(int32_t) * (size_t)best * BT);
    kv->len = best * BT;
    if (kv->rec_n) {
        rp_err e;
        if (rp_kv_restore(kv, p->snap[kv->blocks[best - 1]], &e)) {
            rp_kv_truncate(kv, 0);
            return 0;
        }
    } else {
        kv->rec_pos = kv->len;
    }
    if (kv->len >= n)
        rp_kv_truncate(kv, n - 1); /* keeps the block: written again after a copy */
    return kv->len;
}

rp_step_seq rp_kv_step_seq(const rp_kv *kv, int t0, int n_tok, int pos0)
{
    return (rp_step_seq){.blocks = kv->blocks, .n_blocks = kv->n_blocks, .t0 = t0,
                         .n_tok = n_tok, .pos0 = pos0};
}

const rp_kv_layout *rp_kv_layout_of(const rp_kv *kv) { return &kv->pool->layout; }

/* ---- recurrent-state snapshots ----------------------------------------------------------- */

struct rp_kv_snap {
    const rp_model *model;
    int pos;
    size_t n;
    float data[];
};

rp_status rp_kv_snapshot(const rp_kv *kv, rp_kv_snap **out, rp_err *err)
{
    if (kv->rec_n && kv->rec_pos != kv->len)
        return rp_err_set(err, RP_ERR_INVALID,
                          "no recurrent state at position %d (the cache was truncated)", kv->len);
    rp_kv_snap *s = rp_alloc(sizeof *s + kv->rec_n * sizeof(float));
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory for a state snapshot");
    s->model = kv->model;
    s->pos = kv->len;
    s->n = kv->rec_n;
    if (s->n)
        memcpy(s->data, kv->rec, s->n * sizeof(float));
    *out = s;
    return RP_OK;
}

rp_status rp_kv_restore(rp_kv *kv, const rp_kv_snap *s, rp_err *err)
{
    if (s->model != kv->model || s->n != kv->rec_n)
        return rp_err_set(err, RP_ERR_INVALID, "the snapshot belongs to another model");
    if (s->pos > kv->len)
        return rp_err_set(err, RP_ERR_INVALID,
                          "the snapshot is at position %d but the cache holds only %d", s->pos,
                          kv->len);
    if (s->n)
        memcpy(kv->rec, s->data, s->n * sizeof(float));
    kv->len = kv->rec_pos = s->pos;
    rp_kv_truncate(kv, s->pos);
    return RP_OK;
}

int rp_kv_snap_pos(const rp_kv_snap *s) { return s->pos; }
size_t rp_kv_snap_bytes(const rp_kv_snap *s) { return sizeof *s + s->n * sizeof(float); }
void rp_kv_snapshot_free(rp_kv_snap *s) { rp_free(s); }
