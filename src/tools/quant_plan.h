/* quant_plan.h — which weight type each tensor gets, as llama.cpp's llama-quantize decides.
 *
 * Owns: the file types ("mixes") llama-quantize offers whose tensor types this build can
 * write (Q4_K_M, Q5_K_S, Q2_K, IQ4_XS, Q8_0, ...), their general.file_type numbers, and the
 * per-tensor rules that refine a mix (attn_v and ffn_down get more bits in some layers,
 * output.weight q6_K, token_embd q4_K in ternary files, fallbacks for rows that are not whole
 * blocks), read from llama.cpp's src/llama-quant.cpp and written here from scratch.
 * Does not own: quantizing (format/quant_search.h), reading or writing files (quantize.c,
 * convert.c).
 */
#ifndef OB_QUANT_PLAN_H
#define OB_QUANT_PLAN_H

#include <stdint.h>

typedef struct {
    const char *name;   /* llama-quantize's name: "Q4_K_M" */
    int ftype;          /* general.file_type (llama.cpp's LLAMA_FTYPE_*) */
    int base;           /* the type most tensors get (ob_type) */
} ob_qmix;

/* A mix by llama-quantize's name or number, case-insensitive ("q4_k_m", "Q4_K" = Q4_K_M,
 * "15"), or NULL. */
const ob_qmix *ob_qmix_by_name(const char *name);
/* The mix llama.cpp would label a file whose matrices are all of type t (for
 * general.file_type when every matrix is t), or NULL. */
const ob_qmix *ob_qmix_for_type(int t);
/* Names of every mix, comma separated, for messages. */
const char *ob_qmix_names(void);

/* The model facts and counters the rules use; fill the first block, zero the rest. */
typedef struct {
    const ob_qmix *mix;
    int pure;               /* every quantized tensor gets mix->base (llama-quantize --pure) */
    int output_type;        /* forced type of output.weight, or -1 */
    int token_embd_type;    /* forced type of token_embd.weight, or -1 */
    int leave_output;       /* output.weight keeps its type (--leave-output-tensor) */
    int has_imatrix;
    const char *arch;       /* general.architecture */
    int n_layer, n_head, n_head_kv, n_expert;
    /* set by ob_qplan_begin from the tensor names */
    int has_output;         /* an output.weight exists (else token_embd is the output too) */
    int n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
} ob_qplan;

/* Counts what the rules need over every tensor name (before any ob_qplan_type call). */
void ob_qplan_begin(ob_qplan *p, const char *const *names, int n);

/* llama.cpp's tensor order for the rules: non-layer tensors first, then by layer number,
 * then by name. Sorts idx[0..n) (indices into names). The layer counters advance in this
 * order, so call ob_qplan_type in it. */
void ob_qplan_order(const char *const *names, int *idx, int n);

/* Type for a tensor (ne[0] the row length, ne[2] experts or 1) currently of type cur.
 * Tensors that are not quantized (vectors, norms, ...) keep cur. */
int ob_qplan_type(ob_qplan *p, const char *name, int n_dims, const int64_t *ne, int cur);

/* Everything above for a list of tensors (names, n_dims, ne[4] each, current types):
 * ob_qplan_begin, then ob_qplan_type in llama.cpp's order; the result in types[n]. */
void ob_qplan_tensors(ob_qplan *p, int n, const char *const *names, const int *n_dims, const int64_t (*ne)[4], const int *cur,
                      int *types);

/* Everything above for a whole file: reads the hyperparameters the rules need from g (arch,
 * block_count, head counts, expert_count) into p, then the type of every tensor into
 * types[ob_gguf_n_tensors(g)], in llama.cpp's order. p->mix and the options must be set. */
struct ob_gguf;
void ob_qplan_file(ob_qplan *p, const struct ob_gguf *g, int *types);

/* 1 if llama-quantize would refuse this tensor without an importance matrix (Q2_K in Q2_K_S). */
int ob_qplan_needs_imatrix(const ob_qplan *p, const char *name, int type);

/* The type llama.cpp falls back to when rows of ncols are not whole blocks of t (t itself
 * when they are; f16 when no block type fits). */
int ob_qplan_fallback(int t, int64_t ncols);

#endif
