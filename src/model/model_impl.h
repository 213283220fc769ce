/* model/model_impl.h - what an architecture recipe implements (model.c dispatches to it).
 *
 * A recipe binds its tensors at load (checking every required one exists with the right
 * shape, naming any that does not), reserves its activation buffers for the largest chunk,
 * and runs the forward pass for n tokens against one KV cache.
 */
#ifndef RP_MODEL_MODEL_IMPL_H
#define RP_MODEL_MODEL_IMPL_H

#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"

/* Tokens per forward call; longer prompts are evaluated in chunks of this size. */
#define RP_MAX_CHUNK 128
/* A recipe may take larger forward steps (rp_model_eval's prompt chunks and the engine's
 * batches, rp_model_max_batch) by setting rp_model.eval_chunk at init, up to this: the llama
 * recipe on the CUDA backend, whose GEMMs run compute-bound only well past 128 tokens. */
#define RP_MAX_EVAL_CHUNK 512

typedef struct rp_arch {
    const char *name; /* "llama" */
    int gpu; /* 1: written only in backend ops, so it runs on the CUDA backend too */
    rp_status (*init)(rp_model *m, rp_err *err);
    void (*deinit)(rp_model *m);
    /* Forward for n <= rp_model_max_batch tokens; logits rows for the last n_logits tokens. */
    rp_status (*forward)(rp_model *m, rp_kv *kv, const int32_t *ids, int n, float *logits,
                         int n_logits, rp_err *err);
    /* (optional) One step over several sequences (see rp_batch); n_tok <= rp_model_max_batch.
     * Without it, rp_model_eval_batch runs the sequences one by one through forward. */
    rp_status (*forward_batch)(rp_model *m, const rp_batch *b, float *logits, rp_err *err);
    /* KV bytes per position per layer is arch-specific (hybrids keep states instead). */
    rp_status (*kv_init)(rp_model *m, rp_kv *kv, rp_err *err);
    void (*kv_deinit)(rp_kv *kv);
    int recurrent; /* 1: kv_init sets kv->rec (hybrids) */
    int batch_argmax; /* 1: forward_batch fills rp_batch.argmax itself */
} rp_arch;

struct rp_model {
    rp_model_info info;
    rp_model_config cfg;
    rp_st *st;
    rp_backend *be;
    const rp_arch *arch;
    void *arch_state; /* the recipe's weights and buffers */
    /* KV geometry, learnt at load from a probe call of arch->kv_init (kv->probe set) */
    int n_kv_layers; /* layers with attention: the cache layers of a block */
    int *kv_layer;   /* [n_layers]: cache layer of each layer, -1 for none */
    int eval_chunk;  /* tokens per forward step, <= RP_MAX_EVAL_CHUNK (0: RP_MAX_CHUNK) */
};

typedef struct rp_kv_pool rp_kv_pool;

struct rp_kv {
    rp_model *model;
    rp_kv_pool *pool;
    int own_pool; /* rp_kv_new: a private pool, freed with the sequence */
    int probe;    /* the load-time geometry probe: kv_init only records m->kv_layer */
    int len, cap;
    int32_t *blocks; /* block table: position p in blocks[p / RP_KV_BLOCK_TOKENS] */
    int n_blocks, max_blocks;
    int32_t *ids;  /* [cap] token at each position (the prefix index keys) */
    int n_indexed; /* leading full blocks already in (or checked against) the index */
    int idx_prev;  /* the indexed block standing for position block n_indexed - 1 (-1: none):
                    * ours, or the cached twin our private copy duplicates */
    uint32_t idx_prev_gen;
    void *state;   /* the recipe's cache */
    /* Hybrids: the recurrent state as one flat block the recipe owns (set in kv_init;
     * rec_n == 0 otherwise), describing the sequence at position rec_pos (model.c keeps
     * rec_pos in step with len after every forward; snapshots copy the block). */
    float *rec;
    size_t rec_n;
    int rec_pos;
};

/* The forward's side of the paged cache (model/kv_cache.c): before n tokens go in at len,
 * rp_kv_prepare makes room (rp_kv_reserve) and records the ids; after the forward moved len,
 * rp_kv_indexed puts newly full blocks into the prefix index (snapshots for hybrids). */
rp_status rp_kv_prepare(rp_kv *kv, const int32_t *ids, int n, rp_err *err);
void rp_kv_indexed(rp_kv *kv);
/* Called by the model loader: the KV geometry (m->n_kv_layers, m->kv_layer). */
rp_status rp_kv_probe(rp_model *m, rp_err *err);
/* The step layout of one sequence's tokens (t0 = first activation row). */
rp_step_seq rp_kv_step_seq(const rp_kv *kv, int t0, int n_tok, int pos0);
const rp_kv_layout *rp_kv_layout_of(const rp_kv *kv);

/* Looks up `name`, checks dims (0 = any) and dtype is a matmul/norm type; names what is wrong. */
rp_status rp_model_tensor(rp_model *m, const char *name, int64_t d0, int64_t d1,
                          const rp_tensor **out, rp_err *err);
/* Same, but absent is fine (*out = NULL). */
rp_status rp_model_tensor_opt(rp_model *m, const char *name, int64_t d0, int64_t d1,
                              const rp_tensor **out, rp_err *err);

extern const rp_arch rp_arch_llama;
extern const rp_arch rp_arch_gemma3;
extern const rp_arch rp_arch_qwen3_moe;
extern const rp_arch rp_arch_lfm2;
extern const rp_arch rp_arch_qwen3_5;
extern const rp_arch rp_arch_gpt_oss;
extern const rp_arch rp_arch_scripted; /* a test model (scripted.c) */

#endif
