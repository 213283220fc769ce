/* cli/cmd_doctor.c - `rapid doctor`: one PASS/WARN/FAIL line per check of this machine and
 * of rapid's setup; exits 1 when anything FAILs.
 *
 * Checks: CPU features, memory, disk space for the model cache, GPU and driver, the linked
 * libraries, the catalog and aliases, the cache directory, the server port, the embedded
 * default model, and a load-and-generate smoke test of it. The smoke test runs
 * `rapid generate` in-process; rp_cmd_generate is referenced weakly, so a rapid built
 * without the model code reports that instead of failing to link.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <histedit.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <utf8proc.h>
#include <xxhash.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/paths.h"

#pragma weak rp_cmd_generate

typedef struct tally {
    int n_pass, n_warn, n_fail;
} tally;

static void report(tally *t, int level, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

enum { PASS, WARN, FAIL };

static void report(tally *t, int level, const char *what, const char *fmt, ...)
{
    static const char *names[] = {"PASS", "WARN", "FAIL"};
    int *counts[] = {&t->n_pass, &t->n_warn, &t->n_fail};
    (*counts[level])++;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s  %-14s %s\n", names[level], what, msg);
    fflush(stdout);
}

static void check_cpu(tally *t)
{
    const rp_cpu_info *c = rp_cpu();
    char extra[64] = "";
    snprintf(extra, sizeof extra, "%s%s%s", c->has_avx512_bf16 ? " bf16" : "",
             c->has_avx512_vnni ? " vnni" : "", c->has_amx ? " amx" : "");
    if (c->isa == RP_ISA_SCALAR)
        report(t, WARN, "cpu", "%s, %d cores: no AVX2, the scalar kernels will be slow",
               c->brand, c->n_cores_online);
    else
        report(t, PASS, "cpu", "%s, %d cores, %s%s%s%s", c->brand, c->n_cores_online,
               rp_isa_name(c->isa), extra[0] ? " (" : "", extra[0] ? extra + 1 : "",
               extra[0] ? ")" : "");
}

static void check_memory(tally *t, const rp_machine *m)
{
    if (m->ram_total_gb <= 0)
        report(t, WARN, "memory", "cannot read /proc/meminfo");
    else if (m->ram_available_gb < 1.0)
        report(t, WARN, "memory", "%.1f GB total, only %.1f GB available: close programs or "
                                  "use a small model ('rapid recipe')",
               m->ram_total_gb, m->ram_available_gb);
    else
        report(t, PASS, "memory", "%.1f GB total, %.1f GB available", m->ram_total_gb,
               m->ram_available_gb);
}

/* The nearest existing directory at or above path (heap). */
static char *existing_parent(const char *path)
{
    char *p = rp_strdup(path);
    while (p && !rp_path_exists(p)) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) {
            rp_free(p);
            return rp_strdup("/");
        }
        *slash = '\0';
    }
    return p;
}

static void check_cache_and_disk(tally *t)
{
    char *cache = rp_hub_cache_dir();
    char *base = cache ? existing_parent(cache) : NULL;
    if (!base) {
        report(t, FAIL, "cache dir", "out of memory");
        rp_free(cache);
        return;
    }
    int exists = rp_path_is_dir(cache);
    if (!rp_path_is_dir(base))
        report(t, FAIL, "cache dir", "%s is a file, not a directory: move it away or set "
                                     "HF_HOME to a writable folder",
               base);
    else if (access(base, W_OK) != 0)
        report(t, FAIL, "cache dir", "%s is not writable (%s): fix its permissions or set "
                                     "HF_HOME to a writable folder",
               exists ? cache : base, strerror(errno));
    else
        report(t, PASS, "cache dir", "%s%s", cache, exists ? "" : " (created on first pull)");
    struct statvfs sv;
    char *slash = rp_path_is_dir(base) ? NULL : strrchr(base, '/');
    if (slash && slash != base)
        *slash = '\0'; /* measure the folder holding the stray file */
    if (statvfs(base, &sv) != 0) {
        report(t, WARN, "disk", "cannot measure free space at %s", base);
    } else {
        double free_gb = (double)sv.f_bavail * (double)sv.f_frsize / 1e9;
        if (free_gb < 1)
            report(t, FAIL, "disk", "%.1f GB free at %s: not enough for any model", free_gb, base);
        else if (free_gb < 10)
            report(t, WARN, "disk", "%.1f GB free at %s: enough for small models only", free_gb,
                   base);
        else
            report(t, PASS, "disk", "%.1f GB free at %s", free_gb, base);
    }
    rp_free(base);
    rp_free(cache);
}

