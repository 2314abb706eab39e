/* convert_vocab.c — config.json and tokenizer files -> GGUF keys, for `1bit convert`.
 *
 * Owns: reading HF config.json hyperparameters; turning a byte-level BPE tokenizer.json
 * (GPT-2 / Llama 3 / Qwen2 style) into llama.cpp's tokenizer.ggml.* keys (tokens ordered by
 * id, padded with [PAD<i>] like llama.cpp, token types, merges, the pre-tokenizer name matched
 * from the split regex, BOS/EOS, add_bos) plus the chat template; and a synthetic vocabulary
 * for random-weight models.
 * Does not own: tokenizing (text/tokenizer), SentencePiece tokenizer.model files (the
 * tokenizer issue adds them; until then such a checkpoint is refused with a message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/convert.h"

#include "util/err.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* Split regexes of the pre-tokenizers llama.cpp names (as tokenizer.json spells them). */
static const struct { const char *pre; const char *regex; } known_pre[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

json_t *ob_cv_load_json(const char *path, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) snprintf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    return j;
}

static int get_int(json_t *o, const char *key, int def, int *out) {
    json_t *v = json_object_get(o, key);
    if (json_is_array(v) && json_array_size(v) > 0) v = json_array_get(v, 0); /* eos lists: first */
    if (!v || json_is_null(v)) { *out = def; return 0; }
    if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > (1 << 30)) return -1;
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double def, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = def; return 0; }
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 0;
}

int ob_cv_read_config(json_t *cfg, const char *path, ob_cv_hparams *hp, char *err, size_t errlen) {
    memset(hp, 0, sizeof *hp);
    const char *ikeys[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"};
    int *idst[] = {&hp->n_embd, &hp->n_ff, &hp->n_layer, &hp->n_head, &hp->n_vocab};
    for (int i = 0; i < 5; i++)
        if (get_int(cfg, ikeys[i], -1, idst[i]) || *idst[i] < 1)
            return ERR("%s: field '%s' is missing or not a positive integer", path, ikeys[i]);
    if (get_int(cfg, "num_key_value_heads", hp->n_head, &hp->n_head_kv) || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv)
        return ERR("%s: field 'num_key_value_heads' must divide num_attention_heads", path);
    if (get_int(cfg, "head_dim", hp->n_embd / hp->n_head, &hp->head_dim) || hp->head_dim < 2 || hp->head_dim % 2)
        return ERR("%s: field 'head_dim' must be a positive even integer", path);
    if (get_int(cfg, "max_position_embeddings", 2048, &hp->n_ctx) || hp->n_ctx < 1)
        return ERR("%s: field 'max_position_embeddings' must be a positive integer", path);
    if (get_num(cfg, "rms_norm_eps", 1e-6, &hp->eps) || !(hp->eps > 0 && hp->eps < 1))
        return ERR("%s: field 'rms_norm_eps' must be a number in (0, 1)", path);
    /* transformers >= 5 nests rope settings in "rope_parameters"; older configs have
     * top-level "rope_theta" and "rope_scaling". */
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!json_is_object(rp)) rp = NULL;
    if (get_num(rp ? rp : cfg, "rope_theta", 10000.0, &hp->theta) || !(hp->theta > 1))
        return ERR("%s: field 'rope_theta' must be a number > 1", path);
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    hp->tied = json_is_boolean(tie) ? json_is_true(tie) : -1;
    if (get_int(cfg, "bos_token_id", -1, &hp->bos) || get_int(cfg, "eos_token_id", -1, &hp->eos))
        return ERR("%s: fields 'bos_token_id' / 'eos_token_id' must be integers", path);
    json_t *rs = rp ? rp : json_object_get(cfg, "rope_scaling");
    if (json_is_object(rs)) {
        json_t *t = json_object_get(rs, "rope_type");
        if (!json_is_string(t)) t = json_object_get(rs, "type");
        const char *type = json_is_string(t) ? json_string_value(t) : "";
        if (strcmp(type, "default") == 0) type = "";
        if (strcmp(type, "") && strcmp(type, "linear") && strcmp(type, "llama3"))
            return ERR("%s: rope_scaling type '%s' is not supported (linear and llama3 are)", path, type);
        snprintf(hp->rope_type, sizeof hp->rope_type, "%s", type);
        if (get_num(rs, "factor", 1.0, &hp->rope_factor) || !(hp->rope_factor > 0) ||
            get_num(rs, "low_freq_factor", 1.0, &hp->low_freq_factor) ||
            get_num(rs, "high_freq_factor", 4.0, &hp->high_freq_factor) ||
            get_num(rs, "original_max_position_embeddings", 8192, &hp->orig_ctx))
            return ERR("%s: field 'rope_scaling' has a bad number", path);
        if (strcmp(type, "llama3") == 0 && !(hp->high_freq_factor > hp->low_freq_factor))
            return ERR("%s: rope_scaling high_freq_factor must exceed low_freq_factor", path);
    }
    return 0;
}

