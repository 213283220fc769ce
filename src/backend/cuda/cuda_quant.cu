/* backend/cuda/cuda_quant.cu - kernels for MLX affine 4-bit / 8-bit weights (CUDA C++).
 *
 * Layouts and numerics: cuda_quant.h. Design notes:
 *  1. Decode (n_tok <= 4): qx_int8_kernel splits x per 32-element run into two int8 parts
 *     (x ~= d q1 + d / 254 q2, cuda_quant.h) with (d, f32 sum); for 4-bit weights the bytes
 *     of each 8 elements are stored evens first (x0 x2 x4 x6 x1 x3 x5 x7), so the low nibbles
 *     of a packed word (elements 0 2 4 6 as bytes after & 0x0F0F0F0F) and the high ones meet
 *     their x bytes in one dp4a each. qmv_kernel: 2 rows per warp for one token (1 for 2..4
 *     tokens; rows of up to three matrices stacked, as the bf16 matvec), lane i takes runs
 *     i, i + 32, ...: 16-byte (4-bit) or 2 x 16-byte (8-bit) streaming loads, 4 (2) runs
 *     per row in flight per lane, issued with their scales before the programmatic
 *     dependent launch wait (weights never change; only x waits for the previous kernel).
 *     Opt-in for one token (RAPID_CUDA_QMVF=2..9 blocks per SM): qmvb_kernel (x split per
 *     block into shared memory, weights and scales streamed through shared memory by the
 *     bulk copy engine); correct, but slower in whole decode steps (NOTES.md, session 4).
 *     One token, the default (RAPID_CUDA_QMV2=0: the two kernels above): qmv2_kernel, the x
 *     split folded in (each block splits x into shared memory), a persistent grid of two
 *     blocks per SM, each warp streaming its two-row tiles with the next item's 8 loads per
 *     lane issued before the current item's math (see its section; 16-bit scales only, f32
 *     scales keep qmv_kernel). A held one-token rmsnorm or silu_mul of its x is computed in
 *     its prologue and a residual add of its output done in its epilogue (the deferred ops
 *     of cuda_kernels.cu: rp_cuda_hook_take_pro, rp_cuda_hook_defer).
 *     Opt-in: qmv2k_kernel (split k over a block's warps for long rows), two items in flight.
 *  2. More tokens: x is rounded to bf16 (qx_bf16_kernel; 4-bit: each 8 elements stored as
 *     x0 x4 x1 x5 x2 x6 x3 x7, the order in which the nibble masks 0x000F000F << 4p yield
 *     bf16 pairs). qmm_kernel: a block of 4 warps owns 128 rows, each warp two 16-row tiles
 *     against up to 64 tokens (8-token tiles; blockIdx.z takes the next 64 tokens); lane t of
 *     a row group loads 16 bytes of rows g and g + 8 (32 or 16 elements of one scale group),
 *     dequantizes them to bf16 pairs (q | 0x4300 is the bf16 128 + q; minus 128 exactly, then
 *     one fma with the group's scale and bias) and feeds mma.sync m16n8k16 with the x pieces
 *     at the same physical k (the dot product's order is free, as in the bf16 skinny GEMM).
 *     The next k step's weights are loaded before the current one is multiplied. Grids
 *     short of 4 blocks per SM split k (a second kernel sums the splits in order).
 *     RAPID_CUDA_QMM=4,F: 4 tiles per warp against 32 tokens (slower on the H200, NOTES.md);
 *     F: blocks per SM the split aims at. This kernel now serves 8-bit weights, 4-bit ones
 *     whose columns are not a multiple of 128, and 65..127 tokens.
 *  3. 5..64 tokens of 4-bit weights: qmm2_kernel, the same numerics with weights, scales and
 *     x staged through shared memory by cp.async, split k reduced inside a thread block
 *     cluster (see its section; RAPID_CUDA_QMM2). On compute capability 9.0 the wgmma
 *     version of it takes them first (cuda_wgmma_q4.cu: the dequantized weights as wgmma's
 *     register A operand, x from shared memory in the order qx_bf16_kernel's mode 2 writes;
 *     RAPID_CUDA_Q4WG=N from N tokens, default 5, 0: off; RAPID_CUDA_Q4WG_SPLIT,
 *     RAPID_CUDA_Q4WG_PF: see the dispatch).
 *  4. Steps of >= 128 tokens (RAPID_CUDA_QDQ): each weight dequantized once into a bf16
 *     scratch, then the bf16 GEMM (cuBLASLt): prefill at bf16 GEMM speed (see qdq_matmul).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_deq4.cuh"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/cuda_wgmma_q4.h"

enum { QMV_WARPS = 8, QMM_WARPS = 4 };

extern "C" int rp_cuda_qw_ok(int bits, int gs, long rows, long cols)
{
    return (bits == 4 || bits == 8) && (gs == 32 || gs == 64 || gs == 128) && cols % gs == 0 &&
           cols % 32 == 0 && rows > 0;
}

/* ---- device helpers ----------------------------------------------------------------------- */



/* (scale, bias) of group gi */
__device__ __forceinline__ float2 load_sb(const void *sb, long gi, int sf)
{
    if (sf == RP_CUDA_SB_F32)
        return __ldg((const float2 *)sb + gi);
    unsigned u = __ldg((const unsigned *)sb + gi);
    if (sf == RP_CUDA_SB_BF16)
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    __half2 h = *(const __half2 *)&u;
    return __half22float2(h);
}

__device__ __forceinline__ uint32_t w_of(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ float q_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One 8-element piece of a 32-element run (the run's 4 pieces on 4 consecutive lanes, every
 * lane of the warp taking part): the run's amax and sum (((s0 + s1) + (s2 + s3)) of the four
 * pieces' sequential sums) through shuffles, d = amax / 127, and the piece's bytes of both
 * parts, q1 = rint(x 127 / amax), q2 = rint((x - d q1) / (d / 254)) clamped to +-127 (RECIP:
 * times the reciprocal of d / 254, see qx_split); byte k is element k, or (perm) the evens
 * 0 2 4 6 then the odds 1 3 5 7. */
template <bool RECIP>
__device__ __forceinline__ void qx_piece(const float (&v)[8], int perm, uint32_t (&w1)[2],
                                         uint32_t (&w2)[2], float &d, float &sum)
{
    float amax = 0.0f;
    sum = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        sum += v[k];
        amax = fmaxf(amax, fabsf(v[k]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    float id = amax > 0 ? 127.0f / amax : 0.0f, d2;
    d = amax / 127.0f;
    d2 = d / 254.0f;
    float id2 = RECIP && d2 > 0 ? 1.0f / d2 : 0.0f;
    w1[0] = w1[1] = w2[0] = w2[1] = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int e = perm ? (k < 4 ? 2 * k : 2 * (k - 4) + 1) : k;
        float q1 = rintf(__fmul_rn(v[e], id));
        float r = fmaf(-q1, d, v[e]);
        float q2 = RECIP ? fminf(fmaxf(rintf(__fmul_rn(r, id2)), -127.0f), 127.0f)
                   : d2 > 0 ? fminf(fmaxf(rintf(__fdiv_rn(r, d2)), -127.0f), 127.0f)
                            : 0.0f;
        w1[k / 4] |= (uint32_t)((int)q1 & 0xff) << (8 * (k % 4));
        w2[k / 4] |= (uint32_t)((int)q2 & 0xff) << (8 * (k % 4));
    }
}

/* Piece i's parts into the shared-memory layout of qmvb_kernel / qmv2_kernel: sx [4][nr]
 * uint4 (q1's two 16-byte words, then q2's), sd [nr] (d, sum). */
__device__ __forceinline__ void qx_put(uint4 *sx, float2 *sd, long nr, long i,
                                       const uint32_t (&w1)[2], const uint32_t (&w2)[2], float d,
                                       float sum)
{
    long run = i / 4;
    int q = (int)(i % 4);
    ((uint2 *)&sx[(q / 2) * nr + run])[q % 2] = make_uint2(w1[0], w1[1]);
    ((uint2 *)&sx[(2 + q / 2) * nr + run])[q % 2] = make_uint2(w2[0], w2[1]);
    if (q == 0)
        sd[run] = make_float2(d, sum);
}

/* ---- decode: int8 activations, one warp per row ------------------------------------------ */

/* Four threads per 32-element run of x [n][cols] (8 elements each): the run as two int8
 * parts, x ~= d q1 + (d / 254) q2 (q1 = rint(x 127 / amax), q2 = rint((x - d q1) / (d / 254))),
 * whose error is at most d / 508 per element (1/64516 of the run's largest |x|), stored as
 * 32 bytes of q1 then 32 of q2 (4-bit: evens first within each 8), and (d, sum) with the
 * sum as ((s0 + s1) + (s2 + s3)) of the four threads' sequential sums. */
__global__ void qx_int8_kernel(const float *__restrict__ x, long cols, long n_q, int perm,
                               int8_t *__restrict__ xq, float2 *__restrict__ xs)
{
    pdl_wait();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x; /* an 8-element piece */
    bool live = i < n_q;
    long per = cols / 8, t = (live ? i : n_q - 1) / per, p = (live ? i : n_q - 1) % per;
    const float4 *src = (const float4 *)(x + t * cols + p * 8);
    float4 f0 = __ldg(src), f1 = __ldg(src + 1);
    float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
    /* the 4 threads of a run are 4 consecutive lanes (cols % 32 == 0, blocks of 128) */
    uint32_t w1[2], w2[2];
    float d, sum;
    qx_piece<false>(v, perm, w1, w2, d, sum);
    if (!live)
        return;
    long run = i / 4, q = i % 4;
    uint2 *o = (uint2 *)(xq + run * 64 + q * 8);
    o[0] = make_uint2(w1[0], w1[1]);
    o[4] = make_uint2(w2[0], w2[1]); /* 32 bytes further */
    if (q == 0)
        xs[run] = make_float2(d, sum);
}

typedef struct qmv_args {
    const uint32_t *q[3];
    const void *sb[3];
    float *y[3];
    long r0[4]; /* stacked rows; r0[3] = total, entries past the last matrix repeat it */
    long cols;
    int gs, sf;
    const int8_t *xq;  /* [NT][cols / 32][64]: per run q1 (32 bytes) then q2 */
    const float2 *xs;  /* [NT][cols / 32] */
} qmv_args;

/* Integer dot products of one run: q1 and q2 parts against the run's packed words. */
template <int BITS>
__device__ __forceinline__ void run_dots(const uint4 *w, const uint32_t *x1, const uint32_t *x2,
                                         int &d1, int &d2)
{
    if (BITS == 4) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t wd = w_of(w[0], j), lo = wd & 0x0F0F0F0Fu, hi = (wd >> 4) & 0x0F0F0F0Fu;
            d1 = __dp4a((int)lo, (int)x1[2 * j], d1);
            d1 = __dp4a((int)hi, (int)x1[2 * j + 1], d1);
            d2 = __dp4a((int)lo, (int)x2[2 * j], d2);
            d2 = __dp4a((int)hi, (int)x2[2 * j + 1], d2);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            d1 = dp4a_us(w_of(w[j / 4], j % 4), x1[j], d1);
            d2 = dp4a_us(w_of(w[j / 4], j % 4), x2[j], d2);
        }
    }
}

/* The raw (scale, bias) word(s) of group gi: one u32 for 16-bit types, two for f32. */
__device__ __forceinline__ uint2 load_sb_raw(const void *sb, long gi, int sf)
{
    if (sf == RP_CUDA_SB_F32)
        return __ldg((const uint2 *)sb + gi);
    return make_uint2(__ldg((const unsigned *)sb + gi), 0u);
}

__device__ __forceinline__ float2 sb_of(uint2 u, int sf)
{
    if (sf == RP_CUDA_SB_F32)
        return make_float2(__uint_as_float(u.x), __uint_as_float(u.y));
    if (sf == RP_CUDA_SB_BF16)
        return make_float2(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u));
    __half2 h = *(const __half2 *)&u.x;
    return __half22float2(h);
}

/* The loaded item moved out of the prefetch registers (which the next item's loads take). */
template <int V, int R, int U, typename S>
__device__ __forceinline__ void qv2_take(uint4 (&w)[U][R][V], S (&sc)[U][R],
                                         const uint4 (&wn)[U][R][V], const S (&sn)[U][R])
{
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            sc[u][r] = sn[u][r];
#pragma unroll
            for (int h = 0; h < V; h++)
                w[u][r][h] = wn[u][r][h];
        }
}

/* R rows per warp (all in one matrix), lane i takes runs i, i + 32, ... of each, U runs per
 * step, weights and scales loaded together (the first step's before the programmatic-launch
 * wait); PIPE: the next step's are loaded while this one is multiplied (twice the
 * registers, fewer warps). */
