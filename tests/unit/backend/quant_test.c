/* tests/unit/backend/quant_test.c - quantized formats and every quantized matmul kernel.
 *
 * 1. Layouts: hand-built blocks dequantize to the values the format defines (backend/quant.h).
 * 2. Quantizers: dequant(quant(x)) stays within a per-type RMS error of x.
 * 3. Kernels: every ISA table on this CPU (scalar: dequantize + f32 dot; AVX2 and AVX-512
 *    VNNI: int8 dot products on activations quantized per 32-run) against rp_ref_matmul,
 *    for every type over row tails, 1..9 tokens, MLX group sizes 32/64/128 and scale dtypes.
 *    Tolerance of the int8 kernels: the activation quantization error bound, i.e. for each
 *    run k, (max|x_k| / 254) * sum |w| over the run, plus 1e-5 relative of sum |w x| for f32
 *    summation order. The scalar table: 1e-5 relative.
 * 4. rp_op_matmul through a 2-thread backend (activation buffer, fan-out) against --ref.
 * 7. kernels_qx86.c: the 512-bit MLX, Q4_0 and Q8_0 decode kernels (same int8 bound as 3.,
 *    activation scales per 64-block for MLX, per 32-run for GGUF) and the AMX-BF16
 *    prefill of every quantized type (rows of one and of several 2048-column chunks).
 *    Prefill tolerance: w and x are each rounded to bf16
 *    (relative error <= 2^-9), so each product is off by at most (2^-8 + 2^-18) |w x|:
 *    bound = 1.01 * 2^-8 * sum |w x|, plus 1e-5 of it for f32 summation order.
 * 8. The tile kernels on weights repacked at load (rp_qx_repack: MLX4/MLX8 with groups 64 and
 *    128 and every scale dtype, Q4_0, Q8_0; row counts off the tile height; 1..9, 13 and 33
 *    tokens for the 4/2/1-token passes and the prefill's 6-token blocks), on AVX2
 *    (rp_qx_packed_decode_avx2, and rp_qx_packed_prefill_avx2 bit for bit equal to it) and
 *    AVX-512 VNNI where the CPU has them (bit for bit equal to AVX2), directly and through
 *    rp_backend_weight + rp_op_matmul(_n):
 *    the same int8 bound, activation scales per 64-block for MLX and per 32-run for GGUF
 *    (integer sums are exact; the Q8_0 +128 code offset is taken back exactly). The backend
 *    packs on a weight's first decode matmul (not on rp_backend_weight or rp_op_embed) and
 *    repacks a weight given again at the same address. Their activations (rp_qx_quant_act,
 *    rp_qx_quant_act_avx2): codes and scales bit-identical to rp_quant_act's, run sums within
 *    32 f32 roundings, the AVX2 and AVX-512 ones the same bits. The
 *    AMX prefill from a packed copy gives the view's results bit for bit (7.'s shapes).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backend/backend_impl.h"
#if defined(__x86_64__)
#include "backend/cpu/x86/kernels_qx86.h"
#endif
#include "backend/quant.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/half.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static const rp_dtype k_types[] = {RP_DT_Q8_0, RP_DT_Q4_0, RP_DT_Q4_1, RP_DT_Q5_0, RP_DT_Q5_1,
                                   RP_DT_Q4_K, RP_DT_Q5_K, RP_DT_Q6_K, RP_DT_MLX4, RP_DT_MLX8};

/* A quantized weight with its buffers (qw). */
typedef struct qw {
    rp_tensor t;
    void *data, *scales, *biases;
} qw;

static void store_scale(rp_dtype sdt, void *p, size_t i, float v)
{
    if (sdt == RP_DT_F32)
        ((float *)p)[i] = v;
    else if (sdt == RP_DT_F16)
        ((uint16_t *)p)[i] = rp_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = rp_f32_to_bf16(v);
}

static qw make_qw(rp_dtype dt, int rows, int cols, int gs, rp_dtype sdt, float offset)
{
    qw q = {0};
    size_t rb = rp_dtype_row_bytes(dt, cols);
    q.data = rp_alloc(rb * (size_t)rows);
    float *x = rp_alloc(sizeof(float) * (size_t)cols);
    int ng = gs ? cols / gs : 0;
    if (gs) {
        q.scales = rp_alloc(4 * (size_t)rows * ng);
        q.biases = rp_alloc(4 * (size_t)rows * ng);
    }
    float *sc = rp_alloc(sizeof(float) * (size_t)(ng + 1)), *bi = rp_alloc(sizeof(float) * (size_t)(ng + 1));
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            x[c] = frand() + offset;
        if (gs) {
            rp_quant_mlx_row(dt == RP_DT_MLX4 ? 4 : 8, gs, x, cols,
                             (uint32_t *)((char *)q.data + rb * (size_t)r), sc, bi,
                             sdt == RP_DT_BF16);
            for (int g = 0; g < ng; g++) {
                store_scale(sdt, q.scales, (size_t)r * ng + g, sc[g]);
                store_scale(sdt, q.biases, (size_t)r * ng + g, bi[g]);
            }
        } else {
            rp_quant_row(dt, x, cols, (char *)q.data + rb * (size_t)r);
        }
    }
    rp_free(x);
    rp_free(sc);
    rp_free(bi);
    q.t = (rp_tensor){.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = q.data,
                      .n_bytes = rb * (size_t)rows, .scales = q.scales, .biases = q.biases,
                      .scale_dtype = sdt, .group_size = gs};
    return q;
}

static void free_qw(qw *q)
{
    rp_free(q->data);
    rp_free(q->scales);
    rp_free(q->biases);
}

/* ---- 1. layouts ------------------------------------------------------------------------ */

