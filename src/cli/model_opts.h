/* cli/model_opts.h - the model-loading options shared by the commands that run a model.
 *
 * --device cuda|cpu|auto (default: $RAPID_DEVICE, else auto = CUDA when a GPU is found) and
 * --gpu-memory-fraction F (0 < F <= 1, default 0.9). Commands add the two rp_opt entries
 * (RP_MODEL_DEVICE_OPTS) to their table and call rp_model_opts_device after parsing.
 *
 * Ownership: nothing allocated. Threading: any. Errors: returns 2 (usage) with a message on
 * stderr naming the command, 0 when the values are good.
 */
#ifndef RP_CLI_MODEL_OPTS_H
#define RP_CLI_MODEL_OPTS_H

#include "engine/engine.h"
#include "model/model.h"

typedef struct rp_device_args {
    const char *device;   /* --device */
    const char *fraction; /* --gpu-memory-fraction */
} rp_device_args;

#define RP_MODEL_DEVICE_OPTS(a)                                                                \
    {"device", &(a).device, NULL}, { "gpu-memory-fraction", &(a).fraction, NULL }

int rp_model_opts_device(const char *cmd, const rp_device_args *a, rp_model_opts *mo);

/* The engine's cache and batching options: --kv-cache-mb N (RAPID_KV_CACHE_MB; default:
 * max-num-seqs full contexts), --kv-cache-dtype f32|bf16|f16|int8|int4 (RAPID_KV_CACHE_DTYPE;
 * default f32), --max-num-seqs N, --prefill-chunk N, --speculative-tokens N
 * (RAPID_SPECULATIVE_TOKENS; default 0 = off). rp_engine_opts_parse fills those fields of ec
 * (0 / the defaults when absent); same return convention as above. */
typedef struct rp_engine_args {
    const char *kv_cache_mb, *kv_cache_dtype, *max_num_seqs, *prefill_chunk, *spec_tokens;
} rp_engine_args;

#define RP_ENGINE_OPTS(a)                                                                      \
    {"kv-cache-mb", &(a).kv_cache_mb, NULL}, {"kv-cache-dtype", &(a).kv_cache_dtype, NULL},   \
        {"max-num-seqs", &(a).max_num_seqs, NULL}, {"prefill-chunk", &(a).prefill_chunk, NULL}, \
    {                                                                                          \
        "speculative-tokens", &(a).spec_tokens, NULL                                           \
    }

int rp_engine_opts_parse(const char *cmd, const rp_engine_args *a, rp_engine_config *ec);

#endif
