/* template_ops.c — Python's operators and access rules on template values: attribute and item
 * access as jinja2's sandbox does them, slicing, arithmetic, `in`, len(), iteration and
 * printf-style `%` formatting.
 *
 * Owns: the exact outcomes templates depend on (a missing key is an Undefined, an attribute of
 * an Undefined is an error, `//` and `%` round toward negative infinity, `/` always gives a
 * float, `'a' * 3`, list concatenation, string indexing by code point).
 * Does not own: methods and filters (template_methods.c, template_filters.c).
 *
 * Integers are 64-bit: where Python would grow a big integer the render fails with a message
 * instead.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

static int is_int(tv v) { return v.t == TV_INT || v.t == TV_BOOL; }
static int is_num(tv v) { return is_int(v) || v.t == TV_FLOAT; }
static double num_f(tv v) { return v.t == TV_FLOAT ? v.u.f : (double)v.u.i; }

/* ---- attribute and item access --------------------------------------------------------- */
tv tp_getattr(tp_render *r, tv obj, const char *name) {
    tv m;
    switch (obj.t) {
    case TV_UNDEF: tp_undef_fail(r, obj);
    case TV_DICT: case TV_NS: {
        if (obj.t == TV_DICT && tp_has_method(obj, name)) break;
        tv *p = tp_dict_find_c(obj.u.d, name);
        return p ? *p : tp_undef(name, obj.t);
    }
    case TV_LOOP: return tp_loop_attr(r, obj.u.lp, name);
    case TV_CYCLER:
        if (!strcmp(name, "current")) return obj.u.cy->items->v[obj.u.cy->pos];
        if (tp_has_method(obj, name)) break;
        return tp_undef(name, obj.t);
    case TV_LIST:
        if (obj.sub == SEQ_GROUP && (!strcmp(name, "grouper") || !strcmp(name, "list")))
            return obj.u.l->v[name[0] == 'l'];   /* groupby's (grouper, list) tuples */
        if (tp_has_method(obj, name)) break;
        return tp_undef(name, obj.t);
    default:
        if (tp_has_method(obj, name)) break;
        return tp_undef(name, obj.t);
    }
    tp_method *bm = tp_alloc(&r->ar, sizeof *bm);
    bm->self = obj;
    bm->name = name;
    m = (tv){.t = TV_METHOD};
    m.u.bm = bm;
    return m;
}

/* Code point i (may be negative) of a string, or -1 when out of range. */
static tv str_index(tp_render *r, tv s, int64_t i, int *ok) {
    int64_t n = (int64_t)tp_utf8_count(s.u.s->s, s.u.s->len);
    if (i < 0) i += n;
    *ok = i >= 0 && i < n;
    if (!*ok) return s;
    size_t p = 0;
    for (int64_t k = 0; k < i; k++) tp_utf8_next(s.u.s->s, s.u.s->len, &p);
    size_t q = p;
    tp_utf8_next(s.u.s->s, s.u.s->len, &q);
    tv c = tp_str_n(r, s.u.s->s + p, q - p);
    c.sub = s.sub;
    return c;
}

tv tp_getitem(tp_render *r, tv obj, tv key) {
    switch (obj.t) {
    case TV_UNDEF: tp_undef_fail(r, obj);
    case TV_DICT: {
        if (!tp_unhashable(key)) {
            tv *p = tp_dict_find(obj.u.d, key);
            if (p) return *p;
        }
        break;
    }
    case TV_LIST:
        if (is_int(key) && !tp_is_view(obj)) {
            int64_t i = key.u.i, n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.u.l->v[i];
        }
        break;
    case TV_STR:
        if (is_int(key)) {
            int ok;
            tv c = str_index(r, obj, key.u.i, &ok);
            if (ok) return c;
        }
        break;
    default: break;
    }
    if (key.t == TV_STR && obj.t != TV_UNDEF) {
        if (obj.t == TV_NS) {
            tv *p = tp_dict_find_c(obj.u.d, key.u.s->s);
            if (p) return *p;
        } else if (obj.t == TV_LOOP || obj.t == TV_CYCLER || (obj.t == TV_LIST && obj.sub == SEQ_GROUP) ||
                   tp_has_method(obj, key.u.s->s)) {
            return tp_getattr(r, obj, key.u.s->s);   /* jinja2's getitem falls back to getattr */
        }
        return tp_undef(key.u.s->s, obj.t);
    }
    return tp_undef(NULL, obj.t);
}

