/* backend/cuda/cuda_wgmma_q4.cu - the batched-decode GEMM of MLX 4-bit weights on Hopper's
 * warpgroup MMA (wgmma.mma_async with A in registers, sm_90a machine code only), contract in
 * cuda_wgmma_q4.h.
 *
 * Why: qmm2_kernel (cuda_quant.cu) feeds mma.sync m16n8k16 and at 64 tokens is issue-bound
 * (ncu, q/k/v at 64 tokens: 60 TFLOP/s, tensor pipe 20%): per 16 x 8 x 16 product a warp
 * issues one MMA plus its share of the dequantization and x loads. One wgmma m64nNk16 does
 * the work of 4 N / 8 such MMAs per warp and reads x by descriptor from shared memory (no
 * x registers, no x loads by the threads), so the issue slots left are the dequantization's.
 *
 * Design:
 *  1. A block is one warpgroup (128 threads) owning RP_Q4WG_BM = 128 stacked rows, two m64
 *     halves (warp w holds rows 16 w .. 16 w + 15 of each), against every token of the call
 *     (N = 8 NT, NT = ceil(n / 8); pad tokens repeat the last one and are not stored). Each
 *     128-element k step, the packed weights [128][64 bytes], their (scale, bias) entries and
 *     x [8 NT][256 bytes] go global -> shared memory by cp.async, STAGES - 1 steps in flight
 *     ahead of the one being multiplied (as qmm2 / wg_kernel), the weights of the first ones
 *     before the programmatic dependent launch wait and x after it. The weight copies ask the
 *     L2 for the 256 bytes around them (the next steps' bytes of the row; rp_q4wg_args.pf):
 *     measured 2-5% faster on gate/up than no prefetch, a 64-stream bench 8,621 against
 *     8,376 tok/s (NOTES.md, session 20).
 *  2. A from registers: lane (g = lane / 4, t = lane % 4) of warp w reads 16 bytes of rows
 *     16 w + g and + 8 of each half (elements 32 t .. 32 t + 31 of the step, 4 words of 8
 *     nibbles) and dequantizes word j as qmm2 does (deq4 / deq4f: pair p = elements
 *     (8 j + p, 8 j + p + 4)). wgmma's register A operand has mma.sync m16n8k16's A fragment
 *     layout per warp (k 2t, 2t + 1 / 2t + 8, 2t + 9 of rows g, g + 8), so slice s = 2 j + h
 *     takes the pairs 2 h (k 2t, 2t + 1) and 2 h + 1 (k 2t + 8, 2t + 9): physical column
 *     2t -> element 32 t + 8 j + 2 h, 2t + 1 -> + 4, 2t + 8 -> + 1, 2t + 9 -> + 5. x is stored
 *     in that order (rp_q4wg_xorder, qx_bf16_kernel's q4wg mode), so B = x is the plain
 *     K-major operand of wg_kernel: each step's x rows are two 128-byte-swizzled [N][64]
 *     sub-tiles (slice s: sub-tile s / 4, 32 (s % 4) bytes into the rows; descriptor as
 *     cuda_wgmma.cu's wg_desc).
 *  3. Per step: one barrier (after this thread's copies of the step landed, fence.proxy.async
 *     for the async proxy's reads of x, and the previous step's wgmmas waited for: they read
 *     the slot the refill overwrites), the refill of step + STAGES - 1, then for each word j
 *     of the step: dequantize into A buffer j & 1 (16 registers: 2 halves x 2 slices),
 *     wgmma.fence, 4 wgmma (2 slices x 2 halves), commit, wait until at most one group is in
 *     flight (the group of word j - 1, which read the other buffer, is then done): the
 *     dequantization of word j + 1 runs while word j's products are in the tensor cores.
 *  4. Stages: as many weight + scale + x stages as fit in 110 KB (at most 8), 2 blocks per
 *     SM; the scale area is sized for the type (16-bit: 16 bytes a row, f32: 32).
 *  5. Split k and the epilogue: cuda_common.cuh's skinny_epilogue (the wgmma accumulator of
 *     warp w, half h holds rows 64 h + 16 w + g, + 8 in the m16n8 layout), one split stored
 *     directly, a cluster of grid.y splits summed in rank order through distributed shared
 *     memory. rp_q4wg_splits picks the split by the clusters resident at once (the rule of
 *     cuda_kernels.cu's wg_split, on this kernel's own occupancy table).
 * The compute_90 PTX pass (for newer GPUs) has no wgmma: there the kernels are empty and the
 * caller keeps qmm2_kernel (rp_q4wg_usable).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_deq4.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_wgmma_q4.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define Q4_ON 1
#else
#define Q4_ON 0
#endif

/* the kernel for 8 NT tokens, F: f32 scales. Stage: x's two sub-tiles (NT KB each, first:
 * their 1024-byte alignment), the weights 128 x 64 bytes, the scales 128 x SR bytes. */
