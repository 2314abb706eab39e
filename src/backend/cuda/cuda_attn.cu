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
 * read directly (q8_0: lane d reads byte d % 32 of block d / 32).
 * Does not own: writing the cache (cuda_ops.cu).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_int.h"

#define AT_WARPS 4
#define AT_MAXK 8 /* head_dim up to 256 = 8 values per lane */
#define AT_SPAN_MIN 64 /* positions: a token's context is cut into spans no shorter than this */
#define AT_UNROLL 4    /* positions a warp takes per step */

__device__ __forceinline__ float kv_elem(const uint8_t *row, int type, int d) {
    if (type == OB_TYPE_F16) return __half2float(((const __half *)row)[d]);
    if (type == OB_TYPE_F32) return ((const float *)row)[d];
    const uint8_t *b = row + (d >> 5) * 34; /* q8_0 */
    return __half2float(*(const __half *)b) * (float)(int8_t)b[2 + (d & 31)];
}

__global__ void __launch_bounds__(AT_WARPS * 32) k_attn(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb, int n_split,
                                                          float *part, int *cnt) {
    const int h = blockIdx.x, i = blockIdx.y, split = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
    /* this token's spans: as many as n_split, none shorter than AT_SPAN_MIN positions (decided
     * here from the position on the device, so a recorded graph stays right as the context grows) */
    const int np = a.pos[i] + 1, ns = min(n_split, (np + AT_SPAN_MIN - 1) / AT_SPAN_MIN), span = (np + ns - 1) / ns;
    const int p0 = split * span, p1 = min(np, p0 + span);
    const float *q = a.q + ((size_t)i * a.n_head + h) * hd;
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i] * a.n_ctx * vrb + (size_t)kh * vhb;
    float qv[AT_MAXK], acc[AT_MAXK];
#pragma unroll
    for (int k = 0; k < AT_MAXK; k++) {
        const int d = lane + 32 * k;
        qv[k] = d < hd ? q[d] * a.scale : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* AT_UNROLL positions per step (p, p + AT_WARPS, ...): their K and V loads are in flight together */
    for (int p = p0 + warp; p < p1; p += AT_WARPS * AT_UNROLL) {
        float sc[AT_UNROLL];
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
            const int pu = p + u * AT_WARPS;
            sc[u] = 0.0f;
            if (pu < p1) {
                const uint8_t *kr = kb + (size_t)pu * krb;
#pragma unroll
                for (int k = 0; k < AT_MAXK; k++) {
                    const int d = lane + 32 * k;
                    if (d < hd) sc[u] = fmaf(qv[k], kv_elem(kr, a.type_k, d), sc[u]);
                }
            }
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
            if (p + u * AT_WARPS < p1) mn = fmaxf(mn, sc[u]);
        }
        const float corr = __expf(m - mn); /* mn is finite: position p is in the span */
        float e[AT_UNROLL];
        l *= corr;
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
            e[u] = p + u * AT_WARPS < p1 ? __expf(sc[u] - mn) : 0.0f;
            l += e[u];
        }
        m = mn;
