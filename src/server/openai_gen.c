/* openai_gen.c — POST /v1/chat/completions and /v1/completions, and the generation core
 * that /v1/responses and /v1/messages share.
 *
 * Owns: strict request parsing (a wrong type or range is a 400 naming the field), submitting
 * n scheduler requests (seeds seed+i), the wait loop (also noticing a client that left and
 * server shutdown, then cancelling within one step), per-choice text assembly and output
 * parsing, usage and llama.cpp-style timings, and the chat / completion reply shapes,
 * streamed (SSE, `data: [DONE]`) or whole.
 * Does not own: HTTP (http.c), templates (chat.c), batching (the scheduler).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/gen.h"
#include "util/err.h"

/* ---- small JSON helpers --------------------------------------------------------------- */
int ob_json_num(json_t *o, const char *key, double lo, double hi, double *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return ERR("'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return ERR("'%s' must be between %g and %g", key, lo, hi);
    *out = d;
    return 0;
}

static int json_int(json_t *o, const char *key, long long lo, long long hi, long long *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return ERR("'%s' must be an integer", key);
    long long d = json_integer_value(v);
    if (d < lo || d > hi) return ERR("'%s' must be between %lld and %lld", key, lo, hi);
    *out = d;
    return 0;
}

int ob_json_bool(json_t *o, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return ERR("'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* -inf is not JSON: a very unlikely token gets a large negative number. */
static json_t *lp_real(float v) { return json_real(isfinite(v) ? v : -9999.0); }

void ob_sse(ob_sbuf *out, const char *event, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (event) ob_sbuf_printf(out, "event: %s\n", event);
    ob_sbuf_puts(out, "data: ");
    ob_sbuf_puts(out, s ? s : "{}");
    ob_sbuf_puts(out, "\n\n");
    free(s);
    json_decref(j);
}

void ob_gen_new_id(char *out, size_t n, const char *prefix) {
    static atomic_ullong ctr;
    unsigned long long x = (unsigned long long)ob_time_us() * 6364136223846793005ULL + atomic_fetch_add(&ctr, 1) * 1442695040888963407ULL;
    x ^= x >> 29;
    snprintf(out, n, "%s%016llx", prefix, x);
}

/* ---- parsing ------------------------------------------------------------------------ */
void ob_gen_req_free(ob_gen_req *q) {
    free(q->model);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->bias);
    json_decref(q->tools);
    free(q->tool_name);
    json_decref(q->schema);
    json_decref(q->tmpl_kwargs);
    free(q->prompt);
    free(q->prompt_text);
    ob_constraint_free(q->cons);
    memset(q, 0, sizeof *q);
}

static int parse_stop(json_t *v, ob_gen_req *q, const char *key, char *err, size_t errlen) {
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        q->stop = calloc(1, sizeof *q->stop);
        q->stop[0] = strdup(json_string_value(v));
        q->n_stop = 1;
    } else if (json_is_array(v)) {
        if (json_array_size(v) > 16) return ERR("'%s' may hold at most 16 strings", key);
        q->stop = calloc(json_array_size(v) + 1, sizeof *q->stop);
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
            if (!json_is_string(s)) return ERR("'%s[%zu]' must be a string", key, i);
            q->stop[q->n_stop++] = strdup(json_string_value(s));
        }
    } else {
        return ERR("'%s' must be a string or an array of strings", key);
    }
    for (int i = 0; i < q->n_stop; i++)
        if (!q->stop[i][0]) return ERR("'%s' must not contain an empty string", key);
    return 0;
}