template <int NT, int F> struct q4_cfg {
    static constexpr int XB = NT * 2048, WB = RP_Q4WG_BM * 64, SR = F ? 32 : 16;
    static constexpr int SB = XB + WB + RP_Q4WG_BM * SR;
    static constexpr int S0 = (110 * 1024) / SB;
    static constexpr int STAGES = S0 > 8 ? 8 : S0;
    static constexpr int SMEM = STAGES * SB + 1024;
    static constexpr int RS = RP_Q4WG_BM + 4; /* the epilogue's row stride (floats) */
    static_assert(NT * 8 * RS * 4 <= SMEM, "the epilogue's tile fits the stages");
};

/* wgmma shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes
 * apart (as cuda_wgmma.cu's wg_desc) */
__device__ __forceinline__ uint64_t q4_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

/* wgmma.mma_async m64nNk16 (N = 8 NT), f32 accumulators d[0 .. 4 NT), A = 4 bf16-pair
 * registers a (the m16n8k16 A fragment of this warp's 16 rows), B by descriptor db; one
 * macro per N: the accumulator list is part of the instruction's text. */
#define Q4_MMA_1                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "                            \
                 "{%0, %1, %2, %3}, "                                                              \
                 "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"                                          \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_2                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, "                                              \
                 "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"                                       \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7])                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_3                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "                            \
                 "{%12, %13, %14, %15}, %16, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_4                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "        \
                 "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_5                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n40k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19}, "                                                           \
                 "{%20, %21, %22, %23}, %24, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19])                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_6                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23}, "                                       \
                 "{%24, %25, %26, %27}, %28, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_7                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n56k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27}, "                   \
                 "{%28, %29, %30, %31}, %32, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")
#define Q4_MMA_8                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                           \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "          \
                 "%30, %31}, "                                                                     \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),   \
                   "+f"(d[30]), "+f"(d[31])                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)                             \
                 : "memory")

template <int NT>
__device__ __forceinline__ void q4_mma(float *d, const uint32_t *a, uint64_t db)
{
    static_assert(NT >= 1 && NT <= 8, "8 to 64 tokens");
    if constexpr (NT == 1)
        Q4_MMA_1;
    else if constexpr (NT == 2)
        Q4_MMA_2;
    else if constexpr (NT == 3)
        Q4_MMA_3;
    else if constexpr (NT == 4)
        Q4_MMA_4;
    else if constexpr (NT == 5)
        Q4_MMA_5;
    else if constexpr (NT == 6)
        Q4_MMA_6;
    else if constexpr (NT == 7)
        Q4_MMA_7;
    else
        Q4_MMA_8;
}

/* 4, 8 or 16 bytes through L1 (the scales: cp.async.cg takes only 16) */
__device__ __forceinline__ void q4_cp_small(uint32_t dst, const void *src, int n, int bytes)
{
    if (n == 16)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                     "r"(bytes)
                     : "memory");
    else if (n == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src),
                     "r"(bytes)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                     "r"(bytes)
                     : "memory");
}

/* 16 weight bytes global -> shared (cp.async.cg, the L2 path), pf 1 / 2: with the L2 asked to
 * fetch the whole 128 / 256 bytes around them. A step reads only 64 bytes of each of its
 * rows, rows 2 KB (4096 columns) or more apart; the next steps read the bytes after them. */
__device__ __forceinline__ void q4_cp_w(uint32_t dst, const void *src, int bytes, int pf)
{
    if (pf == 2)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst),
                     "l"(src), "r"(bytes)
                     : "memory");
    else if (pf == 1)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst),
                     "l"(src), "r"(bytes)
                     : "memory");
    else
        cp_async16(dst, src, bytes);
}

