/* cli/cmd_launch.c - `rapid launch AGENT`: points a coding agent at the local server.
 *
 * Each agent has one config file that is created, or patched in place keeping everything
 * else in it (a timestamped backup FILE.bak-YYYYmmdd-HHMMSS is made first):
 *   claude-code  ~/.claude/settings.json             env.ANTHROPIC_BASE_URL, _AUTH_TOKEN, _MODEL
 *   codex        $CODEX_HOME/config.toml (~/.codex)  model, model_provider, [model_providers.rapid]
 *   aider        ~/.aider.conf.yml                   openai-api-base, openai-api-key, model
 *   opencode     $XDG_CONFIG_HOME/opencode/opencode.json   provider.rapid, model
 *   continue     ~/.continue/config.yaml (config.json when that is what exists)
 * --dry-run prints the diff and writes nothing. Afterwards GET URL/v1/models checks that a
 * server answers (and names the model when --model is not given).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/hub.h"

typedef struct launch_ctx {
    const char *url;    /* server root, no trailing '/' */
    char openai[600];   /* url + "/v1" */
    const char *model;
    const char *key;    /* dummy API key */
} launch_ctx;

/* Builds the new file text from the old one (NULL when the file does not exist). */
typedef rp_status (*patch_fn)(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err);

typedef struct agent {
    const char *name;
    const char *binary;  /* looked up in PATH for 'list' */
    const char *run;     /* what to type afterwards */
    char *(*path)(void); /* config file (heap) */
    patch_fn patch;
} agent;

static char *home_path(const char *rel)
{
    const char *h = getenv("HOME");
    return rp_path_join(h && *h ? h : "/tmp", rel);
}

static char *claude_path(void) { return home_path(".claude/settings.json"); }
static char *aider_path(void) { return home_path(".aider.conf.yml"); }

static char *codex_path(void)
{
    const char *h = getenv("CODEX_HOME");
    return h && *h ? rp_path_join(h, "config.toml") : home_path(".codex/config.toml");
}

static char *opencode_path(void)
{
    const char *x = getenv("XDG_CONFIG_HOME");
    return x && *x ? rp_path_join(x, "opencode/opencode.json")
                   : home_path(".config/opencode/opencode.json");
}

static char *continue_path(void)
{
    char *json = home_path(".continue/config.json"), *yaml = home_path(".continue/config.yaml");
    if (json && rp_path_exists(json) && yaml && !rp_path_exists(yaml)) {
        rp_free(yaml);
        return json;
    }
    rp_free(json);
    return yaml;
}

/* ---- JSON agents ------------------------------------------------------------------------ */

static rp_status load_obj(const char *old, json_t **out, rp_err *err)
{
    if (!old || !*old) {
        *out = json_object();
        return RP_OK;
    }
    json_error_t je;
    *out = json_loads(old, 0, &je);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        return rp_err_set(err, RP_ERR_INVALID, "line %d: %s (not a JSON object); fix the file or "
                                               "move it away and run again",
                          je.line, *out ? "expected an object" : je.text);
    }
    return RP_OK;
}

static json_t *child_obj(json_t *o, const char *key)
{
    json_t *c = json_object_get(o, key);
    if (!json_is_object(c)) {
        c = json_object();
        json_object_set_new(o, key, c);
    }
    return c;
}

static rp_status dump_obj(json_t *o, rp_buf *out, rp_err *err)
{
    char *s = json_dumps(o, JSON_INDENT(2));
    json_decref(o);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_buf_printf(out, "%s\n", s);
    free(s);
    return RP_OK;
}

static rp_status patch_claude(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err)
{
    json_t *o;
    rp_status rc = load_obj(old, &o, err);
    if (rc != RP_OK)
        return rc;
    json_t *env = child_obj(o, "env");
    json_object_set_new(env, "ANTHROPIC_BASE_URL", json_string(x->url));
    json_object_set_new(env, "ANTHROPIC_AUTH_TOKEN", json_string(x->key));
    json_object_set_new(env, "ANTHROPIC_MODEL", json_string(x->model));
    json_object_set_new(env, "ANTHROPIC_SMALL_FAST_MODEL", json_string(x->model));
    return dump_obj(o, out, err);
}

