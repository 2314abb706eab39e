/* sampler.c — turning one row of logits into the next token.
 *
 * Owns: the sampler chain of llama.cpp's common sampler, in its order — penalties (repeat,
 * then frequency and presence), then greedy if temp <= 0, else top-k, top-p, min-p,
 * temperature, softmax and a draw from a seeded xoshiro256** generator; the penalty window
 * (ring of the last penalty_last_n accepted tokens plus per-token counts); all scratch, sized
 * by n_vocab in ob_sampler_new so that ob_sampler_sample never allocates.
 * Does not own: grammar constraints (a later module masks logits before this), choosing a
 * seed (front ends pick a random one when the user gives none).
 *
 * Semantics worth knowing:
 * - Penalties, as llama.cpp: for each token seen c > 0 times in the window, a logit > 0 is
 *   divided by repeat_penalty and a logit <= 0 multiplied by it; then c * frequency_penalty +
 *   presence_penalty is subtracted (OpenAI). penalty_last_n = -1 counts every accepted token.
 * - Bad logits: NaN counts as -inf (never drawn), +inf as FLT_MAX (so several +inf share the
 *   mass). If every logit is -inf or NaN the answer is token 0, in greedy and sampled modes.
 * - Greedy ties and candidate order ties go to the lowest token id.
 * - top-p works on probabilities renormalised over the top-k survivors (as llama.cpp) and keeps
 *   the smallest prefix whose mass reaches top_p (at least one token). min-p keeps tokens with
 *   p >= min_p * p_max, i.e. logit >= max + log(min_p); min_p >= 1 keeps only the top logit
 *   (and its ties). Both run at temperature 1; temperature is applied to the survivors only.
 *   top-p and min-p each keep a prefix of the sorted order, so their combination is the
 *   shorter prefix whichever runs first.
 * - Cost per call, V = n_vocab: one O(V) pass for the max (logits are read in place; with
 *   penalties on, copied first and only the window's tokens rewritten); with top-k, instead,
 *   the bounded heap's pass (O(V) compares in practice, O(V log k) worst; the max is among
 *   the k) then a heapsort of the k survivors.
 *   Without top-k, top-p uses a histogram of probability mass by distance from the max logit
 *   (bins of 1/4 logit, one vectorised exp pass): only the tokens in the bin where the
 *   cumulative mass crosses top_p (and the next, as slack for rounding) are sorted; everything
 *   above is kept unsorted. Tokens more than 87 below the max (mass < 2e-38) count as zero
 *   there. Measured on this dev VM (one Xeon core, gcc 12 -O2), V = 152064, normal(0, 3)
 *   logits with a peaked head: greedy ~20 us, llama.cpp defaults (top_k 40) ~50 us, top_k 0
 *   with top_p 0.95 ~360 us (~850 us on flat uniform logits, the worst case).
 * - Sums are in double; the draw uses 53 random bits. Same seed + same logits and accepted
 *   tokens -> same tokens, for a given build (libm's expf and FP contraction must match).
 */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OB_SAMPLER_BINS 128      /* covers logits within 32 of the max; beyond: last bin */
#define OB_SAMPLER_BIN_SCALE 4.0f /* bins per unit of logit */

typedef struct {
    float w;                 /* logit after penalties; later, the unnormalised probability */
    int32_t id;
} ob_cand;

struct ob_sampler {
    ob_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];         /* xoshiro256** state */
    uint64_t rng0[4];        /* state after seeding: ob_sampler_reset returns to it */
    float *w;                /* [n_vocab] logits after penalties (only used when penalties are on) */
    ob_cand *cand;           /* [n_vocab] candidate tokens */
    int32_t *count;          /* [n_vocab] occurrences of each token in the penalty window */
    int32_t *ring;           /* [penalty_last_n] window, oldest at ring_head; NULL unless last_n > 0 */
    int32_t ring_head, ring_len;
    int32_t *seen;           /* [n_vocab] distinct accepted tokens; only when penalty_last_n == -1 */
    int32_t n_seen;
    float *prob;             /* [n_vocab] exp(logit - max), top-p without top-k */
    uint8_t *bin;            /* [n_vocab] mass bin of each token (255: no mass), same path */
    double bin_mass[4][OB_SAMPLER_BINS]; /* top-p histogram; 4 copies break store chains */
};

/* ---- RNG: splitmix64 seeding, xoshiro256** (Blackman & Vigna) ------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53;
}

/* ---- exp ------------------------------------------------------------------------------ */

