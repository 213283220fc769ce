/* libFuzzer target: OpenAI request bodies -> rp_chat_request (chat and completions), plus
 * the error JSON built from whatever message the parser wrote. */
#include <stddef.h>
#include <stdint.h>

#include "api/openai.h"
#include "base/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    for (int type = 0; type < 2; type++) {
        rp_chat_request r;
        rp_api_error e = {0};
        rp_chat_request_init(&r, type ? RP_REQ_COMPLETION : RP_REQ_CHAT);
        rp_status st = type ? rp_openai_parse_completion(body, size, &r, &e)
                            : rp_openai_parse_chat(body, size, &r, &e);
        if (st != RP_OK) {
            char *j = rp_api_error_json(RP_API_OPENAI, &e);
            RP_ASSERT(j); /* every error message must make valid JSON */
            rp_free(j);
        }
        rp_chat_request_deinit(&r);
    }
    return 0;
}
