/* detok.c — token ids -> text: the decoder chain of tokenizer.json, and streaming decoding.
 *
 * Owns: reading a "decoder" object (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
 * WordPiece, BPEDecoder, Sequence), ob_tokenizer_decode and the ob_detok_* streaming decoder.
 *   - tokenizer.json vocabularies decode as Hugging Face's TokenizerImpl::decode: the ids' token
 *     texts (special added tokens dropped when asked), run through the decoder chain step by
 *     step over a list of strings, joined; with no decoder, joined with spaces.
 *   - GGUF vocabularies decode as llama.cpp: the tokens' bytes concatenated (SentencePiece: the
 *     space the encoder prepended dropped from the first piece).
 *   Either way the result is valid UTF-8: ill-formed byte sequences become U+FFFD, one per
 *   maximal ill-formed subpart (Rust's String::from_utf8_lossy, which Hugging Face uses).
 * Streaming decodes the ids since the last chunk as a continuation of the text (first-token rules
 * such as Metaspace's dropped space or Strip's start apply only at the true start) and emits them
 * once they do not end in U+FFFD (an incomplete character): a chunk never ends inside a UTF-8
 * character and the chunks add up to the full decode (two documented exceptions: a Strip that
 * cuts the end of the text, and a ByteFallback run mixing valid and invalid bytes, which the full
 * decode replaces whole).
 * Does not own: token texts and pieces (tokenizer.c).
 *
 * Scratch: ob_tokenizer_decode allocates per call; a streaming decoder keeps its buffers and its
 * id window (at most OB_DETOK_WINDOW ids) from call to call, so steady-state steps do not allocate.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "text/tokenizer_int.h"
#include "text/unicode.h"

#define OB_DETOK_WINDOW 64
#define MAX_DSTEPS 16

enum { D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_WORDPIECE, D_BPE };

typedef struct {
    int kind;
    char *a, *b;          /* REPLACE: content (a); METASPACE: replacement (a); STRIP: content char (a);
                             WORDPIECE: prefix (a); BPE: suffix (a) */
    size_t a_len;
    void *re;             /* REPLACE */
    int x, y;             /* METASPACE: x = prepends; STRIP: start, stop; WORDPIECE: x = cleanup */
} dstep;

struct ob_decoder {
    int n;
    dstep step[MAX_DSTEPS];
};

void ob_decoder_free(ob_decoder_t *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        free(d->step[i].a);
        if (d->step[i].re) ob_regex_free(d->step[i].re);
    }
    free(d);
}

static char *sdup(const char *s, size_t *len) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    if (len) *len = d ? n : 0;
    return d;
}

