/* cuda_attn_mma.cu — prompt attention on the tensor cores (the default for f16 caches of head
 * size 64 or 128; OB_CUDA_ATTN_TILES=f32 keeps the float32 kernel).
 *
 * Owns: k_attn_mma, for a prompt chunk (one sequence's consecutive positions, as
 * cu_attention_tiles checks) over f16 K/V caches with head size 64 or 128. One block of 4 warps
 * per (query head, 64 consecutive tokens), the chunk's last query blocks (the longest walks)
 * scheduled first; warp w owns queries 16 w .. 16 w + 15 and keeps them as f16 A fragments of
 * mma.sync.m16n8k16 (scaled by a.scale * log2 e before the conversion: scores in base 2, each
 * probability one ex2). The cache is walked in tiles of 64 positions, K and V rows as stored
 * (positions x dims, f16) in shared memory with rows padded by 8 halves, two buffers: the next
 * tile's rows are copied asynchronously (cp.async) while the warps compute on the current one.
 * Both operands' B fragments come from ldmatrix (four 8x8 matrices an instruction; V's
 * transposed). Per tile a warp computes its 16 x 64 scores with f32 accumulators, masks positions
 * past each query's own (only on tiles that cross its queries; a warp whose queries all precede
 * the tile skips it), keeps each row's online softmax (a row's scores lie in the four lanes of a
 * quad: shuffles), turns the probabilities into f16 A fragments in registers (the accumulator
 * layout of S is the A layout of P . V) and accumulates its 16 x head-size outputs in f32.
 * Against the kernel before the pipeline (V transposed by 2-byte stores, synchronous tile loads):
 * pp4096 +31% to +61%, pp512 +8% to +12% (docs/bench.md, run 13).
 * Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, c = lane % 4): A regs {row g, cols 2c, 2c+1},
 * {row g+8, same}, {row g, cols 2c+8, 2c+9}, {row g+8, same}; B regs {k 2c, 2c+1; n g},
 * {k 2c+8, 2c+9; n g}; C {row g, cols 2c, 2c+1}, {row g+8, same}.
 * Precision: Q and P in f16 (K and V are f16 in the cache already), sums in f32: errors near
 * 1e-3, where the float32 tiled kernel (cuda_attn.cu) matches the reference to 2e-5.
 * Does not own: the choice of kernel (cuda_attn.cu, cu_attention_tiles), the cache writes.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "backend/cuda/cuda_int.h"

#define MT_Q 64  /* queries per block: 16 per warp */
#define MT_K 64  /* cache positions per tile */
#define MT_THREADS 128

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

template <int D> constexpr size_t mp_smem() { return (size_t)2 * 2 * MT_K * (D + 8) * sizeof(__half); }

