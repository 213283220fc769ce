/* backend/cpu/x86/kernels_qx86_prefill.c - prefill of every quantized type (and bf16) on
 * AMX-BF16 tiles (rp_qx_prefill; contract in kernels_qx86.h).
 *
 * Weight rows in blocks of 32 are the A tiles: bf16 weights are read in place (TILELOADD with
 * the row pitch as stride; a call's first block is copied); other types are dequantized (w in f32
 * exactly as the reference, then rounded to bf16) into the calling thread's buffer. The activations
 * are rounded to bf16 once per call (rp_qx_pack_bf16: VNNI pairs for the B tiles, 16 x 16
 * transposes). C = 2 row tiles x 2 token tiles of f32 accumulated by TDPBF16PS over a 2048-column
 * chunk, then added into y (16 x 16 transposes). Error: the bf16 rounding of w and x (relative 2^-9
 * each per product), f32 accumulation.
 *
 * Threading: pure functions of their arguments; the caller gives each thread its own rowbuf.
 * Compiled with AVX-512 + AMX flags; only called when rp_cpu() reports AMX + BF16 and the tile
 * state was granted (rp_amx_enable). Errors: none (shapes are checked by rp_qx_prefill_fits).
 */
#include "backend/cpu/x86/kernels_qx86.h"
#include "backend/cpu/x86/qx86_inline.h"

#include <immintrin.h>
#include <string.h>

#include "backend/quant.h"
#include "base/half.h"

#define QX_KC                                                                                      \
    64               /* k-steps per column chunk (2048 columns): the B tiles of one chunk          \
                        for 128 tokens (512 KB) stay in L2 while the row blocks go by */
#define QX_MAX_TB 16 /* token blocks per group (256 tokens): a C spill of 32 KB */


/* ---- prefill: dequantize to bf16, AMX-BF16 tiles --------------------------------------- */

int rp_qx_prefill_fits(const rp_tensor *w, int n_tok)
{
    long cols = (long)w->shape[1];
    int type_ok =
        (rp_dtype_is_quant(w->dtype) && w->dtype != RP_DT_MXFP4) || w->dtype == RP_DT_BF16;
    return type_ok && n_tok >= RP_QX_MIN_TOKENS && cols % 32 == 0 &&
           cols % rp_dtype_block(w->dtype) == 0 && cols <= 65536 &&
           (w->dtype != RP_DT_MLX4 && w->dtype != RP_DT_MLX8 ? 1 : cols % w->group_size == 0);
}

size_t rp_qx_pack_bytes(int n_tok, long cols)
{
    return (size_t)((n_tok + 15) / 16) * (size_t)cols * 16 * 2;
}

/* The weight block: 32 rows of one 2048-column chunk in bf16, rows 64 kn + 64 bytes apart (a
 * multiple of 64 that is not one of 4096: no shared L1 sets), then f32 scratch for the types
 * dequantized a whole row at a time. */
size_t rp_qx_rowbuf_bytes(long cols)
{
    return 32 * (64 * (size_t)QX_KC + 64) + (size_t)cols * 4 + 64;
}


/* B tiles: token block tb, 32-column step k: 16 rows (column pairs) x 16 tokens x 2 bf16, at
 * 512 * (tb * nk + k) uint16. Per tile: 16 tokens' 32 columns as bf16 pairs (one 32-bit lane
 * a pair), transposed so that tile row p holds pair p of every token; tokens past n_tok are 0. */
void rp_qx_pack_bf16(const float *x, int n_tok, long cols, uint16_t *out)
{
    long nb = (n_tok + 15) / 16, nk = cols / 32;
    for (long tb = 0; tb < nb; tb++)
        for (long k = 0; k < nk; k++) {
            __m512 r[16];
            for (int t = 0; t < 16; t++) {
                long tok = tb * 16 + t;
                if (tok < n_tok) {
                    const float *xs = x + tok * cols + 32 * k;
                    r[t] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(
                        _mm512_loadu_ps(xs + 16), _mm512_loadu_ps(xs)));
                } else {
                    r[t] = _mm512_setzero_ps();
                }
            }
            qx_transpose16(r);
            float *tile = (float *)(out + 512 * (size_t)(tb * nk + k));
            for (int p = 0; p < 16; p++)
                _mm512_storeu_ps(tile + 16 * p, r[p]);
        }
}

