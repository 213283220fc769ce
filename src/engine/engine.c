/* engine/engine.c - the engine thread: continuous batching over cache slots.
 *
 * Design notes:
 *  1. Requests wait in a FIFO guarded by `mu`. Between steps the engine thread admits them
 *     into free slots (at most max_num_seqs run at once).
 *  2. A step is one rp_model_eval_batch: the next token of every decoding sequence, then
 *     prompt chunks of prefilling sequences (at most prefill_chunk each) until the batch is
 *     full. Weights are read once per step however many sequences run; the kernels are
 *     batch-invariant, so a sequence's tokens do not depend on its neighbours.
 *  3. The KV cache is one block pool (model/kv_cache.h). A request's full blocks are put in
 *     the pool's prefix index as they fill; at admission the new sequence takes the longest
 *     indexed prefix of its prompt (rp_kv_attach_prefix), so a resent conversation only
 *     evaluates its new tail. A finished sequence returns its blocks (cached ones stay
 *     evictable, least recently used first).
 *  6. Admission reserves blocks: a request is admitted when the pool's free plus evictable
 *     blocks cover what it can still need (prompt + max_tokens) plus what every running
 *     sequence can still need. So a step never runs short, eviction never touches a block in
 *     use, and a waiting request is admitted as soon as finished ones free enough (FIFO).
 *  4. Cancellation is a flag read by the engine thread between steps; every request gets
 *     exactly one DONE, always from the engine thread, so callers free state in one place.
 *  5. Nothing is allocated per step: samplers are made at admission, buffers and the KV
 *     pool at start (hybrids' state snapshots in cached blocks aside).
 *  7. Speculative decoding by prompt lookup (cfg.spec_tokens > 0): a greedy sequence whose
 *     last few tokens occurred earlier in its prompt or output drafts the tokens that followed
 *     them there (the most recent match of the longest n-gram, SPEC_NGRAM_MAX down to
 *     SPEC_NGRAM_MIN) and evaluates [next token, drafts] as one causal run of the step, a
 *     logits row each. Row j's argmax is the token greedy decoding would pick after draft j,
 *     so drafts are accepted while they equal it, and the first mismatch is itself the next
 *     token: the output is greedy decoding's, up to one step's worth of tokens at once. The
 *     cache is truncated back over the rejected drafts (their full blocks may stay in the
 *     prefix index: their K/V are right for the tokens they hold, and the sequence copies such
 *     a block before writing into it). Hybrids cannot rewind their recurrent state, so they
 *     never draft.
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

typedef enum slot_phase { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE } slot_phase;

/* Prompt lookup: the n-gram lengths tried (longest first). One token is too weak a context:
 * its matches are mostly wrong, and each wrong draft costs a row of compute. */
#define SPEC_NGRAM_MAX 4
#define SPEC_NGRAM_MIN 2

typedef struct slot {
    slot_phase phase;
    rp_kv *kv;
    int final_len; /* positions the request can fill (its reservation) */
    request *req;
    rp_sampler *sampler;
    int32_t next_tok; /* DECODE: sampled, not yet evaluated */
    int32_t *draft;   /* [cfg.spec_tokens]: this step's drafts after next_tok */
    int n_draft;      /* drafts in this step's batch (0: a plain decode or prefill row) */
    int n_gen;
    int64_t t_first;
    uint64_t last_used;
    uint64_t admitted; /* admission order: prefill goes first come, first served */
} slot;

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
    _Atomic int stop;
    uint64_t next_id;
    slot *slots;
    int n_slots;
    rp_kv_pool *pool;
    int n_blocks; /* the pool's, constant */
    uint64_t clock;
    rp_engine_stats stats; /* guarded by mu */
    /* step buffers */
    int32_t *b_ids;
    rp_kv **b_kv;
    uint8_t *b_want;
    slot **b_row_slot; /* slot of each logits row */
    int32_t *b_greedy; /* each row's token, when the backend picks them (rp_batch.argmax) */
    rp_sample_row *b_draw; /* each row's draw, when the backend makes it (rp_batch.sample) */
    double *b_u;           /* and its uniform number, for a row the backend leaves to us */
    float *logits;     /* max_rows rows */
    int max_rows;      /* logits rows a step may ask for: a row per slot, plus drafts */
    int64_t spec_drafted, spec_accepted; /* engine thread; copied into stats under mu */
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

