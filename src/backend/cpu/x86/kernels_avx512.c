/* backend/cpu/x86/kernels_avx512.c - AVX-512 matmul kernels for f32, f16 and bf16 weights.
 *
 * Compiled with -mavx512*; only called when rp_cpu() reports AVX-512. A tile is up to 4 rows
 * x 4 tokens: every weight vector loaded is used for all tokens of the tile and every x
 * vector for all rows, so decode (1 token) streams 4 weight rows at once and prefill reuses
 * each weight load 4 times. Accumulation is f32 (bf16 is widened exactly by a 16-bit shift).
 */
#include <immintrin.h>

#include "backend/backend_impl.h"
#include "base/cpu.h"

#define RB 4 /* rows per tile */
#define TB 4 /* tokens per tile */

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
    for (; c < cols; c += 16) {
        __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1);
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

void rp_cpu_kernels_avx512(rp_cpu_kernels *k)
{
    if (rp_cpu()->has_avx512_vnni) /* else the AVX2 int8 kernels stay in the table */
        avx512_fill_qtable(k);
    k->read = read_bytes;
    k->isa = "avx512";
    k->matmul[RP_DT_F32] = matmul_f32;
    k->matmul[RP_DT_F16] = matmul_f16;
    k->matmul[RP_DT_BF16] = matmul_bf16;
}
