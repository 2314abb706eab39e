/* test_kernels.c — the CPU kernel tables against the reference routines and against each other.
 *
 * For every weight type with kernels, on random shapes with ragged edges (rows not a multiple of
 * the panel width or thread count, odd block counts, 1..n tokens) and on both quantized random
 * weights and random bytes (every code, including ones no quantizer writes):
 *  - the block decoders rebuild exactly what format/quant_ref*.c's to_float returns;
 *  - the scalar table's quantized activations are within half a step of the input, and a row
 *    already on an int8 grid (BitNet's act_quant_i8) is reproduced exactly;
 *  - the scalar table's matmul equals the exact dot product of the dequantized weights with the
 *    quantized activations up to float rounding (integer sums are exact);
 *  - every other table this CPU runs (AVX2, AVX-VNNI, AVX-512) produces the same bits as the
 *    scalar one: activations, decode (gemv) and prompt (packed gemm) kernels alike, and the
 *    gemm equals the gemv (a prompt and a decode step give the same logits).
 * Float weights (f32, f16, bf16) and the attention helpers likewise.
 * Suite kv_cache: the whole forward pass with f16 and q8_0 KV caches against an f32 cache, a
 * prompt against token-by-token decoding, and the fast CPU path against the reference one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn_tile.h"
#include "backend/cpu/kernels.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

static uint64_t rnext(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float runi(uint64_t *s) { return (float)(rnext(s) >> 40) / 16777216.0f * 2.0f - 1.0f; }
static float rnorm(uint64_t *s) { return (runi(s) + runi(s) + runi(s) + runi(s)) * 0.866f; }

static void *amalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64)) return NULL;
    return p;
}

/* Byte offsets of the fp16 scales inside one block of each type (random-byte weights get
 * finite scales there). */
static int scale_offsets(int type, int off[2]) {
    switch (type) {
    case OB_TYPE_Q8_0: case OB_TYPE_Q4_0: off[0] = 0; return 1;
    case OB_TYPE_TQ2_0: off[0] = 64; return 1;
    case OB_TYPE_TQ1_0: off[0] = 52; return 1;
    case OB_TYPE_Q4_K: case OB_TYPE_Q5_K: off[0] = 0; off[1] = 2; return 2;
    case OB_TYPE_Q6_K: off[0] = 208; return 1;
    case OB_TYPE_Q4_1: case OB_TYPE_Q5_1: off[0] = 0; off[1] = 2; return 2;
    case OB_TYPE_Q5_0: case OB_TYPE_IQ4_NL: case OB_TYPE_IQ4_XS: off[0] = 0; return 1;
    case OB_TYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case OB_TYPE_Q3_K: off[0] = 108; return 1;
    default: return 0; /* mxfp4: any exponent byte is a finite scale */
    }
}

/* A weight of type with n_out rows of n_in. bytes: random bytes with finite scales; else the
 * reference quantization of random floats. deq: [n_out][n_in] the reference dequantization. */
static void *make_weight(int type, int64_t n_in, int64_t n_out, int bytes, uint64_t *rs, ob_weight *w, float *deq) {
    const ob_type_traits *tt = ob_type_get(type);
    size_t rowb = ob_type_row_size(type, n_in), total = ob_type_tensor_size(type, n_in, n_out);
    uint8_t *data = amalloc(total + 64);
    float *src = malloc((size_t)(n_in * n_out) * sizeof(float));
    for (int64_t i = 0; i < n_in * n_out; i++) src[i] = rnorm(rs) * 0.05f;
    if (bytes) {
        for (size_t i = 0; i < total; i++) data[i] = (uint8_t)rnext(rs);
        if (type == OB_TYPE_MXFP4) /* e8m0 exponents: keep 2^(e - 128) near 2^-6 */
            for (size_t i = 0; i < total; i += 17) data[i] = (uint8_t)(116 + rnext(rs) % 8);
        int off[2], no = scale_offsets(type, off);
        for (int64_t r = 0; r < n_out; r++)
            for (int64_t b = 0; b < n_in / tt->block_size; b++)
                for (int j = 0; j < no; j++) {
                    uint16_t h = ob_fp32_to_fp16(runi(rs) * 0.01f);
                    uint8_t *p = data + r * rowb + b * tt->type_size + off[j];
                    p[0] = (uint8_t)h;
                    p[1] = (uint8_t)(h >> 8);
                }
    } else {
        ob_tensor_quantize(type, src, data, n_in, n_out);
    }
    *w = (ob_weight){data, type, n_in, n_out, rowb, 1.0f};
    if (type == OB_TYPE_I2_S) w->scale = bytes ? 0.75f : ob_tensor_scale(type, data, n_in, n_out);
    for (int64_t r = 0; r < n_out; r++) {
        tt->to_float(data + r * rowb, deq + r * n_in, n_in);
        if (w->scale != 1.0f)
            for (int64_t i = 0; i < n_in; i++) deq[r * n_in + i] *= w->scale;
    }
    free(src);
    return data;
}

