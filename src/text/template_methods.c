/* template_methods.c — Python methods templates call on values (str.strip, str.split,
 * dict.get, dict.items, ...), the loop object, and the global functions (range, namespace,
 * dict, cycler, joiner, raise_exception, strftime_now).
 *
 * Owns: each method's Python behaviour, indices counted in code points; the sandbox's
 * refusal of methods that modify a list or dict (jinja2's ImmutableSandboxedEnvironment);
 * range's 100000-item sandbox cap; strftime_now's clock.
 * Does not own: filters and tests (template_filters.c).
 *
 * Not reproduced: str.format's field attributes and indices ("{0.x}", "{0[1]}" fail with a
 * message); Unicode case mappings beyond the C library's simple ones and the few special
 * cases below.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/template_int.h"

static int given(tv v) { return v.t != TV_MISSING; }
static int is_int(tv v) { return v.t == TV_INT || v.t == TV_BOOL; }

static const char *const str_methods[] = {
    "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find", "format",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "upper", "zfill", NULL,
};
static const char *const dict_methods[] = {
    "get", "items", "keys", "values", "copy",
    "pop", "popitem", "setdefault", "update", "clear", NULL,   /* refused: they modify */
};
static const char *const list_methods[] = {
    "count", "index", "copy",
    "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL,
};
static const char *const cycler_methods[] = {"next", "reset", NULL};

static int in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name)) return 1;
    return 0;
}

int tp_has_method(tv self, const char *name) {
    if (name[0] == '_') return 0;
    switch (self.t) {
    case TV_STR: return in_list(str_methods, name);
    case TV_DICT: return in_list(dict_methods, name);
    case TV_LIST:
        if (tp_is_view(self)) return 0;
        return tp_is_tuple(self) ? !strcmp(name, "count") || !strcmp(name, "index") : in_list(list_methods, name);
    case TV_CYCLER: return in_list(cycler_methods, name);
    default: return 0;
    }
}

/* ---- string helpers -------------------------------------------------------------------- */
typedef struct { const char *s; size_t n; } sv;

static sv S(tv v) { return (sv){v.u.s->s, v.u.s->len}; }

static tv want_str(tp_render *r, tv v, const char *what) {
    if (v.t != TV_STR) tp_rfail(r, "%s must be str, not %s", what, tp_type_name(v));
    return v;
}

/* Byte offset of code point index i (clamped), for start/end arguments. */
static size_t cp_offset(sv s, int64_t i) {
    size_t p = 0;
    for (int64_t k = 0; k < i && p < s.n; k++) tp_utf8_next(s.s, s.n, &p);
    return p;
}

/* Python's start/end slice arguments of find/count/startswith as a byte range. */
static void range_args(tp_render *r, sv s, tv start, tv end, size_t *b0, size_t *b1) {
    int64_t len = (int64_t)tp_utf8_count(s.s, s.n), a = 0, b = len;
    if (given(start) && start.t != TV_NONE) {
        if (!is_int(start)) tp_rfail(r, "slice indices must be integers or None");
        a = start.u.i < 0 ? start.u.i + len : start.u.i;
        if (a < 0) a = 0;
    }
    if (given(end) && end.t != TV_NONE) {
        if (!is_int(end)) tp_rfail(r, "slice indices must be integers or None");
        b = end.u.i < 0 ? end.u.i + len : end.u.i;
        if (b < 0) b = 0;
    }
    if (b > len) b = len;
    if (a > len) a = len + 1;   /* an empty range that even "" does not match */
    *b0 = a > len ? s.n + 1 : cp_offset(s, a);
    *b1 = cp_offset(s, b);
}

static tv sv_str(tp_render *r, sv s) { return tp_str_n(r, s.s, s.n); }

static int chars_has(sv chars, uint32_t cp) {
    for (size_t i = 0; i < chars.n;)
        if (tp_utf8_next(chars.s, chars.n, &i) == cp) return 1;
    return 0;
}

static int strip_match(const sv *chars, uint32_t cp) { return chars ? chars_has(*chars, cp) : tp_isspace(cp); }

static tv do_strip(tp_render *r, sv s, tv chars_v, int left, int right) {
    sv chars, *cp = NULL;
    if (given(chars_v) && chars_v.t != TV_NONE) {
        chars = S(want_str(r, chars_v, "strip arg"));
        cp = &chars;
    }
    size_t a = 0, b = s.n;
    while (left && a < b) {
        size_t j = a;
        if (!strip_match(cp, tp_utf8_next(s.s, s.n, &j))) break;
        a = j;
    }
    while (right && b > a) {
        size_t p = tp_utf8_prev(s.s, b), j = p;
        if (!strip_match(cp, tp_utf8_next(s.s, s.n, &j))) break;
        b = p;
    }
    return tp_str_n(r, s.s + a, b - a);
}

/* The common one-to-many mappings of Unicode's SpecialCasing that Python applies: upper and
 * title case of ß and the Latin ligatures, lower case of İ. */
static const struct { uint32_t cp; const char *upper, *title; } special_upper[] = {
    {0xDF, "SS", "Ss"}, {0xFB00, "FF", "Ff"}, {0xFB01, "FI", "Fi"}, {0xFB02, "FL", "Fl"},
    {0xFB03, "FFI", "Ffi"}, {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"}, {0xFB06, "ST", "St"},
};

static void put_case(tp_render *r, tp_buf *b, uint32_t cp, int to_upper, int title) {
    char tmp[4];
    if (to_upper) {
        for (size_t k = 0; k < sizeof special_upper / sizeof special_upper[0]; k++)
            if (special_upper[k].cp == cp) {
                const char *x = title ? special_upper[k].title : special_upper[k].upper;
                tp_buf_put(r, b, x, strlen(x));
                return;
            }
        cp = tp_toupper(cp);
    } else {
        if (cp == 0x130) { tp_buf_put(r, b, "i\xcc\x87", 3); return; }
        cp = tp_tolower(cp);
    }
    tp_buf_put(r, b, tmp, (size_t)tp_utf8_put(tmp, cp));
}

static tv case_map(tp_render *r, sv s, int mode) {  /* 0 lower, 1 upper, 2 swap, 3 title, 4 capitalize */
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp = tp_utf8_next(s.s, s.n, &i);
        switch (mode) {
        case 0: put_case(r, &b, cp, 0, 0); break;
        case 1: put_case(r, &b, cp, 1, 0); break;
        case 2: put_case(r, &b, cp, tp_tolower(cp) == cp && (tp_toupper(cp) != cp || cp == 0xDF), 0); break;
        case 3: put_case(r, &b, cp, !prev_cased, 1); prev_cased = tp_iscased(cp) || cp == 0xDF; break;
        default: put_case(r, &b, cp, first, 1); break;
        }
        first = 0;
    }
    return tp_buf_str(r, &b);
}