static void pool_stats(rp_engine *e);

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

/* Ends the slot's request and frees the slot: its blocks go back to the pool (full ones stay
 * in the prefix cache) before the DONE event, so a caller woken by it sees the stats after. */
static void slot_finish(rp_engine *e, slot *sl, rp_finish why, int32_t stop_tok, const rp_err *err)
{
    request *r = sl->req;
    int n_gen = sl->n_gen;
    int64_t t_first = sl->t_first;
    rp_sampler_free(sl->sampler);
    sl->sampler = NULL;
    sl->phase = SLOT_FREE;
    sl->last_used = ++e->clock;
    rp_kv_truncate(sl->kv, 0);
    pthread_mutex_lock(&e->mu);
    sl->req = NULL; /* under mu: rp_engine_cancel reads it */
    e->stats.n_running--;
    e->stats.n_requests++;
    e->stats.n_generated += n_gen;
    pool_stats(e);
    pthread_mutex_unlock(&e->mu);
    finish(r, why, stop_tok, n_gen, t_first, err);
    request_free(r);
}

/* Positions a request can fill: its prompt and every token it may generate. */
static int final_len(const rp_engine *e, const request *r)
{
    int limit = r->max_tokens > 0 ? r->max_tokens : e->ctx - r->n_prompt;
    int n = r->n_prompt + limit;
    return n < e->ctx ? n : e->ctx;
}

/* Blocks the running sequences may still take. */
static int outstanding(const rp_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].phase != SLOT_FREE)
            n += rp_kv_blocks_needed(e->slots[i].kv, e->slots[i].final_len);
    return n;
}

/* Starts r in sl on its longest cached prefix when its blocks fit beside the running
 * sequences' reservations (else without the prefix, whose copy on write costs a block).
 * Returns the cached positions, or -1 (nothing attached) when it must wait. */
static int try_place(rp_engine *e, slot *sl, request *r)
{
    int final = final_len(e, r), reserved = outstanding(e);
    int keep = e->cfg.no_prefix_cache ? 0 : rp_kv_attach_prefix(sl->kv, r->prompt, r->n_prompt);
    if (rp_kv_blocks_needed(sl->kv, final) <= rp_kv_pool_available(e->pool) - reserved)
        return keep;
    rp_kv_truncate(sl->kv, 0);
    if (rp_kv_blocks_needed(sl->kv, final) <= rp_kv_pool_available(e->pool) - reserved)
        return 0;
    return -1;
}

static void pool_stats(rp_engine *e) /* called with mu held */
{
    rp_kv_pool_stats ps;
    rp_kv_pool_get_stats(e->pool, &ps);
    e->stats.kv_blocks_total = ps.n_blocks;
    e->stats.kv_blocks_used = ps.n_used;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_block_tokens = ps.block_tokens;
    e->stats.kv_bytes_per_token = ps.bytes_per_token;
    e->stats.kv_bytes = (int64_t)ps.bytes;
    e->stats.kv_evicted_blocks = ps.n_evicted;
}

