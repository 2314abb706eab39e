/* prechain.c — the tokenizer.json pre-tokenizer chain (see prechain.h).
 *
 * Owns: parsing pre_tokenizer objects and cutting text, after Hugging Face tokenizers'
 * pre_tokenizers/ and NormalizedString::split (the oracle): a pattern yields a list of segments
 * (match or not), a behaviour folds them into pieces, and each piece goes to the next step.
 * Does not own: regex compilation and character classes (unicode.c).
 *
 * Each step's pieces are recursed into in order, so words come out in text order with no list
 * of all pieces held at once; a step that rewrites its piece (Metaspace, ByteLevel's prefix
 * space) writes into that level's own scratch buffer, which deeper levels never touch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/prechain.h"
#include "text/unicode.h"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define MAX_STEPS 16

enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum { S_REGEX, S_CHARS, S_WSWORD, S_BYTELEVEL, S_METASPACE };
enum { C_WHITESPACE, C_PUNCT, C_NUMERIC };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct {
    int kind, behavior, invert;
    void *re;             /* S_REGEX; S_BYTELEVEL with use_regex */
    int cls;              /* S_CHARS: C_* */
    int prefix_space;     /* S_BYTELEVEL */
    char repl[8];         /* S_METASPACE: UTF-8 of the replacement character */
    size_t repl_len;
    int scheme, split;    /* S_METASPACE */
} pstep;

struct ob_prechain {
    int n;
    pstep step[MAX_STEPS];
};

typedef struct { size_t s, e; int m; } seg;

struct ob_prechain_scratch {
    void *md;
    ob_strbuf text[MAX_STEPS];
    seg *segs[MAX_STEPS];
    size_t seg_cap[MAX_STEPS];
};

void ob_prechain_free(ob_prechain_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) if (p->step[i].re) ob_regex_free(p->step[i].re);
    free(p);
}

void ob_prechain_scratch_free(ob_prechain_scratch *s) {
    if (!s) return;
    if (s->md) ob_regex_md_free(s->md);
    for (int i = 0; i < MAX_STEPS; i++) { ob_strbuf_free(&s->text[i]); free(s->segs[i]); }
    free(s);
}

int ob_prechain_byte_level(const ob_prechain_t *p) {
    return p && p->n > 0 && p->step[p->n - 1].kind == S_BYTELEVEL;
}

int ob_prechain_prefix_space(const ob_prechain_t *p) {
    return ob_prechain_byte_level(p) && p->step[p->n - 1].prefix_space;
}

static int jbool(const json_t *o, const char *k, int def) {
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static int behavior_of(const json_t *v, int def, int *out) {
    const char *b = json_string_value(v);
    if (!v || json_is_null(v)) { *out = def; return 0; }
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; b && i < 5; i++) if (strcmp(b, names[i]) == 0) { *out = i; return 0; }
    return -1;
}

static int push(ob_prechain_t *p, pstep st, const char *where, char *err, size_t errlen) {
    if (p->n >= MAX_STEPS) {
        if (st.re) ob_regex_free(st.re);
        snprintf(err, errlen, "%s: more than %d pre-tokenizer steps", where, MAX_STEPS);
        return -1;
    }
    p->step[p->n++] = st;
    return 0;
}

