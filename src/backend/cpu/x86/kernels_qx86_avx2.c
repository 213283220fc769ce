/* backend/cpu/x86/kernels_qx86_avx2.c - the tile decode on weights repacked at load
 * (rp_qx_repack; layout in kernels_qx86.h) for CPUs with AVX2 but no AVX-512 VNNI (AMD Zen 2
 * and 3, Intel before Ice Lake): rp_qx_packed_decode_avx2.
 *
 * The AVX-512 kernel (kernels_qx86.c) feeds each 64-byte chunk of a tile (16 rows x 4
 * consecutive k, one int32 lane per row) to VPDPBUSD against the token's 4 int8 activations
 * broadcast. Here a chunk is two 256-bit halves (rows 0..7, 8..15) and VPDPBUSD becomes
 * VPMADDUBSW (u8 codes x s8 activations, pairs summed into int16) plus one VPMADDWD by ones per
 * 8 chunks. VPMADDUBSW saturates at 32767, so codes go in as nibbles (<= 15): a pair is at most
 * 2 x 15 x 128 = 3840 and 8 chunks' pairs sum to at most 30720, exactly. 4-bit: a code byte is
 * row i (low nibble) and row 16 + i (high); 8-bit: the high nibble is the same row's, weighted
 * 16 after the widening (lo + 16 hi, exact). The integer sums are the AVX-512 kernel's, and
 * the f32 work per row (convert, times scale x activation scale, bias or offset) is the same
 * operations in the same order, so both give the same bits.
 *
 * Tokens go 2 or 1 per pass over a tile (AVX2 has 16 vector registers: 2 tokens x 4 row groups
 * of int16 sums, the 4 code vectors and the broadcast fill them). Each int16 sum is held to one
 * chain of adds in a register by an empty asm: left alone, GCC reassociated a half-block's 8
 * adds into a tree, computed the 8 products first and parked them on the stack. That spilling
 * loop reached the same instruction rate from cache but streamed worse from memory (kbench
 * decode, 2 threads, ratio to the probe: MLX4 0.79 -> 0.86, Q4_0 0.84 -> 0.87), and software
 * prefetch only helps a loop without the spills (a standalone copy of this loop: 0.80 -> 0.86
 * with prefetches 1 KB ahead; in the kernel itself they still lost, see A2_PFD4).
 *
 * Tried and dropped for 8-bit: codes in whole by sign (VPABSB / VPSIGNB, a VPMADDWD a chunk,
 * 2 products a chunk instead of 4): Q8_0 7% faster from cache, no faster from memory, MLX8
 * 0.91 -> 0.84 of the probe (kbench, 6 interleaved rounds).
 *
 * Threading: pure functions of their arguments. Compiled with the AVX2 flags; only called
 * when rp_cpu() reports AVX2.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/x86/kernels_qx86.h"
#include "backend/cpu/x86/qx86_avx2_inline.h"
#include "backend/cpu/x86/qx86_pack.h"

#define A2 static inline __attribute__((always_inline))

/* Software prefetch distance in the tile stream (0: none) for 4-bit and 8-bit codes, as
 * kernels_qx86.c's PK_PFD (every 64-byte line of a group, its scale lines included). On AMD
 * Zen 3 none is best for 4 bits: a thread's rows are one stream the L2 streamer follows, and
 * the prefetches add load-port work to a loop near the core's issue rate. kbench MLX4 decode
 * (3 interleaved rounds, ratio to the probe): 1 thread 0.81-0.85 with none, 0.76-0.78 at
 * 1.5 KB (T0), 0.70-0.78 at 768 B, 0.63-0.65 at 3 KB, 0.65-0.69 at 4 / 8 KB (T1). 8 bits keep
 * 1.5 KB: without, kbench Q8_0 gained but the whole 1B model's MLX8 decode lost 6-7% in two
 * interleaved runs (bench-quant.sh). Rechecked with the sums in registers (kbench, 2 threads,
 * 4-5 interleaved rounds, medians): 4-bit still best with none (Q4_0 0.85 against 0.79-0.80
 * at 1 KB T0 or NTA, 0.73 at 2 KB; one thread 0.80 against 0.72, 0.68, 0.60 at 1, 2, 4 KB);
 * 8-bit without: MLX8 0.87 against 0.89, Q8_0 0.85 against 0.83, kept. */
