/* normalize.c — the normalizer chain of tokenizer.json (see normalize.h).
 *
 * Owns: parsing normalizer objects, and each step's text transform, written after Hugging Face
 * tokenizers' normalizers (the oracle) step by step.
 * Does not own: Unicode tables (utf8proc), regex matching (unicode.c).
 */
#include <utf8proc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/normalize.h"
#include "text/pretok.h"

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_PREPEND, N_REPLACE, N_STRIP, N_STRIP_ACCENTS, N_BERT };

typedef struct {
    int kind;
    char *str;          /* PREPEND: the prefix; REPLACE: the content */
    size_t str_len;
    void *re;           /* REPLACE: the pattern */
    int left, right;    /* STRIP */
    int clean, chinese, strip_accents, lower;   /* BERT */
} nstep;

struct ob_norm {
    int n;
    nstep *step;        /* [n] */
};

void ob_norm_free(ob_norm_t *n) {
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
        free(n->step[i].str);
        if (n->step[i].re) ob_regex_free(n->step[i].re);
    }
    free(n->step);
    free(n);
}

static int jbool(const json_t *o, const char *k, int def) {
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* A {"String": s} or {"Regex": r} pattern. */
static void *pattern_compile(const json_t *p, const char *where, char *err, size_t errlen) {
    const json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    const json_t *v = json_is_string(s) ? s : r;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s: 'pattern' must be {\"String\": ...} or {\"Regex\": ...}", where);
        return NULL;
    }
    char e2[256];
    void *re = ob_regex_compile(json_string_value(v), json_string_length(v), v == s, e2, sizeof e2);
    if (!re) snprintf(err, errlen, "%s: %s", where, e2);
    return re;
}

static int add_step(ob_norm_t *n, const json_t *j, const char *where, int depth, char *err, size_t errlen) {
    if (!json_is_object(j)) { snprintf(err, errlen, "%s: expected an object", where); return -1; }
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) { snprintf(err, errlen, "%s: missing 'type'", where); return -1; }
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) { snprintf(err, errlen, "%s: Sequence needs a 'normalizers' array", where); return -1; }
        if (depth > 8) { snprintf(err, errlen, "%s: Sequence nested too deeply", where); return -1; }
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[256];
            snprintf(w, sizeof w, "%.200s.normalizers[%zu]", where, i);
            if (add_step(n, json_array_get(list, i), w, depth + 1, err, errlen)) return -1;
        }
        return 0;
    }
    nstep st = {0};
    if (!strcmp(type, "NFC")) st.kind = N_NFC;
    else if (!strcmp(type, "NFD")) st.kind = N_NFD;
    else if (!strcmp(type, "NFKC")) st.kind = N_NFKC;
    else if (!strcmp(type, "NFKD")) st.kind = N_NFKD;
    else if (!strcmp(type, "Lowercase")) st.kind = N_LOWER;
    else if (!strcmp(type, "StripAccents")) st.kind = N_STRIP_ACCENTS;
    else if (!strcmp(type, "Strip")) {
        st.kind = N_STRIP;
        st.left = jbool(j, "strip_left", 1);
        st.right = jbool(j, "strip_right", 1);
    } else if (!strcmp(type, "Prepend") || !strcmp(type, "Replace")) {
        const char *key = type[0] == 'P' ? "prepend" : "content";
        const json_t *v = json_object_get(j, key);
        if (!json_is_string(v)) { snprintf(err, errlen, "%s: %s needs a string '%s'", where, type, key); return -1; }
        st.kind = type[0] == 'P' ? N_PREPEND : N_REPLACE;
        st.str_len = json_string_length(v);
        st.str = malloc(st.str_len + 1);
        if (!st.str) { snprintf(err, errlen, "%s: out of memory", where); return -1; }
        memcpy(st.str, json_string_value(v), st.str_len + 1);
        if (st.kind == N_REPLACE && !(st.re = pattern_compile(json_object_get(j, "pattern"), where, err, errlen))) {
            free(st.str);
            return -1;
        }
    } else if (!strcmp(type, "BertNormalizer")) {
        st.kind = N_BERT;
        st.clean = jbool(j, "clean_text", 1);
        st.chinese = jbool(j, "handle_chinese_chars", 1);
        st.lower = jbool(j, "lowercase", 1);
        st.strip_accents = jbool(j, "strip_accents", st.lower);   /* null: follows lowercase */
    } else {
        snprintf(err, errlen, "%s: normalizer type '%s' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                 "Lowercase, Prepend, Replace, Strip, StripAccents, BertNormalizer, Sequence)", where, type);
        return -1;
    }
    nstep *ns = realloc(n->step, ((size_t)n->n + 1) * sizeof *ns);
    if (!ns) { free(st.str); if (st.re) ob_regex_free(st.re); snprintf(err, errlen, "%s: out of memory", where); return -1; }
    n->step = ns;
    n->step[n->n++] = st;
    return 0;
}

