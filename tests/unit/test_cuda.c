/* test_cuda.c — the CUDA backend against the CPU reference (suites cuda_kernels, cuda_golden).
 *
 * cuda_kernels, through the backend table only (no CUDA headers here):
 *  - matmul of every weight type the CPU backend runs, on random shapes with ragged edges
 *    (row counts that are not a multiple of a block's rows, one-element types with odd row
 *    lengths, 1..77 tokens: the fused kernel's token groups and the tensor-core path), against
 *    the exact dot products of the dequantized weights (format/quant_tensor's reference) in
 *    double; every output is poisoned with NaN first, so an unwritten one fails;
 *  - get_rows of every type, exactly;
 *  - the fused ops (matmul_add, matmul_multi, matmul_glu, rope_kv, rope_attention, rmsnorm_act_quant) against
 *    the plain ops they stand for, bit for bit, on both matmul paths and the fallback kernel,
 *    and the int8 codes RMSNorm / act_quant_i8 hand to the next projection against the
 *    quantizer's own;
 *  - rmsnorm, rope (both styles, partial rotation, llama3 frequency factors), kv_write (f32,
 *    f16, q8_0 rows byte for byte), attention (each cache type, GQA, several sequences, long
 *    contexts that take the split-over-the-sequence path), add, add_bias, glu, act_quant_i8
 *    (BitNet's int8 codes exactly) and copy against the CPU backend.
 * cuda_host: the int8 decoders of the decode matmul on the host (CUDA=1 builds; no GPU needed).
 * cuda_golden: every architecture's golden test (test_golden.c) with --device cuda, and recorded
 * decode steps (CUDA graphs) against eager ones: a tiny model decodes two sequences token by
 * token past several attention spans, with and without OB_CUDA_GRAPH=0, logits compared.
 * Both print a skip message and pass where the build has no CUDA backend or no GPU is found.
 * device_select (every build): the device names and what "auto" resolves to.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

void ob_test_golden_device(const char *device); /* test_golden.c */
void ob_test_weight_as(const char *device, int steps, int dflt1, int dflt2); /* test_fused_engine.c */
void ob_test_golden_case(const char *arch, const char *type, const char *device, const char *env,
                         const char *val); /* test_golden.c */
int ob_test_same_logits(const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                        const char *label); /* test_fused_engine.c */
int ob_test_same_logits_mixed(const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                              const char *label); /* test_fused_engine.c */
float *ob_test_decode_two(const char *path, const char *device, const char *env, const char *val, int steps,
                          int *n_vocab); /* test_fused_engine.c */
ob_ctx_t *ob_test_open(const char *path, const char *device, const char *env, const char *val, int n_ctx, int n_seq, int n_batch,
                       ob_model_t **mo, int *n_vocab); /* test_fused_engine.c */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnext(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float runi(void) { return (float)(rnext() >> 40) / 16777216.0f * 2.0f - 1.0f; }
static float rnorm(void) { return (runi() + runi() + runi() + runi()) * 0.866f; }
static int rint_in(int lo, int hi) { return lo + (int)(rnext() % (uint64_t)(hi - lo + 1)); }

static ob_backend *gpu_new(void) {
    char err[512];
    ob_backend *b = ob_backend_by_name("cuda", err, sizeof err);
    ob_backend_opts o = {1, 0};
    if (b && b->init(b, &o, err, sizeof err) != 0) {
        free(b);
        b = NULL;
    }
    if (!b) fprintf(stderr, "  cuda: skipped: %s\n", err);
    return b;
}

/* A second GPU backend created with env var = val (the backend reads its options at init). */
static ob_backend *gpu_new_with(const char *var, const char *val) {
    setenv(var, val, 1);
    ob_backend *b = gpu_new();
    unsetenv(var);
    return b;
}

/* The same with several: env holds names and values, NULL after the last. */
static ob_backend *gpu_new_env(const char *const *env) {
    for (int k = 0; env[k]; k += 2) setenv(env[k], env[k + 1], 1);
    ob_backend *b = gpu_new();
    for (int k = 0; env[k]; k += 2) unsetenv(env[k]);
    return b;
}

static void gpu_free(ob_backend *b) { /* (NULL: nothing) */
    if (!b) return;
    b->free(b);
    free(b);
}

static float *randf(size_t n, float amp) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rnorm() * amp;
    return x;
}

/* device copy of host bytes that the test may write to */
static void *dev_copy(ob_backend *b, const void *host, size_t bytes) { return (void *)b->upload(b, host, bytes); }

static void *dev_nan(ob_backend *b, size_t n_floats) {
    float *h = malloc(n_floats * sizeof(float));
    for (size_t i = 0; i < n_floats; i++) h[i] = NAN;
    void *d = dev_copy(b, h, n_floats * sizeof(float));
    free(h);
    return d;
}

/* ||a - ref|| / ||ref||, NaN anywhere gives infinity */
static double rel_err(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i]) return INFINITY;
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}


/* x [rows][k] as the int8 path of the decode matmul sees it (cuda_q8.cuh, quant_row: the CPU's
 * quantizer): a row on the grid of max|x| / 127 keeps that scale, others get one per 32
 * elements; d * code for each element. A plain copy when !on. */
static float *q8_activations(const float *x, int rows, int64_t k, int on) {
    float *q = malloc((size_t)rows * k * sizeof(float));
    memcpy(q, x, (size_t)rows * k * sizeof(float));
    for (int r = 0; on && r < rows; r++) {
        const float *xr = x + (size_t)r * k;
        float *qr = q + (size_t)r * k, amax = 0;
        for (int64_t i = 0; i < k; i++) amax = fmaxf(amax, fabsf(xr[i]));
        const float dr = amax / 127.0f, idr = amax > 0 ? 1.0f / dr : 0.0f;
        int row_mode = amax > 0;
        for (int64_t i = 0; i < k && row_mode; i++) row_mode = fabsf(xr[i] * idr - rintf(xr[i] * idr)) <= 1e-3f;
        for (int64_t b = 0; b < k; b += 32) {
            float d = dr, id = idr;
            if (!row_mode) {
                float bmax = 0;
                for (int i = 0; i < 32; i++) bmax = fmaxf(bmax, fabsf(xr[b + i]));
                d = bmax / 127.0f;
                id = d != 0 ? 1.0f / d : 0.0f;
            }
            for (int i = 0; i < 32; i++) qr[b + i] = d * fminf(fmaxf(rintf(xr[b + i] * id), -127.0f), 127.0f);
        }
    }
    return q;
}

/* Set while a backend with OB_CUDA_MMQ=1 is tested: batches the decode kernel does not take of
 * these types then go to the int8 tensor-core kernel, whose products are the int8 path's (checked
 * at the decode kernel's tolerance, so a silent fallback to the 16-bit path fails). */
static int matmul_mmq;
static int in_types(int type, const int *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] == type) return 1;
    return 0;
}
static int mmq_type(int type) {
    static const int t[] = {OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_Q8_0, OB_TYPE_IQ4_NL, OB_TYPE_Q4_K,
                            OB_TYPE_Q5_K, OB_TYPE_IQ4_XS, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0, OB_TYPE_I2_S, OB_TYPE_LEAN4};
    return in_types(type, t, sizeof t / sizeof t[0]);
}
/* The decode kernel's int8-path types (cuda_q8.cuh's cu_q8_type): up to 32 tokens there, but up
 * to 12 (the backend's default OB_CUDA_GEMV_MAX) in steps of distinct sequences (matmul_distinct:
 * the backend's step_kind(1)); the float-path types up to 32. */
static int matmul_distinct;
static int q8_type(int type) {
    static const int t[] = {OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q6_K};
    return mmq_type(type) || in_types(type, t, sizeof t / sizeof t[0]);
}

/* Random weights of n values; for the ternary types (with ternary) values in {-0.25, 0, 0.25}, as
 * convert feeds them. */
static float *random_weights(int type, size_t n, int ternary) {
    float *wf = randf(n, 0.5f);
    if (ternary && (type == OB_TYPE_I2_S || type == OB_TYPE_TQ1_0 || type == OB_TYPE_TQ2_0))
        for (size_t i = 0; i < n; i++) wf[i] = wf[i] > 0.3f ? 0.25f : wf[i] < -0.3f ? -0.25f : 0.0f;
    return wf;
}

/* The weight of quantized bytes wq uploaded to g. */
static ob_weight weight_on(ob_backend *g, int type, int64_t n_in, int64_t n_out, const void *wq) {
    ob_weight w = {g->upload_weight(g, wq, ob_type_tensor_size(type, n_in, n_out), type, n_in, n_out), type, n_in, n_out,
                   ob_type_row_size(type, n_in),
                   ob_tensor_scale(type, wq, n_in, n_out)};
    return w;
}

/* Random weights quantized to type (malloc'd bytes). */
static void *random_quantized(int type, int64_t n_in, int64_t n_out, int ternary) {
    float *wf = random_weights(type, (size_t)(n_in * n_out), ternary);
    void *wq = malloc(ob_type_tensor_size(type, n_in, n_out));
    CHECK(ob_tensor_quantize(type, wf, wq, n_in, n_out) == 0);
    free(wf);
    return wq;
}

/* (i2_s: f16_scale 1 keeps the quantizer's scale of the ternary weights, 0.25, an f16 value, which
 * the tensor-core path folds into the f16 weights (mm_fold, cuda_matmul.cu); 0 one f16 cannot hold,
 * which multiplies each dot product) */
static void check_matmul(ob_backend *g, int type, int64_t n_in, int64_t n_out, const int *ns, int n_ns, int f16_scale) {
    const ob_type_traits *t = ob_type_get(type);
    size_t wbytes = ob_type_tensor_size(type, n_in, n_out);
    float *wf = random_weights(type, (size_t)(n_in * n_out), 1);
    void *wq = malloc(wbytes);
    float *wd = malloc((size_t)(n_in * n_out) * sizeof(float));
    CHECK(ob_tensor_quantize(type, wf, wq, n_in, n_out) == 0);
    if (type == OB_TYPE_I2_S && !f16_scale) {
        const float sc = 1e5f; /* (above f16's largest, 65504: folded, it would be inf) */
        memcpy((uint8_t *)wq + n_in * n_out / 4, &sc, 4);
    }
    CHECK(ob_tensor_dequantize(type, wq, wd, n_in, n_out) == 0);
    ob_weight w = weight_on(g, type, n_in, n_out, wq);
    CHECK(w.data != NULL);
    for (int k = 0; k < n_ns; k++) {
        int n = ns[k];
        float *x = randf((size_t)n * n_in, 1.0f), *y = malloc((size_t)n * n_out * sizeof(float));
        if (k == 1 && n_in % 32 == 0) /* rows on an int8 grid, as BitNet's quantizer leaves them */
            for (int i = 0; i < n; i++) {
                float sc = 20.0f + 10.0f * (float)i;
                for (int64_t e = 0; e < n_in; e++) x[(size_t)i * n_in + e] = (float)rint_in(-127, 127) / sc;
                x[(size_t)i * n_in] = 127.0f / sc;
            }
        double *ref = malloc((size_t)n * n_out * sizeof(double));
        double *ref8 = malloc((size_t)n * n_out * sizeof(double));
        /* lean4's int8 path quantizes the rotated activations and dots them with the stored
         * (rotated) rows: its int8 reference takes both in that basis */
        const int lean = type == OB_TYPE_LEAN4;
        float *xr = malloc((size_t)n * n_in * sizeof(float)), *wr = lean ? malloc((size_t)(n_in * n_out) * sizeof(float)) : wd;
        memcpy(xr, x, (size_t)n * n_in * sizeof(float));
        if (lean) {
            memcpy(wr, wd, (size_t)(n_in * n_out) * sizeof(float));
            ob_lean_rotate(xr, (int64_t)n * n_in);
            ob_lean_rotate(wr, n_in * n_out);
        }
        float *xq = q8_activations(xr, n, n_in, n_in % 32 == 0);
        for (int i = 0; i < n; i++)
            for (int64_t r = 0; r < n_out; r++) {
                double s = 0, s8 = 0;
                for (int64_t e = 0; e < n_in; e++) {
                    s += (double)wd[r * n_in + e] * x[(size_t)i * n_in + e];
                    s8 += (double)wr[r * n_in + e] * xq[(size_t)i * n_in + e];
                }
                ref[(size_t)i * n_out + r] = s;
                ref8[(size_t)i * n_out + r] = s8;
            }
        void *dx = dev_copy(g, x, (size_t)n * n_in * sizeof(float)), *dy = dev_nan(g, (size_t)n * n_out);
        g->matmul(g, &w, dx, dy, n);
        g->download(g, y, dy, (size_t)n * n_out * sizeof(float));
        /* decode kernels: float32 activations (1e-5 measured order), or int8 activations, then
         * against the same dot product with the activations as the kernel quantizes them;
         * tensor cores: 16-bit operands */
        double err = rel_err(y, ref, (size_t)n * n_out), err8 = rel_err(y, ref8, (size_t)n * n_out);
        /* the 16-bit path of a distinct step is told from a silent int8 one by which reference it
         * is closer to (not on rows already on an int8 grid, where the two references agree) */
        const int dec16 = matmul_distinct && q8_type(type) && n > 12;
        if (dec16 && k != 1 && !(err < 0.5 * err8)) {
            fprintf(stderr, "  cuda matmul %-7s n=%-3d: rel err %.3g against the float reference, %.3g against the int8 one\n",
                    t->name, n, err, err8);
            CHECK(err < 0.5 * err8);
        }
        const int dec = n <= (q8_type(type) && matmul_distinct ? 12 : 32);
        const int mmq = !dec && matmul_mmq && mmq_type(type) && n_in % 32 == 0;
        int on8 = (dec || mmq) && err8 < err;
        if (on8 || mmq) err = err8;
        double tol = dec || mmq || type == OB_TYPE_F32 ? 2e-5 : type == OB_TYPE_BF16 ? 1.5e-2 : 3e-3;
        if (err > tol || ob_test_verbose)
            fprintf(stderr, "  cuda matmul %-7s %5lld x %5lld n=%-3d rel err %.3g (tol %.1g%s)\n", t->name, (long long)n_in,
                    (long long)n_out, n, err, tol, on8 ? ", int8 activations" : "");
        CHECK(err <= tol);
        free(ref8);
        free(xq);
        free(xr);
        if (lean) free(wr);
        g->dealloc(g, dx);
        g->dealloc(g, dy);
        free(x);
        free(y);
        free(ref);
    }
    /* embedding rows */
    int nid = 5;
    int32_t ids[5];
    for (int i = 0; i < nid; i++) ids[i] = rint_in(0, (int)n_out - 1);
    float *rows = malloc((size_t)nid * n_in * sizeof(float));
    double *rref = malloc((size_t)nid * n_in * sizeof(double));
    for (int i = 0; i < nid; i++)
        for (int64_t e = 0; e < n_in; e++) rref[(size_t)i * n_in + e] = wd[(size_t)ids[i] * n_in + e];
    void *dr = dev_nan(g, (size_t)nid * n_in);
    g->get_rows(g, &w, ids, nid, dr);
    g->download(g, rows, dr, (size_t)nid * n_in * sizeof(float));
    double err = rel_err(rows, rref, (size_t)nid * n_in);
    if (err > 1e-6) fprintf(stderr, "  cuda get_rows %s rel err %.3g\n", t->name, err);
    CHECK(err <= 1e-6);
    g->dealloc(g, dr);
    g->dealloc(g, (void *)w.data);
    free(rows);
    free(rref);
    free(wf);
    free(wq);
    free(wd);
}

static void test_matmul_types(ob_backend *g) {
    static const int ns[] = {1, 2, 3, 5, 8, 13, 32, 33, 77};
    for (int type = 0; type < OB_TYPE_EXT_END; type++) {
        if (type == OB_TYPE_COUNT) type = OB_TYPE_EXT_FIRST;
        const ob_type_traits *t = ob_type_get(type);
        if (!t || !t->to_float || !ob_tensor_can_quantize(type)) continue;
        CHECK(g->supports(g, type));
        int bs = t->block_size;
        /* a ragged shape, a wide one (many chunks per thread), and for one-element types an odd row */
        int64_t in1 = (int64_t)bs * rint_in(1, bs == 1 ? 300 : bs >= 128 ? 9 : 40), out1 = rint_in(1, 67);
        check_matmul(g, type, in1, out1, ns, 9, 1);
        check_matmul(g, type, bs == 1 ? 2048 : (int64_t)bs * (4096 / bs), 37, ns, 3, 1);
        if (bs == 1) check_matmul(g, type, 77, 19, ns, 9, 1);
        if (type == OB_TYPE_I2_S) check_matmul(g, type, in1, out1, ns, 9, 0);
    }
}

/* ---- fused ops: the same bits as the plain ops they stand for ------------------------- */

/* (ternary: the ternary types' weights -0.25, 0, 0.25, so i2_s's scale 0.25, an f16 value) */
static ob_weight fused_weight_t(ob_backend *g, int type, int64_t n_in, int64_t n_out, int ternary) {
    void *wq = random_quantized(type, n_in, n_out, ternary);
    ob_weight w = weight_on(g, type, n_in, n_out, wq);
    free(wq);
    return w;
}

static ob_weight fused_weight(ob_backend *g, int type, int64_t n_in, int64_t n_out) { return fused_weight_t(g, type, n_in, n_out, 0); }

static float *dev_get(ob_backend *g, const void *dev, size_t n) {
    float *h = malloc(n * sizeof(float));
    g->download(g, h, dev, n * sizeof(float));
    return h;
}

static void cmp_exact(ob_backend *g, const void *a, const void *b, size_t n, const char *what, int type, int tokens) {
    float *ha = dev_get(g, a, n), *hb = dev_get(g, b, n);
    double d = max_abs_diff(ha, hb, n);
    if (d != 0 || ob_test_verbose) fprintf(stderr, "  cuda %-12s %-7s n=%-3d max|diff| %.3g (must be 0)\n", what, ob_type_get(type)->name, tokens, d);
    CHECK(d == 0);
    free(ha);
    free(hb);
}

/* matmul_add, matmul_multi (one type, and mixed types as Q4_K_M files have) and matmul_glu
 * against matmul + add / three matmuls / two matmuls + glu, for token counts on both paths
 * (ternary: fused_weight_t's). */
