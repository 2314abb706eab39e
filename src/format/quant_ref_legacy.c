/* quant_ref_legacy.c — reference layouts of the 32-element types q4_1, q5_0, q5_1, mxfp4 and
 * iq4_nl: dequantization, and the round-to-nearest quantizers llama.cpp writes by default.
 *
 * Owns: the byte layout of those blocks and the arithmetic between floats and bytes. Dequant
 * must be bit-identical to llama.cpp's dequantize_row_* (files are shared, and fast kernels
 * are tested against these); the round-to-nearest quantizers (q4_1, q5_0, q5_1, mxfp4) are
 * byte-identical to its quantize_row_*_ref, which is what llama-quantize writes when no
 * importance matrix is given. tests/unit/test_quant_more.c checks both with hashes of
 * llama.cpp's own output. iq4_nl has no round-to-nearest form: its quantizer is a scale
 * search (quant_search.c), only its layout is here.
 * Does not own: the scale searches used with an importance matrix (quant_search.c), the type
 * table (quant.c).
 *
 * The conventions of quant_ref.c hold here too: n is a multiple of 32 (asserted), fp16 fields
 * are little-endian byte pairs, the scale used while quantizing is the fp32 value before its
 * rounding to fp16, and nothing is contracted into fused multiply-adds (the pragma is for
 * Clang; GCC does not contract in ISO C mode). Conversions float -> small integer go through
 * the same C casts llama.cpp uses, so even out-of-range values (a NaN or infinite input)
 * truncate the same way on the same compiler.
 */
#include <assert.h>
#include <float.h>
#include <math.h>

#include "format/quant_int.h"
#include "format/quant_search.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32 /* elements per block of every type in this file */

const int8_t ob_iq4nl_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Nibble packing shared by every type here: byte j holds element j (low nibble) and element
 * j + 16 (high nibble). The fifth bit of q5_0 / q5_1 sits in a 32-bit little-endian word,
 * bit i for element i. */
static void pack_nibbles(const uint8_t q[QK], uint8_t qs[QK / 2]) {
    for (int j = 0; j < QK / 2; j++) qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
}

static uint32_t fifth_bits(const uint8_t q[QK]) {
    uint32_t qh = 0;
    for (int i = 0; i < QK; i++) qh |= (uint32_t)((q[i] >> 4) & 1) << i;
    return qh;
}

/* ---- q4_1: 32 elements, 4-bit with a per-block minimum ---------------------------------
 * value[i] = nibble[i] * d + m, m the block minimum (so every nibble is >= 0 from below) and
 * d = (max - min) / 15. Rounding is truncation of (x - m) / d + 0.5, clamped to 15. */

typedef struct {
    uint8_t d[2];      /* fp16 step */
    uint8_t m[2];      /* fp16 minimum */
    uint8_t qs[QK / 2];
} q4_1_block;          /* 20 bytes */
_Static_assert(sizeof(q4_1_block) == 20, "q4_1 block must be 20 bytes, as in GGUF");

void ob_dequant_q4_1(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const q4_1_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d = ob_half_load(b->d), m = ob_half_load(b->m);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)(b->qs[j] & 0x0f) * d + m;
            dst[j + QK / 2] = (float)(b->qs[j] >> 4) * d + m;
        }
    }
}

/* Smallest and largest value of a block; a NaN is skipped by both comparisons. */
static void min_max(const float *x, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int i = 0; i < QK; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    *mn = lo;
    *mx = hi;
}

void ob_quant_q4_1(const float *src, void *dst, int64_t n) {
    assert(n % QK == 0);
    q4_1_block *b = dst;
    uint8_t q[QK];
    for (int64_t ib = 0; ib < n / QK; ib++, b++, src += QK) {
        float mn, mx;
        min_max(src, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_half_store(b->d, d);
        ob_half_store(b->m, mn);
        for (int i = 0; i < QK; i++) {
            int8_t v = (int8_t)((src[i] - mn) * id + 0.5f);
            q[i] = (uint8_t)(v < 15 ? v : 15);
        }
        pack_nibbles(q, b->qs);
    }
}

/* ---- q5_0: 32 elements, 5-bit with an offset of 16 -------------------------------------
 * value[i] = (q[i] - 16) * d, with q0_4's scale convention: d = max / -16 where max is the
 * element of largest magnitude (the first on ties), so it lands exactly on q = 0. */

typedef struct {
    uint8_t d[2];      /* fp16 scale, usually negative */
    uint8_t qh[4];     /* bit i: the fifth bit of element i */
    uint8_t qs[QK / 2];
} q5_0_block;          /* 22 bytes */
_Static_assert(sizeof(q5_0_block) == 22, "q5_0 block must be 22 bytes, as in GGUF");

/* Element i's 5-bit value from the nibbles and the high-bit word. */
static inline int five_bit(const uint8_t qs[QK / 2], uint32_t qh, int i) {
    int lo = i < QK / 2 ? qs[i] & 0x0f : qs[i - QK / 2] >> 4;
    return lo | (int)(((qh >> i) & 1) << 4);
}

void ob_dequant_q5_0(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const q5_0_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d = ob_half_load(b->d);
        const uint32_t qh = ob_le32(b->qh);
        for (int i = 0; i < QK; i++) dst[i] = (float)(five_bit(b->qs, qh, i) - 16) * d;
    }
}

