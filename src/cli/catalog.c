/* cli/catalog.c - reading models/catalog.json and aliases.json; resolving model names. */
#include "cli/catalog.h"

#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "cli/hub.h"
#include "cli/paths.h"

struct rp_catalog {
    char *file;
    json_t *root;    /* catalog.json; entries point into it */
    json_t *aliases; /* aliases.json (object) or NULL */
    rp_catalog_entry *entries;
    int n_entries;
    rp_recipe_tier *tiers;
    int n_tiers;
    const char **file_lists; /* storage for every entry's files[] */
};

static char *exe_relative(const char *rel)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return rp_path_join(buf, rel);
}

static char *find_catalog_file(void)
{
    const char *env = getenv("RAPID_CATALOG");
    if (env && *env)
        return rp_strdup(env);
    static const char *rel[] = {"../models/catalog.json", "../share/rapid/models/catalog.json",
                                "../../models/catalog.json"};
    for (size_t i = 0; i < RP_ARRAY_LEN(rel); i++) {
        char *p = exe_relative(rel[i]);
        if (p && rp_path_exists(p))
            return p;
        rp_free(p);
    }
    return NULL;
}

char *rp_aliases_path(void)
{
    rp_buf b = {0};
    const char *v = getenv("RAPID_CONFIG_DIR");
    if (v && *v)
        rp_buf_printf(&b, "%s/aliases.json", v);
    else if ((v = getenv("XDG_CONFIG_HOME")) && *v)
        rp_buf_printf(&b, "%s/rapid/aliases.json", v);
    else
        rp_buf_printf(&b, "%s/.config/rapid/aliases.json", getenv("HOME") ? getenv("HOME") : "/tmp");
    return rp_buf_take(&b);
}

static rp_status load_json(const char *path, json_t **out, int missing_ok, rp_err *err)
{
    *out = NULL;
    if (missing_ok && !rp_path_exists(path))
        return RP_OK;
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (!rp_path_exists(path))
            return rp_err_set(err, RP_ERR_NOT_FOUND, "cannot open %s", path);
        return rp_err_set(err, RP_ERR_INVALID, "%s:%d: %s (fix or remove the file)", path, je.line,
                          je.text);
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return rp_err_set(err, RP_ERR_INVALID, "%s: expected a JSON object", path);
    }
    *out = j;
    return RP_OK;
}

static const char *str_or(json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static double num_or(json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static void fill_entry(rp_catalog_entry *e, json_t *m)
{
    e->alias = str_or(m, "alias", "");
    e->repo = str_or(m, "repo", NULL);
    e->family = str_or(m, "family", "");
    e->quant = str_or(m, "quant", "");
    e->format = str_or(m, "format", "hf");
    e->tool_parser = str_or(m, "tool_parser", "none");
    e->reasoning_parser = str_or(m, "reasoning_parser", "none");
    e->summary = str_or(m, "summary", "");
    e->params_b = num_or(m, "params_b", 0);
    e->download_gb = num_or(m, "download_gb", 0);
    e->memory_gb = num_or(m, "memory_gb", 0);
    e->context = (int)num_or(m, "context", 0);
    e->embedded = json_is_true(json_object_get(m, "embedded"));
}

static const rp_catalog_entry *find_in(const rp_catalog_entry *v, int n, const char *alias)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].alias, alias) == 0)
            return &v[i];
    return NULL;
}

