/* kernels_avx2.c — the kernel table for AVX2 + FMA + F16C (the x86-64 baseline of the fast
 * path), and, compiled a second time by kernels_avxvnni.c with OB_AVXVNNI defined, for AVX-VNNI
 * (256-bit vpdpbusd without AVX-512: Alder Lake and later client cores, Zen 5).
 *
 * Owns: kernels.h's operations with 256-bit vectors. Same shapes as kernels_avx512.c, halved:
 * decode runs 8 weight rows at a time and reduces their integer sums into one vector (lane =
 * row); prompts use packed panels of 8 rows x 4 tokens. Without VNNI, u8 x s8 products go
 * through vpmaddubsw, whose 16-bit pair sums saturate above 32767: every use below stays under
 * that bound (codes <= 63 pair with |a| <= 127, q8_0 uses the sign trick |w| x sign(a, w)), and
 * 16-bit partial sums are widened before they can overflow. The results are exactly the
 * scalar table's.
 * Does not own: the definition of the results (kernels_scalar.c), threads (cpu_matmul.c).
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "format/quant.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && \
    (!defined(OB_AVXVNNI) || defined(__AVXVNNI__))
#include <immintrin.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define INLINE static inline __attribute__((always_inline))
#define UNROLL4 _Pragma("GCC unroll 4")
#define UNROLL8 _Pragma("GCC unroll 8")

#ifdef OB_AVXVNNI
#define TABLE_NAME "avx-vnni"
#define TABLE_FN ob_kernels_avxvnni_table
#else
#define TABLE_NAME "avx2"
#define TABLE_FN ob_kernels_avx2_table
#endif

static inline float half_at(const uint8_t *p) { return _cvtsh_ss((uint16_t)(p[0] | (p[1] << 8))); }

/* acc += sum of 4 products u8 c x s8 a per dword lane. Exact when pairs stay under 2^15 (see top). */
INLINE __m256i dot4(__m256i acc, __m256i c, __m256i a) {
#ifdef OB_AVXVNNI
    return _mm256_dpbusd_avx_epi32(acc, c, a);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(c, a), _mm256_set1_epi16(1)));
#endif
}

/* Lane r = sum of the lanes of v[r], r < 8. */
INLINE __m256i hsum8(const __m256i v[8]) {
    __m256i w[4], z[2];
    UNROLL4 for (int i = 0; i < 4; i++)
        w[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    UNROLL4 for (int i = 0; i < 2; i++)
        z[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(w[2 * i], w[2 * i + 1]), _mm256_unpackhi_epi64(w[2 * i], w[2 * i + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(z[0], z[1], 0x20), _mm256_permute2x128_si256(z[0], z[1], 0x31));
}

INLINE __m256 kstep(__m256 acc, __m256i isum, __m256 dw, float da) {
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum), dw), _mm256_set1_ps(da), acc);
}

/* ---- decode: per-type integer dot of one row's block with the activations ------------------
 * Each returns the dword partial sums of sum_j sc_j * (sum code * a) for block b; the caller
 * adds the offset correction (ac) and reduces 8 rows. */

INLINE __m256i rdot_q8_0(const uint8_t *row, int64_t b, const int8_t *q) {
    __m256i w = _mm256_loadu_si256((const __m256i *)(row + b * 34 + 2)), a = _mm256_loadu_si256((const __m256i *)q);
#ifdef OB_AVXVNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)), a);
#else
    /* sign trick: |w| x sign(a, w) = w x a, pairs at most 2 * 128 * 127: the sum of w x a itself */
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
#endif
}

INLINE __m256i rdot_q4_0(const uint8_t *row, int64_t b, const int8_t *q) {
    __m128i x = _mm_loadu_si128((const __m128i *)(row + b * 18 + 2));
    __m256i c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(15));
    return dot4(_mm256_setzero_si256(), c, _mm256_loadu_si256((const __m256i *)q));
}

INLINE __m256i rdot_tq2_0(const uint8_t *row, int64_t b, const int8_t *q) {
    const uint8_t *blk = row + b * 66;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 * h));
        for (int j = 0; j < 4; j++)
            acc = dot4(acc, _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3), _mm256_loadu_si256((const __m256i *)(q + 128 * h + 32 * j)));
    }
    return acc;
}

/* tq1_0 trits: p = q * 3^k mod 256 by byte adds; trit = (p >= 86) + (p >= 171). Without VNNI
 * the bytes are kept as x = p ^ 0x80 (3 x = x' mod 256 as well, since 3 * 128 = 128 mod 256), so
 * the two thresholds are signed compares (x > -43, x > 42), whose -1 / 0 bytes sum to -trit. */
INLINE __m256i trit_x(__m256i x) {
    const __m256i n = _mm256_add_epi8(_mm256_cmpgt_epi8(x, _mm256_set1_epi8(-43)), _mm256_cmpgt_epi8(x, _mm256_set1_epi8(42)));
    return _mm256_sub_epi8(_mm256_setzero_si256(), n);
}

INLINE __m256i rdot_i2_s(const uint8_t *row, int64_t b, const int8_t *q) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(row + b * 32)), m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < 4; g++)
        acc = dot4(acc, _mm256_and_si256(_mm256_srli_epi16(v, 6 - 2 * g), m3), _mm256_loadu_si256((const __m256i *)(q + 32 * g)));
    return acc;
}

