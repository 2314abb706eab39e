/* tokenizer_gguf.c — the tokenizer.ggml.* keys of a GGUF file -> an ob_tokenizer_spec.
 *
 * Owns: reading and validating the keys llama.cpp defines (model "gpt2" = byte-level BPE with
 * merges and a pre-tokenizer split regex chosen by tokenizer.ggml.pre; model "llama" =
 * SentencePiece-style with scores and byte fallback), with llama.cpp's defaults; and the
 * 1bit-specific key that carries a tokenizer.json pipeline (see tokenizer_json.c), which takes
 * precedence when present because plain GGUF keys cannot say everything tokenizer.json can.
 * Does not own: building (tokenizer.c), the pre-tokenizer names (pretok.c).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"
#include "text/tokenizer_json.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_MERGES "tokenizer.ggml.merges"

static int is_int_type(int vt) {
    return vt == OB_GGUF_UINT8 || vt == OB_GGUF_INT8 || vt == OB_GGUF_UINT16 || vt == OB_GGUF_INT16 ||
           vt == OB_GGUF_UINT32 || vt == OB_GGUF_INT32 || vt == OB_GGUF_UINT64 || vt == OB_GGUF_INT64;
}

static const char *arr_desc(const ob_gguf_value *v, char *buf, size_t len) {
    if (v->type != OB_GGUF_ARRAY) return ob_gguf_vtype_name(v->type);
    snprintf(buf, len, "array of %s", ob_gguf_vtype_name(v->v.arr.elem_type));
    return buf;
}

/* An optional token id key: absent -> def (dropped when out of range, as llama.cpp does for its
 * defaults); present -> must be a valid id. */
