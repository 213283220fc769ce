/* backend/cpu/x86/quant_kernels.inc.h - int8 dot-product matmul kernels for every quantized
 * weight type, included by kernels_avx2.c and kernels_avx512.c (compiled once per ISA).
 *
 * The including file defines, before including:
 *   QK_DOT(u, s)   int32x8 of sums of 4 adjacent u8 x s8 products (VNNI dpbusd, or AVX2
 *                  maddubs + madd: no saturation for |u| <= 128, |s| <= 127)
 *   QK_HIBITS(qh)  32 bytes, 0x10 where bit j of the u32 qh is set (Q5_0 / Q5_1)
 *   QK_PREFIX      the function-name prefix (avx2_ / avx512_)
 *
 * Scheme: the weight row is walked in 32-element runs. Each run unpacks to 32 bytes (u8 0..63,
 * or s8 for signed types, which use |w| with the activation's sign flipped where w < 0), one
 * dot product per (row, token) gives 8 int32 lanes, each lane covering 4 consecutive elements,
 * which are scaled by (weight scale x activation scale) per lane (Q6_K's scales change every 16
 * elements, i.e. every 4 lanes) and accumulated in f32. Affine types (w = d q + m) add
 * m x (exact f32 sum of the activation run). A tile is 4 rows x up to 4 tokens.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/quant.h"
#include "base/half.h"

#define QK_CAT2(a, b) a##b
#define QK_CAT(a, b) QK_CAT2(a, b)
#define QK_FN(name) QK_CAT(QK_PREFIX, name)
#define QK_AI static inline __attribute__((always_inline))

QK_AI float qk_h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

QK_AI float qk_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes -> 32 u8: low nibbles (elements 0..15), then high nibbles (16..31). */
QK_AI __m256i qk_nib16(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i t = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(t, _mm256_set1_epi8(15));
}

QK_AI float qk_scale_at(rp_dtype sdt, const void *p, size_t i)
{
    if (sdt == RP_DT_F32)
        return rp_load_f32(p, i);
    uint16_t h = rp_load_u16(p, i);
    return sdt == RP_DT_BF16 ? rp_bf16_to_f32(h) : _cvtsh_ss(h);
}

/* Everything one row needs to unpack its runs. */
typedef struct qk_row {
    const uint8_t *p;
    const void *scales, *biases; /* MLX: this row's groups */
} qk_row;

typedef struct qk_run {
    __m256i q;    /* 32 unpacked weights */
    float d, d2;  /* scale (d2: second half of the run, Q6_K only) */
    float m;      /* affine offset: w = d q + m */
} qk_run;