/* q4_K / q5_K: one row's block with its decoded [8 scales | 8 mins] row sm16 (see gemv_kq45). */
INLINE __m256i rdot_kq45(const uint8_t *blk, const int8_t *q, const uint8_t *sm16, const int five) {
    const __m256i scb = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)sm16));
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    const __m256i h = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    UNROLL4 for (int c = 0; c < 4; c++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        if (five) { /* bit 2c (2c + 1) of qh to bit 4: the 16-bit shift stays inside each byte for bit 4 */
            const int s0 = 4 - 2 * c, s1 = 3 - 2 * c;
            __m256i h0 = s0 > 0 ? _mm256_slli_epi16(h, s0) : s0 < 0 ? _mm256_srli_epi16(h, -s0) : h;
            __m256i h1 = s1 > 0 ? _mm256_slli_epi16(h, s1) : _mm256_srli_epi16(h, -s1);
            lo = _mm256_or_si256(lo, _mm256_and_si256(h0, b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(h1, b4));
        }
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(q + 64 * c)), a1 = _mm256_loadu_si256((const __m256i *)(q + 64 * c + 32));
#ifdef OB_AVXVNNI
        /* dword lanes = scale byte 2c / 2c + 1 (vpshufb zeroes the bytes with the top bit set) */
        acc = _mm256_dpwssd_avx_epi32(acc, _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, a0),
                                      _mm256_shuffle_epi8(scb, _mm256_set1_epi32((int)(0x80808000u | (unsigned)(2 * c)))));
        acc = _mm256_dpwssd_avx_epi32(acc, _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), hi, a1),
                                      _mm256_shuffle_epi8(scb, _mm256_set1_epi32((int)(0x80808000u | (unsigned)(2 * c + 1)))));
#else
        /* word lanes = scale byte 2c / 2c + 1; pairs at most 2 * 31 * 127 */
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(0x8000 | (2 * c))))));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(0x8000 | (2 * c + 1))))));
#endif
    }
    return acc;
}

/* q6_K, with the offset correction sum_j sc_j * (-32 * sum a_j) included: one vpmaddwd of the 16
 * scales (words) with ac_j / 32 (exact, |.| <= 16 * 127), times 32. The scale vectors come from
 * the scales' words by vpshufb (words 2g, 2g + 1 of the half h). */
INLINE __m256i rdot_q6_K(const uint8_t *blk, const int8_t *q, const int32_t *ac) {
    const __m256i scw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
    const __m256i a32 = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)ac), 5),
                                                                     _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(ac + 8)), 5)),
                                                 _MM_SHUFFLE(3, 1, 2, 0));
    __m256i acc = _mm256_slli_epi32(_mm256_madd_epi16(scw, a32), 5);
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    UNROLL4 for (int h = 0; h < 2; h++) {
        const __m256i sh = _mm256_permute4x64_epi64(scw, h ? 0xEE : 0x44); /* scales 8h..8h+7 in both lanes */
        const uint8_t *ql = blk + 64 * h;
        __m256i L0 = _mm256_loadu_si256((const __m256i *)ql), L1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        __m256i Q = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        __m256i c[4]; /* the 16-bit shifts keep bits 4-5 of each byte inside the byte */
        c[0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(Q, 4), m30));
        c[1] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(Q, 2), m30));
        c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(Q, m30));
        c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(Q, 2), m30));
        UNROLL4 for (int g = 0; g < 4; g++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(q + 128 * h + 32 * g));
#ifdef OB_AVXVNNI
            /* dword lanes: scale 2g (low 128 bits) / 2g + 1 (high), sign-extended word, high word 0 */
            const __m256i ctl = _mm256_set_epi8(-128, -128, 4 * g + 3, 4 * g + 2, -128, -128, 4 * g + 3, 4 * g + 2, -128, -128,
                                                4 * g + 3, 4 * g + 2, -128, -128, 4 * g + 3, 4 * g + 2, -128, -128, 4 * g + 1, 4 * g,
                                                -128, -128, 4 * g + 1, 4 * g, -128, -128, 4 * g + 1, 4 * g, -128, -128, 4 * g + 1, 4 * g);
            acc = _mm256_dpwssd_avx_epi32(acc, _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), c[g], a), _mm256_shuffle_epi8(sh, ctl));
#else
            const __m256i ctl = _mm256_set_epi8(4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2,
                                                4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2, 4 * g + 3, 4 * g + 2,
                                                4 * g + 1, 4 * g, 4 * g + 1, 4 * g, 4 * g + 1, 4 * g, 4 * g + 1, 4 * g, 4 * g + 1, 4 * g,
                                                4 * g + 1, 4 * g, 4 * g + 1, 4 * g, 4 * g + 1, 4 * g);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(c[g], a), _mm256_shuffle_epi8(sh, ctl)));
#endif
        }
    }
    return acc;
}

/* Software prefetch of the next 8-row group while this one is computed: rows are contiguous, so
 * that group is the 8 * row_bytes after this one, and step B of row I fetches its bytes
 * (B * 8 + I) * S .. + S, sweeping it in order. The 8 interleaved row streams of a group defeat
 * the hardware prefetcher on short rows (decode ran at a third of the memory bandwidth). */
