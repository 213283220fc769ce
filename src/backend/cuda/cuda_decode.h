/* backend/cuda/cuda_decode.h - decode attention over the paged KV pool (cuda_decode.cu), rows
 * stored as f32, bf16 or f16 (cuda_kv.cuh).
 *
 * For steps the flash prefill kernel does not take (decode, engine batches of <= 64 tokens,
 * the fixtures' short prompts): a flash-decoding split over the keys. A block of DA_WARPS
 * warps takes (group of G query heads sharing one KV head, query token, split of the token's
 * keys); each warp loads the K and V rows of 8 keys' worth of 16-byte pieces per lane at
 * once (lanes of a key group share one row: D / 4 pieces over the next power of two lanes),
 * keeps q (times the scale) in registers, and runs an online softmax in f32 (expf) over its
 * keys; the block's warps merge in shared memory, and with more than one split the splits'
 * (max, sum, acc) partials are merged in split order (deterministic): by the last block of
 * each (head group, token) to finish (an atomic counter per pair, cnt), or with cnt NULL by
 * a second kernel.
 * Arithmetic is plain f32 on K and V as stored (no rounding of q or P).
 *
 * Ownership: part is scratch the caller owns (n_tok * H * n_split * (D + 2) floats); so is
 * cnt (n_tok * H / G counters, zero before the first launch; each launch leaves them zero).
 * Threading: the caller's stream. Errors: a failed launch aborts (CK); shapes the kernel
 * lacks are refused by rp_cuda_dec_ok (the caller keeps its own kernel for them).
 * CUDA C++ only (included by cuda_kernels.cu).
 */
#ifndef RP_BACKEND_CUDA_DECODE_H
#define RP_BACKEND_CUDA_DECODE_H

#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.h"

/* Whether head size D with G heads per block runs here (D in 8, 16, 24, 32, 64, 128, 256;
 * G in 1, 2, 4, 8; rows 16-byte aligned). */
int rp_cuda_dec_ok(int D, int G, const rp_cuda_kv *kv);
/* Splits for a step of n_tok tokens whose longest key span is span, with `units` = n_tok *
 * H / G blocks per split, on a GPU of sms multiprocessors, for the pool's type dt, and the
 * loads a lane keeps in flight (*loads: 8, or 4 for heads of 64+). mode (RAPID_CUDA_DA):
 * 0 (default) the grid in one wave of resident blocks (cudaOccupancy...), with the 4-load
 * kernel where the 8-load one's units alone would not fit; 1 the first rule (about 4 blocks
 * per SM, rounded up; 8 loads); 2 one wave with 8 loads; 3 one wave with 4 loads. */
void rp_cuda_dec_plan(int D, int G, int dt, int mode, int span, long units, int sms,
                      int *n_split, int *per_split, int *loads);
/* Launches the attention (and, for n_split > 1 without cnt, the merge) on st; pdl: as
 * programmatic dependent launches (each kernel waits for its predecessor before it reads
 * what it wrote). pre: every token is its sequence's only one in this step (the keys before
 * each token's position were stored by earlier steps, so they may load before the wait). */
void rp_cuda_dec_attn(cudaStream_t st, int pdl, const rp_cuda_tok *toks, const int32_t *tbl,
                      rp_cuda_kv kv, int layer, const float *q, float *out, float *part, int H,
                      int KVH, int D, int G, float scale, int window, int n_tok, int n_split,
                      int per_split, unsigned *cnt, int pre, int loads);

#endif
