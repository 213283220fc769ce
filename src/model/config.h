/* model/config.h - a model's config.json (and generation_config.json) as one struct.
 *
 * Both key styles are read: transformers 4 (`rope_theta`, `rope_scaling` with `rope_type` or
 * `type`) and transformers 5 (`rope_parameters`). Multimodal configs with a `text_config`
 * are read from that object. The parsed JSON stays available (cfg->json) for the keys only
 * one architecture family uses.
 *
 * Ownership: rp_model_config_load fills a caller-provided struct; rp_model_config_deinit
 *            releases it (json reference).
 * Threading: plain data after loading.
 * Errors:    RP_ERR_NOT_FOUND (no config.json), RP_ERR_INVALID (malformed or missing key, named).
 */
#ifndef RP_MODEL_CONFIG_H
#define RP_MODEL_CONFIG_H

#include <jansson.h>

#include "base/status.h"
#include "model/model.h"

typedef struct rp_rope_config {
    char type[24];           /* default, linear, dynamic, yarn, llama3, longrope */
    float theta;
    float factor;
    float low_freq_factor;   /* llama3 */
    float high_freq_factor;  /* llama3 */
    int original_max_pos;    /* llama3, yarn, longrope: 0 when not given */
    float beta_fast, beta_slow; /* yarn */
    float attention_factor;  /* yarn / longrope: 0 when not given */
    float mscale, mscale_all_dim; /* yarn (DeepSeek style) */
    int truncate;            /* yarn: floor/ceil the correction range (default 1) */
    float partial_rotary_factor; /* fraction of head_dim rotated (1 = all) */
} rp_rope_config;

typedef struct rp_model_config {
    char arch[64];
    char model_type[32];
    int vocab_size;
    int dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn_dim;
    int max_pos;
    float norm_eps;
    int tied_embeddings;
    int sliding_window; /* 0: none */
    char hidden_act[24];
    rp_rope_config rope;
    int bos_id;
    int eos_ids[RP_MAX_EOS];
    int n_eos;
    json_t *json; /* the (text) config object; owned reference */
    json_t *root; /* the whole config.json; owned reference */
} rp_model_config;

rp_status rp_model_config_load(const char *dir, rp_model_config *cfg, rp_err *err);
/* Parses from an already-loaded config.json object (the model dir is still used for
 * generation_config.json when dir != NULL). Takes a new reference to root. */
rp_status rp_model_config_parse(json_t *root, const char *dir, rp_model_config *cfg, rp_err *err);
void rp_model_config_deinit(rp_model_config *cfg);

/* Typed lookups on cfg->json with a default. */
int rp_config_int(const rp_model_config *cfg, const char *key, int def);
double rp_config_num(const rp_model_config *cfg, const char *key, double def);
int rp_config_bool(const rp_model_config *cfg, const char *key, int def);

#endif
