/* text/tok_impl.h - internals shared by the tokenizer's files (not for other modules).
 *
 * The tokenizer is a pipeline, as in HF `tokenizers`:
 *   added tokens split -> normalizer -> pre-tokenizer -> model (BPE / WordPiece) -> post.
 * Text flows as byte ranges ("pieces") into one scratch store; transformations append new
 * strings to the store. Byte-level vocabularies are stored as raw bytes (the GPT-2 byte
 * alphabet is undone at load), so the byte-level step costs nothing at encode time.
 *
 * Ownership: everything hangs off rp_tokenizer and is freed by rp_tokenizer_free.
 * Threading: immutable after load except the shared word cache (lock-free, bpe.c); per-call
 *            scratch lives in tk_scratch.
 * Errors:    rp_status + rp_err, as the public header says.
 */
#ifndef RP_TEXT_TOK_IMPL_H
#define RP_TEXT_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/buf.h"
#include "base/status.h"
#include "text/tokenizer.h"

/* ---- string -> id hash map (open addressing; keys live elsewhere) ---------------------- */

/* String tables (id -> bytes) and maps over them (bytes -> id); a map is bound to the
 * table it was built over, and keys are compared against that table's pool. */
typedef struct tk_strtab {
    char *pool;      /* all strings, NUL-separated */
    size_t pool_len, pool_cap;
    uint32_t *off;   /* [n] offset of string i in pool */
    uint32_t *len;   /* [n] length of string i; UINT32_MAX = no string */
    int n;
} tk_strtab;

typedef struct tk_strslot {
    uint32_t hash;
    int32_t val; /* table index + 1; 0 = empty */
    uint32_t off, len;
} tk_strslot;

typedef struct tk_strmap {
    tk_strslot *slots; /* [cap] */
    uint32_t cap;      /* power of two */
    uint32_t n;
} tk_strmap;

uint64_t tk_hash_bytes(const void *p, size_t n);
rp_status tk_strtab_set(tk_strtab *t, int i, const char *s, size_t n);
/* Pre-sizes the table (entries) and its string pool (bytes). */
rp_status tk_strtab_reserve(tk_strtab *t, int n_entries, size_t pool_bytes);
const char *tk_strtab_get(const tk_strtab *t, int i, size_t *n);
void tk_strtab_free(tk_strtab *t);
rp_status tk_strmap_init(tk_strmap *m, uint32_t n_expected);
/* Inserts table entry i keyed by its string; keeps the first one on duplicates. */
rp_status tk_strmap_put(tk_strmap *m, const tk_strtab *t, int i);
int32_t tk_strmap_get(const tk_strmap *m, const tk_strtab *t, const char *s, size_t n);
/* The same with the key's hash (tk_strmap_hash) computed beforehand, e.g. to prefetch its
 * slot (tk_strmap_prefetch) a while before the lookup. */
uint32_t tk_strmap_hash(const char *s, size_t n);
void tk_strmap_prefetch(const tk_strmap *m, uint32_t h);
int32_t tk_strmap_get_h(const tk_strmap *m, const tk_strtab *t, const char *s, size_t n,
                        uint32_t h);
/* Inserts every entry of t, in order (tk_strmap_put each, faster); *n_dups (if not NULL):
 * how many were not inserted, their string being there already. */
rp_status tk_strmap_put_all(tk_strmap *m, const tk_strtab *t, int *n_dups);
void tk_strmap_free(tk_strmap *m);

/* (id_a, id_b) -> (rank, merged id) */
typedef struct tk_merge {
    uint64_t key; /* ((a << 32) | b) + 1; 0 = empty */
    int32_t rank;
    int32_t id;
} tk_merge;

typedef struct tk_mergemap {
    tk_merge *slots;
    uint32_t cap, n;
} tk_mergemap;

