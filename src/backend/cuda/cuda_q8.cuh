/* cuda_q8.cuh — integer dot products of 32-element weight sub-blocks with int8 activations.
 *
 * Owns: which weight types the decode matmul runs on int8 activations (cu_q8_type) and, per
 * type, q8w<T>: load(row, sb) unpacks sub-block sb (elements 32 sb .. 32 sb + 31) of a row into
 * eight words of four int8 codes each plus its scales, and dot(xw, xs) returns that sub-block's
 * contribution against the activations' codes xw (eight words) and xs = (d, d * sum of codes)
 * with __dp4a: an exact integer sum, then float scales, the same decomposition as the CPU's
 * integer kernels (docs/cpu.md): sum w x = dw * (dx * sum(q c)) - offset * (dx * sum c).
 * quant_row gives the activations their codes, as the CPU's quantizer does (k_quant_x in
 * cuda_gemv.cu, or the RMSNorm kernel right after it normalizes a row).
 * Does not own: the staged matmul that calls these (cuda_gemv.cu), the float decoders
 * (cuda_quant.cuh, which the other types use).
 */
#ifndef OB_CUDA_Q8_CUH
#define OB_CUDA_Q8_CUH

#include "backend/cuda/cuda_quant.cuh"

/* Nonzero for types with an int8 sub-block decoder below. */
__host__ __device__ constexpr bool cu_q8_type(int T) {
    return T == OB_TYPE_Q4_0 || T == OB_TYPE_Q8_0 || T == OB_TYPE_Q4_K || T == OB_TYPE_Q6_K || T == OB_TYPE_TQ2_0 ||
           T == OB_TYPE_I2_S;
}

/* Sum (or max) of v over the block; every thread gets the result. */
template <bool MAX> __device__ float block_reduce(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    __syncthreads(); /* part may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    return v;
}

/* One row of activations x[n_in] (n_in a multiple of 32) to int8, by the whole block (blockDim a
 * multiple of 32), exactly as the CPU's quantizer (backend/cpu/kernels_scalar.c, quant_row): a
 * row whose values all lie within 1e-3 of the grid of d = max|x| / 127 keeps that one scale (the
 * codes of BitNet's act_quant_i8 come back exactly); any other row gets d = max|block| / 127 per
 * 32-element block. Codes are rint(x / d) as rint(x * (1 / d)), clamped to [-127, 127]; each
 * block's (d, d * sum of codes) goes to xs. Thread t holds elements t + k * blockDim (k < PER)
 * in registers: one read of the row, and each warp holds whole 32-element blocks. */
template <int PER> __device__ __forceinline__ void quant_row_r(const float *x, int n_in, int8_t *q, float2 *xs) {
    const int bd = blockDim.x, lane = threadIdx.x & 31;
    float v[PER], amax = 0.0f;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e = threadIdx.x + k * bd;
        v[k] = e < n_in ? x[e] : 0.0f;
        amax = fmaxf(amax, fabsf(v[k]));
    }
    amax = block_reduce<true>(amax);
    const float dr = amax / 127.0f, idr = amax > 0.0f ? 1.0f / dr : 0.0f;
    float off = 0.0f; /* 1 where a value is off the row's grid */
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const float t = v[k] * idr;
        if (!(fabsf(t - rintf(t)) <= 1e-3f)) off = 1.0f;
    }
    off = block_reduce<true>(off); /* every thread calls it: amax is the same in all */
    const bool row_mode = amax > 0.0f && off == 0.0f;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e = threadIdx.x + k * bd;
        if (e - lane >= n_in) break; /* the same for the whole warp: n_in and bd are multiples of 32 */
        float d = dr, id = idr;
        if (!row_mode) {
            float bmax = fabsf(v[k]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
            d = bmax / 127.0f;
            id = d != 0.0f ? 1.0f / d : 0.0f;
        }
        const float c = fminf(fmaxf(rintf(v[k] * id), -127.0f), 127.0f);
        q[e] = (int8_t)c;
        int sum = (int)c;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) xs[e >> 5] = make_float2(d, d * (float)sum);
    }
}

__device__ __forceinline__ void quant_row(const float *x, int n_in, int8_t *q, float2 *xs) {
    const int per = (n_in + (int)blockDim.x - 1) / (int)blockDim.x;
    if (per <= 2) quant_row_r<2>(x, n_in, q, xs);
    else if (per <= 4) quant_row_r<4>(x, n_in, q, xs);
    else if (per <= 8) quant_row_r<8>(x, n_in, q, xs);
    else if (per <= 16) quant_row_r<16>(x, n_in, q, xs);
    else if (per <= 32) quant_row_r<32>(x, n_in, q, xs);
    else __trap(); /* callers keep rows to 32 per thread (CU_QROW_MAX) */
}

