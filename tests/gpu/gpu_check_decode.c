/* tests/gpu/gpu_check_decode.c - the decode attention kernel (cuda_decode.cu) against a
 * double-precision host reference, part of rapid_gpu_check.
 *
 * Each case is one step over some sequences (each with `cached` positions stored by an
 * earlier step, then n_new new tokens) on layer 1 of a 2-layer f32 pool whose 16-token blocks
 * are handed out in a scrambled order. The kernel keeps everything f32 (no rounding of q, K,
 * V or P), so the tolerance is DEC_TOL (1e-5; f32 sums over up to 4k keys of values in
 * [-1, 1]). Cases: the Llama-3-8B shape (32 / 8 heads of 128) at 1, 17, 80, 600, 1000 and 4097
 * positions, 16 and 64 sequences at uneven positions, a mixed step (one 40-token chunk after
 * 300 cached, three decode tokens), sliding windows, GQA groups 1 / 4 / 8, head sizes 8, 16,
 * 24, 32 (the fixtures'), 64, 128 and 256. `rapid_gpu_check dectime` repeats the 8B decode
 * steps for timing (run it with RAPID_CUDA_PROFILE=2: the GPU time per op is printed when the
 * backend is freed; RAPID_CUDA_DECATTN=0 times the chunked kernel instead).
 *
 * The one-token bf16 matvec, the default kernel and the opt-in streaming one
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
#define MV_TOL 1e-4

typedef struct dec_seq {
    int cached, n_new;
} dec_seq;

static uint64_t d_rng = 0x6a09e667f3bcc909ull;
static float drand(void) /* uniform in [-1, 1) */
{
    d_rng ^= d_rng << 13;
    d_rng ^= d_rng >> 7;
    d_rng ^= d_rng << 17;
    return (float)((double)(d_rng >> 11) / 4503599627370496.0 - 1.0);
}

static float *dec_upload(rp_backend *be, const float *x, long rows, long cols)
{
    rp_tensor t = {.dtype = RP_DT_F32, .n_dims = 2, .shape = {rows, cols}, .data = x,
                   .n_bytes = sizeof(float) * (size_t)rows * cols}, td;
    rp_err err = {0};
    return rp_backend_weight(be, &t, &td, &err) == RP_OK ? (float *)(uintptr_t)td.data : NULL;
}

