/* backend/cpu/x86/qx86_inline.h - small always-inline helpers shared by the AVX-512 kernels
 * (kernels_qx86.c decode, kernels_qx86_prefill.c prefill, the MLX kernels of kernels_avx512.c,
 * attn_avx512.c). Include only from sources compiled with the AVX-512 flags. */
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

/* The 16 x 16 transpose of r (32-bit elements): r[i] element j becomes r[j] element i. */
QX_AI void qx_transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) { /* u[g + c], lane L: rows g..g+3, element 4 L + c */
        u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

#endif