static void check_gpu(tally *t, const rp_machine *m)
{
    if (m->n_gpus == 0) {
        report(t, WARN, "gpu", "no NVIDIA GPU found (nvidia-smi %s): rapid runs on the CPU",
               m->have_smi ? "lists none" : "not available");
    }
    for (int i = 0; i < m->n_gpus; i++)
        report(t, PASS, "gpu", "%d: %s, %.1f GB, driver %s", i, m->gpus[i].name,
               m->gpus[i].memory_gb, m->gpus[i].driver);
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        int (*get_version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
        int v = 0;
        if (get_version && get_version(&v) == 0)
            report(t, PASS, "cuda driver", "CUDA %d.%d", v / 1000, v % 1000 / 10);
        else
            report(t, PASS, "cuda driver", "libcuda.so.1 present");
        dlclose(h);
    } else if (m->n_gpus > 0) {
        report(t, FAIL, "cuda driver", "a GPU is listed but libcuda.so.1 cannot be loaded: "
                                       "reinstall the NVIDIA driver");
    } else {
        report(t, WARN, "cuda driver", "libcuda.so.1 not found (no CUDA on this machine)");
    }
}

static void check_libraries(tally *t)
{
    curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    int https = 0;
    for (const char *const *p = cv->protocols; p && *p; p++)
        https |= strcmp(*p, "https") == 0;
    uint32_t jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &jit);
    unsigned xx = XXH_versionNumber();
    report(t, PASS, "libraries",
           "libcurl %s (%s), jansson %s, libmicrohttpd %s, pcre2 %d.%d, utf8proc %s, "
           "xxhash %u.%u.%u, libedit %d.%d",
           cv->version, cv->ssl_version ? cv->ssl_version : "no TLS", jansson_version_str(),
           MHD_get_version(), PCRE2_MAJOR, PCRE2_MINOR, utf8proc_version(), xx / 10000,
           xx / 100 % 100, xx % 100, LIBEDIT_MAJOR, LIBEDIT_MINOR);
    if (!https)
        report(t, FAIL, "https", "libcurl was built without HTTPS: 'rapid pull' cannot work");
    if (!jit)
        report(t, WARN, "pcre2 jit", "PCRE2 has no JIT: tokenizing will be slower");
}

static void check_catalog(tally *t)
{
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        report(t, FAIL, "catalog", "%s", err.msg);
        return;
    }
    int n_user = 0;
    for (int i = 0; i < rp_catalog_count(cat); i++)
        n_user += rp_catalog_at(cat, i)->user;
    report(t, PASS, "catalog", "%d models in %s, %d user aliases", rp_catalog_count(cat) - n_user,
           rp_catalog_file(cat), n_user);
    rp_catalog_free(cat);
}

static void check_port(tally *t, long port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        report(t, WARN, "port", "cannot open a socket: %s", strerror(errno));
        return;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0)
        report(t, PASS, "port", "127.0.0.1:%ld is free for 'rapid serve'", port);
    else if (errno == EADDRINUSE)
        report(t, WARN, "port", "127.0.0.1:%ld is in use (a server already running?); use "
                                "'rapid serve --port N'",
               port);
    else
        report(t, WARN, "port", "cannot bind 127.0.0.1:%ld: %s", port, strerror(errno));
    close(fd);
}

/* Reads what fd holds (from the start) into out, without trailing newlines; returns the
 * start of its last line. */
