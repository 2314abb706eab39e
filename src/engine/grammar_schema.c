/* grammar_schema.c — JSON Schema (a subset) -> GBNF text -> grammar.
 *
 * Owns: the conversion of a schema into GBNF rules for JSON text that validates against it, the
 * fixed JSON rules (strings, numbers, bounded whitespace), allOf merging, integer/number range
 * rules, and ob_grammar_json_object. docs/grammar.md lists the subset and the choices; the main
 * ones follow llama.cpp's json-schema-to-grammar:
 *   - an object schema without "additionalProperties" allows no other keys (JSON Schema's default
 *     is to allow them; llama.cpp chose "no" to keep models on the listed keys);
 *   - properties come in schema order, required ones first, each at most once;
 *   - whitespace is bounded: at most one space, or 1-2 newlines and 20 spaces/tabs, after '{',
 *     '[', ',' and ':' and before '}' and ']'; none around the top-level value.
 * Where llama.cpp silently ignores a keyword, this converter refuses it (the output must validate):
 * unsupported assertions (not, if/then/else, uniqueItems, multipleOf, patternProperties, ...) and
 * remote $refs are errors naming the schema location. Annotations (title, description, default,
 * examples, ...) and unknown formats are ignored, as JSON Schema allows.
 * Strings never contain a \u0000 escape or an unpaired surrogate escape, integers have at most 16
 * digits and exponents at most 2, so every output also parses with strict parsers (jansson).
 * Does not own: GBNF parsing (grammar_gbnf.c), regular expressions (grammar_regex.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_int.h"

#define MAX_DEPTH 64          /* schema nesting (also bounds recursion through allOf merges) */
#define MAX_RULES 50000
#define MAX_OUT (4u << 20)    /* bytes of generated GBNF */
#define MAX_PRODUCT 64        /* alternatives from merging several anyOf lists */
#define INT_DIGITS 16         /* unbounded integers: at most this many digits */
#define INT_CAP 999999999999999999ULL   /* |bounds| are clamped to 18 digits (fits int64) */

typedef struct { char *name, *body; } srule;
typedef struct { const char *ref; char *name; } sref;

typedef struct {
    json_t *doc;
    srule *rules; int n_rules, cap_rules;
    int *hash; size_t hmask;          /* rule index + 1 by name */
    sref *refs; int n_refs, cap_refs;
    char prefix[64];
    char *err; size_t errlen;
    int failed;
    size_t out_bytes;
    json_t *scratch;                  /* merged schemas kept alive until the end */
} conv;

static int fail(conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "json schema: at %s: %s", *path ? path : "/", msg);
    return -1;
}

/* ---- rule table ------------------------------------------------------------------------------ */

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static int find(conv *c, const char *name) {
    if (!c->hash) return -1;
    for (size_t k = str_hash(name) & c->hmask; c->hash[k]; k = (k + 1) & c->hmask)
        if (strcmp(c->rules[c->hash[k] - 1].name, name) == 0) return c->hash[k] - 1;
    return -1;
}

static int insert(conv *c, char *name, char *body) {
    if (c->n_rules >= MAX_RULES) { free(name); free(body); return fail(c, "", "more than %d grammar rules", MAX_RULES); }
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? c->cap_rules * 2 : 64;
        srule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r) { free(name); free(body); return fail(c, "", "out of memory"); }
        c->rules = r;
        c->cap_rules = cap;
    }
    if ((size_t)(c->n_rules + 1) * 2 > c->hmask + 1 || !c->hash) {
        size_t cap = c->hash ? (c->hmask + 1) * 2 : 256;
        int *h = calloc(cap, sizeof *h);
        if (!h) { free(name); free(body); return fail(c, "", "out of memory"); }
        for (int i = 0; i < c->n_rules; i++) {
            size_t k = str_hash(c->rules[i].name) & (cap - 1);
            while (h[k]) k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(c->hash);
        c->hash = h;
        c->hmask = cap - 1;
    }
    c->rules[c->n_rules] = (srule){name, body};
    size_t k = str_hash(name) & c->hmask;
    while (c->hash[k]) k = (k + 1) & c->hmask;
    c->hash[k] = ++c->n_rules;
    return c->n_rules - 1;
}

/* A rule name from a hint: prefix + the hint with everything but [A-Za-z0-9-] as '-'. */
static void make_name(conv *c, const char *hint, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "%s", c->prefix);
    for (const char *s = hint; *s && k + 12 < n; s++) {
        char ch = *s;
        out[k++] = ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-') ? ch : '-';
    }
    out[k] = 0;
    if (!*hint) snprintf(out + k, n - k, "schema");
}

/* Adds `name ::= body` (name derived from hint, made unique unless an identical rule exists).
 * Returns the rule's name (owned by the table) or NULL. body NULL: reserve the name. */
static const char *add_rule(conv *c, const char *hint, const char *body) {
    if (c->failed) return NULL;
    char base[160], name[192];
    make_name(c, hint, base, sizeof base);
    snprintf(name, sizeof name, "%s", base);
    for (int i = 1;; i++) {
        int r = find(c, name);
        if (r < 0) break;
        if (body && c->rules[r].body && strcmp(c->rules[r].body, body) == 0) return c->rules[r].name;
        snprintf(name, sizeof name, "%s%d", base, i);
    }
    size_t bl = body ? strlen(body) : 0;
    c->out_bytes += strlen(name) + bl + 6;
    if (c->out_bytes > MAX_OUT) { fail(c, "", "the grammar would be larger than %u bytes", MAX_OUT); return NULL; }
    char *nm = strdup(name), *bd = body ? strdup(body) : NULL;
    if (!nm || (body && !bd)) { free(nm); free(bd); fail(c, "", "out of memory"); return NULL; }
    int r = insert(c, nm, bd);
    return r < 0 ? NULL : c->rules[r].name;
}

static void set_body(conv *c, const char *name, const char *body) {
    int r = find(c, name);
    if (r < 0 || c->failed) return;
    free(c->rules[r].body);
    c->rules[r].body = strdup(body);
    if (!c->rules[r].body) fail(c, "", "out of memory");
}

/* ---- fixed rules ------------------------------------------------------------------------------ */

static const struct { const char *name, *body; } PRIM[] = {
    {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"},
    {"boolean", "\"true\" | \"false\""},
    {"null", "\"null\""},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}"},
    {"decimal-part", "[0-9]{1,16}"},
    {"hex", "[0-9a-fA-F]"},
    /* \u escapes: no U+0000 (strict parsers refuse it) and surrogates only as a valid pair */
    {"u-esc", "\"0\" ( [1-9a-fA-F] @hex{2} | \"0\" ( [1-9a-fA-F] @hex | \"0\" [1-9a-fA-F] ) ) | [1-9a-cA-CeEfF] @hex{3} "
              "| [dD] [0-7] @hex{2} | [dD] [89abAB] @hex{2} \"\\\\u\" [dD] [c-fC-F] @hex{2}"},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" @u-esc )"},
    /* keys of additional properties: no escapes, so the raw text is the key (see not_strings) */
    {"key-char", "[^\"\\\\\\x7F\\x00-\\x1F]"},
    {"string", "\"\\\"\" @char* \"\\\"\""},
    {"number", "\"-\"? @integral-part ( \".\" @decimal-part )? ( [eE] [-+]? [0-9]{1,2} )?"},
    {"integer", "\"-\"? @integral-part"},
    {"value", "@object | @array | @string | @number | @boolean | @null"},
    {"object", "\"{\" @space ( @string \":\" @space @value ( \",\" @space @string \":\" @space @value )* @space )? \"}\""},
    {"array", "\"[\" @space ( @value ( \",\" @space @value )* @space )? \"]\""},
    {"uuid", "\"\\\"\" @hex{8} \"-\" @hex{4} \"-\" @hex{4} \"-\" @hex{4} \"-\" @hex{12} \"\\\"\""},
    {"d28", "\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]"},
    {"date", "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( @d28 | \"29\" | \"30\" | \"31\" ) "
             "| ( \"0\" [469] | \"11\" ) \"-\" ( @d28 | \"29\" | \"30\" ) | \"02-\" @d28 ) "
             "| [0-9]{2} ( [02468] [48] | [13579] [26] | [2468] \"0\" ) \"-02-29\""},
    {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
             "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
    {"date-time", "@date \"T\" @time"},
    {"date-string", "\"\\\"\" @date \"\\\"\""},
    {"time-string", "\"\\\"\" @time \"\\\"\""},
    {"date-time-string", "\"\\\"\" @date-time \"\\\"\""},
};