INLINE void pf_next(const uint8_t *next, int64_t b, int i, int s) {
    const char *p = (const char *)next + ((size_t)b * 8 + (size_t)i) * (size_t)s;
    for (int o = 0; o < s; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

/* Decode skeleton: 8 rows at a time, one integer sum per (row, block), float step per block. */
#define GEMV(NAME, QB, SB, BS, DOFF, EXPR, MINS)                                                     \
    static void NAME(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) { \
        const int64_t k = w->n_in, nb = k / (QB);                                                    \
        const size_t rb = w->row_bytes;                                                              \
        const int8_t *qs = a->qs + t * k;                                                            \
        const float *da = a->d + t * nb;                                                             \
        const int32_t *acs = a->ac + t * (k / (SB));                                                 \
        (void)acs;                                                                                   \
        for (int64_t r = r0; r < r1; r += 8) {                                                       \
            const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;                                           \
            const uint8_t *rowp[8];                                                                  \
            for (int i = 0; i < 8; i++) rowp[i] = (const uint8_t *)w->data + (size_t)(r + (i < nr ? i : nr - 1)) * rb; \
            const uint8_t *next = (const uint8_t *)w->data + (size_t)(r + 8) * rb;                   \
            __m256 acc = _mm256_setzero_ps();                                                        \
            for (int64_t b = 0; b < nb; b++) {                                                       \
                const int8_t *q = qs + b * (QB);                                                     \
                const int32_t *ac = acs + b * ((QB) / (SB));                                         \
                (void)ac;                                                                            \
                __m256i s[8];                                                                        \
                int32_t imn[8] = {0};                                                                \
                float dwv[8], dmv[8];                                                                \
                (void)imn;                                                                           \
                (void)dmv;                                                                           \
                for (int i = 0; i < 8; i++) {                                                        \
                    const uint8_t *row = rowp[i];                                                    \
                    pf_next(next, b, i, (BS));                                                       \
                    const uint8_t *blk = row + b * (BS);                                             \
                    (void)blk;                                                                       \
                    s[i] = EXPR;                                                                     \
                    dwv[i] = half_at(row + b * (BS) + (DOFF));                                       \
                    if (MINS) dmv[i] = -half_at(row + b * (BS) + 2);                                 \
                }                                                                                    \
                __m256i isum = hsum8(s);                                                             \
                ADDCORR;                                                                             \
                acc = kstep(acc, isum, _mm256_loadu_ps(dwv), da[b]); \
                if (MINS) acc = kstep(acc, _mm256_loadu_si256((const __m256i *)imn), _mm256_loadu_ps(dmv), da[b]); \
            }                                                                                        \
            acc = _mm256_mul_ps(acc, _mm256_set1_ps(w->scale));                                      \
            float out[8];                                                                            \
            _mm256_storeu_ps(out, acc);                                                              \
            memcpy(y + (r - r0), out, (size_t)nr * sizeof(float));                                   \
        }                                                                                            \
    }

/* the correction -off * sum(a) of one-sub-block types (q8_0 without VNNI computes w x a directly) */
#define ADDCORR isum = _mm256_add_epi32(isum, _mm256_set1_epi32(ac[0]))
GEMV(gemv_q4_0, 32, 32, 18, 0, rdot_q4_0(row, b, q), 0)
GEMV(gemv_tq2_0, 256, 256, 66, 64, rdot_tq2_0(row, b, q), 0)
#ifdef OB_AVXVNNI
GEMV(gemv_q8_0, 32, 32, 34, 0, rdot_q8_0(row, b, q), 0)
#endif
#undef ADDCORR
#define ADDCORR (void)0
#ifndef OB_AVXVNNI
GEMV(gemv_q8_0, 32, 32, 34, 0, rdot_q8_0(row, b, q), 0)
#endif
GEMV(gemv_q6_K, 256, 16, 210, 208, rdot_q6_K(blk, q, ac), 0)
#undef ADDCORR

/* q4_K / q5_K: the scales and mins of the 8 rows are decoded together per block: the 16-byte
 * headers (d, dmin, 12 scale bytes) of two rows fill one vector, one row per 128-bit lane, which
 * k4_hdr turns into [8 scales | 8 mins] per lane (llama.cpp's kmask arithmetic on lanes); the
 * mins' term sum_j mn_j * ac_j of 8 rows is one vpmaddwd per 2 rows and a transpose-add. */
INLINE __m256i k4_hdr(__m256i h) {
    const __m256i cnt = _mm256_set_epi32(4, 0, 0, 0, 4, 0, 0, 0);
    const __m256i m1 = _mm256_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
    const __m256i m2 = _mm256_set_epi32(0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0);
    /* lanes [d|dmin, u0, u1, u2] -> [u0 & 3f, (u2 & 0f) | (u0 >> 2 & 30), u1 & 3f, (u2 >> 4 & 0f) | (u1 >> 2 & 30)] */
    __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1)), cnt), m1);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi32(_mm256_shuffle_epi32(h, _MM_SHUFFLE(2, 0, 1, 0)), 2), m2);
    return _mm256_or_si256(lo, hi);
}

/* Lane r from z, whose dword 4l + j holds row 2j + l (the transpose-adds of 2-row vectors). */
INLINE __m256i rows2x4(__m256i z) { return _mm256_permutevar8x32_epi32(z, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0)); }

