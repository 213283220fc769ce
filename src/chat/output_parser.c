/* chat/output_parser.c - the streaming layer over the format tables and body parsers.
 *
 * One buffer `in` holds the input not yet decided. In CONTENT and REASONING mode the scanner
 * looks, at each byte, for the markers active in that mode (reasoning start/end, the tool
 * format's region openers, markup to strip); text up to a marker is emitted, and a tail that
 * is a proper prefix of a marker is held back. In CALL mode a per-byte machine (call_scan)
 * tracks JSON or Python strings, raw value zones (<parameter=..>..</parameter>) and bracket
 * depth to find where the region ends (its close marker outside strings/zones, or the end of
 * the first balanced value), then the family's body parser turns the region into calls.
 *
 * Whitespace policy (identical for every chunking): whitespace between a tool region and what
 * precedes/follows it, at the edges of reasoning, and after a reasoning block is dropped;
 * whitespace between two pieces of text is kept.
 */
#include "chat/output_parser.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "chat/parse_harmony.h"
#include "chat/parse_impl.h"

/* ---------------------------------------------------------------------------------------- */
/* Format tables                                                                             */

enum { Q_NONE, Q_JSON, Q_PY };
enum { R_AT_START = 1, R_KEEP_OPEN = 2, R_CHAIN = 4 };

typedef struct region_rule {
    const char *open;
    const char *close; /* NULL: the region ends with its first balanced value */
    int flags;         /* R_AT_START: only before any content; R_KEEP_OPEN: the opener is part
                          of the body; R_CHAIN: ';' continues with another value */
} region_rule;

typedef struct tool_fmt {
    const char *name;
    region_rule rules[4];
    int quote;                /* string syntax skipped while looking for the end */
    const char *zone[2];      /* raw value zone: open, close (NULL: none) */
    const char *literals[2];  /* balanced mode: bracketed words that are not brackets */
    const char *strip[2];     /* content markup to remove */
    rp_body_fn body;          /* NULL: Harmony */
    const char *prefix_any;   /* rp_output_parser_call_prefix, tool_choice required */
    const char *prefix_named; /* with one %s for the name */
} tool_fmt;

/* One format per table row reads better than clang-format's layout. */
/* clang-format off */
#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define JSON_NAMED "{\"name\": \"%s\", \"arguments\": "

