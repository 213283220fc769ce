/* tests/gpu/gpu_check.c - every dense fixture on the CUDA backend against transformers and
 * the CPU backend (run by scripts/gpu-test.sh on a machine with a GPU; prints one line per
 * check and exits non-zero when any fails).
 *
 * Per fixture (f32 weights): prefill logits of every position (the cuBLASLt path) and
 * token-by-token decode (the matvec path) within F32_TOL of transformers' logits, a batched
 * step over three sequences at different positions giving the same rows, and greedy
 * generation through the engine equal to the CPU's and to transformers'. The same
 * checkpoint converted to bf16: GPU logits within BF16_GPU_TOL of the CPU's on the same
 * bf16 weights (the GPU's GEMM rounds activations to bf16, the CPU's kernels do not; decode
 * goes through the matvec, which keeps them f32, and is checked against transformers) and
 * within the CPU test's BF16_TOL of transformers' f32 logits. MLX 4/8-bit kernels and
 * quantized fixtures: gpu_check_quant.c (arguments: "kernels", "qkernels", a fixture name,
 * "quant" for every quantized fixture, none for everything).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/half.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "gpu_check.h"
#include "model/kv_cache.h"
#include "model/model.h"

#define F32_TOL 1e-3f
#define BF16_TOL 0.25f
/* The GPU's GEMM path rounds activations to bf16 (the CPU's bf16 kernels keep them f32);
 * on these random models that moves logits by up to 0.15 (measured on the H200), the same
 * order as bf16 weights vs f32 ones (0.16, see model_test.c). */
#define BF16_GPU_TOL 0.2f

static const char *g_dense[] = {"llama_gqa",   "llama_tied_mha",    "llama_headdim",
                                "llama3_rope", "llama_linear_rope", "llama_yarn_rope",
                                "llama_sharded", "mistral",         "qwen2",
                                "qwen2_untied", "qwen3",            "qwen3_untied",
                                "phi3",        "gemma3",            "qwen3_moe"};

static int g_fail, g_pass;