int ob_gen_parse_common(ob_server *S, json_t *b, ob_gen_req *q, char *err, size_t errlen) {
    q->sp = S->cfg.sp; /* llama-server's defaults, or the server's sampling flags */
    q->sp.seed = S->cfg.seed >= 0 ? (uint64_t)S->cfg.seed : (uint64_t)ob_time_us() ^ 0x9E3779B97F4A7C15ULL;
    q->n = 1;
    json_t *model = json_object_get(b, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return ERR("'model' must be a string");
    q->model = strdup(json_is_string(model) ? json_string_value(model) : S->model_id);
    if (ob_json_bool(b, "stream", &q->stream, err, errlen)) return -1;
    if (ob_json_bool(b, "ignore_eos", &q->ignore_eos, err, errlen)) return -1; /* llama-server's extension */
    json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return ERR("'stream_options' must be an object");
        if (ob_json_bool(so, "include_usage", &q->include_usage, err, errlen)) return ERR("'stream_options.include_usage' must be a boolean");
    }
    long long v = S->cfg.n_predict;
    const char *max_keys[] = {"max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict"};
    for (size_t k = 0; k < 4; k++) {
        long long m = -2;
        if (json_int(b, max_keys[k], -1, 1LL << 30, &m, err, errlen)) return -1;
        if (m != -2) v = m;
    }
    if (v == 0) return ERR("'max_tokens' must be at least 1");
    q->max_tokens = (int32_t)v;
    long long mt = 0;
    if (json_int(b, "min_tokens", 0, 1LL << 30, &mt, err, errlen)) return -1;
    q->min_tokens = (int32_t)mt;
    double d;
    d = q->sp.temp; if (ob_json_num(b, "temperature", 0, 100, &d, err, errlen)) return -1; q->sp.temp = (float)d;
    d = q->sp.top_p; if (ob_json_num(b, "top_p", 0, 1, &d, err, errlen)) return -1; q->sp.top_p = (float)d;
    d = q->sp.min_p; if (ob_json_num(b, "min_p", 0, 1, &d, err, errlen)) return -1; q->sp.min_p = (float)d;
    d = 0; if (ob_json_num(b, "presence_penalty", -2, 2, &d, err, errlen)) return -1; q->sp.presence_penalty = (float)d;
    d = 0; if (ob_json_num(b, "frequency_penalty", -2, 2, &d, err, errlen)) return -1; q->sp.frequency_penalty = (float)d;
    d = q->sp.repeat_penalty; if (ob_json_num(b, "repeat_penalty", 0.01, 10, &d, err, errlen)) return -1; q->sp.repeat_penalty = (float)d;
    long long k = q->sp.top_k;
    if (json_int(b, "top_k", 0, 1 << 30, &k, err, errlen)) return -1;
    q->sp.top_k = (int32_t)k;
    long long seed = -1;
    if (json_int(b, "seed", -1, INT64_MAX, &seed, err, errlen)) return -1;
    if (seed >= 0) q->sp.seed = (uint64_t)seed;
    long long n = 1;
    if (json_int(b, "n", 1, 16, &n, err, errlen)) return -1;
    q->n = (int)n;
    if (parse_stop(json_object_get(b, "stop"), q, "stop", err, errlen)) return -1;
    json_t *lb = json_object_get(b, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) return ERR("'logit_bias' must be an object of token id -> bias");
        q->bias = calloc(json_object_size(lb) + 1, sizeof *q->bias);
        const char *key;
        json_t *val;
        int32_t n_vocab = ob_tokenizer_n_vocab(S->tok);
        json_object_foreach(lb, key, val) {
            char *end;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= n_vocab) return ERR("'logit_bias' key '%s' is not a token id of this model (0..%d)", key, n_vocab - 1);
            double bias;
            if (json_is_false(val)) bias = -INFINITY; /* llama.cpp: false bans the token */
            else if (!json_is_number(val)) return ERR("'logit_bias[%s]' must be a number", key);
            else bias = json_number_value(val);
            if (bias < -100 || bias > 100) return ERR("'logit_bias[%s]' must be between -100 and 100", key);
            q->bias[q->n_bias].token = (int32_t)id;
            q->bias[q->n_bias].bias = bias <= -100 ? -INFINITY : (float)bias;
            q->n_bias++;
        }
    }
    return 0;
}

static int tool_valid(json_t *t, size_t i, int flat, char *err, size_t errlen) {
    if (!json_is_object(t)) return ERR("'tools[%zu]' must be an object", i);
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function")) return ERR("'tools[%zu].type' must be \"function\"", i);
    json_t *f = flat ? t : json_object_get(t, "function");
    if (!json_is_object(f)) return ERR("'tools[%zu].function' must be an object", i);
    if (!json_is_string(json_object_get(f, "name"))) return ERR("'tools[%zu]%s.name' must be a string", i, flat ? "" : ".function");
    json_t *p = json_object_get(f, "parameters");
    if (p && !json_is_null(p) && !json_is_object(p)) return ERR("'tools[%zu]%s.parameters' must be an object", i, flat ? "" : ".function");
    return 0;
}

int ob_gen_parse_tools(json_t *b, ob_gen_req *q, int flat, char *err, size_t errlen) {
    json_t *tools = json_object_get(b, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return ERR("'tools' must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) if (tool_valid(t, i, flat, err, errlen)) return -1;
        /* Kept in chat-completions shape: {type, function:{...}}. */
        q->tools = json_array();
        json_array_foreach(tools, i, t) {
            if (!flat) { json_array_append(q->tools, t); continue; }
            json_t *f = json_deep_copy(t);
            json_object_del(f, "type");
            json_object_del(f, "strict");
            json_array_append_new(q->tools, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        if (!json_array_size(q->tools)) { json_decref(q->tools); q->tools = NULL; }
    }
    json_t *tc = json_object_get(b, "tool_choice");
    q->tool_choice = OB_TC_AUTO;
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "none")) q->tool_choice = OB_TC_NONE;
            else if (!strcmp(s, "auto")) q->tool_choice = OB_TC_AUTO;
            else if (!strcmp(s, "required") || !strcmp(s, "any")) q->tool_choice = OB_TC_REQUIRED;
            else return ERR("'tool_choice' must be none, auto, required or a function");
        } else if (json_is_object(tc)) {
            json_t *f = json_object_get(tc, "function");
            json_t *name = json_object_get(json_is_object(f) ? f : tc, "name");
            if (!json_is_string(name)) return ERR("'tool_choice.function.name' must be a string");
            q->tool_choice = OB_TC_NAMED;
            q->tool_name = strdup(json_string_value(name));
            int found = 0;
            size_t i;
            json_t *t;
            json_array_foreach(q->tools, i, t)
                found |= !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), q->tool_name);
            if (!found) return ERR("'tool_choice' names function '%s', which is not in 'tools'", q->tool_name);
        } else {
            return ERR("'tool_choice' must be a string or an object");
        }
        if (q->tool_choice >= OB_TC_REQUIRED && !q->tools) return ERR("'tool_choice' requires 'tools'");
    }
    json_t *kw = json_object_get(b, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return ERR("'chat_template_kwargs' must be an object");
        q->tmpl_kwargs = json_incref(kw);
    }
    json_t *rf = json_object_get(b, "response_format");
    if (!rf) {
        json_t *text = json_object_get(b, "text"); /* Responses API: text.format */
        if (json_is_object(text)) rf = json_object_get(text, "format");
    }
    if (rf && !json_is_null(rf)) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !type) return ERR("'response_format.type' must be a string");
        if (!strcmp(type, "text")) q->rf = OB_RF_TEXT;
        else if (!strcmp(type, "json_object")) q->rf = OB_RF_JSON_OBJECT;
        else if (!strcmp(type, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *schema = json_object_get(json_is_object(js) ? js : rf, "schema");
            if (!json_is_object(schema)) return ERR("'response_format.json_schema.schema' must be an object");
            q->rf = OB_RF_JSON_SCHEMA;
            q->schema = json_incref(schema);
        } else {
            return ERR("'response_format.type' must be text, json_object or json_schema");
        }
    }
    return 0;
}

