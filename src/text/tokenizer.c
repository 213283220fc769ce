/* text/tokenizer.c - loading (tokenizer.json + tokenizer_config.json, or a model directory;
 * .gguf files go to tok_gguf.c), the encode pipeline and the accessors of tokenizer.h.
 *
 * Encode follows HF `tokenizers` TokenizerImpl::encode: added tokens are matched on the raw
 * text (leftmost-longest, with their lstrip/rstrip/single_word flags), the rest of the text
 * is normalized, normalized added tokens are matched on that, and what remains goes through
 * the pre-tokenizer and the model. The post-processor runs only with add_special.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "text/tok_impl.h"
#include "text/tok_json.h"
#include "text/unicode.h"

#define GPT2_REGEX                                                                             \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---- added-token trie ------------------------------------------------------------------ */

/* The trie is built by inserting tokens into a node array, with a temporary hash of
 * (node, byte) -> child; the edges are then sorted into contiguous per-node runs that
 * lookups binary-search. */
typedef struct tedge {
    int32_t parent;
    uint8_t byte;
    int32_t child;
} tedge;

static int tedge_cmp(const void *a, const void *b)
{
    const tedge *x = a, *y = b;
    if (x->parent != y->parent)
        return x->parent < y->parent ? -1 : 1;
    return (int)x->byte - (int)y->byte;
}

static int32_t trie_child(const tk_trie *t, int32_t node, uint8_t b)
{
    const tk_trie_node *nd = &t->nodes[node];
    int lo = 0, hi = nd->n_children - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uint8_t eb = t->edge_byte[nd->first_child + mid];
        if (eb == b)
            return t->edge_node[nd->first_child + mid];
        if (eb < b)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

rp_status tk_trie_build(tk_trie *t, const rp_tokenizer *tok, int normalized)
{
    memset(t, 0, sizeof(*t));
    size_t total = 1;
    for (int i = 0; i < tok->n_added; i++)
        if (!!tok->added[i].normalized == !!normalized)
            total += tok->added[i].len;
    t->nodes = rp_calloc(total, sizeof(tk_trie_node));
    tedge *edges = rp_alloc(total * sizeof(tedge));
    t->edge_byte = rp_alloc(total);
    t->edge_node = rp_alloc(total * sizeof(int32_t));
    if (!t->nodes || !edges || !t->edge_byte || !t->edge_node) {
        rp_free(edges);
        return RP_ERR_NOMEM;
    }
    t->n_nodes = 1;
    t->nodes[0].added = -1;
    int n_edges = 0;
    uint32_t hcap = 64;
    while (hcap < total * 2)
        hcap *= 2;
    uint64_t *hk = rp_alloc(hcap * sizeof(uint64_t));
    int32_t *hv = rp_alloc(hcap * sizeof(int32_t));
    if (!hk || !hv) {
        rp_free(edges), rp_free(hk), rp_free(hv);
        return RP_ERR_NOMEM;
    }
    memset(hk, 0xff, hcap * sizeof(uint64_t));
    for (int i = 0; i < tok->n_added; i++) {
        const tk_added *a = &tok->added[i];
        if (!!a->normalized != !!normalized || a->len == 0)
            continue;
        int32_t node = 0;
        for (size_t k = 0; k < a->len; k++) {
            uint8_t b = (uint8_t)a->content[k];
            uint64_t key = ((uint64_t)(uint32_t)node << 8) | b;
            uint32_t j = (uint32_t)(key * 0x9E3779B97F4A7C15ULL >> 32) & (hcap - 1);
            while (hk[j] != UINT64_MAX && hk[j] != key)
                j = (j + 1) & (hcap - 1);
            if (hk[j] == key) {
                node = hv[j];
            } else {
                int32_t nn = t->n_nodes++;
                t->nodes[nn].added = -1;
                edges[n_edges++] = (tedge){node, b, nn};
                hk[j] = key;
                hv[j] = nn;
                node = nn;
            }
        }
        if (t->nodes[node].added < 0)
            t->nodes[node].added = i;
        t->first[(uint8_t)a->content[0]] = 1;
    }
    rp_free(hk);
    rp_free(hv);
    t->only_first = -1;
    for (int b = 0, n_first = 0; b < 256; b++)
        if (t->first[b])
            t->only_first = ++n_first == 1 ? b : -1;
    qsort(edges, (size_t)n_edges, sizeof(tedge), tedge_cmp);
    for (int i = 0; i < t->n_nodes; i++)
        t->nodes[i].first_child = -1;
    for (int i = 0; i < n_edges; i++) {
        tk_trie_node *p = &t->nodes[edges[i].parent];
        if (p->first_child < 0)
            p->first_child = i;
        p->n_children++;
        t->edge_byte[i] = edges[i].byte;
        t->edge_node[i] = edges[i].child;
    }
    rp_free(edges);
    return RP_OK;
}

void tk_trie_free(tk_trie *t)
{
    rp_free(t->nodes);
    rp_free(t->edge_byte);
    rp_free(t->edge_node);
    memset(t, 0, sizeof(*t));
}

/* Longest added token starting at s[i]; returns its index or -1, and its end in *end. */
static int trie_longest(const tk_trie *t, const char *s, size_t n, size_t i, size_t *end)
{
    int best = -1;
    int32_t node = 0;
    for (size_t k = i; k < n; k++) {
        node = trie_child(t, node, (uint8_t)s[k]);
        if (node < 0)
            break;
        if (t->nodes[node].added >= 0) {
            best = t->nodes[node].added;
            *end = k + 1;
        }
    }
    return best;
}

static int is_word_char(uint32_t cp)
{
    return cp == '_' || rp_uni_is_alnum(cp);
}

static int ends_with_word(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    size_t k = n - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80)
        k--;
    uint32_t cp;
    return rp_utf8_decode(s + k, n - k, &cp) && is_word_char(cp);
}

static int starts_with_word(const char *s, size_t n)
{
    uint32_t cp;
    return n > 0 && rp_utf8_decode(s, n, &cp) && is_word_char(cp);
}

/* A split of a text: an added token or a text range. */
typedef struct tk_seg {
    int32_t id; /* -1: text */
    size_t a, b;
} tk_seg;

typedef struct tk_segs {
    tk_seg *v;
    int n, cap;
} tk_segs;

static rp_status segs_push(tk_segs *s, int32_t id, size_t a, size_t b)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        tk_seg *v = rp_realloc(s->v, (size_t)cap * sizeof(tk_seg));
        if (!v)
            return RP_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tk_seg){id, a, b};
    return RP_OK;
}