static void put_h(uint8_t *p, float f)
{
    uint16_t h = rp_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static void dequant_one(rp_dtype dt, const void *blk, int n, float *out)
{
    rp_tensor t = {.dtype = dt, .n_dims = 2, .shape = {1, n}, .data = blk};
    rp_quant_dequant_row(&t, 0, out);
}

Test(quant, block_layouts)
{
    uint8_t b[256];
    float y[256];
    /* Q4_0: d = 0.5; byte i = (lo = i, hi = 15 - i) */
    put_h(b, 0.5f);
    for (int i = 0; i < 16; i++)
        b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    dequant_one(RP_DT_Q4_0, b, 32, y);
    for (int i = 0; i < 16; i++) {
        cr_assert_float_eq(y[i], 0.5f * (i - 8), 0);
        cr_assert_float_eq(y[i + 16], 0.5f * (15 - i - 8), 0);
    }
    /* Q5_1: d = 1, m = -3; bit 4 set on elements 3 and 20 */
    put_h(b, 1.0f);
    put_h(b + 2, -3.0f);
    uint32_t qh = 1u << 3 | 1u << 20;
    memcpy(b + 4, &qh, 4);
    for (int i = 0; i < 16; i++)
        b[8 + i] = (uint8_t)(1 | 2 << 4);
    dequant_one(RP_DT_Q5_1, b, 32, y);
    cr_assert_float_eq(y[0], -2.0f, 0);
    cr_assert_float_eq(y[3], 14.0f, 0);
    cr_assert_float_eq(y[16], -1.0f, 0);
    cr_assert_float_eq(y[20], 15.0f, 0);
    /* Q8_0 */
    put_h(b, 0.25f);
    for (int i = 0; i < 32; i++)
        b[2 + i] = (uint8_t)(int8_t)(i - 16);
    dequant_one(RP_DT_Q8_0, b, 32, y);
    cr_assert_float_eq(y[0], -4.0f, 0);
    cr_assert_float_eq(y[31], 3.75f, 0);
    /* Q4_K: d = 1, dmin = 1, sub-block j scale j+1 and min 2j (j >= 4 use the split bits:
     * scale 40 + j and min 50 + j need the top bits) */
    memset(b, 0, 144);
    put_h(b, 1.0f);
    put_h(b + 2, 1.0f);
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = j < 4 ? j + 1 : 40 + j;
        mn[j] = j < 4 ? 2 * j : 50 + j;
    }
    for (int j = 0; j < 4; j++) {
        b[4 + j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b[8 + j] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        b[12 + j] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    for (int l = 0; l < 128; l++)
        b[16 + l] = (uint8_t)(3 | 5 << 4); /* even sub-blocks q = 3, odd q = 5 */
    dequant_one(RP_DT_Q4_K, b, 256, y);
    for (int j = 0; j < 8; j++)
        cr_assert_float_eq(y[32 * j + 7], (float)(sc[j] * (j % 2 ? 5 : 3) - mn[j]), 0,
                           "Q4_K sub-block %d", j);
    /* Q6_K: d = 1, scale[i] = i - 8, every q6 = 33 (value +1) except element 200 (q = 0) */
    memset(b, 0, 210);
    put_h(b + 208, 1.0f);
    for (int i = 0; i < 16; i++)
        b[192 + i] = (uint8_t)(int8_t)(i - 8);
    for (int l = 0; l < 128; l++)
        b[l] = 1 | 1 << 4; /* low nibble 1 */
    for (int l = 0; l < 64; l++)
        b[128 + l] = 2 | 2 << 2 | 2 << 4 | 2 << 6; /* high bits 2 -> 32 + 1 */
    /* element 200 = half 1, r = 72 -> run 2 (ql high nibble of ql[64 + 8]), qh bits 4..5 */
    b[64 + 8] &= 0x0f;
    b[128 + 32 + 8] &= (uint8_t)~(3 << 4);
    dequant_one(RP_DT_Q6_K, b, 256, y);
    for (int i = 0; i < 256; i++)
        cr_assert_float_eq(y[i], i == 200 ? -32.0f * (i / 16 - 8) : (float)(i / 16 - 8), 0,
                           "Q6_K element %d", i);
}

Test(quant, mlx_packing)
{
    /* 4-bit: element e in word e / 8, bits 4 (e % 8); w = s q + b per group */
    uint32_t q[8] = {0x76543210u, 0xfedcba98u, 0, 0, 0, 0, 0, 0};
    uint16_t s[2] = {rp_f32_to_bf16(0.5f), rp_f32_to_bf16(2.0f)};
    uint16_t bi[2] = {rp_f32_to_bf16(-1.0f), rp_f32_to_bf16(1.0f)};
    rp_tensor t = {.dtype = RP_DT_MLX4, .n_dims = 2, .shape = {1, 64}, .data = q,
                   .scales = s, .biases = bi, .scale_dtype = RP_DT_BF16, .group_size = 32};
    float y[64];
    rp_quant_dequant_row(&t, 0, y);
    for (int e = 0; e < 16; e++)
        cr_assert_float_eq(y[e], 0.5f * e - 1.0f, 0);
    cr_assert_float_eq(y[40], 1.0f, 0);
}

/* ---- 2. quantizers --------------------------------------------------------------------- */

Test(quant, quantizers_round_trip)
{
    enum { N = 1024 };
    float x[N], y[N];
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        rp_dtype dt = k_types[ti];
        /* RMS error / RMS of a uniform [-1, 1] signal: ~ step / sqrt(12) / 0.577 */
        double lim = dt == RP_DT_Q8_0 || dt == RP_DT_MLX8 ? 0.01
                     : dt == RP_DT_Q6_K                  ? 0.03
                     : dt == RP_DT_Q5_0 || dt == RP_DT_Q5_1 || dt == RP_DT_Q5_K ? 0.05
                                                         : 0.10;
        g_rng = 0x9e3779b97f4a7c15ull;
        qw q = make_qw(dt, 1, N, dt >= RP_DT_MLX4 ? 64 : 0, RP_DT_F32, 0.0f);
        g_rng = 0x9e3779b97f4a7c15ull; /* the same x make_qw drew */
        for (int i = 0; i < N; i++)
            x[i] = frand();
        rp_quant_dequant_row(&q.t, 0, y);
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += (double)(x[i] - y[i]) * (x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
        cr_assert(sqrt(se / sx) < lim, "%s: relative RMS error %g >= %g", rp_dtype_name(dt),
                  sqrt(se / sx), lim);
        free_qw(&q);
    }
}

/* ---- 3. kernels vs reference ----------------------------------------------------------- */

static void check_kernel(const rp_cpu_kernels *k, rp_dtype dt, int rows, int cols, int gs,
                         rp_dtype sdt, int n_tok)
{
    qw q = make_qw(dt, rows, cols, gs, sdt, dt == RP_DT_Q4_1 ? 0.5f : 0.0f);
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
    float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *wrow = rp_alloc(sizeof(float) * (size_t)cols);
    for (int i = 0; i < n_tok * cols; i++)
        x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
    rp_ref_matmul(&q.t, 0, rows, x, n_tok, yr);
    int mid = (rows / 2) & ~3, int8 = k->qmatmul[dt] != NULL;
    if (int8) {
        long nrun = cols / 32;
        int8_t *aq = rp_alloc((size_t)n_tok * cols);
        float *ad = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
        float *as = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
        int run64 = k->act_run64[dt] && gs >= 64;
        rp_quant_act(x, n_tok, cols, rp_quant_act_even_odd(dt), run64, aq, ad, as);
        rp_qact a = {.q = aq, .d = ad, .s = as, .run64 = run64};
        k->qmatmul[dt](&q.t, 0, mid, &a, n_tok, y);
        k->qmatmul[dt](&q.t, mid, rows, &a, n_tok, y);
        rp_free(aq);
        rp_free(ad);
        rp_free(as);
    } else {
        k->matmul[dt](&q.t, 0, mid, x, n_tok, y);
        k->matmul[dt](&q.t, mid, rows, x, n_tok, y);
    }
    for (int r = 0; r < rows; r++) {
        rp_quant_dequant_row(&q.t, r, wrow);
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (long)t * cols;
            double bound = 0, mag = 0;
            int blk = k->act_run64[dt] && gs >= 64 ? 64 : 32; /* activation scale blocks */
            for (int c0 = 0; c0 < cols; c0 += blk) {
                float amax = 0, wsum = 0;
                for (int c = c0; c < c0 + blk; c++) {
                    amax = fabsf(xt[c]) > amax ? fabsf(xt[c]) : amax;
                    wsum += fabsf(wrow[c]);
                    mag += fabs((double)wrow[c] * xt[c]);
                }
                bound += (double)amax / 254.0 * wsum;
            }
            double tol = (int8 ? bound * 1.001 : 0.0) + 1e-5 * mag + 1e-6;
            float got = y[(long)t * rows + r], want = yr[(long)t * rows + r];
            cr_assert(fabs((double)got - want) <= tol,
                      "%s %s %dx%d gs %d n_tok %d row %d: %g vs %g (tol %g)", k->isa,
                      rp_dtype_name(dt), rows, cols, gs, n_tok, r, got, want, tol);
        }
    }
    free_qw(&q);
    rp_free(x);
    rp_free(y);
    rp_free(yr);
    rp_free(wrow);
}

static void check_table(const rp_cpu_kernels *k)
{
    static const int row_counts[] = {1, 3, 4, 5, 13};
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        rp_dtype dt = k_types[ti];
        int ktype = rp_dtype_block(dt) == 256, mlx = dt >= RP_DT_MLX4;
        for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++)
            for (int n_tok = 1; n_tok <= 9; n_tok += 2) {
                int rows = row_counts[ri];
                if (mlx) {
                    static const int gss[] = {32, 64, 128};
                    static const rp_dtype sdts[] = {RP_DT_BF16, RP_DT_F16, RP_DT_F32};
                    for (int g = 0; g < 3; g++)
                        check_kernel(k, dt, rows, 384, gss[g], sdts[(ri + g) % 3], n_tok);
                } else {
                    check_kernel(k, dt, rows, ktype ? 512 : 96, 0, RP_DT_F32, n_tok);
                }
            }
    }
}

