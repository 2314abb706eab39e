/* test_golden.c — the forward pass of every architecture against Hugging Face transformers.
 *
 * tests/golden/<arch>/ holds a tiny random-weight checkpoint (config.json, model.safetensors,
 * tokenizer files), a fixed token sequence and the float32 logits transformers computed for it
 * (made by tools/golden/make_golden.py on the GPU machine). Each case converts the checkpoint
 * with `1bit convert --type T`, loads it, runs the whole sequence as one batch and compares
 * every logit; it also checks that decoding token by token after a prompt gives the same
 * logits as the one batch (the KV cache path against the batched path).
 *
 * Tolerances, as max |ours - reference| over all logits, relative to max |reference|:
 *  - f32: 1e-4 absolute. The stored weights are exact in f32, so only float32 summation order
 *    differs from torch.
 *  - f16 of an F16 checkpoint: exact weights too, 1e-4 absolute. For BitNet (bf16 masters),
 *    the ternarized weights s*{-1,0,1} round s to f16 (2^-11 relative): 2e-3 relative.
 *  - bf16 of an F16 checkpoint: 8 mantissa bits, about 0.4% per weight: 3e-2 relative.
 *  - q8_0: per-32 scale, ~0.4% per weight, errors average over dot products: 3e-2 relative.
 *  - q4_0: 4-bit, ~7% per weight: 0.25 relative, and the top token must agree on most rows.
 *  - tq1_0 / tq2_0 of BitNet: exact ternary values with an f16 block scale: 2e-3 relative.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

typedef struct {
    const char *arch;
    const char *type;
    double abs_tol;     /* used when > 0 */
    double rel_tol;     /* relative to max |reference| */
    double min_top1;    /* fraction of rows whose argmax must agree */
} golden_case;

static const golden_case cases[] = {
    {"llama", "f32", 1e-4, 0, 1.0},    {"llama", "f16", 1e-4, 0, 1.0},   {"llama", "bf16", 0, 3e-2, 0.9},
    {"llama", "q8_0", 0, 3e-2, 0.9},   {"llama", "q4_0", 0, 0.25, 0.5},
    {"mistral", "f32", 1e-4, 0, 1.0},  {"mistral", "q8_0", 0, 3e-2, 0.9},
    {"qwen2", "f32", 1e-4, 0, 1.0},    {"qwen2", "f16", 1e-4, 0, 1.0},   {"qwen2", "q8_0", 0, 3e-2, 0.9},
    {"qwen3", "f32", 1e-4, 0, 1.0},    {"qwen3", "q8_0", 0, 3e-2, 0.9},  {"qwen3", "q4_0", 0, 0.25, 0.5},
    {"bitnet", "f32", 1e-4, 0, 1.0},   {"bitnet", "f16", 0, 2e-3, 1.0},  {"bitnet", "tq2_0", 0, 2e-3, 1.0},
    {"bitnet", "tq1_0", 0, 2e-3, 1.0}, {"bitnet", "q8_0", 0, 3e-2, 0.9},
};

