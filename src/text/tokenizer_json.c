/* tokenizer_json.c — a Hugging Face tokenizer.json -> an ob_tokenizer_spec -> a tokenizer.
 *
 * Owns: reading the model (BPE, WordPiece) with its vocabulary, merges and options; added_tokens
 * with their flags, ids assigned as Hugging Face assigns them (a content already in the model's
 * vocabulary keeps that id, a new one takes the next id after it); the post_processor
 * (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence) as the ids put
 * around a text; and handing the normalizer, pre_tokenizer and decoder objects to their modules.
 * Also ob_tokenizer_load, which opens either a GGUF file or a tokenizer.json.
 * Does not own: what the pipeline steps do (normalize.c, prechain.c, detok.c), building
 * (tokenizer.c).
 *
 * Every error names the file and the field (model.vocab, added_tokens[3].content, ...). Nothing
 * in the file is trusted: ids are range-checked, strings may hold any bytes (NUL included).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "text/tokenizer_int.h"
#include "text/tokenizer_json.h"

#define MAX_ID (1 << 24)   /* more token ids than any vocabulary has; keeps arrays sane */

typedef struct {
    const char *what;      /* file name for messages */
    char *err;
    size_t errlen;
} jctx;

#define JERR(...) do { int _o = snprintf(c->err, c->errlen, "%s: ", c->what); \
    if (_o >= 0 && (size_t)_o < c->errlen) snprintf(c->err + _o, c->errlen - (size_t)_o, __VA_ARGS__); } while (0)

static int jbool(const json_t *o, const char *k, int def) {
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* An optional string option: NULL when absent or null; -1 when of another type. */
static int opt_str(jctx *c, const json_t *o, const char *k, const char **out) {
    const json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) { JERR("model.%s: expected a string", k); return -1; }
    *out = json_string_value(v);
    return 0;
}

typedef struct {
    int32_t n;                 /* ids 0..n-1 */
    const char **text;
    size_t *len;
    uint8_t *type, *added;
    char **owned;              /* merge strings built from [a, b] pairs */
    const char **merge;
    size_t *merge_len, *merge_split;
    int64_t n_merges;
} vocab_t;

static void vocab_free(vocab_t *v) {
    free(v->text); free(v->len); free(v->type); free(v->added);
    for (int64_t i = 0; v->owned && i < v->n_merges; i++) free(v->owned[i]);
    free(v->owned); free(v->merge); free(v->merge_len); free(v->merge_split);
}

/* The id of a content string in the model vocabulary object, or -1. */
static int32_t vocab_id(const json_t *vocab, const char *s, size_t n) {
    const json_t *v = json_object_getn(vocab, s, n);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
}

