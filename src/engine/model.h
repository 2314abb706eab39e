/* model.h — the loaded model as the forward pass sees it (engine-internal).
 *
 * Owns: hyperparameters read from GGUF metadata and the per-layer weight handles, all device
 * pointers of the chosen backend (on the CPU these point into the memory-mapped file; only
 * small norm/bias vectors are converted to float32 and owned here).
 * Does not own: per-request state (KV cache, scratch: forward.c's ob_ctx).
 */
#ifndef OB_MODEL_H
#define OB_MODEL_H

#include "onebit.h"
#include "backend/backend.h"
#include "engine/arch.h"
#include "format/gguf.h"

typedef struct {
    const float *attn_norm;      /* [n_embd] */
    ob_weight wq;                /* [n_head*head_dim][n_embd] */
    ob_weight wk;                /* [n_head_kv*head_dim][n_embd] */
    ob_weight wv;                /* [n_head_kv*head_dim][n_embd] */
    const float *bq, *bk, *bv;   /* biases or NULL */
    const float *q_norm, *k_norm;/* [head_dim] or NULL */
    const float *attn_sub_norm;  /* [n_head*head_dim] or NULL */
    ob_weight wo;                /* [n_embd][n_head*head_dim] */
    const float *ffn_norm;       /* [n_embd] */
    ob_weight ffn_gate, ffn_up;  /* [n_ff][n_embd] */
    const float *ffn_sub_norm;   /* [n_ff] or NULL */
    ob_weight ffn_down;          /* [n_embd][n_ff] */
} ob_layer;

typedef struct {
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float eps;
    ob_rope rope;
} ob_hparams;

struct ob_model {
    ob_gguf_t *gguf;
    ob_backend *be;
    const ob_arch *arch;
    ob_hparams hp;
    ob_model_info info;
    ob_weight tok_embd;          /* [n_vocab][n_embd] */
    const float *output_norm;    /* [n_embd] */
    ob_weight output;            /* [n_vocab][n_embd]; tok_embd when tied */
    ob_layer *layers;            /* [n_layer] */
    ob_tokenizer_t *tok;
    void **owned;                /* host float arrays converted at load */
    int n_owned, cap_owned;
    char *name;
};

/* Key of a file's required build features: an array of strings, e.g. ["lean4"] (docs/lean.md). */
#define OB_KEY_REQUIRES "1bit.requires"

/* Refuses a file whose OB_KEY_REQUIRES names a feature missing from have (NULL-terminated):
 * 0, or -1 with a message that says which feature and how to get it. */
int ob_model_check_requires(const ob_gguf_t *g, const char *const *have, char *err, size_t errlen);

/* The bytes backend be holds for the file's tensors: each in the largest of the types be would
 * take it as (its weight_as, asked again of each; load_weight converts where the values stay the
 * same) and the file's. What a device must have free. */
size_t ob_model_weight_bytes(const ob_gguf_t *g, ob_backend *be);

#endif
