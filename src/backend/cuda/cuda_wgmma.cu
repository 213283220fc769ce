/* backend/cuda/cuda_wgmma.cu - the batched-decode skinny GEMM on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a machine code only), contract in cuda_wgmma.h.
 *
 * Design:
 *  1. A block is one warpgroup (4 warps, 128 threads) owning RP_WG_BM = 128 stacked rows
 *     against every token of the step (N = 8 NT tokens, NT = ceil(n / 8); the pad tokens
 *     repeat the last one and are not stored). Each 64-wide k step, the weights [128][64]
 *     (16 KB) and x [8 NT][64] go global -> shared memory by cp.async (STAGES - 1 steps in
 *     flight ahead of the one being multiplied, as cuda_kernels.cu's tc2_kernel; the bytes in
 *     flight cost no registers), rows of 128 bytes whose 16-byte chunk c of row r sits at
 *     chunk c ^ (r & 7). That is exactly wgmma's 128-byte swizzle of a K-major operand when a
 *     tile starts on a 1024-byte boundary (the swizzle XORs address bits 4-6 with bits
 *     7-9), so both operands are read by the tensor cores straight from those tiles: A = the
 *     weight tile (two m64 halves), B = x (K-major, i.e. [token][k]); the descriptors carry
 *     the start address, the stride between 8-row groups (1024 bytes) and the 128-byte swizzle
 *     mode; each k16 slice starts 32 bytes further into the rows (the hardware applies the
 *     swizzle to the final addresses).
 *  2. Per step: wait for this thread's copies of the step, fence.proxy.async (cp.async writes
 *     are generic-proxy writes, wgmma reads through the async proxy), a block barrier, the
 *     copies of step + STAGES - 1 into the slot freed by the previous step, then 8
 *     wgmma.mma_async m64nNk16 (2 halves x 4 k16 slices, f32 accumulators in registers: N / 2
 *     per thread per half), committed and waited for before the next step (the weights still
 *     stream: STAGES - 1 steps of copies stay in flight meanwhile). One instruction per 64 x
 *     N x 16 product instead of the mma.sync kernel's ldmatrix + 8 MMAs per warp: the issue
 *     limit of tc2 at 64 tokens is gone.
 *  3. Stages by NT: as many 16 KB + NT KB stages as fit in 110 KB (at most 8; 4 at 64
 *     tokens, 6 at <= 16), 2 blocks per SM. G = 2 (RAPID_CUDA_WG_BM=256, opt-in): two
 *     warpgroups share each stage's x tile over 256 rows (warpgroup g takes the halves g and
 *     g + 2), stages in 220 KB, 1 block per SM; measured slower than G = 1 (NOTES.md,
 *     session 6).
 *  4. Split k and the epilogue: cuda_common.cuh's skinny_epilogue (the same as tc2's; the
 *     wgmma accumulator of warp w, half h holds rows 64 G h + 16 w + g, + 8, in the m16n8
 *     layout): one split stores y directly; a cluster of grid.y splits sums its tiles in rank
 *     order through distributed shared memory (deterministic). How many splits the caller
 *     asks for (cuda_kernels.cu, wg_split) comes from the clusters that fit on the GPU at once
 *     (rp_cuda_wg_setup's table: on the H200, 30 clusters of 8, 32 of 7, 47 of 5), so a split
 *     never spills a few clusters into a second wave.
 *  5. The weights of the first STAGES - 1 steps are requested before the programmatic
 *     dependent launch wait, x's after it.
 * The compute_90 PTX pass (for newer GPUs) has no wgmma: there the kernels are empty and the
 * caller (cuda_kernels.cu) keeps tc2_kernel.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_wgmma.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#else
#define WG_ON 0
#endif

/* the kernel of G warpgroups (G = 1: 128 rows, 2 blocks per SM; G = 2: 256 rows sharing
 * each x tile, 1 block per SM) for 8 NT tokens: threads, rows, the weight tile's bytes, the
 * epilogue's row stride, the stage (weights plus 8 NT rows of x), stages in 110 (G = 2: 220)
 * KB, shared memory with the 1024-byte alignment */