INLINE void gemv_kq45(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y, const int five) {
    const int64_t k = w->n_in, nb = k / 256;
    const size_t rb = w->row_bytes, bs = five ? 176 : 144;
    const int8_t *qs = a->qs + t * k;
    const float *da = a->d + t * nb;
    const int32_t *acs = a->ac + t * (k / 32);
    _Alignas(32) uint8_t scm[8][16]; /* [row][8 scales, 8 mins] of the block */
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        const uint8_t *rowp[8];
        for (int i = 0; i < 8; i++) rowp[i] = (const uint8_t *)w->data + (size_t)(r + (i < nr ? i : nr - 1)) * rb;
        const uint8_t *next = (const uint8_t *)w->data + (size_t)(r + 8) * rb;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *q = qs + b * 256;
            /* the 8 activation sums as 16-bit words in both lanes (|ac| <= 32 * 127) */
            const __m256i acw = _mm256_broadcastsi128_si256(
                _mm_packs_epi32(_mm_loadu_si128((const __m128i *)(acs + b * 8)), _mm_loadu_si128((const __m128i *)(acs + b * 8 + 4))));
            __m256i hm[4], hd[4];
            UNROLL4 for (int g = 0; g < 4; g++) {
                hd[g] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(rowp[2 * g + 1] + b * bs)),
                                         _mm_loadu_si128((const __m128i *)(rowp[2 * g] + b * bs)));
                const __m256i sm = k4_hdr(hd[g]);
                _mm256_store_si256((__m256i *)scm[2 * g], sm);
                hm[g] = _mm256_madd_epi16(_mm256_unpackhi_epi8(sm, _mm256_setzero_si256()), acw); /* mins x ac, pairs */
            }
            __m256i s[8];
            for (int i = 0; i < 8; i++) {
                pf_next(next, b, i, (int)bs);
                s[i] = rdot_kq45(rowp[i] + b * bs, q, scm[i], five);
            }
            const __m256i isum = hsum8(s);
            __m256i w0 = _mm256_add_epi32(_mm256_unpacklo_epi32(hm[0], hm[1]), _mm256_unpackhi_epi32(hm[0], hm[1]));
            __m256i w1 = _mm256_add_epi32(_mm256_unpacklo_epi32(hm[2], hm[3]), _mm256_unpackhi_epi32(hm[2], hm[3]));
            const __m256i imn = rows2x4(_mm256_add_epi32(_mm256_unpacklo_epi64(w0, w1), _mm256_unpackhi_epi64(w0, w1)));
            const __m256i dd = rows2x4(_mm256_unpacklo_epi64(_mm256_unpacklo_epi32(hd[0], hd[1]), _mm256_unpacklo_epi32(hd[2], hd[3])));
            /* d | dmin << 16 of 8 rows -> [d 0-7 | dmin 0-7] as halves */
            const __m256i hv = _mm256_permute4x64_epi64(
                _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(dd, 16)), _MM_SHUFFLE(3, 1, 2, 0));
            const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(hv));
            const __m256 dm = _mm256_xor_ps(_mm256_set1_ps(-0.0f), _mm256_cvtph_ps(_mm256_extracti128_si256(hv, 1)));
            acc = kstep(acc, isum, dw, da[b]);
            acc = kstep(acc, imn, dm, da[b]);
        }
        float out[8];
        _mm256_storeu_ps(out, acc);
        memcpy(y + (r - r0), out, (size_t)nr * sizeof(float));
    }
}

static void gemv_q4_K(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    gemv_kq45(w, r0, r1, a, t, y, 0);
}
static void gemv_q5_K(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    gemv_kq45(w, r0, r1, a, t, y, 1);
}

/* Blocks without a per-block scale (i2_s) or with activations laid out per block (tq1_0). */
static void gemv_i2_s(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    const int64_t k = w->n_in, nb = k / 128;
    const int8_t *qs = a->qs + t * k;
    const float *da = a->d + t * nb;
    const int32_t *ac = a->ac + t * nb;
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        const uint8_t *rowp[8];
        for (int i = 0; i < 8; i++) rowp[i] = (const uint8_t *)w->data + (size_t)(r + (i < nr ? i : nr - 1)) * w->row_bytes;
        const uint8_t *next = (const uint8_t *)w->data + (size_t)(r + 8) * w->row_bytes;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i s[8];
            for (int i = 0; i < 8; i++) {
                if (!(b & 1)) pf_next(next, b / 2, i, 64);
                s[i] = rdot_i2_s(rowp[i], b, qs + b * 128);
            }
            __m256i isum = _mm256_add_epi32(hsum8(s), _mm256_set1_epi32(ac[b]));
            acc = kstep(acc, isum, _mm256_set1_ps(1.0f), da[b]);
        }
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(acc, _mm256_set1_ps(w->scale)));
        memcpy(y + (r - r0), out, (size_t)nr * sizeof(float));
    }
}

/* VNNI: 256 t_k = 3 p_k - p_{k+1} (kernels_avx512.c), two vpdpbusd per position and no trit
 * extraction. Without VNNI: vpmaddubsw of the trits, 16-bit sums (at most 10 * 2 * 2 * 127 per
 * word) widened once per block. */
