/* grammar_gbnf.c — GBNF text -> compiled grammar, and the checks that make a grammar safe to run.
 *
 * Owns: the GBNF parser (llama.cpp's syntax, see grammar.h), compiling rules into the flat layout
 * of grammar_int.h, and the static analysis the matcher relies on: every referenced rule is
 * defined, every reachable rule can finish (so any live match can always be completed), no rule
 * is left-recursive (so expanding the rules at a position always terminates), and repetitions of
 * bodies that can match nothing stay small. Also the grammar's reference count and the small text
 * helpers (ob_gbuf, UTF-8, GBNF literal quoting) the schema converter shares.
 * Does not own: matching (grammar_match.c), JSON Schema (grammar_schema.c).
 *
 * The fixpoints (nullable, productive) are worklist algorithms, linear in the grammar, and the
 * cycle search is iterative: a hostile grammar of 200k chained rules costs milliseconds, not a
 * quadratic pass or a deep C stack.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_int.h"

/* ---- small helpers ------------------------------------------------------------------------- */

void ob_gbuf_put(ob_gbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ob_gbuf_puts(ob_gbuf *b, const char *s) { ob_gbuf_put(b, s, strlen(s)); }

void ob_gbuf_printf(ob_gbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if ((size_t)n < sizeof tmp) { ob_gbuf_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ob_gbuf_put(b, big, (size_t)n);
    free(big);
}

void ob_gbuf_cp(ob_gbuf *b, uint32_t cp) {
    if (cp < 0x80 && (isalnum((int)cp) || strchr(" !#$%&'()*+,./:;<=>?@_`{|}~", (int)cp)) && cp)
        ob_gbuf_put(b, (const char *)&(char){(char)cp}, 1);
    else if (cp <= 0xFF) ob_gbuf_printf(b, "\\x%02X", (unsigned)cp);
    else if (cp <= 0xFFFF) ob_gbuf_printf(b, "\\u%04X", (unsigned)cp);
    else ob_gbuf_printf(b, "\\U%08X", (unsigned)cp);
}

int ob_grammar_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > OB_CP_MAX || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t ob_grammar_gbnf_literal(const char *s, size_t len, char *out, size_t outlen) {
    ob_gbuf b = {0};
    ob_gbuf_put(&b, "\"", 1);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = ob_grammar_utf8_decode((const unsigned char *)s + i, len - i, &cp);
        if (l == 0) { cp = 0xFFFD; l = 1; }   /* invalid UTF-8 cannot be matched: replaced */
        if (cp == '"') ob_gbuf_put(&b, "\\\"", 2);
        else if (cp == '\\') ob_gbuf_put(&b, "\\\\", 2);
        else if (cp == '\n') ob_gbuf_put(&b, "\\n", 2);
        else if (cp == '\r') ob_gbuf_put(&b, "\\r", 2);
        else if (cp == '\t') ob_gbuf_put(&b, "\\t", 2);
        else if (cp < 0x20 || cp == 0x7F) ob_gbuf_printf(&b, "\\x%02X", (unsigned)cp);
        else ob_gbuf_put(&b, s + i, (size_t)l);
        i += (size_t)l;
    }
    ob_gbuf_put(&b, "\"", 1);
    size_t need = b.oom ? 0 : b.n;
    if (out && outlen) {
        size_t k = need < outlen - 1 ? need : outlen - 1;
        if (k) memcpy(out, b.p, k);
        out[k] = 0;
    }
    free(b.p);
    return need;
}

const char *ob_grammar_rule_name(const ob_grammar_t *g, int32_t rule) {
    return g->names + g->rules[rule].name;
}

ob_grammar_t *ob_grammar_ref(const ob_grammar_t *g) {
    ob_grammar_t *m = (ob_grammar_t *)g;
    atomic_fetch_add(&m->refs, 1);
    return m;
}

void ob_grammar_free(ob_grammar_t *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    free(g->elems);
    free(g->alts);
    free(g->rules);
    free(g->ranges);
    free(g->classes);
    free(g->reps);
    free(g->names);
    free(g);
}

/* ---- parser state ---------------------------------------------------------------------------- */

typedef struct {
    ob_gelem *body;      /* alternatives back to back, each ended by GE_END */
    int32_t n, cap;
    int32_t n_alt;
    int32_t name;        /* offset in p->names */
    size_t def_pos;      /* where defined (SIZE_MAX: not yet) */
    size_t ref_pos;      /* first reference (for "undefined rule") */
    int32_t n_anon;      /* anonymous sub-rules made for it so far */
} brule;

typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
    brule *rules;
    int32_t n_rules, cap_rules;
    int32_t *hash;        /* open addressing: rule id + 1; 0 empty */
    size_t hmask;
    ob_gbuf names;
    ob_grange *ranges;    /* all classes' ranges */
    int32_t n_ranges, cap_ranges;
    ob_gclass *classes;
    int32_t n_classes, cap_classes;
    ob_grep *reps;
    int32_t n_reps, cap_reps;
    int64_t n_elems;      /* running total for the limit */
    int depth;
    int32_t max_token;
} gparser;

