/* test_serve.c — the server's text pieces without HTTP: UTF-8-safe release and stop strings
 * (text.c), and the model-output parser for each tool-call family (outparse.c), fed whole and
 * one byte at a time (as a stream would). */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "test.h"

/* ---- text assembly ------------------------------------------------------------------------ */
/* Feeds pieces through a text accumulator; returns everything released, and *stopped. */
static char *acc_run(const char *const *pieces, int n, char **stop, int n_stop, int *stopped) {
    ob_textacc a = {0};
    a.stop = stop;
    a.n_stop = n_stop;
    ob_sbuf out = {0};
    *stopped = 0;
    for (int i = 0; i < n && !*stopped; i++) {
        size_t before = out.len;
        *stopped = ob_textacc_feed(&a, pieces[i], strlen(pieces[i]), &out);
        /* every release is valid UTF-8 on its own */
        ob_sbuf chk = {0};
        ob_utf8_sanitize(out.p ? out.p + before : "", out.len - before, 1, &chk);
        CHECK(chk.len == out.len - before && (!chk.len || !memcmp(chk.p, out.p + before, chk.len)));
        ob_sbuf_free(&chk);
    }
    if (!*stopped) ob_textacc_flush(&a, &out);
    ob_textacc_free(&a);
    if (!out.p) return strdup("");
    return out.p;
}

