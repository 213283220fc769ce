/* cli/hub.c - Hugging Face cache layout and resumable, verified downloads (libcurl).
 *
 * One pull: list the repo (API), then per file: skip when the snapshot already links a blob
 * of the right size; otherwise append to blobs/<id>.incomplete from where it stopped (Range),
 * check size and sha256, rename into blobs/<id> and link snapshots/<commit>/<path> to it.
 */
#include "cli/hub.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/sha256.h"

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *rp_hub_cache_dir(void)
{
    const char *v = env_nonempty("HF_HUB_CACHE");
    if (v)
        return rp_strdup(v);
    v = env_nonempty("HF_HOME");
    if (v)
        return rp_path_join(v, "hub");
    rp_buf b = {0};
    v = env_nonempty("XDG_CACHE_HOME");
    if (v)
        rp_buf_printf(&b, "%s/huggingface/hub", v);
    else
        rp_buf_printf(&b, "%s/.cache/huggingface/hub", env_nonempty("HOME") ? getenv("HOME") : "/tmp");
    return rp_buf_take(&b);
}

static int repo_valid(const char *repo)
{
    const char *slash = repo ? strchr(repo, '/') : NULL;
    if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/'))
        return 0;
    return strstr(repo, "..") == NULL && strchr(repo, ' ') == NULL;
}

char *rp_hub_repo_dir(const char *repo)
{
    if (!repo_valid(repo))
        return NULL;
    char *cache = rp_hub_cache_dir();
    if (!cache)
        return NULL;
    const char *slash = strchr(repo, '/');
    rp_buf b = {0};
    rp_buf_printf(&b, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1);
    rp_free(cache);
    return rp_buf_take(&b);
}

static char *read_ref(const char *repo_dir, const char *rev)
{
    rp_buf b = {0};
    rp_buf_printf(&b, "%s/refs/%s", repo_dir, rev);
    char *text = NULL;
    rp_status rc = b.data ? rp_file_read(b.data, &text, NULL, NULL) : RP_ERR_NOMEM;
    rp_buf_deinit(&b);
    if (rc != RP_OK)
        return NULL;
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\r'))
        text[--n] = '\0';
    return text;
}

char *rp_hub_snapshot_dir(const char *repo, const char *rev)
{
    char *dir = rp_hub_repo_dir(repo);
    if (!dir)
        return NULL;
    char *snaps = rp_path_join(dir, "snapshots"), *found = NULL;
    char *commit = read_ref(dir, rev ? rev : "main");
    if (commit && snaps) {
        char *p = rp_path_join(snaps, commit);
        if (p && rp_path_is_dir(p))
            found = p;
        else
            rp_free(p);
    } else if (!commit && rev && snaps) { /* a commit hash given directly */
        char *p = rp_path_join(snaps, rev);
        if (p && rp_path_is_dir(p))
            found = p;
        else
            rp_free(p);
    }
    DIR *d = !found && snaps ? opendir(snaps) : NULL;
    if (d) { /* no ref: the newest snapshot */
        struct dirent *de;
        time_t best = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            char *p = rp_path_join(snaps, de->d_name);
            struct stat st;
            if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (!found || st.st_mtime > best)) {
                rp_free(found);
                found = p;
                best = st.st_mtime;
            } else {
                rp_free(p);
            }
        }
        closedir(d);
    }
    rp_free(commit);
    rp_free(snaps);
    rp_free(dir);
    return found;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int64_t rp_hub_repo_bytes(const char *repo)
{
    char *dir = rp_hub_repo_dir(repo);
    char *blobs = dir ? rp_path_join(dir, "blobs") : NULL;
    DIR *d = blobs ? opendir(blobs) : NULL;
    int64_t total = -1;
    if (d) {
        total = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.' || ends_with(de->d_name, ".incomplete"))
                continue;
            char *p = rp_path_join(blobs, de->d_name);
            struct stat st;
            if (p && stat(p, &st) == 0 && S_ISREG(st.st_mode))
                total += st.st_size;
            rp_free(p);
        }
        closedir(d);
    }
    rp_free(blobs);
    rp_free(dir);
    return total;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) == 0 ? 0 : -1;
}

