/* Golden vectors for chat/output_parser: the files in tests/golden/parsers (raw model text ->
 * expected message), each checked fed whole, cut at every split point, character by
 * character and in token-sized chunks; every chunking must assemble the same message. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/output_parser.h"

static void stable_id(void *user, int index, char *out, size_t cap)
{
    snprintf(out, cap, "call_%024d", index);
}

/* Byte offsets of the code point boundaries of s (0 and len included). */
static size_t *boundaries(const char *s, size_t len, size_t *n_out)
{
    size_t *b = rp_alloc((len + 1) * sizeof *b), n = 0;
    for (size_t i = 0; i <= len; i++)
        if (i == len || ((unsigned char)s[i] & 0xC0) != 0x80) b[n++] = i;
    *n_out = n;
    return b;
}

/* Feeds text cut at the byte offsets cuts[0..n_cuts) (increasing); returns the message dump. */
static char *run_cuts(const json_t *c, const char *text, size_t len, const size_t *cuts,
                      size_t n_cuts)
{
    rp_parse_collector *col = NULL;
    cr_assert_eq(rp_parse_collector_new(&col), RP_OK);
    const json_t *rp = json_object_get(c, "reasoning_parser");
    const json_t *tp = json_object_get(c, "tool_parser");
    rp_output_parser_config cfg = {
        .tool_parser = json_string_value(tp),
        .reasoning_parser = json_string_value(rp),
        .tools = json_object_get(c, "tools"),
        .think_opened = json_is_true(json_object_get(c, "think_opened")),
        .on_event = rp_parse_collector_event,
        .user = col,
        .gen_id = stable_id,
    };
    rp_output_parser *p = NULL;
    rp_err err = {0};
    cr_assert_eq(rp_output_parser_new(&cfg, &p, &err), RP_OK, "%s", err.msg);
    size_t off = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        cr_assert_eq(rp_output_parser_feed(p, text + off, end - off, &err), RP_OK, "%s", err.msg);
        off = end;
    }
    cr_assert_eq(rp_output_parser_finish(p, &err), RP_OK, "%s", err.msg);
    json_t *m = rp_parse_collector_message(col);
    char *dump = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(m);
    rp_output_parser_free(p);
    rp_parse_collector_free(col);
    return dump;
}

static bool eq_nullable(const json_t *got, const json_t *want)
{
    return (json_is_null(want) && json_is_null(got)) || json_equal(got, want);
}

/* The whole-text message against "expect"; returns a description of the first mismatch. */
static const char *check_expected(const char *dump, const json_t *expect, char *why, size_t cap)
{
    json_error_t e;
    json_t *m = json_loads(dump, 0, &e);
    const char *fail = NULL;
    if (!eq_nullable(json_object_get(m, "content"), json_object_get(expect, "content")))
        fail = "content";
    else if (!eq_nullable(json_object_get(m, "reasoning_content"),
                          json_object_get(expect, "reasoning_content")))
        fail = "reasoning_content";
    const json_t *want = json_object_get(expect, "tool_calls"),
                 *got = json_object_get(m, "tool_calls");
    if (!fail && json_array_size(want) != json_array_size(got)) fail = "number of tool calls";
    for (size_t i = 0; !fail && i < json_array_size(want); i++) {
        const json_t *w = json_array_get(want, i), *g = json_array_get(got, i);
        const json_t *fn = json_object_get(g, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *a = args ? json_loads(args, 0, &e) : NULL;
        if (!json_equal(json_object_get(fn, "name"), json_object_get(w, "name")))
            fail = "tool call name";
        else if (!json_is_object(a))
            fail = "arguments are not a JSON object string";
        else if (!json_equal(a, json_object_get(w, "arguments")))
            fail = "tool call arguments";
        else if (strncmp(json_string_value(json_object_get(g, "id")), "call_", 5) != 0)
            fail = "tool call id";
        json_decref(a);
    }
    json_decref(m);
    if (fail) {
        char *w = json_dumps(expect, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(why, cap, "%s differs\n  got:  %s\n  want: %s", fail, dump, w);
        free(w);
        return why;
    }
    return NULL;
}

static size_t n_vectors, n_runs;

static void check_case(const json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *text = json_string_value(json_object_get(c, "text"));
    size_t len = strlen(text), n_b = 0;
    size_t *b = boundaries(text, len, &n_b);
    char *whole = run_cuts(c, text, len, NULL, 0), why[4096];
    const char *fail = check_expected(whole, json_object_get(c, "expect"), why, sizeof why);
    cr_expect_null(fail, "[%s] %s", name, fail ? fail : "");
    n_runs++;
    /* every split point into two pieces */
    for (size_t k = 1; k + 1 < n_b; k++) {
        char *d = run_cuts(c, text, len, &b[k], 1);
        cr_expect_str_eq(d, whole, "[%s] split at byte %zu", name, b[k]);
        free(d);
        n_runs++;
    }
    /* character by character, then token-sized pieces (fixed sizes and a seeded mix) */
    static const size_t sizes[] = {1, 2, 3, 4, 7, 0};
    size_t *cuts = rp_alloc(n_b * sizeof *cuts);
    unsigned seed = 12345;
    for (size_t s = 0; s < RP_ARRAY_LEN(sizes); s++) {
        size_t n_cuts = 0;
        for (size_t k = 0; k + 1 < n_b;) {
            size_t step = sizes[s];
            if (!step) {
                seed = seed * 1103515245u + 12345u;
                step = 1 + (seed >> 16) % 6;
            }
            k += step;
            if (k + 1 < n_b) cuts[n_cuts++] = b[k];
        }
        char *d = run_cuts(c, text, len, cuts, n_cuts);
        cr_expect_str_eq(d, whole, "[%s] chunks of %zu", name, sizes[s]);
        free(d);
        n_runs++;
    }
    rp_free(cuts);
    free(whole);
    rp_free(b);
    n_vectors++;
}

Test(parse_golden, every_vector_every_chunking)
{
    const char *src = getenv("RP_SOURCE_DIR");
    cr_assert_not_null(src, "RP_SOURCE_DIR is not set");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/golden/parsers", src);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    struct dirent *de;
    size_t n_files = 0;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || strcmp(de->d_name + nl - 5, ".json") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        json_error_t e;
        json_t *cases = json_load_file(path, 0, &e);
        cr_assert(json_is_array(cases), "%s:%d: %s", path, e.line, e.text);
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) check_case(c);
        json_decref(cases);
        n_files++;
    }
    closedir(d);
    cr_assert_gt(n_files, 15, "golden vector files missing in %s", dir);
    cr_log_info("%zu vectors in %zu files, %zu parser runs", n_vectors, n_files, n_runs);
}
