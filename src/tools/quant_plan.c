/* quant_plan.c — llama-quantize's per-tensor type rules (quant_plan.h).
 *
 * Owns: the mix table and the rules. They follow llama.cpp's src/llama-quant.cpp at commit
 * 80fb11a closely enough that a file we quantize has the same type in every tensor as the
 * file llama-quantize makes from the same input (tools/compat/formats.sh checks this):
 * tensor categories by name, the layer counters and their order, use_more_bits, the n_gqa /
 * n_expert / 70B conditions, fallbacks. Mixes whose types this build cannot write (IQ1_*,
 * IQ2_*, IQ3_*, Q1_0, Q2_0, NVFP4) are not listed.
 * Does not own: quantization or files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "tools/quant_plan.h"

/* llama.cpp's LLAMA_FTYPE_* numbers, the ones used below */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_Q2_K_S = 21, FT_IQ4_NL = 25, FT_IQ4_XS = 30,
    FT_BF16 = 32, FT_TQ1_0 = 36, FT_TQ2_0 = 37, FT_MXFP4_MOE = 38,
    FT_I2_S = 40,            /* bitnet.cpp's LLAMA_FTYPE_MOSTLY_I2_S, what Microsoft's file says */
    FT_LEAN4 = OB_TYPE_LEAN4 /* 1bit's own (docs/lean.md): no llama.cpp number, its type id */
};

static const ob_qmix mixes[] = {
    {"Q4_0", FT_Q4_0, OB_TYPE_Q4_0},       {"Q4_1", FT_Q4_1, OB_TYPE_Q4_1},
    {"MXFP4_MOE", FT_MXFP4_MOE, OB_TYPE_MXFP4}, {"Q5_0", FT_Q5_0, OB_TYPE_Q5_0},
    {"Q5_1", FT_Q5_1, OB_TYPE_Q5_1},       {"TQ1_0", FT_TQ1_0, OB_TYPE_TQ1_0},
    {"TQ2_0", FT_TQ2_0, OB_TYPE_TQ2_0},    {"Q2_K", FT_Q2_K, OB_TYPE_Q2_K},
    {"Q2_K_S", FT_Q2_K_S, OB_TYPE_Q2_K},   {"Q3_K", FT_Q3_K_M, OB_TYPE_Q3_K},
    {"Q3_K_S", FT_Q3_K_S, OB_TYPE_Q3_K},   {"Q3_K_M", FT_Q3_K_M, OB_TYPE_Q3_K},
    {"Q3_K_L", FT_Q3_K_L, OB_TYPE_Q3_K},   {"IQ4_NL", FT_IQ4_NL, OB_TYPE_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, OB_TYPE_IQ4_XS}, {"Q4_K", FT_Q4_K_M, OB_TYPE_Q4_K},
    {"Q4_K_S", FT_Q4_K_S, OB_TYPE_Q4_K},   {"Q4_K_M", FT_Q4_K_M, OB_TYPE_Q4_K},
    {"Q5_K", FT_Q5_K_M, OB_TYPE_Q5_K},     {"Q5_K_S", FT_Q5_K_S, OB_TYPE_Q5_K},
    {"Q5_K_M", FT_Q5_K_M, OB_TYPE_Q5_K},   {"Q6_K", FT_Q6_K, OB_TYPE_Q6_K},
    {"Q8_0", FT_Q8_0, OB_TYPE_Q8_0},       {"F16", FT_F16, OB_TYPE_F16},
    {"BF16", FT_BF16, OB_TYPE_BF16},       {"F32", FT_F32, OB_TYPE_F32},
    {"I2_S", FT_I2_S, OB_TYPE_I2_S},       {"LEAN4", FT_LEAN4, OB_TYPE_LEAN4},
};
#define N_MIXES (int)(sizeof mixes / sizeof mixes[0])

const ob_qmix *ob_qmix_by_name(const char *name) {
    if (!name || !*name) return NULL;
    for (int i = 0; i < N_MIXES; i++)
        if (strcasecmp(mixes[i].name, name) == 0) return &mixes[i];
    char *end;
    long v = strtol(name, &end, 10);
    if (*end == 0) /* a number: the first mix of that ftype, as llama-quantize */
        for (int i = 0; i < N_MIXES; i++)
            if (mixes[i].ftype == v) return &mixes[i];
    return NULL;
}

const ob_qmix *ob_qmix_for_type(int t) {
    /* the first listed mix of that base: Q3_K (= Q3_K_M), Q4_K (= Q4_K_M), Q5_K (= Q5_K_M) */
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].base == t) return &mixes[i];
    return NULL;
}

