/* model/blocks.h - pieces the family recipes share (gemma3, qwen3_moe, lfm2, qwen3_5,
 * gpt_oss): tensor binding by formatted name, attention caches for the layers that have one,
 * mixture-of-experts routing with tokens grouped by expert, and the recurrent blocks of the
 * hybrids (causal depthwise conv1d with its window state; the gated delta rule itself is the
 * backend op rp_op_gated_delta).
 *
 * The conv is plain C on the caller thread: it is small next to the matmuls.
 *
 * Ownership: rp_blk_route_alloc -> rp_blk_route_free;
 *            rp_blk_f32 / rp_blk_falloc results are freed with rp_free_aligned.
 *            Tensor views returned by binding live as long as the model's rp_st.
 * Threading: as the model (one thread at a time).
 * Errors:    binding names the missing / misshapen tensor (RP_ERR_NOT_FOUND / RP_ERR_INVALID);
 *            allocation failures are RP_ERR_NOMEM; the compute helpers cannot fail.
 */
#ifndef RP_MODEL_BLOCKS_H
#define RP_MODEL_BLOCKS_H

#include <math.h>
#include <stdint.h>

#include "model/model_impl.h"

/* Binds a tensor named by fmt (printf style); d0/d1 as rp_model_tensor (0 = any).
 * opt: absent is fine (*out = NULL). */
