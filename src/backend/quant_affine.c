/* backend/quant_affine.c - GGUF block types as MLX affine groups (see quant_affine.h).
 *
 * Each 32-element group is first decoded into its unsigned codes u[32] and an f32 scale and
 * bias (the layouts are those of backend/quant.h), then packed as MLX packs: element 0 in the
 * lowest bits of the first word.
 */
#include "backend/quant_affine.h"

#include "backend/quant.h"
#include "base/half.h"

int rp_quant_affine_bits(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_Q4_0:
    case RP_DT_Q4_1:
    case RP_DT_Q4_K: return 4;
    case RP_DT_Q8_0:
    case RP_DT_Q5_0:
    case RP_DT_Q5_1:
    case RP_DT_Q5_K: return 8;
    default: return 0;
    }
}

static float h2f(const uint8_t *p) { return rp_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Group g (0 for the 32-element types, 0..7 in a K super-block) of block b: codes, scale,
 * bias with value = scale * u + bias. */
static void group_of(rp_dtype dt, const uint8_t *b, int g, uint8_t *u, float *scale, float *bias)
{
    switch (dt) {
    case RP_DT_Q8_0:
        *scale = h2f(b);
        *bias = -128.0f * *scale;
        for (int i = 0; i < 32; i++)
            u[i] = (uint8_t)((int)(int8_t)b[2 + i] + 128);
        return;
    case RP_DT_Q4_0:
    case RP_DT_Q4_1: {
        int one = dt == RP_DT_Q4_1;
        const uint8_t *qs = b + (one ? 4 : 2);
        *scale = h2f(b);
        *bias = one ? h2f(b + 2) : -8.0f * *scale;
        for (int i = 0; i < 16; i++) {
            u[i] = qs[i] & 15;
            u[i + 16] = qs[i] >> 4;
        }
        return;
    }
    case RP_DT_Q5_0:
    case RP_DT_Q5_1: {
        int one = dt == RP_DT_Q5_1;
        const uint8_t *qhp = b + (one ? 4 : 2), *qs = qhp + 4;
        uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                      (uint32_t)qhp[3] << 24;
        *scale = h2f(b);
        *bias = one ? h2f(b + 2) : -16.0f * *scale;
        for (int i = 0; i < 16; i++) {
            u[i] = (uint8_t)((qs[i] & 15) | ((qh >> i) & 1) << 4);
            u[i + 16] = (uint8_t)((qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4);
        }
        return;
    }
    case RP_DT_Q4_K:
    case RP_DT_Q5_K: {
        int five = dt == RP_DT_Q5_K, sc, m;
        const uint8_t *s = b + 4, *qh = b + 16, *q = b + (five ? 48 : 16) + 32 * (g / 2);
        if (g < 4) {
            sc = s[g] & 63;
            m = s[g + 4] & 63;
        } else {
            sc = (s[g + 4] & 15) | (s[g - 4] >> 6) << 4;
            m = (s[g + 4] >> 4) | (s[g] >> 6) << 4;
        }
        *scale = h2f(b) * (float)sc;
        *bias = -(h2f(b + 2) * (float)m);
        for (int l = 0; l < 32; l++) {
            int v = g % 2 ? q[l] >> 4 : q[l] & 15;
            if (five)
                v |= ((qh[l] >> g) & 1) << 4;
            u[l] = (uint8_t)v;
        }
        return;
    }
    default: /* not an affine type (rp_quant_affine_bits is 0): never called */
        *scale = *bias = 0.0f;
        for (int i = 0; i < 32; i++)
            u[i] = 0;
        return;
    }
}

void rp_quant_affine_row(rp_dtype dt, const void *row, int64_t n, uint32_t *q, uint16_t *scales,
                         uint16_t *biases)
{
    int bits = rp_quant_affine_bits(dt), per_block = rp_dtype_block(dt);
    size_t bb = rp_quant_block_bytes(dt);
    const uint8_t *p = row;
    for (int64_t g0 = 0; g0 < n / 32; g0++) {
        int64_t blk = g0 * 32 / per_block;
        int g = (int)(g0 % (per_block / 32));
        uint8_t u[32];
        float s, b;
        group_of(dt, p + (size_t)blk * bb, g, u, &s, &b);
        scales[g0] = rp_f32_to_f16(s);
        biases[g0] = rp_f32_to_f16(b);
        uint32_t *w = q + g0 * bits; /* 32 elements = `bits` words */
        for (int i = 0; i < bits; i++)
            w[i] = 0;
        for (int i = 0; i < 32; i++)
            w[i * bits / 32] |= (uint32_t)u[i] << (i * bits % 32);
    }
}
