/* Unit tests for src/cli/catalog and the cache side of src/cli/hub: loading the real
 * catalog, user aliases, name resolution, cache paths and snapshot lookup. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "cli/catalog.h"
#include "cli/hub.h"

static char g_tmp[64]; /* per test process (Criterion forks one per test) */

static void setup(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/rp_cat_XXXXXX");
    cr_assert_not_null(mkdtemp(g_tmp));
    char path[512];
    snprintf(path, sizeof path, "%s/models/catalog.json", getenv("RP_SOURCE_DIR"));
    setenv("RAPID_CATALOG", path, 1);
    setenv("RAPID_CONFIG_DIR", g_tmp, 1);
    snprintf(path, sizeof path, "%s/hub", g_tmp);
    setenv("HF_HUB_CACHE", path, 1);
    unsetenv("RAPID_DEFAULT_MODEL");
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(catalog, .init = setup, .fini = teardown);

Test(catalog, loads_the_real_catalog)
{
    rp_catalog *cat;
    rp_err err;
    cr_assert_eq(rp_catalog_load(&cat, &err), RP_OK, "%s", err.msg);
    const rp_catalog_entry *e = rp_catalog_find(cat, "qwen3.5-4b-4bit");
    cr_assert_not_null(e);
    cr_assert_str_eq(e->repo, "mlx-community/Qwen3.5-4B-4bit");
    cr_assert_str_eq(e->reasoning_parser, "qwen3");
    cr_assert(e->memory_gb > e->download_gb);
    cr_assert_not_null(rp_catalog_find(cat, "lfm2.5-1b-4bit"));
    const rp_catalog_entry *d = rp_catalog_find(cat, "default");
    cr_assert(d && d->embedded && !d->repo);
    cr_assert_eq(rp_catalog_find_repo(cat, "MLX-COMMUNITY/qwen3.5-4b-4bit"), e);
    int n_gguf = 0;
    for (int i = 0; i < rp_catalog_count(cat); i++) {
        const rp_catalog_entry *x = rp_catalog_at(cat, i);
        if (strcmp(x->format, "gguf") == 0) {
            n_gguf++;
            cr_assert(x->n_files > 0, "%s: GGUF entries list their files", x->alias);
        }
    }
    cr_assert(n_gguf >= 5);
    cr_assert(rp_catalog_n_tiers(cat) >= 4);
    for (int i = 1; i < rp_catalog_n_tiers(cat); i++)
        cr_assert(rp_catalog_tier(cat, i)->min_memory_gb >= rp_catalog_tier(cat, i - 1)->min_memory_gb);
    for (int i = 0; i < rp_catalog_n_tiers(cat); i++) {
        cr_assert_not_null(rp_catalog_find(cat, rp_catalog_tier(cat, i)->smart));
        cr_assert_not_null(rp_catalog_find(cat, rp_catalog_tier(cat, i)->fast));
    }
    rp_catalog_free(cat);
}

Test(catalog, user_aliases_shadow_and_inherit)
{
    rp_err err;
    cr_assert_eq(rp_aliases_set("mine", "qwen3.5-4b-4bit", &err), RP_OK, "%s", err.msg);
    cr_assert_eq(rp_aliases_set("raw", "someorg/somemodel", &err), RP_OK);
    cr_assert_eq(rp_aliases_set("gemma3-4b-4bit", "/nonexistent/dir", &err), RP_OK);
    cr_assert_eq(rp_aliases_set("bad/name", "x/y", &err), RP_ERR_INVALID);
    rp_catalog *cat;
    cr_assert_eq(rp_catalog_load(&cat, &err), RP_OK, "%s", err.msg);
    const rp_catalog_entry *m = rp_catalog_find(cat, "mine");
    cr_assert(m && m->user);
    cr_assert_str_eq(m->repo, "mlx-community/Qwen3.5-4B-4bit");
    cr_assert_str_eq(m->tool_parser, "qwen3_coder");
    const rp_catalog_entry *r = rp_catalog_find(cat, "raw");
    cr_assert(r && r->user && strcmp(r->repo, "someorg/somemodel") == 0);
    const rp_catalog_entry *g = rp_catalog_find(cat, "gemma3-4b-4bit");
    cr_assert(g && g->user && g->path && !g->repo, "a user alias shadows the catalog");
    rp_catalog_free(cat);
    cr_assert_eq(rp_aliases_rm("raw", &err), RP_OK);
    cr_assert_eq(rp_aliases_rm("raw", &err), RP_ERR_NOT_FOUND);
}

Test(catalog, resolve_names)
{
    rp_catalog *cat;
    rp_err err;
    cr_assert_eq(rp_catalog_load(&cat, &err), RP_OK);
    rp_model_ref ref;
    cr_assert_eq(rp_catalog_resolve(cat, "qwen3.5-4b-4bit", &ref, &err), RP_OK);
    cr_assert_str_eq(ref.repo, "mlx-community/Qwen3.5-4B-4bit");
    cr_assert_null(ref.dir, "not downloaded");
    cr_assert_not_null(ref.entry);
    rp_model_ref_deinit(&ref);
    cr_assert_eq(rp_catalog_resolve(cat, g_tmp, &ref, &err), RP_OK);
    cr_assert_str_eq(ref.dir, g_tmp);
    cr_assert_null(ref.repo);
    rp_model_ref_deinit(&ref);
    cr_assert_eq(rp_catalog_resolve(cat, "org/model", &ref, &err), RP_OK);
    cr_assert_str_eq(ref.repo, "org/model");
    cr_assert_null(ref.entry);
    rp_model_ref_deinit(&ref);
    cr_assert_eq(rp_catalog_resolve(cat, "nonsense", &ref, &err), RP_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "rapid models"));
    rp_catalog_free(cat);
}