QX_AI __m512i qx_f32x32_to_bf16(__m512 lo, __m512 hi)
{
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* 32 consecutive u8 q (widened) with scale s and bias b (per element w = s q + b) into bf16. */
QX_AI void qx_affine32(__m256i q8, __m512 s, __m512 b, uint16_t *out)
{
    __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q8)));
    __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q8, 1)));
    _mm512_storeu_si512(out,
                        qx_f32x32_to_bf16(_mm512_fmadd_ps(f0, s, b), _mm512_fmadd_ps(f1, s, b)));
}

/* 16 bytes of packed nibbles (byte k: element 2k low, 2k + 1 high) into 32 bf16 looked up in
 * lut (16 bf16 values, indexed by q). */
QX_AI void qx_nib_lut32(const uint8_t *p, __m512i lut, uint16_t *out)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i idx =
        _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(15)),
                        _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xf0)), 12));
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(idx, lut));
}

/* The 16 bf16 values s q + b, q = 0..15 (f32 fma, rounded to nearest even). */
QX_AI __m512i qx_lut16(float s, float b)
{
    const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m256bh h = _mm512_cvtneps_pbh(_mm512_fmadd_ps(iota, _mm512_set1_ps(s), _mm512_set1_ps(b)));
    return _mm512_castsi256_si512((__m256i)h);
}

/* Columns [32 k0, 32 k1) of row `row` of w into bf16 at out (the reference's f32 value,
 * rounded to nearest even). f32 scratch: cols floats, for the types without a vector path
 * (those dequantize the whole row). */
static void dequant_row(const rp_tensor *w, long row, long k0, long k1, uint16_t *out, float *f32)
{
    long cols = (long)w->shape[1];
    size_t rb = rp_dtype_row_bytes(w->dtype, cols);
    const uint8_t *p = (const uint8_t *)w->data + (size_t)row * rb;
    switch (w->dtype) {
    case RP_DT_BF16: /* already the tiles' element type */
        memcpy(out, p + 64 * k0, 64 * (size_t)(k1 - k0));
        return;
    case RP_DT_MLX4:
    case RP_DT_MLX8: {
        long gs = w->group_size, ng = cols / gs, g0 = 32 * k0 / gs, g1 = (32 * k1 + gs - 1) / gs;
        size_t sb = w->scale_dtype == RP_DT_F32 ? 4 : 2;
        float sc[1024], bi[1024];
        if (g1 - g0 > 1024) break;
        size_t so = ((size_t)row * (size_t)ng + (size_t)g0) * sb;
        qx_widen(w->scale_dtype, (const char *)w->scales + so, g1 - g0, sc);
        qx_widen(w->scale_dtype, (const char *)w->biases + so, g1 - g0, bi);
        long per = gs / 32;           /* pieces of 32 elements a group: 1, 2 or 4 */
        if (w->dtype == RP_DT_MLX4) { /* one table of the group's 16 values for its pieces */
            for (long k = k0; k < k1;) {
                long g = 32 * k / gs, ke = (g + 1) * per < k1 ? (g + 1) * per : k1;
                __m512i lut = qx_lut16(sc[g - g0], bi[g - g0]);
                for (; k < ke; k++)
                    qx_nib_lut32(p + 16 * k, lut, out + 32 * (k - k0));
            }
            return;
        }
        for (long k = k0; k < k1; k++) { /* 8-bit: 32 bytes, one group */
            long g = 32 * k / gs - g0;
            qx_affine32(_mm256_loadu_si256((const __m256i *)(p + 32 * k)), _mm512_set1_ps(sc[g]),
                        _mm512_set1_ps(bi[g]), out + 32 * (k - k0));
        }
        return;
    }
    case RP_DT_Q8_0:
        for (long k = k0; k < k1; k++) {
            const uint8_t *b = p + 34 * (size_t)k;
            __m512 d = _mm512_set1_ps(qx_h2f(b));
            __m256i q = _mm256_loadu_si256((const __m256i *)(b + 2));
            __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
            __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
            _mm512_storeu_si512(out + 32 * (k - k0),
                                qx_f32x32_to_bf16(_mm512_mul_ps(f0, d), _mm512_mul_ps(f1, d)));
        }
        return;
    case RP_DT_Q4_0:
        for (long k = k0; k < k1; k++) {
            const uint8_t *b = p + 18 * (size_t)k;
            float d = qx_h2f(b);
            __m128i v = _mm_loadu_si128((const __m128i *)(b + 2));
            __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
                                         _mm256_set1_epi8(15)); /* elements 0..15, 16..31 */
            __m512i lut = qx_lut16(d, -8.0f * d);
            _mm512_storeu_si512(out + 32 * (k - k0),
                                _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(q), lut));
        }
        return;
    default:
        break;
    }
    rp_quant_dequant_row(w, row, f32);
    for (long k = k0; k < k1; k++) /* cols % 32 == 0 (rp_qx_prefill_fits) */
        _mm512_storeu_si512(
            out + 32 * (k - k0),
            qx_f32x32_to_bf16(_mm512_loadu_ps(f32 + 32 * k), _mm512_loadu_ps(f32 + 32 * k + 16)));
}

