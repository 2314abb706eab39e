/* template_filters.c — jinja2's builtin filters and tests, with transformers' tojson.
 *
 * Owns: the name tables the parser resolves against (an unknown filter or test is a compile
 * error, as in jinja2) and each filter's and test's behaviour, argument names and defaults as
 * jinja2 3.1 defines them: string filters convert with str() (an Undefined is ""), sequence
 * filters iterate (an Undefined is empty), sort / unique / min / max / dictsort compare
 * strings case-insensitively unless case_sensitive, and attribute= paths ("a.b.0") look items
 * up as jinja2's sandbox does.
 * Does not own: methods of str, dict and list, global functions (template_methods.c).
 *
 * As in jinja2, map / select / reject / unique / items / batch / slice give one-shot
 * iterators (a second pass sees nothing, they are always true, they have no length, tojson
 * refuses them) and reverse gives a reverse iterator; safe and escape give Markup strings,
 * which escape what is added to them.
 * Not reproduced: urlize, wordwrap and random (they fail with a message).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E,
    F_ESCAPE, F_FILESIZEFORMAT, F_FIRST, F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_GROUPBY, F_INDENT,
    F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_PPRINT,
    F_RANDOM, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT,
    F_SELECTATTR, F_SLICE, F_SORT, F_STRING, F_STRIPTAGS, F_SUM, F_TITLE, F_TOJSON, F_TRIM,
    F_TRUNCATE, F_UNIQUE, F_UPPER, F_URLENCODE, F_URLIZE, F_WORDCOUNT, F_WORDWRAP, F_XMLATTR,
    F_COUNT_ALL
};
static const char *const filter_names[F_COUNT_ALL] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
};

enum {
    T_ODD, T_EVEN, T_DIVISIBLEBY, T_DEFINED, T_UNDEFINED, T_FILTER, T_TEST, T_NONE, T_BOOLEAN,
    T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_LOWER, T_UPPER, T_STRING, T_MAPPING, T_NUMBER,
    T_SEQUENCE, T_ITERABLE, T_CALLABLE, T_SAMEAS, T_ESCAPED, T_IN, T_EQ1, T_EQ, T_EQUALTO,
    T_NE1, T_NE, T_GT1, T_GT, T_GREATERTHAN, T_GE, T_GE1, T_LT1, T_LT, T_LESSTHAN, T_LE1, T_LE,
    T_COUNT_ALL
};
static const char *const test_names[T_COUNT_ALL] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean",
    "false", "true", "integer", "float", "lower", "upper", "string", "mapping", "number",
    "sequence", "iterable", "callable", "sameas", "escaped", "in", "==", "eq", "equalto",
    "!=", "ne", ">", "gt", "greaterthan", "ge", ">=", "<", "lt", "lessthan", "<=", "le",
};

static int find_name(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}
int tp_filter_id(const char *name) { return find_name(filter_names, F_COUNT_ALL, name); }
int tp_test_id(const char *name) { return find_name(test_names, T_COUNT_ALL, name); }
int tp_filter_needs_context(int id) {
    return id == F_MAP || id == F_SELECT || id == F_REJECT || id == F_SELECTATTR || id == F_REJECTATTR || id == F_RANDOM;
}
const char *tp_filter_name(int id) { return id >= 0 && id < F_COUNT_ALL ? filter_names[id] : "?"; }
const char *tp_test_name(int id) { return id >= 0 && id < T_COUNT_ALL ? test_names[id] : "?"; }

/* ---- helpers --------------------------------------------------------------------------- */
static int given(tv v) { return v.t != TV_MISSING; }
static tv or_default(tv v, tv d) { return given(v) ? v : d; }
static int is_int(tv v) { return v.t == TV_INT || v.t == TV_BOOL; }
static int is_num(tv v) { return is_int(v) || v.t == TV_FLOAT; }

static int64_t want_int(tp_render *r, tv v, const char *what) {
    if (!is_int(v)) tp_rfail(r, "%s must be an integer, not %s", what, tp_type_name(v));
    return v.u.i;
}

/* str.lower() for ignore_case */
static tv lower_str(tp_render *r, tv v) {
    if (v.t != TV_STR) return v;
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    for (size_t i = 0; i < v.u.s->len;) {
        char tmp[4];
        uint32_t cp = tp_utf8_next(v.u.s->s, v.u.s->len, &i);
        tp_buf_put(r, &b, tmp, (size_t)tp_utf8_put(tmp, tp_tolower(cp)));
    }
    return tp_buf_str(r, &b);
}

/* An attribute path as jinja2's make_attrgetter: "a.b.0" is ['a', 'b', 0]. */
typedef struct { int n; tv *parts; } attr_path;

static attr_path attr_parse(tp_render *r, tv attribute) {
    attr_path p = {0};
    if (!given(attribute) || attribute.t == TV_NONE) return p;
    if (attribute.t != TV_STR) {
        p.parts = tp_alloc(&r->ar, sizeof(tv));
        p.parts[p.n++] = attribute;
        return p;
    }
    const char *s = attribute.u.s->s;
    size_t len = attribute.u.s->len, nparts = 1;
    for (size_t i = 0; i < len; i++) nparts += s[i] == '.';
    p.parts = tp_alloc(&r->ar, nparts * sizeof(tv));
    for (size_t i = 0, start = 0; i <= len; i++) {
        if (i < len && s[i] != '.') continue;
        int digits = i > start;
        for (size_t k = start; k < i; k++) digits &= s[k] >= '0' && s[k] <= '9';
        if (digits && i - start < 18) p.parts[p.n++] = tp_int(strtoll(s + start, NULL, 10));
        else p.parts[p.n++] = tp_str_n(r, s + start, i - start);
        start = i + 1;
    }
    return p;
}

