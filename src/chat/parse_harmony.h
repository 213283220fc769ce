/* chat/parse_harmony.h - OpenAI Harmony (gpt-oss) output: channels, recipients, calls.
 *
 * The model writes messages "<|channel|>NAME[ to=RECIPIENT][ <|constrain|>json]<|message|>TEXT"
 * ended by <|end|>, <|call|> or <|return|>; later ones start "<|start|>assistant...". The
 * header may also carry the recipient before the channel ("<|start|>assistant to=functions.f
 * <|channel|>commentary json<|message|>"). This machine routes:
 *   channel analysis                 -> reasoning text (streamed)
 *   recipient functions.NAME         -> one call: the body is buffered to its end marker
 *   any other channel / plain text   -> content (streamed)
 *
 *   START --" to=..."--> HEADER (the prompt's "<|start|>assistant" header goes on), else TEXT
 *   TEXT --<|start|> or <|channel|>--> HEADER --<|message|>--> BODY --end marker--> TEXT
 *                                        (finish or an oversized header: the raw header is text)
 *
 * Ownership: rp_harmony_new -> rp_harmony_free; sink pointers are borrowed per call.
 * Threading: one owner.
 * Errors:    RP_ERR_NOMEM, or what a sink callback returns.
 */
#ifndef RP_CHAT_PARSE_HARMONY_H
#define RP_CHAT_PARSE_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct rp_harmony rp_harmony;

typedef struct rp_harmony_sink {
    void *user;
    /* reasoning or content text */
    rp_status (*text)(void *user, bool reasoning, const char *s, size_t n);
    /* a complete call to `name` (NUL-terminated) with JSON body text; raw is the whole message
     * text, markup included, to keep as content if the body does not parse. */
    rp_status (*call)(void *user, const char *name, const char *body, size_t n, const char *raw,
                      size_t raw_n);
} rp_harmony_sink;

/* parse_calls false (tool_choice none): calls are kept as content, raw. */
rp_status rp_harmony_new(bool parse_calls, rp_harmony **out);
void rp_harmony_free(rp_harmony *h);
/* Consumes the chunk (text held back internally where a marker may start). final: end of
 * output, flush everything. */
rp_status rp_harmony_feed(rp_harmony *h, const char *s, size_t n, bool final,
                          const rp_harmony_sink *sink);

#endif
