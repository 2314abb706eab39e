/* cuda_gemv.cu — the decode matmul (up to 32 tokens: cu_gemv_takes) with its rows staged in shared memory,
 * and the fused forms the engine calls when a backend has them (backend.h): several weights on
 * the same input (Q, K, V) in one launch, the residual add in the epilogue, gate and up with
 * the GLU in the epilogue.
 *
 * Owns: k_gv. A block of 128 threads owns R consecutive rows of one weight (R of the gate and
 * the same R of the up weight for GLU). It first copies their bytes, one contiguous span per
 * weight, from global to shared memory with 16-byte asynchronous copies, all issued at once (a
 * quantized row's blocks are 17-210 bytes and rarely 16-byte aligned: staging makes every
 * global load full width and keeps many loads in flight per SM), then computes from shared
 * memory, looping over token groups (up to NT tokens each) so that a batch reads the weights
 * from memory once:
 *  - int8 path (cu_q8_type: every block type but mxfp4; cuda_q8.cuh): the activations are
 *    quantized to int8 per row as the CPU's integer kernels do (cu_quant_rows, or the RMSNorm that
 *    produced them), each warp takes rows and its lanes 32-element sub-blocks, and __dp4a
 *    makes exact integer sums; float scales after. The same function as the CPU's fast path.
 *  - float path (every other type): threads take 8-element chunks, decode them with
 *    cuda_quant.cuh's deq8 and multiply in float32 with the float activations: the same
 *    function as the CPU reference up to summation order.
 * (Staging the activation codes and scales with the rows as well was tried: 2-5% slower on the
 * H200, docs/cuda.md.)
 * Each output's arithmetic depends neither on R nor on the token group, so a prompt of up to 32
 * tokens and token-by-token decoding agree, and the fused forms give the plain ops' bits. R is
 * picked per call from the row size (shared memory) and the row count (enough blocks).
 * Also owns the fallback kernel for rows it cannot stage (k_gemv, below: the same float path on
 * rows read in place).
 * Does not own: the cuBLAS path (cuda_matmul.cu), the decoders.
 */
#include <cuda_pipeline.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_stage.cuh"

#define GV_THREADS 128
#define GV_SMEM 32768      /* staged bytes per block, at most (gv_rows) */
#define GV_SMEM_MAX 45056  /* above this (one row per block), the fallback kernel runs */
#define GV_JOBS CU_MULTI_MAX
/* One token's staged rows a weight a block at most (R), and the staged rows of its int8-path
 * instances (both weights of a GLU: 2 GV_R1). Where a GLU's R was held to 8 (GV_RMAX1 16, build
 * option), the 1B Q4_K_M's gate/up (q4_K, 72 registers: 7 blocks an SM) took 1024 blocks of 8
 * rows, 1.1 waves, and so the GLU's codes (one wave only) did not pay there. */
#define GV_R1 16
#ifndef GV_RMAX1
#define GV_RMAX1 (2 * GV_R1)
#endif
/* k_gv's registers: N > 0 asks ptxas to fit N blocks an SM (at most 65536 / (128 N) registers a
 * thread) for the one-token instances that hold two sub-blocks a lane (OB_CUDA_GV_MINB) of the
 * types OB_CUDA_GV_MINB_TYPES (bit 1 << type; the held4 and many-token instances spill at 7-8), or
 * for the GLU codes' instance alone (OB_CUDA_GLU_MINB, else it follows OB_CUDA_GV_MINB). Default:
 * 8 on q8_0 (62 -> 56 registers on sm_90; run 17, two builds side by side: Llama-3.2-1B Q8_0 +2.0%,
 * the 8B Q8_0 +0.0%), none on the others, which lost with it (Llama-1B Q4_0 -2.5%, Q4_K_M -3.2%,
 * BitNet I2_S -6.3%, TQ1_0 -2.7%; q6_K alone: within the noise). tq2_0 gained +5.6% with it in run
 * 17 (80 -> 60 registers); after its decoder's changes it lost: run 36, two builds side by side,
 * BitNet-2B TQ2_0 tg128 727.6 without against 716.9 with (+1.5%), the feed-forward matmuls
 * 14.11 -> 13.83 and 10.58 -> 10.25 us. It does not make the GLU codes pay on the 8B Q8_0 (-9.2%
 * against -10.2% without). */
#ifndef OB_CUDA_GV_MINB
#define OB_CUDA_GV_MINB 8
#endif
#ifndef OB_CUDA_GLU_MINB
#define OB_CUDA_GLU_MINB 0
#endif
#ifndef OB_CUDA_GV_MINB_TYPES
#define OB_CUDA_GV_MINB_TYPES (1ULL << OB_TYPE_Q8_0)
#endif
/* Whether type t's bit is set in a type mask (bit 1 << type; the pseudo-types from 64 on: never) */
static __host__ __device__ constexpr bool gv_in_mask(unsigned long long mask, int t) { return t >= 0 && t < 64 && (mask >> t & 1); }
/* k_gv's CODES: none, the GLU output's codes by counters (gv_glu_codes) */
enum { GV_CODES_NONE = 0, GV_CODES_COUNT = 1 };
/* k_gv's min blocks an SM by those options (0: none) */
static constexpr int gv_minb(int t, int nt, int hs, bool codes) {
    return codes && OB_CUDA_GLU_MINB                                                   ? OB_CUDA_GLU_MINB
           : nt == 1 && hs == 2 && gv_in_mask((unsigned long long)(OB_CUDA_GV_MINB_TYPES), t) ? OB_CUDA_GV_MINB
                                                                                       : 0;
}
/* The types whose held rows' loads know their 16-byte alignment at compile time (gv_held_loop;
 * bit 1 << type, 0: none). Run 18, two builds side by side: Llama-3.2-1B Q4_K_M +6.4%, Q4_0
 * +3.5% (the q6_K output matrix 67.0 -> 56.8 us a token, 3.8 TB/s), BitNet TQ2_0 +0.1%, the 1B
 * Q8_0 -0.4%, BitNet I2_S -0.8% (both runs), so every type but i2_s. */
#ifndef OB_CUDA_GV_A16
#define OB_CUDA_GV_A16 (~(1ULL << OB_TYPE_I2_S))
#endif
static __host__ __device__ constexpr bool gv_a16(int t) { return gv_in_mask((unsigned long long)(OB_CUDA_GV_A16), t); }
#ifndef OB_CUDA_GV_HOLD /* build option: 0 compiles gv_rows_q8_held out (for an A/B of its registers) */
#define OB_CUDA_GV_HOLD 1
#endif

