/* cuda_q8.cuh — integer dot products of 32-element weight sub-blocks with int8 activations.
 *
 * Owns: which weight types the decode matmul runs on int8 activations (cu_q8_type) and, per
 * type, q8w<T>: load(row, sb) unpacks sub-block sb (elements 32 sb .. 32 sb + 31) of a row into
 * eight words of four int8 codes each plus its scales, and dot(xw, xs) returns that sub-block's
 * contribution against the activations' codes xw (eight words) and xs = (d, d * sum of codes)
 * with __dp4a: an exact integer sum, then float scales, the same decomposition as the CPU's
 * integer kernels (docs/cpu.md): sum w x = dw * (dx * sum(q c)) - offset * (dx * sum c).
 * quant_regs gives the activations their codes, as the CPU's quantizer does (the row kernel of
 * cuda_ops.cu: after an RMSNorm / act_quant_i8 of the row, or alone before a matmul).
 * Does not own: the staged matmul that calls these (cuda_gemv.cu), the float decoders
 * (cuda_quant.cuh, which the other types use).
 */
#ifndef OB_CUDA_Q8_CUH
#define OB_CUDA_Q8_CUH

#include <string.h>

#include "backend/cuda/cuda_quant.cuh"

/* The decoders below run on the device and, for cu_q8_selftest (cuda_q8_check.cu), on the host:
 * these are the few intrinsics they use, with a plain-C twin for the host. */
__host__ __device__ __forceinline__ uint32_t q8_perm(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, sel);
#else
    const uint64_t x = ((uint64_t)b << 32) | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((x >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}
/* bytewise a - b, modulo 256 */
__host__ __device__ __forceinline__ uint32_t q8_vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)((a >> (8 * i)) - (b >> (8 * i))) << (8 * i);
    return r;
#endif
}
/* c + the four products of a's and b's signed bytes */
__host__ __device__ __forceinline__ int q8_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
/* fp16 field at a 2-byte aligned address */
__host__ __device__ __forceinline__ float q8_ld_h(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return ld_h(p);
#else
    return ob_fp16_to_fp32(*(const uint16_t *)p);
#endif
}

/* Nonzero for types with an int8 sub-block decoder below. */
__host__ __device__ constexpr bool cu_q8_type(int T) {
    return T == OB_TYPE_Q4_0 || T == OB_TYPE_Q4_1 || T == OB_TYPE_Q5_0 || T == OB_TYPE_Q5_1 || T == OB_TYPE_Q8_0 ||
           T == OB_TYPE_IQ4_NL || T == OB_TYPE_Q2_K || T == OB_TYPE_Q3_K || T == OB_TYPE_Q4_K || T == OB_TYPE_Q5_K ||
           T == OB_TYPE_Q6_K || T == OB_TYPE_IQ4_XS || T == OB_TYPE_TQ1_0 || T == OB_TYPE_TQ2_0 || T == OB_TYPE_I2_S ||
           T == OB_TYPE_LEAN4;
}

/* Nonzero for the int8-path types whose sub-block contribution is one integer sum over its 32
 * elements, scaled (q8w<T>::scale): the tensor-core prompt kernel (cuda_mmq.cu) takes them; q2_K,
 * q3_K and q6_K (a scale per 16 elements) do not. */
__host__ __device__ constexpr bool cu_mmq_type(int T) {
    return cu_q8_type(T) && T != OB_TYPE_Q2_K && T != OB_TYPE_Q3_K && T != OB_TYPE_Q6_K;
}

/* d += the exact integer products of a 16 x 32 int8 tile a and a 32 x 8 tile (b0, b1) on the
 * tensor cores (mma.sync m16n8k32, s8 x s8 -> s32; sm_80 and later). Fragments (PTX ISA, g =
 * lane / 4, c = lane % 4): a {row g, k 4c..4c+3}, {row g+8, same}, {row g, k 16+4c..}, {row g+8,
 * same}; b0 {k 4c..4c+3, col g}, b1 {k 16+4c.., col g}; d {row g, cols 2c, 2c+1}, {row g+8, same}. */
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int b0, int b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
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