static int add(ob_prechain_t *p, const json_t *j, const char *where, int depth, char *err, size_t errlen) {
    if (!json_is_object(j)) { snprintf(err, errlen, "%s: expected an object", where); return -1; }
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) { snprintf(err, errlen, "%s: missing 'type'", where); return -1; }
    if (p->n > 0 && p->step[p->n - 1].kind == S_BYTELEVEL && strcmp(type, "Sequence") != 0) {
        snprintf(err, errlen, "%s: a '%s' step after ByteLevel is not supported (ByteLevel must come last)", where, type);
        return -1;
    }
    pstep st = {0};
    char e2[300];
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(j, "pretokenizers");
        if (!json_is_array(list)) { snprintf(err, errlen, "%s: Sequence needs a 'pretokenizers' array", where); return -1; }
        if (depth > 8) { snprintf(err, errlen, "%s: Sequence nested too deeply", where); return -1; }
        for (size_t i = 0; i < json_array_size(list); i++) {
            char w[256];
            snprintf(w, sizeof w, "%.200s.pretokenizers[%zu]", where, i);
            if (add(p, json_array_get(list, i), w, depth + 1, err, errlen)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const json_t *pat = json_object_get(j, "pattern");
        const json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
        const json_t *v = json_is_string(s) ? s : r;
        if (!json_is_string(v)) { snprintf(err, errlen, "%s: Split needs a pattern {\"String\"|\"Regex\": ...}", where); return -1; }
        if (behavior_of(json_object_get(j, "behavior"), B_REMOVED, &st.behavior)) {
            snprintf(err, errlen, "%s: unknown split behavior", where);
            return -1;
        }
        st.kind = S_REGEX;
        st.invert = jbool(j, "invert", 0);
        if (json_string_length(v) == 0) st.kind = S_CHARS, st.cls = -1;   /* an empty pattern matches nothing */
        else if (!(st.re = ob_regex_compile(json_string_value(v), json_string_length(v), v == s, e2, sizeof e2))) {
            snprintf(err, errlen, "%s: %s", where, e2);
            return -1;
        }
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "ByteLevel")) {
        st.kind = S_BYTELEVEL;
        st.prefix_space = jbool(j, "add_prefix_space", 1);
        if (jbool(j, "use_regex", 1) && !(st.re = ob_regex_compile(RE_GPT2, strlen(RE_GPT2), 0, e2, sizeof e2))) {
            snprintf(err, errlen, "%s: %s", where, e2);
            return -1;
        }
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "Metaspace")) {
        const json_t *rv = json_object_get(j, "replacement");
        const char *rs = json_is_string(rv) ? json_string_value(rv) : "\xE2\x96\x81";
        int32_t cp;
        size_t rl = strlen(rs);
        if (rl == 0 || rl > 4 || ob_utf8_next((const unsigned char *)rs, rl, &cp) != rl || cp < 0) {
            snprintf(err, errlen, "%s: Metaspace 'replacement' must be one character", where);
            return -1;
        }
        st.kind = S_METASPACE;
        memcpy(st.repl, rs, rl);
        st.repl_len = rl;
        st.split = jbool(j, "split", 1);
        const char *sc = json_string_value(json_object_get(j, "prepend_scheme"));
        if (!sc) st.scheme = jbool(j, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
        else if (!strcmp(sc, "always")) st.scheme = PREPEND_ALWAYS;
        else if (!strcmp(sc, "first")) st.scheme = PREPEND_FIRST;
        else if (!strcmp(sc, "never")) st.scheme = PREPEND_NEVER;
        else { snprintf(err, errlen, "%s: unknown prepend_scheme '%s'", where, sc); return -1; }
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "Digits")) {
        st.kind = S_CHARS;
        st.cls = C_NUMERIC;
        st.behavior = jbool(j, "individual_digits", 0) ? B_ISOLATED : B_CONTIGUOUS;
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "WhitespaceSplit") || !strcmp(type, "BertPreTokenizer")) {
        st.kind = S_CHARS;
        st.cls = C_WHITESPACE;
        st.behavior = B_REMOVED;
        if (push(p, st, where, err, errlen)) return -1;
        if (type[0] == 'W') return 0;
        st.cls = C_PUNCT;
        st.behavior = B_ISOLATED;
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "Punctuation")) {
        st.kind = S_CHARS;
        st.cls = C_PUNCT;
        if (behavior_of(json_object_get(j, "behavior"), B_ISOLATED, &st.behavior)) {
            snprintf(err, errlen, "%s: unknown split behavior", where);
            return -1;
        }
        return push(p, st, where, err, errlen);
    }
    if (!strcmp(type, "Whitespace")) {
        st.kind = S_WSWORD;
        return push(p, st, where, err, errlen);
    }
    snprintf(err, errlen, "%s: pre-tokenizer type '%s' is not supported (supported: Split, ByteLevel, Metaspace, "
             "Digits, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Sequence)", where, type);
    return -1;
}

int ob_prechain_from_json(const json_t *j, const char *where, ob_prechain_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!j || json_is_null(j)) return 0;
    ob_prechain_t *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, errlen, "%s: out of memory", where); return -1; }
    if (add(p, j, where, 0, err, errlen)) { ob_prechain_free(p); return -1; }
    if (p->n == 0) { ob_prechain_free(p); return 0; }
    *out = p;
    return 0;
}

/* ---- running ------------------------------------------------------------------------------ */

typedef struct {
    const ob_prechain_t *p;
    ob_prechain_scratch *sc;
    ob_pretok_fn fn;
    void *ctx;
} run_ctx;

