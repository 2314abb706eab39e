/* backend_fused.c — the optional fused ops of backend.h composed from a backend's plain ops.
 *
 * Owns: ob_backend_plain_fused, which fills a table's empty fused entries (matmul_add,
 * matmul_multi, matmul_glu, rope_kv, rope_attention, rmsnorm_act_quant, ffn_decode) with the sequences of plain ops they stand
 * for, in the engine's order, so they give exactly the plain path's bits. It exists for tests:
 * with OB_BACKEND_FUSED=plain, ob_backend_by_name gives the CPU backend these entries, so the
 * engine's fused call sites (engine/forward.c), which otherwise run only on a GPU, run in every
 * CPU test run and must give the same logits as the plain ones. Not a fast path: matmul_add
 * allocates its temporary per call.
 * Does not own: the real fused kernels (backend/cuda).
 */
#include <stdlib.h>

#include "backend/backend.h"

static void f_matmul_add(ob_backend *b, const ob_weight *w, const float *x, float *y, int n) {
    size_t ny = (size_t)n * (size_t)w->n_out;
    float *t = b->alloc(b, ny * sizeof(float));
    if (!t) abort(); /* a test hook: no error path in the table */
    b->matmul(b, w, x, t, n);
    b->add(b, y, t, ny);
    b->sync(b);
    b->dealloc(b, t);
}

static void f_matmul_multi(ob_backend *b, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n) {
    for (int i = 0; i < count; i++) b->matmul(b, ws[i], x, ys[i], n);
}

static void f_matmul_glu(ob_backend *b, ob_act act, const ob_weight *g, const ob_weight *u, const float *x, float *gate,
                         float *up, int n, const ob_weight *out_to) {
    (void)out_to;
    b->matmul(b, g, x, gate, n);
    b->matmul(b, u, x, up, n);
    b->glu(b, act, gate, up, (size_t)n * (size_t)g->n_out);
}

static void f_rope_kv(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r) {
    const int kvd = a->n_head_kv * a->head_dim;
    b->rope(b, q, a->n, a->n_head, a->head_dim, a->pos, r);
    b->rope(b, k, a->n, a->n_head_kv, a->head_dim, a->pos, r);
    b->kv_write(b, (void *)a->k, a->type_k, k, a->n, kvd, a->n_ctx, a->pos, a->seq);
    b->kv_write(b, (void *)a->v, a->type_v, v, a->n, kvd, a->n_ctx, a->pos, a->seq);
}

static int f_rope_attention(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r) {
    ob_attn_args t = *a;
    t.q = q;
    b->rope_kv(b, &t, q, k, v, r);
    b->attention(b, &t);
    return 1;
}

static void f_rmsnorm_act_quant(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps) {
    b->rmsnorm(b, x, w, y, n, dim, eps);
    b->act_quant_i8(b, y, n, dim);
}

/* rmsnorm, then with aq act_quant_i8 (the engine's norm_act_quant) */
static void norm_aq(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps, int aq) {
    if (aq) b->rmsnorm_act_quant(b, x, w, y, n, dim, eps);
    else b->rmsnorm(b, x, w, y, n, dim, eps);
}

static int f_ffn_decode(ob_backend *b, ob_act act, const float *w, float eps, const ob_weight *g, const ob_weight *u,
                        const ob_weight *d, const float *sw, int aq, float *x, float *h, float *gate, float *up, int n) {
    norm_aq(b, x, w, h, n, (int)g->n_in, eps, aq);
    b->matmul_glu(b, act, g, u, h, gate, up, n, sw || aq ? NULL : d);
    const float *in = gate;
    if (sw) {
        norm_aq(b, gate, sw, up, n, (int)g->n_out, eps, aq);
        in = up;
    } else if (aq) {
        b->act_quant_i8(b, gate, n, (int)g->n_out);
    }
    b->matmul_add(b, d, in, x, n);
    return 1;
}

void ob_backend_plain_fused(ob_backend *b) {
    if (!b->matmul_add) b->matmul_add = f_matmul_add;
    if (!b->matmul_multi) b->matmul_multi = f_matmul_multi;
    if (!b->matmul_glu) b->matmul_glu = f_matmul_glu;
    if (!b->rope_kv) b->rope_kv = f_rope_kv;
    if (!b->rope_attention) b->rope_attention = f_rope_attention; /* after rope_kv: it calls that */
    if (!b->rmsnorm_act_quant) b->rmsnorm_act_quant = f_rmsnorm_act_quant;
    if (!b->ffn_decode) b->ffn_decode = f_ffn_decode; /* after matmul_glu, matmul_add and rmsnorm_act_quant: it calls them */
}