/* One weight of a launch: its blocks are blockIdx.x in [first, next job's first). */
struct gv_job {
    const uint8_t *W;
    float *y;
    int n_out, first;
    float scale;
};

struct gv_args {
    gv_job job[GV_JOBS];
    int nj;
    const uint8_t *U; /* GLU: the up weight, rows staged beside job[0]'s */
    float uscale;
    size_t rb;        /* row bytes (every job's: same type and n_in) */
    int n_in, R, n, ep, relu2;
    int hold;         /* one token's int8 rows with the lanes' codes held in registers (gv_rows_q8_held) */
    const float *x;   /* [n][n_in] */
    const int8_t *xq; /* int8 path: x's codes [n][n_in] and block scales [n][n_in / 32] (cu_quant_rows) */
    const float2 *xs;
    int8_t *cq;       /* GLU making its codes (cu_gemv_glu): the output's codes [n][n_out] and scales (NULL: none), */
    float2 *cxs;      /* each 32-element block's by the block that completes it, counted in ccnt */
    int *ccnt;        /* [n][n_out / 32], 0 between launches */
};

/* Staged row r: the first nr rows at base0 (gate or the only weight), the rest at base1 (up). */
__device__ __forceinline__ const uint8_t *gv_row(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int r) {
    return r < nr ? base0 + (size_t)r * a.rb : base1 + (size_t)(r - nr) * a.rb;
}

/* The lanes' sums acc[t] of row r summed over the warp into red[warp][r * NT + t]. */
template <int NT, int RMAX> __device__ __forceinline__ void gv_red_row(float (&acc)[NT], float (*red)[RMAX * NT], int r) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float v = gv_warp_sum(acc[t]);
        if (lane == 0) red[warp][r * NT + t] = v;
    }
}

/* Each thread's partial sums acc[r][t], summed over its warp into red[warp][r * NT + t]. */
template <int NT, int RMAX> __device__ __forceinline__ void gv_red(float (&acc)[RMAX][NT], float (*red)[RMAX * NT]) {
#pragma unroll
    for (int r = 0; r < RMAX; r++) gv_red_row<NT, RMAX>(acc[r], red, r);
}

/* sum v[i] x[i] of one 8-element chunk, one fmaf chain from 0 (the float path's order) */
__device__ __forceinline__ float gv_dot8(const float (&v)[8], const float (&x)[8]) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) s = fmaf(v[i], x[i], s);
    return s;
}

/* Float path: each thread takes 8-element chunks c = tid, tid + 128, ... of every staged row,
 * decodes a chunk once and multiplies it with each token's activations; red[warp][r * NT + t]
 * gets the warp's partial sum (the epilogue adds the four warps). */
template <int T, int NT, int RMAX>
__device__ __forceinline__ void gv_rows_f32(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows, int t0, int nt,
                                            float (*red)[RMAX * NT]) {
    const int tid = threadIdx.x, nch = a.n_in / 8;
    float acc[RMAX][NT];
#pragma unroll
    for (int r = 0; r < RMAX; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int c = tid; c < nch; c += GV_THREADS) {
        float xv[NT][8];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                const float4 *xp = (const float4 *)(a.x + (size_t)(t0 + t) * a.n_in) + 2 * c;
                float4 p = __ldg(xp), q = __ldg(xp + 1);
                xv[t][0] = p.x; xv[t][1] = p.y; xv[t][2] = p.z; xv[t][3] = p.w;
                xv[t][4] = q.x; xv[t][5] = q.y; xv[t][6] = q.z; xv[t][7] = q.w;
            }
        }
#pragma unroll
        for (int r = 0; r < RMAX; r++) {
            if (r < rows) {
                float v[8];
                deq8r<T>(gv_row(a, base0, base1, nr, r), c, a.rb, v);
#pragma unroll
                for (int t = 0; t < NT; t++) acc[r][t] += gv_dot8(v, xv[t]);
            }
        }
    }
    gv_red<NT, RMAX>(acc, red);
}

/* The rows-in-place instance's rows a block at most and chunks a thread at a time (build options for
 * an A/B; 4 and 2: 70 registers on sm_90, where 8 and 1 took 128, 4 and 1 80, 2 and 4 95) */
#ifndef OB_CUDA_GVD_ROWS
#define OB_CUDA_GVD_ROWS 4
#endif
#ifndef OB_CUDA_GVD_CH
#define OB_CUDA_GVD_CH 2
#endif
/* One token's f16 / bf16 rows read in place (k_gv's DIRECT instances): gv_rows_f32's chunks, sums
 * and order, but each thread first loads CH chunks of every row and their activations (CH x rows
 * 16-byte loads in flight, where the staged loop's loads from shared memory went one row at a
 * time), then multiplies them. */
template <int T, int RMAX, int CH>
__device__ __forceinline__ void gv_rows_direct(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows,
                                               float (*red)[RMAX]) {
    static_assert(RMAX >= 2 && CH >= 1, "a GLU block holds a gate and an up row");
    const int tid = threadIdx.x, nch = a.n_in / 8;
    float acc[RMAX][1];
#pragma unroll
    for (int r = 0; r < RMAX; r++) acc[r][0] = 0.0f;
    for (int c0 = tid; c0 < nch; c0 += CH * GV_THREADS) {
        uint4 w[CH][RMAX];
        float4 xp[CH][2];
#pragma unroll
        for (int k = 0; k < CH; k++) {
            const int c = c0 + k * GV_THREADS;
            if (c < nch) {
                const float4 *x4 = (const float4 *)a.x + 2 * c;
                xp[k][0] = __ldg(x4);
                xp[k][1] = __ldg(x4 + 1);
#pragma unroll
                for (int r = 0; r < RMAX; r++)
                    if (r < rows) w[k][r] = __ldg((const uint4 *)gv_row(a, base0, base1, nr, r) + c);
            }
        }
#pragma unroll
        for (int k = 0; k < CH; k++) {
            if (c0 + k * GV_THREADS < nch) {
                const float xv[8] = {xp[k][0].x, xp[k][0].y, xp[k][0].z, xp[k][0].w, xp[k][1].x, xp[k][1].y, xp[k][1].z, xp[k][1].w};
#pragma unroll
                for (int r = 0; r < RMAX; r++) {
                    if (r < rows) {
                        float v[8];
                        deq8_u4<T>(w[k][r], v);
                        acc[r][0] += gv_dot8(v, xv);
                    }
                }
            }
        }
    }
    gv_red<1, RMAX>(acc, red);
}

