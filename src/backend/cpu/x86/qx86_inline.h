/* backend/cpu/x86/qx86_inline.h - small always-inline helpers shared by the x86 kernels of
 * quantized weights (kernels_qx86.c decode, kernels_qx86_prefill.c prefill, the MLX kernels of
 * kernels_avx512.c). Include only from sources compiled with the AVX-512 flags. */
#ifndef RP_BACKEND_CPU_X86_QX86_INLINE_H
#define RP_BACKEND_CPU_X86_QX86_INLINE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "base/half.h"

#define QX_AI static inline __attribute__((always_inline))

/* An f16 stored at p (any alignment) as f32. */
QX_AI float qx_h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* n scales or biases (f32, f16 or bf16) from p to f32; n a multiple of 16 is fastest. */
QX_AI void qx_widen(rp_dtype sdt, const void *p, long n, float *out)
{
    long g = 0;
    if (sdt == RP_DT_BF16)
        for (; g + 16 <= n; g += 16)
            _mm512_storeu_ps(out + g, _mm512_castsi512_ps(_mm512_slli_epi32(
                                          _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                              (const __m256i *)((const uint16_t *)p + g))),
                                          16)));
    else if (sdt == RP_DT_F16)
        for (; g + 16 <= n; g += 16)
            _mm512_storeu_ps(out + g, _mm512_cvtph_ps(_mm256_loadu_si256(
                                          (const __m256i *)((const uint16_t *)p + g))));
    for (; g < n; g++)
        out[g] = sdt == RP_DT_F32    ? rp_load_f32(p, (size_t)g)
                 : sdt == RP_DT_BF16 ? rp_bf16_to_f32(rp_load_u16(p, (size_t)g))
                                     : _cvtsh_ss(rp_load_u16(p, (size_t)g));
}

#endif