static const char *find_sub(sv hay, size_t from, size_t to, sv needle, int reverse) {
    if (from > to || to > hay.n || needle.n > to - from) return NULL;
    if (!reverse) return memmem(hay.s + from, to - from, needle.s, needle.n);
    for (size_t p = to - needle.n + 1; p-- > from;)
        if (!memcmp(hay.s + p, needle.s, needle.n)) return hay.s + p;
    return NULL;
}

static int is_linebreak(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* str.split / str.rsplit */
static tv do_split(tp_render *r, sv s, tv sep_v, tv max_v, int reverse) {
    int64_t maxsplit = given(max_v) ? (is_int(max_v) ? max_v.u.i : (tp_rfail(r, "maxsplit must be an integer"), 0)) : -1;
    tv out = tp_list_new(r, 0);
    if (!given(sep_v) || sep_v.t == TV_NONE) {
        /* runs of whitespace; the unsplit remainder keeps its inner and far-end whitespace */
        if (!reverse) {
            size_t i = 0;
            for (;;) {
                while (i < s.n) { size_t j = i; if (!tp_isspace(tp_utf8_next(s.s, s.n, &j))) break; i = j; }
                if (i >= s.n) break;
                if (maxsplit == 0) {
                    tp_list_push(r, &out, tp_str_n(r, s.s + i, s.n - i));
                    break;
                }
                size_t start = i;
                while (i < s.n) { size_t j = i; if (tp_isspace(tp_utf8_next(s.s, s.n, &j))) break; i = j; }
                tp_list_push(r, &out, tp_str_n(r, s.s + start, i - start));
                if (maxsplit > 0) maxsplit--;
            }
            return out;
        }
        size_t i = s.n;
        tv rev = tp_list_new(r, 0);
        for (;;) {
            while (i > 0) { size_t p = tp_utf8_prev(s.s, i), j = p; if (!tp_isspace(tp_utf8_next(s.s, s.n, &j))) break; i = p; }
            if (i == 0) break;
            if (maxsplit == 0) {
                tp_list_push(r, &rev, tp_str_n(r, s.s, i));
                break;
            }
            size_t end = i;
            while (i > 0) { size_t p = tp_utf8_prev(s.s, i), j = p; if (tp_isspace(tp_utf8_next(s.s, s.n, &j))) break; i = p; }
            tp_list_push(r, &rev, tp_str_n(r, s.s + i, end - i));
            if (maxsplit > 0) maxsplit--;
        }
        for (size_t k = rev.u.l->n; k-- > 0;) tp_list_push(r, &out, rev.u.l->v[k]);
        return out;
    }
    sv sep = S(want_str(r, sep_v, "separator"));
    if (!sep.n) tp_rfail(r, "empty separator");
    if (!reverse) {
        size_t i = 0;
        for (;;) {
            const char *hit = maxsplit == 0 ? NULL : find_sub(s, i, s.n, sep, 0);
            if (!hit) { tp_list_push(r, &out, tp_str_n(r, s.s + i, s.n - i)); break; }
            tp_list_push(r, &out, tp_str_n(r, s.s + i, (size_t)(hit - s.s) - i));
            i = (size_t)(hit - s.s) + sep.n;
            if (maxsplit > 0) maxsplit--;
        }
        return out;
    }
    tv rev = tp_list_new(r, 0);
    size_t end = s.n;
    for (;;) {
        const char *hit = maxsplit == 0 ? NULL : find_sub(s, 0, end, sep, 1);
        if (!hit) { tp_list_push(r, &rev, tp_str_n(r, s.s, end)); break; }
        size_t after = (size_t)(hit - s.s) + sep.n;
        tp_list_push(r, &rev, tp_str_n(r, s.s + after, end - after));
        end = (size_t)(hit - s.s);
        if (maxsplit > 0) maxsplit--;
    }
    for (size_t k = rev.u.l->n; k-- > 0;) tp_list_push(r, &out, rev.u.l->v[k]);
    return out;
}

static tv do_replace(tp_render *r, sv s, sv old, sv neu, int64_t count) {
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    if (!old.n) {  /* insert between every code point, count times at most */
        size_t i = 0;
        for (;;) {
            if (count != 0) { tp_buf_put(r, &b, neu.s, neu.n); if (count > 0) count--; }
            if (i >= s.n) break;
            size_t j = i;
            tp_utf8_next(s.s, s.n, &j);
            tp_buf_put(r, &b, s.s + i, j - i);
            i = j;
        }
        return tp_buf_str(r, &b);
    }
    size_t i = 0;
    while (count != 0) {
        const char *hit = find_sub(s, i, s.n, old, 0);
        if (!hit) break;
        tp_buf_put(r, &b, s.s + i, (size_t)(hit - s.s) - i);
        tp_buf_put(r, &b, neu.s, neu.n);
        i = (size_t)(hit - s.s) + old.n;
        if (count > 0) count--;
    }
    tp_buf_put(r, &b, s.s + i, s.n - i);
    return tp_buf_str(r, &b);
}

static tv pad(tp_render *r, sv s, int64_t width, tv fill_v, int where) {  /* 0 center, 1 ljust, 2 rjust */
    sv fill = {" ", 1};
    if (given(fill_v)) {
        fill = S(want_str(r, fill_v, "fill character"));
        if (tp_utf8_count(fill.s, fill.n) != 1) tp_rfail(r, "the fill character must be exactly one character long");
    }
    int64_t len = (int64_t)tp_utf8_count(s.s, s.n);
    if (width > 1000000) tp_rfail(r, "width too large");
    if (width <= len) return sv_str(r, s);
    int64_t total = width - len, left = where == 1 ? 0 : where == 2 ? total : total / 2 + (total & width & 1);
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    for (int64_t i = 0; i < left; i++) tp_buf_put(r, &b, fill.s, fill.n);
    tp_buf_put(r, &b, s.s, s.n);
    for (int64_t i = left; i < total; i++) tp_buf_put(r, &b, fill.s, fill.n);
    return tp_buf_str(r, &b);
}

/* format(v, spec): Python's format mini-language,
 * [[fill]align][sign][#][0][width][,|_][.precision][type], for str, int and float. */
static void format_spec(tp_render *r, tp_buf *out, tv v, sv spec) {
    if (!spec.n) { tp_to_str(r, out, v); return; }
    size_t i = 0;
    uint32_t fill = ' ';
    char align = 0, sign = '-', type = 0, group = 0;
    int alt = 0, zero = 0;
    int64_t width = -1, prec = -1;
    size_t j = 0;
    uint32_t c0 = tp_utf8_next(spec.s, spec.n, &j);
    if (j < spec.n && strchr("<>^=", spec.s[j])) { fill = c0; align = spec.s[j]; i = j + 1; }
    else if (strchr("<>^=", spec.s[0])) { align = spec.s[0]; i = 1; }
    if (i < spec.n && strchr("+- ", spec.s[i])) sign = spec.s[i++];
    if (i < spec.n && spec.s[i] == '#') { alt = 1; i++; }
    if (i < spec.n && spec.s[i] == '0') { zero = 1; i++; }
    while (i < spec.n && spec.s[i] >= '0' && spec.s[i] <= '9') { width = (width < 0 ? 0 : width) * 10 + (spec.s[i++] - '0'); if (width > 100000) tp_rfail(r, "format width too big"); }
    if (i < spec.n && (spec.s[i] == ',' || spec.s[i] == '_')) group = spec.s[i++];
    if (i < spec.n && spec.s[i] == '.') {
        i++;
        prec = 0;
        if (i >= spec.n || spec.s[i] < '0' || spec.s[i] > '9') tp_rfail(r, "format specifier missing precision");
        while (i < spec.n && spec.s[i] >= '0' && spec.s[i] <= '9') { prec = prec * 10 + (spec.s[i++] - '0'); if (prec > 1000) tp_rfail(r, "format precision too big"); }
    }
    if (i < spec.n) type = spec.s[i++];
    if (i < spec.n) tp_rfail(r, "invalid format specifier");
    if (zero && !align) { fill = '0'; align = '='; }
    tp_buf body = {0};
    tp_buf_put(r, &body, "", 0);
    const char *prefix = "";
    int neg = 0, numeric = 1;
    if (v.t == TV_STR && (!type || type == 's')) {
        if (sign != '-' || alt || group || align == '=') tp_rfail(r, "this format spec is not allowed for a string");
        size_t len = v.u.s->len;
        if (prec >= 0) {
            size_t p = 0;
            for (int64_t k = 0; k < prec && p < len; k++) tp_utf8_next(v.u.s->s, len, &p);
            len = p;
        }
        tp_buf_put(r, &body, v.u.s->s, len);
        numeric = 0;
        if (!align) align = '<';
    } else if (is_int(v) && (!type || strchr("bcdoxXn", type))) {
        if (prec >= 0) tp_rfail(r, "precision not allowed in integer format specifier");
        uint64_t x = v.u.i < 0 ? (uint64_t)0 - (uint64_t)v.u.i : (uint64_t)v.u.i;
        neg = v.u.i < 0;
        if (type == 'c') {
            char tmp[4];
            if (v.u.i < 0 || v.u.i > 0x10FFFF) tp_rfail(r, "%%c arg not in range(0x110000)");
            if (v.u.i >= 0xD800 && v.u.i <= 0xDFFF) tp_rfail(r, "%%c of a lone surrogate cannot be rendered as UTF-8");
            tp_buf_put(r, &body, tmp, (size_t)tp_utf8_put(tmp, (uint32_t)v.u.i));
            neg = 0;
        } else {
            int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
            const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            char tmp[80];
            int n = 0, gsize = base == 10 ? 3 : 4;
            do {
                tmp[n++] = dig[x % (uint64_t)base];
                x /= (uint64_t)base;
            } while (x);
            for (int k = n - 1; k >= 0; k--) {
                tp_buf_putc(r, &body, tmp[k]);
                if (group && k && k % gsize == 0) tp_buf_putc(r, &body, group);
            }
            if (alt) prefix = base == 2 ? "0b" : base == 8 ? "0o" : type == 'X' ? "0X" : base == 16 ? "0x" : "";
        }
    } else if ((is_int(v) || v.t == TV_FLOAT) && (!type || strchr("eEfFgGn%", type))) {
        double x = v.t == TV_FLOAT ? v.u.f : (double)v.u.i;
        neg = signbit(x) && x == x;
        x = fabs(x);
        char tmp[1200];
        if (!type && prec < 0) tp_float_repr(x, tmp);
        else if (type == '%') { snprintf(tmp, sizeof tmp, "%.*f%%", (int)(prec < 0 ? 6 : prec), x * 100); }
        else {
            char t = !type || type == 'n' ? 'g' : type;
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%%s.*%c", alt ? "#" : "", t);
            snprintf(tmp, sizeof tmp, fmt, (int)(prec < 0 ? 6 : prec == 0 && (t == 'g' || t == 'G') ? 1 : prec), x);
            if (!type && isfinite(x) && !strpbrk(tmp, ".e")) strcat(tmp, ".0");
        }
        if (group && isfinite(x)) {
            char *dot = strpbrk(tmp, ".e%"), *end = dot ? dot : tmp + strlen(tmp);
            int ndig = (int)(end - tmp);
            for (int k = 0; k < ndig; k++) {
                if (k && (ndig - k) % 3 == 0) tp_buf_putc(r, &body, group);
                tp_buf_putc(r, &body, tmp[k]);
            }
            tp_buf_put(r, &body, end, strlen(end));
        } else {
            tp_buf_put(r, &body, tmp, strlen(tmp));
        }
    } else {
        tp_rfail(r, "unsupported format string passed to %s.__format__", tp_type_name(v));
    }
    if (numeric && !align) align = '>';
    const char *sgn = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    int64_t len = (int64_t)(tp_utf8_count(body.p, body.n) + strlen(sgn) + strlen(prefix));
    int64_t padn = width > len ? width - len : 0, left = align == '<' ? 0 : align == '^' ? padn / 2 : align == '=' ? 0 : padn;
    char fb[4];
    int fl = tp_utf8_put(fb, fill);
    for (int64_t k = 0; k < left; k++) tp_buf_put(r, out, fb, (size_t)fl);
    tp_buf_put(r, out, sgn, strlen(sgn));
    tp_buf_put(r, out, prefix, strlen(prefix));
    if (align == '=') for (int64_t k = 0; k < padn; k++) tp_buf_put(r, out, fb, (size_t)fl);
    tp_buf_put(r, out, body.p, body.n);
    if (align != '=') for (int64_t k = left; k < padn; k++) tp_buf_put(r, out, fb, (size_t)fl);
}

/* str.format with "{}", "{0}", "{name}", "{{", "}}", !r / !s conversions and format specs. */
static tv do_format(tp_render *r, sv f, tp_args *a) {
    tp_buf b = {0};
    tp_buf_put(r, &b, "", 0);
    int auto_idx = 0, npos = 0;
    for (int i = 0; i < a->n; i++) npos += !a->kw[i];
    for (size_t i = 0; i < f.n; i++) {
        char c = f.s[i];
        if (c == '}') {
            if (i + 1 < f.n && f.s[i + 1] == '}') { tp_buf_putc(r, &b, '}'); i++; continue; }
            tp_rfail(r, "single '}' encountered in format string");
        }
        if (c != '{') { tp_buf_putc(r, &b, c); continue; }
        if (i + 1 < f.n && f.s[i + 1] == '{') { tp_buf_putc(r, &b, '{'); i++; continue; }
        const char *close = memchr(f.s + i, '}', f.n - i);
        if (!close) tp_rfail(r, "single '{' encountered in format string");
        size_t fs = i + 1, fe = (size_t)(close - f.s);
        char conv = 0;
        const char *bang = memchr(f.s + fs, '!', fe - fs), *colon = memchr(f.s + fs, ':', fe - fs);
        sv spec = {"", 0};
        if (colon && (!bang || colon < bang)) {
            spec = (sv){colon + 1, fe - (size_t)(colon - f.s) - 1};
            fe = (size_t)(colon - f.s);
            bang = NULL;
        } else if (colon) {
            spec = (sv){colon + 1, fe - (size_t)(colon - f.s) - 1};
            fe = (size_t)(colon - f.s);
        }
        if (bang) {
            if ((size_t)(bang - f.s) + 2 != fe) tp_rfail(r, "expected ':' after conversion specifier");
            conv = bang[1];
            fe = (size_t)(bang - f.s);
        }
        tv v;
        if (fe == fs) {
            if (auto_idx >= npos) tp_rfail(r, "Replacement index %d out of range for positional args tuple", auto_idx);
            v = a->v[auto_idx++];
        } else if (f.s[fs] >= '0' && f.s[fs] <= '9') {
            int64_t k = 0;
            for (size_t p = fs; p < fe; p++) {
                if (f.s[p] < '0' || f.s[p] > '9') tp_rfail(r, "field attributes are not supported by this engine");
                k = k * 10 + (f.s[p] - '0');
                if (k > 1000000) break;
            }
            if (k >= npos) tp_rfail(r, "Replacement index %lld out of range for positional args tuple", (long long)k);
            v = a->v[k];
        } else {
            int found = -1;
            for (int k = 0; k < a->n; k++)
                if (a->kw[k] && strlen(a->kw[k]) == fe - fs && !memcmp(a->kw[k], f.s + fs, fe - fs)) found = k;
            if (found < 0) tp_rfail(r, "format: missing key '%.*s'", (int)(fe - fs), f.s + fs);
            v = a->v[found];
        }
        if (conv == 'r' || conv == 'a' || conv == 's') {
            tp_buf tmp = {0};
            if (conv == 's') tp_to_str(r, &tmp, v);
            else tp_repr(r, &tmp, v);
            v = tp_buf_str(r, &tmp);
        } else if (conv) {
            tp_rfail(r, "unknown conversion specifier %c", conv);
        }
        format_spec(r, &b, v, spec);
        i = (size_t)(close - f.s);
    }
    return tp_buf_str(r, &b);
}

/* int(s, base) and float(s) for the int and float filters: TV_NONE when s does not parse. */
static tv parse_int(tp_render *r, sv s, tv base_v) {
    int64_t base = given(base_v) && is_int(base_v) ? base_v.u.i : 10;
    size_t a = 0, b = s.n;
    while (a < b && tp_isspace((unsigned char)s.s[a])) a++;
    while (b > a && tp_isspace((unsigned char)s.s[b - 1])) b--;
    int neg = 0;
    if (a < b && (s.s[a] == '+' || s.s[a] == '-')) neg = s.s[a++] == '-';
    if (a + 1 < b && s.s[a] == '0') {
        char c = s.s[a + 1] | 0x20;
        int pb = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) { base = pb; a += 2; if (a < b && s.s[a] == '_') a++; }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || a >= b) return tp_none();
    uint64_t v = 0;
    int prev_us = 1;
    for (size_t i = a; i < b; i++) {
        char c = s.s[i];
        if (c == '_') { if (prev_us) return tp_none(); prev_us = 1; continue; }
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
        if (d >= base) return tp_none();
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return tp_none();
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us || v > (uint64_t)INT64_MAX) return tp_none();
    (void)r;
    return tp_int(neg ? -(int64_t)v : (int64_t)v);
}

