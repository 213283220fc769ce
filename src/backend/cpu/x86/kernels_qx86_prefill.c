/* backend/cpu/x86/kernels_qx86_prefill.c - prefill of every quantized type (and bf16) on
 * AMX-BF16 tiles (rp_qx_prefill; contract in kernels_qx86.h).
 *
 * Rows in blocks of 32, dequantized (rp_qx_dequant_bf16: w in f32 exactly as the reference,
 * then rounded to bf16) into the calling thread's buffer; the activations are rounded to bf16
 * once per call (rp_qx_pack_bf16, VNNI pairs for B tiles); C = 2 row tiles x 2 token tiles of
 * f32 accumulated by TDPBF16PS over all columns. Error: the bf16 rounding of w and x (relative
 * 2^-9 each per product), f32 accumulation.
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

/* n scales (f32, f16 or bf16) from p to f32. */
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

/* ---- prefill: dequantize to bf16, AMX-BF16 tiles --------------------------------------- */

int rp_qx_prefill_fits(const rp_tensor *w, int n_tok)
{
    long cols = (long)w->shape[1];
    int type_ok = (rp_dtype_is_quant(w->dtype) && w->dtype != RP_DT_MXFP4) ||
                  w->dtype == RP_DT_BF16;
    return type_ok && n_tok >= RP_QX_MIN_TOKENS &&
           cols % 32 == 0 && cols % rp_dtype_block(w->dtype) == 0 && cols <= 65536 &&
           (w->dtype != RP_DT_MLX4 && w->dtype != RP_DT_MLX8 ? 1 : cols % w->group_size == 0);
}

size_t rp_qx_pack_bytes(int n_tok, long cols)
{
    return (size_t)((n_tok + 15) / 16) * (size_t)cols * 16 * 2;
}

/* The dequantized rows' stride: a multiple of 64 bytes that is not one of 4096 (rows 4 KB
 * apart would share L1 sets), then f32 scratch. */
static size_t qx_astride(long cols) { return (size_t)cols * 2 + 64; }

size_t rp_qx_rowbuf_bytes(long cols) { return 32 * qx_astride(cols) + (size_t)cols * 4 + 64; }

/* B tiles: token block tb, 32-column step k: 16 rows (column pairs) x 16 tokens x 2 bf16. */
void rp_qx_pack_bf16(const float *x, int n_tok, long cols, uint16_t *out)
{
    long nb = (n_tok + 15) / 16, nk = cols / 32;
    memset(out, 0, rp_qx_pack_bytes(n_tok, cols));
    uint32_t *o = (uint32_t *)out;
    for (int t = 0; t < n_tok; t++) {
        long tb = t / 16;
        int tt = t % 16;
        for (long k = 0; k < nk; k++) {
            const float *xs = x + (long)t * cols + 32 * k;
            __m512i h = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xs + 16), _mm512_loadu_ps(xs));
            uint32_t pr[16];
            _mm512_storeu_si512(pr, h);
            uint32_t *tile = o + ((size_t)tb * (size_t)nk + (size_t)k) * 256 + tt;
            for (int p = 0; p < 16; p++)
                tile[16 * p] = pr[p];
        }
    }
    (void)nb;
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
    _mm512_storeu_si512(out, qx_f32x32_to_bf16(_mm512_fmadd_ps(f0, s, b), _mm512_fmadd_ps(f1, s, b)));
}

/* 16 bytes of packed nibbles (byte k: element 2k low, 2k + 1 high) into 32 bf16 looked up in
 * lut (16 bf16 values, indexed by q). */
QX_AI void qx_nib_lut32(const uint8_t *p, __m512i lut, uint16_t *out)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i idx = _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(15)),
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


/* Row `row` of w into cols bf16 (the reference's f32 value, rounded to nearest even). f32
 * scratch: cols floats, for the types without a vector path. */
void rp_qx_dequant_bf16(const rp_tensor *w, long row, uint16_t *out, float *f32)
{
    long cols = (long)w->shape[1];
    size_t rb = rp_dtype_row_bytes(w->dtype, cols);
    const uint8_t *p = (const uint8_t *)w->data + (size_t)row * rb;
    switch (w->dtype) {
    case RP_DT_BF16: /* already the tiles' element type: a copy into the padded stride */
        memcpy(out, p, rb);
        return;
    case RP_DT_MLX4:
    case RP_DT_MLX8: {
        long gs = w->group_size, ng = cols / gs;
        size_t sb = w->scale_dtype == RP_DT_F32 ? 4 : 2;
        float sc[1024], bi[1024];
        if (ng > 1024)
            break;
        qx_widen(w->scale_dtype, (const char *)w->scales + (size_t)row * (size_t)ng * sb, ng, sc);
        qx_widen(w->scale_dtype, (const char *)w->biases + (size_t)row * (size_t)ng * sb, ng, bi);
        if (w->dtype == RP_DT_MLX4) { /* 32 elements (16 bytes) share a group */
            for (long e = 0; e < cols; e += 32) {
                long g = e / gs;
                qx_nib_lut32(p + e / 2, qx_lut16(sc[g], bi[g]), out + e);
            }
            return;
        }
        for (long e = 0; e < cols; e += 32) { /* 8-bit: 32 bytes, one group */
            long g = e / gs;
            qx_affine32(_mm256_loadu_si256((const __m256i *)(p + e)), _mm512_set1_ps(sc[g]),
                        _mm512_set1_ps(bi[g]), out + e);
        }
        return;
    }
    case RP_DT_Q8_0:
        for (long k = 0; k < cols / 32; k++) {
            const uint8_t *b = p + 34 * (size_t)k;
            __m512 d = _mm512_set1_ps(qx_h2f(b));
            __m256i q = _mm256_loadu_si256((const __m256i *)(b + 2));
            __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
            __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
            _mm512_storeu_si512(out + 32 * k,
                                qx_f32x32_to_bf16(_mm512_mul_ps(f0, d), _mm512_mul_ps(f1, d)));
        }
        return;
    case RP_DT_Q4_0:
        for (long k = 0; k < cols / 32; k++) {
            const uint8_t *b = p + 18 * (size_t)k;
            float d = qx_h2f(b);
            __m128i v = _mm_loadu_si128((const __m128i *)(b + 2));
            __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
                                         _mm256_set1_epi8(15)); /* elements 0..15, 16..31 */
            __m512i lut = qx_lut16(d, -8.0f * d);
            _mm512_storeu_si512(out + 32 * k,
                                _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(q), lut));
        }
        return;
    default: break;
    }
    rp_quant_dequant_row(w, row, f32);
    long e = 0;
    for (; e + 32 <= cols; e += 32)
        _mm512_storeu_si512(out + e, qx_f32x32_to_bf16(_mm512_loadu_ps(f32 + e),
                                                       _mm512_loadu_ps(f32 + e + 16)));
    for (; e < cols; e++)
        out[e] = rp_f32_to_bf16(f32[e]);
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

