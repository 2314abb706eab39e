/* bench_serve.c — `1bit bench --url`: load any OpenAI-compatible server with streamed chat
 * completions (or plain completions, `--api completions`) and report what a user sees
 * (docs/bench.md, "Serving benchmark").
 *
 * Owns: the command line, the workload (a synthetic prompt calibrated to about N tokens with the
 * server's own usage.prompt_tokens, or a replay of a JSONL file of conversations), the sweep over
 * concurrency levels (one worker thread per in-flight request, each with its own libcurl easy
 * handle, so a step with C workers keeps exactly C requests in flight), the caps that make every
 * run end by itself (requests and duration per step, a timeout per request), `--compare` (two
 * servers, steps alternating), the live progress line, and the JSON and Markdown reports.
 * Does not own: stream parsing (bench_sse.c), statistics (bench_serve_stats.c), the chart
 * (bench_svg.c), or the model benchmark `1bit bench -m` (bench.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "onebit.h"
#include "tools/bench_serve.h"

#define MAX_CONC_LEVELS 32
#define MAX_CONC 1024
#define MAX_REQUESTS 100000
#define BODY_CAP (4u << 20) /* longest non-streamed answer read (models list, calibration) */

typedef struct {
    char base[1024];     /* ends in /v1 (or whatever path the user gave) */
    char model[256];
    const char *api_key; /* NULL: no Authorization header */
    char label[256];
    int words;           /* words of the synthetic prompt */
    double tok_per_word, overhead; /* calibration: prompt_tokens ~ overhead + tok_per_word * words */
    int setup_requests;  /* calibration and warm-up requests (not in any step) */
    long setup_tokens;   /* their completion tokens (usage) */
    ob_bench_step *steps;
    json_t *steps_json;
} target;

typedef struct {
    int conc[MAX_CONC_LEVELS], n_conc;
    int prompt_tokens, gen_tokens, ignore_eos, warmup, progress;
    int requests;        /* 0: default per step */
    int rounds;          /* each step in this many rounds, the servers alternating (default 1) */
    int completions;     /* --api completions: POST /completions with "prompt", else /chat/completions with "messages" */
    double duration, timeout;
    json_t *replay;      /* array of request objects, or NULL */
    const char *replay_path;
    uint64_t seed;
} opts;

static double now_s(void) { return ob_time_us() * 1e-6; } /* monotonic clock */

/* The endpoint of every generation request (calibration, warm-up, steps), after the base URL. */
static const char *api_path(const opts *o) { return o->completions ? "/completions" : "/chat/completions"; }

static uint64_t mix64(uint64_t x) { /* splitmix64 */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Common short English words: one token each in most vocabularies, so the token count of a
 * prompt grows evenly with its words. A prompt of n words is always the same words (the first n
 * of the list, cycled) after the same lead-in, in an order shuffled per request: tokenizers split
 * text at spaces before merging, so all prompts of n words have the same token count (and the
 * calibration can hit N), while no two share more than the chat template's prefix and the
 * lead-in (a server's prefix cache cannot skip the work). */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with",
    "his", "they", "at", "be", "this", "from", "have", "or", "by", "one", "had", "not", "but", "what", "all",
    "were", "when", "we", "there", "can", "an", "your", "which", "their", "said", "if", "do", "will", "each",
    "about", "how", "up", "out", "them", "then", "she", "many", "some", "so", "these", "would", "other", "into",
    "has", "more", "her", "two", "like", "him", "see", "time", "could", "no", "make", "than", "first", "been",
    "its", "who", "now", "people", "my", "made", "over", "did", "down", "only", "way", "find", "use", "may",
    "water", "long", "little", "very", "after", "words", "called", "just", "where", "most", "know"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

static char *synthetic_prompt(int words, uint64_t seed) {
    size_t cap = (size_t)words * 8 + 64, len = 0;
    char *s = malloc(cap);
    int *ix = malloc((size_t)words * sizeof *ix);
    for (int i = 0; i < words; i++) ix[i] = i % (int)N_WORDS;
    uint64_t r = mix64(seed);
    for (int i = words - 1; i > 0; i--) { /* Fisher-Yates */
        r = mix64(r);
        int j = (int)(r % (uint64_t)(i + 1)), t = ix[i];
        ix[i] = ix[j], ix[j] = t;
    }
    len = (size_t)snprintf(s, cap, "Text:");
    for (int i = 0; i < words; i++) len += (size_t)snprintf(s + len, cap - len, " %s", WORDS[ix[i]]);
    free(ix);
    return s;
}

/* The body of request `idx` of the step `salt` (the calibration when idx < 0). A synthetic
 * prompt depends on both, so no prompt is sent twice in a run (a server's prompt cache would
 * skip it), while both servers of --compare get the same prompts in a step. */
static json_t *request_body(const target *T, const opts *o, uint64_t salt, int64_t idx, int stream, int max_tokens) {
    json_t *b;
    if (o->replay && idx >= 0) {
        b = json_deep_copy(json_array_get(o->replay, (size_t)(idx % (int64_t)json_array_size(o->replay))));
        if (!json_object_get(b, "max_tokens") && !json_object_get(b, "max_completion_tokens"))
            json_object_set_new(b, "max_tokens", json_integer(max_tokens));
    } else {
        char *p = synthetic_prompt(T->words, mix64(o->seed ^ salt << 40) ^ (uint64_t)idx * 0x100000001B3ull);
        /* --api completions: the same text as a raw prompt, no chat template around it, and no
         * chat-output parsing of the answer (llama-server's fails some random-weight streams). */
        b = o->completions ? json_pack("{s:s, s:i}", "prompt", p, "max_tokens", max_tokens)
                           : json_pack("{s:[{s:s, s:s}], s:i}", "messages", "role", "user", "content", p, "max_tokens", max_tokens);
        free(p);
        if (o->ignore_eos) {
            /* llama-server and 1bit honour ignore_eos, vLLM also min_tokens: with both, the server
             * generates exactly max_tokens; a server that ignores them stops where it likes, and the
             * counts come from its usage (or the stream). */
            json_object_set_new(b, "ignore_eos", json_true());
            json_object_set_new(b, "min_tokens", json_integer(max_tokens));
        }
    }
    json_object_set_new(b, "model", json_string(T->model));
    if (stream) {
        json_object_set_new(b, "stream", json_true());
        json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    } else {
        json_object_set_new(b, "stream", json_false());
    }
    return b;
}

static struct curl_slist *headers(const target *T, int stream) {
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, stream ? "Accept: text/event-stream" : "Accept: application/json");
    if (T->api_key) {
        char a[1100];
        snprintf(a, sizeof a, "Authorization: Bearer %s", T->api_key);
        h = curl_slist_append(h, a);
    }
    return h;
}

static void common_opts(CURL *c, const opts *o, char *errbuf) {
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "1bit-bench/" OB_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(o->timeout * 1e3));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(fmin(o->timeout, 10.0) * 1e3));
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    errbuf[0] = 0;
}

