/* bench_sse.c — reading a chat-completion (or completion) stream for the serving benchmark: an
 * incremental text/event-stream parser (lines split anywhere across reads, \n, \r\n or \r
 * endings, comments, multi-line data, `event:` names) and the interpretation of each event into
 * one request's record (when each chunk with generated text arrived, usage, finish_reason, [DONE],
 * error events).
 * Does not own: the network (bench_serve.c) or statistics over requests (bench_serve_stats.c).
 */
#include <stdlib.h>
#include <string.h>

#include "tools/bench_serve.h"

void ob_sse_init(ob_sse_parser *p) {
    memset(p, 0, sizeof *p);
    p->max_line = 16u << 20;
}

void ob_sse_free(ob_sse_parser *p) {
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof *p);
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, size_t max) {
    if (*len + n + 1 > max) return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b, *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static int dispatch(ob_sse_parser *p, ob_sse_cb cb, void *user) {
    int rc = 0;
    if (p->has_data) {
        if (p->data_len && p->data[p->data_len - 1] == '\n') p->data[--p->data_len] = 0; /* the last line's '\n' */
        rc = cb(user, p->event, p->data ? p->data : "", p->data_len);
    }
    p->has_data = 0;
    p->data_len = 0;
    if (p->data) p->data[0] = 0;
    p->event[0] = 0;
    return rc;
}

/* One complete line (without its ending). */
static int line(ob_sse_parser *p, const char *s, size_t n, ob_sse_cb cb, void *user) {
    if (n == 0) return dispatch(p, cb, user);
    if (s[0] == ':') return 0; /* comment (keep-alive) */
    const char *colon = memchr(s, ':', n);
    size_t fl = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vl = (size_t)(s + n - v);
    if (vl && *v == ' ') v++, vl--;
    if (fl == 4 && !memcmp(s, "data", 4)) {
        p->has_data = 1;
        if (append(&p->data, &p->data_len, &p->data_cap, v, vl, p->max_line) ||
            append(&p->data, &p->data_len, &p->data_cap, "\n", 1, p->max_line)) return -1;
    } else if (fl == 5 && !memcmp(s, "event", 5)) {
        size_t k = vl < sizeof p->event - 1 ? vl : sizeof p->event - 1;
        memcpy(p->event, v, k);
        p->event[k] = 0;
    }
    return 0; /* id:, retry: and unknown fields are ignored, as the SSE spec says */
}

int ob_sse_feed(ob_sse_parser *p, const char *buf, size_t n, ob_sse_cb cb, void *user) {
    size_t i = 0;
    if (n == 0) return 0;
    if (p->last_cr && n && buf[0] == '\n') i = 1; /* the \n of a \r\n split across two reads */
    p->last_cr = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r') j++;
        if (j == n) { /* no line end yet: keep the piece */
            if (append(&p->line, &p->line_len, &p->line_cap, buf + i, n - i, p->max_line)) return -1;
            return 0;
        }
        int rc;
        if (p->line_len) {
            if (append(&p->line, &p->line_len, &p->line_cap, buf + i, j - i, p->max_line)) return -1;
            rc = line(p, p->line, p->line_len, cb, user);
            p->line_len = 0;
        } else {
            rc = line(p, buf + i, j - i, cb, user);
        }
        if (buf[j] == '\r') {
            if (j + 1 < n && buf[j + 1] == '\n') j++;
            else if (j + 1 == n) p->last_cr = 1;
        }
        i = j + 1;
        if (rc) return rc;
    }
    return 0;
}

int ob_sse_finish(ob_sse_parser *p, ob_sse_cb cb, void *user) {
    int rc = 0;
    if (p->line_len) {
        rc = line(p, p->line, p->line_len, cb, user);
        p->line_len = 0;
    }
    if (!rc) rc = dispatch(p, cb, user);
    return rc;
}

/* ---- chat-completion and completion chunks --------------------------------------------- */
void ob_bench_req_reset(ob_bench_req *r) {
    double *g = r->gaps;
    int cap = r->cap_gaps;
    memset(r, 0, sizeof *r);
    r->gaps = g, r->cap_gaps = cap;
    r->t_first = -1;
    r->usage_completion = r->usage_prompt = r->usage_cached = -1;
}