static tv parse_float(sv s) {
    char buf[128];
    size_t a = 0, b = s.n, k = 0;
    while (a < b && tp_isspace((unsigned char)s.s[a])) a++;
    while (b > a && tp_isspace((unsigned char)s.s[b - 1])) b--;
    if (a >= b || b - a >= sizeof buf) return tp_none();
    for (size_t i = a; i < b; i++) {
        char c = s.s[i];
        if (c == '_') {
            if (i == a || i + 1 == b || !(s.s[i - 1] >= '0' && s.s[i - 1] <= '9') || !(s.s[i + 1] >= '0' && s.s[i + 1] <= '9')) return tp_none();
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", c)) return tp_none();
        buf[k++] = c;
    }
    buf[k] = 0;
    const char *p = buf + (buf[0] == '+' || buf[0] == '-');
    if ((p[0] | 0x20) == 'i' || (p[0] | 0x20) == 'n') {
        if (strcasecmp(p, "inf") && strcasecmp(p, "infinity") && strcasecmp(p, "nan")) return tp_none();
    } else if (strchr(buf, 'x') || strchr(buf, 'X')) {
        return tp_none();
    }
    char *end;
    double d = strtod(buf, &end);
    if (*end) return tp_none();
    return tp_float(d);
}

/* ---- str methods ----------------------------------------------------------------------- */
#define BIND(...)                                                                   \
    static const char *const names_[] = {__VA_ARGS__};                              \
    tv p[sizeof names_ / sizeof names_[0]];                                         \
    tp_bind(r, m->name, a, (int)(sizeof names_ / sizeof names_[0]), names_, p)
#define NOARGS() do { if (a->n) tp_rfail(r, "%s() takes no arguments", m->name); } while (0)

static int all_cp(sv s, int (*pred)(uint32_t)) {
    if (!s.n) return 0;
    for (size_t i = 0; i < s.n;)
        if (!pred(tp_utf8_next(s.s, s.n, &i))) return 0;
    return 1;
}
static int p_alnum(uint32_t c) { return tp_isalpha(c) || tp_isdigit(c); }
static int p_ascii(uint32_t c) { return c < 0x80; }

static tv str_call(tp_render *r, tp_method *m, tp_args *a) {
    sv s = S(m->self);
    const char *n = m->name;
    if (!strcmp(n, "strip") || !strcmp(n, "lstrip") || !strcmp(n, "rstrip")) {
        BIND("chars");
        return do_strip(r, s, p[0], n[0] != 'r', n[0] != 'l');
    }
    if (!strcmp(n, "split") || !strcmp(n, "rsplit")) {
        BIND("sep", "maxsplit");
        return do_split(r, s, p[0], p[1], n[0] == 'r');
    }
    if (!strcmp(n, "splitlines")) {
        BIND("keepends");
        int keep = tp_truthy(p[0]);
        tv out = tp_list_new(r, 0);
        size_t start = 0;
        for (size_t i = 0; i < s.n;) {
            size_t at = i;
            uint32_t cp = tp_utf8_next(s.s, s.n, &i);
            if (!is_linebreak(cp)) continue;
            if (cp == '\r' && i < s.n && s.s[i] == '\n') i++;
            tp_list_push(r, &out, tp_str_n(r, s.s + start, (keep ? i : at) - start));
            start = i;
        }
        if (start < s.n) tp_list_push(r, &out, tp_str_n(r, s.s + start, s.n - start));
        return out;
    }
    if (!strcmp(n, "startswith") || !strcmp(n, "endswith")) {
        BIND("prefix", "start", "end");
        size_t b0, b1;
        range_args(r, s, p[1], p[2], &b0, &b1);
        tv pre = p[0];
        size_t cnt = tp_is_tuple(pre) ? pre.u.l->n : 1;
        for (size_t k = 0; k < cnt; k++) {
            tv x = tp_is_tuple(pre) ? pre.u.l->v[k] : pre;
            if (x.t != TV_STR) tp_rfail(r, "%s first arg must be str or a tuple of str, not %s", n, tp_type_name(x));
            if (b0 > b1 || b1 - b0 < x.u.s->len) continue;
            const char *at = n[0] == 's' ? s.s + b0 : s.s + b1 - x.u.s->len;
            if (!memcmp(at, x.u.s->s, x.u.s->len)) return tp_bool(1);
        }
        return tp_bool(0);
    }
    if (!strcmp(n, "find") || !strcmp(n, "rfind") || !strcmp(n, "index") || !strcmp(n, "rindex") || !strcmp(n, "count")) {
        BIND("sub", "start", "end");
        sv sub = S(want_str(r, p[0], "substring"));
        size_t b0, b1;
        range_args(r, s, p[1], p[2], &b0, &b1);
        if (!strcmp(n, "count")) {
            if (b0 > b1) return tp_int(0);
            if (!sub.n) return tp_int((int64_t)tp_utf8_count(s.s + b0, b1 - b0) + 1);
            int64_t c = 0;
            for (const char *h; (h = find_sub(s, b0, b1, sub, 0)); b0 = (size_t)(h - s.s) + sub.n) c++;
            return tp_int(c);
        }
        const char *hit = find_sub(s, b0, b1, sub, n[0] == 'r');
        if (!hit) {
            if (strstr(n, "index")) tp_rfail(r, "substring not found");
            return tp_int(-1);
        }
        return tp_int((int64_t)tp_utf8_count(s.s, (size_t)(hit - s.s)));
    }
    if (!strcmp(n, "replace")) {
        BIND("old", "new", "count");
        int64_t count = -1;
        if (given(p[2])) {
            if (!is_int(p[2])) tp_rfail(r, "count must be an integer");
            count = p[2].u.i;
        }
        return do_replace(r, s, S(want_str(r, p[0], "old")), S(want_str(r, p[1], "new")), count);
    }
    if (!strcmp(n, "upper")) { NOARGS(); return case_map(r, s, 1); }
    if (!strcmp(n, "lower") || !strcmp(n, "casefold")) { NOARGS(); return case_map(r, s, 0); }
    if (!strcmp(n, "swapcase")) { NOARGS(); return case_map(r, s, 2); }
    if (!strcmp(n, "title")) { NOARGS(); return case_map(r, s, 3); }
    if (!strcmp(n, "capitalize")) { NOARGS(); return case_map(r, s, 4); }
    if (!strcmp(n, "join")) {
        BIND("iterable");
        tv items = tp_iter_list(r, p[0]);
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            tv x = items.u.l->v[i];
            if (x.t != TV_STR) tp_rfail(r, "sequence item %zu: expected str instance, %s found", i, tp_type_name(x));
            if (i) tp_buf_put(r, &b, s.s, s.n);
            tp_buf_put(r, &b, x.u.s->s, x.u.s->len);
        }
        return tp_buf_str(r, &b);
    }
    if (!strcmp(n, "format")) return do_format(r, s, a);
    if (!strcmp(n, "center") || !strcmp(n, "ljust") || !strcmp(n, "rjust")) {
        BIND("width", "fillchar");
        if (!is_int(p[0])) tp_rfail(r, "width must be an integer");
        return pad(r, s, p[0].u.i, p[1], n[0] == 'c' ? 0 : n[0] == 'l' ? 1 : 2);
    }
    if (!strcmp(n, "zfill")) {
        BIND("width");
        if (!is_int(p[0])) tp_rfail(r, "width must be an integer");
        int64_t len = (int64_t)tp_utf8_count(s.s, s.n), w = p[0].u.i;
        if (w <= len) return sv_str(r, s);
        if (w > 1000000) tp_rfail(r, "width too large");
        tp_buf b = {0};
        size_t sign = s.n && (s.s[0] == '+' || s.s[0] == '-');
        tp_buf_put(r, &b, s.s, sign);
        for (int64_t i = len; i < w; i++) tp_buf_putc(r, &b, '0');
        tp_buf_put(r, &b, s.s + sign, s.n - sign);
        return tp_buf_str(r, &b);
    }
    if (!strcmp(n, "partition") || !strcmp(n, "rpartition")) {
        BIND("sep");
        sv sep = S(want_str(r, p[0], "separator"));
        if (!sep.n) tp_rfail(r, "empty separator");
        const char *hit = find_sub(s, 0, s.n, sep, n[0] == 'r');
        tv out = tp_list_new(r, 3);
        out.sub = SEQ_TUPLE;
        out.u.l->n = 3;
        if (!hit) {
            tv e = tp_str_c(r, "");
            out.u.l->v[0] = n[0] == 'r' ? e : sv_str(r, s);
            out.u.l->v[1] = e;
            out.u.l->v[2] = n[0] == 'r' ? sv_str(r, s) : e;
        } else {
            out.u.l->v[0] = tp_str_n(r, s.s, (size_t)(hit - s.s));
            out.u.l->v[1] = sv_str(r, sep);
            out.u.l->v[2] = tp_str_n(r, hit + sep.n, s.n - (size_t)(hit - s.s) - sep.n);
        }
        return out;
    }
    if (!strcmp(n, "removeprefix") || !strcmp(n, "removesuffix")) {
        BIND("affix");
        sv x = S(want_str(r, p[0], "affix"));
        if (x.n <= s.n) {
            if (n[6] == 'p' && !memcmp(s.s, x.s, x.n)) return tp_str_n(r, s.s + x.n, s.n - x.n);
            if (n[6] == 's' && !memcmp(s.s + s.n - x.n, x.s, x.n)) return tp_str_n(r, s.s, s.n - x.n);
        }
        return sv_str(r, s);
    }
    if (!strcmp(n, "expandtabs")) {
        BIND("tabsize");
        int64_t ts = given(p[0]) ? (is_int(p[0]) ? p[0].u.i : 8) : 8, col = 0;
        tp_buf b = {0};
        tp_buf_put(r, &b, "", 0);
        for (size_t i = 0; i < s.n;) {
            size_t at = i;
            uint32_t cp = tp_utf8_next(s.s, s.n, &i);
            if (cp == '\t') {
                if (ts > 0) { int64_t k = ts - col % ts; col += k; while (k--) tp_buf_putc(r, &b, ' '); }
            } else {
                tp_buf_put(r, &b, s.s + at, i - at);
                col = cp == '\n' || cp == '\r' ? 0 : col + 1;
            }
        }
        return tp_buf_str(r, &b);
    }
    NOARGS();
    if (!strcmp(n, "isspace")) return tp_bool(all_cp(s, tp_isspace));
    if (!strcmp(n, "isalpha")) return tp_bool(all_cp(s, tp_isalpha));
    if (!strcmp(n, "isdigit") || !strcmp(n, "isdecimal") || !strcmp(n, "isnumeric")) return tp_bool(all_cp(s, tp_isdigit));
    if (!strcmp(n, "isalnum")) return tp_bool(all_cp(s, p_alnum));
    if (!strcmp(n, "isascii")) return tp_bool(!s.n || all_cp(s, p_ascii));
    if (!strcmp(n, "islower") || !strcmp(n, "isupper")) {
        int cased = 0, want_upper = n[2] == 'u';
        for (size_t i = 0; i < s.n;) {
            uint32_t cp = tp_utf8_next(s.s, s.n, &i);
            if (!tp_iscased(cp)) continue;
            int is_up = tp_tolower(cp) != cp, is_low = tp_toupper(cp) != cp;
            if (want_upper ? is_low : is_up) return tp_bool(0);
            cased = 1;
        }
        return tp_bool(cased);
    }
    if (!strcmp(n, "istitle")) {
        int prev_cased = 0, any = 0;
        for (size_t i = 0; i < s.n;) {
            uint32_t cp = tp_utf8_next(s.s, s.n, &i);
            int up = tp_iscased(cp) && tp_tolower(cp) != cp, low = tp_iscased(cp) && tp_toupper(cp) != cp;
            if (up) { if (prev_cased) return tp_bool(0); prev_cased = 1; any = 1; }
            else if (low) { if (!prev_cased) return tp_bool(0); prev_cased = 1; any = 1; }
            else prev_cased = 0;
        }
        return tp_bool(any);
    }
    if (!strcmp(n, "isidentifier")) {
        if (!s.n) return tp_bool(0);
        for (size_t i = 0; i < s.n;) {
            size_t at = i;
            uint32_t cp = tp_utf8_next(s.s, s.n, &i);
            if (!(cp == '_' || tp_isalpha(cp) || (at && tp_isdigit(cp)))) return tp_bool(0);
        }
        return tp_bool(1);
    }
    tp_rfail(r, "'str' object has no attribute '%s'", n);
}