static int dadd(ob_decoder_t *d, const json_t *j, const char *where, int depth, char *err, size_t errlen) {
    if (!json_is_object(j)) { snprintf(err, errlen, "%s: expected an object", where); return -1; }
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) { snprintf(err, errlen, "%s: missing 'type'", where); return -1; }
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(j, "decoders");
        if (!json_is_array(list)) { snprintf(err, errlen, "%s: Sequence needs a 'decoders' array", where); return -1; }
        if (depth > 8) { snprintf(err, errlen, "%s: Sequence nested too deeply", where); return -1; }
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[256];
            snprintf(w, sizeof w, "%.200s.decoders[%zu]", where, i);
            if (dadd(d, json_array_get(list, i), w, depth + 1, err, errlen)) return -1;
        }
        return 0;
    }
    if (d->n >= MAX_DSTEPS) { snprintf(err, errlen, "%s: more than %d decoder steps", where, MAX_DSTEPS); return -1; }
    dstep st = {0};
    const char *str = NULL;
    if (!strcmp(type, "ByteLevel")) st.kind = D_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) st.kind = D_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) st.kind = D_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        st.kind = D_METASPACE;
        const json_t *r = json_object_get(j, "replacement");
        str = json_is_string(r) ? json_string_value(r) : "\xE2\x96\x81";
        size_t rl = strlen(str);
        if (rl == 0 || ob_utf8_len((const unsigned char *)str, rl) != rl || (rl == 1 && (unsigned char)str[0] >= 0x80)) {
            snprintf(err, errlen, "%s: Metaspace 'replacement' must be one character", where);
            return -1;
        }
        const char *sc = json_string_value(json_object_get(j, "prepend_scheme"));
        const json_t *aps = json_object_get(j, "add_prefix_space");
        st.x = sc ? strcmp(sc, "never") != 0 : !json_is_false(aps);
    } else if (!strcmp(type, "Strip")) {
        st.kind = D_STRIP;
        const json_t *c = json_object_get(j, "content"), *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        if (!json_is_string(c) || !json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
            json_integer_value(b) < 0 || json_integer_value(a) > 1 << 20 || json_integer_value(b) > 1 << 20) {
            snprintf(err, errlen, "%s: Strip needs 'content' (a character), 'start' and 'stop' (counts)", where);
            return -1;
        }
        str = json_string_value(c);
        size_t cl = json_string_length(c);
        if (cl == 0 || ob_utf8_len((const unsigned char *)str, cl) != cl || (cl == 1 && (unsigned char)str[0] >= 0x80)) {
            snprintf(err, errlen, "%s: Strip 'content' must be one character", where);   /* a Rust char */
            return -1;
        }
        st.x = (int)json_integer_value(a);
        st.y = (int)json_integer_value(b);
    } else if (!strcmp(type, "WordPiece")) {
        st.kind = D_WORDPIECE;
        const json_t *p = json_object_get(j, "prefix");
        str = json_is_string(p) ? json_string_value(p) : "##";
        st.x = !json_is_false(json_object_get(j, "cleanup"));
    } else if (!strcmp(type, "BPEDecoder")) {
        st.kind = D_BPE;
        const json_t *p = json_object_get(j, "suffix");
        str = json_is_string(p) ? json_string_value(p) : "</w>";
    } else if (!strcmp(type, "Replace")) {
        st.kind = D_REPLACE;
        const json_t *c = json_object_get(j, "content"), *pat = json_object_get(j, "pattern");
        const json_t *ps = json_object_get(pat, "String"), *pr = json_object_get(pat, "Regex");
        const json_t *pv = json_is_string(ps) ? ps : pr;
        if (!json_is_string(c) || !json_is_string(pv)) {
            snprintf(err, errlen, "%s: Replace needs 'content' and a pattern {\"String\"|\"Regex\": ...}", where);
            return -1;
        }
        char e2[300];
        if (!(st.re = ob_regex_compile(json_string_value(pv), json_string_length(pv), pv == ps, e2, sizeof e2))) {
            snprintf(err, errlen, "%s: %s", where, e2);
            return -1;
        }
        str = json_string_value(c);
    } else {
        snprintf(err, errlen, "%s: decoder type '%s' is not supported (supported: ByteLevel, Metaspace, Replace, "
                 "ByteFallback, Fuse, Strip, WordPiece, BPEDecoder, Sequence)", where, type);
        return -1;
    }
    if (str && !(st.a = sdup(str, &st.a_len))) {
        if (st.re) ob_regex_free(st.re);
        snprintf(err, errlen, "%s: out of memory", where);
        return -1;
    }
    d->step[d->n++] = st;
    return 0;
}

int ob_decoder_from_json(const json_t *j, const char *where, ob_decoder_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    ob_decoder_t *d = calloc(1, sizeof *d);
    if (!d) { snprintf(err, errlen, "%s: out of memory", where); return -1; }
    if (dadd(d, j, where, 0, err, errlen)) { ob_decoder_free(d); return -1; }
    *out = d;
    return 0;
}

/* ---- a list of strings -------------------------------------------------------------------- */

typedef struct {
    ob_strbuf text;
    size_t *off, *len;
    size_t n, cap;
} tlist;

static void tl_free(tlist *l) { ob_strbuf_free(&l->text); free(l->off); free(l->len); memset(l, 0, sizeof *l); }

