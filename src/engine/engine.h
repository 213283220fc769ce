/* engine/engine.h - the generation engine: a request queue served by one engine thread.
 *
 * HTTP threads (or the CLI) submit token-id prompts with sampling parameters; the engine
 * thread owns the model and its caches, runs the forward passes and calls each request's
 * event callback with every generated token and, last, exactly one DONE event. Text concerns
 * (detokenizing, stop strings, tool-call parsing) live above, in api/: a caller that decides
 * to stop (a stop string matched, the client left) calls rp_engine_cancel.
 *
 * Speculative decoding (spec_tokens > 0): greedy sequences draft tokens by prompt lookup
 * and verify them in the same step (engine.c, note 7).
 *
 * Continuous batching: up to max_num_seqs requests run at once; every engine step is one
 * batched forward holding one decode token of every running sequence plus prompt chunks of
 * sequences still in prefill, so sequences join and leave between steps. The KV cache is one
 * pool of fixed-size blocks (model/kv_cache.h) allocated at start; a sequence holds a block
 * table. Full blocks stay in a prefix cache after their request ends: a new prompt starting
 * with the same tokens shares them and evaluates only its new tail.
 *
 * Admission reserves the blocks a request can ever need (prompt + max_tokens) against the free
 * and evictable ones, so a running sequence never runs out of blocks and eviction only ever
 * takes unreferenced cached blocks; a request that could never fit the pool is refused at
 * submit (RP_ERR_INVALID, naming --kv-cache-mb); one that does not fit now waits its turn.
 *
 * Request lifecycle (the functions performing each transition in parentheses):
 *   WAITING --(admit: a slot is free)--> PREFILL --(last prompt chunk evaluated)--> DECODE
 *   DECODE --(eos / stop id / max_tokens / context full)--> DONE
 *   any --(rp_engine_cancel, rp_engine_free)--> DONE (finish = CANCELLED)
 *   PREFILL/DECODE --(forward failed)--> DONE (finish = ERROR)
 *
 * Ownership: rp_engine_new borrows the model (free the engine first). The callback's `user`
 *            must stay valid until its DONE event has been delivered.
 * Threading: rp_engine_submit / rp_engine_cancel from any thread; callbacks run on the engine
 *            thread and must not block (push to a queue and return).
 * Errors:    submit returns RP_ERR_LIMIT when the waiting queue is full (-> 503), and
 *            RP_ERR_INVALID when the prompt plus max_tokens does not fit the context (the
 *            message gives the numbers, -> 400) or a parameter is bad (token id out of range,
 *            empty prompt).
 */
#ifndef RP_ENGINE_ENGINE_H
#define RP_ENGINE_ENGINE_H

#include <stdint.h>

#include "base/status.h"
#include "model/kv_cache.h"
#include "model/model.h"

typedef struct rp_engine rp_engine;

typedef struct rp_sampling {
    float temperature; /* 0: greedy */
    float top_p;       /* 1: off */
    int top_k;         /* 0: off */
    float min_p;       /* 0: off */
    float presence_penalty;   /* OpenAI semantics, 0: off */
    float frequency_penalty;  /* OpenAI semantics, 0: off */
    float repetition_penalty; /* HF semantics (divide positive logits), 1: off */
    uint64_t seed;
    int has_seed; /* 0: seeded from the clock */
} rp_sampling;

/* Defaults: temperature 1, top_p 1, top_k 0, min_p 0, no penalties, unseeded. */
void rp_sampling_default(rp_sampling *s);

#define RP_MAX_TOP_LOGPROBS 20

typedef struct rp_gen_request {
    const int32_t *prompt; /* copied by submit */
    int n_prompt;
    int max_tokens; /* <= 0: until the context is full */
    rp_sampling sampling;
    int ignore_eos;      /* 1: the model's EOS ids do not end the request */
    const int32_t *stop_ids; /* extra ids that end the request (copied) */
    int n_stop_ids;
    int n_top_logprobs; /* 0..RP_MAX_TOP_LOGPROBS alternatives per token; -1: no logprobs */
} rp_gen_request;

typedef enum rp_event_kind { RP_EV_TOKEN, RP_EV_DONE } rp_event_kind;

typedef enum rp_finish {
    RP_FINISH_NONE = 0,
    RP_FINISH_STOP,      /* an EOS or stop id was generated (it is not reported as a token) */
    RP_FINISH_LENGTH,    /* max_tokens or the context filled */
    RP_FINISH_CANCELLED, /* rp_engine_cancel */
    RP_FINISH_ERROR,     /* err holds the reason */
} rp_finish;

