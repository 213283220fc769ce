/* base/file.c - file reads and memory maps. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

static rp_status open_error(const char *path, rp_err *err)
{
    rp_status code = errno == ENOENT ? RP_ERR_NOT_FOUND : RP_ERR_IO;
    return rp_err_set(err, code, "cannot open %s: %s", path, strerror(errno));
}

rp_status rp_file_read(const char *path, char **out, size_t *out_len, rp_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return open_error(path, err);
    struct stat st;
    char *data = NULL;
    rp_status rc = RP_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = rp_err_set(err, RP_ERR_IO, "%s is not a regular file", path);
        goto out;
    }
    data = rp_alloc((size_t)st.st_size + 1);
    if (!data) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = rp_err_set(err, RP_ERR_IO, "cannot read %s: %s", path,
                            n < 0 ? strerror(errno) : "short read");
            goto out;
        }
        got += (size_t)n;
    }
    data[got] = '\0';
    *out = data;
    if (out_len)
        *out_len = got;
    data = NULL;
out:
    rp_free(data);
    close(fd);
    return rc;
}

rp_status rp_file_write(const char *path, const void *data, size_t n, rp_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rp_err_set(err, RP_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return rp_err_set(err, RP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0)
        return rp_err_set(err, RP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return RP_OK;
}

rp_status rp_mmap_open(const char *path, rp_mmap *out, rp_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return open_error(path, err);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rp_err_set(err, RP_ERR_IO, "%s is not a regular file", path);
    }
    out->n_bytes = (size_t)st.st_size;
    out->data = NULL;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return rp_err_set(err, RP_ERR_IO, "cannot map %s: %s", path, strerror(errno));
        }
        out->data = p;
    }
    close(fd); /* the mapping keeps the file alive */
    return RP_OK;
}

void rp_mmap_close(rp_mmap *m)
{
    if (m && m->data)
        munmap((void *)m->data, m->n_bytes);
    if (m) {
        m->data = NULL;
        m->n_bytes = 0;
    }
}

int rp_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int rp_path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *rp_path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/')
        la--;
    char *p = rp_alloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}