static void line_col(const char *s, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && s[i]; i++) {
        if (s[i] == '\n') { l++; c = 1; }
        else if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

/* Records the first error: "grammar: [line L column C: ]message" (pos SIZE_MAX: no position). */
static int vfail(gparser *p, size_t pos, const char *fmt, va_list ap) {
    if (p->failed) return -1;
    p->failed = 1;
    char msg[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (pos == SIZE_MAX) { snprintf(p->err, p->errlen, "grammar: %s", msg); return -1; }
    int line, col;
    line_col(p->s, pos, &line, &col);
    snprintf(p->err, p->errlen, "grammar: line %d column %d: %s", line, col, msg);
    return -1;
}

static int fail_at(gparser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(gparser *p, size_t pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(p, pos, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail(gparser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(gparser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(p, SIZE_MAX, fmt, ap);
    va_end(ap);
    return -1;
}

static void *grow(void *ptr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return ptr;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c = c > INT32_MAX / 2 ? need : c * 2;
    void *q = realloc(ptr, (size_t)c * elem);
    if (!q) return NULL;
    *cap = c;
    return q;
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static const char *rname(gparser *p, int32_t r) { return p->names.p + p->rules[r].name; }

static int32_t new_rule(gparser *p, const char *name, size_t n) {
    if (p->n_rules >= OB_GRAMMAR_MAX_RULES) return fail(p, "more than %d rules", OB_GRAMMAR_MAX_RULES), -1;
    brule *r = grow(p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules);
    if (!r) return fail(p, "out of memory"), -1;
    p->rules = r;
    int32_t id = p->n_rules++;
    brule *b = &p->rules[id];
    memset(b, 0, sizeof *b);
    b->name = (int32_t)p->names.n;
    b->def_pos = SIZE_MAX;
    b->ref_pos = SIZE_MAX;
    ob_gbuf_put(&p->names, name, n);
    ob_gbuf_put(&p->names, "", 1);   /* NUL separator */
    if (p->names.oom) return fail(p, "out of memory"), -1;
    /* Rehash at half load. */
    if ((size_t)p->n_rules * 2 > p->hmask + 1 || !p->hash) {
        size_t cap = p->hash ? (p->hmask + 1) * 2 : 256;
        int32_t *h = calloc(cap, sizeof *h);
        if (!h) return fail(p, "out of memory"), -1;
        for (int32_t i = 0; i < p->n_rules; i++) {
            const char *nm = rname(p, i);
            size_t k = name_hash(nm, strlen(nm)) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(p->hash);
        p->hash = h;
        p->hmask = cap - 1;
    } else {
        size_t k = name_hash(name, n) & p->hmask;
        while (p->hash[k]) k = (k + 1) & p->hmask;
        p->hash[k] = id + 1;
    }
    return id;
}

static int32_t find_rule(gparser *p, const char *name, size_t n) {
    if (!p->hash) return -1;
    size_t k = name_hash(name, n) & p->hmask;
    while (p->hash[k]) {
        int32_t id = p->hash[k] - 1;
        const char *nm = rname(p, id);
        if (strlen(nm) == n && memcmp(nm, name, n) == 0) return id;
        k = (k + 1) & p->hmask;
    }
    return -1;
}

static int32_t rule_for(gparser *p, const char *name, size_t n) {
    int32_t id = find_rule(p, name, n);
    return id >= 0 ? id : new_rule(p, name, n);
}

static int emit(gparser *p, int32_t rule, int32_t type, int32_t arg) {
    if (++p->n_elems > OB_GRAMMAR_MAX_ELEMS) return fail(p, "grammar too large (more than %d elements)", OB_GRAMMAR_MAX_ELEMS);
    brule *r = &p->rules[rule];
    ob_gelem *b = grow(r->body, &r->cap, r->n + 1, sizeof *r->body);
    if (!b) return fail(p, "out of memory");
    r->body = b;
    r->body[r->n++] = (ob_gelem){type, arg};
    return 0;
}

/* ---- character classes ------------------------------------------------------------------------ */

static int cmp_range(const void *a, const void *b) {
    const ob_grange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int32_t ob_granges_merge(ob_grange *r, int32_t n) {
    if (n > 1) qsort(r, (size_t)n, sizeof *r, cmp_range);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) { if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi; }
        else r[m++] = r[i];
    }
    return m;
}

int32_t ob_granges_complement(const ob_grange *in, int32_t n, ob_grange *out) {
    int32_t k = 0;
    uint32_t next = 0;
    for (int32_t i = 0; i < n; i++) {
        if (in[i].lo > next) out[k++] = (ob_grange){next, in[i].lo - 1};
        next = in[i].hi + 1;
    }
    if (next <= OB_CP_MAX) out[k++] = (ob_grange){next, OB_CP_MAX};
    return k;
}

/* Normalizes ranges[0..n) (sort, merge, negate, drop surrogates) into out (capacity 2n + 4).
 * Returns the count. */
static int32_t normalize_ranges(ob_grange *in, int32_t n, int negate, ob_grange *out) {
    int32_t m = ob_granges_merge(in, n);
    if (negate) m = ob_granges_complement(in, m, out);
    else memcpy(out, in, (size_t)m * sizeof *out);
    /* Remove D800-DFFF (a range may split in two): from out into the scratch behind it. */
    int32_t k = 0;
    ob_grange *res = out + m;
    for (int32_t i = 0; i < m; i++) {
        ob_grange r = out[i];
        if (r.hi < 0xD800 || r.lo > 0xDFFF) { res[k++] = r; continue; }
        if (r.lo < 0xD800) res[k++] = (ob_grange){r.lo, 0xD7FF};
        if (r.hi > 0xDFFF) res[k++] = (ob_grange){0xE000, r.hi};
    }
    memmove(out, res, (size_t)k * sizeof *out);
    return k;
}

/* Adds a class from raw ranges; returns its index or -1. */
static int32_t add_class(gparser *p, ob_grange *raw, int32_t n, int negate, size_t pos) {
    ob_grange *buf = malloc(((size_t)n * 4 + 8) * sizeof *buf);
    if (!buf) return fail(p, "out of memory"), -1;
    int32_t m = normalize_ranges(raw, n, negate, buf);
    if (m == 0) { free(buf); return fail_at(p, pos, "character class matches nothing"), -1; }
    /* Share identical single-range classes (literals repeat the same characters a lot). */
    if (m == 1)
        for (int32_t c = p->n_classes - 1, seen = 0; c >= 0 && seen < 64; c--, seen++)
            if (p->classes[c].n == 1 && p->ranges[p->classes[c].off].lo == buf[0].lo &&
                p->ranges[p->classes[c].off].hi == buf[0].hi) { free(buf); return c; }
    ob_grange *r = grow(p->ranges, &p->cap_ranges, p->n_ranges + m, sizeof *p->ranges);
    if (!r) { free(buf); return fail(p, "out of memory"), -1; }
    p->ranges = r;
    ob_gclass *cl = grow(p->classes, &p->cap_classes, p->n_classes + 1, sizeof *p->classes);
    if (!cl) { free(buf); return fail(p, "out of memory"), -1; }
    p->classes = cl;
    memcpy(p->ranges + p->n_ranges, buf, (size_t)m * sizeof *buf);
    p->classes[p->n_classes] = (ob_gclass){p->n_ranges, m};
    p->n_ranges += m;
    free(buf);
    return p->n_classes++;
}

static int32_t add_char(gparser *p, uint32_t cp, size_t pos) {
    ob_grange r = {cp, cp};
    return add_class(p, &r, 1, 0, pos);
}

/* ---- lexing ---------------------------------------------------------------------------------- */

static int at_end(gparser *p) { return p->pos >= p->len; }
static int peek(gparser *p) { return at_end(p) ? -1 : (unsigned char)p->s[p->pos]; }

static void skip_space(gparser *p, int newline_ok) {
    while (!at_end(p)) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t') p->pos++;
        else if (c == '#') { while (!at_end(p) && p->s[p->pos] != '\n' && p->s[p->pos] != '\r') p->pos++; }
        else if (newline_ok && (c == '\n' || c == '\r')) p->pos++;
        else break;
    }
}

static int is_name_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escape or UTF-8); -1 on error. */
static int read_char(gparser *p, uint32_t *cp) {
    size_t start = p->pos;
    if (at_end(p)) return fail_at(p, start, "unexpected end of grammar");
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '\\') {
        p->pos++;
        if (at_end(p)) return fail_at(p, start, "unexpected end of grammar after '\\'");
        char e = p->s[p->pos++];
        int nhex = 0;
        switch (e) {
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
            *cp = (unsigned char)e; return 0;
        default: return fail_at(p, start, "unknown escape '\\%c'", e);
        }
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = at_end(p) ? -1 : hexval(p->s[p->pos]);
            if (h < 0) return fail_at(p, start, "expected %d hex digits after '\\%c'", nhex, e);
            v = v * 16 + (uint32_t)h;
            p->pos++;
        }
        if (v > OB_CP_MAX) return fail_at(p, start, "code point U+%X is beyond U+10FFFF", (unsigned)v);
        if (v >= 0xD800 && v <= 0xDFFF) return fail_at(p, start, "surrogate code point U+%04X cannot be matched", (unsigned)v);
        *cp = v;
        return 0;
    }
    int l = ob_grammar_utf8_decode((const unsigned char *)p->s + p->pos, p->len - p->pos, cp);
    if (l == 0) return fail_at(p, start, "invalid UTF-8 in grammar");
    p->pos += (size_t)l;
    return 0;
}

static int parse_uint(gparser *p, long *out) {
    size_t start = p->pos;
    long v = 0;
    int any = 0;
    while (!at_end(p) && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        v = v * 10 + (p->s[p->pos++] - '0');
        any = 1;
        if (v > OB_GRAMMAR_MAX_REPEAT) return fail_at(p, start, "repetition count larger than %d", OB_GRAMMAR_MAX_REPEAT);
    }
    if (!any) return fail_at(p, start, "expected a number");
    *out = v;
    return 0;
}

/* ---- grammar structure ------------------------------------------------------------------------ */

static int parse_alternates(gparser *p, int32_t rule, int nested);

/* Name for the n-th anonymous sub-rule of `rule`. */
static int32_t anon_rule(gparser *p, int32_t rule) {
    char nm[256];
    int32_t k = ++p->rules[rule].n_anon;
    snprintf(nm, sizeof nm, "%.200s-%d", rname(p, rule), (int)k);
    while (find_rule(p, nm, strlen(nm)) >= 0) snprintf(nm, sizeof nm, "%.200s-%d", rname(p, rule), (int)(k = ++p->rules[rule].n_anon));
    int32_t id = new_rule(p, nm, strlen(nm));
    if (id >= 0) p->rules[id].def_pos = p->pos;
    return id;
}

/* Replaces body[start..n) of rule by one repetition element. */
static int make_rep(gparser *p, int32_t rule, int32_t start, long min, long max, size_t pos) {
    brule *r = &p->rules[rule];
    int32_t body;
    if (r->n - start == 1 && r->body[start].type == GE_REF) {
        body = r->body[start].arg;
        r->n = start;
        p->n_elems--;
    } else {
        int32_t sub = anon_rule(p, rule);
        if (sub < 0) return -1;
        r = &p->rules[rule];   /* rules may have moved */
        for (int32_t i = start; i < r->n; i++) {
            if (emit(p, sub, r->body[i].type, r->body[i].arg)) return -1;
            r = &p->rules[rule];
        }
        p->n_elems -= r->n - start;
        r->n = start;
        if (emit(p, sub, GE_END, 0)) return -1;
        p->rules[sub].n_alt = 1;
        body = sub;
    }
    if (max >= 0 && min > max) return fail_at(p, pos, "repetition {%ld,%ld}: minimum above maximum", min, max);
    ob_grep *rp = grow(p->reps, &p->cap_reps, p->n_reps + 1, sizeof *p->reps);
    if (!rp) return fail(p, "out of memory");
    p->reps = rp;
    p->reps[p->n_reps] = (ob_grep){body, (int32_t)min, (int32_t)max};
    return emit(p, rule, GE_REP, p->n_reps++);
}

static int parse_class(gparser *p, int32_t rule) {
    size_t start = p->pos++;   /* '[' */
    int negate = 0;
    if (peek(p) == '^') { negate = 1; p->pos++; }
    ob_grange *raw = NULL;
    int32_t n = 0, cap = 0;
    while (peek(p) != ']') {
        if (at_end(p)) { free(raw); return fail_at(p, start, "unterminated character class"); }
        uint32_t lo, hi;
        if (read_char(p, &lo)) { free(raw); return -1; }
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            size_t rpos = p->pos++;
            if (read_char(p, &hi)) { free(raw); return -1; }
            if (hi < lo) { free(raw); return fail_at(p, rpos, "range end U+%04X before its start U+%04X", (unsigned)hi, (unsigned)lo); }
        }
        ob_grange *g = grow(raw, &cap, n + 1, sizeof *raw);
        if (!g) { free(raw); return fail(p, "out of memory"); }
        raw = g;
        raw[n++] = (ob_grange){lo, hi};
    }
    p->pos++;
    if (n == 0 && !negate) { free(raw); return fail_at(p, start, "empty character class"); }
    int32_t c = add_class(p, raw, n, negate, start);
    free(raw);
    return c < 0 ? -1 : emit(p, rule, GE_CLASS, c);
}

static int parse_token(gparser *p, int32_t rule, int neg) {
    size_t start = p->pos;
    if (p->pos + 2 > p->len || p->s[p->pos + 1] != '[')
        return fail_at(p, start, "tokens are written <[id]> (token text such as <think> is not supported)");
    p->pos += 2;
    long id;
    if (parse_uint(p, &id)) return -1;
    if (p->pos + 2 > p->len || p->s[p->pos] != ']' || p->s[p->pos + 1] != '>')
        return fail_at(p, start, "expected ']>' to close the token");
    p->pos += 2;
    if (id > p->max_token) p->max_token = (int32_t)id;
    return emit(p, rule, neg ? GE_NTOKEN : GE_TOKEN, (int32_t)id);
}

static int parse_sequence(gparser *p, int32_t rule, int nested) {
    int32_t last = -1;   /* start of the last item in the rule's body */
    for (;;) {
        skip_space(p, nested);
        int c = peek(p);
        size_t pos = p->pos;
        if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r') return 0;
        int32_t item = p->rules[rule].n;
        if (c == '"') {
            p->pos++;
            while (peek(p) != '"') {
                if (at_end(p)) return fail_at(p, pos, "unterminated literal");
                uint32_t cp;
                if (read_char(p, &cp)) return -1;
                int32_t cl = add_char(p, cp, pos);
                if (cl < 0 || emit(p, rule, GE_CLASS, cl)) return -1;
            }
            p->pos++;
            if (p->rules[rule].n == item) { last = -1; continue; }   /* "" matches nothing: no item */
            last = item;
        } else if (c == '[') {
            if (parse_class(p, rule)) return -1;
            last = item;
        } else if (c == '.') {
            p->pos++;
            ob_grange any = {0, OB_CP_MAX};
            int32_t cl = add_class(p, &any, 1, 0, pos);
            if (cl < 0 || emit(p, rule, GE_CLASS, cl)) return -1;
            last = item;
        } else if (c == '<' || (c == '!' && p->pos + 1 < p->len && p->s[p->pos + 1] == '<')) {
            int neg = c == '!';
            if (neg) p->pos++;
            if (parse_token(p, rule, neg)) return -1;
            last = item;
        } else if (is_name_char(c)) {
            size_t s0 = p->pos;
            while (!at_end(p) && is_name_char((unsigned char)p->s[p->pos])) p->pos++;
            int32_t ref = rule_for(p, p->s + s0, p->pos - s0);
            if (ref < 0) return -1;
            if (p->rules[ref].ref_pos == SIZE_MAX) p->rules[ref].ref_pos = s0;
            skip_space(p, nested);
            if (p->pos + 3 <= p->len && memcmp(p->s + p->pos, "::=", 3) == 0)
                return fail_at(p, s0, "missing newline before the definition of '%.*s'", (int)(p->pos - s0), p->s + s0);
            p->pos = s0 + strlen(rname(p, ref));
            if (emit(p, rule, GE_REF, ref)) return -1;
            last = item;
        } else if (c == '(') {
            p->pos++;
            if (++p->depth > OB_GRAMMAR_MAX_NEST) return fail_at(p, pos, "parentheses nested deeper than %d", OB_GRAMMAR_MAX_NEST);
            int32_t sub = anon_rule(p, rule);
            if (sub < 0 || parse_alternates(p, sub, 1)) return -1;
            p->depth--;
            if (peek(p) != ')') return fail_at(p, pos, "expected ')' to close this group");
            p->pos++;
            if (emit(p, rule, GE_REF, sub)) return -1;
            last = item;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return fail_at(p, pos, "'%c' with nothing before it to repeat", c);
            long min = 0, max = -1;
            p->pos++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                skip_space(p, 0);
                if (peek(p) == ',') min = 0;
                else if (parse_uint(p, &min)) return -1;
                skip_space(p, 0);
                if (peek(p) == '}') max = min;
                else if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, 0);
                    if (peek(p) != '}' && parse_uint(p, &max)) return -1;
                    skip_space(p, 0);
                } else return fail_at(p, p->pos, "expected ',' or '}' in a repetition");
                if (peek(p) != '}') return fail_at(p, pos, "expected '}' to close the repetition");
                p->pos++;
            }
            if (make_rep(p, rule, last, min, max, pos)) return -1;
        } else {
            return fail_at(p, pos, "unexpected character '%c'", c);
        }
    }
}

