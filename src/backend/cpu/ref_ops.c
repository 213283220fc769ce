/* backend/cpu/ref_ops.c - plain-C reference ops: the definition every kernel is tested against.
 *
 * Obvious loops in the order the math is written (llama2.c style). Never optimise this file.
 */
#include <math.h>

#include "backend/backend_impl.h"
#include "backend/quant.h"
#include "base/half.h"
#include "base/status.h"

static float weight_at(const rp_tensor *w, long r, long c)
{
    long i = r * (long)w->shape[1] + c;
    switch (w->dtype) {
    case RP_DT_F32: return rp_load_f32(w->data, (size_t)i);
    case RP_DT_F16: return rp_f16_to_f32(rp_load_u16(w->data, (size_t)i));
    case RP_DT_BF16: return rp_bf16_to_f32(rp_load_u16(w->data, (size_t)i));
    case RP_DT_MXFP4: {
        long rb = (long)rp_dtype_row_bytes(w->dtype, w->shape[1]);
        const uint8_t *blk = (const uint8_t *)w->data + r * rb + (c / 32) * 17;
        uint8_t q = blk[1 + (c % 32) / 2];
        return ldexpf(rp_fp4_values[c % 2 ? q >> 4 : q & 15], (int)blk[0] - 127);
    }
    default: break;
    }
    return NAN;
}

void rp_ref_matmul(const rp_tensor *w, long r0, long r1, const float *x, int n_tok, float *y)
{
    long rows = (long)w->shape[0], cols = (long)w->shape[1];
    if (rp_dtype_is_quant(w->dtype)) { /* dequantize each row (backend/quant.c), f32 dot */
        float row[16384];
        RP_ASSERT(cols <= 16384);
        for (long r = r0; r < r1; r++) {
            rp_quant_dequant_row(w, r, row);
            for (int t = 0; t < n_tok; t++) {
                float acc = 0.0f;
                for (long c = 0; c < cols; c++)
                    acc += row[c] * x[t * cols + c];
                y[t * rows + r] = acc;
            }
        }
        return;
    }
    for (int t = 0; t < n_tok; t++)
        for (long r = r0; r < r1; r++) {
            float acc = 0.0f;
            for (long c = 0; c < cols; c++)
                acc += weight_at(w, r, c) * x[t * cols + c];
            y[t * rows + r] = acc;
        }
}

void rp_ref_rmsnorm(float *out, const float *x, const float *w, int n_tok, int dim, float eps,
                    int add_one)
{
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (long)t * dim;
        float *ot = out + (long)t * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++)
            ss += (double)xt[i] * xt[i];
        float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int i = 0; i < dim; i++) {
            float g = w ? (add_one ? 1.0f + w[i] : w[i]) : 1.0f;
            ot[i] = xt[i] * inv * g;
        }
    }
}

void rp_ref_rope(float *x, int n_tok, int n_heads, int head_dim, int rot_dim, const int32_t *pos,
                 const float *inv_freq, float attn_factor, int neox)
{
    int half = rot_dim / 2;
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((long)t * n_heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                /* f32 angle, as transformers computes it (inv_freq @ position_ids in float) */
                float ang = (float)pos[t] * inv_freq[i];
                float c = cosf(ang) * attn_factor, s = sinf(ang) * attn_factor;
                int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                float a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = b * c + a * s;
            }
        }
}

/* scores[j0..pos] := e^(score - max), max over them and the sink (a logit that takes part
 * in the softmax without a value, gpt-oss); returns their sum (the sink's term included). */
