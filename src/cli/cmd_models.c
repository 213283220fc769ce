/* cli/cmd_models.c - `rapid models` (the catalog and user aliases, with what is downloaded)
 * and `rapid ls` (only what is on disk). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"

static void fmt_params(double b, char *out, size_t n)
{
    if (b <= 0)
        snprintf(out, n, "-");
    else if (b < 1)
        snprintf(out, n, "%.0fM", b * 1000);
    else
        snprintf(out, n, "%.1fB", b);
}

static void fmt_ctx(int c, char *out, size_t n)
{
    if (c <= 0)
        snprintf(out, n, "-");
    else if (c >= 1024 && c % 1024 == 0)
        snprintf(out, n, "%dk", c / 1024);
    else if (c >= 1000)
        snprintf(out, n, "%dk", (c + 500) / 1000);
    else
        snprintf(out, n, "%d", c);
}

/* Directory on disk for an entry, or NULL. */
static char *entry_dir(const rp_catalog *cat, const rp_catalog_entry *e)
{
    rp_model_ref ref;
    if (rp_catalog_resolve(cat, e->alias, &ref, NULL) != RP_OK)
        return NULL;
    char *dir = ref.dir;
    ref.dir = NULL;
    rp_model_ref_deinit(&ref);
    return dir;
}

static int load_catalog(rp_catalog **cat)
{
    rp_err err;
    if (rp_catalog_load(cat, &err) != RP_OK) {
        fprintf(stderr, "rapid: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int rp_cmd_models(int argc, char **argv)
{
    int as_json = 0;
    rp_opt opts[] = {{"json", NULL, &as_json}};
    if (rp_args_parse(argc, argv, opts, 1, NULL, 0, NULL) != 0)
        return 2;
    rp_catalog *cat;
    if (load_catalog(&cat))
        return 1;
    json_t *arr = as_json ? json_array() : NULL;
    if (!as_json)
        printf("%-26s %-48s %7s %-7s %9s %9s %7s  %s\n", "ALIAS", "REPO", "PARAMS", "QUANT",
               "DOWNLOAD", "MEMORY", "CONTEXT", "LOCAL");
    for (int i = 0; i < rp_catalog_count(cat); i++) {
        const rp_catalog_entry *e = rp_catalog_at(cat, i);
        char *dir = entry_dir(cat, e);
        const char *where = e->embedded ? "(embedded)" : e->repo ? e->repo : e->path;
        if (as_json) {
            json_t *o = json_pack("{s:s, s:s?, s:s?, s:s, s:s, s:s, s:f, s:f, s:f, s:i, s:s, s:s,"
                                  " s:b, s:b, s:s?}",
                                  "alias", e->alias, "repo", e->repo, "path", e->path, "family",
                                  e->family, "quant", e->quant, "format", e->format, "params_b",
                                  e->params_b, "download_gb", e->download_gb, "memory_gb",
                                  e->memory_gb, "context", e->context, "tool_parser",
                                  e->tool_parser, "reasoning_parser", e->reasoning_parser,
                                  "user", e->user, "downloaded", dir != NULL, "dir", dir);
            json_array_append_new(arr, o);
        } else {
            char params[16], ctx[16], dl[32] = "-", mem[32] = "-";
            fmt_params(e->params_b, params, sizeof params);
            fmt_ctx(e->context, ctx, sizeof ctx);
            if (e->download_gb > 0)
                snprintf(dl, sizeof dl, "%.1f GB", e->download_gb);
            if (e->memory_gb > 0)
                snprintf(mem, sizeof mem, "%.1f GB", e->memory_gb);
            printf("%-26s %-48s %7s %-7s %9s %9s %7s  %s%s\n", e->alias, where ? where : "-",
                   params, e->quant[0] ? e->quant : "-", dl, mem, ctx, dir ? "yes" : "-",
                   e->user ? " (user alias)" : "");
        }
        rp_free(dir);
    }
    if (as_json) {
        char *s = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
    } else {
        printf("\n'rapid pull ALIAS' downloads one; 'rapid recipe' suggests what fits this "
               "machine.\n");
    }
    rp_catalog_free(cat);
    return 0;
}

int rp_cmd_ls(int argc, char **argv)
{
    int as_json = 0;
    rp_opt opts[] = {{"json", NULL, &as_json}};
    if (rp_args_parse(argc, argv, opts, 1, NULL, 0, NULL) != 0)
        return 2;
    rp_catalog *cat;
    if (load_catalog(&cat))
        return 1;
    char **repos = NULL;
    int n = 0;
    rp_err err;
    if (rp_hub_list(&repos, &n, &err) != RP_OK) {
        fprintf(stderr, "rapid ls: %s\n", err.msg);
        rp_catalog_free(cat);
        return 1;
    }
    json_t *arr = as_json ? json_array() : NULL;
    if (!as_json)
        printf("%-26s %-48s %9s  %s\n", "ALIAS", "REPO", "SIZE", "PATH");
    int shown = 0;
    for (int i = 0; i < rp_catalog_count(cat); i++) { /* the embedded model and path aliases */
        const rp_catalog_entry *e = rp_catalog_at(cat, i);
        if (!e->embedded && !e->path)
            continue;
        char *dir = entry_dir(cat, e);
        if (dir) {
            if (as_json)
                json_array_append_new(arr, json_pack("{s:s, s:n, s:s}", "alias", e->alias,
                                                     "repo", "dir", dir));
            else
                printf("%-26s %-48s %9s  %s\n", e->alias, e->embedded ? "(embedded)" : "(local)",
                       "-", dir);
            shown++;
        }
        rp_free(dir);
    }
    for (int i = 0; i < n; i++) {
        const rp_catalog_entry *e = rp_catalog_find_repo(cat, repos[i]);
        char size[32], *dir = rp_hub_snapshot_dir(repos[i], NULL);
        int64_t bytes = rp_hub_repo_bytes(repos[i]);
        rp_hub_format_bytes(bytes > 0 ? (double)bytes : 0, size, sizeof size);
        if (as_json)
            json_array_append_new(arr, json_pack("{s:s?, s:s, s:I, s:s?}", "alias",
                                                 e ? e->alias : NULL, "repo", repos[i], "bytes",
                                                 (json_int_t)bytes, "dir", dir));
        else
            printf("%-26s %-48s %9s  %s\n", e ? e->alias : "-", repos[i], size, dir ? dir : "");
        rp_free(dir);
        shown++;
    }
    if (as_json) {
        char *s = json_dumps(arr, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
    } else if (!shown) {
        char *cache = rp_hub_cache_dir();
        printf("(nothing downloaded in %s; try 'rapid pull qwen3.5-4b-4bit')\n", cache ? cache : "");
        rp_free(cache);
    }
    rp_hub_list_free(repos, n);
    rp_catalog_free(cat);
    return 0;
}
