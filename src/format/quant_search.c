/* quant_search.c — weighted least-squares searches for quantization codes (quant_search.h).
 *
 * Owns: how scales, offsets and super-scales are chosen. The ideas are the published ones
 * (weighted least-squares scale fits over a sweep of candidate scales, as in llama.cpp's
 * k-quants and in the "make_qkx" family; importance weighting from an activation statistic),
 * implemented here from scratch with three differences that make the result at least as good
 * in weighted squared error:
 *  1. every candidate is scored by its true weighted error, after least-squares refitting,
 *     and the winner is refined by alternating re-assignment and refit until it stops moving;
 *  2. the two-level types are scored after the sub-block scales are rounded to their integer
 *     codes and the super-scale to fp16, i.e. on what the decoder will actually compute;
 *  3. after that, each sub-block's codes are nudged by +-1 where that lowers the error, and
 *     the super-scales are refitted jointly by least squares over the whole super-block.
 * Does not own: layouts, or what the weights are (callers).
 *
 * Precision: the scale-and-offset fit computes its error as a difference of large sums, so
 * it sums in double; the one-scale sweep only compares candidates (sum xv^2 / sum v^2, at most
 * 256 terms), so it sums in float; errors of decoded blocks are sums of squares, in float.
 * "At least as good" is measured, not proven: tests/unit/test_quant_more.c compares with
 * llama.cpp on weight-like data, tools/compat/formats.sh on the demo model (docs/formats.md).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "format/quant_int.h"
#include "format/quant_search.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define FP16_MAX 65504.0f

/* ---- levels -------------------------------------------------------------------------- */

static inline float level_value(const ob_levels *lv, int i) { return lv->v ? (float)lv->v[i] : (float)(lv->lo + i); }

/* Index of the level nearest v (the lower one on an exact tie); a NaN gives 0. */
static inline int level_nearest(const ob_levels *lv, float v) {
    if (!lv->v) {
        if (!(v > (float)lv->lo)) return 0;
        if (v >= (float)lv->hi) return lv->hi - lv->lo;
        return ob_round_int(v) - lv->lo;
    }
    const int8_t *g = lv->v;
    int lo = 0, hi = lv->n - 1;
    if (!(v > g[lo])) return lo;
    if (v >= g[hi]) return hi;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (v < g[mid]) hi = mid;
        else lo = mid;
    }
    return v - g[lo] <= g[hi] - v ? lo : hi;
}

static float fp16_clamp_round(float f) {
    if (f > FP16_MAX) f = FP16_MAX;
    if (f < -FP16_MAX) f = -FP16_MAX;
    return ob_half_round(f);
}

/* ---- one scale: x ~ s * level ---------------------------------------------------------- */

/* Nearest level of an arbitrary level set through a table: tbl[k] is the level nearest the
 * integer k - 128, so for v in [k, k + 1) the answer is tbl[k] or the next level. Valid when
 * adjacent levels are at least 2 apart (the iq4 grid's gaps are 11 or more). */
typedef struct { const int8_t *v; uint8_t tbl[256]; } level_table;

static void level_table_init(level_table *t, const ob_levels *lv) {
    t->v = lv->v;
    for (int k = 0; k < 256; k++) t->tbl[k] = (uint8_t)level_nearest(lv, (float)(k - 128));
}

/* The iq4 grid's table is built once (every iq4_nl block would otherwise rebuild it). */
static level_table iq4_table;
static pthread_once_t iq4_table_once = PTHREAD_ONCE_INIT;
static void iq4_table_build(void) {
    ob_levels lv = {ob_iq4nl_grid, 16, 0, 0};
    level_table_init(&iq4_table, &lv);
}

static const level_table *table_for(const ob_levels *lv, level_table *scratch) {
    if (!lv->v) return NULL;
    if (lv->v == ob_iq4nl_grid) {
        pthread_once(&iq4_table_once, iq4_table_build);
        return &iq4_table;
    }
    level_table_init(scratch, lv);
    return scratch;
}

static inline int level_table_nearest(const level_table *t, int n, float v) {
    if (!(v > -128.0f)) return 0;
    if (v >= 127.0f) v = 127.0f;
    int k = t->tbl[(int)(v + 128.0f)]; /* v + 128 >= 0: truncation is floor, and no libm call */
    if (k + 1 < n && v - t->v[k] > t->v[k + 1] - v) k++;
    return k;
}

/* Assigns every x to its nearest level under reciprocal scale t; returns sum w*x*v and sets
 * *svv = sum w*v*v. idx may be NULL. Float sums: a block is at most 256 values, and the
 * candidates are compared, not subtracted. */