static float softmax_weights(float *scores, int j0, int pos, float mx, const float *sink)
{
    if (sink && *sink > mx)
        mx = *sink;
    float sum = sink ? expf(*sink - mx) : 0.0f;
    for (int j = j0; j <= pos; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    return sum;
}

/* One (query token, head) pair. scores: scratch of at least pos0 + n_tok floats. */
void rp_ref_attention_head(const rp_attn_args *a, int t, int h, float *scores)
{
    int pos = a->pos0 + t, kvh = h / (a->n_heads / a->n_kv_heads), d = a->head_dim;
    int j0 = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const float *q = a->q + ((long)t * a->n_heads + h) * d;
    float mx = -INFINITY;
    for (int j = j0; j <= pos; j++) {
        const float *k = a->k + ((long)j * a->n_kv_heads + kvh) * d;
        float s = 0.0f;
        for (int i = 0; i < d; i++)
            s += q[i] * k[i];
        s *= a->scale;
        scores[j] = s;
        if (s > mx)
            mx = s;
    }
    float sum = softmax_weights(scores, j0, pos, mx, a->sinks ? &a->sinks[h] : NULL);
    float *o = a->out + ((long)t * a->n_heads + h) * d;
    for (int i = 0; i < d; i++)
        o[i] = 0.0f;
    for (int j = j0; j <= pos; j++) {
        const float *v = a->v + ((long)j * a->n_kv_heads + kvh) * d;
        float p = scores[j] / sum;
        for (int i = 0; i < d; i++)
            o[i] += p * v[i];
    }
}

/* One value head of the gated delta rule, every token in order (see rp_op_gated_delta). */
void rp_ref_gated_delta_head(const rp_delta_args *a, int h)
{
    int dk = a->dk, dv = a->dv, kh = h / (a->n_v_heads / a->n_k_heads);
    float *S = a->state + (size_t)h * dk * dv;
    for (int t = 0; t < a->n_tok; t++) {
        const float *q = a->q + t * a->q_stride + kh * dk, *k = a->k + t * a->k_stride + kh * dk;
        const float *v = a->v + t * a->v_stride + h * dv;
        float *o = a->out + t * a->out_stride + h * dv;
        float decay = expf(a->g[(long)t * a->n_v_heads + h]);
        float beta = a->beta[(long)t * a->n_v_heads + h];
        for (int i = 0; i < dk * dv; i++)
            S[i] *= decay;
        for (int j = 0; j < dv; j++) {
            float mem = 0.0f; /* (S^T k)[j] */
            for (int i = 0; i < dk; i++)
                mem += S[i * dv + j] * k[i];
            float delta = beta * (v[j] - mem);
            for (int i = 0; i < dk; i++)
                S[i * dv + j] += k[i] * delta;
        }
        for (int j = 0; j < dv; j++) {
            float acc = 0.0f;
            for (int i = 0; i < dk; i++)
                acc += S[i * dv + j] * q[i];
            o[j] = acc;
        }
    }
}

/* rp_ref_attention_head over paged, possibly quantized blocks: each K and V row is decoded to
 * f32 with the shared codec, then the same loops. */
void rp_ref_attention_paged_head(const rp_kv_layout *kv, const rp_step_seq *seq, int layer,
                                 const rp_step_attn *a, int t, int h, float *scores, float *row)
{
    int pos = seq->pos0 + t, kvh = h / (a->n_heads / a->n_kv_heads), d = a->head_dim;
    int j0 = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const float *q = a->q + ((long)(seq->t0 + t) * a->n_heads + h) * d;
    float mx = -INFINITY;
    for (int j = j0; j <= pos; j++) {
        rp_kv_row_load(kv->dtype, rp_kv_row_at(kv, seq->blocks, layer, 0, j, kvh), d, row);
        float s = 0.0f;
        for (int i = 0; i < d; i++)
            s += q[i] * row[i];
        s *= a->scale;
        scores[j] = s;
        if (s > mx)
            mx = s;
    }
    float sum = softmax_weights(scores, j0, pos, mx, a->sinks ? &a->sinks[h] : NULL);
    float *o = a->out + ((long)(seq->t0 + t) * a->n_heads + h) * d;
    for (int i = 0; i < d; i++)
        o[i] = 0.0f;
    for (int j = j0; j <= pos; j++) {
        rp_kv_row_load(kv->dtype, rp_kv_row_at(kv, seq->blocks, layer, 1, j, kvh), d, row);
        float p = scores[j] / sum;
        for (int i = 0; i < d; i++)
            o[i] += p * row[i];
    }
}