/* Rows [r, r + 32) x columns [32 k0, 32 k1) (k0, k1 even) from the packed copy into bf16
 * rows `pitch` elements apart, the values dequant_row gives (the same f32 expression, then
 * round to nearest even). A 64-column block is 16 x 16 int32 lanes (lane i of line p: row i's
 * k 4p..4p+3), so one 16 x 16 transpose gives every tile row's 64 codes in order (4-bit:
 * row i in the low nibbles, row 16 + i in the high). Rows past the last tile: zeros. */
static void dequant_packed(const rp_tensor *w, const void *packed, long r, long k0, long k1,
                           uint16_t *out, long pitch)
{
    rp_dtype dt = w->dtype;
    int bits = dt == RP_DT_MLX4 || dt == RP_DT_Q4_0 ? 4 : 8;
    int mlx = dt == RP_DT_MLX4 || dt == RP_DT_MLX8, tr = bits == 4 ? 32 : 16;
    long n_tiles = rp_qx_repack_tiles(w);
    size_t ssz = mlx ? (w->scale_dtype == RP_DT_F32 ? 4 : 2) : 2;
    for (int t = 0; t < 32 / tr; t++) {
        long tile = (r + t * tr) / tr;
        if (tile >= n_tiles) {
            for (int i = 0; i < tr; i++)
                memset(out + (size_t)(t * tr + i) * (size_t)pitch, 0, 64 * (size_t)(k1 - k0));
            continue;
        }
        for (long kb = k0 / 2; kb < k1 / 2; kb++) {
            const uint8_t *sp;
            const uint8_t *bp = rp_qx_packed_block(w, packed, tile, kb, &sp);
            float sc[32], bi[32];
            if (mlx) {
                qx_widen(w->scale_dtype, sp, tr, sc);
                qx_widen(w->scale_dtype, sp + (size_t)tr * ssz, tr, bi);
            } else {
                for (int i = 0; i < tr; i++) /* the row's d of the block's two 32-runs */
                    sc[i] = qx_h2f(sp + 2 * i), bi[i] = qx_h2f(sp + 2 * (tr + i));
            }
            __m512 m[16];
            for (int p = 0; p < 16; p++)
                m[p] = _mm512_castsi512_ps(_mm512_load_si512(bp + 64 * p));
            qx_transpose16(m);
            for (int i = 0; i < 16; i++) {
                __m512i v = _mm512_castps_si512(m[i]);
                for (int h = 0; h < tr / 16; h++) {
                    int ri = 16 * h + i; /* the row in the tile */
                    uint16_t *o = out + (size_t)(t * tr + ri) * (size_t)pitch + 64 * (kb - k0 / 2);
                    if (bits == 4) {
                        __m512i q = h ? _mm512_srli_epi16(v, 4) : v;
                        q = _mm512_and_si512(q, _mm512_set1_epi8(15));
                        __m512i lut0, lut1;
                        if (mlx) {
                            lut0 = lut1 = qx_lut16(sc[ri], bi[ri]);
                        } else { /* Q4_0: d (q - 8) per 32-run */
                            lut0 = qx_lut16(sc[ri], -8.0f * sc[ri]);
                            lut1 = qx_lut16(bi[ri], -8.0f * bi[ri]);
                        }
                        _mm512_storeu_si512(o, _mm512_permutexvar_epi16(
                                                   _mm512_cvtepu8_epi16(_mm512_castsi512_si256(q)), lut0));
                        _mm512_storeu_si512(o + 32, _mm512_permutexvar_epi16(
                                                        _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(q, 1)),
                                                        lut1));
                    } else {
                        for (int c = 0; c < 2; c++) { /* 32-runs */
                            __m256i q8 = c ? _mm512_extracti64x4_epi64(v, 1) : _mm512_castsi512_si256(v);
                            if (mlx) {
                                qx_affine32(q8, _mm512_set1_ps(sc[ri]), _mm512_set1_ps(bi[ri]), o + 32 * c);
                            } else { /* Q8_0: codes stored q + 128 */
                                q8 = _mm256_xor_si256(q8, _mm256_set1_epi8((char)0x80));
                                __m512 d = _mm512_set1_ps(c ? bi[ri] : sc[ri]);
                                __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q8)));
                                __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q8, 1)));
                                _mm512_storeu_si512(o + 32 * c, qx_f32x32_to_bf16(_mm512_mul_ps(f0, d),
                                                                                  _mm512_mul_ps(f1, d)));
                            }
                        }
                    }
                }
            }
        }
    }
}