/* Moves waiting requests into free slots, first come first served (called with mu held). */
static void admit(rp_engine *e)
{
    while (e->head) {
        slot *best = NULL;
        for (int i = 0; i < e->n_slots; i++) {
            slot *sl = &e->slots[i];
            if (sl->phase == SLOT_FREE && (!best || sl->last_used < best->last_used))
                best = sl;
        }
        if (!best)
            break;
        request *r = e->head;
        int keep = try_place(e, best, r);
        if (keep < 0)
            break; /* the head waits for blocks; the ones behind it wait their turn */
        e->head = r->next;
        if (!e->head)
            e->tail = NULL;
        e->n_waiting--;
        best->req = r;
        best->final_len = final_len(e, r);
        best->admitted = ++e->clock;
        best->n_gen = 0;
        best->t_first = 0;
        best->phase = SLOT_PREFILL;
        e->stats.n_running++;
        e->stats.n_prompt_tokens += r->n_prompt;
        e->stats.n_cached_tokens += keep;
        e->stats.prefix_hit_tokens += keep;
        e->stats.prefix_miss_tokens += r->n_prompt - keep;
        if (keep > 0)
            RP_DEBUG("request %llu: %d of %d prompt tokens from the prefix cache",
                     (unsigned long long)r->id, keep, r->n_prompt);
    }
    pool_stats(e);
}

static int prepare_slot(rp_engine *e, slot *sl)
{
    const rp_model_info *in = rp_model_get_info(e->model);
    sl->sampler = rp_sampler_new(in->vocab_size, &sl->req->sampling);
    if (!sl->sampler)
        return -1;
    for (int i = 0; i < sl->req->n_prompt; i++)
        rp_sampler_accept(sl->sampler, sl->req->prompt[i], 0);
    return 0;
}

/* Adds one token of `sl` to the step batch. */
static void push(rp_engine *e, int *n, slot *sl, int32_t tok, int want)
{
    e->b_ids[*n] = tok;
    e->b_kv[*n] = sl->kv;
    e->b_want[*n] = (uint8_t)want;
    (*n)++;
}

/* Prompt lookup (note 7): up to k drafts into out for a sequence whose tokens are
 * kv's [0, len) then next. Returns how many. */
static int lookup_drafts(const rp_kv *kv, int32_t next, int k, int32_t *out)
{
    const int32_t *ids = rp_kv_tokens(kv);
    int len = rp_kv_len(kv), total = len + 1;
#define TOK(i) ((i) < len ? ids[i] : next)
    for (int n = SPEC_NGRAM_MAX; n >= SPEC_NGRAM_MIN; n--) {
        if (total <= n)
            continue;
        for (int j = total - n - 1; j >= 0; j--) { /* most recent earlier occurrence first */
            int m = 0;
            while (m < n && TOK(j + m) == TOK(total - n + m))
                m++;
            if (m < n)
                continue;
            int got = 0;
            for (int s = j + n; s < total && got < k; s++)
                out[got++] = TOK(s);
            return got;
        }
    }
#undef TOK
    return 0;
}

/* Drafts sl may put in this step, within room batch places (note 7). */
static int plan_drafts(rp_engine *e, slot *sl, int room)
{
    const request *r = sl->req;
    int k = e->cfg.spec_tokens;
    if (k <= 0 || rp_model_recurrent(e->model) || r->n_top >= 0 ||
        !rp_sampler_greedy(sl->sampler))
        return 0;
    int limit = r->max_tokens > 0 ? r->max_tokens : e->ctx - r->n_prompt;
    int left = limit - sl->n_gen - 1; /* tokens still allowed after next_tok's successor */
    k = k < left ? k : left;
    k = k < room ? k : room;
    k = k < sl->final_len - rp_kv_len(sl->kv) - 1 ? k : sl->final_len - rp_kv_len(sl->kv) - 1;
    return k > 0 ? lookup_drafts(sl->kv, sl->next_tok, k, sl->draft) : 0;
}

/* Fills the batch: decode tokens (each with its drafts) first, then prompt chunks (oldest
 * admission first). Returns the token count; e->b_row_slot gets the slot of each logits row
 * in order (a drafting slot has 1 + n_draft consecutive rows). */