/* ---- dict, list, cycler methods -------------------------------------------------------- */
static tv dict_call(tp_render *r, tp_method *m, tp_args *a) {
    tp_dict *d = m->self.u.d;
    const char *n = m->name;
    if (!strcmp(n, "get")) {
        BIND("key", "default");
        if (!given(p[0])) tp_rfail(r, "get expected at least 1 argument, got 0");
        if (tp_unhashable(p[0])) tp_rfail(r, "unhashable type: '%s'", tp_type_name(p[0]));
        tv *v = tp_dict_find(d, p[0]);
        return v ? *v : given(p[1]) ? p[1] : tp_none();
    }
    if (!strcmp(n, "items") || !strcmp(n, "keys") || !strcmp(n, "values") || !strcmp(n, "copy")) {
        NOARGS();
        if (n[0] == 'c') {
            tv c = tp_dict_new(r, d->n);
            for (size_t i = 0; i < d->n; i++) tp_dict_set(r, &c, d->k[i], d->v[i]);
            return c;
        }
        tv out = tp_list_new(r, d->n);
        out.sub = n[0] == 'k' ? SEQ_KEYS : n[0] == 'v' ? SEQ_VALUES : SEQ_ITEMS;
        for (size_t i = 0; i < d->n; i++) {
            if (n[0] == 'k') out.u.l->v[i] = d->k[i];
            else if (n[0] == 'v') out.u.l->v[i] = d->v[i];
            else {
                tv pair = tp_list_new(r, 2);
                pair.sub = SEQ_TUPLE;
                pair.u.l->v[0] = d->k[i];
                pair.u.l->v[1] = d->v[i];
                pair.u.l->n = 2;
                out.u.l->v[i] = pair;
            }
        }
        out.u.l->n = d->n;
        return out;
    }
    tp_rfail(r, "access to attribute '%s' of 'dict' object is unsafe (the sandbox keeps values immutable)", n);
}

