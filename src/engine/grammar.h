/* grammar.h — constrained decoding: GBNF grammars, JSON Schema -> grammar, and the per-request
 * matcher that masks logits so the output always matches.
 *
 * Owns: the grammar representation (rules of sequences and alternatives over Unicode character
 * classes, bounded/unbounded repetition, rule references, single-token matches), the GBNF parser
 * (llama.cpp's syntax), the JSON Schema subset converter (docs/grammar.md lists it), a read-only
 * per-tokenizer vocabulary index (a byte trie of every token), and the incremental matcher over
 * bytes whose filter/accept functions plug straight into ob_req_params (filter, accept,
 * filter_user = the state).
 * Does not own: sampling (sampler.c), the tool-call syntax of a model (the server writes the GBNF
 * that wraps a schema's rules; see ob_grammar_json_schema_to_gbnf), HTTP or request JSON.
 *
 * Threads: a grammar and a vocabulary are immutable once built and may be shared by any number of
 * states on any threads (both are reference counted: a state keeps what it uses alive, so the
 * caller may free its own references right after ob_grammar_state_new). A state belongs to one
 * request and is used by one thread at a time (the scheduler thread).
 *
 * Matching is on the bytes of tokens (ob_tokenizer_token_bytes: special tokens as their text),
 * so the front end must render generated tokens with those same bytes. End-of-generation tokens
 * are never matched as text: they are allowed exactly when the output so far is a complete match.
 */
#ifndef OB_GRAMMAR_H
#define OB_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "onebit.h"

typedef struct ob_grammar ob_grammar_t;
typedef struct ob_grammar_vocab ob_grammar_vocab_t;
typedef struct ob_grammar_state ob_grammar_state_t;

/* ---- grammars ------------------------------------------------------------------------------- */

/* Parses GBNF text (llama.cpp syntax; the start rule is `root`): "literals" with \n \r \t \\ \"
 * \xHH \uHHHH \UHHHHHHHH escapes, [classes] and [^negated classes] over code points, `.` (any
 * code point), ( groups ), | alternatives, * + ? {m} {m,} {m,n} {,n}, # comments, and single
 * tokens <[id]> / !<[id]> (any one token but id). Errors name the line and column, and also
 * cover grammars the matcher could not run safely: undefined rules, left recursion, rules that
 * can never finish, empty classes, and sizes past the limits (docs/grammar.md). */
ob_grammar_t *ob_grammar_parse_gbnf(const char *text, char *err, size_t errlen);

/* A JSON Schema (text) as a grammar for one JSON value with bounded whitespace between tokens.
 * NULL with err naming the schema location (a JSON pointer) of anything unsupported. */
ob_grammar_t *ob_grammar_from_json_schema(const char *schema_json, char *err, size_t errlen);

/* response_format {"type": "json_object"}: any JSON object. NULL only when out of memory. */
ob_grammar_t *ob_grammar_json_object(void);

/* The GBNF text a schema converts to, for embedding it in a larger grammar (a tool call: the
 * model's call syntax around the arguments object). Every rule name of the result starts with
 * rule_prefix (letters, digits and '-'; NULL or "" for none), and the schema's value is the rule
 * `<rule_prefix>root`. Returns a malloc'd string (free()), or NULL with err. Example:
 *   args = ob_grammar_json_schema_to_gbnf(params_schema, "f1-", err, n);
 *   grammar = "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" f1-root
 *              \"}\\n</tool_call>\"\n" + args
 * The schema rules end without trailing whitespace, so the wrapper decides what may follow. */
char *ob_grammar_json_schema_to_gbnf(const char *schema_json, const char *rule_prefix, char *err, size_t errlen);

/* Writes s[0..len) as a quoted GBNF literal into out (NUL-terminated, truncated to outlen).
 * Returns the length the full literal needs (excluding the NUL), like snprintf. */
size_t ob_grammar_gbnf_literal(const char *s, size_t len, char *out, size_t outlen);

/* Drops the caller's reference (states hold their own). NULL is fine. */
void ob_grammar_free(ob_grammar_t *g);

/* 1 if bytes[0..n) is a complete match of the grammar, else 0 (no tokenizer involved). */
int ob_grammar_match(const ob_grammar_t *g, const char *bytes, size_t n);

/* ---- vocabulary index ------------------------------------------------------------------------
 * The byte trie of a tokenizer's tokens, built once per model (tens of ms for 150k tokens) and
 * shared by every request's state. Keeps no pointer to tok. */
ob_grammar_vocab_t *ob_grammar_vocab_new(const ob_tokenizer_t *tok, char *err, size_t errlen);
void ob_grammar_vocab_free(ob_grammar_vocab_t *v);

/* ---- per-request state ------------------------------------------------------------------------ */

/* A matcher at the start of the grammar. With tok NULL the state takes bytes only
 * (ob_grammar_state_accept_bytes). Builds a private vocabulary index: a server should build one
 * per model with ob_grammar_vocab_new and call ob_grammar_state_new_vocab instead. NULL on
 * failure (a token id in the grammar outside the vocabulary, out of memory). */
ob_grammar_state_t *ob_grammar_state_new(const ob_grammar_t *g, const ob_tokenizer_t *tok);
/* The same with a shared vocabulary (v may be NULL: bytes only) and an error message. */
ob_grammar_state_t *ob_grammar_state_new_vocab(const ob_grammar_t *g, const ob_grammar_vocab_t *v,
                                               char *err, size_t errlen);
void ob_grammar_state_free(ob_grammar_state_t *s);

/* ob_logits_filter_fn: sets logits[i] = -INFINITY for every token that cannot continue a match
 * (tokens >= the vocabulary's size too). End-of-generation tokens stay only when the output is a
 * complete match. If no token at all could continue (the state failed, or a pathological
 * grammar exhausted the matcher's limits), only end-of-generation tokens stay, so the request
 * ends rather than produce text outside the grammar. Does not allocate once the state's caches
 * are warm; a mask seen before costs one pass over the logits. */
void ob_grammar_state_filter(void *state, float *logits, int32_t n_vocab);
/* ob_token_accept_fn: advances over the sampled token. A token the filter would have removed
 * puts the state in the failed state (ob_grammar_state_failed) instead of corrupting it. */
void ob_grammar_state_accept(void *state, int32_t token);
/* Advances over raw bytes (a forced prefix, tests). Returns 0, or -1 if they do not continue a
 * match (the state is then unchanged). */
int ob_grammar_state_accept_bytes(ob_grammar_state_t *s, const char *bytes, size_t n);

/* 1 when generation should stop: an end-of-generation token was accepted, or the output is a
 * complete match that nothing but end-of-generation can follow, or the state failed. */
int ob_grammar_state_done(const ob_grammar_state_t *s);
/* 1 when the output so far is a complete match (more may still follow, e.g. whitespace). */
int ob_grammar_state_complete(const ob_grammar_state_t *s);
/* 1 after a rejected token or an exhausted limit: the output cannot be completed. */
int ob_grammar_state_failed(const ob_grammar_state_t *s);
/* Back to the start of the grammar (keeps the caches). */
void ob_grammar_state_reset(ob_grammar_state_t *s);

#endif