rp_status rp_blk_tensor(rp_model *m, rp_err *err, const rp_tensor **out, int opt, int64_t d0,
                        int64_t d1, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Any rank (expert stacks, conv weights): checks n_dims and every dim of shape (0 = any). */
rp_status rp_blk_tensor_nd(rp_model *m, rp_err *err, const rp_tensor **out, int opt, int n_dims,
                           const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Where the text model's tensors live: "model." (causal LM checkpoints), or the language
 * model inside a multimodal checkpoint ("model.language_model.", "language_model.model."). */
const char *rp_blk_prefix(rp_model *m);
/* lm_head.weight (or the multimodal spelling); the embedding when absent and tied. */
rp_status rp_blk_lm_head(rp_model *m, const rp_tensor *embed, const rp_tensor **out, rp_err *err);

/* Elements of a tensor (product of its shape). */
int64_t rp_blk_numel(const rp_tensor *t);
/* 64-byte aligned f32 buffer of n floats (uninitialised); NULL when out of memory. */
float *rp_blk_falloc(size_t n);
/* A new f32 copy of a whole tensor (small vectors: biases, conv kernels, A_log). */
float *rp_blk_f32(const rp_tensor *t);
/* Row r0..r0+rows of a 2-D tensor as a 2-D view (fused qkv / gate_up weights); a 3-D stack
 * [E][R][C] counts as E * R rows. MLX-quantized tensors keep their rows' scales and biases. */
rp_tensor rp_blk_rows(const rp_tensor *t, int64_t r0, int64_t rows);
/* Expert e of a 3-D stack [E][R][C] (switch_mlp / fused expert tensors) as a 2-D [R][C] view. */
rp_tensor rp_blk_expert(const rp_tensor *t, int64_t e);

/* ---- backend residency (recipes that run on any backend: llama.c, gemma3.c) ------------- */

/* The backend's copies of a recipe's weights. */
typedef struct rp_blk_weights {
    rp_tensor *w;          /* [cap] the copies */
    const rp_tensor **src; /* [cap] what each was copied from */
    int n, cap;
} rp_blk_weights;

/* Room for cap copies (free with rp_blk_weights_free; the copies' memory is the backend's). */
rp_status rp_blk_weights_init(rp_blk_weights *ws, int cap, rp_err *err);
void rp_blk_weights_free(rp_blk_weights *ws);
/* *t := the backend's copy of *t (rp_backend_weight); NULL stays NULL. A tensor already
 * given (tied embeddings) gets its first copy, so it is uploaded once. */
rp_status rp_blk_to_backend(rp_model *m, rp_blk_weights *ws, const rp_tensor **t, rp_err *err);
/* rp_blk_to_backend over n tensor slots, first failure returned. */
rp_status rp_blk_to_backend_n(rp_model *m, rp_blk_weights *ws, const rp_tensor **const *t, size_t n,
                              rp_err *err);
/* An activation buffer of n floats from the model's backend (rp_backend_buf_alloc); NULL
 * when out of memory. Free with rp_backend_buf_free. */
float *rp_blk_act(rp_model *m, size_t n);
/* The attention blocks' rows for n tokens (rp_blk_act each): x [dim], h [max(dim, q_dim)], q
 * and att [q_dim], k and v [kv_dim], q_dim = n_heads * head_dim, kv_dim = n_kv_heads *
 * head_dim. A member is NULL when out of memory (the caller checks, and frees each). */
void rp_blk_attn_acts(rp_model *m, size_t n, float **x, float **h, float **q, float **k,
                      float **v, float **att);

/* The vocabulary logits of the last n_logits of n rows of the residual x ([n][dim]):
 * logits = head(rmsnorm(x, norm)) (add_one: the (1 + w) norm), normed into h; through the
 * device buffer out when the backend's buffers are not host memory (out NULL otherwise),
 * then copied to the host array logits. */
void rp_blk_logits(rp_model *m, const float *x, float *h, float *out, const rp_tensor *norm,
                   const rp_tensor *head, int n, int n_logits, float eps, int add_one,
                   float *logits);

/* y[t][i] += b[i]; b may be NULL. */
void rp_blk_add_bias(float *y, const float *b, int n_tok, int dim);
static inline float rp_blk_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}
static inline float rp_blk_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* ---- attention caches ------------------------------------------------------------------ */

/* A recipe's handle on its sequence's paged cache (model/kv_cache.h): attention layers read
 * and write the sequence's blocks through the backend's step ops. */
typedef struct rp_blk_kv {
    rp_kv *kv;
} rp_blk_kv;

/* kv_init / kv_deinit for recipes whose cache is attention only: kv->state is one rp_blk_kv;
 * every layer has attention. */
rp_status rp_blk_attn_kv_init(rp_model *m, rp_kv *kv, rp_err *err);
void rp_blk_attn_kv_deinit(rp_kv *kv);

/* The cache of a hybrid (recurrent + attention) recipe: attention K/V for the layers marked
 * in has_attn (the pool's cache layers, in order), and rec_n floats of recurrent state (conv
 * windows, delta-rule states), zero at position 0 and exposed through kv->rec for snapshots.
 * kv->state points at it. */
typedef struct rp_blk_hybrid_kv {
    rp_blk_kv attn;
    float *rec;
} rp_blk_hybrid_kv;
rp_status rp_blk_hybrid_kv_init(rp_model *m, rp_kv *kv, const uint8_t *has_attn, size_t rec_n,
                                rp_err *err);
void rp_blk_hybrid_kv_deinit(rp_kv *kv);

/* Stores n tokens' k, v ([n][n_kv_heads * head_dim]) at positions a->pos0.. of layer l of
 * the sequence's blocks, then runs attention a over them (a->k / a->v are not used). */
void rp_blk_attend(rp_backend *be, rp_blk_kv *c, int l, const float *k, const float *v,
                   rp_attn_args *a);

/* ---- mixture of experts ---------------------------------------------------------------- */

typedef enum rp_blk_route_mode {
    RP_ROUTE_SOFTMAX_TOPK,      /* softmax over all experts, keep top-k (Qwen-MoE) */
    RP_ROUTE_SOFTMAX_TOPK_NORM, /* same, then renormalise the k weights (norm_topk_prob) */
    RP_ROUTE_TOPK_SOFTMAX,      /* top-k logits, softmax over those k (gpt-oss) */
} rp_blk_route_mode;

/* Routing of up to max_tok tokens; after rp_blk_route_compute, expert e's slots are
 * order[start[e] .. start[e+1]), each slot s = token * top_k + j with weight w[s]. */
typedef struct rp_blk_route {
    int n_exp, top_k, max_tok;
    int *sel;     /* [max_tok * top_k] */
    float *w;     /* [max_tok * top_k] */
    int *start;   /* [n_exp + 1] */
    int *order;   /* [max_tok * top_k] */
    float *probs; /* [n_exp] scratch */
} rp_blk_route;

rp_status rp_blk_route_alloc(rp_blk_route *r, int n_exp, int top_k, int max_tok, rp_err *err);
void rp_blk_route_free(rp_blk_route *r);
/* logits: [n_tok][n_exp]. Ties go to the lower expert id (as torch.topk on CPU does). */
void rp_blk_route_compute(rp_blk_route *r, const float *logits, int n_tok, rp_blk_route_mode mode);

/* ---- recurrent blocks ------------------------------------------------------------------ */

/* Causal depthwise conv over n tokens of C channels, kernel K (w: [C][K] f32, bias NULL or
 * [C]): out[t][c] = bias[c] + sum_k w[c][k] * in[t - (K-1) + k][c], where inputs before the
 * first token come from state ([K-1][C], oldest first; zeros at sequence start). The state
 * is then advanced to the last K-1 inputs. out must not alias x. */
void rp_blk_conv1d(float *out, const float *x, float *state, const float *w, const float *bias,
                   int n, int C, int K);

/* x[i] /= sqrt(sum x^2 + eps) over n elements (the delta rule's q/k normalisation). */
void rp_blk_l2norm(float *x, int n, float eps);

#endif