static void check_fused(ob_backend *g, int type, int type2, int64_t n_in, int64_t n_out, int ternary) {
    static const int ns[] = {1, 3, 8, 17, 40};
    ob_weight w[3] = {fused_weight_t(g, type, n_in, n_out, ternary), fused_weight_t(g, type, n_in, n_out / 4 + 1, ternary),
                      fused_weight_t(g, type2, n_in, n_out / 4 + 1, ternary)};
    ob_weight up = fused_weight_t(g, type, n_in, n_out, ternary);
    for (int k = 0; k < 5; k++) {
        int n = ns[k];
        size_t nx = (size_t)n * n_in, ny = (size_t)n * n_out;
        float *x = randf(nx, 1.0f), *y0 = randf(ny, 1.0f);
        void *dx = dev_copy(g, x, nx * 4), *da = dev_copy(g, y0, ny * 4), *db = dev_copy(g, y0, ny * 4), *dt = dev_nan(g, ny);
        g->matmul_add(g, &w[0], dx, da, n);
        g->matmul(g, &w[0], dx, dt, n);
        g->add(g, db, dt, ny);
        cmp_exact(g, da, db, ny, "matmul_add", type, n);
        const ob_weight *ws[3] = {&w[0], &w[1], &w[2]};
        float *ya[3], *yb[3];
        for (int i = 0; i < 3; i++) {
            ya[i] = dev_nan(g, (size_t)n * w[i].n_out);
            yb[i] = dev_nan(g, (size_t)n * w[i].n_out);
            g->matmul(g, &w[i], dx, yb[i], n);
        }
        g->matmul_multi(g, ws, ya, 3, dx, n);
        for (int i = 0; i < 3; i++) {
            cmp_exact(g, ya[i], yb[i], (size_t)n * w[i].n_out, "matmul_multi", w[i].type, n);
            g->dealloc(g, ya[i]);
            g->dealloc(g, yb[i]);
        }
        for (int act = 0; act < 2; act++) {
            void *gate = dev_nan(g, ny), *upb = dev_nan(g, ny), *gate2 = dev_nan(g, ny), *up2 = dev_nan(g, ny);
            g->matmul_glu(g, (ob_act)act, &w[0], &up, dx, gate, upb, n, NULL);
            g->matmul(g, &w[0], dx, gate2, n);
            g->matmul(g, &up, dx, up2, n);
            g->glu(g, (ob_act)act, gate2, up2, ny);
            cmp_exact(g, gate, gate2, ny, act ? "glu relu2" : "glu silu", type, n);
            void *bufs[] = {gate, upb, gate2, up2};
            for (int i = 0; i < 4; i++) g->dealloc(g, bufs[i]);
        }
        /* RMSNorm quantizes its output for the next projection: the same codes as the quantizer's */
        void *dh = dev_nan(g, nx), *dh2 = dev_nan(g, nx);
        g->rmsnorm(g, dx, NULL, dh, n, (int)n_in, 1e-5f);
        g->matmul(g, &w[0], dh, da, n);
        g->copy(g, dh2, dh, nx * 4);
        g->matmul(g, &w[0], dh2, db, n);
        cmp_exact(g, da, db, ny, "norm codes", type, n);
        /* above 32 tokens (and in steps of 5+ distinct sequences) the norm writes an f16 copy of
         * its output for cuBLAS's products instead (the same values as their own conversion: just
         * checked); once the row is written again the copy is stale and the product converts the
         * new values: by an add, and by a matmul whose output overlaps it (that matmul converts
         * nothing itself where it takes the staged kernel or f32's SGEMM: w[1] of check_fused's
         * f32 shapes) */
        g->rmsnorm(g, dx, NULL, dh, n, (int)n_in, 1e-5f);
        g->add(g, dh, dx, nx);
        g->matmul(g, &w[0], dh, da, n);
        g->copy(g, dh2, dh, nx * 4);
        g->matmul(g, &w[0], dh2, db, n);
        cmp_exact(g, da, db, ny, "norm, add", type, n);
        {
            size_t n2 = (size_t)n * w[2].n_out;
            void *d2a = dev_nan(g, n2), *d2b = dev_nan(g, n2);
            g->rmsnorm(g, dx, NULL, dh, n, (int)n_in, 1e-5f);
            g->matmul(g, &w[1], dx, dh, n); /* n x (n_out / 4 + 1) floats over dh's start */
            g->matmul(g, &w[2], dh, d2a, n);
            g->copy(g, dh2, dh, nx * 4);
            g->matmul(g, &w[2], dh2, d2b, n);
            cmp_exact(g, d2a, d2b, n2, "norm, matmul", w[2].type, n);
            g->dealloc(g, d2a);
            g->dealloc(g, d2b);
        }
        /* BitNet's quantizer and the fused norm + quantizer hand over their codes the same way */
        g->rmsnorm_act_quant(g, dx, NULL, dh, n, (int)n_in, 1e-5f);
        g->matmul(g, &w[0], dh, da, n);
        g->copy(g, dh2, dh, nx * 4);
        g->matmul(g, &w[0], dh2, db, n);
        cmp_exact(g, da, db, ny, "norm+aq codes", type, n);
        g->rmsnorm(g, dx, NULL, dh2, n, (int)n_in, 1e-5f);
        g->act_quant_i8(g, dh2, n, (int)n_in);
        g->matmul(g, &w[0], dh2, db, n);
        cmp_exact(g, da, db, ny, "aq codes", type, n);
        cmp_exact(g, dh, dh2, nx, "norm+aq", type, n);
        void *bufs[] = {dx, da, db, dt, dh, dh2};
        for (int i = 0; i < 6; i++) g->dealloc(g, bufs[i]);
        free(x);
        free(y0);
    }
    for (int i = 0; i < 3; i++) g->dealloc(g, (void *)w[i].data);
    g->dealloc(g, (void *)up.data);
}

static void test_fused(ob_backend *g) {
    CHECK(g->matmul_add && g->matmul_multi && g->matmul_glu && g->rmsnorm_act_quant);
    if (!g->matmul_add || !g->matmul_multi || !g->matmul_glu || !g->rmsnorm_act_quant) return;
    check_fused(g, OB_TYPE_Q4_0, OB_TYPE_Q6_K, 512, 300, 0);
    check_fused(g, OB_TYPE_Q4_K, OB_TYPE_Q4_K, 2048, 257, 0);
    check_fused(g, OB_TYPE_TQ2_0, OB_TYPE_TQ1_0, 768, 129, 0);
    check_fused(g, OB_TYPE_I2_S, OB_TYPE_I2_S, 640, 70, 0);
    check_fused(g, OB_TYPE_I2_S, OB_TYPE_I2_S, 640, 70, 1); /* (a scale f16 holds: folded into the f16 weights) */
    check_fused(g, OB_TYPE_F16, OB_TYPE_Q8_0, 1024, 96, 0);
    check_fused(g, OB_TYPE_F32, OB_TYPE_F16, 77, 33, 0);          /* odd rows: the fallback kernel */
    check_fused(g, OB_TYPE_Q8_0, OB_TYPE_Q8_0, 14336, 40, 0);     /* long rows: one per block */
    check_fused(g, OB_TYPE_F32, OB_TYPE_F32, 12288, 9, 0);        /* rows too long to stage: fallback */
    if (g->supports(g, OB_TYPE_LEAN4)) {
        check_fused(g, OB_TYPE_LEAN4, OB_TYPE_LEAN4, 512, 65, 0);
        /* lean4 rotates each input into one scratch buffer: a second input must not reuse the first's codes */
        ob_weight w = fused_weight(g, OB_TYPE_LEAN4, 512, 64);
        float *x1 = randf(512, 1.0f), *x2 = randf(512, 1.0f);
        void *d1 = dev_copy(g, x1, 2048), *d2 = dev_copy(g, x2, 2048), *ya = dev_nan(g, 64), *yb = dev_nan(g, 64);
        g->matmul(g, &w, d1, ya, 1);
        g->matmul(g, &w, d2, ya, 1);
        g->copy(g, yb, ya, 4); /* an op between: nothing is reused */
        g->matmul(g, &w, d2, yb, 1);
        cmp_exact(g, ya, yb, 64, "lean4 twice", OB_TYPE_LEAN4, 1);
        void *bufs[] = {d1, d2, ya, yb, (void *)w.data};
        for (int i = 0; i < 5; i++) g->dealloc(g, bufs[i]);
        free(x1);
        free(x2);
    }
}

/* Whether backends a and b give the same bits for n tokens of a random type weight (the same
 * inputs), on a after a product of `first` tokens (0: none) and on b after reps products of n. */
static int same_matmul(ob_backend *a, ob_backend *b, int type, int64_t n_in, int64_t n_out, int n, int first, int reps) {
    void *wq = random_quantized(type, n_in, n_out, 0);
    const int nx = first > n ? first : n;
    float *x = randf((size_t)nx * n_in, 1.0f);
    ob_backend *bs[2] = {a, b};
    float *h[2];
    for (int i = 0; i < 2; i++) {
        ob_weight w = weight_on(bs[i], type, n_in, n_out, wq);
        void *dx = dev_copy(bs[i], x, (size_t)nx * n_in * 4), *dy = dev_nan(bs[i], (size_t)nx * n_out);
        if (i == 0 && first) bs[i]->matmul(bs[i], &w, dx, dy, first);
        for (int r = 0; r < (i ? reps : 1); r++) bs[i]->matmul(bs[i], &w, dx, dy, n);
        h[i] = dev_get(bs[i], dy, (size_t)n * n_out);
        void *bufs[] = {dx, dy, (void *)w.data};
        for (int j = 0; j < 3; j++) bs[i]->dealloc(bs[i], bufs[j]);
    }
    const int same = memcmp(h[0], h[1], (size_t)n * n_out * 4) == 0;
    free(h[0]);
    free(h[1]);
    free(x);
    free(wq);
    return same;
}

/* Launches of weights of two types on one input so far (likewise). */
static long gv_two_launches(void) {
#ifdef OB_CUDA
    return ob_cuda_gv_two_type_launches();
#else
    return 0;
#endif
}

/* Weights of two types on one input in one launch (k_gv2: Q4_K_M's q4_K Q and K beside its q6_K
 * V) against the plain matmuls, bit for bit (check_fused), at 1, 3, 8 and 17 tokens (its three
 * instances; 40 tokens decline), either order of the types, one row a block and ten; four
 * launches a shape. With OB_CUDA_GV_TWO=0 none (a launch a type), the same bits. */
static void test_gv_two(ob_backend *g) {
    const long l0 = gv_two_launches();
    check_fused(g, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 2048, 257, 0);
    check_fused(g, OB_TYPE_Q6_K, OB_TYPE_Q5_K, 4096, 130, 0); /* (the pair the other way round) */
    check_fused(g, OB_TYPE_Q3_K, OB_TYPE_Q4_K, 1024, 4100, 0);
    const long made = gv_two_launches() - l0;
    if (made != 12 || ob_test_verbose) fprintf(stderr, "  cuda two-type launches %ld (must be 12)\n", made);
    CHECK(made == 12);
    ob_backend *off = gpu_new_with("OB_CUDA_GV_TWO", "0");
    CHECK(off != NULL);
    if (!off) return;
    const long l1 = gv_two_launches();
    check_fused(off, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 2048, 257, 0);
    CHECK(gv_two_launches() == l1);
    gpu_free(off);
}

/* Products that read a kept f16 copy so far (the CUDA backend's count; builds without it have none). */
static long f16_reads(void) {
#ifdef OB_CUDA
    return ob_cuda_f16_copy_reads();
#else
    return 0;
#endif
}

/* GLU launches that made their output's codes so far, and products that read codes their input's
 * producer made (likewise). */
static long glu_codes_made(void) {
#ifdef OB_CUDA
    return ob_cuda_glu_codes_made();
#else
    return 0;
#endif
}
static long cuda_downloads(void) {
#ifdef OB_CUDA
    return ob_cuda_downloads();
#else
    return 0;
#endif
}
static long gv_direct_launches(void) {
#ifdef OB_CUDA
    return ob_cuda_gv_direct_launches();
#else
    return 0;
#endif
}
static long codes_handed(void) {
#ifdef OB_CUDA
    return ob_cuda_codes_handed();
#else
    return 0;
#endif
}
/* Fused-form launches that read their step's angles so far (likewise). */
static long angles_read(void) {
#ifdef OB_CUDA
    return ob_cuda_angles_read();
#else
    return 0;
#endif
}
/* Launches of the grouped attention's fused form so far (likewise). */
static long gqa_rope_launches(void) {
#ifdef OB_CUDA
    return ob_cuda_gqa_rope_launches();
#else
    return 0;
#endif
}

/* The decode GLU's codes for ffn_down (on: g makes them for this type and shape; one token): matmul_glu of n tokens
 * naming the down weight (n_in = the GLU's n_out) as out_to, then that weight reading its output,
 * against the same down product of a copy of that output (the quantizer's codes): the same bits
 * (no random row lies on an int8 grid), for GLU widths that split a 32-element block over several
 * blocks of the launch; the down product read the GLU's codes (counted); none made without an
 * out_to; on 0 (g with OB_CUDA_GLU_CODES=0): none at all. */
static void check_glu_codes(ob_backend *g, int type, int64_t n_in, int64_t n_ff, int on) {
    static const int ns[] = {1, 3, 8, 17, 32};
    ob_weight gw = fused_weight(g, type, n_in, n_ff), uw = fused_weight(g, type, n_in, n_ff), dw = fused_weight(g, type, n_ff, n_in);
    for (int k = 0; k < 5; k++) {
        const int n = ns[k];
        const size_t nx = (size_t)n * n_in, nf = (size_t)n * n_ff;
        float *x = randf(nx, 1.0f);
        void *dx = dev_copy(g, x, nx * 4), *gate = dev_nan(g, nf), *up = dev_nan(g, nf), *g2 = dev_nan(g, nf);
        void *ya = dev_nan(g, nx), *yb = dev_nan(g, nx);
        const long made = glu_codes_made();
        if (n == 1) { /* no out_to (an op between): no codes */
            g->matmul_glu(g, OB_ACT_SILU, &gw, &uw, dx, gate, up, n, NULL);
            CHECK(glu_codes_made() == made);
        }
        g->matmul_glu(g, OB_ACT_SILU, &gw, &uw, dx, gate, up, n, &dw);
        const long handed = codes_handed();
        g->matmul(g, &dw, gate, ya, n);
        const int want = on && n == 1; /* one token only; off: the quantizer runs before the down product */
        CHECK(glu_codes_made() == made + want);
        CHECK(codes_handed() == handed + want); /* the down product read them */
        g->copy(g, g2, gate, nf * 4);
        g->matmul(g, &dw, g2, yb, n);
        cmp_exact(g, ya, yb, nx, "glu codes", type, n);
        void *bufs[] = {dx, gate, up, g2, ya, yb};
        for (int i = 0; i < 6; i++) g->dealloc(g, bufs[i]);
        free(x);
    }
    const ob_weight *ws[] = {&gw, &uw, &dw};
    for (int i = 0; i < 3; i++) g->dealloc(g, (void *)ws[i]->data);
}

/* ---- the one-token feed-forward kernel (ffn_decode, OB_CUDA_FFN=1: cuda_ffn.cu) ---------------- */

static long ffn_launches(void) {
#ifdef OB_CUDA
    return ob_cuda_ffn_launches();
#else
    return 0;
#endif
}

/* ffn_decode of one token on gf against the plain ops on g (OB_CUDA_FFN=0: rmsnorm, matmul_glu,
 * matmul_add; with sub, BitNet's: rmsnorm_act_quant, matmul_glu, the sub-norm's rmsnorm_act_quant,
 * matmul_add): within 2e-5 of the output's scale (down's summation order differs; a wrong chunk,
 * scale or row is off by the whole product), the same bits twice (no atomics), one launch counted;
 * take 0: declined (0 returned, nothing launched, x as it was); g itself declines. Ternary types
 * get ternary weights. */
static void check_ffn_sub(ob_backend *gf, ob_backend *g, int type, int dtype, int64_t d, int64_t n_ff, ob_act act, int sub, int take) {
    void *wq[3] = {random_quantized(type, d, n_ff, 1), random_quantized(type, d, n_ff, 1), random_quantized(dtype, n_ff, d, 1)};
    const int64_t nin[3] = {d, d, n_ff}, nout[3] = {n_ff, n_ff, d};
    const int types[3] = {type, type, dtype};
    ob_weight wg[3], wf[3];
    for (int i = 0; i < 3; i++) {
        wg[i] = weight_on(g, types[i], nin[i], nout[i], wq[i]);
        wf[i] = weight_on(gf, types[i], nin[i], nout[i], wq[i]);
        free(wq[i]);
    }
    float *x = randf((size_t)d, 1.0f), *nw = randf((size_t)d, 1.0f), *sw = randf((size_t)n_ff, 1.0f);
    void *dx = dev_copy(g, x, d * 4), *dn = dev_copy(g, nw, d * 4), *h = dev_nan(g, d), *gate = dev_nan(g, n_ff), *up = dev_nan(g, n_ff);
    void *ds = sub ? dev_copy(g, sw, n_ff * 4) : NULL;
    CHECK(g->ffn_decode(g, act, dn, 1e-5f, &wg[0], &wg[1], &wg[2], ds, sub, dx, h, gate, up, 1) == 0);
    if (sub) {
        g->rmsnorm_act_quant(g, dx, dn, h, 1, (int)d, 1e-5f);
        g->matmul_glu(g, act, &wg[0], &wg[1], h, gate, up, 1, NULL);
        g->rmsnorm_act_quant(g, gate, ds, up, 1, (int)n_ff, 1e-5f);
        g->matmul_add(g, &wg[2], up, dx, 1);
    } else {
        g->rmsnorm(g, dx, dn, h, 1, (int)d, 1e-5f);
        g->matmul_glu(g, act, &wg[0], &wg[1], h, gate, up, 1, &wg[2]);
        g->matmul_add(g, &wg[2], gate, dx, 1);
    }
    float *want = dev_get(g, dx, d), *got[2];
    double scale = 1e-3;
    for (int64_t i = 0; i < d; i++) scale = fmax(scale, fabs(want[i]));
    void *fn = dev_copy(gf, nw, d * 4), *fh = dev_nan(gf, d), *fg = dev_nan(gf, n_ff), *fu = dev_nan(gf, n_ff);
    void *fs = sub ? dev_copy(gf, sw, n_ff * 4) : NULL;
    for (int rep = 0; rep < 2; rep++) {
        void *fx = dev_copy(gf, x, d * 4);
        const long l = ffn_launches();
        CHECK_EQ_INT(gf->ffn_decode(gf, act, fn, 1e-5f, &wf[0], &wf[1], &wf[2], fs, sub, fx, fh, fg, fu, 1), take);
        CHECK(ffn_launches() == l + take);
        got[rep] = dev_get(gf, fx, d);
        gf->dealloc(gf, fx);
    }
    const double diff = take ? max_abs_diff(got[0], want, d) / scale : max_abs_diff(got[0], x, d);
    if (diff > (take ? 2e-5 : 0) || max_abs_diff(got[0], got[1], d) != 0 || ob_test_verbose)
        fprintf(stderr, "  cuda ffn %s / %s %lldx%lld%s%s: %s %.3g, twice %.3g\n", ob_type_get(type)->name, ob_type_get(dtype)->name, (long long)d,
                (long long)n_ff, act == OB_ACT_RELU2 ? " relu2" : "", sub ? " sub-norm" : "", take ? "|diff| / scale" : "declined, x changed by", diff,
                max_abs_diff(got[0], got[1], d));
    CHECK(diff <= (take ? 2e-5 : 0));
    CHECK(max_abs_diff(got[0], got[1], d) == 0);
    void *bufs[] = {dx, dn, h, gate, up, ds};
    for (int i = 0; i < 6; i++)
        if (bufs[i]) g->dealloc(g, bufs[i]);
    void *fbufs[] = {fn, fh, fg, fu, fs};
    for (int i = 0; i < 5; i++)
        if (fbufs[i]) gf->dealloc(gf, fbufs[i]);
    for (int i = 0; i < 3; i++) {
        g->dealloc(g, (void *)wg[i].data);
        gf->dealloc(gf, (void *)wf[i].data);
    }
    free(x);
    free(nw);
    free(sw);
    free(want);
    free(got[0]);
    free(got[1]);
}

static void check_ffn_down(ob_backend *gf, ob_backend *g, int type, int dtype, int64_t d, int64_t n_ff, ob_act act, int take) {
    check_ffn_sub(gf, g, type, dtype, d, n_ff, act, 0, take);
}

/* check_ffn_down with down of the gate's type */
static void check_ffn(ob_backend *gf, ob_backend *g, int type, int64_t d, int64_t n_ff, ob_act act, int take) {
    check_ffn_down(gf, g, type, type, d, n_ff, act, take);
}

static int ffn_mode(ob_backend *b) {
#ifdef OB_CUDA
    return ob_cuda_ffn_mode(b);
#else
    (void)b;
    return 0;
#endif
}

