/* test_quant_more.c — the weight types beyond quant_ref.c's: q4_1, q5_0, q5_1, mxfp4, iq4_nl
 * (quant_ref_legacy.c), q2_K..q6_K and iq4_xs (quant_ref_k.c), and the searches behind them
 * (quant_search.c, quant_rows.c).
 *
 * Kinds of check:
 *  - decoders bit-identical to llama.cpp: FNV-1a of the floats our to_float makes of random
 *    blocks (quant_gen.h's gen_blocks) against llama.cpp's dequantize_row_* on the same bytes;
 *  - round-to-nearest quantizers byte-identical to llama.cpp's quantize_row_*_ref (q4_1, q5_0,
 *    q5_1, mxfp4) on quant_gen.h's gen_input, bytes and decoded floats hashed;
 *  - searched quantizers no worse than llama.cpp's: RMSE (and importance-weighted RMSE with an
 *    importance vector) on a weight-like matrix, against llama.cpp's figure for the same data;
 *  - hand-made blocks whose bytes follow from the layout, exact round trips of representable
 *    values, edge cases (zeros, constants, huge and tiny values, NaN) that must not crash or
 *    produce non-finite output from finite input.
 * The loader's refusal of corrupt files of these types and the end-to-end logits are in
 * test_formats.c.
 *
 * How the expected values were taken: a one-off program (not in this tree) #included
 * quant_gen.h, linked llama.cpp's libggml-base.so (commit 80fb11a, ggml 0.23.0, its own
 * cmake Release build: cc -O3, no -march, so no FMA contraction, like this build) and printed
 *   - FNV-1a of gen_blocks(type, 4096 elements, seed 77) and of dequantize_row_<type> of it;
 *   - FNV-1a of quantize_row_<type>_ref(gen_input(GEN_N, GEN_SEED)) and of its dequantization;
 *   - for gen_weights(64 x 1024, seed 4242) and gen_importance(1024, seed 99): the RMSE of
 *     quantize_<type>(..., NULL) and the importance-weighted RMSE of quantize_<type>(..., imp)
 *     (sqrt(sum_rc imp[c] * d_rc^2 / sum_rc imp[c])), decoded by llama.cpp.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/quant.h"
#include "format/quant_search.h"
#include "format/quant_tensor.h"
#include "quant_gen.h"
#include "test.h"

/* ---- expected values from llama.cpp -------------------------------------------------- */

#define DEQ_N 4096
#define DEQ_SEED 77

static const struct {
    int type;
    uint64_t bytes_hash, floats_hash;
} expect_deq[] = {
    {OB_TYPE_Q4_1, 0xf20f96b9db789ce7ull, 0x8765421c7a7cfaebull},
    {OB_TYPE_Q5_0, 0x0751e49ec84d22eaull, 0x4a0e69be34008df3ull},
    {OB_TYPE_Q5_1, 0xda5873a84912a0feull, 0x96aa5b8e01965324ull},
    {OB_TYPE_MXFP4, 0xfa8172bf2626dfadull, 0xf02b500dc471c793ull},
    {OB_TYPE_IQ4_NL, 0x9e63a12372ba27baull, 0xdad252ce8e553d2dull},
    {OB_TYPE_Q2_K, 0x6a814c3209745fdbull, 0x37e9552f5f65d89eull},
    {OB_TYPE_Q3_K, 0x97b7d3362e6f00cdull, 0x877f6cbfe0f40252ull},
    {OB_TYPE_Q4_K, 0x6c427a1e9854d14dull, 0x2b29916f539b6786ull},
    {OB_TYPE_Q5_K, 0xc486c84ab6cef927ull, 0x6c807b9813024d15ull},
    {OB_TYPE_Q6_K, 0xf81d63e927a02302ull, 0x4b6251803cb458e1ull},
    {OB_TYPE_IQ4_XS, 0x2b41dfcd0027198eull, 0xe6c80a781d1aa9f0ull},
};

