/* scheduler.c — continuous batching: many requests share one forward pass.
 *
 * Owns: the slots (one KV-cache sequence each, with the token ids it holds, for prefix
 * reuse), the wait queue, the scheduler thread, and per-request event queues that front-end
 * threads read. Each step decodes one token for every generating slot and fills the rest of
 * the batch with chunks of prompts, so long prompts interleave with decoding.
 * Does not own: text, templates, stop strings, HTTP (front ends); the forward pass (forward.c).
 *
 * Threads: the scheduler thread is the only one that touches the context and the slots; a
 * request's event queue is shared with its reader under the request's mutex; submit and
 * cancel take the scheduler's mutex or an atomic flag. A request is freed when both the
 * scheduler and the reader have let go of it (reference count). With a GPU backend, a step's
 * rows are sampled by a pool of workers (sample_rows: each request's sampler, filter and
 * logprobs on one worker, each worker with its own scratch row); what follows (events,
 * finishing) stays on the scheduler thread.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/model.h"
#include "util/err.h"
#include "util/threadpool.h"

enum { PHASE_QUEUED, PHASE_PROMPT, PHASE_GEN, PHASE_DONE };

#define SAMPLE_POOL_MIN 4 /* rows of a step from which the sampling workers take them */
#define SAMPLE_THREADS_MAX 8

struct ob_req {
    ob_sched_t *s;
    atomic_int refs;             /* scheduler + reader */
    atomic_int cancel;
    /* parameters (owned copies) */
    int32_t *prompt;             /* [n_prompt] */
    int32_t n_prompt, max_tokens, n_probs, n_bias, min_tokens;
    int logprobs;                /* report log-probabilities (ob_req_params.logprobs or n_probs > 0) */
    int ignore_eos;
    ob_logit_bias *bias;         /* [n_bias] */
    ob_logits_filter_fn filter;
    ob_token_accept_fn accept;
    void *filter_user;
    ob_sampler_t *sampler;
    /* scheduler-thread state */
    int phase, slot;
    int32_t n_fed;               /* prompt tokens in the cache */
    int32_t n_gen;
    int32_t last;                /* sampled token not yet decoded */
    int64_t t_submit, t_start, t_first, t_last;
    ob_req_t *next;              /* wait queue */
    /* events, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ob_token_event *q;
    int q_cap, q_head, q_len, finished;
    ob_req_timings tm;
    char err[256];
};

typedef struct {
    ob_req_t *req;               /* NULL when free */
    int32_t *cached;             /* [n_ctx] token ids in this slot's KV cache */
    int32_t n_cached;
    int64_t last_used;
} slot_t;

struct ob_sched {
    ob_model_t *m;
    ob_ctx_t *ctx;
    int n_slots, n_ctx, n_batch, max_queue, n_vocab;
    slot_t *slots;               /* [n_slots] */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;          /* queue, stop, slot info */
    pthread_cond_t cv;
    int stop;
    ob_req_t *queue_head, *queue_tail;
    int n_queued;
    int64_t tick;
    /* batch scratch, [n_batch] */
    int32_t *b_tok, *b_pos, *b_seq;
    int8_t *b_want;
    int32_t *out_slot;           /* slot of each logits row */
    int n_out;                   /* logits rows of the step */
    ob_token_event *out_ev;      /* [n_batch] each row's sampled token (and its logprobs) */
    ob_pool *pool;               /* sampling workers (NULL: the scheduler thread samples) */
    float *work;                 /* [pool size][n_vocab] logits after bias and filter, one row a worker */
    int32_t *eog;                /* [n_eog] end-of-generation token ids (masked for ignore_eos) */
    int n_eog;
};

static double ms_since(int64_t t0) { return (ob_time_us() - t0) / 1000.0; }

ob_sched_params ob_sched_default_params(void) {
    ob_sched_params p = {1, 0, 512, 256};
    return p;
}

