/* text/unicode.h - the small Unicode toolkit the tokenizer needs: UTF-8 decoding and
 * validation, HF-compatible character classes (White_Space, alphanumeric, punctuation,
 * numeric) on top of utf8proc, and the GPT-2 byte-level alphabet.
 *
 * Ownership: no allocation. Threading: pure functions over immutable tables.
 * Errors:    none (decoders report invalid input through their return value).
 */
#ifndef RP_TEXT_UNICODE_H
#define RP_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s (n bytes left, n >= 1). Returns its length (1-4); on an
 * invalid sequence returns 0 (and *cp is undefined). */
int rp_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes room); returns the length. */
int rp_utf8_encode(uint32_t cp, char *out);
/* 1 when the whole buffer is valid UTF-8 (no surrogates, shortest forms). */
int rp_utf8_valid(const char *s, size_t n);
/* Length of the longest prefix of s that is a complete, valid UTF-8 text; *n_bad_tail is
 * set to 1 when the rest starts with a definitely invalid byte sequence, 0 when the rest
 * is an incomplete (possibly valid) sequence. */
size_t rp_utf8_complete_prefix(const char *s, size_t n, int *bad);
/* Length of the maximal invalid subpart at s (for U+FFFD replacement as from_utf8_lossy). */
int rp_utf8_invalid_len(const char *s, size_t n);

int rp_uni_is_space(uint32_t cp);   /* Unicode White_Space (Rust char::is_whitespace) */
int rp_uni_is_alnum(uint32_t cp);   /* Rust char::is_alphanumeric */
int rp_uni_is_numeric(uint32_t cp); /* Rust char::is_numeric (Nd, Nl, No) */
int rp_uni_is_punct(uint32_t cp);   /* ASCII punctuation or Unicode P* */
int rp_uni_is_mark(uint32_t cp);    /* Mn, Mc, Me */
int rp_uni_is_control(uint32_t cp); /* Cc, Cf (BERT's notion, minus \t \n \r) */
int rp_uni_is_cjk(uint32_t cp);     /* BERT's CJK ideograph ranges */

/* GPT-2 byte-level alphabet: byte -> code point, and back (-1 when cp is not in it). */
uint32_t rp_bytelevel_cp(uint8_t b);
int rp_bytelevel_byte(uint32_t cp);

#endif