template <int BITS, int NT, int U, int R, int PIPE>
__global__ void __launch_bounds__(QMV_WARPS * 32) qmv_kernel(qmv_args a)
{
    constexpr int V = BITS / 4; /* uint4 per run */
    long row = ((long)blockIdx.x * QMV_WARPS + threadIdx.x / 32) * R;
    int lane = threadIdx.x % 32;
    if (row >= a.r0[3])
        return;
    int m = (row >= a.r0[1]) + (row >= a.r0[2]);
    long lr = row - a.r0[m], rows = a.r0[m + 1] - a.r0[m];
    long cols = a.cols, nr = cols / 32, rpg = a.gs / 32, ng = cols / a.gs;
    const uint4 *wr = (const uint4 *)a.q[m] + lr * nr * V;
    const void *sb = a.sb[m];
    int sf = a.sf;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0.0f;
    uint4 wn[U][R][V];
    uint2 sn[U][R];
#define QMV_LOAD(k0)                                                                           \
    _Pragma("unroll") for (int u = 0; u < U; u++)                                              \
    _Pragma("unroll") for (int r = 0; r < R; r++)                                              \
    {                                                                                          \
        long kk_ = (k0) + 32 * u;                                                              \
        bool in_ = kk_ < nr;                                                                   \
        _Pragma("unroll") for (int h = 0; h < V; h++)                                          \
            wn[u][r][h] = in_ ? ld_stream(wr + (r * nr + kk_) * V + h) : make_uint4(0, 0, 0, 0); \
        sn[u][r] = in_ ? load_sb_raw(sb, (lr + r) * ng + kk_ / rpg, sf) : make_uint2(0, 0);    \
    }
    QMV_LOAD(lane)
    pdl_wait(); /* the weights never change: only x waits for the previous kernel */
    for (long k = lane; k < nr; k += 32 * U) {
        if (!PIPE && k != lane) {
            QMV_LOAD(k)
        }
        uint4 w[U][R][V];
        uint2 sc[U][R];
        qv2_take(w, sc, wn, sn);
        if (PIPE && k + 32 * U < nr) {
            QMV_LOAD(k + 32 * U)
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            long kk = k + 32 * u;
            if (kk >= nr)
                break;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const uint4 *xp = (const uint4 *)(a.xq + (t * nr + kk) * 64);
                uint4 p0 = __ldg(xp), p1 = __ldg(xp + 1), p2 = __ldg(xp + 2), p3 = __ldg(xp + 3);
                uint32_t x1[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
                uint32_t x2[8] = {p2.x, p2.y, p2.z, p2.w, p3.x, p3.y, p3.z, p3.w};
                float2 d = __ldg(a.xs + t * nr + kk);
                float dd2 = d.x / 254.0f;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    int i1 = 0, i2 = 0;
                    run_dots<BITS>(w[u][r], x1, x2, i1, i2);
                    float2 s = sb_of(sc[u][r], sf);
                    float dot = fmaf(d.x, (float)i1, dd2 * (float)i2);
                    acc[r][t] = fmaf(s.x, dot, fmaf(s.y, d.y, acc[r][t]));
                }
            }
        }
    }
#undef QMV_LOAD
    float *y = a.y[m];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = q_warp_sum(acc[r][t]);
            if (lane == 0)
                y[(long)t * rows + lr + r] = v;
        }
}

/* One token, the x split fused in, weights streamed through shared memory (opt-in,
 * RAPID_CUDA_QMVF=2..9 blocks per SM; tg128 on the H200: 264 tok/s against 297 with the two
 * kernels above, NOTES.md session 4). Each block first splits all of x into shared memory
 * exactly as qx_int8_kernel does (the 4 threads of a run are 4 consecutive lanes), laid out
 * [part word h][run] (16 bytes per run and word: lanes reading consecutive runs hit distinct
 * banks). Each warp then owns row pairs gw, gw + W, ... (gw its index in the grid, W the grid's
 * warps; a persistent grid; the two rows share each x read) and streams them in chunks of
 * QB_CHUNK bytes of weights per row plus their (scale, bias) words through QB_STAGES
 * shared-memory stages with the bulk copy engine: lane 0 issues a stage's copies on its
 * mbarrier, every lane waits on it, multiplies (lane i: runs i, i + 32, ... of the chunk),
 * and after the warp's __syncwarp lane 0 refills the stage with the chunk QB_STAGES further
 * on. Nothing of the stream sits in registers,
 * so QB_STAGES * QB_CHUNK bytes per warp are in flight (3 or 4 stages: qb_stages). The first stages are issued before
 * the programmatic-launch wait (the weights never change). */
enum { QB_WARPS = 8, QB_CHUNK = 1024, QB_SB = 512, QB_STAGE = 2 * (QB_CHUNK + QB_SB) };

/* stages: 4, or 3 where x's shared memory would leave room for only one block per SM */
static int qb_stages(long cols) { return cols > 8192 ? 3 : 4; }

static size_t qb_smem(long cols)
{
    int st = qb_stages(cols);
    return (size_t)QB_WARPS * st * QB_STAGE + (size_t)cols / 32 * 72 +
           sizeof(uint64_t) * QB_WARPS * st;
}

template <int BITS, int QB_STAGES>
__global__ void __launch_bounds__(QB_WARPS * 32) qmvb_kernel(qmv_args a, const float *x, int perm)
{
    constexpr int RB = BITS * 4; /* bytes of one 32-element run */
    constexpr int CR = QB_CHUNK / RB; /* runs per chunk */
    extern __shared__ uint4 sm_b[];
    const long cols = a.cols, nr = cols / 32, rpg = a.gs / 32, ng = cols / a.gs;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, sf = a.sf;
    const int sbb = sf == RP_CUDA_SB_F32 ? 8 : 4; /* bytes of one group's (scale, bias) */
    unsigned char *stw = (unsigned char *)sm_b + (size_t)warp * QB_STAGES * QB_STAGE;
    uint4 *sx = (uint4 *)((unsigned char *)sm_b + (size_t)QB_WARPS * QB_STAGES * QB_STAGE);
    float2 *sd = (float2 *)(sx + 4 * nr);
    uint64_t *bar = (uint64_t *)(sd + nr) + warp * QB_STAGES;
    const long total = a.r0[3], n_pairs = (total + 1) / 2, wstep = (long)gridDim.x * QB_WARPS;
    const long nch = (nr + CR - 1) / CR; /* chunks per row */
    const long first = (long)blockIdx.x * QB_WARPS + warp;
    const long n_own = first < n_pairs ? (n_pairs - first + wstep - 1) / wstep : 0;
    const long n_items = n_own * nch;
    if (lane == 0)
        for (int s = 0; s < QB_STAGES; s++)
            mbar_init(&bar[s], 1);
    mbar_init_fence();
    __syncwarp();
    /* item i: rows 2 p, 2 p + 1 (p = first + (i / nch) * wstep), chunk i % nch */
    auto issue = [&](long i, int s) {
        long p = first + (i / nch) * wstep, ch = i % nch;
        long r0 = ch * CR, nrun = nr - r0 < CR ? nr - r0 : CR;
        long g0 = r0 / rpg, g1 = (r0 + nrun + rpg - 1) / rpg;
        uint32_t wb = (uint32_t)(nrun * RB), sbytes = (uint32_t)((g1 - g0) * sbb);
        int nrow = 2 * p + 1 < total ? 2 : 1;
        unsigned char *dst = stw + (size_t)s * QB_STAGE;
        mbar_expect(&bar[s], nrow * (wb + sbytes));
        for (int r = 0; r < nrow; r++) {
            long row = 2 * p + r;
            int m = (row >= a.r0[1]) + (row >= a.r0[2]);
            long lr = row - a.r0[m];
            bulk_load(dst + r * QB_CHUNK, (const unsigned char *)a.q[m] + (lr * nr + r0) * RB, wb,
                      &bar[s]);
            bulk_load(dst + 2 * QB_CHUNK + r * QB_SB,
                      (const unsigned char *)a.sb[m] + (lr * ng + g0) * sbb, sbytes, &bar[s]);
        }
    };
    if (lane == 0)
        for (int s = 0; s < QB_STAGES && s < n_items; s++)
            issue(s, s);
    pdl_wait(); /* x is the previous kernel's */
    const long n_q = cols / 8;
    for (long base = 0; base < n_q; base += QB_WARPS * 32) {
        long i = base + threadIdx.x;
        bool live = i < n_q;
        long ic = live ? i : n_q - 1;
        const float4 *src = (const float4 *)(x + ic * 8);
        float4 f0 = __ldg(src), f1 = __ldg(src + 1);
        float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
        uint32_t w1[2], w2[2];
        float d, sum;
        qx_piece<false>(v, perm, w1, w2, d, sum);
        if (live)
            qx_put(sx, sd, nr, i, w1, w2, d, sum);
    }
    __syncthreads();
    float acc[2] = {0.0f, 0.0f};
    for (long i = 0; i < n_items; i++) {
        int s = (int)(i % QB_STAGES);
        mbar_wait(&bar[s], (uint32_t)((i / QB_STAGES) & 1));
        long p = first + (i / nch) * wstep;
        int nrow = 2 * p + 1 < total ? 2 : 1;
        long ch = i % nch, r0 = ch * CR, nrun = nr - r0 < CR ? nr - r0 : CR, g0 = r0 / rpg;
        const unsigned char *st = stw + (size_t)s * QB_STAGE;
#pragma unroll
        for (int u = 0; u < CR / 32; u++) {
            int j = lane + 32 * u;
            if (j < nrun) {
                long kk = r0 + j;
                uint4 p0 = sx[kk], p1 = sx[nr + kk], p2 = sx[2 * nr + kk], p3 = sx[3 * nr + kk];
                uint32_t x1[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
                uint32_t x2[8] = {p2.x, p2.y, p2.z, p2.w, p3.x, p3.y, p3.z, p3.w};
                float2 d = sd[kk];
                float dd2 = d.x / 254.0f;
                int gi = (int)(kk / rpg - g0);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    if (r < nrow) {
                        uint4 w[BITS / 4];
#pragma unroll
                        for (int h = 0; h < BITS / 4; h++)
                            w[h] = ((const uint4 *)(st + r * QB_CHUNK + (size_t)j * RB))[h];
                        const unsigned char *sbp = st + 2 * QB_CHUNK + r * QB_SB;
                        uint2 sr = sf == RP_CUDA_SB_F32 ? ((const uint2 *)sbp)[gi]
                                                        : make_uint2(((const uint32_t *)sbp)[gi], 0u);
                        int i1 = 0, i2 = 0;
                        run_dots<BITS>(w, x1, x2, i1, i2);
                        float2 sc = sb_of(sr, sf);
                        float dot = fmaf(d.x, (float)i1, dd2 * (float)i2);
                        acc[r] = fmaf(sc.x, dot, fmaf(sc.y, d.y, acc[r]));
                    }
                }
            }
        }
        __syncwarp();
        if (lane == 0 && i + QB_STAGES < n_items)
            issue(i + QB_STAGES, s);
        if (ch == nch - 1) {
            for (int r = 0; r < nrow; r++) {
                long row = 2 * p + r;
                int m = (row >= a.r0[1]) + (row >= a.r0[2]);
                float v = q_warp_sum(acc[r]);
                if (lane == 0)
                    a.y[m][row - a.r0[m]] = v;
                acc[r] = 0.0f;
            }
        }
    }
}

/* ---- one token, persistent: qmv2_kernel (the default; RAPID_CUDA_QMV2=0 restores qmv_kernel) --
 *
 * Why: qmv_kernel gives each warp 2 rows and, at 4096 columns, exactly one batch of loads
 * (4 runs of 16 bytes per row and lane), then exits: each wave of blocks waits out one HBM
 * latency with little in flight, a 6144-row q/k/v stack is 1.45 waves, and the x split is a
 * kernel of its own in front of every call (a launch and a dependent wait more). Here:
 *  - the x split is folded in: after the programmatic-launch wait each block splits all of x
 *    into shared memory as qx_int8_kernel does (qx_split, q2 by a reciprocal; 72 bytes a run,
 *    [part word h][run] so lanes reading consecutive runs hit distinct banks), computing a
 *    held rmsnorm or silu_mul of its input on the way (the fused prologue below); the
 *    prologue is latency (each dependent round of L2 reads ~1 us, in every call), so where
 *    x has at most 2 pieces a thread (4096 columns: q/k/v, o, gate/up) it reads x and the
 *    norm's weight once and norms and splits from registers (qx_split_once), and longer x
 *    (the down projection's 14336) is read two pieces a round;
 *  - a persistent grid (2 blocks of QV2_WARPS warps per SM at most, never more warps
 *    than tiles), warp w owning the tiles w, w + W, ... (W the grid's warps; tile counts per
 *    warp differ by at most one): a tile is R consecutive stacked rows (they may straddle
 *    the stacked matrices), an item a tile's next 32 U runs (lane i: runs i, i + 32, ...);
 *  - the next item's weights and (scale, bias) words (R U V 16-byte streaming loads per
 *    lane) are issued before the current item's math, the first item's before the wait;
 *    opt-in (RAPID_CUDA_QMV2=7, NB 4; slower in decode on the H200, session 6): two items
 *    in flight, item i + 2's loads issued right after item i's math into the registers item
 *    i used (two sets, no copies; the second item's after the x split), and the split's L2
 *    reads issued 4 pieces at a time;
 *  - every item is 8 loads of 16 bytes per lane: R = 2 rows of U = 4 runs (4-bit; 2 runs of
 *    32 bytes for 8-bit; the rows share each x read from shared memory; 4-bit at 4096
 *    columns: a tile is one item); RAPID_CUDA_QMV2=4: R = 1 row of 8 (4) runs (fewer items
 *    per long row, but slower on the H200 in every shape measured, NOTES.md session 5);
 *  - the early programmatic-launch trigger is opt-in (RAPID_CUDA_QMV2=3: no gain measured).
 * Numerics: qmv_kernel's (the same two-part int8 x, dp4a per run and part, f32 scale / bias);
 * only the order of the per-lane f32 sums differs. */