/* The codes of one row of activations (n_in a multiple of 32) held in registers by the whole
 * block (blockDim a multiple of 32): thread t holds elements t + k * blockDim (k < PER) in v,
 * zeros past n_in, so each warp holds whole 32-element blocks. Exactly the CPU's quantizer
 * (backend/cpu/kernels_scalar.c, quant_row): a row whose values all lie within 1e-3 of the grid
 * of d = max|x| / 127 keeps that one scale (the codes of BitNet's act_quant_i8 come back
 * exactly); any other row gets d = max|block| / 127 per 32-element block. Codes are rint(x / d)
 * as rint(x * (1 / d)), clamped to [-127, 127]; each block's (d, d * sum of codes) goes to xs.
 * Every block of a launch may hold the same row: the row's statistics are the whole row's, and
 * only the 32-element blocks in [lo, hi) (multiples of 32) are written, so that several blocks
 * share one row's writes. */
/* The code of element e (value v) of a row with the row's scale dr = max|x| / 127 (idr its
 * inverse) and mode, called by all 32 lanes of a warp for one 32-element block (lane = e % 32). */
__device__ __forceinline__ void quant_elem(float v, int e, float dr, float idr, bool row_mode, int8_t *q, float2 *xs) {
    float d = dr, id = idr;
    if (!row_mode) { /* the block's max |x|: the bits of non-negative floats order as the values */
        d = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(v)))) / 127.0f;
        id = d != 0.0f ? 1.0f / d : 0.0f;
    }
    const float c = fminf(fmaxf(rintf(v * id), -127.0f), 127.0f);
    q[e] = (int8_t)c;
    const int sum = __reduce_add_sync(0xffffffffu, (int)c);
    if ((e & 31) == 0) xs[e >> 5] = make_float2(d, d * (float)sum);
}

/* Whether a row of scale inverse idr lies on its grid: the on-grid test of one value. */
__device__ __forceinline__ float quant_off(float v, float idr) {
    const float t = v * idr;
    return fabsf(t - rintf(t)) <= 1e-3f ? 0.0f : 1.0f;
}

template <int PER> __device__ __forceinline__ void quant_regs(const float (&v)[PER], int n_in, int lo, int hi, int8_t *q, float2 *xs) {
    const int bd = blockDim.x, lane = threadIdx.x & 31;
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < PER; k++) amax = fmaxf(amax, fabsf(v[k]));
    amax = block_reduce<true>(amax);
    const float dr = amax / 127.0f, idr = amax > 0.0f ? 1.0f / dr : 0.0f;
    float off = 0.0f; /* 1 where a value is off the row's grid */
#pragma unroll
    for (int k = 0; k < PER; k++) off = fmaxf(off, quant_off(v[k], idr));
    off = block_reduce<true>(off); /* every thread calls it: amax is the same in all */
    const bool row_mode = amax > 0.0f && off == 0.0f;
    /* quant_elem's arithmetic for the warp's PER blocks at once: lane k takes block k's max and
     * divides it (two divisions a warp instead of two a block one after another), the blocks'
     * scales come back by shuffles, and no branch but the warp-uniform range test separates the
     * blocks' independent steps; blocks outside [lo, hi) cost nothing (a slice of a long row
     * writes one or two of a thread's PER blocks: computing all of them made BitNet's 6912-value
     * sub-norm rows 7% slower per token) */
    static_assert(PER <= 32, "one lane per 32-element block of the warp");
    const int wbase = threadIdx.x - lane; /* the warp's first element for k = 0 */
    float mk = 0.0f;
    if (!row_mode)
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int e0 = wbase + k * bd;
            if (e0 >= lo && e0 < hi && e0 < n_in) { /* the bits of non-negative floats order as the values */
                const float m = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(v[k]))));
                mk = lane == k ? m : mk;
            }
        }
    const float dl = mk / 127.0f, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int e0 = wbase + k * bd, e = e0 + lane;
        if (e0 < lo || e0 >= hi || e0 >= n_in) continue; /* the same for all lanes of the warp */
        float d = dr, id = idr;
        if (!row_mode) {
            d = __shfl_sync(0xffffffffu, dl, k);
            id = __shfl_sync(0xffffffffu, idl, k);
        }
        const float c = fminf(fmaxf(rintf(v[k] * id), -127.0f), 127.0f);
        const int sum = __reduce_add_sync(0xffffffffu, (int)c);
        q[e] = (int8_t)c;
        if (lane == 0) xs[e >> 5] = make_float2(d, d * (float)sum);
    }
}

