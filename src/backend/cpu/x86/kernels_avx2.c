/* backend/cpu/x86/kernels_avx2.c - AVX2+FMA+F16C matmul kernels for f32, f16, bf16 and MXFP4
 * weights.
 *
 * f32 and f16: register tiles of 3 rows x 4 tokens (decode: 4 rows x 1), 8 lanes wide (each row's weights
 * converted once per 8 columns, each token's activations loaded once for the 3 rows); the column
 * tail (cols % 8) is finished in scalar code. Each (row, token) sum is the same sequence of FMAs
 * whatever the tile, so the tiling changes no result.
 *
 * bf16 goes 16 columns a step on activations in even/odd order (rp_x_even_odd16): one 32-byte
 * load holds 16 weights, and a bf16 is the high half of an f32, so a shift left by 16 gives the
 * even columns' f32 and a mask the odd ones' (2 ops for 16 weights, where widening 8 at a time
 * takes 2 ops for 8). Each lane sums its even column, then its odd one, block after block; the
 * decode tile (8 rows x 1) and the prefill tile (3 rows x 4: the even half of a block for every
 * token, then the odd half) keep that order, so again the tiling changes no result. On AMD
 * Zen 3 a bf16 decode stream (2 threads, 1 GB, ratio to the read probe, median of 10) ran at
 * 0.88 with 8 columns a step and 0.99 with this, cache-resident 40 and 60 GB/s a thread.
 */
#include <immintrin.h>
#include <math.h>

#include "backend/backend_impl.h"
#include "base/half.h"

/* 3 rows x 4 tokens: 12 accumulators, the 3 rows' weights and one token's activations fill
 * the 16 registers (4 x 4 needed 21 and spilled: bf16 prefill on kbench, 2 threads, 128
 * tokens, 105-108 GFLOP/s at 4 x 4, 129-137 at 3 x 4 in three interleaved runs) */
#define RB 3
#define TB 4
#define RB_DECODE 4 /* one token: 4 rows' streams, as before (4 accumulators, no pressure) */

/* f32 or f16 weights (bf16 has its own tiles below) */
static inline __attribute__((always_inline)) __m256 load_w(const void *row, long c, rp_dtype dt)
{
    if (dt == RP_DT_F32)
        return _mm256_loadu_ps((const float *)row + c);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + c)));
}

static inline float scalar_w(const void *row, long c, rp_dtype dt)
{
    if (dt == RP_DT_F32)
        return rp_load_f32(row, (size_t)c);
    return rp_f16_to_f32(rp_load_u16(row, (size_t)c));
}

#define A2K static inline __attribute__((always_inline))

static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void tile(const rp_tensor *w, long r, int nr,
                                                       const float *x, int t0, int nt, float *y,
                                                       rp_dtype dt)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    size_t row_bytes = rp_dtype_row_bytes(dt, cols);
    const char *base = (const char *)w->data + (size_t)r * row_bytes;
    __m256 acc[RB_DECODE][TB];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TB; j++)
            acc[i][j] = _mm256_setzero_ps();
    long c = 0;
    for (; c + 8 <= cols; c += 8) {
        __m256 wv[RB_DECODE];
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++)
            wv[i] = load_w(base + (size_t)i * row_bytes, c, dt);
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            __m256 xv = _mm256_loadu_ps(x + (long)(t0 + j) * cols + c);
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++)
                acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) {
            float s = hsum(acc[i][j]);
            for (long cc = c; cc < cols; cc++)
                s += scalar_w(base + (size_t)i * row_bytes, cc, dt) * x[(long)(t0 + j) * cols + cc];
            y[(long)(t0 + j) * rows + r + i] = s;
        }
}

static inline __attribute__((always_inline)) void tile_rows(const rp_tensor *w, long r,
                                                            const int nr, const float *x, int t0,
                                                            int nt, float *y, rp_dtype dt)
{
    switch (nt) {
    case 4: tile(w, r, nr, x, t0, 4, y, dt); return;
    case 3: tile(w, r, nr, x, t0, 3, y, dt); return;
    case 2: tile(w, r, nr, x, t0, 2, y, dt); return;
    default: tile(w, r, nr, x, t0, 1, y, dt); return;
    }
}

static inline __attribute__((always_inline)) void tile_any(const rp_tensor *w, long r, int nr,
                                                           const float *x, int t0, int nt,
                                                           float *y, rp_dtype dt)
{
    if (nr == 4)
        tile_rows(w, r, 4, x, t0, nt, y, dt);
    else if (nr == 3)
        tile_rows(w, r, 3, x, t0, nt, y, dt);
    else if (nr == 2)
        tile_rows(w, r, 2, x, t0, nt, y, dt);
    else
        tile_rows(w, r, 1, x, t0, nt, y, dt);
}