/* Activations: random rows, and (on_grid) rows of BitNet's act_quant_i8 form q / s. */
static void make_acts(float *x, int n, int64_t k, int on_grid, uint64_t *rs) {
    for (int t = 0; t < n; t++) {
        float *xi = x + (size_t)t * k;
        for (int64_t i = 0; i < k; i++) xi[i] = rnorm(rs) * (i % 17 == 3 ? 8.0f : 1.0f);
        if (!on_grid) continue;
        float mx = 0;
        for (int64_t i = 0; i < k; i++) mx = fmaxf(mx, fabsf(xi[i]));
        float s = (1.0f / mx) * 127.0f;
        for (int64_t i = 0; i < k; i++) xi[i] = nearbyintf(xi[i] * s) / s;
    }
}

static int tables(const ob_kernels *out[5]) {
    int n = 0;
    const ob_kernels *all[] = {ob_kernels_avx2(), ob_kernels_avxvnni(), ob_kernels_avx512(), ob_kernels_amx()};
    for (int i = 0; i < 4; i++)
        if (all[i]) out[n++] = all[i];
    return n;
}

/* ---- decoders ------------------------------------------------------------------------------- */

static const int itypes[] = {OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_TQ2_0, OB_TYPE_TQ1_0, OB_TYPE_I2_S, OB_TYPE_Q4_K,
                             OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_IQ4_NL,
                             OB_TYPE_MXFP4, OB_TYPE_IQ4_XS, OB_TYPE_Q2_K, OB_TYPE_Q3_K};
#define N_ITYPES (int)(sizeof itypes / sizeof itypes[0])

static void test_decoders(uint64_t *rs) {
    for (int ti = 0; ti < N_ITYPES; ti++) {
        int type = itypes[ti];
        const ob_kfmt *f = ob_kfmt_get(type);
        ob_kdec_fn dec = ob_kdec_get(type);
        int64_t n_in = 4 * ob_type_get(type)->block_size;
        float deq[4 * 256];
        ob_weight w;
        int bad = 0;
        for (int bytes = 0; bytes < 2; bytes++) {
            void *data = make_weight(type, n_in, 1, bytes, rs, &w, deq);
            for (int64_t b = 0; b < n_in / f->qb; b++) {
                uint8_t codes[256];
                int32_t sc[16], mn[16];
                float dw = 0, dm = 0;
                for (int j = 0; j < 16; j++) sc[j] = 1, mn[j] = 0;
                dec(data, b, codes, sc, mn, &dw, &dm);
                for (int e = 0; e < f->qb; e++) {
                    int j = e / f->sb;
                    float v = f->has_sc ? (dw * (float)sc[j]) * (float)(codes[e] - f->off) : (float)(codes[e] - f->off) * dw;
                    if (f->has_mn) v = v - (-dm) * (float)mn[j];
                    v *= w.scale;
                    if (memcmp(&v, &deq[b * f->qb + e], 4) != 0 && v != deq[b * f->qb + e]) bad++;
                }
            }
            free(data);
        }
        if (bad) fprintf(stderr, "  kernels: %s decoder differs from the reference at %d values\n", ob_type_name(type), bad);
        CHECK_EQ_INT(bad, 0);
    }
}

/* ---- activation quantizer -------------------------------------------------------------------- */

static void test_quant(uint64_t *rs) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd);
    static const int fmts[] = {OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_TQ2_0, OB_TYPE_I2_S, OB_TYPE_Q4_K, OB_TYPE_Q6_K, OB_TYPE_Q4_1};
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        const ob_kfmt *f = ob_kfmt_get(fmts[fi]);
        for (int on_grid = 0; on_grid < 2; on_grid++) {
            int64_t k = f->qb * (1 + (int64_t)(rnext(rs) % 5));
            float *x = malloc((size_t)k * sizeof(float));
            make_acts(x, 1, k, on_grid, rs);
            if (on_grid == 0 && k > f->qb) memset(x, 0, (size_t)f->qb * sizeof(float)); /* an all-zero block */
            size_t bytes = ob_q8act_bytes(1, k, f);
            void *m0 = amalloc(bytes), *m1 = amalloc(bytes);
            memset(m0, 0, bytes);
            ob_q8act a0, a1;
            ob_q8act_init(&a0, m0, 1, k, f);
            sc->quant_row(x, k, f, a0.qs, a0.d, a0.ac);
            double worst = 0;
            for (int64_t i = 0; i < k; i++) {
                float d = a0.d[i / f->qb];
                double e = fabs((double)x[i] - (double)a0.qs[i] * d);
                double lim = on_grid ? 1e-6 * fabs(x[i]) + 1e-30 : 0.5 * d * (1 + 1e-5);
                if (e > lim && e - lim > worst) worst = e - lim;
            }
            CHECK(worst == 0);
            for (int64_t j = 0; j < k / f->sb; j++) {
                int32_t s = 0;
                for (int e = 0; e < f->sb; e++) s += a0.qs[j * f->sb + e];
                CHECK_EQ_INT(a0.ac[j], f->off ? -f->off * s : s);
            }
            for (int i = 0; i < ns; i++) {
                memset(m1, 0x55, bytes);
                ob_q8act_init(&a1, m1, 1, k, f);
                simd[i]->quant_row(x, k, f, a1.qs, a1.d, a1.ac);
                int same = !memcmp(a0.qs, a1.qs, (size_t)k) && !memcmp(a0.d, a1.d, (size_t)(k / f->qb) * 4) &&
                           !memcmp(a0.ac, a1.ac, (size_t)(k / f->sb) * 4);
                if (!same) fprintf(stderr, "  kernels: %s quant_row differs from scalar (qb %d, grid %d)\n", simd[i]->name, f->qb, on_grid);
                CHECK(same);
            }
            free(m0);
            free(m1);
            free(x);
        }
    }
}

