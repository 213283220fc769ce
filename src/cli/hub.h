/* cli/hub.h - the Hugging Face hub: the local cache layout and downloads over libcurl.
 *
 * Cache layout (the one huggingface_hub uses, so downloads are shared with Python tools):
 *   <cache>/models--ORG--NAME/blobs/<etag>            file contents (sha256 for LFS files)
 *   <cache>/models--ORG--NAME/blobs/<etag>.incomplete  a partial download (resumed with Range)
 *   <cache>/models--ORG--NAME/snapshots/<commit>/PATH  symlink to ../../blobs/<etag>
 *   <cache>/models--ORG--NAME/refs/<revision>          the commit the revision pointed to
 * <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub. The hub is $HF_ENDPOINT (default https://huggingface.co); a token
 * in $HF_TOKEN is sent as "Authorization: Bearer".
 *
 * A pull lists the repo's files (GET /api/models/REPO/revision/REV?blobs=true), then fetches
 * each one from /REPO/resolve/REV/PATH (redirects followed), checks its size and, for LFS
 * files, its sha256, before moving it into blobs/ and linking it into the snapshot.
 *
 * Ownership: returned strings and lists are heap-allocated (rp_free; lists: rp_hub_list_free).
 * Threading: any thread; a pull blocks until done. curl_global_init is done by the caller
 *            (main, or rp_hub_pull on first use, which is not thread-safe).
 * Errors:    RP_ERR_AUTH (401/403: gated or private, set HF_TOKEN), RP_ERR_NOT_FOUND (404),
 *            RP_ERR_IO (network, disk, size or checksum mismatch), RP_ERR_NOMEM.
 */
#ifndef RP_CLI_HUB_H
#define RP_CLI_HUB_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

char *rp_hub_cache_dir(void);
/* <cache>/models--ORG--NAME; NULL when repo is not "org/name" or on OOM. */
char *rp_hub_repo_dir(const char *repo);
/* The snapshot directory for revision rev (NULL: "main"; falls back to the newest snapshot);
 * NULL when the repo is not downloaded. */
char *rp_hub_snapshot_dir(const char *repo, const char *rev);
/* Bytes held in the repo's blobs/ (complete files only); -1 when it is not in the cache. */
int64_t rp_hub_repo_bytes(const char *repo);
/* Deletes the repo's whole cache folder. RP_ERR_NOT_FOUND when it is not there. */
rp_status rp_hub_remove(const char *repo, rp_err *err);

/* Repos in the cache ("org/name"), sorted. */
rp_status rp_hub_list(char ***out, int *n_out, rp_err *err);
void rp_hub_list_free(char **list, int n);

typedef enum rp_hub_progress {
    RP_HUB_QUIET = 0,
    RP_HUB_LINES, /* plain lines (not a terminal) */
    RP_HUB_BAR,   /* a redrawn progress bar (a terminal) */
} rp_hub_progress;

typedef struct rp_hub_pull_opts {
    const char *revision;        /* NULL: "main" */
    const char *const *patterns; /* file globs to fetch; n_patterns 0: every file */
    int n_patterns;
    rp_hub_progress progress;
    FILE *out;                   /* where progress goes (stderr when NULL) */
} rp_hub_pull_opts;

/* Downloads repo into the cache; *out_snapshot (may be NULL) gets the snapshot directory. */
rp_status rp_hub_pull(const char *repo, const rp_hub_pull_opts *opts, char **out_snapshot,
                      rp_err *err);

/* ---- a small HTTP client for talking to a running rapid server (chat, bench, launch) ---- */

/* Called once per server-sent event with its data (multi-line data joined by '\n'), including
 * the final "[DONE]". Return nonzero to stop the stream. */
typedef int (*rp_sse_fn)(const char *data, void *user);

/* GET url, or POST json_body (as application/json) when it is non-NULL. *body (may be NULL)
 * receives the response body (rp_free), *code the HTTP status. Network failures are
 * RP_ERR_IO; any HTTP status is RP_OK (the caller judges it). timeout_s 0: none. */
rp_status rp_http_request(const char *url, const char *json_body, const char *api_key,
                          long timeout_s, char **body, long *code, rp_err *err);

/* POSTs json_body and feeds each SSE event to fn. *cancel (may be NULL) is polled: when it
 * becomes nonzero the transfer stops and RP_ERR_CANCELLED is returned. A non-2xx answer
 * returns RP_OK with *code set and the body in *err_body (rp_free; may be NULL). */
rp_status rp_http_sse(const char *url, const char *json_body, const char *api_key, rp_sse_fn fn,
                      void *user, volatile int *cancel, long *code, char **err_body, rp_err *err);

/* "1.5 GB", "640 MB", "12 KB" (decimal units, like the hub shows). */
void rp_hub_format_bytes(double n_bytes, char *out, size_t n_out);

#endif
