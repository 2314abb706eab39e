/* llama_logits.c — the llama.cpp side of the GGUF compatibility check (docs/compat.md).
 *
 * Owns: loading one GGUF file with llama.cpp through its public C API (llama.h) on the CPU
 * only, decoding a token sequence in a single batch that asks for the logits of every
 * position, and writing them as raw little-endian float32 [n_tokens][n_vocab]. With
 * --tokenize it instead prints llama.cpp's token ids of a text as JSON (the tokenizer check).
 * Does not own: llama.cpp itself (a peer, built elsewhere and only linked against), the
 * comparison (compare.py), the 1bit side (ob_logits.c).
 *
 * Build (compat.sh does this):
 *   cc -O2 -I$LLAMA/include -I$LLAMA/ggml/include tools/compat/llama_logits.c \
 *      -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

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

/* Reads every integer of the array after "tokens" in a small JSON file. Minimal on purpose:
 * it accepts {"tokens": [1, 2, 3]} and anything else with that key and a flat int array. */
static int read_tokens(const char *path, int32_t **out, int *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "llama_logits: %s: %s\n", path, strerror(errno)); return -1; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); fprintf(stderr, "llama_logits: out of memory\n"); return -1; }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096) break;
    }
    fclose(f);
    buf[len] = 0;
    char *p = strstr(buf, "\"tokens\"");
    p = p ? strchr(p, '[') : NULL;
    if (!p) { fprintf(stderr, "llama_logits: %s: no \"tokens\": [...] array\n", path); free(buf); return -1; }
    p++;
    int n = 0, ncap = 0;
    int32_t *ids = NULL;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') p++;
        if (*p == ']') break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff) {
            fprintf(stderr, "llama_logits: %s: bad token id near '%.20s'\n", path, p);
            free(ids); free(buf);
            return -1;
        }
        if (n == ncap) {
            ncap = ncap ? 2 * ncap : 64;
            int32_t *ni = realloc(ids, (size_t)ncap * sizeof *ids);
            if (!ni) { free(ids); free(buf); fprintf(stderr, "llama_logits: out of memory\n"); return -1; }
            ids = ni;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(buf);
    if (n == 0) { fprintf(stderr, "llama_logits: %s: the token list is empty\n", path); free(ids); return -1; }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_ids(const char *s, int32_t **out, int *n_out) {
    int n = 1;
    for (const char *c = s; *c; c++) n += *c == ',';
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
            fprintf(stderr, "llama_logits: --ids: bad token id near '%s'\n", p);
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) { fprintf(stderr, "llama_logits: --ids: empty list\n"); free(ids); return -1; }
    *out = ids;
    *n_out = k;
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *ids_arg = NULL, *out_path = NULL, *text = NULL;
    const char *kv = "f32", *fa = "off";
    int n_threads = 2, parse_special = 1, n_over = 0, extra_bufts = 0;
    struct llama_model_kv_override over[9];
    memset(over, 0, sizeof over);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-t") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(a, "--ids") && i + 1 < argc) ids_arg = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(a, "--kv") && i + 1 < argc) kv = argv[++i];
        else if (!strcmp(a, "--fa") && i + 1 < argc) fa = argv[++i];
        else if (!strcmp(a, "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
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
        else if (a[0] == '-') { fprintf(stderr, "llama_logits: unknown or incomplete option '%s'\n", a); return usage(); }
        else if (!model_path) model_path = a;
        else { fprintf(stderr, "llama_logits: unexpected argument '%s'\n", a); return usage(); }
    }
    if (!model_path) return usage();
    if (!text && ((!tok_path) == (!ids_arg) || !out_path)) return usage();
    if (strcmp(kv, "f32") && strcmp(kv, "f16")) { fprintf(stderr, "llama_logits: --kv must be f32 or f16\n"); return 2; }
    if (strcmp(fa, "on") && strcmp(fa, "off")) { fprintf(stderr, "llama_logits: --fa must be on or off\n"); return 2; }
    if (n_threads < 1) n_threads = 1;

    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (!text && (tok_path ? read_tokens(tok_path, &tokens, &n_tokens) : parse_ids(ids_arg, &tokens, &n_tokens)))
        return 1;

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

    FILE *f = fopen(out_path, "wb");
    if (!f) { fprintf(stderr, "llama_logits: %s: %s\n", out_path, strerror(errno)); return 1; }
    for (int i = 0; i < n_tokens; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row) { fprintf(stderr, "llama_logits: no logits for position %d\n", i); fclose(f); return 1; }
        if (fwrite(row, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
            fprintf(stderr, "llama_logits: %s: write failed\n", out_path);
            fclose(f);
            return 1;
        }
    }
    if (fclose(f) != 0) { fprintf(stderr, "llama_logits: %s: %s\n", out_path, strerror(errno)); return 1; }

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