/* Starts a new entry (empty); append to it with tl_put. */
static int tl_new(tlist *l) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *o = realloc(l->off, cap * sizeof *o);
        if (!o) return -1;
        l->off = o;
        size_t *n = realloc(l->len, cap * sizeof *n);
        if (!n) return -1;
        l->len = n;
        l->cap = cap;
    }
    l->off[l->n] = l->text.n;
    l->len[l->n] = 0;
    l->n++;
    return 0;
}

static int tl_put(tlist *l, const char *s, size_t n) {
    if (ob_strbuf_put(&l->text, s, n)) return -1;
    l->len[l->n - 1] += n;
    return 0;
}

static const char *tl_get(const tlist *l, size_t i, size_t *n) {
    *n = l->len[i];
    return l->text.p ? l->text.p + l->off[i] : "";
}

/* Appends s to o with ill-formed subsequences replaced by U+FFFD (maximal subparts). */
static int put_lossy(tlist *o, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        size_t l = ob_utf8_len(u + i, n - i);
        if (l > 1 || u[i] < 0x80) { i += l; continue; }
        /* ill-formed at i: how many bytes form the maximal subpart */
        unsigned c = u[i], lo = 0x80, hi = 0xBF;
        size_t need = 0, k = 1;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        while (need && k <= need && i + k < n && u[i + k] >= lo && u[i + k] <= hi) { k++; lo = 0x80; hi = 0xBF; }
        if (tl_put(o, s + run, i - run) || tl_put(o, "\xEF\xBF\xBD", 3)) return -1;
        i += k;
        run = i;
    }
    return tl_put(o, s + run, n - run);
}

/* ---- steps -------------------------------------------------------------------------------- */

static int is_prefix(const char *s, size_t n, const char *p, size_t pn) { return n >= pn && memcmp(s, p, pn) == 0; }

static const char *const cleanup_from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
static const char *const cleanup_to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};

/* Rust's str::replace of each pair in turn, as WordPiece's cleanup. */
static int cleanup(tlist *o, const char *s, size_t n, ob_strbuf *t1, ob_strbuf *t2) {
    t1->n = 0;
    if (ob_strbuf_put(t1, s, n)) return -1;
    for (size_t k = 0; k < sizeof cleanup_from / sizeof *cleanup_from; k++) {
        size_t fl = strlen(cleanup_from[k]), tl = strlen(cleanup_to[k]);
        t2->n = 0;
        for (size_t i = 0; i < t1->n;) {
            if (is_prefix(t1->p + i, t1->n - i, cleanup_from[k], fl)) {
                if (ob_strbuf_put(t2, cleanup_to[k], tl)) return -1;
                i += fl;
            } else {
                if (ob_strbuf_put(t2, t1->p + i, 1)) return -1;
                i++;
            }
        }
        ob_strbuf x = *t1; *t1 = *t2; *t2 = x;
    }
    return tl_put(o, t1->p ? t1->p : "", t1->n);
}

/* at_start: the list begins at the first token of the text (a streaming window that does not is
 * decoded as the continuation it is: no first-token rules). joined: an earlier step (Fuse,
 * ByteLevel) made the list one string, so Strip's start is the text's start: it takes at most
 * strip_left characters there (fewer than its start count where a stream's dropped windows took
 * some, 0 once text is out) and says in *took how many it took. */