static tv list_call(tp_render *r, tp_method *m, tp_args *a) {
    tp_list *l = m->self.u.l;
    const char *n = m->name;
    if (!strcmp(n, "count")) {
        BIND("value");
        int64_t c = 0;
        for (size_t i = 0; i < l->n; i++) c += tp_eq(l->v[i], p[0]);
        return tp_int(c);
    }
    if (!strcmp(n, "index")) {
        BIND("value", "start", "stop");
        int64_t len = (int64_t)l->n, a0 = 0, b0 = len;
        if (given(p[1]) && is_int(p[1])) a0 = p[1].u.i < 0 ? (p[1].u.i + len < 0 ? 0 : p[1].u.i + len) : p[1].u.i;
        if (given(p[2]) && is_int(p[2])) b0 = p[2].u.i < 0 ? (p[2].u.i + len < 0 ? 0 : p[2].u.i + len) : p[2].u.i;
        if (b0 > len) b0 = len;
        for (int64_t i = a0; i < b0; i++)
            if (tp_eq(l->v[i], p[0])) return tp_int(i);
        tp_rfail(r, "value is not in list");
    }
    if (!strcmp(n, "copy")) {
        NOARGS();
        tv c = tp_list_new(r, l->n);
        if (l->n) memcpy(c.u.l->v, l->v, l->n * sizeof(tv));
        c.u.l->n = l->n;
        return c;
    }
    tp_rfail(r, "access to attribute '%s' of 'list' object is unsafe (the sandbox keeps values immutable)", n);
}

