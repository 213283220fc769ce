/* backend/cpu/x86/kernels_qx86_prefill_avx2.c - prefill on weights repacked at load
 * (rp_qx_repack; layout in kernels_qx86.h) for CPUs with AVX2 but no AVX-512 VNNI or AMX:
 * rp_qx_packed_prefill_avx2, MLX4 / MLX8 / Q4_0 / Q8_0.
 *
 * The tile decode (kernels_qx86_avx2.c) unpacks each 64-byte chunk of codes (16 rows x 4
 * consecutive k) into 4 nibble vectors and runs 2 tokens over them (8 int16 accumulators, the
 * 4 code vectors and a broadcast fill AVX2's 16 registers), so per VPMADDUBSW + VPADDW pair
 * (32 multiply-adds) it adds a whole op of unpacking (load, and, shift, and) and broadcast.
 * A prefill has many tokens per weight, so here a pass takes one 32-byte half of each chunk
 * (rows 8h .. 8h + 7 of the 16), unpacks it into 2 nibble vectors and runs PF_NT = 6 tokens
 * over them: 12 int16 accumulators + 2 code vectors + a broadcast + a product, the mask a
 * memory operand; 0.75 ops of unpacking and broadcast per pair. A tile is read twice per
 * token block (one pass per half); the thread's rows (a work item, at most 256) are re-read
 * from L2 for each block of tokens.
 *
 * Measured on a Zen 3 (2 VPMADDUBSW a cycle, 4 vector pipes; cycles at the 3.05 GHz of a
 * dependent-add loop): VPMADDUBSW alone 2.1 a cycle, VPMADDUBSW + VPADDW pairs from registers
 * 1.7 (the ceiling: 54 multiply-adds a cycle), this inner loop alone 1.46 pairs, the whole
 * kernel 1.0 (Q4_0, one thread, 2048 x 2048 x 128 tokens; the decode kernel 0.77): the rest
 * is the per-block f32 work the bit-exact contract fixes (about 18% with it removed) and the
 * int16 to int32 widening.
 *
 * The integer sums are the decode kernel's (the same nibbles, the same int16 groups of 8
 * chunks with the same bound: VPMADDUBSW pairs of nibble x int8 <= 2 x 15 x 128, 8 chunks
 * <= 30720 < 32767), and the f32 operations per (row, token) are the same in the same order
 * (per 64-block or 32-block: convert, times scale x activation scale, accumulate; bias or
 * offset), so the results equal rp_qx_packed_decode_avx2's bit for bit (quant_test asserts it).
 *
 * Threading: pure functions of their arguments. Compiled with the AVX2 flags; only called when
 * rp_cpu() reports AVX2 and FMA.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/x86/kernels_qx86.h"
#include "backend/cpu/x86/qx86_avx2_inline.h"
#include "backend/cpu/x86/qx86_pack.h"

#define P2 static inline __attribute__((always_inline))

/* Tokens per pass: 2 x PF_NT int16 sums, 2 code vectors, a broadcast and a product in registers */
#define PF_NT 6

/* 8 chunks (the 32-byte halves at cp + 64 i: 8 rows x 4 k each, i < 8) into 6 tokens'
 * int16 sums: lo[j] = sum of maddubs(low nibbles, x_j), hi[j] the same of the high
 * nibbles, x_j the 4 int8 at xa + j x st (j < 3) or xb + (j - 3) x st, plus 4 i, broadcast.
 * In asm because GCC, given this in intrinsics, keeps half the 12 accumulators on the stack:
 * the 16 registers are exactly enough (12 sums, 2 code vectors, a broadcast and a product;
 * the mask a memory operand). */
#define PF_TOK(x, l, h)                                                                            \
    "vpbroadcastd " x ", %[b]\n\t"                                                                 \
    "vpmaddubsw %[b], %[c0], %[p]\n\t"                                                             \
    "vpaddw %[p], %[" l "], %[" l "]\n\t"                                                          \
    "vpmaddubsw %[b], %[c1], %[p]\n\t"                                                             \
    "vpaddw %[p], %[" h "], %[" h "]\n\t"
