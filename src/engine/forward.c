/* forward.c — inference contexts and the forward pass.
 *
 * Owns: the KV cache ([n_layer][n_seq][n_ctx] rows of n_head_kv*head_dim elements for K and for V,
 * f16 by default, f32 or q8_0 on request: ob_ctx_params.type_k / type_v),
 * activation scratch sized at creation for n_batch tokens, validation of every batch, and the
 * order of backend ops that makes one transformer step for any architecture in the table.
 * Does not own: the ops themselves (backend), weights (model.c), sampling (sampler.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/model.h"
#include "format/quant.h"

#include "util/err.h"

struct ob_ctx {
    ob_model_t *m;
    ob_backend *be;
    int n_ctx, n_seq, n_batch;
    void **k_cache, **v_cache;  /* [n_layer] each -> [n_seq][n_ctx] rows of kv_dim elements of type_k / type_v */
    int type_k, type_v;         /* ob_type of the cache elements */
    int32_t *seq_len;           /* [n_seq] positions filled */
    /* activation scratch, [n_batch][...] */
    float *x;                   /* [n_batch][n_embd] residual stream */
    float *h;                   /* [n_batch][max(n_embd, q_dim)] normed input / projections out */
    float *q;                   /* [n_batch][q_dim] */
    float *k, *v;               /* [n_batch][kv_dim] */
    float *att;                 /* [n_batch][q_dim] */
    float *gate, *up;           /* [n_batch][n_ff] */
    int32_t *seq0;              /* [n_batch] zeros: the default sequence ids */
    int32_t *out_rows;          /* [n_batch] rows that asked for logits */
    float *logits;              /* host [cap_out][n_vocab] */
    float *dlogits;             /* device [chunk_out][n_vocab]: the vocabulary matmul's output */
    float *logits_dev;          /* logits' address for the backend's ops (host_dev), or NULL: recorded steps write
                                 * dlogits and download it */
    int cap_out, chunk_out, n_out;
    ob_observer_fn obs;         /* debug observer or NULL */
    void *obs_user;
    float *obs_buf;             /* host [n_batch][max(q_dim, n_embd, n_ff)] copy for the observer */
    int embd_mode;              /* rows asking for output get the normed hidden state, not logits */
    float *embd;                /* host [cap_embd][n_embd] */
    int cap_embd;
    int distinct;               /* the step's tokens are all of different sequences (a decode step) */
};

ob_ctx_params ob_ctx_default_params(void) {
    ob_ctx_params p = {0, 1, 512, OB_KV_F16, OB_KV_F16};
    return p;
}

static const struct { const char *name; int ob_type; } kv_types[] = {
    [OB_KV_F16] = {"f16", OB_TYPE_F16}, [OB_KV_F32] = {"f32", OB_TYPE_F32}, [OB_KV_Q8_0] = {"q8_0", OB_TYPE_Q8_0}};

int ob_kv_type_from_name(const char *name) {
    for (int i = 0; name && i < (int)(sizeof kv_types / sizeof kv_types[0]); i++)
        if (!strcasecmp(name, kv_types[i].name)) return i;
    return -1;
}

const char *ob_kv_type_name(int kv_type) {
    return kv_type >= 0 && kv_type < (int)(sizeof kv_types / sizeof kv_types[0]) ? kv_types[kv_type].name : "unknown";
}

static void *balloc(ob_ctx_t *c, size_t bytes) { return c->be->alloc(c->be, bytes); }
/* Host buffers that download() fills every step (the logits): the backend's fastest kind when it
 * has one (CUDA: pinned), else plain heap memory. */
static float *host_new(ob_ctx_t *c, size_t bytes) { return c->be->host_alloc ? c->be->host_alloc(c->be, bytes) : malloc(bytes); }
static void host_free(ob_ctx_t *c, void *p) {
    if (p && c->be->host_alloc) c->be->host_free(c->be, p);
    else free(p);
}
/* Where the ops of a step write the logits straight into c->logits (CUDA: mapped page-locked
 * memory, no download after a recorded step), or NULL. */
static float *logits_dev(ob_ctx_t *c) { return c->logits && c->be->host_dev ? c->be->host_dev(c->be, c->logits) : NULL; }

