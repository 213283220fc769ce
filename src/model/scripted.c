/* model/scripted.c - RapidScriptedForCausalLM: a TEST model whose output is a script.
 *
 * Not a neural network. It exists so the tests can drive the real engine, sampler,
 * detokenizer, output parsers and API layers with a "model" that emits exactly the text a test
 * needs (a tool call in a given format, a <think> block, an answer that uses a tool result),
 * since no small trained model emits tool calls. Nothing is learned and nothing is random:
 * the logits of every position are one-hot (0 on one token, -1e9 elsewhere), so any sampler
 * setting picks that token.
 *
 * config.json: the usual keys the config parser needs (vocab_size = the tokenizer's size,
 * hidden_size, num_hidden_layers, num_attention_heads: any positive values, unused),
 * "architectures": ["RapidScriptedForCausalLM"], eos_token_id, and
 *
 *   "rapid_script": {
 *     "after": [ids],                      the generation prompt, e.g. "<|im_start|>assistant\n"
 *     "rules": [                           first match wins
 *       {"if_contains": [ids], "emit": [ids]},   the prompt part holds this id sequence
 *       {"emit": [ids]}                          no condition: the fallback
 *     ]
 *   }
 *
 * The sequence so far (kept per cache) is split at the last occurrence of "after": before it
 * is the prompt, which the rules test; after it is the output so far, g. The next token
 * continues the script after the first place it holds the longest tail of g: for the smallest
 * s, the first offset o with script[o, o + |g| - s) == g[s..], emit script[o + |g| - s]. For
 * plain generation that is script[|g|]. It also lets the script continue text the prompt
 * primed after "after" (tool_choice appends a call opener): when the script contains the
 * primed ids it carries on from there (skipping what came before them, as a model forced into
 * a call would), when it does not it starts from its beginning after them. At the script's
 * end: eos_token_id.
 * No rule matched, or no "after" in the sequence: eos_token_id at once.
 * The checkpoint still needs a model.safetensors (any tensor; the tests write one 1-element
 * tensor): the loader opens it for every architecture.
 *
 * Ownership: the script (id arrays) lives in the recipe state; the ids it reads are the
 *            cache's own (rp_kv ids, model_impl.h). Threading: as every recipe (model.h). Errors:
 *            RP_ERR_INVALID for a malformed rapid_script (named), RP_ERR_NOMEM.
 */
#include <string.h>

#include "base/alloc.h"
#include "model/model_impl.h"

typedef struct ids {
    int32_t *v;
    int n;
} ids;

typedef struct rule {
    ids cond; /* n == 0: always */
    ids emit;
} rule;

typedef struct scripted {
    ids after;
    rule *rules;
    int n_rules;
    int32_t eos;
} scripted;

static rp_status read_ids(json_t *a, const char *what, int vocab, ids *out, rp_err *err)
{
    out->v = NULL;
    out->n = 0;
    if (!json_is_array(a))
        return rp_err_set(err, RP_ERR_INVALID, "config.json: rapid_script %s must be an id array",
                          what);
    size_t n = json_array_size(a);
    if (n == 0)
        return RP_OK;
    if (!(out->v = rp_alloc(n * sizeof(int32_t))))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab)
            return rp_err_set(err, RP_ERR_INVALID,
                              "config.json: rapid_script %s[%zu] is not a token id below %d",
                              what, i, vocab);
        out->v[i] = (int32_t)json_integer_value(e);
        out->n++;
    }
    return RP_OK;
}

static void scripted_deinit(rp_model *m)
{
    scripted *s = m->arch_state;
    if (!s)
        return;
    rp_free(s->after.v);
    for (int i = 0; i < s->n_rules; i++) {
        rp_free(s->rules[i].cond.v);
        rp_free(s->rules[i].emit.v);
    }
    rp_free(s->rules);
    rp_free(s);
    m->arch_state = NULL;
}

