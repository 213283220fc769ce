/* backend/cuda/cuda_stream.cuh - streaming weights into shared memory with the bulk copy
 * engine (cp.async.bulk, sm_90) completing on mbarriers: the helpers the decode matvecs share.
 * Internal to src/backend/cuda; CUDA C++ only. A bulk copy needs 16-byte aligned addresses
 * and a size that is a multiple of 16 (callers check). An mbarrier here is initialised for one
 * arrival: the issuing thread's arrive.expect_tx (the bytes to come), after which the copies'
 * completions finish the phase; waiters spin on the phase parity.
 * Ownership: none (shared-memory addresses of the caller's kernel). Threading: device code.
 * Errors: none reported; a misaligned or out-of-bounds copy faults the kernel.
 */
#ifndef RP_BACKEND_CUDA_STREAM_CUH
#define RP_BACKEND_CUDA_STREAM_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
#endif
}

/* makes the initialised barriers visible to the copy engine */
__device__ __forceinline__ void mbar_init_fence()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

__device__ __forceinline__ void mbar_expect(uint64_t *bar, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes,
                                          uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
#endif
}

#endif
