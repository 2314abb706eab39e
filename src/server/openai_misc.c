/* openai_misc.c — the endpoints that do not generate: /health, /v1/models, /tokenize,
 * /detokenize, /apply-template, /props, /slots, /metrics, /v1/embeddings; and the route table.
 *
 * Owns: their request checks and reply shapes (llama-server's, where it has one).
 * Does not own: generation (openai_gen.c), HTTP (http.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/gen.h"

const ob_http_route ob_server_routes[] = {
    {"GET", "/health", ob_h_health, 1},
    {"GET", "/v1/health", ob_h_health, 1},
    {"GET", "/v1/models", ob_h_models, 0},
    {"GET", "/models", ob_h_models, 0},
    {"POST", "/v1/chat/completions", ob_h_chat, 0},
    {"POST", "/chat/completions", ob_h_chat, 0},
    {"POST", "/v1/completions", ob_h_completions, 0},
    {"POST", "/completions", ob_h_completions, 0},
    {"POST", "/v1/responses", ob_h_responses, 0},
    {"POST", "/v1/messages", ob_h_messages, 0},
    {"POST", "/v1/embeddings", ob_h_embeddings, 0},
    {"POST", "/embeddings", ob_h_embeddings, 0},
    {"POST", "/tokenize", ob_h_tokenize, 0},
    {"POST", "/detokenize", ob_h_detokenize, 0},
    {"POST", "/apply-template", ob_h_apply_template, 0},
    {"GET", "/props", ob_h_props, 0},
    {"GET", "/slots", ob_h_slots, 0},
    {"GET", "/metrics", ob_h_metrics, 0},
    {"POST", "/v1/rerank", ob_h_rerank, 0},
    {"POST", "/rerank", ob_h_rerank, 0},
};
const int ob_server_n_routes = sizeof ob_server_routes / sizeof ob_server_routes[0];

static void reply_json(ob_http_req *r, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
    ob_sbuf_puts(&r->out, s ? s : "{}");
    free(s);
    json_decref(j);
}

void ob_h_health(void *app, ob_http_req *r) {
    ob_server *S = app;
    int st = atomic_load(&S->state);
    if (st == OB_SERVER_READY) { reply_json(r, json_pack("{s:s}", "status", "ok")); return; }
    ob_http_error(r, 503, "unavailable_error", st == OB_SERVER_LOADING ? "Loading model" : "the model failed to load");
}

void ob_h_models(void *app, ob_http_req *r) {
    ob_server *S = app;
    json_t *data = json_array();
    if (atomic_load(&S->state) == OB_SERVER_READY) {
        const ob_model_info *mi = ob_model_get_info(S->model);
        json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:i, s:i, s:i, s:I, s:I, s:s}}",
            "id", S->model_id, "object", "model", "created", (json_int_t)S->t_start_wall, "owned_by", "1bit",
            "meta", "arch", mi->arch, "n_vocab", mi->n_vocab, "n_ctx_train", mi->n_ctx_train, "n_embd", mi->n_embd,
            "n_params", (json_int_t)mi->n_params, "size", (json_int_t)mi->size_bytes, "type", mi->type_name));
    }
    reply_json(r, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* Ready check + JSON object body for the small POST endpoints. */
static json_t *body_of(ob_server *S, ob_http_req *r) { return ob_gen_body(S, r); }

void ob_h_tokenize(void *app, ob_http_req *r) {
    ob_server *S = app;
    json_t *b = body_of(S, r);
    if (!b) return;
    json_t *content = json_object_get(b, "content");
    int add_special = 0, with_pieces = 0, parse_special = 1;
    char err[256];
    if (!json_is_string(content)) { ob_http_error(r, 400, "invalid_request_error", "'content' must be a string"); goto out; }
    if (ob_json_bool(b, "add_special", &add_special, err, sizeof err) || ob_json_bool(b, "with_pieces", &with_pieces, err, sizeof err) ||
        ob_json_bool(b, "parse_special", &parse_special, err, sizeof err)) {
        ob_http_error(r, 400, "invalid_request_error", "%s", err);
        goto out;
    }
    size_t len = json_string_length(content);
    int cap = (int)len + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ob_tokenizer_encode(S->tok, json_string_value(content), len, add_special, parse_special, ids, cap);
    if (n < 0 || n > cap) { free(ids); ob_http_error(r, 500, "server_error", "could not tokenize 'content'"); goto out; }
    json_t *toks = json_array();
    for (int i = 0; i < n; i++) {
        if (!with_pieces) { json_array_append_new(toks, json_integer(ids[i])); continue; }
        ob_sbuf s = {0};
        ob_token_text(S->tok, ids[i], &s);
        json_array_append_new(toks, json_pack("{s:i, s:s%}", "id", ids[i], "piece", s.p ? s.p : "", s.len));
        ob_sbuf_free(&s);
    }
    free(ids);
    reply_json(r, json_pack("{s:o}", "tokens", toks));
out:
    json_decref(b);
}

