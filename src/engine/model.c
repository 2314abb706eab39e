/* model.c — loading a GGUF file into an ob_model.
 *
 * Owns: reading hyperparameters (checked for sanity and consistency), finding every tensor the
 * architecture needs with exactly the shape it needs, and handing weights to the backend
 * (memory-mapped, not copied, on the CPU). Errors name the key or tensor at fault.
 * Does not own: the file format (format/gguf), the forward pass (forward.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "text/tokenizer.h"

#include "util/err.h"

ob_model_params ob_model_default_params(void) {
    ob_model_params p = {"cpu", 0};
    return p;
}

int64_t ob_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *own(ob_model_t *m, void *p) {
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **n = realloc(m->owned, (size_t)cap * sizeof *n);
        if (!n) { free(p); return NULL; }
        m->owned = n;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

/* Reads an integer hyperparameter "<arch>.<key>"; def < 0 means required. */
static int hp_int(ob_model_t *m, const char *key, int64_t def, int64_t lo, int64_t hi, int *out,
                  char *err, size_t errlen) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", m->info.arch, key);
    int64_t v;
    int r = ob_gguf_get_i64(m->gguf, full, &v, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        if (def < 0) return ERR("model: required key '%s' is missing", full);
        v = def;
    }
    if (v < lo || v > hi) return ERR("model: key '%s' = %lld is out of range [%lld, %lld]", full, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int hp_float(ob_model_t *m, const char *key, double def, float *out, char *err, size_t errlen) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", m->info.arch, key);
    double v;
    int r = ob_gguf_get_f64(m->gguf, full, &v, err, errlen);
    if (r < 0) return -1;
    *out = (float)(r == 0 ? def : v);
    return 0;
}

static const ob_gguf_tensor *find(ob_model_t *m, const char *name, int layer) {
    char full[128];
    if (layer >= 0) snprintf(full, sizeof full, "blk.%d.%s", layer, name);
    else snprintf(full, sizeof full, "%s", name);
    return ob_gguf_find_tensor(m->gguf, full);
}

static const char *tname(const char *name, int layer) {
    static __thread char buf[128];
    if (layer >= 0) snprintf(buf, sizeof buf, "blk.%d.%s", layer, name);
    else snprintf(buf, sizeof buf, "%s", name);
    return buf;
}

/* The type the backend would rather compute a weight of this type in (weight_as), where it can
 * compute that type; type itself otherwise. */
static int weight_as(ob_backend *be, int type) {
    const int to = be->weight_as ? be->weight_as(be, type) : type;
    return to != type && be->supports(be, to) ? to : type;
}

/* The types after type that load_weight tries in turn (weight_as asked again of each): their count. */
static int weight_chain(ob_backend *be, int type, int chain[OB_WEIGHT_AS_STEPS]) {
    int n = 0;
    for (int to; n < OB_WEIGHT_AS_STEPS && (to = weight_as(be, type)) != type; n++) chain[n] = type = to;
    return n;
}

