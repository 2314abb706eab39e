/* quant_ref_k.c — reference layouts of the 256-element super-block types q2_K, q3_K, q4_K,
 * q5_K, q6_K and iq4_xs: dequantization bit-identical to llama.cpp's dequantize_row_*, and
 * quantization through the searches of quant_search.c.
 *
 * Owns: where every code lives in those blocks (scales packed in 4, 6 or 8 bits, high bits
 * in separate masks) and the decoder arithmetic, written operation for operation as llama.cpp
 * evaluates it (scale products first, then level times scale, then the offset), since a
 * different order rounds differently. tests/unit/test_quant_more.c checks the decoders against
 * hashes of llama.cpp's output and the quantizers' error against llama.cpp's.
 * Does not own: choosing the codes (quant_search.c), the type table (quant.c).
 *
 * The quantizers here are not byte-identical to llama.cpp's (those are heuristics; ours
 * minimise the weighted squared error of the decoded values, see quant_search.c): any
 * decoder reads them, and their error is at most llama.cpp's on the data we measured.
 */
#include <assert.h>
#include <math.h>

#include "format/quant_int.h"
#include "format/quant_search.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K OB_QK_K

/* Quantizes n values super-block by super-block: weights (the importance values when given,
 * else 1), the search, then pack() writes the codes into the type's layout. */
typedef void (*kq_pack_fn)(const ob_kq_codes *c, void *blk);

static void kq_quantize(const ob_kq_spec *sp, size_t block_bytes, kq_pack_fn pack, const float *src, void *dst, int64_t n,
                        const float *imp) {
    assert(n % QK_K == 0);
    uint8_t *b = dst;
    float w[QK_K];
    ob_kq_codes c;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b += block_bytes, src += QK_K, imp = imp ? imp + QK_K : NULL) {
        for (int i = 0; i < QK_K; i++) w[i] = imp ? imp[i] : 1.0f;
        ob_kq_search(sp, src, w, &c);
        pack(&c, b);
    }
}

/* ---- the 12-byte scale/min packing of q4_K and q5_K ------------------------------------
 * Eight 6-bit scales and eight 6-bit mins. Sub-blocks 0-3 keep both whole in the low 6 bits
 * of bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 keep their low 4 bits as the nibbles of
 * bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-3 (scale) and 4-7 (min). */

static void k4_scale_min(int j, const uint8_t q[12], int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void k4_pack_scales(const int sc[8], const int mc[8], uint8_t q[12]) {
    memset(q, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] |= (uint8_t)sc[j];
            q[j + 4] |= (uint8_t)mc[j];
        } else {
            q[j + 4] = (uint8_t)((sc[j] & 0x0f) | ((mc[j] & 0x0f) << 4));
            q[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            q[j] |= (uint8_t)((mc[j] >> 4) << 6);
        }
    }
}

/* ---- q2_K: 16 x 16 elements, 2-bit levels, 4-bit scale and min codes (84 bytes) --------
 * value = (d * sc) * L - (dmin * mc). Byte l of a 32-byte quarter-group holds four elements
 * 32 apart in its bit pairs (0-1, 2-3, 4-5, 6-7), so a 128-element half unpacks with shifts. */

typedef struct {
    uint8_t scales[16]; /* [16] low nibble: scale code, high nibble: min code */
    uint8_t qs[64];     /* [2 halves][32 bytes][4 x 2 bits] */
    uint8_t d[2], dmin[2];
} q2_K_block;
_Static_assert(sizeof(q2_K_block) == 84, "q2_K block must be 84 bytes, as in GGUF");

/* 2-bit fields: element e of the super-block is byte (e / 128) * 32 + e % 32, bit pair (e % 128) / 32. */
static inline int two_bits(const uint8_t *qs, int e) { return (qs[(e >> 7) * 32 + (e & 31)] >> (2 * ((e & 127) >> 5))) & 3; }

static void pack_two_bits(const uint8_t L[QK_K], uint8_t qs[64]) {
    memset(qs, 0, 64);
    for (int e = 0; e < QK_K; e++) qs[(e >> 7) * 32 + (e & 31)] |= (uint8_t)((L[e] & 3) << (2 * ((e & 127) >> 5)));
}

