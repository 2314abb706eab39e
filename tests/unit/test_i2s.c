/* test_i2s.c — bitnet.cpp's I2_S type and packed BitNet checkpoints.
 *
 *  - i2_s: the byte layout on hand-made data, bit identity with bitnet.cpp's quantize_i2_s
 *    (a hash taken from bitnet.cpp itself, see the constant), round trips, and refusal of
 *    corrupt data (a 2-bit code 3, a NaN or negative scale, a truncated tensor).
 *  - i2_s files: the golden BitNet model converted to i2_s is laid out as Microsoft's
 *    ggml-model-i2_s.gguf (arch bitnet-b1.58, file_type 40, i2_s linears of n/4 + 32 bytes,
 *    f16 token_embd, no output.weight), loads and gives the logits of the f32 conversion.
 *  - packed checkpoints: the golden model's ternarized weights packed the way transformers'
 *    BitLinear stores them (U8, 4 trits per byte along the output dimension, + weight_scale)
 *    convert to the very same GGUF tensors as the bf16 masters, for f32, tq2_0 and i2_s.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onebit.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "format/safetensors.h"
#include "test.h"
#include "tools/tools.h"

static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

OB_SUITE(i2_s) {
    /* Layout by hand: a 1 x 256 tensor of zeros except four elements. Zero is code 1, so the
     * background byte is 01 01 01 01 = 0x55; element j of a 128-block sits in byte j % 32 at
     * bits 6 - 2 * (j / 32). */
    float x[256] = {0};
    const float m = 0.375f;
    x[0] = m;      /* byte 0, bits 7..6 = 2 */
    x[33] = -m;    /* byte 1, bits 5..4 = 0 */
    x[127] = m;    /* byte 31, bits 1..0 = 2 */
    x[128] = -m;   /* block 1: byte 32, bits 7..6 = 0 */
    CHECK_EQ_INT(ob_type_tensor_size(OB_TYPE_I2_S, 256, 1), 64 + 32);
    uint8_t q[96];
    memset(q, 0xee, sizeof q);
    CHECK_EQ_INT(ob_tensor_quantize(OB_TYPE_I2_S, x, q, 256, 1), 0);
    CHECK_EQ_INT(q[0], 0x95);
    CHECK_EQ_INT(q[1], 0x45);
    CHECK_EQ_INT(q[2], 0x55);
    CHECK_EQ_INT(q[31], 0x56);
    CHECK_EQ_INT(q[32], 0x15);
    CHECK_EQ_INT(q[63], 0x55);
    float s;
    memcpy(&s, q + 64, 4);
    CHECK(s == m);
    int zeros = 1;
    for (int i = 68; i < 96; i++) zeros &= q[i] == 0;
    CHECK(zeros);
    CHECK(ob_tensor_scale(OB_TYPE_I2_S, q, 256, 1) == m);
    float y[256];
    CHECK_EQ_INT(ob_tensor_dequantize(OB_TYPE_I2_S, q, y, 256, 1), 0);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* the row routine gives the unscaled trits */
    ob_type_get(OB_TYPE_I2_S)->to_float(q, y, 256);
    CHECK(y[0] == 1 && y[33] == -1 && y[1] == 0 && y[128] == -1);

    /* bitnet.cpp identity. Input: 8 x 256 trits of the LCG below times 0.0123. The hash is of
     * the 512 code bytes + the 4 scale bytes that bitnet.cpp's ggml_quantize_chunk(GGML_TYPE_I2_S)
     * wrote (microsoft/BitNet 6076696 with its llama.cpp fork 406a503, built beside 1bit, not
     * part of it; docs/compat.md "I2_S"). Its mul_mat on these bytes also matched our
     * dequantization to 0.35% (its int8 activations). */
    enum { M = 8, K = 256 };
    float *w = malloc(M * K * sizeof *w), *back = malloc(M * K * sizeof *back);
    uint8_t *b = calloc(1, M * K / 4 + 32);
    uint64_t st = 42;
    for (int i = 0; i < M * K; i++) w[i] = (float)((int)(lcg(&st) % 3) - 1) * 0.0123f;
    CHECK_EQ_INT(ob_tensor_quantize(OB_TYPE_I2_S, w, b, K, M), 0);
    CHECK(fnv(b, M * K / 4 + 4) == 0xde85cede4a5c69d2ull);
    CHECK_EQ_INT(ob_tensor_dequantize(OB_TYPE_I2_S, b, back, K, M), 0);
    CHECK(memcmp(w, back, M * K * sizeof *w) == 0);
    char err[256] = "";
    CHECK_EQ_INT(ob_tensor_validate(OB_TYPE_I2_S, b, K, M, err, sizeof err), 0);

    /* Non-ternary input is ternarized by absmean, with the least-squares scale. */
    float g[128], gb[128];
    uint8_t gq[64];
    for (int i = 0; i < 128; i++) g[i] = (float)(i % 7) - 3.0f; /* mean |g| = 12/7 */
    CHECK_EQ_INT(ob_tensor_quantize(OB_TYPE_I2_S, g, gq, 128, 1), 0);
    CHECK_EQ_INT(ob_tensor_dequantize(OB_TYPE_I2_S, gq, gb, 128, 1), 0);
    double sa = 0, kept = 0;
    int nk = 0;
    for (int i = 0; i < 128; i++) sa += fabsf(g[i]);
    for (int i = 0; i < 128; i++)
        if (fabsf(g[i]) / (sa / 128) >= 0.5) kept += fabsf(g[i]), nk++;
    CHECK(gb[0] < 0 && gb[3] == 0 && gb[6] > 0);
    CHECK_NEAR(gb[6], kept / nk, 1e-6); /* the least-squares scale: mean |g| of the kept elements */
    CHECK(gb[6] == -gb[0] && (gb[1] == gb[0] || gb[1] == 0));

    /* Corrupt data is refused with a reason. */
    b[5] |= 0x0c; /* a field = 3 */
    CHECK_EQ_INT(ob_tensor_validate(OB_TYPE_I2_S, b, K, M, err, sizeof err), -1);
    CHECK(strstr(err, "code 3") != NULL);
    b[5] &= (uint8_t)~0x0c;
    b[5] |= 0x04;
    float bad = NAN;
    memcpy(b + M * K / 4, &bad, 4);
    CHECK_EQ_INT(ob_tensor_validate(OB_TYPE_I2_S, b, K, M, err, sizeof err), -1);
    CHECK(strstr(err, "scale") != NULL);
    bad = -1.0f;
    memcpy(b + M * K / 4, &bad, 4);
    CHECK_EQ_INT(ob_tensor_validate(OB_TYPE_I2_S, b, K, M, err, sizeof err), -1);
    free(w);
    free(back);
    free(b);
    /* Rows must be whole 128-element blocks. */
    CHECK_EQ_INT(ob_type_tensor_size(OB_TYPE_I2_S, 192, 4), 0);
}

