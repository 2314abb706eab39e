/* cuda_ops.cu — the row-wise ops: RMSNorm, RoPE, KV-cache writes, residual add, bias, GLU and
 * BitNet's int8 activation quantization.
 *
 * Owns: one kernel per op with the CPU reference's arithmetic (cpu_backend.c): RoPE angles in
 * double as the reference computes them (once per token and pair, shared by every head), the
 * q8_0 cache rows with llama.cpp's rounding, the int8 quantizer with round-half-even and the
 * reference's reciprocal-then-multiply scale, so its codes match the CPU's for equal inputs.
 * Does not own: matmul (cuda_matmul.cu), attention (cuda_attn.cu).
 */
#include <cuda_fp16.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_stage.cuh"

#define OPS_THREADS 256
/* One token's row ops with act_quant_i8 (BitNet's four norms a layer) on at most this many blocks
 * a row, where the feed-forward kernel sets no cap: BitNet-2B tg128 +2.1% against 10 / 27 blocks
 * (its 2560- / 6912-value rows at one a 256 values; 6 blocks +2.0%, 4 +0.8%, 2 -4.8%; run 37).
 * Every block computes the whole row's statistics, so the count changes no value. */
#define ROWS_AQ_SLICES 8

/* Row blockIdx.x, its elements [blockIdx.y * slice, + slice); wpre: the norm's weights read before
 * the wait for the previous kernel (where registers allow: 256 threads, or up to 8 values a
 * thread of 1024). Read after the row's sum instead, they came from HBM (a decode step streams
 * the weights through L2) on the critical path: H200 tg128 +8.7% Llama-3.2-1B Q4_0, +13% BitNet
 * TQ2_0 with them read first (docs/bench.md, run 6). */
template <int PER, int TH>
__global__ void __launch_bounds__(TH) k_rows(const float *x, const float *w, float *y, int dim, float eps, int norm, int aq, int8_t *q,
                                               float2 *xs, int slice, int wpre, __half *yh) {
    const size_t i = blockIdx.x;
    const int lo = (int)blockIdx.y * slice, hi = lo + slice < dim ? lo + slice : dim;
    rows_regs<PER, TH == 256 || PER <= 8>(x + i * dim, w, y ? y + i * dim : NULL, dim, eps, norm, aq, q ? q + i * dim : NULL,
                                          q ? xs + i * (dim / 32) : NULL, lo, hi, wpre, [] { cu_dep(); }, yh ? yh + i * dim : NULL);
}

/* Rows longer than 32 values per thread of 1024 (no codes: CU_QROW_MAX): one block per row,
 * loops over the row in memory. */
__global__ void __launch_bounds__(1024) k_rows_long(const float *x, const float *w, float *y, int dim, float eps, int norm, int aq) {
    cu_dep();
    const float *xi = x + (size_t)blockIdx.x * dim;
    float *yi = y + (size_t)blockIdx.x * dim;
    if (norm) {
        float ss = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) ss = fmaf(xi[k], xi[k], ss);
        ss = block_reduce<false>(ss);
        const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int k = threadIdx.x; k < dim; k += blockDim.x) yi[k] = xi[k] * inv * (w ? w[k] : 1.0f);
        __syncthreads(); /* the block's writes of yi are visible to the whole block */
    }
    if (aq) {
        float mx = 0.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) mx = fmaxf(mx, fabsf(yi[k]));
        mx = block_reduce<true>(mx);
        if (mx < 1e-5f) mx = 1e-5f;
        const float sc = (1.0f / mx) * 127.0f;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) yi[k] = fminf(fmaxf(rintf(yi[k] * sc), -128.0f), 127.0f) / sc;
    }
}

/* The row ops above for n rows of dim; q / xs: the codes too (dim a multiple of 32, at most
 * CU_QROW_MAX). Blocks of 256 threads up to 8192 values a row with a norm, else 1024 (the same for every call
 * of a row size, so equal rows give equal bits whichever op asked); a decode-sized batch whose y is
 * not x (blocks would overwrite rows others still read) spreads each row over about 2 blocks per
 * SM in all. */
