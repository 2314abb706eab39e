/* server.h — shared state of `1bit serve` and the interfaces between its parts.
 *
 * Owns: the configuration (filled from the command line by tools/serve.c), the live server
 * state every handler reads (model, scheduler, template, counters), and the small pieces
 * the OpenAI handlers share: text assembly (UTF-8 + stop strings), the model-output parser
 * (reasoning, tool calls per model family), chat rendering.
 * Does not own: HTTP (http.h), tensors (the engine, behind onebit.h).
 */
#ifndef OB_SERVER_H
#define OB_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "onebit.h"
#include "server/http.h"

typedef struct {
    const char *model, *hf_repo, *host, *alias, *api_key, *api_key_file, *chat_template_file, *device;
    int port, n_ctx, n_parallel, n_threads, n_batch, n_ubatch, n_gpu_layers, timeout_s;
    int jinja, metrics, embeddings, reranking;
    int max_body_mb;
    int max_header, max_conns, max_queue; /* limits: header bytes, open connections, waiting requests */
    int request_timeout_s;       /* one request, queue + generation (and receiving its body); 0: none */
    const char *hf_cache;        /* download folder for -hf (NULL: $XDG_CACHE_HOME/1bit) */
    /* request defaults (llama-server's sampling flags); a request's own fields win */
    ob_sampler_params sp;
    int n_predict;               /* default max tokens; -1: until the context is full */
    int seed;                    /* -1: a fresh seed per request */
} ob_serve_config;

enum { OB_SERVER_LOADING = 0, OB_SERVER_READY = 1, OB_SERVER_FAILED = -1 };

/* Tool-call format of a model family (what its chat template teaches it to emit). */
typedef enum {
    OB_TOOLS_HERMES = 0,         /* Qwen 2.5/3, ChatML: <tool_call>{json}</tool_call> */
    OB_TOOLS_LLAMA3,             /* {"name":..,"parameters":..} or <|python_tag|>... */
    OB_TOOLS_MISTRAL,            /* [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...} */
    OB_TOOLS_HARMONY             /* gpt-oss: <|channel|>commentary to=functions.X ... */
} ob_tool_format;

typedef struct {
    ob_serve_config cfg;
    atomic_int state;            /* OB_SERVER_* */
    atomic_int stopping;         /* shutdown began: streams end, requests are cancelled */
    ob_model_t *model;
    ob_sched_t *sched;
    const ob_tokenizer_t *tok;
    char *model_path;
    char *model_id;              /* --alias or the file's base name */
    char *chat_template;         /* --chat-template-file or the model's source; NULL: none (ChatML) */
    void *tmpl, *tmpl_tools;     /* compiled (ob_tmpl_t), the tool_use variant when the model has one */
    char *tmpl_tools_src;
    json_t *tmpl_specials;       /* bos_token, eos_token, ... for the template */
    char *tmpl_error;            /* why the template does not compile (chat answers 500 with it) */
    ob_tool_format tool_format;
    int64_t t_start_us;          /* monotonic */
    long t_start_wall;           /* seconds since 1970 */
    char load_error[1024];
    /* embeddings: a context of its own, one request at a time */
    ob_ctx_t *embd_ctx;
    pthread_mutex_t embd_mu;
    /* counters for /metrics */
    atomic_llong n_requests, n_errors, n_prompt_tokens, n_predicted_tokens, n_processing;
    atomic_llong prompt_us, predicted_us;
} ob_server;

/* ---- handlers (openai_*.c) -------------------------------------------------------------- */
void ob_h_health(void *app, ob_http_req *r);
void ob_h_models(void *app, ob_http_req *r);
void ob_h_chat(void *app, ob_http_req *r);
void ob_h_completions(void *app, ob_http_req *r);
void ob_h_responses(void *app, ob_http_req *r);
void ob_h_messages(void *app, ob_http_req *r);
void ob_h_embeddings(void *app, ob_http_req *r);
void ob_h_tokenize(void *app, ob_http_req *r);
void ob_h_detokenize(void *app, ob_http_req *r);
void ob_h_apply_template(void *app, ob_http_req *r);
void ob_h_props(void *app, ob_http_req *r);
void ob_h_slots(void *app, ob_http_req *r);
void ob_h_metrics(void *app, ob_http_req *r);
void ob_h_rerank(void *app, ob_http_req *r);
/* The route table (one place). */
extern const ob_http_route ob_server_routes[];
extern const int ob_server_n_routes;

/* ---- text assembly: token bytes -> valid UTF-8 text, stop strings cut ------------------- */
typedef struct {
    ob_sbuf pend;                 /* bytes held back: an incomplete character or a stop-string prefix */
    char **stop;                 /* [n_stop] (borrowed) */
    int n_stop;
    int stopped;                 /* a stop string was seen: nothing more is released */
} ob_textacc;