#ifndef A2_PFD4
#define A2_PFD4 0
#endif
#ifndef A2_PFD8
#define A2_PFD8 0
#endif
#define A2_PFD(bits) ((bits) == 4 ? A2_PFD4 : A2_PFD8)
#ifndef A2_PFH
#define A2_PFH _MM_HINT_T0
#endif

A2 __m256i a2_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

A2 void a2_prefetch(const uint8_t *p, size_t bytes, const int bits)
{
    for (size_t o = 0; A2_PFD(bits) > 0 && o < bytes; o += 64)
        _mm_prefetch((const char *)p + o + A2_PFD(bits), A2_PFH);
}

A2 void a2_zero(__m256 acc[2][4], const int NT)
{
#pragma GCC unroll 2
    for (int j = 0; j < NT; j++)
        for (int c = 0; c < 4; c++)
            acc[j][c] = _mm256_setzero_ps();
}

/* Integer sums of one 64-block of a tile with NT tokens' activations xq[j] (offset to the
 * block), per half-block h (k 0..31, 32..63) as 8-lane vectors, lane = row:
 *   4-bit: s[j][h][c], c the rows 8c .. 8c + 7 (0..31);
 *   8-bit: s[j][h][c], c < 2 (rows 0..15). */
A2 void a2_dots(const uint8_t *wp, const int8_t *const *xq, const int bits, const int NT,
                __m256i s[2][2][4])
{
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* [token][code vector]: 4-bit rows 0-7, 8-15, 16-23, 24-31; 8-bit the low nibbles of
         * rows 0-7, 8-15, then their high nibbles */
        __m256i a[2][4];
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++)
            for (int c = 0; c < 4; c++)
                a[j][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int p = 8 * h; p < 8 * h + 8; p++) {
            if (A2_PFD(bits) > 0)
                _mm_prefetch((const char *)wp + 64 * p + A2_PFD(bits), A2_PFH);
            __m256i v0 = _mm256_load_si256((const __m256i *)(wp + 64 * p));
            __m256i v1 = _mm256_load_si256((const __m256i *)(wp + 64 * p + 32));
            __m256i cv[4] = {_mm256_and_si256(v0, m4), _mm256_and_si256(v1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4)};
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++) {
                __m256i x = a2_bcast(xq[j] + 4 * p);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    a[j][c] = _mm256_add_epi16(a[j][c], _mm256_maddubs_epi16(cv[c], x));
                    /* keeps each sum one chain in a register: otherwise GCC reassociates
                     * the 8 chunks' adds into a tree and parks the products on the stack */
                    __asm__("" : "+x"(a[j][c]));
                }
            }
        }
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++) {
            __m256i w[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                w[c] = _mm256_madd_epi16(a[j][c], ones);
            if (bits == 4) {
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    s[j][h][c] = w[c];
            } else {
                s[j][h][0] = _mm256_add_epi32(w[0], _mm256_slli_epi32(w[2], 4));
                s[j][h][1] = _mm256_add_epi32(w[1], _mm256_slli_epi32(w[3], 4));
            }
        }
    }
}

/* One MLX tile x NT tokens (t: the tokens' first row in a; xg: their exact group sums);
 * out[j][c]: rows 8c .. 8c + 7 (8-bit: c < 2). As pk_mlx_tile, per 64-block:
 * acc += f32(int sum) x (scale x activation scale); per group: acc += bias x group sum. */
