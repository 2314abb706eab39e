/* kernels_amx.c — AMX-INT8 prompt kernels (Sapphire Rapids and later): the AVX-512 table with
 * its GEMM done by tile multiplies. Built with -mamx-tile -mamx-int8 and the AVX-512 flags, used
 * only when the CPU has AMX and Linux granted the tile state (kernels_common.c asks for it).
 *
 * Owns: gemm for groups of 16 tokens. A packed panel (16 weight rows, four codes per row per
 * 64-byte line) is exactly AMX's B-tile layout, and 16 tokens' int8 activations are an A tile,
 * so one TDPBSUD (s8 activations x u8 codes) computes a 16 tokens x 16 rows block of integer
 * sums over up to 64 elements. Each block's (or sub-block's) sums are stored and finished with
 * AVX-512 exactly as kernels.h's formula says, so results are bit-identical to every other table;
 * the remaining tokens (fewer than 16) go through the AVX-512 VNNI tiles. The K-quants with 256-
 * element blocks (all but q2_K) have their own panels (pack_kq, pack_ks: sub-block scales folded
 * into two weight planes) and kernel (run_k), which also takes the remaining tokens, with tiles
 * of fewer rows.
 * Does not own: decode kernels, packing other than pack_kq's and pack_ks's step and everything
 * else (the AVX-512 table's).
 */
#include <pthread.h>
#include <string.h>

#include "backend/cpu/kernels.h"

#if defined(__x86_64__) && defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define INLINE static inline __attribute__((always_inline))

typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles: 0-3 = C (16 tokens x 16 rows int32; C[2g + j] for token group g, panel j), 4-5 = A
 * (16 tokens x kc bytes, group g), 6-7 = B (kc/4 lines of 64 bytes, panel j). Four independent
 * accumulators keep the tile unit busy: one TDPBSUD's latency is several times its issue rate. */
static void configure(int kc, int rows) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 4; i++) c.rows[i] = (uint8_t)rows, c.colsb[i] = 64;
    for (int i = 4; i < 6; i++) c.rows[i] = (uint8_t)rows, c.colsb[i] = (uint16_t)kc;
    for (int i = 6; i < 8; i++) c.rows[i] = (uint8_t)(kc / 4), c.colsb[i] = 64;
    /* not _tile_loadconfig: GCC 12's macro tells the compiler only 8 bytes are read, and -O2 then
     * drops the stores that fill the rest of the configuration */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

INLINE __m512 kstep(__m512 acc, __m512i isum, __m512 dw, float da) {
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), dw), _mm512_set1_ps(da), acc);
}

/* Integer sums over elements [kk, kk + n) for TG groups of 16 tokens from t and PN panels into
 * cbuf[2g + j][16 tokens][16 rows]. */
INLINE void tile_sums(const int TG, const int PN, const ob_panel *p, const ob_q8act *a, int t, int64_t kk, int n,
                      const int kc, int32_t (*cbuf)[256]) {
    const int8_t *a0 = a->qs + (size_t)t * a->k + kk, *a1 = a0 + (size_t)16 * a->k;
    _tile_zero(0);
    if (PN > 1) _tile_zero(1);
    if (TG > 1) _tile_zero(2);
    if (TG > 1 && PN > 1) _tile_zero(3);
    for (int c = 0; c < n; c += kc) {
        _tile_loadd(4, a0 + c, a->k);
        if (TG > 1) _tile_loadd(5, a1 + c, a->k);
        _tile_loadd(6, p[0].codes + (kk + c) * 16, 64);
        if (PN > 1) _tile_loadd(7, p[1].codes + (kk + c) * 16, 64);
        _tile_dpbsud(0, 4, 6);
        if (PN > 1) _tile_dpbsud(1, 4, 7);
        if (TG > 1) _tile_dpbsud(2, 5, 6);
        if (TG > 1 && PN > 1) _tile_dpbsud(3, 5, 7);
    }
    _tile_stored(0, cbuf[0], 64);
    if (PN > 1) _tile_stored(1, cbuf[1], 64);
    if (TG > 1) _tile_stored(2, cbuf[2], 64);
    if (TG > 1 && PN > 1) _tile_stored(3, cbuf[3], 64);
}

