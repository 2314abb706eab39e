/* make_imatrix.c — an importance matrix in llama.cpp's format, computed by 1bit (docs/formats.md).
 *
 * Owns: running a model over a text in chunks of -c tokens (BOS first, as llama-imatrix) and
 * summing, for every column of every projection weight, the squares of the activations that
 * column multiplies (through ob_ctx_set_observer: "qkv_in" feeds attn_q/k/v, "o_in"
 * attn_output, "ffn_in" ffn_gate/up, "down_in" ffn_down), then writing them as llama-imatrix
 * does: tensors "<weight>.in_sum2" (the sums) and "<weight>.counts" (tokens seen), keys
 * imatrix.datasets / chunk_count / chunk_size. Both `1bit quantize --imatrix` and
 * llama-quantize --imatrix read the file, so the two quantizers can be compared with one
 * importance matrix (this llama.cpp build has no llama-imatrix). output.weight is not
 * covered (the observer does not see its input), so llama-quantize and 1bit both quantize it
 * without importance. Does not own: reading the format (src/format/imatrix.c).
 *
 * Build (formats.sh does this):
 *   cc -O2 -Iinclude -Isrc tools/compat/make_imatrix.c build/lib1bit.a $(LDLIBS)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "onebit.h"

#define MAX_LAYERS 256

typedef struct {
    int n_layer, dim[4];       /* [qkv_in, o_in, ffn_in, down_in] widths, 0 until seen */
    double *sum[4][MAX_LAYERS]; /* [kind][layer][dim] */
    long count[4][MAX_LAYERS];
} acc_t;

static const char *kinds[4] = {"qkv_in", "o_in", "ffn_in", "down_in"};

static void observe(void *user, const char *name, int layer, const float *data, int n_rows, int dim) {
    acc_t *a = user;
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, kinds[i])) k = i;
    if (k < 0 || layer < 0 || layer >= MAX_LAYERS) return;
    if (!a->sum[k][layer]) {
        a->sum[k][layer] = calloc((size_t)dim, sizeof(double));
        a->dim[k] = dim;
        if (layer + 1 > a->n_layer) a->n_layer = layer + 1;
    }
    if (!a->sum[k][layer] || a->dim[k] != dim) return;
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < dim; c++) a->sum[k][layer][c] += (double)data[(size_t)r * dim + c] * data[(size_t)r * dim + c];
    a->count[k][layer] += n_rows;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) b[n] = 0, *len = (size_t)n;
    return b;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *out_path = NULL;
    int n_ctx = 512, chunks = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) text_path = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) n_ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunks") && i + 1 < argc) chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else { fprintf(stderr, "make_imatrix: unknown argument '%s'\n", argv[i]); return 2; }
    }
    if (!model_path || !text_path || !out_path || n_ctx < 8) {
        fprintf(stderr, "usage: make_imatrix -m MODEL.gguf -f TEXT -o OUT.imatrix [-c 512] [--chunks N] [--threads N]\n");
        return 2;
    }
    char err[1024];
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = threads;
    ob_model_t *m = NULL;
    if (ob_model_load(model_path, &mp, &m, err, sizeof err)) { fprintf(stderr, "make_imatrix: %s\n", err); return 1; }
    size_t len = 0;
    char *text = read_text(text_path, &len);
    if (!text) { fprintf(stderr, "make_imatrix: cannot read %s\n", text_path); return 1; }
    const ob_tokenizer_t *tk = ob_model_tokenizer(m);
    int need = ob_tokenizer_encode(tk, text, len, 0, 0, NULL, 0);
    int32_t *ids = need > 0 ? malloc((size_t)need * sizeof *ids) : NULL;
    if (!ids || ob_tokenizer_encode(tk, text, len, 0, 0, ids, need) != need) { fprintf(stderr, "make_imatrix: tokenizing failed\n"); return 1; }
    ob_ctx_params cp = ob_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    ob_ctx_t *c = NULL;
    if (ob_ctx_new(m, &cp, &c, err, sizeof err)) { fprintf(stderr, "make_imatrix: %s\n", err); return 1; }
    static acc_t acc;
    ob_ctx_set_observer(c, observe, &acc);
    int32_t bos = ob_tokenizer_bos(tk), *tok = malloc((size_t)n_ctx * sizeof *tok), *pos = malloc((size_t)n_ctx * sizeof *pos);
    int n_chunks = need / n_ctx;
    if (chunks > 0 && chunks < n_chunks) n_chunks = chunks;
    for (int ch = 0; ch < n_chunks; ch++) {
        memcpy(tok, ids + (size_t)ch * n_ctx, (size_t)n_ctx * sizeof *tok);
        if (bos >= 0) tok[0] = bos;
        for (int i = 0; i < n_ctx; i++) pos[i] = i;
        ob_kv_seq_truncate(c, 0, 0);
        ob_batch b = {n_ctx, tok, pos, NULL, NULL};
        if (ob_decode(c, &b, err, sizeof err)) { fprintf(stderr, "make_imatrix: %s\n", err); return 1; }
        fprintf(stderr, "\rmake_imatrix: chunk %d/%d", ch + 1, n_chunks);
    }
    fprintf(stderr, "\n");
    /* which weights read each observed input */
    static const struct { int kind; const char *w; } uses[] = {
        {0, "attn_q"}, {0, "attn_k"}, {0, "attn_v"}, {1, "attn_output"}, {2, "ffn_gate"}, {2, "ffn_up"}, {3, "ffn_down"},
    };
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    const char *ds[] = {text_path};
    ob_gguf_writer_set_arr_str(w, "imatrix.datasets", ds, NULL, 1);
    ob_gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)n_chunks);
    ob_gguf_writer_set_u32(w, "imatrix.chunk_size", (uint32_t)n_ctx);
    int maxd = 1;
    for (int k = 0; k < 4; k++)
        if (acc.dim[k] > maxd) maxd = acc.dim[k];
    float *store = calloc((size_t)acc.n_layer * 7 * (size_t)maxd, sizeof(float)), *counts = calloc((size_t)acc.n_layer * 7, sizeof(float));
    if (!store || !counts) { fprintf(stderr, "make_imatrix: out of memory\n"); return 1; }
    int n_entries = 0;
    for (int l = 0; l < acc.n_layer; l++)
        for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++) {
            int k = uses[u].kind, d = acc.dim[k];
            if (!acc.sum[k][l]) continue;
            float *s = store + (size_t)n_entries * maxd;
            for (int i = 0; i < d; i++) s[i] = (float)acc.sum[k][l][i];
            counts[n_entries] = (float)acc.count[k][l];
            char name[160];
            int64_t ne[2] = {d, 1}, one[2] = {1, 1};
            snprintf(name, sizeof name, "blk.%d.%s.weight.in_sum2", l, uses[u].w);
            if (ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, ne, s, err, sizeof err) < 0) break;
            snprintf(name, sizeof name, "blk.%d.%s.weight.counts", l, uses[u].w);
            if (ob_gguf_writer_add_tensor(w, name, OB_TYPE_F32, 2, one, &counts[n_entries], err, sizeof err) < 0) break;
            n_entries++;
        }
    if (ob_gguf_writer_write(w, out_path, NULL, NULL, err, sizeof err)) { fprintf(stderr, "make_imatrix: %s\n", err); return 1; }
    fprintf(stderr, "make_imatrix: %d entries over %d chunks of %d tokens -> %s\n", n_entries, n_chunks, n_ctx, out_path);
    ob_gguf_writer_free(w);
    ob_ctx_free(c);
    ob_model_free(m);
    return 0;
}
