/* quant_search.h — choosing quantized codes by minimising a weighted squared error.
 *
 * Owns: the layout-free searches the reference quantizers of the K types, iq4_nl / iq4_xs and
 * (with an importance matrix) the legacy types share:
 *  - one block, one scale:            x ~ s * level[idx]       (q4_0, q5_0, iq4_nl, sub-blocks)
 *  - one block, scale and offset:     x ~ s * L - m, L 0..nmax (q4_1, q5_1, sub-blocks)
 *  - a super-block of sub-blocks whose scales (and offsets) are small integers times one fp16
 *    super-scale (q2_K .. q6_K, iq4_xs): ob_kq_search.
 * The objective is sum_i w[i] * (x[i] - decoded[i])^2 with decoded computed by exactly the
 * float operations the decoder uses, so "better" here means better in the dequantized file.
 * Does not own: bit layouts (quant_ref_legacy.c, quant_ref_k.c), the choice of w (the
 * callers: importance-matrix values, or plain 1 when there is none).
 */
#ifndef OB_QUANT_SEARCH_H
#define OB_QUANT_SEARCH_H

#include <stdint.h>

/* Levels a quantized value may take, ascending. Integer ranges (lo..hi) take a fast path. */
typedef struct {
    const int8_t *v;   /* [n] ascending, or NULL for the integer range lo..hi */
    int n;             /* number of levels */
    int lo, hi;        /* with v == NULL: levels lo, lo+1, ..., hi */
} ob_levels;

/* x[0..n) ~ s * level[idx[i]], s minimising the weighted error (s may be negative: the search
 * tries both ends of an asymmetric level set). Returns s; 0 with idx at the level nearest 0
 * for an all-zero block. n <= 256. */
float ob_search_scale(const float *x, const float *w, int n, const ob_levels *lv, uint8_t *idx);

/* x[0..n) ~ s * L[i] - m with L in 0..nmax. min_nonneg: require m >= 0 (the K types subtract
 * an unsigned multiple of dmin); otherwise m is free. Returns s (>= 0), *m set. n <= 256. */
float ob_search_scale_min(const float *x, const float *w, int n, int nmax, int min_nonneg, uint8_t *L, float *m);

/* The codes of one super-block of a K-like type. */
typedef struct {
    int n_sub, sub_len;   /* sub-blocks and their length: 8 x 32, 16 x 16 */
    ob_levels lv;         /* symmetric family: element levels; ignored when nmax > 0 */
    int nmax;             /* > 0: scale-and-min family, L in 0..nmax */
    int sc_lo, sc_hi;     /* integer range of the sub-block scale codes */
    int mc_hi;            /* scale-and-min family: min codes 0..mc_hi */
    int min_free;         /* scale-and-min, n_sub 1: the offset may have either sign (dmin too) */
} ob_kq_spec;

typedef struct {
    float d, dmin;        /* fp16-representable super-scales (dmin 0 for the symmetric family) */
    int sc[16], mc[16];   /* [n_sub] codes */
    uint8_t L[256];       /* [n_sub * sub_len] level index (symmetric) or L (scale-and-min) */
} ob_kq_codes;

/* Codes of one super-block x[n_sub * sub_len] with weights w (same length, all >= 0). The
 * decoded value of element i of sub-block j is (d * sc[j]) * level[L[i]], or
 * (d * sc[j]) * L[i] - (dmin * mc[j]), rounded as the decoders round. */
void ob_kq_search(const ob_kq_spec *spec, const float *x, const float *w, ob_kq_codes *out);

/* ---- the entry point for tools ----------------------------------------------------------
 * Quantizes nrows rows of n_per_row floats to type. importance: NULL, or n_per_row values
 * >= 0 (an importance matrix: the mean square of the activations each column meets),
 * shared by every row; it weights the error the searches minimise. Without it every type
 * uses its table routine (round-to-nearest types byte-identical to llama.cpp's reference);
 * with it, types that have a weighted search use it (q8_0, the ternary and the float types
 * ignore it, as in llama.cpp). n_per_row must be a multiple of the block size. */
void ob_quantize_rows(int type, const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *importance);
/* 1 if an importance matrix changes what ob_quantize_rows writes for type. */
int ob_type_uses_importance(int type);

#endif
