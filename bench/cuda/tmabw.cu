/* tmabw.cu — how fast one block an SM fills its shared memory from HBM, for docs/cuda.md's "The
 * one-token feed-forward kernel": its 128 blocks (1024 threads, one an SM) each stage 147 KB of
 * gate/up rows by bulk copies, and run 33's trace had those bytes in about 8.5 us after a
 * block's start (18.9 MB: 2.2 TB/s, half the copy bandwidth). Is that what one block an SM can
 * get, or what the kernel's way of asking gets? Each launch of nb blocks reads a fresh span of
 * B bytes a block (regions cycle through 1.3 GB, so L2 holds none of it) into shared memory:
 *   bulk xP   thread 0 issues P bulk copies of B / P bytes on one barrier (the kernel: P = 2);
 *   cp.async  every thread 16-byte asynchronous copies (the kernel's threads'-copies path);
 *   loads     every thread 16-byte loads into registers (what the decode matmuls do);
 *   empty     nothing: the launch's own cost.
 * For each: a recorded chain of 100 launches (no PDL), its time a launch, that less the empty
 * kernel's (the fill's own time) as TB/s, and the mean over blocks of the cycles from a block's
 * start to its last byte. Build: nvcc -O2 -arch=sm_90 -I src. */
#include <cuda_pipeline.h>
#include "bench_cuda.cuh"
#include "backend/cuda/cuda_bulk.cuh"

#define TH 1024
#define LINKS 100
#define REGION ((size_t)32 << 20) /* bytes a launch may read: at least 132 x 221184 */
#define NREG 40
#define SMEM (216 * 1024)         /* one block an SM whatever B (at least the largest B) */

enum { BULK, CPASYNC, LOADS, EMPTY };

template <int MODE> __global__ void __launch_bounds__(TH, 1) k_fill(const uint8_t *src, unsigned B, int P, long long *ticks, unsigned *sink) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ __align__(8) uint64_t bar;
    const long long t0 = clock64();
    const uint8_t *s = src + (size_t)blockIdx.x * B;
    unsigned keep = 0;
    if constexpr (MODE == BULK) {
        if (threadIdx.x == 0) {
            bulk_bar_init(&bar, B);
            for (int p = 0; p < P; p++) bulk_copy(sm + (size_t)p * (B / P), s + (size_t)p * (B / P), B / P, &bar);
        }
        __syncthreads();
        bulk_bar_wait(&bar);
        keep = sm[B - 1 - threadIdx.x];
    } else if constexpr (MODE == CPASYNC) {
        for (unsigned i = threadIdx.x; i < B / 16; i += TH) __pipeline_memcpy_async(sm + 16 * (size_t)i, s + 16 * (size_t)i, 16);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        keep = sm[B - 1 - threadIdx.x];
    } else if constexpr (MODE == LOADS) {
        const uint4 *q = (const uint4 *)s;
        for (unsigned i = threadIdx.x; i < B / 16; i += TH) {
            const uint4 v = __ldg(q + i);
            keep ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    __syncthreads();
    const long long t1 = clock64();
    if (keep == 0x9e3779b9u) sink[0] = keep; /* (the bytes are used: nothing is optimized away) */
    if (threadIdx.x == 0) ticks[blockIdx.x] += t1 - t0;
}

/* One configuration: *us a launch of the chain, *cyc the blocks' mean cycles a launch. */
template <int MODE> static int run(cudaStream_t st, const uint8_t *buf, int nb, unsigned B, int P, long long *ticks, unsigned *sink, float *us,
                                   double *cyc) {
    CHECK(cudaFuncSetAttribute(k_fill<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CHECK(cudaMemset(ticks, 0, (size_t)nb * sizeof(long long)));
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < LINKS; l++) k_fill<MODE><<<nb, TH, SMEM, st>>>(buf + (size_t)(l % NREG) * REGION, B, P, ticks, sink);
    CHECK(chain_us(st, LINKS, us)); /* (11 replays) */
    std::vector<long long> t(nb);
    CHECK(cudaMemcpy(t.data(), ticks, (size_t)nb * sizeof(long long), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (long long v : t) sum += (double)v;
    *cyc = sum / nb / (11.0 * LINKS);
    return 0;
}

int main() {
    int dev = 0, khz = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    uint8_t *buf;
    long long *ticks;
    unsigned *sink;
    CHECK(cudaMalloc((void **)&buf, REGION * NREG));
    CHECK(cudaMemset(buf, 0x5a, REGION * NREG));
    CHECK(cudaMalloc((void **)&ticks, 256 * sizeof(long long)));
    CHECK(cudaMalloc((void **)&sink, sizeof(unsigned)));
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    const int grids[2] = {128, sms};
    const unsigned sizes[3] = {73728, 147456, 221184}; /* the 1B's gate or up rows a block, both, both and down's chunk */
    for (int nb : grids) {
        float e_us;
        double e_cyc;
        if (run<EMPTY>(st, buf, nb, 16, 1, ticks, sink, &e_us, &e_cyc)) return 1;
        printf("fill shared memory, %d blocks of %d threads (one an SM): the empty kernel %.2f us a launch in a chain\n", nb, TH, e_us);
        for (unsigned B : sizes) {
            const char *name[6] = {"bulk x2", "bulk x8", "bulk x32", "cp.async", "loads", NULL};
            for (int k = 0; name[k]; k++) {
                float us;
                double cyc;
                const int r = k < 3 ? run<BULK>(st, buf, nb, B, k == 0 ? 2 : k == 1 ? 8 : 32, ticks, sink, &us, &cyc)
                              : k == 3 ? run<CPASYNC>(st, buf, nb, B, 1, ticks, sink, &us, &cyc)
                                       : run<LOADS>(st, buf, nb, B, 1, ticks, sink, &us, &cyc);
                if (r) return 1;
                const double fill = us - e_us;
                printf("  %6u B a block, %-8s: %.2f us a launch, %.2f beyond the empty one = %.2f TB/s; a block's start to its last byte %.2f us\n",
                       B, name[k], us, fill, fill > 0 ? (double)nb * B / (fill * 1e-6) / 1e12 : 0.0, cyc / (khz / 1e3));
            }
        }
    }
    return 0;
}