static const tool_fmt k_tools[] = {
    {"hermes", {{"<tool_call>", "</tool_call>", 0}}, Q_JSON, {0}, {0}, {0}, rp_body_json_calls,
     "<tool_call>\n{\"name\": \"", "<tool_call>\n" JSON_NAMED},
    {"granite4", {{"<tool_call>", "</tool_call>", 0}}, Q_JSON, {0}, {0}, {0}, rp_body_json_calls,
     "<tool_call>\n{\"name\": \"", "<tool_call>\n" JSON_NAMED},
    {"qwen3_coder", {{"<tool_call>", "</tool_call>", 0}}, Q_NONE, {"<parameter=", "</parameter>"},
     {0}, {0}, rp_body_qwen3_xml, "<tool_call>\n<function=", "<tool_call>\n<function=%s>\n"},
    {"qwen3_xml", {{"<tool_call>", "</tool_call>", 0}}, Q_NONE, {"<parameter=", "</parameter>"},
     {0}, {0}, rp_body_qwen3_xml, "<tool_call>\n<function=", "<tool_call>\n<function=%s>\n"},
    {"seed_oss", {{"<seed:tool_call>", "</seed:tool_call>", 0}}, Q_NONE,
     {"<parameter=", "</parameter>"}, {0}, {0}, rp_body_qwen3_xml, "<seed:tool_call>\n<function=",
     "<seed:tool_call>\n<function=%s>\n"},
    {"llama3_json",
     {{"<|python_tag|>", NULL, R_CHAIN}, {"{", NULL, R_AT_START | R_KEEP_OPEN | R_CHAIN}},
     Q_JSON, {0}, {0}, {0}, rp_body_json_calls, "{\"name\": \"",
     "{\"name\": \"%s\", \"parameters\": "},
    {"pythonic", {{"[", NULL, R_AT_START | R_KEEP_OPEN}}, Q_PY, {0}, {0}, {0}, rp_body_pythonic,
     "[", "[%s("},
    {"llama4_pythonic",
     {{"<|python_start|>", "<|python_end|>", 0}, {"[", NULL, R_AT_START | R_KEEP_OPEN}}, Q_PY,
     {0}, {0}, {0}, rp_body_pythonic, "[", "[%s("},
    {"lfm2", {{"<|tool_call_start|>", "<|tool_call_end|>", 0}}, Q_PY, {0}, {0}, {0},
     rp_body_pythonic, "<|tool_call_start|>[", "<|tool_call_start|>[%s("},
    {"mistral", {{"[TOOL_CALLS]", NULL, 0}}, Q_JSON, {0}, {"[ARGS]", "[CALL_ID]"}, {0},
     rp_body_mistral, "[TOOL_CALLS]", "[TOOL_CALLS]%s[ARGS]"},
    {"deepseek_v3", {{DS_CALLS_BEGIN, DS_CALLS_END, 0}}, Q_JSON, {0}, {0}, {0}, rp_body_deepseek,
     DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP,
     DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "%s\n```json\n"},
    {"deepseek_v31", {{DS_CALLS_BEGIN, DS_CALLS_END, 0}}, Q_JSON, {0}, {0}, {0},
     rp_body_deepseek, DS_CALLS_BEGIN DS_CALL_BEGIN, DS_CALLS_BEGIN DS_CALL_BEGIN "%s" DS_SEP},
    {"kimi_k2",
     {{"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", 0},
      {"<|tool_call_section_begin|>", "<|tool_call_section_end|>", 0}},
     Q_JSON, {0}, {0}, {0}, rp_body_kimi,
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.%s:0<|tool_call_argument_begin|>"},
    {"glm45", {{"<tool_call>", "</tool_call>", 0}}, Q_NONE, {"<arg_value>", "</arg_value>"}, {0},
     {0}, rp_body_glm, "<tool_call>", "<tool_call>%s\n"},
    {"glm47", {{"<tool_call>", "</tool_call>", 0}}, Q_NONE, {"<arg_value>", "</arg_value>"}, {0},
     {0}, rp_body_glm, "<tool_call>", "<tool_call>%s"},
    {"openai", {{0}}, Q_NONE, {0}, {0}, {0}, NULL, "<|channel|>commentary to=functions.",
     "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>"},
    {"granite", {{"<|tool_call|>", NULL, 0}}, Q_JSON, {0}, {0}, {0}, rp_body_json_calls,
     "<|tool_call|>[{\"name\": \"", "<|tool_call|>[" JSON_NAMED},
    {"phi4_mini_json", {{"functools", NULL, 0}}, Q_JSON, {0}, {0}, {0}, rp_body_json_calls,
     "functools[{\"name\": \"", "functools[" JSON_NAMED},
    {"minimax_m2", {{"<minimax:tool_call>", "</minimax:tool_call>", 0}}, Q_NONE,
     {"<parameter name=", "</parameter>"}, {0}, {0}, rp_body_minimax,
     "<minimax:tool_call>\n<invoke name=\"", "<minimax:tool_call>\n<invoke name=\"%s\">\n"},
    {"xlam",
     {{"[", NULL, R_AT_START | R_KEEP_OPEN},
      {"{", NULL, R_AT_START | R_KEEP_OPEN},
      {"```json", "```", 0},
      {"<tool_call>", "</tool_call>", 0}},
     Q_JSON, {0}, {0}, {0}, rp_body_json_calls, "[{\"name\": \"", "[" JSON_NAMED},
    {"jamba", {{"<tool_calls>", "</tool_calls>", 0}}, Q_JSON, {0}, {0}, {0}, rp_body_json_calls,
     "<tool_calls>[{\"name\": \"", "<tool_calls>[" JSON_NAMED},
    {"internlm", {{"<|action_start|><|plugin|>", "<|action_end|>", 0}}, Q_JSON, {0}, {0}, {0},
     rp_body_json_calls, "<|action_start|><|plugin|>\n{\"name\": \"",
     "<|action_start|><|plugin|>\n{\"name\": \"%s\", \"parameters\": "},
    {"hunyuan_a13b", {{"<tool_calls>", "</tool_calls>", 0}}, Q_JSON, {0}, {0}, {0},
     rp_body_json_calls, "<tool_calls>[{\"name\": \"", "<tool_calls>[" JSON_NAMED},
    {"cohere_command3", {{"<|START_ACTION|>", "<|END_ACTION|>", 0}}, Q_JSON, {0}, {0},
     {"<|START_RESPONSE|>", "<|END_RESPONSE|>"}, rp_body_json_calls,
     "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"",
     "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"%s\", \"parameters\": "},
    {"gemma4", {{"<|tool_call>", "<tool_call|>", 0}}, Q_NONE, {"<|\"|>", "<|\"|>"}, {0}, {0},
     rp_body_gemma4, "<|tool_call>call:", "<|tool_call>call:%s{"},
};

typedef struct reasoning_fmt {
    const char *name;
    const char *start[3];
    const char *end[3];
    const char *strip[2]; /* content markup to remove */
} reasoning_fmt;

static const reasoning_fmt k_reasoning[] = {
    {"qwen3", {"<think>"}, {"</think>"}, {0}},
    {"deepseek_r1", {"<think>"}, {"</think>"}, {0}},
    {"deepseek_v3", {"<think>"}, {"</think>"}, {0}},
    {"glm45", {"<think>"}, {"</think>"}, {0}},
    {"kimi_k2", {"<think>"}, {"</think>"}, {0}},
    {"minimax_m2", {"<think>"}, {"</think>"}, {0}},
    {"hunyuan_a13b", {"<think>"}, {"</think>"}, {"<answer>", "</answer>"}},
    {"mistral", {"[THINK]"}, {"[/THINK]"}, {0}},
    {"seed_oss", {"<seed:think>"}, {"</seed:think>"}, {0}},
    {"granite",
     {"Here's my thought process:", "Here is my thought process:", "<think>"},
     {"Here's my response:", "Here is my response:", "</think>"},
     {"<response>", "</response>"}},
    {"gemma4", {"<|channel>thought"}, {"<channel|>"}, {0}},
    {"cohere_command3", {"<|START_THINKING|>"}, {"<|END_THINKING|>"}, {0}},
    {"openai_gptoss", {0}, {0}, {0}},
};

static const char *const k_tool_names[] = {
    "hermes", "granite4", "qwen3_coder", "qwen3_xml", "seed_oss", "llama3_json", "pythonic",
    "llama4_pythonic", "lfm2", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2", "glm45",
    "glm47", "openai", "granite", "phi4_mini_json", "minimax_m2", "xlam", "jamba", "internlm",
    "hunyuan_a13b", "cohere_command3", "gemma4", NULL,
};

static const char *const k_reasoning_names[] = {
    "qwen3", "deepseek_r1", "deepseek_v3", "glm45", "kimi_k2", "minimax_m2", "hunyuan_a13b",
    "mistral", "seed_oss", "granite", "gemma4", "cohere_command3", "openai_gptoss", NULL,
};

/* clang-format on */

_Static_assert(RP_ARRAY_LEN(k_tool_names) == RP_ARRAY_LEN(k_tools) + 1, "tool name list");
_Static_assert(RP_ARRAY_LEN(k_reasoning_names) == RP_ARRAY_LEN(k_reasoning) + 1,
               "reasoning name list");

static bool no_name(const char *s)
{
    return !s || !*s || strcmp(s, "none") == 0;
}

static const tool_fmt *find_tool(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_tools); i++)
        if (strcmp(k_tools[i].name, name) == 0) return &k_tools[i];
    return NULL;
}

static const reasoning_fmt *find_reasoning(const char *name)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_reasoning); i++)
        if (strcmp(k_reasoning[i].name, name) == 0) return &k_reasoning[i];
    return NULL;
}

const char *const *rp_output_parser_tool_names(void)
{
    return k_tool_names;
}

const char *const *rp_output_parser_reasoning_names(void)
{
    return k_reasoning_names;
}

bool rp_output_parser_has_tool(const char *name)
{
    return name && find_tool(name);
}

bool rp_output_parser_has_reasoning(const char *name)
{
    return name && find_reasoning(name);
}

/* ---------------------------------------------------------------------------------------- */
/* Shared helpers (parse_impl.h)                                                             */

const char *rp_skip_ws(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t'))
        s++;
    return s;
}

bool rp_has_prefix(const char *s, const char *end, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(end - s) >= n && memcmp(s, lit, n) == 0;
}

