/* http.c — libmicrohttpd wrapper: routing, limits, locality, API key, CORS, streaming.
 *
 * Owns: the daemon (one thread per connection, so a streamed reply may block on the
 * scheduler), per-connection state (body, chosen route, pending stream bytes) freed in the
 * completion callback, and the checks every request passes before a handler sees it, in this
 * order: connections (503), header size (431), locality without a key (403), CORS preflight,
 * API key (401), route (404 / 405), body size (413), body time (connection closed).
 * docs/reliability.md states the policy and why.
 * Does not own: what handlers do (openai_*.c), HTTP parsing (libmicrohttpd).
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <stdatomic.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "onebit.h"
#include "util/err.h"

struct ob_http {
    struct MHD_Daemon *d;
    ob_http_config cfg;          /* limits resolved to their defaults */
    char *host, *api_key;
    atomic_int n_conns;          /* open connections (libmicrohttpd's start/close notices) */
};

typedef struct {
    ob_http_t *h;
    const ob_http_route *route;
    ob_sbuf body;
    int too_large;
    int answered;                /* a response was queued */
    ob_http_req req;
    char *path;                  /* owned copy */
    ob_sbuf pending;              /* stream bytes not yet handed to the socket */
    size_t off;
    int stream_done;
    int64_t t_first;             /* us: when the request's headers were complete */
    int cors;                    /* the Origin passed the checks: replies may echo it */
} conn_t;

