/* api/pipeline.c - chat request -> prompt -> engine -> visible text (see api/pipeline.h).
 *
 * Design notes:
 *  1. The engine callback runs on the engine thread and only appends a copy of the event
 *     to the generation's queue (mutex + condition variable); all text work happens on the
 *     HTTP thread inside rp_gen_next.
 *  2. A generation is freed only after its DONE event arrived: the engine holds the rp_gen
 *     pointer as `user` until then. rp_gen_free cancels and waits.
 *  3. Tokens after a matched stop string are ignored (the engine may deliver a few more
 *     before our cancel reaches it); usage counts the tokens up to the match.
 *  4. Text flows detokenizer -> stopper -> output parser (when the model has one and the
 *     request wants it) -> pieces. Stop strings apply to the raw model text, before any
 *     markup is interpreted, so a stop string cuts a tool call as it cuts text.
 *  5. Pieces are recorded as offsets into one buffer during a step and turned into pointers
 *     at its end, so the buffer may grow while the parser reports.
 *  6. tool_choice "required" / named (the reply must be a call). Guarantee, in three parts:
 *     a. priming: the format's call opener (rp_output_parser_call_prefix, naming the function
 *        when named) is appended to the rendered prompt after the generation prompt, closing
 *        an open think block first, and fed to the parser, so the model continues inside a
 *        call of that function;
 *     b. holding: no piece leaves the generation until its end (streams included), so nothing
 *        that is not a call can reach the client;
 *     c. checking at the end: at least one call parsed and every call names a requested tool
 *        (named: exactly one call, to that function; generation stops once it closed).
 *        Otherwise the request fails with a server error that quotes the start of the reply,
 *        never a made-up call and never a call-less success.
 */
#include "api/pipeline.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "api/metrics.h"
#include "api/stopper.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/log.h"
#include "chat/output_parser.h"
#include "chat/template.h"
#include "model/model.h"

/* Used when the model ships no chat template: plain ChatML. */
static const char g_chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct rp_pipeline {
    rp_engine *engine;
    const rp_tokenizer *tok;
    rp_template *tmpl;
    char *name, *alias, *fingerprint;
    int n_ctx;
    int32_t stop_ids[2];
    int n_stop_ids;
    const char *tool_parser, *reasoning_parser; /* static names, NULL: none */
    rp_metrics *metrics; /* NULL: none (borrowed, set before serving) */
};

typedef struct piece_rec {
    rp_piece_kind kind;
    int index;
    size_t off, len, id_off, name_off;
} piece_rec;

typedef struct ev_node {
    struct ev_node *next;
    rp_event ev;
    double t; /* arrival (rp_now_s), for the metrics */
} ev_node;

struct rp_gen {
    rp_pipeline *p;
    uint64_t id;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ev_node *head, *tail; /* under mu */
    int done_received;    /* under mu: the engine delivered DONE */
    /* consumer side (one thread) */
    rp_detok *detok;
    rp_stopper stopper;
    char *stops[RP_MAX_STOP];
    int n_stops;
    int want_logprobs;
    rp_buf visible, raw, stopped;
    json_t *logprobs; /* entries since the last delta */
    rp_output_parser *parser; /* NULL: all text is content */
    char *call_prefix;        /* fed to the parser before the first output (tool_choice) */
    int forced;               /* design note 6: 1 required, 2 named; pieces held until done */
    int forced_stop;          /* named: the call closed and the generation was cancelled */
    json_t *tools;            /* forced: the request's tools (names to check), own ref */
    char *forced_name;        /* named: the function */
    const char *tool_parser;  /* forced: the format (for messages) */
    int anthropic_ids;
    rp_buf piece_text;        /* design note 5 */
    piece_rec *recs;
    int n_recs, cap_recs;
    rp_gen_piece *pieces;
    int cap_pieces;
    int n_prompt, n_completion;
    int finished; /* 1 once DONE was reported */
    rp_gen_output final;
    rp_metrics_req *mr; /* live metrics record, NULL: none or ended */
};

/* ---- the pipeline ------------------------------------------------------------------- */