/* Unpacks run k of a row. Compile-time constant dt, so every branch but one folds away. */
QK_AI void qk_unpack(rp_dtype dt, const rp_tensor *w, const qk_row *row, long k, qk_run *o)
{
    const uint8_t *p = row->p;
    switch (dt) {
    case RP_DT_Q8_0: {
        const uint8_t *b = p + 34 * k;
        o->q = _mm256_loadu_si256((const __m256i *)(b + 2));
        o->d = qk_h2f(b);
        return;
    }
    case RP_DT_Q4_0: {
        const uint8_t *b = p + 18 * k;
        o->q = qk_nib16(b + 2);
        o->d = qk_h2f(b);
        o->m = -8.0f * o->d;
        return;
    }
    case RP_DT_Q4_1: {
        const uint8_t *b = p + 20 * k;
        o->q = qk_nib16(b + 4);
        o->d = qk_h2f(b);
        o->m = qk_h2f(b + 2);
        return;
    }
    case RP_DT_Q5_0: {
        const uint8_t *b = p + 22 * k;
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        o->q = _mm256_or_si256(qk_nib16(b + 6), QK_HIBITS(qh));
        o->d = qk_h2f(b);
        o->m = -16.0f * o->d;
        return;
    }
    case RP_DT_Q5_1: {
        const uint8_t *b = p + 24 * k;
        uint32_t qh;
        memcpy(&qh, b + 4, 4);
        o->q = _mm256_or_si256(qk_nib16(b + 8), QK_HIBITS(qh));
        o->d = qk_h2f(b);
        o->m = qk_h2f(b + 2);
        return;
    }
    case RP_DT_Q4_K:
    case RP_DT_Q5_K: {
        int five = dt == RP_DT_Q5_K, j = (int)(k & 7);
        const uint8_t *b = p + (five ? 176 : 144) * (k >> 3), *s = b + 4;
        __m256i v = _mm256_loadu_si256((const __m256i *)(b + (five ? 48 : 16) + 32 * (j >> 1)));
        if (j & 1)
            v = _mm256_srli_epi16(v, 4);
        v = _mm256_and_si256(v, _mm256_set1_epi8(15));
        if (five) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
            h = _mm256_and_si256(_mm256_srli_epi16(h, j), _mm256_set1_epi8(1));
            v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4));
        }
        int sc, m;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
        o->q = v;
        o->d = qk_h2f(b) * (float)sc;
        o->m = -qk_h2f(b + 2) * (float)m;
        return;
    }
    case RP_DT_Q6_K: {
        int r = (int)(k & 7), h = r >> 2, kk = r & 3;
        const uint8_t *b = p + 210 * (k >> 3);
        __m256i lo = _mm256_loadu_si256((const __m256i *)(b + 64 * h + (kk & 1 ? 32 : 0)));
        __m256i hi = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        if (kk >= 2)
            lo = _mm256_srli_epi16(lo, 4);
        lo = _mm256_and_si256(lo, _mm256_set1_epi8(15));
        hi = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * kk), _mm256_set1_epi8(3));
        __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        o->q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
        const int8_t *S = (const int8_t *)(b + 192) + 8 * h + 2 * kk;
        float d = qk_h2f(b + 208);
        o->d = d * (float)S[0];
        o->d2 = d * (float)S[1];
        return;
    }
    case RP_DT_MLX4: { /* run k: the low (k even) or high nibbles of 64-block k / 2 */
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 * (k >> 1)));
        if (k & 1)
            v = _mm256_srli_epi16(v, 4);
        o->q = _mm256_and_si256(v, _mm256_set1_epi8(15));
        long g = 64 * (k >> 1) / w->group_size;
        o->d = qk_scale_at(w->scale_dtype, row->scales, (size_t)g);
        /* group size 32: lanes 4..7 hold elements 32..63 of the block */
        o->d2 = w->group_size == 32 ? qk_scale_at(w->scale_dtype, row->scales, (size_t)g + 1)
                                    : o->d;
        return;
    }
    case RP_DT_MLX8: {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 * k));
        o->q = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)); /* q - 128, signed */
        o->d = qk_scale_at(w->scale_dtype, row->scales, (size_t)(k * 32 / w->group_size));
        return;
    }
    default: return;
    }
}

QK_AI int qk_signed(rp_dtype dt)
{
    return dt == RP_DT_Q8_0 || dt == RP_DT_Q6_K || dt == RP_DT_MLX8;
}

/* In-loop affine term (m x run sum); MLX biases are added per group after the loop. */
QK_AI int qk_affine(rp_dtype dt)
{
    return dt != RP_DT_Q8_0 && dt != RP_DT_Q6_K && dt != RP_DT_MLX4 && dt != RP_DT_MLX8;
}

QK_AI int qk_lane_scales(rp_dtype dt) { return dt == RP_DT_Q6_K || dt == RP_DT_MLX4; }

/* sum over groups of bias_g x (sum of x over group g), for one row and token; MLX 8-bit runs
 * as q - 128, so its bias gains 128 x scale. */
QK_AI float qk_mlx_bias(const rp_tensor *w, const qk_row *row, const float *xs, long cols,
                        rp_dtype dt)
{
    long ng = cols / w->group_size, per = w->group_size / 32;
    float acc = 0.0f;
    for (long g = 0; g < ng; g++) {
        float xg = 0.0f;
        for (long k = 0; k < per; k++)
            xg += xs[g * per + k];
        float b = qk_scale_at(w->scale_dtype, row->biases, (size_t)g);
        if (dt == RP_DT_MLX8)
            b += 128.0f * qk_scale_at(w->scale_dtype, row->scales, (size_t)g);
        acc += b * xg;
    }
    return acc;
}