static int slice_index(tv v, int64_t *out) {
    if (!is_int(v)) return 0;
    *out = v.u.i;
    return 1;
}

/* Python's PySlice_AdjustIndices. */
static int slice_adjust(tp_render *r, int64_t len, tv start, tv stop, tv step, int64_t *a, int64_t *b, int64_t *st) {
    *st = 1;
    if (step.t != TV_NONE && !slice_index(step, st)) return 0;
    if (start.t != TV_NONE && start.t != TV_INT && start.t != TV_BOOL) return 0;
    if (stop.t != TV_NONE && stop.t != TV_INT && stop.t != TV_BOOL) return 0;
    if (*st == 0) tp_rfail(r, "slice step cannot be zero");
    if (*st == INT64_MIN) *st = -INT64_MAX;
    int64_t lo_def = *st < 0 ? len - 1 : 0, hi_def = *st < 0 ? -1 : len;
    tv ends[2] = {start, stop};
    int64_t *outs[2] = {a, b}, defs[2] = {lo_def, hi_def};
    for (int k = 0; k < 2; k++) {
        if (ends[k].t == TV_NONE) { *outs[k] = defs[k]; continue; }
        int64_t x;
        if (!slice_index(ends[k], &x)) return 0;
        if (x < 0) {
            x = x < -len ? (*st < 0 ? -1 : 0) : x + len;
        } else if (x >= len) {
            x = *st < 0 ? len - 1 : len;
        }
        *outs[k] = x;
    }
    return 1;
}

/* jinja2 compiles a slice to a plain Python subscript (not through the sandbox's getitem), so
 * slicing what is not a list, tuple or string is an error, not an Undefined. */
tv tp_slice(tp_render *r, tv obj, tv start, tv stop, tv step, int soft) {
    int64_t a, b, st;
    if (obj.t == TV_UNDEF) tp_undef_fail(r, obj);
    if (soft && ((obj.t != TV_LIST && obj.t != TV_STR) || tp_is_view(obj))) return tp_undef(NULL, obj.t);
    if (obj.t == TV_DICT) tp_rfail(r, "unhashable type: 'slice'");
    if ((obj.t != TV_LIST && obj.t != TV_STR) || tp_is_view(obj))
        tp_rfail(r, "'%s' object is not subscriptable", tp_type_name(obj));
    if (obj.t == TV_LIST && !tp_is_view(obj)) {
        if (!slice_adjust(r, (int64_t)obj.u.l->n, start, stop, step, &a, &b, &st)) {
            if (soft) return tp_undef(NULL, obj.t);
            tp_rfail(r, "slice indices must be integers or None or have an __index__ method");
        }
        tv out = tp_list_new(r, 0);
        out.sub = tp_is_tuple(obj) ? SEQ_TUPLE : SEQ_LIST;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) tp_list_push(r, &out, obj.u.l->v[i]);
        return out;
    }
    if (obj.t == TV_STR) {
        const char *s = obj.u.s->s;
        size_t n = obj.u.s->len;
        int64_t len = (int64_t)tp_utf8_count(s, n);
        if (!slice_adjust(r, len, start, stop, step, &a, &b, &st)) {
            if (soft) return tp_undef(NULL, obj.t);
            tp_rfail(r, "slice indices must be integers or None or have an __index__ method");
        }
        size_t *off = tp_alloc(&r->ar, ((size_t)len + 1) * sizeof *off);
        for (size_t p = 0, k = 0; k <= (size_t)len; k++) {
            off[k] = p;
            if (p < n) tp_utf8_next(s, n, &p);
        }
        tp_buf buf = {0};
        tp_buf_put(r, &buf, "", 0);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) tp_buf_put(r, &buf, s + off[i], off[i + 1] - off[i]);
        tv out = tp_buf_str(r, &buf);
        out.sub = obj.sub;
        return out;
    }
    return tp_undef(NULL, obj.t);
}

