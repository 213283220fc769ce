/* tests/unit/model/gguf_writer.h - builds GGUF v3 model files from safetensors checkpoints
 * for tests (written from the GGUF spec for these tests; no llama.cpp code).
 *
 * The file is laid out as llama.cpp's converter lays out these models: metadata
 * general.architecture ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3" or "phi3" from
 * config.json), {arch}.* hyper-parameters (expert counts, rope.dimension_count for partial
 * rotary, attention.sliding_window), tokenizer.ggml.bos/eos_token_id, general.alignment 32;
 * tensors under GGUF names (token_embd, blk.N.attn_q, ..., output) with ggml dims (ne[0] = row
 * length); for "llama", the rows of Q and K (and their biases) permuted to the interleaved-RoPE
 * order (HF row a * hd/2 + i of a head stored at 2i + a); Qwen3-MoE experts stacked into
 * blk.N.ffn_{gate,up,down}_exps (ne = [in, out, n_expert]) and the router as ffn_gate_inp;
 * Gemma 3 norms stored as 1 + w, its pre-/post-feedforward and post-attention norms as
 * ffn_norm / post_ffw_norm / post_attention_norm; Phi-3's fused attn_qkv and ffn_up (= HF
 * gate_up_proj); a llama3 rope scaling as the rope_freqs tensor (one divisor per frequency);
 * LFM2's shortconv.* (kernels squeezed to [C][K], head_count_kv per layer, 0 = conv);
 * Qwen3.5's ssm_* / attn_qkv / attn_gate with ssm_a = -exp(A_log), 1 + w norms and the value
 * heads reordered from grouped to tiled, as llama.cpp's converter does; gpt-oss's experts
 * split, transposed and stacked into ffn_{gate,up,down}_exps (+ .bias), attn_sinks, the
 * router as ffn_gate_inp, YaRN as rope.scaling.*. With dt = MXFP4 only gpt-oss's expert
 * stacks are MXFP4 (ggml's block layout), the rest F32. Biases are always F32.
 *
 * 2-D weights are stored as `dt` (F32, F16, BF16 or a GGUF Q type; quantized with
 * backend/quant.c), 1-D tensors as F32. With dequant_twin, every 2-D weight is instead stored
 * as F32 holding dequant(quant(w, dt)): the same values the quantized file carries, in f32.
 *
 * With opts->vocab, a placeholder SentencePiece vocabulary (so llama.cpp, which refuses a model
 * without one, loads the file): tokenizer.ggml.model "llama", vocab_size tokens: 0 "<unk>"
 * (unknown), 1 "<s>" and 2 "</s>" (control; bos_token_id / eos_token_id are then 1 and 2,
 * unknown_token_id 0), the byte tokens "<0x00>".."<0xFF>" (byte type; as many as fit), then
 * normal filler tokens "<filler_N>" (N = the id); tokenizer.ggml.scores 0 for the specials and
 * bytes, -N for the fillers; tokenizer.ggml.token_type per token. Needs vocab_size >= 16 (llama.cpp
 * looks up the newline byte "<0x0A>", id 13).
 */
#ifndef RP_TESTS_GGUF_WRITER_H
#define RP_TESTS_GGUF_WRITER_H

#include "backend/backend.h"

/* 0 ok, -1 on any failure (message on stderr). */
int gguf_write_from_dir(const char *dir, rp_dtype dt, int dequant_twin, const char *out_path);

typedef struct gguf_opts {
    const char *arch;  /* general.architecture to write instead of the config's (NULL: map) */
    int gemma_pattern; /* gemma3: write {arch}.attention.sliding_window_pattern (bool per
                        * layer, true = sliding) from layer_types */
    int vocab;         /* write the placeholder vocabulary described above */
} gguf_opts;
int gguf_write_ex(const char *dir, rp_dtype dt, int dequant_twin, const char *out_path,
                  const gguf_opts *opts);

#endif
