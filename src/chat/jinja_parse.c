/* chat/jinja_parse.c - recursive-descent parser for Jinja2 templates (grammar in jinja_parse.h).
 *
 * One function per precedence level, named after Jinja2's parser.py methods so the two can be
 * read side by side. Errors name the line and what was expected.
 */
#include "chat/jinja_parse.h"

#include <stdbool.h>
#include <string.h>

#include "chat/jinja_lex.h"

typedef struct parser {
    rp_arena *a;
    jtok *t;
    size_t n, i;
    rp_err *err;
    bool failed;
    int depth; /* nesting of expressions and blocks: bounded so the C stack is too */
} parser;

enum { MAX_NEST = 200 };

typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

static jtok *cur(parser *p) { return &p->t[p->i]; }
static jtok *peek(parser *p, size_t k) { return &p->t[p->i + k < p->n ? p->i + k : p->n - 1]; }
static void next(parser *p)
{
    if (p->i + 1 < p->n)
        p->i++;
}

static jnode *fail(parser *p, const char *fmt, const char *what)
{
    if (!p->failed) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, what);
        rp_err_set(p->err, RP_ERR_INVALID, "template syntax error, line %d: %s", cur(p)->line, msg);
        p->failed = true;
    }
    return NULL;
}

static jnode *nomem(parser *p)
{
    if (!p->failed) {
        rp_err_set(p->err, RP_ERR_NOMEM, "out of memory parsing the template");
        p->failed = true;
    }
    return NULL;
}

static jnode *node(parser *p, jnode_kind k)
{
    jnode *n = RP_ARENA_NEW(p->a, jnode, 1);
    if (!n)
        return nomem(p);
    n->kind = k;
    n->line = cur(p)->line;
    return n;
}

static bool vpush(parser *p, nvec *v, jnode *n)
{
    if (!n)
        return false;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = RP_ARENA_NEW(p->a, jnode *, cap);
        if (!nv) {
            nomem(p);
            return false;
        }
        if (v->n)
            jv_copy(nv, v->v, v->n * sizeof(jnode *));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return true;
}

static jnodes done(nvec v) { return (jnodes){.v = v.v, .n = v.n}; }

static bool is_op(const jtok *t, const char *op)
{
    return t->kind == JT_OP && t->len == strlen(op) && memcmp(t->text, op, t->len) == 0;
}

static bool is_name(const jtok *t, const char *name)
{
    return t->kind == JT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}

static bool skip_op(parser *p, const char *op)
{
    if (is_op(cur(p), op)) {
        next(p);
        return true;
    }
    return false;
}

static bool skip_name(parser *p, const char *name)
{
    if (is_name(cur(p), name)) {
        next(p);
        return true;
    }
    return false;
}

static bool expect_op(parser *p, const char *op)
{
    if (skip_op(p, op))
        return true;
    fail(p, "expected '%s'", op);
    return false;
}

static bool set_name(parser *p, jnode *n, const jtok *t)
{
    char *s = rp_arena_strndup(p->a, t->text, t->len);
    if (!s) {
        nomem(p);
        return false;
    }
    n->name = s;
    n->name_len = t->len;
    return true;
}

static jnode *parse_expression(parser *p, bool with_condexpr);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);
static jnode *parse_filter_expr(parser *p, jnode *n);
static jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end);

/* ---- expressions ------------------------------------------------------------------------- */

static jnode *parse_or(parser *p);

static jnode *parse_condexpr(parser *p)
{
    jnode *e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        next(p);
        jnode *c = node(p, N_COND);
        if (!c)
            return NULL;
        c->b = e1;
        c->a = parse_or(p);
        if (!c->a)
            return NULL;
        if (skip_name(p, "else")) {
            c->c = parse_condexpr(p);
            if (!c->c)
                return NULL;
        }
        e1 = c;
    }
    return e1;
}

static bool enter(parser *p)
{
    if (++p->depth > MAX_NEST) {
        fail(p, "%s", "the template is nested too deeply");
        return false;
    }
    return true;
}

