/* grammar_regex.c — JSON Schema "pattern" (an ECMA-262 subset) -> GBNF for JSON string content.
 *
 * Owns: parsing the regular expression and writing rules that match the *encoded* content of a
 * JSON string whose *decoded* text matches it: every character set becomes the raw characters a
 * JSON string may hold plus the escapes for the others ("\"", "\\", "\n", "\u0001", ...), so the
 * output is valid JSON and validates against the pattern.
 * Supported: literals, ., [classes] with ranges and negation, \d \w \s \D \W \S, escapes
 * (\t \n \r \f \v \0 \xHH \uHHHH, surrogate pairs, \u{...}, escaped punctuation), groups (...),
 * (?:...), (?<name>...), alternation, * + ? {n} {n,} {n,m} (lazy forms mean the same here),
 * ^ at the start and $ at the end. A pattern without ^ / $ matches anywhere, as JSON Schema says
 * (any characters may come before / after). Refused with a message: backreferences, lookaround,
 * word boundaries, anchors elsewhere, flags.
 * Does not own: the rest of the schema (grammar_schema.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_int.h"

#define MAX_PATTERN 10000
#define MAX_RX_DEPTH 100

typedef struct { ob_grange *r; int n, cap; } cset;

typedef struct {
    const char *s;
    size_t n, pos;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} rx;

static int rfail(rx *x, const char *msg) {
    if (!x->failed) snprintf(x->err, x->errlen, "%s at offset %zu", msg, x->pos);
    x->failed = 1;
    return -1;
}

static int cs_add(cset *c, uint32_t lo, uint32_t hi) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        ob_grange *r = realloc(c->r, (size_t)cap * sizeof *r);
        if (!r) return -1;
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n++] = (ob_grange){lo, hi};
    return 0;
}

static void cs_norm(cset *c) { c->n = ob_granges_merge(c->r, c->n); }

static int cs_negate(cset *c) {
    cs_norm(c);
    ob_grange *o = malloc(((size_t)c->n + 1) * sizeof *o);
    if (!o) return -1;
    int n = ob_granges_complement(c->r, c->n, o);
    free(c->r);
    *c = (cset){o, n, c->n + 1};
    return 0;
}

static int cs_has(const cset *c, uint32_t cp) {
    for (int i = 0; i < c->n; i++) if (cp >= c->r[i].lo && cp <= c->r[i].hi) return 1;
    return 0;
}

static int add_predef(cset *c, char k) {
    int neg = k == 'D' || k == 'W' || k == 'S';
    cset t = {0};
    int e = 0;
    switch (k | 0x20) {
    case 'd': e = cs_add(&t, '0', '9'); break;
    case 'w': e = cs_add(&t, '0', '9') || cs_add(&t, 'A', 'Z') || cs_add(&t, 'a', 'z') || cs_add(&t, '_', '_'); break;
    case 's': {
        static const uint32_t sp[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
            {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof sp / sizeof sp[0] && !e; i++) e = cs_add(&t, sp[i][0], sp[i][1]);
        break;
    }
    }
    if (!e && neg) e = cs_negate(&t);
    for (int i = 0; i < t.n && !e; i++) e = cs_add(c, t.r[i].lo, t.r[i].hi);
    free(t.r);
    return e;
}

static int hexv(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex(rx *x, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        int h = x->pos < x->n ? hexv((unsigned char)x->s[x->pos]) : -1;
        if (h < 0) return rfail(x, "bad hex escape");
        *v = *v * 16 + (uint32_t)h;
        x->pos++;
    }
    return 0;
}

/* After a backslash: a single character (*cp, returns 0) or a predefined set (adds it to set,
 * returns 1). in_class: \b is backspace there. */
