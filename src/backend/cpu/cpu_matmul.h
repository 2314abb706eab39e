/* cpu_matmul.h — the CPU backend's fast matmul driver (kernels.h's tables over the thread pool).
 *
 * Owns: quantizing a matmul's activations once, splitting the weight rows into chunks that the
 * pool's threads take one at a time (so a thread slowed by other load on the machine does less,
 * and small matrices still keep every thread busy), packing GEMM panels and blocking tokens for
 * the caches, and the scratch all that needs (grown at warm-up, then reused: a decode step
 * allocates nothing). Does not own: the kernels (kernels_*.c), the reference path for types
 * without kernels (cpu_backend.c).
 */
#ifndef OB_CPU_MATMUL_H
#define OB_CPU_MATMUL_H

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "util/threadpool.h"

typedef struct ob_cpu_mm ob_cpu_mm;

/* A driver for a pool of n_threads threads using kernel table kt (NULL: ob_kernels_best()). */
ob_cpu_mm *ob_cpu_mm_new(int n_threads, const ob_kernels *kt);
void ob_cpu_mm_free(ob_cpu_mm *mm);
const ob_kernels *ob_cpu_mm_kernels(const ob_cpu_mm *mm);
/* 1 if w's type has a fast kernel (otherwise the caller takes the reference path). */
int ob_cpu_mm_supports(const ob_cpu_mm *mm, int type);
/* y[n][w->n_out] = x[n][w->n_in] . W^T. Returns -1 only when scratch cannot be allocated. */
int ob_cpu_mm_run(ob_cpu_mm *mm, ob_pool *pool, const ob_weight *w, const float *x, float *y, int n);

#endif