/* HF AddedVocabulary::find_matches. */
static rp_status split_added(const rp_tokenizer *tok, const tk_trie *t, const char *s, size_t n,
                             tk_segs *out)
{
    out->n = 0;
    size_t start_offset = 0, i = 0;
    rp_status st = RP_OK;
    if (t->n_nodes > 1) {
        while (i < n && !st) {
            if (!t->first[(uint8_t)s[i]]) {
                if (t->only_first >= 0) { /* one possible first byte: memchr to it */
                    const char *f = memchr(s + i, t->only_first, n - i);
                    i = f ? (size_t)(f - s) : n;
                } else {
                    i++;
                }
                continue;
            }
            size_t stop;
            int ai = trie_longest(t, s, n, i, &stop);
            if (ai < 0) {
                i++;
                continue;
            }
            const tk_added *a = &tok->added[ai];
            size_t start = i;
            if (a->single_word) {
                int start_space = start == 0 || !ends_with_word(s, start);
                int stop_space = stop == n || !starts_with_word(s + stop, n - stop);
                if (!start_space || !stop_space) {
                    i = stop;
                    continue;
                }
            }
            if (a->lstrip) {
                size_t ns = start;
                while (ns > 0) {
                    size_t k = ns - 1;
                    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80)
                        k--;
                    uint32_t cp;
                    if (!rp_utf8_decode(s + k, ns - k, &cp) || !rp_uni_is_space(cp))
                        break;
                    ns = k;
                }
                start = ns > start_offset ? ns : start_offset;
            }
            if (a->rstrip) {
                while (stop < n) {
                    uint32_t cp;
                    int l = rp_utf8_decode(s + stop, n - stop, &cp);
                    if (!l || !rp_uni_is_space(cp))
                        break;
                    stop += (size_t)l;
                }
            }
            if (start_offset < start)
                st = segs_push(out, -1, start_offset, start);
            if (!st)
                st = segs_push(out, a->id, start, stop);
            start_offset = stop;
            i = stop;
        }
    }
    if (!st && start_offset < n)
        st = segs_push(out, -1, start_offset, n);
    return st;
}

/* ---- encode ---------------------------------------------------------------------------- */

static rp_status encode_text(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                             int section_first, tk_ids *out)
{
    if (tok->pre_fast) {
        /* pieces go to the model in batches (tk_model_encode_pieces) */
        tk_piece v[64];
        int nv = 0;
        size_t pos = 0, ms, me;
        rp_status st = RP_OK;
        while (!st && tk_pattern_next(tok->pre_fast, sc->md, s, n, pos, &ms, &me)) {
            if (ms > pos)
                v[nv++] = (tk_piece){(uint32_t)pos, (uint32_t)(ms - pos)};
            v[nv++] = (tk_piece){(uint32_t)ms, (uint32_t)(me - ms)};
            pos = me;
            if (nv >= 62) {
                st = tk_model_encode_pieces(tok, sc, s, v, nv, out);
                nv = 0;
            }
        }
        if (!st && pos < n)
            v[nv++] = (tk_piece){(uint32_t)pos, (uint32_t)(n - pos)};
        if (!st && nv)
            st = tk_model_encode_pieces(tok, sc, s, v, nv, out);
        return st;
    }
    rp_buf_reset(&sc->store);
    rp_status st = rp_buf_append(&sc->store, s, n);
    if (st)
        return st;
    sc->a.n = 0;
    if (n == 0)
        return RP_OK;
    if (sc->a.cap == 0) {
        sc->a.v = rp_alloc(256 * sizeof(tk_piece));
        if (!sc->a.v)
            return RP_ERR_NOMEM;
        sc->a.cap = 256;
    }
    sc->a.v[0] = (tk_piece){0, (uint32_t)n};
    sc->a.n = 1;
    if ((st = tk_pretokenize(tok->pre, sc, section_first)))
        return st;
    return tk_model_encode_pieces(tok, sc, sc->store.data, sc->a.v, sc->a.n, out);
}

static rp_status encode_section(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                                int section_first, tk_ids *out)
{
    if (!tok->norm)
        return encode_text(tok, sc, s, n, section_first, out);
    rp_buf nb = {0};
    rp_status st = tk_normalize(tok->norm, s, n, &nb);
    if (st) {
        rp_buf_deinit(&nb);
        return st;
    }
    const char *ns = nb.data ? nb.data : "";
    if (tok->trie_norm.n_nodes > 1) {
        tk_segs segs = {0};
        st = split_added(tok, &tok->trie_norm, ns, nb.len, &segs);
        for (int i = 0; !st && i < segs.n; i++) {
            if (segs.v[i].id >= 0)
                st = tk_ids_push(out, segs.v[i].id);
            else
                st = encode_text(tok, sc, ns + segs.v[i].a, segs.v[i].b - segs.v[i].a,
                                 section_first && segs.v[i].a == 0, out);
        }
        rp_free(segs.v);
    } else {
        st = encode_text(tok, sc, ns, nb.len, section_first, out);
    }
    rp_buf_deinit(&nb);
    return st;
}

rp_status rp_tokenizer_encode(const rp_tokenizer *tok, const char *text, size_t len,
                              int add_special, int32_t **out_ids, int *out_n, rp_err *err)
{
    *out_ids = NULL;
    *out_n = 0;
    if (!text && len)
        return rp_err_set(err, RP_ERR_INVALID, "encode: NULL text");
    if (len > (size_t)INT32_MAX / 2)
        return rp_err_set(err, RP_ERR_LIMIT, "encode: text of %zu bytes is too long", len);
    if (!rp_utf8_valid(text, len))
        return rp_err_set(err, RP_ERR_INVALID, "encode: text is not valid UTF-8");
    tk_scratch sc = {0};
    tk_ids ids = {0};
    tk_segs segs = {0};
    rp_status st = RP_OK;
    sc.md = pcre2_match_data_create(32, NULL);
    if (!sc.md)
        st = RP_ERR_NOMEM;
    if (!st)
        st = split_added(tok, &tok->trie_raw, text ? text : "", len, &segs);
    for (int i = 0; !st && i < segs.n; i++) {
        if (segs.v[i].id >= 0)
            st = tk_ids_push(&ids, segs.v[i].id);
        else
            st = encode_section(tok, &sc, text + segs.v[i].a, segs.v[i].b - segs.v[i].a,
                                segs.v[i].a == 0, &ids);
    }
    rp_free(segs.v);
    tk_scratch_free(&sc);
    if (!st && add_special && tok->n_post) {
        tk_ids full = {0};
        for (int i = 0; !st && i < tok->n_post; i++) {
            const tk_post_item *it = &tok->post[i];
            if (it->is_seq)
                for (int k = 0; !st && k < ids.n; k++)
                    st = tk_ids_push(&full, ids.v[k]);
            else
                for (int k = 0; !st && k < it->n_ids; k++)
                    st = tk_ids_push(&full, it->ids[k]);
        }
        rp_free(ids.v);
        ids = full;
    }
    if (st) {
        rp_free(ids.v);
        if (st == RP_ERR_NOMEM)
            return rp_err_set(err, st, "encode: out of memory");
        return rp_err_set(err, st, "encode failed (%s)", rp_status_str(st));
    }
    if (!ids.v) {
        ids.v = rp_alloc(sizeof(int32_t));
        if (!ids.v)
            return rp_err_set(err, RP_ERR_NOMEM, "encode: out of memory");
    }
    *out_ids = ids.v;
    *out_n = ids.n;
    return RP_OK;
}

/* ---- JSON loading ---------------------------------------------------------------------- */

static char *jdup(json_t *v)
{
    const char *s = json_string_value(v);
    return s ? rp_strndup(s, json_string_length(v)) : NULL;
}

static int jbool(json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return dflt;
    return json_is_true(v);
}

