/* template_json.c — JSON in and out of template values: the render variables (jansson) become
 * values, and the tojson filter writes values as Python's json.dumps does, which is what
 * transformers installs as tojson (ensure_ascii off, ", " and ": " separators, or "," and
 * ": " with an indent, keys in insertion order unless sort_keys). Also pprint's layout.
 *
 * Does not own: which arguments tojson takes (template_filters.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

tv tp_from_json(tp_render *r, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tv d = tp_dict_new(r, json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            tp_dict *dd = d.u.d;
            dd->k[dd->n] = tp_str_c(r, key);
            dd->v[dd->n++] = tp_from_json(r, val);
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tv l = tp_list_new(r, n);
        for (size_t i = 0; i < n; i++) l.u.l->v[i] = tp_from_json(r, json_array_get(j, i));
        l.u.l->n = n;
        return l;
    }
    case JSON_STRING: return tp_str_n(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return tp_int((int64_t)json_integer_value(j));
    case JSON_REAL: return tp_float(json_real_value(j));
    case JSON_TRUE: return tp_bool(1);
    case JSON_FALSE: return tp_bool(0);
    default: return tp_none();
    }
}

static void dump_str(tp_render *r, tp_buf *b, const char *s, size_t n, int ensure_ascii) {
    tp_buf_putc(r, b, '"');
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = tp_utf8_next(s, n, &i);
        switch (cp) {
        case '"': tp_buf_put(r, b, "\\\"", 2); continue;
        case '\\': tp_buf_put(r, b, "\\\\", 2); continue;
        case '\n': tp_buf_put(r, b, "\\n", 2); continue;
        case '\r': tp_buf_put(r, b, "\\r", 2); continue;
        case '\t': tp_buf_put(r, b, "\\t", 2); continue;
        case '\b': tp_buf_put(r, b, "\\b", 2); continue;
        case '\f': tp_buf_put(r, b, "\\f", 2); continue;
        default: break;
        }
        if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                tp_buf_printf(r, b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                tp_buf_printf(r, b, "\\u%04x", cp);
            }
            continue;
        }
        tp_buf_put(r, b, s + start, i - start);
    }
    tp_buf_putc(r, b, '"');
}

static void dump_float(tp_render *r, tp_buf *b, double f) {
    char tmp[40];
    if (f != f) strcpy(tmp, "NaN");
    else if (isinf(f)) strcpy(tmp, f < 0 ? "-Infinity" : "Infinity");
    else tp_float_repr(f, tmp);
    tp_buf_put(r, b, tmp, strlen(tmp));
}

static void newline_indent(tp_render *r, tp_buf *b, const char *indent, int level) {
    tp_buf_putc(r, b, '\n');
    size_t n = strlen(indent);
    for (int i = 0; i < level; i++) tp_buf_put(r, b, indent, n);
}

/* A dict key as json.dumps converts it: str as is, numbers and constants as their JSON. */
static void dump_key(tp_render *r, tp_buf *b, tv k, int ensure_ascii) {
    char tmp[40];
    switch (k.t) {
    case TV_STR: dump_str(r, b, k.u.s->s, k.u.s->len, ensure_ascii); return;
    case TV_BOOL: tp_buf_put(r, b, k.u.i ? "\"true\"" : "\"false\"", k.u.i ? 6 : 7); return;
    case TV_INT: tp_buf_printf(r, b, "\"%lld\"", (long long)k.u.i); return;
    case TV_NONE: tp_buf_put(r, b, "\"null\"", 6); return;
    case TV_FLOAT:
        if (k.u.f != k.u.f) strcpy(tmp, "NaN");
        else if (isinf(k.u.f)) strcpy(tmp, k.u.f < 0 ? "-Infinity" : "Infinity");
        else tp_float_repr(k.u.f, tmp);
        tp_buf_printf(r, b, "\"%s\"", tmp);
        return;
    default: tp_rfail(r, "keys must be str, int, float, bool or None, not %s", tp_type_name(k));
    }
}

static int key_order(const void *pa, const void *pb) {
    const tv *a = pa, *b = pb;
    size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
    int c = memcmp(a->u.s->s, b->u.s->s, n);
    if (c) return c;
    return (a->u.s->len > b->u.s->len) - (a->u.s->len < b->u.s->len);
}