void ob_h_detokenize(void *app, ob_http_req *r) {
    ob_server *S = app;
    json_t *b = body_of(S, r);
    if (!b) return;
    json_t *tokens = json_object_get(b, "tokens");
    if (!json_is_array(tokens)) { ob_http_error(r, 400, "invalid_request_error", "'tokens' must be an array of token ids"); goto out; }
    ob_sbuf raw = {0}, text = {0};
    size_t i;
    json_t *t;
    json_array_foreach(tokens, i, t) {
        int32_t id = json_is_integer(t) ? (int32_t)json_integer_value(t) : -1;
        if (!json_is_integer(t) || json_integer_value(t) != id || ob_token_raw(S->tok, id, &raw)) {
            ob_http_error(r, 400, "invalid_request_error", "'tokens[%zu]' is not a token id of this model", i);
            ob_sbuf_free(&raw);
            goto out;
        }
    }
    ob_utf8_sanitize(raw.p ? raw.p : "", raw.len, 1, &text);
    reply_json(r, json_pack("{s:s%}", "content", text.p ? text.p : "", text.len));
    ob_sbuf_free(&raw);
    ob_sbuf_free(&text);
out:
    json_decref(b);
}

void ob_h_apply_template(void *app, ob_http_req *r) {
    ob_server *S = app;
    json_t *b = body_of(S, r);
    if (!b) return;
    char err[1024];
    ob_gen_req q = {0};
    int status = 400;
    if (ob_gen_parse_tools(b, &q, 0, err, sizeof err)) goto fail;
    json_t *messages = json_object_get(b, "messages");
    if (!messages) { snprintf(err, sizeof err, "'messages' is required"); goto fail; }
    ob_sbuf text = {0};
    if (ob_srv_chat_render(S, messages, q.tool_choice == OB_TC_NONE ? NULL : q.tools, 1, q.tmpl_kwargs, &text, &status, err, sizeof err)) {
        ob_sbuf_free(&text);
        goto fail;
    }
    reply_json(r, json_pack("{s:s%}", "prompt", text.p ? text.p : "", text.len));
    ob_sbuf_free(&text);
    ob_gen_req_free(&q);
    json_decref(b);
    return;
fail:
    ob_http_error(r, status, status == 400 ? "invalid_request_error" : "server_error", "%s", err);
    ob_gen_req_free(&q);
    json_decref(b);
}

static json_t *token_text(ob_server *S, int32_t id) {
    if (id < 0) return json_string("");
    ob_sbuf s = {0};
    ob_token_text(S->tok, id, &s);
    json_t *j = json_stringn(s.p ? s.p : "", s.len);
    ob_sbuf_free(&s);
    return j;
}

void ob_h_props(void *app, ob_http_req *r) {
    ob_server *S = app;
    if (atomic_load(&S->state) != OB_SERVER_READY) { ob_h_health(app, r); return; }
    const ob_sampler_params sp = S->cfg.sp;
    json_t *j = json_pack("{s:{s:i, s:{s:f, s:i, s:f, s:f, s:i}}, s:i, s:s, s:s, s:s?, s:o, s:o, s:s, s:{s:b, s:b}, s:b, s:b}",
        "default_generation_settings", "n_ctx", ob_sched_n_ctx(S->sched), "params", "temperature", sp.temp, "top_k", sp.top_k,
        "top_p", sp.top_p, "min_p", sp.min_p, "n_predict", S->cfg.n_predict,
        "total_slots", ob_sched_n_slots(S->sched), "model_path", S->model_path, "model_alias", S->model_id,
        "chat_template", S->chat_template, "bos_token", token_text(S, ob_tokenizer_bos(S->tok)),
        "eos_token", token_text(S, ob_tokenizer_eos(S->tok)), "build_info", "1bit " OB_VERSION_STRING,
        "modalities", "vision", 0, "audio", 0, "embeddings", S->cfg.embeddings, "grammar", ob_constraint_available());
    reply_json(r, j);
}