static int build_batch(rp_engine *e, int *n_rows)
{
    int n = 0, max = rp_model_max_batch(e->model), rows = 0, n_decode = 0;
    for (int i = 0; i < e->n_slots; i++)
        n_decode += e->slots[i].phase == SLOT_DECODE;
    for (int i = 0; i < e->n_slots && n < max; i++) {
        slot *sl = &e->slots[i];
        sl->n_draft = 0;
        if (sl->phase != SLOT_DECODE)
            continue;
        n_decode--; /* the others behind this one each keep a place and a row */
        push(e, &n, sl, sl->next_tok, 1);
        e->b_row_slot[rows++] = sl;
        int room = max - n - n_decode, row_room = e->max_rows - rows - n_decode;
        sl->n_draft = plan_drafts(e, sl, room < row_room ? room : row_room);
        for (int d = 0; d < sl->n_draft; d++) {
            push(e, &n, sl, sl->draft[d], 1);
            e->b_row_slot[rows++] = sl;
        }
    }
    for (;;) {
        slot *next = NULL;
        for (int i = 0; i < e->n_slots; i++) {
            slot *sl = &e->slots[i];
            int queued = 0;
            for (int t = 0; t < n; t++)
                queued |= e->b_kv[t] == sl->kv;
            if (sl->phase == SLOT_PREFILL && !queued && (!next || sl->admitted < next->admitted))
                next = sl;
        }
        if (!next || n >= max || rows >= e->max_rows)
            break;
        int done = rp_kv_len(next->kv), left = next->req->n_prompt - done;
        int chunk = left < e->cfg.prefill_chunk ? left : e->cfg.prefill_chunk;
        chunk = chunk < max - n ? chunk : max - n;
        int end = (done + chunk) / RP_KV_BLOCK_TOKENS * RP_KV_BLOCK_TOKENS;
        if (rp_model_recurrent(e->model) && end > done && end < done + chunk)
            chunk = end - done; /* end on a block boundary: its state snapshot is cached */
        for (int k = 0; k < chunk; k++)
            push(e, &n, next, next->req->prompt[done + k], done + k == next->req->n_prompt - 1);
        if (done + chunk == next->req->n_prompt)
            e->b_row_slot[rows++] = next;
    }
    *n_rows = rows;
    return n;
}

/* Emits tok for sl (its stop, limit and context checks); returns 0 when sl finished.
 * pos_after: the cache length once tok's predecessor is evaluated. */
static int emit(rp_engine *e, slot *sl, rp_event *ev, int pos_after)
{
    request *r = sl->req;
    if (is_stop(e, r, ev->token)) {
        slot_finish(e, sl, RP_FINISH_STOP, ev->token, NULL);
        return 0;
    }
    if (!sl->t_first)
        sl->t_first = rp_now_ns();
    rp_sampler_accept(sl->sampler, ev->token, 1);
    r->cb(ev, r->user);
    sl->n_gen++;
    int limit = r->max_tokens > 0 ? r->max_tokens : e->ctx - r->n_prompt;
    if (sl->n_gen >= limit || pos_after >= e->ctx) {
        slot_finish(e, sl, RP_FINISH_LENGTH, -1, NULL);
        return 0;
    }
    sl->next_tok = ev->token;
    return 1;
}

/* After a step: sample each row's next token, emit it, retire finished sequences. A drafting
 * slot's rows are checked in order (note 7). */
/* The rows' tokens: picked[r] where the backend picked it (>= 0), else drawn here from the
 * logits, with u[r] when the draw's number was taken already (rp_batch.sample). */
