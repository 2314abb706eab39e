/* cuda_attn.cu — causal grouped-query attention over the KV cache, split over the sequence.
 *
 * Owns: flash-decoding. One block of 4 warps takes one (token, query head) and one span of
 * cache positions; each warp walks every 4th position of the span, computes the score with
 * its lanes spread over the head dimensions (lane d, d + 32, ...), and keeps an online
 * softmax (running max, running sum, weighted V sum) in registers. The warps' states are
 * merged in shared memory; with one span the block writes the output, otherwise each span's
 * (max, sum, vector) goes to scratch and the last span of the (token, head) to finish (an atomic
 * counter per pair) merges them: one launch. The number of spans is chosen from the shapes so
 * that short batches (decode) cover the longest context with short spans, while long prompts
 * (many tokens, each its own block) use one span; each token then cuts its own positions into
 * that many spans (at least AT_SPAN_MIN long) on the device. Cache rows of f32, f16 or q8_0 are
 * read directly (q8_0: lane d reads byte d % 32 of block d / 32). For decode steps whose tokens
 * are of distinct sequences the same kernel also does rope_kv's work (cu_rope_attention,
 * cuda_attn.cuh's at_rope): one launch less per layer. For decode-sized batches the kernel also
 * writes its output's int8 codes for `wo` (cuda_attn.cuh's at_codes; OB_CUDA_ATTN_CODES=0 turns it
 * off): no quantizer launch between attention and `wo`.
 * Prompts (unless OB_CUDA_ATTN_TILES=0): f16 caches with head size 64 or 128 go to the tensor
 * cores (cuda_attn_mma.cu) unless OB_CUDA_ATTN_TILES=f32; the rest take k_attn_blk: 64
 * consecutive tokens of one sequence per block, the cache walked in tiles of 64 positions held in
 * shared memory, so each K/V row is read once per 64 queries instead of once per query, with 4x4
 * register tiles of scores and outputs per thread, float32 like the reference (H200,
 * Llama-3.2-1B shape: pp4096 5.6k -> 41.9k tok/s against the split kernel; the tensor-core
 * kernel 65.9k; docs/cuda.md).
 * Does not own: writing the cache (cuda_ops.cu).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_attn.cuh"
#include "backend/cuda/cuda_int.h"

template <int MK, int KT, bool QR>
__global__ void __launch_bounds__(AT_WARPS * 32) k_attn(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb, int n_split,
                                                          float *part, int *cnt, at_rope ro, at_codes cd) {
    __shared__ at_smem sh;
    __shared__ at_rope_smem rs;
    /* positions come from a copy ordered before the previous kernel: the blocks past a token's
     * spans end and the angles (double precision, as the reference) are computed while that
     * kernel ends */
    if (ro.on && (int)blockIdx.z >= attn_spans(a, n_split, blockIdx.y)) return;
    if (ro.on) rope_angles(rs.cs, a.pos[blockIdx.y], ro.r);
    if (QR) __syncthreads(); /* the angles, for lanes that read them without the q barrier (attn_span) */
    cu_dep();
    attn_span<MK, KT, QR>(a, krb, vrb, khb, vhb, n_split, part, cnt, blockIdx.x, blockIdx.y, blockIdx.z, sh, [] { __syncthreads(); }, ro, &rs, cd);
}

/* ---- prompts: query tiles against key tiles in shared memory, register-blocked ------------
 * For a batch that is one sequence's consecutive positions (a prompt chunk) of at least BT_Q
 * tokens, head size up to BT_MAXD that the tensor-core kernel does not take. One block of 256 threads per (query head, 64 consecutive tokens of one sequence); the cache is
 * walked in tiles of 64 positions converted to float in shared memory. Thread (ty, tx) = (t / 16,
 * t % 16) scores queries ty + 16 i against keys tx + 16 j (i, j < 4) with float4 loads along the
 * head dimensions (16 products per 8 loads), keeps those four queries' online softmax (a query's
 * 64 scores are spread over the 16 lanes of a half-warp: shuffles), writes its probabilities to
 * shared memory, then accumulates the same four queries' outputs over dimensions 4 (tx + 16 m) ..
 * + 3 (m < 2) from float4 rows of V. Float32 throughout, like the reference. */
