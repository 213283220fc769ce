/* backend/cpu/x86/kernels_qx86.c - the fast x86 decode paths for quantized weights: MLX and
 * GGUF Q4_0 on AVX-512 VNNI (512-bit VPDPBUSD, two groups per instruction pair), and the tile
 * kernels on weights repacked at load (MLX4/MLX8/Q4_0/Q8_0, last section: what the backend
 * runs when it could repack). Prefill of every quantized type is in kernels_qx86_prefill.c.
 *
 * Decode (rp_qx_mlx_decode; rp_qact activations, run64, MLX4 also even_odd; rp_qx_gguf_decode
 * for Q4_0 / Q8_0 below, natural runs): a 16-block chunk
 * (1024 columns) of 4 rows at a time. 4-bit: 64 packed bytes = 64-blocks A and B; their low
 * nibbles are A's and B's even elements, the high nibbles the odd ones, so two VPDPBUSD into
 * one int32 accumulator (activations [A even | B even] and [A odd | B odd]) give lanes 0..7 =
 * block A, 8..15 = block B, scaled in f32 by (group scale x activation scale) per half. 8-bit:
 * one VPDPBUSD per 64-block (q unsigned as stored, so no shift), scaled by a broadcast. The
 * affine part is sum_g bias_g x (exact f32 sum of x over group g), per row and token.
 * Arithmetic is the AVX-512 VNNI kernel's (same int8 activations): same error bound.
 *
 * Threading: pure functions of their arguments; the caller gives each thread its own rowbuf.
 * Compiled with AVX-512 flags; only called when rp_cpu() reports AVX-512 VNNI. Errors: none (shapes are checked by *_fits).
 */
#include "backend/cpu/x86/kernels_qx86.h"
#include "backend/cpu/x86/qx86_inline.h"
#include "backend/cpu/x86/qx86_pack.h"

#include <immintrin.h>
#include <string.h>

#include "backend/quant.h"
#include "base/half.h"

/* Software prefetch in each weight row, T0, this many bytes ahead of use (measured on
 * DRAM-sized matrices against a next-tile T1 scheme and none: the best of the three) */
#define QX_PFD(bits) ((bits) == 4 ? 2048 : 1024)

/* ---- decode ---------------------------------------------------------------------------- */

int rp_qx_decode_fits(const rp_tensor *w, const rp_qact *a)
{
    long cols = (long)w->shape[1];
    return (w->dtype == RP_DT_MLX4 || w->dtype == RP_DT_MLX8) && a->run64 &&
           (w->group_size == 64 || w->group_size == 128) && cols % 1024 == 0 &&
           cols / w->group_size <= QX_MAX_GROUPS;
}

