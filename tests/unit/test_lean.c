/* test_lean.c — lean4 (docs/lean.md): the rotation, the block layout, the matmul path that
 * rotates activations, the file marker "1bit.requires" and the refusal of a build without
 * lean support.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "backend/backend.h"
#include "engine/model.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "test.h"
#include "tools/tools.h"

#ifndef OB_NO_LEAN

static uint32_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static float gauss(uint64_t *s) { /* sum of 4 uniforms, about N(0, 1) */
    float a = 0;
    for (int i = 0; i < 4; i++) a += (float)(lcg(s) % 65536) / 65536.0f - 0.5f;
    return a * 1.7320508f;
}

OB_SUITE(lean4) {
    const ob_type_traits *t = ob_type_get(OB_TYPE_LEAN4);
    CHECK(t && t->block_size == 128 && t->type_size == 68 && t->tensor_tail == 0);
    CHECK_EQ_INT(OB_TYPE_LEAN4, 4096);
    CHECK_EQ_INT(ob_type_from_name("lean4"), OB_TYPE_LEAN4);
    CHECK_STR(ob_type_name(OB_TYPE_LEAN4), "lean4");
    CHECK(t->from_float == NULL); /* rows must be rotated first: only ob_tensor_quantize writes it */

    /* The rotation: orthogonal (keeps the norm), its own inverse, and a one-hot block becomes
     * a flat +-1/sqrt(128) block (how it spreads an outlier). */
    float x[256], y[256];
    uint64_t s = 7;
    for (int i = 0; i < 256; i++) x[i] = gauss(&s);
    memcpy(y, x, sizeof x);
    ob_lean_rotate(y, 256);
    double n0 = 0, n1 = 0, back = 0;
    for (int i = 0; i < 256; i++) n0 += (double)x[i] * x[i], n1 += (double)y[i] * y[i];
    CHECK_NEAR(n1 / n0, 1.0, 1e-5);
    ob_lean_rotate(y, 256);
    for (int i = 0; i < 256; i++) back = fmax(back, fabs((double)y[i] - x[i]));
    CHECK(back < 1e-5);
    float one[128] = {0};
    one[5] = 1.0f;
    ob_lean_rotate(one, 128);
    int flat = 1;
    for (int i = 0; i < 128; i++) flat &= fabsf(fabsf(one[i]) - 0.0883883476f) < 1e-6f;
    CHECK(flat);

    /* Layout by hand: w = 2 e_0 rotates to a flat block of 2/sqrt(128), which lands on the top
     * grid level in both halves; the row routine gives the rotated values, and
     * ob_tensor_dequantize rotates them back to the original row. */
    float w[128], rot[128];
    for (int i = 0; i < 128; i++) w[i] = 0;
    w[0] = 2.0f; /* rotates to a flat block: every element +-2/sqrt(128) */
    uint8_t q[68];
    CHECK_EQ_INT(ob_type_tensor_size(OB_TYPE_LEAN4, 128, 1), 68);
    CHECK_EQ_INT(ob_tensor_quantize(OB_TYPE_LEAN4, w, q, 128, 1), 0);
    t->to_float(q, rot, 128);
    /* +-0.1767767 exactly on the grid ends (127 * d), both halves */
    float d0 = ob_fp16_to_fp32((uint16_t)(q[0] | q[1] << 8)), d1 = ob_fp16_to_fp32((uint16_t)(q[2] | q[3] << 8));
    CHECK_NEAR(d0 * 127, 0.1767767, 2e-4);
    CHECK_NEAR(d1 * 127, 0.1767767, 2e-4);
    CHECK_EQ_INT(q[4] & 0x0f, 15);  /* element 0: +, the top level (15) */
    CHECK_EQ_INT(q[4] >> 4, 15);    /* element 64: likewise */
    int same = 1; /* column 0 of H is all ones: a flat positive block */
    for (int i = 1; i < 128; i++) same &= rot[i] == rot[0];
    CHECK(same && rot[0] > 0);
    float back_w[128];
    CHECK_EQ_INT(ob_tensor_dequantize(OB_TYPE_LEAN4, q, back_w, 128, 1), 0);
    CHECK_NEAR(back_w[0], 2.0, 2e-3);
    double off = 0;
    for (int i = 1; i < 128; i++) off = fmax(off, fabs(back_w[i]));
    CHECK(off < 2e-3);

    /* Error bound on Gaussian rows with outliers: relative squared error well under q4_0's
     * worst case, and the outlier does not blow up its block. */
    enum { R = 4, K = 512 };
    float *g = malloc(R * K * sizeof *g), *gb = malloc(R * K * sizeof *gb);
    uint8_t *gq = malloc(ob_type_tensor_size(OB_TYPE_LEAN4, K, R));
    for (int i = 0; i < R * K; i++) g[i] = gauss(&s) * 0.02f;
    g[17] = 0.5f; /* a 25-sigma outlier */
    CHECK_EQ_INT(ob_tensor_quantize(OB_TYPE_LEAN4, g, gq, K, R), 0);
    CHECK_EQ_INT(ob_tensor_dequantize(OB_TYPE_LEAN4, gq, gb, K, R), 0);
    double e = 0, nn = 0;
    for (int i = 0; i < R * K; i++) e += (double)(g[i] - gb[i]) * (g[i] - gb[i]), nn += (double)g[i] * g[i];
    if (ob_test_verbose) fprintf(stderr, "  lean4 relative squared error %.5f\n", e / nn);
    CHECK(e / nn < 0.012);
    CHECK_NEAR(gb[17], 0.5, 0.05);

    /* The CPU matmul rotates activations: its result equals the dequantized (original-domain)
     * weights times x, to float rounding; get_rows gives the original rows back. */
    char err[256];
    ob_backend *be = ob_backend_cpu_new();
    ob_backend_opts bo = {2, 0};
    CHECK_EQ_INT(be->init(be, &bo, err, sizeof err), 0);
    ob_weight wt = {gq, OB_TYPE_LEAN4, K, R, ob_type_row_size(OB_TYPE_LEAN4, K), 1.0f};
    float xa[3 * K], ya[3 * R];
    for (int i = 0; i < 3 * K; i++) xa[i] = gauss(&s);
    be->matmul(be, &wt, xa, ya, 3);
    double md = 0, my = 0;
    for (int tk = 0; tk < 3; tk++)
        for (int r = 0; r < R; r++) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += (double)gb[r * K + k] * xa[tk * K + k];
            md = fmax(md, fabs(ref - ya[tk * R + r]));
            my = fmax(my, fabs(ref));
        }
    CHECK(md <= 1e-4 * (my + 1));
    int32_t ids[2] = {3, 0};
    float rows[2 * K];
    be->get_rows(be, &wt, ids, 2, rows);
    double rd = 0;
    for (int k = 0; k < K; k++) rd = fmax(rd, fabs(rows[k] - gb[3 * K + k])), rd = fmax(rd, fabs(rows[K + k] - gb[k]));
    CHECK(rd < 1e-6);
    be->free(be);
    free(be);
    free(g);
    free(gb);
    free(gq);
}

