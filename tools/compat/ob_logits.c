/* ob_logits.c — the 1bit side of the GGUF compatibility check (docs/compat.md).
 *
 * Owns: loading one GGUF file with 1bit's public API (include/onebit.h) on the CPU, decoding
 * a token sequence in a single ob_decode call that asks for the logits of every position, and
 * writing them as raw little-endian float32 [n_tokens][n_vocab] — the same output as
 * llama_logits.c, so compare.py can diff the two.
 * Does not own: the engine (build/lib1bit.a), the comparison (compare.py).
 *
 * Build (compat.sh does this):
 *   cc -O2 -Iinclude tools/compat/ob_logits.c build/lib1bit.a -ljansson -lpcre2-8 -lm -pthread
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Reads every integer of the array after "tokens" in a small JSON file (same minimal parser
 * as llama_logits.c: {"tokens": [1, 2, 3]}). */
static int read_tokens(const char *path, int32_t **out, int *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "ob_logits: %s: %s\n", path, strerror(errno)); return -1; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); fprintf(stderr, "ob_logits: out of memory\n"); return -1; }
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
    if (!p) { fprintf(stderr, "ob_logits: %s: no \"tokens\": [...] array\n", path); free(buf); return -1; }
    p++;
    int n = 0, ncap = 0;
    int32_t *ids = NULL;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') p++;
        if (*p == ']') break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff) {
            fprintf(stderr, "ob_logits: %s: bad token id near '%.20s'\n", path, p);
            free(ids); free(buf);
            return -1;
        }
        if (n == ncap) {
            ncap = ncap ? 2 * ncap : 64;
            int32_t *ni = realloc(ids, (size_t)ncap * sizeof *ids);
            if (!ni) { free(ids); free(buf); fprintf(stderr, "ob_logits: out of memory\n"); return -1; }
            ids = ni;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(buf);
    if (n == 0) { fprintf(stderr, "ob_logits: %s: the token list is empty\n", path); free(ids); return -1; }
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
            fprintf(stderr, "ob_logits: --ids: bad token id near '%s'\n", p);
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) { fprintf(stderr, "ob_logits: --ids: empty list\n"); free(ids); return -1; }
    *out = ids;
    *n_out = k;
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *ids_arg = NULL, *out_path = NULL;
    int n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-t") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(a, "--ids") && i + 1 < argc) ids_arg = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(a, "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (a[0] == '-') { fprintf(stderr, "ob_logits: unknown or incomplete option '%s'\n", a); return usage(); }
        else if (!model_path) model_path = a;
        else { fprintf(stderr, "ob_logits: unexpected argument '%s'\n", a); return usage(); }
    }
    if (!model_path || (!tok_path) == (!ids_arg) || !out_path) return usage();

    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (tok_path ? read_tokens(tok_path, &tokens, &n_tokens) : parse_ids(ids_arg, &tokens, &n_tokens)) return 1;

    char err[1024] = "";
    ob_model_params mp = ob_model_default_params();
    mp.device = "cpu";
    mp.n_threads = n_threads;
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

    FILE *f = fopen(out_path, "wb");
    if (!f) { fprintf(stderr, "ob_logits: %s: %s\n", out_path, strerror(errno)); return 1; }
    for (int i = 0; i < n_tokens; i++) {
        const float *row = ob_get_logits(ctx, i);
        if (!row) { fprintf(stderr, "ob_logits: no logits for position %d\n", i); fclose(f); return 1; }
        if (fwrite(row, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
            fprintf(stderr, "ob_logits: %s: write failed\n", out_path);
            fclose(f);
            return 1;
        }
    }
    if (fclose(f) != 0) { fprintf(stderr, "ob_logits: %s: %s\n", out_path, strerror(errno)); return 1; }
    fprintf(stderr, "ob_logits: %s (%s, %s): %d tokens x %d logits -> %s\n", model_path, info->arch,
            info->type_name, n_tokens, n_vocab, out_path);

    free(pos);
    free(want);
    free(tokens);
    ob_ctx_free(ctx);
    ob_model_free(model);
    return 0;
}
