/* backend/cpu/x86/qx86_pack.c - quantized weights repacked at load into the tile layout of
 * the decode kernels (layout: kernels_qx86.h, sizes: qx86_pack.h). Plain C, compiled without
 * ISA flags, so the repack runs on any x86-64 the AVX2 or AVX-512 kernels then read it on. */
#include <string.h>

#include "backend/cpu/x86/kernels_qx86.h"
#include "backend/cpu/x86/qx86_pack.h"

int rp_qx_repack_fits(const rp_tensor *w)
{
    if (w->n_dims != 2 || w->shape[1] % 64 != 0 || w->shape[0] < 1) return 0;
    long cols = (long)w->shape[1];
    if (pk_mlx(w->dtype))
        return (w->group_size == 64 || w->group_size == 128) && cols % w->group_size == 0 &&
               cols / w->group_size <= QX_MAX_GROUPS &&
               (w->scale_dtype == RP_DT_F32 || w->scale_dtype == RP_DT_F16 ||
                w->scale_dtype == RP_DT_BF16);
    return (w->dtype == RP_DT_Q4_0 || w->dtype == RP_DT_Q8_0) && cols / 32 <= QX_MAX_BLOCKS;
}

size_t rp_qx_repack_bytes(const rp_tensor *w)
{
    long tr = pk_rows_per_tile(w->dtype);
    return (size_t)((w->shape[0] + tr - 1) / tr) * pk_tile_bytes(w);
}

long rp_qx_repack_tiles(const rp_tensor *w)
{
    long tr = pk_rows_per_tile(w->dtype);
    return (long)((w->shape[0] + tr - 1) / tr);
}

int rp_qx_repack_run64(rp_dtype dt)
{
    return pk_mlx(dt);
}

/* The 64 unsigned codes of row r, columns k0 .. k0 + 63 (MLX: q; Q4_0: the nibble, offset 8
 * kept; Q8_0: q + 128); zeros past the last row. */
static void pk_codes(const rp_tensor *w, long r, long k0, uint8_t *out)
{
    long cols = (long)w->shape[1];
    if (r >= w->shape[0]) {
        memset(out, 0, 64);
        return;
    }
    const uint8_t *d = w->data;
    switch (w->dtype) {
    case RP_DT_MLX4: {
        const uint8_t *p = d + (size_t)r * (size_t)(cols / 2) + (size_t)(k0 / 2);
        for (int i = 0; i < 32; i++) {
            out[2 * i] = p[i] & 15;
            out[2 * i + 1] = p[i] >> 4;
        }
        return;
    }
    case RP_DT_MLX8:
        memcpy(out, d + (size_t)r * (size_t)cols + (size_t)k0, 64);
        return;
    case RP_DT_Q4_0:
        for (int b = 0; b < 2; b++) {
            const uint8_t *blk = d + ((size_t)r * (size_t)(cols / 32) + (size_t)(k0 / 32 + b)) * 18;
            for (int i = 0; i < 16; i++) {
                out[32 * b + i] = blk[2 + i] & 15;
                out[32 * b + 16 + i] = blk[2 + i] >> 4;
            }
        }
        return;
    default:
        for (int b = 0; b < 2; b++) {
            const uint8_t *blk = d + ((size_t)r * (size_t)(cols / 32) + (size_t)(k0 / 32 + b)) * 34;
            for (int i = 0; i < 32; i++)
                out[32 * b + i] = (uint8_t)(blk[2 + i] ^ 0x80);
        }
        return;
    }
}

/* One 64-block of a tile at rows r.. (16 chunks of 64 bytes; chunk p, byte 4i + j holds k 4p + j
 * of row i; 4-bit: row i in the low nibble, row 16 + i in the high). */
static uint32_t pk_spread4(uint32_t t) /* 4 nibbles (low first) -> the low nibbles of 4 bytes */
{
    t = (t | t << 8) & 0x00FF00FFu;
    return (t | t << 4) & 0x0F0F0F0Fu;
}

