/* test_quant.c — the reference quantize / dequantize routines (src/format/quant_ref.c).
 *
 * Three kinds of check:
 *  - hand-made blocks whose exact bytes and values follow from the layout (zeros, one large
 *    value, ties, clamps, ternary input that must round-trip exactly);
 *  - error bounds of a round trip on random data, per block, from the stored scale;
 *  - bit identity with llama.cpp: FNV-1a hashes of our quantized bytes and dequantized floats
 *    for a fixed input, compared with hashes llama.cpp produced for the same input (see the
 *    comment above the constants for how they were taken).
 */
#include <stdint.h>
#include <stdlib.h>

#include "format/quant.h"
#include "test.h"

/* ---- deterministic input: quant_gen.h (shared, verbatim, with the one-off llama.cpp checker) */
#include "quant_gen.h"

/* ---- hand-made blocks -------------------------------------------------------------------- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* The routines are reached through the type table, as every caller of quant.h reaches them;
 * that also checks the table's wiring. */
static void quant(int type, const float *x, void *q, int64_t n) { ob_type_get(type)->from_float(x, q, n); }
static void dequant(int type, const void *q, float *y, int64_t n) { ob_type_get(type)->to_float(q, y, n); }

static void test_q8_0_blocks(void) {
    float x[32] = {0}, y[32];
    uint8_t b[34];

    /* all zeros: scale +0 and zero quants (no division by zero) */
    memset(b, 0xaa, sizeof b);
    quant(OB_TYPE_Q8_0, x, b, 32);
    CHECK_EQ_INT(le16(b), 0x0000);
    int nz = 0;
    for (int i = 0; i < 32; i++) nz += b[2 + i] != 0;
    CHECK_EQ_INT(nz, 0);

    /* one large value: it maps to +127 and everything else to 0 */
    x[5] = 100.0f;
    quant(OB_TYPE_Q8_0, x, b, 32);
    CHECK_EQ_INT(le16(b), ob_fp32_to_fp16(100.0f / 127.0f));
    CHECK_EQ_INT((int8_t)b[2 + 5], 127);
    CHECK_EQ_INT((int8_t)b[2 + 4], 0);
    dequant(OB_TYPE_Q8_0, b, y, 32);
    CHECK_NEAR(y[5], 100.0f, 100.0f * 0x1p-11f);
    CHECK_EQ_INT(y[4] == 0.0f, 1);

    /* amax 127 gives d = 1 exactly; halves round away from zero (roundf) */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    x[0] = -127.0f;
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.5f;
    quant(OB_TYPE_Q8_0, x, b, 32);
    CHECK_EQ_INT(le16(b), 0x3c00); /* 1.0 */
    CHECK_EQ_INT((int8_t)b[2 + 0], -127);
    CHECK_EQ_INT((int8_t)b[2 + 1], 3);
    CHECK_EQ_INT((int8_t)b[2 + 2], -3);
    CHECK_EQ_INT((int8_t)b[2 + 3], 1);
    CHECK_EQ_INT((int8_t)b[2 + 31], 15);
    dequant(OB_TYPE_Q8_0, b, y, 32);
    CHECK_EQ_INT(y[20] == 4.0f && y[0] == -127.0f && y[1] == 3.0f, 1);
}

