/* model/rope.h - rotary-embedding frequencies for every scaling type transformers defines.
 *
 * rp_rope_init computes inv_freq (rot_dim / 2 floats) and the attention factor that scales
 * cos/sin, following transformers' ROPE_INIT_FUNCTIONS: default, linear, dynamic (NTK, which
 * depends on the sequence length: call rp_rope_update as the sequence grows), yarn, llama3,
 * longrope (short/long factors chosen by length).
 *
 * Ownership: rp_rope holds its own arrays (rp_rope_deinit).
 * Errors:    RP_ERR_UNSUPPORTED for an unknown rope type (named).
 */
#ifndef RP_MODEL_ROPE_H
#define RP_MODEL_ROPE_H

#include "model/config.h"

typedef struct rp_rope {
    int rot_dim;      /* dims rotated per head */
    float *inv_freq;  /* rot_dim / 2 */
    float attn_factor;
    int dynamic;      /* 1: inv_freq depends on the sequence length */
    int cur_len;      /* length inv_freq was computed for (dynamic / longrope) */
    float *long_factor, *short_factor; /* longrope */
    rp_rope_config cfg;
    int max_pos;
    int head_dim;
} rp_rope;

rp_status rp_rope_init(rp_rope *r, const rp_model_config *cfg, int head_dim, rp_err *err);
/* For length-dependent types: recomputes inv_freq when seq_len needs it. */
void rp_rope_update(rp_rope *r, int seq_len);
void rp_rope_deinit(rp_rope *r);

#endif
