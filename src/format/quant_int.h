/* quant_int.h — helpers shared by the reference quant files (not part of quant.h's API).
 *
 * Owns: the little pieces every block layout uses: fp16 scales kept as two little-endian bytes
 * (so every block struct has alignment 1 and may start at any byte of a mapped file), the
 * 16-bit little-endian field access, round-to-nearest-even to int, and the 4-bit non-linear
 * grid of iq4_nl / iq4_xs. Does not own: any layout (quant_ref*.c), the type table (quant.c).
 */
#ifndef OB_QUANT_INT_H
#define OB_QUANT_INT_H

#include <stdint.h>
#include <string.h>

#include "format/quant.h"

static inline float ob_half_load(const uint8_t h[2]) {
    return ob_fp16_to_fp32((uint16_t)(h[0] | (h[1] << 8)));
}

static inline void ob_half_store(uint8_t h[2], float f) {
    uint16_t v = ob_fp32_to_fp16(f);
    h[0] = (uint8_t)(v & 0xff);
    h[1] = (uint8_t)(v >> 8);
}

/* The value an fp16 field will hold once stored: the scale the decoder really sees. */
static inline float ob_half_round(float f) { return ob_fp16_to_fp32(ob_fp32_to_fp16(f)); }

static inline uint32_t ob_le32(const uint8_t p[4]) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void ob_put_le32(uint8_t p[4], uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Round to the nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 pushes the
 * fraction out of the mantissa under the default rounding mode, and the low mantissa bits are
 * then the integer (offset by 2^22). Much cheaper than lrintf, which is a library call here. */
static inline int ob_round_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The 16 signed levels of iq4_nl / iq4_xs (and the search that places values on them): a
 * non-uniform grid, denser near zero where most weights are. GGUF fixes these numbers. */
extern const int8_t ob_iq4nl_grid[16];

/* One tq1_0 block's trits as 2-bit fields, 64 bytes in tq2_0's order or i2_s's (i2s_order);
 * whether a value is other than 0 (quant_ref.c). */
int ob_tq1_0_block_fields(const void *block, uint8_t out[64], int i2s_order);

/* Weighted quantizers (imp: one importance value per element, or NULL for plain squared
 * error), defined in quant_ref_legacy.c and quant_ref_k.c; ob_quantize_rows dispatches. */
void ob_quant_q4_0_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q4_1_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q5_0_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q5_1_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_iq4_nl_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q2_K_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q3_K_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q4_K_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q5_K_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_q6_K_w(const float *src, void *dst, int64_t n, const float *imp);
void ob_quant_iq4_xs_w(const float *src, void *dst, int64_t n, const float *imp);

#endif
