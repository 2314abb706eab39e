/* cpu_attn.c — the CPU backend's fast attention and KV cache writes.
 *
 * Owns: causal grouped-query attention with an online softmax (running max and sum, rescaled
 * per chunk of CH positions, so scores never need the whole context at once) over a KV cache of
 * f32, f16 or q8_0 rows, tiled: a work unit is up to QT tokens of one sequence and one KV head;
 * per chunk the K rows are converted once to f32 and transposed, the V rows once to f32, and every
 * query of the unit (tokens x the query heads sharing the KV head) that reaches the chunk takes
 * its scores and P.V from them, up to OB_ATTN_NQ queries that see the same keys per call (they
 * share the loads). Units go out through an atomic counter, last tokens first.
 * Positions are visited in the same chunks from position 0 whatever the batch and a query's
 * arithmetic does not depend on its unit, so decode and prompt agree bit for bit.
 * Does not own: the inner loops and the exponential (attn_tile.c), the row conversions
 * (kernels.h), the reference two-pass attention (cpu_backend.c).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/attn_tile.h"
#include "backend/cpu/cpu_attn.h"
#include "util/threadpool.h"
#include "format/quant.h"

#define CH 64 /* positions per softmax chunk (and per K/V block converted to f32) */
#define QT 32 /* tokens per work unit at most */

size_t ob_cpu_attn_scratch(int n_head, int n_head_kv, int head_dim) {
    size_t g = (size_t)(n_head / n_head_kv), hd = (size_t)head_dim;
    return 3 * hd * CH + (size_t)QT * g * (CH + hd + 2);
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
    const ob_attn_tile *tile;
    float **scratch;       /* [nth] of ob_cpu_attn_scratch floats */
    int qt, nblk;          /* tokens per unit (<= QT), units of tokens */
    atomic_int next;
} attn_job;

/* Cache row (head slice) as f32 in dst, or the row itself when it is f32 already. */
static const float *row_f32(const ob_kernels *kt, int type, const void *row, int hd, float *dst) {
    if (type == OB_TYPE_F32) return row;
    if (type == OB_TYPE_F16) kt->f16_to_f32(row, dst, hd);
    else ob_type_get(type)->to_float(row, dst, hd);
    return dst;
}

/* Keys of the chunk [p0, p1) that token i sees (causal: positions < pos + 1); 0 if none. */
static int chunk_keys(const ob_attn_args *a, int i, int p0, int p1) {
    const int np = a->pos[i] + 1;
    return np <= p0 ? 0 : (np < p1 ? np : p1) - p0;
}

/* Tokens [ia, ib) of one sequence, KV head kh: all their G query heads against each chunk of CH
 * positions; K of the chunk converted once to f32 transposed, V once to f32 rows. */
