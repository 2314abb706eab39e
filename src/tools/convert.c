/* convert.c — `1bit convert`: a Hugging Face checkpoint (or random weights of a config's
 * shape) -> a GGUF file that llama.cpp loads too.
 *
 * Owns: the tensor plan (which GGUF tensors, their shapes and output types), the per-tensor
 * transforms llama.cpp applies (q/k row permutation for NORM rope, BitNet ternarization, llama3
 * rope factors as rope_freqs.weight), random weights for speed work, and streaming each tensor
 * through the writer one at a time (peak memory: one tensor as float32).
 * Does not own: the GGUF format, quant layouts, the vocabulary keys (convert_vocab.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "engine/arch.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "format/safetensors.h"
#include "tools/convert.h"
#include "tools/quant_plan.h"
#include "tools/tools.h"
#include "util/err.h"

enum { SRC_HF, SRC_RANDOM, SRC_ROPE_FREQS };
enum { ROLE_LINEAR, ROLE_EMBD, ROLE_OUTPUT, ROLE_NORM, ROLE_BIAS };

typedef struct {
    char name[96];           /* GGUF name */
    const ob_st_tensor *st;  /* source tensor (SRC_HF) */
    int src, role, type;
    int n_dims;
    int64_t ne[2];
    int permute_heads;       /* > 0: permute rows for NORM rope with this many heads */
    const ob_st_tensor *st_scale; /* packed BitNet weight (U8): its weight_scale, else NULL */
} cv_tensor;

typedef struct {
    const ob_arch *arch;
    ob_cv_hparams hp;
    ob_st_t *st;
    cv_tensor *t;
    int n, cap;
    uint64_t seed;
    float *buf;              /* float32 staging for the tensor being written */
    size_t buf_cap;
} cv_state;

/* --type choices and their general.file_type: llama.cpp's LLAMA_FTYPE_* values; 40 is
 * bitnet.cpp's MOSTLY_I2_S (what Microsoft's file says); lean4 has no llama.cpp value and
 * takes its type id. */
static const struct { int type; uint32_t ftype; } ftypes[] = {
    {OB_TYPE_F32, 0}, {OB_TYPE_F16, 1}, {OB_TYPE_Q4_0, 2}, {OB_TYPE_Q8_0, 7},
    {OB_TYPE_BF16, 32}, {OB_TYPE_TQ1_0, 36}, {OB_TYPE_TQ2_0, 37}, {OB_TYPE_I2_S, 40},
    {OB_TYPE_LEAN4, OB_TYPE_LEAN4},
    /* every matrix of one type: llama-quantize --pure labels such files with these */
    {OB_TYPE_Q4_1, 3}, {OB_TYPE_Q5_0, 8}, {OB_TYPE_Q5_1, 9}, {OB_TYPE_Q2_K, 10}, {OB_TYPE_Q3_K, 12},
    {OB_TYPE_Q4_K, 15}, {OB_TYPE_Q5_K, 17}, {OB_TYPE_Q6_K, 18}, {OB_TYPE_IQ4_NL, 25}, {OB_TYPE_IQ4_XS, 30},
    {OB_TYPE_MXFP4, 38},
};

static int add_tensor(cv_state *s, const char *name, int src, int role, int n_dims, int64_t ne0, int64_t ne1) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        cv_tensor *nt = realloc(s->t, (size_t)s->cap * sizeof *nt);
        if (!nt) return -1;
        s->t = nt;
    }
    cv_tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->src = src;
    t->role = role;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    return 0;
}

static int role_of(const char *gguf) {
    if (strcmp(gguf, "token_embd.weight") == 0) return ROLE_EMBD;
    if (strcmp(gguf, "output.weight") == 0) return ROLE_OUTPUT;
    size_t l = strlen(gguf);
    if (l > 5 && strcmp(gguf + l - 5, ".bias") == 0) return ROLE_BIAS;
    if (strstr(gguf, "norm")) return ROLE_NORM;
    return ROLE_LINEAR;
}