#define BT_Q CU_ATTN_RUN_MIN
#define BT_K 64
#define BT_THREADS 256
#define BT_MAXD 128

__device__ __forceinline__ float dot4(float4 a, float4 b, float s) { return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, s)))); }

/* Eight halves of one 16-byte word to floats at dst (16-byte aligned). */
__device__ __forceinline__ void bt_h8(float *dst, uint4 w) {
    const __half2 *h = (const __half2 *)&w;
    const float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]), f2 = __half22float2(h[2]), f3 = __half22float2(h[3]);
    *(float4 *)dst = make_float4(f0.x, f0.y, f1.x, f1.y);
    *(float4 *)(dst + 4) = make_float4(f2.x, f2.y, f3.x, f3.y);
}

/* The K and V rows of positions k0 .. k0 + BT_K - 1 (zeros past p_last) into Ks [BT_K][ld] and
 * Vs [BT_K][hd] as floats. F16V (f16 caches, hd a multiple of 8): 16-byte loads, all of a
 * thread's issued before any is converted (pp4096 of Llama-3.2-1B 28.2k -> 41.9k tok/s against
 * one 2-byte load per element); else element by element (kv_elem). */
template <bool F16V>
__device__ __forceinline__ void bt_tile(const ob_attn_args &a, const uint8_t *kb, const uint8_t *vb, size_t krb, size_t vrb, int k0, int p_last,
                                        float *Ks, float *Vs, int ld) {
    const int hd = a.head_dim, t = threadIdx.x;
    if constexpr (F16V) {
        constexpr int NW = BT_K * BT_MAXD / 8 / BT_THREADS; /* 16-byte words per thread and cache, at most */
        const int hv = hd / 8;
        uint4 kw[NW], vw[NW];
#pragma unroll
        for (int u = 0; u < NW; u++) {
            const int e = t + u * BT_THREADS, r = e / hv, c = e % hv, p = k0 + r;
            kw[u] = vw[u] = make_uint4(0, 0, 0, 0);
            if (e < BT_K * hv && p <= p_last) {
                kw[u] = *(const uint4 *)(kb + (size_t)p * krb + 16 * c);
                vw[u] = *(const uint4 *)(vb + (size_t)p * vrb + 16 * c);
            }
        }
#pragma unroll
        for (int u = 0; u < NW; u++) {
            const int e = t + u * BT_THREADS, r = e / hv, c = e % hv;
            if (e < BT_K * hv) {
                bt_h8(Ks + r * ld + 8 * c, kw[u]);
                bt_h8(Vs + r * hd + 8 * c, vw[u]);
            }
        }
    } else {
        for (int e = t; e < BT_K * hd; e += BT_THREADS) {
            const int r = e / hd, d = e % hd, p = k0 + r;
            Ks[r * ld + d] = p <= p_last ? kv_elem(kb + (size_t)p * krb, a.type_k, d) : 0.0f;
            Vs[r * hd + d] = p <= p_last ? kv_elem(vb + (size_t)p * vrb, a.type_v, d) : 0.0f;
        }
    }
}

