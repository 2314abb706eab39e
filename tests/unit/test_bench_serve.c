/* test_bench_serve.c — the serving benchmark's parts that need no network: percentiles against
 * hand-computed values (numpy's linear interpolation), the SSE parser fed one stream split at
 * every possible point (same events every time), CRLF/CR endings, comments, multi-line data,
 * over-long lines, the reading of chat-completion and completion chunks into a request (TTFT,
 * gaps, usage, [DONE], error events, non-JSON data) and a step's summary (token source, aggregate
 * rate, error reasons). The end-to-end check against a real server is tests/e2e/bench.test.mjs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tools/bench_serve.h"

/* ---- SSE: collect events as "event|data" lines ---- */
typedef struct { char out[4096]; size_t len; int n; int stop_at; } sink;

static int collect(void *u, const char *event, const char *data, size_t len) {
    sink *s = u;
    s->len += (size_t)snprintf(s->out + s->len, sizeof s->out - s->len, "%s|%.*s\n", event, (int)len, data);
    s->n++;
    return s->stop_at && s->n == s->stop_at ? 7 : 0;
}

static void feed_split(const char *text, size_t a, size_t b, sink *s) {
    ob_sse_parser p;
    ob_sse_init(&p);
    size_t n = strlen(text);
    memset(s, 0, sizeof *s);
    ob_sse_feed(&p, text, a, collect, s);
    ob_sse_feed(&p, text + a, b - a, collect, s);
    ob_sse_feed(&p, text + b, n - b, collect, s);
    ob_sse_finish(&p, collect, s);
    ob_sse_free(&p);
}

static int ev(ob_bench_req *r, const char *event, const char *data, double t) {
    return ob_bench_req_event(r, event, data, strlen(data), t);
}

OB_SUITE(bench_serve) {
    /* percentiles: 1..100 -> numpy.percentile gives 50.5, 90.1, 99.01 */
    double v[100];
    for (int i = 0; i < 100; i++) v[i] = 100 - i; /* unsorted on purpose */
    CHECK_NEAR(ob_bench_percentile(v, 100, 50), 50.5, 1e-9);
    CHECK_NEAR(ob_bench_percentile(v, 100, 90), 90.1, 1e-9);
    CHECK_NEAR(ob_bench_percentile(v, 100, 99), 99.01, 1e-9);
    CHECK_NEAR(ob_bench_percentile(v, 100, 0), 1, 0);
    CHECK_NEAR(ob_bench_percentile(v, 100, 100), 100, 0);
    double one = 7;
    CHECK_NEAR(ob_bench_percentile(&one, 1, 99), 7, 0);
    CHECK(isnan(ob_bench_percentile(v, 0, 50)));
    double w[4] = {10, 40, 20, 30};
    ob_bench_dist d;
    ob_bench_dist_of(w, 4, &d);
    CHECK_NEAR(d.mean, 25, 1e-12);
    CHECK_NEAR(d.p50, 25, 1e-12);
    CHECK_NEAR(d.p90, 37, 1e-12);
    CHECK_NEAR(d.p99, 39.7, 1e-12);
    CHECK_NEAR(d.max, 40, 0);
    CHECK(d.p50 <= d.p90 && d.p90 <= d.p99);

    /* SSE: every split of one stream into three reads gives the same events */
    const char *stream = ": keep-alive\r\n"
                         "data: {\"a\":1}\r\n\r\n"
                         "event: error\n"
                         "data: line one\n"
                         "data:line two\n\n"
                         "id: 5\r"
                         "data: cr only\r\r"
                         "data: [DONE]\n"; /* no blank line at the end: finish dispatches it */
    const char *want = "|{\"a\":1}\nerror|line one\nline two\n|cr only\n|[DONE]\n";
    sink s;
    size_t n = strlen(stream);
    int bad = 0;
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            feed_split(stream, a, b, &s);
            if (strcmp(s.out, want)) {
                if (!bad) fprintf(stderr, "  split %zu/%zu gave:\n%s", a, b, s.out);
                bad++;
            }
        }
    CHECK_EQ_INT(bad, 0);
    feed_split(stream, 0, 0, &s);
    CHECK_EQ_INT(s.n, 4);
    /* the callback's nonzero stops the feed and is returned */
    ob_sse_parser p;
    ob_sse_init(&p);
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    CHECK_EQ_INT(ob_sse_feed(&p, "data: x\n\ndata: y\n\n", 18, collect, &s), 7);
    CHECK_EQ_INT(s.n, 1);
    ob_sse_free(&p);
    /* an over-long line is an error, not unbounded memory */
    ob_sse_init(&p);
    p.max_line = 32;
    memset(&s, 0, sizeof s);
    char big[100];
    memset(big, 'x', sizeof big);
    CHECK_EQ_INT(ob_sse_feed(&p, "data: ", 6, collect, &s), 0);
    CHECK_EQ_INT(ob_sse_feed(&p, big, sizeof big, collect, &s), -1);
    ob_sse_free(&p);

    /* chat-completion chunks into one request */
    ob_bench_req r = {0};
    ob_bench_req_reset(&r);
    r.issued = 1;
    r.t_start = 0.5;
