/* backend/quant.c - plain-C dequantization and quantization of every quantized dtype.
 *
 * The dequantizers are the definition of each format (backend/quant.h documents the layouts);
 * they are written as the format is described, never optimised. The quantizers are simple
 * round-to-nearest ones: enough for `rapid quantize`, the GGUF test writer and kernel tests.
 */
#include "backend/quant.h"

#include <math.h>
#include <string.h>

#include "base/half.h"

size_t rp_quant_block_bytes(rp_dtype dt)
{
    switch (dt) {
    case RP_DT_Q8_0: return 34;
    case RP_DT_Q4_0: return 18;
    case RP_DT_Q4_1: return 20;
    case RP_DT_Q5_0: return 22;
    case RP_DT_Q5_1: return 24;
    case RP_DT_Q4_K: return 144;
    case RP_DT_Q5_K: return 176;
    case RP_DT_Q6_K: return 210;
    default: return 0;
    }
}

static float h2f(const uint8_t *p) { return rp_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void f2h(uint8_t *p, float f)
{
    uint16_t h = rp_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block. */
static void kscale(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void dequant_block(rp_dtype dt, const uint8_t *b, float *y)
{
    switch (dt) {
    case RP_DT_Q8_0: {
        float d = h2f(b);
        for (int i = 0; i < 32; i++)
            y[i] = d * (float)(int8_t)b[2 + i];
        return;
    }
    case RP_DT_Q4_0:
    case RP_DT_Q4_1: {
        int one = dt == RP_DT_Q4_1;
        float d = h2f(b), m = one ? h2f(b + 2) : 0.0f;
        const uint8_t *qs = b + (one ? 4 : 2);
        for (int i = 0; i < 16; i++) {
            int lo = qs[i] & 15, hi = qs[i] >> 4;
            y[i] = one ? d * (float)lo + m : d * (float)(lo - 8);
            y[i + 16] = one ? d * (float)hi + m : d * (float)(hi - 8);
        }
        return;
    }
    case RP_DT_Q5_0:
    case RP_DT_Q5_1: {
        int one = dt == RP_DT_Q5_1;
        float d = h2f(b), m = one ? h2f(b + 2) : 0.0f;
        const uint8_t *qhp = b + (one ? 4 : 2), *qs = qhp + 4;
        uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                      (uint32_t)qhp[3] << 24;
        for (int i = 0; i < 16; i++) {
            int lo = (qs[i] & 15) | (int)((qh >> i) & 1) << 4;
            int hi = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
            y[i] = one ? d * (float)lo + m : d * (float)(lo - 16);
            y[i + 16] = one ? d * (float)hi + m : d * (float)(hi - 16);
        }
        return;
    }
    case RP_DT_Q4_K:
    case RP_DT_Q5_K: {
        int five = dt == RP_DT_Q5_K;
        float d = h2f(b), dmin = h2f(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int s, m;
            kscale(sc, j, &s, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = j % 2 ? q[l] >> 4 : q[l] & 15;
                if (five)
                    v |= ((qh[l] >> j) & 1) << 4;
                y[32 * j + l] = d * (float)s * (float)v - dmin * (float)m;
            }
        }
        return;
    }
    case RP_DT_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = h2f(b + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
            const int8_t *S = sc + 8 * h;
            float *o = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                int q1 = (L[l] & 15) | (H[l] & 3) << 4;
                int q2 = (L[l + 32] & 15) | (H[l] >> 2 & 3) << 4;
                int q3 = (L[l] >> 4) | (H[l] >> 4 & 3) << 4;
                int q4 = (L[l + 32] >> 4) | (H[l] >> 6) << 4;
                o[l] = d * (float)S[l / 16] * (float)(q1 - 32);
                o[l + 32] = d * (float)S[2 + l / 16] * (float)(q2 - 32);
                o[l + 64] = d * (float)S[4 + l / 16] * (float)(q3 - 32);
                o[l + 96] = d * (float)S[6 + l / 16] * (float)(q4 - 32);
            }
        }
        return;
    }
    default: return;
    }
}

static float scalar_at(rp_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case RP_DT_F32: return rp_load_f32(p, i);
    case RP_DT_F16: return rp_f16_to_f32(rp_load_u16(p, i));
    case RP_DT_BF16: return rp_bf16_to_f32(rp_load_u16(p, i));
    default: return NAN;
    }
}

