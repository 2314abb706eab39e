/* backend.h — the device interface: one table of function pointers per backend.
 *
 * Owns: the contract between the engine's forward pass and a device (CPU now, CUDA later).
 * Every buffer argument is a device pointer obtained from alloc/upload (on the CPU backend
 * these are plain host pointers). Activations are float32, row-major, one row per token.
 * Does not own: model loading, which ops run in which order (engine/forward.c).
 *
 * A CPU reference backend always builds; every fast kernel is tested against it.
 */
#ifndef OB_BACKEND_H
#define OB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the CUDA backend's .cu files are C++ */
#endif

/* A 2-D weight as the file stores it: n_out rows of n_in elements in `type` blocks. */
typedef struct {
    const void *data;   /* device pointer: [n_out][row_bytes] */
    int type;           /* ob_type */
    int64_t n_in;       /* elements per row (GGUF ne[0]) */
    int64_t n_out;      /* rows (GGUF ne[1]) */
    size_t row_bytes;
    float scale;        /* per-tensor multiplier of every dequantized row: i2_s's stored scale
                         * (format/quant_tensor.h), 1 for every other type */
} ob_weight;

typedef enum { OB_ACT_SILU, OB_ACT_RELU2 } ob_act;
typedef enum { OB_ROPE_NORM, OB_ROPE_NEOX } ob_rope_style;

/* Rotary embedding. NORM rotates pairs (2i, 2i+1); NEOX rotates (i, i + n_rot/2).
 * Angle of pair i at position p: p * freq_scale * theta^(-2i/n_rot) / freq_factors[i]. */
typedef struct {
    ob_rope_style style;
    int n_rot;                  /* rotated dims per head (<= head_dim) */
    float theta;
    float freq_scale;           /* 1 / linear scaling factor */
    const float *freq_factors;  /* [n_rot/2] or NULL (llama3 scaling: GGUF rope_freqs) */
} ob_rope;

typedef struct {
    const float *q;     /* [n][n_head*head_dim], already roped */
    float *out;         /* [n][n_head*head_dim] */
    const void *k;      /* this layer's cache: [n_seq][n_ctx] rows of n_head_kv*head_dim elements of type_k */
    const void *v;      /* same shape as k, elements of type_v */
    int type_k, type_v; /* ob_type of the cache elements: f32, f16 or q8_0 */
    int n, n_head, n_head_kv, head_dim, n_ctx;
    const int32_t *pos; /* [n] token i attends to positions 0..pos[i] of sequence seq[i] */
    const int32_t *seq; /* [n] */
    float scale;        /* usually 1/sqrt(head_dim) */
    const ob_weight *out_to; /* the weight of the matmul that reads out next as it is (NULL: none, or an
                              * op comes between): a backend may prepare out for it too (CUDA: the
                              * int8 codes of the types that take them) */
} ob_attn_args;

/* One decoder layer for one token (layer_decode below): the pre-norm attention block, then
 * the gated feed-forward block, each added to the residual stream x, exactly as engine/forward.c
 * issues them as separate ops for a layer without biases or Q/K norms. */
typedef struct {
    float *x;                          /* [n_embd]: x += attention(norm(x)), then x += ffn(norm(x)) */
    float *q, *k, *v, *att, *gate, *up; /* scratch of the engine's sizes */
    const ob_weight *wq, *wk, *wv, *wo, *ffn_gate, *ffn_up, *ffn_down;
    const float *attn_norm, *ffn_norm; /* RMSNorm weights [n_embd] */
    const float *attn_sub_norm;        /* NULL, or BitNet's RMSNorm [n_head*head_dim] before wo */
    const float *ffn_sub_norm;         /* NULL, or BitNet's RMSNorm [n_ff] before ffn_down */
    float eps;
    int act_quant;                     /* act_quant_i8 after each norm (and on the inputs of wo and
                                        * ffn_down without sub-norms): BitNet */
    ob_act act;
    ob_attn_args attn;                 /* n = 1, q = q, out = att, this layer's caches */
    const ob_rope *rope;
} ob_layer_args;

typedef struct {
    int n_threads;      /* CPU worker threads (<= 0: all cores) */
    int device_index;   /* GPU ordinal */
} ob_backend_opts;

