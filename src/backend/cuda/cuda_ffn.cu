/* cuda_ffn.cu — one token's feed-forward block in one launch (backend.h's ffn_decode, OB_CUDA_FFN):
 * x += down(act(gate(rmsnorm(x) * w)) * up(rmsnorm(x) * w)) for q4_0 gate, up and down weights,
 * or q4_K gate and up with q4_K or q6_K down (Q4_K_M's two kinds of layer; OB_CUDA_FFN_K=0 off; down's
 * chunks then 39 or 54 bytes a row for two sub-blocks, ff_chunk; q6_K's in two parts, ff_q6_rows),
 * or ternary weights throughout (tq2_0, tq1_0: BitNet's layers, with its sub-norm and act_quant_i8
 * before gate/up and before down; bulk copies only; down's chunks 2-bit codes and a scale a
 * sub-block, k_ffn_repack_t), where the split below fits the GPU. i2_s is not taken: its form
 * differed from the separate ops by 1e-3 of the output's scale where tq2_0 / tq1_0 agree to 2e-5
 * (the chunks' round trip checked exact on the host; cause not found) and was 7% slower (run 34).
 * By default the tq1_0 form alone (s->ffn_t, OB_CUDA_FFN_T=1 both): tg128 on BitNet-2B TQ1_0 +2.0%,
 * TQ2_0 -1.5%, against the separate ops (run 34: the launch 26.4 us a layer, about what the four
 * launches it replaces take; the second grid barrier and the sub-norm's whole-row statistics on
 * every block cost what the launches saved).
 *
 * Why: the separate path is three dependent launches (the norm with its codes, gate and up with
 * the GLU and its codes, down with the residual add), and the down product needs every
 * intermediate value, i.e. every gate/up block, before it starts. Here block c owns the 32 K
 * intermediate values [32 K c, 32 K (c + 1)): it stages their gate and up rows and the matching
 * 32 K columns of down (a copy of down in chunks, made once per weight by k_ffn_repack: ff_down) in shared memory, all
 * before it waits for the previous kernel; then makes the norm's codes of the whole row itself
 * (rows_regs on 1024 threads: the row kernel's arithmetic), its gate and up sums (the decode
 * matmul's held rows' terms and order: the same GLU values as the separate path), the codes of
 * its 32 K GLU values (the GLU codes' rule: block scales), and its share of every output of down.
 * The shares go to a scratch [blocks][d]; after a grid barrier (every block resident: one a SM),
 * block c adds rows [c * d / blocks, ...) over the blocks in a fixed order to x. So no atomics:
 * the same bits every run; they differ from the separate path only by down's summation order
 * (each output is a sum over its 32 K-value chunks, then over the chunks, instead of over four
 * warps' lanes).
 * With a sub-norm or act_quant_i8 before down (the ternary forms), down's codes need the whole
 * intermediate row's statistics: each block writes its GLU values to hb (the engine's gate buffer),
 * and after a first grid barrier every block computes the row kernel's norm, act_quant and codes of
 * the whole row on its 1024 threads (rows_regs: the same bits as the separate ops' row kernel),
 * keeping its own 32 K codes. So two grid barriers a launch instead of one, for three launches
 * saved.
 * Status: the default on Hopper (s->ffn 2, bulk copies; OB_CUDA_FFN=0 off, =1 threads' copies:
 * slower than the separate ops, -4.6% to -5.8% tg128 on Llama-3.2-1B Q4_0, run 28). Alone it is
 * level with the separate ops (+0.1%: it saves 1.0 us of the FFN's 17.1 a layer, but the next
 * norm's 8 blocks a row then shared the 4 SMs this kernel leaves free, two a SM, 1.2 us longer);
 * with the one-token row ops capped at the SMs it leaves free (s->ffn_free, cuda_ops.cu) +4.3%
 * (run 28, call 8; run 29 for the default), and another +3.2% with down's copy issued after the
 * norm (FF_DOWN_LATE, run 29); the q4_K forms +10.4% on Llama-3.2-1B Q4_K_M (run 32), two rows at
 * once (FF_PAIR) +1.9% on its Q4_0, x's rows read before the grid barrier and the barrier on a
 * growing counter (FF_XEARLY, FF_MONO) +6.7% on its Q4_0 and +2.8% on its Q4_K_M (run 33). OB_CUDA_FFN_COOP=1 launches it cooperatively, for a
 * GPU shared through MPS (cuda_backend.cu). OB_CUDA_FFN_TRACE=1 times its stretches (docs/cuda.md,
 * "The one-token feed-forward kernel").
 * Owns: k_ffn, k_ffn_repack, k_ffn_repack_k4, k_ffn_repack_q6, k_ffn_repack_t, the down copies (s->ffn_d).
 * Does not own: the bulk copies and their barriers (cuda_bulk.cuh), the grid barrier (cuda_grid.cuh),
 * the row statistics (cuda_rows.cuh), the sub-block decoders (cuda_q8.cuh).
 */
#include <cuda_pipeline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_bulk.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_stage.cuh"

#define FF_THREADS 1024
#define FF_KMAX 2 /* 32-value sub-blocks of the intermediate row a block owns, at most */
#define FF_BLK 18 /* bytes of a q4_0 block (16 code bytes, d) */
#define FF_K4_ROW 39 /* bytes of a q4_K chunk row (two sub-blocks: 32 code bytes, d and dmin, two 6-bit scales and mins) */
#define FF_Q6_ROW 54 /* bytes of a q6_K chunk row (two sub-blocks: 32 bytes of low nibbles, 16 of high bits, 4 scales, d) */
#define FF_TB 10     /* bytes of a ternary chunk's sub-block: 8 of 2-bit codes (q + 1), 2 of its scale (f16) */
#define FF_STAMPS 11 /* the trace's stretches (cu_ffn_trace_report) */
#define FF_SUMS 8    /* shares a lane adds (blocks up to 256) */
#ifndef FF_DOWN_LATE
#define FF_DOWN_LATE 1 /* bulk copies: down's chunk issued after the norm's codes instead of before the wait, so that
                        * it does not compete with the gate/up rows and x's loads (it still arrives before it is
                        * needed): +3.2% tg128 on Llama-3.2-1B Q4_0 against 0 (run 29, call 5) */
#endif
#ifndef FF_PAIR
#define FF_PAIR 1 /* the q4_0 form: two rows at once, a warp's gate/up rows where a block owns 64 values (bulk copies;
                   * their loads then 16-byte wide where the rows are aligned: the A16 decoders) and a thread's rows
                   * of down's shares, so that the two rows' loads overlap (+1.9% tg128 on Llama-3.2-1B Q4_0, run 32;
                   * on the q4_K forms -0.4%: they take a row at a time); 0: a row at a time */
#endif
#ifndef FF_XEARLY
#define FF_XEARLY 1 /* each block reads its rows of x (the residual its sums are added to) before the grid barrier, into
                     * the up rows' space, instead of after the sum: one dependent L2 round trip less after it. With
                     * FF_MONO: +6.7% tg128 on Llama-3.2-1B Q4_0, +2.8% on its Q4_K_M, against both 0 (run 33) */
