/* base/log.c - the log sink. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static rp_log_level g_level = RP_LOG_INFO;
static rp_log_sink g_sink;
static void *g_sink_user;

void rp_log_set_level(rp_log_level level) { g_level = level; }
rp_log_level rp_log_get_level(void) { return g_level; }

int rp_log_parse_level(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

void rp_log_set_sink(rp_log_sink sink, void *user)
{
    g_sink = sink;
    g_sink_user = user;
}

void rp_log(rp_log_level level, const char *fmt, ...)
{
    if (level < g_level)
        return;
    static const char tags[] = "DIWE";
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %c ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level < 4 ? level : 3]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (g_sink) {
        g_sink(level, line, g_sink_user);
        return;
    }
    fprintf(stderr, "%s\n", line); /* one call: lines from threads do not interleave */
}