/* ---- integer matmul -------------------------------------------------------------------------- */

static int run_gemm(const ob_kernels *kt, const ob_weight *w, const ob_q8act *a, int n, float *y) {
    const ob_kfmt *f = ob_kfmt_get(w->type);
    size_t pb = ob_panel_bytes(w->n_in, kt->R, f);
    int np = (int)((w->n_out + kt->R - 1) / kt->R);
    uint8_t *pm = amalloc(pb * (size_t)np);
    ob_panel p[8];
    for (int i = 0; i < np && i < 8; i++) {
        ob_panel_init(&p[i], pm + pb * (size_t)i, w->n_in, kt->R, f);
        p[i].nr = (int)(w->n_out - (int64_t)i * kt->R < kt->R ? w->n_out - (int64_t)i * kt->R : kt->R);
        kt->pack[w->type](w, (int64_t)i * kt->R, &p[i]);
    }
    int mid = n / 2; /* two token ranges, to exercise every tile width */
    for (int r = 0; r < 2; r++) {
        int t0 = r ? mid : 0, t1 = r ? n : mid;
        float *yt = y + (size_t)t0 * w->n_out;
        if (kt->gemm_np && r == 1) {
            kt->gemm_np(f, p, np, a, t0, t1, yt, w->n_out);
        } else {
            for (int i = 0; i < np; i++) kt->gemm(f, &p[i], a, t0, t1, yt + (size_t)i * kt->R, w->n_out);
        }
    }
    free(pm);
    return 0;
}

static void test_int_matmul(uint64_t *rs) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd);
    int n_cases = 0, n_bad_ref = 0, n_bad_gemm = 0, n_bad_simd = 0;
    for (int ti = 0; ti < N_ITYPES; ti++) {
        int type = itypes[ti];
        const ob_kfmt *f = ob_kfmt_get(type);
        for (int rep = 0; rep < 6; rep++) {
            int bs = ob_type_get(type)->block_size;
            int64_t nblk = 1 + (int64_t)(rnext(rs) % (bs >= 256 ? 4 : bs == 128 ? 7 : 11));
            int64_t n_in = nblk * bs;
            static const int64_t outs[] = {1, 7, 16, 17, 33, 40};
            int64_t n_out = outs[rep];
            int n = rep < 4 ? 1 + (int)(rnext(rs) % 13) : 32 + (int)(rnext(rs) % 24); /* AMX: groups of 16 */
            int bytes = rep & 1, on_grid = rep % 3 == 2;
            float *deq = malloc((size_t)(n_in * n_out) * sizeof(float));
            ob_weight w;
            void *data = make_weight(type, n_in, n_out, bytes, rs, &w, deq);
            float *x = malloc((size_t)(n * n_in) * sizeof(float));
            make_acts(x, n, n_in, on_grid, rs);
            size_t ab = ob_q8act_bytes(n, n_in, f);
            void *am = amalloc(ab);
            ob_q8act a;
            ob_q8act_init(&a, am, n, n_in, f);
            for (int t = 0; t < n; t++)
                sc->quant_row(x + t * n_in, n_in, f, a.qs + t * n_in, a.d + t * (n_in / f->qb), a.ac + t * (n_in / f->sb));
            size_t ny = (size_t)(n * n_out);
            float *y0 = malloc(ny * 4), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
            for (int t = 0; t < n; t++) sc->gemv[type](&w, 0, n_out, &a, t, y0 + t * n_out);
            /* against the exact dot product of the reference weights and the quantized activations */
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < n_out; r++) {
                    double s = 0, mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        double xq = (double)a.qs[t * n_in + i] * a.d[t * (n_in / f->qb) + i / f->qb];
                        s += (double)deq[r * n_in + i] * xq;
                        mag += fabs((double)deq[r * n_in + i] * xq);
                    }
                    if (fabs(y0[t * n_out + r] - s) > 2e-6 * mag + 1e-30) {
                        if (!n_bad_ref) fprintf(stderr, "  kernels: %s scalar gemv %g, exact %g (n_in %lld)\n", ob_type_name(type), y0[t * n_out + r], s, (long long)n_in);
                        n_bad_ref++;
                    }
                    /* and, loosely, against the float activations */
                    double sx = 0, lim = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        sx += (double)deq[r * n_in + i] * x[t * n_in + i];
                        lim += fabs((double)deq[r * n_in + i]) * 0.5 * a.d[t * (n_in / f->qb) + i / f->qb];
                    }
                    if (fabs(y0[t * n_out + r] - sx) > lim * 1.001 + 2e-6 * mag + 1e-30) n_bad_ref++;
                }
            run_gemm(sc, &w, &a, n, y1);
            if (memcmp(y0, y1, ny * 4)) {
                fprintf(stderr, "  kernels: %s scalar gemm differs from gemv\n", ob_type_name(type));
                n_bad_gemm++;
            }
            for (int i = 0; i < ns; i++) {
                memset(y2, 0, ny * 4);
                for (int t = 0; t < n; t++) {
                    /* split the rows like two threads with a ragged boundary */
                    int64_t mid = n_out / 3;
                    simd[i]->gemv[type](&w, 0, mid, &a, t, y2 + t * n_out);
                    simd[i]->gemv[type](&w, mid, n_out, &a, t, y2 + t * n_out + mid);
                }
                if (memcmp(y0, y2, ny * 4)) {
                    fprintf(stderr, "  kernels: %s %s gemv differs from scalar (n_in %lld n_out %lld bytes %d grid %d)\n",
                            simd[i]->name, ob_type_name(type), (long long)n_in, (long long)n_out, bytes, on_grid);
                    n_bad_simd++;
                }
                memset(y2, 0, ny * 4);
                run_gemm(simd[i], &w, &a, n, y2);
                if (memcmp(y0, y2, ny * 4)) {
                    fprintf(stderr, "  kernels: %s %s gemm differs from scalar (n_in %lld n_out %lld n %d)\n", simd[i]->name,
                            ob_type_name(type), (long long)n_in, (long long)n_out, n);
                    n_bad_simd++;
                }
            }
            n_cases++;
            free(y0), free(y1), free(y2), free(am), free(x), free(data), free(deq);
        }
    }
    CHECK_EQ_INT(n_bad_ref, 0);
    CHECK_EQ_INT(n_bad_gemm, 0);
    CHECK_EQ_INT(n_bad_simd, 0);
    CHECK(n_cases == N_ITYPES * 6);
}

