/* test_quant_files.c — the new weight types in files: the loader refusing corrupt data,
 * `1bit quantize` (types per tensor as llama-quantize chooses them, importance matrices in
 * both llama.cpp formats) and end-to-end logits of quantized models.
 *
 * End-to-end tolerances. A model quantized to type T computes with weights W + E where
 * |E| / |W| is about T's relative weight RMSE r_T (quant_more's weight-like data: q6_K 0.017,
 * q5_K 0.034, q5_0/q5_1 0.042, q4_K 0.07, iq4 0.075, q4_1 0.08, mxfp4 0.11, q3_K 0.145, q2_K
 * 0.27). To first order the logits move in proportion: measured on the 2-layer random model,
 * max|diff| = 2.0..2.9 r_T max|ref| and rms(diff) = 1.8..2.4 r_T rms(ref) for every type, so
 * the checks are 6 r_T and 4 r_T (about twice the measured worst). The golden checkpoints'
 * sharp attention (q/k init std 0.2, see test_golden.c) amplifies up to 2.5 times more
 * (llama: max 7.2 r_T), so there r_T is scaled by 2.5. Top-1 agreement is printed, not
 * checked: random weights give flat logits whose top two tokens are often closer than any
 * quantization error (q6_K: 21/24). Each random-model case also quantizes twice: the bytes
 * must be equal (the searches are deterministic, whatever the thread count splits).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/imatrix.h"
#include "format/quant.h"
#include "format/quant_search.h"
#include "onebit.h"
#include "quant_gen.h"
#include "test.h"
#include "tools/quant_plan.h"
#include "tools/tools.h"

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/qf-%s", ob_test_tmpdir(), name); }

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(len > 0 ? (size_t)len : 1);
    *n = d ? fread(d, 1, (size_t)len, f) : 0;
    fclose(f);
    return d;
}

/* ---- corrupt files ------------------------------------------------------------------------ */

static const int new_types[] = {OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_MXFP4, OB_TYPE_IQ4_NL, OB_TYPE_Q2_K,
                                OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K, OB_TYPE_IQ4_XS};
#define N_NEW (int)(sizeof new_types / sizeof new_types[0])
/* the corrupt-file checks: every block type of docs/formats.md (i2_s, with its per-tensor
 * tail, is test_i2s.c's suite i2_s_file) */
static const int corrupt_types[] = {OB_TYPE_Q8_0, OB_TYPE_Q4_0, OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_MXFP4,
                                    OB_TYPE_IQ4_NL, OB_TYPE_Q2_K, OB_TYPE_Q3_K, OB_TYPE_Q4_K, OB_TYPE_Q5_K, OB_TYPE_Q6_K,
                                    OB_TYPE_IQ4_XS, OB_TYPE_TQ1_0, OB_TYPE_TQ2_0};

/* Offset of tensor 'name''s info record's ne[0] in a GGUF file (after its name and n_dims). */
static size_t find_ne0(const uint8_t *d, size_t n, const char *name) {
    size_t l = strlen(name);
    for (size_t i = 8; i + l + 12 < n; i++)
        if (memcmp(d + i, name, l) == 0 && d[i - 8] == l && d[i - 7] == 0) return i + l + 4;
    return 0;
}

static void expect_refused(const char *path, const char *what, const char *needle) {
    ob_gguf_t *g = NULL;
    char err[512] = "";
    int rc = ob_gguf_open(path, &g, err, sizeof err);
    if (rc == 0 || !strstr(err, needle)) fprintf(stderr, "  %s: rc %d, message '%s' (want '%s')\n", what, rc, err, needle);
    CHECK(rc != 0);
    CHECK(strstr(err, needle) != NULL);
    CHECK(strstr(err, "weights") != NULL); /* the message names the tensor */
    ob_gguf_close(g);
}

