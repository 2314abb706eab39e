/* test_quant_convert.c — ob_tensor_convert (quant_convert.c): a tensor stored as another type of
 * exactly the same values, the engine's weight_as at load.
 *
 * Kinds of check:
 *  - tq1_0 as tq2_0, tq2_0 as i2_s and tq1_0 as i2_s dequantize to the original's bits (random
 *    bytes for the first: any tq1_0 block has a tq2_0 twin), and the direct tq1_0 -> i2_s bytes are
 *    those of the two steps;
 *  - the one-scale rule refuses every case where i2_s would not hold the same values (another d, a
 *    negative, zero or infinite one, a code 3), also where the offending block is in another
 *    thread's share of the tensor, or where each thread's share has one scale but not the same;
 *  - one thread or several give the same bytes (OB_CONVERT_THREADS);
 *  - pairs that do not hold the same values (q8_0 as q4_0), unknown types and i2_s as a source
 *    are refused.
 * The engine's use of it (the types in memory, the logits along the chain) is in
 * test_fused_engine.c (ob_test_weight_as).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/quant.h"
#include "format/quant_tensor.h"
#include "quant_gen.h"
#include "test.h"

/* tq2_0 as i2_s (ob_tensor_convert) where every block of values other than 0 has one scale, a
 * trained BitNet's case (x: one of [rows][ne0] floats; q2, a, b: room for its tq2_0 tensor and its
 * values): the same values, bit for bit (the zero blocks' d may differ); refused (NULL) where a
 * block of values has another d, the blocks of values one d that is negative or 0, a zero block an
 * infinite or negative d, or a code is 3. */
static void test_tq2_as_i2_s(float *x, uint8_t *q2, float *a, float *b, int64_t ne0, int64_t rows) {
    const int64_t n = ne0 * rows;
    for (int64_t i = 0; i < n; i++) x[i] = i % 3 == 0 ? 0.7f : i % 5 == 0 ? -0.7f : 0.0f;
    for (int i = 0; i < 256; i++) x[512 + i] = 0.0f; /* (block 2: zeros) */
    CHECK(ob_tensor_quantize(OB_TYPE_TQ2_0, x, q2, ne0, rows) == 0);
    q2[2 * 66 + 64] = 0x00, q2[2 * 66 + 65] = 0x42; /* (the zero block's d: 3.0) */
    CHECK(ob_tensor_dequantize(OB_TYPE_TQ2_0, q2, a, ne0, rows) == 0);
    size_t sz = 0;
    uint8_t *t = ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_I2_S, q2, ne0, rows, &sz);
    CHECK(t != NULL && sz == ob_type_tensor_size(OB_TYPE_I2_S, ne0, rows));
    if (t) {
        CHECK(ob_tensor_dequantize(OB_TYPE_I2_S, t, b, ne0, rows) == 0 && memcmp(a, b, (size_t)n * sizeof *a) == 0);
        char why[160] = "";
        CHECK(ob_tensor_validate(OB_TYPE_I2_S, t, ne0, rows, why, sizeof why) == 0);
        CHECK(ob_tensor_scale(OB_TYPE_I2_S, t, ne0, rows) == ob_fp16_to_fp32(ob_fp32_to_fp16(0.7f)));
        free(t);
    }
    /* what is refused: (at, byte) one byte changed; (-1, h) every block of values' d set to h */
    static const struct { int at, byte; } bad[] = {
        {4 * 66 + 64, 0x00}, /* a block of values with another d */
        {-1, 0xb99a},        /* every block of values' d negative (-0.7), one d still */
        {-1, 0x0000},        /* every block of values' d 0 */
        {2 * 66 + 65, 0x7c}, /* the zero block's d infinite */
        {2 * 66 + 65, 0x80}, /* the zero block's d -0 (its values -0, i2_s's +0) */
        {5 * 66 + 7, 0xff},  /* codes 3 */
    };
    uint8_t *keep = malloc(ob_type_tensor_size(OB_TYPE_TQ2_0, ne0, rows));
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(keep, q2, ob_type_tensor_size(OB_TYPE_TQ2_0, ne0, rows));
        if (bad[k].at >= 0) q2[bad[k].at] = (uint8_t)bad[k].byte;
        for (int64_t blk = 0; bad[k].at < 0 && blk < n / 256; blk++)
            if (blk != 2) q2[blk * 66 + 64] = (uint8_t)(bad[k].byte & 0xff), q2[blk * 66 + 65] = (uint8_t)(bad[k].byte >> 8);
        t = ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_I2_S, q2, ne0, rows, &sz);
        if (t || ob_test_verbose) fprintf(stderr, "  tq2_0 as i2_s, case %zu: %s\n", k, t ? "converted" : "refused");
        CHECK(t == NULL);
        free(t);
        memcpy(q2, keep, ob_type_tensor_size(OB_TYPE_TQ2_0, ne0, rows));
    }
    free(keep);
}

