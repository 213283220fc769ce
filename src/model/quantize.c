/* model/quantize.c - MLX-layout quantization of a checkpoint, and a safetensors writer. */
#include "model/quantize.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/quant.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/half.h"
#include "model/safetensors.h"

rp_status rp_quantize_write_st(const char *path, const rp_st_out *ts, int n, rp_st_out_fn fn,
                               void *ctx, rp_err *err)
{
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < ts[i].n_dims; d++)
            json_array_append_new(shape, json_integer(ts[i].shape[d]));
        json_object_set_new(h, ts[i].name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", ts[i].dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + ts[i].n_bytes)));
        off += ts[i].n_bytes;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "mlx"));
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!hs)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    size_t hl = strlen(hs), pad = (8 - hl % 8) % 8;
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(hs);
        return rp_err_set(err, RP_ERR_IO, "cannot write %s", path);
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)(hl + pad) >> (8 * i));
    int bad = fwrite(len, 8, 1, fp) != 1 || fwrite(hs, 1, hl, fp) != hl ||
              fwrite("        ", 1, pad, fp) != pad;
    free(hs);
    for (int i = 0; i < n && !bad; i++)
        bad = fn(ctx, i, fp) != 0;
    if (fclose(fp) != 0)
        bad = 1;
    return bad ? rp_err_set(err, RP_ERR_IO, "writing %s failed", path) : RP_OK;
}

/* ---- quantize a directory -------------------------------------------------------------- */

typedef struct plan {
    const rp_st_tensor *src;
    int part; /* 0: copy, 1: packed weight, 2: scales, 3: biases */
    char name[300];
} plan;

typedef struct qctx {
    const plan *p;
    int bits, gs;
    float *scales, *biases; /* of the weight just written: rows * ng */
    size_t cap;
} qctx;

static const char *float_name(rp_dtype dt)
{
    return dt == RP_DT_F32 ? "F32" : dt == RP_DT_F16 ? "F16" : "BF16";
}

static int write_scales(FILE *fp, const float *v, size_t n, rp_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == RP_DT_F32) {
            if (fwrite(&v[i], 4, 1, fp) != 1)
                return -1;
        } else {
            uint16_t h = dt == RP_DT_F16 ? rp_f32_to_f16(v[i]) : rp_f32_to_bf16(v[i]);
            if (fwrite(&h, 2, 1, fp) != 1)
                return -1;
        }
    }
    return 0;
}

static int write_part(void *vctx, int i, FILE *fp)
{
    qctx *c = vctx;
    const plan *p = &c->p[i];
    const rp_tensor *t = &p->src->t;
    if (p->part == 0)
        return fwrite(t->data, 1, t->n_bytes, fp) == t->n_bytes ? 0 : -1;
    int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / c->gs;
    if (p->part == 2 || p->part == 3)
        return write_scales(fp, p->part == 2 ? c->scales : c->biases, (size_t)(rows * ng),
                            t->dtype);
    if ((size_t)(rows * ng) > c->cap) {
        rp_free(c->scales);
        rp_free(c->biases);
        c->cap = (size_t)(rows * ng);
        c->scales = rp_alloc(c->cap * sizeof(float));
        c->biases = rp_alloc(c->cap * sizeof(float));
    }
    float *row = rp_alloc(sizeof(float) * (size_t)cols);
    uint32_t *q = rp_alloc((size_t)cols * (size_t)c->bits / 8);
    int rc = row && q && c->scales && c->biases ? 0 : -1;
    for (int64_t r = 0; r < rows && rc == 0; r++) {
        rp_tensor_row_f32(t, r, row);
        rp_quant_mlx_row(c->bits, c->gs, row, cols, q, c->scales + r * ng, c->biases + r * ng,
                         t->dtype == RP_DT_BF16);
        if (fwrite(q, 1, (size_t)cols * (size_t)c->bits / 8, fp) != (size_t)cols * c->bits / 8)
            rc = -1;
    }
    rp_free(row);
    rp_free(q);
    return rc;
}

static int quantizable(const rp_st_tensor *t, int gs)
{
    size_t n = strlen(t->name);
    return t->known && t->t.n_dims == 2 && !rp_dtype_is_quant(t->t.dtype) && n > 7 &&
           strcmp(t->name + n - 7, ".weight") == 0 && t->t.shape[1] % gs == 0;
}

