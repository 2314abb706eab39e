/* cpu_attn.c — the CPU backend's fast attention and KV cache writes.
 *
 * Owns: causal grouped-query attention with an online softmax (running max and sum, rescaled
 * per chunk of CH positions, so scores never need the whole context at once) over a KV cache of
 * f32, f16 or q8_0 rows; the query heads that share a KV head are done together, so each K and
 * V row is read once for all of them. Work is split over (token, KV head) pairs handed out by an
 * atomic counter. Positions are visited in the same chunks from position 0 whatever the batch,
 * so a token's output does not depend on what else was in its batch (decode and prompt agree).
 * Does not own: the dot products (kernels.h), the reference two-pass attention (cpu_backend.c).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/cpu_attn.h"
#include "format/quant.h"

#define CH 64 /* positions per softmax chunk */

size_t ob_cpu_attn_scratch(int n_head, int n_head_kv, int head_dim) {
    int g = n_head / n_head_kv;
    return (size_t)g * CH + (size_t)g * head_dim + 2 * (size_t)g + (size_t)head_dim;
}

void ob_cpu_kv_write(const ob_kernels *kt, void *cache, int type, const float *x, int n, int dim, int n_ctx,
                     const int32_t *pos, const int32_t *seq) {
    size_t rb = ob_type_row_size(type, dim);
    for (int i = 0; i < n; i++) {
        uint8_t *dst = (uint8_t *)cache + ((size_t)seq[i] * n_ctx + pos[i]) * rb;
        const float *src = x + (size_t)i * dim;
        if (type == OB_TYPE_F16) kt->f32_to_f16(src, (uint16_t *)dst, dim);
        else if (type == OB_TYPE_F32) memcpy(dst, src, (size_t)dim * sizeof(float));
        else ob_type_get(type)->from_float(src, dst, dim);
    }
}

typedef struct {
    const ob_attn_args *a;
    const ob_kernels *kt;
    float **scratch;       /* [nth] of ob_cpu_attn_scratch floats */
    atomic_int next;
} attn_job;

/* dot(q, row) and o += w * row for one cache row of head_dim elements of the given type. */
static float row_dot(const ob_kernels *kt, int type, const float *q, const void *row, int hd, float *tmp) {
    if (type == OB_TYPE_F16) return kt->dot_f16(q, row, hd);
    if (type == OB_TYPE_F32) return kt->dot_f32(q, row, hd);
    ob_type_get(type)->to_float(row, tmp, hd);
    return kt->dot_f32(q, tmp, hd);
}

static void row_axpy(const ob_kernels *kt, int type, float *o, float w, const void *row, int hd, float *tmp) {
    if (type == OB_TYPE_F16) kt->axpy_f16(o, w, row, hd);
    else if (type == OB_TYPE_F32) kt->axpy(o, w, row, hd);
    else {
        ob_type_get(type)->to_float(row, tmp, hd);
        kt->axpy(o, w, tmp, hd);
    }
}

static void attn_task(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const ob_attn_args *a = j->a;
    const ob_kernels *kt = j->kt;
    const int hd = a->head_dim, G = a->n_head / a->n_head_kv, kv_dim = a->n_head_kv * hd;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, hd), vhb = ob_type_row_size(a->type_v, hd); /* bytes per head */
    float *sc = j->scratch[ith], *o = sc + (size_t)G * CH, *m = o + (size_t)G * hd, *l = m + G, *tmp = l + G;
    const int units = a->n * a->n_head_kv;
    for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < units;) {
        const int i = u / a->n_head_kv, kh = u % a->n_head_kv, np = a->pos[i] + 1;
        const float *q = a->q + ((size_t)i * a->n_head + (size_t)kh * G) * hd;
        const uint8_t *kb = (const uint8_t *)a->k + (size_t)a->seq[i] * a->n_ctx * krb + kh * khb;
        const uint8_t *vb = (const uint8_t *)a->v + (size_t)a->seq[i] * a->n_ctx * vrb + kh * vhb;
        for (int g = 0; g < G; g++) m[g] = -INFINITY, l[g] = 0;
        memset(o, 0, (size_t)G * hd * sizeof(float));
        for (int p0 = 0; p0 < np; p0 += CH) {
            const int p1 = p0 + CH < np ? p0 + CH : np;
            for (int p = p0; p < p1; p++) {
                const void *kr = kb + (size_t)p * krb;
                for (int g = 0; g < G; g++) sc[g * CH + p - p0] = row_dot(kt, a->type_k, q + (size_t)g * hd, kr, hd, tmp) * a->scale;
            }
            for (int g = 0; g < G; g++) {
                float *s = sc + g * CH, mx = m[g];
                for (int p = 0; p < p1 - p0; p++) mx = s[p] > mx ? s[p] : mx;
                const float corr = expf(m[g] - mx); /* 0 on the first chunk (m = -inf) */
                float sum = 0;
                for (int p = 0; p < p1 - p0; p++) {
                    s[p] = expf(s[p] - mx);
                    sum += s[p];
                }
                if (corr != 1.0f) {
                    float *og = o + (size_t)g * hd;
                    for (int d = 0; d < hd; d++) og[d] *= corr;
                }
                l[g] = l[g] * corr + sum;
                m[g] = mx;
            }
            for (int p = p0; p < p1; p++) {
                const void *vr = vb + (size_t)p * vrb;
                for (int g = 0; g < G; g++) row_axpy(kt, a->type_v, o + (size_t)g * hd, sc[g * CH + p - p0], vr, hd, tmp);
            }
        }
        for (int g = 0; g < G; g++) {
            float *out = a->out + ((size_t)i * a->n_head + (size_t)kh * G + g) * hd, inv = 1.0f / l[g];
            for (int d = 0; d < hd; d++) out[d] = o[(size_t)g * hd + d] * inv;
        }
    }
}

void ob_cpu_attention(ob_pool *pool, const ob_kernels *kt, const ob_attn_args *a, float **scratch) {
    attn_job j = {a, kt, scratch, 0};
    atomic_init(&j.next, 0);
    ob_pool_run(pool, attn_task, &j);
}