/* Tokenizes a prompt; add_special: the vocabulary's BOS unless the text already starts with it. */
static int tokenize(ob_server *S, const char *text, size_t len, int add_special, int32_t **ids, int32_t *n) {
    int32_t bos = ob_tokenizer_bos(S->tok);
    if (add_special && bos >= 0) {
        char bt[64];
        int bl = ob_tokenizer_token_bytes(S->tok, bos, bt, sizeof bt);
        if (bl > 0 && bl < (int)sizeof bt && len >= (size_t)bl && !memcmp(text, bt, (size_t)bl)) add_special = 0;
    }
    int cap = (int)len + 16;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return -1;
    int got = ob_tokenizer_encode(S->tok, text, len, add_special, 1, *ids, cap);
    if (got > cap) {
        free(*ids);
        cap = got;
        *ids = malloc((size_t)cap * sizeof **ids);
        if (!*ids) return -1;
        got = ob_tokenizer_encode(S->tok, text, len, add_special, 1, *ids, cap);
    }
    if (got < 0) { free(*ids); *ids = NULL; return -1; }
    *n = got;
    return 0;
}

int ob_gen_chat_prompt(ob_server *S, json_t *messages, ob_gen_req *q, int *status, char *err, size_t errlen) {
    ob_sbuf text = {0};
    json_t *tools = q->tool_choice == OB_TC_NONE ? NULL : q->tools;
    if (ob_srv_chat_render(S, messages, tools, 1, q->tmpl_kwargs, &text, status, err, errlen)) { ob_sbuf_free(&text); return -1; }
    const char *t = text.p ? text.p : "";
    size_t l = text.len;
    while (l && (t[l - 1] == '\n' || t[l - 1] == ' ')) l--;
    q->in_think = l >= 7 && !memcmp(t + l - 7, "<think>", 7);
    q->prompt_text = text.p ? text.p : strdup("");
    *status = 500;
    if (tokenize(S, q->prompt_text, text.len, 1, &q->prompt, &q->n_prompt)) return ERR("could not tokenize the prompt");
    return 0;
}

/* ---- usage and timings ----------------------------------------------------------------- */
json_t *ob_gen_timings(ob_gen *g) {
    ob_req_timings *t0 = &g->ch[0].tm;
    int32_t pred = 0;
    double pred_ms = 0;
    for (int i = 0; i < g->n; i++) {
        pred += g->ch[i].tm.predicted_n;
        if (g->ch[i].tm.predicted_ms > pred_ms) pred_ms = g->ch[i].tm.predicted_ms;
    }
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                     "cache_n", t0->cache_n, "prompt_n", t0->prompt_n, "prompt_ms", t0->prompt_ms,
                     "prompt_per_token_ms", t0->prompt_n ? t0->prompt_ms / t0->prompt_n : 0.0,
                     "prompt_per_second", t0->prompt_ms > 0 ? 1e3 * t0->prompt_n / t0->prompt_ms : 0.0,
                     "predicted_n", pred, "predicted_ms", pred_ms,
                     "predicted_per_token_ms", pred ? pred_ms / pred : 0.0,
                     "predicted_per_second", pred_ms > 0 ? 1e3 * pred / pred_ms : 0.0);
}

json_t *ob_gen_usage(ob_gen *g) {
    /* Every sampled token counts, the end-of-generation one included, as llama-server counts
     * them: usage and timings.predicted_n agree. */
    int completion = 0;
    for (int i = 0; i < g->n; i++) completion += g->ch[i].tm.predicted_n;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", g->q.n_prompt, "completion_tokens", completion,
                     "total_tokens", g->q.n_prompt + completion, "prompt_tokens_details", "cached_tokens", g->ch[0].tm.cache_n);
}

const char *ob_gen_finish_reason(const ob_choice *c) {
    if (json_array_size(c->tool_calls)) return "tool_calls";
    switch (c->finish) {
    case OB_FINISH_LENGTH:
    case OB_FINISH_CONTEXT: return "length";
    case OB_FINISH_ERROR: return "error";
    default: return "stop";
    }
}