/* The codes of rows [0, n) of y[n][dim] (dim a multiple of 32) by one block (blockDim a multiple
 * of 32) from memory that other blocks of the launch wrote (loads that skip L1): the same
 * statistics and codes as quant_regs, in three passes over each row (max, on-grid test, codes:
 * warp w takes 32-element blocks w, w + warps, ...). */
__device__ __forceinline__ void quant_rows_mem(const float *y, int n, int dim, int8_t *q, float2 *xs) {
    const int bd = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = bd >> 5;
    for (int i = 0; i < n; i++) {
        const float *yi = y + (size_t)i * dim;
        float amax = 0.0f;
#pragma unroll 8
        for (int e = t; e < dim; e += bd) amax = fmaxf(amax, fabsf(__ldcg(yi + e)));
        amax = block_reduce<true>(amax);
        const float dr = amax / 127.0f, idr = amax > 0.0f ? 1.0f / dr : 0.0f;
        float off = 0.0f;
#pragma unroll 8
        for (int e = t; e < dim; e += bd) off = fmaxf(off, quant_off(__ldcg(yi + e), idr));
        off = block_reduce<true>(off);
        const bool row_mode = amax > 0.0f && off == 0.0f;
        for (int g = warp; g < dim / 32; g += nw)
            quant_elem(__ldcg(yi + 32 * g + lane), 32 * g + lane, dr, idr, row_mode, q + (size_t)i * dim, xs + (size_t)i * (dim / 32));
    }
}

/* N words from p, which is 2-byte aligned (shared memory; may read 4 bytes past the last word). */
template <int N> __host__ __device__ __forceinline__ void ld_words(const uint8_t *p, uint32_t w[N]) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const uint32_t sel = 0x3210u + ((uintptr_t)p & 2) * 0x1111u; /* 0x3210 aligned, 0x5432 two bytes in */
    uint32_t prev = a[0];
#pragma unroll
    for (int k = 0; k < N; k++) {
        const uint32_t next = a[k + 1];
        w[k] = q8_perm(prev, next, sel);
        prev = next;
    }
}

/* OB_CUDA_LD16=0 at build time leaves every decoder on ld_words (an A/B of the aligned loads). */
#ifndef OB_CUDA_LD16
#define OB_CUDA_LD16 1
#endif
/* N words from p, aligned to W words (W = 2 or 4): N / W loads of W words. */
template <int W, int N> __host__ __device__ __forceinline__ void ld_wide(const uint8_t *p, uint32_t w[N]) {
#pragma unroll
    for (int k = 0; k < N / W; k++) {
#ifdef __CUDA_ARCH__
        if constexpr (W == 4) {
            const uint4 v = ((const uint4 *)p)[k];
            w[4 * k] = v.x;
            w[4 * k + 1] = v.y;
            w[4 * k + 2] = v.z;
            w[4 * k + 3] = v.w;
        } else {
            const uint2 v = ((const uint2 *)p)[k];
            w[2 * k] = v.x;
            w[2 * k + 1] = v.y;
        }
#else
        memcpy(w + W * k, p + 4 * W * k, 4 * W);
#endif
    }
}
/* N words (N a multiple of 4) from p, 16-byte aligned: N / 4 vector loads instead of ld_words's
 * N + 1 word loads and N byte permutes (q4_K / q5_K / i2_s sub-blocks of a row whose start is
 * aligned, as uploads are: their blocks are multiples of 16 bytes). */
template <int N> __host__ __device__ __forceinline__ void ld_words16(const uint8_t *p, uint32_t w[N]) { ld_wide<4, N>(p, w); }
__host__ __device__ __forceinline__ bool q8_al16(const uint8_t *p) { return OB_CUDA_LD16 && ((uintptr_t)p & 15) == 0; }
/* the same, where A16 says at compile time that p is 16-byte aligned (the caller checked its rows) */
template <bool A16> __host__ __device__ __forceinline__ bool q8_al16(const uint8_t *p) { return (A16 && OB_CUDA_LD16) || q8_al16(p); }