/* e^x for the x = logit - max this file needs: x in [-87, 0] within ~1 ulp of expf (Cephes
 * expf: round(x / ln 2) with a two-part ln 2, degree-5 polynomial, exponent bits); x < -87,
 * -inf and NaN give 0; x > 0 (only +inf - max) gives 1. No branches and no calls, so the
 * loop over it vectorises at -O2 (152k tokens: ~376 us of expf calls). Scalar, it is slower
 * than libm's expf, which the scalar loops below use. Max relative error measured over every
 * float in [-87, 0]: 8.1e-8 (1.4 ulp). */
static inline float exp_nonpos(float x) {
    int32_t in = (x >= -87.0f) & (x <= 0.0f); /* NaN: 0 */
    int32_t pos = x > 0.0f;
    uint32_t xb;
    memcpy(&xb, &x, 4);
    xb &= (uint32_t)-in; /* out of range -> +0.0, harmless below and masked at the end */
    float xc;
    memcpy(&xc, &xb, 4);
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    float y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) * (r * r) + r + 1.0f;
    uint32_t sb = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 0] */
    float sc;
    memcpy(&sc, &sb, 4);
    y *= sc;
    uint32_t yb;
    memcpy(&yb, &y, 4);
    yb = (yb & (uint32_t)-in) | (0x3f800000u & (uint32_t)-pos);
    memcpy(&y, &yb, 4);
    return y;
}

/* For 16 tokens: e[j] = exp(l[j] - m), and bin[j] = floor((m - l[j]) * BIN_SCALE) capped at
 * BINS - 1, or 255 for a token with no mass (NaN, -inf, more than 87 below the max).
 * Written as one fixed-count loop over restrict pointers: the form -O2's cheap vectoriser
 * takes (a helper called per element, or a variable count, stays scalar). */
static inline void mass16(const float *restrict l, float m, float *restrict e,
                          uint8_t *restrict bin) {
    for (int32_t j = 0; j < 16; j++) {
        float x = l[j] - m;
        int32_t in = (x >= -87.0f) & (x <= 0.0f);
        int32_t has = in | (x > 0.0f); /* x > 0: +inf, mass 1 */
        uint32_t xb;
        memcpy(&xb, &x, 4);
        xb &= (uint32_t)-in; /* NaN, inf -> 0.0: the float-to-int conversion stays defined */
        float xm;
        memcpy(&xm, &xb, 4);
        int32_t b = (int32_t)(-xm * OB_SAMPLER_BIN_SCALE); /* [0, 348] */
        b -= (b - (OB_SAMPLER_BINS - 1)) & -(int32_t)(b > OB_SAMPLER_BINS - 1);
        e[j] = exp_nonpos(x);
        bin[j] = (uint8_t)((b & -has) | (255 & ~-has));
    }
}

static void mass_pass(const float *restrict l, int32_t n, float m, float *restrict e,
                      uint8_t *restrict bin) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) mass16(l + i, m, e + i, bin + i);
    if (i < n) { /* the tail through a padded block, so it gets the very same arithmetic */
        float lt[16], et[16];
        uint8_t bt[16];
        for (int32_t j = 0; j < 16; j++) lt[j] = i + j < n ? l[i + j] : -INFINITY;
        mass16(lt, m, et, bt);
        for (int32_t j = 0; i + j < n; j++) {
            e[i + j] = et[j];
            bin[i + j] = bt[j];
        }
    }
}

/* ---- candidate ordering: higher logit first, then lower id ------------------------------ */

static inline int cand_worse(const ob_cand *a, const ob_cand *b) {
    return a->w < b->w || (a->w == b->w && a->id > b->id);
}

