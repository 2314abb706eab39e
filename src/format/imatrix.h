/* imatrix.h — llama.cpp's importance-matrix files (llama-imatrix output), read-only.
 *
 * Owns: reading both formats llama.cpp's llama-quantize accepts — the GGUF one (tensors
 * "<weight>.in_sum2" and "<weight>.counts", keys imatrix.datasets / chunk_count / chunk_size,
 * what llama-imatrix writes by default) and the legacy binary .dat one — and turning the
 * sums into the per-column importance values llama-quantize uses (sum / count, per expert;
 * 1 where an expert never saw a token). Values are checked: finite and not negative.
 * Does not own: how the values weight the quantization (format/quant_search.h).
 */
#ifndef OB_IMATRIX_H
#define OB_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct ob_imatrix ob_imatrix_t;

int ob_imatrix_load(const char *path, ob_imatrix_t **out, char *err, size_t errlen);
void ob_imatrix_free(ob_imatrix_t *m);

/* Importance values for a weight tensor ("blk.0.attn_q.weight"): *n = row length times the
 * number of experts. NULL when the file has no entry for it. */
const float *ob_imatrix_find(const ob_imatrix_t *m, const char *tensor, int64_t *n);
int ob_imatrix_n_entries(const ob_imatrix_t *m);
int ob_imatrix_chunks(const ob_imatrix_t *m);          /* chunks it was computed on, 0 unknown */
const char *ob_imatrix_dataset(const ob_imatrix_t *m); /* first dataset name, or NULL */

#endif
