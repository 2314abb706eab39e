/* template_chat.c — where a chat template comes from and what it is rendered with, as
 * transformers' apply_chat_template does it.
 *
 * Owns: reading the template and the special tokens from a tokenizer_config.json (or a
 * chat_template.jinja beside it), from a GGUF file's metadata, or from a file given on the
 * command line; choosing among named templates ("default", "tool_use"); assembling the
 * render variables (special tokens, extra keyword arguments, messages, tools, documents,
 * add_generation_prompt).
 * Does not own: the interpreter (template_eval.c and friends), tokenizing the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "text/template.h"
#include "util/err.h"

#define MAX_TEMPLATE_FILE ((size_t)16 << 20)

void ob_chat_source_free(ob_chat_source *s) {
    if (!s) return;
    free(s->template_src);
    json_decref(s->specials);
    s->template_src = NULL;
    s->specials = NULL;
}

static int read_file(const char *path, char **out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ERR("chat template: cannot open '%s'", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= MAX_TEMPLATE_FILE) {
                free(buf);
                fclose(f);
                return ERR("chat template: '%s' is larger than %zu MiB", path, MAX_TEMPLATE_FILE >> 20);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return ERR("chat template: cannot read '%s'", path);
    }
    buf[n] = 0;
    *out = buf;
    return 0;
}

int ob_chat_source_set_file(ob_chat_source *s, const char *path, char *err, size_t errlen) {
    char *text;
    if (read_file(path, &text, err, errlen)) return -1;
    free(s->template_src);
    s->template_src = text;
    if (!s->specials) s->specials = json_object();
    return 0;
}

/* transformers' choice among named templates. */
static const char *pick_named(const char *const *names, size_t n, const char *want, int want_tools) {
    if (want) {
        for (size_t i = 0; i < n; i++)
            if (!strcmp(names[i], want)) return names[i];
        return NULL;
    }
    if (want_tools)
        for (size_t i = 0; i < n; i++)
            if (!strcmp(names[i], "tool_use")) return names[i];
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], "default")) return names[i];
    return NULL;
}

static const char *const special_keys[] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

/* A token as tokenizer_config.json writes it: a string or an AddedToken object. */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        const json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

int ob_chat_source_from_tokenizer_config(const char *path, const char *name, int want_tools,
                                         ob_chat_source *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!cfg) return ERR("tokenizer config '%s': line %d: %s", path, je.line, je.text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return ERR("tokenizer config '%s': not a JSON object", path);
    }
    out->specials = json_object();
    for (size_t i = 0; i < sizeof special_keys / sizeof special_keys[0]; i++) {
        const char *t = token_text(json_object_get(cfg, special_keys[i]));
        if (t) json_object_set_new(out->specials, special_keys[i], json_string(t));
    }
    const json_t *extra = json_object_get(cfg, "additional_special_tokens");
    if (json_is_array(extra) && json_array_size(extra) > 0) {
        json_t *list = json_array();
        size_t i;
        const json_t *v;
        json_array_foreach(extra, i, v) {
            const char *t = token_text(v);
            if (t) json_array_append_new(list, json_string(t));
        }
        json_object_set_new(out->specials, "additional_special_tokens", list);
    }
    const json_t *ct = json_object_get(cfg, "chat_template");
    const char *src = NULL;
    if (json_is_string(ct)) {
        src = json_string_value(ct);
    } else if (json_is_array(ct)) {
        /* [{"name": ..., "template": ...}, ...] */
        size_t n = json_array_size(ct);
        const char **names = calloc(n + 1, sizeof *names);
        for (size_t i = 0; names && i < n; i++) {
            const json_t *nm = json_object_get(json_array_get(ct, i), "name");
            names[i] = json_is_string(nm) ? json_string_value(nm) : "";
        }
        const char *pick = names ? pick_named(names, n, name, want_tools) : NULL;
        for (size_t i = 0; pick && i < n; i++)
            if (names[i] == pick) src = json_string_value(json_object_get(json_array_get(ct, i), "template"));
        free(names);
        if (!src) {
            json_decref(cfg);
            ob_chat_source_free(out);
            return ERR("tokenizer config '%s': no chat template named '%s'", path, name ? name : "default");
        }
    } else if (name) {
        json_decref(cfg);
        ob_chat_source_free(out);
        return ERR("tokenizer config '%s': no chat template named '%s'", path, name);
    }
    if (src) {
        out->template_src = strdup(src);
        json_decref(cfg);
        if (!out->template_src) {
            ob_chat_source_free(out);
            return ERR("chat template: out of memory");
        }
        return 0;
    }
    json_decref(cfg);
    /* newer checkpoints keep the template in chat_template.jinja beside the config */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *jpath = malloc(dirlen + sizeof "chat_template.jinja");
    if (!jpath) {
        ob_chat_source_free(out);
        return ERR("chat template: out of memory");
    }
    memcpy(jpath, path, dirlen);
    strcpy(jpath + dirlen, "chat_template.jinja");
    FILE *f = fopen(jpath, "rb");
    if (!f) {   /* no template: the caller may still use the special tokens */
        free(jpath);
        return 0;
    }
    fclose(f);
    int rc = read_file(jpath, &out->template_src, err, errlen);
    free(jpath);
    if (rc) ob_chat_source_free(out);
    return rc;
}

