/* backend/cpu/x86/attn_avx512.c - the paged attention's inner loops (q.k, the softmax
 * weights and p*v) and the SiLU gate for AVX-512. Compiled with the AVX-512 flags; chosen at
 * run time when the CPU has them. The exponentials are a vector e^x within 2 ulp of expf. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/x86/kv_walk.h"
#include "backend/cpu/x86/qx86_inline.h"

float rp_attn_dot_avx512(const float *a, const float *b, int n)
{
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void rp_attn_axpy_avx512(float *y, float a, const float *x, int n)
{
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* rp_kv_row_load with 16 elements at a time (the same values: every conversion is exact). */
void rp_attn_load_row_avx512(rp_kv_dtype dt, const void *src, int hd, float *out)
{
    if (hd % 16 || (dt == RP_KV_INT4 && hd % 32)) { /* loads never pass the row's end */
        rp_kv_row_load(dt, src, hd, out);
        return;
    }
    const unsigned char *p = src;
    switch (dt) {
    case RP_KV_BF16:
        for (int i = 0; i < hd; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
            _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
        return;
    case RP_KV_F16:
        for (int i = 0; i < hd; i += 16)
            _mm512_storeu_ps(out + i,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))));
        return;
    case RP_KV_INT8: {
        float d;
        memcpy(&d, p + hd, 4);
        __m512 dv = _mm512_set1_ps(d);
        for (int i = 0; i < hd; i += 16) {
            __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + i)));
            _mm512_storeu_ps(out + i, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(q)));
        }
        return;
    }
    case RP_KV_INT4: {
        float d;
        memcpy(&d, p + hd / 2, 4);
        __m512 dv = _mm512_set1_ps(d);
        __m512i eight = _mm512_set1_epi32(8), lo4 = _mm512_set1_epi32(15);
        __m512i perm_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        __m512i perm_hi =
            _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        for (int i = 0; i < hd; i += 32) { /* 16 bytes: elements i .. i + 31 */
            __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + i / 2)));
            __m512i lo = _mm512_sub_epi32(_mm512_and_si512(b, lo4), eight); /* even elements */
            __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight);  /* odd elements */
            __m512i e0 = _mm512_permutex2var_epi32(lo, perm_lo, hi);
            __m512i e1 = _mm512_permutex2var_epi32(lo, perm_hi, hi);
            _mm512_storeu_ps(out + i, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(e0)));
            _mm512_storeu_ps(out + i + 16, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(e1)));
        }
        return;
    }
    default:
        rp_kv_row_load(dt, src, hd, out);
        return;
    }
}

/* e^x for 16 lanes: x = n ln 2 + r (|r| <= ln 2 / 2, ln 2 in two parts), e^r by its degree-7
 * Taylor polynomial (truncation below 2^-27 relative), times 2^n by VSCALEFPS (which
 * underflows to 0 and overflows to inf as expf does). Within 2 ulp of expf. */
static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