void ob_bench_req_free(ob_bench_req *r) {
    free(r->gaps);
    r->gaps = NULL;
    r->cap_gaps = r->n_gaps = 0;
}

static void set_err(ob_bench_req *r, const char *what, const char *msg, size_t len) {
    if (len > 160) len = 160;
    snprintf(r->err, sizeof r->err, "%s%.*s", what, (int)len, msg);
    for (char *c = r->err; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
}

/* The message of an error object (OpenAI's {"error": {"message": ...}} or a bare string). */
static const char *error_message(json_t *e) {
    if (json_is_string(e)) return json_string_value(e);
    json_t *m = json_object_get(e, "message");
    if (json_is_string(m)) return json_string_value(m);
    json_t *inner = json_object_get(e, "error");
    if (inner && inner != e) return error_message(inner);
    return "(no message)";
}

static int nonempty_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) && json_string_length(v) > 0;
}

static void text_chunk(ob_bench_req *r, double t) {
    if (r->t_first < 0) r->t_first = t;
    else {
        if (r->n_gaps == r->cap_gaps) {
            int c = r->cap_gaps ? 2 * r->cap_gaps : 32; /* grows with the answer: a long soak keeps many */
            double *g = realloc(r->gaps, (size_t)c * sizeof *g);
            if (!g) return; /* the gap is lost, the count is not */
            r->gaps = g, r->cap_gaps = c;
        }
        r->gaps[r->n_gaps++] = t - r->t_last;
    }
    r->t_last = t;
    r->n_deltas++;
}

int ob_bench_req_event(ob_bench_req *r, const char *event, const char *data, size_t len, double t) {
    if (len == 6 && !memcmp(data, "[DONE]", 6)) { r->done = 1; return 1; }
    json_error_t je;
    /* JSON_ALLOW_NUL: a model may write a NUL character ("\u0000", one token of a byte-level
     * vocabulary, common with random weights), which jansson refuses by default. */
    json_t *j = json_loadb(data, len, JSON_ALLOW_NUL, &je);
    if (!strcmp(event, "error")) {
        if (j) set_err(r, OB_BENCH_STREAM_ERR, error_message(j), strlen(error_message(j)));
        else set_err(r, OB_BENCH_STREAM_ERR, data, len);
        json_decref(j);
        return -1;
    }
    if (!j || !json_is_object(j)) {
        set_err(r, "bad stream data (not a JSON object): ", data, len);
        json_decref(j);
        return -1;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        const char *m = error_message(e);
        set_err(r, OB_BENCH_STREAM_ERR, m, strlen(m));
        json_decref(j);
        return -1;
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_t *c = json_object_get(u, "completion_tokens"), *p = json_object_get(u, "prompt_tokens");
        if (json_is_integer(c)) r->usage_completion = (int)json_integer_value(c);
        if (json_is_integer(p)) r->usage_prompt = (int)json_integer_value(p);
        json_t *cached = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(cached)) r->usage_cached = (int)json_integer_value(cached);
    }
    size_t i;
    json_t *ch;
    int text = 0;
    json_array_foreach(json_object_get(j, "choices"), i, ch) {
        json_t *d = json_object_get(ch, "delta");
        if (json_is_object(d)) {
            json_t *tc = json_object_get(d, "tool_calls");
            if (nonempty_str(d, "content") || nonempty_str(d, "reasoning_content") || nonempty_str(d, "reasoning") ||
                (json_is_array(tc) && json_array_size(tc)))
                text = 1;
        } else if (nonempty_str(ch, "text")) {
            text = 1; /* /v1/completions chunks */
        }
        json_t *f = json_object_get(ch, "finish_reason");
        if (json_is_string(f)) {
            r->finished = 1;
            snprintf(r->finish_reason, sizeof r->finish_reason, "%s", json_string_value(f));
        }
    }
    if (text) text_chunk(r, t);
    json_decref(j);
    return 0;
}

void ob_bench_req_close(ob_bench_req *r) {
    if (r->err[0]) return;
    if (!r->done && !r->finished)
        snprintf(r->err, sizeof r->err, "disconnected: the stream ended before data: [DONE]");
}

int ob_bench_req_tokens(const ob_bench_req *r) {
    return r->usage_completion >= 0 ? r->usage_completion : r->n_deltas;
}