Test(quant, kernels_every_isa_match_reference)
{
    rp_cpu_kernels k = {0};
    rp_cpu_kernels_scalar(&k);
    check_table(&k);
    if (rp_cpu()->isa >= RP_ISA_AVX2) {
        rp_cpu_kernels k2 = {0};
        rp_cpu_kernels_scalar(&k2);
        rp_cpu_kernels_avx2(&k2);
        cr_assert(k2.qmatmul[RP_DT_Q4_0] != NULL);
        check_table(&k2);
    } else {
        cr_log_info("no AVX2 on this CPU: AVX2 int8 kernels not checked");
    }
    if (rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_avx512_vnni) {
        rp_cpu_kernels k3 = {0};
        rp_cpu_kernels_scalar(&k3);
        rp_cpu_kernels_avx512(&k3);
        check_table(&k3);
    } else {
        cr_log_info("no AVX-512 VNNI on this CPU: AVX-512 int8 kernels not checked");
    }
}

/* ---- 4. through the backend ------------------------------------------------------------ */

Test(quant, op_matmul_threads_match_reference)
{
    rp_backend *fast = rp_backend_new(2, 0), *ref = rp_backend_new(2, 1);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        rp_dtype dt = k_types[ti];
        int rows = 300, cols = 512, n_tok = 6;
        qw q = make_qw(dt, rows, cols, dt >= RP_DT_MLX4 ? 64 : 0, RP_DT_BF16, 0.0f);
        float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
        float *y1 = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
        float *y2 = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
        for (int i = 0; i < n_tok * cols; i++)
            x[i] = frand();
        rp_op_matmul(fast, &q.t, x, n_tok, y1);
        rp_op_matmul(ref, &q.t, x, n_tok, y2);
        double se = 0, s2 = 0;
        for (int i = 0; i < n_tok * rows; i++) {
            se += (double)(y1[i] - y2[i]) * (y1[i] - y2[i]);
            s2 += (double)y2[i] * y2[i];
        }
        /* int8 activations: relative RMS error ~ 1/254 / sqrt(3) per element, averaged */
        cr_assert(sqrt(se / s2) < 0.01, "%s: relative RMS %g", rp_dtype_name(dt),
                  sqrt(se / s2));
        free_qw(&q);
        rp_free(x);
        rp_free(y1);
        rp_free(y2);
    }
    rp_backend_free(fast);
    rp_backend_free(ref);
}

/* A matmul's work items (chunk rows each, the last matrix's tail in quarter items: the
 * backend's guided tail) only split rows among threads: every row's sum is one kernel call's,
 * so 2 threads give the 1-thread backend's bits. Shapes big enough for the tail (a last
 * matrix of more than n_threads chunks), decode (1 token, fused pairs as gate/up) and 5 tokens. */
