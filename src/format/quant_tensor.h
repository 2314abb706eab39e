/* quant_tensor.h — whole-tensor quantize / dequantize, for the types whose tensors are more
 * than a sequence of self-contained blocks.
 *
 * Owns: the per-tensor parts of two types that quant.h's row routines cannot express:
 *  - i2_s (bitnet.cpp): one f32 scale for the whole tensor, stored after the last row. Its
 *    row routine (to_float) yields the trits -1/0/+1 unscaled; the scale multiplies them.
 *  - lean4 (1bit, docs/lean.md): rows rotated by a block Walsh-Hadamard transform before
 *    they are quantized. Its row routine yields the rotated values; a matmul rotates the
 *    activations the same way (ob_lean_rotate) instead of rotating the weights back.
 * For every other type these functions are the row routines applied row by row, so tools
 * that convert whole tensors (convert, quantize) can call them for any type.
 * Does not own: block layouts of GGML's types (quant_ref*.c), the type table (quant.c).
 */
#ifndef OB_QUANT_TENSOR_H
#define OB_QUANT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define OB_LEAN_BLOCK 128 /* lean4: elements per quantization block and per rotation block */

/* 1 if this build can write the type with ob_tensor_quantize. */
int ob_tensor_can_quantize(int type);

/* Quantizes a [n_rows][ne0] float tensor into dst, which holds ob_type_tensor_size(type, ne0,
 * n_rows) bytes. Returns 0, or -1 if this build cannot write the type or ne0 is not a whole
 * number of blocks. src is not modified. */
int ob_tensor_quantize(int type, const float *src, void *dst, int64_t ne0, int64_t n_rows);

/* The inverse: a tensor's data (with its tail) back to [n_rows][ne0] floats in the original
 * (unrotated, scaled) domain. Returns 0, or -1 if this build cannot read the type. */
int ob_tensor_dequantize(int type, const void *src, float *dst, int64_t ne0, int64_t n_rows);

/* The per-tensor multiplier of the values to_float yields: the stored scale of an i2_s tensor,
 * 1 for every other type. data holds the whole tensor (ob_type_tensor_size bytes). */
float ob_tensor_scale(int type, const void *data, int64_t ne0, int64_t n_rows);

/* The tensor src ([n_rows][ne0] of type from) stored as type to, where that holds exactly the
 * same values (every value of the result dequantizes to the bits of the original's; e.g. tq1_0
 * as tq2_0: both are codes -1/0/+1 times an f16 scale a 256-element block; tq1_0 or tq2_0 as i2_s
 * where every block of values has the same scale, as a trained BitNet's do; quant_convert.c,
 * those three on several threads, OB_CONVERT_THREADS): malloc'd bytes
 * (*size: ob_type_tensor_size of to, written only then), or NULL where to cannot hold them
 * exactly, either type cannot be converted, or memory runs out. */
void *ob_tensor_convert(int from, int to, const void *src, int64_t ne0, int64_t n_rows, size_t *size);

/* Checks what a reader must not take on trust in a tensor's data: for i2_s a finite,
 * non-negative scale and no 2-bit code 3 (bitnet.cpp writes only 0, 1, 2). 0, or -1 with a
 * message in err that starts with what is wrong (the caller prefixes the tensor name). */
int ob_tensor_validate(int type, const void *data, int64_t ne0, int64_t n_rows, char *err, size_t errlen);

/* lean4's rotation, in place: each OB_LEAN_BLOCK-element block of x (n a multiple of it) is
 * replaced by H x / sqrt(OB_LEAN_BLOCK), H the Sylvester-ordered Hadamard matrix. The
 * transform is orthogonal and its own inverse. */
void ob_lean_rotate(float *x, int64_t n);

#endif
