/* backend/cuda/cuda_deq4.cuh - MLX affine 4-bit weights dequantized to bf16 pairs for the
 * tensor cores, shared by the kernels that multiply them on mma / wgmma (qmm_kernel,
 * qmm2_kernel and qdeq_kernel in cuda_quant.cu, q4wg_kernel in cuda_wgmma_q4.cu), so that
 * every path rounds a weight the same way. Internal to src/backend/cuda; CUDA C++ only.
 *
 * A packed word holds 8 nibbles; pair p of the result is the nibbles (p, p + 4) (the masks
 * 0x000F000F << 4p), which is why the kernels' x copies store each 8 elements in that order.
 */
#ifndef RP_BACKEND_CUDA_DEQ4_CUH
#define RP_BACKEND_CUDA_DEQ4_CUH

#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t bf2_u(__nv_bfloat162 v) { return *(uint32_t *)&v; }
__device__ __forceinline__ __nv_bfloat162 u_bf2(uint32_t u) { return *(__nv_bfloat162 *)&u; }

/* bf16 scales: q | 0x4300 is the bf16 128 + q; minus 128 exactly, then one bf16 fma with the
 * group's scale and bias: the 4 pairs scale * q + bias. */
__device__ __forceinline__ void deq4(uint32_t wd, __nv_bfloat162 s2, __nv_bfloat162 b2,
                                     uint32_t *r)
{
    const __nv_bfloat162 c128 = u_bf2(0x43004300u);
#pragma unroll
    for (int p = 0; p < 4; p++) {
        uint32_t t = ((wd >> (4 * p)) & 0x000F000Fu) | 0x43004300u;
        r[p] = bf2_u(__hfma2(__hsub2(u_bf2(t), c128), s2, b2));
    }
}

/* deq4 with the fma in f32 (f32 / f16 scales, which bf16 would round): the same pairs. */
__device__ __forceinline__ void deq4f(uint32_t wd, float s, float b, uint32_t *r)
{
#pragma unroll
    for (int p = 0; p < 4; p++) {
        float lo = (float)((wd >> (4 * p)) & 15u), hi = (float)((wd >> (4 * p + 16)) & 15u);
        r[p] = bf2_u(__floats2bfloat162_rn(fmaf(lo, s, b), fmaf(hi, s, b)));
    }
}

#endif