/* Appends token bytes; appends the text now safe to show to out. Returns 1 once a stop
 * string is complete (the text before it is released, the rest dropped). */
int ob_textacc_feed(ob_textacc *a, const char *bytes, size_t n, ob_sbuf *out);
/* End of generation: releases what is held (an incomplete character becomes U+FFFD). */
void ob_textacc_flush(ob_textacc *a, ob_sbuf *out);
void ob_textacc_free(ob_textacc *a);
/* Appends bytes as valid UTF-8 (invalid sequences -> U+FFFD). Returns bytes consumed: an
 * incomplete character at the end is left unless final. */
size_t ob_utf8_sanitize(const char *s, size_t n, int final, ob_sbuf *out);

/* Appends the bytes of token id (special tokens as their text), however long; -1 for a bad id. */
int ob_token_raw(const ob_tokenizer_t *t, int32_t id, ob_sbuf *out);
/* The same as valid UTF-8 (U+FFFD for bytes that are not), for showing one token alone. */
int ob_token_text(const ob_tokenizer_t *t, int32_t id, ob_sbuf *out);

/* ---- model-output parser: content / reasoning / tool calls ------------------------------- */
typedef enum { OB_OUT_CONTENT, OB_OUT_REASONING, OB_OUT_TOOL } ob_out_kind;
typedef struct {
    ob_out_kind kind;
    const char *text;            /* content or reasoning delta (len bytes) */
    size_t len;
    const char *name, *args;     /* tool call: function name, arguments as JSON text */
} ob_out_ev;
typedef void (*ob_out_fn)(void *user, const ob_out_ev *ev);

typedef struct {
    ob_tool_format fmt;
    int parse_tools, parse_think;
    int mode;                    /* internal state */
    int at_start;                /* nothing but whitespace seen yet */
    int strip_ws;                /* drop whitespace that follows </think> or a tool call */
    ob_sbuf buf;                  /* text not yet classified */
    ob_sbuf tool;                 /* body of the tool call being read */
    char *tool_name;             /* harmony: recipient */
    int n_tools;
} ob_outp;

/* in_think: the prompt ended inside a reasoning block (e.g. "<think>\n"). */
void ob_outp_init(ob_outp *p, ob_tool_format fmt, int parse_tools, int in_think);
void ob_outp_feed(ob_outp *p, const char *text, size_t len, ob_out_fn fn, void *user);
void ob_outp_end(ob_outp *p, ob_out_fn fn, void *user);
void ob_outp_free(ob_outp *p);

/* ---- chat rendering (chat.c) ------------------------------------------------------------ */
/* Which tool-call format a template (NULL: none) teaches. */
ob_tool_format ob_srv_chat_tool_format(const char *tmpl);
/* Loads and compiles the model's chat template (or template_file's) into S. */
int ob_srv_chat_load(ob_server *S, const char *model_path, const char *template_file, char *err, size_t errlen);
void ob_srv_chat_free(ob_server *S);
/* Renders messages (+ tools and extra template variables, may be NULL) with the server's
 * template. Returns 0, or -1 with err: *status is 400 for a bad message, 500 for a template
 * that fails (the message names the template line and construct). */
int ob_srv_chat_render(const ob_server *S, json_t *messages, json_t *tools, int add_generation_prompt, json_t *extra,
                       ob_sbuf *out, int *status, char *err, size_t errlen);

/* ---- grammar constraints (constraint.c) ------------------------------------------------- */
/* A compiled constraint; each choice binds its own matcher state to its ob_req_params. */
typedef struct ob_constraint ob_constraint;
typedef enum { OB_CONSTRAINT_JSON_OBJECT, OB_CONSTRAINT_JSON_SCHEMA, OB_CONSTRAINT_TOOL_CALL } ob_constraint_kind;
/* Nonzero when this build can enforce constraints (the grammar engine is present). */
int ob_constraint_available(void);
/* schema: the JSON schema (JSON_SCHEMA), or the tools array and the forced name or NULL for
 * any (TOOL_CALL). NULL with err naming what is wrong. */
ob_constraint *ob_constraint_new(const ob_server *S, ob_constraint_kind kind, json_t *schema, const char *tool_name,
                                 char *err, size_t errlen);
void ob_constraint_free(ob_constraint *c);
/* Sets p's filter/accept/filter_user to a fresh matcher state, returned (NULL on failure).
 * Free it with ob_constraint_state_free only after the request has finished. */
void *ob_constraint_bind(ob_constraint *c, ob_req_params *p, char *err, size_t errlen);
void ob_constraint_state_free(void *state);

/* ---- -hf download (hf.c) ---------------------------------------------------------------- */
/* Downloads REPO[:QUANT]'s GGUF into the cache (resuming, verifying its sha256); *path_out
 * is the file (malloc'd). */
int ob_hf_download(const char *spec, const char *cache_dir, char **path_out, char *err, size_t errlen);

#endif