static rp_status patch_opencode(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err)
{
    json_t *o;
    rp_status rc = load_obj(old, &o, err);
    if (rc != RP_OK)
        return rc;
    if (!json_object_get(o, "$schema"))
        json_object_set_new(o, "$schema", json_string("https://opencode.ai/config.json"));
    json_t *rapid = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:{s:s}}}", "npm",
                              "@ai-sdk/openai-compatible", "name", "rapid (local)", "options",
                              "baseURL", x->openai, "apiKey", x->key, "models", x->model, "name",
                              x->model);
    json_object_set_new(child_obj(o, "provider"), "rapid", rapid);
    rp_buf m = {0};
    rp_buf_printf(&m, "rapid/%s", x->model);
    json_object_set_new(o, "model", json_string(m.data));
    rp_buf_deinit(&m);
    return dump_obj(o, out, err);
}

static rp_status patch_continue_json(const launch_ctx *x, const char *old, rp_buf *out,
                                     rp_err *err)
{
    json_t *o;
    rp_status rc = load_obj(old, &o, err);
    if (rc != RP_OK)
        return rc;
    json_t *models = json_object_get(o, "models");
    if (!json_is_array(models)) {
        models = json_array();
        json_object_set_new(o, "models", models);
    }
    json_t *mine = json_pack("{s:s, s:s, s:s, s:s, s:s}", "title", "rapid", "provider", "openai",
                             "model", x->model, "apiBase", x->openai, "apiKey", x->key);
    size_t i;
    json_t *m;
    int replaced = 0;
    json_array_foreach(models, i, m)
    {
        const char *title = json_string_value(json_object_get(m, "title"));
        if (title && strcmp(title, "rapid") == 0) {
            json_array_set(models, i, mine);
            replaced = 1;
            break;
        }
    }
    if (!replaced)
        json_array_insert(models, 0, mine);
    json_decref(mine);
    return dump_obj(o, out, err);
}

/* ---- line-based agents (TOML, YAML) ----------------------------------------------------- */

/* Appends old's lines to out, replacing top-level "key<sep>..." lines whose key is in keys[]
 * (before the first "[table]" for TOML) and adding the missing ones at the end of the top
 * level. values[i] is the full replacement line. */
static void set_top_keys(const char *old, const char *const *keys, const char *const *lines,
                         int n, int toml, rp_buf *out)
{
    int done[8] = {0};
    const char *s = old ? old : "";
    int in_top = 1;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (toml && in_top && s[0] == '[') {
            int missing = 0;
            for (int i = 0; i < n; i++)
                missing |= !done[i];
            while (missing && out->len >= 2 && out->data[out->len - 1] == '\n' &&
                   out->data[out->len - 2] == '\n')
                out->data[--out->len] = '\0';
            for (int i = 0; i < n; i++)
                if (!done[i]) {
                    rp_buf_printf(out, "%s\n", lines[i]);
                    done[i] = 1;
                }
            if (missing)
                rp_buf_putc(out, '\n');
            in_top = 0;
        }
        int replaced = 0;
        for (int i = 0; in_top && i < n && !replaced; i++) {
            size_t k = strlen(keys[i]);
            if (len > k && strncmp(s, keys[i], k) == 0 &&
                (s[k] == ' ' || s[k] == '=' || s[k] == ':')) {
                if (!done[i])
                    rp_buf_printf(out, "%s\n", lines[i]);
                done[i] = 1;
                replaced = 1;
            }
        }
        if (!replaced) {
            rp_buf_append(out, s, len);
            rp_buf_putc(out, '\n');
        }
        s += len + (nl ? 1 : 0);
    }
    for (int i = 0; i < n; i++)
        if (!done[i])
            rp_buf_printf(out, "%s\n", lines[i]);
}

/* Removes the TOML table [name] (up to the next table) from text. */
static void drop_table(const char *text, const char *name, rp_buf *out)
{
    const char *s = text;
    int skipping = 0;
    size_t n = strlen(name);
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (s[0] == '[')
            skipping = len >= n + 2 && s[n + 1] == ']' && strncmp(s + 1, name, n) == 0;
        if (!skipping) {
            rp_buf_append(out, s, len);
            rp_buf_putc(out, '\n');
        }
        s += len + (nl ? 1 : 0);
    }
}

