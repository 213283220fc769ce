/* backend/cpu/x86/qx86_inline.h - small always-inline helpers shared by the quantized x86
 * kernels (kernels_qx86.c decode, kernels_qx86_prefill.c prefill). Internal to those two files;
 * include only from sources compiled with the AVX-512 flags (F16C conversions). */
#ifndef RP_BACKEND_CPU_X86_QX86_INLINE_H
#define RP_BACKEND_CPU_X86_QX86_INLINE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define QX_AI static inline __attribute__((always_inline))

/* An f16 stored at p (any alignment) as f32. */
QX_AI float qx_h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

#endif
