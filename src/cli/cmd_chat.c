/* cli/cmd_chat.c - `rapid chat`: a terminal REPL against a running server.
 *
 * Lines are read with libedit (history in $XDG_STATE_HOME/rapid/chat_history, else
 * ~/.local/state/rapid/chat_history); a line ending in '\' continues on the next one, and a
 * line holding only """ starts or ends a multi-line block. Each question is sent to
 * URL/v1/chat/completions with "stream": true; content is printed as it arrives, reasoning
 * (delta.reasoning_content or delta.reasoning) dimmed. Ctrl-C during an answer stops that
 * answer (the partial text stays in the conversation) and returns to the prompt; at the
 * prompt it clears the line; Ctrl-D or /exit leaves.
 *
 * Threading: one thread. The SIGINT flag is the one mutable global here: a signal handler
 * has nowhere else to write.
 */
#include <editline/readline.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/hub.h"
#include "cli/local_server.h"

static volatile sig_atomic_t g_sigint; /* set by on_sigint; read by the stream's cancel poll */

static void on_sigint(int sig) { g_sigint = 1; }

typedef struct chat {
    char url[512];
    const char *model;
    char *system;     /* rp_strdup'd, or NULL */
    json_t *messages; /* user/assistant turns (the system prompt is added per request) */
    int think;        /* -1: the server's default, 0 off, 1 on */
    int color;
    /* the answer being streamed */
    rp_buf answer;
    int in_reasoning;
    int printed_any;
    json_t *usage;
    double t_first;
} chat;

static void dim_on(chat *c)
{
    if (c->color)
        fputs("\033[2m", stdout);
}

static void dim_off(chat *c)
{
    if (c->color)
        fputs("\033[0m", stdout);
}

static int on_event(const char *data, void *user)
{
    chat *c = user;
    if (strcmp(data, "[DONE]") == 0)
        return 1;
    json_t *j = json_loads(data, 0, NULL);
    if (!j)
        return 0;
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        json_decref(c->usage);
        c->usage = json_incref(usage);
    }
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    const char *reasoning = json_string_value(json_object_get(delta, "reasoning_content"));
    if (!reasoning)
        reasoning = json_string_value(json_object_get(delta, "reasoning"));
    const char *content = json_string_value(json_object_get(delta, "content"));
    if ((reasoning && *reasoning) || (content && *content)) {
        if (c->t_first == 0)
            c->t_first = rp_now_s();
    }
    if (reasoning && *reasoning) {
        if (!c->in_reasoning)
            dim_on(c);
        c->in_reasoning = 1;
        fputs(reasoning, stdout);
        c->printed_any = 1;
    }
    if (content && *content) {
        if (c->in_reasoning) {
            dim_off(c);
            fputs("\n\n", stdout);
            c->in_reasoning = 0;
        }
        fputs(content, stdout);
        rp_buf_puts(&c->answer, content);
        c->printed_any = 1;
    }
    fflush(stdout);
    json_decref(j);
    return 0;
}