static int step_run(const ob_tokenizer_t *t, const dstep *st, const tlist *in, tlist *o, ob_strbuf *t1, ob_strbuf *t2,
                    void *md, int at_start, int joined, int strip_left, int *took) {
    size_t n;
    o->n = 0;
    o->text.n = 0;
    if (st->kind == D_BYTELEVEL || st->kind == D_FUSE) {
        /* one output string: ByteLevel maps every token whose characters are all in the byte
         * alphabet back to bytes (others keep their own bytes), then repairs the UTF-8 */
        if (tl_new(o)) return -1;
        t1->n = 0;
        for (size_t i = 0; i < in->n; i++) {
            const char *s = tl_get(in, i, &n);
            if (st->kind == D_FUSE) { if (tl_put(o, s, n)) return -1; continue; }
            size_t mark = t1->n;
            int all = 1;
            for (size_t k = 0; k < n && all;) {
                int32_t cp;
                size_t l = ob_utf8_next((const unsigned char *)s + k, n - k, &cp);
                int b = cp >= 0 && cp < 324 ? t->u2b[cp] : -1;
                if (b < 0) { all = 0; break; }
                char c = (char)b;
                if (ob_strbuf_put(t1, &c, 1)) return -1;
                k += l;
            }
            if (!all) { t1->n = mark; if (ob_strbuf_put(t1, s, n)) return -1; }
        }
        return st->kind == D_BYTELEVEL ? put_lossy(o, t1->p ? t1->p : "", t1->n) : 0;
    }
    if (st->kind == D_BYTEFALLBACK) {
        t1->n = 0;   /* pending bytes */
        for (size_t i = 0; i <= in->n; i++) {
            const char *s = i < in->n ? tl_get(in, i, &n) : NULL;
            int b = s ? ob_tok_parse_byte(s, n) : -1;
            if (s && b >= 0) {
                char c = (char)b;
                if (ob_strbuf_put(t1, &c, 1)) return -1;
                continue;
            }
            if (t1->n) {
                size_t k = 0;
                while (k < t1->n) {
                    size_t l = ob_utf8_len((const unsigned char *)t1->p + k, t1->n - k);
                    if (l == 1 && (unsigned char)t1->p[k] >= 0x80) break;
                    k += l;
                }
                if (k == t1->n) { if (tl_new(o) || tl_put(o, t1->p, t1->n)) return -1; }
                else for (size_t q = 0; q < t1->n; q++) if (tl_new(o) || tl_put(o, "\xEF\xBF\xBD", 3)) return -1;
                t1->n = 0;
            }
            if (s && (tl_new(o) || tl_put(o, s, n))) return -1;
        }
        return 0;
    }
    for (size_t i = 0; i < in->n; i++) {
        const char *s = tl_get(in, i, &n);
        if (tl_new(o)) return -1;
        switch (st->kind) {
        case D_METASPACE:
            for (size_t k = 0; k < n;) {
                size_t l = ob_utf8_len((const unsigned char *)s + k, n - k);
                if (l == st->a_len && memcmp(s + k, st->a, l) == 0) {
                    if (!(i == 0 && st->x && at_start) && tl_put(o, " ", 1)) return -1;
                } else if (tl_put(o, s + k, l)) return -1;
                k += l;
            }
            break;
        case D_REPLACE: {
            size_t pos = 0, done = 0, ms, me;
            int rc;
            while (pos <= n && (rc = ob_regex_find(st->re, md, s, n, pos, &ms, &me)) == 1) {
                if (tl_put(o, s + done, ms - done) || tl_put(o, st->a, st->a_len)) return -1;
                done = me;
                pos = me > ms ? me : ms + (ms < n ? ob_utf8_len((const unsigned char *)s + ms, n - ms) : 1);
                if (me == ms && ms < n) { if (tl_put(o, s + ms, pos - ms)) return -1; done = pos; }
            }
            if (tl_put(o, s + done, n - done)) return -1;
            break;
        }
        case D_STRIP: {
            /* at most x leading and y trailing characters equal to the content character */
            size_t a = 0, b = n;
            const int lim = joined ? strip_left : st->x;
            int q = 0;
            for (; q < lim && b - a >= st->a_len && memcmp(s + a, st->a, st->a_len) == 0; q++) a += st->a_len;
            if (joined) *took = q;
            for (int q = 0; q < st->y && b - a >= st->a_len && memcmp(s + b - st->a_len, st->a, st->a_len) == 0; q++)
                b -= st->a_len;
            if (tl_put(o, s + a, b - a)) return -1;
            break;
        }
        case D_WORDPIECE: {
            t2->n = 0;
            if (i != 0 || !at_start) {
                if (is_prefix(s, n, st->a, st->a_len)) { s += st->a_len; n -= st->a_len; }
                else if (ob_strbuf_put(t2, " ", 1)) return -1;
            }
            if (ob_strbuf_put(t2, s, n)) return -1;
            ob_strbuf tmp = {0};
            int rc = st->x ? cleanup(o, t2->p ? t2->p : "", t2->n, t1, &tmp) : tl_put(o, t2->p ? t2->p : "", t2->n);
            ob_strbuf_free(&tmp);
            if (rc) return -1;
            break;
        }
        case D_BPE: {
            const char *rep = i + 1 == in->n ? "" : " ";
            for (size_t k = 0; k < n;) {
                if (st->a_len && is_prefix(s + k, n - k, st->a, st->a_len)) {
                    if (tl_put(o, rep, strlen(rep))) return -1;
                    k += st->a_len;
                } else {
                    if (tl_put(o, s + k, 1)) return -1;
                    k++;
                }
            }
            break;
        }
        }
    }
    return 0;
}

