/* backend/cpu/x86/kernels_avx512.c - AVX-512 matmul kernels for f32, f16, bf16 and MXFP4
 * weights.
 *
 * Compiled with -mavx512*; only called when rp_cpu() reports AVX-512. A tile is up to 4 rows
 * x 4 tokens: every weight vector loaded is used for all tokens of the tile and every x
 * vector for all rows, so decode (1 token) streams 4 weight rows at once and prefill reuses
 * each weight load 4 times. 16-bit rows of a full tile go a 64-byte line a row a step with
 * unmasked loads (the same sums in the same order as 16-element steps: kbench bf16 decode
 * 0.94 -> 0.96 of the probe, the 1B model 0.875 -> 0.919 in interleaved runs).
 * Accumulation is f32 (bf16 is widened exactly by a 16-bit shift).
 */
#include <immintrin.h>
#include <math.h>

#include "backend/backend_impl.h"
#include "backend/cpu/x86/qx86_inline.h"
#include "base/cpu.h"
#include "base/half.h"

#define RB 4 /* rows per tile */
#define TB 4 /* tokens per tile */
#ifndef PF_ROWS
#define PF_ROWS 4 /* software prefetch distance in rows (one tile ahead) */
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif

static inline __attribute__((always_inline)) __m512 load_w(const void *row, long c, rp_dtype dt,
                                                           __mmask16 m)
{
    if (dt == RP_DT_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + c);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c);
    if (dt == RP_DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void tile(const rp_tensor *w, long r, int nr,
                                                       const float *x, int t0, int nt, float *y,
                                                       rp_dtype dt)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    size_t row_bytes = rp_dtype_row_bytes(dt, cols);
    const char *base = (const char *)w->data + (size_t)r * row_bytes;
    __m512 acc[RB][TB];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TB; j++)
            acc[i][j] = _mm512_setzero_ps();
    long c = 0;
    size_t es = dt == RP_DT_F32 ? 4 : 2;
    if (dt != RP_DT_F32 && nr == RB) {
        /* 16-bit rows, a full tile: a 64-byte line of each row a step (two vectors), loads
         * unmasked, the next tile's lines prefetched once a step; the tail below */
        for (; c + 32 <= cols; c += 32) {
            if (PF_ROWS > 0)
#pragma GCC unroll 4
                for (int i = 0; i < RB; i++)
                    _mm_prefetch(base + (size_t)(i + PF_ROWS) * row_bytes + (size_t)c * es,
                                 PF_HINT);
            __m512 x0[TB], x1[TB];
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++) {
                x0[j] = _mm512_loadu_ps(x + (long)(t0 + j) * cols + c);
                x1[j] = _mm512_loadu_ps(x + (long)(t0 + j) * cols + c + 16);
            }
#pragma GCC unroll 4
            for (int i = 0; i < RB; i++) {
                __m512 w0 = load_w(base + (size_t)i * row_bytes, c, dt, (__mmask16)0xffff);
                __m512 w1 = load_w(base + (size_t)i * row_bytes, c + 16, dt, (__mmask16)0xffff);
#pragma GCC unroll 4
                for (int j = 0; j < nt; j++)
                    acc[i][j] = _mm512_fmadd_ps(w1, x1[j], _mm512_fmadd_ps(w0, x0[j], acc[i][j]));
            }
        }
    }
    for (; c < cols; c += 16) {
        __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1);
        /* the next tile's rows, same columns, one cache line per row per line consumed:
         * a 2048-column bf16 row is one 4 KB page, where the hardware prefetcher starts
         * over, so without this each tile begins with cold misses */
        if (PF_ROWS > 0 && nr == RB && (c * es) % 64 == 0)