/* Markup's methods (markupsafe): string arguments are escaped, string results are Markup;
 * join escapes the items and format the arguments. */
static const char *const markup_escaping[] = {
    "replace", "ljust", "rjust", "lstrip", "rstrip", "center", "strip", "zfill", "removeprefix",
    "removesuffix", "partition", "rpartition", "format", "join", NULL,
};
static const char *const markup_wrapping[] = {
    "capitalize", "title", "lower", "upper", "casefold", "swapcase", "expandtabs", "split",
    "rsplit", "splitlines", NULL,
};

static tv markup_call(tp_render *r, tp_method *m, tp_args *a) {
    int esc = in_list(markup_escaping, m->name);
    if (!esc && !in_list(markup_wrapping, m->name)) return str_call(r, m, a);
    tp_args b = *a;
    if (esc) {
        b.v = tp_alloc(&r->ar, ((size_t)a->n + 1) * sizeof(tv));
        for (int i = 0; i < a->n; i++) {
            tv x = a->v[i];
            if (!strcmp(m->name, "join")) {
                tv items = tp_iter_list(r, x), out = tp_list_new(r, items.u.l->n);
                for (size_t k = 0; k < items.u.l->n; k++) out.u.l->v[k] = tp_escape(r, items.u.l->v[k]);
                out.u.l->n = items.u.l->n;
                x = out;
            } else if (x.t == TV_STR || !strcmp(m->name, "format")) {
                x = tp_escape(r, x);
            }
            b.v[i] = x;
        }
    }
    tv out = str_call(r, m, &b);
    if (out.t == TV_STR) out.sub = STR_MARKUP;
    else if (out.t == TV_LIST)
        for (size_t k = 0; k < out.u.l->n; k++)
            if (out.u.l->v[k].t == TV_STR) out.u.l->v[k].sub = STR_MARKUP;
    return out;
}