static void test_corrupt(void) {
    char path[512], bad[512];
    tmp_path(path, sizeof path, "corrupt.gguf");
    tmp_path(bad, sizeof bad, "corrupt-bad.gguf");
    float x[256 * 4];
    gen_weights(x, 4, 256, 5);
    for (int k = 0; k < (int)(sizeof corrupt_types / sizeof corrupt_types[0]); k++) {
        int type = corrupt_types[k];
        uint8_t q[256 * 4 * 2];
        ob_type_get(type)->from_float(x, q, 256 * 4);
        ob_gguf_writer_t *w = ob_gguf_writer_new();
        char err[256];
        int64_t ne[2] = {256, 4};
        CHECK(ob_gguf_writer_add_tensor(w, "weights", type, 2, ne, q, err, sizeof err) == 0);
        CHECK(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err) == 0);
        ob_gguf_writer_free(w);
        size_t n = 0;
        uint8_t *d = read_bytes(path, &n);
        ob_gguf_t *g = NULL;
        CHECK(ob_gguf_open(path, &g, err, sizeof err) == 0); /* the intact file loads */
        if (g) {
            const ob_gguf_tensor *t = ob_gguf_find_tensor(g, "weights");
            CHECK(t && t->type == type && t->size == ob_type_row_size(type, 256) * 4);
            CHECK(t && memcmp(t->data, q, t->size) == 0);
        }
        ob_gguf_close(g);
        /* truncated: the last block loses its last byte (the writer pads the data to 32 bytes) */
        size_t pad = (32 - (ob_type_row_size(type, 256) * 4) % 32) % 32;
        CHECK(write_bytes(bad, d, n - pad - 1) == 0);
        expect_refused(bad, "truncated", "extends past end of file");
        /* a row that is not a whole number of blocks */
        size_t at = find_ne0(d, n, "weights");
        CHECK(at > 0);
        uint8_t *e = malloc(n);
        memcpy(e, d, n);
        e[at] = (uint8_t)(256 - ob_type_get(type)->block_size / 2);
        CHECK(write_bytes(bad, e, n) == 0);
        expect_refused(bad, "partial block", "not a multiple of the block size");
        /* more rows claimed than the data holds (a wrong block count) */
        memcpy(e, d, n);
        e[at + 8] = 5;
        CHECK(write_bytes(bad, e, n) == 0);
        expect_refused(bad, "wrong block count", "extends past end of file");
        free(e);
        free(d);
    }
    remove(path);
    remove(bad);
}

/* ---- importance matrices --------------------------------------------------------------- */

/* A GGUF imatrix as llama-imatrix writes it: W.in_sum2 (sums) and W.counts per weight. */
static int write_imatrix_gguf(const char *path, const char *tensor, const float *sums, int n, float count, int with_keys) {
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    char name[256], err[256];
    if (with_keys) {
        const char *ds[] = {"test.txt"};
        ob_gguf_writer_set_arr_str(w, "imatrix.datasets", ds, NULL, 1);
        ob_gguf_writer_set_u32(w, "imatrix.chunk_count", 7);
        ob_gguf_writer_set_u32(w, "imatrix.chunk_size", 512);
    }
    int64_t ne[2] = {n, 1}, ne1[2] = {1, 1};
    snprintf(name, sizeof name, "%s.in_sum2", tensor);
    int rc = ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, ne, sums, err, sizeof err) < 0;
    snprintf(name, sizeof name, "%s.counts", tensor);
    rc |= ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, ne1, &count, err, sizeof err) < 0;
    rc |= ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err);
    ob_gguf_writer_free(w);
    return rc ? -1 : 0;
}

/* The legacy .dat layout: n_entries, {name_len, name, ncall, nval, values}, chunks, dataset. */
static size_t legacy_imatrix(uint8_t *b, const char *tensor, const float *sums, int n, int ncall) {
    size_t o = 0;
    int32_t v = 1, l = (int32_t)strlen(tensor);
    memcpy(b + o, &v, 4), o += 4;
    memcpy(b + o, &l, 4), o += 4;
    memcpy(b + o, tensor, (size_t)l), o += (size_t)l;
    memcpy(b + o, &ncall, 4), o += 4;
    memcpy(b + o, &n, 4), o += 4;
    memcpy(b + o, sums, (size_t)n * 4), o += (size_t)n * 4;
    v = 3;
    memcpy(b + o, &v, 4), o += 4;
    l = 4;
    memcpy(b + o, &l, 4), o += 4;
    memcpy(b + o, "wiki", 4), o += 4;
    return o;
}

static void test_imatrix(void) {
    char path[512];
    tmp_path(path, sizeof path, "imatrix.gguf");
    float sums[256];
    for (int i = 0; i < 256; i++) sums[i] = (float)(i % 7) * 10.0f;
    char err[512] = "";
    ob_imatrix_t *m = NULL;
    CHECK(write_imatrix_gguf(path, "blk.0.ffn_up.weight", sums, 256, 10.0f, 1) == 0);
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) == 0);
    int64_t n = 0;
    const float *v = ob_imatrix_find(m, "blk.0.ffn_up.weight", &n);
    CHECK(v && n == 256);
    CHECK(v && v[3] == 3.0f && v[7] == 0.0f); /* sums / count */
    CHECK(ob_imatrix_find(m, "blk.0.ffn_down.weight", &n) == NULL);
    CHECK_EQ_INT(ob_imatrix_chunks(m), 7);
    CHECK_STR(ob_imatrix_dataset(m), "test.txt");
    ob_imatrix_free(m);
    /* an expert that never ran (count 0) has importance 1 everywhere */
    CHECK(write_imatrix_gguf(path, "w", sums, 256, 0.0f, 0) == 0);
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) == 0);
    v = ob_imatrix_find(m, "w", &n);
    CHECK(v && v[3] == 1.0f && v[100] == 1.0f);
    ob_imatrix_free(m);
    /* legacy: sums / ncall, trailing chunk count and dataset */
    uint8_t b[2048];
    size_t len = legacy_imatrix(b, "blk.1.attn_q.weight", sums, 256, 5);
    CHECK(write_bytes(path, b, len) == 0);
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) == 0);
    v = ob_imatrix_find(m, "blk.1.attn_q.weight", &n);
    CHECK(v && n == 256 && v[1] == 2.0f);
    CHECK_EQ_INT(ob_imatrix_chunks(m), 3);
    CHECK_STR(ob_imatrix_dataset(m), "wiki");
    ob_imatrix_free(m);
    /* damaged files are refused with a message */
    CHECK(write_bytes(path, b, 40) == 0);
    m = NULL;
    err[0] = 0;
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) != 0 && m == NULL && strstr(err, "truncated"));
    sums[9] = -1.0f;
    legacy_imatrix(b, "x", sums, 256, 1);
    CHECK(write_bytes(path, b, len) == 0);
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) != 0 && strstr(err, "must be finite and >= 0"));
    CHECK(write_bytes(path, "GGUF", 4) == 0);
    CHECK(ob_imatrix_load(path, &m, err, sizeof err) != 0);
    remove(path);
}

