/* Unit tests for src/chat/template.c and the Jinja modules behind it: rendering through the
 * public contract, error codes and messages, whitespace control, OOM safety and concurrent
 * renders. Byte-exact parity with Python Jinja2 is the golden test's job
 * (tests/golden/templates); these pin the contract. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/template.h"

static char *render(const char *src, const char *ctx_json, rp_status *st, rp_err *err)
{
    rp_template *t = NULL;
    *st = rp_template_new(src, strlen(src), &t, err);
    if (*st)
        return NULL;
    json_error_t je;
    json_t *ctx = ctx_json ? json_loads(ctx_json, 0, &je) : NULL;
    char *out = NULL;
    size_t n = 0;
    *st = rp_template_render_at(t, ctx, 0, &out, &n, err);
    json_decref(ctx);
    rp_template_free(t);
    if (*st == RP_OK)
        cr_assert_eq(strlen(out), n);
    return out;
}

static void expect(const char *src, const char *ctx, const char *want)
{
    rp_status st;
    rp_err err = {0};
    char *out = render(src, ctx, &st, &err);
    cr_assert_eq(st, RP_OK, "template %s failed: %s", src, err.msg);
    cr_assert_str_eq(out, want, "template %s", src);
    rp_free(out);
}

static void expect_error(const char *src, const char *ctx, const char *msg_part)
{
    rp_status st;
    rp_err err = {0};
    char *out = render(src, ctx, &st, &err);
    cr_assert_eq(st, RP_ERR_INVALID, "template %s should fail", src);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, msg_part), "message '%s' lacks '%s'", err.msg, msg_part);
}

Test(template, renders_a_chat)
{
    expect("{% for m in messages %}<|{{ m.role }}|>{{ m['content'] }}\n{% endfor %}"
           "{% if add_generation_prompt %}<|assistant|>{% endif %}",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":true}",
           "<|user|>hi\n<|assistant|>");
}

Test(template, whitespace_rules)
{
    /* trim_blocks drops the newline after a tag; lstrip_blocks the indentation before one */
    expect("{% if true %}\n  a\n  {% endif %}\nb", NULL, "  a\nb");
    expect("x  {{- ' y ' -}}  z", NULL, "x y z");
    expect("{# c #}\n{%+ if true %}k{% endif +%}\nend\n", NULL, "k\nend");
    expect("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
}

Test(template, python_values)
{
    expect("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }} {{ (1,) }} {{ 1e16 }} {{ 7 / 2 }} {{ -7 // 2 }}",
           NULL, "[1, 'a', None, True, 1.5, {'k': \"it's\"}] (1,) 1e+16 3.5 -4");
    expect("{{ {'b': [1, 2.0, none], 'a': 'é'} | tojson }}", NULL, "{\"b\": [1, 2.0, null], \"a\": \"é\"}");
    expect("{{ {'b': 1, 'a': [1]} | tojson(indent=2, sort_keys=true) }}", NULL,
           "{\n  \"a\": [\n    1\n  ],\n  \"b\": 1\n}");
}

Test(template, scoping_namespace_macro)
{
    expect("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 1 %}{% endfor %}{{ x }}", NULL, "1");
    expect("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
           NULL, "6");
    expect("{% macro f(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}", NULL, "1B23");
    expect("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}", NULL, "[in]");
    expect("{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", NULL, "012");
}

Test(template, undefined_like_jinja2)
{
    expect("[{{ nope }}][{{ nope is defined }}][{{ nope | default('d') }}][{{ nope | length }}]", NULL,
           "[][False][d][0]");
    expect_error("{{ nope.attr }}", NULL, "'nope' is undefined");
    expect_error("{{ {}.a.b }}", NULL, "has no attribute 'a'");
    expect_error("{{ [1].append(2) }}", NULL, "unsafe");
}

Test(template, errors)
{
    rp_status st;
    rp_err err = {0};
    char *out = render("{{ raise_exception('Only user and assistant roles') }}", "{}", &st, &err);
    cr_assert_null(out);
    cr_assert_eq(st, RP_ERR_INVALID);
    cr_assert_str_eq(err.msg, "Only user and assistant roles"); /* the text exactly, for the 400 */
    expect_error("{% for x in y %}", NULL, "line 1");
    expect_error("line one\n{{ 1 + }}", NULL, "line 2");
    expect_error("{% frobnicate %}", NULL, "unknown tag");
    expect_error("{{ x | no_such_filter }}", NULL, "no_such_filter");
    expect_error("{{ 1 / 0 }}", NULL, "ZeroDivisionError");
    expect_error("{{ range(1000000) | length }}", NULL, "Range too big");
    expect("{% if false %}{{ x | no_such_filter }}{% endif %}ok", NULL, "ok");
}

Test(template, context_must_be_an_object)
{
    rp_template *t = NULL;
    rp_err err = {0};
    cr_assert_eq(rp_template_new("x", 1, &t, &err), RP_OK);
    json_t *arr = json_array();
    char *out = NULL;
    cr_assert_eq(rp_template_render(t, arr, &out, NULL, &err), RP_ERR_INVALID);
    json_decref(arr);
    cr_assert_eq(rp_template_render(t, NULL, &out, NULL, &err), RP_OK);
    cr_assert_str_eq(out, "x");
    rp_free(out);
    rp_template_free(t);
    rp_template_free(NULL);
}

/* Every allocation failure is reported as NOMEM (or succeeds), never a crash or a leak. */
Test(template, oom_sweep)
{
    const char *src = "{% set ns = namespace(a=[]) %}{% for m in messages %}{% set ns.a = ns.a + [m.role] %}"
                      "{{ m.content | upper }}{{ m | tojson }}{% endfor %}{{ ns.a | join(',') }}";
    json_t *ctx = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"hé\"},{\"role\":\"b\",\"content\":\"x\"}]}",
                             0, NULL);
    int64_t live = rp_alloc_live_total();
    bool done = false;
    for (int64_t n = 1; n < 2000 && !done; n++) {
        rp_template *t = NULL;
        rp_err err = {0};
        char *out = NULL;
        rp_alloc_fail_after(n);
        rp_status st = rp_template_new(src, strlen(src), &t, &err);
        if (st == RP_OK) {
            st = rp_template_render(t, ctx, &out, NULL, &err);
            done = st == RP_OK;
        }
        rp_alloc_fail_after(0);
        cr_assert(st == RP_OK || st == RP_ERR_NOMEM, "n=%lld: status %d (%s)", (long long)n, st, err.msg);
        rp_free(out);
        rp_template_free(t);
        cr_assert_eq(rp_alloc_live_total(), live, "leak after failing allocation %lld", (long long)n);
    }
    cr_assert(done);
    json_decref(ctx);
}

typedef struct job {
    const rp_template *t;
    json_t *ctx;
    int ok;
} job;

static void *render_many(void *arg)
{
    job *j = arg;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        rp_err err;
        if (rp_template_render(j->t, j->ctx, &out, NULL, &err) == RP_OK && strcmp(out, "a-b-c") == 0)
            j->ok++;
        rp_free(out);
    }
    return NULL;
}

Test(template, concurrent_renders_share_one_template)
{
    const char *src = "{{ items | join('-') }}";
    rp_template *t = NULL;
    rp_err err;
    cr_assert_eq(rp_template_new(src, strlen(src), &t, &err), RP_OK);
    json_t *ctx = json_loads("{\"items\":[\"a\",\"b\",\"c\"]}", 0, NULL);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){.t = t, .ctx = ctx};
        pthread_create(&th[i], NULL, render_many, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(jobs[i].ok, 200);
    }
    json_decref(ctx);
    rp_template_free(t);
}
