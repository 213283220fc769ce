/* engine/engine.c - the engine thread: a FIFO of requests, one sequence at a time.
 *
 * Design notes:
 *  1. Requests wait in a FIFO guarded by `mu`; the engine thread pops one, prefills it in
 *     chunks (checking for cancellation between chunks), then decodes token by token,
 *     delivering each token through the request's callback.
 *  2. The engine keeps one KV cache and remembers the ids it holds: a new prompt that starts
 *     with the same tokens reuses that prefix (the common agent case: the same system prompt
 *     and history resent each turn) and only evaluates the rest.
 *  3. Cancellation is a flag read by the engine thread; every request gets exactly one DONE,
 *     always from the engine thread, so callers free their state in one place.
 *  4. Continuous batching replaces note 1 in the engine issue; the public contract stays.
 */
#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "engine/sampler.h"

typedef struct request {
    struct request *next;
    uint64_t id;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    rp_sampling sampling;
    int ignore_eos;
    int32_t *stop_ids;
    int n_stop_ids;
    int n_top;
    rp_event_cb cb;
    void *user;
    _Atomic int cancelled;
    int64_t t_submit;
} request;

struct rp_engine {
    rp_model *model;
    rp_engine_config cfg;
    int ctx;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *head, *tail; /* waiting */
    int n_waiting;
    request *running;
    int stop;
    uint64_t next_id;
    rp_kv *kv;
    int32_t *kv_ids; /* the ids the cache holds, kv_len of them */
    float *logits;
};

void rp_sampling_default(rp_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

static void request_free(request *r)
{
    if (!r)
        return;
    rp_free(r->prompt);
    rp_free(r->stop_ids);
    rp_free(r);
}

static void finish(request *r, rp_finish why, int32_t stop_token, int n_gen, int64_t t_first,
                   const rp_err *err)
{
    rp_event ev = {.kind = RP_EV_DONE,
                   .request_id = r->id,
                   .finish = why,
                   .stop_token = stop_token,
                   .n_prompt = r->n_prompt,
                   .n_generated = n_gen};
    int64_t now = rp_now_ns();
    ev.t_total_s = (double)(now - r->t_submit) * 1e-9;
    ev.t_first_token_s = t_first ? (double)(t_first - r->t_submit) * 1e-9 : ev.t_total_s;
    if (err)
        ev.err = *err;
    r->cb(&ev, r->user);
}

static int is_stop(const rp_engine *e, const request *r, int32_t tok)
{
    if (!r->ignore_eos) {
        const rp_model_info *in = rp_model_get_info(e->model);
        for (int i = 0; i < in->n_eos; i++)
            if (in->eos_ids[i] == tok)
                return 1;
    }
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == tok)
            return 1;
    return 0;
}

/* Evaluates the prompt, reusing the cached prefix; leaves next-token logits in e->logits. */
static rp_status prefill(rp_engine *e, request *r, rp_err *err)
{
    int keep = 0, have = rp_kv_len(e->kv);
    while (keep < have && keep < r->n_prompt && e->kv_ids[keep] == r->prompt[keep])
        keep++;
    if (keep == r->n_prompt) /* the whole prompt is cached: recompute its last token */
        keep--;
    if (keep < have && rp_model_recurrent(e->model))
        keep = 0; /* a hybrid's recurrent state cannot rewind without a snapshot (rp_kv_restore) */
    rp_kv_truncate(e->kv, keep);
    if (keep > 0)
        RP_DEBUG("request %llu: %d of %d prompt tokens from the cache",
                 (unsigned long long)r->id, keep, r->n_prompt);
    for (int done = keep; done < r->n_prompt;) {
        if (atomic_load(&r->cancelled))
            return RP_ERR_CANCELLED;
        int n = r->n_prompt - done < 256 ? r->n_prompt - done : 256;
        int last = done + n == r->n_prompt;
        rp_status rc = rp_model_eval(e->model, e->kv, r->prompt + done, n,
                                     last ? e->logits : NULL, 0, err);
        if (rc) {
            rp_kv_truncate(e->kv, 0);
            return rc;
        }
        memcpy(e->kv_ids + done, r->prompt + done, sizeof(int32_t) * (size_t)n);
        done += n;
    }
    return RP_OK;
}