int ob_norm_from_json(const json_t *j, const char *where, ob_norm_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    ob_norm_t *n = calloc(1, sizeof *n);
    if (!n) { snprintf(err, errlen, "%s: out of memory", where); return -1; }
    if (add_step(n, j, where, 0, err, errlen)) { ob_norm_free(n); return -1; }
    if (n->n == 0) { ob_norm_free(n); return 0; }   /* an empty Sequence */
    *out = n;
    return 0;
}

/* ---- steps: src -> dst -------------------------------------------------------------------- */

/* Hugging Face normalizes with the unicode-normalization-alignments crate, whose tables are
 * Unicode 9.0: a newer character is unassigned there (a starter that neither decomposes nor
 * composes), so the text is normalized in runs split at such characters, which are copied. */
#define NF_UNICODE_MAJOR 9

/* Unicode normalization form of the valid runs of s (invalid bytes and characters newer than
 * NF_UNICODE_MAJOR are copied). */
static int nf(const char *s, size_t n, int opts, ob_strbuf *dst) {
    size_t i = 0;
    while (i < n) {
        size_t j = i, brk = 0;
        int ascii = 1;
        while (j < n) {
            int32_t cp;
            size_t l = ob_utf8_next((const unsigned char *)s + j, n - j, &cp);
            if (cp < 0) break;
            if (cp >= 0x80) {
                ascii = 0;
                if (!ob_uni_assigned_by(cp, NF_UNICODE_MAJOR) && utf8proc_category(cp) != UTF8PROC_CATEGORY_CN) {
                    brk = l;
                    break;
                }
            }
            j += l;
        }
        if (j > i) {
            if (ascii) {
                if (ob_strbuf_put(dst, s + i, j - i)) return -1;
            } else {
                utf8proc_uint8_t *r = NULL;
                utf8proc_ssize_t rl = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(j - i), &r,
                                                   (utf8proc_option_t)(UTF8PROC_STABLE | opts));
                if (rl < 0) { free(r); return -1; }
                int rc = ob_strbuf_put(dst, r, (size_t)rl);
                free(r);
                if (rc) return -1;
            }
        }
        if (brk) { if (ob_strbuf_put(dst, s + j, brk)) return -1; j += brk; }
        else if (j < n) { if (ob_strbuf_put(dst, s + j, 1)) return -1; j++; }
        i = j;
    }
    return 0;
}

static int is_chinese(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Per-character steps: lowercase, strip accents, BERT's cleaning and CJK padding. */
static int per_char(int what, const char *s, size_t n, ob_strbuf *dst) {
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = ob_utf8_next((const unsigned char *)s + i, n - i, &cp);
        int rc = 0;
        if (cp < 0) rc = ob_strbuf_put(dst, s + i, l);
        else if (what == N_LOWER) {
            int32_t lo[2];
            int k = ob_uni_lower(cp, lo);
            for (int q = 0; q < k && !rc; q++) rc = ob_strbuf_put_cp(dst, lo[q]);
        } else if (what == N_STRIP_ACCENTS) {   /* the same crate's is_combining_mark: Unicode 9.0 */
            if (!ob_uni_is_mark(cp) || !ob_uni_assigned_by(cp, NF_UNICODE_MAJOR)) rc = ob_strbuf_put(dst, s + i, l);
        } else if (what == 'm') {          /* BERT strip accents, after NFD */
            if (!ob_uni8_is_mn(cp)) rc = ob_strbuf_put(dst, s + i, l);
        } else if (what == 'c') {          /* BERT clean_text */
            int ctl = cp != '\t' && cp != '\n' && cp != '\r' && ob_uni8_is_other(cp);
            if (cp == 0 || cp == 0xFFFD || ctl) rc = 0;
            else if (cp == '\t' || cp == '\n' || cp == '\r' || ob_uni_is_whitespace(cp)) rc = ob_strbuf_put(dst, " ", 1);
            else rc = ob_strbuf_put(dst, s + i, l);
        } else {                           /* BERT Chinese characters */
            if (is_chinese(cp)) rc = ob_strbuf_put(dst, " ", 1) || ob_strbuf_put(dst, s + i, l) || ob_strbuf_put(dst, " ", 1);
            else rc = ob_strbuf_put(dst, s + i, l);
        }
        if (rc) return -1;
        i += l;
    }
    return 0;
}

