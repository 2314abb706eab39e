/* llama_logits.c — the llama.cpp side of the GGUF compatibility check (docs/compat.md).
 *
 * Owns: loading one GGUF file with llama.cpp through its public C API (llama.h) on the CPU
 * only, decoding a token sequence in a single batch that asks for the logits of every
 * position, and writing them as raw little-endian float32 [n_tokens][n_vocab]. With
 * --tokenize it instead prints llama.cpp's token ids of a text as JSON (the tokenizer check).
 * Does not own: llama.cpp itself (a peer, built elsewhere and only linked against), the
 * comparison (compare.py), the 1bit side (ob_logits.c), the options, token reading and logits
 * writing both share (logits_common.c).
 *
 * Build (compat.sh does this):
 *   cc -O2 -I$LLAMA/include -I$LLAMA/ggml/include tools/compat/llama_logits.c tools/compat/logits_common.c \
 *      -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "logits_common.h"

static int verbose = 0;

/* llama.cpp logs a lot at load; keep warnings and errors unless -v. */
static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (verbose || level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static int usage(void) {
    fprintf(stderr,
            "usage: llama_logits MODEL.gguf (-t TOKENS.json | --ids 1,2,3) -o OUT.f32 [options]\n"
            "       llama_logits MODEL.gguf --tokenize TEXT [--no-special]\n"
            "  -t FILE        token ids from a JSON file {\"tokens\": [...]}\n"
            "  --ids LIST     token ids, comma separated\n"
            "  -o FILE        write logits, float32 [n_tokens][n_vocab], little-endian\n"
            "  --kv f32|f16   KV cache type (default f32: 1bit's cache is float32; llama.cpp's own\n"
            "                 default is f16)\n"
            "  --fa on|off    flash attention (default off)\n"
            "  --threads N    CPU threads (default 2)\n"
            "  --extra-bufts  let llama.cpp use its extra weight buffer types (AMX, CPU_REPACK), as\n"
            "                 llama-cli does by default; off here (like llama-cli --no-repack) because\n"
            "                 its AMX kernels crash (SIGILL/SIGSEGV) on the dev machine, see docs/compat.md\n"
            "  --tokenize T   print llama.cpp's ids of text T as JSON (BOS added when the vocab asks)\n"
            "  --override-kv KEY=str:VALUE   override a string metadata key (diagnosis only: a file\n"
            "                 that needs one does not load in llama.cpp as written)\n"
            "  -v             llama.cpp's full log\n");
    return 2;
}

/* llama_get_logits_ith as lc_write_logits wants it. */
static const float *logits_row(void *ctx, int i) { return llama_get_logits_ith(ctx, i); }

int main(int argc, char **argv) {
    lc_args args = {.prog = "llama_logits", .n_threads = 2};
    const char *text = NULL;
    const char *kv = "f32", *fa = "off";
    int parse_special = 1, n_over = 0, extra_bufts = 0;
    struct llama_model_kv_override over[9];
    memset(over, 0, sizeof over);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (lc_option(&args, argc, argv, &i)) continue;
        if (!strcmp(a, "--kv") && i + 1 < argc) kv = argv[++i];
        else if (!strcmp(a, "--fa") && i + 1 < argc) fa = argv[++i];
        else if (!strcmp(a, "--tokenize") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(a, "--no-special")) parse_special = 0;
        else if (!strcmp(a, "--extra-bufts")) extra_bufts = 1;
        else if (!strcmp(a, "-v")) verbose = 1;
        else if (!strcmp(a, "--override-kv") && i + 1 < argc) {
            const char *kvs = argv[++i], *eq = strstr(kvs, "=str:");
            if (!eq || eq == kvs || (size_t)(eq - kvs) >= sizeof over[0].key || strlen(eq + 5) >= sizeof over[0].val_str ||
                n_over == 8) {
                fprintf(stderr, "llama_logits: --override-kv wants KEY=str:VALUE (at most 8)\n");
                return 2;
            }
            over[n_over].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
            memcpy(over[n_over].key, kvs, (size_t)(eq - kvs));
            strcpy(over[n_over].val_str, eq + 5);
            n_over++;
        }
        else if (lc_positional(&args, a)) return usage();
    }
    const char *model_path = args.model_path, *out_path = args.out_path;
    int n_threads = args.n_threads;
    if (!model_path) return usage();
    if (!text && ((!args.tok_path) == (!args.ids_arg) || !out_path)) return usage();
    if (strcmp(kv, "f32") && strcmp(kv, "f16")) { fprintf(stderr, "llama_logits: --kv must be f32 or f16\n"); return 2; }
    if (strcmp(fa, "on") && strcmp(fa, "off")) { fprintf(stderr, "llama_logits: --fa must be on or off\n"); return 2; }
    if (n_threads < 1) n_threads = 1;

    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (!text && lc_load_tokens(&args, &tokens, &n_tokens)) return 1;

    llama_log_set(log_cb, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;          /* CPU only */
    mp.vocab_only = text != NULL;
    mp.use_extra_bufts = extra_bufts != 0;
    if (n_over) mp.kv_overrides = over;   /* over[n_over] is zeroed: the list's end (empty key) */
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llama_logits: llama.cpp could not load %s (its log above says why)\n", model_path);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    if (text) {
        int cap = (int)strlen(text) + 16;
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        int n = ids ? llama_tokenize(vocab, text, (int32_t)strlen(text), ids, cap, true, parse_special) : -1;
        if (n < 0) { fprintf(stderr, "llama_logits: llama_tokenize failed (%d)\n", n); return 1; }
        printf("{\"tokens\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]}\n");
        free(ids);
        llama_model_free(model);
        llama_backend_free();
        return 0;
    }

    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] >= n_vocab) {
            fprintf(stderr, "llama_logits: token %d at position %d is outside the vocabulary (%d tokens)\n",
                    tokens[i], i, n_vocab);
            return 1;
        }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_tokens < 256 ? 256 : n_tokens);
    cp.n_batch = (uint32_t)n_tokens;   /* one llama_decode call ... */
    cp.n_ubatch = (uint32_t)n_tokens;  /* ... computed as one graph */
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.type_k = !strcmp(kv, "f32") ? GGML_TYPE_F32 : GGML_TYPE_F16;
    cp.type_v = cp.type_k;
    cp.flash_attn_type = !strcmp(fa, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_logits: llama.cpp could not create a context for %s\n", model_path);
        return 1;
    }

    struct llama_batch batch = llama_batch_init(n_tokens, 0, 1);
    for (int i = 0; i < n_tokens; i++) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;           /* logits for every position */
    }
    batch.n_tokens = n_tokens;
    int32_t rc = llama_decode(ctx, batch);
    if (rc != 0) {
        fprintf(stderr, "llama_logits: llama_decode returned %d (%s)\n", rc,
                rc == 1 ? "no KV slot for the batch" : rc == 2 ? "aborted" : rc == -1 ? "invalid batch" : "fatal error");
        return 1;
    }

    if (lc_write_logits("llama_logits", out_path, n_tokens, n_vocab, logits_row, ctx)) return 1;

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    fprintf(stderr, "llama_logits: %s (%s): %d tokens x %d logits -> %s (kv %s, fa %s, extra bufts %s)\n",
            model_path, desc, n_tokens, n_vocab, out_path, kv, fa, extra_bufts ? "on" : "off");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(tokens);
    return 0;
}