/* N words (N a multiple of 4) from p, 2-byte aligned, with the widest loads p's alignment allows:
 * for packed rows (cuda_quant.cuh), where that alignment is the row's and so the same for a whole
 * warp in the decode kernels; lanes of different alignments take the branches one after another
 * (k_mmq, whose warps load 16 rows: BitNet's 660-byte tq2_0 rows there have four alignments). */
template <int N, bool A16 = false> __host__ __device__ __forceinline__ void ld_words_row(const uint8_t *p, uint32_t w[N]) {
    const uintptr_t a = (uintptr_t)p;
    if (q8_al16<A16>(p)) {
        ld_words16<N>(p, w);
    } else if ((a & 7) == 0) {
        ld_wide<2, N>(p, w);
    } else if ((a & 3) == 0) {
#ifdef __CUDA_ARCH__
#pragma unroll
        for (int k = 0; k < N; k++) w[k] = ((const uint32_t *)p)[k];
#else
        memcpy(w, p, 4 * N);
#endif
    } else {
        ld_words<N>(p, w);
    }
}

/* an fp16 value's bits as a float */
__host__ __device__ __forceinline__ float q8_h(uint32_t bits) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)bits));
#else
    return ob_fp16_to_fp32((uint16_t)bits);
#endif
}

__host__ __device__ __forceinline__ int dp8(const int w[8], const int x[8], int k0, int k1) {
    int s = 0;
#pragma unroll
    for (int k = k0; k < k1; k++) s = q8_dp4a(w[k], x[k], s);
    return s;
}

/* The low / high nibbles of four words (16 bytes) as eight words of codes: elements 0-15, then 16-31. */
__host__ __device__ __forceinline__ void nibbles_of(const uint32_t q[4], int w[8]) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        w[k] = (int)(q[k] & 0x0f0f0f0fu);
        w[k + 4] = (int)((q[k] >> 4) & 0x0f0f0f0fu);
    }
}
__host__ __device__ __forceinline__ void nibbles16(const uint8_t *p, int w[8]) {
    uint32_t q[4];
    ld_words<4>(p, q);
    nibbles_of(q, w);
}

/* Bit 4 of each code of word k from a 32-bit mask of a sub-block's high bits (bit e: element e). */
__host__ __device__ __forceinline__ uint32_t high4(uint32_t qh, int k) {
    const uint32_t b = (qh >> (4 * k)) & 0xfu;
    return ((b & 1u) | ((b & 2u) << 7) | ((b & 4u) << 14) | ((b & 8u) << 21)) << 4;
}

/* A 16-entry int8 table (t0..t3, four entries a word) applied to four codes (bytes 0-15) at once,
 * by byte permutes. */
__host__ __device__ __forceinline__ int grid4(uint32_t w, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    const uint32_t l3 = w & 0x07070707u, sel = (l3 & 0x7u) | ((l3 >> 4) & 0x70u) | ((l3 >> 8) & 0x700u) | ((l3 >> 12) & 0x7000u);
    const uint32_t hi = ((w >> 3) & 0x01010101u) * 0xffu;
    return (int)((q8_perm(t0, t1, sel) & ~hi) | (q8_perm(t2, t3, sel) & hi));
}
/* iq4_nl's grid (-127 ... 113) and lean4's (-127 ... 127) */
__host__ __device__ __forceinline__ int iq4_grid4(uint32_t w) { return grid4(w, 0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u); }
__host__ __device__ __forceinline__ int lean_grid4(uint32_t w) { return grid4(w, 0xc6b5a081u, 0xfaeee1d4u, 0x2c1f1206u, 0x7f604b3au); }

/* Sum of the codes of words k0..k1-1 (four each). */
__host__ __device__ __forceinline__ int csum(const int x[8], int k0, int k1) {
    int s = 0;
    for (int k = k0; k < k1; k++) s = q8_dp4a(0x01010101, x[k], s);
    return s;
}

/* Four trits of the bytes of u after multiplying each by p (tq1_0's base-3 digits, mod 256),
 * as bytes 0..2: ((byte * p) & 255) * 3 >> 8, in two 16-bit lanes at a time. */