/* The fixed rule `name` (and what it uses: "@x" in a body is fixed rule x). */
static const char *prim(conv *c, const char *name) {
    int i = 0, n = (int)(sizeof PRIM / sizeof PRIM[0]);
    while (i < n && strcmp(PRIM[i].name, name) != 0) i++;
    if (i == n || c->failed) return NULL;
    char full[160];
    make_name(c, name, full, sizeof full);
    int r = find(c, full);
    if (r >= 0) return c->rules[r].name;
    const char *nm = add_rule(c, name, NULL);   /* reserve first: bodies may refer back */
    if (!nm) return NULL;
    ob_gbuf b = {0};
    for (const char *s = PRIM[i].body; *s;) {
        if (*s == '@') {
            const char *e = ++s;
            while ((*e >= 'a' && *e <= 'z') || (*e >= '0' && *e <= '9') || *e == '-') e++;
            char dep[64];
            snprintf(dep, sizeof dep, "%.*s", (int)(e - s), s);
            const char *d = prim(c, dep);
            if (!d) { free(b.p); return NULL; }
            ob_gbuf_puts(&b, d);
            s = e;
        } else ob_gbuf_put(&b, s++, 1);
    }
    if (b.oom) { free(b.p); fail(c, "", "out of memory"); return NULL; }
    set_body(c, nm, b.p);
    free(b.p);
    return nm;
}

static void lit(ob_gbuf *b, const char *s) {
    size_t n = ob_grammar_gbnf_literal(s, strlen(s), NULL, 0);
    char *tmp = malloc(n + 1);
    if (!tmp) { b->oom = 1; return; }
    ob_grammar_gbnf_literal(s, strlen(s), tmp, n + 1);
    ob_gbuf_put(b, tmp, n);
    free(tmp);
}

/* A rule from a finished buffer (frees it). */
static const char *rule_from(conv *c, const char *hint, ob_gbuf *b) {
    if (b->oom) { free(b->p); fail(c, "", "out of memory"); return NULL; }
    const char *r = add_rule(c, hint, b->p ? b->p : "");
    free(b->p);
    *b = (ob_gbuf){0};
    return r;
}

/* ---- numbers ------------------------------------------------------------------------------------ */

static void digits(uint64_t v, int len, char *out) {
    for (int i = len - 1; i >= 0; i--) { out[i] = (char)('0' + v % 10); v /= 10; }
    out[len] = 0;
}

static int ndigits(uint64_t v) { int n = 1; while (v >= 10) { v /= 10; n++; } return n; }

static void any_digits(ob_gbuf *b, int m) {
    if (m == 1) ob_gbuf_puts(b, " [0-9]");
    else if (m > 1) ob_gbuf_printf(b, " [0-9]{%d}", m);
}

/* Digit strings of length m that are >= s (ge) or <= s (!ge). */
static void suffix_rule(ob_gbuf *b, const char *s, int m, int ge) {
    int trivial = 1;
    for (int i = 0; i < m; i++) if (s[i] != (ge ? '0' : '9')) trivial = 0;
    if (m == 0) return;
    if (trivial) { any_digits(b, m); return; }
    int d = s[0] - '0';
    ob_gbuf_printf(b, " ( \"%c\"", s[0]);
    suffix_rule(b, s + 1, m - 1, ge);
    if (ge && d < 9) { ob_gbuf_printf(b, " | [%d-9]", d + 1); any_digits(b, m - 1); }
    if (!ge && d > 0) { ob_gbuf_printf(b, " | [0-%d]", d - 1); any_digits(b, m - 1); }
    ob_gbuf_puts(b, " )");
}

/* Numbers x..y (same digit count len, x <= y), written without leading zeros. */
static void same_len(ob_gbuf *b, const char *x, const char *y, int len) {
    int i = 0;
    while (i < len && x[i] == y[i]) i++;
    if (i) ob_gbuf_printf(b, " \"%.*s\"", i, x);
    if (i == len) return;
    int dx = x[i] - '0', dy = y[i] - '0', m = len - i - 1;
    int x0 = 1, y9 = 1;
    for (int k = i + 1; k < len; k++) { if (x[k] != '0') x0 = 0; if (y[k] != '9') y9 = 0; }
    int lo = x0 ? dx : dx + 1, hi = y9 ? dy : dy - 1;   /* first digits with any suffix */
    int alts = 0;
    ob_gbuf_puts(b, " (");
    if (!x0) { ob_gbuf_printf(b, " \"%d\"", dx); suffix_rule(b, x + i + 1, m, 1); alts++; }
    if (lo <= hi) {
        ob_gbuf_printf(b, "%s [%d-%d]", alts ? " |" : "", lo, hi);
        any_digits(b, m);
        alts++;
    }
    if (!y9) { ob_gbuf_printf(b, "%s \"%d\"", alts ? " |" : "", dy); suffix_rule(b, y + i + 1, m, 0); }
    ob_gbuf_puts(b, " )");
}

/* Non-negative integers a..b (b may be UINT64_MAX: unbounded, at most INT_DIGITS digits or as
 * many as a has). Appends "( alt | alt ... )". */
static void uint_range(ob_gbuf *b, uint64_t a, uint64_t hi) {
    int la = ndigits(a), lb;
    if (hi == UINT64_MAX) { lb = la > INT_DIGITS ? la : INT_DIGITS; }
    else lb = ndigits(hi);
    ob_gbuf_puts(b, " (");
    for (int len = la; len <= lb; len++) {
        uint64_t p = 1;
        for (int k = 1; k < len; k++) p *= 10;
        uint64_t lo_l = len == 1 ? 0 : p, hi_l = p * 10 - 1;
        if (lo_l < a) lo_l = a;
        if (hi != UINT64_MAX && hi_l > hi) hi_l = hi;
        char xs[24], ys[24];
        digits(lo_l, len, xs);
        digits(hi_l, len, ys);
        if (len > la) ob_gbuf_puts(b, " |");
        same_len(b, xs, ys, len);
    }
    ob_gbuf_puts(b, " )");
}

/* A bound read from the schema: value, strictness, and whether present. */
typedef struct { double v; int strict, set; } bound;

static int read_bounds(conv *c, json_t *s, const char *path, bound *lo, bound *hi) {
    *lo = (bound){0, 0, 0};
    *hi = (bound){0, 0, 0};
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
    if ((mn && !json_is_number(mn)) || (mx && !json_is_number(mx)))
        return fail(c, path, "minimum/maximum must be numbers");
    if (mn) *lo = (bound){json_number_value(mn), 0, 1};
    if (mx) *hi = (bound){json_number_value(mx), 0, 1};
    if (emn) {
        if (json_is_boolean(emn)) { if (json_is_true(emn) && lo->set) lo->strict = 1; }   /* draft 4 */
        else if (json_is_number(emn)) {
            double v = json_number_value(emn);
            if (!lo->set || v >= lo->v) *lo = (bound){v, 1, 1};
        } else return fail(c, path, "exclusiveMinimum must be a number");
    }
    if (emx) {
        if (json_is_boolean(emx)) { if (json_is_true(emx) && hi->set) hi->strict = 1; }
        else if (json_is_number(emx)) {
            double v = json_number_value(emx);
            if (!hi->set || v <= hi->v) *hi = (bound){v, 1, 1};
        } else return fail(c, path, "exclusiveMaximum must be a number");
    }
    if (!isfinite(lo->v) || !isfinite(hi->v)) return fail(c, path, "bounds must be finite");
    return 0;
}

