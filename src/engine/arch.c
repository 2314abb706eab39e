/* arch.c — the architecture table and the HF -> GGUF tensor name map.
 *
 * GGUF names follow llama.cpp so that files written here load there (and back). BitNet
 * b1.58 2B-4T ("bitnet-b1.58", the name Microsoft's own GGUF uses) differs from llama.cpp's
 * older "bitnet" entry: squared-ReLU FFN and int8 activation quantization as transformers
 * computes it; llama.cpp's "bitnet" uses SiLU and float activations, and is kept as it is so
 * its files give the same logits here as there.
 */
#include "engine/arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ob_arch arch_table[] = {
    {"llama", "LlamaForCausalLM", OB_ROPE_NORM, OB_ACT_SILU, OB_ARCH_PERMUTE_QK,
     "Llama 1-3.x (incl. llama3 rope scaling), SwiGLU"},
    {"llama", "MistralForCausalLM", OB_ROPE_NORM, OB_ACT_SILU, OB_ARCH_PERMUTE_QK,
     "Mistral 7B-style, written as llama like llama.cpp does"},
    {"qwen2", "Qwen2ForCausalLM", OB_ROPE_NEOX, OB_ACT_SILU, OB_ARCH_QKV_BIAS,
     "Qwen2 / Qwen2.5: q/k/v bias"},
    {"qwen3", "Qwen3ForCausalLM", OB_ROPE_NEOX, OB_ACT_SILU, OB_ARCH_QK_NORM,
     "Qwen3 dense: per-head q/k RMSNorm"},
    {"bitnet-b1.58", "BitNetForCausalLM", OB_ROPE_NEOX, OB_ACT_RELU2,
     OB_ARCH_SUB_NORMS | OB_ARCH_ACT_QUANT | OB_ARCH_TERNARY,
     "BitNet b1.58 2B-4T: ternary weights, int8 activations, squared-ReLU, sub-layer norms"},
    {"bitnet", "BitnetForCausalLM", OB_ROPE_NEOX, OB_ACT_SILU, OB_ARCH_SUB_NORMS | OB_ARCH_TERNARY,
     "llama.cpp's bitnet (1bitLLM-style: SiLU, float activations)"},
};

int ob_arch_count(void) { return (int)(sizeof arch_table / sizeof arch_table[0]); }

const ob_arch *ob_arch_at(int i) { return i >= 0 && i < ob_arch_count() ? &arch_table[i] : NULL; }

const ob_arch *ob_arch_by_gguf(const char *name) {
    for (int i = 0; name && i < ob_arch_count(); i++)
        if (strcmp(arch_table[i].gguf_name, name) == 0) return &arch_table[i];
    return NULL;
}

const ob_arch *ob_arch_by_hf(const char *hf_class) {
    for (int i = 0; hf_class && i < ob_arch_count(); i++)
        if (arch_table[i].hf_class && strcmp(arch_table[i].hf_class, hf_class) == 0) return &arch_table[i];
    return NULL;
}

/* Per-layer names: HF suffix after "model.layers.N." -> GGUF suffix after "blk.N.". */
static const char *const layer_map[][2] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.attn_sub_norm.weight", "attn_sub_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.ffn_sub_norm.weight", "ffn_sub_norm.weight"},
};

static const char *const global_map[][2] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

int ob_arch_map_tensor(const char *hf_name, char *out, size_t outlen) {
    for (size_t i = 0; i < sizeof global_map / sizeof global_map[0]; i++)
        if (strcmp(hf_name, global_map[i][0]) == 0) {
            snprintf(out, outlen, "%s", global_map[i][1]);
            return 0;
        }
    const char *prefix = "model.layers.";
    size_t pl = strlen(prefix);
    if (strncmp(hf_name, prefix, pl) != 0) return -1;
    char *end;
    long layer = strtol(hf_name + pl, &end, 10);
    if (end == hf_name + pl || *end != '.' || layer < 0 || layer > 100000) return -1;
    for (size_t i = 0; i < sizeof layer_map / sizeof layer_map[0]; i++)
        if (strcmp(end + 1, layer_map[i][0]) == 0) {
            snprintf(out, outlen, "blk.%ld.%s", layer, layer_map[i][1]);
            return 0;
        }
    return -1;
}