static const struct {
    int type;
    uint64_t quant_hash, dequant_hash;
} expect_rtn[] = {
    {OB_TYPE_Q4_1, 0x590f9cfa715bc207ull, 0x5f6407a29b3530b2ull},
    {OB_TYPE_Q5_0, 0xe0634ecdfacd2772ull, 0x5f44643b45fc9fd0ull},
    {OB_TYPE_Q5_1, 0x8e288e0d43775651ull, 0xba7bb24ca21912f7ull},
    {OB_TYPE_MXFP4, 0xf461fdbd8c27ff94ull, 0xd4a72317688e03e3ull},
};

#define ERR_ROWS 64
#define ERR_COLS 1024
static const uint64_t expect_weights_hash = 0x80f9f379ffe2db13ull, expect_importance_hash = 0x87b7710cec05e74dull;

/* llama.cpp's RMSE without an importance vector (0: not applicable, the type is
 * round-to-nearest there and checked byte for byte instead) and its importance-weighted
 * RMSE with one. */
static const struct {
    int type;
    double rmse, wrmse;
} expect_err[] = {
    {OB_TYPE_Q2_K, 1.368340016e-02, 9.199843853e-03},
    {OB_TYPE_Q3_K, 7.875648363e-03, 6.242213608e-03},
    {OB_TYPE_Q4_K, 3.624224805e-03, 2.846126052e-03},
    {OB_TYPE_Q5_K, 1.818472753e-03, 1.574691548e-03},
    {OB_TYPE_Q6_K, 1.012924952e-03, 8.802104911e-04},
    {OB_TYPE_IQ4_NL, 4.154116233e-03, 3.483943900e-03},
    {OB_TYPE_IQ4_XS, 4.223772806e-03, 3.622214674e-03},
    {OB_TYPE_Q4_0, 0, 4.540552448e-03},
    {OB_TYPE_Q4_1, 0, 2.710162455e-03},
    {OB_TYPE_Q5_0, 0, 2.333519703e-03},
    {OB_TYPE_Q5_1, 0, 1.325924450e-03},
};

/* ---- identity with llama.cpp ------------------------------------------------------------ */

static void test_dequant_identity(void) {
    uint8_t *q = malloc(DEQ_N * 2);
    float *y = malloc(DEQ_N * sizeof *y);
    for (size_t k = 0; k < sizeof expect_deq / sizeof expect_deq[0]; k++) {
        const ob_type_traits *t = ob_type_get(expect_deq[k].type);
        CHECK(t && t->to_float);
        if (!t || !t->to_float) continue;
        int nb = DEQ_N / t->block_size;
        CHECK_EQ_INT(gen_blocks(q, expect_deq[k].type, nb, DEQ_SEED), 0);
        uint64_t hb = fnv1a(q, (size_t)nb * t->type_size);
        t->to_float(q, y, DEQ_N);
        uint64_t hf = fnv1a(y, DEQ_N * sizeof *y);
        if (hb != expect_deq[k].bytes_hash || hf != expect_deq[k].floats_hash)
            fprintf(stderr, "  %s: bytes %016llx floats %016llx\n", t->name, (unsigned long long)hb, (unsigned long long)hf);
        CHECK(hb == expect_deq[k].bytes_hash); /* else the generator drifted */
        CHECK(hf == expect_deq[k].floats_hash);
    }
    free(q);
    free(y);
}

