/* backend/cuda/cuda_common.cuh - what the CUDA translation units share (cuda_kernels.cu,
 * cuda_quant.cu): the CUDA error check, the streaming 16-byte load, and programmatic
 * dependent launch (pdl_launch / pdl_wait). Internal to src/backend/cuda; CUDA C++ only.
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

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
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

#endif
