/* chat/jinja_eval.c - tree-walking evaluator for the Jinja AST.
 *
 * Design notes:
 *  1. Scopes follow Jinja2: the context is the outermost scope; every for-loop iteration,
 *     macro call and with block gets a fresh scope, so {% set %} inside them does not leak out
 *     (templates use namespace() for that). if blocks do not open a scope.
 *  2. Undefined is a value (JV_UNDEF) carrying the message of the UndefinedError it raises
 *     when used for anything but printing, testing, iterating or defaulting.
 *  3. Statements return 0, -1 (error), EXEC_BREAK or EXEC_CONTINUE.
 *  4. Limits keep hostile templates bounded: call depth, output size and range() length
 *     (100000 items, as Jinja2's sandbox).
 */
#include "chat/jinja_eval.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

enum { EXEC_BREAK = 1, EXEC_CONTINUE = 2 };
enum { MAX_DEPTH = 200, MAX_EDEPTH = 2500 };

typedef struct jmacro {
    const jnode *def;     /* N_MACRO, or N_CALLBLOCK for a caller */
    jscope *closure;
    jv caller;            /* JV_MACRO of the call block, or JV_UNDEF */
} jmacro;

typedef struct jloop {
    jv_list *items;
    size_t i;
    int depth;
    const jnode *node;
    jscope *scope;        /* where the loop statement runs (for recursive calls) */
    jv changed_last;
    bool changed_init;
} jloop;

static int eval(jrender *r, const jnode *n, jv *out);
static int exec_stmts(jrender *r, const jnodes *body);

/* ---- errors ------------------------------------------------------------------------------ */

int jr_fail(jrender *r, const char *fmt, ...)
{
    if (r->err) {
        r->err->code = RP_ERR_INVALID;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int jr_charge(jrender *r, uint64_t n)
{
    r->steps += n / 8;
    if (r->steps > r->max_steps)
        return jr_fail(r, "TemplateRuntimeError: the template ran for more than %llu steps",
                       (unsigned long long)r->max_steps);
    return 0;
}

int jr_nomem(jrender *r)
{
    rp_err_set(r->err, RP_ERR_NOMEM, "out of memory rendering the template");
    return -1;
}

int jr_undefined_error(jrender *r, jv u)
{
    if (u.flags & JV_F_UNSAFE)
        return jr_fail(r, "SecurityError: %s", u.u.s ? u.u.s : "unsafe access");
    return jr_fail(r, "UndefinedError: %s", u.u.s ? u.u.s : "undefined value");
}

static const char *obj_desc(jv obj)
{
    return obj.type == JV_NONE ? "None" : jv_type_name(obj);
}

jv jr_missing_attr(jrender *r, jv obj, const char *name, size_t len)
{
    char *msg = rp_arena_alloc(r->a, len + 64);
    if (!msg)
        return jv_undef("undefined");
    if (obj.type == JV_NONE)
        snprintf(msg, len + 64, "'None' has no attribute '%.*s'", (int)len, name);
    else
        snprintf(msg, len + 64, "'%s object' has no attribute '%.*s'", obj_desc(obj), (int)len, name);
    return jv_undef(msg);
}

static jv missing_elem(jrender *r, jv obj, jv key)
{
    rp_buf b = {0};
    if (rp_buf_printf(&b, "'%s object' has no element ", obj_desc(obj)) || jv_write_repr(&b, key)) {
        rp_buf_deinit(&b);
        return jv_undef("undefined");
    }
    char *msg = rp_arena_strndup(r->a, b.data, b.len);
    rp_buf_deinit(&b);
    return jv_undef(msg ? msg : "undefined");
}

static jv unsafe_attr(jrender *r, jv obj, const char *name, size_t len)
{
    char *msg = rp_arena_alloc(r->a, len + 80);
    if (!msg)
        return jv_undef("undefined");
    snprintf(msg, len + 80, "access to attribute '%.*s' of '%s' object is unsafe.", (int)len, name,
             obj_desc(obj));
    jv u = jv_undef(msg);
    u.flags = JV_F_UNSAFE;
    return u;
}

/* ---- scopes ------------------------------------------------------------------------------ */

static jscope *scope_push(jrender *r, jscope *parent)
{
    jscope *s = RP_ARENA_NEW(r->a, jscope, 1);
    if (s)
        s->parent = parent;
    return s;
}

static int scope_set(jrender *r, jscope *s, const char *name, size_t len, jv v)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0) {
            s->vars[i].val = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        jvar *nv = RP_ARENA_NEW(r->a, jvar, cap);
        if (!nv)
            return jr_nomem(r);
        if (s->n)
            jv_copy(nv, s->vars, s->n * sizeof(jvar));
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n++] = (jvar){.name = name, .len = len, .val = v};
    return 0;
}

static jv *scope_find(jscope *s, const char *name, size_t len)
{
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->vars[i].len == len && memcmp(s->vars[i].name, name, len) == 0)
                return &s->vars[i].val;
    return NULL;
}

/* ---- globals ----------------------------------------------------------------------------- */

static int g_range(jrender *r, const jargs *args, jv *out)
{
    if (args->n_kw)
        return jr_fail(r, "TypeError: range() takes no keyword arguments");
    int64_t v[3] = {0, 0, 1};
    if (args->n_pos < 1 || args->n_pos > 3)
        return jr_fail(r, "TypeError: range expected 1 to 3 arguments, got %zu", args->n_pos);
    for (size_t i = 0; i < args->n_pos; i++) {
        jv a = args->pos[i];
        if (a.type != JV_INT && a.type != JV_BOOL)
            return jr_fail(r, "TypeError: '%s' object cannot be interpreted as an integer", jv_type_name(a));
        v[args->n_pos == 1 ? 1 : i] = a.u.i;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0)
        return jr_fail(r, "ValueError: range() arg 3 must not be zero");
    int64_t count = 0;
    if (step > 0 && stop > start)
        count = (stop - start + step - 1) / step;
    else if (step < 0 && stop < start)
        count = (start - stop - step - 1) / -step;
    if (count > 100000)
        return jr_fail(r, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    if (jv_list_new(r->a, (size_t)count, out))
        return jr_nomem(r);
    for (int64_t k = 0; k < count; k++)
        out->u.l->items[out->u.l->n++] = jv_int(start + k * step);
    out->flags = JV_F_RANGE;
    out->u.l->range_start = start;
    out->u.l->range_stop = stop;
    out->u.l->range_step = step;
    return 0;
}

static int kwargs_dict(jrender *r, const jargs *args, jv *out, jv_type type, const char *fname)
{
    if (jv_dict_new(r->a, 0, out))
        return jr_nomem(r);
    out->type = (uint8_t)type;
    if (args->n_pos > 1)
        return jr_fail(r, "TypeError: %s expected at most 1 argument, got %zu", fname, args->n_pos);
    if (args->n_pos == 1) {
        jv src = args->pos[0];
        if (src.type == JV_DICT || src.type == JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jv_dict_set(r->a, out->u.d, src.u.d->keys[i], src.u.d->vals[i]))
                    return jr_nomem(r);
        } else if (src.type == JV_LIST) {
            for (size_t i = 0; i < src.u.l->n; i++) {
                jv pair = src.u.l->items[i];
                if (pair.type != JV_LIST || pair.u.l->n != 2)
                    return jr_fail(r, "ValueError: dictionary update sequence element #%zu has the wrong length", i);
                if (jv_dict_set(r->a, out->u.d, pair.u.l->items[0], pair.u.l->items[1]))
                    return jr_nomem(r);
            }
        } else {
            return jr_fail(r, "TypeError: '%s' object is not iterable", jv_type_name(src));
        }
    }
    for (size_t i = 0; i < args->n_kw; i++)
        if (jv_dict_set(r->a, out->u.d, jv_str(args->kw_names[i], strlen(args->kw_names[i])), args->kw[i]))
            return jr_nomem(r);
    return 0;
}

static int g_namespace(jrender *r, const jargs *args, jv *out)
{
    return kwargs_dict(r, args, out, JV_NS, "namespace");
}