/* A 2-D weight of exactly [n_out][n_in]. Missing and !required: w->data stays NULL. */
static int load_weight(ob_model_t *m, const char *name, int layer, int64_t n_in, int64_t n_out, int required,
                       ob_weight *w, char *err, size_t errlen) {
    const ob_gguf_tensor *t = find(m, name, layer);
    memset(w, 0, sizeof *w);
    if (!t) return required ? ERR("model: tensor '%s' is missing", tname(name, layer)) : 0;
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return ERR("model: tensor '%s' has shape [%lld, %lld] (%d dims), expected [%lld, %lld]", t->name,
                   (long long)t->ne[0], (long long)t->ne[1], t->n_dims, (long long)n_in, (long long)n_out);
    if (!m->be->supports(m->be, t->type))
        return ERR("model: tensor '%s' has type %s, which the %s backend of this build cannot compute", t->name,
                   ob_type_name(t->type), m->be->name);
    char why[256];
    if (ob_tensor_validate(t->type, t->data, n_in, n_out, why, sizeof why))
        return ERR("model: tensor '%s': %s", t->name, why);
    /* the type the backend would rather compute it in, where that holds the same values, and
     * again from that type (tq1_0 -> tq2_0 -> i2_s): from the type in hand, the farthest of the
     * chain's types it converts to directly (tq1_0 -> i2_s in one pass), then on from there */
    int type = t->type;
    const void *data = t->data;
    size_t size = t->size;
    void *conv = NULL, *next = NULL;
    int chain[OB_WEIGHT_AS_STEPS];
    const int n_chain = weight_chain(m->be, type, chain);
    for (int lo = 0, k; lo < n_chain; lo = k + 1) {
        size_t sz = 0;
        for (k = n_chain - 1; k >= lo && !(next = ob_tensor_convert(type, chain[k], data, n_in, n_out, &sz)); k--) {}
        if (k < lo) break;
        free(conv);
        data = conv = next;
        type = chain[k];
        size = sz;
    }
    w->data = m->be->upload_weight ? m->be->upload_weight(m->be, data, size, type, n_in, n_out) : m->be->upload(m->be, data, size);
    if (!w->data) {
        const int converted = conv != NULL;
        free(conv);
        if (converted)
            return ERR("model: tensor '%s': could not place %zu bytes on the %s device (its %s taken as %s%s%s)", t->name, size,
                       m->be->name, ob_type_name(t->type), ob_type_name(type), m->be->weight_as_hint ? "; " : "",
                       m->be->weight_as_hint ? m->be->weight_as_hint : "");
        return ERR("model: tensor '%s': could not place %zu bytes on the %s device", t->name, size, m->be->name);
    }
    w->type = type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = ob_type_row_size(type, n_in);
    w->scale = ob_tensor_scale(type, data, n_in, n_out); /* read on the host: the tail is in the file */
    /* a backend that computes on host memory (the CPU's upload returns it) reads the converted
     * bytes for the model's life; a device has its copy */
    if (conv && w->data == conv) {
        if (!own(m, conv)) { /* (own freed it) */
            w->data = NULL;
            return ERR("model: out of memory for tensor '%s'", t->name);
        }
    } else {
        free(conv);
    }
    return 0;
}

/* A 1-D vector of n floats (any float type in the file), converted to float32 once. */
static int load_vec(ob_model_t *m, const char *name, int layer, int64_t n, int required, const float **out,
                    char *err, size_t errlen) {
    const ob_gguf_tensor *t = find(m, name, layer);
    *out = NULL;
    if (!t) return required ? ERR("model: tensor '%s' is missing", tname(name, layer)) : 0;
    int64_t count = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (count != n) return ERR("model: tensor '%s' has %lld elements, expected %lld", t->name, (long long)count, (long long)n);
    const ob_type_traits *tr = ob_type_get(t->type);
    if (!tr || !tr->to_float) return ERR("model: tensor '%s' has type %s, not readable as a vector", t->name, ob_type_name(t->type));
    float *host = own(m, malloc((size_t)n * sizeof(float)));
    if (!host) return ERR("model: out of memory for tensor '%s'", t->name);
    tr->to_float(t->data, host, n);
    *out = m->be->upload(m->be, host, (size_t)n * sizeof(float));
    return *out ? 0 : ERR("model: tensor '%s': upload failed", t->name);
}

static int read_hparams(ob_model_t *m, char *err, size_t errlen) {
    ob_hparams *hp = &m->hp;
    if (hp_int(m, "embedding_length", -1, 1, 1 << 20, &hp->n_embd, err, errlen) ||
        hp_int(m, "block_count", -1, 1, 4096, &hp->n_layer, err, errlen) ||
        hp_int(m, "feed_forward_length", -1, 1, 1 << 22, &hp->n_ff, err, errlen) ||
        hp_int(m, "attention.head_count", -1, 1, 1 << 16, &hp->n_head, err, errlen) ||
        hp_int(m, "attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv, err, errlen) ||
        hp_int(m, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train, err, errlen))
        return -1;
    if (hp->n_head % hp->n_head_kv != 0)
        return ERR("model: attention.head_count %d is not a multiple of attention.head_count_kv %d", hp->n_head, hp->n_head_kv);
    if (hp_int(m, "attention.key_length", hp->n_embd / hp->n_head, 1, 1 << 14, &hp->head_dim, err, errlen)) return -1;
    int vlen;
    if (hp_int(m, "attention.value_length", hp->head_dim, 1, 1 << 14, &vlen, err, errlen)) return -1;
    if (vlen != hp->head_dim) return ERR("model: attention.value_length %d differs from key_length %d (not supported)", vlen, hp->head_dim);
    if (hp_int(m, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &hp->rope.n_rot, err, errlen)) return -1;
    if (hp->rope.n_rot % 2) return ERR("model: rope.dimension_count %d is odd", hp->rope.n_rot);
    if (hp_float(m, "attention.layer_norm_rms_epsilon", 1e-5, &hp->eps, err, errlen) ||
        hp_float(m, "rope.freq_base", 10000.0, &hp->rope.theta, err, errlen))
        return -1;
    if (!(hp->eps > 0 && hp->eps < 1)) return ERR("model: attention.layer_norm_rms_epsilon %g is not in (0, 1)", hp->eps);
    if (!(hp->rope.theta > 1)) return ERR("model: rope.freq_base %g must be > 1", hp->rope.theta);
    hp->rope.style = m->arch->rope;
    hp->rope.freq_scale = 1.0f;
    char key[256];
    const char *stype = NULL;
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->info.arch);
    if (ob_gguf_get_str(m->gguf, key, &stype, err, errlen) < 0) return -1;
    if (stype && strcmp(stype, "none") != 0) {
        float factor = 1.0f;
        if (hp_float(m, "rope.scaling.factor", 1.0, &factor, err, errlen)) return -1;
        if (strcmp(stype, "linear") != 0)
            return ERR("model: %s = '%s' is not supported (linear and llama3 rope_freqs are)", key, stype);
        if (!(factor > 0)) return ERR("model: %s.rope.scaling.factor %g must be > 0", m->info.arch, factor);
        hp->rope.freq_scale = 1.0f / factor;
    }
    return 0;
}