static float assign_scale(const float *x, const float *w, int n, const ob_levels *lv, const level_table *tb, float t,
                          uint8_t *idx, float *svv) {
    float sxv = 0, sv2 = 0;
    if (!lv->v) {
        const float lo = (float)lv->lo, hi = (float)lv->hi;
        for (int i = 0; i < n; i++) {
            float v = t * x[i];
            v = v > lo ? (v < hi ? v : hi) : lo;
            float q = (float)ob_round_int(v), wq = w[i] * q;
            if (idx) idx[i] = (uint8_t)((int)q - lv->lo);
            sxv += wq * x[i];
            sv2 += wq * q;
        }
    } else {
        for (int i = 0; i < n; i++) {
            int k = level_table_nearest(tb, lv->n, t * x[i]);
            float q = (float)lv->v[k], wq = w[i] * q;
            if (idx) idx[i] = (uint8_t)k;
            sxv += wq * x[i];
            sv2 += wq * q;
        }
    }
    *svv = sv2;
    return sxv;
}

/* Where the largest element goes, as a fraction f of the end level: f < 1 clips it so the
 * bulk gets finer steps, f > 1 pushes it past the end (it then sits on the end level),
 * which pays off when that element's weight is small. A fine sweep where the optimum
 * usually is, plus a coarse one over a wider range. */
static const float scale_f[] = {0.45f, 0.52f, 0.58f, 0.62f, 0.65f, 0.68f, 0.71f, 0.74f, 0.77f, 0.80f, 0.83f, 0.86f,
                                0.88f, 0.90f, 0.92f, 0.94f, 0.96f, 0.98f, 1.00f, 1.02f, 1.04f, 1.06f, 1.10f, 1.16f,
                                1.24f, 1.34f, 1.46f, 1.60f};

float ob_search_scale(const float *x, const float *w, int n, const ob_levels *lv, uint8_t *idx) {
    float amax = 0.0f, xm = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            xm = x[i];
        }
    if (!(amax > 1e-30f)) {
        memset(idx, (uint8_t)level_nearest(lv, 0.0f), (size_t)n);
        return 0.0f;
    }
    level_table scratch;
    const level_table *tb = table_for(lv, &scratch);
    float best = -1.0f; /* largest sxv^2 / svv: the error is sum w x^2 minus this */
    float best_s = 0.0f;
    for (int end = 0; end < 2; end++) {
        float e = level_value(lv, end ? lv->n - 1 : 0);
        if (e == 0.0f) continue;
        for (size_t k = 0; k < sizeof scale_f / sizeof scale_f[0]; k++) {
            float t = e * scale_f[k] / xm, svv;
            float sxv = assign_scale(x, w, n, lv, tb, t, NULL, &svv);
            if (svv > 0 && sxv * sxv > best * svv) {
                best = sxv * sxv / svv;
                best_s = sxv / svv;
            }
        }
    }
    /* Alternate nearest re-assignment and refit: each step can only lower the error. */
    for (int it = 0; it < 8 && best_s != 0.0f; it++) {
        float svv, sxv = assign_scale(x, w, n, lv, tb, 1.0f / best_s, NULL, &svv);
        if (!(svv > 0) || !(sxv * sxv > best * svv * (1 + 1e-6f))) break;
        best = sxv * sxv / svv;
        best_s = sxv / svv;
    }
    if (best_s == 0.0f) {
        memset(idx, (uint8_t)level_nearest(lv, 0.0f), (size_t)n);
        return 0.0f;
    }
    float svv;
    assign_scale(x, w, n, lv, tb, 1.0f / best_s, idx, &svv);
    return best_s;
}

/* ---- scale and offset: x ~ s * L - m --------------------------------------------------- */

typedef struct { double w, x, xx; } wsums;

static wsums block_sums(const float *x, const float *w, int n) {
    wsums s = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        s.w += w[i];
        s.x += (double)w[i] * x[i];
        s.xx += (double)w[i] * x[i] * x[i];
    }
    return s;
}