/* ---- type plans: the same tensor types as llama-quantize ------------------------------- */

/* A random llama-architecture model: rows of 256 (whole K blocks), n_gqa 4. */
static int make_random_model(const char *json_name, const char *gguf_name, int n_layer, const char *type, char *out, size_t cap) {
    char cfg[512];
    tmp_path(cfg, sizeof cfg, json_name);
    tmp_path(out, cap, gguf_name);
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512,"
            " \"num_hidden_layers\": %d, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"vocab_size\": 320,"
            " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,"
            " \"bos_token_id\": 318, \"eos_token_id\": 319, \"tie_word_embeddings\": false}\n",
            n_layer);
    fclose(f);
    char *argv[] = {"convert", "--random", cfg, "-o", out, "--type", (char *)type, NULL};
    int rc = ob_cmd_convert(7, argv);
    remove(cfg);
    return rc;
}

/* The tensor types of a file in a compact, order-free form: "name=type" for the matrices
 * outside the layers (sorted), then per layer role (sorted) the types of layers 0..n-1,
 * roles whose every layer has type base left out. */
static void type_summary(const ob_gguf_t *g, const int *types, int base, char *out, size_t cap) {
    char other[16][96], roles[32][64], seq[32][256];
    int n_other = 0, n_roles = 0;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        int type = types ? types[i] : t->type;
        if (t->n_dims < 2) continue;
        char name[96];
        snprintf(name, sizeof name, "%s", t->name);
        char *w = strstr(name, ".weight");
        if (w) *w = 0;
        int layer;
        char role[64];
        if (sscanf(name, "blk.%d.%63s", &layer, role) == 2) {
            int r = 0;
            while (r < n_roles && strcmp(roles[r], role)) r++;
            if (r == n_roles && n_roles < 32) {
                snprintf(roles[n_roles], sizeof roles[0], "%s", role);
                seq[n_roles++][0] = 0;
            }
            if (r < 32) { /* layers appear in order in our files */
                size_t l = strlen(seq[r]);
                snprintf(seq[r] + l, sizeof seq[0] - l, "%s%s", l ? "," : "", type == base ? "-" : ob_type_name(type));
            }
        } else if (n_other < 16) {
            snprintf(other[n_other++], sizeof other[0], "%s=%s", name, ob_type_name(type));
        }
    }
    /* sort both lists (insertion sort, a handful of entries) */
    for (int i = 1; i < n_other; i++)
        for (int j = i; j > 0 && strcmp(other[j - 1], other[j]) > 0; j--) {
            char tmp[96];
            memcpy(tmp, other[j], sizeof tmp), memcpy(other[j], other[j - 1], sizeof tmp), memcpy(other[j - 1], tmp, sizeof tmp);
        }
    for (int i = 1; i < n_roles; i++)
        for (int j = i; j > 0 && strcmp(roles[j - 1], roles[j]) > 0; j--) {
            char tr[64], ts[256];
            memcpy(tr, roles[j], sizeof tr), memcpy(roles[j], roles[j - 1], sizeof tr), memcpy(roles[j - 1], tr, sizeof tr);
            memcpy(ts, seq[j], sizeof ts), memcpy(seq[j], seq[j - 1], sizeof ts), memcpy(seq[j - 1], ts, sizeof ts);
        }
    out[0] = 0;
    for (int i = 0; i < n_other; i++) snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", other[i]);
    for (int r = 0; r < n_roles; r++) {
        int all_base = 1;
        for (const char *p = seq[r]; *p; p++) all_base &= *p == '-' || *p == ',';
        if (!all_base) snprintf(out + strlen(out), cap - strlen(out), " %s=%s", roles[r], seq[r]);
    }
}