/* ---- request events ----------------------------------------------------------------------- */
static void push_event(ob_req_t *r, const ob_token_event *ev) {
    pthread_mutex_lock(&r->mu);
    if (r->q_len == r->q_cap) {
        int cap = r->q_cap ? 2 * r->q_cap : 16;
        ob_token_event *nq = malloc((size_t)cap * sizeof *nq);
        if (!nq) { /* keep the old queue; the reader sees the request end */
            r->finished = 1;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return;
        }
        for (int i = 0; i < r->q_len; i++) nq[i] = r->q[(r->q_head + i) % r->q_cap];
        free(r->q);
        r->q = nq;
        r->q_cap = cap;
        r->q_head = 0;
    }
    r->q[(r->q_head + r->q_len) % r->q_cap] = *ev;
    r->q_len++;
    if (ev->finish != OB_FINISH_NONE) r->finished = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void req_release(ob_req_t *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    ob_sampler_free(r->sampler);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->q);
    free(r->prompt);
    free(r->bias);
    free(r);
}

/* Ends a request on the scheduler thread: final event, timings, slot freed (its cache kept for
 * prefix reuse), scheduler reference dropped. */
static void finish(ob_sched_t *s, ob_req_t *r, ob_finish why, const ob_token_event *with_token) {
    ob_token_event ev;
    if (with_token) {
        ev = *with_token;
    } else {
        memset(&ev, 0, sizeof ev);
        ev.token = -1;
    }
    ev.finish = why;
    pthread_mutex_lock(&r->mu);
    r->tm.predicted_n = r->n_gen;
    r->tm.predicted_ms = r->t_first ? (r->t_last - r->t_first) / 1000.0 : 0;
    if (r->tm.prompt_ms == 0 && r->t_start) r->tm.prompt_ms = ms_since(r->t_start);
    pthread_mutex_unlock(&r->mu);
    r->phase = PHASE_DONE;
    if (r->slot >= 0) {
        pthread_mutex_lock(&s->mu);
        s->slots[r->slot].req = NULL;
        s->slots[r->slot].last_used = ++s->tick;
        pthread_mutex_unlock(&s->mu);
    }
    push_event(r, &ev);
    req_release(r);
}

/* ---- slots ------------------------------------------------------------------------------- */
static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Moves queued requests into free slots: the slot sharing the longest prefix with the prompt,
 * else the least recently used. Called with s->mu held. */
static void assign_slots(ob_sched_t *s) {
    while (s->queue_head) {
        int best = -1;
        int32_t best_len = -1;
        ob_req_t *r = s->queue_head;
        for (int i = 0; i < s->n_slots; i++) {
            if (s->slots[i].req) continue;
            int32_t l = common_prefix(s->slots[i].cached, s->slots[i].n_cached, r->prompt, r->n_prompt);
            if (l > best_len || (l == best_len && s->slots[i].last_used < s->slots[best].last_used)) {
                best = i;
                best_len = l;
            }
        }
        if (best < 0) return;
        s->queue_head = r->next;
        if (!s->queue_head) s->queue_tail = NULL;
        s->n_queued--;
        slot_t *sl = &s->slots[best];
        /* Keep the shared prefix, but always recompute the prompt's last token: its logits
         * give the first generated token. */
        int32_t keep = best_len < r->n_prompt - 1 ? best_len : r->n_prompt - 1;
        ob_kv_seq_truncate(s->ctx, best, keep);
        sl->n_cached = keep;
        sl->req = r;
        r->slot = best;
        r->n_fed = keep;
        r->phase = PHASE_PROMPT;
        pthread_mutex_lock(&r->mu);
        r->tm.slot = best;
        r->tm.cache_n = keep;
        r->tm.prompt_n = r->n_prompt - keep;
        r->tm.queued_ms = ms_since(r->t_submit);
        pthread_mutex_unlock(&r->mu);
    }
}

/* ---- one step ---------------------------------------------------------------------------- */
/* Log-probabilities of the chosen token and the n most likely ones, from raw logits. */
static void fill_logprobs(const float *logits, int32_t n_vocab, ob_token_event *ev, int n) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    ev->logprob = logits[ev->token] - lse;
    ev->n_probs = n;
    for (int k = 0; k < n; k++) { ev->top_tokens[k] = -1; ev->top_logprobs[k] = -INFINITY; }
    for (int32_t i = 0; i < n_vocab && n > 0; i++) {
        float v = logits[i];
        if (ev->top_tokens[n - 1] >= 0 && v <= logits[ev->top_tokens[n - 1]]) continue;
        int k = n - 1;
        while (k > 0 && (ev->top_tokens[k - 1] < 0 || v > logits[ev->top_tokens[k - 1]])) {
            ev->top_tokens[k] = ev->top_tokens[k - 1];
            k--;
        }
        ev->top_tokens[k] = i;
    }
    for (int k = 0; k < n; k++) ev->top_logprobs[k] = ev->top_tokens[k] >= 0 ? logits[ev->top_tokens[k]] - lse : -INFINITY;
}

