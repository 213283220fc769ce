/* backend/quant_affine.h - GGUF block types re-expressed as MLX affine groups.
 *
 * Most GGUF block types are affine per 32 elements: every element of a 32-element group is
 * scale * u + bias for an unsigned code u. Q4_0 is d * (u - 8), Q4_1 d * u + m, Q8_0 d * q
 * (u = q + 128), Q5_0 d * (u - 16), Q5_1 d * u + m, and each 32-element sub-block j of a
 * Q4_K / Q5_K super-block d * sc_j * u - dmin * m_j. So these types can run on kernels that
 * take the MLX layout (backend.h RP_DT_MLX4 / RP_DT_MLX8, group 32): the 4-bit codes (Q4_*)
 * as MLX4, the 5- and 8-bit ones (Q5_*, Q8_0) as MLX8, scale and bias as f16. That is how the
 * CUDA backend runs GGUF weights with the kernels it has for MLX checkpoints.
 *
 * Exactness: for Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 the scale and bias are f16 values times a power
 * of two, so the MLX form holds exactly the values the GGUF one does. For Q4_K / Q5_K the
 * products d * sc_j and dmin * m_j are rounded once to f16 (relative error <= 2^-11, about
 * 1/100 of a 4-bit step for the largest code). Q6_K (16-element sub-blocks) and the other
 * types have no such form: rp_quant_affine_bits says 0.
 *
 * Threading: pure functions. Errors: none (shapes are the caller's contract).
 */
#ifndef RP_BACKEND_QUANT_AFFINE_H
#define RP_BACKEND_QUANT_AFFINE_H

#include <stdint.h>

#include "backend/backend.h"

/* 4 or 8: the MLX width a GGUF type's groups fit in; 0: not expressible (Q6_K, MXFP4, ...). */
int rp_quant_affine_bits(rp_dtype dt);

/* One row of n elements (a multiple of the type's block) of GGUF type dt into MLX layout
 * with group size 32: q gets n * bits / 32 words, scales and biases n / 32 f16 values each. */
void rp_quant_affine_row(rp_dtype dt, const void *row, int64_t n, uint32_t *q, uint16_t *scales,
                         uint16_t *biases);

#endif
