/* test_fused_engine.c — the engine's fused call sites (engine/forward.c: matmul_multi, matmul_glu,
 * matmul_add, rope_kv, rmsnorm_act_quant) on the CPU.
 *
 * Only the CUDA backend has fused ops, so on a machine without a GPU the engine's branches that
 * call them would never run. OB_BACKEND_FUSED=plain gives the CPU backend those entries composed
 * from its own plain ops (backend_fused.c), in the order the engine issues the plain ops: a
 * prompt and token-by-token decoding of two interleaved sequences must then give the same
 * logits, bit for bit, with and without them — for llama (attention biases off, tied output),
 * qwen3 (Q/K norms) and bitnet (sub-layer norms, act_quant_i8 before every projection).
 */
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

/* Logits [steps + 1][2][n_vocab] of a 6-token prompt in each of two sequences, then steps tokens
 * each, interleaved, on device with the environment variable env set to val while the model
 * loads (env NULL: none). Shared with test_cuda.c (graphs against eager launches). */
float *ob_test_decode_two(const char *path, const char *device, const char *env, const char *val, int steps, int *n_vocab_out) {
    char err[512];
    if (env) setenv(env, val, 1);
    ob_model_params mp = ob_model_default_params();
    mp.device = device;
    ob_model_t *m = NULL;
    int rc = ob_model_load(path, &mp, &m, err, sizeof err);
    if (env) unsetenv(env);
    CHECK_EQ_INT(rc, 0);
    if (rc) { fprintf(stderr, "  decode %s on %s: %s\n", path, device, err); return NULL; }
    const int n_vocab = ob_model_get_info(m)->n_vocab;
    *n_vocab_out = n_vocab;
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = steps + 16;
    cp.n_seq = 2;
    cp.n_batch = 8;
    ob_ctx_t *c = NULL;
    CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);
    float *out = calloc((size_t)2 * (steps + 1) * n_vocab, sizeof(float));
    for (int s = 0; c && s < 2; s++) {
        int32_t tok[6], pos[6], sq[6];
        for (int i = 0; i < 6; i++) { tok[i] = (7 * i + 3 * s + 1) % n_vocab; pos[i] = i; sq[i] = s; }
        ob_batch b = {6, tok, pos, sq, NULL};
        CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
        const float *l = ob_get_logits(c, 0);
        if (l) memcpy(out + (size_t)s * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    for (int k = 0; c && k < steps; k++)
        for (int s = 0; s < 2; s++) {
            int32_t tok = (13 * k + 5 * s + 2) % n_vocab, pos = 6 + k, sq = s;
            ob_batch b = {1, &tok, &pos, &sq, NULL};
            CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
            const float *l = ob_get_logits(c, 0);
            if (l) memcpy(out + ((size_t)(k + 1) * 2 + s) * n_vocab, l, (size_t)n_vocab * sizeof(float));
        }
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

/* Whether tests/golden/<dir> converted to type gives the same logits, byte for byte, decoded
 * (ob_test_decode_two, steps) on device as is and with env set to val; says which it was when not,
 * or with verbose output, under label. Shared with test_cuda.c (the whole-layer kernel). */
int ob_test_same_logits(const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                        const char *label) {
    char src[128], out[256];
    snprintf(src, sizeof src, "tests/golden/%s", dir);
    snprintf(out, sizeof out, "%s/%s-%s.gguf", ob_test_tmpdir(), label, dir);
    char *argv[] = {"convert", src, "-o", out, "--type", (char *)type, NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    int nv0 = 0, nv1 = 0, same = 0;
    float *a = ob_test_decode_two(out, device, NULL, NULL, steps, &nv0), *b = ob_test_decode_two(out, device, env, val, steps, &nv1);
    if (a && b && nv0 == nv1) same = memcmp(a, b, (size_t)2 * (steps + 1) * nv0 * sizeof(float)) == 0;
    if (!same || ob_test_verbose) fprintf(stderr, "  %s %s/%s: %s\n", label, dir, type, same ? "same logits" : "logits differ");
    free(a);
    free(b);
    remove(out);
    return same;
}

OB_SUITE(engine_fused) {
    static const struct { const char *dir, *type; } models[] = {{"llama", "q8_0"}, {"qwen3", "f32"}, {"bitnet", "tq2_0"}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        CHECK(ob_test_same_logits(models[i].dir, models[i].type, "cpu", "OB_BACKEND_FUSED", "plain", 12, "fused-engine"));
}
