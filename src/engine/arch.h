/* arch.h — the one architecture table: it drives convert, load, the forward pass and registry.
 *
 * Owns: per architecture, its GGUF name, the Hugging Face class it converts from, and the few
 * switches where architectures differ (rope layout, FFN activation, biases, norms, BitNet
 * quantization). Also the HF -> GGUF tensor name map shared by all of them.
 * Adding an architecture is one entry here plus its golden test.
 */
#ifndef OB_ARCH_H
#define OB_ARCH_H

#include "backend/backend.h"

enum {
    OB_ARCH_QKV_BIAS = 1 << 0,   /* attn_q/k/v have biases (Qwen2) */
    OB_ARCH_QK_NORM = 1 << 1,    /* per-head RMSNorm on q and k before rope (Qwen3) */
    OB_ARCH_SUB_NORMS = 1 << 2,  /* attn_sub_norm before o_proj, ffn_sub_norm before down (BitNet) */
    OB_ARCH_ACT_QUANT = 1 << 3,  /* int8 per-token activation quantization before each linear (BitNet b1.58) */
    OB_ARCH_PERMUTE_QK = 1 << 4, /* convert permutes q/k rows so NORM rope matches HF's rotate_half (llama.cpp) */
    OB_ARCH_TERNARY = 1 << 5,    /* convert ternarizes linear weights (absmean), as BitNet trains them */
};

typedef struct {
    const char *gguf_name;   /* general.architecture */
    const char *hf_class;    /* config.json architectures[0] converted to this entry, or NULL */
    ob_rope_style rope;
    ob_act ffn_act;
    unsigned flags;
    const char *note;        /* one line for `1bit registry` */
} ob_arch;

int ob_arch_count(void);
const ob_arch *ob_arch_at(int i);
/* First entry with this GGUF name, or NULL. */
const ob_arch *ob_arch_by_gguf(const char *name);
/* Entry converting this HF class, or NULL. */
const ob_arch *ob_arch_by_hf(const char *hf_class);

/* Maps an HF tensor name ("model.layers.3.self_attn.q_proj.weight") to its GGUF name
 * ("blk.3.attn_q.weight") into out; returns 0, or -1 if the name is not one we convert. */
int ob_arch_map_tensor(const char *hf_name, char *out, size_t outlen);

#endif