const char *rp_find(const char *s, const char *end, const char *lit)
{
    size_t n = strlen(lit);
    if (n == 0 || (size_t)(end - s) < n) return NULL;
    return memmem(s, (size_t)(end - s), lit, n);
}

int rp_marker_match(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (n >= k) return memcmp(s, lit, k) == 0 ? RP_MARK_FULL : RP_MARK_NONE;
    return memcmp(s, lit, n) == 0 ? RP_MARK_PARTIAL : RP_MARK_NONE;
}

/* A function name: valid UTF-8 without control characters, spaces or quotes. */
static bool valid_call_name(const char *name, size_t n)
{
    if (n == 0 || n > 256) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch == '"' || ch == '\\' || ch == 0x7F) return false;
    }
    json_t *t = json_stringn(name, n); /* jansson checks the UTF-8 */
    json_decref(t);
    return t != NULL;
}

rp_status rp_calls_push(rp_calls *c, const char *name, size_t name_len, json_t *args)
{
    if (!json_is_object(args) || !valid_call_name(name, name_len)) {
        json_decref(args);
        return RP_ERR_INVALID;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        rp_call *v = rp_realloc(c->v, cap * sizeof *v);
        if (!v) {
            json_decref(args);
            return RP_ERR_NOMEM;
        }
        c->v = v;
        c->cap = cap;
    }
    /* arguments as compact JSON, keys in the model's order, UTF-8 kept */
    char *dumped = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(args);
    char *txt = dumped ? rp_strdup(dumped) : NULL;
    char *nm = rp_strndup(name, name_len);
    json_free_t jfree;
    json_malloc_t jmalloc;
    json_get_alloc_funcs(&jmalloc, &jfree);
    if (dumped) jfree(dumped);
    if (!txt || !nm) {
        rp_free(txt);
        rp_free(nm);
        return RP_ERR_NOMEM;
    }
    c->v[c->n++] = (rp_call){nm, txt};
    return RP_OK;
}

void rp_calls_truncate(rp_calls *c, size_t n)
{
    while (c->n > n) {
        c->n--;
        rp_free(c->v[c->n].name);
        rp_free(c->v[c->n].args);
    }
}

void rp_calls_deinit(rp_calls *c)
{
    rp_calls_truncate(c, 0);
    rp_free(c->v);
    *c = (rp_calls){0};
}

/* ---------------------------------------------------------------------------------------- */
/* The parser                                                                                */

typedef enum mode { M_CONTENT, M_REASONING, M_CALL } mode;

/* CALL-mode scanner states. */
typedef enum cstate {
    C_BODY,    /* structure: brackets, markers */
    C_STR,     /* inside a JSON or Python string */
    C_STR_ESC, /* after a backslash in a string */
    C_ZONE,    /* inside a raw value zone */
    C_AFTER,   /* R_CHAIN: after a value, before ';' */
    C_CHAIN,   /* R_CHAIN: after ';', before the next value */
} cstate;

/* Whitespace held back on one channel (content or reasoning). */
typedef struct chan {
    rp_buf ws;
    bool drop; /* leading whitespace is dropped (start of reasoning, after reasoning) */
} chan;

#define MAX_BALANCED_PREFIX 256 /* balanced regions: text allowed before the first bracket */
#define MAX_DEPTH 10000

struct rp_output_parser {
    const tool_fmt *tf;      /* NULL: no tool parsing */
    const reasoning_fmt *rf; /* NULL: no reasoning */
    rp_harmony *harmony;     /* Harmony formats replace the generic machine */
    json_t *tools;
    rp_parse_event_fn on_event;
    void *user;
    rp_tool_id_fn gen_id;
    void *gen_id_user;
    uint64_t rng;
    bool short_ids;
    rp_status sticky; /* first error: feeding stops */
    bool finished;

    mode mode;
    rp_buf in;            /* undecided input */
    size_t pos;           /* next byte of `in` to examine */
    bool content_started; /* non-whitespace content was emitted: R_AT_START rules are off */
    chan ch[2];           /* [0] content, [1] reasoning */
    int n_calls;

    /* CALL mode */
    const region_rule *rule;
    size_t call_start; /* index in `in` of the opener (raw text starts here) */
    size_t body_start;
    cstate cs;
    char quote;
    int depth;
    bool seen_value;
    size_t value_end;

    bool first_byte[256]; /* bytes that start a marker active in CONTENT mode */
    bool end_byte[256];   /* bytes that start a reasoning end marker */
};

static rp_status emit(rp_output_parser *p, const rp_parse_event *ev)
{
    if (p->sticky != RP_OK) return p->sticky;
    rp_status st = p->on_event(p->user, ev);
    if (st != RP_OK) p->sticky = st;
    return st;
}

static rp_status emit_raw(rp_output_parser *p, int reasoning, const char *s, size_t n)
{
    if (n == 0) return RP_OK;
    rp_parse_event ev = {
        .kind = reasoning ? RP_PARSE_REASONING : RP_PARSE_CONTENT, .text = s, .len = n};
    return emit(p, &ev);
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Text on a channel under the whitespace policy: trailing whitespace is held until text
 * follows; leading whitespace is dropped while the channel's drop flag is set. */
static rp_status put_text(rp_output_parser *p, int reasoning, const char *s, size_t n)
{
    chan *c = &p->ch[reasoning];
    size_t last = n;
    while (last > 0 && is_ws(s[last - 1]))
        last--;
    if (last == 0) { /* whitespace only */
        if (!c->drop && rp_buf_append(&c->ws, s, n) != RP_OK) return p->sticky = RP_ERR_NOMEM;
        return RP_OK;
    }
    size_t first = 0;
    if (c->drop) {
        while (is_ws(s[first]))
            first++;
        c->drop = false;
        rp_buf_reset(&c->ws);
    }
    rp_status st = emit_raw(p, reasoning, c->ws.data, c->ws.len);
    rp_buf_reset(&c->ws);
    if (st == RP_OK) st = emit_raw(p, reasoning, s + first, last - first);
    if (st == RP_OK && !reasoning) p->content_started = true;
    if (st == RP_OK && last < n && rp_buf_append(&c->ws, s + last, n - last) != RP_OK)
        st = p->sticky = RP_ERR_NOMEM;
    return st;
}

/* "call_" + 24 random alnum, or 9 alnum for formats whose templates demand that. */
static void default_id(rp_output_parser *p, char *out, size_t cap)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = p->short_ids ? 0 : (size_t)snprintf(out, cap, "call_");
    int n_random = p->short_ids ? 9 : 24;
    for (int i = 0; i < n_random && n + 1 < cap; i++) {
        p->rng ^= p->rng << 13; /* xorshift64 */
        p->rng ^= p->rng >> 7;
        p->rng ^= p->rng << 17;
        out[n++] = alnum[(p->rng >> 32) % (sizeof alnum - 1)];
    }
    out[n] = '\0';
}