/* The expected tensor list of an architecture, as (name, n_in, n_out) with n_out 0 for vectors. */
static int plan_expected(cv_state *s, int with_output) {
    ob_cv_hparams *hp = &s->hp;
    unsigned fl = s->arch->flags;
    int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc = add_tensor(s, "token_embd.weight", SRC_RANDOM, ROLE_EMBD, 2, d, hp->n_vocab);
    rc |= add_tensor(s, "output_norm.weight", SRC_RANDOM, ROLE_NORM, 1, d, 1);
    if (with_output) rc |= add_tensor(s, "output.weight", SRC_RANDOM, ROLE_OUTPUT, 2, d, hp->n_vocab);
    for (int il = 0; il < hp->n_layer; il++) {
        struct { const char *n; int64_t in, out; int on; } L[] = {
            {"attn_norm.weight", d, 0, 1},
            {"attn_q.weight", d, qd, 1},
            {"attn_k.weight", d, kvd, 1},
            {"attn_v.weight", d, kvd, 1},
            {"attn_q.bias", qd, 0, (fl & OB_ARCH_QKV_BIAS) != 0},
            {"attn_k.bias", kvd, 0, (fl & OB_ARCH_QKV_BIAS) != 0},
            {"attn_v.bias", kvd, 0, (fl & OB_ARCH_QKV_BIAS) != 0},
            {"attn_q_norm.weight", hp->head_dim, 0, (fl & OB_ARCH_QK_NORM) != 0},
            {"attn_k_norm.weight", hp->head_dim, 0, (fl & OB_ARCH_QK_NORM) != 0},
            {"attn_sub_norm.weight", qd, 0, (fl & OB_ARCH_SUB_NORMS) != 0},
            {"attn_output.weight", qd, d, 1},
            {"ffn_norm.weight", d, 0, 1},
            {"ffn_gate.weight", d, hp->n_ff, 1},
            {"ffn_up.weight", d, hp->n_ff, 1},
            {"ffn_sub_norm.weight", hp->n_ff, 0, (fl & OB_ARCH_SUB_NORMS) != 0},
            {"ffn_down.weight", hp->n_ff, d, 1},
        };
        for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
            if (!L[k].on) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, L[k].n);
            rc |= add_tensor(s, name, SRC_RANDOM, role_of(name), L[k].out ? 2 : 1, L[k].in, L[k].out ? L[k].out : 1);
            if (fl & OB_ARCH_PERMUTE_QK) {
                if (strcmp(L[k].n, "attn_q.weight") == 0) s->t[s->n - 1].permute_heads = hp->n_head;
                if (strcmp(L[k].n, "attn_k.weight") == 0) s->t[s->n - 1].permute_heads = hp->n_head_kv;
            }
        }
    }
    return rc;
}

/* Binds the plan to the checkpoint: every expected tensor must be there with the right shape,
 * and every checkpoint tensor must be expected (a silently dropped tensor is a wrong model). */
static cv_tensor *plan_find(cv_state *s, const char *gguf_name) {
    for (int k = 0; k < s->n; k++)
        if (strcmp(s->t[k].name, gguf_name) == 0) return &s->t[k];
    return NULL;
}

/* A packed BitNet checkpoint (transformers' BitLinear, "offline" mode) stores each linear as
 * U8 [ceil(out/4), in] plus "<name>.weight_scale", a one-element float. Binds the scale to
 * its weight; 1 if st was such a scale, 0 if not, -1 on error. */
static int bind_weight_scale(cv_state *s, const ob_st_tensor *st, char *err, size_t errlen) {
    size_t l = strlen(st->name);
    const char *suffix = ".weight_scale";
    if (l <= strlen(suffix) || strcmp(st->name + l - strlen(suffix), suffix) != 0) return 0;
    char hf[512], g[128];
    snprintf(hf, sizeof hf, "%.*s.weight", (int)(l - strlen(suffix)), st->name);
    cv_tensor *t = ob_arch_map_tensor(hf, g, sizeof g) == 0 ? plan_find(s, g) : NULL;
    if (!t || t->role != ROLE_LINEAR || !(s->arch->flags & OB_ARCH_TERNARY))
        return ERR("convert: checkpoint tensor '%s' is not the weight_scale of a ternary linear weight of %s", st->name,
                   s->arch->hf_class);
    if (st->n_elements != 1 || (st->dtype != OB_ST_F32 && st->dtype != OB_ST_BF16 && st->dtype != OB_ST_F16))
        return ERR("convert: '%s' must hold one float (f32, bf16 or f16), not %lld %s values", st->name,
                   (long long)st->n_elements, ob_st_dtype_name(st->dtype));
    t->st_scale = st;
    return 1;
}

