/* tests/unit/backend/families_ops_test.c - backend ops added for the model families.
 *
 * Attention sinks (gpt-oss): the optimised kernel equals the plain-C reference with and
 * without a sliding window, and the reference equals the formula on a case small enough to
 * write out by hand (one key: p = e^s / (e^s + e^sink)).
 * MXFP4 (gpt-oss experts): the matmul kernel and the reference equal f32 math on the decoded
 * values. Gated delta rule (Qwen3.5): the threaded kernel equals the reference, which equals
 * the recurrence written out for one scalar head.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "backend/backend.h"

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A dominant sink leaves almost nothing for the values, with and without a window (the fast
 * paged kernel is checked against this reference in kv_test.c). */
Test(families_ops, attention_sink_dominates)
{
    rp_backend *ref = rp_backend_new(2, 1);
    enum { T = 6, H = 4, KVH = 2, D = 16, CTX = 24, POS0 = CTX - T };
    static float q[T * H * D], k[CTX * KVH * D], v[CTX * KVH * D], o2[T * H * D];
    unsigned seed = 7;
    for (int i = 0; i < T * H * D; i++)
        q[i] = frand(&seed);
    for (int i = 0; i < CTX * KVH * D; i++) {
        k[i] = frand(&seed);
        v[i] = frand(&seed);
    }
    float sinks[H] = {-1.0f, 0.5f, 3.0f, 20.0f}; /* the last one dominates every score */
    for (int window = 0; window <= 4; window += 4) {
        rp_attn_args a = {.q = q,
                          .k = k,
                          .v = v,
                          .out = o2,
                          .n_tok = T,
                          .pos0 = POS0,
                          .n_heads = H,
                          .n_kv_heads = KVH,
                          .head_dim = D,
                          .scale = 0.25f,
                          .window = window,
                          .sinks = sinks};
        rp_op_attention(ref, &a);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                cr_assert_leq(fabsf(o2[(t * H + 3) * D + i]), 1e-6f);
    }
    rp_backend_free(ref);
}

Test(families_ops, attention_sink_formula)
{
    rp_backend *ref = rp_backend_new(1, 1);
    float q[2] = {1.0f, 2.0f}, k[2] = {0.5f, 0.25f}, v[2] = {3.0f, -1.0f}, out[2];
    float sink = 0.7f;
    rp_attn_args a = {.q = q,
                      .k = k,
                      .v = v,
                      .out = out,
                      .n_tok = 1,
                      .pos0 = 0,
                      .n_heads = 1,
                      .n_kv_heads = 1,
                      .head_dim = 2,
                      .scale = 1.0f,
                      .sinks = &sink};
    rp_op_attention(ref, &a);
    float s = 1.0f * 0.5f + 2.0f * 0.25f, p = expf(s) / (expf(s) + expf(sink));
    cr_assert_float_eq(out[0], p * 3.0f, 1e-6f);
    cr_assert_float_eq(out[1], p * -1.0f, 1e-6f);
    rp_backend_free(ref);
}

/* MXFP4 rows built from known nibbles and scales: the kernel, the reference and a plain f32
 * matmul over the decoded values agree; row decoding (rp_tensor_row_f32) gives the values. */
Test(families_ops, mxfp4_matmul_matches_decoded_f32)
{
    enum { ROWS = 12, COLS = 96, NB = COLS / 32, T = 6 }; /* T > 4: two token tiles */
    static uint8_t q[ROWS * NB * 17];
    static float dec[ROWS * COLS], x[T * COLS], y1[T * ROWS], y2[T * ROWS], y3[T * ROWS];
    unsigned seed = 11;
    for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < NB; b++) {
            uint8_t *blk = q + (r * NB + b) * 17;
            blk[0] = (uint8_t)(127 - 3 + (r + b) % 6); /* scales 2^-3 .. 2^2 */
            for (int i = 0; i < 16; i++) {
                seed = seed * 1664525u + 1013904223u;
                blk[1 + i] = (uint8_t)(seed >> 24);
            }
            for (int i = 0; i < 32; i++) {
                uint8_t nib = i % 2 ? blk[1 + i / 2] >> 4 : blk[1 + i / 2] & 15;
                dec[r * COLS + b * 32 + i] = rp_fp4_values[nib] * ldexpf(1.0f, blk[0] - 127);
            }
        }
    for (int i = 0; i < T * COLS; i++)
        x[i] = frand(&seed);
    cr_assert_eq(rp_dtype_row_bytes(RP_DT_MXFP4, COLS), (size_t)NB * 17);
    rp_tensor w = {
        .dtype = RP_DT_MXFP4, .n_dims = 2, .shape = {ROWS, COLS}, .data = q, .n_bytes = sizeof q};
    rp_tensor wf = {
        .dtype = RP_DT_F32, .n_dims = 2, .shape = {ROWS, COLS}, .data = dec, .n_bytes = sizeof dec};
    rp_backend *fast = rp_backend_new(2, 0), *ref = rp_backend_new(1, 1);
    rp_op_matmul(fast, &w, x, T, y1);
    rp_op_matmul(ref, &w, x, T, y2);
    rp_op_matmul(ref, &wf, x, T, y3);
    for (int i = 0; i < T * ROWS; i++) {
        cr_assert_float_eq(y1[i], y3[i], 1e-4f * (1.0f + fabsf(y3[i])), "fast [%d]", i);
        cr_assert_float_eq(y2[i], y3[i], 1e-4f * (1.0f + fabsf(y3[i])), "ref [%d]", i);
    }
    float row[COLS];
    rp_tensor_row_f32(&w, 5, row);
    for (int i = 0; i < COLS; i++)
        cr_assert_eq(row[i], dec[5 * COLS + i]);
    rp_backend_free(fast);
    rp_backend_free(ref);
}

