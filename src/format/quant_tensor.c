/* quant_tensor.c — whole-tensor quantize / dequantize and the i2_s layout.
 *
 * Owns: bitnet.cpp's I2_S byte layout (below), the per-tensor scale that makes it a tensor
 * format rather than a block format, validation of I2_S data read from a file, and the
 * dispatch of ob_tensor_* to the row routines of every other type (lean4's rotation lives in
 * quant_lean.c). Does not own: the row layouts of GGML's types (quant_ref*.c).
 *
 * I2_S, as Microsoft's ggml-model-i2_s.gguf files hold it (type id 36; read from bitnet.cpp's
 * quantize_i2_s and ggml_nbytes in its llama.cpp fork, and from its Python writer
 * quantize_to_i2_s in utils/convert-hf-to-gguf-bitnet.py; docs/compat.md cites them):
 *  - Each weight is a 2-bit code c in {0, 1, 2} meaning c - 1 in {-1, 0, +1}.
 *  - The tensor, flattened row-major, is cut into blocks of 128 elements, 32 bytes each.
 *    Element j of a block lives in byte (j % 32) of that block, at bits 6 - 2 * (j / 32):
 *    the first 32 elements take the top two bits of the 32 bytes, the last 32 the low two.
 *    Rows of 128k elements therefore start on block boundaries (the only shapes we accept).
 *  - After the n/4 bytes of codes come 32 more bytes: a little-endian f32 scale, then 28
 *    bytes of padding (zeros from the Python writer, unspecified from llama-quantize).
 *    A GGUF tensor of type 36 therefore occupies n/4 + 32 bytes.
 *  - value = (c - 1) * scale. bitnet.cpp's matmul computes (sum c*q - sum q) * scale / s_x
 *    with int8 activations q, which is that value exactly.
 * Code 3 is never written; a kernel reading it would use +2. We refuse it as corruption.
 */
#include "format/quant_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/quant.h"
#include "format/quant_int.h"

#define QK_I2_S 128

static const uint8_t *i2_s_tail(const void *data, int64_t n) { return (const uint8_t *)data + n / 4; }

/* Row routine: the trits of n elements (a multiple of 128), unscaled. */
void ob_dequant_i2_s(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK_I2_S; ib++, b += 32, dst += QK_I2_S)
        for (int g = 0; g < 4; g++)
            for (int m = 0; m < 32; m++) dst[g * 32 + m] = (float)(((b[m] >> (6 - 2 * g)) & 3) - 1);
}

/* Whole tensor of n elements. Already-ternary input ({-m, 0, +m}, what `convert` feeds it and
 * what bitnet.cpp expects) is stored exactly, with scale m: the same bytes bitnet.cpp's
 * quantize_i2_s writes for it. Any other input is ternarized as BitNet b1.58 does (absmean:
 * t = clamp(round(x / mean|x|), -1, 1)) with the least-squares scale mean(|x| where t != 0);
 * bitnet.cpp would keep only the signs there. */
static void quant_i2_s(const float *x, uint8_t *dst, int64_t n) {
    double sum_abs = 0;
    for (int64_t i = 0; i < n; i++) sum_abs += fabsf(x[i]);
    float mean = (float)(sum_abs / (double)n);
    double kept = 0;
    int64_t n_kept = 0;
    memset(dst, 0, (size_t)(n / 4) + 32);
    for (int64_t i = 0; i < n; i++) {
        int t = 0;
        if (mean > 0) {
            float q = nearbyintf(x[i] / mean);
            t = q >= 1 ? 1 : q <= -1 ? -1 : 0;
        }
        if (t) { kept += fabsf(x[i]); n_kept++; }
        int64_t ib = i / QK_I2_S, j = i % QK_I2_S;
        dst[ib * 32 + j % 32] |= (uint8_t)((t + 1) << (6 - 2 * (j / 32)));
    }
    float scale = n_kept ? (float)(kept / (double)n_kept) : 0.0f;
    memcpy(dst + n / 4, &scale, 4); /* little-endian hosts only, like the rest of the GGUF code */
}

