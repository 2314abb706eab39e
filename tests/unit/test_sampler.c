/* test_sampler.c — the sampler chain against hand-made logits and a brute-force reference.
 *
 * Owns: greedy and tie rules, NaN/inf handling, top-k / top-p / min-p filtering (checked both
 * on crafted cases and, statistically, against a full-sort reference that follows llama.cpp's
 * chain literally), penalties, seeding and reset, and the empirical distribution at
 * temperature 1 against softmax. Statistical checks use tolerances of several standard
 * deviations, so they fail on a wrong formula but not by chance.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sampler.h"
#include "test.h"

static ob_sampler_params plain_params(float temp, uint64_t seed) {
    ob_sampler_params p = ob_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

/* Deterministic test data (independent of the sampler's RNG). */
static uint64_t lcg_state;
static double lcg_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}

/* ---- brute-force reference: llama.cpp's chain, full sort, double precision ------------ */

static const float *ref_logits;
static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (ref_logits[i] != ref_logits[j]) return ref_logits[i] > ref_logits[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* Probability of each token (out[V]) under top_k, top_p, min_p, temp; no penalties. */
static void ref_dist(const float *l, int32_t V, const ob_sampler_params *p, double *out) {
    int32_t *idx = malloc((size_t)V * sizeof *idx);
    double *pr = malloc((size_t)V * sizeof *pr);
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (l[i] > -INFINITY) idx[n++] = i;
    ref_logits = l;
    qsort(idx, (size_t)n, sizeof *idx, ref_cmp);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double z = 0, mx = l[idx[0]];
    for (int32_t j = 0; j < n; j++) z += pr[j] = exp(l[idx[j]] - mx);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int32_t j = 0; j < n; j++) {
            cum += pr[j] / z;
            if (cum >= p->top_p) { n = j + 1; break; }
        }
    }
    if (p->min_p > 0.0f) {
        int32_t k = 1;
        while (k < n && pr[k] >= p->min_p * pr[0]) k++;
        n = k;
    }
    memset(out, 0, (size_t)V * sizeof *out);
    z = 0;
    for (int32_t j = 0; j < n; j++) z += out[idx[j]] = exp((l[idx[j]] - mx) / p->temp);
    for (int32_t j = 0; j < n; j++) out[idx[j]] /= z;
    free(idx);
    free(pr);
}

/* Draws n tokens; returns the total variation distance of the empirical distribution from
 * want[V]; *outside counts draws of tokens with want == 0. */
static double draw_tv(ob_sampler_t *s, const float *l, int32_t V, const double *want, int n,
                      int *outside) {
    int *hist = calloc((size_t)V, sizeof *hist);
    *outside = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = ob_sampler_sample(s, l);
        if (t < 0 || t >= V) { (*outside)++; continue; }
        hist[t]++;
        if (want[t] == 0.0) (*outside)++;
    }
    double tv = 0;
    for (int32_t i = 0; i < V; i++) tv += fabs((double)hist[i] / n - want[i]);
    free(hist);
    return tv / 2;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_greedy(void) {
    ob_sampler_params p = plain_params(0.0f, 1);
    ob_sampler_t *s = ob_sampler_new(&p, 4);
    CHECK(s != NULL);
    if (!s) return;
    float a[4] = {0.1f, 2.0f, -1.0f, 1.9f};
    CHECK_EQ_INT(ob_sampler_sample(s, a), 1);
    float ties[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, ties), 1);
    float ties2[4] = {5.0f, 3.0f, 5.0f, 5.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, ties2), 0);
    float nan_[4] = {NAN, 1.0f, NAN, 0.5f};
    CHECK_EQ_INT(ob_sampler_sample(s, nan_), 1);
    float inf_[4] = {1.0f, 2.0f, INFINITY, 0.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, inf_), 2);
    float ninf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(ob_sampler_sample(s, ninf), 0);
    float allnan[4] = {NAN, NAN, NAN, NAN};
    CHECK_EQ_INT(ob_sampler_sample(s, allnan), 0);
    float neg[4] = {-7.0f, -3.0f, -INFINITY, -3.5f};
    CHECK_EQ_INT(ob_sampler_sample(s, neg), 1);
    /* the logits are not modified */
    float copy[4];
    memcpy(copy, nan_, sizeof copy);
    ob_sampler_sample(s, nan_);
    CHECK(memcmp(copy, nan_, sizeof copy) == 0);
    ob_sampler_free(s);

    /* negative temp is greedy too */
    p.temp = -1.0f;
    s = ob_sampler_new(&p, 4);
    CHECK_EQ_INT(ob_sampler_sample(s, a), 1);
    ob_sampler_free(s);
}

