/* backend/cpu/kernels_scalar.c - the portable kernel table: straightforward C the compiler
 * can vectorise for any target. Used when the CPU has neither AVX2 nor AVX-512. */
#include <math.h>

#include "backend/backend_impl.h"
#include "backend/quant.h"
#include "base/half.h"
#include "base/status.h"

static void matmul_f32(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    for (long r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (long)t * cols;
            float acc = 0.0f;
            for (long c = 0; c < cols; c++)
                acc += rp_load_f32(w->data, (size_t)(r * cols + c)) * xt[c];
            y[(long)t * rows + r] = acc;
        }
}

static void matmul_half(const rp_tensor *w, long r0, long r1, const float *x, int n_tok,
                        float *y, int is_bf16)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    for (long r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (long)t * cols;
            float acc = 0.0f;
            for (long c = 0; c < cols; c++) {
                uint16_t h = rp_load_u16(w->data, (size_t)(r * cols + c));
                acc += (is_bf16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h)) * xt[c];
            }
            y[(long)t * rows + r] = acc;
        }
}

static void matmul_bf16(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y)
{
    matmul_half(w, r0, r1, x, n_tok, y, 1);
}

static void matmul_f16(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y)
{
    matmul_half(w, r0, r1, x, n_tok, y, 0);
}

/* MXFP4: each 32-element block's dot product in FP4 units, then one multiply by its scale. */
static void matmul_mxfp4(const rp_tensor *w, long r0, long r1, const float *x, int n_tok,
                         float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nb = cols / 32;
    size_t rb = rp_dtype_row_bytes(RP_DT_MXFP4, cols);
    float wf[32];
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        for (int t = 0; t < n_tok; t++)
            y[(long)t * rows + r] = 0.0f;
        for (long b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * 17;
            float scale = ldexpf(1.0f, (int)blk[0] - 127);
            for (int i = 0; i < 16; i++) {
                wf[2 * i] = rp_fp4_values[blk[1 + i] & 15];
                wf[2 * i + 1] = rp_fp4_values[blk[1 + i] >> 4];
            }
            for (int t = 0; t < n_tok; t++) {
                const float *xt = x + (long)t * cols + b * 32;
                float acc = 0.0f;
                for (int i = 0; i < 32; i++)
                    acc += wf[i] * xt[i];
                y[(long)t * rows + r] += acc * scale;
            }
        }
    }
}

/* Quantized weights: dequantize one row (backend/quant.c), then f32 dots for every token. */
static void matmul_quant(const rp_tensor *w, long r0, long r1, const float *x, int n_tok,
                         float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    float row[16384];
    RP_ASSERT(cols <= 16384);
    for (long r = r0; r < r1; r++) {
        rp_quant_dequant_row(w, r, row);
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (long)t * cols;
            float acc = 0.0f;
            for (long c = 0; c < cols; c++)
                acc += row[c] * xt[c];
            y[(long)t * rows + r] = acc;
        }
    }
}

static uint64_t read_bytes(const void *p, size_t n)
{
    const uint64_t *q = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        a ^= q[i];
        b ^= q[i + 1];
        c ^= q[i + 2];
        d ^= q[i + 3];
    }
    return a ^ b ^ c ^ d;
}

void rp_cpu_kernels_scalar(rp_cpu_kernels *k)
{
    k->read = read_bytes;
    k->isa = "scalar";
    k->matmul[RP_DT_F32] = matmul_f32;
    k->matmul[RP_DT_F16] = matmul_f16;
    k->matmul[RP_DT_BF16] = matmul_bf16;
    for (int dt = RP_DT_Q8_0; dt < RP_DT_COUNT; dt++)
        k->matmul[dt] = matmul_quant;
    k->matmul[RP_DT_MXFP4] = matmul_mxfp4;
}