static inline __attribute__((always_inline)) void matmul(const rp_tensor *w, long r0, long r1,
                                                         const float *x, int n_tok, float *y,
                                                         rp_dtype dt)
{
    const int rb = n_tok == 1 ? RB_DECODE : RB;
    for (long r = r0; r < r1; r += rb) {
        int nr = r1 - r >= rb ? rb : (int)(r1 - r);
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
/* ---- bf16 on even/odd activations ---------------------------------------------------- */

#define BF_RB_DECODE 8 /* one token: 8 rows' sums, the two activation halves, a weight vector */

A2K __m256 bf_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
A2K __m256 bf_odd(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The columns past the last whole 16-block (natural order in x) and the store. */
A2K void bf_finish(const char *row, long c0, long cols, const float *xt, __m256 acc, float *dst)
{
    float s = hsum(acc);
    for (long c = c0; c < cols; c++)
        s += rp_bf16_to_f32(rp_load_u16(row, (size_t)c)) * xt[c];
    *dst = s;
}

/* nr (<= 8) rows from r, one token */
A2K void bf_decode_tile(const rp_tensor *w, long r, const int nr, const float *x, float *y)
{
    long cols = (long)w->shape[1], c16 = cols / 16 * 16;
    const char *base = (const char *)w->data + (size_t)r * (size_t)cols * 2;
    __m256 acc[BF_RB_DECODE];
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++)
        acc[i] = _mm256_setzero_ps();
    for (long c = 0; c < c16; c += 16) {
        __m256 xe = _mm256_loadu_ps(x + c), xo = _mm256_loadu_ps(x + c + 8);
#pragma GCC unroll 8
        for (int i = 0; i < nr; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(base + 2 * (i * cols + c)));
            acc[i] = _mm256_fmadd_ps(bf_even(v), xe, acc[i]);
            acc[i] = _mm256_fmadd_ps(bf_odd(v), xo, acc[i]);
        }
    }
    for (int i = 0; i < nr; i++)
        bf_finish(base + 2 * (size_t)(i * cols), c16, cols, x, acc[i], y + r + i);
}

/* nr (<= 3) rows from r x nt (<= 4) tokens from t0: per 16-block the rows' even halves against
 * every token's, then the odd halves (12 sums, 3 weight vectors, an activation vector) */
A2K void bf_tile(const rp_tensor *w, long r, const int nr, const float *x, int t0, const int nt,
                 float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], c16 = cols / 16 * 16;
    const char *base = (const char *)w->data + (size_t)r * (size_t)cols * 2;
    __m256 acc[RB][TB];
#pragma GCC unroll 3
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (long c = 0; c < c16; c += 16) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 wv[RB];
#pragma GCC unroll 3
            for (int i = 0; i < nr; i++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(base + 2 * (i * cols + c)));
                wv[i] = h ? bf_odd(v) : bf_even(v);
            }
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++) {
                __m256 xv = _mm256_loadu_ps(x + (long)(t0 + j) * cols + c + 8 * h);
#pragma GCC unroll 3
                for (int i = 0; i < nr; i++)
                    acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++)
            bf_finish(base + 2 * (size_t)(i * cols), c16, cols, x + (long)(t0 + j) * cols, acc[i][j],
                      y + (long)(t0 + j) * rows + r + i);
}

A2K void bf_tile_rows(const rp_tensor *w, long r, const int nr, const float *x, int t0, int nt,
                      float *y)
{
    switch (nt) {
    case 4: bf_tile(w, r, nr, x, t0, 4, y); return;
    case 3: bf_tile(w, r, nr, x, t0, 3, y); return;
    case 2: bf_tile(w, r, nr, x, t0, 2, y); return;
    default: bf_tile(w, r, nr, x, t0, 1, y); return;
    }
}

/* x: n tokens in even/odd order (rp_x_even_odd16) */
static void matmul_bf16(const rp_tensor *w, long r0, long r1, const float *x, int n, float *y)
{
    if (n == 1) {
        long r = r0;
        for (; r + BF_RB_DECODE <= r1; r += BF_RB_DECODE)
            bf_decode_tile(w, r, BF_RB_DECODE, x, y);
        for (; r < r1; r++)
            bf_decode_tile(w, r, 1, x, y);
        return;
    }
    for (long r = r0; r < r1; r += RB) {
        int nr = r1 - r >= RB ? RB : (int)(r1 - r);
        for (int t = 0; t < n; t += TB) {
            int nt = n - t >= TB ? TB : n - t;
            if (nr == 3)
                bf_tile_rows(w, r, 3, x, t, nt, y);
            else if (nr == 2)
                bf_tile_rows(w, r, 2, x, t, nt, y);
            else
                bf_tile_rows(w, r, 1, x, t, nt, y);
        }
    }
}