/* Samples the next token of r from its logits row into ev (with its logprobs when asked); work:
 * a scratch row of n_vocab. Touches r's sampler, filter and bias only, so requests can be
 * sampled on different threads at once. */
static void sample_row(const ob_sched_t *s, ob_req_t *r, const float *logits, float *work, ob_token_event *ev) {
    /* ignore_eos: end-of-generation tokens are never chosen (llama-server does the same), so
     * the text goes on instead of printing end markers; min_tokens: the same until that many. */
    const int mask_eog = r->ignore_eos || r->n_gen < r->min_tokens;
    const float *row = logits; /* the sampler reads the row in place unless something edits it */
    if (r->n_bias || mask_eog || r->filter) {
        memcpy(work, logits, (size_t)s->n_vocab * sizeof(float));
        for (int i = 0; i < r->n_bias; i++) work[r->bias[i].token] += r->bias[i].bias;
        if (mask_eog)
            for (int i = 0; i < s->n_eog; i++) work[s->eog[i]] = -INFINITY;
        if (r->filter) r->filter(r->filter_user, work, s->n_vocab);
        row = work;
    }
    int32_t t = ob_sampler_sample(r->sampler, row);
    if (t < 0 || t >= s->n_vocab) t = 0;
    ob_sampler_accept(r->sampler, t);
    if (r->accept) r->accept(r->filter_user, t);
    memset(ev, 0, sizeof *ev);
    ev->token = t;
    if (r->logprobs) fill_logprobs(logits, s->n_vocab, ev, r->n_probs); /* O(n_vocab) exp: only when asked */
}

/* Worker ith of nth samples rows ith, ith + nth, ... of the step (ctx: the scheduler). */
static void sample_rows(void *ctx, int ith, int nth) {
    ob_sched_t *s = ctx;
    for (int j = ith; j < s->n_out; j += nth) {
        ob_req_t *r = s->slots[s->out_slot[j]].req;
        if (r) sample_row(s, r, ob_get_logits(s->ctx, j), s->work + (size_t)ith * s->n_vocab, &s->out_ev[j]);
    }
}

/* Emits r's sampled token ev; decides whether r goes on. */
static void on_token(ob_sched_t *s, ob_req_t *r, ob_token_event *ev) {
    const ob_tokenizer_t *tok = ob_model_tokenizer(s->m);
    const int32_t t = ev->token;
    int64_t now = ob_time_us();
    if (r->n_gen == 0) {
        r->t_first = now;
        pthread_mutex_lock(&r->mu);
        r->tm.prompt_ms = (now - r->t_start) / 1000.0;
        pthread_mutex_unlock(&r->mu);
    }
    r->t_last = now;
    r->n_gen++;
    slot_t *sl = &s->slots[r->slot];
    if (!r->ignore_eos && ob_tokenizer_is_eog(tok, t)) { finish(s, r, OB_FINISH_STOP, ev); return; }
    if (r->max_tokens > 0 && r->n_gen >= r->max_tokens) { finish(s, r, OB_FINISH_LENGTH, ev); return; }
    if (sl->n_cached + 1 >= s->n_ctx) { finish(s, r, OB_FINISH_CONTEXT, ev); return; }
    push_event(r, ev);
    r->last = t;
    r->phase = PHASE_GEN;
}

