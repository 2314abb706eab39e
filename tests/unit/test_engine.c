/* test_engine.c — engine behaviour beyond the golden logits: batch validation, several
 * sequences in one forward pass, KV truncation, the observer, BitNet's activation quantizer,
 * and model files that are well-formed GGUF but wrong as models. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "format/gguf.h"
#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

static ob_model_t *load_golden(const char *arch, const char *type, char *path, size_t pathlen) {
    char dir[128], err[512];
    snprintf(dir, sizeof dir, "tests/golden/%s", arch);
    snprintf(path, pathlen, "%s/engine-%s-%s.gguf", ob_test_tmpdir(), arch, type);
    char *argv[] = {"convert", dir, "-o", path, "--type", (char *)type, NULL};
    if (ob_cmd_convert(6, argv) != 0) return NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model_t *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof err)) fprintf(stderr, "  engine: %s\n", err);
    return m;
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (x > d || x != x) d = x != x ? INFINITY : x;
    }
    return d;
}

static int n_observed;
static void count_obs(void *user, const char *name, int layer, const float *data, int n_rows, int dim) {
    if (!strcmp(name, "l_out") && layer == 0 && n_rows > 0 && dim > 0 && data[0] == data[0]) n_observed++;
}

OB_SUITE(engine) {
    char path[256], err[512];
    ob_model_t *m = load_golden("qwen2", "f32", path, sizeof path);
    CHECK(m != NULL);
    if (!m) return;
    int V = ob_model_get_info(m)->n_vocab;
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = 32;
    cp.n_seq = 3;
    cp.n_batch = 16;
    ob_ctx_t *c = NULL;
    CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);

    /* Bad batches are refused with a message and change nothing. */
    int32_t tok[16] = {5, 6, 7, 8}, pos[16] = {0, 1, 2, 3}, seq[16] = {0};
    int32_t bad_tok = V;
    ob_batch b = {1, &bad_tok, pos, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), -1);
    CHECK(strstr(err, "vocabulary") != NULL);
    int32_t p5 = 5;
    ob_batch b2 = {1, tok, &p5, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &b2, err, sizeof err), -1);
    CHECK(strstr(err, "position") != NULL);
    int32_t s9 = 9;
    ob_batch b3 = {1, tok, pos, &s9, NULL};
    CHECK_EQ_INT(ob_decode(c, &b3, err, sizeof err), -1);
    CHECK(strstr(err, "sequence") != NULL);
    int32_t far = 40;
    ob_batch b4 = {1, tok, &far, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &b4, err, sizeof err), -1);
    CHECK(strstr(err, "context") != NULL);
    ob_batch b5 = {17, tok, pos, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &b5, err, sizeof err), -1);
    CHECK_EQ_INT(ob_kv_seq_len(c, 0), 0);

    /* One sequence alone: reference logits of its last token. */
    ob_batch one = {4, tok, pos, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &one, err, sizeof err), 0);
    float *alone = malloc((size_t)V * sizeof(float));
    memcpy(alone, ob_get_logits(c, 0), (size_t)V * sizeof(float));
    CHECK_EQ_INT(ob_kv_seq_len(c, 0), 4);

    /* The same tokens as sequence 2, interleaved with another sequence 1, in one batch. */
    int32_t t2[8] = {5, 100, 6, 101, 7, 102, 8, 103}, p2[8] = {0, 0, 1, 1, 2, 2, 3, 3}, s2[8] = {2, 1, 2, 1, 2, 1, 2, 1};
    int8_t want[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    ob_batch mix = {8, t2, p2, s2, want};
    CHECK_EQ_INT(ob_decode(c, &mix, err, sizeof err), 0);
    CHECK(max_diff(alone, ob_get_logits(c, 0), V) < 1e-5);
    CHECK(ob_get_logits(c, 1) != NULL);
    CHECK(ob_get_logits(c, 2) == NULL);
    CHECK(max_diff(alone, ob_get_logits(c, 1), V) > 1e-3); /* sequence 1 saw other tokens */

    /* Truncate sequence 0 to 2 positions and redo the rest: same logits as before. */
    ob_kv_seq_truncate(c, 0, 2);
    CHECK_EQ_INT(ob_kv_seq_len(c, 0), 2);
    ob_batch rest = {2, tok + 2, pos + 2, NULL, NULL};
    CHECK_EQ_INT(ob_decode(c, &rest, err, sizeof err), 0);
    CHECK(max_diff(alone, ob_get_logits(c, 0), V) < 1e-5);

    /* Observer sees every layer's output. */
    CHECK_EQ_INT(ob_ctx_set_observer(c, count_obs, NULL), 0);
    ob_kv_seq_truncate(c, 0, 0);
    n_observed = 0;
    CHECK_EQ_INT(ob_decode(c, &one, err, sizeof err), 0);
    CHECK_EQ_INT(n_observed, 1);
    ob_ctx_set_observer(c, NULL, NULL);
    free(alone);
    ob_ctx_free(c);
    ob_model_free(m);
    remove(path);
    (void)seq;
}