/* Int8 path, one 32-element sub-block sb of the staged row rp: unpacked once, dotted with each
 * of the nt tokens' codes from t0 on (nsb sub-blocks per row), added to acc[t]. */
template <int T, int NT>
__device__ __forceinline__ void gv_q8_sb(const gv_args &a, const uint8_t *rp, int sb, int nsb, int t0, int nt, const int8_t *xq,
                                         const float2 *xs, float (&acc)[NT]) {
    q8w<T> W;
    q8_load(W, rp, sb, a.rb);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < nt) {
            const int4 *xp = (const int4 *)(xq + (size_t)(t0 + t) * a.n_in) + 2 * sb;
            const int4 p = xp[0], q = xp[1];
            const int xw[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
            acc[t] += W.dot(xw, xs[(size_t)(t0 + t) * nsb + sb]);
        }
    }
}

/* The held rows' loop (gv_rows_q8_held) with A16: the block's staged rows are 16-byte aligned
 * (checked once a block), which the decoders' loads then know at compile time instead of testing
 * each address (ld_words_row, q8_al16: a branch around every load, which also kept the two rows'
 * loads apart). xp: the activation's own terms of each sub-block's dot (q8_xpre), once for all rows. */
template <int T, int RMAX, int HS, bool A16>
__device__ __forceinline__ void gv_held_loop(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows, int first,
                                             int step, int sb0, int sbs, const int (&x)[HS][8], const float2 (&sc)[HS],
                                             const bool (&has)[HS], const int2 (&xp)[HS], float (*red)[RMAX]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll 1
    for (int r = first; r < rows; r += 2 * step) {
        const int r2 = r + step;
        const bool two = r2 < rows;
        const uint8_t *rp = gv_row(a, base0, base1, nr, r), *rp2 = gv_row(a, base0, base1, nr, two ? r2 : r);
        float v = 0.0f, v2 = 0.0f;
#pragma unroll
        for (int k = 0; k < HS; k++) {
            if (has[k]) {
                const int sb = sb0 + k * sbs;
                q8w<T> W, W2;
                q8_load<T, A16>(W, rp, sb, a.rb);
                q8_load<T, A16>(W2, rp2, sb, a.rb);
                v += q8_dot_pre(W, x[k], sc[k], xp[k]);
                v2 += q8_dot_pre(W2, x[k], sc[k], xp[k]);
            }
        }
        v = gv_warp_sum(v);
        v2 = gv_warp_sum(v2);
        if (lane == 0) {
            red[warp][r] = v;
            if (two) red[warp][r2] = v2;
        }
    }
}

/* gv_held_loop with the loads A16 allows: the types whose loads take it, on rows the block finds
 * 16-byte aligned */
template <int T, int RMAX, int HS>
__device__ __forceinline__ void gv_held_a16(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows, int first,
                                            int step, int sb0, int sbs, const int (&x)[HS][8], const float2 (&sc)[HS],
                                            const bool (&has)[HS], const int2 (&xp)[HS], float (*red)[RMAX]) {
    if constexpr (gv_a16(T) && (cu_packed_type(T) || q8_loads_a16(T)))
        if (((uintptr_t)base0 % 16 | (uintptr_t)base1 % 16 | a.rb % 16) == 0)
            return gv_held_loop<T, RMAX, HS, true>(a, base0, base1, nr, rows, first, step, sb0, sbs, x, sc, has, xp, red);
    gv_held_loop<T, RMAX, HS, false>(a, base0, base1, nr, rows, first, step, sb0, sbs, x, sc, has, xp, red);
}

/* One token's int8 rows when each lane has at most HS sub-blocks of a row (sb0, sb0 + sbs, ...):
 * their codes and scales are loaded once into registers for every row, and rows go two at a time
 * (r and r + step), so that each warp has two independent chains of loads, dot products and
 * shuffles in flight. Each row's sum is that of gv_rows_q8 (the same terms in the same order). */
template <int T, int RMAX, int HS>
__device__ __forceinline__ void gv_rows_q8_held(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows, int first,
                                                int step, int sb0, int sbs, const int8_t *xq, const float2 *xs, float (*red)[RMAX]) {
    const int nsb = a.n_in / 32;
    int x[HS][8] = {};
    float2 sc[HS] = {};
    bool has[HS];
    int2 xp[HS];
#pragma unroll
    for (int k = 0; k < HS; k++) {
        const int sb = sb0 + k * sbs;
        has[k] = sb < nsb;
        if (has[k]) {
            const int4 *xp4 = (const int4 *)xq + 2 * sb;
            const int4 p = xp4[0], q = xp4[1];
            x[k][0] = p.x; x[k][1] = p.y; x[k][2] = p.z; x[k][3] = p.w; x[k][4] = q.x; x[k][5] = q.y; x[k][6] = q.z; x[k][7] = q.w;
            sc[k] = xs[sb];
        }
        xp[k] = q8_xpre<T>(x[k]);
    }
    gv_held_a16<T, RMAX, HS>(a, base0, base1, nr, rows, first, step, sb0, sbs, x, sc, has, xp, red);
}

/* Int8 path (cuda_q8.cuh), one row at a time (the row loop is not unrolled: registers do not grow
 * with the rows a block stages). Rows shorter than GV_SPLIT_SB sub-blocks: warp w owns staged rows
 * w, w + 4, ..., its lanes take sub-blocks sb = lane, lane + 32, ..., unpack each once and dot it
 * with each token's codes; red[warp][r * NT + t] gets the row's sum for the rows the warp owns and
 * 0 for the others. Longer rows: every warp takes every row, warp w and lane l sub-blocks
 * sb = 32 w + l, 32 w + l + 128, ... (a block's rows are rarely a multiple of four for long rows,
 * which left a warp idle); red gets each warp's part (the epilogue adds the four in order). Which
 * layout a row gets depends on its length only, so the sums do not depend on R either. One token's
 * rows of at most HS sub-blocks a lane go through gv_rows_q8_held (the same sums). */
