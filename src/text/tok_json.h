/* text/tok_json.h - fast scanning of tokenizer.json's model.vocab and model.merges (see
 * tok_json.c). Internal to the text module.
 *
 * Ownership: spans point into the caller's buffer; callback strings live until the callback
 *            returns. Threading: reentrant. Errors: RP_ERR_INVALID on malformed JSON, or
 *            whatever a callback returns.
 */
#ifndef RP_TEXT_TOK_JSON_H
#define RP_TEXT_TOK_JSON_H

#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

typedef struct tk_span {
    const char *p;
    size_t n;
} tk_span;

typedef rp_status (*tk_vocab_cb)(void *ud, const char *key, size_t n, long long id);
typedef rp_status (*tk_merge_cb)(void *ud, const char *a, size_t al, const char *b, size_t bl);

/* With tk_json_find_model_parts: vocab and merges are parsed, to these callbacks, while they
 * are found (one pass over the file); st: the first error (then nothing is found). */
typedef struct tk_json_parts_cbs {
    tk_vocab_cb vocab;
    tk_merge_cb merge;
    void *ud;
    rp_status st;
} tk_json_parts_cbs;

/* Finds the value spans of model.vocab (an object) and model.merges (an array, optional),
 * parsing them to cbs unless it is NULL. Returns 1 when vocab was found. */
int tk_json_find_model_parts(const char *buf, size_t n, tk_span *vocab, tk_span *merges,
                             tk_json_parts_cbs *cbs);
/* Overwrites a span in place with an empty object/array padded with spaces. */
void tk_json_blank(char *buf, const tk_span *s);
rp_status tk_json_vocab(const tk_span *s, tk_vocab_cb cb, void *ud);
rp_status tk_json_merges(const tk_span *s, tk_merge_cb cb, void *ud);

#endif