/* ---- len, iteration, membership -------------------------------------------------------- */
int64_t tp_len(tp_render *r, tv v) {
    switch (v.t) {
    case TV_ITER: tp_rfail(r, "object of type '%s' has no len()", v.u.it->kind);
    case TV_UNDEF: return 0;
    case TV_STR: return (int64_t)tp_utf8_count(v.u.s->s, v.u.s->len);
    case TV_LIST: return (int64_t)v.u.l->n;
    case TV_DICT: return (int64_t)v.u.d->n;
    default: tp_rfail(r, "object of type '%s' has no len()", tp_type_name(v));
    }
}

tv tp_iter_new(tp_render *r, tv list, const char *kind) {
    tp_iter *it = tp_alloc(&r->ar, sizeof *it);
    it->items = list.u.l;
    it->kind = kind;
    tv v = {.t = TV_ITER};
    v.u.it = it;
    return v;
}

tv tp_iter_list(tp_render *r, tv v) {
    switch (v.t) {
    case TV_LIST: return v;
    case TV_ITER: {  /* consumes what is left */
        tp_iter *it = v.u.it;
        tv l = tp_list_new(r, 0);
        l.u.l->v = it->items->n ? it->items->v + it->pos : NULL;
        l.u.l->n = l.u.l->cap = it->items->n - it->pos;
        it->pos = it->items->n;
        return l;
    }
    case TV_UNDEF: return tp_list_new(r, 0);
    case TV_DICT: {
        tv l = tp_list_new(r, v.u.d->n);
        if (v.u.d->n) memcpy(l.u.l->v, v.u.d->k, v.u.d->n * sizeof(tv));
        l.u.l->n = v.u.d->n;
        return l;
    }
    case TV_STR: {
        tv l = tp_list_new(r, v.u.s->len);
        for (size_t i = 0; i < v.u.s->len;) {
            size_t j = i;
            tp_utf8_next(v.u.s->s, v.u.s->len, &j);
            tp_list_push(r, &l, tp_str_n(r, v.u.s->s + i, j - i));
            i = j;
        }
        return l;
    }
    default: tp_rfail(r, "'%s' object is not iterable", tp_type_name(v));
    }
}

int tp_contains(tp_render *r, tv c, tv item) {
    switch (c.t) {
    case TV_UNDEF: return 0;
    case TV_STR:
        if (item.t != TV_STR) tp_rfail(r, "'in <string>' requires string as left operand, not %s", tp_type_name(item));
        return item.u.s->len == 0 || memmem(c.u.s->s, c.u.s->len, item.u.s->s, item.u.s->len) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < c.u.l->n; i++)
            if (tp_eq(c.u.l->v[i], item)) return 1;
        return 0;
    case TV_ITER:  /* consumes up to the match */
        while (c.u.it->pos < c.u.it->items->n)
            if (tp_eq(c.u.it->items->v[c.u.it->pos++], item)) return 1;
        return 0;
    case TV_DICT:
        if (tp_unhashable(item)) tp_rfail(r, "unhashable type: '%s'", tp_type_name(item));
        return tp_dict_find(c.u.d, item) != NULL;
    default: tp_rfail(r, "argument of type '%s' is not iterable", tp_type_name(c));
    }
}

/* ---- arithmetic ------------------------------------------------------------------------ */
__attribute__((noreturn)) static void overflow(tp_render *r) {
    tp_rfail(r, "integer overflow (this engine's integers are 64-bit)");
}

__attribute__((noreturn)) static void unsupported(tp_render *r, int op, tv a, tv b) {
    tp_rfail(r, "unsupported operand type(s) for %s: '%s' and '%s'", tp_op_text(op), tp_type_name(a), tp_type_name(b));
}

static tv repeat(tp_render *r, tv seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == TV_STR) {
        if (times && seq.u.s->len > r->max_output / (uint64_t)times) tp_rfail(r, "repeated string exceeds the output limit");
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        for (int64_t i = 0; i < times; i++) tp_buf_put(r, &b, seq.u.s->s, seq.u.s->len);
        tv out = tp_buf_str(r, &b);
        out.sub = seq.sub;
        return out;
    }
    if (times && seq.u.l->n > (r->max_output / sizeof(tv)) / (uint64_t)times) tp_rfail(r, "repeated list is too large");
    tv out = tp_list_new(r, seq.u.l->n * (size_t)times);
    out.sub = tp_is_tuple(seq) ? SEQ_TUPLE : SEQ_LIST;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) tp_list_push(r, &out, seq.u.l->v[k]);
    return out;
}