/* A converted lean4 file carries 1bit.requires = ["lean4"], loads and runs here, and a build
 * without lean support (simulated: an empty feature list) refuses it by name. */
OB_SUITE(lean4_file) {
    char out[256], err[512];
    snprintf(out, sizeof out, "%s/lean4-golden.gguf", ob_test_tmpdir());
    char *argv[] = {"convert", "tests/golden/bitnet", "-o", out, "--type", "lean4", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(out, &g, err, sizeof err), 0);
    if (!g) return;
    const ob_gguf_value *req = ob_gguf_get(g, "1bit.requires");
    CHECK(req && req->type == OB_GGUF_ARRAY && req->v.arr.n == 1);
    if (req && req->v.arr.n == 1) CHECK_STR(req->v.arr.items[0].v.str.ptr, "lean4");
    const ob_gguf_tensor *q = ob_gguf_find_tensor(g, "blk.0.attn_q.weight"), *e = ob_gguf_find_tensor(g, "token_embd.weight");
    CHECK(q && q->type == OB_TYPE_LEAN4 && e && e->type == OB_TYPE_LEAN4);
    const char *none[] = {NULL}, *lean[] = {"lean4", NULL};
    CHECK_EQ_INT(ob_model_check_requires(g, lean, err, sizeof err), 0);
    CHECK_EQ_INT(ob_model_check_requires(g, none, err, sizeof err), -1);
    CHECK(strstr(err, "lean4") && strstr(err, "LEAN=0"));
    ob_gguf_close(g);
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(out, NULL, &m, err, sizeof err), 0);
    if (m) {
        CHECK_STR(ob_model_get_info(m)->type_name, "lean4");
        ob_ctx_t *c = NULL;
        ob_ctx_params cp = ob_ctx_default_params();
        cp.n_ctx = 16;
        CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);
        int32_t tok[3] = {318, 302, 220}, pos[3] = {0, 1, 2};
        ob_batch b = {3, tok, pos, NULL, NULL};
        CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
        const float *l = ob_get_logits(c, 0);
        int finite = l != NULL;
        for (int v = 0; l && v < 320; v++) finite &= isfinite(l[v]);
        CHECK(finite);
        ob_ctx_free(c);
        ob_model_free(m);
    }
    /* An unknown feature is refused as written by a newer 1bit. */
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    const char *feat[] = {"warp9"};
    ob_gguf_writer_set_arr_str(w, "1bit.requires", feat, NULL, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/requires.gguf", ob_test_tmpdir());
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), 0);
    CHECK_EQ_INT(ob_model_check_requires(g, lean, err, sizeof err), -1);
    CHECK(strstr(err, "warp9") && strstr(err, "newer"));
    ob_gguf_close(g);
    remove(path);
    remove(out);
}

#else /* a LEAN=0 build: the type is named, cannot be computed or written, and files needing it are refused */

OB_SUITE(lean4_disabled) {
    CHECK_EQ_INT(ob_type_from_name("lean4"), OB_TYPE_LEAN4);
    CHECK(ob_type_get(OB_TYPE_LEAN4)->to_float == NULL);
    CHECK(!ob_tensor_can_quantize(OB_TYPE_LEAN4));
}

#endif
