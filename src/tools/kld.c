/* kld.c — KL divergence of a model against a base model's saved token distributions, for
 * `1bit perplexity --kl-divergence-base FILE [--kl-divergence]` (the method of llama.cpp's
 * llama-perplexity, in a compact file of 1bit's own, docs/kld.md).
 *
 * Owns: the .kld file (writing the base model's distributions, reading them back), the
 * per-token comparison and the report's statistics. Does not own: chunking text and running
 * the model (perplexity.c calls ob_kld_token for every scored position).
 *
 * File (little-endian):
 *   header, 64 bytes: char magic[8] "1BITKLD\0"; u32 version (1); u32 n_vocab; u32 top_k (K);
 *     u32 n_ctx; u32 n_chunks; u32 flags (bit 0: --score-all, bit 1: chunks start with BOS);
 *     u64 n_records; 24 bytes of zeros.
 *   n_records records, one per scored position in scoring order, 12 + 8K bytes each:
 *     u32 next (the token that follows); f32 logp_next (its log-probability);
 *     f32 p_rest (1 - the summed probabilities of the K tokens below);
 *     K x {u32 id; f32 logp}: the K most probable tokens, most probable first.
 * Log-probabilities are log-softmax of the logits, computed in double and stored as float.
 *
 * KL(base || model) per position = sum over the K tokens of p (log p - log q) + p_rest (log
 * p_rest - log q_rest), q_rest being the model's mass outside those K tokens. Lumping the
 * other tokens into one bucket can only lower the divergence (log-sum inequality), so this is
 * a lower bound of the full-vocabulary KL that is exact when K >= n_vocab, and off by at most
 * p_rest times the divergence inside the tail otherwise. A model against itself gives exactly
 * 0: both sides compute every stored number the same way.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"

#define KLD_MAGIC "1BITKLD"
#define KLD_HEADER 64

struct ob_kld {
    FILE *f;
    int writing;
    uint32_t n_vocab, top_k, n_ctx, n_chunks, flags;
    uint64_t n_records, at;    /* records in the file / handled so far */
    unsigned char *rec;        /* [12 + 8K] one record */
    double *lp;                /* [n_vocab] log-probabilities of the current token */
    uint32_t *heap;            /* [K] ids, for the top-K selection */
    /* statistics (comparing) */
    double *kl;                /* [cap] per-position KL */
    size_t cap;
    double nll, nll_base, dnll_sq, dp, dp_sq;
    long same_top;
};

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_f32(unsigned char *p, float v) { memcpy(p, &v, 4); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static float get_f32(const unsigned char *p) { float v; memcpy(&v, p, 4); return v; }

static size_t rec_size(const ob_kld_t *k) { return 12 + 8 * (size_t)k->top_k; }

static int alloc_work(ob_kld_t *k) {
    k->rec = malloc(rec_size(k));
    k->lp = malloc((size_t)k->n_vocab * sizeof *k->lp);
    k->heap = malloc((size_t)k->top_k * sizeof *k->heap);
    return k->rec && k->lp && k->heap ? 0 : -1;
}

void ob_kld_close(ob_kld_t *k) {
    if (!k) return;
    if (k->f) fclose(k->f);
    free(k->rec);
    free(k->lp);
    free(k->heap);
    free(k->kl);
    free(k);
}

static int write_header(ob_kld_t *k) {
    unsigned char h[KLD_HEADER] = {0};
    memcpy(h, KLD_MAGIC, 8);
    put_u32(h + 8, 1);
    put_u32(h + 12, k->n_vocab);
    put_u32(h + 16, k->top_k);
    put_u32(h + 20, k->n_ctx);
    put_u32(h + 24, k->n_chunks);
    put_u32(h + 28, k->flags);
    memcpy(h + 32, &k->n_records, 8);
    return fseek(k->f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, k->f) == sizeof h ? 0 : -1;
}

int ob_kld_create(const char *path, const ob_kld_settings *s, int n_vocab, int top_k, ob_kld_t **out, char *err,
                  size_t errlen) {
    *out = NULL;
    if (top_k < 1 || n_vocab < 1) return snprintf(err, errlen, "--kl-top-k must be >= 1"), -1;
    ob_kld_t *k = calloc(1, sizeof *k);
    if (!k) return snprintf(err, errlen, "out of memory"), -1;
    k->writing = 1;
    k->n_vocab = (uint32_t)n_vocab;
    k->top_k = (uint32_t)(top_k < n_vocab ? top_k : n_vocab);
    k->n_ctx = (uint32_t)s->n_ctx;
    k->n_chunks = (uint32_t)s->n_chunks;
    k->flags = (s->score_all ? 1u : 0u) | (s->bos ? 2u : 0u);
    if (!(k->f = fopen(path, "wb")) || alloc_work(k) || write_header(k)) {
        snprintf(err, errlen, "cannot write '%s'", path);
        ob_kld_close(k);
        return -1;
    }
    *out = k;
    return 0;
}

int ob_kld_open(const char *path, ob_kld_settings *s, ob_kld_t **out, char *err, size_t errlen) {
    *out = NULL;
    ob_kld_t *k = calloc(1, sizeof *k);
    unsigned char h[KLD_HEADER];
    if (!k) return snprintf(err, errlen, "out of memory"), -1;
    if (!(k->f = fopen(path, "rb"))) {
        snprintf(err, errlen, "cannot open the KL base file '%s'", path);
        ob_kld_close(k);
        return -1;
    }
    int ok = fread(h, 1, sizeof h, k->f) == sizeof h && memcmp(h, KLD_MAGIC, 8) == 0;
    if (ok) {
        k->n_vocab = get_u32(h + 12);
        k->top_k = get_u32(h + 16);
        k->n_ctx = get_u32(h + 20);
        k->n_chunks = get_u32(h + 24);
        k->flags = get_u32(h + 28);
        memcpy(&k->n_records, h + 32, 8);
    }
    long long want = 0;
    if (ok && fseek(k->f, 0, SEEK_END) == 0) want = ftell(k->f);
    if (!ok || get_u32(h + 8) != 1 || k->n_vocab < 1 || k->n_vocab > (1u << 24) || k->top_k < 1 ||
        k->top_k > k->n_vocab || k->n_ctx < 4 || k->n_records > (1ull << 40) ||
        (unsigned long long)want != KLD_HEADER + k->n_records * rec_size(k)) {
        snprintf(err, errlen, "'%s' is not a complete 1bit KL base file (version 1; made by --kl-divergence-base without --kl-divergence)", path);
        ob_kld_close(k);
        return -1;
    }
    fseek(k->f, KLD_HEADER, SEEK_SET);
    if (alloc_work(k) || !(k->kl = malloc((size_t)(k->n_records ? k->n_records : 1) * sizeof *k->kl))) {
        snprintf(err, errlen, "out of memory for '%s'", path);
        ob_kld_close(k);
        return -1;
    }
    k->cap = (size_t)k->n_records;
    s->n_ctx = (int)k->n_ctx;
    s->n_chunks = (int)k->n_chunks;
    s->score_all = (k->flags & 1) != 0;
    s->bos = (k->flags & 2) != 0;
    *out = k;
    return 0;
}

/* log-softmax of logits[n] into lp, in double. */
static void log_softmax(const float *logits, int n, double *lp) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < n; v++) if (logits[v] > mx) mx = logits[v];
    for (int v = 0; v < n; v++) sum += exp((double)logits[v] - mx);
    double lz = mx + log(sum);
    for (int v = 0; v < n; v++) lp[v] = (double)logits[v] - lz;
}