/* Integers in [lo, hi] as an alternation appended to b. Returns -1 if the range is empty. */
static int int_range(ob_gbuf *b, int has_lo, int64_t lo, int has_hi, int64_t hi) {
    if (has_lo && has_hi && lo > hi) return -1;
    int alts = 0;
    ob_gbuf_puts(b, "(");
    if (!has_lo || lo < 0) {   /* negative part: "-" magnitude in [max(1, -hi), -lo] */
        uint64_t mlo = has_hi && hi < 0 ? (uint64_t)(-hi) : 1;
        uint64_t mhi = has_lo ? (uint64_t)(-lo) : UINT64_MAX;
        ob_gbuf_puts(b, " \"-\"");
        uint_range(b, mlo, mhi);
        alts++;
    }
    if (!has_hi || hi >= 0) {
        ob_gbuf_puts(b, alts ? " |" : "");
        uint_range(b, has_lo && lo > 0 ? (uint64_t)lo : 0, has_hi ? (uint64_t)hi : UINT64_MAX);
    }
    ob_gbuf_puts(b, " )");
    return 0;
}

static int64_t clamp_i(double v) {
    if (v > (double)INT_CAP) return (int64_t)INT_CAP;
    if (v < -(double)INT_CAP) return -(int64_t)INT_CAP;
    return (int64_t)v;
}

static const char *integer_rule(conv *c, json_t *s, const char *hint, const char *path) {
    bound lo, hi;
    if (read_bounds(c, s, path, &lo, &hi)) return NULL;
    if (!lo.set && !hi.set) return prim(c, "integer");
    /* The smallest integer above the lower bound, the largest below the upper. */
    int64_t l = 0, h = 0;
    if (lo.set) { double v = ceil(lo.v); if (lo.strict && v == lo.v) v += 1; l = clamp_i(v); }
    if (hi.set) { double v = floor(hi.v); if (hi.strict && v == hi.v) v -= 1; h = clamp_i(v); }
    ob_gbuf b = {0};
    if (int_range(&b, lo.set, l, hi.set, h)) { free(b.p); fail(c, path, "no integer lies between the bounds"); return NULL; }
    return rule_from(c, hint, &b);
}

/* Decimals m.f with m in [a, b] (integers >= 0; b < 0: unbounded) and fraction kind fk:
 * 0 any fraction or none, 1 only zeros or none, 2 at least one nonzero digit. */
static void mag_alt(ob_gbuf *b, int *alts, uint64_t a, int64_t hi, int fk) {
    if (hi >= 0 && (uint64_t)hi < a) return;
    static const char *FR[3] = {" ( \".\" [0-9]{1,16} )?", " ( \".\" \"0\"{1,16} )?", " \".\" \"0\"{0,15} [1-9] [0-9]{0,15}"};
    ob_gbuf_puts(b, (*alts)++ ? " |" : "");
    uint_range(b, a, hi < 0 ? UINT64_MAX : (uint64_t)hi);
    ob_gbuf_puts(b, FR[fk]);
}

/* Magnitudes t = m.f with lo <= t <= hi (integer bounds, strict flags; hi < 0: none). */
static void magnitude(ob_gbuf *b, int *alts, int64_t lo, int slo, int64_t hi, int shi) {
    if (hi < 0) { mag_alt(b, alts, (uint64_t)lo + (slo ? 1 : 0), -1, 0); if (slo) mag_alt(b, alts, (uint64_t)lo, lo, 2); return; }
    if (lo > hi || (lo == hi && (slo || shi))) return;
    /* integer part in [lo', hi-1] with any fraction; lo with a nonzero fraction when strict; hi exact */
    int64_t first = lo + (slo ? 1 : 0);
    if (first <= hi - 1) mag_alt(b, alts, (uint64_t)first, hi - 1, 0);
    if (slo && lo < hi) mag_alt(b, alts, (uint64_t)lo, lo, 2);
    if (!shi) mag_alt(b, alts, (uint64_t)hi, hi, 1);
}

static const char *number_rule(conv *c, json_t *s, const char *hint, const char *path) {
    bound lo, hi;
    if (read_bounds(c, s, path, &lo, &hi)) return NULL;
    if (!lo.set && !hi.set) return prim(c, "number");
    /* Bounds rounded inward to integers (a stricter range still validates). */
    int64_t L = 0, H = 0;
    int sl = 0, sh = 0;
    if (lo.set) { double v = ceil(lo.v); sl = lo.strict && v == lo.v; L = clamp_i(v); if (v != lo.v) sl = 0; }
    if (hi.set) { double v = floor(hi.v); sh = hi.strict && v == hi.v; H = clamp_i(v); if (v != hi.v) sh = 0; }
    ob_gbuf b = {0};
    int alts = 0;
    ob_gbuf_puts(&b, "(");
    /* v >= 0 written as m.f: t = v in [max(L,0), H] */
    if (!hi.set || H > 0 || (H == 0 && !sh)) {
        int64_t a = lo.set && L > 0 ? L : 0;
        int sa = lo.set && L >= 0 ? sl : 0;
        magnitude(&b, &alts, a, sa, hi.set ? H : -1, sh);
    }
    /* v < 0 written as -m.f: t = -v in [max(-H,0), -L] */
    if (!lo.set || L < 0) {
        ob_gbuf nb = {0};
        int nalts = 0;
        int64_t a = hi.set && H < 0 ? -H : 0;
        int sa = hi.set && H <= 0 ? sh : 0;
        if (hi.set && H > 0) sa = 0;
        magnitude(&nb, &nalts, a, sa, lo.set ? -L : -1, sl);
        if (nalts) {
            ob_gbuf_printf(&b, "%s \"-\" (%s )", alts ? " |" : "", nb.p ? nb.p : "");
            alts++;
        }
        free(nb.p);
    }
    ob_gbuf_puts(&b, " )");
    if (!alts) { free(b.p); fail(c, path, "no number with at most 16 integer digits lies between the bounds"); return NULL; }
    return rule_from(c, hint, &b);
}

/* ---- schema walking ------------------------------------------------------------------------------ */

static const char *visit(conv *c, json_t *s, const char *hint, const char *path, int depth);

static int is_annotation(const char *k) {
    static const char *const A[] = {"$schema", "$id", "$comment", "title", "description", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding",
        "discriminator", "example", "x-order", "strict", "name", NULL};
    for (int i = 0; A[i]; i++) if (strcmp(k, A[i]) == 0) return 1;
    return k[0] == 'x' && k[1] == '-';   /* vendor extensions */
}

