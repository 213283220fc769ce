/* server/routes.c - the route handlers: health, models, metrics, status, OpenAI and
 * Anthropic generation.
 * Each parses through its adapter, checks the model name, starts a generation and either
 * streams it (server.c drives rp_routes_stream_step) or runs it to the end.
 */
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "server/server_impl.h"

#define WAIT_MS 100

void rp_routes_stream_step(http_req *r, rp_gen_step step, rp_gen_output *o);

static rp_pipeline *pipeline_or_503(http_req *r)
{
    rp_pipeline *p = atomic_load(&r->srv->pipeline);
    if (!p) {
        rp_api_error e;
        rp_api_error_set(&e, RP_APIERR_LOADING, NULL, "the model is still loading; retry shortly");
        rp_http_error(r, &e);
    }
    return p;
}

static int names_of(const rp_pipeline *p, const char *names[2])
{
    names[0] = rp_pipeline_model_name(p);
    names[1] = rp_pipeline_model_alias(p);
    return names[1] ? 2 : 1;
}

static enum MHD_Result respond_owned(http_req *r, int status, char *body)
{
    if (!body)
        return MHD_NO;
    enum MHD_Result res = rp_http_respond(r, status, body, NULL);
    rp_free(body);
    return res;
}

static enum MHD_Result handle_health(http_req *r)
{
    rp_pipeline *p = atomic_load(&r->srv->pipeline);
    if (!p)
        return rp_http_respond(r, 503, "{\"status\":\"loading\"}", NULL);
    json_t *j = json_pack("{s:s, s:s}", "status", "ok", "model", rp_pipeline_model_name(p));
    char *s = j ? rp_api_json_dump(j) : NULL;
    json_decref(j);
    return respond_owned(r, 200, s);
}

static enum MHD_Result handle_models(http_req *r)
{
    rp_pipeline *p = pipeline_or_503(r);
    if (!p)
        return MHD_YES;
    const char *names[2];
    int n = names_of(p, names);
    int anthropic = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "anthropic-version") != NULL;
    if (r->route == ROUTE_MODELS)
        return respond_owned(r, 200, anthropic ? rp_anthropic_models_json(names, n)
                                               : rp_openai_models_json(names, n));
    const char *id = r->url + strlen("/v1/models/");
    if (!rp_pipeline_model_matches(p, id)) {
        rp_api_error e;
        rp_api_error_set(&e, RP_APIERR_MODEL_NOT_FOUND, "model",
                         "the model '%s' does not exist; this server serves '%s'", id, names[0]);
        return rp_http_error(r, &e);
    }
    return respond_owned(r, 200, anthropic ? rp_anthropic_model_json(names[0])
                                           : rp_openai_model_json(names[0]));
}

static rp_status parse(http_req *r, rp_api_error *e)
{
    const char *body = r->body.data ? r->body.data : "";
    size_t len = r->body.len;
    switch (r->route) {
    case ROUTE_CHAT: return rp_openai_parse_chat(body, len, &r->creq, e);
    case ROUTE_COMPLETIONS: return rp_openai_parse_completion(body, len, &r->creq, e);
    case ROUTE_MESSAGES: return rp_anthropic_parse(body, len, RP_REQ_MESSAGES, &r->creq, e);
    default: return rp_anthropic_parse(body, len, RP_REQ_COUNT_TOKENS, &r->creq, e);
    }
}

static rp_req_type type_of(route_id route)
{
    switch (route) {
    case ROUTE_CHAT: return RP_REQ_CHAT;
    case ROUTE_COMPLETIONS: return RP_REQ_COMPLETION;
    case ROUTE_MESSAGES: return RP_REQ_MESSAGES;
    default: return RP_REQ_COUNT_TOKENS;
    }
}

/* A generation cancelled by shutdown reports as an error the client can retry. */
static void shutdown_as_error(rp_gen_output *o)
{
    if (o->finish != RP_GEN_FINISH_CANCELLED)
        return;
    o->finish = RP_GEN_FINISH_ERROR;
    rp_api_error_set(&o->err, RP_APIERR_OVERLOADED, NULL,
                     "the server is shutting down; the generation was cancelled");
}

void rp_routes_stream_step(http_req *r, rp_gen_step step, rp_gen_output *o)
{
    int anthropic = r->creq.api == RP_API_ANTHROPIC;
    if (step == RP_GEN_DELTA) {
        if (anthropic)
            rp_anthropic_stream_delta(&r->ant, o, rp_http_emit, r);
        else
            rp_openai_stream_delta(&r->oai, o, rp_http_emit, r);
        return;
    }
    shutdown_as_error(o);
    r->n_out = o->n_completion;
    if (anthropic)
        rp_anthropic_stream_finish(&r->ant, o, rp_http_emit, r);
    else
        rp_openai_stream_finish(&r->oai, o, rp_http_emit, r);
    r->stream_done = 1;
}

