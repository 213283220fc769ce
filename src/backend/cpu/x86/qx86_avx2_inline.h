/* backend/cpu/x86/qx86_avx2_inline.h - small always-inline helpers shared by the AVX2 kernels
 * on repacked weights (kernels_qx86_avx2.c decode, kernels_qx86_prefill_avx2.c prefill).
 * Include only from sources compiled with the AVX2 flags. */
#ifndef RP_BACKEND_CPU_X86_QX86_AVX2_INLINE_H
#define RP_BACKEND_CPU_X86_QX86_AVX2_INLINE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"

#define QX2_AI static inline __attribute__((always_inline))

/* 8 scales or biases (f32, f16 or bf16) from p as f32 */
QX2_AI __m256 a2_load_sc(rp_dtype sdt, const uint8_t *p)
{
    if (sdt == RP_DT_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (sdt == RP_DT_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* 8 rows' sums v into dst[0 .. n_valid) (n_valid > 0): the last tile's rows past the matrix's
 * end are padding, never stored. */
QX2_AI void a2_store_rows(float *dst, __m256 v, long n_valid)
{
    if (n_valid >= 8) {
        _mm256_storeu_ps(dst, v);
    } else {
        float tmp[8];
        _mm256_storeu_ps(tmp, v);
        memcpy(dst, tmp, sizeof(float) * (size_t)n_valid);
    }
}

#endif