#endif
#ifndef FF_MONO
#define FF_MONO 1 /* the grid barrier on a counter that only grows (grid_sync_cnt: no reset, no generation; the
                   * kernel's barrier stretch 3.05 -> 1.66 us with FF_XEARLY, run 33); 0: grid_sync */
#endif
#ifndef FF_NCH
#define FF_NCH 2     /* bulk copies: gate/up rows in this many parts, each on its own barrier, so that the products
                      * of the first rows may overlap the arrival of the last (run 28: 4 parts -3.4% tg128, one -2.0%,
                      * each against one part, all issued by thread 0 before its norm; with FF_SPREAD, run 34: 2 parts
                      * +2.1% on Llama-3.2-1B Q4_0, 4 parts +1.3%, its Q4_K_M +0.2% / 0.0%) */
#endif
#ifndef FF_SPREAD
#define FF_SPREAD 1 /* FF_NCH > 1: part k's barrier and copies by warp k's first lane instead of all by thread 0 (the
                     * kernel 18.39 -> 17.76 us a launch with 2 parts, run 34; bench/cuda/tmabw.cu: 2, 8 or 32 copies
                     * in flight fill a block's shared memory alike, so the gain is thread 0's issue time) */
#endif
static_assert(32 * FF_SUMS <= CU_GRID_MAXB, "FF_MONO: a counter for every grid ff_fit plans");
static_assert(FF_NCH == 1 || FF_NCH == 2 || FF_NCH == 4, "FF_NCH: parts of C / FF_NCH rows, a multiple of 16 bytes for q4_0 only up to 4");

struct ff_args {
    float *x;         /* [d]: the residual row, read (the norm) and added to */
    const float *nw;  /* the norm's weights [d] */
    float eps;
    const uint8_t *G, *U; /* gate and up, packed rows [n_ff][rb] */
    const uint8_t *D;     /* down in chunks (k_ffn_repack) */
    float gs, us, ds;     /* the weights' scales */
    size_t rb;            /* gate / up row bytes */
    int d, K, relu2;
    float *part;          /* [blocks][d] */
    unsigned *bar;        /* the grid barrier's counters */
    unsigned long long *cnt; /* FF_MONO: grid_sync_cnt's counter for this grid size */
    long long *trace;     /* OB_CUDA_FFN_TRACE=1: [blocks][FF_STAMPS] cycles summed over launches (NULL: off) */
};
/* The ternary forms' sub-norm and act_quant_i8 (a parameter of its own: with these in ff_args, the
 * q4_K form's registers spilled) */
struct ff_sub {
    const float *sw; /* the sub-norm's weights before down [n_ff], or NULL: none */
    int aq;          /* act_quant_i8 after each norm (BitNet) */
    float *hb;       /* (with sw or aq) the GLU values [n_ff], for the sub-norm's statistics */
};

/* The ternary forms (gate, up and down of one of these types). */
__host__ __device__ constexpr bool ff_tern(int t) { return t == OB_TYPE_TQ2_0 || t == OB_TYPE_TQ1_0; }

/* Bytes of block c's chunk of down: d rows of K sub-blocks. q4_0: their codes [d][K][16], then
 * their scales [d][K] (2 bytes each). Ternary: the codes [d][K][8] (element 4 i + j of a sub-block:
 * byte j of word i / 4, bits 2 (i % 4); q + 1, so 0..2), then each sub-block's scale [d][K] (f16:
 * its block's d). q4_K (K 2: the two sub-blocks that share a super-block's 32
 * code bytes, low and high nibbles): the codes [d][32], then each row's d and dmin [d][4] (f16 as
 * stored), then its two sub-blocks' 6-bit scales and mins [d][3] (sc0 | m0 << 6 | sc1 << 12 | m1 << 18). */
__host__ __device__ __forceinline__ size_t ff_chunk(int t, int d, int K) {
    return t == OB_TYPE_Q4_K   ? (size_t)d * FF_K4_ROW * (K / 2)
           : t == OB_TYPE_Q6_K ? (size_t)d * FF_Q6_ROW * (K / 2)
           : ff_tern(t)        ? (size_t)d * FF_TB * K
                               : (size_t)d * FF_BLK * K;
}
/* q6_K down (K 2, bulk copies only): its chunk does not fit beside the gate and up rows, so it
 * comes in two parts, rows [0, ff_q6_rows(d)) staged beside them after the norm, the rest into the
 * gate rows' space once the gate/up products are done. Each part holds its rows' low nibbles
 * [n][32] (byte i: sub-block 0's element i, sub-block 1's in the high nibble), high bits [n][16]
 * (byte i: the 4 bits of elements i and i + 16, 2 a sub-block), scales [n][4] (two a
 * sub-block) and d [n][2]. A multiple of 8 rows: each part's bytes a multiple of 16. */
__host__ __device__ __forceinline__ int ff_q6_rows(int d) { return (d * 11 / 16) & ~7; }

/* Down (n_out = d rows of nsb packed q4_0 blocks, cu_pack_rows) in chunks of K blocks a row:
 * element i is row r's block sb. */
__global__ void k_ffn_repack(const uint8_t *src, uint8_t *dst, int d, int nsb, int K) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)d * nsb) return;
    const int r = (int)(i / nsb), sb = (int)(i % nsb), c = sb / K, k = sb % K;
    const cu_pk p = cu_pk_at<OB_TYPE_Q4_0>(src + (size_t)r * FF_BLK * nsb, nsb, sb);
    uint8_t *ch = dst + (size_t)c * ff_chunk(OB_TYPE_Q4_0, d, K);
    const size_t rk = (size_t)r * K + k;
    for (int b = 0; b < 16; b++) ch[16 * rk + b] = p.codes[b]; /* (a source row is 18 nsb bytes: its blocks' alignment varies) */
    ch[(size_t)d * 16 * K + 2 * rk] = p.d[0];
    ch[(size_t)d * 16 * K + 2 * rk + 1] = p.d[1];
}

/* Down as q4_K (n_out = d rows of nsup super-blocks as stored) in chunks of two sub-blocks a row
 * (ff_chunk): element i is row r's super-block s, code bytes 32 j .. 32 j + 31 (sub-blocks 2 j and
 * 2 j + 1), chunk 4 s + j. */