#pragma GCC unroll 4
            for (int i = 0; i < RB; i++)
                _mm_prefetch(base + (size_t)(i + PF_ROWS) * row_bytes + (size_t)c * es,
                             PF_HINT);
        __m512 xv[TB];
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++)
            xv[j] = _mm512_maskz_loadu_ps(m, x + (long)(t0 + j) * cols + c);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512 wv = load_w(base + (size_t)i * row_bytes, c, dt, m);
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++)
                acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++)
            y[(long)(t0 + j) * rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* Constant nr/nt per call site, so each variant is fully unrolled. */
static inline __attribute__((always_inline)) void tile_any(const rp_tensor *w, long r, int nr,
                                                           const float *x, int t0, int nt,
                                                           float *y, rp_dtype dt)
{
    if (nr == 4) {
        switch (nt) {
        case 4: tile(w, r, 4, x, t0, 4, y, dt); return;
        case 3: tile(w, r, 4, x, t0, 3, y, dt); return;
        case 2: tile(w, r, 4, x, t0, 2, y, dt); return;
        default: tile(w, r, 4, x, t0, 1, y, dt); return;
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++)
            tile(w, r + i, 1, x, t0 + j, 1, y, dt);
}

static inline __attribute__((always_inline)) void matmul(const rp_tensor *w, long r0, long r1,
                                                         const float *x, int n_tok, float *y,
                                                         rp_dtype dt)
{
    for (long r = r0; r < r1; r += RB) {
        int nr = r1 - r >= RB ? RB : (int)(r1 - r);
        for (int t = 0; t < n_tok; t += TB)
            tile_any(w, r, nr, x, t, n_tok - t >= TB ? TB : n_tok - t, y, dt);
    }
}

static void matmul_f32(const rp_tensor *w, long r0, long r1, const float *x, int n, float *y)
{
    matmul(w, r0, r1, x, n, y, RP_DT_F32);
}
static void matmul_f16(const rp_tensor *w, long r0, long r1, const float *x, int n, float *y)
{
    matmul(w, r0, r1, x, n, y, RP_DT_F16);
}
static void matmul_bf16(const rp_tensor *w, long r0, long r1, const float *x, int n, float *y)
{
    matmul(w, r0, r1, x, n, y, RP_DT_BF16);
}

/* MXFP4 (see backend.h): per 32-element block, the 16 nibble bytes widen to two vectors of
 * FP4 indices looked up in a 16-entry table by vpermps, re-interleaved to element order, scaled
 * by the block's 2^(s - 127) and multiplied with up to TB tokens' x. */
static void matmul_mxfp4(const rp_tensor *w, long r0, long r1, const float *x, int n_tok,
                         float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nb = cols / 32;
    size_t rb = rp_dtype_row_bytes(RP_DT_MXFP4, cols);
    const __m512 lut = _mm512_loadu_ps(rp_fp4_values);
    const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi_idx = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                            24, 8);
    const __m512i nib = _mm512_set1_epi32(15);
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        for (int t0 = 0; t0 < n_tok; t0 += TB) {
            int nt = n_tok - t0 < TB ? n_tok - t0 : TB;
            __m512 acc[TB];
            for (int j = 0; j < TB; j++)
                acc[j] = _mm512_setzero_ps();
            for (long b = 0; b < nb; b++) {
                const uint8_t *blk = row + b * 17;
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 1)));
                __m512 wl = _mm512_permutexvar_ps(_mm512_and_si512(v, nib), lut);
                __m512 wh = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
                __m512 sc = _mm512_set1_ps(ldexpf(1.0f, (int)blk[0] - 127));
                __m512 w0 = _mm512_mul_ps(_mm512_permutex2var_ps(wl, lo_idx, wh), sc);
                __m512 w1 = _mm512_mul_ps(_mm512_permutex2var_ps(wl, hi_idx, wh), sc);
                for (int j = 0; j < nt; j++) {
                    const float *xt = x + (long)(t0 + j) * cols + b * 32;
                    acc[j] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt), acc[j]);
                    acc[j] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt + 16), acc[j]);
                }
            }
            for (int j = 0; j < nt; j++)
                y[(long)(t0 + j) * rows + r] = _mm512_reduce_add_ps(acc[j]);
        }
    }
}

static uint64_t read_bytes(const void *p, size_t n)
{
    const __m512i *q = p;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= n / 64; i += 4) {
        a = _mm512_xor_si512(a, _mm512_load_si512(q + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(q + i + 1));
        c = _mm512_xor_si512(c, _mm512_load_si512(q + i + 2));
        d = _mm512_xor_si512(d, _mm512_load_si512(q + i + 3));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    return (uint64_t)_mm512_reduce_add_epi64(a);
}

/* int8 kernels for the quantized types: AVX-512 VNNI dpbusd on 256-bit vectors. */
#define QK_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QK_HIBITS(qh) _mm256_maskz_mov_epi8((__mmask32)(qh), _mm256_set1_epi8(0x10))
#define QK_PREFIX avx512_
#include "backend/cpu/x86/quant_kernels.inc.h"

/* MLX affine kernels on 512-bit vectors. A step is 64 elements = two activation runs:
 * 4-bit: 32 packed bytes -> low nibbles (run 2j: the block's even elements) | high nibbles
 * (run 2j + 1: the odd ones), matching rp_quant_act's even_odd order; 8-bit: 64 bytes fed to
 * dpbusd as u8 directly (VNNI does not saturate, so no - 128 shift). Each lane's f32 scale is
 * (weight group scale) x (activation run scale): lanes 0..7 belong to run 2j, 8..15 to run
 * 2j + 1. The rows' scales are widened to f32 once per tile, and the bias term
 * sum_g bias_g x (sum of x over group g) is a separate f32 dot per row and token. */
#define MLX_MAX_GROUPS 512 /* cols <= 16384 with group size 32 */
#define MLX_PREFETCH 1024


/* sum_g a[g] * b[g] */
static inline __attribute__((always_inline)) float dot_f32(const float *a, const float *b,
                                                           long n)
{
    __m512 acc = _mm512_setzero_ps();
    long g = 0;
    for (; g + 16 <= n; g += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + g), _mm512_loadu_ps(b + g), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; g < n; g++)
        s += a[g] * b[g];
    return s;
}