static rp_status load_pattern(json_t *pat, tk_pattern *p, rp_err *err)
{
    json_t *s = json_object_get(pat, "String");
    if (json_is_string(s)) {
        p->lit = jdup(s);
        p->lit_len = json_string_length(s);
        return p->lit ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    json_t *r = json_object_get(pat, "Regex");
    if (json_is_string(r))
        return tk_pattern_compile(p, json_string_value(r), err);
    return rp_err_set(err, RP_ERR_INVALID, "pattern is neither String nor Regex");
}

static rp_status load_norm(json_t *j, tk_norm *n, rp_err *err)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return rp_err_set(err, RP_ERR_INVALID, "normalizer without a type");
    if (!strcmp(type, "NFC"))
        n->kind = TK_NORM_NFC;
    else if (!strcmp(type, "NFD"))
        n->kind = TK_NORM_NFD;
    else if (!strcmp(type, "NFKC"))
        n->kind = TK_NORM_NFKC;
    else if (!strcmp(type, "NFKD"))
        n->kind = TK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase"))
        n->kind = TK_NORM_LOWER;
    else if (!strcmp(type, "Strip")) {
        n->kind = TK_NORM_STRIP;
        n->left = jbool(j, "strip_left", 1);
        n->right = jbool(j, "strip_right", 1);
    } else if (!strcmp(type, "Replace")) {
        n->kind = TK_NORM_REPLACE;
        json_t *c = json_object_get(j, "content");
        n->content = jdup(c);
        n->content_len = json_string_length(c);
        if (!n->content)
            return rp_err_set(err, RP_ERR_INVALID, "Replace normalizer without content");
        return load_pattern(json_object_get(j, "pattern"), &n->pat, err);
    } else if (!strcmp(type, "Prepend")) {
        n->kind = TK_NORM_PREPEND;
        json_t *c = json_object_get(j, "prepend");
        n->content = jdup(c);
        n->content_len = json_string_length(c);
        if (!n->content)
            return rp_err_set(err, RP_ERR_INVALID, "Prepend normalizer without prepend");
    } else if (!strcmp(type, "BertNormalizer")) {
        n->kind = TK_NORM_BERT;
        n->bert_clean = jbool(j, "clean_text", 1);
        n->bert_chinese = jbool(j, "handle_chinese_chars", 1);
        n->bert_lower = jbool(j, "lowercase", 1);
        n->bert_strip_accents = jbool(j, "strip_accents", n->bert_lower);
    } else if (!strcmp(type, "Sequence")) {
        n->kind = TK_NORM_SEQ;
        json_t *arr = json_object_get(j, "normalizers");
        size_t cnt = json_array_size(arr);
        n->sub = rp_calloc(cnt ? cnt : 1, sizeof(tk_norm));
        if (!n->sub)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < cnt; i++) {
            n->n_sub = (int)i + 1;
            rp_status st = load_norm(json_array_get(arr, i), &n->sub[i], err);
            if (st)
                return st;
        }
    } else {
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "normalizer type '%s' is not supported",
                          type);
    }
    return RP_OK;
}

static rp_status parse_behavior(json_t *j, tk_split_behavior *b, rp_err *err)
{
    const char *s = json_string_value(json_object_get(j, "behavior"));
    if (!s || !strcmp(s, "Isolated"))
        *b = TK_SPLIT_ISOLATED;
    else if (!strcmp(s, "Removed"))
        *b = TK_SPLIT_REMOVED;
    else if (!strcmp(s, "MergedWithPrevious"))
        *b = TK_SPLIT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext"))
        *b = TK_SPLIT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous"))
        *b = TK_SPLIT_CONTIGUOUS;
    else
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "split behavior '%s'", s);
    return RP_OK;
}

static rp_status parse_metaspace(json_t *j, char *repl, int *repl_len, tk_prepend *prepend,
                                 rp_err *err)
{
    const char *r = json_string_value(json_object_get(j, "replacement"));
    if (!r)
        r = "\xe2\x96\x81";
    size_t l = strlen(r);
    if (l == 0 || l > 7)
        return rp_err_set(err, RP_ERR_INVALID, "Metaspace replacement '%s'", r);
    memcpy(repl, r, l);
    *repl_len = (int)l;
    const char *ps = json_string_value(json_object_get(j, "prepend_scheme"));
    if (ps) {
        if (!strcmp(ps, "always"))
            *prepend = TK_PREPEND_ALWAYS;
        else if (!strcmp(ps, "first"))
            *prepend = TK_PREPEND_FIRST;
        else
            *prepend = TK_PREPEND_NEVER;
    } else {
        *prepend = jbool(j, "add_prefix_space", 1) ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    }
    return RP_OK;
}

static rp_status load_pre(json_t *j, tk_pre *p, rp_err *err)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return rp_err_set(err, RP_ERR_INVALID, "pre_tokenizer without a type");
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TK_PRE_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", 1);
        p->use_regex = jbool(j, "use_regex", 1);
        if (p->use_regex)
            return tk_pattern_compile(&p->pat, GPT2_REGEX, err);
    } else if (!strcmp(type, "Split")) {
        p->kind = TK_PRE_SPLIT;
        p->invert = jbool(j, "invert", 0);
        rp_status st = parse_behavior(j, &p->behavior, err);
        if (st)
            return st;
        return load_pattern(json_object_get(j, "pattern"), &p->pat, err);
    } else if (!strcmp(type, "Digits")) {
        p->kind = TK_PRE_DIGITS;
        p->individual = jbool(j, "individual_digits", 0);
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = TK_PRE_METASPACE;
        p->split = jbool(j, "split", 1);
        return parse_metaspace(j, p->repl, &p->repl_len, &p->prepend, err);
    } else if (!strcmp(type, "Whitespace")) {
        p->kind = TK_PRE_WHITESPACE;
        return tk_pattern_compile(&p->pat, "\\w+|[^\\w\\s]+", err);
    } else if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = TK_PRE_WSSPLIT;
    } else if (!strcmp(type, "Punctuation")) {
        p->kind = TK_PRE_PUNCT;
        return parse_behavior(j, &p->behavior, err);
    } else if (!strcmp(type, "BertPreTokenizer")) {
        p->kind = TK_PRE_BERT;
    } else if (!strcmp(type, "Sequence")) {
        p->kind = TK_PRE_SEQ;
        json_t *arr = json_object_get(j, "pretokenizers");
        size_t cnt = json_array_size(arr);
        p->sub = rp_calloc(cnt ? cnt : 1, sizeof(tk_pre));
        if (!p->sub)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < cnt; i++) {
            p->n_sub = (int)i + 1;
            rp_status st = load_pre(json_array_get(arr, i), &p->sub[i], err);
            if (st)
                return st;
        }
    } else {
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "pre_tokenizer type '%s' is not supported",
                          type);
    }
    return RP_OK;
}

static rp_status load_dec(json_t *j, tk_dec *d, rp_err *err)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return rp_err_set(err, RP_ERR_INVALID, "decoder without a type");
    if (!strcmp(type, "ByteLevel"))
        d->kind = TK_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback"))
        d->kind = TK_DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse"))
        d->kind = TK_DEC_FUSE;
    else if (!strcmp(type, "Strip")) {
        d->kind = TK_DEC_STRIP;
        json_t *c = json_object_get(j, "content");
        d->content = jdup(c);
        d->content_len = json_string_length(c);
        d->start = (int)json_integer_value(json_object_get(j, "start"));
        d->stop = (int)json_integer_value(json_object_get(j, "stop"));
        if (!d->content)
            return rp_err_set(err, RP_ERR_INVALID, "Strip decoder without content");
    } else if (!strcmp(type, "Replace")) {
        d->kind = TK_DEC_REPLACE;
        json_t *c = json_object_get(j, "content");
        d->content = jdup(c);
        d->content_len = json_string_length(c);
        if (!d->content)
            return rp_err_set(err, RP_ERR_INVALID, "Replace decoder without content");
        return load_pattern(json_object_get(j, "pattern"), &d->pat, err);
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TK_DEC_METASPACE;
        return parse_metaspace(j, d->repl, &d->repl_len, &d->prepend, err);
    } else if (!strcmp(type, "WordPiece")) {
        d->kind = TK_DEC_WORDPIECE;
        const char *pf = json_string_value(json_object_get(j, "prefix"));
        d->prefix = rp_strdup(pf ? pf : "##");
        d->cleanup = jbool(j, "cleanup", 1);
        if (!d->prefix)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    } else if (!strcmp(type, "Sequence")) {
        d->kind = TK_DEC_SEQ;
        json_t *arr = json_object_get(j, "decoders");
        size_t cnt = json_array_size(arr);
        d->sub = rp_calloc(cnt ? cnt : 1, sizeof(tk_dec));
        if (!d->sub)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < cnt; i++) {
            d->n_sub = (int)i + 1;
            rp_status st = load_dec(json_array_get(arr, i), &d->sub[i], err);
            if (st)
                return st;
        }
    } else {
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "decoder type '%s' is not supported", type);
    }
    return RP_OK;
}