static int load_tensors(ob_model_t *m, char *err, size_t errlen) {
    ob_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const ob_gguf_tensor *emb = find(m, "token_embd.weight", -1);
    if (!emb) return ERR("model: tensor 'token_embd.weight' is missing");
    if (emb->n_dims != 2 || emb->ne[0] != d || emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return ERR("model: tensor 'token_embd.weight' has shape [%lld, %lld], expected [%lld, n_vocab]",
                   (long long)emb->ne[0], (long long)emb->ne[1], (long long)d);
    hp->n_vocab = (int)emb->ne[1];
    if (load_weight(m, "token_embd.weight", -1, d, hp->n_vocab, 1, &m->tok_embd, err, errlen) ||
        load_vec(m, "output_norm.weight", -1, d, 1, &m->output_norm, err, errlen) ||
        load_weight(m, "output.weight", -1, d, hp->n_vocab, 0, &m->output, err, errlen))
        return -1;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    const float *factors = NULL;
    if (load_vec(m, "rope_freqs.weight", -1, hp->rope.n_rot / 2, 0, &factors, err, errlen)) return -1;
    hp->rope.freq_factors = factors;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return ERR("model: out of memory");
    unsigned fl = m->arch->flags;
    for (int il = 0; il < hp->n_layer; il++) {
        ob_layer *L = &m->layers[il];
        if (load_vec(m, "attn_norm.weight", il, d, 1, &L->attn_norm, err, errlen) ||
            load_weight(m, "attn_q.weight", il, d, qd, 1, &L->wq, err, errlen) ||
            load_weight(m, "attn_k.weight", il, d, kvd, 1, &L->wk, err, errlen) ||
            load_weight(m, "attn_v.weight", il, d, kvd, 1, &L->wv, err, errlen) ||
            load_weight(m, "attn_output.weight", il, qd, d, 1, &L->wo, err, errlen) ||
            load_vec(m, "attn_q.bias", il, qd, (fl & OB_ARCH_QKV_BIAS) != 0, &L->bq, err, errlen) ||
            load_vec(m, "attn_k.bias", il, kvd, (fl & OB_ARCH_QKV_BIAS) != 0, &L->bk, err, errlen) ||
            load_vec(m, "attn_v.bias", il, kvd, (fl & OB_ARCH_QKV_BIAS) != 0, &L->bv, err, errlen) ||
            load_vec(m, "attn_q_norm.weight", il, hp->head_dim, (fl & OB_ARCH_QK_NORM) != 0, &L->q_norm, err, errlen) ||
            load_vec(m, "attn_k_norm.weight", il, hp->head_dim, (fl & OB_ARCH_QK_NORM) != 0, &L->k_norm, err, errlen) ||
            load_vec(m, "attn_sub_norm.weight", il, qd, (fl & OB_ARCH_SUB_NORMS) != 0, &L->attn_sub_norm, err, errlen) ||
            load_vec(m, "ffn_norm.weight", il, d, 1, &L->ffn_norm, err, errlen) ||
            load_weight(m, "ffn_gate.weight", il, d, hp->n_ff, 1, &L->ffn_gate, err, errlen) ||
            load_weight(m, "ffn_up.weight", il, d, hp->n_ff, 1, &L->ffn_up, err, errlen) ||
            load_vec(m, "ffn_sub_norm.weight", il, hp->n_ff, (fl & OB_ARCH_SUB_NORMS) != 0, &L->ffn_sub_norm, err, errlen) ||
            load_weight(m, "ffn_down.weight", il, hp->n_ff, d, 1, &L->ffn_down, err, errlen))
            return -1;
    }
    return 0;
}

/* The most common type among 2-D weights: what `bench` and `registry` report as the model's type. */
static int dominant_type(const ob_gguf_t *g) {
    /* slots: GGML's ids, then 1bit's own (OB_TYPE_EXT_FIRST..) */
    enum { N_GGML = OB_TYPE_COUNT, N_ALL = OB_TYPE_COUNT + OB_TYPE_EXT_END - OB_TYPE_EXT_FIRST };
    uint64_t bytes[N_ALL] = {0};
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        int slot = t->type >= 0 && t->type < N_GGML ? t->type
                   : t->type >= OB_TYPE_EXT_FIRST && t->type < OB_TYPE_EXT_END ? N_GGML + t->type - OB_TYPE_EXT_FIRST : -1;
        if (t->n_dims == 2 && slot >= 0 && strcmp(t->name, "token_embd.weight") != 0 && strcmp(t->name, "output.weight") != 0)
            bytes[slot] += t->ne[0] * t->ne[1];
    }
    int best = OB_TYPE_F32;
    for (int i = 0; i < N_ALL; i++)
        if (bytes[i] > bytes[best]) best = i;
    return best < N_GGML ? best : best - N_GGML + OB_TYPE_EXT_FIRST;
}