static int parse_alternates(gparser *p, int32_t rule, int nested) {
    for (;;) {
        if (parse_sequence(p, rule, nested) || emit(p, rule, GE_END, 0)) return -1;
        p->rules[rule].n_alt++;
        if (peek(p) != '|') return 0;
        p->pos++;
        skip_space(p, 1);
    }
}

static int parse_text(gparser *p) {
    skip_space(p, 1);
    while (!at_end(p)) {
        size_t s0 = p->pos;
        while (!at_end(p) && is_name_char((unsigned char)p->s[p->pos])) p->pos++;
        if (p->pos == s0) return fail_at(p, s0, "expected a rule name");
        size_t n = p->pos - s0;
        skip_space(p, 0);
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
            return fail_at(p, p->pos, "expected '::=' after rule name '%.*s'", (int)n, p->s + s0);
        p->pos += 3;
        int32_t r = rule_for(p, p->s + s0, n);
        if (r < 0) return -1;
        if (p->rules[r].def_pos != SIZE_MAX) return fail_at(p, s0, "rule '%s' defined twice", rname(p, r));
        p->rules[r].def_pos = s0;
        skip_space(p, 1);
        p->depth = 0;
        if (parse_alternates(p, r, 0)) return -1;
        skip_space(p, 0);
        if (!at_end(p) && peek(p) != '\n' && peek(p) != '\r') {
            if (peek(p) == ')') return fail_at(p, p->pos, "unbalanced ')'");
            return fail_at(p, p->pos, "expected a newline or the end");
        }
        skip_space(p, 1);
    }
    return 0;
}

