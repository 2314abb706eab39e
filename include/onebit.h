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
    const char *device;   /* "cpu" (default), "cuda", "auto" (cuda when built with it and a GPU is present) */
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
    const char *device;      /* the backend that runs it: "cpu" or "cuda" ("auto" resolved) */
} ob_model_info;

/* The model compiled into the binary (the trained demo model): pass it as the path. */
#define OB_DEFAULT_MODEL "builtin:demo"
/* Nonzero if this build has it (`make EMBED_MODEL=` builds without). */
int ob_has_default_model(void);

ob_model_params ob_model_default_params(void);
int ob_model_load(const char *path, const ob_model_params *p, ob_model_t **out, char *err, size_t errlen);
void ob_model_free(ob_model_t *m);
const ob_model_info *ob_model_get_info(const ob_model_t *m);
const ob_tokenizer_t *ob_model_tokenizer(const ob_model_t *m);
/* A metadata string of the model file (e.g. "tokenizer.chat_template"), or NULL. */
const char *ob_model_meta_str(const ob_model_t *m, const char *key);
/* A metadata integer of the model file (e.g. "llama.pooling_type"), or def when absent. */
int64_t ob_model_meta_int(const ob_model_t *m, const char *key, int64_t def);

/* ---- context: KV cache for n_seq sequences of up to n_ctx positions -------------------- */
/* Element type of the K or V cache (llama.cpp's --cache-type-k / --cache-type-v). 0, what a
 * zeroed ob_ctx_params holds, is the default f16. */
typedef enum { OB_KV_F16 = 0, OB_KV_F32 = 1, OB_KV_Q8_0 = 2 } ob_kv_type;
/* "f16", "f32" or "q8_0" (case-insensitive) to its ob_kv_type, or -1. */
int ob_kv_type_from_name(const char *name);
const char *ob_kv_type_name(int kv_type);