static void mkfile(const char *path, const char *text)
{
    rp_err err;
    cr_assert_eq(rp_file_write(path, text, strlen(text), &err), RP_OK, "%s", err.msg);
}

Test(catalog, hub_cache_layout)
{
    char *dir = rp_hub_repo_dir("org/model");
    char want[256];
    snprintf(want, sizeof want, "%s/hub/models--org--model", g_tmp);
    cr_assert_str_eq(dir, want);
    cr_assert_null(rp_hub_repo_dir("no-slash"));
    cr_assert_null(rp_hub_repo_dir("a/b/c"));
    cr_assert_null(rp_hub_repo_dir("../x"));
    cr_assert_null(rp_hub_snapshot_dir("org/model", NULL));
    cr_assert_eq(rp_hub_repo_bytes("org/model"), -1);
    /* refs/main -> abc; snapshots/abc; one blob and one partial */
    char p[512];
    snprintf(p, sizeof p, "mkdir -p %s/refs %s/snapshots/abc %s/snapshots/old %s/blobs", dir, dir,
             dir, dir);
    cr_assert_eq(system(p), 0);
    snprintf(p, sizeof p, "%s/refs/main", dir);
    mkfile(p, "abc\n");
    snprintf(p, sizeof p, "%s/blobs/deadbeef", dir);
    mkfile(p, "12345");
    snprintf(p, sizeof p, "%s/blobs/cafe.incomplete", dir);
    mkfile(p, "123");
    char *snap = rp_hub_snapshot_dir("org/model", NULL);
    snprintf(want, sizeof want, "%s/snapshots/abc", dir);
    cr_assert_str_eq(snap, want);
    rp_free(snap);
    snap = rp_hub_snapshot_dir("org/model", "old");
    snprintf(want, sizeof want, "%s/snapshots/old", dir);
    cr_assert_str_eq(snap, want, "a commit given directly");
    rp_free(snap);
    cr_assert_eq(rp_hub_repo_bytes("org/model"), 5, "partial files are not counted");
    char **list;
    int n;
    rp_err err;
    cr_assert_eq(rp_hub_list(&list, &n, &err), RP_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(list[0], "org/model");
    rp_hub_list_free(list, n);
    cr_assert_eq(rp_hub_remove("org/model", &err), RP_OK);
    cr_assert(!rp_path_exists(dir));
    cr_assert_eq(rp_hub_remove("org/model", &err), RP_ERR_NOT_FOUND);
    rp_free(dir);
}

Test(catalog, cache_dir_env_order)
{
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", "/x/hf", 1);
    char *d = rp_hub_cache_dir();
    cr_assert_str_eq(d, "/x/hf/hub");
    rp_free(d);
    unsetenv("HF_HOME");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    d = rp_hub_cache_dir();
    cr_assert_str_eq(d, "/x/cache/huggingface/hub");
    rp_free(d);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    d = rp_hub_cache_dir();
    cr_assert_str_eq(d, "/home/u/.cache/huggingface/hub");
    rp_free(d);
}

Test(catalog, small_helpers)
{
    char b[32];
    rp_hub_format_bytes(1.5e9, b, sizeof b);
    cr_assert_str_eq(b, "1.5 GB");
    rp_hub_format_bytes(640e6, b, sizeof b);
    cr_assert_str_eq(b, "640.0 MB");
    rp_hub_format_bytes(12, b, sizeof b);
    cr_assert_str_eq(b, "12 B");
    cr_assert(rp_catalog_glob("*Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q4_K_M.gguf"));
    cr_assert(!rp_catalog_glob("*Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q8_0.gguf"));
}

Test(catalog, machine_probe_reads_meminfo)
{
    char p[256];
    snprintf(p, sizeof p, "%s/meminfo", g_tmp);
    mkfile(p, "MemTotal:       16000000 kB\nMemFree: 1 kB\nMemAvailable:    8000000 kB\n");
    setenv("RAPID_MEMINFO", p, 1);
    setenv("RAPID_NVIDIA_SMI", "/nonexistent-smi", 1);
    rp_machine m;
    rp_machine_probe(&m);
    cr_assert_float_eq(m.ram_total_gb, 16000000.0 * 1024 / 1e9, 1e-9);
    cr_assert_float_eq(m.ram_available_gb, 8000000.0 * 1024 / 1e9, 1e-9);
    cr_assert_eq(m.n_gpus, 0);
}

Test(catalog, ensure_without_consent_names_the_pull_command)
{
    rp_catalog *cat;
    rp_err err;
    cr_assert_eq(rp_catalog_load(&cat, &err), RP_OK);
    unsetenv("RAPID_AUTO_PULL");
    char *dir = NULL;
    /* stdin of a Criterion test is not a terminal, so nothing is asked */
    cr_assert_eq(rp_catalog_ensure(cat, "qwen3.5-4b-4bit", 0, &dir, &err), RP_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "rapid pull qwen3.5-4b-4bit"), "%s", err.msg);
    cr_assert_null(dir);
    setenv("RAPID_AUTO_PULL", "1", 1);
    setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1); /* nothing listens: a network error */
    cr_assert_eq(rp_catalog_ensure(cat, "qwen3.5-4b-4bit", 0, &dir, &err), RP_ERR_IO);
    cr_assert(strstr(err.msg, "cannot reach the hub"), "%s", err.msg);
    cr_assert_eq(rp_catalog_ensure(cat, g_tmp, 0, &dir, &err), RP_OK, "a directory is on disk");
    cr_assert_str_eq(dir, g_tmp);
    rp_free(dir);
    rp_catalog_free(cat);
}