static const char *special_content(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* Picks llama.cpp's pre-tokenizer name from tokenizer.json's pre_tokenizer. */
static int detect_pre(json_t *pt, const char **pre, char *err, size_t errlen) {
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) {
        json_t *ur = json_object_get(pt, "use_regex");
        if (!ur || json_is_true(ur)) { *pre = "gpt-2"; return 0; } /* llama.cpp spells it so */
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pt, "pretokenizers");
        for (size_t i = 0; i < json_array_size(list); i++) {
            json_t *p = json_array_get(list, i);
            const char *pty = json_string_value(json_object_get(p, "type"));
            if (!pty || strcmp(pty, "Split") != 0) continue;
            const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
            for (size_t k = 0; re && k < sizeof known_pre / sizeof known_pre[0]; k++)
                if (strcmp(re, known_pre[k].regex) == 0) { *pre = known_pre[k].pre; return 0; }
            return ERR("tokenizer.json: pre-tokenizer split regex '%s' is not one this converter knows", re ? re : "?");
        }
    }
    return ERR("tokenizer.json: pre_tokenizer of type '%s' is not supported yet (byte-level BPE only)", type ? type : "?");
}

static int set_tokens(ob_gguf_writer_t *w, char **tokens, int32_t *types, int n) {
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, NULL, (uint64_t)n);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types, (uint64_t)n);
    return 0;
}