Test(quant, work_items_split_rows_only)
{
    rp_backend *one = rp_backend_new(1, 0), *two = rp_backend_new(2, 0);
    static const rp_dtype dts[] = {RP_DT_Q4_0, RP_DT_Q8_0, RP_DT_MLX4, RP_DT_MLX8, RP_DT_Q6_K};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (int n_tok = 1; n_tok <= 5; n_tok += 4) {
            const int rows[2] = {1504, 3040}, cols = 256;
            qw q[2];
            rp_tensor t1[2], t2[2];
            float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols), *y[2][2];
            for (int i = 0; i < n_tok * cols; i++)
                x[i] = frand();
            for (int m = 0; m < 2; m++) {
                q[m] = make_qw(dts[d], rows[m], cols, dts[d] >= RP_DT_MLX4 ? 64 : 0, RP_DT_BF16,
                               0.0f);
                rp_err err = {0};
                cr_assert_eq(rp_backend_weight(one, &q[m].t, &t1[m], &err), RP_OK, "%s", err.msg);
                cr_assert_eq(rp_backend_weight(two, &q[m].t, &t2[m], &err), RP_OK, "%s", err.msg);
                for (int b = 0; b < 2; b++)
                    y[b][m] = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)rows[m]);
            }
            const rp_tensor *w1[2] = {&t1[0], &t1[1]}, *w2[2] = {&t2[0], &t2[1]};
            rp_op_matmul_n(one, 2, w1, x, n_tok, y[0]);
            rp_op_matmul_n(two, 2, w2, x, n_tok, y[1]);
            for (int m = 0; m < 2; m++)
                cr_assert(!memcmp(y[0][m], y[1][m], sizeof(float) * (size_t)n_tok * rows[m]),
                          "%s, %d tokens, matrix %d: 2 threads differ from 1",
                          rp_dtype_name(dts[d]), n_tok, m);
            rp_op_matmul(one, &t1[1], x, n_tok, y[0][1]);
            rp_op_matmul(two, &t2[1], x, n_tok, y[1][1]);
            cr_assert(!memcmp(y[0][1], y[1][1], sizeof(float) * (size_t)n_tok * rows[1]),
                      "%s, %d tokens, one matrix: 2 threads differ from 1", rp_dtype_name(dts[d]),
                      n_tok);
            for (int m = 0; m < 2; m++) {
                free_qw(&q[m]);
                for (int b = 0; b < 2; b++)
                    rp_free(y[b][m]);
            }
            rp_free(x);
        }
    rp_backend_free(one);
    rp_backend_free(two);
}

/* ---- 5. AMX prefill of bf16 weights (when the CPU has it; else the AVX-512 path) -------- */

Test(quant, bf16_prefill_matches_reference)
{
    rp_backend *fast = rp_backend_new(2, RP_BACKEND_EXACT); /* bf16_test.c: the default mode */
    static const int shapes[][3] = {{300, 512, 37}, {64, 96, 16}, {17, 64, 8}, {48, 128, 70}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], cols = shapes[s][1], n_tok = shapes[s][2];
        uint16_t *w = rp_alloc(2 * (size_t)rows * cols);
        float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
        float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
        float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
        for (long i = 0; i < (long)rows * cols; i++)
            w[i] = rp_f32_to_bf16(frand());
        for (long i = 0; i < (long)n_tok * cols; i++)
            x[i] = frand();
        rp_tensor t = {.dtype = RP_DT_BF16, .n_dims = 2, .shape = {rows, cols}, .data = w,
                       .n_bytes = 2 * (size_t)rows * cols};
        rp_op_matmul(fast, &t, x, n_tok, y);
        rp_ref_matmul(&t, 0, rows, x, n_tok, yr);
        for (int tk = 0; tk < n_tok; tk++)
            for (int r = 0; r < rows; r++) {
                double mag = 0;
                for (int c = 0; c < cols; c++)
                    mag += fabs((double)rp_bf16_to_f32(w[(long)r * cols + c]) * x[(long)tk * cols + c]);
                long i = (long)tk * rows + r;
                cr_assert(fabs((double)y[i] - yr[i]) <= 1e-5 * mag + 1e-6,
                          "%s %dx%d n_tok %d [%d][%d]: %g vs %g", rp_backend_describe(fast), rows,
                          cols, n_tok, tk, r, y[i], yr[i]);
            }
        rp_free(w);
        rp_free(x);
        rp_free(y);
        rp_free(yr);
    }
    rp_backend_free(fast);
}

/* ---- 6. MLX prefill through the backend (AMX-BF16 over dequantized rows when present) --- */

Test(quant, mlx_prefill_matches_reference)
{
    rp_backend *fast = rp_backend_new(2, 0);
    static const int gss[] = {32, 64, 128};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 3; gi++) {
            rp_dtype dt = bits == 4 ? RP_DT_MLX4 : RP_DT_MLX8;
            int rows = 100, cols = 512, n_tok = 37;
            qw q = make_qw(dt, rows, cols, gss[gi], gi == 1 ? RP_DT_F16 : RP_DT_BF16, 0.0f);
            float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
            float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            float *wrow = rp_alloc(sizeof(float) * (size_t)cols);
            for (int i = 0; i < n_tok * cols; i++)
                x[i] = frand();
            rp_op_matmul(fast, &q.t, x, n_tok, y);
            rp_ref_matmul(&q.t, 0, rows, x, n_tok, yr);
            for (int r = 0; r < rows; r++) {
                rp_quant_dequant_row(&q.t, r, wrow);
                for (int t = 0; t < n_tok; t++) {
                    const float *xt = x + (long)t * cols;
                    double bound = 0, mag = 0;
                    /* activation scales per even/odd run (4-bit), per half, or per
                     * 64-block (run64): the 64-block's max bounds all three */
                    for (int c0 = 0; c0 < cols; c0 += 64) {
                        float amax = 0, wsum = 0;
                        for (int cc = c0; cc < c0 + 64; cc++) {
                            amax = fabsf(xt[cc]) > amax ? fabsf(xt[cc]) : amax;
                            wsum += fabsf(wrow[cc]);
                            mag += fabs((double)wrow[cc] * xt[cc]);
                        }
                        bound += (double)amax / 254.0 * wsum;
                    }
                    long i = (long)t * rows + r;
                    cr_assert(fabs((double)y[i] - yr[i]) <= bound * 1.001 + 1e-5 * mag + 1e-6,
                              "%s %s g%d [%d][%d]: %g vs %g (bound %g)",
                              rp_backend_describe(fast), rp_dtype_name(dt), gss[gi], t, r, y[i],
                              yr[i], bound);
                }
            }
            free_qw(&q);
            rp_free(x);
            rp_free(y);
            rp_free(yr);
            rp_free(wrow);
        }
    rp_backend_free(fast);
}

/* ---- 7. kernels_qx86.c ------------------------------------------------------------------ */