/* Python's float floor division and modulo (float_divmod). */
static void float_divmod(double vx, double wx, double *fdiv, double *fmod_out) {
    double mod = fmod(vx, wx), div = (vx - mod) / wx;
    if (mod) {
        if ((wx < 0) != (mod < 0)) { mod += wx; div -= 1.0; }
    } else {
        mod = copysign(0.0, wx);
    }
    double floordiv;
    if (div) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, vx / wx);
    }
    *fdiv = floordiv;
    *fmod_out = mod;
}

static tv int_pow(tp_render *r, int64_t base, int64_t e) {
    if (e < 0) {
        if (base == 0) tp_rfail(r, "0.0 cannot be raised to a negative power");
        return tp_float(pow((double)base, (double)e));
    }
    int64_t result = 1;
    while (e > 0) {
        if (e & 1 && __builtin_mul_overflow(result, base, &result)) overflow(r);
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) {
            if (result == 0) break;
            overflow(r);
        }
    }
    return tp_int(result);
}

tv tp_binop(tp_render *r, int op, tv a, tv b) {
    if (op == OP_MOD && a.t == TV_STR) return tp_percent_format(r, a, b);   /* str % Undefined works */
    if (a.t == TV_UNDEF) tp_undef_fail(r, a);
    if (b.t == TV_UNDEF) tp_undef_fail(r, b);
    if (!is_num(a) || !is_num(b)) {
        if (op == OP_ADD) {
            if (a.t == TV_STR && b.t == TV_STR) {
                /* Markup + str (either side) escapes the plain string; the result is Markup */
                int markup = tp_is_markup(a) || tp_is_markup(b);
                if (markup) {
                    a = tp_escape(r, a);
                    b = tp_escape(r, b);
                }
                tp_buf buf = {0};
                tp_buf_put(r, &buf, a.u.s->s, a.u.s->len);
                tp_buf_put(r, &buf, b.u.s->s, b.u.s->len);
                tv out = tp_buf_str(r, &buf);
                out.sub = markup ? STR_MARKUP : 0;
                return out;
            }
            if (a.t == TV_LIST && b.t == TV_LIST && !tp_is_view(a) && tp_is_tuple(a) == tp_is_tuple(b)) {
                tv out = tp_list_new(r, a.u.l->n + b.u.l->n);
                out.sub = tp_is_tuple(a) ? SEQ_TUPLE : SEQ_LIST;
                if (a.u.l->n) memcpy(out.u.l->v, a.u.l->v, a.u.l->n * sizeof(tv));
                if (b.u.l->n) memcpy(out.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(tv));
                out.u.l->n = a.u.l->n + b.u.l->n;
                return out;
            }
            if (a.t == TV_STR) tp_rfail(r, "can only concatenate str (not \"%s\") to str", tp_type_name(b));
            if (a.t == TV_LIST) tp_rfail(r, "can only concatenate %s (not \"%s\") to %s", tp_type_name(a), tp_type_name(b), tp_type_name(a));
        }
        if (op == OP_MUL) {
            if ((a.t == TV_STR || (a.t == TV_LIST && !tp_is_view(a))) && is_int(b)) return repeat(r, a, b.u.i);
            if ((b.t == TV_STR || (b.t == TV_LIST && !tp_is_view(b))) && is_int(a)) return repeat(r, b, a.u.i);
            if (a.t == TV_STR || a.t == TV_LIST || b.t == TV_STR || b.t == TV_LIST)
                tp_rfail(r, "can't multiply sequence by non-int of type '%s'", tp_type_name(a.t == TV_STR || a.t == TV_LIST ? b : a));
        }
        unsupported(r, op, a, b);
    }
    int both_int = is_int(a) && is_int(b);
    int64_t x = a.u.i, y = b.u.i, z;
    double fx = num_f(a), fy = num_f(b), q, m;
    switch (op) {
    case OP_ADD:
        if (!both_int) return tp_float(fx + fy);
        if (__builtin_add_overflow(x, y, &z)) overflow(r);
        return tp_int(z);
    case OP_SUB:
        if (!both_int) return tp_float(fx - fy);
        if (__builtin_sub_overflow(x, y, &z)) overflow(r);
        return tp_int(z);
    case OP_MUL:
        if (!both_int) return tp_float(fx * fy);
        if (__builtin_mul_overflow(x, y, &z)) overflow(r);
        return tp_int(z);
    case OP_DIV:
        if (fy == 0) tp_rfail(r, "division by zero");
        return tp_float(fx / fy);
    case OP_FDIV: case OP_MOD:
        if (both_int) {
            if (y == 0) tp_rfail(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_FDIV) overflow(r);
                return tp_int(0);
            }
            int64_t qq = x / y, mm = x % y;
            if (mm && ((mm < 0) != (y < 0))) { mm += y; qq -= 1; }
            return tp_int(op == OP_FDIV ? qq : mm);
        }
        if (fy == 0) tp_rfail(r, op == OP_FDIV ? "float floor division by zero" : "float modulo");
        float_divmod(fx, fy, &q, &m);
        return tp_float(op == OP_FDIV ? q : m);
    case OP_POW:
        if (both_int) return int_pow(r, x, y);
        if (fx == 0 && fy < 0) tp_rfail(r, "0.0 cannot be raised to a negative power");
        if (fx < 0 && fy != floor(fy)) tp_rfail(r, "a negative number to a fractional power is complex; not supported");
        double p = pow(fx, fy);
        if (isinf(p) && isfinite(fx) && isfinite(fy)) tp_rfail(r, "(34, 'Numerical result out of range')");
        return tp_float(p);
    default: unsupported(r, op, a, b);
    }
}