static void consume_rows(rp_engine *e, int n_rows, const int32_t *picked, const double *u)
{
    size_t vocab = (size_t)rp_model_get_info(e->model)->vocab_size;
    for (int i = 0; i < n_rows;) {
        slot *sl = e->b_row_slot[i];
        request *r = sl->req;
        int nd = sl->n_draft;
        int n_top = r->n_top > RP_MAX_TOP_LOGPROBS ? RP_MAX_TOP_LOGPROBS : r->n_top;
        sl->phase = SLOT_DECODE;
        int32_t tok[1 + RP_MAX_SPEC_TOKENS];
        int acc = 0; /* drafts accepted */
        rp_event ev = {.kind = RP_EV_TOKEN, .request_id = r->id};
        for (int j = 0; j <= nd; j++) {
            float *row = e->logits + (size_t)(i + j) * vocab;
            if (picked && picked[i + j] >= 0)
                tok[j] = picked[i + j];
            else if (u)
                tok[j] = rp_sampler_sample_u(sl->sampler, row, u[i + j]);
            else
                tok[j] = rp_sampler_sample(sl->sampler, row, n_top, &ev.logprob, ev.top_ids,
                                           ev.top_logprobs);
            if (j == nd || tok[j] != sl->draft[j])
                break;
            acc++;
        }
        if (nd) { /* the cache holds next_tok and nd drafts: keep next_tok and the accepted */
            rp_kv_truncate(sl->kv, rp_kv_len(sl->kv) - (nd - acc));
            e->spec_drafted += nd;
            e->spec_accepted += acc;
        }
        ev.n_top = n_top > 0 ? n_top : 0;
        int len = rp_kv_len(sl->kv);
        for (int j = 0; j <= acc; j++) {
            ev.token = tok[j];
            if (!emit(e, sl, &ev, len - acc + j))
                break;
        }
        i += nd + 1;
    }
}

/* One engine step. Returns 0 when there was nothing to do. */
static int step(rp_engine *e)
{
    for (int i = 0; i < e->n_slots; i++) {
        slot *sl = &e->slots[i];
        if (sl->phase == SLOT_FREE)
            continue;
        if (atomic_load(&sl->req->cancelled) || e->stop) {
            slot_finish(e, sl, RP_FINISH_CANCELLED, -1, NULL);
        } else if (!sl->sampler && prepare_slot(e, sl)) {
            rp_err err;
            rp_err_set(&err, RP_ERR_NOMEM, "out of memory for the sampler");
            slot_finish(e, sl, RP_FINISH_ERROR, -1, &err);
        }
    }
    int n_rows, n = build_batch(e, &n_rows);
    if (n == 0)
        return 0;
    /* every row greedy, no logprobs: the argmax on the backend; else every row a plain draw
     * (no penalties, no logprobs, no drafts to verify): the draw on the backend, with the
     * uniform numbers taken here in row order as the host's draws would take them */
    int greedy = n_rows > 0, draw = n_rows > 0;
    for (int i = 0; i < n_rows; i++) {
        slot *sl = e->b_row_slot[i];
        greedy = greedy && sl->req->n_top < 0 && rp_sampler_greedy(sl->sampler);
        draw = draw && sl->req->n_top < 0 && rp_sampler_plain(sl->sampler) && sl->n_draft == 0;
    }
    draw = draw && !greedy;
    for (int i = 0; i < n_rows && draw; i++) {
        rp_sampler *sp = e->b_row_slot[i]->sampler;
        e->b_u[i] = rp_sampler_next_u(sp);
        e->b_draw[i] = rp_sampler_row(sp, e->b_u[i]);
    }
    rp_batch b = {.n_tok = n, .ids = e->b_ids, .kv = e->b_kv, .want_logits = e->b_want,
                  .argmax = greedy || draw ? e->b_greedy : NULL,
                  .sample = draw ? e->b_draw : NULL};
    rp_err err = {0};
    if (rp_model_eval_batch(e->model, &b, e->logits, &err) != RP_OK) {
        RP_ERROR("forward step failed: %s", err.msg);
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i].phase != SLOT_FREE) {
                rp_kv_truncate(e->slots[i].kv, 0);
                slot_finish(e, &e->slots[i], RP_FINISH_ERROR, -1, &err);
            }
        return 1;
    }
    consume_rows(e, n_rows, b.argmax, draw ? e->b_u : NULL);
    pthread_mutex_lock(&e->mu);
    e->stats.n_steps++;
    e->stats.spec_draft_tokens = e->spec_drafted;
    e->stats.spec_accepted_tokens = e->spec_accepted;
    pool_stats(e);
    pthread_mutex_unlock(&e->mu);
    return 1;
}