static rp_status post_add(rp_tokenizer *tok, int is_seq, const int32_t *ids, int n)
{
    tk_post_item *v = rp_realloc(tok->post, (size_t)(tok->n_post + 1) * sizeof(tk_post_item));
    if (!v)
        return RP_ERR_NOMEM;
    tok->post = v;
    tk_post_item *it = &tok->post[tok->n_post++];
    memset(it, 0, sizeof(*it));
    it->is_seq = is_seq;
    if (n) {
        it->ids = rp_alloc((size_t)n * sizeof(int32_t));
        if (!it->ids)
            return RP_ERR_NOMEM;
        memcpy(it->ids, ids, (size_t)n * sizeof(int32_t));
        it->n_ids = n;
    }
    return RP_OK;
}

static rp_status load_post(rp_tokenizer *tok, json_t *j, rp_err *err)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        return rp_err_set(err, RP_ERR_INVALID, "post_processor without a type");
    if (!strcmp(type, "ByteLevel"))
        return RP_OK;
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            rp_status st = load_post(tok, json_array_get(arr, i), err);
            if (st)
                return st;
        }
        return RP_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        if (tok->n_post)
            return rp_err_set(err, RP_ERR_UNSUPPORTED, "two TemplateProcessing post-processors");
        json_t *single = json_object_get(j, "single");
        json_t *specials = json_object_get(j, "special_tokens");
        for (size_t i = 0; i < json_array_size(single); i++) {
            json_t *it = json_array_get(single, i);
            json_t *sp = json_object_get(it, "SpecialToken");
            rp_status st;
            if (sp) {
                const char *name = json_string_value(json_object_get(sp, "id"));
                json_t *def = name ? json_object_get(specials, name) : NULL;
                json_t *ids = json_object_get(def, "ids");
                int n = (int)json_array_size(ids);
                int32_t tmp[64];
                if (!def || n > 64)
                    return rp_err_set(err, RP_ERR_INVALID,
                                      "TemplateProcessing: special token '%s' undefined",
                                      name ? name : "?");
                for (int k = 0; k < n; k++)
                    tmp[k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
                st = post_add(tok, 0, tmp, n);
            } else {
                st = post_add(tok, 1, NULL, 0);
            }
            if (st)
                return rp_err_set(err, st, "out of memory");
        }
        return RP_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        json_t *cls = json_object_get(j, "cls"), *sep = json_object_get(j, "sep");
        int32_t c = (int32_t)json_integer_value(json_array_get(cls, 1));
        int32_t s = (int32_t)json_integer_value(json_array_get(sep, 1));
        if (post_add(tok, 0, &c, 1) || post_add(tok, 1, NULL, 0) || post_add(tok, 0, &s, 1))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        return RP_OK;
    }
    return rp_err_set(err, RP_ERR_UNSUPPORTED, "post_processor type '%s' is not supported", type);
}

/* Converts a byte-level string back to raw bytes; 0 when a character is outside the
 * alphabet (the caller keeps the string as is). */
static int bytelevel_to_raw(const char *s, size_t n, rp_buf *out)
{
    rp_buf_reset(out);
    if (rp_buf_reserve(out, n + 1))
        return 0;
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] >= 0x21 && (uint8_t)s[i] <= 0x7E) { /* printable ASCII: itself */
            out->data[out->len++] = s[i++];
            continue;
        }
        uint32_t cp;
        int l = rp_utf8_decode(s + i, n - i, &cp);
        int b = l ? rp_bytelevel_byte(cp) : -1;
        if (b < 0)
            return 0;
        if (rp_buf_putc(out, (char)b))
            return 0;
        i += (size_t)l;
    }
    return 1;
}

static rp_status vocab_cb(void *ud, const char *key, size_t n, long long id)
{
    rp_tokenizer *tok = ud;
    if (id < 0 || id > 16 * 1024 * 1024)
        return RP_ERR_INVALID;
    if (tk_strtab_set(&tok->strs, (int)id, key, n))
        return RP_ERR_NOMEM;
    if (id >= tok->n_vocab)
        tok->n_vocab = (int)id + 1;
    return RP_OK;
}

/* Merges are resolved in batches: the three strings of each merge (a, b and a+b) are
 * hashed and their map slots prefetched before any is looked up, so the lookups' cache
 * misses overlap. The merged token is usually the one after the previous merge's (vocabularies
 * are written in merge order): that guess is checked first and saves its lookup. */
#define MERGE_BATCH 64

typedef struct merge_item {
    uint32_t off, al, bl; /* a and b, adjacent in the batch buffer: a+b is one string */
    uint32_t ha, hb, hc;
    int32_t im; /* the merged token when the guess was right, else -1 */
} merge_item;

typedef struct merge_ctx {
    rp_tokenizer *tok;
    rp_buf cat;
    int32_t rank;
    rp_buf batch;
    merge_item items[MERGE_BATCH];
    int n_items;
    int32_t last_im;
    int no_guess;
} merge_ctx;

static rp_status merge_add(merge_ctx *mc, int32_t ia, int32_t ib, int32_t im)
{
    if (ia < 0 || ib < 0 || im < 0)
        return RP_ERR_INVALID;
    if (tk_mergemap_put(&mc->tok->merges, ia, ib, mc->rank++, im))
        return RP_ERR_NOMEM;
    mc->last_im = im;
    return RP_OK;
}

