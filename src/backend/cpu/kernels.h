/* kernels.h — the CPU backend's fast kernels: one table per instruction set, picked at init.
 *
 * Owns: the contract between the matmul / attention drivers (cpu_matmul.c, cpu_attn.c) and
 * the per-ISA kernel files (kernels_scalar.c always; kernels_avx2.c, kernels_avxvnni.c and
 * kernels_avx512.c on x86-64, each compiled with its own target flags and called only when
 * the CPU has them). Does not own: threads and work splitting (the drivers), the reference
 * semantics of an op (cpu_backend.c and format/quant_ref*.c, which every kernel is tested
 * against in tests/unit/test_kernels.c).
 *
 * Integer types (q8_0, q4_0, tq2_0, tq1_0, i2_s, q4_K, q5_K, q6_K): the activations of a
 * matmul are quantized on the fly to int8 ("q8 activations", ob_q8act), and the weights are
 * read as unsigned codes (value = scale * (code - off)), so a dot product is u8 x s8 integer
 * arithmetic (VNNI's vpdpbusd, AVX2's vpmaddubsw). Every path computes THE SAME BITS: the
 * integer part is exact whatever the order, and the float part is fixed per output element:
 *
 *   for each weight block b of the row, in order (QB elements, one activation scale da_b):
 *       isum = sum over sub-blocks j of b:  sc_j * (sum_k code_k * a_k  -  off * sum_k a_k)
 *       acc  = fmaf((float)isum * dw_b, da_b, acc)
 *       if the type has mins:  acc = fmaf((float)(sum_j mn_j * sum_k a_k) * dm_b, da_b, acc)
 *   y = acc * tensor_scale          (i2_s only; no multiply for other types)
 *
 * (sc_j = 1 for types without sub-block scales.) So a decode step (one token, the GEMV
 * kernels) and a prompt (the GEMM kernels, whose register tiles hold 16 or 8 weight rows
 * per vector) give identical logits, as the golden incremental-vs-batch test demands, and
 * every SIMD path is checked for exact equality with the scalar one.
 *
 * The activation quantizer has two modes per row. A row that already lies on an int8 grid
 * (BitNet's act_quant_i8 runs before every projection) is quantized with one scale for the
 * whole row, which reproduces its codes exactly: the integer kernel then computes the same
 * products as the reference, exactly. Any other row gets one scale per QB-element block, as
 * llama.cpp's q8_0 / q8_K do.
 *
 * Float types (f32, f16, bf16): weights are widened to f32 (exactly) and multiplied with
 * f32 activations. Each output keeps 16 partial sums (element k goes to sum k % 16, fused
 * multiply-add), added at the end as ((s0+s8)+(s4+s12))+... in a fixed tree, in every path.
 */
#ifndef OB_CPU_KERNELS_H
#define OB_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "format/quant.h"

#define OB_KWBUF(n_in) ((n_in) * 4 > 128 ? (n_in) * 4 : 128) /* float-kernel scratch, floats */
#define OB_KPANEL_MAX 16  /* most weight rows in one GEMM panel (AVX-512: 16; AVX2 and scalar: 8) */

/* How an integer weight type is computed (see the formula above). */
typedef struct {
    int qb;       /* elements per block: one float weight scale, one activation scale */
    int sb;       /* elements per sub-block (integer scale and activation sum); qb if none */
    int off;      /* zero point of the codes */
    int has_sc;   /* integer scale per sub-block */
    int has_mn;   /* integer min per sub-block and float dm per block */
    int cmax;     /* largest code (bounds for 16-bit partial sums without VNNI) */
} ob_kfmt;

/* Format of an integer weight type, or NULL if it has no integer kernel. */
const ob_kfmt *ob_kfmt_get(int type);

/* Quantized activations of n rows of k elements, for one ob_kfmt. */
typedef struct {
    int8_t *qs;     /* [n][k] codes in -127..127 */
    float *d;       /* [n][k / qb] scale of each block: a = qs * d */
    int32_t *ac;    /* [n][k / sb] per sub-block: -off * sum(qs) if off, else sum(qs) (for mins) */
    int64_t k;
    int qb, sb;
} ob_q8act;

/* Bytes of the three arrays of an ob_q8act for n rows of k (each array 64-byte aligned). */
size_t ob_q8act_bytes(int64_t n, int64_t k, const ob_kfmt *f);
/* Points a's arrays into mem (ob_q8act_bytes long). */
void ob_q8act_init(ob_q8act *a, void *mem, int64_t n, int64_t k, const ob_kfmt *f);

/* One GEMM panel: nr (<= R) consecutive weight rows decoded into codes that a register tile
 * reads R rows at a time. Sized for k elements by the driver. */
typedef struct {
    uint8_t *codes;   /* [k/4][R][4] code of row r, element 4*i+j at codes[(i*R + r)*4 + j] */
    uint8_t *codes2;  /* [k/4][R][4] a second plane, for formats with sub-block scales (NULL
                       * otherwise): a table whose pack fills it says what it holds */
    int32_t *sc;      /* [k/sb][R] sub-block scales (has_sc) */
    int32_t *mn;      /* [k/sb][R] sub-block mins (has_mn) */
    float *dw;        /* [k/qb][R] block scales */
    float *dm;        /* [k/qb][R] block min scales (has_mn) */
    float scale;      /* the weight's per-tensor scale (i2_s), 1 otherwise */
    int R;            /* rows per vector of the table that packed it */
    int nr;           /* valid rows; rows nr..R-1 hold zeros */
} ob_panel;

size_t ob_panel_bytes(int64_t k, int R, const ob_kfmt *f);
void ob_panel_init(ob_panel *p, void *mem, int64_t k, int R, const ob_kfmt *f);