rp_status rp_pipeline_new(rp_engine *engine, const rp_tokenizer *tok,
                          const rp_pipeline_config *cfg, rp_pipeline **out, rp_err *err)
{
    *out = NULL;
    rp_pipeline *p = rp_calloc(1, sizeof *p);
    if (!p)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    p->engine = engine;
    p->tok = tok;
    p->n_ctx = rp_engine_context_length(engine);
    const char *src = rp_tokenizer_chat_template(tok, NULL);
    if (!src) {
        RP_WARN("the model has no chat template; using ChatML");
        src = g_chatml;
    }
    char fp[64];
    snprintf(fp, sizeof fp, "fp_rapid_%s", RP_VERSION);
    p->name = rp_strdup(cfg->served_name ? cfg->served_name : "default");
    p->alias = cfg->alias ? rp_strdup(cfg->alias) : NULL;
    p->fingerprint = rp_strdup(cfg->fingerprint ? cfg->fingerprint : fp);
    if (!p->name || !p->fingerprint || (cfg->alias && !p->alias)) {
        rp_pipeline_free(p);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    rp_status st = rp_template_new(src, strlen(src), &p->tmpl, err);
    if (st != RP_OK) {
        rp_pipeline_free(p);
        return rp_err_wrap(err, "chat template");
    }
    const char *tool = cfg->tool_parser, *reasoning = cfg->reasoning_parser;
    if (!tool || !reasoning) {
        const char *dt = NULL, *dr = NULL;
        rp_output_parser_detect(src == g_chatml ? NULL : src,
                                rp_model_get_info(rp_engine_model(engine))->model_type, &dt, &dr);
        tool = tool ? tool : dt;
        reasoning = reasoning ? reasoning : dr;
    }
    if (tool && (!strcmp(tool, "none") || !*tool))
        tool = NULL;
    if (reasoning && (!strcmp(reasoning, "none") || !*reasoning))
        reasoning = NULL;
    if ((tool && !rp_output_parser_has_tool(tool)) ||
        (reasoning && !rp_output_parser_has_reasoning(reasoning))) {
        rp_pipeline_free(p);
        return rp_err_set(err, RP_ERR_NOT_FOUND, "unknown %s parser '%s'",
                          tool && !rp_output_parser_has_tool(tool) ? "tool-call" : "reasoning",
                          tool && !rp_output_parser_has_tool(tool) ? tool : reasoning);
    }
    /* the names are static in output_parser.c, or the caller's strings (cfg lifetime) */
    for (const char *const *n = rp_output_parser_tool_names(); tool && *n; n++)
        if (!strcmp(*n, tool))
            tool = *n;
    for (const char *const *n = rp_output_parser_reasoning_names(); reasoning && *n; n++)
        if (!strcmp(*n, reasoning))
            reasoning = *n;
    p->tool_parser = tool;
    p->reasoning_parser = reasoning;
    RP_INFO("output parsers: tool calls %s, reasoning %s", tool ? tool : "none",
            reasoning ? reasoning : "none");
    int32_t eos = rp_tokenizer_eos_id(tok);
    if (eos >= 0)
        p->stop_ids[p->n_stop_ids++] = eos;
    int32_t im_end = rp_tokenizer_token_id(tok, "<|im_end|>");
    if (im_end >= 0 && im_end != eos)
        p->stop_ids[p->n_stop_ids++] = im_end;
    *out = p;
    return RP_OK;
}

void rp_pipeline_free(rp_pipeline *p)
{
    if (!p)
        return;
    rp_template_free(p->tmpl);
    rp_free(p->name);
    rp_free(p->alias);
    rp_free(p->fingerprint);
    rp_free(p);
}

const char *rp_pipeline_model_name(const rp_pipeline *p) { return p->name; }
const char *rp_pipeline_model_alias(const rp_pipeline *p) { return p->alias; }
const char *rp_pipeline_fingerprint(const rp_pipeline *p) { return p->fingerprint; }
int rp_pipeline_context_length(const rp_pipeline *p) { return p->n_ctx; }
rp_engine *rp_pipeline_engine(const rp_pipeline *p) { return p->engine; }
void rp_pipeline_set_metrics(rp_pipeline *p, rp_metrics *m) { p->metrics = m; }

int rp_pipeline_model_matches(const rp_pipeline *p, const char *name)
{
    return !name || !strcmp(name, p->name) || !strcmp(name, "default") ||
           (p->alias && !strcmp(name, p->alias));
}

/* The template context: messages, tools, add_generation_prompt, bos/eos, options. */
static json_t *template_context(const rp_pipeline *p, const rp_chat_request *req)
{
    const char *bos = rp_tokenizer_bos_str(p->tok), *eos = rp_tokenizer_eos_str(p->tok);
    json_t *ctx = json_pack("{s:O, s:b, s:s, s:s}", "messages", req->messages,
                            "add_generation_prompt", 1, "bos_token", bos ? bos : "", "eos_token",
                            eos ? eos : "");
    if (!ctx)
        return NULL;
    if (req->tools && req->tool_choice && strcmp(req->tool_choice, "none") != 0)
        json_object_set(ctx, "tools", req->tools);
    else if (req->tools && !req->tool_choice)
        json_object_set(ctx, "tools", req->tools);
    if (req->tool_choice)
        json_object_set_new(ctx, "tool_choice", json_string(req->tool_choice));
    if (req->enable_thinking >= 0)
        json_object_set_new(ctx, "enable_thinking", json_boolean(req->enable_thinking));
    return ctx;
}

static rp_status parser_event(void *user, const rp_parse_event *ev);

static void make_tool_id(void *user, int index, char *out, size_t cap)
{
    char id[48];
    rp_api_make_id("toolu_", id, sizeof id);
    snprintf(out, cap, "%s", id);
}

/* 1 when the (OpenAI-shaped) tools array has a function called name. */
static int has_tool(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name))
            return 1;
    }
    return 0;
}