static int read_vocab(jctx *c, const json_t *model, const json_t *added, vocab_t *v, int32_t **added_ids) {
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) { JERR("model.vocab: expected an object {token: id}"); return -1; }
    if (json_object_size(vocab) == 0) { JERR("model.vocab: the vocabulary is empty"); return -1; }
    if (added && !json_is_array(added) && !json_is_null(added)) { JERR("added_tokens: expected an array"); return -1; }
    int32_t n = 0;
    const char *key;
    size_t klen;
    json_t *val;
    void *tmp;
    json_object_keylen_foreach_safe((json_t *)vocab, tmp, key, klen, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= MAX_ID) {
            JERR("model.vocab['%.60s']: id must be an integer in 0..%d", key, MAX_ID - 1);
            return -1;
        }
        if (klen == 0) { JERR("model.vocab: an empty token text"); return -1; }
        if (json_integer_value(val) >= n) n = (int32_t)json_integer_value(val) + 1;
    }
    /* Hugging Face: an added token already in the model vocabulary keeps its id; a new one
     * takes the next id, counting from the model's vocabulary size. */
    size_t na = json_array_size(added);
    int32_t next_id = (int32_t)json_object_size(vocab);
    *added_ids = calloc(na + 1, sizeof **added_ids);
    if (!*added_ids) { JERR("out of memory"); return -1; }
    for (size_t i = 0; i < na; i++) {
        const json_t *a = json_array_get(added, i), *ct = json_object_get(a, "content");
        if (!json_is_object(a) || !json_is_string(ct)) { JERR("added_tokens[%zu]: needs a string 'content'", i); return -1; }
        const json_t *jid = json_object_get(a, "id");
        if (jid && (!json_is_integer(jid) || json_integer_value(jid) < 0 || json_integer_value(jid) >= MAX_ID)) {
            JERR("added_tokens[%zu].id: must be an integer in 0..%d", i, MAX_ID - 1);
            return -1;
        }
        size_t cl = json_string_length(ct);
        int32_t id = -1;
        if (cl == 0) { (*added_ids)[i] = -1; continue; }   /* Hugging Face ignores empty ones */
        id = vocab_id(vocab, json_string_value(ct), cl);
        for (size_t k = 0; id < 0 && k < i; k++) {
            const json_t *ck = json_object_get(json_array_get(added, k), "content");
            if ((*added_ids)[k] >= 0 && json_string_length(ck) == cl && memcmp(json_string_value(ck), json_string_value(ct), cl) == 0)
                id = (*added_ids)[k];
        }
        if (id < 0) {
            if (next_id >= MAX_ID) { JERR("added_tokens: too many tokens"); return -1; }
            id = next_id++;
        }
        (*added_ids)[i] = id;
        if (id >= n) n = id + 1;
    }
    v->n = n;
    v->text = calloc((size_t)n, sizeof *v->text);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->type = malloc((size_t)n);
    v->added = calloc((size_t)n, 1);
    if (!v->text || !v->len || !v->type || !v->added) { JERR("out of memory"); return -1; }
    memset(v->type, OB_TOKTYPE_UNUSED, (size_t)n);
    json_object_keylen_foreach_safe((json_t *)vocab, tmp, key, klen, val) {
        int32_t id = (int32_t)json_integer_value(val);
        v->text[id] = key;
        v->len[id] = klen;
        v->type[id] = ob_tok_parse_byte(key, klen) >= 0 ? OB_TOKTYPE_BYTE : OB_TOKTYPE_NORMAL;
    }
    for (size_t i = 0; i < na; i++) {
        int32_t id = (*added_ids)[i];
        if (id < 0) continue;
        const json_t *a = json_array_get(added, i), *ct = json_object_get(a, "content");
        int special = jbool(a, "special", 0);
        uint8_t f = OB_ADDED;
        if (special) f |= OB_ADDED_SPECIAL;
        if (jbool(a, "normalized", !special)) f |= OB_ADDED_NORMALIZED;
        if (jbool(a, "lstrip", 0)) f |= OB_ADDED_LSTRIP;
        if (jbool(a, "rstrip", 0)) f |= OB_ADDED_RSTRIP;
        if (jbool(a, "single_word", 0)) f |= OB_ADDED_SINGLE_WORD;
        if (v->text[id] && !(v->added[id] & OB_ADDED)) f |= OB_ADDED_MODEL;
        else if (v->added[id] & OB_ADDED_MODEL) f |= OB_ADDED_MODEL;
        v->added[id] = f;
        v->text[id] = json_string_value(ct);
        v->len[id] = json_string_length(ct);
        v->type[id] = special ? OB_TOKTYPE_CONTROL : OB_TOKTYPE_USER_DEFINED;
    }
    for (int32_t i = 0; i < n; i++) if (!v->text[i]) v->text[i] = "";
    return 0;
}