static void test_rtn_identity(void) {
    float *x = malloc(GEN_N * sizeof *x), *y = malloc(GEN_N * sizeof *y);
    uint8_t *q = malloc(GEN_N * 2);
    gen_input(x, GEN_N, GEN_SEED);
    for (size_t k = 0; k < sizeof expect_rtn / sizeof expect_rtn[0]; k++) {
        int type = expect_rtn[k].type;
        const ob_type_traits *t = ob_type_get(type);
        CHECK(t && t->from_float);
        if (!t || !t->from_float) continue;
        t->from_float(x, q, GEN_N);
        t->to_float(q, y, GEN_N);
        uint64_t hq = fnv1a(q, ob_type_row_size(type, GEN_N)), hd = fnv1a(y, GEN_N * sizeof *y);
        if (hq != expect_rtn[k].quant_hash || hd != expect_rtn[k].dequant_hash)
            fprintf(stderr, "  %s: quant %016llx dequant %016llx\n", t->name, (unsigned long long)hq, (unsigned long long)hd);
        CHECK(hq == expect_rtn[k].quant_hash);
        CHECK(hd == expect_rtn[k].dequant_hash);
        /* the tool's entry point without importance is the same routine */
        ob_quantize_rows(type, x, q, GEN_N / 512, 512, NULL);
        CHECK(fnv1a(q, ob_type_row_size(type, GEN_N)) == expect_rtn[k].quant_hash);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- searched quantizers: no worse than llama.cpp -------------------------------------- */

static void test_search_error(void) {
    const int n = ERR_ROWS * ERR_COLS;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), imp[ERR_COLS];
    uint8_t *q = malloc((size_t)n * 2);
    gen_weights(x, ERR_ROWS, ERR_COLS, 4242);
    gen_importance(imp, ERR_COLS, 99);
    CHECK(fnv1a(x, (size_t)n * sizeof *x) == expect_weights_hash);
    CHECK(fnv1a(imp, sizeof imp) == expect_importance_hash);
    double sw = 0;
    for (int c = 0; c < ERR_COLS; c++) sw += imp[c];
    for (size_t k = 0; k < sizeof expect_err / sizeof expect_err[0]; k++) {
        int type = expect_err[k].type;
        const ob_type_traits *t = ob_type_get(type);
        for (int wi = 0; wi < 2; wi++) {
            double want = wi ? expect_err[k].wrmse : expect_err[k].rmse;
            if (want == 0) continue;
            ob_quantize_rows(type, x, q, ERR_ROWS, ERR_COLS, wi ? imp : NULL);
            t->to_float(q, y, n);
            double e = 0, ew = 0;
            int bad = 0;
            for (int i = 0; i < n; i++) {
                double d = (double)y[i] - x[i];
                e += d * d;
                ew += imp[i % ERR_COLS] * d * d;
                bad += !isfinite(y[i]);
            }
            double got = wi ? sqrt(ew / (sw * ERR_ROWS)) : sqrt(e / n);
            if (ob_test_verbose || got > want)
                fprintf(stderr, "  %-6s %s: 1bit %.6e llama.cpp %.6e (ratio %.4f)\n", t->name, wi ? "weighted rmse" : "rmse", got,
                        want, got / want);
            CHECK_EQ_INT(bad, 0);
            CHECK(got <= want);
        }
    }
    free(x);
    free(y);
    free(q);
}

/* ---- hand-made blocks: bytes that follow from the layouts -------------------------------- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void test_legacy_blocks(void) {
    float x[32], y[32];
    uint8_t b[32];
    /* q4_1: minimum 0.5, step (8.25 - 0.5) / 15; element 0 on nibble 0, element 31 on 15 */
    for (int i = 0; i < 32; i++) x[i] = 0.5f + 0.25f * (float)i;
    ob_type_get(OB_TYPE_Q4_1)->from_float(x, b, 32);
    CHECK_EQ_INT(le16(b), ob_fp32_to_fp16(7.75f / 15.0f));
    CHECK_EQ_INT(le16(b + 2), 0x3800); /* m = 0.5 */
    CHECK_EQ_INT(b[4] & 0x0f, 0);
    CHECK_EQ_INT(b[4 + 15] >> 4, 15);
    /* q5_0: x = i - 16, the largest magnitude (-16, first) gives d = 1 and q = i: nibbles j
     * and j + 16 share byte j, the fifth bits of elements 16..31 fill bits 16..31 of qh */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    ob_type_get(OB_TYPE_Q5_0)->from_float(x, b, 32);
    CHECK_EQ_INT(le16(b), 0x3c00);
    CHECK(b[2] == 0 && b[3] == 0 && b[4] == 0xff && b[5] == 0xff);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= b[6 + j] == (uint8_t)(j | (j << 4));
    CHECK(ok);
    ob_type_get(OB_TYPE_Q5_0)->to_float(b, y, 32);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* mxfp4: amax 6 -> e = floor(log2 6) - 2 + 127 = 127, scale 2^-1: the e2m1 values exactly */
    static const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 32; i++) x[i] = fp4[i % 16];
    x[8] = x[24] = 0.0f; /* +0 is index 0, the first of the two zeros */
    ob_type_get(OB_TYPE_MXFP4)->from_float(x, b, 32);
    CHECK_EQ_INT(b[0], 127);
    CHECK_EQ_INT(b[1], 0x00);        /* elements 0 and 16 */
    CHECK_EQ_INT(b[1 + 7], 0x77);    /* elements 7 and 23: 6.0 */
    CHECK_EQ_INT(b[1 + 15], 0xff);   /* elements 15 and 31: -6.0 */
    ob_type_get(OB_TYPE_MXFP4)->to_float(b, y, 32);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* iq4_nl: values on the grid times an fp16 scale come back exactly */
    static const int8_t grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int i = 0; i < 32; i++) x[i] = 0.25f * grid[(i * 7) % 16];
    ob_type_get(OB_TYPE_IQ4_NL)->from_float(x, b, 32);
    ob_type_get(OB_TYPE_IQ4_NL)->to_float(b, y, 32);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK_EQ_INT(b[2] & 0x0f, 0); /* element 0: grid[0] */
}