void rp_qx_dequant_bf16(const rp_tensor *w, long row, uint16_t *out, float *f32)
{
    dequant_row(w, row, 0, (long)w->shape[1] / 32, out, f32);
}

typedef struct qx_tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) qx_tilecfg;

static void qx_config(void)
{
    qx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
}

/* A walk over rows x lines of the next block's source, a few prefetches per k-step. */
typedef struct qx_pf {
    const char *p;  /* row `row`'s first line */
    size_t stride;  /* bytes between rows */
    long lpr, line; /* lines per row, the next line of this row */
    long rows_left; /* rows not finished */
} qx_pf;

QX_AI void qx_pf_step(qx_pf *pf, long n)
{
    for (long i = 0; i < n && pf->rows_left > 0; i++) {
        _mm_prefetch(pf->p + 64 * pf->line, _MM_HINT_T1);
        if (++pf->line == pf->lpr) {
            pf->line = 0;
            pf->p += pf->stride;
            pf->rows_left--;
        }
    }
}

/* C tiles: 0, 1 = row tile 0 x token blocks tb, tb + 1; 2, 3 = row tile 1. A: 4, 5 (tile k
 * at a + 32 k, rows `as` bytes apart); B: 6, 7. k-steps [0, nk); pf_n prefetches a step. */
