/* base/log.h - leveled logging to one sink (stderr by default).
 *
 * The level and sink are the process's only mutable globals besides CPU features (see
 * docs/architecture.md). Set them once at start-up, from main().
 * Threading: rp_log may be called from any thread; lines are written whole.
 */
#ifndef RP_BASE_LOG_H
#define RP_BASE_LOG_H

typedef enum rp_log_level {
    RP_LOG_DEBUG = 0,
    RP_LOG_INFO,
    RP_LOG_WARN,
    RP_LOG_ERROR,
    RP_LOG_OFF,
} rp_log_level;

typedef void (*rp_log_sink)(rp_log_level level, const char *line, void *user);

void rp_log_set_level(rp_log_level level);
rp_log_level rp_log_get_level(void);
/* Parses "debug|info|warn|error|off"; returns -1 when unknown. */
int rp_log_parse_level(const char *s);
/* NULL restores the stderr sink. */
void rp_log_set_sink(rp_log_sink sink, void *user);

void rp_log(rp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define RP_DEBUG(...) rp_log(RP_LOG_DEBUG, __VA_ARGS__)
#define RP_INFO(...) rp_log(RP_LOG_INFO, __VA_ARGS__)
#define RP_WARN(...) rp_log(RP_LOG_WARN, __VA_ARGS__)
#define RP_ERROR(...) rp_log(RP_LOG_ERROR, __VA_ARGS__)

#endif
