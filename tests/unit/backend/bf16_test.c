/* tests/unit/backend/bf16_test.c - the float-weight matmul paths through the backend.
 *
 * Prefill of bf16 weights (AMX tiles when the CPU has them, else AVX-512/AVX2) in the default
 * mode rounds each activation to bf16 (relative error <= 2^-9), so it must equal the f32
 * reference within 2^-9 x sum |w x| (plus 1e-5 x sum |w x| for the summation order); in
 * RP_BACKEND_EXACT mode within 1e-5 x sum |w x|. Shapes cover 16/32-row remainders, rows
 * left to the vector kernel, several K chunks and more than 128 tokens. Decode (1..3
 * tokens) and the fused rp_op_matmul_n for f32/f16/bf16 must match the reference within
 * 1e-5 x sum |w x| (their activations stay f32).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "base/alloc.h"
#include "base/half.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static float weight_at(const rp_tensor *t, long i)
{
    if (t->dtype == RP_DT_F32)
        return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    return t->dtype == RP_DT_BF16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h);
}

static rp_tensor make(rp_dtype dt, long rows, long cols)
{
    size_t n = (size_t)rows * (size_t)cols, es = dt == RP_DT_F32 ? 4 : 2;
    void *p = rp_alloc(n * es);
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (dt == RP_DT_F32)
            ((float *)p)[i] = v;
        else if (dt == RP_DT_BF16)
            ((uint16_t *)p)[i] = rp_f32_to_bf16(v);
        else
            ((uint16_t *)p)[i] = rp_f32_to_f16(v);
    }
    return (rp_tensor){.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = p,
                       .n_bytes = n * es};
}

/* y (n_tok x rows) against the reference within rel x sum |w x| + 1e-6 */
static void check(const rp_tensor *t, const float *x, int n_tok, const float *y, double rel,
                  const char *what)
{
    long rows = (long)t->shape[0], cols = (long)t->shape[1];
    float *yr = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)rows);
    rp_ref_matmul(t, 0, rows, x, n_tok, yr);
    double worst = 0;
    for (int tk = 0; tk < n_tok; tk++)
        for (long r = 0; r < rows; r++) {
            double mag = 0;
            for (long c = 0; c < cols; c++)
                mag += fabs((double)weight_at(t, r * cols + c) * x[(long)tk * cols + c]);
            long i = (long)tk * rows + r;
            double e = fabs((double)y[i] - yr[i]);
            worst = e / mag > worst ? e / mag : worst;
            cr_assert(e <= rel * mag + 1e-6, "%s %s %ldx%ld n_tok %d [%d][%ld]: %g vs %g", what,
                      rp_dtype_name(t->dtype), rows, cols, n_tok, tk, r, y[i], yr[i]);
        }
    cr_log_info("%s %s %ldx%ld n_tok %d: worst |error| / sum |w x| = %.3g", what,
                rp_dtype_name(t->dtype), rows, cols, n_tok, worst);
    rp_free(yr);
}

static float *make_x(int n_tok, long cols)
{
    float *x = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)cols);
    cr_assert_not_null(x);
    for (long i = 0; i < (long)n_tok * cols; i++)
        x[i] = frand();
    return x;
}

Test(bf16, prefill_default_and_exact_match_reference)
{
    rp_backend *fast = rp_backend_new(2, 0), *exact = rp_backend_new(2, RP_BACKEND_EXACT);
    /* rows: 32-row blocks, a 16-row block, leftovers; cols: 1, 2 and 3 K chunks */
    static const long shapes[][3] = {{300, 512, 37}, {64, 96, 16},  {17, 64, 8},
                                     {48, 128, 70},  {96, 4160, 24}, {80, 256, 150},
                                     {35, 2048, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        long rows = shapes[s][0], cols = shapes[s][1];
        int n_tok = (int)shapes[s][2];
        rp_tensor t = make(RP_DT_BF16, rows, cols);
        float *x = make_x(n_tok, cols);
        float *y = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)rows);
        rp_op_matmul(fast, &t, x, n_tok, y);
        check(&t, x, n_tok, y, 0x1p-9 + 1e-5, rp_backend_describe(fast));
        rp_op_matmul(exact, &t, x, n_tok, y);
        check(&t, x, n_tok, y, 1e-5, rp_backend_describe(exact));
        rp_free((void *)t.data);
        rp_free(x);
        rp_free(y);
    }
    rp_backend_free(fast);
    rp_backend_free(exact);
}

