/* gen.h — one generation request as the OpenAI-style handlers run it (server-internal).
 *
 * Owns: the parsed request (sampling, stop strings, n, logprobs, tools, response format,
 * prompt tokens), the choices in flight (one scheduler request each, with text assembly and
 * output parsing), the wait loop over their events, and the reply formats' interface: chat
 * completions and completions (openai_gen.c), Responses and Anthropic Messages
 * (openai_resp.c) each fill an ob_gen_fmt.
 * Does not own: HTTP (http.c), rendering messages (chat.c).
 */
#ifndef OB_GEN_H
#define OB_GEN_H

#include "server/server.h"

enum { OB_TC_AUTO, OB_TC_NONE, OB_TC_REQUIRED, OB_TC_NAMED };
enum { OB_RF_TEXT, OB_RF_JSON_OBJECT, OB_RF_JSON_SCHEMA };

typedef struct {
    char *model;                 /* echoed in replies */
    int stream, include_usage, n, echo, ignore_eos;
    int32_t max_tokens;          /* <= 0: until the context is full */
    int32_t min_tokens;          /* vLLM's: no end-of-generation token before this many */
    ob_sampler_params sp;
    char **stop;                 /* [n_stop] */
    int n_stop;
    int logprobs, top_logprobs;
    ob_logit_bias *bias;         /* [n_bias] */
    int n_bias;
    json_t *tools;               /* array of {type, function:{name, description, parameters}} or NULL */
    int tool_choice;             /* OB_TC_* */
    char *tool_name;             /* OB_TC_NAMED */
    int rf;                      /* OB_RF_* */
    json_t *schema;              /* OB_RF_JSON_SCHEMA */
    json_t *tmpl_kwargs;         /* chat_template_kwargs: extra template variables (enable_thinking) */
    int32_t *prompt;             /* [n_prompt] */
    int32_t n_prompt;
    char *prompt_text;           /* rendered prompt (echo, /apply-template) */
    int in_think;                /* the prompt opened a reasoning block */
    ob_constraint *cons;
} ob_gen_req;

typedef struct {
    ob_req_t *req;
    ob_textacc acc;
    ob_outp op;
    int parse;                   /* run the output parser (chat-like APIs) */
    ob_sbuf content, reasoning;   /* whole text so far */
    json_t *tool_calls;          /* [{id, type, function:{name, arguments}}] */
    json_t *lp;                  /* chat-style logprob entries so far */
    /* what arrived since the format last looked (streaming) */
    ob_sbuf d_content, d_reasoning;
    json_t *d_tools, *d_lp;
    ob_finish finish;
    int stop_hit, done, n_tok, finish_sent;
    int short_ids;               /* tool-call ids of 9 alphanumerics (Mistral) */
    ob_req_timings tm;
    char err[256];
    void *cstate;                /* grammar matcher state, or NULL */
} ob_choice;

typedef struct ob_gen ob_gen;

typedef struct {
    const char *id_prefix;       /* "chatcmpl-", "cmpl-", "resp_", "msg_" */
    int parse;                   /* output parser on (chat-like) */
    void (*start)(ob_gen *g, ob_sbuf *out);                      /* stream: first events */
    void (*delta)(ob_gen *g, int i, ob_sbuf *out);               /* stream: choice i's new deltas */
    void (*done)(ob_gen *g, int i, int last, ob_sbuf *out);      /* stream: choice i finished */
    void (*end)(ob_gen *g, ob_sbuf *out);                        /* stream: after every choice */
    json_t *(*full)(ob_gen *g);                                 /* the non-streamed reply */
} ob_gen_fmt;

struct ob_gen {
    ob_server *S;
    ob_gen_req q;
    const ob_gen_fmt *fmt;
    ob_choice *ch;               /* [n] */
    int n;
    ob_http_req *http;
    char id[48];
    long created;
    int started, seq;            /* seq: Responses' sequence_number */
    int metrics_done;
    int64_t t0_us;               /* when generation began (monotonic): --request-timeout counts from here */
    int timed_out;               /* the deadline passed: cancelled, finishing as "length" */
    void *api;                   /* format-private state */
    void (*api_free)(void *);
};

/* ---- request parsing (openai_gen.c) ---------------------------------------------------- */
void ob_gen_req_free(ob_gen_req *q);
/* Sampling and common fields of a body; names the field at fault. max_key: the name of the
 * token limit field(s) in this API, e.g. "max_tokens". */
int ob_gen_parse_common(ob_server *S, json_t *body, ob_gen_req *q, char *err, size_t errlen);
/* Tools, tool_choice and response_format (chat, responses). */
int ob_gen_parse_tools(json_t *body, ob_gen_req *q, int flat_tools, char *err, size_t errlen);
/* Renders messages and tokenizes them into q->prompt. *status for errors. */
int ob_gen_chat_prompt(ob_server *S, json_t *messages, ob_gen_req *q, int *status, char *err, size_t errlen);
/* A whole body -> the internal request (prompt tokens included), without running anything:
 * chat completions, completions, and Responses (messages_api 0) or Anthropic Messages (1).
 * Return 0, or -1 with err and *status (400: the request, 500: the template). The caller
 * frees q with ob_gen_req_free either way. tests/fuzz/fuzz_request.c drives these. */
int ob_gen_parse_chat(ob_server *S, json_t *body, ob_gen_req *q, int *status, char *err, size_t errlen);
int ob_gen_parse_completion(ob_server *S, json_t *body, ob_gen_req *q, int *status, char *err, size_t errlen);
int ob_gen_parse_resp(ob_server *S, json_t *body, int messages_api, ob_gen_req *q, int *status, char *err, size_t errlen);
/* Compiles q's grammar constraint (response_format, tool_choice required/named) into q->cons;
 * no-op without one. -1 with err and *status (400; 501: no grammar engine in this build). */
int ob_gen_constrain(ob_server *S, ob_gen_req *q, int *status, char *err, size_t errlen);
/* Answers a request that failed before generation: counts it, fills r, frees q and body. */
void ob_gen_fail(ob_server *S, ob_http_req *r, ob_gen_req *q, json_t *body, int status, const char *err);
/* Reads a strict field of a type; absent or null leaves *out. Returns -1 naming key. */
int ob_json_num(json_t *o, const char *key, double lo, double hi, double *out, char *err, size_t errlen);
int ob_json_bool(json_t *o, const char *key, int *out, char *err, size_t errlen);

/* ---- running (openai_gen.c) ------------------------------------------------------------- */
/* Checks readiness, parses the body; on failure fills r and returns NULL. */
json_t *ob_gen_body(ob_server *S, ob_http_req *r);
/* Submits and answers: streams through fmt, or waits and replies fmt->full. Takes q, and api
 * (format-private state, freed with api_free). */
void ob_gen_run(ob_server *S, ob_http_req *r, ob_gen_req *q, const ob_gen_fmt *fmt, void *api, void (*api_free)(void *));
json_t *ob_gen_usage(ob_gen *g);     /* OpenAI usage object */
json_t *ob_gen_timings(ob_gen *g);   /* llama.cpp timings object */
const char *ob_gen_finish_reason(const ob_choice *c);
/* "data: <json>\n\n" (with "event: NAME\n" first when name). Steals j. */
void ob_sse(ob_sbuf *out, const char *event, json_t *j);
/* A fresh random id with a prefix. */
void ob_gen_new_id(char *out, size_t n, const char *prefix);

#endif
