/* chat.c — chat messages -> the prompt text the model was trained on.
 *
 * Owns: loading the model's chat template at start (GGUF metadata, or --chat-template-file;
 * a "tool_use" variant when the model has one) and compiling it with the Jinja engine
 * (text/template.h); message validation and normalisation (content parts joined, "developer"
 * as "system", tool-call arguments given to the template as objects, as transformers does);
 * tools for templates that do not render them (Qwen's Hermes convention: a # Tools section
 * in the system message, <tool_call> blocks, <tool_response> turns, as llama.cpp does); and
 * the tool-call format a template teaches (for outparse.c).
 * A model without any template gets ChatML. A template the engine cannot compile or render
 * answers 500 with the engine's message, which names the template line and construct.
 * Does not own: the template language (text/template*), tokenization.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "text/template.h"
#include "util/err.h"

ob_tool_format ob_srv_chat_tool_format(const char *t) {
    if (!t) return OB_TOOLS_HERMES;
    if (strstr(t, "<|channel|>")) return OB_TOOLS_HARMONY;
    if (strstr(t, "[TOOL_CALLS]")) return OB_TOOLS_MISTRAL;
    if (strstr(t, "<|start_header_id|>") || strstr(t, "<|python_tag|>")) return OB_TOOLS_LLAMA3;
    return OB_TOOLS_HERMES;
}

/* ---- loading ---------------------------------------------------------------------------- */
int ob_srv_chat_load(ob_server *S, const char *model_path, const char *template_file, char *err, size_t errlen) {
    ob_chat_source src = {0}, tsrc = {0};
    char e2[512];
    /* a GGUF without tokenizer.chat_template loads with template_src NULL */
    int have = ob_chat_source_from_gguf(model_path, NULL, 0, &src, e2, sizeof e2) == 0 && src.template_src;
    if (template_file) {
        if (ob_chat_source_set_file(&src, template_file, err, errlen)) { ob_chat_source_free(&src); return -1; }
        have = 1;
    }
    if (!have) { /* no template: ChatML */
        ob_chat_source_free(&src);
        return 0;
    }
    S->chat_template = strdup(src.template_src);
    S->tmpl_specials = json_incref(src.specials);
    ob_tmpl_t *t = NULL;
    if (ob_tmpl_compile(src.template_src, strlen(src.template_src), &t, e2, sizeof e2)) {
        /* Still serve completions; chat requests say why they cannot be rendered. */
        S->tmpl_error = strdup(e2);
        fprintf(stderr, "serve: warning: the chat template does not compile: %s\n", e2);
    }
    S->tmpl = t;
    if (!template_file && ob_chat_source_from_gguf(model_path, NULL, 1, &tsrc, e2, sizeof e2) == 0 && tsrc.template_src &&
        strcmp(tsrc.template_src, src.template_src)) {
        ob_tmpl_t *tt = NULL;
        if (ob_tmpl_compile(tsrc.template_src, strlen(tsrc.template_src), &tt, e2, sizeof e2) == 0) {
            S->tmpl_tools = tt;
            S->tmpl_tools_src = strdup(tsrc.template_src);
        }
    }
    ob_chat_source_free(&tsrc);
    ob_chat_source_free(&src);
    return 0;
}

void ob_srv_chat_free(ob_server *S) {
    ob_tmpl_free(S->tmpl);
    ob_tmpl_free(S->tmpl_tools);
    json_decref(S->tmpl_specials);
    free(S->tmpl_error);
    free(S->tmpl_tools_src);
    free(S->chat_template);
    S->tmpl = S->tmpl_tools = NULL;
    S->tmpl_specials = NULL;
    S->tmpl_error = S->tmpl_tools_src = S->chat_template = NULL;
}