static void test_q4_0_blocks(void) {
    float x[32] = {0}, y[32];
    uint8_t b[18];

    /* all zeros: max is +0, so d = 0 / -8 = -0.0 is stored (0x8000) and every nibble is 8 */
    quant(OB_TYPE_Q4_0, x, b, 32);
    CHECK_EQ_INT(le16(b), 0x8000);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= b[2 + j] == 0x88;
    CHECK(ok);
    dequant(OB_TYPE_Q4_0, b, y, 32);
    CHECK(y[0] == 0.0f && y[31] == 0.0f);

    /* nibble order: element j is the low nibble of byte j, element j+16 the high one.
     * Largest magnitude -8 (first at 0) gives d = 1 and nibble = x + 8. */
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 16 - 8);
    x[16] = -7.0f;
    x[17] = 7.0f;
    quant(OB_TYPE_Q4_0, x, b, 32);
    CHECK_EQ_INT(le16(b), 0x3c00);
    CHECK_EQ_INT(b[2 + 0], 0x10); /* elements 0 (-8) and 16 (-7) */
    CHECK_EQ_INT(b[2 + 1], 0xf1); /* elements 1 (-7) and 17 (+7) */
    CHECK_EQ_INT(b[2 + 5], 0x55);
    CHECK_EQ_INT(b[2 + 15], 0xff); /* elements 15 and 31, both +7 */
    dequant(OB_TYPE_Q4_0, b, y, 32);
    ok = 1;
    for (int i = 0; i < 32; i++) ok &= y[i] == x[i];
    CHECK(ok);

    /* halves round up (truncation of x/d + 8.5): +0.5 -> 1, -0.5 -> 0 */
    x[2] = 0.5f;
    x[3] = -0.5f;
    quant(OB_TYPE_Q4_0, x, b, 32);
    CHECK_EQ_INT(b[2 + 2] & 0x0f, 9);
    CHECK_EQ_INT(b[2 + 3] & 0x0f, 8);

    /* positive maximum: d = -1; the max maps to nibble 0 exactly and -8 clamps to +7 steps */
    for (int i = 0; i < 32; i++) x[i] = 0.0f;
    x[4] = 8.0f;
    x[5] = -8.0f; /* equal magnitude, later: the first one (x[4]) sets the sign of d */
    x[6] = -7.0f;
    quant(OB_TYPE_Q4_0, x, b, 32);
    CHECK_EQ_INT(le16(b), 0xbc00); /* -1.0 */
    CHECK_EQ_INT(b[2 + 4] & 0x0f, 0);
    CHECK_EQ_INT(b[2 + 5] & 0x0f, 15);
    CHECK_EQ_INT(b[2 + 6] & 0x0f, 15);
    dequant(OB_TYPE_Q4_0, b, y, 32);
    CHECK(y[4] == 8.0f && y[5] == -7.0f && y[6] == -7.0f && y[7] == 0.0f);
}