void ob_h_slots(void *app, ob_http_req *r) {
    ob_server *S = app;
    if (atomic_load(&S->state) != OB_SERVER_READY) { ob_h_health(app, r); return; }
    json_t *a = json_array();
    for (int i = 0; i < ob_sched_n_slots(S->sched); i++) {
        int busy;
        int32_t n_cached;
        ob_sched_slot_info(S->sched, i, &busy, &n_cached);
        json_array_append_new(a, json_pack("{s:i, s:i, s:b, s:i}", "id", i, "n_ctx", ob_sched_n_ctx(S->sched),
                                           "is_processing", busy, "n_cached", n_cached));
    }
    reply_json(r, a);
}

void ob_h_metrics(void *app, ob_http_req *r) {
    ob_server *S = app;
    if (!S->cfg.metrics) {
        ob_http_error(r, 501, "not_supported_error", "metrics are off: start the server with --metrics");
        return;
    }
    int busy_n = 0, slots = S->sched ? ob_sched_n_slots(S->sched) : 0;
    for (int i = 0; i < slots; i++) {
        int busy;
        int32_t nc;
        ob_sched_slot_info(S->sched, i, &busy, &nc);
        busy_n += busy;
    }
    ob_sbuf *o = &r->out;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
#define METRIC(name, type, help, fmt, val) \
    ob_sbuf_printf(o, "# HELP onebit_" name " " help "\n# TYPE onebit_" name " " type "\nonebit_" name " " fmt "\n", val)
    METRIC("requests_total", "counter", "HTTP requests to the generation and token endpoints.", "%lld", (long long)atomic_load(&S->n_requests));
    METRIC("request_errors_total", "counter", "Requests answered with an error.", "%lld", (long long)atomic_load(&S->n_errors));
    METRIC("prompt_tokens_total", "counter", "Prompt tokens computed (not reused from the cache).", "%lld", (long long)atomic_load(&S->n_prompt_tokens));
    METRIC("prompt_seconds_total", "counter", "Time spent on prompts.", "%.6f", atomic_load(&S->prompt_us) / 1e6);
    METRIC("tokens_predicted_total", "counter", "Generated tokens.", "%lld", (long long)atomic_load(&S->n_predicted_tokens));
    METRIC("tokens_predicted_seconds_total", "counter", "Time spent generating (per request, summed).", "%.6f", atomic_load(&S->predicted_us) / 1e6);
    METRIC("requests_processing", "gauge", "Generation requests in flight (incl. queued).", "%lld", (long long)atomic_load(&S->n_processing));
    METRIC("slots_busy", "gauge", "Slots generating now.", "%d", busy_n);
    METRIC("slots_total", "gauge", "Slots (--parallel).", "%d", slots);
    METRIC("uptime_seconds", "gauge", "Seconds since start.", "%.1f", (ob_time_us() - S->t_start_us) / 1e6);
#undef METRIC
}

