/* cli/cmd_pull.c - `rapid pull MODEL`: downloads a catalog alias or org/name repo into the
 * Hugging Face cache, with a progress bar on a terminal and plain lines otherwise. */
#include <stdio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"

int rp_cmd_pull(int argc, char **argv)
{
    const char *revision = NULL, *pos[1];
    int quiet = 0, n_pos = 0;
    rp_opt opts[] = {{"revision", &revision, NULL}, {"quiet", NULL, &quiet}};
    if (rp_args_parse(argc, argv, opts, 2, pos, 1, &n_pos) != 0)
        return 2;
    if (n_pos != 1) {
        fprintf(stderr, "usage: rapid pull MODEL (an alias from 'rapid models' or org/name)\n");
        return 2;
    }
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        fprintf(stderr, "rapid pull: %s\n", err.msg);
        return 1;
    }
    rp_model_ref ref;
    int status = 0;
    if (rp_catalog_resolve(cat, pos[0], &ref, &err) != RP_OK) {
        fprintf(stderr, "rapid pull: %s\n", err.msg);
        rp_catalog_free(cat);
        return 1;
    }
    if (!ref.repo) {
        if (ref.dir)
            printf("%s is already on disk: %s\n", pos[0], ref.dir);
        else
            fprintf(stderr, "rapid pull: '%s' is not a hub model and is not on disk\n", pos[0]);
        status = ref.dir ? 0 : 1;
    } else {
        rp_hub_pull_opts po = {.revision = revision,
                               .progress = quiet ? RP_HUB_QUIET
                                           : isatty(STDERR_FILENO) ? RP_HUB_BAR
                                                                   : RP_HUB_LINES,
                               .out = stderr};
        if (ref.entry && ref.entry->n_files) {
            po.patterns = ref.entry->files;
            po.n_patterns = ref.entry->n_files;
        }
        if (!quiet)
            fprintf(stderr, "pulling %s%s%s\n", ref.repo, ref.entry ? " as " : "",
                    ref.entry ? ref.entry->alias : "");
        char *snap = NULL;
        if (rp_hub_pull(ref.repo, &po, &snap, &err) != RP_OK) {
            fprintf(stderr, "rapid pull: %s\n", err.msg);
            status = 1;
        } else {
            char size[32];
            int64_t bytes = rp_hub_repo_bytes(ref.repo);
            rp_hub_format_bytes(bytes > 0 ? (double)bytes : 0, size, sizeof size);
            printf("%s: ready (%s) in %s\nnext: rapid serve %s\n", ref.repo, size, snap,
                   pos[0]);
        }
        rp_free(snap);
    }
    rp_model_ref_deinit(&ref);
    rp_catalog_free(cat);
    return status;
}