void ob_dequant_q2_K(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const q2_K_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++, dst += QK_K) {
        const float d = ob_half_load(b->d), dmin = ob_half_load(b->dmin);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)(b->scales[j] & 0x0f), ml = dmin * (float)(b->scales[j] >> 4);
            for (int i = 16 * j; i < 16 * j + 16; i++) dst[i] = dl * (float)two_bits(b->qs, i) - ml;
        }
    }
}

static void pack_q2_K(const ob_kq_codes *c, void *blk) {
    q2_K_block *b = blk;
    for (int j = 0; j < 16; j++) b->scales[j] = (uint8_t)(c->sc[j] | (c->mc[j] << 4));
    pack_two_bits(c->L, b->qs);
    ob_half_store(b->d, c->d);
    ob_half_store(b->dmin, c->dmin);
}

void ob_quant_q2_K_w(const float *src, void *dst, int64_t n, const float *imp) {
    static const ob_kq_spec spec = {16, 16, {NULL, 0, 0, 0}, 3, 0, 15, 15, 0};
    kq_quantize(&spec, sizeof(q2_K_block), pack_q2_K, src, dst, n, imp);
}

void ob_quant_q2_K(const float *src, void *dst, int64_t n) { ob_quant_q2_K_w(src, dst, n, NULL); }

/* ---- q3_K: 16 x 16 elements, levels -4..3, signed 6-bit scale codes (110 bytes) --------
 * value = (d * (code - 32)) * (level), level = low 2 bits + 4 * high bit - 4. The low two
 * bits are packed like q2_K's; the high bit of element e is bit e / 32 of hmask[e % 32].
 * Scale codes (biased by 32): low nibbles in bytes 0-7 (sub-blocks 0-7 low, 8-15 high
 * nibble), top two bits of sub-block j in byte 8 + j % 4 at bit 2 * (j / 4). */

typedef struct {
    uint8_t hmask[32];  /* [32] bit k of byte l: high bit of element 32 * k + l */
    uint8_t qs[64];     /* low two bits, as q2_K */
    uint8_t scales[12]; /* 16 six-bit codes, biased by 32 */
    uint8_t d[2];
} q3_K_block;
_Static_assert(sizeof(q3_K_block) == 110, "q3_K block must be 110 bytes, as in GGUF");

static int q3_scale_code(const uint8_t s[12], int j) {
    int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
    return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

void ob_dequant_q3_K(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const q3_K_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++, dst += QK_K) {
        const float d = ob_half_load(b->d);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)q3_scale_code(b->scales, j);
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                int hi = (b->hmask[e & 31] >> (e >> 5)) & 1;
                dst[e] = dl * (float)(two_bits(b->qs, e) - (hi ? 0 : 4));
            }
        }
    }
}

static void pack_q3_K(const ob_kq_codes *c, void *blk) {
    q3_K_block *b = blk;
    memset(b->scales, 0, 12);
    for (int j = 0; j < 16; j++) {
        int l = c->sc[j] + 32;
        b->scales[j < 8 ? j : j - 8] |= (uint8_t)((l & 0x0f) << (j < 8 ? 0 : 4));
        b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
    memset(b->hmask, 0, 32);
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; e++) { /* c->L is the level index 0..7 = level + 4 */
        if (c->L[e] > 3) b->hmask[e & 31] |= (uint8_t)(1u << (e >> 5));
        low[e] = c->L[e] & 3;
    }
    pack_two_bits(low, b->qs);
    ob_half_store(b->d, c->d);
}

void ob_quant_q3_K_w(const float *src, void *dst, int64_t n, const float *imp) {
    static const ob_kq_spec spec = {16, 16, {NULL, 8, -4, 3}, 0, -32, 31, 0, 0};
    kq_quantize(&spec, sizeof(q3_K_block), pack_q3_K, src, dst, n, imp);
}

void ob_quant_q3_K(const float *src, void *dst, int64_t n) { ob_quant_q3_K_w(src, dst, n, NULL); }

/* ---- q4_K: 8 x 32 elements, 4-bit levels, 6-bit scale and min codes (144 bytes) --------
 * value = (d * sc) * L - (dmin * m). Each 64-element chunk is 32 bytes: element l in the low
 * nibble of byte l, element 32 + l in the high nibble. */

typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12];
    uint8_t qs[128];    /* [4 chunks][32 bytes] */
} q4_K_block;
_Static_assert(sizeof(q4_K_block) == 144, "q4_K block must be 144 bytes, as in GGUF");