/* The output parser of a chat generation. The rendered prompt says whether the output starts
 * inside a think block; tool_choice required/named appends the format's call opener to it
 * (and feeds the same opener to the parser, so the reply starts inside a call). */
static rp_status setup_parser(const rp_pipeline *p, const rp_chat_request *req, rp_gen *g,
                              rp_buf *prompt, rp_err *err)
{
    int want_tools = req->tools && !(req->tool_choice && !strcmp(req->tool_choice, "none"));
    const char *tool = want_tools ? p->tool_parser : NULL;
    const char *tc = req->tool_choice;
    if (tc && strcmp(tc, "auto") && strcmp(tc, "none")) { /* required or named */
        const char *what = strcmp(tc, "required") ? "a named function" : "'required'";
        if (!req->tools)
            return rp_err_set(err, RP_ERR_INVALID, "tool_choice %s needs 'tools'", what);
        if (!p->tool_parser)
            return rp_err_set(err, RP_ERR_INVALID,
                              "tool_choice %s: the served model has no known tool-call format "
                              "(start rapid serve with --tool-call-parser NAME)",
                              what);
        if (strcmp(tc, "required") && !has_tool(req->tools, tc))
            return rp_err_set(err, RP_ERR_INVALID,
                              "tool_choice names the function '%s', which is not in 'tools'", tc);
    }
    if (!tool && !p->reasoning_parser)
        return RP_OK;
    int opened = rp_output_parser_think_opened(p->reasoning_parser, prompt->data, prompt->len);
    if (tool && req->tool_choice && strcmp(req->tool_choice, "auto") != 0) {
        const char *name = strcmp(req->tool_choice, "required") ? req->tool_choice : NULL;
        g->forced = name ? 2 : 1;
        g->tool_parser = tool;
        g->tools = json_incref(req->tools);
        if (name && !(g->forced_name = rp_strdup(name)))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        rp_status st = rp_output_parser_call_prefix(tool, name, &g->call_prefix, err);
        if (st != RP_OK)
            return st;
        const char *close = opened ? rp_output_parser_reasoning_close(p->reasoning_parser) : "";
        size_t nc = strlen(close);
        if (nc) { /* the reply starts with the call: the open think block ends empty */
            char *both = rp_alloc(nc + 2 + strlen(g->call_prefix) + 1);
            if (!both)
                return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            memcpy(both, close, nc);
            memcpy(both + nc, "\n\n", 2);
            strcpy(both + nc + 2, g->call_prefix);
            rp_free(g->call_prefix);
            g->call_prefix = both;
        }
        if (rp_buf_puts(prompt, g->call_prefix) != RP_OK)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    rp_output_parser_config cfg = {
        .tool_parser = tool,
        .reasoning_parser = p->reasoning_parser,
        .tools = want_tools ? req->tools : NULL,
        .think_opened = opened,
        .on_event = parser_event,
        .user = g,
        .gen_id = g->anthropic_ids ? make_tool_id : NULL,
    };
    return rp_output_parser_new(&cfg, &g->parser, err);
}

/* Prompt tokens for a request: rendered chat, completion text, or completion ids. With a
 * generation g, a chat request also gets its output parser (setup_parser). */
static rp_status prompt_ids(const rp_pipeline *p, const rp_chat_request *req, rp_gen *g,
                            int32_t **ids, int *n, rp_api_error *e)
{
    rp_err err = {0};
    rp_status st;
    *ids = NULL;
    *n = 0;
    if (req->type == RP_REQ_COMPLETION && !req->prompt) {
        int vocab = rp_tokenizer_vocab_size(p->tok);
        for (int i = 0; i < req->n_prompt_ids; i++)
            if (req->prompt_ids[i] >= vocab)
                return rp_api_error_set(e, RP_APIERR_INVALID, "prompt",
                                        "token id %d is out of range (vocabulary of %d)",
                                        req->prompt_ids[i], vocab);
        *ids = rp_alloc((size_t)req->n_prompt_ids * sizeof(int32_t));
        if (!*ids)
            return rp_api_error_set(e, RP_APIERR_INTERNAL, NULL, "out of memory");
        memcpy(*ids, req->prompt_ids, (size_t)req->n_prompt_ids * sizeof(int32_t));
        *n = req->n_prompt_ids;
        return RP_OK;
    }
    if (req->type == RP_REQ_COMPLETION) {
        st = rp_tokenizer_encode(p->tok, req->prompt, strlen(req->prompt), 1, ids, n, &err);
    } else {
        json_t *ctx = template_context(p, req);
        rp_buf prompt = {0};
        char *text = NULL;
        size_t len = 0;
        st = ctx ? rp_template_render(p->tmpl, ctx, &text, &len, &err)
                 : rp_err_set(&err, RP_ERR_NOMEM, "out of memory");
        json_decref(ctx);
        if (st != RP_OK)
            rp_err_wrap(&err, "chat template");
        else if (rp_buf_append(&prompt, text ? text : "", len) != RP_OK)
            st = rp_err_set(&err, RP_ERR_NOMEM, "out of memory");
        rp_free(text);
        if (st == RP_OK && g)
            st = setup_parser(p, req, g, &prompt, &err);
        if (st == RP_ERR_INVALID) { /* tool_choice the request cannot have */
            rp_buf_deinit(&prompt);
            return rp_api_error_set(e, RP_APIERR_INVALID, "tool_choice", "%s", err.msg);
        }
        if (st == RP_OK)
            st = rp_tokenizer_encode(p->tok, prompt.data ? prompt.data : "", prompt.len, 0, ids,
                                     n, &err);
        rp_buf_deinit(&prompt);
    }
    if (st != RP_OK) {
        rp_api_error_from_err(e, &err);
        if (e->kind == RP_APIERR_MODEL_NOT_FOUND || e->kind == RP_APIERR_OVERLOADED)
            e->kind = RP_APIERR_INTERNAL;
    }
    return st;
}

rp_status rp_pipeline_count_tokens(const rp_pipeline *p, const rp_chat_request *req, int *out_n,
                                   rp_api_error *e)
{
    int32_t *ids;
    rp_status st = prompt_ids(p, req, NULL, &ids, out_n, e);
    rp_free(ids);
    return st;
}

/* ---- one generation ----------------------------------------------------------------- */

static void on_event(const rp_event *ev, void *user)
{
    rp_gen *g = user;
    ev_node *n = rp_alloc(sizeof *n);
    pthread_mutex_lock(&g->mu);
    if (n) {
        n->next = NULL;
        n->ev = *ev;
        n->t = rp_now_s();
        if (g->tail)
            g->tail->next = n;
        else
            g->head = n;
        g->tail = n;
    }
    if (ev->kind == RP_EV_DONE)
        g->done_received = 1; /* even without memory for the node, DONE is known */
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static rp_gen *gen_alloc(rp_pipeline *p, const rp_chat_request *req)
{
    rp_gen *g = rp_calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->p = p;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    int tools = p->tool_parser && req->tools &&
                !(req->tool_choice && !strcmp(req->tool_choice, "none"));
    g->detok = rp_detok_new(p->tok, !tools); /* tool markers may be special tokens */
    g->anthropic_ids = req->api == RP_API_ANTHROPIC;
    for (int i = 0; i < req->n_stop; i++)
        if ((g->stops[g->n_stops] = rp_strdup(req->stop[i])))
            g->n_stops++;
    rp_stopper_init(&g->stopper, g->stops, g->n_stops);
    g->want_logprobs = req->logprobs;
    if (!g->detok || g->n_stops != req->n_stop) {
        rp_gen_free(g);
        return NULL;
    }
    return g;
}

rp_status rp_gen_start(rp_pipeline *p, const rp_chat_request *req, rp_gen **out, rp_api_error *e)
{
    *out = NULL;
    int32_t *ids;
    int n;
    double t_start = rp_now_s();
    rp_gen *g = gen_alloc(p, req);
    if (!g)
        return rp_api_error_set(e, RP_APIERR_INTERNAL, NULL, "out of memory");
    g->done_received = 1; /* not submitted yet: nothing to wait for on free */
    rp_status st = prompt_ids(p, req, g, &ids, &n, e);
    if (st != RP_OK) {
        rp_gen_free(g);
        return st;
    }
    if (n == 0) {
        rp_free(ids);
        rp_gen_free(g);
        return rp_api_error_set(e, RP_APIERR_INVALID, "prompt", "the prompt is empty");
    }
    if (n >= p->n_ctx) {
        rp_free(ids);
        rp_gen_free(g);
        return rp_api_error_set(e, RP_APIERR_CONTEXT, req->type == RP_REQ_COMPLETION ? "prompt"
                                                                                     : "messages",
                                "the prompt is %d tokens, but the model's context window is %d "
                                "tokens; shorten the prompt",
                                n, p->n_ctx);
    }
    if (g->call_prefix && g->parser) {
        rp_err perr;
        rp_output_parser_feed(g->parser, g->call_prefix, strlen(g->call_prefix), &perr);
    }
    int room = p->n_ctx - n;
    rp_gen_request gr = {
        .prompt = ids,
        .n_prompt = n,
        .max_tokens = req->max_tokens > 0 && req->max_tokens < room ? req->max_tokens : room,
        .sampling = req->sampling,
        .stop_ids = p->stop_ids,
        .n_stop_ids = p->n_stop_ids,
        .n_top_logprobs = req->logprobs ? req->top_logprobs : -1,
    };
    g->n_prompt = n;
    rp_err err = {0};
    g->done_received = 0;
    st = rp_engine_submit(p->engine, &gr, on_event, g, &g->id, &err);
    rp_free(ids);
    if (st != RP_OK) {
        g->done_received = 1; /* never submitted: nothing to wait for */
        rp_gen_free(g);
        rp_api_error_from_err(e, &err);
        return st;
    }
    g->mr = rp_metrics_req_begin(p->metrics, req, g->id, n, t_start);
    *out = g;
    return RP_OK;
}

int rp_gen_n_prompt(const rp_gen *g) { return g->n_prompt; }
int rp_gen_n_completion(const rp_gen *g) { return g->n_completion; }

void rp_gen_cancel(rp_gen *g)
{
    if (g)
        rp_engine_cancel(g->p->engine, g->id);
}

static rp_status add_piece(rp_gen *g, rp_piece_kind kind, int index, const char *text,
                           size_t len, const char *id, const char *name)
{
    if (g->n_recs == g->cap_recs) {
        int cap = g->cap_recs ? 2 * g->cap_recs : 8;
        piece_rec *r = rp_realloc(g->recs, (size_t)cap * sizeof *r);
        if (!r)
            return RP_ERR_NOMEM;
        g->recs = r;
        g->cap_recs = cap;
    }
    piece_rec *r = &g->recs[g->n_recs];
    *r = (piece_rec){.kind = kind, .index = index, .off = g->piece_text.len, .len = len};
    rp_status st = rp_buf_append(&g->piece_text, text ? text : "", len);
    if (st == RP_OK && kind == RP_PIECE_TOOL_START) {
        r->id_off = g->piece_text.len;
        st = rp_buf_append(&g->piece_text, id, strlen(id) + 1);
        r->name_off = g->piece_text.len;
        if (st == RP_OK)
            st = rp_buf_append(&g->piece_text, name, strlen(name) + 1);
    }
    if (st == RP_OK && kind == RP_PIECE_CONTENT)
        st = rp_buf_append(&g->visible, text, len);
    if (st == RP_OK)
        g->n_recs++;
    return st;
}

static rp_status parser_event(void *user, const rp_parse_event *ev)
{
    static const rp_piece_kind kinds[] = {
        [RP_PARSE_CONTENT] = RP_PIECE_CONTENT,       [RP_PARSE_REASONING] = RP_PIECE_REASONING,
        [RP_PARSE_TOOL_START] = RP_PIECE_TOOL_START, [RP_PARSE_TOOL_ARGS] = RP_PIECE_TOOL_ARGS,
        [RP_PARSE_TOOL_END] = RP_PIECE_TOOL_END,
    };
    return add_piece(user, kinds[ev->kind], ev->index, ev->text, ev->len, ev->id, ev->name);
}

/* Text that passed the stop strings: to the output parser, or straight to content. */
static rp_status release(rp_gen *g, const char *text, size_t len)
{
    if (len == 0)
        return RP_OK;
    if (!g->parser)
        return add_piece(g, RP_PIECE_CONTENT, 0, text, len, NULL, NULL);
    rp_err err;
    return rp_output_parser_feed(g->parser, text, len, &err);
}

/* Every piece of detokenized text enters here (design note 4). */
static rp_status emit_text(rp_gen *g, const char *text, size_t len)
{
    rp_buf_reset(&g->stopped);
    rp_status st = rp_stopper_feed(&g->stopper, text, len, &g->stopped);
    return st != RP_OK ? st : release(g, g->stopped.data, g->stopped.len);
}

static json_t *token_entry(const rp_tokenizer *tok, int32_t id, float lp)
{
    char *s = NULL;
    size_t n = 0;
    rp_err err;
    if (rp_tokenizer_decode(tok, &id, 1, 0, &s, &n, &err) != RP_OK)
        n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)s[i]));
    json_t *str = s ? json_stringn(s, n) : NULL;
    rp_free(s);
    return json_pack("{s:o, s:f, s:o}", "token", str ? str : json_string("\xef\xbf\xbd"),
                     "logprob", (double)lp, "bytes", bytes);
}