QX_AI void qx_amx_pass(const uint16_t *a, long as, const uint16_t *b0, const uint16_t *b1, long nk,
                       const int two, qx_pf *pf, long pf_n)
{
    const uint16_t *a1 = a + 8 * as;
    for (long k = 0; k < nk; k++) {
        qx_pf_step(pf, pf_n);
        _tile_loadd(4, a + 32 * k, as);
        _tile_loadd(6, b0 + 512 * k, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, a1 + 32 * k, as);
        _tile_dpbf16ps(2, 5, 6);
        if (two) {
            _tile_loadd(7, b1 + 512 * k, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
}

/* cb: C of one token block, [32 rows][16 tokens] f32; into rows [r, r + nr) of y[token][rows]
 * for its tokens below n_tok (16 x 16 transposes), added to y when `add`. */
static void qx_store(const float *cb, long r, long nr, long tb, int n_tok, long rows, float *y,
                     int add)
{
    int nt = n_tok - 16 * (int)tb < 16 ? n_tok - 16 * (int)tb : 16;
    for (int h = 0; h < 2 && 16 * h < nr; h++) {
        long n = nr - 16 * h < 16 ? nr - 16 * h : 16;
        __mmask16 m = (__mmask16)((1u << n) - 1);
        __m512 v[16];
        for (int i = 0; i < 16; i++)
            v[i] = _mm512_load_ps(cb + 256 * h + 16 * i);
        qx_transpose16(v);
        for (int t = 0; t < nt; t++) {
            float *yt = y + (tb * 16 + t) * rows + r + 16 * h;
            __m512 o = add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, yt), v[t]) : v[t];
            _mm512_mask_storeu_ps(yt, m, o);
        }
    }
}

/* The prefetch walk over the source of rows [r, r + n), columns [32 k0, 32 k1). */
static qx_pf qx_pf_of(const rp_tensor *w, long r, long n, long k0, long k1)
{
    size_t rb = rp_dtype_row_bytes(w->dtype, (long)w->shape[1]);
    size_t c0 = rp_dtype_row_bytes(w->dtype, 32 * k0), c1 = rp_dtype_row_bytes(w->dtype, 32 * k1);
    const char *p = (const char *)w->data + (size_t)r * rb + (c0 & ~(size_t)63);
    return (qx_pf){.p = p,
                   .stride = rb,
                   .lpr = (long)((c1 - (c0 & ~(size_t)63) + 63) / 64),
                   .rows_left = n > 0 ? n : 0};
}

/* The same walk over a packed copy: rows [r, r + n) (r a multiple of 32) are whole tiles, and
 * a chunk's groups are contiguous in each, so one run of lines per tile, a tile apart. */
static qx_pf qx_pf_packed(const rp_tensor *w, const void *packed, long r, long n, long k0,
                          long k1)
{
    int tr = w->dtype == RP_DT_MLX4 || w->dtype == RP_DT_Q4_0 ? 32 : 16;
    long n_tiles = rp_qx_repack_tiles(w), t0 = r / tr, nt = n > 0 ? (n + tr - 1) / tr : 0;
    if (t0 + nt > n_tiles)
        nt = n_tiles > t0 ? n_tiles - t0 : 0;
    if (nt <= 0 || k1 <= k0)
        return (qx_pf){.p = packed, .stride = 0, .lpr = 1, .rows_left = 0};
    const uint8_t *s0, *s1;
    const uint8_t *b0 = rp_qx_packed_block(w, packed, t0, k0 / 2, &s0);
    rp_qx_packed_block(w, packed, t0, k1 / 2 - 1, &s1);
    int mlx = w->dtype == RP_DT_MLX4 || w->dtype == RP_DT_MLX8;
    size_t sb = mlx ? 2 * (size_t)tr * (w->scale_dtype == RP_DT_F32 ? 4 : 2) : 4 * (size_t)tr;
    size_t len = (size_t)(s1 + sb - b0), tb = rp_qx_repack_bytes(w) / (size_t)n_tiles;
    return (qx_pf){.p = (const char *)b0, .stride = tb, .lpr = (long)((len + 63) / 64),
                   .rows_left = nt};
}

/* Loop order: per 2048-column chunk, per 32-row block: the block's A rows (bf16 weights: read
 * in place, rows one row apart; other types: dequantized into rowbuf), then per token group of
 * up to 256, per token-block pair, the 4 C tiles accumulate the chunk and go to the spill cb,
 * then cb -> y (added from the second chunk on). The chunk's B tiles stay in L2 for all row
 * blocks; the next block's source is prefetched into L2 a few lines per k-step, spread over
 * this block's passes. */
void rp_qx_prefill(const rp_tensor *w, const void *packed, long r0, long r1,
                   const uint16_t *xb, int n_tok, void *rowbuf, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nk = cols / 32;
    long nb = (n_tok + 15) / 16;
    uint16_t *a = rowbuf;
    float *f32 = (float *)((char *)rowbuf + 32 * (64 * (size_t)QX_KC + 64));
    float cb[QX_MAX_TB][512] __attribute__((aligned(64)));
    qx_config();
    for (long k0 = 0; k0 < nk; k0 += QX_KC) {
        long k1 = k0 + QX_KC < nk ? k0 + QX_KC : nk, kn = k1 - k0;
        for (long r = r0; r < r1; r += 32) {
            long nr = r1 - r < 32 ? r1 - r : 32;
            const uint16_t *ab = a;
            long as = 64 * kn + 64; /* rowbuf: a multiple of 64 bytes, not of 4096 */
            /* bf16 in place, but for a call's first block: not prefetched, its strided tile
             * loads would wait on memory row by row, where a copy streams */
            if (w->dtype == RP_DT_BF16 && nr == 32 && (r != r0 || k0 != 0)) {
                ab = (const uint16_t *)w->data + (size_t)r * (size_t)cols + 32 * (size_t)k0;
                as = 2 * cols;
            } else if (packed) {
                dequant_packed(w, packed, r, k0, k1, a, as / 2);
            } else {
                for (long i = 0; i < 32; i++) {
                    uint16_t *o = a + (size_t)i * (size_t)as / 2;
                    if (i < nr)
                        dequant_row(w, r + i, k0, k1, o, f32);
                    else
                        memset(o, 0, 64 * (size_t)kn);
                }
            }
            /* the next block: the next 32 rows of this chunk, or the first of the next chunk;
             * after the last, the rows after r1 (the next work item, on this thread or the
             * other: in L3 at least) */
            long n1 = rows - r1 < 32 ? rows - r1 : 32, kf = QX_KC < nk ? QX_KC : nk;
            long pr, pn, pk0, pk1;
            if (r + 32 < r1)
                pr = r + 32, pn = r1 - r - 32 < 32 ? r1 - r - 32 : 32, pk0 = k0, pk1 = k1;
            else if (k1 < nk)
                pr = r0, pn = r1 - r0 < 32 ? r1 - r0 : 32, pk0 = k1,
                pk1 = k1 + QX_KC < nk ? k1 + QX_KC : nk;
            else
                pr = r1, pn = n1, pk0 = 0, pk1 = kf;
            qx_pf pf = packed && w->dtype != RP_DT_BF16 ? qx_pf_packed(w, packed, pr, pn, pk0, pk1)
                                                        : qx_pf_of(w, pr, pn, pk0, pk1);
            long steps = kn * ((nb + 1) / 2);
            long per = (pf.lpr * pf.rows_left + steps - 1) / steps;
            for (long g0 = 0; g0 < nb; g0 += QX_MAX_TB) {
                long g1 = g0 + QX_MAX_TB < nb ? g0 + QX_MAX_TB : nb;
                for (long tb = g0; tb < g1; tb += 2) {
                    int two = tb + 1 < g1;
                    float *c0 = cb[tb - g0], *c1 = cb[tb - g0 + two];
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                    const uint16_t *b0 = xb + 512 * (size_t)(tb * nk + k0);
                    const uint16_t *b1 = b0 + 512 * (size_t)nk;
                    if (two)
                        qx_amx_pass(ab, as, b0, b1, kn, 1, &pf, per);
                    else
                        qx_amx_pass(ab, as, b0, b1, kn, 0, &pf, per);
                    _tile_stored(0, c0, 64);
                    _tile_stored(2, c0 + 256, 64);
                    if (two) {
                        _tile_stored(1, c1, 64);
                        _tile_stored(3, c1 + 256, 64);
                    }
                }
                for (long tb = g0; tb < g1; tb++)
                    qx_store(cb[tb - g0], r, nr, tb, n_tok, rows, y, k0 > 0);
            }
        }
    }
    _tile_release();
}
