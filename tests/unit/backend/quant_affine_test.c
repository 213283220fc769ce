/* tests/unit/backend/quant_affine_test.c - GGUF block types re-expressed as MLX groups
 * (backend/quant_affine.h): random rows quantized by rp_quant_row, converted, and both forms
 * dequantized by the reference rp_quant_dequant_row. The 32-element types (Q4_0, Q4_1, Q8_0,
 * Q5_0, Q5_1) must give exactly the same values; Q4_K / Q5_K round d * sc and dmin * m to f16
 * once (half an ulp: 2^-11 relative), so each value scale * u + bias may move by
 * 2^-11 * (|scale| * u + |bias|): that bound is checked per element (with 0.2% slack for the
 * bound's own scale and bias being the rounded ones, and 1e-6 of the row's max for f32).
 */
#include <criterion/criterion.h>
#include <math.h>

#include "backend/quant.h"
#include "backend/quant_affine.h"
#include "base/alloc.h"
#include "base/half.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

/* Converts `rows` random rows of n elements of type dt; returns the largest difference
 * between the two dequantized forms relative to each element's bound (module comment), or
 * the largest difference itself when exact. */
static double convert_diff(rp_dtype dt, int64_t rows, int64_t n, int exact, int *changed)
{
    int bits = rp_quant_affine_bits(dt);
    size_t rb = rp_dtype_row_bytes(dt, n);
    uint8_t *g = rp_alloc(rb * (size_t)rows);
    uint32_t *q = rp_alloc(sizeof(uint32_t) * (size_t)(rows * n * bits / 32));
    uint16_t *s = rp_alloc(sizeof(uint16_t) * (size_t)(rows * n / 32));
    uint16_t *b = rp_alloc(sizeof(uint16_t) * (size_t)(rows * n / 32));
    float *x = rp_alloc(sizeof(float) * (size_t)n), *y0 = rp_alloc(sizeof(float) * (size_t)n),
          *y1 = rp_alloc(sizeof(float) * (size_t)n);
    cr_assert(g && q && s && b && x && y0 && y1);
    for (int64_t r = 0; r < rows; r++) {
        float amp = 0.01f + 3.0f * (float)r / (float)rows; /* scales of several sizes */
        for (int64_t i = 0; i < n; i++)
            x[i] = amp * frand() + (r % 3 == 1 ? 0.5f * amp : 0.0f); /* some rows off centre */
        rp_quant_row(dt, x, n, g + (size_t)r * rb);
        rp_quant_affine_row(dt, g + (size_t)r * rb, n, q + r * n * bits / 32, s + r * n / 32,
                            b + r * n / 32);
    }
    rp_tensor tg = {.dtype = dt, .n_dims = 2, .shape = {rows, n}, .data = g};
    rp_tensor tm = {.dtype = bits == 4 ? RP_DT_MLX4 : RP_DT_MLX8,
                    .n_dims = 2,
                    .shape = {rows, n},
                    .data = q,
                    .scales = s,
                    .biases = b,
                    .scale_dtype = RP_DT_F16,
                    .group_size = 32};
    double worst = 0;
    *changed = 0;
    for (int64_t r = 0; r < rows; r++) {
        rp_quant_dequant_row(&tg, r, y0);
        rp_quant_dequant_row(&tm, r, y1);
        double mx = 0, d = 0;
        for (int64_t i = 0; i < n; i++)
            mx = fmax(mx, fabs(y0[i]));
        cr_assert(mx > 0, "row %ld of %s dequantizes to zeros", (long)r, rp_dtype_name(dt));
        for (int64_t i = 0; i < n; i++) {
            int64_t e = r * n + i, gi = e / 32;
            uint32_t u = (q[e * bits / 32] >> (e * bits % 32)) & ((1u << bits) - 1);
            double bound = 0x1p-11 * 1.002 *
                               (fabs(rp_f16_to_f32(s[gi])) * u + fabs(rp_f16_to_f32(b[gi]))) +
                           1e-6 * mx;
            d = fabs((double)y0[i] - y1[i]);
            worst = fmax(worst, exact ? d : d / bound);
            *changed += y0[i] != 0.0f;
        }
    }
    rp_free(g), rp_free(q), rp_free(s), rp_free(b), rp_free(x), rp_free(y0), rp_free(y1);
    return worst;
}

Test(quant_affine, widths)
{
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q4_0), 4);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q4_1), 4);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q4_K), 4);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q8_0), 8);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q5_0), 8);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q5_1), 8);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q5_K), 8);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_Q6_K), 0);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_MXFP4), 0);
    cr_assert_eq(rp_quant_affine_bits(RP_DT_BF16), 0);
}

Test(quant_affine, exact_for_32_element_types)
{
    const rp_dtype types[] = {RP_DT_Q4_0, RP_DT_Q4_1, RP_DT_Q8_0, RP_DT_Q5_0, RP_DT_Q5_1};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int nz;
        double d = convert_diff(types[i], 7, 96, 1, &nz);
        cr_assert(nz > 7 * 96 / 2, "%s: too few non-zero values", rp_dtype_name(types[i]));
        cr_assert_eq(d, 0.0, "%s: MLX form differs by %g", rp_dtype_name(types[i]), d);
    }
}

Test(quant_affine, k_types_within_f16_rounding)
{
    const rp_dtype types[] = {RP_DT_Q4_K, RP_DT_Q5_K};
    for (size_t i = 0; i < 2; i++) {
        int nz;
        double d = convert_diff(types[i], 5, 512, 0, &nz);
        cr_assert(nz > 5 * 512 / 2, "%s: too few non-zero values", rp_dtype_name(types[i]));
        cr_assert(d <= 1.0, "%s: MLX form differs by %g of the f16 rounding bound",
                  rp_dtype_name(types[i]), d);
        cr_assert(d > 0.0, "%s: no rounding seen at all: the test does not reach it",
                  rp_dtype_name(types[i]));
    }
}

/* rp_quant_dequant_row of MXFP4 (what the CUDA backend expands gpt-oss experts from): each
 * element is the e2m1 value of its nibble (low nibble first) times 2^(scale byte - 127). */
Test(quant_affine, mxfp4_rows_dequantize)
{
    uint8_t row[2 * 17];
    for (int b = 0; b < 2; b++) {
        row[b * 17] = (uint8_t)(127 + (b ? -3 : 2)); /* 2^2 and 2^-3 */
        for (int i = 0; i < 16; i++)
            row[b * 17 + 1 + i] = (uint8_t)((i * 7 + b) & 15) | (uint8_t)(((i * 5 + 3) & 15) << 4);
    }
    rp_tensor t = {.dtype = RP_DT_MXFP4, .n_dims = 2, .shape = {1, 64}, .data = row};
    float y[64];
    rp_quant_dequant_row(&t, 0, y);
    for (int i = 0; i < 64; i++) {
        int b = i / 32, k = i % 32;
        uint8_t byte = row[b * 17 + 1 + k / 2];
        float want = ldexpf(rp_fp4_values[k % 2 ? byte >> 4 : byte & 15], b ? -3 : 2);
        cr_assert_eq(y[i], want, "element %d: %g, want %g", i, y[i], want);
    }
}
