/* test_template.c — the chat-template engine against Python's jinja2.
 *
 * tests/templates/snippets.json: small templates, one construct each, with jinja2's output
 * (or the fact that jinja2 fails); tests/templates/expected.json: real model templates
 * (tests/templates/models) over conversations (tests/templates/conversations) as transformers
 * renders them. Both are written by tools/templates/render_expected.py. Every render must
 * equal jinja2's byte for byte; where jinja2 fails the engine must fail too, with the same
 * raise_exception message when the template raised one.
 * The template_api suite checks limits, error messages and the template sources.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "format/gguf.h"
#include "test.h"
#include "text/template.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

/* Reports where got and want first differ. */
static void show_diff(const char *label, const char *got, size_t glen, const char *want, size_t wlen) {
    size_t i = 0;
    while (i < glen && i < wlen && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: differs at byte %zu (got %zu bytes, want %zu)\n    got:  \"%.*s\"\n    want: \"%.*s\"\n",
            label, i, glen, wlen, (int)((glen - from) < 120 ? glen - from : 120), got + from,
            (int)((wlen - from) < 120 ? wlen - from : 120), want + from);
}

/* Compares one result against jinja2's; returns 1 when it matches. */
static int check_result(const char *label, int rc, const char *out, size_t out_len, const char *err,
                        const json_t *want) {
    int want_ok = json_is_true(json_object_get(want, "ok"));
    if (want_ok) {
        const json_t *text = json_object_get(want, "text");
        if (rc) {
            fprintf(stderr, "  %s: failed (%s), jinja2 renders it\n", label, err);
            return 0;
        }
        size_t wlen = json_string_length(text);
        if (out_len != wlen || memcmp(out, json_string_value(text), wlen)) {
            show_diff(label, out, out_len, json_string_value(text), wlen);
            return 0;
        }
        return 1;
    }
    if (!rc) {
        fprintf(stderr, "  %s: rendered, but jinja2 fails: %s\n", label, json_string_value(json_object_get(want, "error")));
        return 0;
    }
    const json_t *raised = json_object_get(want, "raise");
    if (json_is_string(raised) && !strstr(err, json_string_value(raised))) {
        fprintf(stderr, "  %s: error '%s' lacks the raised message '%s'\n", label, err, json_string_value(raised));
        return 0;
    }
    return 1;
}

OB_SUITE(template_snippets) {
    json_error_t je;
    json_t *root = json_load_file("tests/templates/snippets.json", JSON_ALLOW_NUL, &je);
    CHECK(root != NULL);
    if (!root) return;
    ob_tmpl_opts opts = {.now = json_integer_value(json_object_get(root, "now"))};
    size_t i;
    json_t *c;
    int bad = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *src = json_string_value(json_object_get(c, "template"));
        char err[512] = "", *out = NULL, label[64];
        size_t out_len = 0;
        ob_tmpl_t *t = NULL;
        int rc = ob_tmpl_compile(src, json_string_length(json_object_get(c, "template")), &t, err, sizeof err);
        if (!rc) rc = ob_tmpl_render(t, json_object_get(c, "vars"), &opts, &out, &out_len, err, sizeof err);
        snprintf(label, sizeof label, "snippet %zu", i);
        int ok = check_result(label, rc, out, out_len, err, c);
        if (!ok) {
            fprintf(stderr, "    template: %s\n", src);
            bad++;
        }
        if (ob_test_verbose && rc) fprintf(stderr, "  snippet %zu error: %s\n", i, err);
        CHECK(ok);
        free(out);
        ob_tmpl_free(t);
    }
    if (bad) fprintf(stderr, "  %d snippets differ from jinja2\n", bad);
    json_decref(root);
}