static tv attr_get(tp_render *r, const attr_path *p, tv item, tv deflt) {
    for (int i = 0; i < p->n; i++) {
        item = tp_getitem(r, item, p->parts[i]);
        if (given(deflt) && deflt.t != TV_NONE && item.t == TV_UNDEF) item = deflt;
    }
    return item;
}

/* Stable merge sort of (key, item) pairs with Python's `<`; reverse keeps equal items in
 * their original order, as sorted(reverse=True). */
typedef struct { tv key, item; } kv;

static int kv_less(tp_render *r, const kv *a, const kv *b, int reverse) {
    return reverse ? tp_cmp(r, b->key, a->key, OP_LT) : tp_cmp(r, a->key, b->key, OP_LT);
}

static void kv_sort(tp_render *r, kv *a, size_t n, int reverse) {
    if (n < 2) return;
    kv *tmp = tp_alloc(&r->ar, n * sizeof *tmp);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = kv_less(r, &a[j], &a[i], reverse) ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof *a);
    }
}

static tv list_of(tp_render *r, tv v) {
    tv l = tp_iter_list(r, v), out = tp_list_new(r, l.u.l->n);
    if (l.u.l->n) memcpy(out.u.l->v, l.u.l->v, l.u.l->n * sizeof(tv));
    out.u.l->n = l.u.l->n;
    return out;
}

static tv plain(tv v) {
    v.sub = 0;
    return v;
}

/* Python's round(x, n): correctly rounded, ties to even (printf rounds the exact binary
 * value the same way). */
static tv py_round(tp_render *r, tv v, int64_t prec) {
    if (is_int(v)) {
        if (prec >= 0) return tp_int(v.u.i);
        int64_t p = 1;
        for (int64_t k = 0; k < -prec && p < (int64_t)1e18; k++) p *= 10;
        int64_t q = v.u.i / p, rem = v.u.i % p;
        if (rem < 0) { rem += p; q--; }
        if (2 * rem > p || (2 * rem == p && (q & 1))) q++;
        return tp_int(q * p);
    }
    if (v.t != TV_FLOAT) tp_rfail(r, "type %s doesn't define __round__ method", tp_type_name(v));
    double x = v.u.f;
    if (!isfinite(x)) return v;
    if (prec > 300) return v;
    if (prec < -308) return tp_float(copysign(0.0, x));
    if (prec >= 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        return tp_float(strtod(buf, NULL));
    }
    double p = pow(10.0, (double)-prec), y = x / p, ry = nearbyint(y);
    return tp_float(ry * p);
}

/* ---- select / reject / map: call a test or filter by name ------------------------------ */
static int call_test_named(tp_render *r, tv name, tv item, tp_args *rest) {
    if (name.t != TV_STR) tp_rfail(r, "test name must be a string");
    int id = tp_test_id(name.u.s->s);
    if (id < 0) tp_rfail(r, "no test named '%s'", name.u.s->s);
    return tp_apply_test(r, id, item, rest);
}

static tv select_reject(tp_render *r, tv in, tp_args *a, int want, int lookup_attr) {
    tv out = tp_list_new(r, 0);
    if (!tp_truthy(in)) return tp_iter_new(r, out, "generator");
    tv items = tp_iter_list(r, in);
    int off = 0;
    attr_path path = {0};
    if (lookup_attr) {
        if (a->n < 1 || a->kw[0]) tp_rfail(r, "missing parameter for attribute name");
        path = attr_parse(r, a->v[0]);
        off = 1;
    }
    int has_test = a->n > off && !a->kw[off];
    tp_args rest = {0};
    if (has_test) {
        rest.n = a->n - off - 1;
        rest.v = a->v + off + 1;
        rest.kw = a->kw + off + 1;
    }
    for (size_t i = 0; i < items.u.l->n; i++) {
        tv x = items.u.l->v[i], probe = lookup_attr ? attr_get(r, &path, x, (tv){.t = TV_MISSING}) : x;
        int ok = has_test ? call_test_named(r, a->v[off], probe, &rest) : tp_truthy(probe);
        if (ok == want) tp_list_push(r, &out, x);
    }
    return tp_iter_new(r, out, "generator");
}

static tv do_map(tp_render *r, tv in, tp_args *a) {
    tv out = tp_list_new(r, 0);
    if (!tp_truthy(in)) return tp_iter_new(r, out, "generator");
    tv items = tp_iter_list(r, in);
    int npos = 0;
    for (int i = 0; i < a->n; i++) npos += !a->kw[i];
    if (!npos) {
        tv attribute = {.t = TV_MISSING}, deflt = {.t = TV_MISSING};
        for (int i = 0; i < a->n; i++) {
            if (!strcmp(a->kw[i], "attribute")) attribute = a->v[i];
            else if (!strcmp(a->kw[i], "default")) deflt = a->v[i];
            else tp_rfail(r, "unexpected keyword argument '%s'", a->kw[i]);
        }
        if (!given(attribute)) tp_rfail(r, "map requires a filter argument");
        attr_path path = attr_parse(r, attribute);
        for (size_t i = 0; i < items.u.l->n; i++) tp_list_push(r, &out, attr_get(r, &path, items.u.l->v[i], deflt));
        return tp_iter_new(r, out, "generator");
    }
    if (a->kw[0] || a->v[0].t != TV_STR) tp_rfail(r, "map requires a filter name first");
    int id = tp_filter_id(a->v[0].u.s->s);
    if (id < 0) tp_rfail(r, "no filter named '%s'", a->v[0].u.s->s);
    tp_args rest = {a->n - 1, a->v + 1, a->kw + 1};
    for (size_t i = 0; i < items.u.l->n; i++) tp_list_push(r, &out, tp_apply_filter(r, id, items.u.l->v[i], &rest));
    return tp_iter_new(r, out, "generator");
}