static rp_status merge_flush(merge_ctx *mc)
{
    rp_tokenizer *tok = mc->tok;
    const tk_strmap *m = &tok->str_map;
    const tk_strtab *t = &tok->strs;
    int32_t guess = mc->last_im;
    for (int i = 0; i < mc->n_items; i++) {
        merge_item *it = &mc->items[i];
        const char *a = (mc->batch.data ? mc->batch.data : "") + it->off, *b = a + it->al;
        size_t cl = (size_t)it->al + it->bl, gl;
        const char *g = ++guess >= 0 && !mc->no_guess ? tk_strtab_get(t, guess, &gl) : NULL;
        it->im = g && gl == cl && memcmp(g, a, cl) == 0 ? guess : -1;
        it->ha = tk_strmap_hash(a, it->al);
        it->hb = tk_strmap_hash(b, it->bl);
        tk_strmap_prefetch(m, it->ha);
        tk_strmap_prefetch(m, it->hb);
        if (it->im < 0) {
            it->hc = tk_strmap_hash(a, cl);
            tk_strmap_prefetch(m, it->hc);
        }
    }
    int32_t ia[MERGE_BATCH], ib[MERGE_BATCH];
    for (int i = 0; i < mc->n_items; i++) {
        merge_item *it = &mc->items[i];
        const char *a = (mc->batch.data ? mc->batch.data : "") + it->off, *b = a + it->al;
        ia[i] = tk_strmap_get_h(m, t, a, it->al, it->ha);
        ib[i] = tk_strmap_get_h(m, t, b, it->bl, it->hb);
        if (it->im < 0)
            it->im = tk_strmap_get_h(m, t, a, (size_t)it->al + it->bl, it->hc);
        tk_mergemap_prefetch(&tok->merges, ia[i], ib[i]);
    }
    rp_status st = RP_OK;
    for (int i = 0; i < mc->n_items && !st; i++)
        st = merge_add(mc, ia[i], ib[i], mc->items[i].im);
    mc->n_items = 0;
    rp_buf_reset(&mc->batch);
    return st;
}

static rp_status merge_cb(void *ud, const char *a, size_t al, const char *b, size_t bl)
{
    merge_ctx *mc = ud;
    rp_tokenizer *tok = mc->tok;
    if (!tok->cont_prefix_len && al + bl < UINT32_MAX / 4) {
        merge_item *it = &mc->items[mc->n_items++];
        it->off = (uint32_t)mc->batch.len;
        it->al = (uint32_t)al;
        it->bl = (uint32_t)bl;
        if (rp_buf_append(&mc->batch, a, al) || rp_buf_append(&mc->batch, b, bl))
            return RP_ERR_NOMEM;
        return mc->n_items == MERGE_BATCH ? merge_flush(mc) : RP_OK;
    }
    rp_status st = merge_flush(mc);
    if (st)
        return st;
    int32_t ia = tk_strmap_get(&tok->str_map, &tok->strs, a, al);
    int32_t ib = tk_strmap_get(&tok->str_map, &tok->strs, b, bl);
    rp_buf_reset(&mc->cat);
    if (rp_buf_append(&mc->cat, a, al) || rp_buf_append(&mc->cat, b, bl))
        return RP_ERR_NOMEM;
    size_t cl = mc->cat.len;
    /* with a continuing_subword_prefix, the merged token drops b's prefix */
    if (tok->cont_prefix_len && bl >= tok->cont_prefix_len &&
        memcmp(b, tok->cont_prefix, tok->cont_prefix_len) == 0) {
        memmove(mc->cat.data + al, mc->cat.data + al + tok->cont_prefix_len,
                bl - tok->cont_prefix_len);
        cl -= tok->cont_prefix_len;
    }
    int32_t im = tk_strmap_get(&tok->str_map, &tok->strs, mc->cat.data, cl);
    return merge_add(mc, ia, ib, im);
}

/* model.vocab and model.merges are parsed in the pass that finds them (tk_json_find_model_parts):
 * vocab entries go to the string table at once, merges are kept as references (into the
 * file, or into `arena` for the few with escapes) until the vocabulary's map exists. */
typedef struct merge_ref {
    uint64_t a, b; /* offset << 1 | in_arena */
    uint32_t al, bl;
} merge_ref;

typedef struct parts_ctx {
    rp_tokenizer *tok;
    const char *file;
    size_t file_n;
    size_t n_vocab_entries;
    merge_ref *merges;
    size_t n_merges, cap_merges;
    rp_buf arena;
} parts_ctx;

static rp_status parts_vocab_cb(void *ud, const char *key, size_t n, long long id)
{
    parts_ctx *pc = ud;
    pc->n_vocab_entries++;
    return vocab_cb(pc->tok, key, n, id);
}

static rp_status parts_ref(parts_ctx *pc, const char *s, size_t n, uint64_t *ref)
{
    uintptr_t p = (uintptr_t)s, f = (uintptr_t)pc->file;
    if (p >= f && p + n <= f + pc->file_n) {
        *ref = (uint64_t)(p - f) << 1;
        return RP_OK;
    }
    *ref = (uint64_t)pc->arena.len << 1 | 1;
    return rp_buf_append(&pc->arena, s, n);
}

static rp_status parts_merge_cb(void *ud, const char *a, size_t al, const char *b, size_t bl)
{
    parts_ctx *pc = ud;
    if (al >= UINT32_MAX || bl >= UINT32_MAX)
        return RP_ERR_LIMIT;
    if (pc->n_merges == pc->cap_merges) {
        size_t cap = pc->cap_merges ? pc->cap_merges * 2 : 65536;
        merge_ref *v = rp_realloc(pc->merges, cap * sizeof(merge_ref));
        if (!v)
            return RP_ERR_NOMEM;
        pc->merges = v;
        pc->cap_merges = cap;
    }
    merge_ref *r = &pc->merges[pc->n_merges];
    rp_status st = parts_ref(pc, a, al, &r->a);
    if (!st)
        st = parts_ref(pc, b, bl, &r->b);
    if (st)
        return st;
    r->al = (uint32_t)al;
    r->bl = (uint32_t)bl;
    pc->n_merges++;
    return RP_OK;
}

static const char *parts_str(const parts_ctx *pc, uint64_t ref)
{
    const char *base = ref & 1 ? pc->arena.data : pc->file;
    return base ? base + (ref >> 1) : "";
}

static size_t count_char(const tk_span *s, char c)
{
    size_t n = 0;
    for (const char *p = s->p, *e = s->p + s->n; (p = memchr(p, c, (size_t)(e - p))); p++)
        n++;
    return n;
}