static rp_status patch_codex(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err)
{
    rp_buf a = {0}, b = {0}, l1 = {0};
    drop_table(old ? old : "", "model_providers.rapid", &a);
    rp_buf_printf(&l1, "model = \"%s\"", x->model);
    const char *keys[] = {"model", "model_provider"};
    const char *lines[] = {l1.data, "model_provider = \"rapid\""};
    set_top_keys(a.data, keys, lines, 2, 1, &b);
    while (b.len >= 2 && b.data[b.len - 1] == '\n' && b.data[b.len - 2] == '\n')
        b.data[--b.len] = '\0';
    rp_buf_append(out, b.data, b.len);
    rp_buf_printf(out,
                  "\n[model_providers.rapid]\nname = \"rapid (local)\"\nbase_url = \"%s\"\n"
                  "wire_api = \"chat\"\n",
                  x->openai);
    rp_buf_deinit(&a);
    rp_buf_deinit(&b);
    rp_buf_deinit(&l1);
    return out->data ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

static rp_status patch_aider(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err)
{
    rp_buf l1 = {0}, l2 = {0}, l3 = {0};
    rp_buf_printf(&l1, "openai-api-base: %s", x->openai);
    rp_buf_printf(&l2, "openai-api-key: %s", x->key);
    rp_buf_printf(&l3, "model: openai/%s", x->model);
    const char *keys[] = {"openai-api-base", "openai-api-key", "model"};
    const char *lines[] = {l1.data, l2.data, l3.data};
    set_top_keys(old, keys, lines, 3, 0, out);
    rp_buf_deinit(&l1);
    rp_buf_deinit(&l2);
    rp_buf_deinit(&l3);
    return out->data ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

/* config.yaml: our model is a block between marker comments, first in "models:". */
static rp_status patch_continue_yaml(const launch_ctx *x, const char *old, rp_buf *out,
                                     rp_err *err)
{
    rp_buf block = {0};
    rp_buf_printf(&block,
                  "  # rapid:begin (managed by 'rapid launch continue')\n"
                  "  - name: rapid %s\n    provider: openai\n    model: %s\n    apiBase: %s\n"
                  "    apiKey: %s\n    roles: [chat, edit, apply]\n  # rapid:end\n",
                  x->model, x->model, x->openai, x->key);
    if (!old || !*old)
        rp_buf_printf(out, "name: Local Assistant\nversion: 1.0.0\nschema: v1\nmodels:\n%s",
                      block.data);
    const char *s = old ? old : "";
    int skipping = 0, placed = 0;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (len >= 14 && memmem(s, len, "# rapid:begin", 13))
            skipping = 1;
        if (!skipping) {
            rp_buf_append(out, s, len);
            rp_buf_putc(out, '\n');
            if (!placed && len >= 7 && strncmp(s, "models:", 7) == 0) {
                rp_buf_puts(out, block.data);
                placed = 1;
            }
        }
        if (skipping && memmem(s, len, "# rapid:end", 11))
            skipping = 0;
        s += len + (nl ? 1 : 0);
    }
    if (old && *old && !placed)
        rp_buf_printf(out, "models:\n%s", block.data);
    rp_buf_deinit(&block);
    return out->data ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

static rp_status patch_continue(const launch_ctx *x, const char *old, rp_buf *out, rp_err *err)
{
    return patch_continue_yaml(x, old, out, err);
}

static const agent g_agents[] = {
    {"claude-code", "claude", "claude", claude_path, patch_claude},
    {"codex", "codex", "codex", codex_path, patch_codex},
    {"aider", "aider", "aider", aider_path, patch_aider},
    {"opencode", "opencode", "opencode", opencode_path, patch_opencode},
    {"continue", NULL, "reload Continue in your editor", continue_path, patch_continue},
};

/* ---- diff (longest common subsequence of lines; config files are small) ------------------ */

typedef struct lines {
    const char **p;
    size_t *len;
    int n;
} lines;

static void split_lines(const char *s, lines *l)
{
    int n = 0;
    for (const char *t = s; *t; t++)
        n += *t == '\n';
    n += s[0] && s[strlen(s) - 1] != '\n';
    l->p = rp_calloc((size_t)n + 1, sizeof *l->p);
    l->len = rp_calloc((size_t)n + 1, sizeof *l->len);
    l->n = 0;
    while (*s && l->p && l->len) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        l->p[l->n] = s;
        l->len[l->n++] = len;
        s += len + (nl ? 1 : 0);
    }
}

static int same(const lines *a, int i, const lines *b, int j)
{
    return a->len[i] == b->len[j] && memcmp(a->p[i], b->p[j], a->len[i]) == 0;
}

static void print_diff(const char *path, const char *old, const char *new_text)
{
    lines a, b;
    split_lines(old ? old : "", &a);
    split_lines(new_text, &b);
    int n = a.n, m = b.n;
    int *t = rp_calloc((size_t)(n + 1) * (size_t)(m + 1), sizeof *t);
    if (!t || !a.p || !b.p) {
        printf("(out of memory for the diff)\n");
        goto out;
    }
#define T(i, j) t[(size_t)(i) * (size_t)(m + 1) + (size_t)(j)]
    for (int i = n - 1; i >= 0; i--)
        for (int j = m - 1; j >= 0; j--)
            T(i, j) = same(&a, i, &b, j) ? T(i + 1, j + 1) + 1
                      : T(i + 1, j) > T(i, j + 1) ? T(i + 1, j) : T(i, j + 1);
    printf("--- %s\n+++ %s (after rapid launch)\n", old ? path : "/dev/null", path);
    int i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && same(&a, i, &b, j)) {
            printf(" %.*s\n", (int)a.len[i], a.p[i]);
            i++;
            j++;
        } else if (i < n && (j == m || T(i + 1, j) >= T(i, j + 1))) {
            printf("-%.*s\n", (int)a.len[i], a.p[i]);
            i++;
        } else {
            printf("+%.*s\n", (int)b.len[j], b.p[j]);
            j++;
        }
    }