static void add_logprobs(rp_gen *g, const rp_event *ev)
{
    if (!g->logprobs)
        g->logprobs = json_array();
    json_t *en = token_entry(g->p->tok, ev->token, ev->logprob);
    json_t *tops = json_array();
    for (int i = 0; i < ev->n_top; i++)
        json_array_append_new(tops, token_entry(g->p->tok, ev->top_ids[i], ev->top_logprobs[i]));
    json_object_set_new(en, "top_logprobs", tops);
    json_array_append_new(g->logprobs, en);
}

static rp_gen_finish finish_of(rp_finish f)
{
    switch (f) {
    case RP_FINISH_STOP: return RP_GEN_FINISH_STOP;
    case RP_FINISH_LENGTH: return RP_GEN_FINISH_LENGTH;
    case RP_FINISH_CANCELLED: return RP_GEN_FINISH_CANCELLED;
    default: return RP_GEN_FINISH_ERROR;
    }
}

static void check_forced(rp_gen *g, rp_gen_output *f);

static void handle_done(rp_gen *g, const rp_event *ev)
{
    rp_gen_output *f = &g->final;
    if (g->stopper.matched < 0) {
        rp_buf_reset(&g->raw);
        rp_detok_flush(g->detok, &g->raw);
        emit_text(g, g->raw.data ? g->raw.data : "", g->raw.len);
        rp_buf_reset(&g->stopped);
        rp_stopper_flush(&g->stopper, &g->stopped);
        release(g, g->stopped.data, g->stopped.len);
    }
    rp_err perr;
    if (g->parser)
        rp_output_parser_finish(g->parser, &perr);
    if (g->stopper.matched >= 0) {
        f->finish = RP_GEN_FINISH_STOP_SEQUENCE;
        f->stop_sequence = g->stops[g->stopper.matched];
    } else {
        f->finish = finish_of(ev->finish);
        if (f->finish == RP_GEN_FINISH_ERROR)
            rp_api_error_from_err(&f->err, &ev->err);
    }
    if (g->parser && rp_output_parser_n_calls(g->parser) > 0 &&
        (f->finish == RP_GEN_FINISH_STOP || f->finish == RP_GEN_FINISH_STOP_SEQUENCE))
        f->finish = RP_GEN_FINISH_TOOL_CALLS;
    if (g->forced_stop && f->finish == RP_GEN_FINISH_CANCELLED)
        f->finish = RP_GEN_FINISH_TOOL_CALLS;
    f->n_prompt = g->n_prompt;
    f->n_completion = g->n_completion;
    if (g->forced)
        check_forced(g, f);
}

