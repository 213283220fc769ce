/* cli/cmd_alias.c - `rapid alias set NAME TARGET | rm NAME | list`. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"

static int alias_list(void)
{
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        fprintf(stderr, "rapid alias: %s\n", err.msg);
        return 1;
    }
    char *path = rp_aliases_path();
    int n = 0;
    for (int i = 0; i < rp_catalog_count(cat); i++) {
        const rp_catalog_entry *e = rp_catalog_at(cat, i);
        if (!e->user)
            continue;
        printf("%-24s -> %s\n", e->alias, e->repo ? e->repo : e->path ? e->path : "?");
        n++;
    }
    if (!n)
        printf("(no user aliases in %s; add one with 'rapid alias set NAME org/repo')\n",
               path ? path : "");
    rp_free(path);
    rp_catalog_free(cat);
    return 0;
}

int rp_cmd_alias(int argc, char **argv)
{
    const char *pos[3];
    int n_pos = 0;
    if (rp_args_parse(argc, argv, NULL, 0, pos, 3, &n_pos) != 0)
        return 2;
    rp_err err;
    if (n_pos == 0 || (n_pos == 1 && strcmp(pos[0], "list") == 0))
        return alias_list();
    if (n_pos == 3 && strcmp(pos[0], "set") == 0) {
        if (rp_aliases_set(pos[1], pos[2], &err) != RP_OK) {
            fprintf(stderr, "rapid alias: %s\n", err.msg);
            return 1;
        }
        printf("%s -> %s\n", pos[1], pos[2]);
        return 0;
    }
    if (n_pos == 2 && strcmp(pos[0], "rm") == 0) {
        if (rp_aliases_rm(pos[1], &err) != RP_OK) {
            fprintf(stderr, "rapid alias: %s\n", err.msg);
            return 1;
        }
        printf("removed alias %s\n", pos[1]);
        return 0;
    }
    fprintf(stderr, "usage: rapid alias set NAME TARGET | rapid alias rm NAME | rapid alias list\n");
    return 2;
}