void gpu_check_report(int ok, const char *name, const char *what, double v, double tol)
{
    printf("%-5s %-18s %-34s %.3g (tol %.3g)\n", ok ? "ok" : "FAIL", name, what, v, tol);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

static rp_model *load(const char *dir, rp_device dev)
{
    rp_model_opts o = {.n_threads = 4, .device = dev};
    rp_model *m = NULL;
    rp_err err = {0};
    if (rp_model_load(dir, &o, &m, &err)) {
        printf("FAIL load %s: %s\n", dir, err.msg);
        g_fail++;
        return NULL;
    }
    return m;
}

static float *prefill(rp_model *m, const fixture *f)
{
    rp_kv *kv = NULL;
    rp_err err = {0};
    float *lg = rp_alloc(sizeof(float) * (size_t)f->n_ids * f->vocab);
    if (rp_kv_new(m, 64, &kv, &err) || rp_model_eval(m, kv, f->ids, f->n_ids, lg, 1, &err)) {
        printf("FAIL prefill: %s\n", err.msg);
        rp_free(lg);
        lg = NULL;
    }
    rp_kv_free(kv);
    return lg;
}

static float decode_worst(rp_model *m, const fixture *f)
{
    rp_kv *kv = NULL;
    rp_err err = {0};
    float *row = rp_alloc(sizeof(float) * (size_t)f->vocab), worst = 0;
    if (rp_kv_new(m, 64, &kv, &err) || rp_model_eval(m, kv, f->ids, 3, row, 0, &err))
        worst = INFINITY;
    else
        worst = max_abs_diff(row, f->logits + 2 * f->vocab, f->vocab);
    for (int t = 3; t < f->n_ids && isfinite(worst); t++) {
        if (rp_model_eval(m, kv, &f->ids[t], 1, row, 0, &err)) {
            worst = INFINITY;
            break;
        }
        float d = max_abs_diff(row, f->logits + (long)t * f->vocab, f->vocab);
        worst = d > worst ? d : worst;
    }
    rp_free(row);
    rp_kv_free(kv);
    return worst;
}

/* Sequences A (5 cached), B (2 cached) and C (fresh) in one step: A's token 5, B's 2 and 3,
 * C's 0; rows must equal the fixture's rows 5, 3, 0. */
static float batch_worst(rp_model *m, const fixture *f)
{
    rp_kv *a = NULL, *b = NULL, *c = NULL;
    rp_kv_pool *pool = NULL; /* the sequences of one step share a pool */
    rp_kv_pool_opts po = {.dtype = RP_KV_F32, .n_blocks = 16};
    rp_err err = {0};
    float worst = INFINITY;
    float *lg = rp_alloc(sizeof(float) * 3 * (size_t)f->vocab);
    if (f->n_ids < 6 || rp_kv_pool_new(m, &po, &pool, &err) ||
        rp_kv_new_in(pool, 64, &a, &err) || rp_kv_new_in(pool, 64, &b, &err) ||
        rp_kv_new_in(pool, 64, &c, &err) || rp_model_eval(m, a, f->ids, 5, NULL, 0, &err) ||
        rp_model_eval(m, b, f->ids, 2, NULL, 0, &err))
        goto out;
    int32_t ids[4] = {f->ids[5], f->ids[2], f->ids[3], f->ids[0]};
    rp_kv *kvs[4] = {a, b, b, c};
    uint8_t want[4] = {1, 0, 1, 1};
    rp_batch bt = {.n_tok = 4, .ids = ids, .kv = kvs, .want_logits = want};
    if (rp_model_eval_batch(m, &bt, lg, &err))
        goto out;
    const int ref_rows[3] = {5, 3, 0};
    worst = 0;
    for (int i = 0; i < 3; i++) {
        float d = max_abs_diff(lg + (long)i * f->vocab, f->logits + (long)ref_rows[i] * f->vocab,
                               f->vocab);
        worst = d > worst ? d : worst;
    }
out:
    if (!isfinite(worst))
        printf("batch: %s\n", err.msg);
    rp_free(lg);
    rp_kv_free(a);
    rp_kv_free(b);
    rp_kv_free(c);
    rp_kv_pool_free(pool);
    return worst;
}

static int greedy(rp_model *m, const fixture *f, int32_t *out)
{
    rp_engine *e = NULL;
    rp_err err = {0};
    rp_engine_config ec = {.max_context = 64};
    rp_gen_request req = {.prompt = f->ids, .n_prompt = f->n_ids, .max_tokens = f->n_greedy,
                          .ignore_eos = 1, .n_top_logprobs = -1};
    rp_sampling_default(&req.sampling);
    req.sampling.temperature = 0;
    int32_t *toks = NULL;
    int n = 0;
    if (rp_engine_new(m, &ec, &e, &err) || rp_engine_generate(e, &req, &toks, &n, NULL, &err)) {
        printf("greedy: %s\n", err.msg);
        n = -1;
    }
    for (int i = 0; i < n; i++)
        out[i] = toks[i];
    rp_free(toks);
    rp_engine_free(e);
    return n;
}

static void run_fixture(const char *name)
{
    fixture f;
    if (fixture_load(name, &f)) {
        printf("FAIL %s: fixture missing\n", name);
        g_fail++;
        return;
    }
    rp_model *g = load(f.dir, RP_DEVICE_CUDA), *c = load(f.dir, RP_DEVICE_CPU);
    if (g && c) {
        float *lg = prefill(g, &f);
        float d = lg ? max_abs_diff(lg, f.logits, (long)f.n_ids * f.vocab) : INFINITY;
        gpu_check_report(d <= F32_TOL, name, "prefill vs transformers", d, F32_TOL);
        rp_free(lg);
        d = decode_worst(g, &f);
        gpu_check_report(d <= F32_TOL, name, "decode vs transformers", d, F32_TOL);
        d = batch_worst(g, &f);
        gpu_check_report(d <= F32_TOL, name, "3-sequence step vs transformers", d, F32_TOL);
        int32_t tg[64], tc[64];
        int ng = greedy(g, &f, tg), nc = greedy(c, &f, tc), same = ng == nc && ng == f.n_greedy;
        int mism = 0;
        for (int i = 0; same && i < ng; i++)
            mism += tg[i] != tc[i] || tg[i] != f.greedy[i];
        gpu_check_report(same && mism == 0, name, "greedy tokens == CPU == HF", mism, 0);
    }
    rp_model_free(g);
    rp_model_free(c);
    char dir[512];
    if (fixture_convert(&f, RP_DT_BF16, 0, dir) == 0) {
        g = load(dir, RP_DEVICE_CUDA);
        c = load(dir, RP_DEVICE_CPU);
        if (g && c) {
            float *lg = prefill(g, &f), *lc = prefill(c, &f);
            float d = lg && lc ? max_abs_diff(lg, lc, (long)f.n_ids * f.vocab) : INFINITY;
            gpu_check_report(d <= BF16_GPU_TOL, name, "bf16 prefill GPU vs CPU", d, BF16_GPU_TOL);
            d = lg ? max_abs_diff(lg, f.logits, (long)f.n_ids * f.vocab) : INFINITY;
            gpu_check_report(d <= BF16_TOL, name, "bf16 prefill GPU vs transformers", d, BF16_TOL);
            float dd = decode_worst(g, &f);
            gpu_check_report(dd <= BF16_TOL, name, "bf16 decode GPU vs transformers", dd, BF16_TOL);
            int32_t tg[64], tc[64];
            int ng = greedy(g, &f, tg), nc = greedy(c, &f, tc), mism = ng != nc;
            for (int i = 0; !mism && i < ng; i++)
                mism += tg[i] != tc[i];
            printf("info  %-18s bf16 greedy GPU vs CPU: %d of %d differ\n", name, mism, ng);
            rp_free(lg);
            rp_free(lc);
        }
        rp_model_free(g);
        rp_model_free(c);
        fixture_remove(dir);
    } else {
        printf("FAIL %s: bf16 conversion\n", name);
        g_fail++;
    }
    fixture_free(&f);
}

/* ---- kernel checks at the 8B model's shapes (the fixtures are too small to reach them) ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* y = W x on the GPU for n tokens (one matrix, or three stacked through rp_op_matmul_n)
 * against a double-precision host reference on x rounded to bf16, as the GPU's GEMM does
 * (n <= 4: the matvec keeps x f32; the difference is far below the tolerance). */
static void gemm_check(rp_backend *be, int n_mat, const long *rows, long cols, int n)
{
    rp_err err = {0};
    rp_tensor w[3], wd[3], xt, xd;
    uint16_t *wh[3] = {0};
    float *x = rp_alloc(sizeof(float) * (size_t)n * cols), *y[3] = {0}, *yd[3] = {0};
    for (long i = 0; i < (long)n * cols; i++)
        x[i] = frand();
    xt = (rp_tensor){.dtype = RP_DT_F32, .n_dims = 2, .shape = {n, cols}, .data = x,
                     .n_bytes = sizeof(float) * (size_t)n * cols};
    int ok = rp_backend_weight(be, &xt, &xd, &err) == RP_OK;
    for (int m = 0; m < n_mat && ok; m++) {
        wh[m] = rp_alloc(sizeof(uint16_t) * (size_t)rows[m] * cols);
        for (long i = 0; i < rows[m] * cols; i++)
            wh[m][i] = rp_f32_to_bf16(frand() * 0.05f);
        w[m] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows[m], cols},
                           .data = wh[m], .n_bytes = sizeof(uint16_t) * (size_t)rows[m] * cols};
        ok = rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n * rows[m], 0);
        y[m] = rp_alloc(sizeof(float) * (size_t)n * rows[m]);
        ok = ok && yd[m] && y[m];
    }
    double worst = INFINITY;
    if (ok) {
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        for (int rep = 0; rep < 2; rep++) { /* twice: the split counters must reset */
            if (n_mat == 1)
                rp_op_matmul(be, &wd[0], xd.data, n, yd[0]);
            else
                rp_op_matmul_n(be, n_mat, wp, xd.data, n, yd);
        }
        worst = 0;
        for (int m = 0; m < n_mat; m++) {
            rp_backend_to_host(be, y[m], yd[m], sizeof(float) * (size_t)n * rows[m]);
            for (int t = 0; t < n; t++)
                for (long r = 0; r < rows[m]; r += r % 128 < 17 ? 1 : rows[m] / 256 + 1) {
                    double ref = 0;
                    for (long k = 0; k < cols; k++) {
                        float xv = x[(long)t * cols + k];
                        if (n > 4)
                            xv = rp_bf16_to_f32(rp_f32_to_bf16(xv));
                        ref += (double)rp_bf16_to_f32(wh[m][r * cols + k]) * xv;
                    }
                    double d = fabs(ref - y[m][(long)t * rows[m] + r]);
                    worst = d > worst ? d : worst;
                }
        }
    }
    char what[96];
    snprintf(what, sizeof what, "bf16 %s %ldx%ld n=%d", n_mat > 1 ? "matmul_n" : "matmul",
             rows[0], cols, n);
    gpu_check_report(worst <= 2e-3, "gemm", what, worst, 2e-3);
    for (int m = 0; m < n_mat; m++) {
        rp_free(wh[m]);
        rp_free(y[m]);
        rp_backend_buf_free(be, yd[m]);
    }
    rp_free(x);
}