static jnode *parse_expression(parser *p, bool with_condexpr)
{
    if (!enter(p))
        return NULL;
    jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return n;
}

static jnode *parse_not(parser *p);

static jnode *parse_and(parser *p)
{
    jnode *l = parse_not(p);
    while (l && is_name(cur(p), "and")) {
        next(p);
        jnode *n = node(p, N_AND);
        if (!n)
            return NULL;
        n->a = l;
        n->b = parse_not(p);
        if (!n->b)
            return NULL;
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *p)
{
    jnode *l = parse_and(p);
    while (l && is_name(cur(p), "or")) {
        next(p);
        jnode *n = node(p, N_OR);
        if (!n)
            return NULL;
        n->a = l;
        n->b = parse_and(p);
        if (!n->b)
            return NULL;
        l = n;
    }
    return l;
}

static jnode *parse_compare(parser *p);

static jnode *parse_not(parser *p)
{
    if (is_name(cur(p), "not")) {
        next(p);
        jnode *n = node(p, N_NOT);
        if (!n)
            return NULL;
        if (!enter(p))
            return NULL;
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static jnode *parse_math1(parser *p);

static int cmp_op(parser *p)
{
    jtok *t = cur(p);
    if (is_op(t, "=="))
        return OP_EQ;
    if (is_op(t, "!="))
        return OP_NE;
    if (is_op(t, "<"))
        return OP_LT;
    if (is_op(t, "<="))
        return OP_LE;
    if (is_op(t, ">"))
        return OP_GT;
    if (is_op(t, ">="))
        return OP_GE;
    if (is_name(t, "in"))
        return OP_IN;
    if (is_name(t, "not") && is_name(peek(p, 1), "in"))
        return OP_NOTIN;
    return 0;
}

static jnode *parse_compare(parser *p)
{
    jnode *e = parse_math1(p);
    if (!e)
        return NULL;
    nvec ops = {0};
    int op;
    while ((op = cmp_op(p)) != 0) {
        next(p);
        if (op == OP_NOTIN)
            next(p);
        jnode *c = node(p, N_CMPOP);
        if (!c)
            return NULL;
        c->op = op;
        c->a = parse_math1(p);
        if (!vpush(p, &ops, c->a ? c : NULL))
            return NULL;
    }
    if (ops.n == 0)
        return e;
    jnode *n = node(p, N_COMPARE);
    if (!n)
        return NULL;
    n->a = e;
    n->items = done(ops);
    return n;
}

static jnode *binop(parser *p, jnode *l, int op, jnode *r)
{
    if (!l || !r)
        return NULL;
    jnode *n = node(p, N_BINOP);
    if (!n)
        return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *p)
{
    jnode *l = parse_unary(p, true);
    while (l && is_op(cur(p), "**")) {
        next(p);
        l = binop(p, l, OP_POW, parse_unary(p, true));
    }
    return l;
}

static jnode *parse_math2(parser *p)
{
    jnode *l = parse_pow(p);
    for (;;) {
        if (!l)
            return NULL;
        int op = is_op(cur(p), "*") ? OP_MUL : is_op(cur(p), "/") ? OP_DIV
               : is_op(cur(p), "//") ? OP_FLOORDIV : is_op(cur(p), "%") ? OP_MOD : 0;
        if (!op)
            return l;
        next(p);
        l = binop(p, l, op, parse_pow(p));
    }
}

static jnode *parse_concat(parser *p)
{
    jnode *l = parse_math2(p);
    while (l && is_op(cur(p), "~")) {
        next(p);
        l = binop(p, l, OP_CONCAT, parse_math2(p));
    }
    return l;
}

static jnode *parse_math1(parser *p)
{
    jnode *l = parse_concat(p);
    for (;;) {
        if (!l)
            return NULL;
        int op = is_op(cur(p), "+") ? OP_ADD : is_op(cur(p), "-") ? OP_SUB : 0;
        if (!op)
            return l;
        next(p);
        l = binop(p, l, op, parse_concat(p));
    }
}

static jnode *parse_unary(parser *p, bool with_filter)
{
    jnode *n;
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        n = node(p, N_UNARY);
        if (!n)
            return NULL;
        n->op = cur(p)->text[0];
        next(p);
        if (!enter(p))
            return NULL;
        n->a = parse_unary(p, false);
        p->depth--;
        if (!n->a)
            return NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    return n;
}

static jnode *lit(parser *p, jv v)
{
    jnode *n = node(p, N_LIT);
    if (n)
        n->lit = v;
    return n;
}

static jnode *parse_seq(parser *p, jnode_kind kind, const char *close)
{
    jnode *n = node(p, kind);
    if (!n)
        return NULL;
    nvec items = {0};
    while (!is_op(cur(p), close)) {
        if (items.n && !expect_op(p, ","))
            return NULL;
        if (is_op(cur(p), close))
            break;
        if (kind == N_DICT) {
            if (!vpush(p, &items, parse_expression(p, true)) || !expect_op(p, ":"))
                return NULL;
        }
        if (!vpush(p, &items, parse_expression(p, true)))
            return NULL;
    }
    next(p);
    n->items = done(items);
    return n;
}

static jnode *parse_primary(parser *p)
{
    jtok *t = cur(p);
    switch (t->kind) {
    case JT_NAME:
        if (is_name(t, "true") || is_name(t, "True")) {
            next(p);
            return lit(p, jv_bool(true));
        }
        if (is_name(t, "false") || is_name(t, "False")) {
            next(p);
            return lit(p, jv_bool(false));
        }
        if (is_name(t, "none") || is_name(t, "None")) {
            next(p);
            return lit(p, jv_none());
        }
        {
            jnode *n = node(p, N_NAME);
            if (!n || !set_name(p, n, t))
                return NULL;
            next(p);
            return n;
        }
    case JT_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, j = p->i;
        while (p->t[j].kind == JT_STRING)
            total += p->t[j++].len;
        char *s = rp_arena_alloc(p->a, total + 1);
        if (!s)
            return nomem(p);
        size_t o = 0;
        while (cur(p)->kind == JT_STRING) {
            jv_copy(s + o, cur(p)->text, cur(p)->len);
            o += cur(p)->len;
            next(p);
        }
        return lit(p, jv_str(s, total));
    }
    case JT_INT:
        next(p);
        return lit(p, jv_int(t->ival));
    case JT_FLOAT:
        next(p);
        return lit(p, jv_float(t->fval));
    case JT_OP:
        if (is_op(t, "(")) {
            next(p);
            jnode *n = parse_tuple(p, false, true, NULL);
            if (!n || !expect_op(p, ")"))
                return NULL;
            return n;
        }
        if (is_op(t, "[")) {
            next(p);
            return parse_seq(p, N_LIST, "]");
        }
        if (is_op(t, "{")) {
            next(p);
            return parse_seq(p, N_DICT, "}");
        }
        return fail(p, "unexpected '%s'", t->len == 1 ? (char[]){t->text[0], 0} : "operator");
    case JT_VAR_END:
    case JT_BLOCK_END:
        return fail(p, "%s", "unexpected end of tag, expected an expression");
    default:
        return fail(p, "%s", "unexpected end of template");
    }
}

/* parse_tuple: an expression, or a tuple when commas follow; "()" is the empty tuple. */
static jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end)
{
    nvec items = {0};
    bool is_tuple = false;
    int line = cur(p)->line;
    for (;;) {
        if (items.n && !expect_op(p, ","))
            return NULL;
        jtok *t = cur(p);
        if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(t, ")") ||
            (extra_end && is_name(t, extra_end)))
            break;
        jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!vpush(p, &items, e))
            return NULL;
        if (is_op(cur(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!is_op(cur(p), ")"))
            return fail(p, "%s", "expected an expression");
    }
    jnode *n = node(p, N_TUPLE);
    if (!n)
        return NULL;
    n->line = line;
    n->items = done(items);
    return n;
}

/* Arguments of a call, filter or test: positional, then name=value. */
static bool parse_call_args(parser *p, jnode *n)
{
    nvec args = {0}, kw = {0};
    if (!expect_op(p, "("))
        return false;
    while (!is_op(cur(p), ")")) {
        if (args.n + kw.n + (n->b != NULL) + (n->c != NULL) && !expect_op(p, ","))
            return false;
        if (is_op(cur(p), ")"))
            break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) { /* f(*args, **kwargs) */
            bool star2 = cur(p)->len == 2;
            next(p);
            jnode *e = parse_expression(p, true);
            if (!e)
                return false;
            if (star2)
                n->c = e;
            else
                n->b = e;
            continue;
        }
        if (cur(p)->kind == JT_NAME && is_op(peek(p, 1), "=")) {
            jnode *k = node(p, N_KWARG);
            if (!k || !set_name(p, k, cur(p)))
                return false;
            next(p);
            next(p);
            k->a = parse_expression(p, true);
            if (!vpush(p, &kw, k->a ? k : NULL))
                return false;
        } else {
            if (kw.n) {
                fail(p, "%s", "positional argument after keyword argument");
                return false;
            }
            if (!vpush(p, &args, parse_expression(p, true)))
                return false;
        }
    }
    next(p);
    n->items = done(args);
    n->kw = done(kw);
    return true;
}

