/* quant_ref.c — plain-C reference quantize / dequantize for the types this build computes.
 *
 * Owns: the byte layout of the f32, f16, bf16, q8_0, q4_0, tq1_0 and tq2_0 blocks, and the
 * arithmetic that turns floats into those bytes and back. Both must be bit-identical to
 * llama.cpp's reference routines, because GGUF files written by one engine are read by the
 * other and because every fast kernel (CPU SIMD, CUDA) is tested against these routines.
 * tests/unit/test_quant.c checks that identity with hashes taken from llama.cpp itself.
 * Does not own: the type table and half-precision conversions (quant.c), fast kernels
 * (backends), or choosing a type per tensor (convert / quantize tools).
 *
 * Conventions shared by every routine below:
 *  - n is a multiple of the type's block size (the callers check it against the type table);
 *    these are programmer contracts, so they are asserted, not reported.
 *  - Block scales are fp16 stored as two little-endian bytes (GGUF is little-endian). Keeping
 *    them as bytes gives every block struct alignment 1, so a block may start at any byte of
 *    a mapped file and the layout does not depend on the host's byte order.
 *  - The scale used while quantizing is the fp32 value before its rounding to fp16, exactly
 *    as llama.cpp does; only the stored scale is rounded. Dequantizing uses the stored one.
 *  - The arithmetic must not be contracted into fused multiply-adds (q4_0's x*id + 8.5f could
 *    then round differently from llama.cpp, whose build does not contract). GCC keeps
 *    products and sums apart in ISO mode (the Makefile's -std=c17) and ignores the standard
 *    pragma; Clang contracts within an expression whenever FMA is enabled unless told not to,
 *    hence the pragma below.
 *  - amax scans keep llama.cpp's comparison direction so that even a NaN in the input moves
 *    the scale the way it does there.
 */
#include "format/quant.h"
#include "format/quant_int.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- shared helpers ---------------------------------------------------------------- */

static inline float half_load(const uint8_t h[2]) {
    return ob_fp16_to_fp32((uint16_t)(h[0] | (h[1] << 8)));
}

static inline void half_store(uint8_t h[2], float f) {
    uint16_t v = ob_fp32_to_fp16(f);
    h[0] = (uint8_t)(v & 0xff);
    h[1] = (uint8_t)(v >> 8);
}

/* Largest |x| over n values. The form "best > a ? best : a" matters only for NaN: it lets a
 * NaN replace the running maximum and be replaced again by the next ordinary value, which is
 * what llama.cpp's MAX(amax, fabsf(v)) does; fmaxf would ignore the NaN instead. */
static float abs_max(const float *x, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        best = best > a ? best : a;
    }
    return best;
}

/* ---- f32: a copy, so the type table has no hole for the unquantized case ------------- */

void ob_dequant_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void ob_quant_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* ---- f16 / bf16: one value per element, two little-endian bytes each ----------------- */

void ob_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = half_load(s + 2 * i);
}

void ob_quant_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) half_store(d + 2 * i, src[i]);
}

void ob_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ob_bf16_to_fp32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
}

void ob_quant_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t v = ob_fp32_to_bf16(src[i]);
        d[2 * i] = (uint8_t)(v & 0xff);
        d[2 * i + 1] = (uint8_t)(v >> 8);
    }
}

/* ---- q8_0: 32 elements, symmetric 8-bit ------------------------------------------------
 * value[i] = qs[i] * d, with d = amax / 127 so the largest element maps to +-127 and -128 is
 * never produced. Rounding is roundf (halves away from zero). */

#define QK8_0 32

typedef struct {
    uint8_t d[2];      /* fp16 scale */
    int8_t qs[QK8_0];  /* [32] element i of the block */
} q8_0_block;          /* 34 bytes */
_Static_assert(sizeof(q8_0_block) == 34, "q8_0 block must be 34 bytes, as in GGUF");

