/* cuda_layer.cu — a whole decoder layer of one token in one launch (backend.h's layer_decode).
 *
 * Owns: k_layer, a persistent kernel. Its blocks (256 threads, as many as are resident at once)
 * walk the layer's phases and meet at a grid barrier between two phases:
 *   QKV   RMSNorm of x and its int8 codes, Q, K and V rows
 *   rope  RoPE of Q and K, K and V into the caches (a block per KV head)
 *   attn  the decode attention's spans (cuda_attn.cuh), two per block at a time
 *   wo    codes of the attention output (BitNet: sub-norm, act_quant), wo rows added to x
 *   ffn   RMSNorm of x and its codes, gate and up rows with the GLU
 *   down  codes of the GLU output (BitNet: sub-norm, act_quant), ffn_down rows added to x
 * The end of the launch is the last barrier. A decode step is then a few launches per layer
 * fewer than ten (cuda_gemv.cu's separate ops spent most of a token starting and ending kernels,
 * docs/cuda.md), and no block waits for a launch to see its rows.
 * - Every block computes a phase's input codes itself, into shared memory, with the row ops'
 *   device functions (cuda_rows.cuh) at the same block size as cuda_ops.cu: the same codes.
 * - A matmul phase is cut into items of R consecutive rows (R from the host: about one item per
 *   block, within the staging buffer); the block stages the next item's rows with asynchronous
 *   copies while it computes the current one, and the first item of the next matmul phase before
 *   it waits at the barriers in between, so the weights stream during barriers, RoPE and
 *   attention. Each row's sum has k_gv's layout (cuda_stage.cuh: one warp a short row, four a
 *   long one) and its epilogue k_gv's arithmetic: the same bits as the separate ops.
 * - The barrier: an arrival counter and a generation word; the last block to arrive resets the
 *   counter and moves the generation on. It needs every block resident: the grid is the
 *   occupancy calculator's blocks per SM (at most 2) times the SMs, and a block that waits
 *   longer than about 4 s traps (an error, not a hang).
 * Only int8-path weight types (cuda_q8.cuh, lean4 aside); other layers take the separate ops.
 * Does not own: the separate ops it stands for (cuda_gemv.cu, cuda_ops.cu, cuda_attn.cu).
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_attn.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_stage.cuh"

#define MK_THREADS 256
#define MK_WARPS (MK_THREADS / 32)
#define MK_BUF 40960   /* staged bytes of one item (two buffers) */
#define MK_CODES 16384 /* input codes of a matmul phase: its n_in at most */
#define MK_RMAX 48     /* rows of one weight per item */
#define MK_SMEM (2 * MK_BUF + MK_CODES + MK_CODES / 32 * sizeof(float2))
#define MK_NORM_MAX 8192 /* rows the norm / act_quant codes take (rows_regs: 32 values per thread) */

enum { MK_QKV, MK_WO, MK_FFN, MK_DOWN, MK_NPH };

struct mk_job { /* one weight of a matmul phase; its items are [first, first + items) */
    const uint8_t *W;
    float *y;
    size_t rb;
    int n_out, type, first, items;
    float scale;
};

struct mk_phase {
    mk_job job[3];
    int nj, items, R, ep, n_in, aq;
    const uint8_t *U; /* GV_GLU: the up weight (job 0's type and shape) */
    float uscale;
    const float *src, *norm; /* the input row and its RMSNorm weight (NULL: none) */
};

struct mk_args {
    mk_phase ph[MK_NPH];
    ob_attn_args at;
    size_t krb, vrb, khb, vhb;
    int n_split, relu2;
    float *part;
    int *cnt;
    ob_rope rope;
    float eps;
    unsigned *bar;
    unsigned long long *trace; /* OB_CUDA_LAYER_TRACE=1: block 0's cycles per stretch (MK_STAMPS), then launches */
};

/* ---- matmul phases ---------------------------------------------------------------------- */
struct mk_it { /* a block's item: phase and index in it (ph == MK_NPH: none left) */
    int ph, it;
};

