/* openai_resp.c — POST /v1/responses (OpenAI Responses API) and POST /v1/messages
 * (Anthropic Messages API), on the shared generation core (gen.h).
 *
 * Owns: turning their inputs (items, content blocks, instructions / system, flat tools) into
 * chat messages, and their reply shapes: output items / content blocks, whole or streamed as
 * typed events (response.output_text.delta ..., content_block_delta ...). Both stream by
 * "blocks": reasoning, text and each tool call is one block, opened when its first delta
 * arrives and closed when another kind begins.
 * Does not own: sampling, stop strings, tool-call parsing (gen core, outparse.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/gen.h"

enum { API_RESP, API_MSG };
enum { B_NONE, B_REASONING, B_TEXT };

typedef struct {
    int api;
    int open;                    /* B_* of the block being streamed */
    int index;                   /* its output_index / content block index */
    char item_id[48];
    ob_sbuf text;                 /* its text so far */
    json_t *items;               /* finished output items / content blocks, in order */
} blocks;

/* ---- inputs -> chat messages --------------------------------------------------------- */
static int resp_messages(json_t *b, json_t *msgs, char *err, size_t errlen) {
    json_t *instr = json_object_get(b, "instructions");
    if (instr && !json_is_null(instr)) {
        if (!json_is_string(instr)) return snprintf(err, errlen, "'instructions' must be a string"), -1;
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", instr));
    }
    json_t *input = json_object_get(b, "input");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input)) return snprintf(err, errlen, "'input' must be a string or an array of items"), -1;
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        if (!json_is_object(it)) return snprintf(err, errlen, "'input[%zu]' must be an object", i), -1;
        const char *type = json_string_value(json_object_get(it, "type"));
        if (!type || !strcmp(type, "message")) {
            json_t *role = json_object_get(it, "role"), *content = json_object_get(it, "content");
            if (!json_is_string(role)) return snprintf(err, errlen, "'input[%zu].role' must be a string", i), -1;
            json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", role, "content", content ? content : json_null()));
        } else if (!strcmp(type, "function_call")) {
            json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(it, "call_id"), "type", "function",
                                     "function", "name", json_object_get(it, "name"), "arguments", json_object_get(it, "arguments"));
            if (!call) return snprintf(err, errlen, "'input[%zu]' function_call needs call_id, name and arguments", i), -1;
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            if (last && json_is_array(json_object_get(last, "tool_calls"))) json_array_append_new(json_object_get(last, "tool_calls"), call);
            else json_array_append_new(msgs, json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call));
        } else if (!strcmp(type, "function_call_output")) {
            json_t *out = json_object_get(it, "output");
            if (!json_is_string(out)) return snprintf(err, errlen, "'input[%zu].output' must be a string", i), -1;
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:O}", "role", "tool", "tool_call_id", json_object_get(it, "call_id"), "content", out));
        } else if (strcmp(type, "reasoning")) {
            return snprintf(err, errlen, "'input[%zu].type' '%s' is not supported", i, type), -1;
        }
    }
    return 0;
}

