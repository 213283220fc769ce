/* Unit tests for src/text: the tokenizer pipeline on small synthetic tokenizer.json files
 * (each case states the HF `tokenizers` result it expects), the decoders, the streaming
 * detokenizer, errors and an allocation-failure sweep. The real tokenizers are covered by
 * tests/golden/tokenizer. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "text/tokenizer.h"

static char g_dir[256];

static rp_tokenizer *load_str(const char *json)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/rp_tok_test_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", g_dir);
    cr_assert_eq(system(cmd), 0);
    char path[300];
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    rp_err err;
    cr_assert_eq(rp_file_write(path, json, strlen(json), &err), RP_OK);
    rp_tokenizer *tok = NULL;
    rp_status st = rp_tokenizer_load(path, &tok, &err);
    cr_assert_eq(st, RP_OK, "load: %s", err.msg);
    return tok;
}

static void cleanup_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    (void)!system(cmd);
}

static void expect_ids(const rp_tokenizer *tok, const char *text, int add_special,
                       const int32_t *want, int n_want)
{
    int32_t *ids;
    int n;
    rp_err err;
    cr_assert_eq(rp_tokenizer_encode(tok, text, strlen(text), add_special, &ids, &n, &err), RP_OK,
                 "%s", err.msg);
    char got[512] = "", exp[512] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%d ", ids[i]);
    for (int i = 0; i < n_want; i++)
        snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), "%d ", want[i]);
    cr_expect_str_eq(got, exp, "'%s': got [%s] want [%s]", text, got, exp);
    rp_free(ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((int32_t[]){__VA_ARGS__}) / 4)

static char *decode(const rp_tokenizer *tok, const int32_t *ids, int n, int skip)
{
    char *text;
    size_t len;
    rp_err err;
    cr_assert_eq(rp_tokenizer_decode(tok, ids, n, skip, &text, &len, &err), RP_OK);
    cr_assert_eq(strlen(text), len);
    return text;
}

/* ---- BPE merges ------------------------------------------------------------------------ */