static void test_ternary_blocks(void) {
    float x[256] = {0}, y1[256], y2[256];
    uint8_t b1[54], b2[66];

    /* zeros: every trit is 1 ("0"). tq1_0: 11111 in base 3 = 121 -> ceil(121*256/243) = 128;
     * the 4-trit bytes hold 11110 = 120 -> 127. tq2_0: four fields of 1 = 0x55. d = +0. */
    quant(OB_TYPE_TQ1_0, x, b1, 256);
    quant(OB_TYPE_TQ2_0, x, b2, 256);
    int ok = 1;
    for (int i = 0; i < 48; i++) ok &= b1[i] == 128;
    for (int i = 48; i < 52; i++) ok &= b1[i] == 127;
    CHECK(ok);
    CHECK_EQ_INT(le16(b1 + 52), 0);
    ok = 1;
    for (int i = 0; i < 64; i++) ok &= b2[i] == 0x55;
    CHECK(ok);
    CHECK_EQ_INT(le16(b2 + 64), 0);
    dequant(OB_TYPE_TQ1_0, b1, y1, 256);
    dequant(OB_TYPE_TQ2_0, b2, y2, 256);
    ok = 1;
    for (int i = 0; i < 256; i++) ok &= y1[i] == 0.0f && y2[i] == 0.0f;
    CHECK(ok);

    /* placement. tq1_0: qs[0] holds elements 0, 32, 64, 96, 128 from the leading trit down,
     * here 2,0,1,1,2 = 176 in base 3 -> ceil(176*256/243) = 186; qh[0] holds elements 240,
     * 244, 248, 252 then a zero trit: 0,1,1,1,0 = 39 -> 42. tq2_0: qs[0] holds elements 0,
     * 32, 64, 96 in bits 0-1, 2-3, 4-5, 6-7: 2,0,1,1 = 0x52; qs[32] starts element 128. */
    const float s = 0.3f;
    x[0] = s;
    x[32] = -s;
    x[128] = s;
    x[240] = -s;
    quant(OB_TYPE_TQ1_0, x, b1, 256);
    quant(OB_TYPE_TQ2_0, x, b2, 256);
    CHECK_EQ_INT(b1[0], 186);
    CHECK_EQ_INT(b1[1], 128);
    CHECK_EQ_INT(b1[48], 42);
    CHECK_EQ_INT(le16(b1 + 52), ob_fp32_to_fp16(s));
    CHECK_EQ_INT(b2[0], 0x52);
    CHECK_EQ_INT(b2[32], 0x56);
    CHECK_EQ_INT(le16(b2 + 64), ob_fp32_to_fp16(s));

    /* ternary input {-s, 0, s} round-trips exactly up to the fp16 rounding of s */
    uint64_t st = 7;
    for (int i = 0; i < 256; i++) x[i] = (float)((int)(gen_next(&st) % 3) - 1) * s;
    x[77] = s; /* make sure amax is s */
    quant(OB_TYPE_TQ1_0, x, b1, 256);
    quant(OB_TYPE_TQ2_0, x, b2, 256);
    dequant(OB_TYPE_TQ1_0, b1, y1, 256);
    dequant(OB_TYPE_TQ2_0, b2, y2, 256);
    const float sh = ob_fp16_to_fp32(ob_fp32_to_fp16(s));
    CHECK(sh != s); /* 0.3 is not an fp16 value: the test does see the rounding */
    int bad1 = 0, bad2 = 0;
    for (int i = 0; i < 256; i++) {
        float want = x[i] > 0 ? sh : x[i] < 0 ? -sh : 0.0f;
        bad1 += y1[i] != want;
        bad2 += y2[i] != want;
    }
    CHECK_EQ_INT(bad1, 0);
    CHECK_EQ_INT(bad2, 0);

    /* every 5-trit byte value (243) and every 4-trit one (81): six blocks whose bytes count
     * through the patterns, with d = 1. Each byte must be ceil(v * 256 / 243) and decode back
     * to its trits; a floor, or an off-by-one in the ceiling, breaks some pattern. */
    int bad_byte = 0, bad_val = 0;
    for (int blk = 0; blk < 6; blk++) {
        int v5[48], v4[4];
        memset(x, 0, sizeof x);
        for (int m = 0; m < 48; m++) {
            int v = v5[m] = (blk * 48 + m) % 243, base = m < 32 ? m : 160 + (m - 32), stride = m < 32 ? 32 : 16;
            for (int k = 4; k >= 0; k--, v /= 3) x[base + k * stride] = (float)(v % 3 - 1);
        }
        for (int j = 0; j < 4; j++) {
            int v = v4[j] = (blk * 4 + j) % 81;
            for (int k = 3; k >= 0; k--, v /= 3) x[240 + k * 4 + j] = (float)(v % 3 - 1);
        }
        x[0] = 1.0f; /* amax 1 even if a block's patterns happened to hold no +-1 */
        v5[0] = v5[0] % 81 + 2 * 81;
        quant(OB_TYPE_TQ1_0, x, b1, 256);
        dequant(OB_TYPE_TQ1_0, b1, y1, 256);
        for (int m = 0; m < 48; m++) bad_byte += b1[m] != (v5[m] * 256 + 242) / 243;
        for (int j = 0; j < 4; j++) bad_byte += b1[48 + j] != (v4[j] * 3 * 256 + 242) / 243;
        for (int i = 0; i < 256; i++) bad_val += y1[i] != x[i];
    }
    CHECK_EQ_INT(bad_byte, 0);
    CHECK_EQ_INT(bad_val, 0);

    /* rounding to a trit: |x| >= d/2 goes to +-d (lroundf, halves away from zero) */
    memset(x, 0, sizeof x);
    x[0] = 1.0f;
    x[1] = 0.5f;
    x[2] = -0.5f;
    x[3] = 0.49f;
    quant(OB_TYPE_TQ2_0, x, b2, 256);
    dequant(OB_TYPE_TQ2_0, b2, y2, 256);
    CHECK(y2[1] == 1.0f && y2[2] == -1.0f && y2[3] == 0.0f);
}

/* ---- round-trip error bounds on random data ------------------------------------------- */

#define RT_N 8192

