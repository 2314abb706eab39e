/* test_sched.c — the scheduler: continuous batching must give every request exactly what it
 * would get alone (greedy), reuse cached prefixes, queue, cancel, and refuse oversize prompts. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

#define MAXGEN 64

/* Greedy continuation computed directly with ob_decode: the reference. */
static int greedy_direct(ob_model_t *m, const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    char err[256];
    ob_ctx_params cp = {64, 1, 64, OB_KV_F16, OB_KV_F16};
    ob_ctx_t *c = NULL;
    if (ob_ctx_new(m, &cp, &c, err, sizeof err)) return -1;
    int32_t pos[64];
    for (int i = 0; i < n_prompt; i++) pos[i] = i;
    ob_batch b = {n_prompt, prompt, pos, NULL, NULL};
    if (ob_decode(c, &b, err, sizeof err)) { ob_ctx_free(c); return -1; }
    int V = ob_model_get_info(m)->n_vocab;
    for (int g = 0; g < n_gen; g++) {
        const float *l = ob_get_logits(c, 0);
        int best = 0;
        for (int k = 1; k < V; k++) if (l[k] > l[best]) best = k;
        out[g] = best;
        int32_t p = n_prompt + g;
        ob_batch sb = {1, &out[g], &p, NULL, NULL};
        if (ob_decode(c, &sb, err, sizeof err)) { ob_ctx_free(c); return -1; }
    }
    ob_ctx_free(c);
    return 0;
}

/* Reads all events of r into toks; returns the count, finish reason in *why. */
/* A logits filter that holds the scheduler before its second token until the test opens it: a
 * cancellation then lands at a known step, however fast the scheduler runs. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls, open;
} gate_t;

static void gate_filter(void *user, float *logits, int32_t n_vocab) {
    gate_t *g = user;
    pthread_mutex_lock(&g->mu);
    if (++g->calls >= 2)
        while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static int drain(ob_req_t *r, int32_t *toks, ob_finish *why, ob_token_event *first) {
    ob_token_event ev;
    int n = 0;
    *why = OB_FINISH_NONE;
    while (ob_req_next(r, &ev, 10000) == 1) {
        if (ev.token >= 0 && n < MAXGEN) {
            if (n == 0 && first) *first = ev;
            toks[n++] = ev.token;
        }
        if (ev.finish != OB_FINISH_NONE) *why = ev.finish;
    }
    return n;
}

/* The tiny Qwen2 golden model as f32 GGUF at path (under the test's scratch folder), loaded. */
static ob_model_t *tiny_model(char *path, size_t pathlen, const char *name) {
    char err[512];
    snprintf(path, pathlen, "%s/%s", ob_test_tmpdir(), name);
    char *argv[] = {"convert", "tests/golden/qwen2", "-o", path, "--type", "f32", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(path, &mp, &m, err, sizeof err), 0);
    return m;
}