/* ---- analysis ---------------------------------------------------------------------------------- */

/* Which rules can match the empty string (want_nullable) or some finite string (else).
 * Worklist: an alternative holds a count of rule references not yet known to qualify. */
static int fixpoint(const ob_grammar_t *g, int want_nullable, uint8_t *out) {
    int32_t n_alt = g->n_alts, n_rule = g->n_rules;
    int32_t *cnt = calloc((size_t)n_alt + 1, sizeof *cnt);
    int32_t *alt_rule = malloc(((size_t)n_alt + 1) * sizeof *alt_rule);
    int32_t *dep_n = calloc((size_t)n_rule + 1, sizeof *dep_n);
    int32_t *queue = malloc(((size_t)n_rule + 1) * sizeof *queue);
    int ok = cnt && alt_rule && dep_n && queue;
    int32_t *dep_off = NULL, *dep = NULL;
    memset(out, 0, (size_t)n_rule);
    if (ok) {
        for (int32_t r = 0; r < n_rule; r++)
            for (int32_t a = 0; a < g->rules[r].n_alt; a++) alt_rule[g->rules[r].alt_off + a] = r;
        /* Count the references each rule receives (CSR of rule -> alternatives waiting on it). */
        for (int32_t a = 0; a < n_alt; a++)
            for (int32_t q = g->alts[a]; g->elems[q].type != GE_END; q++) {
                const ob_gelem *e = &g->elems[q];
                if (e->type == GE_REF) dep_n[e->arg]++;
                else if (e->type == GE_REP && g->reps[e->arg].min > 0) dep_n[g->reps[e->arg].rule]++;
            }
        dep_off = malloc(((size_t)n_rule + 1) * sizeof *dep_off);
        int64_t tot = 0;
        for (int32_t r = 0; r < n_rule; r++) tot += dep_n[r];
        dep = malloc(((size_t)tot + 1) * sizeof *dep);
        ok = dep_off && dep;
    }
    int32_t qh = 0, qt = 0;
    if (ok) {
        int32_t o = 0;
        for (int32_t r = 0; r < n_rule; r++) { dep_off[r] = o; o += dep_n[r]; dep_n[r] = 0; }
        for (int32_t a = 0; a < n_alt; a++) {
            int blocked = 0;
            for (int32_t q = g->alts[a]; g->elems[q].type != GE_END; q++) {
                const ob_gelem *e = &g->elems[q];
                int32_t t = -1;
                if (e->type == GE_REF) t = e->arg;
                else if (e->type == GE_REP) { if (g->reps[e->arg].min > 0) t = g->reps[e->arg].rule; }
                else if (want_nullable) blocked = 1;   /* a terminal is never empty */
                if (t >= 0) { dep[dep_off[t] + dep_n[t]++] = a; cnt[a]++; }
            }
            if (blocked) cnt[a] = INT32_MAX / 2;
            else if (cnt[a] == 0 && !out[alt_rule[a]]) { out[alt_rule[a]] = 1; queue[qt++] = alt_rule[a]; }
        }
        while (qh < qt) {
            int32_t r = queue[qh++];
            for (int32_t i = 0; i < dep_n[r]; i++) {
                int32_t a = dep[dep_off[r] + i];
                if (--cnt[a] == 0 && !out[alt_rule[a]]) { out[alt_rule[a]] = 1; queue[qt++] = alt_rule[a]; }
            }
        }
    }
    free(cnt); free(alt_rule); free(dep_n); free(queue); free(dep_off); free(dep);
    return ok ? 0 : -1;
}

