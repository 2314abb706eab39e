/* cuda_bulk.cuh — Hopper's bulk copies (TMA, sm_90): global memory into shared memory, counted on a
 * shared-memory barrier (mbarrier), issued by one thread. Used by the one-token feed-forward
 * kernel (cuda_ffn.cu) and bench/cuda/tmabw.cu. Before sm_90 the three compile to nothing: their
 * callers take another path there.
 */
#ifndef OB_CUDA_BULK_CUH
#define OB_CUDA_BULK_CUH

#include <stdint.h>

/* n bytes (a multiple of 16, both ends 16-byte aligned) from global src to shared dst, counted on
 * the shared-memory barrier bar (bulk_bar_init's transaction bytes). */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned n, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(n), "r"((unsigned)__cvta_generic_to_shared(bar))
                 : "memory");
#endif
}
__device__ __forceinline__ void bulk_bar_init(uint64_t *bar, unsigned tx) { /* one thread, then __syncthreads: phase 0 completes once tx bytes have arrived */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(tx) : "memory");
#endif
}
__device__ __forceinline__ void bulk_bar_wait(uint64_t *bar) { /* phase 0 complete */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b) : "memory");
#endif
}

#endif