/* n (16, or 8 zero-extended) scales of type sdt from element i of p, as f32. */
QX_AI __m512 qx_load_sc(rp_dtype sdt, const void *p, long i, const int n)
{
    if (sdt == RP_DT_F32)
        return n == 16 ? _mm512_loadu_ps((const float *)p + i)
                       : _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)p + i));
    __m256i h = n == 16 ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))
                        : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    if (sdt == RP_DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Rows [r, r + NR) x tokens [t0, t0 + NT). xg: the tokens' exact group sums of x. Per
 * 16-block chunk, the rows' scales and biases are loaded as vectors; the bias term
 * bias_g x xg_g goes into the same accumulator (its lanes are summed at the end). */
QX_AI void qx_dec_tile(const rp_tensor *w, long r, const rp_qact *a, int t0, float *y,
                       const int bits, const int NR, const int NT, const int g128,
                       const float *xg[2])
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nblk = cols / 64;
    long ng = cols / w->group_size;
    size_t rb = (size_t)cols * (size_t)bits / 8;
    rp_dtype sdt = w->scale_dtype;
    const int gpc = g128 ? 8 : 16; /* groups per chunk */
    const uint8_t *wp[4];
    const int8_t *xp[2];
    const float *dp[2];
    for (int i = 0; i < NR; i++)
        wp[i] = (const uint8_t *)w->data + (size_t)(r + i) * rb;
    for (int j = 0; j < NT; j++) {
        xp[j] = a->q + (long)(t0 + j) * cols;
        dp[j] = a->d + (long)(t0 + j) * nblk;
    }
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            acc[i][j] = _mm512_setzero_ps();
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i low4 = _mm512_set1_epi8(15);
    for (long c = 0; c < nblk / 16; c++) {
        /* per (row, token): the 16 blocks' (group scale x activation scale) */
        __m512 sd[4][2];
        __m512 xgv[2], dxv[2];
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++) {
            xgv[j] = g128 ? _mm512_zextps256_ps512(_mm256_loadu_ps(xg[j] + 8 * c))
                          : _mm512_loadu_ps(xg[j] + 16 * c);
            dxv[j] = _mm512_loadu_ps(dp[j] + 16 * c);
        }
#pragma GCC unroll 4
        for (int i = 0; i < NR; i++) {
            size_t g0 = (size_t)(r + i) * (size_t)ng + (size_t)(gpc * c);
            __m512 s = qx_load_sc(sdt, w->scales, (long)g0, gpc);
            __m512 b = qx_load_sc(sdt, w->biases, (long)g0, gpc);
            if (g128)
                s = _mm512_permutexvar_ps(dup, s);
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++) {
                sd[i][j] = _mm512_mul_ps(s, dxv[j]);
                acc[i][j] = _mm512_fmadd_ps(b, xgv[j], acc[i][j]);
            }
        }
        if (bits == 4) {
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) {
                const __m512i idx = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                                     2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                                     2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p,
                                                     2 * p, 2 * p);
                __m512i xlo[2], xhi[2];
#pragma GCC unroll 2
                for (int j = 0; j < NT; j++) {
                    const int8_t *x = xp[j] + 1024 * c + 128 * p;
                    xlo[j] = _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x)),
                        _mm256_loadu_si256((const __m256i *)(x + 64)), 1);
                    xhi[j] = _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x + 32))),
                        _mm256_loadu_si256((const __m256i *)(x + 96)), 1);
                }