static int strip(const nstep *st, const char *s, size_t n, ob_strbuf *dst) {
    size_t a = 0, b = n;
    while (st->left && a < b) {
        int32_t cp;
        size_t l = ob_utf8_next((const unsigned char *)s + a, b - a, &cp);
        if (!ob_uni_is_whitespace(cp)) break;
        a += l;
    }
    while (st->right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80 && b - k < 4) k--;
        int32_t cp;
        size_t l = ob_utf8_next((const unsigned char *)s + k, b - k, &cp);
        if (k + l != b) { cp = -1; }
        if (!ob_uni_is_whitespace(cp)) break;
        b = k;
    }
    return ob_strbuf_put(dst, s + a, b - a);
}

static int replace(const nstep *st, const char *s, size_t n, ob_strbuf *dst, void *md) {
    size_t pos = 0, done = 0;
    while (pos <= n) {
        size_t ms, me;
        int rc = ob_regex_find(st->re, md, s, n, pos, &ms, &me);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (ob_strbuf_put(dst, s + done, ms - done) || ob_strbuf_put(dst, st->str, st->str_len)) return -1;
        done = me;
        if (me == ms) {   /* an empty match: step over one character */
            if (ms >= n) break;
            size_t l = ob_utf8_len((const unsigned char *)s + ms, n - ms);
            if (ob_strbuf_put(dst, s + ms, l)) return -1;
            done = ms + l;
        }
        pos = done;
    }
    return ob_strbuf_put(dst, s + done, n - done);
}

static int run_step(const nstep *st, const char *s, size_t n, ob_strbuf *dst, ob_strbuf *tmp, void *md) {
    switch (st->kind) {
    case N_NFC: return nf(s, n, UTF8PROC_COMPOSE, dst);
    case N_NFD: return nf(s, n, UTF8PROC_DECOMPOSE, dst);
    case N_NFKC: return nf(s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, dst);
    case N_NFKD: return nf(s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, dst);
    case N_LOWER: case N_STRIP_ACCENTS: return per_char(st->kind, s, n, dst);
    case N_PREPEND:
        if (n && ob_strbuf_put(dst, st->str, st->str_len)) return -1;
        return ob_strbuf_put(dst, s, n);
    case N_REPLACE: return replace(st, s, n, dst, md);
    case N_STRIP: return strip(st, s, n, dst);
    case N_BERT: {
        /* clean -> chinese -> (NFD, drop Mn) -> lowercase, ping-ponging through tmp and dst */
        ob_strbuf *bufs[2] = {tmp, dst};
        const char *cur = s;
        size_t cn = n;
        int k = 0;
        int ops[4], nops = 0;
        if (st->clean) ops[nops++] = 'c';
        if (st->chinese) ops[nops++] = 'h';
        if (st->strip_accents) ops[nops++] = 'm';
        if (st->lower) ops[nops++] = N_LOWER;
        if (nops == 0) return ob_strbuf_put(dst, s, n);
        k = nops % 2 == 0 ? 0 : 1;   /* so that the last op writes into dst */
        for (int i = 0; i < nops; i++, k ^= 1) {
            ob_strbuf *o = bufs[k];
            o->n = 0;
            if (ops[i] == 'm') {
                /* NFD into o, then drop Mn in place */
                if (nf(cur, cn, UTF8PROC_DECOMPOSE, o)) return -1;
                size_t w = 0;
                for (size_t r = 0; r < o->n;) {
                    int32_t cp;
                    size_t l = ob_utf8_next((const unsigned char *)o->p + r, o->n - r, &cp);
                    if (!ob_uni8_is_mn(cp)) { memmove(o->p + w, o->p + r, l); w += l; }
                    r += l;
                }
                o->n = w;
            } else if (per_char(ops[i], cur, cn, o)) {
                return -1;
            }
            cur = o->p ? o->p : "";
            cn = o->n;
        }
        return 0;
    }
    }
    return -1;
}

int ob_norm_apply(const ob_norm_t *nm, const char *s, size_t len, ob_strbuf *out, ob_strbuf *tmp) {
    ob_strbuf t2 = {0};
    void *md = NULL;
    int rc = 0;
    out->n = 0;
    if (!nm) return ob_strbuf_put(out, s, len);
    for (int i = 0; i < nm->n; i++) if (nm->step[i].kind == N_REPLACE && !md && !(md = ob_regex_md_new())) return -1;
    /* Steps alternate between out and tmp; the input of the first is s, of later ones the last
     * output. BERT's sub-steps need a third buffer. */
    ob_strbuf *a = out, *b = tmp;
    const char *cur = s;
    size_t cn = len;
    /* Arrange that the final step lands in out. */
    if (nm->n % 2 == 0) { a = tmp; b = out; }
    for (int i = 0; i < nm->n && rc == 0; i++) {
        a->n = 0;
        rc = run_step(&nm->step[i], cur, cn, a, &t2, md);
        cur = a->p ? a->p : "";
        cn = a->n;
        ob_strbuf *x = a; a = b; b = x;
    }
    ob_strbuf_free(&t2);
    if (md) ob_regex_md_free(md);
    return rc;
}
