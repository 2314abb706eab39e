/* onebit.h — the public engine API: the only header the front ends (serve, run, bench,
 * router) include.
 *
 * Owns: model lifecycle, inference contexts (KV cache + scratch), batched decoding,
 * tokenization, sampling. Every function that can fail returns 0 / -1 (or NULL) and writes a
 * message naming the file, tensor or field at fault into err.
 * Does not own: HTTP, JSON, chat templates (front ends and text/).
 */
#ifndef ONEBIT_H
#define ONEBIT_H

#include <stddef.h>
#include <stdint.h>

#define OB_VERSION_MAJOR 0
#define OB_VERSION_MINOR 1
#define OB_VERSION_STRING "0.1.0"

typedef struct ob_model ob_model_t;
typedef struct ob_ctx ob_ctx_t;
typedef struct ob_tokenizer ob_tokenizer_t;
typedef struct ob_sampler ob_sampler_t;

/* ---- model ------------------------------------------------------------------------------ */
typedef struct {
    const char *device;   /* "cpu" (default), "cuda", "auto" */
    int n_threads;        /* <= 0: all cores */
} ob_model_params;

typedef struct {
    const char *arch;        /* GGUF architecture name, e.g. "llama" */
    const char *name;        /* general.name or the file's base name */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train;
    int file_type;           /* dominant weight type id of the 2-D weights (ob_type) */
    const char *type_name;   /* its name, e.g. "q4_0" */
    uint64_t n_params;       /* elements of all tensors */
    uint64_t size_bytes;     /* bytes of all tensor data */
} ob_model_info;

ob_model_params ob_model_default_params(void);
int ob_model_load(const char *path, const ob_model_params *p, ob_model_t **out, char *err, size_t errlen);
void ob_model_free(ob_model_t *m);
const ob_model_info *ob_model_get_info(const ob_model_t *m);
const ob_tokenizer_t *ob_model_tokenizer(const ob_model_t *m);
/* A metadata string of the model file (e.g. "tokenizer.chat_template"), or NULL. */
const char *ob_model_meta_str(const ob_model_t *m, const char *key);

/* ---- context: KV cache for n_seq sequences of up to n_ctx positions -------------------- */
typedef struct {
    int32_t n_ctx;     /* positions per sequence; <= 0: the model's training context, at most 4096 */
    int32_t n_seq;     /* independent sequences (server slots); <= 0: 1 */
    int32_t n_batch;   /* most tokens one ob_decode call may carry; <= 0: 512 */
} ob_ctx_params;

/* One forward pass over n_tokens tokens of any sequences. Token i is at position pos[i] of
 * sequence seq[i]; a sequence's tokens must be at the positions right after those already in
 * its cache, in order. Logits are computed for tokens with want_logits[i] != 0 (NULL: last
 * token only). */
typedef struct {
    int32_t n_tokens;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;          /* NULL: all sequence 0 */
    const int8_t *want_logits;
} ob_batch;

ob_ctx_params ob_ctx_default_params(void);
int ob_ctx_new(ob_model_t *m, const ob_ctx_params *p, ob_ctx_t **out, char *err, size_t errlen);
void ob_ctx_free(ob_ctx_t *c);
int32_t ob_ctx_n_ctx(const ob_ctx_t *c);
/* Runs the batch. Returns 0, or -1 (bad token id, position, sequence; err says which). */
int ob_decode(ob_ctx_t *c, const ob_batch *b, char *err, size_t errlen);
/* Logits [n_vocab] of the j-th token that asked for logits in the last ob_decode. */
const float *ob_get_logits(const ob_ctx_t *c, int32_t j);
/* Forget positions >= p0 of sequence seq (p0 = 0 clears it). */
void ob_kv_seq_truncate(ob_ctx_t *c, int32_t seq, int32_t p0);
int32_t ob_kv_seq_len(const ob_ctx_t *c, int32_t seq);

/* Debug observer: called during ob_decode with intermediate activations (host memory, valid
 * only during the call), as n_rows rows of dim floats. Names: "qkv_in", "o_in", "ffn_in",
 * "down_in" (the inputs of the attention and FFN projections, after BitNet's activation
 * quantization where the architecture has it) and "l_out" (the residual stream after the
 * layer). For tests and debugging; costs a copy per call. fn NULL turns it off. */
typedef void (*ob_observer_fn)(void *user, const char *name, int layer, const float *data, int n_rows, int dim);
int ob_ctx_set_observer(ob_ctx_t *c, ob_observer_fn fn, void *user);

/* ---- tokenizer ---------------------------------------------------------------------- */
int32_t ob_tokenizer_n_vocab(const ob_tokenizer_t *t);
int32_t ob_tokenizer_bos(const ob_tokenizer_t *t);     /* -1 if none */
int32_t ob_tokenizer_eos(const ob_tokenizer_t *t);     /* -1 if none */
/* Nonzero if generation should stop at this token (eos, eot, eom and similar). */
int ob_tokenizer_is_eog(const ob_tokenizer_t *t, int32_t id);
/* Encodes len bytes of text. add_bos: add the special tokens the vocabulary asks for
 * (BOS if tokenizer.ggml.add_bos_token, EOS if add_eos_token), as llama.cpp's add_special.
 * parse_special: recognise special tokens' text.
 * Writes at most max_out ids; returns how many the text needs (may exceed max_out: call
 * again with a larger buffer), or -1 on error. */
int ob_tokenizer_encode(const ob_tokenizer_t *t, const char *text, size_t len, int add_bos,
                        int parse_special, int32_t *out, int max_out);
/* The bytes of one token (special tokens as their text). Returns the byte count (may exceed
 * buflen; nothing beyond buflen is written), or -1 for an id out of range. */
int ob_tokenizer_token_bytes(const ob_tokenizer_t *t, int32_t id, char *buf, int buflen);

/* ---- sampler ------------------------------------------------------------------------ */
typedef struct {
    float temp;              /* <= 0: greedy (argmax; ties -> lowest id) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off (llama.cpp: positive logits divided, negative multiplied) */
    int32_t penalty_last_n;  /* recent tokens the penalties look at; 0: off, -1: all accepted */
    float presence_penalty;  /* 0: off (OpenAI semantics) */
    float frequency_penalty; /* 0: off */
    uint64_t seed;
} ob_sampler_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off, last_n 64. */
ob_sampler_params ob_sampler_default_params(void);
ob_sampler_t *ob_sampler_new(const ob_sampler_params *p, int32_t n_vocab);
void ob_sampler_free(ob_sampler_t *s);
/* Samples from logits[n_vocab] (not modified). Does not allocate. */
int32_t ob_sampler_sample(ob_sampler_t *s, const float *logits);
/* Records a token (prompt or generated) for the penalties. */
void ob_sampler_accept(ob_sampler_t *s, int32_t token);
void ob_sampler_reset(ob_sampler_t *s);

/* ---- misc ----------------------------------------------------------------------------- */
/* Monotonic clock in microseconds. */
int64_t ob_time_us(void);

#endif