__global__ void k_ffn_repack_k4(const uint8_t *src, uint8_t *dst, int d, int nsup) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)d * nsup * 4) return;
    const int r = (int)(i / (4 * nsup)), s = (int)(i % (4 * nsup)) / 4, j = (int)(i % 4);
    const uint8_t *b = src + ((size_t)r * nsup + s) * 144;
    uint8_t *ch = dst + (size_t)(4 * s + j) * ff_chunk(OB_TYPE_Q4_K, d, 2);
    for (int k = 0; k < 32; k++) ch[32 * (size_t)r + k] = b[16 + 32 * j + k];
    for (int k = 0; k < 4; k++) ch[(size_t)32 * d + 4 * (size_t)r + k] = b[k];
    int sc0, m0, sc1, m1;
    k4_scale_min(2 * j, b + 4, &sc0, &m0);
    k4_scale_min(2 * j + 1, b + 4, &sc1, &m1);
    const uint32_t v = (uint32_t)sc0 | (uint32_t)m0 << 6 | (uint32_t)sc1 << 12 | (uint32_t)m1 << 18;
    for (int k = 0; k < 3; k++) ch[(size_t)36 * d + 3 * (size_t)r + k] = (uint8_t)(v >> (8 * k));
}

/* Down as q6_K (n_out = d rows of nsup super-blocks, packed: cu_pack_rows) in chunks of two
 * sub-blocks a row (ff_q6_rows): element i is row r's super-block s, sub-blocks 2 j and 2 j + 1
 * (half h = j / 2, nibble half j % 2 of the low bits, bits 4 (j % 2) .. of the high ones). */
__global__ void k_ffn_repack_q6(const uint8_t *src, uint8_t *dst, int d, int nsup) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)d * nsup * 4) return;
    const int r = (int)(i / (4 * nsup)), s = (int)(i % (4 * nsup)) / 4, j = (int)(i % 4), h = j >> 1, sh = 4 * (j & 1);
    const cu_pk p = cu_pk_at<OB_TYPE_Q6_K>(src + (size_t)r * nsup * 210, nsup, s);
    const int dA = ff_q6_rows(d), in_b = r >= dA, n = in_b ? d - dA : dA, rr = in_b ? r - dA : r;
    uint8_t *ch = dst + (size_t)(4 * s + j) * ff_chunk(OB_TYPE_Q6_K, d, 2) + (in_b ? (size_t)FF_Q6_ROW * dA : 0);
    const uint8_t *ql = p.codes + 64 * h, *qh = p.codes + 128 + 32 * h;
    for (int k = 0; k < 32; k++) ch[32 * (size_t)rr + k] = (uint8_t)(((ql[k] >> sh) & 15) | ((ql[32 + k] >> sh) & 15) << 4);
    for (int k = 0; k < 16; k++) ch[(size_t)32 * n + 16 * (size_t)rr + k] = (uint8_t)(((qh[k] >> sh) & 15) | ((qh[16 + k] >> sh) & 15) << 4);
    for (int k = 0; k < 4; k++) ch[(size_t)48 * n + 4 * (size_t)rr + k] = p.scales[8 * h + 4 * (j & 1) + k];
    for (int k = 0; k < 2; k++) ch[(size_t)52 * n + 2 * (size_t)rr + k] = p.d[k];
}

/* Ternary down (n_out = d rows of nsb sub-blocks as uploaded, rb bytes a row) in chunks of K
 * sub-blocks a row (ff_chunk): element i is row r's sub-block sb, decoded as the products do
 * (any type whose q8w gives codes 0..2 and a block scale d). */
template <int T> __global__ void k_ffn_repack_t(const uint8_t *src, uint8_t *dst, int d, int nsb, int K, size_t rb) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)d * nsb) return;
    const int r = (int)(i / nsb), sb = (int)(i % nsb), c = sb / K, k = sb % K;
    q8w<T> W;
    q8_load<T>(W, src + (size_t)r * rb, sb, rb);
    uint32_t P[2] = {0, 0};
#pragma unroll
    for (int w = 0; w < 8; w++) P[w >> 2] |= ((uint32_t)W.w[w] & 0x03030303u) << (2 * (w & 3));
    uint8_t *ch = dst + (size_t)c * ff_chunk(T, d, K);
    const size_t rk = (size_t)r * K + k;
    for (int b = 0; b < 8; b++) ch[8 * rk + b] = (uint8_t)(P[b >> 2] >> (8 * (b & 3)));
    const __half h = __float2half_rn(W.d); /* (exact: the scale came from an f16) */
    memcpy(ch + (size_t)d * 8 * K + 2 * rk, &h, 2);
}

/* q6_K down, row rr of a part of n rows at base (ff_q6_rows' layout): the two sub-blocks' sums with
 * the GLU codes hx / hsc (xp: their q8_xpre terms), q8w<Q6_K>'s values and dot. */
__device__ __forceinline__ float ff_q6_row(const uint8_t *base, int n, int rr, const int (&hx)[FF_KMAX][8], const float2 (&hsc)[FF_KMAX],
                                           const int2 (&xp)[FF_KMAX]) {
    uint32_t lo[8], hi[4];
    ld_words16<8>(base + 32 * (size_t)rr, lo);
    ld_words16<4>(base + (size_t)32 * n + 16 * (size_t)rr, hi);
    const uint32_t sc = *(const uint32_t *)(base + (size_t)48 * n + 4 * (size_t)rr);
    const float dh = q8_ld_h(base + (size_t)52 * n + 2 * (size_t)rr);
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        q8w<OB_TYPE_Q6_K> W;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t hb = i < 4 ? hi[i] : hi[i - 4] >> 4; /* elements 4 i .. 4 i + 3 */
            W.w[i] = (int)(((lo[i] >> (4 * k)) & 0x0f0f0f0fu) | (((hb >> (2 * k)) & 0x03030303u) << 4));
        }
        W.d = dh;
        W.sc0 = (int)(int8_t)(sc >> (16 * k));
        W.sc1 = (int)(int8_t)(sc >> (16 * k + 8));
        v += q8_dot_pre(W, hx[k], hsc[k], xp[k]);
    }
    return v;
}

/* the shared memory of a block: gate rows, up rows, down's chunk, x's codes and scales, the
 * GLU values' codes and scales, the GLU values */
struct ff_smem {
    size_t g, u, dn, xq, xs, hq, hs, h, total;
};
__host__ __device__ __forceinline__ ff_smem ff_layout(int td, int d, int K, size_t rb) {
    ff_smem m;
    const size_t rows = gv_span((size_t)32 * K * rb);
    m.g = 0;
    m.u = rows;
    m.dn = 2 * rows;
    m.xq = m.dn + gv_span(td == OB_TYPE_Q6_K ? (size_t)FF_Q6_ROW * ff_q6_rows(d) : ff_chunk(td, d, K));
    m.xs = m.xq + (((size_t)d + 15) & ~(size_t)15);
    m.hq = m.xs + (((size_t)d / 32 * sizeof(float2) + 15) & ~(size_t)15);
    m.hs = m.hq + 32 * FF_KMAX;
    m.h = m.hs + FF_KMAX * sizeof(float2);
    m.total = m.h + 32 * FF_KMAX * sizeof(float);
    return m;
}