static int g_dict(jrender *r, const jargs *args, jv *out)
{
    return kwargs_dict(r, args, out, JV_DICT, "dict");
}

static int g_raise(jrender *r, const jargs *args, jv *out)
{
    jv msg = args->n_pos ? args->pos[0] : (args->n_kw ? args->kw[0] : jv_str("", 0));
    jv s;
    if (jr_str(r, msg, &s))
        return -1;
    return jr_fail(r, "%.*s", (int)s.n, s.u.s);
}

static int g_strftime(jrender *r, const jargs *args, jv *out)
{
    jv fmt;
    unsigned present;
    static const char *const names[] = {"format"};
    if (jr_bind(r, "strftime_now", args, names, 1, &fmt, &present))
        return -1;
    if (fmt.type != JV_STR)
        return jr_fail(r, "TypeError: strftime() argument 1 must be str, not %s", jv_type_name(fmt));
    char f[256];
    if (fmt.n >= sizeof f)
        return jr_fail(r, "ValueError: strftime format too long");
    jv_copy(f, fmt.u.s, fmt.n);
    f[fmt.n] = 0;
    struct tm tm;
    localtime_r(&r->now, &tm);
    char buf[1024];
    size_t n = fmt.n ? strftime(buf, sizeof buf, f, &tm) : 0;
    return jv_str_dup(r->a, buf, n, out) ? jr_nomem(r) : 0;
}

/* joiner(sep=", "): a callable returning "" the first time and sep afterwards. Its state is a
 * namespace only the bound method sees. */
static int g_joiner(jrender *r, const jargs *args, jv *out)
{
    jv sep;
    unsigned present;
    static const char *const names[] = {"sep"};
    if (jr_bind(r, "joiner", args, names, 1, &sep, &present))
        return -1;
    jv state;
    if (jv_dict_new(r->a, 2, &state))
        return jr_nomem(r);
    state.type = JV_NS;
    if (jv_dict_set(r->a, state.u.d, jv_str("sep", 3), (present & 1) ? sep : jv_str(", ", 2)) ||
        jv_dict_set(r->a, state.u.d, jv_str("used", 4), jv_bool(false)))
        return jr_nomem(r);
    jmethod *m = RP_ARENA_NEW(r->a, jmethod, 1);
    if (!m)
        return jr_nomem(r);
    m->self = state;
    m->name = "joiner";
    *out = (jv){.type = JV_METHOD, .u.p = m};
    return 0;
}

int jr_joiner_call(jrender *r, jv state, jv *out)
{
    jv *used = jv_dict_get_str(state.u.d, "used", 4), *sep = jv_dict_get_str(state.u.d, "sep", 3);
    if (!used || !sep)
        return jr_fail(r, "TypeError: not a joiner");
    if (!jv_truthy(*used)) {
        *used = jv_bool(true);
        *out = jv_str("", 0);
        return 0;
    }
    *out = *sep;
    return 0;
}

static const jfunc k_globals[] = {
    {"joiner", g_joiner},
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise},
    {"strftime_now", g_strftime},
};

static bool find_global(const char *name, size_t len, jv *out)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_globals); i++)
        if (strlen(k_globals[i].name) == len && memcmp(k_globals[i].name, name, len) == 0) {
            *out = (jv){.type = JV_FUNC, .u.p = &k_globals[i]};
            return true;
        }
    return false;
}

/* ---- argument binding and calls ---------------------------------------------------------- */

int jr_bind(jrender *r, const char *fname, const jargs *args, const char *const *names,
            size_t n_names, jv *out, unsigned *present)
{
    *present = 0;
    for (size_t i = 0; i < n_names; i++)
        out[i] = jv_undef("missing argument");
    if (args->n_pos > n_names)
        return jr_fail(r, "TypeError: %s() takes at most %zu arguments (%zu given)", fname, n_names,
                       args->n_pos);
    for (size_t i = 0; i < args->n_pos; i++) {
        out[i] = args->pos[i];
        *present |= 1u << i;
    }
    for (size_t k = 0; k < args->n_kw; k++) {
        size_t i;
        for (i = 0; i < n_names; i++)
            if (strcmp(names[i], args->kw_names[k]) == 0)
                break;
        if (i == n_names)
            return jr_fail(r, "TypeError: %s() got an unexpected keyword argument '%s'", fname,
                           args->kw_names[k]);
        if (*present & (1u << i))
            return jr_fail(r, "TypeError: %s() got multiple values for argument '%s'", fname, names[i]);
        out[i] = args->kw[k];
        *present |= 1u << i;
    }
    return 0;
}

static int render_to_string(jrender *r, const jnodes *body, jv *out)
{
    rp_buf buf = {0}, *saved = r->out;
    r->out = &buf;
    int rc = exec_stmts(r, body);
    r->out = saved;
    if (rc > 0)
        rc = jr_fail(r, "TemplateSyntaxError: break or continue outside a loop");
    if (rc < 0) {
        rp_buf_deinit(&buf);
        return -1;
    }
    rc = jv_str_dup(r->a, buf.data ? buf.data : "", buf.len, out);
    rp_buf_deinit(&buf);
    return rc ? jr_nomem(r) : 0;
}

/* Binds a macro call the way jinja2.runtime.Macro.__call__ does (positionals, keywords,
 * defaults evaluated in the new scope, varargs/kwargs/caller only when the body reads them),
 * then renders the body to a string. Long because the binding rules are one sequence. */
static int call_macro(jrender *r, const jmacro *m, const jargs *args, jv *out)
{
    const jnode *def = m->def;
    const char *mname = def->kind == N_MACRO ? def->name : "caller";
    if (r->depth >= MAX_DEPTH)
        return jr_fail(r, "RecursionError: maximum recursion depth exceeded in macro '%s'", mname);
    jscope *s = scope_push(r, m->closure);
    if (!s)
        return jr_nomem(r);
    size_t np = def->items.n;
    jv varargs;
    if (jv_list_new(r->a, 0, &varargs))
        return jr_nomem(r);
    varargs.flags = JV_F_TUPLE;
    for (size_t i = 0; i < args->n_pos; i++) {
        if (i < np) {
            if (scope_set(r, s, def->items.v[i]->name, def->items.v[i]->name_len, args->pos[i]))
                return -1;
        } else if (!(def->op & MACRO_VARARGS)) {
            return jr_fail(r, "TypeError: macro '%s' takes not more than %zu argument(s)", mname, np);
        } else if (jv_list_push(r->a, varargs.u.l, args->pos[i])) {
            return jr_nomem(r);
        }
    }
    jv kwargs;
    if (jv_dict_new(r->a, 0, &kwargs))
        return jr_nomem(r);
    jv caller = m->caller;
    for (size_t k = 0; k < args->n_kw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (strcmp(def->items.v[i]->name, args->kw_names[k]) == 0)
                break;
        if (i < np) {
            if (i < args->n_pos)
                return jr_fail(r, "TypeError: macro '%s' got multiple values for argument '%s'", mname,
                               args->kw_names[k]);
            if (scope_set(r, s, def->items.v[i]->name, def->items.v[i]->name_len, args->kw[k]))
                return -1;
        } else if (strcmp(args->kw_names[k], "caller") == 0 && (def->op & MACRO_CALLER)) {
            caller = args->kw[k];
        } else if (!(def->op & MACRO_KWARGS)) {
            if (strcmp(args->kw_names[k], "caller") == 0)
                return jr_fail(r, "TypeError: macro '%s' was invoked with two values for the special caller argument", mname);
            return jr_fail(r, "TypeError: macro '%s' takes no keyword argument '%s'", mname, args->kw_names[k]);
        } else if (jv_dict_set(r->a, kwargs.u.d, jv_str(args->kw_names[k], strlen(args->kw_names[k])),
                               args->kw[k])) {
            return jr_nomem(r);
        }
    }
    /* defaults for the parameters not given (evaluated in the macro's scope, left to right) */
    jscope *saved_scope = r->scope;
    r->scope = s;
    for (size_t i = 0; i < np; i++) {
        const jnode *prm = def->items.v[i];
        bool given = false;
        for (size_t j = 0; j < s->n; j++)
            if (s->vars[j].len == prm->name_len && memcmp(s->vars[j].name, prm->name, prm->name_len) == 0)
                given = true;
        if (given)
            continue;
        jv v;
        if (prm->a) {
            if (eval(r, prm->a, &v)) {
                r->scope = saved_scope;
                return -1;
            }
        } else {
            char *msg = rp_arena_alloc(r->a, prm->name_len + 64);
            if (!msg)
                return jr_nomem(r);
            snprintf(msg, prm->name_len + 64, "parameter '%s' was not provided", prm->name);
            v = jv_undef(msg);
        }
        if (scope_set(r, s, prm->name, prm->name_len, v)) {
            r->scope = saved_scope;
            return -1;
        }
    }
    int rc = scope_set(r, s, "varargs", 7, varargs);
    if (!rc)
        rc = scope_set(r, s, "kwargs", 6, kwargs);
    if (!rc && (def->op & MACRO_CALLER)) /* a macro reading caller has its own, maybe undefined */
        rc = scope_set(r, s, "caller", 6, caller.type == JV_MACRO ? caller : jv_undef("No caller defined"));
    if (!rc) {
        r->depth++;
        rc = render_to_string(r, &def->body, out);
        r->depth--;
    }
    r->scope = saved_scope;
    return rc;
}

