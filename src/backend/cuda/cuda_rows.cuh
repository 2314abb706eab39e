/* cuda_rows.cuh — device functions of the row ops that more than one kernel runs: the row
 * statistics and codes (RMSNorm, BitNet's act_quant_i8, the int8 codes), RoPE and the KV-cache
 * element store. Kernels that call them with the same block size get the same bits
 * (cuda_ops.cu's one-op kernels, cuda_layer.cu's whole-layer decode kernel).
 */
#ifndef OB_CUDA_ROWS_CUH
#define OB_CUDA_ROWS_CUH

#include <cuda_fp16.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"

/* The row ops on row x[dim] into y (y may be x; NULL: codes only): with norm, y = x / sqrt(mean(x^2)
 * + eps) * w (w may be NULL); with aq, then BitNet's act_quant_i8 on y; with q, then y's codes for
 * the int8 matmul path (quant_regs), so that the projections reading y need no quantizer of their
 * own. The block holds the whole row in registers (thread t: elements t + k * blockDim, k < PER)
 * and computes every statistic over the whole row, but writes only y's and the codes' elements in
 * [lo, hi): decode-sized batches spread a row's writes over several blocks (one SM alone spent 5-10
 * us on a row's codes), while every block's arithmetic, and so every value, stays that of one
 * block doing the whole row. Each step takes the values the previous one wrote: the same
 * arithmetic as the separate ops. wait() runs before x is read; with WPRE and wpre, the norm's
 * weights are read into registers before it (weights never change: a kernel may read them before
 * it waits for the previous one), else after the row's sum of squares (a second dependent round
 * trip to memory); the same values either way. yh (with yi): y's f16 copy too. rel() runs once the
 * row has been read (after a norm's sum of squares, else after the loads). */
struct rows_nowait {
    __device__ void operator()() const {}
};
template <int PER, bool WPRE = false, typename WAIT = rows_nowait, typename REL = rows_nowait>
__device__ __forceinline__ void rows_regs(const float *xi, const float *w, float *yi, int dim, float eps, int norm, int aq, int8_t *qi,
                                          float2 *xsi, int lo, int hi, int wpre = 0, WAIT wait = WAIT(), __half *yh = nullptr,
                                          REL rel = REL()) {
    const int bd = blockDim.x, t = threadIdx.x;
    float wv[WPRE ? PER : 1];
    if constexpr (WPRE)
        if (wpre)
#pragma unroll
            for (int k = 0; k < PER; k++) wv[k] = norm && w && t + k * bd < dim ? w[t + k * bd] : 1.0f;
    wait();
    float v[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) v[k] = t + k * bd < dim ? xi[t + k * bd] : 0.0f;
    if (norm) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < PER; k++) ss = fmaf(v[k], v[k], ss);
        ss = block_reduce<false>(ss);
        rel();
        const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (t + k * bd < dim) {
                float wk;
                if constexpr (WPRE) wk = wpre ? wv[k] : w ? w[t + k * bd] : 1.0f;
                else wk = w ? w[t + k * bd] : 1.0f;
                v[k] = v[k] * inv * wk;
            }
    }
    else rel();
    if (aq) {
        float mx = 0.0f;
#pragma unroll
        for (int k = 0; k < PER; k++) mx = fmaxf(mx, fabsf(v[k]));
        mx = block_reduce<true>(mx);
        if (mx < 1e-5f) mx = 1e-5f;
        const float sc = (1.0f / mx) * 127.0f;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const float c = fminf(fmaxf(rintf(v[k] * sc), -128.0f), 127.0f);
            v[k] = c / sc; /* zeros past dim stay zeros */
        }
    }
    if (yi && (norm || aq))
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int e = t + k * bd;
            if (e >= lo && e < hi) {
                yi[e] = v[k];
                if (yh) yh[e] = __float2half_rn(v[k]); /* the f16 copy the cuBLAS path reads (k_to_16's rounding) */
            }
        }
    if (qi) quant_regs<PER>(v, dim, lo, hi, qi, xsi);
}

/* Element e of a row, of value v, into its cache row dst: f32 / f16 one element per thread; q8_0
 * one warp per 32-element block (all 32 lanes of the warp call with the same e / 32). */