template <bool F16V>
__global__ void __launch_bounds__(BT_THREADS) k_attn_blk(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb) {
    extern __shared__ float4 bt4[];
    cu_dep();
    const int hd = a.head_dim, ld = hd + 4, h = blockIdx.x, i0 = blockIdx.y * BT_Q, nq = min(BT_Q, a.n - i0);
    const int kh = h / (a.n_head / a.n_head_kv), t = threadIdx.x, tx = t & 15, ty = t >> 4;
    float *Qs = (float *)bt4, *Ks = Qs + BT_Q * ld, *Vs = Ks + BT_K * ld, *Ps = Vs + BT_K * hd; /* Ps: [BT_Q][BT_K + 4] */
    const int p_first = a.pos[i0], p_last = p_first + nq - 1;
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i0] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i0] * a.n_ctx * vrb + (size_t)kh * vhb;
    for (int e = t; e < BT_Q * hd; e += BT_THREADS) {
        const int r = e / hd, d = e % hd;
        Qs[r * ld + d] = r < nq ? a.q[((size_t)(i0 + r) * a.n_head + h) * hd + d] * a.scale : 0.0f;
    }
    float o[4][8], m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; c++) o[i][c] = 0.0f;
    }
    for (int k0 = 0; k0 <= p_last; k0 += BT_K) {
        __syncthreads(); /* the previous tile's readers are done (and Qs is written) */
        bt_tile<F16V>(a, kb, vb, krb, vrb, k0, p_last, Ks, Vs, ld);
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
        for (int d = 0; d < hd; d += 4) {
            float4 qv[4], kv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) qv[i] = *(const float4 *)&Qs[(ty + 16 * i) * ld + d];
#pragma unroll
            for (int j = 0; j < 4; j++) kv[j] = *(const float4 *)&Ks[(tx + 16 * j) * ld + d];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = dot4(qv[i], kv[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int pq = p_first + ty + 16 * i;
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (k0 + tx + 16 * j > pq) s[i][j] = -INFINITY; /* after the query's own position */
                tmax = fmaxf(tmax, s[i][j]);
            }
#pragma unroll
            for (int x = 1; x < 16; x <<= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, x));
            const float mn = fmaxf(m[i], tmax); /* finite: position 0 is in every query's first tile */
            const float corr = __expf(m[i] - mn);
            float psum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float p = s[i][j] == -INFINITY ? 0.0f : __expf(s[i][j] - mn);
                Ps[(ty + 16 * i) * (BT_K + 4) + tx + 16 * j] = p;
                psum += p;
            }
#pragma unroll
            for (int x = 1; x < 16; x <<= 1) psum += __shfl_xor_sync(0xffffffffu, psum, x);
            l[i] = l[i] * corr + psum;
            m[i] = mn;
#pragma unroll
            for (int c = 0; c < 8; c++) o[i][c] *= corr;
        }
        __syncthreads(); /* every probability of the tile is in Ps */
        for (int k = 0; k < BT_K; k += 4) {
            float4 pv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) pv[i] = *(const float4 *)&Ps[(ty + 16 * i) * (BT_K + 4) + k];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int mm = 0; mm < 2; mm++) {
                    const int d = 4 * (tx + 16 * mm);
                    if (d >= hd) continue;
                    const float4 v = *(const float4 *)&Vs[(k + kk) * hd + d];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float p = kk == 0 ? pv[i].x : kk == 1 ? pv[i].y : kk == 2 ? pv[i].z : pv[i].w;
                        o[i][4 * mm + 0] = fmaf(p, v.x, o[i][4 * mm + 0]);
                        o[i][4 * mm + 1] = fmaf(p, v.y, o[i][4 * mm + 1]);
                        o[i][4 * mm + 2] = fmaf(p, v.z, o[i][4 * mm + 2]);
                        o[i][4 * mm + 3] = fmaf(p, v.w, o[i][4 * mm + 3]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
        if (r >= nq) continue;
        float *out = a.out + ((size_t)(i0 + r) * a.n_head + h) * hd;
        const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
#pragma unroll
        for (int mm = 0; mm < 2; mm++) {
            const int d = 4 * (tx + 16 * mm);
            if (d < hd) *(float4 *)&out[d] = make_float4(o[i][4 * mm] * inv, o[i][4 * mm + 1] * inv, o[i][4 * mm + 2] * inv, o[i][4 * mm + 3] * inv);
        }
    }
}

/* Shared memory of k_attn_blk for head size hd. */
static size_t bt_smem(int hd) { return sizeof(float) * ((size_t)(BT_Q + BT_K) * (hd + 4) + (size_t)BT_K * hd + (size_t)BT_Q * (BT_K + 4)); }

void cu_attention_tiles_init(cu_state *s) {
    cu_check(cudaFuncSetAttribute(k_attn_blk<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bt_smem(BT_MAXD)),
             "attention tiles (shared memory)");
    cu_check(cudaFuncSetAttribute(k_attn_blk<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bt_smem(BT_MAXD)),
             "attention tiles (shared memory)");
    cu_attention_mma_init(s);
}

