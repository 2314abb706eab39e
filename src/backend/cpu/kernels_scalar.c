/* kernels_scalar.c — the kernel table in plain C: runs on every CPU and defines the bits.
 *
 * Owns: the canonical computation of kernels.h written out element by element, with no
 * regard for speed beyond the obvious. Every SIMD table must produce exactly what this one
 * produces for integer types and float types alike (tests/unit/test_kernels.c checks it), and
 * this one is checked against the reference dequantize-then-dot path within the quantization
 * error of the activations.
 * Does not own: block layouts (kernels_common.c decoders), threads (cpu_matmul.c).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "format/quant.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- activations ------------------------------------------------------------------------ */

static void quant_row(const float *x, int64_t k, const ob_kfmt *f, int8_t *qs, float *d, int32_t *ac) {
    float amax = 0;
    for (int64_t i = 0; i < k; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float dr = amax / 127.0f, idr = amax > 0 ? 1.0f / dr : 0.0f;
    int row_mode = amax > 0 && ob_q8_on_grid(x, k, idr);
    for (int64_t b = 0; b < k / f->qb; b++) {
        const float *xb = x + b * f->qb;
        float db = dr, id = idr;
        if (!row_mode) {
            float bmax = 0;
            for (int i = 0; i < f->qb; i++) {
                float a = fabsf(xb[i]);
                bmax = a > bmax ? a : bmax;
            }
            db = bmax / 127.0f;
            id = db != 0 ? 1.0f / db : 0.0f;
        }
        d[b] = db;
        for (int i = 0; i < f->qb; i++) {
            float v = ob_rne(xb[i] * id);
            qs[b * f->qb + i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v); /* only NaN/inf reach the clamps */
        }
    }
    for (int64_t j = 0; j < k / f->sb; j++) {
        int32_t s = 0;
        for (int i = 0; i < f->sb; i++) s += qs[j * f->sb + i];
        ac[j] = f->off ? -f->off * s : s;
    }
}

/* ---- integer types ------------------------------------------------------------------------ */

void ob_kgemv_generic(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    const ob_kfmt *f = ob_kfmt_get(w->type);
    ob_kdec_fn dec = ob_kdec_get(w->type);
    int64_t k = w->n_in, nb = k / f->qb, nsub = f->qb / f->sb;
    const int8_t *qs = a->qs + t * k;
    const float *da = a->d + t * nb;
    const int32_t *ac = a->ac + t * (k / f->sb);
    uint8_t codes[256];
    int32_t sc[16], mn[16];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        float acc = 0;
        for (int64_t b = 0; b < nb; b++) {
            float dw = 0, dm = 0;
            dec(row, b, codes, sc, mn, &dw, &dm);
            const int8_t *q = qs + b * f->qb;
            int32_t isum = 0, imn = 0;
            for (int j = 0; j < nsub; j++) {
                int32_t s = f->off ? ac[b * nsub + j] : 0;
                for (int e = 0; e < f->sb; e++) s += codes[j * f->sb + e] * q[j * f->sb + e];
                isum += f->has_sc ? sc[j] * s : s;
                if (f->has_mn) imn += mn[j] * ac[b * nsub + j];
            }
            acc = ob_kacc(acc, isum, dw, da[b]);
            if (f->has_mn) acc = ob_kacc(acc, imn, dm, da[b]);
        }
        y[r - r0] = acc * w->scale;
    }
}

static void gemm_scalar(const ob_kfmt *f, const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    int64_t k = a->k, nb = k / f->qb, nsub = f->qb / f->sb;
    int R = p->R;
    for (int t = t0; t < t1; t++) {
        const int8_t *qs = a->qs + t * k;
        const float *da = a->d + t * nb;
        const int32_t *ac = a->ac + t * (k / f->sb);
        for (int r = 0; r < p->nr; r++) {
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                int32_t isum = 0, imn = 0;
                for (int j = 0; j < nsub; j++) {
                    int64_t js = b * nsub + j;
                    int32_t s = f->off ? ac[js] : 0;
                    for (int e = 0; e < f->sb; e++) {
                        int64_t kk = js * f->sb + e;
                        s += p->codes[((kk >> 2) * R + r) * 4 + (kk & 3)] * qs[kk];
                    }
                    isum += f->has_sc ? p->sc[js * R + r] * s : s;
                    if (f->has_mn) imn += p->mn[js * R + r] * ac[js];
                }
                acc = ob_kacc(acc, isum, p->dw[b * R + r], da[b]);
                if (f->has_mn) acc = ob_kacc(acc, imn, p->dm[b * R + r], da[b]);
            }
            y[(t - t0) * ldy + r] = acc * p->scale;
        }
    }
}