OB_SUITE(template_models) {
    json_error_t je;
    json_t *manifest = json_load_file("tests/templates/manifest.json", 0, &je);
    json_t *expected = json_load_file("tests/templates/expected.json", JSON_ALLOW_NUL, &je);
    CHECK(manifest && expected);
    if (!manifest || !expected) return;
    const json_t *results = json_object_get(expected, "results");
    ob_tmpl_opts opts = {.now = json_integer_value(json_object_get(manifest, "now"))};
    size_t i, j;
    json_t *tm, *cn;
    json_array_foreach(json_object_get(manifest, "templates"), i, tm) {
        char path[256], err[512] = "";
        const char *name = json_string_value(json_object_get(tm, "name"));
        snprintf(path, sizeof path, "tests/templates/%s", json_string_value(json_object_get(tm, "file")));
        size_t len;
        char *src = slurp(path, &len);
        CHECK(src != NULL);
        if (!src) continue;
        ob_tmpl_t *t = NULL;
        int crc = ob_tmpl_compile(src, len, &t, err, sizeof err);
        int pass = 0, total = 0;
        json_array_foreach(json_object_get(manifest, "conversations"), j, cn) {
            char cpath[256], label[128];
            snprintf(cpath, sizeof cpath, "tests/templates/conversations/%s.json", json_string_value(cn));
            snprintf(label, sizeof label, "%s/%s", name, json_string_value(cn));
            json_t *conv = json_load_file(cpath, JSON_ALLOW_NUL, &je);
            const json_t *want = json_object_get(results, label);
            CHECK(conv && want);
            if (!conv || !want) { json_decref(conv); continue; }
            const json_t *agp = json_object_get(conv, "add_generation_prompt");
            char *out = NULL;
            size_t out_len = 0;
            int rc = crc;
            if (!rc)
                rc = ob_chat_render(t, json_object_get(tm, "special"), json_object_get(conv, "messages"),
                                    json_object_get(conv, "tools"), agp ? json_is_true(agp) : 1,
                                    json_object_get(conv, "vars"), &opts, &out, &out_len, err, sizeof err);
            int ok = check_result(label, rc, out, out_len, err, want);
            pass += ok;
            total++;
            CHECK(ok);
            free(out);
            json_decref(conv);
        }
        if (ob_test_verbose) fprintf(stderr, "  %-20s %d/%d renders equal jinja2's\n", name, pass, total);
        ob_tmpl_free(t);
        free(src);
    }
    json_decref(manifest);
    json_decref(expected);
}

/* Renders src with no variables; returns the output (malloc'd) or NULL with err filled. */
static char *render_str(const char *src, const ob_tmpl_opts *o, char *err, size_t errlen) {
    ob_tmpl_t *t;
    char *out = NULL;
    if (ob_tmpl_compile(src, strlen(src), &t, err, errlen)) return NULL;
    if (ob_tmpl_render(t, NULL, o, &out, NULL, err, errlen)) out = NULL;
    ob_tmpl_free(t);
    return out;
}

static int fails_with(const char *src, const ob_tmpl_opts *o, const char *needle) {
    char err[512] = "";
    char *out = render_str(src, o, err, sizeof err);
    if (out) {
        free(out);
        fprintf(stderr, "  '%s' rendered; expected an error with '%s'\n", src, needle);
        return 0;
    }
    if (!strstr(err, needle)) {
        fprintf(stderr, "  '%s': error '%s' lacks '%s'\n", src, err, needle);
        return 0;
    }
    return 1;
}

