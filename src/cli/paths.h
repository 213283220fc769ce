/* cli/paths.h - where rapid finds its own files (the embedded default model).
 *
 * Ownership: returned strings are heap-allocated (rp_free).
 */
#ifndef RP_CLI_PATHS_H
#define RP_CLI_PATHS_H

/* The embedded default model directory: $RAPID_DEFAULT_MODEL, else <exe>/../models/default
 * (running from the source tree), else <exe>/../share/rapid/models/default (installed).
 * Returns NULL when none exists. */
char *rp_default_model_dir(void);

#endif