/* "HTTP 401: message" from an error answer's body (OpenAI's {"error": {"message"}} or text). */
static void http_error(char *out, size_t outlen, long status, const char *body, size_t len) {
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *m = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "message"));
    if (!m) m = json_string_value(json_object_get(j, "message"));
    if (!m) m = json_string_value(json_object_get(j, "detail"));
    if (m) snprintf(out, outlen, "HTTP %ld: %.160s", status, m);
    else snprintf(out, outlen, "HTTP %ld: %.*s", status, (int)(len < 120 ? len : 120), body);
    for (char *c = out; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';
    json_decref(j);
}

static void curl_error(char *out, size_t outlen, CURLcode rc, const char *errbuf, const opts *o) {
    const char *msg = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: snprintf(out, outlen, "timeout after %g s (--timeout)", o->timeout); break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: snprintf(out, outlen, "cannot connect: %s", msg); break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE: snprintf(out, outlen, "disconnected: %s", msg); break;
    default: snprintf(out, outlen, "%s", msg);
    }
}

/* ---- one non-streamed request (models list, calibration) ------------------------------ */
typedef struct { char *p; size_t len; } buf;

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
    buf *b = u;
    size_t n = sz * nm;
    if (b->len + n > BODY_CAP) return 0;
    char *q = realloc(b->p, b->len + n + 1);
    if (!q) return 0;
    memcpy(q + b->len, p, n);
    b->p = q, b->len += n, b->p[b->len] = 0;
    return n;
}

/* GET (body NULL) or POST base+path; *out is the JSON answer (NUL characters allowed: a
 * model's text may hold "\u0000"). Returns 0, or -1 with err. */
static int http_json(const target *T, const opts *o, const char *path, json_t *body, json_t **out, char *err, size_t errlen) {
    char url[1200], errbuf[CURL_ERROR_SIZE];
    snprintf(url, sizeof url, "%s%s", T->base, path);
    CURL *c = curl_easy_init();
    if (!c) { snprintf(err, errlen, "libcurl: cannot make a handle"); return -1; }
    common_opts(c, o, errbuf);
    struct curl_slist *h = headers(T, 0);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    buf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (text) curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int ret = -1;
    char why[300];
    *out = NULL;
    if (rc != CURLE_OK) {
        curl_error(why, sizeof why, rc, errbuf, o);
        snprintf(err, errlen, "%s %s: %s", text ? "POST" : "GET", url, why);
    } else if (status != 200) {
        http_error(why, sizeof why, status, b.p ? b.p : "", b.len);
        snprintf(err, errlen, "%s %s: %s", text ? "POST" : "GET", url, why);
    } else if (!(*out = json_loadb(b.p ? b.p : "", b.len, JSON_ALLOW_NUL, NULL)) || !json_is_object(*out)) {
        snprintf(err, errlen, "%s %s: the answer is not a JSON object (starts: '%.60s'); is this an OpenAI-compatible URL "
                 "(e.g. http://HOST:PORT/v1)?", text ? "POST" : "GET", url, b.p ? b.p : "");
        json_decref(*out);
        *out = NULL;
    } else {
        ret = 0;
    }
    free(b.p);
    free(text);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return ret;
}

/* ---- the sweep ------------------------------------------------------------------------ */
typedef struct {
    target *T;
    const opts *o;
    int conc, max_req;
    uint64_t salt;         /* step number (prompts differ between steps) */
    double t0, deadline;   /* absolute monotonic seconds */
    ob_bench_req *reqs;    /* [max_req] */
    atomic_int next, n_done, n_failed, workers_left;
    atomic_long tokens;
} step_run;