/* ---- lean4 hooks (quant_lean.c), absent in a LEAN=0 build ---------------------------- */
#ifndef OB_NO_LEAN
void ob_quant_lean4_rows(const float *src, void *dst, int64_t ne0, int64_t n_rows);
void ob_dequant_lean4_rows(const void *src, float *dst, int64_t ne0, int64_t n_rows);
#endif

int ob_tensor_can_quantize(int type) {
    const ob_type_traits *t = ob_type_get(type);
    if (!t) return 0;
    if (type == OB_TYPE_I2_S) return 1;
#ifndef OB_NO_LEAN
    if (type == OB_TYPE_LEAN4) return 1;
#endif
    return t->from_float != NULL;
}

int ob_tensor_quantize(int type, const float *src, void *dst, int64_t ne0, int64_t n_rows) {
    const ob_type_traits *t = ob_type_get(type);
    if (!ob_tensor_can_quantize(type) || ob_type_row_size(type, ne0) == 0 || n_rows < 1) return -1;
    if (type == OB_TYPE_I2_S) {
        quant_i2_s(src, dst, ne0 * n_rows);
        return 0;
    }
#ifndef OB_NO_LEAN
    if (type == OB_TYPE_LEAN4) {
        ob_quant_lean4_rows(src, dst, ne0, n_rows);
        return 0;
    }
#endif
    t->from_float(src, dst, ne0 * n_rows);
    return 0;
}

int ob_tensor_dequantize(int type, const void *src, float *dst, int64_t ne0, int64_t n_rows) {
    const ob_type_traits *t = ob_type_get(type);
    if (!t || !t->to_float || ob_type_row_size(type, ne0) == 0 || n_rows < 1) return -1;
#ifndef OB_NO_LEAN
    if (type == OB_TYPE_LEAN4) {
        ob_dequant_lean4_rows(src, dst, ne0, n_rows);
        return 0;
    }
#endif
    int64_t n = ne0 * n_rows;
    t->to_float(src, dst, n);
    if (t->tensor_tail) {
        float s = ob_tensor_scale(type, src, ne0, n_rows);
        for (int64_t i = 0; i < n; i++) dst[i] *= s;
    }
    return 0;
}

float ob_tensor_scale(int type, const void *data, int64_t ne0, int64_t n_rows) {
    if (type != OB_TYPE_I2_S) return 1.0f;
    float s;
    memcpy(&s, i2_s_tail(data, ne0 * n_rows), 4);
    return s;
}

int ob_tensor_validate(int type, const void *data, int64_t ne0, int64_t n_rows, char *err, size_t errlen) {
    if (type != OB_TYPE_I2_S) return 0;
    int64_t n = ne0 * n_rows;
    float s = ob_tensor_scale(type, data, ne0, n_rows);
    if (!isfinite(s) || s < 0) {
        snprintf(err, errlen, "i2_s scale %g (the f32 at byte %lld, after the codes) is not a finite number >= 0: the data is corrupt",
                 (double)s, (long long)(n / 4));
        return -1;
    }
    /* A 2-bit field holds 3 exactly when both of its bits are set. */
    const uint8_t *b = data;
    size_t nb = (size_t)(n / 4), i = 0;
    for (; i + 8 <= nb; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w & (w >> 1) & 0x5555555555555555ull) break;
    }
    for (; i < nb; i++)
        if (b[i] & (b[i] >> 1) & 0x55) {
            snprintf(err, errlen, "i2_s byte %zu (row %lld) holds the 2-bit code 3, which no I2_S writer produces (codes are 0, 1, 2): the data is corrupt",
                     i, (long long)(i * 4 / (size_t)ne0));
            return -1;
        }
    return 0;
}