static void gemv_tq1_0(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    const int64_t k = w->n_in, nb = k / 256;
    const int8_t *qs = a->qs + t * k;
    const float *da = a->d + t * nb;
    const int32_t *ac = a->ac + t * nb;
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        const uint8_t *rowp[8];
        for (int i = 0; i < 8; i++) rowp[i] = (const uint8_t *)w->data + (size_t)(r + (i < nr ? i : nr - 1)) * w->row_bytes;
        const uint8_t *next = (const uint8_t *)w->data + (size_t)(r + 8) * w->row_bytes;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *q = qs + b * 256;
            _Alignas(32) int8_t a1[5][2][32]; /* trit position k of span 0 and of spans 1 and 2 */
#ifdef OB_AVXVNNI
            _Alignas(32) int8_t n1[5][2][32]; /* the activations negated */
#endif
            for (int kk = 0; kk < 5; kk++) {
                int32_t t4 = 0;
                if (kk < 4) memcpy(&t4, q + 240 + 4 * kk, 4);
                const __m256i v[2] = {_mm256_loadu_si256((const __m256i *)(q + 32 * kk)),
                                      _mm256_set_m128i(_mm_cvtsi32_si128(t4), _mm_loadu_si128((const __m128i *)(q + 160 + 16 * kk)))};
                for (int h = 0; h < 2; h++) {
                    _mm256_store_si256((__m256i *)a1[kk][h], v[h]);
#ifdef OB_AVXVNNI
                    _mm256_store_si256((__m256i *)n1[kk][h], _mm256_sub_epi8(_mm256_setzero_si256(), v[h]));
#endif
                }
            }
            __m256i s[8];
            float dwv[8];
            for (int i = 0; i < 8; i++) {
                pf_next(next, b, i, 54);
                const uint8_t *blk = rowp[i] + b * 54;
                int32_t qh;
                memcpy(&qh, blk + 48, 4);
                __m256i p[2] = {_mm256_loadu_si256((const __m256i *)blk),
                                _mm256_set_m128i(_mm_cvtsi32_si128(qh), _mm_loadu_si128((const __m128i *)(blk + 32)))};
#ifdef OB_AVXVNNI
                __m256i x3 = _mm256_setzero_si256(), x1 = _mm256_setzero_si256();
                UNROLL8 for (int kk = 0; kk < 5; kk++)
                    UNROLL4 for (int h = 0; h < 2; h++) {
                        x3 = _mm256_dpbusd_avx_epi32(x3, p[h], _mm256_load_si256((const __m256i *)a1[kk][h]));
                        p[h] = _mm256_add_epi8(_mm256_add_epi8(p[h], p[h]), p[h]);
                        x1 = _mm256_dpbusd_avx_epi32(x1, p[h], _mm256_load_si256((const __m256i *)n1[kk][h]));
                    }
                s[i] = _mm256_add_epi32(_mm256_add_epi32(x3, x1), _mm256_add_epi32(x3, x3));
#else
                const __m256i x80 = _mm256_set1_epi8((char)0x80);
                p[0] = _mm256_xor_si256(p[0], x80);
                p[1] = _mm256_xor_si256(p[1], x80);
                __m256i x16 = _mm256_setzero_si256();
                UNROLL8 for (int kk = 0; kk < 5; kk++)
                    UNROLL4 for (int h = 0; h < 2; h++) {
                        if (kk) p[h] = _mm256_add_epi8(_mm256_add_epi8(p[h], p[h]), p[h]);
                        x16 = _mm256_add_epi16(x16, _mm256_maddubs_epi16(trit_x(p[h]), _mm256_load_si256((const __m256i *)a1[kk][h])));
                    }
                s[i] = _mm256_madd_epi16(x16, _mm256_set1_epi16(1));
#endif
                dwv[i] = half_at(blk + 52);
            }
            __m256i isum = hsum8(s);
#ifdef OB_AVXVNNI
            isum = _mm256_srai_epi32(isum, 8);
#endif
            isum = _mm256_add_epi32(isum, _mm256_set1_epi32(ac[b]));
            acc = kstep(acc, isum, _mm256_loadu_ps(dwv), da[b]);
        }
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(acc, _mm256_set1_ps(w->scale)));
        memcpy(y + (r - r0), out, (size_t)nr * sizeof(float));
    }
}

/* ---- GEMM on packed panels (8 rows per vector) x 4 tokens -------------------------------------
 * Without VNNI, vpmaddubsw results are summed in 16 bits for STEPS groups of 4 elements (the
 * largest count whose sum stays under 2^15 for the type's code range), then widened. */

INLINE void gemm_tile(const int QB, const int SB, const int OFF, const int SC, const int MN, const int STEPS, const int Q8,
                      const int C, const ob_panel *p, const ob_q8act *a, int t, float *y, int64_t ldy) {
    const int64_t k = a->k, nb = k / QB, nsb = k / SB, nsub = QB / SB;
    const int8_t *q[4];
    const int32_t *ac[4];
    const float *da[4];
    UNROLL4 for (int c = 0; c < C; c++) {
        q[c] = a->qs + (t + c) * k;
        ac[c] = a->ac + (t + c) * nsb;
        da[c] = a->d + (t + c) * nb;
    }
    __m256 facc[4];
    UNROLL4 for (int c = 0; c < C; c++) facc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i isum[4];
        UNROLL4 for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
        for (int j = 0; j < nsub; j++) {
            const int64_t js = b * nsub + j;
            __m256i iacc[4];
#ifdef OB_AVXVNNI
            const int init = OFF;
#else
            const int init = OFF && !Q8; /* the sign trick computes w x a without the offset */
#endif
            UNROLL4 for (int c = 0; c < C; c++) iacc[c] = init ? _mm256_set1_epi32(ac[c][js]) : _mm256_setzero_si256();
            for (int i0 = 0; i0 < SB / 4; i0 += STEPS) {
#ifdef OB_AVXVNNI
                for (int i = i0; i < i0 + STEPS; i++) {
                    const int64_t kk = js * SB + 4 * i;
                    const __m256i wv = _mm256_load_si256((const __m256i *)(p->codes + kk * 8));
                    UNROLL4 for (int c = 0; c < C; c++) {
                        int32_t a4;
                        memcpy(&a4, q[c] + kk, 4);
                        iacc[c] = _mm256_dpbusd_avx_epi32(iacc[c], wv, _mm256_set1_epi32(a4));
                    }
                }
#else
                __m256i s16[4];
                UNROLL4 for (int c = 0; c < C; c++) s16[c] = _mm256_setzero_si256();
                for (int i = i0; i < i0 + STEPS; i++) {
                    const int64_t kk = js * SB + 4 * i;
                    __m256i wv = _mm256_load_si256((const __m256i *)(p->codes + kk * 8));
                    if (Q8) {
                        const __m256i ws = _mm256_xor_si256(wv, _mm256_set1_epi8((char)0x80)); /* the signed weights */
                        wv = _mm256_sign_epi8(ws, ws);
                        UNROLL4 for (int c = 0; c < C; c++) {
                            int32_t a4;
                            memcpy(&a4, q[c] + kk, 4);
                            s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wv, _mm256_sign_epi8(_mm256_set1_epi32(a4), ws)));
                        }
                    } else {
                        UNROLL4 for (int c = 0; c < C; c++) {
                            int32_t a4;
                            memcpy(&a4, q[c] + kk, 4);
                            s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(a4)));
                        }
                    }
                }
                UNROLL4 for (int c = 0; c < C; c++) iacc[c] = _mm256_add_epi32(iacc[c], _mm256_madd_epi16(s16[c], _mm256_set1_epi16(1)));