/* ---- printf-style formatting: str % args ----------------------------------------------- */
static tv fmt_arg(tp_render *r, tv args, size_t *next, const char *key, size_t keylen) {
    if (key) {
        if (args.t != TV_DICT) tp_rfail(r, "format requires a mapping");
        tv k = tp_str_n(r, key, keylen);
        tv *p = tp_dict_find(args.u.d, k);
        if (!p) tp_rfail(r, "format: key '%.*s' not found", (int)keylen, key);
        return *p;
    }
    if (tp_is_tuple(args)) {
        if (*next >= args.u.l->n) tp_rfail(r, "not enough arguments for format string");
        return args.u.l->v[(*next)++];
    }
    if (*next > 0) tp_rfail(r, "not enough arguments for format string");
    (*next)++;
    return args;
}

/* A width or precision: '*' (taken from the arguments) or digits; none when absent. */
static int fmt_number(tp_render *r, const char *s, size_t n, size_t *i, tv args, size_t *next, int none) {
    if (*i < n && s[*i] == '*') {
        tv w = fmt_arg(r, args, next, NULL, 0);
        if (!is_int(w)) tp_rfail(r, "* wants int");
        (*i)++;
        if (w.u.i < -100000 || w.u.i > 100000) tp_rfail(r, "format width too big");
        return (int)w.u.i;
    }
    int v = none;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (s[(*i)++] - '0');
        if (v > 100000) tp_rfail(r, "format width too big");
    }
    return v;
}

/* Pads s (UTF-8) to width code points, left-justified when minus. */
static void put_padded(tp_render *r, tp_buf *b, const char *s, size_t n, int width, int minus) {
    int64_t cps = (int64_t)tp_utf8_count(s, n);
    if (!minus) for (int64_t i = cps; i < width; i++) tp_buf_putc(r, b, ' ');
    tp_buf_put(r, b, s, n);
    if (minus) for (int64_t i = cps; i < width; i++) tp_buf_putc(r, b, ' ');
}