A2 void a2_mlx_tile(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                    const float (*xg)[QX_MAX_GROUPS], const int bits, const int NT,
                    __m256 out[2][4], long g0, long g1)
{
    long cols = (long)w->shape[1], nb = cols / 64;
    const int nc = bits == 4 ? 4 : 2, tr = 8 * nc; /* 8-row groups, rows per tile */
    int bpg = w->group_size / 64;
    size_t gb = pk_group_bytes(w), ssz = (size_t)pk_ssz(w->scale_dtype);
    rp_dtype sdt = w->scale_dtype;
    __m256(*acc)[4] = out; /* the tile's sums, accumulated in place */
    for (long g = g0; g < g1; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + (size_t)bpg * PK_BLOCK;
        a2_prefetch(sp, gb - (size_t)bpg * PK_BLOCK, bits);
        for (int b = 0; b < bpg; b++) {
            long kb = g * bpg + b;
            const int8_t *xq[2];
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++)
                xq[j] = a->q + (long)(t + j) * cols + 64 * kb;
            __m256i s[2][2][4];
            a2_dots(gp + (size_t)b * PK_BLOCK, xq, bits, NT, s);
#pragma GCC unroll 2
            for (int j = 0; j < NT; j++) {
                __m256 dx = _mm256_set1_ps(a->d[(long)(t + j) * nb + kb]);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++) {
                    __m256i sum = _mm256_add_epi32(s[j][0][c], s[j][1][c]);
                    __m256 sc = a2_load_sc(sdt, sp + 8 * (size_t)c * ssz);
                    acc[j][c] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sc, dx), acc[j][c]);
                }
            }
        }
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++) {
            __m256 xs = _mm256_set1_ps(xg[j][g]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                acc[j][c] = _mm256_fmadd_ps(
                    a2_load_sc(sdt, sp + ((size_t)tr + 8 * (size_t)c) * ssz), xs, acc[j][c]);
        }
    }
}

/* One GGUF tile x NT tokens (natural 32-runs; xs: Q8_0's per-run int8 sums x 128), as
 * pk_gg_tile: per 32-block, Q4_0 u = f32(sum) x dx - 8 x (run sum of x), Q8_0 u = f32(sum -
 * 128 x int8 run sum) x dx; acc += d_w x u. */
A2 void a2_gg_tile(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                   const int32_t (*xs)[QX_MAX_BLOCKS], const int bits, const int NT,
                   __m256 out[2][4], long g0, long g1)
{
    long cols = (long)w->shape[1], nrun = cols / 32;
    const int nc = bits == 4 ? 4 : 2, tr = 8 * nc;
    size_t gb = PK_BLOCK + 4 * (size_t)tr;
    __m256(*acc)[4] = out; /* the tile's sums, accumulated in place */
    for (long g = g0; g < g1; g++) {
        const uint8_t *gp = tp + (size_t)g * gb, *sp = gp + PK_BLOCK;
        a2_prefetch(sp, gb - PK_BLOCK, bits);
        const int8_t *xq[2];
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++)
            xq[j] = a->q + (long)(t + j) * cols + 64 * g;
        __m256i s[2][2][4];
        a2_dots(gp, xq, bits, NT, s);
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++) {
            const float *dx = a->d + (long)(t + j) * nrun + 2 * g;
            const float *sx = a->s + (long)(t + j) * nrun + 2 * g;
#pragma GCC unroll 2
            for (int b = 0; b < 2; b++) {
                __m256 dxb = _mm256_set1_ps(dx[b]);
                __m256 off = _mm256_set1_ps(-8.0f * sx[b]);
                __m256i corr = _mm256_set1_epi32(bits == 4 ? 0 : xs[j][2 * g + b]);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++) {
                    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(
                        (const __m128i *)(sp + 2 * ((size_t)b * tr + 8 * (size_t)c))));
                    __m256 u;
                    if (bits == 4)
                        u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j][b][c]), dxb, off);
                    else
                        u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[j][b][c], corr)),
                                          dxb);
                    acc[j][c] = _mm256_fmadd_ps(d, u, acc[j][c]);
                }
            }
        }
    }
}