static int msg_messages(json_t *b, json_t *msgs, ob_gen_req *q, char *err, size_t errlen) {
    json_t *sys = json_object_get(b, "system");
    if (sys && !json_is_null(sys)) {
        if (!json_is_string(sys) && !json_is_array(sys)) return snprintf(err, errlen, "'system' must be a string or an array of text blocks"), -1;
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", sys));
    }
    json_t *in = json_object_get(b, "messages");
    if (!json_is_array(in)) return snprintf(err, errlen, "'messages' must be an array"), -1;
    size_t i, k;
    json_t *m, *blk;
    json_array_foreach(in, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) return snprintf(err, errlen, "'messages[%zu].role' must be a string", i), -1;
        if (json_is_string(content)) { json_array_append_new(msgs, json_pack("{s:O, s:O}", "role", role, "content", content)); continue; }
        if (!json_is_array(content)) return snprintf(err, errlen, "'messages[%zu].content' must be a string or an array of blocks", i), -1;
        json_t *text = json_array(), *calls = json_array();
        json_array_foreach(content, k, blk) {
            const char *type = json_string_value(json_object_get(blk, "type"));
            if (!type) { json_decref(text); json_decref(calls); return snprintf(err, errlen, "'messages[%zu].content[%zu].type' is missing", i, k), -1; }
            if (!strcmp(type, "text")) json_array_append(text, blk);
            else if (!strcmp(type, "tool_use")) {
                if (!json_is_string(json_object_get(blk, "name"))) {
                    json_decref(text);
                    json_decref(calls);
                    return snprintf(err, errlen, "'messages[%zu].content[%zu].name' must be a string", i, k), -1;
                }
                json_t *input = json_object_get(blk, "input");
                char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
                json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(blk, "id"), "type", "function",
                                                       "function", "name", json_object_get(blk, "name"), "arguments", args ? args : "{}"));
                free(args);
            } else if (!strcmp(type, "tool_result")) {
                json_t *c = json_object_get(blk, "content");
                if (!json_is_string(json_object_get(blk, "tool_use_id"))) {
                    json_decref(text);
                    json_decref(calls);
                    return snprintf(err, errlen, "'messages[%zu].content[%zu].tool_use_id' must be a string", i, k), -1;
                }
                json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", json_object_get(blk, "tool_use_id"),
                                                      "content", c ? json_incref(c) : json_string("")));
            } else if (strcmp(type, "thinking")) {
                json_decref(text);
                json_decref(calls);
                return snprintf(err, errlen, "'messages[%zu].content[%zu]': block type '%s' is not supported", i, k, type), -1;
            }
        }
        if (json_array_size(text) || json_array_size(calls)) {
            json_t *msg = json_pack("{s:O, s:O}", "role", role, "content", text);
            if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
            json_array_append_new(msgs, msg);
        }
        json_decref(text);
        json_decref(calls);
    }
    /* Anthropic tools: {name, description, input_schema}; tool_choice {type: auto|any|tool|none}. */
    json_t *tools = json_object_get(b, "tools");
    if (json_is_array(tools) && json_array_size(tools)) {
        q->tools = json_array();
        json_array_foreach(tools, i, m) {
            if (!json_is_string(json_object_get(m, "name"))) return snprintf(err, errlen, "'tools[%zu].name' must be a string", i), -1;
            json_t *schema = json_object_get(m, "input_schema");
            json_array_append_new(q->tools, json_pack("{s:s, s:{s:O, s:s?, s:o}}", "type", "function", "function", "name",
                                                      json_object_get(m, "name"), "description",
                                                      json_string_value(json_object_get(m, "description")), "parameters",
                                                      schema ? json_incref(schema) : json_object()));
        }
    }
    json_t *tc = json_object_get(b, "tool_choice");
    const char *tct = json_string_value(json_object_get(tc, "type"));
    if (tct && !strcmp(tct, "none")) q->tool_choice = OB_TC_NONE;
    else if (tct && !strcmp(tct, "any")) q->tool_choice = OB_TC_REQUIRED;
    else if (tct && !strcmp(tct, "tool")) {
        q->tool_choice = OB_TC_NAMED;
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) return snprintf(err, errlen, "'tool_choice.name' must be a string"), -1;
        q->tool_name = strdup(name);
    }
    if (q->tool_choice >= OB_TC_REQUIRED && !q->tools) return snprintf(err, errlen, "'tool_choice' requires 'tools'"), -1;
    return 0;
}

/* ---- blocks ------------------------------------------------------------------------- */
static blocks *B(ob_gen *g) { return g->api; }

static json_t *resp_usage(ob_gen *g) {
    json_t *u = ob_gen_usage(g);
    json_t *r = json_pack("{s:O, s:{s:i}, s:O, s:{s:i}, s:O}", "input_tokens", json_object_get(u, "prompt_tokens"),
                          "input_tokens_details", "cached_tokens", g->ch[0].tm.cache_n, "output_tokens",
                          json_object_get(u, "completion_tokens"), "output_tokens_details", "reasoning_tokens", 0,
                          "total_tokens", json_object_get(u, "total_tokens"));
    json_decref(u);
    return r;
}

static const char *msg_stop_reason(ob_gen *g) {
    ob_choice *c = &g->ch[0];
    if (json_array_size(c->tool_calls)) return "tool_use";
    if (c->stop_hit) return "stop_sequence";
    if (c->finish == OB_FINISH_LENGTH || c->finish == OB_FINISH_CONTEXT) return "max_tokens";
    return "end_turn";
}