static rp_status scripted_init(rp_model *m, rp_err *err)
{
    json_t *sc = json_object_get(m->cfg.root, "rapid_script");
    if (!json_is_object(sc))
        return rp_err_set(err, RP_ERR_INVALID, "config.json: RapidScriptedForCausalLM needs a "
                                               "'rapid_script' object");
    if (m->cfg.n_eos < 1)
        return rp_err_set(err, RP_ERR_INVALID, "config.json: the scripted model needs an "
                                               "eos_token_id");
    scripted *s = rp_calloc(1, sizeof *s);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    m->arch_state = s;
    s->eos = m->cfg.eos_ids[0];
    int vocab = m->cfg.vocab_size;
    rp_status rc = read_ids(json_object_get(sc, "after"), "after", vocab, &s->after, err);
    json_t *rules = json_object_get(sc, "rules");
    if (rc == RP_OK && (!json_is_array(rules) || json_array_size(rules) == 0))
        rc = rp_err_set(err, RP_ERR_INVALID, "config.json: rapid_script.rules must be a "
                                             "non-empty array");
    if (rc == RP_OK && s->after.n == 0)
        rc = rp_err_set(err, RP_ERR_INVALID, "config.json: rapid_script.after is empty");
    size_t n = rc == RP_OK ? json_array_size(rules) : 0;
    if (n && !(s->rules = rp_calloc(n, sizeof *s->rules)))
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == RP_OK; i++) {
        json_t *r = json_array_get(rules, i), *cond = json_object_get(r, "if_contains");
        s->n_rules++;
        if (cond)
            rc = read_ids(cond, "if_contains", vocab, &s->rules[i].cond, err);
        if (rc == RP_OK)
            rc = read_ids(json_object_get(r, "emit"), "emit", vocab, &s->rules[i].emit, err);
    }
    if (rc != RP_OK)
        scripted_deinit(m);
    return rc;
}

static int find_last(const int32_t *h, int n, const ids *pat)
{
    for (int i = n - pat->n; i >= 0; i--)
        if (memcmp(h + i, pat->v, (size_t)pat->n * sizeof(int32_t)) == 0)
            return i;
    return -1;
}

/* The token that follows the sequence h[0, n). */
static int32_t next_token(const scripted *s, const int32_t *h, int n)
{
    int at = find_last(h, n, &s->after);
    if (at < 0)
        return s->eos;
    int start = at + s->after.n; /* output so far: h[start, n) */
    const ids *script = NULL;
    for (int i = 0; i < s->n_rules && !script; i++)
        if (s->rules[i].cond.n == 0 || find_last(h, start, &s->rules[i].cond) >= 0)
            script = &s->rules[i].emit;
    if (!script)
        return s->eos;
    int g = n - start;
    /* smallest skip k, then first offset o: the output's tail h[start + k, n) is the script's
     * [o, o + len); continue with script[o + len] */
    for (int k = 0; k <= g; k++) {
        int len = g - k;
        for (int o = 0; o + len <= script->n; o++)
            if (memcmp(h + start + k, script->v + o, (size_t)len * sizeof(int32_t)) == 0)
                return o + len < script->n ? script->v[o + len] : s->eos;
    }
    return s->eos; /* not reached: k == g matches at o == 0 */
}

static rp_status scripted_forward(rp_model *m, rp_kv *kv, const int32_t *ids_in, int n,
                                  float *logits, int n_logits, rp_err *err)
{
    (void)err;
    scripted *s = m->arch_state;
    /* kv->ids holds every position's token (rp_kv_prepare recorded ids_in before this call,
     * and a prefix-cache hit brought the cached positions' ids), so the rules see the whole
     * prompt even when most of it came from the prefix cache */
    (void)ids_in;
    const int32_t *seen = kv->ids;
    int base = kv->len;
    kv->len += n;
    size_t vocab = (size_t)m->cfg.vocab_size;
    for (int r = 0; logits && r < n_logits; r++) {
        int upto = base + n - n_logits + r + 1; /* this row follows seen[0, upto) */
        float *row = logits + (size_t)r * vocab;
        for (size_t i = 0; i < vocab; i++)
            row[i] = -1e9f;
        row[next_token(s, seen, upto)] = 0.0f;
    }
    return RP_OK;
}

/* No attention layers, so no blocks of its own: the pool's per-position ids are all it reads. */
static rp_status scripted_kv_init(rp_model *m, rp_kv *kv, rp_err *err)
{
    (void)m;
    (void)err;
    kv->state = NULL;
    return RP_OK;
}

static void scripted_kv_deinit(rp_kv *kv) { kv->state = NULL; }

const rp_arch rp_arch_scripted = {
    .name = "scripted",
    .gpu = 0,
    .init = scripted_init,
    .deinit = scripted_deinit,
    .forward = scripted_forward,
    .kv_init = scripted_kv_init,
    .kv_deinit = scripted_kv_deinit,
};