static rp_status load_model(rp_tokenizer *tok, json_t *m, const tk_span *vocab,
                            const tk_span *merges, const parts_ctx *pc, rp_err *err)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!type) {
        /* old files: infer from the fields */
        type = merges->p ? "BPE" : "WordPiece";
    }
    if (!strcmp(type, "BPE"))
        tok->model = TK_MODEL_BPE;
    else if (!strcmp(type, "WordPiece"))
        tok->model = TK_MODEL_WORDPIECE;
    else
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "model type '%s' is not supported", type);
    if (!vocab->p)
        return rp_err_set(err, RP_ERR_INVALID, "model.vocab is missing or not an object");
    size_t nv = pc ? pc->n_vocab_entries : count_char(vocab, ':');
    if (tk_strmap_init(&tok->str_map, (uint32_t)nv + 1024) ||
        tk_strtab_reserve(&tok->strs, (int)nv + 1024, pc ? 0 : vocab->n))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status st = pc ? RP_OK : tk_json_vocab(vocab, vocab_cb, tok);
    if (st)
        return rp_err_set(err, st, st == RP_ERR_NOMEM ? "out of memory"
                                                      : "model.vocab is malformed");
    int n_dups = 0;
    if (tk_strmap_put_all(&tok->str_map, &tok->strs, &n_dups))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");

    json_t *unk = json_object_get(m, "unk_token");
    tok->unk_id = -1;
    if (json_is_string(unk))
        tok->unk_id = tk_strmap_get(&tok->str_map, &tok->strs, json_string_value(unk),
                                    json_string_length(unk));
    tok->fuse_unk = jbool(m, "fuse_unk", 0);
    tok->byte_fallback = jbool(m, "byte_fallback", 0);
    tok->ignore_merges = jbool(m, "ignore_merges", 0);
    json_t *cp = json_object_get(m, "continuing_subword_prefix");
    if (json_is_string(cp) && json_string_length(cp)) {
        tok->cont_prefix = jdup(cp);
        tok->cont_prefix_len = json_string_length(cp);
    }
    json_t *es = json_object_get(m, "end_of_word_suffix");
    if (json_is_string(es) && json_string_length(es)) {
        tok->eow_suffix = jdup(es);
        tok->eow_suffix_len = json_string_length(es);
    }
    tok->wp_max_chars = 100;
    json_t *mx = json_object_get(m, "max_input_chars_per_word");
    if (json_is_integer(mx))
        tok->wp_max_chars = (int)json_integer_value(mx);

    /* raw table */
    if (tok->byte_level) {
        rp_buf raw = {0};
        if (tk_strtab_reserve(&tok->raw_tab, tok->n_vocab + 1024, tok->strs.pool_len + 4096))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (int i = 0; i < tok->n_vocab; i++) {
            size_t n;
            const char *s = tk_strtab_get(&tok->strs, i, &n);
            if (!s)
                continue;
            rp_status st = bytelevel_to_raw(s, n, &raw)
                               ? tk_strtab_set(&tok->raw_tab, i, raw.data, raw.len)
                               : tk_strtab_set(&tok->raw_tab, i, s, n);
            if (st) {
                rp_buf_deinit(&raw);
                return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            }
        }
        rp_buf_deinit(&raw);
        tok->raw = &tok->raw_tab;
    } else {
        tok->raw = &tok->strs;
    }
    if (tk_strmap_init(&tok->raw_map, (uint32_t)nv))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    if (tk_strmap_put_all(&tok->raw_map, tok->raw, NULL))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");

    /* merges */
    if (tok->model == TK_MODEL_BPE) {
        size_t nm = pc ? pc->n_merges : merges->p ? count_char(merges, ',') + 1 : 0;
        if (tk_mergemap_init(&tok->merges, (uint32_t)nm))
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        merge_ctx *mc = rp_calloc(1, sizeof(merge_ctx));
        if (!mc)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        mc->tok = tok;
        mc->last_im = -2;
        mc->no_guess = n_dups > 0; /* a guess could then differ from the map's (first) id */
        if (pc) {
            for (size_t i = 0; i < pc->n_merges && !st; i++) {
                const merge_ref *r = &pc->merges[i];
                st = merge_cb(mc, parts_str(pc, r->a), r->al, parts_str(pc, r->b), r->bl);
            }
        } else {
            st = merges->p ? tk_json_merges(merges, merge_cb, mc) : RP_OK;
        }
        if (!st)
            st = merge_flush(mc);
        int32_t rank = mc->rank;
        rp_buf_deinit(&mc->cat);
        rp_buf_deinit(&mc->batch);
        rp_free(mc);
        if (st)
            return rp_err_set(err, st, st == RP_ERR_NOMEM ? "out of memory"
                                                          : "merge %d is malformed or refers to "
                                                            "unknown tokens", (int)rank);
    } else {
        const char *pf = json_string_value(json_object_get(m, "continuing_subword_prefix"));
        rp_free(tok->cont_prefix);
        tok->cont_prefix = rp_strdup(pf ? pf : "##");
        tok->cont_prefix_len = strlen(tok->cont_prefix);
    }
    return RP_OK;
}

static rp_status add_added(rp_tokenizer *tok, int32_t id, const char *content, size_t len,
                           int special, int lstrip, int rstrip, int single_word, int normalized)
{
    tk_added *v = rp_realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof(tk_added));
    if (!v)
        return RP_ERR_NOMEM;
    tok->added = v;
    tk_added *a = &tok->added[tok->n_added];
    a->content = rp_strndup(content, len);
    if (!a->content)
        return RP_ERR_NOMEM;
    tok->n_added++;
    a->id = id;
    a->len = len;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    a->single_word = single_word;
    a->normalized = normalized;
    if (id >= tok->n_vocab)
        tok->n_vocab = id + 1;
    if (!tk_strtab_get(&tok->strs, id, NULL)) {
        if (tk_strtab_set(&tok->strs, id, content, len))
            return RP_ERR_NOMEM;
        if (tok->raw == &tok->raw_tab && tk_strtab_set(&tok->raw_tab, id, content, len))
            return RP_ERR_NOMEM;
        if (tk_strmap_put(&tok->str_map, &tok->strs, id))
            return RP_ERR_NOMEM;
    }
    return RP_OK;
}

static void eog_finish(rp_tokenizer *tok);

/* Called by both loaders once tokens, added tokens and flags are set: derived tables. */
rp_status tk_finish_load(rp_tokenizer *tok, rp_err *err)
{
    tok->pre_fast = tk_pre_single_regex(tok->pre);
    tk_spm_split_init(tok);
    if (tok->model == TK_MODEL_BPE && !(tok->shared_cache = tk_shared_cache_new()))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int b = 0; b < 256; b++) {
        tok->byte_ids[b] = -1;
        if (tok->byte_level) {
            char c = (char)b;
            tok->byte_ids[b] = tk_strmap_get(&tok->raw_map, tok->raw, &c, 1);
        } else if (tok->byte_fallback) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            tok->byte_ids[b] = tk_strmap_get(&tok->str_map, &tok->strs, name, 6);
        }
    }
    tok->is_special_tab = rp_calloc((size_t)tok->n_vocab + 1, 1);
    tok->is_added_tab = rp_calloc((size_t)tok->n_vocab + 1, 1);
    if (!tok->is_special_tab || !tok->is_added_tab)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < tok->n_added; i++) {
        int32_t id = tok->added[i].id;
        if (id >= 0 && id < tok->n_vocab) {
            tok->is_added_tab[id] = 1;
            if (tok->added[i].special)
                tok->is_special_tab[id] = 1;
        }
    }
    if (tk_trie_build(&tok->trie_raw, tok, 0) || tk_trie_build(&tok->trie_norm, tok, 1))
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    if (tok->bos_str && tok->bos_id < 0)
        tok->bos_id = rp_tokenizer_token_id(tok, tok->bos_str);
    if (tok->eos_str && tok->eos_id < 0)
        tok->eos_id = rp_tokenizer_token_id(tok, tok->eos_str);
    eog_finish(tok);
    if (tok->bos_id >= 0 && !tok->bos_str) {
        const char *s = rp_tokenizer_token_str(tok, tok->bos_id);
        tok->bos_str = s ? rp_strdup(s) : NULL;
    }
    if (tok->eos_id >= 0 && !tok->eos_str) {
        const char *s = rp_tokenizer_token_str(tok, tok->eos_id);
        tok->eos_str = s ? rp_strdup(s) : NULL;
    }
    return RP_OK;
}

static void eog_add(rp_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab || tok->n_eog >= (int)RP_ARRAY_LEN(tok->eog))
        return;
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return;
    tok->eog[tok->n_eog++] = id;
}

/* After the vocabulary and config are in: the end-of-generation set. */
static void eog_finish(rp_tokenizer *tok)
{
    static const char *const names[] = {
        "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|return|>", "<|call|>",
        "<|end_of_text|>", "<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>", /* DeepSeek */
        "<|endoftext|>", "<turn|>", "<eos>"};
    eog_add(tok, tok->eos_id);
    for (int i = 0; i < tok->n_gen_eos; i++)
        eog_add(tok, tok->gen_eos[i]);
    eog_add(tok, tok->gguf_eot);
    eog_add(tok, tok->gguf_eom);
    for (size_t i = 0; i < RP_ARRAY_LEN(names); i++) {
        int32_t id = rp_tokenizer_token_id(tok, names[i]);
        if (id >= 0 && tok->is_special_tab[id])
            eog_add(tok, id);
    }
}

