/* tests/unit/backend/ops_test.c - every CPU kernel against its plain-C reference.
 *
 * Each ISA table available on this CPU (scalar always; AVX2, AVX-512 when present) runs the
 * matmul for every dtype over odd shapes (row and column tails, 1..9 tokens); the optimised
 * norm/rope paths run against the reference through a backend with and without
 * --ref-kernels (attention: the paged step op against the contiguous reference, kv_test.c). Tolerance: relative 1e-5 of the sum of |terms| (f32 summation order differs).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/sample.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/half.h"

static uint64_t g_rng = 88172645463325252ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static rp_tensor make_weight(rp_dtype dt, int rows, int cols, void **buf)
{
    size_t n = (size_t)rows * cols;
    *buf = rp_alloc(rp_dtype_row_bytes(dt, (int64_t)n));
    if (dt == RP_DT_MXFP4) /* random nibbles, block scales 2^-3 .. 2^0 */
        for (size_t i = 0; i < rp_dtype_row_bytes(dt, (int64_t)n); i++)
            ((uint8_t *)*buf)[i] = i % 17 ? (uint8_t)(frand() * 128 + 128)
                                          : (uint8_t)(124 + (i / 17) % 4);
    for (size_t i = 0; i < n && dt != RP_DT_MXFP4; i++) {
        float v = frand();
        if (dt == RP_DT_F32)
            ((float *)*buf)[i] = v;
        else if (dt == RP_DT_F16)
            ((uint16_t *)*buf)[i] = rp_f32_to_f16(v);
        else
            ((uint16_t *)*buf)[i] = rp_f32_to_bf16(v);
    }
    rp_tensor t = {.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = *buf,
                   .n_bytes = rp_dtype_row_bytes(dt, (int64_t)n)};
    return t;
}

/* x (n_tok x cols) in the order the table's kernel for dt takes (the backend reorders it the
 * same way): a new buffer */
static float *kernel_x(const rp_cpu_kernels *k, int dt, const float *x, int n_tok, int cols)
{
    float *xk = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
    cr_assert_not_null(xk);
    if (k->x_even_odd16[dt])
        rp_x_even_odd16(x, n_tok, cols, xk);
    else
        memcpy(xk, x, sizeof(float) * (size_t)n_tok * cols);
    return xk;
}

static void check_table(const rp_cpu_kernels *k)
{
    static const int shapes[][2] = {{1, 1}, {3, 7}, {4, 16}, {5, 17}, {13, 33}, {64, 100}, {9, 130}, {10, 48}, {11, 70}};
    for (int dt = 0; dt < RP_DT_COUNT; dt++) {
        if (!k->matmul[dt] || rp_dtype_is_quant((rp_dtype)dt)) /* quant_test.c has those */
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int n_tok = 1; n_tok <= 9; n_tok += 2) {
                int rows = shapes[s][0], cols = shapes[s][1];
                if (dt == RP_DT_MXFP4) /* rows of whole 32-element blocks */
                    cols = (cols + 31) / 32 * 32;
                void *buf;
                rp_tensor w = make_weight((rp_dtype)dt, rows, cols, &buf);
                float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
                float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
                float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
                for (int i = 0; i < n_tok * cols; i++)
                    x[i] = frand();
                rp_ref_matmul(&w, 0, rows, x, n_tok, yr);
                float *xk = kernel_x(k, dt, x, n_tok, cols);
                /* two halves, as two threads would split it */
                int mid = (rows / 2) & ~3;
                k->matmul[dt](&w, 0, mid, xk, n_tok, y);
                k->matmul[dt](&w, mid, rows, xk, n_tok, y);
                rp_free(xk);
                for (int i = 0; i < n_tok * rows; i++)
                    cr_assert(fabsf(y[i] - yr[i]) <= 1e-5f * cols + 1e-6f,
                              "%s %s %dx%d n_tok %d: %g vs %g", k->isa,
                              rp_dtype_name((rp_dtype)dt), rows, cols, n_tok, y[i], yr[i]);
                rp_free(buf);
                rp_free(x);
                rp_free(y);
                rp_free(yr);
            }
    }
}

