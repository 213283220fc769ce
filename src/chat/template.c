/* chat/template.c - the chat-template contract (template.h) on top of the Jinja modules:
 * parse once into an AST held in the template's arena, render with a fresh arena per call.
 */
#include "chat/template.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/buf.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_parse.h"

/* Default bounds: far above what real chat templates need (a Qwen3 render of 20 messages and
 * 5 tools takes about 10^4 steps and 100 KB), low enough that a hostile template fails fast. */
enum { OUT_LIMIT = 64u << 20, MEM_LIMIT = 512u << 20, MAX_STEPS = 20000000 };

struct rp_template {
    rp_arena *arena; /* AST and literals */
    jnode *root;
    uint64_t max_steps;
    size_t max_bytes;
};

void rp_template_set_limits(rp_template *t, uint64_t max_steps, size_t max_bytes)
{
    t->max_steps = max_steps ? max_steps : MAX_STEPS;
    t->max_bytes = max_bytes ? max_bytes : MEM_LIMIT;
}



static int check_names(const jnode *n, bool soft, int depth, rp_err *err);

static int check_list(const jnodes *l, bool soft, int depth, rp_err *err)
{
    for (size_t i = 0; i < l->n; i++)
        if (check_names(l->v[i], soft, depth, err))
            return -1;
    return 0;
}

/* Jinja2 resolves filters and tests when it compiles a template: an unknown one fails the
 * parse, except inside an if statement or an inline if ("soft" frames), where it fails only
 * when evaluated. Loops, macros, call/filter/set blocks and with open new, hard frames. */
static int check_names(const jnode *n, bool soft, int depth, rp_err *err)
{
    if (!n)
        return 0;
    if (++depth > 1000) /* Python's compiler stops at its recursion limit too */
        return rp_err_set(err, RP_ERR_INVALID, "template syntax error, line %d: nested too deeply", n->line);
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
        if (check_names(n->b, soft, depth, err) || check_names(n->a, false, depth, err) || check_names(n->c, false, depth, err))
            return -1;
        return check_list(&n->body, false, depth, err) || check_list(&n->orelse, false, depth, err) ? -1 : 0;
    case N_CALLBLOCK:
        if (check_names(n->a, soft, depth, err))
            return -1;
        return check_list(&n->items, false, depth, err) || check_list(&n->body, false, depth, err) ? -1 : 0;
    case N_WITH:
        for (size_t i = 0; i < n->items.n; i++)
            if (check_names(n->items.v[i]->b, soft, depth, err))
                return -1;
        return check_list(&n->body, false, depth, err);
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
        if (check_names(kids[i], kids_soft, depth, err))
            return -1;
    if (check_list(&n->items, kids_soft, depth, err) || check_list(&n->kw, kids_soft, depth, err))
        return -1;
    return check_list(&n->body, inner_soft, depth, err) || check_list(&n->orelse, inner_soft, depth, err) ? -1 : 0;
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
    if (rp_jinja_parse(t->arena, source, len, &t->root, e) || check_names(t->root, false, 0, e)) {
        rp_status code = e->code ? e->code : RP_ERR_INVALID;
        rp_template_free(t);
        return code;
    }
    rp_template_set_limits(t, 0, 0);
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
    jrender r = {.a = a, .out = &buf, .err = e, .now = (time_t)now,
                 .out_limit = t->max_bytes < OUT_LIMIT ? t->max_bytes : OUT_LIMIT,
                 .mem_limit = t->max_bytes, .max_steps = t->max_steps};
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
