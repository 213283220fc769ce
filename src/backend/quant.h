/* backend/quant.h - quantized weight formats: block layouts, plain-C dequantization (the
 * reference every kernel is tested against) and quantizers (for `rapid quantize` and tests).
 *
 * GGUF block layouts (little-endian; d, dmin, m are IEEE f16; values q are unsigned unless
 * said otherwise). Element i of a block is written x[i]:
 *   Q8_0 (32 elems, 34 B):  d; int8 qs[32].                x[i] = d * qs[i]
 *   Q4_0 (32, 18 B):        d; qs[16].                     x[i] = d * ((qs[i] & 15) - 8),
 *                                                          x[i + 16] = d * ((qs[i] >> 4) - 8)
 *   Q4_1 (32, 20 B):        d, m; qs[16].                  as Q4_0 with d * q + m, no -8
 *   Q5_0 (32, 22 B):        d; qh[4] (bit i of the LE u32 = bit 4 of element i); qs[16].
 *                                                          x[i] = d * (q5 - 16)
 *   Q5_1 (32, 24 B):        d, m; qh[4]; qs[16].           x[i] = d * q5 + m
 *   Q4_K (256, 144 B):      d, dmin; scales[12] (8 pairs of 6-bit scale sc_j and min m_j);
 *                           qs[128]. Sub-block j (32 elems) = d * sc_j * q - dmin * m_j, where
 *                           sub-blocks 2c and 2c+1 are the low and high nibbles of
 *                           qs[32c .. 32c + 31]. sc_j/m_j for j < 4: scales[j] & 63,
 *                           scales[j + 4] & 63; for j >= 4: (scales[j + 4] & 15) |
 *                           (scales[j - 4] >> 6) << 4, (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
 *   Q5_K (256, 176 B):      d, dmin; scales[12]; qh[32]; qs[128]. As Q4_K with a fifth bit:
 *                           element l of sub-block j has bit 4 = bit j of qh[l].
 *   Q6_K (256, 210 B):      ql[128]; qh[64]; int8 scales[16]; d. For half h (128 elems) and
 *                           l < 32, with L = ql + 64h, H = qh + 32h, S = scales + 8h:
 *                           x[128h + l]      = d * S[l/16]     * ((L[l] & 15 | (H[l] & 3) << 4) - 32)
 *                           x[128h + 32 + l] = d * S[2 + l/16] * ((L[l+32] & 15 | (H[l] >> 2 & 3) << 4) - 32)
 *                           x[128h + 64 + l] = d * S[4 + l/16] * ((L[l] >> 4 | (H[l] >> 4 & 3) << 4) - 32)
 *                           x[128h + 96 + l] = d * S[6 + l/16] * ((L[l+32] >> 4 | (H[l] >> 6) << 4) - 32)
 * MLX affine (RP_DT_MLX4/8): see backend.h.
 *
 * Threading: pure functions. Errors: none (shapes are the caller's contract).
 */
#ifndef RP_BACKEND_QUANT_H
#define RP_BACKEND_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Row `row` of a 2-D tensor of any dtype (MXFP4 included) into f32 (shape[1] floats). */
void rp_quant_dequant_row(const rp_tensor *t, int64_t row, float *out);

/* One row of n floats (n a multiple of rp_dtype_block) into GGUF type dt (a Q* type);
 * writes rp_dtype_row_bytes(dt, n) bytes. Round-to-nearest quantizers, not searched. */
void rp_quant_row(rp_dtype dt, const float *x, int64_t n, void *out);

/* MLX affine quantization of one row of n floats (n a multiple of group_size) with `bits`
 * 4 or 8: q packed into n * bits / 32 words; scale and bias per group (n / group_size each),
 * chosen as mlx.core.quantize does (the group's min or max, whichever is larger in size, is
 * represented exactly). Scales/biases are returned as f32; q is computed from the values the
 * caller will store when round_bf16 is set (bf16-rounded scale and bias). */
void rp_quant_mlx_row(int bits, int group_size, const float *x, int64_t n, uint32_t *q,
                      float *scales, float *biases, int round_bf16);

/* Block byte size and element count of a GGUF type. */
size_t rp_quant_block_bytes(rp_dtype dt);

#endif