/* the first chunk's products are the sums: no zeroing, no add */
#define PF_TOK0(x, l, h)                                                                           \
    "vpbroadcastd " x ", %[b]\n\t"                                                                 \
    "vpmaddubsw %[b], %[c0], %[" l "]\n\t"                                                         \
    "vpmaddubsw %[b], %[c1], %[" h "]\n\t"
#define PF_CHUNK(tok, co, xo)                                                                      \
    "vmovdqa " co "(%[cp]), %[c0]\n\t"                                                             \
    "vpsrlw $4, %[c0], %[c1]\n\t"                                                                  \
    "vpand %[m4], %[c0], %[c0]\n\t"                                                                \
    "vpand %[m4], %[c1], %[c1]\n\t" tok(xo "(%[xa])", "l0", "h0")                                  \
        tok(xo "(%[xa],%[st])", "l1", "h1") tok(xo "(%[xa],%[st],2)", "l2", "h2")                  \
            tok(xo "(%[xb])", "l3", "h3") tok(xo "(%[xb],%[st])", "l4", "h4")                      \
                tok(xo "(%[xb],%[st],2)", "l5", "h5")
P2 void pf_chunks6(const uint8_t *cp, const int8_t *xa, const int8_t *xb, long st,
                   const __m256i *m4, __m256i lo[6], __m256i hi[6])
{
    __m256i c0, c1, b, p;
    __asm__(PF_CHUNK(PF_TOK0, "0", "0") PF_CHUNK(PF_TOK, "64", "4") PF_CHUNK(PF_TOK, "128", "8")
                PF_CHUNK(PF_TOK, "192", "12") PF_CHUNK(PF_TOK, "256", "16")
                    PF_CHUNK(PF_TOK, "320", "20") PF_CHUNK(PF_TOK, "384", "24")
                        PF_CHUNK(PF_TOK, "448", "28")
            : [l0] "=&x"(lo[0]), [l1] "=&x"(lo[1]), [l2] "=&x"(lo[2]), [l3] "=&x"(lo[3]),
              [l4] "=&x"(lo[4]), [l5] "=&x"(lo[5]), [h0] "=&x"(hi[0]), [h1] "=&x"(hi[1]),
              [h2] "=&x"(hi[2]), [h3] "=&x"(hi[3]), [h4] "=&x"(hi[4]), [h5] "=&x"(hi[5]),
              [c0] "=&x"(c0), [c1] "=&x"(c1), [b] "=&x"(b), [p] "=&x"(p)
            : [cp] "r"(cp), [xa] "r"(xa), [xb] "r"(xb), [st] "r"(st), [m4] "m"(*m4)
            : "memory");
}

/* Integer sums of one 64-block of a tile (codes at wp) for half hh of each chunk (its rows
 * 8 hh .. 8 hh + 7) with 6 tokens (xq[j]: token j's activations at the block; xq[j] = xq[0] +
 * j x st), per 32-block k (chunks 8k .. 8k + 7) as 8-lane vectors, lane = row:
 *   4-bit: s[j][k][0] the low nibbles (tile rows 8 hh ..), s[j][k][1] the high (16 + 8 hh ..);
 *   8-bit: s[j][k][0] = low + 16 x high (tile rows 8 hh ..). */
P2 void pf_dots(const uint8_t *wp, const int8_t *xq, long st, const int hh, const int bits,
                __m256i s[PF_NT][2][2])
{
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) {
        __m256i lo[PF_NT], hi[PF_NT];
        pf_chunks6(wp + 512 * k + 32 * hh, xq + 32 * k, xq + 3 * st + 32 * k, st, &m4, lo, hi);
#pragma GCC unroll 6
        for (int j = 0; j < PF_NT; j++) {
            __m256i lw = _mm256_madd_epi16(lo[j], ones), hw = _mm256_madd_epi16(hi[j], ones);
            if (bits == 4) {
                s[j][k][0] = lw;
                s[j][k][1] = hw;
            } else {
                s[j][k][0] = _mm256_add_epi32(lw, _mm256_slli_epi32(hw, 4));
            }
        }
    }
}