INLINE void block(const int QB, const int SB, const int OFF, const int SC, const int MN, const int TG, const int PN,
                  const ob_panel *p, const ob_q8act *a, int t, float *y, int64_t ldy) {
    const int kc = SB < 64 ? SB : 64;
    const int64_t k = a->k, nb = k / QB, nsb = k / SB, nsub = QB / SB;
    _Alignas(64) int32_t cbuf[4][256], ibuf[4][256];
    _Alignas(64) float fbuf[4][256];
    memset(fbuf, 0, sizeof fbuf);
    for (int64_t b = 0; b < nb; b++) {
        if (!SC) {
            tile_sums(TG, PN, p, a, t, b * QB, QB, kc, cbuf);
        } else {
            for (int j = 0; j < nsub; j++) {
                const int64_t js = b * nsub + j;
                tile_sums(TG, PN, p, a, t, js * SB, SB, kc, cbuf);
                for (int g = 0; g < TG; g++)
                    for (int pn = 0; pn < PN; pn++) {
                        const __m512i scv = _mm512_load_si512(p[pn].sc + js * 16);
                        int32_t *cb = cbuf[2 * g + pn], *ib = ibuf[2 * g + pn];
                        for (int m = 0; m < 16; m++) {
                            __m512i v = _mm512_load_si512(cb + 16 * m);
                            if (OFF) v = _mm512_add_epi32(v, _mm512_set1_epi32(a->ac[(size_t)(t + 16 * g + m) * nsb + js]));
                            v = _mm512_mullo_epi32(v, scv);
                            if (j) v = _mm512_add_epi32(v, _mm512_load_si512(ib + 16 * m));
                            _mm512_store_si512(ib + 16 * m, v);
                        }
                    }
            }
        }
        for (int g = 0; g < TG; g++)
            for (int pn = 0; pn < PN; pn++) {
                const int32_t *is = SC ? ibuf[2 * g + pn] : cbuf[2 * g + pn];
                float *fb = fbuf[2 * g + pn];
                const __m512 dw = _mm512_load_ps(p[pn].dw + b * 16);
                for (int m = 0; m < 16; m++) {
                    const size_t tok = (size_t)(t + 16 * g + m);
                    __m512i v = _mm512_load_si512(is + 16 * m);
                    if (OFF && !SC) v = _mm512_add_epi32(v, _mm512_set1_epi32(a->ac[tok * nsb + b]));
                    __m512 f = kstep(_mm512_load_ps(fb + 16 * m), v, dw, a->d[tok * nb + b]);
                    if (MN) {
                        __m512i s = _mm512_setzero_si512();
                        for (int j = 0; j < nsub; j++)
                            s = _mm512_add_epi32(s, _mm512_mullo_epi32(_mm512_load_si512(p[pn].mn + (b * nsub + j) * 16),
                                                                       _mm512_set1_epi32(a->ac[tok * nsb + b * nsub + j])));
                        f = kstep(f, s, _mm512_load_ps(p[pn].dm + b * 16), a->d[tok * nb + b]);
                    }
                    _mm512_store_ps(fb + 16 * m, f);
                }
            }
    }
    for (int g = 0; g < TG; g++)
        for (int pn = 0; pn < PN; pn++) {
            const __mmask16 sm = (__mmask16)((1u << p[pn].nr) - 1);
            const __m512 ts = _mm512_set1_ps(p[pn].scale);
            for (int m = 0; m < 16; m++)
                _mm512_mask_storeu_ps(y + (int64_t)(16 * g + m) * ldy + 16 * pn, sm, _mm512_mul_ps(_mm512_load_ps(fbuf[2 * g + pn] + 16 * m), ts));
        }
}

INLINE void run(const int QB, const int SB, const int OFF, const int SC, const int MN, const ob_kfmt *f, const ob_panel *p,
                int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    configure(SB < 64 ? SB : 64, 16);
    const int tfull = t0 + (t1 - t0) / 16 * 16;
    for (int i = 0; i < np; i += 2) {
        float *yp = y + (int64_t)i * 16;
        int t = t0;
        if (np - i >= 2) {
            for (; t + 32 <= tfull; t += 32) block(QB, SB, OFF, SC, MN, 2, 2, p + i, a, t, yp + (int64_t)(t - t0) * ldy, ldy);
            if (t < tfull) block(QB, SB, OFF, SC, MN, 1, 2, p + i, a, t, yp + (int64_t)(t - t0) * ldy, ldy);
        } else {
            for (; t + 32 <= tfull; t += 32) block(QB, SB, OFF, SC, MN, 2, 1, p + i, a, t, yp + (int64_t)(t - t0) * ldy, ldy);
            if (t < tfull) block(QB, SB, OFF, SC, MN, 1, 1, p + i, a, t, yp + (int64_t)(t - t0) * ldy, ldy);
        }
    }
    if (tfull < t1) /* fewer than 16 tokens left: the VNNI tiles */
        for (int i = 0; i < np; i++)
            ob_kernels_avx512_table()->gemm(f, &p[i], a, tfull, t1, y + (int64_t)(tfull - t0) * ldy + (int64_t)i * 16, ldy);
}