void rp_quant_dequant_row(const rp_tensor *t, int64_t row, float *out)
{
    int64_t n = t->n_dims >= 2 ? t->shape[1] : t->shape[0];
    const uint8_t *base = (const uint8_t *)t->data + (size_t)row * rp_dtype_row_bytes(t->dtype, n);
    switch (t->dtype) {
    case RP_DT_F32:
    case RP_DT_F16:
    case RP_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = scalar_at(t->dtype, base, (size_t)i);
        return;
    case RP_DT_MLX4:
    case RP_DT_MLX8: {
        int bits = t->dtype == RP_DT_MLX4 ? 4 : 8, per = 32 / bits, gs = t->group_size;
        int64_t ng = n / gs;
        for (int64_t i = 0; i < n; i++) {
            uint32_t w;
            memcpy(&w, base + 4 * (size_t)(i / per), 4);
            uint32_t q = (w >> (bits * (i % per))) & ((1u << bits) - 1);
            size_t g = (size_t)(row * ng + i / gs);
            out[i] = scalar_at(t->scale_dtype, t->scales, g) * (float)q +
                     scalar_at(t->scale_dtype, t->biases, g);
        }
        return;
    }
    case RP_DT_MXFP4: /* blocks of a scale byte (E8M0) and 16 bytes of e2m1 nibbles */
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *blk = base + (size_t)(i / 32) * 17;
            uint8_t q = blk[1 + (i % 32) / 2];
            out[i] = ldexpf(rp_fp4_values[i % 2 ? q >> 4 : q & 15], (int)blk[0] - 127);
        }
        return;
    default: {
        int bs = rp_dtype_block(t->dtype);
        size_t bb = rp_quant_block_bytes(t->dtype);
        for (int64_t k = 0; k < n / bs; k++)
            dequant_block(t->dtype, base + (size_t)k * bb, out + k * bs);
        return;
    }
    }
}

/* ---- quantizers ------------------------------------------------------------------------ */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The value of largest magnitude (with its sign) and min/max of x[0..n). */
static void stats(const float *x, int n, float *amax_signed, float *mn, float *mx)
{
    float a = 0.0f, lo = x[0], hi = x[0];
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > fabsf(a))
            a = x[i];
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *amax_signed = a;
    *mn = lo;
    *mx = hi;
}