/* C tiles: 0, 1 = row tile 0 x token blocks tb, tb + 1; 2, 3 = row tile 1. A: 4, 5; B: 6, 7. */
QX_AI void qx_amx_pass(const uint16_t *a, size_t astride, const uint16_t *b0, const uint16_t *b1,
                       long nk, const int two, const char *pf, long pf_lines)
{
    for (long k = 0; k < nk; k++) {
        /* the next row block's weights into L2 while the tiles work */
        for (long l = 0; l < pf_lines; l++)
            _mm_prefetch(pf + 64 * (k * pf_lines + l), _MM_HINT_T1);
        _tile_loadd(4, a + 32 * k, (long)astride);
        _tile_loadd(6, b0 + 512 * k, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, a + 16 * astride / 2 + 32 * k, (long)astride);
        _tile_dpbf16ps(2, 5, 6);
        if (two) {
            _tile_loadd(7, b1 + 512 * k, 64);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
}

/* C tile c[16 rows][16 tokens] into y[token][row] (rows [r, r1) of this block). */
static void qx_store(const float *c, long r, long r1, long tb, int n_tok, long rows, float *y)
{
    const __m512i col = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
    long nr = r1 - r < 16 ? r1 - r : 16;
    __mmask16 m = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < 16; t++) {
        long tok = tb * 16 + t;
        if (tok >= n_tok)
            break;
        _mm512_mask_storeu_ps(y + tok * rows + r, m, _mm512_i32gather_ps(col, c + t, 4));
    }
}

void rp_qx_prefill(const rp_tensor *w, long r0, long r1, const uint16_t *xb, int n_tok,
                   void *rowbuf, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nk = cols / 32;
    long nb = (n_tok + 15) / 16;
    uint16_t *a = rowbuf;
    size_t astride = qx_astride(cols); /* bytes */
    float *f32 = (float *)((char *)rowbuf + 32 * astride);
    float c[4][256] __attribute__((aligned(64)));
    qx_config();
    for (long r = r0; r < r1; r += 32) {
        for (long i = 0; i < 32; i++) {
            if (r + i < r1)
                rp_qx_dequant_bf16(w, r + i, a + (size_t)i * astride / 2, f32);
            else
                memset(a + (size_t)i * astride / 2, 0, astride);
        }
        /* prefetch plan: the next block's packed rows, spread over this block's passes */
        size_t rbytes = rp_dtype_row_bytes(w->dtype, cols);
        long npass = (nb + 1) / 2, next = r + 32 < r1 ? (r1 - r - 32 < 32 ? r1 - r - 32 : 32) : 0;
        long lines = (long)((size_t)next * rbytes / 64);
        long per = (lines + npass * nk - 1) / (npass * nk);
        const char *pfb = (const char *)w->data + (size_t)(r + 32) * rbytes;
        for (long tb = 0; tb < nb; tb += 2) {
            int two = tb + 1 < nb;
            const char *pf = pfb + (size_t)(tb / 2) * (size_t)nk * (size_t)per * 64;
            long pl = (tb / 2) * nk * per < lines ? per : 0;
            const uint16_t *b0 = xb + (size_t)tb * (size_t)cols * 16;
            const uint16_t *b1 = b0 + (size_t)cols * 16;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            if (two)
                qx_amx_pass(a, astride, b0, b1, nk, 1, pf, pl);
            else
                qx_amx_pass(a, astride, b0, b1, nk, 0, pf, pl);
            _tile_stored(0, c[0], 64);
            _tile_stored(2, c[2], 64);
            if (two) {
                _tile_stored(1, c[1], 64);
                _tile_stored(3, c[3], 64);
            }
            qx_store(c[0], r, r1, tb, n_tok, rows, y);
            if (r + 16 < r1)
                qx_store(c[2], r + 16, r1, tb, n_tok, rows, y);
            if (two) {
                qx_store(c[1], r, r1, tb + 1, n_tok, rows, y);
                if (r + 16 < r1)
                    qx_store(c[3], r + 16, r1, tb + 1, n_tok, rows, y);
            }
        }
    }
    _tile_release();
}