/* Decode kernels at the bounds of their integer sums: every code byte the same (0x00, 0x55, 0x80,
 * 0xAA, 0xFF: largest codes, scales, mins, q6_K's scale -128, all fifth bits) with finite block
 * scales, times activations at +-127 (rows on the int8 grid: +1, -1, alternating in runs). The
 * 16-bit and 32-bit partial sums of the SIMD tables must stay exact: equal to scalar bit for bit. */
static void test_int_extremes(void) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd), n_bad = 0, n_cases = 0;
    static const uint8_t fills[] = {0x00, 0x55, 0x80, 0xAA, 0xFF};
    for (int ti = 0; ti < N_ITYPES; ti++) {
        const int type = itypes[ti];
        const ob_kfmt *f = ob_kfmt_get(type);
        const ob_type_traits *tt = ob_type_get(type);
        const int64_t n_in = 2 * (tt->block_size >= 256 ? tt->block_size : 256), n_out = 17;
        const size_t rowb = ob_type_row_size(type, n_in), total = ob_type_tensor_size(type, n_in, n_out);
        uint8_t *data = amalloc(total + 64);
        float *x = malloc((size_t)(3 * n_in) * sizeof(float));
        for (int64_t i = 0; i < n_in; i++) {
            x[i] = 1.0f;
            x[n_in + i] = -1.0f;
            x[2 * n_in + i] = (i / 5) % 2 ? 1.0f : -1.0f;
        }
        void *am = amalloc(ob_q8act_bytes(3, n_in, f));
        ob_q8act a;
        ob_q8act_init(&a, am, 3, n_in, f);
        for (int t = 0; t < 3; t++)
            sc->quant_row(x + t * n_in, n_in, f, a.qs + t * n_in, a.d + t * (n_in / f->qb), a.ac + t * (n_in / f->sb));
        float y0[3 * 17], y1[3 * 17];
        for (size_t fi = 0; fi < sizeof fills; fi++) {
            memset(data, fills[fi], total);
            int off[2], no = scale_offsets(type, off);
            if (type == OB_TYPE_MXFP4)
                for (size_t i = 0; i < total; i += 17) data[i] = 127;
            for (int64_t r = 0; r < n_out; r++)
                for (int64_t b = 0; b < n_in / tt->block_size; b++)
                    for (int j = 0; j < no; j++) {
                        uint16_t h = ob_fp32_to_fp16(j ? 0.25f : 0.5f + 0.125f * (float)(r % 5));
                        uint8_t *p = data + r * rowb + b * tt->type_size + off[j];
                        p[0] = (uint8_t)h;
                        p[1] = (uint8_t)(h >> 8);
                    }
            ob_weight w = {data, type, n_in, n_out, rowb, 1.0f};
            for (int t = 0; t < 3; t++) sc->gemv[type](&w, 0, n_out, &a, t, y0 + t * n_out);
            for (int i = 0; i < ns; i++) {
                for (int t = 0; t < 3; t++) simd[i]->gemv[type](&w, 0, n_out, &a, t, y1 + t * n_out);
                if (memcmp(y0, y1, sizeof y0)) {
                    fprintf(stderr, "  kernels: %s %s gemv differs from scalar on bytes 0x%02x\n", simd[i]->name,
                            ob_type_name(type), fills[fi]);
                    n_bad++;
                }
            }
            n_cases++;
        }
        free(am), free(x), free(data);
    }
    CHECK_EQ_INT(n_bad, 0);
    CHECK(n_cases == N_ITYPES * 5);
}

/* ---- float matmul ---------------------------------------------------------------------------- */