/* ob_tensor_convert: tq1_0 as tq2_0 and back hold the same values (both are codes -1/0/+1
 * times an f16 scale a 256-element block), so the converted tensor dequantizes to the same bits;
 * q8_0 as q4_0 does not, so it is refused (NULL); an unreadable type and i2_s (its tail) likewise. */
static void test_convert(void) {
    const int64_t ne0 = 512, rows = 6, n = ne0 * rows;
    float *x = malloc((size_t)n * sizeof *x), *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    gen_weights(x, rows, ne0, 11);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.3f ? 0.7f * (float)(1 + i / 256) : x[i] < -0.3f ? -0.7f * (float)(1 + i / 256) : 0.0f;
    for (int i = 0; i < 256; i++) x[512 + i] = 0.0f; /* (a block of zeros) */
    uint8_t *t1 = malloc(ob_type_tensor_size(OB_TYPE_TQ1_0, ne0, rows));
    CHECK(ob_tensor_quantize(OB_TYPE_TQ1_0, x, t1, ne0, rows) == 0);
    CHECK(ob_tensor_dequantize(OB_TYPE_TQ1_0, t1, a, ne0, rows) == 0);
    size_t sz = 0;
    uint8_t *t2 = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, t1, ne0, rows, &sz);
    CHECK(t2 != NULL);
    CHECK(sz == ob_type_tensor_size(OB_TYPE_TQ2_0, ne0, rows));
    if (t2) {
        CHECK(ob_tensor_dequantize(OB_TYPE_TQ2_0, t2, b, ne0, rows) == 0);
        CHECK(memcmp(a, b, (size_t)n * sizeof *a) == 0);
        uint8_t *back = ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_TQ1_0, t2, ne0, rows, &sz);
        CHECK(back != NULL && memcmp(back, t1, ob_type_tensor_size(OB_TYPE_TQ1_0, ne0, rows)) == 0);
        free(back);
    }
    /* the direct rewrite keeps the values of any bytes at all (here random ones, finite scales) */
    const size_t b1 = ob_type_tensor_size(OB_TYPE_TQ1_0, ne0, rows);
    uint32_t seed = 7;
    for (size_t i = 0; i < b1; i++) t1[i] = (uint8_t)((seed = seed * 1664525u + 1013904223u) >> 24);
    for (int64_t blk = 0; blk < n / 256; blk++) t1[blk * 54 + 53] &= 0x3b; /* (f16 exponent below 31) */
    CHECK(ob_tensor_dequantize(OB_TYPE_TQ1_0, t1, a, ne0, rows) == 0);
    free(t2);
    t2 = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, t1, ne0, rows, &sz);
    CHECK(t2 != NULL && ob_tensor_dequantize(OB_TYPE_TQ2_0, t2, b, ne0, rows) == 0 &&
          memcmp(a, b, (size_t)n * sizeof *a) == 0);
    /* tq2_0 of a scale a block (x above: 0.7 (1 + i / 256)) is no i2_s tensor */
    uint8_t *q2 = malloc(ob_type_tensor_size(OB_TYPE_TQ2_0, ne0, rows));
    CHECK(ob_tensor_quantize(OB_TYPE_TQ2_0, x, q2, ne0, rows) == 0);
    CHECK(ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_I2_S, q2, ne0, rows, &sz) == NULL);
    test_tq2_as_i2_s(x, q2, a, b, ne0, rows);
    free(q2);
    gen_weights(x, rows, ne0, 12);
    uint8_t *q8 = malloc(ob_type_tensor_size(OB_TYPE_Q8_0, ne0, rows));
    CHECK(ob_tensor_quantize(OB_TYPE_Q8_0, x, q8, ne0, rows) == 0);
    CHECK(ob_tensor_convert(OB_TYPE_Q8_0, OB_TYPE_Q4_0, q8, ne0, rows, &sz) == NULL);
    CHECK(ob_tensor_convert(OB_TYPE_Q8_0, 999, q8, ne0, rows, &sz) == NULL);
    CHECK(ob_tensor_convert(OB_TYPE_I2_S, OB_TYPE_TQ2_0, q8, ne0, rows, &sz) == NULL); /* (a tensor tail: not row by row) */
    free(x);
    free(a);
    free(b);
    free(t1);
    free(t2);
    free(q8);
}

/* A tq1_0 tensor as i2_s directly, against the two steps, on one thread and on three (env: the
 * value OB_CONVERT_THREADS had, restored after): ne0 2560 (BitNet's rows) and enough rows for three
 * uneven shares (4096 blocks of 256 at least each; 12310 blocks). Refused where a block of the
 * last share has another d, where the shares have one d each but not the same, where a zero
 * block's d is negative, and where the blocks of values have d 0; as tq2_0, where the last share
 * has another d or a code 3. */
