/* cuda_mma.cuh — the tensor-core attention kernels' building blocks (cuda_attn_mma.cu's prompt
 * kernel, cuda_attn_gqa.cu's grouped decode kernel): mma.sync m16n8k16 on f16 with f32
 * accumulators, f16x2 packing, 16-byte cp.async with zero fill, ldmatrix, ex2.
 * Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, c = lane % 4): A regs {row g, cols 2c, 2c+1},
 * {row g+8, same}, {row g, cols 2c+8, 2c+9}, {row g+8, same}; B regs {k 2c, 2c+1; n g},
 * {k 2c+8, 2c+9; n g}; C {row g, cols 2c, 2c+1}, {row g+8, same}.
 */
#ifndef OB_CUDA_MMA_CUH
#define OB_CUDA_MMA_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* (x, y) as f16x2: x in the low half (the lower-indexed element of a fragment register). */
__device__ __forceinline__ uint32_t mt_h2(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *(const uint32_t *)&h;
}

#define MP_LOG2E 1.4426950408889634f

__device__ __forceinline__ void mp_cp16(void *dst, const void *src, int bytes) { /* bytes 0: zeros */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}

/* Four 8x8 b16 matrices of shared memory (lanes 8m..8m+7 address matrix m's rows) as fragment
 * registers r[m]; T: transposed. */