/* gd: the default backend (bulk copies on Hopper, else off) */
static void test_ffn(ob_backend *gd) {
    ob_backend *g = gpu_new_with("OB_CUDA_FFN", "0");
    if (!g) return;
    CHECK_EQ_INT(ffn_mode(g), 0);
    if (!ffn_mode(gd)) fprintf(stderr, "  cuda ffn: off by default on this GPU (not Hopper): its default path untested\n");
    check_ffn(gd, g, OB_TYPE_Q4_0, 2048, 8192, OB_ACT_SILU, ffn_mode(gd) != 0);
    check_ffn(gd, g, OB_TYPE_Q4_K, 2048, 8192, OB_ACT_SILU, ffn_mode(gd) != 0); /* (the 1B Q4_K_M's q4_K layers) */
    check_ffn_down(gd, g, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 2048, 8192, OB_ACT_SILU, ffn_mode(gd) == 2); /* (its q6_K-down layers) */
    check_ffn_down(gd, g, OB_TYPE_Q4_0, OB_TYPE_Q6_K, 256, 1024, OB_ACT_SILU, 0); /* (no such form) */
    ob_backend *gk = gpu_new_with("OB_CUDA_FFN_K", "0");
    if (gk) check_ffn(gk, g, OB_TYPE_Q4_K, 256, 1024, OB_ACT_SILU, 0); /* q4_K declined */
    gpu_free(gk);
    ob_backend *gt = gpu_new_with("OB_CUDA_FFN", "2"); /* (bulk copies) */
    if (gt && ffn_mode(gt) == 2) {
        check_ffn(gt, g, OB_TYPE_Q4_0, 2048, 8192, OB_ACT_SILU, 1);
        check_ffn(gt, g, OB_TYPE_Q4_K, 2048, 8192, OB_ACT_SILU, 1);
        check_ffn(gt, g, OB_TYPE_Q4_K, 256, 1024, OB_ACT_RELU2, 1); /* (gate / up rows of one super-block; 16 chunks) */
        check_ffn_down(gt, g, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 256, 1024, OB_ACT_RELU2, 1); /* (down's parts of 176 and 80 rows) */
        check_ffn_down(gt, g, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 1024, 5632, OB_ACT_SILU, 1); /* (one norm value a thread) */
        check_ffn(gt, g, OB_TYPE_Q4_0, 256, 1024, OB_ACT_RELU2, 1);
        check_ffn(gt, g, OB_TYPE_Q4_0, 96, 320, OB_ACT_SILU, 1); /* (one sub-block a block, rows of 54 bytes) */
        check_ffn(gt, g, OB_TYPE_Q4_0, 320, 6400, OB_ACT_SILU, 1); /* (two gate/up rows a warp, of 180 bytes: not 16-byte aligned) */
        /* the ternary forms (tq1_0 by default, tq2_0 too with OB_CUDA_FFN_T=1): BitNet-2B's shape
         * (rows of 2560 values: three sub-blocks on some lanes; 108 blocks), with its sub-norm and
         * act_quant_i8, relu^2, and without them */
        static const char *const both[] = {"OB_CUDA_FFN", "2", "OB_CUDA_FFN_T", "1", NULL};
        ob_backend *g2 = gpu_new_env(both);
        for (int i = 0; g2 && i < 2; i++) {
            const int t = i ? OB_TYPE_TQ1_0 : OB_TYPE_TQ2_0;
            check_ffn_sub(g2, g, t, t, 2560, 6912, OB_ACT_RELU2, 1, 1);
            check_ffn_sub(g2, g, t, t, 2048, 4096, OB_ACT_SILU, 0, 1);
            check_ffn_sub(g2, g, t, t, 256, 1024, OB_ACT_RELU2, 0, 1); /* (no sub-norm: any row) */
            check_ffn_sub(g2, g, t, t, 1024, 4096, OB_ACT_RELU2, 1, 0); /* (a sub-norm on rows the row kernel takes on 256 threads) */
        }
        if (g2) {
            check_ffn_sub(g2, g, OB_TYPE_TQ2_0, OB_TYPE_TQ2_0, 3072, 8192, OB_ACT_RELU2, 1, 1);  /* (the longest rows it takes) */
            check_ffn_sub(g2, g, OB_TYPE_TQ2_0, OB_TYPE_TQ2_0, 2560, 10240, OB_ACT_RELU2, 1, 0); /* (a sub-norm over 8192 values) */
            check_ffn_sub(g2, g, OB_TYPE_I2_S, OB_TYPE_I2_S, 2560, 6912, OB_ACT_RELU2, 1, 0);    /* (i2_s: not taken) */
            check_ffn_sub(g2, g, OB_TYPE_Q4_0, OB_TYPE_Q4_0, 2048, 8192, OB_ACT_RELU2, 1, 0);    /* (a sub-norm: the q4 forms decline) */
        }
        gpu_free(g2);
        check_ffn_sub(gt, g, OB_TYPE_TQ1_0, OB_TYPE_TQ1_0, 2560, 6912, OB_ACT_RELU2, 1, 1); /* (the default: tq1_0 taken) */
        check_ffn_sub(gt, g, OB_TYPE_TQ2_0, OB_TYPE_TQ2_0, 2560, 6912, OB_ACT_RELU2, 1, 0); /* (and tq2_0 not) */
        static const char *const none[] = {"OB_CUDA_FFN", "2", "OB_CUDA_FFN_T", "0", NULL};
        ob_backend *gn = gpu_new_env(none);
        if (gn) check_ffn_sub(gn, g, OB_TYPE_TQ1_0, OB_TYPE_TQ1_0, 2560, 6912, OB_ACT_RELU2, 1, 0); /* ternary declined */
        gpu_free(gn);
        static const char *const coop[] = {"OB_CUDA_FFN_COOP", "1", NULL};
        ob_backend *gc = gpu_new_env(coop); /* (cooperative launches) */
        if (gc) check_ffn(gc, g, OB_TYPE_Q4_0, 2048, 8192, OB_ACT_SILU, 1);
        gpu_free(gc);
    }
    gpu_free(gt);
    ob_backend *gf = gpu_new_with("OB_CUDA_FFN", "1");
    if (!gf) {
        gpu_free(g);
        return;
    }
    check_ffn(gf, g, OB_TYPE_Q4_0, 2048, 8192, OB_ACT_SILU, 1); /* the 1B's shape: two sub-blocks a block, two values a thread */
    check_ffn(gf, g, OB_TYPE_Q4_0, 1024, 5632, OB_ACT_SILU, 1); /* two sub-blocks, one value a thread */
    check_ffn(gf, g, OB_TYPE_Q4_K, 2048, 8192, OB_ACT_SILU, 1); /* (two norm values a thread) */
    check_ffn(gf, g, OB_TYPE_Q4_K, 1024, 5632, OB_ACT_SILU, 1); /* (22 super-blocks a row of down: 88 blocks) */
    check_ffn_down(gf, g, OB_TYPE_Q4_K, OB_TYPE_Q6_K, 1024, 5632, OB_ACT_SILU, 0); /* q6_K down: bulk copies only */
    check_ffn(gf, g, OB_TYPE_Q4_0, 256, 1024, OB_ACT_RELU2, 1);
    check_ffn(gf, g, OB_TYPE_Q4_0, 96, 320, OB_ACT_SILU, 1);    /* rows of 3 sub-blocks, 10 blocks */
    check_ffn(gf, g, OB_TYPE_Q8_0, 256, 1024, OB_ACT_SILU, 0);  /* another type: declined */
    check_ffn(gf, g, OB_TYPE_Q4_0, 4096, 1024, OB_ACT_SILU, 0); /* rows over 2048 values: declined */
    check_ffn(gf, g, OB_TYPE_Q4_0, 2048, 16384, OB_ACT_SILU, 0); /* 256+ blocks of two: more than the GPU holds */
    gpu_free(gf);
    gpu_free(g);
}

/* Kept f16 copies (gc, the default; g0 with OB_CUDA_F16_COPY=0): products of 40 tokens read them
 * (the second of two: the first makes the copy) and are the per-call dequantization's bits, every
 * type; in a step of distinct sequences (gd: g0 with OB_CUDA_GEMV_MAX=4, step_kind(1) on both),
 * 8 tokens of an int8-path weight with a copy take it (the staged kernel takes them without one:
 * OB_CUDA_GEMV_COPY_MAX, 4). */
static void check_f16_copies(ob_backend *gc, ob_backend *g0, ob_backend *gd) {
    for (int type = 0; type < OB_TYPE_EXT_END; type++) {
        if (type == OB_TYPE_COUNT) type = OB_TYPE_EXT_FIRST;
        const ob_type_traits *t = ob_type_get(type);
        if (!t || !t->to_float || !ob_tensor_can_quantize(type)) continue;
        const long reads = f16_reads();
        const int64_t n_in = t->block_size == 1 ? 512 : (int64_t)t->block_size * (512 / t->block_size + 1);
        const int same = same_matmul(gc, g0, type, n_in, 67, 40, 40, 1);
        const long got = f16_reads() - reads;
        /* f16 / bf16 / f32 weights are used as stored */
        const int copied = type != OB_TYPE_F16 && type != OB_TYPE_BF16 && type != OB_TYPE_F32;
        if (!same || got != (copied ? 2 : 0)) fprintf(stderr, "  cuda f16 copy %s: same bits %d, copy reads %ld\n", t->name, same, got);
        CHECK(same);
        CHECK_EQ_INT((int)got, copied ? 2 : 0);
        if (!q8_type(type)) continue;
        gc->step_kind(gc, 1);
        gd->step_kind(gd, 1);
        const long r8 = f16_reads();
        const int same8 = same_matmul(gc, gd, type, n_in, 67, 8, 40, 1);
        if (!same8) fprintf(stderr, "  cuda f16 copy %s: 8 distinct tokens not on the copy's path\n", t->name);
        CHECK(same8);
        CHECK_EQ_INT((int)(f16_reads() - r8), 2);
        gc->step_kind(gc, 0);
        gd->step_kind(gd, 0);
    }
}

/* Every matmul type and the fused ops on b with *mode (which paths test_matmul_types expects; NULL:
 * the default's) set. */
static void matmul_suite(ob_backend *b, int *mode) {
    if (mode) *mode = 1;
    test_matmul_types(b);
    test_fused(b);
    if (mode) *mode = 0;
}

/* ---- one token's int8 rows with the codes held in registers: the same bits ------------- */

/* One case's inputs for one_token_outputs: a weight and an up weight of the same random blocks
 * (seed), the input x and the residual y0. */
typedef struct {
    void *wq, *uq;
    float *x, *y0;
} one_token_in;

static one_token_in one_token_inputs(int type, int64_t n_in, int64_t n_out, int seed) {
    one_token_in in;
    in.wq = random_quantized(type, n_in, n_out, seed);
    in.uq = random_quantized(type, n_in, n_out, seed);
    in.x = randf((size_t)n_in, 1.0f);
    in.y0 = randf((size_t)n_out, 1.0f);
    return in;
}

static void one_token_inputs_free(one_token_in *in) {
    free(in->wq);
    free(in->uq);
    free(in->x);
    free(in->y0);
}

/* one_token_outputs' two smaller weights of matmul_multi: rows, and the outputs' total floats */
static int64_t one_token_m1(int64_t n_out) { return n_out / 3 + 1; }
static int64_t one_token_m2(int64_t n_out) { return n_out / 5 + 1; }
static size_t one_token_total(int64_t n_out) { return (size_t)(4 * n_out + one_token_m1(n_out) + one_token_m2(n_out)); }

/* One token through matmul, matmul_add, matmul_multi (the weight and two smaller ones) and
 * matmul_glu of in's weights wq / uq (n_out rows) on g: the outputs, in that order, downloaded into
 * one malloc'd array of 4 n_out + m1 + m2 floats (the GLU's gate output only). */
static float *one_token_outputs(ob_backend *g, int type, int64_t n_in, int64_t n_out, const one_token_in *in) {
    const void *wq = in->wq, *uq = in->uq;
    const float *x = in->x, *y0 = in->y0;
    const int64_t m1 = one_token_m1(n_out), m2 = one_token_m2(n_out);
    float *out = malloc(one_token_total(n_out) * sizeof(float));
    ob_weight w = weight_on(g, type, n_in, n_out, wq), u = weight_on(g, type, n_in, n_out, uq);
    ob_weight w1 = weight_on(g, type, n_in, m1, uq), w2 = weight_on(g, type, n_in, m2, wq);
    void *dx = dev_copy(g, x, (size_t)n_in * 4), *dy = dev_nan(g, (size_t)n_out), *da = dev_copy(g, y0, (size_t)n_out * 4);
    void *d1 = dev_nan(g, (size_t)m1), *d2 = dev_nan(g, (size_t)m2), *dg = dev_nan(g, (size_t)n_out), *du = dev_nan(g, (size_t)n_out);
    g->matmul(g, &w, dx, dy, 1);
    g->matmul_add(g, &w, dx, da, 1);
    const ob_weight *ws[3] = {&w, &w1, &w2};
    float *ys[3] = {dg, d1, d2};
    g->matmul_multi(g, ws, ys, 3, dx, 1);
    g->download(g, out, dy, (size_t)n_out * 4);
    g->download(g, out + n_out, da, (size_t)n_out * 4);
    g->download(g, out + 2 * n_out, dg, (size_t)n_out * 4);
    g->download(g, out + 3 * n_out, d1, (size_t)m1 * 4);
    g->download(g, out + 3 * n_out + m1, d2, (size_t)m2 * 4);
    g->matmul_glu(g, OB_ACT_SILU, &w, &u, dx, dg, du, 1, NULL);
    g->download(g, out + 3 * n_out + m1 + m2, dg, (size_t)n_out * 4);
    void *bufs[] = {dx, dy, da, d1, d2, dg, du, (void *)w.data, (void *)u.data, (void *)w1.data, (void *)w2.data};
    for (int i = 0; i < 11; i++) g->dealloc(g, bufs[i]);
    return out;
}

/* The held codes against OB_CUDA_GV_HOLD=0, bit for bit: the default backend (up to two sub-blocks
 * a lane, three or four on rows that all four warps take), OB_CUDA_GV_HOLD=2 (up to two only) and
 * OB_CUDA_GV_HOLD=4 (up to four on every row). Rows of 16-64 sub-blocks (one warp a row: lanes with
 * none, one or two sub-blocks), of 128-256 (four warps a row: one or two a thread), of 80-96 (one
 * warp a row, three a lane: only =4 holds them), of 448 (four warps, three or four a thread: the
 * default and =4 hold them), and 520 (five a thread: the loop for all); odd row counts (an unpaired
 * last row). */
static void test_gv_hold(ob_backend *g) {
    static const struct { int type; int64_t n_in, n_out; } cases[] = {
        {OB_TYPE_Q4_0, 2048, 301}, {OB_TYPE_Q4_K, 1024, 257}, {OB_TYPE_Q6_K, 4096, 131}, {OB_TYPE_Q8_0, 8192, 71},
        {OB_TYPE_IQ4_XS, 512, 99},  {OB_TYPE_TQ2_0, 2560, 101}, {OB_TYPE_TQ1_0, 2048, 67}, {OB_TYPE_I2_S, 640, 45},
        {OB_TYPE_Q4_K, 14336, 23}, {OB_TYPE_Q5_K, 3072, 37}, {OB_TYPE_TQ1_0, 2560, 33}, {OB_TYPE_Q3_K, 3072, 29},
        {OB_TYPE_Q8_0, 16640, 19},
    };
    ob_backend *off = gpu_new_with("OB_CUDA_GV_HOLD", "0"), *two = gpu_new_with("OB_CUDA_GV_HOLD", "2");
    ob_backend *four = gpu_new_with("OB_CUDA_GV_HOLD", "4");
    CHECK(off != NULL && two != NULL && four != NULL);
    if (!off || !two || !four) {
        gpu_free(off);
        gpu_free(two);
        gpu_free(four);
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int type = cases[c].type;
        const int64_t n_in = cases[c].n_in, n_out = cases[c].n_out;
        one_token_in in = one_token_inputs(type, n_in, n_out, 1);
        float *a = one_token_outputs(g, type, n_in, n_out, &in), *b = one_token_outputs(off, type, n_in, n_out, &in);
        float *f = one_token_outputs(four, type, n_in, n_out, &in), *h = one_token_outputs(two, type, n_in, n_out, &in);
        const size_t total = one_token_total(n_out);
        const double d = max_abs_diff(a, b, total), d2 = max_abs_diff(h, b, total), d4 = max_abs_diff(f, b, total);
        if (d != 0 || d2 != 0 || d4 != 0 || ob_test_verbose)
            fprintf(stderr, "  cuda held codes %-7s %5lld x %4lld: max|diff| default %.3g, two a lane %.3g, four %.3g (must be 0)\n",
                    ob_type_get(type)->name, (long long)n_in, (long long)n_out, d, d2, d4);
        CHECK(d == 0);
        CHECK(d2 == 0);
        CHECK(d4 == 0);
        free(a);
        free(b);
        free(f);
        free(h);
        one_token_inputs_free(&in);
    }
    gpu_free(off);
    gpu_free(two);
    gpu_free(four);
}

/* f16 / bf16 rows read in place (the default) against the staged rows (OB_CUDA_GV_DIRECT=0),
 * bit for bit: one token through matmul, matmul_add, matmul_multi and matmul_glu; rows of 1032 to
 * 8192 values (1-8 chunks a thread, an odd last step), row counts not a multiple of 4, a launch of
 * more than one wave. With OB_CUDA_GV_DIRECT=1 only the calls of at most 1 MiB of rows read them
 * in place. */
static void test_gv_direct(ob_backend *g) {
    static const struct { int type; int64_t n_in, n_out; } cases[] = {
        {OB_TYPE_F16, 2048, 301}, {OB_TYPE_F16, 8192, 67}, {OB_TYPE_F16, 1032, 33}, {OB_TYPE_F16, 3072, 130},
        {OB_TYPE_BF16, 2048, 129}, {OB_TYPE_BF16, 4096, 7}, {OB_TYPE_F16, 2048, 256}, /* (its matmul: 1 MiB exactly) */
        {OB_TYPE_F16, 1032, 4100}, /* more blocks of 4 rows than fit an H200 at once */
    };
    ob_backend *d = gpu_new_with("OB_CUDA_GV_DIRECT", "0"), *mib = gpu_new_with("OB_CUDA_GV_DIRECT", "1");
    CHECK(d != NULL && mib != NULL);
    if (!d || !mib) {
        gpu_free(d);
        gpu_free(mib);
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int type = cases[c].type;
        const int64_t n_in = cases[c].n_in, n_out = cases[c].n_out;
        one_token_in in = one_token_inputs(type, n_in, n_out, 0);
        const long l0 = gv_direct_launches();
        float *a = one_token_outputs(d, type, n_in, n_out, &in);
        const long l1 = gv_direct_launches();
        float *b = one_token_outputs(g, type, n_in, n_out, &in);
        const long l2 = gv_direct_launches();
        float *m = one_token_outputs(mib, type, n_in, n_out, &in);
        CHECK(l1 == l0);               /* =0 stages them */
        CHECK(l2 - l1 == 4);           /* the default: matmul, matmul_add, matmul_multi, matmul_glu */
        const int64_t rb = 2 * n_in, rows[4] = {n_out, n_out, n_out + one_token_m1(n_out) + one_token_m2(n_out), 2 * n_out};
        long small = 0;
        for (int k = 0; k < 4; k++) small += rows[k] * rb <= (1 << 20);
        CHECK(gv_direct_launches() - l2 == small);
        const size_t total = one_token_total(n_out);
        const double diff = fmax(max_abs_diff(a, b, total), max_abs_diff(a, m, total));
        if (diff != 0 || ob_test_verbose)
            fprintf(stderr, "  cuda rows in place %-5s %5lld x %4lld (%ld of 4 under 1 MiB): max|diff| %.3g (must be 0)\n",
                    ob_type_get(type)->name, (long long)n_in, (long long)n_out, small, diff);
        CHECK(diff == 0);
        CHECK(a[0] == a[0]); /* (written: not the NaN the outputs start as) */
        free(a);
        free(b);
        free(m);
        one_token_inputs_free(&in);
    }
    gpu_free(d);
    gpu_free(mib);
}

/* ---- row ops against the CPU backend ------------------------------------------------- */

static void cmp_dev(ob_backend *g, const void *dev, const float *cpu, size_t n, double tol, const char *what) {
    float *h = malloc(n * sizeof(float));
    g->download(g, h, dev, n * sizeof(float));
    double d = max_abs_diff(h, cpu, n);
    if (d > tol || ob_test_verbose) fprintf(stderr, "  cuda %-28s max|diff| %.3g (tol %.1g)\n", what, d, tol);
    CHECK(d <= tol);
    free(h);
}

/* BitNet's quantizer on x (host) / dx (device) into y / dy: equal inputs give equal codes. */
static void act_quant_vs_cpu(ob_backend *g, ob_backend *c, const float *x, void *dx, float *y, void *dy, int n, int dim,
                             const char *what) {
    const size_t nd = (size_t)n * dim;
    memcpy(y, x, nd * 4);
    c->act_quant_i8(c, y, n, dim);
    g->copy(g, dy, dx, nd * 4);
    g->act_quant_i8(g, dy, n, dim);
    cmp_dev(g, dy, y, nd, 0, what);
}

