/* backend/cpu/x86/qx86_pack.h - the layout of quantized weights repacked at load for the tile
 * decode kernels (rp_qx_repack, kernels_qx86.h): tile and group sizes, shared by the repack
 * (qx86_pack.c), the AVX-512 kernels (kernels_qx86.c, kernels_qx86_prefill.c) and the AVX2
 * ones (kernels_qx86_avx2.c). Plain C, AVX2 intrinsics only under __AVX2__: safe to include
 * from a file of any ISA. */
#ifndef RP_BACKEND_CPU_X86_QX86_PACK_H
#define RP_BACKEND_CPU_X86_QX86_PACK_H

#include <stddef.h>
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "backend/backend_impl.h"

/* Most MLX groups / GGUF 32-blocks of a row the decode kernels take (their stack arrays). */
#define QX_MAX_GROUPS 512
#define QX_MAX_BLOCKS 1024

static inline int pk_ssz(rp_dtype sdt)
{
    return sdt == RP_DT_F32 ? 4 : 2;
}
static inline int pk_bits(rp_dtype dt)
{
    return dt == RP_DT_MLX4 || dt == RP_DT_Q4_0 ? 4 : 8;
}
static inline int pk_mlx(rp_dtype dt)
{
    return dt == RP_DT_MLX4 || dt == RP_DT_MLX8;
}
/* rows per tile */
static inline int pk_rows_per_tile(rp_dtype dt)
{
    return pk_bits(dt) == 4 ? 32 : 16;
}

/* Bytes of one 64-block of a tile's codes: 32 rows x 64 x 4 bits, or 16 x 64 x 8. */
#define PK_BLOCK 1024

/* Bytes of a tile's scales per group: MLX scales then biases, tile rows each (scale_dtype);
 * GGUF the two 32-blocks' f16 d, tile rows each. */
static inline size_t pk_scale_bytes(const rp_tensor *w)
{
    size_t tr = (size_t)pk_rows_per_tile(w->dtype);
    return pk_mlx(w->dtype) ? 2 * tr * (size_t)pk_ssz(w->scale_dtype) : 2 * tr * 2;
}

static inline int pk_blocks_per_group(const rp_tensor *w)
{
    return pk_mlx(w->dtype) ? w->group_size / 64 : 1;
}

static inline size_t pk_group_bytes(const rp_tensor *w)
{
    return (size_t)pk_blocks_per_group(w) * PK_BLOCK + pk_scale_bytes(w);
}

static inline long pk_n_groups(const rp_tensor *w)
{
    return (long)w->shape[1] / (64L * pk_blocks_per_group(w));
}

static inline size_t pk_tile_bytes(const rp_tensor *w)
{
    return (size_t)pk_n_groups(w) * pk_group_bytes(w);
}

/* The sum of 32 int8. The decode kernels take it once per run and work item, so in the
 * vector files (compiled with AVX2 or more) it is vectorised: the scalar loop was 1.8 of the
 * 15.5 us a 256-row x 2048 Q8_0 item took from cache on AVX2 (the same integers). */
static inline int32_t pk_sum32_i8(const int8_t *q)
{
#ifdef __AVX2__
    /* 1 x q summed in pairs (exact in int16), pairs of pairs, then across the lanes */
    __m256i v = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)q)),
        _mm256_set1_epi16(1));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
#else
    int32_t v = 0;
    for (int i = 0; i < 32; i++)
        v += q[i];
    return v;
#endif
}

/* The per-token sums the decode kernels add to their integer dot products, for tokens
 * [t, t + nt) of a (xg / xs hold nt rows): MLX, xg[j][g] = the exact f32 sum of x over group g (the
 * runs' sums in order); Q8_0, xs[j][k] = 128 x the int8 sum of run k (its codes are stored
 * + 128); Q4_0 needs neither. */
static inline void pk_act_sums(const rp_tensor *w, const rp_qact *a, int t, int nt,
                               float (*xg)[QX_MAX_GROUPS], int32_t (*xs)[QX_MAX_BLOCKS])
{
    long cols = (long)w->shape[1], nrun = cols / 32;
    for (int j = 0; j < nt; j++) {
        if (pk_mlx(w->dtype)) {
            long per = w->group_size / 32, ng = cols / w->group_size;
            const float *s = a->s + (long)(t + j) * nrun;
            for (long g = 0; g < ng; g++) {
                float v = 0.0f;
                for (long k = 0; k < per; k++)
                    v += s[g * per + k];
                xg[j][g] = v;
            }
        } else if (w->dtype == RP_DT_Q8_0) {
            const int8_t *q = a->q + (long)(t + j) * cols;
            for (long k = 0; k < nrun; k++)
                xs[j][k] = 128 * pk_sum32_i8(q + 32 * k);
        }
    }
}

#endif
