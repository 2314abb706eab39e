/* cuda_grid.cuh — the grid barriers of the kernels whose blocks are all resident at once (the
 * whole-layer decode kernel, cuda_layer.cu; the one-token feed-forward kernel, cuda_ffn.cu).
 * grid_sync's state is two counters in global memory, zero before the first launch: [0] blocks
 * arrived, [1] generation. grid_sync_cnt's is one 64-bit counter that only grows, one for each
 * grid size (cu_grid_cnt). A block that never comes (not all resident) traps after about 2^33
 * cycles instead of hanging.
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

/* grid_sync_cnt: the count at which every block of this launch has arrived, read once the
 * previous kernel has ended (after cu_dep, by the thread that calls grid_sync_cnt). Every launch
 * on the counter adds its grid size, and every earlier one has ended (cu_dep's rule, cuda_int.h):
 * so the count is a multiple of the grid size plus the arrivals of this launch so far, fewer
 * than the grid size since this block has not arrived. */
__device__ __forceinline__ unsigned long long grid_cnt_target(const unsigned long long *cnt) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(cnt) : "memory");
    return (v / gridDim.x + 1) * gridDim.x;
}

/* As grid_sync, on a counter that only grows: a release add, then acquire polls until the count
 * reaches target (grid_cnt_target). No reset and no generation: grid_sync's last block makes two
 * more dependent atomics before anyone leaves. */
__device__ __forceinline__ void grid_sync_cnt(unsigned long long *cnt, unsigned long long target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(cnt) : "memory");
        const long long t0 = clock64();
        for (;;) {
            unsigned long long v;
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(cnt) : "memory");
            if (v >= target) break;
            if (clock64() - t0 > (1ll << 33)) __trap(); /* a block never came: not all resident */
        }
    }
    __syncthreads();
}

#endif