/* ---- events ----------------------------------------------------------------------------- */
static void on_out(void *user, const ob_out_ev *ev) {
    ob_choice *c = user;
    if (ev->kind == OB_OUT_CONTENT) {
        ob_sbuf_put(&c->content, ev->text, ev->len);
        ob_sbuf_put(&c->d_content, ev->text, ev->len);
    } else if (ev->kind == OB_OUT_REASONING) {
        ob_sbuf_put(&c->reasoning, ev->text, ev->len);
        ob_sbuf_put(&c->d_reasoning, ev->text, ev->len);
    } else {
        char id[40];
        ob_gen_new_id(id, sizeof id, "call_");
        if (c->short_ids) memmove(id, id + 5 + 7, 10); /* Mistral's templates want 9 alphanumerics */
        json_t *call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                                 ev->name ? ev->name : "", "arguments", ev->args ? ev->args : "{}");
        if (!call) return; /* a name that is not UTF-8 */
        json_array_append(c->tool_calls, call);
        json_array_append_new(c->d_tools, call);
    }
}

static void feed_text(ob_choice *c, const char *s, size_t n) {
    if (!n) return;
    if (c->parse) ob_outp_feed(&c->op, s, n, on_out, c);
    else {
        ob_out_ev ev = {OB_OUT_CONTENT, s, n, NULL, NULL};
        on_out(c, &ev);
    }
}

static json_t *token_entry(ob_server *S, int32_t tok, float lp) {
    ob_sbuf raw = {0}, txt = {0};
    ob_token_raw(S->tok, tok, &raw);
    ob_utf8_sanitize(raw.p ? raw.p : "", raw.len, 1, &txt);
    json_t *bytes = json_array();
    for (size_t i = 0; i < raw.len; i++) json_array_append_new(bytes, json_integer((unsigned char)raw.p[i]));
    json_t *e = json_pack("{s:s%, s:o, s:o}", "token", txt.p ? txt.p : "", txt.len, "logprob", lp_real(lp), "bytes", bytes);
    ob_sbuf_free(&raw);
    ob_sbuf_free(&txt);
    return e;
}

static void on_event(ob_gen *g, ob_choice *c, const ob_token_event *ev) {
    ob_server *S = g->S;
    int eog = ev->token >= 0 && ev->finish == OB_FINISH_STOP && ob_tokenizer_is_eog(S->tok, ev->token);
    if (ev->token >= 0 && !c->stop_hit && !eog) {
        c->n_tok++;
        if (g->q.logprobs) {
            json_t *e = token_entry(S, ev->token, ev->logprob);
            json_t *top = json_array();
            for (int k = 0; k < ev->n_probs && k < g->q.top_logprobs; k++)
                if (ev->top_tokens[k] >= 0) json_array_append_new(top, token_entry(S, ev->top_tokens[k], ev->top_logprobs[k]));
            json_object_set_new(e, "top_logprobs", top);
            json_array_append(c->lp, e);
            json_array_append_new(c->d_lp, e);
        }
        ob_sbuf tb = {0}, rel = {0};
        ob_token_raw(S->tok, ev->token, &tb);
        if (tb.len && ob_textacc_feed(&c->acc, tb.p, tb.len, &rel)) {
            c->stop_hit = 1;
            ob_req_cancel(c->req);
        }
        feed_text(c, rel.p, rel.len);
        ob_sbuf_free(&rel);
        ob_sbuf_free(&tb);
    }
    if (ev->finish != OB_FINISH_NONE) {
        c->done = 1;
        c->finish = ev->finish;
        ob_sbuf rel = {0};
        ob_textacc_flush(&c->acc, &rel);
        feed_text(c, rel.p, rel.len);
        ob_sbuf_free(&rel);
        if (c->parse) ob_outp_end(&c->op, on_out, c);
        /* a deadline's cancel reads as a length limit (the client asked for nothing less) */
        if (ev->finish == OB_FINISH_CANCELLED && g->timed_out && !c->stop_hit) c->finish = OB_FINISH_LENGTH;
        ob_req_get_timings(c->req, &c->tm);
        if (ev->finish == OB_FINISH_ERROR) snprintf(c->err, sizeof c->err, "%s", ob_req_error(c->req));
    }
}

/* Reads what is ready from every choice, or waits up to wait_ms for one. Returns 1 when
 * something arrived, 0 on timeout, -1 when every choice is done. */
static int pump(ob_gen *g, int wait_ms) {
    int got = 0, first = -1;
    ob_token_event ev;
    for (int i = 0; i < g->n; i++) {
        ob_choice *c = &g->ch[i];
        while (!c->done) {
            int rc = ob_req_next(c->req, &ev, 0);
            if (rc == 1) { on_event(g, c, &ev); got = 1; continue; }
            if (rc < 0) { c->done = 1; ob_req_get_timings(c->req, &c->tm); }
            break;
        }
        if (!c->done && first < 0) first = i;
    }
    if (got) return 1;
    if (first < 0) return -1;
    int rc = ob_req_next(g->ch[first].req, &ev, wait_ms);
    if (rc == 1) { on_event(g, &g->ch[first], &ev); return 1; }
    return 0;
}

static int all_done(const ob_gen *g) {
    for (int i = 0; i < g->n; i++) if (!g->ch[i].done) return 0;
    return 1;
}

static void cancel_all(ob_gen *g) {
    for (int i = 0; i < g->n; i++) if (g->ch[i].req) ob_req_cancel(g->ch[i].req);
}

/* --request-timeout: past it, every choice is cancelled (once) and ends within a step. */
static void check_deadline(ob_gen *g) {
    int lim = g->S->cfg.request_timeout_s;
    if (g->timed_out || lim <= 0 || ob_time_us() - g->t0_us < (int64_t)lim * 1000000) return;
    g->timed_out = 1;
    cancel_all(g);
}

static int should_abort(ob_gen *g) {
    return atomic_load(&g->S->stopping) || (g->http && ob_http_client_gone(g->http));
}

