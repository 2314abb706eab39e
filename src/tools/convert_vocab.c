/* convert_vocab.c — config.json and tokenizer files -> GGUF keys, for `1bit convert`.
 *
 * Owns: reading HF config.json hyperparameters; the tokenizer keys of a checkpoint (the
 * tokenizer.json -> GGUF mapping itself is text/tokenizer_export.c: byte-level BPE, SentencePiece-
 * style BPE, WordPiece) plus the chat template; and a synthetic vocabulary for random-weight models.
 * Does not own: tokenizing (text/), SentencePiece tokenizer.model files (checkpoints without a
 * tokenizer.json are refused with a message).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_json.h"
#include "tools/convert.h"

#include "util/err.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

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
    int rc = -1;
    size_t ai;
    json_t *val;
    int32_t n = 0, bos = hp->bos, eos = hp->eos;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    /* The tokenizer module checks the file, writes llama.cpp's keys for its model type and the
     * 1bit key with the rest of the pipeline (text/tokenizer_export.c). */
    if (ob_tokenizer_json_to_gguf(tj, tc, path, w, hp->n_vocab, &bos, &eos, &n, err, errlen)) goto done;
    if (n > hp->n_vocab) {
        ERR("%s/tokenizer.json: uses %d ids but config.json vocab_size is %d", dir, n, hp->n_vocab);
        goto done;
    }
    hp->bos = bos;
    hp->eos = eos;

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
