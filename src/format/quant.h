/* quant.h — weight types and their block layouts, in one place for every backend.
 *
 * Owns: the numbering of weight types (identical to GGML's type ids, since GGUF files store
 * them), each type's block geometry, the half-precision conversions, and the reference
 * (plain C) quantize / dequantize routines whose byte layout is identical to llama.cpp's.
 * Does not own: fast kernels (backends), choosing a type per tensor (convert/quantize tools).
 */
#ifndef OB_QUANT_H
#define OB_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* Values are GGML's type ids: they are what a GGUF tensor-info record stores. */
typedef enum {
    OB_TYPE_F32 = 0,
    OB_TYPE_F16 = 1,
    OB_TYPE_Q4_0 = 2,
    OB_TYPE_Q4_1 = 3,
    OB_TYPE_Q5_0 = 6,
    OB_TYPE_Q5_1 = 7,
    OB_TYPE_Q8_0 = 8,
    OB_TYPE_Q8_1 = 9,
    OB_TYPE_Q2_K = 10,
    OB_TYPE_Q3_K = 11,
    OB_TYPE_Q4_K = 12,
    OB_TYPE_Q5_K = 13,
    OB_TYPE_Q6_K = 14,
    OB_TYPE_Q8_K = 15,
    OB_TYPE_IQ2_XXS = 16,
    OB_TYPE_IQ2_XS = 17,
    OB_TYPE_IQ3_XXS = 18,
    OB_TYPE_IQ1_S = 19,
    OB_TYPE_IQ4_NL = 20,
    OB_TYPE_IQ3_S = 21,
    OB_TYPE_IQ2_S = 22,
    OB_TYPE_IQ4_XS = 23,
    OB_TYPE_I8 = 24,
    OB_TYPE_I16 = 25,
    OB_TYPE_I32 = 26,
    OB_TYPE_I64 = 27,
    OB_TYPE_F64 = 28,
    OB_TYPE_IQ1_M = 29,
    OB_TYPE_BF16 = 30,
    OB_TYPE_TQ1_0 = 34,
    OB_TYPE_TQ2_0 = 35,
    OB_TYPE_I2_S = 36,   /* bitnet.cpp's ggml fork (Microsoft's BitNet GGUF files); see quant_tensor.c */
    OB_TYPE_MXFP4 = 39,
    OB_TYPE_COUNT = 40,
    /* 1bit's own types, numbered from 4096 so they never collide with a GGML id: other
     * engines refuse such a tensor ("invalid ggml type") instead of misreading it. */
    OB_TYPE_EXT_FIRST = 4096,
    OB_TYPE_LEAN4 = 4096, /* Hadamard-rotated 4-bit, docs/lean.md */
    OB_TYPE_EXT_END = 4097
} ob_type;

#define OB_QK_K 256 /* elements per super-block of the K and TQ families */

/* Geometry and reference routines of one type. to_float/from_float are NULL where this build
 * cannot dequantize/quantize that type (the type may still be named, e.g. in error messages). */
typedef struct {
    const char *name;      /* llama.cpp's lower-case name: "q4_0", "tq2_0", ... */
    int block_size;        /* elements per block */
    int type_size;         /* bytes per block */
    void (*to_float)(const void *src, float *dst, int64_t n);   /* n multiple of block_size */
    void (*from_float)(const float *src, void *dst, int64_t n); /* round-to-nearest, as llama.cpp's reference */
    int tensor_tail;       /* bytes after the last row holding per-tensor data (i2_s: 32, its f32 scale
                            * first); 0 for block types. Such a type's to_float/from_float see the
                            * blocks only: whole tensors go through ob_tensor_* (quant_tensor.h). */
} ob_type_traits;

/* Traits of a type id, or NULL if the id is not a type this build knows at all. */
const ob_type_traits *ob_type_get(int type);
/* Name of a type id ("q8_0"), or "unknown". */
const char *ob_type_name(int type);
/* Type id by name (case-insensitive, "q4_0", "Q4_0", "tq2_0", "f16"...), or -1. */
int ob_type_from_name(const char *name);
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block size or the type is unknown. */
size_t ob_type_row_size(int type, int64_t n);
/* Bytes of a whole tensor of n_rows rows of ne0 elements (rows plus the type's tensor_tail), or
 * 0 as ob_type_row_size. GGUF readers and writers size tensor data with this. */
size_t ob_type_tensor_size(int type, int64_t ne0, int64_t n_rows);

float ob_fp16_to_fp32(uint16_t h);
uint16_t ob_fp32_to_fp16(float f);  /* round to nearest even, as F16C / ggml */
float ob_bf16_to_fp32(uint16_t h);
uint16_t ob_fp32_to_bf16(float f);  /* round to nearest even, NaN kept quiet, as ggml */

#endif