static jnode *parse_subscript(parser *p, jnode *target)
{
    if (skip_op(p, ".")) {
        jtok *t = cur(p);
        if (t->kind == JT_NAME) {
            jnode *n = node(p, N_GETATTR);
            if (!n || !set_name(p, n, t))
                return NULL;
            next(p);
            n->a = target;
            return n;
        }
        if (t->kind == JT_INT) {
            jnode *n = node(p, N_GETITEM);
            if (!n)
                return NULL;
            n->a = target;
            n->b = lit(p, jv_int(t->ival));
            next(p);
            return n->b ? n : NULL;
        }
        return fail(p, "%s", "expected a name after '.'");
    }
    next(p); /* '[' */
    nvec args = {0};
    while (!is_op(cur(p), "]")) {
        if (args.n && !expect_op(p, ","))
            return NULL;
        if (is_op(cur(p), "]"))
            break;
        jnode *e = NULL;
        if (!is_op(cur(p), ":"))
            e = parse_expression(p, true);
        if (is_op(cur(p), ":")) {
            jnode *s = node(p, N_SLICE);
            if (!s)
                return NULL;
            s->a = e;
            next(p);
            if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":"))
                s->b = parse_expression(p, true);
            if (skip_op(p, ":") && !is_op(cur(p), "]") && !is_op(cur(p), ","))
                s->c = parse_expression(p, true);
            e = s;
        }
        if (!vpush(p, &args, e))
            return NULL;
    }
    next(p);
    jnode *n = node(p, N_GETITEM); /* x[] indexes with the empty tuple, as in Jinja2 */
    if (!n)
        return NULL;
    n->a = target;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        n->b = node(p, N_TUPLE);
        if (!n->b)
            return NULL;
        n->b->items = done(args);
    }
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n)
{
    while (n) {
        if (is_op(cur(p), ".") || is_op(cur(p), "[")) {
            n = parse_subscript(p, n);
        } else if (is_op(cur(p), "(")) {
            jnode *c = node(p, N_CALL);
            if (!c)
                return NULL;
            c->a = n;
            if (!parse_call_args(p, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

/* A dotted filter or test name. */
static bool parse_dotted_name(parser *p, jnode *n)
{
    if (cur(p)->kind != JT_NAME) {
        fail(p, "%s", "expected a filter or test name");
        return false;
    }
    const char *start = cur(p)->text;
    const char *end = start + cur(p)->len;
    next(p);
    while (is_op(cur(p), ".") && peek(p, 1)->kind == JT_NAME) {
        next(p);
        end = cur(p)->text + cur(p)->len;
        next(p);
    }
    jtok t = {.text = start, .len = (size_t)(end - start)};
    return set_name(p, n, &t);
}

static jnode *parse_filter(parser *p, jnode *target)
{
    jnode *f = node(p, N_FILTER);
    if (!f || !parse_dotted_name(p, f))
        return NULL;
    f->a = target;
    if (is_op(cur(p), "(") && !parse_call_args(p, f))
        return NULL;
    return f;
}

static jnode *parse_test(parser *p, jnode *target)
{
    jnode *t = node(p, N_TEST);
    if (!t)
        return NULL;
    t->a = target;
    if (skip_name(p, "not"))
        t->op = 1;
    if (!parse_dotted_name(p, t))
        return NULL;
    jtok *c = cur(p);
    if (is_op(c, "(")) {
        if (!parse_call_args(p, t))
            return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail(p, "%s", "you cannot chain multiple tests with is");
        nvec args = {0};
        jnode *arg = parse_postfix(p, parse_primary(p));
        if (!vpush(p, &args, arg))
            return NULL;
        t->items = done(args);
    }
    return t;
}

static jnode *parse_filter_expr(parser *p, jnode *n)
{
    while (n) {
        if (is_op(cur(p), "|")) {
            next(p);
            n = parse_filter(p, n);
        } else if (is_name(cur(p), "is")) {
            next(p);
            n = parse_test(p, n);
        } else if (is_op(cur(p), "(")) {
            jnode *c = node(p, N_CALL);
            if (!c)
                return NULL;
            c->a = n;
            if (!parse_call_args(p, c))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

/* ---- statements -------------------------------------------------------------------------- */

static bool parse_body(parser *p, nvec *body, const char *const *ends, size_t n_ends);

static bool expect_block_end(parser *p)
{
    if (cur(p)->kind == JT_BLOCK_END) {
        next(p);
        return true;
    }
    fail(p, "%s", "expected the end of the block tag '%}'");
    return false;
}

/* Parses until {% end %} (one of ends); leaves the parser on that tag name. */
static bool subparse(parser *p, jnodes *out, const char *const *ends, size_t n_ends)
{
    nvec body = {0};
    if (!parse_body(p, &body, ends, n_ends))
        return false;
    *out = done(body);
    return true;
}

static jnode *parse_assign_target(parser *p, bool with_tuple, bool with_namespace, const char *extra_end)
{
    jnode *t;
    if (with_namespace && cur(p)->kind == JT_NAME && is_op(peek(p, 1), ".")) {
        jnode *base = node(p, N_NAME);
        if (!base || !set_name(p, base, cur(p)))
            return NULL;
        next(p);
        next(p);
        if (cur(p)->kind != JT_NAME)
            return fail(p, "%s", "expected an attribute name");
        t = node(p, N_GETATTR);
        if (!t || !set_name(p, t, cur(p)))
            return NULL;
        t->a = base;
        next(p);
        return t;
    }
    if (with_tuple) {
        t = parse_tuple(p, true, true, extra_end);
    } else {
        t = parse_primary(p);
    }
    if (!t)
        return NULL;
    if (t->kind == N_NAME)
        return t;
    if (t->kind == N_TUPLE) {
        for (size_t i = 0; i < t->items.n; i++)
            if (t->items.v[i]->kind != N_NAME)
                return fail(p, "%s", "can't assign to this expression");
        return t;
    }
    return fail(p, "%s", "can't assign to this expression");
}

static jnode *parse_for(parser *p)
{
    jnode *n = node(p, N_FOR);
    if (!n)
        return NULL;
    n->a = parse_assign_target(p, true, false, "in");
    if (!n->a || !skip_name(p, "in"))
        return n->a ? fail(p, "%s", "expected 'in' in the for loop") : NULL;
    n->b = parse_tuple(p, false, false, "recursive");
    if (!n->b)
        return NULL;
    if (skip_name(p, "if")) {
        n->c = parse_expression(p, true);
        if (!n->c)
            return NULL;
    }
    if (skip_name(p, "recursive"))
        n->op = 1;
    if (!expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"endfor", "else"};
    if (!subparse(p, &n->body, ends, 2))
        return NULL;
    if (skip_name(p, "else")) {
        if (!expect_block_end(p))
            return NULL;
        static const char *const ends2[] = {"endfor"};
        if (!subparse(p, &n->orelse, ends2, 1))
            return NULL;
    }
    next(p); /* endfor */
    return n;
}

static jnode *parse_if(parser *p)
{
    jnode *root = node(p, N_IF), *n = root;
    if (!n)
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif"};
    for (;;) {
        n->a = parse_tuple(p, false, false, NULL);
        if (!n->a || !expect_block_end(p) || !subparse(p, &n->body, ends, 3))
            return NULL;
        if (skip_name(p, "elif")) {
            jnode *e = node(p, N_IF);
            nvec one = {0};
            if (!vpush(p, &one, e))
                return NULL;
            n->orelse = done(one);
            n = e;
            continue;
        }
        if (skip_name(p, "else")) {
            static const char *const ends2[] = {"endif"};
            if (!expect_block_end(p) || !subparse(p, &n->orelse, ends2, 1))
                return NULL;
        }
        next(p); /* endif */
        return root;
    }
}

static bool parse_filter_chain(parser *p, jnode **chain)
{
    jnode *f = NULL;
    do {
        f = parse_filter(p, f);
        if (!f)
            return false;
    } while (skip_op(p, "|"));
    *chain = f;
    return true;
}

static jnode *parse_set(parser *p)
{
    jnode *target = parse_assign_target(p, true, true, NULL);
    if (!target)
        return NULL;
    if (skip_op(p, "=")) {
        jnode *n = node(p, N_SET);
        if (!n)
            return NULL;
        n->a = target;
        n->b = parse_tuple(p, false, true, NULL);
        return n->b ? n : NULL;
    }
    jnode *n = node(p, N_SETBLOCK);
    if (!n)
        return NULL;
    n->a = target;
    if (skip_op(p, "|") && !parse_filter_chain(p, &n->c))
        return NULL;
    static const char *const ends[] = {"endset"};
    if (!expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    next(p);
    return n;
}

/* Which of varargs, kwargs and caller a macro body reads (Jinja2's find_undeclared): a macro
 * accepts extra positional or keyword arguments, or a caller, only when it reads them. */
static int special_names(const jnode *n)
{
    if (!n)
        return 0;
    int f = 0;
    if (n->kind == N_NAME) {
        if (strcmp(n->name, "varargs") == 0)
            f |= MACRO_VARARGS;
        else if (strcmp(n->name, "kwargs") == 0)
            f |= MACRO_KWARGS;
        else if (strcmp(n->name, "caller") == 0)
            f |= MACRO_CALLER;
    }
    f |= special_names(n->a) | special_names(n->b) | special_names(n->c);
    const jnodes *lists[4] = {&n->items, &n->kw, &n->body, &n->orelse};
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            f |= special_names(lists[k]->v[i]);
    return f;
}

static int body_special_names(const jnodes *body)
{
    int f = 0;
    for (size_t i = 0; i < body->n; i++)
        f |= special_names(body->v[i]);
    return f;
}

/* (a, b=default, ...) of a macro or call block. */
static bool parse_signature(parser *p, jnode *n)
{
    nvec params = {0};
    if (!expect_op(p, "("))
        return false;
    while (!is_op(cur(p), ")")) {
        if (params.n && !expect_op(p, ","))
            return false;
        if (cur(p)->kind != JT_NAME) {
            fail(p, "%s", "expected a parameter name");
            return false;
        }
        jnode *prm = node(p, N_PARAM);
        if (!prm || !set_name(p, prm, cur(p)))
            return false;
        next(p);
        if (skip_op(p, "=")) {
            prm->a = parse_expression(p, true);
            if (!prm->a)
                return false;
        } else if (params.n && params.v[params.n - 1]->a) {
            fail(p, "%s", "non-default argument follows default argument");
            return false;
        }
        if (!vpush(p, &params, prm))
            return false;
    }
    next(p);
    n->items = done(params);
    return true;
}

static jnode *parse_macro(parser *p)
{
    jnode *n = node(p, N_MACRO);
    if (!n)
        return NULL;
    if (cur(p)->kind != JT_NAME)
        return fail(p, "%s", "expected a macro name");
    if (!set_name(p, n, cur(p)))
        return NULL;
    next(p);
    static const char *const ends[] = {"endmacro"};
    if (!parse_signature(p, n) || !expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    n->op = body_special_names(&n->body);
    next(p);
    if (cur(p)->kind == JT_NAME) /* {% endmacro name %} */
        next(p);
    return n;
}

static jnode *parse_call_block(parser *p)
{
    jnode *n = node(p, N_CALLBLOCK);
    if (!n)
        return NULL;
    if (is_op(cur(p), "(") && !parse_signature(p, n))
        return NULL;
    n->a = parse_expression(p, true);
    if (!n->a)
        return NULL;
    if (n->a->kind != N_CALL)
        return fail(p, "%s", "expected a call");
    static const char *const ends[] = {"endcall"};
    if (!expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    n->op = body_special_names(&n->body);
    next(p);
    return n;
}

static jnode *parse_filter_block(parser *p)
{
    jnode *n = node(p, N_FILTERBLOCK);
    static const char *const ends[] = {"endfilter"};
    if (!n || !parse_filter_chain(p, &n->c) || !expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    next(p);
    return n;
}

static jnode *parse_with(parser *p)
{
    jnode *n = node(p, N_WITH);
    if (!n)
        return NULL;
    nvec sets = {0};
    while (cur(p)->kind != JT_BLOCK_END) {
        if (sets.n && !expect_op(p, ","))
            return NULL;
        jnode *s = node(p, N_SET);
        if (!s)
            return NULL;
        s->a = parse_assign_target(p, false, false, NULL);
        if (!s->a || !expect_op(p, "="))
            return NULL;
        s->b = parse_expression(p, true);
        if (!vpush(p, &sets, s->b ? s : NULL))
            return NULL;
    }
    n->items = done(sets);
    static const char *const ends[] = {"endwith"};
    if (!expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    next(p);
    return n;
}

/* {% include/import/from/extends ... %}: parsed for the template name, the rest of the tag
 * (ignore missing, as x, import names, with context) is skipped. */
static jnode *parse_loader_tag(parser *p)
{
    jnode *n = node(p, N_NOLOADER);
    if (!n)
        return NULL;
    n->a = parse_expression(p, true);
    if (!n->a)
        return NULL;
    while (cur(p)->kind != JT_BLOCK_END && cur(p)->kind != JT_EOF)
        next(p);
    return n;
}

/* {% block name [scoped] %}...{% endblock [name] %}: without extends, rendered in place. */
static jnode *parse_block(parser *p)
{
    jnode *n = node(p, N_BODY);
    if (!n)
        return NULL;
    if (cur(p)->kind != JT_NAME)
        return fail(p, "%s", "expected a block name");
    next(p);
    while (cur(p)->kind == JT_NAME) /* scoped, required */
        next(p);
    static const char *const ends[] = {"endblock"};
    if (!expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    next(p);
    if (cur(p)->kind == JT_NAME)
        next(p);
    return n;
}

static jnode *parse_generation(parser *p)
{
    jnode *n = node(p, N_BODY);
    static const char *const ends[] = {"endgeneration"};
    if (!n || !expect_block_end(p) || !subparse(p, &n->body, ends, 1))
        return NULL;
    next(p);
    return n;
}

static jnode *parse_statement_inner(parser *p);

/* After "{%": one statement (the block end included). */
static jnode *parse_statement(parser *p)
{
    if (!enter(p))
        return NULL;
    jnode *n = parse_statement_inner(p);
    p->depth--;
    return n;
}

static jnode *parse_statement_inner(parser *p)
{
    jtok *t = cur(p);
    if (t->kind != JT_NAME)
        return fail(p, "%s", "tag name expected");
    jnode *n = NULL;
    bool ends_itself = true; /* compound statements consume their own end tag's %} below */
    next(p);
    if (is_name(t, "for"))
        n = parse_for(p);
    else if (is_name(t, "if"))
        n = parse_if(p);
    else if (is_name(t, "set"))
        n = parse_set(p), ends_itself = n && n->kind == N_SET;
    else if (is_name(t, "macro"))
        n = parse_macro(p);
    else if (is_name(t, "call"))
        n = parse_call_block(p);
    else if (is_name(t, "filter"))
        n = parse_filter_block(p);
    else if (is_name(t, "with"))
        n = parse_with(p);
    else if (is_name(t, "generation"))
        n = parse_generation(p);
    else if (is_name(t, "include") || is_name(t, "import") || is_name(t, "from") || is_name(t, "extends"))
        n = parse_loader_tag(p);
    else if (is_name(t, "block"))
        n = parse_block(p);
    else if (is_name(t, "print")) {
        n = node(p, N_OUTPUT);
        if (n)
            n->a = parse_tuple(p, false, true, NULL);
        if (n && !n->a)
            n = NULL;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(p, is_name(t, "break") ? N_BREAK : N_CONTINUE);
    } else {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(t->len < 60 ? t->len : 60), t->text);
        p->i--;
        return fail(p, "encountered unknown tag '%s'", name);
    }
    (void)ends_itself;
    if (!n)
        return NULL;
    if (!expect_block_end(p))
        return NULL;
    return n;
}

static bool is_end(parser *p, const char *const *ends, size_t n_ends)
{
    if (cur(p)->kind != JT_BLOCK_BEGIN)
        return false;
    jtok *t = peek(p, 1);
    for (size_t i = 0; i < n_ends; i++)
        if (is_name(t, ends[i]))
            return true;
    return false;
}

static bool parse_body(parser *p, nvec *body, const char *const *ends, size_t n_ends)
{
    for (;;) {
        jtok *t = cur(p);
        if (t->kind == JT_EOF) {
            if (n_ends) {
                fail(p, "unexpected end of template, expected '%s'", ends[n_ends - 1]);
                return false;
            }
            return true;
        }
        if (n_ends && is_end(p, ends, n_ends)) {
            next(p); /* leave the parser on the end tag's name */
            return true;
        }
        if (t->kind == JT_TEXT) {
            jnode *n = node(p, N_TEXT);
            if (!n)
                return false;
            n->lit = jv_str(t->text, t->len);
            next(p);
            if (!vpush(p, body, n))
                return false;
        } else if (t->kind == JT_VAR_BEGIN) {
            next(p);
            jnode *n = node(p, N_OUTPUT);
            if (!n)
                return false;
            n->a = parse_tuple(p, false, true, NULL);
            if (!n->a)
                return false;
            if (cur(p)->kind != JT_VAR_END) {
                fail(p, "%s", "expected the end of the print tag '}}'");
                return false;
            }
            next(p);
            if (!vpush(p, body, n))
                return false;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(p);
            jtok *name = cur(p);
            if (name->kind == JT_NAME &&
                (is_name(name, "endfor") || is_name(name, "endif") || is_name(name, "else") ||
                 is_name(name, "elif") || is_name(name, "endmacro") || is_name(name, "endset") ||
                 is_name(name, "endcall") || is_name(name, "endfilter") || is_name(name, "endwith") ||
                 is_name(name, "endgeneration") || is_name(name, "endraw") || is_name(name, "endblock"))) {
                char s[64];
                snprintf(s, sizeof s, "%.*s", (int)(name->len < 60 ? name->len : 60), name->text);
                fail(p, "encountered unexpected tag '%s'", s);
                return false;
            }
            if (!vpush(p, body, parse_statement(p)))
                return false;
        } else {
            fail(p, "%s", "unexpected token");
            return false;
        }
    }
}

int rp_jinja_parse(rp_arena *a, const char *src, size_t len, jnode **root, rp_err *err)
{
    jinja_lexed lx;
    if (rp_jinja_lex(a, src, len, &lx, err))
        return -1;
    parser p = {.a = a, .t = lx.toks, .n = lx.n, .err = err};
    jnode *r = node(&p, N_BODY);
    if (!r)
        return -1;
    nvec body = {0};
    if (!parse_body(&p, &body, NULL, 0))
        return -1;
    r->body = done(body);
    *root = r;
    return 0;
}