/* Compiles a source's template and renders messages (and tools) with its special tokens. */
static char *render_source(const ob_chat_source *src, const json_t *msgs, const json_t *tools) {
    char err[512], *out = NULL;
    ob_tmpl_t *t;
    if (ob_tmpl_compile(src->template_src, strlen(src->template_src), &t, err, sizeof err)) return NULL;
    if (ob_chat_render(t, src->specials, msgs, tools, 1, NULL, NULL, &out, NULL, err, sizeof err)) out = NULL;
    ob_tmpl_free(t);
    return out;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Errors name the line and the construct: a template and a part of its message. */
static const char *const error_cases[][2] = {
    {"a\nb\n{{ x|nosuch }}", "line 3: syntax error: no filter named 'nosuch'"},
    {"{% for x in y %}\n{% endif %}", "line 2: syntax error in {% for %} (line 1)"},
    {"{% for x in y %}\n{% endif %}", "unknown tag 'endif'"},
    {"{% if x %}\n\nno end", "looking for 'elif' or 'else' or 'endif'"},
    {"\n\n{{ 'a' + 1 }}", "line 3: operator '+'"},
    {"\n{{ ''.split('') }}", "line 2: method 'split': empty separator"},
    {"{{ 1 }}\n{{ raise_exception('stop here') }}", "line 2: raise_exception: stop here"},
    {"{{ [1]|tojson }}{{ x|tojson }}", "filter 'tojson'"},
    {"{{ foo.bar }}", "'foo' is undefined"},
    {"{% do 1 %}", "unknown tag 'do'"},
    {"{% include 'x' %}", "not supported"},
};

OB_SUITE(template_api) {
    for (size_t i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++)
        CHECK(fails_with(error_cases[i][0], NULL, error_cases[i][1]));

    /* limits: a hostile template fails with a message instead of hanging or eating memory */
    ob_tmpl_opts small = {.max_steps = 100000, .max_output = 1 << 20, .max_memory = 32 << 20};
    CHECK(fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &small, "step limit"));
    CHECK(fails_with("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &small, "output limit"));
    CHECK(fails_with("{{ 'x' * 100000000 }}", &small, "limit"));
    CHECK(fails_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "too deeply"));
    CHECK(fails_with("{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", &small, "limit"));
    CHECK(fails_with("{{ range(1000000)|list }}", NULL, "Range too big"));
    char err[512];
    ob_tmpl_t *t = NULL;
    char deep[5000];
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', 2000);
    strcpy(deep + 2003, "1 }}");
    CHECK(ob_tmpl_compile(deep, strlen(deep), &t, err, sizeof err) == -1 && strstr(err, "too deeply"));
    strcpy(deep, "{{ ");
    for (int i = 0; i < 1000; i++) memcpy(deep + 3 + 4 * i, "not ", 4);
    strcpy(deep + 4003, "x }}");
    CHECK(ob_tmpl_compile(deep, strlen(deep), &t, err, sizeof err) == -1 && strstr(err, "too deeply"));
    deep[0] = 0;
    for (int i = 0; i < 300; i++) strcat(deep, "{% if x %}");
    CHECK(ob_tmpl_compile(deep, strlen(deep), &t, err, sizeof err) == -1 && strstr(err, "too deeply"));
    CHECK(ob_tmpl_compile("\xff\xfe", 2, &t, err, sizeof err) == -1 && strstr(err, "UTF-8"));

    /* strftime_now reads the given clock (UTC) */
    ob_tmpl_opts clock = {.now = 86400 * 365};
    char *out = render_str("{{ strftime_now('%Y-%m-%d %H:%M') }}", &clock, err, sizeof err);
    CHECK_STR(out, "1971-01-01 00:00");
    free(out);

    /* tokenizer_config.json: specials (strings and AddedToken objects), named templates */
    char dir[256], path[300], jpath[300];
    snprintf(dir, sizeof dir, "%s/tmpl_cfg", ob_test_tmpdir());
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    write_file(path, "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\","
                     " \"unk_token\": null, \"additional_special_tokens\": [\"<x>\"],"
                     " \"chat_template\": [{\"name\": \"default\", \"template\": \"D{{ bos_token }}{{ messages|length }}\"},"
                     " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}{{ eos_token }}{{ additional_special_tokens }}\"}]}");
    ob_chat_source src;
    CHECK(ob_chat_source_from_tokenizer_config(path, NULL, 0, &src, err, sizeof err) == 0);
    CHECK_STR(src.template_src, "D{{ bos_token }}{{ messages|length }}");
    CHECK(json_object_get(src.specials, "unk_token") == NULL);
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\": \"function\"}]", 0, NULL);
    out = render_source(&src, msgs, NULL);
    CHECK_STR(out, "D<s>1");
    free(out);
    ob_chat_source_free(&src);
    CHECK(ob_chat_source_from_tokenizer_config(path, NULL, 1, &src, err, sizeof err) == 0);
    out = render_source(&src, msgs, tools);
    CHECK_STR(out, "T1</s>['<x>']");
    free(out);
    ob_chat_source_free(&src);
    CHECK(ob_chat_source_from_tokenizer_config(path, "nope", 0, &src, err, sizeof err) == -1);
    /* no chat_template in the config: chat_template.jinja beside it */
    write_file(path, "{\"eos_token\": \"E\"}");
    remove(jpath);   /* left by an earlier run */
    CHECK(ob_chat_source_from_tokenizer_config(path, NULL, 0, &src, err, sizeof err) == 0);
    CHECK(src.template_src == NULL && json_object_get(src.specials, "eos_token"));
    ob_chat_source_free(&src);
    write_file(jpath, "J{{ eos_token }}\n");
    CHECK(ob_chat_source_from_tokenizer_config(path, NULL, 0, &src, err, sizeof err) == 0);
    CHECK_STR(src.template_src, "J{{ eos_token }}\n");
    ob_chat_source_free(&src);

    /* GGUF: tokenizer.chat_template and the special tokens' texts */
    char gpath[300];
    snprintf(gpath, sizeof gpath, "%s/tmpl.gguf", dir);
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    const char *toks[] = {"<unk>", "<|begin|>", "<|end|>", "hi"};
    ob_gguf_writer_set_str(w, "general.architecture", "llama");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 4);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    ob_gguf_writer_set_str(w, "tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}");
    CHECK(ob_gguf_writer_write(w, gpath, NULL, NULL, err, sizeof err) == 0);
    ob_gguf_writer_free(w);
    CHECK(ob_chat_source_from_gguf(gpath, NULL, 0, &src, err, sizeof err) == 0);
    CHECK_STR(json_string_value(json_object_get(src.specials, "unk_token")), "<unk>");
    out = render_source(&src, msgs, NULL);
    CHECK_STR(out, "<|begin|>hi<|end|>");
    free(out);
    CHECK(ob_chat_source_set_file(&src, jpath, err, sizeof err) == 0);
    CHECK_STR(src.template_src, "J{{ eos_token }}\n");
    ob_chat_source_free(&src);
    json_decref(msgs);
    json_decref(tools);
}