tv tp_call_method(tp_render *r, tp_method *m, tp_args *a) {
    tp_step(r);
    switch (m->self.t) {
    case TV_STR:
        if (!strcmp(m->name, "__int__")) return parse_int(r, S(m->self), a->n ? a->v[0] : (tv){.t = TV_MISSING});
        if (!strcmp(m->name, "__float__")) return parse_float(S(m->self));
        if (tp_is_markup(m->self)) return markup_call(r, m, a);
        return str_call(r, m, a);
    case TV_DICT: return dict_call(r, m, a);
    case TV_LIST: return list_call(r, m, a);
    case TV_CYCLER: {
        tp_cycler *c = m->self.u.cy;
        NOARGS();
        if (!strcmp(m->name, "reset")) { c->pos = 0; return tp_none(); }
        tv v = c->items->v[c->pos];
        c->pos = (c->pos + 1) % c->items->n;
        return v;
    }
    case TV_LOOP: {
        tp_loop *lp = m->self.u.lp;
        if (!strcmp(m->name, "cycle")) {
            if (!a->n) tp_rfail(r, "no items for cycling given");
            return a->v[lp->i % (size_t)a->n];
        }
        /* changed(*values) */
        tv vals = tp_list_new(r, (size_t)a->n);
        for (int i = 0; i < a->n; i++) vals.u.l->v[i] = a->v[i];
        vals.u.l->n = (size_t)a->n;
        vals.sub = SEQ_TUPLE;
        if (lp->last_changed) {
            tv last = {.t = TV_LIST, .sub = SEQ_TUPLE};
            last.u.l = lp->last_changed;
            if (tp_eq(last, vals)) return tp_bool(0);
        }
        lp->last_changed = vals.u.l;
        return tp_bool(1);
    }
    default: tp_rfail(r, "'%s' object has no method '%s'", tp_type_name(m->self), m->name);
    }
}