__device__ __forceinline__ void kv_put(uint8_t *dst, int type, float v, int e) {
    if (type == OB_TYPE_Q8_0) {
        float amax = fabsf(v);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *blk = dst + (size_t)(e / 32) * 34;
        if ((e & 31) == 0) *(__half *)blk = __float2half_rn(d);
        blk[2 + (e & 31)] = (uint8_t)(int8_t)roundf(v * id);
    } else if (type == OB_TYPE_F16) {
        ((__half *)dst)[e] = __float2half_rn(v);
    } else {
        ((float *)dst)[e] = v;
    }
}

/* Element e of the row src into its cache row dst (kv_put). */
__device__ __forceinline__ void kv_store(uint8_t *dst, int type, const float *src, int e) { kv_put(dst, type, src[e], e); }

/* The cos / sin of token i's pairs into cs[half], cs[half + k] (double, as the reference), by
 * threads t0, t0 + nt, ... (default: the whole block). */
__device__ __forceinline__ void rope_angles(float *cs, int pos, const ob_rope &r, int t0 = -1, int nt = 0) {
    const int half = r.n_rot / 2;
    if (t0 < 0) {
        t0 = threadIdx.x;
        nt = blockDim.x;
    }
    for (int k = t0; k < half; k += nt) {
        double inv_freq = pow((double)r.theta, -2.0 * k / r.n_rot);
        if (r.freq_factors) inv_freq /= r.freq_factors[k];
        const double ang = (double)pos * r.freq_scale * inv_freq;
        cs[k] = (float)cos(ang);
        cs[half + k] = (float)sin(ang);
    }
}

/* The two dimensions (a, b) that pair k of a head rotates together. */
__device__ __forceinline__ void rope_dims(const ob_rope &r, int k, int *a, int *b) {
    const int half = r.n_rot / 2;
    *a = r.style == OB_ROPE_NEOX ? k : 2 * k;
    *b = r.style == OB_ROPE_NEOX ? k + half : 2 * k + 1;
}

/* One rotated pair, written out so that every caller gets the same roundings (no contraction
 * left to the compiler). */
__device__ __forceinline__ float rope_lo(float x0, float x1, float c, float sn) { return fmaf(x0, c, __fmul_rn(-x1, sn)); }
__device__ __forceinline__ float rope_hi(float x0, float x1, float c, float sn) { return fmaf(x0, sn, __fmul_rn(x1, c)); }

/* Rotates the n_head heads of one token's row x, every (head, pair) by its own thread. */
__device__ __forceinline__ void rope_row(float *x, int n_head, int head_dim, const float *cs, const ob_rope &r) {
    const int half = r.n_rot / 2;
    for (int e = threadIdx.x; e < n_head * half; e += blockDim.x) {
        const int h = e / half, k = e % half;
        const float c = cs[k], sn = cs[half + k];
        int a, b;
        rope_dims(r, k, &a, &b);
        float *v = x + (size_t)h * head_dim;
        const float x0 = v[a], x1 = v[b];
        v[a] = rope_lo(x0, x1, c, sn);
        v[b] = rope_hi(x0, x1, c, sn);
    }
}

/* The element of a head that element d is rotated with (rope_dims' other one; d itself past the
 * rotated dimensions). */
__device__ __forceinline__ int rope_partner(const ob_rope &r, int d) {
    const int half = r.n_rot / 2;
    if (d >= 2 * half) return d;
    return r.style == OB_ROPE_NEOX ? (d < half ? d + half : d - half) : d ^ 1;
}

/* Rotated element d of a head from its value xd and its partner's xp (rope_partner), rope_row's
 * value of it; callers that hold both in registers (a lane and its neighbour, or two of a lane's
 * registers) need no copy of the head in memory. */
__device__ __forceinline__ float rope_pair(float xd, float xp, int d, const float *cs, const ob_rope &r) {
    const int half = r.n_rot / 2;
    if (d >= 2 * half) return xd;
    const int k = r.style == OB_ROPE_NEOX ? (d < half ? d : d - half) : d >> 1;
    int a, b;
    rope_dims(r, k, &a, &b);
    const float c = cs[k], sn = cs[half + k];
    return d == a ? rope_lo(xd, xp, c, sn) : rope_hi(xp, xd, c, sn);
}

