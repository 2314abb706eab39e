/* attn_tile.c — the inner loops of tiled attention (cpu_attn.c), one version per instruction set.
 *
 * Owns: scores of up to OB_ATTN_NQ queries against a block of keys stored transposed (kt[d * ldk
 * + k], f32), the exponentials of a query's scores (ob_attn_exp: attention's own exp, defined
 * here op by op, so a vector version can give its bits) and their sum, and the P·V accumulation
 * over a block of f32 value rows. The arithmetic of every lane is fixed and the same in every
 * version, so all give the scalar version's bits:
 *   s[k] = (fma chain over d = 0..hd-1 of q[d] * kt[d][k], starting at 0) * scale
 *   p[k] = ob_attn_exp(s[k] - mx), sum = 16 partial sums (k into k % 16) in ob_sum16's tree
 *   o[d] = fma(p[k], v[k][d], o[d]) for k = 0..nk-1 in order.
 * A query's result depends only on its own data, never on how many queries share the block or a
 * call: the AVX-512 version keeps the chains of up to 4 queries in registers side by side, so
 * each K or V vector loaded feeds 4 queries' FMAs (and 16 independent chains hide the FMA
 * latency), each chain in the same order as alone; the others take the queries one by one.
 * Versions are picked by the kernel table's name (AVX-512 for "avx512*", AVX2 + FMA for "avx2" and
 * "avx-vnni", plain C otherwise), compiled here with target attributes.
 * Does not own: the softmax and the loop over blocks (cpu_attn.c).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/attn_tile.h"
#include "backend/cpu/kernels.h"

/* ob_attn_exp's constants (Cephes expf) */
#define EXP_MIN -87.3f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* The scalar definition; ATTR compiles it for a version's instruction set (fmaf inline). */
#define EXP_SCALAR(NAME, ATTR)                                                                     \
    ATTR static inline float NAME(float x) {                                                       \
        if (x < EXP_MIN) return 0.0f;                                                              \
        const float n = nearbyintf(x * LOG2E);                                                     \
        float r = fmaf(n, -LN2_HI, x);                                                             \
        r = fmaf(n, -LN2_LO, r);                                                                   \
        float p = fmaf(EXP_P0, r, EXP_P1);                                                         \
        p = fmaf(p, r, EXP_P2), p = fmaf(p, r, EXP_P3), p = fmaf(p, r, EXP_P4), p = fmaf(p, r, EXP_P5); \
        const float y = fmaf(p, r * r, r) + 1.0f;                                                  \
        union { uint32_t u; float f; } e = {(uint32_t)((int32_t)n + 127) << 23};                  \
        return y * e.f;                                                                            \
    }                                                                                              \
    ATTR static float NAME##_softmax(float *s, int n, float mx) {                                   \
        float part[16] = {0};                                                                      \
        for (int k = 0; k < n; k++) {                                                              \
            s[k] = NAME(s[k] - mx);                                                                \
            part[k % 16] += s[k];                                                                  \
        }                                                                                          \
        return ob_sum16(part);                                                                     \
    }

EXP_SCALAR(exp_c, )

float ob_attn_exp(float x) { return exp_c(x); }

/* ---- scalar ---------------------------------------------------------------------------------- */

static float scores1_c(const float *kt, int ldk, const float *q, int hd, int nk, float scale, float *s, float mx) {
    for (int k = 0; k < nk; k++) {
        float acc = 0;
        for (int d = 0; d < hd; d++) acc = fmaf(q[d], kt[(size_t)d * ldk + k], acc);
        s[k] = acc * scale;
        mx = s[k] > mx ? s[k] : mx;
    }
    return mx;
}

static void pv1_c(float *o, const float *p, const float *v, int nk, int hd) {
    for (int k = 0; k < nk; k++)
        for (int d = 0; d < hd; d++) o[d] = fmaf(p[k], v[(size_t)k * hd + d], o[d]);
}

static void transpose_c(const float *src, int nk, int hd, float *dst, int ldk) {
    for (int k = 0; k < nk; k++)
        for (int d = 0; d < hd; d++) dst[(size_t)d * ldk + k] = src[(size_t)k * hd + d];
}

