/* gguf.h — GGUF v2/v3 reader and writer.
 *
 * Owns: parsing a GGUF file (memory-mapped; tensor data is never copied), validating every
 * offset, size, count and dimension against the file before use, typed access to metadata,
 * and writing GGUF files (metadata + tensor infos + aligned tensor data, streamed).
 * Does not own: what keys mean (engine/arch), dequantizing tensor data (quant).
 *
 * Errors: functions return 0 / -1 (or NULL) and write a message into err naming the key or
 * tensor at fault. Nothing in a file can make the reader crash.
 */
#ifndef OB_GGUF_H
#define OB_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    OB_GGUF_UINT8 = 0,
    OB_GGUF_INT8 = 1,
    OB_GGUF_UINT16 = 2,
    OB_GGUF_INT16 = 3,
    OB_GGUF_UINT32 = 4,
    OB_GGUF_INT32 = 5,
    OB_GGUF_FLOAT32 = 6,
    OB_GGUF_BOOL = 7,
    OB_GGUF_STRING = 8,
    OB_GGUF_ARRAY = 9,
    OB_GGUF_UINT64 = 10,
    OB_GGUF_INT64 = 11,
    OB_GGUF_FLOAT64 = 12,
    OB_GGUF_TYPE_COUNT
} ob_gguf_vtype;

#define OB_GGUF_MAX_DIMS 4
#define OB_GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    const char *name;           /* NUL-terminated copy */
    int type;                   /* ob_type id */
    int n_dims;                 /* 1..4 */
    int64_t ne[OB_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t offset;            /* from the start of the data section */
    size_t size;                /* bytes */
    const void *data;           /* points into the mapping */
} ob_gguf_tensor;

/* A metadata value. Strings are NUL-terminated copies (len excludes the NUL; a string may
 * contain NUL bytes, so use len). Arrays hold their elements; arrays of arrays nest. */
typedef struct ob_gguf_value {
    int type;                   /* ob_gguf_vtype */
    union {
        uint64_t u64;           /* every unsigned integer type and bool */
        int64_t i64;            /* every signed integer type */
        double f64;             /* FLOAT32 and FLOAT64 */
        struct { const char *ptr; uint64_t len; } str;
        struct {
            int elem_type;      /* ob_gguf_vtype of the elements */
            uint64_t n;
            const void *data;   /* numeric arrays: packed little-endian elements (may be unaligned) */
            const struct ob_gguf_value *items; /* STRING and ARRAY elements: n parsed values */
        } arr;
    } v;
} ob_gguf_value;

typedef struct ob_gguf ob_gguf_t;

/* Open and validate a file (memory-mapped). */
int ob_gguf_open(const char *path, ob_gguf_t **out, char *err, size_t errlen);
/* Validate a buffer held by the caller (kept, not copied, for the life of the handle). */
int ob_gguf_open_buffer(const void *data, size_t size, ob_gguf_t **out, char *err, size_t errlen);
void ob_gguf_close(ob_gguf_t *g);
/* Makes ob_gguf_open(name) open an in-memory buffer (kept by the caller for the life of the
 * process): how the model compiled into the binary is found by name. */
void ob_gguf_register_builtin(const char *name, const void *data, size_t size);

uint32_t ob_gguf_version(const ob_gguf_t *g);
size_t ob_gguf_alignment(const ob_gguf_t *g);
size_t ob_gguf_file_size(const ob_gguf_t *g);

int64_t ob_gguf_n_kv(const ob_gguf_t *g);
const char *ob_gguf_kv_key(const ob_gguf_t *g, int64_t i);
const ob_gguf_value *ob_gguf_kv_value(const ob_gguf_t *g, int64_t i);
/* The value of a key, or NULL when absent. */
const ob_gguf_value *ob_gguf_get(const ob_gguf_t *g, const char *key);

/* Typed getters. Return 1 if found and converted, 0 if absent (out untouched), -1 if present
 * with a type that does not convert losslessly (err names the key and both types). */
int ob_gguf_get_i64(const ob_gguf_t *g, const char *key, int64_t *out, char *err, size_t errlen);
int ob_gguf_get_f64(const ob_gguf_t *g, const char *key, double *out, char *err, size_t errlen);
int ob_gguf_get_bool(const ob_gguf_t *g, const char *key, int *out, char *err, size_t errlen);
int ob_gguf_get_str(const ob_gguf_t *g, const char *key, const char **out, char *err, size_t errlen);