/* groups [g0, g1) of the tile at tp, added to out */
A2 void a2_tile_part(const rp_tensor *w, const uint8_t *tp, const rp_qact *a, int t,
                     const float (*xg)[QX_MAX_GROUPS], const int32_t (*xs)[QX_MAX_BLOCKS],
                     const rp_dtype kind, const int NT, __m256 out[2][4], long g0, long g1)
{
    if (kind == RP_DT_MLX4)
        a2_mlx_tile(w, tp, a, t, xg, 4, NT, out, g0, g1);
    else if (kind == RP_DT_MLX8)
        a2_mlx_tile(w, tp, a, t, xg, 8, NT, out, g0, g1);
    else if (kind == RP_DT_Q4_0)
        a2_gg_tile(w, tp, a, t, xs, 4, NT, out, g0, g1);
    else
        a2_gg_tile(w, tp, a, t, xs, 8, NT, out, g0, g1);
}

A2 void a2_store_tile(float *y, long rows, long r, long r1, int t, __m256 out[2][4], int tr,
                      const int NT)
{
    for (int c = 0; c < tr / 8; c++) {
        long nv = r1 - r - 8 * c;
        if (nv <= 0) break;
#pragma GCC unroll 2
        for (int j = 0; j < NT; j++)
            a2_store_rows(y + (long)(t + j) * rows + r + 8 * c, out[j][c], nv);
    }
}

/* S tiles of one token at once, S streams through memory: tiles i, q + i, .., (S - 1) q + i of
 * the q S tiles from row r0, for each i < q, a group of each in turn. Why: see a2_rows. */
A2 void a2_streams(const rp_tensor *w, const uint8_t *pk, long r0, long r1, long q,
                   const rp_qact *a, int t, const float (*xg)[QX_MAX_GROUPS],
                   const int32_t (*xs)[QX_MAX_BLOCKS], float *y, const rp_dtype kind, const int S)
{
    long rows = (long)w->shape[0], ng = pk_n_groups(w);
    const int tr = pk_rows_per_tile(kind);
    size_t tb = pk_tile_bytes(w);
    for (long i = 0; i < q; i++) {
        __m256 o[4][2][4];
        const uint8_t *tps[4];
#pragma GCC unroll 4
        for (int k = 0; k < S; k++) {
            a2_zero(o[k], 1);
            tps[k] = pk + (size_t)((r0 + (k * q + i) * tr) / tr) * tb;
        }
        for (long g = 0; g < ng; g++)
#pragma GCC unroll 4
            for (int k = 0; k < S; k++)
                a2_tile_part(w, tps[k], a, t, xg, xs, kind, 1, o[k], g, g + 1);
#pragma GCC unroll 4
        for (int k = 0; k < S; k++)
            a2_store_tile(y, rows, r0 + (k * q + i) * tr, r1, t, o[k], tr, 1);
    }
}

/* Tiles of rows [r0, r1) x NT tokens from t; kind: the weight dtype.
 * One token (decode) reads 4 tiles at once (2 when fewer are left), a 64-block group of each
 * in turn, so a thread keeps 4 streams going through memory where one tile after the other
 * was one. The tile loop's work per byte (18 vector ops a 64-byte chunk at 4 bits) keeps few
 * loads in flight, and one stream left each thread short of its share of the bandwidth:
 * kbench decode, 2 threads, ratio to the probe (3-4 interleaved rounds, medians), one stream
 * against 2 and 4: Q4_0 0.84 / 0.94 / 0.95, MLX4 0.81 / 0.93 / 0.94, Q8_0 0.82 / 0.91 / 0.97,
 * MLX8 0.85 / 0.92 / 0.94 (one thread: Q4_0 0.81 -> 0.94 with 2). A group at a time beat 2 or
 * 4 (Q4_0 0.95 / 0.90 / 0.89). Each tile's sums take its groups in order, as before: the same
 * bits. From cache (one thread, a matrix repeated) 4-bit runs as before (Q4_0 43-44 GB/s) but
 * Q8_0 lost (37 -> 29 GB/s for 256 x 2048, no longer prefetched): decode's weights come from
 * memory, which is what this is tuned for. */