struct ff_wait {
    long long *at; /* (trace) thread 0's cycle count when the wait ended, in shared memory; NULL: none */
    const unsigned long long *cnt; /* FF_MONO: the barrier's counter, whose target thread 0 reads into *tgt */
    unsigned long long *tgt;
    __device__ void operator()() const {
        cu_dep();
        if (threadIdx.x == 0) {
            if (at) *at = clock64();
            if (FF_MONO) *tgt = grid_cnt_target(cnt);
        }
    }
};

/* One sub-block's int8 codes (8 words) and scale from codes q / scales xs (shared memory). */
__device__ __forceinline__ void ff_codes(const int8_t *q, const float2 *xs, int sb, int (&x)[8], float2 &sc) {
    const int4 *p = (const int4 *)q + 2 * sb;
    const int4 a = p[0], b = p[1];
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w; x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    sc = xs[sb];
}

/* Gate and up rows warp + 32 j (j < R) at once (R independent sums a lane, so their loads and
 * products overlap), each as the decode matmul's held rows: lane l sub-blocks l, l + 32 (HS of them:
 * l + 64 too for rows of up to 3072 values, the decode matmul's loop there), then the
 * sum over the warp (its epilogue's sum over four warps, of which one is nonzero: 0 + v), so the
 * same GLU values as the separate path whatever R. A16: the rows are 16-byte aligned. i0: the
 * rows' first index (the per-part barriers of FF_NCH > 1: each row's part waited for). */
template <int T, int R, bool A16, bool TMA, int HS>
__device__ __forceinline__ void ff_gu(const uint8_t *g, const uint8_t *u, const ff_args &a, uint64_t *mbar, int warp, int lane, const int (&x)[HS][8],
                                      const float2 (&sc)[HS], const bool (&has)[HS], const int2 (&xp)[HS], float *h, int i0 = 0) {
    if constexpr (TMA && FF_NCH > 1)
#pragma unroll
        for (int j = 0; j < R; j++) bulk_bar_wait(&mbar[(i0 + warp + 32 * j) / (32 * a.K / FF_NCH)]);
    float v[R], v2[R];
#pragma unroll
    for (int j = 0; j < R; j++) v[j] = v2[j] = 0.0f;
#pragma unroll
    for (int k = 0; k < HS; k++)
        if (has[k]) {
#pragma unroll
            for (int j = 0; j < R; j++) {
                q8w<T> W, W2;
                q8_load<T, A16>(W, g + (size_t)(warp + 32 * j) * a.rb, lane + 32 * k, a.rb);
                q8_load<T, A16>(W2, u + (size_t)(warp + 32 * j) * a.rb, lane + 32 * k, a.rb);
                v[j] += q8_dot_pre(W, x[k], sc[k], xp[k]);
                v2[j] += q8_dot_pre(W2, x[k], sc[k], xp[k]);
            }
        }
#pragma unroll
    for (int j = 0; j < R; j++) {
        v[j] = gv_warp_sum(v[j]);
        v2[j] = gv_warp_sum(v2[j]);
    }
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < R; j++) gv_out(h + warp + 32 * j, GV_GLU, a.relu2, (0.0f + v[j]) * a.gs, (0.0f + v2[j]) * a.us);
}

/* part[r] = row(r) for this thread's rows of down, r = tid, tid + 1024, ...: two at a time
 * (FF_PAIR), the second clamped to the last row and not stored past it, so that both rows' loads
 * are in flight at once. */
template <bool PAIR, class F> __device__ __forceinline__ void ff_shares(float *part, int d, int tid, F row) {
    if constexpr (PAIR) {
        for (int r = tid; r < d; r += 2 * FF_THREADS) {
            const int r2 = r + FF_THREADS;
            const float v = row(r), v2 = row(min(r2, d - 1));
            part[r] = v;
            if (r2 < d) part[r2] = v2;
        }
    } else {
        for (int r = tid; r < d; r += FF_THREADS) part[r] = row(r);
    }
}

/* A chunk's sub-block codes at p (ff_chunk; 16-byte aligned for q4_0: a chunk is a multiple of 16
 * bytes). q4_0: 16 bytes of nibbles. Ternary: 8 bytes of 2-bit codes, decoded into tq2_0's form
 * (its dot: d (xs.x s - xs.y)). */
__device__ __forceinline__ void ff_chunk_codes(const uint8_t *p, q8w<OB_TYPE_Q4_0> &W) {
    uint32_t q[4];
    ld_words16<4>(p, q);
    nibbles_of(q, W.w);
    W.m = 0.0f;
}
__device__ __forceinline__ void ff_chunk_codes(const uint8_t *p, q8w<OB_TYPE_TQ2_0> &W) {
    const uint2 q = *(const uint2 *)p;
#pragma unroll
    for (int i = 0; i < 8; i++) W.w[i] = (int)(((i < 4 ? q.x : q.y) >> (2 * (i & 3))) & 0x03030303u);
}

/* The grid barrier (FF_MONO: on the counter, at target; else grid_sync), as a rows_regs wait. */
struct ff_gsync {
    unsigned *bar;
    unsigned long long *cnt, target;
    __device__ void operator()() const {
        if (FF_MONO) grid_sync_cnt(cnt, target);
        else grid_sync(bar);
    }
};

/* TMA: the weights staged by bulk copies (their spans 16-byte aligned: ff_plan), else by every
 * thread's 16-byte asynchronous copies */