static json_t *response_obj(ob_gen *g, const char *status, json_t *output) {
    ob_choice *c = &g->ch[0];
    int incomplete = c->finish == OB_FINISH_LENGTH || c->finish == OB_FINISH_CONTEXT;
    if (!strcmp(status, "completed") && incomplete) status = "incomplete";
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:b, s:n, s:{}, s:{s:{s:s}}}", "id", g->id, "object", "response",
                          "created_at", (int)g->created, "status", status, "model", g->q.model, "output", output,
                          "parallel_tool_calls", 1, "error", "metadata", "text", "format", "type", "text");
    json_object_set_new(r, "incomplete_details", !strcmp(status, "incomplete") ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(r, "max_output_tokens", g->q.max_tokens > 0 ? json_integer(g->q.max_tokens) : json_null());
    json_object_set_new(r, "temperature", json_real(g->q.sp.temp));
    json_object_set_new(r, "top_p", json_real(g->q.sp.top_p));
    json_object_set_new(r, "tool_choice", json_string(g->q.tool_choice == OB_TC_NONE ? "none" : g->q.tool_choice == OB_TC_AUTO ? "auto" : "required"));
    json_object_set_new(r, "tools", json_array());
    if (strcmp(status, "in_progress")) {
        json_object_set_new(r, "usage", resp_usage(g));
        json_object_set_new(r, "timings", ob_gen_timings(g));
    } else {
        json_object_set_new(r, "usage", json_null());
    }
    return r;
}

static json_t *msg_obj(ob_gen *g, json_t *content, int final) {
    ob_choice *c = &g->ch[0];
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o, s:{s:i, s:i, s:i}}", "id", g->id, "type", "message", "role", "assistant",
                          "model", g->q.model, "content", content, "usage", "input_tokens", g->q.n_prompt, "output_tokens",
                          final ? c->n_tok : 0, "cache_read_input_tokens", c->tm.cache_n);
    json_object_set_new(m, "stop_reason", final ? json_string(msg_stop_reason(g)) : json_null());
    json_object_set_new(m, "stop_sequence", json_null());
    if (final) json_object_set_new(m, "timings", ob_gen_timings(g));
    return m;
}

/* The finished item / block of a kind with its text. */
static json_t *text_item(ob_gen *g, int kind, const char *id, const char *text, size_t len) {
    if (B(g)->api == API_MSG)
        return kind == B_REASONING ? json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", text, len, "signature", "")
                                   : json_pack("{s:s, s:s%}", "type", "text", "text", text, len);
    if (kind == B_REASONING)
        return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s%}]}", "type", "reasoning", "id", id, "summary", "content", "type",
                         "reasoning_text", "text", text, len);
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[], s:[]}]}", "type", "message", "id", id, "status", "completed",
                     "role", "assistant", "content", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

static json_t *call_item(ob_gen *g, json_t *call) {
    json_t *f = json_object_get(call, "function");
    const char *args = json_string_value(json_object_get(f, "arguments"));
    if (B(g)->api == API_MSG) {
        json_t *input = json_loads(args ? args : "{}", JSON_DECODE_ANY, NULL);
        if (!json_is_object(input)) { json_decref(input); input = json_object(); }
        return json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id", json_object_get(call, "id"), "name",
                         json_object_get(f, "name"), "input", input);
    }
    char id[48];
    ob_gen_new_id(id, sizeof id, "fc_");
    return json_pack("{s:s, s:s, s:O, s:O, s:s, s:s}", "type", "function_call", "id", id, "call_id", json_object_get(call, "id"),
                     "name", json_object_get(f, "name"), "arguments", args ? args : "{}", "status", "completed");
}

static void ev(ob_gen *g, ob_sbuf *out, const char *type, json_t *j) {
    json_object_set_new(j, "type", json_string(type));
    if (B(g)->api == API_RESP) json_object_set_new(j, "sequence_number", json_integer(g->seq++));
    ob_sse(out, type, j);
}

static void block_close(ob_gen *g, ob_sbuf *out) {
    blocks *b = B(g);
    if (b->open == B_NONE) return;
    json_t *item = text_item(g, b->open, b->item_id, b->text.p ? b->text.p : "", b->text.len);
    if (b->api == API_MSG) {
        ev(g, out, "content_block_stop", json_pack("{s:i}", "index", b->index));
    } else if (b->open == B_TEXT) {
        json_t *part = json_object_get(json_array_get(json_object_get(item, "content"), 0), "text");
        ev(g, out, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", b->item_id, "output_index",
                                                          b->index, "content_index", 0, "text", part, "logprobs"));
        ev(g, out, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id", b->item_id, "output_index", b->index,
                                                           "content_index", 0, "part", json_array_get(json_object_get(item, "content"), 0)));
        ev(g, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", b->index, "item", item));
    } else {
        ev(g, out, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", b->item_id, "output_index", b->index,
                                                             "content_index", 0, "text", b->text.p ? b->text.p : "", b->text.len));
        ev(g, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", b->index, "item", item));
    }
    json_array_append_new(b->items, item);
    b->open = B_NONE;
    b->text.len = 0;
}