/* The block's first item at index it of phase ph or later. */
__device__ __forceinline__ mk_it mk_from(const mk_args &a, int ph, int it) {
    while (ph < MK_NPH && it >= a.ph[ph].items) {
        ph++;
        it = blockIdx.x;
    }
    return {ph, it};
}

/* Item c's job, first row and row count. */
__device__ __forceinline__ int mk_job_of(const mk_phase &P, int it, int *r0, int *nr) {
    int j = 0;
    while (j + 1 < P.nj && it >= P.job[j + 1].first) j++;
    *r0 = (it - P.job[j].first) * P.R;
    *nr = min(P.R, P.job[j].n_out - *r0);
    return j;
}

/* Issues the copies of item c's rows into buf (gate rows, then up rows at the next span). */
__device__ __forceinline__ void mk_stage(const mk_args &a, mk_it c, uint8_t *buf) {
    const mk_phase &P = a.ph[c.ph];
    int r0, nr;
    const mk_job &J = P.job[mk_job_of(P, c.it, &r0, &nr)];
    gv_stage<MK_THREADS>(buf, J.W + (size_t)r0 * J.rb, (size_t)nr * J.rb);
    if (P.ep == GV_GLU) gv_stage<MK_THREADS>(buf + gv_span((size_t)P.R * J.rb), P.U + (size_t)r0 * J.rb, (size_t)nr * J.rb);
}

/* The phase's input codes into q / xs: the row ops' arithmetic (cuda_ops.cu: 256 threads up to
 * MK_NORM_MAX values; a longer row has no norm, and the codes' statistics are maxima, the same
 * for any block size). Rows up to MK_NORM_MAX in registers: all their loads in flight at once. */
__device__ __forceinline__ void mk_codes(const mk_phase &P, float eps, int8_t *q, float2 *xs) {
    const int dim = P.n_in, norm = P.norm != NULL;
    if (dim <= 8 * MK_THREADS) rows_regs<8>(P.src, P.norm, NULL, dim, eps, norm, P.aq, q, xs, 0, dim);
    else if (dim <= 16 * MK_THREADS) rows_regs<16>(P.src, P.norm, NULL, dim, eps, norm, P.aq, q, xs, 0, dim);
    else if (dim <= 32 * MK_THREADS) rows_regs<32>(P.src, P.norm, NULL, dim, eps, norm, P.aq, q, xs, 0, dim);
    else quant_rows_mem(P.src, 1, dim, q, xs); /* (longer rows: eight loads a thread in flight) */
}

/* The staged rows' sums into red[row][part] (four parts, summed in order by the epilogue): a row
 * of fewer than GV_SPLIT_SB sub-blocks is one warp's (parts 1-3 zero), a longer one four warps'
 * (part w: sub-blocks 32 w + lane, + 128, ...), as k_gv. */
