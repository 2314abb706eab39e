/* f16gemv.cu — how fast one token's f16 matmul can read its rows on this GPU, for the 1B F16's
 * decode (docs/cuda.md, "the float path"): its layers read 121.6 MB at about 2.3 TB/s where the
 * output matrix reads at 4.2. Each shape of Llama-3.2-1B's layer (QKV 3072 x 2048, wo 2048 x
 * 2048, gate + up 2 x 8192 x 2048 with the GLU, down 2048 x 8192) in a recorded chain of LINKS
 * dependent launches with programmatic launch (each kernel prefetches or loads what it may before
 * griddepcontrol.wait, then lets the next one go, as the engine's cu_dep), over copies of the
 * weights that L2 cannot hold, by:
 *   eng       the engine's rows-in-place instance (k_gv DIRECT: 128 threads, R rows a block, each
 *             thread 2 chunks of 8 values of every row at a time, the block's rows prefetched to
 *             L2 before the wait, the warps' sums added through shared memory);
 *   warp U    a warp an output (GLU: its gate and up rows), every lane U 16-byte chunks of each row
 *             in flight at a time, x from shared memory, the sums by shuffles; 256 threads;
 *   pers U    the same with a grid of the blocks that fit at once, each warp looping over outputs;
 *   empty     the launch and its wait alone.
 * Prints us a launch (median of 10 replays) and TB/s over the rows' bytes; and checks every
 * variant's outputs against a double-precision reference on the host (1e-4 of the largest).
 * Build: nvcc -O3 -arch=sm_90 -o f16gemv bench/cuda/f16gemv.cu */
#include <cmath>
#include <cstdint>
#include <cuda_fp16.h>
#include "bench_cuda.cuh"

#define LINKS 64
#define SPAN ((size_t)640 << 20) /* bytes of weight copies a shape cycles through */

__device__ __forceinline__ void dep() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ float dot8(uint4 u, const float *x) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(*(const __half2 *)&w[i]);
        s = fmaf(f.x, x[2 * i], s);
        s = fmaf(f.y, x[2 * i + 1], s);
    }
    return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float glu(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

struct args {
    const __half *W, *U; /* U: the up rows (GLU), else NULL */
    const float *x;
    float *y;
    int n_out, n_in, R; /* R: eng's rows a block (a weight's) */
};

/* eng: block b takes rows [b R, b R + R) of W (and of U) */
template <int RT> __global__ void __launch_bounds__(128, 7) k_eng(args a) {
    __shared__ float red[4][RT];
    const int r0 = blockIdx.x * a.R, nr = min(a.R, a.n_out - r0), glu_on = a.U != nullptr, rows = glu_on ? 2 * nr : nr;
    const size_t rb = (size_t)a.n_in * 2;
    const uint8_t *b0 = (const uint8_t *)a.W + r0 * rb, *b1 = glu_on ? (const uint8_t *)a.U + r0 * rb : b0;
    for (size_t o = threadIdx.x * 128; o < nr * rb; o += 128 * 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(b0 + o));
        if (glu_on) asm volatile("prefetch.global.L2 [%0];" ::"l"(b1 + o));
    }
    dep();
    const int nch = a.n_in / 8;
    float acc[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = 0.0f;
    for (int c0 = threadIdx.x; c0 < nch; c0 += 2 * 128) {
        uint4 w[2][RT];
        float xv[2][8];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int c = c0 + k * 128;
            if (c < nch) {
                const float4 p = __ldg((const float4 *)a.x + 2 * c), q = __ldg((const float4 *)a.x + 2 * c + 1);
                xv[k][0] = p.x; xv[k][1] = p.y; xv[k][2] = p.z; xv[k][3] = p.w;
                xv[k][4] = q.x; xv[k][5] = q.y; xv[k][6] = q.z; xv[k][7] = q.w;
#pragma unroll
                for (int r = 0; r < RT; r++)
                    if (r < rows) w[k][r] = __ldg((const uint4 *)((r < nr ? b0 + r * rb : b1 + (r - nr) * rb)) + c);
            }
        }
#pragma unroll
        for (int k = 0; k < 2; k++)
            if (c0 + k * 128 < nch)
#pragma unroll
                for (int r = 0; r < RT; r++)
                    if (r < rows) acc[r] += dot8(w[k][r], xv[k]);
    }
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const float v = warp_sum(acc[r]);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5][r] = v;
    }
    __syncthreads();
    if (threadIdx.x < nr) {
        const int r = threadIdx.x;
        const float g = red[0][r] + red[1][r] + red[2][r] + red[3][r];
        if (glu_on) {
            const float u = red[0][nr + r] + red[1][nr + r] + red[2][nr + r] + red[3][nr + r];
            a.y[r0 + r] = glu(g, u);
        } else {
            a.y[r0 + r] = g;
        }
    }
}

