/* backend/cpu/x86/kernels_qx86.h - fast x86 kernels for quantized weights (decode in
 * kernels_qx86.c, prefill in kernels_qx86_prefill.c):
 * MLX decode on AVX-512 VNNI, and prefill of every quantized type on AMX-BF16 tiles.
 *
 * Ownership: every pointer is the caller's; nothing is allocated. Threading: pure functions;
 * concurrent calls need distinct rowbuf / y rows. Errors: none; callers check *_fits first.
 * Only call with rp_cpu() reporting AVX-512 VNNI (decode) or AMX + AVX512-BF16 with the tile
 * state granted by rp_amx_enable (prefill).
 */
#ifndef RP_BACKEND_CPU_X86_KERNELS_QX86_H
#define RP_BACKEND_CPU_X86_KERNELS_QX86_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend_impl.h"

/* Fewest tokens for which rp_qx_prefill beats the int8 decode kernels. */
#define RP_QX_MIN_TOKENS 8

/* Decode: MLX 4/8-bit, group size 64 or 128, cols % 1024 == 0, run64 activations (and
 * even_odd for 4-bit), as rp_quant_act writes them. An rp_qmatmul_kernel. */
int rp_qx_decode_fits(const rp_tensor *w, const rp_qact *a);
void rp_qx_mlx_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                      float *y);

/* Decode of GGUF Q8_0 / Q4_0: cols % 512 == 0 (<= 32768), natural activations (no run64).
 * The backend dispatches Q4_0 only (Q8_0 measured slower than the 256-bit kernel). */
int rp_qx_gguf_decode_fits(const rp_tensor *w, const rp_qact *a);
void rp_qx_gguf_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                       float *y);

/* Prefill: any quantized type but MXFP4, and bf16 (rows read in place), n_tok >=
 * RP_QX_MIN_TOKENS. x is packed once per call
 * by rp_qx_pack_bf16 into rp_qx_pack_bytes; each thread passes a rowbuf of
 * rp_qx_rowbuf_bytes(cols) (64-byte aligned) and does rows [r0, r1) of y[n_tok][rows]. */
int rp_qx_prefill_fits(const rp_tensor *w, int n_tok);
size_t rp_qx_pack_bytes(int n_tok, long cols);
size_t rp_qx_rowbuf_bytes(long cols);
void rp_qx_pack_bf16(const float *x, int n_tok, long cols, uint16_t *out);
void rp_qx_prefill(const rp_tensor *w, long r0, long r1, const uint16_t *xb, int n_tok,
                   void *rowbuf, float *y);

/* Row `row` of a quantized 2-D tensor into bf16 (the reference's f32 value rounded to nearest
 * even); f32 is scratch of shape[1] floats. */
void rp_qx_dequant_bf16(const rp_tensor *w, long row, uint16_t *out, float *f32);

#endif