int ob_cv_vocab_from_dir(ob_gguf_writer_t *w, const char *dir, ob_cv_hparams *hp, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *tj = ob_cv_load_json(path, err, errlen);
    if (!tj) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char ignore[256];
    json_t *tc = ob_cv_load_json(path, ignore, sizeof ignore); /* optional */
    int rc = -1, n = 0;
    char **tokens = NULL;
    int32_t *types = NULL;
    const char **merges = NULL;
    char **merge_bufs = NULL;
    size_t n_merges = 0;

    json_t *model = json_object_get(tj, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    json_t *vocab = json_object_get(model, "vocab");
    if (!mtype || strcmp(mtype, "BPE") != 0 || !json_is_object(vocab)) {
        ERR("%s/tokenizer.json: model type '%s' is not supported yet (byte-level BPE only)", dir, mtype ? mtype : "?");
        goto done;
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        ERR("%s/tokenizer.json: SentencePiece-style BPE (byte_fallback) is not convertible yet", dir);
        goto done;
    }
    const char *pre = NULL;
    if (detect_pre(json_object_get(tj, "pre_tokenizer"), &pre, err, errlen)) goto done;

    /* Vocabulary size: config's, grown to cover every id the tokenizer uses. */
    n = hp->n_vocab;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > (1 << 24)) {
            ERR("%s/tokenizer.json: vocab entry '%s' has a bad id", dir, key);
            goto done;
        }
        if (json_integer_value(val) >= n) n = (int)json_integer_value(val) + 1;
    }
    json_t *added = json_object_get(tj, "added_tokens");
    size_t ai;
    json_array_foreach(added, ai, val) {
        json_t *id = json_object_get(val, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > (1 << 24) ||
            !json_is_string(json_object_get(val, "content"))) {
            ERR("%s/tokenizer.json: added_tokens[%zu] is malformed", dir, ai);
            goto done;
        }
        if (json_integer_value(id) >= n) n = (int)json_integer_value(id) + 1;
    }
    if (n > hp->n_vocab) {
        ERR("%s/tokenizer.json: uses %d ids but config.json vocab_size is %d", dir, n, hp->n_vocab);
        goto done;
    }
    tokens = calloc((size_t)n, sizeof *tokens);
    types = calloc((size_t)n, sizeof *types);
    if (!tokens || !types) { ERR("convert: out of memory"); goto done; }
    json_object_foreach(vocab, key, val) {
        int id = (int)json_integer_value(val);
        free(tokens[id]);
        tokens[id] = strdup(key);
        types[id] = TT_NORMAL;
    }
    json_array_foreach(added, ai, val) {
        int id = (int)json_integer_value(json_object_get(val, "id"));
        free(tokens[id]);
        tokens[id] = strdup(json_string_value(json_object_get(val, "content")));
        types[id] = json_is_true(json_object_get(val, "special")) ? TT_CONTROL : TT_USER;
    }
    for (int i = 0; i < n; i++)
        if (!tokens[i]) {
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", i);
            tokens[i] = strdup(buf);
            types[i] = TT_UNUSED;
        }

    json_t *jm = json_object_get(model, "merges");
    n_merges = json_array_size(jm);
    merges = calloc(n_merges + 1, sizeof *merges);
    merge_bufs = calloc(n_merges + 1, sizeof *merge_bufs);
    for (size_t i = 0; i < n_merges; i++) {
        json_t *m = json_array_get(jm, i);
        if (json_is_string(m)) {
            merges[i] = json_string_value(m);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
            size_t len = strlen(a) + strlen(b) + 2;
            merge_bufs[i] = malloc(len);
            snprintf(merge_bufs[i], len, "%s %s", a, b);
            merges[i] = merge_bufs[i];
        } else {
            ERR("%s/tokenizer.json: merges[%zu] is malformed", dir, i);
            goto done;
        }
    }

    /* BOS / EOS: config.json ids, else tokenizer_config.json's token strings. */
    const char *names[2] = {special_content(json_object_get(tc, "bos_token")), special_content(json_object_get(tc, "eos_token"))};
    int *ids[2] = {&hp->bos, &hp->eos};
    for (int k = 0; k < 2; k++)
        for (int i = 0; *ids[k] < 0 && names[k] && i < n; i++)
            if (strcmp(tokens[i], names[k]) == 0) *ids[k] = i;
    int add_bos = 0;
    json_t *ab = json_object_get(tc, "add_bos_token");
    if (json_is_boolean(ab)) {
        add_bos = json_is_true(ab);
    } else if (hp->bos >= 0 && hp->bos < n) {
        /* A post-processor template that starts with BOS adds it (Llama 3). */
        json_t *single = json_object_get(json_object_get(tj, "post_processor"), "single");
        if (!single) {
            json_t *procs = json_object_get(json_object_get(tj, "post_processor"), "processors");
            for (size_t i = 0; !single && i < json_array_size(procs); i++)
                single = json_object_get(json_array_get(procs, i), "single");
        }
        json_t *first = json_object_get(json_object_get(json_array_get(single, 0), "SpecialToken"), "id");
        add_bos = json_is_string(first) && strcmp(json_string_value(first), tokens[hp->bos]) == 0;
    }

    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    set_tokens(w, tokens, types, n);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, n_merges);
    if (hp->bos >= 0 && hp->bos < n) ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp->bos);
    if (hp->eos >= 0 && hp->eos < n) ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp->eos);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);

    json_t *tmpl = json_object_get(tc, "chat_template");
    if (json_is_array(tmpl)) { /* [{name, template}]: the "default" one */
        json_t *pick = NULL;
        json_array_foreach(tmpl, ai, val) {
            const char *nm = json_string_value(json_object_get(val, "name"));
            if (nm && strcmp(nm, "default") == 0) pick = json_object_get(val, "template");
        }
        tmpl = pick;
    }
    if (json_is_string(tmpl)) {
        ob_gguf_writer_set_str(w, "tokenizer.chat_template", json_string_value(tmpl));
    } else {
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        FILE *f = fopen(path, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long len = ftell(f);
            fseek(f, 0, SEEK_SET);
            char *buf = len > 0 && len < (64 << 20) ? malloc((size_t)len) : NULL;
            if (buf && fread(buf, 1, (size_t)len, f) == (size_t)len)
                ob_gguf_writer_set_strn(w, "tokenizer.chat_template", buf, (size_t)len);
            free(buf);
            fclose(f);
        }
    }
    hp->n_vocab = n;
    rc = 0;
