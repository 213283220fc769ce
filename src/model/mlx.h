/* model/mlx.h - MLX quantized checkpoints (what mlx_lm.convert -q writes).
 *
 * config.json has "quantization" (or "quantization_config"): {"group_size": G, "bits": B,
 * "<module path>": {"group_size", "bits"} | false, ...}. A quantized module stores
 * "<path>.weight" as U32 [rows][cols * B / 32] (packed, element 0 in the low bits),
 * "<path>.scales" and "<path>.biases" as [rows][cols / G] in the model's float dtype;
 * w = scales * q + biases per group. Embeddings and lm_head are quantized the same way.
 *
 * rp_mlx_bind turns every such weight in an open checkpoint into one RP_DT_MLX4/8 tensor of
 * logical shape [rows][cols] (its scales/biases entries are marked consumed: known = 0), so
 * the recipes bind quantized and float checkpoints through the same names. Stacked experts
 * (switch_mlp.*.weight U32 [E][rows][cols * B / 32] with scales [E][rows][cols / G]) become
 * one 3-D tensor [E][rows][cols]; rp_blk_expert views one expert.
 *
 * Ownership: the tensors stay views into the checkpoint's maps.
 * Errors:    RP_ERR_INVALID (scales/biases missing or with shapes that do not match the
 *            config, named), RP_ERR_UNSUPPORTED (bits other than 4 and 8, group size other than
 *            32, 64, 128).
 */
#ifndef RP_MODEL_MLX_H
#define RP_MODEL_MLX_H

#include "base/status.h"
#include "model/config.h"
#include "model/safetensors.h"

/* No-op (RP_OK) when the config has no quantization entry and no tensor is U32 with scales. */
rp_status rp_mlx_bind(rp_st *st, const rp_model_config *cfg, rp_err *err);

#endif