int cu_attention_tiles(cu_state *s, const ob_attn_args *a, const int32_t *host_pos, const int32_t *host_seq) {
    if (!s->attn_tile || a->n < BT_Q || a->head_dim > BT_MAXD || a->head_dim % 4) return 0;
    for (int i = 1; i < a->n; i++) /* one sequence, consecutive positions: a prompt chunk */
        if (host_seq[i] != host_seq[0] || host_pos[i] != host_pos[0] + i) return 0;
    const int kv_dim = a->n_head_kv * a->head_dim;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    if (s->attn_tile == 2 && cu_attention_mma(s, a, krb, vrb, khb, vhb)) return 1;
    dim3 grid((unsigned)a->n_head, (unsigned)((a->n + BT_Q - 1) / BT_Q));
    if (a->type_k == OB_TYPE_F16 && a->type_v == OB_TYPE_F16 && a->head_dim % 8 == 0)
        cu_launch(s, "attention (tiles)", grid, BT_THREADS, bt_smem(a->head_dim), k_attn_blk<true>, *a, krb, vrb, khb, vhb);
    else
        cu_launch(s, "attention (tiles)", grid, BT_THREADS, bt_smem(a->head_dim), k_attn_blk<false>, *a, krb, vrb, khb, vhb);
    return 1;
}

/* The spans a token of the decode attention is cut into at most, for a's shapes; reserves the
 * spans' scratch and counters (shared with the whole-layer kernel, cuda_layer.cu). */
int cu_attn_splits(cu_state *s, const ob_attn_args *a) {
    /* spans: fixed by the shapes alone (not by the positions), so that a recorded decode step can
     * be replayed as the context grows: for short batches (decode) enough for the longest context
     * (blocks of a token's unused spans end at once), capped at 16 blocks per SM; for long prompts
     * one span (the tokens' own blocks fill the GPU; OB_CUDA_ATTN_SPLIT=K: from K blocks an SM, 2
     * by default, for an A/B of batched decode, whose blocks walk up to the whole context each) */
    const int blocks = a->n * a->n_head;
    int n_split = blocks >= s->attn_split * s->sm_count ? 1 : (16 * s->sm_count + blocks - 1) / blocks;
    const int max_split = (a->n_ctx + AT_SPAN_MIN - 1) / AT_SPAN_MIN;
    if (n_split > max_split) n_split = max_split;
    if (n_split > AT_SPLIT_MAX) n_split = AT_SPLIT_MAX;
    if (n_split < 1) n_split = 1;
    if (n_split > 1) cu_attn_scratch(s, (size_t)blocks * n_split * (a->head_dim + 2), (size_t)blocks);
    return n_split;
}

void cu_attn_scratch(cu_state *s, size_t part_floats, size_t counters) {
    cu_reserve(s, (void **)&s->attn_part, &s->attn_cap, part_floats * sizeof(float));
    const size_t had = s->attn_cnt_cap;
    cu_reserve(s, (void **)&s->attn_cnt, &s->attn_cnt_cap, counters * sizeof(int));
    if (s->attn_cnt_cap != had) /* a new counter array: zero once, the merging blocks reset their own */
        cu_check(cudaMemsetAsync(s->attn_cnt, 0, s->attn_cnt_cap, s->stream), "attention counters");
}

void cu_attn_codes(cu_state *s, const ob_attn_args *a, int8_t **q, float2 **xs) {
    const int dim = a->n_head * a->head_dim;
    *q = NULL;
    *xs = NULL;
    if (s->attn_codes && cu_reads_codes(s, a->out_to, a->n) && a->head_dim % 32 == 0 && dim <= CU_QROW_MAX)
        cu_xq_bufs(s, a->n, dim, q, xs);
}

/* Launches the split kernel. With s->attn_codes, when the output goes as it is to a matmul whose
 * type reads int8 codes of it (out_to: not BitNet's, whose sub-norm makes codes of its own, which
 * cost 1.4% of tg128 on BitNet-2B TQ2_0 when made there too; not f16 / bf16 / f32, -0.5% on the
 * 1B F16; not lean4, which quantizes its rotated input; docs/bench.md run 11), for batches the
 * int8 decode matmul takes and heads of whole 32-element blocks, it also makes the output's codes
 * (at_codes) in the codes buffer and tags them (cu_xq_tag), so that `wo` needs no quantizer. */
