/* rowwork.cu — what it costs every block of a decode matmul to make its input's int8 codes (and
 * the RMSNorm before them) itself, against one launch that makes them once, for docs/cuda.md's
 * "What would close the gaps" (the fused norm). A recorded chain (a CUDA graph, PDL as the backend
 * uses it) of CHAIN links; each link is a matmul of int8 rows (2048 values, 32-value blocks with
 * a float scale) waiting for the previous link (its input x in L2, the same values every link,
 * so that no path depends on the data), its weights from a pool larger than L2, staged in shared
 * memory with cp.async before the dependency wait. Per link:
 *   bare     the matmul with codes that no one makes (the floor)
 *   launch   a one-block launch making x's codes, then the matmul reading them (the backend today)
 *   launch+n the same with RMSNorm in the codes' launch (the backend's norm before QKV / gate-up)
 *   own-lane each block makes the codes itself, a thread a 32-value block, eight 16-byte loads
 *            of its own 128 bytes that skip L1 (e422598's form: a warp's loads touch 32 lines)
 *   own      each block makes them, coalesced (a warp reads 512 contiguous bytes a load), L1 skipped
 *   own+n    the same with the norm (what a fused norm would cost)
 *   own+n-l1 the same with loads through L1 (an SM's blocks sharing the row)
 * Shapes: 2048 rows 2 a block, 8192 rows 8 a block (about a thousand blocks each, as the backend
 * picks), 16384 rows 8 a block. Each twice: with the blocks an SM holds as each mode's registers
 * allow (the modes differ: the bare matmul needs fewer), and with every mode held to 8 blocks an
 * SM by its shared memory (the decode matmul's own occupancy; then only the work differs). The
 * input alternates between two rows of the same values (no L1 hits from the link before). Build: nvcc -O2 -arch=sm_90 (bench_cuda.cuh beside it). */
#include <cstdint>
#include <cstdio>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include "bench_cuda.cuh"

#define TH 128
#define DIM 2048
#define NB (DIM / 32)
#define CHAIN 128
#define POOL (512ull << 20)


enum { BARE, LAUNCH, LAUNCH_N, OWN_LANE, OWN, OWN_N, OWN_N_L1, MODES };
static const char *mode_name[MODES] = {"bare", "launch", "launch+n", "own-lane", "own", "own+n", "own+n-l1"};

struct args {
    const uint8_t *W; /* n_out rows of DIM int8 weights */
    const float *x, *nw; /* the input row (the previous link's output), the norm's weights */
    int8_t *xq;       /* codes made by the codes' launch (or never: BARE) */
    float *xs;        /* their scales */
    float *y;
    int R;            /* rows a block */
};

__device__ __forceinline__ void dep() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* a block's max (MAX) or sum of v; buf: TH / 32 floats of shared memory */
template <bool MAX> __device__ __forceinline__ float bred(float v, float *buf) {
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = v;
    __syncthreads();
    v = buf[0];
#pragma unroll
    for (int w = 1; w < TH / 32; w++) v = MAX ? fmaxf(v, buf[w]) : v + buf[w];
    __syncthreads();
    return v;
}

__device__ __forceinline__ float qoff(float v, float id) { const float t = v * id; return fabsf(t - rintf(t)); }

__device__ __forceinline__ uint32_t code4(const float *v, float id) {
    uint32_t w = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) w |= (uint32_t)((int)fminf(fmaxf(rintf(v[j] * id), -127.0f), 127.0f) & 0xff) << (8 * j);
    return w;
}

/* x's codes by a whole block, coalesced: float4 f = tid + TH k (k < 4) a thread, a 32-value block
 * on 8 neighbouring lanes; NORM: RMSNorm by nw first; CG: loads that skip L1. Each 32-value block
 * at its own scale unless the whole row lies on the grid of its max (then at the row's). */