static const ob_kq_spec q4_K_spec = {8, 32, {NULL, 0, 0, 0}, 15, 0, 63, 63, 0};

/* One q4_K / q5_K super-block (qh NULL for q4_K): eight sub-blocks of 32, the 64 elements
 * of chunk c in qs[32c..32c+31] (low nibbles first), fifth bits at qh bit 2c / 2c + 1. */
static void k45_decode(const uint8_t dh[2], const uint8_t mh[2], const uint8_t scales[12], const uint8_t *qh,
                       const uint8_t *qs, float *dst) {
    const float d = ob_half_load(dh), dmin = ob_half_load(mh);
    for (int c = 0; c < 4; c++) {
        int sc, m;
        k4_scale_min(2 * c, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        k4_scale_min(2 * c + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        const uint8_t *q = qs + 32 * c, u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
        for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((q[l] & 0x0f) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
    }
}

/* The codes of one q4_K / q5_K super-block into its fields (qh NULL for q4_K). */
static void k45_encode(const ob_kq_codes *c, uint8_t dh[2], uint8_t mh[2], uint8_t scales[12], uint8_t *qh, uint8_t *qs) {
    ob_half_store(dh, c->d);
    ob_half_store(mh, c->dmin);
    k4_pack_scales(c->sc, c->mc, scales);
    if (qh) memset(qh, 0, 32);
    for (int ch = 0; ch < 4; ch++)
        for (int l = 0; l < 32; l++) {
            int l1 = c->L[64 * ch + l], l2 = c->L[64 * ch + 32 + l];
            qs[32 * ch + l] = (uint8_t)((l1 & 0x0f) | ((l2 & 0x0f) << 4));
            if (qh) qh[l] |= (uint8_t)(((l1 >> 4) << (2 * ch)) | ((l2 >> 4) << (2 * ch + 1)));
        }
}

void ob_dequant_q4_K(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const q4_K_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++, dst += QK_K) k45_decode(b->d, b->dmin, b->scales, NULL, b->qs, dst);
}

static void pack_q4_K(const ob_kq_codes *c, void *blk) {
    q4_K_block *b = blk;
    k45_encode(c, b->d, b->dmin, b->scales, NULL, b->qs);
}

void ob_quant_q4_K_w(const float *src, void *dst, int64_t n, const float *imp) {
    kq_quantize(&q4_K_spec, sizeof(q4_K_block), pack_q4_K, src, dst, n, imp);
}

void ob_quant_q4_K(const float *src, void *dst, int64_t n) { ob_quant_q4_K_w(src, dst, n, NULL); }

/* ---- q5_K: q4_K plus a fifth bit per element (176 bytes) -------------------------------
 * The fifth bit of element l of chunk c is bit 2c of qh[l] (low-nibble half) or bit 2c + 1
 * (high-nibble half). */

typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} q5_K_block;
_Static_assert(sizeof(q5_K_block) == 176, "q5_K block must be 176 bytes, as in GGUF");

void ob_dequant_q5_K(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const q5_K_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++, dst += QK_K) k45_decode(b->d, b->dmin, b->scales, b->qh, b->qs, dst);
}

static void pack_q5_K(const ob_kq_codes *c, void *blk) {
    q5_K_block *b = blk;
    k45_encode(c, b->d, b->dmin, b->scales, b->qh, b->qs);
}

void ob_quant_q5_K_w(const float *src, void *dst, int64_t n, const float *imp) {
    static const ob_kq_spec spec = {8, 32, {NULL, 0, 0, 0}, 31, 0, 63, 63, 0};
    kq_quantize(&spec, sizeof(q5_K_block), pack_q5_K, src, dst, n, imp);
}

void ob_quant_q5_K(const float *src, void *dst, int64_t n) { ob_quant_q5_K_w(src, dst, n, NULL); }

/* ---- q6_K: 16 x 16 elements, levels -32..31, signed 8-bit scale codes (210 bytes) ------
 * value = (d * sc) * level. In each 128-element half, element l (< 32) and its siblings
 * l + 32, l + 64, l + 96 share: ql[l] (low nibbles of l and l + 64), ql[l + 32] (of l + 32
 * and l + 96) and qh[l] (their top two bits, in that order from bit 0). */

