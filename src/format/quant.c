/* quant.c — the type table and half-precision conversions.
 *
 * Owns: ob_type_get / names / row sizes, fp16 and bf16 <-> fp32. The per-type reference
 * quantize / dequantize routines live in quant_ref.c (layouts identical to llama.cpp's).
 * Does not own: fast kernels (backends).
 */
#include "format/quant.h"

#include <string.h>
#include <strings.h>

/* Reference routines, defined in quant_ref.c. */
void ob_dequant_f32(const void *src, float *dst, int64_t n);
void ob_quant_f32(const float *src, void *dst, int64_t n);
void ob_dequant_f16(const void *src, float *dst, int64_t n);
void ob_quant_f16(const float *src, void *dst, int64_t n);
void ob_dequant_bf16(const void *src, float *dst, int64_t n);
void ob_quant_bf16(const float *src, void *dst, int64_t n);
void ob_dequant_q8_0(const void *src, float *dst, int64_t n);
void ob_quant_q8_0(const float *src, void *dst, int64_t n);
void ob_dequant_q4_0(const void *src, float *dst, int64_t n);
void ob_quant_q4_0(const float *src, void *dst, int64_t n);
void ob_dequant_tq1_0(const void *src, float *dst, int64_t n);
void ob_quant_tq1_0(const float *src, void *dst, int64_t n);
void ob_dequant_tq2_0(const void *src, float *dst, int64_t n);
void ob_quant_tq2_0(const float *src, void *dst, int64_t n);
/* quant_ref_legacy.c and quant_ref_k.c */
void ob_dequant_q4_1(const void *src, float *dst, int64_t n);
void ob_quant_q4_1(const float *src, void *dst, int64_t n);
void ob_dequant_q5_0(const void *src, float *dst, int64_t n);
void ob_quant_q5_0(const float *src, void *dst, int64_t n);
void ob_dequant_q5_1(const void *src, float *dst, int64_t n);
void ob_quant_q5_1(const float *src, void *dst, int64_t n);
void ob_dequant_mxfp4(const void *src, float *dst, int64_t n);
void ob_quant_mxfp4(const float *src, void *dst, int64_t n);
void ob_dequant_iq4_nl(const void *src, float *dst, int64_t n);
void ob_quant_iq4_nl(const float *src, void *dst, int64_t n);
void ob_dequant_q2_K(const void *src, float *dst, int64_t n);
void ob_quant_q2_K(const float *src, void *dst, int64_t n);
void ob_dequant_q3_K(const void *src, float *dst, int64_t n);
void ob_quant_q3_K(const float *src, void *dst, int64_t n);
void ob_dequant_q4_K(const void *src, float *dst, int64_t n);
void ob_quant_q4_K(const float *src, void *dst, int64_t n);
void ob_dequant_q5_K(const void *src, float *dst, int64_t n);
void ob_quant_q5_K(const float *src, void *dst, int64_t n);
void ob_dequant_q6_K(const void *src, float *dst, int64_t n);
void ob_quant_q6_K(const float *src, void *dst, int64_t n);
void ob_dequant_iq4_xs(const void *src, float *dst, int64_t n);
void ob_quant_iq4_xs(const float *src, void *dst, int64_t n);
void ob_dequant_i2_s(const void *src, float *dst, int64_t n); /* quant_tensor.c */
#ifndef OB_NO_LEAN
void ob_dequant_lean4(const void *src, float *dst, int64_t n); /* quant_lean.c: rotated values */
#define OB_LEAN4_TO_FLOAT ob_dequant_lean4
#else
#define OB_LEAN4_TO_FLOAT NULL /* still named, so a file needing it is refused by name (LEAN=0) */
#endif