static int read_escape(rx *x, uint32_t *cp, cset *set, int in_class) {
    if (x->pos >= x->n) return rfail(x, "pattern ends with '\\'");
    char e = x->s[x->pos++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        if (add_predef(set, e)) return rfail(x, "out of memory");
        return 1;
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return read_hex(x, 2, cp);
    case 'u': {
        if (x->pos < x->n && x->s[x->pos] == '{') {
            x->pos++;
            uint32_t v = 0;
            int nd = 0, h;
            while (x->pos < x->n && (h = hexv((unsigned char)x->s[x->pos])) >= 0 && nd < 8) { v = v * 16 + (uint32_t)h; x->pos++; nd++; }
            if (!nd || x->pos >= x->n || x->s[x->pos] != '}' || v > OB_CP_MAX) return rfail(x, "bad \\u{...} escape");
            x->pos++;
            *cp = v;
        } else if (read_hex(x, 4, cp)) return -1;
        if (*cp >= 0xD800 && *cp <= 0xDBFF && x->pos + 6 <= x->n && x->s[x->pos] == '\\' && x->s[x->pos + 1] == 'u') {
            size_t save = x->pos;
            uint32_t lo;
            x->pos += 2;
            if (read_hex(x, 4, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) { *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00); return 0; }
            x->failed = 0;
            x->pos = save;
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return rfail(x, "unpaired surrogate escape");
        return 0;
    }
    case 'b':
        if (in_class) { *cp = 8; return 0; }
        return rfail(x, "word boundaries (\\b) are not supported");
    case 'B': return rfail(x, "word boundaries (\\B) are not supported");
    case 'c': case 'k': case 'p': case 'P': return rfail(x, "this escape is not supported");
    default:
        if (e >= '1' && e <= '9') return rfail(x, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return rfail(x, "unknown escape");
        x->pos--;
        {
            int l = ob_grammar_utf8_decode((const unsigned char *)x->s + x->pos, x->n - x->pos, cp);
            if (!l) return rfail(x, "invalid UTF-8");
            x->pos += (size_t)l;
        }
        return 0;
    }
}

static int read_literal(rx *x, uint32_t *cp) {
    int l = ob_grammar_utf8_decode((const unsigned char *)x->s + x->pos, x->n - x->pos, cp);
    if (!l) return rfail(x, "invalid UTF-8");
    x->pos += (size_t)l;
    return 0;
}

/* The JSON-string encodings of the characters in set, as a GBNF expression. */
static int emit_set(rx *x, cset *set, ob_gbuf *out) {
    cs_norm(set);
    /* raw: everything from U+0020 but '"', '\\' and U+007F */
    ob_gbuf cls = {0};
    int n_raw = 0;
    for (int i = 0; i < set->n; i++) {
        uint32_t lo = set->r[i].lo < 0x20 ? 0x20 : set->r[i].lo, hi = set->r[i].hi;
        static const uint32_t holes[] = {0x22, 0x5C, 0x7F};
        for (int h = 0; h <= 3 && lo <= hi; h++) {
            uint32_t stop = h < 3 ? holes[h] : OB_CP_MAX + 1;
            if (stop < lo) continue;
            uint32_t e = hi < stop ? hi : stop - 1;
            if (lo <= e) {
                ob_gbuf_cp(&cls, lo);
                if (e > lo) { ob_gbuf_puts(&cls, "-"); ob_gbuf_cp(&cls, e); }
                n_raw++;
            }
            lo = stop + 1;
        }
    }
    ob_gbuf alts = {0};
    int n_alt = 0;
    if (n_raw) { ob_gbuf_printf(&alts, "[%s]", cls.p); n_alt++; }
    free(cls.p);
    static const struct { uint32_t cp; const char *lit; } ESC[] = {
        {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\r', "\"\\\\r\""},
        {'\t', "\"\\\\t\""}, {8, "\"\\\\b\""}, {12, "\"\\\\f\""}};
    for (size_t i = 0; i < sizeof ESC / sizeof ESC[0]; i++)
        if (cs_has(set, ESC[i].cp)) { ob_gbuf_printf(&alts, "%s%s", n_alt++ ? " | " : "", ESC[i].lit); }
    for (uint32_t cp = 1; cp < 0x80; cp++) {
        if (cp >= 0x20 && cp != 0x7F) continue;
        if (cp == '\n' || cp == '\r' || cp == '\t' || cp == 8 || cp == 12) continue;
        if (cs_has(set, cp)) ob_gbuf_printf(&alts, "%s\"\\\\u00%02X\"", n_alt++ ? " | " : "", (unsigned)cp);
    }
    if (!n_alt) { free(alts.p); return rfail(x, "a character set matches no character a JSON string can hold"); }
    ob_gbuf_printf(out, n_alt > 1 ? "( %s )" : "%s", alts.p);
    free(alts.p);
    return out->oom ? rfail(x, "out of memory") : 0;
}

static int parse_alt(rx *x, ob_gbuf *out);

static int parse_class(rx *x, ob_gbuf *out) {
    size_t start = x->pos++;
    cset set = {0};
    int neg = 0;
    if (x->pos < x->n && x->s[x->pos] == '^') { neg = 1; x->pos++; }
    while (x->pos < x->n && x->s[x->pos] != ']') {
        uint32_t lo, hi;
        int k;
        if (x->s[x->pos] == '\\') { x->pos++; k = read_escape(x, &lo, &set, 1); }
        else k = read_literal(x, &lo);
        if (k < 0) { free(set.r); return -1; }
        if (k == 1) continue;
        hi = lo;
        if (x->pos + 1 < x->n && x->s[x->pos] == '-' && x->s[x->pos + 1] != ']') {
            x->pos++;
            if (x->s[x->pos] == '\\') { x->pos++; k = read_escape(x, &hi, &set, 1); }
            else k = read_literal(x, &hi);
            if (k < 0) { free(set.r); return -1; }
            if (k == 1) { if (cs_add(&set, lo, lo) || cs_add(&set, '-', '-')) goto oom; continue; }
            if (hi < lo) { free(set.r); return rfail(x, "range out of order in character class"); }
        }
        if (cs_add(&set, lo, hi)) goto oom;
    }
    if (x->pos >= x->n) { free(set.r); x->pos = start; return rfail(x, "unterminated character class"); }
    x->pos++;
    if (neg && cs_negate(&set)) goto oom;
    int rc = emit_set(x, &set, out);
    free(set.r);
    return rc;
oom:
    free(set.r);
    return rfail(x, "out of memory");
}

static int parse_count(rx *x, long *v) {
    long n = 0;
    int any = 0;
    while (x->pos < x->n && x->s[x->pos] >= '0' && x->s[x->pos] <= '9') {
        n = n * 10 + (x->s[x->pos++] - '0');
        any = 1;
        if (n > OB_GRAMMAR_MAX_REPEAT) return rfail(x, "repetition count too large");
    }
    *v = n;
    return any ? 0 : -1;
}

/* {n}, {n,}, {n,m} at x->pos; 1 if one was read, 0 if '{' is a literal here. */
static int parse_braces(rx *x, long *min, long *max) {
    size_t save = x->pos;
    x->pos++;
    if (parse_count(x, min)) { if (x->failed) return -1; x->pos = save; return 0; }
    *max = *min;
    if (x->pos < x->n && x->s[x->pos] == ',') {
        x->pos++;
        *max = -1;
        if (x->pos < x->n && x->s[x->pos] != '}' && parse_count(x, max)) { if (x->failed) return -1; x->pos = save; return 0; }
    }
    if (x->pos >= x->n || x->s[x->pos] != '}') { x->pos = save; return 0; }
    x->pos++;
    if (*max >= 0 && *min > *max) return rfail(x, "repetition {n,m} with n > m");
    return 1;
}

static int parse_seq(rx *x, ob_gbuf *out) {
    int items = 0;
    while (x->pos < x->n && x->s[x->pos] != '|' && x->s[x->pos] != ')') {
        ob_gbuf atom = {0};
        char ch = x->s[x->pos];
        int rc = 0;
        if (ch == '(') {
            if (++x->depth > MAX_RX_DEPTH) return rfail(x, "groups nested too deeply");
            x->pos++;
            if (x->pos < x->n && x->s[x->pos] == '?') {
                const char *p = x->s + x->pos;
                size_t left = x->n - x->pos;
                if (left >= 2 && p[1] == ':') x->pos += 2;
                else if (left >= 2 && (p[1] == '<' || p[1] == 'P') && !(left >= 3 && (p[2] == '=' || p[2] == '!'))) {
                    while (x->pos < x->n && x->s[x->pos] != '>') x->pos++;
                    if (x->pos >= x->n) return rfail(x, "unterminated group name");
                    x->pos++;
                } else return rfail(x, "lookaround and inline flags are not supported");
            }
            ob_gbuf_puts(&atom, "(");
            rc = parse_alt(x, &atom);
            if (!rc && (x->pos >= x->n || x->s[x->pos] != ')')) rc = rfail(x, "missing ')'");
            x->pos++;
            x->depth--;
            ob_gbuf_puts(&atom, " )");
        } else if (ch == '[') {
            rc = parse_class(x, &atom);
        } else if (ch == '.') {
            x->pos++;
            cset set = {0};
            if (cs_add(&set, '\n', '\n') || cs_add(&set, '\r', '\r') || cs_add(&set, 0x2028, 0x2029) || cs_negate(&set)) rc = rfail(x, "out of memory");
            else rc = emit_set(x, &set, &atom);
            free(set.r);
        } else if (ch == '^' || ch == '$') {
            rc = rfail(x, "anchors are only supported at the start (^) and the end ($)");
        } else if (ch == '*' || ch == '+' || ch == '?') {
            rc = rfail(x, "nothing to repeat");
        } else {
            cset set = {0};
            uint32_t cp = 0;
            int k;
            if (ch == '\\') { x->pos++; k = read_escape(x, &cp, &set, 0); }
            else k = read_literal(x, &cp);
            if (k == 0 && cs_add(&set, cp, cp)) k = rfail(x, "out of memory");
            rc = k < 0 ? -1 : emit_set(x, &set, &atom);
            free(set.r);
        }
        if (rc) { free(atom.p); return -1; }
        /* quantifier */
        long min = 1, max = 1;
        int q = 0;
        if (x->pos < x->n) {
            char c = x->s[x->pos];
            if (c == '*') { min = 0; max = -1; q = 1; x->pos++; }
            else if (c == '+') { min = 1; max = -1; q = 1; x->pos++; }
            else if (c == '?') { min = 0; max = 1; q = 1; x->pos++; }
            else if (c == '{') { q = parse_braces(x, &min, &max); if (q < 0) { free(atom.p); return -1; } }
            if (q && x->pos < x->n && x->s[x->pos] == '?') x->pos++;   /* lazy: same language */
            if (q && x->pos < x->n && (x->s[x->pos] == '*' || x->s[x->pos] == '+' || x->s[x->pos] == '?')) {
                free(atom.p);
                return rfail(x, "possessive or doubled quantifiers are not supported");
            }
        }
        ob_gbuf_puts(out, items++ ? " " : "");
        if (!q) ob_gbuf_puts(out, atom.p ? atom.p : "");
        else if (max < 0) ob_gbuf_printf(out, "( %s ){%ld,}", atom.p ? atom.p : "", min);
        else ob_gbuf_printf(out, "( %s ){%ld,%ld}", atom.p ? atom.p : "", min, max);
        free(atom.p);
    }
    return 0;
}

static int parse_alt(rx *x, ob_gbuf *out) {
    for (int first = 1;; first = 0) {
        ob_gbuf_puts(out, first ? " " : " | ");
        if (parse_seq(x, out)) return -1;
        if (x->pos >= x->n || x->s[x->pos] != '|') return 0;
        x->pos++;
    }
}

int ob_grammar_regex_to_gbnf(const char *pattern, const char *name, const char *json_char,
                             ob_gbuf *out, char *err, size_t errlen) {
    size_t n = strlen(pattern);
    if (n > MAX_PATTERN) { snprintf(err, errlen, "longer than %d bytes", MAX_PATTERN); return -1; }
    rx x = {pattern, n, 0, 0, err, errlen, 0};
    int anchored_start = n > 0 && pattern[0] == '^';
    /* a final '$' not escaped by an odd run of backslashes */
    int anchored_end = 0;
    if (n > (size_t)anchored_start && pattern[n - 1] == '$') {
        size_t bs = 0;
        while (bs + 1 < n && pattern[n - 2 - bs] == '\\') bs++;
        anchored_end = bs % 2 == 0;
    }
    x.pos = (size_t)anchored_start;
    x.n = n - (size_t)anchored_end;
    ob_gbuf body = {0};
    int rc = parse_alt(&x, &body);
    if (!rc && x.pos < x.n) rc = rfail(&x, "unbalanced ')'");
    if (!rc) {
        ob_gbuf_printf(out, "%s ::=", name);
        if (!anchored_start) ob_gbuf_printf(out, " %s*", json_char);
        ob_gbuf_printf(out, " (%s )", body.p ? body.p : "");
        if (!anchored_end) ob_gbuf_printf(out, " %s*", json_char);
        ob_gbuf_puts(out, "\n");
        if (out->oom) rc = rfail(&x, "out of memory");
    }
    free(body.p);
    return rc;
}