static int read_merges(jctx *c, const json_t *model, vocab_t *v) {
    const json_t *m = json_object_get(model, "merges");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_array(m)) { JERR("model.merges: expected an array"); return -1; }
    size_t nm = json_array_size(m);
    if (nm > (size_t)INT32_MAX) { JERR("model.merges: too many merges"); return -1; }
    v->n_merges = (int64_t)nm;
    v->merge = calloc(nm + 1, sizeof *v->merge);
    v->merge_len = calloc(nm + 1, sizeof *v->merge_len);
    v->merge_split = calloc(nm + 1, sizeof *v->merge_split);
    v->owned = calloc(nm + 1, sizeof *v->owned);
    if (!v->merge || !v->merge_len || !v->merge_split || !v->owned) { JERR("out of memory"); return -1; }
    for (size_t i = 0; i < nm; i++) {
        const json_t *e = json_array_get(m, i);
        if (json_is_string(e)) {
            const char *s = json_string_value(e);
            size_t l = json_string_length(e), sp = 0;
            while (sp < l && s[sp] != ' ') sp++;
            if (sp == 0 || sp + 1 >= l) { JERR("model.merges[%zu]: '%.60s' is not \"left right\"", i, s); return -1; }
            v->merge[i] = s;
            v->merge_len[i] = l;
            v->merge_split[i] = sp;
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            const json_t *a = json_array_get(e, 0), *b = json_array_get(e, 1);
            size_t la = json_string_length(a), lb = json_string_length(b);
            if (!la || !lb) { JERR("model.merges[%zu]: an empty part", i); return -1; }
            char *s = malloc(la + lb + 2);
            if (!s) { JERR("out of memory"); return -1; }
            memcpy(s, json_string_value(a), la);
            s[la] = ' ';
            memcpy(s + la + 1, json_string_value(b), lb);
            s[la + lb + 1] = 0;
            v->owned[i] = s;
            v->merge[i] = s;
            v->merge_len[i] = la + lb + 1;
            v->merge_split[i] = la;
        } else {
            JERR("model.merges[%zu]: expected \"left right\" or [left, right]", i);
            return -1;
        }
    }
    return 0;
}

/* special_tokens[name].ids of a TemplateProcessing, appended to ids. */
static int template_ids(jctx *c, const json_t *pp, const char *name, int32_t *ids, int *n, int32_t n_tok) {
    const json_t *st = json_object_get(json_object_get(pp, "special_tokens"), name);
    const json_t *list = json_object_get(st, "ids");
    if (!json_is_array(list)) { JERR("post_processor.special_tokens['%.60s'].ids: missing", name); return -1; }
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *x = json_array_get(list, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= n_tok) {
            JERR("post_processor.special_tokens['%.60s'].ids[%zu]: not a token id", name, i);
            return -1;
        }
        if (*n >= OB_TOK_MAX_POST) { JERR("post_processor: more than %d special tokens around a text", OB_TOK_MAX_POST); return -1; }
        ids[(*n)++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

static int pair_id(jctx *c, const json_t *pp, const char *k, int32_t n_tok, int32_t *id) {
    const json_t *p = json_object_get(pp, k), *x = json_array_get(p, 1);
    if (!json_is_array(p) || !json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= n_tok) {
        JERR("post_processor.%s: expected [token, id] with a valid id", k);
        return -1;
    }
    *id = (int32_t)json_integer_value(x);
    return 0;
}

static int read_post(jctx *c, const json_t *pp, ob_tokenizer_spec *s, int depth) {
    if (!pp || json_is_null(pp)) return 0;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) { JERR("post_processor: missing 'type'"); return -1; }
    if (!strcmp(type, "ByteLevel")) return 0;   /* offsets only */
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list) || depth > 8) { JERR("post_processor: Sequence needs a 'processors' array"); return -1; }
        for (size_t i = 0; i < json_array_size(list); i++)
            if (read_post(c, json_array_get(list, i), s, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        if (pair_id(c, pp, "cls", s->n_tokens, &cls) || pair_id(c, pp, "sep", s->n_tokens, &sep)) return -1;
        if (s->n_post_pre >= OB_TOK_MAX_POST || s->n_post_suf >= OB_TOK_MAX_POST) { JERR("post_processor: too many tokens"); return -1; }
        s->post_pre[s->n_post_pre++] = cls;
        s->post_suf[s->n_post_suf++] = sep;
        return 0;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(pp, "single");
        if (!json_is_array(single)) { JERR("post_processor.single: expected an array"); return -1; }
        int seen_seq = 0;
        for (size_t i = 0; i < json_array_size(single); i++) {
            const json_t *it = json_array_get(single, i);
            const json_t *sp = json_object_get(it, "SpecialToken");
            if (json_object_get(it, "Sequence")) { seen_seq = 1; continue; }
            const char *name = json_string_value(json_object_get(sp, "id"));
            if (!name) { JERR("post_processor.single[%zu]: expected {\"Sequence\"} or {\"SpecialToken\": {\"id\"}}", i); return -1; }
            if (template_ids(c, pp, name, seen_seq ? s->post_suf : s->post_pre, seen_seq ? &s->n_post_suf : &s->n_post_pre,
                             s->n_tokens))
                return -1;
        }
        return 0;
    }
    JERR("post_processor: type '%s' is not supported (supported: TemplateProcessing, BertProcessing, "
         "RobertaProcessing, ByteLevel, Sequence)", type);
    return -1;
}

