/* cli/args.c - option parsing. */
#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static const rp_opt *find_opt(const rp_opt *opts, int n_opts, const char *name, size_t len)
{
    for (int i = 0; i < n_opts; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

int rp_args_parse(int argc, char **argv, const rp_opt *opts, int n_opts, const char **positional,
                  int max_positional, int *n_positional)
{
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (n_pos >= max_positional) {
                fprintf(stderr, "rapid %s: unexpected argument '%s'\n", argv[0], a);
                return 2;
            }
            positional[n_pos++] = a;
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const rp_opt *o = find_opt(opts, n_opts, name, len);
        if (!o) {
            fprintf(stderr, "rapid %s: unknown option '--%.*s' (see 'rapid help %s')\n", argv[0],
                    (int)len, name, argv[0]);
            return 2;
        }
        if (o->flag) {
            if (eq) {
                fprintf(stderr, "rapid %s: option '--%s' takes no value\n", argv[0], o->name);
                return 2;
            }
            *o->flag = 1;
        } else if (eq) {
            *o->value = eq + 1;
        } else if (i + 1 < argc) {
            *o->value = argv[++i];
        } else {
            fprintf(stderr, "rapid %s: option '--%s' needs a value\n", argv[0], o->name);
            return 2;
        }
    }
    if (n_positional)
        *n_positional = n_pos;
    return 0;
}

int rp_args_int(const char *s, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int rp_args_float(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int rp_args_parse_ids(const char *s, int **out_ids, int *out_n)
{
    int cap = 16, n = 0;
    int *ids = rp_alloc(sizeof(int) * (size_t)cap);
    if (!ids)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
            rp_free(ids);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int *grown = rp_realloc(ids, sizeof(int) * (size_t)cap);
            if (!grown) {
                rp_free(ids);
                return -1;
            }
            ids = grown;
        }
        ids[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        rp_free(ids);
        return -1;
    }
    *out_ids = ids;
    *out_n = n;
    return 0;
}