static void count_metrics(ob_gen *g) {
    if (g->metrics_done) return;
    g->metrics_done = 1;
    ob_server *S = g->S;
    for (int i = 0; i < g->n; i++) {
        atomic_fetch_add(&S->n_predicted_tokens, g->ch[i].n_tok);
        atomic_fetch_add(&S->predicted_us, (long long)(g->ch[i].tm.predicted_ms * 1e3));
    }
    atomic_fetch_add(&S->n_prompt_tokens, g->ch[0].tm.prompt_n);
    atomic_fetch_add(&S->prompt_us, (long long)(g->ch[0].tm.prompt_ms * 1e3));
    atomic_fetch_sub(&S->n_processing, 1);
}

static void gen_free(ob_gen *g) {
    if (!g) return;
    count_metrics(g);
    for (int i = 0; i < g->n; i++) {
        ob_choice *c = &g->ch[i];
        if (c->cstate && c->req && !c->done) {
            /* The scheduler calls the grammar state until the request ends (within a step of
             * the cancel): wait for that before freeing the state; if it never comes, leak it. */
            ob_req_cancel(c->req);
            ob_token_event ev;
            for (int k = 0; k < 100 && !c->done; k++) {
                int rc = ob_req_next(c->req, &ev, 100);
                if (rc < 0 || (rc == 1 && ev.finish != OB_FINISH_NONE)) c->done = 1;
            }
            if (!c->done) c->cstate = NULL;
        }
        ob_req_free(c->req); /* cancels a request still running (client gone) */
        ob_constraint_state_free(c->cstate);
        ob_textacc_free(&c->acc);
        ob_outp_free(&c->op);
        ob_sbuf_free(&c->content);
        ob_sbuf_free(&c->reasoning);
        ob_sbuf_free(&c->d_content);
        ob_sbuf_free(&c->d_reasoning);
        json_decref(c->tool_calls);
        json_decref(c->lp);
        json_decref(c->d_tools);
        json_decref(c->d_lp);
    }
    free(g->ch);
    if (g->api_free) g->api_free(g->api);
    ob_gen_req_free(&g->q);
    free(g);
}

static void clear_deltas(ob_choice *c) {
    c->d_content.len = 0;
    c->d_reasoning.len = 0;
    json_array_clear(c->d_tools);
    json_array_clear(c->d_lp);
}

/* ---- streaming ----------------------------------------------------------------------- */
static int stream_next(void *user, ob_sbuf *out) {
    ob_gen *g = user;
    if (!g->started) {
        g->started = 1;
        if (g->fmt->start) g->fmt->start(g, out);
        if (out->len) return 1;
    }
    for (;;) {
        if (should_abort(g)) { cancel_all(g); return -1; }
        check_deadline(g);
        int rc = pump(g, 50);
        if (rc == 0) continue;
        for (int i = 0; i < g->n; i++) {
            ob_choice *c = &g->ch[i];
            if (c->d_content.len || c->d_reasoning.len || json_array_size(c->d_tools) || json_array_size(c->d_lp))
                g->fmt->delta(g, i, out);
            clear_deltas(c);
        }
        int done = all_done(g);
        for (int i = 0; i < g->n; i++) {
            ob_choice *c = &g->ch[i];
            if (!c->done || c->finish_sent) continue;
            int last = 1;
            for (int k = 0; k < g->n; k++) if (k != i && !g->ch[k].finish_sent) last = 0;
            if (!last || done) {
                c->finish_sent = 1;
                g->fmt->done(g, i, last, out);
            }
        }
        if (done) {
            count_metrics(g);
            g->fmt->end(g, out);
            return 0;
        }
        if (out->len) return 1;
    }
}

static void stream_free(void *user) { gen_free(user); }

/* ---- running ------------------------------------------------------------------------- */
json_t *ob_gen_body(ob_server *S, ob_http_req *r) {
    atomic_fetch_add(&S->n_requests, 1);
    int st = atomic_load(&S->state);
    if (st != OB_SERVER_READY) {
        ob_http_error(r, 503, "unavailable_error", st == OB_SERVER_LOADING ? "Loading model" : "the model failed to load");
        return NULL;
    }
    json_error_t je;
    json_t *b = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!b) {
        ob_http_error(r, 400, "invalid_request_error", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(b)) {
        json_decref(b);
        ob_http_error(r, 400, "invalid_request_error", "the body must be a JSON object");
        return NULL;
    }
    return b;
}

int ob_gen_constrain(ob_server *S, ob_gen_req *q, int *status, char *err, size_t errlen) {
    if (q->rf == OB_RF_TEXT && q->tool_choice < OB_TC_REQUIRED) return 0;
    ob_constraint_kind k = q->tool_choice >= OB_TC_REQUIRED ? OB_CONSTRAINT_TOOL_CALL
                           : q->rf == OB_RF_JSON_SCHEMA   ? OB_CONSTRAINT_JSON_SCHEMA : OB_CONSTRAINT_JSON_OBJECT;
    q->cons = ob_constraint_new(S, k, k == OB_CONSTRAINT_TOOL_CALL ? q->tools : q->schema, q->tool_name, err, errlen);
    if (q->cons) return 0;
    *status = ob_constraint_available() ? 400 : 501;
    return -1;
}

