/* fuzz_template.c — libFuzzer harness for the chat-template engine (src/text/template*.c).
 *
 * Input: a template, optionally followed by "\n\x01\n" and a JSON object of variables (without
 * it, or when it does not parse, a conversation with a system prompt, tool calls, tool results
 * and tools is used). The template is compiled and, when it compiles, rendered under tight
 * limits (steps, output, memory, nesting) and a fixed clock. Checked: no crash, hang, leak or
 * sanitizer report; every failure comes with a message that names a line; every output is
 * valid UTF-8 of the reported length.
 *
 * Build and run (docs/templates.md has the last result):
 *   make build/fuzz/fuzz_template
 *   mkdir -p build/fuzz/corpus-template
 *   ./build/fuzz/fuzz_template build/fuzz/corpus-template tests/fuzz/seeds-template \
 *       -dict=tests/fuzz/template.dict -max_total_time=600 -timeout=10 -rss_limit_mb=2048 -max_len=8192
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template.h"

static const char default_vars[] =
    "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"documents\": null,"
    " \"enable_thinking\": false, \"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"  Hi <b>\\u00e9\\ud83d\\ude00 {{x}} \\n\"},"
    "{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"think\", \"tool_calls\": ["
    "{\"id\": \"call12345\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [1.5, true, null]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"r\\\": 2}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"enum\": [1, 2]}},"
    " \"required\": [\"a\"]}}}]}";

static json_t *defaults;

/* An independent check of the output's UTF-8: jansson refuses invalid strings. */
static int valid_utf8(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    int ok = j != NULL;
    json_decref(j);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!defaults) defaults = json_loads(default_vars, 0, NULL);
    if (!defaults) abort();
    size_t tlen = size;
    json_t *vars = NULL;
    const uint8_t *sep = size >= 3 ? memmem(data, size, "\n\x01\n", 3) : NULL;
    if (sep) {
        tlen = (size_t)(sep - data);
        json_error_t je;
        vars = json_loadb((const char *)sep + 3, size - tlen - 3, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        if (vars && !json_is_object(vars)) {
            json_decref(vars);
            vars = NULL;
        }
    }
    char err[512] = "";
    ob_tmpl_t *t = NULL;
    if (ob_tmpl_compile((const char *)data, tlen, &t, err, sizeof err)) {
        if (!err[0] || (!strstr(err, "line") && !strstr(err, "UTF-8") && !strstr(err, "memory"))) abort();
        json_decref(vars);
        return 0;
    }
    ob_tmpl_opts opts = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .now = 1721995200};
    char *out = NULL;
    size_t out_len = 0;
    err[0] = 0;
    if (ob_tmpl_render(t, vars ? vars : defaults, &opts, &out, &out_len, err, sizeof err)) {
        if (!err[0] || !strstr(err, "line")) abort();
        if (out) abort();
    } else {
        if (!out || out[out_len] != 0 || !valid_utf8(out, out_len)) abort();
        free(out);
    }
    ob_tmpl_free(t);
    json_decref(vars);
    return 0;
}