typedef struct ob_backend ob_backend;
struct ob_backend {
    const char *name;   /* "cpu", "cuda" */
    void *priv;         /* backend state */
    int host;           /* 1: the ops run on this process's cores and the weights stay in host memory (the
                         * CPU backend): nothing to upload, no sampling workers beside it (scheduler.c) */
    const char *mem_hint; /* appended to the error of a model too large for its free memory (NULL: none) */
    const char *weight_as_hint; /* how to keep the file's types (weight_as's switch), for the error of a
                                 * converted weight that did not fit (NULL: none; backend.c sets it) */

    /* Sets up threads / the device; fills err and returns -1 when it cannot. */
    int (*init)(ob_backend *b, const ob_backend_opts *o, char *err, size_t errlen);
    /* Releases everything init and alloc made. */
    void (*free)(ob_backend *b);
    /* Free and total bytes of device memory (CPU: of system RAM). */
    int (*mem_info)(ob_backend *b, size_t *free_bytes, size_t *total_bytes);
    /* Device buffer of size bytes (64-byte aligned), or NULL. */
    void *(*alloc)(ob_backend *b, size_t size);
    /* Frees a buffer from alloc. */
    void (*dealloc)(ob_backend *b, void *p);
    /* Makes host bytes (e.g. a mapped weight) available on the device; CPU returns host itself. */
    const void *(*upload)(ob_backend *b, const void *host, size_t size);
    /* Optional (NULL: upload): a weight of n_out rows of n_in elements of type (size bytes, the
     * tensor's) in the backend's own layout, which may reorder the bytes within each row but
     * keeps row_bytes; every op of the backend reads weights in that layout. */
    const void *(*upload_weight)(ob_backend *b, const void *host, size_t size, int type, int64_t n_in, int64_t n_out);
    /* Optional (NULL: every weight as stored): the type the backend would rather compute a weight
     * of this type in; the engine converts it on the host where that holds the same values exactly
     * (ob_tensor_convert), else keeps it, and asks again for the type it converted to (at most
     * OB_WEIGHT_AS_STEPS times; backend.c's switches: OB_BACKEND_TQ1_AS_TQ2, OB_BACKEND_TQ2_AS_I2S). */
    int (*weight_as)(ob_backend *b, int type);
    /* Copies device bytes to the host. */
    void (*download)(ob_backend *b, void *host, const void *dev, size_t size);
    /* Nonzero if matmul/get_rows handle this weight type. */
    int (*supports)(ob_backend *b, int type);

    /* y[n][w->n_out] = x[n][w->n_in] . W^T. lean4 weights hold rotated rows: the backend
     * rotates x the same way (ob_lean_rotate) before the dot products. */
    void (*matmul)(ob_backend *b, const ob_weight *w, const float *x, float *y, int n);
    /* y[i] = row ids[i] of w, as float: embedding lookup. */
    void (*get_rows)(ob_backend *b, const ob_weight *w, const int32_t *ids, int n, float *y);
    /* y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w, for n rows of dim; w may be NULL; y may be x. */
    void (*rmsnorm)(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps);
    /* Rotates n rows of n_head heads in place; pos[n] are the tokens' positions. */
    void (*rope)(ob_backend *b, float *x, int n, int n_head, int head_dim, const int32_t *pos, const ob_rope *r);
    /* Writes n rows of K or V into cache [n_seq][n_ctx] rows of dim elements of type (ob_type:
     * f32, f16 or q8_0, converted with the reference rounding) at (seq[i], pos[i]). */
    void (*kv_write)(ob_backend *b, void *cache, int type, const float *x, int n, int dim, int n_ctx,
                     const int32_t *pos, const int32_t *seq);
    /* Causal grouped-query attention over the cache (softmax over each token's positions). */
    void (*attention)(ob_backend *b, const ob_attn_args *a);
    /* y += x (n floats). */
    void (*add)(ob_backend *b, float *y, const float *x, size_t n);
    /* y[i] += bias for n rows of dim. */
    void (*add_bias)(ob_backend *b, float *y, const float *bias, int n, int dim);
    /* gate = act(gate) * up, n floats. */
    void (*glu)(ob_backend *b, ob_act act, float *gate, const float *up, size_t n);
    /* BitNet activation quantization, in place: per row, s = (1/max|x|)*127 (max clamped to >= 1e-5),
     * x = clamp(round(x*s), -128, 127) / s. */
    void (*act_quant_i8)(ob_backend *b, float *x, int n, int dim);
    /* Copies bytes between device buffers. */
    void (*copy)(ob_backend *b, void *dst, const void *src, size_t size);
    /* Waits for queued work. */
    void (*sync)(ob_backend *b);

