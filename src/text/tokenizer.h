/* tokenizer.h — text <-> token ids from the vocabulary a GGUF file carries.
 *
 * Owns: loading tokenizer.ggml.* keys (model "gpt2" = byte-level BPE with merges and a
 * pre-tokenizer split regex chosen by tokenizer.ggml.pre; model "llama" = SentencePiece-style
 * with scores and byte fallback), special tokens, encoding and decoding. The public calls are
 * declared in onebit.h.
 * Does not own: chat templates (text/template); tokenizer.json (tokenizer_json.h); the private
 * state shared by the tokenizer's files (tokenizer_int.h).
 */
#ifndef OB_TOKENIZER_H
#define OB_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "onebit.h"
#include "format/gguf.h"

int ob_tokenizer_load_gguf(const ob_gguf_t *g, ob_tokenizer_t **out, char *err, size_t errlen);
/* use_hf_key 0: read only llama.cpp's keys, as llama.cpp would (tests compare the two readings). */
int ob_tokenizer_load_gguf_ex(const ob_gguf_t *g, int use_hf_key, ob_tokenizer_t **out, char *err, size_t errlen);
void ob_tokenizer_free(ob_tokenizer_t *t);

#endif
