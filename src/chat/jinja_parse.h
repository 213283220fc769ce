/* chat/jinja_parse.h - the Jinja2 parser and the AST it builds.
 *
 * The grammar and operator precedence follow Jinja2's parser.py: conditional expressions,
 * or/and/not, comparisons (chained, in, not in), + -, ~, * / // %, **, unary - +, then
 * postfix (.attr, [index], [slice], call) and filters/tests (| f(args), is [not] t args).
 * Statements: if/elif/else, for (target unpacking, inline if filter, else, recursive),
 * set (expression and block forms, namespace attributes), macro, call, filter, with,
 * print, raw, break/continue (loopcontrols) and generation (transformers' AssistantTracker).
 *
 * Ownership: every node lives in the arena passed to rp_jinja_parse.
 * Threading: the AST is read-only after parsing; renders share it.
 * Errors:    -1 with "template syntax error, line N: ..." (RP_ERR_INVALID) or RP_ERR_NOMEM.
 */
#ifndef RP_CHAT_JINJA_PARSE_H
#define RP_CHAT_JINJA_PARSE_H

#include "base/arena.h"
#include "base/status.h"
#include "chat/jinja_value.h"

typedef enum jnode_kind {
    /* expressions */
    N_LIT,      /* lit */
    N_NAME,     /* name */
    N_LIST,     /* items */
    N_TUPLE,    /* items */
    N_DICT,     /* items: key, value, key, value, ... */
    N_GETATTR,  /* a.name */
    N_GETITEM,  /* a[b] */
    N_SLICE,    /* a:b:c inside [] (any may be NULL) */
    N_CALL,     /* a(items, kw..., *b, **c): b and c (may be NULL) are the unpacked arguments */
    N_FILTER,   /* a | name(items, kw..., *b, **c); a is NULL inside filter and set blocks */
    N_TEST,     /* a is [not] name(items, kw..., *b, **c); op = 1 when negated */
    N_BINOP,    /* a op b: op is the operator character code (see jinja_op) */
    N_UNARY,    /* op a: '-', '+' */
    N_NOT,      /* not a */
    N_AND,      /* a and b */
    N_OR,       /* a or b */
    N_COND,     /* b if a else c (c may be NULL: Undefined) */
    N_COMPARE,  /* a, then items hold N_CMPOP nodes each with op and a */
    N_CMPOP,
    N_KWARG,    /* name = a (in kw) */
    N_PARAM,    /* macro parameter: name, a = default or NULL */
    /* statements */
    N_TEXT,     /* lit (a string) */
    N_OUTPUT,   /* {{ a }} */
    N_IF,       /* if a: body else orelse */
    N_FOR,      /* for a in b if c: body else orelse; op = 1 when recursive */
    N_SET,      /* a = b */
    N_SETBLOCK, /* a = body rendered, then filter chain c (N_FILTER nodes with a = inner) */
    N_MACRO,    /* name(items: N_PARAM) body; op: the MACRO_* names the body reads */
    N_CALLBLOCK,/* a: the N_CALL; items: N_PARAM of caller; body; op as N_MACRO */
    N_FILTERBLOCK, /* c: filter chain; body */
    N_WITH,     /* items: N_SET nodes; body */
    N_BREAK,
    N_CONTINUE,
    N_BODY,     /* a statement list in body (generation and block blocks, the template root) */
    N_NOLOADER, /* include/import/from/extends: a from_string template has no loader, so
                 * Jinja2 raises when the tag runs (not when it compiles); a = the name */
} jnode_kind;

/* Binary operators (N_BINOP op) and comparisons (N_CMPOP op). */
typedef enum jinja_op {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jinja_op;

enum { MACRO_VARARGS = 1, MACRO_KWARGS = 2, MACRO_CALLER = 4 };

typedef struct jnode jnode;

typedef struct jnodes {
    jnode **v;
    size_t n;
} jnodes;

struct jnode {
    jnode_kind kind;
    int op;
    int line;
    jv lit;
    const char *name; /* NUL-terminated */
    size_t name_len;
    jnode *a, *b, *c;
    jnodes items;
    jnodes kw;     /* N_KWARG nodes */
    jnodes body;   /* statements */
    jnodes orelse; /* statements */
};

/* Parses the whole template into a N_BODY root. */
int rp_jinja_parse(rp_arena *a, const char *src, size_t len, jnode **root, rp_err *err);

#endif
