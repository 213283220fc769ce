/* model/config.c - config.json parsing (both transformers 4 and 5 styles). */
#include "model/config.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"

static double num_or(json_t *obj, const char *key, double def)
{
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    return json_is_number(v) ? json_number_value(v) : def;
}

int rp_config_int(const rp_model_config *cfg, const char *key, int def)
{
    return (int)num_or(cfg->json, key, def);
}

double rp_config_num(const rp_model_config *cfg, const char *key, double def)
{
    return num_or(cfg->json, key, def);
}

int rp_config_bool(const rp_model_config *cfg, const char *key, int def)
{
    json_t *v = json_object_get(cfg->json, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static rp_status need_int(json_t *obj, const char *key, int *out, rp_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 30))
        return rp_err_set(err, RP_ERR_INVALID, "config.json: '%s' must be a positive integer",
                          key);
    *out = (int)json_integer_value(v);
    return RP_OK;
}

static void copy_str(char *dst, size_t n, json_t *v, const char *def)
{
    const char *s = json_is_string(v) ? json_string_value(v) : def;
    snprintf(dst, n, "%s", s);
}

/* Adds ids from an int or a list of ints, skipping duplicates. */
static void add_eos(rp_model_config *cfg, json_t *v)
{
    if (json_is_integer(v)) {
        int id = (int)json_integer_value(v);
        for (int i = 0; i < cfg->n_eos; i++)
            if (cfg->eos_ids[i] == id)
                return;
        if (cfg->n_eos < RP_MAX_EOS && id >= 0)
            cfg->eos_ids[cfg->n_eos++] = id;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) add_eos(cfg, e);
    }
}

/* rope_parameters (v5) or rope_theta + rope_scaling (v4) into cfg->rope. */
static void parse_rope(rp_model_config *cfg, json_t *c)
{
    rp_rope_config *r = &cfg->rope;
    json_t *p = json_object_get(c, "rope_parameters");
    if (!json_is_object(p))
        p = json_object_get(c, "rope_scaling");
    if (!json_is_object(p))
        p = NULL;
    json_t *type = p ? json_object_get(p, "rope_type") : NULL;
    if (!json_is_string(type) && p)
        type = json_object_get(p, "type");
    copy_str(r->type, sizeof r->type, type, "default");
    if (strcmp(r->type, "su") == 0) /* old name of longrope */
        snprintf(r->type, sizeof r->type, "longrope");
    r->theta = (float)num_or(p, "rope_theta", num_or(c, "rope_theta", 10000.0));
    r->factor = (float)num_or(p, "factor", 1.0);
    r->low_freq_factor = (float)num_or(p, "low_freq_factor", 1.0);
    r->high_freq_factor = (float)num_or(p, "high_freq_factor", 4.0);
    r->original_max_pos = (int)num_or(p, "original_max_position_embeddings",
                                      num_or(c, "original_max_position_embeddings", 0));
    r->beta_fast = (float)num_or(p, "beta_fast", 32.0);
    r->beta_slow = (float)num_or(p, "beta_slow", 1.0);
    r->attention_factor = (float)num_or(p, "attention_factor", 0.0);
    r->mscale = (float)num_or(p, "mscale", 0.0);
    r->mscale_all_dim = (float)num_or(p, "mscale_all_dim", 0.0);
    json_t *tr = p ? json_object_get(p, "truncate") : NULL;
    r->truncate = json_is_boolean(tr) ? json_is_true(tr) : 1;
    r->partial_rotary_factor =
        (float)num_or(p, "partial_rotary_factor", num_or(c, "partial_rotary_factor", 1.0));
}

static void read_generation_config(rp_model_config *cfg, const char *dir)
{
    if (!dir)
        return;
    char *path = rp_path_join(dir, "generation_config.json");
    if (!path)
        return;
    json_error_t je;
    json_t *g = json_load_file(path, 0, &je);
    rp_free(path);
    if (!g)
        return;
    json_t *eos = json_object_get(g, "eos_token_id");
    if (eos)
        cfg->n_eos = 0; /* generation_config's list is the one generate() uses */
    add_eos(cfg, eos);
    json_t *bos = json_object_get(g, "bos_token_id");
    if (json_is_integer(bos))
        cfg->bos_id = (int)json_integer_value(bos);
    json_decref(g);
}