/* Optional features of this build that a file may require ("1bit.requires", docs/lean.md). */
static const char *const build_features[] = {
#ifndef OB_NO_LEAN
    "lean4",
#endif
    NULL,
};

int ob_model_check_requires(const ob_gguf_t *g, const char *const *have, char *err, size_t errlen) {
    const ob_gguf_value *v = ob_gguf_get(g, OB_KEY_REQUIRES);
    if (!v) return 0;
    if (v->type != OB_GGUF_ARRAY || v->v.arr.elem_type != OB_GGUF_STRING)
        return ERR("model: key '%s' must be an array of strings (features the file needs)", OB_KEY_REQUIRES);
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        const char *f = v->v.arr.items[i].v.str.ptr;
        int ok = 0;
        for (int k = 0; have && have[k]; k++) ok |= strcmp(have[k], f) == 0;
        if (ok) continue;
        if (strcmp(f, "lean4") == 0)
            return ERR("model: this file needs lean4 support (%s = [\"lean4\"]), which this build of 1bit lacks: it was "
                       "built with LEAN=0. Rebuild with plain `make` (LEAN=1), or convert the model to another type",
                       OB_KEY_REQUIRES);
        return ERR("model: this file needs the feature '%s' (%s), unknown to this version of 1bit: a newer 1bit wrote it",
                   f, OB_KEY_REQUIRES);
    }
    return 0;
}

size_t ob_model_weight_bytes(const ob_gguf_t *g, ob_backend *be) {
    size_t need = 0;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        size_t most = t->size; /* (the largest type along load_weight's steps: any may refuse) */
        int chain[OB_WEIGHT_AS_STEPS];
        const int n_chain = t->n_dims == 2 ? weight_chain(be, t->type, chain) : 0;
        for (int k = 0; k < n_chain; k++) {
            const size_t as = ob_type_tensor_size(chain[k], t->ne[0], t->ne[1]);
            most = as > most ? as : most;
        }
        need += most;
    }
    return need;
}

/* A device with its own memory (not the CPU, whose weights stay memory-mapped) must hold every
 * tensor of the file, in the type the backend takes it as (weight_as: load_weight converts):
 * refuse before uploading anything, naming both sizes. The KV cache and scratch come later
 * (ob_ctx_new says so if they do not fit). */
static int check_device_memory(ob_model_t *m, const char *path, char *err, size_t errlen) {
    if (m->be->host) return 0;
    size_t need = ob_model_weight_bytes(m->gguf, m->be), fr = 0, tot = 0;
    if (m->be->mem_info(m->be, &fr, &tot) != 0) return 0;
    if (need + ((size_t)256 << 20) > fr)
        return ERR("model '%s': its weights need %.2f GiB of %s memory but only %.2f GiB of %.2f GiB is free; "
                   "use a smaller weight type or --device cpu%s%s", path, need / 1073741824.0, m->be->name, fr / 1073741824.0,
                   tot / 1073741824.0, m->be->mem_hint ? "; " : "", m->be->mem_hint ? m->be->mem_hint : "");
    return 0;
}

