/* tests/fuzz/jinja_fuzz.c - libFuzzer target for the chat-template engine.
 *
 * Input: template source, then optionally a NUL byte and a JSON context. Without a (valid)
 * context the template renders against a fixed chat context with messages, tools and a tool
 * call, so mutations of real templates exercise their real paths. Every render is bounded
 * (steps, bytes) as the server bounds it; the target checks the contract: success gives a
 * NUL-terminated string of the reported length, failure a message and no output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/template.h"

static const char k_context[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[true,null,2.5]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"},"
    "{\"role\":\"assistant\",\"content\":\"done\",\"reasoning_content\":\"think\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}],"
    "\"add_generation_prompt\":true,\"enable_thinking\":false,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t n_src = nul ? (size_t)(nul - data) : size;
    json_t *ctx = NULL;
    if (nul && size - n_src > 1)
        ctx = json_loadb((const char *)nul + 1, size - n_src - 1, 0, NULL);
    if (!ctx || !json_is_object(ctx)) {
        json_decref(ctx);
        ctx = json_loads(k_context, 0, NULL);
    }
    rp_template *t = NULL;
    rp_err err = {0};
    if (rp_template_new((const char *)data, n_src, &t, &err) == RP_OK) {
        rp_template_set_limits(t, 200000, 64u << 20);
        char *out = NULL;
        size_t n = 0;
        rp_status st = rp_template_render_at(t, ctx, 1767225600, &out, &n, &err);
        if (st == RP_OK) {
            if (!out || out[n] != 0)
                abort();
        } else if (out || err.msg[0] == 0) {
            abort();
        }
        rp_free(out);
        rp_template_free(t);
    } else if (t || err.msg[0] == 0) {
        abort();
    }
    json_decref(ctx);
    return 0;
}