void ob_quant_q5_0(const float *src, void *dst, int64_t n) {
    assert(n % QK == 0);
    q5_0_block *b = dst;
    uint8_t q[QK];
    for (int64_t ib = 0; ib < n / QK; ib++, b++, src += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QK; i++)
            if (amax < fabsf(src[i])) { /* strict: the first of equal magnitudes; skips NaN */
                amax = fabsf(src[i]);
                max = src[i];
            }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_half_store(b->d, d);
        for (int i = 0; i < QK; i++) {
            int8_t v = (int8_t)(src[i] * id + 16.5f);
            q[i] = (uint8_t)(v < 31 ? v : 31);
        }
        pack_nibbles(q, b->qs);
        ob_put_le32(b->qh, fifth_bits(q));
    }
}

/* ---- q5_1: 32 elements, 5-bit with a per-block minimum ---------------------------------
 * value[i] = q[i] * d + m, d = (max - min) / 31; rounding truncates (x - m) / d + 0.5 without
 * a clamp (the largest element gives 31 + rounding noise < 31.5). */

typedef struct {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[QK / 2];
} q5_1_block;          /* 24 bytes */
_Static_assert(sizeof(q5_1_block) == 24, "q5_1 block must be 24 bytes, as in GGUF");

void ob_dequant_q5_1(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const q5_1_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d = ob_half_load(b->d), m = ob_half_load(b->m);
        const uint32_t qh = ob_le32(b->qh);
        for (int i = 0; i < QK; i++) dst[i] = (float)five_bit(b->qs, qh, i) * d + m;
    }
}

void ob_quant_q5_1(const float *src, void *dst, int64_t n) {
    assert(n % QK == 0);
    q5_1_block *b = dst;
    uint8_t q[QK];
    for (int64_t ib = 0; ib < n / QK; ib++, b++, src += QK) {
        float mn, mx;
        min_max(src, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        ob_half_store(b->d, d);
        ob_half_store(b->m, mn);
        for (int i = 0; i < QK; i++) q[i] = (uint8_t)((src[i] - mn) * id + 0.5f);
        pack_nibbles(q, b->qs);
        ob_put_le32(b->qh, fifth_bits(q));
    }
}

/* ---- mxfp4: 32 elements, OCP microscaling FP4 (e2m1) with a shared power-of-two scale ---
 * Each nibble indexes the e2m1 values doubled to integers (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives become 0..12), and the block scale byte e is an e8m0 exponent holding half
 * of 2^(e - 127), which undoes the doubling: value = grid[nibble] * 2^(e - 128).
 * Quantizing picks e = floor(log2(amax)) - 2 + 127, so amax lands in [4, 8) grid units, then
 * the nearest grid value per element (the first on ties: +0 before -0). */

static const int8_t mxfp4_grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

typedef struct {
    uint8_t e;          /* e8m0 exponent */
    uint8_t qs[QK / 2];
} mxfp4_block;          /* 17 bytes */
_Static_assert(sizeof(mxfp4_block) == 17, "mxfp4 block must be 17 bytes, as in GGUF");

/* 2^(e - 128) as a float: e = 0 and 1 give the subnormals 2^-128 and 2^-127. */
static float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void ob_dequant_mxfp4(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const mxfp4_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d = e8m0_half(b->e);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)mxfp4_grid[b->qs[j] & 0x0f] * d;
            dst[j + QK / 2] = (float)mxfp4_grid[b->qs[j] >> 4] * d;
        }
    }
}

static uint8_t mxfp4_nearest(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)mxfp4_grid[0] * d - x);
    for (int k = 1; k < 16; k++) {
        float e = fabsf((float)mxfp4_grid[k] * d - x);
        if (e < best_err) {
            best = k;
            best_err = e;
        }
    }
    return (uint8_t)best;
}

void ob_quant_mxfp4(const float *src, void *dst, int64_t n) {
    assert(n % QK == 0);
    mxfp4_block *b = dst;
    uint8_t q[QK];
    for (int64_t ib = 0; ib < n / QK; ib++, b++, src += QK) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++)
            if (amax < fabsf(src[i])) amax = fabsf(src[i]);
        /* log2f, not frexpf: just below a power of two log2f rounds up to the integer, and the
         * exponent llama.cpp stores follows that rounding. */
        b->e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = e8m0_half(b->e);
        for (int i = 0; i < QK; i++) q[i] = mxfp4_nearest(src[i], d);
        pack_nibbles(q, b->qs);
    }
}