#pragma GCC unroll 4
                for (int i = 0; i < NR; i++) {
                    const uint8_t *q = wp[i] + 512 * c + 64 * p;
                    _mm_prefetch((const char *)q + QX_PFD(4), _MM_HINT_T0);
                    __m512i v = _mm512_loadu_si512(q);
                    __m512i lo = _mm512_and_si512(v, low4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
#pragma GCC unroll 2
                    for (int j = 0; j < NT; j++) {
                        __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo[j]);
                        d = _mm512_dpbusd_epi32(d, hi, xhi[j]);
                        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                                    _mm512_permutexvar_ps(idx, sd[i][j]),
                                                    acc[i][j]);
                    }
                }
            }
        } else {
            float sdm[4][2][16] __attribute__((aligned(64)));
            for (int i = 0; i < NR; i++)
                for (int j = 0; j < NT; j++)
                    _mm512_store_ps(sdm[i][j], sd[i][j]);
#pragma GCC unroll 16
            for (int b = 0; b < 16; b++) {
                __m512i xv[2];
#pragma GCC unroll 2
                for (int j = 0; j < NT; j++)
                    xv[j] = _mm512_loadu_si512(xp[j] + 1024 * c + 64 * b);
#pragma GCC unroll 4
                for (int i = 0; i < NR; i++) {
                    const uint8_t *q = wp[i] + 1024 * c + 64 * b;
                    _mm_prefetch((const char *)q + QX_PFD(8), _MM_HINT_T0);
                    __m512i v = _mm512_loadu_si512(q);
#pragma GCC unroll 2
                    for (int j = 0; j < NT; j++)
                        acc[i][j] = _mm512_fmadd_ps(
                            _mm512_cvtepi32_ps(
                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, xv[j])),
                            _mm512_set1_ps(sdm[i][j][b]), acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++)
            y[(long)(t0 + j) * rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Rows outermost, so each weight row is read from memory once per call; tokens in groups of
 * up to 8 (their group sums on the stack), 2 per tile. */
QX_AI void qx_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                     float *y, const int bits, const int g128)
{
    float xgb[8][QX_MAX_GROUPS];
    for (int t0 = 0; t0 < n_tok; t0 += 8) {
        int nt0 = n_tok - t0 >= 8 ? 8 : n_tok - t0;
        pk_act_sums(w, a, t0, nt0, xgb, NULL); /* exact group sums of x */
        for (long r = r0; r < r1; r += 4) {
            int nr = r1 - r >= 4 ? 4 : (int)(r1 - r);
            for (int t = 0; t < nt0; t += 2) {
                int nt = nt0 - t >= 2 ? 2 : 1;
                const float *xg[2] = {xgb[t], xgb[t + nt - 1]};
                if (nr == 4 && nt == 2)
                    qx_dec_tile(w, r, a, t0 + t, y, bits, 4, 2, g128, xg);
                else if (nr == 4)
                    qx_dec_tile(w, r, a, t0 + t, y, bits, 4, 1, g128, xg);
                else
                    for (int i = 0; i < nr; i++)
                        for (int j = 0; j < nt; j++) {
                            const float *xg1[2] = {xgb[t + j], xgb[t + j]};
                            qx_dec_tile(w, r + i, a, t0 + t + j, y, bits, 1, 1, g128, xg1);
                        }
            }
        }
    }
}

void rp_qx_mlx_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                      float *y)
{
    int g128 = w->group_size == 128;
    if (w->dtype == RP_DT_MLX4) {
        if (g128)
            qx_decode(w, r0, r1, a, n_tok, y, 4, 1);
        else
            qx_decode(w, r0, r1, a, n_tok, y, 4, 0);
    } else {
        if (g128)
            qx_decode(w, r0, r1, a, n_tok, y, 8, 1);
        else
            qx_decode(w, r0, r1, a, n_tok, y, 8, 0);
    }
}

/* ---- GGUF Q8_0 / Q4_0 decode (natural 32-runs, one activation scale per run) ------------ *
 * Two 32-blocks per 512-bit step. Q8_0: s8 weights, so |w| (u8) x (x with w's sign), lanes
 * 0..7 = block k, 8..15 = block k + 1. Q4_0: 16 bytes of each block side by side, then their
 * high nibbles: lanes [k 0..15 | k+1 0..15 | k 16..31 | k+1 16..31], the activations gathered
 * in that order; the -8 offset is -8 d_w (exact f32 sum of the run's x). */

/* Q8_0 is measured slower here than the 256-bit kernel (quant_kernels.inc.h), so only Q4_0
 * is dispatched; the Q8_0 path stays tested for later tuning. */
int rp_qx_gguf_decode_fits(const rp_tensor *w, const rp_qact *a)
{
    long cols = (long)w->shape[1];
    return (w->dtype == RP_DT_Q4_0 || w->dtype == RP_DT_Q8_0) && !a->run64 && cols % 512 == 0 &&
           cols / 32 <= QX_MAX_BLOCKS;
}

QX_AI void qx_gg_tile(const rp_tensor *w, long r, const rp_qact *a, int t0, float *y,
                      const int q8, const int NR, const int NT)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nblk = cols / 32;
    const size_t bb = q8 ? 34 : 18;
    size_t rb = (size_t)nblk * bb;
    const uint8_t *wp[4];
    float dw[4][QX_MAX_BLOCKS];
    for (int i = 0; i < NR; i++) {
        wp[i] = (const uint8_t *)w->data + (size_t)(r + i) * rb;
        for (long k = 0; k < nblk; k++)
            dw[i][k] = qx_h2f(wp[i] + bb * (size_t)k);
    }
    const int8_t *xp[2];
    const float *dp[2], *sp[2];
    for (int j = 0; j < NT; j++) {
        xp[j] = a->q + (long)(t0 + j) * cols;
        dp[j] = a->d + (long)(t0 + j) * nblk;
        sp[j] = a->s + (long)(t0 + j) * nblk;
    }
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            acc[i][j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(15);
    for (long c = 0; c < nblk / 16; c++) {
        __m512 sd[4][2];
#pragma GCC unroll 4
        for (int i = 0; i < NR; i++) {
            __m512 d = _mm512_loadu_ps(dw[i] + 16 * c);
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++) {
                sd[i][j] = _mm512_mul_ps(d, _mm512_loadu_ps(dp[j] + 16 * c));
                if (!q8)
                    acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(-8.0f)),
                                                _mm512_loadu_ps(sp[j] + 16 * c), acc[i][j]);
            }
        }
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const int k0 = 2 * p, k1 = 2 * p + 1;
            const __m512i idx = q8 ? _mm512_set_epi32(k1, k1, k1, k1, k1, k1, k1, k1, k0, k0, k0,
                                                      k0, k0, k0, k0, k0)
                                   : _mm512_set_epi32(k1, k1, k1, k1, k0, k0, k0, k0, k1, k1, k1,
                                                      k1, k0, k0, k0, k0);
            long kb = 16 * c + 2 * p; /* first block of the pair */
            __m512i xv[2];
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++) {
                const int8_t *x = xp[j] + 32 * kb;
                if (q8) {
                    xv[j] = _mm512_loadu_si512(x);
                } else {
                    __m256i lo = _mm256_inserti128_si256(
                        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x)),
                        _mm_loadu_si128((const __m128i *)(x + 32)), 1);
                    __m256i hi = _mm256_inserti128_si256(
                        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(x + 16))),
                        _mm_loadu_si128((const __m128i *)(x + 48)), 1);
                    xv[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) {
                const uint8_t *b = wp[i] + bb * (size_t)kb;
                _mm_prefetch((const char *)b + 1024, _MM_HINT_T0);
                __m512i wv;
                __mmask64 neg = 0;
                if (q8) {
                    __m512i v = _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 2))),
                        _mm256_loadu_si256((const __m256i *)(b + 34 + 2)), 1);
                    neg = _mm512_movepi8_mask(v);
                    wv = _mm512_abs_epi8(v);
                } else {
                    __m256i v = _mm256_inserti128_si256(
                        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2))),
                        _mm_loadu_si128((const __m128i *)(b + 18 + 2)), 1);
                    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v),
                                                   _mm256_srli_epi16(v, 4), 1);
                    wv = _mm512_and_si512(z, low4);
                }