const char *ob_qmix_names(void) {
    static char buf[512];
    if (!buf[0])
        for (int i = 0; i < N_MIXES; i++) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "%s%s", i ? ", " : "", mixes[i].name);
        }
    return buf;
}

/* ---- categories, by name as llama.cpp --------------------------------------------------- */

enum { C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN, C_OUTPUT, C_OTHER };

static int is_token_embd(const char *n) { return !strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight"); }

static int category(const char *n) {
    if (!strcmp(n, "output.weight")) return C_OUTPUT;
    if (is_token_embd(n)) return C_TOKEN_EMBD;
    static const struct { const char *s; int c; } subs[] = {
        {"attn_qkv.weight", C_ATTN_QKV}, {"attn_kv_b.weight", C_ATTN_KV_B}, {"attn_v.weight", C_ATTN_V},
        {"attn_k.weight", C_ATTN_K},     {"attn_q.weight", C_ATTN_Q},       {"attn_output.weight", C_ATTN_OUT},
        {"ffn_up", C_FFN_UP},            {"ffn_gate", C_FFN_GATE},          {"ffn_down", C_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strstr(n, subs[i].s)) return subs[i].c;
    return C_OTHER;
}

static int is_attn_v(int c) { return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B; }

/* llama.cpp quantizes 2-D and 3-D tensors whose name ends in "weight", except norms, the MoE
 * router and a list of small or positional tensors. */
static int allows_quantization(const ob_qplan *p, const char *n, int n_dims) {
    if (n_dims < 2) return 0;
    size_t l = strlen(n);
    if (l < 6 || strcmp(n + l - 6, "weight") != 0) return 0;
    if (strstr(n, "_norm.weight")) return 0;
    if (p->leave_output && !strcmp(n, "output.weight")) return 0;
    static const char *never[] = {"ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
                                  "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
                                  "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
                                  "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
                                  "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
                                  "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
                                  "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
                                  ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(n, never[i])) return 0;
    if (!strcmp(n, "position_embd.weight") || !strcmp(n, "token_types.weight")) return 0;
    return 1;
}

static int layer_of(const char *n) {
    int l = -1;
    if (sscanf(n, "blk.%d.", &l) != 1) return -1;
    return l;
}

static const char *const *order_names; /* qsort has no context argument in C17 */

static int order_cmp(const void *a, const void *b) {
    const char *na = order_names[*(const int *)a], *nb = order_names[*(const int *)b];
    int la = layer_of(na), lb = layer_of(nb);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(na, nb);
}

void ob_qplan_order(const char *const *names, int *idx, int n) {
    for (int i = 0; i < n; i++) idx[i] = i;
    order_names = names;
    qsort(idx, (size_t)n, sizeof *idx, order_cmp);
    order_names = NULL;
}

void ob_qplan_begin(ob_qplan *p, const char *const *names, int n) {
    p->has_output = 0;
    p->n_attn_v = p->i_attn_v = p->i_ffn_down = p->i_ffn_gate = p->i_ffn_up = 0;
    for (int i = 0; i < n; i++) {
        int c = category(names[i]);
        if (is_attn_v(c)) p->n_attn_v++;
        if (c == C_OUTPUT) p->has_output = 1;
    }
}

int ob_qplan_fallback(int t, int64_t ncols) {
    const ob_type_traits *tr = ob_type_get(t);
    if (!tr || ncols % tr->block_size == 0) return t;
    int r;
    switch (t) {
    case OB_TYPE_IQ4_XS: r = OB_TYPE_IQ4_NL; break;
    case OB_TYPE_Q2_K: case OB_TYPE_Q3_K: case OB_TYPE_TQ1_0: case OB_TYPE_TQ2_0: r = OB_TYPE_Q4_0; break;
    case OB_TYPE_Q4_K: r = OB_TYPE_Q5_0; break;
    case OB_TYPE_Q5_K: r = OB_TYPE_Q5_1; break;
    case OB_TYPE_Q6_K: r = OB_TYPE_Q8_0; break;
    default: r = t; break; /* a 32-block type: nothing smaller to go to */
    }
    return ncols % ob_type_get(r)->block_size == 0 ? r : OB_TYPE_F16;
}

static int is_quantized(int t) { return t != OB_TYPE_F32 && t != OB_TYPE_F16 && t != OB_TYPE_BF16; }

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The layer of a per-layer tensor for the ffn rules: the running counter, or with experts the
 * number in the name (experts of one layer are not consecutive in every file). */
static int ffn_layer(const ob_qplan *p, int counter, const char *name) {
    if (p->n_expert > 1) {
        int l = layer_of(name);
        return l >= 0 && l < p->n_layer ? l : 0;
    }
    return counter;
}

/* llama.cpp's refinement of the mix's type t for one tensor of category c. */
static int mix_rules(ob_qplan *p, int t, const char *name, const int64_t *ne, int c) {
    const int ft = p->mix->ftype, n_gqa = p->n_head_kv > 0 ? p->n_head / p->n_head_kv : 1;
    const int falcon = p->arch && !strcmp(p->arch, "falcon");
    const int is_70b = p->arch && !strcmp(p->arch, "llama") && p->n_layer == 80 && p->n_head != p->n_head_kv;
    if (ft == FT_I2_S && (c == C_OUTPUT || c == C_TOKEN_EMBD)) { /* as bitnet.cpp: f16, not ternary */
        int o = c == C_OUTPUT || !p->has_output ? p->output_type : p->token_embd_type;
        return o >= 0 ? o : p->token_embd_type >= 0 && c == C_TOKEN_EMBD ? p->token_embd_type : OB_TYPE_F16;
    }
    if (c == C_OUTPUT || (!p->has_output && c == C_TOKEN_EMBD)) {
        if (p->output_type >= 0) return p->output_type;
        if (ft == FT_MXFP4_MOE) return OB_TYPE_Q8_0;
        if (falcon || ne[0] % ob_type_get(t)->block_size != 0) return OB_TYPE_Q8_0;
        return t != OB_TYPE_Q8_0 ? OB_TYPE_Q6_K : t;
    }
    if (ft == FT_MXFP4_MOE) return ne[2] > 1 ? OB_TYPE_MXFP4 : OB_TYPE_Q8_0;
    if (c == C_TOKEN_EMBD) {
        if (p->token_embd_type >= 0) return p->token_embd_type;
        if (ft == FT_TQ1_0 || ft == FT_TQ2_0) return OB_TYPE_Q4_K;
        return t;
    }
    if (is_attn_v(c)) {
        if (ft == FT_Q2_K) t = n_gqa >= 4 ? OB_TYPE_Q4_K : OB_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S && n_gqa >= 4) t = OB_TYPE_Q4_K;
        else if (ft == FT_Q3_K_M) t = p->i_attn_v < 2 ? OB_TYPE_Q5_K : OB_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = OB_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && n_gqa >= 4) t = OB_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(p->i_attn_v, p->n_attn_v)) t = OB_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && p->i_attn_v < 4) t = OB_TYPE_Q5_K;
        if (is_70b && (t == OB_TYPE_Q3_K || t == OB_TYPE_Q4_K)) t = OB_TYPE_Q5_K;
        if (p->n_expert == 8) t = OB_TYPE_Q8_0;
        p->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (p->n_expert == 8) t = OB_TYPE_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int il = ffn_layer(p, p->i_ffn_down, name), nl = p->n_layer;
        if (ft == FT_Q2_K) t = OB_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S) {
            if (il < nl / 8) t = OB_TYPE_Q4_K;
        } else if (ft == FT_Q3_K_M) {
            t = il < nl / 16 ? OB_TYPE_Q5_K : !falcon || use_more_bits(il, nl) ? OB_TYPE_Q4_K : OB_TYPE_Q3_K;
        } else if (ft == FT_Q3_K_L) {
            t = falcon ? OB_TYPE_Q4_K : OB_TYPE_Q5_K;
        } else if (ft == FT_Q4_K_M) {
            if (falcon) t = il < nl / 16 ? OB_TYPE_Q6_K : use_more_bits(il, nl) ? OB_TYPE_Q5_K : OB_TYPE_Q4_K;
            else if (use_more_bits(il, nl)) t = OB_TYPE_Q6_K;
        } else if (il < nl / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !p->has_imatrix) {
            t = OB_TYPE_Q5_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(il, nl)) {
            t = OB_TYPE_Q6_K;
        } else if (ft == FT_Q4_K_S && !falcon && il < nl / 8) {
            t = OB_TYPE_Q5_K;
        } else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && p->has_imatrix && il < nl / 8) {
            t = ft == FT_Q4_0 ? OB_TYPE_Q4_1 : OB_TYPE_Q5_1;
        }
        p->i_ffn_down++;
    } else if (c == C_ATTN_OUT) {
        if (!falcon) {
            if (p->n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S || ft == FT_Q4_K_M ||
                    ft == FT_IQ4_XS)
                    t = OB_TYPE_Q5_K;
            } else {
                if (ft == FT_Q2_K) t = OB_TYPE_Q3_K;
                else if (ft == FT_Q3_K_M) t = OB_TYPE_Q4_K;
                else if (ft == FT_Q3_K_L) t = OB_TYPE_Q5_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = OB_TYPE_Q4_K;
        }
    } else if (c == C_ATTN_QKV) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = OB_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M) t = OB_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M) t = OB_TYPE_Q6_K;
    } else if (c == C_FFN_GATE) {
        p->i_ffn_gate++;
    } else if (c == C_FFN_UP) {
        p->i_ffn_up++;
    }
    return t;
}