static inline __attribute__((always_inline)) void mlx_tile(const rp_tensor *w, long r,
                                                           const rp_qact *a, int t0, float *y,
                                                           const int bits, const int nr,
                                                           const int nt, const int r64)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nrun = cols / 32;
    long nstep = cols / 64, gs = w->group_size, ng = cols / gs;
    size_t rb = (size_t)cols * (size_t)bits / 8, sb = w->scale_dtype == RP_DT_F32 ? 4 : 2;
    float sc[4][MLX_MAX_GROUPS], bias[4][4], xg[4][MLX_MAX_GROUPS];
    const uint8_t *wp[4];
    for (int i = 0; i < nr; i++) {
        wp[i] = (const uint8_t *)w->data + (size_t)(r + i) * rb;
        qx_widen(w->scale_dtype, (const char *)w->scales + (size_t)(r + i) * (size_t)ng * sb, ng,
              sc[i]);
    }
    const float *xgp[4];
    for (int j = 0; j < nt; j++) { /* exact sums of x per group */
        const float *s = a->s + (long)(t0 + j) * nrun;
        if (gs == 32) {
            xgp[j] = s;
            continue;
        }
        long per = gs / 32;
        for (long g = 0; g < ng; g++) {
            float v = 0.0f;
            for (long k = 0; k < per; k++)
                v += s[g * per + k];
            xg[j][g] = v;
        }
        xgp[j] = xg[j];
    }
    for (int i = 0; i < nr; i++) {
        float b[MLX_MAX_GROUPS];
        qx_widen(w->scale_dtype, (const char *)w->biases + (size_t)(r + i) * (size_t)ng * sb, ng,
                 b);
        for (int j = 0; j < nt; j++)
            bias[i][j] = dot_f32(b, xgp[j], ng);
    }
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[i][j] = _mm512_setzero_ps();
    if (r64) { /* run64 activations, group >= 64: one scalar scale per (row, token, step) */
        float sdx[4][4][MLX_MAX_GROUPS / 2];
        const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nt; j++) {
                const float *d64 = a->d + (long)(t0 + j) * (nrun / 2);
                long st = 0;
                for (; st + 16 <= nstep; st += 16) {
                    __m512 sv = gs == 64 ? _mm512_loadu_ps(sc[i] + st)
                                         : _mm512_permutexvar_ps(
                                               dup, _mm512_castps256_ps512(
                                                        _mm256_loadu_ps(sc[i] + st / 2)));
                    _mm512_storeu_ps(sdx[i][j] + st, _mm512_mul_ps(sv, _mm512_loadu_ps(d64 + st)));
                }
                for (; st < nstep; st++)
                    sdx[i][j][st] = sc[i][gs == 64 ? st : st >> 1] * d64[st];
            }
        const __m512i lo4 = _mm512_set1_epi8(15);
        const __m512i sh4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        for (long st = 0; st < nstep; st++) {
            __m512i xv[4];
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++)
                xv[j] = _mm512_loadu_si512(a->q + (long)(t0 + j) * cols + 64 * st);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                __m512i wz;
                if (bits == 8 || (st & 1) == 0)
                    _mm_prefetch((const char *)wp[i] + (size_t)st * (size_t)bits * 8 +
                                     MLX_PREFETCH,
                                 _MM_HINT_T0);
                if (bits == 4)
                    wz = _mm512_and_si512(
                        _mm512_srlv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                                              (const __m256i *)(wp[i] + 32 * st))),
                                          sh4),
                        lo4);
                else
                    wz = _mm512_loadu_si512(wp[i] + 64 * st);