rp_status tk_mergemap_init(tk_mergemap *m, uint32_t n_expected);
/* Keeps the lower rank when the pair is already there. */
rp_status tk_mergemap_put(tk_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const tk_merge *tk_mergemap_get(const tk_mergemap *m, int32_t a, int32_t b);
void tk_mergemap_prefetch(const tk_mergemap *m, int32_t a, int32_t b);
void tk_mergemap_free(tk_mergemap *m);

/* ---- pipeline components -------------------------------------------------------------- */

typedef enum tk_norm_kind {
    TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD, TK_NORM_LOWER, TK_NORM_STRIP,
    TK_NORM_REPLACE, TK_NORM_PREPEND, TK_NORM_BERT, TK_NORM_SEQ,
} tk_norm_kind;

typedef enum tk_split_behavior {
    TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT,
    TK_SPLIT_CONTIGUOUS,
} tk_split_behavior;

/* A literal or compiled regex pattern (Replace normalizer/decoder, Split). */
typedef struct tk_pattern {
    char *lit; /* literal string (when re == NULL) */
    size_t lit_len;
    pcre2_code *re;
    int fast; /* a known pre-tokenizer regex with a hand-written ASCII matcher (pretok.c) */
    int fast_digits;
} tk_pattern;

typedef struct tk_norm {
    tk_norm_kind kind;
    tk_pattern pat;     /* REPLACE */
    char *content;      /* REPLACE content, PREPEND string */
    size_t content_len;
    int left, right;    /* STRIP */
    int bert_clean, bert_chinese, bert_strip_accents, bert_lower; /* BERT */
    struct tk_norm *sub;
    int n_sub;
} tk_norm;

typedef enum tk_pre_kind {
    TK_PRE_BYTELEVEL, TK_PRE_SPLIT, TK_PRE_DIGITS, TK_PRE_METASPACE, TK_PRE_WHITESPACE,
    TK_PRE_WSSPLIT, TK_PRE_PUNCT, TK_PRE_BERT, TK_PRE_SEQ,
} tk_pre_kind;

typedef enum tk_prepend { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend;

typedef struct tk_pre {
    tk_pre_kind kind;
    tk_pattern pat;     /* SPLIT (BYTELEVEL with use_regex: the GPT-2 regex) */
    tk_split_behavior behavior;
    int invert;
    int add_prefix_space; /* BYTELEVEL */
    int use_regex;        /* BYTELEVEL */
    int individual;       /* DIGITS */
    char repl[8];         /* METASPACE replacement (UTF-8) */
    int repl_len;
    tk_prepend prepend;   /* METASPACE */
    int split;            /* METASPACE */
    struct tk_pre *sub;
    int n_sub;
} tk_pre;

typedef enum tk_dec_kind {
    TK_DEC_BYTELEVEL, TK_DEC_BYTEFALLBACK, TK_DEC_FUSE, TK_DEC_STRIP, TK_DEC_REPLACE,
    TK_DEC_METASPACE, TK_DEC_WORDPIECE, TK_DEC_SEQ,
} tk_dec_kind;

typedef struct tk_dec {
    tk_dec_kind kind;
    tk_pattern pat;       /* REPLACE */
    char *content;        /* REPLACE content; STRIP content char */
    size_t content_len;
    int start, stop;      /* STRIP */
    char repl[8];         /* METASPACE */
    int repl_len;
    tk_prepend prepend;   /* METASPACE */
    char *prefix;         /* WORDPIECE prefix ("##") */
    int cleanup;          /* WORDPIECE */
    struct tk_dec *sub;
    int n_sub;
} tk_dec;

/* One post-processor template item: a special token's ids or the sequence. */
typedef struct tk_post_item {
    int is_seq;
    int32_t *ids;
    int n_ids;
} tk_post_item;

typedef struct tk_added {
    int32_t id;
    char *content;
    size_t len;
    int special, lstrip, rstrip, single_word, normalized;
} tk_added;

/* Byte trie over added-token contents: leftmost-longest matching. */
typedef struct tk_trie_node {
    int32_t first_child; /* index into edges, -1 none */
    int32_t n_children;
    int32_t added;       /* index into tok->added, -1 none */
} tk_trie_node;

typedef struct tk_trie {
    tk_trie_node *nodes;
    int n_nodes, cap_nodes;
    uint8_t *edge_byte; /* children of a node are contiguous after finalisation */
    int32_t *edge_node;
    uint8_t first[256]; /* 1 when some token starts with this byte */
    int only_first;     /* that byte when it is the only one, else -1 */
} tk_trie;

typedef enum tk_model_kind { TK_MODEL_BPE, TK_MODEL_WORDPIECE } tk_model_kind;

/* The shared word cache (bpe.c): the one piece of mutable state in a loaded tokenizer,
 * lock-free and safe from any number of threads. */
#define TK_SHARED_CACHE_N 65536
typedef struct tk_sentry {
    _Atomic uint64_t seq;
    _Atomic uint64_t w[7]; /* hash, len | n_ids << 8, key[2], ids[2], pad */
} tk_sentry;
typedef struct tk_shared_cache tk_shared_cache;
tk_shared_cache *tk_shared_cache_new(void);
void tk_shared_cache_free(tk_shared_cache *c);

struct rp_tokenizer {
    tk_model_kind model;
    /* Token strings: `strs` is the HF form (byte-level alphabet for byte-level models);
     * `raw` is what the model matches against (raw bytes). For non-byte-level models they
     * are the same table (raw == &strs). */
    tk_strtab strs;
    tk_strtab raw_tab;
    tk_strtab *raw;
    tk_strmap raw_map;  /* raw bytes -> id (model vocabulary) */
    tk_strmap str_map;  /* HF string -> id (every token, added ones included) */
    int n_vocab;        /* highest id + 1 */
    uint8_t *is_special_tab; /* [n_vocab] */
    uint8_t *is_added_tab;   /* [n_vocab] */

    /* BPE */
    tk_mergemap merges;
    tk_shared_cache *shared_cache; /* NULL: per-call caching only */
    int spm_split;          /* split words before U+2581 (see tk_model_encode) */
    int32_t spm_bad[64];    /* tokens holding U+2581 after another character */
    int n_spm_bad;
    int byte_level;
    int byte_fallback;
    int ignore_merges;
    int fuse_unk;
    int32_t unk_id;
    int32_t byte_ids[256]; /* byte_level: id of each single byte; byte_fallback: <0xXX> */
    char *cont_prefix;     /* continuing_subword_prefix (BPE or WordPiece "##") */
    size_t cont_prefix_len;
    char *eow_suffix;
    size_t eow_suffix_len;
    int wp_max_chars;      /* WordPiece max_input_chars_per_word */

    /* pipeline */
    tk_norm *norm;
    tk_pre *pre;
    const tk_pattern *pre_fast; /* tk_pre_single_regex(pre) */
    tk_dec *dec;
    tk_post_item *post;    /* TemplateProcessing single, NULL = none */
    int n_post;

    /* added tokens */
    tk_added *added;
    int n_added;
    tk_trie trie_raw;  /* non-normalized added tokens, matched on the raw text */
    tk_trie trie_norm; /* normalized ones, matched on the normalized text */

    /* config */
    int32_t bos_id, eos_id;
    int32_t eog[16];  /* end-of-generation ids */
    int n_eog;
    int32_t gguf_eot, gguf_eom;
    int32_t gen_eos[8]; /* generation_config.json eos_token_id */
    int n_gen_eos;
    char *bos_str, *eos_str;
    char **tmpl_names, **tmpl_texts;
    int n_tmpl;
};

/* Per-call scratch for encode. */
typedef struct tk_piece {
    uint32_t off, len;
} tk_piece;

typedef struct tk_pieces {
    tk_piece *v;
    int n, cap;
} tk_pieces;

typedef struct tk_cslot {
    uint32_t hash;    /* high half of the 64-bit hash (also picks the slot) */
    uint32_t ids_off; /* into c_ids; the id itself when n_ids == 1 */
    uint32_t key_off; /* into c_keys */
    uint16_t n_ids;   /* 0 = empty */
    uint16_t key_len;
} tk_cslot;

typedef struct tk_scratch {
    rp_buf store;       /* piece bytes */
    tk_pieces a, b;     /* ping-pong piece lists */
    pcre2_match_data *md;
    /* word cache: piece bytes -> ids */
    struct tk_cslot *cache;
    uint32_t c_cap, c_used;
    rp_buf c_keys;
    int32_t *c_ids;
    uint32_t c_ids_n, c_ids_cap;
    /* BPE work arrays */
    int32_t *sym_id;
    int32_t *sym_prev, *sym_next;
    int32_t *sym_len;
    uint64_t *heap;
    int sym_cap, heap_cap;
} tk_scratch;

typedef struct tk_ids {
    int32_t *v;
    int n, cap;
} tk_ids;

rp_status tk_ids_push(tk_ids *ids, int32_t id);

/* pretok.c */
rp_status tk_pattern_compile(tk_pattern *p, const char *regex, rp_err *err);
void tk_pattern_free(tk_pattern *p);
rp_status tk_normalize(const tk_norm *n, const char *s, size_t len, rp_buf *out);
/* Pre-tokenizes store[in] pieces into the scratch; section_start: the section's offset in
 * the original text (Metaspace prepend_scheme "first"). Result in sc->a. */
rp_status tk_pretokenize(const tk_pre *p, tk_scratch *sc, int section_first);
void tk_norm_free(tk_norm *n);
void tk_pre_free(tk_pre *p);
void tk_dec_free(tk_dec *d);
int tk_pre_has_bytelevel(const tk_pre *p);
/* Next match of p in s[pos..n): 1 with [*ms, *me), 0 when none (md: match data for regexes). */
int tk_pattern_next(const tk_pattern *p, pcre2_match_data *md, const char *s, size_t n,
                    size_t pos, size_t *ms, size_t *me);
/* The i-th regex that has a hand-written matcher (for the tests), NULL past the last. */
const char *tk_fast_regex(int i);
/* The hand-written matcher alone: the end of the match at pos (these patterns match at
 * every position), or -1 when it cannot decide (a non-ASCII character, or p has none). */
long tk_pattern_fast(const tk_pattern *p, const char *s, size_t n, size_t pos);
/* The same with PCRE2 only, never the hand-written matcher (the tests compare the two). */
int tk_pattern_next_pcre(const tk_pattern *p, pcre2_match_data *md, const char *s, size_t n,
                         size_t pos, size_t *ms, size_t *me);
/* The regex when the whole pre-tokenizer is one Isolated split by it (encode's fast path:
 * matches go straight to the model), else NULL. */
const tk_pattern *tk_pre_single_regex(const tk_pre *p);

/* bpe.c */
rp_status tk_model_encode(const rp_tokenizer *tok, tk_scratch *sc, const char *s, size_t n,
                          tk_ids *out);
/* tk_model_encode over pieces v[0..n) of base (faster: see bpe.c). */
rp_status tk_model_encode_pieces(const rp_tokenizer *tok, tk_scratch *sc, const char *base,
                                 const tk_piece *v, int n, tk_ids *out);
void tk_scratch_free(tk_scratch *sc);
void tk_spm_split_init(rp_tokenizer *tok);

/* detok.c */
rp_status tk_decode_tokens(const rp_tokenizer *tok, const int32_t *ids, int n,
                           int skip_special, rp_buf *out);

/* tok_gguf.c */
rp_status tk_load_gguf(rp_tokenizer *tok, const char *path, rp_err *err);

/* tokenizer.c */
rp_status tk_finish_load(rp_tokenizer *tok, rp_err *err);
rp_status tk_trie_build(tk_trie *t, const rp_tokenizer *tok, int normalized);
void tk_trie_free(tk_trie *t);

#endif
