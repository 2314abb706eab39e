/* tokenizer.h — text <-> token ids from the vocabulary a GGUF file carries.
 *
 * Owns: loading tokenizer.ggml.* keys (model "gpt2" = byte-level BPE with merges and a
 * pre-tokenizer split regex chosen by tokenizer.ggml.pre; model "llama" = SentencePiece-style
 * with scores and byte fallback), special tokens, encoding and decoding. The public calls are
 * declared in onebit.h.
 * Does not own: chat templates (text/template), tokenizer.json (read by tools/convert now;
 * by this module in the tokenizer issue).
 */
#ifndef OB_TOKENIZER_H
#define OB_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "onebit.h"
#include "format/gguf.h"

int ob_tokenizer_load_gguf(const ob_gguf_t *g, ob_tokenizer_t **out, char *err, size_t errlen);
void ob_tokenizer_free(ob_tokenizer_t *t);

#endif