static void test_bad_params(void) {
    ob_sampler_params p = plain_params(1.0f, 1);
    CHECK(ob_sampler_new(&p, 0) == NULL);
    CHECK(ob_sampler_new(&p, -5) == NULL);
    p.temp = NAN;
    CHECK(ob_sampler_new(&p, 10) == NULL);
    p = plain_params(1.0f, 1);
    p.repeat_penalty = 0.0f;
    CHECK(ob_sampler_new(&p, 10) == NULL);
    p = plain_params(1.0f, 1);
    p.penalty_last_n = -2;
    CHECK(ob_sampler_new(&p, 10) == NULL);
    p = plain_params(1.0f, 1);
    p.top_p = INFINITY;
    CHECK(ob_sampler_new(&p, 10) == NULL);
    CHECK_EQ_INT(ob_sampler_sample(NULL, NULL), -1);
    ob_sampler_free(NULL);
    ob_sampler_t *s = ob_sampler_new(NULL, 10); /* NULL params: defaults */
    CHECK(s != NULL);
    CHECK_EQ_INT(ob_sampler_sample(s, NULL), -1);
    ob_sampler_accept(s, -1); /* out of range: ignored, no crash */
    ob_sampler_accept(s, 10);
    ob_sampler_free(s);

    ob_sampler_params d = ob_sampler_default_params();
    CHECK_NEAR(d.temp, 0.8, 1e-7);
    CHECK_EQ_INT(d.top_k, 40);
    CHECK_NEAR(d.top_p, 0.95, 1e-7);
    CHECK_NEAR(d.min_p, 0.05, 1e-7);
    CHECK_NEAR(d.repeat_penalty, 1.0, 0);
    CHECK_EQ_INT(d.penalty_last_n, 64);
}

static void test_filters(void) {
    enum { V = 1000 };
    static float l[V];
    lcg_state = 7;
    for (int i = 0; i < V; i++) l[i] = (float)(lcg_uniform() * 6.0 - 3.0);
    l[417] = 3.5f; /* the argmax */

    /* top_k = 1 is greedy at any temperature */
    float temps[3] = {0.5f, 1.5f, 5.0f};
    for (int t = 0; t < 3; t++) {
        ob_sampler_params p = plain_params(temps[t], 100 + (uint64_t)t);
        p.top_k = 1;
        ob_sampler_t *s = ob_sampler_new(&p, V);
        int bad = 0;
        for (int i = 0; i < 1000; i++) bad += ob_sampler_sample(s, l) != 417;
        CHECK_EQ_INT(bad, 0);
        ob_sampler_free(s);
    }
    /* a tiny top_p keeps only the top token, with and without top-k */
    for (int k = 0; k <= 40; k += 40) {
        ob_sampler_params p = plain_params(2.0f, 5);
        p.top_p = 1e-6f;
        p.top_k = k;
        ob_sampler_t *s = ob_sampler_new(&p, V);
        int bad = 0;
        for (int i = 0; i < 1000; i++) bad += ob_sampler_sample(s, l) != 417;
        CHECK_EQ_INT(bad, 0);
        ob_sampler_free(s);
    }
    /* min_p: p(1)/p(0) = e^-0.1 kept, p(2)/p(0) = e^-2 = 0.135 < 0.5 dropped */
    {
        float m4[4] = {2.0f, 1.9f, 0.0f, -5.0f};
        ob_sampler_params p = plain_params(1.0f, 9);
        p.min_p = 0.5f;
        ob_sampler_t *s = ob_sampler_new(&p, 4);
        int hist[4] = {0};
        for (int i = 0; i < 4000; i++) hist[ob_sampler_sample(s, m4)]++;
        CHECK(hist[0] > 1500 && hist[1] > 1500);
        CHECK_EQ_INT(hist[2] + hist[3], 0);
        ob_sampler_free(s);
        /* min_p 0.1 lets token 2 in (0.135 >= 0.1) */
        p.min_p = 0.1f;
        s = ob_sampler_new(&p, 4);
        memset(hist, 0, sizeof hist);
        for (int i = 0; i < 4000; i++) hist[ob_sampler_sample(s, m4)]++;
        CHECK(hist[2] > 100);
        CHECK_EQ_INT(hist[3], 0);
        ob_sampler_free(s);
    }
    /* NaN never drawn; +inf takes all the mass; two +inf share it */
    {
        float x[5] = {NAN, 1.0f, INFINITY, 0.0f, NAN};
        ob_sampler_params p = plain_params(1.0f, 3);
        ob_sampler_t *s = ob_sampler_new(&p, 5);
        int bad = 0;
        for (int i = 0; i < 500; i++) bad += ob_sampler_sample(s, x) != 2;
        CHECK_EQ_INT(bad, 0);
        float y[5] = {INFINITY, 1.0f, INFINITY, NAN, -INFINITY};
        int hist[5] = {0};
        for (int i = 0; i < 2000; i++) hist[ob_sampler_sample(s, y)]++;
        CHECK(hist[0] > 800 && hist[2] > 800 && hist[1] == 0 && hist[3] == 0 && hist[4] == 0);
        float z[5] = {-INFINITY, NAN, -INFINITY, NAN, -INFINITY};
        CHECK_EQ_INT(ob_sampler_sample(s, z), 0);
        ob_sampler_free(s);
    }
}

