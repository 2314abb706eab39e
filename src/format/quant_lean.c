/* quant_lean.c — lean4, 1bit's Hadamard-rotated 4-bit weight type (docs/lean.md).
 *
 * Owns: the lean4 block layout, its reference quantize (rotated rows -> blocks) and dequantize
 * (blocks -> rotated values, or -> original rows), and the rotation itself (ob_lean_rotate),
 * which the CPU backend also applies to activations. Does not own: the type table (quant.c),
 * whole-tensor dispatch (quant_tensor.c), fast kernels (backends). A LEAN=0 build compiles
 * none of this; the type then stays named in the table, so its files are refused by name.
 *
 * Math: a row w of a weight matrix (input dimension) is cut into blocks of 128 and each block
 * is replaced by H w / sqrt(128), H the 128 x 128 Sylvester Hadamard matrix. That matrix is
 * symmetric and orthogonal once scaled, so it is its own inverse, and a dot product with an
 * activation block x is unchanged when x is rotated the same way: w . x = (Hw) . (Hx) / 128.
 * Rotation spreads a few large weights (or activations) over the whole block, so the values a
 * block quantizes are close to Gaussian; the 16 levels are therefore the Lloyd-Max levels of
 * a Gaussian (Max 1960), scaled to int8, instead of a uniform grid.
 *
 * Block (128 elements = one rotation block, 68 bytes, 4.25 bits per weight):
 *   uint8 d[2][2]   two fp16 scales: d[0] for elements 0..63, d[1] for elements 64..127
 *   uint8 qs[64]    byte j: element j in the low nibble, element j + 64 in the high nibble
 *   value(e) = d[e / 64] * grid[nibble(e)]
 */
#ifndef OB_NO_LEAN

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/quant.h"
#include "format/quant_int.h"
#include "format/quant_tensor.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK OB_LEAN_BLOCK
#define HALF (QK / 2)

typedef struct {
    uint8_t d[2][2];     /* fp16 scales of the two 64-element halves */
    uint8_t qs[QK / 2];  /* [64] low nibble: element j, high nibble: element j + 64 */
} lean4_block;           /* 68 bytes */
_Static_assert(sizeof(lean4_block) == 68, "lean4 block must be 68 bytes (docs/lean.md)");

/* Lloyd-Max levels of N(0, 1) for 16 levels (+-0.1284 ... +-2.7326), times 127 / 2.7326. */
static const int8_t lean_grid[16] = {-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127};

void ob_lean_rotate(float *x, int64_t n) {
    assert(n % QK == 0);
    const float norm = 0.0883883476483184405f; /* 1 / sqrt(128) */
    for (int64_t b = 0; b < n; b += QK) {
        float *v = x + b;
        for (int h = 1; h < QK; h *= 2)
            for (int i = 0; i < QK; i += 2 * h)
                for (int j = i; j < i + h; j++) {
                    float a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (int i = 0; i < QK; i++) v[i] *= norm;
    }
}

/* Index of the grid level nearest to v, ties going up. Every midpoint between two levels is a
 * multiple of 0.5 (the levels are integers), so the answer is constant on each interval
 * [k/2, (k+1)/2) and a table over floor(2v) gives it exactly. */
#define NEAR_SPAN 256 /* table covers v in [-128, 128); beyond, the end levels */
static uint8_t near_tab[2 * 2 * NEAR_SPAN];
static pthread_once_t near_once = PTHREAD_ONCE_INIT;

static void near_init(void) {
    for (int k = 0; k < 4 * NEAR_SPAN; k++) {
        float v = (float)(k - 2 * NEAR_SPAN) * 0.5f;
        int idx = 0;
        for (int i = 1; i < 16; i++) idx += v >= 0.5f * (float)(lean_grid[i - 1] + lean_grid[i]);
        near_tab[k] = (uint8_t)idx;
    }
}

static inline int nearest(float v) {
    float f = floorf(2.0f * v);
    if (!(f >= -2 * NEAR_SPAN)) return 0; /* also NaN */
    if (f >= 2 * NEAR_SPAN) return 15;
    return near_tab[(int)f + 2 * NEAR_SPAN];
}

/* One 64-element half: the fp16 scale with the least squared error among a few candidates
 * around amax / 127. For each candidate the levels are picked, the scale refitted to them
 * by least squares and the error of that fit computed in closed form. */
static float quant_half(const float *x, uint8_t *q) {
    float amax = 0;
    double sxx = 0;
    for (int i = 0; i < HALF; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        sxx += (double)x[i] * x[i];
    }
    if (!(amax > 0)) {
        memset(q, 8, HALF); /* any level, with d = 0: zeros */
        return 0.0f;
    }
    float best_d = 0;
    double best_e = INFINITY;
    for (int k = -3; k <= 3; k++) {
        float id = 127.0f / (amax * (1.0f + 0.03f * (float)k));
        double sxg = 0, sgg = 0;
        for (int i = 0; i < HALF; i++) {
            int g = lean_grid[nearest(x[i] * id)];
            sxg += (double)x[i] * g;
            sgg += (double)g * g;
        }
        float d = ob_half_round((float)(sxg / sgg));
        double e = sxx - 2.0 * d * sxg + (double)d * d * sgg; /* sum (x - d g)^2 */
        if (d > 0 && e < best_e) { best_e = e; best_d = d; }
    }
    float id = best_d > 0 ? 1.0f / best_d : 0.0f;
    for (int i = 0; i < HALF; i++) q[i] = (uint8_t)nearest(x[i] * id);
    return best_d;
}

/* Blocks of already rotated values (n a multiple of 128). */
static void quant_rotated(const float *x, lean4_block *b, int64_t n) {
    uint8_t q[QK];
    pthread_once(&near_once, near_init);
    for (int64_t ib = 0; ib < n / QK; ib++, b++, x += QK) {
        ob_half_store(b->d[0], quant_half(x, q));
        ob_half_store(b->d[1], quant_half(x + HALF, q + HALF));
        for (int j = 0; j < HALF; j++) b->qs[j] = (uint8_t)(q[j] | (q[j + HALF] << 4));
    }
}

/* Row routine of the type table: the rotated values. */
void ob_dequant_lean4(const void *src, float *dst, int64_t n) {
    assert(n % QK == 0);
    const lean4_block *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b++, dst += QK) {
        const float d0 = ob_half_load(b->d[0]), d1 = ob_half_load(b->d[1]);
        for (int j = 0; j < HALF; j++) {
            dst[j] = d0 * (float)lean_grid[b->qs[j] & 0x0f];
            dst[j + HALF] = d1 * (float)lean_grid[b->qs[j] >> 4];
        }
    }
}

/* Whole tensors (quant_tensor.c): original rows in, rotated blocks out, and back. */
void ob_quant_lean4_rows(const float *src, void *dst, int64_t ne0, int64_t n_rows) {
    float tmp[QK];
    lean4_block *b = dst;
    for (int64_t i = 0; i < ne0 * n_rows; i += QK, b++) {
        memcpy(tmp, src + i, sizeof tmp);
        ob_lean_rotate(tmp, QK);
        quant_rotated(tmp, b, QK);
    }
}

void ob_dequant_lean4_rows(const void *src, float *dst, int64_t ne0, int64_t n_rows) {
    ob_dequant_lean4(src, dst, ne0 * n_rows);
    ob_lean_rotate(dst, ne0 * n_rows);
}

#endif /* OB_NO_LEAN */
