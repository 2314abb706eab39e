/* bitnet_logits.c — llama_logits.c for bitnet.cpp (Microsoft's BitNet, its llama.cpp fork),
 * whose llama.h predates upstream's renames; used for I2_S (docs/compat.md, "I2_S both ways").
 *
 * Owns: loading one GGUF file with the fork on the CPU, decoding a token sequence in one batch
 * with the logits of every position, writing them as float32 [n_tokens][n_vocab] (KV f16,
 * flash attention off). Does not own: the fork (a peer, built elsewhere), the
 * comparison (compare.py), options and token/logit files (logits_common.c).
 *
 * Build: cc -O2 -I$BN/3rdparty/llama.cpp/include -I$BN/3rdparty/llama.cpp/ggml/include \
 *   tools/compat/bitnet_logits.c tools/compat/logits_common.c \
 *   -L$BN/build/3rdparty/llama.cpp/src -L$BN/build/3rdparty/llama.cpp/ggml/src -lllama -lggml \
 *   -Wl,-rpath,$BN/build/3rdparty/llama.cpp/src -Wl,-rpath,$BN/build/3rdparty/llama.cpp/ggml/src
 */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"
#include "logits_common.h"

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static const float *logits_row(void *ctx, int i) { return llama_get_logits_ith(ctx, i); }

int main(int argc, char **argv) {
    lc_args args = {.prog = "bitnet_logits", .n_threads = 2};
    for (int i = 1; i < argc; i++) {
        if (lc_option(&args, argc, argv, &i)) continue;
        if (lc_positional(&args, argv[i])) {
            fprintf(stderr, "usage: bitnet_logits MODEL.gguf (-t TOKENS.json | --ids 1,2,3) -o OUT.f32 [--threads N]\n");
            return 2;
        }
    }
    if (!args.model_path || !args.out_path || (!args.tok_path) == (!args.ids_arg)) {
        fprintf(stderr, "usage: bitnet_logits MODEL.gguf (-t TOKENS.json | --ids 1,2,3) -o OUT.f32 [--threads N]\n");
        return 2;
    }
    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (lc_load_tokens(&args, &tokens, &n_tokens)) return 1;
    llama_log_set(log_cb, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_load_model_from_file(args.model_path, mp);
    if (!model) { fprintf(stderr, "bitnet_logits: bitnet.cpp could not load %s\n", args.model_path); return 1; }
    const int n_vocab = llama_n_vocab(model);
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) { fprintf(stderr, "bitnet_logits: token %d out of range\n", tokens[i]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_tokens < 256 ? 256 : n_tokens);
    cp.n_batch = cp.n_ubatch = (uint32_t)n_tokens;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = args.n_threads < 1 ? 1 : args.n_threads;
    cp.type_k = cp.type_v = GGML_TYPE_F16; /* the fork refuses an f32 V cache without flash attention */
    cp.flash_attn = false;
    cp.no_perf = true;
    struct llama_context *ctx = llama_new_context_with_model(model, cp);
    if (!ctx) { fprintf(stderr, "bitnet_logits: no context\n"); return 1; }
    struct llama_batch batch = llama_batch_init(n_tokens, 0, 1);
    for (int i = 0; i < n_tokens; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n_tokens;
    int32_t rc = llama_decode(ctx, batch);
    if (rc != 0) { fprintf(stderr, "bitnet_logits: llama_decode returned %d\n", rc); return 1; }
    if (lc_write_logits("bitnet_logits", args.out_path, n_tokens, n_vocab, logits_row, ctx)) return 1;
    llama_batch_free(batch);
    llama_free(ctx);
    llama_free_model(model);
    free(tokens);
    return 0;
}