/* q4_K and q6_K blocks written byte by byte from the layout description (quant_ref_k.c's
 * comments), decoded by the library: the formula must come out. */
static void test_k_blocks(void) {
    uint8_t b[210];
    float y[256];
    /* q4_K: d = 1, dmin = 0.5; sub-block j has scale j + 1 and min 2j + 40 (6 bits, > 15 so the
     * top bits are used); element e has level e % 16 */
    memset(b, 0, sizeof b);
    b[0] = 0x00, b[1] = 0x3c, b[2] = 0x00, b[3] = 0x38;
    uint8_t *sc = b + 4, *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        int s = j + 1, m = 2 * j + 40;
        if (j < 4) {
            sc[j] |= (uint8_t)s;
            sc[j + 4] |= (uint8_t)m;
        } else {
            sc[j + 4] = (uint8_t)((s & 15) | ((m & 15) << 4));
            sc[j - 4] |= (uint8_t)((s >> 4) << 6);
            sc[j] |= (uint8_t)((m >> 4) << 6);
        }
    }
    for (int e = 0; e < 256; e++) qs[(e / 64) * 32 + e % 32] |= (uint8_t)((e % 16) << ((e % 64) >= 32 ? 4 : 0));
    ob_type_get(OB_TYPE_Q4_K)->to_float(b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        int j = e / 32;
        bad += y[e] != (float)(j + 1) * (float)(e % 16) - 0.5f * (float)(2 * j + 40);
    }
    CHECK_EQ_INT(bad, 0);
    /* q6_K: d = 0.25, scale of sub-block j = j - 8 (signed), element e has level (e * 5) % 64 - 32 */
    memset(b, 0, sizeof b);
    b[208] = 0x00, b[209] = 0x34;
    for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)(int8_t)(j - 8);
    for (int e = 0; e < 256; e++) {
        int q = (e * 5) % 64, h = e / 128, r = e % 128, l = r % 32, part = r / 32; /* part: l, l+32, l+64, l+96 */
        uint8_t *ql = b + 64 * h + l + (part & 1) * 32, *qh = b + 128 + 32 * h + l;
        *ql |= (uint8_t)((q & 15) << (part >= 2 ? 4 : 0));
        *qh |= (uint8_t)((q >> 4) << (2 * part));
    }
    ob_type_get(OB_TYPE_Q6_K)->to_float(b, y, 256);
    bad = 0;
    for (int e = 0; e < 256; e++) bad += y[e] != 0.25f * (float)(e / 16 - 8) * (float)((e * 5) % 64 - 32);
    CHECK_EQ_INT(bad, 0);
}