static char *request_body(chat *c)
{
    json_t *msgs = json_array();
    if (c->system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", c->system));
    json_array_extend(msgs, c->messages);
    json_t *req = json_pack("{s:s, s:o, s:b, s:{s:b}}", "model", c->model, "messages", msgs,
                            "stream", 1, "stream_options", "include_usage", 1);
    if (c->think >= 0)
        json_object_set_new(req, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking", c->think));
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return s;
}

static void print_server_error(const char *body, long code, const char *url)
{
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    fprintf(stderr, "server error (HTTP %ld): %s\n", code, msg ? msg : (body && *body ? body : url));
    json_decref(j);
}

/* Sends the conversation and streams the answer; the answer joins the conversation. */
static void ask(chat *c, const char *question)
{
    json_array_append_new(c->messages, json_pack("{s:s, s:s}", "role", "user", "content", question));
    char *body = request_body(c);
    rp_buf url = {0};
    rp_buf_printf(&url, "%s/v1/chat/completions", c->url);
    rp_buf_reset(&c->answer);
    c->in_reasoning = c->printed_any = 0;
    c->t_first = 0;
    json_decref(c->usage);
    c->usage = NULL;
    g_sigint = 0;
    double t0 = rp_now_s();
    long code = 0;
    char *err_body = NULL;
    rp_err err;
    rp_status rc = rp_http_sse(url.data, body, NULL, on_event, c, (volatile int *)&g_sigint,
                               &code, &err_body, &err);
    if (c->in_reasoning)
        dim_off(c);
    double t1 = rp_now_s();
    if (rc == RP_ERR_CANCELLED) {
        printf("\n[stopped]\n");
    } else if (rc != RP_OK) {
        fprintf(stderr, "\ncannot reach the server: %s\nstart one with 'rapid serve MODEL', or "
                        "pass --url\n", err.msg);
    } else if (code < 200 || code >= 300) {
        print_server_error(err_body, code, url.data);
    } else {
        if (c->printed_any)
            putchar('\n');
        json_int_t n_out =
            json_integer_value(json_object_get(c->usage, "completion_tokens"));
        if (n_out > 0 && c->t_first > 0) {
            dim_on(c);
            printf("[%lld tokens, %.1f tok/s, first token after %.2f s]", (long long)n_out,
                   t1 > c->t_first ? (double)n_out / (t1 - c->t_first) : 0.0, c->t_first - t0);
            dim_off(c);
            putchar('\n');
        }
    }
    if (rc == RP_OK && (code < 200 || code >= 300)) /* the question got no answer */
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
    else if (c->answer.len || rc == RP_ERR_CANCELLED)
        json_array_append_new(c->messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content",
                                        c->answer.data ? c->answer.data : ""));
    else if (rc != RP_OK)
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
    fflush(stdout);
    rp_free(err_body);
    free(body);
    rp_buf_deinit(&url);
    g_sigint = 0;
}

static void print_help(void)
{
    printf("/help           this list\n"
           "/reset          forget the conversation (keeps the system prompt)\n"
           "/system TEXT    set the system prompt (empty TEXT removes it)\n"
           "/think          ask the model to reason first (enable_thinking)\n"
           "/no-think       ask it to answer directly\n"
           "/save FILE      write the conversation to FILE as JSON\n"
           "/exit           leave (or Ctrl-D)\n"
           "A line ending in \\ continues on the next; \"\"\" starts and ends a block.\n"
           "Ctrl-C stops an answer.\n");
}

static void save(chat *c, const char *path)
{
    json_t *msgs = json_array();
    if (c->system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", c->system));
    json_array_extend(msgs, c->messages);
    json_t *doc = json_pack("{s:s, s:o}", "model", c->model, "messages", msgs);
    if (json_dump_file(doc, path, JSON_INDENT(2)) == 0)
        printf("saved %zu messages to %s\n", json_array_size(msgs), path);
    else
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    json_decref(doc);
}

/* Returns 1 when the REPL should end. */
static int slash_command(chat *c, const char *line)
{
    const char *arg = strchr(line, ' ');
    size_t n = arg ? (size_t)(arg - line) : strlen(line);
    while (arg && *arg == ' ')
        arg++;
#define IS(s) (n == strlen(s) && strncmp(line, s, n) == 0)
    if (IS("/exit") || IS("/quit") || IS("/bye"))
        return 1;
    if (IS("/help") || IS("/?")) {
        print_help();
    } else if (IS("/reset") || IS("/clear")) {
        json_array_clear(c->messages);
        printf("conversation cleared\n");
    } else if (IS("/system")) {
        rp_free(c->system);
        c->system = arg && *arg ? rp_strdup(arg) : NULL;
        printf(c->system ? "system prompt set\n" : "system prompt removed\n");
    } else if (IS("/think")) {
        c->think = 1;
        printf("thinking on\n");
    } else if (IS("/no-think") || IS("/nothink")) {
        c->think = 0;
        printf("thinking off\n");
    } else if (IS("/save")) {
        if (arg && *arg)
            save(c, arg);
        else
            printf("usage: /save FILE\n");
    } else {
        printf("unknown command %.*s (try /help)\n", (int)n, line);
    }
#undef IS
    return 0;
}

typedef struct input {
    int tty;
    char *history;
} input;

/* One line without its newline (heap, free()), or NULL at end of input. */
static char *read_line(input *in, const char *prompt)
{
    if (in->tty) {
        for (;;) {
            g_sigint = 0;
            char *l = readline(prompt);
            if (l || !g_sigint)
                return l;
            putchar('\n'); /* Ctrl-C at the prompt: a fresh prompt */
        }
    }
    fputs(prompt, stdout);
    fflush(stdout);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n && line[n - 1] == '\n')
        line[n - 1] = '\0';
    return line;
}

/* Reads one message (several lines when continued). NULL at end of input. */
static char *read_message(input *in)
{
    rp_buf msg = {0};
    int block = 0, more = 0;
    for (;;) {
        char *l = read_line(in, block || more ? "... " : ">>> ");
        if (!l) {
            if (msg.data)
                break;
            rp_buf_deinit(&msg);
            return NULL;
        }
        size_t n = strlen(l);
        if (strcmp(l, "\"\"\"") == 0) {
            free(l);
            if (block)
                break;
            block = 1;
            continue;
        }
        more = !block && n && l[n - 1] == '\\';
        if (more)
            l[--n] = '\0';
        if (msg.data)
            rp_buf_putc(&msg, '\n');
        rp_buf_append(&msg, l, n);
        free(l);
        if (!block && !more)
            break;
    }
    char *s = msg.data ? rp_buf_take(&msg) : rp_strdup("");
    return s;
}

static char *history_path(void)
{
    rp_buf b = {0};
    const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
    if (x && *x)
        rp_buf_printf(&b, "%s/rapid", x);
    else
        rp_buf_printf(&b, "%s/.local/state/rapid", h && *h ? h : "/tmp");
    if (!b.data)
        return NULL;
    char *p = b.data;
    for (char *s = p + 1; *s; s++) /* mkdir -p */
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0700);
    rp_buf_puts(&b, "/chat_history");
    return rp_buf_take(&b);
}

