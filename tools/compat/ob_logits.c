/* ob_logits.c — the 1bit side of the GGUF compatibility check (docs/compat.md).
 *
 * Owns: loading one GGUF file with 1bit's public API (include/onebit.h) on the CPU, decoding
 * a token sequence in a single ob_decode call that asks for the logits of every position, and
 * writing them as raw little-endian float32 [n_tokens][n_vocab] — the same output as
 * llama_logits.c, so compare.py can diff the two.
 * Does not own: the engine (build/lib1bit.a), the comparison (compare.py), the options, token
 * reading and logits writing both programs share (logits_common.c).
 *
 * Build (compat.sh does this):
 *   cc -O2 -Iinclude tools/compat/ob_logits.c tools/compat/logits_common.c build/lib1bit.a \
 *      -ljansson -lpcre2-8 -lm -pthread
 */
#include <stdio.h>
#include <stdlib.h>

#include "logits_common.h"
#include "onebit.h"

static int usage(void) {
    fprintf(stderr,
            "usage: ob_logits MODEL.gguf (-t TOKENS.json | --ids 1,2,3) -o OUT.f32 [--threads N]\n"
            "  -t FILE        token ids from a JSON file {\"tokens\": [...]}\n"
            "  --ids LIST     token ids, comma separated\n"
            "  -o FILE        write logits, float32 [n_tokens][n_vocab], little-endian\n"
            "  --threads N    CPU threads (default: all cores)\n");
    return 2;
}

/* ob_get_logits as lc_write_logits wants it. */
static const float *logits_row(void *ctx, int i) { return ob_get_logits(ctx, i); }

int main(int argc, char **argv) {
    lc_args args = {.prog = "ob_logits", .n_threads = 0};
    for (int i = 1; i < argc; i++)
        if (!lc_option(&args, argc, argv, &i) && lc_positional(&args, argv[i])) return usage();
    const char *model_path = args.model_path;
    if (!model_path || (!args.tok_path) == (!args.ids_arg) || !args.out_path) return usage();

    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (lc_load_tokens(&args, &tokens, &n_tokens)) return 1;

    char err[1024] = "";
    ob_model_params mp = ob_model_default_params();
    mp.device = "cpu";
    mp.n_threads = args.n_threads;
    ob_model_t *model = NULL;
    if (ob_model_load(model_path, &mp, &model, err, sizeof err)) {
        fprintf(stderr, "ob_logits: 1bit could not load %s: %s\n", model_path, err);
        return 1;
    }
    const ob_model_info *info = ob_model_get_info(model);
    const int n_vocab = info->n_vocab;

    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n_tokens < 256 ? 256 : n_tokens;
    cp.n_seq = 1;
    cp.n_batch = n_tokens;   /* the whole sequence in one ob_decode call */
    cp.type_k = cp.type_v = OB_KV_F32; /* as llama_logits runs llama.cpp: exact K/V */
    ob_ctx_t *ctx = NULL;
    if (ob_ctx_new(model, &cp, &ctx, err, sizeof err)) {
        fprintf(stderr, "ob_logits: could not create a context for %s: %s\n", model_path, err);
        return 1;
    }

    int32_t *pos = malloc((size_t)n_tokens * sizeof *pos);
    int8_t *want = malloc((size_t)n_tokens);
    if (!pos || !want) { fprintf(stderr, "ob_logits: out of memory\n"); return 1; }
    for (int i = 0; i < n_tokens; i++) {
        pos[i] = i;
        want[i] = 1;         /* logits for every position */
    }
    ob_batch b = {n_tokens, tokens, pos, NULL, want};
    if (ob_decode(ctx, &b, err, sizeof err)) {
        fprintf(stderr, "ob_logits: ob_decode failed on %s: %s\n", model_path, err);
        return 1;
    }

    if (lc_write_logits("ob_logits", args.out_path, n_tokens, n_vocab, logits_row, ctx)) return 1;
    fprintf(stderr, "ob_logits: %s (%s, %s): %d tokens x %d logits -> %s\n", model_path, info->arch,
            info->type_name, n_tokens, n_vocab, args.out_path);

    free(pos);
    free(want);
    free(tokens);
    ob_ctx_free(ctx);
    ob_model_free(model);
    return 0;
}