static void test_round_trip(void) {
    float *x = malloc(RT_N * sizeof *x), *y = malloc(RT_N * sizeof *y);
    float *y2 = malloc(RT_N * sizeof *y2);
    uint8_t *q = malloc(RT_N * 4);
    uint64_t st = 12345;
    /* noise with a per-32 scale between 2^-8 and 2^8, and one outlier in each 256 */
    float sc = 1.0f;
    for (int i = 0; i < RT_N; i++) {
        if (i % 32 == 0) sc = ldexpf(1.0f, (int)(gen_next(&st) % 17) - 8);
        x[i] = gen_unit(&st) * sc * (i % 256 == 100 ? 20.0f : 1.0f);
    }

    /* f32: a copy */
    quant(OB_TYPE_F32, x, q, RT_N);
    dequant(OB_TYPE_F32, q, y, RT_N);
    CHECK(memcmp(x, y, RT_N * sizeof *x) == 0);

    /* f16 / bf16: relative error at most half an ulp (2^-11 / 2^-8 of |x|), for normal values */
    quant(OB_TYPE_F16, x, q, RT_N);
    dequant(OB_TYPE_F16, q, y, RT_N);
    int bad = 0;
    for (int i = 0; i < RT_N; i++)
        if (fabsf(x[i]) >= 0x1p-14f) bad += fabsf(y[i] - x[i]) > fabsf(x[i]) * 0x1p-11f;
    CHECK_EQ_INT(bad, 0);
    quant(OB_TYPE_BF16, x, q, RT_N);
    dequant(OB_TYPE_BF16, q, y, RT_N);
    bad = 0;
    for (int i = 0; i < RT_N; i++) bad += fabsf(y[i] - x[i]) > fabsf(x[i]) * 0x1p-8f;
    CHECK_EQ_INT(bad, 0);

    /* q8_0: |x - q*d| <= d/2 with d = amax/127 as used for quantizing; the stored fp16 scale
     * dq adds at most 127*|d - dq|. A small slack absorbs the fp32 products. */
    quant(OB_TYPE_Q8_0, x, q, RT_N);
    dequant(OB_TYPE_Q8_0, q, y, RT_N);
    bad = 0;
    double worst = 0;
    for (int b = 0; b < RT_N / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        float d = amax / 127.0f, dq = ob_fp16_to_fp32(le16(q + 34 * b));
        float bound = 0.5f * d + 127.0f * fabsf(d - dq) + amax * 1e-6f;
        for (int i = 0; i < 32; i++) {
            float e = fabsf(x[32 * b + i] - y[32 * b + i]);
            bad += e > bound;
            if (d > 0 && e / d > worst) worst = e / d;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(worst > 0.3 && worst < 0.6); /* the bound is tight-ish: real errors approach d/2 */

    /* q4_0: |x - q*d| <= |d|/2, except the clamped side where x/d > 7.5 (error up to |d|);
     * plus 8*|d - dq| for the fp16 scale. */
    quant(OB_TYPE_Q4_0, x, q, RT_N);
    dequant(OB_TYPE_Q4_0, q, y, RT_N);
    bad = 0;
    for (int b = 0; b < RT_N / 32; b++) {
        float amax = 0, max = 0;
        for (int i = 0; i < 32; i++)
            if (amax < fabsf(x[32 * b + i])) { amax = fabsf(x[32 * b + i]); max = x[32 * b + i]; }
        float d = max / -8.0f, dq = ob_fp16_to_fp32(le16(q + 18 * b));
        for (int i = 0; i < 32; i++) {
            float v = x[32 * b + i];
            float lim = (v / d > 7.5f ? fabsf(d) : 0.5f * fabsf(d)) + 8.0f * fabsf(d - dq) + amax * 1e-6f;
            bad += fabsf(v - y[32 * b + i]) > lim;
        }
    }
    CHECK_EQ_INT(bad, 0);

    /* tq1_0 / tq2_0: |x| < d/2 -> 0 (error |x|), else +-d (error d - |x|), so <= d/2, plus the
     * fp16 rounding of d. Both types compute the same trits, so their outputs agree exactly. */
    quant(OB_TYPE_TQ1_0, x, q, RT_N);
    dequant(OB_TYPE_TQ1_0, q, y, RT_N);
    quant(OB_TYPE_TQ2_0, x, q, RT_N);
    dequant(OB_TYPE_TQ2_0, q, y2, RT_N);
    bad = 0;
    for (int b = 0; b < RT_N / 256; b++) {
        float d = 0;
        for (int i = 0; i < 256; i++) d = fmaxf(d, fabsf(x[256 * b + i]));
        float dq = ob_fp16_to_fp32(le16(q + 66 * b + 64));
        for (int i = 0; i < 256; i++)
            bad += fabsf(x[256 * b + i] - y2[256 * b + i]) > 0.5f * d + fabsf(d - dq) + d * 1e-6f;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(memcmp(y, y2, RT_N * sizeof *y) == 0);

    free(x);
    free(y);
    free(y2);
    free(q);
}

/* ---- bit identity with llama.cpp ---------------------------------------------------------
 * How the expected hashes were made: a one-off program, kept outside this repository,
 * #included the block between the OB_QUANT_GEN markers (now in quant_gen.h) verbatim (so its input and hash
 * are these), and linked llama.cpp's libggml-base.so built from llama.cpp commit 80fb11ac73e6
 * (ggml 0.23.0; its own cmake build, cc -O3, no -march). For gen_input(GEN_N, GEN_SEED) it
 * printed the FNV-1a of:
 *   quant bytes:   quantize_row_{q8_0,q4_0,tq1_0,tq2_0}_ref, ggml_fp32_to_fp16_row and
 *                  ggml_fp32_to_bf16_row_ref;
 *   dequant floats: dequantize_row_{q8_0,q4_0,tq1_0,tq2_0}, ggml_fp16_to_fp32_row and
 *                  ggml_bf16_to_fp32_row applied to those bytes;
 *   the sweeps:    sweep_to_16 / sweep_f16_to_32 with ggml's conversions.
 * The sweeps skip NaNs where the paths legitimately differ: ggml's software fp32 -> fp16
 * writes a canonical NaN (0x7e00) where we keep the payload as F16C does, and signalling fp16
 * NaNs are quieted by ggml (and F16C) when widened but not by ob_fp16_to_fp32.
 * The same program also compared the two implementations directly, which is stronger than
 * one hash: 2000 generated inputs (half with non-power-of-two rescaling) quantized bit-equal
 * for all four types, random bytes dequantized bit-equal, and every one of the 2^32 fp32
 * patterns converted equal to fp16 (NaNs aside) and to bf16 (NaNs included). */

typedef struct {
    int type;
    uint64_t quant_hash, dequant_hash;
} ob_quant_expect;

static const uint64_t expect_input_hash = 0x7c9fce43c2664cb6ull;
static const ob_quant_expect expect[] = {
    {OB_TYPE_Q8_0, 0x54f9ed961a67c49aull, 0x3893a7ae562a20ecull},
    {OB_TYPE_Q4_0, 0x5e79600c1cdba800ull, 0x81e17ac52b4e7a37ull},
    {OB_TYPE_TQ1_0, 0x9151fc660bee280eull, 0x3dd9d7c1ad367fdaull},
    {OB_TYPE_TQ2_0, 0x967f7bd8f1d6de74ull, 0x3dd9d7c1ad367fdaull},
    {OB_TYPE_F16, 0x764c3b71ee74d120ull, 0x647d8d345447fd6dull},
    {OB_TYPE_BF16, 0x8363aaa5657e9a65ull, 0x1cf2065585fa521dull},
};
static const uint64_t expect_sweep_f32_to_f16 = 0x4dd78fca5341d609ull;
static const uint64_t expect_sweep_f32_to_bf16 = 0xcf8d96baa7e382bdull;
static const uint64_t expect_sweep_f16_to_f32 = 0x38267cc09f42e225ull;

static void test_llama_identity(void) {
    float *x = malloc(GEN_N * sizeof *x), *y = malloc(GEN_N * sizeof *y);
    uint8_t *q = malloc(GEN_N * 2);
    gen_input(x, GEN_N, GEN_SEED);
    uint64_t h = fnv1a(x, GEN_N * sizeof *x);
    if (h != expect_input_hash) fprintf(stderr, "  input hash %016llx\n", (unsigned long long)h);
    CHECK(h == expect_input_hash); /* otherwise the generator drifted and nothing below means much */

    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        const ob_type_traits *t = ob_type_get(expect[k].type);
        CHECK(t && t->from_float && t->to_float);
        if (!t || !t->from_float || !t->to_float) continue;
        size_t bytes = ob_type_row_size(expect[k].type, GEN_N);
        t->from_float(x, q, GEN_N);
        t->to_float(q, y, GEN_N);
        uint64_t hq = fnv1a(q, bytes), hd = fnv1a(y, GEN_N * sizeof *y);
        if (hq != expect[k].quant_hash || hd != expect[k].dequant_hash)
            fprintf(stderr, "  %s: quant %016llx dequant %016llx\n", t->name,
                    (unsigned long long)hq, (unsigned long long)hd);
        CHECK(hq == expect[k].quant_hash);
        CHECK(hd == expect[k].dequant_hash);
    }

    /* the half-precision conversions themselves, over a wide sweep of bit patterns */
    uint64_t hs = sweep_to_16(ob_fp32_to_fp16, 1);
    if (hs != expect_sweep_f32_to_f16) fprintf(stderr, "  sweep f32->f16 %016llx\n", (unsigned long long)hs);
    CHECK(hs == expect_sweep_f32_to_f16);
    hs = sweep_to_16(ob_fp32_to_bf16, 0);
    if (hs != expect_sweep_f32_to_bf16) fprintf(stderr, "  sweep f32->bf16 %016llx\n", (unsigned long long)hs);
    CHECK(hs == expect_sweep_f32_to_bf16);
    hs = sweep_f16_to_32(ob_fp16_to_fp32);
    if (hs != expect_sweep_f16_to_f32) fprintf(stderr, "  sweep f16->f32 %016llx\n", (unsigned long long)hs);
    CHECK(hs == expect_sweep_f16_to_f32);

    free(x);
    free(y);
    free(q);
}


OB_SUITE(quant) {
    test_q8_0_blocks();
    test_q4_0_blocks();
    test_ternary_blocks();
    test_round_trip();
    test_llama_identity();
}