static void argmax_check(rp_backend *be)
{
    enum { ROWS = 5, V = 128256 };
    rp_err err = {0};
    float *x = rp_alloc(sizeof(float) * ROWS * V);
    int32_t want[ROWS], got[ROWS];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < V; i++)
            x[(size_t)r * V + i] = frand();
        want[r] = (int32_t)((r * 40009 + 17) % V);
        x[(size_t)r * V + want[r]] = 2.0f;
        if (r == 1) /* a tie: the lower index wins */
            x[(size_t)r * V + want[r] + 5] = 2.0f;
        if (r == 2) { /* and one in front of it */
            x[(size_t)r * V + 3] = 2.0f;
            want[r] = 3;
        }
    }
    rp_tensor t = {.dtype = RP_DT_F32, .n_dims = 2, .shape = {ROWS, V}, .data = x,
                   .n_bytes = sizeof(float) * ROWS * V}, td;
    int bad = ROWS;
    if (rp_backend_weight(be, &t, &td, &err) == RP_OK) {
        rp_op_argmax_rows(be, td.data, ROWS, V, got);
        bad = 0;
        for (int r = 0; r < ROWS; r++)
            bad += got[r] != want[r];
    }
    gpu_check_report(bad == 0, "argmax", "5 rows of 128256, ties to the lowest", bad, 0);
    rp_free(x);
}