    /* Optional (NULL: not recorded) replay of recorded steps, e.g. CUDA graphs. Called before the
     * ops of a step with a key naming its op sequence (engine/forward.c: context, token count,
     * output rows) and the step's only varying inputs, its index arrays [n]. Returns 1 when it
     * queued a recording of that key with these arrays (the caller issues no ops), else 0: the
     * caller issues the ops and then calls graph_end, which returns -1 when a recording it tried
     * failed, so that nothing ran and the caller must issue the ops again. */
    int (*graph_begin)(ob_backend *b, uint64_t key, const int32_t *ids, const int32_t *pos, const int32_t *seq, int n);
    int (*graph_end)(ob_backend *b);
    /* Optional (NULL: none): called before each step's ops (and graph_begin) with whether its
     * tokens are all of distinct sequences (a batch of decode steps; part of the step key), 0 for a
     * prompt chunk or a mix. A backend may take other kernels for such batches (CUDA: cuBLAS for
     * int8-path weights from 13 tokens), so that a prompt keeps token-by-token decoding's products. */
    void (*step_kind)(ob_backend *b, int distinct);

    /* Optional fused ops (NULL: the engine issues the plain ops they stand for). Each gives the
     * same results as the backend's own plain ops, in fewer launches. */
    /* y[n][w->n_out] += x[n][w->n_in] . W^T (matmul, then add: the residual connections). */
    void (*matmul_add)(ob_backend *b, const ob_weight *w, const float *x, float *y, int n);
    /* ys[i] = x . ws[i]^T for i < count (count <= 3): weights sharing one input, e.g. Q, K and V. */
    void (*matmul_multi)(ob_backend *b, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n);
    /* gate[n][g->n_out] = act(x . G^T) * (x . U^T) (two matmuls, then glu); up is scratch of the
     * same size that the backend may overwrite. out_to: the weight of the matmul that reads gate
     * next as it is (NULL: none, or an op comes between), as ob_attn_args' out_to. */
    void (*matmul_glu)(ob_backend *b, ob_act act, const ob_weight *g, const ob_weight *u, const float *x, float *gate,
                       float *up, int n, const ob_weight *out_to);
    /* rope(q: a->n rows of a->n_head heads), rope(k: n_head_kv heads), then kv_write of k into a->k
     * and of v into a->v at (a->seq[i], a->pos[i]); a->q and a->out are not used. */
    void (*rope_kv)(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r);
    /* rope_kv(a, q, k, v, r), then attention(a) with a->q = q, for a batch whose tokens are all of
     * distinct sequences (decode steps), in fewer launches: the caches and a->out get their
     * results, q and k may be left unrotated. Returns 0 without doing anything when the backend
     * cannot take it (the engine then issues the two ops). */
    int (*rope_attention)(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r);
    /* rmsnorm, then act_quant_i8 on y (BitNet's projections' inputs). */
    void (*rmsnorm_act_quant)(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps);
    /* A whole layer of one token (ob_layer_args) with the plain ops' results; returns 0 without
     * doing anything when the backend cannot take this layer (the engine then issues the ops). */
    int (*layer_decode)(ob_backend *b, const ob_layer_args *l);
    /* One token's feed-forward block of a layer (n == 1): rmsnorm of x with w into h (with aq,
     * rmsnorm_act_quant), matmul_glu of gate and up on h into gate (up: scratch; out_to down
     * where neither sw nor aq), then with sw the sub-norm of gate with sw into up (with aq,
     * rmsnorm_act_quant), else with aq act_quant_i8 of gate, and matmul_add of down on that into
     * x (the engine's ops for BitNet's layers: sw its ffn_sub_norm, aq act_quant_i8). The one
     * exception to the rule above: the results are the plain ops' up to the summation order of
     * down's products (CUDA splits them over the intermediate dimension). Returns 0 without doing
     * anything when the backend cannot take it (the engine then issues the ops). */
    int (*ffn_decode)(ob_backend *b, ob_act act, const float *w, float eps, const ob_weight *g, const ob_weight *u,
                      const ob_weight *d, const float *sw, int aq, float *x, float *h, float *gate, float *up, int n);

