/* backend/cpu/x86/attn_avx2.c - the paged attention's q.k and p*v loops for CPUs with AVX2
 * but no AVX-512 (attn_avx512.c has the 16-lane ones and the rest of the attention's loops).
 * Compiled with the AVX2 flags; chosen at run time. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cpu/x86/kv_walk.h"

float rp_attn_dot_avx2(const float *a, const float *b, int n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) { /* two chains: the FMA latency, not its throughput */
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}

void rp_attn_axpy_avx2(float *y, float a, const float *x, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* e^x for 8 lanes, the same arithmetic as attn_avx512.c's exp16 (yet on an AVX-512 CPU the two
 * were not bit-identical; ops_test holds each to expf): x = n ln 2
 * + r with ln 2 in two parts, e^r by the degree-7 Taylor polynomial, times 2^n. AVX2 has no
 * VSCALEFPS: 2^n is two exponent-field powers 2^n1 x 2^n2 (n1 = floor(n / 2), each within
 * the normal range for the clamped x), and p x 2^n1 is exact, so the one rounding is the
 * last product's, as in VSCALEFPS (denormal results included). */
static inline __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(89.0f)), _mm256_set1_ps(-104.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n); /* -150 .. 129 */
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

float rp_attn_exp_sum_avx2(float *p, int n, float mx)
{
    __m256 m = _mm256_set1_ps(mx), acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) { /* acc0 / acc1: the AVX-512 accumulator's low / high lanes */
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j + 8), m));
        _mm256_storeu_ps(p + j, e0);
        _mm256_storeu_ps(p + j + 8, e1);
        acc0 = _mm256_add_ps(acc0, e0);
        acc1 = _mm256_add_ps(acc1, e1);
    }
    if (j < n) { /* the tail as one 16-lane step with zeros past n */
        float t[16] = {0};
        int k = n - j;
        for (int i = 0; i < k; i++)
            t[i] = p[j + i];
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(t), m));
        __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(t + 8), m));
        _mm256_storeu_ps(t, e0);
        _mm256_storeu_ps(t + 8, e1);
        for (int i = 0; i < 16; i++)
            t[i] = i < k ? t[i] : 0.0f;
        for (int i = 0; i < k; i++)
            p[j + i] = t[i];
        acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(t));
        acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(t + 8));
    }
    /* the AVX-512 reduce's order: halves, then quarters, then pairs */
    __m256 h = _mm256_add_ps(acc1, acc0);
    __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    q = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(q) + _mm_cvtss_f32(_mm_shuffle_ps(q, q, 1));
}

void rp_silu_mul_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 s =
            _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* The 8 lanes' sums of 8 vectors: lane i of the result is the sum of a[i]'s lanes (pairs by
 * hadd, then the two 128-bit halves). */
static inline __m256 sum8x8(const __m256 a[8])
{
    __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                         _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

/* The sum of a's lanes in sum8x8's order: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). */
static inline float sum8(__m256 a)
{
    __m128 h = _mm_hadd_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(h) + _mm_cvtss_f32(_mm_movehdup_ps(h));
}

/* A key row and a value row of head_dim 64 (256 bytes each) into the cache. */
/* The largest of p[0 .. n) (n > 0; the maximum is exact in any order): 32 lanes at a time,
 * where the scalar loop was a chain of dependent vmaxss, 3-4 cycles an element (at 1,600
 * positions about a tenth of the attention). */
static inline float max_f32(const float *p, int n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(p + i + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(p + i + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(p + i + 24));
    }
    for (; i + 8 <= n; i += 8)
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p + i));
    __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    for (; i < n; i++)
        mx = p[i] > mx ? p[i] : mx;
    return mx;
}

/* the 4 lines of each of nh 64-float rows, hs floats apart (adjacent KV heads: contiguous) */
static inline void prefetch_rows(const float *r, int nh, size_t hs)
{
    for (int k = 0; k < nh; k++)
        for (int o = 0; o < 64; o += 16)
            _mm_prefetch((const char *)(r + (size_t)k * hs + o), _MM_HINT_T0);
}

/* a key's rows and (with_v) its value's */
static inline void prefetch_kv(const float *k, const float *v, int nh, size_t hs, int with_v)
{
    prefetch_rows(k, nh, hs);
    if (with_v)
        prefetch_rows(v, nh, hs);
}

/* As rp_attn_group_f32_avx512 (the same contract), on 8 lanes, for nh consecutive KV heads
 * from kvh at once (q, out: their nh G query heads in order; sinks likewise; sc nh G n): q.k 8
 * keys at a time (per key 8 chained fused multiply-adds, the lanes summed by sum8x8; a fixed
 * order per key, so the scores stay batch-invariant), the softmax weights by
 * rp_attn_exp_sum_avx2, and p.v per head with its 64 sums in 8 registers, key by key as
 * rp_attn_axpy_avx2 adds them. A position's rows of consecutive KV heads are adjacent in the
 * pool, so nh heads walk nh x 256 contiguous bytes a key where one head walks 256 bytes every
 * n_kv_heads x 256 (the pages' and the prefetchers' worst case). Per query head the arithmetic
 * is the same whatever nh is: the same bits. On AVX2 the generic loop called the dot product
 * and the axpy once per key and head. */