template <int T, int NT, int RMAX, int HS>
__device__ __forceinline__ void gv_rows_q8(const gv_args &a, const uint8_t *base0, const uint8_t *base1, int nr, int rows, int t0, int nt,
                                           const int8_t *xq, const float2 *xs, float (*red)[RMAX * NT]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nsb = a.n_in / 32;
    const bool split = nsb >= GV_SPLIT_SB;
    const int first = split ? 0 : warp, step = split ? 1 : 4, sb0 = split ? 32 * warp + lane : lane, sbs = split ? GV_THREADS : 32;
    bool held = false;
    if constexpr (NT == 1 && OB_CUDA_GV_HOLD) {
        held = a.hold && nsb <= HS * sbs;
        if (held) gv_rows_q8_held<T, RMAX, HS>(a, base0, base1, nr, rows, first, step, sb0, sbs, xq, xs, red);
    }
    if (!held) {
#pragma unroll 1
        for (int r = first; r < rows; r += step) {
            const uint8_t *rp = gv_row(a, base0, base1, nr, r);
            float acc[NT];
#pragma unroll
            for (int t = 0; t < NT; t++) acc[t] = 0.0f;
            for (int sb = sb0; sb < nsb; sb += sbs) gv_q8_sb<T, NT>(a, rp, sb, nsb, t0, nt, xq, xs, acc);
            gv_red_row<NT, RMAX>(acc, red, r);
        }
    }
    if (!split && lane == 0)
        for (int r = 0; r < rows; r++)
            if ((r & 3) != warp)
#pragma unroll
                for (int t = 0; t < NT; t++) red[warp][r * NT + t] = 0.0f;
}

/* A codes buffer of n rows of dim reserved in *buf: the codes [n][dim] (rounded up to 16 bytes),
 * then the block scales [n][dim / 32], then 16 spare bytes (staging copies whole 16-byte words). */
static size_t xq_size(int n, int dim, size_t *nc) {
    *nc = ((size_t)n * dim + 15) & ~(size_t)15;
    return *nc + (size_t)n * dim / 32 * sizeof(float2) + 16;
}
static void xq_reserve(cu_state *s, void **buf, size_t *cap, int n, int dim, int8_t **codes, float2 **scales) {
    size_t nc;
    cu_reserve(s, buf, cap, xq_size(n, dim, &nc));
    *codes = (int8_t *)*buf;
    *scales = (float2 *)((uint8_t *)*buf + nc);
}

void cu_xq_bufs(cu_state *s, int n, int dim, int8_t **codes, float2 **scales) {
    size_t nc;
    if (xq_size(n, dim, &nc) > s->xq_cap) cu_xq_tag(s, NULL, 0, 0); /* a new buffer holds nothing yet */
    xq_reserve(s, &s->xq, &s->xq_cap, n, dim, codes, scales);
}

static long xq_handed; /* products that read codes their input's producer made, every backend (tests) */
extern "C" long ob_cuda_codes_handed(void) { return __atomic_load_n(&xq_handed, __ATOMIC_RELAXED); }

void cu_xq_codes(cu_state *s, const float *x, int n, int dim, int8_t **codes, float2 **scales) {
    cu_xq_bufs(s, n, dim, codes, scales);
    if (s->xq_src != x || s->xq_n != n || s->xq_dim != dim) {
        cu_quant_rows(s, x, n, dim, *codes, *scales);
        cu_xq_tag(s, x, n, dim);
    } else {
        __atomic_add_fetch(&xq_handed, 1, __ATOMIC_RELAXED);
    }
}

void cu_xq_tag(cu_state *s, const float *src, int n, int dim) {
    s->xq_src = src;
    s->xq_n = n;
    s->xq_dim = dim;
}

/* The GLU output's int8 codes for ffn_down (by default where the launch is one wave; =1 on q4_0
 * gates, OB_CUDA_GLU_CODES=2 every type, =0 off): a 32-element block of outputs spans the rows of several blocks, so each block
 * counts the rows it wrote into each of its blocks (one counter a token and 32-element block)
 * and the one that completes a block makes its codes
 * from memory (quant_elem: the quantizer's block mode, the attention's codes' one difference: a
 * row on the int8 grid of its max would get one scale there; a GLU output is not one). Called by
 * the whole block after its outputs of tokens t0 .. t0 + nt - 1 (rows r0 .. r0 + nr - 1, at most
 * 32, of n_out, a multiple of 32). */
template <int NT>
__device__ __forceinline__ void gv_glu_codes(const gv_args &a, const gv_job &J, int r0, int nr, int t0, int nt) {
    __shared__ int fin[2 * NT]; /* (token, 32-element block) pairs this block completed */
    const int tid = threadIdx.x, lane = tid & 31, nb = J.n_out >> 5, b_lo = r0 >> 5, ng = ((r0 + nr - 1) >> 5) - b_lo + 1;
    __threadfence(); /* the outputs, before their counts */
    __syncthreads();
    if (tid < nt * ng) {
        const int t = tid / ng, b = b_lo + tid % ng;
        const int lo = r0 > 32 * b ? r0 : 32 * b, hi = r0 + nr < 32 * b + 32 ? r0 + nr : 32 * b + 32;
        fin[tid] = atomicAdd(&a.ccnt[(size_t)(t0 + t) * nb + b], hi - lo) + (hi - lo) == 32;
    }
    __syncthreads();
    for (int k = tid >> 5; k < nt * ng; k += GV_THREADS / 32)
        if (fin[k]) { /* the whole warp: lane = element of the block */
            const int t = k / ng, b = b_lo + k % ng;
            __threadfence(); /* the other blocks' outputs, after their counts */
            const size_t row = (size_t)(t0 + t) * J.n_out;
            quant_elem(__ldcg(J.y + row + 32 * b + lane), 32 * b + lane, 0.0f, 0.0f, false, a.cq + row, a.cxs + (size_t)(t0 + t) * nb);
            if (lane == 0) a.ccnt[(size_t)(t0 + t) * nb + b] = 0; /* for the next launch */
        }
}

/* HS: sub-blocks a lane holds in registers for one token (gv_rows_q8_held): 2, or 4 in the instance
 * gv_hold4 picks for rows of three or four a lane (its own registers). */
/* L2 prefetches of the n bytes at p, 128 bytes a thread and step (DIRECT: issued before the
 * dependency wait, so the rows' HBM reads overlap the previous kernel as staging's copies do). */
__device__ __forceinline__ void gv_l2_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = (size_t)threadIdx.x * 128; o < n; o += (size_t)GV_THREADS * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}