#if defined(__x86_64__)
/* The int8-activation bound (rp_qact): |y - yr| <= sum over activation-scale blocks of
 * (max |x| / 254) x sum |w|, plus 1e-5 of sum |w x| for the f32 summation order. */
static void assert_int8_bound(const rp_tensor *w, const float *x, int n_tok, int blk,
                              const float *y, const float *yr, const char *what)
{
    int rows = (int)w->shape[0], cols = (int)w->shape[1];
    float *wrow = rp_alloc(sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        rp_quant_dequant_row(w, r, wrow);
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (long)t * cols;
            double bound = 0, mag = 0;
            for (int c0 = 0; c0 < cols; c0 += blk) {
                float amax = 0, wsum = 0;
                for (int c = c0; c < c0 + blk; c++) {
                    amax = fabsf(xt[c]) > amax ? fabsf(xt[c]) : amax;
                    wsum += fabsf(wrow[c]);
                    mag += fabs((double)wrow[c] * xt[c]);
                }
                bound += (double)amax / 254.0 * wsum;
            }
            float got = y[(long)t * rows + r], want = yr[(long)t * rows + r];
            cr_assert(fabs((double)got - want) <= bound * 1.001 + 1e-5 * mag + 1e-6,
                      "%s %s %dx%d gs %d n_tok %d row %d: %g vs %g (bound %g)", what,
                      rp_dtype_name(w->dtype), rows, cols, w->group_size, n_tok, r, got, want,
                      bound);
        }
    }
    rp_free(wrow);
}

static void check_qx_decode(rp_dtype dt, int rows, int cols, int gs, rp_dtype sdt, int n_tok)
{
    qw q = make_qw(dt, rows, cols, gs, sdt, 0.0f);
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
    float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    for (int i = 0; i < n_tok * cols; i++)
        x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
    rp_ref_matmul(&q.t, 0, rows, x, n_tok, yr);
    long nrun = cols / 32;
    int8_t *aq = rp_alloc((size_t)n_tok * cols);
    float *ad = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
    float *as = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
    int mlx = dt >= RP_DT_MLX4, blk = mlx ? 64 : 32; /* activation scale blocks */
    rp_quant_act(x, n_tok, cols, rp_quant_act_even_odd(dt), mlx, aq, ad, as);
    rp_qact a = {.q = aq, .d = ad, .s = as, .run64 = mlx};
    rp_qmatmul_kernel kern = mlx ? rp_qx_mlx_decode : rp_qx_gguf_decode;
    cr_assert(mlx ? rp_qx_decode_fits(&q.t, &a) : rp_qx_gguf_decode_fits(&q.t, &a));
    int mid = (rows / 2) & ~3;
    kern(&q.t, 0, mid, &a, n_tok, y);
    kern(&q.t, mid, rows, &a, n_tok, y);
    assert_int8_bound(&q.t, x, n_tok, blk, y, yr, "qx decode");
    free_qw(&q);
    rp_free(aq);
    rp_free(ad);
    rp_free(as);
    rp_free(x);
    rp_free(y);
    rp_free(yr);
}

/* The tile kernels on weights repacked at load (rp_qx_repack): the same int8 bound, the
 * rows split at a 32-row boundary as the backend's work items are; every kernel this CPU has
 * (AVX2, and AVX-512 VNNI), and where it has both, the two bit for bit equal. */
static void check_qx_packed(rp_dtype dt, int rows, int cols, int gs, rp_dtype sdt, int n_tok)
{
    int has512 = rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_avx512_vnni;
    qw q = make_qw(dt, rows, cols, gs, sdt, 0.0f);
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
    float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    for (int i = 0; i < n_tok * cols; i++)
        x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
    rp_ref_matmul(&q.t, 0, rows, x, n_tok, yr);
    cr_assert(rp_qx_repack_fits(&q.t));
    size_t nb = rp_qx_repack_bytes(&q.t);
    cr_assert_eq(nb % 64, 0);
    void *pk = rp_alloc_aligned(nb, RP_TAG_MISC);
    long n_tiles = rp_qx_repack_tiles(&q.t);
    rp_qx_repack(&q.t, 0, n_tiles / 2, pk); /* in two parts, as the pool does */
    rp_qx_repack(&q.t, n_tiles / 2, n_tiles, pk);
    long nrun = cols / 32;
    int8_t *aq = rp_alloc((size_t)n_tok * cols);
    float *ad = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
    float *as = rp_alloc(sizeof(float) * (size_t)n_tok * nrun);
    int run64 = rp_qx_repack_run64(dt);
    rp_quant_act(x, n_tok, cols, 0, run64, aq, ad, as);
    rp_qact a = {.q = aq, .d = ad, .s = as, .run64 = run64};
    int mid = (rows / 2) & ~31;
    float *y2 = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    rp_qx_packed_decode_avx2(&q.t, pk, 0, mid, &a, n_tok, y2);
    rp_qx_packed_decode_avx2(&q.t, pk, mid, rows, &a, n_tok, y2);
    assert_int8_bound(&q.t, x, n_tok, run64 ? 64 : 32, y2, yr, "qx packed avx2");
    /* the AVX2 prefill (6-token blocks, the rest through the decode kernel): the decode's
     * bits, so within the same bound */
    float *y3 = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    rp_qx_packed_prefill_avx2(&q.t, pk, 0, mid, &a, n_tok, y3);
    rp_qx_packed_prefill_avx2(&q.t, pk, mid, rows, &a, n_tok, y3);
    for (int i = 0; i < n_tok * rows; i++)
        cr_assert(memcmp(&y3[i], &y2[i], sizeof(float)) == 0,
                  "%s %dx%d gs %d n_tok %d: avx2 prefill %g != decode %g at %d",
                  rp_dtype_name(dt), rows, cols, gs, n_tok, (double)y3[i], (double)y2[i], i);
    rp_free(y3);
    if (has512) {
        rp_qx_packed_decode(&q.t, pk, 0, mid, &a, n_tok, y);
        rp_qx_packed_decode(&q.t, pk, mid, rows, &a, n_tok, y);
        assert_int8_bound(&q.t, x, n_tok, run64 ? 64 : 32, y, yr, "qx packed");
        for (int i = 0; i < n_tok * rows; i++)
            cr_assert(memcmp(&y[i], &y2[i], sizeof(float)) == 0,
                      "%s %dx%d gs %d n_tok %d: avx2 %g != avx512 %g at %d", rp_dtype_name(dt),
                      rows, cols, gs, n_tok, (double)y2[i], (double)y[i], i);
    }
    rp_free(y2);
    rp_free_aligned(pk);
    free_qw(&q);
    rp_free(aq);
    rp_free(ad);
    rp_free(as);
    rp_free(x);
    rp_free(y);
    rp_free(yr);
}

