/* tests/gpu/gpu_check_decode.c - the decode attention kernel (cuda_decode.cu) against a
 * double-precision host reference, part of rapid_gpu_check.
 *
 * Each case is one step over some sequences (each with `cached` positions stored by an
 * earlier step, then n_new new tokens) on layer 1 of a 2-layer pool whose 16-token blocks
 * are handed out in a scrambled order, with rows stored as f32, bf16 and f16 (every case in
 * each). The kernel computes in f32 on K and V as stored (no rounding of q or P) and the
 * reference reads K and V rounded as the host codec stores them, so the tolerance is DEC_TOL
 * for every type (1e-5; f32 sums over up to 4k keys of values in [-1, 1]). Cases: the Llama-3-8B shape (32 / 8 heads of 128) at 1, 17, 80, 600, 1000 and 4097
 * positions, 16 and 64 sequences at uneven positions, a mixed step (one 40-token chunk after
 * 300 cached, three decode tokens), sliding windows, GQA groups 1 / 4 / 8, head sizes 8, 16,
 * 24, 32 (the fixtures'), 64, 128 and 256; then q and the new keys through RoPE first (rope_kv_kernel:
 * full and partial rotary, neox and interleaved, two head groups a KV head, a window, D 256,
 * multi-token steps; f32 and bf16 pools: DEC_TOL16_ROPE for bf16, since the GPU rounds its
 * f32 rotation and the reference its double one). `rapid_gpu_check dectime` repeats the 8B
 * decode
 * steps for timing (run it with RAPID_CUDA_PROFILE=2: the GPU time per op is printed when the
 * backend is freed; RAPID_CUDA_DECATTN=0 times the chunked kernel instead).
 *
 * The one-token bf16 matvec, the default kernel (mv1_kernel) and the opt-in streaming one
 * (matvec_bulk_kernel, RAPID_CUDA_MVB=3: weights through shared memory): 1..3 stacked matrices at the 8B shapes (q/k/v, gate/up, down, a 65536-row head) and at
 * awkward ones (rows 1, 3, 5, 7 across matrices, 24 / 1000 / 1032 / 2056 columns: partial
 * chunks), against a double-precision reference on the same bf16 weights and f32 x
 * (tolerance MV_TOL = 1e-4: f32 sums of up to 14336 products).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/alloc.h"
#include "base/half.h"
#include "gpu_check.h"

#define DEC_TOL 1e-5
#define DEC_TOL16_ROPE 2e-3
#define MV_TOL 1e-4

typedef gpu_attn_seq dec_seq;

static uint64_t d_rng = 0x6a09e667f3bcc909ull;
static float drand(void) /* uniform in [-1, 1) */
{
    d_rng ^= d_rng << 13;
    d_rng ^= d_rng >> 7;
    d_rng ^= d_rng << 17;
    return (float)((double)(d_rng >> 11) / 4503599627370496.0 - 1.0);
}

/* The step on the exact reference, q three times as peaked as [-1, 1) gives (the split-key
 * kernel's online softmax sees real maxima), `reps` more attention calls for timing. */
static double dec_run(rp_backend *be, const dec_seq *ss, int n_seqs, int H, int KVH, int D,
                      int window, int reps, rp_kv_dtype dt)
{
    return gpu_attn_run(be, ss, n_seqs, H, KVH, D, window, 0, 3.0f, reps, NULL, dt);
}

/* "decode attn", or "decode attn bf16" for a 16-bit pool */
static const char *dec_name(const char *base, rp_kv_dtype dt, char *buf, size_t n)
{
    if (dt == RP_KV_F32)
        return base;
    snprintf(buf, n, "%s %s", base, rp_kv_dtype_name(dt));
    return buf;
}

/* q and the new keys through rp_op_rope before the step (rot of each head's D, neox or
 * interleaved), as a layer does: the held RoPE pair and the KV store run as rope_kv_kernel,
 * or apart where the step or the shape does not allow it. */
static void rope_check(rp_backend *be, const char *kernel, const dec_seq *ss, int n_seqs, int H,
                       int KVH, int D, int rot, int neox, float af, int window, rp_kv_dtype dt)
{
    char what[96];
    int n = snprintf(what, sizeof what, "H%d/%d D%d rot %d%s%s", H, KVH, D, rot,
                     neox ? "" : " interleaved", window ? " win" : "");
    if (n_seqs > 3)
        snprintf(what + n, sizeof what - (size_t)n, " %d seqs", n_seqs);
    else
        for (int s = 0; s < n_seqs && n < (int)sizeof what - 12; s++)
            n += snprintf(what + n, sizeof what - (size_t)n, " %d+%d", ss[s].cached, ss[s].n_new);
    gpu_attn_rope r = {.rot_dim = rot, .neox = neox, .attn_factor = af};
    double d = gpu_attn_run(be, ss, n_seqs, H, KVH, D, window, 0, 3.0f, 0, &r, dt);
    /* a 16-bit pool: the GPU rounds its f32 rotation, the reference its double one, so a key
     * element near a rounding boundary may land one unit apart (bf16: 2^-8 of |k| <= 1) */
    double tol = dt == RP_KV_F32 ? DEC_TOL : DEC_TOL16_ROPE;
    char nb[64];
    gpu_check_report(d <= tol, dec_name(kernel, dt, nb, sizeof nb), what, d, tol);
}