/* CODES: the instance that makes a GLU output's codes (GV_CODES_COUNT: gv_glu_codes; an instance
 * of its own, so that the others' registers stay as they were). DIRECT (f16 / bf16, one token, calls of at most OB_CUDA_GV_DIRECT MiB, default 256): the
 * rows are read where they are, not staged (gv_rows_direct, DIRECT chunks a thread at a time):
 * no shared memory, so R is bounded by registers only; the same sums as the staged instance. */
template <int T, int NT, int RMAX, int HS, int CODES, int DIRECT = 0> __device__ __forceinline__ void gv_block(const gv_args &a) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ float red[GV_THREADS / 32][RMAX * NT];
    int j = 0;
    while (j + 1 < a.nj && (int)blockIdx.x >= a.job[j + 1].first) j++;
    const gv_job J = a.job[j];
    const int r0 = ((int)blockIdx.x - J.first) * a.R, nr = J.n_out - r0 < a.R ? J.n_out - r0 : a.R;
    const int glu = a.ep == GV_GLU, rows = glu ? 2 * nr : nr; /* staged rows: gate rows, then up rows */
    const uint8_t *base0, *base1;
    if constexpr (DIRECT) {
        base0 = J.W + (size_t)r0 * a.rb;
        base1 = glu ? a.U + (size_t)r0 * a.rb : base0;
        gv_l2_prefetch(base0, (size_t)nr * a.rb);
        if (glu) gv_l2_prefetch(base1, (size_t)nr * a.rb);
        cu_dep();
    } else {
        const size_t stride = gv_span((size_t)a.R * a.rb);
        base0 = gv_stage<GV_THREADS>(sm, J.W + (size_t)r0 * a.rb, (size_t)nr * a.rb);
        base1 = glu ? gv_stage<GV_THREADS>(sm + stride, a.U + (size_t)r0 * a.rb, (size_t)nr * a.rb) : base0;
        __pipeline_commit();
        cu_dep(); /* the weights' copies are in flight while the previous kernel ends; the rest reads its output */
        __pipeline_wait_prior(0);
        __syncthreads();
    }

    const int tid = threadIdx.x;
    for (int t0 = 0; t0 < a.n; t0 += NT) {
        const int nt = a.n - t0 < NT ? a.n - t0 : NT;
        if constexpr (cu_q8_type(T)) gv_rows_q8<T, NT, RMAX, HS>(a, base0, base1, nr, rows, t0, nt, a.xq, a.xs, red);
        else if constexpr (DIRECT > 0) {
            static_assert(NT == 1, "rows in place: one token");
            gv_rows_direct<T, RMAX, DIRECT>(a, base0, base1, nr, rows, red);
        }
        else gv_rows_f32<T, NT, RMAX>(a, base0, base1, nr, rows, t0, nt, red);
        __syncthreads();
        for (int k = tid; k < nr * NT; k += GV_THREADS) {
            const int r = k / NT, t = k % NT;
            if (t >= nt) continue;
            float v = 0.0f, u = 0.0f;
#pragma unroll
            for (int w = 0; w < GV_THREADS / 32; w++) v += red[w][r * NT + t];
            v *= J.scale;
            float *yp = J.y + (size_t)(t0 + t) * J.n_out + r0 + r;
            if (glu) {
#pragma unroll
                for (int w = 0; w < GV_THREADS / 32; w++) u += red[w][(nr + r) * NT + t];
                u *= a.uscale;
            }
            gv_out(yp, a.ep, a.relu2, v, u);
        }
        if constexpr (CODES == GV_CODES_COUNT) gv_glu_codes<NT>(a, J, r0, nr, t0, nt);
        __syncthreads(); /* red is reused by the next token group */
    }
}

template <int T, int NT, int RMAX, int HS, int CODES, int DIRECT = 0>
__global__ void __launch_bounds__(GV_THREADS, gv_minb(T, NT, HS, CODES != 0)) k_gv(const gv_args a) {
    gv_block<T, NT, RMAX, HS, CODES, DIRECT>(a);
}

/* Weights of two int8-path types on one input in one launch (Q4_K_M's Q and K as q4_K, V as
 * q6_K): blocks from a2's first job's first on run a2's rows as type T2, the others a's as T.
 * Each block runs k_gv's code for its type (the same sums: one launch and one dependency wait
 * fewer than a launch a type). */
template <int T, int T2, int NT, int RMAX> __global__ void __launch_bounds__(GV_THREADS) k_gv2(const gv_args a, const gv_args a2) {
    if ((int)blockIdx.x >= a2.job[0].first) gv_block<T2, NT, RMAX, 2, GV_CODES_NONE>(a2);
    else gv_block<T, NT, RMAX, 2, GV_CODES_NONE>(a);
}

/* Rows per block (R) for a launch of kernel k over weights of rb row bytes (per staged weight:
 * 2 for GLU) and rows in all: the smallest R whose blocks all fit on the GPU at once (one wave:
 * blocks in a second, partial wave wait for the first to finish: gate/up of Llama-3.2-1B took
 * 2.2 waves with at most 4 rows per weight), up to rmax rows staged and GV_SMEM bytes; the most
 * rows allowed where no R fits (large matrices: few waves). Remembered per shape. (Capping the
 * blocks at 8 per SM, so that R doubles, measured mixed: Llama-3.2-1B Q4_0 +1.3%, Q4_K_M -0.5%,
 * BitNet TQ2_0 -0.9%; docs/bench.md, run 6. At most 2, 4 or 8 rows a block where no R fits, which
 * is the output matrix: 0.94x, 0.99x, 1.00x on Llama-3.2-1B Q4_0, run 7.) */
static int gv_rows(cu_state *s, const void *k, size_t rb, int weights, long rows, int rmax, int *fits = nullptr, bool staged = true) {
    cu_rows_pick *m = s->gv_memo;
    for (int i = 0; i < CU_ROWS_MEMO && m[i].R; i++)
        if (m[i].k == k && m[i].rb == rb && m[i].rows == rows && m[i].weights == weights) {
            if (fits) *fits = m[i].fits;
            return m[i].R;
        }
    int R = 1, fit = 0;
    for (int r = 1; r <= rmax / weights; r++) {
        const size_t smem = staged ? (size_t)weights * gv_span((size_t)r * rb) : 0;
        if (r > 1 && smem > GV_SMEM) break;
        R = r;
        int occ = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, GV_THREADS, smem) != cudaSuccess) occ = 1;
        if ((rows + r - 1) / r <= (long)occ * s->sm_count) {
            fit = 1;
            break;
        }
    }
    int i = 0;
    while (i < CU_ROWS_MEMO - 1 && m[i].R) i++; /* full: the last entry is replaced */
    m[i] = {k, rb, rows, weights, R, fit};
    if (fits) *fits = fit;
    return R;
}