static rp_status copy_other_files(const char *src, const char *dst, rp_err *err)
{
    DIR *d = opendir(src);
    if (!d)
        return rp_err_set(err, RP_ERR_IO, "cannot list %s", src);
    struct dirent *e;
    rp_status rc = RP_OK;
    while (rc == RP_OK && (e = readdir(d))) {
        const char *n = e->d_name;
        if (n[0] == '.' || strcmp(n, "config.json") == 0 || strstr(n, ".safetensors"))
            continue;
        char *from = rp_path_join(src, n), *to = rp_path_join(dst, n);
        char *data = NULL;
        size_t len = 0;
        if (!from || !to)
            rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        else if (!rp_path_is_dir(from) && rp_file_read(from, &data, &len, NULL) == RP_OK)
            rc = rp_file_write(to, data, len, err);
        rp_free(data);
        rp_free(from);
        rp_free(to);
    }
    closedir(d);
    return rc;
}

rp_status rp_quantize_dir(const char *src, const char *dst, int bits, int group_size,
                          rp_err *err)
{
    if (bits != 4 && bits != 8)
        return rp_err_set(err, RP_ERR_INVALID, "--bits must be 4 or 8, not %d", bits);
    if (group_size != 32 && group_size != 64 && group_size != 128)
        return rp_err_set(err, RP_ERR_INVALID, "--group-size must be 32, 64 or 128, not %d",
                          group_size);
    char *cfg_path = rp_path_join(src, "config.json"), *out_cfg = NULL, *out_st = NULL;
    json_t *cfg = NULL;
    rp_st *st = NULL;
    plan *p = NULL;
    rp_st_out *outs = NULL;
    qctx c = {.bits = bits, .gs = group_size};
    rp_status rc;
    json_error_t je;
    if (!cfg_path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    cfg = json_load_file(cfg_path, 0, &je);
    if (!cfg) {
        rc = rp_err_set(err, RP_ERR_NOT_FOUND, "%s: %s", cfg_path, je.text);
        goto out;
    }
    if (json_object_get(cfg, "quantization")) {
        rc = rp_err_set(err, RP_ERR_INVALID, "%s is already quantized", src);
        goto out;
    }
    if ((rc = rp_st_open(src, &st, err)))
        goto out;
    int n = rp_st_count(st), k = 0;
    p = rp_calloc((size_t)n * 3, sizeof *p);
    outs = rp_calloc((size_t)n * 3, sizeof *outs);
    if (!p || !outs) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        if (!quantizable(t, group_size)) {
            p[k] = (plan){.src = t, .part = 0};
            snprintf(p[k].name, sizeof p[k].name, "%s", t->name);
            outs[k] = (rp_st_out){.name = p[k].name, .dtype = t->dtype, .n_dims = t->t.n_dims,
                                  .n_bytes = t->t.n_bytes};
            memcpy(outs[k].shape, t->t.shape, sizeof outs[k].shape);
            k++;
            continue;
        }
        int64_t rows = t->t.shape[0], cols = t->t.shape[1];
        size_t base = strlen(t->name) - 7, es = t->t.dtype == RP_DT_F32 ? 4 : 2;
        static const char *const suffix[] = {"weight", "scales", "biases"};
        for (int part = 1; part <= 3; part++, k++) {
            p[k] = (plan){.src = t, .part = part};
            snprintf(p[k].name, sizeof p[k].name, "%.*s.%s", (int)base, t->name,
                     suffix[part - 1]);
            outs[k] = (rp_st_out){.name = p[k].name, .n_dims = 2, .shape = {rows, 0}};
            if (part == 1) {
                outs[k].dtype = "U32";
                outs[k].shape[1] = cols * bits / 32;
                outs[k].n_bytes = (size_t)(rows * cols * bits / 8);
            } else {
                outs[k].dtype = float_name(t->t.dtype);
                outs[k].shape[1] = cols / group_size;
                outs[k].n_bytes = (size_t)(rows * (cols / group_size)) * es;
            }
        }
    }
    if (!rp_path_is_dir(dst) && mkdir(dst, 0755) != 0) {
        rc = rp_err_set(err, RP_ERR_IO, "cannot create %s", dst);
        goto out;
    }
    out_cfg = rp_path_join(dst, "config.json");
    out_st = rp_path_join(dst, "model.safetensors");
    if (!out_cfg || !out_st) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    c.p = p;
    if ((rc = rp_quantize_write_st(out_st, outs, k, write_part, &c, err)))
        goto out;
    json_object_set_new(cfg, "quantization",
                        json_pack("{s:i, s:i}", "group_size", group_size, "bits", bits));
    json_object_set_new(cfg, "quantization_config",
                        json_pack("{s:i, s:i}", "group_size", group_size, "bits", bits));
    if (json_dump_file(cfg, out_cfg, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        rc = rp_err_set(err, RP_ERR_IO, "cannot write %s", out_cfg);
        goto out;
    }
    rc = copy_other_files(src, dst, err);
out:
    rp_free(c.scales);
    rp_free(c.biases);
    rp_free(p);
    rp_free(outs);
    rp_st_close(st);
    json_decref(cfg);
    rp_free(cfg_path);
    rp_free(out_cfg);
    rp_free(out_st);
    return rc;
}
