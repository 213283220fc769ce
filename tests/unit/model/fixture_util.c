/* tests/unit/model/fixture_util.c - fixture loading and conversion (dtype, config style). */
#include "fixture_util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/half.h"
#include "model/model.h"
#include "model/safetensors.h"

int fixture_load(const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    const char *src = getenv("RP_SOURCE_DIR");
    snprintf(f->dir, sizeof f->dir, "%s/tests/golden/models/%s", src ? src : ".", name);
    char path[600];
    snprintf(path, sizeof path, "%s/ids.json", f->dir);
    json_t *j = json_load_file(path, 0, NULL);
    if (!j)
        return -1;
    json_t *ids = json_object_get(j, "ids"), *gr = json_object_get(j, "greedy");
    f->n_ids = (int)json_array_size(ids);
    f->n_greedy = (int)json_array_size(gr);
    for (int i = 0; i < f->n_ids && i < 64; i++)
        f->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    for (int i = 0; i < f->n_greedy && i < 64; i++)
        f->greedy[i] = (int32_t)json_integer_value(json_array_get(gr, (size_t)i));
    f->vocab = (int)json_integer_value(json_object_get(j, "vocab_size"));
    json_decref(j);
    snprintf(path, sizeof path, "%s/logits.bin", f->dir);
    char *data;
    size_t n;
    if (rp_file_read(path, &data, &n, NULL) || n != sizeof(float) * (size_t)f->n_ids * f->vocab)
        return -1;
    f->logits = (float *)data;
    return 0;
}

void fixture_free(fixture *f) { rp_free(f->logits); }

float max_abs_diff(const float *a, const float *b, long n)
{
    float m = 0;
    for (long i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* transformers 4 wrote rope_theta at the top and rope_scaling with "type" (older) or
 * "rope_type"; alternate between the two spellings by the factor's presence to test both. */
static void to_v4(json_t *cfg)
{
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!json_is_object(rp))
        return;
    json_incref(rp);
    json_object_del(cfg, "rope_parameters");
    json_t *theta = json_object_get(rp, "rope_theta");
    if (theta)
        json_object_set(cfg, "rope_theta", theta);
    json_object_del(rp, "rope_theta");
    const char *type = json_string_value(json_object_get(rp, "rope_type"));
    if (type && strcmp(type, "default") != 0) {
        if (strcmp(type, "linear") == 0) { /* the oldest checkpoints say "type" */
            json_object_set_new(rp, "type", json_string(type));
            json_object_del(rp, "rope_type");
        }
        json_object_set(cfg, "rope_scaling", rp);
    } else {
        json_object_set_new(cfg, "rope_scaling", json_null());
    }
    json_decref(rp);
}

/* dt: stored dtype of 2-D weights; round_bf16: store f32 values rounded through bf16. */
static int write_st(const char *path, const rp_st *st, rp_dtype dt, int round_bf16)
{
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < rp_st_count(st); i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        rp_dtype o = t->t.n_dims == 2 ? dt : RP_DT_F32;
        int64_t n = 1;
        json_t *shape = json_array();
        for (int d = 0; d < t->t.n_dims; d++) {
            n *= t->t.shape[d];
            json_array_append_new(shape, json_integer(t->t.shape[d]));
        }
        size_t nb = rp_dtype_row_bytes(o, n);
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                              o == RP_DT_F32 ? "F32" : o == RP_DT_F16 ? "F16" : "BF16", "shape",
                              shape, "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
        json_object_set_new(h, t->name, e);
        off += nb;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t hl = strlen(hs);
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return -1;
    uint64_t hl64 = hl;
    fwrite(&hl64, 8, 1, fp);
    fwrite(hs, 1, hl, fp);
    free(hs);
    for (int i = 0; i < rp_st_count(st); i++) {
        const rp_st_tensor *t = rp_st_at(st, i);
        rp_dtype o = t->t.n_dims == 2 ? dt : RP_DT_F32;
        int64_t n = (int64_t)(t->t.n_bytes / 4);
        const float *src = t->t.data; /* fixtures are f32 */
        for (int64_t k = 0; k < n; k++) {
            if (o == RP_DT_F32) {
                float v = round_bf16 && t->t.n_dims == 2 ? rp_bf16_to_f32(rp_f32_to_bf16(src[k]))
                                                         : src[k];
                fwrite(&v, 4, 1, fp);
            } else {
                uint16_t v = o == RP_DT_BF16 ? rp_f32_to_bf16(src[k]) : rp_f32_to_f16(src[k]);
                fwrite(&v, 2, 1, fp);
            }
        }
    }
    return fclose(fp);
}

int fixture_convert(const fixture *f, rp_dtype dt, int v4_config, char *out_dir)
{
    return fixture_convert_ex(f, dt, v4_config, 0, out_dir);
}

int fixture_convert_ex(const fixture *f, rp_dtype dt, int v4_config, int round_bf16,
                       char *out_dir)
{
    snprintf(out_dir, 512, "/tmp/rp_fixture_XXXXXX");
    if (!mkdtemp(out_dir))
        return -1;
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg)
        return -1;
    if (v4_config)
        to_v4(cfg);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/generation_config.json", f->dir);
    char dst[700];
    snprintf(dst, sizeof dst, "%s/generation_config.json", out_dir);
    char *g;
    size_t gn;
    if (rp_file_read(path, &g, &gn, NULL) == RP_OK) {
        rp_file_write(dst, g, gn, NULL);
        rp_free(g);
    }
    rp_st *st;
    if (rp_st_open(f->dir, &st, NULL))
        return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    int rc = write_st(path, st, dt, round_bf16);
    rp_st_close(st);
    return rc;
}

void fixture_remove(const char *dir)
{
    static const char *files[] = {"config.json", "generation_config.json", "model.safetensors",
                                  "ids.json", "logits.bin"};
    char path[700];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

float max_abs(const float *a, long n)
{
    float m = 0;
    for (long i = 0; i < n; i++)
        m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

int argmax_f32(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

float *fixture_eval(const char *dir, const int32_t *ids, int n, int vocab, int ref_kernels,
                    rp_err *err)
{
    rp_err local = {0};
    rp_err *e = err ? err : &local;
    rp_model *m = NULL;
    rp_kv *kv = NULL;
    rp_model_opts o = {.n_threads = 2, .ref_kernels = ref_kernels};
    float *lg = rp_alloc(sizeof(float) * (size_t)n * (size_t)vocab);
    if (!lg || rp_model_load(dir, &o, &m, e) || rp_kv_new(m, n, &kv, e) ||
        rp_model_eval(m, kv, ids, n, lg, 1, e)) {
        if (!err) fprintf(stderr, "%s: %s\n", dir, e->msg);
        rp_free(lg);
        lg = NULL;
    }
    rp_kv_free(kv);
    rp_model_free(m);
    return lg;
}