done:
    for (int i = 0; tokens && i < n; i++) free(tokens[i]);
    free(tokens);
    free(types);
    for (size_t i = 0; merge_bufs && i < n_merges; i++) free(merge_bufs[i]);
    free(merge_bufs);
    free(merges);
    json_decref(tj);
    json_decref(tc);
    return rc;
}

/* GPT-2's byte -> printable code point map, as UTF-8. */
static void byte_char(int b, char out[4]) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int k = 0; /* index among the remapped bytes, in byte order */
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

int ob_cv_vocab_synthetic(ob_gguf_writer_t *w, ob_cv_hparams *hp, char *err, size_t errlen) {
    int n = hp->n_vocab;
    if (n < 260) return ERR("convert --random: vocab_size %d is too small for a byte-level vocabulary (>= 260)", n);
    if (hp->bos < 256 || hp->bos >= n) hp->bos = n - 2;
    if (hp->eos < 256 || hp->eos >= n || hp->eos == hp->bos) hp->eos = hp->bos == n - 1 ? n - 2 : n - 1;
    char **tokens = calloc((size_t)n, sizeof *tokens);
    int32_t *types = calloc((size_t)n, sizeof *types);
    char **merges = calloc((size_t)n, sizeof *merges);
    if (!tokens || !types || !merges) { free(tokens); free(types); free(merges); return ERR("convert: out of memory"); }
    char bc[256][4];
    for (int b = 0; b < 256; b++) byte_char(b, bc[b]);
    /* Ids 0..255: single bytes. Then merges of letter pairs, then pair+letter triples, ...: each
     * new token is an earlier token followed by one byte char, so every merge is valid. */
    static const char letters[] = "etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGKQJXZ0123456789";
    int nl = (int)strlen(letters), id = 0, n_merges = 0;
    for (int b = 0; b < 256; b++, id++) {
        tokens[id] = strdup(bc[b]);
        types[id] = TT_NORMAL;
    }
    int base_lo = 0, base_hi = 256; /* tokens extended in the current round */
    while (id < n) {
        int round_start = id;
        for (int t = base_lo; t < base_hi && id < n; t++) {
            if (t < 256 && (t == 0 || !strchr(letters, t))) continue;
            for (int l = 0; l < nl && id < n; l++) {
                if (id == hp->bos || id == hp->eos) { id++; if (id >= n) break; }
                if (id == hp->bos || id == hp->eos) { id++; if (id >= n) break; }
                const char *a = tokens[t], *b = bc[(unsigned char)letters[l]];
                size_t la = strlen(a), lb = strlen(b);
                tokens[id] = malloc(la + lb + 1);
                memcpy(tokens[id], a, la);
                memcpy(tokens[id] + la, b, lb + 1);
                types[id] = TT_NORMAL;
                merges[n_merges] = malloc(la + lb + 2);
                snprintf(merges[n_merges], la + lb + 2, "%s %s", a, b);
                n_merges++;
                id++;
            }
        }
        base_lo = round_start;
        base_hi = id;
    }
    tokens[hp->bos] = strdup("<|begin_of_text|>");
    types[hp->bos] = TT_CONTROL;
    tokens[hp->eos] = strdup("<|end_of_text|>");
    types[hp->eos] = TT_CONTROL;
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", "llama-bpe");
    set_tokens(w, tokens, types, n);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, NULL, (uint64_t)n_merges);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)hp->bos);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)hp->eos);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    for (int i = 0; i < n; i++) free(tokens[i]);
    for (int i = 0; i < n_merges; i++) free(merges[i]);
    free(tokens);
    free(types);
    free(merges);
    return 0;
}