template <int T>
__device__ __forceinline__ void mk_rows(const uint8_t *base0, const uint8_t *base1, size_t rb, int nr, int rows, int n_in, const int8_t *xq,
                                        const float2 *xs, float (*red)[4]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nsb = n_in / 32;
    const bool split = nsb >= GV_SPLIT_SB;
    const int units = split ? 4 * rows : rows;
#pragma unroll 1
    for (int u = warp; u < units; u += MK_WARPS) {
        const int r = split ? u >> 2 : u, w = split ? u & 3 : 0;
        const uint8_t *rp = r < nr ? base0 + (size_t)r * rb : base1 + (size_t)(r - nr) * rb;
        float acc = 0.0f;
        for (int sb = (split ? 32 * w : 0) + lane; sb < nsb; sb += split ? 128 : 32) {
            q8w<T> W;
            q8_load(W, rp, sb, rb);
            const int4 *xp = (const int4 *)(xq + 32 * (size_t)sb);
            const int4 p = xp[0], p2 = xp[1];
            const int xw[8] = {p.x, p.y, p.z, p.w, p2.x, p2.y, p2.z, p2.w};
            acc += W.dot(xw, xs[sb]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) {
            red[r][w] = acc;
            if (!split) red[r][1] = red[r][2] = red[r][3] = 0.0f;
        }
    }
}

#define MK_TYPES(type, F)                                                                        \
    switch (type) {                                                                              \
    case OB_TYPE_Q4_0: F(OB_TYPE_Q4_0); break;     case OB_TYPE_Q4_1: F(OB_TYPE_Q4_1); break;     \
    case OB_TYPE_Q5_0: F(OB_TYPE_Q5_0); break;     case OB_TYPE_Q5_1: F(OB_TYPE_Q5_1); break;     \
    case OB_TYPE_Q8_0: F(OB_TYPE_Q8_0); break;     case OB_TYPE_Q2_K: F(OB_TYPE_Q2_K); break;     \
    case OB_TYPE_Q3_K: F(OB_TYPE_Q3_K); break;     case OB_TYPE_Q4_K: F(OB_TYPE_Q4_K); break;     \
    case OB_TYPE_Q5_K: F(OB_TYPE_Q5_K); break;     case OB_TYPE_Q6_K: F(OB_TYPE_Q6_K); break;     \
    case OB_TYPE_IQ4_NL: F(OB_TYPE_IQ4_NL); break; case OB_TYPE_IQ4_XS: F(OB_TYPE_IQ4_XS); break; \
    case OB_TYPE_TQ1_0: F(OB_TYPE_TQ1_0); break;   case OB_TYPE_TQ2_0: F(OB_TYPE_TQ2_0); break;   \
    case OB_TYPE_I2_S: F(OB_TYPE_I2_S); break;     default: break;                                \
    }

static bool mk_type(int t) { return cu_q8_type(t) && t != OB_TYPE_LEAN4; }

/* One item: the staged rows' sums, then k_gv's epilogue (scale; store, add or GLU). */
__device__ __forceinline__ void mk_item(const mk_args &a, mk_it c, const uint8_t *buf, const int8_t *xq, const float2 *xs,
                                        float (*red)[4]) {
    const mk_phase &P = a.ph[c.ph];
    int r0, nr;
    const mk_job &J = P.job[mk_job_of(P, c.it, &r0, &nr)];
    const uint8_t *src0 = J.W + (size_t)r0 * J.rb;
    const uint8_t *base0 = buf + ((uintptr_t)src0 & 15), *base1 = base0;
    if (P.ep == GV_GLU) base1 = buf + gv_span((size_t)P.R * J.rb) + ((uintptr_t)(P.U + (size_t)r0 * J.rb) & 15);
    const int rows = P.ep == GV_GLU ? 2 * nr : nr;
#define MK_ROWS(T) mk_rows<T>(base0, base1, J.rb, nr, rows, P.n_in, xq, xs, red)
    MK_TYPES(J.type, MK_ROWS)
#undef MK_ROWS
    __syncthreads();
    for (int k = threadIdx.x; k < nr; k += MK_THREADS) {
        float v = 0.0f, u = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) v += red[k][w];
        v *= J.scale;
        float *yp = J.y + r0 + k;
        if (P.ep == GV_GLU) {
#pragma unroll
            for (int w = 0; w < 4; w++) u += red[nr + k][w];
            u *= P.uscale;
        }
        gv_out(yp, P.ep, a.relu2, v, u);
    }
    __syncthreads(); /* red and the buffer are free again */
}

/* ---- RoPE and the caches, attention ------------------------------------------------------ */
/* The last n_head_kv blocks (g counted from the end; block 0 times the stretches): KV head g's query heads and K head rotated (angles cs: rope_angles), K and
 * V into the caches (k_rope_kv). */
