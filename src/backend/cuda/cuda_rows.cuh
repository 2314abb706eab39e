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
 * trip to memory); the same values either way. yh (with yi): y's f16 copy too. */
struct rows_nowait {
    __device__ void operator()() const {}
};
template <int PER, bool WPRE = false, typename WAIT = rows_nowait>
__device__ __forceinline__ void rows_regs(const float *xi, const float *w, float *yi, int dim, float eps, int norm, int aq, int8_t *qi,
                                          float2 *xsi, int lo, int hi, int wpre = 0, WAIT wait = WAIT(), __half *yh = nullptr) {
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

#endif
