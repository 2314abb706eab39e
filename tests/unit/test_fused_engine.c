/* test_fused_engine.c — the engine's fused call sites (engine/forward.c: matmul_multi, matmul_glu,
 * matmul_add, rope_kv, rope_attention, rmsnorm_act_quant, ffn_decode: BitNet's sub-norm included) on the CPU.
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

#include "engine/model.h"
#include "format/quant.h"
#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

/* The model at path on device, loaded with the environment variable env set to val (env NULL:
 * none), and a context of n_ctx positions for n_seq sequences, n_batch tokens a step; NULL
 * (checked) when either fails. Shared with test_cuda.c. */
ob_ctx_t *ob_test_open(const char *path, const char *device, const char *env, const char *val, int n_ctx, int n_seq, int n_batch,
                       ob_model_t **mo, int *n_vocab) {
    char err[512];
    if (env) setenv(env, val, 1);
    ob_model_params mp = ob_model_default_params();
    mp.device = device;
    ob_model_t *m = NULL;
    int rc = ob_model_load(path, &mp, &m, err, sizeof err);
    if (env) unsetenv(env);
    CHECK_EQ_INT(rc, 0);
    if (rc) { fprintf(stderr, "  decode %s on %s: %s\n", path, device, err); return NULL; }
    *n_vocab = ob_model_get_info(m)->n_vocab;
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.n_batch = n_batch;
    ob_ctx_t *c = NULL;
    CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);
    if (!c) ob_model_free(m);
    *mo = m;
    return c;
}

/* ob_test_open for two sequences, 8 tokens a step. */
static ob_ctx_t *open_two(const char *path, const char *device, const char *env, const char *val, int n_ctx, ob_model_t **mo,
                          int *n_vocab) {
    return ob_test_open(path, device, env, val, n_ctx, 2, 8, mo, n_vocab);
}

