/* template_lex.c — the template lexer: text and tags into tokens, with jinja2's whitespace
 * rules as transformers configures them (trim_blocks, lstrip_blocks, keep_trailing_newline
 * off).
 *
 * Owns: newline normalization, finding {{ }}, {% %}, {# #} and raw blocks, the '-' and '+'
 * whitespace controls, trim_blocks (drop the newline after a block or comment tag) and
 * lstrip_blocks (drop the spaces before a block or comment tag that starts a line), the
 * tokens inside tags (names, numbers, strings with Python escapes, operators) and bracket
 * balancing (a '}}' inside an open '{' is two braces, not the end of the tag).
 * Does not own: what tokens mean (template_parse.c).
 *
 * The rules follow jinja2's lexer regexes one for one; comments below name the regex a branch
 * implements where the behaviour is not obvious.
 */
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

typedef struct {
    tp_arena *a;
    const char *s;
    size_t n, pos;
    int line;
    int line_starting;   /* the last match ended with a newline (jinja2's line_starting) */
    tp_token *t;
    size_t nt, cap;
    char bal[256];       /* open brackets inside the current tag */
    int nbal;
} lexer;

static const char *const op_texts[] = {
    [OP_ADD] = "+", [OP_SUB] = "-", [OP_DIV] = "/", [OP_FDIV] = "//", [OP_MUL] = "*",
    [OP_MOD] = "%", [OP_POW] = "**", [OP_TILDE] = "~", [OP_LBRACKET] = "[", [OP_RBRACKET] = "]",
    [OP_LPAREN] = "(", [OP_RPAREN] = ")", [OP_LBRACE] = "{", [OP_RBRACE] = "}", [OP_EQ] = "==",
    [OP_NE] = "!=", [OP_GT] = ">", [OP_GTEQ] = ">=", [OP_LT] = "<", [OP_LTEQ] = "<=",
    [OP_ASSIGN] = "=", [OP_DOT] = ".", [OP_COLON] = ":", [OP_PIPE] = "|", [OP_COMMA] = ",",
    [OP_SEMICOLON] = ";", [OP_IN] = "in", [OP_NOTIN] = "not in",
};

static const char *const op_labels[] = {
    [OP_ADD] = "operator '+'", [OP_SUB] = "operator '-'", [OP_DIV] = "operator '/'",
    [OP_FDIV] = "operator '//'", [OP_MUL] = "operator '*'", [OP_MOD] = "operator '%'",
    [OP_POW] = "operator '**'", [OP_EQ] = "operator '=='", [OP_NE] = "operator '!='",
    [OP_GT] = "operator '>'", [OP_GTEQ] = "operator '>='", [OP_LT] = "operator '<'",
    [OP_LTEQ] = "operator '<='", [OP_IN] = "operator 'in'", [OP_NOTIN] = "operator 'not in'",
};

const char *tp_op_label(int op) {
    return op > 0 && op < (int)(sizeof op_labels / sizeof op_labels[0]) && op_labels[op] ? op_labels[op] : "operator";
}

const char *tp_op_text(int op) {
    return op > 0 && op < (int)(sizeof op_texts / sizeof op_texts[0]) && op_texts[op] ? op_texts[op] : "?";
}

__attribute__((noreturn, format(printf, 2, 3))) static void lfail(lexer *L, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tp_failf(L->a->fail, "line %d: syntax error: %s", L->line, msg);
}

static tp_token *emit(lexer *L, int type) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tp_token *t = tp_alloc(L->a, cap * sizeof *t);
        if (L->nt) memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    tp_token *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = L->line;
    return t;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

/* Length of s[0..n) after Python's str.rstrip(). */
static size_t rstrip_len(const char *s, size_t n) {
    while (n > 0) {
        size_t p = tp_utf8_prev(s, n), j = p;
        if (!tp_isspace(tp_utf8_next(s, n, &j))) break;
        n = p;
    }
    return n;
}

/* Whitespace (\s, Unicode) starting at i; returns the end. */
static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n) {
        size_t j = i;
        if (!tp_isspace(tp_utf8_next(s, n, &j))) break;
        i = j;
    }
    return i;
}

/* The text before a tag, after the tag's whitespace control (jinja2's OptionalLStrip):
 * '-' strips all trailing whitespace; otherwise, for block and comment tags, lstrip_blocks
 * drops the spaces between the last newline (or the start, when the previous match ended a
 * line) and the tag. */
