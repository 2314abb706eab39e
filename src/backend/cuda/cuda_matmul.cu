/* cuda_matmul.cu — y = x . W^T for weights of every type, and embedding rows.
 *
 * Owns: the choice of path per batch size (cu_gemv_takes) and the kernels of the large batches:
 *  - up to 32 tokens (decode, small batches of the server's slots; int8-path weights in a step of
 *    distinct sequences up to 12, or 4 once the weight has its f16 copy: cu_gemv_takes):
 *    cuda_gemv.cu (its staged kernel, or its fallback for rows it cannot stage), and the fused
 *    ops' fallbacks here.
 *  - more (prompt processing, larger batches): tensor cores through cuBLAS: the weight as its
 *    kept f16 copy (below), else dequantized to f16 per call (f16 and bf16 weights are used as
 *    stored, f32 through SGEMM in f32), the activations converted to the same 16-bit type, and
 *    cublasGemmEx accumulates in f32. With OB_CUDA_MMQ=1 the int8-path
 *    types go to the int8 tensor cores instead, decoded inside the kernel (cuda_mmq.cu).
 * lean4 rotates the activations first (the rows are stored rotated); i2_s's per-tensor scale
 * multiplies each dot product once, or each f16 weight where it is itself an f16 value (mm_fold).
 * Does not own: the block layouts (cuda_quant.cuh), the other ops.
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_quant.cuh"

/* ---- dequantize to f16 for the tensor-core path --------------------------------------- */

/* The multiplier an i2_s weight's f16 values carry: its scale where that is an f16 value itself, so
 * each trit times it is exact in f16 (tq2_0 and tq1_0 files taken as i2_s: the scale is their
 * blocks' f16 d); then cuBLAS's alpha is 1 (mm_alpha) and a matmul_add adds in the product's
 * epilogue instead of a pass of its own (run 36: BitNet-2B as i2_s pp512 -3% against tq2_0 without
 * it). 1 otherwise: the scale multiplies each dot product (alpha). */
static float mm_fold(const ob_weight *w) {
    return w->type == OB_TYPE_I2_S && w->scale != 1.0f && __half2float(__float2half_rn(w->scale)) == w->scale ? w->scale : 1.0f;
}
/* cuBLAS's alpha for w's f16 values */
static float mm_alpha(const ob_weight *w) { return mm_fold(w) == 1.0f ? w->scale : 1.0f; }

template <int T>
__global__ void k_deq_f16(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out, float mul, __half *out) {
    cu_dep(); /* out may still be read by the previous product */
    const int64_t nch = n_in / 8, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nch * n_out) return;
    const int64_t r = i / nch, j = i % nch;
    float v[8];
    deq8r<T>(W + r * row_bytes, j, row_bytes, v);
    __align__(16) __half h[8];
#pragma unroll
    for (int k = 0; k < 8; k++) h[k] = __float2half_rn(v[k] * mul);
    *(uint4 *)(out + r * n_in + 8 * j) = *(const uint4 *)h;
}

template <int T> static void deq_f16(cu_state *s, const ob_weight *w, __half *out) {
    int64_t total = w->n_out * (w->n_in / 8);
    cu_launch(s, "matmul (dequantize)", (unsigned)((total + 255) / 256), 256, 0, k_deq_f16<T>, (const uint8_t *)w->data, w->row_bytes,
              (int64_t)w->n_in, (int64_t)w->n_out, mm_fold(w), out);
}

static void deq_any(cu_state *s, const ob_weight *w, __half *out) {
#define DEQ(T) deq_f16<T>(s, w, out)
    CU_FOR_TYPE(w->type, DEQ)
#undef DEQ
}