/* bos / eos / unk names from tokenizer_config.json (optional). */
static int32_t config_token(const json_t *cfg, const char *k, const vocab_t *v, const json_t *vocab) {
    const json_t *x = json_object_get(cfg, k);
    if (json_is_object(x)) x = json_object_get(x, "content");
    if (!json_is_string(x)) return -1;
    const char *s = json_string_value(x);
    size_t l = json_string_length(x);
    for (int32_t i = 0; i < v->n; i++)
        if (v->len[i] == l && (v->added[i] & OB_ADDED) && memcmp(v->text[i], s, l) == 0) return i;
    return vocab_id(vocab, s, l);
}

int ob_tokenizer_from_json(const json_t *root, const json_t *config, const char *what, ob_tokenizer_t **out,
                           char *err, size_t errlen) {
    jctx cc = {what ? what : "tokenizer.json", err, errlen}, *c = &cc;
    ob_tokenizer_spec s;
    vocab_t v = {0};
    int32_t *added_ids = NULL;
    int rc = -1;
    char where[256];
    *out = NULL;
    memset(&s, 0, sizeof s);
    if (!json_is_object(root)) { JERR("expected a JSON object"); return -1; }
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) { JERR("model: missing (expected an object)"); return -1; }
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype) mtype = json_object_get(model, "merges") ? "BPE" : json_object_get(model, "max_input_chars_per_word") ? "WordPiece" : "?";
    int is_bpe = !strcmp(mtype, "BPE"), is_wp = !strcmp(mtype, "WordPiece");
    if (!is_bpe && !is_wp) { JERR("model.type '%s' is not supported (supported: BPE, WordPiece)", mtype); return -1; }
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0) {
        JERR("model.dropout: BPE dropout (random merges, for training) is not supported");
        return -1;
    }
    if (read_vocab(c, model, json_object_get(root, "added_tokens"), &v, &added_ids)) goto done;
    if (is_bpe && read_merges(c, model, &v)) goto done;

    s.hf = 1;
    s.model = is_wp ? OB_TOK_MODEL_WORDPIECE : OB_TOK_MODEL_HF_BPE;
    s.n_tokens = v.n;
    s.text = v.text;
    s.text_len = v.len;
    s.type = v.type;
    s.added = v.added;
    s.merge = v.merge;
    s.merge_len = v.merge_len;
    s.merge_split = v.merge_split;
    s.n_merges = v.n_merges;
    s.bos = s.eos = s.unk = s.pad = s.eot = s.eom = -1;
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) s.extra_eog[i] = -1;

    const char *unk = NULL, *prefix = NULL, *suffix = NULL;
    if (opt_str(c, model, "unk_token", &unk) || opt_str(c, model, "continuing_subword_prefix", &prefix) ||
        (is_bpe && opt_str(c, model, "end_of_word_suffix", &suffix)))
        goto done;
    if (is_wp && !unk) unk = "[UNK]";
    if (unk) s.unk = vocab_id(json_object_get(model, "vocab"), unk, strlen(unk));
    s.cont_prefix = prefix;
    s.eow_suffix = suffix;
    s.byte_fallback = jbool(model, "byte_fallback", 0);
    s.fuse_unk = jbool(model, "fuse_unk", 0);
    s.ignore_merges = jbool(model, "ignore_merges", 0);
    if (is_wp) {
        const json_t *mc = json_object_get(model, "max_input_chars_per_word");
        if (mc && (!json_is_integer(mc) || json_integer_value(mc) < 1)) { JERR("model.max_input_chars_per_word: expected a positive integer"); goto done; }
        s.wp_max_chars = mc ? (int)(json_integer_value(mc) > INT_MAX ? INT_MAX : json_integer_value(mc)) : 100;
    }
    if (read_post(c, json_object_get(root, "post_processor"), &s, 0)) goto done;

    snprintf(where, sizeof where, "%.200s: normalizer", c->what);
    if (ob_norm_from_json(json_object_get(root, "normalizer"), where, &s.norm, err, errlen)) goto done;
    snprintf(where, sizeof where, "%.200s: pre_tokenizer", c->what);
    if (ob_prechain_from_json(json_object_get(root, "pre_tokenizer"), where, &s.prechain, err, errlen)) goto done;
    snprintf(where, sizeof where, "%.200s: decoder", c->what);
    if (ob_decoder_from_json(json_object_get(root, "decoder"), where, &s.decoder, err, errlen)) goto done;
    /* The byte-level BPE path works on raw bytes; it covers BPE under a ByteLevel pre-tokenizer
     * unless a character-level option is in use. */
    if (is_bpe && ob_prechain_byte_level(s.prechain) && !s.byte_fallback && !(prefix && *prefix) && !(suffix && *suffix) &&
        s.unk < 0)
        s.model = OB_TOK_MODEL_BPE;

    /* BOS / EOS: tokenizer_config.json when given, else the first token the template puts before
     * a text is BOS. */
    s.bos = config_token(config, "bos_token", &v, json_object_get(model, "vocab"));
    s.eos = config_token(config, "eos_token", &v, json_object_get(model, "vocab"));
    if (s.bos < 0 && s.n_post_pre > 0) s.bos = s.post_pre[0];
    s.pad = config_token(config, "pad_token", &v, json_object_get(model, "vocab"));
    rc = ob_tokenizer_build(&s, out, err, errlen);
    s.norm = NULL; s.prechain = NULL; s.decoder = NULL;   /* the builder took them */