static char *config_token(json_t *v)
{
    if (json_is_string(v))
        return jdup(v);
    if (json_is_object(v))
        return jdup(json_object_get(v, "content"));
    return NULL;
}

static rp_status add_template(rp_tokenizer *tok, const char *name, const char *text)
{
    char **nn = rp_realloc(tok->tmpl_names, (size_t)(tok->n_tmpl + 1) * sizeof(char *));
    if (!nn)
        return RP_ERR_NOMEM;
    tok->tmpl_names = nn;
    char **tt = rp_realloc(tok->tmpl_texts, (size_t)(tok->n_tmpl + 1) * sizeof(char *));
    if (!tt)
        return RP_ERR_NOMEM;
    tok->tmpl_texts = tt;
    nn[tok->n_tmpl] = rp_strdup(name);
    tt[tok->n_tmpl] = rp_strdup(text);
    if (!nn[tok->n_tmpl] || !tt[tok->n_tmpl]) {
        rp_free(nn[tok->n_tmpl]);
        rp_free(tt[tok->n_tmpl]);
        return RP_ERR_NOMEM;
    }
    tok->n_tmpl++;
    return RP_OK;
}

/* generation_config.json: eos_token_id (an int or a list) joins the EOG set. */
static void load_generation_config(rp_tokenizer *tok, const char *dir)
{
    char *path = rp_path_join(dir, "generation_config.json");
    if (!path)
        return;
    json_error_t je;
    json_t *c = rp_path_exists(path) ? json_load_file(path, 0, &je) : NULL;
    rp_free(path);
    if (!c)
        return;
    json_t *e = json_object_get(c, "eos_token_id");
    if (json_is_integer(e))
        tok->gen_eos[tok->n_gen_eos++] = (int32_t)json_integer_value(e);
    for (size_t i = 0; json_is_array(e) && i < json_array_size(e) && tok->n_gen_eos < 8; i++)
        if (json_is_integer(json_array_get(e, i)))
            tok->gen_eos[tok->n_gen_eos++] = (int32_t)json_integer_value(json_array_get(e, i));
    json_decref(c);
}