static void run_request(rp_engine *e, request *r)
{
    rp_err err = {0};
    const rp_model_info *in = rp_model_get_info(e->model);
    rp_sampler *s = rp_sampler_new(in->vocab_size, &r->sampling);
    if (!s) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory for the sampler");
        finish(r, RP_FINISH_ERROR, -1, 0, 0, &err);
        return;
    }
    for (int i = 0; i < r->n_prompt; i++)
        rp_sampler_accept(s, r->prompt[i], 0);
    rp_status rc = prefill(e, r, &err);
    int n_gen = 0;
    int64_t t_first = 0;
    rp_finish why = RP_FINISH_LENGTH;
    int32_t stop_tok = -1;
    int limit = r->max_tokens > 0 ? r->max_tokens : e->ctx - r->n_prompt;
    while (rc == RP_OK) {
        if (atomic_load(&r->cancelled)) {
            rc = RP_ERR_CANCELLED;
            break;
        }
        rp_event ev = {.kind = RP_EV_TOKEN, .request_id = r->id};
        int n_top = r->n_top > RP_MAX_TOP_LOGPROBS ? RP_MAX_TOP_LOGPROBS : r->n_top;
        ev.token = rp_sampler_sample(s, e->logits, n_top, &ev.logprob, ev.top_ids,
                                     ev.top_logprobs);
        ev.n_top = n_top > 0 ? n_top : 0;
        if (is_stop(e, r, ev.token)) {
            why = RP_FINISH_STOP;
            stop_tok = ev.token;
            break;
        }
        if (!t_first)
            t_first = rp_now_ns();
        rp_sampler_accept(s, ev.token, 1);
        r->cb(&ev, r->user);
        if (++n_gen >= limit || rp_kv_len(e->kv) >= e->ctx)
            break;
        int pos = rp_kv_len(e->kv);
        rc = rp_model_eval(e->model, e->kv, &ev.token, 1, e->logits, 0, &err);
        if (rc == RP_OK)
            e->kv_ids[pos] = ev.token;
    }
    rp_sampler_free(s);
    if (rc == RP_ERR_CANCELLED)
        finish(r, RP_FINISH_CANCELLED, -1, n_gen, t_first, NULL);
    else if (rc)
        finish(r, RP_FINISH_ERROR, -1, n_gen, t_first, &err);
    else
        finish(r, why, stop_tok, n_gen, t_first, NULL);
}

static void *engine_main(void *p)
{
    rp_engine *e = p;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop)
            pthread_cond_wait(&e->cv, &e->mu);
        if (!e->head && e->stop)
            break;
        request *r = e->head;
        e->head = r->next;
        if (!e->head)
            e->tail = NULL;
        e->n_waiting--;
        e->running = r;
        if (e->stop)
            atomic_store(&r->cancelled, 1);
        pthread_mutex_unlock(&e->mu);
        if (atomic_load(&r->cancelled))
            finish(r, RP_FINISH_CANCELLED, -1, 0, 0, NULL);
        else
            run_request(e, r);
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

rp_status rp_engine_new(rp_model *model, const rp_engine_config *cfg, rp_engine **out,
                        rp_err *err)
{
    rp_engine *e = rp_calloc(1, sizeof *e);
    if (!e)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    e->model = model;
    if (cfg)
        e->cfg = *cfg;
    if (e->cfg.max_queue <= 0)
        e->cfg.max_queue = 64;
    const rp_model_info *in = rp_model_get_info(model);
    e->ctx = e->cfg.max_context > 0 ? e->cfg.max_context : in->max_context;
    if (e->cfg.max_context <= 0 && e->ctx > 32768)
        e->ctx = 32768;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    rp_status rc = rp_kv_new(model, e->ctx, &e->kv, err);
    if (rc)
        goto fail;
    e->kv_ids = rp_alloc(sizeof(int32_t) * (size_t)e->ctx);
    e->logits = rp_alloc_aligned(sizeof(float) * (size_t)in->vocab_size, RP_TAG_MODEL);
    if (!e->kv_ids || !e->logits) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = 1;
    *out = e;
    return RP_OK;
fail:
    rp_engine_free(e);
    return rc;
}

void rp_engine_free(rp_engine *e)
{
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        for (request *r = e->head; r; r = r->next)
            atomic_store(&r->cancelled, 1);
        if (e->running)
            atomic_store(&e->running->cancelled, 1);
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL); /* drains the queue: every request gets its DONE */
    }
    rp_kv_free(e->kv);
    rp_free(e->kv_ids);
    rp_free_aligned(e->logits);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    rp_free(e);
}