static float *read_floats(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *d = malloc((size_t)len);
    *n = fread(d, 1, (size_t)len, f) / sizeof(float);
    fclose(f);
    return d;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static void run_case(const golden_case *gc) {
    char dir[256], path[512], out[512], err[1024];
    snprintf(dir, sizeof dir, "tests/golden/%s", gc->arch);
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    json_error_t je;
    json_t *tj = json_load_file(path, 0, &je);
    CHECK(tj != NULL);
    if (!tj) { fprintf(stderr, "  golden: %s missing (%s)\n", path, je.text); return; }
    json_t *ta = json_object_get(tj, "tokens");
    int n = (int)json_array_size(ta);
    int32_t *tok = malloc((size_t)n * sizeof *tok), *pos = malloc((size_t)n * sizeof *pos);
    int8_t *all = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)json_integer_value(json_array_get(ta, i));
        pos[i] = i;
        all[i] = 1;
    }
    json_decref(tj);
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    size_t nref = 0;
    float *ref = read_floats(path, &nref);
    CHECK(ref != NULL && nref % (size_t)n == 0);
    int n_vocab = ref ? (int)(nref / (size_t)n) : 0;

    snprintf(out, sizeof out, "%s/golden-%s-%s.gguf", ob_test_tmpdir(), gc->arch, gc->type);
    char *argv[] = {"convert", dir, "-o", out, "--type", (char *)gc->type, NULL};
    int rc = ob_cmd_convert(6, argv);
    CHECK_EQ_INT(rc, 0);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model_t *m = NULL;
    int lrc = rc == 0 ? ob_model_load(out, &mp, &m, err, sizeof err) : -1;
    if (lrc) fprintf(stderr, "  golden %s/%s: load: %s\n", gc->arch, gc->type, err);
    CHECK_EQ_INT(lrc, 0);
    if (!m || !ref) goto done;
    CHECK_EQ_INT(ob_model_get_info(m)->n_vocab, n_vocab);
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n + 4;
    cp.n_batch = n;
    ob_ctx_t *c = NULL;
    CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);
    ob_batch b = {n, tok, pos, NULL, all};
    CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
    double maxref = 0, maxdiff = 0;
    int top_agree = 0;
    float *ours = malloc(nref * sizeof(float));
    for (int i = 0; i < n; i++) {
        const float *l = ob_get_logits(c, i);
        memcpy(ours + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
        const float *r = ref + (size_t)i * n_vocab;
        for (int k = 0; k < n_vocab; k++) {
            double d = fabs((double)l[k] - r[k]);
            if (d > maxdiff || d != d) maxdiff = d != d ? INFINITY : d;
            if (fabs(r[k]) > maxref) maxref = fabs(r[k]);
        }
        top_agree += argmax(l, n_vocab) == argmax(r, n_vocab);
    }
    double tol = gc->abs_tol > 0 ? gc->abs_tol : gc->rel_tol * maxref;
    if (ob_test_verbose || maxdiff > tol)
        fprintf(stderr, "  golden %-8s %-6s max|diff| %.3g (tol %.3g, max|ref| %.3g), top-1 %d/%d\n", gc->arch, gc->type,
                maxdiff, tol, maxref, top_agree, n);
    CHECK(maxdiff <= tol);
    CHECK(top_agree >= (int)(gc->min_top1 * n + 0.999));

    /* Incremental: the first half as a prompt, then one token at a time, must match the batch. */
    ob_kv_seq_truncate(c, 0, 0);
    int half = n / 2;
    ob_batch pb = {half, tok, pos, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &pb, err, sizeof err), 0);
    double inc_diff = 0;
    for (int i = half; i < n; i++) {
        const float *l = ob_get_logits(c, 0);
        for (int k = 0; k < n_vocab; k++) {
            double d = fabs((double)l[k] - ours[(size_t)(i - 1) * n_vocab + k]);
            if (d > inc_diff || d != d) inc_diff = d != d ? INFINITY : d;
        }
        ob_batch sb = {1, &tok[i], &pos[i], NULL, NULL};
        CHECK_EQ_INT(ob_decode(c, &sb, err, sizeof err), 0);
    }
    double itol = 1e-4 + 1e-5 * maxref;
    if (inc_diff > itol) fprintf(stderr, "  golden %s/%s: incremental vs batch max|diff| %.3g\n", gc->arch, gc->type, inc_diff);
    CHECK(inc_diff <= itol);
    free(ours);
    ob_ctx_free(c);
done:
    ob_model_free(m);
    remove(out);
    free(ref);
    free(tok);
    free(pos);
    free(all);
}

OB_SUITE(golden) {
    struct stat sb;
    if (stat("tests/golden/llama/logits.f32", &sb) != 0) {
        fprintf(stderr, "  golden: tests/golden/ has no reference data\n");
        CHECK(0);
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}