#pragma unroll
        for (int k = 0; k < AT_MAXK; k++) {
            const int d = lane + 32 * k;
            if (d >= hd) continue;
            float o = acc[k] * corr;
#pragma unroll
            for (int u = 0; u < AT_UNROLL; u++)
                if (p + u * AT_WARPS < p1) o += e[u] * kv_elem(vb + (size_t)(p + u * AT_WARPS) * vrb, a.type_v, d);
            acc[k] = o;
        }
    }
    /* merge the warps */
    __shared__ float sm[AT_WARPS], sl[AT_WARPS], so[AT_WARPS][AT_MAXK * 32];
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int k = 0; k < AT_MAXK; k++) so[warp][lane + 32 * k] = acc[k];
    __syncthreads();
    if (warp != 0) return;
    float M = -INFINITY;
    for (int w = 0; w < AT_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0.0f, o[AT_MAXK];
#pragma unroll
    for (int k = 0; k < AT_MAXK; k++) o[k] = 0.0f;
    for (int w = 0; w < AT_WARPS; w++) {
        const float f = sm[w] == -INFINITY ? 0.0f : __expf(sm[w] - M);
        L += sl[w] * f;
#pragma unroll
        for (int k = 0; k < AT_MAXK; k++) o[k] += so[w][lane + 32 * k] * f;
    }
    if (n_split == 1) {
        float *out = a.out + ((size_t)i * a.n_head + h) * hd;
        const float inv = L > 0 ? 1.0f / L : 0.0f;
#pragma unroll
        for (int k = 0; k < AT_MAXK; k++)
            if (lane + 32 * k < hd) out[lane + 32 * k] = o[k] * inv;
        return;
    }
    float *pp = part + (((size_t)i * a.n_head + h) * n_split + split) * (hd + 2);
    if (lane == 0) { pp[0] = M; pp[1] = L; }
#pragma unroll
    for (int k = 0; k < AT_MAXK; k++)
        if (lane + 32 * k < hd) pp[2 + lane + 32 * k] = o[k];
    /* the last span of (token, head) to finish merges them all, and resets the counter */
    __threadfence();
    __syncwarp(); /* every lane's stores are fenced before lane 0 counts the span */
    int last = 0;
    if (lane == 0) last = atomicAdd(&cnt[(size_t)i * a.n_head + h], 1) == n_split - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence();
    const float *pb = part + ((size_t)i * a.n_head + h) * n_split * (hd + 2);
    M = -INFINITY; /* spans past the token's last position hold max -inf, sum 0 */
    for (int sp = 0; sp < n_split; sp++) M = fmaxf(M, __ldcg(pb + (size_t)sp * (hd + 2)));
    L = 0.0f;
    for (int sp = 0; sp < n_split; sp++) {
        const float ms = __ldcg(pb + (size_t)sp * (hd + 2));
        if (ms != -INFINITY) L += __ldcg(pb + (size_t)sp * (hd + 2) + 1) * __expf(ms - M);
    }
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    float *out = a.out + ((size_t)i * a.n_head + h) * hd;
    for (int d = lane; d < hd; d += 32) {
        float od = 0.0f;
        for (int sp = 0; sp < n_split; sp++) {
            const float ms = __ldcg(pb + (size_t)sp * (hd + 2));
            if (ms != -INFINITY) od += __ldcg(pb + (size_t)sp * (hd + 2) + 2 + d) * __expf(ms - M);
        }
        out[d] = od * inv;
    }
    if (lane == 0) cnt[(size_t)i * a.n_head + h] = 0;
}

void cu_attention(cu_state *s, const ob_attn_args *a) {
    if (a->head_dim > AT_MAXK * 32) {
        fprintf(stderr, "cuda backend: attention head size %d exceeds %d\n", a->head_dim, AT_MAXK * 32);
        abort();
    }
    const int kv_dim = a->n_head_kv * a->head_dim;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    /* spans: fixed by the shapes alone (not by the positions), so that a recorded decode step can
     * be replayed as the context grows: for short batches (decode) enough for the longest context
     * (blocks of a token's unused spans end at once), capped at 16 blocks per SM; for long prompts
     * one span (the tokens' own blocks fill the GPU) */
    const int blocks = a->n * a->n_head;
    int n_split = blocks >= 2 * s->sm_count ? 1 : (16 * s->sm_count + blocks - 1) / blocks;
    const int max_split = (a->n_ctx + AT_SPAN_MIN - 1) / AT_SPAN_MIN;
    if (n_split > max_split) n_split = max_split;
    if (n_split < 1) n_split = 1;
    if (n_split > 1) {
        cu_reserve(s, (void **)&s->attn_part, &s->attn_cap, (size_t)blocks * n_split * (a->head_dim + 2) * sizeof(float));
        const size_t had = s->attn_cnt_cap;
        cu_reserve(s, (void **)&s->attn_cnt, &s->attn_cnt_cap, (size_t)blocks * sizeof(int));
        if (s->attn_cnt_cap != had) /* a new counter array: zero once, the merging blocks reset their own */
            cu_check(cudaMemsetAsync(s->attn_cnt, 0, s->attn_cnt_cap, s->stream), "attention counters");
    }
    dim3 grid((unsigned)a->n_head, (unsigned)a->n, (unsigned)n_split);
    k_attn<<<grid, AT_WARPS * 32, 0, s->stream>>>(*a, krb, vrb, khb, vhb, n_split, s->attn_part, s->attn_cnt);
    CU_LAUNCHED("attention");
}
