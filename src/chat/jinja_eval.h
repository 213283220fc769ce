/* chat/jinja_eval.h - the Jinja evaluator: renders an AST against a context, and the internal
 * interface its filter, test and method modules implement.
 *
 * A render owns one jrender: the arena every value of the render lives in, the output buffer,
 * the scope chain and the error. Everything fallible returns 0 or -1; on -1 the rp_err holds
 * the message (RP_ERR_INVALID for template errors, RP_ERR_NOMEM) and the render unwinds.
 *
 * Ownership: values returned by these functions live in r->a until the render ends.
 * Threading: one jrender per render; the AST is shared read-only.
 * Errors:    see above; messages follow Jinja2's ("'x' is undefined", "No filter named ...").
 */
#ifndef RP_CHAT_JINJA_EVAL_H
#define RP_CHAT_JINJA_EVAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "base/arena.h"
#include "base/buf.h"
#include "base/status.h"
#include "chat/jinja_parse.h"
#include "chat/jinja_value.h"

typedef struct jvar {
    const char *name;
    size_t len;
    jv val;
} jvar;

typedef struct jscope {
    struct jscope *parent;
    jvar *vars;
    size_t n, cap;
} jscope;

typedef struct jrender {
    rp_arena *a;
    rp_buf *out;
    rp_err *err;
    jscope *scope;
    int depth;       /* nested macro calls and block renders (bounded like Python's recursion) */
    time_t now;      /* strftime_now's clock */
    size_t out_limit;/* bytes: a runaway template fails instead of eating memory */
    size_t mem_limit;/* bytes of render arena */
    uint64_t steps, max_steps; /* statements and expressions evaluated, and the bound */
    int edepth;      /* eval/exec recursion depth (bounded: deep ASTs cannot blow the stack) */
} jrender;

/* Call arguments: positional, then keyword. */
typedef struct jargs {
    const jv *pos;
    size_t n_pos;
    const char *const *kw_names;
    const jv *kw;
    size_t n_kw;
} jargs;

typedef int (*jfunc_fn)(jrender *r, const jargs *args, jv *out);

typedef struct jfunc {
    const char *name;
    jfunc_fn fn;
} jfunc;

/* A bound method: self.name(...) (str, dict, list and loop methods). */
typedef struct jmethod {
    jv self;
    const char *name;
} jmethod;

/* Records a template error (RP_ERR_INVALID) and returns -1. */
int jr_fail(jrender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts n units of work against the step bound (linear scans inside one operation). */
int jr_charge(jrender *r, uint64_t n);
/* Records NOMEM and returns -1. */
int jr_nomem(jrender *r);
/* Raises the UndefinedError an undefined value carries. */
int jr_undefined_error(jrender *r, jv u);
/* An undefined whose error says "'<type>' object has no attribute '<name>'". */
jv jr_missing_attr(jrender *r, jv obj, const char *name, size_t len);

/* Binds args to the parameter names of a filter/function/method. out[i] is set for every
 * parameter (JV_UNDEF when missing) and bit i of *present says whether it was given.
 * Fails on unknown keywords or too many positionals. `skip` positionals are not bound. */
int jr_bind(jrender *r, const char *fname, const jargs *args, const char *const *names,
            size_t n_names, jv *out, unsigned *present);

/* Calls any callable value. */
int jr_call(jrender *r, jv fn, const jargs *args, jv *out);
/* str() into a new arena string. */
int jr_str(jrender *r, jv v, jv *out);
/* Iterates v the way Python's iter() does for Jinja values: lists/tuples, dict keys, string
 * characters (UTF-8 code points), Undefined as empty. Fills a fresh list. */
int jr_iter_list(jrender *r, jv v, jv_list **out);
/* obj.name, as Jinja2's getattr (attribute first, then item); obj[key] as getitem. */
int jr_getattr(jrender *r, jv obj, const char *name, size_t len, jv *out);
int jr_getitem(jrender *r, jv obj, jv key, jv *out);
/* Binary operators and comparisons with Python semantics. */
int jr_binop(jrender *r, int op, jv a, jv b, jv *out);
int jr_compare(jrender *r, int op, jv a, jv b, bool *out);
/* Calls a joiner() result (state is its namespace). */
int jr_joiner_call(jrender *r, jv state, jv *out);
/* loop.cycle(...) and loop.changed(...) (self is the JV_LOOP). */
int jr_loop_method(jrender *r, jv self, const char *name, const jargs *args, jv *out);
/* Renders a block of statements into the current output. */
int jr_exec_body(jrender *r, const jnodes *body);

/* Filters and tests (jinja_filters.c). found = false when no such name. */
int rp_jinja_filter(jrender *r, const char *name, jv v, const jargs *args, jv *out, bool *found);
int rp_jinja_test(jrender *r, const char *name, jv v, const jargs *args, bool *out, bool *found);
bool rp_jinja_has_filter(const char *name);
bool rp_jinja_has_test(const char *name);

/* Methods (jinja_methods.c): attribute lookup of a method name on a str/dict/list value
 * (false when the value has no such method) and its call. */
bool rp_jinja_has_method(jv self, const char *name, size_t len, bool *unsafe);
int rp_jinja_call_method(jrender *r, jv self, const char *name, const jargs *args, jv *out);
/* Python str methods shared with filters. */
int rp_jinja_str_format(jrender *r, jv fmt, const jargs *args, jv *out);
int rp_jinja_str_percent(jrender *r, jv fmt, jv args, jv *out);
int rp_jinja_str_case(jrender *r, jv s, int mode, jv *out); /* mode: u l f s t c (see .c) */
int rp_jinja_str_strip(jrender *r, jv s, jv chars, int which, jv *out); /* which: 'b','l','r' */
int rp_jinja_str_replace(jrender *r, jv s, jv old, jv new_, int64_t count, jv *out);
/* HTML-escapes a string (markupsafe.escape): the result is marked safe. */
int rp_jinja_escape(jrender *r, jv s, jv *out);
/* Number of code points of a UTF-8 string (Python len). */
size_t rp_jinja_utf8_len(const char *s, size_t n);

/* Renders root with context variables already converted (a dict) and the globals. */
int rp_jinja_render(jrender *r, const jnode *root, jv context);

#endif
