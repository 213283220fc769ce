/* text/tok_gguf.c - a tokenizer from GGUF metadata (tokenizer.ggml.*): the vocabulary,
 * token types, scores or merges, and the pre-tokenizer name, mapped onto the same pipeline
 * as tokenizer.json (the GGUF "pre" names stand for the HF pre-tokenizer regex sequences).
 *
 *   model "gpt2"   byte-level BPE with merges; Split regexes from tokenizer.ggml.pre
 *   model "llama"  SentencePiece BPE: merges derived from the scores (a pair merges when the
 *                  concatenation is a token; the higher its score the earlier), byte fallback
 *   model "gemma4" SentencePiece-style BPE with explicit merges, raw UTF-8 vocabulary
 *   model "bert"   WordPiece (GGUF stores "##x" as "x" and word starts as "\u2581x")
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/gguf.h"
#include "text/tok_impl.h"
#include "text/unicode.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"  \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"  \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"          \
    "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* HF pre-tokenizer sequences behind the GGUF pre names (each an Isolated Split). */
typedef struct pre_def {
    const char *names; /* '|'-separated */
    const char *re[6];
} pre_def;

static const pre_def k_pres[] = {
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|dbrx|smaug-bpe|chatglm-bpe",
     {RE_LLAMA3}},
    {"qwen2|deepseek-r1-qwen|stablelm2|hunyuan|megrez", {RE_QWEN2}},
    {"qwen35", {RE_QWEN35}},
    {"gpt-2|phi-2|mpt|olmo|jais|roberta-bpe|jina-v1-en|jina-v2-code|jina-es|jina-de|"
     "gigachat|trillion|granite-docling",
     {RE_GPT2}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b",
     {"\\p{N}", RE_GPT2}},
    {"falcon",
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"
      "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}"
      "\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-"
      "\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}"
      "\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}"
      "\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}"
      "\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}"
      "\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-"
      "\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-"
      "\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}"
      "\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-"
      "\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}"
      "\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}"
      "\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}"
      "\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}"
      "\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}"
      "\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}"
      "\\x{1e900}-\\x{1e943}]+",
      "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
      "\\s+$", "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+", "\\p{N}+"}},
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+", "\\p{N}"}},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
};