void ob_ctx_free(ob_ctx_t *c) {
    if (!c) return;
    ob_backend *be = c->be;
    for (int l = 0; c->k_cache && l < c->m->hp.n_layer; l++) {
        be->dealloc(be, c->k_cache[l]);
        be->dealloc(be, c->v_cache[l]);
    }
    free(c->k_cache);
    free(c->v_cache);
    float *bufs[] = {c->x, c->h, c->q, c->k, c->v, c->att, c->gate, c->up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->dealloc(be, bufs[i]);
    free(c->seq_len);
    free(c->seq0);
    free(c->out_rows);
    host_free(c, c->logits);
    free(c->obs_buf);
    free(c->embd);
    if (c->dlogits) be->dealloc(be, c->dlogits);
    free(c);
}

int ob_ctx_new(ob_model_t *m, const ob_ctx_params *p, ob_ctx_t **out, char *err, size_t errlen) {
    *out = NULL;
    ob_ctx_params dp = ob_ctx_default_params();
    if (!p) p = &dp;
    const ob_hparams *hp = &m->hp;
    ob_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return ERR("context: out of memory");
    c->m = m;
    c->be = m->be;
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    c->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    c->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (c->n_ctx > (1 << 22) || c->n_seq > 4096 || c->n_batch > (1 << 16)) {
        ob_ctx_free(c);
        return ERR("context: n_ctx %d / n_seq %d / n_batch %d too large", p->n_ctx, p->n_seq, p->n_batch);
    }
    size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim, q_dim = (size_t)hp->n_head * hp->head_dim;
    const int nkt = (int)(sizeof kv_types / sizeof kv_types[0]);
    if (p->type_k < 0 || p->type_k >= nkt || p->type_v < 0 || p->type_v >= nkt) {
        ob_ctx_free(c);
        return ERR("context: unknown KV cache type %d / %d (f16, f32 or q8_0)", p->type_k, p->type_v);
    }
    c->type_k = kv_types[p->type_k].ob_type;
    c->type_v = kv_types[p->type_v].ob_type;
    if ((c->type_k == OB_TYPE_Q8_0 || c->type_v == OB_TYPE_Q8_0) && hp->head_dim % 32 != 0) {
        ob_ctx_free(c);
        return ERR("context: a q8_0 KV cache needs a head size that is a multiple of 32 (this model's is %d)", hp->head_dim);
    }
    size_t rows = (size_t)c->n_seq * c->n_ctx;
    size_t k_bytes = rows * ob_type_row_size(c->type_k, (int64_t)kv_dim), v_bytes = rows * ob_type_row_size(c->type_v, (int64_t)kv_dim);
    c->k_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    c->v_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    int ok = c->k_cache && c->v_cache;
    for (int l = 0; ok && l < hp->n_layer; l++) {
        c->k_cache[l] = balloc(c, k_bytes);
        c->v_cache[l] = balloc(c, v_bytes);
        ok = c->k_cache[l] && c->v_cache[l];
    }
    size_t nb = (size_t)c->n_batch, wide = q_dim > (size_t)hp->n_embd ? q_dim : (size_t)hp->n_embd;
    if (ok) {
        c->x = balloc(c, nb * hp->n_embd * sizeof(float));
        c->h = balloc(c, nb * wide * sizeof(float));
        c->q = balloc(c, nb * q_dim * sizeof(float));
        c->k = balloc(c, nb * kv_dim * sizeof(float));
        c->v = balloc(c, nb * kv_dim * sizeof(float));
        c->att = balloc(c, nb * q_dim * sizeof(float));
        c->gate = balloc(c, nb * hp->n_ff * sizeof(float));
        c->up = balloc(c, nb * hp->n_ff * sizeof(float));
        c->seq_len = calloc((size_t)c->n_seq, sizeof(int32_t));
        c->seq0 = calloc(nb, sizeof(int32_t));
        c->out_rows = calloc(nb, sizeof(int32_t));
        c->cap_out = c->n_seq < c->n_batch ? c->n_seq : c->n_batch;
        c->chunk_out = c->cap_out;
        c->logits = host_new(c, (size_t)c->cap_out * hp->n_vocab * sizeof(float));
        c->logits_dev = logits_dev(c);
        c->dlogits = balloc(c, (size_t)c->chunk_out * hp->n_vocab * sizeof(float));
        ok = c->dlogits && c->x && c->h && c->q && c->k && c->v && c->att && c->gate && c->up && c->seq_len && c->seq0 &&
             c->out_rows && c->logits;
    }
    if (!ok) {
        ob_ctx_free(c);
        return ERR("context: out of memory for n_ctx %d x n_seq %d (KV cache %.1f MiB)", p->n_ctx, p->n_seq,
                   (double)hp->n_layer * (double)(k_bytes + v_bytes) / 1048576.0);
    }
    *out = c;
    return 0;
}

int32_t ob_ctx_n_ctx(const ob_ctx_t *c) { return c->n_ctx; }

void ob_kv_seq_truncate(ob_ctx_t *c, int32_t seq, int32_t p0) {
    if (seq < 0 || seq >= c->n_seq || p0 < 0) return;
    if (p0 < c->seq_len[seq]) c->seq_len[seq] = p0;
}

int32_t ob_kv_seq_len(const ob_ctx_t *c, int32_t seq) {
    return seq >= 0 && seq < c->n_seq ? c->seq_len[seq] : 0;
}

void ob_ctx_set_embeddings(ob_ctx_t *c, int on) { c->embd_mode = on != 0; }

const float *ob_get_embeddings(const ob_ctx_t *c, int32_t j) {
    if (!c->embd_mode || j < 0 || j >= c->n_out) return NULL;
    return c->embd + (size_t)j * c->m->hp.n_embd;
}

const float *ob_get_logits(const ob_ctx_t *c, int32_t j) {
    if (c->embd_mode) return NULL;
    if (j < 0 || j >= c->n_out) return NULL;
    return c->logits + (size_t)j * c->m->hp.n_vocab;
}

/* Every token id, position and sequence is checked before any op runs: a bad batch changes
 * nothing. Positions of a sequence must continue its cache without gaps. */
static int check_batch(ob_ctx_t *c, const ob_batch *b, const int32_t *seq, char *err, size_t errlen) {
    if (b->n_tokens < 1 || b->n_tokens > c->n_batch)
        return ERR("decode: batch of %d tokens (must be 1..%d)", b->n_tokens, c->n_batch);
    int32_t *next = c->out_rows; /* borrowed as scratch: expected next position per sequence */
    if (c->n_seq > c->n_batch) {
        /* rare: more sequences than batch rows; check pairwise instead */
        next = NULL;
    }
    for (int s = 0; next && s < c->n_seq; s++) next[s] = c->seq_len[s];
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= c->m->hp.n_vocab)
            return ERR("decode: token %d (index %d) is outside the vocabulary (0..%d)", b->tokens[i], i, c->m->hp.n_vocab - 1);
        if (seq[i] < 0 || seq[i] >= c->n_seq) return ERR("decode: sequence %d (index %d) out of range (0..%d)", seq[i], i, c->n_seq - 1);
        if (b->pos[i] < 0 || b->pos[i] >= c->n_ctx)
            return ERR("decode: position %d exceeds the context size %d", b->pos[i], c->n_ctx);
        int32_t want;
        if (next) {
            want = next[seq[i]]++;
        } else {
            want = c->seq_len[seq[i]];
            for (int j = 0; j < i; j++) want += seq[j] == seq[i];
        }
        if (b->pos[i] != want)
            return ERR("decode: token %d of sequence %d is at position %d, expected %d", i, seq[i], b->pos[i], want);
    }
    return 0;
}