void ob_gen_run(ob_server *S, ob_http_req *r, ob_gen_req *q, const ob_gen_fmt *fmt, void *api, void (*api_free)(void *)) {
    char err[512];
    ob_gen *g = calloc(1, sizeof *g);
    g->S = S;
    g->q = *q;
    memset(q, 0, sizeof *q);
    g->fmt = fmt;
    g->api = api;
    g->api_free = api_free;
    g->http = r;
    g->n = g->q.n;
    g->created = (long)time(NULL);
    g->t0_us = ob_time_us();
    ob_gen_new_id(g->id, sizeof g->id, fmt->id_prefix);
    g->ch = calloc((size_t)g->n, sizeof *g->ch);
    atomic_fetch_add(&S->n_processing, 1);
    int status = 400;
    const char *etype = "invalid_request_error";
    /* Constraints (grammar) before anything is submitted. */
    if (ob_gen_constrain(S, &g->q, &status, err, sizeof err)) {
        if (status == 501) etype = "not_implemented_error";
        goto fail;
    }
    for (int i = 0; i < g->n; i++) {
        ob_choice *c = &g->ch[i];
        c->parse = fmt->parse;
        c->short_ids = S->tool_format == OB_TOOLS_MISTRAL;
        c->acc.stop = g->q.stop;
        c->acc.n_stop = g->q.n_stop;
        int parse_tools = g->q.tools && g->q.tool_choice != OB_TC_NONE;
        ob_outp_init(&c->op, S->tool_format, parse_tools, g->q.in_think);
        c->tool_calls = json_array();
        c->lp = json_array();
        c->d_tools = json_array();
        c->d_lp = json_array();
        ob_req_params p = {0};
        p.prompt = g->q.prompt;
        p.n_prompt = g->q.n_prompt;
        p.max_tokens = g->q.max_tokens;
        p.ignore_eos = g->q.ignore_eos;
        p.min_tokens = g->q.min_tokens;
        p.sampling = g->q.sp;
        p.sampling.seed = g->q.sp.seed + (uint64_t)i;
        p.n_probs = g->q.logprobs ? g->q.top_logprobs : 0;
        p.logprobs = g->q.logprobs;
        p.logit_bias = g->q.bias;
        p.n_logit_bias = g->q.n_bias;
        if (g->q.cons && !(c->cstate = ob_constraint_bind(g->q.cons, &p, err, sizeof err))) { status = 500; etype = "server_error"; goto fail; }
        c->req = ob_sched_submit(S->sched, &p, err, sizeof err);
        if (!c->req) {
            if (strstr(err, "queue is full") || strstr(err, "shutting down")) { status = 503; etype = "unavailable_error"; }
            goto fail;
        }
    }
    if (g->q.stream) {
        r->stream = stream_next;
        r->stream_user = g;
        r->stream_free = stream_free;
        return;
    }
    for (;;) {
        if (should_abort(g)) { cancel_all(g); break; }
        check_deadline(g);
        if (pump(g, 50) < 0) break;
    }
    if (g->timed_out) {
        int any = 0;
        for (int i = 0; i < g->n; i++) any |= g->ch[i].tm.predicted_n > 0;
        if (!any) { /* it never reached a slot: overload, not a short answer */
            snprintf(err, sizeof err, "no slot became free within --request-timeout (%d s)", S->cfg.request_timeout_s);
            status = 503;
            etype = "unavailable_error";
            goto fail;
        }
    }
    for (int i = 0; i < g->n; i++)
        if (g->ch[i].finish == OB_FINISH_ERROR) {
            snprintf(err, sizeof err, "generation failed: %s", g->ch[i].err);
            status = 500;
            etype = "server_error";
            goto fail;
        }
    if (!all_done(g)) { /* shutdown (a gone client reads nothing) */
        snprintf(err, sizeof err, "the server is shutting down");
        status = 503;
        etype = "unavailable_error";
        goto fail;
    }
    {
        count_metrics(g);
        json_t *j = fmt->full(g);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
        ob_sbuf_puts(&r->out, s ? s : "{}");
        free(s);
        json_decref(j);
    }
    gen_free(g);
    return;
fail:
    atomic_fetch_add(&S->n_errors, 1);
    ob_http_error(r, status, etype, "%s", err);
    gen_free(g);
}

/* ---- chat completions ------------------------------------------------------------------ */
static json_t *chat_chunk(ob_gen *g, int i, json_t *delta, const char *finish) {
    json_t *choice = json_pack("{s:i, s:o, s:n, s:o}", "index", i, "delta", delta, "logprobs",
                               "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:i, s:s, s:s, s:[o]}", "id", g->id, "object", "chat.completion.chunk", "created",
                     (int)g->created, "model", g->q.model, "system_fingerprint", "1bit-" OB_VERSION_STRING, "choices", choice);
}

static void chat_start(ob_gen *g, ob_sbuf *out) {
    for (int i = 0; i < g->n; i++)
        ob_sse(out, NULL, chat_chunk(g, i, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL));
}

static json_t *tool_deltas(json_t *calls, size_t base) {
    json_t *a = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        json_t *d = json_deep_copy(c);
        json_object_set_new(d, "index", json_integer((json_int_t)(base + k)));
        json_array_append_new(a, d);
    }
    return a;
}