/* Decodes batch b (every row asks for logits) and copies row i's logits to out[i]. */
static void decode_rows(ob_ctx_t *c, const ob_batch *b, float *out, int n_vocab) {
    char err[512];
    CHECK_EQ_INT(ob_decode(c, b, err, sizeof err), 0);
    for (int i = 0; i < b->n_tokens; i++) {
        const float *l = ob_get_logits(c, i);
        CHECK(l != NULL);
        if (l) memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
}

/* A 6-token prompt in each of the two sequences: the last position's logits to out[0], out[1]. */
static void prompt_two(ob_ctx_t *c, float *out, int n_vocab) {
    for (int s = 0; s < 2; s++) {
        int32_t tok[6], pos[6], sq[6];
        int8_t want[6] = {0, 0, 0, 0, 0, 1};
        for (int i = 0; i < 6; i++) { tok[i] = (7 * i + 3 * s + 1) % n_vocab; pos[i] = i; sq[i] = s; }
        ob_batch b = {6, tok, pos, sq, want};
        char err[512];
        CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
        const float *l = ob_get_logits(c, 0);
        if (l) memcpy(out + (size_t)s * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
}

/* Logits [steps + 1][2][n_vocab] of a 6-token prompt in each of two sequences, then steps tokens
 * each, interleaved, on device with the environment variable env set to val while the model
 * loads (env NULL: none). Shared with test_cuda.c (graphs against eager launches). */
float *ob_test_decode_two(const char *path, const char *device, const char *env, const char *val, int steps, int *n_vocab_out) {
    ob_model_t *m = NULL;
    ob_ctx_t *c = open_two(path, device, env, val, steps + 16, &m, n_vocab_out);
    if (!c) return NULL;
    const int n_vocab = *n_vocab_out;
    float *out = calloc((size_t)2 * (steps + 1) * n_vocab, sizeof(float));
    prompt_two(c, out, n_vocab);
    for (int k = 0; k < steps; k++)
        for (int s = 0; s < 2; s++) {
            int32_t tok = (13 * k + 5 * s + 2) % n_vocab, pos = 6 + k, sq = s;
            ob_batch b = {1, &tok, &pos, &sq, NULL};
            decode_rows(c, &b, out + ((size_t)(k + 1) * 2 + s) * n_vocab, n_vocab);
        }
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

/* The same shape of logits from two-token steps after the prompts: even steps decode one token of
 * each sequence in one batch (a serving step: distinct sequences), odd steps two consecutive
 * tokens of one sequence (the same token count, not distinct), so that a backend recording steps
 * must tell the two apart. */
static float *decode_mixed(const char *path, const char *device, const char *env, const char *val, int steps, int *n_vocab_out) {
    ob_model_t *m = NULL;
    ob_ctx_t *c = open_two(path, device, env, val, 2 * steps + 16, &m, n_vocab_out);
    if (!c) return NULL;
    const int n_vocab = *n_vocab_out;
    float *out = calloc((size_t)2 * (steps + 1) * n_vocab, sizeof(float));
    prompt_two(c, out, n_vocab);
    int next[2] = {6, 6};
    for (int k = 0; k < steps; k++) {
        int32_t tok[2], pos[2], sq[2];
        int8_t want[2] = {1, 1};
        for (int i = 0; i < 2; i++) {
            sq[i] = k % 2 == 0 ? i : (k / 2) % 2;
            pos[i] = next[sq[i]]++;
            tok[i] = (13 * k + 5 * i + 2) % n_vocab;
        }
        ob_batch b = {2, tok, pos, sq, want};
        decode_rows(c, &b, out + (size_t)(k + 1) * 2 * n_vocab, n_vocab);
    }
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

/* tests/golden/<dir> converted to type at out (under the scratch directory, named by label) */
static void convert_golden(const char *dir, const char *type, const char *label, char *out, size_t cap) {
    char src[128];
    snprintf(src, sizeof src, "tests/golden/%s", dir);
    snprintf(out, cap, "%s/%s-%s-%s.gguf", ob_test_tmpdir(), label, dir, type);
    char *argv[] = {"convert", src, "-o", out, "--type", (char *)type, NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
}

/* Whether two decodes gave the same logits, bit for bit (says so under what otherwise); frees both. */
static int same_decode(float *a, int na, float *b, int nb, int steps, const char *what) {
    const int same = a && b && na == nb && memcmp(a, b, (size_t)2 * (steps + 1) * na * sizeof(float)) == 0;
    if (!same || ob_test_verbose) fprintf(stderr, "  %s: %s\n", what, same ? "the same logits" : "logits differ");
    free(a);
    free(b);
    return same;
}

typedef float *(*decode_fn)(const char *path, const char *device, const char *env, const char *val, int steps, int *n_vocab);

static int same_logits(decode_fn decode, const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                       const char *label) {
    char out[256];
    convert_golden(dir, type, label, out, sizeof out);
    int nv0 = 0, nv1 = 0;
    float *a = decode(out, device, NULL, NULL, steps, &nv0), *b = decode(out, device, env, val, steps, &nv1);
    char what[160];
    snprintf(what, sizeof what, "%s %s/%s", label, dir, type);
    const int same = same_decode(a, nv0, b, nv1, steps, what);
    remove(out);
    return same;
}

/* Whether tests/golden/<dir> converted to type gives the same logits, byte for byte, decoded
 * (ob_test_decode_two, steps) on device as is and with env set to val; says which it was when not,
 * or with verbose output, under label. Shared with test_cuda.c (the whole-layer kernel). */
int ob_test_same_logits(const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                        const char *label) {
    return same_logits(ob_test_decode_two, dir, type, device, env, val, steps, label);
}

/* The same with two-token steps of distinct sequences and of one sequence, alternating
 * (decode_mixed). Shared with test_cuda.c. */
int ob_test_same_logits_mixed(const char *dir, const char *type, const char *device, const char *env, const char *val, int steps,
                              const char *label) {
    return same_logits(decode_mixed, dir, type, device, env, val, steps, label);
}

/* The type a model's first projection has in memory, loaded on device with env set to val, and
 * the bytes its backend holds for the file's tensors (*bytes: ob_model_weight_bytes). */
static int wq_type(const char *path, const char *device, const char *env, const char *val, size_t *bytes) {
    ob_model_t *m = NULL;
    int nv = 0;
    ob_ctx_t *c = ob_test_open(path, device, env, val, 16, 1, 1, &m, &nv);
    const int t = c ? m->layers[0].wq.type : -1;
    *bytes = c ? ob_model_weight_bytes(m->gguf, m->be) : 0;
    if (c) ob_ctx_free(c);
    if (m) ob_model_free(m);
    return t;
}

/* p's logits decoded on device (ob_test_decode_two, steps) with OB_BACKEND_TQ1_AS_TQ2 and
 * OB_BACKEND_TQ2_AS_I2S set to t1 and t2 (NULL: unset). */
static float *decode_as(const char *p, const char *device, const char *t1, const char *t2, int steps, int *nv) {
    if (t2) setenv("OB_BACKEND_TQ2_AS_I2S", t2, 1);
    float *l = ob_test_decode_two(p, device, t1 ? "OB_BACKEND_TQ1_AS_TQ2" : NULL, t1, steps, nv);
    if (t2) unsetenv("OB_BACKEND_TQ2_AS_I2S");
    return l;
}

/* The f16 d of block blk of tensor name in the tq1_0 GGUF p changed in its last bit, on disk: the
 * tensor then has two scales. 0, or -1 where the tensor or its bytes are not found. */
static int tq1_0_second_scale(const char *p, const char *name, int64_t blk) {
    char err[256];
    ob_gguf_t *g = NULL;
    if (ob_gguf_open(p, &g, err, sizeof err)) return -1;
    const ob_gguf_tensor *t = ob_gguf_find_tensor(g, name);
    FILE *f = fopen(p, "r+b");
    int rc = -1;
    if (t && t->type == OB_TYPE_TQ1_0 && f && fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        uint8_t *buf = n > 0 ? malloc((size_t)n) : NULL;
        const uint8_t *at = NULL;
        if (buf && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)n, f) == (size_t)n)
            at = memmem(buf, (size_t)n, t->data, t->size < 4096 ? t->size : 4096); /* (its bytes: random trits) */
        if (at) {
            const long pos = (long)(at - buf) + blk * 54 + 52;
            uint8_t d = buf[pos] ^ 1;
            rc = fseek(f, pos, SEEK_SET) == 0 && fwrite(&d, 1, 1, f) == 1 ? 0 : -1;
        }
        free(buf);
    }
    if (f) fclose(f);
    ob_gguf_close(g);
    return rc;
}

/* Weights taken in another type of the same values at load (backend.c's weight_as, asked again of
 * each type it converted to). The golden BitNet's projections are ternary with one scale a tensor
 * (convert's absmean), so as tq1_0 they go to tq2_0 and on to i2_s, as tq2_0 to i2_s:
 *  - the type in memory: the file's with OB_BACKEND_TQ1_AS_TQ2=0; i2_s with
 *    OB_BACKEND_TQ2_AS_I2S=1; tq2_0 from tq1_0 with TQ1_AS_TQ2=1 and TQ2_AS_I2S=0; the device's
 *    defaults dflt1 (the tq1_0 file's) and dflt2 (the tq2_0 file's) with neither set;
 *  - the bytes a device must hold (ob_model_weight_bytes): the largest type along the way, so the
 *    tq2_0 file's size for both files wherever they convert, the tq1_0 file's own without;
 *  - the logits: tq1_0 as tq2_0 those of the tq2_0 file, and tq1_0 as i2_s those of tq2_0 as i2_s,
 *    bit for bit (steps decoded). i2_s's own against the reference: the golden cases;
 *  - a tensor with a second scale stops at tq2_0 (load_weight's direct tq1_0 -> i2_s refused, then
 *    tq1_0 -> tq2_0 taken and tq2_0 -> i2_s refused).
 * Shared with test_cuda.c. */
void ob_test_weight_as(const char *device, int steps, int dflt1, int dflt2) {
    char p1[256], p2[256];
    convert_golden("bitnet", "tq1_0", "weight-as", p1, sizeof p1);
    convert_golden("bitnet", "tq2_0", "weight-as", p2, sizeof p2);
    size_t b1 = 0, b2 = 0, b1i = 0, b2i = 0, bd1 = 0, bd2 = 0, b12 = 0;
    CHECK_EQ_INT(wq_type(p1, device, NULL, NULL, &bd1), dflt1);
    CHECK_EQ_INT(wq_type(p2, device, NULL, NULL, &bd2), dflt2);
    CHECK_EQ_INT(wq_type(p1, device, "OB_BACKEND_TQ1_AS_TQ2", "0", &b1), OB_TYPE_TQ1_0);
    CHECK_EQ_INT(wq_type(p2, device, "OB_BACKEND_TQ1_AS_TQ2", "0", &b2), OB_TYPE_TQ2_0);
    CHECK_EQ_INT(wq_type(p1, device, "OB_BACKEND_TQ2_AS_I2S", "1", &b1i), OB_TYPE_I2_S);
    CHECK_EQ_INT(wq_type(p2, device, "OB_BACKEND_TQ2_AS_I2S", "1", &b2i), OB_TYPE_I2_S);
    setenv("OB_BACKEND_TQ2_AS_I2S", "0", 1);
    CHECK_EQ_INT(wq_type(p1, device, "OB_BACKEND_TQ1_AS_TQ2", "1", &b12), OB_TYPE_TQ2_0);
    unsetenv("OB_BACKEND_TQ2_AS_I2S");
    CHECK(b1 > 0 && b1 < b2 && b1i == b2 && b2i == b2 && b12 == b2);
    CHECK(bd1 == (dflt1 == OB_TYPE_TQ1_0 ? b1 : b2) && bd2 == b2);
    int n1 = 0, n2 = 0;
    float *a = decode_as(p1, device, "1", "0", steps, &n1), *b = decode_as(p2, device, "0", NULL, steps, &n2);
    char what[96];
    snprintf(what, sizeof what, "tq1_0 as tq2_0, bitnet on %s", device);
    CHECK(same_decode(a, n1, b, n2, steps, what));
    a = decode_as(p1, device, NULL, "1", steps, &n1);
    b = decode_as(p2, device, NULL, "1", steps, &n2);
    snprintf(what, sizeof what, "tq1_0 and tq2_0 as i2_s, bitnet on %s", device);
    CHECK(same_decode(a, n1, b, n2, steps, what));
    /* a block of the first projection with another scale: no i2_s (neither straight from tq1_0 nor
     * through tq2_0), so it stops at tq2_0 */
    size_t b3 = 0;
    CHECK(tq1_0_second_scale(p1, "blk.0.attn_q.weight", 1) == 0);
    CHECK_EQ_INT(wq_type(p1, device, "OB_BACKEND_TQ2_AS_I2S", "1", &b3), OB_TYPE_TQ2_0);
    remove(p1);
    remove(p2);
}

OB_SUITE(engine_fused) {
    static const struct { const char *dir, *type; } models[] = {{"llama", "q8_0"}, {"qwen3", "f32"}, {"bitnet", "tq2_0"}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        CHECK(ob_test_same_logits(models[i].dir, models[i].type, "cpu", "OB_BACKEND_FUSED", "plain", 12, "fused-engine"));
    /* steps of two tokens of distinct sequences (rope_attention) and of one sequence, alternating */
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        CHECK(ob_test_same_logits_mixed(models[i].dir, models[i].type, "cpu", "OB_BACKEND_FUSED", "plain", 12, "fused-engine-mixed"));
    ob_test_weight_as("cpu", 12, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0);
}