static int rows_launch(cu_state *s, const char *what, const float *x, const float *w, float *y, int n, int dim, float eps, int norm, int aq,
                       int8_t *q, float2 *xs, __half *yh) {
    if (n <= 0) return 0;
    /* rows from 2048 values on 1024 threads, at most eight values a thread: the row kernel's time
     * is its chain of instructions a thread (one block took 3.5 us of SM time on a 2560-value
     * BitNet norm on 256 threads; H200 tg128 BitNet-2B I2_S +8.6%, Llama-3.2-1B Q4_0 +1.0% with
     * the norms on 1024 threads too, docs/bench.md run 10). A norm sums its squares in the order
     * of the block size, which depends on the row's size only (the same bits for every row op of a
     * size): OB_CUDA_ROWS_WIDE=1 keeps norms on 256 threads up to 8192 values (as the whole-layer
     * kernel, OB_CUDA_LAYER=1, which implies it), =0 every row op */
    const int wide = s->rows_wide && dim >= 2048 && (!norm || s->rows_wide == 2);
    const int th = wide || dim > 256 * 32 ? 1024 : 256, per = (dim + th - 1) / th;
    if (per > 32) {
        cu_launch(s, what, (unsigned)n, 1024, 0, k_rows_long, x, w, y, dim, eps, norm, aq);
        return 0; /* (no f16 copy from this kernel) */
    }
    int ns = 1;
    if (y != x && n <= CU_GEMV_MAX) {
        ns = (2 * s->sm_count + n - 1) / n;
        if (ns > dim / 256) ns = dim / 256;
        const int cap = s->rows_slices ? s->rows_slices : n != 1 ? 0 : s->ffn_free ? s->ffn_free : aq ? ROWS_AQ_SLICES : 0;
        if (cap && ns > cap) ns = cap;
        if (ns < 1) ns = 1;
    }
    int slice = (dim + ns - 1) / ns;
    slice = (slice + 31) & ~31;
    ns = (dim + slice - 1) / slice;
    const dim3 grid((unsigned)n, (unsigned)ns);
#define ROWS_K(P, T) cu_launch(s, what, grid, T, 0, k_rows<P, T>, x, w, y, dim, eps, norm, aq, q, xs, slice, s->rows_wpre, yh)
    if (th == 1024 && per <= 2) ROWS_K(2, 1024);
    else if (th == 1024 && per <= 4) ROWS_K(4, 1024);
    else if (th == 1024 && per <= 8) ROWS_K(8, 1024);
    else if (th == 1024 && per <= 16) ROWS_K(16, 1024);
    else if (th == 1024) ROWS_K(32, 1024);
    else if (per <= 1) ROWS_K(1, 256);
    else if (per <= 2) ROWS_K(2, 256);
    else if (per <= 4) ROWS_K(4, 256);
    else if (per <= 8) ROWS_K(8, 256);
    else if (per <= 16) ROWS_K(16, 256);
    else ROWS_K(32, 256);
#undef ROWS_K
    return yh != NULL;
}

/* The row ops for n rows: codes too when a decode-sized batch can use them, and an f16 copy
 * where the next products take cuBLAS (cu_xc_rows: their conversion launch saved). */
static void rows_op(cu_state *s, const float *x, const float *w, float *y, int n, int dim, float eps, int norm, int aq) {
    int8_t *q = NULL;
    float2 *xs = NULL;
    if (n > 0 && n <= CU_GEMV_MAX && dim % 32 == 0 && dim <= CU_QROW_MAX) cu_xq_bufs(s, n, dim, &q, &xs);
    __half *yh = n > 0 ? cu_xc_rows(s, n, dim) : NULL;
    cu_xc_tag(s, NULL, 0, 0); /* y is written: a copy of what it held is stale */
    const int made = rows_launch(s, aq ? (norm ? "rmsnorm_act_quant" : "act_quant_i8") : "rmsnorm", x, w, y, n, dim, eps, norm, aq, q, xs, yh);
    cu_xq_tag(s, q ? y : NULL, n, dim);
    if (made) cu_xc_tag(s, y, (size_t)n * dim, 0);
}

void cu_quant_rows(cu_state *s, const float *x, int n, int dim, int8_t *q, float2 *xs) {
    rows_launch(s, "matmul (quantize activations)", x, NULL, NULL, n, dim, 0.0f, 0, 0, q, xs, NULL);
}

void cu_rmsnorm(cu_state *s, const float *x, const float *w, float *y, int n, int dim, float eps) { rows_op(s, x, w, y, n, dim, eps, 1, 0); }
void cu_act_quant_i8(cu_state *s, float *x, int n, int dim) { rows_op(s, x, NULL, x, n, dim, 0.0f, 0, 1); }
void cu_rmsnorm_act_quant(cu_state *s, const float *x, const float *w, float *y, int n, int dim, float eps) {
    rows_op(s, x, w, y, n, dim, eps, 1, 1);
}

__global__ void k_kv_write(uint8_t *cache, int type, const float *x, int n, int dim, int n_ctx, const int32_t *pos,
                           const int32_t *seq, size_t row_bytes) {
    cu_dep();
    const int i = blockIdx.y, e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= dim) return; /* q8_0: dim is a multiple of 32, whole warps leave together */
    kv_store(cache + ((size_t)seq[i] * n_ctx + pos[i]) * row_bytes, type, x + (size_t)i * dim, e);
}