#define RUN_FMT(NAME, QB, SB, OFF, SC, MN)                                                                   \
    static void NAME(const ob_kfmt *f, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, \
                     int64_t ldy) {                                                                          \
        run(QB, SB, OFF, SC, MN, f, p, np, a, t0, t1, y, ldy);                                               \
    }

RUN_FMT(amx_b32, 32, 32, 1, 0, 0)
RUN_FMT(amx_m32, 32, 32, 0, 0, 1)
RUN_FMT(amx_b128, 128, 128, 1, 0, 0)
RUN_FMT(amx_b256, 256, 256, 1, 0, 0)
RUN_FMT(amx_k2, 256, 16, 0, 1, 1)

/* ---- K-quants: sub-block scales folded into the weights -------------------------------------
 * kernels.h's isum = sum_j sc_j * sum_k (code_k - off) a_k over a 256-element block is
 * sum_k w_k a_k with w_k = (code_k - off) * sc_j(k). The pack splits w into two byte planes, so
 * two tiles at full depth (64 per TDPBSUD) give the same exact integer with no per-sub-block work:
 *  - with mins (q4_K, q5_K; off 0, sc <= 63, code <= 31; pack_kq): codes = code * (sc & 7),
 *    codes2 = code * (sc >> 3), both unsigned (at most 217): isum = C_lo + 8 * C_hi. The mins'
 *    sum_j mn_j * ac_j is 4 vpdpwssd per token on 16-bit pairs (mn <= 63, |ac| <= 32 * 127): mn
 *    holds (mn_2i | mn_2i+1 << 16) per row after pack_kq.
 *  - signed scales (q6_K, q3_K, iq4_xs: |w| <= 4096; pack_ks): codes = w & 255 (unsigned),
 *    codes2 = w >> 8 (signed, TDPBSSD): isum = C_lo + 256 * C_hi. The offset is inside w.
 * |isum| stays below 2^31 (at most 256 * 127 * (217 + 8 * 217), or 256 * 127 * (255 + 256 * 128)).
 * Tiles: C 2g (lo) and 2g+1 (hi) for token group g, A 4-5, B 6 (lo) and 7 (hi). A group of fewer
 * than 16 tokens runs with tiles configured to that many rows. */