/* Runs the step (and `reps` more attention calls for timing); returns the worst error. */
static double dec_run(rp_backend *be, const dec_seq *ss, int n_seqs, int H, int KVH, int D,
                      int window, int reps)
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
    float *k = rp_alloc(sizeof(float) * (size_t)n_all * kvd),
          *v = rp_alloc(sizeof(float) * (size_t)n_all * kvd),
          *q = rp_alloc(sizeof(float) * (size_t)n_tok * H * D),
          *got = rp_alloc(sizeof(float) * (size_t)n_tok * H * D),
          *kold = rp_alloc(sizeof(float) * (size_t)(n_old + 1) * kvd),
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
        k[i] = drand();
        v[i] = drand();
    }
    for (long i = 0; i < (long)n_tok * H * D; i++)
        q[i] = 3.0f * drand(); /* peakier softmax than [-1, 1) gives */
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
    size_t half = (size_t)BT * kvd * sizeof(float);
    rp_kv_layout L = {.dtype = RP_KV_F32, .block_tokens = BT, .n_layers = LAYERS,
                      .n_kv_heads = KVH, .head_dim = D, .row_bytes = sizeof(float) * D,
                      .half_bytes = half, .block_bytes = 2 * LAYERS * half};
    L.base = rp_backend_buf_alloc(be, L.block_bytes * (size_t)n_blk, 0);
    float *qd = dec_upload(be, q, n_tok, (long)H * D), *kn = dec_upload(be, knew, n_tok, kvd),
          *vn = dec_upload(be, vnew, n_tok, kvd), *ko = dec_upload(be, kold, n_old + 1, kvd),
          *vo = dec_upload(be, vold, n_old + 1, kvd);
    float *od = rp_backend_buf_alloc(be, sizeof(float) * (size_t)n_tok * H * D, 0);
    if (L.base && qd && kn && vn && ko && vo && od) {
        float scale = 1.0f / sqrtf((float)D);
        if (n_so) {
            rp_op_step_begin(be, &L, st_old, n_so);
            rp_op_kv_store(be, LAYER, ko, vo, kvd);
        }
        rp_op_step_begin(be, &L, st_new, n_seqs);
        rp_op_kv_store(be, LAYER, kn, vn, kvd);
        rp_step_attn a = {.q = qd, .out = od, .n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                          .scale = scale, .window = window};
        for (int r = 0; r <= reps; r++)
            rp_op_attention_step(be, LAYER, &a);
        rp_backend_to_host(be, got, od, sizeof(float) * (size_t)n_tok * H * D);
        worst = 0;
        double *p = rp_alloc(sizeof(double) * (size_t)n_all), *o = rp_alloc(sizeof(double) * D);
        int t = 0;
        base = 0;
        for (int s = 0; p && o && s < n_seqs; s++) {
            for (int i = 0; i < ss[s].n_new; i++, t++) {
                int pos = ss[s].cached + i;
                int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                for (int h = 0; h < H; h++) {
                    const float *qr = q + ((size_t)t * H + h) * D;
                    int kh = h / (H / KVH);
                    double mx = -INFINITY, l = 0;
                    for (int j = lo; j <= pos; j++) {
                        const float *kr = k + (size_t)(base + j) * kvd + (size_t)kh * D;
                        double sc = 0;
                        for (int e = 0; e < D; e++)
                            sc += (double)qr[e] * kr[e];
                        p[j] = sc * scale;
                        mx = p[j] > mx ? p[j] : mx;
                    }
                    for (int e = 0; e < D; e++)
                        o[e] = 0;
                    for (int j = lo; j <= pos; j++) {
                        double wt = exp(p[j] - mx);
                        l += wt;
                        const float *vr = v + (size_t)(base + j) * kvd + (size_t)kh * D;
                        for (int e = 0; e < D; e++)
                            o[e] += wt * vr[e];
                    }
                    for (int e = 0; e < D; e++) {
                        double dd = fabs(o[e] / l - got[((size_t)t * H + h) * D + e]);
                        worst = dd != dd ? INFINITY : dd > worst ? dd : worst;
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

static void dec_check(rp_backend *be, const dec_seq *ss, int n_seqs, int H, int KVH, int D,
                      int window)
{
    char what[96];
    int n = snprintf(what, sizeof what, "H%d/%d D%d%s", H, KVH, D, window ? " win" : "");
    if (n_seqs > 3)
        snprintf(what + n, sizeof what - (size_t)n, " %d seqs", n_seqs);
    else
        for (int s = 0; s < n_seqs && n < (int)sizeof what - 12; s++)
            n += snprintf(what + n, sizeof what - (size_t)n, " %d+%d", ss[s].cached, ss[s].n_new);
    double d = dec_run(be, ss, n_seqs, H, KVH, D, window, 0);
    gpu_check_report(d <= DEC_TOL, "decode attn", what, d, DEC_TOL);
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

void gpu_decode_checks(void)
{
    rp_backend *be = NULL;
    rp_err err = {0};
    if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
        gpu_check_report(0, "decode attn", err.msg, 1, 0);
        return;
    }
    const dec_seq p1[] = {{0, 1}}, p17[] = {{16, 1}}, p80[] = {{79, 1}}, p600[] = {{599, 1}},
                  p1000[] = {{999, 1}}, p4097[] = {{4096, 1}},
                  mixed[] = {{300, 40}, {7, 1}, {130, 1}}, two[] = {{33, 2}, {250, 1}};
    dec_seq s16[16], s64[64];
    for (int i = 0; i < 16; i++)
        s16[i] = (dec_seq){(i * 97 + 13) % 700, 1};
    for (int i = 0; i < 64; i++)
        s64[i] = (dec_seq){(i * 37 + 5) % 300, 1};
    dec_check(be, p1, 1, 32, 8, 128, 0);
    dec_check(be, p17, 1, 32, 8, 128, 0);
    dec_check(be, p80, 1, 32, 8, 128, 0);
    dec_check(be, p600, 1, 32, 8, 128, 0);
    dec_check(be, p1000, 1, 32, 8, 128, 0);
    dec_check(be, p4097, 1, 32, 8, 128, 0);
    dec_check(be, s16, 16, 32, 8, 128, 0);
    dec_check(be, s64, 64, 32, 8, 128, 0);
    dec_check(be, mixed, 3, 32, 8, 128, 0);
    dec_check(be, p600, 1, 32, 8, 128, 100);
    dec_check(be, mixed, 3, 32, 8, 128, 37);
    dec_check(be, p600, 1, 32, 4, 128, 0);  /* group 8 */
    dec_check(be, p600, 1, 8, 8, 128, 0);   /* MHA */
    dec_check(be, p1000, 1, 16, 4, 64, 0);  /* group 4, D 64 */
    dec_check(be, two, 2, 8, 8, 64, 0);     /* MHA, D 64 */
    dec_check(be, p600, 1, 16, 4, 256, 0);  /* D 256 */
    dec_check(be, two, 2, 16, 2, 256, 50);  /* group 8, D 256, window */
    /* the fixtures' heads: 4/2 x 16 (window 4 as gemma3), 4/1 x 24, 8/2 x 8, 4/2 x 32, 4/4 x 16 */
    dec_check(be, mixed, 3, 4, 2, 16, 0);
    dec_check(be, two, 2, 4, 2, 16, 4);
    dec_check(be, mixed, 3, 4, 1, 24, 0);
    dec_check(be, p600, 1, 4, 1, 24, 0);
    dec_check(be, mixed, 3, 8, 2, 8, 0);
    dec_check(be, p1000, 1, 4, 2, 32, 0);
    dec_check(be, two, 2, 4, 4, 16, 0);
    dec_check(be, s16, 16, 4, 2, 32, 0);
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
    dec_seq s64[64];
    for (int i = 0; i < 64; i++)
        s64[i] = (dec_seq){(i * 37 + 5) % 300, 1};
    const struct {
        const dec_seq *s;
        int n;
        const char *what;
    } cs[] = {{p80, 1, "80 positions"}, {p600, 1, "600 positions"},
              {p1000, 1, "1000 positions"}, {s64, 64, "64 seqs at 5..300"}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) { /* a backend each: its own profile */
        rp_backend *be = NULL;
        rp_err err = {0};
        if (rp_backend_new_cuda(0, 0.3, &be, &err)) {
            gpu_check_report(0, "decode attn", err.msg, 1, 0);
            return;
        }
        double d = dec_run(be, cs[i].s, cs[i].n, 32, 8, 128, 0, 200);
        printf("dectime %-20s 201 calls, worst %.3g\n", cs[i].what, d);
        fflush(stdout);
        rp_backend_free(be);
    }
}
