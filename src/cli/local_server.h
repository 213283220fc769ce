/* cli/local_server.h - a `rapid serve` child for commands that need a server (rapid chat).
 *
 * rp_local_server_start runs this binary as `rapid serve [MODEL] --port 0` in a child process
 * on a free loopback port, reads the port from its "listening on" line and waits until
 * /health answers 200 (the model has loaded). The child's log goes to a file in /tmp, named in
 * errors, so it never mixes with the terminal conversation.
 *
 * Ownership: rp_local_server_stop ends the child (SIGTERM, then waits) and frees the struct.
 * Threading: the calling thread only.
 * Errors:    RP_ERR_IO (could not start, or the server exited: the message quotes its last
 *            log line), RP_ERR_LIMIT (not healthy within the timeout).
 */
#ifndef RP_CLI_LOCAL_SERVER_H
#define RP_CLI_LOCAL_SERVER_H

#include "base/status.h"

typedef struct rp_local_server rp_local_server;

/* model: NULL for the default model. url receives "http://127.0.0.1:PORT". */
rp_status rp_local_server_start(const char *model, int timeout_s, rp_local_server **out,
                                char *url, size_t n_url, rp_err *err);
void rp_local_server_stop(rp_local_server *s); /* NULL ok */

#endif