void tp_json_dump(tp_render *r, tp_buf *b, tv v, const char *indent, const char *item_sep,
                  const char *key_sep, int sort_keys, int ensure_ascii, int level) {
    if (level > r->max_depth) tp_rfail(r, "value nests too deeply for JSON");
    tp_step(r);
    switch (v.t) {
    case TV_NONE: tp_buf_put(r, b, "null", 4); return;
    case TV_BOOL: tp_buf_put(r, b, v.u.i ? "true" : "false", v.u.i ? 4 : 5); return;
    case TV_INT: tp_buf_printf(r, b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT: dump_float(r, b, v.u.f); return;
    case TV_STR: dump_str(r, b, v.u.s->s, v.u.s->len, ensure_ascii); return;
    case TV_LIST:
        if (tp_is_view(v)) tp_rfail(r, "Object of type %s is not JSON serializable", tp_type_name(v));
        if (!v.u.l->n) { tp_buf_put(r, b, "[]", 2); return; }
        tp_buf_putc(r, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tp_buf_put(r, b, item_sep, strlen(item_sep));
            if (indent) newline_indent(r, b, indent, level + 1);
            tp_json_dump(r, b, v.u.l->v[i], indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) newline_indent(r, b, indent, level);
        tp_buf_putc(r, b, ']');
        return;
    case TV_DICT: {
        size_t n = v.u.d->n;
        if (!n) { tp_buf_put(r, b, "{}", 2); return; }
        size_t *order = tp_alloc(&r->ar, n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (sort_keys) {
            /* sorted(dct.items()): string keys by code point (UTF-8 byte order is the same) */
            tv *keys = tp_alloc(&r->ar, n * sizeof *keys);
            for (size_t i = 0; i < n; i++) {
                if (v.u.d->k[i].t != TV_STR) tp_rfail(r, "sort_keys supports string keys only here");
                keys[i] = v.u.d->k[i];
            }
            qsort(keys, n, sizeof *keys, key_order);
            for (size_t i = 0; i < n; i++)
                for (size_t k = 0; k < n; k++)
                    if (v.u.d->k[k].u.s == keys[i].u.s) { order[i] = k; break; }
        }
        tp_buf_putc(r, b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) tp_buf_put(r, b, item_sep, strlen(item_sep));
            if (indent) newline_indent(r, b, indent, level + 1);
            dump_key(r, b, v.u.d->k[order[i]], ensure_ascii);
            tp_buf_put(r, b, key_sep, strlen(key_sep));
            tp_json_dump(r, b, v.u.d->v[order[i]], indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent) newline_indent(r, b, indent, level);
        tp_buf_putc(r, b, '}');
        return;
    }
    default: tp_rfail(r, "Object of type %s is not JSON serializable", tp_type_name(v));
    }
}

/* ---- pprint (the pprint filter): Python's pprint.pformat, width 80, dicts sorted ------- */

/* Order of dict items for pprint: sorted keys when they compare (all strings or all numbers),
 * else insertion order. */
static size_t *pp_order(tp_render *r, const tp_dict *d) {
    size_t n = d->n, *ord = tp_alloc(&r->ar, (n + 1) * sizeof *ord);
    int all_str = 1, all_num = 1;
    for (size_t i = 0; i < n; i++) {
        ord[i] = i;
        all_str &= d->k[i].t == TV_STR;
        all_num &= d->k[i].t == TV_INT || d->k[i].t == TV_BOOL || d->k[i].t == TV_FLOAT;
    }
    if (!all_str && !all_num) return ord;
    for (size_t i = 1; i < n; i++)   /* insertion sort: stable, and n is small */
        for (size_t j = i; j > 0 && tp_cmp(r, d->k[ord[j]], d->k[ord[j - 1]], OP_LT); j--) {
            size_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    return ord;
}

static void pp_repr(tp_render *r, tp_buf *b, tv v, int depth) {
    if (depth > r->max_depth) tp_rfail(r, "value nests too deeply to print");
    if (v.t == TV_DICT) {
        size_t *ord = pp_order(r, v.u.d);
        tp_buf_putc(r, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) tp_buf_put(r, b, ", ", 2);
            pp_repr(r, b, v.u.d->k[ord[i]], depth + 1);
            tp_buf_put(r, b, ": ", 2);
            pp_repr(r, b, v.u.d->v[ord[i]], depth + 1);
        }
        tp_buf_putc(r, b, '}');
    } else if (v.t == TV_LIST && (v.sub == SEQ_LIST || v.sub == SEQ_TUPLE)) {
        tp_buf_putc(r, b, v.sub ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tp_buf_put(r, b, ", ", 2);
            pp_repr(r, b, v.u.l->v[i], depth + 1);
        }
        if (v.sub && v.u.l->n == 1) tp_buf_putc(r, b, ',');
        tp_buf_putc(r, b, v.sub ? ')' : ']');
    } else {
        tp_repr(r, b, v);
    }
}

static int64_t cps(const char *s, size_t n) { return (int64_t)tp_utf8_count(s, n); }

static void pp_format(tp_render *r, tp_buf *b, tv v, int64_t indent, int64_t allowance, int level);

static void pp_items(tp_render *r, tp_buf *b, const tv *items, size_t n, int64_t indent, int64_t allowance, int level) {
    indent += 1;
    for (size_t i = 0; i < n; i++) {
        if (i) {
            tp_buf_put(r, b, ",\n", 2);
            for (int64_t k = 0; k < indent; k++) tp_buf_putc(r, b, ' ');
        }
        pp_format(r, b, items[i], indent, i + 1 == n ? allowance : 1, level);
    }
}

static void pp_str(tp_render *r, tp_buf *b, tv v, int64_t indent, int64_t allowance, int level, const char *rep, size_t replen) {
    tp_args none = {0};
    tp_method m = {v, "splitlines"};
    tv keep = tp_bool(1);
    none.n = 1;
    none.v = &keep;
    none.kw = (const char *[]){NULL};
    tv lines = tp_call_method(r, &m, &none);
    if (level == 1) { indent += 1; allowance += 1; }
    int64_t max1 = 80 - indent, max2base = 80 - indent;
    tv chunks = tp_list_new(r, 0);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        tv line = lines.u.l->v[i];
        tp_buf rb = {0};
        tp_repr(r, &rb, line);
        if (i + 1 == lines.u.l->n) max1 -= allowance;
        if (cps(rb.p, rb.n) <= max1) { tp_list_push(r, &chunks, tp_buf_str(r, &rb)); continue; }
        /* split into (non-space, space) runs and pack them */
        const char *s = line.u.s->s;
        size_t n = line.u.s->len, cur0 = 0, cur1 = 0, p = 0;
        int64_t max2 = max2base;
        while (p < n) {
            size_t q = p;
            while (q < n) { size_t j = q; if (tp_isspace(tp_utf8_next(s, n, &j))) break; q = j; }
            while (q < n) { size_t j = q; if (!tp_isspace(tp_utf8_next(s, n, &j))) break; q = j; }
            if (q >= n && i + 1 == lines.u.l->n) max2 -= allowance;
            tp_buf cb = {0};
            tp_repr(r, &cb, tp_str_n(r, s + cur0, q - cur0));
            if (cps(cb.p, cb.n) > max2) {
                if (cur1 > cur0) {
                    tp_buf pb = {0};
                    tp_repr(r, &pb, tp_str_n(r, s + cur0, cur1 - cur0));
                    tp_list_push(r, &chunks, tp_buf_str(r, &pb));
                }
                cur0 = p;
            }
            cur1 = q;
            p = q;
        }
        if (cur1 > cur0) {
            tp_buf pb = {0};
            tp_repr(r, &pb, tp_str_n(r, s + cur0, cur1 - cur0));
            tp_list_push(r, &chunks, tp_buf_str(r, &pb));
        }
    }
    if (chunks.u.l->n <= 1) {
        tp_buf_put(r, b, rep, replen);
        return;
    }
    if (level == 1) tp_buf_putc(r, b, '(');
    for (size_t i = 0; i < chunks.u.l->n; i++) {
        if (i) {
            tp_buf_putc(r, b, '\n');
            for (int64_t k = 0; k < indent; k++) tp_buf_putc(r, b, ' ');
        }
        tp_buf_put(r, b, chunks.u.l->v[i].u.s->s, chunks.u.l->v[i].u.s->len);
    }
    if (level == 1) tp_buf_putc(r, b, ')');
}

/* PrettyPrinter._format: the repr when it fits in what is left of the line, else the
 * container's items one per line. */
static void pp_format(tp_render *r, tp_buf *b, tv v, int64_t indent, int64_t allowance, int level) {
    if (level > r->max_depth) tp_rfail(r, "value nests too deeply to print");
    tp_step(r);
    tp_buf rb = {0};
    pp_repr(r, &rb, v, 0);
    if (cps(rb.p, rb.n) <= 80 - indent - allowance) {
        tp_buf_put(r, b, rb.p, rb.n);
        return;
    }
    if (v.t == TV_DICT) {
        size_t *ord = pp_order(r, v.u.d);
        tp_buf_putc(r, b, '{');
        int64_t in = indent + 1;
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) {
                tp_buf_put(r, b, ",\n", 2);
                for (int64_t k = 0; k < in; k++) tp_buf_putc(r, b, ' ');
            }
            tp_buf kb = {0};
            pp_repr(r, &kb, v.u.d->k[ord[i]], 0);
            tp_buf_put(r, b, kb.p, kb.n);
            tp_buf_put(r, b, ": ", 2);
            pp_format(r, b, v.u.d->v[ord[i]], in + cps(kb.p, kb.n) + 2, i + 1 == v.u.d->n ? allowance + 1 : 1, level + 1);
        }
        tp_buf_putc(r, b, '}');
    } else if (v.t == TV_LIST && v.sub == SEQ_LIST) {
        tp_buf_putc(r, b, '[');
        pp_items(r, b, v.u.l->v, v.u.l->n, indent, allowance + 1, level + 1);
        tp_buf_putc(r, b, ']');
    } else if (v.t == TV_LIST && v.sub == SEQ_TUPLE) {
        const char *end = v.u.l->n == 1 ? ",)" : ")";
        tp_buf_putc(r, b, '(');
        pp_items(r, b, v.u.l->v, v.u.l->n, indent, allowance + (int64_t)strlen(end), level + 1);
        tp_buf_put(r, b, end, strlen(end));
    } else if (v.t == TV_STR && v.sub != STR_MARKUP && v.u.s->len) {
        pp_str(r, b, v, indent, allowance, level + 1, rb.p, rb.n);
    } else {
        tp_buf_put(r, b, rb.p, rb.n);
    }
}

tv tp_pprint(tp_render *r, tv v) {
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    pp_format(r, &b, v, 0, 0, 0);
    return tp_buf_str(r, &b);
}
