/* cuda_grid.cuh — the grid barrier of the kernels whose blocks are all resident at once (the
 * whole-layer decode kernel, cuda_layer.cu; the one-token feed-forward kernel, cuda_ffn.cu). Its
 * state is two counters in global memory, zero before the first launch: [0] blocks arrived,
 * [1] generation. A block that never comes (not all resident) traps after about 2^33 cycles
 * instead of hanging.
 */
#ifndef OB_CUDA_GRID_CUH
#define OB_CUDA_GRID_CUH

__device__ __forceinline__ unsigned grid_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned grid_ld_relaxed(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Every block's writes before it are seen by every block after it (the acquire also drops the
 * SM's L1 copies of what other blocks wrote). */
__device__ __forceinline__ void grid_sync(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = grid_ld_acquire(bar + 1); /* read before arriving: it cannot move on before */
        __threadfence();
        if (atomicAdd(bar, 1) == gridDim.x - 1) {
            atomicExch(bar, 0);
            __threadfence();
            atomicAdd(bar + 1, 1);
        } else {
            const long long t0 = clock64();
            while (grid_ld_relaxed(bar + 1) == gen)
                if (clock64() - t0 > (1ll << 33)) __trap(); /* a block never came: not all resident */
        }
        grid_ld_acquire(bar + 1);
    }
    __syncthreads();
}

#endif