static int plan_bind(cv_state *s, char *err, size_t errlen) {
    for (int64_t i = 0; i < ob_st_n_tensors(s->st); i++) {
        const ob_st_tensor *st = ob_st_tensor_at(s->st, i);
        char g[128];
        if (strstr(st->name, "rotary_emb.inv_freq")) continue; /* derived, not a weight */
        int r = bind_weight_scale(s, st, err, errlen);
        if (r < 0) return -1;
        if (r) continue;
        if (ob_arch_map_tensor(st->name, g, sizeof g) != 0)
            return ERR("convert: checkpoint tensor '%s' is not part of architecture %s", st->name, s->arch->hf_class);
        cv_tensor *t = plan_find(s, g);
        if (!t) return ERR("convert: checkpoint tensor '%s' (%s) is not expected for %s with this config", st->name, g, s->arch->hf_class);
        int64_t want_rows = t->n_dims == 2 ? t->ne[1] : 1;
        int packed = st->dtype == OB_ST_U8;
        if (st->dtype == OB_ST_I8 || (packed && (t->role != ROLE_LINEAR || !(s->arch->flags & OB_ARCH_TERNARY))))
            return ERR("convert: tensor '%s' holds integer weights (dtype %s); only the linear weights of a packed BitNet checkpoint may (U8)",
                       st->name, ob_st_dtype_name(st->dtype));
        if (packed) want_rows = (want_rows + 3) / 4; /* 4 ternary values per byte, along the output dimension */
        int ok = t->n_dims == 2 ? (st->n_dims == 2 && st->shape[0] == want_rows && st->shape[1] == t->ne[0])
                                : (st->n_elements == t->ne[0]);
        if (!ok) return ERR("convert: tensor '%s' has the wrong shape for config.json (expected %lld x %lld)", st->name,
                            (long long)want_rows, (long long)t->ne[0]);
        t->st = st;
        t->src = SRC_HF;
    }
    for (int k = 0; k < s->n; k++) {
        const cv_tensor *t = &s->t[k];
        if (t->src != SRC_HF) return ERR("convert: the checkpoint lacks tensor '%s'", t->name);
        if ((t->st->dtype == OB_ST_U8) != (t->st_scale != NULL))
            return ERR(t->st_scale ? "convert: '%s' has a weight_scale but is not packed (dtype %s)"
                                   : "convert: packed weight '%s' (dtype %s) has no weight_scale",
                       t->st->name, ob_st_dtype_name(t->st->dtype));
    }
    return 0;
}

static int out_type(const cv_state *s, const cv_tensor *t, int want) {
    if (t->n_dims == 1 || t->src == SRC_ROPE_FREQS) return OB_TYPE_F32;
    int type = want;
    /* Embedding and output stay F16 in ternary files: they are not ternary (llama.cpp and
     * bitnet.cpp do the same). */
    int ternary = want == OB_TYPE_TQ1_0 || want == OB_TYPE_TQ2_0 || want == OB_TYPE_I2_S;
    if (ternary && (t->role == ROLE_EMBD || t->role == ROLE_OUTPUT)) type = OB_TYPE_F16;
    const ob_type_traits *tr = ob_type_get(type);
    /* rows not a whole number of blocks: llama.cpp's fallback (q4_K -> q5_0, q6_K -> q8_0, ...,
     * f16 for 32-element types); ternary rows stay exact in f16 */
    if (t->ne[0] % tr->block_size != 0) type = ternary ? OB_TYPE_F16 : ob_qplan_fallback(type, t->ne[0]);
    return type;
}