#pragma GCC unroll 4
                for (int j = 0; j < nt; j++)
                    acc[i][j] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wz, xv[j])),
                        _mm512_set1_ps(sdx[i][j][st]), acc[i][j]);
            }
        }
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nt; j++)
                y[(long)(t0 + j) * rows + r + i] = _mm512_reduce_add_ps(acc[i][j]) + bias[i][j];
        return;
    }
    const __m512i half_idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    /* group size 32: which of the step's two groups each lane's elements are in */
    const __m512i g32_idx = bits == 4 ? _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0,
                                                         0, 0, 0)
                                      : half_idx;
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i shift4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const int gshift = gs == 128 ? 1 : 0; /* step -> group for group sizes 64 and 128 */
    for (long st = 0; st < nstep; st++) {
        __m512i xv[4];
        __m512 dv[4];
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            xv[j] = _mm512_loadu_si512(a->q + (long)(t0 + j) * cols + 64 * st);
            __m128 pair = _mm_castpd_ps(_mm_load_sd((const double *)(a->d + (long)(t0 + j) * nrun + 2 * st)));
            dv[j] = _mm512_permutexvar_ps(half_idx, _mm512_castps128_ps512(pair));
        }
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            __m512i wz;
            /* a line per row every 64 bytes, MLX_PREFETCH bytes ahead of use */
            if (bits == 8 || (st & 1) == 0)
                _mm_prefetch((const char *)wp[i] + (size_t)st * (size_t)bits * 8 + MLX_PREFETCH,
                             _MM_HINT_T0);
            if (bits == 4) { /* the 32 bytes in both halves, the upper half shifted by 4 */
                __m512i v = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(wp[i] + 32 * st)));
                wz = _mm512_and_si512(_mm512_srlv_epi16(v, shift4), low4);
            } else {
                wz = _mm512_loadu_si512(wp[i] + 64 * st);
            }
            __m512 sv;
            if (gs >= 64) {
                sv = _mm512_set1_ps(sc[i][st >> gshift]);
            } else {
                __m128 pair = _mm_castpd_ps(_mm_load_sd((const double *)&sc[i][2 * st]));
                sv = _mm512_permutexvar_ps(g32_idx, _mm512_castps128_ps512(pair));
            }
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++) {
                __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wz, xv[j]));
                acc[i][j] = _mm512_fmadd_ps(p, _mm512_mul_ps(sv, dv[j]), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++)
            y[(long)(t0 + j) * rows + r + i] = _mm512_reduce_add_ps(acc[i][j]) + bias[i][j];
}

static inline __attribute__((always_inline)) void mlx_matmul_r(const rp_tensor *w, long r0,
                                                               long r1, const rp_qact *a,
                                                               int n_tok, float *y,
                                                               const int bits, const int r64)
{
    for (long r = r0; r < r1; r += 4) {
        int nr = r1 - r >= 4 ? 4 : (int)(r1 - r);
        for (int t = 0; t < n_tok; t += 4) {
            int nt = n_tok - t >= 4 ? 4 : n_tok - t;
            if (nr == 4) {
                switch (nt) {
                case 4: mlx_tile(w, r, a, t, y, bits, 4, 4, r64); break;
                case 3: mlx_tile(w, r, a, t, y, bits, 4, 3, r64); break;
                case 2: mlx_tile(w, r, a, t, y, bits, 4, 2, r64); break;
                default: mlx_tile(w, r, a, t, y, bits, 4, 1, r64); break;
                }
            } else {
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++)
                        mlx_tile(w, r + i, a, t + j, y, bits, 1, 1, r64);
            }
        }
    }
}

static inline __attribute__((always_inline)) void mlx_matmul(const rp_tensor *w, long r0,
                                                             long r1, const rp_qact *a,
                                                             int n_tok, float *y, const int bits)
{
    if (a->run64)
        mlx_matmul_r(w, r0, r1, a, n_tok, y, bits, 1);
    else
        mlx_matmul_r(w, r0, r1, a, n_tok, y, bits, 0);
}

static void matmul_mlx4(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n, float *y)
{
    if (w->shape[1] / w->group_size > MLX_MAX_GROUPS)
        avx512_q_mlx4(w, r0, r1, a, n, y);
    else
        mlx_matmul(w, r0, r1, a, n, y, 4);
}

static void matmul_mlx8(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n, float *y)
{
    if (w->shape[1] % 64 || w->shape[1] / w->group_size > MLX_MAX_GROUPS)
        avx512_q_mlx8(w, r0, r1, a, n, y);
    else
        mlx_matmul(w, r0, r1, a, n, y, 8);
}

void rp_cpu_kernels_avx512(rp_cpu_kernels *k)
{
    if (rp_cpu()->has_avx512_vnni) { /* else the AVX2 int8 kernels stay in the table */
        avx512_fill_qtable(k);
        k->qmatmul[RP_DT_MLX4] = matmul_mlx4;
        k->qmatmul[RP_DT_MLX8] = matmul_mlx8;
        k->act_run64[RP_DT_MLX4] = k->act_run64[RP_DT_MLX8] = 1;
    }
    k->read = read_bytes;
    k->isa = "avx512";
    k->matmul[RP_DT_F32] = matmul_f32;
    k->matmul[RP_DT_F16] = matmul_f16;
    k->matmul[RP_DT_BF16] = matmul_bf16;
    k->matmul[RP_DT_MXFP4] = matmul_mxfp4;
}
