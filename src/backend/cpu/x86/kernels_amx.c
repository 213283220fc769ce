/* backend/cpu/x86/kernels_amx.c - AMX (Sapphire Rapids tile) matmul for prefill: bf16
 * weights x bf16 activations, f32 accumulation.
 *
 * Tiles: A = 16 weight rows x 32 columns read straight from the row-major weight (stride =
 * row bytes), B = 32 columns x 16 tokens from activations packed by rp_amx_pack_bf16 (pairs
 * of consecutive columns per token, the VNNI layout TDPBF16PS wants), C = 16 rows x 16 tokens
 * f32. A step is 2 row blocks x 2 token blocks (C: tiles 0..3, A: 4..5, B: 6..7): 4 tile
 * loads per 4 TDPBF16PS, each weight tile used for two token blocks, each activation tile
 * for two row blocks. Tokens are padded to a multiple of 16 with zeros.
 *
 * Activations: with parts = 1 each is rounded to bf16 (round to nearest even: relative error
 * <= 2^-9 per element, so |y - exact| <= 2^-9 sum |w x| plus f32 summation error), the fast
 * path. With parts = 3 it is split into three bf16 numbers, x = hi + mid + lo (hi = bf16(x),
 * mid = bf16(x - hi), lo = bf16(x - hi - mid): 24 significant bits, all of an f32's) and all
 * three are multiplied, so the result is f32 math on the same weights up to summation order
 * (3x the tile work; the backend's exact mode).
 *
 * Loop order per thread: 32-row blocks outermost, then K chunks (the B tiles of every token
 * block for one chunk stay in L2 while the row blocks go by), then token-block pairs; the C
 * tiles of one row block live in a 16 KB stack buffer [token block][32 rows][16] between
 * chunks, so the weights stream from memory once and nothing is allocated.
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

size_t rp_amx_packed_bytes(int n_tok, long cols, int parts)
{
    long nb = (n_tok + 15) / 16;
    return (size_t)nb * (size_t)cols * 16 * 2 * (size_t)parts;
}

/* Layout: token block b, part p: [cols/2][16 tokens][2] (B tile k is the 512 uint16 at
 * k * 512). A token's 32 consecutive columns become 16 bf16 pairs (AVX-512 BF16 conversion,
 * round to nearest even) scattered down the 16 rows of a B tile. */
void rp_amx_pack_bf16(const float *x, int n_tok, long cols, int parts, uint16_t *out)
{
    long nb = (n_tok + 15) / 16;
    size_t part = (size_t)cols * 16;
    const __m512i rows = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(64));
    for (long b = 0; b < nb; b++) {
        uint16_t *blk = out + (size_t)b * part * (size_t)parts;
        for (int t = 0; t < 16; t++) {
            long tok = b * 16 + t;
            for (long c = 0; c < cols; c += 32) {
                __m512 x0 = _mm512_setzero_ps(), x1 = x0;
                if (tok < n_tok) {
                    x0 = _mm512_loadu_ps(x + tok * cols + c);
                    x1 = _mm512_loadu_ps(x + tok * cols + c + 16);
                }
                /* pair j of the 32 columns is B row c / 2 + j, token t */
                size_t off = ((size_t)(c / 2) * 16 + (size_t)t) * 2;
                for (int p = 0; p < parts; p++) {
                    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0); /* x0 in the low half */
                    _mm512_i32scatter_epi32(blk + (size_t)p * part + off, rows, h, 1);
                    if (p + 1 < parts) { /* residuals: x - float(h) */
                        __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(
                            _mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
                        __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                            _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
                        x0 = _mm512_sub_ps(x0, h0);
                        x1 = _mm512_sub_ps(x1, h1);
                    }
                }
            }
        }
    }
}

/* C tiles (row block i, token block j) = tile 2 i + j, for na row blocks x nb token blocks
 * (1 or 2 each), k-steps [k0, k1): A rows at a (stride rb), B part p of token block j at
 * b + j * bstride + p * part. */