/* The queries one by one, with a version's one-query loops. */
#define BY_QUERY(NAME, ATTR, SCORES1, PV1)                                                                        \
    ATTR static void scores_##NAME(const float *kt, int ldk, const float *const *q, int nq, int hd, int nk,      \
                                   float scale, float *s, int lds, float *mx) {                                \
        for (int i = 0; i < nq; i++) mx[i] = SCORES1(kt, ldk, q[i], hd, nk, scale, s + (size_t)i * lds, mx[i]); \
    }                                                                                                         \
    ATTR static void pv_##NAME(float *o, const float *p, int ldp, int nq, const float *v, int nk, int hd) {      \
        for (int i = 0; i < nq; i++) PV1(o + (size_t)i * hd, p + (size_t)i * ldp, v, nk, hd);                    \
    }

BY_QUERY(c, , scores1_c, pv1_c)
static const ob_attn_tile tile_c = {scores_c, pv_c, exp_c_softmax, transpose_c};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* ---- AVX2 + FMA ------------------------------------------------------------------------------ */

#define T2 __attribute__((target("avx2,fma")))

T2 static float scores1_avx2(const float *kt, int ldk, const float *q, int hd, int nk, float scale, float *s, float mx) {
    int k = 0;
    __m256 mv = _mm256_set1_ps(mx);
    for (; k + 32 <= nk; k += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d++) {
            const __m256 qb = _mm256_broadcast_ss(q + d);
            const float *r = kt + (size_t)d * ldk + k;
            a0 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(r + 24), a3);
        }
        const __m256 sc = _mm256_set1_ps(scale);
        a0 = _mm256_mul_ps(a0, sc), a1 = _mm256_mul_ps(a1, sc), a2 = _mm256_mul_ps(a2, sc), a3 = _mm256_mul_ps(a3, sc);
        _mm256_storeu_ps(s + k, a0), _mm256_storeu_ps(s + k + 8, a1);
        _mm256_storeu_ps(s + k + 16, a2), _mm256_storeu_ps(s + k + 24, a3);
        mv = _mm256_max_ps(a0, mv), mv = _mm256_max_ps(a1, mv), mv = _mm256_max_ps(a2, mv), mv = _mm256_max_ps(a3, mv);
    }
    for (; k + 8 <= nk; k += 8) {
        __m256 a0 = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + d), _mm256_loadu_ps(kt + (size_t)d * ldk + k), a0);
        a0 = _mm256_mul_ps(a0, _mm256_set1_ps(scale));
        _mm256_storeu_ps(s + k, a0);
        mv = _mm256_max_ps(a0, mv);
    }
    float lane[8];
    _mm256_storeu_ps(lane, mv);
    for (int i = 0; i < 8; i++) mx = lane[i] > mx ? lane[i] : mx;
    for (; k < nk; k++) {
        float acc = 0;
        for (int d = 0; d < hd; d++) acc = fmaf(q[d], kt[(size_t)d * ldk + k], acc);
        s[k] = acc * scale;
        mx = s[k] > mx ? s[k] : mx;
    }
    return mx;
}

T2 static void pv1_avx2(float *o, const float *p, const float *v, int nk, int hd) {
    int d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 o0 = _mm256_loadu_ps(o + d), o1 = _mm256_loadu_ps(o + d + 8), o2 = _mm256_loadu_ps(o + d + 16),
               o3 = _mm256_loadu_ps(o + d + 24);
        for (int k = 0; k < nk; k++) {
            const __m256 pb = _mm256_broadcast_ss(p + k);
            const float *r = v + (size_t)k * hd + d;
            o0 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(r), o0);
            o1 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(r + 8), o1);
            o2 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(r + 16), o2);
            o3 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(r + 24), o3);
        }
        _mm256_storeu_ps(o + d, o0), _mm256_storeu_ps(o + d + 8, o1);
        _mm256_storeu_ps(o + d + 16, o2), _mm256_storeu_ps(o + d + 24, o3);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 o0 = _mm256_loadu_ps(o + d);
        for (int k = 0; k < nk; k++) o0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + k), _mm256_loadu_ps(v + (size_t)k * hd + d), o0);
        _mm256_storeu_ps(o + d, o0);
    }
    for (; d < hd; d++)
        for (int k = 0; k < nk; k++) o[d] = fmaf(p[k], v[(size_t)k * hd + d], o[d]);
}

BY_QUERY(avx2, T2, scores1_avx2, pv1_avx2)
EXP_SCALAR(exp_avx2, T2)
static const ob_attn_tile tile_avx2 = {scores_avx2, pv_avx2, exp_avx2_softmax, transpose_c};

/* ---- AVX-512 --------------------------------------------------------------------------------- */