OB_SUITE(sched) {
    char path[256], err[512];
    ob_model_t *m = tiny_model(path, sizeof path, "sched-qwen2.gguf");
    if (!m) return;
    enum { NREQ = 5, NGEN = 12 };
    int32_t prompts[NREQ][6] = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {1, 2, 3, 4, 99, 98}, {50, 60, 70, 80, 90, 100}, {1, 2, 3, 4, 5, 6}};
    int32_t want[NREQ][NGEN];
    for (int i = 0; i < NREQ; i++) CHECK_EQ_INT(greedy_direct(m, prompts[i], 6, NGEN, want[i]), 0);

    ob_sched_params sp = {2, 48, 8, 16}; /* 2 slots, small batch: prompts split over steps */
    ob_sched_t *s = NULL;
    CHECK_EQ_INT(ob_sched_new(m, &sp, &s, err, sizeof err), 0);
    if (!s) { ob_model_free(m); return; }
    ob_req_params rp = {0};
    rp.n_prompt = 6;
    rp.max_tokens = NGEN;
    rp.sampling = ob_sampler_default_params();
    rp.sampling.temp = 0;
    rp.ignore_eos = 1;
    rp.n_probs = 3;
    ob_req_t *reqs[NREQ];
    for (int i = 0; i < NREQ; i++) {
        rp.prompt = prompts[i];
        reqs[i] = ob_sched_submit(s, &rp, err, sizeof err);
        CHECK(reqs[i] != NULL);
    }
    for (int i = 0; i < NREQ; i++) {
        if (!reqs[i]) continue;
        int32_t got[MAXGEN];
        ob_finish why;
        ob_token_event first;
        int n = drain(reqs[i], got, &why, &first);
        CHECK_EQ_INT(n, NGEN);
        CHECK_EQ_INT(why, OB_FINISH_LENGTH);
        int same = n == NGEN;
        for (int k = 0; same && k < NGEN; k++) same = got[k] == want[i][k];
        if (!same) fprintf(stderr, "  sched: request %d differs from its direct greedy run\n", i);
        CHECK(same);
        /* Greedy: the chosen token is the most likely one, reported first among the alternatives. */
        CHECK_EQ_INT(first.n_probs, 3);
        CHECK_EQ_INT(first.top_tokens[0], first.token);
        CHECK(first.logprob <= 0 && fabsf(first.logprob - first.top_logprobs[0]) < 1e-5);
        CHECK(first.top_logprobs[0] >= first.top_logprobs[1] && first.top_logprobs[1] >= first.top_logprobs[2]);
        ob_req_timings t;
        ob_req_get_timings(reqs[i], &t);
        CHECK_EQ_INT(t.n_prompt, 6);
        CHECK_EQ_INT(t.predicted_n, NGEN);
        CHECK(t.slot >= 0 && t.slot < 2);
        if (i == 4) CHECK(t.cache_n >= 4); /* same prompt as request 0, or shares 1,2,3,4 with request 2 */
        ob_req_free(reqs[i]);
    }

    /* Prefix reuse: the same prompt again reuses all but its last token. */
    rp.prompt = prompts[3];
    ob_req_t *r = ob_sched_submit(s, &rp, err, sizeof err);
    int32_t got[MAXGEN];
    ob_finish why;
    CHECK_EQ_INT(drain(r, got, &why, NULL), NGEN);
    ob_req_timings t;
    ob_req_get_timings(r, &t);
    CHECK_EQ_INT(t.cache_n, 5);
    CHECK_EQ_INT(t.prompt_n, 1);
    CHECK(memcmp(got, want[3], sizeof want[3]) == 0);
    ob_req_free(r);

    /* Cancel mid-generation: the request ends within a step, as cancelled. The gate holds the
     * scheduler in its second token's step until the cancel is in. */
    rp.max_tokens = 0; /* until the context is full */
    gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    ob_req_params gp = rp;
    gp.filter = gate_filter;
    gp.filter_user = &gate;
    r = ob_sched_submit(s, &gp, err, sizeof err);
    ob_token_event ev;
    CHECK_EQ_INT(ob_req_next(r, &ev, 10000), 1);
    ob_req_cancel(r);
    pthread_mutex_lock(&gate.mu);
    gate.open = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    int n_after = 0;
    ob_finish last = OB_FINISH_NONE;
    while (ob_req_next(r, &ev, 10000) == 1) {
        n_after++;
        if (ev.finish) last = ev.finish;
    }
    CHECK(n_after <= 2); /* the token of the held step, then the end */
    CHECK_EQ_INT(last, OB_FINISH_CANCELLED);
    ob_req_free(r);

    /* Context: the generation stops when the slot is full. */
    r = ob_sched_submit(s, &rp, err, sizeof err);
    int n = drain(r, got, &why, NULL);
    CHECK_EQ_INT(why, OB_FINISH_CONTEXT);
    CHECK_EQ_INT(n, 48 - 6);
    ob_req_free(r);

    /* ignore_eos: end-of-generation tokens are never sampled, even when biased to the top. */
    {
        const ob_tokenizer_t *tok = ob_model_tokenizer(m);
        ob_logit_bias lb = {ob_tokenizer_eos(tok), 100.0f};
        ob_req_params ep = rp;
        ep.max_tokens = 8;
        ep.logit_bias = &lb;
        ep.n_logit_bias = 1;
        CHECK(lb.token >= 0);
        ob_req_t *er = ob_sched_submit(s, &ep, err, sizeof err);
        int n_e = drain(er, got, &why, NULL), eog_seen = 0;
        for (int k = 0; k < n_e; k++) eog_seen |= ob_tokenizer_is_eog(tok, got[k]);
        CHECK_EQ_INT(n_e, 8);
        CHECK_EQ_INT(eog_seen, 0);
        ob_req_free(er);
        /* Without ignore_eos the same bias ends the request at once, as a stop. */
        ep.ignore_eos = 0;
        er = ob_sched_submit(s, &ep, err, sizeof err);
        CHECK_EQ_INT(drain(er, got, &why, NULL), 1);
        CHECK_EQ_INT(why, OB_FINISH_STOP);
        ob_req_free(er);
    }

    /* Log-probabilities only when asked for: none at all, then the chosen token's alone. */
    for (int lp = 0; lp < 2; lp++) {
        ob_req_params q = rp;
        q.n_probs = 0;
        q.logprobs = lp;
        q.max_tokens = 2;
        q.prompt = prompts[3];
        ob_req_t *lr = ob_sched_submit(s, &q, err, sizeof err);
        CHECK(lr != NULL);
        if (!lr) continue;
        ob_token_event first;
        CHECK_EQ_INT(drain(lr, got, &why, &first), 2);
        CHECK_EQ_INT(first.n_probs, 0);
        if (lp) CHECK(first.logprob < 0 && first.logprob > -30);
        else CHECK(first.logprob == 0);
        ob_req_free(lr);
    }

    /* A prompt longer than the context is refused with llama-server's words. */
    int32_t longp[64] = {0};
    rp.prompt = longp;
    rp.n_prompt = 64;
    CHECK(ob_sched_submit(s, &rp, err, sizeof err) == NULL);
    CHECK(strstr(err, "exceeds the available context size") != NULL);
    rp.n_prompt = 6;
    rp.n_probs = 99;
    CHECK(ob_sched_submit(s, &rp, err, sizeof err) == NULL);

    /* Freeing the scheduler with requests in flight cancels them; readers see the end. */
    rp.n_probs = 0;
    rp.prompt = prompts[1];
    ob_req_t *a = ob_sched_submit(s, &rp, err, sizeof err), *b = ob_sched_submit(s, &rp, err, sizeof err),
             *c = ob_sched_submit(s, &rp, err, sizeof err);
    ob_sched_free(s);
    ob_req_t *all[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        CHECK(all[i] != NULL);
        if (!all[i]) continue;
        drain(all[i], got, &why, NULL);
        CHECK(why != OB_FINISH_NONE);
        ob_req_free(all[i]);
    }
    ob_model_free(m);
    remove(path);
}

