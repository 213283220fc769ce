/* backend/cpu/x86/attn_avx512.c - the paged attention's inner loops (q.k and p*v) for AVX-512.
 * Compiled with the AVX-512 flags; chosen at run time when the CPU has them. */
#include <immintrin.h>

#include "backend/backend_impl.h"

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
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}