rp_status rp_hub_remove(const char *repo, rp_err *err)
{
    char *dir = rp_hub_repo_dir(repo);
    if (!dir)
        return rp_err_set(err, RP_ERR_INVALID, "'%s' is not an org/name repo", repo);
    rp_status rc = RP_OK;
    if (!rp_path_is_dir(dir))
        rc = rp_err_set(err, RP_ERR_NOT_FOUND, "%s is not downloaded (nothing at %s)", repo, dir);
    else if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        rc = rp_err_set(err, RP_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    rp_free(dir);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

rp_status rp_hub_list(char ***out, int *n_out, rp_err *err)
{
    *out = NULL;
    *n_out = 0;
    char *cache = rp_hub_cache_dir();
    if (!cache)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    DIR *d = opendir(cache);
    if (!d) {
        rp_free(cache);
        return RP_OK; /* no cache yet: nothing downloaded */
    }
    char **list = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    rp_status rc = RP_OK;
    while ((de = readdir(d)) && rc == RP_OK) {
        if (strncmp(de->d_name, "models--", 8) != 0)
            continue;
        const char *org = de->d_name + 8, *sep = strstr(org, "--");
        if (!sep || sep == org || !sep[2])
            continue;
        rp_buf b = {0};
        rp_buf_printf(&b, "%.*s/%s", (int)(sep - org), org, sep + 2);
        char *snap = b.data ? rp_hub_snapshot_dir(b.data, NULL) : NULL;
        if (!snap) {
            rp_buf_deinit(&b);
            continue;
        }
        rp_free(snap);
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = rp_realloc(list, sizeof *list * (size_t)cap);
            if (!grown) {
                rp_buf_deinit(&b);
                rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
                break;
            }
            list = grown;
        }
        list[n++] = rp_buf_take(&b);
    }
    closedir(d);
    rp_free(cache);
    if (rc != RP_OK) {
        rp_hub_list_free(list, n);
        return rc;
    }
    if (n)
        qsort(list, (size_t)n, sizeof *list, cmp_str);
    *out = list;
    *n_out = n;
    return RP_OK;
}

void rp_hub_list_free(char **list, int n)
{
    for (int i = 0; i < n; i++)
        rp_free(list[i]);
    rp_free(list);
}

void rp_hub_format_bytes(double n, char *out, size_t n_out)
{
    if (n >= 1e9)
        snprintf(out, n_out, "%.1f GB", n / 1e9);
    else if (n >= 1e6)
        snprintf(out, n_out, "%.1f MB", n / 1e6);
    else if (n >= 1e3)
        snprintf(out, n_out, "%.1f KB", n / 1e3);
    else
        snprintf(out, n_out, "%.0f B", n);
}

/* ---- HTTP ------------------------------------------------------------------------------- */

typedef struct http_meta {
    char error_code[64]; /* X-Error-Code (RepoNotFound, GatedRepo, ...) */
    char commit[64];     /* X-Repo-Commit */
    char etag[80];       /* X-Linked-Etag, else ETag, first hop (before the CDN redirect) */
    int64_t linked_size; /* X-Linked-Size; -1 when absent */
} http_meta;

static void header_value(const char *line, size_t n, char *out, size_t n_out)
{
    const char *colon = memchr(line, ':', n);
    if (!colon)
        return;
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    if (end - v > 2 && v[0] == 'W' && v[1] == '/')
        v += 2;
    if (end - v >= 2 && *v == '"' && end[-1] == '"') {
        v++;
        end--;
    }
    size_t len = (size_t)(end - v) < n_out - 1 ? (size_t)(end - v) : n_out - 1;
    memcpy(out, v, len);
    out[len] = '\0';
}

static int header_is(const char *line, size_t n, const char *name)
{
    size_t m = strlen(name);
    return n > m && line[m] == ':' && strncasecmp(line, name, m) == 0;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *user)
{
    http_meta *m = user;
    size_t n = size * nitems;
    if (header_is(line, n, "x-error-code"))
        header_value(line, n, m->error_code, sizeof m->error_code);
    else if (header_is(line, n, "x-repo-commit") && !m->commit[0])
        header_value(line, n, m->commit, sizeof m->commit);
    else if (header_is(line, n, "x-linked-etag"))
        header_value(line, n, m->etag, sizeof m->etag);
    else if (header_is(line, n, "etag") && !m->etag[0])
        header_value(line, n, m->etag, sizeof m->etag);
    else if (header_is(line, n, "x-linked-size") && m->linked_size < 0) {
        char v[32] = "";
        header_value(line, n, v, sizeof v);
        m->linked_size = strtoll(v, NULL, 10);
    }
    return n;
}

static struct curl_slist *auth_headers(void)
{
    struct curl_slist *h = curl_slist_append(NULL, "User-Agent: rapid/" RP_VERSION);
    const char *token = env_nonempty("HF_TOKEN");
    if (!token)
        token = env_nonempty("HUGGING_FACE_HUB_TOKEN");
    if (token && h) {
        rp_buf b = {0};
        rp_buf_printf(&b, "Authorization: Bearer %s", token);
        if (b.data)
            h = curl_slist_append(h, b.data);
        rp_buf_deinit(&b);
    }
    return h;
}

static void setup_common(CURL *c, struct curl_slist *headers, http_meta *meta)
{
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer fails... */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L); /* ...after a minute */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, meta);
    meta->linked_size = -1;
}

