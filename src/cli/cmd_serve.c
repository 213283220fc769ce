/* cli/cmd_serve.c - `rapid serve [MODEL]`: load a model and serve it over HTTP.
 *
 * Order: settings (flags, then RAPID_* variables), then the HTTP server starts listening
 * (GET /health answers 503 "loading"), then the model, tokenizer, engine and pipeline load,
 * then the server is ready (200). SIGINT/SIGTERM stop it gracefully: in-flight generations
 * are cancelled, connections closed, everything freed, exit status 0.
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "api/pipeline.h"
#include "base/alloc.h"
#include "base/log.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/model_opts.h"
#include "cli/paths.h"
#include "engine/engine.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "server/config.h"
#include "server/server.h"
#include "text/tokenizer.h"

typedef struct serving {
    rp_model *model;
    rp_tokenizer *tok;
    rp_engine *engine;
    rp_pipeline *pipeline;
} serving;

static void serving_free(serving *sv)
{
    rp_pipeline_free(sv->pipeline);
    rp_engine_free(sv->engine);
    rp_tokenizer_free(sv->tok);
    rp_model_free(sv->model);
}

/* The last path component, without trailing slashes, copied into out. */
static void base_name(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t i = n;
    while (i > 0 && path[i - 1] != '/')
        i--;
    snprintf(out, cap, "%.*s", (int)(n - i), path + i);
}

static rp_status load(const char *dir, const rp_server_config *cfg, rp_model_opts mopts,
                      rp_engine_config ecfg, serving *sv, rp_err *err)
{
    mopts.n_threads = cfg->n_threads;
    rp_status st = rp_model_load(dir, &mopts, &sv->model, err);
    if (st == RP_OK)
        st = rp_tokenizer_load(dir, &sv->tok, err);
    ecfg.max_queue = cfg->max_queue;
    if (st == RP_OK)
        st = rp_engine_new(sv->model, &ecfg, &sv->engine, err);
    char folder[256];
    base_name(dir, folder, sizeof folder);
    rp_pipeline_config pcfg = {
        .served_name = cfg->served_name ? cfg->served_name : folder,
        .alias = cfg->served_name && strcmp(cfg->served_name, folder) ? folder : NULL,
        .tool_parser = cfg->tool_parser,
        .reasoning_parser = cfg->reasoning_parser,
    };
    if (st == RP_OK)
        st = rp_pipeline_new(sv->engine, sv->tok, &pcfg, &sv->pipeline, err);
    return st;
}

/* MODEL as typed: a model directory or a .gguf file (weights, tokenizer and chat template
 * all from its metadata), else a catalog alias, user alias or org/name (pulled when
 * RAPID_AUTO_PULL=1 or confirmed on a terminal, see cli/catalog.h). */
static rp_status resolve_model(const char *name, char **dir, rp_err *err)
{
    if (rp_path_is_dir(name) || rp_gguf_model_is(name)) {
        *dir = rp_strdup(name);
        return *dir ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    rp_catalog *cat = NULL;
    rp_status st = rp_catalog_load(&cat, err);
    if (st != RP_OK)
        return rp_err_set(err, RP_ERR_NOT_FOUND,
                          "'%s' is not a model directory, and there is no model catalog to look "
                          "it up in",
                          name);
    st = rp_catalog_ensure(cat, name, 0, dir, err);
    rp_catalog_free(cat);
    return st;
}

int rp_cmd_serve(int argc, char **argv)
{
    rp_server_flags f = {0};
    rp_engine_args ea = {0};
    rp_device_args da = {0};
    rp_opt opts[] = {
        RP_ENGINE_OPTS(ea),
        RP_MODEL_DEVICE_OPTS(da),
        {"host", &f.host, NULL},
        {"port", &f.port, NULL},
        {"api-key", &f.api_key, NULL},
        {"max-request-bytes", &f.max_request_bytes, NULL},
        {"cors-origins", &f.cors_origins, NULL},
        {"log-level", &f.log_level, NULL},
        {"served-model-name", &f.served_model_name, NULL},
        {"threads", &f.threads, NULL},
        {"max-queue", &f.max_queue, NULL},
        {"tool-call-parser", &f.tool_call_parser, NULL},
        {"reasoning-parser", &f.reasoning_parser, NULL},
    };
    const char *pos[1];
    int n_pos = 0;
    if (rp_args_parse(argc, argv, opts, (int)RP_ARRAY_LEN(opts), pos, 1, &n_pos) != 0)
        return 2;
    rp_err err = {0};
    rp_engine_config ecfg = {0};
    rp_model_opts mopts = {0};
    if (rp_engine_opts_parse("serve", &ea, &ecfg) || rp_model_opts_device("serve", &da, &mopts))
        return 2;
    rp_server_config cfg;
    if (rp_server_config_resolve(&f, &cfg, &err) != RP_OK) {
        fprintf(stderr, "rapid %s\n", err.msg);
        return 2;
    }
    rp_log_set_level((rp_log_level)cfg.log_level);
    char *default_dir = NULL;
    if (!n_pos) {
        default_dir = rp_default_model_dir();
        if (!default_dir) {
            fprintf(stderr, "rapid serve: no MODEL given and no embedded default model in this "
                            "build; run 'rapid serve /path/to/model-dir'\n");
            return 2;
        }
    } else if (resolve_model(pos[0], &default_dir, &err) != RP_OK) {
        fprintf(stderr, "rapid serve: %s\n", err.msg);
        return 1;
    }
    const char *dir = default_dir;
    if (n_pos && !rp_path_is_dir(pos[0]) && !cfg.served_name)
        cfg.served_name = pos[0]; /* an alias or org/name: serve it under what was typed */
    /* Signals go to sigwait below: block them before any thread starts. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    rp_server *srv = NULL;
    if (rp_server_start(&cfg, &srv, &err) != RP_OK) {
        fprintf(stderr, "rapid serve: %s\n", err.msg);
        rp_free(default_dir);
        return 1;
    }
    /* Always printed, whatever the log level: scripts read the port from it. */
    fprintf(stderr, "rapid serve: listening on http://%s:%d (loading %s)\n", cfg.host,
            rp_server_port(srv), dir);
    const char *delay = getenv("RAPID_TEST_LOAD_DELAY_MS"); /* test hook: a slow load */
    if (delay) {
        long ms = atol(delay);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    serving sv = {0};
    if (load(dir, &cfg, mopts, ecfg, &sv, &err) != RP_OK) {
        fprintf(stderr, "rapid serve: %s\n", err.msg);
        rp_server_stop(srv);
        serving_free(&sv);
        rp_free(default_dir);
        return 1;
    }
    rp_server_set_pipeline(srv, sv.pipeline);
    RP_INFO("ready: model '%s', context %d tokens, auth %s", rp_pipeline_model_name(sv.pipeline),
            rp_pipeline_context_length(sv.pipeline), cfg.api_key ? "on" : "off");
    int sig = 0;
    sigwait(&set, &sig);
    RP_INFO("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rp_server_stop(srv);
    serving_free(&sv);
    rp_free(default_dir);
    RP_INFO("stopped");
    return 0;
}
