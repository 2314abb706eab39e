/* cuda_stage.cuh — staging weight rows in shared memory, the per-row sum layout of the int8
 * decode matmuls and their epilogue, shared by the decode matmul kernel (cuda_gemv.cu) and the whole-layer decode
 * kernel (cuda_layer.cu), so that both make the same sums.
 */
#ifndef OB_CUDA_STAGE_CUH
#define OB_CUDA_STAGE_CUH

#include <cuda_pipeline.h>
#include <stdint.h>

/* Rows of at least this many 32-element sub-blocks are split over four warps (warp w, lane l:
 * sub-blocks 32 w + l, + 128, ...), shorter ones take one warp (lane l: l, l + 32, ...). 80 (BitNet's
 * 2560-value rows on four warps, at most one sub-block a thread, instead of three on half the
 * lanes of one warp) measured 1.8% slower on BitNet-2B I2_S (docs/bench.md, run 10). */
#define GV_SPLIT_SB 128

/* Shared memory for a staged span of len bytes: up to 15 bytes before and after it come along,
 * and the next span starts 16-byte aligned. */
__host__ __device__ __forceinline__ size_t gv_span(size_t len) { return (len + 30 + 15) & ~(size_t)15; }

/* Copies bytes [src, src + len) to dst (16-byte aligned) from the 16-byte boundary below src with
 * the TH threads of the block; returns where src's first byte landed. Reads up to 15 bytes on
 * each side of the span, inside the same 16-byte words (uploads are padded: cuda_backend.cu). */
template <int TH> __device__ __forceinline__ const uint8_t *gv_stage(uint8_t *dst, const uint8_t *src, size_t len) {
    const uintptr_t a = (uintptr_t)src, a0 = a & ~(uintptr_t)15;
    const int n16 = (int)((a - a0 + len + 15) >> 4);
    for (int i = threadIdx.x; i < n16; i += TH) __pipeline_memcpy_async(dst + 16 * i, (const void *)(a0 + 16 * (size_t)i), 16);
    return dst + (a - a0);
}

/* The warp's sum of each lane's v (one shuffle tree for every decode-matmul row sum, and the
 * one-token feed-forward kernel's, cuda_ffn.cu). */
__device__ __forceinline__ float gv_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* What a decode matmul does with a row's sum: store it, add it (the residual), or GLU. */
enum { GV_STORE, GV_ADD, GV_GLU };

/* Output y of a row from its scaled sum v (GLU: the gate row's, u the up row's): y = act(v) * u
 * (SiLU, or relu^2; k_glu's too), y += v, or y = v. */
__device__ __forceinline__ void gv_out(float *yp, int ep, int relu2, float v, float u) {
    if (ep == GV_GLU) {
        float act;
        if (!relu2) {
            act = v / (1.0f + expf(-v));
        } else {
            const float p = v > 0 ? v : 0;
            act = p * p;
        }
        v = act * u;
    } else if (ep == GV_ADD) {
        v += __ldcg(yp); /* (from L2: other blocks of a persistent kernel wrote it) */
    }
    *yp = v;
}

#endif