enum { QV2_WARPS = 8 };
/* qmv2_kernel's flags: the early programmatic-launch trigger (RAPID_CUDA_QMV2=3), the
 * one-round prologue (qx_split_once; RAPID_CUDA_QX1=0: off, session 6's rounds) */
enum { QV2_F_TRIGGER = 1, QV2_F_ONCE = 2 };

/* The fused prologue (RAPID_CUDA_QMV2 2, 3, 6, 7: a held rmsnorm or silu_mul whose output is
 * this matvec's x, taken in through rp_cuda_hook_take_pro): x = the norm's input x times
 * inv times its weight (or 1 + weight, or none), or silu(gate) * up; block 0 also writes
 * those values to the op's own output, which later ops may read. res: a residual add of the
 * matvec's output taken into its epilogue (res[r] += y[r], one matrix). */
enum { QV2_COPY = RP_CUDA_PRO_NONE, QV2_NORM = RP_CUDA_PRO_NORM, QV2_SILU = RP_CUDA_PRO_SILU };
typedef struct qv2_pro {
    const float *x2; /* the norm's weight (or NULL) / the up projection */
    float *out;      /* the op's output (block 0 writes it) */
    float *res;      /* the residual (or NULL) */
    float eps;
    int add_one;
} qv2_pro;

/* 1 / sqrt(sum / cols + eps) of the block's per-thread partial sums of squares ss (the warps'
 * sums added in warp order: the same in every block); all threads call it. */
__device__ __forceinline__ float qx_block_inv(float ss, long cols, float eps, float *red)
{
    ss = q_warp_sum(ss);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        t += red[w];
    return 1.0f / sqrtf(t / (float)cols + eps);
}

/* 1 / sqrt(mean(x^2) + eps) over x [cols] (cols % 32 == 0), all threads of the block
 * (each thread's float4 sums, the warps' sums in warp order: the same in every block). */
__device__ __forceinline__ float qx_norm_inv(const float *__restrict__ x, long cols, float eps,
                                             float *red)
{
    float ss = 0.0f;
    for (long q = threadIdx.x; q < cols / 4; q += blockDim.x) {
        float4 v = __ldg((const float4 *)x + q);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    return qx_block_inv(ss, cols, eps, red);
}

/* One 8-element piece i of the prologue, loaded as f (x) and g (the norm's weight or up):
 * the norm (times inv, times the weight or 1 + weight) or silu(x) * up applied, written to
 * out (the op's own output, when given), split into its two int8 parts and stored into sx /
 * sd (qx_put). Every lane of the warp calls it (qx_piece's shuffles); live: i is in range. */
template <int PRO>
__device__ __forceinline__ void qx_piece_pro(const float4 (&f)[2], const float4 (&g)[2],
                                             const qv2_pro &p, float inv, float *out, long i,
                                             bool live, int perm, long nr, uint4 *sx, float2 *sd)
{
    float v[8] = {f[0].x, f[0].y, f[0].z, f[0].w, f[1].x, f[1].y, f[1].z, f[1].w};
    if (PRO != QV2_COPY) {
        float u[8] = {g[0].x, g[0].y, g[0].z, g[0].w, g[1].x, g[1].y, g[1].z, g[1].w};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (PRO == QV2_NORM) {
                v[k] *= inv;
                if (p.x2)
                    v[k] *= p.add_one ? u[k] + 1.0f : u[k];
            } else {
                v[k] = v[k] / (1.0f + expf(-v[k])) * u[k];
            }
        }
        if (out && live) {
            float4 *o = (float4 *)(out + i * 8);
            o[0] = make_float4(v[0], v[1], v[2], v[3]);
            o[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
    }
    uint32_t w1[2], w2[2];
    float d, sum;
    qx_piece<true>(v, perm, w1, w2, d, sum);
    if (live)
        qx_put(sx, sd, nr, i, w1, w2, d, sum);
}

/* Pieces (8 elements) p0 + tid, p0 + tid + nth, ... below p1 of x split into sx ([4][nr]
 * uint4: q1's two 16-byte words, then q2's) and sd ([nr] (d, sum)), by nth threads (a
 * multiple of 32; p0 a multiple of 4: the 4 pieces of a run are 4 consecutive lanes), as
 * qx_int8_kernel but for q2 = rint(r * (1 / d2)) in place of rint(r / d2) (one division per 8
 * elements, not 8, for every block repeats the split): the two differ by one only where
 * r / d2 lies within an ulp or so of a half, which moves that element by d2 = 1/32258 of its
 * run's max |x|. PRO: x made by the fused prologue first (out: written too, or NULL). NB:
 * pieces per thread whose loads go out together (1: session 5's loop, each piece's L2 reads
 * waited for in turn). */
template <int PRO, int NB>
__device__ __forceinline__ void qx_split(const float *__restrict__ x, const qv2_pro &p, float *out,
                                         float inv, long p0, long p1, int tid, int nth,
                                         int perm, long nr, uint4 *sx, float2 *sd)
{
    for (long base = p0; base < p1; base += (long)nth * NB) {
        /* the batch's pieces with any thread's piece in range (the same in a warp) */
        const long nbl = (p1 - base + nth - 1) / nth;
        float4 f[NB][2], g[NB][2] = {};
#pragma unroll
        for (int b = 0; b < NB; b++) {
            if (b >= nbl)
                break;
            long i = base + (long)b * nth + tid, ic = i < p1 ? i : p1 - 1;
            const float4 *src = (const float4 *)(x + ic * 8);
            f[b][0] = __ldg(src);
            f[b][1] = __ldg(src + 1);
            if (PRO == QV2_SILU || (PRO == QV2_NORM && p.x2)) {
                const float4 *gp = (const float4 *)(p.x2 + ic * 8);
                g[b][0] = __ldg(gp);
                g[b][1] = __ldg(gp + 1);
            }
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            if (b >= nbl)
                break;
            long i = base + (long)b * nth + tid;
            qx_piece_pro<PRO>(f[b], g[b], p, inv, out, i, i < p1, perm, nr, sx, sd);
        }
    }
}

/* The whole prologue in one round of L2 reads, for x of at most 2 nth pieces (every 8B-shape
 * x but the down projection's): each thread loads its pieces tid and tid + nth (x and the
 * norm's weight or up) together, sums the squares of the ones in range (piece tid's 8 then
 * piece tid + nth's, then the warps' sums in warp order: the same in every block), and norms
 * and splits them from registers, where qx_norm_inv + qx_split read x (and the weight) in up
 * to three dependent rounds. Numerics: qx_split's; the norm's f32 sum in another order. */
template <int PRO>
__device__ __forceinline__ void qx_split_once(const float *__restrict__ x, const qv2_pro &p,
                                              float *out, long cols, int perm, long nr, uint4 *sx,
                                              float2 *sd, float *red)
{
    const int tid = threadIdx.x, nth = blockDim.x;
    const long np = cols / 8;
    const bool two = np > nth; /* the same in the block */
    const bool wt = PRO == QV2_SILU || (PRO == QV2_NORM && p.x2);
    float4 f[2][2], g[2][2] = {};
#pragma unroll
    for (int b = 0; b < 2; b++) {
        if (b == 1 && !two)
            break;
        long i = tid + (long)b * nth, ic = i < np ? i : np - 1;
        f[b][0] = __ldg((const float4 *)(x + ic * 8));
        f[b][1] = __ldg((const float4 *)(x + ic * 8) + 1);
        if (wt) {
            g[b][0] = __ldg((const float4 *)(p.x2 + ic * 8));
            g[b][1] = __ldg((const float4 *)(p.x2 + ic * 8) + 1);
        }
    }
    float inv = 1.0f;
    if (PRO == QV2_NORM) {
        float ss = 0.0f;
#pragma unroll
        for (int b = 0; b < 2; b++)
            if (tid + (long)b * nth < np)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    ss += f[b][h].x * f[b][h].x + f[b][h].y * f[b][h].y +
                          f[b][h].z * f[b][h].z + f[b][h].w * f[b][h].w;
        inv = qx_block_inv(ss, cols, p.eps, red);
    }
#pragma unroll
    for (int b = 0; b < 2; b++) {
        if (b == 1 && !two)
            break;
        long i = tid + (long)b * nth;
        qx_piece_pro<PRO>(f[b], g[b], p, inv, out, i, i < np, perm, nr, sx, sd);
    }
}

__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* qmv2_kernel's and qmv2k_kernel's item: R stacked rows from row0 (rows past rlast - 1 load
 * row rlast - 1 again, never stored), lane runs k0, k0 + 32, ... (U of them) below kend:
 * the weights (16-byte streaming loads) and (scale, bias) words into wn / sn ... */
template <int BITS, int R, int U>
__device__ __forceinline__ void qv2_load(const qmv_args &a, int row0, int rlast, int k0, int kend,
                                         uint4 (&wn)[U][R][BITS / 4], uint32_t (&sn)[U][R])
{
    constexpr int V = BITS / 4;
    const int nr = (int)(a.cols / 32), rpg = a.gs / 32, ng = (int)(a.cols / a.gs);
    const int r1 = (int)a.r0[1], r2 = (int)a.r0[2];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int row = row0 + r;
        row = row < rlast ? row : rlast - 1;
        int m = (row >= r1) + (row >= r2);
        int lr = row - (m == 0 ? 0 : m == 1 ? r1 : r2);
        const uint4 *wr = (const uint4 *)a.q[m] + (unsigned)lr * (unsigned)(nr * V);
        const unsigned *sr = (const unsigned *)a.sb[m] + (unsigned)lr * (unsigned)ng;
#pragma unroll
        for (int u = 0; u < U; u++) {
            int kk = k0 + 32 * u;
            bool in = kk < kend;
#pragma unroll
            for (int h = 0; h < V; h++)
                wn[u][r][h] = in ? ld_stream(wr + kk * V + h) : make_uint4(0, 0, 0, 0);
            sn[u][r] = in ? __ldg(sr + kk / rpg) : 0u;
        }
    }
}

/* ... and its math against x in shared memory (sx, sd as qx_split makes them): acc[r] +=
 * per run, scale * (d dot1 + d / 254 dot2) + bias * sum. */
template <int BITS, int R, int U>
__device__ __forceinline__ void qv2_math(const uint4 (&w)[U][R][BITS / 4],
                                         const uint32_t (&sc)[U][R], int k0, int kend, int nr,
                                         int sf, const uint4 *sx, const float2 *sd, float (&acc)[R])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int kk = k0 + 32 * u;
        if (kk < kend) {
            uint4 p0 = sx[kk], p1 = sx[nr + kk], p2 = sx[2 * nr + kk], p3 = sx[3 * nr + kk];
            uint32_t x1[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
            uint32_t x2[8] = {p2.x, p2.y, p2.z, p2.w, p3.x, p3.y, p3.z, p3.w};
            float2 d = sd[kk];
            float dd2 = d.x / 254.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                int i1 = 0, i2 = 0;
                run_dots<BITS>(w[u][r], x1, x2, i1, i2);
                float2 s = sb_of(make_uint2(sc[u][r], 0u), sf);
                float dot = fmaf(d.x, (float)i1, dd2 * (float)i2);
                acc[r] = fmaf(s.x, dot, fmaf(s.y, d.y, acc[r]));
            }
        }
    }
}

/* The row's stacked output: y[m][row - r0[m]] = v. */
__device__ __forceinline__ void qv2_store(const qmv_args &a, int row, float v)
{
    const int r1 = (int)a.r0[1], r2 = (int)a.r0[2];
    int m = (row >= r1) + (row >= r2);
    a.y[m][row - (m == 0 ? 0 : m == 1 ? r1 : r2)] = v;
}