/* Design note 6c: the held reply of a required / named tool_choice must be valid calls. */
static void check_forced(rp_gen *g, rp_gen_output *f)
{
    if (f->finish == RP_GEN_FINISH_ERROR || f->finish == RP_GEN_FINISH_CANCELLED)
        return;
    const char *bad = NULL;
    int n_calls = 0;
    for (int i = 0; i < g->n_recs && !bad; i++) {
        const piece_rec *r = &g->recs[i];
        if (r->kind != RP_PIECE_TOOL_START)
            continue;
        const char *name = g->piece_text.data + r->name_off;
        n_calls++;
        if (g->forced == 2 ? strcmp(name, g->forced_name) != 0 : !has_tool(g->tools, name))
            bad = name;
    }
    if (n_calls > 0 && !bad)
        return;
    const char *want = g->forced == 2 ? g->forced_name : NULL;
    const char *said = g->visible.data ? g->visible.data : "";
    int n_said = g->visible.len > 160 ? 160 : (int)g->visible.len;
    while (n_said > 0 && n_said < (int)g->visible.len && (said[n_said] & 0xC0) == 0x80)
        n_said--; /* not half a UTF-8 sequence */
    if (!bad && f->finish == RP_GEN_FINISH_LENGTH)
        rp_api_error_set(&f->err, RP_APIERR_INTERNAL, NULL,
                         "tool_choice %s%s%s: the reply reached max_tokens (or the context "
                         "window) before its %s tool call closed; raise max_tokens",
                         want ? "'" : "", want ? want : "'required'", want ? "'" : "",
                         g->tool_parser);
    else if (bad)
        rp_api_error_set(&f->err, RP_APIERR_INTERNAL, NULL,
                         "tool_choice %s%s%s: the model called '%s', which %s", want ? "'" : "",
                         want ? want : "'required'", want ? "'" : "", bad,
                         want ? "is another function" : "is not in 'tools'");
    else
        rp_api_error_set(&f->err, RP_APIERR_INTERNAL, NULL,
                         "tool_choice %s%s%s: the model's reply is not a valid %s tool call "
                         "although the reply was primed with the call opener; the reply "
                         "began: \"%.*s\"",
                         want ? "'" : "", want ? want : "'required'", want ? "'" : "",
                         g->tool_parser, n_said, said);
    f->finish = RP_GEN_FINISH_ERROR;
    g->n_recs = 0; /* nothing of it reaches the client */
    rp_buf_reset(&g->visible);
    json_decref(g->logprobs);
    g->logprobs = NULL;
}