/* Gated delta rule: the threaded kernel equals the reference (GQA-style key sharing, strided
 * rows), and one head of dk = dv = 1 follows the scalar recurrence written out by hand. */
Test(families_ops, gated_delta_matches_reference)
{
    enum { T = 9, NK = 2, NV = 4, DK = 32, DV = 24, QS = 2 * NK * DK + NV * DV };
    static float qkv[T * QS], g[T * NV], beta[T * NV], s1[NV * DK * DV], s2[NV * DK * DV],
        o1[T * NV * DV], o2[T * NV * DV];
    unsigned seed = 3;
    for (int i = 0; i < T * QS; i++)
        qkv[i] = frand(&seed) * 0.3f;
    for (int i = 0; i < T * NV; i++) {
        g[i] = -0.5f * (frand(&seed) + 1.0f);
        beta[i] = 0.5f * (frand(&seed) + 1.0f);
    }
    for (int i = 0; i < NV * DK * DV; i++)
        s1[i] = s2[i] = frand(&seed);
    rp_backend *fast = rp_backend_new(2, 0), *ref = rp_backend_new(2, 1);
    rp_delta_args a = {.q = qkv,
                       .k = qkv + NK * DK,
                       .v = qkv + 2 * NK * DK,
                       .g = g,
                       .beta = beta,
                       .state = s1,
                       .out = o1,
                       .n_tok = T,
                       .n_k_heads = NK,
                       .n_v_heads = NV,
                       .dk = DK,
                       .dv = DV,
                       .q_stride = QS,
                       .k_stride = QS,
                       .v_stride = QS,
                       .out_stride = NV * DV};
    rp_op_gated_delta(fast, &a);
    a.state = s2;
    a.out = o2;
    rp_op_gated_delta(ref, &a);
    for (int i = 0; i < T * NV * DV; i++)
        cr_assert_float_eq(o1[i], o2[i], 1e-4f, "out %d", i);
    for (int i = 0; i < NV * DK * DV; i++)
        cr_assert_float_eq(s1[i], s2[i], 1e-4f, "state %d", i);

    /* dk = dv = 1: s = e^g s ; s += k beta (v - s k) ; o = s q */
    float q1[2] = {0.5f, -1.0f}, k1[2] = {2.0f, 0.25f}, v1[2] = {1.0f, 3.0f};
    float g1[2] = {-0.1f, -0.7f}, b1[2] = {0.9f, 0.4f}, st = 0.3f, out[2];
    rp_delta_args one = {.q = q1,
                         .k = k1,
                         .v = v1,
                         .g = g1,
                         .beta = b1,
                         .state = &st,
                         .out = out,
                         .n_tok = 2,
                         .n_k_heads = 1,
                         .n_v_heads = 1,
                         .dk = 1,
                         .dv = 1,
                         .q_stride = 1,
                         .k_stride = 1,
                         .v_stride = 1,
                         .out_stride = 1};
    rp_op_gated_delta(ref, &one);
    float s = 0.3f, want[2];
    for (int t = 0; t < 2; t++) {
        s *= expf(g1[t]);
        s += k1[t] * b1[t] * (v1[t] - s * k1[t]);
        want[t] = s * q1[t];
    }
    cr_assert_float_eq(out[0], want[0], 1e-6f);
    cr_assert_float_eq(out[1], want[1], 1e-6f);
    cr_assert_float_eq(st, s, 1e-6f);
    rp_backend_free(fast);
    rp_backend_free(ref);
}