static void rope_checks(rp_backend *be, const char *kernel, rp_kv_dtype dt)
{
    const dec_seq p1[] = {{0, 1}}, p80[] = {{79, 1}}, p600[] = {{599, 1}}, p300[] = {{300, 1}},
                  p40[] = {{40, 1}}, chunk[] = {{50, 5}}, mixed[] = {{7, 1}, {130, 1}, {20, 3}};
    dec_seq s16[16];
    for (int i = 0; i < 16; i++)
        s16[i] = (dec_seq){(i * 97 + 13) % 700, 1};
    rope_check(be, kernel, p1, 1, 32, 8, 128, 128, 1, 1.0f, 0, dt);
    rope_check(be, kernel, p600, 1, 32, 8, 128, 128, 1, 1.0f, 0, dt);
    rope_check(be, kernel, s16, 16, 32, 8, 128, 128, 1, 1.0f, 0, dt);
    rope_check(be, kernel, p80, 1, 32, 8, 128, 128, 0, 1.0f, 0, dt);      /* interleaved */
    rope_check(be, kernel, p300, 1, 32, 8, 128, 64, 1, 0.9f, 0, dt);      /* partial, factor */
    rope_check(be, kernel, p300, 1, 32, 8, 128, 96, 0, 1.0f, 0, dt);      /* partial, interleaved */
    rope_check(be, kernel, p600, 1, 32, 2, 64, 64, 1, 1.0f, 0, dt);       /* 2 head groups a KV head */
    rope_check(be, kernel, p300, 1, 8, 2, 32, 32, 1, 1.0f, 37, dt);       /* window */
    rope_check(be, kernel, p80, 1, 4, 2, 16, 16, 1, 1.0f, 4, dt);         /* a fixture's head */
    rope_check(be, kernel, p40, 1, 8, 2, 256, 256, 1, 1.0f, 0, dt);       /* D 256 */
    rope_check(be, kernel, chunk, 1, 32, 8, 128, 128, 1, 1.0f, 0, dt);    /* 5 tokens of a seq */
    rope_check(be, kernel, mixed, 3, 32, 8, 128, 128, 1, 1.0f, 0, dt);    /* one seq 3 tokens */
}

static void dec_check(rp_backend *be, const dec_seq *ss, int n_seqs, int H, int KVH, int D,
                      int window, rp_kv_dtype dt)
{
    char what[96];
    int n = snprintf(what, sizeof what, "H%d/%d D%d%s", H, KVH, D, window ? " win" : "");
    if (n_seqs > 3)
        snprintf(what + n, sizeof what - (size_t)n, " %d seqs", n_seqs);
    else
        for (int s = 0; s < n_seqs && n < (int)sizeof what - 12; s++)
            n += snprintf(what + n, sizeof what - (size_t)n, " %d+%d", ss[s].cached, ss[s].n_new);
    double d = dec_run(be, ss, n_seqs, H, KVH, D, window, 0, dt);
    char nb[64];
    gpu_check_report(d <= DEC_TOL, dec_name("decode attn", dt, nb, sizeof nb), what, d, DEC_TOL);
}

/* y = W x for n_mat stacked bf16 matrices and one token; every row of small matrices, a
 * sample of big ones. */
