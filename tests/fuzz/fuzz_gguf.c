/* fuzz_gguf.c — libFuzzer harness for the GGUF reader (src/format/gguf.c) and what is built from
 * a file's metadata alone: the GGUF vocabulary (src/text/tokenizer_gguf.c and the tokenizer).
 *
 * Input: the bytes of a GGUF file, opened in place with ob_gguf_open_buffer (the same parser
 * ob_gguf_open runs over a mapping). When it opens, every key is looked up by name and read
 * through each typed getter, nested arrays are walked, every tensor is found by name and its
 * first and last data byte read (ASan checks they lie inside the input), then the vocabulary is
 * built from tokenizer.ggml.* and, when it builds, a few texts are encoded and decoded. Checked:
 * no crash, hang, leak or sanitizer report; a refused file always comes with a message; the
 * reader's answers agree with each other (index i's key finds index i's value).
 *
 * Seeds: tests/fuzz/seeds-gguf/ (written by this harness: OB_FUZZ_SEEDS=DIR writes a small
 * metadata-only file, a file with tensors of several types, and a gpt2 and a llama vocabulary).
 * Build and run (docs/reliability.md has the last result):
 *   make build/fuzz/fuzz_gguf && tests/fuzz/run.sh gguf 600
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "text/tokenizer.h"

static void walk(const ob_gguf_value *v, int depth) {
    if (depth > 64) abort(); /* the reader bounds nesting */
    if (v->type == OB_GGUF_STRING) {
        if (v->v.str.len && v->v.str.ptr[v->v.str.len] != 0) abort(); /* NUL-terminated copy */
        return;
    }
    if (v->type != OB_GGUF_ARRAY) return;
    if (v->v.arr.elem_type == OB_GGUF_STRING || v->v.arr.elem_type == OB_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->v.arr.n; i++) walk(&v->v.arr.items[i], depth + 1);
    } else {
        volatile double s = 0;
        for (uint64_t i = 0; i < v->v.arr.n; i++) s += ob_gguf_arr_f64(v, i) + (double)ob_gguf_arr_i64(v, i);
        (void)s;
    }
}

static void vocab(const ob_gguf_t *g) {
    char err[512] = "";
    ob_tokenizer_t *t = NULL;
    if (ob_tokenizer_load_gguf(g, &t, err, sizeof err)) {
        if (!err[0]) abort();
        return;
    }
    static const char *texts[] = {"Hello world!", " \xc3\xa9t\xc3\xa9  12345\n\tx", "\xf0\x9f\x98\x80\xff<s></s>"};
    int32_t ids[256];
    char out[2048];
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int n = ob_tokenizer_encode(t, texts[k], strlen(texts[k]), 1, 1, ids, 256);
        if (n < 0 || n > 256) continue;
        for (int i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= ob_tokenizer_n_vocab(t)) abort();
        ob_tokenizer_decode(t, ids, n, 0, out, sizeof out);
        ob_tokenizer_decode(t, ids, n, 1, out, sizeof out);
    }
    int32_t nv = ob_tokenizer_n_vocab(t);
    for (int32_t id = 0; id < nv && id < 64; id++) ob_tokenizer_token_bytes(t, id, out, sizeof out);
    ob_tokenizer_token_bytes(t, nv, out, sizeof out);
    ob_tokenizer_free(t);
}