__device__ __forceinline__ void mk_rope_kv(const mk_args &a, const float *cs) {
    const ob_attn_args &t = a.at;
    const int g = gridDim.x - 1 - blockIdx.x, hd = t.head_dim, gq = t.n_head / t.n_head_kv;
    if (g >= t.n_head_kv) return;
    float *q = (float *)t.q, *k = a.ph[MK_QKV].job[1].y;
    const float *v = a.ph[MK_QKV].job[2].y;
    rope_row(q + (size_t)g * gq * hd, gq, hd, cs, a.rope);
    rope_row(k + (size_t)g * hd, 1, hd, cs, a.rope);
    __syncthreads();
    const size_t slot = (size_t)t.seq[0] * t.n_ctx + t.pos[0];
    for (int e = g * hd + threadIdx.x; e < (g + 1) * hd; e += MK_THREADS) {
        kv_store((uint8_t *)t.k + slot * a.krb, t.type_k, k, e);
        kv_store((uint8_t *)t.v + slot * a.vrb, t.type_v, v, e);
    }
}

/* The token's (head, span) pairs, two groups of four warps a block. */
__device__ __forceinline__ void mk_attention(const mk_args &a, at_smem *sh) {
    const ob_attn_args &t = a.at;
    const int ns = attn_spans(t, a.n_split, 0), grp = threadIdx.x >> 7;
    auto sync = [grp] { asm volatile("bar.sync %0, 128;" ::"r"(grp + 1) : "memory"); };
    for (int it = 2 * blockIdx.x + grp; it < t.n_head * ns; it += 2 * gridDim.x) {
        attn_span(t, a.krb, a.vrb, a.khb, a.vhb, a.n_split, a.part, a.cnt, it / ns, 0, it % ns, sh[grp], sync, at_rope{}, nullptr);
        sync(); /* the group's merge buffer is free again */
    }
}

#define MK_STAMPS 16
__global__ void __launch_bounds__(MK_THREADS, 2) k_layer(const mk_args a) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ float red[2 * MK_RMAX][4];
    __shared__ float cs[AT_MAXK * 32]; /* RoPE's cos and sin of this token */
    uint8_t *buf = smem;
    int8_t *xq = (int8_t *)(smem + 2 * MK_BUF);
    float2 *xs = (float2 *)(smem + 2 * MK_BUF + MK_CODES);
    const bool tr = a.trace && blockIdx.x == 0 && threadIdx.x == 0;
    long long t_last = clock64();
    int si = 0;
    auto stamp = [&] {
        if (tr) {
            const long long t = clock64();
            a.trace[si] += (unsigned long long)(t - t_last);
            t_last = t;
        }
        si++;
    };
    int b = 0;
    mk_it cur = mk_from(a, 0, blockIdx.x);
    if (cur.ph < MK_NPH) mk_stage(a, cur, buf); /* weights and angles: before the previous kernel has ended */
    __pipeline_commit();
    if ((int)(gridDim.x - 1 - blockIdx.x) < a.at.n_head_kv) rope_angles(cs, a.at.pos[0], a.rope); /* positions: copied before the previous kernel */
    cu_dep();
    stamp();
    for (int ph = 0; ph < MK_NPH; ph++) {
        if (ph == MK_WO) { /* the codes' space holds the attention's merge buffers */
            grid_sync(a.bar);
            stamp();
            mk_rope_kv(a, cs);
            stamp();
            grid_sync(a.bar);
            stamp();
            mk_attention(a, (at_smem *)xq);
            stamp();
        }
        if (ph > 0) {
            grid_sync(a.bar);
            stamp();
        }
        mk_codes(a.ph[ph], a.eps, xq, xs);
        __syncthreads();
        stamp();
        while (cur.ph == ph) {
            const mk_it nxt = mk_from(a, cur.ph, cur.it + gridDim.x);
            if (nxt.ph < MK_NPH) mk_stage(a, nxt, buf + (b ^ 1) * MK_BUF);
            __pipeline_commit();
            __pipeline_wait_prior(1);
            __syncthreads();
            mk_item(a, cur, buf + b * MK_BUF, xq, xs, red);
            b ^= 1;
            cur = nxt;
        }
        stamp();
    }
    if (tr) a.trace[MK_STAMPS]++;
}