int ob_chat_source_from_gguf(const char *path, const char *name, int want_tools,
                             ob_chat_source *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ob_gguf_t *g;
    if (ob_gguf_open(path, &g, err, errlen)) return -1;
    /* named templates: tokenizer.chat_template.NAME; tokenizer.chat_templates lists names */
    const ob_gguf_value *v = NULL;
    char key[256];
    const char *pick = name;
    if (!pick) {
        const ob_gguf_value *names = ob_gguf_get(g, "tokenizer.chat_templates");
        if (names && names->type == OB_GGUF_ARRAY && names->v.arr.elem_type == OB_GGUF_STRING) {
            size_t n = (size_t)names->v.arr.n;
            const char **list = calloc(n + 1, sizeof *list);
            for (size_t i = 0; list && i < n; i++) list[i] = names->v.arr.items[i].v.str.ptr;
            if (list && want_tools) pick = pick_named(list, n, "tool_use", 0);
            free(list);
        }
    }
    if (pick) {
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", pick);
        v = ob_gguf_get(g, key);
        if (!v && name) {
            ob_gguf_close(g);
            return ERR("'%s': no chat template named '%s' (key %s)", path, name, key);
        }
    }
    if (!v) v = ob_gguf_get(g, "tokenizer.chat_template");
    out->specials = json_object();
    if (v && v->type == OB_GGUF_STRING) {   /* no template: the caller may still use the tokens */
        out->template_src = malloc(v->v.str.len + 1);
        if (!out->template_src) {
            ob_gguf_close(g);
            ob_chat_source_free(out);
            return ERR("chat template: out of memory");
        }
        memcpy(out->template_src, v->v.str.ptr, v->v.str.len);
        out->template_src[v->v.str.len] = 0;
    }
    static const char *const ids[][2] = {
        {"tokenizer.ggml.bos_token_id", "bos_token"}, {"tokenizer.ggml.eos_token_id", "eos_token"},
        {"tokenizer.ggml.unknown_token_id", "unk_token"}, {"tokenizer.ggml.seperator_token_id", "sep_token"},
        {"tokenizer.ggml.padding_token_id", "pad_token"}, {"tokenizer.ggml.cls_token_id", "cls_token"},
        {"tokenizer.ggml.mask_token_id", "mask_token"},
    };
    const ob_gguf_value *toks = ob_gguf_get(g, "tokenizer.ggml.tokens");
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t id;
        char e2[64];
        if (ob_gguf_get_i64(g, ids[i][0], &id, e2, sizeof e2) != 1) continue;
        if (!toks || toks->type != OB_GGUF_ARRAY || toks->v.arr.elem_type != OB_GGUF_STRING) continue;
        if (id < 0 || (uint64_t)id >= toks->v.arr.n) continue;
        const ob_gguf_value *t = &toks->v.arr.items[id];
        json_object_set_new(out->specials, ids[i][1], json_stringn(t->v.str.ptr, (size_t)t->v.str.len));
    }
    ob_gguf_close(g);
    return 0;
}

int ob_chat_render(const ob_tmpl_t *t, const json_t *specials, const json_t *messages,
                   const json_t *tools, int add_generation_prompt, const json_t *extra,
                   const ob_tmpl_opts *opts, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (!json_is_array(messages)) return ERR("chat template: messages must be a JSON array");
    if (tools && !json_is_array(tools) && !json_is_null(tools)) return ERR("chat template: tools must be a JSON array");
    if (extra && !json_is_object(extra)) return ERR("chat template: extra variables must be a JSON object");
    json_t *vars = json_object();
    if (json_is_object(specials)) json_object_update(vars, (json_t *)specials);
    if (extra) json_object_update(vars, (json_t *)extra);
    json_object_set(vars, "messages", (json_t *)messages);
    json_object_set_new(vars, "tools", tools ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
    int rc = ob_tmpl_render(t, vars, opts, out, out_len, err, errlen);
    json_decref(vars);
    return rc;
}