/* BitNet's activation quantizer, on values worked out by hand. */
OB_SUITE(act_quant) {
    ob_backend *b = ob_backend_cpu_new();
    char err[128];
    ob_backend_opts o = {1, 0};
    CHECK_EQ_INT(b->init(b, &o, err, sizeof err), 0);
    /* Row 0: absmax 2 -> s = 63.5: 1.0*63.5 = 63.5 rounds to even 64; -2 -> -127; 0.01 -> 0.635 -> 1.
     * Row 1: all zero stays zero (scale clamped, no division by zero). */
    float x[8] = {1.0f, -2.0f, 0.01f, 0.5f, 0, 0, 0, 0};
    b->act_quant_i8(b, x, 2, 4);
    float s = 127.0f / 2.0f;
    CHECK_NEAR(x[0], 64 / s, 1e-7);
    CHECK_NEAR(x[1], -127 / s, 1e-7);
    CHECK_NEAR(x[2], 1 / s, 1e-7);
    CHECK_NEAR(x[3], 32 / s, 1e-7); /* 31.75 -> 32 */
    CHECK(x[4] == 0 && x[7] == 0);
    b->free(b);
    free(b);
}

/* Well-formed GGUF files that are not valid models: each refused with a message naming the
 * key or tensor. */
OB_SUITE(model_bad) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/model-bad.gguf", ob_test_tmpdir());
    struct {
        const char *arch;
        int drop_key;     /* omit block_count */
        int64_t q_rows;   /* attn_q rows */
        const char *expect;
    } cases[] = {
        {"nosucharch", 0, 8, "nosucharch"},
        {"llama", 1, 8, "block_count"},
        {"llama", 0, 7, "attn_q"},
    };
    float data[8 * 8 * 4] = {0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ob_gguf_writer_t *w = ob_gguf_writer_new();
        ob_gguf_writer_set_str(w, "general.architecture", cases[k].arch);
        char key[64];
        snprintf(key, sizeof key, "%s.embedding_length", cases[k].arch);
        ob_gguf_writer_set_u32(w, key, 8);
        if (!cases[k].drop_key) {
            snprintf(key, sizeof key, "%s.block_count", cases[k].arch);
            ob_gguf_writer_set_u32(w, key, 1);
        }
        snprintf(key, sizeof key, "%s.feed_forward_length", cases[k].arch);
        ob_gguf_writer_set_u32(w, key, 8);
        snprintf(key, sizeof key, "%s.attention.head_count", cases[k].arch);
        ob_gguf_writer_set_u32(w, key, 2);
        int64_t emb[2] = {8, 16}, vec[1] = {8}, sq[2] = {8, 8}, q[2] = {8, cases[k].q_rows};
        ob_gguf_writer_add_tensor(w, "token_embd.weight", 0, 2, emb, data, err, sizeof err);
        ob_gguf_writer_add_tensor(w, "output_norm.weight", 0, 1, vec, data, err, sizeof err);
        ob_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", 0, 1, vec, data, err, sizeof err);
        ob_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", 0, 2, q, data, err, sizeof err);
        ob_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", 0, 2, sq, data, err, sizeof err);
        CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
        ob_gguf_writer_free(w);
        ob_model_t *m = NULL;
        int rc = ob_model_load(path, NULL, &m, err, sizeof err);
        CHECK_EQ_INT(rc, -1);
        CHECK(m == NULL);
        if (!strstr(err, cases[k].expect)) fprintf(stderr, "  model_bad: '%s' lacks '%s'\n", err, cases[k].expect);
        CHECK(strstr(err, cases[k].expect) != NULL);
    }
    remove(path);
}
