/* tokenizer_export.c — a tokenizer.json -> the GGUF tokenizer keys `1bit convert` writes.
 *
 * Owns: ob_tokenizer_json_to_gguf (llama.cpp's tokenizer.ggml.* keys: model "gpt2" for byte-level
 * BPE with the pre-tokenizer name llama.cpp knows it by, "llama" for SentencePiece-style BPE with
 * scores and <0xXX> byte tokens, "bert" for WordPiece in llama.cpp's spelling), and the
 * 1bit-specific key OB_GGUF_KEY_HF that carries what those keys cannot say (normalizer,
 * pre-tokenizer, post-processor, decoder, added-token flags: the tokenizer.json minus its
 * vocabulary and merges), plus ob_tokenizer_gguf_hf, which rebuilds the tokenizer.json from a
 * GGUF file that has the key, so a converted file tokenizes exactly as its tokenizer.json.
 * Does not own: the tokenizer (tokenizer.c), reading GGUF keys without the 1bit key
 * (tokenizer_gguf.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "text/tokenizer_int.h"
#include "text/tokenizer_json.h"

#define SP "\xE2\x96\x81"

/* The tokenizer.ggml.pre name llama.cpp uses for a pre-tokenizer (by its split regexes). */
static const char *pre_name(const json_t *pt) {
    const char *re[8];
    int n = 0, bl_regex = 0;
    const char *type = json_string_value(json_object_get(pt, "type"));
    const json_t *list = type && !strcmp(type, "Sequence") ? json_object_get(pt, "pretokenizers") : NULL;
    size_t k = list ? json_array_size(list) : 1;
    for (size_t i = 0; i < k; i++) {
        const json_t *p = list ? json_array_get(list, i) : pt;
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (ty && !strcmp(ty, "Split") && n < 8) re[n++] = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (ty && !strcmp(ty, "ByteLevel")) bl_regex = !json_is_false(json_object_get(p, "use_regex"));
    }
    if (n == 0 && bl_regex) return "gpt-2";
    if (n == 3 && re[0] && !strcmp(re[0], "\\p{N}{1,3}")) return "deepseek-v3";
    static const char *const names[] = {"llama-bpe", "qwen2", "gpt-4o", "qwen35", "tekken", "gpt-2", "seed-coder", NULL};
    for (int i = 0; names[i]; i++) {
        const ob_pretok_def *d = ob_pretok_find(names[i]);
        int m = 0;
        while (m < OB_PRETOK_MAX_REGEX && d->regex[m]) m++;
        int same = m == n && !bl_regex;
        for (int j = 0; same && j < n; j++) same = re[j] && !strcmp(re[j], d->regex[j]);
        if (same) return names[i];
    }
    return "default";   /* llama.cpp's fallback; 1bit reads the exact pipeline from OB_GGUF_KEY_HF */
}

/* llama.cpp's WordPiece spelling: a word start "x" is "▁x", a continuation "##x" is "x". */
static char *wpm_spell(const char *s, size_t n, int special, size_t *len) {
    char *o = malloc(n + 4);
    if (!o) return NULL;
    if (special) memcpy(o, s, n), *len = n;
    else if (n > 2 && !memcmp(s, "##", 2)) memcpy(o, s + 2, n - 2), *len = n - 2;
    else memcpy(o, SP, 3), memcpy(o + 3, s, n), *len = n + 3;
    o[*len] = 0;
    return o;
}

static int has_prefix_space(const json_t *root) {
    /* Prepend("▁") normalizer or a Metaspace that prepends: SentencePiece's add_dummy_prefix */
    const char *dump_n = NULL, *dump_p = NULL;
    char *a = json_dumps(json_object_get(root, "normalizer"), JSON_ENCODE_ANY | JSON_COMPACT);
    char *b = json_dumps(json_object_get(root, "pre_tokenizer"), JSON_ENCODE_ANY | JSON_COMPACT);
    dump_n = a ? a : "";
    dump_p = b ? b : "";
    int r = strstr(dump_n, "\"Prepend\"") != NULL ||
            (strstr(dump_p, "\"Metaspace\"") && !strstr(dump_p, "\"never\"") && !strstr(dump_p, "\"add_prefix_space\":false"));
    free(a);
    free(b);
    return r;
}

