/* cuda_q8_check.cu — the int8 sub-block decoders of cuda_q8.cuh checked on the host.
 *
 * Owns: ob_cuda_q8_selftest. The decoders are __host__ __device__ with plain-C twins of their
 * intrinsics (byte permute, bytewise subtract, dp4a), so their unpacking and scale arithmetic can
 * be checked against the reference dequantization (format/quant_tensor.h) on any machine that
 * builds with CUDA=1, without a GPU: for every type of cu_q8_type, random rows are quantized
 * (lean4's reference rows rotated back into the stored basis),
 * every sub-block is unpacked and dotted with random int8 activation codes and block scales, and
 * each row's sum must match the double-precision sum over the dequantized weights. The device
 * instances compile from the same source (only the intrinsics differ, and those are exact).
 * Does not own: the kernels (cuda_gemv.cu), the device-side tests (tests/unit/test_cuda.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_q8.cuh"

extern "C" {
#include "format/quant_tensor.h"
}

static uint64_t chk_rng = 0x2545f4914f6cdd1dull;
static uint32_t chk_next(void) {
    chk_rng ^= chk_rng << 13;
    chk_rng ^= chk_rng >> 7;
    chk_rng ^= chk_rng << 17;
    return (uint32_t)(chk_rng >> 16);
}
static float chk_uni(void) { return (float)(chk_next() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* lean4's rotation of a 128-element block (its own inverse): the Walsh-Hadamard butterflies
 * of k_lean_rotate (cuda_matmul.cu), then 1 / sqrt(128). */
static void rotate128(float *v) {
    for (int h = 1; h < 128; h *= 2)
        for (int i = 0; i < 128; i++)
            if (!(i & h)) {
                const float a = v[i], c = v[i + h];
                v[i] = a + c;
                v[i + h] = a - c;
            }
    for (int i = 0; i < 128; i++) v[i] *= 0.0883883476483184405f;
}

/* Worst relative error of type T's rows (n_in elements, n_rows rows); -1 when it cannot quantize;
 * 1 when a copy of the rows 2, 4 or 8 bytes off 16-byte alignment decodes to other values (the
 * decoders' aligned loads, ld_words16 / ld_words_row, against ld_words). */
template <int T> static double check_type(int64_t n_in, int n_rows) {
    const size_t rb = ob_type_row_size(T, n_in), bytes = ob_type_tensor_size(T, n_in, n_rows); /* i2_s: + its scale */
    float *wf = (float *)malloc(sizeof(float) * n_in * n_rows), *wd = (float *)malloc(sizeof(float) * n_in * n_rows);
    uint8_t *wq = (uint8_t *)calloc(1, bytes + 16); /* the decoders may read 4 bytes past a row */
    const size_t sp = (bytes + 32 + 15) & ~(size_t)15; /* copies 16-byte aligned apart (calloc: 16-aligned) */
    uint8_t *wq2 = (uint8_t *)calloc(1, 3 * sp); /* the rows again, 2, 4 and 8 bytes past alignment */
    uint8_t *wm[3] = {wq2 + 2, wq2 + sp + 4, wq2 + 2 * sp + 8}, *file = (uint8_t *)malloc(bytes); /* (the file's rows) */
    const int nsb = (int)(n_in / 32);
    int8_t *c = (int8_t *)malloc((size_t)n_in);
    float2 *xs = (float2 *)malloc(sizeof(float2) * nsb);
    double worst = 0;
    for (int64_t i = 0; i < n_in * n_rows; i++) {
        float v = chk_uni();
        if (T == OB_TYPE_I2_S || T == OB_TYPE_TQ1_0 || T == OB_TYPE_TQ2_0) v = v > 0.3f ? 0.5f : v < -0.3f ? -0.5f : 0.0f;
        wf[i] = v * (1.0f + 3.0f * (float)((i / 32) % 5)); /* block scales of different sizes */
    }
    if (ob_tensor_quantize(T, wf, wq, n_in, n_rows) != 0 || ob_tensor_dequantize(T, wq, wd, n_in, n_rows) != 0) {
        worst = -1;
        goto done;
    }
    if (cu_packed_type(T)) { /* the layout uploads have, each copy packed where it lies (OB_CUDA_TQ2_ALIGN's depends on it) */
        memcpy(file, wq, bytes);
        cu_pack_rows(T, file, wq, n_in, n_rows);
        for (int o = 0; o < 3; o++) cu_pack_rows(T, file, wm[o], n_in, n_rows);
    } else {
        for (int o = 0; o < 3; o++) memcpy(wm[o], wq, bytes);
    }
    if (T == OB_TYPE_LEAN4) /* rows are stored rotated: the decoder gives the rotated values */
        for (int64_t b0 = 0; b0 < n_in * n_rows; b0 += 128) rotate128(wd + b0);
    {
        const float tscale = ob_tensor_scale(T, wq, n_in, n_rows); /* i2_s: applied after the dot */
        for (int r = 0; r < n_rows; r++) {
            for (int64_t e = 0; e < n_in; e++) c[e] = (int8_t)((int)(chk_next() % 255) - 127);
            double ref = 0, mag = 0, got = 0;
            for (int b = 0; b < nsb; b++) {
                const float d = 0.01f + 0.001f * (float)(chk_next() % 100);
                int sum = 0;
                for (int i = 0; i < 32; i++) {
                    sum += c[32 * b + i];
                    const double t = (double)wd[(size_t)r * n_in + 32 * b + i] * d * c[32 * b + i];
                    ref += t;
                    mag += fabs(t);
                }
                xs[b] = make_float2(d, d * (float)sum);
                q8w<T> W;
                q8_load(W, wq + (size_t)r * rb, b, rb);
                int xw[8];
                memcpy(xw, c + 32 * b, 32);
                got += (double)W.dot(xw, xs[b]) * tscale;
                /* the held rows' forms (cuda_gemv.cu): the activation's terms taken apart (q8_xpre,
                 * OB_CUDA_Q6K_PRE), and loads told at compile time that a row is 16-byte aligned
                 * (OB_CUDA_GV_A16; wq is, and so its rows of a multiple of 16 bytes) */
                if (q8_dot_pre(W, xw, xs[b], q8_xpre<T>(xw)) != W.dot(xw, xs[b])) {
                    worst = 1;
                    goto done;
                }
                if (rb % 16 == 0 && ((uintptr_t)wq & 15) == 0) {
                    q8w<T> A;
                    q8_load<T, true>(A, wq + (size_t)r * rb, b, rb);
                    if (A.dot(xw, xs[b]) != W.dot(xw, xs[b])) {
                        worst = 1;
                        goto done;
                    }
                }
                for (int o = 0; o < 3; o++) {
                    q8w<T> M;
                    q8_load(M, wm[o] + (size_t)r * rb, b, rb);
                    if (M.dot(xw, xs[b]) != W.dot(xw, xs[b])) {
                        worst = 1;
                        goto done;
                    }
                }
            }
            const double err = fabs(got - ref) / (mag > 0 ? mag : 1);
            if (err > worst) worst = err;
        }
    }
done:
    free(file);
    free(wq2);
    free(wf);
    free(wd);
    free(wq);
    free(c);
    free(xs);
    return worst;
}