template <bool T> __device__ __forceinline__ void mp_ldsm4(uint32_t (&r)[4], const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if constexpr (T)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ float mp_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* ---- walking a sequence's f16 K/V cache in tiles (both attention kernels) ------------------ */

#define MP_K 64 /* cache positions a tile */

/* Shared memory of the walk: two buffers of K and V tiles, rows of D + 8 halves (16-byte rows,
 * ldmatrix without bank conflicts): buffer b's K rows at sm + b MP_K (D + 8), V rows at
 * sm + (2 + b) MP_K (D + 8). */
template <int D> __host__ __device__ constexpr size_t mp_smem() { return (size_t)2 * 2 * MP_K * (D + 8) * sizeof(__half); }

/* Tile k0's K and V rows (kb / vb: the sequence's cache of the KV head, rows krb / vrb bytes apart)
 * into buffer b by the TH threads of the block, asynchronously (one commit group); rows past
 * p_last are zeros (a cache row not yet written may hold anything, and V's must not meet a zero
 * probability as a NaN). */
template <int D, int TH>
__device__ __forceinline__ void mp_tile(__half *sm, int b, const uint8_t *kb, const uint8_t *vb, size_t krb, size_t vrb, int k0, int p_last) {
    constexpr int LD = D + 8;
    for (int e = threadIdx.x; e < MP_K * D / 8; e += TH) {
        const int r = e / (D / 8), w = e % (D / 8), p = k0 + r, ok = p <= p_last;
        const size_t pr = ok ? (size_t)p : 0;
        mp_cp16(sm + (b * MP_K + r) * LD + 8 * w, kb + pr * krb + 16 * w, ok ? 16 : 0);
        mp_cp16(sm + ((2 + b) * MP_K + r) * LD + 8 * w, vb + pr * vrb + 16 * w, ok ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Walks positions k_first .. p_last (k_first a multiple of MP_K) in tiles: while step(Ks, Vs, k0)
 * computes on one tile (every thread of the block calls it), the next is copied into the other
 * buffer (buffer 1 first, at once). The first tile must have been issued into buffer 0 before
 * (mp_tile(sm, 0, ..., k_first, p_last), or a smaller bound whose missing rows step puts in
 * itself); ends with the block past a barrier (sm reusable). */
template <int D, int TH, typename F>
__device__ __forceinline__ void mp_walk(__half *sm, const uint8_t *kb, const uint8_t *vb, size_t krb, size_t vrb, int p_last, F step,
                                        int k_first = 0) {
    constexpr int LD = D + 8;
    for (int k0 = k_first, b = 0; k0 <= p_last; k0 += MP_K, b ^= 1) {
        if (k0 + MP_K <= p_last) {
            mp_tile<D, TH>(sm, b ^ 1, kb, vb, krb, vrb, k0 + MP_K, p_last); /* (its readers passed the last barrier) */
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        step((const __half *)sm + b * MP_K * LD, (const __half *)sm + (2 + b) * MP_K * LD, k0);
        __syncthreads(); /* the buffer is free for the tile after next */
    }
}

/* A warp's 16 rows of queries as A fragments (this lane's rows: q0 and q1, each D floats, zeros
 * where !ok), scaled by sc. */
template <int D>
__device__ __forceinline__ void mp_qfrag(uint32_t (&qf)[D / 16][4], const float *q0, const float *q1, bool ok0, bool ok1, float sc) {
    const int c = threadIdx.x & 3;
    const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const int d0 = 16 * kk + 2 * c, d1 = d0 + 8;
        const float2 x00 = ok0 ? *(const float2 *)(q0 + d0) : zero, x10 = ok1 ? *(const float2 *)(q1 + d0) : zero;
        const float2 x01 = ok0 ? *(const float2 *)(q0 + d1) : zero, x11 = ok1 ? *(const float2 *)(q1 + d1) : zero;
        qf[kk][0] = mt_h2(x00.x * sc, x00.y * sc);
        qf[kk][1] = mt_h2(x10.x * sc, x10.y * sc);
        qf[kk][2] = mt_h2(x01.x * sc, x01.y * sc);
        qf[kk][3] = mt_h2(x11.x * sc, x11.y * sc);
    }
}

/* A warp's online softmax over NJ groups of 8 positions (NJ even): tile rows kr0 .. kr0 + 8 NJ - 1
 * (positions k0 + kr0 ..) of Ks / Vs against its 16 rows of queries qf (scores in base 2); with
 * mask, keys past pq0 / pq1 (this lane's rows' last positions) are left out. m / l: this lane's
 * rows' running maxima and its share of their sums; o: its outputs (C fragments over D / 8
 * groups of 8 dims). Every row must have a position before this step or in it (so its max is
 * finite: ex2(-inf) = 0 then rescales nothing). */
template <int D, int NJ>
__device__ __forceinline__ void mp_step(const __half *Ks, const __half *Vs, int kr0, int k0, bool mask, int pq0, int pq1,
                                        const uint32_t (&qf)[D / 16][4], float (&o)[D / 8][4], float &m0, float &m1, float &l0, float &l1) {
    constexpr int LD = D + 8;
    const int lane = threadIdx.x & 31, c = lane & 3, lr = lane & 7, lm = lane >> 3; /* lane: row lr of ldmatrix matrix lm */
    float sc[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) { /* dims 16 kk .. 16 kk + 31 of positions 8 j .. 8 j + 7 */
            uint32_t kf[4];
            mp_ldsm4<false>(kf, &Ks[(kr0 + 8 * j + lr) * LD + 16 * kk + 8 * lm]);
            mma_16816(sc[j], qf[kk], kf[0], kf[1]);
            mma_16816(sc[j], qf[kk + 1], kf[2], kf[3]);
        }
    }
    if (mask)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = k0 + kr0 + 8 * j + 2 * c + e;
                if (key > pq0) sc[j][e] = -INFINITY;
                if (key > pq1) sc[j][2 + e] = -INFINITY;
            }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        mx0 = fmaxf(mx0, fmaxf(sc[j][0], sc[j][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[j][2], sc[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float cr0 = mp_ex2(m0 - mn0), cr1 = mp_ex2(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    l0 *= cr0;
    l1 *= cr1;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        o[j][0] *= cr0;
        o[j][1] *= cr0;
        o[j][2] *= cr1;
        o[j][3] *= cr1;
    }
    /* probabilities as A fragments (16 positions a step), then outputs += P . V */
#pragma unroll
    for (int kk = 0; kk < NJ / 2; kk++) {
        float p[2][4];
#pragma unroll
        for (int jj = 0; jj < 2; jj++) {
            const float *sj = sc[2 * kk + jj];
            p[jj][0] = mp_ex2(sj[0] - mn0); /* masked: ex2(-inf) = 0 */
            p[jj][1] = mp_ex2(sj[1] - mn0);
            p[jj][2] = mp_ex2(sj[2] - mn1);
            p[jj][3] = mp_ex2(sj[3] - mn1);
            l0 += p[jj][0] + p[jj][1];
            l1 += p[jj][2] + p[jj][3];
        }
        const uint32_t pa[4] = {mt_h2(p[0][0], p[0][1]), mt_h2(p[0][2], p[0][3]), mt_h2(p[1][0], p[1][1]), mt_h2(p[1][2], p[1][3])};
#pragma unroll
        for (int j = 0; j < D / 8; j += 2) { /* positions 16 kk .. 16 kk + 15 of dims 8 j .. 8 j + 15 */
            uint32_t vf[4];
            mp_ldsm4<true>(vf, &Vs[(kr0 + 16 * kk + 8 * (lm & 1) + lr) * LD + 8 * j + 8 * (lm >> 1)]);
            mma_16816(o[j], pa, vf[0], vf[1]);
            mma_16816(o[j + 1], pa, vf[2], vf[3]);
        }
    }
}

/* The row sums of this lane's two rows over their quads. */
__device__ __forceinline__ void mp_sums(float &l0, float &l1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
}

#endif /* OB_CUDA_MMA_CUH */