/* N words from p, which is 2-byte aligned (shared memory; may read 4 bytes past the last word). */
template <int N> __device__ __forceinline__ void ld_words(const uint8_t *p, uint32_t w[N]) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const uint32_t sel = 0x3210u + ((uintptr_t)p & 2) * 0x1111u; /* 0x3210 aligned, 0x5432 two bytes in */
    uint32_t prev = a[0];
#pragma unroll
    for (int k = 0; k < N; k++) {
        const uint32_t next = a[k + 1];
        w[k] = __byte_perm(prev, next, sel);
        prev = next;
    }
}

__device__ __forceinline__ int dp8(const int w[8], const int x[8], int k0, int k1) {
    int s = 0;
#pragma unroll
    for (int k = k0; k < k1; k++) s = __dp4a(w[k], x[k], s);
    return s;
}

template <int T> struct q8w;

template <> struct q8w<OB_TYPE_Q4_0> { /* (q - 8) * d, element l low nibble of byte l, l + 16 high */
    int w[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)sb * 18;
        uint32_t q[4];
        d = ld_h(b);
        ld_words<4>(b + 2, q);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[k] = (int)(q[k] & 0x0f0f0f0fu);
            w[k + 4] = (int)((q[k] >> 4) & 0x0f0f0f0fu);
        }
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return d * (xs.x * (float)dp8(w, x, 0, 8) - 8.0f * xs.y); }
};

template <> struct q8w<OB_TYPE_Q8_0> {
    int w[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)sb * 34;
        d = ld_h(b);
        ld_words<8>(b + 2, (uint32_t *)w);
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return d * (xs.x * (float)dp8(w, x, 0, 8)); }
};

template <> struct q8w<OB_TYPE_Q4_K> { /* d * sc * q - dmin * m; sub-block j: nibble half j & 1 of bytes 32 (j / 2) .. */
    int w[8];
    float d1, m1;
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 144;
        const int j = sb & 7, sh = 4 * (j & 1);
        int sc, m;
        k4_scale_min(j, b + 4, &sc, &m);
        d1 = ld_h(b) * (float)sc;
        m1 = ld_h(b + 2) * (float)m;
        ld_words<8>(b + 16 + 32 * (j >> 1), (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x0f0f0f0fu);
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return d1 * (xs.x * (float)dp8(w, x, 0, 8)) - m1 * xs.y; }
};

template <> struct q8w<OB_TYPE_Q6_K> { /* (ql | qh << 4) - 32, one int8 scale per 16 elements */
    int w[8];
    float d;
    int sc0, sc1;
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 210;
        const int j = sb & 7, h = j >> 2, g = j & 3;
        uint32_t ql[8], qh[8];
        ld_words<8>(b + 64 * h + 32 * (g & 1), ql);
        ld_words<8>(b + 128 + 32 * h, qh);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t lo = (ql[k] >> (4 * (g >> 1))) & 0x0f0f0f0fu, hi = ((qh[k] >> (2 * g)) & 0x03030303u) << 4;
            w[k] = (int)__vsub4(lo | hi, 0x20202020u);
        }
        d = ld_h(b + 208);
        sc0 = (int8_t)b[192 + 8 * h + 2 * g];
        sc1 = (int8_t)b[192 + 8 * h + 2 * g + 1];
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const {
        return d * (xs.x * (float)(sc0 * dp8(w, x, 0, 4) + sc1 * dp8(w, x, 4, 8)));
    }
};

template <> struct q8w<OB_TYPE_TQ2_0> { /* (q - 1) * d, sub-block j: bits 2 (j & 3) of bytes 32 (j / 4) .. */
    int w[8];
    float d;
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 66;
        const int j = sb & 7, sh = 2 * (j & 3);
        ld_words<8>(b + 32 * (j >> 2), (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x03030303u);
        d = ld_h(b + 64);
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return d * (xs.x * (float)dp8(w, x, 0, 8) - xs.y); }
};

template <> struct q8w<OB_TYPE_I2_S> { /* q - 1 (the tensor scale comes after); group g: bits 6 - 2 g of the block's bytes */
    int w[8];
    __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 2) * 32;
        const int sh = 6 - 2 * (sb & 3);
        ld_words<8>(b, (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x03030303u);
    }
    __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return xs.x * (float)dp8(w, x, 0, 8) - xs.y; }
};

#endif