#undef T
out:
    rp_free(t);
    rp_free(a.p);
    rp_free(a.len);
    rp_free(b.p);
    rp_free(b.len);
}

/* ---- the command ------------------------------------------------------------------------ */

static rp_status make_parent_dirs(const char *path, rp_err *err)
{
    char *p = rp_strdup(path);
    if (!p)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rp_status rc = rp_err_set(err, RP_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            rp_free(p);
            return rc;
        }
        *s = '/';
    }
    rp_free(p);
    return RP_OK;
}

static rp_status backup(const char *path, const char *old, char **out, rp_err *err)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    rp_buf b = {0};
    for (int i = 0; i < 100; i++) {
        rp_buf_reset(&b);
        rp_buf_printf(&b, "%s.bak-%s%s", path, stamp, "");
        if (i)
            rp_buf_printf(&b, ".%d", i);
        if (!rp_path_exists(b.data))
            break;
    }
    rp_status rc = rp_file_write(b.data, old, strlen(old), err);
    *out = rc == RP_OK ? rp_buf_take(&b) : NULL;
    rp_buf_deinit(&b);
    return rc;
}

/* The first model id the server lists, or NULL; *answered says whether it answered. */
static char *server_model(const char *url, int *answered, long *code_out)
{
    rp_buf u = {0};
    rp_buf_printf(&u, "%s/v1/models", url);
    char *body = NULL;
    long code = 0;
    rp_status rc = rp_http_request(u.data, NULL, NULL, 3, &body, &code, NULL);
    rp_buf_deinit(&u);
    *answered = rc == RP_OK && code == 200;
    *code_out = code;
    char *id = NULL;
    json_t *j = *answered ? json_loads(body, 0, NULL) : NULL;
    const char *s = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    if (s)
        id = rp_strdup(s);
    json_decref(j);
    rp_free(body);
    return id;
}

static int on_path(const char *bin)
{
    const char *path = getenv("PATH");
    if (!bin || !path)
        return 0;
    char *copy = rp_strdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = rp_path_join(d, bin);
        found = p && access(p, X_OK) == 0;
        rp_free(p);
    }
    rp_free(copy);
    return found;
}

static int launch_list(const char *url)
{
    printf("%-12s %-10s %-11s %s\n", "AGENT", "INSTALLED", "CONFIGURED", "CONFIG FILE");
    for (size_t i = 0; i < RP_ARRAY_LEN(g_agents); i++) {
        const agent *a = &g_agents[i];
        char *path = a->path(), *text = NULL;
        int configured = path && rp_file_read(path, &text, NULL, NULL) == RP_OK &&
                         strstr(text, url) != NULL;
        printf("%-12s %-10s %-11s %s\n", a->name, a->binary ? (on_path(a->binary) ? "yes" : "no") : "(editor)",
               configured ? "yes" : "no", path ? path : "");
        rp_free(text);
        rp_free(path);
    }
    printf("\n'rapid launch AGENT' points one at %s\n", url);
    return 0;
}