static void test_float_matmul(uint64_t *rs) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd);
    static const int ftypes[] = {OB_TYPE_F32, OB_TYPE_F16, OB_TYPE_BF16};
    int bad_ref = 0, bad_simd = 0;
    for (size_t fi = 0; fi < 3; fi++)
        for (int rep = 0; rep < 4; rep++) {
            int type = ftypes[fi];
            int64_t n_in = 1 + (int64_t)(rnext(rs) % 300), n_out = 1 + (int64_t)(rnext(rs) % 23);
            int n = 1 + (int)(rnext(rs) % 14);
            float *deq = malloc((size_t)(n_in * n_out) * 4);
            ob_weight w;
            void *data = make_weight(type, n_in, n_out, 0, rs, &w, deq);
            float *x = malloc((size_t)(n * n_in) * 4), *wb = malloc((size_t)OB_KWBUF(n_in) * sizeof(float));
            make_acts(x, n, n_in, 0, rs);
            size_t ny = (size_t)(n * n_out);
            float *y0 = malloc(ny * 4), *y1 = malloc(ny * 4);
            sc->gemm_f[type](&w, 0, n_out, x, n, y0, n_out, wb);
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < n_out; r++) {
                    double s = 0, mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        s += (double)deq[r * n_in + i] * x[t * n_in + i];
                        mag += fabs((double)deq[r * n_in + i] * x[t * n_in + i]);
                    }
                    if (fabs(y0[t * n_out + r] - s) > 1e-6 * mag + 1e-30) bad_ref++;
                }
            for (int i = 0; i < ns; i++) {
                int64_t mid = n_out / 2;
                simd[i]->gemm_f[type](&w, 0, mid, x, n, y1, n_out, wb);
                simd[i]->gemm_f[type](&w, mid, n_out, x, n, y1 + mid, n_out, wb);
                if (memcmp(y0, y1, ny * 4)) {
                    fprintf(stderr, "  kernels: %s %s gemm_f differs from scalar (n_in %lld)\n", simd[i]->name, ob_type_name(type), (long long)n_in);
                    bad_simd++;
                }
            }
            free(y0), free(y1), free(x), free(wb), free(data), free(deq);
        }
    CHECK_EQ_INT(bad_ref, 0);
    CHECK_EQ_INT(bad_simd, 0);
}

/* ---- attention helpers ----------------------------------------------------------------------- */

static void test_helpers(uint64_t *rs) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd);
    for (int rep = 0; rep < 5; rep++) {
        int64_t n = 1 + (int64_t)(rnext(rs) % 200);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *y0 = malloc((size_t)n * 4), *y1 = malloc((size_t)n * 4);
        uint16_t *h0 = malloc((size_t)n * 2), *h1 = malloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) a[i] = rnorm(rs), b[i] = rnorm(rs), y0[i] = y1[i] = rnorm(rs);
        sc->f32_to_f16(b, h0, n);
        int ok = 1;
        for (int64_t i = 0; i < n; i++) ok &= h0[i] == ob_fp32_to_fp16(b[i]);
        CHECK(ok);
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
        CHECK(fabs(sc->dot_f32(a, b, n) - s) < 1e-4);
        for (int i = 0; i < ns; i++) {
            simd[i]->f32_to_f16(b, h1, n);
            CHECK(!memcmp(h0, h1, (size_t)n * 2));
            float f0 = sc->dot_f32(a, b, n), f1 = simd[i]->dot_f32(a, b, n);
            CHECK(!memcmp(&f0, &f1, 4));
            f0 = sc->dot_f16(a, h0, n), f1 = simd[i]->dot_f16(a, h0, n);
            CHECK(!memcmp(&f0, &f1, 4));
            memcpy(y1, y0, (size_t)n * 4);
            float *z0 = malloc((size_t)n * 4);
            memcpy(z0, y0, (size_t)n * 4);
            sc->axpy(z0, 0.37f, a, n);
            simd[i]->axpy(y1, 0.37f, a, n);
            CHECK(!memcmp(z0, y1, (size_t)n * 4));
            memcpy(z0, y0, (size_t)n * 4);
            memcpy(y1, y0, (size_t)n * 4);
            sc->axpy_f16(z0, -1.5f, h0, n);
            simd[i]->axpy_f16(y1, -1.5f, h0, n);
            CHECK(!memcmp(z0, y1, (size_t)n * 4));
            sc->f16_to_f32(h0, z0, n);
            simd[i]->f16_to_f32(h0, y1, n);
            CHECK(!memcmp(z0, y1, (size_t)n * 4));
            free(z0);
        }
        free(a), free(b), free(y0), free(y1), free(h0), free(h1);
    }
}

/* ---- tiled attention loops: every table's version gives the scalar bits, scores near exact ----
 * Each call takes 1..OB_ATTN_NQ queries; every query must get the bits the scalar loop gives it
 * alone. */