static int exec_for_items(jrender *r, const jnode *n, jv_list *items, int depth, jv *rendered);

int jr_call(jrender *r, jv fn, const jargs *args, jv *out)
{
    switch (fn.type) {
    case JV_FUNC:
        return ((const jfunc *)fn.u.p)->fn(r, args, out);
    case JV_MACRO:
        return call_macro(r, fn.u.p, args, out);
    case JV_METHOD: {
        const jmethod *m = fn.u.p;
        return rp_jinja_call_method(r, m->self, m->name, args, out);
    }
    case JV_LOOP: {
        jloop *l = (jloop *)fn.u.p;
        if (!(l->node->op & 1))
            return jr_fail(r, "TypeError: Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
        if (args->n_pos != 1)
            return jr_fail(r, "TypeError: loop() takes exactly one argument");
        if (r->depth >= MAX_DEPTH)
            return jr_fail(r, "RecursionError: maximum recursion depth exceeded in a recursive loop");
        jv_list *items;
        if (jr_iter_list(r, args->pos[0], &items))
            return -1;
        jscope *saved = r->scope;
        r->scope = l->scope;
        r->depth++;
        int rc = exec_for_items(r, l->node, items, l->depth + 1, out);
        r->depth--;
        r->scope = saved;
        return rc;
    }
    case JV_UNDEF:
        return jr_undefined_error(r, fn);
    default:
        return jr_fail(r, "TypeError: '%s' object is not callable", jv_type_name(fn));
    }
}

int jr_str(jrender *r, jv v, jv *out)
{
    return jv_to_str(r->a, v, out) ? jr_nomem(r) : 0;
}

/* ---- UTF-8 helpers for str indexing ------------------------------------------------------ */

size_t rp_jinja_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            c++;
    return c;
}

/* Byte offset of code point k (k <= length). */
static size_t utf8_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (k > 0 && i < n) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        k--;
    }
    return i;
}

