/* Unit tests for the hand-written pre-tokenizer matchers (text/pretok.c): for every regex
 * that has one, the matcher's decision at every character position equals PCRE2's on the
 * golden texts (tests/golden/tokenizer/texts.json), on every string of up to 4 characters
 * over an alphabet of the characters that matter (letters of both cases, the contraction
 * letters, quote, digits, each whitespace kind, punctuation, slash, and non-ASCII letters,
 * digits, spaces and case-folding characters), and on random longer strings over it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "text/tok_impl.h"

typedef struct counts {
    long decided, fallback;
} counts;

/* Compares the two matchers at every character boundary of s. */
static void check_text(const tk_pattern *p, pcre2_match_data *md, const char *s, size_t n,
                       counts *c)
{
    for (size_t pos = 0; pos <= n; pos++) {
        if (pos < n && ((uint8_t)s[pos] & 0xC0) == 0x80)
            continue;
        size_t ms = 0, me = 0;
        int r = tk_pattern_next_pcre(p, md, s, n, pos, &ms, &me);
        long e = tk_pattern_fast(p, s, n, pos);
        if (e < 0) {
            c->fallback++;
            continue;
        }
        c->decided++;
        cr_assert(r == 1 && ms == pos && me == (size_t)e,
                  "text '%.*s' at %zu: hand-written [%zu, %ld), PCRE2 %d [%zu, %zu)", (int)n, s,
                  pos, pos, e, r, ms, me);
        size_t fs, fe;
        cr_assert(tk_pattern_next(p, md, s, n, pos, &fs, &fe) == 1 && fs == ms && fe == me);
    }
}

static const char *k_alpha[] = {
    "a", "Z", "s", "S", "t", "l", "L", "e", "E", "r", "v", "m", "d", "'", "0", "7", " ", "\t",
    "\n", "\r", "\v", ".", "/", "-", "\x01", "\xc3\xa9" /* é */, "\xc3\x89" /* É */,
    "\xc2\xa0" /* NBSP */, "\xc5\xbf" /* long s, folds to s */, "\xd9\xa3" /* Arabic 3 */,
    "\xcc\x81" /* combining acute */, "\xe2\x80\x9c" /* left quote */, "\xe2\x80\xa8",
    "\xe2\x84\xaa" /* Kelvin sign */, "\xc2\xb2" /* superscript 2 */,
};
#define N_ALPHA (sizeof(k_alpha) / sizeof(k_alpha[0]))

static void for_each_pattern(void (*fn)(const tk_pattern *, pcre2_match_data *, counts *))
{
    int n_pat = 0;
    for (int i = 0; tk_fast_regex(i); i++, n_pat++) {
        tk_pattern p = {0};
        rp_err err;
        cr_assert_eq(tk_pattern_compile(&p, tk_fast_regex(i), &err), RP_OK, "%s", err.msg);
        cr_assert(p.fast, "regex %d has no hand-written matcher", i);
        pcre2_match_data *md = pcre2_match_data_create(32, NULL);
        counts c = {0, 0};
        fn(&p, md, &c);
        cr_assert(c.decided > 0, "regex %d: the matcher decided %ld, PCRE2 %ld", i,
                  c.decided, c.fallback);
        pcre2_match_data_free(md);
        tk_pattern_free(&p);
    }
    cr_assert_geq(n_pat, 6);
}

static void golden_texts(const tk_pattern *p, pcre2_match_data *md, counts *c)
{
    const char *dir = getenv("RP_SOURCE_DIR");
    cr_assert(dir, "RP_SOURCE_DIR is not set");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/golden/tokenizer/texts.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    cr_assert(root && json_array_size(root) > 50, "%s: %s", path, je.text);
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *t = json_array_get(root, i);
        check_text(p, md, json_string_value(t), json_string_length(t), c);
    }
    json_decref(root);
}

Test(pretok_fast, golden_texts)
{
    for_each_pattern(golden_texts);
}

static void all_short(const tk_pattern *p, pcre2_match_data *md, counts *c)
{
    char buf[64];
    size_t total = 1;
    for (int len = 1; len <= 4; len++) {
        total *= N_ALPHA;
        for (size_t k = 0; k < total; k++) {
            size_t n = 0, v = k;
            for (int j = 0; j < len; j++, v /= N_ALPHA) {
                const char *ch = k_alpha[v % N_ALPHA];
                memcpy(buf + n, ch, strlen(ch));
                n += strlen(ch);
            }
            check_text(p, md, buf, n, c);
        }
    }
}

Test(pretok_fast, all_short_strings, .timeout = 600)
{
    for_each_pattern(all_short);
}

static void random_long(const tk_pattern *p, pcre2_match_data *md, counts *c)
{
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    char buf[256];
    for (int r = 0; r < 20000; r++) {
        size_t n = 0;
        int len = 8 + r % 40;
        for (int j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* mostly ASCII, like real text */
            size_t ai = (x >> 8) % 8 ? (x >> 16) % 25 : (x >> 16) % N_ALPHA;
            const char *ch = k_alpha[ai];
            memcpy(buf + n, ch, strlen(ch));
            n += strlen(ch);
        }
        check_text(p, md, buf, n, c);
    }
}

Test(pretok_fast, random_strings, .timeout = 600)
{
    for_each_pattern(random_long);
}