/* Least-squares (s, m) for fixed L; returns the weighted error and sets *s, *m. */
static double fit_scale_min(const float *x, const float *w, int n, const uint8_t *L, const wsums *bs, int min_nonneg,
                            float *s_out, float *m_out) {
    double sl = 0, sll = 0, slx = 0;
    for (int i = 0; i < n; i++) {
        double wl = (double)w[i] * L[i];
        sl += wl;
        sll += wl * L[i];
        slx += wl * x[i];
    }
    double s, c; /* x ~ s * L + c, c = -m */
    double D = sll * bs->w - sl * sl;
    if (D > 0) {
        s = (slx * bs->w - bs->x * sl) / D;
        c = (sll * bs->x - sl * slx) / D;
    } else if (sll > 0) {
        s = slx / sll;
        c = 0;
    } else { /* every L is 0: only the offset */
        s = 0;
        c = bs->w > 0 ? bs->x / bs->w : 0;
    }
    if (min_nonneg && c > 0) { /* the offset may only go down */
        c = 0;
        s = sll > 0 ? slx / sll : 0;
    }
    if (s < 0) s = 0;
    *s_out = (float)s;
    *m_out = (float)-c;
    double err = bs->xx + s * s * sll + c * c * bs->w + 2 * s * c * sl - 2 * s * slx - 2 * c * bs->x;
    return err > 0 ? err : 0;
}

static void assign_scale_min(const float *x, int n, int nmax, float s, float m, uint8_t *L) {
    float is = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) {
        float v = (x[i] + m) * is;
        int l = v > 0 ? ob_round_int(v < (float)nmax ? v : (float)nmax) : 0;
        L[i] = (uint8_t)l;
    }
}

#define MIN_STEPS 18
#define MIN_F_LO 0.70f
#define MIN_F_HI 1.12f

float ob_search_scale_min(const float *x, const float *w, int n, int nmax, int min_nonneg, uint8_t *L, float *m) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    if (min_nonneg && mn > 0) mn = 0;
    wsums bs = block_sums(x, w, n);
    if (!(mx > mn)) { /* constant block */
        memset(L, 0, (size_t)n);
        *m = min_nonneg ? -mn : (mn == mn ? -mn : 0.0f);
        return 0.0f;
    }
    uint8_t cand[256];
    double best = INFINITY;
    float best_s = 0, best_m = -mn;
    for (int k = 0; k < MIN_STEPS; k++) {
        float f = MIN_F_LO + (MIN_F_HI - MIN_F_LO) * (float)k / (MIN_STEPS - 1);
        float t = (float)nmax * f / (mx - mn);
        for (int i = 0; i < n; i++) {
            float v = (x[i] - mn) * t;
            cand[i] = (uint8_t)(v > 0 ? ob_round_int(v < (float)nmax ? v : (float)nmax) : 0);
        }
        float s, mm;
        double e = fit_scale_min(x, w, n, cand, &bs, min_nonneg, &s, &mm);
        if (e < best) {
            best = e;
            best_s = s;
            best_m = mm;
        }
    }
    for (int it = 0; it < 8 && best_s > 0; it++) {
        assign_scale_min(x, n, nmax, best_s, best_m, cand);
        float s, mm;
        double e = fit_scale_min(x, w, n, cand, &bs, min_nonneg, &s, &mm);
        if (!(e < best * (1 - 1e-12))) break;
        best = e;
        best_s = s;
        best_m = mm;
    }
    assign_scale_min(x, n, nmax, best_s, best_m, L);
    *m = best_m;
    return best_s;
}

/* ---- super-blocks ------------------------------------------------------------------------ */

/* Error of one sub-block decoded with scale dl = d * sc and offset ml = dmin * mc (as the
 * decoders compute them), each element on its nearest level; writes the levels to L. The
 * level comes from rounding (x + ml) / dl: exact up to float rounding on near-ties, where
 * either neighbour decodes equally well to within an ulp. */
