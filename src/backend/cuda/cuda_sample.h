/* backend/cuda/cuda_sample.h - the draw of backend/sample.h on the GPU (cuda_sample.cu).
 * Internal to src/backend/cuda: cuda_kernels.cu's rp_cuda_sample stages the rows' parameters,
 * calls this on its stream and copies the ids back.
 * Ownership: device pointers of the caller. Threading: one stream. Errors: launch errors are
 * the caller's to check (cudaGetLastError).
 */
#ifndef RP_BACKEND_CUDA_SAMPLE_H
#define RP_BACKEND_CUDA_SAMPLE_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/sample.h"

/* out[r] (device) = rp_sample_draw of row r of x [n_rows][n] under p[r] (device), or -1 for
 * a row that needs a sorted prefix longer than RP_SAMPLE_MAX_SORTED. */
void rp_cuda_sample_launch(cudaStream_t s, const float *x, int n_rows, long n,
                           const rp_sample_row *p, int32_t *out);

#endif
