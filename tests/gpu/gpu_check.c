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
 * within the CPU test's BF16_TOL of transformers' f32 logits, or within what the CPU itself
 * is from them on the same bf16 weights plus BF16_GPU_EXTRA when that is more: some
 * fixtures amplify rounding (Gemma's zero-centred norms and sqrt(hidden) embedding scale:
 * the CPU's bf16 logits are 0.36 from transformers there). That CPU distance over BF16_TOL is
 * the fixture's rounding sensitivity, which also scales the MLX prefill tolerance. MLX
 * 4/8-bit kernels and quantized fixtures: gpu_check_quant.c (arguments: "kernels", "qkernels", a fixture name,
 * "quant" for every quantized fixture, none for everything); GGUF weights: gpu_check_gguf.c
 * (with the quantized kernel checks, and "gguf" for every fixture's GGUF twins); the wgmma
 * skinny GEMM: gpu_check_wgmma.c ("wg" for its checks alone, "wgtime" for its timings); its
 * MLX 4-bit twin: gpu_check_q4wg.c ("q4wg", "q4wgtime").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
#define BF16_GPU_EXTRA 0.05f

static const char *g_dense[] = {"llama_gqa",   "llama_tied_mha",    "llama_headdim",
                                "llama3_rope", "llama_linear_rope", "llama_yarn_rope",
                                "llama_sharded", "mistral",         "qwen2",
                                "qwen2_untied", "qwen3",            "qwen3_untied",
                                "phi3",        "gemma3",            "qwen3_moe",
                                "gpt_oss",     "lfm2",              "qwen3_5"};

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
            float dc = lc ? max_abs_diff(lc, f.logits, (long)f.n_ids * f.vocab) : INFINITY;
            float tol = dc + BF16_GPU_EXTRA > BF16_TOL ? dc + BF16_GPU_EXTRA : BF16_TOL;
            d = lg ? max_abs_diff(lg, f.logits, (long)f.n_ids * f.vocab) : INFINITY;
            gpu_check_report(d <= tol, name, "bf16 prefill GPU vs transformers", d, tol);
            float dd = decode_worst(g, &f), ddc = decode_worst(c, &f);
            tol = ddc + BF16_GPU_EXTRA > BF16_TOL ? ddc + BF16_GPU_EXTRA : BF16_TOL;
            gpu_check_report(dd <= tol, name, "bf16 decode GPU vs transformers", dd, tol);
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
                        if (n > 4 && rows[m] >= 16) /* the GEMM paths round x to bf16 */
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

/* ---- attention over the paged KV pool (the flash prefill kernel and the chunked one) ---- */

/* Uploads n floats as a 2-D f32 "weight" (device memory freed with the backend). */
static float *upload_f32(rp_backend *be, const float *x, long rows, long cols)
{
    rp_tensor t = {.dtype = RP_DT_F32, .n_dims = 2, .shape = {rows, cols}, .data = x,
                   .n_bytes = sizeof(float) * (size_t)rows * cols}, td;
    rp_err err = {0};
    return rp_backend_weight(be, &t, &td, &err) == RP_OK ? (float *)(uintptr_t)td.data : NULL;
}

static float bf16r(float x) { return rp_bf16_to_f32(rp_f32_to_bf16(x)); }

/* RoPE of one head's row x (D values, r->rot_dim of them rotated) at pos, in double. */
static void host_rope(float *x, int pos, const gpu_attn_rope *r, const float *inv)
{
    int half = r->rot_dim / 2;
    for (int i = 0; i < half; i++) {
        int ia = r->neox ? i : 2 * i, ib = r->neox ? i + half : 2 * i + 1;
        double ang = (double)pos * inv[i], cs = cos(ang) * r->attn_factor,
               sn = sin(ang) * r->attn_factor, a = x[ia], b = x[ib];
        x[ia] = (float)(a * cs - b * sn);
        x[ib] = (float)(b * cs + a * sn);
    }
}

double gpu_attn_run(rp_backend *be, const gpu_attn_seq *ss, int n_seqs, int H, int KVH, int D,
                    int window, int rounded, float q_amp, int reps, const gpu_attn_rope *rope,
                    rp_kv_dtype kv_dt)
{
    enum { BT = 16, LAYERS = 2, LAYER = 1, MAXS = 64 };
    if (n_seqs > MAXS)
        return INFINITY;
    int kvd = KVH * D, n_tok = 0, n_old = 0, n_blk = 0;
    for (int s = 0; s < n_seqs; s++) {
        n_tok += ss[s].n_new;
        n_old += ss[s].cached;
        n_blk += (ss[s].cached + ss[s].n_new + BT - 1) / BT;
    }
    int n_all = n_tok + n_old;
    int32_t pos[MAXS * 64];
    float inv[256];
    if (rope && (n_tok > MAXS * 64 || rope->rot_dim / 2 > 256 || reps))
        return INFINITY;
    /* K/V of every position of every sequence: rows [seq base + pos] */
    float *k = rp_alloc(sizeof(float) * (size_t)n_all * kvd),
          *v = rp_alloc(sizeof(float) * (size_t)n_all * kvd),
          *q = rp_alloc(sizeof(float) * (size_t)n_tok * H * D),
          *got = rp_alloc(sizeof(float) * (size_t)n_tok * H * D);
    float *kold = rp_alloc(sizeof(float) * (size_t)(n_old + 1) * kvd),
          *vold = rp_alloc(sizeof(float) * (size_t)(n_old + 1) * kvd),
          *knew = rp_alloc(sizeof(float) * (size_t)n_tok * kvd),
          *vnew = rp_alloc(sizeof(float) * (size_t)n_tok * kvd);
    int32_t *blocks = rp_alloc(sizeof(int32_t) * (size_t)n_blk);
    rp_step_seq *st_old = rp_alloc(sizeof(rp_step_seq) * MAXS),
                *st_new = rp_alloc(sizeof(rp_step_seq) * MAXS);
    double worst = INFINITY;
    if (!k || !v || !q || !got || !kold || !vold || !knew || !vnew || !blocks || !st_old ||
        !st_new)
        goto done;
    for (long i = 0; i < (long)n_all * kvd; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    for (long i = 0; i < (long)n_tok * H * D; i++)
        q[i] = q_amp * frand();
    for (int b = 0; b < n_blk; b++) /* a permutation of 0..n_blk-1 */
        blocks[b] = (int32_t)(((long)b * 7 + 3) % n_blk);
    if (n_blk % 7 == 0)
        for (int b = 0; b < n_blk; b++)
            blocks[b] = n_blk - 1 - b;
    int n_so = 0, to = 0, tn = 0, boff = 0, base = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (ss[s].cached + ss[s].n_new + BT - 1) / BT;
        for (int i = 0; i < ss[s].cached; i++) {
            memcpy(kold + (size_t)(to + i) * kvd, k + (size_t)(base + i) * kvd, sizeof(float) * kvd);
            memcpy(vold + (size_t)(to + i) * kvd, v + (size_t)(base + i) * kvd, sizeof(float) * kvd);
        }
        for (int i = 0; i < ss[s].n_new; i++) {
            size_t src = (size_t)(base + ss[s].cached + i) * kvd;
            memcpy(knew + (size_t)(tn + i) * kvd, k + src, sizeof(float) * kvd);
            memcpy(vnew + (size_t)(tn + i) * kvd, v + src, sizeof(float) * kvd);
        }
        if (ss[s].cached)
            st_old[n_so++] = (rp_step_seq){.blocks = blocks + boff, .n_blocks = nb, .t0 = to,
                                           .n_tok = ss[s].cached, .pos0 = 0};
        st_new[s] = (rp_step_seq){.blocks = blocks + boff, .n_blocks = nb, .t0 = tn,
                                  .n_tok = ss[s].n_new, .pos0 = ss[s].cached};
        to += ss[s].cached;
        tn += ss[s].n_new;
        boff += nb;
        base += ss[s].cached + ss[s].n_new;
    }
    size_t row = rp_kv_row_bytes(kv_dt, D), half = (size_t)BT * KVH * row;
    rp_kv_layout L = {.dtype = kv_dt, .block_tokens = BT, .n_layers = LAYERS,
                      .n_kv_heads = KVH, .head_dim = D, .row_bytes = row,
                      .half_bytes = half, .block_bytes = 2 * LAYERS * half};
    L.base = rp_backend_buf_alloc(be, L.block_bytes * (size_t)n_blk, 0);
    float *qd = upload_f32(be, q, n_tok, (long)H * D), *kn = upload_f32(be, knew, n_tok, kvd),
          *vn = upload_f32(be, vnew, n_tok, kvd), *ko = upload_f32(be, kold, n_old + 1, kvd),
          *vo = upload_f32(be, vold, n_old + 1, kvd);
    float *od = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n_tok * H * D, 0);
    if (L.base && qd && kn && vn && ko && vo && od) {
        float scale = 1.0f / sqrtf((float)D);
        if (n_so) {
            rp_op_step_begin(be, &L, st_old, n_so);
            rp_op_kv_store(be, LAYER, ko, vo, kvd);
        }
        rp_op_step_begin(be, &L, st_new, n_seqs);
        if (rope) { /* the GPU rotates its copies; the reference's arrays are rotated here */
            for (int i = 0; i < rope->rot_dim / 2; i++)
                inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)rope->rot_dim);
            for (int s = 0, t = 0; s < n_seqs; s++)
                for (int i = 0; i < ss[s].n_new; i++)
                    pos[t++] = ss[s].cached + i;
            rp_op_rope(be, qd, n_tok, H, D, rope->rot_dim, pos, inv, rope->attn_factor, rope->neox);
            rp_op_rope(be, kn, n_tok, KVH, D, rope->rot_dim, pos, inv, rope->attn_factor,
                       rope->neox);
            for (int s = 0, t = 0, b0 = 0; s < n_seqs; b0 += ss[s].cached + ss[s].n_new, s++)
                for (int i = 0; i < ss[s].n_new; i++, t++) {
                    for (int h = 0; h < H; h++)
                        host_rope(q + ((size_t)t * H + h) * D, pos[t], rope, inv);
                    for (int h = 0; h < KVH; h++)
                        host_rope(k + (size_t)(b0 + ss[s].cached + i) * kvd + (size_t)h * D,
                                  pos[t], rope, inv);
                }
        }
        rp_op_kv_store(be, LAYER, kn, vn, kvd);
        rp_step_attn a = {.q = qd, .out = od, .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                          .scale = scale, .window = window};
        for (int r = 0; r <= reps; r++)
            rp_op_attention_step(be, LAYER, &a);
        rp_backend_to_host(be, got, od, sizeof(float) * (size_t)n_tok * H * D);
        /* the pool holds K and V as the host codec rounds them (after RoPE, as the GPU
         * rotates before it stores): the reference reads them so */
        if (kv_dt != RP_KV_F32) {
            unsigned char tmp[1024];
            for (long r = 0; r < (long)n_all * KVH; r++) {
                rp_kv_row_store(kv_dt, k + r * D, D, tmp);
                rp_kv_row_load(kv_dt, tmp, D, k + r * D);
                rp_kv_row_store(kv_dt, v + r * D, D, tmp);
                rp_kv_row_load(kv_dt, tmp, D, v + r * D);
            }
        }
        worst = 0;
        double *p = rp_alloc(sizeof(double) * (size_t)n_all), *o = rp_alloc(sizeof(double) * D);
        const double l2e = 1.4426950408889634;
        int t = 0;
        base = 0;
        for (int s = 0; p && o && s < n_seqs; s++) {
            for (int i = 0; i < ss[s].n_new; i++, t++) {
                int pos = ss[s].cached + i, lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                for (int h = 0; h < H; h++) {
                    const float *qr = q + ((size_t)t * H + h) * D;
                    int kh = h / (H / KVH);
                    double mx = -INFINITY, l = 0;
                    for (int j = lo; j <= pos; j++) {
                        const float *kr = k + (size_t)(base + j) * kvd + (size_t)kh * D;
                        double sc = 0;
                        for (int e = 0; e < D; e++)
                            sc += rounded ? (double)bf16r(qr[e] * scale * (float)l2e) * bf16r(kr[e])
                                          : (double)qr[e] * kr[e] * scale * l2e;
                        p[j] = sc;
                        mx = sc > mx ? sc : mx;
                    }
                    for (int e = 0; e < D; e++)
                        o[e] = 0;
                    for (int j = lo; j <= pos; j++) {
                        double w = exp2(p[j] - mx);
                        l += w;
                        const float *vr = v + (size_t)(base + j) * kvd + (size_t)kh * D;
                        for (int e = 0; e < D; e++)
                            o[e] += w * (rounded ? bf16r(vr[e]) : vr[e]);
                    }
                    for (int e = 0; e < D; e++) {
                        double d = fabs(o[e] / l - got[((size_t)t * H + h) * D + e]);
                        worst = d > worst || d != d ? (d != d ? INFINITY : d) : worst;
                    }
                }
            }
            base += ss[s].cached + ss[s].n_new;
        }
        if (!p || !o)
            worst = INFINITY;
        rp_free(p);
        rp_free(o);
    }
    rp_backend_buf_free(be, L.base);
    rp_backend_buf_free(be, od);