static void mv_check(rp_backend *be, const char *name, int n_mat, const long *rows, long cols)
{
    rp_err err = {0};
    rp_tensor w[3], wd[3], xt, xd;
    uint16_t *wh[3] = {0};
    float *x = rp_alloc(sizeof(float) * (size_t)cols), *y[3] = {0}, *yd[3] = {0};
    int ok = x != NULL;
    for (long i = 0; ok && i < cols; i++)
        x[i] = drand();
    xt = (rp_tensor){.dtype = RP_DT_F32, .n_dims = 2, .shape = {1, cols}, .data = x,
                     .n_bytes = sizeof(float) * (size_t)cols};
    ok = ok && rp_backend_weight(be, &xt, &xd, &err) == RP_OK;
    for (int m = 0; m < n_mat && ok; m++) {
        wh[m] = rp_alloc(sizeof(uint16_t) * (size_t)rows[m] * cols);
        ok = wh[m] != NULL;
        for (long i = 0; ok && i < rows[m] * cols; i++)
            wh[m][i] = rp_f32_to_bf16(drand() * 0.05f);
        w[m] = (rp_tensor){.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows[m], cols},
                           .data = wh[m], .n_bytes = sizeof(uint16_t) * (size_t)rows[m] * cols};
        ok = ok && rp_backend_weight(be, &w[m], &wd[m], &err) == RP_OK;
        yd[m] = rp_backend_buf_alloc(be, sizeof(float) * (size_t)rows[m], 0);
        y[m] = rp_alloc(sizeof(float) * (size_t)rows[m]);
        ok = ok && yd[m] && y[m];
    }
    double worst = INFINITY;
    if (ok) {
        const rp_tensor *wp[3] = {&wd[0], &wd[1], &wd[2]};
        for (int rep = 0; rep < 2; rep++) {
            if (n_mat == 1)
                rp_op_matmul(be, &wd[0], xd.data, 1, yd[0]);
            else
                rp_op_matmul_n(be, n_mat, wp, xd.data, 1, yd);
        }
        worst = 0;
        for (int m = 0; m < n_mat; m++) {
            rp_backend_to_host(be, y[m], yd[m], sizeof(float) * (size_t)rows[m]);
            for (long r = 0; r < rows[m]; r += rows[m] <= 4096 || r % 997 < 5 ? 1 : 61) {
                double ref = 0;
                for (long k = 0; k < cols; k++)
                    ref += (double)rp_bf16_to_f32(wh[m][r * cols + k]) * x[k];
                double d = fabs(ref - y[m][r]);
                worst = d != d ? INFINITY : d > worst ? d : worst;
            }
        }
    }
    char what[96];
    int n = snprintf(what, sizeof what, "bf16 n=1 %ld", rows[0]);
    for (int m = 1; m < n_mat; m++)
        n += snprintf(what + n, sizeof what - (size_t)n, "+%ld", rows[m]);
    snprintf(what + n, sizeof what - (size_t)n, " x %ld", cols);
    gpu_check_report(worst <= MV_TOL, name, what, worst, MV_TOL);
    for (int m = 0; m < n_mat; m++) {
        rp_free(wh[m]);
        rp_free(y[m]);
        rp_backend_buf_free(be, yd[m]);
    }
    rp_free(x);
}

static void matvec_checks(rp_backend *be, const char *name)
{
    const long qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, o[1] = {4096},
               head[1] = {65536}, odd3[3] = {5, 3, 7}, one[1] = {1}, r3[1] = {3}, r2[2] = {1, 2},
               r64[1] = {64};
    mv_check(be, name, 3, qkv, 4096);
    mv_check(be, name, 1, o, 4096);
    mv_check(be, name, 2, gu, 4096);
    mv_check(be, name, 1, o, 14336);
    mv_check(be, name, 1, head, 4096);
    mv_check(be, name, 3, odd3, 24);
    mv_check(be, name, 3, odd3, 1000);
    mv_check(be, name, 1, one, 1032);
    mv_check(be, name, 1, r3, 2056);
    mv_check(be, name, 2, r2, 64);
    mv_check(be, name, 1, r64, 16);
}

/* The decode cases over a pool of K / V rows stored as dt; the reference reads them as
 * stored (gpu_attn_run), so every type keeps DEC_TOL. */