int ob_ctx_set_observer(ob_ctx_t *c, ob_observer_fn fn, void *user) {
    const ob_hparams *hp = &c->m->hp;
    size_t wide = (size_t)hp->n_head * hp->head_dim;
    if ((size_t)hp->n_embd > wide) wide = (size_t)hp->n_embd;
    if ((size_t)hp->n_ff > wide) wide = (size_t)hp->n_ff;
    if (fn && !c->obs_buf && !(c->obs_buf = malloc((size_t)c->n_batch * wide * sizeof(float)))) return -1;
    c->obs = fn;
    c->obs_user = user;
    return 0;
}

static void observe(ob_ctx_t *c, const char *name, int il, const float *x, int n, int dim) {
    if (!c->obs) return;
    c->be->download(c->be, c->obs_buf, x, (size_t)n * dim * sizeof(float));
    c->obs(c->obs_user, name, il, c->obs_buf, n, dim);
}

/* x [n][dim] -> x, quantized as BitNet does when the architecture asks for it, then shown to
 * the observer under name. */
static void maybe_act_quant(ob_ctx_t *c, const char *name, int il, float *x, int n, int dim) {
    if (c->m->arch->flags & OB_ARCH_ACT_QUANT) c->be->act_quant_i8(c->be, x, n, dim);
    observe(c, name, il, x, n, dim);
}