static int seg_add(ob_prechain_scratch *sc, int lv, size_t *n, size_t s, size_t e, int m) {
    if (*n == sc->seg_cap[lv]) {
        size_t cap = sc->seg_cap[lv] ? sc->seg_cap[lv] * 2 : 64;
        seg *ns = realloc(sc->segs[lv], cap * sizeof *ns);
        if (!ns) return -1;
        sc->segs[lv] = ns;
        sc->seg_cap[lv] = cap;
    }
    sc->segs[lv][(*n)++] = (seg){s, e, m};
    return 0;
}

static int char_in(int cls, int32_t cp) {
    if (cls == C_WHITESPACE) return ob_uni_is_whitespace(cp);
    if (cls == C_PUNCT) return ob_uni8_is_punct(cp);
    if (cls == C_NUMERIC) return ob_uni_is_numeric(cp);
    return 0;
}

/* Segments of s: [start, end, is_match], covering s, as Hugging Face's Pattern::find_matches. */
static int find_segs(run_ctx *r, int lv, const pstep *st, const char *s, size_t n, size_t *ns) {
    ob_prechain_scratch *sc = r->sc;
    *ns = 0;
    if (st->kind == S_CHARS) {
        /* each matching character is its own match; the runs between are one segment each */
        size_t last = 0;
        for (size_t i = 0; i < n;) {
            int32_t cp;
            size_t l = ob_utf8_next((const unsigned char *)s + i, n - i, &cp);
            if (char_in(st->cls, cp)) {
                if (last < i && seg_add(sc, lv, ns, last, i, 0)) return -1;
                if (seg_add(sc, lv, ns, i, i + l, 1)) return -1;
                last = i + l;
            }
            i += l;
        }
        if (last < n && seg_add(sc, lv, ns, last, n, 0)) return -1;
        return 0;
    }
    if (st->kind == S_WSWORD) {
        /* matches of \w+|[^\w\s]+ are kept, the rest (whitespace) removed */
        for (size_t i = 0; i < n;) {
            int32_t cp;
            size_t l = ob_utf8_next((const unsigned char *)s + i, n - i, &cp);
            int w = ob_uni_is_word(cp), sp = ob_uni_is_whitespace(cp);
            size_t j = i + l;
            while (j < n) {
                int32_t c2;
                size_t l2 = ob_utf8_next((const unsigned char *)s + j, n - j, &c2);
                int w2 = ob_uni_is_word(c2), sp2 = ob_uni_is_whitespace(c2);
                if (w2 != w || (!w && sp2 != sp)) break;
                j += l2;
            }
            if (seg_add(sc, lv, ns, i, j, !sp || w)) return -1;
            i = j;
        }
        return 0;
    }
    /* a regex (Split, ByteLevel) */
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        size_t ms, me;
        int rc = ob_regex_find(st->re, sc->md, s, n, pos, &ms, &me);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (prev != ms && seg_add(sc, lv, ns, prev, ms, 0)) return -1;
        if (seg_add(sc, lv, ns, ms, me, 1)) return -1;
        prev = me;
        if (me == ms) {   /* an empty match: the search goes on after one character */
            if (ms >= n) break;
            pos = ms + ob_utf8_len((const unsigned char *)s + ms, n - ms);
        } else {
            pos = me;
        }
    }
    if (prev != n && seg_add(sc, lv, ns, prev, n, 0)) return -1;
    return 0;
}

/* Folds the segments into pieces by behaviour, in place; returns the piece count. A piece with
 * m == 2 is removed. */
static size_t fold(seg *sg, size_t n, int behavior, int invert) {
    if (invert) for (size_t i = 0; i < n; i++) sg[i].m = !sg[i].m;
    size_t o = 0;
    int prev = 0;
    switch (behavior) {
    case B_ISOLATED:
        return n;
    case B_REMOVED:
        for (size_t i = 0; i < n; i++) if (sg[i].m) sg[i].m = 2;
        return n;
    case B_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            if (sg[i].m == prev && o > 0) sg[o - 1].e = sg[i].e;
            else sg[o++] = sg[i];
            prev = sg[i].m;
        }
        break;
    case B_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            if (sg[i].m && !prev && o > 0) sg[o - 1].e = sg[i].e;
            else sg[o++] = sg[i];
            prev = sg[i].m;
        }
        break;
    case B_MERGED_NEXT: {
        /* right to left, packing pieces at the end, then shifting them down */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            int m = sg[i].m;
            if (m && !prev && w < n) sg[w].s = sg[i].s;
            else sg[--w] = sg[i];
            prev = m;
        }
        memmove(sg, sg + w, (n - w) * sizeof *sg);
        o = n - w;
        break;
    }
    }
    for (size_t i = 0; i < o; i++) sg[i].m = 0;
    return o;
}

