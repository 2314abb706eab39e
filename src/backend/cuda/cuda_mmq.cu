/* cuda_mmq.cu — prompt-sized matmuls on the int8 tensor cores, the weights decoded in the kernel
 * (opt-in: OB_CUDA_MMQ=1; the default is dequantize + cuBLAS, cuda_matmul.cu).
 *
 * Owns: k_mmq, y[n][n_out] (= or +=) x . W^T for more than CU_GEMV_MAX tokens, for the types whose
 * 32-element sub-block contributes one integer sum (cu_mmq_type: every int8-path type but q2_K,
 * q3_K and q6_K). The activations are quantized as the decode path quantizes them (cu_quant_rows:
 * the CPU's quantizer), each sub-block of a weight row is unpacked by the decode path's decoder
 * (q8w<T>::load, cuda_q8.cuh) into eight words of int8 codes, and mma.sync.m16n8k32 (s8 x s8 ->
 * s32) makes the exact integer sums of 16 rows x 8 tokens x 32 elements; each sum is scaled by
 * the same q8w<T>::scale as in decoding. So a prompt's products are the decode kernel's function
 * (and the CPU's integer path's), up to the order in which sub-blocks are added, with no pass
 * that writes the weight out as f16.
 * A block of 4 warps takes 64 weight rows x 64 tokens and walks the row in steps of two
 * sub-blocks: each thread unpacks one (row, sub-block) into shared memory, the tokens' codes and
 * scales are copied in as 16-byte words, then warp w multiplies rows 16 w .. 16 w + 15 with all
 * 64 tokens (8 mma per sub-block) and adds the scaled sums into 32 float accumulators.
 * Fragment layouts: mma_s8 (cuda_q8.cuh).
 * Does not own: the choice of path (cuda_matmul.cu), the decoders and the quantizer.
 */
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_q8.cuh"

#define MQ_M 64 /* weight rows per block: 16 per warp */
#define MQ_N 64 /* tokens per block */
#define MQ_THREADS 128
#define MQ_XW 20 /* words per token row in shared memory: 16 of codes (two sub-blocks) + 4 of padding */

template <int T>
__global__ void __launch_bounds__(MQ_THREADS) k_mmq(const uint8_t *__restrict__ W, size_t rb, int n_out, int n_in, const int8_t *__restrict__ xq,
                                                    const float2 *__restrict__ xs, int n, float *y, float wscale, int add) {
    __shared__ q8w<T> Ws[MQ_M][2];
    __shared__ __align__(16) int Xw[MQ_N][MQ_XW];
    __shared__ float2 Xs[MQ_N][2];
    cu_dep();
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, c = lane & 3;
    const int r0 = (int)blockIdx.x * MQ_M, j0 = (int)blockIdx.y * MQ_N, nsb = n_in / 32;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int k = 0; k < 4; k++) acc[nt][k] = 0.0f;
    for (int sb0 = 0; sb0 < nsb; sb0 += 2) {
        { /* row t / 2, sub-block sb0 + t % 2 (zeros past the matrix) */
            const int r = t >> 1, sb = sb0 + (t & 1);
            q8w<T> q{};
            if (r0 + r < n_out && sb < nsb) q8_load(q, W + (size_t)(r0 + r) * rb, sb, rb);
            Ws[r][t & 1] = q;
        }
        for (int k = t; k < MQ_N * 4; k += MQ_THREADS) { /* token k / 4, 16 codes (k % 4) */
            const int tok = k >> 2, part = k & 3, e = 32 * sb0 + 16 * part;
            int4 v = make_int4(0, 0, 0, 0);
            if (j0 + tok < n && e < n_in) v = *(const int4 *)(xq + (size_t)(j0 + tok) * n_in + e);
            *(int4 *)&Xw[tok][4 * part] = v;
        }
        {
            const int tok = t >> 1, sb = sb0 + (t & 1);
            Xs[tok][t & 1] = j0 + tok < n && sb < nsb ? xs[(size_t)(j0 + tok) * nsb + sb] : make_float2(0.0f, 0.0f);
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < 2; s++) {
            if (sb0 + s >= nsb) break;
            const q8w<T> &wa = Ws[16 * warp + g][s], &wb = Ws[16 * warp + g + 8][s];
            const int a[4] = {wa.w[c], wb.w[c], wa.w[4 + c], wb.w[4 + c]};
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                int d[4] = {0, 0, 0, 0};
                mma_s8(d, a, Xw[8 * nt + g][8 * s + c], Xw[8 * nt + g][8 * s + 4 + c]);
                const float2 x0 = Xs[8 * nt + 2 * c][s], x1 = Xs[8 * nt + 2 * c + 1][s];
                acc[nt][0] += wa.scale(d[0], x0);
                acc[nt][1] += wa.scale(d[1], x1);
                acc[nt][2] += wb.scale(d[2], x0);
                acc[nt][3] += wb.scale(d[3], x1);
            }
        }
        __syncthreads(); /* Ws / Xw / Xs are refilled by the next step */
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int i = r0 + 16 * warp + g + 8 * (k >> 1), j = j0 + 8 * nt + 2 * c + (k & 1);
            if (i < n_out && j < n) {
                float *yp = y + (size_t)j * n_out + i;
                const float v = acc[nt][k] * wscale;
                *yp = add ? *yp + v : v;
            }
        }
}

template <int T> static void mmq_launch(cu_state *s, const ob_weight *w, const int8_t *q, const float2 *xs, float *y, int n, int add) {
    if constexpr (cu_mmq_type(T)) {
        const dim3 grid((unsigned)((w->n_out + MQ_M - 1) / MQ_M), (unsigned)((n + MQ_N - 1) / MQ_N));
        cu_launch(s, "matmul (int8 tensor cores)", grid, MQ_THREADS, 0, k_mmq<T>, (const uint8_t *)w->data, w->row_bytes, (int)w->n_out,
                  (int)w->n_in, q, xs, n, y, w->scale, add);
    }
}

int cu_mmq_takes(const cu_state *s, const ob_weight *w, int n) {
    if (!s->mmq || cu_gemv_takes(s, w, n) || w->n_in % 32 || w->n_in > CU_QROW_MAX) return 0;
    int ok = 0;
#define OK(T) ok = cu_mmq_type(T)
    CU_FOR_TYPE(w->type, OK)
#undef OK
    return ok;
}

int cu_mmq(cu_state *s, const ob_weight *w, const float *x, float *y, int n, int add) {
    if (!cu_mmq_takes(s, w, n)) return 0;
    int8_t *q;
    float2 *xs;
    cu_xq_codes(s, x, n, (int)w->n_in, &q, &xs);
#define MQ(T) mmq_launch<T>(s, w, q, xs, y, n, add)
    CU_FOR_TYPE(w->type, MQ)
#undef MQ
    return 1;
}