typedef struct {
    int32_t n_ctx;     /* positions per sequence; <= 0: the model's training context, at most 4096 */
    int32_t n_seq;     /* independent sequences (server slots); <= 0: 1 */
    int32_t n_batch;   /* most tokens one ob_decode call may carry; <= 0: 512 */
    int32_t type_k;    /* ob_kv_type of the K cache (default f16) */
    int32_t type_v;    /* ob_kv_type of the V cache (default f16) */
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
/* Embedding mode (on != 0): ob_decode gives, for each token that asks for output
 * (want_logits), the final hidden state after the output norm [n_embd] instead of logits.
 * For /v1/embeddings; pooling over the rows is the caller's. */
void ob_ctx_set_embeddings(ob_ctx_t *c, int on);
/* Hidden state [n_embd] of the j-th token that asked for output in the last ob_decode (embedding mode). */
const float *ob_get_embeddings(const ob_ctx_t *c, int32_t j);
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
/* A tokenizer on its own (without the model's weights): from a GGUF file's tokenizer.ggml.*
 * keys, or from a Hugging Face tokenizer.json (chosen by the file's content). */
int ob_tokenizer_load(const char *path, ob_tokenizer_t **out, char *err, size_t errlen);
void ob_tokenizer_free(ob_tokenizer_t *t);
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
/* The text of ids (as Hugging Face's decode for tokenizer.json vocabularies: the decoder chain;
 * for GGUF vocabularies the tokens' bytes joined), always valid UTF-8 (ill-formed bytes become
 * U+FFFD). skip_special: leave special tokens out. Returns the byte count (may exceed buflen;
 * nothing beyond buflen is written), or -1. Allocates scratch per call. */
int ob_tokenizer_decode(const ob_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char *buf, int buflen);
/* Streaming decode: push ids one at a time and get back the text that became final (never part
 * of a UTF-8 character). The chunks of a stream, plus flush, add up to ob_tokenizer_decode of all
 * its ids. The returned text lives in the decoder until its next call. Steady-state pushes do
 * not allocate. NULL on failure. */
typedef struct ob_detok ob_detok_t;
ob_detok_t *ob_detok_new(const ob_tokenizer_t *t, int skip_special);
const char *ob_detok_push(ob_detok_t *d, int32_t id, size_t *len);
const char *ob_detok_flush(ob_detok_t *d, size_t *len);   /* what is left (incomplete -> U+FFFD); restarts */
void ob_detok_free(ob_detok_t *d);

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

/* ---- scheduler: many requests, one forward pass -------------------------------------------
 * The scheduler owns an inference context with one KV-cache sequence per slot and a thread
 * that runs continuous batching: every step decodes one token for each generating slot and
 * fills the rest of the batch with chunks of waiting prompts. A new request takes the free slot
 * whose cache shares the longest prefix with its prompt (cache_n tokens are not recomputed).
 * When every slot is busy, requests queue. Front ends submit token ids and read events. */
typedef struct ob_sched ob_sched_t;
typedef struct ob_req ob_req_t;

typedef struct {
    int32_t n_slots;         /* parallel sequences (llama-server --parallel); <= 0: 1 */
    int32_t n_ctx;           /* positions per slot; <= 0: the model's training context, at most 4096 */
    int32_t n_batch;         /* most tokens per forward pass; <= 0: 512 */
    int32_t max_queue;       /* waiting requests beyond the slots; <= 0: 256 */
} ob_sched_params;

/* Called with the logits of a request's next token (after logit_bias), before sampling: may
 * set entries to -INFINITY (grammar constraints). Runs on the scheduler thread or one of its
 * sampling workers: never two calls for one request at once, but calls for different requests
 * may run at the same time. */
typedef void (*ob_logits_filter_fn)(void *user, float *logits, int32_t n_vocab);
/* Called with each token sampled for the request (the same thread as its filter call, right
 * after it), so a filter can advance its state (a grammar). */
typedef void (*ob_token_accept_fn)(void *user, int32_t token);

typedef struct { int32_t token; float bias; } ob_logit_bias;

typedef struct {
    const int32_t *prompt;   /* token ids, copied at submit */
    int32_t n_prompt;
    int32_t max_tokens;      /* <= 0: until the context is full */
    ob_sampler_params sampling;
    int ignore_eos;          /* keep generating past end-of-generation tokens */
    int32_t min_tokens;      /* end-of-generation tokens are not chosen before this many (vLLM's) */
    int32_t n_probs;         /* top alternatives reported with each token (0..20) */
    int logprobs;            /* nonzero: each token's log-probability too, also with n_probs 0 (with
                              * neither, events carry none: no pass over the vocabulary per token) */
    const ob_logit_bias *logit_bias; /* copied at submit */
    int32_t n_logit_bias;
    ob_logits_filter_fn filter;  /* may be NULL */
    ob_token_accept_fn accept;   /* may be NULL */
    void *filter_user;           /* passed to both */
} ob_req_params;

typedef enum {
    OB_FINISH_NONE = 0,      /* not finished */
    OB_FINISH_STOP,          /* end-of-generation token (or cancelled by the front end after a stop string) */
    OB_FINISH_LENGTH,        /* max_tokens reached */
    OB_FINISH_CONTEXT,       /* the slot's context is full */
    OB_FINISH_CANCELLED,     /* ob_req_cancel */
    OB_FINISH_ERROR          /* decode failed: see ob_req_error */
} ob_finish;

#define OB_MAX_PROBS 20

typedef struct {
    int32_t token;           /* -1 on the final event when no token comes with it */
    float logprob;           /* log-probability of token under the model's distribution (0 unless
                              * the request asked for logprobs or n_probs > 0) */
    int32_t n_probs;
    int32_t top_tokens[OB_MAX_PROBS];
    float top_logprobs[OB_MAX_PROBS];
    ob_finish finish;        /* set on the last event of a request */
} ob_token_event;

typedef struct {
    int32_t n_prompt;        /* prompt tokens */
    int32_t cache_n;         /* of those, reused from the slot's cache */
    int32_t prompt_n;        /* prompt tokens actually computed (n_prompt - cache_n) */
    double prompt_ms;        /* from the first prompt batch to the first token's logits */
    int32_t predicted_n;     /* generated tokens */
    double predicted_ms;     /* from the first to the last generated token */
    double queued_ms;        /* time spent waiting for a slot */
    int32_t slot;            /* slot that served it, -1 before assignment */
} ob_req_timings;

ob_sched_params ob_sched_default_params(void);
int ob_sched_new(ob_model_t *m, const ob_sched_params *p, ob_sched_t **out, char *err, size_t errlen);
/* Stops the thread, cancels every request (their readers get OB_FINISH_CANCELLED). */
void ob_sched_free(ob_sched_t *s);
int32_t ob_sched_n_ctx(const ob_sched_t *s);
int32_t ob_sched_n_slots(const ob_sched_t *s);
/* Snapshot of slot i: busy flag and cached token count (for /slots). */
void ob_sched_slot_info(ob_sched_t *s, int32_t i, int *busy, int32_t *n_cached);
/* Submits a request. NULL with err when refused: a prompt longer than the context ("exceeds the
 * available context size"), a full queue ("queue is full"), bad parameters. */
ob_req_t *ob_sched_submit(ob_sched_t *s, const ob_req_params *p, char *err, size_t errlen);
/* Waits up to timeout_ms (< 0: forever) for the next event. Returns 1 with an event, 0 on
 * timeout, -1 when the request has finished and every event was read. */
int ob_req_next(ob_req_t *r, ob_token_event *ev, int timeout_ms);
/* Asks the scheduler to stop this request within one step (client gone, stop string seen). */
void ob_req_cancel(ob_req_t *r);
void ob_req_get_timings(ob_req_t *r, ob_req_timings *t);
const char *ob_req_error(ob_req_t *r);
/* Releases the reader's reference (cancels the request if it is still running). */
void ob_req_free(ob_req_t *r);

/* ---- misc ----------------------------------------------------------------------------- */
/* Monotonic clock in microseconds. */
int64_t ob_time_us(void);

#endif