/* ---- the filters ----------------------------------------------------------------------- */
#define BIND(...)                                                                   \
    static const char *const names_[] = {__VA_ARGS__};                              \
    tv p[sizeof names_ / sizeof names_[0]];                                         \
    tp_bind(r, r->what ? r->what : "filter", a, (int)(sizeof names_ / sizeof names_[0]), names_, p)

static tv f_sort_like(tp_render *r, int id, tv in, tp_args *a) {
    if (id == F_DICTSORT) {
        BIND("case_sensitive", "by", "reverse");
        int pos = 0;
        if (given(p[1])) {
            if (p[1].t == TV_STR && !strcmp(p[1].u.s->s, "value")) pos = 1;
            else if (!(p[1].t == TV_STR && !strcmp(p[1].u.s->s, "key"))) tp_rfail(r, "you can only sort by either \"key\" or \"value\"");
        }
        tp_check_defined(r, in);
        if (in.t != TV_DICT) tp_rfail(r, "'%s' object has no attribute 'items'", tp_type_name(in));
        size_t n = in.u.d->n;
        kv *items = tp_alloc(&r->ar, (n + 1) * sizeof *items);
        for (size_t i = 0; i < n; i++) {
            tv pair = tp_list_new(r, 2);
            pair.sub = SEQ_TUPLE;
            pair.u.l->v[0] = in.u.d->k[i];
            pair.u.l->v[1] = in.u.d->v[i];
            pair.u.l->n = 2;
            tv key = pos ? in.u.d->v[i] : in.u.d->k[i];
            items[i] = (kv){tp_truthy(or_default(p[0], tp_bool(0))) ? key : lower_str(r, key), pair};
        }
        kv_sort(r, items, n, tp_truthy(or_default(p[2], tp_bool(0))));
        tv out = tp_list_new(r, n);
        for (size_t i = 0; i < n; i++) out.u.l->v[i] = items[i].item;
        out.u.l->n = n;
        return out;
    }
    /* sort, unique, min, max, groupby */
    tv cs = {.t = TV_MISSING}, attribute = {.t = TV_MISSING}, reverse = {.t = TV_MISSING}, deflt = {.t = TV_MISSING};
    if (id == F_SORT) {
        BIND("reverse", "case_sensitive", "attribute");
        reverse = p[0]; cs = p[1]; attribute = p[2];
    } else if (id == F_GROUPBY) {
        BIND("attribute", "default", "case_sensitive");
        attribute = p[0]; deflt = p[1]; cs = p[2];
    } else {
        BIND("case_sensitive", "attribute");
        cs = p[0]; attribute = p[1];
    }
    int ignore_case = !tp_truthy(or_default(cs, tp_bool(0)));
    tv items = tp_iter_list(r, in);
    size_t n = items.u.l->n;
    if ((id == F_MIN || id == F_MAX) && n == 0) return tp_undef(NULL, -1);
    /* sort splits attribute on ',' into several keys (make_multi_attrgetter) */
    int nkeys = 1;
    attr_path paths[16];
    if (id == F_SORT && attribute.t == TV_STR && strchr(attribute.u.s->s, ',')) {
        const char *s = attribute.u.s->s;
        nkeys = 0;
        for (const char *start = s;; ) {
            const char *c = strchr(start, ',');
            size_t len = c ? (size_t)(c - start) : strlen(start);
            if (nkeys == 16) tp_rfail(r, "too many sort attributes");
            paths[nkeys++] = attr_parse(r, tp_str_n(r, start, len));
            if (!c) break;
            start = c + 1;
        }
    } else {
        paths[0] = attr_parse(r, attribute);
    }
    kv *el = tp_alloc(&r->ar, (n + 1) * sizeof *el);
    for (size_t i = 0; i < n; i++) {
        tv key;
        if (id == F_SORT) {
            key = tp_list_new(r, (size_t)nkeys);
            for (int k = 0; k < nkeys; k++) {
                tv x = attr_get(r, &paths[k], items.u.l->v[i], (tv){.t = TV_MISSING});
                key.u.l->v[k] = ignore_case ? lower_str(r, x) : x;
            }
            key.u.l->n = (size_t)nkeys;
        } else {
            key = attr_get(r, &paths[0], items.u.l->v[i], deflt);
            if (ignore_case) key = lower_str(r, key);
        }
        el[i] = (kv){key, items.u.l->v[i]};
    }
    tv out = tp_list_new(r, n);
    if (id == F_UNIQUE) {
        for (size_t i = 0; i < n; i++) {
            tv k = el[i].key;
            if (tp_unhashable(k)) tp_rfail(r, "unhashable type: '%s'", tp_type_name(k));
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++) seen = tp_eq(el[j].key, k);
            if (!seen) tp_list_push(r, &out, el[i].item);
        }
        return tp_iter_new(r, out, "generator");
    }
    if (id == F_MIN || id == F_MAX) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (id == F_MIN ? tp_cmp(r, el[i].key, el[best].key, OP_LT) : tp_cmp(r, el[best].key, el[i].key, OP_LT)) best = i;
        return el[best].item;
    }
    kv_sort(r, el, n, tp_truthy(or_default(reverse, tp_bool(0))));
    if (id == F_SORT) {
        for (size_t i = 0; i < n; i++) out.u.l->v[i] = el[i].item;
        out.u.l->n = n;
        return out;
    }
    /* groupby: runs of equal keys; the grouper is the first item's attribute as written */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        tv group = tp_list_new(r, 0);
        while (j < n && tp_eq(el[j].key, el[i].key)) tp_list_push(r, &group, el[j++].item);
        tv pair = tp_list_new(r, 2);
        pair.sub = SEQ_GROUP;   /* a _GroupTuple: .grouper and .list */
        pair.u.l->v[0] = ignore_case ? attr_get(r, &paths[0], el[i].item, deflt) : el[i].key;
        pair.u.l->v[1] = group;
        pair.u.l->n = 2;
        tp_list_push(r, &out, pair);
        i = j;
    }
    return out;
}

