/* chat/template.h - chat templates: a Jinja2 subset interpreter, the contract the API uses.
 *
 * (Contract written with the foundation; the template module implements it and may extend it.)
 *
 * Semantics are those of transformers' apply_chat_template environment: sandboxed Jinja2 with
 * trim_blocks and lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False, ...),
 * globals raise_exception, strftime_now, range, namespace, dict.
 *
 * Ownership: rp_template_new parses once (the source is copied) -> rp_template_free. Rendered
 *            text is heap-allocated (rp_free). The context is borrowed for the call.
 * Threading: a parsed template is immutable: render from any number of threads.
 * Errors:    RP_ERR_INVALID with the message of a syntax error (with line), a runtime error
 *            ("UndefinedError: 'x' is undefined", "TypeError: ..."), or raise_exception's text
 *            exactly as given; RP_ERR_NOMEM.
 */
#ifndef RP_CHAT_TEMPLATE_H
#define RP_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct rp_template rp_template;

rp_status rp_template_new(const char *source, size_t len, rp_template **out, rp_err *err);
void rp_template_free(rp_template *t);

/* context: a JSON object whose keys become template variables (messages, tools,
 * add_generation_prompt, bos_token, eos_token, enable_thinking, date_string, ...). */
rp_status rp_template_render(const rp_template *t, const json_t *context, char **out,
                             size_t *out_len, rp_err *err);

/* Bounds every later render of t: max_steps statements and expressions evaluated, max_bytes
 * of memory (0 = the defaults: 20 million steps, 512 MiB). A render past a bound fails with
 * RP_ERR_INVALID. Call before sharing t between threads. */
void rp_template_set_limits(rp_template *t, uint64_t max_steps, size_t max_bytes);

/* As rp_template_render, with strftime_now's clock fixed at `now` (seconds since the epoch,
 * formatted in local time): for reproducible output in tests and the CLI's --now. */
rp_status rp_template_render_at(const rp_template *t, const json_t *context, long long now,
                                char **out, size_t *out_len, rp_err *err);

#endif