static const char *hub_endpoint(char *buf, size_t n)
{
    const char *e = env_nonempty("HF_ENDPOINT");
    snprintf(buf, n, "%s", e ? e : "https://huggingface.co");
    size_t len = strlen(buf);
    while (len && buf[len - 1] == '/')
        buf[--len] = '\0';
    return buf;
}

/* Maps a final HTTP status to an rp_status with a message that says what to do. */
static rp_status http_error(long code, const http_meta *m, const char *repo, const char *what,
                            rp_err *err)
{
    if (code == 401 || code == 403 || strcmp(m->error_code, "GatedRepo") == 0)
        return rp_err_set(err, RP_ERR_AUTH,
                          "the hub refused access to %s (HTTP %ld%s%s): the repo is gated or "
                          "private, or HF_TOKEN is wrong; accept its terms on the hub and set "
                          "HF_TOKEN to a token that can read it",
                          repo, code, m->error_code[0] ? ", " : "", m->error_code);
    if (code == 404 && strcmp(m->error_code, "RevisionNotFound") == 0)
        return rp_err_set(err, RP_ERR_NOT_FOUND, "%s has no revision %s (HTTP 404)", repo, what);
    if (code == 404 && strcmp(m->error_code, "EntryNotFound") == 0)
        return rp_err_set(err, RP_ERR_NOT_FOUND, "%s has no file %s (HTTP 404)", repo, what);
    if (code == 404)
        return rp_err_set(err, RP_ERR_NOT_FOUND,
                          "%s not found on the hub (HTTP 404 for %s): check the name, or run "
                          "'rapid models' for known aliases",
                          repo, what);
    return rp_err_set(err, RP_ERR_IO, "the hub answered HTTP %ld for %s of %s; try again later",
                      code, what, repo);
}

static rp_status net_error(CURLcode cc, const char *errbuf, const char *url, rp_err *err)
{
    return rp_err_set(err, RP_ERR_IO,
                      "cannot reach the hub (%s: %s); check the network connection, or set "
                      "HF_ENDPOINT to a reachable mirror",
                      url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
}

static size_t on_body_buf(char *p, size_t size, size_t n, void *user)
{
    return rp_buf_append(user, p, size * n) == RP_OK ? size * n : 0;
}

/* Escapes each path component but keeps the '/' between them. */
static char *escape_path(CURL *c, const char *path)
{
    rp_buf b = {0};
    const char *s = path;
    while (*s) {
        const char *slash = strchr(s, '/');
        size_t len = slash ? (size_t)(slash - s) : strlen(s);
        char *e = curl_easy_escape(c, s, (int)len);
        if (!e) {
            rp_buf_deinit(&b);
            return NULL;
        }
        rp_buf_puts(&b, e);
        curl_free(e);
        s += len;
        if (*s == '/') {
            rp_buf_putc(&b, '/');
            s++;
        }
    }
    return b.data ? rp_buf_take(&b) : rp_strdup("");
}

/* ---- the file list ---------------------------------------------------------------------- */

typedef struct hub_file {
    const char *path;  /* borrowed from the API JSON */
    const char *blob;  /* lfs sha256, else blobId; may be NULL */
    const char *sha256; /* LFS files only */
    int64_t size;      /* -1 when unknown */
} hub_file;

static rp_status fetch_listing(CURL *c, struct curl_slist *h, const char *endpoint,
                               const char *repo, const char *rev, json_t **out, rp_err *err)
{
    char *erev = curl_easy_escape(c, rev, 0);
    rp_buf url = {0}, body = {0};
    rp_buf_printf(&url, "%s/api/models/%s/revision/%s?blobs=true", endpoint, repo,
                  erev ? erev : rev);
    curl_free(erev);
    http_meta meta = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_reset(c);
    setup_common(c, h, &meta);
    curl_easy_setopt(c, CURLOPT_URL, url.data);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body_buf);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    rp_status rc = RP_OK;
    if (cc != CURLE_OK)
        rc = net_error(cc, errbuf, url.data, err);
    else if (code != 200)
        rc = http_error(code, &meta, repo, rev, err);
    else {
        json_error_t je;
        *out = json_loadb(body.data ? body.data : "", body.len, 0, &je);
        if (!*out || !json_is_object(*out))
            rc = rp_err_set(err, RP_ERR_IO, "the hub sent an unreadable file list for %s: %s",
                            repo, je.text);
    }
    rp_buf_deinit(&url);
    rp_buf_deinit(&body);
    return rc;
}