static tv f_tojson(tp_render *r, tv in, tp_args *a) {
    /* transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    BIND("ensure_ascii", "indent", "separators", "sort_keys");
    const char *indent = NULL;
    tv ind = p[1];
    if (given(ind) && ind.t != TV_NONE) {
        if (ind.t == TV_STR) {
            indent = ind.u.s->s;
        } else if (is_int(ind)) {
            int64_t w = ind.u.i < 0 ? 0 : ind.u.i > 1000 ? 1000 : ind.u.i;
            char *sp = tp_alloc(&r->ar, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            indent = sp;
        } else {
            tp_rfail(r, "indent must be an int or a string, not %s", tp_type_name(ind));
        }
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    if (given(p[2]) && p[2].t != TV_NONE) {
        tv s = p[2];
        if (s.t != TV_LIST || s.u.l->n != 2 || s.u.l->v[0].t != TV_STR || s.u.l->v[1].t != TV_STR)
            tp_rfail(r, "separators must be a pair of strings");
        item_sep = s.u.l->v[0].u.s->s;
        key_sep = s.u.l->v[1].u.s->s;
    }
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    tp_json_dump(r, &b, in, indent, item_sep, key_sep, tp_truthy(or_default(p[3], tp_bool(0))),
                 tp_truthy(or_default(p[0], tp_bool(0))), 0);
    return tp_buf_str(r, &b);
}

static tv f_indent(tp_render *r, tv in, tp_args *a) {
    BIND("width", "first", "blank");
    if (in.t == TV_UNDEF) tp_undef_fail(r, in);
    if (in.t != TV_STR) tp_rfail(r, "unsupported operand type(s) for +=: '%s' and 'str'", tp_type_name(in));
    tv w = or_default(p[0], tp_int(4));
    tv ind;
    if (w.t == TV_STR) ind = w;
    else {
        int64_t n = want_int(r, w, "width");
        tp_buf sp = {0};
        tp_buf_put(r, &sp, "", 0);
        for (int64_t i = 0; i < n && i < 10000; i++) tp_buf_putc(r, &sp, ' ');
        ind = tp_buf_str(r, &sp);
    }
    int first = tp_truthy(or_default(p[1], tp_bool(0))), blank = tp_truthy(or_default(p[2], tp_bool(0)));
    /* s + "\n", then splitlines(); lines joined with "\n" + indent (empty lines too if blank) */
    tp_buf src = {0};
    tp_buf_put(r, &src, in.u.s->s, in.u.s->len);
    tp_buf_putc(r, &src, '\n');
    tp_args none = {0};
    tp_method m = {tp_str_n(r, src.p, src.n), "splitlines"};
    tv lines = tp_call_method(r, &m, &none);
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    if (first) tp_buf_put(r, &b, ind.u.s->s, ind.u.s->len);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        tv line = lines.u.l->v[i];
        if (i) {
            tp_buf_putc(r, &b, '\n');
            if (blank || line.u.s->len) tp_buf_put(r, &b, ind.u.s->s, ind.u.s->len);
        }
        tp_buf_put(r, &b, line.u.s->s, line.u.s->len);
    }
    tv out = tp_buf_str(r, &b);
    out.sub = in.sub;
    return out;
}

static tv str_method(tp_render *r, tv self, const char *name, int n, tv *args) {
    tp_method m = {self, name};
    tp_args a = {n, args, tp_alloc(&r->ar, (size_t)(n + 1) * sizeof(char *))};
    return tp_call_method(r, &m, &a);
}

