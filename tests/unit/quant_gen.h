/* quant_gen.h — deterministic test data for the quant suites, shared verbatim with the
 * one-off programs that took the expected values from llama.cpp.
 *
 * Owns: the input generators (gen_input: blocks in ten modes that stress rounding, scales
 * and clamps; gen_blocks: random encoded blocks with finite fp16 fields, for decoder checks;
 * gen_weights / gen_importance: weight-like matrices and an importance vector, for error
 * comparisons), FNV-1a hashing and the half-precision sweeps. Everything between the
 * OB_QUANT_GEN markers uses only integer arithmetic and IEEE float operations without
 * contraction, so it produces the same bits in this tree and in a program linked against
 * llama.cpp. Does not own: any check (test_quant.c, test_quant_more.c).
 */
#ifndef OB_TEST_QUANT_GEN_H
#define OB_TEST_QUANT_GEN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Each suite uses some of these. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* OB_QUANT_GEN_BEGIN */
/* 64-bit LCG with Knuth's MMIX constants; the top 31 bits of the state are the output. Only
 * integer arithmetic and exactly-representable float operations (plus a few IEEE products)
 * are used, so the input is the same on every IEEE-754 machine and compiler. */
static uint32_t gen_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* Uniform in [-1, 1) with 24 random bits: exact in float. */
static float gen_unit(uint64_t *s) {
    return (float)((int32_t)(gen_next(s) >> 7) - (1 << 23)) * 0x1p-23f;
}

/* n floats (n a multiple of 256) in 32-element groups, each group in one of ten modes: zeros,
 * smooth noise, noise with one outlier, ternary-like values with exact halves, a constant,
 * all negative, tiny (fp16-subnormal scales), large (near the fp16 limit), and two modes of
 * exact rounding ties. The first half picks a mode per 256-element super-block, so the
 * ternary types see whole blocks of one kind; the second half mixes modes inside one. */
static void gen_input(float *x, int n, uint64_t seed) {
    uint64_t s = seed;
    for (int g = 0; g < n / 32; g++) {
        float *y = x + 32 * g;
        int mode = g < n / 64 ? (g / 8) % 10 : g % 10;
        float scale = ldexpf(1.0f, (int)(gen_next(&s) % 21) - 12); /* 2^-12 .. 2^8 */
        for (int i = 0; i < 32; i++) {
            float u = gen_unit(&s);
            switch (mode) {
            case 0: y[i] = 0.0f; break;
            case 1: y[i] = (u + gen_unit(&s)) * scale; break;
            case 2: y[i] = u * scale; break;
            case 3: y[i] = (float)((int)(gen_next(&s) % 5) - 2) * 0.5f * scale; break;
            case 4: y[i] = 0.75f * scale; break;
            case 5: y[i] = -fabsf(u) * scale; break;
            case 6: y[i] = u * 0x1p-20f; break;
            case 7: y[i] = u * 60000.0f; break;
            case 8: y[i] = (float)((int)(gen_next(&s) % 16) - 8) + 0.5f; break;
            default: y[i] = (float)((int)(gen_next(&s) % 254) - 127) + 0.5f; break;
            }
        }
        if (mode == 2) y[gen_next(&s) % 32] = (gen_next(&s) & 1 ? 37.0f : -53.0f) * scale;
        if (mode == 8) y[0] = -8.0f;
        if (mode == 9) y[0] = 127.0f;
    }
}

/* 64-bit FNV-1a over bytes, resumable (h = FNV_OFFSET to start). Multi-byte values are
 * hashed in host byte order; GGUF and every host this engine targets are little-endian. */