Test(quant, qx86_packed_decode_matches_reference)
{
    if (rp_cpu()->isa < RP_ISA_AVX2) {
        cr_skip_test("no AVX2 on this CPU: the repacked decode kernels are not checked");
    }
    static const int rows_[] = {1, 16, 37, 80};
    /* passes of 4, 2 and 1 tokens (decode), 6-token blocks and the rest (AVX2 prefill) */
    static const int toks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 33};
    static const rp_dtype sdts[] = {RP_DT_BF16, RP_DT_F16, RP_DT_F32};
    static const rp_dtype types[] = {RP_DT_MLX4, RP_DT_MLX8, RP_DT_Q4_0, RP_DT_Q8_0};
    for (int ty = 0; ty < 4; ty++)
        for (int ri = 0; ri < 4; ri++)
            for (int ti = 0; ti < 11; ti++) {
                int cols = ri == 3 ? 2048 : 384;
                if (types[ty] >= RP_DT_MLX4) {
                    for (int gs = 64; gs <= 128; gs *= 2)
                        if (cols % gs == 0)
                            check_qx_packed(types[ty], rows_[ri], cols, gs,
                                            sdts[(ri + ti) % 3], toks[ti]);
                } else {
                    check_qx_packed(types[ty], rows_[ri], cols, 0, RP_DT_F32, toks[ti]);
                }
            }
    /* not taken: group 32, cols not a multiple of 64 */
    qw q = make_qw(RP_DT_MLX4, 4, 384, 32, RP_DT_BF16, 0.0f);
    cr_assert(!rp_qx_repack_fits(&q.t));
    free_qw(&q);
    q = make_qw(RP_DT_Q4_0, 4, 96, 0, RP_DT_F32, 0.0f);
    cr_assert(!rp_qx_repack_fits(&q.t));
    free_qw(&q);
}

/* The AVX2 decode of one token reads 4 tiles at once (then 2, then 1: a2_rows): a call over
 * 7 whole tiles and a part must give, bit for bit, what one call a tile gives. */
Test(quant, qx86_packed_decode_streams_same_bits)
{
    if (rp_cpu()->isa < RP_ISA_AVX2)
        cr_skip_test("no AVX2 on this CPU: the repacked decode kernels are not checked");
    static const rp_dtype types[] = {RP_DT_MLX4, RP_DT_MLX8, RP_DT_Q4_0, RP_DT_Q8_0};
    for (int ty = 0; ty < 4; ty++) {
        rp_dtype dt = types[ty];
        int tr = dt == RP_DT_MLX4 || dt == RP_DT_Q4_0 ? 32 : 16, rows = 7 * tr + 5, cols = 384;
        int mlx = dt == RP_DT_MLX4 || dt == RP_DT_MLX8;
        qw q = make_qw(dt, rows, cols, mlx ? 64 : 0, mlx ? RP_DT_BF16 : RP_DT_F32, 0.0f);
        cr_assert(rp_qx_repack_fits(&q.t));
        void *pk = rp_alloc_aligned(rp_qx_repack_bytes(&q.t), RP_TAG_MISC);
        rp_qx_repack(&q.t, 0, rp_qx_repack_tiles(&q.t), pk);
        float x[384], ad[12], as[12], y1[7 * 32 + 5], y2[7 * 32 + 5];
        int8_t aq[384];
        for (int i = 0; i < cols; i++)
            x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
        int run64 = rp_qx_repack_run64(dt);
        rp_quant_act(x, 1, cols, 0, run64, aq, ad, as);
        rp_qact a = {.q = aq, .d = ad, .s = as, .run64 = run64};
        rp_qx_packed_decode_avx2(&q.t, pk, 0, rows, &a, 1, y1);
        for (int r = 0; r < rows; r += tr)
            rp_qx_packed_decode_avx2(&q.t, pk, r, r + tr < rows ? r + tr : rows, &a, 1, y2);
        cr_assert(!memcmp(y1, y2, sizeof(float) * (size_t)rows),
                  "%s: 4 tiles at once differ from one at a time", rp_dtype_name(dt));
        rp_free_aligned(pk);
        free_qw(&q);
    }
}

/* Through the backend: rp_backend_weight repacks, rp_op_matmul (and matmul_n) finds the packed
 * copy; the result stays within the int8 bound of the reference backend's. */
Test(quant, backend_repacked_weights_match_reference)
{
    if (rp_cpu()->isa < RP_ISA_AVX2) {
        cr_skip_test("no AVX2 on this CPU: weights are not repacked");
    }
    rp_backend *ref = rp_backend_new(2, 1);
    static const rp_dtype types[] = {RP_DT_MLX4, RP_DT_MLX8, RP_DT_Q4_0, RP_DT_Q8_0};
    for (int ty = 0; ty < 4; ty++)
        for (int n_tok = 1; n_tok <= 13; n_tok += 4) { /* 9 and 13: the AVX2 prefill */
            /* a backend per weight, as per model: packed copies are found by the view's data
             * pointer, which a freed weight's successor may reuse */
            rp_backend *fast = rp_backend_new(2, 0);
            rp_dtype dt = types[ty];
            int rows = 300, cols = 512;
            qw q = make_qw(dt, rows, cols, dt >= RP_DT_MLX4 ? 64 : 0, RP_DT_BF16, 0.0f);
            rp_tensor wt, wt2;
            rp_err err = {0};
            cr_assert_eq(rp_backend_weight(fast, &q.t, &wt, &err), RP_OK);
            cr_assert_eq(rp_backend_weight(fast, &q.t, &wt2, &err), RP_OK); /* seen before */
            float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
            float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            float *y2 = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
            for (int i = 0; i < n_tok * cols; i++)
                x[i] = frand();
            rp_op_matmul(ref, &q.t, x, n_tok, yr);
            rp_op_matmul(fast, &wt, x, n_tok, y);
            assert_int8_bound(&q.t, x, n_tok, rp_qx_repack_run64(dt) ? 64 : 32, y, yr,
                              "backend packed");
            const rp_tensor *ws[2] = {&wt, &wt2};
            float *ys[2] = {y, y2};
            rp_op_matmul_n(fast, 2, ws, x, n_tok, ys);
            assert_int8_bound(&q.t, x, n_tok, rp_qx_repack_run64(dt) ? 64 : 32, y2, yr,
                              "backend packed matmul_n");
            free_qw(&q);
            rp_free(x);
            rp_free(y);
            rp_free(y2);
            rp_free(yr);
            rp_backend_free(fast);
        }
    rp_backend_free(ref);
}