static int launch_one(const agent *a, launch_ctx *x, int dry_run)
{
    char *path = a->path(), *old = NULL;
    rp_err err;
    if (!path) {
        fprintf(stderr, "rapid launch: out of memory\n");
        return 1;
    }
    rp_status rc = rp_file_read(path, &old, NULL, &err);
    if (rc != RP_OK && rc != RP_ERR_NOT_FOUND) {
        fprintf(stderr, "rapid launch: %s\n", err.msg);
        rp_free(path);
        return 1;
    }
    rp_buf out = {0};
    patch_fn fn = a->patch;
    size_t plen = strlen(path);
    if (a->patch == patch_continue && plen > 5 && strcmp(path + plen - 5, ".json") == 0)
        fn = patch_continue_json;
    rc = fn(x, old, &out, &err);
    int status = 0;
    if (rc != RP_OK) {
        fprintf(stderr, "rapid launch %s: cannot patch %s: %s\n", a->name, path, err.msg);
        status = 1;
    } else if (old && strcmp(old, out.data) == 0) {
        printf("%s already points at %s (%s unchanged)\n", a->name, x->url, path);
    } else if (dry_run) {
        print_diff(path, old, out.data);
        printf("(dry run: nothing written)\n");
    } else {
        char *bak = NULL;
        rc = make_parent_dirs(path, &err);
        if (rc == RP_OK && old)
            rc = backup(path, old, &bak, &err);
        if (rc == RP_OK)
            rc = rp_file_write(path, out.data, out.len, &err);
        if (rc != RP_OK) {
            fprintf(stderr, "rapid launch %s: %s\n", a->name, err.msg);
            status = 1;
        } else {
            printf("%s %s for %s (model %s)\n", old ? "patched" : "wrote", path, x->url, x->model);
            if (bak)
                printf("backup: %s\n", bak);
            printf("next: %s\n", a->run);
        }
        rp_free(bak);
    }
    rp_buf_deinit(&out);
    rp_free(old);
    rp_free(path);
    return status;
}

int rp_cmd_launch(int argc, char **argv)
{
    const char *url = NULL, *model = NULL, *pos[1];
    int dry_run = 0, no_check = 0, n_pos = 0;
    rp_opt opts[] = {{"url", &url, NULL},
                     {"model", &model, NULL},
                     {"dry-run", NULL, &dry_run},
                     {"no-check", NULL, &no_check}};
    if (rp_args_parse(argc, argv, opts, 4, pos, 1, &n_pos) != 0)
        return 2;
    if (!url)
        url = getenv("RAPID_URL") && *getenv("RAPID_URL") ? getenv("RAPID_URL") : "http://127.0.0.1:8000";
    char root[512];
    snprintf(root, sizeof root, "%s", url);
    size_t n = strlen(root);
    while (n && root[n - 1] == '/')
        root[--n] = '\0';
    if (n > 3 && strcmp(root + n - 3, "/v1") == 0)
        root[n -= 3] = '\0';
    if (n_pos != 1) {
        fprintf(stderr, "usage: rapid launch AGENT|list (claude-code, codex, aider, opencode, "
                        "continue)\n");
        return 2;
    }
    if (strcmp(pos[0], "list") == 0)
        return launch_list(root);
    const agent *a = NULL;
    for (size_t i = 0; i < RP_ARRAY_LEN(g_agents); i++)
        if (strcmp(g_agents[i].name, pos[0]) == 0 ||
            (strcmp(pos[0], "claude") == 0 && i == 0))
            a = &g_agents[i];
    if (!a) {
        fprintf(stderr, "rapid launch: unknown agent '%s'; 'rapid launch list' shows the "
                        "supported ones\n", pos[0]);
        return 2;
    }
    launch_ctx x = {.url = root, .model = model, .key = "rapid-local"};
    snprintf(x.openai, sizeof x.openai, "%s/v1", root);
    int answered = 0;
    long code = 0;
    char *served = no_check ? NULL : server_model(root, &answered, &code);
    if (!x.model)
        x.model = served ? served : "default";
    int status = launch_one(a, &x, dry_run);
    if (!no_check) {
        if (answered)
            printf("server: %s answers (model %s)\n", root, served ? served : "?");
        else
            printf("server: nothing answers at %s/v1/models%s; start one with 'rapid serve "
                   "MODEL' before using %s\n",
                   root, code ? " (HTTP error)" : "", a->name);
    }
    rp_free(served);
    return status;
}
