/* template_cmd.c — `1bit template`: prints a conversation rendered by a model's chat template,
 * as transformers' apply_chat_template would render it.
 *
 * Owns: option parsing, reading the messages / tools / variables files, and writing the
 * prompt to stdout byte for byte (no newline is added). Everything else is text/template.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template.h"
#include "tools/tools.h"

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit template (-m FILE.gguf | --tokenizer-config tokenizer_config.json | --chat-template-file F)\n"
            "                     --messages M.json [options]\n"
            "  -m, --model FILE            GGUF file: tokenizer.chat_template and its special tokens\n"
            "  --tokenizer-config FILE     tokenizer_config.json: chat_template and special tokens\n"
            "  --chat-template-file FILE   the template text (overrides the model's)\n"
            "  --chat-template-name NAME   pick a named template (e.g. tool_use)\n"
            "  --messages FILE             a JSON array of messages, or an object with \"messages\"\n"
            "                              (and optionally \"tools\")\n"
            "  --tools FILE                a JSON array of tools (OpenAI / transformers format)\n"
            "  --var KEY=JSON              an extra template variable (e.g. enable_thinking=false)\n"
            "  --no-generation-prompt      add_generation_prompt = false (default true)\n"
            "  --now SECONDS               strftime_now's clock (UTC), for reproducible output\n");
    return 2;
}

static json_t *load_json(const char *path, const char *what) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j && je.line > 0) fprintf(stderr, "template: %s '%s': line %d: %s\n", what, path, je.line, je.text);
    else if (!j) fprintf(stderr, "template: %s: %s\n", what, je.text);
    return j;
}

int ob_cmd_template(int argc, char **argv) {
    const char *model = NULL, *config = NULL, *tfile = NULL, *tname = NULL, *mfile = NULL, *toolfile = NULL;
    int add_gen = 1, rc = 1;
    ob_tmpl_opts opts = {0};
    json_t *extra = json_object(), *mj = NULL, *tools = NULL;
    ob_chat_source src = {0};
    ob_tmpl_t *t = NULL;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model = argv[++i];
        else if (!strcmp(a, "--tokenizer-config") && has) config = argv[++i];
        else if (!strcmp(a, "--chat-template-file") && has) tfile = argv[++i];
        else if (!strcmp(a, "--chat-template-name") && has) tname = argv[++i];
        else if (!strcmp(a, "--messages") && has) mfile = argv[++i];
        else if (!strcmp(a, "--tools") && has) toolfile = argv[++i];
        else if (!strcmp(a, "--no-generation-prompt")) add_gen = 0;
        else if (!strcmp(a, "--now") && has) {
            char *end;
            opts.now = strtoll(argv[++i], &end, 10);
            if (*end || opts.now <= 0) {
                fprintf(stderr, "template: --now wants seconds since 1970, got '%s'\n", argv[i]);
                goto out;
            }
        }
        else if (!strcmp(a, "--var") && has) {
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            json_error_t je;
            json_t *v = eq ? json_loads(eq + 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je) : NULL;
            if (!v) {
                fprintf(stderr, "template: --var '%s': expected KEY=JSON (e.g. enable_thinking=false)\n", kv);
                goto out;
            }
            char *key = strndup(kv, (size_t)(eq - kv));
            json_object_set_new(extra, key, v);
            free(key);
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            rc = 0;
            goto out;
        } else {
            fprintf(stderr, "template: unknown or incomplete option '%s'\n", a);
            rc = usage();
            goto out;
        }
    }
    if (!mfile || (!model && !config && !tfile) || (model && config)) {
        rc = usage();
        goto out;
    }
    if (!(mj = load_json(mfile, "messages"))) goto out;
    json_t *messages = mj;
    if (json_is_object(mj)) {
        messages = json_object_get(mj, "messages");
        if (!toolfile && json_object_get(mj, "tools")) tools = json_incref(json_object_get(mj, "tools"));
    }
    if (!json_is_array(messages)) {
        fprintf(stderr, "template: '%s' must hold a JSON array of messages (or an object with \"messages\")\n", mfile);
        goto out;
    }
    if (toolfile && !(tools = load_json(toolfile, "tools"))) goto out;
    int want_tools = tools && json_is_array(tools) && json_array_size(tools) > 0;
    if (model && ob_chat_source_from_gguf(model, tname, want_tools, &src, err, sizeof err)) goto fail;
    if (config && ob_chat_source_from_tokenizer_config(config, tname, want_tools, &src, err, sizeof err)) goto fail;
    if (tfile && ob_chat_source_set_file(&src, tfile, err, sizeof err)) goto fail;
    if (!src.template_src) {
        snprintf(err, sizeof err, "'%s' has no chat template; give one with --chat-template-file", model ? model : config);
        goto fail;
    }
    if (ob_tmpl_compile(src.template_src, strlen(src.template_src), &t, err, sizeof err)) goto fail;
    char *prompt;
    size_t len;
    if (ob_chat_render(t, src.specials, messages, tools, add_gen, extra, &opts, &prompt, &len, err, sizeof err)) goto fail;
    fwrite(prompt, 1, len, stdout);
    free(prompt);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "template: %s\n", err);
out:
    ob_tmpl_free(t);
    ob_chat_source_free(&src);
    json_decref(extra);
    json_decref(mj);
    json_decref(tools);
    return rc;
}