/* ---- f16 copies kept ------------------------------------------------------------------ *
 * A weight dequantized for every product above the decode kernel's batch sizes costs a write and
 * a read of 2 bytes a weight per call (prompt chunks, the server's steps of 5+ sequences). So each
 * weight that reaches this path keeps its f16 copy from its first eager call (never inside a
 * recording: allocating is not recordable), while the GPU keeps f16c_reserve free (the larger of
 * 2 GiB and a fifth of its memory: the KV cache is allocated before any product, the scratch
 * buffers grow during the first steps; after one refusal no copy is tried again); later calls read
 * the copy, and a weight with a copy goes to this path from 5 distinct tokens (cu_gemv_takes), so
 * making one forgets the recorded steps. The copy holds the per-call
 * dequantization's values, so the products are the same bits. Measured on the H200 (docs/bench.md,
 * run 13): prompts of the quantized files +16% to +19%, batched decode at 16-64 streams +33% to
 * +44% on Llama-3.2-1B Q4_0 and +79% to +100% on Llama-3.1-8B Q4_K_M; the cost is 2 bytes a
 * weight of GPU memory (2.5 GB for the 1B, 15 GB for the 8B). OB_CUDA_F16_COPY=0 turns it off. */
static size_t f16c_reserve(size_t total) { return total / 5 > ((size_t)2 << 30) ? total / 5 : (size_t)2 << 30; }

static long f16c_reads; /* products that read a copy, every backend of the process (tests) */
extern "C" long ob_cuda_f16_copy_reads(void) { return __atomic_load_n(&f16c_reads, __ATOMIC_RELAXED); }

static int f16c_find(const cu_state *s, const void *q) {
    for (int i = 0; i < s->n_f16c; i++)
        if (s->f16c[i].q == q) return i;
    return -1;
}

int cu_f16_copy_has(const cu_state *s, const void *data) { return s->n_f16c && f16c_find(s, data) >= 0; }

void cu_f16_copy_forget(cu_state *s, const void *data) {
    const int i = f16c_find(s, data);
    if (i < 0) return;
    cudaStreamSynchronize(s->stream); /* a queued product may still read it */
    cudaFree(s->f16c[i].h);
    s->f16c[i] = s->f16c[--s->n_f16c];
}

/* w's f16 copy, made now if the switch is on and memory allows; NULL: dequantize per call. */
static const void *f16_copy(cu_state *s, const ob_weight *w) {
    if (!s->f16_copy) return NULL;
    const int i = f16c_find(s, w->data);
    if (i >= 0) {
        __atomic_add_fetch(&f16c_reads, 1, __ATOMIC_RELAXED);
        return s->f16c[i].h;
    }
    if (s->cap || s->f16c_full) return NULL;
    const size_t bytes = (size_t)w->n_in * (size_t)w->n_out * 2;
    size_t fr = 0, tot = 0;
    void *h = NULL;
    if (!cu_grow((void **)&s->f16c, s->n_f16c, &s->cap_f16c, sizeof *s->f16c)) return NULL;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || fr < bytes + f16c_reserve(tot) || cudaMalloc(&h, bytes) != cudaSuccess) {
        cudaGetLastError();
        s->f16c_full = 1;
        fprintf(stderr, "cuda backend: f16 copies of the weights for batched products: %d made, no more (%zu MiB free)\n", s->n_f16c, fr >> 20);
        return NULL;
    }
    deq_any(s, w, (__half *)h);
    s->f16c[s->n_f16c++] = (cu_f16c){w->data, h};
    cu_graph_forget(s); /* a recorded step of 5-12 distinct tokens may hold this weight's staged path (cu_gemv_takes) */
    __atomic_add_fetch(&f16c_reads, 1, __ATOMIC_RELAXED);
    return h;
}

__global__ void k_to_16(const float *x, void *out, int64_t n, int bf) {
    cu_dep();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (bf) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
    else ((__half *)out)[i] = __float2half_rn(x[i]);
}

/* ---- lean4: activations rotated block by block (128-point Walsh-Hadamard) ------------- */