void ob_dequant_q8_0(const void *src, float *dst, int64_t n) {
    assert(n % QK8_0 == 0);
    const q8_0_block *b = src;
    for (int64_t ib = 0; ib < n / QK8_0; ib++, b++, dst += QK8_0) {
        const float d = half_load(b->d);
        for (int i = 0; i < QK8_0; i++) dst[i] = (float)b->qs[i] * d;
    }
}

void ob_quant_q8_0(const float *src, void *dst, int64_t n) {
    assert(n % QK8_0 == 0);
    q8_0_block *b = dst;
    for (int64_t ib = 0; ib < n / QK8_0; ib++, b++, src += QK8_0) {
        const float d = abs_max(src, QK8_0) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f; /* an all-zero block quantizes to zeros */
        half_store(b->d, d);
        for (int i = 0; i < QK8_0; i++) b->qs[i] = (int8_t)roundf(src[i] * id);
    }
}

/* ---- q4_0: 32 elements, 4-bit with an offset of 8 --------------------------------------
 * value[i] = (nibble[i] - 8) * d. Byte j holds element j in its low nibble and element j+16
 * in its high nibble, so each half of the block unpacks with one shift and no shuffling.
 *
 * The scale is signed: d = max / -8 where max is the element of largest magnitude (the first
 * one on ties), so that element lands exactly on nibble 0 (-8 * d == max) while elements of
 * the other sign reach at most nibble 15 (+7 * |d|, clamped). Consequences that llama.cpp's
 * files show and that we reproduce:
 * d is usually negative, and an all-zero block stores d = -0.0 (0x8000) with every nibble 8.
 * Rounding is truncation of (x/d + 8.5), i.e. halves round up, clamped to 15. */

#define QK4_0 32

typedef struct {
    uint8_t d[2];          /* fp16 scale, usually negative (see above) */
    uint8_t qs[QK4_0 / 2]; /* [16] low nibble: element j, high nibble: element j + 16 */
} q4_0_block;              /* 18 bytes */
_Static_assert(sizeof(q4_0_block) == 18, "q4_0 block must be 18 bytes, as in GGUF");