/* rp_qx_quant_act (the tile kernels' activations; AVX-512) and rp_qx_quant_act_avx2 against
 * rp_quant_act: q and d bit-identical, each run's sum s within 32 f32 roundings of sum |x|
 * (another order); the two vector ones bit-identical, s included, where both run. */
Test(quant, qx86_quant_act_matches_reference)
{
    int avx512 = rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_avx512_vnni;
    if (rp_cpu()->isa < RP_ISA_AVX2) {
        cr_skip_test("no AVX2 on this CPU: rp_qx_quant_act_avx2 is not checked");
    }
    int n_tok = 3;
    long cols = 1024;
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)cols);
    int8_t *q = rp_alloc((size_t)n_tok * (size_t)cols), *qr = rp_alloc((size_t)n_tok * (size_t)cols);
    int8_t *q2 = rp_alloc((size_t)n_tok * (size_t)cols);
    float *ds = rp_alloc(sizeof(float) * 2 * (size_t)n_tok * (size_t)(cols / 32));
    float *dsr = rp_alloc(sizeof(float) * 2 * (size_t)n_tok * (size_t)(cols / 32));
    float *ds2 = rp_alloc(sizeof(float) * 2 * (size_t)n_tok * (size_t)(cols / 32));
    for (long i = 0; i < n_tok * cols; i++) /* mixed magnitudes, a zero run, exact halves */
        x[i] = i / 32 == 5 ? 0.0f : i % 97 == 0 ? 0.5f * (float)(i % 7) : frand() * (1 + i % 5);
    long nrun = n_tok * cols / 32;
    for (int run64 = 0; run64 <= 1; run64++) {
        rp_qx_quant_act_avx2(x, n_tok, cols, run64, q, ds, ds + nrun);
        rp_quant_act(x, n_tok, cols, 0, run64, qr, dsr, dsr + nrun);
        cr_assert_eq(memcmp(q, qr, (size_t)n_tok * (size_t)cols), 0, "codes (run64 %d)", run64);
        cr_assert_eq(memcmp(ds, dsr, sizeof(float) * (size_t)(run64 ? nrun / 2 : nrun)), 0,
                     "scales (run64 %d)", run64);
        for (long k = 0; k < nrun; k++) {
            double mag = 0;
            for (int i = 0; i < 32; i++)
                mag += fabs(x[32 * k + i]);
            cr_assert_leq(fabs(ds[nrun + k] - dsr[nrun + k]), 32 * 6e-8 * mag + 1e-30,
                          "run sum %ld", k);
        }
        if (avx512) {
            rp_qx_quant_act(x, n_tok, cols, run64, q2, ds2, ds2 + nrun);
            cr_assert_eq(memcmp(q, q2, (size_t)n_tok * (size_t)cols), 0, "avx2 vs avx512 codes");
            cr_assert_eq(memcmp(ds, ds2, sizeof(float) * (size_t)(run64 ? nrun / 2 : nrun)), 0,
                         "avx2 vs avx512 scales");
            cr_assert_eq(memcmp(ds + nrun, ds2 + nrun, sizeof(float) * (size_t)nrun), 0,
                         "avx2 vs avx512 run sums");
        }
    }
    rp_free(x);
    rp_free(q);
    rp_free(qr);
    rp_free(q2);
    rp_free(ds);
    rp_free(dsr);
    rp_free(ds2);
}

/* The packed copy is made on a weight's first decode matmul, not by rp_backend_weight, so a
 * table only read by rp_op_embed is never copied; a weight given again at the same address
 * with new contents is repacked (the stale copy is not used). */
Test(quant, backend_packs_on_first_decode_matmul)
{
    if (rp_cpu()->isa < RP_ISA_AVX2) {
        cr_skip_test("no AVX2 on this CPU: weights are not repacked");
    }
    rp_backend *ref = rp_backend_new(2, 1), *fast = rp_backend_new(2, 0);
    int rows = 2000, cols = 1024;
    qw q = make_qw(RP_DT_MLX4, rows, cols, 64, RP_DT_BF16, 0.0f);
    size_t pk_bytes = rp_qx_repack_bytes(&q.t);
    rp_tensor wt;
    rp_err err = {0};
    int64_t live0 = rp_alloc_live_bytes(RP_TAG_MODEL);
    cr_assert_eq(rp_backend_weight(fast, &q.t, &wt, &err), RP_OK);
    float *x = rp_alloc(sizeof(float) * (size_t)cols);
    float *y = rp_alloc(sizeof(float) * (size_t)rows);
    float *yr = rp_alloc(sizeof(float) * (size_t)rows);
    int32_t ids[3] = {0, 7, rows - 1};
    float *emb = rp_alloc(sizeof(float) * 3 * (size_t)cols);
    rp_op_embed(fast, &wt, ids, 3, emb);
    cr_assert_lt(rp_alloc_live_bytes(RP_TAG_MODEL) - live0, (int64_t)pk_bytes / 2,
                 "rp_backend_weight and rp_op_embed must not make the packed copy");
    for (int i = 0; i < cols; i++)
        x[i] = frand();
    rp_op_matmul(ref, &q.t, x, 1, yr);
    rp_op_matmul(fast, &wt, x, 1, y);
    cr_assert_geq(rp_alloc_live_bytes(RP_TAG_MODEL) - live0, (int64_t)pk_bytes,
                  "the first decode matmul makes the packed copy");
    assert_int8_bound(&q.t, x, 1, 64, y, yr, "lazily packed");
    /* new codes at the same address, given again: the next matmul repacks */
    uint8_t *d = q.data;
    for (size_t i = 0; i < rp_dtype_row_bytes(RP_DT_MLX4, cols) * (size_t)rows; i++)
        d[i] ^= 0x5A;
    cr_assert_eq(rp_backend_weight(fast, &q.t, &wt, &err), RP_OK);
    rp_op_matmul(ref, &q.t, x, 1, yr);
    rp_op_matmul(fast, &wt, x, 1, y);
    assert_int8_bound(&q.t, x, 1, 64, y, yr, "repacked after new contents");
    free_qw(&q);
    rp_free(x);
    rp_free(y);
    rp_free(yr);
    rp_free(emb);
    rp_backend_free(fast);
    rp_backend_free(ref);
}

