/* backend/cpu/x86/kernels_amx.c - AMX (Sapphire Rapids tile) matmul for prefill: bf16
 * weights x bf16-rounded activations, f32 accumulation.
 *
 * Tiles: A = 16 weight rows x 32 columns read straight from the row-major weight (stride =
 * row bytes), B = 32 columns x 16 tokens from activations packed by rp_amx_pack_bf16 (pairs
 * of consecutive columns per token, the VNNI layout TDPBF16PS wants), C = 16 rows x 16 tokens
 * f32. Each activation is split into three bf16 numbers, x = hi + mid + lo (hi = bf16(x),
 * mid = bf16(x - hi), lo = bf16(x - hi - mid): 24 significant bits, all of an f32's), and all
 * three are multiplied, so the result is f32 math on the same weights up to summation order
 * (tested against the reference like the AVX-512 kernel). A step computes 4 row blocks x 1
 * token block (C: 4 tiles, A: 1 reloaded per block, B hi/mid/lo: 3; 12 TDPBF16PS). Tokens are
 * padded to a multiple of 16 with zeros.
 *
 * Compiled with -mamx-*; only called when rp_cpu() reports AMX and the kernel tables set it.
 * The process must have asked the kernel for the tile state (rp_amx_enable).
 */
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "base/alloc.h"
#include "base/half.h"

typedef struct tilecfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tilecfg;

int rp_amx_enable(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

static void config(void)
{
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
}

size_t rp_amx_packed_bytes(int n_tok, long cols)
{
    long nb = (n_tok + 15) / 16;
    return (size_t)nb * (size_t)cols * 16 * 2 * 3; /* hi, mid, lo */
}

/* Layout: token block b: hi [cols/2][16 tokens][2], then mid and lo, same shape. A token's
 * 32 consecutive columns become 16 bf16 pairs (AVX-512 BF16 conversion, round to nearest
 * even) scattered down the 16 rows of a B tile. */
void rp_amx_pack_bf16(const float *x, int n_tok, long cols, uint16_t *out)
{
    long nb = (n_tok + 15) / 16;
    const __m512i rows = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(64));
    for (long b = 0; b < nb; b++) {
        uint16_t *hi = out + (size_t)b * (size_t)cols * 48, *mid = hi + (size_t)cols * 16,
                 *lo = mid + (size_t)cols * 16;
        for (int t = 0; t < 16; t++) {
            long tok = b * 16 + t;
            for (long c = 0; c < cols; c += 32) {
                __m512 x0 = _mm512_setzero_ps(), x1 = x0;
                if (tok < n_tok) {
                    x0 = _mm512_loadu_ps(x + tok * cols + c);
                    x1 = _mm512_loadu_ps(x + tok * cols + c + 16);
                }
                __m512i parts[3];
                for (int p = 0; p < 3; p++) {
                    __m512bh h = _mm512_cvtne2ps_pbh(x1, x0); /* x0 in the low half */
                    parts[p] = (__m512i)h;
                    /* residuals: x - float(h) */
                    __m512i hv = (__m512i)h;
                    __m512 h0 = _mm512_castsi512_ps(
                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hv)), 16));
                    __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hv, 1)), 16));
                    x0 = _mm512_sub_ps(x0, h0);
                    x1 = _mm512_sub_ps(x1, h1);
                }
                /* pair j of the 32 columns is B row c / 2 + j, token t */
                size_t off = ((size_t)(c / 2) * 16 + (size_t)t) * 2;
                _mm512_i32scatter_epi32(hi + off, rows, parts[0], 1);
                _mm512_i32scatter_epi32(mid + off, rows, parts[1], 1);
                _mm512_i32scatter_epi32(lo + off, rows, parts[2], 1);
            }
        }
    }
}

static void store_block(const float *c, long r, int n_rows, long tb, int n_tok, long rows,
                        float *y)
{
    for (int t = 0; t < 16; t++) {
        long tok = tb * 16 + t;
        if (tok >= n_tok)
            break;
        for (int i = 0; i < n_rows; i++)
            y[tok * rows + r + i] = c[i * 16 + t];
    }
}