/* Min-heap on lp of the K best ids (ties: lower id wins, for a deterministic order). */
static int worse(const double *lp, uint32_t a, uint32_t b) { return lp[a] < lp[b] || (lp[a] == lp[b] && a > b); }

static void sift_down(uint32_t *h, int n, int i, const double *lp) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(lp, h[l], h[m])) m = l;
        if (r < n && worse(lp, h[r], h[m])) m = r;
        if (m == i) return;
        uint32_t t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

static void top_k(ob_kld_t *k) {
    int K = (int)k->top_k, n = 0;
    uint32_t *h = k->heap;
    for (uint32_t v = 0; v < k->n_vocab; v++) {
        if (n < K) {
            h[n++] = v;
            if (n == K)
                for (int i = K / 2 - 1; i >= 0; i--) sift_down(h, K, i, k->lp);
        } else if (worse(k->lp, h[0], v)) {
            h[0] = v;
            sift_down(h, K, 0, k->lp);
        }
    }
    /* heap -> most probable first */
    for (int end = K - 1; end > 0; end--) {
        uint32_t t = h[0]; h[0] = h[end]; h[end] = t;
        sift_down(h, end, 0, k->lp);
    }
}

/* 1 - the summed probabilities of K stored (float) log-probabilities, as float: both sides
 * compute it from the same floats, so a model against itself gets the same bits. */