static void attn_launch(cu_state *s, const ob_attn_args *a, const at_rope &ro) {
    const int kv_dim = a->n_head_kv * a->head_dim, dim = a->n_head * a->head_dim;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    const int n_split = cu_attn_splits(s, a);
    at_codes cd = {};
    cu_attn_codes(s, a, &cd.q, &cd.xs);
    dim3 grid((unsigned)a->n_head, (unsigned)a->n, (unsigned)n_split);
    const char *what = ro.on ? "rope+attention" : "attention";
#define AT_LAUNCH(MK, KT, QR) cu_launch(s, what, grid, AT_WARPS * 32, 0, k_attn<MK, KT, QR>, *a, krb, vrb, khb, vhb, n_split, s->attn_part, s->attn_cnt, ro, cd)
    /* For f16 caches (the default) the kernel instance for the head size with the cache type
     * fixed, about half the machine code (57 KB against 108 KB for head size 64; run 11's Nsight
     * Compute samples of the 1B's decode attention on the general instance: 24% of the warps'
     * stalls waited for instructions to arrive), with q loaded and rotated in registers (attn_span's
     * QR) where the RoPE pairs allow it (19% of those samples were at the barrier after the q
     * loads). Run 12, tg128 on the H200 against the general instance (OB_CUDA_ATTN_MK=0): Llama-1B
     * Q4_0 +6.0%, Q4_K_M +7.0%, F16 +1.4%, BitNet I2_S +1.2%; without QR (=1) +5.5%, +7.1%, +0.8%,
     * +0.6% (docs/bench.md). */
    const int hd = a->head_dim, half = ro.r.n_rot / 2;
    const bool qr = s->attn_mk == 2 && ro.on && (ro.r.style != OB_ROPE_NEOX || half % 32 == 0);
    if (!s->attn_mk || a->type_k != OB_TYPE_F16 || a->type_v != OB_TYPE_F16 || hd > 128) AT_LAUNCH(AT_MAXK, -1, false);
    else if (hd > 64) qr ? AT_LAUNCH(4, OB_TYPE_F16, true) : AT_LAUNCH(4, OB_TYPE_F16, false);
    else if (hd > 32) qr ? AT_LAUNCH(2, OB_TYPE_F16, true) : AT_LAUNCH(2, OB_TYPE_F16, false);
    else qr ? AT_LAUNCH(1, OB_TYPE_F16, true) : AT_LAUNCH(1, OB_TYPE_F16, false);
#undef AT_LAUNCH
    cu_xq_tag(s, cd.q ? a->out : NULL, a->n, dim);
}

void cu_attention(cu_state *s, const ob_attn_args *a) {
    if (a->head_dim > AT_MAXK * 32) {
        fprintf(stderr, "cuda backend: attention head size %d exceeds %d\n", a->head_dim, AT_MAXK * 32);
        abort();
    }
    if (cu_attention_gqa(s, a)) return;
    attn_launch(s, a, at_rope{});
}

int cu_rope_attention_ok(const cu_state *s, const ob_attn_args *a, const ob_rope *r) {
    const int q8 = a->type_k == OB_TYPE_Q8_0 || a->type_v == OB_TYPE_Q8_0;
    if (s->rope_attn && cu_rope_attention_gqa_ok(s, a, r)) return 1; /* the grouped kernel's fused form */
    return s->rope_attn && a->n >= 1 && a->n <= CU_GEMV_MAX && a->head_dim <= AT_MAXK * 32 && !(q8 && a->head_dim % 32) &&
           r->n_rot >= 0 && r->n_rot <= a->head_dim && !cu_attention_gqa_ok(s, a); /* (that kernel after rope_kv) */
}

void cu_rope_attention(cu_state *s, const ob_attn_args *a, const float *k, const float *v, const ob_rope *r) {
    if (cu_rope_attention_gqa(s, a, k, v, r)) return;
    const at_rope ro = {k, v, *r, 1};
    attn_launch(s, a, ro);
}