/* llama-quantize (llama.cpp 80fb11a) on the 8-layer model of make_random_model, in
 * type_summary's form ('-' = the mix's base type); taken with tools/compat/formats.sh's
 * model and compare.py typelist. */
static const struct {
    const char *mix;
    int base;
    const char *types;
} mix_expect[] = {
    {"Q4_K_M", OB_TYPE_Q4_K, "output=q6_K token_embd=q4_K attn_v=q6_K,-,-,q6_K,-,-,q6_K,q6_K ffn_down=q6_K,-,-,q6_K,-,-,q6_K,q6_K"},
    {"Q4_K_S", OB_TYPE_Q4_K, "output=q6_K token_embd=q4_K attn_v=q5_K,q5_K,q5_K,q5_K,-,-,-,- ffn_down=q5_K,-,-,-,-,-,-,-"},
    {"Q5_K_M", OB_TYPE_Q5_K, "output=q6_K token_embd=q5_K attn_v=q6_K,-,-,q6_K,-,-,q6_K,q6_K ffn_down=q6_K,-,-,q6_K,-,-,q6_K,q6_K"},
    {"Q5_K_S", OB_TYPE_Q5_K, "output=q6_K token_embd=q5_K"},
    {"Q3_K_S", OB_TYPE_Q3_K, "output=q6_K token_embd=q3_K"},
    {"Q3_K_M", OB_TYPE_Q3_K, "output=q6_K token_embd=q3_K attn_output=q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K "
                             "attn_v=q5_K,q5_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K ffn_down=q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K"},
    {"Q3_K_L", OB_TYPE_Q3_K, "output=q6_K token_embd=q3_K attn_output=q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K "
                             "attn_v=q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K ffn_down=q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K"},
    {"Q2_K", OB_TYPE_Q2_K, "output=q6_K token_embd=q2_K attn_output=q3_K,q3_K,q3_K,q3_K,q3_K,q3_K,q3_K,q3_K "
                           "attn_v=q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K,q4_K ffn_down=q3_K,q3_K,q3_K,q3_K,q3_K,q3_K,q3_K,q3_K"},
    {"IQ4_XS", OB_TYPE_IQ4_XS, "output=q6_K token_embd=iq4_xs attn_v=q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K ffn_down=q5_K,-,-,-,-,-,-,-"},
    {"IQ4_NL", OB_TYPE_IQ4_NL, "output=q6_K token_embd=iq4_nl attn_v=q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K,q5_K ffn_down=q5_K,-,-,-,-,-,-,-"},
    {"Q6_K", OB_TYPE_Q6_K, "output=q6_K token_embd=q6_K"},
    {"Q4_0", OB_TYPE_Q4_0, "output=q6_K token_embd=q4_0"},
    {"Q4_1", OB_TYPE_Q4_1, "output=q6_K token_embd=q4_1"},
    {"Q5_0", OB_TYPE_Q5_0, "output=q6_K token_embd=q5_0"},
    {"Q5_1", OB_TYPE_Q5_1, "output=q6_K token_embd=q5_1"},
    {"Q8_0", OB_TYPE_Q8_0, "output=q8_0 token_embd=q8_0"},
    {"TQ1_0", OB_TYPE_TQ1_0, "output=q6_K token_embd=q4_K"},
    {"TQ2_0", OB_TYPE_TQ2_0, "output=q6_K token_embd=q4_K"},
    {"MXFP4_MOE", OB_TYPE_Q8_0, "output=q8_0 token_embd=q8_0"},
};

static int quantize(const char *in, const char *out, const char *mix, const char *extra1, const char *extra2) {
    char *argv[12];
    int n = 0;
    argv[n++] = "quantize";
    if (extra1) argv[n++] = (char *)extra1;
    if (extra2) argv[n++] = (char *)extra2;
    argv[n++] = (char *)in;
    argv[n++] = (char *)out;
    argv[n++] = (char *)mix;
    argv[n++] = "2";
    argv[n] = NULL;
    return ob_cmd_quantize(n, argv);
}