/* ---- files ---------------------------------------------------------------------------- */

static float *golden_logits(const char *gguf, const int32_t *tok, int n, int *n_vocab, char *err, size_t errlen) {
    ob_model_t *m = NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    if (ob_model_load(gguf, &mp, &m, err, errlen)) return NULL;
    *n_vocab = ob_model_get_info(m)->n_vocab;
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n + 4;
    cp.n_batch = n;
    cp.type_k = cp.type_v = OB_KV_F32; /* as the golden tests: no KV rounding in the comparison */
    ob_ctx_t *c = NULL;
    float *out = NULL;
    int32_t pos[64];
    int8_t all[64];
    for (int i = 0; i < n; i++) pos[i] = i, all[i] = 1;
    ob_batch b = {n, tok, pos, NULL, all};
    if (!ob_ctx_new(m, &cp, &c, err, errlen) && !ob_decode(c, &b, err, errlen)) {
        out = malloc((size_t)n * *n_vocab * sizeof *out);
        for (int i = 0; i < n; i++) memcpy(out + (size_t)i * *n_vocab, ob_get_logits(c, i), (size_t)*n_vocab * sizeof *out);
    }
    ob_ctx_free(c);
    ob_model_free(m);
    return out;
}

static const int32_t golden_tok[24] = {318, 302, 220, 80, 84, 72, 66, 74, 268, 278, 296, 272,
                                       78, 87, 220, 73, 84, 76, 79, 82, 266, 305, 259, 286};