/* Element d of the rotated head x[head_dim] (rope_row's value of it; rope_pair's arithmetic with
 * both elements read from x, kept as its own code so that the measured kernels' machine code
 * stays as it was). */
__device__ __forceinline__ float rope_elem(const float *x, int d, const float *cs, const ob_rope &r) {
    const int half = r.n_rot / 2;
    if (d >= 2 * half) return x[d];
    const int k = r.style == OB_ROPE_NEOX ? (d < half ? d : d - half) : d >> 1;
    int a, b;
    rope_dims(r, k, &a, &b);
    const float c = cs[k], sn = cs[half + k], x0 = x[a], x1 = x[b];
    return d == a ? rope_lo(x0, x1, c, sn) : rope_hi(x0, x1, c, sn);
}

/* One row's RMSNorm and codes (no act_quant) by a block of 128 threads, with the bits of k_rows on
 * vt threads (vt = cu_rows_threads: 1024 for 2048 values, 256 below; dim <= 2048): thread t plays
 * the row kernel's threads t + 128 j, holding their elements t + 128 j + vt k in v[j * pm + k]
 * (pm = 2048 / vt... values a played thread, 16 in all), sums each played thread's squares in
 * rows_regs' order and each played warp's by its shuffle tree, then the played warps' sums as
 * block_reduce does; the statistics after it are maxima (any order). The codes go to q / xs
 * (shared memory: the caller's matmul reads them there) and, with gq, to gq / gxs and y to gy
 * (one block of the launch: later ops read them). wv: the norm's weights (1 where w is NULL),
 * read by the caller before its wait. Ends with a barrier. */
__device__ __forceinline__ void rows_norm_block(const float *x, const float (&wv)[16], int dim, int vt, float eps, int8_t *q, float2 *xs,
                                                float *gy, int8_t *gq, float2 *gxs) {
    __shared__ float part[32];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, lp = vt == 1024 ? 1 : 3, pm = 1 << lp;
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int e = t + 128 * (i >> lp) + vt * (i & (pm - 1));
        v[i] = e < dim ? x[e] : 0.0f;
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        acc = fmaf(v[i], v[i], acc);
        if ((i & (pm - 1)) == pm - 1) { /* played thread t + 128 j's sum: its warp's tree */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0) part[warp + 4 * (i >> lp)] = acc;
            acc = 0.0f;
        }
    }
    __syncthreads();
    float ss = lane < vt / 32 ? part[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    float mx = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int e = t + 128 * (i >> lp) + vt * (i & (pm - 1));
        if (e < dim) v[i] = v[i] * inv * wv[i];
        mx = fmaxf(mx, fabsf(v[i]));
    }
    const float amax = block_reduce<true>(mx);
    const float dr = amax / 127.0f, idr = amax > 0.0f ? 1.0f / dr : 0.0f;
    float off = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) off = fmaxf(off, quant_off(v[i], idr));
    off = block_reduce<true>(off);
    const bool row_mode = amax > 0.0f && off == 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int e0 = 32 * warp + 128 * (i >> lp) + vt * (i & (pm - 1)), e = e0 + lane;
        if (e0 >= dim) continue; /* the same for the whole warp */
        quant_elem(v[i], e, dr, idr, row_mode, q, xs);
        if (gq) {
            quant_elem(v[i], e, dr, idr, row_mode, gq, gxs);
            gy[e] = v[i];
        }
    }
    __syncthreads();
}

/* The norm's weights for rows_norm_block (thread t's elements; 1 past dim or where w is NULL). */
__device__ __forceinline__ void rows_norm_weights(const float *w, int dim, int vt, float (&wv)[16]) {
    const int t = threadIdx.x, lp = vt == 1024 ? 1 : 3, pm = 1 << lp;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int e = t + 128 * (i >> lp) + vt * (i & (pm - 1));
        wv[i] = w && e < dim ? w[e] : 1.0f;
    }
}

#endif