int ob_qplan_type(ob_qplan *p, const char *name, int n_dims, const int64_t *ne, int cur) {
    if (!allows_quantization(p, name, n_dims)) return cur;
    int c = category(name);
    if (p->token_embd_type >= 0 && c == C_TOKEN_EMBD) return p->token_embd_type;
    if (p->output_type >= 0 && c == C_OUTPUT) return p->output_type;
    int t = p->mix->base;
    if (!is_quantized(t)) return t;
    if (!p->pure) t = mix_rules(p, t, name, ne, c);
    return ob_qplan_fallback(t, ne[0]);
}

int ob_qplan_needs_imatrix(const ob_qplan *p, const char *name, int type) {
    if (is_token_embd(name) || !strcmp(name, "output.weight")) return 0;
    return type == OB_TYPE_Q2_K && p->mix->ftype == FT_Q2_K_S;
}

/* "<arch>.<key>" as an integer, the first element of a per-layer array, or 0 when absent. */
static int hparam(const ob_gguf_t *g, const char *arch, const char *key) {
    char k[256], e[128];
    int64_t v = 0;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (ob_gguf_get_i64(g, k, &v, e, sizeof e) == 1) return (int)v;
    const ob_gguf_value *a = ob_gguf_get(g, k);
    if (a && a->type == OB_GGUF_ARRAY && a->v.arr.n > 0 && a->v.arr.elem_type != OB_GGUF_STRING) return (int)ob_gguf_arr_i64(a, 0);
    return 0;
}