static void chat_delta(ob_gen *g, int i, ob_sbuf *out) {
    ob_choice *c = &g->ch[i];
    json_t *delta = json_object();
    if (c->d_reasoning.len) json_object_set_new(delta, "reasoning_content", json_stringn(c->d_reasoning.p, c->d_reasoning.len));
    if (c->d_content.len || (!c->d_reasoning.len && !json_array_size(c->d_tools)))
        json_object_set_new(delta, "content", json_stringn(c->d_content.p ? c->d_content.p : "", c->d_content.len));
    if (json_array_size(c->d_tools))
        json_object_set_new(delta, "tool_calls", tool_deltas(c->d_tools, json_array_size(c->tool_calls) - json_array_size(c->d_tools)));
    json_t *chunk = chat_chunk(g, i, delta, NULL);
    if (json_array_size(c->d_lp))
        json_object_set_new(json_array_get(json_object_get(chunk, "choices"), 0), "logprobs",
                            json_pack("{s:O}", "content", c->d_lp));
    ob_sse(out, NULL, chunk);
}

static void chat_done(ob_gen *g, int i, int last, ob_sbuf *out) {
    json_t *chunk = chat_chunk(g, i, json_object(), ob_gen_finish_reason(&g->ch[i]));
    if (last) {
        /* llama.cpp's habit, which Lemonade reads: the last chunk carries usage and timings. */
        json_object_set_new(chunk, "usage", ob_gen_usage(g));
        json_object_set_new(chunk, "timings", ob_gen_timings(g));
    }
    ob_sse(out, NULL, chunk);
}

/* The end of a stream: with stream_options.include_usage, a chunk of the endpoint's object with
 * no choices and the usage, then [DONE]. */
static void stream_end(ob_gen *g, ob_sbuf *out, const char *object) {
    if (g->q.include_usage) {
        json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s, s:[], s:o, s:o}", "id", g->id, "object", object,
                              "created", (int)g->created, "model", g->q.model, "system_fingerprint", "1bit-" OB_VERSION_STRING,
                              "choices", "usage", ob_gen_usage(g), "timings", ob_gen_timings(g));
        ob_sse(out, NULL, j);
    }
    ob_sbuf_puts(out, "data: [DONE]\n\n");
}

static void chat_end(ob_gen *g, ob_sbuf *out) { stream_end(g, out, "chat.completion.chunk"); }

static json_t *chat_full(ob_gen *g) {
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        ob_choice *c = &g->ch[i];
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        int tools = json_array_size(c->tool_calls) > 0;
        json_object_set_new(msg, "content", c->content.len || !tools ? json_stringn(c->content.p ? c->content.p : "", c->content.len) : json_null());
        if (c->reasoning.len) json_object_set_new(msg, "reasoning_content", json_stringn(c->reasoning.p, c->reasoning.len));
        if (tools) json_object_set(msg, "tool_calls", c->tool_calls);
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg, "logprobs",
                                                 g->q.logprobs ? json_pack("{s:O}", "content", c->lp) : json_null(),
                                                 "finish_reason", ob_gen_finish_reason(c)));
    }
    return json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:o, s:o}", "id", g->id, "object", "chat.completion", "created",
                     (int)g->created, "model", g->q.model, "system_fingerprint", "1bit-" OB_VERSION_STRING, "choices", choices,
                     "usage", ob_gen_usage(g), "timings", ob_gen_timings(g));
}

static const ob_gen_fmt chat_fmt = {"chatcmpl-", 1, chat_start, chat_delta, chat_done, chat_end, chat_full};

int ob_gen_parse_chat(ob_server *S, json_t *b, ob_gen_req *q, int *status, char *err, size_t errlen) {
    *status = 400;
    if (ob_gen_parse_common(S, b, q, err, errlen) || ob_gen_parse_tools(b, q, 0, err, errlen)) return -1;
    if (ob_json_bool(b, "logprobs", &q->logprobs, err, errlen)) return -1;
    long long tl = 0;
    if (json_int(b, "top_logprobs", 0, OB_MAX_PROBS, &tl, err, errlen)) return -1;
    q->top_logprobs = (int)tl;
    if (tl && !q->logprobs) return ERR("'top_logprobs' requires 'logprobs': true");
    json_t *messages = json_object_get(b, "messages");
    if (!messages) return ERR("'messages' is required");
    return ob_gen_chat_prompt(S, messages, q, status, err, errlen);
}

/* The reply to a request that failed before generation: counts it, fills r, frees q and b. */
void ob_gen_fail(ob_server *S, ob_http_req *r, ob_gen_req *q, json_t *b, int status, const char *err) {
    atomic_fetch_add(&S->n_errors, 1);
    ob_http_error(r, status, status == 400 ? "invalid_request_error" : "server_error", "%s", err);
    ob_gen_req_free(q);
    json_decref(b);
}

typedef int (*parse_fn)(ob_server *S, json_t *b, ob_gen_req *q, int *status, char *err, size_t errlen);

/* body -> request -> generation, for the APIs without format-private state */
static void handle(ob_server *S, ob_http_req *r, parse_fn parse, const ob_gen_fmt *fmt) {
    json_t *b = ob_gen_body(S, r);
    if (!b) return;
    char err[1024];
    ob_gen_req q = {0};
    int status;
    if (parse(S, b, &q, &status, err, sizeof err)) { ob_gen_fail(S, r, &q, b, status, err); return; }
    json_decref(b);
    ob_gen_run(S, r, &q, fmt, NULL, NULL);
}

void ob_h_chat(void *app, ob_http_req *r) { handle(app, r, ob_gen_parse_chat, &chat_fmt); }