static int read_id(const ob_gguf_t *g, const char *key, int32_t def, int32_t n, int32_t *out,
                   char *err, size_t errlen) {
    int64_t v = 0;
    int rc = ob_gguf_get_i64(g, key, &v, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) { *out = def >= 0 && def < n ? def : -1; return 0; }
    if (v < 0 || v >= n) {
        snprintf(err, errlen, "%s: token id %lld is out of range (the vocabulary has %d tokens)",
                 key, (long long)v, n);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int read_bool(const ob_gguf_t *g, const char *key, int *out, char *err, size_t errlen) {
    int v = 0, rc = ob_gguf_get_bool(g, key, &v, err, errlen);
    if (rc < 0) return -1;
    if (rc > 0) *out = !!v;
    return 0;
}

static const ob_gguf_value *get_str_array(const ob_gguf_t *g, const char *key, char *err, size_t errlen,
                                          int *bad) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    char tn[64];
    *bad = 0;
    if (!v) return NULL;
    if (v->type != OB_GGUF_ARRAY || v->v.arr.elem_type != OB_GGUF_STRING || (v->v.arr.n && !v->v.arr.items)) {
        snprintf(err, errlen, "%s: expected an array of strings, found %s", key, arr_desc(v, tn, sizeof tn));
        *bad = 1;
        return NULL;
    }
    return v;
}

int ob_tokenizer_load_gguf(const ob_gguf_t *g, ob_tokenizer_t **out, char *err, size_t errlen) {
    return ob_tokenizer_load_gguf_ex(g, 1, out, err, errlen);
}

int ob_tokenizer_load_gguf_ex(const ob_gguf_t *g, int use_hf_key, ob_tokenizer_t **out, char *err, size_t errlen) {
    ob_tokenizer_spec s;
    const char *model = NULL, *pre_name = NULL;
    const char **texts = NULL, **merges = NULL;
    size_t *lens = NULL, *merge_lens = NULL;
    uint8_t *types = NULL;
    float *scores = NULL;
    int rc = -1, bad = 0;
    char tn[64];

    *out = NULL;
    memset(&s, 0, sizeof s);
    if (!g) { snprintf(err, errlen, "tokenizer: no file"); return -1; }
    const ob_gguf_value *hv = use_hf_key ? ob_gguf_get(g, OB_GGUF_KEY_HF) : NULL;
    if (hv) {   /* written by 1bit convert: the exact tokenizer.json pipeline */
        if (hv->type != OB_GGUF_STRING || (!hv->v.str.ptr && hv->v.str.len)) {
            snprintf(err, errlen, "%s: expected a string", OB_GGUF_KEY_HF);
            return -1;
        }
        if (ob_tokenizer_gguf_hf(g, hv->v.str.ptr ? hv->v.str.ptr : "", (size_t)hv->v.str.len, out, err, errlen)) return -1;
        ob_tokenizer_t *t = *out;
        int32_t b = -1, e = -1;
        if (read_id(g, "tokenizer.ggml.bos_token_id", -1, t->n_vocab, &b, err, errlen) ||
            read_id(g, "tokenizer.ggml.eos_token_id", -1, t->n_vocab, &e, err, errlen)) {
            ob_tokenizer_free(t);
            *out = NULL;
            return -1;
        }
        if (b >= 0) t->bos = b;
        if (e >= 0) { t->eos = e; t->flags[e] |= TOKF_EOG; }
        return 0;
    }

    int got = ob_gguf_get_str(g, KEY_MODEL, &model, err, errlen);
    if (got < 0) return -1;
    if (got == 0) { snprintf(err, errlen, "%s: missing (the file carries no tokenizer)", KEY_MODEL); return -1; }
    if (strcmp(model, "gpt2") == 0) s.model = OB_TOK_MODEL_BPE;
    else if (strcmp(model, "llama") == 0) s.model = OB_TOK_MODEL_SPM;
    else {
        snprintf(err, errlen, "%s: tokenizer model '%s' is not supported (supported: gpt2, llama)", KEY_MODEL, model);
        return -1;
    }

    /* tokens */
    const ob_gguf_value *tv = get_str_array(g, KEY_TOKENS, err, errlen, &bad);
    if (bad) return -1;
    if (!tv) { snprintf(err, errlen, "%s: missing", KEY_TOKENS); return -1; }
    if (tv->v.arr.n == 0) { snprintf(err, errlen, "%s: the vocabulary is empty", KEY_TOKENS); return -1; }
    if (tv->v.arr.n >= (uint64_t)INT32_MAX) {
        snprintf(err, errlen, "%s: %llu tokens is more than this engine supports", KEY_TOKENS,
                 (unsigned long long)tv->v.arr.n);
        return -1;
    }
    int32_t n = (int32_t)tv->v.arr.n;
    texts = malloc((size_t)n * sizeof *texts);
    lens = malloc((size_t)n * sizeof *lens);
    types = malloc((size_t)n);
    if (!texts || !lens || !types) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
    for (int32_t i = 0; i < n; i++) {
        const ob_gguf_value *it = &tv->v.arr.items[i];
        if (it->type != OB_GGUF_STRING || (!it->v.str.ptr && it->v.str.len)) {
            snprintf(err, errlen, "%s[%d]: expected a string, found %s", KEY_TOKENS, i, ob_gguf_vtype_name(it->type));
            goto done;
        }
        texts[i] = it->v.str.ptr;
        lens[i] = (size_t)it->v.str.len;
        types[i] = OB_TOKTYPE_NORMAL;
    }

    /* token types */
    const ob_gguf_value *yv = ob_gguf_get(g, KEY_TYPES);
    if (yv) {
        if (yv->type != OB_GGUF_ARRAY || !is_int_type(yv->v.arr.elem_type)) {
            snprintf(err, errlen, "%s: expected an array of integers, found %s", KEY_TYPES, arr_desc(yv, tn, sizeof tn));
            goto done;
        }
        if (yv->v.arr.n != (uint64_t)n) {
            snprintf(err, errlen, "%s: %llu entries for %d tokens in %s", KEY_TYPES,
                     (unsigned long long)yv->v.arr.n, n, KEY_TOKENS);
            goto done;
        }
        for (int32_t i = 0; i < n; i++) {
            int64_t ty = ob_gguf_arr_i64(yv, (uint64_t)i);
            if (ty < 0 || ty > OB_TOKTYPE_BYTE) {
                snprintf(err, errlen, "%s[%d]: %lld is not a token type (0..6)", KEY_TYPES, i, (long long)ty);
                goto done;
            }
            types[i] = (uint8_t)ty;
        }
    }

    /* scores */
    const ob_gguf_value *sv = ob_gguf_get(g, KEY_SCORES);
    if (sv) {
        int et = sv->type == OB_GGUF_ARRAY ? sv->v.arr.elem_type : -1;
        if (et != OB_GGUF_FLOAT32 && et != OB_GGUF_FLOAT64 && et != OB_GGUF_INT32) {
            snprintf(err, errlen, "%s: expected an array of floats, found %s", KEY_SCORES, arr_desc(sv, tn, sizeof tn));
            goto done;
        }
        if (sv->v.arr.n != (uint64_t)n) {
            snprintf(err, errlen, "%s: %llu entries for %d tokens in %s", KEY_SCORES,
                     (unsigned long long)sv->v.arr.n, n, KEY_TOKENS);
            goto done;
        }
        scores = malloc((size_t)n * sizeof *scores);
        if (!scores) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) scores[i] = (float)ob_gguf_arr_f64(sv, (uint64_t)i);
    }

    /* model-specific keys and defaults (llama.cpp's) */
    const ob_pretok_def *pre = NULL;
    int32_t def_bos = -1, def_eos = -1, def_unk = -1;
    s.add_bos = 0;
    if (s.model == OB_TOK_MODEL_SPM) {
        def_bos = 1; def_eos = 2; def_unk = 0;
        s.add_bos = 1;
        s.add_space_prefix = 1;
    } else {
        const ob_gguf_value *mv = get_str_array(g, KEY_MERGES, err, errlen, &bad);
        if (bad) goto done;
        if (!mv) { snprintf(err, errlen, "%s: missing (a gpt2 vocabulary needs its merges)", KEY_MERGES); goto done; }
        s.n_merges = (int64_t)mv->v.arr.n;
        if (mv->v.arr.n > (uint64_t)INT32_MAX) { snprintf(err, errlen, "%s: too many merges", KEY_MERGES); goto done; }
        if (s.n_merges) {
            merges = malloc((size_t)s.n_merges * sizeof *merges);
            merge_lens = malloc((size_t)s.n_merges * sizeof *merge_lens);
            if (!merges || !merge_lens) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
            for (int64_t i = 0; i < s.n_merges; i++) {
                const ob_gguf_value *it = &mv->v.arr.items[i];
                int ok = it->type == OB_GGUF_STRING && (it->v.str.ptr || !it->v.str.len);
                merges[i] = ok ? it->v.str.ptr : "";
                merge_lens[i] = ok ? (size_t)it->v.str.len : 0;
            }
        }
        got = ob_gguf_get_str(g, KEY_PRE, &pre_name, err, errlen);
        if (got < 0) goto done;
        if (got == 0) pre_name = "default";   /* llama.cpp: warns, quality degraded */
        pre = ob_pretok_find(pre_name);
        if (!pre) {
            char names[1500];
            ob_pretok_names(names, sizeof names);
            snprintf(err, errlen, "%s: unknown pre-tokenizer '%s' (known: %s)", KEY_PRE, pre_name, names);
            goto done;
        }
        s.add_bos = pre->add_bos;
        s.ignore_merges = pre->ignore_merges;
        s.pre_regex = pre->regex;
        while (s.n_pre_regex < OB_PRETOK_MAX_REGEX && pre->regex[s.n_pre_regex]) s.n_pre_regex++;
    }

    if (read_id(g, "tokenizer.ggml.bos_token_id", def_bos, n, &s.bos, err, errlen) ||
        read_id(g, "tokenizer.ggml.eos_token_id", def_eos, n, &s.eos, err, errlen) ||
        read_id(g, "tokenizer.ggml.unknown_token_id", def_unk, n, &s.unk, err, errlen) ||
        read_id(g, "tokenizer.ggml.padding_token_id", -1, n, &s.pad, err, errlen) ||
        read_id(g, "tokenizer.ggml.eot_token_id", -1, n, &s.eot, err, errlen) ||
        read_id(g, "tokenizer.ggml.eom_token_id", -1, n, &s.eom, err, errlen))
        goto done;
    static const char *const fim_keys[] = {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                           "tokenizer.ggml.fim_sep_token_id"};
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) s.extra_eog[i] = -1;
    for (int i = 0; i < 3; i++)
        if (read_id(g, fim_keys[i], -1, n, &s.extra_eog[i], err, errlen)) goto done;
    if (read_bool(g, "tokenizer.ggml.add_bos_token", &s.add_bos, err, errlen) ||
        read_bool(g, "tokenizer.ggml.add_eos_token", &s.add_eos, err, errlen) ||
        read_bool(g, "tokenizer.ggml.add_space_prefix", &s.add_space_prefix, err, errlen))
        goto done;
    if (s.model != OB_TOK_MODEL_SPM) s.add_space_prefix = 0;   /* SPM-only behaviour */

    s.n_tokens = n;
    s.text = texts;
    s.text_len = lens;
    s.type = types;
    s.score = scores;
    s.merge = merges;
    s.merge_len = merge_lens;
    rc = ob_tokenizer_build(&s, out, err, errlen);
done:
    free(texts); free(lens); free(types); free(scores); free(merges); free(merge_lens);
    return rc;
}