__global__ void k_lean_rotate(const float *x, float *out, int64_t n_blocks) {
    __shared__ float v[128];
    cu_dep();
    const int64_t b = blockIdx.x;
    const int i = threadIdx.x;
    if (b >= n_blocks) return;
    v[i] = x[b * 128 + i];
    __syncthreads();
    for (int h = 1; h < 128; h *= 2) {
        float a = v[i], c = v[i ^ h];
        __syncthreads();
        v[i] = (i & h) ? c - a : a + c;
        __syncthreads();
    }
    out[b * 128 + i] = v[i] * 0.0883883476483184405f;
}

/* ---- dispatch -------------------------------------------------------------------------- */

int cu_matmul_supports(int type) {
    switch (type) {
    case OB_TYPE_F32: case OB_TYPE_F16: case OB_TYPE_BF16: case OB_TYPE_Q4_0: case OB_TYPE_Q4_1: case OB_TYPE_Q5_0:
    case OB_TYPE_Q5_1: case OB_TYPE_Q8_0: case OB_TYPE_Q2_K: case OB_TYPE_Q3_K: case OB_TYPE_Q4_K: case OB_TYPE_Q5_K:
    case OB_TYPE_Q6_K: case OB_TYPE_IQ4_NL: case OB_TYPE_IQ4_XS: case OB_TYPE_TQ1_0: case OB_TYPE_TQ2_0: case OB_TYPE_I2_S:
    case OB_TYPE_MXFP4:
        return 1;
#ifndef OB_NO_LEAN
    case OB_TYPE_LEAN4: return 1;
#endif
    default: return 0;
    }
}

/* y[n][n_out] = x[n][n_in] . W^T (+ y when add) with W as col-major [n_in][n_out] (= row-major
 * [n_out][n_in]). add only where alpha is 1 (mm_alpha): cuBLAS then makes acc + y, the rounding of
 * matmul + add (alpha 1 multiplies exactly; run 14 found these bits equal on every tested shape). */
static void gemm_blas(cu_state *s, const ob_weight *w, const void *W, const void *x, cudaDataType_t t, float *y, int n, int add) {
    const float alpha = mm_alpha(w), beta = add ? 1.0f : 0.0f;
    const cublasStatus_t e = cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->n_out, n, (int)w->n_in, &alpha, W, t, (int)w->n_in, x,
                                          t, (int)w->n_in, &beta, y, CUDA_R_32F, (int)w->n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (e != CUBLAS_STATUS_SUCCESS && s->cap) { /* not recordable: the step runs eagerly (cuda_graph.cu) */
        cudaGetLastError();
        s->cap_bad = 1;
        s->cap_why = "cublasGemmEx";
        return;
    }
    cu_check_blas(e, "cublasGemmEx");
}

/* x as the weight's dot products need it: lean4 rows are stored rotated, so x is rotated the
 * same way (into scratch shared by every lean4 weight of the same input). */
/* the tags that name xrot (its codes, its f16 copy): stale once it moves or is rewritten */
static void xrot_forget(cu_state *s) {
    if (s->xq_src == s->xrot) cu_xq_tag(s, NULL, 0, 0);
    if (s->xc_src == s->xrot) cu_xc_tag(s, NULL, 0, 0);
}

static const float *mm_input(cu_state *s, const ob_weight *w, const float *x, int n) {
    if (w->type != OB_TYPE_LEAN4) return x;
    size_t need = (size_t)n * (size_t)w->n_in;
    xrot_forget(s); /* (before the buffer may move) */
    cu_reserve(s, (void **)&s->xrot, &s->xrot_cap, need * sizeof(float));
    cu_launch(s, "lean4 rotate", (unsigned)(need / 128), 128, 0, k_lean_rotate, x, s->xrot, (int64_t)(need / 128));
    xrot_forget(s); /* (its previous contents) */
    return s->xrot;
}

void cu_xc_tag(cu_state *s, const float *src, size_t nx, int bf) {
    s->xc_src = s->blas_fuse ? src : NULL;
    s->xc_nx = nx;
    s->xc_bf = bf;
}