rp_status rp_model_config_parse(json_t *root, const char *dir, rp_model_config *cfg, rp_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!json_is_object(root))
        return rp_err_set(err, RP_ERR_INVALID, "config.json: not a JSON object");
    cfg->root = json_incref(root);
    json_t *c = root, *tc = json_object_get(root, "text_config");
    if (json_is_object(tc))
        c = tc;
    cfg->json = json_incref(c);
    json_t *archs = json_object_get(root, "architectures");
    copy_str(cfg->arch, sizeof cfg->arch, json_array_get(archs, 0), "");
    copy_str(cfg->model_type, sizeof cfg->model_type, json_object_get(c, "model_type"),
             json_string_value(json_object_get(root, "model_type")) ?: "");
    rp_status rc;
    if ((rc = need_int(c, "vocab_size", &cfg->vocab_size, err)) ||
        (rc = need_int(c, "hidden_size", &cfg->dim, err)) ||
        (rc = need_int(c, "num_hidden_layers", &cfg->n_layers, err)) ||
        (rc = need_int(c, "num_attention_heads", &cfg->n_heads, err)))
        goto fail;
    cfg->n_kv_heads = (int)num_or(c, "num_key_value_heads", cfg->n_heads);
    json_t *hd = json_object_get(c, "head_dim");
    cfg->head_dim = json_is_integer(hd) ? (int)json_integer_value(hd) : cfg->dim / cfg->n_heads;
    cfg->ffn_dim = (int)num_or(c, "intermediate_size", 0);
    cfg->max_pos = (int)num_or(c, "max_position_embeddings", 4096);
    cfg->norm_eps = (float)num_or(c, "rms_norm_eps", num_or(c, "layer_norm_eps", 1e-6));
    json_t *tie = json_object_get(c, "tie_word_embeddings");
    if (!json_is_boolean(tie))
        tie = json_object_get(root, "tie_word_embeddings");
    cfg->tied_embeddings = json_is_boolean(tie) ? json_is_true(tie) : 0;
    json_t *sw = json_object_get(c, "sliding_window");
    cfg->sliding_window = json_is_integer(sw) ? (int)json_integer_value(sw) : 0;
    copy_str(cfg->hidden_act, sizeof cfg->hidden_act, json_object_get(c, "hidden_act"), "silu");
    if (cfg->n_kv_heads <= 0 || cfg->n_heads % cfg->n_kv_heads != 0 || cfg->head_dim <= 0) {
        rc = rp_err_set(err, RP_ERR_INVALID,
                        "config.json: num_attention_heads (%d) must be a multiple of "
                        "num_key_value_heads (%d)",
                        cfg->n_heads, cfg->n_kv_heads);
        goto fail;
    }
    parse_rope(cfg, c);
    json_t *bos = json_object_get(c, "bos_token_id");
    if (!bos)
        bos = json_object_get(root, "bos_token_id");
    cfg->bos_id = json_is_integer(bos) ? (int)json_integer_value(bos) : -1;
    json_t *eos = json_object_get(c, "eos_token_id");
    add_eos(cfg, eos ? eos : json_object_get(root, "eos_token_id"));
    read_generation_config(cfg, dir);
    return RP_OK;
fail:
    rp_model_config_deinit(cfg);
    return rc;
}

rp_status rp_model_config_load(const char *dir, rp_model_config *cfg, rp_err *err)
{
    char *path = rp_path_join(dir, "config.json");
    if (!path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    rp_status rc;
    if (!root) {
        rc = rp_path_exists(path)
                 ? rp_err_set(err, RP_ERR_INVALID, "%s: %s (line %d)", path, je.text, je.line)
                 : rp_err_set(err, RP_ERR_NOT_FOUND,
                              "%s has no config.json: is it a Hugging Face model directory?", dir);
        rp_free(path);
        return rc;
    }
    rp_free(path);
    rc = rp_model_config_parse(root, dir, cfg, err);
    json_decref(root);
    return rc;
}

void rp_model_config_deinit(rp_model_config *cfg)
{
    if (!cfg)
        return;
    json_decref(cfg->json);
    json_decref(cfg->root);
    cfg->json = cfg->root = NULL;
}