done:
    rp_free(k);
    rp_free(v);
    rp_free(q);
    rp_free(got);
    rp_free(kold);
    rp_free(vold);
    rp_free(knew);
    rp_free(vnew);
    rp_free(blocks);
    rp_free(st_old);
    rp_free(st_new);
    return worst;
}

static void attn_check_kv(rp_backend *be, const char *kernel, const gpu_attn_seq *ss, int n_seqs,
                          int H, int KVH, int D, int window, int rounded, double tol,
                          rp_kv_dtype kv_dt)
{
    char what[128];
    int n = snprintf(what, sizeof what, "H%d/%d D%d%s", H, KVH, D, window ? " win" : "");
    if (kv_dt != RP_KV_F32)
        n += snprintf(what + n, sizeof what - (size_t)n, " kv %s", rp_kv_dtype_name(kv_dt));
    for (int s = 0; s < n_seqs && n < (int)sizeof what - 12; s++)
        n += snprintf(what + n, sizeof what - (size_t)n, " %d+%d", ss[s].cached, ss[s].n_new);
    double d = gpu_attn_run(be, ss, n_seqs, H, KVH, D, window, rounded, 1.0f, 0, NULL, kv_dt);
    gpu_check_report(d <= tol, kernel, what, d, tol);
}

static void attn_check(rp_backend *be, const char *kernel, const gpu_attn_seq *ss, int n_seqs, int H,
                       int KVH, int D, int window, int rounded, double tol)
{
    attn_check_kv(be, kernel, ss, n_seqs, H, KVH, D, window, rounded, tol, RP_KV_F32);
}