Test(bpe, lowest_rank_merges_first)
{
    /* merges: "b c" ranks before "a b", so abc -> a + bc -> abc */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,"
        "\"abc\":5},\"merges\":[\"b c\",\"a b\",\"a bc\"]},"
        "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}");
    expect_ids(tok, "abc", 0, IDS(5));
    expect_ids(tok, "ab bca", 0, IDS(3, 4, 0));
    expect_ids(tok, "cab", 0, IDS(2, 3));
    cr_expect_eq(rp_tokenizer_vocab_size(tok), 6);
    cr_expect_eq(rp_tokenizer_token_id(tok, "bc"), 4);
    cr_expect_str_eq(rp_tokenizer_token_str(tok, 3), "ab");
    cr_expect_null(rp_tokenizer_token_str(tok, 99));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(bpe, array_merges_and_long_words)
{
    /* merges given as pairs; a long word takes the heap path and must agree */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"aa\":1,\"aaaa\":2},"
        "\"merges\":[[\"a\",\"a\"],[\"aa\",\"aa\"]]}}");
    expect_ids(tok, "aaaaa", 0, IDS(2, 0));
    char buf[201];
    memset(buf, 'a', 200);
    buf[200] = 0;
    int32_t *ids;
    int n;
    rp_err err;
    cr_assert_eq(rp_tokenizer_encode(tok, buf, 200, 0, &ids, &n, &err), RP_OK);
    cr_expect_eq(n, 50);
    for (int i = 0; i < n; i++)
        cr_expect_eq(ids[i], 2);
    rp_free(ids);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(bpe, escaped_strings_and_merge_batches)
{
    /* JSON escapes in vocab and merges (read through the unescaping path), and more merges
     * than one load batch: a chain whose merged ids follow one another (the guessed id) and
     * merges whose ids do not */
    rp_buf j = {0};
    const char *alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    int na = (int)strlen(alpha), id = 0;
    cr_assert_eq(rp_buf_puts(&j, "{\"model\":{\"type\":\"BPE\",\"vocab\":{"), RP_OK);
    char tmp[128];
    for (int i = 0; i < na; i++) {
        snprintf(tmp, sizeof(tmp), "\"%c\":%d,", alpha[i], id++);
        rp_buf_puts(&j, tmp);
    }
    for (int k = 2; k <= na; k++) { /* prefixes of alpha: ids na .. 2na-2 */
        snprintf(tmp, sizeof(tmp), "\"%.*s\":%d,", k, alpha, id++);
        rp_buf_puts(&j, tmp);
    }
    /* ids with gaps; the escaped ones: "\"" = 200, "a\"" = 202, "\u00e9" = 204, "b\u00e9" =
     * 206, "bc" = 208, "bcd" = 210 */
    rp_buf_puts(&j, "\"\\\"\":200,\"a\\\"\":202,\"\\u00e9\":204,\"b\\u00e9\":206,\"bc\":208,"
                    "\"bcd\":210},\"merges\":[");
    for (int k = 1; k < na; k++) {
        snprintf(tmp, sizeof(tmp), "[\"%.*s\",\"%c\"],", k, alpha, alpha[k]);
        rp_buf_puts(&j, tmp);
    }
    rp_buf_puts(&j, "\"a \\\"\",[\"b\",\"\\u00e9\"],\"b c\",[\"bc\",\"d\"]]}}");
    rp_tokenizer *tok = load_str(j.data);
    rp_buf_deinit(&j);
    expect_ids(tok, alpha, 0, IDS(2 * na - 2));
    expect_ids(tok, "abcde", 0, IDS(na + 3));
    expect_ids(tok, "a\"", 0, IDS(202));
    expect_ids(tok, "b\xc3\xa9", 0, IDS(206));
    expect_ids(tok, "bcd", 0, IDS(210));
    expect_ids(tok, "bc\"", 0, IDS(208, 200));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(bpe, member_order_does_not_matter)
{
    /* merges before vocab, model before the other members, a malformed file fails cleanly */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"merges\":[\"b c\",\"a b\",\"a bc\"],\"type\":\"BPE\",\"vocab\":{\"a\":0,"
        "\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5}},"
        "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},\"added_tokens\":[]}");
    expect_ids(tok, "abc cab", 0, IDS(5, 2, 3));
    rp_tokenizer_free(tok);
    char path[300];
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    const char *bad[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":x},\"merges\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\" 7]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\"]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},"
        "\"merges\":[[\"a\",\"b\"]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rp_err err;
        cr_assert_eq(rp_file_write(path, bad[i], strlen(bad[i]), &err), RP_OK);
        rp_tokenizer *t = NULL;
        cr_expect_neq(rp_tokenizer_load(path, &t, &err), RP_OK, "file %zu loaded", i);
        cr_expect_null(t);
    }
    cleanup_dir();
}