/* Builds and runs one batch. Returns 0 if there was nothing to do. */
static int step(ob_sched_t *s) {
    int n = 0, n_out = 0;
    /* Cancelled requests leave first; then one token per generating slot. */
    for (int i = 0; i < s->n_slots; i++) {
        ob_req_t *r = s->slots[i].req;
        if (r && atomic_load(&r->cancel)) finish(s, r, OB_FINISH_CANCELLED, NULL);
    }
    for (int i = 0; i < s->n_slots && n < s->n_batch; i++) {
        ob_req_t *r = s->slots[i].req;
        if (!r || r->phase != PHASE_GEN) continue;
        s->b_tok[n] = r->last;
        s->b_pos[n] = s->slots[i].n_cached;
        s->b_seq[n] = i;
        s->b_want[n] = 1;
        s->out_slot[n_out++] = i;
        n++;
    }
    /* Prompt chunks fill what is left, slot by slot. */
    for (int i = 0; i < s->n_slots && n < s->n_batch; i++) {
        ob_req_t *r = s->slots[i].req;
        if (!r || r->phase != PHASE_PROMPT) continue;
        if (!r->t_start) r->t_start = ob_time_us();
        int32_t left = r->n_prompt - r->n_fed, take = s->n_batch - n < left ? s->n_batch - n : left;
        for (int32_t k = 0; k < take; k++) {
            s->b_tok[n] = r->prompt[r->n_fed + k];
            s->b_pos[n] = r->n_fed + k;
            s->b_seq[n] = i;
            s->b_want[n] = r->n_fed + k == r->n_prompt - 1;
            if (s->b_want[n]) s->out_slot[n_out++] = i;
            n++;
        }
    }
    if (n == 0) return 0;
    ob_batch b = {n, s->b_tok, s->b_pos, s->b_seq, s->b_want};
    char err[256];
    int rc = ob_decode(s->ctx, &b, err, sizeof err);
    /* Book-keeping of what entered each slot's cache (under mu: ob_sched_slot_info reads n_cached). */
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < n; k++) {
        slot_t *sl = &s->slots[s->b_seq[k]];
        if (rc == 0) sl->cached[s->b_pos[k]] = s->b_tok[k];
        if (rc == 0 && s->b_pos[k] + 1 > sl->n_cached) sl->n_cached = s->b_pos[k] + 1;
        ob_req_t *r = sl->req;
        if (r && r->phase == PHASE_PROMPT && rc == 0 && s->b_pos[k] + 1 > r->n_fed) r->n_fed = s->b_pos[k] + 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        for (int k = 0; k < n; k++) {
            slot_t *sl = &s->slots[s->b_seq[k]];
            ob_req_t *r = sl->req;
            if (!r) continue;
            snprintf(r->err, sizeof r->err, "%s", err);
            ob_kv_seq_truncate(s->ctx, s->b_seq[k], 0);
            pthread_mutex_lock(&s->mu);
            sl->n_cached = 0;
            pthread_mutex_unlock(&s->mu);
            finish(s, r, OB_FINISH_ERROR, NULL);
        }
        return 1;
    }
    /* the rows' sampling on the workers from SAMPLE_POOL_MIN rows (fewer: waking them costs more) */
    s->n_out = n_out;
    if (s->pool && n_out >= SAMPLE_POOL_MIN) ob_pool_run(s->pool, sample_rows, s);
    else sample_rows(s, 0, 1);
    for (int j = 0; j < n_out; j++) {
        ob_req_t *r = s->slots[s->out_slot[j]].req;
        if (r) on_token(s, r, &s->out_ev[j]);
    }
    return 1;
}

static void *sched_main(void *arg) {
    ob_sched_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (s->stop) break;
            assign_slots(s);
            int active = 0;
            for (int i = 0; i < s->n_slots; i++) active |= s->slots[i].req != NULL;
            if (active) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) return NULL;
        step(s);
    }
}

/* Sampling workers: OB_SAMPLE_THREADS when set (1: none), else none on the CPU backend (its own
 * workers spin between ops, and a CPU forward pass dwarfs the sampling), and half the cores, at
 * most SAMPLE_THREADS_MAX, beside a GPU: one row of a 128K vocabulary takes 0.04-0.06 ms
 * (llama.cpp's default chain), 2.5-3.8 ms for a step of 64 streams on one thread. */
static int sample_threads(const ob_model_t *m) {
    const char *e = getenv("OB_SAMPLE_THREADS");
    if (e && *e) {
        const int v = atoi(e);
        return v < 1 ? 1 : v > 64 ? 64 : v;
    }
    if (m->be->host) return 1;
    cpu_set_t cs; /* the cores this process may use (affinity, cpuset), else all online */
    const long n = (sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : sysconf(_SC_NPROCESSORS_ONLN)) / 2;
    return n < 1 ? 1 : n > SAMPLE_THREADS_MAX ? SAMPLE_THREADS_MAX : (int)n;
}