    /* Optional host memory (NULL: malloc / free) for buffers that download() fills every step,
     * of the kind the backend copies to fastest (CUDA: page-locked). host_alloc returns NULL when
     * out of memory; host_free takes what host_alloc returned (or NULL). */
    void *(*host_alloc)(ob_backend *b, size_t size);
    void (*host_free)(ob_backend *b, void *p);
    /* Optional (NULL: none): the address through which ops write host_alloc's buffer p straight
     * into host memory (CUDA: page-locked memory mapped into the GPU's address space), or NULL
     * where p has none. What an op writes there is the host's after sync, with no download. */
    void *(*host_dev)(ob_backend *b, void *p);
};

/* Backends this build has. Each returns a fresh, uninitialised table copy (caller frees with
 * b->free then free(b)), or NULL if this build lacks it. */
ob_backend *ob_backend_cpu_new(void);
#ifdef OB_CUDA
/* CUDA backend (src/backend/cuda, built with make CUDA=1). */
ob_backend *ob_backend_cuda_new(void);
/* Nonzero when a GPU of compute capability >= 8.0 is present (what --device auto checks). */
int ob_backend_cuda_usable(void);
/* The int8 decoders of the CUDA matmul run on the host against the reference (no GPU needed):
 * the number of types that fail; report gets a line per type. */
int ob_cuda_q8_selftest(char *report, size_t cap);
/* Steps replayed from CUDA graph recordings so far, by every CUDA backend of the process (tests). */
long ob_cuda_graph_replays(void);
/* Products that read a kept f16 copy of their weight (unless OB_CUDA_F16_COPY=0), every backend (tests). */
long ob_cuda_f16_copy_reads(void);
/* Decode GLU launches that made their output's int8 codes (by default where the launch is one wave; OB_CUDA_GLU_CODES=1 q4_0 gates, =2 every type, =0 off), every backend (tests). */
long ob_cuda_glu_codes_made(void);
/* Calls of the CUDA backends' download, every backend (tests). */
long ob_cuda_downloads(void);
/* One-token f16 / bf16 products that read their rows in place (calls of at most OB_CUDA_GV_DIRECT MiB, default 256), every backend (tests). */
long ob_cuda_gv_direct_launches(void);
/* Decode products of weights of two types on one input in one launch (Q4_K_M's Q, K and V; OB_CUDA_GV_TWO=0: a launch a type), every backend (tests). */
long ob_cuda_gv_two_type_launches(void);
/* Products that read the int8 codes their input's producer made (no quantizer launch), every backend (tests). */
long ob_cuda_codes_handed(void);
/* Launches of the grouped attention's fused form that read their step's RoPE angles (OB_CUDA_ANGLES, on by default), every backend (tests). */
long ob_cuda_angles_read(void);
/* Launches of the grouped attention's fused form (rope_attention on k_attn_gqa), every backend (tests). */
long ob_cuda_gqa_rope_launches(void);
#endif
#ifdef OB_CUDA
/* Launches of the one-token feed-forward kernel (ffn_decode: cuda_ffn.cu), every backend (tests). */
long ob_cuda_ffn_launches(void);
/* The mode cuda backend b runs that kernel in: 2 (bulk copies: the default on Hopper), 1 (OB_CUDA_FFN=1), 0 off (tests). */
int ob_cuda_ffn_mode(const ob_backend *b);
#endif
/* Fills b's empty fused entries with the plain ops they stand for (backend_fused.c; for tests). */
void ob_backend_plain_fused(ob_backend *b);

/* The most conversions load_weight makes of one weight (weight_as asked again each time). */
#define OB_WEIGHT_AS_STEPS 4
/* A weight_as that takes tq1_0 weights as tq2_0 (the same values; backend.c): any backend's with
 * OB_BACKEND_TQ1_AS_TQ2=1. */
int ob_backend_tq1_as_tq2(ob_backend *b, int type);
/* One that also takes tq2_0 weights as i2_s (where a tensor's blocks share one scale, so the same
 * values; load_weight applies weight_as again to the type it converted to): the CUDA backend's
 * default, any backend's with OB_BACKEND_TQ2_AS_I2S=1. */
int ob_backend_ternary_as_i2_s(ob_backend *b, int type);
/* name: "cpu", "cuda", or "auto" (cuda when this build has it and a usable GPU is present). */
ob_backend *ob_backend_by_name(const char *name, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
