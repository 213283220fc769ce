/* chat/parse_impl.h - what the per-family body parsers implement for chat/output_parser.c.
 *
 * output_parser.c finds the extent of a call region in the stream (markers, balanced brackets)
 * and hands its complete text to a body parser of one family:
 *   parse_json.c     JSON bodies: hermes, granite, llama3_json, mistral, deepseek, kimi_k2, ...
 *   parse_xml.c      XML-ish bodies typed by the tools' JSON schema: qwen3_coder, glm45, minimax
 *   parse_pythonic.c Python-call and Gemma 4 literal bodies: pythonic, lfm2, gemma4
 * A body parser either appends every call of the body to `out` and returns RP_OK, or returns
 * RP_ERR_INVALID (malformed: the caller keeps the region as text) leaving `out` as it was in
 * count, or RP_ERR_NOMEM.
 *
 * Ownership: rp_calls owns its names and argument texts (rp_calls_deinit frees them).
 * Threading: pure functions.
 */
#ifndef RP_CHAT_PARSE_IMPL_H
#define RP_CHAT_PARSE_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct rp_call {
    char *name;
    char *args; /* compact JSON object text */
} rp_call;

typedef struct rp_calls {
    rp_call *v;
    size_t n;
    size_t cap;
} rp_calls;

typedef struct rp_body_ctx {
    const json_t *tools; /* request tools (may be NULL) */
    bool truncated;      /* the output ended before the region's close marker: closing tags
                            that a lenient parser would infer must really be there */
} rp_body_ctx;

typedef rp_status (*rp_body_fn)(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);

/* Appends a call; takes the reference on args (an object). RP_ERR_INVALID when name is empty or
 * args is not an object (args released either way). */
rp_status rp_calls_push(rp_calls *c, const char *name, size_t name_len, json_t *args);
/* Drops calls [n, c->n) (to undo a partly parsed body). */
void rp_calls_truncate(rp_calls *c, size_t n);
void rp_calls_deinit(rp_calls *c);

/* Small shared helpers. */
const char *rp_skip_ws(const char *s, const char *end);
bool rp_has_prefix(const char *s, const char *end, const char *lit);
/* Finds lit in [s, end); NULL when absent. */
const char *rp_find(const char *s, const char *end, const char *lit);
/* How the text [s, s+n) begins with marker lit: RP_MARK_FULL, RP_MARK_PARTIAL (the text is a
 * proper prefix of lit: more input may complete it) or RP_MARK_NONE. */
enum { RP_MARK_NONE = 0, RP_MARK_PARTIAL = 1, RP_MARK_FULL = 2 };
int rp_marker_match(const char *s, size_t n, const char *lit);

/* parse_json.c */
rp_status rp_body_json_calls(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_mistral(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_deepseek(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_kimi(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
/* Harmony: body is the JSON arguments of a call whose name the header gave. */
rp_status rp_json_args_parse(const char *s, size_t n, json_t **out);

/* parse_xml.c */
rp_status rp_body_qwen3_xml(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_glm(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_minimax(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
/* A raw parameter value typed by the schema of tools[fn].parameters.properties[key]. New ref. */
json_t *rp_typed_value(const json_t *tools, const char *fn, const char *key, const char *v,
                       size_t n);

/* parse_pythonic.c */
rp_status rp_body_pythonic(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
rp_status rp_body_gemma4(const rp_body_ctx *ctx, const char *s, size_t n, rp_calls *out);
/* A whole Python literal (str, number, True/False/None, list, tuple, dict) as JSON; NULL if
 * the text is not exactly one literal. */
json_t *rp_py_literal(const char *s, size_t n);

#endif