/* A token's sums do not depend on the tokens beside it: n tokens in one call give, bit for
 * bit, what each token gives alone (a decode step then equals the prefill of the same
 * tokens, and a batched step equals its streams stepped one by one). */
static void check_token_invariance(const rp_cpu_kernels *k)
{
    static const int shapes[][2] = {{10, 48}, {11, 70}, {9, 130}, {32, 2048}};
    for (int dt = 0; dt < RP_DT_COUNT; dt++) {
        if (!k->matmul[dt] || rp_dtype_is_quant((rp_dtype)dt) || dt == RP_DT_MXFP4)
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int rows = shapes[s][0], cols = shapes[s][1], n_tok = 7;
            void *buf;
            rp_tensor w = make_weight((rp_dtype)dt, rows, cols, &buf);
            float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
            float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            float *y1 = rp_alloc(sizeof(float) * (size_t)rows);
            for (int i = 0; i < n_tok * cols; i++)
                x[i] = frand();
            float *xk = kernel_x(k, dt, x, n_tok, cols);
            k->matmul[dt](&w, 0, rows, xk, n_tok, y);
            for (int t = 0; t < n_tok; t++) {
                k->matmul[dt](&w, 0, rows, xk + (long)t * cols, 1, y1);
                cr_assert(!memcmp(y1, y + (long)t * rows, sizeof(float) * (size_t)rows),
                          "%s %s %dx%d: token %d alone differs from it among %d", k->isa,
                          rp_dtype_name((rp_dtype)dt), rows, cols, t, n_tok);
            }
            rp_free(buf);
            rp_free(x);
            rp_free(xk);
            rp_free(y);
            rp_free(y1);
        }
    }
}

Test(ops, matmul_token_invariant_avx2)
{
    if (rp_cpu()->isa < RP_ISA_AVX2)
        cr_skip_test("no AVX2 on this CPU");
    rp_cpu_kernels k = {0};
    rp_cpu_kernels_avx2(&k);
    check_token_invariance(&k);
}

Test(ops, matmul_every_isa_every_dtype)
{
    rp_cpu_kernels k = {0};
    rp_cpu_kernels_scalar(&k);
    check_table(&k);
    if (rp_cpu()->isa >= RP_ISA_AVX2) {
        rp_cpu_kernels k2 = {0};
        rp_cpu_kernels_avx2(&k2);
        check_table(&k2);
    } else {
        cr_log_info("no AVX2 on this CPU: AVX2 kernels not checked");
    }
    if (rp_cpu()->isa >= RP_ISA_AVX512) {
        rp_cpu_kernels k3 = {0};
        rp_cpu_kernels_avx512(&k3);
        check_table(&k3);
    } else {
        cr_log_info("no AVX-512 on this CPU: AVX-512 kernels not checked");
    }
    /* the tables as the backend lays them over each other (an ISA file that replaces a
     * kernel must also replace its activation order: the AVX-512 bf16 kernel under the AVX2
     * one's even/odd flag summed permuted columns) */
    for (int isa = RP_ISA_SCALAR; isa <= (int)rp_cpu()->isa && isa <= RP_ISA_AVX512; isa++) {
        rp_cpu_kernels kl;
        rp_cpu_kernels_for(&kl, isa);
        check_table(&kl);
    }
}

static void fill(float *x, long n)
{
    for (long i = 0; i < n; i++)
        x[i] = frand();
}