static void test_mixes(void) {
    char model[512], out[512], err[512];
    CHECK_EQ_INT(make_random_model("r8.json", "r8-f16.gguf", 8, "f16", model, sizeof model), 0);
    tmp_path(out, sizeof out, "r8-q.gguf");
    ob_gguf_t *in = NULL;
    CHECK(ob_gguf_open(model, &in, err, sizeof err) == 0);
    if (!in) return;
    int types[128];
    CHECK(ob_gguf_n_tensors(in) <= 128);
    for (size_t k = 0; k < sizeof mix_expect / sizeof mix_expect[0]; k++) {
        /* the plan for every mix; the whole tool, file and all, for a few */
        ob_qplan p = {0};
        p.mix = ob_qmix_by_name(mix_expect[k].mix);
        p.output_type = p.token_embd_type = -1;
        CHECK(p.mix != NULL);
        if (!p.mix) continue;
        ob_qplan_file(&p, in, types);
        char got[1024];
        type_summary(in, types, mix_expect[k].base, got, sizeof got);
        if (strcmp(got, mix_expect[k].types))
            fprintf(stderr, "  %s: got      %s\n  %s: expected %s\n", mix_expect[k].mix, got, mix_expect[k].mix, mix_expect[k].types);
        CHECK_STR(got, mix_expect[k].types);
        if (strcmp(mix_expect[k].mix, "Q4_K_M") && strcmp(mix_expect[k].mix, "IQ4_XS") && strcmp(mix_expect[k].mix, "Q2_K")) continue;
        remove(out);
        int rc = quantize(model, out, mix_expect[k].mix, NULL, NULL);
        CHECK_EQ_INT(rc, 0);
        ob_gguf_t *g = NULL;
        if (rc || ob_gguf_open(out, &g, err, sizeof err)) {
            CHECK(0);
            continue;
        }
        type_summary(g, NULL, mix_expect[k].base, got, sizeof got);
        CHECK_STR(got, mix_expect[k].types);
        int64_t ft = -1;
        CHECK(ob_gguf_get_i64(g, "general.file_type", &ft, err, sizeof err) == 1 && ft == p.mix->ftype);
        CHECK(ob_gguf_get_i64(g, "general.quantization_version", &ft, err, sizeof err) == 1 && ft == 2);
        const char *name = NULL;
        CHECK(ob_gguf_get_str(g, "general.name", &name, err, sizeof err) == 1); /* metadata copied */
        ob_gguf_close(g);
    }
    ob_gguf_close(in);
    remove(out);
    remove(model);
}

/* ---- end to end: logits of quantized models --------------------------------------------- */

/* Token ids of tests/golden/<arch>/tokens.json (the random models share its 320-token vocab). */
static int golden_tokens(const char *arch, int32_t *tok, int cap) {
    char path[256];
    snprintf(path, sizeof path, "tests/golden/%s/tokens.json", arch);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return 0;
    json_t *a = json_object_get(j, "tokens");
    int n = (int)json_array_size(a);
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) tok[i] = (int32_t)json_integer_value(json_array_get(a, i));
    json_decref(j);
    return n;
}

/* Logits [n][n_vocab] of one batch over tok, malloc'ed; NULL if the model does not load. */
static float *model_logits(const char *path, const int32_t *tok, int n, int *n_vocab) {
    char err[512];
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model_t *m = NULL;
    if (ob_model_load(path, &mp, &m, err, sizeof err)) {
        fprintf(stderr, "  %s: %s\n", path, err);
        return NULL;
    }
    *n_vocab = ob_model_get_info(m)->n_vocab;
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n + 4;
    cp.n_batch = n;
    ob_ctx_t *c = NULL;
    float *out = NULL;
    int32_t pos[64];
    int8_t all[64];
    for (int i = 0; i < n; i++) pos[i] = i, all[i] = 1;
    ob_batch b = {n, (int32_t *)tok, pos, NULL, all};
    if (n <= 64 && ob_ctx_new(m, &cp, &c, err, sizeof err) == 0 && ob_decode(c, &b, err, sizeof err) == 0 &&
        (out = malloc((size_t)n * (size_t)*n_vocab * sizeof *out)))
        for (int i = 0; i < n; i++) memcpy(out + (size_t)i * *n_vocab, ob_get_logits(c, i), (size_t)*n_vocab * sizeof *out);
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Relative weight RMSE of each type (quant_more's weight-like data, rounded up): the scale of
 * the tolerances, see the top of the file. */
static double type_rel_rmse(int t) {
    switch (t) {
    case OB_TYPE_Q6_K: return 0.017;
    case OB_TYPE_Q5_K: return 0.034;
    case OB_TYPE_Q5_0: case OB_TYPE_Q5_1: return 0.042;
    case OB_TYPE_Q4_K: return 0.07;
    case OB_TYPE_IQ4_NL: case OB_TYPE_IQ4_XS: return 0.075;
    case OB_TYPE_Q4_1: return 0.08;
    case OB_TYPE_MXFP4: return 0.11;
    case OB_TYPE_Q3_K: return 0.145;
    case OB_TYPE_Q2_K: return 0.27;
    case OB_TYPE_Q4_0: return 0.09;
    case OB_TYPE_Q8_0: return 0.0045;
    case OB_TYPE_F16: case OB_TYPE_BF16: return 0.004;
    case OB_TYPE_F32: return 0.0;
    default: return 0.3;
    }
}

/* max|diff| <= 6 r max|ref| and rms(diff) <= 4 r rms(ref), r the type's relative weight
 * error (see the top of the file). Top-1 agreement is not checked: random weights give
 * flat logits whose top two tokens are often closer than any quantization error. */
static void compare_logits(const char *what, const float *ref, const float *got, int n, int n_vocab, double r) {
    double maxref = 0, maxdiff = 0, ss_ref = 0, ss_diff = 0;
    int top = 0;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < n_vocab; k++) {
            double a = ref[(size_t)i * n_vocab + k], d = fabs((double)got[(size_t)i * n_vocab + k] - a);
            if (!(d <= maxdiff)) maxdiff = d; /* NaN sticks */
            if (fabs(a) > maxref) maxref = fabs(a);
            ss_ref += a * a;
            ss_diff += d * d;
        }
        top += argmax(got + (size_t)i * n_vocab, n_vocab) == argmax(ref + (size_t)i * n_vocab, n_vocab);
    }
    double rms_ratio = sqrt(ss_diff / ss_ref);
    if (ob_test_verbose || !(maxdiff <= 6 * r * maxref) || !(rms_ratio <= 4 * r))
        fprintf(stderr, "  %-22s max|diff| %.4f = %.2f r max|ref| (tol 6), rms ratio %.4f = %.2f r (tol 4), top-1 %d/%d\n", what,
                maxdiff, maxdiff / (r * maxref), rms_ratio, rms_ratio / r, top, n);
    CHECK(maxdiff <= 6 * r * maxref);
    CHECK(rms_ratio <= 4 * r);
}