__half *cu_xc_rows(cu_state *s, int n, int dim) {
    /* where products take cuBLAS: prompts, and steps of distinct sequences above the tokens the
     * staged kernel keeps for weights with a copy (a step without copies writes it for nothing) */
    if (s->blas_fuse < 2 || s->mmq || !(n > CU_GEMV_MAX || (s->step_distinct && n > s->gemv_copy_max))) return NULL;
    cu_xc_tag(s, NULL, 0, 0);
    cu_reserve(s, &s->xconv, &s->xconv_cap, (size_t)n * (size_t)dim * 2);
    return (size_t)n * (size_t)dim * 2 <= s->xconv_cap ? (__half *)s->xconv : NULL; /* (a recording cannot grow it) */
}

/* x[nx] as f16 (bf16 when bf) in s->xconv: converted, unless xconv holds it already (a fused op's
 * earlier product converted it, or the row op that wrote x made it) */
static const void *mm_x16(cu_state *s, const float *x, size_t nx, int bf) {
    if (s->xc_src == x && s->xc_nx == nx && s->xc_bf == bf) return s->xconv;
    cu_xc_tag(s, NULL, 0, 0);
    cu_reserve(s, &s->xconv, &s->xconv_cap, nx * 2);
    cu_launch(s, "matmul (convert activations)", (unsigned)((nx + 255) / 256), 256, 0, k_to_16, x, s->xconv, (int64_t)nx, bf);
    cu_xc_tag(s, x, nx, bf);
    return s->xconv;
}

/* whether the product of w at n tokens takes cuBLAS (mm_core's last path) */
static int mm_blas_takes(const cu_state *s, const ob_weight *w, int n) { return !cu_gemv_takes(s, w, n) && !cu_mmq_takes(s, w, n); }

/* y = x . W^T (+ y when add: mmq with w->scale 1, cuBLAS with mm_alpha 1) with x already as mm_input gives it. */
static void mm_core(cu_state *s, const ob_weight *w, const float *x, float *y, int n, int add) {
    if (cu_gemv_takes(s, w, n)) {
        if (!cu_gemv(s, w, x, y, n, 0)) cu_gemv_fallback(s, w, x, y, n);
        return;
    }
    if (cu_mmq(s, w, x, y, n, add)) return;
    if (w->type == OB_TYPE_F32) {
        gemm_blas(s, w, w->data, x, CUDA_R_32F, y, n, add);
        return;
    }
    const int bf = w->type == OB_TYPE_BF16;
    const void *xh = mm_x16(s, x, (size_t)n * (size_t)w->n_in, bf);
    const void *W = w->data; /* f16 and bf16 weights as stored */
    if (w->type != OB_TYPE_F16 && !bf) {
        W = f16_copy(s, w);
        if (!W) { /* no copy: dequantized for this call */
            cu_reserve(s, &s->wdeq, &s->wdeq_cap, (size_t)w->n_in * (size_t)w->n_out * 2);
            deq_any(s, w, (__half *)s->wdeq);
            W = s->wdeq;
        }
    }
    gemm_blas(s, w, W, xh, bf ? CUDA_R_16BF : CUDA_R_16F, y, n, add);
}

void cu_matmul(cu_state *s, const ob_weight *w, const float *x, float *y, int n) { mm_core(s, w, mm_input(s, w, x, n), y, n, 0); }

void cu_matmul_add(cu_state *s, const ob_weight *w, const float *x, float *y, int n) {
    x = mm_input(s, w, x, n);
    if (cu_gemv_takes(s, w, n) && cu_gemv(s, w, x, y, n, 1)) return;
    /* added in the product's epilogue where the scale is 1: then acc * 1 + y is rounded once, as
     * matmul + add rounds it (k_mmq's multiply-add is an fma: with another scale it would differ) */
    if (s->blas_fuse && ((w->scale == 1.0f && cu_mmq_takes(s, w, n)) || (mm_alpha(w) == 1.0f && mm_blas_takes(s, w, n)))) {
        mm_core(s, w, x, y, n, 1);
        return;
    }
    size_t ny = (size_t)n * (size_t)w->n_out;
    cu_reserve(s, (void **)&s->ytmp, &s->ytmp_cap, ny * sizeof(float));
    mm_core(s, w, x, s->ytmp, n, 0);
    cu_add(s, y, s->ytmp, ny);
}

