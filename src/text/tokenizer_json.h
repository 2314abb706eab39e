/* tokenizer_json.h — building a tokenizer from a Hugging Face tokenizer.json.
 *
 * Owns: the entry points of tokenizer_json.c (see there for what is read and how).
 * Does not own: the public ob_tokenizer_load (onebit.h), which dispatches here or to GGUF.
 */
#ifndef OB_TOKENIZER_JSON_H
#define OB_TOKENIZER_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "format/gguf.h"
#include "onebit.h"

/* The GGUF key `1bit convert` adds beside llama.cpp's tokenizer.ggml.* keys: the tokenizer.json
 * without its vocabulary and merges (those are tokenizer.ggml.tokens / merges), as a string. */
#define OB_GGUF_KEY_HF "1bit.tokenizer.json"

/* root: the parsed tokenizer.json; config: tokenizer_config.json or NULL (BOS / EOS names);
 * what: the file name used in errors. */
int ob_tokenizer_from_json(const json_t *root, const json_t *config, const char *what, ob_tokenizer_t **out,
                           char *err, size_t errlen);
int ob_tokenizer_load_json(const char *path, ob_tokenizer_t **out, char *err, size_t errlen);
/* Writes the tokenizer.ggml.* keys (and OB_GGUF_KEY_HF) for a tokenizer.json. n_min: at least
 * this many tokens (config.json's vocab_size; the rest padded as llama.cpp pads). bos / eos: ids
 * from config.json or -1 (then the tokenizer's); written back. *n_out: tokens written. */
int ob_tokenizer_json_to_gguf(const json_t *root, const json_t *config, const char *what, ob_gguf_writer_t *w,
                              int32_t n_min, int32_t *bos, int32_t *eos, int32_t *n_out, char *err, size_t errlen);
/* Rebuilds the tokenizer of a GGUF file that has OB_GGUF_KEY_HF (its value: hfs, hfl bytes). */
int ob_tokenizer_gguf_hf(const ob_gguf_t *g, const char *hfs, size_t hfl, ob_tokenizer_t **out, char *err,
                         size_t errlen);
/* json_load_file with an error that names the file, line and column; NUL bytes allowed. */
json_t *ob_json_load_file(const char *path, char *err, size_t errlen);

#endif
