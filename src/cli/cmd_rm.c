/* cli/cmd_rm.c - `rapid rm MODEL`: deletes a downloaded model from the hub cache. */
#include <stdio.h>

#include "base/alloc.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"

int rp_cmd_rm(int argc, char **argv)
{
    const char *pos[1];
    int n_pos = 0;
    if (rp_args_parse(argc, argv, NULL, 0, pos, 1, &n_pos) != 0)
        return 2;
    if (n_pos != 1) {
        fprintf(stderr, "usage: rapid rm MODEL ('rapid ls' lists downloaded models)\n");
        return 2;
    }
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        fprintf(stderr, "rapid rm: %s\n", err.msg);
        return 1;
    }
    rp_model_ref ref;
    int status = 0;
    if (rp_catalog_resolve(cat, pos[0], &ref, &err) != RP_OK) {
        fprintf(stderr, "rapid rm: %s\n", err.msg);
        status = 1;
    } else if (!ref.repo) {
        fprintf(stderr, "rapid rm: '%s' is not a downloaded hub model (rapid only deletes what "
                        "'rapid pull' put in the cache)\n", pos[0]);
        status = 1;
    } else {
        int64_t bytes = rp_hub_repo_bytes(ref.repo);
        if (rp_hub_remove(ref.repo, &err) != RP_OK) {
            fprintf(stderr, "rapid rm: %s\n", err.msg);
            status = 1;
        } else {
            char size[32];
            rp_hub_format_bytes(bytes > 0 ? (double)bytes : 0, size, sizeof size);
            printf("removed %s (%s freed)\n", ref.repo, size);
        }
        rp_model_ref_deinit(&ref);
    }
    rp_catalog_free(cat);
    return status;
}