static void test_end_to_end(void) {
    char model[512], q1[512], q2[512];
    int32_t tok[64];
    int n = golden_tokens("llama", tok, 64), n_vocab = 0, nv = 0;
    CHECK(n > 8);
    CHECK_EQ_INT(make_random_model("r2.json", "r2-f32.gguf", 2, "f32", model, sizeof model), 0);
    float *ref = model_logits(model, tok, n, &n_vocab);
    CHECK(ref != NULL);
    if (!ref) return;
    tmp_path(q1, sizeof q1, "r2-q1.gguf");
    tmp_path(q2, sizeof q2, "r2-q2.gguf");
    for (int k = 0; k < N_NEW; k++) {
        int type = new_types[k];
        const char *mix = ob_qmix_for_type(type)->name;
        CHECK_EQ_INT(quantize(model, q1, mix, "--pure", NULL), 0);
        float *got = model_logits(q1, tok, n, &nv);
        CHECK(got != NULL && nv == n_vocab);
        char what[64];
        snprintf(what, sizeof what, "random %s", ob_type_name(type));
        if (got) compare_logits(what, ref, got, n, n_vocab, type_rel_rmse(type));
        free(got);
        /* deterministic: the same input quantizes to the same bytes */
        CHECK_EQ_INT(quantize(model, q2, mix, "--pure", NULL), 0);
        size_t l1 = 0, l2 = 0;
        uint8_t *b1 = read_bytes(q1, &l1), *b2 = read_bytes(q2, &l2);
        CHECK(b1 && b2 && l1 == l2 && memcmp(b1, b2, l1) == 0);
        free(b1);
        free(b2);
    }
    free(ref);
    remove(model);
    remove(q1);
    remove(q2);
}

/* The golden checkpoints (rows of 64: only the 32-element types fit) against transformers,
 * with test_golden.c's q4_0 bounds scaled by the types' error. */
static void test_golden_32(void) {
    static const char *archs[] = {"llama", "qwen3"};
    static const int types[] = {OB_TYPE_Q4_1, OB_TYPE_Q5_0, OB_TYPE_Q5_1, OB_TYPE_IQ4_NL, OB_TYPE_MXFP4};
    for (size_t a = 0; a < 2; a++) {
        char dir[128], path[256], f32[512], q[512];
        snprintf(dir, sizeof dir, "tests/golden/%s", archs[a]);
        tmp_path(f32, sizeof f32, "golden-f32.gguf");
        tmp_path(q, sizeof q, "golden-q.gguf");
        char *argv[] = {"convert", dir, "-o", f32, "--type", "f32", NULL};
        CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
        int32_t tok[64];
        int n = golden_tokens(archs[a], tok, 64), n_vocab = 0;
        snprintf(path, sizeof path, "%s/logits.f32", dir);
        size_t nb = 0;
        float *hf = (float *)read_bytes(path, &nb);
        float *base = model_logits(f32, tok, n, &n_vocab);
        CHECK(hf && base && nb == (size_t)n * n_vocab * sizeof(float));
        for (size_t k = 0; hf && base && k < sizeof types / sizeof types[0]; k++) {
            CHECK_EQ_INT(quantize(f32, q, ob_qmix_for_type(types[k])->name, "--pure", NULL), 0);
            int nv = 0;
            float *got = model_logits(q, tok, n, &nv);
            CHECK(got != NULL);
            char what[64];
            snprintf(what, sizeof what, "%s %s vs f32", archs[a], ob_type_name(types[k]));
            /* the goldens' sharp attention amplifies ~2.5x more than the random models */
            if (got) compare_logits(what, base, got, n, n_vocab, 2.5 * type_rel_rmse(types[k]));
            free(got);
        }
        free(hf);
        free(base);
        remove(f32);
        remove(q);
    }
}