static void emit_text(lexer *L, size_t from, size_t to, int sign, int is_variable) {
    const char *text = L->s + from;
    size_t len = to - from;
    if (sign == '-') {
        len = rstrip_len(text, len);
    } else if (sign != '+' && !is_variable) {
        size_t l_pos = len;
        while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || L->line_starting) && l_pos < len && skip_ws(text, len, l_pos) == len)
            len = l_pos;
    }
    int line = L->line;
    count_lines(L, from, to);
    if (len == 0) return;
    tp_token *t = emit(L, TK_TEXT);
    t->line = line;
    t->s = tp_strndup(L->a, text, len);
    t->len = len;
}

/* `{%(-|+|)\s*raw\s*(?:-%}\s*|%})` at i; returns the end or 0. */
static size_t match_raw_begin(lexer *L, size_t i) {
    const char *s = L->s;
    size_t n = L->n, p = i + 2;
    if (p < n && (s[p] == '-' || s[p] == '+')) p++;
    p = skip_ws(s, n, p);
    if (p + 3 > n || memcmp(s + p, "raw", 3)) return 0;
    p = skip_ws(s, n, p + 3);
    if (p + 3 <= n && !memcmp(s + p, "-%}", 3)) return skip_ws(s, n, p + 3);
    if (p + 2 <= n && !memcmp(s + p, "%}", 2)) return p + 2;
    return 0;
}

/* The end of a block or comment tag at p (`+X}` | `-X}\s*` | `X}\n?`, X = '%' or '#').
 * Returns the end or 0. */
static size_t match_tag_end(const char *s, size_t n, size_t p, char x) {
    if (p + 3 <= n && s[p] == '+' && s[p + 1] == x && s[p + 2] == '}') return p + 3;
    if (p + 3 <= n && s[p] == '-' && s[p + 1] == x && s[p + 2] == '}') return skip_ws(s, n, p + 3);
    if (p + 2 <= n && s[p] == x && s[p + 1] == '}') return p + 2 < n && s[p + 2] == '\n' ? p + 3 : p + 2;
    return 0;
}

static void lex_raw(lexer *L, size_t start) {
    const char *s = L->s;
    size_t n = L->n;
    for (size_t p = start; p + 1 < n; p++) {
        if (s[p] != '{' || s[p + 1] != '%') continue;
        size_t q = p + 2;
        int sign = 0;
        if (q < n && (s[q] == '-' || s[q] == '+')) sign = s[q++];
        q = skip_ws(s, n, q);
        if (q + 6 > n || memcmp(s + q, "endraw", 6)) continue;
        q = skip_ws(s, n, q + 6);
        size_t end = match_tag_end(s, n, q, '%');
        if (!end) continue;
        emit_text(L, start, p, sign, 0);
        count_lines(L, p, end);
        L->line_starting = s[end - 1] == '\n';
        L->pos = end;
        return;
    }
    lfail(L, "missing end of raw directive");
}