#endif
            }
            if (SC) {
                const __m256i scv = _mm256_load_si256((const __m256i *)(p->sc + js * 8));
                UNROLL4 for (int c = 0; c < C; c++) isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(iacc[c], scv));
            } else {
                UNROLL4 for (int c = 0; c < C; c++) isum[c] = iacc[c];
            }
        }
        const __m256 dw = _mm256_load_ps(p->dw + b * 8);
        UNROLL4 for (int c = 0; c < C; c++) facc[c] = kstep(facc[c], isum[c], dw, da[c][b]);
        if (MN) {
            const __m256 dm = _mm256_load_ps(p->dm + b * 8);
            UNROLL4 for (int c = 0; c < C; c++) {
                __m256i m = _mm256_setzero_si256();
                for (int j = 0; j < nsub; j++)
                    m = _mm256_add_epi32(m, _mm256_mullo_epi32(_mm256_load_si256((const __m256i *)(p->mn + (b * nsub + j) * 8)),
                                                               _mm256_set1_epi32(ac[c][b * nsub + j])));
                facc[c] = kstep(facc[c], m, dm, da[c][b]);
            }
        }
    }
    const __m256 ts = _mm256_set1_ps(p->scale);
    UNROLL4 for (int c = 0; c < C; c++) {
        float out[8];
        _mm256_storeu_ps(out, _mm256_mul_ps(facc[c], ts));
        memcpy(y + c * ldy, out, (size_t)p->nr * sizeof(float));
    }
}

#define GEMM_FMT(NAME, QB, SB, OFF, SC, MN, STEPS, Q8)                                                  \
    static void NAME(const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {   \
        int t = t0;                                                                                    \
        for (; t + 4 <= t1; t += 4) gemm_tile(QB, SB, OFF, SC, MN, STEPS, Q8, 4, p, a, t, y + (t - t0) * ldy, ldy); \
        for (; t < t1; t++) gemm_tile(QB, SB, OFF, SC, MN, STEPS, Q8, 1, p, a, t, y + (t - t0) * ldy, ldy); \
    }

/* (QB, SB, OFF, SC, MN, STEPS, Q8): Q8 = codes of off 128 (signed values) through the sign trick */
GEMM_FMT(gemm_q8, 32, 32, 1, 0, 0, 1, 1)       /* q8_0 iq4_nl */
GEMM_FMT(gemm_q4, 32, 32, 1, 0, 0, 8, 0)       /* q4_0 (codes < 16) */
GEMM_FMT(gemm_q5, 32, 32, 1, 0, 0, 4, 0)       /* q5_0 mxfp4 (codes < 32) */
GEMM_FMT(gemm_m4, 32, 32, 0, 0, 1, 8, 0)       /* q4_1 */
GEMM_FMT(gemm_m5, 32, 32, 0, 0, 1, 4, 0)       /* q5_1 */
GEMM_FMT(gemm_b128, 128, 128, 1, 0, 0, 32, 0)  /* i2_s */
GEMM_FMT(gemm_b256, 256, 256, 1, 0, 0, 32, 0)  /* tq1_0 tq2_0 */
GEMM_FMT(gemm_k4, 256, 32, 0, 1, 1, 4, 0)      /* q4_K q5_K */
GEMM_FMT(gemm_x4, 256, 32, 1, 1, 0, 1, 1)      /* iq4_xs */
GEMM_FMT(gemm_k2, 256, 16, 0, 1, 1, 4, 0)      /* q2_K */
GEMM_FMT(gemm_k6, 256, 16, 1, 1, 0, 2, 0)      /* q3_K q6_K (codes < 64) */

static void gemm(const ob_kfmt *f, const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    const int q8 = f->off >= 128;
    if (f->qb == 32) {
        if (q8) gemm_q8(p, a, t0, t1, y, ldy);
        else if (f->has_mn) (f->cmax < 16 ? gemm_m4 : gemm_m5)(p, a, t0, t1, y, ldy);
        else (f->cmax < 16 ? gemm_q4 : gemm_q5)(p, a, t0, t1, y, ldy);
    } else if (f->qb == 128) gemm_b128(p, a, t0, t1, y, ldy);
    else if (!f->has_sc) gemm_b256(p, a, t0, t1, y, ldy);
    else if (f->sb == 32) (q8 ? gemm_x4 : gemm_k4)(p, a, t0, t1, y, ldy);
    else (f->has_mn ? gemm_k2 : gemm_k6)(p, a, t0, t1, y, ldy);
}

/* ---- activation quantizer ----------------------------------------------------------------- */

static void quant_row(const float *x, int64_t k, const ob_kfmt *f, int8_t *qs, float *d, int32_t *ac) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absm), vmax);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float dr = amax / 127.0f, idr = amax > 0 ? 1.0f / dr : 0.0f;
    int row_mode = amax > 0;
    if (row_mode) {
        const __m256 vid = _mm256_set1_ps(idr), tol = _mm256_set1_ps(1e-3f);
        for (int64_t i = 0; i < k && row_mode; i += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vid);
            __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            row_mode = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v, r), absm), tol, _CMP_LE_OQ)) == 0xff;
        }
    }
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (int64_t b = 0; b < k / f->qb; b++) {
        const float *xb = x + b * f->qb;
        float db = dr, id = idr;
        if (!row_mode) {
            __m256 m = _mm256_setzero_ps();
            for (int i = 0; i < f->qb; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + i), absm), m);
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            const float bmax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
            db = bmax / 127.0f;
            id = db != 0 ? 1.0f / db : 0.0f;
        }
        d[b] = db;
        const __m256 vid = _mm256_set1_ps(id);
        for (int i = 0; i < f->qb; i += 16) {
            __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i), vid));
            __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8), vid));
            v0 = _mm256_max_epi32(_mm256_min_epi32(v0, hi), lo);
            v1 = _mm256_max_epi32(_mm256_min_epi32(v1, hi), lo);
            __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xD8);
            __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
            _mm_storeu_si128((__m128i *)(qs + b * f->qb + i), p8);
        }
    }
    for (int64_t j = 0; j < k / f->sb; j++) {
        __m256i s = _mm256_setzero_si256();
        for (int i = 0; i < f->sb; i += 16)
            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + j * f->sb + i))), _mm256_set1_epi16(1)));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1)));
        ac[j] = f->off ? -f->off * sum : sum;
    }
}