static inline __attribute__((always_inline)) void step_block(const char *a, size_t rb,
                                                             const uint16_t *b, size_t bstride,
                                                             size_t part, int parts, long k0,
                                                             long k1, const char *pf, int pf0,
                                                             int pf1, const int na,
                                                             const int nb)
{
    for (long k = k0; k < k1; k++) {
        /* the next weight block's rows [pf0, pf1), line k - k0, into L2 */
        for (int i = pf0; i < pf1; i++)
            _mm_prefetch(pf + (size_t)i * rb + 64 * (k - k0), _MM_HINT_T1);
        _tile_loadd(4, a + 64 * k, (long)rb);
        if (na > 1)
            _tile_loadd(5, a + 16 * rb + 64 * k, (long)rb);
        for (int p = 0; p < parts; p++) {
            const uint16_t *bp = b + (size_t)p * part + (size_t)k * 512;
            _tile_loadd(6, bp, 64);
            if (nb > 1)
                _tile_loadd(7, bp + bstride, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (nb > 1)
                _tile_dpbf16ps(1, 4, 7);
            if (na > 1) {
                _tile_dpbf16ps(2, 5, 6);
                if (nb > 1)
                    _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
}

#define AMX_KCHUNK 64 /* k-steps (of 32 columns) per pass: 2048 columns; the B tiles of 128
                         tokens for one chunk are 512 KB (one part), in L2 */
#define AMX_MAX_TB 8  /* token blocks per pass (128 tokens) */

/* rows [r0, r1) with r0 % 16 == 0, tokens [t0, t0 + 16 ntb) of the packing. */
static void matmul_rows(const rp_tensor *w, long r0, long nr, const uint16_t *xb, int parts,
                        long tb0, long ntb, long n_tok, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    size_t rb = (size_t)cols * 2, part = (size_t)cols * 16, bstride = part * (size_t)parts;
    long kst = cols / 32;
    float acc[AMX_MAX_TB][32][16] __attribute__((aligned(64)));
    for (long r = 0; r < nr; r += 32) {
        int na = r + 32 <= nr ? 2 : 1;
        const char *a = (const char *)w->data + (size_t)(r0 + r) * rb;
        for (long k0 = 0; k0 < kst; k0 += AMX_KCHUNK) {
            long k1 = k0 + AMX_KCHUNK < kst ? k0 + AMX_KCHUNK : kst;
            /* the block after this one: the next chunk of these rows, or the next rows'
             * first chunk; its rows are prefetched a share per token-block pair */
            long nr_next = k1 < kst ? 16 * na : nr - r - 32 < 32 ? nr - r - 32 : 32;
            const char *pf = k1 < kst ? a + 64 * k1 : a + 32 * rb;
            long n_pass = (ntb + 1) / 2;
            for (long tb = 0; tb < ntb; tb += 2) {
                int nb = tb + 2 <= ntb ? 2 : 1;
                int pf0 = nr_next > 0 ? (int)(nr_next * (tb / 2) / n_pass) : 0;
                int pf1 = nr_next > 0 ? (int)(nr_next * (tb / 2 + 1) / n_pass) : 0;
                float *c0 = acc[tb][0], *c1 = acc[tb + (nb > 1)][0];
                if (k0 == 0) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                } else {
                    _tile_loadd(0, c0, 64);
                    _tile_loadd(1, c1, 64);
                    _tile_loadd(2, c0 + 256, 64);
                    _tile_loadd(3, c1 + 256, 64);
                }
                const uint16_t *b = xb + (size_t)(tb0 + tb) * bstride;
                if (na == 2 && nb == 2)
                    step_block(a, rb, b, bstride, part, parts, k0, k1, pf, pf0, pf1, 2, 2);
                else if (na == 2)
                    step_block(a, rb, b, bstride, part, parts, k0, k1, pf, pf0, pf1, 2, 1);
                else if (nb == 2)
                    step_block(a, rb, b, bstride, part, parts, k0, k1, pf, pf0, pf1, 1, 2);
                else
                    step_block(a, rb, b, bstride, part, parts, k0, k1, pf, pf0, pf1, 1, 1);
                _tile_stored(0, c0, 64);
                if (nb > 1)
                    _tile_stored(1, c1, 64);
                if (na > 1) {
                    _tile_stored(2, c0 + 256, 64);
                    if (nb > 1)
                        _tile_stored(3, c1 + 256, 64);
                }
            }
        }
        /* acc [tb][row][token] -> y [token][row] */
        int n_rows = 16 * na;
        for (long tb = 0; tb < ntb; tb++)
            for (int t = 0; t < 16; t++) {
                long tok = (tb0 + tb) * 16 + t;
                if (tok >= n_tok)
                    break;
                float *yt = y + tok * rows + r0 + r;
                for (int i = 0; i < n_rows; i++)
                    yt[i] = acc[tb][i][t];
            }
    }
}

/* Rows [r0, r0 + nr) in 16-row blocks; the last partial 16 rows are left to the caller. */
long rp_amx_matmul_bf16(const rp_tensor *w, long r0, long r1, const uint16_t *xb, int n_tok,
                        int parts, float *y)
{
    long nb = (n_tok + 15) / 16, nr = (r1 - r0) / 16 * 16;
    if (nr <= 0)
        return r0;
    config();
    for (long tb = 0; tb < nb; tb += AMX_MAX_TB)
        matmul_rows(w, r0, nr, xb, parts, tb, nb - tb < AMX_MAX_TB ? nb - tb : AMX_MAX_TB,
                    n_tok, y);
    _tile_release();
    return r0 + nr; /* rows [r0 + nr, r1) are not done */
}