/* ---- completions ---------------------------------------------------------------------- */
static json_t *cmpl_logprobs(ob_gen *g, json_t *entries) {
    if (!g->q.logprobs) return json_null();
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t k, off = 0;
    json_t *e;
    json_array_foreach(entries, k, e) {
        json_array_append(tokens, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *top = json_object();
        size_t j;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), j, t)
            json_object_set(top, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += strlen(json_string_value(json_object_get(e, "token")));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

static json_t *cmpl_obj(ob_gen *g, json_t *choices) {
    return json_pack("{s:s, s:s, s:i, s:s, s:s, s:o}", "id", g->id, "object", "text_completion", "created", (int)g->created,
                     "model", g->q.model, "system_fingerprint", "1bit-" OB_VERSION_STRING, "choices", choices);
}

static void cmpl_start(ob_gen *g, ob_sbuf *out) {
    if (!g->q.echo) return;
    for (int i = 0; i < g->n; i++)
        ob_sse(out, NULL, cmpl_obj(g, json_pack("[{s:i, s:s, s:n, s:n}]", "index", i, "text", g->q.prompt_text, "logprobs", "finish_reason")));
}

static void cmpl_delta(ob_gen *g, int i, ob_sbuf *out) {
    ob_choice *c = &g->ch[i];
    ob_sse(out, NULL, cmpl_obj(g, json_pack("[{s:i, s:s%, s:o, s:n}]", "index", i, "text", c->d_content.p ? c->d_content.p : "",
                                            c->d_content.len, "logprobs", cmpl_logprobs(g, c->d_lp), "finish_reason")));
}

static void cmpl_done(ob_gen *g, int i, int last, ob_sbuf *out) {
    json_t *j = cmpl_obj(g, json_pack("[{s:i, s:s, s:n, s:s}]", "index", i, "text", "", "logprobs", "finish_reason",
                                      ob_gen_finish_reason(&g->ch[i])));
    if (last) {
        json_object_set_new(j, "usage", ob_gen_usage(g));
        json_object_set_new(j, "timings", ob_gen_timings(g));
    }
    ob_sse(out, NULL, j);
}

static json_t *cmpl_full(ob_gen *g) {
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        ob_choice *c = &g->ch[i];
        ob_sbuf text = {0};
        if (g->q.echo) ob_sbuf_puts(&text, g->q.prompt_text);
        ob_sbuf_put(&text, c->content.p ? c->content.p : "", c->content.len);
        json_array_append_new(choices, json_pack("{s:i, s:s%, s:o, s:s}", "index", i, "text", text.p ? text.p : "", text.len,
                                                 "logprobs", cmpl_logprobs(g, c->lp), "finish_reason", ob_gen_finish_reason(c)));
        ob_sbuf_free(&text);
    }
    json_t *j = cmpl_obj(g, choices);
    json_object_set_new(j, "usage", ob_gen_usage(g));
    json_object_set_new(j, "timings", ob_gen_timings(g));
    return j;
}

static void cmpl_end(ob_gen *g, ob_sbuf *out) { stream_end(g, out, "text_completion"); }

static const ob_gen_fmt cmpl_fmt = {"cmpl-", 0, cmpl_start, cmpl_delta, cmpl_done, cmpl_end, cmpl_full};

int ob_gen_parse_completion(ob_server *S, json_t *b, ob_gen_req *q, int *status, char *err, size_t errlen) {
    *status = 400;
    if (ob_gen_parse_common(S, b, q, err, errlen)) return -1;
    if (ob_json_bool(b, "echo", &q->echo, err, errlen)) return -1;
    long long lp = -1;
    if (json_int(b, "logprobs", 0, OB_MAX_PROBS, &lp, err, errlen)) return -1;
    q->logprobs = lp >= 0;
    q->top_logprobs = lp > 0 ? (int)lp : 0;
    json_t *p = json_object_get(b, "prompt");
    if (json_is_string(p)) {
        q->prompt_text = strdup(json_string_value(p));
        if (tokenize(S, q->prompt_text, json_string_length(p), 1, &q->prompt, &q->n_prompt)) return ERR("could not tokenize 'prompt'");
    } else if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
        size_t i;
        json_t *t;
        q->n_prompt = (int32_t)json_array_size(p);
        q->prompt = malloc((size_t)q->n_prompt * sizeof *q->prompt);
        ob_sbuf text = {0};
        json_array_foreach(p, i, t) {
            if (!json_is_integer(t)) { ob_sbuf_free(&text); return ERR("'prompt[%zu]' must be a token id", i); }
            q->prompt[i] = (int32_t)json_integer_value(t);
            ob_token_raw(S->tok, q->prompt[i], &text); /* a bad id is the scheduler's 400 */
        }
        ob_sbuf clean = {0};
        ob_utf8_sanitize(text.p ? text.p : "", text.len, 1, &clean);
        ob_sbuf_free(&text);
        q->prompt_text = clean.p ? clean.p : strdup("");
    } else if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) {
        json_t *s = json_array_get(p, 0);
        q->prompt_text = strdup(json_string_value(s));
        if (tokenize(S, q->prompt_text, json_string_length(s), 1, &q->prompt, &q->n_prompt)) return ERR("could not tokenize 'prompt'");
    } else {
        return ERR("'prompt' must be a string, a one-string array or an array of token ids");
    }
    return 0;
}

void ob_h_completions(void *app, ob_http_req *r) { handle(app, r, ob_gen_parse_completion, &cmpl_fmt); }