/* `1bit convert --type T` for every new type and two mixes, on a golden checkpoint (rows of
 * 64): each matrix gets T or llama.cpp's fallback for T, and the model runs within the
 * tolerance of the type it got. */
static void test_convert_types(void) {
    static const char *names[] = {"q4_1", "q5_0", "q5_1", "mxfp4", "iq4_nl", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs", "Q4_K_M", "Q5_K_S"};
    char f32[512], q[512], err[512];
    tmp_path(f32, sizeof f32, "conv-f32.gguf");
    tmp_path(q, sizeof q, "conv-q.gguf");
    char *a0[] = {"convert", "tests/golden/qwen2", "-o", f32, "--type", "f32", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, a0), 0);
    int32_t tok[64];
    int n = golden_tokens("qwen2", tok, 64), n_vocab = 0, nv = 0;
    float *ref = model_logits(f32, tok, n, &n_vocab);
    CHECK(ref != NULL);
    for (size_t k = 0; ref && k < sizeof names / sizeof names[0]; k++) {
        char *a[] = {"convert", "tests/golden/qwen2", "-o", q, "--type", (char *)names[k], NULL};
        CHECK_EQ_INT(ob_cmd_convert(6, a), 0);
        ob_gguf_t *g = NULL;
        CHECK(ob_gguf_open(q, &g, err, sizeof err) == 0);
        if (!g) continue;
        int t = ob_type_from_name(names[k]), bad = 0;
        double worst = 0; /* the least accurate type in the file sets the tolerance */
        for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
            const ob_gguf_tensor *x = ob_gguf_tensor_at(g, i);
            if (x->n_dims < 2) continue;
            if (t >= 0) bad += x->type != ob_qplan_fallback(t, x->ne[0]);
            if (type_rel_rmse(x->type) > worst) worst = type_rel_rmse(x->type);
        }
        CHECK_EQ_INT(bad, 0);
        ob_gguf_close(g);
        float *got = model_logits(q, tok, n, &nv);
        CHECK(got != NULL);
        char what[64];
        snprintf(what, sizeof what, "qwen2 convert %s", names[k]);
        if (got) compare_logits(what, ref, got, n, n_vocab, 2.5 * worst);
        free(got);
    }
    free(ref);
    remove(f32);
    remove(q);
}

/* An importance matrix (GGUF, as llama-imatrix writes) for every matrix of a model file:
 * gen_importance values times count 4, so the normalised values are gen_importance's. */
static int write_model_imatrix(const char *model, const char *path) {
    ob_gguf_t *g = NULL;
    char err[256];
    if (ob_gguf_open(model, &g, err, sizeof err)) return -1;
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    const char *ds[] = {"synthetic"};
    ob_gguf_writer_set_arr_str(w, "imatrix.datasets", ds, NULL, 1);
    ob_gguf_writer_set_u32(w, "imatrix.chunk_count", 1);
    ob_gguf_writer_set_u32(w, "imatrix.chunk_size", 512);
    static float vals[64][1024], four = 4.0f;
    int rc = 0, nv = 0;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g) && nv < 64; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        if (t->n_dims < 2 || t->ne[0] > 1024) continue;
        gen_importance(vals[nv], (int)t->ne[0], 100 + (uint64_t)i);
        for (int c = 0; c < t->ne[0]; c++) vals[nv][c] *= 4.0f;
        char name[256];
        int64_t ne[2] = {t->ne[0], 1}, one[2] = {1, 1};
        snprintf(name, sizeof name, "%s.in_sum2", t->name);
        rc |= ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, ne, vals[nv++], err, sizeof err) < 0;
        snprintf(name, sizeof name, "%s.counts", t->name);
        rc |= ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, one, &four, err, sizeof err) < 0;
    }
    rc |= ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err);
    ob_gguf_writer_free(w);
    ob_gguf_close(g);
    return rc ? -1 : 0;
}

/* Importance-weighted squared error of tensor name in file q against file ref, with the
 * importance values im gives it. */