typedef struct {
    step_run *S;
    CURL *curl;
    ob_bench_req *r;
    ob_sse_parser sse;
    long status;
    buf errbody;
    char head[128]; size_t head_len; /* first bytes of the body, for the message of a non-SSE answer */
    int events;
} worker;

static int on_event(void *u, const char *event, const char *data, size_t len) {
    worker *w = u;
    int before = w->r->n_deltas;
    w->events++;
    int rc = ob_bench_req_event(w->r, event, data, len, now_s() - w->S->t0);
    if (w->r->n_deltas > before) atomic_fetch_add(&w->S->tokens, 1);
    return rc == 1 ? 0 : rc; /* after [DONE], read on to the end of the body */
}

static size_t on_stream(char *p, size_t sz, size_t nm, void *u) {
    worker *w = u;
    size_t n = sz * nm;
    if (!w->status) curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &w->status);
    if (w->status != 200) {
        if (w->errbody.len < 4096) on_body(p, sz, nm, &w->errbody);
        return n;
    }
    if (w->head_len < sizeof w->head - 1) {
        size_t k = n < sizeof w->head - 1 - w->head_len ? n : sizeof w->head - 1 - w->head_len;
        memcpy(w->head + w->head_len, p, k);
        w->head_len += k;
        w->head[w->head_len] = 0;
    }
    int rc = ob_sse_feed(&w->sse, p, n, on_event, w);
    if (rc == -1 && !w->r->err[0]) snprintf(w->r->err, sizeof w->r->err, "broken stream: a line or event over 16 MiB");
    return rc ? 0 : n; /* 0 aborts the transfer (CURLE_WRITE_ERROR); the reason is in r->err */
}