template <int T, int TD, int PER, bool TMA> __global__ void __launch_bounds__(FF_THREADS, 1) k_ffn(const ff_args a, const ff_sub b) {
    static_assert(TMA || TD != OB_TYPE_Q6_K, "q6_K down: bulk copies only");
    constexpr bool TERN = ff_tern(T);
    constexpr int HS = TERN ? 3 : 2; /* sub-blocks a lane of a gate/up row (rows of 32 HS values at most) */
    static_assert(!TERN || (TMA && TD == T), "ternary forms: bulk copies, down of the gate's type");
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ __align__(8) uint64_t mbar[FF_NCH + 2]; /* (bulk copies) the gate/up parts', then down's (q6_K: its two parts) */
    __shared__ unsigned long long cnt_tgt; /* FF_MONO: thread 0's target count for the grid barrier */
    __shared__ unsigned gu_max; /* (trace) the slowest warp's gate/up cycles */
    __shared__ long long waited; /* (trace) when the previous kernel's wait ended */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, c = blockIdx.x, C = 32 * a.K, d = a.d;
    long long st[FF_STAMPS];
    if (a.trace) {
        st[0] = clock64();
        if (tid == 0) gu_max = 0;
    }
    const ff_smem L = ff_layout(TD, d, a.K, a.rb);
    const size_t gb = (size_t)C * a.rb, cb = ff_chunk(TD, d, a.K);
    const int dA = TD == OB_TYPE_Q6_K ? ff_q6_rows(d) : d; /* (q6_K: rows of down's first part) */
    const size_t cbA = TD == OB_TYPE_Q6_K ? (size_t)FF_Q6_ROW * dA : cb;
    const uint8_t *g, *u, *dn;
    if constexpr (TMA) {
        g = sm + L.g;
        u = sm + L.u;
        dn = sm + L.dn;
        /* (the barriers are initialized before any other thread waits: rows_regs syncs the block) */
        const size_t pb = gb / FF_NCH; /* C / FF_NCH rows: a multiple of 16 bytes (144 K nsb) */
        for (int k = 0; k < FF_NCH; k++)
            if (tid == (FF_SPREAD ? 32 * k : 0)) {
                bulk_bar_init(&mbar[k], (unsigned)(2 * pb));
                bulk_copy(sm + L.g + k * pb, a.G + (size_t)c * gb + k * pb, (unsigned)pb, &mbar[k]);
                bulk_copy(sm + L.u + k * pb, a.U + (size_t)c * gb + k * pb, (unsigned)pb, &mbar[k]);
            }
        if (tid == 0) {
            bulk_bar_init(&mbar[FF_NCH], (unsigned)cbA);
            if (TD == OB_TYPE_Q6_K) bulk_bar_init(&mbar[FF_NCH + 1], (unsigned)(cb - cbA));
            if (!FF_DOWN_LATE) bulk_copy(sm + L.dn, a.D + (size_t)c * cb, (unsigned)cbA, &mbar[FF_NCH]);
        }
    } else {
        g = gv_stage<FF_THREADS>(sm + L.g, a.G + (size_t)c * gb, gb);
        u = gv_stage<FF_THREADS>(sm + L.u, a.U + (size_t)c * gb, gb);
        __pipeline_commit();
        dn = gv_stage<FF_THREADS>(sm + L.dn, a.D + (size_t)c * cb, cb);
        __pipeline_commit();
    }
    int8_t *xq = (int8_t *)(sm + L.xq), *hq = (int8_t *)(sm + L.hq);
    float2 *xs = (float2 *)(sm + L.xs), *hs = (float2 *)(sm + L.hs);
    float *h = (float *)(sm + L.h);

    /* the norm's codes of the whole row (its weights read before the wait) */
    rows_regs<PER, true, ff_wait>(a.x, a.nw, nullptr, d, a.eps, 1, TERN ? b.aq : 0, xq, xs, 0, d, 1,
                                  ff_wait{a.trace ? &waited : nullptr, a.cnt, &cnt_tgt});
    if constexpr (TMA && FF_DOWN_LATE)
        if (tid == 0) bulk_copy(sm + L.dn, a.D + (size_t)c * cb, (unsigned)cbA, &mbar[FF_NCH]);
    if (a.trace) st[1] = clock64();
    if constexpr (!TMA) __pipeline_wait_prior(1); /* (bulk copies: each row's part waited for below) */
    __syncthreads();
    if (a.trace) st[2] = clock64();

    /* ternary forms with a sub-norm or act_quant before down: the GLU values go to hb, where every
     * block reads the whole row after a grid barrier */
    bool glob = false;
    float *hd = h;
    if constexpr (TERN) {
        glob = b.sw || b.aq;
        if (glob) hd = b.hb + (size_t)C * c;
    }
    /* gate and up: warp w takes values i = w, w + 32, ...; lane l sub-blocks l, l + 32 (as the
     * decode matmul's held rows: the same terms in the same order, then its epilogue's sum over
     * four warps, of which one is nonzero: 0 + v) */
    {
        const int nsb = d / 32;
        int x[HS][8] = {};
        float2 sc[HS] = {};
        bool has[HS];
        int2 xp[HS];
#pragma unroll
        for (int k = 0; k < HS; k++) {
            has[k] = lane + 32 * k < nsb;
            if (has[k]) ff_codes(xq, xs, lane + 32 * k, x[k], sc[k]);
            xp[k] = q8_xpre<T>(x[k]);
        }
        if constexpr (TMA && FF_NCH == 1) bulk_bar_wait(&mbar[0]); /* (every row on one barrier: waited once) */
        if (TMA && FF_PAIR && T == OB_TYPE_Q4_0 && C == 64) { /* (the spans' bases are 16-byte aligned: ff_plan) */
            if (a.rb % 16 == 0) ff_gu<T, 2, true, TMA>(g, u, a, mbar, warp, lane, x, sc, has, xp, h);
            else ff_gu<T, 2, false, TMA>(g, u, a, mbar, warp, lane, x, sc, has, xp, h);
        } else {
#pragma unroll 1
            for (int i = 0; i < C / 32; i++)
                ff_gu<T, 1, TMA && T == OB_TYPE_Q4_K, TMA>(g + (size_t)32 * i * a.rb, u + (size_t)32 * i * a.rb, a, mbar, warp, lane, x, sc,
                                                           has, xp, hd + 32 * i, 32 * i);
        }
    }
    if (a.trace) {
        const long long t = clock64();
        if (lane == 0) atomicMax(&gu_max, (unsigned)(t - st[2]));
        st[8] = t;
    }
    __syncthreads();
    /* the rows of x this block adds to after the barrier, [r0, r0 + nr) (FF_XEARLY: read now, by the warps
     * that make no GLU codes, into the up rows' space: free, and no bulk copy writes it again) */
    const int nb = gridDim.x, rpb = (d + nb - 1) / nb, r0 = c * rpb, nr = min(d, r0 + rpb) - r0;
    float *xr = (float *)(sm + L.u);
    if (FF_XEARLY && warp >= FF_KMAX)
        for (int k = tid - 32 * FF_KMAX; k < nr; k += FF_THREADS - 32 * FF_KMAX) xr[k] = a.x[r0 + k];
    if constexpr (TD == OB_TYPE_Q6_K)
        if (tid == 0) { /* down's second part into the gate rows' space, read by every warp before the sync above */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
            bulk_copy(sm + L.g, a.D + (size_t)c * cb + cbA, (unsigned)(cb - cbA), &mbar[FF_NCH + 1]);
        }
    if constexpr (TERN)
        if (glob) { /* the row kernel's sub-norm, act_quant and codes of the whole intermediate row (its weights read
                     * before the barrier), this block's 32 K codes kept */
            const int lo = C * c;
            rows_regs<8, true, ff_gsync>(b.hb, b.sw, nullptr, C * nb, a.eps, b.sw != nullptr, b.aq, hq - lo, hs - lo / 32, lo, lo + C, 1,
                                         ff_gsync{a.bar, a.cnt, FF_MONO ? cnt_tgt : 0});
        }
    if (!glob && warp < a.K) quant_elem(h[32 * warp + lane], 32 * warp + lane, 0.0f, 0.0f, false, hq, hs);
    if (a.trace) st[3] = clock64();
    if constexpr (TMA) bulk_bar_wait(&mbar[FF_NCH]);
    else __pipeline_wait_prior(0);
    __syncthreads();
    if (a.trace) st[4] = clock64();

    /* this chunk's share of every output of down: thread t rows t, t + 1024, ... */
    {
        int hx[FF_KMAX][8];
        float2 hsc[FF_KMAX];
#pragma unroll
        for (int k = 0; k < FF_KMAX; k++)
            if (k < a.K) ff_codes(hq, hs, k, hx[k], hsc[k]);
        float *part = a.part + (size_t)c * d;
        if constexpr (TD == OB_TYPE_Q6_K) { /* (K is 2, as below) */
            int2 xp6[FF_KMAX];
#pragma unroll
            for (int k = 0; k < FF_KMAX; k++) xp6[k] = q8_xpre<OB_TYPE_Q6_K>(hx[k]);
            for (int r = tid; r < d; r += FF_THREADS) {
                if (r >= dA) bulk_bar_wait(&mbar[FF_NCH + 1]);
                part[r] = r < dA ? ff_q6_row(dn, dA, r, hx, hsc, xp6) : ff_q6_row(sm + L.g, d - dA, r - dA, hx, hsc, xp6);
            }
        } else if constexpr (TD == OB_TYPE_Q4_K) { /* (K is 2: ff_fit; hx[0] / hx[1] are the chunk's two sub-blocks) */
            const uint8_t *hd = dn + (size_t)32 * d, *sm3 = dn + (size_t)36 * d;
            ff_shares<false>(part, d, tid, [&](int r) {
                uint32_t q[8];
                ld_words16<8>(dn + 32 * (size_t)r, q);
                const float dh = q8_ld_h(hd + 4 * (size_t)r), mh = q8_ld_h(hd + 4 * (size_t)r + 2);
                const uint8_t *p3 = sm3 + 3 * (size_t)r;
                const uint32_t sv = (uint32_t)p3[0] | (uint32_t)p3[1] << 8 | (uint32_t)p3[2] << 16;
                float v = 0.0f;
#pragma unroll
                for (int k = 0; k < 2; k++) { /* q8w_k's values: d1 = d sc, m1 = dmin m, nibble half k */
                    q8w<OB_TYPE_Q4_K> W;
#pragma unroll
                    for (int i = 0; i < 8; i++) W.w[i] = (int)((q[i] >> (4 * k)) & 0x0f0f0f0fu);
                    W.d1 = dh * (float)((sv >> (12 * k)) & 63u);
                    W.m1 = mh * (float)((sv >> (12 * k + 6)) & 63u);
                    v += W.dot(hx[k], hsc[k]);
                }
                return v;
            });
        } else { /* q4_0 or ternary chunks: codes [d][K][CB], then scales [d][K] */
            constexpr int CB = TERN ? 8 : 16;
            const uint8_t *dd = dn + (size_t)d * CB * a.K;
            ff_shares<FF_PAIR>(part, d, tid, [&](int r) {
                float v = 0.0f;
#pragma unroll
                for (int k = 0; k < FF_KMAX; k++)
                    if (k < a.K) {
                        const size_t rk = (size_t)r * a.K + k;
                        q8w<TERN ? OB_TYPE_TQ2_0 : OB_TYPE_Q4_0> W;
                        ff_chunk_codes(dn + CB * rk, W);
                        W.d = q8_ld_h(dd + 2 * rk);
                        v += W.dot(hx[k], hsc[k]);
                    }
                return v;
            });
        }
    }
    if (a.trace) st[5] = clock64();
    if (FF_MONO) grid_sync_cnt(a.cnt, cnt_tgt + (glob ? (unsigned)nb : 0u)); /* (the second of the launch: nb more arrivals) */
    else grid_sync(a.bar);
    if (a.trace) st[6] = clock64();

    /* rows [r0, r0 + nr): every block's shares of them into shared memory (the gate rows' space,
     * free now: [block][rpb + 1], the padding keeps the reads below off one bank), 16 consecutive
     * rows of a block a load of 64 bytes; then warp w rows r0 + w, + 32, ...; lane l the blocks
     * l, l + 32, ... in that order */
    float *red = (float *)(sm + L.g);
    for (int e = tid; e < nb * rpb; e += FF_THREADS) {
        const int b = e / rpb, k = e % rpb;
        red[b * (rpb + 1) + k] = k < nr ? __ldcg(a.part + (size_t)b * d + r0 + k) : 0.0f;
    }
    __syncthreads();
    for (int k = warp; k < nr; k += FF_THREADS / 32) {
        const int r = r0 + k;
        float p[FF_SUMS];
#pragma unroll
        for (int j = 0; j < FF_SUMS; j++) p[j] = lane + 32 * j < nb ? red[(lane + 32 * j) * (rpb + 1) + k] : 0.0f;
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < FF_SUMS; j++) v += p[j];
        v = gv_warp_sum(v);
        if (lane == 0) a.x[r] = v * a.ds + (FF_XEARLY ? xr[k] : a.x[r]);
    }
    if (a.trace) {
        __syncthreads();
        if (tid == 0) { /* each stretch's cycles; [7]: the block's life before the barrier's end (its start's lateness) */
            long long *t = a.trace + (size_t)c * FF_STAMPS;
            t[0] += st[1] - st[0];
            t[1] += st[2] - st[1];
            t[2] += st[8] - st[2];
            t[3] += gu_max;
            t[4] += st[3] - st[8];
            t[5] += st[4] - st[3];
            t[6] += st[5] - st[4];
            t[7] += st[6] - st[5];
            t[8] += clock64() - st[6];
            t[9] += st[6] - st[0];
            t[10] += waited - st[0];
            if (c == 0) a.trace[(size_t)gridDim.x * FF_STAMPS]++; /* launches, replays included */
        }
    }
}

