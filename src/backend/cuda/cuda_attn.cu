/* cuda_attn.cu — causal grouped-query attention over the KV cache, split over the sequence.
 *
 * Owns: flash-decoding. One block of 4 warps takes one (token, query head) and one span of
 * cache positions; each warp walks every 4th position of the span, computes the score with
 * its lanes spread over the head dimensions (lane d, d + 32, ...), and keeps an online
 * softmax (running max, running sum, weighted V sum) in registers. The warps' states are
 * merged in shared memory; with one span the block writes the output, otherwise each span's
 * (max, sum, vector) goes to scratch and a second kernel merges the spans. The number of spans
 * is chosen from the shapes so that short batches (decode) still fill the GPU, while long
 * prompts (many tokens, each its own block) use one span; each token then cuts its own
 * positions into that many spans (at least AT_SPAN_MIN long) on the device. Cache rows of f32, f16 or q8_0 are
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
#define AT_SPAN_MIN 128

__device__ __forceinline__ float kv_elem(const uint8_t *row, int type, int d) {
    if (type == OB_TYPE_F16) return __half2float(((const __half *)row)[d]);
    if (type == OB_TYPE_F32) return ((const float *)row)[d];
    const uint8_t *b = row + (d >> 5) * 34; /* q8_0 */
    return __half2float(*(const __half *)b) * (float)(int8_t)b[2 + (d & 31)];
}

__global__ void __launch_bounds__(AT_WARPS * 32) k_attn(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb, int n_split,
                                                          float *part) {
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
    for (int p = p0 + warp; p < p1; p += AT_WARPS) {
        const uint8_t *kr = kb + (size_t)p * krb;
        float sc = 0.0f;
#pragma unroll
        for (int k = 0; k < AT_MAXK; k++) {
            const int d = lane + 32 * k;
            if (d < hd) sc = fmaf(qv[k], kv_elem(kr, a.type_k, d), sc);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, o);
        const float mn = fmaxf(m, sc), corr = __expf(m - mn), e = __expf(sc - mn);
        l = l * corr + e;
        m = mn;
        const uint8_t *vr = vb + (size_t)p * vrb;
#pragma unroll
        for (int k = 0; k < AT_MAXK; k++) {
            const int d = lane + 32 * k;
            if (d < hd) acc[k] = acc[k] * corr + e * kv_elem(vr, a.type_v, d);
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
}

/* One warp per (token, head): merges the spans' partial softmax states. */
__global__ void k_attn_merge(ob_attn_args a, int n_split, const float *part) {
    const int h = blockIdx.x, i = blockIdx.y, lane = threadIdx.x, hd = a.head_dim;
    const float *pp = part + ((size_t)i * a.n_head + h) * n_split * (hd + 2);
    const int used = n_split; /* spans past a token's last position hold max -inf, sum 0 */
    float M = -INFINITY;
    for (int s = 0; s < used; s++) M = fmaxf(M, pp[(size_t)s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < used; s++) {
        const float ms = pp[(size_t)s * (hd + 2)];
        if (ms != -INFINITY) L += pp[(size_t)s * (hd + 2) + 1] * __expf(ms - M);
    }
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    float *out = a.out + ((size_t)i * a.n_head + h) * hd;
    for (int d = lane; d < hd; d += 32) {
        float o = 0.0f;
        for (int s = 0; s < used; s++) {
            const float ms = pp[(size_t)s * (hd + 2)];
            if (ms != -INFINITY) o += pp[(size_t)s * (hd + 2) + 2 + d] * __expf(ms - M);
        }
        out[d] = o * inv;
    }
}

void cu_attention(cu_state *s, const ob_attn_args *a) {
    if (a->head_dim > AT_MAXK * 32) {
        fprintf(stderr, "cuda backend: attention head size %d exceeds %d\n", a->head_dim, AT_MAXK * 32);
        abort();
    }
    const int kv_dim = a->n_head_kv * a->head_dim;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    /* spans: enough blocks for two waves of the GPU; fixed by the shapes alone (not by the
     * positions), so that a recorded decode step can be replayed */
    const int blocks = a->n * a->n_head, want = 2 * s->sm_count;
    int n_split = blocks >= want ? 1 : (want + blocks - 1) / blocks;
    const int max_split = (a->n_ctx + AT_SPAN_MIN - 1) / AT_SPAN_MIN;
    if (n_split > max_split) n_split = max_split;
    if (n_split < 1) n_split = 1;
    if (n_split > 1) cu_reserve(s, (void **)&s->attn_part, &s->attn_cap, (size_t)blocks * n_split * (a->head_dim + 2) * sizeof(float));
    dim3 grid((unsigned)a->n_head, (unsigned)a->n, (unsigned)n_split);
    k_attn<<<grid, AT_WARPS * 32, 0, s->stream>>>(*a, krb, vrb, khb, vhb, n_split, s->attn_part);
    CU_LAUNCHED("attention");
    if (n_split > 1) {
        k_attn_merge<<<dim3((unsigned)a->n_head, (unsigned)a->n), 32, 0, s->stream>>>(*a, n_split, s->attn_part);
        CU_LAUNCHED("attention merge");
    }
}
