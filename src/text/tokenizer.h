/* text/tokenizer.h - the tokenizer contract every layer above uses.
 *
 * (Contract written with the foundation; the text module implements it and may extend it.)
 *
 * A tokenizer comes from a Hugging Face tokenizer.json (with tokenizer_config.json beside it
 * for special tokens, BOS/EOS, add_bos_token and the chat template), a model directory holding
 * those files, or a .gguf file's tokenizer.ggml.* metadata. Encoding follows HF `tokenizers`
 * exactly: added tokens are matched in the text first, then normalizer, pre-tokenizer, model,
 * post-processor (only with add_special).
 *
 * Paths: a tokenizer.json (tokenizer_config.json, generation_config.json and
 * chat_template.jinja are read from its directory when present), a directory holding
 * tokenizer.json or a single .gguf, or a GGUF file (recognised by its magic).
 * Details that differ from other implementations, on purpose:
 *  - encode takes valid UTF-8 only (else RP_ERR_INVALID), as HF takes a Rust &str;
 *  - \s in tokenizer.json regexes is Oniguruma's (Unicode White_Space, NEL included), so
 *    ids follow HF `tokenizers` where transformers.js (JavaScript \s) differs;
 *  - decode is HF `tokenizers` decode: no clean_up_tokenization_spaces pass (lossless);
 *  - BOS/EOS in add_special mode come from the post-processor, as HF encode does.
 *
 * Ownership: rp_tokenizer_load -> rp_tokenizer_free. Arrays and strings returned through out
 *            parameters are heap-allocated (rp_free). Borrowed strings (token_str, the chat
 *            template) live as long as the tokenizer.
 * Threading: a loaded tokenizer is immutable to its users: encode/decode from any number of
 *            threads (encode fills an internal lock-free word cache). An rp_detok belongs to
 *            one thread.
 * Errors:    RP_ERR_NOT_FOUND, RP_ERR_INVALID (malformed file, named), RP_ERR_UNSUPPORTED
 *            (a model/normalizer/pre-tokenizer type it does not know, named), RP_ERR_NOMEM.
 */
#ifndef RP_TEXT_TOKENIZER_H
#define RP_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

typedef struct rp_tokenizer rp_tokenizer;

rp_status rp_tokenizer_load(const char *path, rp_tokenizer **out, rp_err *err);
void rp_tokenizer_free(rp_tokenizer *tok);

/* add_special: apply the post-processor (BOS/EOS) as HF encode(add_special_tokens=True). */
rp_status rp_tokenizer_encode(const rp_tokenizer *tok, const char *text, size_t len,
                              int add_special, int32_t **out_ids, int *out_n, rp_err *err);
/* skip_special: drop special added tokens, as HF decode(skip_special_tokens=True). */
rp_status rp_tokenizer_decode(const rp_tokenizer *tok, const int32_t *ids, int n,
                              int skip_special, char **out_text, size_t *out_len, rp_err *err);

int rp_tokenizer_vocab_size(const rp_tokenizer *tok);   /* highest id + 1 */
int32_t rp_tokenizer_token_id(const rp_tokenizer *tok, const char *token); /* -1: none */
const char *rp_tokenizer_token_str(const rp_tokenizer *tok, int32_t id);   /* NULL: none */
int rp_tokenizer_is_special(const rp_tokenizer *tok, int32_t id);

/* From tokenizer_config.json (or GGUF): -1 / NULL when not set. */
int32_t rp_tokenizer_bos_id(const rp_tokenizer *tok);
int32_t rp_tokenizer_eos_id(const rp_tokenizer *tok);
const char *rp_tokenizer_bos_str(const rp_tokenizer *tok);
const char *rp_tokenizer_eos_str(const rp_tokenizer *tok);
/* End-of-generation ids: the EOS id, generation_config.json's eos_token_id (int or list),
 * GGUF eot/eom ids, and the special tokens that end a turn in the common chat formats
 * (<|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn>, <|return|>, <|call|>, ...) when the
 * vocabulary has them. Borrowed array (lives as long as the tokenizer); returns the count. */
int rp_tokenizer_eog_ids(const rp_tokenizer *tok, const int32_t **ids);
int rp_tokenizer_is_eog(const rp_tokenizer *tok, int32_t id);

/* The chat template: name NULL = the default one; "tool_use" etc. for named templates.
 * Sources: tokenizer_config.json chat_template (string or list), chat_template.jinja, GGUF
 * tokenizer.chat_template. NULL when the model has none. */
const char *rp_tokenizer_chat_template(const rp_tokenizer *tok, const char *name);

/* Incremental detokenizer for streaming: text comes out as soon as it is complete, never
 * half a UTF-8 sequence. */
typedef struct rp_detok rp_detok;
rp_detok *rp_detok_new(const rp_tokenizer *tok, int skip_special);
/* Appends newly completed text to out. */
rp_status rp_detok_feed(rp_detok *d, int32_t id, rp_buf *out);
/* Appends whatever is pending (incomplete UTF-8 becomes U+FFFD, as HF decode does). */
rp_status rp_detok_flush(rp_detok *d, rp_buf *out);
void rp_detok_free(rp_detok *d);

#endif