/* One pass (half hh) of an MLX tile with 6 tokens from t (xg: their exact group sums);
 * acc[j][v]: pf_dots's row vectors. As a2_mlx_tile per (row, token): per 64-block
 * acc += f32(int sum) x (scale x activation scale); per group acc += bias x group sum. */
P2 void pf_mlx_pass(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                    const float (*xg)[QX_MAX_GROUPS], const int hh, const int bits,
                    __m256 acc[PF_NT][2])
{
    long cols = (long)w->shape[1], ng = pk_n_groups(w), nb = cols / 64;
    const int nv = bits == 4 ? 2 : 1, tr = bits == 4 ? 32 : 16;
    const int c[2] = {hh, 2 + hh}; /* the row vectors' 8-row groups in the tile */
    int bpg = w->group_size / 64;
    size_t gb = pk_group_bytes(w), ssz = (size_t)pk_ssz(w->scale_dtype);
    rp_dtype sdt = w->scale_dtype;
#pragma GCC unroll 6
    for (int j = 0; j < PF_NT; j++)
        acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (long g = 0; g < ng; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + (size_t)bpg * PK_BLOCK;
        for (int b = 0; b < bpg; b++) {
            long kb = g * bpg + b;
            __m256i s[PF_NT][2][2];
            pf_dots(gp + (size_t)b * PK_BLOCK, a->q + (long)t * cols + 64 * kb, cols, hh, bits, s);
            __m256 sc[2];
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++)
                sc[v] = a2_load_sc(sdt, sp + 8 * (size_t)c[v] * ssz);
#pragma GCC unroll 6
            for (int j = 0; j < PF_NT; j++) {
                __m256 dx = _mm256_set1_ps(a->d[(long)(t + j) * nb + kb]);
#pragma GCC unroll 2
                for (int v = 0; v < nv; v++) {
                    __m256i sum = _mm256_add_epi32(s[j][0][v], s[j][1][v]);
                    acc[j][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc[v], dx),
                                                acc[j][v]);
                }
            }
        }
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            __m256 bias = a2_load_sc(sdt, sp + ((size_t)tr + 8 * (size_t)c[v]) * ssz);
#pragma GCC unroll 6
            for (int j = 0; j < PF_NT; j++)
                acc[j][v] = _mm256_fmadd_ps(bias, _mm256_set1_ps(xg[j][g]), acc[j][v]);
        }
    }
}

/* One pass (half hh) of a GGUF tile with 6 tokens from t (xs: Q8_0's per-run int8 sums x
 * 128), as a2_gg_tile per (row, token): per 32-block, Q4_0 u = f32(sum) x dx - 8 x (run sum of
 * x), Q8_0 u = f32(sum - 128 x int8 run sum) x dx; acc += d_w x u. */
P2 void pf_gg_pass(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                   const int32_t (*xs)[QX_MAX_BLOCKS], const int hh, const int bits,
                   __m256 acc[PF_NT][2])
{
    long cols = (long)w->shape[1], ng = cols / 64, nrun = cols / 32;
    const int nv = bits == 4 ? 2 : 1, tr = bits == 4 ? 32 : 16;
    const int c[2] = {hh, 2 + hh};
    size_t gb = PK_BLOCK + 4 * (size_t)tr;
#pragma GCC unroll 6
    for (int j = 0; j < PF_NT; j++)
        acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (long g = 0; g < ng; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + PK_BLOCK;
        __m256i s[PF_NT][2][2];
        pf_dots(gp, a->q + (long)t * cols + 64 * g, cols, hh, bits, s);
#pragma GCC unroll 2
        for (int b = 0; b < 2; b++) {
            __m256 d[2];
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++)
                d[v] = _mm256_cvtph_ps(_mm_loadu_si128(
                    (const __m128i *)(sp + 2 * ((size_t)b * tr + 8 * (size_t)c[v]))));
#pragma GCC unroll 6
            for (int j = 0; j < PF_NT; j++) {
                long run = (long)(t + j) * nrun + 2 * g + b;
                __m256 dxb = _mm256_set1_ps(a->d[run]);
                if (bits == 4) {
                    __m256 off = _mm256_set1_ps(-8.0f * a->s[run]);
#pragma GCC unroll 2
                    for (int v = 0; v < 2; v++) {
                        __m256 u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j][b][v]), dxb, off);
                        acc[j][v] = _mm256_fmadd_ps(d[v], u, acc[j][v]);
                    }
                } else {
                    __m256i corr = _mm256_set1_epi32(xs[j][2 * g + b]);
                    __m256 u =
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[j][b][0], corr)), dxb);
                    acc[j][0] = _mm256_fmadd_ps(d[0], u, acc[j][0]);
                }
            }
        }
    }
}