/* ---- buffers ----------------------------------------------------------------------------- */
int ob_sbuf_put(ob_sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int ob_sbuf_puts(ob_sbuf *b, const char *s) { return ob_sbuf_put(b, s, strlen(s)); }

int ob_sbuf_printf(ob_sbuf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return ob_sbuf_put(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = ob_sbuf_put(b, big, (size_t)n);
    free(big);
    return rc;
}

void ob_sbuf_free(ob_sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- helpers for handlers --------------------------------------------------------------- */
const char *ob_http_header(const ob_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *ob_http_query(const ob_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

int ob_http_client_gone(const ob_http_req *r) {
    if (r->fd < 0) return 0;
    struct pollfd p = {r->fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char c;
    return recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void set_error(ob_http_req *r, int status, const char *type, const char *msg) {
    json_t *e = json_pack("{s:{s:s, s:s, s:i}}", "error", "message", msg, "type", type, "code", status);
    char *s = e ? json_dumps(e, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    r->out.len = 0;
    ob_sbuf_puts(&r->out, s ? s : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}");
    free(s);
    json_decref(e);
    r->status = status;
    r->content_type = "application/json";
    r->stream = NULL;
}

void ob_http_error(ob_http_req *r, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_error(r, status, type, msg);
}

/* ---- checks ----------------------------------------------------------------------------- */
/* Host part of "host:port", "[v6]:port" or a URL's authority, lower-cased into out. */
static void host_of(const char *s, char *out, size_t n) {
    const char *p = strstr(s, "://");
    if (p) s = p + 3;
    size_t i = 0;
    if (*s == '[') {
        s++;
        while (*s && *s != ']' && i + 1 < n) out[i++] = *s++;
    } else {
        while (*s && *s != ':' && *s != '/' && i + 1 < n) out[i++] = *s++;
    }
    out[i] = 0;
    for (char *q = out; *q; q++) if (*q >= 'A' && *q <= 'Z') *q += 32;
}

/* Only a parsed address counts as loopback: a name such as "127.0.0.1.evil.example" is a
 * DNS name an attacker can point anywhere (DNS rebinding), not an address. */
static int is_loopback_addr(const char *host) {
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) != 1) return 0;
    static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(a, v4mapped, 12)) return a[12] == 127;
    for (int i = 0; i < 15; i++) if (a[i]) return 0;
    return a[15] == 1;
}

int ob_http_host_is_local(const char *bound, const char *hostport) {
    char host[256];
    host_of(hostport, host, sizeof host);
    if (!strcmp(host, "localhost") || is_loopback_addr(host)) return 1;
    /* An explicit non-wildcard --host is as good as local: the user chose to be reached there. */
    if (bound && *bound && strcmp(bound, "0.0.0.0") && strcmp(bound, "::") && !strcasecmp(host, bound)) return 1;
    return 0;
}

/* Bytes of the request line's target and the headers, as the client sent them (about). */
static enum MHD_Result count_kv(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static int const_eq(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < lb; i++) d |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
    return d == 0;
}

static int key_ok(const ob_http_t *h, struct MHD_Connection *c) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7)) {
        auth += 7;
        while (*auth == ' ') auth++;
        if (const_eq(auth, h->api_key)) return 1;
    }
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"); /* Anthropic clients */
    return x && const_eq(x, h->api_key);
}

/* ---- responses -------------------------------------------------------------------------- */
/* The Origin is echoed, never "*", and never with Access-Control-Allow-Credentials: without a
 * key only local origins get this far; with a key a page elsewhere must still send the key
 * itself (a browser never adds it), so echoing lets a page the user gave the key work. */
static void add_cors(struct MHD_Response *res, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin) return;
    MHD_add_response_header(res, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(res, "Vary", "Origin");
}

/* Every 503 (overload, queue full, loading, shutting down) says when to come back. */
static void add_retry(struct MHD_Response *res, int status) {
    if (status == 503) MHD_add_response_header(res, "Retry-After", "1");
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn_t *c = cls;
    while (c->off >= c->pending.len) {
        if (c->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        c->pending.len = 0;
        c->off = 0;
        int rc = c->req.stream(c->req.stream_user, &c->pending);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0) c->stream_done = 1;
    }
    size_t n = c->pending.len - c->off < max ? c->pending.len - c->off : max;
    memcpy(buf, c->pending.p + c->off, n);
    c->off += n;
    return (ssize_t)n;
}

static enum MHD_Result send_reply(conn_t *c, struct MHD_Connection *mc) {
    ob_http_req *r = &c->req;
    struct MHD_Response *res;
    c->answered = 1;
    if (r->stream) {
        res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, c, NULL);
        if (!res) return MHD_NO;
        MHD_add_response_header(res, "Content-Type", r->content_type ? r->content_type : "text/event-stream");
        MHD_add_response_header(res, "Cache-Control", "no-cache");
    } else {
        res = MHD_create_response_from_buffer(r->out.len, r->out.p ? r->out.p : (char *)"", MHD_RESPMEM_MUST_COPY);
        if (!res) return MHD_NO;
        MHD_add_response_header(res, "Content-Type", r->content_type ? r->content_type : "application/json; charset=utf-8");
    }
    if (c->cors) add_cors(res, mc);
    add_retry(res, r->status);
    /* A refused request may have a body we did not read: close rather than parse it as the next. */
    if (r->status == 503 || r->status == 413 || r->status == 431) MHD_add_response_header(res, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(mc, (unsigned)(r->status ? r->status : 200), res);
    MHD_destroy_response(res);
    return ret;
}

static enum MHD_Result reply_error(conn_t *c, struct MHD_Connection *mc, int status, const char *type, const char *msg) {
    set_error(&c->req, status, type, msg);
    return send_reply(c, mc);
}

/* ---- the access handler ---------------------------------------------------------------- */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    ob_http_t *h = cls;
    conn_t *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        *con_cls = c;
        c->h = h;
        c->req.fd = -1;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) c->req.fd = ci->connect_fd;
        c->path = strdup(url);
        c->req.conn = mc;
        c->req.method = method;
        c->req.path = c->path ? c->path : "";
        c->t_first = ob_time_us();
        /* Overload: a connection beyond the limit is answered, not queued without bound. */
        if (atomic_load(&h->n_conns) > h->cfg.max_conns) {
            char m[160];
            snprintf(m, sizeof m, "the server has %d connections open (--max-connections); retry later", h->cfg.max_conns);
            return reply_error(c, mc, 503, "unavailable_error", m);
        }
        size_t hdr = strlen(method) + strlen(url) + 12;
        MHD_get_connection_values(mc, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND, count_kv, &hdr);
        if (hdr > h->cfg.max_header) {
            char m[160];
            snprintf(m, sizeof m, "request headers exceed the limit of %zu bytes (--max-header-size)", h->cfg.max_header);
            return reply_error(c, mc, 431, "invalid_request_error", m);
        }
        /* Locality: without a key, a web page (any Origin) or a rebound DNS name (any Host)
         * that is not this machine must not drive the server. */
        const char *host = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Host");
        const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
        if (!h->api_key) {
            if (host && !ob_http_host_is_local(h->host, host))
                return reply_error(c, mc, 403, "forbidden", "Host header is not local; start the server with --api-key to accept remote clients");
            if (origin && !ob_http_host_is_local(h->host, origin))
                return reply_error(c, mc, 403, "forbidden", "Origin is not local; start the server with --api-key to accept other origins");
        }
        c->cors = 1;
        if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
            struct MHD_Response *res = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
            add_cors(res, mc);
            MHD_add_response_header(res, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(res, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
            MHD_add_response_header(res, "Access-Control-Max-Age", "86400");
            c->answered = 1;
            enum MHD_Result ret = MHD_queue_response(mc, 204, res);
            MHD_destroy_response(res);
            return ret;
        }
        int path_known = 0;
        for (int i = 0; i < h->cfg.n_routes; i++) {
            if (strcmp(h->cfg.routes[i].path, c->req.path)) continue;
            path_known = 1;
            if (!strcmp(h->cfg.routes[i].method, method)) c->route = &h->cfg.routes[i];
        }
        /* With a key, nothing but an open route (health) answers without it: not even whether
         * a path exists. */
        if (h->api_key && !(c->route && c->route->open) && !key_ok(h, mc))
            return reply_error(c, mc, 401, "authentication_error", "invalid or missing API key");
        if (!c->route && path_known) {
            char m[256];
            snprintf(m, sizeof m, "method %s is not allowed on %s", method, c->req.path);
            return reply_error(c, mc, 405, "invalid_request_error", m);
        }
        if (!c->route) {
            char m[512];
            snprintf(m, sizeof m, "no endpoint %s %.300s", method, c->req.path);
            return reply_error(c, mc, 404, "not_found_error", m);
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        const char *expect = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Expect");
        if (cl && strtoull(cl, NULL, 10) > h->cfg.max_body) {
            /* A client waiting for 100-continue gets the 413 instead; any other is read to the
             * end first (and discarded), so it sees the 413 rather than a reset connection. */
            c->too_large = 1;
            /* ... unless it is far too large to be worth reading. */
            if ((expect && strcasestr(expect, "100-continue")) || strtoull(cl, NULL, 10) / 4 > h->cfg.max_body) {
                char m[128];
                snprintf(m, sizeof m, "request body exceeds the limit of %zu bytes", h->cfg.max_body);
                return reply_error(c, mc, 413, "invalid_request_error", m);
            }
        }
        return MHD_YES; /* libmicrohttpd answers Expect: 100-continue now */
    }
    if (*upload_size) {
        /* A body that trickles in (slowloris) holds a thread: past the limit the connection is
         * closed (libmicrohttpd cannot answer in the middle of a body). */
        if (h->cfg.request_timeout_s > 0 && ob_time_us() - c->t_first > (int64_t)h->cfg.request_timeout_s * 1000000) return MHD_NO;
        if (!c->too_large && c->body.len + *upload_size > h->cfg.max_body) c->too_large = 1;
        if (!c->too_large && ob_sbuf_put(&c->body, upload, *upload_size)) c->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->answered) return MHD_YES;
    if (c->too_large) {
        char m[128];
        snprintf(m, sizeof m, "request body exceeds the limit of %zu bytes", h->cfg.max_body);
        return reply_error(c, mc, 413, "invalid_request_error", m);
    }
    c->req.body = c->body.p ? c->body.p : "";
    c->req.body_len = c->body.len;
    c->req.status = 200;
    c->route->fn(h->cfg.app, &c->req);
    return send_reply(c, mc);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)mc; (void)toe;
    conn_t *c = *con_cls;
    if (!c) return;
    if (c->req.stream_free) c->req.stream_free(c->req.stream_user);
    ob_sbuf_free(&c->req.out);
    ob_sbuf_free(&c->body);
    ob_sbuf_free(&c->pending);
    free(c->path);
    free(c);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    (void)mc; (void)socket_ctx;
    ob_http_t *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) atomic_fetch_add(&h->n_conns, 1);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED) atomic_fetch_sub(&h->n_conns, 1);
}

