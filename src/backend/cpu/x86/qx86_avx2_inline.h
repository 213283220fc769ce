/* backend/cpu/x86/qx86_avx2_inline.h - small always-inline helpers shared by the AVX2 kernels
 * on repacked weights (kernels_qx86_avx2.c decode, kernels_qx86_prefill_avx2.c prefill).
 * Include only from sources compiled with the AVX2 flags. */
#ifndef RP_BACKEND_CPU_X86_QX86_AVX2_INLINE_H
#define RP_BACKEND_CPU_X86_QX86_AVX2_INLINE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/x86/qx86_pack.h"

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

/* pk_act_sums (qx86_pack.h) with Q8_0's run sums vectorised: per work item the scalar loop
 * over the token's int8 codes cost about 3% of a Q8_0 decode (a 256-row item of 2048 columns
 * streams 557 KB in ~30 us; 2048 scalar adds took ~1 us). The same integers. */
QX2_AI void a2_act_sums(const rp_tensor *w, const rp_qact *a, int t, int nt,
                        float (*xg)[QX_MAX_GROUPS], int32_t (*xs)[QX_MAX_BLOCKS])
{
    if (w->dtype != RP_DT_Q8_0) {
        pk_act_sums(w, a, t, nt, xg, xs);
        return;
    }
    long cols = (long)w->shape[1], nrun = cols / 32;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int j = 0; j < nt; j++) {
        const int8_t *q = a->q + (long)(t + j) * cols;
        for (long k = 0; k < nrun; k++) {
            /* 1 x q summed in pairs (|pair| <= 256, exact), then pairs of pairs, then across */
            __m256i v = _mm256_madd_epi16(
                _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(q + 32 * k))),
                ones16);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
            xs[j][k] = 128 * _mm_cvtsi128_si32(h);
        }
    }
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