template <int NT, int F>
__global__ void __launch_bounds__(128, 2) q4wg_kernel(const rp_q4wg_args a)
{
#if Q4_ON
    extern __shared__ __align__(1024) unsigned char q4_sm[];
    using C = q4_cfg<NT, F>;
    constexpr int S = C::STAGES, SB = C::SB, XB = C::XB, WB = C::WB, SR = C::SR,
                  XR = NT * 8;
    /* the dynamic shared memory's start rounded up to the swizzle's 1024-byte period (the same
     * offset in every block of the cluster: the epilogue's tiles line up) */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(q4_sm);
    unsigned char *smp = q4_sm + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(smp);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long R = a.r0[3], cols = a.cols, row0 = (long)blockIdx.x * RP_Q4WG_BM;
    const int sf = a.sf, esz = F ? 8 : 4, gs = a.gs, pf = a.pf;
    const int sbytes = RP_Q4WG_BK / gs * esz, scp = sbytes < 16 ? sbytes : 16, sn = sbytes / scp;
    const long wpr = cols / 32; /* uint4 of weights per row */
    /* loaders: weight chunk tid & 3 of rows (tid >> 2) + 32 i; the scales of row tid; x chunk
     * tid & 15 of token rows (tid >> 4) + 8 i */
    const uint4 *wsrc[4];
    int wbytes[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        long r = row0 + (tid >> 2) + 32 * i, rr = r < R ? r : R - 1;
        int m = (rr >= a.r0[1]) + (rr >= a.r0[2]);
        wsrc[i] = (const uint4 *)a.q[m] + (rr - a.r0[m]) * wpr + (tid & 3);
        wbytes[i] = r < R ? 16 : 0; /* rows past the end: zeros */
    }
    const unsigned char *ssrc;
    int sbz;
    {
        long r = row0 + tid, rr = r < R ? r : R - 1;
        int m = (rr >= a.r0[1]) + (rr >= a.r0[2]);
        ssrc = (const unsigned char *)a.sb[m] + (rr - a.r0[m]) * (cols / gs) * esz;
        sbz = r < R ? scp : 0;
    }
    const uint16_t *xsrc[NT];
    uint32_t xoff[NT];
#pragma unroll
    for (int i = 0; i < NT; i++) {
        int xr = (tid >> 4) + 8 * i, ch = tid & 15;
        xsrc[i] = a.x + (long)min(xr, a.n - 1) * cols + ch * 8;
        xoff[i] = (ch >> 3) * (XB / 2) + swz128_off(xr, ch & 7);
    }
    const long kb = (long)blockIdx.y * a.kspan, ke = min(kb + a.kspan, cols);
    const int nk = (int)((ke - kb) / RP_Q4WG_BK);
#define Q4_LOAD_W(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * RP_Q4WG_BK;                                                \
        uint32_t d_ = sb + (slot) * SB + XB;                                                   \
        _Pragma("unroll") for (int i = 0; i < 4; i++)                                          \
            q4_cp_w(d_ + ((tid >> 2) + 32 * i) * 64 + (tid & 3) * 16, wsrc[i] + k_ / 32,       \
                    wbytes[i], pf);                                                            \
        for (int j_ = 0; j_ < sn; j_++)                                                        \
            q4_cp_small(d_ + WB + tid * SR + j_ * scp, ssrc + k_ / gs * esz + j_ * scp, scp,   \
                        sbz);                                                                  \
    } while (0)