/* Asks the server which model it serves (for the greeting and the "model" field). */
static char *first_model(const char *url, int *answered)
{
    rp_buf u = {0};
    rp_buf_printf(&u, "%s/v1/models", url);
    char *body = NULL;
    long code = 0;
    *answered = rp_http_request(u.data, NULL, NULL, 5, &body, &code, NULL) == RP_OK && code == 200;
    rp_buf_deinit(&u);
    json_t *j = *answered ? json_loads(body, 0, NULL) : NULL;
    const char *id = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    char *out = id ? rp_strdup(id) : NULL;
    json_decref(j);
    rp_free(body);
    return out;
}

int rp_cmd_chat(int argc, char **argv)
{
    const char *url = NULL, *system = NULL, *pos[1];
    int no_think = 0, think = 0, n_pos = 0;
    rp_opt opts[] = {{"url", &url, NULL},
                     {"system", &system, NULL},
                     {"no-think", NULL, &no_think},
                     {"think", NULL, &think}};
    if (rp_args_parse(argc, argv, opts, 4, pos, 1, &n_pos) != 0)
        return 2;
    int url_given = url || (getenv("RAPID_URL") && *getenv("RAPID_URL"));
    if (!url)
        url = getenv("RAPID_URL") && *getenv("RAPID_URL") ? getenv("RAPID_URL")
                                                          : "http://127.0.0.1:8000";
    chat c = {.think = no_think ? 0 : think ? 1 : -1, .color = isatty(STDOUT_FILENO)};
    snprintf(c.url, sizeof c.url, "%s", url);
    size_t n = strlen(c.url);
    while (n && c.url[n - 1] == '/')
        c.url[--n] = '\0';
    if (n > 3 && strcmp(c.url + n - 3, "/v1") == 0)
        c.url[n - 3] = '\0';
    int answered = 0;
    char *served = first_model(c.url, &answered);
    rp_local_server *local = NULL;
    if (!answered && !url_given) { /* nothing at the default address: run a server ourselves */
        rp_free(served);
        served = NULL;
        fprintf(stderr, "rapid chat: no server at %s; starting one for %s ...\n", c.url,
                n_pos ? pos[0] : "the default model");
        rp_err err = {0};
        if (rp_local_server_start(n_pos ? pos[0] : NULL, 300, &local, c.url, sizeof c.url,
                                  &err) != RP_OK) {
            fprintf(stderr, "rapid chat: %s\n", err.msg);
            return 1;
        }
        served = first_model(c.url, &answered);
    }
    if (!answered) {
        fprintf(stderr, "rapid chat: no server answers at %s; start one with 'rapid serve "
                        "MODEL' (or leave out --url to start one)\n", c.url);
        rp_free(served);
        rp_local_server_stop(local);
        return 1;
    }
    if (local) /* the child serves MODEL under its own name */
        n_pos = 0;
    c.model = n_pos ? pos[0] : served ? served : "default";
    c.system = system ? rp_strdup(system) : NULL;
    c.messages = json_array();
    input in = {.tty = isatty(STDIN_FILENO)};
    if (in.tty) {
        using_history();
        in.history = history_path();
        if (in.history)
            read_history(in.history);
    }
    struct sigaction sa = {.sa_handler = on_sigint}, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    printf("rapid chat with %s at %s (/help for commands, Ctrl-D to leave)\n", c.model, c.url);
    for (;;) {
        char *msg = read_message(&in);
        if (!msg) {
            putchar('\n');
            break;
        }
        const char *p = msg;
        while (*p == ' ' || *p == '\t')
            p++;
        int stop = 0;
        if (*p) {
            if (in.tty)
                add_history(msg);
            if (p[0] == '/')
                stop = slash_command(&c, p);
            else
                ask(&c, msg);
        }
        rp_free(msg);
        if (stop)
            break;
    }
    sigaction(SIGINT, &old_sa, NULL);
    if (in.history)
        write_history(in.history);
    rp_free(in.history);
    rp_free(c.system);
    rp_free(served);
    json_decref(c.messages);
    json_decref(c.usage);
    rp_buf_deinit(&c.answer);
    rp_local_server_stop(local);
    return 0;
}