Test(bpe, byte_fallback_and_unk)
{
    /* unknown characters: byte tokens when byte_fallback, else one fused <unk> */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,"
        "\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"a\":1,\"<0xC3>\":2,\"<0xA9>\":3},"
        "\"merges\":[]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
        "{\"type\":\"Fuse\"}]}}");
    expect_ids(tok, "a\xc3\xa9", 0, IDS(1, 2, 3));
    /* U+00E8 is c3 a8: 0xA8 has no byte token, so the character becomes <unk> */
    expect_ids(tok, "\xc3\xa8\xc3\xa8" "a", 0, IDS(0, 1));
    char *t = decode(tok, IDS(1, 2, 3), 0);
    cr_expect_str_eq(t, "a\xc3\xa9");
    rp_free(t);
    /* an invalid byte run becomes one U+FFFD per byte (HF ByteFallback) */
    t = decode(tok, IDS(2, 1), 0);
    cr_expect_str_eq(t, "\xef\xbf\xbd" "a");
    rp_free(t);
    rp_tokenizer_free(tok);
    cleanup_dir();

    tok = load_str("{\"model\":{\"type\":\"BPE\",\"fuse_unk\":false,\"unk_token\":\"<unk>\","
                   "\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[]}}");
    expect_ids(tok, "xya", 0, IDS(0, 0, 1));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(bpe, sentencepiece_boundaries_split_only_where_no_token_spans)
{
    /* "a\u2581" and "a\u2581b" hold U+2581 after another character: the boundary before
     * "\u2581b" in "\u2581aa\u2581b" must not be cut (whole-word BPE gives [\u2581a, a\u2581b]);
     * the one in "\u2581b\u2581b" may be */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xe2\x96\x81\":0,\"a\":1,\"b\":2,"
        "\"\xe2\x96\x81" "a\":3,\"a\xe2\x96\x81\":4,\"a\xe2\x96\x81" "b\":5,\"\xe2\x96\x81" "b\":6},"
        "\"merges\":[\"a \xe2\x96\x81\",\"a\xe2\x96\x81 b\",\"\xe2\x96\x81 a\",\"\xe2\x96\x81 b\"]}}");
    expect_ids(tok, "\xe2\x96\x81" "aa\xe2\x96\x81" "b", 0, IDS(3, 5));
    expect_ids(tok, "\xe2\x96\x81" "b\xe2\x96\x81" "b", 0, IDS(6, 6));
    /* a\u2581 (rank 0) first: [\u2581, a\u2581, \u2581b] */
    expect_ids(tok, "\xe2\x96\x81" "a\xe2\x96\x81\xe2\x96\x81" "b", 0, IDS(0, 4, 6));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

/* ---- added tokens ---------------------------------------------------------------------- */

static const char *k_added_vocab =
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0,\"y\":1,\" \":2,\"a\":3,\"b\":4,\"c\":5,"
    "\"h\":6,\"e\":7,\"l\":8,\"o\":9},\"merges\":[]}";