/* Runs a non-streamed generation to its end; MHD_NO when the client left. */
static enum MHD_Result run_to_end(http_req *r, rp_pipeline *p)
{
    rp_gen_message msg = {0};
    rp_gen_output o;
    for (;;) {
        if (rp_http_client_gone(r)) {
            r->disconnected = 1;
            rp_gen_cancel(r->gen);
            rp_gen_message_deinit(&msg);
            return MHD_NO;
        }
        if (atomic_load(&r->srv->stopping))
            rp_gen_cancel(r->gen);
        rp_gen_step step = rp_gen_next(r->gen, WAIT_MS, &o);
        if (step == RP_GEN_DONE)
            break;
        if (step == RP_GEN_DELTA)
            rp_gen_message_add(&msg, &o);
    }
    shutdown_as_error(&o);
    r->n_out = o.n_completion;
    enum MHD_Result res;
    if (o.finish == RP_GEN_FINISH_ERROR) {
        res = rp_http_error(r, &o.err);
    } else {
        const char *model = rp_pipeline_model_name(p);
        char *body = r->creq.api == RP_API_ANTHROPIC
                         ? rp_anthropic_response(model, &msg, &o)
                         : rp_openai_response(&r->creq, model, rp_pipeline_fingerprint(p), &msg,
                                              &o);
        res = respond_owned(r, 200, body);
    }
    rp_gen_message_deinit(&msg);
    return res;
}

static enum MHD_Result handle_generate(http_req *r)
{
    rp_pipeline *p = pipeline_or_503(r);
    if (!p)
        return MHD_YES;
    rp_api_error e = {0};
    rp_chat_request_init(&r->creq, type_of(r->route));
    r->has_creq = 1;
    if (parse(r, &e) != RP_OK)
        return rp_http_error(r, &e);
    if (!rp_pipeline_model_matches(p, r->creq.model)) {
        rp_api_error_set(&e, RP_APIERR_MODEL_NOT_FOUND, "model",
                         "the model '%s' does not exist; this server serves '%s' (or 'default')",
                         r->creq.model, rp_pipeline_model_name(p));
        return rp_http_error(r, &e);
    }
    if (r->creq.type == RP_REQ_COUNT_TOKENS) {
        int n = 0;
        if (rp_pipeline_count_tokens(p, &r->creq, &n, &e) != RP_OK)
            return rp_http_error(r, &e);
        r->n_in = n;
        return respond_owned(r, 200, rp_anthropic_count_json(n));
    }
    if (rp_gen_start(p, &r->creq, &r->gen, &e) != RP_OK)
        return rp_http_error(r, &e);
    r->n_in = rp_gen_n_prompt(r->gen);
    if (!r->creq.stream)
        return run_to_end(r, p);
    const char *model = rp_pipeline_model_name(p);
    if (r->creq.api == RP_API_ANTHROPIC) {
        rp_anthropic_stream_init(&r->ant, model, r->n_in);
        rp_anthropic_stream_start(&r->ant, rp_http_emit, r);
    } else {
        rp_openai_stream_init(&r->oai, &r->creq, model, rp_pipeline_fingerprint(p));
    }
    return rp_http_respond_stream(r);
}

/* Engine stats of the served pipeline; NULL while loading. */
static const rp_engine_stats *engine_stats(rp_pipeline *p, rp_engine_stats *es)
{
    if (!p)
        return NULL;
    rp_engine_get_stats(rp_pipeline_engine(p), es);
    return es;
}

static enum MHD_Result handle_metrics(http_req *r)
{
    rp_engine_stats es;
    rp_buf out = {0};
    const rp_engine_stats *pes = engine_stats(atomic_load(&r->srv->pipeline), &es);
    enum MHD_Result res = MHD_NO;
    if (rp_metrics_render(r->srv->metrics, pes, &out) == RP_OK)
        res = rp_http_respond(r, 200, out.data, "text/plain; version=0.0.4; charset=utf-8");
    rp_buf_deinit(&out);
    return res;
}

static enum MHD_Result handle_status(http_req *r)
{
    rp_pipeline *p = pipeline_or_503(r);
    if (!p)
        return MHD_YES;
    rp_engine_stats es;
    return respond_owned(r, 200,
                         rp_metrics_status_json(r->srv->metrics, rp_pipeline_model_name(p),
                                                engine_stats(p, &es)));
}

enum MHD_Result rp_routes_dispatch(http_req *r)
{
    switch (r->route) {
    case ROUTE_ROOT: {
        rp_pipeline *p = atomic_load(&r->srv->pipeline);
        return rp_http_respond(r, 200, p ? "rapid is running\n" : "rapid is loading\n",
                               "text/plain; charset=utf-8");
    }
    case ROUTE_HEALTH: return handle_health(r);
    case ROUTE_METRICS: return handle_metrics(r);
    case ROUTE_STATUS: return handle_status(r);
    case ROUTE_MODELS:
    case ROUTE_MODEL: return handle_models(r);
    default: return handle_generate(r);
    }
}
