/* api/pipeline.h - from an rp_chat_request to streamed text: prompt, tokens, engine, text.
 *
 * A pipeline is the served model as the API sees it: its tokenizer, its parsed chat
 * template, the engine, and the names clients may use for it. For each request:
 *
 *   rp_gen_start: render the chat template (messages, tools, add_generation_prompt,
 *                 bos_token, eos_token, enable_thinking) or take the completion prompt,
 *                 tokenize, check the context window, submit to the engine.
 *   rp_gen_next:  waits (bounded) for engine events and turns tokens into visible text:
 *                 incremental detokenizing (never half a UTF-8 sequence), then the stop
 *                 strings, which hold back any tail that could still become a stop string
 *                 (so no part of a stop string is ever shown), then the tool-call and
 *                 reasoning parser (chat/output_parser.h), which splits it into content,
 *                 reasoning and tool-call pieces.
 *   rp_gen_free:  cancels the generation if it still runs and waits for the engine's DONE.
 *
 * Ownership: rp_pipeline_new borrows the engine and tokenizer (free the pipeline first);
 *            an rp_gen copies what it needs from the request. Text and JSON handed out by
 *            rp_gen_next are borrowed until the next call on the same rp_gen.
 * Threading: a pipeline is shared by all HTTP threads; an rp_gen belongs to one thread
 *            (rp_gen_cancel may be called from any thread). Engine callbacks only queue.
 * Errors:    rp_gen_start fills an rp_api_error: RP_APIERR_INVALID (template error, token
 *            out of range), RP_APIERR_CONTEXT (both numbers), RP_APIERR_OVERLOADED (queue
 *            full), RP_APIERR_INTERNAL.
 */
#ifndef RP_API_PIPELINE_H
#define RP_API_PIPELINE_H

#include <jansson.h>
#include <stddef.h>

#include "api/error.h"
#include "api/request.h"
#include "base/buf.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

typedef struct rp_pipeline rp_pipeline;
typedef struct rp_gen rp_gen;
typedef struct rp_metrics rp_metrics; /* api/metrics.h */

typedef struct rp_pipeline_config {
    const char *served_name; /* the name /v1/models lists */
    const char *alias;       /* a second accepted name (NULL: none) */
    const char *fingerprint; /* system_fingerprint (NULL: derived from the version) */
    const char *tool_parser;      /* chat/output_parser.h names; NULL: detect from the chat */
    const char *reasoning_parser; /* template and model type; "none": off */
} rp_pipeline_config;

rp_status rp_pipeline_new(rp_engine *engine, const rp_tokenizer *tok,
                          const rp_pipeline_config *cfg, rp_pipeline **out, rp_err *err);
void rp_pipeline_free(rp_pipeline *p);

const char *rp_pipeline_model_name(const rp_pipeline *p);
const char *rp_pipeline_model_alias(const rp_pipeline *p); /* NULL: none */
const char *rp_pipeline_fingerprint(const rp_pipeline *p);
int rp_pipeline_context_length(const rp_pipeline *p);
rp_engine *rp_pipeline_engine(const rp_pipeline *p);
/* Generations started afterwards report to m (NULL: none); m is borrowed until the pipeline
 * is freed or this is called again. Set it before the pipeline serves requests. */
void rp_pipeline_set_metrics(rp_pipeline *p, rp_metrics *m);
/* 1 when name (NULL allowed: the client sent none) names the served model: the served name,
 * its alias, or "default". */
int rp_pipeline_model_matches(const rp_pipeline *p, const char *name);

/* Renders and tokenizes without generating; *out_n = prompt tokens (count_tokens). */
rp_status rp_pipeline_count_tokens(const rp_pipeline *p, const rp_chat_request *req, int *out_n,
                                   rp_api_error *e);

typedef enum rp_gen_finish {
    RP_GEN_FINISH_NONE = 0,
    RP_GEN_FINISH_STOP,          /* end of turn (EOS) */
    RP_GEN_FINISH_LENGTH,        /* max_tokens or the context window */
    RP_GEN_FINISH_STOP_SEQUENCE, /* a stop string matched (stop_sequence says which) */
    RP_GEN_FINISH_TOOL_CALLS,    /* the output parser saw tool calls */
    RP_GEN_FINISH_CANCELLED,
    RP_GEN_FINISH_ERROR,
} rp_gen_finish;

typedef enum rp_gen_step { RP_GEN_TIMEOUT = 0, RP_GEN_DELTA, RP_GEN_DONE } rp_gen_step;

/* What the output parser made of the text, in order (without a parser: CONTENT only). */
typedef enum rp_piece_kind {
    RP_PIECE_CONTENT = 0,
    RP_PIECE_REASONING,
    RP_PIECE_TOOL_START, /* index, id, name */
    RP_PIECE_TOOL_ARGS,  /* index, text: a fragment of the arguments' JSON text */
    RP_PIECE_TOOL_END,   /* index */
} rp_piece_kind;

typedef struct rp_gen_piece {
    rp_piece_kind kind;
    int index;
    const char *text;
    size_t len;
    const char *id, *name; /* TOOL_START */
} rp_gen_piece;

typedef struct rp_gen_output {
    /* DELTA */
    const char *text; /* new visible text, complete UTF-8 */
    size_t len;
    json_t *logprobs; /* OpenAI chat-style entries for the tokens since the last delta, or NULL */
    const rp_gen_piece *pieces; /* everything new, in order; text above is its CONTENT part */
    int n_pieces;
    /* DONE */
    rp_gen_finish finish;
    const char *stop_sequence; /* STOP_SEQUENCE */
    int n_prompt;
    int n_completion;
    rp_api_error err; /* ERROR */
} rp_gen_output;

/* A whole message assembled from deltas (non-streamed responses). */
typedef struct rp_gen_message {
    rp_buf content;
    rp_buf reasoning;
    json_t *tool_calls; /* [{id, type, function:{name, arguments (JSON text)}}], or NULL */
    json_t *logprobs;   /* chat-style entries when asked for, or NULL */
} rp_gen_message;

/* Adds a delta's pieces and logprobs to m. Zero-initialise m; deinit frees. */
rp_status rp_gen_message_add(rp_gen_message *m, const rp_gen_output *delta);
void rp_gen_message_deinit(rp_gen_message *m);

rp_status rp_gen_start(rp_pipeline *p, const rp_chat_request *req, rp_gen **out, rp_api_error *e);
/* Waits up to timeout_ms for something to report. After DONE, keeps returning DONE. */
rp_gen_step rp_gen_next(rp_gen *g, int timeout_ms, rp_gen_output *out);
int rp_gen_n_prompt(const rp_gen *g);
int rp_gen_n_completion(const rp_gen *g); /* tokens so far */
void rp_gen_cancel(rp_gen *g);
void rp_gen_free(rp_gen *g);

#endif
