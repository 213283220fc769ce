/* backend/cuda/cuda_decode.cu - decode attention over the paged KV pool (f32, bf16 or f16
 * rows; CUDA C++). What the kernels do and why: cuda_decode.h.
 *
 * Layout of a warp's work: a K / V row is D elements = D / 4 pieces of 4 (16 bytes of f32, 8
 * of a 16-bit type); LG lanes (the power of two >= D / 4, at most 32) share one row, each
 * holding VPL pieces, so one warp instruction covers KPI = 32 / LG keys. Each lane keeps
 * U = 8 / VPL such slots, i.e. 8 K loads and 8 V loads in flight, for KW = KPI * U keys per
 * warp per iteration (D = 128: 8 keys, 8 KB a warp in f32, 4 KB in 16 bits). The loaded
 * pieces stay in their stored type in registers and are widened to f32 where they are used.
 * Scores are summed over the LG lanes of a key group by butterfly shuffles; the max, the softmax sum and the V accumulators stay per lane until the
 * warp's keys are done (the running max is warp-uniform, so rescaling commutes with the final
 * sum over key groups).
 */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_decode.h"
#include "backend/cuda/cuda_kv.cuh"

enum { DA_WARPS = 4, DA_MAX_SPLIT = 128 };

/* NL: a lane's K (and V) loads in flight, 8, or 4 for heads of 64+ (fewer registers, so more
 * blocks per SM: the many-sequence steps, whose blocks otherwise take several waves) */
template <int D, int NL> struct da_shape {
    static constexpr int V4 = D / 4;
    static constexpr int LG = V4 > 16 ? 32 : V4 > 8 ? 16 : V4 > 4 ? 8 : V4 > 2 ? 4 : V4 > 1 ? 2 : 1;
    static constexpr int VPL = (V4 + LG - 1) / LG;
    static constexpr int KPI = 32 / LG;
    static constexpr int U = NL / VPL > 0 ? NL / VPL : 1;
    static constexpr int KW = KPI * U;
    static constexpr int KB = KW * DA_WARPS;
};

__device__ __forceinline__ float4 f4_zero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

