/* api/standin/standin.h - stand-ins for layers not yet in the tree.
 *
 * While src/engine, src/model, src/text/tokenizer or src/chat/template have no
 * implementation in this tree, api.cmake builds the matching file here instead, so the
 * server builds, runs and is tested end to end. Each implements its contract header with
 * the least behaviour that exercises the server honestly:
 *   model:     accepts a directory holding config.json (context from max_position_embeddings)
 *   tokenizer: bytes are ids 0..255, then <|im_start|> 256, <|im_end|> 257 (EOS),
 *              <|endoftext|> 258
 *   template:  renders ChatML from messages (tools listed in a system turn)
 *   engine:    one thread, one request at a time, emits pseudo-random words byte by byte
 *              (deterministic for a seed or at temperature 0), about 1 ms per token
 * `rapid serve` logs a warning naming every stand-in in use. When the real module lands,
 * api.cmake stops building its stand-in; nothing else changes.
 */
#ifndef RP_API_STANDIN_H
#define RP_API_STANDIN_H

/* Comma-separated names of the stand-ins linked in ("" when none). */
const char *rp_standin_names(void);

#endif