/* Nonzero when k_gv can run w with input x: 8-element chunks, aligned activations, one row per
 * block fits shared memory, rows the int8 quantizer takes. */
static int gv_ok(const ob_weight *w, const float *x, int weights) {
    if (cu_q8_type(w->type) && w->n_in > CU_QROW_MAX) return 0;
    return w->n_in % 8 == 0 && ((uintptr_t)x & 15) == 0 && (size_t)weights * gv_span(w->row_bytes) <= GV_SMEM_MAX;
}

/* The output rows of a call, every job's. */
static long gv_rows_all(const gv_args &a) {
    long rows = 0;
    for (int j = 0; j < a.nj; j++) rows += a.job[j].n_out;
    return rows;
}

/* The bytes of a call's rows (every job's, both weights of a GLU). */
static size_t gv_bytes(const gv_args &a) { return (size_t)gv_rows_all(a) * a.rb * (a.ep == GV_GLU ? 2 : 1); }

template <int T, int NT, int RMAX, int HS = 2, int CODES = 0, int DIRECT = 0> static void gv_launch(cu_state *s, gv_args &a) {
    const int weights = a.ep == GV_GLU ? 2 : 1;
    const long rows = gv_rows_all(a);
    const int rmax = NT == 1 && RMAX > GV_R1 * weights ? GV_R1 * weights : RMAX; /* (one token: GV_R1 rows a weight at most) */
    a.R = gv_rows(s, (const void *)k_gv<T, NT, RMAX, HS, CODES, DIRECT>, a.rb, weights, rows, rmax, nullptr, !DIRECT);
    int blocks = 0;
    for (int j = 0; j < a.nj; j++) {
        a.job[j].first = blocks;
        blocks += (a.job[j].n_out + a.R - 1) / a.R;
    }
    const size_t smem = DIRECT ? 0 : (size_t)weights * gv_span((size_t)a.R * a.rb);
    cu_launch(s, DIRECT ? "matmul (direct)" : "matmul (staged)", (unsigned)blocks, GV_THREADS, smem, k_gv<T, NT, RMAX, HS, CODES, DIRECT>, a);
}

/* k_gv2's launch: a's weights as type T, a2's as T2, one R for both (the smallest that puts every
 * block in one wave, at the larger row's staging), a2's blocks after a's. */
template <int T, int T2, int NT, int RMAX> static void gv_launch2(cu_state *s, gv_args &a, gv_args &a2) {
    const size_t rb = a.rb > a2.rb ? a.rb : a2.rb;
    const int R = gv_rows(s, (const void *)k_gv2<T, T2, NT, RMAX>, rb, 1, gv_rows_all(a) + gv_rows_all(a2), RMAX);
    int blocks = 0;
    for (gv_args *p : {&a, &a2}) {
        p->R = R;
        for (int j = 0; j < p->nj; j++) {
            p->job[j].first = blocks;
            blocks += (p->job[j].n_out + R - 1) / R;
        }
    }
    cu_launch(s, "matmul (two types)", (unsigned)blocks, GV_THREADS, gv_span((size_t)R * rb), k_gv2<T, T2, NT, RMAX>, a, a2);
}

template <int T, int T2> static void gv_type2(cu_state *s, gv_args &a, gv_args &a2) {
    if (a.n == 1) gv_launch2<T, T2, 1, GV_R1>(s, a, a2);
    else if (a.n <= 4) gv_launch2<T, T2, 4, 8>(s, a, a2);
    else gv_launch2<T, T2, 8, 4>(s, a, a2);
}

/* The type pairs k_gv2 is built for (the first type's weights, then the second's): the attention
 * mixes of llama.cpp's K-quant files (q6_K or q5_K `attn_v` beside q4_K / q5_K / q3_K Q and K). */
#define GV_PAIRS(F)                                                                              \
    F(OB_TYPE_Q4_K, OB_TYPE_Q6_K) F(OB_TYPE_Q5_K, OB_TYPE_Q6_K) F(OB_TYPE_Q3_K, OB_TYPE_Q5_K)    \
    F(OB_TYPE_Q3_K, OB_TYPE_Q4_K) F(OB_TYPE_Q4_K, OB_TYPE_Q5_K)

static int gv_pair(int t, int t2) {
#define GV_IS(A, B) if (t == (A) && t2 == (B)) return 1;
    GV_PAIRS(GV_IS)
#undef GV_IS
    return 0;
}

static long gv_two_type_launches; /* launches of k_gv2, every backend of the process (tests) */
extern "C" long ob_cuda_gv_two_type_launches(void) { return __atomic_load_n(&gv_two_type_launches, __ATOMIC_RELAXED); }

/* Nonzero when one token's rows of n_in values go to the instance that holds three or four
 * sub-blocks a lane: rows with that many on some lane, and, by default (gv_hold 1), only rows long
 * enough that all four warps take every row. Measured on the H200 (docs/bench.md run 9): +2.0% on
 * the 8B Q4_K_M (its 14336-value ffn_down), -1.5% to -3.2% on BitNet (2560-value rows, one warp a
 * row, three sub-blocks on half the lanes), so that case keeps the loop. */
static int gv_hold4(int gv_hold, int n_in) {
    const int nsb = n_in / 32, split = nsb >= GV_SPLIT_SB, sbs = split ? GV_THREADS : 32;
    return (gv_hold == 4 || (gv_hold == 1 && split)) && nsb > 2 * sbs && nsb <= 4 * sbs;
}

static long gv_direct_launches; /* one-token float products that read their rows in place (tests) */
extern "C" long ob_cuda_gv_direct_launches(void) { return __atomic_load_n(&gv_direct_launches, __ATOMIC_RELAXED); }

/* An int8-path launch's input: the activations' codes, once for every weight of the call (or from
 * RMSNorm), and whether one token's lanes hold them in registers. */
static void gv_int8_input(cu_state *s, gv_args &a) {
    int8_t *q;
    float2 *xs;
    cu_xq_codes(s, a.x, a.n, a.n_in, &q, &xs);
    a.xq = q;
    a.xs = xs;
    a.hold = s->gv_hold != 0;
}

