/* model/mlx.c - binding MLX affine-quantized weights (packed U32 + scales + biases). */
#include "model/mlx.h"

#include <string.h>

static json_t *quant_obj(const rp_model_config *cfg)
{
    json_t *q = json_object_get(cfg->root, "quantization");
    if (!json_is_object(q))
        q = json_object_get(cfg->root, "quantization_config");
    if (!json_is_object(q) && cfg->json != cfg->root)
        q = json_object_get(cfg->json, "quantization");
    return json_is_object(q) ? q : NULL;
}

static int num(json_t *o, const char *k, int def)
{
    json_t *v = o ? json_object_get(o, k) : NULL;
    return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

static rp_status bind_one(rp_st *st, rp_st_tensor *w, json_t *q, rp_err *err)
{
    char path[256];
    size_t n = strlen(w->name);
    if (n < 8 || n - 7 >= sizeof path)
        return RP_OK;
    memcpy(path, w->name, n - 7);
    path[n - 7] = 0;
    char sname[300], bname[300];
    snprintf(sname, sizeof sname, "%s.scales", path);
    snprintf(bname, sizeof bname, "%s.biases", path);
    rp_st_tensor *s = rp_st_find_mut(st, sname), *b = rp_st_find_mut(st, bname);
    if (!s && !b)
        return RP_OK; /* a U32 tensor that is not a quantized weight: leave it alone */
    if (!s || !b || !s->known || !b->known || s->t.dtype != b->t.dtype)
        return rp_err_set(err, RP_ERR_INVALID,
                          "quantized weight '%s' needs float '%s' and '%s' of one dtype",
                          w->name, sname, bname);
    json_t *ov = q ? json_object_get(q, path) : NULL;
    int bits = num(json_is_object(ov) ? ov : q, "bits", num(q, "bits", 4));
    int gs = num(json_is_object(ov) ? ov : q, "group_size", num(q, "group_size", 64));
    if (bits != 4 && bits != 8)
        return rp_err_set(err, RP_ERR_UNSUPPORTED,
                          "'%s' is quantized to %d bits; rapid runs MLX 4- and 8-bit", w->name,
                          bits);
    if (gs != 32 && gs != 64 && gs != 128)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "'%s': group size %d is not 32, 64 or 128",
                          w->name, gs);
    int nd = w->t.n_dims;
    if ((nd != 2 && nd != 3) || s->t.n_dims != nd || b->t.n_dims != nd)
        return rp_err_set(err, RP_ERR_INVALID,
                          "quantized weight '%s' must be 2-D (or a 3-D expert stack) like its "
                          "scales and biases",
                          w->name);
    int64_t lead = nd == 3 ? w->t.shape[0] : 1, rows = w->t.shape[nd - 2],
            cols = w->t.shape[nd - 1] * 32 / bits;
    int same_lead = nd == 2 || (s->t.shape[0] == lead && b->t.shape[0] == lead);
    if (!same_lead || s->t.shape[nd - 2] != rows || b->t.shape[nd - 2] != rows ||
        s->t.shape[nd - 1] * gs != cols || b->t.shape[nd - 1] != s->t.shape[nd - 1])
        return rp_err_set(err, RP_ERR_INVALID,
                          "'%s' is [%lld, %lld] packed (%d-bit: %lld columns) but '%s' is "
                          "[%lld, %lld] (group size %d)",
                          w->name, (long long)rows, (long long)w->t.shape[nd - 1], bits,
                          (long long)cols, sname, (long long)s->t.shape[nd - 2],
                          (long long)s->t.shape[nd - 1], gs);
    w->t.dtype = bits == 4 ? RP_DT_MLX4 : RP_DT_MLX8;
    w->t.shape[nd - 1] = cols; /* a 3-D stack: [experts][rows][cols], groups per row */
    w->t.scales = s->t.data;
    w->t.biases = b->t.data;
    w->t.scale_dtype = s->t.dtype;
    w->t.group_size = gs;
    w->known = 1;
    s->known = b->known = 0; /* consumed: not weights of their own */
    return RP_OK;
}

rp_status rp_mlx_bind(rp_st *st, const rp_model_config *cfg, rp_err *err)
{
    json_t *q = quant_obj(cfg);
    for (int i = 0; i < rp_st_count(st); i++) {
        rp_st_tensor *t = rp_st_at_mut(st, i);
        size_t n = strlen(t->name);
        if (strcmp(t->dtype, "U32") != 0 || n < 7 || strcmp(t->name + n - 7, ".weight") != 0)
            continue;
        rp_status rc = bind_one(st, t, q, err);
        if (rc)
            return rc;
    }
    return RP_OK;
}