static int convert(const char *dir, const char *out, const char *type) {
    char *argv[] = {"convert", (char *)dir, "-o", (char *)out, "--type", (char *)type, NULL};
    return ob_cmd_convert(6, argv);
}

/* convert, with what it prints on stderr captured into msg (for checking refusals). */
static int convert_msg(const char *dir, const char *out, const char *type, char *msg, size_t len) {
    char path[256];
    snprintf(path, sizeof path, "%s/convert-stderr.txt", ob_test_tmpdir());
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    dup2(fileno(f), 2);
    int rc = convert(dir, out, type);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(msg, 1, len - 1, f);
    msg[n] = 0;
    fclose(f);
    remove(path);
    return rc;
}

OB_SUITE(i2_s_file) {
    char out[256], f32[256], err[512];
    snprintf(out, sizeof out, "%s/i2s-golden.gguf", ob_test_tmpdir());
    snprintf(f32, sizeof f32, "%s/i2s-golden-f32.gguf", ob_test_tmpdir());
    CHECK_EQ_INT(convert("tests/golden/bitnet", out, "i2_s"), 0);
    CHECK_EQ_INT(convert("tests/golden/bitnet", f32, "f32"), 0);
    /* Laid out as Microsoft's file. */
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(out, &g, err, sizeof err), 0);
    if (!g) return;
    const char *arch = NULL;
    int64_t ft = 0;
    ob_gguf_get_str(g, "general.architecture", &arch, err, sizeof err);
    CHECK_STR(arch, "bitnet-b1.58");
    CHECK_EQ_INT(ob_gguf_get_i64(g, "general.file_type", &ft, err, sizeof err), 1);
    CHECK_EQ_INT(ft, 40);
    CHECK(ob_gguf_find_tensor(g, "output.weight") == NULL);
    CHECK_EQ_INT(ob_gguf_find_tensor(g, "token_embd.weight")->type, OB_TYPE_F16);
    const ob_gguf_tensor *q = ob_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(q && q->type == OB_TYPE_I2_S && q->type == 36);
    if (q) CHECK_EQ_INT(q->size, q->ne[0] * q->ne[1] / 4 + 32);
    int n_i2s = 0;
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        n_i2s += t->type == OB_TYPE_I2_S;
        CHECK(t->offset % 32 == 0);
        if (t->n_dims == 1) CHECK_EQ_INT(t->type, OB_TYPE_F32);
    }
    CHECK_EQ_INT(n_i2s, 14);
    size_t qoff = q ? (size_t)((const uint8_t *)q->data - (const uint8_t *)ob_gguf_tensor_at(g, 0)->data +
                               ob_gguf_tensor_at(g, 0)->offset) : 0;
    ob_gguf_close(g);

    /* It runs, with the logits of the f32 file (the same ternary weights): identical in the
     * reference path; the fast kernels quantize activations per block (q8), which BitNet's
     * int8 activation quantization turns into a few flipped codes, hence the golden test's
     * BitNet tolerance (tests/unit/test_golden.c): max 8% of max|logit|, top token >= 90%. */
    int V = 0, V2 = 0;
    float *a = golden_logits(out, golden_tok, 24, &V, err, sizeof err);
    if (!a) fprintf(stderr, "  i2_s_file: %s\n", err);
    float *b = golden_logits(f32, golden_tok, 24, &V2, err, sizeof err);
    CHECK(a && b && V == V2);
    if (a && b) {
        double md = 0, mr = 0;
        int top = 0;
        for (int t = 0; t < 24; t++) {
            int ia = 0, ib = 0;
            for (int v = 0; v < V; v++) {
                size_t i = (size_t)t * V + v;
                md = fmax(md, fabs((double)a[i] - b[i]));
                mr = fmax(mr, fabs((double)b[i]));
                if (a[i] > a[(size_t)t * V + ia]) ia = v;
                if (b[i] > b[(size_t)t * V + ib]) ib = v;
            }
            top += ia == ib;
        }
        if (ob_test_verbose || md > 0.08 * mr) fprintf(stderr, "  i2_s vs f32 logits: max|diff| %.3g (max %.3g), top-1 %d/24\n", md, mr, top);
        CHECK(md <= 0.08 * mr);
        CHECK(top >= 22);
    }
    free(a);
    free(b);

    /* Corrupt copies are refused, naming the tensor. */
    FILE *f = fopen(out, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)len);
    CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    size_t data_start = 0; /* file offset of the data section: find the tensor's bytes */
    (void)qoff;
    g = NULL;
    CHECK_EQ_INT(ob_gguf_open_buffer(buf, (size_t)len, &g, err, sizeof err), 0);
    q = g ? ob_gguf_find_tensor(g, "blk.1.ffn_down.weight") : NULL;
    if (q) data_start = (size_t)((const uint8_t *)q->data - buf);
    size_t qn = q ? (size_t)(q->ne[0] * q->ne[1] / 4) : 0;
    ob_gguf_close(g);
    CHECK(data_start > 0);
    struct { size_t off; uint8_t val; const char *want; } cases[] = {
        {data_start + 3, 0xff, "code 3"},
        {data_start + qn + 3, 0xff, "scale"}, /* f32 scale's top byte: a NaN */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t save = buf[cases[k].off];
        buf[cases[k].off] = cases[k].val;
        char bad[256];
        snprintf(bad, sizeof bad, "%s/i2s-bad.gguf", ob_test_tmpdir());
        f = fopen(bad, "wb");
        fwrite(buf, 1, (size_t)len, f);
        fclose(f);
        ob_model_t *m = NULL;
        CHECK_EQ_INT(ob_model_load(bad, NULL, &m, err, sizeof err), -1);
        CHECK(strstr(err, "blk.1.ffn_down.weight") && strstr(err, cases[k].want));
        if (ob_test_verbose) fprintf(stderr, "  refused: %s\n", err);
        ob_model_free(m);
        buf[cases[k].off] = save;
        remove(bad);
    }
    /* Truncated inside the tail: the reader refuses it (the tail counts in the tensor's size). */
    char bad[256];
    snprintf(bad, sizeof bad, "%s/i2s-trunc.gguf", ob_test_tmpdir());
    f = fopen(bad, "wb");
    fwrite(buf, 1, (size_t)len - 20, f);
    fclose(f);
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(bad, NULL, &m, err, sizeof err), -1);
    CHECK(strstr(err, "past end of file") != NULL);
    remove(bad);
    free(buf);
    remove(out);
    remove(f32);
}

