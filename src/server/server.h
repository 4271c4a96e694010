/*
 * server.h - `rapid serve`: the HTTP server in front of the engine.
 *
 * One rp_server listens on one address and answers the OpenAI API
 * (/v1/chat/completions, /v1/completions, /v1/models), the Anthropic API
 * (/v1/messages, /v1/messages/count_tokens), the Responses API
 * (/v1/responses) and the operations endpoints (/health, /metrics, HEAD /).
 * Every request runs on its own connection thread (libmicrohttpd, thread per
 * connection); generations go to the shared engine, whose thread batches them.
 *
 * Lifecycle: rp_server_create binds and starts serving at once; rp_server_stop
 * (async-signal-safe) wakes rp_server_wait; rp_server_destroy stops accepting,
 * cancels every running generation, joins the connection threads and frees the
 * server. rp_server_run does all of it around SIGINT/SIGTERM for `rapid serve`.
 *
 * Threads: create/wait/destroy from one thread; stop from any thread or a
 * signal handler. The engine, model and tokenizer are borrowed and must
 * outlive the server.
 */
#ifndef RP_SERVER_H
#define RP_SERVER_H

#include "../engine/engine.h"

#define RP_SERVER_DEFAULT_PORT 8000
#define RP_SERVER_DEFAULT_MAX_REQUEST_BYTES ((size_t)8 << 20)
#define RP_SERVER_DEFAULT_MAX_CONNECTIONS 512
#define RP_SERVER_DEFAULT_TIMEOUT_S 30.0

typedef struct rp_server_params {
    const char *host;              // address to bind (name or literal); default "127.0.0.1"
    int port;                      // default 8000; 0 picks a free port (see rp_server_port)
    const char *api_key;           // NULL or "": no authentication
    const char *served_model_name; // NULL: the model folder's or file's base name (".gguf" dropped)
    size_t max_request_bytes;      // largest request body; default 8 MiB (over it: 413)
    bool strict_model_name;        // 404 for a model name other than the served one
    const char *tool_parser;       // tool-call format name (chat.h); NULL: chosen from the chat template
    const char *reasoning_parser;  // reasoning format name; NULL: chosen from the chat template
    const char *chat_template;     // Jinja source used instead of the tokenizer's (--chat-template); NULL: the
                                   // tokenizer's. Parsed at create (formats are chosen from it), not kept
    bool quiet;                    // no per-request log lines (tests)
    // Connections (see server_int.h, "connections"): at most max_connections open at once
    // (default 512), at most max_connections_per_client of them from one client address (an
    // IPv4 address or an IPv6 /64; default a quarter of max_connections). Past either limit the
    // oldest connection of that address (or, at the global limit, of the address holding the
    // most) that has not sent a whole request head yet, an idle kept-alive one included, is
    // closed to make room; if there is none, the new connection is answered 503 with
    // Retry-After. timeout_s (default 30): a request's head must arrive within it of the
    // connection's start or the previous reply's end (so an idle kept-alive connection is closed
    // after it), and its body within it of the head's end. Nothing is timed once the body is in:
    // a generation or a stream runs as long as it takes.
    int max_connections;
    int max_connections_per_client;
    double timeout_s;
    // Cross-origin requests from browsers (CORS): a comma list of origins
    // ("https://app.example,http://localhost:3000") or "*" for any; NULL or "": none (no
    // CORS headers; a browser then allows same-origin pages only). A request whose Origin is
    // listed gets Access-Control-Allow-Origin (and Vary: Origin) on its answer, and a
    // preflight (OPTIONS with Access-Control-Request-Method) for any route's path is answered
    // 204 with the methods and headers it may use; a preflight from an origin not listed: 403.
    const char *allowed_origins;
    // A listening socket opened earlier by rp_server_listen (so a busy or bad address fails
    // before a model loads), which rp_server_create takes over (and closes if it fails);
    // without one (has_listen_fd false, the default) it binds host:port itself.
    bool has_listen_fd;
    int listen_fd;
} rp_server_params;

void rp_server_params_default(rp_server_params *p);

typedef struct rp_server rp_server;

// Binds host:port and starts serving. m and tok are the engine's model and
// tokenizer (for the chat template, the model name and parser selection). p is
// copied. Errors: RP_ERR_IO (address cannot be resolved or bound, message
// names it), RP_ERR_INVALID (bad params or parser names), RP_ERR_NOMEM.
rp_status rp_server_create(rp_engine *e, const rp_model *m, const rp_tokenizer *tok, const rp_server_params *p,
                           rp_server **out);
// The port actually bound (the chosen one when params.port was 0).
int rp_server_port(const rp_server *s);
// Opens a socket listening on host:port (0: a free one) for rp_server_params.listen_fd:
// *fd_out, and the port it got. Errors: RP_ERR_IO naming the address and why.
rp_status rp_server_listen(const char *host, int port, int *fd_out, int *port_out);
// Wakes rp_server_wait. Async-signal-safe; any thread.
void rp_server_stop(rp_server *s);
// Blocks until rp_server_stop.
void rp_server_wait(rp_server *s);
// Stops accepting, cancels running generations, closes connections, joins
// their threads, frees the server. NULL is a no-op.
void rp_server_destroy(rp_server *s);

// Creates the server, prints exactly one line to stderr once it listens
// ("rapid: listening on http://HOST:PORT"), serves until SIGINT or SIGTERM,
// then shuts down cleanly (rp_server_destroy) and returns RP_OK. Errors as for
// rp_server_create, and RP_ERR_DEVICE when it stopped because the engine failed (its
// device was lost: rp_engine_failed; a server made by rp_server_create is stopped then
// too, rp_server_wait returning). Installs SIGINT/SIGTERM handlers for its duration and
// ignores SIGPIPE.
rp_status rp_server_run(rp_engine *e, const rp_model *m, const rp_tokenizer *tok, const rp_server_params *p);

#endif