done:
    ob_norm_free(s.norm);
    ob_prechain_free(s.prechain);
    ob_decoder_free(s.decoder);
    vocab_free(&v);
    free(added_ids);
    return rc;
}

json_t *ob_json_load_file(const char *path, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) snprintf(err, errlen, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
    return j;
}

int ob_tokenizer_load_json(const char *path, ob_tokenizer_t **out, char *err, size_t errlen) {
    *out = NULL;
    json_t *root = ob_json_load_file(path, err, errlen);
    if (!root) return -1;
    /* tokenizer_config.json beside it, when there, names BOS / EOS */
    char cpath[4096];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    snprintf(cpath, sizeof cpath, "%.*stokenizer_config.json", dl, path);
    json_error_t je;
    json_t *cfg = json_load_file(cpath, 0, &je);
    int rc = ob_tokenizer_from_json(root, cfg, path, out, err, errlen);
    json_decref(cfg);
    json_decref(root);
    return rc;
}

int ob_tokenizer_load(const char *path, ob_tokenizer_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!path) { snprintf(err, errlen, "tokenizer: no path"); return -1; }
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", path); return -1; }
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        ob_gguf_t *g = NULL;
        if (ob_gguf_open(path, &g, err, errlen) != 0) return -1;
        int rc = ob_tokenizer_load_gguf(g, out, err, errlen);
        ob_gguf_close(g);
        return rc;
    }
    return ob_tokenizer_load_json(path, out, err, errlen);
}
