/* model/quantize.h - writing MLX-layout quantized checkpoints (`rapid quantize`), and the
 * small safetensors writer it uses (tests use it too).
 *
 * rp_quantize_dir reads a bf16/f16/f32 Hugging Face checkpoint and writes DST/model.safetensors
 * with every 2-D "*.weight" whose row length is a multiple of the group size (all linear
 * layers, the embedding and lm_head) as MLX affine `bits`-bit (U32 weight + scales + biases
 * in the source's float dtype), everything else copied; config.json gains "quantization" and
 * "quantization_config" {"group_size", "bits"}; every other file of the directory (tokenizer,
 * generation config, ...) is copied. Per-expert MoE weights "<p>.mlp.experts.<e>.<q>" (Qwen3-MoE,
 * Qwen3.5-MoE) are stacked into "<p>.mlp.switch_mlp.<q>" [E][rows][cols] first, as mlx_lm's
 * sanitize does; 3-D expert stacks in transformers' layout (gpt-oss) are copied unquantized.
 * This is the layout mlx_lm.convert -q writes.
 *
 * Ownership: nothing kept. Threading: single-threaded, any thread.
 * Errors:    what opening the source names; RP_ERR_INVALID (bits not 4/8, bad group size),
 *            RP_ERR_IO (cannot write DST).
 */
#ifndef RP_MODEL_QUANTIZE_H
#define RP_MODEL_QUANTIZE_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

rp_status rp_quantize_dir(const char *src, const char *dst, int bits, int group_size,
                          rp_err *err);

/* One tensor of a safetensors file being written. */
typedef struct rp_st_out {
    const char *name;
    const char *dtype; /* "F32", "BF16", "F16", "U32", ... as safetensors spells them */
    int n_dims;
    int64_t shape[4];
    size_t n_bytes;
} rp_st_out;

/* Writes exactly ts[i].n_bytes bytes of tensor i to fp; 0 ok, -1 failure. */
typedef int (*rp_st_out_fn)(void *ctx, int i, FILE *fp);

/* Writes a safetensors file: the header, then the tensors in the order given. */
rp_status rp_quantize_write_st(const char *path, const rp_st_out *ts, int n, rp_st_out_fn fn,
                               void *ctx, rp_err *err);

#endif