static void lex_comment(lexer *L, size_t start) {
    const char *s = L->s;
    size_t n = L->n;
    for (size_t p = start; p < n; p++) {
        size_t end = match_tag_end(s, n, p, '#');
        if (!end) continue;
        count_lines(L, start, end);
        L->line_starting = s[end - 1] == '\n';
        L->pos = end;
        return;
    }
    lfail(L, "missing end of comment tag");
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* `(\d+_)*\d+` at p: returns the end or 0. */
static size_t digits_us(const char *s, size_t n, size_t p) {
    if (p >= n || !is_digit(s[p])) return 0;
    while (p < n) {
        while (p < n && is_digit(s[p])) p++;
        if (p + 1 < n && s[p] == '_' && is_digit(s[p + 1])) { p++; continue; }
        break;
    }
    return p;
}

/* float_re: `(?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)` */
static size_t match_float(const char *s, size_t n, size_t p) {
    if (p > 0 && s[p - 1] == '.') return 0;
    size_t q = digits_us(s, n, p);
    if (!q) return 0;
    size_t f = (q < n && s[q] == '.') ? digits_us(s, n, q + 1) : 0;
    size_t bases[2] = {f, q};
    for (int k = 0; k < 2; k++) {
        size_t e = bases[k];
        if (!e || e >= n || (s[e] != 'e' && s[e] != 'E')) continue;
        e++;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        size_t d = digits_us(s, n, e);
        if (d) return d;
    }
    return f;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* integer_re: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)* */
static size_t match_int(const char *s, size_t n, size_t p, int *base) {
    if (p >= n || !is_digit(s[p])) return 0;
    if (s[p] == '0' && p + 1 < n) {
        char c = s[p + 1] | 0x20;
        int b = c == 'b' ? 2 : c == 'o' ? 8 : c == 'x' ? 16 : 0;
        if (b) {
            size_t q = p + 2, last = 0;
            for (;;) {
                size_t r = q;
                if (r < n && s[r] == '_') r++;
                int v = r < n ? hexval(s[r]) : -1;
                if (v < 0 || v >= b) break;
                q = r + 1;
                last = q;
            }
            if (last) { *base = b; return last; }
        }
    }
    *base = 10;
    size_t q = p + 1;
    for (;;) {
        size_t r = q;
        if (r < n && s[r] == '_') r++;
        if (r >= n || !is_digit(s[r]) || (s[p] == '0' && s[r] != '0')) break;
        q = r + 1;
    }
    return q;
}

/* Python's unicode-escape decoding of a string literal's body (after jinja2 encodes it with
 * backslashreplace, so a backslash before a non-ASCII character escapes its \x/\u form). */
static void lex_string(lexer *L, size_t body, size_t end) {
    const char *s = L->s;
    char *out = tp_alloc(L->a, (end - body) * 4 + 1);
    size_t o = 0;
    for (size_t i = body; i < end;) {
        if (s[i] != '\\') { out[o++] = s[i++]; continue; }
        i++;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {  /* backslash + backslashreplace form of the character, verbatim */
            uint32_t cp = tp_utf8_next(s, end, &i);
            o += (size_t)sprintf(out + o, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
            continue;
        }
        i++;
        uint32_t cp;
        int nhex = 0;
        switch (c) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = '\a'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = '\v'; continue;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N': lfail(L, "\\N{...} escapes are not supported");
        default:
            if (c >= '0' && c <= '7') {
                cp = c - '0';
                for (int k = 0; k < 2 && i < end && s[i] >= '0' && s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += (size_t)tp_utf8_put(out + o, cp);
            } else {
                out[o++] = '\\';
                out[o++] = (char)c;
            }
            continue;
        }
        cp = 0;
        for (int k = 0; k < nhex; k++) {
            int v = i < end ? hexval(s[i]) : -1;
            if (v < 0) lfail(L, "truncated \\%c escape in a string", c);
            cp = cp * 16 + (uint32_t)v;
            i++;
        }
        if (cp > 0x10FFFF) lfail(L, "illegal Unicode character in a string");
        if (cp >= 0xD800 && cp <= 0xDFFF) lfail(L, "a lone surrogate (\\u%04x) in a string cannot be rendered as UTF-8", cp);
        o += (size_t)tp_utf8_put(out + o, cp);
    }
    out[o] = 0;
    tp_token *t = emit(L, TK_STRING);
    t->s = out;
    t->len = o;
}

static const struct { const char *s; int op; } ops2[] = {
    {"//", OP_FDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GTEQ}, {"<=", OP_LTEQ},
};
static const char ops1_chars[] = "+-/*%~[](){}><=.:|,;";
static const int ops1_ops[] = {
    OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET, OP_RBRACKET, OP_LPAREN,
    OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_GT, OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE,
    OP_COMMA, OP_SEMICOLON,
};

static void lex_operator(lexer *L, size_t p) {
    const char *s = L->s;
    int op = 0;
    size_t len = 1;
    for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
        if (p + 1 < L->n && s[p] == ops2[k].s[0] && s[p + 1] == ops2[k].s[1]) { op = ops2[k].op; len = 2; }
    if (!op) {
        const char *c = s[p] ? strchr(ops1_chars, s[p]) : NULL;
        if (!c) {
            size_t j = p;
            uint32_t cp = tp_utf8_next(s, L->n, &j);
            if (cp < 0x80 && cp >= 0x20) lfail(L, "unexpected char '%c'", (int)cp);
            lfail(L, "unexpected char U+%04X", cp);
        }
        op = ops1_ops[c - ops1_chars];
    }
    if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
        if (L->nbal == (int)sizeof L->bal) lfail(L, "brackets nest too deeply");
        L->bal[L->nbal++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
    } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
        if (!L->nbal) lfail(L, "unexpected '%c'", s[p]);
        char want = L->bal[--L->nbal];
        if (want != s[p]) lfail(L, "unexpected '%c', expected '%c'", s[p], want);
    }
    tp_token *t = emit(L, TK_OP);
    t->op = (uint8_t)op;
    L->pos = p + len;
}

static int is_name_start(uint32_t cp) { return cp == '_' || (cp < 0x80 ? ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') : tp_isalpha(cp)); }
static int is_name_char(uint32_t cp) { return is_name_start(cp) || (cp >= '0' && cp <= '9') || (cp >= 0x80 && tp_isdigit(cp)); }

/* Tokens inside {{ }} or {% %} up to the closing tag. */
static void lex_tag(lexer *L, int is_block) {
    const char *s = L->s;
    size_t n = L->n;
    L->nbal = 0;
    for (;;) {
        size_t p = L->pos;
        if (p >= n) return;  /* as jinja2: the parser reports the missing end */
        if (!L->nbal) {
            size_t end = 0;
            if (is_block) end = match_tag_end(s, n, p, '%');
            else if (p + 3 <= n && !memcmp(s + p, "-}}", 3)) end = skip_ws(s, n, p + 3);
            else if (p + 2 <= n && !memcmp(s + p, "}}", 2)) end = p + 2;
            if (end) {
                emit(L, is_block ? TK_BLOCK_END : TK_VAR_END);
                count_lines(L, p, end);
                L->line_starting = s[end - 1] == '\n';
                L->pos = end;
                return;
            }
        }
        size_t q = skip_ws(s, n, p);
        if (q > p) {
            count_lines(L, p, q);
            L->pos = q;
            continue;
        }
        int base;
        if ((q = match_float(s, n, p))) {
            char buf[128];
            size_t k = 0;
            for (size_t i = p; i < q && k < sizeof buf - 1; i++)
                if (s[i] != '_') buf[k++] = s[i];
            buf[k] = 0;
            tp_token *t = emit(L, TK_FLOAT);
            t->f = strtod(buf, NULL);
            L->pos = q;
        } else if ((q = match_int(s, n, p, &base))) {
            uint64_t v = 0;
            for (size_t i = p + (base == 10 ? 0 : 2); i < q; i++) {
                if (s[i] == '_') continue;
                uint64_t d = (uint64_t)hexval(s[i]);
                if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
                    lfail(L, "integer literal too large");
                v = v * (uint64_t)base + d;
            }
            tp_token *t = emit(L, TK_INT);
            t->i = (int64_t)v;
            L->pos = q;
        } else if (p < n) {
            size_t j = p;
            uint32_t cp = tp_utf8_next(s, n, &j);
            if (is_name_start(cp)) {
                while (j < n) {
                    size_t k = j;
                    if (!is_name_char(tp_utf8_next(s, n, &k))) break;
                    j = k;
                }
                tp_token *t = emit(L, TK_NAME);
                t->s = tp_strndup(L->a, s + p, j - p);
                t->len = j - p;
                L->pos = j;
            } else if (cp == '\'' || cp == '"') {
                size_t e = p + 1;
                while (e < n && s[e] != (char)cp) e += s[e] == '\\' && e + 1 < n ? 2 : 1;
                if (e >= n) lfail(L, "unexpected char '%c' (unterminated string)", (int)cp);
                int line = L->line;
                lex_string(L, p + 1, e);
                L->t[L->nt - 1].line = line;
                count_lines(L, p, e + 1);
                L->pos = e + 1;
            } else {
                lex_operator(L, p);
            }
        }
    }
}

tp_token *tp_lex(tp_arena *a, const char *src, size_t len, size_t *ntok) {
    /* newlines: \r\n and \r become \n; one trailing newline is dropped */
    char *s = tp_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;

    lexer L = {.a = a, .s = s, .n = n, .line = 1, .line_starting = 1};
    while (L.pos < n) {
        const char *p = s + L.pos;
        size_t idx = 0;
        int found = 0;
        while ((p = memchr(p, '{', (size_t)(s + n - p))) != NULL) {
            if (p + 1 < s + n && (p[1] == '{' || p[1] == '%' || p[1] == '#')) { found = 1; break; }
            p++;
        }
        if (!found) {
            emit_text(&L, L.pos, n, 0, 1);
            break;
        }
        idx = (size_t)(p - s);
        char kind = s[idx + 1];
        int sign = idx + 2 < n && (s[idx + 2] == '-' || s[idx + 2] == '+') ? s[idx + 2] : 0;
        size_t raw_end = kind == '%' ? match_raw_begin(&L, idx) : 0;
        emit_text(&L, L.pos, idx, sign, kind == '{');
        size_t after = idx + 2 + (sign ? 1 : 0);
        if (raw_end) {
            count_lines(&L, idx, raw_end);
            L.line_starting = s[raw_end - 1] == '\n';
            lex_raw(&L, raw_end);
        } else if (kind == '#') {
            lex_comment(&L, after);
        } else {
            emit(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN);
            L.pos = after;
            L.line_starting = 0;
            lex_tag(&L, kind == '%');
        }
    }
    emit(&L, TK_EOF);
    *ntok = L.nt;
    return L.t;
}