/* y = rmsnorm(x) * w, then maybe_act_quant (one op where the backend fuses them). */
static void norm_act_quant(ob_ctx_t *c, const char *name, int il, const float *x, const float *w, float *y, int n, int dim) {
    ob_backend *be = c->be;
    if ((c->m->arch->flags & OB_ARCH_ACT_QUANT) && be->rmsnorm_act_quant) {
        be->rmsnorm_act_quant(be, x, w, y, n, dim, c->m->hp.eps);
        observe(c, name, il, y, n, dim);
        return;
    }
    be->rmsnorm(be, x, w, y, n, dim, c->m->hp.eps);
    maybe_act_quant(c, name, il, y, n, dim);
}

/* x += in . W^T: a projection added to the residual stream (through h when the backend has no
 * fused form). */
static void matmul_residual(ob_ctx_t *c, const ob_weight *w, const float *in, int n) {
    ob_backend *be = c->be;
    if (be->matmul_add) {
        be->matmul_add(be, w, in, c->x, n);
        return;
    }
    be->matmul(be, w, in, c->h, n);
    be->add(be, c->x, c->h, (size_t)n * c->m->hp.n_embd);
}

/* w, the matmul after an op, when it reads that op's output as it is (the backend may prepare it
 * for w: ob_attn_args.out_to, matmul_glu's out_to); NULL when a sub-norm or act_quant_i8 comes
 * between. */
static const ob_weight *read_as_is(const ob_model_t *m, const float *sub_norm, const ob_weight *w) {
    return sub_norm || (m->arch->flags & OB_ARCH_ACT_QUANT) ? NULL : w;
}

static void layer_forward(ob_ctx_t *c, int il, int n, const int32_t *pos, const int32_t *seq) {
    ob_model_t *m = c->m;
    ob_backend *be = c->be;
    const ob_hparams *hp = &m->hp;
    const ob_layer *L = &m->layers[il];
    int d = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const ob_weight *to_wo = read_as_is(m, L->attn_sub_norm, &L->wo);
    ob_attn_args a = {c->q, c->att, c->k_cache[il], c->v_cache[il], c->type_k, c->type_v, n, hp->n_head, hp->n_head_kv,
                      hp->head_dim, c->n_ctx, pos, seq, 1.0f / sqrtf((float)hp->head_dim), to_wo};
    /* one token of a layer without biases or Q/K norms, nobody observing: one backend call when it
     * takes it (the same results as the ops below) */
    if (n == 1 && be->layer_decode && !c->obs && !L->bq && !L->bk && !L->bv && !L->q_norm && !L->k_norm) {
        ob_layer_args la = {c->x, c->q, c->k, c->v, c->att, c->gate, c->up, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
                            &L->ffn_down, L->attn_norm, L->ffn_norm, L->attn_sub_norm, L->ffn_sub_norm, hp->eps,
                            (m->arch->flags & OB_ARCH_ACT_QUANT) != 0, m->arch->ffn_act, a, &hp->rope};
        if (be->layer_decode(be, &la)) return;
    }

    norm_act_quant(c, "qkv_in", il, c->x, L->attn_norm, c->h, n, d);
    if (be->matmul_multi) {
        const ob_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *ys[3] = {c->q, c->k, c->v};
        be->matmul_multi(be, ws, ys, 3, c->h, n);
    } else {
        be->matmul(be, &L->wq, c->h, c->q, n);
        be->matmul(be, &L->wk, c->h, c->k, n);
        be->matmul(be, &L->wv, c->h, c->v, n);
    }
    if (L->bq) be->add_bias(be, c->q, L->bq, n, qd);
    if (L->bk) be->add_bias(be, c->k, L->bk, n, kvd);
    if (L->bv) be->add_bias(be, c->v, L->bv, n, kvd);
    if (L->q_norm) be->rmsnorm(be, c->q, L->q_norm, c->q, n * hp->n_head, hp->head_dim, hp->eps);
    if (L->k_norm) be->rmsnorm(be, c->k, L->k_norm, c->k, n * hp->n_head_kv, hp->head_dim, hp->eps);
    /* a decode step's tokens read no position another token writes: rope, the cache writes and
     * attention may be one backend call */
    if (!(c->distinct && be->rope_attention && be->rope_attention(be, &a, c->q, c->k, c->v, &hp->rope))) {
        if (be->rope_kv) {
            be->rope_kv(be, &a, c->q, c->k, c->v, &hp->rope);
        } else {
            be->rope(be, c->q, n, hp->n_head, hp->head_dim, pos, &hp->rope);
            be->rope(be, c->k, n, hp->n_head_kv, hp->head_dim, pos, &hp->rope);
            be->kv_write(be, c->k_cache[il], c->type_k, c->k, n, kvd, c->n_ctx, pos, seq);
            be->kv_write(be, c->v_cache[il], c->type_v, c->v, n, kvd, c->n_ctx, pos, seq);
        }
        be->attention(be, &a);
    }
    /* the sub-norms write to buffers that are free by then (q, up), not in place: a backend can
     * then spread a row over several blocks (cuda_ops.cu) */
    const float *o_in = c->att;
    if (L->attn_sub_norm) {
        norm_act_quant(c, "o_in", il, c->att, L->attn_sub_norm, c->q, n, qd);
        o_in = c->q;
    } else {
        maybe_act_quant(c, "o_in", il, c->att, n, qd);
    }
    matmul_residual(c, &L->wo, o_in, n);

    /* one token's FFN, nobody observing: one backend call when it takes it (the ops below, sub-norm
     * and act_quant_i8 included) */
    if (n == 1 && be->ffn_decode && !c->obs &&
        be->ffn_decode(be, m->arch->ffn_act, L->ffn_norm, hp->eps, &L->ffn_gate, &L->ffn_up, &L->ffn_down, L->ffn_sub_norm,
                       (m->arch->flags & OB_ARCH_ACT_QUANT) != 0, c->x, c->h, c->gate, c->up, n))
        return;
    norm_act_quant(c, "ffn_in", il, c->x, L->ffn_norm, c->h, n, d);
    if (be->matmul_glu) {
        be->matmul_glu(be, m->arch->ffn_act, &L->ffn_gate, &L->ffn_up, c->h, c->gate, c->up, n,
                       read_as_is(m, L->ffn_sub_norm, &L->ffn_down));
    } else {
        be->matmul(be, &L->ffn_gate, c->h, c->gate, n);
        be->matmul(be, &L->ffn_up, c->h, c->up, n);
        be->glu(be, m->arch->ffn_act, c->gate, c->up, (size_t)n * hp->n_ff);
    }
    const float *down_in = c->gate;
    if (L->ffn_sub_norm) {
        norm_act_quant(c, "down_in", il, c->gate, L->ffn_sub_norm, c->up, n, hp->n_ff);
        down_in = c->up;
    } else {
        maybe_act_quant(c, "down_in", il, c->gate, n, hp->n_ff);
    }
    matmul_residual(c, &L->ffn_down, down_in, n);
    observe(c, "l_out", il, c->x, n, d);
}