static float rest_mass(const unsigned char *rec, uint32_t K) {
    double s = 0;
    for (uint32_t i = 0; i < K; i++) s += exp((double)get_f32(rec + 12 + 8 * i + 4));
    return (float)(s < 1 ? 1 - s : 0);
}

int ob_kld_token(void *user, const float *logits, int n_vocab, int next, char *err, size_t errlen) {
    ob_kld_t *k = user;
    if ((uint32_t)n_vocab != k->n_vocab)
        return snprintf(err, errlen, "the KL base has a vocabulary of %u tokens, this model %d", k->n_vocab, n_vocab), -1;
    log_softmax(logits, n_vocab, k->lp);
    unsigned char *rec = k->rec;
    if (k->writing) {
        top_k(k);
        put_u32(rec, (uint32_t)next);
        put_f32(rec + 4, (float)k->lp[next]);
        for (uint32_t i = 0; i < k->top_k; i++) {
            put_u32(rec + 12 + 8 * i, k->heap[i]);
            put_f32(rec + 12 + 8 * i + 4, (float)k->lp[k->heap[i]]);
        }
        put_f32(rec + 8, rest_mass(rec, k->top_k));
        if (fwrite(rec, 1, rec_size(k), k->f) != rec_size(k)) return snprintf(err, errlen, "write error on the KL base file"), -1;
        k->at++;
        return 0;
    }
    if (k->at >= k->n_records)
        return snprintf(err, errlen, "the KL base file holds %llu positions, and this run scores more", (unsigned long long)k->n_records), -1;
    if (fread(rec, 1, rec_size(k), k->f) != rec_size(k)) return snprintf(err, errlen, "read error on the KL base file"), -1;
    if (get_u32(rec) != (uint32_t)next)
        return snprintf(err, errlen, "scored position %llu is token %d here but %u in the KL base: the base was made from another text or tokenizer",
                        (unsigned long long)k->at, next, get_u32(rec)), -1;
    /* the model's log-probabilities of the base's K tokens, as float, exactly as written */
    double kl = 0;
    unsigned char *cur = k->rec; /* reuse: overwrite logp fields in place after reading p */
    for (uint32_t i = 0; i < k->top_k; i++) {
        uint32_t id = get_u32(rec + 12 + 8 * i);
        if (id >= k->n_vocab) return snprintf(err, errlen, "the KL base file is corrupt (token id %u)", id), -1;
        double lp_base = get_f32(rec + 12 + 8 * i + 4), lq = (float)k->lp[id];
        kl += exp(lp_base) * (lp_base - lq);
        put_f32(cur + 12 + 8 * i + 4, (float)lq);
    }
    double p_rest = get_f32(rec + 8), q_rest = rest_mass(cur, k->top_k);
    if (p_rest > 0) kl += p_rest * (log(p_rest) - log(q_rest > DBL_MIN ? q_rest : DBL_MIN));
    if (kl < 0) kl = 0; /* rounding of a tiny divergence; it is >= 0 */
    k->kl[k->at] = kl;
    int top_cur = 0;
    for (int v = 1; v < n_vocab; v++) if (k->lp[v] > k->lp[top_cur]) top_cur = v;
    k->same_top += (uint32_t)top_cur == get_u32(rec + 12);
    double nll = -(double)(float)k->lp[next], nll_base = -(double)get_f32(rec + 4);
    k->nll += nll;
    k->nll_base += nll_base;
    k->dnll_sq += (nll - nll_base) * (nll - nll_base);
    double dp = exp(-nll) - exp(-nll_base);
    k->dp += dp;
    k->dp_sq += dp * dp;
    k->at++;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int ob_kld_finish(ob_kld_t *k, ob_kld_report *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (k->writing) {
        k->n_records = k->at;
        if (write_header(k) || fflush(k->f)) return snprintf(err, errlen, "write error on the KL base file"), -1;
        r->n = (long)k->at;
        return 0;
    }
    if (k->at != k->n_records)
        return snprintf(err, errlen, "this run scored %llu positions, the KL base holds %llu: use the same text",
                        (unsigned long long)k->at, (unsigned long long)k->n_records), -1;
    long n = (long)k->at;
    r->n = n;
    if (n == 0) return 0;
    double sum = 0, sq = 0;
    for (long i = 0; i < n; i++) { sum += k->kl[i]; sq += k->kl[i] * k->kl[i]; }
    r->kl_mean = sum / n;
    double var = n > 1 ? (sq / n - r->kl_mean * r->kl_mean) * n / (n - 1) : 0;
    r->kl_stderr = var > 0 ? sqrt(var / n) : 0;
    qsort(k->kl, (size_t)n, sizeof *k->kl, cmp_double);
    static const double at[OB_KLD_NPCT] = {0.999, 0.99, 0.95, 0.90, 0.50, 0.10, 0.05, 0.01};
    for (int i = 0; i < OB_KLD_NPCT; i++) r->kl_pct[i] = k->kl[(long)(at[i] * (n - 1) + 0.5)];
    r->kl_max = k->kl[n - 1];
    r->kl_min = k->kl[0];
    r->same_top = (double)k->same_top / n;
    r->same_top_stderr = n > 1 ? sqrt(r->same_top * (1 - r->same_top) / (n - 1)) : 0;
    r->ppl = exp(k->nll / n);
    r->ppl_base = exp(k->nll_base / n);
    r->ln_ppl_ratio = (k->nll - k->nll_base) / n;
    double dv = n > 1 ? (k->dnll_sq / n - r->ln_ppl_ratio * r->ln_ppl_ratio) * n / (n - 1) : 0;
    r->ln_ppl_ratio_stderr = dv > 0 ? sqrt(dv / n) : 0;
    r->dp_mean = k->dp / n;
    r->dp_rms = sqrt(k->dp_sq / n);
    return 0;
}

void ob_kld_print(FILE *out, const ob_kld_report *r, int json) {
    static const char *names[OB_KLD_NPCT] = {"99.9%", "99.0%", "95.0%", "90.0%", "Median", "10.0%", "5.0%", "1.0%"};
    static const char *keys[OB_KLD_NPCT] = {"p99_9", "p99", "p95", "p90", "median", "p10", "p5", "p1"};
    if (json) {
        fprintf(out, "{\"positions\": %ld, \"kld_mean\": %.9g, \"kld_stderr\": %.9g, \"kld_max\": %.9g, \"kld_min\": %.9g", r->n,
                r->kl_mean, r->kl_stderr, r->kl_max, r->kl_min);
        for (int i = 0; i < OB_KLD_NPCT; i++) fprintf(out, ", \"kld_%s\": %.9g", keys[i], r->kl_pct[i]);
        fprintf(out, ", \"same_top\": %.9g, \"same_top_stderr\": %.9g, \"ppl\": %.9g, \"ppl_base\": %.9g, \"ln_ppl_ratio\": %.9g, "
                     "\"ln_ppl_ratio_stderr\": %.9g, \"dp_mean\": %.9g, \"dp_rms\": %.9g}\n",
                r->same_top, r->same_top_stderr, r->ppl, r->ppl_base, r->ln_ppl_ratio, r->ln_ppl_ratio_stderr, r->dp_mean,
                r->dp_rms);
        return;
    }
    fprintf(out, "====== Perplexity statistics (%ld positions) ======\n", r->n);
    fprintf(out, "PPL(Q)                    : %10.6f\n", r->ppl);
    fprintf(out, "PPL(base)                 : %10.6f\n", r->ppl_base);
    fprintf(out, "ln(PPL(Q)/PPL(base))      : %10.6f +/- %.6f\n", r->ln_ppl_ratio, r->ln_ppl_ratio_stderr);
    fprintf(out, "====== KL divergence statistics ======\n");
    fprintf(out, "Mean    KLD: %12.6f +/- %.6f\n", r->kl_mean, r->kl_stderr);
    fprintf(out, "Maximum KLD: %12.6f\n", r->kl_max);
    for (int i = 0; i < OB_KLD_NPCT; i++) fprintf(out, "%-7s KLD: %12.6f\n", names[i], r->kl_pct[i]);
    fprintf(out, "Minimum KLD: %12.6f\n", r->kl_min);
    fprintf(out, "====== Token probability statistics ======\n");
    fprintf(out, "Mean    dp : %+10.4f %%\n", 100 * r->dp_mean);
    fprintf(out, "RMS     dp : %10.4f %%\n", 100 * r->dp_rms);
    fprintf(out, "Same top p : %10.4f +/- %.4f %%\n", 100 * r->same_top, 100 * r->same_top_stderr);
}
