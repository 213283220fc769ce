/* cli/cmd_recipe.c - `rapid recipe`: which models fit this machine.
 *
 * The memory budget is the GPU memory when NVIDIA GPUs are found (all of them together),
 * else 75% of RAM (the rest is left to the system). The catalog's recipe tiers each name a
 * "smart" (best answers) and a "fast" (most tokens per second) model; the highest tier whose
 * threshold the budget reaches is chosen.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"

static json_t *pick_json(const rp_catalog *cat, const char *alias)
{
    const rp_catalog_entry *e = rp_catalog_find(cat, alias);
    rp_model_ref ref;
    int have = 0;
    if (e && rp_catalog_resolve(cat, alias, &ref, NULL) == RP_OK) {
        have = ref.dir != NULL;
        rp_model_ref_deinit(&ref);
    }
    return json_pack("{s:s, s:s?, s:f, s:s, s:f, s:f, s:b}", "alias", alias, "repo",
                     e ? e->repo : NULL, "params_b", e ? e->params_b : 0, "quant",
                     e ? e->quant : "", "download_gb", e ? e->download_gb : 0, "memory_gb",
                     e ? e->memory_gb : 0, "downloaded", have);
}

static void print_pick(const char *role, json_t *p)
{
    printf("%-9s %-24s %-44s %5.1fB %-6s needs %.1f GB%s\n", role,
           json_string_value(json_object_get(p, "alias")),
           json_string_value(json_object_get(p, "repo")) ? json_string_value(json_object_get(p, "repo")) : "-",
           json_real_value(json_object_get(p, "params_b")),
           json_string_value(json_object_get(p, "quant")),
           json_real_value(json_object_get(p, "memory_gb")),
           json_is_true(json_object_get(p, "downloaded")) ? "  [downloaded]" : "");
}

int rp_cmd_recipe(int argc, char **argv)
{
    const char *mem_s = NULL;
    int as_json = 0;
    rp_opt opts[] = {{"memory", &mem_s, NULL}, {"json", NULL, &as_json}};
    if (rp_args_parse(argc, argv, opts, 2, NULL, 0, NULL) != 0)
        return 2;
    double override_gb = 0;
    if (mem_s && (rp_args_float(mem_s, &override_gb) != 0 || override_gb <= 0)) {
        fprintf(stderr, "rapid recipe: --memory takes a size in GB, e.g. --memory 16\n");
        return 2;
    }
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        fprintf(stderr, "rapid recipe: %s\n", err.msg);
        return 1;
    }
    rp_machine m;
    rp_machine_probe(&m);
    double gpu_gb = 0;
    for (int i = 0; i < m.n_gpus; i++)
        gpu_gb += m.gpus[i].memory_gb;
    const char *basis = override_gb > 0 ? "--memory" : m.n_gpus ? "GPU memory" : "75% of RAM";
    double budget = override_gb > 0 ? override_gb : m.n_gpus ? gpu_gb : m.ram_total_gb * 0.75;
    int i_tier = -1;
    for (int i = 0; i < rp_catalog_n_tiers(cat); i++)
        if (rp_catalog_tier(cat, i)->min_memory_gb <= budget)
            i_tier = i;
    if (i_tier < 0 || m.ram_total_gb <= 0) {
        if (m.ram_total_gb <= 0 && override_gb <= 0)
            fprintf(stderr, "rapid recipe: cannot read the memory size (/proc/meminfo); pass "
                            "--memory GB\n");
        else
            fprintf(stderr, "rapid recipe: the catalog has no recipe tiers\n");
        rp_catalog_free(cat);
        return 1;
    }
    const rp_recipe_tier *t = rp_catalog_tier(cat, i_tier);
    json_t *smart = pick_json(cat, t->smart), *fast = pick_json(cat, t->fast);
    if (as_json) {
        json_t *gpus = json_array();
        for (int i = 0; i < m.n_gpus; i++)
            json_array_append_new(gpus, json_pack("{s:s, s:f, s:s}", "name", m.gpus[i].name,
                                                  "memory_gb", m.gpus[i].memory_gb, "driver",
                                                  m.gpus[i].driver));
        json_t *o = json_pack("{s:{s:s, s:i, s:f, s:f, s:o}, s:f, s:s, s:s, s:O, s:O}",
                              "machine", "cpu", rp_cpu()->brand, "cores",
                              rp_cpu()->n_cores_online, "ram_gb", m.ram_total_gb,
                              "ram_available_gb", m.ram_available_gb, "gpus", gpus, "budget_gb",
                              budget, "basis", basis, "tier", t->tier, "smart", smart, "fast", fast);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("machine:  %s, %d cores, RAM %.1f GB (%.1f GB available)\n", rp_cpu()->brand,
               rp_cpu()->n_cores_online, m.ram_total_gb, m.ram_available_gb);
        if (m.n_gpus == 0)
            printf("GPU:      none found (no NVIDIA GPU or no nvidia-smi): CPU inference\n");
        for (int i = 0; i < m.n_gpus; i++)
            printf("GPU %d:    %s, %.1f GB, driver %s\n", i, m.gpus[i].name, m.gpus[i].memory_gb,
                   m.gpus[i].driver);
        printf("budget:   %.1f GB (%s) -> tier %s\n\n", budget, basis, t->tier);
        print_pick("smart:", smart);
        print_pick("fast:", fast);
        printf("\nnext:     rapid pull %s && rapid serve %s\n", t->smart, t->smart);
    }
    json_decref(smart);
    json_decref(fast);
    rp_catalog_free(cat);
    return 0;
}