template <int G, int NT> struct wg_cfg {
    static constexpr int THREADS = 128 * G, BM = RP_WG_BM * G, WB = BM * 128, RS = BM + 4;
    static constexpr int SB = WB + NT * 1024;
    static constexpr int S0 = (110 * 1024 * G) / SB;
    static constexpr int STAGES = S0 > 8 ? 8 : S0;
    static constexpr int SMEM = STAGES * SB + 1024;
};


/* wgmma shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes
 * apart (stride byte offset 64 x 16), leading byte offset unused (1), base offset 0 */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

/* d[N / 2] += A (64 x 16, descriptor da) x B (16 x N, descriptor db), N = 8 NT */
/* wgmma.mma_async m64nNk16 (N = 8 NT) with f32 accumulators d[0 .. 4 NT), A and B by
 * shared-memory descriptor, element type T ("bf16" or "f16"): one macro per N, because the
 * accumulator list is part of the instruction's text. */
#define WG_MMA_1(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32." T "." T " "                          \
                 "{%0, %1, %2, %3}, "                                                              \
                 "%4, %5, p, 1, 1, 0, 0;\n}\n"                                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_2(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, "                                              \
                 "%8, %9, p, 1, 1, 0, 0;\n}\n"                                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7])                                                          \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_3(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n24k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "                            \
                 "%12, %13, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])        \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_4(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "        \
                 "%16, %17, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                              \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_5(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n40k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19}, "                                                           \
                 "%20, %21, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19])                                                        \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_6(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23}, "                                       \
                 "%24, %25, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])    \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_7(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n56k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27}, "                   \
                 "%28, %29, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])                              \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")
#define WG_MMA_8(T)                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " "                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "          \
                 "%30, %31}, "                                                                     \
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),   \
                   "+f"(d[30]), "+f"(d[31])                                                        \
                 : "l"(da), "l"(db)                                                                \
                 : "memory")

template <int DT, int NT> __device__ __forceinline__ void wg_mma(float *d, uint64_t da, uint64_t db)
{
    static_assert(DT == RP_CUDA_BF16 || DT == RP_CUDA_F16, "16-bit weights only");
    static_assert(NT >= 1 && NT <= 8, "8 to 64 tokens");
#define WG_MMA_T(M)                                                                                \
    do {                                                                                           \
        if constexpr (DT == RP_CUDA_BF16)                                                          \
            M("bf16");                                                                             \
        else                                                                                       \
            M("f16");                                                                              \
    } while (0)
    if constexpr (NT == 1)
        WG_MMA_T(WG_MMA_1);
    else if constexpr (NT == 2)
        WG_MMA_T(WG_MMA_2);
    else if constexpr (NT == 3)
        WG_MMA_T(WG_MMA_3);
    else if constexpr (NT == 4)
        WG_MMA_T(WG_MMA_4);
    else if constexpr (NT == 5)
        WG_MMA_T(WG_MMA_5);
    else if constexpr (NT == 6)
        WG_MMA_T(WG_MMA_6);
    else if constexpr (NT == 7)
        WG_MMA_T(WG_MMA_7);
    else
        WG_MMA_T(WG_MMA_8);
#undef WG_MMA_T
}