/* Tiles of rows [r0, r1) x 6 tokens from t, both halves of each; kind: the weight dtype. */
P2 void pf_rows(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a, int t,
                const float (*xg)[QX_MAX_GROUPS], const int32_t (*xs)[QX_MAX_BLOCKS], float *y,
                const rp_dtype kind)
{
    long rows = (long)w->shape[0];
    const int bits = kind == RP_DT_MLX4 || kind == RP_DT_Q4_0 ? 4 : 8;
    const int tr = bits == 4 ? 32 : 16, nv = bits == 4 ? 2 : 1;
    size_t tb = pk_tile_bytes(w);
    for (long r = r0; r < r1; r += tr) {
        const uint8_t *tp = pk + (size_t)(r / tr) * tb;
#pragma GCC unroll 2
        for (int hh = 0; hh < 2; hh++) {
            __m256 acc[PF_NT][2];
            if (kind == RP_DT_MLX4 || kind == RP_DT_MLX8)
                pf_mlx_pass(w, tp, a, t, xg, hh, bits, acc);
            else
                pf_gg_pass(w, tp, a, t, xs, hh, bits, acc);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) {
                long row = r + 8 * (hh + 2 * v), n_valid = r1 - row;
                if (n_valid <= 0) continue;
#pragma GCC unroll 6
                for (int j = 0; j < PF_NT; j++)
                    a2_store_rows(y + (long)(t + j) * rows + row, acc[j][v], n_valid);
            }
        }
    }
}

/* Blocks of 6 tokens, each over all the rows (a block's activation sums made once, its
 * activations re-read from L1 or L2 while the rows stream); the last n_tok % 6 tokens go to
 * the decode kernel (its 2-token passes cost less than a 6-token pass for up to 5 tokens,
 * and give the same bits). */
P2 void pf_prefill(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a,
                   int n_tok, float *y, const rp_dtype kind)
{
    float xg[PF_NT][QX_MAX_GROUPS];
    int32_t xs[PF_NT][QX_MAX_BLOCKS];
    int t = 0;
    for (; t + PF_NT <= n_tok; t += PF_NT) {
        pk_act_sums(w, a, t, PF_NT, xg, xs);
        pf_rows(w, pk, r0, r1, a, t, xg, xs, y, kind);
    }
    if (t < n_tok) {
        long cols = (long)w->shape[1], nd = a->run64 ? cols / 64 : cols / 32;
        rp_qact rest = {.q = a->q + (long)t * cols,
                        .d = a->d + (long)t * nd,
                        .s = a->s + (long)t * (cols / 32),
                        .run64 = a->run64};
        rp_qx_packed_decode_avx2(w, pk, r0, r1, &rest, n_tok - t, y + (long)t * w->shape[0]);
    }
}

void rp_qx_packed_prefill_avx2(const rp_tensor *w, const void *packed, long r0, long r1,
                               const rp_qact *a, int n_tok, float *y)
{
    const uint8_t *pk = packed;
    switch (w->dtype) {
    case RP_DT_MLX4:
        pf_prefill(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX4);
        return;
    case RP_DT_MLX8:
        pf_prefill(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX8);
        return;
    case RP_DT_Q4_0:
        pf_prefill(w, pk, r0, r1, a, n_tok, y, RP_DT_Q4_0);
        return;
    default:
        pf_prefill(w, pk, r0, r1, a, n_tok, y, RP_DT_Q8_0);
        return;
    }
}