static int is_known(const char *k) {
    static const char *const K[] = {"type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "properties",
        "required", "additionalProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
        "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "nullable", NULL};
    for (int i = 0; K[i]; i++) if (strcmp(k, K[i]) == 0) return 1;
    return 0;
}

/* Keywords that are accepted when they constrain nothing. */
static int is_trivial(const char *k, json_t *v) {
    if (strcmp(k, "uniqueItems") == 0) return json_is_false(v);
    if (strcmp(k, "minProperties") == 0 || strcmp(k, "minContains") == 0) return json_is_integer(v) && json_integer_value(v) == 0;
    if (strcmp(k, "multipleOf") == 0) return json_is_number(v) && json_number_value(v) == 1;   /* integers only: checked by type */
    return 0;
}

static void child_path(char *out, size_t n, const char *path, const char *key) {
    if (out != path) snprintf(out, n, "%s", path);
    size_t k = strlen(out);
    if (k + 1 < n) { out[k++] = '/'; out[k] = 0; }
    for (; *key && k + 3 < n; key++) {   /* JSON pointer escaping */
        if (*key == '~') { out[k++] = '~'; out[k++] = '0'; }
        else if (*key == '/') { out[k++] = '~'; out[k++] = '1'; }
        else out[k++] = *key;
    }
    out[k < n ? k : n - 1] = 0;
}

static void child_hint(char *out, size_t n, const char *hint, const char *key) {
    snprintf(out, n, "%s%s%.60s", hint, *hint ? "-" : "", key);
}

/* Follows a local $ref ("#", "#/a/b", with ~0 ~1 and %-escapes not supported). */
static json_t *resolve(conv *c, const char *ref, const char *path) {
    if (ref[0] != '#') { fail(c, path, "$ref '%.100s': only references inside the schema (#/...) are supported", ref); return NULL; }
    json_t *cur = c->doc;
    const char *p = ref + 1;
    if (*p && *p != '/') { fail(c, path, "$ref '%.100s': anchors are not supported", ref); return NULL; }
    while (*p == '/') {
        p++;
        char tok[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') { tok[k++] = '~'; p += 2; }
            else if (p[0] == '~' && p[1] == '1') { tok[k++] = '/'; p += 2; }
            else tok[k++] = *p++;
        }
        tok[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) {
            char *e;
            long i = strtol(tok, &e, 10);
            cur = (*tok && !*e && i >= 0) ? json_array_get(cur, (size_t)i) : NULL;
        } else cur = NULL;
        if (!cur) { fail(c, path, "$ref '%.100s' does not resolve", ref); return NULL; }
    }
    return cur;
}

/* ---- allOf: merging schemas ---------------------------------------------------------------------- */

static json_t *deref(conv *c, json_t *s, const char *path, int depth) {
    for (int i = 0; json_is_object(s) && json_object_get(s, "$ref"); i++) {
        json_t *r = json_object_get(s, "$ref");
        if (!json_is_string(r)) { fail(c, path, "$ref must be a string"); return NULL; }
        if (i > MAX_DEPTH || depth > MAX_DEPTH) { fail(c, path, "$ref chain too long or circular inside allOf"); return NULL; }
        s = resolve(c, json_string_value(r), path);
    }
    return s;
}

static json_t *merge(conv *c, json_t *a, json_t *b, const char *path, int depth);

/* Type sets as bit masks (integer implies number). */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };
static const char *const TNAME[] = {"null", "boolean", "object", "array", "string", "number", "integer"};

static int type_bits(json_t *t) {
    if (!t) return T_ALL;
    int bits = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        for (int k = 0; k < 7 && json_is_string(x); k++)
            if (strcmp(json_string_value(x), TNAME[k]) == 0) bits |= 1 << k;
    }
    if (bits & T_NUM) bits |= T_INT;
    return bits;
}

static json_t *type_json(int bits) {
    if (bits & T_NUM) bits &= ~T_INT;
    json_t *a = json_array();
    for (int k = 0; k < 7; k++) if (bits & (1 << k)) json_array_append_new(a, json_string(TNAME[k]));
    return a;
}

static int key_in(json_t *props, const char *k) { return json_is_object(props) && json_object_get(props, k) != NULL; }

static json_t *merge(conv *c, json_t *a, json_t *b, const char *path, int depth) {
    if (depth > MAX_DEPTH) { fail(c, path, "allOf nested too deeply"); return NULL; }
    if (!(a = deref(c, a, path, depth)) || !(b = deref(c, b, path, depth))) return NULL;
    if (json_is_true(a)) return json_incref(b);
    if (json_is_true(b)) return json_incref(a);
    if (json_is_false(a) || json_is_false(b)) { fail(c, path, "allOf with a false schema can never be satisfied"); return NULL; }
    if (!json_is_object(a) || !json_is_object(b)) { fail(c, path, "allOf members must be schemas"); return NULL; }
    json_t *m = json_object();
    const char *k;
    json_t *v;
    /* Nested allOf lists are merged first. */
    json_t *parts[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        json_t *all = json_object_get(parts[i], "allOf");
        if (!all) continue;
        json_t *rest = json_object();
        json_object_foreach(parts[i], k, v) if (strcmp(k, "allOf") != 0) json_object_set(rest, k, v);
        size_t j;
        json_t *x;
        json_array_foreach(all, j, x) {
            json_t *n = merge(c, rest, x, path, depth + 1);
            json_decref(rest);
            if (!n) { json_decref(m); return NULL; }
            rest = n;
        }
        json_t *r = merge(c, i == 0 ? rest : a, i == 0 ? b : rest, path, depth + 1);
        json_decref(rest);
        json_decref(m);
        return r;
    }
    json_object_foreach(a, k, v) if (!is_annotation(k)) json_object_set(m, k, v);
    json_object_foreach(b, k, v) {
        if (is_annotation(k)) continue;
        json_t *x = json_object_get(m, k);
        if (!x) { json_object_set(m, k, v); continue; }
        if (json_equal(x, v)) continue;
        if (strcmp(k, "type") == 0) {
            int bits = type_bits(x) & type_bits(v);
            if (!bits) { fail(c, path, "allOf: the types exclude each other"); goto bad; }
            json_object_set_new(m, k, type_json(bits));
        } else if (strcmp(k, "required") == 0) {
            json_t *u = json_copy(x);
            size_t j;
            json_t *e;
            json_array_foreach(v, j, e) {
                size_t q, n = json_array_size(u);
                for (q = 0; q < n && !json_equal(json_array_get(u, q), e); q++) {}
                if (q == n) json_array_append(u, e);
            }
            json_object_set_new(m, k, u);
        } else if (strcmp(k, "properties") == 0) {
            json_t *u = json_copy(x);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *old = json_object_get(u, pk);
                if (!old) { json_object_set(u, pk, pv); continue; }
                json_t *mm = merge(c, old, pv, path, depth + 1);
                if (!mm) { json_decref(u); goto bad; }
                json_object_set_new(u, pk, mm);
            }
            json_object_set_new(m, k, u);
        } else if (strcmp(k, "additionalProperties") == 0 || strcmp(k, "items") == 0) {
            if (json_is_array(x) || json_is_array(v)) { fail(c, path, "allOf: cannot merge tuple 'items'"); goto bad; }
            if (json_is_false(x) || json_is_false(v)) { json_object_set_new(m, k, json_false()); continue; }
            json_t *mm = merge(c, x, v, path, depth + 1);
            if (!mm) goto bad;
            json_object_set_new(m, k, mm);
        } else if (!strcmp(k, "minItems") || !strcmp(k, "minLength") || !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum")) {
            if (json_is_number(x) && json_is_number(v) && json_number_value(v) > json_number_value(x)) json_object_set(m, k, v);
            else if (!json_is_number(x) || !json_is_number(v)) { fail(c, path, "allOf: cannot merge '%s'", k); goto bad; }
        } else if (!strcmp(k, "maxItems") || !strcmp(k, "maxLength") || !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum")) {
            if (json_is_number(x) && json_is_number(v) && json_number_value(v) < json_number_value(x)) json_object_set(m, k, v);
            else if (!json_is_number(x) || !json_is_number(v)) { fail(c, path, "allOf: cannot merge '%s'", k); goto bad; }
        } else if (strcmp(k, "enum") == 0) {
            json_t *u = json_array();
            size_t j;
            json_t *e;
            json_array_foreach(x, j, e) {
                size_t q, n = json_array_size(v);
                for (q = 0; q < n && !json_equal(json_array_get(v, q), e); q++) {}
                if (q < n) json_array_append(u, e);
            }
            if (!json_array_size(u)) { json_decref(u); fail(c, path, "allOf: the enums have no value in common"); goto bad; }
            json_object_set_new(m, k, u);
        } else if (strcmp(k, "anyOf") == 0 || strcmp(k, "oneOf") == 0) {
            /* both sides choose: every pair, as an anyOf of allOfs */
            size_t nx = json_array_size(x), nv = json_array_size(v);
            if (nx * nv > MAX_PRODUCT) { fail(c, path, "allOf: combining these anyOf lists gives more than %d alternatives", MAX_PRODUCT); goto bad; }
            json_t *u = json_array();
            for (size_t i = 0; i < nx; i++)
                for (size_t j = 0; j < nv; j++)
                    json_array_append_new(u, json_pack("{s:[OO]}", "allOf", json_array_get(x, i), json_array_get(v, j)));
            json_object_set_new(m, k, u);
        } else {
            fail(c, path, "allOf: '%s' differs between members and cannot be merged", k);
            goto bad;
        }
    }
    /* A member with additionalProperties false (or a schema) also constrains the properties that
     * only the other member lists. */
    for (int i = 0; i < 2; i++) {
        json_t *self = parts[i], *other = parts[1 - i];
        json_t *ap = json_object_get(self, "additionalProperties");
        json_t *sp = json_object_get(self, "properties"), *op = json_object_get(other, "properties");
        if (!ap || json_is_true(ap) || !json_is_object(op)) continue;
        json_t *mp = json_object_get(m, "properties");
        const char *pk;
        json_t *pv;
        json_object_foreach(op, pk, pv) {
            if (key_in(sp, pk)) continue;
            if (json_is_false(ap)) {
                json_t *req = json_object_get(m, "required");
                size_t j;
                json_t *e;
                json_array_foreach(req, j, e)
                    if (json_is_string(e) && strcmp(json_string_value(e), pk) == 0) {
                        fail(c, path, "allOf: property '%.80s' is required but another member forbids it", pk);
                        goto bad;
                    }
                json_object_del(mp, pk);
            } else {
                json_t *mm = merge(c, json_object_get(mp, pk), ap, path, depth + 1);
                if (!mm) goto bad;
                json_object_set_new(mp, pk, mm);
            }
        }
    }
    return m;