static int elem_nullable(const ob_grammar_t *g, const uint8_t *nullable, const ob_gelem *e) {
    if (e->type == GE_REF) return nullable[e->arg];
    if (e->type == GE_REP) return g->reps[e->arg].min == 0 || nullable[g->reps[e->arg].rule];
    return 0;
}

/* Rules reachable from root; left-recursion cycles among them; unproductive ones. */
static int analyze(ob_grammar_t *g, char *err, size_t errlen) {
    int32_t n = g->n_rules;
    uint8_t *nullable = malloc((size_t)n + 1), *productive = malloc((size_t)n + 1);
    uint8_t *reach = calloc((size_t)n + 1, 1), *color = calloc((size_t)n + 1, 1);
    int32_t *stack = malloc(((size_t)n + 1) * 2 * sizeof *stack);
    int32_t *edge_off = malloc(((size_t)n + 1) * sizeof *edge_off), *edges = NULL;
    int rc = -1;
    if (!nullable || !productive || !reach || !color || !stack || !edge_off) { snprintf(err, errlen, "grammar: out of memory"); goto out; }
    if (fixpoint(g, 1, nullable) || fixpoint(g, 0, productive)) { snprintf(err, errlen, "grammar: out of memory"); goto out; }

    /* reachability */
    int32_t sp = 0;
    stack[sp++] = g->root;
    reach[g->root] = 1;
    while (sp) {
        int32_t r = stack[--sp];
        for (int32_t a = 0; a < g->rules[r].n_alt; a++)
            for (int32_t q = g->alts[g->rules[r].alt_off + a]; g->elems[q].type != GE_END; q++) {
                const ob_gelem *e = &g->elems[q];
                int32_t t = e->type == GE_REF ? e->arg : e->type == GE_REP ? g->reps[e->arg].rule : -1;
                if (t >= 0 && !reach[t]) { reach[t] = 1; stack[sp++] = t; }
            }
    }
    /* Repetitions of a body that can match nothing: X{m,n} means the same as X{0,n} (empty
     * iterations fill any minimum), and X? or X{1} is just X. Fewer counted frames to expand. */
    for (int32_t q = 0; q < g->n_elems; q++) {
        ob_gelem *e = &g->elems[q];
        if (e->type != GE_REP) continue;
        ob_grep *rp = &g->reps[e->arg];
        if (nullable[rp->rule]) rp->min = 0;
        if (rp->max == 1 && (rp->min == 1 || nullable[rp->rule])) *e = (ob_gelem){GE_REF, rp->rule};
    }
    for (int32_t r = 0; r < n; r++)
        if (reach[r] && !productive[r]) {
            snprintf(err, errlen, "grammar: rule '%s' can never finish (every alternative recurses forever)",
                     ob_grammar_rule_name(g, r));
            goto out;
        }
    for (int32_t i = 0; i < g->n_reps; i++) {
        const ob_grep *rp = &g->reps[i];
        if (reach[rp->rule] && nullable[rp->rule] && rp->max > OB_GRAMMAR_MAX_NULL_REP) {
            snprintf(err, errlen, "grammar: rule '%s' can match nothing and is repeated up to %d times (at most %d)",
                     ob_grammar_rule_name(g, rp->rule), rp->max, OB_GRAMMAR_MAX_NULL_REP);
            goto out;
        }
    }

    /* Left recursion: a cycle in the "A may start with B" graph (B after only nullable elements
     * of one of A's alternatives). Edges in CSR form, then an iterative DFS (color 1: on the
     * current path, 2: finished). */
    int64_t n_edges = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            free(edges);
            edges = malloc(((size_t)n_edges + 1) * sizeof *edges);
            if (!edges) { snprintf(err, errlen, "grammar: out of memory"); goto out; }
            n_edges = 0;
        }
        for (int32_t r = 0; r < n; r++) {
            if (pass == 1) edge_off[r] = (int32_t)n_edges;
            for (int32_t a = 0; reach[r] && a < g->rules[r].n_alt; a++)
                for (int32_t q = g->alts[g->rules[r].alt_off + a]; g->elems[q].type != GE_END; q++) {
                    const ob_gelem *e = &g->elems[q];
                    int32_t t = e->type == GE_REF ? e->arg : e->type == GE_REP ? g->reps[e->arg].rule : -1;
                    if (t >= 0) { if (pass == 1) edges[n_edges] = t; n_edges++; }
                    if (!elem_nullable(g, nullable, e)) break;
                }
        }
        if (pass == 1) edge_off[n] = (int32_t)n_edges;
    }
    for (int32_t s = 0; s < n; s++) {
        if (!reach[s] || color[s]) continue;
        int32_t top = 1;
        stack[0] = s; stack[1] = edge_off[s];
        color[s] = 1;
        while (top) {
            int32_t r = stack[2 * (top - 1)];
            int32_t *cur = &stack[2 * (top - 1) + 1];
            if (*cur >= edge_off[r + 1]) { color[r] = 2; top--; continue; }
            int32_t t = edges[(*cur)++];
            if (color[t] == 1) {
                snprintf(err, errlen, "grammar: left recursion: rule '%s' can reach itself through '%s' "
                         "without matching anything first", ob_grammar_rule_name(g, t), ob_grammar_rule_name(g, r));
                goto out;
            }
            if (color[t] == 0) {
                color[t] = 1;
                stack[2 * top] = t; stack[2 * top + 1] = edge_off[t];
                top++;
            }
        }
    }
    rc = 0;
