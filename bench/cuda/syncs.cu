/* syncs.cu — what a decode step's synchronization costs on this GPU, for docs/cuda.md's "What
 * would close the gaps": (1) a round of two cluster barriers with a distributed-shared-memory
 * read between them (8 blocks a cluster, the shape of a norm shared by a matmul's clusters),
 * against (2) two __syncthreads, in one launch of a grid that fills the GPU (8 blocks of 128
 * threads an SM), per round; (3) one dependent kernel of such a grid in a recorded chain (a CUDA
 * graph of 256 launches, each block reading a value the previous kernel wrote), with programmatic
 * dependent launch as the backend uses it and without; (4) what a persistent kernel would pay
 * instead of a launch a phase (docs/cuda.md item 1): phases of one co-resident (cooperative)
 * launch ordered by counters in global memory, (4a) every block waiting for every block of the
 * phase before (a matmul reading a whole row), one block an SM and eight (and at one an SM, with
 * release / acquire operations in place of full fences), (4b) rounds of one
 * producer block read by all the others (a norm's row read by a matmul's blocks), who count
 * themselves for the next round's producer (the matmul done). The memory system is otherwise
 * idle, so these are lower bounds for a layer's phases. Build: nvcc -O2 -arch=sm_90. */
#include <algorithm>
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include "bench_cuda.cuh"

namespace cg = cooperative_groups;

#define TH 128
#define ROUNDS 2000
#define CHAIN 256


/* each round: every block publishes a value, the cluster waits, each block reads its 8 ranks'
 * values from their shared memory, the cluster waits again (before the next round overwrites) */
__global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(TH) k_cluster(float *out, int rounds) {
    __shared__ float mine;
    cg::cluster_group cl = cg::this_cluster();
    float acc = 0.0f;
    for (int r = 0; r < rounds; r++) {
        if (threadIdx.x == 0) mine = acc + (float)cl.block_rank();
        cl.sync();
        if (threadIdx.x < 8) acc += *cl.map_shared_rank(&mine, threadIdx.x);
        cl.sync();
    }
    if (threadIdx.x < 8) out[blockIdx.x * 8 + threadIdx.x] = acc;
}

__global__ void __launch_bounds__(TH) k_block(float *out, int rounds) {
    __shared__ float mine[8];
    float acc = 0.0f;
    for (int r = 0; r < rounds; r++) {
        if (threadIdx.x < 8) mine[threadIdx.x] = acc + (float)threadIdx.x;
        __syncthreads();
        if (threadIdx.x < 8) acc += mine[(threadIdx.x + 1) & 7];
        __syncthreads();
    }
    if (threadIdx.x < 8) out[blockIdx.x * 8 + threadIdx.x] = acc;
}

/* one link of the chain: wait for the previous kernel (PDL), let the next be scheduled, read
 * what the previous one wrote, write for the next */
__global__ void __launch_bounds__(TH) k_link(const float *in, float *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x] + 1.0f;
}


/* (4a) phase r: each block writes its value, counts itself on cnt[r], waits for all blocks'
 * counts, then reads its neighbour's value of that phase (the barrier makes the two alternating
 * value buffers safe). cnt [2 ROUNDS], zeroed. How the count is ordered after the write and the
 * reads after the wait, by SYNC: 0 a full fence (__threadfence) and atomicAdd, volatile polls and
 * a full fence; 1 red.release.gpu and ld.acquire.gpu polls; 2 red.release.gpu, volatile polls and
 * fence.acq_rel.gpu; 3 no counter: each block raises its own flag (st.release.gpu of r + 1 in
 * cnt[b]) and its threads poll every block's flag (ld.acquire.gpu), a flag a thread. */
