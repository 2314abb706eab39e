/* normalize.h — tokenizer.json normalizers (NFC, NFKC, Lowercase, Prepend, Replace, Strip,
 * StripAccents, BertNormalizer, Sequence of these).
 *
 * Owns: reading a "normalizer" object of tokenizer.json into a compiled chain, and running it.
 * Does not own: where the chain runs (tokenizer.c runs it on each piece of text between added
 * tokens, as Hugging Face does), Unicode data (utf8proc, through unicode.h).
 *
 * Text is UTF-8. Bytes that are not valid UTF-8 pass every step unchanged (Hugging Face only
 * ever sees valid strings; a C caller may hand us anything).
 * A compiled chain is read-only: many threads may run it at once.
 */
#ifndef OB_NORMALIZE_H
#define OB_NORMALIZE_H

#include <jansson.h>
#include <stddef.h>

#include "text/unicode.h"

typedef struct ob_norm ob_norm_t;

/* j: the normalizer object (NULL or JSON null: *out = NULL, no normalization). where names the
 * field in errors ("tokenizer.json: normalizer"). Returns 0, or -1 with err saying what. */
int ob_norm_from_json(const json_t *j, const char *where, ob_norm_t **out, char *err, size_t errlen);
void ob_norm_free(ob_norm_t *n);

/* Normalizes s[0, len) into out (its previous content is replaced). tmp: scratch. Returns 0,
 * or -1 (out of memory, or a regex that failed to run). */
int ob_norm_apply(const ob_norm_t *n, const char *s, size_t len, ob_strbuf *out, ob_strbuf *tmp);

#endif