static int wanted(const char *path, const rp_hub_pull_opts *o)
{
    if (o->n_patterns == 0)
        return 1;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (int i = 0; i < o->n_patterns; i++)
        if (fnmatch(o->patterns[i], path, 0) == 0 || fnmatch(o->patterns[i], base, 0) == 0)
            return 1;
    return 0;
}

/* ---- progress --------------------------------------------------------------------------- */

typedef struct progress {
    const rp_hub_pull_opts *opts;
    FILE *out;
    const char *name;
    int64_t offset;     /* bytes already on disk when this transfer started */
    int64_t size;       /* expected total; -1 unknown */
    double t_start, t_last;
    int last_quarter;   /* lines mode: last 25% step printed */
} progress;

static void format_eta(double s, char *out, size_t n)
{
    if (s < 0 || s > 360000)
        snprintf(out, n, "--:--");
    else if (s >= 3600)
        snprintf(out, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else
        snprintf(out, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

static void progress_draw(progress *p, int64_t now_bytes, int final)
{
    double t = rp_now_s(), dt = t - p->t_start;
    int64_t got = now_bytes - p->offset;
    double rate = dt > 0.001 ? (double)got / dt : 0;
    char have[32], total[32], speed[32], eta[32];
    rp_hub_format_bytes((double)now_bytes, have, sizeof have);
    rp_hub_format_bytes(p->size > 0 ? (double)p->size : 0, total, sizeof total);
    rp_hub_format_bytes(rate, speed, sizeof speed);
    double left = p->size > 0 && rate > 0 ? (double)(p->size - now_bytes) / rate : -1;
    format_eta(left, eta, sizeof eta);
    int pct = p->size > 0 ? (int)(100.0 * (double)now_bytes / (double)p->size) : 0;
    if (p->opts->progress == RP_HUB_BAR) {
        if (!final && t - p->t_last < 0.1)
            return;
        char bar[31];
        int fill = p->size > 0 ? pct * 30 / 100 : 0;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[30] = '\0';
        fprintf(p->out, "\r\033[K%-28.28s %9s / %-9s [%s] %3d%% %9s/s ETA %s", p->name, have,
                total, bar, pct, speed, eta);
        if (final)
            fputc('\n', p->out);
    } else if (p->opts->progress == RP_HUB_LINES) {
        int quarter = pct / 25;
        if (!final && quarter <= p->last_quarter && t - p->t_last < 10)
            return;
        if (final)
            return;
        p->last_quarter = quarter;
        fprintf(p->out, "  %s: %d%% (%s of %s, %s/s, ETA %s)\n", p->name, pct, have, total,
                speed, eta);
    } else {
        return;
    }
    p->t_last = t;
    fflush(p->out);
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut,
                       curl_off_t un)
{
    progress *p = user;
    if (dlnow > 0)
        progress_draw(p, p->offset + (int64_t)dlnow, 0);
    return 0;
}

/* ---- one file --------------------------------------------------------------------------- */

typedef struct sink {
    CURL *curl;
    int fd;
    int64_t *offset;  /* bytes already in the file; reset to 0 when the server ignores Range */
    int checked;      /* the status was looked at (first body bytes) */
    int failed;       /* an HTTP error body: kept out of the file */
    int io_error;
} sink;

static size_t on_body_file(char *p, size_t size, size_t n, void *user)
{
    sink *s = user;
    size_t len = size * n;
    if (!s->checked) {
        long code = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        s->checked = 1;
        if (code >= 400)
            s->failed = 1;
        else if (code == 200 && *s->offset > 0) { /* Range ignored: start again */
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                s->io_error = errno;
                return 0;
            }
            *s->offset = 0;
        }
    }
    if (s->failed)
        return len;
    const char *q = p;
    size_t left = len;
    while (left) {
        ssize_t w = write(s->fd, q, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            s->io_error = errno ? errno : EIO;
            return 0;
        }
        q += w;
        left -= (size_t)w;
    }
    return len;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static rp_status make_dirs(const char *path, rp_err *err)
{
    char *p = rp_strdup(path);
    if (!p)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                rp_status rc = rp_err_set(err, RP_ERR_IO, "cannot create %s: %s", p,
                                          strerror(errno));
                rp_free(p);
                return rc;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    rp_free(p);
    return RP_OK;
}

typedef struct pull_ctx {
    CURL *curl;
    struct curl_slist *headers;
    const char *endpoint;
    const char *repo;
    const char *commit;
    const char *repo_dir;
    const rp_hub_pull_opts *opts;
    FILE *out;
} pull_ctx;

/* Downloads file f into blobs/<blob>.incomplete (resuming) and returns its final path in
 * *out_tmp. meta receives the response headers. */
static rp_status download(pull_ctx *x, const hub_file *f, const char *tmp, http_meta *meta,
                          rp_err *err)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return rp_err_set(err, RP_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int64_t offset = file_size(tmp);
    if (offset < 0 || (f->size >= 0 && offset > f->size)) {
        offset = 0;
        if (ftruncate(fd, 0) != 0) {
            close(fd);
            return rp_err_set(err, RP_ERR_IO, "cannot truncate %s: %s", tmp, strerror(errno));
        }
    }
    if (f->size >= 0 && offset == f->size && offset > 0) {
        close(fd);
        return RP_OK; /* already complete: verify only */
    }
    lseek(fd, offset, SEEK_SET);
    char *epath = escape_path(x->curl, f->path);
    rp_buf url = {0};
    rp_buf_printf(&url, "%s/%s/resolve/%s/%s", x->endpoint, x->repo, x->commit,
                  epath ? epath : f->path);
    rp_free(epath);
    if (offset > 0 && x->opts->progress != RP_HUB_QUIET) {
        char have[32];
        rp_hub_format_bytes((double)offset, have, sizeof have);
        fprintf(x->out, "  %s: resuming at %s\n", f->path, have);
    }
    char errbuf[CURL_ERROR_SIZE] = "", range[48];
    sink s = {.curl = x->curl, .fd = fd, .offset = &offset};
    progress pr = {.opts = x->opts, .out = x->out, .name = f->path, .offset = offset,
                   .size = f->size, .t_start = rp_now_s(), .last_quarter = -1};
    curl_easy_reset(x->curl);
    setup_common(x->curl, x->headers, meta);
    curl_easy_setopt(x->curl, CURLOPT_URL, url.data);
    curl_easy_setopt(x->curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(x->curl, CURLOPT_WRITEFUNCTION, on_body_file);
    curl_easy_setopt(x->curl, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(x->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(x->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(x->curl, CURLOPT_XFERINFODATA, &pr);
    if (offset > 0) {
        snprintf(range, sizeof range, "%lld-", (long long)offset);
        curl_easy_setopt(x->curl, CURLOPT_RANGE, range);
    }
    CURLcode cc = curl_easy_perform(x->curl);
    long code = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
    pr.offset = offset;
    rp_status rc = RP_OK;
    if (s.io_error)
        rc = rp_err_set(err, RP_ERR_IO, "cannot write %s: %s", tmp, strerror(s.io_error));
    else if (code >= 400 || (cc == CURLE_OK && s.failed))
        rc = http_error(code, meta, x->repo, f->path, err);
    else if (cc != CURLE_OK) {
        char have[32];
        rp_hub_format_bytes((double)file_size(tmp), have, sizeof have);
        rc = rp_err_set(err, RP_ERR_IO,
                        "download of %s stopped after %s (%s); run 'rapid pull' again to resume",
                        f->path, have, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    }
    if (x->opts->progress == RP_HUB_BAR) /* the last state, also when it stopped */
        progress_draw(&pr, file_size(tmp), 1);
    close(fd);
    rp_buf_deinit(&url);
    return rc;
}

/* Size and sha256 check of a finished download; removes the file when it is wrong. */
static rp_status verify(pull_ctx *x, const hub_file *f, const char *tmp, rp_err *err)
{
    int64_t got = file_size(tmp);
    if (f->size >= 0 && got != f->size) {
        unlink(tmp);
        return rp_err_set(err, RP_ERR_IO,
                          "%s has %lld bytes, the hub says %lld; the partial file was removed, "
                          "run 'rapid pull' again",
                          f->path, (long long)got, (long long)f->size);
    }
    if (!f->sha256)
        return RP_OK;
    char hex[65];
    rp_status rc = rp_sha256_file(tmp, hex, err);
    if (rc != RP_OK)
        return rc;
    if (strcasecmp(hex, f->sha256) != 0) {
        unlink(tmp);
        return rp_err_set(err, RP_ERR_IO,
                          "%s is corrupt: sha256 %s, expected %s; the file was removed, run "
                          "'rapid pull' again",
                          f->path, hex, f->sha256);
    }
    return RP_OK;
}

/* snapshots/<commit>/<path> -> ../../blobs/<blob> (one more ../ per directory in path). */
static rp_status link_snapshot(pull_ctx *x, const hub_file *f, const char *blob, rp_err *err)
{
    rp_buf link = {0}, target = {0};
    rp_buf_printf(&link, "%s/snapshots/%s/%s", x->repo_dir, x->commit, f->path);
    rp_buf_puts(&target, "../../");
    for (const char *s = f->path; *s; s++)
        if (*s == '/')
            rp_buf_puts(&target, "../");
    rp_buf_printf(&target, "blobs/%s", blob);
    if (!link.data || !target.data) {
        rp_buf_deinit(&link);
        rp_buf_deinit(&target);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    char *slash = strrchr(link.data, '/');
    *slash = '\0';
    rp_status rc = make_dirs(link.data, err);
    *slash = '/';
    if (rc == RP_OK) {
        unlink(link.data);
        if (symlink(target.data, link.data) != 0)
            rc = rp_err_set(err, RP_ERR_IO, "cannot link %s: %s", link.data, strerror(errno));
    }
    rp_buf_deinit(&link);
    rp_buf_deinit(&target);
    return rc;
}

static rp_status pull_file(pull_ctx *x, const hub_file *f, int i_file, int n_files, rp_err *err)
{
    char have[32];
    rp_hub_format_bytes(f->size > 0 ? (double)f->size : 0, have, sizeof have);
    rp_buf snap = {0};
    rp_buf_printf(&snap, "%s/snapshots/%s/%s", x->repo_dir, x->commit, f->path);
    int64_t existing = snap.data ? file_size(snap.data) : -1;
    rp_buf_deinit(&snap);
    if (existing >= 0 && (f->size < 0 || existing == f->size)) {
        if (x->opts->progress != RP_HUB_QUIET)
            fprintf(x->out, "[%d/%d] %s (%s): already downloaded\n", i_file, n_files, f->path,
                    have);
        return RP_OK;
    }
    if (x->opts->progress != RP_HUB_QUIET) {
        fprintf(x->out, "[%d/%d] %s (%s)\n", i_file, n_files, f->path, have);
        fflush(x->out);
    }
    /* Without a blob id from the listing, download under a temporary name and use the
     * ETag the hub sends. */
    rp_buf tmp = {0};
    if (f->blob)
        rp_buf_printf(&tmp, "%s/blobs/%s.incomplete", x->repo_dir, f->blob);
    else
        rp_buf_printf(&tmp, "%s/blobs/tmp-%d-%d.incomplete", x->repo_dir, (int)getpid(), i_file);
    if (!tmp.data)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    http_meta meta = {0};
    rp_status rc = download(x, f, tmp.data, &meta, err);
    hub_file checked = *f;
    if (rc == RP_OK && checked.size < 0 && meta.linked_size >= 0)
        checked.size = meta.linked_size;
    if (rc == RP_OK)
        rc = verify(x, &checked, tmp.data, err);
    const char *blob = f->blob ? f->blob : meta.etag;
    if (rc == RP_OK && (!blob[0] || strchr(blob, '/')))
        rc = rp_err_set(err, RP_ERR_IO, "the hub sent no usable ETag for %s", f->path);
    rp_buf final = {0};
    if (rc == RP_OK) {
        rp_buf_printf(&final, "%s/blobs/%s", x->repo_dir, blob);
        if (rename(tmp.data, final.data) != 0)
            rc = rp_err_set(err, RP_ERR_IO, "cannot move %s into place: %s", tmp.data,
                            strerror(errno));
    }
    if (rc == RP_OK)
        rc = link_snapshot(x, f, blob, err);
    if (rc == RP_OK && x->opts->progress == RP_HUB_LINES)
        fprintf(x->out, "  %s: done%s\n", f->path, f->sha256 ? " (sha256 verified)" : "");
    rp_buf_deinit(&final);
    rp_buf_deinit(&tmp);
    return rc;
}

static int64_t json_int_or(json_t *v, int64_t dflt)
{
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static rp_status collect_files(json_t *listing, const rp_hub_pull_opts *o, hub_file **out,
                               int *n_out, rp_err *err)
{
    json_t *sib = json_object_get(listing, "siblings");
    size_t n = json_is_array(sib) ? json_array_size(sib) : 0;
    hub_file *files = rp_calloc(n ? n : 1, sizeof *files);
    if (!files)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(sib, i), *lfs = json_object_get(s, "lfs");
        const char *path = json_string_value(json_object_get(s, "rfilename"));
        if (!path || !*path || path[0] == '/' || strstr(path, "..") || !wanted(path, o))
            continue;
        hub_file *f = &files[k++];
        f->path = path;
        f->size = json_int_or(json_object_get(s, "size"), -1);
        f->blob = json_string_value(json_object_get(s, "blobId"));
        if (json_is_object(lfs)) {
            f->sha256 = json_string_value(json_object_get(lfs, "sha256"));
            f->size = json_int_or(json_object_get(lfs, "size"), f->size);
            if (f->sha256)
                f->blob = f->sha256;
        }
    }
    *out = files;
    *n_out = k;
    return RP_OK;
}

rp_status rp_hub_pull(const char *repo, const rp_hub_pull_opts *opts, char **out_snapshot,
                      rp_err *err)
{
    rp_hub_pull_opts dflt = {0};
    const rp_hub_pull_opts *o = opts ? opts : &dflt;
    const char *rev = o->revision ? o->revision : "main";
    char *repo_dir = rp_hub_repo_dir(repo);
    if (!repo_dir)
        return rp_err_set(err, RP_ERR_INVALID, "'%s' is not a hub repo (expected org/name)", repo);
    char endpoint[1024];
    hub_endpoint(endpoint, sizeof endpoint);
    CURL *c = curl_easy_init();
    struct curl_slist *h = auth_headers();
    json_t *listing = NULL;
    hub_file *files = NULL;
    int n_files = 0;
    rp_status rc = c && h ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "cannot start libcurl");
    if (rc == RP_OK)
        rc = fetch_listing(c, h, endpoint, repo, rev, &listing, err);
    const char *commit = listing ? json_string_value(json_object_get(listing, "sha")) : NULL;
    if (rc == RP_OK && (!commit || !*commit || strchr(commit, '/')))
        rc = rp_err_set(err, RP_ERR_IO, "the hub's file list for %s has no commit", repo);
    if (rc == RP_OK)
        rc = collect_files(listing, o, &files, &n_files, err);
    if (rc == RP_OK && n_files == 0)
        rc = rp_err_set(err, RP_ERR_NOT_FOUND, "%s has no files%s at %s", repo,
                        o->n_patterns ? " matching the catalog's patterns" : "", rev);
    rp_buf sub = {0};
    if (rc == RP_OK) {
        rp_buf_printf(&sub, "%s/blobs", repo_dir);
        rc = make_dirs(sub.data, err);
        rp_buf_reset(&sub);
        rp_buf_printf(&sub, "%s/snapshots/%s", repo_dir, commit);
        if (rc == RP_OK)
            rc = make_dirs(sub.data, err);
        rp_buf_reset(&sub);
        rp_buf_printf(&sub, "%s/refs", repo_dir);
        if (rc == RP_OK)
            rc = make_dirs(sub.data, err);
    }
    pull_ctx x = {.curl = c, .headers = h, .endpoint = endpoint, .repo = repo, .commit = commit,
                  .repo_dir = repo_dir, .opts = o, .out = o->out ? o->out : stderr};
    for (int i = 0; i < n_files && rc == RP_OK; i++)
        rc = pull_file(&x, &files[i], i + 1, n_files, err);
    if (rc == RP_OK && strcmp(rev, commit) != 0) {
        rp_buf_reset(&sub);
        rp_buf_printf(&sub, "%s/refs/%s", repo_dir, rev);
        if (strchr(rev, '/') == NULL)
            rc = rp_file_write(sub.data, commit, strlen(commit), err);
    }
    if (rc == RP_OK && out_snapshot) {
        rp_buf_reset(&sub);
        rp_buf_printf(&sub, "%s/snapshots/%s", repo_dir, commit);
        *out_snapshot = rp_buf_take(&sub);
    }
    rp_buf_deinit(&sub);
    rp_free(files);
    json_decref(listing);
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    rp_free(repo_dir);
    return rc;
}

/* ---- HTTP client helpers ---------------------------------------------------------------- */

static struct curl_slist *json_headers(const char *api_key, int sse)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (sse && h)
        h = curl_slist_append(h, "Accept: text/event-stream");
    if (api_key && h) {
        rp_buf b = {0};
        rp_buf_printf(&b, "Authorization: Bearer %s", api_key);
        if (b.data)
            h = curl_slist_append(h, b.data);
        rp_buf_deinit(&b);
    }
    return h;
}

rp_status rp_http_request(const char *url, const char *json_body, const char *api_key,
                          long timeout_s, char **body, long *code, rp_err *err)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = json_headers(api_key, 0);
    if (!c || !h) {
        curl_slist_free_all(h);
        if (c)
            curl_easy_cleanup(c);
        return rp_err_set(err, RP_ERR_NOMEM, "cannot start libcurl");
    }
    rp_buf resp = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body_buf);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
    if (json_body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json_body);
    CURLcode cc = curl_easy_perform(c);
    *code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    rp_status rc = RP_OK;
    if (cc != CURLE_OK)
        rc = rp_err_set(err, RP_ERR_IO, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    if (rc == RP_OK && body)
        *body = resp.data ? rp_buf_take(&resp) : rp_strdup("");
    rp_buf_deinit(&resp);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

typedef struct sse_state {
    CURL *curl;
    rp_buf pending; /* bytes not yet split into events */
    rp_buf data;    /* the data lines of the current event */
    rp_sse_fn fn;
    void *user;
    volatile int *cancel;
    int stopped;
    int is_error;   /* non-2xx: collect the body instead */
    int checked;
} sse_state;

/* Handles one line (without its end of line); an empty line ends an event. */
static int sse_line(sse_state *s, const char *line, size_t n)
{
    if (n == 0) {
        if (!s->data.data)
            return 0;
        int stop = s->fn(s->data.data, s->user);
        rp_buf_reset(&s->data);
        return stop;
    }
    if (n >= 5 && memcmp(line, "data:", 5) == 0) {
        const char *v = line + 5;
        size_t m = n - 5;
        if (m && *v == ' ') {
            v++;
            m--;
        }
        if (s->data.data)
            rp_buf_putc(&s->data, '\n');
        else
            rp_buf_reserve(&s->data, m);
        rp_buf_append(&s->data, v, m);
    }
    return 0; /* comments (":"), event:, id:, retry: are ignored */
}

static size_t on_sse(char *p, size_t size, size_t n, void *user)
{
    sse_state *s = user;
    size_t len = size * n;
    if (!s->checked) {
        long code = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
        s->is_error = code < 200 || code >= 300;
        s->checked = 1;
    }
    if (s->cancel && *s->cancel)
        return 0;
    if (rp_buf_append(&s->pending, p, len) != RP_OK)
        return 0;
    if (s->is_error)
        return len;
    size_t start = 0;
    for (size_t i = 0; i < s->pending.len; i++) {
        if (s->pending.data[i] != '\n')
            continue;
        size_t end = i;
        if (end > start && s->pending.data[end - 1] == '\r')
            end--;
        if (sse_line(s, s->pending.data + start, end - start)) {
            s->stopped = 1;
            return 0;
        }
        start = i + 1;
    }
    memmove(s->pending.data, s->pending.data + start, s->pending.len - start);
    s->pending.len -= start;
    s->pending.data[s->pending.len] = '\0';
    return len;
}

static int on_sse_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    sse_state *s = user;
    return s->cancel && *s->cancel ? 1 : 0;
}

rp_status rp_http_sse(const char *url, const char *json_body, const char *api_key, rp_sse_fn fn,
                      void *user, volatile int *cancel, long *code, char **err_body, rp_err *err)
{
    if (err_body)
        *err_body = NULL;
    CURL *c = curl_easy_init();
    struct curl_slist *h = json_headers(api_key, 1);
    if (!c || !h) {
        curl_slist_free_all(h);
        if (c)
            curl_easy_cleanup(c);
        return rp_err_set(err, RP_ERR_NOMEM, "cannot start libcurl");
    }
    sse_state s = {.curl = c, .fn = fn, .user = user, .cancel = cancel};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json_body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_sse_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
    CURLcode cc = curl_easy_perform(c);
    *code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    rp_status rc = RP_OK;
    if (cancel && *cancel)
        rc = RP_ERR_CANCELLED;
    else if (cc != CURLE_OK && !s.stopped)
        rc = rp_err_set(err, RP_ERR_IO, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    else if (!s.is_error)
        sse_line(&s, "", 0); /* an event not closed by a blank line */
    if (rc == RP_OK && s.is_error && err_body)
        *err_body = s.pending.data ? rp_buf_take(&s.pending) : rp_strdup("");
    rp_buf_deinit(&s.pending);
    rp_buf_deinit(&s.data);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}