static int name_in(const char *names, const char *s, size_t n)
{
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && memcmp(p, s, n) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

static rp_status make_pre_seq(rp_tokenizer *tok, const pre_def *d, rp_err *err)
{
    int n = 0;
    while (n < 6 && d->re[n])
        n++;
    tok->pre = rp_calloc(1, sizeof(tk_pre));
    if (!tok->pre)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    tok->pre->kind = TK_PRE_SEQ;
    tok->pre->sub = rp_calloc((size_t)n, sizeof(tk_pre));
    if (!tok->pre->sub)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    tok->pre->n_sub = n;
    for (int i = 0; i < n; i++) {
        tk_pre *p = &tok->pre->sub[i];
        p->kind = TK_PRE_SPLIT;
        p->behavior = TK_SPLIT_ISOLATED;
        rp_status st = tk_pattern_compile(&p->pat, d->re[i], err);
        if (st)
            return st;
    }
    return RP_OK;
}

static rp_status set_norm_spm(rp_tokenizer *tok, int prepend, rp_err *err)
{
    tk_norm *n = rp_calloc(1, sizeof(tk_norm));
    if (!n)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    tok->norm = n;
    n->kind = TK_NORM_SEQ;
    n->sub = rp_calloc(2, sizeof(tk_norm));
    if (!n->sub)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int k = 0;
    if (prepend) {
        n->sub[k].kind = TK_NORM_PREPEND;
        n->sub[k].content = rp_strdup("\xe2\x96\x81");
        n->sub[k].content_len = 3;
        if (!n->sub[k].content)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        k++;
    }
    n->sub[k].kind = TK_NORM_REPLACE;
    n->sub[k].pat.lit = rp_strdup(" ");
    n->sub[k].pat.lit_len = 1;
    n->sub[k].content = rp_strdup("\xe2\x96\x81");
    n->sub[k].content_len = 3;
    n->n_sub = k + 1;
    if (!n->sub[k].content || !n->sub[k].pat.lit)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

static rp_status set_dec_spm(rp_tokenizer *tok, int strip, rp_err *err)
{
    tk_dec *d = rp_calloc(1, sizeof(tk_dec));
    if (!d)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    tok->dec = d;
    d->kind = TK_DEC_SEQ;
    d->sub = rp_calloc(4, sizeof(tk_dec));
    if (!d->sub)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    d->sub[0].kind = TK_DEC_REPLACE;
    d->sub[0].pat.lit = rp_strdup("\xe2\x96\x81");
    d->sub[0].pat.lit_len = 3;
    d->sub[0].content = rp_strdup(" ");
    d->sub[0].content_len = 1;
    d->sub[1].kind = TK_DEC_BYTEFALLBACK;
    d->sub[2].kind = TK_DEC_FUSE;
    d->n_sub = 3;
    if (strip) {
        d->sub[3].kind = TK_DEC_STRIP;
        d->sub[3].content = rp_strdup(" ");
        d->sub[3].content_len = 1;
        d->sub[3].start = 1;
        d->n_sub = 4;
        if (!d->sub[3].content)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    if (!d->sub[0].pat.lit || !d->sub[0].content)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    return RP_OK;
}

static rp_status post_push(rp_tokenizer *tok, int is_seq, int32_t id)
{
    tk_post_item *v = rp_realloc(tok->post, (size_t)(tok->n_post + 1) * sizeof(tk_post_item));
    if (!v)
        return RP_ERR_NOMEM;
    tok->post = v;
    tk_post_item *it = &tok->post[tok->n_post++];
    memset(it, 0, sizeof(*it));
    it->is_seq = is_seq;
    if (!is_seq) {
        it->ids = rp_alloc(sizeof(int32_t));
        if (!it->ids)
            return RP_ERR_NOMEM;
        it->ids[0] = id;
        it->n_ids = 1;
    }
    return RP_OK;
}

static int32_t get_id(const rp_gguf *g, const char *key)
{
    uint32_t v;
    if (rp_gguf_find(g, key) < 0 || rp_gguf_get_u32(g, key, &v, NULL) || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

static int get_flag(const rp_gguf *g, const char *key, int dflt)
{
    int v;
    if (rp_gguf_find(g, key) < 0 || rp_gguf_get_bool(g, key, &v, NULL))
        return dflt;
    return v;
}

typedef struct score_rank {
    float score;
    int32_t id;
} score_rank;

static int score_cmp(const void *a, const void *b)
{
    const score_rank *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* SentencePiece BPE: every token (normal type) that splits into two tokens gives a merge,
 * ranked by the token's score. */
static rp_status spm_merges(rp_tokenizer *tok, const rp_gguf *g, int64_t i_scores,
                            const int32_t *types, rp_err *err)
{
    int n = tok->n_vocab;
    score_rank *sr = rp_alloc((size_t)n * sizeof(score_rank));
    int32_t *rank = rp_alloc((size_t)n * sizeof(int32_t));
    if (!sr || !rank) {
        rp_free(sr), rp_free(rank);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        double s = 0;
        if (i_scores >= 0)
            rp_gguf_arr_f64(g, i_scores, (uint64_t)i, &s);
        sr[i].score = (float)s;
        sr[i].id = i;
    }
    qsort(sr, (size_t)n, sizeof(score_rank), score_cmp);
    for (int i = 0; i < n; i++)
        rank[sr[i].id] = i;
    rp_free(sr);
    rp_status st = tk_mergemap_init(&tok->merges, (uint32_t)n * 2);
    for (int i = 0; !st && i < n; i++) {
        if (types[i] != TT_NORMAL && types[i] != TT_USER)
            continue;
        size_t len;
        const char *s = tk_strtab_get(&tok->strs, i, &len);
        if (!s)
            continue;
        for (size_t k = 1; !st && k < len; k++) {
            if (((uint8_t)s[k] & 0xC0) == 0x80)
                continue;
            int32_t a = tk_strmap_get(&tok->raw_map, tok->raw, s, k);
            int32_t b = tk_strmap_get(&tok->raw_map, tok->raw, s + k, len - k);
            if (a >= 0 && b >= 0)
                st = tk_mergemap_put(&tok->merges, a, b, rank[i], i);
        }
    }
    rp_free(rank);
    return st ? rp_err_set(err, st, "out of memory") : RP_OK;
}

static rp_status load_merges(rp_tokenizer *tok, const rp_gguf *g, rp_err *err)
{
    int64_t im = rp_gguf_find(g, "tokenizer.ggml.merges");
    rp_gguf_type et;
    uint64_t nm;
    rp_status st = rp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, err);
    if (st)
        return st;
    if (et != RP_GGUF_STRING || nm > (uint64_t)INT32_MAX)
        return rp_err_set(err, RP_ERR_INVALID, "tokenizer.ggml.merges is not a string array");
    if (tk_mergemap_init(&tok->merges, (uint32_t)nm))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_buf cat = {0};
    for (uint64_t r = 0; r < nm; r++) {
        const char *s;
        size_t n;
        rp_gguf_arr_str(g, im, r, &s, &n);
        const char *sp = memchr(s, ' ', n);
        if (!sp) {
            rp_buf_deinit(&cat);
            return rp_err_set(err, RP_ERR_INVALID, "merge %llu has no space",
                              (unsigned long long)r);
        }
        size_t al = (size_t)(sp - s);
        int32_t a = tk_strmap_get(&tok->str_map, &tok->strs, s, al);
        int32_t b = tk_strmap_get(&tok->str_map, &tok->strs, sp + 1, n - al - 1);
        rp_buf_reset(&cat);
        if (rp_buf_append(&cat, s, al) || rp_buf_append(&cat, sp + 1, n - al - 1)) {
            rp_buf_deinit(&cat);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
        int32_t m = tk_strmap_get(&tok->str_map, &tok->strs, cat.data, cat.len);
        if (a < 0 || b < 0 || m < 0)
            continue; /* HF would refuse the file; llama.cpp skips such merges too */
        if (tk_mergemap_put(&tok->merges, a, b, (int32_t)r, m)) {
            rp_buf_deinit(&cat);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
    }
    rp_buf_deinit(&cat);
    return RP_OK;
}

static rp_status load_vocab(rp_tokenizer *tok, const rp_gguf *g, int wordpiece, int32_t **types,
                            rp_err *err)
{
    int64_t it = rp_gguf_find(g, "tokenizer.ggml.tokens");
    rp_gguf_type et;
    uint64_t nt;
    rp_status st = rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, err);
    if (st)
        return st;
    if (et != RP_GGUF_STRING || nt == 0 || nt > 16u * 1024 * 1024)
        return rp_err_set(err, RP_ERR_INVALID, "tokenizer.ggml.tokens is not a string array");
    int n = (int)nt;
    tok->n_vocab = n;
    *types = rp_alloc((size_t)n * sizeof(int32_t));
    if (!*types)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int64_t itt = rp_gguf_find(g, "tokenizer.ggml.token_type");
    for (int i = 0; i < n; i++) {
        int64_t v = TT_NORMAL;
        if (itt >= 0)
            rp_gguf_arr_i64(g, itt, (uint64_t)i, &v);
        (*types)[i] = (int32_t)v;
    }
    if (tk_strmap_init(&tok->str_map, (uint32_t)n) || tk_strmap_init(&tok->raw_map, (uint32_t)n))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_buf tmp = {0};
    for (int i = 0; i < n; i++) {
        const char *s;
        size_t l;
        rp_gguf_arr_str(g, it, (uint64_t)i, &s, &l);
        st = RP_OK;
        if (wordpiece && (*types)[i] == TT_NORMAL) {
            /* back to HF form: "\u2581x" -> "x", "x" -> "##x" */
            rp_buf_reset(&tmp);
            if (l >= 3 && memcmp(s, "\xe2\x96\x81", 3) == 0)
                st = rp_buf_append(&tmp, s + 3, l - 3);
            else if (!(l >= 2 && s[0] == '[' && s[l - 1] == ']')) {
                st = rp_buf_puts(&tmp, "##");
                st = st ? st : rp_buf_append(&tmp, s, l);
            } else
                st = rp_buf_append(&tmp, s, l);
            if (!st)
                st = tk_strtab_set(&tok->strs, i, tmp.data, tmp.len);
        } else {
            st = tk_strtab_set(&tok->strs, i, s, l);
        }
        if (st) {
            rp_buf_deinit(&tmp);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
    }
    if (tok->byte_level) {
        for (int i = 0; i < n; i++) {
            size_t l;
            const char *s = tk_strtab_get(&tok->strs, i, &l);
            rp_buf_reset(&tmp);
            int ok = 1;
            for (size_t k = 0; k < l && ok;) {
                uint32_t cp;
                int cl = rp_utf8_decode(s + k, l - k, &cp);
                int b = cl ? rp_bytelevel_byte(cp) : -1;
                if (b < 0 || rp_buf_putc(&tmp, (char)b))
                    ok = 0;
                k += cl ? (size_t)cl : 1;
            }
            st = ok ? tk_strtab_set(&tok->raw_tab, i, tmp.data ? tmp.data : "", tmp.len)
                    : tk_strtab_set(&tok->raw_tab, i, s, l);
            if (st) {
                rp_buf_deinit(&tmp);
                return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            }
        }
        tok->raw = &tok->raw_tab;
    }
    rp_buf_deinit(&tmp);
    for (int i = 0; i < n; i++) {
        if (tk_strmap_put(&tok->str_map, &tok->strs, i))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        int t = (*types)[i];
        /* control tokens are matched only as added tokens (as in HF's vocab they are, but
         * the model would never produce them from text anyway) */
        if (t == TT_CONTROL && !wordpiece)
            continue;
        if (tk_strmap_put(&tok->raw_map, tok->raw, i))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    /* added tokens: control, user-defined and unknown */
    for (int i = 0; i < n; i++) {
        int t = (*types)[i];
        if (t != TT_CONTROL && t != TT_USER && t != TT_UNKNOWN)
            continue;
        size_t l;
        const char *s = tk_strtab_get(&tok->strs, i, &l);
        if (!s || l == 0)
            continue;
        tk_added *v = rp_realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof(tk_added));
        if (!v)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        tok->added = v;
        tk_added *a = &tok->added[tok->n_added];
        memset(a, 0, sizeof(*a));
        a->content = rp_strndup(s, l);
        if (!a->content)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        a->id = i;
        a->len = l;
        a->special = t != TT_USER;
        tok->n_added++;
    }
    return RP_OK;
}

rp_status tk_load_gguf(rp_tokenizer *tok, const char *path, rp_err *err)
{
    rp_gguf *g;
    rp_status st = rp_gguf_open(path, &g, err);
    if (st)
        return st;
    const char *model;
    size_t model_len;
    int32_t *types = NULL;
    st = rp_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len, err);
    if (st)
        goto done;
    char mname[32] = {0};
    memcpy(mname, model, model_len < sizeof(mname) - 1 ? model_len : sizeof(mname) - 1);
    const char *pre = "default";
    size_t pre_len = 7;
    if (rp_gguf_find(g, "tokenizer.ggml.pre") >= 0)
        rp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len, NULL);
    tok->unk_id = get_id(g, "tokenizer.ggml.unknown_token_id");
    tok->bos_id = get_id(g, "tokenizer.ggml.bos_token_id");
    tok->eos_id = get_id(g, "tokenizer.ggml.eos_token_id");

    if (!strcmp(mname, "gpt2")) {
        tok->model = TK_MODEL_BPE;
        tok->byte_level = 1;
        const pre_def *d = NULL;
        for (size_t i = 0; i < RP_ARRAY_LEN(k_pres); i++)
            if (name_in(k_pres[i].names, pre, pre_len))
                d = &k_pres[i];
        if (!d) {
            st = rp_err_set(err, RP_ERR_UNSUPPORTED, "GGUF pre-tokenizer '%.*s' is not known",
                            (int)(pre_len > 64 ? 64 : pre_len), pre);
            goto done;
        }
        tok->ignore_merges = d == &k_pres[0]; /* Llama 3's tokenizer.json sets ignore_merges */
        if ((st = load_vocab(tok, g, 0, &types, err)) || (st = make_pre_seq(tok, d, err)) ||
            (st = load_merges(tok, g, err)))
            goto done;
        tok->dec = rp_calloc(1, sizeof(tk_dec));
        if (!tok->dec) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        tok->dec->kind = TK_DEC_BYTELEVEL;
    } else if (!strcmp(mname, "llama") || !strcmp(mname, "gemma4")) {
        int gemma4 = !strcmp(mname, "gemma4");
        tok->model = TK_MODEL_BPE;
        tok->byte_fallback = 1;
        tok->fuse_unk = 1;
        int prefix = get_flag(g, "tokenizer.ggml.add_space_prefix", !gemma4);
        if ((st = load_vocab(tok, g, 0, &types, err)))
            goto done;
        if (gemma4 && rp_gguf_find(g, "tokenizer.ggml.merges") >= 0)
            st = load_merges(tok, g, err);
        else
            st = spm_merges(tok, g, rp_gguf_find(g, "tokenizer.ggml.scores"), types, err);
        if (st || (st = set_norm_spm(tok, prefix, err)) || (st = set_dec_spm(tok, prefix, err)))
            goto done;
    } else if (!strcmp(mname, "bert")) {
        tok->model = TK_MODEL_WORDPIECE;
        tok->wp_max_chars = 100;
        tok->cont_prefix = rp_strdup("##");
        tok->cont_prefix_len = 2;
        if ((st = load_vocab(tok, g, 1, &types, err)))
            goto done;
        tok->norm = rp_calloc(1, sizeof(tk_norm));
        tok->pre = rp_calloc(1, sizeof(tk_pre));
        tok->dec = rp_calloc(1, sizeof(tk_dec));
        if (!tok->norm || !tok->pre || !tok->dec || !tok->cont_prefix) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        tok->norm->kind = TK_NORM_BERT;
        tok->norm->bert_clean = tok->norm->bert_chinese = 1;
        tok->norm->bert_lower = tok->norm->bert_strip_accents = 1;
        tok->pre->kind = TK_PRE_BERT;
        tok->dec->kind = TK_DEC_WORDPIECE;
        tok->dec->prefix = rp_strdup("##");
        tok->dec->cleanup = 1;
        int32_t cls = get_id(g, "tokenizer.ggml.cls_token_id");
        int32_t sep = get_id(g, "tokenizer.ggml.seperator_token_id");
        if (cls >= 0 && sep >= 0 &&
            (post_push(tok, 0, cls) || post_push(tok, 1, 0) || post_push(tok, 0, sep))) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
    } else {
        st = rp_err_set(err, RP_ERR_UNSUPPORTED, "GGUF tokenizer model '%s' is not supported",
                        mname);
        goto done;
    }
    if (tok->model == TK_MODEL_BPE) {
        int add_bos = get_flag(g, "tokenizer.ggml.add_bos_token", 0);
        int add_eos = get_flag(g, "tokenizer.ggml.add_eos_token", 0);
        if ((add_bos && tok->bos_id >= 0 && post_push(tok, 0, tok->bos_id)) ||
            ((add_bos || add_eos) && post_push(tok, 1, 0)) ||
            (add_eos && tok->eos_id >= 0 && post_push(tok, 0, tok->eos_id))) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if (rp_gguf_find(g, "tokenizer.chat_template") >= 0) {
        char *t;
        if (!rp_gguf_get_strdup(g, "tokenizer.chat_template", &t, NULL)) {
            char **nn = rp_alloc(sizeof(char *)), **tt = rp_alloc(sizeof(char *));
            if (!nn || !tt || !(nn[0] = rp_strdup("default"))) {
                rp_free(nn), rp_free(tt), rp_free(t);
                st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                goto done;
            }
            tt[0] = t;
            tok->tmpl_names = nn;
            tok->tmpl_texts = tt;
            tok->n_tmpl = 1;
        }
    }
done:
    rp_free(types);
    rp_gguf_close(g);
    return st;
}
