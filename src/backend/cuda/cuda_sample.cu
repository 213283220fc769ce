/* backend/cuda/cuda_sample.cu - rp_sample_draw (backend/sample.h) on the GPU: one block of
 * 1024 threads a row, so that a sampled token leaves the GPU as one id, not as a row of logits.
 *
 * Every float and double operation is the one the host's C code (backend/sample.c) does, in
 * the same order wherever the order changes the result: the file is compiled with
 * --fmad=false (no multiply-add contraction), e^x is sample.h's rp_sample_exp (IEEE
 * operations only), and the sums sample.h specifies in chunks are summed here the same way
 * (thread t owns chunk t, thread 0 adds the chunk sums in order). Where the order does not
 * matter (the maximum, the counts of the radix select), threads stride over the row for
 * coalesced loads. So the token equals the host's bit for bit (gpu_check compares them).
 *
 * Sorted draws (top-k, top-p): the first T candidates in order of the scaled logit
 * descending, ties by the lower id, T = top_k or (nucleus alone) RP_SAMPLE_MAX_SORTED: a
 * 4-pass radix select over order-preserving 32-bit keys (+0 and -0 one key) finds the T-th
 * key, the candidates above it and the lowest-id ones equal to it are gathered in index order,
 * then a bitonic sort of 1024 slots; thread 0 then runs the host's sequential steps over them.
 * A nucleus that the T candidates do not reach (or top_k > 1024) gives -1: the caller draws
 * that row from its logits.
 */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_sample.h"

enum { ST = 1024 };
static_assert(ST == RP_SAMPLE_CHUNKS && ST == RP_SAMPLE_MAX_SORTED,
              "one thread per chunk and per sorted slot");

/* order-preserving key of a scaled logit: a > b as floats <=> key(a) > key(b) (one key for
 * both zeros) */
__device__ __forceinline__ uint32_t key_of(float s)
{
    uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* a (key, id) before b in the candidates' order */
__device__ __forceinline__ bool before(uint32_t ka, int ia, uint32_t kb, int ib)
{
    return ka > kb || (ka == kb && ia < ib);
}

struct sample_smem {
    double cs[ST];     /* chunk sums */
    uint32_t key[ST];  /* the sorted slots */
    int32_t id[ST];
    float w[ST];       /* their scaled logits, then weights */
    int n_gt[ST], n_eq[ST];
    unsigned hist[256];
    float fr[32];
    int ir[32];
    uint32_t prefix;
    int need, result;
    float mx;
};

/* block max of v (and with idx: the lowest index among equal maxima) */
__device__ float block_max(sample_smem &sm, float v, int *idx)
{
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    int i = idx ? *idx : 0;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (idx && ov == v && oi < i))
            v = ov, i = oi;
    }
    if (lane == 0)
        sm.fr[wid] = v, sm.ir[wid] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < ST / 32; w++)
            if (sm.fr[w] > v || (idx && sm.fr[w] == v && sm.ir[w] < i))
                v = sm.fr[w], i = sm.ir[w];
        sm.fr[0] = v, sm.ir[0] = i;
    }
    __syncthreads();
    v = sm.fr[0];
    if (idx)
        *idx = sm.ir[0];
    __syncthreads();
    return v;
}