#pragma GCC unroll 2
                for (int j = 0; j < NT; j++) {
                    __m512i xs = q8 ? _mm512_mask_sub_epi8(xv[j], neg, _mm512_setzero_si512(), xv[j])
                                    : xv[j];
                    __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xs);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                                _mm512_permutexvar_ps(idx, sd[i][j]), acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++)
            y[(long)(t0 + j) * rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

QX_AI void qx_gg_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                        float *y, const int q8)
{
    for (long r = r0; r < r1; r += 4) {
        int nr = r1 - r >= 4 ? 4 : (int)(r1 - r);
        for (int t = 0; t < n_tok; t += 2) {
            int nt = n_tok - t >= 2 ? 2 : 1;
            if (nr == 4 && nt == 2)
                qx_gg_tile(w, r, a, t, y, q8, 4, 2);
            else if (nr == 4)
                qx_gg_tile(w, r, a, t, y, q8, 4, 1);
            else
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++)
                        qx_gg_tile(w, r + i, a, t + j, y, q8, 1, 1);
        }
    }
}

void rp_qx_gguf_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                       float *y)
{
    if (w->dtype == RP_DT_Q8_0)
        qx_gg_decode(w, r0, r1, a, n_tok, y, 1);
    else
        qx_gg_decode(w, r0, r1, a, n_tok, y, 0);
}

