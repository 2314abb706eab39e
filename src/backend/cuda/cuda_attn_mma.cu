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
 * The tile walk, the fragments and the softmax step are cuda_mma.cuh's (shared with the grouped
 * decode kernel, cuda_attn_gqa.cu).
 * Precision: Q and P in f16 (K and V are f16 in the cache already), sums in f32: errors near
 * 1e-3, where the float32 tiled kernel (cuda_attn.cu) matches the reference to 2e-5.
 * Does not own: the choice of kernel (cuda_attn.cu, cu_attention_tiles), the cache writes.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_mma.cuh"

#define MT_Q 64  /* queries per block: 16 per warp */
#define MT_THREADS 128

template <int D>
__global__ void __launch_bounds__(MT_THREADS) k_attn_mma(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb) {
    extern __shared__ __align__(16) __half mp_sm[];
    cu_dep();
    const int h = blockIdx.x, i0 = (gridDim.y - 1 - blockIdx.y) * MT_Q, nq = min(MT_Q, a.n - i0);
    const int kh = h / (a.n_head / a.n_head_kv), lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int p_first = a.pos[i0], p_last = p_first + nq - 1;
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i0] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i0] * a.n_ctx * vrb + (size_t)kh * vhb;
    const int r0 = warp * 16 + g, r1 = r0 + 8; /* this thread's two query rows of the block */
    const int pq0 = p_first + r0, pq1 = p_first + r1, pw_first = p_first + warp * 16, pw_last = pw_first + 15;
    mp_tile<D, MT_THREADS>(mp_sm, 0, kb, vb, krb, vrb, 0, p_last);

    uint32_t qf[D / 16][4];
    mp_qfrag<D>(qf, a.q + ((size_t)(i0 + r0) * a.n_head + h) * D, a.q + ((size_t)(i0 + r1) * a.n_head + h) * D, r0 < nq, r1 < nq,
                a.scale * MP_LOG2E);
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* l: this lane's share of the row sum */
    mp_walk<D, MT_THREADS>(mp_sm, kb, vb, krb, vrb, p_last, [&](const __half *Ks, const __half *Vs, int k0) {
        if (k0 <= pw_last) /* else every query of the warp precedes the tile; the mask only where the tile crosses its queries */
            mp_step<D, MP_K / 8>(Ks, Vs, 0, k0, k0 + MP_K - 1 > pw_first, pq0, pq1, qf, o, m0, m1, l0, l1);
    });
    mp_sums(l0, l1);
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