__host__ __device__ __forceinline__ int trits4(uint32_t u, uint32_t p) {
    const uint32_t lo = ((u & 0x00ff00ffu) * p) & 0x00ff00ffu, hi = (((u >> 8) & 0x00ff00ffu) * p) & 0x00ff00ffu;
    return (int)((((lo * 3u) >> 8) & 0x00030003u) | ((((hi * 3u) >> 8) & 0x00030003u) << 8));
}

template <int T> struct q8w;

/* The 32-element blocks of 16 nibble bytes: d, with MIN the min m, with HIGH 4 bytes of fifth
 * bits, then the nibbles; value d * q + m (MIN), d * grid[q] (GRID: iq4_nl) or d * (q - OFF). */
template <int BYTES, bool MIN, bool HIGH, bool GRID, int OFF> struct q8w_nib {
    int w[8];
    float d, m;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)sb * BYTES, *p = b + (MIN ? 4 : 2);
        d = q8_ld_h(b);
        m = MIN ? q8_ld_h(b + 2) : 0.0f;
        uint32_t qh = 0;
        if (HIGH) ld_words<1>(p, &qh);
        nibbles16(p + (HIGH ? 4 : 0), w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = GRID ? iq4_grid4((uint32_t)w[k]) : w[k] | (int)high4(qh, k);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const {
        if (MIN) return d * (xs.x * (float)s) + m * xs.y;
        return d * (xs.x * (float)s - (float)OFF * xs.y);
    }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

template <> struct q8w<OB_TYPE_Q4_0> : q8w_nib<18, false, false, false, 8> {
    /* the packed row layout (cu_pack_rows): 16 code bytes at 16 sb, d after them (q8w_nib's load:
     * q4_1, q5_0, q5_1, iq4_nl) */
    template <bool A16 = false> __host__ __device__ __forceinline__ void load_packed(const uint8_t *row, int sb, int nb) {
        const cu_pk p = cu_pk_at<OB_TYPE_Q4_0>(row, nb, sb);
        uint32_t q[4];
        ld_words_row<4, A16>(p.codes, q);
        nibbles_of(q, w);
        d = q8_ld_h(p.d);
        m = 0.0f;
    }
};
template <> struct q8w<OB_TYPE_Q4_1> : q8w_nib<20, true, false, false, 0> {};
template <> struct q8w<OB_TYPE_Q5_0> : q8w_nib<22, false, true, false, 16> {};
template <> struct q8w<OB_TYPE_Q5_1> : q8w_nib<24, true, true, false, 0> {};
template <> struct q8w<OB_TYPE_IQ4_NL> : q8w_nib<18, false, false, true, 0> {};

template <> struct q8w<OB_TYPE_Q8_0> {
    int w[8];
    float d;
    /* the packed row layout (cu_pack_rows): 32 codes at 32 sb, d after them */
    template <bool A16 = false> __host__ __device__ __forceinline__ void load_packed(const uint8_t *row, int sb, int nb) {
        const cu_pk p = cu_pk_at<OB_TYPE_Q8_0>(row, nb, sb);
        ld_words_row<8, A16>(p.codes, (uint32_t *)w);
        d = q8_ld_h(p.d);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return d * (xs.x * (float)s); }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

/* q4_K, and with HIGH q5_K: d * sc * q - dmin * m; sub-block j takes nibble half j & 1 of bytes
 * 32 (j / 2) .. of qs, and q5_K bit 4 of element l from bit j of qh[l]. */
template <bool HIGH> struct q8w_k {
    int w[8];
    float d1, m1;
    template <bool A16 = false> __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * (HIGH ? 176 : 144), *qs = b + (HIGH ? 48 : 16) + 32 * ((sb & 7) >> 1);
        const int j = sb & 7, sh = 4 * (j & 1);
        int sc, m;
        uint32_t qh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (q8_al16<A16>(b)) { /* the header (d, dmin, the twelve scale bytes) in one load: k4_scale_min's bytes */
            uint32_t hd[4];
            ld_words16<4>(b, hd);
            const int i = 8 * (j & 3);
            const int a0 = (int)((hd[1] >> i) & 0xffu), a1 = (int)((hd[2] >> i) & 0xffu), a2 = (int)((hd[3] >> i) & 0xffu);
            sc = j < 4 ? a0 & 63 : (a2 & 0x0f) | ((a0 >> 6) << 4);
            m = j < 4 ? a1 & 63 : (a2 >> 4) | ((a1 >> 6) << 4);
            d1 = q8_h(hd[0] & 0xffffu) * (float)sc;
            m1 = q8_h(hd[0] >> 16) * (float)m;
            ld_words16<8>(qs, (uint32_t *)w);
            if (HIGH) ld_words16<8>(b + 16, qh);
        } else {
            k4_scale_min(j, b + 4, &sc, &m);
            d1 = q8_ld_h(b) * (float)sc;
            m1 = q8_ld_h(b + 2) * (float)m;
            ld_words<8>(qs, (uint32_t *)w);
            if (HIGH) ld_words<8>(b + 16, qh);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)((((uint32_t)w[k] >> sh) & 0x0f0f0f0fu) | (((qh[k] >> j) & 0x01010101u) << 4));
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return d1 * (xs.x * (float)s) - m1 * xs.y; }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

template <> struct q8w<OB_TYPE_Q4_K> : q8w_k<false> {};
template <> struct q8w<OB_TYPE_Q5_K> : q8w_k<true> {};

template <> struct q8w<OB_TYPE_IQ4_XS> { /* d * (ls - 32) * grid[q], a 6-bit ls per sub-block */
    int w[8];
    float dl;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 136;
        const int j = sb & 7;
        const unsigned sh = (unsigned)(b[2] | (b[3] << 8));
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (int)(((sh >> (2 * j)) & 3) << 4);
        dl = q8_ld_h(b) * (float)(ls - 32);
        nibbles16(b + 8 + 16 * j, w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = iq4_grid4((uint32_t)w[k]);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return dl * (xs.x * (float)s); }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

template <> struct q8w<OB_TYPE_TQ1_0> { /* (trit - 1) * d; 5 trits a byte in qs[0..47], 4 in qh[0..3] */
    int w[8];
    float d;
    /* Without branches on j: the lanes of a warp take sub-blocks of every j (lane l: sb = l, l + 32,
     * ...), so branches on j ran the three layouts one after another (tg128 of BitNet-2B TQ1_0
     * 383.6 -> 478.4 tok/s without them, docs/bench.md run 7). Word k of codes is
     * trit t of the four bytes at src: j < 5: bytes 4 k.. of 0..31, t = j; j >= 5: bytes 32 + 4 (k
     * & 3).. with t = 2 (j - 5) + (k >= 4), except t = 5 (j = 7, k >= 4): bytes 48..51 with t = k -
     * 4. The block's first 52 bytes are read once. */
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 54;
        const int j = sb & 7, hi = j >= 5;
        uint32_t q[13];
        ld_words<13>(b, q);
        const uint64_t pow3 = 0x51ull << 32 | 0x1b090301u; /* 3^t in byte t */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int t = hi ? 2 * (j - 5) + (k >= 4) : j;
            const uint32_t src = !hi ? q[k] : t < 5 ? q[8 + (k & 3)] : q[12];
            const int e = t < 5 ? t : k - 4;
            w[k] = trits4(src, (uint32_t)(pow3 >> (8 * e)) & 0xffu);
        }
        d = q8_ld_h(b + 52);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return d * (xs.x * (float)s - xs.y); }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

template <> struct q8w<OB_TYPE_Q2_K> { /* d * (sc & 15) * q - dmin * (sc >> 4), one scale byte per 16 elements */
    int w[8];
    float d, dmin;
    int sc0, sc1;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 84;
        const int j = sb & 7, sh = 2 * (j & 3);
        ld_words<8>(b + 16 + 32 * (j >> 2), (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x03030303u);
        sc0 = b[2 * j];
        sc1 = b[2 * j + 1];
        d = q8_ld_h(b + 80);
        dmin = q8_ld_h(b + 82);
    }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const {
        const int a = (sc0 & 15) * dp8(w, x, 0, 4) + (sc1 & 15) * dp8(w, x, 4, 8);
        const int m = (sc0 >> 4) * csum(x, 0, 4) + (sc1 >> 4) * csum(x, 4, 8);
        return xs.x * (d * (float)a - dmin * (float)m);
    }
};

template <> struct q8w<OB_TYPE_Q3_K> { /* d * (6-bit scale - 32) * (q | hmask bit << 2) - 4), scale per 16 */
    int w[8];
    float d;
    int sc0, sc1;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 3) * 110;
        const int j = sb & 7, sh = 2 * (j & 3);
        uint32_t hm[8];
        ld_words<8>(b + 32 + 32 * (j >> 2), (uint32_t *)w);
        ld_words<8>(b, hm);
#pragma unroll
        for (int k = 0; k < 8; k++)
            w[k] = (int)q8_vsub4((((uint32_t)w[k] >> sh) & 0x03030303u) | (((hm[k] >> j) & 0x01010101u) << 2), 0x04040404u);
        const uint8_t *s = b + 96;
        const int g0 = 2 * j, g1 = 2 * j + 1;
        sc0 = ((g0 < 8 ? s[g0] & 15 : s[g0 - 8] >> 4) | (((s[8 + g0 % 4] >> (2 * (g0 / 4))) & 3) << 4)) - 32;
        sc1 = ((g1 < 8 ? s[g1] & 15 : s[g1 - 8] >> 4) | (((s[8 + g1 % 4] >> (2 * (g1 / 4))) & 3) << 4)) - 32;
        d = q8_ld_h(b + 108);
    }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const {
        return d * (xs.x * (float)(sc0 * dp8(w, x, 0, 4) + sc1 * dp8(w, x, 4, 8)));
    }
};