/* ---- activations for the tile kernels ---------------------------------------------------- *
 * rp_quant_act with even_odd 0 (natural order) on 512-bit vectors: the same amax, scale and
 * round-to-nearest-even codes (VCVTPS2DQ under the default rounding mode rounds as the
 * reference's 1.5 x 2^23 trick does for |v| <= 127), so q and d are bit-identical; each
 * run's sum s is the same f32 sum of x in another order (a tree instead of left to right). */
void rp_qx_quant_act(const float *x, int n_tok, long cols, int run64, int8_t *q, float *d,
                     float *s)
{
    long nrun = cols / 32;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (long)t * cols;
        int8_t *qt = q + (long)t * cols;
        float *st = s + (long)t * nrun;
        if (run64) {
            float *dt = d + (long)t * (nrun / 2);
            for (long k = 0; k < nrun / 2; k++) {
                const float *p = xt + 64 * k;
                __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16);
                __m512 v2 = _mm512_loadu_ps(p + 32), v3 = _mm512_loadu_ps(p + 48);
                st[2 * k] = _mm512_reduce_add_ps(_mm512_add_ps(v0, v1));
                st[2 * k + 1] = _mm512_reduce_add_ps(_mm512_add_ps(v2, v3));
                __m512 m = _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)),
                                         _mm512_max_ps(_mm512_abs_ps(v2), _mm512_abs_ps(v3)));
                float amax = _mm512_reduce_max_ps(m);
                __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
                __m128i c0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)));
                __m128i c1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)));
                __m128i c2 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v2, id)));
                __m128i c3 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v3, id)));
                _mm_storeu_si128((__m128i *)(qt + 64 * k), c0);
                _mm_storeu_si128((__m128i *)(qt + 64 * k + 16), c1);
                _mm_storeu_si128((__m128i *)(qt + 64 * k + 32), c2);
                _mm_storeu_si128((__m128i *)(qt + 64 * k + 48), c3);
                dt[k] = amax / 127.0f;
            }
        } else {
            float *dt = d + (long)t * nrun;
            for (long k = 0; k < nrun; k++) {
                const float *p = xt + 32 * k;
                __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16);
                st[k] = _mm512_reduce_add_ps(_mm512_add_ps(v0, v1));
                float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
                __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
                __m128i c0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)));
                __m128i c1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)));
                _mm_storeu_si128((__m128i *)(qt + 32 * k), c0);
                _mm_storeu_si128((__m128i *)(qt + 32 * k + 16), c1);
                dt[k] = amax / 127.0f;
            }
        }
    }
}

/* ---- decode on weights repacked at load (rp_qx_repack; layout in kernels_qx86.h) -------- *
 * Each int32 lane of a VPDPBUSD accumulates one row over 4 consecutive k (the token's 4 int8
 * activations broadcast), so a 64-byte load feeds 16 rows and no lane is ever summed
 * horizontally: a tile's results are vector stores. 8-bit: 16-row tiles, one VPDPBUSD per
 * 64 bytes. 4-bit: 32-row tiles, a byte = row i's code (low nibble) and row 16 + i's (high)
 * at the same k, so one broadcast serves both: VPDPBUSD on the whole byte gives lo + 16 hi,
 * on (byte & 0xF0) 16 hi, and per 64-block the rows split exactly in integers (lo = all - hi,
 * hi = (16 hi) >> 4): one AND and two VPDPBUSD per 64 bytes, no shifts. Per 64-block the
 * integer chains are converted and scaled by one FMA with (16 rows' scales x the block's
 * activation scale); the MLX bias term bias_g x (exact f32 group sum of x) is one more FMA per
 * group, the Q4_0 offset -8 d_w x (exact run sum) one per 32-block, the Q8_0 offset (codes
 * stored + 128) an exact integer -128 x (sum of the run's int8 activations). Tokens go 4, 2 or
 * 1 per pass over a tile (the tile stays in L1/L2). */