bad:
    json_decref(m);
    return NULL;
}

/* ---- objects ---------------------------------------------------------------------------------------- */

/* Keys of additional properties: any escape-free string that is none of names[]. A trie over
 * the names, as llama.cpp's _not_strings, but every branch only takes valid key characters. */
typedef struct tnode { uint32_t cp; int end; struct tnode *kid, *next; } tnode;

static void trie_free(tnode *t) { while (t) { tnode *n = t->next; trie_free(t->kid); free(t); t = n; } }

static void not_strings_visit(ob_gbuf *b, tnode *list, const char *kc) {
    int first = 1;
    ob_gbuf ex = {0};
    for (tnode *t = list; t; t = t->next) {
        ob_gbuf_puts(b, first ? " " : " | ");
        first = 0;
        ob_gbuf_puts(b, "[");
        ob_gbuf_cp(b, t->cp);
        ob_gbuf_puts(b, "]");
        ob_gbuf_cp(&ex, t->cp);
        if (t->kid) {
            ob_gbuf_puts(b, " (");
            not_strings_visit(b, t->kid, kc);
            if (t->end) ob_gbuf_printf(b, " )");
            else ob_gbuf_printf(b, " )?");
        } else if (t->end) ob_gbuf_printf(b, " %s+", kc);
    }
    /* a character none of the names has here, then anything */
    ob_gbuf_printf(b, " | [^\"\\\\\\x7F\\x00-\\x1F%s] %s*", ex.p ? ex.p : "", kc);
    free(ex.p);
}

static const char *additional_key(conv *c, json_t *props, const char *hint) {
    const char *kc = prim(c, "key-char");
    if (!kc) return NULL;
    tnode *root = NULL;
    int empty_name = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) {
        tnode **lvl = &root, *t = NULL;
        size_t n = strlen(k);
        if (n == 0) empty_name = 1;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = ob_grammar_utf8_decode((const unsigned char *)k + i, n - i, &cp);
            if (!l) { cp = 0xFFFD; l = 1; }
            i += (size_t)l;
            for (t = *lvl; t && t->cp != cp; t = t->next) {}
            if (!t) {
                t = calloc(1, sizeof *t);
                if (!t) { trie_free(root); fail(c, "", "out of memory"); return NULL; }
                t->cp = cp;
                t->next = *lvl;
                *lvl = t;
            }
            lvl = &t->kid;
        }
        if (t) t->end = 1;
    }
    ob_gbuf b = {0};
    if (!root) ob_gbuf_printf(&b, "\"\\\"\" %s%s \"\\\"\"", kc, empty_name ? "+" : "*");
    else {
        ob_gbuf_puts(&b, "\"\\\"\" (");
        not_strings_visit(&b, root, kc);
        ob_gbuf_printf(&b, " )%s \"\\\"\"", empty_name ? "" : "?");
    }
    trie_free(root);
    char h[200];
    child_hint(h, sizeof h, hint, "additional-k");
    return rule_from(c, h, &b);
}