static void test_row_ops(ob_backend *g, ob_backend *c) {
    int n = 5, dim = 1000;
    size_t nd = (size_t)n * dim;
    float *x = randf(nd, 2.0f), *w = randf(dim, 1.0f), *y = malloc(nd * sizeof(float));
    void *dx = dev_copy(g, x, nd * 4), *dw = dev_copy(g, w, dim * 4), *dy = dev_nan(g, nd);
    c->rmsnorm(c, x, w, y, n, dim, 1e-5f);
    g->rmsnorm(g, dx, dw, dy, n, dim, 1e-5f);
    cmp_dev(g, dy, y, nd, 1e-5, "rmsnorm");
    c->rmsnorm(c, x, NULL, y, n, dim, 1e-6f);
    g->rmsnorm(g, dx, NULL, dy, n, dim, 1e-6f);
    cmp_dev(g, dy, y, nd, 1e-5, "rmsnorm (no weight)");

    float *x2 = randf(nd, 1.0f);
    void *dx2 = dev_copy(g, x2, nd * 4);
    memcpy(y, x, nd * 4);
    c->add(c, y, x2, nd);
    g->copy(g, dy, dx, nd * 4);
    g->add(g, dy, dx2, nd);
    cmp_dev(g, dy, y, nd, 0, "add + copy");
    c->add_bias(c, y, w, n, dim);
    g->add_bias(g, dy, dw, n, dim);
    cmp_dev(g, dy, y, nd, 0, "add_bias");
    for (int act = 0; act < 2; act++) {
        float *gt = malloc(nd * 4);
        memcpy(gt, x, nd * 4);
        void *dg = dev_copy(g, x, nd * 4);
        c->glu(c, (ob_act)act, gt, x2, nd);
        g->glu(g, (ob_act)act, dg, dx2, nd);
        cmp_dev(g, dg, gt, nd, 1e-5, act ? "glu relu2" : "glu silu");
        g->dealloc(g, dg);
        free(gt);
    }
    act_quant_vs_cpu(g, c, x, dx, y, dy, n, dim, "act_quant_i8");
    g->dealloc(g, dx);
    g->dealloc(g, dx2);
    g->dealloc(g, dw);
    g->dealloc(g, dy);
    free(x);
    free(x2);
    free(w);
    free(y);
}

/* RMSNorm and act_quant_i8 on rows of the sizes that take 1024-thread blocks (from 2048 values;
 * BitNet's 2560 and 6912, Llama-3.1-8B's 4096, a row past 8192 values) and one of a decode
 * batch, against the CPU: the sum of squares in another order, the same values within 1e-5 */
static void test_row_ops_wide(ob_backend *g, ob_backend *c) {
    const int dims[] = {2048, 2560, 4096, 6912, 10000}, ns[] = {1, 3};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (int ni = 0; ni < 2; ni++) {
            const int dim = dims[di], n = ns[ni];
            const size_t nd = (size_t)n * dim;
            float *x = randf(nd, 2.0f), *w = randf((size_t)dim, 1.0f), *y = malloc(nd * sizeof(float));
            void *dx = dev_copy(g, x, nd * 4), *dw = dev_copy(g, w, (size_t)dim * 4), *dy = dev_nan(g, nd);
            c->rmsnorm(c, x, w, y, n, dim, 1e-5f);
            g->rmsnorm(g, dx, dw, dy, n, dim, 1e-5f);
            cmp_dev(g, dy, y, nd, 1e-5, "rmsnorm (wide rows)");
            act_quant_vs_cpu(g, c, x, dx, y, dy, n, dim, "act_quant_i8 (wide rows)");
            g->dealloc(g, dx);
            g->dealloc(g, dw);
            g->dealloc(g, dy);
            free(x);
            free(w);
            free(y);
        }
}

static void test_rope(ob_backend *g, ob_backend *c) {
    int n = 7, n_head = 5, hd = 64;
    size_t nd = (size_t)n * n_head * hd;
    int32_t pos[7];
    for (int i = 0; i < n; i++) pos[i] = rint_in(0, 5000);
    float ff[24];
    for (int k = 0; k < 24; k++) ff[k] = 1.0f + 3.0f * (runi() + 1.0f);
    void *dff = dev_copy(g, ff, sizeof ff);
    for (int style = 0; style < 2; style++)
        for (int with_ff = 0; with_ff < 2; with_ff++) {
            ob_rope r = {(ob_rope_style)style, 48, 500000.0f, 0.5f, NULL};
            float *x = randf(nd, 1.0f);
            void *dx = dev_copy(g, x, nd * 4);
            r.freq_factors = with_ff ? ff : NULL;
            c->rope(c, x, n, n_head, hd, pos, &r);
            r.freq_factors = with_ff ? dff : NULL;
            g->rope(g, dx, n, n_head, hd, pos, &r);
            cmp_dev(g, dx, x, nd, 2e-5, style ? "rope neox" : "rope norm");
            g->dealloc(g, dx);
            free(x);
        }
    g->dealloc(g, dff);
}

/* rope_kv against rope, rope, kv_write, kv_write on the GPU: the same q, k and cache bytes. */
static void test_rope_kv(ob_backend *g, int type, int style) {
    const int n = 5, n_head = 8, n_head_kv = 2, hd = 64, n_ctx = 40, n_seq = 2, kvd = n_head_kv * hd;
    size_t qn = (size_t)n * n_head * hd, kn = (size_t)n * kvd, rb = ob_type_row_size(type, kvd), cb = (size_t)n_seq * n_ctx * rb;
    int32_t pos[5], seq[5];
    for (int i = 0; i < n; i++) {
        seq[i] = i & 1;
        pos[i] = 3 + i / 2;
    }
    ob_rope r = {(ob_rope_style)style, 48, 10000.0f, 1.0f, NULL};
    float *q = randf(qn, 1.0f), *k = randf(kn, 1.0f), *v = randf(kn, 1.0f);
    uint8_t *zero = calloc(1, cb);
    void *q1 = dev_copy(g, q, qn * 4), *k1 = dev_copy(g, k, kn * 4), *q2 = dev_copy(g, q, qn * 4), *k2 = dev_copy(g, k, kn * 4);
    void *dv = dev_copy(g, v, kn * 4), *kc1 = dev_copy(g, zero, cb), *vc1 = dev_copy(g, zero, cb), *kc2 = dev_copy(g, zero, cb),
         *vc2 = dev_copy(g, zero, cb);
    g->rope(g, q1, n, n_head, hd, pos, &r);
    g->rope(g, k1, n, n_head_kv, hd, pos, &r);
    g->kv_write(g, kc1, type, k1, n, kvd, n_ctx, pos, seq);
    g->kv_write(g, vc1, type, dv, n, kvd, n_ctx, pos, seq);
    ob_attn_args a = {NULL, NULL, kc2, vc2, type, type, n, n_head, n_head_kv, hd, n_ctx, pos, seq, 0.125f, NULL};
    g->rope_kv(g, &a, q2, k2, dv, &r);
    float *h1 = dev_get(g, q1, qn), *h2 = dev_get(g, q2, qn), *h3 = dev_get(g, k1, kn), *h4 = dev_get(g, k2, kn);
    CHECK(memcmp(h1, h2, qn * 4) == 0);
    CHECK(memcmp(h3, h4, kn * 4) == 0);
    uint8_t *c1 = malloc(cb), *c2 = malloc(cb);
    g->download(g, c1, kc1, cb);
    g->download(g, c2, kc2, cb);
    CHECK(memcmp(c1, c2, cb) == 0);
    g->download(g, c1, vc1, cb);
    g->download(g, c2, vc2, cb);
    CHECK(memcmp(c1, c2, cb) == 0);
    if (ob_test_verbose) fprintf(stderr, "  cuda rope_kv %s style %d compared\n", ob_type_get(type)->name, style);
    void *bufs[] = {q1, k1, q2, k2, dv, kc1, vc1, kc2, vc2};
    for (int i = 0; i < 9; i++) g->dealloc(g, bufs[i]);
    free(h1); free(h2); free(h3); free(h4); free(c1); free(c2); free(q); free(k); free(v); free(zero);
}

/* rope_attention (one kernel) against rope_kv, then attention (the kernel g's `attention` takes
 * for the batch: the split kernel by default) on the GPU: the same output and cache bytes, for n
 * tokens of distinct sequences at positions up to n_ctx - 1 over caches filled with random rows
 * (rope_heads query heads on rope_kv_heads KV heads); off (OB_CUDA_ROPE_ATTN=0), it declines. With
 * rope_attn_wo >= 0, both name a `wo` of that type (ob_attn_args.out_to) and feed it
 * (matmul_add): the same bits after it (the codes either attention makes for it, or the
 * quantizer's where that attention makes none, agree on random rows). */
static int rope_attn_wo = -1, rope_heads = 8, rope_kv_heads = 2;
static void test_rope_attention(ob_backend *g, int type, int style, int hd, int n_rot, int n, int n_ctx, int with_ff) {
    const int n_head = rope_heads, n_head_kv = rope_kv_heads, kvd = n_head_kv * hd, n_seq = n;
    const size_t qn = (size_t)n * n_head * hd, kn = (size_t)n * kvd, rb = ob_type_row_size(type, kvd), cb = (size_t)n_seq * n_ctx * rb;
    int32_t *pos = malloc((size_t)n_ctx * 4), *seq = malloc((size_t)n_ctx * 4);
    void *kc[2], *vc[2];
    for (int c = 0; c < 2; c++) {
        uint8_t *zero = calloc(1, cb);
        kc[c] = dev_copy(g, zero, cb);
        vc[c] = dev_copy(g, zero, cb);
        free(zero);
    }
    float *rows = randf((size_t)n_ctx * kvd, 1.0f);
    void *drows = dev_copy(g, rows, (size_t)n_ctx * kvd * 4);
    for (int s = 0; s < n_seq; s++) { /* every position of every sequence, the same bytes in both caches */
        for (int p = 0; p < n_ctx; p++) { pos[p] = p; seq[p] = s; }
        for (int c = 0; c < 2; c++) {
            g->kv_write(g, kc[c], type, drows, n_ctx, kvd, n_ctx, pos, seq);
            g->kv_write(g, vc[c], type, drows, n_ctx, kvd, n_ctx, pos, seq);
        }
    }
    for (int i = 0; i < n; i++) { seq[i] = n - 1 - i; pos[i] = rint_in(0, n_ctx - 1); }
    pos[0] = n_ctx - 1;
    if (n > 1) pos[1] = 0;
    ob_rope r = {(ob_rope_style)style, n_rot, 10000.0f, 1.0f, NULL};
    float ff[128];
    for (int i = 0; i < n_rot / 2; i++) ff[i] = 1.0f + 3.0f * (runi() + 1.0f);
    void *dff = with_ff ? dev_copy(g, ff, (size_t)(n_rot / 2) * sizeof(float)) : NULL;
    r.freq_factors = dff; /* llama3 scaling: per-pair factors, on the device */
    float *q = randf(qn, 1.0f), *k = randf(kn, 1.0f), *v = randf(kn, 1.0f);
    void *dq[2], *dk[2], *dv = dev_copy(g, v, kn * 4), *dout[2];
    for (int c = 0; c < 2; c++) {
        dq[c] = dev_copy(g, q, qn * 4);
        dk[c] = dev_copy(g, k, kn * 4);
        dout[c] = dev_nan(g, qn);
    }
    const int n_wo = 40;
    void *wq = rope_attn_wo >= 0 ? random_quantized(rope_attn_wo, n_head * hd, n_wo, 0) : NULL;
    ob_weight wo = wq ? weight_on(g, rope_attn_wo, n_head * hd, n_wo, wq) : (ob_weight){0};
    float *y0 = randf((size_t)n * n_wo, 1.0f);
    void *dy[2] = {dev_copy(g, y0, (size_t)n * n_wo * 4), dev_copy(g, y0, (size_t)n * n_wo * 4)};
    ob_attn_args a = {dq[0], dout[0], kc[0], vc[0], type, type, n, n_head, n_head_kv, hd, n_ctx, pos, seq, 1.0f / sqrtf((float)hd), wq ? &wo : NULL};
    g->rope_kv(g, &a, dq[0], dk[0], dv, &r);
    g->attention(g, &a);
    if (wq) g->matmul_add(g, &wo, dout[0], dy[0], n);
    ob_attn_args b = a;
    b.q = NULL; /* rope_attention reads q from its argument */
    b.out = dout[1];
    b.k = kc[1];
    b.v = vc[1];
    CHECK_EQ_INT(g->rope_attention(g, &b, dq[1], dk[1], dv, &r), 1);
    if (wq) g->matmul_add(g, &wo, dout[1], dy[1], n);
    float *o1 = dev_get(g, dout[0], qn), *o2 = dev_get(g, dout[1], qn);
    int same = memcmp(o1, o2, qn * 4) == 0;
    if (wq) {
        float *y1 = dev_get(g, dy[0], (size_t)n * n_wo), *y2 = dev_get(g, dy[1], (size_t)n * n_wo);
        same &= memcmp(y1, y2, (size_t)n * n_wo * 4) == 0;
        free(y1);
        free(y2);
        g->dealloc(g, (void *)wo.data);
        free(wq);
    }
    free(y0);
    g->dealloc(g, dy[0]);
    g->dealloc(g, dy[1]);
    uint8_t *c1 = malloc(cb), *c2 = malloc(cb);
    for (int kv = 0; kv < 2; kv++) {
        g->download(g, c1, kv ? vc[0] : kc[0], cb);
        g->download(g, c2, kv ? vc[1] : kc[1], cb);
        same &= memcmp(c1, c2, cb) == 0;
    }
    if (!same || ob_test_verbose)
        fprintf(stderr, "  cuda rope_attention %s style %d hd=%d n_rot=%d n=%d ctx=%d%s%s: %s\n", ob_type_name(type), style, hd, n_rot, n,
                n_ctx, with_ff ? " freq_factors" : "", rope_attn_wo >= 0 ? " wo" : "",
                same ? "same bits as rope_kv + attention" : "differs from rope_kv + attention");
    CHECK(same);
    ob_backend *off = gpu_new_with("OB_CUDA_ROPE_ATTN", "0");
    CHECK(off != NULL);
    if (off) {
        CHECK_EQ_INT(off->rope_attention(off, &b, dq[1], dk[1], dv, &r), 0);
        gpu_free(off);
    }
    void *bufs[] = {kc[0], kc[1], vc[0], vc[1], drows, dv, dq[0], dq[1], dk[0], dk[1], dout[0], dout[1]};
    for (int i = 0; i < 12; i++) g->dealloc(g, bufs[i]);
    if (dff) g->dealloc(g, dff);
    free(o1); free(o2); free(c1); free(c2); free(q); free(k); free(v); free(rows); free(pos); free(seq);
}

/* The page-locked host buffers' device addresses (host_dev): an op writing there leaves its
 * output in host memory after sync, with no download; none with OB_CUDA_MAPPED=0 or for heap
 * buffers (OB_CUDA_PINNED=0). */
static void test_host_dev(ob_backend *g) {
    ob_backend *off = gpu_new_with("OB_CUDA_MAPPED", "0"), *heap = gpu_new_with("OB_CUDA_PINNED", "0");
    CHECK(g->host_dev != NULL && off != NULL && heap != NULL);
    const size_t n = 100000;
    float *x = randf(n, 1.0f), *h = g->host_alloc(g, n * sizeof(float));
    void *dx = dev_copy(g, x, n * sizeof(float));
    float *hd = h ? g->host_dev(g, h) : NULL;
    CHECK(h != NULL && dx != NULL && hd != NULL);
    if (h && dx && hd) {
        memset(h, 0, n * sizeof(float));
        g->copy(g, hd, dx, n * sizeof(float));
        g->sync(g);
        CHECK(memcmp(h, x, n * sizeof(float)) == 0);
    }
    for (int k = 0; k < 2; k++) {
        ob_backend *b = k ? heap : off;
        float *hb = b ? b->host_alloc(b, 4096) : NULL;
        if (hb) CHECK(b->host_dev(b, hb) == NULL);
        if (b) b->host_free(b, hb);
    }
    g->host_free(g, h);
    g->dealloc(g, dx);
    free(x);
    gpu_free(off);
    gpu_free(heap);
}

/* An upload is whole before the next op on the backend's stream runs: a buffer uploaded and at
 * once added into another (itself just uploaded) gives its values, every element, several times
 * over (a plain cudaMemcpy did not order the non-blocking stream: the last bytes could land late). */
static void test_upload_order(ob_backend *g) {
    const size_t n = (size_t)16 << 20;
    float *x = malloc(n * sizeof(float)), *z = calloc(n, sizeof(float));
    int bad = 0;
    for (int rep = 0; x && z && rep < 6; rep++) {
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7 + (size_t)rep) % 1000) + 1.0f;
        float *dy = dev_copy(g, z, n * sizeof(float)), *dx = dev_copy(g, x, n * sizeof(float));
        CHECK(dy != NULL && dx != NULL);
        if (!dy || !dx) {
            g->dealloc(g, dy); /* (NULL: nothing) */
            g->dealloc(g, dx);
            break;
        }
        g->add(g, dy, dx, n);
        float *y = dev_get(g, dy, n);
        bad += memcmp(x, y, n * sizeof(float)) != 0;
        free(y);
        g->dealloc(g, dy);
        g->dealloc(g, dx);
    }
    if (bad || ob_test_verbose) fprintf(stderr, "  cuda upload then add, 64 MiB: %d of 6 differ\n", bad);
    CHECK(x && z && bad == 0);
    free(x);
    free(z);
}

/* The step's angles written and read (OB_CUDA_ANGLES, the default: ga) against every launch's own
 * (OB_CUDA_ANGLES=0: g0), both with the grouped kernel's fused form: a rope_attention call
 * computes and writes its angles; the next with the same positions, right after it (no launch
 * between: it may not have ended), computes them only, neither reading nor writing the table; the
 * third, after a launch between, reads the first's; each call's output and the caches the same
 * bits on both backends. 1 or 3 tokens, contexts of three spans, with or without llama3 frequency
 * factors. */
static void check_angles(ob_backend *ga, ob_backend *g0, int hd, int n, int with_ff) {
    const int n_head = 8, n_head_kv = 2, kvd = n_head_kv * hd, n_ctx = 600;
    const size_t qn = (size_t)n * n_head * hd, kn = (size_t)n * kvd, cb = (size_t)n * n_ctx * ob_type_row_size(OB_TYPE_F16, kvd);
    int32_t *pos = malloc((size_t)n_ctx * 4), *seq = malloc((size_t)n_ctx * 4);
    float *rows = randf((size_t)n_ctx * kvd, 1.0f), *q = randf(qn, 1.0f), *k = randf(kn, 1.0f), *v = randf(kn, 1.0f), ff[64];
    for (int i = 0; i < hd / 2; i++) ff[i] = 1.0f + 3.0f * (runi() + 1.0f);
    float *out[2][3];
    uint8_t *caches[2][2];
    ob_backend *bs[2] = {ga, g0};
    for (int w = 0; w < 2; w++) {
        ob_backend *b = bs[w];
        void *kc = dev_nan(b, cb / 4), *vc = dev_nan(b, cb / 4), *dr = dev_copy(b, rows, (size_t)n_ctx * kvd * 4);
        for (int s = 0; s < n; s++) { /* every position of every sequence */
            for (int p = 0; p < n_ctx; p++) { pos[p] = p; seq[p] = s; }
            b->kv_write(b, kc, OB_TYPE_F16, dr, n_ctx, kvd, n_ctx, pos, seq);
            b->kv_write(b, vc, OB_TYPE_F16, dr, n_ctx, kvd, n_ctx, pos, seq);
        }
        for (int i = 0; i < n; i++) { pos[i] = n_ctx - 1 - 7 * i; seq[i] = i; }
        void *dff = with_ff ? dev_copy(b, ff, (size_t)(hd / 2) * sizeof(float)) : NULL, *dv = dev_copy(b, v, kn * 4);
        ob_rope r = {OB_ROPE_NEOX, hd, 500000.0f, 1.0f, dff};
        void *dout = dev_nan(b, qn), *sa = dev_copy(b, v, kn * 4), *dq[3], *dk[3];
        for (int c = 0; c < 3; c++) { /* (all first: a dealloc forgets the angles) */
            dq[c] = dev_copy(b, q, qn * 4);
            dk[c] = dev_copy(b, k, kn * 4);
        }
        for (int c = 0; c < 3; c++) {
            ob_attn_args a = {NULL, dout, kc, vc, OB_TYPE_F16, OB_TYPE_F16, n, n_head, n_head_kv, hd, n_ctx, pos, seq, 1.0f / sqrtf((float)hd), NULL};
            if (c == 2) b->add(b, sa, dv, kn); /* a launch between the writer and the reader */
            const long read = angles_read();
            CHECK_EQ_INT(b->rope_attention(b, &a, dq[c], dk[c], dv, &r), 1);
            CHECK(angles_read() == read + (w == 0 && c == 2));
            out[w][c] = dev_get(b, dout, qn);
        }
        for (int c = 0; c < 3; c++) {
            b->dealloc(b, dq[c]);
            b->dealloc(b, dk[c]);
        }
        for (int kv = 0; kv < 2; kv++) {
            caches[w][kv] = malloc(cb);
            b->download(b, caches[w][kv], kv ? vc : kc, cb);
        }
        void *bufs[] = {kc, vc, dr, dff, dv, dout, sa};
        for (int t = 0; t < 7; t++) if (bufs[t]) b->dealloc(b, bufs[t]);
    }
    const int caches_same = memcmp(caches[0][0], caches[1][0], cb) == 0 && memcmp(caches[0][1], caches[1][1], cb) == 0;
    int same = caches_same;
    for (int c = 0; c < 3; c++) same &= memcmp(out[0][c], out[1][c], qn * 4) == 0;
    if (!same || ob_test_verbose) {
        fprintf(stderr, "  cuda angles hd=%d n=%d%s: %s (caches %s;", hd, n, with_ff ? " freq_factors" : "", same ? "same bits" : "differ",
                caches_same ? "same" : "differ");
        for (int c = 0; c < 3; c++) /* each call: max |on - off|, and each backend against its own first call */
            fprintf(stderr, " call %d %g, %g, %g;", c, max_abs_diff(out[0][c], out[1][c], qn), max_abs_diff(out[0][c], out[0][0], qn),
                    max_abs_diff(out[1][c], out[1][0], qn));
        fprintf(stderr, ")\n");
    }
    CHECK(same);
    for (int w = 0; w < 2; w++) {
        for (int c = 0; c < 3; c++) free(out[w][c]);
        free(caches[w][0]);
        free(caches[w][1]);
    }
    free(pos); free(seq); free(rows); free(q); free(k); free(v);
}