static void test_attn_tile(uint64_t *rs) {
    const ob_kernels *simd[5];
    int ns = tables(simd);
    const ob_attn_tile *sc = ob_attn_tile_scalar();
    enum { LDK = 64, NQ = OB_ATTN_NQ };
    for (int rep = 0; rep < 60; rep++) {
        int hd = 1 + (int)(rnext(rs) % 150), nk = 1 + (int)(rnext(rs) % LDK), nq = 1 + (int)(rnext(rs) % NQ);
        if (rep % 4 == 0) hd = 128, nk = rep % 8 ? LDK : nk; /* the shapes the models use */
        float *kf = malloc((size_t)LDK * hd * 4), *k0 = malloc((size_t)LDK * hd * 4), *k1 = malloc((size_t)LDK * hd * 4);
        float *q = malloc((size_t)NQ * hd * 4), *o0 = malloc((size_t)NQ * hd * 4), *o1 = malloc((size_t)NQ * hd * 4);
        float *o2 = malloc((size_t)NQ * hd * 4);
        float s0[NQ][LDK], s1[NQ][LDK], p[NQ][LDK], m0[NQ], m1[NQ];
        const float *qp[NQ];
        for (int i = 0; i < LDK * hd; i++) kf[i] = rnorm(rs), k0[i] = k1[i] = 0;
        for (int d = 0; d < NQ * hd; d++) q[d] = rnorm(rs), o0[d] = rnorm(rs);
        for (int i = 0; i < NQ; i++) {
            qp[i] = q + (size_t)i * hd, m0[i] = m1[i] = i == 1 ? 3.0f : -INFINITY;
            for (int k = 0; k < LDK; k++) p[i][k] = (float)(rnext(rs) % 1000) / 1000.0f;
        }
        sc->transpose(kf, nk, hd, k0, LDK);
        int ok = 1;
        for (int k = 0; k < nk; k++)
            for (int d = 0; d < hd; d++) ok &= k0[(size_t)d * LDK + k] == kf[(size_t)k * hd + d];
        CHECK(ok);
        memcpy(o1, o0, (size_t)NQ * hd * 4);
        for (int i = 0; i < nq; i++) { /* the scalar loops, one query per call */
            float mref = m0[i];
            sc->scores(k0, LDK, qp + i, 1, hd, nk, 0.125f, s0[i], LDK, &m0[i]);
            ok = 1;
            for (int k = 0; k < nk; k++) {
                double e = 0;
                for (int d = 0; d < hd; d++) e += (double)qp[i][d] * kf[(size_t)k * hd + d];
                ok &= fabs(s0[i][k] - e * 0.125) < 1e-4 * (1 + sqrt(hd));
                mref = s0[i][k] > mref ? s0[i][k] : mref;
            }
            CHECK(ok);
            CHECK(m0[i] == mref);
            sc->pv(o0 + (size_t)i * hd, p[i], LDK, 1, kf, nk, hd);
        }
        for (int i = 0; i < ns; i++) {
            const ob_attn_tile *t = ob_attn_tile_for(simd[i]->name);
            memset(k1, 0, (size_t)LDK * hd * 4);
            t->transpose(kf, nk, hd, k1, LDK);
            CHECK(!memcmp(k0, k1, (size_t)LDK * hd * 4));
            float mx[NQ];
            memcpy(mx, m1, sizeof mx);
            t->scores(k0, LDK, qp, nq, hd, nk, 0.125f, s1[0], LDK, mx);
            for (int j = 0; j < nq; j++) CHECK(!memcmp(s0[j], s1[j], (size_t)nk * 4) && !memcmp(&m0[j], &mx[j], 4));
            memcpy(o2, o1, (size_t)NQ * hd * 4);
            t->pv(o2, p[0], LDK, nq, kf, nk, hd);
            CHECK(!memcmp(o0, o2, (size_t)nq * hd * 4));
            CHECK(!memcmp(o1 + (size_t)nq * hd, o2 + (size_t)nq * hd, (size_t)(NQ - nq) * hd * 4)); /* others untouched */
        }
        free(kf), free(k0), free(k1), free(q), free(o0), free(o1), free(o2);
    }
    /* the exponential: near exp over its range, 0 below it; every table's softmax the scalar bits */
    int bad = 0;
    for (int i = 0; i <= 100000; i++) {
        float x = -90.0f * (float)i / 100000, e = ob_attn_exp(x);
        double r = exp((double)x);
        bad += x < -87.3f ? e != 0 : fabs(e - r) > 2.5e-7 * r;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(ob_attn_exp(0) == 1.0f && ob_attn_exp(-INFINITY) == 0);
    for (int rep = 0; rep < 20; rep++) {
        int n = 1 + (int)(rnext(rs) % 64);
        float s0[64], s1[64], mx = rnorm(rs);
        for (int k = 0; k < n; k++) s0[k] = mx - fabsf(rnorm(rs)) * (rep % 4 == 0 ? 40 : 4);
        memcpy(s1, s0, sizeof s0);
        float sum0 = sc->softmax(s0, n, mx), ref = 0;
        for (int k = 0; k < n; k++) ref += s0[k];
        CHECK(fabsf(sum0 - ref) <= 1e-5f * ref);
        for (int i = 0; i < ns; i++) {
            float s2[64];
            memcpy(s2, s1, sizeof s1);
            float sum1 = ob_attn_tile_for(simd[i]->name)->softmax(s2, n, mx);
            CHECK(!memcmp(s0, s2, (size_t)n * 4) && !memcmp(&sum0, &sum1, 4));
        }
    }
}

/* ---- row ops: act_quant, relu2, add exact; rmsnorm and SiLU within float rounding ---------- */

static void test_row_ops(uint64_t *rs) {
    const ob_kernels *sc = ob_kernels_scalar(), *simd[5];
    int ns = tables(simd);
    for (int rep = 0; rep < 6; rep++) {
        int dim = 1 + (int)(rnext(rs) % 300);
        size_t nb = (size_t)dim * 4;
        float *x = malloc(nb), *w = malloc(nb), *u = malloc(nb), *y0 = malloc(nb), *y1 = malloc(nb);
        for (int i = 0; i < dim; i++) x[i] = rnorm(rs) * (rep == 5 ? 40.0f : 2.0f), w[i] = rnorm(rs), u[i] = rnorm(rs);
        for (int i = 0; i < ns; i++) {
            const ob_kernels *k = simd[i];
            int bad = 0;
            sc->rms_row(x, rep & 1 ? NULL : w, y0, dim, 1e-5f);
            k->rms_row(x, rep & 1 ? NULL : w, y1, dim, 1e-5f);
            for (int e = 0; e < dim; e++) bad += fabsf(y0[e] - y1[e]) > 2.5e-7f * fabsf(y0[e]);
            memcpy(y0, x, nb), memcpy(y1, x, nb);
            sc->aq_row(y0, dim), k->aq_row(y1, dim);
            bad += memcmp(y0, y1, nb) != 0;
            for (int act = 0; act < 2; act++) {
                memcpy(y0, x, nb), memcpy(y1, x, nb);
                sc->glu(act, y0, u, dim), k->glu(act, y1, u, dim);
                for (int e = 0; e < dim; e++) bad += act ? y0[e] != y1[e] : fabsf(y0[e] - y1[e]) > 1e-6f * fabsf(y0[e]) + 1e-30f;
            }
            memcpy(y0, x, nb), memcpy(y1, x, nb);
            sc->add(y0, u, dim), k->add(y1, u, dim);
            bad += memcmp(y0, y1, nb) != 0;
            if (bad) fprintf(stderr, "  kernels: %s row ops differ from scalar (dim %d): %d\n", k->name, dim, bad);
            CHECK_EQ_INT(bad, 0);
        }
        free(x), free(w), free(u), free(y0), free(y1);
    }
}

OB_SUITE(kernels) {
    uint64_t rs = 0x243F6A8885A308D3ull;
    const ob_kernels *simd[5];
    int ns = tables(simd);
    if (ob_test_verbose) {
        fprintf(stderr, "  kernels: scalar");
        for (int i = 0; i < ns; i++) fprintf(stderr, ", %s", simd[i]->name);
        fprintf(stderr, " (best: %s)\n", ob_kernels_best()->name);
    }
    test_decoders(&rs);
    test_quant(&rs);
    test_int_matmul(&rs);
    test_int_extremes();
    test_float_matmul(&rs);
    test_helpers(&rs);
    test_row_ops(&rs);
    test_attn_tile(&rs);
}

/* ---- KV cache types through the engine ------------------------------------------------------- */

static ob_model_t *load_model(const char *arch, const char *type, int reference) {
    char dir[128], path[256], err[512];
    snprintf(dir, sizeof dir, "tests/golden/%s", arch);
    snprintf(path, sizeof path, "%s/kv-%s-%s.gguf", ob_test_tmpdir(), arch, type);
    char *argv[] = {"convert", dir, "-o", path, "--type", (char *)type, NULL};
    if (ob_cmd_convert(6, argv) != 0) return NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    if (reference) setenv("OB_CPU_KERNELS", "reference", 1);
    ob_model_t *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof err)) fprintf(stderr, "  kv_cache: %s\n", err);
    if (reference) unsetenv("OB_CPU_KERNELS");
    remove(path);
    return m;
}

