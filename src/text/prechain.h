/* prechain.h — the pre-tokenizer of tokenizer.json: a chain of steps that cut text into words.
 *
 * Owns: reading a "pre_tokenizer" object (Split, ByteLevel, Metaspace, Digits, Whitespace,
 * WhitespaceSplit, BertPreTokenizer, Punctuation, Sequence) and running it. Each step cuts every
 * piece the previous step left, with Hugging Face's split behaviours (Removed, Isolated,
 * MergedWithPrevious, MergedWithNext, Contiguous, and invert); empty pieces are dropped.
 * Does not own: what a word becomes (tokenizer.c's models), the normalizer (normalize.c).
 *
 * ByteLevel must be the last step (every real tokenizer.json has it last): its words are
 * handed on as raw bytes and the model maps them to the GPT-2 byte alphabet itself.
 * A compiled chain is read-only; the scratch object carries the per-call state.
 */
#ifndef OB_PRECHAIN_H
#define OB_PRECHAIN_H

#include <jansson.h>
#include <stddef.h>

#include "text/pretok.h"

typedef struct ob_prechain ob_prechain_t;
typedef struct ob_prechain_scratch ob_prechain_scratch;

/* j: the pre_tokenizer object (NULL or JSON null: *out = NULL, each text is one word). */
int ob_prechain_from_json(const json_t *j, const char *where, ob_prechain_t **out, char *err, size_t errlen);
void ob_prechain_free(ob_prechain_t *p);

/* Nonzero if the chain ends with a ByteLevel step (words are raw bytes for byte-level BPE). */
int ob_prechain_byte_level(const ob_prechain_t *p);
/* Nonzero if that ByteLevel step prepends a space (add_prefix_space): decoding then drops it. */
int ob_prechain_prefix_space(const ob_prechain_t *p);

/* Splits s[0, n) into words, calling fn for each in order. at_start: s begins at offset 0 of the
 * caller's input (Metaspace's prepend_scheme "first"). *scratch is created on first use and
 * reused; free it with ob_prechain_scratch_free. Returns 0, or -1 if fn stopped it, a regex
 * failed or memory ran out. */
int ob_prechain_run(const ob_prechain_t *p, ob_prechain_scratch **scratch, const char *s, size_t n, int at_start,
                    ob_pretok_fn fn, void *ctx);
void ob_prechain_scratch_free(ob_prechain_scratch *s);

#endif