void ob_dequant_q4_0(const void *src, float *dst, int64_t n) {
    assert(n % QK4_0 == 0);
    const q4_0_block *b = src;
    for (int64_t ib = 0; ib < n / QK4_0; ib++, b++, dst += QK4_0) {
        const float d = half_load(b->d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((b->qs[j] & 0x0f) - 8) * d;
            dst[j + QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

/* One element's nibble. x*id lies in [-8, 8] up to rounding, so the sum is non-negative and
 * the conversion to int truncates toward zero, which here is floor. */
static inline uint8_t q4_0_nibble(float x, float id) {
    int v = (int)(x * id + 8.5f);
    return (uint8_t)(v > 15 ? 15 : v);
}

void ob_quant_q4_0(const float *src, void *dst, int64_t n) {
    assert(n % QK4_0 == 0);
    q4_0_block *b = dst;
    for (int64_t ib = 0; ib < n / QK4_0; ib++, b++, src += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QK4_0; i++) {
            /* strict '<' keeps the first of equal magnitudes, and skips a NaN, as llama.cpp */
            if (amax < fabsf(src[i])) {
                amax = fabsf(src[i]);
                max = src[i];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        half_store(b->d, d);
        for (int j = 0; j < QK4_0 / 2; j++)
            b->qs[j] = (uint8_t)(q4_0_nibble(src[j], id) | (q4_0_nibble(src[j + QK4_0 / 2], id) << 4));
    }
}

/* ---- ternary (BitNet b1.58 / TriLM) shared pieces --------------------------------------
 * Both ternary types store value = t * d with t in {-1, 0, +1} and d = amax of the 256-element
 * block (not amax / something: the largest element is exactly +-d). A trit is kept as t + 1
 * in {0, 1, 2}. Rounding is lroundf (halves away from zero), so |x| >= d/2 becomes +-d. */

static inline int ternary_digit(float x, float id) {
    return (int)lroundf(x * id) + 1;
}

static float ternary_scale(const float *x, float *id) {
    const float d = abs_max(x, OB_QK_K);
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

/* ---- tq1_0: 256 elements in 54 bytes (1.6875 bits per element) -------------------------
 * Five trits fit in a byte because 3^5 = 243 <= 256. A byte does not hold the base-3 number
 * v = t0*81 + t1*27 + t2*9 + t3*3 + t4 (t0 the most significant) directly, but the fixed-point
 * fraction v/243 scaled to a byte: q = ceil(v * 256 / 243). Then the k-th trit is the integer
 * part of 3 * frac(q * 3^k / 256): multiplying by 3^k mod 256 (a uint8_t product) drops the
 * k leading trits, and (q * 3) >> 8 reads the next one. The ceiling keeps each product just
 * above the trit boundary so the truncation never lands one trit low. This lets SIMD kernels
 * decode with byte multiplies only, no division.
 *
 * The 256 elements are split into three spans; within a span of B bytes, element e of the
 * span goes to byte (e % B), trit position (e / B), i.e. consecutive elements run across
 * consecutive bytes first (contiguous lanes for SIMD), then down the trit positions:
 *   span 0: qs[0..31],  elements   0..159, 5 trits per byte
 *   span 1: qs[32..47], elements 160..239, 5 trits per byte
 *   span 2: qh[0..3],   elements 240..255, 4 trits per byte in positions 0..3, position 4 = 0
 */

typedef struct {
    uint8_t qs[48]; /* [48] spans 0 and 1: 5 trits each, fixed-point base 3 (see above) */
    uint8_t qh[4];  /* [4]  span 2: 4 trits each in the top positions, the last trit zero */
    uint8_t d[2];   /* fp16 scale; last in the block, unlike q8_0 / q4_0 */
} tq1_0_block;      /* 54 bytes */
_Static_assert(sizeof(tq1_0_block) == 54, "tq1_0 block must be 54 bytes, as in GGUF");

static const uint8_t pow3[5] = {1, 3, 9, 27, 81};

/* Pack one span: nbytes bytes, the first ntrits trit positions filled from x. */
static void tq1_0_pack_span(const float *x, float id, uint8_t *out, int nbytes, int ntrits) {
    for (int m = 0; m < nbytes; m++) {
        unsigned v = 0; /* base-3 number, at most 242 */
        for (int k = 0; k < 5; k++)
            v = v * 3 + (k < ntrits ? (unsigned)ternary_digit(x[k * nbytes + m], id) : 0u);
        out[m] = (uint8_t)((v * 256 + 242) / 243); /* ceil(v * 256 / 243), at most 255 */
    }
}

static inline void tq1_0_trits(const uint8_t *in, uint8_t *t, int nbytes, int ntrits) {
    for (int k = 0; k < ntrits; k++) /* t: trit k of byte m at [k * nbytes + m]; constant bounds once inlined */
        for (int m = 0; m < nbytes; m++) t[k * nbytes + m] = (uint8_t)(((uint8_t)(in[m] * pow3[k]) * 3) >> 8);
}

/* A block's 256 trits (0..2) in element order, its three spans (above) one after another. */
static inline void tq1_0_block_trits(const tq1_0_block *b, uint8_t t[OB_QK_K]) {
    tq1_0_trits(b->qs, t, 32, 5);
    tq1_0_trits(b->qs + 32, t + 160, 16, 5);
    tq1_0_trits(b->qh, t + 240, 4, 4);
}

void ob_dequant_tq1_0(const void *src, float *dst, int64_t n) {
    assert(n % OB_QK_K == 0);
    const tq1_0_block *b = src;
    for (int64_t ib = 0; ib < n / OB_QK_K; ib++, b++, dst += OB_QK_K) {
        const float d = half_load(b->d);
        uint8_t t[OB_QK_K];
        tq1_0_block_trits(b, t);
        for (int i = 0; i < OB_QK_K; i++) dst[i] = (float)(t[i] - 1) * d;
    }
}

void ob_quant_tq1_0(const float *src, void *dst, int64_t n) {
    assert(n % OB_QK_K == 0);
    tq1_0_block *b = dst;
    for (int64_t ib = 0; ib < n / OB_QK_K; ib++, b++, src += OB_QK_K) {
        float id;
        half_store(b->d, ternary_scale(src, &id));
        tq1_0_pack_span(src, id, b->qs, 32, 5);
        tq1_0_pack_span(src + 160, id, b->qs + 32, 16, 5);
        tq1_0_pack_span(src + 240, id, b->qh, 4, 4);
    }
}

/* ---- tq2_0: 256 elements in 66 bytes (2.0625 bits per element) -------------------------
 * Each element is a 2-bit field holding t + 1 (0, 1, 2; 3 never written, and read as +2 * d).
 * The 64 bytes form two halves of 32 bytes, each covering 128 elements; in a half, element e
 * sits in byte (e % 32) at bits 2 * (e / 32). So one shift-and-mask of 32 contiguous bytes
 * yields 32 consecutive elements, which is what SIMD kernels want. */

typedef struct {
    uint8_t qs[OB_QK_K / 4]; /* [64] two halves of [32 bytes][4 fields of 2 bits] */
    uint8_t d[2];            /* fp16 scale, last in the block */
} tq2_0_block;               /* 66 bytes */
_Static_assert(sizeof(tq2_0_block) == 66, "tq2_0 block must be 66 bytes, as in GGUF");

/* One tq1_0 block's 256 trits as the 2-bit fields holding them, 64 bytes (quant_convert.c's
 * rewrites to tq2_0 and i2_s): element 32 g + m of each 128-element half at bits 2 g of byte m
 * (tq2_0's order) or at bits 6 - 2 g (i2_s's, i2s_order). Both decoders then compute (t - 1) * d
 * from the same t and d, whatever bytes the file holds (every tq1_0 byte decodes to trits 0..2).
 * Returns whether a trit is other than 1 (a value other than 0). */
int ob_tq1_0_block_fields(const void *block, uint8_t out[64], int i2s_order) {
    const tq1_0_block *b = block;
    uint8_t t[OB_QK_K], acc = 0;
    tq1_0_block_trits(b, t);
    for (int i = 0; i < OB_QK_K; i++) acc |= t[i] ^ 1;
    for (int half = 0; half < 2; half++) {
        const uint8_t *x = t + half * 128;
        uint8_t *o = out + half * 32;
        if (i2s_order)
            for (int m = 0; m < 32; m++) o[m] = (uint8_t)(x[m] << 6 | x[m + 32] << 4 | x[m + 64] << 2 | x[m + 96]);
        else
            for (int m = 0; m < 32; m++) o[m] = (uint8_t)(x[m] | x[m + 32] << 2 | x[m + 64] << 4 | x[m + 96] << 6);
    }
    return acc != 0;
}

void ob_dequant_tq2_0(const void *src, float *dst, int64_t n) {
    assert(n % OB_QK_K == 0);
    const tq2_0_block *b = src;
    for (int64_t ib = 0; ib < n / OB_QK_K; ib++, b++) {
        const float d = half_load(b->d);
        for (int half = 0; half < 2; half++)
            for (int k = 0; k < 4; k++)
                for (int m = 0; m < 32; m++) {
                    int t = (b->qs[half * 32 + m] >> (2 * k)) & 3;
                    *dst++ = (float)(t - 1) * d;
                }
    }
}

void ob_quant_tq2_0(const float *src, void *dst, int64_t n) {
    assert(n % OB_QK_K == 0);
    tq2_0_block *b = dst;
    for (int64_t ib = 0; ib < n / OB_QK_K; ib++, b++, src += OB_QK_K) {
        float id;
        half_store(b->d, ternary_scale(src, &id));
        for (int half = 0; half < 2; half++) {
            const float *x = src + half * 128;
            for (int m = 0; m < 32; m++) {
                unsigned q = 0;
                for (int k = 0; k < 4; k++)
                    q |= ((unsigned)ternary_digit(x[k * 32 + m], id) & 3u) << (2 * k);
                b->qs[half * 32 + m] = (uint8_t)q;
            }
        }
    }
}