/* The flash prefill kernel (forced for every step size with RAPID_CUDA_FLASH=1) against the
 * reference on bf16-rounded inputs, and the chunked f32 kernel (RAPID_CUDA_FLASH=0) on the
 * same steps against the exact one (which also checks the harness). */
static void attention_checks(void)
{
    rp_backend *fl = NULL, *ch = NULL;
    rp_err err = {0};
    setenv("RAPID_CUDA_FLASH", "1", 1);
    rp_status rc = rp_backend_new_cuda(0, 0.2, &fl, &err);
    setenv("RAPID_CUDA_FLASH", "0", 1);
    if (!rc)
        rc = rp_backend_new_cuda(0, 0.2, &ch, &err);
    unsetenv("RAPID_CUDA_FLASH");
    if (rc) {
        printf("FAIL cuda backend: %s\n", err.msg);
        g_fail++;
        rp_backend_free(fl);
        return;
    }
    const gpu_attn_seq one16[] = {{0, 16}}, one40[] = {{0, 40}}, one200[] = {{0, 200}},
                   one512[] = {{0, 512}}, mixed[] = {{37, 100}, {0, 77}, {130, 1}, {5, 64}},
                   tail[] = {{300, 45}};
    const double tb = 3e-3, tf = 1e-4;
    attn_check(fl, "flash attn", one16, 1, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", one40, 1, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", one200, 1, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", one512, 1, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", mixed, 4, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", tail, 1, 32, 8, 128, 0, 1, tb);
    attn_check(fl, "flash attn", one200, 1, 32, 8, 128, 50, 1, tb);
    attn_check(fl, "flash attn", mixed, 4, 8, 2, 64, 0, 1, tb);
    attn_check(fl, "flash attn", one200, 1, 4, 4, 64, 0, 1, tb);
    attn_check(ch, "chunked attn", mixed, 4, 32, 8, 128, 0, 0, tf);
    attn_check(ch, "chunked attn", one200, 1, 32, 8, 128, 50, 0, tf);
    /* 16-bit pools: the reference reads K and V rounded as the host codec stores them */
    const rp_kv_dtype k16[2] = {RP_KV_BF16, RP_KV_F16};
    for (int i = 0; i < 2; i++) {
        attn_check_kv(fl, "flash attn", one200, 1, 32, 8, 128, 0, 1, tb, k16[i]);
        attn_check_kv(fl, "flash attn", mixed, 4, 32, 8, 128, 0, 1, tb, k16[i]);
        attn_check_kv(fl, "flash attn", one200, 1, 32, 8, 128, 50, 1, tb, k16[i]);
        attn_check_kv(fl, "flash attn", mixed, 4, 8, 2, 64, 0, 1, tb, k16[i]);
        attn_check_kv(ch, "chunked attn", mixed, 4, 32, 8, 128, 0, 0, tf, k16[i]);
        attn_check_kv(ch, "chunked attn", one200, 1, 32, 8, 128, 50, 0, tf, k16[i]);
        attn_check_kv(ch, "chunked attn", mixed, 4, 4, 1, 24, 0, 0, tf, k16[i]);
    }
    rp_backend_free(fl);
    rp_backend_free(ch);
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
    if (quant) {
        gpu_quant_kernel_checks(be);
        gpu_gguf_kernel_checks(be);
        gpu_qmv_checks();
    }
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
    /* the fixtures' small shapes beside the tensor-core GEMM's: the MoE fixture's router (4
     * rows), its experts' gate/up (32 rows of 64) and down (64 rows of 32) */
    const long r4[1] = {4}, r32[1] = {32}, r64[1] = {64};
    const int small[] = {5, 9, 16};
    for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
        gemm_check(be, 1, r4, 64, small[i]);
        gemm_check(be, 1, r32, 64, small[i]);
        gemm_check(be, 1, r64, 32, small[i]);
    }
    argmax_check(be);
    rp_backend_free(be);
    gpu_gemm_kernel_checks();
    gpu_wg_checks();
    gpu_q4wg_checks();
    attention_checks();
    gpu_decode_checks();
    gpu_mv1_checks();
}