static void test_tq1_as_i2_s_threads(void) {
    const int64_t ne0 = 2560, rows = 1231, n = ne0 * rows, nblk = n / 256;
    const size_t b1 = ob_type_tensor_size(OB_TYPE_TQ1_0, ne0, rows), bi = ob_type_tensor_size(OB_TYPE_I2_S, ne0, rows);
    float *x = malloc((size_t)n * sizeof *x), *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    uint8_t *t1 = malloc(b1), *keep = malloc(b1);
    for (int64_t i = 0; i < n; i++) x[i] = i % 7 == 0 ? 0.9f : i % 4 == 0 ? -0.9f : 0.0f;
    for (int i = 0; i < 256; i++) x[3 * 256 + i] = 0.0f; /* (block 3: zeros) */
    CHECK(ob_tensor_quantize(OB_TYPE_TQ1_0, x, t1, ne0, rows) == 0);
    CHECK(ob_tensor_dequantize(OB_TYPE_TQ1_0, t1, a, ne0, rows) == 0);
    const char *env = getenv("OB_CONVERT_THREADS");
    char *saved = env ? strdup(env) : NULL;
    size_t sz = 0, sz2 = 0;
    setenv("OB_CONVERT_THREADS", "1", 1);
    uint8_t *one = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_I2_S, t1, ne0, rows, &sz);
    setenv("OB_CONVERT_THREADS", "3", 1);
    uint8_t *two = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_I2_S, t1, ne0, rows, &sz2);
    uint8_t *q2 = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, t1, ne0, rows, &sz);
    uint8_t *steps = q2 ? ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_I2_S, q2, ne0, rows, &sz) : NULL;
    CHECK(one && two && steps && sz == bi && sz2 == bi);
    if (one && two && steps) {
        CHECK(memcmp(one, two, bi) == 0);
        CHECK(memcmp(one, steps, bi) == 0);
        CHECK(ob_tensor_dequantize(OB_TYPE_I2_S, two, b, ne0, rows) == 0 && memcmp(a, b, (size_t)n * sizeof *a) == 0);
    }
    /* tq2_0 as i2_s on three threads: refused for a code 3, or another d, in the last block */
    for (int k = 0; q2 && k < 2; k++) {
        uint8_t *blk = q2 + (nblk - 1) * 66, was = blk[k ? 64 : 0];
        blk[k ? 64 : 0] = k ? was ^ 1 : 0xff;
        uint8_t *t = ob_tensor_convert(OB_TYPE_TQ2_0, OB_TYPE_I2_S, q2, ne0, rows, &sz);
        if (t || ob_test_verbose) fprintf(stderr, "  tq2_0 as i2_s, case %d, 3 threads: %s\n", k, t ? "converted" : "refused");
        CHECK(t == NULL);
        free(t);
        blk[k ? 64 : 0] = was;
    }
    free(one);
    free(two);
    free(steps);
    free(q2);
    /* refused: (case 0) the last block's d another; (1) the last third's blocks one d of their
     * own; (2) the zero block's d negative; (3) every d 0 */
    for (int k = 0; k < 4; k++) {
        memcpy(keep, t1, b1);
        for (int64_t blk = 0; blk < nblk; blk++) {
            uint8_t *d = t1 + blk * 54 + 52;
            if ((k == 0 && blk == nblk - 1) || (k == 1 && blk >= nblk * 2 / 3)) d[0] ^= 1;
            if (k == 2 && blk == 3) d[1] |= 0x80;
            if (k == 3) d[0] = d[1] = 0;
        }
        for (int th = 1; th <= 2; th++) {
            setenv("OB_CONVERT_THREADS", th == 1 ? "1" : "3", 1);
            uint8_t *t = ob_tensor_convert(OB_TYPE_TQ1_0, OB_TYPE_I2_S, t1, ne0, rows, &sz);
            if (t || ob_test_verbose) fprintf(stderr, "  tq1_0 as i2_s, case %d, %d thread(s): %s\n", k, th == 1 ? 1 : 3, t ? "converted" : "refused");
            CHECK(t == NULL);
            free(t);
        }
        memcpy(t1, keep, b1);
    }
    if (saved) setenv("OB_CONVERT_THREADS", saved, 1);
    else unsetenv("OB_CONVERT_THREADS");
    free(saved);
    free(x);
    free(a);
    free(b);
    free(t1);
    free(keep);
}

OB_SUITE(quant_convert) {
    test_convert();
    test_tq1_as_i2_s_threads();
}