static void test_penalties(void) {
    /* repeat penalty, positive logit divided: 2.0 / 1.5 = 1.33 < 1.8 */
    ob_sampler_params p = plain_params(0.0f, 1);
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 3;
    ob_sampler_t *s = ob_sampler_new(&p, 3);
    float a[3] = {2.0f, 1.8f, -1.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, a), 0);
    ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, a), 1);
    /* the penalty does not compound with repeats: 2 / 1.5 still, vs 1.8 / 1.5 = 1.2 */
    ob_sampler_accept(s, 0);
    ob_sampler_accept(s, 1);
    CHECK_EQ_INT(ob_sampler_sample(s, a), 0);
    /* window of 3: after three other tokens, 0 and 1 have left it */
    ob_sampler_accept(s, 2);
    ob_sampler_accept(s, 2);
    ob_sampler_accept(s, 2);
    float b[3] = {1.0f, 1.1f, 5.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, b), 2); /* 5 / 1.5 = 3.33 still wins */
    float b2[3] = {1.0f, 1.1f, 1.5f};
    CHECK_EQ_INT(ob_sampler_sample(s, b2), 1); /* 1.5 / 1.5 = 1.0 < 1.1; 1 is unpenalised */
    /* reset clears the history */
    ob_sampler_reset(s);
    CHECK_EQ_INT(ob_sampler_sample(s, b2), 2);
    /* negative logit multiplied: -1.0 * 1.5 = -1.5 < -1.2 */
    float n[3] = {-1.0f, -1.2f, -9.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, n), 0);
    ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, n), 1);
    ob_sampler_free(s);

    /* presence: subtracted once whatever the count */
    float c[2] = {2.0f, 1.5f};
    p = plain_params(0.0f, 1);
    p.presence_penalty = 0.4f;
    s = ob_sampler_new(&p, 2);
    for (int i = 0; i < 3; i++) ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, c), 0); /* 1.6 > 1.5 */
    ob_sampler_free(s);
    p.presence_penalty = 0.6f;
    s = ob_sampler_new(&p, 2);
    ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, c), 1); /* 1.4 < 1.5 */
    ob_sampler_free(s);

    /* frequency: subtracted per occurrence */
    p = plain_params(0.0f, 1);
    p.frequency_penalty = 0.2f;
    s = ob_sampler_new(&p, 2);
    ob_sampler_accept(s, 0);
    ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, c), 0); /* 2 - 0.4 = 1.6 */
    ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, c), 1); /* 2 - 0.6 = 1.4 */
    ob_sampler_free(s);

    /* last_n = -1: every accepted token counts, however long ago */
    p = plain_params(0.0f, 1);
    p.frequency_penalty = 0.2f;
    p.penalty_last_n = -1;
    s = ob_sampler_new(&p, 3);
    for (int i = 0; i < 3; i++) ob_sampler_accept(s, 0);
    for (int i = 0; i < 500; i++) ob_sampler_accept(s, 2);
    float d[3] = {2.0f, 1.5f, -1000.0f};
    CHECK_EQ_INT(ob_sampler_sample(s, d), 1);
    ob_sampler_free(s);
    /* last_n = 0: penalties off */
    p.penalty_last_n = 0;
    s = ob_sampler_new(&p, 3);
    for (int i = 0; i < 3; i++) ob_sampler_accept(s, 0);
    CHECK_EQ_INT(ob_sampler_sample(s, d), 0);
    ob_sampler_free(s);

    /* penalties apply before sampling too (temp > 0, top_k 1) */
    p = plain_params(1.0f, 1);
    p.top_k = 1;
    p.repeat_penalty = 2.0f;
    s = ob_sampler_new(&p, 3);
    ob_sampler_accept(s, 0);
    int bad = 0;
    for (int i = 0; i < 100; i++) bad += ob_sampler_sample(s, a) != 1;
    CHECK_EQ_INT(bad, 0);
    ob_sampler_free(s);
}