int ob_tokenizer_json_to_gguf(const json_t *root, const json_t *config, const char *what, ob_gguf_writer_t *w,
                              int32_t n_min, int32_t *bos, int32_t *eos, int32_t *n_out, char *err, size_t errlen) {
    ob_tokenizer_t *t = NULL;
    if (ob_tokenizer_from_json(root, config, what, &t, err, errlen) != 0) return -1;
    int rc = -1;
    int32_t n = t->n_vocab > n_min ? t->n_vocab : n_min;
    char **tok = calloc((size_t)n, sizeof *tok);
    size_t *len = calloc((size_t)n, sizeof *len);
    int32_t *types = calloc((size_t)n, sizeof *types);
    float *scores = calloc((size_t)n, sizeof *scores);
    const char **merges = NULL;
    char **mown = NULL;
    size_t nm = 0;
    json_t *hf = NULL, *added_only = NULL;
    char *hfs = NULL;
    if (!tok || !len || !types || !scores) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
    int wpm = t->model == OB_TOK_MODEL_WORDPIECE;
    for (int32_t i = 0; i < n; i++) {
        size_t l = 0;
        const char *s = i < t->n_vocab ? tok_text(t, i, &l) : "";
        int ty = i < t->n_vocab ? t->type[i] : OB_TOKTYPE_UNUSED;
        if (ty == OB_TOKTYPE_UNUSED || l == 0) {   /* an id no token has: llama.cpp's padding name */
            char pad[32];
            l = (size_t)snprintf(pad, sizeof pad, "[PAD%d]", i);
            tok[i] = strdup(pad);
            ty = OB_TOKTYPE_UNUSED;
        } else if (wpm) {
            tok[i] = wpm_spell(s, l, ty == OB_TOKTYPE_CONTROL || ty == OB_TOKTYPE_USER_DEFINED, &l);
        } else {
            tok[i] = malloc(l + 1);
            if (tok[i]) memcpy(tok[i], s, l), tok[i][l] = 0;
        }
        if (!tok[i]) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
        len[i] = l;
        types[i] = ty == OB_TOKTYPE_BYTE && t->byte_level ? OB_TOKTYPE_NORMAL : ty;
        scores[i] = ty == OB_TOKTYPE_NORMAL ? -(float)i : 0.0f;
    }
    const char *model = wpm ? "bert" : t->byte_level ? "gpt2" : "llama";
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (t->byte_level) ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre_name(json_object_get(root, "pre_tokenizer")));
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, len, (uint64_t)n);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types, (uint64_t)n);
    if (!strcmp(model, "llama")) {
        ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, scores, (uint64_t)n);
        ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", has_prefix_space(root));
    }
    /* merges, as "left right" */
    const json_t *jm = json_object_get(json_object_get(root, "model"), "merges");
    nm = json_array_size(jm);
    if (nm) {
        merges = calloc(nm, sizeof *merges);
        mown = calloc(nm, sizeof *mown);
        if (!merges || !mown) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
        for (size_t i = 0; i < nm; i++) {
            const json_t *m = json_array_get(jm, i);
            if (json_is_string(m)) { merges[i] = json_string_value(m); continue; }
            const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
            size_t l = strlen(a ? a : "") + strlen(b ? b : "") + 2;
            if (!(mown[i] = malloc(l))) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
            snprintf(mown[i], l, "%s %s", a ? a : "", b ? b : "");
            merges[i] = mown[i];
        }
        ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, (uint64_t)nm);
    }
    /* special ids */
    if (*bos < 0 || *bos >= n) *bos = t->bos;
    if (*eos < 0 || *eos >= n) *eos = t->eos;
    int add_bos = 0, add_eos = 0;
    for (int i = 0; i < t->n_post_pre; i++) if (t->post_pre[i] == *bos) add_bos = 1;
    for (int i = 0; i < t->n_post_suf; i++) if (t->post_suf[i] == *eos) add_eos = 1;
    if (wpm && t->n_post_pre == 1 && t->n_post_suf == 1) {   /* [CLS] text [SEP] */
        *bos = t->post_pre[0];
        *eos = t->post_suf[0];
        add_bos = add_eos = 1;
        ob_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", (uint32_t)*bos);
        ob_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", (uint32_t)*eos);
    }
    if (*bos >= 0) ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)*bos);
    if (*eos >= 0) ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)*eos);
    if (t->unk >= 0) ob_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (t->pad >= 0) ob_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", add_eos);

    /* the pipeline, without the vocabulary and merges the keys above carry */
    hf = json_deep_copy(root);
    added_only = json_array();
    if (!hf || !added_only) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
    json_t *hm = json_object_get(hf, "model");
    json_object_del(hm, "vocab");
    json_object_del(hm, "merges");
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->added && (t->added[i] & OB_ADDED) && !(t->added[i] & OB_ADDED_MODEL)) json_array_append_new(added_only, json_integer(i));
    json_object_set(hf, "onebit_added_only", added_only);
    if (wpm) json_object_set_new(hf, "onebit_spelling", json_string("llama.cpp-wpm"));
    hfs = json_dumps(hf, JSON_COMPACT);
    if (!hfs) { snprintf(err, errlen, "%s: out of memory", what); goto done; }
    ob_gguf_writer_set_str(w, OB_GGUF_KEY_HF, hfs);
    *n_out = n;
    rc = 0;