/* ---- the loop object ------------------------------------------------------------------- */
tv tp_loop_attr(tp_render *r, tp_loop *lp, const char *name) {
    size_t i = lp->i, n = lp->items->n;
    if (!strcmp(name, "index")) return tp_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return tp_int((int64_t)i);
    if (!strcmp(name, "revindex")) return tp_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return tp_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return tp_bool(i == 0);
    if (!strcmp(name, "last")) return tp_bool(i + 1 == n);
    if (!strcmp(name, "length")) return tp_int((int64_t)n);
    if (!strcmp(name, "depth")) return tp_int(lp->depth);
    if (!strcmp(name, "depth0")) return tp_int(lp->depth - 1);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : tp_undef("previtem", TV_LOOP);
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : tp_undef("nextitem", TV_LOOP);
    if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        tp_method *bm = tp_alloc(&r->ar, sizeof *bm);
        bm->self.t = TV_LOOP;
        bm->self.u.lp = lp;
        bm->name = name;
        tv m = {.t = TV_METHOD};
        m.u.bm = bm;
        return m;
    }
    return tp_undef(name, TV_LOOP);
}

/* ---- global functions ------------------------------------------------------------------ */
enum { G_RANGE, G_DICT, G_NAMESPACE, G_CYCLER, G_JOINER, G_LIPSUM, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const func_names[G_COUNT] = {
    "range", "dict", "namespace", "cycler", "joiner", "lipsum", "raise_exception", "strftime_now",
};

int tp_func_id(const char *name) {
    for (int i = 0; i < G_COUNT; i++)
        if (!strcmp(func_names[i], name)) return i;
    return -1;
}

static void kwargs_into(tp_render *r, tv *d, tp_args *a, int from) {
    for (int i = from; i < a->n; i++) {
        if (!a->kw[i]) tp_rfail(r, "unexpected positional argument");
        tp_dict_set(r, d, tp_str_c(r, a->kw[i]), a->v[i]);
    }
}

static tv strftime_now(tp_render *r, tp_args *a) {
    static const char *const names[] = {"format"};
    tv f;
    tp_bind(r, "strftime_now", a, 1, names, &f);
    if (f.t != TV_STR) tp_rfail(r, "strftime() argument 1 must be str, not %s", tp_type_name(f));
    struct tm tm;
    time_t t = r->now ? (time_t)r->now : time(NULL);
    if (r->now) gmtime_r(&t, &tm);
    else localtime_r(&t, &tm);
    /* a naive datetime: %z and %Z are empty, %f is microseconds (zero) */
    tp_buf fmt = {0};
    for (size_t i = 0; i < f.u.s->len; i++) {
        char c = f.u.s->s[i];
        if (c == '%' && i + 1 < f.u.s->len) {
            char d = f.u.s->s[++i];
            if (d == 'z' || d == 'Z') continue;
            if (d == 'f') { tp_buf_put(r, &fmt, "000000", 6); continue; }
            tp_buf_putc(r, &fmt, '%');
            tp_buf_putc(r, &fmt, d);
            continue;
        }
        tp_buf_putc(r, &fmt, c);
    }
    tp_buf_put(r, &fmt, "", 0);
    size_t cap = fmt.n * 64 + 64;
    char *out = tp_alloc(&r->ar, cap);
    size_t n = fmt.n ? strftime(out, cap, fmt.p, &tm) : 0;
    return tp_str_n(r, out, n);
}

tv tp_call_func(tp_render *r, int id, tp_args *a) {
    switch (id) {
    case G_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n < 1 || a->n > 3) tp_rfail(r, "range expected 1 to 3 arguments, got %d", a->n);
        for (int i = 0; i < a->n; i++) {
            if (a->kw[i]) tp_rfail(r, "range() takes no keyword arguments");
            if (!is_int(a->v[i])) tp_rfail(r, "'%s' object cannot be interpreted as an integer", tp_type_name(a->v[i]));
        }
        if (a->n == 1) v[1] = a->v[0].u.i;
        else { v[0] = a->v[0].u.i; v[1] = a->v[1].u.i; if (a->n == 3) v[2] = a->v[2].u.i; }
        if (v[2] == 0) tp_rfail(r, "range() arg 3 must not be zero");
        double count = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2]) : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (count > 100000)
            tp_rfail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        tv out = tp_list_new(r, count > 0 ? (size_t)count : 0);
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) tp_list_push(r, &out, tp_int(x));
        return out;
    }
    case G_DICT: case G_NAMESPACE: {
        tv d = tp_dict_new(r, 0);
        int from = 0;
        if (a->n && !a->kw[0]) {
            tv src = a->v[0];
            from = 1;
            if (src.t == TV_DICT || src.t == TV_NS) {
                for (size_t i = 0; i < src.u.d->n; i++) tp_dict_set(r, &d, src.u.d->k[i], src.u.d->v[i]);
            } else {
                tv items = tp_iter_list(r, src);
                for (size_t i = 0; i < items.u.l->n; i++) {
                    tv pair = tp_iter_list(r, items.u.l->v[i]);
                    if (pair.u.l->n != 2) tp_rfail(r, "dictionary update sequence element #%zu has length %zu; 2 is required", i, pair.u.l->n);
                    tp_dict_set(r, &d, pair.u.l->v[0], pair.u.l->v[1]);
                }
            }
        }
        kwargs_into(r, &d, a, from);
        if (id == G_NAMESPACE) d.t = TV_NS;
        return d;
    }
    case G_CYCLER: case G_JOINER: {
        tp_cycler *c = tp_alloc(&r->ar, sizeof *c);
        tv v = {.t = id == G_CYCLER ? TV_CYCLER : TV_JOINER};
        v.u.cy = c;
        if (id == G_CYCLER) {
            if (!a->n) tp_rfail(r, "at least one item has to be provided");
            tv items = tp_list_new(r, (size_t)a->n);
            for (int i = 0; i < a->n; i++) items.u.l->v[i] = a->v[i];
            items.u.l->n = (size_t)a->n;
            c->items = items.u.l;
        } else {
            static const char *const names[] = {"sep"};
            tv sep;
            tp_bind(r, "joiner", a, 1, names, &sep);
            c->sep = (given(sep) ? tp_str_of(r, sep) : tp_str_c(r, ", ")).u.s;
        }
        return v;
    }
    case G_RAISE: {
        static const char *const names[] = {"message"};
        tv msg;
        tp_bind(r, "raise_exception", a, 1, names, &msg);
        tv s = tp_str_of(r, msg);
        r->what = "raise_exception";
        tp_rfail(r, "%s", s.u.s->s);
    }
    case G_STRFTIME: return strftime_now(r, a);
    default: tp_rfail(r, "this function is not supported by this engine");
    }
}
