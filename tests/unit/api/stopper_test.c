/* Unit tests for src/api/stopper.c: stop strings are never leaked, held text is released. */
#include <criterion/criterion.h>
#include <string.h>

#include "api/stopper.h"

static char *g_stops[] = {"STOP", "\n\nUser:", "é!"};

/* Feeds text one byte-chunk at a time of size `step`; returns what came out. */
static int run(const char *text, size_t step, int n_stops, char *out, size_t cap)
{
    rp_stopper s;
    rp_stopper_init(&s, g_stops, n_stops);
    rp_buf b = {0};
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        cr_assert_eq(rp_stopper_feed(&s, text + i, k, &b), RP_OK);
        /* the invariant: nothing shown so far contains the start of a matched stop */
        cr_assert(!b.data || !strstr(b.data, "STOP"));
    }
    rp_stopper_flush(&s, &b);
    int matched = s.matched;
    snprintf(out, cap, "%s", b.data ? b.data : "");
    rp_buf_deinit(&b);
    rp_stopper_deinit(&s);
    return matched;
}

Test(stopper, no_stops_passes_through)
{
    char out[64];
    cr_assert_eq(run("hello world", 3, 0, out, sizeof out), -1);
    cr_assert_str_eq(out, "hello world");
}

Test(stopper, match_at_every_split)
{
    for (size_t step = 1; step <= 12; step++) {
        char out[64];
        cr_assert_eq(run("abc STOP def", step, 3, out, sizeof out), 0);
        cr_assert_str_eq(out, "abc ", "step %zu", step);
    }
}

Test(stopper, partial_prefix_is_released_at_the_end)
{
    char out[64];
    cr_assert_eq(run("say STO", 1, 3, out, sizeof out), -1);
    cr_assert_str_eq(out, "say STO");
}

Test(stopper, held_then_released_when_it_diverges)
{
    rp_stopper s;
    rp_stopper_init(&s, g_stops, 3);
    rp_buf b = {0};
    rp_stopper_feed(&s, "x ST", 4, &b);
    cr_assert_str_eq(b.data, "x ");
    rp_stopper_feed(&s, "ART", 3, &b);
    cr_assert_str_eq(b.data, "x START");
    cr_assert_eq(s.matched, -1);
    rp_buf_deinit(&b);
    rp_stopper_deinit(&s);
}

Test(stopper, earliest_stop_wins_and_multibyte)
{
    char out[64];
    cr_assert_eq(run("ok\n\nUser: STOP", 2, 3, out, sizeof out), 1);
    cr_assert_str_eq(out, "ok");
    cr_assert_eq(run("caf\xc3\xa9!x", 1, 3, out, sizeof out), 2);
    cr_assert_str_eq(out, "caf");
}

Test(stopper, input_after_match_is_ignored)
{
    rp_stopper s;
    rp_stopper_init(&s, g_stops, 1);
    rp_buf b = {0};
    rp_stopper_feed(&s, "aSTOPb", 6, &b);
    rp_stopper_feed(&s, "more", 4, &b);
    rp_stopper_flush(&s, &b);
    cr_assert_str_eq(b.data, "a");
    rp_buf_deinit(&b);
    rp_stopper_deinit(&s);
}