/* ---- host ------------------------------------------------------------------------------------ */

static long ffn_launches; /* launches of k_ffn, every backend of the process (tests) */
extern "C" long ob_cuda_ffn_launches(void) { return __atomic_load_n(&ffn_launches, __ATOMIC_RELAXED); }
extern "C" int ob_cuda_ffn_mode(const ob_backend *b) { return ((const cu_state *)b->priv)->ffn; }

/* The chunked copy of down (K blocks a chunk), made once per weight at the first call outside a
 * recording (NULL: none, or its memory was refused: the separate path then). */
static const uint8_t *ff_down(cu_state *s, const ob_weight *w, int K) {
    for (int i = 0; i < s->n_ffn_d; i++)
        if (s->ffn_d[i].src == w->data && s->ffn_d[i].K == K) return s->ffn_d[i].dst;
    if (s->cap) return NULL; /* no allocation inside a recording (the engine runs a step eagerly before recording it) */
    if (!cu_grow((void **)&s->ffn_d, s->n_ffn_d, &s->cap_ffn_d, sizeof *s->ffn_d)) return NULL;
    const int d = (int)w->n_out, nsb = (int)(w->n_in / 32);
    uint8_t *dst = NULL;
    const size_t bytes = (size_t)(nsb / K) * ff_chunk(w->type, d, K) + 32; /* (+32: staging reads whole 16-byte words) */
    size_t free_b = 0, total_b = 0;
    /* a copy leaves 256 MiB free at least, else this weight's layers take the separate ops */
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < bytes + ((size_t)256 << 20)) {
        cudaGetLastError();
    } else if (cudaMalloc((void **)&dst, bytes) != cudaSuccess) {
        cudaGetLastError();
        dst = NULL;
    } else {
        const long long n = (long long)d * nsb;
        const unsigned nt = (unsigned)((n + 255) / 256);
#define FF_REPACK_T(T) k_ffn_repack_t<T><<<nt, 256, 0, s->stream>>>((const uint8_t *)w->data, dst, d, nsb, K, w->row_bytes)
        if (w->type == OB_TYPE_TQ2_0) FF_REPACK_T(OB_TYPE_TQ2_0);
        else if (w->type == OB_TYPE_TQ1_0) FF_REPACK_T(OB_TYPE_TQ1_0);
#undef FF_REPACK_T
        else if (w->type == OB_TYPE_Q4_K) k_ffn_repack_k4<<<(unsigned)((n / 2 + 255) / 256), 256, 0, s->stream>>>((const uint8_t *)w->data, dst, d, nsb / 8);
        else if (w->type == OB_TYPE_Q6_K) k_ffn_repack_q6<<<(unsigned)((n / 2 + 255) / 256), 256, 0, s->stream>>>((const uint8_t *)w->data, dst, d, nsb / 8);
        else k_ffn_repack<<<nt, 256, 0, s->stream>>>((const uint8_t *)w->data, dst, d, nsb, K);
        CU_LAUNCHED("ffn down chunks");
        cu_check(cudaStreamSynchronize(s->stream), "ffn down chunks"); /* before any kernel stages them */
    }
    s->ffn_d[s->n_ffn_d++] = {w->data, dst, K};
    return dst;
}