#define T5 __attribute__((target("avx512f,fma")))

#define INLINE5 static inline __attribute__((always_inline, target("avx512f,fma")))

/* NQ queries x NV vectors of 16 keys from key k (the last vector's lanes by mask `last`): the
 * NQ * NV chains over d in registers, each K vector loaded once for all queries. */
INLINE5 void scores_tile(const int NQ, const int NV, const float *kt, int ldk, const float *const *q, int hd, int k,
                         __mmask16 last, float scale, float *s, int lds, __m512 *mv) {
    __m512 acc[OB_ATTN_NQ][4];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) acc[i][j] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const float *r = kt + (size_t)d * ldk + k;
        __m512 kv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) kv[j] = _mm512_maskz_loadu_ps(j == NV - 1 ? last : (__mmask16)0xffff, r + 16 * j);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            const __m512 qb = _mm512_set1_ps(q[i][d]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_fmadd_ps(qb, kv[j], acc[i][j]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) { /* lanes past the last key are neither written nor compared */
            const __mmask16 m = j == NV - 1 ? last : (__mmask16)0xffff;
            const __m512 a = _mm512_mul_ps(acc[i][j], sc);
            _mm512_mask_storeu_ps(s + (size_t)i * lds + k + 16 * j, m, a);
            mv[i] = _mm512_mask_max_ps(mv[i], m, a, mv[i]);
        }
}

INLINE5 void scores_nq(const int NQ, const float *kt, int ldk, const float *const *q, int hd, int nk, float scale, float *s,
                       int lds, float *mx) {
    __m512 mv[OB_ATTN_NQ];
    for (int i = 0; i < NQ; i++) mv[i] = _mm512_set1_ps(mx[i]);
    int k = 0;
    for (; k + 64 <= nk; k += 64) scores_tile(NQ, 4, kt, ldk, q, hd, k, 0xffff, scale, s, lds, mv);
    if (k < nk) {
        const int rem = nk - k, nv = (rem + 15) / 16;
        const __mmask16 last = (__mmask16)(0xffffu >> (16 * nv - rem));
        if (nv == 1) scores_tile(NQ, 1, kt, ldk, q, hd, k, last, scale, s, lds, mv);
        else if (nv == 2) scores_tile(NQ, 2, kt, ldk, q, hd, k, last, scale, s, lds, mv);
        else if (nv == 3) scores_tile(NQ, 3, kt, ldk, q, hd, k, last, scale, s, lds, mv);
        else scores_tile(NQ, 4, kt, ldk, q, hd, k, last, scale, s, lds, mv);
    }
    for (int i = 0; i < NQ; i++) {
        float lane[16];
        _mm512_storeu_ps(lane, mv[i]);
        for (int l = 0; l < 16; l++) mx[i] = lane[l] > mx[i] ? lane[l] : mx[i];
    }
}

T5 static void scores_avx512(const float *kt, int ldk, const float *const *q, int nq, int hd, int nk, float scale, float *s,
                             int lds, float *mx) {
    if (nq == 4) scores_nq(4, kt, ldk, q, hd, nk, scale, s, lds, mx);
    else if (nq == 3) scores_nq(3, kt, ldk, q, hd, nk, scale, s, lds, mx);
    else if (nq == 2) scores_nq(2, kt, ldk, q, hd, nk, scale, s, lds, mx);
    else scores_nq(1, kt, ldk, q, hd, nk, scale, s, lds, mx);
}

/* NQ queries x NV vectors of 16 output dims from d (the last by mask `last`), over all keys in
 * order: each V vector loaded once for all queries. */