/* User aliases come first; one naming another alias inherits its facts. */
static void add_user_aliases(rp_catalog *cat, int n_catalog_first)
{
    const char *name;
    json_t *v;
    int k = 0;
    json_object_foreach(cat->aliases, name, v)
    {
        const char *target = json_is_string(v) ? json_string_value(v)
                                               : str_or(v, "repo", str_or(v, "path", NULL));
        if (!target)
            continue;
        rp_catalog_entry *e = &cat->entries[k++];
        const rp_catalog_entry *base =
            find_in(cat->entries + n_catalog_first, cat->n_entries - n_catalog_first, target);
        if (base) {
            *e = *base;
        } else {
            memset(e, 0, sizeof *e);
            e->family = e->quant = e->summary = "";
            e->format = "hf";
            e->tool_parser = e->reasoning_parser = "none";
            if (target[0] == '/' || target[0] == '.' || target[0] == '~')
                e->path = target;
            else
                e->repo = target;
            for (int i = n_catalog_first; i < cat->n_entries; i++) /* known repo: its facts */
                if (e->repo && cat->entries[i].repo && strcmp(cat->entries[i].repo, e->repo) == 0) {
                    *e = cat->entries[i];
                    break;
                }
        }
        e->alias = name;
        e->user = 1;
    }
}

static rp_status parse_models(rp_catalog *cat, rp_err *err)
{
    json_t *models = json_object_get(cat->root, "models");
    if (!json_is_array(models))
        return rp_err_set(err, RP_ERR_INVALID, "%s: no \"models\" array", cat->file);
    size_t n_user = cat->aliases ? json_object_size(cat->aliases) : 0;
    size_t n = json_array_size(models), n_files = 0;
    for (size_t i = 0; i < n; i++)
        n_files += json_array_size(json_object_get(json_array_get(models, i), "files"));
    cat->entries = rp_calloc(n + n_user + 1, sizeof *cat->entries);
    cat->file_lists = rp_calloc(n_files + 1, sizeof *cat->file_lists);
    if (!cat->entries || !cat->file_lists)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    size_t i_file = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(models, i);
        rp_catalog_entry *e = &cat->entries[n_user + i];
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "alias")))
            return rp_err_set(err, RP_ERR_INVALID, "%s: model %zu has no alias", cat->file, i);
        fill_entry(e, m);
        json_t *files = json_object_get(m, "files");
        e->files = &cat->file_lists[i_file];
        for (size_t j = 0; j < json_array_size(files); j++)
            if (json_is_string(json_array_get(files, j)))
                cat->file_lists[i_file + (size_t)e->n_files++] =
                    json_string_value(json_array_get(files, j));
        i_file += (size_t)e->n_files;
    }
    cat->n_entries = (int)(n + n_user);
    add_user_aliases(cat, (int)n_user);
    /* user aliases whose value was not usable left zeroed holes: drop them */
    int k = 0;
    for (int i = 0; i < cat->n_entries; i++)
        if (cat->entries[i].alias && cat->entries[i].alias[0])
            cat->entries[k++] = cat->entries[i];
    cat->n_entries = k;
    return RP_OK;
}

static int cmp_tier(const void *a, const void *b)
{
    double x = ((const rp_recipe_tier *)a)->min_memory_gb;
    double y = ((const rp_recipe_tier *)b)->min_memory_gb;
    return (x > y) - (x < y);
}

static rp_status parse_tiers(rp_catalog *cat, rp_err *err)
{
    json_t *rec = json_object_get(cat->root, "recipes");
    size_t n = json_is_array(rec) ? json_array_size(rec) : 0;
    cat->tiers = rp_calloc(n + 1, sizeof *cat->tiers);
    if (!cat->tiers)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(rec, i);
        rp_recipe_tier *r = &cat->tiers[cat->n_tiers];
        r->tier = str_or(t, "tier", "?");
        r->min_memory_gb = num_or(t, "min_memory_gb", 0);
        r->smart = str_or(t, "smart", NULL);
        r->fast = str_or(t, "fast", NULL);
        if (!r->smart || !r->fast)
            return rp_err_set(err, RP_ERR_INVALID, "%s: recipe %zu needs smart and fast",
                              cat->file, i);
        cat->n_tiers++;
    }
    qsort(cat->tiers, (size_t)cat->n_tiers, sizeof *cat->tiers, cmp_tier);
    return RP_OK;
}