template <int BITS, int R, int U, int PRO, int NB>
__global__ void __launch_bounds__(QV2_WARPS * 32, 2)
    qmv2_kernel(qmv_args a, const float *__restrict__ x, qv2_pro pro, int perm, int flags)
{
    constexpr int V = BITS / 4; /* uint4 per run; U runs per lane and item */
    extern __shared__ uint4 sm_v[];
    /* 32-bit offsets: every matrix is under 2^31 16-byte words (rp_cuda_qmatmul_n checks) */
    const int nr = (int)(a.cols / 32);
    const int total = (int)a.r0[3], n_tiles = (total + R - 1) / R;
    const int nch = (nr + 32 * U - 1) / (32 * U);
    const int lane = threadIdx.x % 32;
    const int W = gridDim.x * QV2_WARPS, w0 = blockIdx.x * QV2_WARPS + threadIdx.x / 32;
    const int n_own = w0 < n_tiles ? (n_tiles - w0 + W - 1) / W : 0, n_items = n_own * nch;
    uint4 *sx = sm_v;
    float2 *sd = (float2 *)(sx + 4 * nr);
    /* two items in flight (NB 4; NB 1, session 5's kernel: one, moved to w / sc) */
    constexpr bool PP = NB > 1;
    uint4 b0[U][R][V], b1[U][R][V];
    uint32_t s0[U][R], s1[U][R];
    /* the next item to load: tile lt (R rows from lt R), runs lc 32 U + lane + 32 u */
    int lt = w0, lc = 0;
    auto load = [&](uint4 (&wn)[U][R][V], uint32_t (&sn)[U][R]) {
        qv2_load<BITS, R, U>(a, lt * R, total, lc * 32 * U + lane, nr, wn, sn);
        if (++lc == nch) {
            lc = 0;
            lt += W;
        }
    };
    if (n_items > 0)
        load(b0, s0);
    pdl_wait(); /* x is the previous kernel's; the weights never change */
    __shared__ float red[QV2_WARPS];
    float *pout = blockIdx.x == 0 ? pro.out : nullptr;
    if (!PP && (flags & QV2_F_ONCE) && a.cols / 8 <= 2 * (long)blockDim.x) {
        qx_split_once<PRO>(x, pro, pout, a.cols, perm, nr, sx, sd, red);
    } else {
        float inv = PRO == QV2_NORM ? qx_norm_inv(x, a.cols, pro.eps, red) : 1.0f;
        if (!PP && (flags & QV2_F_ONCE)) /* long x: two pieces' reads a round */
            qx_split<PRO, 2>(x, pro, pout, inv, 0, a.cols / 8, threadIdx.x, blockDim.x, perm,
                             nr, sx, sd);
        else
            qx_split<PRO, NB>(x, pro, pout, inv, 0, a.cols / 8, threadIdx.x, blockDim.x, perm,
                              nr, sx, sd);
    }
    /* the second item's loads after the split (whose registers they would take: spills) */
    if (PP && n_items > 1)
        load(b1, s1);
    __syncthreads();
    if (flags & QV2_F_TRIGGER)
        pdl_trigger();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f;
    int ct = w0, cc = 0; /* the item being multiplied */
    auto finish = [&]() {
        if (++cc < nch)
            return;
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = q_warp_sum(acc[r]);
            int row = ct * R + r;
            if (lane == 0 && row < total) {
                qv2_store(a, row, v);
                if (pro.res) /* one matrix (rp_cuda_hook_defer) */
                    pro.res[row] += v;
            }
            acc[r] = 0.0f;
        }
        cc = 0;
        ct += W;
    };
    if (PP) {
        for (int i = 0; i < n_items; i += 2) {
            qv2_math<BITS, R, U>(b0, s0, cc * 32 * U + lane, nr, nr, a.sf, sx, sd, acc);
            finish();
            if (i + 2 < n_items)
                load(b0, s0);
            if (i + 1 >= n_items)
                break;
            qv2_math<BITS, R, U>(b1, s1, cc * 32 * U + lane, nr, nr, a.sf, sx, sd, acc);
            finish();
            if (i + 3 < n_items)
                load(b1, s1);
        }
    } else {
        for (int i = 0; i < n_items; i++) {
            uint4 w[U][R][V];
            uint32_t sc[U][R];
            qv2_take(w, sc, b0, s0);
            if (i + 1 < n_items)
                load(b0, s0);
            qv2_math<BITS, R, U>(w, sc, cc * 32 * U + lane, nr, nr, a.sf, sx, sd, acc);
            finish();
        }
    }
}

/* ---- one token, long rows: qmv2k_kernel (split k over the warps of a block) ----------------
 *
 * Opt-in (RAPID_CUDA_QMV2=6) for rows of more than 8192 elements (the down projection's
 * 14336; session 6 on the H200: 22.0 against 22.3 us a call at 4 bits, 29.6 against 28.6 at
 * 8, NOTES.md): block b owns the stacked rows [b T / B, (b + 1) T / B) (T rows, B blocks, at
 * most QK_ROWS a block), warp s of the block the runs [s ns, (s + 1) ns) of every one of them
 * (ns = ceil(runs / 8) <= 32 U: lane i takes runs i, i + 32, ... of the slice). Each warp
 * splits only its own slice of x into shared memory (no block barrier before its first
 * item), then walks the block's rows R at a time (an item: R rows of its slice, R U V loads
 * of 16 bytes per lane, two items in flight, the first issued before the programmatic-launch
 * wait, the second after the split); its per-row sums go to shared memory and, after one
 * barrier, thread t of the block adds row t's 8 slices in slice order (deterministic).
 * Numerics: qmv2_kernel's; the f32 sum of a row is its slices' warp sums in order. */
enum { QK_ROWS = 64 };

template <int BITS, int R, int U, int PRO>
__global__ void __launch_bounds__(QV2_WARPS * 32, 2)
    qmv2k_kernel(qmv_args a, const float *__restrict__ x, qv2_pro pro, int perm)
{
    constexpr int V = BITS / 4;
    extern __shared__ uint4 sm_v[];
    __shared__ float part[QK_ROWS * QV2_WARPS];
    __shared__ float red[QV2_WARPS];
    const int nr = (int)(a.cols / 32);
    const int lane = threadIdx.x % 32, ws = threadIdx.x / 32, total = (int)a.r0[3];
    const int rb = (int)((long)blockIdx.x * total / gridDim.x);
    const int re = (int)((long)(blockIdx.x + 1) * total / gridDim.x);
    const int ns = (nr + QV2_WARPS - 1) / QV2_WARPS;
    const int k0 = ws * ns < nr ? ws * ns : nr, k1 = k0 + ns < nr ? k0 + ns : nr;
    const int n_items = (re - rb + R - 1) / R;
    uint4 *sx = sm_v;
    float2 *sd = (float2 *)(sx + 4 * nr);
    uint4 b0[U][R][V], b1[U][R][V]; /* two items in flight */
    uint32_t s0[U][R], s1[U][R];
    if (n_items > 0)
        qv2_load<BITS, R, U>(a, rb, re, k0 + lane, k1, b0, s0);
    pdl_wait(); /* x is the previous kernel's; the weights never change */
    float inv = PRO == QV2_NORM ? qx_norm_inv(x, a.cols, pro.eps, red) : 1.0f;
    /* (2 pieces at a time with a prologue: its second input's registers would spill) */
    constexpr int NB = PRO == QV2_COPY ? 4 : 2;
    qx_split<PRO, NB>(x, pro, blockIdx.x == 0 ? pro.out : nullptr, inv, 4L * k0, 4L * k1, lane, 32,
                      perm, nr, sx, sd);
    if (n_items > 1) /* after the split, whose registers these would take */
        qv2_load<BITS, R, U>(a, rb + R, re, k0 + lane, k1, b1, s1);
    __syncwarp();
    /* item i: its R rows' slice sums, into part */
    auto item = [&](int i, const uint4 (&w)[U][R][V], const uint32_t (&sc)[U][R]) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r] = 0.0f;
        qv2_math<BITS, R, U>(w, sc, k0 + lane, k1, nr, a.sf, sx, sd, acc);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = q_warp_sum(acc[r]);
            int lr = i * R + r;
            if (lane == 0 && rb + lr < re)
                part[lr * QV2_WARPS + ws] = v;
        }
    };
    for (int i = 0; i < n_items; i += 2) {
        item(i, b0, s0);
        if (i + 2 < n_items)
            qv2_load<BITS, R, U>(a, rb + (i + 2) * R, re, k0 + lane, k1, b0, s0);
        if (i + 1 >= n_items)
            break;
        item(i + 1, b1, s1);
        if (i + 3 < n_items)
            qv2_load<BITS, R, U>(a, rb + (i + 3) * R, re, k0 + lane, k1, b1, s1);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < re - rb; t += blockDim.x) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < QV2_WARPS; w++)
            v += part[t * QV2_WARPS + w];
        qv2_store(a, rb + t, v);
        if (pro.res)
            pro.res[rb + t] += v;
    }
}

/* ---- more tokens: bf16 dequantization on the tensor cores --------------------------------- */

/* perm 0: pairs (2j, 2j + 1) of each 8 elements; 1: pairs (j, j + 4); 2: the q4wg order of
 * each 128 elements (cuda_wgmma_q4.h, rp_q4wg_xorder; rows a multiple of 128 long) */
__global__ void qx_bf16_kernel(const float *__restrict__ x, long n8, int perm,
                               uint4 *__restrict__ out)
{
    pdl_wait();
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
         i += (long)gridDim.x * blockDim.x) {
        if (perm == 2) { /* positions 8 (i % 16) .. + 7 of 128-element block i / 16 */
            const float *xb = x + i / 16 * 128;
            int p0 = (int)(i % 16) * 8;
            uint32_t o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float lo = __ldg(xb + rp_q4wg_xorder(p0 + 2 * j)),
                      hi = __ldg(xb + rp_q4wg_xorder(p0 + 2 * j + 1));
                __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
                o[j] = *(uint32_t *)&h;
            }
            out[i] = make_uint4(o[0], o[1], o[2], o[3]);
            continue;
        }
        const float4 *p = (const float4 *)x + 2 * i;
        float4 a = __ldg(p), b = __ldg(p + 1);
        float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            /* perm: pairs (j, j + 4); else (2j, 2j + 1) */
            float lo = perm ? v[j] : v[2 * j], hi = perm ? v[j + 4] : v[2 * j + 1];
            __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
            o[j] = *(uint32_t *)&h;
        }
        out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

typedef struct qmm_args {
    const uint32_t *q[3];
    const void *sb[3];
    float *y[3];
    long r0[4]; /* stacked rows (each matrix's a multiple of 16) */
    long cols;
    int gs, sf;
    int n, splits;
    long kspan;          /* a multiple of the k step (128 or 64 elements) */
    const uint16_t *x;   /* [n][cols] bf16, in the kernel's order */
    float *part;         /* [splits][n][r0[3]] when splits > 1 */
} qmm_args;

__device__ __forceinline__ void q_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The 2 bf16 pairs of 4 bytes (pairs (0, 1), (2, 3)). */
__device__ __forceinline__ void deq8(uint32_t wd, float s, float b, uint32_t *r)
{
    float f[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        f[i] = fmaf(__uint_as_float(__byte_perm(wd, 0x4B000000u, 0x7540 + i)) - 8388608.0f, s, b);
    r[0] = bf2_u(__floats2bfloat162_rn(f[0], f[1]));
    r[1] = bf2_u(__floats2bfloat162_rn(f[2], f[3]));
}

/* MT 16-row tiles per warp, NT 8-token tiles; blockIdx.z: the next 8 NTMAX tokens. */
template <int BITS, int NT, int MT>
__global__ void __launch_bounds__(QMM_WARPS * 32) qmm_kernel(qmm_args a)
{
    constexpr int EPL = BITS == 4 ? 32 : 16, KSTEP = 4 * EPL, TOK = MT == 4 ? 32 : 64;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    long R = a.r0[3], cols = a.cols, wpr = cols / EPL, ng = cols / a.gs;
    const uint4 *wp[MT][2];
    const void *sbp[MT];
    long sbase[MT][2], trow[MT], nrow[MT]; /* nrow: rows of the tile's matrix */
#pragma unroll
    for (int mi = 0; mi < MT; mi++) {
        long row = ((long)blockIdx.x * (QMM_WARPS * MT) + warp * MT + mi) * 16;
        int m = 0;
        long lr = 0;
        trow[mi] = -1;
        if (row < R) {
            m = (row >= a.r0[1]) + (row >= a.r0[2]);
            lr = row - a.r0[m];
            trow[mi] = row;
        }
        nrow[mi] = a.r0[m + 1] - a.r0[m];
        sbp[mi] = a.sb[m];
#pragma unroll
        for (int h = 0; h < 2; h++) { /* rows past a matrix's end (rows % 16) read its last */
            long rr = min(lr + g + 8 * h, nrow[mi] - 1);
            wp[mi][h] = (const uint4 *)a.q[m] + rr * wpr;
            sbase[mi][h] = rr * ng;
        }
    }
    int tok0 = blockIdx.z * TOK;
    const uint16_t *xp[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int tok = min(tok0 + nt * 8 + g, a.n - 1);
        xp[nt] = a.x + (long)tok * cols;
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mi][nt][e] = 0.0f;
    long k = (long)blockIdx.y * a.kspan, k1 = min(k + a.kspan, cols);
    uint4 wn[MT][2];
    float2 sn[MT][2];
    {
        long e = k + EPL * t;
        bool in = e < k1;
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wn[mi][h] = in ? ld_stream(wp[mi][h] + e / EPL) : make_uint4(0, 0, 0, 0);
                sn[mi][h] = in ? load_sb(sbp[mi], sbase[mi][h] + e / a.gs, a.sf)
                               : make_float2(0.f, 0.f);
            }
    }
    pdl_wait(); /* the weights never change: only x waits for the previous kernel */
    for (; k < k1; k += KSTEP) {
        long e = k + EPL * t;
        bool in = e < k1;
        uint4 wc[MT][2];
        float2 sc[MT][2];
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wc[mi][h] = wn[mi][h];
                sc[mi][h] = sn[mi][h];
            }
        long en = e + KSTEP; /* the next step's weights, in flight while this one multiplies */
        bool inn = en < k1;
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wn[mi][h] = inn ? ld_stream(wp[mi][h] + en / EPL) : make_uint4(0, 0, 0, 0);
                sn[mi][h] = inn ? load_sb(sbp[mi], sbase[mi][h] + en / a.gs, a.sf)
                                : make_float2(0.f, 0.f);
            }
        /* x pieces: a lane past the split's end reads a valid address against zero A */
        long ex = in ? e : k;