template <int D, int G, int DT, int NL>
__global__ void __launch_bounds__(DA_WARPS * 32)
    dec_attn_kernel(const rp_cuda_tok *__restrict__ toks, const int32_t *__restrict__ tbl,
                    rp_cuda_kv kv, int layer, const float *__restrict__ q,
                    float *__restrict__ out, float *__restrict__ part, int H, int KVH,
                    float scale, int window, int n_split, int per_split, unsigned *cnt,
                    int pre)
{
    typedef da_shape<D, NL> S;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* the next kernel (the o projection's matvec) may launch and load its first weights; it
     * waits (griddepcontrol.wait) for all of this grid before it reads out */
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    __shared__ float sm_acc[DA_WARPS][G][D];
    __shared__ float sm_m[DA_WARPS][G], sm_l[DA_WARPS][G];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int kg = lane / S::LG, li = lane % S::LG;
    const int h0 = blockIdx.x * G, t = blockIdx.y, sp = blockIdx.z;
    const int kvh = h0 / (H / KVH);
    /* the token table and the block tables were copied before the step's first kernel */
    const rp_cuda_tok d = toks[t];
    const int pos = d.pos;
    const int j0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int jb = j0 + sp * per_split, je = min(jb + per_split, pos + 1);
    const long kvd = (long)KVH * D;
    typedef typename kv_raw4_t<DT>::T raw4;
    const long kbase = (long)(2 * layer) * kv.half_elems + (long)kvh * D;
    raw4 kk[S::U][S::VPL], vv[S::U][S::VPL];
    bool ok[S::U];
    auto load_kv = [&](int it) {
#pragma unroll
        for (int u = 0; u < S::U; u++) {
            int j = it + u * S::KPI + kg;
            ok[u] = j < je;
            long r = kbase;
            if (ok[u])
                r += (long)tbl[d.tbl + j / kv.block_tokens] * kv.block_elems +
                     (long)(j % kv.block_tokens) * kvd;
#pragma unroll
            for (int v = 0; v < S::VPL; v++) {
                int f = li + S::LG * v;
                bool in = ok[u] && f < S::V4;
                kk[u][v] = in ? kv_raw4<DT>(kv.base, r + 4 * f) : raw4{};
                vv[u][v] = in ? kv_raw4<DT>(kv.base, r + kv.half_elems + 4 * f) : raw4{};
            }
        }
    };
    /* pre: each token is its sequence's only one this step, so keys before pos were stored
     * by earlier steps: the warp's first keys load before the wait when all are below pos */
    const int it0 = jb + w * S::KW;
    const bool early = pre && it0 < je && it0 + S::KW <= pos;
    if (early)
        load_kv(it0);
    pdl_wait(); /* q and the pool's new rows are the previous kernels' */
    float4 qr[G][S::VPL];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int v = 0; v < S::VPL; v++) {
            int f = li + S::LG * v;
            float4 x = f4_zero();
            if (f < S::V4) {
                x = *(const float4 *)(q + ((long)t * H + h0 + g) * D + 4 * f);
                x.x *= scale, x.y *= scale, x.z *= scale, x.w *= scale;
            }
            qr[g][v] = x;
        }
    float m[G], l[G];
    float4 acc[G][S::VPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int v = 0; v < S::VPL; v++)
            acc[g][v] = f4_zero();
    }
    for (int it = it0; it < je; it += S::KB) {
        if (!early || it != it0)
            load_kv(it);
        float s[S::U][G];
#pragma unroll
        for (int u = 0; u < S::U; u++)
#pragma unroll
            for (int g = 0; g < G; g++) {
                float a = 0.0f;
#pragma unroll
                for (int v = 0; v < S::VPL; v++) {
                    float4 x = qr[g][v], y = kv_widen4<DT>(kk[u][v]);
                    a = fmaf(x.x, y.x, a);
                    a = fmaf(x.y, y.y, a);
                    a = fmaf(x.z, y.z, a);
                    a = fmaf(x.w, y.w, a);
                }
#pragma unroll
                for (int o = S::LG / 2; o > 0; o >>= 1)
                    a += __shfl_xor_sync(0xffffffffu, a, o);
                s[u][g] = a;
            }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < S::U; u++)
                if (ok[u])
                    mx = fmaxf(mx, s[u][g]);