template <int D>
__global__ void __launch_bounds__(MT_THREADS) k_attn_mma(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb) {
    constexpr int LD = D + 8; /* halves per K / V row in shared memory (16-byte rows, conflict-free ldmatrix) */
    extern __shared__ __align__(16) __half mp_sm[];
    /* buffer b: K rows at mp_sm + b * MT_K * LD, V rows at mp_sm + (2 + b) * MT_K * LD */
    cu_dep();
    const int h = blockIdx.x, i0 = (gridDim.y - 1 - blockIdx.y) * MT_Q, nq = min(MT_Q, a.n - i0);
    const int kh = h / (a.n_head / a.n_head_kv), t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, c = lane & 3;
    const int p_first = a.pos[i0], p_last = p_first + nq - 1;
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i0] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i0] * a.n_ctx * vrb + (size_t)kh * vhb;
    const int r0 = warp * 16 + g, r1 = r0 + 8; /* this thread's two query rows of the block */
    const int pq0 = p_first + r0, pq1 = p_first + r1, pw_first = p_first + warp * 16, pw_last = pw_first + 15;

    /* tile k0's rows into buffer b; rows past p_last are zeros (a cache row not yet written may
     * hold anything, and V's must not meet a zero probability as a NaN) */
    auto load = [&](int k0, int b) {
        for (int e = t; e < MT_K * D / 8; e += MT_THREADS) {
            const int r = e / (D / 8), w = e % (D / 8), p = k0 + r, ok = p <= p_last;
            const size_t pr = ok ? (size_t)p : 0;
            mp_cp16(mp_sm + (b * MT_K + r) * LD + 8 * w, kb + pr * krb + 16 * w, ok ? 16 : 0);
            mp_cp16(mp_sm + ((2 + b) * MT_K + r) * LD + 8 * w, vb + pr * vrb + 16 * w, ok ? 16 : 0);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    load(0, 0);

    uint32_t qf[D / 16][4];
    {
        const float *q0 = a.q + ((size_t)(i0 + r0) * a.n_head + h) * D, *q1 = a.q + ((size_t)(i0 + r1) * a.n_head + h) * D;
        const float2 zero = make_float2(0.0f, 0.0f);
        const float sc = a.scale * MP_LOG2E;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const int d0 = 16 * kk + 2 * c, d1 = d0 + 8;
            const float2 x00 = r0 < nq ? *(const float2 *)(q0 + d0) : zero, x10 = r1 < nq ? *(const float2 *)(q1 + d0) : zero;
            const float2 x01 = r0 < nq ? *(const float2 *)(q0 + d1) : zero, x11 = r1 < nq ? *(const float2 *)(q1 + d1) : zero;
            qf[kk][0] = mt_h2(x00.x * sc, x00.y * sc);
            qf[kk][1] = mt_h2(x10.x * sc, x10.y * sc);
            qf[kk][2] = mt_h2(x01.x * sc, x01.y * sc);
            qf[kk][3] = mt_h2(x11.x * sc, x11.y * sc);
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* l: this lane's share of the row sum */
    const int lr = lane & 7, lm = lane >> 3; /* this lane's row of ldmatrix matrix lm */

    for (int k0 = 0, b = 0; k0 <= p_last; k0 += MT_K, b ^= 1) {
        if (k0 + MT_K <= p_last) {
            load(k0 + MT_K, b ^ 1); /* (its buffer's readers finished at the end of the last tile) */
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        if (k0 <= pw_last) { /* else every query of the warp precedes the tile */
            const __half *Ks = mp_sm + b * MT_K * LD, *Vs = mp_sm + (2 + b) * MT_K * LD;
            float sc[MT_K / 8][4];
#pragma unroll
            for (int j = 0; j < MT_K / 8; j++) {
                sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk += 2) { /* dims 16 kk .. 16 kk + 31 of positions 8 j .. 8 j + 7 */
                    uint32_t kf[4];
                    mp_ldsm4<false>(kf, &Ks[(8 * j + lr) * LD + 16 * kk + 8 * lm]);
                    mma_16816(sc[j], qf[kk], kf[0], kf[1]);
                    mma_16816(sc[j], qf[kk + 1], kf[2], kf[3]);
                }
            }
            float mx0 = -INFINITY, mx1 = -INFINITY;
            if (k0 + MT_K - 1 > pw_first) { /* the tile crosses some of the warp's queries */
#pragma unroll
                for (int j = 0; j < MT_K / 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int key = k0 + 8 * j + 2 * c + e;
                        if (key > pq0) sc[j][e] = -INFINITY;
                        if (key > pq1) sc[j][2 + e] = -INFINITY;
                    }
            }
#pragma unroll
            for (int j = 0; j < MT_K / 8; j++) {
                mx0 = fmaxf(mx0, fmaxf(sc[j][0], sc[j][1]));
                mx1 = fmaxf(mx1, fmaxf(sc[j][2], sc[j][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            /* finite: position 0 is in every row's first tile (there ex2(-inf) = 0 rescales nothing) */
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
#pragma unroll
            for (int kk = 0; kk < MT_K / 16; kk++) {
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
                    mp_ldsm4<true>(vf, &Vs[(16 * kk + 8 * (lm & 1) + lr) * LD + 8 * j + 8 * (lm >> 1)]);
                    mma_16816(o[j], pa, vf[0], vf[1]);
                    mma_16816(o[j + 1], pa, vf[2], vf[3]);
                }
            }
        }
        __syncthreads(); /* the buffer is free for the tile after next */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0 ? 1.0f / l0 : 0.0f, inv1 = l1 > 0 ? 1.0f / l1 : 0.0f;
    float *out0 = a.out + ((size_t)(i0 + r0) * a.n_head + h) * D, *out1 = a.out + ((size_t)(i0 + r1) * a.n_head + h) * D;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        if (r0 < nq) *(float2 *)(out0 + 8 * j + 2 * c) = make_float2(o[j][0] * inv0, o[j][1] * inv0);
        if (r1 < nq) *(float2 *)(out1 + 8 * j + 2 * c) = make_float2(o[j][2] * inv1, o[j][3] * inv1);
    }
}

void cu_attention_mma_init(cu_state *s) {
    cu_check(cudaFuncSetAttribute(k_attn_mma<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mp_smem<64>()),
             "attention tensor cores (shared memory)");
    cu_check(cudaFuncSetAttribute(k_attn_mma<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mp_smem<128>()),
             "attention tensor cores (shared memory)");
}

int cu_attention_mma(cu_state *s, const ob_attn_args *a, size_t krb, size_t vrb, size_t khb, size_t vhb) {
    if (a->type_k != OB_TYPE_F16 || a->type_v != OB_TYPE_F16 || (a->head_dim != 64 && a->head_dim != 128)) return 0;
    dim3 grid((unsigned)a->n_head, (unsigned)((a->n + MT_Q - 1) / MT_Q));
    if (a->head_dim == 64) cu_launch(s, "attention (tensor cores)", grid, MT_THREADS, mp_smem<64>(), k_attn_mma<64>, *a, krb, vrb, khb, vhb);
    else cu_launch(s, "attention (tensor cores)", grid, MT_THREADS, mp_smem<128>(), k_attn_mma<128>, *a, krb, vrb, khb, vhb);
    return 1;
}