/* ---- host ---------------------------------------------------------------------------------- */
/* Rows per item for rows in all of up to rb bytes each (weights: 2 for GLU): about one item per
 * block, or two, three, ... until they fit the buffer; 0 when one row does not. */
static int mk_pick_rows(long rows, size_t rb, int weights, int grid) {
    for (long k = 1;; k++) {
        const long R = (rows + k * grid - 1) / (k * grid);
        if (R <= MK_RMAX && (size_t)weights * gv_span((size_t)R * rb) <= MK_BUF) return (int)R;
        if (R <= 1) return 0;
    }
}

static mk_job mk_job_for(const ob_weight *w, float *y) {
    mk_job j = {(const uint8_t *)w->data, y, w->row_bytes, (int)w->n_out, w->type, 0, 0, w->scale};
    return j;
}

/* A matmul phase of nj weights ws (GLU: gate and up) on the input src (RMSNorm weight norm or NULL). */
static int mk_phase_for(mk_phase *P, int grid, int ep, const ob_weight *const *ws, float *const *ys, int nj, const float *src,
                        const float *norm, int aq) {
    P->nj = nj;
    P->ep = ep;
    P->n_in = (int)ws[0]->n_in;
    P->src = src;
    P->norm = norm;
    P->aq = aq;
    long rows = 0;
    size_t rb = 0;
    for (int j = 0; j < nj; j++) {
        if (!mk_type(ws[j]->type) || ws[j]->n_in != ws[0]->n_in) return 0;
        P->job[j] = mk_job_for(ws[j], ys[j]);
        rows += ws[j]->n_out;
        if (ws[j]->row_bytes > rb) rb = ws[j]->row_bytes;
    }
    if (ep == GV_GLU) {
        const ob_weight *u = ws[1];
        if (u->type != ws[0]->type || u->n_out != ws[0]->n_out) return 0;
        P->nj = 1;
        P->U = (const uint8_t *)u->data;
        P->uscale = u->scale;
        rows = ws[0]->n_out;
    }
    P->R = mk_pick_rows(rows, rb, ep == GV_GLU ? 2 : 1, grid);
    if (!P->R || P->n_in > MK_CODES || P->n_in % 32 || ((norm || aq) && P->n_in > MK_NORM_MAX)) return 0;
    P->items = 0;
    for (int j = 0; j < P->nj; j++) {
        P->job[j].first = P->items;
        P->job[j].items = (P->job[j].n_out + P->R - 1) / P->R;
        P->items += P->job[j].items;
    }
    return 1;
}

