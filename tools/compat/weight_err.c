/* weight_err.c — weight error of a quantized GGUF against its source (docs/formats.md).
 *
 * Owns: decoding every tensor of two GGUF files of the same model (the source, f32/f16/bf16,
 * and a quantized one) with 1bit's decoders, which are bit-identical to llama.cpp's
 * dequantize_row_* (tests/unit/test_quant_more.c), and printing, over the tensors whose type
 * differs between the files (the ones the quantizer touched):
 *   rmse      sqrt(sum d^2 / N)            d = quantized - source, N their elements
 *   rel       sqrt(sum d^2 / sum source^2)
 *   n         N
 * as one line "rmse R rel X n N". With --imatrix FILE also "wrmse W": the error weighted by
 * the importance values of each column, sqrt(sum imp*d^2 / sum imp) over the tensors that
 * have an entry. Does not own: quantizing (1bit quantize, llama-quantize), the tables
 * (formats.sh).
 *
 * Build (formats.sh does this):
 *   cc -O2 -Isrc tools/compat/weight_err.c build/lib1bit.a -lm -pthread ...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/imatrix.h"
#include "format/quant.h"
#include "format/quant_tensor.h"

/* Whole-tensor decoding: lean4 rotated back and i2_s times its per-tensor scale, as the
 * engine computes with them (a row decoder alone gives neither). */
static float *decode(const ob_gguf_tensor *t, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    if (!x || ob_type_tensor_size(t->type, t->ne[0], n / t->ne[0]) != t->size ||
        ob_tensor_dequantize(t->type, t->data, x, t->ne[0], n / t->ne[0]) != 0) {
        free(x);
        return NULL;
    }
    return x;
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 5 && !strcmp(argv[3], "--imatrix"))) {
        fprintf(stderr, "usage: weight_err SOURCE.gguf QUANTIZED.gguf [--imatrix FILE]\n");
        return 2;
    }
    char err[1024];
    ob_gguf_t *a = NULL, *b = NULL;
    ob_imatrix_t *im = NULL;
    if (ob_gguf_open(argv[1], &a, err, sizeof err) || ob_gguf_open(argv[2], &b, err, sizeof err) ||
        (argc == 5 && ob_imatrix_load(argv[4], &im, err, sizeof err))) {
        fprintf(stderr, "weight_err: %s\n", err);
        return 1;
    }
    double sd = 0, sx = 0, swd = 0, sw = 0;
    long long n_all = 0;
    for (int64_t i = 0; i < ob_gguf_n_tensors(a); i++) {
        const ob_gguf_tensor *ta = ob_gguf_tensor_at(a, i), *tb = ob_gguf_find_tensor(b, ta->name);
        if (!tb) {
            fprintf(stderr, "weight_err: %s has no tensor '%s'\n", argv[2], ta->name);
            return 1;
        }
        if (tb->type == ta->type) continue;
        int64_t n = ta->ne[0] * ta->ne[1] * ta->ne[2] * ta->ne[3];
        float *x = decode(ta, n), *y = decode(tb, n);
        if (!x || !y) {
            fprintf(stderr, "weight_err: cannot decode '%s' (%s / %s)\n", ta->name, ob_type_name(ta->type), ob_type_name(tb->type));
            return 1;
        }
        int64_t nv = 0;
        const float *imp = im ? ob_imatrix_find(im, ta->name, &nv) : NULL;
        if (imp && nv != ta->ne[0]) imp = NULL; /* experts: not needed for the dense models measured here */
        for (int64_t k = 0; k < n; k++) {
            double d = (double)y[k] - x[k];
            sd += d * d;
            sx += (double)x[k] * x[k];
            if (imp) {
                swd += imp[k % ta->ne[0]] * d * d;
                sw += imp[k % ta->ne[0]];
            }
        }
        n_all += n;
        free(x);
        free(y);
    }
    printf("rmse %.6e rel %.6e n %lld", n_all ? sqrt(sd / (double)n_all) : 0.0, sx > 0 ? sqrt(sd / sx) : 0.0, n_all);
    if (im) printf(" wrmse %.6e", sw > 0 ? sqrt(swd / sw) : 0.0);
    printf("\n");
    ob_imatrix_free(im);
    ob_gguf_close(a);
    ob_gguf_close(b);
    return 0;
}