INLINE void kq_block(const int MN, const int TG, const ob_panel *p, const ob_q8act *a, int t, int rows, float *y,
                     int64_t ldy) {
    const int64_t k = a->k, nb = k / 256, nsb = k / 32;
    _Alignas(64) int32_t cbuf[4][256];
    _Alignas(64) float fbuf[2][256];
    _Alignas(16) int32_t acp[32][4];
    memset(fbuf, 0, sizeof fbuf);
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *a0 = a->qs + (size_t)t * k + b * 256, *a1 = a0 + (size_t)16 * k;
        const uint8_t *lo = p->codes + b * 256 * 16, *hi = p->codes2 + b * 256 * 16;
        _tile_zero(0);
        _tile_zero(1);
        if (TG > 1) {
            _tile_zero(2);
            _tile_zero(3);
        }
        for (int c = 0; c < 256; c += 64) {
            _tile_loadd(4, a0 + c, k);
            if (TG > 1) _tile_loadd(5, a1 + c, k);
            _tile_loadd(6, lo + c * 16, 64);
            _tile_loadd(7, hi + c * 16, 64);
            _tile_dpbsud(0, 4, 6);
            if (MN) _tile_dpbsud(1, 4, 7);
            else _tile_dpbssd(1, 4, 7);
            if (TG > 1) {
                _tile_dpbsud(2, 5, 6);
                if (MN) _tile_dpbsud(3, 5, 7);
                else _tile_dpbssd(3, 5, 7);
            }
        }
        _tile_stored(0, cbuf[0], 64);
        _tile_stored(1, cbuf[1], 64);
        if (TG > 1) {
            _tile_stored(2, cbuf[2], 64);
            _tile_stored(3, cbuf[3], 64);
        }
        const int nt = 16 * (TG - 1) + rows;
        if (MN)
            for (int m = 0; m < nt; m++) /* activation sums of the block's 8 sub-blocks as 16-bit pairs */
                _mm_store_si128((__m128i *)acp[m], _mm256_cvtepi32_epi16(_mm256_loadu_si256((const __m256i *)(a->ac + (size_t)(t + m) * nsb + b * 8))));
        const __m512 dw = _mm512_load_ps(p->dw + b * 16);
        const __m512 dm = MN ? _mm512_load_ps(p->dm + b * 16) : dw;
        __m512i mn[4];
        if (MN)
            for (int j = 0; j < 4; j++) mn[j] = _mm512_load_si512(p->mn + b * 64 + 16 * j);
        for (int g = 0; g < TG; g++)
            for (int m = 0; m < (g == TG - 1 ? rows : 16); m++) {
                const int i = 16 * g + m;
                const float da = a->d[(size_t)(t + i) * nb + b];
                const __m512i isum = _mm512_add_epi32(_mm512_load_si512(cbuf[2 * g] + 16 * m),
                                                      _mm512_slli_epi32(_mm512_load_si512(cbuf[2 * g + 1] + 16 * m), MN ? 3 : 8));
                float *fb = fbuf[g] + 16 * m;
                __m512 f = kstep(_mm512_load_ps(fb), isum, dw, da);
                if (MN) {
                    __m512i s = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn[0], _mm512_set1_epi32(acp[i][0]));
                    s = _mm512_dpwssd_epi32(s, mn[1], _mm512_set1_epi32(acp[i][1]));
                    s = _mm512_dpwssd_epi32(s, mn[2], _mm512_set1_epi32(acp[i][2]));
                    s = _mm512_dpwssd_epi32(s, mn[3], _mm512_set1_epi32(acp[i][3]));
                    f = kstep(f, s, dm, da);
                }
                _mm512_store_ps(fb, f);
            }
    }
    const __mmask16 sm = (__mmask16)((1u << p->nr) - 1);
    const __m512 ts = _mm512_set1_ps(p->scale);
    for (int g = 0; g < TG; g++)
        for (int m = 0; m < (g == TG - 1 ? rows : 16); m++)
            _mm512_mask_storeu_ps(y + (int64_t)(16 * g + m) * ldy, sm, _mm512_mul_ps(_mm512_load_ps(fbuf[g] + 16 * m), ts));
}

INLINE void run_k(const int MN, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    configure(64, 16);
    const int tfull = t0 + (t1 - t0) / 16 * 16;
    for (int i = 0; i < np; i++) {
        float *yp = y + (int64_t)i * 16;
        int t = t0;
        for (; t + 32 <= tfull; t += 32) kq_block(MN, 2, p + i, a, t, 16, yp + (int64_t)(t - t0) * ldy, ldy);
        if (t < tfull) kq_block(MN, 1, p + i, a, t, 16, yp + (int64_t)(t - t0) * ldy, ldy);
    }
    if (tfull < t1) {
        configure(64, t1 - tfull);
        for (int i = 0; i < np; i++) kq_block(MN, 1, p + i, a, tfull, t1 - tfull, y + (int64_t)(tfull - t0) * ldy + (int64_t)i * 16, ldy);
    }
}

static void amx_kq(const ob_kfmt *f, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    run_k(1, p, np, a, t0, t1, y, ldy);
}

static void amx_ks(const ob_kfmt *f, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    run_k(0, p, np, a, t0, t1, y, ldy);
}

/* The AVX-512 panel, then code * (sc & 7) into codes and code * (sc >> 3) into codes2: a 16-bit
 * multiply by the scale (in both halves of each row's dword) multiplies both bytes of a word
 * exactly, as no product reaches 256. Then the mins as 16-bit pairs, in place. */