/* Decodes of different contexts may come from different threads (the server's scheduler and
 * its embeddings), but a backend runs one op at a time (the CPU backend's thread pool is not
 * reentrant): they take turns here. Uncontended, this costs one lock per forward pass. */
static pthread_mutex_t decode_mu = PTHREAD_MUTEX_INITIALIZER;

static int decode_locked(ob_ctx_t *c, const ob_batch *b, char *err, size_t errlen);

int ob_decode(ob_ctx_t *c, const ob_batch *b, char *err, size_t errlen) {
    pthread_mutex_lock(&decode_mu);
    int rc = decode_locked(c, b, err, errlen);
    pthread_mutex_unlock(&decode_mu);
    return rc;
}

/* The ops of one step up to the logits: embeddings, every layer, the rows that asked for output
 * (c->out_rows[n_out]) compacted to the front of h, and with head also the output norm and the
 * vocabulary matmul into logits_dev, or dlogits (when n_out fits one chunk). */
static void step_ops(ob_ctx_t *c, const ob_batch *b, const int32_t *seq, int n_out, int head) {
    ob_model_t *m = c->m;
    ob_backend *be = c->be;
    const int n = b->n_tokens, d = m->hp.n_embd;
    be->get_rows(be, &m->tok_embd, b->tokens, n, c->x);
    for (int il = 0; il < m->hp.n_layer; il++) layer_forward(c, il, n, b->pos, seq);
    for (int j = 0; j < n_out; j++)
        be->copy(be, c->h + (size_t)j * d, c->x + (size_t)c->out_rows[j] * d, (size_t)d * sizeof(float));
    if (!head) return;
    be->rmsnorm(be, c->h, m->output_norm, c->h, n_out, d, m->hp.eps);
    be->matmul(be, &m->output, c->h, c->logits_dev ? c->logits_dev : c->dlogits, n_out);
}

/* What makes two steps the same sequence of ops for a backend that records them: the context
 * (its buffers), the token count, whether its tokens are of distinct sequences and which rows
 * give logits. */