Test(added, lstrip_rstrip)
{
    char json[2048];
    snprintf(json, sizeof(json),
             "{%s,\"added_tokens\":[{\"id\":10,\"content\":\"<m>\",\"special\":true,"
             "\"lstrip\":true,\"rstrip\":false,\"single_word\":false,\"normalized\":false},"
             "{\"id\":11,\"content\":\"<n>\",\"special\":true,\"lstrip\":false,\"rstrip\":true,"
             "\"single_word\":false,\"normalized\":false},"
             "{\"id\":12,\"content\":\"<p>\",\"special\":false,\"lstrip\":false,"
             "\"rstrip\":false,\"single_word\":false,\"normalized\":false}]}",
             k_added_vocab);
    rp_tokenizer *tok = load_str(json);
    expect_ids(tok, "x  <m> y", 0, IDS(0, 10, 2, 1));
    expect_ids(tok, "x <n>  y", 0, IDS(0, 2, 11, 1));
    expect_ids(tok, "x <p> y", 0, IDS(0, 2, 12, 2, 1));
    expect_ids(tok, "<m><n><p>", 0, IDS(10, 11, 12));
    cr_expect(rp_tokenizer_is_special(tok, 10));
    cr_expect(!rp_tokenizer_is_special(tok, 12));
    cr_expect(!rp_tokenizer_is_special(tok, 0));
    cr_expect_eq(rp_tokenizer_token_id(tok, "<n>"), 11);
    /* decode: special tokens dropped with skip_special; no decoder joins with spaces */
    char *t = decode(tok, IDS(0, 10, 1, 12), 1);
    cr_expect_str_eq(t, "x y <p>");
    rp_free(t);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(added, single_word_and_longest_match)
{
    char json[2048];
    snprintf(json, sizeof(json),
             "{%s,\"added_tokens\":[{\"id\":10,\"content\":\"ab\",\"special\":false,"
             "\"lstrip\":false,\"rstrip\":false,\"single_word\":true,\"normalized\":false},"
             "{\"id\":11,\"content\":\"<a>\",\"special\":true},"
             "{\"id\":12,\"content\":\"<a><b>\",\"special\":true}]}",
             k_added_vocab);
    rp_tokenizer *tok = load_str(json);
    expect_ids(tok, "ab cab", 0, IDS(10, 2, 5, 3, 4));
    expect_ids(tok, "abc", 0, IDS(3, 4, 5));
    /* leftmost-longest: <a><b> wins over <a> */
    expect_ids(tok, "<a><b><a>", 0, IDS(12, 11));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(added, normalized_tokens_match_after_the_normalizer)
{
    char json[2048];
    snprintf(json, sizeof(json),
             "{%s,\"normalizer\":{\"type\":\"Lowercase\"},"
             "\"added_tokens\":[{\"id\":10,\"content\":\"hello\",\"special\":false,"
             "\"normalized\":true},{\"id\":11,\"content\":\"<X>\",\"special\":true,"
             "\"normalized\":false}]}",
             k_added_vocab);
    rp_tokenizer *tok = load_str(json);
    expect_ids(tok, "HeLLo<X>", 0, IDS(10, 11));
    /* "<X>" is not normalized: lowercased text does not match it; '<' '>' have no token and
     * no unk: dropped, as HF's BPE does */
    expect_ids(tok, "<x>", 0, IDS(0));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

/* ---- pre-tokenizers -------------------------------------------------------------------- */

/* ignore_merges with every expected piece in the vocabulary: ids show the pieces. */
static rp_tokenizer *split_tok(const char *behavior, int invert)
{
    char json[2048];
    snprintf(json, sizeof(json),
             "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,"
             "\"c\":2,\"-\":3,\"a-\":4,\"b-\":5,\"-b\":6,\"-c\":7,\"--\":8},\"merges\":[]},"
             "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
             "\"behavior\":\"%s\",\"invert\":%s}}",
             behavior, invert ? "true" : "false");
    return load_str(json);
}

Test(pretok, split_behaviors)
{
    /* HF docs, "the-final--countdown" with each behavior */
    rp_tokenizer *tok = split_tok("Removed", 0);
    expect_ids(tok, "a-b--c", 0, IDS(0, 1, 2));
    rp_tokenizer_free(tok);
    tok = split_tok("Isolated", 0);
    expect_ids(tok, "a-b--c", 0, IDS(0, 3, 1, 3, 3, 2));
    rp_tokenizer_free(tok);
    tok = split_tok("MergedWithPrevious", 0);
    expect_ids(tok, "a-b--c", 0, IDS(4, 5, 3, 2));
    rp_tokenizer_free(tok);
    tok = split_tok("MergedWithNext", 0);
    expect_ids(tok, "a-b--c", 0, IDS(0, 6, 3, 7));
    rp_tokenizer_free(tok);
    tok = split_tok("Contiguous", 0);
    expect_ids(tok, "a-b--c", 0, IDS(0, 3, 1, 8, 2));
    rp_tokenizer_free(tok);
    /* invert: the non-matches are the delimiters, "-" pieces are kept */
    tok = split_tok("Removed", 1);
    expect_ids(tok, "a-b--c", 0, IDS(3, 3, 3));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(pretok, regex_split_digits_punct_whitespace)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"ab\":0,\"1\":1,"
        "\"2\":2,\"12\":3,\"!\":4,\",\":5,\"c\":6},\"merges\":[]},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
        "{\"type\":\"WhitespaceSplit\"},{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"},"
        "{\"type\":\"Digits\",\"individual_digits\":true}]}}");
    expect_ids(tok, "ab12!\t,c", 0, IDS(0, 1, 2, 4, 5, 6));
    rp_tokenizer_free(tok);
    tok = load_str("{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"ab\":0,"
                   "\"12\":1,\"!?\":2,\"c\":3},\"merges\":[]},"
                   "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                   "{\"type\":\"Whitespace\"},{\"type\":\"Digits\",\"individual_digits\":false}"
                   "]}}");
    expect_ids(tok, "ab12 !? c", 0, IDS(0, 1, 2, 3));
    rp_tokenizer_free(tok);
    /* \s in a tokenizer.json regex is Oniguruma's: Unicode White_Space, NBSP and NEL
     * included (JavaScript's \s, used by transformers.js, lacks NEL) */
    tok = load_str("{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,"
                   "\"b\":1,\"\xc2\xa0\":2,\"\xc2\x85\":3},\"merges\":[]},\"pre_tokenizer\":{"
                   "\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Isolated\"}}");
    expect_ids(tok, "a\xc2\xa0" "b", 0, IDS(0, 2, 1));
    expect_ids(tok, "a\xc2\x85" "b", 0, IDS(0, 3, 1));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(pretok, metaspace_prepend_schemes)
{
    const char *fmt =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xe2\x96\x81\":0,\"h\":1,\"i\":2,"
        "\"\xe2\x96\x81h\":3,\"\xe2\x96\x81hi\":4,\"hi\":5},\"merges\":[\"\xe2\x96\x81 h\","
        "\"\xe2\x96\x81h i\",\"h i\"]},\"added_tokens\":[{\"id\":6,\"content\":\"<m>\","
        "\"special\":true}],\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":"
        "\"\xe2\x96\x81\",\"prepend_scheme\":\"%s\",\"split\":true},"
        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
        "\"prepend_scheme\":\"%s\",\"split\":true}}";
    char json[2048];
    snprintf(json, sizeof(json), fmt, "always", "always");
    rp_tokenizer *tok = load_str(json);
    expect_ids(tok, "hi hi", 0, IDS(4, 4));
    expect_ids(tok, "hi<m>hi", 0, IDS(4, 6, 4));
    char *t = decode(tok, IDS(4, 4), 0);
    cr_expect_str_eq(t, "hi hi");
    rp_free(t);
    rp_tokenizer_free(tok);
    snprintf(json, sizeof(json), fmt, "first", "first");
    tok = load_str(json);
    expect_ids(tok, "hi<m>hi", 0, IDS(4, 6, 5));
    rp_tokenizer_free(tok);
    snprintf(json, sizeof(json), fmt, "never", "never");
    tok = load_str(json);
    expect_ids(tok, "hi hi", 0, IDS(5, 4));
    t = decode(tok, IDS(5, 4), 0);
    cr_expect_str_eq(t, "hi hi");
    rp_free(t);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(pretok, bytelevel_prefix_space_and_regex)
{
    /* GPT-2 style: vocab in the byte alphabet (U+0120 is the space) */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"h\":0,\"i\":1,\"\xc4\xa0\":2,"
        "\"\xc4\xa0h\":3,\"\xc4\xa0hi\":4,\"!\":5},\"merges\":[\"\xc4\xa0 h\",\"\xc4\xa0h i\"]},"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
        "\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"}}");
    expect_ids(tok, "hi hi!", 0, IDS(4, 4, 5));
    char *t = decode(tok, IDS(4, 4, 5), 0);
    cr_expect_str_eq(t, " hi hi!");
    rp_free(t);
    cr_expect_str_eq(rp_tokenizer_token_str(tok, 4), "\xc4\xa0hi");
    rp_tokenizer_free(tok);
    cleanup_dir();
}

/* ---- normalizers, post-processor, decoders --------------------------------------------- */

Test(norm, sequence_nfkc_strip_replace_prepend)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"_fi1\":0,"
        "\"_x_y\":1},\"merges\":[]},\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
        "{\"type\":\"NFKC\"},{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true},"
        "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"_\"},"
        "{\"type\":\"Prepend\",\"prepend\":\"_\"}]}}");
    /* U+FB01 (fi ligature) and U+2460 (circled 1) become "fi" and "1" under NFKC */
    expect_ids(tok, "  \xef\xac\x81\xe2\x91\xa0 \t", 0, IDS(0));
    expect_ids(tok, "x   y", 0, IDS(1));
    expect_ids(tok, "   ", 0, IDS());
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(post, template_processing)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":1,\"</s>\":2},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true},"
        "{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
        "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\","
        "\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
        "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]},"
        "\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}}}");
    expect_ids(tok, "aa", 1, IDS(1, 0, 0, 2));
    expect_ids(tok, "aa", 0, IDS(0, 0));
    expect_ids(tok, "", 1, IDS(1, 2));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(model, wordpiece)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
        "\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,"
        "\"vocab\":{\"[UNK]\":0,\"un\":1,\"##aff\":2,\"##able\":3,\"!\":4,\"a\":5}},"
        "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true},"
        "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
        "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}}");
    expect_ids(tok, "UNAFFABLE! xyz a", 0, IDS(1, 2, 3, 4, 0, 5));
    char *t = decode(tok, IDS(1, 2, 3, 4, 5), 0);
    cr_expect_str_eq(t, "unaffable! a");
    rp_free(t);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(decode, strip_and_replace)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xe2\x96\x81hi\":0,\"\xe2\x96\x81yo\":1},"
        "\"merges\":[]},\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
        "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    char *t = decode(tok, IDS(0, 1, 99, -5), 0);
    cr_expect_str_eq(t, "hi yo");
    rp_free(t);
    t = decode(tok, NULL, 0, 0);
    cr_expect_str_eq(t, "");
    rp_free(t);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