template <int T> static void gv_type(cu_state *s, gv_args &a) {
    if constexpr (cu_q8_type(T)) gv_int8_input(s, a);
    if constexpr (cu_q8_type(T))
        if (a.cq) return gv_launch<T, 1, GV_RMAX1, 2, GV_CODES_COUNT>(s, a); /* (cu_gemv_glu asks with one token, not where held4 would take it) */
    if constexpr (cu_q8_type(T) && OB_CUDA_GV_HOLD)
        if (a.n == 1 && gv_hold4(s->gv_hold, a.n_in)) return gv_launch<T, 1, 16, 4>(s, a);
    if constexpr (T == OB_TYPE_F16 || T == OB_TYPE_BF16)
        if (a.n == 1 && gv_bytes(a) <= ((size_t)s->gv_direct << 20)) {
            __atomic_add_fetch(&gv_direct_launches, 1, __ATOMIC_RELAXED);
            return gv_launch<T, 1, OB_CUDA_GVD_ROWS, 2, false, OB_CUDA_GVD_CH>(s, a);
        }
    if (a.n == 1 && cu_q8_type(T)) gv_launch<T, 1, GV_RMAX1>(s, a);
    else if (a.n == 1) gv_launch<T, 1, 16>(s, a); /* (the float path holds a sum a staged row in registers) */
    else if (a.n <= 4) gv_launch<T, 4, 8>(s, a);
    else gv_launch<T, 8, 4>(s, a);
}

static void gv_run(cu_state *s, int type, gv_args &a) {
#define GV(T) gv_type<T>(s, a)
    CU_FOR_TYPE(type, GV)
#undef GV
}

/* Whether the GLU codes' instance runs w (gate and up of rb-byte rows, n_out each) in one wave:
 * its blocks' tails (a fence and an atomic before the completing block's codes, about 2-3 us)
 * then come once, not once a wave with every block holding its slot through them (docs/cuda.md:
 * the default rule since run 18). */
template <int T> static int gv_codes_fit_t(cu_state *s, size_t rb, long n_out) {
    if constexpr (cu_q8_type(T)) {
        int fit = 0;
        gv_rows(s, (const void *)k_gv<T, 1, GV_RMAX1, 2, GV_CODES_COUNT>, rb, 2, n_out, GV_RMAX1, &fit);
        return fit;
    } else {
        return 0;
    }
}
static int gv_codes_fit(cu_state *s, const ob_weight *g) {
    int fit = 0;
#define FIT(T) fit = gv_codes_fit_t<T>(s, g->row_bytes, (long)g->n_out)
    CU_FOR_TYPE(g->type, FIT)
#undef FIT
    return fit;
}

static gv_args gv_base(const ob_weight *w, const float *x, int n, int ep) {
    gv_args a = {};
    a.rb = w->row_bytes;
    a.n_in = (int)w->n_in;
    a.n = n;
    a.ep = ep;
    a.x = x;
    return a;
}

static gv_job gv_job_of(const ob_weight *w, float *y) {
    gv_job j = {(const uint8_t *)w->data, y, (int)w->n_out, 0, w->scale};
    return j;
}

/* ---- fallback: rows read in place ---------------------------------------------------------
 * For what k_gv cannot stage (a row over GV_SMEM_MAX, activations not 16-byte aligned) and
 * one-element types whose rows are not a multiple of 8: ROWS rows and NT tokens a block (token
 * groups over grid.y), the float path of k_gv on rows read from global memory, or element by
 * element (deq1) for the odd rows. Stores only (the fused forms fall back to plain ops). */
template <int T, int NT, int ROWS, bool VEC>
__global__ void __launch_bounds__(GV_THREADS) k_gemv(const gv_args a) {
    const gv_job &J = a.job[0];
    cu_dep();
    const int r0 = blockIdx.x * ROWS, t0 = blockIdx.y * NT, tid = threadIdx.x;
    const int nr = J.n_out - r0 < ROWS ? J.n_out - r0 : ROWS, nt = a.n - t0 < NT ? a.n - t0 : NT;
    __shared__ float red[GV_THREADS / 32][ROWS * NT];
    const uint8_t *base = J.W + (size_t)r0 * a.rb;
    if constexpr (VEC) {
        gv_rows_f32<T, NT, ROWS>(a, base, base, nr, nr, t0, nt, red);
    } else {
        float acc[ROWS][NT];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
        for (int e = tid; e < a.n_in; e += GV_THREADS)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (r < nr) {
                    const float v = deq1<T>(base + (size_t)r * a.rb, e);
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        if (t < nt) acc[r][t] = fmaf(v, a.x[(size_t)(t0 + t) * a.n_in + e], acc[r][t]);
                }
        gv_red<NT, ROWS>(acc, red);
    }
    __syncthreads();
    for (int k = tid; k < ROWS * NT; k += GV_THREADS) {
        const int r = k / NT, t = k % NT;
        if (r < nr && t < nt) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < GV_THREADS / 32; w++) v += red[w][k];
            J.y[(size_t)(t0 + t) * J.n_out + r0 + r] = v * J.scale;
        }
    }
}

template <int T, int NT, int ROWS> static void fallback_launch(cu_state *s, const gv_args &a, bool vec) {
    dim3 grid((unsigned)((a.job[0].n_out + ROWS - 1) / ROWS), (unsigned)((a.n + NT - 1) / NT));
    if (vec) cu_launch(s, "matmul (fallback)", grid, GV_THREADS, 0, k_gemv<T, NT, ROWS, true>, a);
    else if constexpr (cu_type<T>::block == 1) cu_launch(s, "matmul (fallback)", grid, GV_THREADS, 0, k_gemv<T, NT, ROWS, false>, a);
}

template <int T> static void fallback_type(cu_state *s, const gv_args &a) {
    const bool vec = a.n_in % 8 == 0 && ((uintptr_t)a.x & 15) == 0;
    if (cu_type<T>::block > 1 && !vec) { /* block types: rows are multiples of 32, buffers 256-aligned */
        fprintf(stderr, "cuda backend: matmul activations at %p are not 16-byte aligned\n", (const void *)a.x);
        abort();
    }
    if (a.n == 1) fallback_launch<T, 1, 4>(s, a, vec);
    else if (a.n <= 4) fallback_launch<T, 4, 2>(s, a, vec);
    else fallback_launch<T, 8, 2>(s, a, vec);
}

static long glu_codes_made; /* GLU launches that made their output's codes, every backend of the process (tests) */
extern "C" long ob_cuda_glu_codes_made(void) { return __atomic_load_n(&glu_codes_made, __ATOMIC_RELAXED); }