tv tp_percent_format(tp_render *r, tv fmtv, tv args) {
    const char *s = fmtv.u.s->s;
    size_t n = fmtv.u.s->len, next = 0;
    int used_mapping = 0;
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    for (size_t i = 0; i < n;) {
        if (s[i] != '%') { tp_buf_putc(r, &b, s[i++]); continue; }
        i++;
        const char *key = NULL;
        size_t keylen = 0;
        if (i < n && s[i] == '(') {
            size_t j = ++i;
            int depth = 1;
            while (i < n && depth) { if (s[i] == '(') depth++; else if (s[i] == ')') depth--; i++; }
            if (depth) tp_rfail(r, "incomplete format key");
            key = s + j;
            keylen = i - 1 - j;
            used_mapping = 1;
        }
        char flags[8];
        int nf = 0, width = -1, prec = -1;
        while (i < n && strchr("-+ #0", s[i]) && nf < 6) flags[nf++] = s[i++];
        flags[nf] = 0;
        width = fmt_number(r, s, n, &i, args, &next, -1);
        if (i < n && s[i] == '.') {
            i++;
            prec = fmt_number(r, s, n, &i, args, &next, 0);
        }
        while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= n) tp_rfail(r, "incomplete format");
        char conv = s[i++];
        if (conv == '%') { tp_buf_putc(r, &b, '%'); continue; }
        tv v = fmt_arg(r, args, &next, key, keylen);
        int minus = strchr(flags, '-') != NULL;
        char spec[32], out[512];
        switch (conv) {
        case 's': case 'r': case 'a': {
            tp_buf tmp = {0};
            if (conv == 's') tp_to_str(r, &tmp, v);
            else tp_repr(r, &tmp, v);
            if (tp_is_markup(fmtv) && !tp_is_markup(v)) {
                tv esc = tp_escape(r, tp_buf_str(r, &tmp));
                tmp = (tp_buf){esc.u.s->s, esc.u.s->len, esc.u.s->len + 1};
            }
            size_t len = tmp.n;
            if (prec >= 0) {  /* precision counts code points */
                size_t p = 0;
                for (int k = 0; k < prec && p < len; k++) tp_utf8_next(tmp.p, len, &p);
                len = p;
            }
            put_padded(r, &b, tmp.p ? tmp.p : "", len, width, minus);
            break;
        }
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
            int64_t iv;
            if (is_int(v)) iv = v.u.i;
            else if (v.t == TV_FLOAT && conv != 'x' && conv != 'X' && conv != 'o' && conv != 'c') {
                if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) tp_rfail(r, "cannot convert float to integer");
                iv = (int64_t)v.u.f;
            } else {
                tp_rfail(r, "%%%c format: a number is required, not %s", conv, tp_type_name(v));
            }
            if (conv == 'c') {
                char cb[4];
                if (iv < 0 || iv > 0x10FFFF) tp_rfail(r, "%%c arg not in range(0x110000)");
                if (iv >= 0xD800 && iv <= 0xDFFF) tp_rfail(r, "%%c of a lone surrogate cannot be rendered as UTF-8");
                int k = tp_utf8_put(cb, (uint32_t)iv);
                put_padded(r, &b, cb, (size_t)k, width, minus);
                break;
            }
            char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            if (prec >= 0) snprintf(spec, sizeof spec, "%%%s%s%d.%dll%c", flags, "", width < 0 ? 0 : width, prec, c);
            else snprintf(spec, sizeof spec, "%%%s%dll%c", flags, width < 0 ? 0 : width, c);
            int k = snprintf(out, sizeof out, spec, (long long)iv);
            if (strchr(flags, '#') && conv == 'o') {
                /* Python writes 0o17 where C writes 017 */
                char *z = strchr(out, '0');
                if (z && iv != 0) {
                    memmove(z + 1, z, strlen(z) + 1);
                    z[1] = 'o';
                    k++;
                }
            }
            tp_buf_put(r, &b, out, (size_t)k < sizeof out ? (size_t)k : sizeof out - 1);
            break;
        }
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
            if (!is_num(v)) tp_rfail(r, "must be real number, not %s", tp_type_name(v));
            snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, width < 0 ? 0 : width, prec < 0 ? 6 : prec, conv);
            int k = snprintf(out, sizeof out, spec, num_f(v));
            if (k < 0 || (size_t)k >= sizeof out) tp_rfail(r, "formatted number too long");
            tp_buf_put(r, &b, out, (size_t)k);
            break;
        }
        default: tp_rfail(r, "unsupported format character '%c'", conv);
        }
    }
    if (!used_mapping && tp_is_tuple(args) && next < args.u.l->n)
        tp_rfail(r, "not all arguments converted during string formatting");
    /* like Python: an argument with __getitem__ (dict, list, Undefined) may go unused */
    int mapping_like = args.t == TV_DICT || args.t == TV_UNDEF || (args.t == TV_LIST && !tp_is_tuple(args) && !tp_is_view(args));
    if (!used_mapping && !tp_is_tuple(args) && next == 0 && !mapping_like)
        tp_rfail(r, "not all arguments converted during string formatting");
    tv out = tp_buf_str(r, &b);
    out.sub = fmtv.sub;
    return out;
}
