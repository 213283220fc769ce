/* model/gguf_model.h - GGUF model files as checkpoints: metadata to a config, tensors to the
 * Hugging Face names the recipes bind.
 *
 * Architectures (general.architecture, llama.cpp's names): "llama" (Llama, Mistral), "qwen2",
 * "qwen3", "qwen3moe", "gemma3", "qwen35" (Qwen3.5 dense), "lfm2", "gpt-oss", "phi3"; any other
 * is RP_ERR_UNSUPPORTED naming it. The metadata ({arch}.embedding_length, .block_count,
 * .feed_forward_length, .context_length, .attention.head_count[_kv], .attention.key_length,
 * .attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_count, .rope.scaling.*,
 * the families' expert_*, ssm.*, shortconv.*, full_attention_interval, sliding_window keys,
 * tokenizer.ggml.bos/eos_token_id) becomes a config.json object parsed by
 * rp_model_config_parse. Tensor names map token_embd -> model.embed_tokens,
 * blk.N.attn_q -> model.layers.N.self_attn.q_proj, ..., output -> lm_head (absent: tied),
 * per architecture where the HF names differ. ggml dims are reversed (ne[0] is the row).
 *
 * What llama.cpp's converter changed is undone at load into heap copies owned by the st
 * (every other tensor is a view into the mmap'd file): the Q/K row permutation of "llama"
 * (its interleaved RoPE; within each head HF row a * hd/2 + i is stored at 2i + a), the
 * 1 + w norm weights of gemma3 and qwen35, qwen35's -exp(A_log) and value-head order, MXFP4's
 * nibble order. rope_freqs.weight (Llama 3.1+) becomes rope_parameters.freq_factors.
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4; any other is
 * RP_ERR_UNSUPPORTED naming the tensor and the type.
 *
 * Ownership: *st owns the GGUF mapping (closed by rp_st_close); *config is a new reference.
 * Errors:    RP_ERR_NOT_FOUND / RP_ERR_INVALID from the reader; RP_ERR_UNSUPPORTED
 *            (architecture or tensor type, named); RP_ERR_INVALID (missing metadata, named).
 */
#ifndef RP_MODEL_GGUF_MODEL_H
#define RP_MODEL_GGUF_MODEL_H

#include <jansson.h>

#include "base/status.h"
#include "model/safetensors.h"

/* Whether path names a GGUF file (ends in ".gguf" and is not a directory). */
int rp_gguf_model_is(const char *path);

rp_status rp_gguf_model_open(const char *path, json_t **config, rp_st **st, rp_err *err);

/* The ggml type id <-> rp_dtype (-1 / 0xffffffff when rapid has no such dtype), and the name
 * llama.cpp gives a ggml type ("Q4_K"; "type N" when unknown: static buffer-free). */
int rp_gguf_model_dtype(uint32_t ggml_type);
uint32_t rp_gguf_model_ggml_type(rp_dtype dt);
const char *rp_gguf_model_type_name(uint32_t ggml_type);

#endif