/* Software prefetch distance in the tile stream (0: none, the hardware streamer only), one
 * prefetch per PK_PF_EVERY 64-byte chunks, every line of a group (codes: pk_dots; scales and
 * biases: pk_prefetch_scales). A thread's rows are one stream, and the L2 streamer alone keeps
 * only a few lines of one stream in flight (about 0.70-0.75 of the probe's bandwidth with no
 * prefetch). With the codes' lines only, 4 KB ahead was best (0.86-0.95 of the probe, 2, 8 and
 * 16 KB and L2 hints no better); once the scale lines are prefetched too, 1.5 KB is (kbench
 * decode, 2 threads, Intel Xeon 2.6 GHz, distances interleaved: MLX4 0.89-0.90 of the probe
 * against 0.84 at 4 KB and 0.83 before; MLX8 0.99 against 0.91; Q8_0 0.95-0.97 against 0.88-0.90;
 * Q4_0 0.88-0.90 against 0.84; 1 KB, 2 KB and 3 KB between). */
#ifndef PK_PFD
#define PK_PFD 1536
#endif
#ifndef PK_PF_EVERY
#define PK_PF_EVERY 1
#endif

QX_AI __m512i pk_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The software prefetch of a group's scale lines (PK_PFD ahead): pk_dots prefetches its 16
 * chunks of codes, so without this the group's other lines (a 4-bit group of 64: 18 lines, 2
 * of them not codes) are left to the hardware streamer, and since PK_PFD is no multiple of the
 * group's bytes those unprefetched lines land among later groups' codes. */
QX_AI void pk_prefetch_scales(const uint8_t *sp, size_t bytes)
{
    if (!PK_PFD)
        return;
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)sp + o + PK_PFD, _MM_HINT_T0);
}

/* Integer sums of one 64-block of a tile with NT tokens' activations xq[j] (offset to the
 * block), as 16-lane vectors per half-block h (k 0..31, 32..63):
 *   8-bit: s[j][h][0] rows 0..15;
 *   4-bit: s[j][h][0] rows 0..15, s[j][h][1] rows 16..31. */
QX_AI void pk_dots(const uint8_t *wp, const int8_t *const *xq, const int bits, const int NT,
                   __m512i s[4][2][2])
{
    const __m512i high4 = _mm512_set1_epi8((char)0xF0);
    __m512i a[4][2][2]; /* [token][half][all / high] */
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 2; c++)
                a[j][h][c] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) {
        if (PK_PFD && p % PK_PF_EVERY == 0)
            _mm_prefetch((const char *)wp + 64 * p + PK_PFD, _MM_HINT_T0);
        __m512i v = _mm512_load_si512(wp + 64 * p);
        __m512i hv = bits == 4 ? _mm512_and_si512(v, high4) : v;
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) {
            __m512i x = pk_bcast(xq[j] + 4 * p);
            if (bits == 4) {
                a[j][p >> 3][0] = _mm512_dpbusd_epi32(a[j][p >> 3][0], v, x);
                a[j][p >> 3][1] = _mm512_dpbusd_epi32(a[j][p >> 3][1], hv, x);
            } else { /* two chains per half */
                a[j][p >> 3][p & 1] = _mm512_dpbusd_epi32(a[j][p >> 3][p & 1], v, x);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++) {
            if (bits == 4) {
                s[j][h][0] = _mm512_sub_epi32(a[j][h][0], a[j][h][1]);
                s[j][h][1] = _mm512_srai_epi32(a[j][h][1], 4);
            } else {
                s[j][h][0] = _mm512_add_epi32(a[j][h][0], a[j][h][1]);
            }
        }
}

