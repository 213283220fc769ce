/* backend/cuda/cuda_common.cuh - what the CUDA translation units share (cuda_kernels.cu,
 * cuda_quant.cu, cuda_wgmma.cu): the CUDA error check, the streaming 16-byte load, and
 * programmatic dependent launch (pdl_launch / pdl_wait), the cluster launch and the epilogue
 * of the staged skinny GEMMs (cluster_launch, skinny_epilogue). Internal to src/backend/cuda;
 * CUDA C++ only.
 *
 * Programmatic dependent launch: a kernel launched through pdl_launch may start while the
 * previous kernel of the stream is still draining; it must call pdl_wait() before it reads
 * anything that kernel wrote (and before it writes anything). The matvec / GEMM kernels
 * issue their first weight loads first: the weights never change, so the ramp of one kernel
 * hides under the tail of the previous one. The kernel after a pdl_launch is a plain launch
 * (it waits for all of it). Errors: a failed CUDA call prints where and aborts (CK).
 */
#ifndef RP_BACKEND_CUDA_COMMON_CUH
#define RP_BACKEND_CUDA_COMMON_CUH

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: CUDA error: %s (%s)\n", __FILE__, __LINE__,                    \
                    cudaGetErrorString(e_), #x);                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* 16 bytes read once: not kept in L1 (weights stream through) */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* cp.async of 16 bytes global -> shared (the L2 path; bytes < 16 zero-fill the rest), its
 * commit, and the wait until at most N of this thread's groups are in flight: the staged
 * GEMMs' pipelines (tc2_kernel, qmm2_kernel, wg_kernel) */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* byte offset of 16-byte chunk ch of row r in a tile of 128-byte rows whose chunks are XOR-
 * swizzled by row (wgmma's 128-byte swizzle; conflict-free ldmatrix) */
__device__ __forceinline__ uint32_t swz128_off(int r, int ch)
{
    return r * 128 + ((ch ^ (r & 7)) << 4);
}

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The staged GEMMs' prologue (tc2_kernel, qmm2_kernel, wg_kernel, q4wg_kernel): the weight
 * copies of the first S - 1 of nk k steps are requested before the programmatic-launch wait
 * (the weights never change), x's after it, one commit group per step (empty past nk, so the
 * main loop's wait counts stay the same). */
template <int S, typename W, typename X>
__device__ __forceinline__ void stage_fill(int nk, W &&load_w, X &&load_x)
{
#pragma unroll
    for (int st = 0; st < S - 1; st++)
        if (st < nk)
            load_w(st);
    pdl_wait();
#pragma unroll
    for (int st = 0; st < S - 1; st++) {
        if (st < nk)
            load_x(st);
        cp_async_commit();
    }
}

/* After wgmma.wait_group 0: ties every accumulator register to this point (an empty asm that
 * reads and writes each), so no later use is moved above the wait (wg_kernel, q4wg_kernel). */
template <int NT> __device__ __forceinline__ void acc_fence(float (&acc)[2][NT][4])
{
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                asm volatile("" : "+f"(acc[mi][nt][e])::"memory");
}

/* The two 16-row tiles x NT 8-token tiles of f32 accumulators those kernels keep, zeroed. */
template <int NT> __device__ __forceinline__ void acc_zero(float (&acc)[2][NT][4])
{
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mi][nt][e] = 0.0f;
}

