/* backend/kv_rows.c - the KV row codec: how one token's one KV head is stored in a cache block
 * (layouts in backend.h, rp_kv_dtype). One definition for the CPU kernels, the reference ops
 * and the tests; the quantized types keep a symmetric f32 scale per row (one head, one token).
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "base/half.h"

static const char *const g_kv_names[RP_KV_DTYPE_COUNT] = {"f32", "bf16", "f16", "int8", "int4"};

const char *rp_kv_dtype_name(rp_kv_dtype dt)
{
    return dt >= 0 && dt < RP_KV_DTYPE_COUNT ? g_kv_names[dt] : "?";
}

int rp_kv_dtype_parse(const char *s, rp_kv_dtype *out)
{
    for (int i = 0; i < RP_KV_DTYPE_COUNT; i++)
        if (s && strcmp(s, g_kv_names[i]) == 0) {
            *out = (rp_kv_dtype)i;
            return 0;
        }
    return -1;
}

size_t rp_kv_row_bytes(rp_kv_dtype dt, int hd)
{
    if (hd <= 0 || hd % 2)
        return 0;
    switch (dt) {
    case RP_KV_F32: return (size_t)hd * 4;
    case RP_KV_BF16:
    case RP_KV_F16: return (size_t)hd * 2;
    case RP_KV_INT8: return hd % 4 ? 0 : (size_t)hd + 4;
    case RP_KV_INT4: return hd % 8 ? 0 : (size_t)hd / 2 + 4;
    default: return 0;
    }
}

static float absmax(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static int quant(float x, float inv, int lim)
{
    int q = (int)lrintf(x * inv);
    return q > lim ? lim : q < -lim ? -lim : q;
}

void rp_kv_row_store(rp_kv_dtype dt, const float *x, int hd, void *dst)
{
    switch (dt) {
    case RP_KV_F32: memcpy(dst, x, (size_t)hd * 4); return;
    case RP_KV_BF16:
        for (int i = 0; i < hd; i++) {
            uint16_t h = rp_f32_to_bf16(x[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        return;
    case RP_KV_F16:
        for (int i = 0; i < hd; i++) {
            uint16_t h = rp_f32_to_f16(x[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        return;
    case RP_KV_INT8: {
        float d = absmax(x, hd) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        int8_t *q = dst;
        for (int i = 0; i < hd; i++)
            q[i] = (int8_t)quant(x[i], inv, 127);
        memcpy(q + hd, &d, 4);
        return;
    }
    case RP_KV_INT4: {
        float d = absmax(x, hd) / 7.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        uint8_t *q = dst;
        for (int i = 0; i < hd; i += 2)
            q[i / 2] = (uint8_t)((quant(x[i], inv, 7) + 8) | ((quant(x[i + 1], inv, 7) + 8) << 4));
        memcpy(q + hd / 2, &d, 4);
        return;
    }
    default: return;
    }
}

void rp_kv_row_load(rp_kv_dtype dt, const void *src, int hd, float *out)
{
    switch (dt) {
    case RP_KV_F32: memcpy(out, src, (size_t)hd * 4); return;
    case RP_KV_BF16:
        for (int i = 0; i < hd; i++)
            out[i] = rp_bf16_to_f32(rp_load_u16(src, (size_t)i));
        return;
    case RP_KV_F16:
        for (int i = 0; i < hd; i++)
            out[i] = rp_f16_to_f32(rp_load_u16(src, (size_t)i));
        return;
    case RP_KV_INT8: {
        const int8_t *q = src;
        float d;
        memcpy(&d, q + hd, 4);
        for (int i = 0; i < hd; i++)
            out[i] = d * (float)q[i];
        return;
    }
    case RP_KV_INT4: {
        const uint8_t *q = src;
        float d;
        memcpy(&d, q + hd / 2, 4);
        for (int i = 0; i < hd; i += 2) {
            out[i] = d * (float)((q[i / 2] & 15) - 8);
            out[i + 1] = d * (float)((q[i / 2] >> 4) - 8);
        }
        return;
    }
    default: return;
    }
}