/* TOOL_START, one ARGS delta, TOOL_END for each call. */
static rp_status emit_calls(rp_output_parser *p, const rp_calls *calls)
{
    rp_buf_reset(&p->ch[0].ws);          /* whitespace before a call separates, it is not content */
    p->ch[0].drop = !p->content_started; /* and so does whitespace opening the content */
    rp_status st = RP_OK;
    for (size_t i = 0; i < calls->n && st == RP_OK; i++) {
        char id[RP_TOOL_ID_MAX];
        int index = p->n_calls++;
        if (p->gen_id)
            p->gen_id(p->gen_id_user, index, id, sizeof id);
        else
            default_id(p, id, sizeof id);
        id[sizeof id - 1] = '\0';
        rp_parse_event ev = {
            .kind = RP_PARSE_TOOL_START, .index = index, .id = id, .name = calls->v[i].name};
        if ((st = emit(p, &ev)) != RP_OK) break;
        ev = (rp_parse_event){.kind = RP_PARSE_TOOL_ARGS,
                              .index = index,
                              .text = calls->v[i].args,
                              .len = strlen(calls->v[i].args)};
        if ((st = emit(p, &ev)) != RP_OK) break;
        ev = (rp_parse_event){.kind = RP_PARSE_TOOL_END, .index = index};
        st = emit(p, &ev);
    }
    return st;
}

/* Parses a body; emits its calls, or the raw text as content when it does not parse. */
static rp_status finish_region(rp_output_parser *p, rp_body_fn body, const char *b, size_t bn,
                               const char *raw, size_t raw_n, bool truncated)
{
    rp_body_ctx ctx = {p->tools, truncated};
    rp_calls calls = {0};
    rp_status st = body ? body(&ctx, b, bn, &calls) : RP_ERR_INVALID;
    if (st == RP_OK)
        st = emit_calls(p, &calls);
    else if (st == RP_ERR_INVALID)
        st = put_text(p, 0, raw, raw_n);
    else
        p->sticky = st;
    rp_calls_deinit(&calls);
    return st;
}

/* ---- CONTENT / REASONING scanning ---- */

typedef enum mkind { K_NONE, K_THINK_START, K_THINK_END, K_STRIP, K_OPEN } mkind;

/* The best marker match found so far at one position. */
typedef struct match {
    size_t len; /* of the longest full match; 0: none */
    mkind kind;
    const region_rule *rule;
    bool partial; /* some marker may still match with more input */
} match;

static void try_marker(match *m, const char *s, size_t n, const char *lit, mkind kind,
                       const region_rule *rule)
{
    int r = rp_marker_match(s, n, lit);
    if (r == RP_MARK_PARTIAL) {
        m->partial = true;
    } else if (r == RP_MARK_FULL && strlen(lit) > m->len) {
        m->len = strlen(lit);
        m->kind = kind;
        m->rule = rule;
    }
}

/* Longest marker active in the current mode at s[0..n). started: content came before, so
 * R_AT_START openers are off. Returns RP_MARK_FULL (m->kind, m->len, m->rule filled),
 * RP_MARK_PARTIAL (a marker may still match: wait for more input; m may hold a shorter full
 * match to take if the input ends) or RP_MARK_NONE. */
static int match_here(const rp_output_parser *p, const char *s, size_t n, bool started, match *m)
{
    *m = (match){0};
    if (p->mode == M_REASONING) {
        for (int i = 0; i < 3 && p->rf->end[i]; i++)
            try_marker(m, s, n, p->rf->end[i], K_THINK_END, NULL);
    } else {
        if (p->rf) {
            for (int i = 0; i < 3 && p->rf->start[i]; i++)
                try_marker(m, s, n, p->rf->start[i], K_THINK_START, NULL);
            for (int i = 0; i < 2 && p->rf->strip[i]; i++)
                try_marker(m, s, n, p->rf->strip[i], K_STRIP, NULL);
        }
        if (p->tf) {
            for (int i = 0; i < 4 && p->tf->rules[i].open; i++) {
                const region_rule *r = &p->tf->rules[i];
                if (!(r->flags & R_AT_START) || !started) try_marker(m, s, n, r->open, K_OPEN, r);
            }
            for (int i = 0; i < 2 && p->tf->strip[i]; i++)
                try_marker(m, s, n, p->tf->strip[i], K_STRIP, NULL);
        }
    }
    if (m->partial) return RP_MARK_PARTIAL;
    return m->len ? RP_MARK_FULL : RP_MARK_NONE;
}

static void enter_call(rp_output_parser *p, const region_rule *r, size_t at, size_t len)
{
    p->mode = M_CALL;
    p->rule = r;
    p->call_start = at;
    p->body_start = (r->flags & R_KEEP_OPEN) ? at : at + len;
    p->pos = p->body_start;
    p->cs = C_BODY;
    p->depth = 0;
    p->seen_value = false;
    p->value_end = 0;
}

