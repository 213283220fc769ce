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
    const rp_st_tensor **stack; /* n_stack per-expert sources of one switch_mlp stack, or NULL */
    int n_stack;
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
    int n_src = p->stack ? p->n_stack : 1;
    if (p->part == 0) {
        for (int e = 0; e < n_src; e++) {
            const rp_tensor *x = p->stack ? &p->stack[e]->t : t;
            if (fwrite(x->data, 1, x->n_bytes, fp) != x->n_bytes)
                return -1;
        }
        return 0;
    }
    int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / c->gs;
    size_t n_groups = (size_t)(rows * ng) * (size_t)n_src;
    if (p->part == 2 || p->part == 3) /* of the weight written just before */
        return write_scales(fp, p->part == 2 ? c->scales : c->biases, n_groups, t->dtype);
    if (n_groups > c->cap) {
        rp_free(c->scales);
        rp_free(c->biases);
        c->cap = n_groups;
        c->scales = rp_alloc(c->cap * sizeof(float));
        c->biases = rp_alloc(c->cap * sizeof(float));
    }
    float *row = rp_alloc(sizeof(float) * (size_t)cols);
    uint32_t *q = rp_alloc((size_t)cols * (size_t)c->bits / 8);
    int rc = row && q && c->scales && c->biases ? 0 : -1;
    for (int e = 0; e < n_src && rc == 0; e++) {
        const rp_tensor *x = p->stack ? &p->stack[e]->t : t;
        for (int64_t r = 0; r < rows && rc == 0; r++) {
            size_t g = ((size_t)e * (size_t)rows + (size_t)r) * (size_t)ng;
            rp_tensor_row_f32(x, r, row);
            rp_quant_mlx_row(c->bits, c->gs, row, cols, q, c->scales + g, c->biases + g,
                             x->dtype == RP_DT_BF16);
            if (fwrite(q, 1, (size_t)cols * (size_t)c->bits / 8, fp) !=
                (size_t)cols * c->bits / 8)
                rc = -1;
        }
    }
    rp_free(row);
    rp_free(q);
    return rc;
}

/* A per-expert tensor "<pre>.mlp.experts.<e>.<post>": *e and the offset of <post>; 0 if not. */
static int expert_name(const char *name, int *e, size_t *pre_len, size_t *post_off)
{
    const char *at = strstr(name, ".mlp.experts.");
    int len = 0;
    if (!at || sscanf(at + 13, "%d.%n", e, &len) != 1 || !len)
        return 0;
    *pre_len = (size_t)(at - name);
    *post_off = (size_t)(at + 13 - name) + (size_t)len;
    return 1;
}

/* Expert 0 of a set stacks all of them (as mlx_lm's sanitize does for the MoE families):
 * experts 0.. while present with the same dtype and shape. Returns the count (0: not a
 * stack, the tensor stays alone), filling stack (caller frees). */
static int expert_stack(const rp_st *st, const rp_st_tensor *t, const rp_st_tensor ***stack)
{
    int e;
    size_t pre, post;
    *stack = NULL;
    if (t->t.n_dims != 2 || !expert_name(t->name, &e, &pre, &post) || e != 0)
        return 0;
    int n = 0, cap = 0;
    const rp_st_tensor **v = NULL;
    for (;; n++) {
        char name[300];
        snprintf(name, sizeof name, "%.*s.mlp.experts.%d.%s", (int)pre, t->name, n,
                 t->name + post);
        const rp_st_tensor *x = rp_st_find(st, name);
        if (!x || x->t.dtype != t->t.dtype || x->t.n_dims != 2 ||
            x->t.shape[0] != t->t.shape[0] || x->t.shape[1] != t->t.shape[1])
            break;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            const rp_st_tensor **nv = rp_realloc(v, sizeof *v * (size_t)cap);
            if (!nv) {
                rp_free(v);
                return -1;
            }
            v = nv;
        }
        v[n] = x;
    }
    *stack = v;
    return n;
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
        const rp_st_tensor **stack = NULL;
        int n_stack = expert_stack(st, t, &stack), e = 0;
        size_t pre = 0, post = 0;
        if (n_stack < 0) {
            rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (!n_stack && t->t.n_dims == 2 && expert_name(t->name, &e, &pre, &post)) {
            char first[300]; /* expert e > 0 of a stack: written with expert 0 */
            snprintf(first, sizeof first, "%.*s.mlp.experts.0.%s", (int)pre, t->name,
                     t->name + post);
            const rp_st_tensor **s0;
            int n0 = rp_st_find(st, first) ? expert_stack(st, rp_st_find(st, first), &s0) : 0;
            if (n0 > 0)
                rp_free(s0);
            if (n0 > e)
                continue;
        }
        char name[300]; /* the output's name: switch_mlp for a stack */
        if (n_stack && expert_name(t->name, &e, &pre, &post))
            snprintf(name, sizeof name, "%.*s.mlp.switch_mlp.%s", (int)pre, t->name,
                     t->name + post);
        else
            snprintf(name, sizeof name, "%s", t->name);
        int sd = n_stack ? 1 : 0; /* a stack's outputs have a leading expert dimension */
        if (!quantizable(t, group_size)) {
            p[k] = (plan){.src = t, .stack = stack, .n_stack = n_stack, .part = 0};
            snprintf(p[k].name, sizeof p[k].name, "%s", name);
            outs[k] = (rp_st_out){.name = p[k].name, .dtype = t->dtype,
                                  .n_dims = t->t.n_dims + sd,
                                  .n_bytes = t->t.n_bytes * (size_t)(n_stack ? n_stack : 1)};
            outs[k].shape[0] = n_stack;
            memcpy(outs[k].shape + sd, t->t.shape, sizeof(int64_t) * (size_t)t->t.n_dims);
            k++;
            continue;
        }
        int64_t rows = t->t.shape[0], cols = t->t.shape[1], ns = n_stack ? n_stack : 1;
        size_t base = strlen(name) - 7, es = t->t.dtype == RP_DT_F32 ? 4 : 2;
        static const char *const suffix[] = {"weight", "scales", "biases"};
        for (int part = 1; part <= 3; part++, k++) {
            /* the stack's list is owned by its first plan entry */
            p[k] = (plan){.src = t, .stack = stack, .n_stack = n_stack, .part = part};
            snprintf(p[k].name, sizeof p[k].name, "%.*s.%s", (int)base, name, suffix[part - 1]);
            outs[k] = (rp_st_out){.name = p[k].name, .n_dims = 2 + sd, .shape = {ns, rows, 0}};
            int64_t c1 = part == 1 ? cols * bits / 32 : cols / group_size;
            outs[k].shape[0] = n_stack ? ns : rows;
            outs[k].shape[1] = n_stack ? rows : c1;
            outs[k].shape[2] = n_stack ? c1 : 0;
            if (part == 1) {
                outs[k].dtype = "U32";
                outs[k].n_bytes = (size_t)(ns * rows * cols * bits / 8);
            } else {
                outs[k].dtype = float_name(t->t.dtype);
                outs[k].n_bytes = (size_t)(ns * rows * (cols / group_size)) * es;
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
    for (int i = 0; p && outs && i < 3 * rp_st_count(st); i++)
        if (p[i].stack && (i == 0 || p[i - 1].stack != p[i].stack))
            rp_free((void *)p[i].stack);
    rp_free(p);
    rp_free(outs);
    rp_st_close(st);
    json_decref(cfg);
    rp_free(cfg_path);
    rp_free(out_cfg);
    rp_free(out_st);
    return rc;
}