tv tp_apply_filter(tp_render *r, int id, tv in, tp_args *a) {
    tp_step(r);
    switch (id) {
    case F_ABS:
        if (in.t == TV_UNDEF) tp_undef_fail(r, in);
        if (in.t == TV_FLOAT) return tp_float(fabs(in.u.f));
        if (is_int(in)) {
            if (in.u.i == INT64_MIN) tp_rfail(r, "integer overflow");
            return tp_int(in.u.i < 0 ? -in.u.i : in.u.i);
        }
        tp_rfail(r, "bad operand type for abs(): '%s'", tp_type_name(in));
    case F_ATTR: {
        BIND("name");
        if (p[0].t != TV_STR) tp_rfail(r, "attribute name must be a string");
        if (in.t == TV_UNDEF) tp_undef_fail(r, in);
        if (in.t == TV_DICT) return tp_has_method(in, p[0].u.s->s) ? tp_getattr(r, in, p[0].u.s->s) : tp_undef(p[0].u.s->s, in.t);
        return tp_getattr(r, in, p[0].u.s->s);
    }
    case F_BATCH: case F_SLICE: {
        static const char *const batch_names[] = {"linecount", "fill_with"}, *const slice_names[] = {"slices", "fill_with"};
        tv p[2];
        tp_bind(r, r->what ? r->what : "filter", a, 2, id == F_BATCH ? batch_names : slice_names, p);
        int64_t k = want_int(r, p[0], id == F_BATCH ? "linecount" : "slices");
        tv items = tp_iter_list(r, in), out = tp_list_new(r, 0);
        size_t n = items.u.l->n;
        int fill = given(p[1]) && p[1].t != TV_NONE;
        if (id == F_BATCH) {
            if (k <= 0) tp_rfail(r, "linecount must be positive");
            for (size_t i = 0; i < n; i += (size_t)k) {
                tv row = tp_list_new(r, 0);
                for (size_t j = i; j < n && j < i + (size_t)k; j++) tp_list_push(r, &row, items.u.l->v[j]);
                while (fill && row.u.l->n < (size_t)k) tp_list_push(r, &row, p[1]);
                tp_list_push(r, &out, row);
            }
            return tp_iter_new(r, out, "generator");
        }
        if (k <= 0) tp_rfail(r, "integer division or modulo by zero");
        if (k > 100000) tp_rfail(r, "too many slices");
        size_t per = n / (size_t)k, extra = n % (size_t)k, offset = 0;
        for (size_t s = 0; s < (size_t)k; s++) {
            size_t start = offset + s * per;
            if (s < extra) offset++;
            size_t end = offset + (s + 1) * per;
            tv row = tp_list_new(r, 0);
            for (size_t j = start; j < end; j++) tp_list_push(r, &row, items.u.l->v[j]);
            if (fill && s >= extra) tp_list_push(r, &row, p[1]);
            tp_list_push(r, &out, row);
        }
        return tp_iter_new(r, out, "generator");
    }
    case F_CAPITALIZE: return str_method(r, tp_str_of(r, in), "capitalize", 0, NULL);
    case F_UPPER: return str_method(r, tp_str_of(r, in), "upper", 0, NULL);
    case F_LOWER: return str_method(r, tp_str_of(r, in), "lower", 0, NULL);
    case F_CENTER: {
        BIND("width");
        tv w = or_default(p[0], tp_int(80));
        return str_method(r, tp_str_of(r, in), "center", 1, &w);
    }
    case F_COUNT: case F_LENGTH: return tp_int(tp_len(r, in));
    case F_D: case F_DEFAULT: {
        BIND("default_value", "boolean");
        if (in.t == TV_UNDEF || (tp_truthy(or_default(p[1], tp_bool(0))) && !tp_truthy(in)))
            return or_default(p[0], tp_str_c(r, ""));
        return in;
    }
    case F_DICTSORT: case F_SORT: case F_UNIQUE: case F_MIN: case F_MAX: case F_GROUPBY:
        return f_sort_like(r, id, in, a);
    case F_E: case F_ESCAPE: return tp_escape(r, in);
    case F_FORCEESCAPE: return tp_escape(r, plain(tp_str_of(r, in)));
    case F_FILESIZEFORMAT: {
        BIND("binary");
        double bytes;   /* float(value) */
        if (is_num(in)) bytes = in.t == TV_FLOAT ? in.u.f : (double)in.u.i;
        else if (in.t == TV_STR) {
            tv fv = str_method(r, in, "__float__", 0, NULL);
            if (fv.t != TV_FLOAT) tp_rfail(r, "could not convert string to float: '%s'", in.u.s->s);
            bytes = fv.u.f;
        } else if (in.t == TV_UNDEF) {
            tp_undef_fail(r, in);
        } else {
            tp_rfail(r, "float() argument must be a string or a real number, not '%s'", tp_type_name(in));
        }
        int binary = tp_truthy(or_default(p[0], tp_bool(0)));
        double base = binary ? 1024 : 1000;
        static const char *const pre[2][8] = {{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"},
                                              {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}};
        char buf[64];
        if (bytes == 1) return tp_str_c(r, "1 Byte");
        if (bytes < base) { snprintf(buf, sizeof buf, "%lld Bytes", (long long)bytes); return tp_str_c(r, buf); }
        double unit = base;
        int i;
        for (i = 0; i < 8; i++) {
            unit *= base;
            if (bytes < unit) break;
        }
        if (i == 8) i = 7;
        snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, pre[binary][i]);
        return tp_str_c(r, buf);
    }
    case F_FIRST: case F_LAST: {
        if (in.t == TV_UNDEF) return tp_undef(NULL, -1);
        if (in.t == TV_ITER) {
            tp_iter *it = in.u.it;
            if (id == F_LAST) tp_rfail(r, "'%s' object is not reversible", it->kind);
            return it->pos < it->items->n ? it->items->v[it->pos++] : tp_undef(NULL, -1);
        }
        tv items = tp_iter_list(r, in);
        if (!items.u.l->n) return tp_undef(NULL, -1);
        return items.u.l->v[id == F_FIRST ? 0 : items.u.l->n - 1];
    }
    case F_FLOAT: {
        BIND("default");
        tv d = or_default(p[0], tp_float(0.0));
        if (in.t == TV_UNDEF) tp_undef_fail(r, in);
        if (in.t == TV_FLOAT) return in;
        if (is_int(in)) return tp_float((double)in.u.i);
        if (in.t == TV_STR) {
            tv f = str_method(r, in, "__float__", 0, NULL);
            return f.t == TV_FLOAT ? f : d;
        }
        return d;
    }
    case F_INT: {
        BIND("default", "base");
        tv d = or_default(p[0], tp_int(0));
        if (in.t == TV_UNDEF) tp_undef_fail(r, in);
        if (is_int(in)) return tp_int(in.u.i);
        if (in.t == TV_FLOAT) {
            if (!isfinite(in.u.f) || fabs(in.u.f) >= 9.2e18) return d;
            return tp_int((int64_t)in.u.f);
        }
        if (in.t == TV_STR) {
            tv base = or_default(p[1], tp_int(10));
            tv i = str_method(r, in, "__int__", 1, &base);
            if (i.t == TV_INT) return i;
            tv f = str_method(r, in, "__float__", 0, NULL);
            if (f.t == TV_FLOAT && isfinite(f.u.f) && fabs(f.u.f) < 9.2e18) return tp_int((int64_t)f.u.f);
        }
        return d;
    }
    case F_FORMAT: {
        int npos = 0, nkw = 0;
        for (int i = 0; i < a->n; i++) {
            if (a->kw[i]) nkw++;
            else npos++;
        }
        if (npos && nkw) tp_rfail(r, "can't handle positional and keyword arguments at the same time");
        tv args;
        if (nkw) {
            args = tp_dict_new(r, 0);
            for (int i = 0; i < a->n; i++) tp_dict_set(r, &args, tp_str_c(r, a->kw[i]), a->v[i]);
        } else {
            args = tp_list_new(r, (size_t)npos);
            args.sub = SEQ_TUPLE;
            for (int i = 0; i < a->n; i++) args.u.l->v[i] = a->v[i];
            args.u.l->n = (size_t)npos;
        }
        return tp_percent_format(r, tp_str_of(r, in), args);
    }
    case F_INDENT: return f_indent(r, in, a);
    case F_ITEMS: {
        tv out = tp_list_new(r, 0);
        if (in.t == TV_UNDEF) return tp_iter_new(r, out, "generator");
        if (in.t != TV_DICT) tp_rfail(r, "can only get item pairs from a mapping");
        tp_args none = {0};
        tp_method m = {in, "items"};
        out = tp_call_method(r, &m, &none);
        out.sub = SEQ_LIST;
        return tp_iter_new(r, out, "generator");
    }
    case F_JOIN: {
        BIND("d", "attribute");
        tv sep = tp_str_of(r, or_default(p[0], tp_str_c(r, "")));
        tv items = tp_iter_list(r, in);
        attr_path path = attr_parse(r, p[1]);
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (i) tp_buf_put(r, &b, sep.u.s->s, sep.u.s->len);
            tp_to_str(r, &b, path.n ? attr_get(r, &path, items.u.l->v[i], (tv){.t = TV_MISSING}) : items.u.l->v[i]);
        }
        return tp_buf_str(r, &b);
    }
    case F_LIST: return list_of(r, in);
    case F_MAP: return do_map(r, in, a);
    case F_PPRINT: return tp_pprint(r, in);
    case F_REJECT: return select_reject(r, in, a, 0, 0);
    case F_REJECTATTR: return select_reject(r, in, a, 0, 1);
    case F_SELECT: return select_reject(r, in, a, 1, 0);
    case F_SELECTATTR: return select_reject(r, in, a, 1, 1);
    case F_REPLACE: {
        BIND("old", "new", "count");
        /* without autoescape jinja2 does str(s).replace(str(old), str(new), count) */
        tv args[3] = {plain(tp_str_of(r, p[0])), plain(tp_str_of(r, p[1])), or_default(p[2], tp_int(-1))};
        if (args[2].t == TV_NONE) args[2] = tp_int(-1);
        return str_method(r, plain(tp_str_of(r, in)), "replace", 3, args);
    }
    case F_REVERSE: {
        /* a string reverses; a list, tuple, dict or view gives a reverse iterator; anything
         * else iterable is listed and reversed */
        if (in.t == TV_STR) return tp_slice(r, in, tp_none(), tp_none(), tp_int(-1), 0);
        if (in.t != TV_LIST && in.t != TV_DICT && in.t != TV_ITER && in.t != TV_UNDEF)
            tp_rfail(r, "argument must be iterable");
        tv items = list_of(r, in);
        for (size_t i = 0, j = items.u.l->n; i + 1 < j; i++, j--) {
            tv t = items.u.l->v[i];
            items.u.l->v[i] = items.u.l->v[j - 1];
            items.u.l->v[j - 1] = t;
        }
        if (in.t == TV_ITER || in.t == TV_UNDEF) return items;
        const char *kind = in.t == TV_DICT || in.sub == SEQ_KEYS ? "dict_reversekeyiterator"
                           : in.sub == SEQ_ITEMS ? "dict_reverseitemiterator"
                           : in.sub == SEQ_VALUES ? "dict_reversevalueiterator"
                           : tp_is_tuple(in) ? "reversed" : "list_reverseiterator";
        return tp_iter_new(r, items, kind);
    }
    case F_ROUND: {
        BIND("precision", "method");
        int64_t prec = want_int(r, or_default(p[0], tp_int(0)), "precision");
        const char *method = "common";
        if (given(p[1])) {
            if (p[1].t != TV_STR) tp_rfail(r, "method must be common, ceil or floor");
            method = p[1].u.s->s;
        }
        if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
            tp_rfail(r, "method must be common, ceil or floor");
        if (in.t == TV_UNDEF) tp_undef_fail(r, in);
        if (!strcmp(method, "common")) return py_round(r, in, prec);
        if (!is_num(in)) tp_rfail(r, "must be real number, not %s", tp_type_name(in));
        double scale = pow(10.0, (double)prec), x = in.t == TV_FLOAT ? in.u.f : (double)in.u.i;
        double y = method[0] == 'c' ? ceil(x * scale) : floor(x * scale);
        return tp_float(y / scale);
    }
    case F_SAFE: return tp_markup(tp_str_of(r, in));
    case F_STRING: return tp_str_of(r, in);
    case F_STRIPTAGS: {
        tv s = tp_str_of(r, in);
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        const char *x = s.u.s->s;
        size_t n = s.u.s->len;
        for (size_t i = 0; i < n;) {
            if (!strncmp(x + i, "<!--", 4)) {
                const char *e = strstr(x + i + 4, "-->");
                i = e ? (size_t)(e - x) + 3 : n;
            } else if (x[i] == '<' && i + 1 < n && (x[i + 1] == '/' || x[i + 1] == '!' || x[i + 1] == '?' || tp_isalpha((unsigned char)x[i + 1]))) {
                const char *e = memchr(x + i, '>', n - i);
                if (!e) { tp_buf_putc(r, &b, x[i++]); continue; }
                i = (size_t)(e - x) + 1;
            } else {
                tp_buf_putc(r, &b, x[i++]);
            }
        }
        tv words = str_method(r, tp_buf_str(r, &b), "split", 0, NULL);
        tv sp = tp_str_c(r, " ");
        return str_method(r, sp, "join", 1, &words);
    }
    case F_SUM: {
        BIND("attribute", "start");
        tv acc = or_default(p[1], tp_int(0)), items = tp_iter_list(r, in);
        attr_path path = attr_parse(r, p[0]);
        for (size_t i = 0; i < items.u.l->n; i++)
            acc = tp_binop(r, OP_ADD, acc, path.n ? attr_get(r, &path, items.u.l->v[i], (tv){.t = TV_MISSING}) : items.u.l->v[i]);
        return acc;
    }
    case F_TITLE: {
        /* jinja2: split on runs of [-\s({[<], capitalize the first character of each piece */
        tv s = tp_str_of(r, in);
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        int at_start = 1;
        for (size_t i = 0; i < s.u.s->len;) {
            char tmp[4];
            uint32_t cp = tp_utf8_next(s.u.s->s, s.u.s->len, &i);
            int sep = tp_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            uint32_t o = sep ? cp : at_start ? tp_toupper(cp) : tp_tolower(cp);
            tp_buf_put(r, &b, tmp, (size_t)tp_utf8_put(tmp, o));
            at_start = sep;
        }
        tv out = tp_buf_str(r, &b);
        out.sub = s.sub;
        return out;
    }
    case F_TOJSON: return f_tojson(r, in, a);
    case F_TRIM: {
        BIND("chars");
        tv c = or_default(p[0], tp_none());
        return str_method(r, tp_str_of(r, in), "strip", 1, &c);
    }
    case F_TRUNCATE: {
        BIND("length", "killwords", "end", "leeway");
        int64_t length = want_int(r, or_default(p[0], tp_int(255)), "length");
        tv end = or_default(p[2], tp_str_c(r, "..."));
        int64_t leeway = want_int(r, or_default(p[3], tp_int(5)), "leeway");
        if (end.t != TV_STR) tp_rfail(r, "end must be a string");
        tv s = in;
        int64_t endlen = (int64_t)tp_utf8_count(end.u.s->s, end.u.s->len);
        if (length < endlen) tp_rfail(r, "expected length >= %lld, got %lld", (long long)endlen, (long long)length);
        if (leeway < 0) tp_rfail(r, "expected leeway >= 0");
        if (tp_len(r, s) <= length + leeway) return s;
        if (s.t != TV_STR) tp_rfail(r, "truncate needs a string, not %s", tp_type_name(s));
        tv head = tp_slice(r, s, tp_none(), tp_int(length - endlen), tp_none(), 0);
        if (!tp_truthy(or_default(p[1], tp_bool(0)))) {
            tv args[2] = {tp_str_c(r, " "), tp_int(1)};
            head = str_method(r, head, "rsplit", 2, args).u.l->v[0];
        }
        return tp_binop(r, OP_ADD, head, end);
    }
    case F_URLENCODE: {
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        tv pairs;
        if (in.t == TV_DICT) {
            tp_args none = {0};
            tp_method m = {in, "items"};
            pairs = tp_call_method(r, &m, &none);
        } else if (in.t == TV_LIST) {
            pairs = in;
        } else {
            pairs = tp_none();
        }
        const char *safe_chars = "_.-~";
        for (size_t i = 0, n = pairs.t == TV_LIST ? pairs.u.l->n : 1; i < n; i++) {
            for (int part = 0; part < (pairs.t == TV_LIST ? 2 : 1); part++) {
                tv x = in;
                if (pairs.t == TV_LIST) {   /* for k, v in items */
                    tv kv = tp_iter_list(r, pairs.u.l->v[i]);
                    if (kv.u.l->n != 2)
                        tp_rfail(r, "%s values to unpack (expected 2, got %zu)", kv.u.l->n > 2 ? "too many" : "not enough", kv.u.l->n);
                    x = kv.u.l->v[part];
                }
                tv s = tp_str_of(r, x);
                if (pairs.t == TV_LIST) tp_buf_put(r, &b, part ? "=" : i ? "&" : "", part || i ? 1 : 0);
                for (size_t k = 0; k < s.u.s->len; k++) {
                    unsigned char c = (unsigned char)s.u.s->s[k];
                    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr(safe_chars, c) ||
                        (c == '/' && pairs.t != TV_LIST))
                        tp_buf_putc(r, &b, (char)c);
                    else if (c == ' ' && pairs.t == TV_LIST) tp_buf_putc(r, &b, '+');
                    else tp_buf_printf(r, &b, "%%%02X", c);
                }
            }
        }
        return tp_buf_str(r, &b);
    }
    case F_WORDCOUNT: {
        tv s = tp_str_of(r, in);
        int64_t words = 0;
        int in_word = 0;
        for (size_t i = 0; i < s.u.s->len;) {
            uint32_t cp = tp_utf8_next(s.u.s->s, s.u.s->len, &i);
            int w = cp == '_' || tp_isalpha(cp) || tp_isdigit(cp);
            if (w && !in_word) words++;
            in_word = w;
        }
        return tp_int(words);
    }
    case F_XMLATTR: {
        BIND("autospace");
        if (in.t != TV_DICT) tp_rfail(r, "xmlattr needs a mapping");
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        for (size_t i = 0; i < in.u.d->n; i++) {
            tv v = in.u.d->v[i];
            if (v.t == TV_NONE || v.t == TV_UNDEF) continue;
            tv k = tp_str_of(r, in.u.d->k[i]);
            if (strpbrk(k.u.s->s, " \t\n\r\f\v/>=")) tp_rfail(r, "invalid character in attribute name: '%s'", k.u.s->s);
            if (b.n || tp_truthy(or_default(p[0], tp_bool(1)))) tp_buf_putc(r, &b, ' ');
            tv ek = tp_escape(r, k), ev = tp_escape(r, v);
            tp_buf_printf(r, &b, "%s=\"", ek.u.s->s);
            tp_buf_put(r, &b, ev.u.s->s, ev.u.s->len);
            tp_buf_putc(r, &b, '"');
        }
        return tp_buf_str(r, &b);
    }
    case F_RANDOM: case F_URLIZE: case F_WORDWRAP:
        tp_rfail(r, "this filter is not supported by this engine");
    default: tp_rfail(r, "internal error: filter %d", id);
    }
}