__global__ void __launch_bounds__(ST) sample_kernel(const float *__restrict__ x, long n_,
                                                    const rp_sample_row *__restrict__ prm,
                                                    int32_t *__restrict__ out)
{
    __shared__ sample_smem sm;
    const int n = (int)n_, t = threadIdx.x;
    const float *row = x + (long)blockIdx.x * n_;
    const rp_sample_row p = prm[blockIdx.x];
    const int ch = rp_sample_chunk(n), c0 = t * ch < n ? t * ch : n;
    const int c1 = c0 + ch < n ? c0 + ch : n, n_chunks = (n + ch - 1) / ch;
    if (p.temperature <= 0) { /* greedy: the host's argmax, the first of equal maxima */
        float best = -INFINITY;
        int bi = INT_MAX;
        for (int i = t; i < n; i += ST)
            if (bi == INT_MAX || row[i] > best)
                best = row[i], bi = i;
        block_max(sm, best, &bi);
        if (t == 0)
            out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
        return;
    }
    const float inv_t = 1.0f / p.temperature;
    float m = -INFINITY;
    for (int i = t; i < n; i += ST) {
        float s = row[i] * inv_t;
        m = s > m ? s : m;
    }
    const float mx = block_max(sm, m, NULL);
    const int k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
    const bool nucleus = p.top_p > 0 && p.top_p < 1;
    if (k == n && !nucleus) { /* every token in index order (sample.h step 3) */
        const float keep_min = p.min_p > 0 ? p.min_p : 0.0f;
        double cs = 0.0;
        for (int i = c0; i < c1; i++) {
            float e = rp_sample_exp(row[i] * inv_t - mx);
            cs += e >= keep_min ? e : 0.0f;
        }
        sm.cs[t] = cs;
        __syncthreads();
        if (t != 0)
            return;
        double total = 0.0;
        for (int j = 0; j < n_chunks; j++)
            total += sm.cs[j];
        double r = p.u * total;
        for (int j = 0; j < n_chunks; j++) {
            if (r >= sm.cs[j]) {
                r -= sm.cs[j];
                continue;
            }
            int e1 = (j + 1) * ch < n ? (j + 1) * ch : n;
            for (int i = j * ch; i < e1; i++) {
                float e = rp_sample_exp(row[i] * inv_t - mx);
                if (e >= keep_min) {
                    r -= e;
                    if (r < 0) {
                        out[blockIdx.x] = i;
                        return;
                    }
                }
            }
        }
        int last = 0;
        for (int i = n - 1; i > 0 && !last; i--)
            if (rp_sample_exp(row[i] * inv_t - mx) >= keep_min)
                last = i;
        out[blockIdx.x] = last;
        return;
    }
    const int T = k < n ? k : (n < ST ? n : ST);
    if (T > ST) {
        if (t == 0)
            out[blockIdx.x] = -1;
        return;
    }
    /* radix select of the T-th largest key, 8 bits a pass from the top */
    if (t == 0)
        sm.prefix = 0, sm.need = T;
    for (int shift = 24; shift >= 0; shift -= 8) {
        const uint32_t hi = shift == 24 ? 0u : ~0u << (shift + 8);
        for (int b = t; b < 256; b += ST)
            sm.hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = sm.prefix;
        for (int i0 = 0; i0 < n; i0 += ST) {
            int i = i0 + t;
            bool in = false;
            unsigned bin = 0;
            if (i < n) {
                uint32_t key = key_of(row[i] * inv_t);
                in = ((key ^ prefix) & hi) == 0;
                bin = (key >> shift) & 255u;
            }
            /* warp-aggregated: one atomic per distinct bin of the warp */
            unsigned act = __ballot_sync(0xffffffffu, in);
            if (in) {
                unsigned same = __match_any_sync(act, bin);
                if ((__ffs(same) - 1) == (int)(threadIdx.x % 32))
                    atomicAdd(&sm.hist[bin], (unsigned)__popc(same));
            }
        }
        __syncthreads();
        if (t == 0) {
            int need = sm.need, acc = 0, b = 255;
            for (; b > 0; b--) {
                if (acc + (int)sm.hist[b] >= need)
                    break;
                acc += (int)sm.hist[b];
            }
            sm.need = need - acc;
            sm.prefix = prefix | ((uint32_t)b << shift);
        }
        __syncthreads();
    }
    const uint32_t thr = sm.prefix;
    const int need_eq = sm.need; /* of the keys equal to thr: the lowest ids */
    /* gather in index order: thread t's chunk, after the chunks before it */
    int gt = 0, eq = 0;
    for (int i = c0; i < c1; i++) {
        uint32_t key = key_of(row[i] * inv_t);
        gt += key > thr;
        eq += key == thr;
    }
    sm.n_gt[t] = gt, sm.n_eq[t] = eq;
    __syncthreads();
    if (t == 0) { /* exclusive prefix sums, in place */
        int a = 0, b = 0;
        for (int j = 0; j < ST; j++) {
            int g = sm.n_gt[j], e = sm.n_eq[j];
            sm.n_gt[j] = a, sm.n_eq[j] = b;
            a += g, b += e;
        }
    }
    __syncthreads();
    {
        int og = sm.n_gt[t], oe = sm.n_eq[t], base_eq = T - need_eq;
        for (int i = c0; i < c1; i++) {
            float s = row[i] * inv_t;
            uint32_t key = key_of(s);
            int at = -1;
            if (key > thr)
                at = og++;
            else if (key == thr && oe < need_eq)
                at = base_eq + oe++;
            else if (key == thr)
                oe++;
            if (at >= 0)
                sm.key[at] = key, sm.id[at] = i, sm.w[at] = s;
        }
    }
    __syncthreads();
    if (t >= T)
        sm.key[t] = 0, sm.id[t] = INT_MAX, sm.w[t] = -INFINITY;
    /* the nucleus alone needs the whole vocabulary's sum, in chunks as on the host */
    if (k == n) {
        double cs = 0.0;
        for (int i = c0; i < c1; i++) {
            float e = rp_sample_exp(row[i] * inv_t - mx);
            cs += e >= 0.0f ? e : 0.0f;
        }
        sm.cs[t] = cs;
    }
    __syncthreads();
    /* bitonic sort of the ST slots into the candidates' order */
    for (int size = 2; size <= ST; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            int j = t ^ stride;
            if (j > t) {
                bool up = (t & size) == 0; /* this pair's run: ascending in "before" order */
                bool jb = before(sm.key[j], sm.id[j], sm.key[t], sm.id[t]);
                if (jb == up) {
                    uint32_t tk = sm.key[t];
                    int32_t ti = sm.id[t];
                    float tw = sm.w[t];
                    sm.key[t] = sm.key[j], sm.id[t] = sm.id[j], sm.w[t] = sm.w[j];
                    sm.key[j] = tk, sm.id[j] = ti, sm.w[j] = tw;
                }
            }
            __syncthreads();
        }
    if (t != 0)
        return;
    /* the host's sequential steps (sample.c rp_sample_draw) over the sorted slots */
    float *c = sm.w;
    double sum = 0.0;
    int mm = T;
    if (k < n) {
        for (int i = 0; i < T; i++) {
            c[i] = rp_sample_exp(c[i] - mx);
            sum += c[i];
        }
        if (nucleus) {
            double cum = 0.0;
            for (int i = 0; i < T; i++) {
                cum += c[i] / sum;
                if (cum >= p.top_p) {
                    mm = i + 1;
                    break;
                }
            }
        }
    } else {
        for (int j = 0; j < n_chunks; j++)
            sum += sm.cs[j];
        double cum = 0.0;
        bool found = false;
        for (int i = 0; i < T && !found; i++) {
            cum += rp_sample_exp(c[i] - mx) / sum;
            if (cum >= p.top_p) {
                mm = i + 1;
                found = true;
            }
        }
        if (!found && T < n) { /* the nucleus is longer than the sorted slots */
            out[blockIdx.x] = -1;
            return;
        }
        for (int i = 0; i < mm; i++)
            c[i] = rp_sample_exp(c[i] - mx);
    }
    int32_t *ids = sm.id;
    if (p.min_p > 0) {
        float best = c[0];
        int j = 0;
        for (int i = 0; i < mm; i++)
            if (c[i] >= p.min_p * best)
                c[j] = c[i], ids[j++] = ids[i];
        mm = j > 0 ? j : 1; /* min_p > 1 keeps nothing: the best one */
    }
    double total = 0.0;
    for (int i = 0; i < mm; i++)
        total += c[i];
    double r = p.u * total;
    for (int i = 0; i < mm; i++) {
        r -= c[i];
        if (r < 0) {
            out[blockIdx.x] = ids[i];
            return;
        }
    }
    out[blockIdx.x] = ids[mm - 1];
}

void rp_cuda_sample_launch(cudaStream_t s, const float *x, int n_rows, long n,
                           const rp_sample_row *p, int32_t *out)
{
    sample_kernel<<<n_rows, ST, 0, s>>>(x, n, p, out);
}