/* ---- float types -------------------------------------------------------------------------- */

static float dot16(const float *a, const float *b, int64_t n) {
    float s[16] = {0};
    for (int64_t i = 0; i < n; i++) s[i & 15] = fmaf(a[i], b[i], s[i & 15]);
    return ob_sum16(s);
}

static void row_to_f32(int type, const void *src, float *dst, int64_t n) {
    ob_type_get(type)->to_float(src, dst, n);
}

static void gemm_f(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy,
                   float *wbuf) {
    int64_t k = w->n_in;
    for (int64_t r = r0; r < r1; r++) {
        row_to_f32(w->type, (const uint8_t *)w->data + (size_t)r * w->row_bytes, wbuf, k);
        for (int t = 0; t < n; t++) y[t * ldy + (r - r0)] = dot16(wbuf, x + t * k, k) * w->scale;
    }
}

/* ---- attention helpers -------------------------------------------------------------------- */

static void f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ob_fp16_to_fp32(src[i]);
}

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ob_fp32_to_fp16(src[i]);
}

static void axpy(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, ob_fp16_to_fp32(x[i]), y[i]);
}

static float dot_f16(const float *a, const uint16_t *b, int64_t n) {
    float s[16] = {0};
    for (int64_t i = 0; i < n; i++) s[i & 15] = fmaf(a[i], ob_fp16_to_fp32(b[i]), s[i & 15]);
    return ob_sum16(s);
}

#define INT_TYPES(fn)                                                                                      \
    {[OB_TYPE_Q8_0] = fn, [OB_TYPE_Q4_0] = fn, [OB_TYPE_Q4_1] = fn, [OB_TYPE_Q5_0] = fn, [OB_TYPE_Q5_1] = fn,      \
     [OB_TYPE_IQ4_NL] = fn, [OB_TYPE_MXFP4] = fn, [OB_TYPE_TQ2_0] = fn, [OB_TYPE_TQ1_0] = fn, [OB_TYPE_I2_S] = fn, \
     [OB_TYPE_Q2_K] = fn, [OB_TYPE_Q3_K] = fn, [OB_TYPE_Q4_K] = fn, [OB_TYPE_Q5_K] = fn, [OB_TYPE_Q6_K] = fn,      \
     [OB_TYPE_IQ4_XS] = fn}

/* ---- row ops: the reference loops of cpu_backend.c ------------------------------------- */

static void rms_row(const float *x, const float *w, float *y, int dim, float eps) {
    double ss = 0;
    for (int k = 0; k < dim; k++) ss += (double)x[k] * x[k];
    float inv = (float)(1.0 / sqrt(ss / dim + eps));
    for (int k = 0; k < dim; k++) y[k] = x[k] * inv * (w ? w[k] : 1.0f);
}

static void aq_row(float *x, int dim) {
    float mx = 0;
    for (int k = 0; k < dim; k++) mx = fmaxf(mx, fabsf(x[k]));
    if (mx < 1e-5f) mx = 1e-5f;
    float s = (1.0f / mx) * 127.0f;
    for (int k = 0; k < dim; k++) {
        float q = nearbyintf(x[k] * s);
        if (q > 127) q = 127;
        if (q < -128) q = -128;
        x[k] = q / s;
    }
}

static void glu(int act, float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], r = g > 0 ? g : 0;
        gate[i] = (act == 0 ? g / (1.0f + expf(-g)) : r * r) * up[i];
    }
}

static void add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static const ob_kernels table = {
    .name = "scalar",
    .R = 8,
    .quant_row = quant_row,
    .gemv = INT_TYPES(ob_kgemv_generic),
    .pack = INT_TYPES(ob_kpack_generic),
    .gemm = gemm_scalar,
    .gemm_f = {[OB_TYPE_F32] = gemm_f, [OB_TYPE_F16] = gemm_f, [OB_TYPE_BF16] = gemm_f},
    .rms_row = rms_row,
    .aq_row = aq_row,
    .glu = glu,
    .add = add,
    .dot_f32 = dot16,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .axpy = axpy,
    .axpy_f16 = axpy_f16,
    .dot_f16 = dot_f16,
};

const ob_kernels *ob_kernels_scalar(void) { return &table; }