/* One MLX tile x NT tokens (t: the tokens' first row in a; xg: their exact group sums);
 * out[j][0..1]: rows 0..15, 16..31 (8-bit: [0] only). */
QX_AI void pk_mlx_tile(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                       const float (*xg)[QX_MAX_GROUPS], const int bits, const int NT,
                       __m512 out[4][2])
{
    long cols = (long)w->shape[1], ng = pk_n_groups(w), nb = cols / 64;
    const int nh = bits == 4 ? 2 : 1; /* 16-row halves of the tile */
    int bpg = w->group_size / 64;
    size_t gb = pk_group_bytes(w), ssz = (size_t)pk_ssz(w->scale_dtype);
    rp_dtype sdt = w->scale_dtype;
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++)
            acc[j][h] = _mm512_setzero_ps();
    for (long g = 0; g < ng; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + (size_t)bpg * PK_BLOCK;
        pk_prefetch_scales(sp, gb - (size_t)bpg * PK_BLOCK);
        __m512 sc[2], bi[2];
#pragma GCC unroll 2
        for (int h = 0; h < nh; h++) {
            sc[h] = qx_load_sc(sdt, sp + 16 * (size_t)h * ssz, 0, 16);
            bi[h] = qx_load_sc(sdt, sp + (16 * (size_t)nh + 16 * (size_t)h) * ssz, 0, 16);
        }
        for (int b = 0; b < bpg; b++) {
            long kb = g * bpg + b;
            const int8_t *xq[4];
#pragma GCC unroll 4
            for (int j = 0; j < NT; j++)
                xq[j] = a->q + (long)(t + j) * cols + 64 * kb;
            __m512i s[4][2][2];
            pk_dots(gp + (size_t)b * PK_BLOCK, xq, bits, NT, s);
#pragma GCC unroll 4
            for (int j = 0; j < NT; j++) {
                __m512 dx = _mm512_set1_ps(a->d[(long)(t + j) * nb + kb]);
#pragma GCC unroll 2
                for (int h = 0; h < nh; h++) {
                    __m512i sum = _mm512_add_epi32(s[j][0][h], s[j][1][h]);
                    acc[j][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc[h], dx),
                                                acc[j][h]);
                }
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) {
            __m512 xs = _mm512_set1_ps(xg[j][g]);
#pragma GCC unroll 2
            for (int h = 0; h < nh; h++)
                acc[j][h] = _mm512_fmadd_ps(bi[h], xs, acc[j][h]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++)
            out[j][h] = acc[j][h];
}

/* One GGUF tile x NT tokens (natural 32-runs; xs: Q8_0's per-run int8 sums x 128). */
QX_AI void pk_gg_tile(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                      const int32_t (*xs)[QX_MAX_BLOCKS], const int bits, const int NT,
                      __m512 out[4][2])
{
    long cols = (long)w->shape[1], ng = cols / 64, nrun = cols / 32;
    const int nh = bits == 4 ? 2 : 1, tr = 16 * nh;
    size_t gb = PK_BLOCK + 4 * (size_t)tr;
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++)
            acc[j][h] = _mm512_setzero_ps();
    for (long g = 0; g < ng; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + PK_BLOCK;
        pk_prefetch_scales(sp, gb - PK_BLOCK);
        __m512 d[2][2]; /* [32-block][16-row half] */
#pragma GCC unroll 2
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < nh; h++)
                d[b][h] = _mm512_cvtph_ps(
                    _mm256_loadu_si256((const __m256i *)(sp + 2 * ((size_t)b * tr + 16 * (size_t)h))));
        const int8_t *xq[4];
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++)
            xq[j] = a->q + (long)(t + j) * cols + 64 * g;
        __m512i s[4][2][2];
        pk_dots(gp, xq, bits, NT, s);
