/* convert.h — shared pieces of `1bit convert` (HF checkpoint or random weights -> GGUF).
 *
 * Owns: the hyperparameters read from config.json, and the vocabulary step that turns a
 * tokenizer.json (+ tokenizer_config.json) or a synthetic vocabulary into GGUF tokenizer keys.
 * Does not own: the GGUF format (format/gguf), the architecture table (engine/arch).
 */
#ifndef OB_CONVERT_H
#define OB_CONVERT_H

#include <jansson.h>
#include <stddef.h>

#include "format/gguf.h"

typedef struct {
    int n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    double eps, theta;
    int tied;                  /* -1: decide from the checkpoint (no lm_head -> tied) */
    int bos, eos;              /* -1 if unknown */
    /* rope scaling: "" none, "linear", "llama3" */
    char rope_type[16];
    double rope_factor, low_freq_factor, high_freq_factor, orig_ctx;
} ob_cv_hparams;

/* Reads config.json's values into hp; err names the field at fault. */
int ob_cv_read_config(json_t *cfg, const char *path, ob_cv_hparams *hp, char *err, size_t errlen);

/* Writes tokenizer.ggml.* and tokenizer.chat_template from dir/tokenizer.json and
 * dir/tokenizer_config.json (byte-level BPE tokenizers). n_vocab pads the vocabulary. */
int ob_cv_vocab_from_dir(ob_gguf_writer_t *w, const char *dir, ob_cv_hparams *hp, char *err, size_t errlen);

/* Writes a synthetic byte-level BPE vocabulary of hp->n_vocab tokens (256 bytes, merged pairs,
 * BOS/EOS specials at hp->bos / hp->eos): valid for llama.cpp and for us; for speed work. */
int ob_cv_vocab_synthetic(ob_gguf_writer_t *w, ob_cv_hparams *hp, char *err, size_t errlen);

/* Reads a whole JSON file; NULL with err on failure. */
json_t *ob_cv_load_json(const char *path, char *err, size_t errlen);

#endif