/* ---- public ---------------------------------------------------------------------------- */
int ob_sched_new(ob_model_t *m, const ob_sched_params *p, ob_sched_t **out, char *err, size_t errlen) {
    *out = NULL;
    ob_sched_params dp = ob_sched_default_params();
    if (!p) p = &dp;
    ob_sched_t *s = calloc(1, sizeof *s);
    if (!s) return ERR("scheduler: out of memory");
    s->m = m;
    s->n_slots = p->n_slots > 0 ? p->n_slots : 1;
    s->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    s->max_queue = p->max_queue > 0 ? p->max_queue : 256;
    if (s->n_batch < s->n_slots) s->n_batch = s->n_slots; /* every slot can decode each step */
    ob_ctx_params cp = {p->n_ctx, s->n_slots, s->n_batch, OB_KV_F16, OB_KV_F16};
    if (ob_ctx_new(m, &cp, &s->ctx, err, errlen)) { free(s); return -1; }
    s->n_ctx = ob_ctx_n_ctx(s->ctx);
    s->n_vocab = ob_model_get_info(m)->n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->b_tok = malloc((size_t)s->n_batch * sizeof(int32_t));
    s->b_pos = malloc((size_t)s->n_batch * sizeof(int32_t));
    s->b_seq = malloc((size_t)s->n_batch * sizeof(int32_t));
    s->b_want = malloc((size_t)s->n_batch);
    s->out_slot = malloc((size_t)s->n_batch * sizeof(int32_t));
    s->out_ev = malloc((size_t)s->n_batch * sizeof(ob_token_event));
    const int nth = sample_threads(m);
    if (nth > 1) s->pool = ob_pool_new(nth); /* NULL: the scheduler thread samples */
    ob_pool_set_spin(s->pool, 100000); /* one job a step, milliseconds apart: poll 0.1 ms, then sleep */
    s->work = malloc((size_t)ob_pool_size(s->pool) * s->n_vocab * sizeof(float));
    s->eog = malloc((size_t)s->n_vocab * sizeof(int32_t));
    for (int32_t t = 0; s->eog && t < s->n_vocab; t++)
        if (ob_tokenizer_is_eog(ob_model_tokenizer(m), t)) s->eog[s->n_eog++] = t;
    int ok = s->eog && s->slots && s->b_tok && s->b_pos && s->b_seq && s->b_want && s->out_slot && s->out_ev && s->work;
    for (int i = 0; ok && i < s->n_slots; i++) ok = (s->slots[i].cached = malloc((size_t)s->n_ctx * sizeof(int32_t))) != NULL;
    if (ok && pthread_create(&s->thread, NULL, sched_main, s) == 0) s->thread_started = 1;
    if (!ok || !s->thread_started) {
        ob_sched_free(s);
        return ERR("scheduler: out of memory or threads");
    }
    *out = s;
    return 0;
}

void ob_sched_free(ob_sched_t *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    for (int i = 0; s->slots && i < s->n_slots; i++)
        if (s->slots[i].req) finish(s, s->slots[i].req, OB_FINISH_CANCELLED, NULL);
    while (s->queue_head) {
        ob_req_t *r = s->queue_head;
        s->queue_head = r->next;
        r->slot = -1;
        finish(s, r, OB_FINISH_CANCELLED, NULL);
    }
    for (int i = 0; s->slots && i < s->n_slots; i++) free(s->slots[i].cached);
    free(s->slots);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->out_slot);
    free(s->out_ev);
    ob_pool_free(s->pool);
    free(s->work);
    free(s->eog);
    ob_ctx_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int32_t ob_sched_n_ctx(const ob_sched_t *s) { return s->n_ctx; }
int32_t ob_sched_n_slots(const ob_sched_t *s) { return s->n_slots; }

void ob_sched_slot_info(ob_sched_t *s, int32_t i, int *busy, int32_t *n_cached) {
    *busy = 0;
    *n_cached = 0;
    if (i < 0 || i >= s->n_slots) return;
    pthread_mutex_lock(&s->mu);
    *busy = s->slots[i].req != NULL;
    *n_cached = s->slots[i].n_cached;
    pthread_mutex_unlock(&s->mu);
}