static const char *object_rule(conv *c, json_t *s, const char *hint, const char *path, int depth) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) { fail(c, path, "properties must be an object"); return NULL; }
    if (req && !json_is_array(req)) { fail(c, path, "required must be an array"); return NULL; }
    if (ap && !json_is_boolean(ap) && !json_is_object(ap)) { fail(c, path, "additionalProperties must be a boolean or a schema"); return NULL; }
    if (!props && !req && (!ap || json_is_true(ap))) return prim(c, "object");
    const char *space = prim(c, "space");
    if (!space) return NULL;
    /* Every key: the listed properties, then required names not listed (any value). */
    json_t *all = props ? json_copy(props) : json_object();
    size_t j;
    json_t *e;
    json_array_foreach(req, j, e) {
        if (!json_is_string(e)) { json_decref(all); fail(c, path, "required must list strings"); return NULL; }
        if (!json_object_get(all, json_string_value(e))) {
            if (json_is_false(ap)) { json_decref(all); fail(c, path, "'%.80s' is required but not allowed", json_string_value(e)); return NULL; }
            json_object_set_new(all, json_string_value(e), ap && json_is_object(ap) ? json_incref(ap) : json_true());
        }
    }
    size_t n = json_object_size(all);
    const char **kv = calloc(n + 1, sizeof *kv);
    int *is_req = calloc(n + 1, sizeof *is_req);
    const char **order = calloc(n + 2, sizeof *order);   /* kv rule names: required first */
    int n_req = 0, n_opt = 0, i = 0;
    if (!kv || !is_req || !order) { fail(c, path, "out of memory"); goto done; }
    const char *k;
    json_t *v;
    json_object_foreach(all, k, v) {
        char ph[200], pp[512];
        child_hint(ph, sizeof ph, hint, k);
        child_path(pp, sizeof pp, path, "properties");
        child_path(pp, sizeof pp, pp, k);
        const char *val = visit(c, v, ph, pp, depth + 1);
        if (!val) goto done;
        json_t *ks = json_string(k);
        char *jk = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        if (!jk) { fail(c, path, "out of memory"); goto done; }
        ob_gbuf b = {0};
        lit(&b, jk);
        free(jk);
        ob_gbuf_printf(&b, " \":\" %s %s", space, val);
        char kh[220];
        child_hint(kh, sizeof kh, ph, "kv");
        kv[i] = rule_from(c, kh, &b);
        if (!kv[i]) goto done;
        json_array_foreach(req, j, e) if (strcmp(json_string_value(e), k) == 0) is_req[i] = 1;
        n_req += is_req[i];
        i++;
    }
    for (size_t q = 0; q < n; q++) if (is_req[q]) order[n_opt++] = kv[q];
    n_opt = 0;
    for (size_t q = 0; q < n; q++) if (!is_req[q]) order[n_req + n_opt++] = kv[q];
    const char *add_kv = NULL;
    if (ap && !json_is_false(ap)) {
        char ah[200], vp[512];
        child_hint(ah, sizeof ah, hint, "additional");
        child_path(vp, sizeof vp, path, "additionalProperties");
        const char *val = json_is_object(ap) ? visit(c, ap, ah, vp, depth + 1) : prim(c, "value");
        const char *key = val ? additional_key(c, all, hint) : NULL;
        if (!key) goto done;
        ob_gbuf b = {0};
        ob_gbuf_printf(&b, "%s \":\" %s %s", key, space, val);
        char kh[220];
        child_hint(kh, sizeof kh, ah, "kv");
        if (!(add_kv = rule_from(c, kh, &b))) goto done;
        order[n_req + n_opt++] = add_kv;
    }
    ob_gbuf b = {0};
    ob_gbuf_printf(&b, "\"{\" %s", space);
    if (n_req + n_opt == 0) { ob_gbuf_puts(&b, " \"}\""); goto emit; }
    for (int q = 0; q < n_req; q++) {
        if (q) ob_gbuf_printf(&b, " \",\" %s", space);
        ob_gbuf_printf(&b, " %s", order[q]);
    }
    if (n_opt) {
        /* Optional kvs in order, any subset: rest(j) ::= ( "," space kv_j )? rest(j+1), and the
         * additional kv (always last) repeats: ( "," space kv )*. */
        const char **rest = calloc((size_t)n_opt + 1, sizeof *rest);
        if (!rest) { free(b.p); fail(c, path, "out of memory"); goto done; }
        for (int q = n_opt - 1; q >= 0; q--) {
            const char *kvq = order[n_req + q];
            int star = kvq == add_kv;
            ob_gbuf rb = {0};
            ob_gbuf_printf(&rb, "( \",\" %s %s )%s", space, kvq, star ? "*" : "?");
            if (rest[q + 1]) ob_gbuf_printf(&rb, " %s", rest[q + 1]);
            char rh[200];
            child_hint(rh, sizeof rh, hint, "rest");
            if (!(rest[q] = rule_from(c, rh, &rb))) { free(rest); free(b.p); goto done; }
        }
        if (n_req) ob_gbuf_printf(&b, " ( \",\" %s (", space);
        else ob_gbuf_puts(&b, " ( (");
        for (int q = 0; q < n_opt; q++) {
            const char *kvq = order[n_req + q];
            ob_gbuf_printf(&b, "%s %s", q ? " |" : "", kvq);
            if (kvq == add_kv) ob_gbuf_printf(&b, " ( \",\" %s %s )*", space, kvq);
            if (rest[q + 1]) ob_gbuf_printf(&b, " %s", rest[q + 1]);
        }
        free(rest);
        if (n_req) ob_gbuf_puts(&b, " ) )?");
        else ob_gbuf_printf(&b, " ) %s )?", space);
        if (n_req) ob_gbuf_printf(&b, " %s", space);
    } else ob_gbuf_printf(&b, " %s", space);
    ob_gbuf_puts(&b, " \"}\"");
emit:;
    const char *r = rule_from(c, hint, &b);
    free(kv); free(is_req); free(order);
    json_decref(all);
    return r;
done:
    free(kv); free(is_req); free(order);
    json_decref(all);
    return NULL;
}

/* ---- arrays ------------------------------------------------------------------------------------------ */

static int get_count(conv *c, json_t *s, const char *key, const char *path, long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (d < 0 || d != floor(d)) return fail(c, path, "%s must be a non-negative integer", key);
    *out = d > OB_GRAMMAR_MAX_REPEAT ? OB_GRAMMAR_MAX_REPEAT : (long)d;
    return 0;
}

static const char *array_rule(conv *c, json_t *s, const char *hint, const char *path, int depth) {
    long min = 0, max = -1;
    if (get_count(c, s, "minItems", path, &min) || get_count(c, s, "maxItems", path, &max)) return NULL;
    if (max >= 0 && min > max) { fail(c, path, "minItems is above maxItems"); return NULL; }
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *extra = json_object_get(s, "additionalItems");
    if (json_is_array(items)) { prefix = items; items = extra; }   /* draft 4-7 tuples */
    if (prefix && !json_is_array(prefix)) { fail(c, path, "prefixItems must be an array"); return NULL; }
    /* A tuple is written whole unless minItems allows fewer (JSON Schema would accept any prefix;
     * the whole tuple is what a caller listing its items wants, and it validates). */
    if (prefix && !json_object_get(s, "minItems")) {
        min = (long)json_array_size(prefix);
        if (max >= 0 && min > max) min = max;
    }
    /* Tuples allow no items past the listed ones unless "items" says what they are. */
    size_t k = prefix ? json_array_size(prefix) : 0;
    const char *space = prim(c, "space");
    if (!space) return NULL;
    const char *rest = NULL;
    if (items && !json_is_false(items)) {
        char h[200], p[512];
        child_hint(h, sizeof h, hint, "item");
        child_path(p, sizeof p, path, prefix ? "additionalItems" : "items");
        if (prefix && json_object_get(s, "prefixItems")) child_path(p, sizeof p, path, "items");
        if (!(rest = visit(c, items, h, p, depth + 1))) return NULL;
    } else if (!items && !prefix) {
        if (!(rest = prim(c, "value"))) return NULL;
    }
    long n_max = max;   /* items in all, -1 unbounded */
    if (!rest && (n_max < 0 || n_max > (long)k)) n_max = (long)k;
    if ((long)k > OB_GRAMMAR_MAX_REPEAT) { fail(c, path, "too many prefixItems"); return NULL; }
    if (min > (long)k && !rest) { fail(c, path, "minItems asks for more items than the tuple allows"); return NULL; }
    const char **pr = calloc(k + 1, sizeof *pr);
    if (!pr) { fail(c, path, "out of memory"); return NULL; }
    for (size_t i = 0; i < k; i++) {
        char h[200], p[512], ix[24];
        snprintf(ix, sizeof ix, "%zu", i);
        child_hint(h, sizeof h, hint, "tuple-");
        strncat(h, ix, sizeof h - strlen(h) - 1);
        child_path(p, sizeof p, path, json_object_get(s, "prefixItems") ? "prefixItems" : "items");
        child_path(p, sizeof p, p, ix);
        if (!(pr[i] = visit(c, json_array_get(prefix, i), h, p, depth + 1))) { free(pr); return NULL; }
    }
    /* tail(i): what may follow after i items, as rules from the end backwards (no nesting).
     * The first item is pr[0], or a rest item when there is no tuple. */
    const char *tail = NULL;
    ob_gbuf b = {0};
    long used = n_max >= 0 && n_max < (long)k ? n_max : (long)k;
    long before = used > 0 ? used : 1;   /* items written before the repeated rest items */
    if (rest && (n_max < 0 || n_max > before)) {
        long lo = min > before ? min - before : 0, hi = n_max < 0 ? -1 : n_max - before;
        if (hi < 0) ob_gbuf_printf(&b, "( \",\" %s %s ){%ld,}", space, rest, lo);
        else ob_gbuf_printf(&b, "( \",\" %s %s ){%ld,%ld}", space, rest, lo, hi);
        char h[200];
        child_hint(h, sizeof h, hint, "rest");
        if (!(tail = rule_from(c, h, &b))) { free(pr); return NULL; }
    }
    for (long i = used - 1; i >= 1; i--) {   /* after i items: ", item_i" (optional once i >= min) */
        ob_gbuf_printf(&b, "%s\",\" %s %s%s%s%s", i >= min ? "( " : "", space, pr[i], tail ? " " : "", tail ? tail : "",
                       i >= min ? " )?" : "");
        char h[200];
        child_hint(h, sizeof h, hint, "tail");
        if (!(tail = rule_from(c, h, &b))) { free(pr); return NULL; }
    }
    ob_gbuf_printf(&b, "\"[\" %s", space);
    if (used > 0 || (rest && n_max != 0))
        ob_gbuf_printf(&b, " ( %s%s%s %s )%s", used > 0 ? pr[0] : rest, tail ? " " : "", tail ? tail : "", space,
                       min > 0 ? "" : "?");
    ob_gbuf_puts(&b, " \"]\"");
    free(pr);
    return rule_from(c, hint, &b);
}