/* ---- decoding ----------------------------------------------------------------------------- */

typedef struct {
    tlist a, b;
    ob_strbuf t1, t2;
    void *md;
} dscratch;

/* A stream's place at the text's start (ob_detok): text_out once a chunk was emitted; by decoder
 * step, the characters its joined Strip took in the stream's dropped windows (done) and in the
 * last decode (took). */
typedef struct {
    int text_out;
    int done[MAX_DSTEPS], took[MAX_DSTEPS];
} dstart;

static void ds_free(dscratch *d) {
    tl_free(&d->a); tl_free(&d->b);
    ob_strbuf_free(&d->t1); ob_strbuf_free(&d->t2);
    if (d->md) ob_regex_md_free(d->md);
}

/* The decode of ids into out (replaced); at_start: ids begin the text (see step_run); ds: a
 * stream's place at the text's start (NULL: the text's true start, the full decode). Sets
 * *kept (when not NULL) to whether the ids used up the first-token rules: a tokenizer.json's when
 * any id made it into the token list, a GGUF's at its first non-empty piece. */
static int decode_into(const ob_tokenizer_t *t, const int32_t *ids, size_t n, int skip_special, ob_strbuf *out,
                       dscratch *d, int at_start, dstart *ds, int *kept) {
    out->n = 0;
    tlist *cur = &d->a, *nxt = &d->b;
    cur->n = 0;
    cur->text.n = 0;
    int first = at_start;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) continue;
        if (t->hf) {
            if (t->type[id] == OB_TOKTYPE_UNUSED) continue;   /* an id Hugging Face does not have */
            if (skip_special && t->added && (t->added[id] & OB_ADDED_SPECIAL)) continue;
            size_t l;
            const char *s = tok_text(t, id, &l);
            if (tl_new(cur) || tl_put(cur, s, l)) return -1;
        } else {
            if (skip_special && t->type[id] == OB_TOKTYPE_CONTROL) continue;
            const char *p = t->piece + t->piece_off[id];
            size_t l = t->piece_off[id + 1] - t->piece_off[id];
            if (first && t->model == OB_TOK_MODEL_SPM && t->add_space_prefix && l && p[0] == ' ') { p++; l--; }
            if (l) first = 0;
            if (cur->n == 0 && tl_new(cur)) return -1;
            if (tl_put(cur, p, l)) return -1;
        }
    }
    if (kept) *kept = t->hf ? cur->n > 0 : !first;
    int took_none;
    if (ds) memset(ds->took, 0, sizeof ds->took);
    if (t->hf && t->decoder) {
        if (!d->md && !(d->md = ob_regex_md_new())) return -1;
        int joined = 0;
        for (int k = 0; k < t->decoder->n; k++) {
            const dstep *st = &t->decoder->step[k];
            const int left = !ds ? st->x : ds->text_out ? 0 : st->x - ds->done[k];
            if (step_run(t, st, cur, nxt, &d->t1, &d->t2, d->md, at_start, joined, left, ds ? &ds->took[k] : &took_none)) return -1;
            joined |= st->kind == D_FUSE || st->kind == D_BYTELEVEL;
            tlist *x = cur; cur = nxt; nxt = x;
        }
    }
    /* join (with spaces when a tokenizer.json has no decoder), then make it valid UTF-8 */
    nxt->n = 0;
    nxt->text.n = 0;
    if (tl_new(nxt)) return -1;
    d->t1.n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        size_t l;
        const char *s = tl_get(cur, i, &l);
        if ((i || !at_start) && t->hf && !t->decoder && ob_strbuf_put(&d->t1, " ", 1)) return -1;
        if (ob_strbuf_put(&d->t1, s, l)) return -1;
    }
    if (put_lossy(nxt, d->t1.p ? d->t1.p : "", d->t1.n)) return -1;
    return ob_strbuf_put(out, nxt->text.p ? nxt->text.p : "", nxt->len[0]);
}