#pragma unroll
        for (int j = 0; j < 4; j++) { /* the lane's 4 words */
            if (BITS == 4) {
                uint4 xv[NT];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    xv[nt] = __ldg((const uint4 *)(xp[nt] + ex + 8 * j));
                uint32_t r[MT][2][4];
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (a.sf == RP_CUDA_SB_BF16)
                            deq4(w_of(wc[mi][h], j), __float2bfloat162_rn(sc[mi][h].x),
                                 __float2bfloat162_rn(sc[mi][h].y), r[mi][h]);
                        else
                            deq4f(w_of(wc[mi][h], j), sc[mi][h].x, sc[mi][h].y, r[mi][h]);
                    }
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int mi = 0; mi < MT; mi++) {
                        uint32_t a1[4] = {r[mi][0][0], r[mi][1][0], r[mi][0][1], r[mi][1][1]};
                        uint32_t a2[4] = {r[mi][0][2], r[mi][1][2], r[mi][0][3], r[mi][1][3]};
                        q_mma(acc[mi][nt], a1, xv[nt].x, xv[nt].y);
                        q_mma(acc[mi][nt], a2, xv[nt].z, xv[nt].w);
                    }
            } else {
                uint2 xv[NT];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    xv[nt] = __ldg((const uint2 *)(xp[nt] + ex + 4 * j));
                uint32_t r[MT][2][2];
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        deq8(w_of(wc[mi][h], j), sc[mi][h].x, sc[mi][h].y, r[mi][h]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int mi = 0; mi < MT; mi++) {
                        uint32_t a1[4] = {r[mi][0][0], r[mi][1][0], r[mi][0][1], r[mi][1][1]};
                        q_mma(acc[mi][nt], a1, xv[nt].x, xv[nt].y);
                    }
            }
        }
    }
#pragma unroll
    for (int mi = 0; mi < MT; mi++) {
        if (trow[mi] < 0)
            continue;
        int m = (trow[mi] >= a.r0[1]) + (trow[mi] >= a.r0[2]);
        long rows = a.r0[m + 1] - a.r0[m], lr = trow[mi] - a.r0[m];
        float *y = a.y[m];
        float *part = a.part + (long)blockIdx.y * a.n * R;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int tok = tok0 + nt * 8 + 2 * t + (e & 1);
                long r = g + (e >> 1) * 8;
                if (tok >= a.n || lr + r >= rows)
                    continue;
                if (a.splits == 1)
                    y[(long)tok * rows + lr + r] = acc[mi][nt][e];
                else
                    part[(long)tok * R + trow[mi] + r] = acc[mi][nt][e];
            }
    }
}

/* ---- 5..64 tokens, 4-bit: the weights staged through shared memory -------------------------
 * qmm2_kernel (RAPID_CUDA_QMM2 = N .. 64 tokens, default 5; 0: never): the numerics and the
 * lane <-> k mapping of qmm_kernel (MT = 2, so results equal it up to the order of the split
 * sums), but 8 warps own Q2_BM = 256 rows and every k step's packed weights [256][64 bytes],
 * their (scale, bias) words and x [8 NT][128] (bf16, qx_bf16's order) go global -> shared
 * memory by cp.async, Q2_STAGES - 1 steps ahead of the one being multiplied: the bytes in
 * flight cost no registers, and x is read from device memory once per block instead of once
 * per warp. x rows are 256 bytes, their 16-byte unit u stored at u ^ (row & 7) (conflict-free
 * reads). Grids short of one block per SM split k over a thread block cluster (<= 8 blocks)
 * that sums its blocks' f32 tiles in rank order through distributed shared memory
 * (deterministic, no partials in device memory), as the bf16 staged GEMM does. */
enum { Q2_WARPS = 8, Q2_BM = 256, Q2_STAGES = 4, Q2_MAXSPLIT = 8, Q2_RS = Q2_BM + 4 };
#define Q2_XR(nt) ((nt) * 8)
/* per stage: weights 256 x 64 B, scales 256 x sbytes (<= 32), x 8 NT x 256 B */
#define Q2_STAGE(nt, sbytes) (Q2_BM * 64 + Q2_BM * (sbytes) + Q2_XR(nt) * 256)

/* 4, 8 or 16 bytes through L1 (the scales: cp.async.cg takes only 16) */
__device__ __forceinline__ void q2_cp_small(uint32_t dst, const void *src, int n, int bytes)
{
    if (n == 16)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                     : "memory");
    else if (n == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                     : "memory");
}

template <int NT>
__global__ void __launch_bounds__(Q2_WARPS * 32, 1) qmm2_kernel(qmm_args a)
{
    extern __shared__ __align__(128) unsigned char q2_sm[];
    constexpr int KSTEP = 128, XI = (NT * 8 + 15) / 16;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long R = a.r0[3], cols = a.cols, row0 = (long)blockIdx.x * Q2_BM;
    const int sf = a.sf, esz = sf == RP_CUDA_SB_F32 ? 8 : 4, gs = a.gs;
    const int sbytes = KSTEP / gs * esz, scp = sbytes < 16 ? sbytes : 16, sn = sbytes / scp;
    const int WB = Q2_BM * 64, SBB = Q2_BM * sbytes, SB = WB + SBB + Q2_XR(NT) * 256;
    const uint32_t smb = (uint32_t)__cvta_generic_to_shared(q2_sm);
    const long wpr = cols / 32; /* uint4 per row */
    /* loaders: weights chunk tid & 3 of rows (tid >> 2) + 64 i; scales of row tid; x unit
     * tid & 15 of rows (tid >> 4) + 16 i */
    const uint4 *wsrc[4];
    int wbytes[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        long r = row0 + (tid >> 2) + 64 * i, rr = r < R ? r : R - 1;
        int m = (rr >= a.r0[1]) + (rr >= a.r0[2]);
        wsrc[i] = (const uint4 *)a.q[m] + (rr - a.r0[m]) * wpr + (tid & 3);
        wbytes[i] = r < R ? 16 : 0;
    }
    const unsigned char *ssrc;
    int sbz;
    {
        long r = row0 + tid, rr = r < R ? r : R - 1;
        int m = (rr >= a.r0[1]) + (rr >= a.r0[2]);
        ssrc = (const unsigned char *)a.sb[m] + (rr - a.r0[m]) * (cols / gs) * esz;
        sbz = r < R ? scp : 0;
    }
    const uint16_t *xsrc[XI];
#pragma unroll
    for (int i = 0; i < XI; i++)
        xsrc[i] = a.x + (long)min((tid >> 4) + 16 * i, a.n - 1) * cols + (tid & 15) * 8;
    const long kb = (long)blockIdx.y * a.kspan, ke = min(kb + a.kspan, cols);
    const int nk = (int)((ke - kb) / KSTEP);
#define Q2_LOAD_W(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * KSTEP;                                                     \
        uint32_t d_ = smb + (slot) * SB;                                                       \
        _Pragma("unroll") for (int i = 0; i < 4; i++)                                          \
            cp_async16(d_ + ((tid >> 2) + 64 * i) * 64 + (tid & 3) * 16, wsrc[i] + k_ / 32,    \
                    wbytes[i]);                                                                \
        for (int j_ = 0; j_ < sn; j_++)                                                        \
            q2_cp_small(d_ + WB + tid * sbytes + j_ * scp, ssrc + k_ / gs * esz + j_ * scp,    \
                        scp, sbz);                                                             \
    } while (0)
#define Q2_LOAD_X(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * KSTEP;                                                     \
        uint32_t d_ = smb + (slot) * SB + WB + SBB;                                            \
        _Pragma("unroll") for (int i = 0; i < XI; i++) {                                       \
            int r_ = (tid >> 4) + 16 * i;                                                      \
            if (r_ < NT * 8)                                                                   \
                cp_async16(d_ + r_ * 256 + (((tid & 15) ^ (r_ & 7)) << 4), xsrc[i] + k_, 16);  \
        }                                                                                      \
    } while (0)
    /* the weights never change: only x waits for the previous kernel */
    stage_fill<Q2_STAGES>(
        nk, [&](int st) { Q2_LOAD_W(st, st); }, [&](int st) { Q2_LOAD_X(st, st); });
    float acc[2][NT][4];
    acc_zero<NT>(acc);
    const int sgi = 32 * t / gs; /* the lane's scale group within the step */
    for (int it = 0; it < nk; it++) {
        cp_async_wait<Q2_STAGES - 2>();
        __syncthreads();
        int nx = it + Q2_STAGES - 1;
        if (nx < nk) {
            Q2_LOAD_W(nx, nx % Q2_STAGES);
            Q2_LOAD_X(nx, nx % Q2_STAGES);
        }
        cp_async_commit();
        const unsigned char *st = q2_sm + (it % Q2_STAGES) * SB;
        uint4 wc[2][2];
        float2 sc[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = warp * 32 + mi * 16 + g + 8 * h;
                wc[mi][h] = *(const uint4 *)(st + r * 64 + t * 16);
                const unsigned char *sp = st + WB + r * sbytes + sgi * esz;
                uint2 u = sf == RP_CUDA_SB_F32 ? *(const uint2 *)sp
                                               : make_uint2(*(const unsigned *)sp, 0u);
                sc[mi][h] = sb_of(u, sf);
            }
        const unsigned char *xs = st + WB + SBB;
#pragma unroll
        for (int j = 0; j < 4; j++) { /* the lane's 4 words, as in qmm_kernel */
            uint4 xv[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                int xr = nt * 8 + g;
                xv[nt] = *(const uint4 *)(xs + xr * 256 + (((4 * t + j) ^ (xr & 7)) << 4));
            }
            uint32_t r[2][2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (sf == RP_CUDA_SB_BF16)
                        deq4(w_of(wc[mi][h], j), __float2bfloat162_rn(sc[mi][h].x),
                             __float2bfloat162_rn(sc[mi][h].y), r[mi][h]);
                    else
                        deq4f(w_of(wc[mi][h], j), sc[mi][h].x, sc[mi][h].y, r[mi][h]);
                }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    uint32_t a1[4] = {r[mi][0][0], r[mi][1][0], r[mi][0][1], r[mi][1][1]};
                    uint32_t a2[4] = {r[mi][0][2], r[mi][1][2], r[mi][0][3], r[mi][1][3]};
                    q_mma(acc[mi][nt], a1, xv[nt].x, xv[nt].y);
                    q_mma(acc[mi][nt], a2, xv[nt].z, xv[nt].w);
                }
        }
    }
#undef Q2_LOAD_W
#undef Q2_LOAD_X
    cp_async_wait<0>();
    skinny_epilogue<NT, Q2_BM, Q2_RS, Q2_WARPS * 32, 1>(acc, a.r0, a.y, a.n, row0,
                                                        (float *)q2_sm);
}

/* y = the sum of the splits' partials in split order (deterministic). */
__global__ void qmm_reduce_kernel(qmm_args a)
{
    pdl_wait();
    long R = a.r0[3], q = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= R * a.n)
        return;
    int tok = (int)(q / R);
    long r = q % R;
    float s = 0.0f;
    for (int sp = 0; sp < a.splits; sp++)
        s += __ldcg(a.part + ((long)sp * a.n + tok) * R + r);
    int m = (r >= a.r0[1]) + (r >= a.r0[2]);
    a.y[m][(long)tok * (a.r0[m + 1] - a.r0[m]) + r - a.r0[m]] = s;
}