static void handle_token(rp_gen *g, const rp_event *ev)
{
    if (g->stopper.matched >= 0 || g->forced_stop)
        return; /* design notes 3 and 6 */
    g->n_completion++;
    if (g->want_logprobs)
        add_logprobs(g, ev);
    rp_buf_reset(&g->raw);
    if (rp_detok_feed(g->detok, ev->token, &g->raw) == RP_OK && g->raw.len > 0)
        emit_text(g, g->raw.data, g->raw.len);
    if (g->stopper.matched >= 0)
        rp_engine_cancel(g->p->engine, g->id);
    if (g->forced == 2 && rp_output_parser_n_calls(g->parser) > 0) { /* the named call closed */
        g->forced_stop = 1;
        rp_engine_cancel(g->p->engine, g->id);
    }
}

/* Pops every queued event, waiting up to timeout_ms for the first. Returns the list. */
static ev_node *take_events(rp_gen *g, int timeout_ms)
{
    pthread_mutex_lock(&g->mu);
    if (!g->head && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!g->head && !(g->done_received && !g->tail))
            if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) != 0)
                break;
    }
    ev_node *list = g->head;
    g->head = g->tail = NULL;
    int lost_done = g->done_received && !list;
    pthread_mutex_unlock(&g->mu);
    if (lost_done && !g->finished) { /* DONE arrived but its node could not be allocated */
        ev_node *n = rp_calloc(1, sizeof *n);
        if (n) {
            n->ev.kind = RP_EV_DONE;
            n->ev.finish = RP_FINISH_ERROR;
            rp_err_set(&n->ev.err, RP_ERR_NOMEM, "out of memory");
        }
        return n;
    }
    return list;
}

