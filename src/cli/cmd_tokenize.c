/* cli/cmd_tokenize.c - `rapid tokenize` and `rapid detokenize`: the tokenizer from the
 * command line (HF encode(text, add_special_tokens=False) unless --add-special).
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "text/tokenizer.h"

int rp_cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL, *text_file = NULL, *text = NULL;
    int add_special = 0;
    rp_opt opts[] = {
        {"tokenizer", &path, NULL},
        {"text-file", &text_file, NULL},
        {"text", &text, NULL},
        {"add-special", NULL, &add_special},
    };
    int n_pos;
    int rc = rp_args_parse(argc, argv, opts, (int)RP_ARRAY_LEN(opts), NULL, 0, &n_pos);
    if (rc)
        return rc;
    if (!path || (!text_file && !text) || (text_file && text)) {
        fprintf(stderr, "rapid tokenize: need --tokenizer PATH and one of --text-file FILE, "
                        "--text STRING\n");
        return 2;
    }
    rp_err err = {0};
    char *data = NULL;
    size_t len;
    if (text_file) {
        if (rp_file_read(strcmp(text_file, "-") ? text_file : "/dev/stdin", &data, &len, &err)) {
            fprintf(stderr, "rapid tokenize: %s\n", err.msg);
            return 1;
        }
    } else {
        len = strlen(text);
    }
    rp_tokenizer *tok;
    if (rp_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "rapid tokenize: %s\n", err.msg);
        rp_free(data);
        return 1;
    }
    int32_t *ids;
    int n;
    rc = 0;
    if (rp_tokenizer_encode(tok, data ? data : text, len, add_special, &ids, &n, &err)) {
        fprintf(stderr, "rapid tokenize: %s\n", err.msg);
        rc = 1;
    } else {
        rp_buf out = {0};
        rp_buf_putc(&out, '[');
        for (int i = 0; i < n; i++)
            rp_buf_printf(&out, i ? ",%d" : "%d", ids[i]);
        rp_buf_puts(&out, "]\n");
        fwrite(out.data, 1, out.len, stdout);
        rp_buf_deinit(&out);
        rp_free(ids);
    }
    rp_tokenizer_free(tok);
    rp_free(data);
    return rc;
}

int rp_cmd_detokenize(int argc, char **argv)
{
    const char *path = NULL, *ids_s = NULL;
    int skip_special = 0;
    rp_opt opts[] = {
        {"tokenizer", &path, NULL},
        {"ids", &ids_s, NULL},
        {"skip-special", NULL, &skip_special},
    };
    int n_pos;
    int rc = rp_args_parse(argc, argv, opts, (int)RP_ARRAY_LEN(opts), NULL, 0, &n_pos);
    if (rc)
        return rc;
    if (!path || !ids_s) {
        fprintf(stderr, "rapid detokenize: need --tokenizer PATH and --ids 1,2,3\n");
        return 2;
    }
    int *ids = NULL, n = 0;
    if (*ids_s && rp_args_parse_ids(ids_s, &ids, &n) != 0) {
        fprintf(stderr, "rapid detokenize: --ids '%s' is not a comma-separated id list\n", ids_s);
        return 2;
    }
    rp_err err = {0};
    rp_tokenizer *tok;
    if (rp_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "rapid detokenize: %s\n", err.msg);
        rp_free(ids);
        return 1;
    }
    int32_t *ids32 = rp_alloc((size_t)(n ? n : 1) * sizeof(int32_t));
    for (int i = 0; ids32 && i < n; i++)
        ids32[i] = (int32_t)ids[i];
    char *text;
    size_t len;
    rc = 0;
    if (!ids32 || rp_tokenizer_decode(tok, ids32, n, skip_special, &text, &len, &err)) {
        fprintf(stderr, "rapid detokenize: %s\n", ids32 ? err.msg : "out of memory");
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        rp_free(text);
    }
    rp_free(ids32);
    rp_free(ids);
    rp_tokenizer_free(tok);
    return rc;
}
