/* backend/cuda/cuda_kv.cuh - reading and writing the paged KV pool in its stored type (f32,
 * bf16 or f16), shared by the KV store, the prefill attention (cuda_kernels.cu) and the decode
 * attention (cuda_decode.cu). Internal to src/backend/cuda; CUDA C++ only.
 *
 * Why 16-bit rows: at 64 streams of a 512-token prompt the decode attention reads every
 * cached key and value each step, ~9.7 GB a step in f32 for a Llama-3-8B shape, more than the
 * bf16 weights' 16 GB over 1.6 steps; bf16 / f16 halve it. Values are rounded to nearest
 * even on store (as the host codec rp_kv_row_store does) and widened to f32 on load, so all
 * arithmetic stays f32.
 *
 * Addresses are element offsets from kv.base (rp_cuda_kv counts its strides in elements):
 * kv_off gives the start of the K (v = 0) or V (v = 1) half of (layer, position)'s block, to
 * which the caller adds (pos % block_tokens) * kv_dim + head * head_dim + element.
 * The hot kernels take the type as a template argument DT (kv_load4 / kv_raw4); the fallback
 * kernels and the stores switch on kv.dt per element (kv_get / kv_put). Four-element loads
 * need the element offset to be a multiple of 4 (16 bytes of f32, 8 of a 16-bit type).
 */
#ifndef RP_BACKEND_CUDA_KV_CUH
#define RP_BACKEND_CUDA_KV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

/* Element offset of the K (v = 0) or V (v = 1) half of cache layer `layer` in the block
 * holding position pos of the sequence whose block table starts at tbl[tbl0]. */
__device__ __forceinline__ long kv_off(const rp_cuda_kv &kv, const int32_t *tbl, int tbl0,
                                       int layer, int v, int pos)
{
    long blk = tbl[tbl0 + pos / kv.block_tokens];
    return blk * kv.block_elems + (long)(2 * layer + v) * kv.half_elems;
}

/* Four elements as they sit in memory: one 16-byte load (f32) or one 8-byte load. */
template <int DT> struct kv_raw4_t {
    typedef uint2 T;
};
template <> struct kv_raw4_t<RP_CUDA_F32> {
    typedef float4 T;
};

template <int DT>
__device__ __forceinline__ typename kv_raw4_t<DT>::T kv_raw4(const void *base, long e)
{
    return *((const typename kv_raw4_t<DT>::T *)base + e / 4);
}

template <int DT> __device__ __forceinline__ float4 kv_widen4(typename kv_raw4_t<DT>::T r);
template <> __device__ __forceinline__ float4 kv_widen4<RP_CUDA_F32>(float4 r) { return r; }
template <> __device__ __forceinline__ float4 kv_widen4<RP_CUDA_BF16>(uint2 r)
{
    /* a bf16 is the top half of its f32 */
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u),
                       __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xffff0000u));
}
template <> __device__ __forceinline__ float4 kv_widen4<RP_CUDA_F16>(uint2 r)
{
    float2 a = __half22float2(*(const __half2 *)&r.x), b = __half22float2(*(const __half2 *)&r.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

template <int DT> __device__ __forceinline__ float4 kv_load4(const void *base, long e)
{
    return kv_widen4<DT>(kv_raw4<DT>(base, e));
}

/* One element, the type read at run time (fallback kernels, stores). */
__device__ __forceinline__ float kv_get(const rp_cuda_kv &kv, long e)
{
    if (kv.dt == RP_CUDA_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)kv.base)[e]);
    if (kv.dt == RP_CUDA_F16)
        return __half2float(((const __half *)kv.base)[e]);
    return ((const float *)kv.base)[e];
}

__device__ __forceinline__ void kv_put(const rp_cuda_kv &kv, long e, float x)
{
    if (kv.dt == RP_CUDA_BF16)
        ((__nv_bfloat16 *)kv.base)[e] = __float2bfloat16_rn(x);
    else if (kv.dt == RP_CUDA_F16)
        ((__half *)kv.base)[e] = __float2half_rn(x);
    else
        ((float *)kv.base)[e] = x;
}

/* Runs the statement given (naming KDT: a kernel launch) with the constexpr int KDT set to the
 * pool's stored type dt. */
#define KV_DISPATCH(dt, ...)                                                                   \
    do {                                                                                       \
        if ((dt) == RP_CUDA_BF16) {                                                            \
            constexpr int KDT = RP_CUDA_BF16;                                                  \
            __VA_ARGS__;                                                                       \
        } else if ((dt) == RP_CUDA_F16) {                                                      \
            constexpr int KDT = RP_CUDA_F16;                                                   \
            __VA_ARGS__;                                                                       \
        } else {                                                                               \
            constexpr int KDT = RP_CUDA_F32;                                                   \
            __VA_ARGS__;                                                                       \
        }                                                                                      \
    } while (0)

#endif