static void one_request(worker *w, int idx) {
    step_run *S = w->S;
    ob_bench_req *r = w->r;
    char errbuf[CURL_ERROR_SIZE], url[1200];
    json_t *body = request_body(S->T, S->o, S->salt, idx, 1, S->o->gen_tokens);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct curl_slist *h = headers(S->T, 1);
    snprintf(url, sizeof url, "%s%s", S->T->base, api_path(S->o));
    common_opts(w->curl, S->o, errbuf);
    curl_easy_setopt(w->curl, CURLOPT_URL, url);
    curl_easy_setopt(w->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(w->curl, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(w->curl, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(w->curl, CURLOPT_WRITEDATA, w);
    ob_sse_init(&w->sse);
    w->status = 0;
    w->errbody.len = 0;
    w->head_len = 0;
    w->events = 0;
    r->issued = 1;
    r->t_start = now_s() - S->t0;
    CURLcode rc = curl_easy_perform(w->curl);
    if (!w->status) curl_easy_getinfo(w->curl, CURLINFO_RESPONSE_CODE, &w->status);
    r->http_status = w->status;
    if (rc == CURLE_OK && w->status == 200) {
        int f = ob_sse_finish(&w->sse, on_event, w);
        if (f == -1 && !r->err[0]) snprintf(r->err, sizeof r->err, "broken stream: a line or event over 16 MiB");
        if (!r->err[0] && !w->events)
            snprintf(r->err, sizeof r->err, "the answer is not an event stream (starts: '%.60s')", w->head);
        ob_bench_req_close(r);
    } else if (rc == CURLE_OK || (w->status && w->status != 200)) {
        http_error(r->err, sizeof r->err, w->status, w->errbody.p ? w->errbody.p : "", w->errbody.len);
    } else if (!r->err[0]) {
        curl_error(r->err, sizeof r->err, rc, errbuf, S->o);
        if (r->done || r->finished) r->err[0] = 0; /* the whole stream arrived; only its end was cut */
    }
    r->t_end = now_s() - S->t0;
    ob_sse_free(&w->sse);
    curl_slist_free_all(h);
    free(text);
}

static void *worker_main(void *u) {
    worker *w = u;
    step_run *S = w->S;
    for (;;) {
        if (now_s() >= S->deadline) break;
        int i = atomic_fetch_add(&S->next, 1);
        if (i >= S->max_req) break;
        w->r = &S->reqs[i];
        ob_bench_req_reset(w->r);
        one_request(w, i);
        atomic_fetch_add(&S->n_done, 1);
        if (w->r->err[0]) atomic_fetch_add(&S->n_failed, 1);
    }
    atomic_fetch_sub(&S->workers_left, 1);
    return NULL;
}

static void progress_line(const step_run *S, const char *label, int tty, int final) { /* label: server and round */
    double t = now_s() - S->t0;
    long tok = atomic_load(&S->tokens);
    fprintf(stderr, "%s%s c=%d: %d/%d done, %d failed, %ld tokens streamed, %.1f tok/s, %.1f s%s", tty ? "\r\033[K" : "",
            label, S->conc, atomic_load(&S->n_done), S->max_req, atomic_load(&S->n_failed), tok, t > 0 ? tok / t : 0.0,
            t, tty && !final ? "" : "\n");
}

/* Runs one round of a step: up to n requests into reqs[n] (reset by the caller) with conc in
 * flight, none started after `duration` seconds. Its times continue from `offset` (the end of
 * the step's previous round), so a step's rounds add up to one timeline. quiet: the warm-up. */
static int run_round(target *T, const opts *o, uint64_t salt, int conc, ob_bench_req *reqs, int n, double offset,
                     double duration, const char *label, int quiet) {
    step_run S = {.T = T, .o = o, .conc = conc, .max_req = n, .salt = salt, .reqs = reqs};
    worker *w = calloc((size_t)conc, sizeof *w);
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    if (!w || !th) { fprintf(stderr, "bench: out of memory for %d workers\n", conc); free(w), free(th); return -1; }
    S.t0 = now_s() - offset;
    S.deadline = now_s() + duration;
    atomic_store(&S.workers_left, conc);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    int started = 0;
    for (int i = 0; i < conc; i++) {
        w[i].S = &S;
        w[i].curl = curl_easy_init();
        if (!w[i].curl || pthread_create(&th[i], &attr, worker_main, &w[i])) {
            fprintf(stderr, "bench: cannot start worker %d of %d\n", i + 1, conc);
            if (w[i].curl) curl_easy_cleanup(w[i].curl);
            w[i].curl = NULL;
            atomic_fetch_sub(&S.workers_left, conc - i);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    int tty = isatty(2);
    double last = 0;
    while (atomic_load(&S.workers_left) > 0) {
        usleep(100000);
        if (quiet || !o->progress) continue;
        double t = now_s();
        if (tty || t - last >= 2.0) { progress_line(&S, label, tty, 0); last = t; }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        curl_easy_cleanup(w[i].curl);
        free(w[i].errbody.p);
    }
    if (!quiet && o->progress) progress_line(&S, label, tty, 1);
    free(w), free(th);
    return started == conc ? 0 : -1;
}

static ob_bench_req *reqs_new(int n) {
    ob_bench_req *r = calloc((size_t)n, sizeof *r);
    if (r) for (int i = 0; i < n; i++) ob_bench_req_reset(&r[i]);
    return r;
}

static void reqs_free(ob_bench_req *r, int n) {
    if (r) for (int i = 0; i < n; i++) ob_bench_req_free(&r[i]);
    free(r);
}

/* ---- set-up of a target: model name, prompt calibration, warm-up ----------------------- */
static int prompt_tokens_of(target *T, const opts *o, int words, int *pt, char *err, size_t errlen) {
    T->words = words;
    json_t *b = request_body(T, o, 0, -1 - T->setup_requests, 0, 1), *ans = NULL;
    int rc = http_json(T, o, api_path(o), b, &ans, err, errlen);
    json_decref(b);
    T->setup_requests++;
    if (rc) return -1;
    json_t *u = json_object_get(ans, "usage");
    json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
    *pt = json_is_integer(p) ? (int)json_integer_value(p) : -1;
    if (json_is_integer(c)) T->setup_tokens += json_integer_value(c);
    json_decref(ans);
    return 0;
}

static int setup_target(target *T, const opts *o) {
    char err[1600];
    json_t *models = NULL;
    if (http_json(T, o, "/models", NULL, &models, err, sizeof err)) {
        /* Unreachable is fatal; a server without /models can still be benchmarked with --model. */
        if (!T->model[0] || strstr(err, "cannot connect") || strstr(err, "timeout")) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        fprintf(stderr, "bench: warning: %s (using --model %s)\n", err, T->model);
    } else if (!T->model[0]) {
        const char *id = json_string_value(json_object_get(json_array_get(json_object_get(models, "data"), 0), "id"));
        if (!id) {
            fprintf(stderr, "bench: GET %s/models lists no model (data[0].id); give one with --model\n", T->base);
            json_decref(models);
            return -1;
        }
        snprintf(T->model, sizeof T->model, "%s", id);
    }
    json_decref(models);
    if (!T->label[0]) {
        const char *h = strstr(T->base, "://");
        h = h ? h + 3 : T->base;
        snprintf(T->label, sizeof T->label, "%.*s", (int)strcspn(h, "/"), h);
    }
    if (!o->replay) {
        /* prompt_tokens = overhead (chat template, or BOS) + tok_per_word * words: two points fix it
         * (N/4 and N/2 words: short, as a tokenizer may take several tokens a word). */
        int w0 = o->prompt_tokens / 4 > 2 ? o->prompt_tokens / 4 : 2, w1 = 2 * w0, p0, p1;
        if (prompt_tokens_of(T, o, w0, &p0, err, sizeof err) || prompt_tokens_of(T, o, w1, &p1, err, sizeof err)) {
            fprintf(stderr, "bench: calibration request to %s failed: %s\n", T->label, err);
            return -1;
        }
        if (p0 < 0 || p1 <= p0) {
            fprintf(stderr, "bench: warning: %s reports no usable usage.prompt_tokens; the prompt is %d words\n", T->label,
                    o->prompt_tokens);
            T->words = o->prompt_tokens, T->tok_per_word = 1, T->overhead = 0;
        } else {
            T->tok_per_word = (double)(p1 - p0) / (w1 - w0);
            T->overhead = p0 - T->tok_per_word * w0;
            int w = (int)lround((o->prompt_tokens - T->overhead) / T->tok_per_word);
            if (w < 1) {
                fprintf(stderr, "bench: warning: %s's %s alone takes ~%.0f tokens (> --prompt-tokens %d)\n",
                        T->label, o->completions ? "prompt's lead-in" : "chat template", T->overhead, o->prompt_tokens);
                w = 1;
            }
            /* Checks at the solution correct the fit (words differ in their token counts). */
            for (int k = 0, pw; k < 2; k++) {
                if (prompt_tokens_of(T, o, w, &pw, err, sizeof err) || pw <= 0 || pw == o->prompt_tokens) break;
                int nw = w + (int)lround((o->prompt_tokens - pw) / T->tok_per_word);
                if (nw < 1 || nw == w) break;
                w = nw;
            }
            T->words = w;
        }
    }
    if (o->warmup) {
        ob_bench_step s;
        ob_bench_req *r = reqs_new(o->warmup);
        if (!r) return -1;
        run_round(T, o, 1u << 30, 1, r, o->warmup, 0, o->duration, T->label, 1);
        ob_bench_step_summarize(r, o->warmup, 1, &s);
        for (int i = 0; i < o->warmup; i++)
            if (r[i].issued) {
                T->setup_requests++;
                if (!r[i].err[0]) T->setup_tokens += ob_bench_req_tokens(&r[i]);
            }
        reqs_free(r, o->warmup);
        /* A failure the server reports inside a started stream depends on the text the model
         * wrote (llama-server's chat-output parser on random-weight text): warn and go on, as
         * the steps count such failures; anything else means the target cannot be measured. */
        if (s.n_err && !strncmp(s.err[0].reason, OB_BENCH_STREAM_ERR, strlen(OB_BENCH_STREAM_ERR))) {
            fprintf(stderr, "bench: warning: the warm-up request to %s failed inside its stream (%s); the steps count such failures\n",
                    T->label, s.err[0].reason);
        } else if (s.n_err) {
            fprintf(stderr, "bench: the warm-up request to %s failed: %s\n", T->label, s.err[0].reason);
            return -1;
        }
    }
    return 0;
}

/* ---- reports ------------------------------------------------------------------------- */
static double ratio(double a, double b) { return isfinite(a) && isfinite(b) && b > 0 ? a / b : NAN; }

static void md_target(const target *T, const opts *o) {
    printf("\n### %s — %s (model %s, api %s)\n\n", T->label, T->base, T->model, o->completions ? "completions" : "chat");
    printf("| concurrency | ok | failed | prompt tok/req | cached tok/req | output tok | tokens from | wall s | output tok/s | req/s "
           "| TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | decode tok/s/req p50 |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < o->n_conc; k++) {
        const ob_bench_step *s = &T->steps[k];
        int np = s->n_ok ? s->n_ok : 1;
        printf("| %d | %d | %d | %.0f | %.0f | %ld | %s | %.2f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f |\n",
               s->concurrency, s->n_ok, s->n_err, (double)s->prompt_tokens / np, (double)s->prompt_cached / np, s->out_tokens, s->token_source,
               s->wall_s, s->out_tps, s->req_ps, s->ttft_ms.p50, s->ttft_ms.p90, s->ttft_ms.p99, s->itl_ms.p50,
               s->itl_ms.p99, s->decode_tps.p50);
    }
    for (int k = 0; k < o->n_conc; k++)
        for (int e = 0; e < T->steps[k].n_reasons; e++)
            printf("%s- concurrency %d: %d × %s\n", k == 0 && e == 0 ? "\nErrors:\n" : "", T->steps[k].concurrency,
                   T->steps[k].err[e].count, T->steps[k].err[e].reason);
    printf("\n");
}

static json_t *compare_json_md(const target *A, const target *B, const opts *o) {
    json_t *arr = json_array();
    printf("\n### %s / %s\n\n", A->label, B->label);
    printf("| concurrency | output tok/s %s | %s | ratio | req/s ratio | TTFT p50 ms %s | %s | ratio "
           "| decode tok/s/req p50 %s | %s | ratio |\n", A->label, B->label, A->label, B->label, A->label, B->label);
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < o->n_conc; k++) {
        const ob_bench_step *a = &A->steps[k], *b = &B->steps[k];
        double r_tps = ratio(a->out_tps, b->out_tps), r_rps = ratio(a->req_ps, b->req_ps);
        double r_ttft = ratio(a->ttft_ms.p50, b->ttft_ms.p50), r_dec = ratio(a->decode_tps.p50, b->decode_tps.p50);
        printf("| %d | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", a->concurrency, a->out_tps,
               b->out_tps, r_tps, r_rps, a->ttft_ms.p50, b->ttft_ms.p50, r_ttft, a->decode_tps.p50, b->decode_tps.p50, r_dec);
        json_t *r = json_pack("{s:i}", "concurrency", a->concurrency);
        json_object_set_new(r, "output_tokens_per_s", isfinite(r_tps) ? json_real(r_tps) : json_null());
        json_object_set_new(r, "requests_per_s", isfinite(r_rps) ? json_real(r_rps) : json_null());
        json_object_set_new(r, "ttft_p50_ms", isfinite(r_ttft) ? json_real(r_ttft) : json_null());
        json_object_set_new(r, "decode_tokens_per_s_p50", isfinite(r_dec) ? json_real(r_dec) : json_null());
        json_array_append_new(arr, r);
    }
    printf("\nRatios are %s / %s (above 1: %s has more throughput, or a longer TTFT).\n", A->label, B->label, A->label);
    return arr;
}

static json_t *target_json(const target *T, const opts *o) {
    json_t *t = json_pack("{s:s, s:s, s:s, s:{s:i, s:I}}", "label", T->label, "url", T->base, "model", T->model, "setup",
                          "requests", T->setup_requests, "completion_tokens", (json_int_t)T->setup_tokens);
    if (!o->replay)
        json_object_set_new(t, "prompt", json_pack("{s:i, s:f, s:f}", "words", T->words, "tokens_per_word", T->tok_per_word,
                                                   "template_tokens", T->overhead));
    json_object_set_new(t, "steps", json_incref(T->steps_json));
    return t;
}

/* ---- command line ------------------------------------------------------------------- */
static int usage(void) {
    fprintf(stderr,
            "usage: 1bit bench --url http://HOST:PORT/v1 [options]\n"
            "  --url URL              an OpenAI-compatible server (a URL without a path gets /v1)\n"
            "  --model NAME           model to ask for (default: the first of GET /models)\n"
            "  --api-key K            sent as 'Authorization: Bearer K'\n"
            "  --compare URL2         the same steps against a second server, alternating, with ratios\n"
            "  --model2 NAME, --api-key2 K   the same for URL2 (default: its first model; no key)\n"
            "  --label L, --label2 L  names in the tables and chart (default: HOST:PORT)\n"
            "  --prompt-tokens N      synthetic prompt of about N tokens, calibrated with the server's usage (128)\n"
            "  --gen-tokens M         tokens to generate: max_tokens, with ignore_eos and min_tokens (64)\n"
            "  --no-ignore-eos        do not send ignore_eos / min_tokens (the server stops where it likes)\n"
            "  --api chat|completions requests to /chat/completions with messages (default), or to /completions\n"
            "                         with the same text as a plain prompt (no chat template, no parsing of the\n"
            "                         output: llama-server's chat parser fails some streams of random weights)\n"
            "  --replay FILE.jsonl    requests from a file, one {\"messages\": [...]} a line, used in turn\n"
            "                         (max_tokens of a line, else --gen-tokens; other fields kept; --api chat only)\n"
            "  --concurrency LIST     requests in flight, one step each (default 1,4)\n"
            "  --requests K           requests per step (default 2 x concurrency, at least 8; 10000 with --duration)\n"
            "  --duration S           no new request after S seconds of a step (default 120)\n"
            "  --rounds R             run each step in R rounds (K/R requests, S/R seconds each), the servers\n"
            "                         of --compare alternating every round (default 1)\n"
            "  --timeout S            limit of one request (default 120)\n"
            "  --warmup N             unmeasured requests per server before the sweep (default 1)\n"
            "  --seed N               seed of the synthetic prompts (default 1)\n"
            "  -o FILE.json           results as JSON\n"
            "  --svg FILE.svg         chart: throughput and latency against concurrency\n"
            "  --progress             live progress on stderr even when it is not a terminal\n"
            "  1bit bench plot a.json [b.json ...] [-o chart.svg]   overlay result files in one chart\n");
    return 2;
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "bench: %s '%s': expected a number from %g to %g\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_conc(const char *s, opts *o) {
    o->n_conc = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MAX_CONC || o->n_conc == MAX_CONC_LEVELS || (*end && *end != ',')) {
            fprintf(stderr, "bench: --concurrency '%s': expected a list of 1..%d, at most %d values\n", s, MAX_CONC,
                    MAX_CONC_LEVELS);
            return -1;
        }
        o->conc[o->n_conc++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return o->n_conc ? 0 : -1;
}

static json_t *load_replay(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "bench: --replay %s: cannot open it\n", path); return NULL; }
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int ln = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        ln++;
        size_t k = strspn(line, " \t\r\n");
        if (line[k] == 0) continue;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, 0, &je);
        const char *why = !j ? je.text : !json_is_object(j) ? "not a JSON object"
                        : !json_is_array(json_object_get(j, "messages")) || !json_array_size(json_object_get(j, "messages"))
                            ? "no 'messages' array" : NULL;
        if (why) {
            fprintf(stderr, "bench: --replay %s:%d: %s\n", path, ln, why);
            json_decref(j), json_decref(arr), free(line), fclose(f);
            return NULL;
        }
        json_array_append_new(arr, j);
        if (json_array_size(arr) > MAX_REQUESTS) break;
    }
    free(line);
    fclose(f);
    if (!json_array_size(arr)) { fprintf(stderr, "bench: --replay %s: no requests in it\n", path); json_decref(arr); return NULL; }
    return arr;
}