/* ---- strings, constants, unions ---------------------------------------------------------------------- */

static const char *string_rule(conv *c, json_t *s, const char *hint, const char *path) {
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long min = 0, max = -1;
    if (get_count(c, s, "minLength", path, &min) || get_count(c, s, "maxLength", path, &max)) return NULL;
    if (max >= 0 && min > max) { fail(c, path, "minLength is above maxLength"); return NULL; }
    int lengths = min > 0 || max >= 0;
    const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
    int known_fmt = !strcmp(f, "date") || !strcmp(f, "time") || !strcmp(f, "date-time") || !strncmp(f, "uuid", 4);
    if (pat) {
        if (!json_is_string(pat)) { fail(c, path, "pattern must be a string"); return NULL; }
        if (lengths || known_fmt) { fail(c, path, "pattern together with minLength/maxLength/format is not supported"); return NULL; }
        const char *ch = prim(c, "char");
        if (!ch) return NULL;
        char nm[180];
        make_name(c, hint, nm, sizeof nm);
        strncat(nm, "-pattern", sizeof nm - strlen(nm) - 1);
        for (int i = 1; find(c, nm) >= 0; i++) {
            make_name(c, hint, nm, sizeof nm);
            snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "-pattern%d", i);
        }
        ob_gbuf rb = {0};
        char perr[256];
        if (ob_grammar_regex_to_gbnf(json_string_value(pat), nm, ch, &rb, perr, sizeof perr)) {
            free(rb.p);
            fail(c, path, "pattern: %s", perr);
            return NULL;
        }
        /* The regex rules come as text; register them so they are written out. */
        char *line = rb.p;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            char *sep = strstr(line, " ::= ");
            if (sep) {
                *sep = 0;
                char *nm2 = strdup(line), *bd = strdup(sep + 5);
                c->out_bytes += strlen(line) + strlen(sep + 5) + 6;
                if (!nm2 || !bd || c->out_bytes > MAX_OUT) { free(nm2); free(bd); free(rb.p); fail(c, path, "pattern too large"); return NULL; }
                if (insert(c, nm2, bd) < 0) { free(rb.p); return NULL; }
            }
            line = nl ? nl + 1 : NULL;
        }
        free(rb.p);
        ob_gbuf b = {0};
        ob_gbuf_printf(&b, "\"\\\"\" %s \"\\\"\"", nm);
        return rule_from(c, hint, &b);
    }
    if (known_fmt) {
        if (lengths) { fail(c, path, "format together with minLength/maxLength is not supported"); return NULL; }
        return prim(c, !strncmp(f, "uuid", 4) ? "uuid" : !strcmp(f, "date") ? "date-string" : !strcmp(f, "time") ? "time-string" : "date-time-string");
    }
    if (!lengths) return prim(c, "string");
    const char *ch = prim(c, "char");
    if (!ch) return NULL;
    ob_gbuf b = {0};
    if (max < 0) ob_gbuf_printf(&b, "\"\\\"\" %s{%ld,} \"\\\"\"", ch, min);
    else ob_gbuf_printf(&b, "\"\\\"\" %s{%ld,%ld} \"\\\"\"", ch, min, max);
    return rule_from(c, hint, &b);
}

static int value_type_bit(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return T_OBJ;
    case JSON_ARRAY: return T_ARR;
    case JSON_STRING: return T_STR;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: return json_real_value(v) == floor(json_real_value(v)) ? T_INT | T_NUM : T_NUM;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    default: return T_NULL;
    }
}

/* const / enum: the values (that the type allows) as literals of their compact JSON. */
static const char *literals_rule(conv *c, json_t *s, json_t *vals, const char *hint, const char *path) {
    int allowed = type_bits(json_object_get(s, "type"));
    ob_gbuf b = {0};
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v) {
        if (!(value_type_bit(v) & allowed)) continue;
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t) { free(b.p); fail(c, path, "out of memory"); return NULL; }
        ob_gbuf_puts(&b, n++ ? " | " : "");
        lit(&b, t);
        free(t);
    }
    if (!n) { free(b.p); fail(c, path, "no enum/const value has an allowed type"); return NULL; }
    return rule_from(c, hint, &b);
}

static const char *union_rule(conv *c, json_t *alts, json_t *siblings, const char *kw, const char *hint,
                              const char *path, int depth) {
    if (!json_is_array(alts) || json_array_size(alts) == 0) { fail(c, path, "%s must be a non-empty array", kw); return NULL; }
    ob_gbuf b = {0};
    size_t i;
    json_t *a;
    json_array_foreach(alts, i, a) {
        char h[200], p[512], ix[24];
        snprintf(ix, sizeof ix, "%zu", i);
        child_hint(h, sizeof h, hint, ix);
        child_path(p, sizeof p, path, kw);
        child_path(p, sizeof p, p, ix);
        json_t *m = siblings ? merge(c, siblings, a, p, depth + 1) : json_incref(a);
        if (!m) { free(b.p); return NULL; }
        json_array_append_new(c->scratch, m);
        const char *r = visit(c, m, h, p, depth + 1);
        if (!r) { free(b.p); return NULL; }
        ob_gbuf_printf(&b, "%s%s", i ? " | " : "", r);
    }
    return rule_from(c, hint, &b);
}

/* ---- the visitor ------------------------------------------------------------------------------------- */