static void attn_run(attn_job *j, float *ws, int ia, int ib, int kh) {
    const ob_attn_args *a = j->a;
    const ob_kernels *kt = j->kt;
    const ob_attn_tile *tl = j->tile;
    const int hd = a->head_dim, G = a->n_head / a->n_head_kv, kv_dim = a->n_head_kv * hd;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, hd), vhb = ob_type_row_size(a->type_v, hd); /* bytes per head */
    float *ktr = ws, *vf = ktr + (size_t)hd * CH, *kf = vf + (size_t)CH * hd, *S = kf + (size_t)CH * hd;
    const int nt = ib - ia, nq = nt * G;
    float *O = S + (size_t)nq * CH, *M = O + (size_t)nq * hd, *L = M + nq;
    const uint8_t *kb = (const uint8_t *)a->k + (size_t)a->seq[ia] * a->n_ctx * krb + kh * khb;
    const uint8_t *vb = (const uint8_t *)a->v + (size_t)a->seq[ia] * a->n_ctx * vrb + kh * vhb;
    int maxnp = 0;
    for (int t = ia; t < ib; t++) maxnp = a->pos[t] + 1 > maxnp ? a->pos[t] + 1 : maxnp;
    for (int q = 0; q < nq; q++) M[q] = -INFINITY, L[q] = 0;
    memset(O, 0, (size_t)nq * hd * sizeof(float));
    for (int p0 = 0; p0 < maxnp; p0 += CH) {
        const int p1 = p0 + CH < maxnp ? p0 + CH : maxnp, nk = p1 - p0;
        for (int k = 0; k < nk; k++) {
            float *kr = kf + (size_t)k * hd, *vr = vf + (size_t)k * hd;
            const float *r = row_f32(kt, a->type_k, kb + (size_t)(p0 + k) * krb, hd, kr);
            if (r != kr) memcpy(kr, r, (size_t)hd * sizeof(float));
            const float *v = row_f32(kt, a->type_v, vb + (size_t)(p0 + k) * vrb, hd, vr);
            if (v != vr) memcpy(vr, v, (size_t)hd * sizeof(float));
        }
        tl->transpose(kf, nk, hd, ktr, CH);
        /* queries in (token, head) order, up to OB_ATTN_NQ at a time that see the same keys */
        for (int q0 = 0, q1; q0 < nq; q0 = q1) {
            const int n = chunk_keys(a, ia + q0 / G, p0, p1);
            for (q1 = q0 + 1; q1 < nq && q1 - q0 < OB_ATTN_NQ && chunk_keys(a, ia + q1 / G, p0, p1) == n;) q1++;
            if (!n) continue;
            const float *qp[OB_ATTN_NQ];
            float mx[OB_ATTN_NQ];
            for (int qi = q0; qi < q1; qi++)
                qp[qi - q0] = a->q + ((size_t)(ia + qi / G) * a->n_head + (size_t)kh * G + qi % G) * hd, mx[qi - q0] = M[qi];
            tl->scores(ktr, CH, qp, q1 - q0, hd, n, a->scale, S + (size_t)q0 * CH, CH, mx);
            for (int qi = q0; qi < q1; qi++) {
                float *s = S + (size_t)qi * CH, *og = O + (size_t)qi * hd;
                const float corr = expf(M[qi] - mx[qi - q0]); /* 0 on the first chunk (m = -inf) */
                const float sum = tl->softmax(s, n, mx[qi - q0]);
                if (corr != 1.0f)
                    for (int d = 0; d < hd; d++) og[d] *= corr;
                L[qi] = L[qi] * corr + sum;
                M[qi] = mx[qi - q0];
            }
            tl->pv(O + (size_t)q0 * hd, S + (size_t)q0 * CH, CH, q1 - q0, vf, n, hd);
        }
    }
    for (int t = 0; t < nt; t++)
        for (int g = 0; g < G; g++) {
            const int qi = t * G + g;
            float *out = a->out + ((size_t)(ia + t) * a->n_head + (size_t)kh * G + g) * hd, inv = 1.0f / L[qi];
            for (int d = 0; d < hd; d++) out[d] = O[(size_t)qi * hd + d] * inv;
        }
}

static void attn_task(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const ob_attn_args *a = j->a;
    const int units = j->nblk * a->n_head_kv;
    for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < units;) {
        /* last tokens first: they see the most positions */
        const int blk = j->nblk - 1 - u / a->n_head_kv, kh = u % a->n_head_kv;
        const int i0 = blk * j->qt, i1 = i0 + j->qt < a->n ? i0 + j->qt : a->n;
        for (int ia = i0, ib; ia < i1; ia = ib) { /* runs of one sequence */
            for (ib = ia + 1; ib < i1 && a->seq[ib] == a->seq[ia];) ib++;
            attn_run(j, j->scratch[ith], ia, ib, kh);
        }
    }
}

void ob_cpu_attention(ob_pool *pool, const ob_kernels *kt, const ob_attn_args *a, float **scratch) {
    /* Any split gives the same bits (a query's arithmetic does not depend on its unit); smaller
     * units only when there would be too few for the threads. */
    int qt = QT, nth = ob_pool_size(pool);
    while (qt > 1 && (a->n + qt - 1) / qt * a->n_head_kv < 4 * nth) qt /= 2;
    attn_job j = {a, kt, ob_attn_tile_for(kt->name), scratch, qt, (a->n + qt - 1) / qt, 0};
    atomic_init(&j.next, 0);
    ob_pool_run(pool, attn_task, &j);
}