static void kernel_checks(int dense, int quant)
{
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        printf("FAIL cuda backend: %s\n", err.msg);
        g_fail++;
        return;
    }
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               down[1] = {4096}, head[1] = {65536};
    if (quant)
        gpu_quant_kernel_checks(be);
    if (!dense) {
        rp_backend_free(be);
        return;
    }
    const int ns[] = {1, 4, 5, 16, 33, 64};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        gemm_check(be, 3, qkv, 4096, ns[i]);
        gemm_check(be, 1, o, 4096, ns[i]);
    }
    gemm_check(be, 2, gu, 4096, 64);
    gemm_check(be, 1, down, 14336, 16);
    gemm_check(be, 1, down, 14336, 64);
    gemm_check(be, 1, head, 4096, 24);
    argmax_check(be);
    rp_backend_free(be);
}

int main(int argc, char **argv)
{
    if (rp_backend_cuda_devices() <= 0) {
        printf("FAIL: no CUDA GPU found\n");
        return 1;
    }
    int all = argc < 2;
    if (all || strcmp(argv[1], "kernels") == 0 || strcmp(argv[1], "qkernels") == 0)
        kernel_checks(all || strcmp(argv[1], "kernels") == 0, 1);
    for (size_t i = 0; i < sizeof g_dense / sizeof *g_dense; i++) {
        if (all || strcmp(argv[1], g_dense[i]) == 0)
            run_fixture(g_dense[i]);
        if (all || strcmp(argv[1], g_dense[i]) == 0 || strcmp(argv[1], "quant") == 0)
            gpu_quant_fixture(g_dense[i]);
    }
    printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
