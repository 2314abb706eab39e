/* pretok.h — the pre-tokenizer of byte-level BPE: split text into words with regexes.
 *
 * Owns: the table of named split configurations (tokenizer.ggml.pre values such as
 * "llama-bpe", "qwen2", "gpt-2", "default"), compiling a list of regexes with PCRE2 (UTF + UCP,
 * invalid UTF-8 tolerated) and splitting text with them. A pre-tokenizer is a list of regexes
 * applied in order: each one cuts every piece the previous ones left into its matches and the
 * gaps between them (Hugging Face's Split with behaviour "Isolated"), so nothing is dropped.
 * A tokenizer.json loader configures one from its own regex list with ob_pretok_new.
 * Does not own: byte-level mapping, merges, special tokens (tokenizer.c).
 *
 * A compiled pre-tokenizer is read-only after creation: splitting from many threads at once is
 * safe (match state lives on the caller's side).
 */
#ifndef OB_PRETOK_H
#define OB_PRETOK_H

#include <stddef.h>

#define OB_PRETOK_MAX_REGEX 6

/* A named configuration, as llama.cpp reads tokenizer.ggml.pre. */
typedef struct {
    const char *const *names;   /* NULL-terminated aliases */
    const char *regex[OB_PRETOK_MAX_REGEX]; /* applied in order; unused entries NULL */
    int ignore_merges;          /* a word that is itself a token is emitted whole (Llama 3) */
    int add_bos;                /* default of tokenizer.ggml.add_bos_token for this family */
} ob_pretok_def;

/* The configuration for a tokenizer.ggml.pre name, or NULL when the name is unknown. */
const ob_pretok_def *ob_pretok_find(const char *name);
/* The names known, for error messages: writes a comma-separated list (truncated to len). */
void ob_pretok_names(char *buf, size_t len);

typedef struct ob_pretok ob_pretok_t;

/* Compiles n regexes (1..OB_PRETOK_MAX_REGEX). Returns 0, or -1 with err naming the regex. */
int ob_pretok_new(const char *const *regex, int n, ob_pretok_t **out, char *err, size_t errlen);
void ob_pretok_free(ob_pretok_t *p);

/* Called once per piece, in text order; a nonzero return stops the split. */
typedef int (*ob_pretok_fn)(void *ctx, const char *piece, size_t len);

/* Splits len bytes of text (any bytes: invalid UTF-8 ends up in gap pieces). Returns 0, or -1
 * if fn stopped it, a match failed (PCRE2 limits) or memory ran out. */
int ob_pretok_split(const ob_pretok_t *p, const char *text, size_t len, ob_pretok_fn fn, void *ctx);

/* Length of the UTF-8 character at s (1..4), or 1 for a byte that does not start a valid,
 * shortest-form, non-surrogate sequence within n bytes. n must be >= 1. */
size_t ob_utf8_len(const unsigned char *s, size_t n);

#endif
