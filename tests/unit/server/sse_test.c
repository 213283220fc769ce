/* Unit tests for src/server/sse.c and src/server/config.c. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "base/buf.h"
#include "server/config.h"
#include "server/sse.h"

Test(sse, framing)
{
    rp_buf b = {0};
    rp_sse_event(&b, NULL, "{}", 2);
    rp_sse_event(&b, "ping", "a\nb", 3);
    rp_sse_comment(&b, "keep-alive");
    cr_assert_str_eq(b.data, "data: {}\n\nevent: ping\ndata: a\ndata: b\n\n: keep-alive\n\n");
    rp_buf_deinit(&b);
}

Test(config, flag_then_env_then_default)
{
    rp_server_flags f = {0};
    rp_server_config c;
    rp_err err;
    unsetenv("RAPID_PORT");
    unsetenv("RAPID_API_KEY");
    cr_assert_eq(rp_server_config_resolve(&f, &c, &err), RP_OK);
    cr_assert_eq(c.port, 8000);
    cr_assert_str_eq(c.host, "127.0.0.1");
    cr_assert_eq(c.max_request_bytes, 8u << 20);
    cr_assert_str_eq(c.cors_origins, "*");
    cr_assert_null(c.api_key);
    setenv("RAPID_PORT", "9001", 1);
    setenv("RAPID_API_KEY", "k", 1);
    cr_assert_eq(rp_server_config_resolve(&f, &c, &err), RP_OK);
    cr_assert_eq(c.port, 9001);
    cr_assert_str_eq(c.api_key, "k");
    f.port = "9002";
    cr_assert_eq(rp_server_config_resolve(&f, &c, &err), RP_OK);
    cr_assert_eq(c.port, 9002);
    f.port = "nope";
    cr_assert_eq(rp_server_config_resolve(&f, &c, &err), RP_ERR_INVALID);
    f.port = NULL;
    f.log_level = "loud";
    cr_assert_eq(rp_server_config_resolve(&f, &c, &err), RP_ERR_INVALID);
    unsetenv("RAPID_PORT");
    unsetenv("RAPID_API_KEY");
}