/* ---- prefill: dequantize once, then the bf16 GEMM ------------------------------------------
 * Steps of many tokens (RAPID_CUDA_QDQ=N tokens, default 128; 0: never) dequantize each weight
 * into a bf16 scratch (rows [r0, r0 + nr), at most QDQ_CHUNK_BYTES at a time) and multiply with
 * the bf16 GEMM (rp_cuda_matmul: cuBLASLt above 64 tokens). Each element is rounded exactly as
 * qmm_kernel rounds it (deq4 / deq4f / deq8), so only the summation order differs from it. */
enum { QDQ_CHUNK_BYTES = 256 << 20 };

template <int BITS>
__global__ void qdeq_kernel(const uint32_t *__restrict__ q, const void *__restrict__ sb, int sf,
                            int gs, long cols, long r0, long n8, uint4 *__restrict__ out)
{
    pdl_wait();
    long per = cols / 8, ng = cols / gs;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
         i += (long)gridDim.x * blockDim.x) {
        long row = r0 + i / per, p = i % per;
        float2 s = load_sb(sb, row * ng + p * 8 / gs, sf);
        uint32_t o[4];
        if (BITS == 4) {
            uint32_t wd = __ldg(q + row * per + p), r[4];
            if (sf == RP_CUDA_SB_BF16)
                deq4(wd, __float2bfloat162_rn(s.x), __float2bfloat162_rn(s.y), r);
            else
                deq4f(wd, s.x, s.y, r);
            /* r[p] holds elements (p, p + 4): back to (0 1) (2 3) (4 5) (6 7) */
            o[0] = __byte_perm(r[0], r[1], 0x5410);
            o[1] = __byte_perm(r[2], r[3], 0x5410);
            o[2] = __byte_perm(r[0], r[1], 0x7632);
            o[3] = __byte_perm(r[2], r[3], 0x7632);
        } else {
            uint2 wd = __ldg((const uint2 *)(q + row * (cols / 4)) + p);
            deq8(wd.x, s.x, s.y, o);
            deq8(wd.y, s.x, s.y, o + 2);
        }
        out[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

typedef struct qdeq_call {
    rp_cuda_qw w;
    long r0, nr;
    uint4 *out;
    int sms;
} qdeq_call;

static void qdeq_run(const void *args, void *stream, int pdl)
{
    const qdeq_call *c = (const qdeq_call *)args;
    long n8 = c->nr * c->w.cols / 8;
    long b = (n8 + 255) / 256, bmax = 16L * c->sms;
    dim3 grid((unsigned)(b < bmax ? b : bmax));
    if (c->w.bits == 4)
        pdl_launch(pdl, qdeq_kernel<4>, grid, dim3(256), (cudaStream_t)stream, c->w.q, c->w.sb,
                   c->w.sf, c->w.gs, c->w.cols, c->r0, n8, c->out);
    else
        pdl_launch(pdl, qdeq_kernel<8>, grid, dim3(256), (cudaStream_t)stream, c->w.q, c->w.sb,
                   c->w.sf, c->w.gs, c->w.cols, c->r0, n8, c->out);
    CK(cudaGetLastError());
}

typedef struct qcopy_call {
    float *dst;
    const float *src;
    long dpitch, spitch, width, height; /* bytes, bytes, bytes, rows */
} qcopy_call;

static void qcopy_run(const void *args, void *stream, int pdl)
{
    const qcopy_call *c = (const qcopy_call *)args;
    CK(cudaMemcpy2DAsync(c->dst, (size_t)c->dpitch, c->src, (size_t)c->spitch, (size_t)c->width,
                         (size_t)c->height, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
}

static_assert(sizeof(qdeq_call) <= RP_CUDA_HOOK_ARGS, "qdeq_call too big for the hook");

/* y = w x through a bf16 copy of w (see above): one matrix, rows in chunks. */
static void qdq_matmul(rp_cuda_ctx *c, const rp_cuda_qw *w, const float *x, int n_tok, float *y)
{
    long rows = w->rows, cols = w->cols;
    long chunk = QDQ_CHUNK_BYTES / (cols * 2) / 16 * 16;
    if (chunk < 16)
        chunk = 16;
    if (chunk > rows)
        chunk = rows;
    for (long r0 = 0; r0 < rows; r0 += chunk) {
        long nr = rows - r0 < chunk ? rows - r0 : chunk;
        qdeq_call d;
        memset(&d, 0, sizeof d);
        d.w = *w;
        d.r0 = r0;
        d.nr = nr;
        d.out = (uint4 *)rp_cuda_qscratch(c, 4, (size_t)chunk * cols * 2);
        d.sms = rp_cuda_hook_sms(c);
        rp_cuda_hook_run(c, 1, qdeq_run, &d, sizeof d);
        float *yo = nr == rows ? y : (float *)rp_cuda_qscratch(c, 5, sizeof(float) * (size_t)n_tok * chunk);
        rp_cuda_matmul(c, RP_CUDA_BF16, d.out, nr, cols, x, n_tok, yo);
        if (yo != y) {
            qcopy_call k = {y + r0, yo, rows * 4, nr * 4, nr * 4, n_tok};
            rp_cuda_hook_run(c, 1, qcopy_run, &k, sizeof k);
        }
    }
}

/* ---- embedding ---------------------------------------------------------------------------- */

__global__ void qembed_kernel(const uint32_t *__restrict__ q, const void *__restrict__ sb, int sf,
                              int bits, int gs, long cols, const int32_t *ids, float *x)
{
    long row = ids[blockIdx.x], wpr = cols * bits / 32, ng = cols / gs;
    int per = 32 / bits;
    uint32_t mask = (1u << bits) - 1;
    for (long i = threadIdx.x; i < cols; i += blockDim.x) {
        uint32_t w = q[row * wpr + i / per];
        float v = (float)((w >> (bits * (i % per))) & mask);
        float2 s = load_sb(sb, row * ng + i / gs, sf);
        x[(long)blockIdx.x * cols + i] = fmaf(s.x, v, s.y);
    }
}

/* ---- launchers (through the context's hooks: graphs, profiling, PDL) ----------------------- */

/* qmv2_kernel's shared memory: x's two int8 parts and (d, sum), 72 bytes a 32-element run */
static size_t qv2_smem(long cols) { return (size_t)cols / 32 * 72; }
#define QV2_SMEM_MAX ((size_t)96 * 1024)

/* RAPID_CUDA_QMV2, read once into the context's once-flags (bits 8..11): 0 off
 * (qx_int8_kernel + qmv_kernel), 1 one block per SM, 2 (the default) two blocks per SM with
 * the fusions of the deferred ops (a held rmsnorm / silu_mul in the prologue, a residual add
 * in the epilogue), 3 as 2 with the early programmatic-launch trigger
 * (griddepcontrol.launch_dependents once x is split), 4 one-row tiles, no fusions, 5 session
 * 5's default (two-row tiles, no fusions), 6 as 2 with split k for rows of more than 8192
 * elements (qmv2k_kernel), 7 as 2 with two items in flight and the x split's loads 4 pieces
 * at a time (6 and 7: no faster in decode on the H200, NOTES.md session 6). */
static int qmv2_knob(rp_cuda_ctx *c)
{
    int *once = rp_cuda_hook_once(c);
    if (!(*once & 2)) {
        const char *e = getenv("RAPID_CUDA_QMV2");
        int v = e && e[0] >= '0' && e[0] <= '7' && !e[1] ? e[0] - '0' : 2;
        const char *o = getenv("RAPID_CUDA_QX1");
        int x1 = !(o && o[0] == '0' && !o[1]);
        *once = (*once & ~(31 << 8)) | 2 | v << 8 | x1 << 12;
    }
    return (*once >> 8) & 15;
}

/* RAPID_CUDA_QX1 (read with RAPID_CUDA_QMV2): 1, the default, qmv2_kernel's prologue in one
 * round of L2 reads where x has at most 2 pieces a thread (qx_split_once), else two pieces'
 * reads a round; 0: the rounds of session 6 (norm, then one piece a round) */
static int qx1_knob(rp_cuda_ctx *c)
{
    qmv2_knob(c);
    return (*rp_cuda_hook_once(c) >> 12) & 1;
}

typedef struct qmv_call {
    qmv_args a;
    const float *x;
    qv2_pro pro; /* qmv2 / qmv2k: the fused prologue's inputs, the residual */
    int fblocks; /* > 0: the streaming kernel (qmvb_kernel) on this many blocks */
    int v2;      /* > 0: qmv2_kernel (qmv2k_kernel if splitk) on v2 blocks */
    unsigned char bits, n, r4, qv; /* r4: one token, rows in groups of 4; qv: RAPID_CUDA_QMV */
    unsigned char v2f;    /* rows per tile | qmv2_kernel's flags (QV2_F_*) << 4 */
    unsigned char pk;     /* the prologue: QV2_COPY / _NORM / _SILU */
    unsigned char splitk; /* qmv2k_kernel */
    unsigned char nb;     /* qx_split's pieces at a time: 4, or 1 (session 5) */
} qmv_call;

typedef struct qmm_call {
    qmm_args a;
    const float *x;
    int bits, mt;    /* mt: 16-row tiles per warp, 2 (64-token chunks) or 4 (32-token) */
    unsigned rb, tc; /* row blocks, token chunks */
} qmm_call;

typedef struct qemb_call {
    rp_cuda_qw w;
    const int32_t *ids;
    int n;
    float *x;
} qemb_call;

/* k<<<grid, block, smem, s>>>(args...), a programmatic dependent launch when pdl */
template <typename K, typename... A>
static void smem_launch(K k, unsigned grid, unsigned block, size_t smem, cudaStream_t s, int pdl,
                        A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

/* v: 0 the default (2 rows per warp, 4 runs in flight per row), 1 (RAPID_CUDA_QMV=1) 4 rows
 * per warp, 2 runs, pipelined */
template <int BITS, int NT, int R>
static void qmv_go(const qmv_args &a, int v, cudaStream_t s, int pdl)
{
    dim3 block(QMV_WARPS * 32);
    if (R == 1) {
        dim3 grid((unsigned)((a.r0[3] + QMV_WARPS - 1) / QMV_WARPS));
        pdl_launch(pdl, qmv_kernel<BITS, NT, BITS == 4 ? 4 : 2, 1, 0>, grid, block, s, a);
    } else if (v == 1) {
        dim3 grid((unsigned)((a.r0[3] / 4 + QMV_WARPS - 1) / QMV_WARPS));
        pdl_launch(pdl, qmv_kernel<BITS, NT, BITS == 4 ? 2 : 1, 4, 1>, grid, block, s, a);
    } else {
        dim3 grid((unsigned)((a.r0[3] / 2 + QMV_WARPS - 1) / QMV_WARPS));
        pdl_launch(pdl, qmv_kernel<BITS, NT, BITS == 4 ? 4 : 2, 2, 0>, grid, block, s, a);
    }
}

template <int BITS>
static void qmvb_go(const qmv_call *c, cudaStream_t s, int pdl)
{
    void (*k)(qmv_args, const float *, int) =
        qb_stages(c->a.cols) == 4 ? qmvb_kernel<BITS, 4> : qmvb_kernel<BITS, 3>;
    size_t smem = qb_smem(c->a.cols);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    smem_launch(k, (unsigned)c->fblocks, QB_WARPS * 32, smem, s, pdl, c->a, c->x,
                BITS == 4 ? 1 : 0);
}

/* qmv2k_kernel's runs per lane and row (U) for cols: the slices (cols / 256 runs) fit 32 U */
static int qk_u(long cols) { return cols <= 16384 ? 2 : 4; }

template <int BITS, int U, int PRO>
static void qmv2k_go(const qmv_call *c, cudaStream_t s, int pdl)
{
    /* an item: 8 loads of 16 bytes per lane (R U V) */
    constexpr int R = 8 / (U * (BITS / 4)) > 0 ? 8 / (U * (BITS / 4)) : 1;
    void (*k)(qmv_args, const float *, qv2_pro, int) = qmv2k_kernel<BITS, R, U, PRO>;
    smem_launch(k, (unsigned)c->v2, QV2_WARPS * 32, qv2_smem(c->a.cols), s, pdl, c->a, c->x,
                c->pro, BITS == 4 ? 1 : 0);
}

template <int BITS, int PRO>
static void qmv2_pick(const qmv_call *c, void (**k)(qmv_args, const float *, qv2_pro, int, int))
{
    if ((c->v2f & 15) == 1)
        *k = qmv2_kernel<BITS, 1, 8 / (BITS / 4), QV2_COPY, 1>;
    else if (c->nb == 1)
        *k = qmv2_kernel<BITS, 2, 4 / (BITS / 4), PRO, 1>;
    else
        *k = qmv2_kernel<BITS, 2, 4 / (BITS / 4), PRO, 4>;
}

template <int BITS>
static void qmv2_go(const qmv_call *c, cudaStream_t s, int pdl)
{
    if (c->splitk) {
        int u4 = qk_u(c->a.cols) == 4;
        if (c->pk == QV2_NORM)
            u4 ? qmv2k_go<BITS, 4, QV2_NORM>(c, s, pdl) : qmv2k_go<BITS, 2, QV2_NORM>(c, s, pdl);
        else if (c->pk == QV2_SILU)
            u4 ? qmv2k_go<BITS, 4, QV2_SILU>(c, s, pdl) : qmv2k_go<BITS, 2, QV2_SILU>(c, s, pdl);
        else
            u4 ? qmv2k_go<BITS, 4, QV2_COPY>(c, s, pdl) : qmv2k_go<BITS, 2, QV2_COPY>(c, s, pdl);
        return;
    }
    void (*k)(qmv_args, const float *, qv2_pro, int, int);
    if (c->pk == QV2_NORM)
        qmv2_pick<BITS, QV2_NORM>(c, &k);
    else if (c->pk == QV2_SILU)
        qmv2_pick<BITS, QV2_SILU>(c, &k);
    else
        qmv2_pick<BITS, QV2_COPY>(c, &k);
    size_t smem = qv2_smem(c->a.cols);
    smem_launch(k, (unsigned)c->v2, QV2_WARPS * 32, smem, s, pdl, c->a, c->x, c->pro,
                BITS == 4 ? 1 : 0, c->v2f >> 4);
}

template <int BITS> static void qmv2_attr_bits(void)
{
    int most = (int)QV2_SMEM_MAX;
    constexpr int V = BITS / 4;
#define QV2_ATTR(...)                                                                          \
    CK(cudaFuncSetAttribute(__VA_ARGS__, cudaFuncAttributeMaxDynamicSharedMemorySize, most))
    QV2_ATTR(qmv2_kernel<BITS, 1, 8 / V, QV2_COPY, 1>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_COPY, 1>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_NORM, 1>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_SILU, 1>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_COPY, 4>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_NORM, 4>);
    QV2_ATTR(qmv2_kernel<BITS, 2, 4 / V, QV2_SILU, 4>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (2 * V), 2, QV2_COPY>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (2 * V), 2, QV2_NORM>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (2 * V), 2, QV2_SILU>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (4 * V), 4, QV2_COPY>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (4 * V), 4, QV2_NORM>);
    QV2_ATTR(qmv2k_kernel<BITS, 8 / (4 * V), 4, QV2_SILU>);
#undef QV2_ATTR
}

static void qmv2_attr(void)
{
    qmv2_attr_bits<4>();
    qmv2_attr_bits<8>();
}

static void qmv_run(const void *args, void *stream, int pdl)
{
    const qmv_call *c = (const qmv_call *)args;
    cudaStream_t s = (cudaStream_t)stream;
    if (c->v2 > 0) {
        if (c->bits == 4)
            qmv2_go<4>(c, s, pdl);
        else
            qmv2_go<8>(c, s, pdl);
        CK(cudaGetLastError());
        return;
    }
    if (c->fblocks > 0) {
        if (c->bits == 4)
            qmvb_go<4>(c, s, pdl);
        else
            qmvb_go<8>(c, s, pdl);
        return;
    }
    long n_q = (long)c->n * c->a.cols / 8;
    pdl_launch(pdl, qx_int8_kernel, dim3((unsigned)((n_q + 127) / 128)), dim3(128), s, c->x,
             c->a.cols, n_q, c->bits == 4 ? 1 : 0, (int8_t *)c->a.xq, (float2 *)c->a.xs);
    int v = (c->bits == 4 ? 0 : 5) + (c->r4 ? 0 : c->n), qv = c->qv;
    switch (v) {
    case 0: qmv_go<4, 1, 4>(c->a, qv, s, pdl); break;
    case 1: qmv_go<4, 1, 1>(c->a, qv, s, pdl); break;
    case 2: qmv_go<4, 2, 1>(c->a, qv, s, pdl); break;
    case 3: qmv_go<4, 3, 1>(c->a, qv, s, pdl); break;
    case 4: qmv_go<4, 4, 1>(c->a, qv, s, pdl); break;
    case 5: qmv_go<8, 1, 4>(c->a, qv, s, pdl); break;
    case 6: qmv_go<8, 1, 1>(c->a, qv, s, pdl); break;
    case 7: qmv_go<8, 2, 1>(c->a, qv, s, pdl); break;
    case 8: qmv_go<8, 3, 1>(c->a, qv, s, pdl); break;
    default: qmv_go<8, 4, 1>(c->a, qv, s, pdl); break;
    }
    CK(cudaGetLastError());
}

template <int BITS, int MT>
static void qmm_go(const qmm_args &a, dim3 grid, int nt, cudaStream_t s, int pdl)
{
    dim3 block(QMM_WARPS * 32);
    switch (nt) {
    case 1: pdl_launch(pdl, qmm_kernel<BITS, 1, MT>, grid, block, s, a); break;
    case 2: pdl_launch(pdl, qmm_kernel<BITS, 2, MT>, grid, block, s, a); break;
    case 3: pdl_launch(pdl, qmm_kernel<BITS, 3, MT>, grid, block, s, a); break;
    case 4: pdl_launch(pdl, qmm_kernel<BITS, 4, MT>, grid, block, s, a); break;
    case 5: if constexpr (MT == 2) pdl_launch(pdl, qmm_kernel<BITS, 5, MT>, grid, block, s, a); break;
    case 6: if constexpr (MT == 2) pdl_launch(pdl, qmm_kernel<BITS, 6, MT>, grid, block, s, a); break;
    case 7: if constexpr (MT == 2) pdl_launch(pdl, qmm_kernel<BITS, 7, MT>, grid, block, s, a); break;
    default:
        if constexpr (MT == 2)
            pdl_launch(pdl, qmm_kernel<BITS, 8, MT>, grid, block, s, a);
        break;
    }
}

typedef struct qmm2_call {
    qmm_args a;
    const float *x;
    unsigned rb;
} qmm2_call;

template <int NT> static void qmm2_go(const qmm_args &a, dim3 grid, cudaStream_t s, int pdl)
{
    int esz = a.sf == RP_CUDA_SB_F32 ? 8 : 4, sbytes = 128 / a.gs * esz;
    cluster_launch(pdl, qmm2_kernel<NT>, grid, dim3(Q2_WARPS * 32),
                   (size_t)Q2_STAGES * Q2_STAGE(NT, sbytes), s, a);
}

static void qmm2_attr(void)
{
#define Q2_ATTR(nt)                                                                            \
    CK(cudaFuncSetAttribute(qmm2_kernel<nt>, cudaFuncAttributeMaxDynamicSharedMemorySize,      \
                            Q2_STAGES * Q2_STAGE(nt, 32)))
    Q2_ATTR(1); Q2_ATTR(2); Q2_ATTR(3); Q2_ATTR(4); Q2_ATTR(5); Q2_ATTR(6); Q2_ATTR(7); Q2_ATTR(8);
#undef Q2_ATTR
}

static void qmm2_run(const void *args, void *stream, int pdl)
{
    const qmm2_call *c = (const qmm2_call *)args;
    cudaStream_t s = (cudaStream_t)stream;
    long n8 = (long)c->a.n * c->a.cols / 8;
    unsigned xb = (unsigned)((n8 + 255) / 256 < 4096 ? (n8 + 255) / 256 : 4096);
    pdl_launch(pdl, qx_bf16_kernel, dim3(xb), dim3(256), s, c->x, n8, 1, (uint4 *)c->a.x);
    dim3 grid(c->rb, (unsigned)c->a.splits);
    switch ((c->a.n + 7) / 8) {
    case 1: qmm2_go<1>(c->a, grid, s, pdl); break;
    case 2: qmm2_go<2>(c->a, grid, s, pdl); break;
    case 3: qmm2_go<3>(c->a, grid, s, pdl); break;
    case 4: qmm2_go<4>(c->a, grid, s, pdl); break;
    case 5: qmm2_go<5>(c->a, grid, s, pdl); break;
    case 6: qmm2_go<6>(c->a, grid, s, pdl); break;
    case 7: qmm2_go<7>(c->a, grid, s, pdl); break;
    default: qmm2_go<8>(c->a, grid, s, pdl); break;
    }
    CK(cudaGetLastError());
}

/* RAPID_CUDA_Q4WG=N: 4-bit steps of N..64 tokens on the wgmma kernel (cuda_wgmma_q4.cu),
 * default 5; 0: never (qmm2_kernel serves them). Read once into the context's once-flags
 * (bit 6: read; bits 16..22: N, 0 where the device is not compute capability 9.0, the only
 * one with the kernel's sm_90a code). */
static int q4wg_knob(rp_cuda_ctx *c)
{
    int *once = rp_cuda_hook_once(c);
    if (!(*once & 64)) {
        const char *e = getenv("RAPID_CUDA_Q4WG");
        int v = e && *e ? atoi(e) : 5;
        v = v < 0 ? 0 : v > 65 ? 65 : v;
        if (!rp_q4wg_usable())
            v = 0;
        *once = (*once & ~(127 << 16)) | 64 | v << 16;
    }
    return (*once >> 16) & 127;
}

typedef struct q4wg_call {
    rp_q4wg_args a;
    const float *x;
} q4wg_call;

static void q4wg_run(const void *args, void *stream, int pdl)
{
    const q4wg_call *c = (const q4wg_call *)args;
    cudaStream_t s = (cudaStream_t)stream;
    long n8 = (long)c->a.n * c->a.cols / 8;
    unsigned xb = (unsigned)((n8 + 255) / 256 < 4096 ? (n8 + 255) / 256 : 4096);
    pdl_launch(pdl, qx_bf16_kernel, dim3(xb), dim3(256), s, c->x, n8, 2, (uint4 *)c->a.x);
    rp_q4wg_launch(c->a, pdl, s);
    CK(cudaGetLastError());
}

static void qmm_run(const void *args, void *stream, int pdl)
{
    const qmm_call *c = (const qmm_call *)args;
    cudaStream_t s = (cudaStream_t)stream;
    long n8 = (long)c->a.n * c->a.cols / 8;
    unsigned xb = (unsigned)((n8 + 255) / 256 < 4096 ? (n8 + 255) / 256 : 4096);
    pdl_launch(pdl, qx_bf16_kernel, dim3(xb), dim3(256), s, c->x, n8, c->bits == 4 ? 1 : 0,
             (uint4 *)c->a.x);
    int nt = c->tc > 1 ? 8 / (c->mt / 2) : (c->a.n + 7) / 8;
    dim3 grid(c->rb, (unsigned)c->a.splits, c->tc);
    if (c->bits == 4 && c->mt == 4)
        qmm_go<4, 4>(c->a, grid, nt, s, pdl);
    else if (c->bits == 4)
        qmm_go<4, 2>(c->a, grid, nt, s, pdl);
    else if (c->mt == 4)
        qmm_go<8, 4>(c->a, grid, nt, s, pdl);
    else
        qmm_go<8, 2>(c->a, grid, nt, s, pdl);
    if (c->a.splits > 1) {
        long nq = c->a.r0[3] * c->a.n;
        pdl_launch(pdl, qmm_reduce_kernel, dim3((unsigned)((nq + 255) / 256)), dim3(256), s, c->a);
    }
    CK(cudaGetLastError());
}

static void qemb_run(const void *args, void *stream, int pdl)
{
    const qemb_call *c = (const qemb_call *)args;
    qembed_kernel<<<c->n, 256, 0, (cudaStream_t)stream>>>(c->w.q, c->w.sb, c->w.sf, c->w.bits,
                                                          c->w.gs, c->w.cols, c->ids, c->x);
    CK(cudaGetLastError());
}

static_assert(sizeof(qmv_call) <= RP_CUDA_HOOK_ARGS, "qmv_call too big for the hook");
static_assert(sizeof(qmm_call) <= RP_CUDA_HOOK_ARGS, "qmm_call too big for the hook");
static_assert(sizeof(qmm2_call) <= RP_CUDA_HOOK_ARGS, "qmm2_call too big for the hook");
static_assert(sizeof(q4wg_call) <= RP_CUDA_HOOK_ARGS, "q4wg_call too big for the hook");
static_assert(sizeof(qemb_call) <= RP_CUDA_HOOK_ARGS, "qemb_call too big for the hook");

/* What every 4/8-bit kernel's arguments (qmv_args, qmm_args, rp_q4wg_args) take the same way:
 * the n stacked matrices, their outputs, the row starts, the columns and the group layout
 * (the first matrix's: rp_cuda_qmatmul_n runs only matrices that agree on them). */
template <typename A>
static void qargs_common(A &a, int n, const rp_cuda_qw *const *w, float *const *y,
                         const long *r0, long cols)
{
    for (int i = 0; i < n; i++) {
        a.q[i] = w[i]->q;
        a.sb[i] = w[i]->sb;
        a.y[i] = y[i];
    }
    memcpy(a.r0, r0, sizeof a.r0);
    a.cols = cols;
    a.gs = w[0]->gs;
    a.sf = w[0]->sf;
}

extern "C" void rp_cuda_qmatmul_n(rp_cuda_ctx *c, int n, const rp_cuda_qw *const *w,
                                  const float *x, int n_tok, float *const *y)
{
    int same = n <= 3;
    for (int i = 1; i < n && same; i++)
        same = w[i]->bits == w[0]->bits && w[i]->gs == w[0]->gs && w[i]->sf == w[0]->sf &&
               w[i]->cols == w[0]->cols;
    for (int i = 0; i < n && same && n > 1 && n_tok > 4; i++)
        same = w[i]->rows % 16 == 0; /* a 16-row tile must stay in one matrix */
    if (!same) {
        for (int i = 0; i < n; i++)
            rp_cuda_qmatmul_n(c, 1, &w[i], x, n_tok, &y[i]);
        return;
    }
    long cols = w[0]->cols, r = 0;
    long r0[4];
    for (int i = 0; i < 3; i++) {
        r0[i] = r;
        if (i < n)
            r += w[i]->rows;
    }
    r0[3] = r;
    for (int i = n; i < 3; i++)
        r0[i] = r;
    if (n_tok <= 4) {
        qmv_call call;
        memset(&call, 0, sizeof call);
        qargs_common(call.a, n, w, y, r0, cols);
        call.a.xq = (const int8_t *)rp_cuda_qscratch(c, 0, 2 * (size_t)n_tok * cols);
        call.a.xs = (const float2 *)rp_cuda_qscratch(c, 1,
                                                     sizeof(float2) * (size_t)n_tok * cols / 32);
        call.x = x;
        call.bits = (unsigned char)w[0]->bits;
        call.n = (unsigned char)n_tok;
        call.r4 = n_tok == 1;
        call.qv = (unsigned char)(rp_cuda_hook_knob(c) / 100 % 10);
        for (int i = 0; i < n; i++)
            call.r4 = call.r4 && w[i]->rows % 4 == 0;
        /* RAPID_CUDA_QMVF: thousands digit of the knob, 0 off (the default), 2..9 blocks per
         * SM of qmvb_kernel; x in shared memory (72 bytes a run) up to 16384 columns; the
         * bulk copies' 16-byte alignment: rows and groups' (scale, bias) of whole 16 bytes */
        int fk = rp_cuda_hook_knob(c) / 1000 % 10, per_sm = fk;
        int sbb = w[0]->sf == RP_CUDA_SB_F32 ? 8 : 4;
        long ng = cols / w[0]->gs, rb = cols * w[0]->bits / 8;
        int aligned = rb % 16 == 0 && (ng * sbb) % 16 == 0 &&
                      (long)(QB_CHUNK / (w[0]->bits * 4) * 32 / w[0]->gs) * sbb % 16 == 0;
        for (int i = 0; i < n; i++)
            aligned = aligned && (uintptr_t)w[i]->q % 16 == 0 && (uintptr_t)w[i]->sb % 16 == 0;
        if (n_tok == 1 && fk >= 2 && cols <= 16384 && aligned) {
            long need = ((r + 1) / 2 + QB_WARPS - 1) / QB_WARPS,
                 most = (long)per_sm * rp_cuda_hook_sms(c);
            call.fblocks = (int)(need < most ? need : most);
        }
        /* qmv2_kernel (RAPID_CUDA_QMV2, below) for one token unless qmvb was asked for */
        int v2 = qmv2_knob(c);
        int small = r < (1L << 30);
        for (int i = 0; i < n; i++) /* qmv2_kernel's 32-bit offsets */
            small = small && w[i]->rows * (cols * w[i]->bits / 128) < (1L << 31);
        if (n_tok == 1 && v2 > 0 && call.fblocks == 0 && qv2_smem(cols) <= QV2_SMEM_MAX &&
            w[0]->sf != RP_CUDA_SB_F32 && small) {
            int *once = rp_cuda_hook_once(c);
            if (!(*once & 32)) {
                qmv2_attr();
                *once |= 32;
            }
            int per_sm = v2 == 1 ? 1 : 2, rf = v2 == 4 ? 1 : v2 == 5 ? 2 : 0;
            long wmax = (long)per_sm * rp_cuda_hook_sms(c) * QV2_WARPS;
            /* 8 loads of 16 bytes per lane and item either way: two-row tiles of 4 runs
             * (4-bit; 2 for 8-bit), or (RAPID_CUDA_QMV2=4) one-row tiles of 8 (4) runs,
             * which were slower on the H200 also for 14336-column rows (NOTES.md, session 5) */
            int R = rf == 1 ? 1 : 2;
            long tiles = (r + R - 1) / R, warps = tiles < wmax ? tiles : wmax;
            call.v2 = (int)((warps + QV2_WARPS - 1) / QV2_WARPS);
            call.v2f = (unsigned char)(R | (v2 == 3 ? QV2_F_TRIGGER : 0) << 4 |
                                       (qx1_knob(c) ? QV2_F_ONCE : 0) << 4);
            /* opt-in (no faster on the H200 in session 6, NOTES.md): RAPID_CUDA_QMV2=7 two items
             * in flight and the split's loads 4 pieces at a time; =6 rows of more than 8192
             * elements (up to 32768: the slices' 32 U runs) by qmv2k_kernel, its rows evenly
             * over per_sm blocks per SM, at most QK_ROWS a block */
            call.nb = v2 == 7 ? 4 : 1;
            if (cols > 8192 && cols <= 32768 && v2 == 6) {
                long blocks = (long)per_sm * rp_cuda_hook_sms(c);
                if (blocks < (r + QK_ROWS - 1) / QK_ROWS)
                    blocks = (r + QK_ROWS - 1) / QK_ROWS;
                if (blocks > r)
                    blocks = r;
                call.splitk = 1;
                call.v2 = (int)blocks;
            }
        }
        if (call.v2 > 0 && v2 != 4 && v2 != 5) {
            /* a held rmsnorm / silu_mul of x taken into the prologue, and the call held for a
             * residual add of its output (its epilogue); RAPID_CUDA_QMV2=4, 5 or
             * RAPID_CUDA_FUSE=0: neither */
            rp_cuda_pro pro;
            if (rp_cuda_hook_take_pro(c, x, cols, &pro) && pro.pro != RP_CUDA_PRO_NONE) {
                call.pk = (unsigned char)pro.pro;
                call.x = pro.x;
                call.pro.x2 = pro.x2;
                call.pro.out = pro.out;
                call.pro.eps = pro.eps;
                call.pro.add_one = pro.add_one;
            }
            rp_cuda_mvdesc d;
            memset(&d, 0, sizeof d);
            d.y = n == 1 ? y[0] : NULL;
            d.rows = r;
            d.cols = cols;
            d.x = call.x;
            d.x2 = call.pro.x2;
            d.out = call.pro.out;
            d.res_off = offsetof(qmv_call, pro) + offsetof(qv2_pro, res);
            rp_cuda_hook_defer(c, qmv_run, &call, sizeof call, &d);
            return;
        }
        rp_cuda_hook_run(c, 0, qmv_run, &call, sizeof call);
        return;
    }
    int qdq = rp_cuda_hook_qdq(c);
    if (qdq > 0 && n_tok >= qdq) {
        for (int i = 0; i < n; i++)
            qdq_matmul(c, w[i], x, n_tok, y[i]);
        return;
    }
    int q4 = q4wg_knob(c);
    if (q4 > 0 && n_tok >= q4 && n_tok <= 64 && w[0]->bits == 4 && cols % RP_Q4WG_BK == 0) {
        /* the wgmma kernel; its split by the clusters resident at once (cuda_wgmma_q4.h),
         * RAPID_CUDA_Q4WG_SPLIT=S (1..8) caps it at S; RAPID_CUDA_Q4WG_PF=0 / 1 / 2: the
         * weight copies' L2 prefetch (none, 128, 256 bytes; default 2). Once-flag bits 24..27
         * and 28..29 keep them. */
        int *once = rp_cuda_hook_once(c);
        if (!(*once & 128)) {
            rp_q4wg_setup();
            const char *e = getenv("RAPID_CUDA_Q4WG_SPLIT");
            int cap = e && e[0] >= '1' && e[0] <= '8' && !e[1] ? e[0] - '0' : 0;
            const char *p = getenv("RAPID_CUDA_Q4WG_PF");
            int pf = p && p[0] >= '0' && p[0] <= '2' && !p[1] ? p[0] - '0' : 2;
            *once = (*once & ~(63 << 24)) | 128 | cap << 24 | pf << 28;
        }
        q4wg_call call;
        memset(&call, 0, sizeof call);
        qargs_common(call.a, n, w, y, r0, cols);
        call.a.n = n_tok;
        call.a.pf = (*once >> 28) & 3;
        long sp = rp_q4wg_splits(r, cols, n_tok, (*once >> 24) & 15);
        call.a.kspan = ((cols + sp - 1) / sp + RP_Q4WG_BK - 1) / RP_Q4WG_BK * RP_Q4WG_BK;
        call.a.x = (const uint16_t *)rp_cuda_qscratch(c, 2, (size_t)n_tok * cols * 2);
        call.x = x;
        rp_cuda_hook_run(c, 1, q4wg_run, &call, sizeof call);
        return;
    }
    int q2 = rp_cuda_hook_qmm2(c);
    if (q2 > 0 && n_tok >= q2 && n_tok <= 64 && w[0]->bits == 4 && cols % 128 == 0) {
        int *once = rp_cuda_hook_once(c);
        if (!(*once & 1)) {
            qmm2_attr();
            *once |= 1;
        }
        qmm2_call call;
        memset(&call, 0, sizeof call);
        qargs_common(call.a, n, w, y, r0, cols);
        call.a.n = n_tok;
        /* k split over a cluster only where the row blocks leave half the SMs idle, into
         * whole 128-element steps of at least 4 each, never past one wave */
        long rb = (r + Q2_BM - 1) / Q2_BM, slots = rp_cuda_hook_sms(c);
        long sp = 2 * rb <= slots ? slots / rb : 1;
        if (sp > Q2_MAXSPLIT)
            sp = Q2_MAXSPLIT;
        if (sp > cols / 512)
            sp = cols / 512;
        if (sp < 1)
            sp = 1;
        call.a.kspan = ((cols + sp - 1) / sp + 127) / 128 * 128;
        call.a.splits = (int)((cols + call.a.kspan - 1) / call.a.kspan);
        call.a.x = (const uint16_t *)rp_cuda_qscratch(c, 2, (size_t)n_tok * cols * 2);
        call.x = x;
        call.rb = (unsigned)rb;
        rp_cuda_hook_run(c, 1, qmm2_run, &call, sizeof call);
        return;
    }
    qmm_call call;
    memset(&call, 0, sizeof call);
    qargs_common(call.a, n, w, y, r0, cols);
    call.a.n = n_tok;
    call.bits = w[0]->bits;
    long kstep = w[0]->bits == 4 ? 128 : 64;
    /* RAPID_CUDA_QMM=MT,F: tiles per warp (2 or 4) and blocks per SM aimed at by split k */
    int knob = rp_cuda_hook_knob(c) % 100, mt = knob / 10 == 4 ? 4 : 2, per_sm = knob % 10;
    call.mt = mt;
    long rows_blk = QMM_WARPS * 16L * mt, tok = mt == 4 ? 32 : 64;
    long rb = (r + rows_blk - 1) / rows_blk, tc = (n_tok + tok - 1) / tok;
    long blocks = rb * tc, target = (long)(per_sm ? per_sm : 4) * rp_cuda_hook_sms(c);
    long s = 2 * blocks < target ? (target + blocks - 1) / blocks : 1, smax = cols / 256;
    if (s > smax)
        s = smax;
    if (s < 1)
        s = 1;
    call.a.kspan = ((cols + s - 1) / s + kstep - 1) / kstep * kstep;
    call.a.splits = (int)((cols + call.a.kspan - 1) / call.a.kspan);
    call.a.x = (const uint16_t *)rp_cuda_qscratch(c, 2, (size_t)n_tok * cols * 2);
    if (call.a.splits > 1)
        call.a.part = (float *)rp_cuda_qscratch(c, 3, sizeof(float) * (size_t)call.a.splits *
                                                          n_tok * r);
    call.x = x;
    call.rb = (unsigned)rb;
    call.tc = (unsigned)tc;
    rp_cuda_hook_run(c, 1, qmm_run, &call, sizeof call);
}

extern "C" void rp_cuda_qembed(rp_cuda_ctx *c, const rp_cuda_qw *w, const int32_t *ids, int n,
                               float *x)
{
    qemb_call call;
    memset(&call, 0, sizeof call);
    call.w = *w;
    call.ids = (const int32_t *)rp_cuda_hook_stage(c, ids, sizeof(int32_t) * (size_t)n);
    call.n = n;
    call.x = x;
    rp_cuda_hook_run(c, 2, qemb_run, &call, sizeof call);
}