extern "C" int ob_cuda_q8_selftest(char *report, size_t cap) {
    static const struct {
        double (*check)(int64_t, int);
        const char *name;
        int n_in; /* two blocks or more of the type */
    } types[] = {
        {check_type<OB_TYPE_Q4_0>, "q4_0", 96},   {check_type<OB_TYPE_Q4_1>, "q4_1", 96},     {check_type<OB_TYPE_Q5_0>, "q5_0", 96},
        {check_type<OB_TYPE_Q5_1>, "q5_1", 96},   {check_type<OB_TYPE_Q8_0>, "q8_0", 96},     {check_type<OB_TYPE_IQ4_NL>, "iq4_nl", 96},
        {check_type<OB_TYPE_Q2_K>, "q2_K", 512},  {check_type<OB_TYPE_Q3_K>, "q3_K", 512},
        {check_type<OB_TYPE_Q4_K>, "q4_K", 512},  {check_type<OB_TYPE_Q5_K>, "q5_K", 512},    {check_type<OB_TYPE_Q6_K>, "q6_K", 512},
        {check_type<OB_TYPE_IQ4_XS>, "iq4_xs", 512}, {check_type<OB_TYPE_TQ1_0>, "tq1_0", 512}, {check_type<OB_TYPE_TQ2_0>, "tq2_0", 512},
        {check_type<OB_TYPE_I2_S>, "i2_s", 512},  {check_type<OB_TYPE_LEAN4>, "lean4", 512},
        {check_type<OB_TYPE_TQ2_0>, "tq2_0", 2560}, /* (BitNet's rows: 660 bytes, room for OB_CUDA_TQ2_ALIGN's lead) */
    };
    int bad = 0;
    size_t at = 0;
    report[0] = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const double e = types[i].check(types[i].n_in, 5);
        if (e < 0 && !ob_tensor_can_quantize(types[i].name[0] == 'l' ? OB_TYPE_LEAN4 : -1)) continue; /* a build without lean4 */
        const int fail = !(e >= 0 && e <= 2e-6);
        bad += fail;
        if (at < cap)
            at += (size_t)snprintf(report + at, cap - at, "%s %s %.2g%s; ", types[i].name, fail ? "FAIL" : "ok", e,
                                   e < 0 ? " (cannot quantize)" : "");
    }
    return bad;
}