/* ---- round trips and extreme inputs ----------------------------------------------------- */

static const int searched[] = {OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_IQ4_NL, OB_TYPE_IQ4_XS};

static void test_round_trips(void) {
    const int n = 4096;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *y2 = malloc(n * sizeof *y2);
    uint8_t *q = malloc(n * 2);
    gen_weights(x, 4, 1024, 9);
    /* Quantizing a decoded tensor again: the symmetric-grid searches find the same values
     * exactly (their codes are reachable from any of the decoded values' scales); the
     * scale-and-min K types come within a fifth of the first pass's error. */
    for (size_t k = 0; k < sizeof searched / sizeof searched[0]; k++) {
        const ob_type_traits *t = ob_type_get(searched[k]);
        t->from_float(x, q, n);
        t->to_float(q, y, n);
        t->from_float(y, q, n);
        t->to_float(q, y2, n);
        double e1 = 0, e2 = 0;
        for (int i = 0; i < n; i++) {
            e1 += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            e2 += ((double)y2[i] - y[i]) * ((double)y2[i] - y[i]);
        }
        int asym = searched[k] == OB_TYPE_Q2_K || searched[k] == OB_TYPE_Q4_K || searched[k] == OB_TYPE_Q5_K;
        if (ob_test_verbose || e2 > (asym ? 0.04 * e1 : 0)) fprintf(stderr, "  %s requantized: %.3g of the first pass's error\n", t->name, sqrt(e2 / e1));
        CHECK(asym ? e2 <= 0.04 * e1 : e2 == 0);
    }
    free(x);
    free(y);
    free(y2);
    free(q);
}

static void test_extremes(void) {
    float *x = malloc(GEN_N * sizeof *x), *y = malloc(GEN_N * sizeof *y);
    uint8_t *q = malloc(GEN_N * 2);
    static const int all[] = {OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_MXFP4, OB_TYPE_IQ4_NL, OB_TYPE_Q2_K,
                              OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_IQ4_XS};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        const ob_type_traits *t = ob_type_get(all[k]);
        /* gen_input: zeros, constants, fp16-subnormal scales, values near the fp16 limit, ties */
        gen_input(x, GEN_N, GEN_SEED);
        t->from_float(x, q, GEN_N);
        t->to_float(q, y, GEN_N);
        int bad = 0, zero_bad = 0;
        for (int i = 0; i < GEN_N; i++) bad += !isfinite(y[i]);
        CHECK_EQ_INT(bad, 0);
        /* all zeros decode to zeros, with and without an importance vector */
        memset(x, 0, 512 * sizeof *x);
        float imp[512];
        for (int i = 0; i < 512; i++) imp[i] = 1.0f + (float)(i % 3);
        for (int wi = 0; wi < 2; wi++) {
            ob_quantize_rows(all[k], x, q, 1, 512, wi ? imp : NULL);
            t->to_float(q, y, 512);
            for (int i = 0; i < 512; i++) zero_bad += y[i] != 0.0f;
        }
        CHECK_EQ_INT(zero_bad, 0);
        /* NaN and infinity in the input: no crash, no hang, the other blocks unharmed */
        gen_weights(x, 2, 512, 3);
        x[5] = NAN;
        x[300] = INFINITY;
        t->from_float(x, q, 1024);
        t->to_float(q, y, 1024);
        bad = 0;
        for (int i = 512; i < 1024; i++) bad += !isfinite(y[i]) || fabsf(y[i] - x[i]) > 0.5f;
        CHECK_EQ_INT(bad, 0);
    }
    free(x);
    free(y);
    free(q);
}

OB_SUITE(quant_more) {
    test_dequant_identity();
    test_rtn_identity();
    test_search_error();
    test_legacy_blocks();
    test_k_blocks();
    test_round_trips();
    test_extremes();
}
