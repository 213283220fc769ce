/* cli/local_server.c - spawning `rapid serve` as a child and waiting for it to be ready. */
#include "cli/local_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cli/hub.h"

struct rp_local_server {
    pid_t pid;
    char log_path[64];
};

/* The port from the child's "listening on http://HOST:PORT" line, 0 while not yet there. */
static int read_port(const char *log_path, char *last, size_t n_last)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return 0;
    char line[1024];
    int port = 0;
    while (fgets(line, sizeof line, f)) {
        size_t l = strlen(line) < n_last ? strlen(line) : n_last - 1;
        memcpy(last, line, l);
        last[l] = '\0';
        const char *p = strstr(line, "listening on http://");
        const char *colon = p ? strchr(p + strlen("listening on http://"), ':') : NULL;
        if (colon)
            port = atoi(colon + 1);
    }
    fclose(f);
    size_t l = strlen(last);
    if (l && last[l - 1] == '\n')
        last[l - 1] = '\0';
    return port;
}

static int exited(rp_local_server *s)
{
    int status;
    return waitpid(s->pid, &status, WNOHANG) == s->pid;
}

static void nap(void)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static rp_status spawn(rp_local_server *s, const char *model, rp_err *err)
{
    snprintf(s->log_path, sizeof s->log_path, "/tmp/rapid-chat-server-XXXXXX");
    int fd = mkstemp(s->log_path);
    if (fd < 0)
        return rp_err_set(err, RP_ERR_IO, "cannot create a log file: %s", strerror(errno));
    s->pid = fork();
    if (s->pid < 0) {
        close(fd);
        return rp_err_set(err, RP_ERR_IO, "cannot start a server: %s", strerror(errno));
    }
    if (s->pid == 0) { /* child: the same binary, as `rapid serve` */
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        char *argv[] = {"rapid", "serve", (char *)model, "--port", "0", "--host", "127.0.0.1",
                        NULL};
        if (!model) /* no MODEL: serve's default (the embedded model) */
            memmove(&argv[2], &argv[3], sizeof(char *) * 5);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fd);
    return RP_OK;
}

rp_status rp_local_server_start(const char *model, int timeout_s, rp_local_server **out,
                                char *url, size_t n_url, rp_err *err)
{
    rp_local_server *s = rp_calloc(1, sizeof *s);
    if (!s)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    s->pid = -1;
    rp_status rc = spawn(s, model, err);
    if (rc) {
        unlink(s->log_path);
        rp_free(s);
        return rc;
    }
    char last[512] = "";
    time_t deadline = time(NULL) + timeout_s;
    int port = 0;
    while (time(NULL) < deadline) {
        if (!port)
            port = read_port(s->log_path, last, sizeof last);
        if (port) {
            snprintf(url, n_url, "http://127.0.0.1:%d", port);
            char health[160];
            snprintf(health, sizeof health, "%s/health", url);
            long code = 0;
            if (rp_http_request(health, NULL, NULL, 5, NULL, &code, NULL) == RP_OK && code == 200) {
                *out = s;
                return RP_OK;
            }
        }
        if (exited(s)) {
            read_port(s->log_path, last, sizeof last);
            s->pid = -1;
            rc = rp_err_set(err, RP_ERR_IO, "the server for the chat exited: %s (log: %s)", last,
                            s->log_path);
            rp_free(s);
            return rc;
        }
        nap();
    }
    rc = rp_err_set(err, RP_ERR_LIMIT, "the server for the chat was not ready in %d s (log: %s)",
                    timeout_s, s->log_path);
    rp_local_server_stop(s);
    return rc;
}

void rp_local_server_stop(rp_local_server *s)
{
    if (!s)
        return;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status;
        for (int i = 0; i < 100 && waitpid(s->pid, &status, WNOHANG) == 0; i++)
            nap();
        if (waitpid(s->pid, &status, WNOHANG) == 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
        }
        unlink(s->log_path);
    }
    rp_free(s);
}