/* Block geometry is GGML's; routines are filled in for the types this build computes. */
static const ob_type_traits type_table[OB_TYPE_COUNT] = {
    [OB_TYPE_F32]     = {"f32", 1, 4, ob_dequant_f32, ob_quant_f32},
    [OB_TYPE_F16]     = {"f16", 1, 2, ob_dequant_f16, ob_quant_f16},
    [OB_TYPE_Q4_0]    = {"q4_0", 32, 18, ob_dequant_q4_0, ob_quant_q4_0},
    [OB_TYPE_Q4_1]    = {"q4_1", 32, 20, ob_dequant_q4_1, ob_quant_q4_1},
    [OB_TYPE_Q5_0]    = {"q5_0", 32, 22, ob_dequant_q5_0, ob_quant_q5_0},
    [OB_TYPE_Q5_1]    = {"q5_1", 32, 24, ob_dequant_q5_1, ob_quant_q5_1},
    [OB_TYPE_Q8_0]    = {"q8_0", 32, 34, ob_dequant_q8_0, ob_quant_q8_0},
    [OB_TYPE_Q8_1]    = {"q8_1", 32, 36, NULL, NULL},
    [OB_TYPE_Q2_K]    = {"q2_K", 256, 84, ob_dequant_q2_K, ob_quant_q2_K},
    [OB_TYPE_Q3_K]    = {"q3_K", 256, 110, ob_dequant_q3_K, ob_quant_q3_K},
    [OB_TYPE_Q4_K]    = {"q4_K", 256, 144, ob_dequant_q4_K, ob_quant_q4_K},
    [OB_TYPE_Q5_K]    = {"q5_K", 256, 176, ob_dequant_q5_K, ob_quant_q5_K},
    [OB_TYPE_Q6_K]    = {"q6_K", 256, 210, ob_dequant_q6_K, ob_quant_q6_K},
    [OB_TYPE_Q8_K]    = {"q8_K", 256, 292, NULL, NULL},
    [OB_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, NULL, NULL},
    [OB_TYPE_IQ2_XS]  = {"iq2_xs", 256, 74, NULL, NULL},
    [OB_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, NULL, NULL},
    [OB_TYPE_IQ1_S]   = {"iq1_s", 256, 50, NULL, NULL},
    [OB_TYPE_IQ4_NL]  = {"iq4_nl", 32, 18, ob_dequant_iq4_nl, ob_quant_iq4_nl},
    [OB_TYPE_IQ3_S]   = {"iq3_s", 256, 110, NULL, NULL},
    [OB_TYPE_IQ2_S]   = {"iq2_s", 256, 82, NULL, NULL},
    [OB_TYPE_IQ4_XS]  = {"iq4_xs", 256, 136, ob_dequant_iq4_xs, ob_quant_iq4_xs},
    [OB_TYPE_I8]      = {"i8", 1, 1, NULL, NULL},
    [OB_TYPE_I16]     = {"i16", 1, 2, NULL, NULL},
    [OB_TYPE_I32]     = {"i32", 1, 4, NULL, NULL},
    [OB_TYPE_I64]     = {"i64", 1, 8, NULL, NULL},
    [OB_TYPE_F64]     = {"f64", 1, 8, NULL, NULL},
    [OB_TYPE_IQ1_M]   = {"iq1_m", 256, 56, NULL, NULL},
    [OB_TYPE_BF16]    = {"bf16", 1, 2, ob_dequant_bf16, ob_quant_bf16},
    [OB_TYPE_TQ1_0]   = {"tq1_0", 256, 54, ob_dequant_tq1_0, ob_quant_tq1_0},
    [OB_TYPE_TQ2_0]   = {"tq2_0", 256, 66, ob_dequant_tq2_0, ob_quant_tq2_0},
    /* GGML's fork says block 1, size 1 and special-cases the byte count (n/4 + 32); the real
     * geometry is 128 elements in 32 bytes plus a 32-byte tail whose first 4 bytes are the
     * f32 scale. from_float is NULL: only ob_tensor_quantize can write the tail. */
    [OB_TYPE_I2_S]    = {"i2_s", 128, 32, ob_dequant_i2_s, NULL, 32},
    [OB_TYPE_MXFP4]   = {"mxfp4", 32, 17, ob_dequant_mxfp4, ob_quant_mxfp4},
};

/* 1bit's own types (ids from OB_TYPE_EXT_FIRST). */
static const ob_type_traits ext_table[OB_TYPE_EXT_END - OB_TYPE_EXT_FIRST] = {
    /* from_float is NULL: rows must be rotated first, which ob_tensor_quantize does */
    [OB_TYPE_LEAN4 - OB_TYPE_EXT_FIRST] = {"lean4", 128, 68, OB_LEAN4_TO_FLOAT, NULL, 0},
};

const ob_type_traits *ob_type_get(int type) {
    if (type >= OB_TYPE_EXT_FIRST && type < OB_TYPE_EXT_END) return &ext_table[type - OB_TYPE_EXT_FIRST];
    if (type < 0 || type >= OB_TYPE_COUNT || type_table[type].name == NULL) return NULL;
    return &type_table[type];
}

const char *ob_type_name(int type) {
    const ob_type_traits *t = ob_type_get(type);
    return t ? t->name : "unknown";
}

int ob_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < OB_TYPE_COUNT; i++)
        if (type_table[i].name && strcasecmp(type_table[i].name, name) == 0) return i;
    for (int i = OB_TYPE_EXT_FIRST; i < OB_TYPE_EXT_END; i++)
        if (strcasecmp(ext_table[i - OB_TYPE_EXT_FIRST].name, name) == 0) return i;
    return -1;
}

size_t ob_type_row_size(int type, int64_t n) {
    const ob_type_traits *t = ob_type_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * (size_t)t->type_size;
}

size_t ob_type_tensor_size(int type, int64_t ne0, int64_t n_rows) {
    size_t row = ob_type_row_size(type, ne0);
    if (row == 0 || n_rows < 1 || (uint64_t)n_rows > (SIZE_MAX - 64) / row) return 0;
    return row * (size_t)n_rows + (size_t)ob_type_get(type)->tensor_tail;
}

float ob_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0); /* NaN comes out quiet, as F16C */
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ob_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* NaN stays NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to zero */
        uint32_t man = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(ax >> 23); /* 14..24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax + 0xc8000fffu + ((ax >> 13) & 1); /* rebias exponent and round to nearest even */
    return (uint16_t)(sign | (r >> 13));
}

float ob_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ob_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
