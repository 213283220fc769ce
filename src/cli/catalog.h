/* cli/catalog.h - the model catalog (models/catalog.json), user aliases and model lookup.
 *
 * The catalog maps short aliases ("qwen3.5-4b-4bit") to Hugging Face repos with what a user
 * needs to choose one: family, parameters, quantization, download size, memory, context and
 * the tool/reasoning parsers. Users add their own aliases in ~/.config/rapid/aliases.json
 * ({"name": "org/repo" | "/a/dir" | "other-alias"}); those shadow catalog aliases.
 * rp_catalog_resolve turns what a user typed (alias, directory, org/name) into a repo and,
 * when it is on disk, the directory holding its config.json.
 *
 * Files: $RAPID_CATALOG, else <exe>/../models/catalog.json (source tree), else
 *        <exe>/../share/rapid/models/catalog.json (installed). Aliases:
 *        $RAPID_CONFIG_DIR/aliases.json, else $XDG_CONFIG_HOME/rapid, else ~/.config/rapid.
 * Ownership: rp_catalog_load -> rp_catalog_free; entries and tiers are borrowed from the
 *            catalog and live as long as it. rp_model_ref owns its strings (deinit frees).
 * Threading: a catalog is read-only after loading; use from one thread at a time.
 * Errors:    RP_ERR_NOT_FOUND (no catalog, unknown model), RP_ERR_INVALID (malformed JSON,
 *            with file and line), RP_ERR_IO, RP_ERR_NOMEM.
 */
#ifndef RP_CLI_CATALOG_H
#define RP_CLI_CATALOG_H

#include "base/status.h"

typedef struct rp_catalog rp_catalog;

typedef struct rp_catalog_entry {
    const char *alias;
    const char *repo;      /* "org/name"; NULL for the embedded model or a user path alias */
    const char *path;      /* user aliases to a local directory; else NULL */
    const char *family;    /* "qwen3.5", "llama3", ... ("" when unknown) */
    const char *quant;     /* "4bit", "8bit", "bf16", "Q4_K_M", ... */
    const char *format;    /* "mlx", "gguf" or "hf" */
    const char *tool_parser;
    const char *reasoning_parser;
    const char *summary;   /* may be "" */
    const char *const *files; /* globs to pull (GGUF repos with many variants); n_files 0: all */
    int n_files;
    double params_b;       /* billions of parameters; 0 when unknown */
    double download_gb;
    double memory_gb;
    int context;
    int embedded;          /* the model shipped with rapid (rp_default_model_dir) */
    int user;              /* defined in aliases.json */
} rp_catalog_entry;

typedef struct rp_recipe_tier {
    const char *tier;      /* "16 GB" */
    double min_memory_gb;  /* the smallest memory budget this tier is for */
    const char *smart;     /* aliases */
    const char *fast;
} rp_recipe_tier;

/* Loads the catalog and the user's aliases (a missing aliases file is fine). */
rp_status rp_catalog_load(rp_catalog **out, rp_err *err);
void rp_catalog_free(rp_catalog *cat);

const char *rp_catalog_file(const rp_catalog *cat); /* the catalog.json that was read */
int rp_catalog_count(const rp_catalog *cat);
const rp_catalog_entry *rp_catalog_at(const rp_catalog *cat, int i); /* user aliases first */
const rp_catalog_entry *rp_catalog_find(const rp_catalog *cat, const char *alias);
const rp_catalog_entry *rp_catalog_find_repo(const rp_catalog *cat, const char *repo);
int rp_catalog_n_tiers(const rp_catalog *cat);
const rp_recipe_tier *rp_catalog_tier(const rp_catalog *cat, int i); /* by min_memory_gb */

/* What a model name means on this machine. */
typedef struct rp_model_ref {
    char *name;  /* as given */
    char *repo;  /* NULL when the model is a directory or the embedded model */
    char *dir;   /* directory with config.json (or .gguf), NULL when not downloaded */
    const rp_catalog_entry *entry; /* catalog facts, NULL when not in the catalog */
} rp_model_ref;

/* name: an alias, "default", a directory, or "org/name". A known model that is not on disk
 * resolves with dir == NULL (RP_OK); an unknown name is RP_ERR_NOT_FOUND. */
rp_status rp_catalog_resolve(const rp_catalog *cat, const char *name, rp_model_ref *out,
                             rp_err *err);
void rp_model_ref_deinit(rp_model_ref *ref);

/* For commands that need the model on disk (`rapid serve ALIAS`): resolves name and, when it
 * is a hub model not yet downloaded, pulls it if auto_pull is set (--yes) or
 * RAPID_AUTO_PULL=1, else asks "[y/N]" when stdin is a terminal, else fails with the
 * 'rapid pull' command to run. *dir gets the model directory (rp_free). */
rp_status rp_catalog_ensure(const rp_catalog *cat, const char *name, int auto_pull, char **dir,
                            rp_err *err);

/* User aliases. The path is heap-allocated (rp_free). set/rm rewrite the file atomically. */
char *rp_aliases_path(void);
rp_status rp_aliases_set(const char *name, const char *target, rp_err *err);
rp_status rp_aliases_rm(const char *name, rp_err *err);

/* ---- this machine (for recipe and doctor) ---- */

#define RP_MAX_GPUS 16

typedef struct rp_gpu {
    char name[96];
    double memory_gb;  /* total, 1e9 bytes */
    char driver[32];
} rp_gpu;

typedef struct rp_machine {
    double ram_total_gb, ram_available_gb; /* /proc/meminfo ($RAPID_MEMINFO overrides the path) */
    int n_gpus;        /* from nvidia-smi ($RAPID_NVIDIA_SMI overrides the command); 0: none */
    rp_gpu gpus[RP_MAX_GPUS];
    int have_smi;      /* nvidia-smi ran */
} rp_machine;

void rp_machine_probe(rp_machine *m);

/* Shell-style glob match of a file name ('*' and '?'), used for catalog file filters. */
int rp_catalog_glob(const char *pattern, const char *name);

#endif