OB_SUITE(serve_text) {
    int stopped;
    char *stops[] = {"STOP", "<|end|>"};
    /* a stop string across three tokens is cut, nothing after it released */
    const char *p1[] = {"Hello ST", "O", "P world"};
    char *s = acc_run(p1, 3, stops, 2, &stopped);
    CHECK_STR(s, "Hello ");
    CHECK(stopped);
    free(s);
    /* a prefix that does not complete is released in the end */
    const char *p2[] = {"ab<|en", "d", "x"};
    s = acc_run(p2, 3, stops, 2, &stopped);
    CHECK_STR(s, "ab<|endx");
    CHECK(!stopped);
    free(s);
    /* a character split over tokens is held until complete (é = C3 A9, 日 = E6 97 A5) */
    const char *p3[] = {"caf\xC3", "\xA9 \xE6\x97", "\xA5"};
    s = acc_run(p3, 3, NULL, 0, &stopped);
    CHECK_STR(s, "caf\xC3\xA9 \xE6\x97\xA5");
    free(s);
    /* bytes that never form a character become U+FFFD; an unfinished one at the end too */
    const char *p4[] = {"a\xFF" "b", "\xC3"};
    s = acc_run(p4, 2, NULL, 0, &stopped);
    CHECK_STR(s, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    free(s);
    /* a stop string made of a multi-byte character split across tokens */
    char *st2[] = {"\xC3\xA9!"};
    const char *p5[] = {"x\xC3", "\xA9", "!y"};
    s = acc_run(p5, 3, st2, 1, &stopped);
    CHECK_STR(s, "x");
    CHECK(stopped);
    free(s);
}

/* ---- output parser ------------------------------------------------------------------------ */
typedef struct {
    ob_sbuf content, reasoning;
    char names[4][64], args[4][256];
    int n_tools;
} parsed;

static void collect(void *user, const ob_out_ev *ev) {
    parsed *p = user;
    if (ev->kind == OB_OUT_CONTENT) ob_sbuf_put(&p->content, ev->text, ev->len);
    else if (ev->kind == OB_OUT_REASONING) ob_sbuf_put(&p->reasoning, ev->text, ev->len);
    else if (p->n_tools < 4) {
        snprintf(p->names[p->n_tools], 64, "%s", ev->name);
        snprintf(p->args[p->n_tools], 256, "%s", ev->args);
        p->n_tools++;
    }
}

/* Parses text whole (bytewise = 0) or one byte at a time; checks both ways agree. */
static void parse(ob_tool_format fmt, int in_think, const char *text, int bytewise, parsed *out) {
    memset(out, 0, sizeof *out);
    ob_outp p;
    ob_outp_init(&p, fmt, 1, in_think);
    size_t n = strlen(text);
    if (bytewise) for (size_t i = 0; i < n; i++) ob_outp_feed(&p, text + i, 1, collect, out);
    else ob_outp_feed(&p, text, n, collect, out);
    ob_outp_end(&p, collect, out);
    ob_outp_free(&p);
}

static void expect(ob_tool_format fmt, int in_think, const char *text, const char *content, const char *reasoning,
                   int n_tools, const char *name0, const char *args0) {
    for (int bw = 0; bw < 2; bw++) {
        parsed r;
        parse(fmt, in_think, text, bw, &r);
        CHECK_STR(r.content.p ? r.content.p : "", content);
        CHECK_STR(r.reasoning.p ? r.reasoning.p : "", reasoning);
        CHECK_EQ_INT(r.n_tools, n_tools);
        if (n_tools && name0) CHECK_STR(r.names[0], name0);
        if (n_tools && args0) CHECK_STR(r.args[0], args0);
        ob_sbuf_free(&r.content);
        ob_sbuf_free(&r.reasoning);
    }
}

OB_SUITE(serve_outparse) {
    /* plain text and reasoning */
    expect(OB_TOOLS_HERMES, 0, "Hello <b>world</b>", "Hello <b>world</b>", "", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 0, "<think>\nLet me see.\n</think>\n\nIt is 4.", "It is 4.", "\nLet me see.\n", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 0, "  <think>hm</think>ok", "ok", "hm", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 1, "I think so.</think>Yes.", "Yes.", "I think so.", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 0, "a <think> in the middle", "a <think> in the middle", "", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 1, "never closed", "", "never closed", 0, NULL, NULL);
    /* Qwen3 / Hermes */
    expect(OB_TOOLS_HERMES, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", "", 1,
           "get_weather", "{\"city\":\"Paris\"}");
    expect(OB_TOOLS_HERMES, 0,
           "<think>need tools</think>Checking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>",
           "Checking.\n", "need tools", 2, "a", "{}");
    expect(OB_TOOLS_HERMES, 0, "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", "", 0, NULL, NULL);
    expect(OB_TOOLS_HERMES, 0, "<tool_call>{\"name\": \"f\", \"arguments\": {}}", "", "", 1, "f", "{}"); /* unterminated but complete */
    /* Llama 3.x */
    expect(OB_TOOLS_LLAMA3, 0, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "", "", 1, "get_weather", "{\"city\":\"Oslo\"}");
    expect(OB_TOOLS_LLAMA3, 0, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}", "", "", 1, "f", "{\"q\":\"x\"}");
    expect(OB_TOOLS_LLAMA3, 0, "{not a call}", "{not a call}", "", 0, NULL, NULL);
    expect(OB_TOOLS_LLAMA3, 0, "Sure: {\"name\": 1}", "Sure: {\"name\": 1}", "", 0, NULL, NULL);
    /* Mistral */
    expect(OB_TOOLS_MISTRAL, 0, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 2}, \"id\": \"abc123def\"}]", "", "", 1, "f", "{\"a\":2}");
    expect(OB_TOOLS_MISTRAL, 0, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", "", "", 1, "get_weather", "{\"city\":\"Rome\"}");
    expect(OB_TOOLS_MISTRAL, 0, "Hi [TOOL_CALLS][1,2]", "Hi [TOOL_CALLS][1,2]", "", 0, NULL, NULL);
    /* gpt-oss harmony */
    expect(OB_TOOLS_HARMONY, 0, "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.",
           "It is sunny.", "User wants weather.", 0, NULL, NULL);
    expect(OB_TOOLS_HARMONY, 0,
           "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
           "", "Call it.", 1, "get_weather", "{\"city\":\"Paris\"}");
    expect(OB_TOOLS_HARMONY, 0, "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "", "", 1, "f", "{}");
    expect(OB_TOOLS_HARMONY, 0, "no channels at all", "no channels at all", "", 0, NULL, NULL);
    /* tools off: markers are text */
    parsed r;
    ob_outp p;
    memset(&r, 0, sizeof r);
    ob_outp_init(&p, OB_TOOLS_HERMES, 0, 0);
    ob_outp_feed(&p, "<tool_call>{}</tool_call>", 25, collect, &r);
    ob_outp_end(&p, collect, &r);
    ob_outp_free(&p);
    CHECK_STR(r.content.p, "<tool_call>{}</tool_call>");
    CHECK_EQ_INT(r.n_tools, 0);
    ob_sbuf_free(&r.content);
    /* the template decides the family */
    CHECK_EQ_INT(ob_srv_chat_tool_format(NULL), OB_TOOLS_HERMES);
    CHECK_EQ_INT(ob_srv_chat_tool_format("{{'<|start_header_id|>'}}"), OB_TOOLS_LLAMA3);
    CHECK_EQ_INT(ob_srv_chat_tool_format("[TOOL_CALLS]"), OB_TOOLS_MISTRAL);
    CHECK_EQ_INT(ob_srv_chat_tool_format("<|channel|>"), OB_TOOLS_HARMONY);
}
