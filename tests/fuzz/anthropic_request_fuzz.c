/* libFuzzer target: Anthropic request bodies -> rp_chat_request (messages and count_tokens),
 * plus the error JSON built from whatever message the parser wrote. */
#include <stddef.h>
#include <stdint.h>

#include "api/anthropic.h"
#include "base/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    for (int type = 0; type < 2; type++) {
        rp_chat_request r;
        rp_api_error e = {0};
        rp_req_type t = type ? RP_REQ_COUNT_TOKENS : RP_REQ_MESSAGES;
        rp_chat_request_init(&r, t);
        if (rp_anthropic_parse(body, size, t, &r, &e) != RP_OK) {
            char *j = rp_api_error_json(RP_API_ANTHROPIC, &e);
            RP_ASSERT(j);
            rp_free(j);
        }
        rp_chat_request_deinit(&r);
    }
    return 0;
}