static void block_text(ob_gen *g, int kind, const char *s, size_t n, ob_sbuf *out) {
    blocks *b = B(g);
    if (!n) return;
    if (b->open != kind) {
        block_close(g, out);
        b->open = kind;
        b->index = (int)json_array_size(b->items);
        ob_gen_new_id(b->item_id, sizeof b->item_id, kind == B_TEXT ? "msg_" : "rs_");
        if (b->api == API_MSG) {
            ev(g, out, "content_block_start", json_pack("{s:i, s:o}", "index", b->index, "content_block",
                                                        kind == B_TEXT ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                                                       : json_pack("{s:s, s:s}", "type", "thinking", "thinking", "")));
        } else {
            json_t *item = kind == B_TEXT ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", b->item_id, "status",
                                                      "in_progress", "role", "assistant", "content")
                                          : json_pack("{s:s, s:s, s:[]}", "type", "reasoning", "id", b->item_id, "summary");
            ev(g, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", b->index, "item", item));
            if (kind == B_TEXT)
                ev(g, out, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", b->item_id,
                                                                    "output_index", b->index, "content_index", 0, "part", "type",
                                                                    "output_text", "text", "", "annotations"));
        }
    }
    ob_sbuf_put(&b->text, s, n);
    if (b->api == API_MSG)
        ev(g, out, "content_block_delta", json_pack("{s:i, s:{s:s, s:s%}}", "index", b->index, "delta", "type",
                                                    kind == B_TEXT ? "text_delta" : "thinking_delta",
                                                    kind == B_TEXT ? "text" : "thinking", s, n));
    else
        ev(g, out, kind == B_TEXT ? "response.output_text.delta" : "response.reasoning_text.delta",
           json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", b->item_id, "output_index", b->index, "content_index", 0, "delta", s, n,
                     "logprobs"));
}