template <> struct q8w<OB_TYPE_LEAN4> { /* d_half * grid[q] of rotated rows; elements 0-63 low nibbles, 64-127 high */
    int w[8];
    float d;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 2) * 68;
        const int e0 = 32 * (sb & 3), hi = e0 >= 64;
        d = q8_ld_h(b + 2 * hi);
        ld_words<8>(b + 4 + (e0 & 63), (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = lean_grid4(((uint32_t)w[k] >> (4 * hi)) & 0x0f0f0f0fu);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return d * (xs.x * (float)s); }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

/* Build option (default on since run 18; 0 for an A/B): the held rows (gv_rows_q8_held) take
 * q6_K's 32 times the activation's sums once for all rows instead of in every dot (q8_xpre):
 * the 1B Q4_K_M's q6_K ffn_down 13.25 -> 12.46 us a layer (eager profile), tg128 within noise. */
#ifndef OB_CUDA_Q6K_PRE
#define OB_CUDA_Q6K_PRE 1
#endif
template <> struct q8w<OB_TYPE_Q6_K> { /* (ql | qh << 4) - 32, one int8 scale per 16 elements; w: ql | qh << 4 */
    int w[8];
    float d;
    int sc0, sc1;
    /* the packed row layout (cu_pack_rows): the block's 192 code bytes 16-byte
     * aligned where the row is, its scales and d after every block's codes */
    template <bool A16 = false> __host__ __device__ __forceinline__ void load_packed(const uint8_t *row, int sb, int nb) {
        const cu_pk p = cu_pk_at<OB_TYPE_Q6_K>(row, nb, sb >> 3);
        const int j = sb & 7, h = j >> 2, g = j & 3;
        uint32_t ql[8], qh[8];
        ld_words_row<8, A16>(p.codes + 64 * h + 32 * (g & 1), ql);
        ld_words_row<8, A16>(p.codes + 128 + 32 * h, qh);
        unpack(ql, qh, g);
        d = q8_ld_h(p.d);
        sc0 = (int8_t)p.scales[8 * h + 2 * g];
        sc1 = (int8_t)p.scales[8 * h + 2 * g + 1];
    }
    /* codes ql | qh << 4 of group g (0..63, so also their signed bytes); dot takes the 32 off */
    __host__ __device__ __forceinline__ void unpack(const uint32_t ql[8], const uint32_t qh[8], int g) {
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((ql[k] >> (4 * (g >> 1))) & 0x0f0f0f0fu) | (((qh[k] >> (2 * g)) & 0x03030303u) << 4));
    }
    /* sum (q - 32) x = sum q x - 32 sum x, the same integers: the second term (terms) depends on
     * the activation only, so a caller holding x over rows (gv_rows_q8_held) can take it once
     * (q8_xpre / q8_dot_pre, with OB_CUDA_Q6K_PRE). Run 17: the 1B's q6_K output matrix 71.9 ->
     * 67.0 us a token against one __vsub4 a word of codes. */
    __host__ __device__ __forceinline__ static int2 terms(const int x[8]) { return make_int2(-32 * csum(x, 0, 4), -32 * csum(x, 4, 8)); }
    __host__ __device__ __forceinline__ float dot_with(const int x[8], float2 xs, int2 p) const {
        return d * (xs.x * (float)(sc0 * (dp8(w, x, 0, 4) + p.x) + sc1 * (dp8(w, x, 4, 8) + p.y)));
    }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return dot_with(x, xs, terms(x)); }
};