#pragma unroll
            for (int o = S::LG; o < 32; o <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            /* mx is finite: the warp's first key of this iteration is always valid */
            float corr = expf(m[g] - mx);
            m[g] = mx;
            l[g] *= corr;
#pragma unroll
            for (int v = 0; v < S::VPL; v++) {
                acc[g][v].x *= corr, acc[g][v].y *= corr;
                acc[g][v].z *= corr, acc[g][v].w *= corr;
            }
#pragma unroll
            for (int u = 0; u < S::U; u++) {
                float p = ok[u] ? expf(s[u][g] - mx) : 0.0f;
                l[g] += p;
#pragma unroll
                for (int v = 0; v < S::VPL; v++) {
                    float4 y = kv_widen4<DT>(vv[u][v]);
                    acc[g][v].x = fmaf(p, y.x, acc[g][v].x);
                    acc[g][v].y = fmaf(p, y.y, acc[g][v].y);
                    acc[g][v].z = fmaf(p, y.z, acc[g][v].z);
                    acc[g][v].w = fmaf(p, y.w, acc[g][v].w);
                }
            }
        }
    }
    /* sum over the warp's key groups (lanes li, li + LG, ...) */
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int o = S::LG; o < 32; o <<= 1) {
            l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
#pragma unroll
            for (int v = 0; v < S::VPL; v++) {
                acc[g][v].x += __shfl_xor_sync(0xffffffffu, acc[g][v].x, o);
                acc[g][v].y += __shfl_xor_sync(0xffffffffu, acc[g][v].y, o);
                acc[g][v].z += __shfl_xor_sync(0xffffffffu, acc[g][v].z, o);
                acc[g][v].w += __shfl_xor_sync(0xffffffffu, acc[g][v].w, o);
            }
        }
        if (kg == 0) {
#pragma unroll
            for (int v = 0; v < S::VPL; v++) {
                int f = li + S::LG * v;
                if (f < S::V4)
                    *(float4 *)&sm_acc[w][g][4 * f] = acc[g][v];
            }
        }
        if (lane == 0) {
            sm_m[w][g] = m[g];
            sm_l[w][g] = l[g];
        }
    }
    __syncthreads();
    /* the block's warps, in order; a warp (or a whole split) with no keys has max -inf */
    for (int i = threadIdx.x; i < G * D; i += DA_WARPS * 32) {
        int g = i / D, e = i % D;
        float M = -INFINITY;
#pragma unroll
        for (int x = 0; x < DA_WARPS; x++)
            M = fmaxf(M, sm_m[x][g]);
        float L = 0.0f, A = 0.0f;
#pragma unroll
        for (int x = 0; x < DA_WARPS; x++) {
            float wt = sm_m[x][g] == -INFINITY ? 0.0f : expf(sm_m[x][g] - M);
            L = fmaf(wt, sm_l[x][g], L);
            A = fmaf(wt, sm_acc[x][g][e], A);
        }
        if (n_split == 1) {
            out[((long)t * H + h0 + g) * D + e] = A / L;
        } else {
            float *pp = part + (((long)t * H + h0 + g) * n_split + sp) * (D + 2);
            if (e == 0)
                pp[0] = M, pp[1] = L;
            pp[2 + e] = A;
        }
    }
    if (n_split == 1 || !cnt)
        return;
    /* The last split of (head group, token) to finish merges them all, in split order, with
     * the arithmetic of dec_merge_kernel (every output of the G heads at once: their splits'
     * max and sum staged in shared memory); the counter goes back to 0 for the next launch. */
    __shared__ int last;
    __shared__ float pm[G * DA_MAX_SPLIT], pl[G * DA_MAX_SPLIT];
    __threadfence();
    __syncthreads();
    unsigned *ctr = cnt + (long)t * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0)
        last = atomicAdd(ctr, 1u) == (unsigned)n_split - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const float *pb = part + ((long)t * H + h0) * n_split * (D + 2); /* head h0 + g, split s:
                                                                      * (g * n_split + s) rows */
    for (int i = threadIdx.x; i < G * n_split; i += DA_WARPS * 32) {
        pm[i] = __ldcg(pb + (long)i * (D + 2));
        pl[i] = __ldcg(pb + (long)i * (D + 2) + 1);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += DA_WARPS * 32) {
        int g = i / D, e = i % D;
        const float *sm = pm + g * n_split, *sl = pl + g * n_split;
        float M = -INFINITY;
        for (int x = 0; x < n_split; x++)
            M = fmaxf(M, sm[x]);
        const float *p = pb + (long)g * n_split * (D + 2) + 2 + e;
        float L = 0.0f, acc = 0.0f;
#pragma unroll 8
        for (int x = 0; x < n_split; x++) {
            float wv = sm[x] == -INFINITY ? 0.0f : expf(sm[x] - M);
            L = fmaf(wv, sl[x], L);
            acc = fmaf(wv, __ldcg(p + (long)x * (D + 2)), acc);
        }
        float inv = 1.0f / L;
        out[((long)t * H + h0 + g) * D + e] = acc * inv;
    }
    if (threadIdx.x == 0)
        *ctr = 0;
}

/* Block (head, token): the splits' partials, in split order. */
__global__ void __launch_bounds__(128)
    dec_merge_kernel(const float *__restrict__ part, float *__restrict__ out, int H, int D,
                     int n_split)
{
    __shared__ float wt[DA_MAX_SPLIT];
    __shared__ float red[4];
    pdl_wait();
    int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x, lane = i & 31, w = i >> 5;
    const float *pp = part + ((long)t * H + h) * n_split * (D + 2);
    float m = i < n_split ? pp[(long)i * (D + 2)] : -INFINITY;
    float M = m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (lane == 0)
        red[w] = M;
    __syncthreads();
    M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    float wi = m == -INFINITY ? 0.0f : expf(m - M);
    if (i < n_split)
        wt[i] = wi;
    __syncthreads();
    /* the sum in split order, the same in every thread */
    float L = 0.0f;
    for (int s = 0; s < n_split; s++)
        L = fmaf(wt[s], pp[(long)s * (D + 2) + 1], L);
    float inv = 1.0f / L;
    for (int e = i; e < D; e += 128) {
        float a = 0.0f;
#pragma unroll 8
        for (int s = 0; s < n_split; s++)
            a = fmaf(wt[s], pp[(long)s * (D + 2) + 2 + e], a);
        out[((long)t * H + h) * D + e] = a * inv;
    }
}