rp_gen_step rp_gen_next(rp_gen *g, int timeout_ms, rp_gen_output *out)
{
    memset(out, 0, sizeof *out);
    if (g->finished) {
        *out = g->final;
        return RP_GEN_DONE;
    }
    if (!g->forced) { /* design note 6b: a forced reply keeps its pieces until the end */
        rp_buf_reset(&g->visible);
        rp_buf_reset(&g->piece_text);
        g->n_recs = 0;
        json_decref(g->logprobs);
        g->logprobs = NULL;
    }
    int done = 0;
    ev_node *n = take_events(g, timeout_ms);
    while (n) {
        ev_node *next = n->next;
        if (n->ev.kind == RP_EV_TOKEN && !done) {
            handle_token(g, &n->ev);
            rp_metrics_req_token(g->mr, n->t, g->n_completion);
        } else if (n->ev.kind == RP_EV_DONE && !done) {
            handle_done(g, &n->ev);
            rp_metrics_req_end(g->mr, (int)g->final.finish, g->n_completion, n->t);
            g->mr = NULL;
            done = 1;
        }
        rp_free(n);
        n = next;
    }
    if (g->forced && !done)
        return RP_GEN_TIMEOUT; /* held */
    if (g->n_recs > 0 || g->logprobs) {
        if (g->n_recs > g->cap_pieces) {
            rp_gen_piece *pc = rp_realloc(g->pieces, (size_t)g->n_recs * sizeof *pc);
            if (!pc)
                g->n_recs = 0; /* out of memory: this step's pieces are lost, text too */
            else {
                g->pieces = pc;
                g->cap_pieces = g->n_recs;
            }
        }
        for (int i = 0; i < g->n_recs; i++) { /* design note 5 */
            const piece_rec *r = &g->recs[i];
            const char *base = g->piece_text.data;
            g->pieces[i] = (rp_gen_piece){
                .kind = r->kind, .index = r->index, .text = base + r->off, .len = r->len,
                .id = r->kind == RP_PIECE_TOOL_START ? base + r->id_off : NULL,
                .name = r->kind == RP_PIECE_TOOL_START ? base + r->name_off : NULL};
        }
        out->pieces = g->pieces;
        out->n_pieces = g->n_recs;
        out->text = g->visible.data ? g->visible.data : "";
        out->len = g->visible.len;
        out->logprobs = g->logprobs;
        g->finished = done; /* DONE is reported by the next call */
        return RP_GEN_DELTA;
    }
    if (done) {
        g->finished = 1;
        *out = g->final;
        return RP_GEN_DONE;
    }
    return RP_GEN_TIMEOUT;
}