/* C tiles 0..nblk-1 += rows [r, r + 16 nblk) x one token block, k-steps [k0, k1) (A in
 * tile 4, B parts in 5..7). */
static inline __attribute__((always_inline)) void bf16_block(const char *a, size_t rb,
                                                             const uint16_t *bh, size_t part,
                                                             long k0, long k1, const int nblk)
{
    const uint16_t *bm = bh + part, *bl = bm + part;
    for (long k = k0; k < k1; k++) {
        _tile_loadd(5, bh + (size_t)k * 512, 64);
        _tile_loadd(6, bm + (size_t)k * 512, 64);
        _tile_loadd(7, bl + (size_t)k * 512, 64);
        _tile_loadd(4, a + 64 * k, (long)rb);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(0, 4, 7);
        if (nblk > 1) {
            _tile_loadd(4, a + 16 * rb + 64 * k, (long)rb);
            _tile_dpbf16ps(1, 4, 5);
            _tile_dpbf16ps(1, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(4, a + 32 * rb + 64 * k, (long)rb);
            _tile_dpbf16ps(2, 4, 5);
            _tile_dpbf16ps(2, 4, 6);
            _tile_dpbf16ps(2, 4, 7);
            _tile_loadd(4, a + 48 * rb + 64 * k, (long)rb);
            _tile_dpbf16ps(3, 4, 5);
            _tile_dpbf16ps(3, 4, 6);
            _tile_dpbf16ps(3, 4, 7);
        }
    }
}

#define AMX_KCHUNK 32 /* k-steps (of 32 columns) per pass: the B parts of every token block
                         for one chunk stay in L2 while all row blocks go by */

/* rows [r0, r1) with r0 % 16 == 0. Passes over K chunks, outermost: for each chunk, every
 * 64-row (then 16-row) block x token block accumulates into an f32 buffer [tb][row][16]
 * (C tiles loaded and stored per chunk), so the weights stream from memory once and the
 * activations come from L2. The last partial 16 rows are left to the caller. */
long rp_amx_matmul_bf16(const rp_tensor *w, long r0, long r1, const uint16_t *xb, int n_tok,
                        float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    size_t rb = (size_t)cols * 2;
    long nb = (n_tok + 15) / 16, kst = cols / 32, nr = (r1 - r0) / 16 * 16;
    size_t bstride = (size_t)cols * 48, part = (size_t)cols * 16; /* uint16 */
    if (nr <= 0)
        return r0;
    float *acc = rp_alloc_aligned(sizeof(float) * 16 * (size_t)nr * (size_t)nb, RP_TAG_MODEL);
    if (!acc)
        return r0; /* the caller's kernel does it all */
    config();
    for (long k0 = 0; k0 < kst; k0 += AMX_KCHUNK) {
        long k1 = k0 + AMX_KCHUNK < kst ? k0 + AMX_KCHUNK : kst;
        for (long r = 0; r < nr;) {
            int four = r + 64 <= nr, nblk = four ? 4 : 1;
            const char *a = (const char *)w->data + (size_t)(r0 + r) * rb;
            for (long tb = 0; tb < nb; tb++) {
                float *c = acc + ((size_t)tb * (size_t)nr + (size_t)r) * 16;
                if (k0 == 0) {
                    _tile_zero(0);
                    if (four) {
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                    }
                } else {
                    _tile_loadd(0, c, 64);
                    if (four) {
                        _tile_loadd(1, c + 256, 64);
                        _tile_loadd(2, c + 512, 64);
                        _tile_loadd(3, c + 768, 64);
                    }
                }
                const uint16_t *bh = xb + (size_t)tb * bstride;
                if (four)
                    bf16_block(a, rb, bh, part, k0, k1, 4);
                else
                    bf16_block(a, rb, bh, part, k0, k1, 1);
                _tile_stored(0, c, 64);
                if (four) {
                    _tile_stored(1, c + 256, 64);
                    _tile_stored(2, c + 512, 64);
                    _tile_stored(3, c + 768, 64);
                }
            }
            r += 16 * nblk;
        }
    }
    _tile_release();
    for (long tb = 0; tb < nb; tb++)
        for (long r = 0; r < nr; r += 16)
            store_block(acc + ((size_t)tb * (size_t)nr + (size_t)r) * 16, r0 + r, 16, tb, n_tok,
                        rows, y);
    rp_free_aligned(acc);
    return r0 + nr; /* rows [r0 + nr, r1) are not done */
}

/* ---- MLX affine weights on int8 tiles (TDPBUSD: u8 weights x s8 activations) ----------- *
 * Per 32-element activation run k (rp_qact order: MLX 4-bit runs are even/odd halves of
 * 64-blocks, so the weights are unpacked the same way), one TDPBUSD of A = 16 weight rows x
 * 32 u8 and B = 32 x 16 tokens (VNNI: 4 consecutive elements per token) gives 16 x 16 int32,
 * scaled per row by the group scale and per token by the run's activation scale and added
 * in f32; the biases are sum_g bias_g x (sum of x over group g) per row and token. Same
 * arithmetic as the AVX-512 VNNI kernel, so the same error bound. */

/* k = 32 or 64 elements per TDPBUSD */
static void qconfig(int k)
{
    tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = 16; /* C: 16 rows x 16 int32 */
    c.colsb[0] = 64;
    c.rows[1] = 16; /* A: 16 rows x k u8 */
    c.colsb[1] = (uint16_t)k;
    c.rows[2] = (uint8_t)(k / 4); /* B: k/4 x (16 tokens x 4 s8) */
    c.colsb[2] = 64;
    _tile_loadconfig(&c);
}

size_t rp_amx_qpacked_bytes(int n_tok, long cols, int gs)
{
    long nb = (n_tok + 15) / 16, nrun = cols / 32;
    return (size_t)nb * (size_t)cols * 16 + (size_t)nb * (size_t)nrun * 16 * 4 +
           (size_t)n_tok * (size_t)(cols / gs) * 4 + 64;
}

void rp_amx_pack_q(const rp_qact *a, int n_tok, long cols, int gs, void *buf, rp_amx_qact *out)
{
    long nb = (n_tok + 15) / 16, nrun = cols / 32, ng = cols / gs, per = gs / 32;
    int8_t *b = buf;
    float *dT = (float *)(b + (size_t)nb * (size_t)cols * 16);
    float *xg = dT + (size_t)nb * (size_t)nrun * 16;
    for (long tb = 0; tb < nb; tb++)
        for (long k = 0; k < nrun; k++) {
            int8_t *tile = b + ((size_t)tb * (size_t)nrun + (size_t)k) * 512;
            for (int t = 0; t < 16; t++) {
                long tok = tb * 16 + t;
                for (int e = 0; e < 32; e++) /* row e / 4, token t, byte e % 4 */
                    tile[(e / 4) * 64 + t * 4 + e % 4] =
                        tok < n_tok ? a->q[tok * cols + 32 * k + e] : 0;
                dT[((size_t)tb * (size_t)nrun + (size_t)k) * 16 + (size_t)t] =
                    tok >= n_tok ? 0.0f : a->run64 ? a->d[tok * (nrun / 2) + k / 2]
                                                   : a->d[tok * nrun + k];
            }
        }
    for (int t = 0; t < n_tok; t++)
        for (long g = 0; g < ng; g++) {
            float v = 0.0f;
            for (long k = 0; k < per; k++)
                v += a->s[(long)t * nrun + g * per + k];
            xg[(long)t * ng + g] = v;
        }
    *out = (rp_amx_qact){.b = b, .dT = dT, .xg = xg, .n_tok = n_tok, .run64 = a->run64};
}

static void widen_row(rp_dtype sdt, const void *p, long n, float *out)
{
    for (long g = 0; g < n; g++)
        out[g] = sdt == RP_DT_F32    ? rp_load_f32(p, (size_t)g)
                 : sdt == RP_DT_BF16 ? rp_bf16_to_f32(rp_load_u16(p, (size_t)g))
                                     : _cvtsh_ss(rp_load_u16(p, (size_t)g));
}

long rp_amx_matmul_mlx(const rp_tensor *w, long r0, long r1, const rp_amx_qact *a, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nrun = cols / 32;
    long gs = w->group_size, ng = cols / gs;
    int bits = w->dtype == RP_DT_MLX4 ? 4 : 8, n_tok = a->n_tok;
    long nb = (n_tok + 15) / 16;
    size_t rb = (size_t)cols * (size_t)bits / 8, sb = w->scale_dtype == RP_DT_F32 ? 4 : 2;
    if (nb > 8 || ng > 512)
        return r0;
    float acc[8][16][16], sc[16][512], bias[512];
    int32_t cb[256];
    uint8_t abuf[16 * 64];
    /* run64 activations with groups >= 64: one TDPBUSD per 64-block (the two runs' B tiles
     * are adjacent in the packing, so a 16-row B tile covers both) */
    int k64 = a->run64 && gs >= 64;
    long kstep = k64 ? 2 : 1;
    qconfig(k64 ? 64 : 32);
    long r = r0;
    for (; r + 16 <= r1; r += 16) {
        for (int i = 0; i < 16; i++)
            widen_row(w->scale_dtype, (const char *)w->scales + (size_t)(r + i) * (size_t)ng * sb,
                      ng, sc[i]);
        memset(acc, 0, sizeof(float) * 256 * (size_t)nb);
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * rb;
        for (long k = 0; k < nrun; k += kstep) {
            if (bits == 4 && k64) { /* 64-block k / 2: low nibbles | high nibbles */
                for (int i = 0; i < 16; i++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(wr + (size_t)i * rb + 32 * (k >> 1)));
                    _mm256_storeu_si256((__m256i *)(abuf + 64 * i),
                                        _mm256_and_si256(v, _mm256_set1_epi8(15)));
                    _mm256_storeu_si256((__m256i *)(abuf + 64 * i + 32),
                                        _mm256_and_si256(_mm256_srli_epi16(v, 4),
                                                         _mm256_set1_epi8(15)));
                }
                _tile_loadd(1, abuf, 64);
            } else if (bits == 4) { /* run k: nibble k & 1 of the 32 bytes of 64-block k / 2 */
                for (int i = 0; i < 16; i++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(wr + (size_t)i * rb + 32 * (k >> 1)));
                    if (k & 1)
                        v = _mm256_srli_epi16(v, 4);
                    _mm256_storeu_si256((__m256i *)(abuf + 32 * i),
                                        _mm256_and_si256(v, _mm256_set1_epi8(15)));
                }
                _tile_loadd(1, abuf, 32);
            } else {
                _tile_loadd(1, wr + 32 * k, (long)rb);
            }
            long g = k * 32 / gs;
            for (long tb = 0; tb < nb; tb++) {
                _tile_zero(0);
                _tile_loadd(2, a->b + ((size_t)tb * (size_t)nrun + (size_t)k) * 512, 64);
                _tile_dpbusd(0, 1, 2);
                _tile_stored(0, cb, 64);
                __m512 dx = _mm512_loadu_ps(a->dT + ((size_t)tb * (size_t)nrun + (size_t)k) * 16);
                for (int i = 0; i < 16; i++) {
                    __m512 p = _mm512_cvtepi32_ps(_mm512_loadu_si512(cb + 16 * i));
                    __m512 s = _mm512_mul_ps(dx, _mm512_set1_ps(sc[i][g]));
                    _mm512_storeu_ps(acc[tb][i],
                                     _mm512_fmadd_ps(p, s, _mm512_loadu_ps(acc[tb][i])));
                }
            }
        }
        for (int i = 0; i < 16; i++) {
            widen_row(w->scale_dtype, (const char *)w->biases + (size_t)(r + i) * (size_t)ng * sb,
                      ng, bias);
            for (int t = 0; t < n_tok; t++) {
                const float *xg = a->xg + (long)t * ng;
                __m512 bv = _mm512_setzero_ps();
                long gg = 0;
                for (; gg + 16 <= ng; gg += 16)
                    bv = _mm512_fmadd_ps(_mm512_loadu_ps(bias + gg), _mm512_loadu_ps(xg + gg), bv);
                float bsum = _mm512_reduce_add_ps(bv);
                for (; gg < ng; gg++)
                    bsum += bias[gg] * xg[gg];
                y[(long)t * rows + r + i] = acc[t / 16][i][t % 16] + bsum;
            }
        }
    }
    _tile_release();
    return r;
}