/* Min-heap by goodness: the worst candidate sits at h[0]. */
static void heap_sift_down(ob_cand *h, int32_t n, int32_t i) {
    ob_cand x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_worse(&h[c + 1], &h[c])) c++;
        if (!cand_worse(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void heap_build(ob_cand *h, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) heap_sift_down(h, n, i);
}

/* Sorts best-first, in place, without allocating (qsort may allocate). */
static void cand_sort(ob_cand *c, int32_t n) {
    heap_build(c, n);
    for (int32_t end = n - 1; end > 0; end--) {
        ob_cand t = c[0];
        c[0] = c[end];
        c[end] = t;
        heap_sift_down(c, end, 0);
    }
}

/* ---- lifecycle ------------------------------------------------------------------------ */

ob_sampler_params ob_sampler_default_params(void) {
    ob_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = 0;
    return p;
}

/* NULL (nothing to report through: no err parameter in this API) for n_vocab <= 0,
 * non-finite float parameters, repeat_penalty <= 0, penalty_last_n < -1, or out of memory.
 * p == NULL means ob_sampler_default_params(). */
ob_sampler_t *ob_sampler_new(const ob_sampler_params *p, int32_t n_vocab) {
    ob_sampler_params d = p ? *p : ob_sampler_default_params();
    if (n_vocab <= 0) return NULL;
    if (!isfinite(d.temp) || !isfinite(d.top_p) || !isfinite(d.min_p) ||
        !isfinite(d.repeat_penalty) || !isfinite(d.presence_penalty) ||
        !isfinite(d.frequency_penalty))
        return NULL;
    if (d.repeat_penalty <= 0.0f || d.penalty_last_n < -1) return NULL;

    ob_sampler_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = d;
    s->n_vocab = n_vocab;
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->bin = malloc((size_t)n_vocab);
    if (d.penalty_last_n > 0) s->ring = malloc((size_t)d.penalty_last_n * sizeof *s->ring);
    if (d.penalty_last_n < 0) s->seen = malloc((size_t)n_vocab * sizeof *s->seen);
    if (!s->w || !s->cand || !s->count || !s->prob || !s->bin || (d.penalty_last_n > 0 && !s->ring) ||
        (d.penalty_last_n < 0 && !s->seen)) {
        ob_sampler_free(s);
        return NULL;
    }
    uint64_t x = d.seed;
    for (int i = 0; i < 4; i++) s->rng0[i] = splitmix64(&x);
    memcpy(s->rng, s->rng0, sizeof s->rng);
    return s;
}

void ob_sampler_free(ob_sampler_t *s) {
    if (!s) return;
    free(s->w);
    free(s->cand);
    free(s->count);
    free(s->ring);
    free(s->seen);
    free(s->prob);
    free(s->bin);
    free(s);
}

void ob_sampler_reset(ob_sampler_t *s) {
    if (!s) return;
    memcpy(s->rng, s->rng0, sizeof s->rng);
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->ring_head = 0;
    s->ring_len = 0;
    s->n_seen = 0;
}

/* Ids outside [0, n_vocab) are ignored: they cannot be penalised and must not corrupt counts. */
void ob_sampler_accept(ob_sampler_t *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab || s->p.penalty_last_n == 0) return;
    if (s->p.penalty_last_n > 0) {
        int32_t cap = s->p.penalty_last_n;
        if (s->ring_len == cap) { /* full: the oldest leaves the window */
            s->count[s->ring[s->ring_head]]--;
            s->ring[s->ring_head] = token;
            s->ring_head = s->ring_head + 1 == cap ? 0 : s->ring_head + 1;
        } else {
            int32_t at = s->ring_head + s->ring_len;
            s->ring[at >= cap ? at - cap : at] = token;
            s->ring_len++;
        }
    } else if (s->count[token] == 0) {
        s->seen[s->n_seen++] = token;
    }
    if (s->count[token] < INT32_MAX) s->count[token]++;
}

/* ---- sampling ------------------------------------------------------------------------- */

/* +inf -> FLT_MAX, so that exp(l - max) is 1 rather than NaN for each +inf token. */
static inline float clamp_inf(float l) {
    return l > FLT_MAX ? FLT_MAX : l;
}

static inline float penalise(float l, int32_t c, const ob_sampler_params *p) {
    l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
    return l - ((float)c * p->frequency_penalty + p->presence_penalty);
}

/* s->w = logits with the penalties applied to each distinct token in the window, once. */
static void apply_penalties(ob_sampler_t *s, const float *logits) {
    const ob_sampler_params *p = &s->p;
    float *w = s->w;
    int32_t *cnt = s->count;
    memcpy(w, logits, (size_t)s->n_vocab * sizeof *w);
    if (p->penalty_last_n > 0) {
        /* A token may sit in the ring several times: its count is negated once penalised,
         * and restored in a second walk. */
        for (int32_t j = 0; j < s->ring_len; j++) {
            int32_t t = s->ring[j];
            if (cnt[t] > 0) {
                w[t] = penalise(w[t], cnt[t], p);
                cnt[t] = -cnt[t];
            }
        }
        for (int32_t j = 0; j < s->ring_len; j++) {
            int32_t t = s->ring[j];
            if (cnt[t] < 0) cnt[t] = -cnt[t];
        }
    } else {
        for (int32_t j = 0; j < s->n_seen; j++) {
            int32_t t = s->seen[j];
            w[t] = penalise(w[t], cnt[t], p);
        }
    }
}