static void write_seeds(const char *dir);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *d = getenv("OB_FUZZ_SEEDS");
    if (d) write_seeds(d);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    ob_gguf_t *g = NULL;
    if (ob_gguf_open_buffer(data, size, &g, err, sizeof err)) {
        if (!err[0] || g) abort();
        return 0;
    }
    int64_t n_kv = ob_gguf_n_kv(g);
    for (int64_t i = 0; i < n_kv; i++) {
        const char *key = ob_gguf_kv_key(g, i);
        const ob_gguf_value *v = ob_gguf_kv_value(g, i);
        if (!key || !v) abort();
        if (ob_gguf_get(g, key) != v) abort(); /* duplicate keys are refused */
        int64_t i64; double f64; int b; const char *s;
        ob_gguf_get_i64(g, key, &i64, err, sizeof err);
        ob_gguf_get_f64(g, key, &f64, err, sizeof err);
        ob_gguf_get_bool(g, key, &b, err, sizeof err);
        ob_gguf_get_str(g, key, &s, err, sizeof err);
        walk(v, 0);
    }
    int64_t n_t = ob_gguf_n_tensors(g);
    for (int64_t i = 0; i < n_t; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        if (!t || ob_gguf_find_tensor(g, t->name) != t) abort();
        if (t->size) {
            volatile uint8_t x = ((const uint8_t *)t->data)[0];
            x ^= ((const uint8_t *)t->data)[t->size - 1];
            (void)x;
        }
    }
    vocab(g);
    ob_gguf_close(g);
    return 0;
}

/* ---- seeds ------------------------------------------------------------------------------ */
static void seed(const char *dir, const char *name, ob_gguf_writer_t *w) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err)) fprintf(stderr, "seed %s: %s\n", name, err);
    ob_gguf_writer_free(w);
}

/* The keys every vocabulary has. */
static ob_gguf_writer_t *vocab_writer(const char *model, const char **toks, const int32_t *types, int n, uint32_t bos, uint32_t eos) {
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)n);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types, (uint64_t)n);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", bos);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", eos);
    return w;
}

static void write_seeds(const char *dir) {
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "general.architecture", "llama");
    ob_gguf_writer_set_u32(w, "llama.context_length", 128);
    ob_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    ob_gguf_writer_set_bool(w, "b", 1);
    int32_t ia[3] = {1, -2, 3};
    ob_gguf_writer_set_arr(w, "arr.i32", OB_GGUF_INT32, ia, 3);
    const char *ss[2] = {"x", "yz"};
    ob_gguf_writer_set_arr_str(w, "arr.str", ss, NULL, 2);
    seed(dir, "meta.gguf", w);

    static float f32[64];
    static uint8_t blk[256];
    for (int i = 0; i < 64; i++) f32[i] = (float)i / 7.0f;
    char err[256];
    w = ob_gguf_writer_new();
    ob_gguf_writer_set_u32(w, "general.alignment", 64);
    int64_t ne[2] = {32, 2}, ne1[1] = {32}, neq[2] = {32, 4};
    ob_gguf_writer_add_tensor(w, "a.weight", OB_TYPE_F32, 2, ne, f32, err, sizeof err);
    ob_gguf_writer_add_tensor(w, "b.bias", OB_TYPE_F16, 1, ne1, f32, err, sizeof err);
    ob_gguf_writer_add_tensor(w, "c.weight", OB_TYPE_Q8_0, 2, neq, blk, err, sizeof err);
    seed(dir, "tensors.gguf", w);

    /* vocabularies: byte-level BPE (gpt2) and SentencePiece (llama) */
    const char *btok[] = {"H", "e", "l", "o", "\xc4\xa0", "w", "r", "d", "!", "He", "ll", "llo", "Hello", "<|endoftext|>", "<|im_start|>"};
    int32_t btype[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3};
    w = vocab_writer("gpt2", btok, btype, 15, 14, 13);
    const char *merges[] = {"H e", "l l", "ll o", "He llo"};
    ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 4);
    seed(dir, "vocab-gpt2.gguf", w);

    const char *stok[] = {"<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "<0xA9>", "\xe2\x96\x81", "\xe2\x96\x81H", "ello", "\xe2\x96\x81w", "orld", "!"};
    float sc[] = {0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -6};
    int32_t stype[] = {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1};
    w = vocab_writer("llama", stok, stype, 12, 1, 2);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, sc, 12);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    seed(dir, "vocab-llama.gguf", w);
}