static const char *visit(conv *c, json_t *s, const char *hint, const char *path, int depth) {
    if (c->failed) return NULL;
    if (depth > MAX_DEPTH) { fail(c, path, "schema nested deeper than %d", MAX_DEPTH); return NULL; }
    if (json_is_true(s)) return prim(c, "value");
    if (json_is_false(s)) { fail(c, path, "the false schema can never be satisfied"); return NULL; }
    if (!json_is_object(s)) { fail(c, path, "a schema must be an object or a boolean"); return NULL; }
    const char *k;
    json_t *v;
    int has_assert = 0;
    json_object_foreach(s, k, v) {
        if (is_annotation(k) || is_trivial(k, v)) continue;
        if (!is_known(k)) { fail(c, path, "unsupported keyword '%.60s'", k); return NULL; }
        if (strcmp(k, "$ref") != 0) has_assert = 1;
    }
    json_t *nullable = json_object_get(s, "nullable");   /* OpenAPI 3.0: the schema, or null */
    if (nullable && !json_is_boolean(nullable)) { fail(c, path, "nullable must be a boolean"); return NULL; }
    if (nullable) {
        json_t *rest = json_copy(s);
        json_object_del(rest, "nullable");
        json_array_append_new(c->scratch, rest);
        if (json_is_false(nullable)) return visit(c, rest, hint, path, depth + 1);
        char h[200];
        child_hint(h, sizeof h, hint, "nonnull");
        const char *r = visit(c, rest, h, path, depth + 1), *nl = r ? prim(c, "null") : NULL;
        if (!nl) return NULL;
        ob_gbuf b = {0};
        ob_gbuf_printf(&b, "%s | %s", r, nl);
        return rule_from(c, hint, &b);
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) { fail(c, path, "$ref must be a string"); return NULL; }
        if (has_assert) { fail(c, path, "keywords next to $ref are not supported (use allOf)"); return NULL; }
        const char *rs = json_string_value(ref);
        for (int i = 0; i < c->n_refs; i++) if (strcmp(c->refs[i].ref, rs) == 0) return c->refs[i].name;
        json_t *target = resolve(c, rs, path);
        if (!target) return NULL;
        char h[200];
        snprintf(h, sizeof h, "ref%.150s", rs + 1);
        const char *nm = add_rule(c, h, NULL);   /* reserved: recursive schemas refer to it */
        if (!nm) return NULL;
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs ? c->cap_refs * 2 : 16;
            sref *r = realloc(c->refs, (size_t)cap * sizeof *r);
            if (!r) { fail(c, path, "out of memory"); return NULL; }
            c->refs = r;
            c->cap_refs = cap;
        }
        c->refs[c->n_refs++] = (sref){rs, (char *)nm};
        char p[512];
        snprintf(p, sizeof p, "%.500s", rs + 1);
        const char *body = visit(c, target, h, p, depth + 1);
        if (!body) return NULL;
        set_body(c, nm, body);
        return nm;
    }
    json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all)) { fail(c, path, "allOf must be an array"); return NULL; }
        json_t *m = json_object();
        json_object_foreach(s, k, v) if (strcmp(k, "allOf") != 0) json_object_set(m, k, v);
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) {
            char p[512], ix[24];
            snprintf(ix, sizeof ix, "%zu", i);
            child_path(p, sizeof p, path, "allOf");
            child_path(p, sizeof p, p, ix);
            json_t *n = merge(c, m, x, p, depth + 1);
            json_decref(m);
            if (!n) return NULL;
            m = n;
        }
        json_array_append_new(c->scratch, m);
        return visit(c, m, hint, path, depth + 1);
    }
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any || one) {
        if (any && one) { fail(c, path, "anyOf together with oneOf is not supported"); return NULL; }
        json_t *sib = json_object();
        int n_sib = 0;
        json_object_foreach(s, k, v)
            if (strcmp(k, "anyOf") && strcmp(k, "oneOf") && !is_annotation(k)) { json_object_set(sib, k, v); n_sib++; }
        const char *r = union_rule(c, any ? any : one, n_sib ? sib : NULL, any ? "anyOf" : "oneOf", hint, path, depth);
        json_decref(sib);
        return r;
    }
    json_t *type = json_object_get(s, "type");
    int bits = type_bits(type);
    if (type && !bits) { fail(c, path, "unknown type"); return NULL; }
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst) {
        json_t *one_val = json_pack("[O]", cst);
        const char *r = literals_rule(c, s, one_val, hint, path);
        json_decref(one_val);
        return r;
    }
    if (en) {
        if (!json_is_array(en) || !json_array_size(en)) { fail(c, path, "enum must be a non-empty array"); return NULL; }
        return literals_rule(c, s, en, hint, path);
    }
    if (!type) {
        /* No type: the keywords present say which kind is meant (a stricter reading of the schema,
         * which only applies them to that kind). */
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || json_object_get(s, "required")) bits = T_OBJ;
        else if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) bits = T_ARR;
        else if (json_object_get(s, "pattern") || json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "format")) bits = T_STR;
        else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum")) bits = T_NUM | T_INT;
        else return prim(c, "value");
    }
    if (bits & T_NUM) bits &= ~T_INT;   /* integers are numbers */
    if (json_object_get(s, "multipleOf") && bits != T_INT) { fail(c, path, "multipleOf is only supported as 1 on integers"); return NULL; }
    /* several types: one alternative each */
    int nb = 0;
    for (int t = 0; t < 7; t++) nb += (bits >> t) & 1;
    if (nb > 1) {
        ob_gbuf b = {0};
        int n = 0;
        for (int t = 0; t < 7; t++) {
            if (!(bits & (1 << t))) continue;
            json_t *one_t = json_copy(s);
            json_object_set_new(one_t, "type", json_string(TNAME[t]));
            json_array_append_new(c->scratch, one_t);
            char h[200];
            child_hint(h, sizeof h, hint, TNAME[t]);
            const char *r = visit(c, one_t, h, path, depth + 1);
            if (!r) { free(b.p); return NULL; }
            ob_gbuf_printf(&b, "%s%s", n++ ? " | " : "", r);
        }
        return rule_from(c, hint, &b);
    }
    switch (bits) {
    case T_NULL: return prim(c, "null");
    case T_BOOL: return prim(c, "boolean");
    case T_OBJ: return object_rule(c, s, hint, path, depth);
    case T_ARR: return array_rule(c, s, hint, path, depth);
    case T_STR: return string_rule(c, s, hint, path);
    case T_NUM: return number_rule(c, s, hint, path);
    case T_INT: return integer_rule(c, s, hint, path);
    default: fail(c, path, "unknown type"); return NULL;
    }
}

/* ---- public ---------------------------------------------------------------------------------------- */

static void conv_free(conv *c) {
    for (int i = 0; i < c->n_rules; i++) { free(c->rules[i].name); free(c->rules[i].body); }
    free(c->rules);
    free(c->hash);
    free(c->refs);
    json_decref(c->scratch);
    json_decref(c->doc);
}

char *ob_grammar_json_schema_to_gbnf(const char *schema_json, const char *rule_prefix, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    err[0] = 0;
    conv c = {0};
    c.err = err;
    c.errlen = errlen;
    if (!schema_json) { snprintf(err, errlen, "json schema: no schema"); return NULL; }
    const char *pf = rule_prefix ? rule_prefix : "";
    if (strlen(pf) >= sizeof c.prefix) { snprintf(err, errlen, "json schema: rule prefix too long"); return NULL; }
    for (const char *p = pf; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-')) {
            snprintf(err, errlen, "json schema: rule prefix may only hold letters, digits and '-'");
            return NULL;
        }
    snprintf(c.prefix, sizeof c.prefix, "%s", pf);
    json_error_t je;
    c.doc = json_loads(schema_json, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!c.doc) {
        snprintf(err, errlen, "json schema: invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    c.scratch = json_array();
    char *out = NULL;
    const char *root = add_rule(&c, "root", NULL);
    const char *r = root ? visit(&c, c.doc, "", "", 0) : NULL;
    if (r) {
        set_body(&c, root, r);
        ob_gbuf b = {0};
        for (int i = 0; i < c.n_rules; i++)
            ob_gbuf_printf(&b, "%s ::= %s\n", c.rules[i].name, c.rules[i].body ? c.rules[i].body : "\"\"");
        if (b.oom) { free(b.p); snprintf(err, errlen, "json schema: out of memory"); }
        else out = b.p;
    }
    conv_free(&c);
    return out;
}

ob_grammar_t *ob_grammar_from_json_schema(const char *schema_json, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    char *text = ob_grammar_json_schema_to_gbnf(schema_json, "", err, errlen);
    if (!text) return NULL;
    ob_grammar_t *g = ob_grammar_parse_gbnf(text, err, errlen);
    free(text);
    return g;
}

ob_grammar_t *ob_grammar_json_object(void) {
    char err[256];
    return ob_grammar_from_json_schema("{\"type\": \"object\"}", err, sizeof err);
}