Test(ops, norm_rope_match_reference)
{
    rp_backend *fast = rp_backend_new(2, 0), *ref = rp_backend_new(2, 1);
    enum { T = 7, H = 4, D = 16 };
    float x[T * 64], a[T * 64], b[T * 64], w[64];
    fill(x, T * 64);
    fill(w, 64);
    rp_tensor wt = {.dtype = RP_DT_F32, .n_dims = 1, .shape = {64}, .data = w, .n_bytes = 256};
    for (int add_one = 0; add_one < 2; add_one++) {
        rp_op_rmsnorm(fast, a, x, &wt, T, 64, 1e-6f, add_one);
        rp_op_rmsnorm(ref, b, x, &wt, T, 64, 1e-6f, add_one);
        for (int i = 0; i < T * 64; i++)
            cr_assert_float_eq(a[i], b[i], 1e-5f);
    }
    float q1[T * H * D], q2[T * H * D], inv[D / 2];
    int32_t pos[T];
    for (int i = 0; i < T; i++)
        pos[i] = 30 + i;
    for (int i = 0; i < D / 2; i++)
        inv[i] = powf(10000.f, -2.0f * i / D);
    for (int neox = 0; neox < 2; neox++) {
        fill(q1, T * H * D);
        for (int i = 0; i < T * H * D; i++)
            q2[i] = q1[i];
        rp_op_rope(fast, q1, T, H, D, D, pos, inv, 1.0f, neox);
        rp_op_rope(ref, q2, T, H, D, D, pos, inv, 1.0f, neox);
        for (int i = 0; i < T * H * D; i++)
            cr_assert_float_eq(q1[i], q2[i], 1e-5f);
    }
    rp_backend_free(fast);
    rp_backend_free(ref);
}

/* The attention's vector dot product and y += a x for each ISA this CPU has (AVX2, AVX-512),
 * every length 0..70 (tails of 8 and 16), against double precision: within 1e-5 relative of
 * the sum of |terms|. */
Test(ops, attention_dot_axpy_every_isa)
{
    typedef float (*dot_fn)(const float *, const float *, int);
    typedef void (*axpy_fn)(float *, float, const float *, int);
    dot_fn dots[2] = {0};
    axpy_fn axpys[2] = {0};
    int n_isa = 0;
    if (rp_cpu()->isa >= RP_ISA_AVX2) {
        dots[n_isa] = rp_attn_dot_avx2;
        axpys[n_isa++] = rp_attn_axpy_avx2;
    }
    if (rp_cpu()->isa >= RP_ISA_AVX512) {
        dots[n_isa] = rp_attn_dot_avx512;
        axpys[n_isa++] = rp_attn_axpy_avx512;
    }
    if (!n_isa)
        cr_skip_test("no AVX2 on this CPU");
    float a[70], b[70], y[70], y0[70];
    for (int i = 0; i < 70; i++) {
        a[i] = frand();
        b[i] = frand() * 4.0f;
        y0[i] = frand();
    }
    for (int k = 0; k < n_isa; k++)
        for (int n = 0; n <= 70; n++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                ref += (double)a[i] * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            float d = dots[k](a, b, n);
            cr_assert(fabs(d - ref) <= 1e-5 * mag + 1e-30, "isa %d n %d: dot %g vs %g", k, n,
                      (double)d, ref);
            memcpy(y, y0, sizeof y);
            axpys[k](y, 0.375f, b, n);
            for (int i = 0; i < 70; i++) {
                double want = i < n ? (double)y0[i] + 0.375 * b[i] : y0[i];
                cr_assert(fabs(y[i] - want) <= 1e-6 * (fabs(y0[i]) + fabs(0.375 * b[i])),
                          "isa %d n %d: axpy[%d] %g vs %g", k, n, i, (double)y[i], want);
            }
        }
}

/* The vector e^x behind the softmax weights and SiLU, on AVX2 and (where the CPU has it)
 * AVX-512, each against expf: e^x within 4 ulp over the range the callers give it (down to
 * underflow, gates up to overflow), the sum within 1e-6, SiLU within 8 ulp, every length
 * 0..40 (tails of 8 and 16). The two ISAs' kernels share the arithmetic but not the bits (on
 * an AVX-512 CPU they differed), so each answers to the oracle, not to the other. */