float gpu_bf16_tol(float sensitivity)
{
    float dc = BF16_TOL * sensitivity;
    return dc + BF16_GPU_EXTRA > BF16_TOL && sensitivity > 1.0f ? dc + BF16_GPU_EXTRA : BF16_TOL;
}

/* The fixture's rounding sensitivity (see the top): its bf16 weights' distance from
 * transformers on the CPU over BF16_TOL, at least 1. */
static float sensitivity(const char *name)
{
    fixture f;
    char dir[512];
    float s = 1.0f;
    if (fixture_load(name, &f))
        return s;
    if (fixture_convert(&f, RP_DT_BF16, 0, dir) == 0) {
        rp_model *c = load(dir, RP_DEVICE_CPU);
        float *lc = c ? prefill(c, &f) : NULL;
        float dc = lc ? max_abs_diff(lc, f.logits, (long)f.n_ids * f.vocab) : 0.0f;
        s = dc > BF16_TOL ? dc / BF16_TOL : 1.0f;
        rp_free(lc);
        rp_model_free(c);
        fixture_remove(dir);
    }
    fixture_free(&f);
    return s;
}

int main(int argc, char **argv)
{
    if (rp_backend_cuda_devices() <= 0) {
        printf("FAIL: no CUDA GPU found\n");
        return 1;
    }
    int all = argc < 2;
    if (!all && strcmp(argv[1], "qmvtime") == 0) {
        gpu_qmv_timing();
        return 0;
    }
    if (!all && strcmp(argv[1], "dec") == 0) { /* the decode attention's checks alone */
        gpu_decode_checks();
        printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
        return g_fail ? 1 : 0;
    }
    if (!all && strcmp(argv[1], "dectime") == 0) {
        gpu_decode_timing();
        return 0;
    }
    if (!all && strcmp(argv[1], "mvtime") == 0) {
        gpu_mv1_timing();
        return 0;
    }
    if (!all && strcmp(argv[1], "wgtime") == 0) {
        gpu_wg_timing();
        return 0;
    }
    if (!all && strcmp(argv[1], "q4wgtime") == 0) {
        gpu_q4wg_timing();
        return 0;
    }
    if (!all && strcmp(argv[1], "q4wg") == 0) { /* the 4-bit wgmma GEMM's checks alone */
        gpu_q4wg_checks();
        printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
        return g_fail ? 1 : 0;
    }
    if (!all && strcmp(argv[1], "wg") == 0) { /* the wgmma GEMM's checks alone */
        gpu_wg_checks();
        printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
        return g_fail ? 1 : 0;
    }
    if (all || strcmp(argv[1], "kernels") == 0 || strcmp(argv[1], "qkernels") == 0)
        kernel_checks(all || strcmp(argv[1], "kernels") == 0, 1);
    if (all || strcmp(argv[1], "sample") == 0)
        gpu_sample_checks();
    for (size_t i = 0; i < sizeof g_dense / sizeof *g_dense; i++) {
        if (all || strcmp(argv[1], g_dense[i]) == 0)
            run_fixture(g_dense[i]);
        int q = all || strcmp(argv[1], g_dense[i]) == 0 || strcmp(argv[1], "quant") == 0,
            gg = all || strcmp(argv[1], g_dense[i]) == 0 || strcmp(argv[1], "gguf") == 0;
        float sens = q || gg ? sensitivity(g_dense[i]) : 1.0f;
        if (q)
            gpu_quant_fixture(g_dense[i], sens);
        if (gg)
            gpu_gguf_fixture(g_dense[i], sens);
    }
    printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}