static float sub_error(const ob_kq_spec *sp, const level_table *tbl, const float *x, const float *w, float dl, float ml,
                       uint8_t *L) {
    int n = sp->sub_len;
    float err = 0;
    float id = dl != 0.0f ? 1.0f / dl : 0.0f;
    if (sp->nmax > 0) {
        const float top = (float)sp->nmax;
        for (int i = 0; i < n; i++) {
            float v = (x[i] + ml) * id;
            int l = v > 0 ? ob_round_int(v < top ? v : top) : 0;
            float e = dl * (float)l - ml - x[i];
            L[i] = (uint8_t)l;
            err += w[i] * e * e;
        }
    } else if (!sp->lv.v) {
        const float lo = (float)sp->lv.lo, hi = (float)sp->lv.hi;
        for (int i = 0; i < n; i++) {
            float v = x[i] * id;
            v = v > lo ? (v < hi ? v : hi) : lo;
            int l = ob_round_int(v);
            float e = dl * (float)l - x[i];
            L[i] = (uint8_t)(l - sp->lv.lo);
            err += w[i] * e * e;
        }
    } else {
        for (int i = 0; i < n; i++) {
            int k = level_table_nearest(tbl, sp->lv.n, x[i] * id);
            float e = dl * (float)sp->lv.v[k] - x[i];
            L[i] = (uint8_t)k;
            err += w[i] * e * e;
        }
    }
    return err;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static int code_of(float v, float d, int lo, int hi) {
    if (d == 0.0f || !(v == v)) return clampi(0, lo, hi);
    float q = v / d;
    if (q > (float)hi) return hi;
    if (q < (float)lo) return lo;
    return clampi(ob_round_int(q), lo, hi);
}

typedef struct {
    const ob_kq_spec *sp;
    const level_table *tbl;
    const float *x, *w;
    const float *s, *m;   /* [n_sub] continuous optimum per sub-block */
    float d, dmin;
    int sc[16], mc[16];
    double err[16], total;
    uint8_t L[256];
} kq_state;

static double sub_eval(kq_state *st, int j, int sc, int mc, uint8_t *L) {
    const ob_kq_spec *sp = st->sp;
    float dl = st->d * (float)sc, ml = st->dmin * (float)mc;
    return sub_error(sp, st->tbl, st->x + j * sp->sub_len, st->w + j * sp->sub_len, dl, ml, L);
}

/* Codes from the continuous optimum for the current d / dmin, and the total error. */
static double set_codes(kq_state *st) {
    const ob_kq_spec *sp = st->sp;
    double total = 0;
    for (int j = 0; j < sp->n_sub; j++) {
        st->sc[j] = code_of(st->s[j], st->d, sp->sc_lo, sp->sc_hi);
        st->mc[j] = sp->nmax > 0 ? code_of(st->m[j], st->dmin, 0, sp->mc_hi) : 0;
        st->err[j] = sub_eval(st, j, st->sc[j], st->mc[j], st->L + j * sp->sub_len);
        total += st->err[j];
    }
    st->total = total;
    return total;
}

static void copy_state(kq_state *dst, const kq_state *src) { memcpy(dst, src, sizeof *dst); }

/* Tries super-scales dv (and keeps dmin) or dmin candidates; keeps the best in *best. */
static void try_d(kq_state *best, kq_state *tmp, float d, float dmin) {
    copy_state(tmp, best);
    tmp->d = fp16_clamp_round(d);
    tmp->dmin = fp16_clamp_round(dmin);
    if (set_codes(tmp) < best->total) copy_state(best, tmp);
}

/* Moves each sub-block's scale code (or min code) by +-1 while that lowers its error. */
static void nudge_codes(kq_state *st) {
    const ob_kq_spec *sp = st->sp;
    static const int moves[4][2] = {{1, 0}, {-1, 0}, {0, 1}, {0, -1}};
    const int n_moves = sp->nmax > 0 ? 4 : 2;
    uint8_t L[256];
    for (int j = 0; j < sp->n_sub; j++) {
        for (int pass = 0; pass < 3; pass++) {
            int moved = 0;
            for (int k = 0; k < n_moves; k++) {
                int sc = st->sc[j] + moves[k][0], mc = st->mc[j] + moves[k][1];
                if (sc < sp->sc_lo || sc > sp->sc_hi || mc < 0 || (sp->nmax > 0 && mc > sp->mc_hi)) continue;
                double e = sub_eval(st, j, sc, mc, L);
                if (e < st->err[j]) {
                    st->err[j] = e;
                    st->sc[j] = sc;
                    st->mc[j] = mc;
                    memcpy(st->L + j * sp->sub_len, L, (size_t)sp->sub_len);
                    moved = 1;
                }
            }
            if (!moved) break;
        }
    }
    st->total = 0;
    for (int j = 0; j < sp->n_sub; j++) st->total += st->err[j];
}

/* Least-squares d (and dmin) for the current codes and levels, over the whole super-block. */
static void refit_super(const kq_state *st, float *d, float *dmin) {
    const ob_kq_spec *sp = st->sp;
    double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int j = 0; j < sp->n_sub; j++)
        for (int i = 0; i < sp->sub_len; i++) {
            int e = j * sp->sub_len + i;
            double a = (double)st->sc[j] * (sp->nmax > 0 ? (double)st->L[e] : (double)level_value(&sp->lv, st->L[e]));
            double b = -(double)st->mc[j], w = st->w[e], x = st->x[e];
            saa += w * a * a;
            sab += w * a * b;
            sbb += w * b * b;
            sax += w * a * x;
            sbx += w * b * x;
        }
    *d = st->d;
    *dmin = st->dmin;
    if (sp->nmax > 0) {
        double D = saa * sbb - sab * sab;
        if (D > 0) {
            *d = (float)((sax * sbb - sbx * sab) / D);
            *dmin = (float)((saa * sbx - sab * sax) / D);
        } else if (saa > 0) {
            *d = (float)(sax / saa);
        }
    } else if (saa > 0) {
        *d = (float)(sax / saa);
    }
}