ob_req_t *ob_sched_submit(ob_sched_t *s, const ob_req_params *p, char *err, size_t errlen) {
    if (!p || !p->prompt || p->n_prompt < 1) { ERR("the prompt is empty"); return NULL; }
    if (p->n_prompt >= s->n_ctx) {
        ERR("the request exceeds the available context size: the prompt has %d tokens, the context holds %d",
            p->n_prompt, s->n_ctx);
        return NULL;
    }
    if (p->n_probs < 0 || p->n_probs > OB_MAX_PROBS) { ERR("n_probs must be 0..%d", OB_MAX_PROBS); return NULL; }
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->n_vocab) { ERR("prompt token %d is outside the vocabulary", p->prompt[i]); return NULL; }
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= s->n_vocab) {
            ERR("logit_bias token %d is outside the vocabulary", p->logit_bias[i].token);
            return NULL;
        }
    ob_req_t *r = calloc(1, sizeof *r);
    if (!r) { ERR("out of memory"); return NULL; }
    r->s = s;
    atomic_init(&r->refs, 2);
    r->slot = -1;
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->n_probs = p->n_probs;
    r->logprobs = p->logprobs || p->n_probs > 0;
    r->ignore_eos = p->ignore_eos;
    r->min_tokens = p->min_tokens;
    r->filter = p->filter;
    r->accept = p->accept;
    r->filter_user = p->filter_user;
    r->prompt = malloc((size_t)p->n_prompt * sizeof(int32_t));
    r->n_bias = p->n_logit_bias > 0 ? p->n_logit_bias : 0;
    r->bias = r->n_bias ? malloc((size_t)r->n_bias * sizeof *r->bias) : NULL;
    r->sampler = ob_sampler_new(&p->sampling, s->n_vocab);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (!r->prompt || (r->n_bias && !r->bias) || !r->sampler) {
        ERR(!r->sampler ? "invalid sampling parameters" : "out of memory");
        atomic_store(&r->refs, 1);
        req_release(r);
        return NULL;
    }
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    if (r->n_bias) memcpy(r->bias, p->logit_bias, (size_t)r->n_bias * sizeof *r->bias);
    r->tm.n_prompt = p->n_prompt;
    r->tm.slot = -1;
    r->t_submit = ob_time_us();
    pthread_mutex_lock(&s->mu);
    if (s->n_queued >= s->max_queue || s->stop) {
        pthread_mutex_unlock(&s->mu);
        ERR(s->stop ? "the scheduler is shutting down" : "queue is full (%d requests waiting)", s->n_queued);
        atomic_store(&r->refs, 1);
        req_release(r);
        return NULL;
    }
    if (s->queue_tail) s->queue_tail->next = r;
    else s->queue_head = r;
    s->queue_tail = r;
    s->n_queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return r;
}

int ob_req_next(ob_req_t *r, ob_token_event *ev, int timeout_ms) {
    pthread_mutex_lock(&r->mu);
    if (r->q_len == 0 && !r->finished && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (r->q_len == 0 && !r->finished) pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            while (r->q_len == 0 && !r->finished)
                if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
        }
    }
    int rc;
    if (r->q_len > 0) {
        *ev = r->q[r->q_head];
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
        rc = 1;
    } else {
        rc = r->finished ? -1 : 0;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void ob_req_cancel(ob_req_t *r) {
    if (!r) return;
    atomic_store(&r->cancel, 1);
    ob_sched_t *s = r->s;
    /* A queued request is removed at once; a running one leaves at the next step. */
    pthread_mutex_lock(&s->mu);
    ob_req_t **pp = &s->queue_head, *prev = NULL;
    while (*pp && *pp != r) { prev = *pp; pp = &(*pp)->next; }
    int was_queued = *pp == r;
    if (was_queued) {
        *pp = r->next;
        if (s->queue_tail == r) s->queue_tail = prev;
        s->n_queued--;
    }
    pthread_mutex_unlock(&s->mu);
    if (was_queued) finish(s, r, OB_FINISH_CANCELLED, NULL);
}

void ob_req_get_timings(ob_req_t *r, ob_req_timings *t) {
    pthread_mutex_lock(&r->mu);
    *t = r->tm;
    pthread_mutex_unlock(&r->mu);
}

const char *ob_req_error(ob_req_t *r) { return r->err; }

void ob_req_free(ob_req_t *r) {
    if (!r) return;
    int done;
    pthread_mutex_lock(&r->mu);
    done = r->finished;
    pthread_mutex_unlock(&r->mu);
    if (!done) ob_req_cancel(r);
    req_release(r);
}