#define FNV_OFFSET 14695981039346656037ull
static uint64_t fnv1a_more(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

static uint64_t fnv1a(const void *p, size_t n) { return fnv1a_more(FNV_OFFSET, p, n); }

/* Conversion sweeps: every 4099th fp32 bit pattern (about a million values, all exponents
 * and both signs) through an fp32 -> 16-bit conversion, NaN inputs optionally skipped; and
 * every fp16 pattern through fp16 -> fp32, signalling NaNs (exponent all ones, top mantissa
 * bit clear, mantissa non-zero) skipped. */
static uint64_t sweep_to_16(uint16_t (*conv)(float), int skip_nan) {
    uint64_t h = FNV_OFFSET;
    for (uint64_t i = 0; i <= 0xffffffffull; i += 4099) {
        uint32_t bits = (uint32_t)i;
        float f;
        memcpy(&f, &bits, 4);
        if (skip_nan && (bits & 0x7fffffffu) > 0x7f800000u) continue;
        uint16_t r = conv(f);
        h = fnv1a_more(h, &r, 2);
    }
    return h;
}

static uint64_t sweep_f16_to_32(float (*conv)(uint16_t)) {
    uint64_t h = FNV_OFFSET;
    for (uint32_t i = 0; i < 65536; i++) {
        if ((i & 0x7c00) == 0x7c00 && (i & 0x3ff) != 0 && !(i & 0x200)) continue;
        float f = conv((uint16_t)i);
        h = fnv1a_more(h, &f, 4);
    }
    return h;
}

#define GEN_N 16384
#define GEN_SEED 20240601u
/* OB_QUANT_GEN_END */

/* OB_QUANT_GEN2_BEGIN */
/* Random encoded blocks of a GGML type: LCG bytes, then every fp16 field of each block
 * replaced by a random finite half (subnormals and zeros included), so decoders see every
 * code pattern without inf/NaN scales, whose NaN payloads would only test the FPU. The table
 * lists, per type id, block bytes and the byte offsets of its fp16 fields. */
typedef struct { int type, size, n_half, half_at[2]; } gen_block_kind;
static const gen_block_kind gen_block_kinds[] = {
    {3, 20, 2, {0, 2}},   /* q4_1 */
    {6, 22, 1, {0, 0}},   /* q5_0 */
    {7, 24, 2, {0, 2}},   /* q5_1 */
    {39, 17, 0, {0, 0}},  /* mxfp4: the e8m0 byte stays random */
    {20, 18, 1, {0, 0}},  /* iq4_nl */
    {10, 84, 2, {80, 82}}, /* q2_K */
    {11, 110, 1, {108, 0}}, /* q3_K */
    {12, 144, 2, {0, 2}}, /* q4_K */
    {13, 176, 2, {0, 2}}, /* q5_K */
    {14, 210, 1, {208, 0}}, /* q6_K */
    {23, 136, 1, {0, 0}}, /* iq4_xs */
};

static int gen_blocks(uint8_t *q, int type, int nblocks, uint64_t seed) {
    const gen_block_kind *k = NULL;
    for (size_t i = 0; i < sizeof gen_block_kinds / sizeof gen_block_kinds[0]; i++)
        if (gen_block_kinds[i].type == type) k = &gen_block_kinds[i];
    if (!k) return -1;
    uint64_t s = seed ^ (uint64_t)type * 0x9e3779b97f4a7c15ull;
    for (int b = 0; b < nblocks; b++) {
        uint8_t *p = q + (size_t)b * k->size;
        for (int i = 0; i < k->size; i++) p[i] = (uint8_t)(gen_next(&s) >> 8);
        for (int h = 0; h < k->n_half; h++) {
            uint32_t v = gen_next(&s) & 0xffff;
            if ((v & 0x7c00) == 0x7c00) v &= ~0x4000u; /* exponent 31 (inf/NaN) -> 15 */
            p[k->half_at[h]] = (uint8_t)(v & 0xff);
            p[k->half_at[h] + 1] = (uint8_t)(v >> 8);
        }
    }
    return 0;
}

/* A weight-like matrix: each value is the sum of four uniforms (near-normal) times a
 * per-row scale 2^-9..2^-4, and about one value in 64 is an outlier 3..10 times larger. */
static void gen_weights(float *x, int nrows, int ncols, uint64_t seed) {
    uint64_t s = seed;
    for (int r = 0; r < nrows; r++) {
        float sc = ldexpf(1.0f + 0.5f * gen_unit(&s), -(int)(4 + gen_next(&s) % 6));
        for (int c = 0; c < ncols; c++) {
            float v = gen_unit(&s) + gen_unit(&s) + gen_unit(&s) + gen_unit(&s);
            if (gen_next(&s) % 64 == 0) v *= (float)(3 + gen_next(&s) % 8);
            x[(size_t)r * ncols + c] = v * sc;
        }
    }
}

/* An importance vector (an imatrix row): 2^k * (1 + u), k in -6..6, a spread like real
 * activation statistics, where a few columns matter far more than the rest. */
static void gen_importance(float *w, int n, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < n; i++) w[i] = ldexpf(1.0f + 0.5f * (gen_unit(&s) + 1.0f), (int)(gen_next(&s) % 13) - 6);
}
/* OB_QUANT_GEN2_END */

#pragma GCC diagnostic pop

#endif