/* A filter that bans every token below a request's floor, and counts its tokens (accept). */
typedef struct {
    int32_t floor;
    int accepted;
} ban_t;
static void ban_filter(void *user, float *logits, int32_t n_vocab) {
    const ban_t *b = user;
    for (int32_t i = 0; i < b->floor && i < n_vocab; i++) logits[i] = -INFINITY;
}
static void ban_accept(void *user, int32_t token) { ((ban_t *)user)->accepted++; }

/* Runs NS seeded, sampled requests at once (one slot each) with OB_SAMPLE_THREADS=threads; their
 * tokens, log-probabilities and filters' counts into toks / lps / acc. */
enum { NS = 6, NSGEN = 10 };
static void sample_run(ob_model_t *m, const char *threads, int32_t toks[NS][MAXGEN], float lps[NS][MAXGEN], int acc[NS]) {
    char err[256];
    const char *had = getenv("OB_SAMPLE_THREADS");
    char *keep = had ? strdup(had) : NULL; /* the caller's setting, back after */
    setenv("OB_SAMPLE_THREADS", threads, 1);
    ob_sched_params sp = {NS, 48, 64, 16};
    ob_sched_t *s = NULL;
    CHECK_EQ_INT(ob_sched_new(m, &sp, &s, err, sizeof err), 0);
    if (keep) setenv("OB_SAMPLE_THREADS", keep, 1);
    else unsetenv("OB_SAMPLE_THREADS");
    free(keep);
    if (!s) return;
    int32_t prompt[NS][4];
    ban_t ban[NS];
    ob_logit_bias bias[2] = {{5, 4.0f}, {9, -100.0f}};
    ob_req_t *r[NS];
    for (int i = 0; i < NS; i++) {
        for (int k = 0; k < 4; k++) prompt[i][k] = 3 + 7 * i + k;
        ob_req_params rp = {0};
        rp.prompt = prompt[i];
        rp.n_prompt = 4;
        rp.max_tokens = NSGEN;
        rp.sampling = ob_sampler_default_params();
        rp.sampling.seed = 42 + (uint64_t)i;
        rp.ignore_eos = i == 1;
        rp.min_tokens = i == 2 ? 5 : 0;
        rp.n_probs = i % 3 == 0 ? 2 : 0;
        rp.logprobs = i == 4;
        if (i == 3) { rp.logit_bias = bias; rp.n_logit_bias = 2; }
        ban[i] = (ban_t){20 + i, 0};
        if (i >= 4) { rp.filter = ban_filter; rp.accept = ban_accept; rp.filter_user = &ban[i]; }
        r[i] = ob_sched_submit(s, &rp, err, sizeof err);
        CHECK(r[i] != NULL);
    }
    for (int i = 0; i < NS; i++) {
        if (!r[i]) continue;
        ob_token_event ev;
        int n = 0;
        while (ob_req_next(r[i], &ev, 10000) == 1) {
            if (ev.token >= 0 && n < MAXGEN) {
                toks[i][n] = ev.token;
                lps[i][n++] = ev.logprob;
            }
            if (ev.finish != OB_FINISH_NONE) break;
        }
        for (int k = n; k < MAXGEN; k++) toks[i][k] = -1;
        ob_req_free(r[i]);
    }
    ob_sched_free(s);
    for (int i = 0; i < NS; i++) acc[i] = ban[i].accepted;
}