#define Q4_LOAD_X(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * RP_Q4WG_BK;                                                \
        uint32_t d_ = sb + (slot) * SB;                                                        \
        _Pragma("unroll") for (int i = 0; i < NT; i++)                                         \
            if ((tid >> 4) + 8 * i < XR)                                                       \
                cp_async16(d_ + xoff[i], xsrc[i] + k_, 16);                                    \
    } while (0)
    /* the weights never change: only x waits for the previous kernel */
    stage_fill<S>(
        nk, [&](int st) { Q4_LOAD_W(st, st); }, [&](int st) { Q4_LOAD_X(st, st); });
    float acc[2][NT][4];
    acc_zero<NT>(acc);
    const int sgi = 32 * t / gs; /* the lane's scale group within the step */
    for (int it = 0; it < nk; it++) {
        cp_async_wait<S - 2>(); /* step it has landed (this thread's copies) */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        /* the previous step's last group read the slot the refill below overwrites */
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();
        int nx = it + S - 1;
        if (nx < nk) {
            Q4_LOAD_W(nx, nx % S);
            Q4_LOAD_X(nx, nx % S);
        }
        cp_async_commit();
        const unsigned char *st = smp + (it % S) * SB;
        const uint32_t xs = sb + (it % S) * SB;
        uint4 wc[2][2];
        __nv_bfloat162 s2[2][2], b2[2][2];
        float sc[2][2], bc[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int r = 64 * mi + 16 * warp + g + 8 * hh;
                wc[mi][hh] = *(const uint4 *)(st + XB + r * 64 + t * 16);
                const unsigned char *sp = st + XB + WB + r * SR + sgi * esz;
                if (F) {
                    float2 v = *(const float2 *)sp;
                    sc[mi][hh] = v.x, bc[mi][hh] = v.y;
                } else {
                    unsigned u = *(const unsigned *)sp;
                    if (sf == RP_CUDA_SB_BF16) {
                        /* the bf16 pair as it is: (scale, bias) = (low, high) halves */
                        s2[mi][hh] = u_bf2((u & 0xffffu) * 0x10001u);
                        b2[mi][hh] = u_bf2((u >> 16) * 0x10001u);
                    } else {
                        __half2 h = *(const __half2 *)&u;
                        float2 v = __half22float2(h);
                        sc[mi][hh] = v.x, bc[mi][hh] = v.y;
                    }
                }
            }
        const bool bfs = !F && sf == RP_CUDA_SB_BF16;
        uint32_t ab[2][2][2][4]; /* [buffer][half][slice h][A registers] */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t r[2][2][4]; /* [half][row g / g + 8][pair] */
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    uint32_t wd = j == 0   ? wc[mi][hh].x
                                  : j == 1 ? wc[mi][hh].y
                                  : j == 2 ? wc[mi][hh].z
                                           : wc[mi][hh].w;
                    if (bfs)
                        deq4(wd, s2[mi][hh], b2[mi][hh], r[mi][hh]);
                    else
                        deq4f(wd, sc[mi][hh], bc[mi][hh], r[mi][hh]);
                }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    ab[j & 1][mi][h][0] = r[mi][0][2 * h];
                    ab[j & 1][mi][h][1] = r[mi][1][2 * h];
                    ab[j & 1][mi][h][2] = r[mi][0][2 * h + 1];
                    ab[j & 1][mi][h][3] = r[mi][1][2 * h + 1];
                }
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int s = 2 * j + h; /* the k16 slice */
                const uint64_t db = q4_desc(xs + (s >> 2) * (XB / 2) + (s & 3) * 32);
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
                    q4_mma<NT>(&acc[mi][0][0], ab[j & 1][mi][h], db);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            /* word j - 1's group is done: its A buffer may be overwritten next */
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    acc_fence<NT>(acc); /* the accumulators are final only now */
#undef Q4_LOAD_W
#undef Q4_LOAD_X
    cp_async_wait<0>();
    /* warp w, half mi: rows 64 mi + 16 w + g (+ 8) of the block */
    skinny_epilogue<NT, RP_Q4WG_BM, C::RS, 128, 1, 16, 64>(acc, a.r0, a.y, a.n, row0,
                                                           (float *)smp);
#endif
}

/* ---- host side ---------------------------------------------------------------------------- */

enum { Q4_DEVS = 16 };
/* per device ordinal: set up, and [token tiles - 1][s] clusters of s blocks resident at once
 * (s = 1: blocks; 0 where the query failed), of the 16-bit-scale kernels */
static int q4_done[Q4_DEVS];
static int q4_cl[Q4_DEVS][8][RP_Q4WG_MAXSPLIT + 1];
static int q4_sms[Q4_DEVS];

static int q4_dev(void)
{
    int d = 0;
    CK(cudaGetDevice(&d));
    return d < Q4_DEVS ? d : Q4_DEVS - 1;
}

int rp_q4wg_usable(void)
{
    int d = 0, ma = 0, mi = 0;
    if (cudaGetDevice(&d) != cudaSuccess ||
        cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ma == 9 && mi == 0 && d < Q4_DEVS;
}

template <int NT, int F> static void q4_attr1(int sms, int *cl)
{
    using C = q4_cfg<NT, F>;
    CK(cudaFuncSetAttribute(q4wg_kernel<NT, F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            C::SMEM));
    if (!cl)
        return;
    int per_sm = 0;
    cl[0] = 0;
    cl[1] = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, q4wg_kernel<NT, F>, 128,
                                                          C::SMEM) == cudaSuccess
                ? per_sm * sms
                : 0;
    for (int s = 2; s <= RP_Q4WG_MAXSPLIT; s++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, s);
        cfg.blockDim = dim3(128);
        cfg.dynamicSmemBytes = C::SMEM;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 1;
        at[0].val.clusterDim.y = s;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int n = 0;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&n, q4wg_kernel<NT, F>, &cfg);
        cl[s] = e == cudaSuccess ? n : 0;
    }
    cudaGetLastError(); /* a failed query leaves no error behind */
}