static int set_url(target *T, const char *url) {
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
        fprintf(stderr, "bench: '%s': expected an http:// or https:// URL\n", url);
        return -1;
    }
    size_t n = strlen(url);
    if (n >= sizeof T->base - 8) { fprintf(stderr, "bench: URL too long\n"); return -1; }
    memcpy(T->base, url, n + 1);
    while (n && T->base[n - 1] == '/') T->base[--n] = 0;
    static const char *const tails[] = {"/chat/completions", "/completions"}; /* the URL of an endpoint */
    for (size_t k = 0; k < 2; k++) {
        size_t t = strlen(tails[k]);
        if (n > t && !strcmp(T->base + n - t, tails[k])) { T->base[n -= t] = 0; break; }
    }
    if (!strchr(strstr(T->base, "://") + 3, '/')) strcat(T->base, "/v1");
    return 0;
}

int ob_bench_serve_cmd(int argc, char **argv) {
    opts o = {.prompt_tokens = 128, .gen_tokens = 64, .ignore_eos = 1, .warmup = 1, .duration = 120, .timeout = 120, .seed = 1,
              .rounds = 1};
    o.conc[0] = 1, o.conc[1] = 4, o.n_conc = 2;
    target T[2] = {0};
    const char *url = NULL, *url2 = NULL, *out_json = NULL, *out_svg = NULL;
    int duration_given = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
#define NUM(lo, hi) (v ? (i++, parse_num(a, v, lo, hi, &d)) : (fprintf(stderr, "bench: %s needs a value\n", a), -1))
        if (!strcmp(a, "--progress")) o.progress = 1;
        else if (!strcmp(a, "--no-ignore-eos")) o.ignore_eos = 0;
        else if (!v) { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); return usage(); }
        else if (!strcmp(a, "--url")) url = argv[++i];
        else if (!strcmp(a, "--compare")) url2 = argv[++i];
        else if (!strcmp(a, "--model")) snprintf(T[0].model, sizeof T[0].model, "%s", argv[++i]);
        else if (!strcmp(a, "--model2")) snprintf(T[1].model, sizeof T[1].model, "%s", argv[++i]);
        else if (!strcmp(a, "--api-key")) T[0].api_key = argv[++i];
        else if (!strcmp(a, "--api-key2")) T[1].api_key = argv[++i];
        else if (!strcmp(a, "--label")) snprintf(T[0].label, sizeof T[0].label, "%s", argv[++i]);
        else if (!strcmp(a, "--label2")) snprintf(T[1].label, sizeof T[1].label, "%s", argv[++i]);
        else if (!strcmp(a, "--replay")) o.replay_path = argv[++i];
        else if (!strcmp(a, "--api")) {
            const char *api = argv[++i];
            if (strcmp(api, "chat") && strcmp(api, "completions")) {
                fprintf(stderr, "bench: --api '%s': expected chat or completions\n", api);
                return 2;
            }
            o.completions = !strcmp(api, "completions");
        }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out_json = argv[++i];
        else if (!strcmp(a, "--svg")) out_svg = argv[++i];
        else if (!strcmp(a, "--concurrency")) { if (parse_conc(argv[++i], &o)) return 2; }
        else if (!strcmp(a, "--prompt-tokens")) { if (NUM(1, 1 << 20)) return 2; o.prompt_tokens = (int)d; }
        else if (!strcmp(a, "--gen-tokens")) { if (NUM(1, 1 << 20)) return 2; o.gen_tokens = (int)d; }
        else if (!strcmp(a, "--requests")) { if (NUM(1, MAX_REQUESTS)) return 2; o.requests = (int)d; }
        else if (!strcmp(a, "--rounds")) { if (NUM(1, 1000)) return 2; o.rounds = (int)d; }
        else if (!strcmp(a, "--duration")) { if (NUM(0.1, 86400)) return 2; o.duration = d; duration_given = 1; }
        else if (!strcmp(a, "--timeout")) { if (NUM(0.1, 86400)) return 2; o.timeout = d; }
        else if (!strcmp(a, "--warmup")) { if (NUM(0, 100)) return 2; o.warmup = (int)d; }
        else if (!strcmp(a, "--seed")) { if (NUM(0, 1e15)) return 2; o.seed = (uint64_t)d; }
        else { fprintf(stderr, "bench: unknown option '%s'\n", a); return usage(); }