rp_status rp_catalog_load(rp_catalog **out, rp_err *err)
{
    *out = NULL;
    rp_catalog *cat = rp_calloc(1, sizeof *cat);
    if (!cat)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    cat->file = find_catalog_file();
    rp_status rc = RP_OK;
    if (!cat->file)
        rc = rp_err_set(err, RP_ERR_NOT_FOUND,
                        "no model catalog found next to the rapid binary; set RAPID_CATALOG to "
                        "the path of models/catalog.json");
    if (rc == RP_OK)
        rc = load_json(cat->file, &cat->root, 0, err);
    char *apath = rc == RP_OK ? rp_aliases_path() : NULL;
    if (apath)
        rc = load_json(apath, &cat->aliases, 1, err);
    rp_free(apath);
    if (rc == RP_OK)
        rc = parse_models(cat, err);
    if (rc == RP_OK)
        rc = parse_tiers(cat, err);
    if (rc != RP_OK) {
        rp_catalog_free(cat);
        return rc;
    }
    *out = cat;
    return RP_OK;
}

void rp_catalog_free(rp_catalog *cat)
{
    if (!cat)
        return;
    json_decref(cat->root);
    json_decref(cat->aliases);
    rp_free(cat->entries);
    rp_free(cat->tiers);
    rp_free(cat->file_lists);
    rp_free(cat->file);
    rp_free(cat);
}

const char *rp_catalog_file(const rp_catalog *cat) { return cat->file; }
int rp_catalog_count(const rp_catalog *cat) { return cat->n_entries; }
const rp_catalog_entry *rp_catalog_at(const rp_catalog *cat, int i) { return &cat->entries[i]; }
int rp_catalog_n_tiers(const rp_catalog *cat) { return cat->n_tiers; }
const rp_recipe_tier *rp_catalog_tier(const rp_catalog *cat, int i) { return &cat->tiers[i]; }

const rp_catalog_entry *rp_catalog_find(const rp_catalog *cat, const char *alias)
{
    return find_in(cat->entries, cat->n_entries, alias);
}

const rp_catalog_entry *rp_catalog_find_repo(const rp_catalog *cat, const char *repo)
{
    for (int i = 0; i < cat->n_entries; i++)
        if (!cat->entries[i].user && cat->entries[i].repo &&
            strcasecmp(cat->entries[i].repo, repo) == 0)
            return &cat->entries[i];
    return NULL;
}

int rp_catalog_glob(const char *pattern, const char *name)
{
    return fnmatch(pattern, name, 0) == 0;
}

static int looks_like_repo(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash && slash != s && slash[1] && !strchr(slash + 1, '/') && s[0] != '.';
}

static char *expand_home(const char *p)
{
    if (p[0] != '~')
        return rp_strdup(p);
    rp_buf b = {0};
    rp_buf_printf(&b, "%s%s", getenv("HOME") ? getenv("HOME") : "", p + 1);
    return rp_buf_take(&b);
}

rp_status rp_catalog_resolve(const rp_catalog *cat, const char *name, rp_model_ref *out,
                             rp_err *err)
{
    memset(out, 0, sizeof *out);
    out->name = rp_strdup(name);
    const rp_catalog_entry *e = rp_catalog_find(cat, name);
    out->entry = e;
    if (e && e->embedded) {
        out->dir = rp_default_model_dir();
        return RP_OK;
    }
    if (e && e->path) {
        out->dir = expand_home(e->path);
        if (out->dir && !rp_path_is_dir(out->dir)) {
            rp_free(out->dir);
            out->dir = NULL;
        }
        return RP_OK;
    }
    if (e && e->repo) {
        out->repo = rp_strdup(e->repo);
        out->dir = rp_hub_snapshot_dir(e->repo, NULL);
        return RP_OK;
    }
    if (rp_path_is_dir(name)) {
        out->dir = rp_strdup(name);
        return RP_OK;
    }
    if (looks_like_repo(name) && !rp_path_exists(name)) {
        out->repo = rp_strdup(name);
        out->entry = rp_catalog_find_repo(cat, name);
        out->dir = rp_hub_snapshot_dir(name, NULL);
        return RP_OK;
    }
    rp_model_ref_deinit(out);
    return rp_err_set(err, RP_ERR_NOT_FOUND,
                      "unknown model '%s': not an alias ('rapid models' lists them), a directory, "
                      "or an org/name repo on the hub",
                      name);
}

