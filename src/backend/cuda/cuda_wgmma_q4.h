/* backend/cuda/cuda_wgmma_q4.h - the batched-decode GEMM of MLX 4-bit weights on Hopper's
 * warpgroup MMA (wgmma, sm_90a), cuda_wgmma_q4.cu: y[m] = x W[m]^T for up to three 4-bit
 * matrices stacked over the same x, 5..64 tokens (issue #12's 64-stream decode).
 *
 * The contract of cuda_quant.cu's qmm2_kernel, which it replaces where it runs
 * (RAPID_CUDA_Q4WG=N tokens and up, cuda_quant.cu): weights MLX affine 4-bit (8 elements a
 * little-endian u32, element i at nibble i), (scale, bias) per group of gs = 32 / 64 / 128
 * elements as bf16, f16 or f32 pairs (sf: RP_CUDA_SB_*); every element dequantized to bf16 as
 * qmm2 rounds it (bf16 scales: one bf16 fma; f16 / f32 scales: an f32 fma, then rounded), so
 * the results equal qmm2's up to the f32 summation order. x is the bf16 copy [n][cols] made
 * by cuda_quant.cu's qx_bf16_kernel in its "q4wg" order (each 128 elements permuted so that
 * 16-element slice s holds the k indices the kernel's register-held weights pair them with;
 * rp_q4wg_xorder). y[m] is f32 [n][rows of m], written (not accumulated). cols a multiple of
 * 128, every matrix's rows a multiple of 16 when more than one is stacked, words and scales
 * 16- and 4-byte aligned. Blocks of RP_Q4WG_BM stacked rows; grid.y > 1 splits k into a
 * thread block cluster of grid.y blocks (<= RP_Q4WG_MAXSPLIT) that sums its splits in rank
 * order through distributed shared memory (deterministic: the same order every call).
 *
 * Ownership: nothing here owns memory. Threading: the caller's stream; rp_q4wg_setup once per
 * device before the first launch (its table is kept per device ordinal, written once).
 * Errors: a failed launch aborts (CK). The kernels exist only in sm_90a machine code:
 * rp_q4wg_usable says whether the current device can run them (other targets compile them
 * empty). CUDA C++ only (included by cuda_quant.cu).
 */
#ifndef RP_BACKEND_CUDA_WGMMA_Q4_H
#define RP_BACKEND_CUDA_WGMMA_Q4_H

#include <cuda_runtime.h>
#include <stdint.h>

enum { RP_Q4WG_BM = 128, RP_Q4WG_BK = 128, RP_Q4WG_MAXSPLIT = 8 };

typedef struct rp_q4wg_args {
    const uint32_t *q[3]; /* packed words, row-major [rows][cols / 8] */
    const void *sb[3];    /* (scale, bias) pairs, [rows][cols / gs] */
    float *y[3];          /* [n][rows] */
    long r0[4];           /* stacked row starts; r0[3] the total; unused entries repeat it */
    long cols;
    int gs, sf;
    const uint16_t *x; /* [n][cols] bf16 in the q4wg order */
    int n;             /* 1..64 tokens */
    long kspan;        /* columns per split: a multiple of RP_Q4WG_BK */
    int pf;            /* the weight copies' L2 prefetch: 0 none, 1 128 bytes, 2 256 bytes */
} rp_q4wg_args;

/* 1 when the current device is compute capability 9.0 (the sm_90a code runs there). */
int rp_q4wg_usable(void);
/* Raises the kernels' shared-memory limits on the current device and reads how many thread
 * block clusters fit on it at once (first call per device; later calls return at once). */
void rp_q4wg_setup(void);
/* How many k splits (1..RP_Q4WG_MAXSPLIT) a launch of rows stacked rows, cols columns and n
 * tokens takes on the current device (rp_q4wg_setup first): the split s of at least 4 k steps
 * each that minimises waves x k steps per block, waves = ceil(row blocks / clusters of s
 * resident at once), ties to the smaller s (cuda_kernels.cu's wg_split rule). cap > 0: at
 * most cap splits. */
int rp_q4wg_splits(long rows, long cols, int n, int cap);
/* One launch: ceil(r0[3] / RP_Q4WG_BM) row blocks x ceil(cols / kspan) splits; pdl: as a
 * programmatic dependent of the stream's previous kernel (the first weight tiles are
 * requested before waiting for it). */
void rp_q4wg_launch(const rp_q4wg_args &a, int pdl, cudaStream_t st);

/* Where x element e (0..127) of each 128-element block goes in the q4wg order: position
 * 16 s + c of slice s = 2 j + h (j, h: the weight word and pair half of the step, see
 * cuda_wgmma_q4.cu) and column c, lane quad t = (c & 7) / 2: element 32 t + 8 j + 2 h +
 * (c >> 3) + 4 (c & 1). Returns the element stored at position p. */
__host__ __device__ __forceinline__ int rp_q4wg_xorder(int p)
{
    int s = p >> 4, c = p & 15, j = s >> 1, h = s & 1, t = (c & 7) >> 1;
    return 32 * t + 8 * j + 2 * h + (c >> 3) + 4 * (c & 1);
}

#endif