static void test_seeding(void) {
    enum { V = 300, N = 1000 };
    static float l[V];
    static int32_t seq_a[N], seq_b[N], seq_c[N], seq_d[N];
    ob_sampler_params p = ob_sampler_default_params();
    p.temp = 1.2f;
    p.top_k = 100;
    p.top_p = 0.98f;
    p.min_p = 0.001f;
    p.seed = 42;
    p.frequency_penalty = 0.1f;
    ob_sampler_t *s1 = ob_sampler_new(&p, V), *s2 = ob_sampler_new(&p, V);
    p.seed = 43;
    ob_sampler_t *s3 = ob_sampler_new(&p, V);
    lcg_state = 11;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < V; j++) l[j] = (float)(lcg_uniform() * 4.0);
        seq_a[i] = ob_sampler_sample(s1, l);
        seq_b[i] = ob_sampler_sample(s2, l);
        seq_c[i] = ob_sampler_sample(s3, l);
        ob_sampler_accept(s1, seq_a[i]);
        ob_sampler_accept(s2, seq_b[i]);
        ob_sampler_accept(s3, seq_c[i]);
    }
    CHECK(memcmp(seq_a, seq_b, sizeof seq_a) == 0);
    int differ = 0;
    for (int i = 0; i < N; i++) differ += seq_a[i] != seq_c[i];
    CHECK(differ > N / 2);
    /* reset: the same sequence again from the start (RNG and history restored) */
    ob_sampler_reset(s1);
    lcg_state = 11;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < V; j++) l[j] = (float)(lcg_uniform() * 4.0);
        seq_d[i] = ob_sampler_sample(s1, l);
        ob_sampler_accept(s1, seq_d[i]);
    }
    CHECK(memcmp(seq_a, seq_d, sizeof seq_a) == 0);
    ob_sampler_free(s1);
    ob_sampler_free(s2);
    ob_sampler_free(s3);
}

static void test_distribution(void) {
    /* 4 tokens, no filters: frequencies match softmax(l / temp) */
    float l[4] = {1.0f, 0.0f, -0.5f, 2.0f};
    float temps[2] = {1.0f, 0.5f};
    for (int t = 0; t < 2; t++) {
        ob_sampler_params p = plain_params(temps[t], 1234 + (uint64_t)t);
        ob_sampler_t *s = ob_sampler_new(&p, 4);
        double want[4], z = 0;
        for (int i = 0; i < 4; i++) z += want[i] = exp(l[i] / temps[t]);
        int hist[4] = {0};
        const int N = 200000;
        for (int i = 0; i < N; i++) hist[ob_sampler_sample(s, l)]++;
        for (int i = 0; i < 4; i++) {
            /* sd of a frequency <= sqrt(0.25 / N) = 0.0011: 0.006 is > 5 sd, yet a 3% relative
             * error on the largest probability (~0.6) would fail */
            CHECK_NEAR((double)hist[i] / N, want[i] / z, 0.006);
        }
        ob_sampler_free(s);
    }
}