static int n_active(const rp_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        n += e->slots[i].phase != SLOT_FREE;
    return n;
}

/* Unlinks cancelled waiting requests (all of them when stopping); called with mu held. */
static request *take_cancelled(rp_engine *e)
{
    request *out = NULL, **pp = &e->head;
    e->tail = NULL;
    while (*pp) {
        request *r = *pp;
        if (e->stop || atomic_load(&r->cancelled)) {
            *pp = r->next;
            r->next = out;
            out = r;
            e->n_waiting--;
        } else {
            e->tail = r;
            pp = &r->next;
        }
    }
    return out;
}

static void *engine_main(void *p)
{
    rp_engine *e = p;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->head && !e->stop && n_active(e) == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        request *gone = take_cancelled(e);
        admit(e);
        int quit = e->stop && n_active(e) == 0;
        pthread_mutex_unlock(&e->mu);
        while (gone) { /* callbacks run without mu: they may call back into the engine */
            request *next = gone->next;
            finish(gone, RP_FINISH_CANCELLED, -1, 0, 0, NULL);
            request_free(gone);
            gone = next;
        }
        if (quit)
            break;
        step(e); /* running slots see e->stop / their flag and finish as cancelled */
    }
    return NULL;
}

static void slots_free(rp_engine *e)
{
    if (!e->slots)
        return;
    for (int i = 0; i < e->n_slots; i++) {
        rp_kv_free(e->slots[i].kv);
        rp_sampler_free(e->slots[i].sampler);
        rp_free(e->slots[i].draft);
    }
    rp_free(e->slots);
}

