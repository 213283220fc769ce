/* model/kv_cache.h - the paged KV cache: one pool of fixed-size blocks, per-sequence block
 * tables, and the prefix cache that shares full blocks between sequences.
 *
 * Design notes:
 *  1. A pool is one backend buffer of n_blocks blocks, allocated once (rp_kv_pool_new). A
 *     block holds RP_KV_BLOCK_TOKENS positions of every attention layer, K and V, in the
 *     pool's storage type (layout: rp_kv_layout in backend/backend.h). A sequence (rp_kv)
 *     holds a block table; nothing is allocated per request or per step (hybrid snapshots
 *     aside, note 6).
 *  2. Blocks are reference counted: a block is free, used (ref > 0: in some sequence's table),
 *     or cached (in the prefix index; used or not). Cached blocks nobody uses wait in an LRU
 *     list and are evicted (oldest first) only when the free list is empty.
 *  3. Prefix index (pools made with prefix_cache): a full block is keyed by
 *     h_i = XXH64(tokens of block i, seed = h_{i-1}) (h_{-1} = a constant), i.e. by its
 *     tokens and its whole prefix. A lookup also checks the block's stored tokens and its
 *     parent (block id and the parent's generation, bumped on every eviction), so a hash
 *     collision or a reused parent never shares a wrong block.
 *  4. Cached blocks are read only. A sequence that must write into a block it shares (the
 *     last prompt token re-run at the end of a fully cached block) copies it first (copy on
 *     write, rp_kv_reserve).
 *  5. Full blocks are indexed when a forward step (rp_model_eval, rp_model_eval_batch) fills
 *     them; rp_kv_attach_prefix starts a new sequence on the longest indexed prefix.
 *  6. Hybrids (rp_model_recurrent): when a step ends exactly at a block boundary, the
 *     recurrent state there is snapshotted into the block (rp_kv_snapshot; heap memory, freed
 *     with the block); a prefix match must end on a block with a snapshot, which is restored.
 *
 * Ownership: rp_kv_pool_new -> rp_kv_pool_free, after every rp_kv_new_in of it is freed.
 * Threading: a pool and its sequences belong to one thread (the engine thread); the stats
 *            getter too.
 * Errors:    RP_ERR_LIMIT (the pool has no free or evictable block, or more positions than the
 *            sequence's cap), RP_ERR_UNSUPPORTED (a storage type the backend or head_dim does
 *            not take), RP_ERR_NOMEM.
 */
#ifndef RP_MODEL_KV_CACHE_H
#define RP_MODEL_KV_CACHE_H

#include "backend/backend.h"
#include "model/model.h"

#define RP_KV_BLOCK_TOKENS 16

typedef struct rp_kv_pool rp_kv_pool;

typedef struct rp_kv_pool_opts {
    rp_kv_dtype dtype;
    int n_blocks;     /* > 0: this many blocks */
    size_t max_bytes; /* n_blocks == 0: as many blocks as fit in this many bytes */
    int prefix_cache; /* 1: index full blocks for reuse across sequences */
} rp_kv_pool_opts;

typedef struct rp_kv_pool_stats {
    int n_blocks;        /* total */
    int n_used;          /* referenced by a sequence */
    int n_cached;        /* in the prefix index (used or not) */
    int n_free;          /* neither */
    int block_tokens;
    size_t block_bytes;  /* one block, all layers, K and V, scales included */
    size_t bytes;        /* the pool's buffer */
    double bytes_per_token;
    int64_t n_evicted;   /* cached blocks given to other uses */
} rp_kv_pool_stats;

/* Bytes of one block for this model and storage type (0: the type does not suit head_dim). */
size_t rp_kv_block_bytes(const rp_model *m, rp_kv_dtype dt);

rp_status rp_kv_pool_new(rp_model *m, const rp_kv_pool_opts *opts, rp_kv_pool **out,
                         rp_err *err);
void rp_kv_pool_free(rp_kv_pool *pool);
void rp_kv_pool_get_stats(const rp_kv_pool *pool, rp_kv_pool_stats *out);
/* Blocks that can be handed out now: free plus evictable cached ones. */
int rp_kv_pool_available(const rp_kv_pool *pool);
const rp_kv_layout *rp_kv_pool_layout(const rp_kv_pool *pool);

/* A sequence of up to max_tokens positions drawing blocks from pool (its table is allocated
 * here, once). */
rp_status rp_kv_new_in(rp_kv_pool *pool, int max_tokens, rp_kv **out, rp_err *err);
rp_kv_pool *rp_kv_get_pool(const rp_kv *kv);

/* The token at each of the first rp_kv_len(kv) positions (valid until the next step or
 * truncate). */
const int32_t *rp_kv_tokens(const rp_kv *kv);

/* On an empty sequence: takes the longest indexed prefix of ids[0..n) (whole blocks; for a
 * hybrid, ending at a block with a state snapshot, which is restored) and sets the length to
 * it, but at most n - 1 (the last prompt token is always evaluated again for its logits).
 * Returns the new length (0: no hit). */
int rp_kv_attach_prefix(rp_kv *kv, const int32_t *ids, int n);
/* New blocks rp_kv_reserve(kv, n) would take (the copy-on-write one included). */
int rp_kv_blocks_needed(const rp_kv *kv, int n);
/* Makes positions [len, n) writable: copies a shared block at len, appends blocks. On
 * RP_ERR_LIMIT the table may have grown partly (harmless; truncate returns the blocks). */
rp_status rp_kv_reserve(rp_kv *kv, int n, rp_err *err);

#endif
