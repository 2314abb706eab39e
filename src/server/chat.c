/* chat.c — chat messages -> the prompt text the model was trained on.
 *
 * Owns: message validation (roles, content parts, tool calls), the choice of renderer, and
 * the tool-call format a template teaches (for outparse.c).
 * Templates are Jinja; the Jinja engine (src/text/template) is not in this tree yet, so this
 * file renders exactly two cases itself and refuses the rest with a 500 that says so:
 *   - a model without a chat template: ChatML;
 *   - the plain ChatML template (byte-identical to the one known here), which it reproduces.
 * Tools with ChatML follow Qwen's Hermes convention (a # Tools section in the system message,
 * <tool_call> blocks in assistant turns, <tool_response> in user turns), as llama.cpp does
 * for templates that do not render tools themselves.
 * Does not own: tokenization, the template language.
 */
#include <string.h>

#include "server/server.h"
#include "util/err.h"

/* The plain ChatML template (Qwen's tiny test models, many fine-tunes). */
static const char *const chatml_templates[] = {
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
};

ob_tool_format ob_srv_chat_tool_format(const char *t) {
    if (!t) return OB_TOOLS_HERMES;
    if (strstr(t, "<|channel|>")) return OB_TOOLS_HARMONY;
    if (strstr(t, "[TOOL_CALLS]")) return OB_TOOLS_MISTRAL;
    if (strstr(t, "<|start_header_id|>") || strstr(t, "<|python_tag|>")) return OB_TOOLS_LLAMA3;
    return OB_TOOLS_HERMES;
}

static int is_chatml(const char *t) {
    if (!t) return 1;
    for (size_t i = 0; i < sizeof chatml_templates / sizeof chatml_templates[0]; i++) {
        /* ignore surrounding whitespace only */
        const char *k = chatml_templates[i];
        while (*t == ' ' || *t == '\n') t++;
        size_t lt = strlen(t), lk = strlen(k);
        while (lt && (t[lt - 1] == ' ' || t[lt - 1] == '\n')) lt--;
        if (lt == lk && !memcmp(t, k, lk)) return 1;
    }
    return 0;
}

/* A message's content as text: a string, null, or an array of {"type":"text","text":...}. */
static int content_text(json_t *c, ob_sbuf *out, int idx, char *err, size_t errlen) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return ob_sbuf_put(out, json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) return ERR("messages[%d].content must be a string or an array of parts", idx);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type) return ERR("messages[%d].content[%zu].type is missing", idx, i);
        if (strcmp(type, "text") && strcmp(type, "input_text") && strcmp(type, "output_text"))
            return ERR("messages[%d].content[%zu]: part type '%s' is not supported (text only)", idx, i, type);
        if (!json_is_string(text)) return ERR("messages[%d].content[%zu].text must be a string", idx, i);
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

static int render_chatml(json_t *messages, json_t *tools, int add_gen, ob_sbuf *out, char *err, size_t errlen) {
    size_t n = json_array_size(messages), i;
    json_t *m;
    int have_tools = tools && json_array_size(tools) > 0;
    int sys_first = n > 0 && !strcmp(json_string_value(json_object_get(json_array_get(messages, 0), "role")), "system");
    if (have_tools && !sys_first) {
        ob_sbuf_puts(out, "<|im_start|>system\n");
        tools_section(tools, out);
        ob_sbuf_puts(out, "<|im_end|>\n");
    }
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        ob_sbuf text = {0};
        if (content_text(json_object_get(m, "content"), &text, (int)i, err, errlen)) { ob_sbuf_free(&text); return -1; }
        if (!strcmp(role, "tool")) {
            /* Consecutive tool results share one user turn. */
            int prev_tool = i > 0 && !strcmp(json_string_value(json_object_get(json_array_get(messages, i - 1), "role")), "tool");
            int next_tool = i + 1 < n && !strcmp(json_string_value(json_object_get(json_array_get(messages, i + 1), "role")), "tool");
            if (!prev_tool) ob_sbuf_puts(out, "<|im_start|>user");
            ob_sbuf_puts(out, "\n<tool_response>\n");
            ob_sbuf_put(out, text.p ? text.p : "", text.len);
            ob_sbuf_puts(out, "\n</tool_response>");
            if (!next_tool) ob_sbuf_puts(out, "<|im_end|>\n");
            ob_sbuf_free(&text);
            continue;
        }
        ob_sbuf_printf(out, "<|im_start|>%s\n", role);
        ob_sbuf_put(out, text.p ? text.p : "", text.len);
        if (i == 0 && sys_first && have_tools) {
            if (text.len) ob_sbuf_puts(out, "\n\n");
            tools_section(tools, out);
        }
        json_t *calls = json_object_get(m, "tool_calls");
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            json_t *f = json_object_get(c, "function");
            const char *name = json_string_value(json_object_get(f, "name"));
            json_t *args = json_object_get(f, "arguments");
            if (!name) { ob_sbuf_free(&text); return ERR("messages[%zu].tool_calls[%zu].function.name is missing", i, k); }
            char *nm = json_dumps(json_object_get(f, "name"), JSON_ENCODE_ANY);
            ob_sbuf_printf(out, "%s<tool_call>\n{\"name\": %s, \"arguments\": ", text.len || k ? "\n" : "", nm ? nm : "\"\"");
            free(nm);
            if (json_is_string(args)) ob_sbuf_puts(out, json_string_value(args));
            else {
                char *a = json_dumps(args ? args : json_object(), JSON_COMPACT);
                ob_sbuf_puts(out, a ? a : "{}");
                free(a);
            }
            ob_sbuf_puts(out, "}\n</tool_call>");
        }
        ob_sbuf_puts(out, "<|im_end|>\n");
        ob_sbuf_free(&text);
    }
    if (add_gen) ob_sbuf_puts(out, "<|im_start|>assistant\n");
    return 0;
}

int ob_srv_chat_render(const ob_server *S, json_t *messages, json_t *tools, int add_gen, ob_sbuf *out, int *status,
                   char *err, size_t errlen) {
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
    if (!is_chatml(S->chat_template)) {
        *status = 500;
        return ERR("this model's chat template is not plain ChatML, and rendering other Jinja templates needs the "
                   "template engine, which this build does not have yet; pass --chat-template-file with a ChatML "
                   "template, or use /v1/completions with a rendered prompt");
    }
    /* "developer" is OpenAI's newer name for "system". */
    json_t *msgs = json_deep_copy(messages);
    json_array_foreach(msgs, i, m)
        if (!strcmp(json_string_value(json_object_get(m, "role")), "developer")) json_object_set_new(m, "role", json_string("system"));
    int rc = render_chatml(msgs, json_is_array(tools) ? tools : NULL, add_gen, out, err, errlen);
    json_decref(msgs);
    return rc;
}