/* ---- streaming ------------------------------------------------------------------------- */

Test(detok, byte_fallback_emoji_arrives_whole)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<0xF0>\":0,"
        "\"<0x9F>\":1,\"<0x98>\":2,\"<0x80>\":3,\"\xe2\x96\x81ok\":4},\"merges\":[]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
        "{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
        "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    rp_detok *d = rp_detok_new(tok, 0);
    rp_buf out = {0};
    int32_t seq[] = {4, 0, 1, 2, 3, 4};
    size_t lens[6];
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(rp_detok_feed(d, seq[i], &out), RP_OK);
        lens[i] = out.len;
    }
    cr_expect_eq(lens[0], 2);                    /* "ok": the leading space is stripped */
    cr_expect_eq(lens[1], 2);                    /* nothing while the emoji is incomplete */
    cr_expect_eq(lens[3], 2);
    cr_expect_eq(lens[4], 6);                    /* the whole emoji at once */
    cr_assert_eq(rp_detok_flush(d, &out), RP_OK);
    cr_expect_str_eq(out.data, "ok\xf0\x9f\x98\x80 ok");
    /* incomplete at the end: flush gives U+FFFD as decode does */
    rp_buf_reset(&out);
    rp_detok_feed(d, 0, &out);
    rp_detok_feed(d, 1, &out);
    cr_expect_eq(out.len, 0);
    rp_detok_flush(d, &out);
    cr_expect_str_eq(out.data, "\xef\xbf\xbd\xef\xbf\xbd");
    rp_buf_deinit(&out);
    rp_detok_free(d);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(detok, bytelevel_multibyte_across_tokens)
{
    /* byte-level: U+00E9 (c3 a9) split over two tokens, U+00C3 is byte c3, U+00A9 is a9 */
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xc3\x83\":0,\"\xc2\xa9\":1,\"a\":2},"
        "\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
        "\"decoder\":{\"type\":\"ByteLevel\"}}");
    expect_ids(tok, "a\xc3\xa9", 0, IDS(2, 0, 1));
    rp_detok *d = rp_detok_new(tok, 0);
    rp_buf out = {0};
    rp_detok_feed(d, 2, &out);
    cr_expect_eq(out.len, 1);
    rp_detok_feed(d, 0, &out);
    cr_expect_eq(out.len, 1);
    rp_detok_feed(d, 1, &out);
    cr_expect_eq(out.len, 3);
    rp_detok_flush(d, &out);
    cr_expect_str_eq(out.data, "a\xc3\xa9");
    rp_buf_deinit(&out);
    rp_detok_free(d);
    rp_tokenizer_free(tok);
    cleanup_dir();
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(errors, load_and_encode_failures)
{
    rp_err err;
    rp_tokenizer *tok;
    cr_expect_eq(rp_tokenizer_load("/nonexistent/tokenizer.json", &tok, &err), RP_ERR_NOT_FOUND);
    snprintf(g_dir, sizeof(g_dir), "/tmp/rp_tok_test_%d", (int)getpid());
    char cmd[300], path[300];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", g_dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    const char *bad[] = {
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
        "\"normalizer\":{\"type\":\"Precompiled\"}}",
    };
    rp_status want[] = {RP_ERR_UNSUPPORTED, RP_ERR_INVALID, RP_ERR_INVALID, RP_ERR_UNSUPPORTED,
                        RP_ERR_UNSUPPORTED};
    for (size_t i = 0; i < RP_ARRAY_LEN(bad); i++) {
        rp_file_write(path, bad[i], strlen(bad[i]), &err);
        cr_expect_eq(rp_tokenizer_load(path, &tok, &err), want[i], "case %zu: %s", i, err.msg);
    }
    tok = load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}");
    int32_t *ids;
    int n;
    cr_expect_eq(rp_tokenizer_encode(tok, "a\xff", 2, 0, &ids, &n, &err), RP_ERR_INVALID);
    cr_expect_eq(rp_tokenizer_encode(tok, "\xed\xa0\x80", 3, 0, &ids, &n, &err), RP_ERR_INVALID);
    cr_expect_eq(rp_tokenizer_encode(tok, "", 0, 0, &ids, &n, &err), RP_OK);
    cr_expect_eq(n, 0);
    rp_free(ids);
    cr_expect_eq(rp_tokenizer_bos_id(tok), -1);
    cr_expect_null(rp_tokenizer_chat_template(tok, NULL));
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(config, tokenizer_config_and_templates)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":1,\"</s>\":2},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true},"
        "{\"id\":2,\"content\":\"</s>\",\"special\":true}]}");
    rp_tokenizer_free(tok);
    char path[300];
    rp_err err;
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", g_dir);
    const char *cfg = "{\"bos_token\":\"<s>\",\"eos_token\":{\"content\":\"</s>\"},"
                      "\"model_max_length\":1000000000000000019884624838656,"
                      "\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
                      "{\"name\":\"tool_use\",\"template\":\"T\"}]}";
    cr_assert_eq(rp_file_write(path, cfg, strlen(cfg), &err), RP_OK);
    cr_assert_eq(rp_tokenizer_load(g_dir, &tok, &err), RP_OK, "%s", err.msg);
    cr_expect_eq(rp_tokenizer_bos_id(tok), 1);
    cr_expect_eq(rp_tokenizer_eos_id(tok), 2);
    cr_expect_str_eq(rp_tokenizer_bos_str(tok), "<s>");
    cr_expect_str_eq(rp_tokenizer_eos_str(tok), "</s>");
    cr_expect_str_eq(rp_tokenizer_chat_template(tok, NULL), "D");
    cr_expect_str_eq(rp_tokenizer_chat_template(tok, "tool_use"), "T");
    const int32_t *eog;
    cr_expect_eq(rp_tokenizer_eog_ids(tok, &eog), 1);
    cr_expect_eq(eog[0], 2);
    cr_expect(rp_tokenizer_is_eog(tok, 2) && !rp_tokenizer_is_eog(tok, 1));
    rp_tokenizer_free(tok);
    /* generation_config.json adds its eos ids */
    snprintf(path, sizeof(path), "%s/generation_config.json", g_dir);
    const char *gen = "{\"eos_token_id\":[2,0]}";
    cr_assert_eq(rp_file_write(path, gen, strlen(gen), &err), RP_OK);
    cr_assert_eq(rp_tokenizer_load(g_dir, &tok, &err), RP_OK, "%s", err.msg);
    cr_expect_eq(rp_tokenizer_eog_ids(tok, &eog), 2);
    cr_expect(rp_tokenizer_is_eog(tok, 0));
    rp_tokenizer_free(tok);
    snprintf(path, sizeof(path), "%s/chat_template.jinja", g_dir);
    cr_assert_eq(rp_file_write(path, "J", 1, &err), RP_OK);
    cr_assert_eq(rp_tokenizer_load(g_dir, &tok, &err), RP_OK, "%s", err.msg);
    cr_expect_str_eq(rp_tokenizer_chat_template(tok, NULL), "J");
    rp_tokenizer_free(tok);
    cleanup_dir();
}

