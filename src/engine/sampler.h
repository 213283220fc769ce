/* engine/sampler.h - turns logits into the next token.
 *
 * Order, as vLLM and transformers apply them: repetition / presence / frequency penalties over
 * the tokens seen so far (prompt included for repetition, generated only for presence and
 * frequency, as OpenAI defines them), then temperature (0 = greedy argmax), top-k, top-p,
 * min-p, and a draw from the remaining distribution with the request's own PRNG
 * (splitmix64-seeded xoshiro256**, so a seed reproduces the same tokens on any machine). The
 * draw itself is backend/sample.h's, which the CUDA backend also runs where the logits are
 * (rp_op_sample_rows): the engine then hands it the uniform number and gets the same token.
 *
 * Ownership: rp_sampler_new -> rp_sampler_free. It keeps a scratch of vocab_size entries, so
 *            sampling allocates nothing.
 * Threading: one sampler per request, used by the engine thread.
 */
#ifndef RP_ENGINE_SAMPLER_H
#define RP_ENGINE_SAMPLER_H

#include <stdint.h>

#include "backend/sample.h"
#include "engine/engine.h"

typedef struct rp_sampler rp_sampler;

rp_sampler *rp_sampler_new(int vocab_size, const rp_sampling *params);
void rp_sampler_free(rp_sampler *s);

/* Records a token as seen (prompt tokens with generated = 0). */
void rp_sampler_accept(rp_sampler *s, int32_t token, int generated);

/* 1 when the pick is the plain argmax of the logits (temperature 0, no penalties), which a
 * backend may then take without the logits leaving it (rp_op_argmax_rows). */
int rp_sampler_greedy(const rp_sampler *s);

/* 1 when no penalty applies: the draw depends only on the logits and one uniform number, so
 * a backend may make it (rp_sampler_row + rp_op_sample_rows). */
int rp_sampler_plain(const rp_sampler *s);

/* The next uniform number of the request's PRNG for one draw (0 without a draw: greedy), and
 * the draw's parameters with it. */
double rp_sampler_next_u(rp_sampler *s);
rp_sample_row rp_sampler_row(const rp_sampler *s, double u);

/* The draw with a uniform number from rp_sampler_next_u (no penalties: rp_sampler_plain). */
int32_t rp_sampler_sample_u(rp_sampler *s, const float *logits, double u);

/* Picks the next token; logits are modified in place (penalties). When n_top >= 0, fills
 * *logprob with the chosen token's log-probability and the n_top best alternatives. */
int32_t rp_sampler_sample(rp_sampler *s, float *logits, int n_top, float *logprob,
                          int32_t *top_ids, float *top_logprobs);

#endif