/* ---- float weights: 2 rows x 3 tokens, two 8-lane accumulators per output (k % 16) ---------- */

INLINE __m256 load_w8(const int type, const void *row, int64_t i) {
    if (type == OB_TYPE_F32) return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (type == OB_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float hsum16_ps(__m256 a0, __m256 a1) {
    __m256 t8 = _mm256_add_ps(a0, a1);
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

INLINE void ftile(const int type, const int RR, const int C, const ob_weight *w, int64_t r, const float *x, int t, float *y,
                  int64_t ldy, float *tail) {
    const int64_t k = w->n_in, kmain = k & ~(int64_t)15;
    const void *rows[2];
    for (int i = 0; i < RR; i++) rows[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
    __m256 acc[2][3][2];
    for (int i = 0; i < RR; i++)
        for (int c = 0; c < C; c++) acc[i][c][0] = acc[i][c][1] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < k; kk += 16) {
        const float *xs[3];
        const void *ws[2];
        int64_t off = kk;
        if (kk >= kmain) { /* the ragged end: zero-padded copies (16 floats per row and token) */
            int64_t n = k - kk;
            for (int i = 0; i < RR; i++) {
                float *tw = tail + 16 * i;
                memset(tw, 0, 64);
                const ob_type_traits *tt = ob_type_get(type);
                tt->to_float((const uint8_t *)rows[i] + (size_t)kk * (type == OB_TYPE_F32 ? 4 : 2), tw, n);
                ws[i] = tw;
            }
            for (int c = 0; c < C; c++) {
                float *tx = tail + 16 * (2 + c);
                memset(tx, 0, 64);
                memcpy(tx, x + (t + c) * k + kk, (size_t)n * 4);
                xs[c] = tx;
            }
            off = 0;
            UNROLL4 for (int h = 0; h < 2; h++) {
                __m256 wv[2];
                for (int i = 0; i < RR; i++) wv[i] = _mm256_loadu_ps((const float *)ws[i] + 8 * h);
                for (int c = 0; c < C; c++) {
                    __m256 xv = _mm256_loadu_ps(xs[c] + 8 * h);
                    for (int i = 0; i < RR; i++) acc[i][c][h] = _mm256_fmadd_ps(wv[i], xv, acc[i][c][h]);
                }
            }
            continue;
        }
        if (C == 1) /* 1 KiB ahead in each row: the hardware prefetcher alone keeps part of the bandwidth */
            for (int i = 0; i < RR; i++) _mm_prefetch((const char *)rows[i] + off * (type == OB_TYPE_F32 ? 4 : 2) + 1024, _MM_HINT_T0);
        UNROLL4 for (int h = 0; h < 2; h++) {
            __m256 wv[2];
            UNROLL4 for (int i = 0; i < RR; i++) wv[i] = load_w8(type, rows[i], off + 8 * h);
            UNROLL4 for (int c = 0; c < C; c++) {
                __m256 xv = _mm256_loadu_ps(x + (t + c) * k + off + 8 * h);
                UNROLL4 for (int i = 0; i < RR; i++) acc[i][c][h] = _mm256_fmadd_ps(wv[i], xv, acc[i][c][h]);
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int i = 0; i < RR; i++) y[(t + c) * ldy + i] = hsum16_ps(acc[i][c][0], acc[i][c][1]) * w->scale;
}

INLINE void gemm_f_type(const int type, const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y,
                        int64_t ldy, float *wbuf) {
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
        int t = 0;
        for (; t + 3 <= n; t += 3) ftile(type, 2, 3, w, r, x, t, y + (r - r0), ldy, wbuf);
        for (; t < n; t++) ftile(type, 2, 1, w, r, x, t, y + (r - r0), ldy, wbuf);
    }
    for (; r < r1; r++) {
        int t = 0;
        for (; t + 3 <= n; t += 3) ftile(type, 1, 3, w, r, x, t, y + (r - r0), ldy, wbuf);
        for (; t < n; t++) ftile(type, 1, 1, w, r, x, t, y + (r - r0), ldy, wbuf);
    }
}

static void gemm_f32(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_F32, w, r0, r1, x, n, y, ldy, wb);
}
static void gemm_f16(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_F16, w, r0, r1, x, n, y, ldy, wb);
}
static void gemm_bf16(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_BF16, w, r0, r1, x, n, y, ldy, wb);
}

/* ---- attention helpers (16 partial sums as two 8-lane halves, zero-padded ends) -------------- */

static float dot_f32(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    if (i < n) {
        float ta[16] = {0}, tb[16] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * 4);
        memcpy(tb, b + i, (size_t)(n - i) * 4);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ta), _mm256_loadu_ps(tb), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(ta + 8), _mm256_loadu_ps(tb + 8), s1);
    }
    return hsum16_ps(s0, s1);
}

static float dot_f16(const float *a, const uint16_t *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8))), s1);
    }
    if (i < n) {
        float ta[16] = {0};
        uint16_t tb[16] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * 4);
        memcpy(tb, b + i, (size_t)(n - i) * 2);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ta), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tb)), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(ta + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(tb + 8))), s1);
    }
    return hsum16_ps(s0, s1);
}