/* Lowest id holding the largest logit (NaN never wins); 0 if nothing beats -inf. The max,
 * with +inf clamped, goes to *max_out (-inf if nothing is finite or +inf).
 * Blocks of 64 with eight running maxima each, remembering the first block that raised the
 * max; then the first index equal to the max, from that block on (everything before it is
 * smaller). A plain "if (l > m) { m = l; am = i; }" loop compiles to a conditional-move
 * chain several times slower (measured: 165 vs ~25 us for 152k logits). */
static int32_t argmax(const float *l, int32_t n, float *max_out) {
    float m = -INFINITY;
    int32_t from = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        float mx[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                       -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        for (int g = 0; g < 64; g += 8)
            for (int k = 0; k < 8; k++) mx[k] = l[i + g + k] > mx[k] ? l[i + g + k] : mx[k];
        float bm = mx[0];
        for (int k = 1; k < 8; k++) bm = mx[k] > bm ? mx[k] : bm;
        if (bm > m) {
            m = bm;
            from = i;
        }
    }
    for (; i < n; i++) {
        if (l[i] > m) {
            m = l[i];
            from = i;
        }
    }
    *max_out = clamp_inf(m);
    if (m == -INFINITY) return 0;
    for (i = from; i < n; i++)
        if (l[i] == m) return i;
    return 0; /* unreachable: m is one of l[] */
}

/* The k best tokens of l into c (unordered); NaN and -inf never enter. Returns how many
 * (fewer than k when fewer are finite). */
static int32_t select_top_k(const float *l, int32_t n_vocab, int32_t k, ob_cand *c) {
    int32_t n = 0, i = 0;
    for (; i < n_vocab && n < k; i++)
        if (l[i] > -INFINITY) c[n++] = (ob_cand){clamp_inf(l[i]), i};
    heap_build(c, n);
    /* Later ids lose ties, so only a strictly greater logit displaces the root; NaN compares
     * false and is skipped. */
    if (n < k) return n;
    float root = c[0].w;
    /* Blocks of 8 with one combined test: almost every block holds nothing better than the
     * root, and an 8-wide compare is cheaper than 8 branches. */
    for (; i < n_vocab; ) {
        if (i + 8 <= n_vocab) {
            int any = 0;
            for (int j = 0; j < 8; j++) any |= l[i + j] > root;
            if (!any) {
                i += 8;
                continue;
            }
        }
        int32_t end = i + 8 <= n_vocab ? i + 8 : n_vocab;
        for (; i < end; i++) {
            float x = clamp_inf(l[i]); /* a later +inf must not displace a clamped +inf */
            if (x > root) {
                c[0] = (ob_cand){x, i};
                heap_sift_down(c, n, 0);
                root = c[0].w;
            }
        }
    }
    return n;
}