/* ---- tests ----------------------------------------------------------------------------- */
static int str_is_cased(tp_render *r, tv v, int upper) {
    tv s = tp_str_of(r, v);
    int cased = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t cp = tp_utf8_next(s.u.s->s, s.u.s->len, &i);
        if (!tp_iscased(cp)) continue;
        if (upper ? tp_tolower(cp) == cp && tp_toupper(cp) != cp : tp_toupper(cp) == cp && tp_tolower(cp) != cp) return 0;
        cased = 1;
    }
    return cased;
}

int tp_apply_test(tp_render *r, int id, tv in, tp_args *a) {
    tv arg = {.t = TV_MISSING};
    static const char *const one[] = {"value"};
    if (a->n) tp_bind(r, r->what ? r->what : "test", a, 1, one, &arg);
    switch (id) {
    case T_ODD: case T_EVEN: {
        tv m = tp_binop(r, OP_MOD, in, tp_int(2));
        return tp_eq(m, tp_int(id == T_ODD ? 1 : 0));
    }
    case T_DIVISIBLEBY:
        if (!given(arg)) tp_rfail(r, "missing the divisor");
        return tp_eq(tp_binop(r, OP_MOD, in, arg), tp_int(0));
    case T_DEFINED: return in.t != TV_UNDEF;
    case T_UNDEFINED: return in.t == TV_UNDEF;
    case T_FILTER: return in.t == TV_STR && tp_filter_id(in.u.s->s) >= 0;
    case T_TEST: return in.t == TV_STR && tp_test_id(in.u.s->s) >= 0;
    case T_NONE: return in.t == TV_NONE;
    case T_BOOLEAN: return in.t == TV_BOOL;
    case T_FALSE: return in.t == TV_BOOL && !in.u.i;
    case T_TRUE: return in.t == TV_BOOL && in.u.i;
    case T_INTEGER: return in.t == TV_INT;
    case T_FLOAT: return in.t == TV_FLOAT;
    case T_LOWER: return str_is_cased(r, in, 0);
    case T_UPPER: return str_is_cased(r, in, 1);
    case T_STRING: return in.t == TV_STR;
    case T_MAPPING: return in.t == TV_DICT;
    case T_NUMBER: return is_num(in);
    case T_SEQUENCE: return in.t == TV_STR || (in.t == TV_LIST && !tp_is_view(in)) || in.t == TV_DICT || in.t == TV_UNDEF;
    case T_ITERABLE:
        return in.t == TV_STR || in.t == TV_LIST || in.t == TV_DICT || in.t == TV_UNDEF || in.t == TV_LOOP || in.t == TV_ITER;
    case T_CALLABLE:
        return in.t == TV_MACRO || in.t == TV_FUNC || in.t == TV_METHOD || in.t == TV_LOOP || in.t == TV_JOINER ||
               in.t == TV_UNDEF;   /* Undefined has __call__ (it raises) */
    case T_SAMEAS:
        if (in.t != arg.t) return 0;
        if (in.t == TV_NONE || in.t == TV_UNDEF) return 1;
        if (in.t == TV_BOOL || (in.t == TV_INT && in.u.i >= -5 && in.u.i <= 256)) return in.u.i == arg.u.i;
        return in.t != TV_INT && in.t != TV_FLOAT && in.u.s == arg.u.s;
    case T_ESCAPED: return tp_is_markup(in);
    case T_IN: return tp_contains(r, arg, in);
    case T_EQ1: case T_EQ: case T_EQUALTO: return tp_eq(in, arg);
    case T_NE1: case T_NE: return !tp_eq(in, arg);
    case T_GT1: case T_GT: case T_GREATERTHAN: return tp_cmp(r, in, arg, OP_GT);
    case T_GE: case T_GE1: return tp_cmp(r, in, arg, OP_GTEQ);
    case T_LT1: case T_LT: case T_LESSTHAN: return tp_cmp(r, in, arg, OP_LT);
    case T_LE1: case T_LE: return tp_cmp(r, in, arg, OP_LTEQ);
    default: tp_rfail(r, "internal error: test %d", id);
    }
}