Test(oom, load_and_encode_survive_every_failed_allocation)
{
    rp_tokenizer *tok = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<m>\":3},"
        "\"merges\":[\"a b\"]},\"normalizer\":{\"type\":\"NFC\"},"
        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
        "\"behavior\":\"Removed\"},\"added_tokens\":[{\"id\":3,\"content\":\"<m>\","
        "\"special\":true}]}");
    rp_tokenizer_free(tok);
    char path[300];
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    int ok = 0;
    for (int k = 1; k < 400 && !ok; k++) {
        rp_err err;
        rp_alloc_fail_after(k);
        rp_status st = rp_tokenizer_load(path, &tok, &err);
        if (st == RP_OK) {
            int32_t *ids;
            int n;
            st = rp_tokenizer_encode(tok, "ab ab<m>ab", 10, 0, &ids, &n, &err);
            if (st == RP_OK) {
                rp_free(ids);
                ok = 1;
            }
            rp_tokenizer_free(tok);
        }
        rp_alloc_fail_after(0);
    }
    cr_expect(ok);
    cleanup_dir();
}

/* ---- threads --------------------------------------------------------------------------- */

#include <pthread.h>

typedef struct thread_job {
    const rp_tokenizer *tok;
    const rp_tokenizer *ref;
    unsigned seed;
    int mismatches;
} thread_job;