template <typename... P, typename... A>
static void pdl_launch(int pdl, void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s, A... args)
{
    if (!pdl) {
        k<<<grid, block, 0, s>>>(args...);
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

/* A launch as a programmatic dependent (pdl) of the stream's previous kernel, with smem bytes
 * of dynamic shared memory, its grid's y blocks forming one thread block cluster when
 * grid.y > 1 (the staged skinny GEMMs' split k). */
template <typename... P, typename... A>
static void cluster_launch(int pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                           cudaStream_t s, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int na = 0;
    if (pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    if (grid.y > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = 1;
        at[na].val.clusterDim.y = grid.y;
        at[na].val.clusterDim.z = 1;
        na++;
    }
    cfg.attrs = at;
    cfg.numAttrs = na;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

/* The epilogue of the staged skinny GEMMs (tc2_kernel, qmm2_kernel). Warp w of the block
 * holds rows row0 + 32 w .. + 31 as acc[2][NT][4], m16n8k16 accumulators (element e of tile
 * (mi, nt): row 16 mi + g + 8 (e >> 1), token 8 nt + 2 t + (e & 1), g = lane / 4, t = lane %
 * 4). Rows go to the stacked matrices r0[0..2] (r0[3]: the stack's end) of y, [n][rows] each.
 * One split (gridDim.y == 1): stored straight. Split k over a cluster: every block leaves its
 * tile [tokens][BM] (row stride RS floats) in its shared memory red, then block q sums slice q
 * of all the tiles in rank order (deterministic) through distributed shared memory, VEC
 * consecutive rows at a time (4 needs every matrix's rows and row starts multiples of 4).
 * WS / MS: the block rows of warp w's tile mi start at WS w + MS mi (mma.sync: 32 w + 16 mi;
 * the wgmma kernel, cuda_wgmma.cu, whose warp w holds rows 16 w.. of each 64-row half: 16 w
 * + 64 mi). */
template <int NT, int BM, int RS, int THREADS, int VEC, int WS = 32, int MS = 16>
__device__ __forceinline__ void skinny_epilogue(const float (*acc)[NT][4], const long *r0,
                                                float *const *y, int n, long row0, float *red)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const long R = r0[3];
    if (gridDim.y == 1) {
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                long row = row0 + warp * WS + mi * MS + g + 8 * h;
                if (row >= R)
                    continue;
                int m = (row >= r0[1]) + (row >= r0[2]);
                long rows = r0[m + 1] - r0[m], lrow = row - r0[m];
                float *ym = y[m];
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int tok = nt * 8 + 2 * t + e;
                        if (tok < n)
                            ym[(long)tok * rows + lrow] = acc[mi][nt][2 * h + e];
                    }
            }
        return;
    }
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    __syncthreads(); /* the pipeline's buffers are free */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                red[(nt * 8 + 2 * t + (e & 1)) * RS + warp * WS + mi * MS + g + 8 * (e >> 1)] =
                    acc[mi][nt][e];
    cl.sync();
    const int ns = (int)gridDim.y, q = (int)cl.block_rank();
    const int units = NT * 8 * (BM / VEC); /* VEC-float pieces of the tile */
    const int u0 = q * units / ns, u1 = (q + 1) * units / ns;
    for (int u = u0 + tid; u < u1; u += THREADS) {
        int tok = u / (BM / VEC), rl = (u % (BM / VEC)) * VEC;
        long row = row0 + rl;
        if (tok >= n || row >= R)
            continue;
        int m = (row >= r0[1]) + (row >= r0[2]);
        float *dst = y[m] + (long)tok * (r0[m + 1] - r0[m]) + row - r0[m];
        /* up to 8 ranks' loads in flight at once (not one remote latency each), then summed
         * in rank order */
        if (VEC == 4) {
            float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int j0 = 0; j0 < ns; j0 += 8) {
                float4 v[8];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (j0 + j < ns)
                        v[j] = *(const float4 *)(cl.map_shared_rank(red, j0 + j) + tok * RS + rl);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (j0 + j < ns)
                        s4.x += v[j].x, s4.y += v[j].y, s4.z += v[j].z, s4.w += v[j].w;
            }
            *(float4 *)dst = s4;
        } else {
            float s1 = 0.0f;
            for (int j0 = 0; j0 < ns; j0 += 8) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (j0 + j < ns)
                        v[j] = cl.map_shared_rank(red, j0 + j)[tok * RS + rl];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (j0 + j < ns)
                        s1 += v[j];
            }
            *dst = s1;
        }
    }
    cl.sync(); /* no block leaves while another still reads its shared memory */
}

#endif