static rp_status load_config(rp_tokenizer *tok, const char *dir, rp_err *err)
{
    load_generation_config(tok, dir);
    char *path = rp_path_join(dir, "tokenizer_config.json");
    if (!path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_status st = RP_OK;
    if (rp_path_exists(path)) {
        json_error_t je;
        json_t *c = json_load_file(path, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
        if (!c) {
            st = rp_err_set(err, RP_ERR_INVALID, "%s:%d: %s", path, je.line, je.text);
        } else {
            tok->bos_str = config_token(json_object_get(c, "bos_token"));
            tok->eos_str = config_token(json_object_get(c, "eos_token"));
            json_t *ct = json_object_get(c, "chat_template");
            if (json_is_string(ct)) {
                st = add_template(tok, "default", json_string_value(ct));
            } else if (json_is_array(ct)) {
                for (size_t i = 0; !st && i < json_array_size(ct); i++) {
                    json_t *e = json_array_get(ct, i);
                    const char *nm = json_string_value(json_object_get(e, "name"));
                    const char *tx = json_string_value(json_object_get(e, "template"));
                    if (nm && tx)
                        st = add_template(tok, nm, tx);
                }
            }
            json_decref(c);
            if (st)
                st = rp_err_set(err, st, "out of memory");
        }
    }
    rp_free(path);
    if (st)
        return st;
    path = rp_path_join(dir, "chat_template.jinja");
    if (!path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    if (rp_path_exists(path)) {
        char *text;
        size_t n;
        st = rp_file_read(path, &text, &n, err);
        if (!st) {
            /* the .jinja file wins over the config's default template */
            int replaced = 0;
            for (int i = 0; i < tok->n_tmpl; i++)
                if (!strcmp(tok->tmpl_names[i], "default")) {
                    rp_free(tok->tmpl_texts[i]);
                    tok->tmpl_texts[i] = text;
                    replaced = 1;
                }
            if (!replaced) {
                st = add_template(tok, "default", text);
                rp_free(text);
            }
        }
    }
    rp_free(path);
    return st;
}

static rp_status load_json(rp_tokenizer *tok, const char *path, rp_err *err)
{
    rp_mmap map;
    rp_status st = rp_mmap_open(path, &map, err);
    if (st)
        return st;
    const char *data = map.data;
    size_t n = map.n_bytes;
    /* The big members (model.vocab, model.merges) are scanned in place by tok_json.c;
     * jansson gets the rest, with "{}" / "[]" in their place. */
    tk_span vocab, merges;
    parts_ctx pc = {tok, data, n, 0, NULL, 0, 0, {0}};
    tk_json_parts_cbs cbs = {parts_vocab_cb, parts_merge_cb, &pc, RP_OK};
    tk_json_find_model_parts(data, n, &vocab, &merges, &cbs);
    if (cbs.st) {
        rp_free(pc.merges);
        rp_buf_deinit(&pc.arena);
        rp_mmap_close(&map);
        if (cbs.st == RP_ERR_NOMEM)
            return rp_err_set(err, cbs.st, "out of memory");
        return rp_err_set(err, cbs.st, "%s: model.vocab or model.merges is malformed", path);
    }
    tk_span cut[2] = {vocab, merges};
    if (cut[1].p && (!cut[0].p || cut[1].p < cut[0].p)) {
        tk_span t = cut[0];
        cut[0] = cut[1];
        cut[1] = t;
    }
    char *rest = rp_alloc(n - vocab.n - merges.n + 8);
    if (!rest) {
        rp_free(pc.merges);
        rp_buf_deinit(&pc.arena);
        rp_mmap_close(&map);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    size_t w = 0, r = 0;
    for (int k = 0; k < 2; k++) {
        if (!cut[k].p)
            continue;
        size_t at = (size_t)(cut[k].p - data);
        memcpy(rest + w, data + r, at - r);
        w += at - r;
        rest[w++] = data[at];
        rest[w++] = data[at] == '{' ? '}' : ']';
        r = at + cut[k].n;
    }
    memcpy(rest + w, data + r, n - r);
    w += n - r;
    json_error_t je;
    json_t *root = json_loadb(rest, w, JSON_ALLOW_NUL, &je);
    rp_free(rest);
    if (!root) {
        rp_free(pc.merges);
        rp_buf_deinit(&pc.arena);
        rp_mmap_close(&map);
        return rp_err_set(err, RP_ERR_INVALID, "%s:%d: %s", path, je.line, je.text);
    }
    json_t *pre = json_object_get(root, "pre_tokenizer");
    json_t *norm = json_object_get(root, "normalizer");
    json_t *dec = json_object_get(root, "decoder");
    json_t *post = json_object_get(root, "post_processor");
    if (json_is_object(norm)) {
        tok->norm = rp_calloc(1, sizeof(tk_norm));
        st = tok->norm ? load_norm(norm, tok->norm, err) : RP_ERR_NOMEM;
    }
    if (!st && json_is_object(pre)) {
        tok->pre = rp_calloc(1, sizeof(tk_pre));
        st = tok->pre ? load_pre(pre, tok->pre, err) : RP_ERR_NOMEM;
    }
    if (!st && json_is_object(dec)) {
        tok->dec = rp_calloc(1, sizeof(tk_dec));
        st = tok->dec ? load_dec(dec, tok->dec, err) : RP_ERR_NOMEM;
    }
    if (!st && json_is_object(post))
        st = load_post(tok, post, err);
    tok->byte_level = tk_pre_has_bytelevel(tok->pre);
    if (!st)
        st = load_model(tok, json_object_get(root, "model"), &vocab, &merges, &pc, err);
    rp_free(pc.merges);
    rp_buf_deinit(&pc.arena);
    rp_mmap_close(&map);
    json_t *added = json_object_get(root, "added_tokens");
    for (size_t i = 0; !st && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_t *c = json_object_get(a, "content");
        json_t *id = json_object_get(a, "id");
        if (!json_is_string(c) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > 16 * 1024 * 1024) {
            st = rp_err_set(err, RP_ERR_INVALID, "added_tokens[%zu] is malformed", i);
            break;
        }
        int special = jbool(a, "special", 0);
        if (add_added(tok, (int32_t)json_integer_value(id), json_string_value(c),
                      json_string_length(c), special, jbool(a, "lstrip", 0),
                      jbool(a, "rstrip", 0), jbool(a, "single_word", 0),
                      jbool(a, "normalized", !special)))
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    json_decref(root);
    if (st == RP_ERR_NOMEM && err && err->code != RP_ERR_NOMEM)
        rp_err_set(err, st, "out of memory");
    return st;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* 1 when the file starts with the GGUF magic. */
static int is_gguf(const char *path)
{
    if (ends_with(path, ".gguf"))
        return 1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char m[4] = {0};
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

/* The one .gguf file in dir (heap path), or NULL when there are none or several. */
static char *single_gguf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *found = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, ".gguf"))
            continue;
        if (n++ == 0)
            found = rp_path_join(dir, e->d_name);
    }
    closedir(d);
    if (n != 1) {
        rp_free(found);
        return NULL;
    }
    return found;
}

static char *dir_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl)
        return rp_strdup(".");
    return rp_strndup(path, (size_t)(sl - path) ? (size_t)(sl - path) : 1);
}

rp_status rp_tokenizer_load(const char *path, rp_tokenizer **out, rp_err *err)
{
    *out = NULL;
    if (!path || !rp_path_exists(path))
        return rp_err_set(err, RP_ERR_NOT_FOUND, "tokenizer '%s' not found", path ? path : "");
    rp_tokenizer *tok = rp_calloc(1, sizeof(*tok));
    if (!tok)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    tok->bos_id = tok->eos_id = tok->unk_id = tok->gguf_eot = tok->gguf_eom = -1;
    tok->raw = &tok->strs;
    rp_status st;
    char *json_path = NULL, *dir = NULL;
    if (rp_path_is_dir(path)) {
        json_path = rp_path_join(path, "tokenizer.json");
        dir = rp_strdup(path);
        if (!json_path || !dir) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (!rp_path_exists(json_path)) {
            char *g = single_gguf(path);
            if (g) {
                st = tk_load_gguf(tok, g, err);
                rp_free(g);
                if (!st)
                    st = tk_finish_load(tok, err);
                goto done;
            }
            st = rp_err_set(err, RP_ERR_NOT_FOUND,
                            "%s: no tokenizer.json (nor a single .gguf) in the directory", path);
            goto done;
        }
    } else if (is_gguf(path)) {
        st = tk_load_gguf(tok, path, err);
        if (!st)
            st = tk_finish_load(tok, err);
        goto done;
    } else {
        json_path = rp_strdup(path);
        dir = dir_of(path);
        if (!json_path || !dir) {
            st = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    st = load_json(tok, json_path, err);
    if (!st)
        st = load_config(tok, dir, err);
    if (!st)
        st = tk_finish_load(tok, err);
    if (st)
        rp_err_wrap(err, "%s", json_path);
done:
    rp_free(json_path);
    rp_free(dir);
    if (st) {
        rp_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return RP_OK;
}

void rp_tokenizer_free(rp_tokenizer *tok)
{
    if (!tok)
        return;
    tk_strtab_free(&tok->strs);
    tk_strtab_free(&tok->raw_tab);
    tk_strmap_free(&tok->raw_map);
    tk_strmap_free(&tok->str_map);
    rp_free(tok->is_special_tab);
    rp_free(tok->is_added_tab);
    tk_mergemap_free(&tok->merges);
    tk_shared_cache_free(tok->shared_cache);
    rp_free(tok->cont_prefix);
    rp_free(tok->eow_suffix);
    tk_norm_free(tok->norm);
    rp_free(tok->norm);
    tk_pre_free(tok->pre);
    rp_free(tok->pre);
    tk_dec_free(tok->dec);
    rp_free(tok->dec);
    for (int i = 0; i < tok->n_post; i++)
        rp_free(tok->post[i].ids);
    rp_free(tok->post);
    for (int i = 0; i < tok->n_added; i++)
        rp_free(tok->added[i].content);
    rp_free(tok->added);
    tk_trie_free(&tok->trie_raw);
    tk_trie_free(&tok->trie_norm);
    rp_free(tok->bos_str);
    rp_free(tok->eos_str);
    for (int i = 0; i < tok->n_tmpl; i++) {
        rp_free(tok->tmpl_names[i]);
        rp_free(tok->tmpl_texts[i]);
    }
    rp_free(tok->tmpl_names);
    rp_free(tok->tmpl_texts);
    rp_free(tok);
}

/* ---- accessors ------------------------------------------------------------------------- */

int rp_tokenizer_vocab_size(const rp_tokenizer *tok)
{
    return tok->n_vocab;
}

int32_t rp_tokenizer_token_id(const rp_tokenizer *tok, const char *token)
{
    if (!token)
        return -1;
    /* added tokens first (HF AddedVocabulary::token_to_id), then the model vocabulary */
    size_t n = strlen(token);
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == n && memcmp(tok->added[i].content, token, n) == 0)
            return tok->added[i].id;
    return tk_strmap_get(&tok->str_map, &tok->strs, token, n);
}

const char *rp_tokenizer_token_str(const rp_tokenizer *tok, int32_t id)
{
    return tk_strtab_get(&tok->strs, id, NULL);
}

int rp_tokenizer_is_special(const rp_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_vocab && tok->is_special_tab[id];
}

int rp_tokenizer_eog_ids(const rp_tokenizer *tok, const int32_t **ids)
{
    *ids = tok->eog;
    return tok->n_eog;
}

int rp_tokenizer_is_eog(const rp_tokenizer *tok, int32_t id)
{
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return 1;
    return 0;
}

int32_t rp_tokenizer_bos_id(const rp_tokenizer *tok)
{
    return tok->bos_id;
}

int32_t rp_tokenizer_eos_id(const rp_tokenizer *tok)
{
    return tok->eos_id;
}

const char *rp_tokenizer_bos_str(const rp_tokenizer *tok)
{
    return tok->bos_str;
}

const char *rp_tokenizer_eos_str(const rp_tokenizer *tok)
{
    return tok->eos_str;
}

const char *rp_tokenizer_chat_template(const rp_tokenizer *tok, const char *name)
{
    if (!name)
        name = "default";
    for (int i = 0; i < tok->n_tmpl; i++)
        if (!strcmp(tok->tmpl_names[i], name))
            return tok->tmpl_texts[i];
    return NULL;
}