float rp_attn_exp_sum_avx512(float *p, int n, float mx)
{
    __m512 m = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + j), m));
        _mm512_storeu_ps(p + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) { /* the tail in one masked step */
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), m)));
        _mm512_mask_storeu_ps(p + j, k, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

void rp_silu_mul_avx512(float *out, const float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 s =
            _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    for (; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}


/* p * v over n value rows for GC heads of D16 x 16 dims, the sums in registers (GC * D16 <= 16
 * accumulators); per head the same fused multiply-adds, key by key, as rp_attn_axpy_avx512. */
static inline __attribute__((always_inline)) void
pv_block(const rp_kv_layout *L, const int32_t *table, int layer, int kvh, int j0, int n,
         const float *sc, const float *inv, float *out, const int GC, const int D16)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < GC * D16; i++)
        acc[i] = _mm512_setzero_ps();
    kv_walk vw = kv_walk_at(L, table, layer, 1, j0, kvh);
    for (int j = 0; j < n; j++) {
        const float *v = kv_walk_next(&vw);
        __m512 vc[8];
#pragma GCC unroll 8
        for (int c = 0; c < D16; c++)
            vc[c] = _mm512_loadu_ps(v + 16 * c);
#pragma GCC unroll 4
        for (int g = 0; g < GC; g++) {
            __m512 pg = _mm512_set1_ps(sc[(size_t)g * n + j]);
#pragma GCC unroll 8
            for (int c = 0; c < D16; c++)
                acc[g * D16 + c] = _mm512_fmadd_ps(pg, vc[c], acc[g * D16 + c]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < GC; g++)
#pragma GCC unroll 8
        for (int c = 0; c < D16; c++)
            _mm512_storeu_ps(out + (size_t)g * 16 * D16 + 16 * c,
                             _mm512_mul_ps(acc[g * D16 + c], _mm512_set1_ps(inv[g])));
}

int rp_attn_group_f32_avx512(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                             int j0, int n, const float *q, int G, float scale, const float *sinks,
                             float *sc, float *out)
{
    int d = L->head_dim;
    if (L->dtype != RP_KV_F32 || d != 64 || G > 64 || n <= 0) return 0;
    /* scores: 16 keys at a time, per head 16 chains of fused multiply-adds whose lanes are
     * summed by a transpose and 15 adds (a reduction order of its own, fixed per key: the
     * scores stay batch-invariant); the last keys one at a time */
    int j = 0;
    kv_walk kw = kv_walk_at(L, table, layer, 0, j0, kvh);
    for (; j + 16 <= n; j += 16) {
        const float *k[16];
        for (int jj = 0; jj < 16; jj++)
            k[jj] = kv_walk_next(&kw);
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * d;
            __m512 q0 = _mm512_loadu_ps(qg), q1 = _mm512_loadu_ps(qg + 16);
            __m512 q2 = _mm512_loadu_ps(qg + 32), q3 = _mm512_loadu_ps(qg + 48);
            __m512 acc[16];
            for (int jj = 0; jj < 16; jj++) {
                __m512 a0 = _mm512_mul_ps(q0, _mm512_loadu_ps(k[jj]));
                __m512 a1 = _mm512_mul_ps(q1, _mm512_loadu_ps(k[jj] + 16));
                a0 = _mm512_fmadd_ps(q2, _mm512_loadu_ps(k[jj] + 32), a0);
                a1 = _mm512_fmadd_ps(q3, _mm512_loadu_ps(k[jj] + 48), a1);
                acc[jj] = _mm512_add_ps(a0, a1);
            }
            qx_transpose16(acc);
            for (int w = 1; w < 16; w *= 2) /* pairwise: acc[0] lane jj = key jj's dot */
                for (int i = 0; i < 16; i += 2 * w)
                    acc[i] = _mm512_add_ps(acc[i], acc[i + w]);
            _mm512_storeu_ps(sc + (size_t)g * n + j, _mm512_mul_ps(acc[0], _mm512_set1_ps(scale)));
        }
    }
    for (; j < n; j++) {
        const float *k = kv_walk_next(&kw);
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * d;
            __m512 acc = _mm512_setzero_ps();
            for (int i = 0; i < d; i += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i), _mm512_loadu_ps(k + i), acc);
            sc[(size_t)g * n + j] = _mm512_reduce_add_ps(acc) * scale;
        }
    }
    float inv[64];
    for (int g = 0; g < G; g++) {
        float *p = sc + (size_t)g * n;
        __m512 m = _mm512_set1_ps(-INFINITY);
        int jm = 0;
        for (; jm + 16 <= n; jm += 16) /* the maximum, in any order */
            m = _mm512_max_ps(m, _mm512_loadu_ps(p + jm));
        float mx = _mm512_reduce_max_ps(m);
        for (; jm < n; jm++)
            mx = p[jm] > mx ? p[jm] : mx;
        float sink = sinks ? sinks[g] : -INFINITY;
        mx = sink > mx ? sink : mx;
        inv[g] = 1.0f / ((sinks ? expf(sink - mx) : 0.0f) + rp_attn_exp_sum_avx512(p, n, mx));
    }
    int g = 0;
    for (; g + 4 <= G; g += 4)
        pv_block(L, table, layer, kvh, j0, n, sc + (size_t)g * n, inv + g, out + (size_t)g * d, 4,
                 4);
    for (; g < G; g++)
        pv_block(L, table, layer, kvh, j0, n, sc + (size_t)g * n, inv + g, out + (size_t)g * d, 1,
                 4);
    return 1;
}