static int level(run_ctx *r, int lv, const char *s, size_t n, int at_start);

static int level_split(run_ctx *r, int lv, const pstep *st, const char *s, size_t n, int at_start, int behavior) {
    size_t ns;
    if (find_segs(r, lv, st, s, n, &ns)) return -1;
    seg *sg = r->sc->segs[lv];
    size_t np = fold(sg, ns, behavior, st->invert);
    for (size_t i = 0; i < np; i++) {
        seg g = r->sc->segs[lv][i];   /* re-read: deeper levels use their own arrays */
        if (g.m == 2 || g.e == g.s) continue;
        if (level(r, lv + 1, s + g.s, g.e - g.s, at_start && g.s == 0)) return -1;
    }
    return 0;
}

static int level(run_ctx *r, int lv, const char *s, size_t n, int at_start) {
    if (n == 0) return 0;
    if (lv == r->p->n) return r->fn(r->ctx, s, n) ? -1 : 0;
    const pstep *st = &r->p->step[lv];
    ob_strbuf *b = &r->sc->text[lv];
    switch (st->kind) {
    case S_REGEX: case S_CHARS:
        if (st->kind == S_CHARS && st->cls < 0) return level(r, lv + 1, s, n, at_start);
        return level_split(r, lv, st, s, n, at_start, st->behavior);
    case S_WSWORD:
        return level_split(r, lv, st, s, n, at_start, B_REMOVED);
    case S_BYTELEVEL:
        if (st->prefix_space && s[0] != ' ') {
            b->n = 0;
            if (ob_strbuf_put(b, " ", 1) || ob_strbuf_put(b, s, n)) return -1;
            s = b->p;
            n = b->n;
        }
        if (!st->re) return level(r, lv + 1, s, n, at_start);
        return level_split(r, lv, st, s, n, at_start, B_ISOLATED);
    case S_METASPACE: {
        b->n = 0;
        int starts = n >= st->repl_len && memcmp(s, st->repl, st->repl_len) == 0;
        /* a leading space becomes the replacement, which then counts as already there */
        if (s[0] == ' ') starts = 1;
        if ((st->scheme == PREPEND_ALWAYS || (st->scheme == PREPEND_FIRST && at_start)) && !starts &&
            ob_strbuf_put(b, st->repl, st->repl_len))
            return -1;
        for (size_t i = 0; i < n; i++)
            if (s[i] == ' ' ? ob_strbuf_put(b, st->repl, st->repl_len) : ob_strbuf_put(b, s + i, 1)) return -1;
        const char *t = b->p;
        size_t tn = b->n;
        if (!st->split) return level(r, lv + 1, t, tn, at_start);
        /* split before each replacement character (MergedWithNext on a char pattern) */
        size_t ns = 0;
        ob_prechain_scratch *sc = r->sc;
        size_t last = 0;
        for (size_t i = 0; i < tn;) {
            size_t l = ob_utf8_len((const unsigned char *)t + i, tn - i);
            if (l == st->repl_len && memcmp(t + i, st->repl, l) == 0) {
                if (last < i && seg_add(sc, lv, &ns, last, i, 0)) return -1;
                if (seg_add(sc, lv, &ns, i, i + l, 1)) return -1;
                last = i + l;
            }
            i += l;
        }
        if (last < tn && seg_add(sc, lv, &ns, last, tn, 0)) return -1;
        size_t np = fold(sc->segs[lv], ns, B_MERGED_NEXT, 0);
        for (size_t i = 0; i < np; i++) {
            seg g = sc->segs[lv][i];
            if (level(r, lv + 1, t + g.s, g.e - g.s, at_start && g.s == 0)) return -1;
        }
        return 0;
    }
    }
    return -1;
}

int ob_prechain_run(const ob_prechain_t *p, ob_prechain_scratch **scratch, const char *s, size_t n, int at_start,
                    ob_pretok_fn fn, void *ctx) {
    if (!p) return n ? (fn(ctx, s, n) ? -1 : 0) : 0;
    if (!*scratch) {
        *scratch = calloc(1, sizeof **scratch);
        if (!*scratch || !((*scratch)->md = ob_regex_md_new())) return -1;
    }
    run_ctx r = {p, *scratch, fn, ctx};
    return level(&r, 0, s, n, at_start);
}