static void test_angles(void) {
    static const char *const on[] = {"OB_CUDA_ANGLES", "1", "OB_CUDA_ATTN_GQA", "1", NULL};
    static const char *const off[] = {"OB_CUDA_ANGLES", "0", "OB_CUDA_ATTN_GQA", "1", NULL};
    ob_backend *ga = gpu_new_env(on), *g0 = gpu_new_env(off);
    CHECK(ga != NULL && g0 != NULL);
    for (int hd = 64; ga && g0 && hd <= 128; hd *= 2)
        for (int n = 1; n <= 3; n += 2)
            for (int ff = 0; ff < 2; ff++) check_angles(ga, g0, hd, n, ff);
    gpu_free(ga);
    gpu_free(g0);
}

/* The grouped attention's fused form as the default takes a one-token step of every group size:
 * 4, 2 and 1 query heads a KV head (runs 15-16 measured all three), counted launches, the same
 * bits as rope_kv + the grouped kernel (OB_CUDA_ATTN_GQA=1 so that `attention` takes one token). */
static void test_gqa_rope_groups(void) {
    ob_backend *b = gpu_new_with("OB_CUDA_ATTN_GQA", "1");
    CHECK(b != NULL);
    static const int groups[][2] = {{8, 2}, {4, 2}, {4, 4}};
    for (int i = 0; b && i < 3; i++) {
        rope_heads = groups[i][0];
        rope_kv_heads = groups[i][1];
        const long before = gqa_rope_launches();
        test_rope_attention(b, OB_TYPE_F16, 0, 64, 64, 1, 90, 0);
        CHECK_EQ_INT((int)(gqa_rope_launches() - before), 1);
    }
    gpu_free(b);
    rope_heads = 8;
    rope_kv_heads = 2;
}

/* The decode attention's codes for `wo` (the default) against the quantizer's (goff:
 * OB_CUDA_ATTN_CODES=0): n tokens of one sequence, attention then `wo` as matmul_add. Random cache
 * rows (kind 0): the output and `wo`'s result bit for bit (every row takes block scales either
 * way). Kind 1, every V row on one int8 grid and each token at position 0, so that its output is
 * position 0's row and lies on the grid of its max: the quantizer gives that row one scale, the
 * attention block scales, so the output is the same bits and `wo`'s result differs (which shows
 * the attention's codes were used) but stays close (1e-2 of its largest value). Contexts with one span or several (the merge
 * writes the output). */
static void check_attn_codes(ob_backend *g, ob_backend *goff, int type, int hd, int n_ctx, int n, int kind, int wtype) {
    const int n_head = 8, n_head_kv = 2, kvd = n_head_kv * hd, dim = n_head * hd, n_out = 77;
    const size_t rb = ob_type_row_size(type, kvd), cb = (size_t)n_ctx * rb;
    ob_backend *bs[2] = {g, goff};
    float *rows = randf((size_t)n_ctx * kvd, 1.0f), *q = randf((size_t)n * dim, 1.0f), *y = randf((size_t)n * n_out, 1.0f);
    if (kind) { /* multiples of 0.37 up to 127 of them, and 127 once: the grid of the row's max */
        for (size_t i = 0; i < (size_t)n_ctx * kvd; i++) rows[i] = 0.37f * (float)((int)(rows[i] * 40.0f) % 128);
        rows[0] = 0.37f * 127.0f;
    }
    int32_t *pos = malloc((size_t)n_ctx * 4), *seq = calloc((size_t)n_ctx, 4), *tp = malloc((size_t)n * 4), *ts = calloc((size_t)n, 4);
    for (int p = 0; p < n_ctx; p++) pos[p] = p;
    for (int i = 0; i < n; i++) tp[i] = kind ? 0 : i ? rint_in(0, n_ctx - 1) : n_ctx - 1;
    void *wq = random_quantized(wtype, dim, n_out, 0);
    float *res[2][2];
    for (int k = 0; k < 2; k++) {
        ob_backend *b = bs[k];
        uint8_t *zero = calloc(1, cb);
        void *kc = dev_copy(b, zero, cb), *vc = dev_copy(b, zero, cb), *dr = dev_copy(b, rows, (size_t)n_ctx * kvd * 4);
        free(zero);
        b->kv_write(b, kc, type, dr, n_ctx, kvd, n_ctx, pos, seq);
        b->kv_write(b, vc, type, dr, n_ctx, kvd, n_ctx, pos, seq);
        void *dq = dev_copy(b, q, (size_t)n * dim * 4), *dout = dev_nan(b, (size_t)n * dim), *dy = dev_copy(b, y, (size_t)n * n_out * 4);
        ob_weight w = weight_on(b, wtype, dim, n_out, wq);
        ob_attn_args a = {dq, dout, kc, vc, type, type, n, n_head, n_head_kv, hd, n_ctx, tp, ts, 1.0f / sqrtf((float)hd), &w};
        b->attention(b, &a);
        b->matmul_add(b, &w, dout, dy, n);
        res[k][0] = dev_get(b, dout, (size_t)n * dim);
        res[k][1] = dev_get(b, dy, (size_t)n * n_out);
        void *bufs[] = {kc, vc, dr, dq, dout, dy, (void *)w.data};
        for (int i = 0; i < 7; i++) b->dealloc(b, bufs[i]);
    }
    const size_t ny = (size_t)n * n_out;
    double big = 0.0;
    for (size_t i = 0; i < ny; i++) big = fmax(big, fabs(res[1][1][i]));
    const int same_out = !memcmp(res[0][0], res[1][0], (size_t)n * dim * 4), same_y = !memcmp(res[0][1], res[1][1], ny * 4);
    const double dy = max_abs_diff(res[0][1], res[1][1], ny);
    /* kind 1: the results must differ (else the attention's codes were not used) and stay close */
    const int ok = same_out && (kind ? !same_y && dy <= 1e-2 * big : same_y);
    if (!ok || ob_test_verbose)
        fprintf(stderr, "  cuda attention codes %s hd=%d ctx=%d n=%d kind %d, wo %s: output %s, wo %s (max diff %.3g of %.3g)\n",
                ob_type_name(type), hd, n_ctx, n, kind, ob_type_name(wtype), same_out ? "same bits" : "DIFFERENT",
                same_y ? "same bits" : "differs", dy, big);
    CHECK(ok);
    for (int k = 0; k < 2; k++) { free(res[k][0]); free(res[k][1]); }
    free(wq); free(rows); free(q); free(y); free(pos); free(seq); free(tp); free(ts);
}

static void test_attn_codes(ob_backend *g) {
    ob_backend *goff = gpu_new_with("OB_CUDA_ATTN_CODES", "0");
    CHECK(goff != NULL);
    if (!goff) return;
    static const int kv_types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        check_attn_codes(g, goff, kv_types[k], 64, 9, 1, 0, OB_TYPE_Q4_0);
        check_attn_codes(g, goff, kv_types[k], 128, 3000, 1, 0, OB_TYPE_Q4_K); /* split spans: the merge writes */
        check_attn_codes(g, goff, kv_types[k], 32, 300, 5, 0, OB_TYPE_Q8_0);
        check_attn_codes(g, goff, kv_types[k], 64, 700, 32, 0, OB_TYPE_TQ2_0); /* the most tokens the codes serve */
    }
    check_attn_codes(g, goff, OB_TYPE_F32, 64, 5, 1, 1, OB_TYPE_Q4_0);
    check_attn_codes(g, goff, OB_TYPE_F32, 128, 5, 3, 1, OB_TYPE_Q8_0);
    gpu_free(goff);
}

/* prompt: the n tokens are one sequence's last n positions (a prompt chunk), else random
 * positions of random sequences */
static double attn_tol = 2e-5; /* max |diff| against the CPU reference (the tensor-core kernel: f16 Q and P) */
static int attn_heads = 8, attn_kv_heads = 2; /* test_kv_attention's query and KV heads */

static void test_kv_attention(ob_backend *g, ob_backend *c, int type, int hd, int n_ctx, int n, int prompt) {
    const int n_head = attn_heads, n_head_kv = attn_kv_heads, n_seq = 2, kvd = n_head_kv * hd;
    size_t rb = ob_type_row_size(type, kvd), cache_bytes = (size_t)n_seq * n_ctx * rb;
    /* fill both caches through kv_write of random rows at every position */
    uint8_t *kc = calloc(1, cache_bytes), *vc = calloc(1, cache_bytes);
    void *dk = dev_copy(g, kc, cache_bytes), *dv = dev_copy(g, vc, cache_bytes);
    int chunk = 256;
    float *rows = malloc((size_t)chunk * kvd * sizeof(float));
    int32_t *pos = malloc((size_t)chunk * 4), *seq = malloc((size_t)chunk * 4);
    for (int s = 0; s < n_seq; s++)
        for (int p0 = 0; p0 < n_ctx; p0 += chunk) {
            int cnt = n_ctx - p0 < chunk ? n_ctx - p0 : chunk;
            for (int i = 0; i < cnt; i++) { pos[i] = p0 + i; seq[i] = s; }
            for (int kv = 0; kv < 2; kv++) {
                for (size_t i = 0; i < (size_t)cnt * kvd; i++) rows[i] = rnorm() * (kv ? 1.0f : 0.6f);
                void *drows = dev_copy(g, rows, (size_t)cnt * kvd * 4);
                c->kv_write(c, kv ? vc : kc, type, rows, cnt, kvd, n_ctx, pos, seq);
                g->kv_write(g, kv ? dv : dk, type, drows, cnt, kvd, n_ctx, pos, seq);
                g->dealloc(g, drows);
            }
        }
    uint8_t *back = malloc(cache_bytes);
    g->download(g, back, dk, cache_bytes);
    int same_k = memcmp(back, kc, cache_bytes) == 0;
    g->download(g, back, dv, cache_bytes);
    int same_v = memcmp(back, vc, cache_bytes) == 0;
    if (!same_k || !same_v) fprintf(stderr, "  cuda kv_write %s: cache bytes differ from the CPU's\n", ob_type_name(type));
    CHECK(same_k && same_v);
    /* attention of n tokens at random positions of random sequences */
    size_t qn = (size_t)n * n_head * hd;
    float *q = randf(qn, 1.0f), *out = malloc(qn * 4);
    for (int i = 0; i < n; i++) { pos[i] = rint_in(0, n_ctx - 1); seq[i] = rint_in(0, n_seq - 1); }
    pos[0] = n_ctx - 1;
    /* prompt 2: the chunk ends 50 positions before the context does, and the GPU's rows after it
     * are NaN (a cache row not yet written may hold anything: none may reach the output) */
    const int gap = prompt == 2 ? 50 : 0;
    for (int i = 0; prompt && i < n; i++) { pos[i] = n_ctx - gap - n + i; seq[i] = 1; }
    void *dq = dev_copy(g, q, qn * 4), *dout = dev_nan(g, qn);
    ob_attn_args a = {q, out, kc, vc, type, type, n, n_head, n_head_kv, hd, n_ctx, pos, seq, 1.0f / sqrtf((float)hd), NULL};
    c->attention(c, &a);
    if (gap) {
        for (int kv = 0; kv < 2; kv++) {
            uint8_t *h = kv ? vc : kc;
            memset(h + ((size_t)n_ctx + n_ctx - gap) * rb, 0xff, (size_t)gap * rb); /* sequence 1's last rows: NaN */
            g->dealloc(g, kv ? dv : dk);
            *(kv ? &dv : &dk) = dev_copy(g, h, cache_bytes);
        }
    }
    ob_attn_args ag = {dq, dout, dk, dv, type, type, n, n_head, n_head_kv, hd, n_ctx, pos, seq, a.scale, NULL};
    g->attention(g, &ag);
    char what[96];
    snprintf(what, sizeof what, "attention %s hd=%d ctx=%d n=%d%s", ob_type_name(type), hd, n_ctx, n,
             gap ? " prompt, NaN rows after it" : prompt ? " prompt" : "");
    cmp_dev(g, dout, out, qn, attn_tol, what);
    g->dealloc(g, dq);
    g->dealloc(g, dout);
    g->dealloc(g, dk);
    g->dealloc(g, dv);
    free(kc); free(vc); free(back); free(rows); free(pos); free(seq); free(q); free(out);
}

/* ---- the whole-layer decode kernel: the same bits as the engine's ops ------------------- */
typedef struct {
    int wt, dt;            /* weight types: Q, K, V, O, gate, up; ffn_down */
    int d, n_head, n_kv, hd, ff, kv_type, bitnet, style, n_ctx;
} layer_case;

/* RMSNorm of x into y (BitNet: then act_quant_i8), as engine/forward.c's norm_act_quant. */
static void lay_norm(ob_backend *g, const ob_layer_args *l, const float *x, const float *w, float *y, int dim) {
    if (l->act_quant) g->rmsnorm_act_quant(g, x, w, y, 1, dim, l->eps);
    else g->rmsnorm(g, x, w, y, 1, dim, l->eps);
}

/* The input of wo / ffn_down: x's sub-norm into y, or x itself (BitNet: act_quant_i8'd). */
static const float *lay_sub(ob_backend *g, const ob_layer_args *l, float *x, const float *w, float *y, int dim) {
    if (w) {
        lay_norm(g, l, x, w, y, dim);
        return y;
    }
    if (l->act_quant) g->act_quant_i8(g, x, 1, dim);
    return x;
}

/* One token through the layer with the backend's ops, in engine/forward.c's order (h: scratch [d]). */
static void layer_ops(ob_backend *g, const ob_layer_args *l, float *h) {
    const ob_attn_args *a = &l->attn;
    const int d = (int)l->wq->n_in, qd = a->n_head * a->head_dim, ff = (int)l->ffn_gate->n_out;
    const ob_weight *ws[3] = {l->wq, l->wk, l->wv};
    float *ys[3] = {l->q, l->k, l->v};
    lay_norm(g, l, l->x, l->attn_norm, h, d);
    g->matmul_multi(g, ws, ys, 3, h, 1);
    g->rope_kv(g, a, l->q, l->k, l->v, l->rope);
    g->attention(g, a);
    g->matmul_add(g, l->wo, lay_sub(g, l, l->att, l->attn_sub_norm, l->q, qd), l->x, 1);
    lay_norm(g, l, l->x, l->ffn_norm, h, d);
    g->matmul_glu(g, l->act, l->ffn_gate, l->ffn_up, h, l->gate, l->up, 1, l->ffn_sub_norm || l->act_quant ? NULL : l->ffn_down);
    g->matmul_add(g, l->ffn_down, lay_sub(g, l, l->gate, l->ffn_sub_norm, l->up, ff), l->x, 1);
}

/* The layer's arguments on fresh NaN scratch and zeroed caches (x: uploaded per step). */
static ob_layer_args layer_on(ob_backend *g, const layer_case *lc, const ob_weight *w, void *const *norms, const ob_rope *r,
                              const int32_t *pos, const int32_t *seq) {
    const int qd = lc->n_head * lc->hd, kvd = lc->n_kv * lc->hd;
    const size_t cb = (size_t)lc->n_ctx * ob_type_row_size(lc->kv_type, kvd);
    uint8_t *zero = calloc(1, cb);
    ob_layer_args l = {dev_nan(g, lc->d), dev_nan(g, qd), dev_nan(g, kvd), dev_nan(g, kvd), dev_nan(g, qd), dev_nan(g, lc->ff),
                       dev_nan(g, lc->ff), &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[6], norms[0], norms[1],
                       lc->bitnet ? norms[2] : NULL, lc->bitnet ? norms[3] : NULL, 1e-5f, lc->bitnet,
                       lc->bitnet ? OB_ACT_RELU2 : OB_ACT_SILU,
                       {NULL, NULL, dev_copy(g, zero, cb), dev_copy(g, zero, cb), lc->kv_type, lc->kv_type, 1, lc->n_head, lc->n_kv,
                        lc->hd, lc->n_ctx, pos, seq, 1.0f / sqrtf((float)lc->hd), NULL},
                       r};
    l.attn.q = l.q;
    l.attn.out = l.att;
    free(zero);
    return l;
}

static void check_layer(ob_backend *g, const layer_case *lc, const int32_t *positions, int steps) {
    const int d = lc->d, qd = lc->n_head * lc->hd, kvd = lc->n_kv * lc->hd, ff = lc->ff;
    const int64_t shape[7][2] = {{d, qd}, {d, kvd}, {d, kvd}, {qd, d}, {d, ff}, {d, ff}, {ff, d}};
    ob_weight w[7];
    for (int i = 0; i < 7; i++) w[i] = fused_weight(g, i == 6 ? lc->dt : lc->wt, shape[i][0], shape[i][1]);
    const int ndim[4] = {d, d, qd, ff};
    void *norms[4];
    for (int i = 0; i < 4; i++) {
        float *nw = randf((size_t)ndim[i], 0.3f);
        for (int k = 0; k < ndim[i]; k++) nw[k] += 1.0f;
        norms[i] = dev_copy(g, nw, (size_t)ndim[i] * 4);
        free(nw);
    }
    ob_rope r = {(ob_rope_style)lc->style, lc->hd, 10000.0f, 1.0f, NULL};
    int32_t pos = 0, seq = 0;
    ob_layer_args la = layer_on(g, lc, w, norms, &r, &pos, &seq), lb = layer_on(g, lc, w, norms, &r, &pos, &seq);
    void *h = dev_nan(g, d);
    int taken = 1, same = 1;
    for (int st = 0; st < steps; st++) {
        pos = positions[st];
        float *x = randf((size_t)d, 1.0f);
        void *xa = dev_copy(g, x, (size_t)d * 4), *xb = dev_copy(g, x, (size_t)d * 4);
        la.x = xa;
        lb.x = xb;
        layer_ops(g, &la, h);
        taken &= g->layer_decode(g, &lb);
        float *ya = dev_get(g, xa, d), *yb = dev_get(g, xb, d);
        if (memcmp(ya, yb, (size_t)d * 4)) {
            if (same) fprintf(stderr, "  cuda layer %s/%s d=%d hd=%d kv %s pos %d: max|diff| %.3g (must be 0)\n", ob_type_name(lc->wt),
                              ob_type_name(lc->dt), d, lc->hd, ob_type_name(lc->kv_type), pos, max_abs_diff(ya, yb, d));
            same = 0;
        }
        free(ya);
        free(yb);
        free(x);
        g->dealloc(g, xa);
        g->dealloc(g, xb);
    }
    const size_t cb = (size_t)lc->n_ctx * ob_type_row_size(lc->kv_type, kvd);
    uint8_t *c1 = malloc(cb), *c2 = malloc(cb);
    g->download(g, c1, la.attn.k, cb);
    g->download(g, c2, lb.attn.k, cb);
    CHECK(memcmp(c1, c2, cb) == 0);
    g->download(g, c1, la.attn.v, cb);
    g->download(g, c2, lb.attn.v, cb);
    CHECK(memcmp(c1, c2, cb) == 0);
    if (ob_test_verbose) fprintf(stderr, "  cuda layer %s/%s d=%d: taken %d, same %d\n", ob_type_name(lc->wt), ob_type_name(lc->dt), d, taken, same);
    CHECK(taken);
    CHECK(same);
    free(c1);
    free(c2);
}

