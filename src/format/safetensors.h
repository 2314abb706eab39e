/* safetensors.h — reader for Hugging Face safetensors checkpoints.
 *
 * Owns: a single .safetensors file or a sharded checkpoint (model.safetensors.index.json
 * naming several files), memory-mapped; the JSON header validated (offsets in bounds, sizes
 * matching dtype x shape, no overlap); conversion of F32 / F16 / BF16 tensors to float.
 * Does not own: tensor naming or meaning (engine/arch, tools/convert).
 */
#ifndef OB_SAFETENSORS_H
#define OB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    OB_ST_F32, OB_ST_F16, OB_ST_BF16, OB_ST_F64,
    OB_ST_I8, OB_ST_U8, OB_ST_I16, OB_ST_I32, OB_ST_I64, OB_ST_BOOL,
    OB_ST_F8_E4M3, OB_ST_F8_E5M2, OB_ST_OTHER
} ob_st_dtype;

#define OB_ST_MAX_DIMS 8

typedef struct {
    const char *name;          /* NUL-terminated */
    int dtype;                 /* ob_st_dtype */
    int n_dims;                /* 0 (scalar) .. OB_ST_MAX_DIMS */
    int64_t shape[OB_ST_MAX_DIMS]; /* row-major, shape[n_dims-1] is contiguous */
    int64_t n_elements;
    const void *data;          /* into the mapping */
    size_t size;               /* bytes */
} ob_st_tensor;

typedef struct ob_st ob_st_t;

/* path: a .safetensors file, a model.safetensors.index.json, or a directory holding either. */
int ob_st_open(const char *path, ob_st_t **out, char *err, size_t errlen);
void ob_st_close(ob_st_t *st);
int64_t ob_st_n_tensors(const ob_st_t *st);
const ob_st_tensor *ob_st_tensor_at(const ob_st_t *st, int64_t i);
const ob_st_tensor *ob_st_find(const ob_st_t *st, const char *name);
const char *ob_st_dtype_name(int dtype);
/* Converts all n_elements of an F32/F16/BF16/F64 tensor into dst; -1 (err) for other dtypes. */
int ob_st_to_f32(const ob_st_tensor *t, float *dst, char *err, size_t errlen);

#endif