static rp_status alloc_buffers(rp_engine *e, rp_err *err)
{
    int max = rp_model_max_batch(e->model);
    size_t vocab = (size_t)rp_model_get_info(e->model)->vocab_size;
    e->slots = rp_calloc((size_t)e->n_slots, sizeof(slot));
    e->b_ids = rp_alloc(sizeof(int32_t) * (size_t)max);
    e->b_kv = rp_alloc(sizeof(rp_kv *) * (size_t)max);
    e->b_want = rp_alloc((size_t)max);
    e->b_row_slot = rp_alloc(sizeof(slot *) * (size_t)max);
    e->b_greedy = rp_alloc(sizeof(int32_t) * (size_t)max);
    e->b_draw = rp_alloc(sizeof(rp_sample_row) * (size_t)max);
    e->b_u = rp_alloc(sizeof(double) * (size_t)max);
    e->max_rows = e->n_slots * (1 + e->cfg.spec_tokens);
    e->max_rows = e->max_rows < max ? e->max_rows : max;
    e->logits = rp_alloc_aligned(sizeof(float) * vocab * (size_t)e->max_rows, RP_TAG_MODEL);
    if (!e->slots || !e->b_ids || !e->b_kv || !e->b_want || !e->b_row_slot || !e->b_greedy ||
        !e->b_draw || !e->b_u || !e->logits)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < e->n_slots && e->cfg.spec_tokens > 0; i++)
        if (!(e->slots[i].draft = rp_alloc(sizeof(int32_t) * (size_t)e->cfg.spec_tokens)))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int per_seq = (e->ctx + RP_KV_BLOCK_TOKENS - 1) / RP_KV_BLOCK_TOKENS;
    rp_kv_pool_opts po = {.dtype = e->cfg.kv_dtype,
                          .n_blocks = e->cfg.kv_blocks,
                          .max_bytes = (size_t)(e->cfg.kv_cache_mb * 1048576.0),
                          .prefix_cache = !e->cfg.no_prefix_cache};
    if (po.n_blocks <= 0 && e->cfg.kv_cache_mb <= 0)
        po.n_blocks = e->n_slots * (per_seq + 1);
    rp_status rc = rp_kv_pool_new(e->model, &po, &e->pool, err);
    if (rc)
        return rc;
    rp_kv_pool_stats ps;
    rp_kv_pool_get_stats(e->pool, &ps);
    e->n_blocks = ps.n_blocks;
    for (int i = 0; i < e->n_slots; i++)
        if ((rc = rp_kv_new_in(e->pool, e->ctx, &e->slots[i].kv, err)))
            return rc;
    pool_stats(e);
    RP_INFO("KV cache: %d blocks of %d tokens, %s, %.1f MiB (%.0f bytes per token)",
            ps.n_blocks, ps.block_tokens, rp_kv_dtype_name(e->cfg.kv_dtype),
            (double)ps.bytes / 1048576.0, ps.bytes_per_token);
    return RP_OK;
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
    if (e->cfg.max_num_seqs <= 0)
        e->cfg.max_num_seqs = 8;
    if (e->cfg.prefill_chunk <= 0)
        e->cfg.prefill_chunk = 64;
    if (e->cfg.spec_tokens < 0)
        e->cfg.spec_tokens = 0;
    if (e->cfg.spec_tokens > RP_MAX_SPEC_TOKENS)
        e->cfg.spec_tokens = RP_MAX_SPEC_TOKENS;
    const rp_model_info *in = rp_model_get_info(model);
    e->ctx = e->cfg.max_context > 0 ? e->cfg.max_context : in->max_context;
    if (e->cfg.max_context <= 0 && e->ctx > 8192)
        e->ctx = 8192;
    int max = rp_model_max_batch(model);
    e->n_slots = e->cfg.max_num_seqs < max ? e->cfg.max_num_seqs : max;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    rp_status rc = alloc_buffers(e, err);
    if (rc)
        goto fail;
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
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL); /* every request gets its DONE before this returns */
    }
    if (e->cfg.spec_tokens > 0 && e->spec_drafted > 0)
        RP_INFO("speculative decoding: %lld of %lld drafts accepted (%.0f%%), %lld tokens in "
                "%lld steps", (long long)e->spec_accepted, (long long)e->spec_drafted,
                100.0 * (double)e->spec_accepted / (double)e->spec_drafted,
                (long long)e->stats.n_generated, (long long)e->stats.n_steps);
    slots_free(e);
    rp_kv_pool_free(e->pool);
    rp_free(e->b_ids);
    rp_free(e->b_kv);
    rp_free(e->b_want);
    rp_free(e->b_row_slot);
    rp_free(e->b_greedy);
    rp_free(e->b_draw);
    rp_free(e->b_u);
    rp_free_aligned(e->logits);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    rp_free(e);
}

void rp_engine_get_stats(rp_engine *e, rp_engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->n_waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
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
    int n_final = q->max_tokens > 0 ? q->n_prompt + q->max_tokens : e->ctx;
    int n_blocks = (n_final + RP_KV_BLOCK_TOKENS - 1) / RP_KV_BLOCK_TOKENS;
    if (n_blocks > e->n_blocks)
        return rp_err_set(err, RP_ERR_INVALID,
                          "%d prompt tokens + max_tokens %d need %d KV blocks of %d tokens but "
                          "the whole KV cache has %d: raise --kv-cache-mb or lower max_tokens",
                          q->n_prompt, q->max_tokens > 0 ? q->max_tokens : e->ctx - q->n_prompt,
                          n_blocks, RP_KV_BLOCK_TOKENS, e->n_blocks);
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
    for (request *r = e->head; r; r = r->next)
        if (r->id == id)
            atomic_store(&r->cancelled, 1);
    for (int i = 0; i < e->n_slots; i++) /* slot->req changes only on the engine thread */
        if (e->slots[i].req && e->slots[i].req->id == id)
            atomic_store(&e->slots[i].req->cancelled, 1);
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