#define EV(e, d, t) ev(&r, e, d, t)
    CHECK_EQ_INT(EV("", "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}", 0.9), 0);
    CHECK(r.t_first < 0); /* the role chunk carries no token */
    CHECK_EQ_INT(EV("", "{\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}", 1.0), 0);
    CHECK_EQ_INT(EV("", "{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}", 1.5), 0);
    CHECK_EQ_INT(EV("", "{\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}", 2.5), 0);
    CHECK_EQ_INT(EV("", "{\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}", 2.6), 0);
    CHECK_EQ_INT(EV("", "{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":3}}}", 2.7), 0);
    CHECK_EQ_INT(EV("", "[DONE]", 2.8), 1);
    r.t_end = 2.8;
    ob_bench_req_close(&r);
    CHECK_STR(r.err, "");
    CHECK_NEAR(r.t_first, 1.0, 0);
    CHECK_NEAR(r.t_last, 2.5, 0);
    CHECK_EQ_INT(r.n_deltas, 3);
    CHECK_EQ_INT(r.n_gaps, 2);
    CHECK_NEAR(r.gaps[0], 0.5, 1e-12);
    CHECK_NEAR(r.gaps[1], 1.0, 1e-12);
    CHECK_EQ_INT(r.usage_completion, 4);
    CHECK_EQ_INT(r.usage_prompt, 12);
    CHECK_EQ_INT(r.usage_cached, 3);
    CHECK_EQ_INT(ob_bench_req_tokens(&r), 4);
    CHECK_STR(r.finish_reason, "length");

    /* a second request without usage (tokens from the stream), a third ending in an error event */
    ob_bench_req q[4] = {{0}};
    q[0] = r;
    ob_bench_req_reset(&q[1]);
    q[1].issued = 1, q[1].t_start = 1.0;
    ev(&q[1], "", "{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}", 1.2);
    ev(&q[1], "", "{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}", 1.4);
    CHECK_EQ_INT(ev(&q[1], "", "[DONE]", 1.4), 1);
    q[1].t_end = 1.5;
    ob_bench_req_close(&q[1]);
    CHECK_EQ_INT(ob_bench_req_tokens(&q[1]), 2);
    ob_bench_req_reset(&q[2]);
    q[2].issued = 1, q[2].t_start = 0.2;
    CHECK_EQ_INT(ev(&q[2], "", "{\"error\":{\"message\":\"slot lost\",\"code\":500}}", 0.3), -1);
    CHECK_STR(q[2].err, "stream error: slot lost");
    q[2].t_end = 0.3;
    ob_bench_req_reset(&q[3]); /* not issued: not counted */
    q[3].t_start = 0, q[3].t_end = 100;
    ob_bench_step st;
    ob_bench_step_summarize(q, 4, 2, &st);
    CHECK_EQ_INT(st.n_ok, 2);
    CHECK_EQ_INT(st.n_err, 1);
    CHECK_EQ_INT(st.out_tokens, 6);
    CHECK_EQ_INT(st.stream_deltas, 5);
    CHECK_EQ_INT(st.prompt_tokens, 12);
    CHECK_EQ_INT(st.prompt_cached, 3);
    CHECK_STR(st.token_source, "mixed");
    CHECK_NEAR(st.wall_s, 2.6, 1e-12);          /* 0.2 .. 2.8 */
    CHECK_NEAR(st.out_tps, 6 / 2.6, 1e-9);
    CHECK_NEAR(st.req_ps, 2 / 2.6, 1e-9);
    CHECK_NEAR(st.ttft_ms.p50, 350, 1e-6);     /* 500 and 200 ms */
    CHECK_NEAR(st.decode_tps.max, 5, 1e-9); /* (2-1) tokens over 0.2 s; the first: (4-1) over 1.5 s = 2 */
    CHECK_NEAR(st.decode_tps.mean, (2.0 + 5.0) / 2, 1e-9);
    CHECK_EQ_INT(st.itl_ms.n, 3);
    CHECK_EQ_INT(st.n_reasons, 1);
    CHECK_STR(st.err[0].reason, "stream error: slot lost");
    CHECK_EQ_INT(st.err[0].count, 1);

    /* bad data and a stream cut before [DONE] */
    ob_bench_req_reset(&q[3]);
    CHECK_EQ_INT(ev(&q[3], "", "<html>", 0), -1);
    CHECK(strstr(q[3].err, "not a JSON object") != NULL);
    ob_bench_req_reset(&q[3]);
    ev(&q[3], "", "{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}", 1.2);
    ob_bench_req_close(&q[3]);
    CHECK(strstr(q[3].err, "disconnected") != NULL);
    ob_bench_req_reset(&q[3]);
    CHECK_EQ_INT(ev(&q[3], "error", "{\"message\":\"overloaded\"}", 0), -1);
    CHECK_STR(q[3].err, "stream error: overloaded");
    /* a /v1/completions stream (--api completions): choices[].text, an empty text with the
     * finish_reason, usage twice (on the last choice and in the include_usage chunk), [DONE] */
    ob_bench_req c;
    memset(&c, 0, sizeof c);
    ob_bench_req_reset(&c);
    const char *cmpl[] = {
        "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null}]}",
        "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}",
        "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" of\",\"finish_reason\":null}]}",
        "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" and\",\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":5}}",
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":5}}",
        "{\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}"}; /* a finish without usage */
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(ev(&c, "", cmpl[i], 1.0 + 0.25 * i), 0);
    CHECK_EQ_INT(ev(&c, "", "[DONE]", 3.0), 1);
    ob_bench_req_close(&c);
    CHECK_STR(c.err, "");
    CHECK_EQ_INT(c.n_deltas, 3); /* the empty texts are no tokens */
    CHECK_NEAR(c.t_first, 1.0, 0);
    CHECK_NEAR(c.t_last, 1.75, 0);
    CHECK_EQ_INT(c.n_gaps, 2);
    CHECK_NEAR(c.gaps[0], 0.5, 1e-12);
    CHECK_EQ_INT(c.usage_prompt, 9);
    CHECK_EQ_INT(ob_bench_req_tokens(&c), 5);
    CHECK_STR(c.finish_reason, "length");
    /* without usage the tokens are its chunks with text; a finish_reason without [DONE] is complete */
    ob_bench_req_reset(&c);
    for (int i = 0; i < 4; i++) ev(&c, "", cmpl[i], 1.0 + 0.25 * i);
    CHECK_EQ_INT(ev(&c, "", cmpl[6], 2.0), 0);
    ob_bench_req_close(&c);
    CHECK_STR(c.err, "");
    CHECK_EQ_INT(c.usage_completion, -1);
    CHECK_EQ_INT(ob_bench_req_tokens(&c), 3);
    CHECK_STR(c.finish_reason, "stop");
    /* an error object inside a completions stream */
    ob_bench_req_reset(&c);
    ev(&c, "", cmpl[0], 1.0);
    CHECK_EQ_INT(ev(&c, "", "{\"error\":{\"message\":\"context full\"}}", 1.1), -1);
    CHECK_STR(c.err, "stream error: context full");
    /* a NUL character is text (a byte token of a random-weight model), not bad data */
    ob_bench_req_reset(&c);
    CHECK_EQ_INT(ev(&c, "", "{\"choices\":[{\"index\":0,\"text\":\"\\u0000\"}]}", 1.0), 0);
    CHECK_EQ_INT(ev(&c, "", "{\"choices\":[{\"delta\":{\"content\":\"\\u0000\"}}]}", 1.5), 0);
    CHECK_STR(c.err, "");
    CHECK_EQ_INT(c.n_deltas, 2);
    ob_bench_req_free(&c);
    ob_bench_req_free(&r);
    ob_bench_req_free(&q[1]);
    ob_bench_req_free(&q[3]);
#undef EV
}