static void *encode_many(void *arg)
{
    thread_job *j = arg;
    const char alpha[] = "hi !";
    for (int r = 0; r < 3000; r++) {
        char text[24];
        int n = 1 + (int)(rand_r(&j->seed) % 20);
        for (int i = 0; i < n; i++)
            text[i] = alpha[rand_r(&j->seed) % 4];
        int32_t *a, *b;
        int na, nb;
        rp_err err;
        if (rp_tokenizer_encode(j->tok, text, (size_t)n, 0, &a, &na, &err) ||
            rp_tokenizer_encode(j->ref, text, (size_t)n, 0, &b, &nb, &err)) {
            j->mismatches++;
            continue;
        }
        if (na != nb || memcmp(a, b, (size_t)na * sizeof(int32_t)) != 0)
            j->mismatches++;
        rp_free(a);
        rp_free(b);
    }
    return NULL;
}

Test(threads, concurrent_encode_shares_the_word_cache_safely)
{
    const char *json =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"h\":0,\"i\":1,\"\xc4\xa0\":2,"
        "\"\xc4\xa0h\":3,\"\xc4\xa0hi\":4,\"!\":5,\"hi\":6,\"ii\":7},\"merges\":[\"\xc4\xa0 h\","
        "\"\xc4\xa0h i\",\"h i\",\"i i\"]},"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}}";
    rp_tokenizer *tok = load_str(json);
    rp_tokenizer *ref = load_str(json);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){tok, ref, (unsigned)i * 7919u + 1, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].mismatches, 0);
    }
    rp_tokenizer_free(tok);
    rp_tokenizer_free(ref);
    cleanup_dir();
}