void cu_matmul_multi(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n) {
    if (cu_gemv_multi2(s, ws, ys, count, x, n)) return; /* (its pairs hold no lean4, whose input mm_input rotates) */
    int done[CU_MULTI_MAX] = {0};
    for (int i = 0; i < count; i++) {
        if (done[i]) continue;
        const ob_weight *gw[CU_MULTI_MAX];
        float *gy[CU_MULTI_MAX];
        int k = 0;
        for (int j = i; j < count; j++) /* the weights of i's type and row length go together */
            if (!done[j] && ws[j]->type == ws[i]->type && ws[j]->n_in == ws[i]->n_in) {
                gw[k] = ws[j];
                gy[k++] = ys[j];
                done[j] = 1;
            }
        if (k > 1 && cu_gemv_takes(s, ws[i], n) && cu_gemv_multi(s, gw, gy, k, mm_input(s, ws[i], x, n), n)) continue;
        for (int j = 0; j < k; j++) cu_matmul(s, gw[j], x, gy[j], n);
    }
}

void cu_matmul_glu(cu_state *s, ob_act act, const ob_weight *g, const ob_weight *u, const float *x, float *gate, float *up, int n,
                   const ob_weight *out_to) {
    if (cu_gemv_takes(s, g, n) && g->type == u->type && cu_gemv_glu(s, act == OB_ACT_RELU2, g, u, mm_input(s, g, x, n), gate, n, out_to))
        return;
    cu_matmul(s, g, x, gate, n);
    cu_matmul(s, u, x, up, n);
    cu_glu(s, act, gate, up, (size_t)n * (size_t)g->n_out);
}

/* ---- embedding rows ------------------------------------------------------------------ */

template <int T> __global__ void k_get_rows(const uint8_t *W, size_t row_bytes, int64_t n_in, const int32_t *ids, float *y, float scale) {
    cu_dep();
    const int i = blockIdx.y;
    const uint8_t *row = W + (size_t)ids[i] * row_bytes;
    float *yi = y + (size_t)i * n_in;
    if constexpr (cu_type<T>::block == 1) {
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_in; e += (int64_t)gridDim.x * blockDim.x)
            yi[e] = deq1<T>(row, e) * scale;
    } else {
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n_in / 8; j += (int64_t)gridDim.x * blockDim.x) {
            float v[8];
            deq8r<T>(row, j, row_bytes, v);
#pragma unroll
            for (int k = 0; k < 8; k++) yi[8 * j + k] = v[k] * scale;
        }
    }
}

void cu_get_rows(cu_state *s, const ob_weight *w, const int32_t *ids, int n, float *y) {
    dim3 grid((unsigned)((w->n_in + 255) / 256 < 64 ? (w->n_in + 255) / 256 : 64), (unsigned)n);
#define ROWS(T) cu_launch(s, "get_rows", grid, 256, 0, k_get_rows<T>, (const uint8_t *)w->data, w->row_bytes, (int64_t)w->n_in, ids, y, w->scale)
    CU_FOR_TYPE(w->type, ROWS)
#undef ROWS
    if (w->type == OB_TYPE_LEAN4) { /* rotation is its own inverse: back to the original rows */
        cu_launch(s, "lean4 rotate", (unsigned)((size_t)n * w->n_in / 128), 128, 0, k_lean_rotate, (const float *)y, y,
                  (int64_t)((size_t)n * w->n_in / 128));
    }
}