void cu_ffn_forget(cu_state *s, const void *data) {
    for (int i = 0; i < s->n_ffn_d;)
        if (s->ffn_d[i].src == data) {
            if (s->ffn_d[i].dst) cudaFree(s->ffn_d[i].dst);
            s->ffn_d[i] = s->ffn_d[--s->n_ffn_d];
        } else {
            i++;
        }
}

void cu_ffn_free(cu_state *s) {
    for (int i = 0; i < s->n_ffn_d; i++)
        if (s->ffn_d[i].dst) cudaFree(s->ffn_d[i].dst);
    free(s->ffn_d);
    s->ffn_d = NULL;
    s->n_ffn_d = s->cap_ffn_d = 0;
}

/* The form's instance without bulk copies: q6_K down and the ternary forms have none, so their bulk-copy one. */
template <int TG, int TD, int PER> constexpr auto ff_k_threads = k_ffn<TG, TD, PER, TD == OB_TYPE_Q6_K || ff_tern(TD)>;

/* f(PER) with the instance's norm values a thread: per (1 or 2) for the q4 forms, 4 for the
 * ternary ones whatever the row (zeros past it leave the row kernel's sums as they are) */
template <int TG, class F> static void ff_per(int per, F f) {
    if constexpr (ff_tern(TG)) f(std::integral_constant<int, 4>());
    else if (per == 2) f(std::integral_constant<int, 2>());
    else f(std::integral_constant<int, 1>());
}

/* Blocks of smem bytes the GPU holds at once (0: none). Every instance of the form may then take
 * up to the most the GPU allows a block (less 1 KB for their static shared memory), whichever
 * shape another backend of the process planned. */
template <int TG, int TD, int PER> static int ff_resident(cu_state *s, size_t smem) {
    int nb = 0, optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s->dev);
    const int most = optin - 1024;
    if (smem > (size_t)most || cudaFuncSetAttribute(k_ffn<TG, TD, PER, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, most) != cudaSuccess ||
        cudaFuncSetAttribute(ff_k_threads<TG, TD, PER>, cudaFuncAttributeMaxDynamicSharedMemorySize, most) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_ffn<TG, TD, PER, true>, FF_THREADS, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return nb * s->sm_count;
}

/* The kernel's forms, gate/up type and down type: q4_0 throughout, q4_K throughout, q4_K with q6_K
 * down (Q4_K_M's two kinds of layer), tq2_0 or tq1_0 throughout. F(TG, TD) for the form of
 * tg / td; nothing for another. */
#define FF_FORMS(tg, td, F)                                                                     \
    do {                                                                                        \
        if ((tg) == OB_TYPE_Q4_0 && (td) == OB_TYPE_Q4_0) F(OB_TYPE_Q4_0, OB_TYPE_Q4_0);       \
        else if ((tg) == OB_TYPE_Q4_K && (td) == OB_TYPE_Q4_K) F(OB_TYPE_Q4_K, OB_TYPE_Q4_K);  \
        else if ((tg) == OB_TYPE_Q4_K && (td) == OB_TYPE_Q6_K) F(OB_TYPE_Q4_K, OB_TYPE_Q6_K);  \
        else if ((tg) == OB_TYPE_TQ2_0 && (td) == OB_TYPE_TQ2_0) F(OB_TYPE_TQ2_0, OB_TYPE_TQ2_0); \
        else if ((tg) == OB_TYPE_TQ1_0 && (td) == OB_TYPE_TQ1_0) F(OB_TYPE_TQ1_0, OB_TYPE_TQ1_0); \
    } while (0)

/* K (sub-blocks a block) and PER (norm values a thread) for rows of d values and n_ff intermediate
 * ones (rb bytes a gate row) of types tg (gate / up) and td (down), K 0 where they do not fit: rows
 * of at most 2048 values (ternary: 3072, and at most 8192 intermediate ones: the sub-norm's eight
 * values a thread), every block resident at once in at most the shared memory of one block
 * an SM; K 2 only for the K-quants (a chunk's two sub-blocks share their code bytes), and q6_K
 * down's second part within the gate rows' space. Asked of the GPU once per shape and types (every
 * layer of one kind has the same: s->ffn_fit, one a down type kind). */
static void ff_fit(cu_state *s, cu_state::cu_ffn_fit *f, int tg, int td, int64_t d, int64_t n_ff, size_t rb) {
    *f = {tg, td, (int)d, 0, d > FF_THREADS ? 2 : 1, n_ff, rb, 0};
    if (d % 32 || n_ff % 32 || d > (ff_tern(tg) ? 3 : 2) * FF_THREADS || (ff_tern(tg) && n_ff > 8 * FF_THREADS)) return;
    const bool kq = tg == OB_TYPE_Q4_K;
    for (int k = kq ? 2 : 1; k <= FF_KMAX; k++) {
        if (n_ff % (32 * k) || (kq && n_ff % 256)) continue;
        if (td == OB_TYPE_Q6_K && (size_t)FF_Q6_ROW * (d - ff_q6_rows((int)d)) > (size_t)32 * k * rb) continue;
        const size_t m = ff_layout(td, (int)d, k, rb).total;
        int fit = 0;
#define FF_FIT(TG, TD) ff_per<TG>(f->per, [&](auto P) { fit = ff_resident<TG, TD, decltype(P)::value>(s, m); })
        FF_FORMS(tg, td, FF_FIT);
#undef FF_FIT
        const int nb = (int)(n_ff / (32 * k)), rpb = (int)((d + nb - 1) / nb);
        if (nb <= fit && nb <= 32 * FF_SUMS && (size_t)nb * (rpb + 1) * sizeof(float) <= 32 * k * rb) {
            f->k = k;
            f->smem = m;
            return;
        }
    }
}