static int da_kb(int D, int L)
{
#define DA_KB(DD)                                                                              \
    case DD: return L == 4 ? da_shape<DD, 4>::KB : da_shape<DD, 8>::KB;
    switch (D) {
        DA_KB(8)
        DA_KB(16)
        DA_KB(24)
        DA_KB(32)
        DA_KB(64)
        DA_KB(128)
        DA_KB(256)
    default: return 0;
    }
#undef DA_KB
}

int rp_cuda_dec_ok(int D, int G, const rp_cuda_kv *kv)
{
    return da_kb(D, 8) > 0 && (G == 1 || G == 2 || G == 4 || G == 8) && G * D <= 2048 &&
           kv->block_elems % 4 == 0 && kv->half_elems % 4 == 0 &&
           (uintptr_t)kv->base % 16 == 0;
}

/* The 4-load kernels exist for heads of 64 and more (the small heads' rows are a few lanes
 * wide: 8 loads a lane are few bytes already). */
template <int D> static constexpr int da_l(int L) { return D >= 64 && L == 4 ? 4 : 8; }

/* Blocks of the (D, G, DT, L) kernel resident on one SM (asked once; at least 1). */
template <int D, int G, int DT, int L> static int da_per_sm()
{
    static int n = 0;
    if (n == 0) {
        int b = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, dec_attn_kernel<D, G, DT, L>,
                                                         DA_WARPS * 32, 0));
        n = b > 0 ? b : 1;
    }
    return n;
}

template <int D> static int da_per_sm_g(int G, int dt, int L)
{
#define DA_PS(GG)                                                                              \
    case GG: {                                                                                 \
        int r = 0;                                                                             \
        if (L == 4 && D >= 64)                                                                 \
            KV_DISPATCH(dt, r = da_per_sm<D, GG, KDT, da_l<D>(4)>());                          \
        else                                                                                   \
            KV_DISPATCH(dt, r = da_per_sm<D, GG, KDT, 8>());                                   \
        return r;                                                                              \
    }
    switch (G) {
        DA_PS(8)
        DA_PS(4)
        DA_PS(2)
    default:
        DA_PS(1)
    }
#undef DA_PS
}

static int da_per_sm_any(int D, int G, int dt, int L)
{
    switch (D) {
    case 8: return da_per_sm_g<8>(G, dt, L);
    case 16: return da_per_sm_g<16>(G, dt, L);
    case 24: return da_per_sm_g<24>(G, dt, L);
    case 32: return da_per_sm_g<32>(G, dt, L);
    case 64: return da_per_sm_g<64>(G, dt, L);
    case 128: return da_per_sm_g<128>(G, dt, L);
    default: return da_per_sm_g<256>(G, dt, L);
    }
}

void rp_cuda_dec_plan(int D, int G, int dt, int mode, int span, long units, int sms,
                      int *n_split, int *per_split, int *loads)
{
    int L = 8;
    long want;
    if (mode == 1) { /* the first rule: about 4 blocks per SM, rounded up */
        want = (4L * sms + units - 1) / units;
    } else {
        /* the grid in one wave of resident blocks: as many splits as fit beside the units,
         * rounded down (1 when the units alone fill the GPU); mode 0 takes the 4-load
         * kernel where the 8-load one's units would not fit in one wave, mode 3 always */
        long r8 = (long)da_per_sm_any(D, G, dt, 8) * sms;
        L = mode == 3 || (mode == 0 && units > r8 && D >= 64) ? 4 : 8;
        long res = L == 4 ? (long)da_per_sm_any(D, G, dt, 4) * sms : r8;
        want = res / units;
    }
    int kb = da_kb(D, L);
    int n_chunks = (span + kb - 1) / kb;
    int ns = (int)(want < n_chunks ? want : n_chunks);
    ns = ns < 1 ? 1 : ns > DA_MAX_SPLIT ? DA_MAX_SPLIT : ns;
    int per = (n_chunks + ns - 1) / ns * kb;
    *per_split = per;
    *n_split = (span + per - 1) / per;
    *loads = L;
}