int ob_tokenizer_decode(const ob_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char *buf, int buflen) {
    if (!t || n < 0 || (!ids && n) || (!buf && buflen > 0)) return -1;
    dscratch d = {0};
    ob_strbuf out = {0};
    int rc = decode_into(t, ids, (size_t)n, skip_special, &out, &d, 1, NULL, NULL);
    ds_free(&d);
    if (rc || out.n > INT_MAX) { ob_strbuf_free(&out); return -1; }
    if (buflen > 0 && out.n) memcpy(buf, out.p, out.n < (size_t)buflen ? out.n : (size_t)buflen);
    rc = (int)out.n;
    ob_strbuf_free(&out);
    return rc;
}

/* ---- streaming ---------------------------------------------------------------------------- */

/* The window holds the ids since the last chunk. Their decode, as a continuation of what was
 * emitted (at_start only until a token made it into a chunk), is the next chunk once it is
 * non-empty and does not end in U+FFFD (bytes of a character still to come). A chunk always
 * ends at a whole character, so the next window starts on a clean byte boundary. */
struct ob_detok {
    const ob_tokenizer_t *t;
    int skip_special;
    int at_start;
    dstart start;
    int32_t ids[OB_DETOK_WINDOW];
    size_t n_ids;
    ob_strbuf chunk;
    dscratch d;
};

ob_detok_t *ob_detok_new(const ob_tokenizer_t *t, int skip_special) {
    if (!t) return NULL;
    ob_detok_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    s->at_start = 1;
    return s;
}

void ob_detok_free(ob_detok_t *s) {
    if (!s) return;
    ob_strbuf_free(&s->chunk);
    ds_free(&s->d);
    free(s);
}

static int ends_incomplete(const ob_strbuf *b) {
    return b->n >= 3 && memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3) == 0;
}

const char *ob_detok_push(ob_detok_t *s, int32_t id, size_t *len) {
    *len = 0;
    if (!s) return NULL;
    s->ids[s->n_ids++] = id;
    int kept = 0;
    if (decode_into(s->t, s->ids, s->n_ids, s->skip_special, &s->chunk, &s->d, s->at_start, &s->start, &kept)) return NULL;
    /* a full window gives up waiting for the rest of a character (it stays U+FFFD) */
    if (s->chunk.n == 0 || (ends_incomplete(&s->chunk) && s->n_ids < OB_DETOK_WINDOW)) {
        if (s->n_ids == OB_DETOK_WINDOW) { /* decoded to nothing: dropped, what its Strips took stays taken */
            for (int k = 0; k < MAX_DSTEPS; k++) s->start.done[k] += s->start.took[k];
            s->n_ids = 0;
            s->at_start &= !kept;
        }
        s->chunk.n = 0;
        return s->chunk.p ? s->chunk.p : "";
    }
    s->n_ids = 0;
    s->at_start &= !kept;
    s->start.text_out = 1;
    *len = s->chunk.n;
    return s->chunk.p;
}

const char *ob_detok_flush(ob_detok_t *s, size_t *len) {
    *len = 0;
    if (!s) return NULL;
    if (decode_into(s->t, s->ids, s->n_ids, s->skip_special, &s->chunk, &s->d, s->at_start, &s->start, NULL)) return NULL;
    s->n_ids = 0;
    s->at_start = 1;
    memset(&s->start, 0, sizeof s->start);
    *len = s->chunk.n;
    return s->chunk.p ? s->chunk.p : "";
}