int32_t ob_sampler_sample(ob_sampler_t *s, const float *logits) {
    if (!s || !logits) return -1;
    const ob_sampler_params *p = &s->p;
    const int32_t V = s->n_vocab;
    const float *l = logits;
    if (p->penalty_last_n != 0 &&
        (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)) {
        apply_penalties(s, logits);
        l = s->w;
    }
    ob_cand *c = s->cand;
    const int use_k = p->top_k > 0 && p->top_k < V;
    const int use_p = p->top_p < 1.0f;
    float m;
    int32_t n = 0, am;
    if (p->temp > 0.0f && use_k) {
        /* the k best first: the max logit (and its lowest id: later ids lose ties) is among
         * them, so one pass over the logits, not two */
        n = select_top_k(l, V, p->top_k, c);
        if (n == 0) return argmax(l, V, &m); /* no finite logit */
        m = c[0].w;
        am = c[0].id;
        for (int32_t j = 1; j < n; j++)
            if (c[j].w > m || (c[j].w == m && c[j].id < am)) {
                m = c[j].w;
                am = c[j].id;
            }
    } else {
        am = argmax(l, V, &m);
        if (p->temp <= 0.0f || m == -INFINITY) return am;
    }
    /* min-p as a logit threshold; clamped so the max itself always survives. Finite, so that
     * "l >= thr" also drops NaN and -inf. */
    float thr = -FLT_MAX;
    if (p->min_p > 0.0f) {
        thr = m + logf(p->min_p);
        if (thr > m) thr = m;
        if (thr < -FLT_MAX) thr = -FLT_MAX;
    }

    if (use_k) { /* c holds the k best (above) */
        if (use_p) {
            cand_sort(c, n);
            double z = 0.0, cum = 0.0;
            for (int32_t j = 0; j < n; j++) z += expf(c[j].w - m);
            double target = (double)p->top_p * z;
            int32_t keep = 0;
            while (keep < n && (keep == 0 || cum < target)) cum += expf(c[keep++].w - m);
            n = keep;
        }
        int32_t k = 0; /* min-p, order kept */
        for (int32_t j = 0; j < n; j++)
            if (c[j].w >= thr) c[k++] = c[j];
        n = k;
    } else if (use_p) {
        /* Mass per distance-from-max bin; the bin where the cumulative mass reaches top_p
         * holds the nucleus boundary. Bins above it are kept whole, unsorted. */
        float *e = s->prob;
        uint8_t *bin = s->bin;
        mass_pass(l, V, m, e, bin);
        memset(s->bin_mass, 0, sizeof s->bin_mass);
        for (int32_t i = 0; i < V; i++) s->bin_mass[i & 3][bin[i] & (OB_SAMPLER_BINS - 1)] += e[i];
        double bm[OB_SAMPLER_BINS], z = 0.0; /* bin 255 (no mass, e = 0) landed in bin 127 */
        for (int b = 0; b < OB_SAMPLER_BINS; b++) {
            bm[b] = s->bin_mass[0][b] + s->bin_mass[1][b] + s->bin_mass[2][b] + s->bin_mass[3][b];
            z += bm[b];
        }
        double target = (double)p->top_p * z, cum = 0.0;
        int bstar = OB_SAMPLER_BINS - 1;
        for (int b = 0; b < OB_SAMPLER_BINS; b++) {
            cum += bm[b];
            if (cum >= target) {
                bstar = b;
                break;
            }
        }
        /* Tokens in bins < bstar: surely kept. Bins bstar and bstar+1 (slack against the
         * rounding of summing in another order): sorted, kept until the mass reaches top_p.
         * When the boundary falls in the last (open-ended) bin, every token with mass is. */
        int last = bstar + 1 > OB_SAMPLER_BINS - 1 ? OB_SAMPLER_BINS - 1 : bstar + 1;
        int32_t n_sure = 0, n_edge = 0;
        double sure_mass = 0.0;
        /* Sure tokens fill c from the front, edge tokens from the back. */
        for (int32_t i = 0; i < V; i++) {
            int b = bin[i];
            if (b > last) continue; /* also 255: no mass */
            float x = clamp_inf(l[i]);
            if (x < thr) continue;
            if (b < bstar) {
                c[n_sure++] = (ob_cand){x, i};
                sure_mass += e[i];
            } else {
                c[V - 1 - n_edge++] = (ob_cand){x, i};
            }
        }
        ob_cand *edge = c + V - n_edge;
        cand_sort(edge, n_edge);
        cum = sure_mass;
        n = n_sure;
        for (int32_t j = 0; j < n_edge && (n == 0 || cum < target); j++) {
            cum += e[edge[j].id];
            c[n++] = edge[j]; /* n <= n_sure + j: never overwrites an edge token unread */
        }
    } else {
        for (int32_t i = 0; i < V; i++)
            if (l[i] >= thr) c[n++] = (ob_cand){clamp_inf(l[i]), i};
    }
    if (n == 0) return am; /* cannot happen (the max survives every filter); kept as a guard */

    /* Temperature, softmax (unnormalised: the draw scales by the sum), draw. Divide rather
     * than multiply by 1/temp: for a tiny temp, 1/temp is inf and 0 * inf NaN. */
    const float temp = p->temp;
    double sum = 0.0;
    for (int32_t j = 0; j < n; j++) {
        c[j].w = expf((c[j].w - m) / temp);
        sum += c[j].w;
    }
    double u = rng_uniform(s->rng) * sum, acc = 0.0;
    int32_t last_id = am;
    for (int32_t j = 0; j < n; j++) {
        if (c[j].w <= 0.0f) continue;
        acc += c[j].w;
        last_id = c[j].id;
        if (u < acc) return c[j].id;
    }
    return last_id; /* u landed past the rounded total: the last token with mass */
}
