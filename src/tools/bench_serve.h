/* bench_serve.h — the serving benchmark (`1bit bench --url`, `1bit bench plot`), shared between
 * its files:
 *   bench_sse.c          incremental SSE parser and the reading of chat-completion (or
 *                        completion) chunks into one request's record (times of tokens, usage,
 *                        errors); no network
 *   bench_serve_stats.c  percentiles and the summary of one step (a concurrency level)
 *   bench_serve.c        command line, HTTP (libcurl, one easy handle per worker thread),
 *                        prompt calibration, the sweep, progress line, JSON and Markdown reports
 *   bench_svg.c          the SVG chart of one or more result files, and `1bit bench plot`
 * Method and every figure's definition: docs/bench.md, "Serving benchmark".
 */
#ifndef OB_BENCH_SERVE_H
#define OB_BENCH_SERVE_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

/* ---- SSE (text/event-stream) ---------------------------------------------------------------- */
/* Called per complete event: its `event:` name ("" when none) and its `data:` lines joined by
 * '\n' (NUL-terminated, len bytes). A nonzero return stops the feed and is returned by it. */
typedef int (*ob_sse_cb)(void *user, const char *event, const char *data, size_t len);

typedef struct {
    char *line; size_t line_len, line_cap; /* the line being received (may span many feeds) */
    char *data; size_t data_len, data_cap; /* data of the event being received */
    char event[64];
    int has_data;                          /* a data: field was seen (even empty) */
    int last_cr;                           /* the previous byte ended a line with \r (of \r\n?) */
    size_t max_line;                       /* longest accepted line or event data (bytes) */
} ob_sse_parser;

void ob_sse_init(ob_sse_parser *p);
/* Feeds n bytes; lines may be split anywhere and end in \n, \r\n or \r. Returns 0, the
 * callback's nonzero value, or -1 when a line or an event exceeds max_line (a broken stream). */
int ob_sse_feed(ob_sse_parser *p, const char *buf, size_t n, ob_sse_cb cb, void *user);
/* End of the body: dispatches a last event that lacked its blank line (lenient, as browsers are
 * not, because some servers end with "data: [DONE]\n"). Same return values as ob_sse_feed. */
int ob_sse_finish(ob_sse_parser *p, ob_sse_cb cb, void *user);
void ob_sse_free(ob_sse_parser *p);

/* ---- one request ------------------------------------------------------------------------- */
/* Times are seconds since the start of the step (monotonic clock). */
typedef struct {
    int issued;              /* the slot was used (a step can end before all slots are) */
    double t_start;          /* request sent */
    double t_first;          /* first chunk with generated text (content, reasoning, tool call or text); <0: none */
    double t_last;           /* last such chunk */
    double t_end;            /* body complete, or failure */
    int n_deltas;            /* chunks with generated text */
    double *gaps; int n_gaps, cap_gaps; /* [n_deltas-1] seconds between successive such chunks */
    int usage_completion;    /* usage.completion_tokens of the stream; -1: none reported */
    int usage_prompt;        /* usage.prompt_tokens; -1: none */
    int usage_cached;        /* usage.prompt_tokens_details.cached_tokens (reused, not computed); -1: none */
    int done;                /* data: [DONE] seen */
    int finished;            /* a choice's finish_reason seen */
    char finish_reason[24];
    long http_status;        /* 0: no answer */
    char err[240];           /* "" when the request succeeded, else the reason */
} ob_bench_req;

void ob_bench_req_reset(ob_bench_req *r);   /* keeps the gaps buffer */
void ob_bench_req_free(ob_bench_req *r);
/* Reads one SSE event of a chat-completion or completion stream (choices[].delta or
 * choices[].text) arriving at time t. Returns 0 to go on, 1 at data: [DONE], -1 when the event
 * is an error (r->err says which). */
int ob_bench_req_event(ob_bench_req *r, const char *event, const char *data, size_t len, double t);
/* After the body: sets r->err when the stream ended without [DONE] or a finish_reason. */
void ob_bench_req_close(ob_bench_req *r);
/* Tokens generated: usage.completion_tokens when reported, else the chunks with text. */
int ob_bench_req_tokens(const ob_bench_req *r);

/* ---- statistics ------------------------------------------------------------------------- */
/* p-th percentile (0..100) of v[n], linear interpolation between closest ranks (numpy's
 * default); sorts v. NAN when n == 0. */
double ob_bench_percentile(double *v, int n, double p);

typedef struct { int n; double mean, p50, p90, p99, max; } ob_bench_dist;
void ob_bench_dist_of(double *v, int n, ob_bench_dist *d); /* sorts v */

#define OB_BENCH_MAX_REASONS 12
/* How a failure the server reported inside a started stream begins (bench_sse.c). */
#define OB_BENCH_STREAM_ERR "stream error: "

typedef struct {
    int concurrency;
    int n_ok, n_err;
    double wall_s;            /* first request sent .. last request ended */
    long out_tokens;          /* over successful requests */
    long stream_deltas;       /* chunks with text, over successful requests */
    long prompt_tokens;       /* usage.prompt_tokens summed over requests that reported it */
    long prompt_cached;       /* of which the server reported cached (prompt_tokens_details.cached_tokens) */
    int n_usage;              /* successful requests whose stream reported usage */
    const char *token_source; /* "usage", "stream" or "mixed" */
    ob_bench_dist ttft_ms, itl_ms, e2e_ms, decode_tps, out_per_req;
    double out_tps;           /* out_tokens / wall_s */
    double req_ps;            /* n_ok / wall_s */
    struct { char reason[160]; int count; } err[OB_BENCH_MAX_REASONS];
    int n_reasons;
} ob_bench_step;

/* Summarizes the issued requests among reqs[n]. */
void ob_bench_step_summarize(const ob_bench_req *reqs, int n, int concurrency, ob_bench_step *s);
json_t *ob_bench_step_json(const ob_bench_step *s);

/* ---- chart ------------------------------------------------------------------------------ */
/* Writes an SVG chart of the result documents docs[n] (as `-o` writes them): aggregate output
 * tokens/s, TTFT and per-request decode tokens/s against concurrency, one line per target of
 * each document. names[i] (may be NULL) labels document i when several are overlaid. */
int ob_bench_svg_write(FILE *f, json_t *const *docs, const char *const *names, int n, char *err, size_t errlen);

int ob_bench_serve_cmd(int argc, char **argv); /* `1bit bench --url ...` */
int ob_bench_plot_cmd(int argc, char **argv);  /* `1bit bench plot a.json b.json [-o chart.svg]` */

#endif
