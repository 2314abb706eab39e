/* template.h — chat templates: a Jinja2 interpreter that renders a model's chat template the
 * way Hugging Face transformers does (jinja2's ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks and loopcontrols; raise_exception and strftime_now globals; a
 * tojson filter that is json.dumps).
 *
 * Owns: compiling template text into a handle (lexer, parser), rendering it against variables
 * given as JSON (evaluator, Python-compatible values, filters, tests, methods), the limits
 * that keep a hostile template from hanging or exhausting memory, and finding a model's
 * template (GGUF metadata, tokenizer_config.json, a file) with its special tokens.
 * Does not own: tokenizing the rendered prompt (tokenizer), HTTP or the OpenAI message format
 * (server), reading files other than the template's sources.
 *
 * Errors: every function returns 0 / -1 (or NULL) and writes a message naming the template
 * line and the construct at fault ("line 12: filter 'tojson': ...").
 */
#ifndef OB_TEMPLATE_H
#define OB_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct ob_tmpl ob_tmpl_t;

/* Limits of one render. Zero fields take the defaults in brackets. */
typedef struct {
    size_t max_output;   /* bytes of rendered text [64 MiB] */
    size_t max_memory;   /* bytes the render may allocate, values included [512 MiB] */
    uint64_t max_steps;  /* evaluation steps: expressions, statements, loop iterations [50M] */
    int max_depth;       /* nesting of macro calls and expression evaluation [200] */
    int64_t now;         /* strftime_now's clock in seconds since 1970, read as UTC; 0: the
                          * real clock, read as local time (as Python's datetime.now()) */
} ob_tmpl_opts;

/* Compiles len bytes of template text (UTF-8). Syntax errors name the line and construct. */
int ob_tmpl_compile(const char *src, size_t len, ob_tmpl_t **out, char *err, size_t errlen);
void ob_tmpl_free(ob_tmpl_t *t);

/* Renders with the members of vars (a JSON object, or NULL) as the template's variables.
 * *out is a malloc'd NUL-terminated string of *out_len bytes (out_len may be NULL). opts may
 * be NULL. Rendering errors (raise_exception, a type error, a limit) name the line. */
int ob_tmpl_render(const ob_tmpl_t *t, const json_t *vars, const ob_tmpl_opts *opts,
                   char **out, size_t *out_len, char *err, size_t errlen);

/* ---- chat templates: where they come from and what transformers passes them ---------- */

/* A model's template source and special tokens. */
typedef struct {
    char *template_src;  /* malloc'd template text */
    json_t *specials;    /* object: bos_token, eos_token, unk_token, pad_token, ... (strings)
                          * and additional_special_tokens (array), as transformers'
                          * special_tokens_map; never NULL after a successful load */
} ob_chat_source;

/* From a tokenizer_config.json: its chat_template (a string, or a list of named templates:
 * `name` picks one; NULL picks "tool_use" when want_tools and present, else "default", as
 * transformers does), else a chat_template.jinja beside it, and its special tokens.
 * template_src is NULL when the config has no template (specials are still filled). */
int ob_chat_source_from_tokenizer_config(const char *path, const char *name, int want_tools,
                                         ob_chat_source *out, char *err, size_t errlen);
/* From a GGUF file's metadata: tokenizer.chat_template (or tokenizer.chat_template.NAME, with
 * the same choice as above; NULL when absent) and the texts of the special token ids. */
int ob_chat_source_from_gguf(const char *path, const char *name, int want_tools,
                             ob_chat_source *out, char *err, size_t errlen);
/* Replaces the template text with a file's contents (--chat-template-file). */
int ob_chat_source_set_file(ob_chat_source *s, const char *path, char *err, size_t errlen);
void ob_chat_source_free(ob_chat_source *s);

/* Renders a conversation as transformers' apply_chat_template does: variables are the special
 * tokens, then extra's members (e.g. enable_thinking), then messages, tools (null when
 * absent), documents (null) and add_generation_prompt. *out as ob_tmpl_render's. */
int ob_chat_render(const ob_tmpl_t *t, const json_t *specials, const json_t *messages,
                   const json_t *tools, int add_generation_prompt, const json_t *extra,
                   const ob_tmpl_opts *opts, char **out, size_t *out_len, char *err, size_t errlen);

#endif