/* ---- lifecycle -------------------------------------------------------------------------- */
int ob_http_start(const ob_http_config *cfg, ob_http_t **out, char *err, size_t errlen) {
    *out = NULL;
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai) return ERR("--host '%s': %s", host, gai_strerror(gai));
    ob_http_t *h = calloc(1, sizeof *h);
    if (!h) { freeaddrinfo(ai); return ERR("out of memory"); }
    h->cfg = *cfg;
    if (!h->cfg.max_header) h->cfg.max_header = 16384;
    if (h->cfg.max_conns <= 0) h->cfg.max_conns = 256;
    if (h->cfg.timeout_s <= 0) h->cfg.timeout_s = 600;
    h->host = strdup(host);
    h->api_key = cfg->api_key && *cfg->api_key ? strdup(cfg->api_key) : NULL;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            /* headers live in this pool: room for the limit plus the read and
                             * write buffers, so the 431 above (not libmicrohttpd) answers */
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * h->cfg.max_header + 64 * 1024),
                            /* the hard cap leaves room to answer 503 to those over the limit */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->cfg.max_conns + 16),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->cfg.timeout_s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        free(h->host);
        free(h->api_key);
        free(h);
        return ERR("could not listen on %s:%d (in use, or not an address of this machine)", host, cfg->port);
    }
    *out = h;
    return 0;
}

int ob_http_port(const ob_http_t *h) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : h->cfg.port;
}

void ob_http_quiesce(ob_http_t *h) {
    if (!h || !h->d) return;
    MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET) close(s);
}

void ob_http_stop(ob_http_t *h) {
    if (!h) return;
    if (h->d) MHD_stop_daemon(h->d);
    free(h->host);
    free(h->api_key);
    free(h);
}