A2 void a2_rows(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a, int t,
                const float (*xg)[QX_MAX_GROUPS], const int32_t (*xs)[QX_MAX_BLOCKS], float *y,
                const rp_dtype kind, const int NT)
{
    long rows = (long)w->shape[0], ng = pk_n_groups(w);
    const int tr = pk_rows_per_tile(kind);
    size_t tb = pk_tile_bytes(w);
    long nt = (r1 - r0 + tr - 1) / tr, r = r0;
    if (NT == 1 && nt >= 4) {
        long q = nt / 4;
        a2_streams(w, pk, r, r1, q, a, t, xg, xs, y, kind, 4);
        r += 4 * q * tr;
        nt -= 4 * q;
    }
    if (NT == 1 && nt >= 2) {
        a2_streams(w, pk, r, r1, nt / 2, a, t, xg, xs, y, kind, 2);
        r += 2 * (nt / 2) * tr;
    }
    for (; r < r1; r += tr) {
        __m256 out[2][4];
        a2_zero(out, NT);
        a2_tile_part(w, pk + (size_t)(r / tr) * tb, a, t, xg, xs, kind, NT, out, 0, ng);
        a2_store_tile(y, rows, r, r1, t, out, tr, NT);
    }
}

A2 void a2_decode(const rp_tensor *w, const uint8_t *pk, long r0, long r1, const rp_qact *a,
                  int n_tok, float *y, const rp_dtype kind)
{
    float xg[2][QX_MAX_GROUPS];
    int32_t xs[2][QX_MAX_BLOCKS];
    for (int t = 0; t < n_tok;) {
        int nt = n_tok - t >= 2 ? 2 : 1;
        pk_act_sums(w, a, t, nt, xg, xs);
        if (nt == 2)
            a2_rows(w, pk, r0, r1, a, t, xg, xs, y, kind, 2);
        else
            a2_rows(w, pk, r0, r1, a, t, xg, xs, y, kind, 1);
        t += nt;
    }
}

void rp_qx_packed_decode_avx2(const rp_tensor *w, const void *packed, long r0, long r1,
                              const rp_qact *a, int n_tok, float *y)
{
    const uint8_t *pk = packed;
    switch (w->dtype) {
    case RP_DT_MLX4:
        a2_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX4);
        return;
    case RP_DT_MLX8:
        a2_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_MLX8);
        return;
    case RP_DT_Q4_0:
        a2_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_Q4_0);
        return;
    default:
        a2_decode(w, pk, r0, r1, a, n_tok, y, RP_DT_Q8_0);
        return;
    }
}

/* The sum of 32 floats in _mm512_reduce_add_ps's order over two 16-lane halves (v0 + v1,
 * then 8, 4, 2 lanes): rp_qx_quant_act's run sums, bit for bit. */
A2 float a2_sum32(const float *p)
{
    __m256 h = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p + 8), _mm256_loadu_ps(p + 24)),
                             _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 16)));
    __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    q = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_shuffle_ps(q, q, 1));
}

/* n32 x 32 floats at p scaled by id, rounded to nearest even, into n32 x 32 int8 at q
 * (|p x id| <= 127: no saturation happens). */
A2 void a2_round_i8(const float *p, int n32, __m256 id, int8_t *q)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < n32; b++) {
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * b), id));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * b + 8), id));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * b + 16), id));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * b + 24), id));
        /* the packs work per 128-bit lane: 4-byte groups come out as 0 2 4 6 1 3 5 7 */
        __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), _mm256_permutevar8x32_epi32(v, order));
    }
}

A2 float a2_amax(const float *p, int n)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(p + i), abs));
    __m128 h = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

void rp_qx_quant_act_avx2(const float *x, int n_tok, long cols, int run64, int8_t *q, float *d,
                          float *s)
{
    long nrun = cols / 32, per = run64 ? 64 : 32;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (long)t * cols;
        for (long k = 0; k < nrun; k++)
            s[(long)t * nrun + k] = a2_sum32(xt + 32 * k);
        for (long k = 0; k < cols / per; k++) {
            const float *p = xt + per * k;
            float amax = a2_amax(p, (int)per);
            a2_round_i8(p, (int)(per / 32), _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f),
                        q + (long)t * cols + per * k);
            d[(long)t * (cols / per) + k] = amax / 127.0f;
        }
    }
}
