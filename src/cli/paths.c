/* cli/paths.c - locating the embedded default model next to the binary. */
#include "cli/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"

static char *exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return rp_strdup(buf);
}

static char *try_dir(const char *base, const char *rel)
{
    char *p = rp_path_join(base, rel);
    if (p && rp_path_exists(p) && rp_path_is_dir(p)) {
        char *cfg = rp_path_join(p, "config.json");
        int ok = cfg && rp_path_exists(cfg);
        rp_free(cfg);
        if (ok)
            return p;
    }
    rp_free(p);
    return NULL;
}

char *rp_default_model_dir(void)
{
    const char *env = getenv("RAPID_DEFAULT_MODEL");
    if (env && *env)
        return rp_path_is_dir(env) ? rp_strdup(env) : NULL;
    char *dir = exe_dir();
    if (!dir)
        return NULL;
    static const char *candidates[] = {"../models/default", "../share/rapid/models/default",
                                       "../../models/default"};
    char *found = NULL;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !found; i++)
        found = try_dir(dir, candidates[i]);
    rp_free(dir);
    return found;
}
