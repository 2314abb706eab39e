/* bench_cuda.cuh — what the standalone CUDA measurements under bench/cuda share: a checked call
 * that ends main with a message, an event pair's elapsed time, a recorded chain's time a link, and
 * a bounded spin on a counter in global memory. */
#ifndef BENCH_CUDA_CUH
#define BENCH_CUDA_CUH
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            printf("%s: %s: %s\n", __FILE__, #x, cudaGetErrorString(e_));                    \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

/* milliseconds from e0 to e1, once e1 has happened */
static float time_ms(cudaEvent_t e0, cudaEvent_t e1) {
    float t = 0.0f;
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&t, e0, e1);
    return t;
}

/* Ends the capture on st (a recorded chain of `links` launches), replays it 11 times and puts the
 * median of the last 10 in *us, microseconds a link. */
static cudaError_t chain_us(cudaStream_t st, int links, float *us) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaError_t e = cudaStreamEndCapture(st, &g);
    if (e != cudaSuccess) return e;
    e = cudaGraphInstantiate(&ge, g, 0);
    if (e != cudaSuccess) {
        cudaGraphDestroy(g);
        return e;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> tl;
    for (int i = 0; i < 11 && e == cudaSuccess; i++) {
        cudaEventRecord(e0, st);
        e = cudaGraphLaunch(ge, st);
        cudaEventRecord(e1, st);
        if (i && e == cudaSuccess) tl.push_back(time_ms(e0, e1) / links);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) {
        std::sort(tl.begin(), tl.end());
        *us = tl[5] * 1e3f;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return e;
}

/* For a bounded wait's poll i (from 0): every 256 polls reads the clock; past 100 ms since the
 * first reading it sets dead (a register: the thread's later waits return at once) and *bad, so a
 * fault shows in the result, not as a hang. */
__device__ __forceinline__ void poll_bound(unsigned i, unsigned long long &t0, int *bad, bool &dead) {
    if ((i & 255) != 255) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (!t0) t0 = t;
    else if (t - t0 > 100000000ULL) {
        dead = true;
        atomicExch(bad, 1);
    }
}

/* Spins (bounded) until *p reaches want. Thread 0 only. */
__device__ __forceinline__ void spin_until(const int *p, int want, int *bad, bool &dead) {
    unsigned long long t0 = 0;
    for (unsigned i = 0; !dead && *(const volatile int *)p < want; i++) poll_bound(i, t0, bad, dead);
    __threadfence(); /* (what the producers wrote before their count is visible after it) */
}

#endif