/* The kernels of one instruction set. */
typedef struct {
    const char *name;  /* "scalar", "avx2", "avx-vnni", "avx512" */
    int R;             /* rows per GEMM panel (a multiple of 8, at most OB_KPANEL_MAX) */

    /* Quantizes row x[k] for format f into qs[k], d[k/qb], ac[k/sb] (see ob_q8act). */
    void (*quant_row)(const float *x, int64_t k, const ob_kfmt *f, int8_t *qs, float *d, int32_t *ac);

    /* y[r - r0] for weight rows [r0, r1) and row t of a: one token (decode). Integer types. */
    void (*gemv[OB_TYPE_COUNT])(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y);

    /* Decodes rows [r0, r0 + p->nr) into the panel (p->R rows per vector). Integer types. */
    void (*pack[OB_TYPE_COUNT])(const ob_weight *w, int64_t r0, ob_panel *p);

    /* y[(t - t0) * ldy + r] for the panel's rows r < p->nr and tokens [t0, t1) of a. */
    void (*gemm)(const ob_kfmt *f, const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy);
    /* The same for np panels of consecutive rows (panel i's rows at y + i * R), or NULL: then the
     * driver calls gemm per panel. For kernels that keep several panels' tiles in flight. */
    void (*gemm_np)(const ob_kfmt *f, const ob_panel *p, int np, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy);

    /* Float weights (f32, f16, bf16): y[t * ldy + r - r0] = dot(row r, x[t]) for rows [r0, r1)
     * and tokens [0, n) (x rows of w->n_in floats). wbuf: scratch of OB_KWBUF(n_in) floats. */
    void (*gemm_f[OB_TYPE_COUNT])(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y,
                                  int64_t ldy, float *wbuf);

    /* Row ops of the forward pass (cpu_backend.c runs them over the pool; its plain loops stay the
     * reference). rms_row: y = x / sqrt(mean(x^2) + eps) * w (w may be NULL), the sum of squares
     * in double; aq_row: BitNet's act_quant_i8, bit for bit; glu: gate = act(gate) * up with act
     * 0 = SiLU (a vector exp within 2 ulp in SIMD tables), 1 = squared ReLU; add: y += x. */
    void (*rms_row)(const float *x, const float *w, float *y, int dim, float eps);
    void (*aq_row)(float *x, int dim);
    void (*glu)(int act, float *gate, const float *up, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);

    /* Attention helpers. */
    float (*dot_f32)(const float *a, const float *b, int64_t n);               /* canonical float order */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);             /* round to nearest even */
    void (*axpy)(float *y, float a, const float *x, int64_t n);                 /* y += a * x */
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int64_t n);          /* y += a * (float)x */
    float (*dot_f16)(const float *a, const uint16_t *b, int64_t n);             /* canonical float order */
} ob_kernels;

/* Tables of this build: scalar always; the others NULL where not compiled or not runnable. */
const ob_kernels *ob_kernels_scalar(void);
const ob_kernels *ob_kernels_avx2(void);
const ob_kernels *ob_kernels_avxvnni(void);
const ob_kernels *ob_kernels_avx512(void);
const ob_kernels *ob_kernels_amx(void);   /* AVX-512 with AMX-INT8 prompt kernels */

/* The tables as compiled, without the CPU check (NULL where this build lacks them). */
const ob_kernels *ob_kernels_avx2_table(void);
const ob_kernels *ob_kernels_avxvnni_table(void);
const ob_kernels *ob_kernels_avx512_table(void);
const ob_kernels *ob_kernels_amx_table(void);

/* The best table this CPU runs, or the one OB_CPU_KERNELS names ("scalar", "avx2",
 * "avx-vnni", "avx512", "avx512-amx") when set and runnable here. */
const ob_kernels *ob_kernels_best(void);

/* ---- shared by the kernel files (kernels_common.c) ------------------------------------- */

/* Canonical pieces in plain C, used by the scalar table and by SIMD tables for edges. */

/* Decodes weight block b of row (QB elements) into codes[qb] (natural order), sc/mn[qb/sb],
 * *dw and *dm. The scalar definition of every integer type. */
typedef void (*ob_kdec_fn)(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw,
                           float *dm);
ob_kdec_fn ob_kdec_get(int type);

/* Pack rows through the scalar decoder (any ISA compiles this loop for itself). */
void ob_kpack_generic(const ob_weight *w, int64_t r0, ob_panel *p);
/* The scalar table's decode kernel (any integer type): SIMD tables use it for the types whose
 * blocks they have no vector decoder for. */
void ob_kgemv_generic(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y);

/* The float part of the formula for one block: acc = fmaf((float)isum * dw, da, acc), then
 * the min term. Written once so every path rounds the same. */
static inline float ob_kacc(float acc, int32_t isum, float dw, float da) {
    return __builtin_fmaf((float)isum * dw, da, acc);
}

/* Round to nearest, ties to even, as vcvtps2dq / vrndscaleps do (|v| < 2^22; larger returned as is). */
static inline float ob_rne(float v) {
    if (!(__builtin_fabsf(v) < 4194304.0f)) return v;
    float t = v + 12582912.0f; /* 1.5 * 2^23: the sum keeps no fraction bits (no -ffast-math here) */
    return t - 12582912.0f;
}

/* Row-mode test of the activation quantizer: 1 if every x[i] * id is within 1e-3 of an integer. */
int ob_q8_on_grid(const float *x, int64_t k, float id);

/* Fixed reduction of 16 partial sums (the float-type canonical order). */
static inline float ob_sum16(const float s[16]) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; i++) t8[i] = s[i] + s[i + 8];
    for (int i = 0; i < 4; i++) t4[i] = t8[i] + t8[i + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

#endif