int jr_iter_list(jrender *r, jv v, jv_list **out)
{
    jv l;
    switch (v.type) {
    case JV_LIST:
        if (v.flags & JV_F_GEN) { /* iterating a Python iterator consumes it */
            jv_list *g = v.u.l;
            if (g->lazy_error)
                return jr_fail(r, "%s", g->lazy_error);
            if (jv_list_new(r->a, g->n - g->pos, &l))
                return jr_nomem(r);
            if (g->n > g->pos) /* (no pointer arithmetic on an empty list's NULL items) */
                jv_copy(l.u.l->items, g->items + g->pos, (g->n - g->pos) * sizeof(jv));
            l.u.l->n = g->n - g->pos;
            g->pos = g->n;
            *out = l.u.l;
            return 0;
        }
        *out = v.u.l;
        return 0;
    case JV_UNDEF:
        if (v.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, v);
        if (jv_list_new(r->a, 0, &l))
            return jr_nomem(r);
        *out = l.u.l;
        return 0;
    case JV_DICT:
        if (jv_list_new(r->a, v.u.d->n, &l))
            return jr_nomem(r);
        jv_copy(l.u.l->items, v.u.d->keys, v.u.d->n * sizeof(jv));
        l.u.l->n = v.u.d->n;
        *out = l.u.l;
        return 0;
    case JV_STR: {
        size_t nc = rp_jinja_utf8_len(v.u.s, v.n);
        if (jv_list_new(r->a, nc, &l))
            return jr_nomem(r);
        size_t i = 0;
        while (i < v.n) {
            size_t j = i + 1;
            while (j < v.n && ((unsigned char)v.u.s[j] & 0xc0) == 0x80)
                j++;
            l.u.l->items[l.u.l->n++] = jv_str(v.u.s + i, j - i);
            i = j;
        }
        *out = l.u.l;
        return 0;
    }
    default:
        return jr_fail(r, "TypeError: '%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- attribute and item access ----------------------------------------------------------- */

static int loop_attr(jrender *r, jloop *l, const char *name, size_t len, jv *out)
{
    size_t n = l->items->n, i = l->i;
#define IS(s) (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)
    if (IS("index"))
        *out = jv_int((int64_t)i + 1);
    else if (IS("index0"))
        *out = jv_int((int64_t)i);
    else if (IS("revindex"))
        *out = jv_int((int64_t)(n - i));
    else if (IS("revindex0"))
        *out = jv_int((int64_t)(n - i - 1));
    else if (IS("first"))
        *out = jv_bool(i == 0);
    else if (IS("last"))
        *out = jv_bool(i + 1 == n);
    else if (IS("length"))
        *out = jv_int((int64_t)n);
    else if (IS("depth"))
        *out = jv_int(l->depth);
    else if (IS("depth0"))
        *out = jv_int(l->depth - 1);
    else if (IS("previtem"))
        *out = i > 0 ? l->items->items[i - 1] : jv_undef("there is no previous item");
    else if (IS("nextitem"))
        *out = i + 1 < n ? l->items->items[i + 1] : jv_undef("there is no next item");
    else if (IS("cycle") || IS("changed")) {
        jmethod *m = RP_ARENA_NEW(r->a, jmethod, 1);
        if (!m)
            return jr_nomem(r);
        m->self = (jv){.type = JV_LOOP, .u.p = l};
        m->name = IS("cycle") ? "cycle" : "changed";
        *out = (jv){.type = JV_METHOD, .u.p = m};
    } else
        *out = jr_missing_attr(r, (jv){.type = JV_LOOP}, name, len);
#undef IS
    return 0;
}

int jr_loop_method(jrender *r, jv self, const char *name, const jargs *args, jv *out)
{
    jloop *l = (jloop *)self.u.p;
    if (strcmp(name, "cycle") == 0) {
        if (args->n_pos == 0)
            return jr_fail(r, "TypeError: no items for cycling given");
        *out = args->pos[l->i % args->n_pos];
        return 0;
    }
    jv cur;
    if (args->n_pos == 1) {
        cur = args->pos[0];
    } else {
        jv t;
        if (jv_list_new(r->a, args->n_pos, &t))
            return jr_nomem(r);
        jv_copy(t.u.l->items, args->pos, args->n_pos * sizeof(jv));
        t.u.l->n = args->n_pos;
        t.flags = JV_F_TUPLE;
        cur = t;
    }
    bool changed = !l->changed_init || !jv_equal(cur, l->changed_last);
    l->changed_init = true;
    l->changed_last = cur;
    *out = jv_bool(changed);
    return 0;
}

static int bound_method(jrender *r, jv self, const char *name, jv *out)
{
    jmethod *m = RP_ARENA_NEW(r->a, jmethod, 1);
    if (!m)
        return jr_nomem(r);
    m->self = self;
    m->name = name;
    *out = (jv){.type = JV_METHOD, .u.p = m};
    return 0;
}

int jr_getattr(jrender *r, jv obj, const char *name, size_t len, jv *out)
{
    if (obj.type == JV_UNDEF)
        return jr_undefined_error(r, obj);
    if (len >= 2 && name[0] == '_' && name[1] == '_') { /* the sandbox hides dunder attributes */
        *out = unsafe_attr(r, obj, name, len);
        return 0;
    }
    if (obj.type == JV_LOOP)
        return loop_attr(r, (jloop *)obj.u.p, name, len, out);
    if (obj.type == JV_LIST && (obj.flags & JV_F_GROUP) && obj.u.l->n == 2) {
        if (len == 7 && memcmp(name, "grouper", 7) == 0) {
            *out = obj.u.l->items[0];
            return 0;
        }
        if (len == 4 && memcmp(name, "list", 4) == 0) {
            *out = obj.u.l->items[1];
            return 0;
        }
    }
    if (obj.type == JV_NS) {
        jv *v = jv_dict_get_str(obj.u.d, name, len);
        *out = v ? *v : jr_missing_attr(r, obj, name, len);
        return 0;
    }
    bool unsafe = false;
    if (rp_jinja_has_method(obj, name, len, &unsafe)) {
        if (unsafe) {
            *out = unsafe_attr(r, obj, name, len);
            return 0;
        }
        char *nm = rp_arena_strndup(r->a, name, len);
        if (!nm)
            return jr_nomem(r);
        return bound_method(r, obj, nm, out);
    }
    if (obj.type == JV_DICT) {
        jv *v = jv_dict_get_str(obj.u.d, name, len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = jr_missing_attr(r, obj, name, len);
    return 0;
}

static int norm_index(jrender *r, jv key, size_t n, size_t *out)
{
    int64_t i = key.u.i;
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return 1;
    *out = (size_t)i;
    return 0;
}

int jr_getitem(jrender *r, jv obj, jv key, jv *out)
{
    if (obj.type == JV_UNDEF)
        return jr_undefined_error(r, obj);
    if (key.type == JV_UNDEF && (obj.type != JV_DICT))
        return jr_undefined_error(r, key);
    size_t idx;
    switch (obj.type) {
    case JV_DICT: {
        if (jr_charge(r, obj.u.d->n))
            return -1;
        jv *v = jv_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case JV_LIST:
        if (obj.flags & (JV_F_GEN | JV_F_VIEW)) { /* iterators and dict views are not subscriptable */
            *out = missing_elem(r, obj, key);
            return 0;
        }
        if (key.type == JV_INT || key.type == JV_BOOL) {
            if (norm_index(r, key, obj.u.l->n, &idx) == 0) {
                *out = obj.u.l->items[idx];
                return 0;
            }
            *out = missing_elem(r, obj, key);
            return 0;
        }
        break;
    case JV_STR:
        if (key.type == JV_INT || key.type == JV_BOOL) {
            size_t nc = rp_jinja_utf8_len(obj.u.s, obj.n);
            if (norm_index(r, key, nc, &idx) == 0) {
                size_t b = utf8_offset(obj.u.s, obj.n, idx);
                size_t e = utf8_offset(obj.u.s, obj.n, idx + 1);
                *out = jv_str(obj.u.s + b, e - b);
                return 0;
            }
            *out = missing_elem(r, obj, key);
            return 0;
        }
        break;
    default:
        break;
    }
    if (key.type == JV_STR)
        return jr_getattr(r, obj, key.u.s, key.n, out);
    *out = missing_elem(r, obj, key);
    return 0;
}

/* Python slice index resolution (PySlice_AdjustIndices). */
static int slice(jrender *r, jv obj, jv start, jv stop, jv step, jv *out)
{
    if (obj.type == JV_UNDEF)
        return jr_undefined_error(r, obj);
    int64_t st = 1;
    if (step.type != JV_NONE && step.type != JV_UNDEF) {
        if (step.type != JV_INT && step.type != JV_BOOL)
            return jr_fail(r, "TypeError: slice indices must be integers or None");
        st = step.u.i;
        if (st == 0)
            return jr_fail(r, "ValueError: slice step cannot be zero");
    }
    bool is_str = obj.type == JV_STR;
    if (!is_str && obj.type != JV_LIST)
        return jr_fail(r, "TypeError: '%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = is_str ? (int64_t)rp_jinja_utf8_len(obj.u.s, obj.n) : (int64_t)obj.u.l->n;
    int64_t lo, hi;
    jv bounds[2] = {start, stop};
    int64_t res[2];
    for (int k = 0; k < 2; k++) {
        jv b = bounds[k];
        if (b.type == JV_NONE || b.type == JV_UNDEF) {
            res[k] = k == 0 ? (st < 0 ? len - 1 : 0) : (st < 0 ? -1 : len);
            continue;
        }
        if (b.type != JV_INT && b.type != JV_BOOL)
            return jr_fail(r, "TypeError: slice indices must be integers or None");
        int64_t v = b.u.i;
        if (v < 0) {
            v += len;
            if (v < 0)
                v = st < 0 ? -1 : 0;
        } else if (v >= len) {
            v = st < 0 ? len - 1 : len;
        }
        res[k] = v;
    }
    lo = res[0];
    hi = res[1];
    jv l;
    if (jv_list_new(r->a, 0, &l))
        return jr_nomem(r);
    if (is_str) {
        bool ascii = rp_jinja_utf8_len(obj.u.s, obj.n) == obj.n;
        if (st == 1) {
            if (hi <= lo) {
                *out = jv_str("", 0);
                return 0;
            }
            size_t b = ascii ? (size_t)lo : utf8_offset(obj.u.s, obj.n, (size_t)lo);
            size_t e = ascii ? (size_t)hi : utf8_offset(obj.u.s, obj.n, (size_t)hi);
            *out = jv_str(obj.u.s + b, e - b);
            return 0;
        }
        jv_list *chars;
        if (jr_iter_list(r, obj, &chars))
            return -1;
        rp_buf b = {0};
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
            if (rp_buf_append(&b, chars->items[i].u.s, chars->items[i].n)) {
                rp_buf_deinit(&b);
                return jr_nomem(r);
            }
        int rc = jv_str_dup(r->a, b.data ? b.data : "", b.len, out);
        rp_buf_deinit(&b);
        return rc ? jr_nomem(r) : 0;
    }
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
        if (jv_list_push(r->a, l.u.l, obj.u.l->items[i]))
            return jr_nomem(r);
    if (obj.flags & JV_F_VIEW)
        return jr_fail(r, "TypeError: '%s' object is not subscriptable", jv_type_name(obj));
    l.flags = obj.flags & JV_F_TUPLE;
    *out = l;
    return 0;
}

/* ---- operators --------------------------------------------------------------------------- */

static const char *op_symbol(int op)
{
    static const char *const s[] = {"", "+", "-", "*", "/", "//", "%", "**", "~",
                                    "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return op > 0 && op < (int)RP_ARRAY_LEN(s) ? s[op] : "?";
}

static int type_error(jrender *r, int op, jv a, jv b)
{
    return jr_fail(r, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op_symbol(op),
                   jv_type_name(a), jv_type_name(b));
}

static int repeat(jrender *r, jv seq, int64_t times, jv *out)
{
    if (times < 0)
        times = 0;
    if (seq.type == JV_STR) {
        if (seq.n && (uint64_t)times > r->out_limit / seq.n)
            return jr_fail(r, "MemoryError: string repetition too large");
        uint64_t total = (uint64_t)seq.n * (uint64_t)times;
        if (total > r->out_limit)
            return jr_fail(r, "MemoryError: string repetition too large");
        char *p = rp_arena_alloc(r->a, (size_t)total + 1);
        if (!p)
            return jr_nomem(r);
        for (int64_t i = 0; i < times; i++)
            jv_copy(p + (size_t)i * seq.n, seq.u.s, seq.n);
        *out = jv_str(p, (size_t)total);
        return 0;
    }
    if (seq.u.l->n && (uint64_t)times > 1000000 / seq.u.l->n)
        return jr_fail(r, "MemoryError: list repetition too large");
    uint64_t total = (uint64_t)seq.u.l->n * (uint64_t)times;
    if (total > 1000000)
        return jr_fail(r, "MemoryError: list repetition too large");
    jv l;
    if (jv_list_new(r->a, (size_t)total, &l))
        return jr_nomem(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++)
            l.u.l->items[l.u.l->n++] = seq.u.l->items[k];
    l.flags = seq.flags;
    *out = l;
    return 0;
}

static int concat(jrender *r, jv a, jv b, jv *out)
{
    if ((uint64_t)a.n + b.n > r->out_limit)
        return jr_fail(r, "MemoryError: string too large");
    char *p = rp_arena_alloc(r->a, (size_t)a.n + b.n + 1);
    if (!p)
        return jr_nomem(r);
    if (a.n)
        jv_copy(p, a.u.s, a.n);
    if (b.n)
        jv_copy(p + a.n, b.u.s, b.n);
    *out = jv_str(p, (size_t)a.n + b.n);
    return 0;
}

/* Python integers are unbounded; rapid's are 64-bit, so it fails rather than wrap. */
static int int_overflow(jrender *r)
{
    return jr_fail(r, "OverflowError: integer result does not fit in 64 bits");
}

static int arith(jrender *r, int op, jv a, jv b, jv *out)
{
    bool ints = a.type != JV_FLOAT && b.type != JV_FLOAT;
    int64_t x = a.u.i, y = b.u.i;
    double fx = jv_num(a), fy = jv_num(b);
    int64_t res;
    switch (op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
        if (!ints) {
            *out = jv_float(op == OP_ADD ? fx + fy : op == OP_SUB ? fx - fy : fx * fy);
            return 0;
        }
        if (op == OP_ADD ? __builtin_add_overflow(x, y, &res)
            : op == OP_SUB ? __builtin_sub_overflow(x, y, &res) : __builtin_mul_overflow(x, y, &res))
            return int_overflow(r);
        *out = jv_int(res);
        return 0;
    case OP_DIV:
        if (fy == 0.0)
            return jr_fail(r, "ZeroDivisionError: division by zero");
        *out = jv_float(fx / fy);
        return 0;
    case OP_FLOORDIV:
    case OP_MOD:
        if (ints) {
            if (y == 0)
                return jr_fail(r, "ZeroDivisionError: integer division or modulo by zero");
            if (y == -1) { /* avoid INT64_MIN / -1 */
                if (op == OP_FLOORDIV && x == INT64_MIN)
                    return int_overflow(r);
                *out = jv_int(op == OP_FLOORDIV ? -x : 0);
                return 0;
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = jv_int(op == OP_FLOORDIV ? q : m);
            return 0;
        }
        if (fy == 0.0)
            return jr_fail(r, "ZeroDivisionError: float division by zero");
        {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0)))
                m += fy;
            *out = jv_float(op == OP_FLOORDIV ? floor(fx / fy) : m);
        }
        return 0;
    case OP_POW:
        if (ints && y >= 0) {
            int64_t acc = 1;
            if (x == 0 || x == 1)
                acc = (y == 0 || x == 1) ? 1 : 0;
            else if (x == -1)
                acc = (y % 2) ? -1 : 1;
            else
                for (int64_t e = 0; e < y; e++)
                    if (__builtin_mul_overflow(acc, x, &acc))
                        return int_overflow(r);
            *out = jv_int(acc);
            return 0;
        }
        if (fx == 0.0 && fy < 0)
            return jr_fail(r, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
        *out = jv_float(pow(fx, fy));
        return 0;
    }
    return type_error(r, op, a, b);
}

int jr_binop(jrender *r, int op, jv a, jv b, jv *out)
{
    if (op == OP_CONCAT) {
        jv sa, sb;
        if ((a.flags & JV_F_UNSAFE) || (b.flags & JV_F_UNSAFE))
            return jr_undefined_error(r, (a.flags & JV_F_UNSAFE) ? a : b);
        if (jr_str(r, a, &sa) || jr_str(r, b, &sb))
            return -1;
        return concat(r, sa, sb, out);
    }
    if (op == OP_MOD && a.type == JV_STR && !(b.flags & JV_F_UNSAFE)) /* str % Undefined formats too */
        return rp_jinja_str_percent(r, a, b, out);
    if (a.type == JV_UNDEF)
        return jr_undefined_error(r, a);
    if (b.type == JV_UNDEF)
        return jr_undefined_error(r, b);
    if (jv_is_num(a) && jv_is_num(b))
        return arith(r, op, a, b, out);
    if (op == OP_ADD && a.type == JV_STR && b.type == JV_STR) {
        if (!((a.flags | b.flags) & JV_F_SAFE))
            return concat(r, a, b, out);
        /* Markup + str escapes the plain side and stays Markup */
        if (!(a.flags & JV_F_SAFE) && rp_jinja_escape(r, a, &a))
            return -1;
        if (!(b.flags & JV_F_SAFE) && rp_jinja_escape(r, b, &b))
            return -1;
        if (concat(r, a, b, out))
            return -1;
        out->flags = JV_F_SAFE;
        return 0;
    }
    if (op == OP_ADD && a.type == JV_LIST && b.type == JV_LIST &&
        !((a.flags | b.flags) & (JV_F_GEN | JV_F_RANGE | JV_F_VIEW)) &&
        (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE)) {
        jv l;
        if (jv_list_new(r->a, a.u.l->n + b.u.l->n, &l))
            return jr_nomem(r);
        jv_copy(l.u.l->items, a.u.l->items, a.u.l->n * sizeof(jv));
        if (b.u.l->n)
            jv_copy(l.u.l->items + a.u.l->n, b.u.l->items, b.u.l->n * sizeof(jv));
        l.u.l->n = a.u.l->n + b.u.l->n;
        l.flags = a.flags;
        *out = l;
        return 0;
    }
    if (op == OP_ADD && a.type == JV_STR)
        return jr_fail(r, "TypeError: can only concatenate str (not \"%s\") to str", jv_type_name(b));
    bool seq_a = a.type == JV_STR || (a.type == JV_LIST && !(a.flags & (JV_F_GEN | JV_F_RANGE | JV_F_VIEW)));
    bool seq_b = b.type == JV_STR || (b.type == JV_LIST && !(b.flags & (JV_F_GEN | JV_F_RANGE | JV_F_VIEW)));
    if (op == OP_MUL && seq_a && (b.type == JV_INT || b.type == JV_BOOL))
        return repeat(r, a, b.u.i, out);
    if (op == OP_MUL && seq_b && (a.type == JV_INT || a.type == JV_BOOL))
        return repeat(r, b, a.u.i, out);
    if (op == OP_MOD && a.type == JV_STR)
        return rp_jinja_str_percent(r, a, b, out);
    return type_error(r, op, a, b);
}

static int contains(jrender *r, jv item, jv container, bool *out)
{
    switch (container.type) {
    case JV_STR:
        if (item.type != JV_STR)
            return jr_fail(r, "TypeError: 'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *out = item.n == 0 || (container.n >= item.n && memmem(container.u.s, container.n, item.u.s, item.n));
        return 0;
    case JV_LIST: {
        *out = false;
        if (jr_charge(r, container.u.l->n))
            return -1;
        jv_list *l = container.u.l;
        bool gen = container.flags & JV_F_GEN;
        if (gen && l->lazy_error)
            return jr_fail(r, "%s", l->lazy_error);
        size_t i = gen ? l->pos : 0;
        for (; i < l->n && !*out; i++)
            *out = jv_equal(l->items[i], item);
        if (gen) /* "in" consumes an iterator up to the match */
            l->pos = i;
        return 0;
    }
    case JV_DICT:
        if ((item.type == JV_LIST && !(item.flags & (JV_F_TUPLE | JV_F_GEN | JV_F_RANGE))) ||
            item.type == JV_DICT)
            return jr_fail(r, "TypeError: unhashable type: '%s'", jv_type_name(item));
        if (jr_charge(r, container.u.d->n))
            return -1;
        *out = jv_dict_get(container.u.d, item) != NULL;
        return 0;
    case JV_UNDEF:
        if (container.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, container);
        *out = false;
        return 0;
    default:
        return jr_fail(r, "TypeError: argument of type '%s' is not iterable", jv_type_name(container));
    }
}

int jr_compare(jrender *r, int op, jv a, jv b, bool *out)
{
    switch (op) {
    case OP_EQ:
        *out = jv_equal(a, b);
        return 0;
    case OP_NE:
        *out = !jv_equal(a, b);
        return 0;
    case OP_IN:
    case OP_NOTIN:
        if (contains(r, a, b, out))
            return -1;
        if (op == OP_NOTIN)
            *out = !*out;
        return 0;
    default: {
        if (a.type == JV_UNDEF)
            return jr_undefined_error(r, a);
        if (b.type == JV_UNDEF)
            return jr_undefined_error(r, b);
        int c;
        if (jv_compare(a, b, &c))
            return jr_fail(r, "TypeError: '%s' not supported between instances of '%s' and '%s'",
                           op_symbol(op), jv_type_name(a), jv_type_name(b));
        *out = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
        return 0;
    }
    }
}

/* ---- expressions ------------------------------------------------------------------------- */

typedef struct evargs {
    jv pos_small[8], kw_small[8];
    const char *names_small[8];
    jargs a;
} evargs;

static int eval(jrender *r, const jnode *n, jv *out);

/* Appends *b (an iterable) and **c (a mapping with str keys) to already evaluated args. */
static int eval_star_args(jrender *r, const jnode *n, evargs *ea)
{
    jv_list *extra = NULL;
    jv d = jv_none();
    if (n->b) {
        jv v;
        if (eval(r, n->b, &v) || jr_iter_list(r, v, &extra))
            return -1;
    }
    if (n->c) {
        if (eval(r, n->c, &d))
            return -1;
        if (d.type != JV_DICT)
            return jr_fail(r, "TypeError: argument after ** must be a mapping, not %s", jv_type_name(d));
    }
    size_t np = ea->a.n_pos + (extra ? extra->n : 0), nk = ea->a.n_kw + (d.type == JV_DICT ? d.u.d->n : 0);
    jv *pos = RP_ARENA_NEW(r->a, jv, np ? np : 1), *kw = RP_ARENA_NEW(r->a, jv, nk ? nk : 1);
    const char **names = RP_ARENA_NEW(r->a, const char *, nk ? nk : 1);
    if (!pos || !kw || !names)
        return jr_nomem(r);
    jv_copy(pos, ea->a.pos, ea->a.n_pos * sizeof(jv));
    if (extra)
        jv_copy(pos + ea->a.n_pos, extra->items, extra->n * sizeof(jv));
    jv_copy(kw, ea->a.kw, ea->a.n_kw * sizeof(jv));
    jv_copy(names, ea->a.kw_names, ea->a.n_kw * sizeof(char *));
    for (size_t i = 0; d.type == JV_DICT && i < d.u.d->n; i++) {
        jv k = d.u.d->keys[i];
        if (k.type != JV_STR)
            return jr_fail(r, "TypeError: keywords must be strings");
        char *s = rp_arena_strndup(r->a, k.u.s, k.n);
        if (!s)
            return jr_nomem(r);
        names[ea->a.n_kw + i] = s;
        kw[ea->a.n_kw + i] = d.u.d->vals[i];
    }
    ea->a = (jargs){.pos = pos, .n_pos = np, .kw_names = names, .kw = kw, .n_kw = nk};
    return 0;
}

static int eval_args(jrender *r, const jnode *n, evargs *ea)
{
    jv *pos = ea->pos_small, *kw = ea->kw_small;
    const char **names = ea->names_small;
    if (n->items.n > 8 && !(pos = RP_ARENA_NEW(r->a, jv, n->items.n)))
        return jr_nomem(r);
    if (n->kw.n > 8 && (!(kw = RP_ARENA_NEW(r->a, jv, n->kw.n)) ||
                        !(names = RP_ARENA_NEW(r->a, const char *, n->kw.n))))
        return jr_nomem(r);
    for (size_t i = 0; i < n->items.n; i++)
        if (eval(r, n->items.v[i], &pos[i]))
            return -1;
    for (size_t i = 0; i < n->kw.n; i++) {
        names[i] = n->kw.v[i]->name;
        if (eval(r, n->kw.v[i]->a, &kw[i]))
            return -1;
    }
    ea->a = (jargs){.pos = pos, .n_pos = n->items.n, .kw_names = names, .kw = kw, .n_kw = n->kw.n};
    if ((n->kind == N_CALL || n->kind == N_FILTER || n->kind == N_TEST) && (n->b || n->c))
        return eval_star_args(r, n, ea);
    return 0;
}

static int eval_filter(jrender *r, const jnode *n, jv v, jv *out)
{
    evargs ea;
    if (eval_args(r, n, &ea))
        return -1;
    bool found;
    if (rp_jinja_filter(r, n->name, v, &ea.a, out, &found))
        return -1;
    if (!found)
        return jr_fail(r, "TemplateAssertionError: No filter named '%s'.", n->name);
    return 0;
}

/* Applies a filter chain built with a NULL innermost operand to v. */
static int apply_chain(jrender *r, const jnode *f, jv v, jv *out)
{
    if (f->a) {
        if (apply_chain(r, f->a, v, &v))
            return -1;
    }
    return eval_filter(r, f, v, out);
}

static int eval_name(jrender *r, const jnode *n, jv *out)
{
    jv *v = scope_find(r->scope, n->name, n->name_len);
    if (v) {
        *out = *v;
        return 0;
    }
    if (find_global(n->name, n->name_len, out))
        return 0;
    char *msg = rp_arena_alloc(r->a, n->name_len + 32);
    if (!msg)
        return jr_nomem(r);
    snprintf(msg, n->name_len + 32, "'%s' is undefined", n->name);
    *out = jv_undef(msg);
    return 0;
}

static int eval_seq(jrender *r, const jnode *n, jv *out)
{
    if (n->kind == N_DICT) {
        if (jv_dict_new(r->a, n->items.n / 2, out))
            return jr_nomem(r);
        for (size_t i = 0; i + 1 < n->items.n; i += 2) {
            jv k, v;
            if (eval(r, n->items.v[i], &k) || eval(r, n->items.v[i + 1], &v))
                return -1;
            if (k.type == JV_LIST && !(k.flags & JV_F_TUPLE))
                return jr_fail(r, "TypeError: unhashable type: 'list'");
            if (k.type == JV_DICT)
                return jr_fail(r, "TypeError: unhashable type: 'dict'");
            if (jv_dict_set(r->a, out->u.d, k, v))
                return jr_nomem(r);
        }
        return 0;
    }
    if (jv_list_new(r->a, n->items.n, out))
        return jr_nomem(r);
    for (size_t i = 0; i < n->items.n; i++)
        if (eval(r, n->items.v[i], &out->u.l->items[i]))
            return -1;
    out->u.l->n = n->items.n;
    if (n->kind == N_TUPLE)
        out->flags = JV_F_TUPLE;
    return 0;
}

static int eval_test(jrender *r, const jnode *n, jv *out)
{
    jv v;
    if (eval(r, n->a, &v))
        return -1;
    evargs ea;
    if (eval_args(r, n, &ea))
        return -1;
    bool res, found;
    if (rp_jinja_test(r, n->name, v, &ea.a, &res, &found))
        return -1;
    if (!found)
        return jr_fail(r, "TemplateRuntimeError: No test named '%s'.", n->name);
    *out = jv_bool(n->op ? !res : res);
    return 0;
}

static int eval_compare(jrender *r, const jnode *n, jv *out)
{
    jv left;
    if (eval(r, n->a, &left))
        return -1;
    for (size_t i = 0; i < n->items.n; i++) {
        const jnode *c = n->items.v[i];
        jv right;
        bool res;
        if (eval(r, c->a, &right) || jr_compare(r, c->op, left, right, &res))
            return -1;
        if (!res) {
            *out = jv_bool(false);
            return 0;
        }
        left = right;
    }
    *out = jv_bool(true);
    return 0;
}

static int eval_node(jrender *r, const jnode *n, jv *out);

/* Every expression and statement passes through here: the step, memory and depth bounds. */
static int guard_enter(jrender *r)
{
    if (++r->steps > r->max_steps)
        return jr_fail(r, "TemplateRuntimeError: the template ran for more than %llu steps",
                       (unsigned long long)r->max_steps);
    if ((r->steps & 1023) == 0 && rp_arena_used(r->a) > r->mem_limit)
        return jr_fail(r, "MemoryError: the template used more than %zu bytes", r->mem_limit);
    if (r->edepth >= MAX_EDEPTH)
        return jr_fail(r, "RecursionError: maximum recursion depth exceeded");
    r->edepth++;
    return 0;
}

static int eval(jrender *r, const jnode *n, jv *out)
{
    if (guard_enter(r))
        return -1;
    int rc = eval_node(r, n, out);
    r->edepth--;
    return rc;
}

/* One case per expression node kind (a flat switch: the exception rule 19 allows). */
static int eval_node(jrender *r, const jnode *n, jv *out)
{
    switch (n->kind) {
    case N_LIT:
        *out = n->lit;
        return 0;
    case N_NAME:
        return eval_name(r, n, out);
    case N_LIST:
    case N_TUPLE:
    case N_DICT:
        return eval_seq(r, n, out);
    case N_GETATTR: {
        jv obj;
        if (eval(r, n->a, &obj))
            return -1;
        return jr_getattr(r, obj, n->name, n->name_len, out);
    }
    case N_GETITEM: {
        jv obj;
        if (eval(r, n->a, &obj))
            return -1;
        if (n->b->kind == N_SLICE) {
            jv s[3] = {jv_none(), jv_none(), jv_none()};
            const jnode *parts[3] = {n->b->a, n->b->b, n->b->c};
            for (int i = 0; i < 3; i++)
                if (parts[i] && eval(r, parts[i], &s[i]))
                    return -1;
            return slice(r, obj, s[0], s[1], s[2], out);
        }
        jv key;
        if (eval(r, n->b, &key))
            return -1;
        return jr_getitem(r, obj, key, out);
    }
    case N_CALL: {
        jv fn;
        if (eval(r, n->a, &fn))
            return -1;
        evargs ea;
        if (eval_args(r, n, &ea))
            return -1;
        return jr_call(r, fn, &ea.a, out);
    }
    case N_FILTER: {
        jv v;
        if (eval(r, n->a, &v))
            return -1;
        return eval_filter(r, n, v, out);
    }
    case N_TEST:
        return eval_test(r, n, out);
    case N_BINOP: {
        jv a, b;
        if (eval(r, n->a, &a) || eval(r, n->b, &b))
            return -1;
        return jr_binop(r, n->op, a, b, out);
    }
    case N_UNARY: {
        jv a;
        if (eval(r, n->a, &a))
            return -1;
        if (a.type == JV_UNDEF)
            return jr_undefined_error(r, a);
        if (!jv_is_num(a))
            return jr_fail(r, "TypeError: bad operand type for unary %c: '%s'", n->op, jv_type_name(a));
        if (n->op == '+')
            *out = a.type == JV_BOOL ? jv_int(a.u.i) : a;
        else
        {
            if (a.type != JV_FLOAT && a.u.i == INT64_MIN)
                return int_overflow(r);
            *out = a.type == JV_FLOAT ? jv_float(-a.u.f) : jv_int(-a.u.i);
        }
        return 0;
    }
    case N_NOT: {
        jv a;
        if (eval(r, n->a, &a))
            return -1;
        if (a.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, a);
        *out = jv_bool(!jv_truthy(a));
        return 0;
    }
    case N_AND:
    case N_OR: {
        jv a;
        if (eval(r, n->a, &a))
            return -1;
        if (a.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, a);
        bool t = jv_truthy(a);
        if ((n->kind == N_AND) ? !t : t) {
            *out = a;
            return 0;
        }
        return eval(r, n->b, out);
    }
    case N_COND: {
        jv c;
        if (eval(r, n->a, &c))
            return -1;
        if (c.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, c);
        if (jv_truthy(c))
            return eval(r, n->b, out);
        if (n->c)
            return eval(r, n->c, out);
        *out = jv_undef("the inline if-expression evaluated to false and no else section was defined.");
        return 0;
    }
    case N_COMPARE:
        return eval_compare(r, n, out);
    default:
        return jr_fail(r, "internal error: not an expression (node %d)", (int)n->kind);
    }
}

/* ---- statements -------------------------------------------------------------------------- */

static int emit(jrender *r, jv v)
{
    if (v.flags & JV_F_UNSAFE) {
        /* printing a sandbox-blocked attribute prints nothing, as Jinja2 does */
        return 0;
    }
    size_t before = r->out->len;
    if (v.type == JV_STR) {
        if (rp_buf_append(r->out, v.u.s, v.n))
            return jr_nomem(r);
    } else if (jv_write_str(r->out, v)) {
        return jr_nomem(r);
    }
    (void)before;
    if (r->out->len > r->out_limit)
        return jr_fail(r, "MemoryError: rendered output exceeds %zu bytes", r->out_limit);
    return 0;
}

static int unpack(jrender *r, const jnode *target, jv v, jscope *s)
{
    if (target->kind == N_NAME)
        return scope_set(r, s, target->name, target->name_len, v);
    jv_list *items;
    if (v.type == JV_UNDEF)
        return jr_undefined_error(r, v);
    if (jr_iter_list(r, v, &items))
        return -1;
    if (items->n != target->items.n)
        return jr_fail(r, "ValueError: %s values to unpack (expected %zu, got %zu)",
                       items->n > target->items.n ? "too many" : "not enough", target->items.n, items->n);
    for (size_t i = 0; i < items->n; i++)
        if (scope_set(r, s, target->items.v[i]->name, target->items.v[i]->name_len, items->items[i]))
            return -1;
    return 0;
}

static int exec_set(jrender *r, const jnode *target, jv v)
{
    if (target->kind == N_GETATTR) {
        jv *ns = scope_find(r->scope, target->a->name, target->a->name_len);
        if (!ns || ns->type != JV_NS)
            return jr_fail(r, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        jv key;
        if (jv_str_dup(r->a, target->name, target->name_len, &key) ||
            jv_dict_set(r->a, ns->u.d, key, v))
            return jr_nomem(r);
        return 0;
    }
    return unpack(r, target, v, r->scope);
}

/* Runs the loop body over items (already filtered); *rendered set for recursive calls. */
static int exec_for_items(jrender *r, const jnode *n, jv_list *items, int depth, jv *rendered)
{
    rp_buf buf = {0}, *saved_out = r->out;
    if (rendered)
        r->out = &buf;
    jscope *outer = r->scope;
    jloop *loop = RP_ARENA_NEW(r->a, jloop, 1);
    jscope *s = scope_push(r, outer);
    int rc = 0;
    if (!loop || !s) {
        rc = jr_nomem(r);
        goto out;
    }
    /* the inline "if" filter runs before the loop, so loop.length counts what passes */
    if (n->c) {
        jv kept;
        if (jv_list_new(r->a, 0, &kept)) {
            rc = jr_nomem(r);
            goto out;
        }
        r->scope = s;
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            s->n = 0;
            jv c;
            rc = unpack(r, n->a, items->items[i], s);
            if (rc == 0)
                rc = eval(r, n->c, &c);
            if (rc == 0 && jv_truthy(c) && jv_list_push(r->a, kept.u.l, items->items[i]))
                rc = jr_nomem(r);
        }
        r->scope = outer;
        if (rc)
            goto out;
        items = kept.u.l;
    }
    *loop = (jloop){.items = items, .depth = depth, .node = n, .scope = outer};
    jv loopv = {.type = JV_LOOP, .u.p = loop};
    /* Jinja2 runs the else block unless some iteration reached the end of the body: a loop
     * whose every iteration ends in continue or break runs it too. */
    bool completed = false;
    r->scope = s;
    for (size_t i = 0; i < items->n; i++) {
        s->n = 0;
        loop->i = i;
        rc = unpack(r, n->a, items->items[i], s);
        if (rc == 0)
            rc = scope_set(r, s, "loop", 4, loopv);
        if (rc == 0)
            rc = exec_stmts(r, &n->body);
        if (rc == 0)
            completed = true;
        if (rc == EXEC_CONTINUE) {
            rc = 0;
            continue;
        }
        if (rc == EXEC_BREAK) {
            rc = 0;
            break;
        }
        if (rc)
            break;
    }
    r->scope = outer;
    if (rc == 0 && !completed && n->orelse.n)
        rc = exec_stmts(r, &n->orelse);
out:
    r->out = saved_out;
    if (rendered && rc == 0 && jv_str_dup(r->a, buf.data ? buf.data : "", buf.len, rendered))
        rc = jr_nomem(r);
    rp_buf_deinit(&buf);
    return rc;
}

static int exec_for(jrender *r, const jnode *n)
{
    jv seq;
    jv_list *items;
    if (eval(r, n->b, &seq) || jr_iter_list(r, seq, &items))
        return -1;
    return exec_for_items(r, n, items, 1, NULL);
}

static int make_macro(jrender *r, const jnode *def, jv caller, jv *out)
{
    jmacro *m = RP_ARENA_NEW(r->a, jmacro, 1);
    if (!m)
        return jr_nomem(r);
    m->def = def;
    m->closure = r->scope;
    m->caller = caller;
    *out = (jv){.type = JV_MACRO, .u.p = m};
    return 0;
}

static int exec_call_block(jrender *r, const jnode *n)
{
    jv caller, fn, res;
    if (make_macro(r, n, jv_undef("no caller"), &caller))
        return -1;
    const jnode *call = n->a;
    if (eval(r, call->a, &fn))
        return -1;
    evargs ea;
    if (eval_args(r, call, &ea))
        return -1;
    if (fn.type == JV_MACRO) {
        jmacro m = *(const jmacro *)fn.u.p;
        if (!(m.def->op & MACRO_CALLER) && !(m.def->op & MACRO_KWARGS))
            return jr_fail(r, "TypeError: macro '%s' was invoked with two values for the special caller argument",
                           m.def->kind == N_MACRO ? m.def->name : "caller");
        if (m.def->op & MACRO_CALLER) {
            m.caller = caller;
            if (call_macro(r, &m, &ea.a, &res))
                return -1;
        } else { /* the caller lands in kwargs */
            size_t nk = ea.a.n_kw + 1;
            const char **names = RP_ARENA_NEW(r->a, const char *, nk);
            jv *kw = RP_ARENA_NEW(r->a, jv, nk);
            if (!names || !kw)
                return jr_nomem(r);
            jv_copy(names, ea.a.kw_names, ea.a.n_kw * sizeof(char *));
            jv_copy(kw, ea.a.kw, ea.a.n_kw * sizeof(jv));
            names[nk - 1] = "caller";
            kw[nk - 1] = caller;
            jargs a2 = ea.a;
            a2.kw_names = names;
            a2.kw = kw;
            a2.n_kw = nk;
            if (call_macro(r, &m, &a2, &res))
                return -1;
        }
    } else {
        /* a non-macro callee gets caller as a keyword argument */
        size_t nk = ea.a.n_kw + 1;
        const char **names = RP_ARENA_NEW(r->a, const char *, nk);
        jv *kw = RP_ARENA_NEW(r->a, jv, nk);
        if (!names || !kw)
            return jr_nomem(r);
        jv_copy(names, ea.a.kw_names, ea.a.n_kw * sizeof(char *));
        jv_copy(kw, ea.a.kw, ea.a.n_kw * sizeof(jv));
        names[nk - 1] = "caller";
        kw[nk - 1] = caller;
        jargs a2 = ea.a;
        a2.kw_names = names;
        a2.kw = kw;
        a2.n_kw = nk;
        if (jr_call(r, fn, &a2, &res))
            return -1;
    }
    return emit(r, res);
}

static int exec_node(jrender *r, const jnode *n);

static int exec_stmt(jrender *r, const jnode *n)
{
    if (guard_enter(r))
        return -1;
    int rc = exec_node(r, n);
    r->edepth--;
    return rc;
}

static int exec_node(jrender *r, const jnode *n)
{
    switch (n->kind) {
    case N_TEXT:
        if (rp_buf_append(r->out, n->lit.u.s, n->lit.n))
            return jr_nomem(r);
        return r->out->len > r->out_limit ? jr_fail(r, "MemoryError: rendered output too large") : 0;
    case N_OUTPUT: {
        jv v;
        if (eval(r, n->a, &v))
            return -1;
        return emit(r, v);
    }
    case N_IF: {
        jv c;
        if (eval(r, n->a, &c))
            return -1;
        if (c.flags & JV_F_UNSAFE)
            return jr_undefined_error(r, c);
        return exec_stmts(r, jv_truthy(c) ? &n->body : &n->orelse);
    }
    case N_FOR:
        return exec_for(r, n);
    case N_SET: {
        jv v;
        if (eval(r, n->b, &v))
            return -1;
        return exec_set(r, n->a, v);
    }
    case N_SETBLOCK: {
        jv v;
        if (render_to_string(r, &n->body, &v))
            return -1;
        if (n->c && apply_chain(r, n->c, v, &v))
            return -1;
        return exec_set(r, n->a, v);
    }
    case N_MACRO: {
        jv m;
        if (make_macro(r, n, jv_undef("no caller"), &m))
            return -1;
        return scope_set(r, r->scope, n->name, n->name_len, m);
    }
    case N_CALLBLOCK:
        return exec_call_block(r, n);
    case N_FILTERBLOCK: {
        jv v;
        if (render_to_string(r, &n->body, &v) || apply_chain(r, n->c, v, &v))
            return -1;
        return emit(r, v);
    }
    case N_WITH: {
        jscope *outer = r->scope, *s = scope_push(r, outer);
        if (!s)
            return jr_nomem(r);
        for (size_t i = 0; i < n->items.n; i++) {
            jv v;
            r->scope = outer; /* with values see the outer scope only, as in Jinja2 */
            int rc = eval(r, n->items.v[i]->b, &v);
            r->scope = s;
            if (rc || unpack(r, n->items.v[i]->a, v, s)) {
                r->scope = outer;
                return -1;
            }
        }
        r->scope = s;
        int rc = exec_stmts(r, &n->body);
        r->scope = outer;
        return rc;
    }
    case N_BREAK:
        return EXEC_BREAK;
    case N_CONTINUE:
        return EXEC_CONTINUE;
    case N_BODY:
        return exec_stmts(r, &n->body);
    case N_NOLOADER: {
        jv name;
        if (eval(r, n->a, &name))
            return -1;
        return jr_fail(r, "TypeError: no loader for this environment specified");
    }
    default:
        return jr_fail(r, "internal error: not a statement (node %d)", (int)n->kind);
    }
}

static int exec_stmts(jrender *r, const jnodes *body)
{
    for (size_t i = 0; i < body->n; i++) {
        int rc = exec_stmt(r, body->v[i]);
        if (rc)
            return rc;
    }
    return 0;
}

int jr_exec_body(jrender *r, const jnodes *body)
{
    return exec_stmts(r, body);
}

int rp_jinja_render(jrender *r, const jnode *root, jv context)
{
    jscope *s = scope_push(r, NULL);
    if (!s)
        return jr_nomem(r);
    if (context.type == JV_DICT)
        for (size_t i = 0; i < context.u.d->n; i++) {
            jv k = context.u.d->keys[i];
            if (k.type == JV_STR && scope_set(r, s, k.u.s, k.n, context.u.d->vals[i]))
                return -1;
        }
    jscope *top = scope_push(r, s); /* template-level {% set %} shadows the context */
    if (!top)
        return jr_nomem(r);
    r->scope = top;
    int rc = exec_stmts(r, &root->body);
    if (rc > 0) /* break/continue outside a loop: Jinja2 rejects it at compile time */
        return jr_fail(r, "TemplateSyntaxError: break or continue outside a loop");
    return rc;
}