static uint64_t step_key(const ob_ctx_t *c, int n, int n_out) {
    uint64_t h = 1469598103934665603ull;
    uint64_t parts[4] = {(uint64_t)(uintptr_t)c, (uint64_t)n, (uint64_t)n_out, (uint64_t)c->distinct};
    for (int i = 0; i < 4; i++) h = (h ^ parts[i]) * 1099511628211ull;
    for (int j = 0; j < n_out; j++) h = (h ^ (uint64_t)c->out_rows[j]) * 1099511628211ull;
    return h;
}

static int decode_locked(ob_ctx_t *c, const ob_batch *b, char *err, size_t errlen) {
    ob_model_t *m = c->m;
    ob_backend *be = c->be;
    const ob_hparams *hp = &m->hp;
    c->n_out = 0;
    if (!b || !b->tokens || !b->pos) return ERR("decode: empty batch");
    const int32_t *seq = b->seq ? b->seq : c->seq0;
    if (check_batch(c, b, seq, err, errlen)) return -1;
    int n = b->n_tokens, d = hp->n_embd;
    c->distinct = 1; /* (the ops a step issues depend on it: part of its recording's key) */
    for (int i = 0; i < n && c->distinct; i++)
        for (int j = 0; j < i; j++)
            if (seq[j] == seq[i]) {
                c->distinct = 0;
                break;
            }

    /* Only rows that asked for logits go through the output norm and the vocabulary matmul. */
    int n_out = 0;
    for (int i = 0; i < n; i++)
        if (b->want_logits ? b->want_logits[i] != 0 : i == n - 1) c->out_rows[n_out++] = i;
    /* A step whose logits fit one chunk may be recorded and replayed by the backend (CUDA graphs);
     * a failed recording ran nothing, so the ops are issued again. */
    if (be->step_kind) be->step_kind(be, c->distinct);
    int graph = be->graph_begin && !c->obs && !c->embd_mode && n_out > 0 && n_out <= c->chunk_out;
    if (!(graph && be->graph_begin(be, step_key(c, n, n_out), b->tokens, b->pos, seq, n))) {
        step_ops(c, b, seq, n_out, graph);
        if (graph && be->graph_end(be) != 0) step_ops(c, b, seq, n_out, graph);
    }
    for (int i = 0; i < n; i++)
        if (b->pos[i] + 1 > c->seq_len[seq[i]]) c->seq_len[seq[i]] = b->pos[i] + 1;
    if (graph) {
        if (!c->logits_dev) be->download(be, c->logits, c->dlogits, (size_t)n_out * hp->n_vocab * sizeof(float));
        be->sync(be);
        c->n_out = n_out;
        return 0;
    }
    if (n_out == 0) return 0;
    if (c->embd_mode) {
        /* Embeddings: the hidden state after the output norm, no vocabulary matmul. */
        if (n_out > c->cap_embd) {
            float *ne = realloc(c->embd, (size_t)n_out * d * sizeof(float));
            if (!ne) return ERR("decode: out of memory for %d rows of embeddings", n_out);
            c->embd = ne;
            c->cap_embd = n_out;
        }
        be->rmsnorm(be, c->h, m->output_norm, c->h, n_out, d, hp->eps);
        be->download(be, c->embd, c->h, (size_t)n_out * d * sizeof(float));
        be->sync(be);
        c->n_out = n_out;
        return 0;
    }
    if (n_out > c->cap_out) {
        /* Grows once to the largest request seen (e.g. perplexity asks for every row); the old
         * rows need not survive: every row is written below. */
        float *nl = host_new(c, (size_t)n_out * hp->n_vocab * sizeof(float));
        if (!nl) return ERR("decode: out of memory for %d rows of logits", n_out);
        host_free(c, c->logits);
        c->logits = nl;
        c->logits_dev = logits_dev(c);
        c->cap_out = n_out;
    }
    be->rmsnorm(be, c->h, m->output_norm, c->h, n_out, d, hp->eps);
    for (int i0 = 0; i0 < n_out; i0 += c->chunk_out) {
        int cnt = n_out - i0 < c->chunk_out ? n_out - i0 : c->chunk_out;
        be->matmul(be, &m->output, c->h + (size_t)i0 * d, c->dlogits, cnt);
        be->download(be, c->logits + (size_t)i0 * hp->n_vocab, c->dlogits, (size_t)cnt * hp->n_vocab * sizeof(float));
    }
    be->sync(be);
    c->n_out = n_out;
    return 0;
}