template <bool NORM, bool CG> __device__ __forceinline__ void row_codes(const float *x, const float *nw, int8_t *q, float *s, float *buf) {
    const int tid = threadIdx.x;
    float v[16];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float4 t = CG ? __ldcg((const float4 *)x + tid + TH * k) : ((const float4 *)x)[tid + TH * k];
        v[4 * k] = t.x, v[4 * k + 1] = t.y, v[4 * k + 2] = t.z, v[4 * k + 3] = t.w;
    }
    if constexpr (NORM) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) ss += v[i] * v[i];
        const float sc = rsqrtf(bred<false>(ss, buf) / DIM + 1e-6f);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 w = __ldg((const float4 *)nw + tid + TH * k);
            v[4 * k] *= sc * w.x, v[4 * k + 1] *= sc * w.y, v[4 * k + 2] *= sc * w.z, v[4 * k + 3] *= sc * w.w;
        }
    }
    float bm[4], amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float m = fmaxf(fmaxf(fabsf(v[4 * k]), fabsf(v[4 * k + 1])), fmaxf(fabsf(v[4 * k + 2]), fabsf(v[4 * k + 3])));
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        bm[k] = m;
        amax = fmaxf(amax, m);
        const float d = m / 127.0f;
        const int f = tid + TH * k;
        ((uint32_t *)q)[f] = code4(v + 4 * k, d != 0.0f ? 1.0f / d : 0.0f);
        if ((f & 7) == 0) s[f >> 3] = d;
    }
    amax = bred<true>(amax, buf);
    const float dr = amax / 127.0f, idr = amax > 0.0f ? 1.0f / dr : 0.0f;
    float off = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) off = fmaxf(off, qoff(bm[k], idr));
    if (amax == 0.0f || bred<true>(off, buf) != 0.0f) return;
    off = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) off = fmaxf(off, qoff(v[i], idr));
    if (bred<true>(off, buf) != 0.0f) return;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int f = tid + TH * k;
        ((uint32_t *)q)[f] = code4(v + 4 * k, idr);
        if ((f & 7) == 0) s[f >> 3] = dr;
    }
}

/* e422598's form: threads 0 .. NB-1 a 32-value block each, its 128 bytes in eight loads */
__device__ __forceinline__ void row_codes_lane(const float *x, int8_t *q, float *s, float *buf) {
    const int b = threadIdx.x;
    float bm = 0.0f;
    if (b < NB) {
        float v[32];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float4 t = __ldcg((const float4 *)(x + 32 * b) + k);
            v[4 * k] = t.x, v[4 * k + 1] = t.y, v[4 * k + 2] = t.z, v[4 * k + 3] = t.w;
        }
#pragma unroll
        for (int i = 0; i < 32; i++) bm = fmaxf(bm, fabsf(v[i]));
        const float d = bm / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t w[8];
#pragma unroll
        for (int k = 0; k < 8; k++) w[k] = code4(v + 4 * k, id);
        ((uint4 *)(q + 32 * b))[0] = make_uint4(w[0], w[1], w[2], w[3]);
        ((uint4 *)(q + 32 * b))[1] = make_uint4(w[4], w[5], w[6], w[7]);
        s[b] = d;
    }
    const float amax = bred<true>(bm, buf), idr = amax > 0.0f ? 127.0f / amax : 0.0f;
    bred<true>(b < NB ? qoff(bm, idr) : 0.0f, buf); /* the row test on the blocks' maxima (rows off the grid stop here) */
}

/* the codes' launch: one block */
template <bool NORM> __global__ void __launch_bounds__(TH) k_codes(args a) {
    __shared__ float buf[TH / 32];
    dep();
    row_codes<NORM, true>(a.x, a.nw, a.xq, a.xs, buf);
}

template <int MODE> __global__ void __launch_bounds__(TH) k_mm(args a) {
    extern __shared__ __align__(16) uint4 sw[]; /* the staged rows, then (every mode) the codes and scales */
    __shared__ float buf[TH / 32], red[TH / 32][8];
    const int tid = threadIdx.x, R = a.R;
    int8_t *sq = (int8_t *)(sw + R * DIM / 16);
    float *ss = (float *)(sq + DIM);
    const uint8_t *rows = a.W + (size_t)blockIdx.x * R * DIM;
    for (int i = tid; i < R * DIM / 16; i += TH) __pipeline_memcpy_async(sw + i, (const uint4 *)rows + i, 16);
    __pipeline_commit();
    dep();
    const int8_t *q = a.xq;
    const float *s = a.xs;
    if constexpr (MODE >= OWN_LANE) {
        if constexpr (MODE == OWN_LANE) row_codes_lane(a.x, sq, ss, buf);
        else row_codes<MODE != OWN, MODE != OWN_N_L1>(a.x, a.nw, sq, ss, buf);
        q = sq;
        s = ss;
    }
    __pipeline_wait_prior(0);
    __syncthreads();
    const int4 c = ((const int4 *)q)[tid]; /* a thread's 16 codes of every row: DIM / 16 = TH */
    const float sx = s[tid >> 1];
    float acc[8];
#pragma unroll
    for (int r = 0; r < 8; r++) {
        acc[r] = 0.0f;
        if (r < R) {
            const uint4 w = sw[r * (DIM / 16) + tid];
            const int d = __dp4a((int)w.x, c.x, __dp4a((int)w.y, c.y, __dp4a((int)w.z, c.z, __dp4a((int)w.w, c.w, 0))));
            acc[r] = (float)d * sx;
#pragma unroll
            for (int o = 16; o; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
            if ((tid & 31) == 0) red[tid >> 5][r] = acc[r];
        }
    }
    __syncthreads();
    if (tid < R) a.y[blockIdx.x * R + tid] = tanhf(1e-4f * (red[0][tid] + red[1][tid] + red[2][tid] + red[3][tid]));
}

template <typename K> static cudaError_t launch(cudaStream_t st, K k, unsigned blocks, size_t smem, const args &a) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(TH);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, a);
}

