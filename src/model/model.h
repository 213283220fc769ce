/* model/model.h - a loaded model and the forward pass over one sequence's KV cache.
 *
 * rp_model_load reads a Hugging Face model directory (config.json, model.safetensors or a
 * sharded index, generation_config.json) with weights mmap'd read-only. rp_model_eval runs
 * n tokens at the positions following what the cache already holds (prefill when n > 1,
 * decode when n == 1) and writes logits.
 *
 * Ownership: rp_model_load -> rp_model_free; rp_kv_new -> rp_kv_free (free every rp_kv before
 *            its model). rp_model_info() is borrowed, valid while the model lives.
 * Threading: a model and its caches are used by one thread at a time (the engine thread);
 *            the kernels fan out over the model's own thread pool.
 * Errors:    RP_ERR_NOT_FOUND (missing file or tensor, named), RP_ERR_UNSUPPORTED (unknown
 *            architecture or dtype, named), RP_ERR_INVALID (malformed file), RP_ERR_LIMIT
 *            (more tokens than the cache holds), RP_ERR_NOMEM.
 */
#ifndef RP_MODEL_MODEL_H
#define RP_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct rp_model rp_model;
typedef struct rp_kv rp_kv;

#define RP_MAX_EOS 8

typedef struct rp_model_info {
    char arch[64];       /* config "architectures"[0], e.g. "LlamaForCausalLM" */
    char model_type[32]; /* config "model_type", e.g. "llama" */
    int vocab_size;
    int n_layers;
    int dim;        /* hidden_size */
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn_dim;    /* intermediate_size */
    int max_context; /* max_position_embeddings */
    int tied_embeddings;
    int bos_id;     /* -1 when unknown */
    int eos_ids[RP_MAX_EOS];
    int n_eos;
    int64_t n_params;
    int64_t weight_bytes; /* bytes of weights as stored (what decode reads per token) */
    char dtype[16];       /* "bf16", "f16", "f32", or a quant name */
} rp_model_info;

typedef enum rp_device {
    RP_DEVICE_CPU = 0, /* the default */
    RP_DEVICE_CUDA,    /* GPU 0; loading fails when there is none */
    RP_DEVICE_AUTO     /* CUDA when a GPU is found, else the CPU */
} rp_device;

typedef struct rp_model_opts {
    int n_threads;   /* <= 0: one per online CPU */
    int ref_kernels; /* 1: plain-C reference kernels everywhere (slow, for checking) */
    rp_device device;
    double gpu_memory_fraction; /* share of GPU memory rapid may take; <= 0: 0.9 */
} rp_model_opts;

rp_status rp_model_load(const char *dir, const rp_model_opts *opts, rp_model **out, rp_err *err);
void rp_model_free(rp_model *model);
const rp_model_info *rp_model_get_info(const rp_model *model);

/* A KV cache for one sequence of up to max_tokens positions (0: the model's max_context), in
 * a private f32 block pool just big enough (model/kv_cache.h has shared pools, other storage
 * types and the prefix cache). */
rp_status rp_kv_new(rp_model *model, int max_tokens, rp_kv **out, rp_err *err);
void rp_kv_free(rp_kv *kv);
int rp_kv_len(const rp_kv *kv);      /* positions filled */
int rp_kv_capacity(const rp_kv *kv);
/* Forgets positions >= n (n <= len). A hybrid model's recurrent state (rp_model_recurrent)
 * cannot be rewound this way except to 0 (which resets it): after truncating such a cache to
 * 0 < n < len, rp_model_eval fails with RP_ERR_INVALID until a snapshot taken at n is
 * restored (rp_kv_restore). */
void rp_kv_truncate(rp_kv *kv, int n);

/* 1 when the model keeps recurrent per-sequence state besides its KV cache (the hybrids:
 * Qwen3.5 Gated DeltaNet layers, LFM2 short convolutions). */
int rp_model_recurrent(const rp_model *model);

/* A sequence's recurrent state at one token position, for rewinding a hybrid model's cache
 * (prefix reuse, speculative decoding).
 *
 * Contract: rp_kv_snapshot copies the recurrent state of kv as it stands at position
 * rp_kv_len(kv) (the attention KV rows are not copied: they stay in kv). rp_kv_restore(kv, s)
 * puts that state back and sets the length to s's position; evaluating from there gives
 * exactly the logits an uninterrupted run would. It is valid while positions [0, pos) of kv
 * still hold what they held at the snapshot, i.e. kv was not truncated below pos since, and
 * needs rp_kv_len(kv) >= pos (RP_ERR_INVALID otherwise, or for a snapshot of another model).
 * For models without recurrent state a snapshot is just the position (restore = truncate).
 * Ownership: rp_kv_snapshot -> rp_kv_snapshot_free; a snapshot does not reference kv. */
typedef struct rp_kv_snap rp_kv_snap;
rp_status rp_kv_snapshot(const rp_kv *kv, rp_kv_snap **out, rp_err *err);
rp_status rp_kv_restore(rp_kv *kv, const rp_kv_snap *snap, rp_err *err);
int rp_kv_snap_pos(const rp_kv_snap *snap);
size_t rp_kv_snap_bytes(const rp_kv_snap *snap); /* memory the snapshot holds */
void rp_kv_snapshot_free(rp_kv_snap *snap);

/* Evaluates ids[0..n) at positions rp_kv_len(kv).. and appends them to the cache.
 * logits: vocab_size floats for the last token, or n * vocab_size (row-major, one row per
 * token) when all_logits is set; may be NULL to only fill the cache. */
rp_status rp_model_eval(rp_model *model, rp_kv *kv, const int32_t *ids, int n, float *logits,
                        int all_logits, rp_err *err);

/* One forward step over several sequences (continuous batching). Token i belongs to kv[i]
 * and goes at the next free position of that cache; the tokens of one sequence must be
 * consecutive. Weights are read once for the whole batch. want_logits[i] asks for a row of
 * logits for token i (rows in token order); the tokens of a sequence that ask must be the
 * last ones of its run (speculative decoding verifies drafts that way). All the
 * sequences must draw on one pool (rp_kv_new_in; RP_ERR_INVALID otherwise).
 * Results do not depend on what else is in the batch (batch-invariant kernels). */
typedef struct rp_batch {
    int n_tok;
    const int32_t *ids;
    rp_kv *const *kv;
    const uint8_t *want_logits;
    /* (optional) the greedy sampler: when set, argmax[r] receives the argmax of logits row r
     * and the logits array is scratch (its contents unspecified); on CUDA only the ids
     * leave the GPU. */
    int32_t *argmax;
    /* (optional, with argmax) each row's draw (backend/sample.h): argmax[r] receives the
     * token row r draws under sample[r] (temperature <= 0: its argmax), drawn where the
     * logits are (on CUDA only the ids come back); a row left to the caller gets -1, and then
     * the logits array holds every row's logits (every row is left to the caller where the
     * backend has no such op or the architecture does not take it). */
    const struct rp_sample_row *sample;
} rp_batch;

/* Largest n_tok rp_model_eval_batch takes. */
int rp_model_max_batch(const rp_model *model);
rp_status rp_model_eval_batch(rp_model *model, const rp_batch *batch, float *logits,
                              rp_err *err);

#endif
