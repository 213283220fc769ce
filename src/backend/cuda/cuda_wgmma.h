/* backend/cuda/cuda_wgmma.h - the batched-decode skinny GEMM on Hopper's warpgroup MMA
 * (wgmma, sm_90a), cuda_wgmma.cu: y[m] = x W[m]^T for up to three 16-bit (bf16 / f16)
 * matrices stacked over the same x, 5..64 tokens (issue #12's 64-stream decode).
 *
 * The same contract as cuda_kernels.cu's staged kernel (tc2_kernel), which it replaces on
 * sm_90 devices (RAPID_CUDA_WG=0 restores tc2): x is the 16-bit copy [n][cols] the caller
 * rounded; y[m] is f32 [n][rows of m], written (not accumulated); every matrix's rows a
 * multiple of 16, cols a multiple of 64, weights 16-byte aligned. Blocks of RP_WG_BM (or twice
 * that) stacked rows; grid.y > 1 splits k into a thread block cluster of grid.y blocks (<= 8)
 * that sums its splits in rank order through distributed shared memory (deterministic: the
 * same summation order every call, no atomics).
 *
 * Ownership: nothing here owns memory. Threading: the caller's stream. Errors: a failed
 * launch aborts (CK). The kernels exist only in sm_90a machine code: call rp_cuda_wg_launch
 * only on a compute capability 9.0 device (other targets compile them empty).
 * CUDA C++ only (included by cuda_kernels.cu).
 */
#ifndef RP_BACKEND_CUDA_WGMMA_H
#define RP_BACKEND_CUDA_WGMMA_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

enum { RP_WG_BM = 128, RP_WG_BK = 64, RP_WG_MAXSPLIT = 8 };

typedef struct rp_wg_args {
    const uint16_t *w[3]; /* row-major [rows][cols] */
    float *y[3];          /* [n][rows] */
    long r0[4];           /* stacked row starts; r0[3] the total; unused entries repeat it */
    long cols;
    const uint16_t *x; /* [n][cols] */
    int n;             /* 1..64 tokens */
    long kspan;        /* columns per split: a multiple of RP_WG_BK */
} rp_wg_args;

/* g: warpgroups per block, 1 (RP_WG_BM = 128 rows, 2 blocks per SM) or 2 (256 rows sharing
 * each x tile, 1 block per SM). Raises the g kernels' dynamic shared-memory limits (once per
 * device, before a launch) and fills cl[t][s] (s = 1..RP_WG_MAXSPLIT) with how many clusters
 * of s blocks of the 8 (t + 1)-token kernel are resident on the device's sms multiprocessors
 * at once (s = 1: blocks; 0 where the occupancy query fails). RAPID_CUDA_WG_LOG set: the
 * table goes to stderr. */
void rp_cuda_wg_setup(int g, int sms, int (*cl)[RP_WG_MAXSPLIT + 1]);
/* One launch of the g kernels: row_blocks (of 128 g rows) x splits blocks (splits =
 * ceil(cols / kspan), <= RP_WG_MAXSPLIT); dt RP_CUDA_BF16 or RP_CUDA_F16; pdl: as a
 * programmatic dependent of the stream's previous kernel (the first weight tiles are
 * requested before waiting for it). */
void rp_cuda_wg_launch(const rp_wg_args &a, int dt, int g, unsigned row_blocks, unsigned splits,
                       int pdl, cudaStream_t st);

#endif