/* The top-p cut placed 2e-6 on either side of the mass of the top two tokens, through both
 * code paths (heap when top_k is on, histogram when off): catches a slack in the cut and an
 * exp off by more than a few ulp. Logits sit where exp's reduced argument is near its
 * largest (|r| ~ 0.34), where a wrong polynomial coefficient shows most. */
static void test_top_p_boundary(void) {
    enum { V = 5 };
    const float l[V] = {2.0f, 2.0f - 0.34f, 2.0f - 1.03f, 2.0f - 1.72f, -INFINITY};
    double z = 0, e[V];
    for (int i = 0; i < V; i++) z += e[i] = exp((double)l[i] - 2.0);
    double cum2 = (e[0] + e[1]) / z;
    for (int path = 0; path < 2; path++) {
        for (int side = -1; side <= 1; side += 2) {
            ob_sampler_params p = plain_params(1.0f, 31 + (uint64_t)(path * 2 + side));
            p.top_k = path ? 4 : 0;
            p.top_p = (float)(cum2 + side * 2e-6);
            ob_sampler_t *s = ob_sampler_new(&p, V);
            int hist[V] = {0};
            for (int i = 0; i < 3000; i++) hist[ob_sampler_sample(s, l)]++;
            if (side < 0) CHECK(hist[0] > 0 && hist[1] > 0 && hist[2] == 0 && hist[3] == 0);
            else CHECK(hist[0] > 0 && hist[1] > 0 && hist[2] > 0 && hist[3] == 0);
            if (ob_test_verbose)
                fprintf(stderr, "  top_p %.7f (top_k %d): %d %d %d %d\n", p.top_p, p.top_k,
                        hist[0], hist[1], hist[2], hist[3]);
            CHECK_EQ_INT(hist[4], 0);
            ob_sampler_free(s);
        }
    }
}

/* Random logits, many parameter mixes, compared with the full-sort reference. */
static void test_against_reference(void) {
    enum { V = 64 };
    float l[V];
    double want[V];
    lcg_state = 99;
    for (int i = 0; i < V; i++) l[i] = (float)(lcg_uniform() * 6.0 - 3.0);
    l[5] = l[9]; /* a tie */
    const int32_t ks[3] = {0, 10, 1000};
    const float ps[3] = {1.0f, 0.8f, 0.3f};
    const float mps[2] = {0.0f, 0.1f};
    const float ts[2] = {0.7f, 1.3f};
    int combos = 0, bad = 0;
    for (int a = 0; a < 3; a++) for (int b = 0; b < 3; b++) for (int c = 0; c < 2; c++) for (int d = 0; d < 2; d++) {
        ob_sampler_params p = plain_params(ts[d], (uint64_t)(a * 100 + b * 10 + c * 2 + d));
        p.top_k = ks[a];
        p.top_p = ps[b];
        p.min_p = mps[c];
        ob_sampler_t *s = ob_sampler_new(&p, V);
        ref_dist(l, V, &p, want);
        int outside;
        double tv = draw_tv(s, l, V, want, 40000, &outside);
        /* noise: E[TV] ~ 0.5 * sum sqrt(2 p / (pi N)) <= ~0.016 for 64 tokens at N = 40000 */
        if (outside || tv > 0.03) {
            fprintf(stderr, "  k=%d p=%g min_p=%g t=%g: tv %.4f, %d draws outside\n",
                    p.top_k, p.top_p, p.min_p, p.temp, tv, outside);
            bad++;
        }
        combos++;
        ob_sampler_free(s);
    }
    CHECK_EQ_INT(combos, 36);
    CHECK_EQ_INT(bad, 0);
}

/* A big vocabulary through the histogram top-p path: the nucleus must be exactly the tokens
 * the full sort says, spread over ids, with ties at the boundary going to the lower id. */