/* The fp16 values one step either side of h (a rounded float). */
static float fp16_step(float h, int dir) {
    uint16_t b = ob_fp32_to_fp16(h);
    if ((b & 0x7fff) == 0) return dir > 0 ? ob_fp16_to_fp32(1) : -ob_fp16_to_fp32(1);
    int neg = (b & 0x8000) != 0;
    b = (uint16_t)(b + ((dir > 0) != neg ? 1 : -1));
    if ((b & 0x7c00) == 0x7c00) return h;
    return ob_fp16_to_fp32(b);
}

#define SUPER_STEPS 10

void ob_kq_search(const ob_kq_spec *sp, const float *x, const float *w, ob_kq_codes *out) {
    int ns = sp->n_sub, sl = sp->sub_len;
    float s[16], m[16];
    uint8_t Ls[256];
    for (int j = 0; j < ns; j++) {
        if (sp->nmax > 0) s[j] = ob_search_scale_min(x + j * sl, w + j * sl, sl, sp->nmax, !sp->min_free, Ls + j * sl, &m[j]);
        else {
            s[j] = ob_search_scale(x + j * sl, w + j * sl, sl, &sp->lv, Ls + j * sl);
            m[j] = 0;
        }
    }
    float smax = 0, sabs = 0, mmax = 0;
    for (int j = 0; j < ns; j++) {
        if (fabsf(s[j]) > sabs) {
            sabs = fabsf(s[j]);
            smax = s[j];
        }
        if (m[j] > mmax) mmax = m[j];
    }
    static kq_state zero_state;
    kq_state best = zero_state, tmp;
    level_table scratch;
    best.sp = sp;
    best.tbl = sp->nmax > 0 ? NULL : table_for(&sp->lv, &scratch);
    best.x = x;
    best.w = w;
    best.s = s;
    best.m = m;
    float dmin0 = sp->nmax > 0 && mmax > 0 ? mmax / (float)sp->mc_hi : 0.0f;
    if (sp->min_free) dmin0 = m[0]; /* one block, min code 1: dmin is the offset itself */
    best.d = 0.0f;
    best.dmin = fp16_clamp_round(dmin0);
    set_codes(&best);
    if (sabs > 0) {
        /* super-scale candidates: the largest sub-block scale on code E, E a bit inward */
        for (int end = 0; end < 2; end++) {
            int E = end ? sp->sc_hi : sp->sc_lo;
            if (E == 0) continue;
            for (int k = 0; k < (sp->sc_lo == sp->sc_hi ? 1 : SUPER_STEPS); k++) {
                float e = (float)E - (E > 0 ? 1.0f : -1.0f) * 1.5f * (float)k / SUPER_STEPS;
                try_d(&best, &tmp, smax / e, best.dmin);
            }
        }
        if (sp->nmax > 0 && mmax > 0 && !sp->min_free)
            for (int k = 1; k < SUPER_STEPS; k++) {
                float e = (float)sp->mc_hi - 1.5f * (float)k / SUPER_STEPS;
                try_d(&best, &tmp, best.d, mmax / e);
            }
    }
    /* nudge codes, refit the super-scales, re-derive the levels; keep what helps */
    for (int round = 0; round < 3; round++) {
        nudge_codes(&best);
        float d, dmin;
        refit_super(&best, &d, &dmin);
        double before = best.total;
        float dh = fp16_clamp_round(d), mh = fp16_clamp_round(dmin);
        float dc[3] = {dh, fp16_step(dh, 1), fp16_step(dh, -1)};
        for (int a = 0; a < 3; a++) {
            copy_state(&tmp, &best);
            tmp.d = dc[a];
            tmp.dmin = sp->nmax > 0 ? mh : 0.0f;
            tmp.total = 0;
            for (int j = 0; j < ns; j++) {
                tmp.err[j] = sub_eval(&tmp, j, tmp.sc[j], tmp.mc[j], tmp.L + j * sl);
                tmp.total += tmp.err[j];
            }
            if (tmp.total < best.total) copy_state(&best, &tmp);
        }
        if (!(best.total < before)) break;
    }
    out->d = best.d;
    out->dmin = sp->nmax > 0 ? best.dmin : 0.0f;
    for (int j = 0; j < ns; j++) {
        out->sc[j] = best.sc[j];
        out->mc[j] = best.mc[j];
    }
    memcpy(out->L, best.L, (size_t)(ns * sl));
}