template <int F> static void q4_attr_f(int sms, int (*cl)[RP_Q4WG_MAXSPLIT + 1])
{
    q4_attr1<1, F>(sms, cl ? cl[0] : NULL);
    q4_attr1<2, F>(sms, cl ? cl[1] : NULL);
    q4_attr1<3, F>(sms, cl ? cl[2] : NULL);
    q4_attr1<4, F>(sms, cl ? cl[3] : NULL);
    q4_attr1<5, F>(sms, cl ? cl[4] : NULL);
    q4_attr1<6, F>(sms, cl ? cl[5] : NULL);
    q4_attr1<7, F>(sms, cl ? cl[6] : NULL);
    q4_attr1<8, F>(sms, cl ? cl[7] : NULL);
}

void rp_q4wg_setup(void)
{
    int d = q4_dev();
    if (q4_done[d])
        return;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
    q4_sms[d] = sms;
    q4_attr_f<0>(sms, q4_cl[d]);
    q4_attr_f<1>(sms, NULL); /* fewer stages, the same 2 blocks per SM */
    if (getenv("RAPID_CUDA_WG_LOG")) /* the table, for tuning */
        for (int t = 0; t < 8; t++) {
            fprintf(stderr, "q4wg GEMM %2d tokens: clusters resident, sizes 1..8:", 8 * t + 8);
            for (int s = 1; s <= RP_Q4WG_MAXSPLIT; s++)
                fprintf(stderr, " %d", q4_cl[d][t][s]);
            fprintf(stderr, "\n");
        }
    q4_done[d] = 1;
}

int rp_q4wg_splits(long rows, long cols, int n, int cap)
{
    int d = q4_dev();
    long rb = (rows + RP_Q4WG_BM - 1) / RP_Q4WG_BM, steps = cols / RP_Q4WG_BK;
    long slots = 2L * q4_sms[d], best = 1, best_cost = -1;
    const int *cl = q4_cl[d][(n + 7) / 8 - 1];
    for (long s = 1; s <= RP_Q4WG_MAXSPLIT && (s == 1 || steps / s >= 4); s++) {
        if (cap > 0 && s > cap)
            break;
        long cp = cl[s] > 0 ? cl[s] : slots / s; /* 0: the query failed */
        long cost = (rb + cp - 1) / cp * ((steps + s - 1) / s);
        if (best_cost < 0 || cost < best_cost)
            best = s, best_cost = cost;
    }
    return (int)best;
}

template <int NT> static void q4_go(const rp_q4wg_args &a, dim3 grid, int pdl, cudaStream_t st)
{
    if (a.sf == RP_CUDA_SB_F32)
        cluster_launch(pdl, q4wg_kernel<NT, 1>, grid, dim3(128), q4_cfg<NT, 1>::SMEM, st, a);
    else
        cluster_launch(pdl, q4wg_kernel<NT, 0>, grid, dim3(128), q4_cfg<NT, 0>::SMEM, st, a);
}

void rp_q4wg_launch(const rp_q4wg_args &a, int pdl, cudaStream_t st)
{
    dim3 grid((unsigned)((a.r0[3] + RP_Q4WG_BM - 1) / RP_Q4WG_BM),
              (unsigned)((a.cols + a.kspan - 1) / a.kspan));
    switch ((a.n + 7) / 8) {
    case 1: q4_go<1>(a, grid, pdl, st); break;
    case 2: q4_go<2>(a, grid, pdl, st); break;
    case 3: q4_go<3>(a, grid, pdl, st); break;
    case 4: q4_go<4>(a, grid, pdl, st); break;
    case 5: q4_go<5>(a, grid, pdl, st); break;
    case 6: q4_go<6>(a, grid, pdl, st); break;
    case 7: q4_go<7>(a, grid, pdl, st); break;
    default: q4_go<8>(a, grid, pdl, st); break;
    }
}