int rp_attn_groups_f32_avx2(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                            int nh, int j0, int n, const float *q, int G, float scale,
                            const float *sinks, float *sc, float *out)
{
    int d = L->head_dim;
    if (L->dtype != RP_KV_F32 || d != 64 || G > 64 || nh < 1 || nh * G > 256 || n <= 0 ||
        kvh + nh > L->n_kv_heads)
        return 0;
    const int HG = nh * G; /* query heads; head h = k G + g takes KV head kvh + k */
    const size_t hs = L->row_bytes / sizeof(float); /* floats from one KV head's row to the next */
    int j = 0, jp = 0;
    kv_walk kw = kv_walk_at(L, table, layer, 0, j0, kvh);
    kv_walk pk = kw, pv = kv_walk_at(L, table, layer, 1, j0, kvh);
    /* The rows come from DRAM (the weights' stream evicted them): the key and value rows are
     * prefetched ATT_PF keys ahead of the scores (a 1B-shape decode spent 70 us a layer in
     * here at 4 GB/s), fewer keys ahead the more heads a key brings */
    const int ATT_PF = nh >= 4 ? 4 : 16 / nh;
    /* V with the keys only while it stays in L2 until p.v reads it (512 x 256 bytes); a longer
     * V is prefetched by the p.v walk itself */
    const int pf_v = (long)n * nh <= 512;
    for (; jp < n && jp < ATT_PF; jp++)
        prefetch_kv(kv_walk_next(&pk), kv_walk_next(&pv), nh, hs, pf_v);
    for (; j + 8 <= n; j += 8) {
        const float *k0[8];
        for (int jj = 0; jj < 8; jj++)
            k0[jj] = kv_walk_next(&kw);
        for (int e = jp + 8; jp < n && jp < e; jp++)
            prefetch_kv(kv_walk_next(&pk), kv_walk_next(&pv), nh, hs, pf_v);
        for (int h = 0; h < HG; h++) {
            const float *qg = q + (size_t)h * d;
            const size_t ko = (size_t)(h / G) * hs;
            __m256 acc[8];
#pragma GCC unroll 8
            for (int jj = 0; jj < 8; jj++) {
                const float *k = k0[jj] + ko;
                __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(k));
#pragma GCC unroll 8
                for (int c = 1; c < 8; c++)
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(k + 8 * c), a);
                acc[jj] = a;
            }
            _mm256_storeu_ps(sc + (size_t)h * n + j,
                             _mm256_mul_ps(sum8x8(acc), _mm256_set1_ps(scale)));
        }
    }
    for (; j < n; j++) { /* the last keys one at a time, the same sum per key */
        const float *k0 = kv_walk_next(&kw);
        for (int h = 0; h < HG; h++) {
            const float *qg = q + (size_t)h * d, *k = k0 + (size_t)(h / G) * hs;
            __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(k));
#pragma GCC unroll 8
            for (int c = 1; c < 8; c++)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(k + 8 * c), a);
            sc[(size_t)h * n + j] = sum8(a) * scale;
        }
    }
    /* p.v walks V once, PV_BLK keys at a time: the block's rows stay in L1 while every head
     * takes them (the heads' 64 sums parked in out between blocks: exact f32 round trips),
     * where a walk per head read the whole of V G times (from L3 or DRAM once V outgrew L2: at
     * 1,600 positions attention was 28% of a Q4_0 decode step for 15% of its bytes). Per
     * (head, lane) the FMAs run over the keys in order. */
    enum { PV_BLK = 32 };
    float inv[256];
    for (int h = 0; h < HG; h++) {
        float *p = sc + (size_t)h * n, mx = max_f32(p, n);
        float sink = sinks ? sinks[h] : -INFINITY;
        mx = sink > mx ? sink : mx;
        inv[h] = 1.0f / ((sinks ? expf(sink - mx) : 0.0f) + rp_attn_exp_sum_avx2(p, n, mx));
        memset(out + (size_t)h * d, 0, sizeof(float) * (size_t)d);
    }
    kv_walk vw = kv_walk_at(L, table, layer, 1, j0, kvh), vp = vw;
    int ip = 0; /* rows prefetched (long V only: a short one was prefetched with the keys) */
    for (; !pf_v && ip < n && ip < PV_BLK; ip++)
        prefetch_rows(kv_walk_next(&vp), nh, hs);
    for (int i0 = 0; i0 < n; i0 += PV_BLK) {
        int nb = n - i0 < PV_BLK ? n - i0 : PV_BLK;
        const float *vr[PV_BLK];
        for (int i = 0; i < nb; i++)
            vr[i] = kv_walk_next(&vw);
        for (; !pf_v && ip < n && ip < i0 + 2 * PV_BLK; ip++)
            prefetch_rows(kv_walk_next(&vp), nh, hs);
        for (int h = 0; h < HG; h++) {
            const float *p = sc + (size_t)h * n + i0;
            const size_t vo = (size_t)(h / G) * hs;
            float *o = out + (size_t)h * d;
            __m256 acc[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                acc[c] = _mm256_loadu_ps(o + 8 * c);
            for (int i = 0; i < nb; i++) {
                __m256 pi = _mm256_set1_ps(p[i]);
                const float *v = vr[i] + vo;
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++)
                    acc[c] = _mm256_fmadd_ps(pi, _mm256_loadu_ps(v + 8 * c), acc[c]);
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                _mm256_storeu_ps(o + 8 * c, acc[c]);
        }
    }
    for (int h = 0; h < HG; h++) {
        float *o = out + (size_t)h * d;
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++)
            _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(o + 8 * c),
                                                      _mm256_set1_ps(inv[h])));
    }
    return 1;
}

int rp_attn_group_f32_avx2(const rp_kv_layout *L, const int32_t *table, int layer, int kvh,
                           int j0, int n, const float *q, int G, float scale, const float *sinks,
                           float *sc, float *out)
{
    return rp_attn_groups_f32_avx2(L, table, layer, kvh, 1, j0, n, q, G, scale, sinks, sc, out);
}