static double weighted_error(const char *ref, const char *q, const char *name, const ob_imatrix_t *im) {
    ob_gguf_t *a = NULL, *b = NULL;
    char err[256];
    double e = -1;
    if (ob_gguf_open(ref, &a, err, sizeof err) == 0 && ob_gguf_open(q, &b, err, sizeof err) == 0) {
        const ob_gguf_tensor *ta = ob_gguf_find_tensor(a, name), *tb = ob_gguf_find_tensor(b, name);
        int64_t nv = 0, n = ta ? ta->ne[0] * ta->ne[1] : 0;
        const float *v = ob_imatrix_find(im, name, &nv);
        float *x = malloc((size_t)n * 4 + 4), *y = malloc((size_t)n * 4 + 4);
        if (ta && tb && v && x && y) {
            ob_type_get(ta->type)->to_float(ta->data, x, n);
            ob_type_get(tb->type)->to_float(tb->data, y, n);
            e = 0;
            for (int64_t i = 0; i < n; i++) e += v[i % ta->ne[0]] * ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        }
        free(x);
        free(y);
    }
    ob_gguf_close(a);
    ob_gguf_close(b);
    return e;
}

static int file_has_key(const char *path, const char *key) {
    ob_gguf_t *g = NULL;
    char err[256];
    int r = ob_gguf_open(path, &g, err, sizeof err) == 0 && ob_gguf_get(g, key) != NULL;
    ob_gguf_close(g);
    return r;
}

/* The tool's importance-matrix path and its refusals. */
static void test_quantize_options(void) {
    char model[512], im_path[512], q1[512], q2[512], err[512];
    CHECK_EQ_INT(make_random_model("r4.json", "r4-f16.gguf", 4, "f16", model, sizeof model), 0);
    tmp_path(im_path, sizeof im_path, "r4.imatrix.gguf");
    tmp_path(q1, sizeof q1, "r4-plain.gguf");
    tmp_path(q2, sizeof q2, "r4-imatrix.gguf");
    CHECK_EQ_INT(write_model_imatrix(model, im_path), 0);
    ob_imatrix_t *im = NULL;
    CHECK(ob_imatrix_load(im_path, &im, err, sizeof err) == 0);
    /* with an importance matrix the weighted error drops, and the file says where it came from */
    CHECK_EQ_INT(quantize(model, q1, "Q3_K_S", NULL, NULL), 0);
    CHECK_EQ_INT(quantize(model, q2, "Q3_K_S", "--imatrix", im_path), 0);
    double e1 = weighted_error(model, q1, "blk.3.ffn_up.weight", im), e2 = weighted_error(model, q2, "blk.3.ffn_up.weight", im);
    if (ob_test_verbose) fprintf(stderr, "  Q3_K_S weighted error: %.4g without, %.4g with the importance matrix\n", e1, e2);
    CHECK(e1 > 0 && e2 > 0 && e2 < 0.9 * e1);
    CHECK(!file_has_key(q1, "quantize.imatrix.file"));
    CHECK(file_has_key(q2, "quantize.imatrix.file") && file_has_key(q2, "quantize.imatrix.entries_count"));
    /* Q2_K_S needs one (as llama-quantize), and works with it */
    CHECK(quantize(model, q1, "Q2_K_S", NULL, NULL) != 0);
    CHECK_EQ_INT(quantize(model, q1, "Q2_K_S", "--imatrix", im_path), 0);
    /* requantizing needs --allow-requantize */
    CHECK(quantize(q2, q1, "Q4_K_M", NULL, NULL) != 0);
    CHECK_EQ_INT(quantize(q2, q1, "Q4_K_M", "--allow-requantize", NULL), 0);
    /* forced output / embedding types */
    CHECK_EQ_INT(quantize(model, q1, "Q4_K_M", "--output-tensor-type", "q8_0"), 0);
    ob_gguf_t *g = NULL;
    CHECK(ob_gguf_open(q1, &g, err, sizeof err) == 0);
    CHECK(g && ob_gguf_find_tensor(g, "output.weight")->type == OB_TYPE_Q8_0);
    ob_gguf_close(g);
    CHECK_EQ_INT(quantize(model, q1, "Q4_K_M", "--token-embedding-type", "f16"), 0);
    CHECK(ob_gguf_open(q1, &g, err, sizeof err) == 0);
    CHECK(g && ob_gguf_find_tensor(g, "token_embd.weight")->type == OB_TYPE_F16);
    ob_gguf_close(g);
    /* refusals: an unknown type, the input as output, an importance matrix of another shape */
    CHECK(quantize(model, q1, "IQ2_XXS", NULL, NULL) != 0);
    CHECK(quantize(model, model, "Q4_K_M", NULL, NULL) != 0);
    char small[512];
    tmp_path(small, sizeof small, "small.imatrix.gguf");
    float sums[128] = {0};
    CHECK(write_imatrix_gguf(small, "blk.0.attn_q.weight", sums, 128, 1.0f, 1) == 0);
    CHECK(quantize(model, q1, "Q4_K_M", "--imatrix", small) != 0);
    remove(small);
    ob_imatrix_free(im);
    remove(model);
    remove(im_path);
    remove(q1);
    remove(q2);
}

OB_SUITE(quant_files) {
    test_corrupt();
    test_imatrix();
    test_mixes();
    test_end_to_end();
    test_golden_32();
    test_convert_types();
    test_quantize_options();
}