/* The sampling workers (engine/scheduler.c): sampled on several threads, every request gets the
 * tokens (and log-probabilities, filters' calls) it gets on the scheduler thread alone. */
OB_SUITE(sched_sampling) {
    char path[256];
    ob_model_t *m = tiny_model(path, sizeof path, "sched-sampling.gguf");
    if (!m) return;
    static int32_t t1[NS][MAXGEN], t3[NS][MAXGEN];
    static float l1[NS][MAXGEN], l3[NS][MAXGEN];
    int a1[NS], a3[NS];
    sample_run(m, "1", t1, l1, a1);
    sample_run(m, "3", t3, l3, a3);
    for (int i = 0; i < NS; i++) {
        int n = 0;
        while (n < MAXGEN && t1[i][n] >= 0) n++;
        CHECK(n > 0);
        if (i == 2) CHECK(n >= 5); /* min_tokens */
        const int same = !memcmp(t1[i], t3[i], sizeof t1[i]) && !memcmp(l1[i], l3[i], sizeof(float) * (size_t)n);
        if (!same) fprintf(stderr, "  sched_sampling: request %d differs between 1 and 3 sampling threads\n", i);
        CHECK(same);
        if (i >= 4) {
            CHECK_EQ_INT(a1[i], n);
            CHECK_EQ_INT(a3[i], n);
            for (int k = 0; k < n; k++) CHECK(t3[i][k] >= 20 + i); /* the filter ran for this request's rows */
        }
        if (i == 3)
            for (int k = 0; k < n; k++) CHECK(t3[i][k] != 9);
    }
    ob_model_free(m);
    remove(path);
}