/* Emits decided text of CONTENT/REASONING mode up to the next marker and acts on it. */
static rp_status scan_text(rp_output_parser *p, bool final)
{
    const char *s = p->in.data;
    size_t n = p->in.len, run = p->pos, i = p->pos;
    int reasoning = p->mode == M_REASONING;
    bool started = p->content_started; /* content so far, including the run not yet emitted */
    while (i < n) {
        match mt = {0};
        int m = RP_MARK_NONE;
        if ((reasoning ? p->end_byte : p->first_byte)[(unsigned char)s[i]])
            m = match_here(p, s + i, n - i, started, &mt);
        if (m == RP_MARK_PARTIAL && final) /* the end came: take a full match if any */
            m = mt.len ? RP_MARK_FULL : RP_MARK_NONE;
        if (m == RP_MARK_NONE) {
            started = started || !is_ws(s[i]);
            i++;
            continue;
        }
        rp_status st = put_text(p, reasoning, s + run, i - run);
        p->pos = i;
        if (st != RP_OK || m == RP_MARK_PARTIAL) return st != RP_OK ? st : RP_AGAIN;
        switch (mt.kind) {
        case K_THINK_START:
            rp_buf_reset(&p->ch[0].ws);
            p->mode = M_REASONING;
            p->ch[1].drop = true;
            break;
        case K_THINK_END:
            rp_buf_reset(&p->ch[1].ws);
            p->mode = M_CONTENT;
            p->ch[0].drop = true;
            break;
        case K_OPEN:
            enter_call(p, mt.rule, i, mt.len);
            return RP_OK;
        case K_STRIP: /* markup around the answer: whitespace next to it is layout */
            rp_buf_reset(&p->ch[0].ws);
            p->ch[0].drop = true;
            break;
        default:
            break;
        }
        p->pos = i + mt.len;
        return RP_OK; /* the mode may have changed: the caller loops */
    }
    p->pos = n;
    return put_text(p, reasoning, s + run, n - run);
}

/* ---- CALL scanning ---- */

/* Region [call_start, end_raw) with body [body_start, body_end) is complete. */
static rp_status close_region(rp_output_parser *p, size_t body_end, size_t end_raw)
{
    const char *s = p->in.data;
    p->mode = M_CONTENT;
    p->pos = end_raw;
    bool truncated = p->rule->close && end_raw == body_end; /* the close marker never came */
    return finish_region(p, p->tf->body, s + p->body_start, body_end - p->body_start,
                         s + p->call_start, end_raw - p->call_start, truncated);
}

/* Checks a literal at s[i..n): returns its length when it fully matches, 0 when it does not,
 * SIZE_MAX when it might (wait). */
static size_t literal_at(const char *lit, const char *s, size_t i, size_t n)
{
    int m = lit ? rp_marker_match(s + i, n - i, lit) : RP_MARK_NONE;
    return m == RP_MARK_FULL ? strlen(lit) : m == RP_MARK_PARTIAL ? SIZE_MAX : 0;
}

/* Advances the CALL machine over the buffered bytes. Returns RP_AGAIN when it needs more.
 * One switch over the scanner state (STYLE rule 19's state-machine exception to the size
 * budget): C_BODY looks for the close marker, zone openers, literals, string quotes and
 * brackets; the other states consume strings, zones and the R_CHAIN separator. */
static rp_status scan_call(rp_output_parser *p, bool final)
{
    const tool_fmt *tf = p->tf;
    const region_rule *r = p->rule;
    const char *s = p->in.data;
    size_t n = p->in.len, i = p->pos;
    while (i < n) {
        char c = s[i];
        switch (p->cs) {
        case C_BODY: {
            size_t l = literal_at(r->close, s, i, n);
            if (l == SIZE_MAX && !final) goto again;
            if (l && l != SIZE_MAX) return close_region(p, i, i + l);
            l = literal_at(tf->zone[0], s, i, n);
            if (l == SIZE_MAX && !final) goto again;
            if (l && l != SIZE_MAX) {
                p->cs = C_ZONE;
                i += l;
                continue;
            }
            if (!r->close) {
                for (int k = 0; k < 2 && tf->literals[k]; k++) {
                    l = literal_at(tf->literals[k], s, i, n);
                    if (l == SIZE_MAX && !final) goto again;
                    if (l && l != SIZE_MAX) break;
                    l = 0;
                }
                if (l && l != SIZE_MAX) {
                    i += l;
                    continue;
                }
            }
            if ((tf->quote == Q_JSON && c == '"') ||
                (tf->quote == Q_PY && (c == '"' || c == '\''))) {
                p->cs = C_STR;
                p->quote = c;
            } else if (!r->close && (c == '[' || c == '{' || c == '(')) {
                p->seen_value = true;
                if (++p->depth > MAX_DEPTH)
                    return close_region(p, i + 1, i + 1); /* absurd nesting: keep as text */
            } else if (!r->close && (c == ']' || c == '}' || c == ')')) {
                if (--p->depth <= 0) {
                    p->value_end = i + 1;
                    if (!(r->flags & R_CHAIN) || p->depth < 0) return close_region(p, i + 1, i + 1);
                    p->depth = 0;
                    p->cs = C_AFTER;
                }
            } else if (!r->close && !p->seen_value && i - p->body_start > MAX_BALANCED_PREFIX) {
                return close_region(p, i, i); /* no value follows the opener: text */
            }
            i++;
            continue;
        }
        case C_STR:
            if (c == '\\')
                p->cs = C_STR_ESC;
            else if (c == p->quote)
                p->cs = C_BODY;
            i++;
            continue;
        case C_STR_ESC:
            p->cs = C_STR;
            i++;
            continue;
        case C_ZONE: {
            size_t l = literal_at(tf->zone[1], s, i, n);
            if (l == SIZE_MAX && !final) goto again;
            if (l && l != SIZE_MAX) {
                p->cs = C_BODY;
                i += l;
            } else {
                i++;
            }
            continue;
        }
        case C_AFTER:
        case C_CHAIN:
            if (is_ws(c)) {
                i++;
                continue;
            }
            if (p->cs == C_AFTER && c == ';') {
                p->cs = C_CHAIN;
                i++;
                continue;
            }
            if (p->cs == C_CHAIN && c == '{') {
                p->cs = C_BODY;
                continue;
            }
            return close_region(p, p->value_end, p->value_end);
        }
    }
    p->pos = n;
    if (!final) return RP_AGAIN;
    /* the output ended inside the region: parse what is there */
    if (p->cs == C_AFTER || p->cs == C_CHAIN) return close_region(p, p->value_end, p->value_end);
    if (p->cs == C_ZONE && r->close) {
        /* a value zone never closed: maybe the model dropped its closing tag, and the close
         * marker we skipped inside the "value" really ends the region */
        const char *e = rp_find(s + p->body_start, s + n, r->close);
        rp_calls calls = {0};
        rp_body_ctx ctx = {p->tools, false};
        if (e &&
            tf->body(&ctx, s + p->body_start, (size_t)(e - s) - p->body_start, &calls) == RP_OK) {
            rp_status st = emit_calls(p, &calls);
            rp_calls_deinit(&calls);
            p->mode = M_CONTENT;
            p->pos = (size_t)(e - s) + strlen(r->close);
            return st;
        }
        rp_calls_deinit(&calls);
    }
    return close_region(p, n, n);
again:
    p->pos = i;
    return RP_AGAIN;
}