/* On a backend with the kernel on (OB_CUDA_LAYER=1; the default backend refuses every layer). */
static void test_layer(ob_backend *g0) {
    CHECK(g0->layer_decode != NULL);
    ob_backend *g = gpu_new_with("OB_CUDA_LAYER", "1");
    CHECK(g != NULL);
    if (!g || !g0->layer_decode) return;
    static const int32_t near[] = {0, 1, 2, 3, 4, 5, 17, 18, 19, 40};
    static const int32_t far[] = {0, 1, 15, 16, 17, 63, 64, 300, 1000, 2999};
    static const layer_case cases[] = {
        /* Llama-3.2-1B's layer, f16 cache, NORM rope */
        {OB_TYPE_Q4_0, OB_TYPE_Q4_0, 2048, 32, 8, 64, 8192, OB_TYPE_F16, 0, OB_ROPE_NORM, 3000},
        /* Q4_K_M's mix, long ffn_down rows (four warps a row), head size 128, q8_0 cache, NEOX */
        {OB_TYPE_Q4_K, OB_TYPE_Q6_K, 512, 4, 2, 128, 4096, OB_TYPE_Q8_0, 0, OB_ROPE_NEOX, 3000},
        /* BitNet: act_quant, sub-norms, relu^2; f32 cache */
        {OB_TYPE_TQ2_0, OB_TYPE_TQ2_0, 512, 8, 4, 64, 1536, OB_TYPE_F32, 1, OB_ROPE_NORM, 3000},
        {OB_TYPE_Q8_0, OB_TYPE_Q8_0, 256, 4, 4, 64, 768, OB_TYPE_F16, 0, OB_ROPE_NEOX, 64},
        {OB_TYPE_I2_S, OB_TYPE_TQ1_0, 512, 8, 2, 64, 1024, OB_TYPE_F16, 1, OB_ROPE_NORM, 3000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_layer(g, &cases[i], cases[i].n_ctx > 64 ? far : near, 10);

    /* a layer the kernel does not take (f16 weights) is refused, nothing launched */
    layer_case f = {OB_TYPE_F16, OB_TYPE_F16, 256, 4, 4, 64, 512, OB_TYPE_F16, 0, OB_ROPE_NORM, 64};
    ob_weight w[7];
    const int64_t shape[7][2] = {{256, 256}, {256, 256}, {256, 256}, {256, 256}, {256, 512}, {256, 512}, {512, 256}};
    for (int i = 0; i < 7; i++) w[i] = fused_weight(g, OB_TYPE_F16, shape[i][0], shape[i][1]);
    void *norms[4] = {dev_nan(g, 256), dev_nan(g, 256), NULL, NULL};
    ob_rope r = {OB_ROPE_NORM, 64, 10000.0f, 1.0f, NULL};
    int32_t pos = 0, seq = 0;
    ob_layer_args l = layer_on(g, &f, w, norms, &r, &pos, &seq);
    CHECK(g->layer_decode(g, &l) == 0);
    /* the default backend takes no layer */
    layer_case q = cases[3];
    for (int i = 0; i < 7; i++) w[i] = fused_weight(g0, OB_TYPE_Q8_0, shape[i][0], shape[i][1]);
    ob_layer_args l0 = layer_on(g0, &q, w, norms, &r, &pos, &seq);
    CHECK(g0->layer_decode(g0, &l0) == 0);
    gpu_free(g);
}

/* test_kv_attention of every cache type on a backend made with var = val: head size 64 at 300
 * positions (n1 tokens), 128 at 200 positions for prompts (prompt 1) or 3000 for decode (n2) */
static void attn_types_with(ob_backend *c, const char *var, const char *val, int n1, int n2, int prompt) {
    static const int types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    ob_backend *g = gpu_new_with(var, val);
    CHECK(g != NULL);
    for (int k = 0; g && k < 3; k++) {
        test_kv_attention(g, c, types[k], 64, 300, n1, prompt);
        test_kv_attention(g, c, types[k], 128, prompt ? 200 : 3000, n2, prompt);
    }
    gpu_free(g);
}

OB_SUITE(cuda_kernels) {
    ob_backend *g = gpu_new();
    if (!g) return;
    ob_backend *c = ob_backend_cpu_new(); /* its plain-C reference ops, not the SIMD kernels */
    char err[256];
    ob_backend_opts o = {2, 0};
    setenv("OB_CPU_KERNELS", "reference", 1);
    CHECK(c->init(c, &o, err, sizeof err) == 0);
    unsetenv("OB_CPU_KERNELS");
    test_matmul_types(g);
    test_fused(g);
    test_gv_two(g);
    test_ffn(g);
    /* the default: where the codes instance's launch is one wave (q4_K 512 x 512: 64 blocks, one
     * wave on any GPU of compute capability 8.0+), not on the 8B shape's q8_0 gates (4779 blocks,
     * several waves on any GPU); =1 q4_0 gates only; =2 every type */
    check_glu_codes(g, OB_TYPE_Q4_0, 512, 1024, 1);
    check_glu_codes(g, OB_TYPE_Q4_K, 512, 512, 1);
    check_glu_codes(g, OB_TYPE_Q8_0, 4096, 14336, 0);
    ob_backend *gnocodes = gpu_new_with("OB_CUDA_GLU_CODES", "0"), *gall = gpu_new_with("OB_CUDA_GLU_CODES", "2");
    ob_backend *gq40 = gpu_new_with("OB_CUDA_GLU_CODES", "1");
    CHECK(gnocodes != NULL && gall != NULL && gq40 != NULL);
    if (gnocodes) {
        check_glu_codes(gnocodes, OB_TYPE_Q4_0, 512, 1024, 0);
        gpu_free(gnocodes);
    }
    if (gq40) {
        check_glu_codes(gq40, OB_TYPE_Q4_0, 512, 1024, 1);
        check_glu_codes(gq40, OB_TYPE_Q4_K, 512, 512, 0);
        gpu_free(gq40);
    }
    if (gall) {
        check_glu_codes(gall, OB_TYPE_Q4_0, 2048, 8192, 1); /* (the 1B's gate / up) */
        check_glu_codes(gall, OB_TYPE_Q4_K, 2048, 2816, 1);
        check_glu_codes(gall, OB_TYPE_Q6_K, 1024, 2048, 1);
        check_glu_codes(gall, OB_TYPE_TQ2_0, 768, 1536, 1);
        check_glu_codes(gall, OB_TYPE_Q8_0, 2048, 8192, 1);
        gpu_free(gall);
    }
    test_upload_order(g);
    test_host_dev(g);
    test_angles();
    test_gv_hold(g);
    test_gv_direct(g);
    test_layer(g);
    test_row_ops(g, c);
    test_row_ops_wide(g, c);
    test_rope(g, c);
    test_attn_codes(g);
    static const int kv_types[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_Q8_0};
    CHECK(g->rope_kv != NULL);
    for (int k = 0; g->rope_kv && k < 3; k++)
        for (int style = 0; style < 2; style++) test_rope_kv(g, kv_types[k], style);
    /* the split kernel's fused form (gk: the grouped kernel off, which takes f16 caches of these
     * head sizes by default; its fused form is checked below) */
    static const char *const env_gqa0[] = {"OB_CUDA_ATTN_GQA", "0", NULL};
    ob_backend *gk = gpu_new_env(env_gqa0);
    CHECK(gk != NULL && gk->rope_attention != NULL);
    for (int k = 0; gk && gk->rope_attention && k < 3; k++)
        for (int style = 0; style < 2; style++) {
            test_rope_attention(gk, kv_types[k], style, 64, 64, 1, 7, 0);
            test_rope_attention(gk, kv_types[k], style, 64, 48, 3, 300, 1);
            test_rope_attention(gk, kv_types[k], style, 128, 128, 1, 3000, 0); /* split spans */
            test_rope_attention(gk, kv_types[k], style, 128, 96, 2, 129, 1);
            /* more positions than 16 a span of the grid's spans cover: empty spans after the last */
            test_rope_attention(gk, kv_types[k], style, 64, 64, 1, 4300, 1);
        }
    if (gk) {
        rope_attn_wo = OB_TYPE_Q4_0; /* the split kernel's codes for `wo` */
        test_rope_attention(gk, OB_TYPE_F16, 0, 64, 64, 3, 300, 0);
        rope_attn_wo = -1;
        gpu_free(gk);
    }
    /* the default backend on the caches the grouped kernel does not take: the split kernel's */
    for (int k = 0; g->rope_attention && k < 3; k += 2) test_rope_attention(g, kv_types[k], 1, 64, 48, 3, 300, 1);
    test_gqa_rope_groups();
    for (int k = 0; k < 3; k++) {
        test_kv_attention(g, c, kv_types[k], 64, 300, 3, 0);
        test_kv_attention(g, c, kv_types[k], 128, 3000, 1, 0); /* decode of a long context: split spans */
        test_kv_attention(g, c, kv_types[k], 32, 200, 40, 0);
    }
    test_kv_attention(g, c, OB_TYPE_F32, 16, 50, 6, 0);
    /* prompt chunks (ragged tiles included) on the default backend: f16 caches of head size 64 or
     * 128 take the tensor-core kernel (f16 Q and P: 5e-3), the rest the float32 tiled kernel
     * (f16 caches by 16-byte tile loads); decode batches of 5+ tokens with such caches take the
     * grouped kernel (tested below), the rest the split kernel */
    for (int k = 0; k < 3; k++) {
        attn_tol = kv_types[k] == OB_TYPE_F16 ? 5e-3 : 2e-5;
        test_kv_attention(g, c, kv_types[k], 64, 300, 100, 1);
        test_kv_attention(g, c, kv_types[k], 128, 200, 77, 1);
        test_kv_attention(g, c, kv_types[k], 64, 64, 64, 1); /* the whole context */
        test_kv_attention(g, c, kv_types[k], 128, 700, 200, 1);
        test_kv_attention(g, c, kv_types[k], 64, 300, 100, 2); /* rows after the chunk: NaN */
        test_kv_attention(g, c, kv_types[k], 128, 300, 70, 2);
        attn_tol = 2e-5;
        test_kv_attention(g, c, kv_types[k], 32, 64, 64, 1);
        test_kv_attention(g, c, kv_types[k], 96, 700, 200, 1);
    }
    /* the float32 tiled kernel for every shape (OB_CUDA_ATTN_TILES=f32), and the split kernel on
     * prompt chunks too (OB_CUDA_ATTN_TILES=0) */
    attn_types_with(c, "OB_CUDA_ATTN_TILES", "f32", 100, 77, 1);
    /* the row kernel reading RMSNorm's weights after the row's sum (OB_CUDA_ROWS_WPRE=0; the
     * default reads them before it waits): the row ops against the CPU, and the codes they hand
     * on against the quantizer's (test_fused) */
    ob_backend *gw = gpu_new_with("OB_CUDA_ROWS_WPRE", "0");
    CHECK(gw != NULL);
    if (gw) {
        test_row_ops(gw, c);
        test_fused(gw);
        gpu_free(gw);
    }
    /* norms of rows from 2048 values on 256-thread blocks (OB_CUDA_ROWS_WIDE=1, the whole-layer
     * kernel's order; the default takes 1024) */
    ob_backend *gn = gpu_new_with("OB_CUDA_ROWS_WIDE", "1");
    CHECK(gn != NULL);
    if (gn) {
        test_row_ops_wide(gn, c);
        test_fused(gn);
        gpu_free(gn);
    }
    /* the decode attention's instances for the head size with f16 caches fixed (OB_CUDA_ATTN_MK=1):
     * against the CPU, and rope_attention against rope_kv + attention on it */
    /* (the split kernel's instances: the grouped kernel off, which takes f16 caches of head size
     * 64 / 128 by default) */
    static const char *const env_mk1[] = {"OB_CUDA_ATTN_MK", "1", "OB_CUDA_ATTN_GQA", "0", NULL};
    ob_backend *gm = gpu_new_env(env_mk1);
    CHECK(gm != NULL);
    if (gm) {
        static const int hds[] = {16, 32, 64, 96, 128, 256};
        for (int k = 0; k < 6; k++) {
            test_kv_attention(gm, c, OB_TYPE_F16, hds[k], 300, 3, 0);
            test_kv_attention(gm, c, OB_TYPE_F16, hds[k], 3000, 1, 0); /* split spans */
        }
        test_kv_attention(gm, c, OB_TYPE_Q8_0, 64, 300, 3, 0);
        for (int style = 0; style < 2; style++) {
            test_rope_attention(gm, OB_TYPE_F16, style, 64, 64, 1, 7, 0);
            test_rope_attention(gm, OB_TYPE_F16, style, 128, 128, 1, 3000, 0);
            test_rope_attention(gm, OB_TYPE_F16, style, 32, 32, 3, 300, 1);
        }
        /* the same bits as the general instance (OB_CUDA_ATTN_MK=0), for each head-size instance
         * (MK 1, 2, 4), on =1 and on the default (=2; attention without RoPE, so its register path
         * is not taken here: rope_attention's tests and the engine's logits below cover it) */
        static const char *const env_mk0[] = {"OB_CUDA_ATTN_MK", "0", "OB_CUDA_ATTN_GQA", "0", NULL};
        ob_backend *g0 = gpu_new_env(env_mk0), *gd2 = gpu_new_with("OB_CUDA_ATTN_GQA", "0"); /* (=2, the default instances) */
        CHECK(g0 != NULL && gd2 != NULL);
        for (int k = 0; g0 && gd2 && k < 2; k++) {
            ob_backend *gi = k ? gd2 : gm;
            check_attn_codes(g0, gi, OB_TYPE_F16, 32, 300, 3, 0, OB_TYPE_Q8_0);
            check_attn_codes(g0, gi, OB_TYPE_F16, 64, 700, 5, 0, OB_TYPE_Q4_0);
            check_attn_codes(g0, gi, OB_TYPE_F16, 128, 3000, 1, 0, OB_TYPE_Q4_K);
            check_attn_codes(g0, gi, OB_TYPE_F16, 96, 300, 2, 0, OB_TYPE_Q4_0);
        }
        gpu_free(g0);
        gpu_free(gd2);
        gpu_free(gm);
    }
    /* ... and with q loaded and rotated in registers (OB_CUDA_ATTN_MK=2): both RoPE styles, full
     * rotation (pairs in registers or neighbour lanes) and partial (NEOX falls back), one span
     * and several */
    static const char *const env_mk2[] = {"OB_CUDA_ATTN_MK", "2", "OB_CUDA_ATTN_GQA", "0", NULL};
    ob_backend *gq2 = gpu_new_env(env_mk2);
    CHECK(gq2 != NULL);
    if (gq2) {
        for (int style = 0; style < 2; style++) {
            test_rope_attention(gq2, OB_TYPE_F16, style, 64, 64, 1, 7, 0);
            test_rope_attention(gq2, OB_TYPE_F16, style, 64, 48, 3, 300, 1);
            test_rope_attention(gq2, OB_TYPE_F16, style, 128, 128, 1, 3000, 0);
            test_rope_attention(gq2, OB_TYPE_F16, style, 128, 64, 2, 129, 1);
            test_rope_attention(gq2, OB_TYPE_F16, style, 32, 32, 3, 300, 1);
        }
        gpu_free(gq2);
    }
    /* decode batches of 5+ tokens on the split kernel (OB_CUDA_ATTN_GQA=0; the default takes the
     * grouped kernel below from 5 tokens): f16 and q8_0 caches, one span and many */
    attn_types_with(c, "OB_CUDA_ATTN_GQA", "0", 9, 40, 0);
    /* decode batches on the grouped tensor-core kernel (OB_CUDA_ATTN_GQA=1; default 5; f16 Q and P:
     * 5e-3): head sizes 64 and 128, one tile and many, tokens of both sequences at random
     * positions, a prompt chunk shorter than the tiled kernels take; with its fused form off,
     * rope_attention declines */
    static const char *const env_gqa1[] = {"OB_CUDA_ATTN_GQA", "1", "OB_CUDA_ATTN_GQA_ROPE", "0", "OB_CUDA_ATTN_GQA_SPLIT", "0", NULL};
    ob_backend *gg = gpu_new_env(env_gqa1);
    CHECK(gg != NULL);
    if (gg) {
        attn_tol = 5e-3;
        test_kv_attention(gg, c, OB_TYPE_F16, 64, 300, 3, 0);
        test_kv_attention(gg, c, OB_TYPE_F16, 64, 40, 17, 0);
        test_kv_attention(gg, c, OB_TYPE_F16, 128, 3000, 40, 0);
        test_kv_attention(gg, c, OB_TYPE_F16, 128, 200, 33, 1);
        test_kv_attention(gg, c, OB_TYPE_F16, 64, 300, 40, 2); /* rows after the chunk: NaN */
        static const int groups[][2] = {{16, 1}, {16, 2}, {4, 4}}; /* 16 and 8 query heads a KV head (all fragment rows), 1 */
        for (int k = 0; k < 3; k++) {
            attn_heads = groups[k][0];
            attn_kv_heads = groups[k][1];
            test_kv_attention(gg, c, OB_TYPE_F16, 64, 300, 9, 0);
            test_kv_attention(gg, c, OB_TYPE_F16, 128, 200, 5, 0);
        }
        attn_heads = 8;
        attn_kv_heads = 2;
        test_kv_attention(gg, c, OB_TYPE_F16, 64, 700, 1, 0);
        attn_tol = 2e-5;
        test_kv_attention(gg, c, OB_TYPE_Q8_0, 64, 300, 3, 0); /* (not its cache type: the split kernel) */
        ob_rope r = {OB_ROPE_NORM, 64, 10000.0f, 1.0f, NULL};
        ob_attn_args a = {0};
        a.n = 4; a.n_head = 8; a.n_head_kv = 2; a.head_dim = 64; a.type_k = a.type_v = OB_TYPE_F16;
        CHECK_EQ_INT(gg->rope_attention(gg, &a, NULL, NULL, NULL, &r), 0);
        gpu_free(gg);
    }
    /* the grouped kernel's fused form (OB_CUDA_ATTN_GQA_ROPE=1, as the default) against rope_kv and the
     * grouped kernel (OB_CUDA_ATTN_GQA=1 on the same backend): the same bits, outputs and caches;
     * with a `wo` after it, its codes against the quantizer's */
    static const char *const env_rope[] = {"OB_CUDA_ATTN_GQA", "1", "OB_CUDA_ATTN_GQA_ROPE", "1", "OB_CUDA_ATTN_GQA_SPLIT", "0", NULL};
    ob_backend *gr = gpu_new_env(env_rope);
    CHECK(gr != NULL);
    for (int style = 0; gr && style < 2; style++) {
        test_rope_attention(gr, OB_TYPE_F16, style, 64, 64, 1, 7, 0);
        test_rope_attention(gr, OB_TYPE_F16, style, 64, 48, 3, 300, 1);
        test_rope_attention(gr, OB_TYPE_F16, style, 128, 128, 1, 3000, 0);
        test_rope_attention(gr, OB_TYPE_F16, style, 128, 96, 9, 129, 1);
        test_rope_attention(gr, OB_TYPE_F16, style, 64, 64, 40, 64, 0); /* (a prompt-sized step: the last tile is tile 0) */
        test_rope_attention(gr, OB_TYPE_F16, style, 64, 47, 2, 150, 0);  /* an odd rotation: its last dimension as it is */
        rope_attn_wo = OB_TYPE_Q4_0;
        test_rope_attention(gr, OB_TYPE_F16, style, 64, 64, 1, 200, 0);
        test_rope_attention(gr, OB_TYPE_F16, style, 128, 128, 5, 70, 1);
        rope_attn_wo = -1;
        static const int groups[][2] = {{16, 1}, {16, 2}, {4, 4}}; /* 16 and 8 query heads a KV head (fragment rows g + 8), 1 */
        for (int k = 0; k < 3; k++) {
            rope_heads = groups[k][0];
            rope_kv_heads = groups[k][1];
            test_rope_attention(gr, OB_TYPE_F16, style, 128, 128, 3, 200, 0);
            test_rope_attention(gr, OB_TYPE_F16, style, 64, 64, 1, 90, 1);
        }
        rope_heads = 8;
        rope_kv_heads = 2;
    }
    if (gr) {
        test_rope_attention(gr, OB_TYPE_Q8_0, 0, 64, 64, 3, 300, 0); /* (not its cache type: the split kernel) */
        gpu_free(gr);
    }
    /* long contexts cut into spans (OB_CUDA_ATTN_GQA_SPLIT=1, the default): the grouped kernel against
     * the CPU (decode batches, one span and many; a prompt chunk), its fused form against rope_kv
     * + it (the same spans: the same bits) */
    static const char *const env_split[] = {"OB_CUDA_ATTN_GQA", "1", "OB_CUDA_ATTN_GQA_ROPE", "1", "OB_CUDA_ATTN_GQA_SPLIT", "1", NULL};
    ob_backend *gsp = gpu_new_env(env_split);
    if (!gsp) CHECK(0);
    else {
        attn_tol = 5e-3;
        test_kv_attention(gsp, c, OB_TYPE_F16, 64, 3000, 1, 0);
        test_kv_attention(gsp, c, OB_TYPE_F16, 128, 3000, 3, 0);
        test_kv_attention(gsp, c, OB_TYPE_F16, 64, 700, 9, 0);
        test_kv_attention(gsp, c, OB_TYPE_F16, 64, 100, 2, 0); /* one span */
        test_kv_attention(gsp, c, OB_TYPE_F16, 128, 1000, 33, 1);
        attn_tol = 2e-5;
        for (int style = 0; style < 2; style++) {
            test_rope_attention(gsp, OB_TYPE_F16, style, 64, 64, 1, 3000, 1);
            test_rope_attention(gsp, OB_TYPE_F16, style, 128, 128, 2, 1500, 0);
            test_rope_attention(gsp, OB_TYPE_F16, style, 64, 48, 5, 520, 0);
            test_rope_attention(gsp, OB_TYPE_F16, style, 64, 64, 1, 2817, 0); /* 12 spans, the last one position: its first tile */
            rope_attn_wo = OB_TYPE_Q4_0;
            test_rope_attention(gsp, OB_TYPE_F16, style, 128, 128, 3, 2000, 0); /* codes from the merging span */
            rope_attn_wo = -1;
        }
        gpu_free(gsp);
    }
    static const char *const env_tiles0[] = {"OB_CUDA_ATTN_TILES", "0", "OB_CUDA_ATTN_GQA", "0", NULL}; /* the split kernel, not the grouped one */
    ob_backend *gs = gpu_new_env(env_tiles0);
    CHECK(gs != NULL);
    for (int k = 0; gs && k < 3; k++) test_kv_attention(gs, c, kv_types[k], 64, 300, 100, 1);
    gpu_free(gs);
    /* prompt-sized matmuls on the int8 tensor cores (OB_CUDA_MMQ=1): every type (the others keep
     * the 16-bit path on the same backend), and the fused ops on it */
    ob_backend *gq = gpu_new_with("OB_CUDA_MMQ", "1");
    CHECK(gq != NULL);
    if (gq) {
        matmul_suite(gq, &matmul_mmq);
        gpu_free(gq);
    }
    /* steps of distinct sequences (the server's batches): int8-path weights from 13 tokens on the
     * 16-bit path (checked at its tolerance: a silent int8 path fails it), and the fused ops */
    CHECK(g->step_kind != NULL);
    if (g->step_kind) {
        g->step_kind(g, 1);
        matmul_suite(g, &matmul_distinct);
        g->step_kind(g, 0);
    }
    /* the 16-bit path without kept f16 copies (OB_CUDA_F16_COPY=0): every type and the fused ops at
     * its tolerance; with them (the default, g), the per-call dequantization's bits */
    ob_backend *g0 = gpu_new_with("OB_CUDA_F16_COPY", "0");
    setenv("OB_CUDA_GEMV_MAX", "4", 1);
    ob_backend *gd = gpu_new_with("OB_CUDA_F16_COPY", "0");
    unsetenv("OB_CUDA_GEMV_MAX");
    CHECK(g0 != NULL && gd != NULL);
    if (g0 && gd) {
        const long reads = f16_reads();
        matmul_suite(g0, NULL);
        CHECK(f16_reads() == reads);
        check_f16_copies(g, g0, gd);
    }
    gpu_free(g0);
    gpu_free(gd);
    c->free(c);
    free(c);
    gpu_free(g);
}

/* One step of the tokens of sequences seq[0..n) (consecutive positions from next[seq]), token ids
 * from k; with all, every row's logits, else the last row's, appended to out at *at rows. */
static void wide_step(ob_ctx_t *c, const int32_t *seq, int n, int all, int k, int *next, float *out, size_t *at, int n_vocab) {
    int32_t tok[64], pos[64];
    int8_t want[64];
    for (int i = 0; i < n; i++) {
        tok[i] = (11 * k + 7 * i + 3) % n_vocab;
        pos[i] = next[seq[i]]++;
        want[i] = all || i == n - 1;
    }
    ob_batch b = {n, tok, pos, (int32_t *)seq, want};
    char err[512];
    CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
    for (int i = 0; i < (all ? n : 1); i++) {
        const float *l = ob_get_logits(c, i);
        CHECK(l != NULL);
        if (l) memcpy(out + (*at)++ * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
}

/* A step recorded before its weight had an f16 copy (8 distinct tokens: the staged kernel) is not
 * replayed once the copy exists (those tokens then take cuBLAS): the step runs eagerly on the
 * copy's path, then is recorded and replayed on it. The scratch buffers are grown first, so that
 * nothing but the copy can drop the recording. */
static void test_copy_drops_recordings(void) {
#ifdef OB_CUDA
    ob_backend *gb = gpu_new();
    if (!gb) return;
    const int64_t n_in = 512, n_out = 64;
    const int n = 8, big = 40;
    gb->step_kind(gb, 1);
    ob_weight wf = fused_weight(gb, OB_TYPE_F16, n_in, n_out), wq = fused_weight(gb, OB_TYPE_Q4_0, n_in, n_out);
    float *x = randf((size_t)big * n_in, 1.0f);
    void *dx = dev_copy(gb, x, (size_t)big * n_in * 4), *dy = dev_nan(gb, (size_t)big * n_out), *dyb = dev_nan(gb, (size_t)big * n_out);
    gb->matmul(gb, &wf, dx, dyb, big); /* (the 16-bit activations' scratch at its size) */
    int32_t ids[8], pos[8], seq[8];
    for (int i = 0; i < n; i++) { ids[i] = i; pos[i] = 3; seq[i] = i; }
    float *y[5];
    const long replays = ob_cuda_graph_replays();
    /* eagerly (seen), recorded; after the copy: eagerly, recorded, replayed */
    for (int rep = 0; rep < 5; rep++) {
        if (rep == 2) gb->matmul(gb, &wq, dx, dyb, big); /* 40 distinct tokens: cuBLAS, which makes wq's copy */
        if (!gb->graph_begin(gb, 0x5eed, ids, pos, seq, n)) {
            gb->matmul(gb, &wq, dx, dy, n);
            if (gb->graph_end(gb) < 0) gb->matmul(gb, &wq, dx, dy, n);
        }
        y[rep] = dev_get(gb, dy, (size_t)n * n_out);
    }
    CHECK_EQ_INT((int)(ob_cuda_graph_replays() - replays), 1); /* the last one only */
    gb->matmul(gb, &wq, dx, dy, n); /* eagerly, with the copy */
    float *ye = dev_get(gb, dy, (size_t)n * n_out);
    const size_t bytes = (size_t)n * n_out * 4;
    CHECK(memcmp(y[0], y[1], bytes) == 0); /* the staged kernel, eager and recorded */
    for (int rep = 2; rep < 5; rep++) CHECK(memcmp(y[rep], ye, bytes) == 0); /* after the copy: its path */
    CHECK(memcmp(y[2], y[0], bytes) != 0); /* (another path than the staged kernel's) */
    for (int i = 0; i < 5; i++) free(y[i]);
    free(ye);
    free(x);
    void *bufs[] = {dx, dy, dyb, (void *)wf.data, (void *)wq.data};
    for (int i = 0; i < 5; i++) gb->dealloc(gb, bufs[i]);
    gpu_free(gb);
#endif
}

/* Logits of one sequence (1 row of logits kept by the context) through recorded steps and
 * batches asking for every row's logits, each of which grows the logits buffer and frees the one
 * the recordings write (host_dev): an 8-token prompt (the last row; scratch at its size, so that
 * only the move forgets the recordings), 4 steps, a 4-token batch, 4 steps, an 8-token batch, 4
 * steps, on the GPU with env = val while the model loads; *rows gets the rows kept, *last the
 * steps replayed among the last 4. */
static float *decode_grow(const char *path, const char *env, const char *val, size_t *rows, long *last, int *n_vocab) {
    ob_model_t *m = NULL;
    ob_ctx_t *c = ob_test_open(path, "cuda", env, val, 64, 1, 8, &m, n_vocab);
    if (!c) return NULL;
    const int nv = *n_vocab;
    float *out = malloc((size_t)(1 + 3 * 4 + 4 + 8) * nv * sizeof(float));
    int next[1] = {0}, seq[8] = {0};
    size_t at = 0;
    wide_step(c, seq, 8, 0, 99, next, out, &at, nv);
    for (int r = 0; r < 3; r++) {
#ifdef OB_CUDA
        *last = -ob_cuda_graph_replays();
#endif
        for (int k = 0; k < 4; k++) wide_step(c, seq, 1, 0, 10 * r + k, next, out, &at, nv);
#ifdef OB_CUDA
        *last += ob_cuda_graph_replays();
#endif
        if (r < 2) wide_step(c, seq, 4 << r, 1, 10 * r + 5, next, out, &at, nv);
    }
    *rows = at;
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

/* The logits written in place by recorded steps (host_dev, the default) against downloaded
 * (OB_CUDA_MAPPED=0, which downloads after each step: at least 13 more; heap buffers,
 * OB_CUDA_PINNED=0): the same bits, also after the logits buffer moved. Freeing a page-locked buffer forgets the recordings, which may write it: the last
 * 4 steps run eagerly, are recorded, then replay twice (a replay of an old recording would write
 * freed memory and leave the new buffer stale); heap buffers forget nothing. */
static void test_mapped_logits(void) {
    char out[256];
    snprintf(out, sizeof out, "%s/cuda-mapped-llama.gguf", ob_test_tmpdir());
    char *argv[] = {"convert", "tests/golden/llama", "-o", out, "--type", "q8_0", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    static const char *var[3] = {NULL, "OB_CUDA_MAPPED", "OB_CUDA_PINNED"}, *val[3] = {NULL, "0", "0"};
    float *l[3] = {NULL, NULL, NULL};
    size_t rows[3] = {0, 0, 0};
    long last[3] = {0, 0, 0}, dl[3] = {0, 0, 0};
    int nv[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        dl[k] = -cuda_downloads();
        l[k] = decode_grow(out, var[k], val[k], &rows[k], &last[k], &nv[k]);
        dl[k] += cuda_downloads();
        CHECK(l[k] != NULL && rows[k] == 25 && nv[k] == nv[0]);
#ifdef OB_CUDA
        if (ob_test_verbose) fprintf(stderr, "  cuda logits buffer moved (%s): %ld of the last 4 steps replayed\n", val[k] ? var[k] : "default", last[k]);
        CHECK(k == 2 ? last[k] >= 2 : last[k] == 2);
#endif
        if (k && l[0] && l[k] && rows[k] == rows[0] && nv[k] == nv[0]) {
            const int same = memcmp(l[0], l[k], rows[0] * (size_t)nv[0] * sizeof(float)) == 0;
            if (!same || ob_test_verbose) fprintf(stderr, "  cuda logits in place vs %s=%s: %s\n", var[k], val[k], same ? "same" : "differ");
            CHECK(same);
        }
    }
    /* the 13 steps of one row's logits downloaded them when not written in place */
    if (ob_test_verbose) fprintf(stderr, "  cuda downloads: %ld in place, %ld with OB_CUDA_MAPPED=0\n", dl[0], dl[1]);
    CHECK(dl[1] - dl[0] >= 13);
    for (int k = 0; k < 3; k++) free(l[k]);
    remove(out);
}

/* Logits of wide steps on the GPU, with env = val while the model loads: 64 sequences with
 * 2-token prompts, then 4 rounds of steps of distinct sequences (16, 40 and 64 tokens, every row's
 * logits), a 40-token run of one sequence, a 64-token run of another (a prompt chunk: never
 * recorded) and 40 tokens of two sequences (the run of 40's key); with8, also steps of 8 distinct
 * sequences, two before the rounds and one in each; *rows gets the rows kept. */
static float *decode_wide(const char *path, const char *env, const char *val, int with8, size_t *rows, int *n_vocab) {
    ob_model_t *m = NULL;
    ob_ctx_t *c = ob_test_open(path, "cuda", env, val, 512, 64, 64, &m, n_vocab);
    if (!c) return NULL;
    const int nv = *n_vocab;
    float *out = malloc((size_t)(64 + 16 + 4 * 132) * nv * sizeof(float));
    int next[64] = {0}, seq[64];
    size_t at = 0;
    for (int s = 0; s < 64; s++) {
        int32_t two[2] = {s, s};
        wide_step(c, two, 2, 0, s, next, out, &at, nv);
    }
    for (int i = 0; i < 64; i++) seq[i] = i;
    for (int k = 0; with8 && k < 2; k++) /* recorded (the second time) before any weight has its f16 copy */
        wide_step(c, seq, 8, 1, 100 + k, next, out, &at, nv);
    for (int r = 0; r < 4; r++) {
        static const int widths[3] = {16, 40, 64};
        for (int w = 0; w < 3; w++) {
            for (int i = 0; i < widths[w]; i++) seq[i] = i;
            wide_step(c, seq, widths[w], 1, 10 * r + w, next, out, &at, nv);
        }
        if (with8) /* 8 distinct tokens: the staged kernel before the weights have f16 copies, cuBLAS after */
            wide_step(c, seq, 8, 1, 10 * r + 7, next, out, &at, nv);
        for (int i = 0; i < 64; i++) seq[i] = 1;
        wide_step(c, seq, 40, 0, 10 * r + 3, next, out, &at, nv);
        for (int i = 0; i < 64; i++) seq[i] = 2;
        wide_step(c, seq, 64, 0, 10 * r + 4, next, out, &at, nv);
        for (int i = 0; i < 40; i++) seq[i] = i < 20 ? 3 : 4;
        wide_step(c, seq, 20, 0, 10 * r + 5, next, out, &at, nv); /* (the first 20: sequence 3's run) */
        wide_step(c, seq, 40, 0, 10 * r + 6, next, out, &at, nv);
    }
    *rows = at;
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

/* Logits of steps single-token steps of two interleaved sequences after a 5-token prompt each. */
static void test_graphs(void) {
    char out[256];
    snprintf(out, sizeof out, "%s/cuda-graph-llama.gguf", ob_test_tmpdir());
    char *argv[] = {"convert", "tests/golden/llama", "-o", out, "--type", "q8_0", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    const int steps = 300; /* past several attention spans */
    int nv0 = 0, nv1 = 0;
    float *eager = ob_test_decode_two(out, "cuda", "OB_CUDA_GRAPH", "0", steps, &nv0),
          *graph = ob_test_decode_two(out, "cuda", "OB_CUDA_GRAPH", "1", steps, &nv1);
    if (eager && graph && nv0 == nv1) {
        double d = max_abs_diff(graph, eager, (size_t)2 * (steps + 1) * nv0);
        if (d > 1e-5 || ob_test_verbose) fprintf(stderr, "  cuda graphs vs eager: max|diff| %.3g over %d steps\n", d, 2 * steps);
        CHECK(d <= 1e-5);
    }
    /* wide steps (the server's batches up to 64 tokens, recorded; runs of one sequence beside
     * them): recorded and replayed steps give the eager steps' logits, and no key replays another
     * kind of step's kernels (distinct steps take cuBLAS from 13 tokens, prompt runs the int8 path
     * to 32, one sequence's run of 64 the prompt attention) */
    /* (the default keeps f16 copies: made by the eager steps, read by the recorded ones; again
     * without them, OB_CUDA_F16_COPY=0: the same bits, as these steps take cuBLAS either way; and
     * with steps of 8 distinct sequences, which take the staged kernel until the weights have
     * copies and cuBLAS after; test_copy_drops_recordings checks that case without the scratch
     * growth that also drops recordings here) */
    static const char *mode_var[] = {NULL, "OB_CUDA_F16_COPY", NULL}, *mode_val[] = {NULL, "0", NULL};
    float *plain = NULL;
    size_t plain_rows = 0;
    for (int mode = 0; mode < 3; mode++) {
        if (mode_var[mode]) setenv(mode_var[mode], mode_val[mode], 1);
        size_t rw0 = 0, rw1 = 0;
        int nw0 = 0, nw1 = 0;
        float *we = decode_wide(out, "OB_CUDA_GRAPH", "0", mode == 2, &rw0, &nw0);
#ifdef OB_CUDA
        const long replays = ob_cuda_graph_replays(), reads = f16_reads();
#endif
        float *wg = decode_wide(out, "OB_CUDA_GRAPH", "1", mode == 2, &rw1, &nw1);
#ifdef OB_CUDA
        CHECK(ob_cuda_graph_replays() > replays); /* the recorded run replayed steps */
        CHECK(mode == 1 ? f16_reads() == reads : f16_reads() > reads);
#endif
        if (mode_var[mode]) unsetenv(mode_var[mode]);
        CHECK(we != NULL && wg != NULL && rw0 == rw1 && nw0 == nw1);
        if (we && wg && rw0 == rw1 && nw0 == nw1) {
            double d = max_abs_diff(wg, we, rw0 * (size_t)nw0);
            if (d > 1e-5 || ob_test_verbose)
                fprintf(stderr, "  cuda graphs vs eager, wide steps (mode %d): max|diff| %.3g over %zu rows\n", mode, d, rw0);
            CHECK(d <= 1e-5);
        }
        if (mode == 1 && plain && we) {
            CHECK(rw0 == plain_rows);
            if (rw0 == plain_rows) CHECK(max_abs_diff(we, plain, rw0 * (size_t)nw0) == 0.0);
        }
        if (mode == 0) {
            plain = we;
            plain_rows = rw0;
        } else free(we);
        free(wg);
    }
    free(plain);
    /* heap logits buffers (OB_CUDA_PINNED=0) give the same logits as the page-locked default */
    int nv2 = 0;
    float *heap = ob_test_decode_two(out, "cuda", "OB_CUDA_PINNED", "0", steps, &nv2);
    CHECK(heap != NULL && nv2 == nv1);
    if (heap && graph && nv2 == nv1) CHECK(max_abs_diff(heap, graph, (size_t)2 * (steps + 1) * nv1) == 0.0);
    free(heap);
    free(eager);
    free(graph);
    remove(out);
}

/* max |a - b| over n against rel x max(1, max |b|); says what, with verbose output or when over */
static int logits_near(const float *a, const float *b, size_t n, double rel, const char *what) {
    double d = max_abs_diff(a, b, n), top = 1.0;
    for (size_t i = 0; i < n; i++) top = fabs(b[i]) > top ? fabs(b[i]) : top;
    if (d > rel * top || ob_test_verbose) fprintf(stderr, "  %s: max|diff| %.3g (at most %.3g)\n", what, d, rel * top);
    return d <= rel * top;
}

/* A random Llama-shaped model of the grouped attention's shapes (head size 64, 8 query heads on 2
 * KV heads; the golden models' heads are 16 and 32, which it never takes), through the engine:
 * wide steps with the default (the grouped kernel for steps of 5+ distinct sequences) recorded
 * against eager (1e-5) and against the split kernel (OB_CUDA_ATTN_GQA=0: f16 q and P against f32,
 * within 2e-2 of the largest logit); token by token through two sequences past 300 positions,
 * the fused form (OB_CUDA_ATTN_GQA_ROPE=1) against rope_kv + the grouped kernel (=0; both with
 * OB_CUDA_ATTN_GQA=1), with and without spans (OB_CUDA_ATTN_GQA_SPLIT=0 / 1 on both), and the
 * GLU's codes (the default) against the quantizer's (OB_CUDA_GLU_CODES=0): the same logits, bit
 * for bit. */
static void test_grouped_engine(void) {
    char cfg[256], out[256];
    snprintf(cfg, sizeof cfg, "%s/cuda-grouped.json", ob_test_tmpdir());
    snprintf(out, sizeof out, "%s/cuda-grouped.gguf", ob_test_tmpdir());
    FILE *f = fopen(cfg, "w");
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"head_dim\": 64,"
               " \"vocab_size\": 320, \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,"
               " \"bos_token_id\": 318, \"eos_token_id\": 319, \"tie_word_embeddings\": false}\n");
    fclose(f);
    char *argv[] = {"convert", "--random", cfg, "-o", out, "--type", "q4_0", NULL};
    CHECK_EQ_INT(ob_cmd_convert(7, argv), 0);
    remove(cfg);
    size_t r0 = 0, r1 = 0, r2 = 0;
    int n0 = 0, n1 = 0, n2 = 0;
    float *we = decode_wide(out, "OB_CUDA_GRAPH", "0", 1, &r0, &n0), *wg = decode_wide(out, NULL, NULL, 1, &r1, &n1);
    float *ws = decode_wide(out, "OB_CUDA_ATTN_GQA", "0", 1, &r2, &n2);
    CHECK(we && wg && ws && r0 == r1 && r1 == r2 && n0 == n1 && n1 == n2);
    if (we && wg && ws && r0 == r1 && r1 == r2 && n0 == n1 && n1 == n2) {
        CHECK(logits_near(wg, we, r0 * (size_t)n0, 1e-5, "cuda grouped attention, wide steps: recorded vs eager"));
        CHECK(logits_near(wg, ws, r0 * (size_t)n0, 2e-2, "cuda grouped attention vs the split kernel, wide steps"));
    }
    free(we);
    free(wg);
    free(ws);
    const int steps = 300;
    static const char *const split_vals[2] = {"0", "1"};
    for (int sp = 0; sp < 2; sp++) {
        setenv("OB_CUDA_ATTN_GQA", "1", 1);
        setenv("OB_CUDA_ATTN_GQA_SPLIT", split_vals[sp], 1);
        int a0 = 0, a1 = 0;
        float *base = ob_test_decode_two(out, "cuda", "OB_CUDA_ATTN_GQA_ROPE", "0", steps, &a0);
        float *fused = ob_test_decode_two(out, "cuda", "OB_CUDA_ATTN_GQA_ROPE", "1", steps, &a1);
        unsetenv("OB_CUDA_ATTN_GQA");
        unsetenv("OB_CUDA_ATTN_GQA_SPLIT");
        CHECK(base && fused && a0 == a1);
        if (base && fused && a0 == a1)
            CHECK(logits_near(fused, base, (size_t)2 * (steps + 1) * a0, 0.0,
                              sp ? "cuda fused grouped attention with spans vs rope_kv + grouped" : "cuda fused grouped attention vs rope_kv + grouped"));
        free(base);
        free(fused);
    }
    int c0 = 0, c1 = 0;
    const long made = glu_codes_made();
    setenv("OB_CUDA_FFN", "0", 1); /* (the feed-forward kernel takes the GLU's steps) */
    float *plain = ob_test_decode_two(out, "cuda", "OB_CUDA_GLU_CODES", "0", 60, &c0), *codes = ob_test_decode_two(out, "cuda", NULL, NULL, 60, &c1);
    unsetenv("OB_CUDA_FFN");
    CHECK(glu_codes_made() > made); /* (the default made them) */
    CHECK(plain && codes && c0 == c1);
    if (plain && codes && c0 == c1) CHECK(logits_near(codes, plain, (size_t)2 * 61 * c0, 0.0, "cuda GLU codes vs the quantizer's"));
    free(plain);
    free(codes);
    remove(out);
}

/* The engine with the whole-layer kernel (OB_CUDA_LAYER=1) and without (the default): the same
 * logits, bit for bit, token by token through two interleaved sequences (recorded steps, spans of
 * attention). */
static void test_layer_engine(void) {
    static const struct { const char *dir, *type; } models[] = {{"llama", "q4_0"}, {"llama", "q8_0"}, {"bitnet", "tq2_0"}};
    setenv("OB_CUDA_ATTN_GQA", "0", 1); /* (BitNet's heads: the split kernel's attention in both) */
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        CHECK(ob_test_same_logits(models[i].dir, models[i].type, "cuda", "OB_CUDA_LAYER", "1", 100, "cuda-layer-kernel"));
    unsetenv("OB_CUDA_ATTN_GQA");
}

/* The engine with rope and attention in one kernel for decode steps (the default) and without
 * (OB_CUDA_ROPE_ATTN=0): the same logits, bit for bit (NORM and NEOX rope, Q/K norms, BitNet),
 * on the split kernel (OB_CUDA_ATTN_GQA=0 in both), and BitNet (head size 64, groups of 2) on
 * the grouped one too (OB_CUDA_ATTN_GQA=1 and its fused form, OB_CUDA_ATTN_GQA_ROPE=1, in both;
 * the golden models' other heads are sizes it does not take). */
static void test_rope_attention_engine(void) {
    static const struct { const char *dir, *type; } models[] = {{"llama", "q4_0"}, {"qwen3", "f32"}, {"bitnet", "tq2_0"}};
    setenv("OB_CUDA_ATTN_GQA", "0", 1);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        CHECK(ob_test_same_logits(models[i].dir, models[i].type, "cuda", "OB_CUDA_ROPE_ATTN", "0", 100, "cuda-rope-attention"));
    /* two-token steps, of two sequences (fused) and of one (not: its second token reads the
     * first's position), alternating with the same token count: recorded steps must tell them apart */
    CHECK(ob_test_same_logits_mixed("llama", "q4_0", "cuda", "OB_CUDA_ROPE_ATTN", "0", 60, "cuda-rope-attention-mixed"));
    CHECK(ob_test_same_logits_mixed("bitnet", "tq2_0", "cuda", "OB_CUDA_ROPE_ATTN", "0", 60, "cuda-rope-attention-mixed"));
    setenv("OB_CUDA_ATTN_GQA", "1", 1);
    setenv("OB_CUDA_ATTN_GQA_ROPE", "1", 1);
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_ROPE_ATTN", "0", 100, "cuda-rope-attention-grouped"));
    CHECK(ob_test_same_logits_mixed("bitnet", "tq2_0", "cuda", "OB_CUDA_ROPE_ATTN", "0", 60, "cuda-rope-attention-grouped-mixed"));
    unsetenv("OB_CUDA_ATTN_GQA");
    unsetenv("OB_CUDA_ATTN_GQA_ROPE");
}

/* The engine with the decode attention's codes for `wo` (the default) and the quantizer's
 * (OB_CUDA_ATTN_CODES=0): the same logits, bit for bit (no random row lies on an int8 grid). Of
 * the golden models only qwen3 (head size 32) makes codes: llama's head size is 16 (not whole
 * 32-element blocks) and BitNet's sub-norm comes between (there the line only shows nothing
 * breaks); the kernel checks above take head sizes 32-128. */
static void test_attn_codes_engine(void) {
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_ATTN_CODES", "0", 100, "cuda-attn-codes"));
    CHECK(ob_test_same_logits("qwen3", "q8_0", "cuda", "OB_CUDA_ATTN_CODES", "0", 100, "cuda-attn-codes"));
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_ATTN_CODES", "0", 100, "cuda-attn-codes"));
    /* the attention's instances for the head size, with q in registers (the default) against the
     * general instance (OB_CUDA_ATTN_MK=0) and against those without (=1): the same bits too (both
     * models take the MK 1 instance; llama's NORM RoPE the register path) */
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_ATTN_MK", "0", 100, "cuda-attn-mk0"));
    CHECK(ob_test_same_logits("qwen3", "q8_0", "cuda", "OB_CUDA_ATTN_MK", "0", 100, "cuda-attn-mk0"));
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_ATTN_MK", "1", 100, "cuda-attn-mk"));
    CHECK(ob_test_same_logits("qwen3", "q8_0", "cuda", "OB_CUDA_ATTN_MK", "1", 100, "cuda-attn-mk"));
}

/* The engine with the one-token feed-forward kernel (the default on Hopper, b; threads' copies,
 * OB_CUDA_FFN=1, d) against the separate ops (OB_CUDA_FFN=0, a): logits within 1e-4 of their
 * scale (down's summation order); recorded steps against eager launches (OB_CUDA_GRAPH=0, c):
 * the same bits. */
static void test_ffn_engine(void) {
    char out[256];
    snprintf(out, sizeof out, "%s/cuda-ffn-llama.gguf", ob_test_tmpdir());
    char *argv[] = {"convert", "tests/golden/llama", "-o", out, "--type", "q4_0", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    ob_backend *gd = gpu_new();
    const int on = gd && ffn_mode(gd) != 0;
    gpu_free(gd);
    int nv[4] = {0, 0, 0, 0};
    float *a = ob_test_decode_two(out, "cuda", "OB_CUDA_FFN", "0", 60, &nv[0]);
    const long l = ffn_launches();
    float *b = ob_test_decode_two(out, "cuda", NULL, NULL, 60, &nv[1]);
    CHECK(on ? ffn_launches() > l : ffn_launches() == l);
    float *c = ob_test_decode_two(out, "cuda", "OB_CUDA_GRAPH", "0", 60, &nv[2]);
    const long l1 = ffn_launches();
    float *d = ob_test_decode_two(out, "cuda", "OB_CUDA_FFN", "1", 60, &nv[3]);
    CHECK(ffn_launches() > l1);
    CHECK(a && b && c && d && nv[0] == nv[1] && nv[0] == nv[2] && nv[0] == nv[3]);
    if (a && b && c && d && nv[0] == nv[1] && nv[0] == nv[2] && nv[0] == nv[3]) {
        const size_t n = (size_t)2 * 61 * nv[0];
        double scale = 1e-3;
        for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
        const double diff = max_abs_diff(a, b, n) / scale, diff1 = max_abs_diff(a, d, n) / scale, same = max_abs_diff(b, c, n);
        if (diff > 1e-4 || diff1 > 1e-4 || same != 0 || ob_test_verbose)
            fprintf(stderr, "  cuda-ffn llama/q4_0: |diff| / scale %.3g (default), %.3g (threads' copies) against the ops, %.3g recorded against eager\n",
                    diff, diff1, same);
        CHECK(diff <= 1e-4);
        CHECK(diff1 <= 1e-4);
        CHECK(same == 0);
    }
    free(a);
    free(b);
    free(c);
    free(d);
    remove(out);
}

/* The same for the kernel's ternary forms (BitNet's sub-norm and act_quant_i8), on random weights
 * of a 2-layer BitNet with rows of 2048 values (tests/configs/bitnet-wide.json: the tiny golden
 * model's rows are too short for them), tq2_0 and tq1_0: the forms (OB_CUDA_FFN_T=1) against the
 * separate ops (=0) within 5e-2 of the logits' scale, and recorded steps against eager launches
 * bit for bit. Why so loose: down's summation order moves x by ulps, and act_quant_i8 turns an
 * ulp at a rounding boundary into a code apart. Measured (run 34): 0.0236 on both types; on the
 * CPU, the same model with x scaled by 1 +- 1e-7 .. 1e-4 after every feed-forward block moves
 * 0.0056 .. 0.0101 (a few codes apart, whatever the size of the nudge). A wrong buffer, norm or
 * chunk moves the logits by their whole scale; the op's own test holds it to 2e-5. */
static void test_ffn_tern_engine(void) {
    ob_backend *gd = gpu_new();
    const int on = gd && ffn_mode(gd) == 2;
    gpu_free(gd);
    static const char *const types[2] = {"tq2_0", "tq1_0"};
    for (int i = 0; i < 2; i++) {
        char out[256];
        if (i == 1) setenv("OB_BACKEND_TQ1_AS_TQ2", "0", 1); /* (tq1_0's own form, not tq2_0's) */
        snprintf(out, sizeof out, "%s/cuda-ffn-%s.gguf", ob_test_tmpdir(), types[i]);
        char *argv[] = {"convert", "--random", "tests/configs/bitnet-wide.json", "-o", out, "--type", (char *)types[i], NULL};
        CHECK_EQ_INT(ob_cmd_convert(7, argv), 0);
        int nv[3] = {0, 0, 0};
        float *a = ob_test_decode_two(out, "cuda", "OB_CUDA_FFN_T", "0", 30, &nv[0]);
        const long l = ffn_launches();
        float *b = ob_test_decode_two(out, "cuda", "OB_CUDA_FFN_T", "1", 30, &nv[1]);
        CHECK(on ? ffn_launches() > l : ffn_launches() == l);
        setenv("OB_CUDA_FFN_T", "1", 1);
        float *c = ob_test_decode_two(out, "cuda", "OB_CUDA_GRAPH", "0", 30, &nv[2]);
        unsetenv("OB_CUDA_FFN_T");
        CHECK(a && b && c && nv[0] == nv[1] && nv[0] == nv[2]);
        if (a && b && c && nv[0] == nv[1] && nv[0] == nv[2]) {
            const size_t n = (size_t)2 * 31 * nv[0];
            char what[64];
            snprintf(what, sizeof what, "cuda-ffn bitnet-wide/%s against the ops", types[i]);
            CHECK(logits_near(b, a, n, 5e-2, what));
            const double same = max_abs_diff(b, c, n);
            if (same != 0 || ob_test_verbose) fprintf(stderr, "  cuda-ffn bitnet-wide/%s: %.3g recorded against eager\n", types[i], same);
            CHECK(same == 0);
        }
        free(a);
        free(b);
        free(c);
        remove(out);
        unsetenv("OB_BACKEND_TQ1_AS_TQ2");
    }
}

/* The engine with the decode GLU's codes for ffn_down (the default for q4_0, =2 for q8_0) and
 * the quantizer's (OB_CUDA_GLU_CODES=0): the same logits, bit for bit; BitNet's sub-norm comes
 * between, so its GLU makes none. With the feed-forward kernel off (OB_CUDA_FFN=0): it
 * takes llama's GLU steps. */
static void test_glu_codes_engine(void) {
    setenv("OB_CUDA_FFN", "0", 1); /* (the feed-forward kernel takes llama's GLU steps) */
    long made = glu_codes_made();
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_GLU_CODES", "0", 100, "cuda-glu-codes"));
    CHECK(glu_codes_made() > made); /* (the path ran: eager steps count, recorded replays do not) */
    made = glu_codes_made();
    setenv("OB_CUDA_GLU_CODES", "2", 1); /* (q8_0 gates: every type against none; unset by the second run) */
    CHECK(ob_test_same_logits("qwen3", "q8_0", "cuda", "OB_CUDA_GLU_CODES", "0", 100, "cuda-glu-codes"));
    unsetenv("OB_CUDA_GLU_CODES");
    CHECK(glu_codes_made() > made);
    made = glu_codes_made();
    setenv("OB_CUDA_GLU_CODES", "2", 1); /* (every type: none made all the same, the sub-norm comes between) */
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_GLU_CODES", "0", 100, "cuda-glu-codes"));
    unsetenv("OB_CUDA_GLU_CODES");
    CHECK(glu_codes_made() == made);
    unsetenv("OB_CUDA_FFN");
}

/* The engine with a step's RoPE angles computed once and read by the later layers (the default)
 * and computed by every layer (OB_CUDA_ANGLES=0): the same logits, bit for bit,
 * on the grouped attention's fused form (BitNet's head size 64; token by token with recorded
 * steps, and two-token steps of one and of two sequences alternating), and the later layers read
 * them. */
static void test_angles_engine(void) {
    setenv("OB_CUDA_ATTN_GQA", "1", 1);
    setenv("OB_CUDA_ATTN_GQA_ROPE", "1", 1);
    const long read = angles_read();
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_ANGLES", "0", 100, "cuda-angles"));
    CHECK(angles_read() > read); /* (eager steps count, recorded replays do not) */
    CHECK(ob_test_same_logits_mixed("bitnet", "tq2_0", "cuda", "OB_CUDA_ANGLES", "0", 60, "cuda-angles-mixed"));
    unsetenv("OB_CUDA_ATTN_GQA");
    unsetenv("OB_CUDA_ATTN_GQA_ROPE");
}

/* The engine with RMSNorm's weights read before the row kernel waits (the default) and after the
 * row's sum (OB_CUDA_ROWS_WPRE=0): the same logits, bit for bit. */
static void test_rows_wpre_engine(void) {
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_ROWS_WPRE", "0", 100, "cuda-rows-wpre"));
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_ROWS_WPRE", "0", 100, "cuda-rows-wpre"));
}

/* The engine with one token's f16 rows read in place (the default) and staged
 * (OB_CUDA_GV_DIRECT=0): the same logits, bit for bit. */
static void test_gv_direct_engine(void) {
    CHECK(ob_test_same_logits("llama", "f16", "cuda", "OB_CUDA_GV_DIRECT", "0", 100, "cuda-gv-direct"));
}

/* The engine with one token's int8 codes held in registers (the default) and without
 * (OB_CUDA_GV_HOLD=0): the same logits, bit for bit. */
static void test_gv_hold_engine(void) {
    CHECK(ob_test_same_logits("llama", "q4_0", "cuda", "OB_CUDA_GV_HOLD", "0", 100, "cuda-gv-hold"));
    CHECK(ob_test_same_logits("bitnet", "tq2_0", "cuda", "OB_CUDA_GV_HOLD", "0", 100, "cuda-gv-hold"));
}

/* The int8 sub-block decoders of the CUDA matmul, run on the host against the reference
 * dequantization (src/backend/cuda/cuda_q8_check.cu): needs a CUDA=1 build, not a GPU. */
OB_SUITE(cuda_host) {
#ifdef OB_CUDA
    char rep[2048];
    int bad = ob_cuda_q8_selftest(rep, sizeof rep);
    if (bad || ob_test_verbose) fprintf(stderr, "  cuda int8 decoders on the host: %s\n", rep);
    CHECK_EQ_INT(bad, 0);
#else
    fprintf(stderr, "  cuda_host: skipped: this build has no CUDA backend (make CUDA=1)\n");
#endif
}

OB_SUITE(cuda_golden) {
    ob_backend *g = gpu_new();
    if (!g) return;
    gpu_free(g);
    ob_test_golden_device("cuda");
    /* the tq1_0 and tq2_0 files' own kernels (by default their weights are i2_s here) */
    ob_test_golden_case("bitnet", "tq1_0", "cuda", "OB_BACKEND_TQ1_AS_TQ2", "0");
    ob_test_golden_case("bitnet", "tq2_0", "cuda", "OB_BACKEND_TQ2_AS_I2S", "0");
    ob_test_weight_as("cuda", 60, OB_TYPE_I2_S, OB_TYPE_I2_S);
    setenv("OB_BACKEND_TQ2_AS_I2S", "0", 1); /* (the engine tests below: the golden BitNet's tq2_0 in tq2_0) */
    test_graphs();
    test_mapped_logits();
    test_copy_drops_recordings();
    test_layer_engine();
    test_rope_attention_engine();
    test_rows_wpre_engine();
    test_gv_hold_engine();
    test_gv_direct_engine();
    test_attn_codes_engine();
    test_glu_codes_engine();
    test_ffn_engine();
    test_ffn_tern_engine();
    test_angles_engine();
    test_grouped_engine();
    unsetenv("OB_BACKEND_TQ2_AS_I2S");
}

/* Device names: cpu, cuda, auto (cuda only when built with it and a usable GPU is present),
 * anything else refused with a message; a model loaded with "auto" reports what it resolved to. */
OB_SUITE(device_select) {
    char err[256] = "";
    ob_backend *b = ob_backend_by_name("auto", err, sizeof err);
    CHECK(b != NULL);
    if (b) {
#ifdef OB_CUDA
        CHECK_STR(b->name, ob_backend_cuda_usable() ? "cuda" : "cpu");
#else
        CHECK_STR(b->name, "cpu");
#endif
        free(b);
    }
    CHECK(ob_backend_by_name("tpu", err, sizeof err) == NULL);
    CHECK(strstr(err, "unknown device 'tpu'") != NULL);
#ifndef OB_CUDA
    CHECK(ob_backend_by_name("cuda", err, sizeof err) == NULL);
    CHECK(strstr(err, "make CUDA=1") != NULL);
#endif
    if (!ob_has_default_model()) return;
    ob_model_params mp = ob_model_default_params();
    mp.device = "auto";
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(OB_DEFAULT_MODEL, &mp, &m, err, sizeof err), 0);
    if (m) {
        const char *dev = ob_model_get_info(m)->device;
        CHECK(dev && (!strcmp(dev, "cpu") || !strcmp(dev, "cuda")));
        ob_model_free(m);
    }
}