QK_AI void qk_tile(const rp_tensor *w, long r, const rp_qact *a, int t0, float *y, rp_dtype dt,
                   const int nr, const int nt)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1], nrun = cols / 32;
    size_t rb = rp_dtype_row_bytes(dt, cols);
    qk_row R[4];
    for (int i = 0; i < nr; i++) {
        R[i].p = (const uint8_t *)w->data + (size_t)(r + i) * rb;
        if (dt == RP_DT_MLX4 || dt == RP_DT_MLX8) {
            size_t off = (size_t)(r + i) * (size_t)(cols / w->group_size) *
                         (w->scale_dtype == RP_DT_F32 ? 4 : 2);
            R[i].scales = (const char *)w->scales + off;
            R[i].biases = (const char *)w->biases + off;
        }
    }
    __m256 acc[4][4];
    float macc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            acc[i][j] = _mm256_setzero_ps();
            macc[i][j] = 0.0f;
        }
    const int8_t *xq[4];
    const float *xd[4], *xs[4];
    for (int j = 0; j < nt; j++) {
        xq[j] = a->q + (long)(t0 + j) * cols;
        xd[j] = a->d + (long)(t0 + j) * (a->run64 ? nrun / 2 : nrun);
        xs[j] = a->s + (long)(t0 + j) * nrun;
    }
    for (long k = 0; k < nrun; k++) {
        __m256i xv[4];
        float dx[4];
#pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            xv[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + 32 * k));
            dx[j] = a->run64 ? xd[j][k >> 1] : xd[j][k];
        }
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            qk_run u;
            qk_unpack(dt, w, &R[i], k, &u);
            __m256i wu = qk_signed(dt) ? _mm256_sign_epi8(u.q, u.q) : u.q;
            __m256 ws = qk_lane_scales(dt) ? _mm256_set_m128(_mm_set1_ps(u.d2), _mm_set1_ps(u.d))
                                           : _mm256_set1_ps(u.d);
#pragma GCC unroll 4
            for (int j = 0; j < nt; j++) {
                __m256i xs8 = qk_signed(dt) ? _mm256_sign_epi8(xv[j], u.q) : xv[j];
                __m256 p = _mm256_cvtepi32_ps(QK_DOT(wu, xs8));
                acc[i][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(ws, _mm256_set1_ps(dx[j])),
                                            acc[i][j]);
                if (qk_affine(dt))
                    macc[i][j] += u.m * xs[j][k];
            }
        }
    }
    if (dt == RP_DT_MLX4 || dt == RP_DT_MLX8)
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nt; j++)
                macc[i][j] = qk_mlx_bias(w, &R[i], xs[j], cols, dt);
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++)
            y[(long)(t0 + j) * rows + r + i] = qk_hsum(acc[i][j]) + macc[i][j];
}

QK_AI void qk_matmul(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                     float *y, rp_dtype dt)
{
    for (long r = r0; r < r1; r += 4) {
        int nr = r1 - r >= 4 ? 4 : (int)(r1 - r);
        for (int t = 0; t < n_tok; t += 4) {
            int nt = n_tok - t >= 4 ? 4 : n_tok - t;
            if (nr == 4) {
                switch (nt) {
                case 4: qk_tile(w, r, a, t, y, dt, 4, 4); break;
                case 3: qk_tile(w, r, a, t, y, dt, 4, 3); break;
                case 2: qk_tile(w, r, a, t, y, dt, 4, 2); break;
                default: qk_tile(w, r, a, t, y, dt, 4, 1); break;
                }
            } else {
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++)
                        qk_tile(w, r + i, a, t + j, y, dt, 1, 1);
            }
        }
    }
}

#define QK_DEFINE(T, DT)                                                                       \
    static void QK_FN(q_##T)(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n,   \
                             float *y)                                                         \
    {                                                                                          \
        qk_matmul(w, r0, r1, a, n, y, DT);                                                     \
    }
QK_DEFINE(q8_0, RP_DT_Q8_0)
QK_DEFINE(q4_0, RP_DT_Q4_0)
QK_DEFINE(q4_1, RP_DT_Q4_1)
QK_DEFINE(q5_0, RP_DT_Q5_0)
QK_DEFINE(q5_1, RP_DT_Q5_1)
QK_DEFINE(q4_k, RP_DT_Q4_K)
QK_DEFINE(q5_k, RP_DT_Q5_K)
QK_DEFINE(q6_k, RP_DT_Q6_K)
QK_DEFINE(mlx4, RP_DT_MLX4)
QK_DEFINE(mlx8, RP_DT_MLX8)
#undef QK_DEFINE

static void QK_FN(fill_qtable)(rp_cpu_kernels *k)
{
    k->qmatmul[RP_DT_Q8_0] = QK_FN(q_q8_0);
    k->qmatmul[RP_DT_Q4_0] = QK_FN(q_q4_0);
    k->qmatmul[RP_DT_Q4_1] = QK_FN(q_q4_1);
    k->qmatmul[RP_DT_Q5_0] = QK_FN(q_q5_0);
    k->qmatmul[RP_DT_Q5_1] = QK_FN(q_q5_1);
    k->qmatmul[RP_DT_Q4_K] = QK_FN(q_q4_k);
    k->qmatmul[RP_DT_Q5_K] = QK_FN(q_q5_k);
    k->qmatmul[RP_DT_Q6_K] = QK_FN(q_q6_k);
    k->qmatmul[RP_DT_MLX4] = QK_FN(q_mlx4);
    k->qmatmul[RP_DT_MLX8] = QK_FN(q_mlx8);
}
