/* chat/template.c - the chat-template contract (template.h) on top of the Jinja modules:
 * parse once into an AST held in the template's arena, render with a fresh arena per call.
 */
#include "chat/template.h"

#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/buf.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_parse.h"

struct rp_template {
    rp_arena *arena; /* AST and literals */
    jnode *root;
};

enum { OUT_LIMIT = 64u << 20 };

static int check_names(const jnode *n, bool soft, rp_err *err);

static int check_list(const jnodes *l, bool soft, rp_err *err)
{
    for (size_t i = 0; i < l->n; i++)
        if (check_names(l->v[i], soft, err))
            return -1;
    return 0;
}

/* Jinja2 resolves filters and tests when it compiles a template: an unknown one fails the
 * parse, except inside an if statement or an inline if ("soft" frames), where it fails only
 * when evaluated. Loops, macros, call/filter/set blocks and with open new, hard frames. */
static int check_names(const jnode *n, bool soft, rp_err *err)
{
    if (!n)
        return 0;
    if (!soft && n->kind == N_FILTER && !rp_jinja_has_filter(n->name))
        return rp_err_set(err, RP_ERR_INVALID, "template syntax error, line %d: no filter named '%s'",
                          n->line, n->name);
    if (!soft && n->kind == N_TEST && !rp_jinja_has_test(n->name))
        return rp_err_set(err, RP_ERR_INVALID, "template syntax error, line %d: no test named '%s'",
                          n->line, n->name);
    bool inner_soft = soft, kids_soft = soft;
    switch (n->kind) {
    case N_IF:
    case N_COND:
        inner_soft = kids_soft = true;
        break;
    case N_FOR:
        if (check_names(n->b, soft, err) || check_names(n->a, false, err) || check_names(n->c, false, err))
            return -1;
        return check_list(&n->body, false, err) || check_list(&n->orelse, false, err) ? -1 : 0;
    case N_CALLBLOCK:
        if (check_names(n->a, soft, err))
            return -1;
        return check_list(&n->items, false, err) || check_list(&n->body, false, err) ? -1 : 0;
    case N_WITH:
        for (size_t i = 0; i < n->items.n; i++)
            if (check_names(n->items.v[i]->b, soft, err))
                return -1;
        return check_list(&n->body, false, err);
    case N_MACRO:
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        inner_soft = kids_soft = false;
        break;
    default:
        break;
    }
    const jnode *kids[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++)
        if (check_names(kids[i], kids_soft, err))
            return -1;
    if (check_list(&n->items, kids_soft, err) || check_list(&n->kw, kids_soft, err))
        return -1;
    return check_list(&n->body, inner_soft, err) || check_list(&n->orelse, inner_soft, err) ? -1 : 0;
}

rp_status rp_template_new(const char *source, size_t len, rp_template **out, rp_err *err)
{
    *out = NULL;
    rp_template *t = rp_calloc(1, sizeof *t);
    if (!t)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory creating a template");
    t->arena = rp_arena_new(64 * 1024);
    if (!t->arena) {
        rp_free(t);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory creating a template");
    }
    rp_err local;
    rp_err *e = err ? err : &local;
    if (rp_jinja_parse(t->arena, source, len, &t->root, e) || check_names(t->root, false, e)) {
        rp_status code = e->code ? e->code : RP_ERR_INVALID;
        rp_template_free(t);
        return code;
    }
    *out = t;
    return RP_OK;
}

void rp_template_free(rp_template *t)
{
    if (!t)
        return;
    rp_arena_free(t->arena);
    rp_free(t);
}

rp_status rp_template_render_at(const rp_template *t, const json_t *context, long long now,
                                char **out, size_t *out_len, rp_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    rp_err local;
    rp_err *e = err ? err : &local;
    rp_err_clear(e);
    rp_arena *a = rp_arena_new(64 * 1024);
    if (!a)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory rendering the template");
    rp_buf buf = {0};
    jrender r = {.a = a, .out = &buf, .err = e, .now = (time_t)now, .out_limit = OUT_LIMIT};
    jv ctx = jv_none();
    int rc = 0;
    if (context && json_is_object(context)) {
        if (jv_from_json(a, context, &ctx))
            rc = jr_nomem(&r);
    } else if (context && !json_is_null(context)) {
        rc = jr_fail(&r, "template context must be a JSON object");
    }
    if (rc == 0)
        rc = rp_jinja_render(&r, t->root, ctx);
    rp_arena_free(a);
    if (rc) {
        rp_buf_deinit(&buf);
        return e->code ? e->code : RP_ERR_INVALID;
    }
    if (out_len)
        *out_len = buf.len;
    *out = rp_buf_take(&buf);
    return RP_OK;
}

rp_status rp_template_render(const rp_template *t, const json_t *context, char **out,
                             size_t *out_len, rp_err *err)
{
    return rp_template_render_at(t, context, (long long)time(NULL), out, out_len, err);
}