Test(bf16, decode_and_fused_match_reference)
{
    rp_backend *fast = rp_backend_new(2, 0);
    static const rp_dtype dts[] = {RP_DT_F32, RP_DT_F16, RP_DT_BF16};
    /* q/k/v-like shapes: unequal rows, cols with and without a 16/32/64 tail */
    static const long shapes[][2] = {{256, 512}, {64, 512}, {70, 520}, {1000, 2048}, {3, 40}};
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s + 2 < sizeof shapes / sizeof shapes[0]; s++)
            for (int n_tok = 1; n_tok <= 3; n_tok++) {
                long cols = shapes[s][1];
                rp_tensor t[3];
                float *y[3];
                for (int i = 0; i < 3; i++) {
                    long rows = shapes[s + (size_t)i][0];
                    /* all three take the same x: same cols */
                    t[i] = make(dts[d], rows, cols);
                    y[i] = rp_alloc(sizeof(float) * (size_t)n_tok * (size_t)rows);
                }
                float *x = make_x(n_tok, cols);
                const rp_tensor *tw[3] = {&t[0], &t[1], &t[2]};
                rp_op_matmul_n(fast, 3, tw, x, n_tok, y);
                for (int i = 0; i < 3; i++)
                    check(&t[i], x, n_tok, y[i], 1e-5, "fused");
                rp_op_matmul(fast, &t[0], x, n_tok, y[0]);
                check(&t[0], x, n_tok, y[0], 1e-5, "single");
                for (int i = 0; i < 3; i++) {
                    rp_free((void *)t[i].data);
                    rp_free(y[i]);
                }
                rp_free(x);
            }
    rp_backend_free(fast);
}

/* On x86-64 a bf16 / f16 matrix given to rp_backend_weight is copied into huge pages at its
 * first matmul, not at load, so a table only read by rp_op_embed (an untied embedding) is
 * never copied; the copy gives the view's results bit for bit (same kernel, same bytes), and
 * a matrix given again at the same address with new contents is copied again. */
Test(bf16, copied_on_first_matmul)
{
#if defined(__x86_64__)
    const char *cp = getenv("RAPID_CPU_COPY16");
    if (cp && cp[0] == '0') {
        cr_skip_test("RAPID_CPU_COPY16=0: 16-bit matrices are read in place");
    }
    static const rp_dtype dts[] = {RP_DT_BF16, RP_DT_F16};
    for (size_t d = 0; d < 2; d++) {
        rp_backend *fast = rp_backend_new(2, 0); /* a new one: its slabs start empty */
        long rows = 2000, cols = 1024;
        rp_tensor src = make(dts[d], rows, cols), wt;
        rp_err err = {0};
        int64_t live0 = rp_alloc_live_bytes(RP_TAG_MODEL);
        cr_assert_eq(rp_backend_weight(fast, &src, &wt, &err), RP_OK);
        cr_assert_eq(wt.data, src.data, "rp_backend_weight keeps the view");
        int32_t ids[3] = {0, 7, (int32_t)rows - 1};
        float *emb = rp_alloc(sizeof(float) * 3 * (size_t)cols);
        rp_op_embed(fast, &wt, ids, 3, emb);
        cr_assert_lt(rp_alloc_live_bytes(RP_TAG_MODEL) - live0, (int64_t)src.n_bytes / 2,
                     "rp_backend_weight and rp_op_embed must not copy the matrix");
        /* the same bytes at an address the backend never saw: read in place */
        rp_tensor view = src;
        void *dup = rp_alloc(src.n_bytes);
        cr_assert_not_null(dup);
        memcpy(dup, src.data, src.n_bytes);
        view.data = dup;
        float *x = make_x(2, cols);
        float *y = rp_alloc(sizeof(float) * 2 * (size_t)rows);
        float *yv = rp_alloc(sizeof(float) * 2 * (size_t)rows);
        for (int n_tok = 1; n_tok <= 2; n_tok++) {
            rp_op_matmul(fast, &wt, x, n_tok, y);
            rp_op_matmul(fast, &view, x, n_tok, yv);
            cr_assert_eq(memcmp(y, yv, sizeof(float) * (size_t)n_tok * (size_t)rows), 0,
                         "%s, %d tokens: the copy's results are the view's",
                         rp_dtype_name(dts[d]), n_tok);
        }
        cr_assert_geq(rp_alloc_live_bytes(RP_TAG_MODEL) - live0, (int64_t)src.n_bytes,
                      "the first matmul makes the copy");
        /* new contents at the same address, given again: the next matmul copies again */
        uint16_t *h = (uint16_t *)src.data;
        for (long i = 0; i < rows * cols; i += 3)
            h[i] ^= 0x0101;
        memcpy(dup, src.data, src.n_bytes);
        cr_assert_eq(rp_backend_weight(fast, &src, &wt, &err), RP_OK);
        rp_op_matmul(fast, &wt, x, 1, y);
        rp_op_matmul(fast, &view, x, 1, yv);
        cr_assert_eq(memcmp(y, yv, sizeof(float) * (size_t)rows), 0, "%s: copied again",
                     rp_dtype_name(dts[d]));
        rp_free((void *)src.data);
        rp_free(dup);
        rp_free(emb);
        rp_free(x);
        rp_free(y);
        rp_free(yv);
        rp_backend_free(fast);
    }
#else
    cr_skip_test("16-bit matrices are copied on x86-64 only");
#endif
}
