/* cli/cmd_parse.c - `rapid parse`: raw model text -> the assistant message the server sends.
 *
 *   rapid parse [--tool-call-parser NAME] [--reasoning-parser NAME] [--tools TOOLS.json]
 *               [--chunk N] [--think-opened] [--stable-ids] --text-file F
 *
 * Prints {"role","content","reasoning_content","tool_calls"} as JSON. Without --chunk the text
 * is fed in one piece; --chunk N feeds it N characters (UTF-8 code points) at a time through
 * the same streaming path the server uses, and the message is assembled from the events.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/status.h"
#include "chat/output_parser.h"
#include "cli/args.h"
#include "cli/commands.h"

static void stable_id(void *user, int index, char *out, size_t cap)
{
    snprintf(out, cap, "call_%024d", index);
}

/* Byte length of the first n code points of s[0..len). */
static size_t utf8_prefix(const char *s, size_t len, long n)
{
    size_t i = 0;
    while (i < len && n > 0) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        n--;
    }
    return i;
}

static int feed_text(rp_output_parser *p, const char *text, size_t len, long chunk, rp_err *err)
{
    size_t off = 0;
    while (off < len) {
        size_t n = chunk > 0 ? utf8_prefix(text + off, len - off, chunk) : len - off;
        if (rp_output_parser_feed(p, text + off, n, err) != RP_OK) return 1;
        off += n;
    }
    return rp_output_parser_finish(p, err) == RP_OK ? 0 : 1;
}

int rp_cmd_parse(int argc, char **argv)
{
    const char *tool = NULL, *reasoning = NULL, *tools_path = NULL, *chunk_s = NULL,
               *text_path = NULL;
    int think_opened = 0, stable = 0;
    const rp_opt opts[] = {
        {"tool-call-parser", &tool, NULL}, {"reasoning-parser", &reasoning, NULL},
        {"tools", &tools_path, NULL},      {"chunk", &chunk_s, NULL},
        {"text-file", &text_path, NULL},   {"think-opened", NULL, &think_opened},
        {"stable-ids", NULL, &stable},
    };
    int n_pos = 0;
    const char *pos[1];
    int rc = rp_args_parse(argc, argv, opts, (int)RP_ARRAY_LEN(opts), pos, 0, &n_pos);
    if (rc != 0) return rc;
    long chunk = 0;
    if (!text_path) {
        fprintf(stderr, "rapid parse: --text-file F is required (the raw model output)\n");
        return 2;
    }
    if (chunk_s && (rp_args_int(chunk_s, &chunk) != 0 || chunk < 1)) {
        fprintf(stderr, "rapid parse: --chunk takes a positive number of characters\n");
        return 2;
    }
    rp_err err = {0};
    char *text = NULL;
    size_t text_len = 0;
    json_t *tools = NULL, *msg = NULL;
    rp_parse_collector *col = NULL;
    rp_output_parser *p = NULL;
    rc = 1;
    if (rp_file_read(text_path, &text, &text_len, &err) != RP_OK) goto out;
    if (tools_path) {
        json_error_t je;
        tools = json_load_file(tools_path, 0, &je);
        if (!tools || !json_is_array(tools)) {
            rp_err_set(&err, RP_ERR_INVALID, "%s:%d: %s", tools_path, je.line,
                       tools ? "the tools file must hold a JSON array" : je.text);
            goto out;
        }
    }
    if (rp_parse_collector_new(&col) != RP_OK) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    rp_output_parser_config cfg = {
        .tool_parser = tool,
        .reasoning_parser = reasoning,
        .tools = tools,
        .think_opened = think_opened,
        .on_event = rp_parse_collector_event,
        .user = col,
        .gen_id = stable ? stable_id : NULL,
    };
    if (rp_output_parser_new(&cfg, &p, &err) != RP_OK) {
        if (err.code == RP_ERR_NOT_FOUND) rc = 2; /* an unknown parser name is a usage error */
        goto out;
    }
    if (feed_text(p, text, text_len, chunk, &err) != 0) goto out;
    if (!(msg = rp_parse_collector_message(col))) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (json_dumpf(msg, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0) {
        fputc('\n', stdout);
        rc = 0;
    }
out:
    if (rc != 0 && err.msg[0]) fprintf(stderr, "rapid parse: %s\n", err.msg);
    json_decref(msg);
    rp_output_parser_free(p);
    rp_parse_collector_free(col);
    json_decref(tools);
    rp_free(text);
    return rc;
}