void rp_model_ref_deinit(rp_model_ref *ref)
{
    if (!ref)
        return;
    rp_free(ref->name);
    rp_free(ref->repo);
    rp_free(ref->dir);
    memset(ref, 0, sizeof *ref);
}

/* ---- aliases.json ----------------------------------------------------------------------- */

static rp_status make_parent(const char *path, rp_err *err)
{
    char *p = rp_strdup(path);
    if (!p)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    char *slash = strrchr(p, '/');
    rp_status rc = RP_OK;
    if (slash && slash != p) {
        *slash = '\0';
        for (char *s = p + 1; rc == RP_OK; s++) {
            if (*s != '/' && *s != '\0')
                continue;
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                rc = rp_err_set(err, RP_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            *s = c;
            if (!c)
                break;
        }
    }
    rp_free(p);
    return rc;
}

static rp_status save_aliases(const char *path, json_t *obj, rp_err *err)
{
    rp_status rc = make_parent(path, err);
    if (rc != RP_OK)
        return rc;
    char *text = json_dumps(obj, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    rp_buf tmp = {0}, body = {0};
    rp_buf_printf(&tmp, "%s.tmp", path);
    rp_buf_printf(&body, "%s\n", text);
    free(text); /* jansson's allocation */
    rc = rp_file_write(tmp.data, body.data, body.len, err);
    if (rc == RP_OK && rename(tmp.data, path) != 0)
        rc = rp_err_set(err, RP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    rp_buf_deinit(&tmp);
    rp_buf_deinit(&body);
    return rc;
}

static rp_status edit_aliases(const char *name, const char *target, rp_err *err)
{
    char *path = rp_aliases_path();
    if (!path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    json_t *obj = NULL;
    rp_status rc = load_json(path, &obj, 1, err);
    if (rc == RP_OK && !obj)
        obj = json_object();
    if (rc == RP_OK && target) {
        json_object_set_new(obj, name, json_string(target));
    } else if (rc == RP_OK && json_object_del(obj, name) != 0) {
        rc = rp_err_set(err, RP_ERR_NOT_FOUND, "no user alias '%s' in %s ('rapid alias list')",
                        name, path);
    }
    if (rc == RP_OK)
        rc = save_aliases(path, obj, err);
    json_decref(obj);
    rp_free(path);
    return rc;
}

rp_status rp_aliases_set(const char *name, const char *target, rp_err *err)
{
    if (!name[0] || strchr(name, '/') || strchr(name, ' '))
        return rp_err_set(err, RP_ERR_INVALID,
                          "alias '%s' must be a single word without '/' or spaces", name);
    if (!target[0])
        return rp_err_set(err, RP_ERR_INVALID, "alias '%s' needs a target", name);
    return edit_aliases(name, target, err);
}

rp_status rp_aliases_rm(const char *name, rp_err *err) { return edit_aliases(name, NULL, err); }

/* ---- machine probe ---------------------------------------------------------------------- */

static void read_meminfo(rp_machine *m)
{
    const char *path = getenv("RAPID_MEMINFO");
    FILE *f = fopen(path && *path ? path : "/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        double kb;
        if (sscanf(line, "MemTotal: %lf kB", &kb) == 1)
            m->ram_total_gb = kb * 1024 / 1e9;
        else if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            m->ram_available_gb = kb * 1024 / 1e9;
    }
    fclose(f);
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    size_t i = 0;
    while (s[i] == ' ')
        i++;
    memmove(s, s + i, strlen(s + i) + 1);
}

static void read_gpus(rp_machine *m)
{
    const char *smi = getenv("RAPID_NVIDIA_SMI");
    rp_buf cmd = {0};
    rp_buf_printf(&cmd,
                  "%s --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits "
                  "2>/dev/null",
                  smi && *smi ? smi : "nvidia-smi");
    FILE *p = cmd.data ? popen(cmd.data, "r") : NULL;
    rp_buf_deinit(&cmd);
    if (!p)
        return;
    char line[512];
    while (fgets(line, sizeof line, p) && m->n_gpus < RP_MAX_GPUS) {
        char *a = strtok(line, ","), *b = strtok(NULL, ","), *c = strtok(NULL, ",");
        if (!a || !b)
            continue;
        rp_gpu *g = &m->gpus[m->n_gpus];
        snprintf(g->name, sizeof g->name, "%s", a);
        trim(g->name);
        g->memory_gb = strtod(b, NULL) * 1048576.0 / 1e9; /* MiB */
        snprintf(g->driver, sizeof g->driver, "%s", c ? c : "");
        trim(g->driver);
        if (g->memory_gb > 0)
            m->n_gpus++;
    }
    int st = pclose(p);
    m->have_smi = st == 0;
}

void rp_machine_probe(rp_machine *m)
{
    memset(m, 0, sizeof *m);
    read_meminfo(m);
    read_gpus(m);
}

/* ---- ensure a model is on disk ---------------------------------------------------------- */

static int ask_yes(const char *question)
{
    if (!isatty(STDIN_FILENO))
        return 0;
    fprintf(stderr, "%s [y/N] ", question);
    fflush(stderr);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return line[0] == 'y' || line[0] == 'Y';
}

rp_status rp_catalog_ensure(const rp_catalog *cat, const char *name, int auto_pull, char **dir,
                            rp_err *err)
{
    *dir = NULL;
    rp_model_ref ref;
    rp_status rc = rp_catalog_resolve(cat, name, &ref, err);
    if (rc != RP_OK)
        return rc;
    if (ref.dir) {
        *dir = ref.dir;
        ref.dir = NULL;
        rp_model_ref_deinit(&ref);
        return RP_OK;
    }
    if (!ref.repo) {
        rc = rp_err_set(err, RP_ERR_NOT_FOUND, "%s is not on disk%s", name,
                        ref.entry && ref.entry->embedded
                            ? " (no embedded model found; set RAPID_DEFAULT_MODEL)"
                            : "");
        rp_model_ref_deinit(&ref);
        return rc;
    }
    const char *env = getenv("RAPID_AUTO_PULL");
    int yes = auto_pull || (env && strcmp(env, "1") == 0);
    if (!yes) {
        char q[600], size[48] = "";
        if (ref.entry && ref.entry->download_gb > 0)
            snprintf(size, sizeof size, ", about %.1f GB", ref.entry->download_gb);
        snprintf(q, sizeof q, "%s (%s) is not downloaded%s. Pull it now?", name, ref.repo, size);
        yes = ask_yes(q);
    }
    if (!yes) {
        rc = rp_err_set(err, RP_ERR_NOT_FOUND,
                        "%s is not downloaded: run 'rapid pull %s' (or pass --yes, or set "
                        "RAPID_AUTO_PULL=1)",
                        name, name);
        rp_model_ref_deinit(&ref);
        return rc;
    }
    rp_hub_pull_opts po = {.progress = isatty(STDERR_FILENO) ? RP_HUB_BAR : RP_HUB_LINES,
                           .out = stderr};
    if (ref.entry && ref.entry->n_files) {
        po.patterns = ref.entry->files;
        po.n_patterns = ref.entry->n_files;
    }
    rc = rp_hub_pull(ref.repo, &po, dir, err);
    rp_model_ref_deinit(&ref);
    return rc;
}