static void dec_cases(rp_backend *be, rp_kv_dtype dt)
{
    const dec_seq p1[] = {{0, 1}}, p17[] = {{16, 1}}, p80[] = {{79, 1}}, p600[] = {{599, 1}},
                  p1000[] = {{999, 1}}, p4097[] = {{4096, 1}},
                  mixed[] = {{300, 40}, {7, 1}, {130, 1}}, two[] = {{33, 2}, {250, 1}};
    dec_seq s16[16], s64[64];
    for (int i = 0; i < 16; i++)
        s16[i] = (dec_seq){(i * 97 + 13) % 700, 1};
    for (int i = 0; i < 64; i++)
        s64[i] = (dec_seq){(i * 37 + 5) % 300, 1};
    dec_check(be, p1, 1, 32, 8, 128, 0, dt);
    dec_check(be, p17, 1, 32, 8, 128, 0, dt);
    dec_check(be, p80, 1, 32, 8, 128, 0, dt);
    dec_check(be, p600, 1, 32, 8, 128, 0, dt);
    dec_check(be, p1000, 1, 32, 8, 128, 0, dt);
    dec_check(be, p4097, 1, 32, 8, 128, 0, dt);
    dec_check(be, s16, 16, 32, 8, 128, 0, dt);
    dec_check(be, s64, 64, 32, 8, 128, 0, dt);
    dec_check(be, mixed, 3, 32, 8, 128, 0, dt);
    dec_check(be, p600, 1, 32, 8, 128, 100, dt);
    dec_check(be, mixed, 3, 32, 8, 128, 37, dt);
    dec_check(be, p600, 1, 32, 4, 128, 0, dt);  /* group 8 */
    dec_check(be, p600, 1, 8, 8, 128, 0, dt);   /* MHA */
    dec_check(be, p1000, 1, 16, 4, 64, 0, dt);  /* group 4, D 64 */
    dec_check(be, two, 2, 8, 8, 64, 0, dt);     /* MHA, D 64 */
    dec_check(be, p600, 1, 16, 4, 256, 0, dt);  /* D 256 */
    dec_check(be, two, 2, 16, 2, 256, 50, dt);  /* group 8, D 256, window */
    /* the fixtures' heads: 4/2 x 16 (window 4 as gemma3), 4/1 x 24, 8/2 x 8, 4/2 x 32, 4/4 x 16 */
    dec_check(be, mixed, 3, 4, 2, 16, 0, dt);
    dec_check(be, two, 2, 4, 2, 16, 4, dt);
    dec_check(be, mixed, 3, 4, 1, 24, 0, dt);
    dec_check(be, p600, 1, 4, 1, 24, 0, dt);
    dec_check(be, mixed, 3, 8, 2, 8, 0, dt);
    dec_check(be, p1000, 1, 4, 2, 32, 0, dt);
    dec_check(be, two, 2, 4, 4, 16, 0, dt);
    dec_check(be, s16, 16, 4, 2, 32, 0, dt);
}

void gpu_decode_checks(void)
{
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
        gpu_check_report(0, "decode attn", err.msg, 1, 0);
        return;
    }
    dec_cases(be, RP_KV_F32);
    dec_cases(be, RP_KV_BF16);
    dec_cases(be, RP_KV_F16);
    rope_checks(be, "rope + attn", RP_KV_F32);
    rope_checks(be, "rope + attn", RP_KV_BF16);
    /* the other split plans (RAPID_CUDA_DA): the first rule, and the 4-load kernel always */
    const char *modes[2] = {"1", "3"};
    for (int i = 0; i < 2; i++) {
        rp_backend *bm = gpu_backend_with("RAPID_CUDA_DA", modes[i]);
        if (!bm)
            continue;
        dec_cases(bm, RP_KV_F32);
        dec_cases(bm, RP_KV_BF16);
        rp_backend_free(bm);
    }
    matvec_checks(be, "matvec");
    rp_backend_free(be);
    be = NULL;

    setenv("RAPID_CUDA_MVB", "3", 1); /* the opt-in streaming kernel */
    rp_status rc = rp_backend_new_cuda(0, 0.3, &be, &err);
    unsetenv("RAPID_CUDA_MVB");
    if (rc) {
        gpu_check_report(0, "matvec (stream)", err.msg, 1, 0);
        return;
    }
    matvec_checks(be, "matvec (stream)");
    rp_backend_free(be);
}

void gpu_decode_timing(void)
{
    const dec_seq p80[] = {{79, 1}}, p600[] = {{599, 1}}, p1000[] = {{999, 1}};
    dec_seq s64[64], b64[64], l64[64];
    for (int i = 0; i < 64; i++) {
        s64[i] = (dec_seq){(i * 37 + 5) % 300, 1};
        b64[i] = (dec_seq){16 + (i * 37) % 128, 1};  /* rapid bench --streams 64 --gen 128 */
        l64[i] = (dec_seq){512 + (i * 37) % 128, 1}; /* the same after a 512-token prompt */
    }
    const struct {
        const dec_seq *s;
        int n;
        const char *what;
    } cs[] = {{p80, 1, "80 positions"},        {p600, 1, "600 positions"},
              {p1000, 1, "1000 positions"},    {s64, 64, "64 seqs at 5..300"},
              {b64, 64, "64 seqs at 16..144"}, {l64, 64, "64 seqs at 512..640"}};
    const rp_kv_dtype dts[2] = {RP_KV_F32, RP_KV_BF16};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) { /* a backend each: its profile */
            rp_backend *be = NULL;
            rp_err err = {0};
            if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
                gpu_check_report(0, "decode attn", err.msg, 1, 0);
                return;
            }
            double d = dec_run(be, cs[i].s, cs[i].n, 32, 8, 128, 0, 200, dts[k]);
            printf("dectime %-20s kv %-4s 201 calls, worst %.3g\n", cs[i].what,
                   rp_kv_dtype_name(dts[k]), d);
            fflush(stdout);
            rp_backend_free(be);
        }
}