/* warp / pers: warp w of the grid takes outputs w, w + warps, ... (warp: one each) */
template <int U, bool GLU, bool PERS> __global__ void __launch_bounds__(256) k_warp(args a) {
    extern __shared__ __align__(16) float xs[];
    const int lane = threadIdx.x & 31, warps = PERS ? gridDim.x * 8 : 0;
    int o = blockIdx.x * 8 + (threadIdx.x >> 5);
    const size_t rn = a.n_in / 8; /* chunks a row */
    if (!PERS && o < a.n_out) { /* this warp's first chunks ask L2 before the wait */
        const uint8_t *p = (const uint8_t *)(a.W + (size_t)o * a.n_in);
        for (size_t b = lane * 128; b < rn * 16; b += 32 * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + b));
        if (GLU) {
            p = (const uint8_t *)(a.U + (size_t)o * a.n_in);
            for (size_t b = lane * 128; b < rn * 16; b += 32 * 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + b));
        }
    }
    dep();
    for (int i = threadIdx.x; i < a.n_in / 4; i += 256) ((float4 *)xs)[i] = ((const float4 *)a.x)[i];
    __syncthreads();
    for (; o < a.n_out; o += PERS ? warps : a.n_out) {
        const uint4 *g = (const uint4 *)(a.W + (size_t)o * a.n_in), *u = GLU ? (const uint4 *)(a.U + (size_t)o * a.n_in) : nullptr;
        float sg = 0.0f, su = 0.0f;
        for (size_t c0 = lane; c0 < rn; c0 += 32 * U) {
            uint4 wg[U], wu[GLU ? U : 1];
#pragma unroll
            for (int k = 0; k < U; k++) {
                const size_t c = c0 + 32 * k;
                if (c < rn) {
                    wg[k] = __ldg(g + c);
                    if (GLU) wu[k] = __ldg(u + c);
                }
            }
#pragma unroll
            for (int k = 0; k < U; k++) {
                const size_t c = c0 + 32 * k;
                if (c < rn) {
                    const float4 p = ((const float4 *)xs)[2 * c], q = ((const float4 *)xs)[2 * c + 1];
                    const float xv[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
                    sg += dot8(wg[k], xv);
                    if (GLU) su += dot8(wu[k], xv);
                }
            }
        }
        sg = warp_sum(sg);
        if (GLU) su = warp_sum(su);
        if (lane == 0) a.y[o] = GLU ? glu(sg, su) : sg;
    }
}

__global__ void k_empty(args a) {
    dep();
    if (threadIdx.x == 0 && blockIdx.x == 0 && a.n_out < 0) a.y[0] = 0.0f;
}

template <typename K> static cudaError_t launch(cudaStream_t st, K k, int blocks, int th, size_t smem, const args &a) {
    cudaLaunchConfig_t c = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.gridDim = blocks;
    c.blockDim = th;
    c.dynamicSmemBytes = smem;
    c.stream = st;
    c.attrs = at;
    c.numAttrs = 1;
    return cudaLaunchKernelEx(&c, k, a);
}

struct shape {
    const char *name;
    int n_out, n_in, glu;
};

static int sm_count;

/* The chain of LINKS launches of kernel k over the copies, its us a launch; y of the first link
 * checked against ref. */