/* ---- random weights --------------------------------------------------------------------- */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Approximately normal(0, 1): sum of four 16-bit uniforms (Irwin-Hall), rescaled. Fast enough
 * for 8B-parameter models; the shape of the distribution does not matter for speed work. */
static void fill_random(float *dst, int64_t n, float mean, float std, uint64_t seed) {
    const float k = std * (float)(sqrt(12.0 / 4.0) / 65536.0);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&seed);
        int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                      (int32_t)(r >> 48) - 2 * 65536;
        dst[i] = mean + k * (float)sum;
    }
}

static uint64_t name_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- transforms ------------------------------------------------------------------------- */
/* Rows of each head reordered (h, j, i) -> (h, i, j): HF's rotate_half pairs (i, i+hd/2)
 * become adjacent pairs (2i, 2i+1), which is what NORM rope rotates. */
static int permute_rows(float *w, int64_t rows, int64_t cols, int n_heads) {
    int64_t hd = rows / n_heads, half = hd / 2;
    float *tmp = malloc((size_t)(hd * cols) * sizeof(float));
    if (!tmp) return -1;
    for (int h = 0; h < n_heads; h++) {
        float *head = w + (size_t)(h * hd * cols);
        memcpy(tmp, head, (size_t)(hd * cols) * sizeof(float));
        for (int64_t i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                memcpy(head + (size_t)((2 * i + j) * cols), tmp + (size_t)((j * half + i) * cols), (size_t)cols * sizeof(float));
    }
    free(tmp);
    return 0;
}

/* BitNet b1.58 weight quantization, as transformers computes it in float32:
 * s = 1 / max(mean|w|, 1e-5); w = clamp(round(w*s), -1, 1) / s. */
static void ternarize(float *w, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += fabsf(w[i]);
    float mean = (float)(sum / (double)n);
    float s = 1.0f / (mean > 1e-5f ? mean : 1e-5f);
    for (int64_t i = 0; i < n; i++) {
        float q = nearbyintf(w[i] * s);
        q = q > 1 ? 1 : q < -1 ? -1 : q + 0.0f; /* + 0.0f: -0 -> +0, so f32 files match packed checkpoints' */
        w[i] = q / s;
    }
}

/* A packed BitNet weight back to floats, as transformers' unpack_weights + BitLinear compute
 * it: with R = ceil(out/4) packed rows, output row i*R + r comes from bits 2i..2i+1 of packed
 * row r, the trit is bits - 1, and BitLinear divides its output by weight_scale, so the
 * weight is trit / weight_scale: ternary already, with no absmean step left to apply. */
static int unpack_bitnet(const cv_tensor *t, float *w, char *err, size_t errlen) {
    float ws;
    if (ob_st_to_f32(t->st_scale, &ws, err, errlen)) return -1;
    if (!isfinite(ws) || ws <= 0) return ERR("convert: '%s' is %g; a weight_scale must be finite and > 0", t->st_scale->name, ws);
    int64_t rows = t->ne[1], cols = t->ne[0], R = t->st->shape[0];
    const uint8_t *p = t->st->data;
    for (int64_t r = 0; r < R; r++)
        for (int i = 0; i < 4; i++) {
            int64_t row = i * R + r;
            for (int64_t c = 0; c < cols; c++) {
                int code = (p[r * cols + c] >> (2 * i)) & 3;
                if (code == 3 || (row >= rows && code != 1))
                    return ERR("convert: '%s': packed row %lld, column %lld holds code %d%s; the checkpoint is corrupt",
                               t->st->name, (long long)r, (long long)c, code,
                               code == 3 ? " (trits are stored as 0, 1, 2)" : " in padding past the last output row");
                if (row < rows) w[row * cols + c] = (float)(code - 1) / ws;
            }
        }
    return 0;
}

/* llama3 rope scaling as per-frequency divisors (GGUF rope_freqs.weight, llama.cpp's form). */
static void llama3_factors(const ob_cv_hparams *hp, float *out) {
    int n = hp->head_dim / 2;
    double lo_wl = hp->orig_ctx / hp->low_freq_factor, hi_wl = hp->orig_ctx / hp->high_freq_factor;
    for (int i = 0; i < n; i++) {
        double freq = 1.0 / pow(hp->theta, (2.0 * i) / hp->head_dim);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl) {
            out[i] = 1.0f;
        } else if (wl > lo_wl) {
            out[i] = (float)hp->rope_factor;
        } else {
            double smooth = (hp->orig_ctx / wl - hp->low_freq_factor) / (hp->high_freq_factor - hp->low_freq_factor);
            out[i] = (float)(1.0 / ((1 - smooth) / hp->rope_factor + smooth));
        }
    }
}