#pragma GCC unroll 4
        for (int j = 0; j < NT; j++) {
            const float *dx = a->d + (long)(t + j) * nrun + 2 * g;
            const float *sx = a->s + (long)(t + j) * nrun + 2 * g;
#pragma GCC unroll 2
            for (int b = 0; b < 2; b++) {
                __m512 dxb = _mm512_set1_ps(dx[b]);
                /* Q4_0: the -8 offset is -8 x the run's exact sum of x; Q8_0: codes are q + 128,
                 * so 128 x the run's int8 sum comes off, exactly */
                __m512 off = _mm512_set1_ps(-8.0f * sx[b]);
                __m512i corr = _mm512_set1_epi32(bits == 4 ? 0 : xs[j][2 * g + b]);
#pragma GCC unroll 2
                for (int h = 0; h < nh; h++) {
                    __m512 u;
                    if (bits == 4)
                        u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j][b][h]), dxb, off);
                    else
                        u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[j][b][h], corr)), dxb);
                    acc[j][h] = _mm512_fmadd_ps(d[b][h], u, acc[j][h]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++)
            out[j][h] = acc[j][h];
}

/* Tiles of rows [r0, r1) x NT tokens from t; kind: the weight dtype. */
QX_AI void pk_rows(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a,
                   int t, const float (*xg)[QX_MAX_GROUPS], const int32_t (*xs)[QX_MAX_BLOCKS],
                   float *y, const rp_dtype kind, const int NT)
{
    long rows = (long)w->shape[0];
    const int tr = kind == RP_DT_MLX4 || kind == RP_DT_Q4_0 ? 32 : 16;
    size_t tb = pk_tile_bytes(w);
    for (long r = r0; r < r1; r += tr) {
        const uint8_t *tp = pk + (size_t)(r / tr) * tb;
        __m512 out[4][2];
        if (kind == RP_DT_MLX4)
            pk_mlx_tile(w, tp, a, t, xg, 4, NT, out);
        else if (kind == RP_DT_MLX8)
            pk_mlx_tile(w, tp, a, t, xg, 8, NT, out);
        else if (kind == RP_DT_Q4_0)
            pk_gg_tile(w, tp, a, t, xs, 4, NT, out);
        else
            pk_gg_tile(w, tp, a, t, xs, 8, NT, out);
#pragma GCC unroll 2
        for (int h = 0; h < tr / 16; h++) {
            long nv = r1 - r - 16 * h;
            if (nv <= 0)
                break;
            __mmask16 m = nv >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nv) - 1);
#pragma GCC unroll 4
            for (int j = 0; j < NT; j++)
                _mm512_mask_storeu_ps(y + (long)(t + j) * rows + r + 16 * h, m, out[j][h]);
        }
    }
}

QX_AI void pk_decode(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a,
                     int n_tok, float *y, const rp_dtype kind)
{
    float xg[4][QX_MAX_GROUPS];
    int32_t xs[4][QX_MAX_BLOCKS];
    for (int t = 0; t < n_tok;) {
        int nt = n_tok - t >= 4 ? 4 : n_tok - t >= 2 ? 2 : 1;
        pk_act_sums(w, a, t, nt, xg, xs);
        if (nt == 4)
            pk_rows(w, pk, r0, r1, a, t, xg, xs, y, kind, 4);
        else if (nt == 2)
            pk_rows(w, pk, r0, r1, a, t, xg, xs, y, kind, 2);
        else
            pk_rows(w, pk, r0, r1, a, t, xg, xs, y, kind, 1);
        t += nt;
    }
}

void rp_qx_packed_decode(const rp_tensor *w, const void *packed, long r0, long r1,
                         const rp_qact *a, int n_tok, float *y)
{
    const uint8_t *pk = packed;
    switch (w->dtype) {
    case RP_DT_MLX4: pk_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX4); return;
    case RP_DT_MLX8: pk_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX8); return;
    case RP_DT_Q4_0: pk_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_Q4_0); return;
    default: pk_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_Q8_0); return;
    }
}