/* ---- messages ----------------------------------------------------------------------- */
/* A message's content as text: a string, null, or an array of {"type":"text","text":...}. */
static int content_text(json_t *c, ob_sbuf *out, size_t idx, char *err, size_t errlen) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return ob_sbuf_put(out, json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) return ERR("messages[%zu].content must be a string or an array of parts", idx);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type) return ERR("messages[%zu].content[%zu].type is missing", idx, i);
        if (strcmp(type, "text") && strcmp(type, "input_text") && strcmp(type, "output_text"))
            return ERR("messages[%zu].content[%zu]: part type '%s' is not supported (text only)", idx, i, type);
        if (!json_is_string(text)) return ERR("messages[%zu].content[%zu].text must be a string", idx, i);
        ob_sbuf_put(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

static void tools_section(json_t *tools, ob_sbuf *out) {
    ob_sbuf_puts(out, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *s = json_dumps(t, JSON_COMPACT | JSON_ENSURE_ASCII);
        ob_sbuf_puts(out, "\n");
        if (s) ob_sbuf_puts(out, s);
        free(s);
    }
    ob_sbuf_puts(out, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                      "<args-json-object>}\n</tool_call>");
}

/* Copies messages into the shape templates expect. inline_tools 1: the tools go into the
 * system turn and tool calls and results become text (for templates that do not know them);
 * 2: only the latter (a conversation with tool turns but no tools given). */
static json_t *normalize(json_t *messages, json_t *tools, int inline_tools, char *err, size_t errlen) {
    json_t *out = json_array();
    size_t i, k;
    json_t *m, *c;
    size_t skip = 0; /* the system message merged with the tools section */
    if (inline_tools == 1) {
        ob_sbuf sys = {0};
        json_t *first = json_array_get(messages, 0);
        const char *r0 = json_string_value(json_object_get(first, "role"));
        int has_sys = r0 && (!strcmp(r0, "system") || !strcmp(r0, "developer"));
        if (has_sys && content_text(json_object_get(first, "content"), &sys, 0, err, errlen)) goto fail;
        if (sys.len) ob_sbuf_puts(&sys, "\n\n");
        tools_section(tools, &sys);
        json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content", sys.p, sys.len));
        ob_sbuf_free(&sys);
        skip = has_sys;
    }
    json_array_foreach(messages, i, m) {
        if (i < skip) continue;
        const char *role = json_string_value(json_object_get(m, "role"));
        ob_sbuf text = {0};
        if (content_text(json_object_get(m, "content"), &text, i, err, errlen)) { ob_sbuf_free(&text); goto fail; }
        json_t *n = json_deep_copy(m);
        if (!strcmp(role, "developer")) json_object_set_new(n, "role", json_string("system"));
        json_t *calls = json_object_get(n, "tool_calls");
        json_array_foreach(calls, k, c) {
            json_t *f = json_object_get(c, "function");
            if (!json_is_string(json_object_get(f, "name"))) {
                ob_sbuf_free(&text);
                json_decref(n);
                ERR("messages[%zu].tool_calls[%zu].function.name must be a string", i, k);
                goto fail;
            }
            json_t *args = json_object_get(f, "arguments");
            if (json_is_string(args)) {
                json_t *obj = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
                if (obj) json_object_set_new(f, "arguments", obj);
            }
            if (inline_tools) {
                char *nm = json_dumps(json_object_get(f, "name"), JSON_ENCODE_ANY);
                json_t *fa = json_object_get(f, "arguments");
                char *a = fa ? json_dumps(fa, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
                ob_sbuf_printf(&text, "%s<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", text.len ? "\n" : "", nm, a ? a : "{}");
                free(nm);
                free(a);
            }
        }
        if (inline_tools && !strcmp(role, "tool")) {
            /* Consecutive results share one user turn. */
            json_t *prev = json_array_get(out, json_array_size(out) - 1);
            ob_sbuf r = {0};
            ob_sbuf_printf(&r, "<tool_response>\n%s\n</tool_response>", text.p ? text.p : "");
            if (prev && json_is_true(json_object_get(prev, "_tool_turn"))) {
                ob_sbuf joined = {0};
                ob_sbuf_printf(&joined, "%s\n%s", json_string_value(json_object_get(prev, "content")), r.p);
                json_object_set_new(prev, "content", json_stringn(joined.p, joined.len));
                ob_sbuf_free(&joined);
            } else {
                json_array_append_new(out, json_pack("{s:s, s:s%, s:b}", "role", "user", "content", r.p, r.len, "_tool_turn", 1));
            }
            ob_sbuf_free(&r);
            ob_sbuf_free(&text);
            json_decref(n);
            continue;
        }
        if (inline_tools) json_object_del(n, "tool_calls");
        json_object_set_new(n, "content", json_stringn(text.p ? text.p : "", text.len));
        json_array_append_new(out, n);
        ob_sbuf_free(&text);
    }
    json_array_foreach(out, i, m) json_object_del(m, "_tool_turn");
    return out;
fail:
    json_decref(out);
    return NULL;
}

static void render_chatml(json_t *messages, int add_gen, ob_sbuf *out) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
        ob_sbuf_printf(out, "<|im_start|>%s\n%s<|im_end|>\n", json_string_value(json_object_get(m, "role")),
                       json_string_value(json_object_get(m, "content")));
    if (add_gen) ob_sbuf_puts(out, "<|im_start|>assistant\n");
}

int ob_srv_chat_render(const ob_server *S, json_t *messages, json_t *tools, int add_gen, json_t *extra, ob_sbuf *out,
                       int *status, char *err, size_t errlen) {
    *status = 400;
    if (!json_is_array(messages)) return ERR("'messages' must be an array");
    if (!json_array_size(messages)) return ERR("'messages' must not be empty");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) return ERR("messages[%zu] must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return ERR("messages[%zu].role must be a string", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return ERR("messages[%zu].role '%s' is not one of system, developer, user, assistant, tool", i, r);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
            return ERR("messages[%zu].content must be a string or an array of parts", i);
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc) && !json_is_array(tc)) return ERR("messages[%zu].tool_calls must be an array", i);
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return ERR("'tools' must be an array");
    if (extra && !json_is_null(extra) && !json_is_object(extra)) return ERR("'chat_template_kwargs' must be an object");
    if (S->tmpl_error) {
        *status = 500;
        return ERR("the chat template cannot be used: %s", S->tmpl_error);
    }
    int have_tools = json_is_array(tools) && json_array_size(tools) > 0;
    const ob_tmpl_t *t = have_tools && S->tmpl_tools ? S->tmpl_tools : S->tmpl;
    const char *src = have_tools && S->tmpl_tools ? S->tmpl_tools_src : S->chat_template;
    /* A template that never mentions tools gets them inline (it would drop them). */
    int inline_tools = !t || !strstr(src, "tools") || !strstr(src, "tool_calls");
    int any_tool_msgs = 0;
    json_array_foreach(messages, i, m)
        any_tool_msgs |= json_array_size(json_object_get(m, "tool_calls")) > 0 || !strcmp(json_string_value(json_object_get(m, "role")), "tool");
    json_t *msgs = normalize(messages, tools, inline_tools && (have_tools || any_tool_msgs) ? (have_tools ? 1 : 2) : 0, err, errlen);
    if (!msgs) return -1;
    if (!t) {
        render_chatml(msgs, add_gen, out);
        json_decref(msgs);
        return 0;
    }
    char *s = NULL;
    size_t len = 0;
    int rc = ob_chat_render(t, S->tmpl_specials, msgs, have_tools && !inline_tools ? tools : NULL, add_gen,
                            json_is_object(extra) ? extra : NULL, NULL, &s, &len, err, errlen);
    json_decref(msgs);
    if (rc) {
        /* raise_exception is the template refusing the conversation (the client's to fix). */
        *status = strstr(err, "raise_exception") ? 400 : 500;
        return -1;
    }
    ob_sbuf_put(out, s, len);
    free(s);
    return 0;
}