/* ---- embeddings ------------------------------------------------------------------------- */
/* Pools one input's hidden states into out[n_embd] (L2-normalised, as llama-server). */
static int embed_one(ob_server *S, const char *text, size_t len, float *out, int *n_tok, char *err, size_t errlen) {
    const ob_model_info *mi = ob_model_get_info(S->model);
    int d = mi->n_embd, cap = (int)len + 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ob_tokenizer_encode(S->tok, text, len, 1, 1, ids, cap);
    int32_t n_ctx = ob_ctx_n_ctx(S->embd_ctx);
    if (n <= 0 || n > cap) { free(ids); snprintf(err, errlen, "could not tokenize the input (or it is empty)"); return -1; }
    if (n > n_ctx) {
        free(ids);
        snprintf(err, errlen, "the input (%d tokens) exceeds the available context size (%d)", n, n_ctx);
        return -1;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.pooling_type", mi->arch);
    int pooling = (int)ob_model_meta_int(S->model, key, 1); /* llama.cpp: 1 mean, 2 cls, 3 last; none declared: mean */
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int8_t *want = malloc((size_t)n);
    for (int i = 0; i < n; i++) { pos[i] = i; want[i] = 1; }
    memset(out, 0, (size_t)d * sizeof *out);
    int rc = 0, n_batch = 512;
    ob_kv_seq_truncate(S->embd_ctx, 0, 0);
    for (int i0 = 0; i0 < n && !rc; i0 += n_batch) {
        int cnt = n - i0 < n_batch ? n - i0 : n_batch;
        ob_batch b = {cnt, ids + i0, pos + i0, NULL, want + i0};
        if (ob_decode(S->embd_ctx, &b, err, errlen)) { rc = -1; break; }
        for (int k = 0; k < cnt; k++) {
            int i = i0 + k;
            const float *h = ob_get_embeddings(S->embd_ctx, k);
            if (!h) { rc = -1; snprintf(err, errlen, "no embeddings from the engine"); break; }
            if (pooling == 2 && i == 0) memcpy(out, h, (size_t)d * sizeof *out);
            else if (pooling == 3 && i == n - 1) memcpy(out, h, (size_t)d * sizeof *out);
            else if (pooling != 2 && pooling != 3) for (int j = 0; j < d; j++) out[j] += h[j] / (float)n;
        }
    }
    double ss = 0;
    for (int j = 0; j < d; j++) ss += (double)out[j] * out[j];
    if (ss > 0) for (int j = 0; j < d; j++) out[j] = (float)(out[j] / sqrt(ss));
    *n_tok = n;
    free(ids);
    free(pos);
    free(want);
    return rc;
}

static json_t *base64_floats(const float *v, int n) {
    static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v; /* x86-64 and aarch64 are little-endian */
    size_t len = (size_t)n * 4;
    ob_sbuf o = {0};
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
        char q[4] = {tb[x >> 18 & 63], tb[x >> 12 & 63], i + 1 < len ? tb[x >> 6 & 63] : '=', i + 2 < len ? tb[x & 63] : '='};
        ob_sbuf_put(&o, q, 4);
    }
    json_t *j = json_stringn(o.p ? o.p : "", o.len);
    ob_sbuf_free(&o);
    return j;
}

void ob_h_embeddings(void *app, ob_http_req *r) {
    ob_server *S = app;
    if (!S->cfg.embeddings) {
        ob_http_error(r, 501, "not_supported_error", "embeddings are off: start the server with --embeddings");
        return;
    }
    json_t *b = body_of(S, r);
    if (!b) return;
    json_t *input = json_object_get(b, "input");
    if (!input) input = json_object_get(b, "content");
    json_t *list = json_is_string(input) ? json_pack("[O]", input) : json_incref(input);
    size_t i;
    json_t *s;
    int bad = !json_is_array(list) || !json_array_size(list);
    json_array_foreach(list, i, s) bad |= !json_is_string(s);
    if (bad) {
        ob_http_error(r, 400, "invalid_request_error", "'input' must be a string or a non-empty array of strings");
        json_decref(list);
        json_decref(b);
        return;
    }
    json_t *encj = json_object_get(b, "encoding_format");
    const char *enc = json_string_value(encj);
    int b64 = enc && !strcmp(enc, "base64");
    if ((encj && !json_is_null(encj) && !enc) || (enc && strcmp(enc, "float") && !b64)) {
        ob_http_error(r, 400, "invalid_request_error", "'encoding_format' must be \"float\" or \"base64\"");
        json_decref(list);
        json_decref(b);
        return;
    }
    int d = ob_model_get_info(S->model)->n_embd, total = 0;
    float *v = malloc((size_t)d * sizeof *v);
    json_t *data = json_array();
    char err[512];
    int failed = 0;
    pthread_mutex_lock(&S->embd_mu);
    json_array_foreach(list, i, s) {
        int nt = 0;
        if (embed_one(S, json_string_value(s), json_string_length(s), v, &nt, err, sizeof err)) { failed = 1; break; }
        total += nt;
        json_t *e;
        if (b64) { /* little-endian float32s, base64: what OpenAI's SDKs ask for by default */
            e = base64_floats(v, d);
        } else {
            e = json_array();
            for (int j = 0; j < d; j++) json_array_append_new(e, json_real(v[j]));
        }
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", (int)i, "embedding", e));
    }
    pthread_mutex_unlock(&S->embd_mu);
    if (failed) {
        ob_http_error(r, 400, "invalid_request_error", "input[%zu]: %s", i, err);
        json_decref(data);
    } else {
        json_t *model = json_object_get(b, "model");
        reply_json(r, json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", data, "model",
                                json_is_string(model) ? json_string_value(model) : S->model_id, "usage", "prompt_tokens", total,
                                "total_tokens", total));
    }
    free(v);
    json_decref(list);
    json_decref(b);
}

void ob_h_rerank(void *app, ob_http_req *r) {
    (void)app;
    ob_http_error(r, 501, "not_supported_error", "reranking needs a model with a ranking head, which this build does not run yet");
}