int cu_ffn_takes(cu_state *s, const ob_weight *g, const ob_weight *u, const ob_weight *dw, int n, int sub, cu_ffn_plan *p) {
    const int64_t d = g->n_in, n_ff = g->n_out;
    const int t = g->type, td = dw->type;
    /* a sub-norm or act_quant_i8: the ternary forms only, and only where the row kernel would take
     * both norms on 1024 threads as this kernel does (rows of 2048 values or more, cuda_ops.cu), so
     * that their codes are the separate ops' bits (act_quant_i8 would turn an ulp into a code) */
    const bool same_rows = s->rows_wide == 2 && d >= 2048 && n_ff >= 2048;
    const bool form = ff_tern(t) ? td == t && s->ffn == 2 && (s->ffn_t & (t == OB_TYPE_TQ1_0 ? 1 : 2)) && (!sub || same_rows)
                                 : !sub && ((t == OB_TYPE_Q4_0 && td == t) || (t == OB_TYPE_Q4_K && s->ffn_k && (td == t || (td == OB_TYPE_Q6_K && s->ffn == 2))));
    if (!s->ffn || n != 1 || !form || u->type != t || u->n_in != d || u->n_out != n_ff || dw->n_in != n_ff || dw->n_out != d) return 0;
    cu_state::cu_ffn_fit *f = &s->ffn_fit[td == OB_TYPE_Q6_K];
    if (f->t != t || f->td != td || f->d != d || f->ff != n_ff || f->rb != g->row_bytes) ff_fit(s, f, t, td, d, n_ff, g->row_bytes);
    if (!f->k) return 0;
    /* bulk copies need 16-byte aligned spans: their sizes are multiples of 16 (576 K bytes a row of
     * 32 values; q4_K 144 a super-block, 39 d a chunk; q6_K 54 times 8 rows), so the bases decide (device allocations, down's copy among them: always) */
    if (s->ffn == 2 && ((uintptr_t)g->data | (uintptr_t)u->data) % 16) return 0;
    *p = {f->k, f->per, f->smem, ff_down(s, dw, f->k), t, td};
    return p->down != NULL;
}

template <int TG, int TD, int PER> static void ff_launch(cu_state *s, const cu_ffn_plan *p, int nb, const ff_args &a, const ff_sub &b) {
    /* (cu_ffn_takes: aligned bases where s->ffn is 2; q6_K down only then) */
    cu_launch_as(s, "ffn", s->ffn_coop, nb, FF_THREADS, p->smem, s->ffn == 2 ? k_ffn<TG, TD, PER, true> : ff_k_threads<TG, TD, PER>, a, b);
    __atomic_add_fetch(&ffn_launches, 1, __ATOMIC_RELAXED);
}

/* 0 (nothing launched) where its scratch is missing: inside a recording, which is then dropped */
int cu_ffn(cu_state *s, const cu_ffn_plan *p, ob_act act, const float *w, float eps, const ob_weight *g, const ob_weight *u,
           const ob_weight *dw, const float *sw, int aq, float *x, float *hb) {
    const int K = p->K, d = (int)g->n_in, nb = (int)(g->n_out / (32 * K));
    unsigned *bar = cu_grid_bar(s);
    unsigned long long *cnt = FF_MONO ? cu_grid_cnt(s, nb) : NULL; /* (NULL only where bar is: nb <= CU_GRID_MAXB, ff_fit) */
    cu_reserve(s, (void **)&s->ffn_part, &s->ffn_part_cap, (size_t)nb * d * sizeof(float));
    if (!bar || (FF_MONO && !cnt) || s->ffn_part_cap < (size_t)nb * d * sizeof(float)) return 0;
    if (s->ffn_trace && !s->ffn_ticks) {
        cu_reserve(s, (void **)&s->ffn_ticks, &s->ffn_ticks_cap, (size_t)(nb + 1) * FF_STAMPS * sizeof(long long));
        if (s->ffn_ticks) cu_check(cudaMemsetAsync(s->ffn_ticks, 0, s->ffn_ticks_cap, s->stream), "ffn trace");
        s->ffn_trace_nb = nb;
    }
    ff_args a = {x, w, eps, (const uint8_t *)g->data, (const uint8_t *)u->data, p->down, g->scale, u->scale, dw->scale,
                 g->row_bytes, d, K, act == OB_ACT_RELU2, s->ffn_part, bar, cnt,
                 s->ffn_trace && s->ffn_trace_nb == nb ? s->ffn_ticks : NULL};
    const ff_sub b = {sw, aq, hb};
#define FF_RUN(TG, TD) ff_per<TG>(p->per, [&](auto P) { ff_launch<TG, TD, decltype(P)::value>(s, p, nb, a, b); })
    FF_FORMS(p->type, p->dtype, FF_RUN);
#undef FF_RUN
    s->ffn_free = s->sm_count > nb ? s->sm_count - nb : 0;
    return 1;
}

void cu_ffn_trace_report(cu_state *s) {
    if (!s->ffn_ticks) return;
    const int nb = s->ffn_trace_nb;
    long long *t = (long long *)malloc((size_t)(nb + 1) * FF_STAMPS * sizeof(long long));
    if (!t || cudaMemcpy(t, s->ffn_ticks, (size_t)(nb + 1) * FF_STAMPS * sizeof(long long), cudaMemcpyDeviceToHost) != cudaSuccess ||
        !t[(size_t)nb * FF_STAMPS]) {
        free(t);
        return;
    }
    const long long n = t[(size_t)nb * FF_STAMPS];
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, s->dev);
    static const char *name[FF_STAMPS] = {"wait + norm codes", "gate/up arrived", "gate/up, warp 0", "gate/up, slowest warp", "sync + GLU codes",
                                          "down arrived", "down shares", "barrier", "sum + add", "life before the barrier's end",
                                          "(of the first: the wait)"};
    fprintf(stderr, "ffn kernel, %lld launches of %d blocks (us each at %.2f GHz, mean / min / max over blocks):", n, nb, khz / 1e6);
    for (int i = 0; i < FF_STAMPS; i++) {
        double sum = 0, lo = 1e30, hi = 0;
        for (int b = 0; b < nb; b++) {
            const double us = (double)t[(size_t)b * FF_STAMPS + i] / n / (khz / 1e3);
            sum += us;
            lo = us < lo ? us : lo;
            hi = us > hi ? us : hi;
        }
        fprintf(stderr, " %s %.2f / %.2f / %.2f;", name[i], sum / nb, lo, hi);
    }
    fprintf(stderr, "\n");
    free(t);
}
