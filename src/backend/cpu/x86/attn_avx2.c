/* backend/cpu/x86/attn_avx2.c - the paged attention's q.k and p*v loops for CPUs with AVX2
 * but no AVX-512 (attn_avx512.c has the 16-lane ones and the rest of the attention's loops).
 * Compiled with the AVX2 flags; chosen at run time. */
#include <immintrin.h>
#include <math.h>

#include "backend/backend_impl.h"

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

/* e^x for 8 lanes, the same arithmetic as attn_avx512.c's exp16 (so the same bits): x = n ln 2
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
