/* cpu_attn.h — the CPU backend's fast attention and KV cache writes (see cpu_attn.c). */
#ifndef OB_CPU_ATTN_H
#define OB_CPU_ATTN_H

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "util/threadpool.h"

/* Floats of per-thread scratch ob_cpu_attention needs for this head layout. */
size_t ob_cpu_attn_scratch(int n_head, int n_head_kv, int head_dim);
/* backend.h's kv_write: rows converted to type (f32, f16 or q8_0) with the reference rounding. */
void ob_cpu_kv_write(const ob_kernels *kt, void *cache, int type, const float *x, int n, int dim, int n_ctx,
                     const int32_t *pos, const int32_t *seq);
/* backend.h's attention; scratch: one buffer of ob_cpu_attn_scratch floats per pool thread. */
void ob_cpu_attention(ob_pool *pool, const ob_kernels *kt, const ob_attn_args *a, float **scratch);

#endif