/* Numeric array element i converted to int64/double (caller checks i < n). */
int64_t ob_gguf_arr_i64(const ob_gguf_value *arr, uint64_t i);
double ob_gguf_arr_f64(const ob_gguf_value *arr, uint64_t i);

int64_t ob_gguf_n_tensors(const ob_gguf_t *g);
const ob_gguf_tensor *ob_gguf_tensor_at(const ob_gguf_t *g, int64_t i);
const ob_gguf_tensor *ob_gguf_find_tensor(const ob_gguf_t *g, const char *name);

const char *ob_gguf_vtype_name(int vtype);

/* ---- writer ---------------------------------------------------------------------------
 * Metadata is kept in insertion order (setting a key twice replaces it in place). Tensor data
 * is not held: either the caller passes a pointer that stays valid until ob_gguf_writer_write
 * returns, or NULL plus a fill callback that produces each tensor's bytes at write time
 * (so a converter can quantize one tensor at a time). */
typedef struct ob_gguf_writer ob_gguf_writer_t;
typedef int (*ob_gguf_fill_fn)(void *ctx, int64_t tensor_index, void *dst, size_t size,
                               char *err, size_t errlen);

ob_gguf_writer_t *ob_gguf_writer_new(void);
void ob_gguf_writer_free(ob_gguf_writer_t *w);
void ob_gguf_writer_set_u8(ob_gguf_writer_t *w, const char *key, uint8_t v);
void ob_gguf_writer_set_i8(ob_gguf_writer_t *w, const char *key, int8_t v);
void ob_gguf_writer_set_u16(ob_gguf_writer_t *w, const char *key, uint16_t v);
void ob_gguf_writer_set_i16(ob_gguf_writer_t *w, const char *key, int16_t v);
void ob_gguf_writer_set_u32(ob_gguf_writer_t *w, const char *key, uint32_t v);
void ob_gguf_writer_set_i32(ob_gguf_writer_t *w, const char *key, int32_t v);
void ob_gguf_writer_set_u64(ob_gguf_writer_t *w, const char *key, uint64_t v);
void ob_gguf_writer_set_i64(ob_gguf_writer_t *w, const char *key, int64_t v);
void ob_gguf_writer_set_f32(ob_gguf_writer_t *w, const char *key, float v);
void ob_gguf_writer_set_f64(ob_gguf_writer_t *w, const char *key, double v);
void ob_gguf_writer_set_bool(ob_gguf_writer_t *w, const char *key, int v);
void ob_gguf_writer_set_str(ob_gguf_writer_t *w, const char *key, const char *v);
void ob_gguf_writer_set_strn(ob_gguf_writer_t *w, const char *key, const char *v, size_t len);
/* Numeric array: n packed elements of elem_type (copied). */
void ob_gguf_writer_set_arr(ob_gguf_writer_t *w, const char *key, int elem_type, const void *data, uint64_t n);
/* String array (copied). lens may be NULL for NUL-terminated strings. */
void ob_gguf_writer_set_arr_str(ob_gguf_writer_t *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t n);
/* Any value, including arrays of arrays (deep-copied). */
void ob_gguf_writer_set_value(ob_gguf_writer_t *w, const char *key, const ob_gguf_value *v);
/* Copy every key of a reader except those for which skip(key) returns nonzero (skip may be NULL). */
void ob_gguf_writer_copy_kv(ob_gguf_writer_t *w, const ob_gguf_t *g, int (*skip)(const char *key));
/* Adds a tensor; returns its index or -1 (bad dims/type: err says why). size is derived from
 * type and ne. data may be NULL when fill is given to ob_gguf_writer_write. */
int64_t ob_gguf_writer_add_tensor(ob_gguf_writer_t *w, const char *name, int type, int n_dims,
                                  const int64_t *ne, const void *data, char *err, size_t errlen);
/* Writes the file (to path.tmp, then renamed). fill is called for each tensor added with NULL data. */
int ob_gguf_writer_write(ob_gguf_writer_t *w, const char *path, ob_gguf_fill_fn fill, void *ctx,
                         char *err, size_t errlen);

#endif