INLINE5 void pv_tile(const int NQ, const int NV, float *o, const float *p, int ldp, const float *v, int nk, int hd, int d,
                     __mmask16 last) {
    __m512 acc[OB_ATTN_NQ][4];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[i][j] = _mm512_maskz_loadu_ps(j == NV - 1 ? last : (__mmask16)0xffff, o + (size_t)i * hd + d + 16 * j);
    for (int k = 0; k < nk; k++) {
        const float *r = v + (size_t)k * hd + d;
        __m512 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) vv[j] = _mm512_maskz_loadu_ps(j == NV - 1 ? last : (__mmask16)0xffff, r + 16 * j);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            const __m512 pb = _mm512_set1_ps(p[(size_t)i * ldp + k]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_fmadd_ps(pb, vv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            _mm512_mask_storeu_ps(o + (size_t)i * hd + d + 16 * j, j == NV - 1 ? last : (__mmask16)0xffff, acc[i][j]);
}

INLINE5 void pv_nq(const int NQ, float *o, const float *p, int ldp, const float *v, int nk, int hd) {
    int d = 0;
    for (; d + 64 <= hd; d += 64) pv_tile(NQ, 4, o, p, ldp, v, nk, hd, d, 0xffff);
    if (d < hd) {
        const int rem = hd - d, nv = (rem + 15) / 16;
        const __mmask16 last = (__mmask16)(0xffffu >> (16 * nv - rem));
        if (nv == 1) pv_tile(NQ, 1, o, p, ldp, v, nk, hd, d, last);
        else if (nv == 2) pv_tile(NQ, 2, o, p, ldp, v, nk, hd, d, last);
        else if (nv == 3) pv_tile(NQ, 3, o, p, ldp, v, nk, hd, d, last);
        else pv_tile(NQ, 4, o, p, ldp, v, nk, hd, d, last);
    }
}

T5 static void pv_avx512(float *o, const float *p, int ldp, int nq, const float *v, int nk, int hd) {
    if (nq == 4) pv_nq(4, o, p, ldp, v, nk, hd);
    else if (nq == 3) pv_nq(3, o, p, ldp, v, nk, hd);
    else if (nq == 2) pv_nq(2, o, p, ldp, v, nk, hd);
    else pv_nq(1, o, p, ldp, v, nk, hd);
}

/* ob_attn_exp on 16 lanes, op for op the scalar definition. */
INLINE5 __m512 exp16(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EXP_P0), r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_NLT_UQ); /* not below: NaN stays */
    return _mm512_maskz_mul_ps(keep, y, e);
}

T5 static float softmax_avx512(float *s, int n, float mx) {
    __m512 acc = _mm512_setzero_ps();
    const __m512 m = _mm512_set1_ps(mx);
    for (int k = 0; k < n; k += 16) {
        const __mmask16 l = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(l, s + k), m));
        _mm512_mask_storeu_ps(s + k, l, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(l, e));
    }
    float part[16];
    _mm512_storeu_ps(part, acc);
    return ob_sum16(part);
}

/* 16 x 16 blocks: 32-bit and 64-bit unpacks within 128-bit lanes, then two rounds of lane shuffles. */
T5 static void transpose_avx512(const float *src, int nk, int hd, float *dst, int ldk) {
    int k0 = 0;
    for (; k0 + 16 <= nk; k0 += 16) {
        int d0 = 0;
        for (; d0 + 16 <= hd; d0 += 16) {
            __m512 r[16], t[16], u[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)(k0 + i) * hd + d0);
            for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            for (int g = 0; g < 16; g += 4) {
                u[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
                u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
                u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
                u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
            }
            /* u[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3 */
            for (int c = 0; c < 4; c++) {
                const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), w0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
                const __m512 v1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
                float *o = dst + (size_t)(d0 + c) * ldk + k0;
                _mm512_storeu_ps(o, _mm512_shuffle_f32x4(v0, v1, 0x88));
                _mm512_storeu_ps(o + (size_t)4 * ldk, _mm512_shuffle_f32x4(w0, w1, 0x88));
                _mm512_storeu_ps(o + (size_t)8 * ldk, _mm512_shuffle_f32x4(v0, v1, 0xdd));
                _mm512_storeu_ps(o + (size_t)12 * ldk, _mm512_shuffle_f32x4(w0, w1, 0xdd));
            }
        }
        for (; d0 < hd; d0++)
            for (int k = k0; k < k0 + 16; k++) dst[(size_t)d0 * ldk + k] = src[(size_t)k * hd + d0];
    }
    for (int k = k0; k < nk; k++)
        for (int d = 0; d < hd; d++) dst[(size_t)d * ldk + k] = src[(size_t)k * hd + d];
}

static const ob_attn_tile tile_avx512 = {scores_avx512, pv_avx512, softmax_avx512, transpose_avx512};
#endif

const ob_attn_tile *ob_attn_tile_scalar(void) { return &tile_c; }

const ob_attn_tile *ob_attn_tile_for(const char *table_name) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* a table of that name only exists where its CPU check passed (or a test forced it) */
    if (table_name && !strncmp(table_name, "avx512", 6)) return &tile_avx512;
    if (table_name && (!strcmp(table_name, "avx2") || !strcmp(table_name, "avx-vnni"))) return &tile_avx2;
#endif
    return &tile_c;
}