/* The kernel's arguments for l, or 0 when the layer does not suit it. */
static int mk_args_for(cu_state *s, const ob_layer_args *l, mk_args *a) {
    const ob_attn_args &t = l->attn;
    if (t.n != 1 || t.head_dim > AT_MAXK * 32 || t.n_head % t.n_head_kv || l->ffn_gate->n_in != l->wq->n_in) return 0;
    if (!s->layer_grid) {
        cu_check(cudaFuncSetAttribute(k_layer, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MK_SMEM), "layer kernel (shared memory)");
        int occ = 0;
        cu_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_layer, MK_THREADS, MK_SMEM), "layer kernel (occupancy)");
        s->layer_grid = (occ > 2 ? 2 : occ) * s->sm_count; /* (1 a SM: 0.70-0.88x of 2, docs/cuda.md) */
        if (s->layer_grid <= 0) s->layer_grid = -1;
    }
    const int grid = s->layer_grid;
    if (grid <= 0) return 0;
    const int aq = l->act_quant != 0;
    const ob_weight *qkv[3] = {l->wq, l->wk, l->wv}, *wo[1] = {l->wo}, *gu[2] = {l->ffn_gate, l->ffn_up}, *dn[1] = {l->ffn_down};
    float *yqkv[3] = {l->q, l->k, l->v}, *yx[1] = {l->x}, *yg[1] = {l->gate};
    if (!mk_phase_for(&a->ph[MK_QKV], grid, GV_STORE, qkv, yqkv, 3, l->x, l->attn_norm, aq) ||
        !mk_phase_for(&a->ph[MK_WO], grid, GV_ADD, wo, yx, 1, l->att, l->attn_sub_norm, aq) ||
        !mk_phase_for(&a->ph[MK_FFN], grid, GV_GLU, gu, yg, 2, l->x, l->ffn_norm, aq) ||
        !mk_phase_for(&a->ph[MK_DOWN], grid, GV_ADD, dn, yx, 1, l->gate, l->ffn_sub_norm, aq))
        return 0;
    const int kvd = t.n_head_kv * t.head_dim;
    a->at = t;
    a->krb = ob_type_row_size(t.type_k, kvd);
    a->vrb = ob_type_row_size(t.type_v, kvd);
    a->khb = ob_type_row_size(t.type_k, t.head_dim);
    a->vhb = ob_type_row_size(t.type_v, t.head_dim);
    a->relu2 = l->act == OB_ACT_RELU2;
    a->rope = *l->rope;
    a->eps = l->eps;
    return 1;
}

int cu_layer(cu_state *s, const ob_layer_args *l) {
    mk_args a = {};
    if (!s->layer || !mk_args_for(s, l, &a)) return 0;
    const int slot = cu_prof_begin(s);
    a.n_split = cu_attn_splits(s, &l->attn);
    a.part = s->attn_part;
    a.cnt = s->attn_cnt;
    a.bar = cu_grid_bar(s); /* (inside a recording: none yet, the recording is dropped) */
    if (s->layer_trace && !s->layer_ticks) {
        cu_reserve(s, (void **)&s->layer_ticks, &s->layer_ticks_cap, (MK_STAMPS + 1) * sizeof(unsigned long long));
        if (s->layer_ticks) cu_check(cudaMemsetAsync(s->layer_ticks, 0, (MK_STAMPS + 1) * sizeof(unsigned long long), s->stream), "layer trace");
    }
    a.trace = s->layer_trace ? s->layer_ticks : NULL;
    cu_launch(s, "layer", (unsigned)s->layer_grid, MK_THREADS, MK_SMEM, k_layer, a);
    if (slot >= 0) { /* profile bytes: the layer's weights */
        double bytes = 0;
        const ob_weight *ws[7] = {l->wq, l->wk, l->wv, l->wo, l->ffn_gate, l->ffn_up, l->ffn_down};
        for (int i = 0; i < 7; i++) bytes += (double)ws[i]->row_bytes * ws[i]->n_out;
        cu_prof_end(s, slot, "layer n=1", bytes);
    }
    return 1;
}

void cu_layer_trace_report(cu_state *s) {
    if (!s->layer_ticks) return;
    unsigned long long t[MK_STAMPS + 1];
    if (cudaMemcpy(t, s->layer_ticks, sizeof t, cudaMemcpyDeviceToHost) != cudaSuccess || !t[MK_STAMPS]) return;
    static const char *name[MK_STAMPS] = {"wait previous", "qkv codes", "qkv rows", "barrier", "rope+kv", "barrier", "attention",
                                          "barrier", "wo codes", "wo rows", "barrier", "ffn codes", "ffn rows", "barrier",
                                          "down codes", "down rows"};
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, s->dev);
    double total = 0;
    fprintf(stderr, "layer kernel, block 0, %llu launches (us each at %.2f GHz):", t[MK_STAMPS], khz / 1e6);
    for (int i = 0; i < MK_STAMPS; i++) {
        const double us = (double)t[i] / t[MK_STAMPS] / (khz / 1e3);
        total += us;
        fprintf(stderr, " %s %.2f;", name[i], us);
    }
    fprintf(stderr, " total %.2f\n", total);
}