static void quant_block(rp_dtype dt, const float *x, uint8_t *b)
{
    float am, mn, mx;
    switch (dt) {
    case RP_DT_Q8_0: {
        stats(x, 32, &am, &mn, &mx);
        float d = fabsf(am) / 127.0f;
        f2h(b, d);
        d = h2f(b);
        for (int i = 0; i < 32; i++)
            b[2 + i] = (uint8_t)(int8_t)clampi(d > 0 ? (int)lrintf(x[i] / d) : 0, -127, 127);
        return;
    }
    case RP_DT_Q4_0:
    case RP_DT_Q5_0: {
        int five = dt == RP_DT_Q5_0, off = five ? 16 : 8, top = five ? 31 : 15;
        stats(x, 32, &am, &mn, &mx);
        float d = am / (float)-off; /* the extreme maps to q = 0 exactly */
        f2h(b, d);
        d = h2f(b);
        uint8_t *qs = b + (five ? 6 : 2);
        uint32_t qh = 0;
        for (int i = 0; i < 16; i++) {
            int lo = clampi(d != 0 ? (int)lrintf(x[i] / d) + off : off, 0, top);
            int hi = clampi(d != 0 ? (int)lrintf(x[i + 16] / d) + off : off, 0, top);
            qs[i] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << i | (uint32_t)(hi >> 4) << (i + 16);
        }
        if (five)
            for (int k = 0; k < 4; k++)
                b[2 + k] = (uint8_t)(qh >> (8 * k));
        return;
    }
    case RP_DT_Q4_1:
    case RP_DT_Q5_1: {
        int five = dt == RP_DT_Q5_1, top = five ? 31 : 15;
        stats(x, 32, &am, &mn, &mx);
        f2h(b, (mx - mn) / (float)top);
        f2h(b + 2, mn);
        float d = h2f(b), m = h2f(b + 2);
        uint8_t *qs = b + (five ? 8 : 4);
        uint32_t qh = 0;
        for (int i = 0; i < 16; i++) {
            int lo = clampi(d > 0 ? (int)lrintf((x[i] - m) / d) : 0, 0, top);
            int hi = clampi(d > 0 ? (int)lrintf((x[i + 16] - m) / d) : 0, 0, top);
            qs[i] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4) << i | (uint32_t)(hi >> 4) << (i + 16);
        }
        if (five)
            for (int k = 0; k < 4; k++)
                b[4 + k] = (uint8_t)(qh >> (8 * k));
        return;
    }
    case RP_DT_Q4_K:
    case RP_DT_Q5_K: {
        int five = dt == RP_DT_Q5_K, top = five ? 31 : 15;
        float scale[8], minv[8], smax = 0, mmax = 0;
        for (int j = 0; j < 8; j++) {
            stats(x + 32 * j, 32, &am, &mn, &mx);
            if (mn > 0)
                mn = 0; /* the format subtracts a non-negative min */
            scale[j] = (mx - mn) / (float)top;
            minv[j] = -mn;
            smax = scale[j] > smax ? scale[j] : smax;
            mmax = minv[j] > mmax ? minv[j] : mmax;
        }
        f2h(b, smax / 63.0f);
        f2h(b + 2, mmax / 63.0f);
        float d = h2f(b), dmin = h2f(b + 2);
        int sc[8], mq[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = d > 0 ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0;
            mq[j] = dmin > 0 ? clampi((int)lrintf(minv[j] / dmin), 0, 63) : 0;
        }
        uint8_t *s = b + 4;
        for (int j = 0; j < 4; j++) {
            s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            s[j + 4] = (uint8_t)(mq[j] | (mq[j + 4] >> 4) << 6);
            s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mq[j + 4] & 15) << 4);
        }
        uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        if (five)
            memset(qh, 0, 32);
        memset(qs, 0, 128);
        for (int j = 0; j < 8; j++) {
            float ds = d * (float)sc[j], dm = dmin * (float)mq[j];
            for (int l = 0; l < 32; l++) {
                int v = ds > 0 ? clampi((int)lrintf((x[32 * j + l] + dm) / ds), 0, top) : 0;
                qs[32 * (j / 2) + l] |= (uint8_t)((v & 15) << (j % 2 ? 4 : 0));
                if (five)
                    qh[l] |= (uint8_t)((v >> 4) << j);
            }
        }
        return;
    }
    case RP_DT_Q6_K: {
        float scale[16], smax = 0;
        for (int j = 0; j < 16; j++) {
            stats(x + 16 * j, 16, &am, &mn, &mx);
            scale[j] = am / -32.0f;
            smax = fabsf(scale[j]) > fabsf(smax) ? scale[j] : smax;
        }
        f2h(b + 208, smax / -128.0f);
        float d = h2f(b + 208);
        int8_t *S = (int8_t *)(b + 192);
        for (int j = 0; j < 16; j++)
            S[j] = (int8_t)(d != 0 ? clampi((int)lrintf(scale[j] / d), -128, 127) : 0);
        uint8_t *ql = b, *qh = b + 128;
        memset(ql, 0, 192);
        for (int i = 0; i < 256; i++) {
            float ds = d * (float)S[i / 16];
            int v = ds != 0 ? clampi((int)lrintf(x[i] / ds), -32, 31) + 32 : 32;
            int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
            uint8_t *L = ql + 64 * h + (k % 2 ? 32 : 0), *H = qh + 32 * h;
            L[l] |= (uint8_t)((v & 15) << (k >= 2 ? 4 : 0));
            H[l] |= (uint8_t)((v >> 4) << (2 * k));
        }
        return;
    }
    default: return;
    }
}

void rp_quant_row(rp_dtype dt, const float *x, int64_t n, void *out)
{
    int bs = rp_dtype_block(dt);
    size_t bb = rp_quant_block_bytes(dt);
    for (int64_t k = 0; k < n / bs; k++)
        quant_block(dt, x + k * bs, (uint8_t *)out + (size_t)k * bb);
}

void rp_quant_mlx_row(int bits, int group_size, const float *x, int64_t n, uint32_t *q,
                      float *scales, float *biases, int round_bf16)
{
    int per = 32 / bits, top = (1 << bits) - 1;
    memset(q, 0, (size_t)(n / per) * 4);
    for (int64_t g = 0; g < n / group_size; g++) {
        const float *xg = x + g * group_size;
        float am, mn, mx;
        stats(xg, group_size, &am, &mn, &mx);
        /* the end of larger magnitude is the bias (q = 0) and is kept exact */
        float s = (mx - mn) / (float)top;
        if (s < 1e-7f)
            s = 1e-7f;
        float edge = fabsf(mn) > fabsf(mx) ? mn : mx;
        if (edge == mx)
            s = -s;
        float q0 = rintf(edge / s);
        float bias = edge;
        if (q0 != 0.0f)
            s = edge / q0;
        else
            bias = 0.0f;
        if (round_bf16) {
            s = rp_bf16_to_f32(rp_f32_to_bf16(s));
            bias = rp_bf16_to_f32(rp_f32_to_bf16(bias));
        }
        scales[g] = s;
        biases[g] = bias;
        for (int i = 0; i < group_size; i++) {
            int v = clampi((int)lrintf((xg[i] - bias) / s), 0, top);
            int64_t e = g * group_size + i;
            q[e / per] |= (uint32_t)v << (bits * (e % per));
        }
    }
}
