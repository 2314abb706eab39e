/* template_value.c — the template engine's memory and values: the arena, UTF-8 and Python's
 * character classes, building values, and the Python behaviours every other file leans on:
 * truth, equality, ordering, str() and repr() (floats as Python's shortest repr, strings with
 * Python's quoting), and the undefined-value errors jinja2 raises.
 *
 * Does not own: operators, attribute and item access (template_ops.c), JSON
 * (template_json.c), evaluation (template_eval.c).
 */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "text/template_int.h"

/* ---- failure and arena ----------------------------------------------------------------- */
void tp_failf(tp_fail *f, const char *fmt, ...) {
    if (f->err && f->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->err, f->errlen, fmt, ap);
        va_end(ap);
    }
    longjmp(f->jb, 1);
}

void *tp_alloc(tp_arena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    tp_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 60000;
        if (a->limit && a->total + cap + sizeof *c > a->limit) {
            if (a->line) tp_failf(a->fail, "line %d: memory limit (%zu MiB) exceeded", *a->line, a->limit >> 20);
            tp_failf(a->fail, "template: memory limit (%zu MiB) exceeded", a->limit >> 20);
        }
        c = malloc(sizeof *c + cap);
        if (!c) {
            if (a->line) tp_failf(a->fail, "line %d: out of memory", *a->line);
            tp_failf(a->fail, "template: out of memory");
        }
        a->total += cap + sizeof *c;
        c->cap = cap;
        c->used = 0;
        /* a big block goes behind the head so the head's free space stays usable */
        if (a->head && n == cap) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tp_strndup(tp_arena *a, const char *s, size_t n) {
    char *p = tp_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void tp_arena_free(tp_arena *a) {
    for (tp_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

void tp_rfail(tp_render *r, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->what) tp_failf(&r->fail, "line %d: %s: %s", r->line, r->what, msg);
    tp_failf(&r->fail, "line %d: %s", r->line, msg);
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */
int tp_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int k = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
        if (!k || i + (size_t)k >= n) return 0;
        uint32_t cp = c & (0x3F >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

uint32_t tp_utf8_next(const char *str, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[*i];
    int k = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = k ? c & (0x3F >> k) : c;
    size_t j = *i + 1;
    for (int m = 0; m < k && j < n; m++, j++) cp = cp << 6 | (s[j] & 0x3F);
    *i = j;
    return cp;
}

size_t tp_utf8_prev(const char *s, size_t i) {
    if (i == 0) return 0;
    i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

int tp_utf8_put(char *d, uint32_t cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xC0 | cp >> 6); d[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | cp >> 12); d[1] = (char)(0x80 | (cp >> 6 & 0x3F)); d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | cp >> 18); d[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (char)(0x80 | (cp >> 6 & 0x3F)); d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tp_utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* ---- Python character classes ---------------------------------------------------------- */
int tp_isspace(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Code points Python's str.isprintable() rejects (categories Cc Cf Cs Co Zl Zp and Zs other
 * than space; Unicode 14, as Python 3.11), unassigned code points left out. */
static const uint32_t nonprint[][2] = {
    {0x0, 0x1F}, {0x7F, 0xA0}, {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C}, {0x6DD, 0x6DD},
    {0x70F, 0x70F}, {0x890, 0x891}, {0x8E2, 0x8E2}, {0x1680, 0x1680}, {0x180E, 0x180E},
    {0x2000, 0x200F}, {0x2028, 0x202F}, {0x205F, 0x2064}, {0x2066, 0x206F}, {0x3000, 0x3000},
    {0xD800, 0xF8FF}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB}, {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
    {0x13430, 0x13438}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F}, {0xF0000, 0xFFFFD}, {0x100000, 0x10FFFD},
};

int tp_isprintable(uint32_t cp) {
    for (size_t i = 0; i < sizeof nonprint / sizeof nonprint[0]; i++)
        if (cp >= nonprint[i][0] && cp <= nonprint[i][1]) return 0;
    return 1;
}

/* Case mapping beyond ASCII uses the C library's tables under C.UTF-8 (simple case mapping:
 * Python's special cases such as 'ß'.upper() == 'SS' are not reproduced). */
static locale_t utf8_loc;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static void utf8_locale_init(void) { utf8_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0); }

static locale_t utf8_locale(void) {   /* renders may run on several threads at once */
    pthread_once(&utf8_once, utf8_locale_init);
    return utf8_loc;
}

uint32_t tp_toupper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towupper_l((wint_t)cp, l) : cp;
}

uint32_t tp_tolower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towlower_l((wint_t)cp, l) : cp;
}

int tp_iscased(uint32_t cp) { return tp_toupper(cp) != cp || tp_tolower(cp) != cp; }

int tp_isalpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    locale_t l = utf8_locale();
    return l ? iswalpha_l((wint_t)cp, l) != 0 : 0;
}

int tp_isdigit(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    locale_t l = utf8_locale();
    return l ? iswdigit_l((wint_t)cp, l) != 0 : 0;
}

/* ---- constructors ---------------------------------------------------------------------- */
tv tp_undef(const char *name, int owner_type) {
    tv v = {.t = TV_UNDEF, .ukind = (uint16_t)(owner_type < 0 ? 0 : owner_type + 1)};
    v.u.name = name;
    return v;
}
tv tp_none(void) { return (tv){.t = TV_NONE}; }
tv tp_bool(int b) { tv v = {.t = TV_BOOL}; v.u.i = b != 0; return v; }
tv tp_int(int64_t i) { tv v = {.t = TV_INT}; v.u.i = i; return v; }
tv tp_float(double f) { tv v = {.t = TV_FLOAT}; v.u.f = f; return v; }

tv tp_str_n(tp_render *r, const char *s, size_t n) {
    tp_str *p = tp_alloc(&r->ar, sizeof *p + n + 1);
    p->len = n;
    if (n) memcpy(p->s, s, n);
    p->s[n] = 0;
    tv v = {.t = TV_STR};
    v.u.s = p;
    return v;
}

tv tp_str_c(tp_render *r, const char *s) { return tp_str_n(r, s, strlen(s)); }

tv tp_list_new(tp_render *r, size_t cap) {
    tp_list *l = tp_alloc(&r->ar, sizeof *l);
    l->cap = cap;
    if (cap) l->v = tp_alloc(&r->ar, cap * sizeof(tv));
    tv v = {.t = TV_LIST};
    v.u.l = l;
    return v;
}

void tp_list_push(tp_render *r, tv *list, tv item) {
    tp_list *l = list->u.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *nv = tp_alloc(&r->ar, cap * sizeof(tv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

tv tp_dict_new(tp_render *r, size_t cap) {
    tp_dict *d = tp_alloc(&r->ar, sizeof *d);
    d->cap = cap;
    if (cap) {
        d->k = tp_alloc(&r->ar, cap * sizeof(tv));
        d->v = tp_alloc(&r->ar, cap * sizeof(tv));
    }
    tv v = {.t = TV_DICT};
    v.u.d = d;
    return v;
}

tv *tp_dict_find(const tp_dict *d, tv key) {
    for (size_t i = 0; i < d->n; i++)
        if (tp_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

tv *tp_dict_find_c(const tp_dict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->s, key, n)) return &d->v[i];
    return NULL;
}

void tp_dict_set(tp_render *r, tv *dict, tv key, tv val) {
    tp_dict *d = dict->u.d;
    tv *slot = tp_dict_find(d, key);
    if (slot) { *slot = val; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tv *nk = tp_alloc(&r->ar, cap * sizeof(tv)), *nv = tp_alloc(&r->ar, cap * sizeof(tv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(tv));
            memcpy(nv, d->v, d->n * sizeof(tv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

/* ---- buffers --------------------------------------------------------------------------- */
void tp_buf_put(tp_render *r, tp_buf *b, const char *s, size_t n) {
    if (b->n + n > r->max_output) tp_rfail(r, "output limit (%zu bytes) exceeded", r->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = tp_alloc(&r->ar, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tp_buf_putc(tp_render *r, tp_buf *b, char c) { tp_buf_put(r, b, &c, 1); }

void tp_buf_printf(tp_render *r, tp_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    tp_buf_put(r, b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

tv tp_buf_str(tp_render *r, tp_buf *b) { return tp_str_n(r, b->p ? b->p : "", b->n); }

/* ---- Python behaviours ----------------------------------------------------------------- */
const char *tp_type_name(tv v) {
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return v.sub == STR_MARKUP ? "Markup" : "str";
    case TV_LIST:
        switch (v.sub) {
        case SEQ_TUPLE: return "tuple";
        case SEQ_GROUP: return "_GroupTuple";
        case SEQ_ITEMS: return "dict_items";
        case SEQ_KEYS: return "dict_keys";
        case SEQ_VALUES: return "dict_values";
        default: return "list";
        }
    case TV_ITER: return v.u.it ? v.u.it->kind : "generator";   /* no object: an Undefined's owner */
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_LOOP: return "LoopContext";
    case TV_CYCLER: return "Cycler";
    case TV_JOINER: return "Joiner";
    default: return "builtin_function_or_method";
    }
}

int tp_truthy(tv v) {
    switch (v.t) {
    case TV_MISSING: case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0;
    case TV_STR: return v.u.s->len != 0;
    case TV_LIST: return v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(tv v) { return v.t == TV_INT || v.t == TV_BOOL || v.t == TV_FLOAT; }
static double num_f(tv v) { return v.t == TV_FLOAT ? v.u.f : (double)v.u.i; }
static int seq_class(tv v) { return v.sub == SEQ_GROUP ? SEQ_TUPLE : v.sub; }

int tp_eq(tv a, tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) return a.u.i == b.u.i;
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: case TV_MISSING: return 1;
    case TV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case TV_LIST:
        if (seq_class(a) != seq_class(b) || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tp_eq(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tv *o = tp_dict_find(b.u.d, a.u.d->k[i]);
            if (!o || !tp_eq(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case TV_FUNC: return a.fn == b.fn;
    default: return a.u.d == b.u.d;
    }
}

static const char *cmp_sym(int op) {
    return op == OP_LT ? "<" : op == OP_LTEQ ? "<=" : op == OP_GT ? ">" : ">=";
}

/* Three-way comparison of orderable values; fails like Python on mixed types. */
static int order(tp_render *r, tv a, tv b, int op) {
    if (a.t == TV_UNDEF) tp_undef_fail(r, a);
    if (b.t == TV_UNDEF) tp_undef_fail(r, b);
    if (is_num(a) && is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num_f(a), y = num_f(b);
        if (x != x || y != y) return 2;   /* NaN: every ordering is false */
        return (x > y) - (x < y);
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.t == TV_LIST && b.t == TV_LIST && seq_class(a) == seq_class(b) && !tp_is_view(a)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tp_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return order(r, a.u.l->v[i], b.u.l->v[i], op);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    tp_rfail(r, "'%s' not supported between instances of '%s' and '%s'", cmp_sym(op), tp_type_name(a), tp_type_name(b));
}

int tp_cmp(tp_render *r, tv a, tv b, int op) {
    int c = order(r, a, b, op);
    if (c == 2) return 0;
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LTEQ: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
    }
}

void tp_float_repr(double f, char *buf) {
    if (f != f) { strcpy(buf, "nan"); return; }
    if (isinf(f)) { strcpy(buf, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { strcpy(buf, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e(+|-)XX */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    digits[nd] = 0;
    int e = atoi(p + 1), decpt = e + 1;
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            o += sprintf(o, "0.");
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            o += sprintf(o, "%s", digits);
        } else if (decpt >= nd) {
            o += sprintf(o, "%s", digits);
            for (int i = nd; i < decpt; i++) *o++ = '0';
            o += sprintf(o, ".0");
        } else {
            memcpy(o, digits, (size_t)decpt);
            o += decpt;
            *o++ = '.';
            o += sprintf(o, "%s", digits + decpt);
        }
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            o += sprintf(o, "%s", digits + 1);
        }
        o += sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    *o = 0;
}

static void repr_str(tp_render *r, tp_buf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tp_buf_putc(r, b, q);
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = tp_utf8_next(s, n, &i);
        if (cp == (uint32_t)q || cp == '\\') { tp_buf_putc(r, b, '\\'); tp_buf_putc(r, b, (char)cp); }
        else if (cp == '\n') tp_buf_put(r, b, "\\n", 2);
        else if (cp == '\r') tp_buf_put(r, b, "\\r", 2);
        else if (cp == '\t') tp_buf_put(r, b, "\\t", 2);
        else if (!tp_isprintable(cp))
            tp_buf_printf(r, b, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        else tp_buf_put(r, b, s + start, i - start);
    }
    tp_buf_putc(r, b, q);
}

static void to_str(tp_render *r, tp_buf *b, tv v, int repr, int depth) {
    if (depth > r->max_depth) tp_rfail(r, "value nests too deeply to print");
    char tmp[40];
    switch (v.t) {
    case TV_MISSING: case TV_UNDEF: if (repr) tp_buf_put(r, b, "Undefined", 9); return;
    case TV_NONE: tp_buf_put(r, b, "None", 4); return;
    case TV_BOOL: tp_buf_put(r, b, v.u.i ? "True" : "False", v.u.i ? 4 : 5); return;
    case TV_INT: tp_buf_printf(r, b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT: tp_float_repr(v.u.f, tmp); tp_buf_put(r, b, tmp, strlen(tmp)); return;
    case TV_STR:
        if (!repr) tp_buf_put(r, b, v.u.s->s, v.u.s->len);
        else if (v.sub == STR_MARKUP) {
            tp_buf_put(r, b, "Markup(", 7);
            repr_str(r, b, v.u.s->s, v.u.s->len);
            tp_buf_putc(r, b, ')');
        } else repr_str(r, b, v.u.s->s, v.u.s->len);
        return;
    case TV_LIST: {
        int tuple = tp_is_tuple(v);
        if (tp_is_view(v)) tp_buf_printf(r, b, "%s(", tp_type_name(v));
        tp_buf_putc(r, b, tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tp_buf_put(r, b, ", ", 2);
            to_str(r, b, v.u.l->v[i], 1, depth + 1);
        }
        if (tuple && v.u.l->n == 1) tp_buf_putc(r, b, ',');
        tp_buf_putc(r, b, tuple ? ')' : ']');
        if (tp_is_view(v)) tp_buf_putc(r, b, ')');
        return;
    }
    case TV_ITER:
        tp_buf_printf(r, b, "<%s object>", v.u.it->kind);
        return;
    case TV_NS: case TV_DICT:
        if (v.t == TV_NS) tp_buf_put(r, b, "<Namespace ", 11);
        tp_buf_putc(r, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) tp_buf_put(r, b, ", ", 2);
            to_str(r, b, v.u.d->k[i], 1, depth + 1);
            tp_buf_put(r, b, ": ", 2);
            to_str(r, b, v.u.d->v[i], 1, depth + 1);
        }
        tp_buf_putc(r, b, '}');
        if (v.t == TV_NS) tp_buf_putc(r, b, '>');
        return;
    case TV_MACRO:
        tp_buf_printf(r, b, "<Macro '%s'>", v.u.m->def->name ? v.u.m->def->name : "caller");
        return;
    case TV_LOOP:
        tp_buf_printf(r, b, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->items->n);
        return;
    case TV_METHOD:
        tp_buf_printf(r, b, "<built-in method %s of %s object>", v.u.bm->name, tp_type_name(v.u.bm->self));
        return;
    default:
        tp_buf_printf(r, b, "<%s>", tp_type_name(v));
        return;
    }
}

void tp_to_str(tp_render *r, tp_buf *b, tv v) { to_str(r, b, v, 0, 0); }
void tp_repr(tp_render *r, tp_buf *b, tv v) { to_str(r, b, v, 1, 0); }

tv tp_str_of(tp_render *r, tv v) {
    if (v.t == TV_STR) return v;
    tp_buf b = {0};
    to_str(r, &b, v, 0, 0);
    return tp_buf_str(r, &b);
}

/* jinja2's messages: "'x' is undefined" for a name, "'dict object' has no attribute 'x'" for
 * a member. */
void tp_undef_fail(tp_render *r, tv v) {
    if (v.ukind == 0) tp_rfail(r, "'%s' is undefined", v.u.name ? v.u.name : "value");
    tv owner = {.t = (uint8_t)(v.ukind - 1)};
    if (v.u.name) tp_rfail(r, "'%s object' has no attribute '%s'", tp_type_name(owner), v.u.name);
    tp_rfail(r, "'%s object' has no such item", tp_type_name(owner));
}

void tp_check_defined(tp_render *r, tv v) {
    if (v.t == TV_UNDEF) tp_undef_fail(r, v);
}

tv tp_markup(tv s) {
    s.sub = STR_MARKUP;
    return s;
}

/* markupsafe.escape: a Markup is returned as it is; anything else is str()'d and escaped. */
tv tp_escape(tp_render *r, tv v) {
    if (tp_is_markup(v)) return v;
    tv s = tp_str_of(r, v);
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        switch (c) {
        case '&': tp_buf_put(r, &b, "&amp;", 5); break;
        case '<': tp_buf_put(r, &b, "&lt;", 4); break;
        case '>': tp_buf_put(r, &b, "&gt;", 4); break;
        case '"': tp_buf_put(r, &b, "&#34;", 5); break;
        case '\'': tp_buf_put(r, &b, "&#39;", 5); break;
        default: tp_buf_putc(r, &b, c);
        }
    }
    return tp_markup(tp_buf_str(r, &b));
}

int tp_hashable(tv v) {
    if (v.t == TV_DICT) return 0;
    if (v.t != TV_LIST) return 1;
    if (!tp_is_tuple(v)) return 0;
    for (size_t i = 0; i < v.u.l->n; i++)
        if (!tp_hashable(v.u.l->v[i])) return 0;
    return 1;
}
