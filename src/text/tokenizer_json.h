/* tokenizer_json.h — building a tokenizer from a Hugging Face tokenizer.json.
 *
 * Owns: the entry points of tokenizer_json.c (see there for what is read and how).
 * Does not own: the public ob_tokenizer_load (onebit.h), which dispatches here or to GGUF.
 */
#ifndef OB_TOKENIZER_JSON_H
#define OB_TOKENIZER_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "onebit.h"

/* root: the parsed tokenizer.json; config: tokenizer_config.json or NULL (BOS / EOS names);
 * what: the file name used in errors. */
int ob_tokenizer_from_json(const json_t *root, const json_t *config, const char *what, ob_tokenizer_t **out,
                           char *err, size_t errlen);
int ob_tokenizer_load_json(const char *path, ob_tokenizer_t **out, char *err, size_t errlen);
/* json_load_file with an error that names the file, line and column; NUL bytes allowed. */
json_t *ob_json_load_file(const char *path, char *err, size_t errlen);

#endif