static const char *slurp(int fd, char *out, size_t n_out)
{
    ssize_t n = pread(fd, out, n_out - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    size_t len = strlen(out);
    while (len && (out[len - 1] == '\n' || out[len - 1] == '\r'))
        out[--len] = '\0';
    const char *last = strrchr(out, '\n');
    return last ? last + 1 : out;
}

/* Runs `rapid generate` in this process with stdout and stderr captured in temporary files;
 * out gets the generated ids, why the last line of stderr. */
static int smoke_generate(const char *dir, char *out, size_t n_out, char *why, size_t n_why)
{
    char p_out[] = "/tmp/rapid-doctor-XXXXXX", p_err[] = "/tmp/rapid-doctor-XXXXXX";
    int fd_out = mkstemp(p_out), fd_err = fd_out >= 0 ? mkstemp(p_err) : -1;
    if (fd_err < 0) {
        if (fd_out >= 0) {
            close(fd_out);
            unlink(p_out);
        }
        snprintf(why, n_why, "cannot create a temporary file");
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    dup2(fd_out, STDOUT_FILENO);
    dup2(fd_err, STDERR_FILENO);
    char *argv[] = {"generate", "--model", (char *)dir, "--ids", "1,2,3", "--max-tokens", "4",
                    NULL};
    int rc = rp_cmd_generate(7, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved_out);
    close(saved_err);
    slurp(fd_out, out, n_out);
    char buf[2048];
    snprintf(why, n_why, "%s", slurp(fd_err, buf, sizeof buf));
    close(fd_out);
    close(fd_err);
    unlink(p_out);
    unlink(p_err);
    return rc;
}

static void check_default_model(tally *t, int smoke)
{
    const char *env = getenv("RAPID_DEFAULT_MODEL");
    char *dir = rp_default_model_dir();
    if (!dir && env && *env)
        report(t, FAIL, "default model", "RAPID_DEFAULT_MODEL=%s is not a model directory", env);
    else if (!dir)
        report(t, WARN, "default model", "no embedded model found next to the binary "
                                         "(models/default); set RAPID_DEFAULT_MODEL or pull one");
    else
        report(t, PASS, "default model", "%s", dir);
    if (!smoke) {
        report(t, WARN, "smoke test", "skipped (--no-smoke)");
    } else if (!rp_cmd_generate) {
        report(t, WARN, "smoke test", "not built: this rapid has no 'generate' command yet "
                                      "(the model code is not in this build)");
    } else if (dir) {
        char out[256], why[300];
        int rc = smoke_generate(dir, out, sizeof out, why, sizeof why);
        if (rc == 0 && out[0])
            report(t, PASS, "smoke test", "loaded the default model and generated ids %s", out);
        else
            report(t, FAIL, "smoke test", "'rapid generate --model %s' failed (exit %d): %s",
                   dir, rc, why[0] ? why : "no output");
    } else {
        report(t, WARN, "smoke test", "skipped: no default model");
    }
    rp_free(dir);
}

int rp_cmd_doctor(int argc, char **argv)
{
    const char *port_s = NULL;
    int no_smoke = 0;
    rp_opt opts[] = {{"port", &port_s, NULL}, {"no-smoke", NULL, &no_smoke}};
    if (rp_args_parse(argc, argv, opts, 2, NULL, 0, NULL) != 0)
        return 2;
    if (!port_s)
        port_s = getenv("RAPID_PORT");
    long port = 8000;
    if (port_s && (rp_args_int(port_s, &port) != 0 || port <= 0 || port > 65535)) {
        fprintf(stderr, "rapid doctor: bad port '%s'\n", port_s);
        return 2;
    }
    printf("rapid %s doctor\n", RP_VERSION);
    tally t = {0};
    rp_machine m;
    rp_machine_probe(&m);
    check_cpu(&t);
    check_memory(&t, &m);
    check_cache_and_disk(&t);
    check_gpu(&t, &m);
    check_libraries(&t);
    check_catalog(&t);
    check_port(&t, port);
    check_default_model(&t, !no_smoke);
    printf("\n%d passed, %d warnings, %d failed\n", t.n_pass, t.n_warn, t.n_fail);
    if (t.n_fail)
        printf("fix the FAIL lines above, then run 'rapid doctor' again\n");
    return t.n_fail ? 1 : 0;
}
