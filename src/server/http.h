/* http.h — the HTTP layer of `1bit serve`: a thin wrapper over libmicrohttpd.
 *
 * Owns: the listening socket, one thread per connection (a streaming reply blocks its thread
 * while it waits for tokens), the limits on what a client may send (body 413, headers 431,
 * connections 503 + Retry-After, slow bodies 408), the route table (method + path -> handler;
 * 404 / 405), Host/Origin locality checks, the API key (constant-time compare; every route but
 * the open ones), CORS, error replies in OpenAI's shape. docs/reliability.md states the policy.
 * Does not own: JSON request semantics or tokens (openai_*.c), the model (the scheduler).
 * libmicrohttpd parses HTTP (incl. chunked bodies and `Expect: 100-continue`).
 */
#ifndef OB_HTTP_H
#define OB_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ob_http ob_http_t;

/* A growable byte buffer (always NUL-terminated). */
typedef struct {
    char *p;
    size_t len, cap;
} ob_sbuf;

int ob_sbuf_put(ob_sbuf *b, const char *s, size_t n);
int ob_sbuf_puts(ob_sbuf *b, const char *s);
__attribute__((format(printf, 2, 3))) int ob_sbuf_printf(ob_sbuf *b, const char *fmt, ...);
void ob_sbuf_free(ob_sbuf *b);

/* Produces the next piece of a streamed reply into out. Returns 1 (more may come),
 * 0 (done: out holds the last piece) or -1 (abort the connection). May block. */
typedef int (*ob_http_stream_fn)(void *user, ob_sbuf *out);

typedef struct ob_http_req {
    const char *method, *path;   /* path without the query string */
    const char *body;            /* NUL-terminated; "" when none */
    size_t body_len;
    void *conn;                  /* libmicrohttpd connection */
    int fd;                      /* the client's socket, for hang-up checks */
    /* the reply the handler fills: a whole body ... */
    int status;
    const char *content_type;    /* default application/json */
    ob_sbuf out;
    /* ... or a stream (text/event-stream unless content_type says otherwise) */
    ob_http_stream_fn stream;
    void *stream_user;
    void (*stream_free)(void *user); /* called once the connection is done with the stream */
} ob_http_req;

typedef void (*ob_http_handler_fn)(void *app, ob_http_req *r);

typedef struct {
    const char *method;          /* "GET", "POST" */
    const char *path;
    ob_http_handler_fn fn;
    int open;                    /* 1: no API key needed (/health, /v1/models as llama-server) */
} ob_http_route;

typedef struct {
    const char *host;            /* address to bind; NULL: 127.0.0.1 */
    int port;                    /* 0: any free port (see ob_http_port) */
    const char *api_key;         /* NULL: none (then only local Host/Origin are accepted) */
    size_t max_body;             /* bytes; larger bodies get 413 */
    size_t max_header;           /* bytes of request line + headers; more get 431; 0: 16 KiB */
    int max_conns;               /* open connections; a request on one beyond gets 503; <= 0: 256 */
    int timeout_s;               /* idle connection timeout; <= 0: 600 */
    int request_timeout_s;       /* most seconds to receive one request's body (408); <= 0: none */
    const ob_http_route *routes;
    int n_routes;
    void *app;                   /* passed to handlers */
} ob_http_config;

int ob_http_start(const ob_http_config *cfg, ob_http_t **out, char *err, size_t errlen);
int ob_http_port(const ob_http_t *h);
/* Stops accepting new connections (existing ones finish). */
void ob_http_quiesce(ob_http_t *h);
/* Closes every connection and joins their threads. */
void ob_http_stop(ob_http_t *h);

/* A request header (case-insensitive name) or NULL. */
const char *ob_http_header(const ob_http_req *r, const char *name);
/* A query-string argument or NULL. */
const char *ob_http_query(const ob_http_req *r, const char *name);
/* Nonzero when the client has closed its side of the connection. */
int ob_http_client_gone(const ob_http_req *r);
/* Nonzero when hostport (a Host header, or an Origin URL) names this machine: localhost, a
 * 127.0.0.0/8 or ::1 address, or bound_host when that is an explicit, non-wildcard address. */
int ob_http_host_is_local(const char *bound_host, const char *hostport);
/* Fills r with OpenAI's error shape {"error":{"message","type","code"}}. A 503 reply also
 * carries Retry-After. */
void ob_http_error(ob_http_req *r, int status, const char *type, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