typedef struct rp_event {
    rp_event_kind kind;
    uint64_t request_id;
    int32_t token;   /* TOKEN */
    float logprob;   /* TOKEN, when logprobs were asked for */
    int n_top;       /* TOKEN: number of alternatives below */
    int32_t top_ids[RP_MAX_TOP_LOGPROBS];
    float top_logprobs[RP_MAX_TOP_LOGPROBS];
    rp_finish finish; /* DONE */
    int32_t stop_token; /* DONE with STOP: the id that ended it */
    int n_prompt;     /* DONE: prompt tokens */
    int n_generated;  /* DONE: tokens reported */
    double t_first_token_s; /* DONE: seconds from submit to the first token */
    double t_total_s;       /* DONE: seconds from submit to done */
    rp_err err;       /* DONE with ERROR */
} rp_event;

typedef void (*rp_event_cb)(const rp_event *ev, void *user);

typedef struct rp_engine_config {
    int max_queue;     /* waiting requests before submit says RP_ERR_LIMIT (0: 64) */
    int max_context;   /* per-sequence positions (0: the model's max_context, capped at 8192) */
    int max_num_seqs;  /* sequences decoded together (0: 8) */
    int prefill_chunk; /* prompt tokens per sequence per step (0: 64) */
    double kv_cache_mb; /* KV pool size in MiB (<= 0: max_num_seqs full contexts, plus one
                         * block each for copy on write) */
    int kv_blocks;      /* > 0: exactly this many blocks (tests; overrides kv_cache_mb) */
    rp_kv_dtype kv_dtype; /* storage of K and V (default RP_KV_F32) */
    int no_prefix_cache;  /* 1: blocks are never shared between requests */
    int spec_tokens;      /* speculative decoding by prompt lookup: up to this many draft
                           * tokens per greedy sequence and step (0: off; at most
                           * RP_MAX_SPEC_TOKENS). Output is greedy decoding's either way. */
} rp_engine_config;

#define RP_MAX_SPEC_TOKENS 16

typedef struct rp_engine_stats {
    int n_running;
    int n_waiting;
    int64_t n_requests;       /* finished */
    int64_t n_prompt_tokens;  /* submitted prompt tokens */
    int64_t n_cached_tokens;  /* prompt tokens served from the prefix cache */
    int64_t n_generated;
    int64_t n_steps;          /* batched forward steps */
    /* the KV pool (model/kv_cache.h), as of the last step */
    int kv_blocks_total;
    int kv_blocks_used;       /* referenced by running sequences */
    int kv_blocks_cached;     /* in the prefix cache (used or evictable) */
    int kv_block_tokens;      /* positions per block */
    double kv_bytes_per_token; /* all layers, K and V, scales included */
    int64_t kv_bytes;         /* the pool's allocation */
    int64_t kv_evicted_blocks; /* cached blocks evicted for reuse */
    int64_t prefix_hit_tokens;  /* prompt tokens taken from the prefix cache (= n_cached_tokens) */
    int64_t prefix_miss_tokens; /* prompt tokens evaluated */
    int64_t spec_draft_tokens;    /* draft tokens evaluated (speculative decoding) */
    int64_t spec_accepted_tokens; /* of those, accepted (emitted without their own step) */
} rp_engine_stats;

void rp_engine_get_stats(rp_engine *engine, rp_engine_stats *out);

rp_status rp_engine_new(rp_model *model, const rp_engine_config *cfg, rp_engine **out,
                        rp_err *err);
/* Cancels everything in flight (each gets its DONE), stops the thread, frees. NULL ok. */
void rp_engine_free(rp_engine *engine);

rp_status rp_engine_submit(rp_engine *engine, const rp_gen_request *req, rp_event_cb cb,
                           void *user, uint64_t *out_id, rp_err *err);
/* Idempotent; unknown or finished ids are ignored. The DONE event may already be on its way. */
void rp_engine_cancel(rp_engine *engine, uint64_t request_id);

int rp_engine_context_length(const rp_engine *engine);
rp_model *rp_engine_model(const rp_engine *engine);

/* Blocking helper on top of submit: runs one request to the end, storing generated ids
 * (heap, rp_free) in *out_ids. */
rp_status rp_engine_generate(rp_engine *engine, const rp_gen_request *req, int32_t **out_ids,
                             int *out_n, rp_finish *out_finish, rp_err *err);

#endif