/* ---- the 16-bit GEMM check and knob-set backends (gpu_check.h) ---- */

static uint64_t g_gemm_rng = 0x3c6ef372fe94f82bull;
static float gemm_rand(void) /* uniform in [-1, 1) */
{
    g_gemm_rng ^= g_gemm_rng << 13, g_gemm_rng ^= g_gemm_rng >> 7, g_gemm_rng ^= g_gemm_rng << 17;
    return (float)((g_gemm_rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static uint16_t to16(rp_dtype dt, float v)
{
    return dt == RP_DT_BF16 ? rp_f32_to_bf16(v) : rp_f32_to_f16(v);
}

static float from16(rp_dtype dt, uint16_t h)
{
    return dt == RP_DT_BF16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h);
}

/* the rows the reference computes: both ends, every 61st, and the edges of every 64- and
 * 128-row block (the GEMM kernels' tiles) */
static int gemm_sampled(long r, long rows)
{
    return r < 72 || r >= rows - 72 || r % 61 == 0 || r % 64 >= 60 || r % 128 < 2 ||
           r % 128 >= 120;
}

void gpu_gemm16_check(rp_backend *be, const char *tag, rp_dtype dt, int n_mat, const long *rows,
                      long cols, int n)
{
    const double tol = 2e-3;
    rp_err err = {0};
    rp_tensor w[3], wd[3], xt, xd;
    uint16_t *wh[3] = {0};
    float *x = rp_alloc(sizeof(float) * (size_t)n * cols), *y[3] = {0}, *y0[3] = {0},
          *yd[3] = {0};
    for (long i = 0; i < (long)n * cols; i++)
        x[i] = gemm_rand();
    xt = (rp_tensor){.dtype = RP_DT_F32, .n_dims = 2, .shape = {n, cols}, .data = x,
                     .n_bytes = sizeof(float) * (size_t)n * cols};
    int ok = rp_backend_weight(be, &xt, &xd, &err) == RP_OK;
    for (int m = 0; m < n_mat && ok; m++) {
        size_t ne = (size_t)rows[m] * cols;
        wh[m] = rp_alloc(sizeof(uint16_t) * ne);
        for (size_t i = 0; i < ne; i++)
            wh[m][i] = to16(dt, gemm_rand() * 0.05f);
        w[m] = (rp_tensor){.dtype = dt, .n_dims = 2, .shape = {rows[m], cols}, .data = wh[m],
                           .n_bytes = sizeof(uint16_t) * ne};
        ok = rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n * rows[m], 0);
        y[m] = rp_alloc(sizeof(float) * (size_t)n * rows[m]);
        y0[m] = rp_alloc(sizeof(float) * (size_t)n * rows[m]);
        ok = ok && yd[m] && y[m] && y0[m];
    }
    double worst = INFINITY;
    int same = 1;
    if (ok) {
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        for (int rep = 0; rep < 2; rep++) {
            if (n_mat == 1)
                rp_op_matmul(be, &wd[0], xd.data, n, yd[0]);
            else
                rp_op_matmul_n(be, n_mat, wp, xd.data, n, yd);
            for (int m = 0; m < n_mat; m++)
                rp_backend_to_host(be, rep ? y[m] : y0[m], yd[m],
                                   sizeof(float) * (size_t)n * rows[m]);
        }
        for (int m = 0; m < n_mat; m++)
            same = same && memcmp(y[m], y0[m], sizeof(float) * (size_t)n * rows[m]) == 0;
        float *xr = rp_alloc(sizeof(float) * (size_t)cols);
        worst = 0;
        int reported = 0;
        long wr = -1;
        int wm = 0, wt = 0;
        for (int m = 0; m < n_mat; m++) {
            for (int t = 0; t < n; t++) {
                for (long k = 0; k < cols; k++) /* the kernel rounds x to the weight's type */
                    xr[k] = from16(dt, to16(dt, x[(long)t * cols + k]));
                for (long r = 0; r < rows[m]; r++) {
                    if (!gemm_sampled(r, rows[m]))
                        continue;
                    double ref = 0;
                    for (long k = 0; k < cols; k++)
                        ref += (double)from16(dt, wh[m][r * cols + k]) * xr[k];
                    float got = y[m][(long)t * rows[m] + r];
                    double d = fabs(ref - got);
                    if ((d > tol || isnan(d)) && !reported) {
                        printf("      first bad: matrix %d row %ld token %d: %.6g, want %.6g\n", m,
                               r, t, got, ref);
                        reported = 1;
                    }
                    if (d > worst || isnan(d))
                        worst = d, wm = m, wr = r, wt = t;
                }
            }
        }
        if (worst > tol || isnan(worst))
            printf("      worst: matrix %d row %ld token %d (%.3g)\n", wm, wr, wt, worst);
        if (!same)
            printf("      the two runs differ\n");
        rp_free(xr);
    } else {
        printf("      setup: %s\n", err.msg);
    }
    char what[96];
    snprintf(what, sizeof what, "%s %s %d x %ldx%ld n=%d", tag, rp_dtype_name(dt), n_mat,
             rows[0], cols, n);
    gpu_check_report(worst <= tol && same, "gemm", what, worst, tol);
    fflush(stdout); /* a crash later keeps this line */
    for (int m = 0; m < n_mat; m++) {
        rp_free(wh[m]);
        rp_free(y[m]);
        rp_free(y0[m]);
        rp_backend_buf_free(be, yd[m]);
    }
    rp_free(x);
}

/* A CUDA backend with env var `var` set to val (NULL: unset, the default); the knobs are
 * read at creation. */
rp_backend *gpu_backend_with(const char *var, const char *val)
{
    const char *old = getenv(var);
    char keep[64] = "";
    if (old)
        snprintf(keep, sizeof keep, "%s", old);
    if (val)
        setenv(var, val, 1);
    else
        unsetenv(var);
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.5, &be, &err)) {
        gpu_check_report(0, "cuda backend", var, 0, 0);
        be = NULL;
    }
    if (old)
        setenv(var, keep, 1);
    else
        unsetenv(var);
    return be;
}