template <> struct q8w<OB_TYPE_TQ2_0> { /* (q - 1) * d, sub-block j: bits 2 (j & 3) of bytes 32 (j / 4) .. */
    int w[8];
    float d;
    /* the packed row layout (cu_pack_rows): 64 code bytes at 64 k, d after them */
    template <bool A16 = false> __host__ __device__ __forceinline__ void load_packed(const uint8_t *row, int sb, int nb) {
        const cu_pk p = cu_pk_at<OB_TYPE_TQ2_0>(row, nb, sb >> 3);
        const int j = sb & 7, sh = 2 * (j & 3);
        ld_words_row<8, A16>(p.codes + 32 * (j >> 2), (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x03030303u);
        d = q8_ld_h(p.d);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return d * (xs.x * (float)s - xs.y); }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

template <> struct q8w<OB_TYPE_I2_S> { /* q - 1 (the tensor scale comes after); group g: bits 6 - 2 g of the block's bytes */
    int w[8];
    template <bool A16 = false> __host__ __device__ __forceinline__ void load(const uint8_t *row, int sb) {
        const uint8_t *b = row + (size_t)(sb >> 2) * 32;
        const int sh = 6 - 2 * (sb & 3);
        if (q8_al16<A16>(b)) ld_words16<8>(b, (uint32_t *)w);
        else ld_words<8>(b, (uint32_t *)w);
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = (int)(((uint32_t)w[k] >> sh) & 0x03030303u);
    }
    __host__ __device__ __forceinline__ float scale(int s, float2 xs) const { return xs.x * (float)s - xs.y; }
    __host__ __device__ __forceinline__ float dot(const int x[8], float2 xs) const { return scale(dp8(w, x, 0, 8), xs); }
};

/* the unpacked types whose load takes A16 (their blocks are multiples of 16 bytes) */
__host__ __device__ constexpr bool q8_loads_a16(int t) { return t == OB_TYPE_Q4_K || t == OB_TYPE_Q5_K || t == OB_TYPE_I2_S; }
/* q8w<T>::load of a row as uploaded (rb: the row's bytes, which give nb; load_packed for the
 * packed types); A16: the row is 16-byte aligned, known to the caller. */
template <int T, bool A16 = false> __host__ __device__ __forceinline__ void q8_load(q8w<T> &W, const uint8_t *row, int sb, size_t rb) {
    if constexpr (cu_packed_type(T)) W.template load_packed<A16>(row, sb, (int)(rb / cu_type<T>::bytes));
    else if constexpr (q8_loads_a16(T)) W.template load<A16>(row, sb);
    else W.load(row, sb);
}

/* The terms of a sub-block's dot that depend on the activation's codes only (q6_K's 32 times
 * their sums, with OB_CUDA_Q6K_PRE; else none), for callers that hold the codes over many rows;
 * q8_dot_pre takes them (W.dot where there are none). */
template <int T> __host__ __device__ __forceinline__ int2 q8_xpre(const int x[8]) {
    if constexpr (T == OB_TYPE_Q6_K && OB_CUDA_Q6K_PRE) return q8w<T>::terms(x);
    else return make_int2(0, 0);
}
template <int T> __host__ __device__ __forceinline__ float q8_dot_pre(const q8w<T> &W, const int x[8], float2 xs, int2 p) {
    if constexpr (T == OB_TYPE_Q6_K && OB_CUDA_Q6K_PRE) return W.dot_with(x, xs, p);
    else return W.dot(x, xs);
}

#endif