static void f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = ob_fp16_to_fp32(src[i]);
}

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = ob_fp32_to_fp16(src[i]);
}

static void axpy(float *y, float a, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = __builtin_fmaf(a, x[i], y[i]);
}

static void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = __builtin_fmaf(a, ob_fp16_to_fp32(x[i]), y[i]);
}

/* ---- row ops ---------------------------------------------------------------------------------- */

static void rms_row(const float *x, const float *w, float *y, int dim, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int k = 0;
    for (; k + 8 <= dim; k += 8) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + k)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + k + 4));
        s0 = _mm256_fmadd_pd(a, a, s0);
        s1 = _mm256_fmadd_pd(b, b, s1);
    }
    __m256d t = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; k < dim; k++) ss += (double)x[k] * x[k];
    const float inv = (float)(1.0 / __builtin_sqrt(ss / dim + eps));
    const __m256 vi = _mm256_set1_ps(inv);
    for (k = 0; k + 8 <= dim; k += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k), vi);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + k));
        _mm256_storeu_ps(y + k, v);
    }
    for (; k < dim; k++) y[k] = x[k] * inv * (w ? w[k] : 1.0f);
}

static void aq_row(float *x, int dim) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vm = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= dim; k += 8) vm = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + k), absm), vm);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float mx = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    for (; k < dim; k++) mx = __builtin_fmaxf(mx, __builtin_fabsf(x[k]));
    if (mx < 1e-5f) mx = 1e-5f;
    const float sf = (1.0f / mx) * 127.0f;
    const __m256 s = _mm256_set1_ps(sf), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    for (k = 0; k + 8 <= dim; k += 8) {
        __m256 q = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_max_ps(_mm256_min_ps(q, hi), lo);
        _mm256_storeu_ps(x + k, _mm256_div_ps(q, s));
    }
    for (; k < dim; k++) {
        float q = __builtin_nearbyintf(x[k] * sf);
        q = q > 127 ? 127 : q < -128 ? -128 : q;
        x[k] = q / sf;
    }
}

/* e^x as in kernels_avx512.c, 2^n built in the exponent field (x clamped to the normal range). */
INLINE __m256 exp_ps(__m256 x) {
    const __m256 c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 v = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(v, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static void glu(int act, float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i), a;
        if (act == 0) {
            a = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(zero, g))));
        } else {
            __m256 r = _mm256_max_ps(g, zero);
            a = _mm256_mul_ps(r, r);
        }
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(a, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i], r = g > 0 ? g : 0;
        gate[i] = (act == 0 ? g / (1.0f + __builtin_expf(-g)) : r * r) * up[i];
    }
}

static void add(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static const ob_kernels table = {
    .name = TABLE_NAME,
    .R = 8,
    .quant_row = quant_row,
    .gemv = {[OB_TYPE_Q8_0] = gemv_q8_0, [OB_TYPE_Q4_0] = gemv_q4_0, [OB_TYPE_TQ2_0] = gemv_tq2_0,
             [OB_TYPE_TQ1_0] = gemv_tq1_0, [OB_TYPE_I2_S] = gemv_i2_s, [OB_TYPE_Q4_K] = gemv_q4_K,
             [OB_TYPE_Q5_K] = gemv_q5_K, [OB_TYPE_Q6_K] = gemv_q6_K, [OB_TYPE_Q4_1] = ob_kgemv_generic,
             [OB_TYPE_Q5_0] = ob_kgemv_generic, [OB_TYPE_Q5_1] = ob_kgemv_generic, [OB_TYPE_IQ4_NL] = ob_kgemv_generic,
             [OB_TYPE_MXFP4] = ob_kgemv_generic, [OB_TYPE_Q2_K] = ob_kgemv_generic, [OB_TYPE_Q3_K] = ob_kgemv_generic,
             [OB_TYPE_IQ4_XS] = ob_kgemv_generic},
    .pack = {[OB_TYPE_Q8_0] = ob_kpack_generic, [OB_TYPE_Q4_0] = ob_kpack_generic, [OB_TYPE_TQ2_0] = ob_kpack_generic,
             [OB_TYPE_TQ1_0] = ob_kpack_generic, [OB_TYPE_I2_S] = ob_kpack_generic, [OB_TYPE_Q4_K] = ob_kpack_generic,
             [OB_TYPE_Q5_K] = ob_kpack_generic, [OB_TYPE_Q6_K] = ob_kpack_generic, [OB_TYPE_Q4_1] = ob_kpack_generic,
             [OB_TYPE_Q5_0] = ob_kpack_generic, [OB_TYPE_Q5_1] = ob_kpack_generic, [OB_TYPE_IQ4_NL] = ob_kpack_generic,
             [OB_TYPE_MXFP4] = ob_kpack_generic, [OB_TYPE_Q2_K] = ob_kpack_generic, [OB_TYPE_Q3_K] = ob_kpack_generic,
             [OB_TYPE_IQ4_XS] = ob_kpack_generic},
    .gemm = gemm,
    .gemm_f = {[OB_TYPE_F32] = gemm_f32, [OB_TYPE_F16] = gemm_f16, [OB_TYPE_BF16] = gemm_bf16},
    .rms_row = rms_row,
    .aq_row = aq_row,
    .glu = glu,
    .add = add,
    .dot_f32 = dot_f32,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .axpy = axpy,
    .axpy_f16 = axpy_f16,
    .dot_f16 = dot_f16,
};

const ob_kernels *TABLE_FN(void) { return &table; }

#else
#ifdef OB_AVXVNNI
const ob_kernels *ob_kernels_avxvnni_table(void) { return 0; }
#else
const ob_kernels *ob_kernels_avx2_table(void) { return 0; }
#endif
#endif