static int fill_tensor(void *ctx, int64_t idx, void *dst, size_t size, char *err, size_t errlen) {
    cv_state *s = ctx;
    cv_tensor *t = &s->t[idx];
    int64_t n = t->ne[0] * t->ne[1];
    if ((size_t)n > s->buf_cap) {
        free(s->buf);
        s->buf = malloc((size_t)n * sizeof(float));
        s->buf_cap = s->buf ? (size_t)n : 0;
        if (!s->buf) return ERR("convert: out of memory for tensor '%s' (%lld floats)", t->name, (long long)n);
    }
    float *f = s->buf;
    if (t->src == SRC_HF && t->st_scale) {
        if (unpack_bitnet(t, f, err, errlen)) return -1;
    } else if (t->src == SRC_HF) {
        if (ob_st_to_f32(t->st, f, err, errlen)) return -1;
    } else if (t->src == SRC_ROPE_FREQS) {
        llama3_factors(&s->hp, f);
    } else {
        uint64_t seed = name_hash(t->name, s->seed);
        if (t->role == ROLE_NORM) fill_random(f, n, 1.0f, 0.05f, seed);
        else if (t->role == ROLE_BIAS) fill_random(f, n, 0.0f, 0.02f, seed);
        else fill_random(f, n, 0.0f, t->role == ROLE_LINEAR ? 0.02f : 0.05f, seed);
    }
    if (t->permute_heads > 0 && permute_rows(f, t->ne[1], t->ne[0], t->permute_heads))
        return ERR("convert: out of memory permuting '%s'", t->name);
    if ((s->arch->flags & OB_ARCH_TERNARY) && t->role == ROLE_LINEAR && !t->st_scale) ternarize(f, n);
    if (ob_type_tensor_size(t->type, t->ne[0], t->ne[1]) != size)
        return ERR("convert: internal size mismatch for '%s'", t->name);
    if (ob_tensor_quantize(t->type, f, dst, t->ne[0], t->ne[1]))
        return ERR("convert: this build cannot write type %s (tensor '%s')", ob_type_name(t->type), t->name);
    return 0;
}

/* Types of a llama-quantize mix for every tensor, from the f32 values convert produces;
 * -1 out of memory, 1 the mix cannot be made without an importance matrix (said on stderr). */