/* Runs the machine over the buffered input until it needs more (or, when final, to the end),
 * then drops the consumed prefix of `in`. */
static rp_status run(rp_output_parser *p, bool final)
{
    rp_status st = RP_OK;
    if (!p->in.data) return p->sticky; /* nothing was fed yet */
    while (p->sticky == RP_OK) {
        if (p->mode == M_CALL)
            st = scan_call(p, final);
        else
            st = scan_text(p, final);
        if (st != RP_OK) break;
        if (p->mode != M_CALL && p->pos >= p->in.len) break;
    }
    if (st == RP_AGAIN) st = RP_OK;
    if (p->sticky != RP_OK) return p->sticky;
    size_t keep = p->mode == M_CALL ? p->call_start : p->pos;
    if (keep > 0) {
        memmove(p->in.data, p->in.data + keep, p->in.len - keep);
        p->in.len -= keep;
        p->in.data[p->in.len] = '\0';
        p->pos -= keep;
        if (p->mode == M_CALL) {
            p->call_start -= keep;
            p->body_start -= keep;
            p->value_end = p->value_end >= keep ? p->value_end - keep : 0;
        }
    }
    return st;
}

/* ---- Harmony bridge ---- */

static rp_status harmony_text(void *user, bool reasoning, const char *s, size_t n)
{
    return put_text(user, reasoning ? 1 : 0, s, n);
}

static rp_status harmony_call(void *user, const char *name, const char *body, size_t n,
                              const char *raw, size_t raw_n)
{
    rp_output_parser *p = user;
    json_t *args = NULL;
    rp_calls calls = {0};
    rp_status st = rp_json_args_parse(body, n, &args);
    if (st == RP_OK) st = rp_calls_push(&calls, name, strlen(name), args);
    if (st == RP_OK)
        st = emit_calls(p, &calls);
    else if (st == RP_ERR_INVALID)
        st = put_text(p, 0, raw, raw_n);
    rp_calls_deinit(&calls);
    return st;
}

/* ---- Public API ---- */

