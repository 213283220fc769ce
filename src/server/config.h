/* server/config.h - `rapid serve` settings: command-line flag, then RAPID_* variable, then
 * the default.
 *
 *   setting            flag                  environment               default
 *   host               --host                RAPID_HOST                127.0.0.1
 *   port               --port                RAPID_PORT                8000 (0: any free port)
 *   api key            --api-key             RAPID_API_KEY             none (open)
 *   body limit         --max-request-bytes   RAPID_MAX_REQUEST_BYTES   8388608
 *   CORS origins       --cors-origins        RAPID_CORS_ORIGINS        *
 *   log level          --log-level           RAPID_LOG_LEVEL           info
 *   served name        --served-model-name   RAPID_SERVED_MODEL_NAME   the model folder's name
 *   kernel threads     --threads             RAPID_THREADS             0 (one per CPU)
 *   queue bound        --max-queue           RAPID_MAX_QUEUE           64
 *   tool-call parser   --tool-call-parser    RAPID_TOOL_CALL_PARSER    detected from the template
 *   reasoning parser   --reasoning-parser    RAPID_REASONING_PARSER    detected ("none": off)
 *   SSE keep-alive     (none)                RAPID_SSE_KEEPALIVE_MS    5000
 *
 * Ownership: strings in rp_server_config are borrowed from the flags or the environment.
 * Threading: resolve once at start-up. Errors: RP_ERR_INVALID naming the setting.
 */
#ifndef RP_SERVER_CONFIG_H
#define RP_SERVER_CONFIG_H

#include <stddef.h>

#include "base/status.h"

typedef struct rp_server_flags {
    const char *host, *port, *api_key, *max_request_bytes, *cors_origins, *log_level,
        *served_model_name, *threads, *max_queue, *tool_call_parser, *reasoning_parser;
} rp_server_flags;

typedef struct rp_server_config {
    const char *host;
    int port;
    const char *api_key; /* NULL or "": no auth */
    size_t max_request_bytes;
    const char *cors_origins; /* "*" or a comma-separated list; "" disables CORS */
    int log_level;            /* rp_log_level */
    const char *served_name;  /* NULL: derive from the model path */
    int n_threads;
    int max_queue;
    int keepalive_ms;
    int max_connections;
    const char *tool_parser;      /* NULL: detect */
    const char *reasoning_parser; /* NULL: detect */
} rp_server_config;

rp_status rp_server_config_resolve(const rp_server_flags *flags, rp_server_config *out,
                                   rp_err *err);

#endif