static int plan_mix(cv_state *s, const ob_qmix *mix) {
    ob_qplan p = {0};
    p.mix = mix;
    p.output_type = p.token_embd_type = -1;
    p.arch = s->arch->gguf_name;
    p.n_layer = s->hp.n_layer;
    p.n_head = s->hp.n_head;
    p.n_head_kv = s->hp.n_head_kv;
    const char **names = malloc((size_t)s->n * sizeof *names);
    int *n_dims = malloc((size_t)s->n * sizeof *n_dims), *cur = malloc((size_t)s->n * sizeof *cur);
    int *types = malloc((size_t)s->n * sizeof *types);
    int64_t(*ne)[4] = malloc((size_t)s->n * sizeof *ne);
    int rc = names && n_dims && cur && types && ne ? 0 : -1;
    for (int k = 0; !rc && k < s->n; k++) {
        names[k] = s->t[k].name;
        n_dims[k] = s->t[k].n_dims;
        cur[k] = OB_TYPE_F32;
        ne[k][0] = s->t[k].ne[0], ne[k][1] = s->t[k].ne[1], ne[k][2] = ne[k][3] = 1;
    }
    if (!rc) ob_qplan_tensors(&p, s->n, names, n_dims, (const int64_t(*)[4])ne, cur, types);
    for (int k = 0; !rc && k < s->n; k++) {
        s->t[k].type = types[k];
        if (ob_qplan_needs_imatrix(&p, names[k], types[k])) {
            fprintf(stderr, "convert: %s needs an importance matrix ('%s' is %s): convert to f16, then use `1bit quantize --imatrix`\n",
                    mix->name, names[k], ob_type_name(types[k]));
            rc = 1;
        }
    }
    free(names);
    free(n_dims);
    free(cur);
    free(types);
    free(ne);
    return rc;
}

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit convert HF_DIR -o OUT.gguf [--type T]\n"
            "       1bit convert --random CONFIG.json -o OUT.gguf [--type T] [--seed N]\n"
            "  HF_DIR     folder with config.json, *.safetensors, tokenizer.json, tokenizer_config.json\n"
            "  --type T   f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_K | q3_K | q4_K | q5_K |\n"
            "             q6_K | iq4_nl | iq4_xs | mxfp4 | tq1_0 | tq2_0 | i2_s | lean4 (default f16): every\n"
            "             matrix of that type; 1-D tensors stay f32; ternary types keep token_embd/output\n"
            "             in f16. Or a llama-quantize mix (Q4_K_M, Q5_K_S, Q3_K_L, Q2_K_S, MXFP4_MOE, ...):\n"
            "             per-tensor types as llama-quantize chooses them (`1bit quantize`)\n"
            "  --random   random weights of the config's shape (statistics like a trained model's), a\n"
            "             synthetic byte-level vocabulary; for speed measurements\n");
    return 2;
}