rp_status rp_output_parser_new(const rp_output_parser_config *cfg, rp_output_parser **out,
                               rp_err *err)
{
    *out = NULL;
    const tool_fmt *tf = NULL;
    const reasoning_fmt *rf = NULL;
    if (!cfg->on_event) return rp_err_set(err, RP_ERR_INVALID, "output parser: no event callback");
    if (!no_name(cfg->tool_parser) && !(tf = find_tool(cfg->tool_parser)))
        return rp_err_set(err, RP_ERR_NOT_FOUND,
                          "unknown tool-call parser '%s' (known: hermes, qwen3_coder, "
                          "llama3_json, mistral, openai, ...; see 'rapid help parse')",
                          cfg->tool_parser);
    if (!no_name(cfg->reasoning_parser) && !(rf = find_reasoning(cfg->reasoning_parser)))
        return rp_err_set(err, RP_ERR_NOT_FOUND,
                          "unknown reasoning parser '%s' (known: qwen3, deepseek_r1, "
                          "openai_gptoss, mistral, ...; see 'rapid help parse')",
                          cfg->reasoning_parser);
    rp_output_parser *p = rp_calloc(1, sizeof *p);
    if (!p) return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    p->tf = tf;
    p->rf = rf;
    p->on_event = cfg->on_event;
    p->user = cfg->user;
    p->gen_id = cfg->gen_id;
    p->gen_id_user = cfg->gen_id_user;
    p->tools = cfg->tools ? json_incref((json_t *)cfg->tools) : NULL;
    p->short_ids = tf && strcmp(tf->name, "mistral") == 0; /* its templates want 9 alnum ids */
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p;
    p->rng = seed | 1;
    bool harmony = (tf && !tf->body) || (rf && !rf->start[0]);
    if (harmony) {
        /* any tool parser: calls wanted, whatever the format name */
        if (rp_harmony_new(tf != NULL, &p->harmony) != RP_OK) {
            rp_output_parser_free(p);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
        p->tf = NULL;
        p->rf = NULL;
    }
    p->ch[1].drop = true;
    if (p->rf && cfg->think_opened) p->mode = M_REASONING;
    /* bytes that can start a CONTENT-mode marker */
    const char *marks[16];
    size_t nm = 0;
    if (p->rf) {
        for (int i = 0; i < 3 && p->rf->start[i]; i++)
            marks[nm++] = p->rf->start[i];
        for (int i = 0; i < 2 && p->rf->strip[i]; i++)
            marks[nm++] = p->rf->strip[i];
    }
    if (p->tf) {
        for (int i = 0; i < 4 && p->tf->rules[i].open; i++)
            marks[nm++] = p->tf->rules[i].open;
        for (int i = 0; i < 2 && p->tf->strip[i]; i++)
            marks[nm++] = p->tf->strip[i];
    }
    for (size_t i = 0; i < nm; i++)
        p->first_byte[(unsigned char)marks[i][0]] = true;
    for (int i = 0; p->rf && i < 3 && p->rf->end[i]; i++)
        p->end_byte[(unsigned char)p->rf->end[i][0]] = true;
    *out = p;
    return RP_OK;
}

rp_status rp_output_parser_feed(rp_output_parser *p, const char *text, size_t len, rp_err *err)
{
    if (p->sticky != RP_OK)
        return rp_err_set(err, p->sticky, "output parser stopped: %s", rp_status_str(p->sticky));
    if (p->finished) return rp_err_set(err, RP_ERR_INVALID, "output parser: feed after finish");
    rp_status st;
    if (p->harmony) {
        rp_harmony_sink sink = {p, harmony_text, harmony_call};
        st = rp_harmony_feed(p->harmony, text, len, false, &sink);
    } else {
        if (len && rp_buf_append(&p->in, text, len) != RP_OK)
            return rp_err_set(err, p->sticky = RP_ERR_NOMEM, "out of memory");
        st = run(p, false);
    }
    if (st != RP_OK) return rp_err_set(err, st, "output parser: %s", rp_status_str(st));
    return RP_OK;
}

rp_status rp_output_parser_finish(rp_output_parser *p, rp_err *err)
{
    if (p->finished) return RP_OK;
    rp_status st = p->sticky;
    if (st == RP_OK) {
        if (p->harmony) {
            rp_harmony_sink sink = {p, harmony_text, harmony_call};
            st = rp_harmony_feed(p->harmony, NULL, 0, true, &sink);
        } else {
            st = run(p, true);
        }
    }
    p->finished = true;
    /* trailing whitespace: kept in a plain answer, dropped after calls and in reasoning */
    if (st == RP_OK && p->n_calls == 0 && !p->ch[0].drop)
        st = emit_raw(p, 0, p->ch[0].ws.data, p->ch[0].ws.len);
    rp_buf_reset(&p->ch[0].ws);
    rp_buf_reset(&p->ch[1].ws);
    if (st != RP_OK) return rp_err_set(err, st, "output parser: %s", rp_status_str(st));
    return RP_OK;
}

void rp_output_parser_free(rp_output_parser *p)
{
    if (!p) return;
    rp_harmony_free(p->harmony);
    json_decref(p->tools);
    rp_buf_deinit(&p->in);
    rp_buf_deinit(&p->ch[0].ws);
    rp_buf_deinit(&p->ch[1].ws);
    rp_free(p);
}

int rp_output_parser_n_calls(const rp_output_parser *p)
{
    return p->n_calls;
}

/* ---------------------------------------------------------------------------------------- */
/* Choosing parsers                                                                          */

static bool has(const char *s, const char *lit)
{
    return s && strstr(s, lit) != NULL;
}

/* clang-format off */
/* Template markers, most specific first: {marker, tool parser, reasoning marker, reasoning}. */
static const struct {
    const char *marker, *tool, *think_marker, *reasoning;
} k_detect[] = {
    {"<|channel|>", "openai", "<|channel|>", "openai_gptoss"},
    {"<minimax:tool_call>", "minimax_m2", "<think>", "minimax_m2"},
    {"<seed:tool_call>", "seed_oss", "<seed:think>", "seed_oss"},
    {"<|tool_calls_section_begin|>", "kimi_k2", "<think>", "kimi_k2"},
    {"<arg_key>", "glm45", "<think>", "glm45"},
    {"<|tool_call>", "gemma4", "<|channel>", "gemma4"},
    {"<parameter=", "qwen3_coder", "<think>", "qwen3"},
    {"[TOOL_CALLS]", "mistral", "[THINK]", "mistral"},
    {"<|tool_call_start|>", "lfm2", "<think>", "qwen3"},
    {"<|tool_list_start|>", "lfm2", "<think>", "qwen3"},
    {"<|START_ACTION|>", "cohere_command3", "<|START_THINKING|>", "cohere_command3"},
    {"<|action_start|>", "internlm", NULL, NULL},
    {"<tool_calls>", "jamba", "<think>", "hunyuan_a13b"},
    {"functools[", "phi4_mini_json", NULL, NULL},
    {"<|tool_call|>", "granite", "thought process", "granite"},
    {"<|python_start|>", "llama4_pythonic", NULL, NULL},
    {"<|python_tag|>", "llama3_json", NULL, NULL},
    {"Environment: ipython", "llama3_json", NULL, NULL},
    {"<tool_call>", "hermes", "<think>", "qwen3"},
};

/* config.json model_type -> parsers, when the template says nothing. */
static const struct {
    const char *model_type, *tool, *reasoning;
} k_model_types[] = {
    {"gpt_oss", "openai", "openai_gptoss"},     {"qwen3_5", "qwen3_coder", "qwen3"},
    {"qwen3_5_text", "qwen3_coder", "qwen3"},   {"qwen3_5_moe", "qwen3_coder", "qwen3"},
    {"qwen3_next", "hermes", "qwen3"},          {"qwen3_moe", "hermes", "qwen3"},
    {"qwen3", "hermes", "qwen3"},               {"qwen2", "hermes", NULL},
    {"llama4", "llama4_pythonic", NULL},        {"llama", "llama3_json", NULL},
    {"mistral", "mistral", NULL},               {"mistral3", "mistral", "mistral"},
    {"lfm2", "lfm2", NULL},                     {"lfm2_moe", "lfm2", NULL},
    {"gemma4", "gemma4", "gemma4"},             {"gemma4_text", "gemma4", "gemma4"},
    {"deepseek_v3", "deepseek_v3", "deepseek_r1"}, {"kimi_k2", "kimi_k2", "kimi_k2"},
    {"glm4_moe", "glm45", "glm45"},             {"minimax_m2", "minimax_m2", "minimax_m2"},
    {"seed_oss", "seed_oss", "seed_oss"},       {"granite", "granite", "granite"},
    {"granitemoehybrid", "granite4", NULL},     {"cohere2", "cohere_command3", NULL},
    {"jamba", "jamba", NULL},                   {"internlm2", "internlm", NULL},
    {"hunyuan_v1_moe", "hunyuan_a13b", "hunyuan_a13b"}, {"phi3", "phi4_mini_json", NULL},
};

/* clang-format on */

void rp_output_parser_detect(const char *tpl, const char *model_type, const char **tool,
                             const char **reasoning)
{
    *tool = NULL;
    *reasoning = NULL;
    for (size_t i = 0; tpl && i < RP_ARRAY_LEN(k_detect) && !*tool; i++) {
        if (!has(tpl, k_detect[i].marker)) continue;
        *tool = k_detect[i].tool;
        if (k_detect[i].think_marker && has(tpl, k_detect[i].think_marker))
            *reasoning = k_detect[i].reasoning;
    }
    if (*tool && strcmp(*tool, "glm45") == 0 && has(tpl, "clear_thinking"))
        *tool = "glm47"; /* GLM-4.7 writes NAME<arg_key> with no newline */
    if (*tool && strcmp(*tool, "jamba") == 0 && model_type &&
        strncmp(model_type, "hunyuan", 7) == 0)
        *tool = "hunyuan_a13b";
    if (*tool && strcmp(*tool, "jamba") == 0 &&
        !(model_type && strncmp(model_type, "hunyuan", 7) == 0))
        *reasoning = NULL;
    if (*tool && strcmp(*tool, "hermes") == 0 && model_type &&
        strncmp(model_type, "granite", 7) == 0)
        *tool = "granite4";
    if (has(tpl, DS_CALLS_BEGIN)) { /* V3 writes TYPE<sep>NAME\n```json, V3.1 NAME<sep>{..} */
        *tool = has(tpl, "```json") ? "deepseek_v3" : "deepseek_v31";
        *reasoning = has(tpl, "<think>") ? "deepseek_r1" : NULL;
    }
    if (tpl && !*reasoning) {
        if (has(tpl, "<think>"))
            *reasoning = has(tpl, "\xef\xbd\x9c"
                                  "Assistant\xef\xbd\x9c")
                             ? "deepseek_r1"
                             : "qwen3";
        else if (has(tpl, "[THINK]"))
            *reasoning = "mistral";
        else if (has(tpl, "<seed:think>"))
            *reasoning = "seed_oss";
    }
    if (*tool || !model_type) return;
    for (size_t i = 0; i < RP_ARRAY_LEN(k_model_types); i++)
        if (strcmp(k_model_types[i].model_type, model_type) == 0) {
            *tool = k_model_types[i].tool;
            if (!*reasoning) *reasoning = k_model_types[i].reasoning;
            return;
        }
}

bool rp_output_parser_think_opened(const char *reasoning_parser, const char *prompt, size_t len)
{
    const reasoning_fmt *rf = no_name(reasoning_parser) ? NULL : find_reasoning(reasoning_parser);
    if (!rf || !prompt) return false;
    while (len > 0 && is_ws(prompt[len - 1]))
        len--;
    for (int i = 0; i < 3 && rf->start[i]; i++) {
        size_t k = strlen(rf->start[i]);
        if (len >= k && memcmp(prompt + len - k, rf->start[i], k) == 0) return true;
    }
    return false;
}

const char *rp_output_parser_reasoning_close(const char *reasoning_parser)
{
    const reasoning_fmt *rf = no_name(reasoning_parser) ? NULL : find_reasoning(reasoning_parser);
    return rf && rf->end[0] ? rf->end[0] : "";
}

rp_status rp_output_parser_call_prefix(const char *tool_parser, const char *name, char **out,
                                       rp_err *err)
{
    *out = NULL;
    const tool_fmt *tf = no_name(tool_parser) ? NULL : find_tool(tool_parser);
    if (!tf)
        return rp_err_set(err, RP_ERR_NOT_FOUND, "unknown tool-call parser '%s'",
                          tool_parser ? tool_parser : "");
    if (!name) {
        *out = rp_strdup(tf->prefix_any);
        return *out ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.'))
            return rp_err_set(err, RP_ERR_INVALID,
                              "tool name '%s' has characters a forced "
                              "call cannot carry (use [A-Za-z0-9_.-])",
                              name);
    rp_buf b = {0};
    const char *fmt = tf->prefix_named, *pct = strstr(fmt, "%s");
    if (rp_buf_append(&b, fmt, (size_t)(pct - fmt)) != RP_OK || rp_buf_puts(&b, name) != RP_OK ||
        rp_buf_puts(&b, pct + 2) != RP_OK) {
        rp_buf_deinit(&b);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    *out = rp_buf_take(&b);
    return RP_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Collector                                                                                 */

struct rp_parse_collector {
    rp_buf content, reasoning, args;
    bool has_content, has_reasoning, in_call;
    json_t *calls; /* array of finished calls */
    json_t *cur;   /* the open call */
};

rp_status rp_parse_collector_new(rp_parse_collector **out)
{
    rp_parse_collector *c = rp_calloc(1, sizeof *c);
    if (!c || !(c->calls = json_array())) {
        rp_free(c);
        return RP_ERR_NOMEM;
    }
    *out = c;
    return RP_OK;
}

void rp_parse_collector_free(rp_parse_collector *c)
{
    if (!c) return;
    rp_buf_deinit(&c->content);
    rp_buf_deinit(&c->reasoning);
    rp_buf_deinit(&c->args);
    json_decref(c->calls);
    json_decref(c->cur);
    rp_free(c);
}

rp_status rp_parse_collector_event(void *collector, const rp_parse_event *ev)
{
    rp_parse_collector *c = collector;
    switch (ev->kind) {
    case RP_PARSE_CONTENT:
    case RP_PARSE_REASONING: {
        if (c->in_call) return RP_ERR_INVALID;
        bool r = ev->kind == RP_PARSE_REASONING;
        *(r ? &c->has_reasoning : &c->has_content) = true;
        return rp_buf_append(r ? &c->reasoning : &c->content, ev->text, ev->len);
    }
    case RP_PARSE_TOOL_START:
        if (c->in_call || ev->index != (int)json_array_size(c->calls) || !ev->id || !ev->name)
            return RP_ERR_INVALID;
        c->cur = json_pack("{s:s,s:s,s:{s:s}}", "id", ev->id, "type", "function", "function",
                           "name", ev->name);
        if (!c->cur) return RP_ERR_NOMEM;
        rp_buf_reset(&c->args);
        c->in_call = true;
        return RP_OK;
    case RP_PARSE_TOOL_ARGS:
        if (!c->in_call || ev->index != (int)json_array_size(c->calls)) return RP_ERR_INVALID;
        return rp_buf_append(&c->args, ev->text, ev->len);
    case RP_PARSE_TOOL_END: {
        if (!c->in_call || ev->index != (int)json_array_size(c->calls)) return RP_ERR_INVALID;
        json_t *fn = json_object_get(c->cur, "function");
        if (json_object_set_new(fn, "arguments",
                                json_stringn(c->args.data ? c->args.data : "", c->args.len)) != 0 ||
            json_array_append_new(c->calls, c->cur) != 0) {
            c->cur = NULL;
            return RP_ERR_NOMEM;
        }
        c->cur = NULL;
        c->in_call = false;
        return RP_OK;
    }
    }
    return RP_ERR_INVALID;
}

json_t *rp_parse_collector_message(const rp_parse_collector *c)
{
    json_t *m = json_object();
    if (!m) return NULL;
    json_t *content = c->has_content ? json_stringn(c->content.data, c->content.len) : json_null();
    json_t *reasoning =
        c->has_reasoning ? json_stringn(c->reasoning.data, c->reasoning.len) : json_null();
    int rc = json_object_set_new(m, "role", json_string("assistant"));
    rc |= json_object_set_new(m, "content", content);
    rc |= json_object_set_new(m, "reasoning_content", reasoning);
    if (json_array_size(c->calls)) rc |= json_object_set(m, "tool_calls", c->calls);
    if (rc != 0) {
        json_decref(m);
        return NULL;
    }
    return m;
}