Test(quant, qx86_mlx_decode_matches_reference)
{
    if (!(rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_avx512_vnni)) {
        cr_skip_test("no AVX-512 VNNI on this CPU: the qx86 decode kernel is not checked");
    }
    static const int rows_[] = {1, 5, 13, 36};
    static const rp_dtype sdts[] = {RP_DT_BF16, RP_DT_F16, RP_DT_F32};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gs = 64; gs <= 128; gs *= 2)
            for (int ri = 0; ri < 4; ri++)
                for (int ti = 0; ti < 4; ti++) { /* 2-token tiles, groups of 8 tokens */
                    static const int toks[] = {1, 2, 5, 9};
                    check_qx_decode(bits == 4 ? RP_DT_MLX4 : RP_DT_MLX8, rows_[ri],
                                    ri == 3 ? 2048 : 1024, gs, sdts[(ri + ti) % 3], toks[ti]);
                    if (gs == 64) /* GGUF Q4_0 / Q8_0 */
                        check_qx_decode(bits == 4 ? RP_DT_Q4_0 : RP_DT_Q8_0, rows_[ri],
                                        ri == 3 ? 2048 : 512, 0, RP_DT_F32, toks[ti]);
                }
}

static void check_qx_prefill(rp_dtype dt, int rows, int cols, int gs, rp_dtype sdt, int n_tok)
{
    qw q = make_qw(dt, rows, cols, gs, sdt, dt == RP_DT_Q4_1 ? 0.5f : 0.0f);
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * cols);
    float *y = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
    float *wrow = rp_alloc(sizeof(float) * (size_t)cols);
    for (int i = 0; i < n_tok * cols; i++)
        x[i] = frand() * (i % 7 == 0 ? 3.0f : 1.0f);
    rp_ref_matmul(&q.t, 0, rows, x, n_tok, yr);
    cr_assert(rp_qx_prefill_fits(&q.t, n_tok));
    uint16_t *xb = rp_alloc_aligned(rp_qx_pack_bytes(n_tok, cols), RP_TAG_MISC);
    void *rowbuf = rp_alloc_aligned(rp_qx_rowbuf_bytes(cols), RP_TAG_MISC);
    rp_qx_pack_bf16(x, n_tok, cols, xb);
    int mid = (rows / 2) & ~15;
    rp_qx_prefill(&q.t, NULL, 0, mid, xb, n_tok, rowbuf, y);
    rp_qx_prefill(&q.t, NULL, mid, rows, xb, n_tok, rowbuf, y);
    for (int r = 0; r < rows; r++) {
        rp_quant_dequant_row(&q.t, r, wrow);
        for (int t = 0; t < n_tok; t++) {
            double mag = 0;
            for (int c = 0; c < cols; c++)
                mag += fabs((double)wrow[c] * x[(long)t * cols + c]);
            float got = y[(long)t * rows + r], want = yr[(long)t * rows + r];
            cr_assert(fabs((double)got - want) <= 1.01 * 0x1p-8 * mag + 1e-5 * mag + 1e-6,
                      "qx prefill %s %dx%d gs %d n_tok %d row %d: %g vs %g (mag %g)",
                      rp_dtype_name(dt), rows, cols, gs, n_tok, r, got, want, mag);
        }
    }
    if (rp_qx_repack_fits(&q.t)) { /* from the packed copy: bit-identical to the view's */
        void *pk = rp_alloc_aligned(rp_qx_repack_bytes(&q.t), RP_TAG_MISC);
        float *yp = rp_alloc(sizeof(float) * (size_t)n_tok * rows);
        rp_qx_repack(&q.t, 0, rp_qx_repack_tiles(&q.t), pk);
        int mid32 = (rows / 2) & ~31;
        rp_qx_prefill(&q.t, NULL, 0, mid32, xb, n_tok, rowbuf, y);
        rp_qx_prefill(&q.t, NULL, mid32, rows, xb, n_tok, rowbuf, y);
        rp_qx_prefill(&q.t, pk, 0, mid32, xb, n_tok, rowbuf, yp);
        rp_qx_prefill(&q.t, pk, mid32, rows, xb, n_tok, rowbuf, yp);
        cr_assert_eq(memcmp(y, yp, sizeof(float) * (size_t)n_tok * rows), 0,
                     "qx prefill from the packed %s %dx%d gs %d n_tok %d differs from the view's",
                     rp_dtype_name(dt), rows, cols, gs, n_tok);
        rp_free_aligned(pk);
        rp_free(yp);
    }
    rp_free_aligned(xb);
    rp_free_aligned(rowbuf);
    free_qw(&q);
    rp_free(x);
    rp_free(y);
    rp_free(yr);
    rp_free(wrow);
}

Test(quant, qx86_prefill_every_type_matches_reference)
{
    if (!(rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_amx && rp_cpu()->has_avx512_bf16 &&
          rp_amx_enable())) {
        cr_skip_test("no AMX-BF16 on this CPU: the qx86 prefill kernel is not checked");
    }
    static const int shapes[][2] = {{17, 8}, {64, 16}, {100, 37}};
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        rp_dtype dt = k_types[ti];
        for (int s = 0; s < 3; s++) {
            if (dt >= RP_DT_MLX4) {
                static const int gss[] = {32, 64, 128};
                static const rp_dtype sdts[] = {RP_DT_BF16, RP_DT_F16, RP_DT_F32};
                check_qx_prefill(dt, shapes[s][0], 512, gss[s], sdts[s], shapes[s][1]);
            } else {
                check_qx_prefill(dt, shapes[s][0], 512, 0, RP_DT_F32, shapes[s][1]);
            }
        }
    }
    /* rows longer than one 2048-column chunk (the last one partial): y accumulates per chunk */
    check_qx_prefill(RP_DT_MLX4, 40, 4160, 64, RP_DT_BF16, 20);
    check_qx_prefill(RP_DT_MLX8, 33, 4224, 128, RP_DT_F16, 17);
    check_qx_prefill(RP_DT_Q4_0, 40, 4160, 0, RP_DT_F32, 9);
    check_qx_prefill(RP_DT_Q4_K, 20, 4352, 0, RP_DT_F32, 16);
}
#endif