/* ---- iq4_nl: 32 elements on the non-linear grid ob_iq4nl_grid -------------------------
 * value[i] = d * grid[nibble[i]], one fp16 scale per block. The quantizer is a search
 * (ob_quant_iq4_nl in quant_search.c); these helpers are its layout. */

typedef struct {
    uint8_t d[2];
    uint8_t qs[QK / 2];
} iq4_nl_block;         /* 18 bytes */
_Static_assert(sizeof(iq4_nl_block) == 18, "iq4_nl block must be 18 bytes, as in GGUF");

void ob_dequant_iq4_nl(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const iq4_nl_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d = ob_half_load(b->d);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)ob_iq4nl_grid[b->qs[j] & 0x0f];
            dst[j + QK / 2] = d * (float)ob_iq4nl_grid[b->qs[j] >> 4];
        }
    }
}

/* ---- weighted forms: the scale (and offset) chosen by search ----------------------------
 * Used for iq4_nl always, and for q4_0 / q4_1 / q5_0 / q5_1 when an importance matrix is
 * given (as llama.cpp does). Each block is a one-sub-block case of ob_kq_search: code 1, so
 * the super-scale is the block scale itself and it gets the same least-squares refit and
 * fp16-neighbour checks. */

static const ob_kq_spec spec_q4_0 = {1, QK, {NULL, 16, -8, 7}, 0, 1, 1, 0, 0};
static const ob_kq_spec spec_q5_0 = {1, QK, {NULL, 32, -16, 15}, 0, 1, 1, 0, 0};
static const ob_kq_spec spec_q4_1 = {1, QK, {NULL, 0, 0, 0}, 15, 1, 1, 1, 1};
static const ob_kq_spec spec_q5_1 = {1, QK, {NULL, 0, 0, 0}, 31, 1, 1, 1, 1};
static const ob_kq_spec spec_iq4_nl = {1, QK, {ob_iq4nl_grid, 16, 0, 0}, 0, 1, 1, 0, 0};

/* Weighted quantization of n values to one of the types above: each 32-element block
 * searched, then packed in the type's layout. w = the importance values, or 1 without. */
static void quant_w(int type, const float *src, void *dst, int64_t n, const float *imp) {
    assert(n % QK == 0);
    const ob_kq_spec *sp = type == OB_TYPE_Q4_0 ? &spec_q4_0 : type == OB_TYPE_Q4_1 ? &spec_q4_1 : type == OB_TYPE_Q5_0 ? &spec_q5_0
                         : type == OB_TYPE_Q5_1 ? &spec_q5_1 : &spec_iq4_nl;
    const size_t bytes = (size_t)ob_type_get(type)->type_size;
    uint8_t *b = dst;
    float w[QK];
    ob_kq_codes c;
    for (int64_t ib = 0; ib < n / QK; ib++, b += bytes, src += QK, imp = imp ? imp + QK : NULL) {
        for (int i = 0; i < QK; i++) w[i] = imp ? imp[i] : 1.0f;
        ob_kq_search(sp, src, w, &c);
        /* value = d * L + m for q4_1 / q5_1, while the search decodes d * L - dmin * mc */
        const float m = c.mc[0] ? -c.dmin : 0.0f;
        ob_half_store(b, c.d); /* every layout here starts with the fp16 scale */
        switch (type) {
        case OB_TYPE_Q4_1: ob_half_store(((q4_1_block *)b)->m, m); pack_nibbles(c.L, ((q4_1_block *)b)->qs); break;
        case OB_TYPE_Q5_0: pack_nibbles(c.L, ((q5_0_block *)b)->qs); ob_put_le32(((q5_0_block *)b)->qh, fifth_bits(c.L)); break;
        case OB_TYPE_Q5_1:
            ob_half_store(((q5_1_block *)b)->m, m);
            pack_nibbles(c.L, ((q5_1_block *)b)->qs);
            ob_put_le32(((q5_1_block *)b)->qh, fifth_bits(c.L));
            break;
        default: pack_nibbles(c.L, b + 2); break; /* q4_0 / iq4_nl: level index = the stored nibble */
        }
    }
}

void ob_quant_q4_0_w(const float *src, void *dst, int64_t n, const float *imp) { quant_w(OB_TYPE_Q4_0, src, dst, n, imp); }
void ob_quant_q4_1_w(const float *src, void *dst, int64_t n, const float *imp) { quant_w(OB_TYPE_Q4_1, src, dst, n, imp); }
void ob_quant_q5_0_w(const float *src, void *dst, int64_t n, const float *imp) { quant_w(OB_TYPE_Q5_0, src, dst, n, imp); }
void ob_quant_q5_1_w(const float *src, void *dst, int64_t n, const float *imp) { quant_w(OB_TYPE_Q5_1, src, dst, n, imp); }
void ob_quant_iq4_nl_w(const float *src, void *dst, int64_t n, const float *imp) { quant_w(OB_TYPE_IQ4_NL, src, dst, n, imp); }

void ob_quant_iq4_nl(const float *src, void *dst, int64_t n) { ob_quant_iq4_nl_w(src, dst, n, NULL); }
