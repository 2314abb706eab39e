/* fuzz_http.c — libFuzzer harness for the HTTP layer of `1bit serve` with raw bytes
 * (src/server/http.c over libmicrohttpd: limits, locality, API key, CORS, routing, bodies,
 * streamed replies).
 *
 * Two daemons run in this process on loopback ports, started by ob_http_start exactly as
 * `1bit serve` starts its own, with small limits (body 4 KiB, headers 2 KiB, 8 connections) so
 * every refusal is reachable: one without an API key (Host/Origin checks), one with the key
 * "k". Their routes are stand-ins for the OpenAI handlers: POST /echo answers the body's length
 * and a few header and query lookups, GET /stream streams three chunks, GET /health is open,
 * POST /busy answers 503. Input: one selector byte (bit 0: which daemon), then the bytes a
 * client sends (any number of requests, pipelined). The bytes are written to a fresh
 * connection (from a source address that changes every run), the write side is shut, and the
 * reply is read to the end. Checked: no crash,
 * hang, leak or sanitizer report in the server's threads; whatever comes back starts as an
 * HTTP/1.x status line.
 *
 * Seeds: tests/fuzz/seeds-http/; dictionary tests/fuzz/http.dict.
 * Build and run (docs/reliability.md has the last result):
 *   make build/fuzz/fuzz_http && tests/fuzz/run.sh http 600
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/http.h"

static void h_echo(void *app, ob_http_req *r) {
    (void)app;
    const char *ct = ob_http_header(r, "Content-Type"), *q = ob_http_query(r, "a");
    ob_sbuf_printf(&r->out, "{\"len\":%zu,\"ct\":%d,\"q\":%zu,\"gone\":%d}", r->body_len, ct != NULL, q ? strlen(q) : 0,
                   ob_http_client_gone(r));
}

typedef struct { int n; } stream_st;

static int stream_next(void *user, ob_sbuf *out) {
    stream_st *s = user;
    ob_sbuf_printf(out, "data: %d\n\n", s->n);
    return ++s->n < 3 ? 1 : 0;
}

static void stream_free(void *user) { free(user); }

static void h_stream(void *app, ob_http_req *r) {
    (void)app;
    r->stream = stream_next;
    r->stream_user = calloc(1, sizeof(stream_st));
    r->stream_free = stream_free;
}

static void h_health(void *app, ob_http_req *r) { (void)app; ob_sbuf_puts(&r->out, "{\"status\":\"ok\"}"); }
static void h_busy(void *app, ob_http_req *r) { (void)app; ob_http_error(r, 503, "unavailable_error", "busy"); }

static const ob_http_route routes[] = {
    {"POST", "/echo", h_echo, 0},
    {"GET", "/stream", h_stream, 0},
    {"GET", "/health", h_health, 1},
    {"POST", "/busy", h_busy, 0},
};

static int ports[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    for (int i = 0; i < 2; i++) {
        ob_http_config c = {.host = "127.0.0.1", .port = 0, .api_key = i ? "k" : NULL, .max_body = 4096, .max_header = 2048,
                            .max_conns = 8, .timeout_s = 5, .request_timeout_s = 5, .routes = routes,
                            .n_routes = (int)(sizeof routes / sizeof *routes)};
        ob_http_t *h = NULL;
        char err[256];
        if (ob_http_start(&c, &h, err, sizeof err)) { fprintf(stderr, "fuzz_http: %s\n", err); abort(); }
        ports[i] = ob_http_port(h); /* kept running for the life of the process */
    }
    return 0;
}

/* connect, also when a signal (libFuzzer's timer) interrupts it: the connection goes on, so wait
 * until it is made and take its outcome */
static int connect_to(int fd, const struct sockaddr_in *a) {
    if (connect(fd, (const struct sockaddr *)a, sizeof *a) == 0) return 0;
    if (errno != EINTR) return -1;
    struct pollfd p = {fd, POLLOUT, 0};
    int r, e = 0;
    do r = poll(&p, 1, 8000);
    while (r < 0 && errno == EINTR);
    socklen_t l = sizeof e;
    if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l)) return -1;
    errno = e;
    return e ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)ports[data[0] & 1]);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* from a source address of its own among a million of 127/8: this side shuts its writes first,
     * so each run leaves its port in TIME_WAIT for a minute, and a few thousand runs a second used
     * up one address's 28K ports in half a minute (connect failed) */
    static uint32_t runs;
    struct sockaddr_in src = {0};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + runs++ % 1000000);
    if (bind(fd, (struct sockaddr *)&src, sizeof src)) {
        fprintf(stderr, "fuzz_http: bind: %s\n", strerror(errno));
        abort();
    }
    if (connect_to(fd, &a)) {
        fprintf(stderr, "fuzz_http: connect: %s\n", strerror(errno));
        abort();
    }
    /* write what the peer takes (it may answer and close before reading everything) */
    size_t off = 1;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue; /* the timer's signal: not the peer */
        if (n <= 0) break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[65536];
    size_t got = 0;
    char head[16] = "";
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        const int r = poll(&p, 1, 8000);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* libFuzzer's -timeout reports a real hang */
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (got < sizeof head - 1) {
            size_t k = (size_t)n < sizeof head - 1 - got ? (size_t)n : sizeof head - 1 - got;
            memcpy(head + got, buf, k);
        }
        got += (size_t)n;
    }
    close(fd);
    if (got >= 7 && memcmp(head, "HTTP/1.", 7)) {
        fprintf(stderr, "fuzz_http: reply does not start with a status line: %.15s\n", head);
        abort();
    }
    return 0;
}