static void block_call(ob_gen *g, json_t *call, ob_sbuf *out) {
    blocks *b = B(g);
    block_close(g, out);
    json_t *item = call_item(g, call);
    int idx = (int)json_array_size(b->items);
    if (b->api == API_MSG) {
        ev(g, out, "content_block_start", json_pack("{s:i, s:{s:s, s:O, s:O, s:{}}}", "index", idx, "content_block", "type", "tool_use",
                                                    "id", json_object_get(item, "id"), "name", json_object_get(item, "name"), "input"));
        char *args = json_dumps(json_object_get(item, "input"), JSON_COMPACT);
        ev(g, out, "content_block_delta", json_pack("{s:i, s:{s:s, s:s}}", "index", idx, "delta", "type", "input_json_delta",
                                                    "partial_json", args ? args : "{}"));
        free(args);
        ev(g, out, "content_block_stop", json_pack("{s:i}", "index", idx));
    } else {
        json_t *open = json_deep_copy(item);
        json_object_set_new(open, "arguments", json_string(""));
        json_object_set_new(open, "status", json_string("in_progress"));
        ev(g, out, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", idx, "item", open));
        ev(g, out, "response.function_call_arguments.delta", json_pack("{s:O, s:i, s:O}", "item_id", json_object_get(item, "id"),
                                                                       "output_index", idx, "delta", json_object_get(item, "arguments")));
        ev(g, out, "response.function_call_arguments.done", json_pack("{s:O, s:i, s:O}", "item_id", json_object_get(item, "id"),
                                                                      "output_index", idx, "arguments", json_object_get(item, "arguments")));
        ev(g, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    }
    json_array_append_new(b->items, item);
}

/* ---- formats ------------------------------------------------------------------------ */
static void f_start(ob_gen *g, ob_sbuf *out) {
    if (B(g)->api == API_MSG) {
        ev(g, out, "message_start", json_pack("{s:o}", "message", msg_obj(g, json_array(), 0)));
    } else {
        ev(g, out, "response.created", json_pack("{s:o}", "response", response_obj(g, "in_progress", json_array())));
        ev(g, out, "response.in_progress", json_pack("{s:o}", "response", response_obj(g, "in_progress", json_array())));
    }
}

static void f_delta(ob_gen *g, int i, ob_sbuf *out) {
    ob_choice *c = &g->ch[i];
    block_text(g, B_REASONING, c->d_reasoning.p, c->d_reasoning.len, out);
    block_text(g, B_TEXT, c->d_content.p, c->d_content.len, out);
    size_t k;
    json_t *call;
    json_array_foreach(c->d_tools, k, call) block_call(g, call, out);
}

static void f_done(ob_gen *g, int i, int last, ob_sbuf *out) { (void)i; (void)last; block_close(g, out); }

static void f_end(ob_gen *g, ob_sbuf *out) {
    blocks *b = B(g);
    if (b->api == API_MSG) {
        ev(g, out, "message_delta", json_pack("{s:{s:s, s:n}, s:{s:i, s:i}, s:o}", "delta", "stop_reason", msg_stop_reason(g),
                                              "stop_sequence", "usage", "input_tokens", g->q.n_prompt, "output_tokens", g->ch[0].n_tok,
                                              "timings", ob_gen_timings(g)));
        /* Not Anthropic's, but every stream's last event carries usage and timings here. */
        ev(g, out, "message_stop", json_pack("{s:{s:i, s:i}, s:o}", "usage", "input_tokens", g->q.n_prompt, "output_tokens",
                                             g->ch[0].n_tok, "timings", ob_gen_timings(g)));
    } else {
        ev(g, out, "response.completed", json_pack("{s:o}", "response", response_obj(g, "completed", json_incref(b->items))));
    }
}

static json_t *f_full(ob_gen *g) {
    ob_choice *c = &g->ch[0];
    json_t *items = json_array();
    char id[48];
    if (c->reasoning.len) {
        ob_gen_new_id(id, sizeof id, "rs_");
        json_array_append_new(items, text_item(g, B_REASONING, id, c->reasoning.p, c->reasoning.len));
    }
    if (c->content.len || !json_array_size(c->tool_calls)) {
        ob_gen_new_id(id, sizeof id, "msg_");
        json_array_append_new(items, text_item(g, B_TEXT, id, c->content.p ? c->content.p : "", c->content.len));
    }
    size_t k;
    json_t *call;
    json_array_foreach(c->tool_calls, k, call) json_array_append_new(items, call_item(g, call));
    if (B(g)->api == API_MSG) return msg_obj(g, items, 1);
    return response_obj(g, "completed", items);
}

static const ob_gen_fmt resp_fmt = {"resp_", 1, f_start, f_delta, f_done, f_end, f_full};
static const ob_gen_fmt msg_fmt = {"msg_", 1, f_start, f_delta, f_done, f_end, f_full};

static void blocks_free(void *p) {
    blocks *b = p;
    if (!b) return;
    ob_sbuf_free(&b->text);
    json_decref(b->items);
    free(b);
}

int ob_gen_parse_resp(ob_server *S, json_t *b, int messages_api, ob_gen_req *q, int *status, char *err, size_t errlen) {
    *status = 400;
    json_t *msgs = json_array();
    int rc = -1;
    if (ob_gen_parse_common(S, b, q, err, errlen)) goto out;
    if (!messages_api) {
        if (ob_gen_parse_tools(b, q, 1, err, errlen) || resp_messages(b, msgs, err, errlen)) goto out;
    } else {
        json_t *mt = json_object_get(b, "max_tokens");
        if (!json_is_integer(mt)) { snprintf(err, errlen, "'max_tokens' is required and must be an integer"); goto out; }
        json_t *ss = json_object_get(b, "stop_sequences");
        if (ss) json_object_set(b, "stop", ss);
        ob_gen_req_free(q);
        if (ob_gen_parse_common(S, b, q, err, errlen) || msg_messages(b, msgs, q, err, errlen)) goto out;
    }
    if (q->n != 1) { snprintf(err, errlen, "'n' must be 1 for this API"); goto out; }
    rc = ob_gen_chat_prompt(S, msgs, q, status, err, errlen);
out:
    json_decref(msgs);
    return rc;
}

static void handle(ob_server *S, ob_http_req *r, int api) {
    json_t *b = ob_gen_body(S, r);
    if (!b) return;
    char err[1024];
    ob_gen_req q = {0};
    int status;
    if (ob_gen_parse_resp(S, b, api == API_MSG, &q, &status, err, sizeof err)) { ob_gen_fail(S, r, &q, b, status, err); return; }
    json_decref(b);
    blocks *bl = calloc(1, sizeof *bl);
    bl->api = api;
    bl->items = json_array();
    ob_gen_run(S, r, &q, api == API_RESP ? &resp_fmt : &msg_fmt, bl, blocks_free);
}

void ob_h_responses(void *app, ob_http_req *r) { handle(app, r, API_RESP); }
void ob_h_messages(void *app, ob_http_req *r) { handle(app, r, API_MSG); }
