/* bench_serve_stats.c — the numbers of one step of the serving benchmark: percentiles (linear
 * interpolation, as numpy's default), and the summary of a step's requests: TTFT, inter-token
 * latency, end-to-end latency, per-request decode tokens/s, aggregate output tokens/s,
 * requests/s, token-count source and error reasons, and its JSON form.
 * Does not own: collecting the requests (bench_serve.c) or reading streams (bench_sse.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench_serve.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double ob_bench_percentile(double *v, int n, double p) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    if (p <= 0) return v[0];
    if (p >= 100) return v[n - 1];
    double x = p / 100.0 * (n - 1);
    int k = (int)floor(x);
    double f = x - k;
    return k + 1 < n ? v[k] + f * (v[k + 1] - v[k]) : v[k];
}

void ob_bench_dist_of(double *v, int n, ob_bench_dist *d) {
    memset(d, 0, sizeof *d);
    d->n = n;
    if (n == 0) {
        d->mean = d->p50 = d->p90 = d->p99 = d->max = NAN;
        return;
    }
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    d->mean = s / n;
    d->p50 = ob_bench_percentile(v, n, 50);
    d->p90 = ob_bench_percentile(v, n, 90);
    d->p99 = ob_bench_percentile(v, n, 99);
    d->max = v[n - 1];
}

static void add_reason(ob_bench_step *s, const char *why) {
    for (int i = 0; i < s->n_reasons; i++)
        if (!strcmp(s->err[i].reason, why)) { s->err[i].count++; return; }
    if (s->n_reasons == OB_BENCH_MAX_REASONS) { /* the last bucket collects the rest */
        snprintf(s->err[OB_BENCH_MAX_REASONS - 1].reason, sizeof s->err[0].reason, "other errors");
        s->err[OB_BENCH_MAX_REASONS - 1].count++;
        return;
    }
    snprintf(s->err[s->n_reasons].reason, sizeof s->err[0].reason, "%s", why);
    s->err[s->n_reasons++].count = 1;
}

void ob_bench_step_summarize(const ob_bench_req *reqs, int n, int concurrency, ob_bench_step *s) {
    memset(s, 0, sizeof *s);
    s->concurrency = concurrency;
    int n_gaps = 0;
    for (int i = 0; i < n; i++) if (reqs[i].issued && !reqs[i].err[0]) n_gaps += reqs[i].n_gaps;
    double *ttft = malloc(((size_t)n + 1) * sizeof *ttft), *e2e = malloc(((size_t)n + 1) * sizeof *e2e);
    double *tps = malloc(((size_t)n + 1) * sizeof *tps), *per = malloc(((size_t)n + 1) * sizeof *per);
    double *itl = malloc(((size_t)n_gaps + 1) * sizeof *itl);
    int n_ttft = 0, n_e2e = 0, n_tps = 0, n_itl = 0, n_stream = 0;
    double t0 = INFINITY, t1 = -INFINITY;
    for (int i = 0; i < n; i++) {
        const ob_bench_req *r = &reqs[i];
        if (!r->issued) continue;
        if (r->t_start < t0) t0 = r->t_start;
        if (r->t_end > t1) t1 = r->t_end;
        if (r->err[0]) { s->n_err++; add_reason(s, r->err); continue; }
        s->n_ok++;
        int tok = ob_bench_req_tokens(r);
        s->out_tokens += tok;
        s->stream_deltas += r->n_deltas;
        if (r->usage_completion >= 0) s->n_usage++;
        else n_stream++;
        if (r->usage_prompt >= 0) s->prompt_tokens += r->usage_prompt;
        if (r->usage_cached > 0) s->prompt_cached += r->usage_cached;
        per[n_e2e] = tok;
        e2e[n_e2e++] = 1e3 * (r->t_end - r->t_start);
        if (r->t_first >= 0) ttft[n_ttft++] = 1e3 * (r->t_first - r->t_start);
        /* Decode speed of one request: the tokens after the first over the time from the first
         * chunk with text to the last (so prompt processing and queueing are not in it). */
        if (tok >= 2 && r->t_last > r->t_first && r->t_first >= 0) tps[n_tps++] = (tok - 1) / (r->t_last - r->t_first);
        for (int k = 0; k < r->n_gaps; k++) itl[n_itl++] = 1e3 * r->gaps[k];
    }
    s->wall_s = t1 > t0 ? t1 - t0 : 0;
    s->token_source = s->n_ok == 0 ? "none" : n_stream == 0 ? "usage" : s->n_usage == 0 ? "stream" : "mixed";
    ob_bench_dist_of(ttft, n_ttft, &s->ttft_ms);
    ob_bench_dist_of(itl, n_itl, &s->itl_ms);
    ob_bench_dist_of(e2e, n_e2e, &s->e2e_ms);
    ob_bench_dist_of(tps, n_tps, &s->decode_tps);
    ob_bench_dist_of(per, n_e2e, &s->out_per_req);
    s->out_tps = s->wall_s > 0 ? s->out_tokens / s->wall_s : 0;
    s->req_ps = s->wall_s > 0 ? s->n_ok / s->wall_s : 0;
    free(ttft), free(e2e), free(tps), free(per), free(itl);
}

/* NaN (no sample) is JSON null. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *dist_json(const ob_bench_dist *d, int with_p90) {
    json_t *o = json_pack("{s:i, s:o, s:o}", "n", d->n, "mean", num(d->mean), "p50", num(d->p50));
    if (with_p90) json_object_set_new(o, "p90", num(d->p90));
    json_object_set_new(o, "p99", num(d->p99));
    json_object_set_new(o, "max", num(d->max));
    return o;
}

json_t *ob_bench_step_json(const ob_bench_step *s) {
    json_t *errs = json_array();
    for (int i = 0; i < s->n_reasons; i++)
        json_array_append_new(errs, json_pack("{s:s, s:i}", "reason", s->err[i].reason, "count", s->err[i].count));
    json_t *o = json_pack("{s:i, s:i, s:i, s:f, s:I, s:I, s:s, s:i, s:I, s:I, s:o, s:o}", "concurrency", s->concurrency,
                          "requests_ok", s->n_ok, "requests_failed", s->n_err, "wall_s", s->wall_s,
                          "output_tokens", (json_int_t)s->out_tokens, "stream_deltas", (json_int_t)s->stream_deltas,
                          "token_source", s->token_source, "requests_with_usage", s->n_usage,
                          "prompt_tokens", (json_int_t)s->prompt_tokens,
                          "prompt_tokens_cached", (json_int_t)s->prompt_cached,
                          "output_tokens_per_s", num(s->out_tps), "requests_per_s", num(s->req_ps));
    json_object_set_new(o, "ttft_ms", dist_json(&s->ttft_ms, 1));
    json_object_set_new(o, "itl_ms", dist_json(&s->itl_ms, 1));
    json_object_set_new(o, "e2e_ms", dist_json(&s->e2e_ms, 1));
    json_object_set_new(o, "decode_tokens_per_s", dist_json(&s->decode_tps, 1));
    json_object_set_new(o, "output_tokens_per_request", dist_json(&s->out_per_req, 0));
    json_object_set_new(o, "errors", errs);
    return o;
}