static void pack_kq(const ob_weight *w, int64_t r0, ob_panel *p) {
    ob_kernels_avx512_table()->pack[w->type](w, r0, p);
    const int64_t nsb = w->n_in / 32;
    for (int64_t j = 0; j < nsb; j++) {
        const __m512i sc = _mm512_load_si512(p->sc + j * 16);
        const __m512i slo = _mm512_and_si512(sc, _mm512_set1_epi32(7)), shi = _mm512_srli_epi32(sc, 3);
        const __m512i wlo = _mm512_or_si512(slo, _mm512_slli_epi32(slo, 16)), whi = _mm512_or_si512(shi, _mm512_slli_epi32(shi, 16));
        for (int l = 0; l < 8; l++) {
            const size_t o = (size_t)(j * 8 + l) * 64;
            const __m512i c = _mm512_load_si512(p->codes + o);
            _mm512_store_si512(p->codes + o, _mm512_mullo_epi16(c, wlo));
            _mm512_store_si512(p->codes2 + o, _mm512_mullo_epi16(c, whi));
        }
    }
    for (int64_t j = 0; j < nsb / 2; j++) /* reads 2j and 2j + 1, never below j: in place is safe */
        _mm512_store_si512(p->mn + j * 16, _mm512_or_si512(_mm512_load_si512(p->mn + 2 * j * 16),
                                                           _mm512_slli_epi32(_mm512_load_si512(p->mn + (2 * j + 1) * 16), 16)));
}

/* The AVX-512 panel, then w = (code - off) * sc in 16 bits (even and odd bytes of each word
 * apart; sc in both halves of each row's dword), its low bytes into codes, high into codes2. */
static void pack_ks(const ob_weight *w, int64_t r0, ob_panel *p) {
    ob_kernels_avx512_table()->pack[w->type](w, r0, p);
    const ob_kfmt *f = ob_kfmt_get(w->type);
    const int64_t nsb = w->n_in / f->sb;
    const __m512i off = _mm512_set1_epi16((short)f->off), lo8 = _mm512_set1_epi16(0xff), hi8 = _mm512_set1_epi16((short)0xff00);
    for (int64_t j = 0; j < nsb; j++) {
        const __m512i sc = _mm512_load_si512(p->sc + j * 16);
        const __m512i s16 = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(sc, 16));
        for (int l = 0; l < f->sb / 4; l++) {
            const size_t o = (size_t)(j * (f->sb / 4) + l) * 64;
            const __m512i c = _mm512_load_si512(p->codes + o);
            const __m512i we = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(c, lo8), off), s16);
            const __m512i wo = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(c, 8), off), s16);
            _mm512_store_si512(p->codes + o, _mm512_or_si512(_mm512_and_si512(we, lo8), _mm512_slli_epi16(wo, 8)));
            _mm512_store_si512(p->codes2 + o, _mm512_or_si512(_mm512_srli_epi16(we, 8), _mm512_and_si512(wo, hi8)));
        }
    }
}

/* the same format classes as kernels_avx512.c's gemm */
static void gemm_np(const ob_kfmt *f, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    if (f->qb == 32) (f->has_mn ? amx_m32 : amx_b32)(f, p, np, a, t0, t1, y, ldy);
    else if (f->qb == 128) amx_b128(f, p, np, a, t0, t1, y, ldy);
    else if (!f->has_sc) amx_b256(f, p, np, a, t0, t1, y, ldy);
    else if (!f->has_mn) amx_ks(f, p, np, a, t0, t1, y, ldy);
    else (f->sb == 32 ? amx_kq : amx_k2)(f, p, np, a, t0, t1, y, ldy);
}

static void gemm(const ob_kfmt *f, const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    gemm_np(f, p, 1, a, t0, t1, y, ldy);
}

static ob_kernels table; /* the AVX-512 table with this gemm */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    table = *ob_kernels_avx512_table();
    table.name = "avx512-amx";
    table.gemm = gemm;
    table.gemm_np = gemm_np;
    table.pack[OB_TYPE_Q4_K] = pack_kq; /* the panels amx_kq reads */
    table.pack[OB_TYPE_Q5_K] = pack_kq;
    table.pack[OB_TYPE_Q6_K] = pack_ks; /* the panels amx_ks reads */
    table.pack[OB_TYPE_Q3_K] = pack_ks;
    table.pack[OB_TYPE_IQ4_XS] = pack_ks;
}

const ob_kernels *ob_kernels_amx_table(void) {
    if (!ob_kernels_avx512_table()) return NULL;
    pthread_once(&table_once, table_init);
    return &table;
}

#else
const ob_kernels *ob_kernels_amx_table(void) { return 0; }
#endif