/* ---- packed checkpoints -------------------------------------------------------------------- */

typedef struct { char name[128]; const char *dtype; int n_dims; int64_t shape[2]; void *data; size_t size; } st_out;

/* A minimal safetensors writer: JSON header (8-byte length first), then the data. */
static int write_safetensors(const char *path, st_out *t, int n) {
    json_t *h = json_object();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].n_dims; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(h, t[i].name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", t[i].dtype, "shape", shape,
                                                    "data_offsets", (json_int_t)off, (json_int_t)(off + t[i].size)));
        off += t[i].size;
    }
    char *hs = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    FILE *f = fopen(path, "wb");
    if (!f) { free(hs); return -1; }
    uint64_t hl = strlen(hs);
    fwrite(&hl, 8, 1, f);
    fwrite(hs, 1, hl, f);
    for (int i = 0; i < n; i++) fwrite(t[i].data, 1, t[i].size, f);
    fclose(f);
    free(hs);
    return 0;
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

/* transformers' pack_weights: trit t of output row i*R + r goes to bits 2i..2i+1 of packed
 * row r as t + 1. Also the ternarization convert applies to masters (absmean, float32). */
static int is_linear(const char *name) {
    static const char *k[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                              "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strstr(name, k[i])) return 1;
    return 0;
}

enum { PK_F32, PK_BF16, PK_CODE3, PK_NO_SCALE, PK_ZERO_SCALE };

/* Builds dir/ as a packed copy of tests/golden/bitnet. mode: PK_F32 stores weight_scale as
 * f32, PK_BF16 as bf16 (as Microsoft's checkpoint does); the others break it. 0 or -1. */
static int make_packed(const char *dir, int mode) {
    int scale_bf16 = mode == PK_BF16;
    char path[512], err[256];
    ob_st_t *src = NULL;
    if (ob_st_open("tests/golden/bitnet/model.safetensors", &src, err, sizeof err)) return -1;
    int n = (int)ob_st_n_tensors(src), no = 0;
    st_out *o = calloc((size_t)n * 2, sizeof *o);
    for (int i = 0; i < n; i++) {
        const ob_st_tensor *t = ob_st_tensor_at(src, i);
        st_out *d = &o[no++];
        snprintf(d->name, sizeof d->name, "%s", t->name);
        if (!is_linear(t->name)) {
            d->dtype = ob_st_dtype_name(t->dtype);
            d->n_dims = t->n_dims;
            d->shape[0] = t->shape[0];
            d->shape[1] = t->n_dims > 1 ? t->shape[1] : 0;
            d->size = t->size;
            d->data = malloc(t->size);
            memcpy(d->data, t->data, t->size);
            continue;
        }
        int64_t rows = t->shape[0], cols = t->shape[1], R = (rows + 3) / 4;
        float *w = malloc((size_t)(rows * cols) * sizeof *w);
        ob_st_to_f32(t, w, err, sizeof err);
        double sum = 0;
        for (int64_t k = 0; k < rows * cols; k++) sum += fabsf(w[k]);
        float mean = (float)(sum / (double)(rows * cols));
        float s = 1.0f / (mean > 1e-5f ? mean : 1e-5f);
        uint8_t *p = calloc((size_t)(R * cols), 1);
        for (int64_t r = 0; r < R * 4; r++)
            for (int64_t c = 0; c < cols; c++) {
                int tr = 0;
                if (r < rows) {
                    float qv = nearbyintf(w[r * cols + c] * s);
                    tr = qv > 1 ? 1 : qv < -1 ? -1 : (int)qv;
                }
                p[(r % R) * cols + c] |= (uint8_t)((tr + 1) << (2 * (r / R)));
            }
        free(w);
        if (mode == PK_CODE3 && strstr(t->name, "layers.1.mlp.up_proj")) p[7] |= 0x30;
        d->dtype = "U8";
        d->n_dims = 2;
        d->shape[0] = R;
        d->shape[1] = cols;
        d->data = p;
        d->size = (size_t)(R * cols);
        if (mode == PK_NO_SCALE && strstr(t->name, "layers.0.self_attn.o_proj")) continue;
        if (mode == PK_ZERO_SCALE) s = 0;
        st_out *e = &o[no++];
        snprintf(e->name, sizeof e->name, "%.*s_scale", (int)strlen(t->name), t->name);
        e->n_dims = 1;
        e->shape[0] = 1;
        if (scale_bf16) {
            uint16_t h = ob_fp32_to_bf16(s);
            e->dtype = "BF16";
            e->size = 2;
            e->data = malloc(2);
            memcpy(e->data, &h, 2);
        } else {
            e->dtype = "F32";
            e->size = 4;
            e->data = malloc(4);
            memcpy(e->data, &s, 4);
        }
    }
    ob_st_close(src);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = write_safetensors(path, o, no);
    for (int i = 0; i < no; i++) free(o[i].data);
    free(o);
    const char *files[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < 3; i++) {
        char a[512];
        snprintf(a, sizeof a, "tests/golden/bitnet/%s", files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        copy_file(a, path);
    }
    /* config.json as a packed checkpoint says it: BitLinear, offline */
    json_error_t je;
    json_t *cfg = json_load_file("tests/golden/bitnet/config.json", 0, &je);
    if (!cfg) return -1;
    json_object_set_new(cfg, "quantization_config",
                        json_pack("{s:s, s:s, s:s}", "quant_method", "bitnet", "linear_class", "bitlinear", "quantization_mode", "offline"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    return rc;
}

/* Every tensor of a and b has the same name, type, shape and bytes. */
static int same_tensors(const char *a, const char *b) {
    char err[256];
    ob_gguf_t *ga = NULL, *gb = NULL;
    int same = !ob_gguf_open(a, &ga, err, sizeof err) && !ob_gguf_open(b, &gb, err, sizeof err) &&
               ob_gguf_n_tensors(ga) == ob_gguf_n_tensors(gb);
    for (int64_t i = 0; same && i < ob_gguf_n_tensors(ga); i++) {
        const ob_gguf_tensor *x = ob_gguf_tensor_at(ga, i), *y = ob_gguf_find_tensor(gb, x->name);
        same = y && x->type == y->type && x->size == y->size && memcmp(x->data, y->data, x->size) == 0;
        if (!same) fprintf(stderr, "  packed: tensor '%s' differs from the master conversion\n", x->name);
    }
    ob_gguf_close(ga);
    ob_gguf_close(gb);
    return same;
}

OB_SUITE(bitnet_packed) {
    char dir[256], a[512], b[512], err[512];
    snprintf(dir, sizeof dir, "%s/bitnet-packed", ob_test_tmpdir());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(make_packed(dir, 0), 0);
    /* The checkpoint really is packed: U8 weights and weight_scale tensors. */
    ob_st_t *st = NULL;
    CHECK_EQ_INT(ob_st_open(dir, &st, err, sizeof err), 0);
    const ob_st_tensor *pq = st ? ob_st_find(st, "model.layers.0.self_attn.q_proj.weight") : NULL;
    CHECK(pq && pq->dtype == OB_ST_U8 && pq->shape[0] == 64 && pq->shape[1] == 256);
    CHECK(st && ob_st_find(st, "model.layers.0.self_attn.q_proj.weight_scale") != NULL);
    ob_st_close(st);
    const char *types[] = {"f32", "tq2_0", "i2_s"};
    for (int k = 0; k < 3; k++) {
        snprintf(a, sizeof a, "%s/packed-%s.gguf", ob_test_tmpdir(), types[k]);
        snprintf(b, sizeof b, "%s/master-%s.gguf", ob_test_tmpdir(), types[k]);
        CHECK_EQ_INT(convert(dir, a, types[k]), 0);
        CHECK_EQ_INT(convert("tests/golden/bitnet", b, types[k]), 0);
        CHECK(same_tensors(a, b));
        if (k == 2) { /* and so the same logits */
            int V1 = 0, V2 = 0;
            float *la = golden_logits(a, golden_tok, 24, &V1, err, sizeof err), *lb = golden_logits(b, golden_tok, 24, &V2, err, sizeof err);
            CHECK(la && lb && V1 == V2 && memcmp(la, lb, (size_t)24 * V1 * sizeof *la) == 0);
            free(la);
            free(lb);
        }
        remove(a);
        remove(b);
    }
    /* bf16 weight_scale (Microsoft's checkpoint): the scale rounds, the logits stay close to
     * transformers' (the golden test's BitNet tolerance). */
    CHECK_EQ_INT(make_packed(dir, 1), 0);
    snprintf(a, sizeof a, "%s/packed-bf16.gguf", ob_test_tmpdir());
    CHECK_EQ_INT(convert(dir, a, "i2_s"), 0);
    int V = 0;
    float *la = golden_logits(a, golden_tok, 24, &V, err, sizeof err);
    FILE *f = fopen("tests/golden/bitnet/logits.f32", "rb");
    float *ref = malloc((size_t)24 * 320 * sizeof *ref);
    size_t got = f ? fread(ref, sizeof *ref, (size_t)24 * 320, f) : 0;
    if (f) fclose(f);
    CHECK(la && V == 320 && got == (size_t)24 * 320);
    if (la && V == 320) {
        double md = 0, mr = 0;
        for (size_t i = 0; i < got; i++) md = fmax(md, fabs((double)la[i] - ref[i])), mr = fmax(mr, fabs(ref[i]));
        if (ob_test_verbose) fprintf(stderr, "  packed bf16 scale vs transformers: max|diff| %.3g (max|ref| %.3g)\n", md, mr);
        CHECK(md <= 0.08 * mr);
    }
    free(la);
    free(ref);
    remove(a);
    /* Broken checkpoints are refused with a reason. */
    struct { int mode; const char *want; } bad[] = {
        {PK_CODE3, "code 3"},
        {PK_NO_SCALE, "has no weight_scale"},
        {PK_ZERO_SCALE, "must be finite and > 0"},
    };
    snprintf(b, sizeof b, "%s/bad.gguf", ob_test_tmpdir());
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_EQ_INT(make_packed(dir, bad[k].mode), 0);
        char msg[1024];
        CHECK(convert_msg(dir, b, "i2_s", msg, sizeof msg) != 0);
        if (!strstr(msg, bad[k].want)) fprintf(stderr, "  packed refusal: got '%s', want '%s'\n", msg, bad[k].want);
        CHECK(strstr(msg, bad[k].want) != NULL);
    }
    remove(b);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

/* `1bit quantize` to and from the whole-tensor types: f32 -> I2_S gives the tensors `convert
 * --type i2_s` writes; I2_S -> TQ2_0 those of a direct TQ2_0; f32 -> LEAN4 marks the file. */
static int quantize(const char *in, const char *out, const char *type) {
    char *argv[] = {"quantize", "--allow-requantize", (char *)in, (char *)out, (char *)type, "2", NULL};
    return ob_cmd_quantize(6, argv);
}

OB_SUITE(quantize_whole_tensor_types) {
    char f32[256], a[256], b[256], c[256], err[256];
    snprintf(f32, sizeof f32, "%s/wq-f32.gguf", ob_test_tmpdir());
    snprintf(a, sizeof a, "%s/wq-a.gguf", ob_test_tmpdir());
    snprintf(b, sizeof b, "%s/wq-b.gguf", ob_test_tmpdir());
    snprintf(c, sizeof c, "%s/wq-c.gguf", ob_test_tmpdir());
    CHECK_EQ_INT(convert("tests/golden/bitnet", f32, "f32"), 0);
    CHECK_EQ_INT(quantize(f32, a, "I2_S"), 0);
    CHECK_EQ_INT(convert("tests/golden/bitnet", b, "i2_s"), 0);
    CHECK(same_tensors(a, b));
    CHECK_EQ_INT(quantize(a, c, "TQ2_0"), 0);
    CHECK_EQ_INT(quantize(f32, b, "TQ2_0"), 0);
    CHECK(same_tensors(b, c));
    CHECK_EQ_INT(quantize(f32, a, "LEAN4"), 0);
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(a, &g, err, sizeof err), 0);
    if (g) {
        CHECK(ob_gguf_get(g, "1bit.requires") != NULL);
        const ob_gguf_tensor *t = ob_gguf_find_tensor(g, "blk.0.ffn_up.weight");
        CHECK(t && t->type == OB_TYPE_LEAN4);
        ob_gguf_close(g);
    }
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(a, NULL, &m, err, sizeof err), 0);
    ob_model_free(m);
    remove(f32);
    remove(a);
    remove(b);
    remove(c);
}
