/* model/rope.c - rotary frequencies (transformers' modeling_rope_utils, re-derived). */
#include "model/rope.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

static void default_freqs(float *inv, int rot_dim, float base)
{
    for (int i = 0; i < rot_dim / 2; i++)
        inv[i] = 1.0f / powf(base, (float)(2 * i) / (float)rot_dim);
}

static float yarn_get_mscale(float scale, float mscale)
{
    return scale <= 1.0f ? 1.0f : 0.1f * mscale * logf(scale) + 1.0f;
}

static float yarn_correction_dim(float n_rot, int dim, float base, int max_pos)
{
    return (float)dim * logf((float)max_pos / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

static void yarn_freqs(rp_rope *r, int max_pos)
{
    rp_rope_config *c = &r->cfg;
    int dim = r->rot_dim;
    float factor = c->factor;
    int orig = c->original_max_pos > 0 ? c->original_max_pos : max_pos;
    if (c->attention_factor > 0)
        r->attn_factor = c->attention_factor;
    else if (c->mscale > 0 && c->mscale_all_dim > 0)
        r->attn_factor = yarn_get_mscale(factor, c->mscale) / yarn_get_mscale(factor, c->mscale_all_dim);
    else
        r->attn_factor = yarn_get_mscale(factor, 1.0f);
    float low = yarn_correction_dim(c->beta_fast, dim, c->theta, orig);
    float high = yarn_correction_dim(c->beta_slow, dim, c->theta, orig);
    if (c->truncate) {
        low = floorf(low);
        high = ceilf(high);
    }
    if (low < 0)
        low = 0;
    if (high > dim - 1)
        high = (float)(dim - 1);
    if (low == high)
        high += 0.001f;
    for (int i = 0; i < dim / 2; i++) {
        float pos_freq = powf(c->theta, (float)(2 * i) / (float)dim);
        float extra = 1.0f / pos_freq, inter = 1.0f / (factor * pos_freq);
        float ramp = ((float)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float extra_factor = 1.0f - ramp;
        r->inv_freq[i] = inter * (1.0f - extra_factor) + extra * extra_factor;
    }
}

static void llama3_freqs(rp_rope *r)
{
    rp_rope_config *c = &r->cfg;
    default_freqs(r->inv_freq, r->rot_dim, c->theta);
    float old_len = (float)(c->original_max_pos > 0 ? c->original_max_pos : 8192);
    float low_wl = old_len / c->low_freq_factor, high_wl = old_len / c->high_freq_factor;
    for (int i = 0; i < r->rot_dim / 2; i++) {
        float f = r->inv_freq[i], wl = 2.0f * (float)M_PI / f;
        float scaled = wl > low_wl ? f / c->factor : f;
        if (!(wl < high_wl) && !(wl > low_wl)) {
            float smooth = (old_len / wl - c->low_freq_factor) /
                           (c->high_freq_factor - c->low_freq_factor);
            scaled = (1.0f - smooth) * scaled / c->factor + smooth * scaled;
        }
        r->inv_freq[i] = scaled;
    }
}

/* NTK-aware dynamic scaling: the base grows once the sequence passes max_pos. */
static void dynamic_freqs(rp_rope *r, int seq_len)
{
    rp_rope_config *c = &r->cfg;
    float base = c->theta;
    if (seq_len > r->max_pos) {
        float dim = (float)r->rot_dim;
        base = c->theta * powf(c->factor * (float)seq_len / (float)r->max_pos - (c->factor - 1.0f),
                               dim / (dim - 2.0f));
    }
    default_freqs(r->inv_freq, r->rot_dim, base);
}

static void longrope_freqs(rp_rope *r, int seq_len)
{
    rp_rope_config *c = &r->cfg;
    int orig = c->original_max_pos > 0 ? c->original_max_pos : r->max_pos;
    const float *ext = seq_len > orig ? r->long_factor : r->short_factor;
    for (int i = 0; i < r->rot_dim / 2; i++)
        r->inv_freq[i] = 1.0f / (ext[i] * powf(c->theta, (float)(2 * i) / (float)r->rot_dim));
}

static rp_status read_factor_list(const rp_model_config *cfg, const char *key, float **out,
                                  int n, rp_err *err)
{
    json_t *p = json_object_get(cfg->json, "rope_parameters");
    if (!json_is_object(p))
        p = json_object_get(cfg->json, "rope_scaling");
    json_t *a = json_object_get(p, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        return rp_err_set(err, RP_ERR_INVALID, "config.json: longrope needs '%s' with %d numbers",
                          key, n);
    *out = rp_alloc(sizeof(float) * (size_t)n);
    if (!*out)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        (*out)[i] = (float)json_number_value(json_array_get(a, (size_t)i));
    return RP_OK;
}

/* rope_parameters.freq_factors (what a GGUF's rope_freqs tensor holds, Llama 3.1+): one
 * divisor per frequency, applied to the static frequencies. */
static rp_status apply_freq_factors(rp_rope *r, const rp_model_config *cfg, rp_err *err)
{
    json_t *p = json_object_get(cfg->json, "rope_parameters");
    json_t *a = json_is_object(p) ? json_object_get(p, "freq_factors") : NULL;
    if (!a)
        return RP_OK;
    int n = r->rot_dim / 2;
    if (!json_is_array(a) || (int)json_array_size(a) != n || r->dynamic) {
        rp_rope_deinit(r);
        return rp_err_set(err, RP_ERR_INVALID,
                          "rope freq_factors: %d numbers needed for a static rope type", n);
    }
    for (int i = 0; i < n; i++) {
        double f = json_number_value(json_array_get(a, (size_t)i));
        if (!(f > 0)) {
            rp_rope_deinit(r);
            return rp_err_set(err, RP_ERR_INVALID, "rope freq_factors[%d] is %g", i, f);
        }
        r->inv_freq[i] = (float)(r->inv_freq[i] / f);
    }
    return RP_OK;
}

rp_status rp_rope_init(rp_rope *r, const rp_model_config *cfg, int head_dim, rp_err *err)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg->rope;
    r->max_pos = cfg->max_pos;
    r->head_dim = head_dim;
    r->rot_dim = (int)((float)head_dim * cfg->rope.partial_rotary_factor);
    r->rot_dim -= r->rot_dim % 2;
    r->attn_factor = 1.0f;
    r->inv_freq = rp_alloc(sizeof(float) * (size_t)(r->rot_dim / 2 + 1));
    if (!r->inv_freq)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    const char *t = r->cfg.type;
    if (strcmp(t, "default") == 0) {
        default_freqs(r->inv_freq, r->rot_dim, r->cfg.theta);
    } else if (strcmp(t, "linear") == 0) {
        default_freqs(r->inv_freq, r->rot_dim, r->cfg.theta);
        for (int i = 0; i < r->rot_dim / 2; i++)
            r->inv_freq[i] /= r->cfg.factor;
    } else if (strcmp(t, "dynamic") == 0) {
        r->dynamic = 1;
        dynamic_freqs(r, 0);
    } else if (strcmp(t, "yarn") == 0) {
        yarn_freqs(r, cfg->max_pos);
    } else if (strcmp(t, "llama3") == 0) {
        llama3_freqs(r);
    } else if (strcmp(t, "longrope") == 0) {
        rp_status rc;
        if ((rc = read_factor_list(cfg, "long_factor", &r->long_factor, r->rot_dim / 2, err)) ||
            (rc = read_factor_list(cfg, "short_factor", &r->short_factor, r->rot_dim / 2, err))) {
            rp_rope_deinit(r);
            return rc;
        }
        int orig = r->cfg.original_max_pos > 0 ? r->cfg.original_max_pos : cfg->max_pos;
        float scale = (float)cfg->max_pos / (float)orig;
        r->attn_factor = r->cfg.attention_factor > 0 ? r->cfg.attention_factor
                         : scale <= 1.0f            ? 1.0f
                                                    : sqrtf(1.0f + logf(scale) / logf((float)orig));
        r->dynamic = 1;
        longrope_freqs(r, 0);
    } else {
        rp_rope_deinit(r);
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "config.json: rope type '%s' is not supported",
                          t);
    }
    return apply_freq_factors(r, cfg, err);
}

void rp_rope_update(rp_rope *r, int seq_len)
{
    if (!r->dynamic || seq_len <= r->cur_len)
        return;
    r->cur_len = seq_len;
    if (r->long_factor)
        longrope_freqs(r, seq_len);
    else
        dynamic_freqs(r, seq_len);
}

void rp_rope_deinit(rp_rope *r)
{
    rp_free(r->inv_freq);
    rp_free(r->long_factor);
    rp_free(r->short_factor);
    memset(r, 0, sizeof *r);
}
