/* api/standin/standin_engine.c - stand-in for engine/engine.h (see standin.h): one engine
 * thread, requests served in order, each emitting pseudo-random words one byte-token at a
 * time. The same seed (or temperature 0 and the same prompt) gives the same text.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "engine/engine.h"

static const char *const g_words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy",
                                      "dog", "and", "a", "cat", "sleeps", "in", "sun", "while",
                                      "birds", "sing", "loud", "songs", "today"};

typedef struct job {
    struct job *next;
    uint64_t id;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    uint64_t rng;
    int cancelled;
    rp_event_cb cb;
    void *user;
    double t_submit;
} job;

struct rp_engine {
    rp_model *model;
    int max_queue, n_ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail, *running; /* under mu */
    int n_queued;
    uint64_t next_id;
    int stopping;
    pthread_t thread;
};

void rp_sampling_default(rp_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void finish(job *j, rp_finish f, int n_generated, double t_first)
{
    rp_event ev = {.kind = RP_EV_DONE, .request_id = j->id, .finish = f,
                   .n_prompt = j->n_prompt, .n_generated = n_generated,
                   .t_first_token_s = t_first, .t_total_s = rp_now_s() - j->t_submit};
    j->cb(&ev, j->user);
}

static int is_cancelled(rp_engine *e, job *j)
{
    pthread_mutex_lock(&e->mu);
    int c = j->cancelled || e->stopping;
    pthread_mutex_unlock(&e->mu);
    return c;
}

static void run_job(rp_engine *e, job *j)
{
    int n = 0;
    double t_first = 0;
    const char *word = NULL;
    size_t pos = 0;
    struct timespec pause = {0, 1000000};
    while (n < j->max_tokens) {
        if (is_cancelled(e, j)) {
            finish(j, RP_FINISH_CANCELLED, n, t_first);
            return;
        }
        nanosleep(&pause, NULL);
        if (n >= 12 && next_rand(&j->rng) % 400 == 0) {
            finish(j, RP_FINISH_STOP, n, t_first);
            return;
        }
        if (!word || !word[pos]) {
            word = g_words[next_rand(&j->rng) % RP_ARRAY_LEN(g_words)];
            pos = 0;
            if (n > 0) { /* a space between words */
                rp_event sp = {.kind = RP_EV_TOKEN, .request_id = j->id, .token = ' '};
                j->cb(&sp, j->user);
                n++;
                continue;
            }
        }
        rp_event ev = {.kind = RP_EV_TOKEN, .request_id = j->id, .token = word[pos++],
                       .logprob = -0.5f};
        if (n == 0)
            t_first = rp_now_s() - j->t_submit;
        j->cb(&ev, j->user);
        n++;
    }
    finish(j, RP_FINISH_LENGTH, n, t_first);
}

static void *engine_main(void *arg)
{
    rp_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stopping)
            pthread_cond_wait(&e->cv, &e->mu);
        job *j = e->head;
        if (!j)
            break;
        e->head = j->next;
        if (!e->head)
            e->tail = NULL;
        e->n_queued--;
        e->running = j;
        pthread_mutex_unlock(&e->mu);
        if (j->cancelled || e->stopping)
            finish(j, RP_FINISH_CANCELLED, 0, 0);
        else
            run_job(e, j);
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        rp_free(j->prompt);
        rp_free(j);
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
    e->max_queue = cfg && cfg->max_queue > 0 ? cfg->max_queue : 64;
    int ctx = rp_model_get_info(model)->max_context;
    e->n_ctx = cfg && cfg->max_context > 0 ? cfg->max_context : (ctx > 32768 ? 32768 : ctx);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        rp_free(e);
        return rp_err_set(err, RP_ERR_IO, "cannot start the engine thread");
    }
    *out = e;
    return RP_OK;
}

void rp_engine_free(rp_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL); /* drains the queue: every job gets its DONE */
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    rp_free(e);
}

rp_status rp_engine_submit(rp_engine *e, const rp_gen_request *req, rp_event_cb cb, void *user,
                           uint64_t *out_id, rp_err *err)
{
    if (req->n_prompt <= 0)
        return rp_err_set(err, RP_ERR_INVALID, "the prompt is empty");
    if (req->n_prompt >= e->n_ctx)
        return rp_err_set(err, RP_ERR_LIMIT, "the prompt is %d tokens; the context holds %d",
                          req->n_prompt, e->n_ctx);
    job *j = rp_calloc(1, sizeof *j);
    int32_t *p = rp_alloc((size_t)req->n_prompt * sizeof(int32_t));
    if (!j || !p) {
        rp_free(j);
        rp_free(p);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    memcpy(p, req->prompt, (size_t)req->n_prompt * sizeof(int32_t));
    j->prompt = p;
    j->n_prompt = req->n_prompt;
    int room = e->n_ctx - req->n_prompt;
    j->max_tokens = req->max_tokens > 0 && req->max_tokens < room ? req->max_tokens : room;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < req->n_prompt; i++)
        h = (h ^ (uint64_t)req->prompt[i]) * 1099511628211ull;
    if (req->sampling.has_seed)
        h ^= req->sampling.seed * 0x9e3779b97f4a7c15ull;
    else if (req->sampling.temperature > 0)
        h ^= (uint64_t)rp_now_ns();
    j->rng = h ? h : 1;
    j->cb = cb;
    j->user = user;
    j->t_submit = rp_now_s();
    pthread_mutex_lock(&e->mu);
    if (e->n_queued >= e->max_queue || e->stopping) {
        pthread_mutex_unlock(&e->mu);
        rp_free(p);
        rp_free(j);
        return rp_err_set(err, RP_ERR_LIMIT, "the request queue is full (%d waiting); retry later",
                          e->max_queue);
    }
    j->id = ++e->next_id;
    if (e->tail)
        e->tail->next = j;
    else
        e->head = j;
    e->tail = j;
    e->n_queued++;
    *out_id = j->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return RP_OK;
}

void rp_engine_cancel(rp_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    if (e->running && e->running->id == id)
        e->running->cancelled = 1;
    for (job *j = e->head; j; j = j->next)
        if (j->id == id)
            j->cancelled = 1;
    pthread_mutex_unlock(&e->mu);
}

int rp_engine_context_length(const rp_engine *e) { return e->n_ctx; }
rp_model *rp_engine_model(const rp_engine *e) { return e->model; }
