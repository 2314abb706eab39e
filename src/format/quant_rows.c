/* quant_rows.c — ob_quantize_rows: a tensor's rows to a weight type, with an optional
 * importance matrix (quant_search.h).
 *
 * Owns: which routine quantizes a type with and without importance values. Without them
 * every type goes through its table routine (quant.c), so the round-to-nearest types stay
 * byte-identical to llama.cpp's reference; with them the types llama.cpp also searches for
 * (q4_0, q4_1, q5_0, q5_1 and every K / IQ4 type) use their weighted search, the others
 * (f32, f16, bf16, q8_0, tq1_0, tq2_0, mxfp4) ignore the matrix as llama.cpp does.
 * Does not own: the searches (quant_search.c), layouts (quant_ref*.c), threads (callers split
 * the rows).
 */
#include <assert.h>

#include "format/quant_int.h"
#include "format/quant_search.h"

typedef void (*weighted_fn)(const float *src, void *dst, int64_t n, const float *imp);

static weighted_fn weighted_of(int type) {
    switch (type) {
    case OB_TYPE_Q4_0: return ob_quant_q4_0_w;
    case OB_TYPE_Q4_1: return ob_quant_q4_1_w;
    case OB_TYPE_Q5_0: return ob_quant_q5_0_w;
    case OB_TYPE_Q5_1: return ob_quant_q5_1_w;
    case OB_TYPE_IQ4_NL: return ob_quant_iq4_nl_w;
    case OB_TYPE_Q2_K: return ob_quant_q2_K_w;
    case OB_TYPE_Q3_K: return ob_quant_q3_K_w;
    case OB_TYPE_Q4_K: return ob_quant_q4_K_w;
    case OB_TYPE_Q5_K: return ob_quant_q5_K_w;
    case OB_TYPE_Q6_K: return ob_quant_q6_K_w;
    case OB_TYPE_IQ4_XS: return ob_quant_iq4_xs_w;
    default: return NULL;
    }
}

int ob_type_uses_importance(int type) { return weighted_of(type) != NULL; }

void ob_quantize_rows(int type, const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *importance) {
    const ob_type_traits *t = ob_type_get(type);
    assert(t && t->from_float && n_per_row % t->block_size == 0);
    const size_t row_bytes = ob_type_row_size(type, n_per_row);
    weighted_fn wf = importance ? weighted_of(type) : NULL;
    if (!wf) { /* rows are contiguous and blocks never straddle them: one call */
        t->from_float(src, dst, nrows * n_per_row);
        return;
    }
    for (int64_t r = 0; r < nrows; r++)
        wf(src + r * n_per_row, (uint8_t *)dst + (size_t)r * row_bytes, n_per_row, importance);
}