int ob_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *outp = NULL, *type_name = "f16", *random_cfg = NULL;
    uint64_t seed = 1234;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-o") || !strcmp(a, "--outfile")) && i + 1 < argc) outp = argv[++i];
        else if ((!strcmp(a, "--type") || !strcmp(a, "--outtype")) && i + 1 < argc) type_name = argv[++i];
        else if (!strcmp(a, "--random") && i + 1 < argc) random_cfg = argv[++i];
        else if (!strcmp(a, "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        else if (a[0] == '-') { fprintf(stderr, "convert: unknown or incomplete option '%s'\n", a); return usage(); }
        else if (!in) in = a;
        else { fprintf(stderr, "convert: unexpected argument '%s'\n", a); return usage(); }
    }
    if ((!in && !random_cfg) || (in && random_cfg) || !outp) return usage();
    int want = ob_type_from_name(type_name);
    uint32_t ftype = 0;
    int known = 0;
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (ftypes[i].type == want) { ftype = ftypes[i].ftype; known = 1; }
    const ob_qmix *mix = known ? NULL : ob_qmix_by_name(type_name); /* a type name wins: "q4_K" is pure q4_K */
    if (mix) {
        want = mix->base;
        ftype = (uint32_t)mix->ftype;
        known = 1;
    }
    if (!known) {
        fprintf(stderr, "convert: --type '%s' is neither a weight type (see --help) nor a llama-quantize mix (%s)\n", type_name,
                ob_qmix_names());
        return 2;
    }
    if (!ob_tensor_can_quantize(want)) {
        fprintf(stderr, "convert: --type %s needs lean support, which this build lacks (built with LEAN=0)\n", type_name);
        return 2;
    }

    char err[1024] = "", path[4096];
    cv_state s = {0};
    s.seed = seed;
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    json_t *cfg = NULL;
    int rc = 1;
    snprintf(path, sizeof path, "%s/config.json", in ? in : ".");
    if (random_cfg) snprintf(path, sizeof path, "%s", random_cfg);
    if (!(cfg = ob_cv_load_json(path, err, sizeof err))) goto done;
    json_t *archs = json_object_get(cfg, "architectures");
    const char *hf_class = json_string_value(json_array_get(archs, 0));
    s.arch = ob_arch_by_hf(hf_class);
    if (!s.arch) {
        snprintf(err, sizeof err, "%s: architecture '%s' is not supported (see `1bit registry`)", path, hf_class ? hf_class : "(none)");
        goto done;
    }
    if (ob_cv_read_config(cfg, path, &s.hp, err, sizeof err)) goto done;
    if (random_cfg) {
        if (ob_cv_vocab_synthetic(w, &s.hp, err, sizeof err)) goto done;
        if (plan_expected(&s, s.hp.tied != 1)) goto oom;
    } else {
        if (ob_st_open(in, &s.st, err, sizeof err)) goto done;
        int has_head = ob_st_find(s.st, "lm_head.weight") != NULL;
        if (ob_cv_vocab_from_dir(w, in, &s.hp, err, sizeof err)) goto done;
        if (plan_expected(&s, has_head)) goto oom;
        if (plan_bind(&s, err, sizeof err)) goto done;
    }
    if (strcmp(s.hp.rope_type, "llama3") == 0 && add_tensor(&s, "rope_freqs.weight", SRC_ROPE_FREQS, ROLE_NORM, 1, s.hp.head_dim / 2, 1))
        goto oom;

    const char *an = s.arch->gguf_name;
    char key[256];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", an, suffix), key)
    ob_gguf_writer_set_str(w, "general.architecture", an);
    const char *base = in ? strrchr(in, '/') : NULL;
    ob_gguf_writer_set_str(w, "general.name", in ? (base && base[1] ? base + 1 : in) : "random");
    ob_gguf_writer_set_u32(w, "general.file_type", ftype);
    ob_gguf_writer_set_u32(w, "general.quantization_version", 2);
    ob_gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)s.hp.n_vocab);
    ob_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s.hp.n_ctx);
    ob_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s.hp.n_embd);
    ob_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s.hp.n_layer);
    ob_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s.hp.n_ff);
    ob_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s.hp.n_head);
    ob_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s.hp.n_head_kv);
    ob_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s.hp.head_dim);
    ob_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s.hp.head_dim);
    ob_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)s.hp.head_dim);
    ob_gguf_writer_set_f32(w, KEY("rope.freq_base"), (float)s.hp.theta);
    ob_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)s.hp.eps);
    if (strcmp(s.hp.rope_type, "linear") == 0) {
        ob_gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear");
        ob_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)s.hp.rope_factor);
    }
#undef KEY
    int n_lean = 0;
    int pm = mix ? plan_mix(&s, mix) : 0;
    if (pm < 0) goto oom;
    if (pm > 0) {
        snprintf(err, sizeof err, "%s needs an importance matrix", mix->name);
        goto done;
    }
    for (int k = 0; k < s.n; k++) {
        cv_tensor *t = &s.t[k];
        if (!mix) t->type = out_type(&s, t, want);
        n_lean += t->type == OB_TYPE_LEAN4;
        int64_t ne[2] = {t->ne[0], t->ne[1]};
        if (ob_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, NULL, err, sizeof err) < 0) goto done;
    }
    if (n_lean) { /* readers without lean support refuse the file by this key (docs/lean.md) */
        const char *req[] = {"lean4"};
        ob_gguf_writer_set_arr_str(w, "1bit.requires", req, NULL, 1);
    }
    int64_t t0 = ob_time_us();
    if (ob_gguf_writer_write(w, outp, fill_tensor, &s, err, sizeof err)) goto done;
    fprintf(stderr, "convert: wrote %s (%s, %d tensors, %s) in %.1f s\n", outp, s.arch->gguf_name, s.n, type_name,
            (ob_time_us() - t0) / 1e6);
    rc = 0;
    goto done;
oom:
    snprintf(err, sizeof err, "convert: out of memory");
done:
    if (rc) fprintf(stderr, "convert: %s\n", err);
    free(s.t);
    free(s.buf);
    ob_st_close(s.st);
    ob_gguf_writer_free(w);
    json_decref(cfg);
    return rc;
}