template <typename K>
static int run(const char *what, K k, int blocks, int th, size_t smem, const shape &sh, const __half *w, int copies, const float *x,
               float *y, const std::vector<double> &ref, cudaStream_t st) {
    const size_t mat = (size_t)sh.n_out * sh.n_in, per = sh.glu ? 2 * mat : mat;
    args a = {nullptr, nullptr, x, y, sh.n_out, sh.n_in, 0};
    if (blocks < 0) { /* eng: -R */
        a.R = -blocks;
        blocks = (sh.n_out + a.R - 1) / a.R;
    }
    CHECK(cudaMemset(y, 0, sh.n_out * sizeof(float)));
    a.W = w;
    a.U = sh.glu ? w + mat : nullptr;
    CHECK(launch(st, k, blocks, th, smem, a));
    CHECK(cudaStreamSynchronize(st));
    std::vector<float> hy(sh.n_out);
    CHECK(cudaMemcpy(hy.data(), y, sh.n_out * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0, top = 0.0;
    for (int i = 0; i < sh.n_out; i++) top = fmax(top, fabs(ref[i]));
    if ((void *)k != (void *)k_empty) /* (errors against the largest output: sums of 2048-8192 terms) */
        for (int i = 0; i < sh.n_out; i++) worst = fmax(worst, fabs(hy[i] - ref[i]) / top);
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < LINKS; l++) {
        a.W = w + (size_t)(l % copies) * per;
        a.U = sh.glu ? a.W + mat : nullptr;
        CHECK(launch(st, k, blocks, th, smem, a));
    }
    float us = 0.0f;
    CHECK(chain_us(st, LINKS, &us));
    const double bytes = (double)per * 2;
    printf("%-6s %-10s blocks %6d  %7.2f us  %5.2f TB/s  worst rel err %.1e%s\n", sh.name, what, blocks, us, bytes / us * 1e-6, worst,
           worst > 1e-4 ? "  WRONG" : "");
    return worst > 1e-4;
}

template <int U, bool GLU> static int warps(const shape &sh, const __half *w, int copies, const float *x, float *y,
                                            const std::vector<double> &ref, cudaStream_t st) {
    char nm[32];
    int bad = 0, occ = 0;
    const size_t smem = sh.n_in * sizeof(float);
    auto kw = k_warp<U, GLU, false>;
    auto kp = k_warp<U, GLU, true>;
    CHECK(cudaFuncSetAttribute(kw, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CHECK(cudaFuncSetAttribute(kp, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    snprintf(nm, sizeof nm, "warp %d", U);
    bad |= run(nm, kw, (sh.n_out + 7) / 8, 256, smem, sh, w, copies, x, y, ref, st);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kp, 256, smem));
    for (int m = 1; m <= occ; m *= 2) {
        snprintf(nm, sizeof nm, "pers %d x%d", U, m);
        bad |= run(nm, kp, m * sm_count, 256, smem, sh, w, copies, x, y, ref, st);
    }
    return bad;
}

int main() {
    const shape shapes[] = {{"qkv", 3072, 2048, 0}, {"wo", 2048, 2048, 0}, {"gateup", 8192, 2048, 1}, {"down", 2048, 8192, 0}};
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    sm_count = p.multiProcessorCount;
    printf("%s, %d SMs, L2 %d MB\n", p.name, sm_count, p.l2CacheSize >> 20);
    __half *w;
    float *x, *y;
    CHECK(cudaMalloc(&w, SPAN));
    CHECK(cudaMalloc(&x, 8192 * sizeof(float)));
    CHECK(cudaMalloc(&y, 8192 * sizeof(float)));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int bad = 0;
    for (const shape &sh : shapes) {
        const size_t mat = (size_t)sh.n_out * sh.n_in, per = sh.glu ? 2 * mat : mat;
        const int copies = (int)(SPAN / 2 / per);
        std::vector<__half> hw(per);
        std::vector<float> hx(sh.n_in);
        unsigned s = 12345u + sh.n_out;
        for (size_t i = 0; i < per; i++) {
            s = s * 1664525u + 1013904223u;
            hw[i] = __float2half((float)((s >> 8) & 0xffff) / 65536.0f - 0.5f);
        }
        for (int i = 0; i < sh.n_in; i++) hx[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        CHECK(cudaMemcpy(w, hw.data(), per * 2, cudaMemcpyHostToDevice));
        for (int c = 1; c < copies; c++) CHECK(cudaMemcpy(w + c * per, w, per * 2, cudaMemcpyDeviceToDevice));
        CHECK(cudaMemcpy(x, hx.data(), sh.n_in * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<double> ref(sh.n_out);
        for (int o = 0; o < sh.n_out; o++) {
            double g = 0.0, u = 0.0;
            for (int i = 0; i < sh.n_in; i++) {
                g += (double)__half2float(hw[(size_t)o * sh.n_in + i]) * hx[i];
                if (sh.glu) u += (double)__half2float(hw[mat + (size_t)o * sh.n_in + i]) * hx[i];
            }
            ref[o] = sh.glu ? g / (1.0 + exp(-g)) * u : g;
        }
        printf("%s: %d x %d%s, %.1f MB a launch, %d copies\n", sh.name, sh.n_out, sh.n_in, sh.glu ? " x 2 (GLU)" : "", per * 2 / 1e6, copies);
        bad |= run("empty", k_empty, sm_count, 128, 0, sh, w, copies, x, y, ref, st);
        for (int R = 1; R <= (sh.glu ? 2 : 4); R++) {
            char nm[16];
            snprintf(nm, sizeof nm, "eng R%d", R);
            bad |= run(nm, k_eng<4>, -R, 128, 0, sh, w, copies, x, y, ref, st);
        }
        if (sh.glu) {
            bad |= warps<4, true>(sh, w, copies, x, y, ref, st);
            bad |= warps<8, true>(sh, w, copies, x, y, ref, st);
        } else {
            bad |= warps<4, false>(sh, w, copies, x, y, ref, st);
            bad |= warps<8, false>(sh, w, copies, x, y, ref, st);
            bad |= warps<16, false>(sh, w, copies, x, y, ref, st);
        }
    }
    printf("%s\n", bad ? "some outputs WRONG" : "all outputs within 1e-4");
    return bad;
}