static const int32_t kv_tok[24] = {318, 302, 220, 80, 84, 72, 66, 74, 268, 278, 296, 272, 78, 87, 220, 73, 84, 76, 79, 82, 266, 305, 259, 286};

/* Logits of the 24 tokens [24][V]: one batch, or (incremental) 12 as a prompt then one at a time
 * (row i then holds the logits after token i, rows 0..10 left from the prompt's last row). */
static int run_tokens(ob_model_t *m, int kv, int incremental, float *out) {
    int V = ob_model_get_info(m)->n_vocab, n = 24;
    char err[512];
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = 32;
    cp.n_batch = n;
    cp.type_k = cp.type_v = kv;
    ob_ctx_t *c = NULL;
    if (ob_ctx_new(m, &cp, &c, err, sizeof err)) {
        fprintf(stderr, "  kv_cache: %s\n", err);
        return -1;
    }
    int32_t pos[24];
    int8_t all[24];
    for (int i = 0; i < n; i++) pos[i] = i, all[i] = 1;
    int rc = 0;
    if (!incremental) {
        ob_batch b = {n, kv_tok, pos, NULL, all};
        rc = ob_decode(c, &b, err, sizeof err);
        for (int i = 0; rc == 0 && i < n; i++) memcpy(out + (size_t)i * V, ob_get_logits(c, i), (size_t)V * 4);
    } else {
        ob_batch b = {12, kv_tok, pos, NULL, NULL};
        rc = ob_decode(c, &b, err, sizeof err);
        for (int i = 12; rc == 0 && i <= n; i++) {
            memcpy(out + (size_t)(i - 1) * V, ob_get_logits(c, 0), (size_t)V * 4);
            if (i == n) break;
            ob_batch sb = {1, &kv_tok[i], &pos[i], NULL, NULL};
            rc = ob_decode(c, &sb, err, sizeof err);
        }
    }
    ob_ctx_free(c);
    return rc;
}

/* max |a - b| over rows [r0, 24), and max |b| */
static double diff_rows(const float *a, const float *b, int V, int r0, double *maxref) {
    double d = 0;
    *maxref = 0;
    for (size_t i = (size_t)r0 * V; i < (size_t)24 * V; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (x > d || x != x) d = x != x ? INFINITY : x;
        if (fabs(b[i]) > *maxref) *maxref = fabs(b[i]);
    }
    return d;
}