template <int SYNC> __global__ void __launch_bounds__(TH) k_phases_all(float *val, int *cnt, int rounds, int *bad) {
    float acc = 0.0f;
    bool dead = false;
    const int nb = gridDim.x, b = blockIdx.x;
    for (int r = 0; r < rounds; r++) {
        float *v = val + (size_t)(r & 1) * nb;
        if (threadIdx.x == 0) {
            v[b] = acc + (float)b;
            if (SYNC == 3) {
                asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(&cnt[b]), "r"(r + 1) : "memory");
            } else if (SYNC == 0) {
                __threadfence();
                atomicAdd(&cnt[r], 1);
                spin_until(&cnt[r], nb, bad, dead);
            } else {
                asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(&cnt[r]) : "memory");
                unsigned long long t0 = 0;
                for (unsigned i = 0; !dead; i++) {
                    int c;
                    if (SYNC == 1) asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(c) : "l"(&cnt[r]) : "memory");
                    else c = *(const volatile int *)&cnt[r];
                    if (c >= nb) break;
                    poll_bound(i, t0, bad, dead);
                }
                if (SYNC == 2) asm volatile("fence.acq_rel.gpu;" ::: "memory");
            }
        }
        if (SYNC == 3) /* every block's flag, a thread a flag */
            for (int f = threadIdx.x; f < nb; f += TH) {
                unsigned long long t0 = 0;
                for (unsigned i = 0; !dead; i++) {
                    int c;
                    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(c) : "l"(&cnt[f]) : "memory");
                    if (c > r) break;
                    poll_bound(i, t0, bad, dead);
                }
            }
        __syncthreads();
        if (threadIdx.x == 0) acc += *(const volatile float *)&v[(b + 1) % nb];
    }
    if (threadIdx.x == 0) val[2 * nb + b] = acc;
}

/* (4b) round r, two phases: block r % nb writes the round's value and raises flag r (one to
 * all: a norm's row), every other block waits for it, reads the value and counts itself on
 * ack r (all to one: a matmul's blocks done), for which round r + 1's producer waits before it
 * writes. cnt [2 ROUNDS], zeroed: flags, then acks; val [ROUNDS]: a value a round. */