Test(ops, exp_sum_silu_avx2_match_expf)
{
    if (rp_cpu()->isa < RP_ISA_AVX2)
        cr_skip_test("no AVX2 on this CPU");
    enum { N = 40 };
    float x[N], p[N], g[N], u[N], o[N];
    for (int i = 0; i < N; i++) {
        x[i] = i == 3 ? -200.0f : i == 7 ? -103.5f : -30.0f * frand() * frand();
        g[i] = i == 5 ? 95.0f : i == 9 ? -95.0f : 20.0f * (frand() - 0.5f);
        u[i] = frand() - 0.5f;
    }
    int n_isa = rp_cpu()->isa >= RP_ISA_AVX512 ? 2 : 1;
    for (int isa = 0; isa < n_isa; isa++) {
        const char *name = isa ? "avx512" : "avx2";
        for (int n = 0; n <= N; n++) {
            memcpy(p, x, sizeof x);
            float sum = isa ? rp_attn_exp_sum_avx512(p, n, 0.5f) : rp_attn_exp_sum_avx2(p, n, 0.5f);
            double want = 0;
            for (int i = 0; i < n; i++) {
                float e = expf(x[i] - 0.5f);
                want += e;
                cr_assert(fabsf(p[i] - e) <= 4 * 1.2e-7f * e + 1e-44f, "%s n %d: e^%g = %a vs %a",
                          name, n, (double)x[i], (double)p[i], (double)e);
            }
            cr_assert(fabs(sum - want) <= 1e-6 * want + 1e-30, "%s n %d: sum %g vs %g", name, n,
                      (double)sum, want);
            if (isa)
                rp_silu_mul_avx512(o, g, u, n);
            else
                rp_silu_mul_avx2(o, g, u, n);
            for (int i = 0; i < n; i++) {
                float want_o = g[i] / (1.0f + expf(-g[i])) * u[i];
                cr_assert(fabsf(o[i] - want_o) <= 8 * 1.2e-7f * fabsf(want_o) + 1e-30f,
                          "%s n %d: silu(%g) %a vs %a", name, n, (double)g[i], (double)o[i],
                          (double)want_o);
            }
        }
    }
}

/* rp_op_sample_rows on the CPU backend: each row's draw, shared out over the pool, equals
 * rp_sample_draw of that row (greedy, temperature alone, top-k, top-p, min-p). */
Test(ops, sample_rows_match_the_draw)
{
    enum { N_ROWS = 9, V = 3000 };
    rp_backend *be = rp_backend_new(2, 0);
    float *x = rp_alloc(sizeof(float) * N_ROWS * V);
    rp_sample_cand *c = rp_alloc(sizeof(rp_sample_cand) * V);
    uint32_t h = 12345;
    for (int i = 0; i < N_ROWS * V; i++) {
        h = h * 1664525u + 1013904223u;
        x[i] = (float)(h >> 8) * 0x1p-24f * 8.0f - 4.0f;
    }
    rp_sample_row p[N_ROWS];
    int32_t out[N_ROWS];
    for (int r = 0; r < N_ROWS; r++)
        p[r] = (rp_sample_row){.temperature = r == 0 ? 0.0f : 0.5f + 0.1f * (float)r,
                               .top_k = r % 3 == 1 ? 17 * r : 0,
                               .top_p = r % 3 == 2 ? 0.6f : 1.0f,
                               .min_p = r >= 6 ? 0.05f : 0.0f,
                               .u = (double)r / N_ROWS + 0.01};
    cr_assert_eq(rp_op_sample_rows(be, x, N_ROWS, V, p, out), 1, "the CPU backend draws");
    for (int r = 0; r < N_ROWS; r++)
        cr_assert_eq(out[r], rp_sample_draw(x + (size_t)r * V, V, &p[r], c), "row %d", r);
    rp_free(x);
    rp_free(c);
    rp_backend_free(be);
}