template <int D, int G>
static void da_go(cudaStream_t st, int pdl, dim3 grid, const rp_cuda_tok *toks, const int32_t *tbl,
                  rp_cuda_kv kv, int layer, const float *q, float *out, float *part, int H,
                  int KVH, float scale, int window, int n_split, int per_split, unsigned *cnt,
                  int pre, int L)
{
    if (L == 4 && D >= 64)
        KV_DISPATCH(kv.dt, pdl_launch(pdl, dec_attn_kernel<D, G, KDT, da_l<D>(4)>, grid,
                                      dim3(DA_WARPS * 32), st, toks, tbl, kv, layer, q, out, part,
                                      H, KVH, scale, window, n_split, per_split, cnt, pre));
    else
        KV_DISPATCH(kv.dt, pdl_launch(pdl, dec_attn_kernel<D, G, KDT, 8>, grid,
                                      dim3(DA_WARPS * 32), st, toks, tbl, kv, layer, q, out, part,
                                      H, KVH, scale, window, n_split, per_split, cnt, pre));
}

template <int D>
static void da_go_g(int G, cudaStream_t st, int pdl, dim3 grid, const rp_cuda_tok *toks,
                    const int32_t *tbl, rp_cuda_kv kv, int layer, const float *q, float *out,
                    float *part, int H, int KVH, float scale, int window, int n_split,
                    int per_split, unsigned *cnt, int pre, int L)
{
    switch (G) {
    case 8:
        da_go<D, 8>(st, pdl, grid, toks, tbl, kv, layer, q, out, part, H, KVH, scale, window,
                    n_split, per_split, cnt, pre, L);
        break;
    case 4:
        da_go<D, 4>(st, pdl, grid, toks, tbl, kv, layer, q, out, part, H, KVH, scale, window,
                    n_split, per_split, cnt, pre, L);
        break;
    case 2:
        da_go<D, 2>(st, pdl, grid, toks, tbl, kv, layer, q, out, part, H, KVH, scale, window,
                    n_split, per_split, cnt, pre, L);
        break;
    default:
        da_go<D, 1>(st, pdl, grid, toks, tbl, kv, layer, q, out, part, H, KVH, scale, window,
                    n_split, per_split, cnt, pre, L);
        break;
    }
}

void rp_cuda_dec_attn(cudaStream_t st, int pdl, const rp_cuda_tok *toks, const int32_t *tbl,
                      rp_cuda_kv kv, int layer, const float *q, float *out, float *part, int H,
                      int KVH, int D, int G, float scale, int window, int n_tok, int n_split,
                      int per_split, unsigned *cnt, int pre, int loads)
{
    dim3 grid((unsigned)(H / G), (unsigned)n_tok, (unsigned)n_split);
#define DA_CASE(DD)                                                                            \
    case DD:                                                                                   \
        da_go_g<DD>(G, st, pdl, grid, toks, tbl, kv, layer, q, out, part, H, KVH, scale, window,    \
                    n_split, per_split, cnt, pre, loads);                                      \
        break;
    switch (D) {
        DA_CASE(8)
        DA_CASE(16)
        DA_CASE(24)
        DA_CASE(32)
        DA_CASE(64)
        DA_CASE(128)
        DA_CASE(256)
    default:
        break;
    }
#undef DA_CASE
    CK(cudaGetLastError());
    if (n_split > 1 && !cnt) {
        pdl_launch(pdl, dec_merge_kernel, dim3((unsigned)H, (unsigned)n_tok), dim3(128), st,
                   (const float *)part, out, H, D, n_split);
        CK(cudaGetLastError());
    }
}