#undef NUM
    }
    if (!url) { fprintf(stderr, "bench: no --url given\n"); return usage(); }
    if (set_url(&T[0], url) || (url2 && set_url(&T[1], url2))) return 2;
    if (o.replay_path && o.completions) {
        fprintf(stderr, "bench: --replay sends chat messages; it needs --api chat, not completions\n");
        return 2;
    }
    if (o.replay_path && !(o.replay = load_replay(o.replay_path))) return 2;
    if (isatty(2)) o.progress = 1;
    int n_t = url2 ? 2 : 1;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) { fprintf(stderr, "bench: libcurl failed to initialise\n"); return 1; }
    int rc = 0;
    for (int t = 0; t < n_t && rc == 0; t++) {
        if (setup_target(&T[t], &o)) rc = 1;
        else if (!o.replay)
            fprintf(stderr, "bench: %s: model %s, prompt of %d words (calibration: %.0f tokens of template + %.2f a word)\n",
                    T[t].label, T[t].model, T[t].words, T[t].overhead, T[t].tok_per_word);
    }
    if (n_t == 2 && !strcmp(T[0].label, T[1].label) && strlen(T[1].label) < sizeof T[1].label - 8)
        strcat(T[1].label, " (2)");
    for (int t = 0; t < n_t && rc == 0; t++) {
        T[t].steps = calloc((size_t)o.n_conc, sizeof *T[t].steps);
        T[t].steps_json = json_array();
    }
    /* The sweep: with two servers, each round of a step runs on both, the first server
     * alternating from round to round and step to step, so the machine's changing load hits both
     * alike (more rounds: finer alternation). */
    for (int k = 0; k < o.n_conc && rc == 0; k++) {
        int c = o.conc[k], R = o.rounds;
        int max_req = o.requests ? o.requests : duration_given ? 10000 : (2 * c > 8 ? 2 * c : 8);
        if (R > max_req) R = max_req;
        if (max_req / R < c)
            fprintf(stderr, "bench: warning: concurrency %d: rounds of %d requests keep fewer than %d in flight\n", c,
                    max_req / R, c);
        ob_bench_req *buf[2] = {reqs_new(max_req), n_t == 2 ? reqs_new(max_req) : NULL};
        double off[2] = {0, 0};
        if (!buf[0] || (n_t == 2 && !buf[1])) { fprintf(stderr, "bench: out of memory for %d requests\n", max_req); rc = 1; }
        for (int r = 0, base = 0; r < R && rc == 0; r++) {
            int n = max_req / R + (r < max_req % R);
            for (int j = 0; j < n_t && rc == 0; j++) {
                int x = (j + k + r) % n_t;
                char label[300];
                if (R > 1) snprintf(label, sizeof label, "%s round %d/%d", T[x].label, r + 1, R);
                else snprintf(label, sizeof label, "%s", T[x].label);
                if (run_round(&T[x], &o, (uint64_t)r << 20 | (uint64_t)(k + 1), c, buf[x] + base, n, off[x],
                              o.duration / R, label, 0)) rc = 1;
                for (int i = base; i < base + n; i++) if (buf[x][i].issued && buf[x][i].t_end > off[x]) off[x] = buf[x][i].t_end;
            }
            base += n;
        }
        for (int x = 0; x < n_t && rc == 0; x++) {
            ob_bench_step_summarize(buf[x], max_req, c, &T[x].steps[k]);
            json_array_append_new(T[x].steps_json, ob_bench_step_json(&T[x].steps[k]));
        }
        for (int x = 0; x < n_t; x++) reqs_free(buf[x], max_req);
    }
    if (rc == 0) {
        for (int t = 0; t < n_t; t++) md_target(&T[t], &o);
        json_t *doc = json_pack("{s:s, s:s}", "benchmark", "1bit bench --url", "version", OB_VERSION_STRING);
        char when[32], host[256] = "";
        time_t now = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        gethostname(host, sizeof host - 1);
        json_object_set_new(doc, "finished_utc", json_string(when));
        json_object_set_new(doc, "host", json_string(host));
        json_t *conc = json_array();
        for (int k = 0; k < o.n_conc; k++) json_array_append_new(conc, json_integer(o.conc[k]));
        json_t *set = json_pack("{s:o, s:f, s:f, s:i, s:i, s:i}", "concurrency", conc, "duration_s", o.duration, "timeout_s",
                                o.timeout, "warmup", o.warmup, "gen_tokens", o.gen_tokens, "rounds", o.rounds);
        json_object_set_new(set, "api", json_string(o.completions ? "completions" : "chat"));
        json_object_set_new(set, "requests", o.requests ? json_integer(o.requests)
                                             : json_string(duration_given ? "10000 (--duration)" : "2 x concurrency, at least 8"));
        if (o.replay) json_object_set_new(set, "replay", json_string(o.replay_path));
        else {
            json_object_set_new(set, "prompt_tokens", json_integer(o.prompt_tokens));
            json_object_set_new(set, "ignore_eos", json_boolean(o.ignore_eos));
        }
        json_object_set_new(doc, "settings", set);
        json_t *targets = json_array();
        for (int t = 0; t < n_t; t++) json_array_append_new(targets, target_json(&T[t], &o));
        json_object_set_new(doc, "targets", targets);
        if (n_t == 2) json_object_set_new(doc, "ratios", compare_json_md(&T[0], &T[1], &o));
        fflush(stdout);
        if (out_json && json_dump_file(doc, out_json, JSON_INDENT(2) | JSON_REAL_PRECISION(8))) {
            fprintf(stderr, "bench: -o %s: cannot write it\n", out_json);
            rc = 1;
        }
        if (out_svg) {
            char err[512];
            FILE *f = fopen(out_svg, "w");
            if (!f) { fprintf(stderr, "bench: --svg %s: cannot write it\n", out_svg); rc = 1; }
            else {
                int e = ob_bench_svg_write(f, &doc, NULL, 1, err, sizeof err);
                if (fclose(f) || e) { fprintf(stderr, "bench: --svg %s: %s\n", out_svg, e ? err : "write failed"); rc = 1; }
            }
        }
        json_decref(doc);
    }
    for (int t = 0; t < n_t; t++) {
        free(T[t].steps);
        json_decref(T[t].steps_json);
    }
    json_decref(o.replay);
    curl_global_cleanup();
    return rc;
}
