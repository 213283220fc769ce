/* api/standin/standin_template.c - stand-in for chat/template.h: ChatML, whatever the
 * source says (see standin.h). */
#include <string.h>

#include "api/request.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "chat/template.h"

struct rp_template {
    int unused;
};

rp_status rp_template_new(const char *source, size_t len, rp_template **out, rp_err *err)
{
    *out = rp_calloc(1, sizeof **out);
    return *out ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

void rp_template_free(rp_template *t) { rp_free(t); }

static void turn(rp_buf *b, const char *role, const char *text)
{
    rp_buf_printf(b, "<|im_start|>%s\n%s<|im_end|>\n", role, text);
}

rp_status rp_template_render(const rp_template *t, const json_t *context, char **out,
                             size_t *out_len, rp_err *err)
{
    rp_buf b = {0};
    json_t *tools = json_object_get(context, "tools");
    if (json_array_size(tools) > 0) {
        char *s = rp_api_json_dump(tools);
        rp_buf_printf(&b, "<|im_start|>system\n# Tools\n%s<|im_end|>\n", s ? s : "");
        rp_free(s);
    }
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(context, "messages"), i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role)
            return rp_err_set(err, RP_ERR_INVALID, "message %zu has no role", i);
        turn(&b, role, content ? content : "");
    }
    if (json_is_true(json_object_get(context, "add_generation_prompt")))
        rp_buf_puts(&b, "<|im_start|>assistant\n");
    if (!b.data) {
        *out = rp_strdup("");
        *out_len = 0;
        return *out ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    *out_len = b.len;
    *out = rp_buf_take(&b);
    return RP_OK;
}