void ob_qplan_file(ob_qplan *p, const ob_gguf_t *g, int *types) {
    const char *arch = NULL;
    char e[128];
    if (ob_gguf_get_str(g, "general.architecture", &arch, e, sizeof e) != 1) arch = "";
    p->arch = arch;
    p->n_layer = hparam(g, arch, "block_count");
    p->n_head = hparam(g, arch, "attention.head_count");
    p->n_head_kv = hparam(g, arch, "attention.head_count_kv");
    p->n_expert = hparam(g, arch, "expert_count");
    if (p->n_head_kv <= 0) p->n_head_kv = p->n_head;
    int n = (int)ob_gguf_n_tensors(g);
    const char **names = malloc((size_t)(n + 1) * sizeof *names);
    int *n_dims = malloc((size_t)(n + 1) * sizeof *n_dims), *cur = malloc((size_t)(n + 1) * sizeof *cur);
    int64_t(*ne)[4] = malloc((size_t)(n + 1) * sizeof *ne);
    if (names && n_dims && cur && ne) {
        for (int i = 0; i < n; i++) {
            const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
            names[i] = t->name;
            n_dims[i] = t->n_dims;
            cur[i] = t->type;
            memcpy(ne[i], t->ne, sizeof ne[i]);
        }
        ob_qplan_tensors(p, n, names, n_dims, (const int64_t(*)[4])ne, cur, types);
    } else { /* out of memory: keep every type (the caller's checks still run) */
        for (int i = 0; i < n; i++) types[i] = ob_gguf_tensor_at(g, i)->type;
    }
    free(names);
    free(n_dims);
    free(cur);
    free(ne);
}

void ob_qplan_tensors(ob_qplan *p, int n, const char *const *names, const int *n_dims, const int64_t (*ne)[4], const int *cur,
                      int *types) {
    int *order = malloc((size_t)(n + 1) * sizeof *order);
    if (!order) {
        memcpy(types, cur, (size_t)n * sizeof *types);
        return;
    }
    ob_qplan_begin(p, names, n);
    ob_qplan_order(names, order, n);
    for (int k = 0; k < n; k++) {
        int i = order[k];
        types[i] = ob_qplan_type(p, names[i], n_dims[i], ne[i], cur[i]);
    }
    free(order);
}