int ob_model_load(const char *path, const ob_model_params *p, ob_model_t **out, char *err, size_t errlen) {
    *out = NULL;
    ob_model_params defp = ob_model_default_params();
    if (!p) p = &defp;
    /* Naming ob_has_default_model here links embedded.c (and its registration of the built-in
     * model) into every program that loads models, not only those that ask for it. */
    if (path && !strcmp(path, OB_DEFAULT_MODEL) && !ob_has_default_model())
        return ERR("model '%s': this build has no built-in model (built with EMBED_MODEL=)", path);
    ob_model_t *m = calloc(1, sizeof *m);
    if (!m) return ERR("model: out of memory");
    if (ob_gguf_open(path, &m->gguf, err, errlen) != 0) goto fail;
    if (ob_model_check_requires(m->gguf, build_features, err, errlen)) goto fail;
    const char *arch = NULL;
    if (ob_gguf_get_str(m->gguf, "general.architecture", &arch, err, errlen) < 0) goto fail;
    if (!arch) { ERR("model '%s': key 'general.architecture' is missing", path); goto fail; }
    m->arch = ob_arch_by_gguf(arch);
    if (!m->arch) { ERR("model '%s': architecture '%s' is not supported (see `1bit registry`)", path, arch); goto fail; }
    m->info.arch = m->arch->gguf_name;
    if (read_hparams(m, err, errlen)) goto fail;

    m->be = ob_backend_by_name(p->device, err, errlen);
    if (!m->be) goto fail;
    ob_backend_opts bo = {p->n_threads, 0};
    if (m->be->init(m->be, &bo, err, errlen) != 0) { free(m->be); m->be = NULL; goto fail; }
    if (check_device_memory(m, path, err, errlen)) goto fail;
    if (load_tensors(m, err, errlen)) goto fail;
    if (ob_tokenizer_load_gguf(m->gguf, &m->tok, err, errlen) != 0) goto fail;

    const char *gname = NULL;
    ob_gguf_get_str(m->gguf, "general.name", &gname, err, errlen);
    if (!gname) {
        const char *slash = strrchr(path, '/');
        gname = slash ? slash + 1 : path;
    }
    m->name = strdup(gname);
    ob_hparams *hp = &m->hp;
    m->info.name = m->name;
    m->info.n_vocab = hp->n_vocab;
    m->info.n_embd = hp->n_embd;
    m->info.n_layer = hp->n_layer;
    m->info.n_head = hp->n_head;
    m->info.n_head_kv = hp->n_head_kv;
    m->info.head_dim = hp->head_dim;
    m->info.n_ff = hp->n_ff;
    m->info.n_ctx_train = hp->n_ctx_train;
    m->info.device = m->be->name;
    m->info.file_type = dominant_type(m->gguf);
    m->info.type_name = ob_type_name(m->info.file_type);
    for (int64_t i = 0; i < ob_gguf_n_tensors(m->gguf); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(m->gguf, i);
        m->info.n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->info.size_bytes += t->size;
    }
    *out = m;
    return 0;
fail:
    ob_model_free(m);
    return -1;
}

void ob_model_free(ob_model_t *m) {
    if (!m) return;
    if (m->tok) ob_tokenizer_free(m->tok);
    if (m->be) {
        m->be->free(m->be);
        free(m->be);
    }
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->name);
    ob_gguf_close(m->gguf);
    free(m);
}

const ob_model_info *ob_model_get_info(const ob_model_t *m) { return &m->info; }
const ob_tokenizer_t *ob_model_tokenizer(const ob_model_t *m) { return m->tok; }

const char *ob_model_meta_str(const ob_model_t *m, const char *key) {
    const char *s = NULL;
    char e[8];
    if (ob_gguf_get_str(m->gguf, key, &s, e, sizeof e) != 1) return NULL;
    return s;
}

int64_t ob_model_meta_int(const ob_model_t *m, const char *key, int64_t def) {
    int64_t v;
    char e[8];
    if (ob_gguf_get_i64(m->gguf, key, &v, e, sizeof e) != 1) return def;
    return v;
}