static rp_status validate(const rp_engine *e, const rp_gen_request *q, rp_err *err)
{
    const rp_model_info *in = rp_model_get_info(e->model);
    if (q->n_prompt <= 0)
        return rp_err_set(err, RP_ERR_INVALID, "the prompt is empty");
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= in->vocab_size)
            return rp_err_set(err, RP_ERR_INVALID, "token id %d is outside the vocabulary (%d)",
                              q->prompt[i], in->vocab_size);
    if (q->n_prompt >= e->ctx)
        return rp_err_set(err, RP_ERR_INVALID,
                          "the prompt has %d tokens but the context window is %d tokens",
                          q->n_prompt, e->ctx);
    if (q->max_tokens > 0 && (long)q->n_prompt + q->max_tokens > e->ctx)
        return rp_err_set(err, RP_ERR_INVALID,
                          "the context window is %d tokens, but %d prompt tokens + max_tokens "
                          "%d = %ld were requested",
                          e->ctx, q->n_prompt, q->max_tokens, (long)q->n_prompt + q->max_tokens);
    const rp_sampling *s = &q->sampling;
    if (s->temperature < 0 || s->top_p < 0 || s->top_p > 1 || s->min_p < 0 || s->min_p > 1 ||
        s->top_k < 0 || s->repetition_penalty < 0)
        return rp_err_set(err, RP_ERR_INVALID, "a sampling parameter is out of range");
    return RP_OK;
}

rp_status rp_engine_submit(rp_engine *e, const rp_gen_request *q, rp_event_cb cb, void *user,
                           uint64_t *out_id, rp_err *err)
{
    rp_status rc = validate(e, q, err);
    if (rc)
        return rc;
    request *r = rp_calloc(1, sizeof *r);
    if (!r)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    r->prompt = rp_alloc(sizeof(int32_t) * (size_t)q->n_prompt);
    if (q->n_stop_ids > 0)
        r->stop_ids = rp_alloc(sizeof(int32_t) * (size_t)q->n_stop_ids);
    if (!r->prompt || (q->n_stop_ids > 0 && !r->stop_ids)) {
        request_free(r);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    memcpy(r->prompt, q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
    if (q->n_stop_ids > 0)
        memcpy(r->stop_ids, q->stop_ids, sizeof(int32_t) * (size_t)q->n_stop_ids);
    r->n_prompt = q->n_prompt;
    r->n_stop_ids = q->n_stop_ids;
    r->max_tokens = q->max_tokens;
    r->sampling = q->sampling;
    r->ignore_eos = q->ignore_eos;
    r->n_top = q->n_top_logprobs;
    r->cb = cb;
    r->user = user;
    r->t_submit = rp_now_ns();
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->n_waiting >= e->cfg.max_queue) {
        int n = e->n_waiting;
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        return rp_err_set(err, RP_ERR_LIMIT, "the server is busy: %d requests are waiting", n);
    }
    r->id = e->next_id++;
    if (e->tail)
        e->tail->next = r;
    else
        e->head = r;
    e->tail = r;
    e->n_waiting++;
    if (out_id)
        *out_id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return RP_OK;
}

void rp_engine_cancel(rp_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    if (e->running && e->running->id == id)
        atomic_store(&e->running->cancelled, 1);
    for (request *r = e->head; r; r = r->next)
        if (r->id == id)
            atomic_store(&r->cancelled, 1);
    pthread_mutex_unlock(&e->mu);
}

int rp_engine_context_length(const rp_engine *e) { return e->ctx; }
rp_model *rp_engine_model(const rp_engine *e) { return e->model; }

/* ---- blocking helper ------------------------------------------------------------------- */

typedef struct collect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int32_t *ids;
    int n, cap;
    int oom;
    rp_event last;
} collect;

static void collect_cb(const rp_event *ev, void *user)
{
    collect *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->kind == RP_EV_TOKEN) {
        if (c->n == c->cap) {
            int cap = c->cap ? c->cap * 2 : 64;
            int32_t *ids = rp_realloc(c->ids, sizeof(int32_t) * (size_t)cap);
            if (ids) {
                c->ids = ids;
                c->cap = cap;
            } else {
                c->oom = 1;
            }
        }
        if (c->n < c->cap)
            c->ids[c->n++] = ev->token;
    } else {
        c->last = *ev;
        c->done = 1;
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

rp_status rp_engine_generate(rp_engine *e, const rp_gen_request *req, int32_t **out_ids,
                             int *out_n, rp_finish *out_finish, rp_err *err)
{
    collect c = {0};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    rp_status rc = rp_engine_submit(e, req, collect_cb, &c, NULL, err);
    if (rc == RP_OK) {
        pthread_mutex_lock(&c.mu);
        while (!c.done)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        if (c.last.finish == RP_FINISH_ERROR) {
            if (err)
                *err = c.last.err;
            rc = c.last.err.code ? c.last.err.code : RP_ERR_BACKEND;
        } else if (c.oom) {
            rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory collecting tokens");
        }
    }
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    if (rc) {
        rp_free(c.ids);
        return rc;
    }
    *out_ids = c.ids;
    *out_n = c.n;
    if (out_finish)
        *out_finish = c.last.finish;
    return RP_OK;
}