typedef struct {
    uint8_t ql[128];    /* [2 halves][64] */
    uint8_t qh[64];     /* [2 halves][32] */
    int8_t scales[16];
    uint8_t d[2];
} q6_K_block;
_Static_assert(sizeof(q6_K_block) == 210, "q6_K block must be 210 bytes, as in GGUF");

void ob_dequant_q6_K(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const q6_K_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++, dst += QK_K) {
        const float d = ob_half_load(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void pack_q6_K(const ob_kq_codes *c, void *blk) {
    q6_K_block *b = blk;
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = c->L + 128 * h; /* level index 0..63 = level + 32 */
        for (int l = 0; l < 32; l++) {
            b->ql[64 * h + l] = (uint8_t)((q[l] & 0x0f) | ((q[l + 64] & 0x0f) << 4));
            b->ql[64 * h + l + 32] = (uint8_t)((q[l + 32] & 0x0f) | ((q[l + 96] & 0x0f) << 4));
            b->qh[32 * h + l] = (uint8_t)((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6));
        }
    }
    for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)c->sc[j];
    ob_half_store(b->d, c->d);
}

void ob_quant_q6_K_w(const float *src, void *dst, int64_t n, const float *imp) {
    static const ob_kq_spec spec = {16, 16, {NULL, 64, -32, 31}, 0, -128, 127, 0, 0};
    kq_quantize(&spec, sizeof(q6_K_block), pack_q6_K, src, dst, n, imp);
}

void ob_quant_q6_K(const float *src, void *dst, int64_t n) { ob_quant_q6_K_w(src, dst, n, NULL); }

/* ---- iq4_xs: 8 x 32 elements on the iq4_nl grid, signed 6-bit scale codes (136 bytes) --
 * value = (d * (code - 32)) * grid[nibble]. Codes: low nibbles in scales_l (two per byte,
 * sub-block 2k low), top two bits in the 16-bit scales_h at bit 2j. Each sub-block's 16
 * bytes hold elements l (low nibble) and l + 16 (high nibble), like iq4_nl. */

typedef struct {
    uint8_t d[2];
    uint8_t scales_h[2]; /* little-endian uint16 */
    uint8_t scales_l[4];
    uint8_t qs[128];
} iq4_xs_block;
_Static_assert(sizeof(iq4_xs_block) == 136, "iq4_xs block must be 136 bytes, as in GGUF");

void ob_dequant_iq4_xs(const void *src, float *dst, int64_t n) {
    assert(n % QK_K == 0);
    const iq4_xs_block *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++) {
        const float d = ob_half_load(b->d);
        const unsigned sh = (unsigned)(b->scales_h[0] | (b->scales_h[1] << 8));
        for (int j = 0; j < 8; j++, dst += 32) {
            const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | (int)(((sh >> (2 * j)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = b->qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                dst[l] = dl * (float)ob_iq4nl_grid[q[l] & 0x0f];
                dst[l + 16] = dl * (float)ob_iq4nl_grid[q[l] >> 4];
            }
        }
    }
}

static void pack_iq4_xs(const ob_kq_codes *c, void *blk) {
    iq4_xs_block *b = blk;
    ob_half_store(b->d, c->d);
    unsigned sh = 0;
    memset(b->scales_l, 0, 4);
    for (int j = 0; j < 8; j++) {
        int ls = c->sc[j] + 32;
        b->scales_l[j / 2] |= (uint8_t)((ls & 0x0f) << (4 * (j % 2)));
        sh |= (unsigned)(ls >> 4) << (2 * j);
        for (int l = 0; l < 16; l++) b->qs[16 * j + l] = (uint8_t)(c->L[32 * j + l] | (c->L[32 * j + 16 + l] << 4));
    }
    b->scales_h[0] = (uint8_t)(sh & 0xff);
    b->scales_h[1] = (uint8_t)(sh >> 8);
}

void ob_quant_iq4_xs_w(const float *src, void *dst, int64_t n, const float *imp) {
    static const ob_kq_spec spec = {8, 32, {ob_iq4nl_grid, 16, 0, 0}, 0, -32, 31, 0, 0};
    kq_quantize(&spec, sizeof(iq4_xs_block), pack_iq4_xs, src, dst, n, imp);
}

void ob_quant_iq4_xs(const float *src, void *dst, int64_t n) { ob_quant_iq4_xs_w(src, dst, n, NULL); }