done:
    for (int32_t i = 0; tok && i < n; i++) free(tok[i]);
    free(tok); free(len); free(types); free(scores);
    for (size_t i = 0; mown && i < nm; i++) free(mown[i]);
    free(mown); free(merges);
    free(hfs);
    json_decref(hf);
    json_decref(added_only);
    ob_tokenizer_free(t);
    return rc;
}

/* ---- reading it back ------------------------------------------------------------------------ */

static const char *gstr(const ob_gguf_value *a, uint64_t i, size_t *l) {
    const ob_gguf_value *it = &a->v.arr.items[i];
    if (it->type != OB_GGUF_STRING || (!it->v.str.ptr && it->v.str.len)) return NULL;
    *l = (size_t)it->v.str.len;
    return it->v.str.ptr ? it->v.str.ptr : "";
}

int ob_tokenizer_gguf_hf(const ob_gguf_t *g, const char *hfs, size_t hfl, ob_tokenizer_t **out, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(hfs, hfl, JSON_ALLOW_NUL, &je);
    int rc = -1;
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "model"))) {
        snprintf(err, errlen, "%s: not a tokenizer.json object (%s)", OB_GGUF_KEY_HF, root ? "no model" : je.text);
        json_decref(root);
        return -1;
    }
    const ob_gguf_value *tv = ob_gguf_get(g, "tokenizer.ggml.tokens");
    const ob_gguf_value *yv = ob_gguf_get(g, "tokenizer.ggml.token_type");
    const ob_gguf_value *mv = ob_gguf_get(g, "tokenizer.ggml.merges");
    if (!tv || tv->type != OB_GGUF_ARRAY || tv->v.arr.elem_type != OB_GGUF_STRING || tv->v.arr.n >= (1u << 24) ||
        (tv->v.arr.n && !tv->v.arr.items)) {
        snprintf(err, errlen, "tokenizer.ggml.tokens: missing or not an array of strings (needed with %s)", OB_GGUF_KEY_HF);
        goto done;
    }
    if (yv && (yv->type != OB_GGUF_ARRAY || yv->v.arr.n != tv->v.arr.n)) {
        snprintf(err, errlen, "tokenizer.ggml.token_type: does not match tokenizer.ggml.tokens");
        goto done;
    }
    int wpm = json_is_string(json_object_get(root, "onebit_spelling"));
    const json_t *ao = json_object_get(root, "onebit_added_only");
    json_t *vocab = json_object();
    json_object_set_new(json_object_get(root, "model"), "vocab", vocab);
    uint64_t n = tv->v.arr.n;
    char *skip = calloc(n + 1, 1);
    if (!skip) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
    for (size_t i = 0; i < json_array_size(ao); i++) {
        json_int_t id = json_integer_value(json_array_get(ao, i));
        if (id >= 0 && (uint64_t)id < n) skip[id] = 1;
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t l;
        const char *s = gstr(tv, i, &l);
        int64_t ty = yv ? ob_gguf_arr_i64(yv, i) : OB_TOKTYPE_NORMAL;
        if (!s) { snprintf(err, errlen, "tokenizer.ggml.tokens[%llu]: not a string", (unsigned long long)i); free(skip); goto done; }
        if (skip[i] || ty == OB_TOKTYPE_UNUSED) continue;
        json_t *id = json_integer((json_int_t)i);
        if (wpm && ty != OB_TOKTYPE_CONTROL && ty != OB_TOKTYPE_USER_DEFINED) {
            char *k = malloc(l + 3);
            if (!k) { json_decref(id); free(skip); goto done; }
            size_t kl;
            if (l > 3 && !memcmp(s, SP, 3)) { memcpy(k, s + 3, l - 3); kl = l - 3; }
            else { memcpy(k, "##", 2); memcpy(k + 2, s, l); kl = l + 2; }
            json_object_setn_new(vocab, k, kl, id);
            free(k);
        } else {
            json_object_setn_new(vocab, s, l, id);
        }
    }
    free(skip);
    if (mv && mv->type == OB_GGUF_ARRAY && mv->v.arr.elem_type == OB_GGUF_STRING && (mv->v.arr.items || !mv->v.arr.n)) {
        json_t *ml = json_array();
        json_object_set_new(json_object_get(root, "model"), "merges", ml);
        for (uint64_t i = 0; i < mv->v.arr.n; i++) {
            size_t l;
            const char *s = gstr(mv, i, &l);
            json_array_append_new(ml, s ? json_stringn(s, l) : json_string(""));
        }
    }
    rc = ob_tokenizer_from_json(root, NULL, OB_GGUF_KEY_HF, out, err, errlen);
done:
    json_decref(root);
    return rc;
}