__global__ void k_fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        p[i] = (uint8_t)(h >> 24);
    }
}

__global__ void k_fillf(float *p, int n, float base) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = base + 0.37f * sinf(0.91f * i);
}

int main() {
    uint8_t *pool;
    float *xbuf, *nw, *xs;
    int8_t *xq;
    CHECK(cudaMalloc(&pool, POOL));
    CHECK(cudaMalloc(&xbuf, 4 * 16384 * sizeof(float)));
    CHECK(cudaMalloc(&nw, DIM * sizeof(float)));
    CHECK(cudaMalloc(&xq, DIM));
    CHECK(cudaMalloc(&xs, NB * sizeof(float)));
    k_fill<<<1024, 256>>>(pool, POOL, 12345u);
    k_fillf<<<64, 256>>>(xbuf, 16384, 0.1f);
    k_fillf<<<64, 256>>>(xbuf + 16384, 16384, 0.1f);
    k_fillf<<<8, 256>>>(nw, DIM, 1.0f);
    k_fill<<<8, 256>>>((uint8_t *)xq, DIM, 777u);
    k_fillf<<<1, 64>>>(xs, NB, 0.01f);
    CHECK(cudaDeviceSynchronize());
    void *kmm[MODES] = {(void *)k_mm<BARE>, (void *)k_mm<LAUNCH>, (void *)k_mm<LAUNCH_N>, (void *)k_mm<OWN_LANE>,
                        (void *)k_mm<OWN>, (void *)k_mm<OWN_N>, (void *)k_mm<OWN_N_L1>};
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int dev = 0, smem_sm = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    static const int shapes[][2] = {{2048, 2}, {8192, 8}, {16384, 8}};
    printf("rowwork: us a link (median of 10 replays of a recorded chain of %d links), blocks of %d threads; [blocks an SM]\n", CHAIN,
           TH);
    for (int eq = 0; eq < 2; eq++) {
        for (const auto &sh : shapes) {
            const int n_out = sh[0], R = sh[1];
            const size_t wbytes = (size_t)n_out * DIM, copies = POOL / wbytes;
            /* eq: shared memory that leaves room for 8 blocks an SM and no more (1 KB a block reserved, the static part) */
            const size_t need = (size_t)R * DIM + DIM + NB * sizeof(float), smem = eq ? (size_t)smem_sm / 8 - 1024 - 256 : need;
            if (smem < need) return printf("rowwork: %zu bytes of shared memory a block do not hold %zu\n", smem, need), 1;
            printf("%5d rows, %d a block (%d blocks, %.1f MB a link), %s:", n_out, R, n_out / R, wbytes / 1e6, eq ? "8 blocks an SM" : "as built");
            for (int m = 0; m < MODES; m++) {
                int occ = 0;
                CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kmm[m], TH, smem));
                CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
                for (int i = 0; i < CHAIN; i++) {
                    args a;
                    a.W = pool + (size_t)(i % copies) * wbytes;
                    a.x = xbuf + (size_t)(i & 1) * 16384;
                    a.y = xbuf + 2 * 16384 + (size_t)(i & 1) * 16384;
                    a.nw = nw;
                    a.xq = xq;
                    a.xs = xs;
                    a.R = R;
                    if (m == LAUNCH || m == LAUNCH_N)
                        CHECK(m == LAUNCH ? launch(st, k_codes<false>, 1, 0, a) : launch(st, k_codes<true>, 1, 0, a));
                    CHECK(launch(st, (void (*)(args))kmm[m], (unsigned)(n_out / R), smem, a));
                }
                float us = 0.0f;
                CHECK(chain_us(st, CHAIN, &us));
                printf("  %s %.2f [%d]", mode_name[m], us, occ);
            }
            printf("\n");
        }
    }
    return 0;
}