template <int DT, int G, int NT>
__global__ void __launch_bounds__(128 * G, 3 - G) wg_kernel(const rp_wg_args a)
{
#if WG_ON
    extern __shared__ __align__(1024) unsigned char wg_sm[];
    using C = wg_cfg<G, NT>;
    constexpr int S = C::STAGES, SB = C::SB, WB = C::WB, XR = NT * 8, LR = 16 * G,
                  XI = (XR + LR - 1) / LR;
    /* the dynamic shared memory's start, rounded up to the swizzle's 1024-byte period (the
     * same offset in every block of the cluster: the epilogue's tiles line up) */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(wg_sm);
    unsigned char *smp = wg_sm + ((1024u - (raw & 1023u)) & 1023u);
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(smp);
    const int tid = threadIdx.x, lc = tid & 7, lr = tid >> 3;
    const long R = a.r0[3], cols = a.cols, row0 = (long)blockIdx.x * C::BM;
    /* loader: thread tid copies chunk lc of rows lr + LR i (weights) and of tokens lr + LR i */
    const uint16_t *wsrc[8];
    int wbytes[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        long r = row0 + lr + LR * i, rr = r < R ? r : R - 1;
        int m = (rr >= a.r0[1]) + (rr >= a.r0[2]);
        wsrc[i] = a.w[m] + (rr - a.r0[m]) * cols + lc * 8;
        wbytes[i] = r < R ? 16 : 0; /* rows past the end: zeros */
    }
    const uint16_t *xsrc[XI];
#pragma unroll
    for (int i = 0; i < XI; i++)
        xsrc[i] = a.x + (long)min(lr + LR * i, a.n - 1) * cols + lc * 8;
    const long kb = (long)blockIdx.y * a.kspan, ke = min(kb + a.kspan, cols);
    const int nk = (int)((ke - kb) / RP_WG_BK);
#define WG_LOAD_W(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * RP_WG_BK;                                                  \
        uint32_t d_ = sb + (slot) * SB;                                                        \
        _Pragma("unroll") for (int i = 0; i < 8; i++)                                          \
            cp_async16(d_ + swz128_off(lr + LR * i, lc), wsrc[i] + k_, wbytes[i]);             \
    } while (0)
#define WG_LOAD_X(st, slot)                                                                    \
    do {                                                                                       \
        long k_ = kb + (long)(st) * RP_WG_BK;                                                  \
        uint32_t d_ = sb + (slot) * SB + WB;                                                   \
        _Pragma("unroll") for (int i = 0; i < XI; i++)                                         \
            if (lr + LR * i < XR)                                                              \
                cp_async16(d_ + swz128_off(lr + LR * i, lc), xsrc[i] + k_, 16);                \
    } while (0)
    /* the weights never change: only x waits for the previous kernel */
    stage_fill<S>(
        nk, [&](int st) { WG_LOAD_W(st, st); }, [&](int st) { WG_LOAD_X(st, st); });
    float acc[2][NT][4];
    acc_zero<NT>(acc);
    for (int it = 0; it < nk; it++) {
        cp_async_wait<S - 2>(); /* step it has landed (this thread's copies) */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads(); /* everyone's; and step it - 1's wgmma are done (waited for below) */
        int nx = it + S - 1;
        if (nx < nk) {
            WG_LOAD_W(nx, nx % S);
            WG_LOAD_X(nx, nx % S);
        }
        cp_async_commit();
        /* warpgroup g multiplies the 64-row halves g and g + G of the tile */
        const uint32_t ws = sb + (it % S) * SB + (tid >> 7) * 8192, xs = sb + (it % S) * SB + WB;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < RP_WG_BK / 16; kk++)
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
                wg_mma<DT, NT>(&acc[mi][0][0], wg_desc(ws + mi * G * 8192 + kk * 32),
                               wg_desc(xs + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        acc_fence<NT>(acc); /* the accumulators are final only now */
    }
#undef WG_LOAD_W
#undef WG_LOAD_X
    cp_async_wait<0>();
    /* warp w (of warpgroup w / 4), half mi: rows 64 G mi + 16 w + g (+ 8) of the block */
    skinny_epilogue<NT, C::BM, C::RS, C::THREADS, 4, 16, 64 * G>(acc, a.r0, a.y, a.n, row0,
                                                                 (float *)smp);
#endif
}

/* the limit raised; cl[s] = clusters of s blocks (s = 1: blocks) resident on the GPU at once,
 * 0 where the query fails */
template <int DT, int G, int NT> static void wg_attr1(int sms, int *cl)
{
    using C = wg_cfg<G, NT>;
    CK(cudaFuncSetAttribute(wg_kernel<DT, G, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            C::SMEM));
    if (!cl)
        return;
    int per_sm = 0;
    cl[0] = 0;
    cl[1] = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wg_kernel<DT, G, NT>,
                                                          C::THREADS, C::SMEM) == cudaSuccess
                ? per_sm * sms
                : 0;
    for (int s = 2; s <= RP_WG_MAXSPLIT; s++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, s);
        cfg.blockDim = dim3(C::THREADS);
        cfg.dynamicSmemBytes = C::SMEM;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 1;
        at[0].val.clusterDim.y = s;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int n = 0;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&n, wg_kernel<DT, G, NT>, &cfg);
        cl[s] = e == cudaSuccess ? n : 0;
    }
    cudaGetLastError(); /* a failed query leaves no error behind */
}