static void test_large_vocab(void) {
    enum { V = 152064 };
    float *l = malloc(V * sizeof *l);
    double *want = malloc(V * sizeof *want);
    lcg_state = 2024;
    for (int i = 0; i < V; i++) l[i] = (float)(lcg_uniform() * 5.0 - 5.0);
    const int32_t top[6] = {31337, 7, 151999, 12345, 90001, 90000};
    const float tv[6] = {10.0f, 9.9f, 9.8f, 9.7f, 9.6f, 9.6f};
    for (int i = 0; i < 6; i++) l[top[i]] = tv[i];
    l[500] = NAN;
    l[501] = -INFINITY;

    for (int t = 0; t < 4; t++) {
        ob_sampler_params p = plain_params(1.0f, 77 + (uint64_t)t);
        /* cases: nucleus ends inside the 6 (two thresholds), with a tie at the edge; with top_k */
        if (t == 0) p.top_p = 0.7f;
        if (t == 1) p.top_p = 0.3f;
        if (t == 2) { p.top_p = 0.8f; p.top_k = 0; }
        if (t == 3) { p.top_p = 0.7f; p.top_k = 3; p.min_p = 0.0f; }
        ref_dist(l, V, &p, want);
        int n_support = 0;
        for (int i = 0; i < V; i++) n_support += want[i] > 0;
        if (t == 2) {
            /* pick top_p so that the 5th token (id 90000 ties id 90001 at 9.6: lower id first)
             * closes the nucleus */
            double z = 0, cum = 0;
            for (int i = 0; i < V; i++) if (l[i] > -INFINITY && l[i] == l[i]) z += exp(l[i] - 10.0);
            for (int i = 0; i < 4; i++) cum += exp(tv[i] - 10.0) / z;
            p.top_p = (float)(cum + 0.5 * exp(9.6 - 10.0) / z);
            ref_dist(l, V, &p, want);
            n_support = 0;
            for (int i = 0; i < V; i++) n_support += want[i] > 0;
            CHECK_EQ_INT(n_support, 5);
            CHECK(want[90000] > 0 && want[90001] == 0);
        }
        ob_sampler_t *s = ob_sampler_new(&p, V);
        int outside;
        /* few draws (each costs an O(V) pass); the fine distribution check is the V = 64
         * reference test, which runs the same code paths */
        double tvd = draw_tv(s, l, V, want, 1000, &outside);
        if (outside || tvd > 0.08)
            fprintf(stderr, "  V=%d case %d: support %d, tv %.4f, %d draws outside\n", V, t,
                    n_support, tvd, outside);
        CHECK_EQ_INT(outside, 0);
        CHECK(tvd < 0.08); /* noise at 1000 draws over <= 6 tokens: ~0.03 */
        CHECK(n_support >= 1 && n_support <= 6);
        ob_sampler_free(s);
    }

    /* A flat distribution: the nucleus is most of the vocabulary (the sorted boundary band is
     * wide). Every draw must land in the reference support. */
    for (int i = 0; i < V; i++) l[i] = (float)(lcg_uniform() * 2.0);
    ob_sampler_params p = plain_params(1.0f, 5);
    p.top_p = 0.5f;
    ref_dist(l, V, &p, want);
    ob_sampler_t *s = ob_sampler_new(&p, V);
    int outside;
    draw_tv(s, l, V, want, 300, &outside);
    CHECK_EQ_INT(outside, 0);
    ob_sampler_free(s);

    /* speed, for the record (not a check) */
    if (ob_test_verbose) {
        for (int t = 0; t < 3; t++) {
            ob_sampler_params q = ob_sampler_default_params();
            if (t == 1) q.top_k = 0;
            if (t == 2) { q.top_k = 0; q.min_p = 0; }
            for (int i = 0; i < V; i++) l[i] = (float)(lcg_uniform() * 20.0 - 10.0);
            s = ob_sampler_new(&q, V);
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            int32_t acc = 0;
            for (int i = 0; i < 200; i++) acc += ob_sampler_sample(s, l);
            clock_gettime(CLOCK_MONOTONIC, &b);
            double us = ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3) / 200;
            fprintf(stderr, "  V=%d top_k=%d top_p=%.2f min_p=%.2f: %.1f us/sample (%d)\n", V,
                    q.top_k, q.top_p, q.min_p, us, acc & 1);
            ob_sampler_free(s);
        }
    }
    free(l);
    free(want);
}

OB_SUITE(sampler) {
    test_greedy();
    test_bad_params();
    test_filters();
    test_penalties();
    test_seeding();
    test_distribution();
    test_top_p_boundary();
    test_against_reference();
    test_large_vocab();
}