int cu_reads_codes(const cu_state *s, const ob_weight *w, int n) {
    return w && cu_q8_type(w->type) && w->type != OB_TYPE_LEAN4 && cu_gemv_takes(s, w, n);
}

int cu_gemv_takes(const cu_state *s, const ob_weight *w, int n) {
    if (n > CU_GEMV_MAX) return 0;
    const int with_copy = s->gemv_max < s->gemv_copy_max ? s->gemv_max : s->gemv_copy_max; /* the limit once w has a copy */
    if (!cu_q8_type(w->type) || !s->step_distinct || n <= with_copy) return 1;
    return n <= s->gemv_max && !cu_f16_copy_has(s, w->data);
}

int cu_gemv(cu_state *s, const ob_weight *w, const float *x, float *y, int n, int add) {
    if (!cu_gemv_takes(s, w, n) || !gv_ok(w, x, 1)) return 0;
    gv_args a = gv_base(w, x, n, add ? GV_ADD : GV_STORE);
    a.job[0] = gv_job_of(w, y);
    a.nj = 1;
    gv_run(s, w->type, a);
    return 1;
}

int cu_gemv_multi(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n) {
    if (count < 1 || count > GV_JOBS || !cu_gemv_takes(s, ws[0], n)) return 0;
    for (int i = 0; i < count; i++)
        if (!gv_ok(ws[i], x, 1) || ws[i]->type != ws[0]->type || ws[i]->n_in != ws[0]->n_in) return 0;
    gv_args a = gv_base(ws[0], x, n, GV_STORE);
    for (int i = 0; i < count; i++) a.job[i] = gv_job_of(ws[i], ys[i]);
    a.nj = count;
    gv_run(s, ws[0]->type, a);
    return 1;
}

int cu_gemv_multi2(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n) {
    if (!s->gv_two || count < 2 || count > GV_JOBS) return 0;
    int t = ws[0]->type, t2 = -1;
    for (int i = 1; i < count; i++)
        if (ws[i]->type != t) t2 = ws[i]->type;
    if (t2 < 0) return 0;
    if (!gv_pair(t, t2)) { /* the pair the other way round */
        const int u = t;
        t = t2;
        t2 = u;
        if (!gv_pair(t, t2)) return 0;
    }
    gv_args a = gv_base(ws[0], x, n, GV_STORE), a2 = a;
    for (int i = 0; i < count; i++) {
        const ob_weight *w = ws[i];
        if ((w->type != t && w->type != t2) || w->n_in != ws[0]->n_in || !gv_ok(w, x, 1) || !cu_gemv_takes(s, w, n)) return 0;
        if (n == 1 && OB_CUDA_GV_HOLD && gv_hold4(s->gv_hold, (int)w->n_in)) return 0; /* (k_gv's held4 instance takes those) */
        gv_args *p = w->type == t ? &a : &a2;
        p->rb = w->row_bytes;
        p->job[p->nj++] = gv_job_of(w, ys[i]);
    }
    gv_int8_input(s, a); /* (once for both types) */
    a2.xq = a.xq;
    a2.xs = a.xs;
    a2.hold = a.hold;
#define GV_TWO(A, B) if (t == (A) && t2 == (B)) gv_type2<A, B>(s, a, a2);
    GV_PAIRS(GV_TWO)
#undef GV_TWO
    __atomic_add_fetch(&gv_two_type_launches, 1, __ATOMIC_RELAXED);
    return 1;
}

int cu_gemv_glu(cu_state *s, int relu2, const ob_weight *g, const ob_weight *u, const float *x, float *out, int n, const ob_weight *out_to) {
    if (!cu_gemv_takes(s, g, n) || !gv_ok(g, x, 2) || u->type != g->type || u->n_in != g->n_in || u->n_out != g->n_out) return 0;
    gv_args a = gv_base(g, x, n, GV_GLU);
    a.job[0] = gv_job_of(g, out);
    a.nj = 1;
    a.U = (const uint8_t *)u->data;
    a.uscale = u->scale;
    a.relu2 = relu2;
    /* the output's codes for the matmul that reads it next as it is (out_to: ffn_down, not after
     * BitNet's sub-norm), into the second codes buffer (the first holds x's): one token, on the
     * instance that holds two sub-blocks a lane (the held4 one keeps its registers); by default
     * where the launch is one wave (gv_codes_fit; run 18: the 8B Q4_0 +3.7% against =1, which
     * made them there in two waves; the 1B Q4_0 the same choice, the 8B Q8_0 -0.3%), =1 on q4_0
     * gates only (run 15: +1.7% / +2.4% on the 1B; q8_0 -0.1%, K-quants -1.2% / -1.7%: the
     * counters and the completing block's codes cost a multi-wave launch more than the quantizer
     * they remove), =2 every type */
    const int codes = n == 1 && cu_reads_codes(s, out_to, n) && cu_q8_type(g->type) && g->n_out % 32 == 0 &&
                      g->n_out <= CU_QROW_MAX && !(OB_CUDA_GV_HOLD && gv_hold4(s->gv_hold, (int)g->n_in)) &&
                      (s->glu_codes == 2 || (s->glu_codes == 1 && g->type == OB_TYPE_Q4_0) ||
                       (s->glu_codes == 3 && gv_codes_fit(s, g))); /* (the occupancy query last) */
    if (codes) {
        xq_reserve(s, &s->xq2, &s->xq2_cap, n, (int)g->n_out, &a.cq, &a.cxs);
        cu_attn_scratch(s, 0, (size_t)n * g->n_out / 32); /* the counters (shared with the attention's: 0 between launches) */
        a.ccnt = s->attn_cnt;
    }
    gv_run(s, g->type, a);
    if (codes) { /* xq now holds the output's codes */
        void *b = s->xq;
        const size_t c = s->xq_cap;
        s->xq = s->xq2;
        s->xq_cap = s->xq2_cap;
        s->xq2 = b;
        s->xq2_cap = c;
        __atomic_add_fetch(&glu_codes_made, 1, __ATOMIC_RELAXED);
        cu_xq_tag(s, out, n, (int)g->n_out);
    }
    return 1;
}

void cu_gemv_fallback(cu_state *s, const ob_weight *w, const float *x, float *y, int n) {
    gv_args a = gv_base(w, x, n, GV_STORE);
    a.job[0] = gv_job_of(w, y);
    a.nj = 1;
#define FB(T) fallback_type<T>(s, a)
    CU_FOR_TYPE(w->type, FB)
#undef FB
}