OB_SUITE(kv_cache) {
    ob_model_t *m = load_model("qwen3", "f32", 0), *mr = load_model("qwen3", "f32", 1);
    CHECK(m != NULL && mr != NULL);
    if (!m || !mr) goto done;
    int V = ob_model_get_info(m)->n_vocab;
    size_t sz = (size_t)24 * V * sizeof(float);
    float *f32 = malloc(sz), *f16 = malloc(sz), *q8 = malloc(sz), *inc = malloc(sz), *ref = malloc(sz);
    double mref, d;
    CHECK_EQ_INT(run_tokens(m, OB_KV_F32, 0, f32), 0);
    CHECK_EQ_INT(run_tokens(m, OB_KV_F16, 0, f16), 0);
    CHECK_EQ_INT(run_tokens(m, OB_KV_Q8_0, 0, q8), 0);
    /* f16 K/V rounding (2^-11 relative) and q8_0's (1/254 of a block's largest) move the logits a little */
    d = diff_rows(f16, f32, V, 0, &mref);
    if (ob_test_verbose || d > 5e-3 * mref) fprintf(stderr, "  kv_cache: f16 vs f32 KV max|diff| %.3g (max|ref| %.3g)\n", d, mref);
    CHECK(d <= 5e-3 * mref);
    d = diff_rows(q8, f32, V, 0, &mref);
    if (ob_test_verbose || d > 4e-2 * mref) fprintf(stderr, "  kv_cache: q8_0 vs f32 KV max|diff| %.3g (max|ref| %.3g)\n", d, mref);
    CHECK(d <= 4e-2 * mref);
    /* decode after a prompt = the batch, for every cache type */
    for (int kv = 0; kv < 3; kv++) {
        const float *batch = kv == OB_KV_F16 ? f16 : kv == OB_KV_F32 ? f32 : q8;
        CHECK_EQ_INT(run_tokens(m, kv, 1, inc), 0);
        d = diff_rows(inc, batch, V, 11, &mref);
        if (d > 1e-4 + 1e-5 * mref) fprintf(stderr, "  kv_cache: %s incremental vs batch max|diff| %.3g\n", ob_kv_type_name(kv), d);
        CHECK(d <= 1e-4 + 1e-5 * mref);
    }
    /* the fast path (online softmax, SIMD kernels) against the reference backend, same cache type */
    CHECK_EQ_INT(run_tokens(mr, OB_KV_F16, 0, ref), 0);
    d = diff_rows(f16, ref, V, 0, &mref);
    if (ob_test_verbose || d > 1e-4 + 1e-5 * mref) fprintf(stderr, "  kv_cache: fast vs reference (f16 KV) max|diff| %.3g\n", d);
    CHECK(d <= 1e-4 + 1e-5 * mref);
    CHECK_EQ_INT(run_tokens(mr, OB_KV_Q8_0, 0, ref), 0);
    d = diff_rows(q8, ref, V, 0, &mref);
    CHECK(d <= 1e-4 + 1e-5 * mref);
    free(f32), free(f16), free(q8), free(inc), free(ref);

    /* bad cache types are refused with a message */
    char err[512];
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = 8;
    cp.type_v = 7;
    ob_ctx_t *c = NULL;
    CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), -1);
    CHECK(strstr(err, "KV cache type") != NULL);
    CHECK(ob_kv_type_from_name("Q8_0") == OB_KV_Q8_0 && ob_kv_type_from_name("f16") == OB_KV_F16 &&
          ob_kv_type_from_name("bf16") == -1 && !strcmp(ob_kv_type_name(OB_KV_F32), "f32"));
done:
    ob_model_free(m);
    ob_model_free(mr);

    /* BitNet: a quantizer after attention makes the output discontinuous; decode must still give the
     * prompt's bits with the default (f16) cache */
    ob_model_t *mb = load_model("bitnet", "tq2_0", 0), *ml = load_model("llama", "f32", 0);
    CHECK(mb != NULL && ml != NULL);
    if (mb) {
        int Vb = ob_model_get_info(mb)->n_vocab;
        float *a = malloc((size_t)24 * Vb * 4), *b = malloc((size_t)24 * Vb * 4);
        CHECK_EQ_INT(run_tokens(mb, OB_KV_F16, 0, a), 0);
        CHECK_EQ_INT(run_tokens(mb, OB_KV_F16, 1, b), 0);
        d = diff_rows(b, a, Vb, 11, &mref);
        if (d > 1e-4 + 1e-5 * mref) fprintf(stderr, "  kv_cache: bitnet incremental vs batch max|diff| %.3g\n", d);
        CHECK(d <= 1e-4 + 1e-5 * mref);
        free(a), free(b);
    }
    if (ml) { /* head size 16: no q8_0 cache */
        ob_ctx_params cq = ob_ctx_default_params();
        cq.n_ctx = 8;
        cq.type_k = OB_KV_Q8_0;
        ob_ctx_t *cc = NULL;
        CHECK_EQ_INT(ob_ctx_new(ml, &cq, &cc, err, sizeof err), -1);
        CHECK(strstr(err, "multiple of 32") != NULL);
    }
    ob_model_free(mb);
    ob_model_free(ml);
}