/* MXFP4 (see backend.h): the 8 FP4 magnitudes are looked up by vpermps on (nibble & 7), the
 * sign bit (nibble & 8) moved to bit 31 and xor-ed in; lo/hi nibbles are re-interleaved to
 * element order with unpack + lane permutes. 32 elements = 4 vectors per block. */
static inline __attribute__((always_inline)) __m256 fp4_lookup(__m256i idx, __m256 mag)
{
    __m256 v = _mm256_permutevar8x32_ps(mag, _mm256_and_si256(idx, _mm256_set1_epi32(7)));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(idx, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(v, _mm256_castsi256_ps(sign));
}

static void matmul_mxfp4(const rp_tensor *w, long r0, long r1, const float *x, int n_tok,
                         float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nb = cols / 32;
    size_t rb = rp_dtype_row_bytes(RP_DT_MXFP4, cols);
    const __m256 mag = _mm256_loadu_ps(rp_fp4_values);
    const __m256i nib = _mm256_set1_epi32(15);
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        for (int t0 = 0; t0 < n_tok; t0 += TB) {
            int nt = n_tok - t0 < TB ? n_tok - t0 : TB;
            __m256 acc[TB];
            for (int j = 0; j < TB; j++)
                acc[j] = _mm256_setzero_ps();
            for (long b = 0; b < nb; b++) {
                const uint8_t *blk = row + b * 17;
                __m256 sc = _mm256_set1_ps(ldexpf(1.0f, (int)blk[0] - 127));
                __m256 wv[4];
                for (int h = 0; h < 2; h++) { /* bytes 8h .. 8h + 7: elements 16h .. 16h + 15 */
                    __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 1 + 8 * h));
                    __m256i v = _mm256_cvtepu8_epi32(q);
                    __m256 lo = fp4_lookup(_mm256_and_si256(v, nib), mag);
                    __m256 hi = fp4_lookup(_mm256_srli_epi32(v, 4), mag);
                    __m256 a = _mm256_unpacklo_ps(lo, hi), c = _mm256_unpackhi_ps(lo, hi);
                    wv[2 * h] = _mm256_mul_ps(_mm256_permute2f128_ps(a, c, 0x20), sc);
                    wv[2 * h + 1] = _mm256_mul_ps(_mm256_permute2f128_ps(a, c, 0x31), sc);
                }
                for (int j = 0; j < nt; j++) {
                    const float *xt = x + (long)(t0 + j) * cols + b * 32;
                    for (int q = 0; q < 4; q++)
                        acc[j] = _mm256_fmadd_ps(wv[q], _mm256_loadu_ps(xt + 8 * q), acc[j]);
                }
            }
            for (int j = 0; j < nt; j++) {
                __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[j]),
                                      _mm256_extractf128_ps(acc[j], 1));
                s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                s = _mm_add_ss(s, _mm_movehdup_ps(s));
                y[(long)(t0 + j) * rows + r] = _mm_cvtss_f32(s);
            }
        }
    }
}

/* int8 kernels for the quantized types: AVX2 dot = maddubs (u8 x s8 -> s16 pairs) + madd. */
static inline __attribute__((always_inline)) __m256i avx2_dot(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

static inline __attribute__((always_inline)) __m256i avx2_hibits(uint32_t qh)
{
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                    _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                                      0x0101010101010101ll, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

#define QK_DOT(u, s) avx2_dot(u, s)
#define QK_HIBITS(qh) avx2_hibits(qh)
#define QK_PREFIX avx2_
#include "backend/cpu/x86/quant_kernels.inc.h"

/* The bandwidth probe's read (rp_backend_read_bandwidth) on 32-byte loads, as the AVX2
 * kernels read: the scalar one's 16-byte loads measured below what those kernels reach. */
static uint64_t read_bytes(const void *p, size_t n)
{
    const __m256i *q = p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= n / 32; i += 4) {
        a = _mm256_xor_si256(a, _mm256_load_si256(q + i));
        b = _mm256_xor_si256(b, _mm256_load_si256(q + i + 1));
        c = _mm256_xor_si256(c, _mm256_load_si256(q + i + 2));
        d = _mm256_xor_si256(d, _mm256_load_si256(q + i + 3));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    __m128i h = _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) ^ (uint64_t)_mm_extract_epi64(h, 1);
}

void rp_cpu_kernels_avx2(rp_cpu_kernels *k)
{
    avx2_fill_qtable(k);
    k->read = read_bytes;
    k->isa = "avx2";
    k->matmul[RP_DT_F32] = matmul_f32;
    k->matmul[RP_DT_F16] = matmul_f16;
    k->matmul[RP_DT_BF16] = matmul_bf16;
    k->x_even_odd16[RP_DT_BF16] = 1;
    k->matmul[RP_DT_MXFP4] = matmul_mxfp4;
}