/* One block per token: the angles once in shared memory, then every (head, pair). */
__global__ void k_rope(float *x, int n_head, int head_dim, const int32_t *pos, ob_rope r) {
    extern __shared__ float cs[]; /* [half] cos, then [half] sin */
    cu_dep();
    rope_angles(cs, pos[blockIdx.x], r);
    __syncthreads();
    rope_row(x + (size_t)blockIdx.x * n_head * head_dim, n_head, head_dim, cs, r);
}

/* rope_kv: block (i, g) takes token i's KV head g: it rotates the query heads of that group and
 * K head g, then writes K and V head g into the caches (one block per token was one SM's serial
 * work: 8 us a token on the H200). */
__global__ void k_rope_kv(float *q, float *k, const float *v, ob_attn_args a, ob_rope r, size_t k_row, size_t v_row) {
    extern __shared__ float cs[];
    const int i = blockIdx.x, g = blockIdx.y, hd = a.head_dim, kvd = a.n_head_kv * hd, gq = a.n_head / a.n_head_kv;
    rope_angles(cs, a.pos[i], r); /* positions come from a copy ordered before the previous kernel */
    cu_dep();
    __syncthreads();
    rope_row(q + ((size_t)i * a.n_head + (size_t)g * gq) * hd, gq, hd, cs, r);
    rope_row(k + (size_t)i * kvd + (size_t)g * hd, 1, hd, cs, r);
    __syncthreads(); /* the rotated K head is complete */
    const size_t slot = (size_t)a.seq[i] * a.n_ctx + a.pos[i];
    for (int e = g * hd + threadIdx.x; e < (g + 1) * hd; e += blockDim.x) { /* q8_0: hd and blockDim are whole warps */
        kv_store((uint8_t *)a.k + slot * k_row, a.type_k, k + (size_t)i * kvd, e);
        kv_store((uint8_t *)a.v + slot * v_row, a.type_v, v + (size_t)i * kvd, e);
    }
}

void cu_rope_kv(cu_state *s, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r) {
    const int half = r->n_rot / 2, kvd = a->n_head_kv * a->head_dim;
    if (a->n <= 0) return;
    const dim3 grid((unsigned)a->n, (unsigned)a->n_head_kv);
    cu_launch(s, "rope_kv", grid, 128, (size_t)2 * (half > 0 ? half : 1) * sizeof(float), k_rope_kv, q, k, v, *a, *r,
              ob_type_row_size(a->type_k, kvd), ob_type_row_size(a->type_v, kvd));
}

void cu_rope(cu_state *s, float *x, int n, int n_head, int head_dim, const int32_t *pos, const ob_rope *r) {
    const int half = r->n_rot / 2;
    if (n <= 0 || half <= 0) return;
    const int work = n_head * half, th = work >= 256 ? 256 : work >= 128 ? 128 : 64;
    cu_launch(s, "rope", (unsigned)n, th, (size_t)2 * half * sizeof(float), k_rope, x, n_head, head_dim, pos, *r);
}

void cu_kv_write(cu_state *s, void *cache, int type, const float *x, int n, int dim, int n_ctx, const int32_t *pos,
                 const int32_t *seq) {
    if (n <= 0) return;
    dim3 grid((unsigned)((dim + 127) / 128), (unsigned)n);
    cu_launch(s, "kv_write", grid, 128, 0, k_kv_write, (uint8_t *)cache, type, x, n, dim, n_ctx, pos, seq, ob_type_row_size(type, dim));
}

__global__ void k_add(float *y, const float *x, size_t n) {
    cu_dep();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

void cu_add(cu_state *s, float *y, const float *x, size_t n) {
    if (!n) return;
    cu_launch(s, "add", (unsigned)((n + OPS_THREADS - 1) / OPS_THREADS), OPS_THREADS, 0, k_add, y, x, n);
}

__global__ void k_add_bias(float *y, const float *bias, size_t total, int dim) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float b = i < total ? bias[i % dim] : 0.0f; /* a weight: read before the wait (cuda_int.h, cu_dep) */
    cu_dep();
    if (i < total) y[i] += b;
}

void cu_add_bias(cu_state *s, float *y, const float *bias, int n, int dim) {
    size_t total = (size_t)n * dim;
    if (!total) return;
    cu_launch(s, "add_bias", (unsigned)((total + OPS_THREADS - 1) / OPS_THREADS), OPS_THREADS, 0, k_add_bias, y, bias, total, dim);
}

__global__ void k_glu(int relu2, float *gate, const float *up, size_t n) {
    cu_dep();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    gv_out(gate + i, GV_GLU, relu2, gate[i], up[i]);
}

void cu_glu(cu_state *s, ob_act act, float *gate, const float *up, size_t n) {
    if (!n) return;
    cu_launch(s, "glu", (unsigned)((n + OPS_THREADS - 1) / OPS_THREADS), OPS_THREADS, 0, k_glu, (int)(act == OB_ACT_RELU2), gate, up, n);
}