template <int DT, int G> static void wg_attr_dt(int sms, int (*cl)[RP_WG_MAXSPLIT + 1])
{
    wg_attr1<DT, G, 1>(sms, cl ? cl[0] : NULL);
    wg_attr1<DT, G, 2>(sms, cl ? cl[1] : NULL);
    wg_attr1<DT, G, 3>(sms, cl ? cl[2] : NULL);
    wg_attr1<DT, G, 4>(sms, cl ? cl[3] : NULL);
    wg_attr1<DT, G, 5>(sms, cl ? cl[4] : NULL);
    wg_attr1<DT, G, 6>(sms, cl ? cl[5] : NULL);
    wg_attr1<DT, G, 7>(sms, cl ? cl[6] : NULL);
    wg_attr1<DT, G, 8>(sms, cl ? cl[7] : NULL);
}

void rp_cuda_wg_setup(int g, int sms, int (*cl)[RP_WG_MAXSPLIT + 1])
{
    if (g == 2) {
        wg_attr_dt<RP_CUDA_BF16, 2>(sms, cl); /* the f16 kernels take the same resources */
        wg_attr_dt<RP_CUDA_F16, 2>(sms, NULL);
    } else {
        wg_attr_dt<RP_CUDA_BF16, 1>(sms, cl);
        wg_attr_dt<RP_CUDA_F16, 1>(sms, NULL);
    }
    if (getenv("RAPID_CUDA_WG_LOG")) /* the table, for tuning */
        for (int t = 0; t < 8; t++) {
            fprintf(stderr, "wgmma GEMM %d rows, %2d tokens: clusters resident, sizes 1..8:",
                    128 * g, 8 * t + 8);
            for (int s = 1; s <= RP_WG_MAXSPLIT; s++)
                fprintf(stderr, " %d", cl[t][s]);
            fprintf(stderr, "\n");
        }
}

template <int DT, int G, int NT>
static void wg_go(int pdl, dim3 grid, cudaStream_t st, const rp_wg_args &a)
{
    using C = wg_cfg<G, NT>;
    cluster_launch(pdl, wg_kernel<DT, G, NT>, grid, dim3(C::THREADS), C::SMEM, st, a);
}

template <int DT, int G>
static void wg_launch_dt(int pdl, dim3 grid, cudaStream_t st, const rp_wg_args &a)
{
    switch ((a.n + 7) / 8) {
    case 1: wg_go<DT, G, 1>(pdl, grid, st, a); break;
    case 2: wg_go<DT, G, 2>(pdl, grid, st, a); break;
    case 3: wg_go<DT, G, 3>(pdl, grid, st, a); break;
    case 4: wg_go<DT, G, 4>(pdl, grid, st, a); break;
    case 5: wg_go<DT, G, 5>(pdl, grid, st, a); break;
    case 6: wg_go<DT, G, 6>(pdl, grid, st, a); break;
    case 7: wg_go<DT, G, 7>(pdl, grid, st, a); break;
    default: wg_go<DT, G, 8>(pdl, grid, st, a); break;
    }
}

void rp_cuda_wg_launch(const rp_wg_args &a, int dt, int g, unsigned row_blocks, unsigned splits,
                       int pdl, cudaStream_t st)
{
    dim3 grid(row_blocks, splits);
    if (g == 2) {
        if (dt == RP_CUDA_BF16)
            wg_launch_dt<RP_CUDA_BF16, 2>(pdl, grid, st, a);
        else
            wg_launch_dt<RP_CUDA_F16, 2>(pdl, grid, st, a);
    } else if (dt == RP_CUDA_BF16) {
        wg_launch_dt<RP_CUDA_BF16, 1>(pdl, grid, st, a);
    } else {
        wg_launch_dt<RP_CUDA_F16, 1>(pdl, grid, st, a);
    }
}