out:
    free(nullable); free(productive); free(reach); free(color); free(stack); free(edge_off); free(edges);
    return rc;
}

/* ---- compile ---------------------------------------------------------------------------------- */

static ob_grammar_t *compile(gparser *p) {
    int32_t root = find_rule(p, "root", 4);
    if (root < 0) { fail(p, "no 'root' rule"); return NULL; }
    for (int32_t r = 0; r < p->n_rules; r++)
        if (p->rules[r].def_pos == SIZE_MAX) {
            fail_at(p, p->rules[r].ref_pos, "undefined rule '%s'", rname(p, r));
            return NULL;
        }
    ob_grammar_t *g = calloc(1, sizeof *g);
    if (!g) { fail(p, "out of memory"); return NULL; }
    atomic_init(&g->refs, 1);
    int64_t ne = 2, na = 0;
    for (int32_t r = 0; r < p->n_rules; r++) { ne += p->rules[r].n; na += p->rules[r].n_alt; }
    g->elems = malloc((size_t)ne * sizeof *g->elems);
    g->alts = malloc(((size_t)na + 1) * sizeof *g->alts);
    g->rules = malloc((size_t)p->n_rules * sizeof *g->rules);
    if (!g->elems || !g->alts || !g->rules) { ob_grammar_free(g); fail(p, "out of memory"); return NULL; }
    g->elems[0] = (ob_gelem){GE_REF, root};
    g->elems[1] = (ob_gelem){GE_END, 0};
    int32_t q = 2, a = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        brule *b = &p->rules[r];
        g->rules[r] = (ob_grule){a, b->n_alt, b->name};
        int at_start = 1;
        for (int32_t i = 0; i < b->n; i++) {
            if (at_start) { g->alts[a++] = q; at_start = 0; }
            g->elems[q++] = b->body[i];
            if (b->body[i].type == GE_END) at_start = 1;
        }
    }
    g->n_elems = q;
    g->n_alts = a;
    g->n_rules = p->n_rules;
    g->root = root;
    g->ranges = p->ranges; g->n_ranges = p->n_ranges; p->ranges = NULL;
    g->classes = p->classes; g->n_classes = p->n_classes; p->classes = NULL;
    g->reps = p->reps; g->n_reps = p->n_reps; p->reps = NULL;
    g->names = p->names.p; g->names_len = p->names.n; p->names.p = NULL;
    g->max_token = p->max_token;
    if (analyze(g, p->err, p->errlen) || ob_grammar_check_start(g, p->err, p->errlen)) {
        p->failed = 1;
        ob_grammar_free(g);
        return NULL;
    }
    return g;
}

ob_grammar_t *ob_grammar_parse_gbnf(const char *text, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    err[0] = 0;
    if (!text) { snprintf(err, errlen, "grammar: no text"); return NULL; }
    size_t len = strlen(text);
    if (len > OB_GRAMMAR_MAX_TEXT) { snprintf(err, errlen, "grammar: text larger than %u bytes", OB_GRAMMAR_MAX_TEXT); return NULL; }
    gparser p = {0};
    p.s = text;
    p.len = len;
    p.err = err;
    p.errlen = errlen;
    p.max_token = -1;
    ob_grammar_t *g = NULL;
    if (parse_text(&p) == 0 && !p.failed) g = compile(&p);
    for (int32_t r = 0; r < p.n_rules; r++) free(p.rules[r].body);
    free(p.rules);
    free(p.hash);
    free(p.names.p);
    free(p.ranges);
    free(p.classes);
    free(p.reps);
    return g;
}