static void pk_block(const rp_tensor *w, long r, long k0, uint8_t *out)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    if (w->dtype == RP_DT_MLX4 || w->dtype == RP_DT_MLX8) { /* whole words, no code array */
        size_t rb = (size_t)cols * (size_t)pk_bits(w->dtype) / 8;
        const uint8_t *d = (const uint8_t *)w->data + (size_t)k0 * (size_t)pk_bits(w->dtype) / 8;
        for (int i = 0; i < 16; i++) {
            const uint8_t *a = r + i < rows ? d + (size_t)(r + i) * rb : NULL;
            const uint8_t *b = r + 16 + i < rows ? d + (size_t)(r + 16 + i) * rb : NULL;
            for (int p = 0; p < 16; p++) {
                uint32_t v = 0;
                if (w->dtype == RP_DT_MLX8) {
                    if (a) memcpy(&v, a + 4 * p, 4);
                } else {
                    uint16_t ua = 0, ub = 0;
                    if (a) memcpy(&ua, a + 2 * p, 2);
                    if (b) memcpy(&ub, b + 2 * p, 2);
                    v = pk_spread4(ua) | pk_spread4(ub) << 4;
                }
                memcpy(out + 64 * p + 4 * i, &v, 4);
            }
        }
        return;
    }
    uint8_t c[32][64];
    int tr = pk_rows_per_tile(w->dtype);
    for (int i = 0; i < tr; i++)
        pk_codes(w, r + i, k0, c[i]);
    for (int p = 0; p < 16; p++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 4; j++)
                out[64 * p + 4 * i + j] =
                    tr == 32 ? (uint8_t)(c[i][4 * p + j] | c[16 + i][4 * p + j] << 4)
                             : c[i][4 * p + j];
}

void rp_qx_repack(const rp_tensor *w, long t0, long t1, void *out)
{
    long rows = (long)w->shape[0], ng = pk_n_groups(w), cols = (long)w->shape[1];
    size_t gb = pk_group_bytes(w), tb = pk_tile_bytes(w), bb = PK_BLOCK;
    int mlx = pk_mlx(w->dtype), tr = pk_rows_per_tile(w->dtype), bpg = pk_blocks_per_group(w);
    size_t ssz = mlx ? (size_t)pk_ssz(w->scale_dtype) : 2;
    for (long t = t0; t < t1; t++) {
        long r = t * tr;
        for (long g = 0; g < ng; g++) {
            uint8_t *gp = (uint8_t *)out + (size_t)t * tb + (size_t)g * gb;
            for (int b = 0; b < bpg; b++)
                pk_block(w, r, (g * bpg + b) * 64, gp + (size_t)b * bb);
            uint8_t *sp = gp + (size_t)bpg * bb;
            memset(sp, 0, pk_scale_bytes(w));
            for (int i = 0; i < tr && r + i < rows; i++) {
                if (mlx) { /* scales then biases, tile rows each, as stored */
                    size_t src = ((size_t)(r + i) * (size_t)ng + (size_t)g) * ssz;
                    memcpy(sp + (size_t)i * ssz, (const uint8_t *)w->scales + src, ssz);
                    memcpy(sp + ((size_t)tr + (size_t)i) * ssz, (const uint8_t *)w->biases + src,
                           ssz);
                } else { /* the f16 d of 32-blocks 2g, then 2g + 1, tile rows each */
                    size_t bsz = w->dtype == RP_DT_Q4_0 ? 18 : 34;
                    const uint8_t *blk =
                        (const uint8_t *)w->data +
                        ((size_t)(r + i) * (size_t)(cols / 32) + 2 * (size_t)g) * bsz;
                    memcpy(sp + 2 * (size_t)i, blk, 2);
                    memcpy(sp + 2 * ((size_t)tr + (size_t)i), blk + bsz, 2);
                }
            }
        }
    }
}

const uint8_t *rp_qx_packed_block(const rp_tensor *w, const void *packed, long tile, long kb,
                                  const uint8_t **scales)
{
    int bpg = pk_blocks_per_group(w);
    const uint8_t *gp = (const uint8_t *)packed + (size_t)tile * pk_tile_bytes(w) +
                        (size_t)(kb / bpg) * pk_group_bytes(w);
    *scales = gp + (size_t)bpg * PK_BLOCK;
    return gp + (size_t)(kb % bpg) * PK_BLOCK;
}
