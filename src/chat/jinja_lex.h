/* chat/jinja_lex.h - the Jinja2 lexer: template source to a token array.
 *
 * Implements Jinja2's lexing with transformers' settings: trim_blocks (the first newline after
 * a block or comment tag is dropped, unless the tag ends with "+%}"), lstrip_blocks (spaces and
 * tabs before a block or comment tag at the start of a line are dropped, unless it opens with
 * "{%+"), "-" whitespace control on every tag kind, {# comments #}, {% raw %} blocks, newline
 * normalisation (\r\n and \r become \n) and keep_trailing_newline=False (one final newline of
 * the source is dropped).
 *
 * Ownership: token text points into the normalised copy of the source kept in jinja_lexed,
 *            which lives in the caller's arena.
 * Threading: no shared state.
 * Errors:    -1 with a message ("line N: ...") in the rp_err; NOMEM as RP_ERR_NOMEM.
 */
#ifndef RP_CHAT_JINJA_LEX_H
#define RP_CHAT_JINJA_LEX_H

#include <stddef.h>

#include "base/arena.h"
#include "base/status.h"

typedef enum jtok_kind {
    JT_EOF = 0,
    JT_TEXT,        /* template data between tags */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING,      /* text holds the decoded bytes */
    JT_INT,
    JT_FLOAT,
    JT_OP,          /* text holds the operator: "+", "//", "==", "(", ... */
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line;
    const char *text;
    size_t len;
    long long ival;
    double fval;
} jtok;

typedef struct jinja_lexed {
    jtok *toks;
    size_t n;
} jinja_lexed;

int rp_jinja_lex(rp_arena *a, const char *src, size_t len, jinja_lexed *out, rp_err *err);

#endif