__global__ void __launch_bounds__(TH) k_phases_one(float *val, int *cnt, int rounds, int *bad) {
    float acc = 0.0f;
    bool dead = false;
    const int nb = gridDim.x, b = blockIdx.x;
    int *flag = cnt, *ack = cnt + ROUNDS;
    for (int r = 0; r < rounds; r++) {
        if (threadIdx.x == 0) {
            if (b == r % nb) {
                if (r) spin_until(&ack[r - 1], nb - 1, bad, dead);
                val[r] = acc + (float)r;
                __threadfence();
                atomicExch(&flag[r], 1);
            } else {
                spin_until(&flag[r], 1, bad, dead);
                acc += *(const volatile float *)&val[r];
                atomicAdd(&ack[r], 1);
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) val[ROUNDS + b] = acc;
}

/* us a phase (4a) or a round (4b) of kernel k on nb co-resident blocks: the median of 5
 * (ROUNDS-round launch less a 1-round launch), counters and the fault flag zeroed before each;
 * -1 where a wait ran past its bound, -2 where the cooperative launch was refused */
static float phase_us(void (*k)(float *, int *, int, int *), int nb, float *val, int *cnt, int *bad) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    int fault = 0;
    for (int i = 0; i < 6 && fault == 0; i++) {
        float ms[2];
        for (int w = 0; w < 2 && fault == 0; w++) {
            int rounds = w ? ROUNDS : 1;
            cudaMemset(cnt, 0, sizeof(int) * 2 * ROUNDS);
            cudaMemset(bad, 0, sizeof(int));
            void *args[] = {&val, &cnt, &rounds, &bad};
            cudaEventRecord(e0);
            if (cudaLaunchCooperativeKernel((const void *)k, dim3((unsigned)nb), dim3(TH), args, 0, 0) != cudaSuccess) fault = -2;
            cudaEventRecord(e1);
            ms[w] = time_ms(e0, e1);
            int b = 0;
            cudaMemcpy(&b, bad, sizeof b, cudaMemcpyDeviceToHost);
            if (b) fault = -1;
        }
        if (i && fault == 0) t.push_back((ms[1] - ms[0]) / (ROUNDS - 1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (fault) return (float)fault;
    std::sort(t.begin(), t.end());
    return t[2] * 1e3f;
}

int main() {
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int blocks = sms * 8; /* a multiple of the cluster size */
    float *buf;
    CHECK(cudaMalloc(&buf, sizeof(float) * blocks * 8 * 2));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);

    /* (1), (2): median of 5 launches of ROUNDS rounds, less a launch of 1 round */
    std::vector<float> tc, tb;
    for (int i = 0; i < 6; i++) {
        float t[2][2];
        for (int w = 0; w < 2; w++) {
            const int rounds = w ? ROUNDS : 1;
            cudaEventRecord(e0);
            k_cluster<<<blocks, TH>>>(buf, rounds);
            cudaEventRecord(e1);
            t[0][w] = time_ms(e0, e1);
            cudaEventRecord(e0);
            k_block<<<blocks, TH>>>(buf, rounds);
            cudaEventRecord(e1);
            t[1][w] = time_ms(e0, e1);
        }
        CHECK(cudaGetLastError());
        if (i) {
            tc.push_back((t[0][1] - t[0][0]) / (ROUNDS - 1));
            tb.push_back((t[1][1] - t[1][0]) / (ROUNDS - 1));
        }
    }
    std::sort(tc.begin(), tc.end());
    std::sort(tb.begin(), tb.end());
    printf("round of two cluster barriers + a DSMEM read (8 blocks a cluster, %d blocks): %.3f us\n", blocks, tc[2] * 1e3);
    printf("round of two __syncthreads (the same grid): %.3f us\n", tb[2] * 1e3);

    /* (3): a recorded chain of CHAIN dependent kernels, with and without PDL */
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int pdl = 0; pdl < 2; pdl++) {
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < CHAIN; i++) {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = pdl;
            cfg.gridDim = dim3((unsigned)blocks);
            cfg.blockDim = dim3(TH);
            cfg.stream = st;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            const float *in = buf + (size_t)(i & 1) * blocks * 8;
            float *out = buf + (size_t)((i + 1) & 1) * blocks * 8;
            CHECK(cudaLaunchKernelEx(&cfg, k_link, in, out));
        }
        float us = 0.0f;
        CHECK(chain_us(st, CHAIN, &us));
        printf("dependent kernel in a recorded chain (%d blocks, %s): %.3f us\n", blocks, pdl ? "PDL" : "no PDL", us);
    }

    /* (4): phases of one persistent launch (-1: a wait ran past its bound; -2: the cooperative
     * launch was refused) */
    int *cnt, *bad;
    float *val;
    CHECK(cudaMalloc(&cnt, sizeof(int) * 2 * ROUNDS));
    CHECK(cudaMalloc(&bad, sizeof(int)));
    CHECK(cudaMalloc(&val, sizeof(float) * (blocks * 3 + ROUNDS)));
    for (int per = 1; per <= 8; per *= 8)
        printf("persistent phase, all blocks wait for all (%d blocks, %d an SM): %.3f us\n", sms * per, per,
               phase_us(k_phases_all<0>, sms * per, val, cnt, bad));
    printf("the same, %d blocks, release add and acquire polls: %.3f us; release add, polls, acq_rel fence: %.3f us\n",
           sms, phase_us(k_phases_all<1>, sms, val, cnt, bad), phase_us(k_phases_all<2>, sms, val, cnt, bad));
    for (int per = 1; per <= 8; per *= 8)
        printf("the same with a flag a block, every flag polled (%d blocks, %d an SM): %.3f us\n", sms * per, per,
               phase_us(k_phases_all<3>, sms * per, val, cnt, bad));
    for (int per = 1; per <= 8; per *= 8)
        printf("persistent round, one block's value read by all, then their counts read by the next (%d blocks, %d an SM): %.3f us\n",
               sms * per, per, phase_us(k_phases_one, sms * per, val, cnt, bad));
    CHECK(cudaGetLastError());
    return 0;
}