void rp_gen_free(rp_gen *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    int wait = !g->done_received;
    pthread_mutex_unlock(&g->mu);
    if (wait) { /* design note 2 */
        rp_engine_cancel(g->p->engine, g->id);
        pthread_mutex_lock(&g->mu);
        while (!g->done_received)
            pthread_cond_wait(&g->cv, &g->mu);
        pthread_mutex_unlock(&g->mu);
    }
    rp_metrics_req_end(g->mr, RP_GEN_FINISH_CANCELLED, g->n_completion, rp_now_s());
    for (ev_node *n = g->head; n;) {
        ev_node *next = n->next;
        rp_free(n);
        n = next;
    }
    rp_detok_free(g->detok);
    rp_stopper_deinit(&g->stopper);
    for (int i = 0; i < g->n_stops; i++)
        rp_free(g->stops[i]);
    rp_buf_deinit(&g->visible);
    rp_buf_deinit(&g->raw);
    rp_buf_deinit(&g->stopped);
    rp_buf_deinit(&g->piece_text);
    rp_output_parser_free(g->parser);
    rp_free(g->call_prefix);
    rp_free(g->forced_name);
    json_decref(g->tools);
    rp_free(g->recs);
    rp_free(g->pieces);
    json_decref(g->logprobs);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    rp_free(g);
}

rp_status rp_gen_message_add(rp_gen_message *m, const rp_gen_output *d)
{
    rp_status st = RP_OK;
    if (d->logprobs) {
        if (!m->logprobs && !(m->logprobs = json_array()))
            return RP_ERR_NOMEM;
        json_array_extend(m->logprobs, d->logprobs);
    }
    for (int i = 0; i < d->n_pieces && st == RP_OK; i++) {
        const rp_gen_piece *pc = &d->pieces[i];
        json_t *call;
        switch (pc->kind) {
        case RP_PIECE_CONTENT: st = rp_buf_append(&m->content, pc->text, pc->len); break;
        case RP_PIECE_REASONING: st = rp_buf_append(&m->reasoning, pc->text, pc->len); break;
        case RP_PIECE_TOOL_START:
            if (!m->tool_calls && !(m->tool_calls = json_array()))
                return RP_ERR_NOMEM;
            call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", pc->id, "type", "function",
                             "function", "name", pc->name, "arguments", "");
            st = call && !json_array_append_new(m->tool_calls, call) ? RP_OK : RP_ERR_NOMEM;
            break;
        case RP_PIECE_TOOL_ARGS: {
            json_t *fn = json_object_get(json_array_get(m->tool_calls, (size_t)pc->index),
                                         "function");
            json_t *args = json_object_get(fn, "arguments");
            if (!args)
                break;
            rp_buf b = {0};
            if (rp_buf_append(&b, json_string_value(args), json_string_length(args)) ||
                rp_buf_append(&b, pc->text, pc->len) ||
                json_object_set_new(fn, "arguments", json_stringn(b.data, b.len)))
                st = RP_ERR_NOMEM;
            rp_buf_deinit(&b);
            break;
        }
        case RP_PIECE_TOOL_END: break;
        }
    }
    return st;
}

void rp_gen_message_deinit(rp_gen_message *m)
{
    rp_buf_deinit(&m->content);
    rp_buf_deinit(&m->reasoning);
    json_decref(m->tool_calls);
    json_decref(m->logprobs);
    memset(m, 0, sizeof *m);
}
