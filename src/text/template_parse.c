/* template_parse.c — the template parser: tokens into a syntax tree, with jinja2's grammar
 * and operator precedence, and compile-time checks jinja2 makes (unknown filters and tests,
 * unknown tags, 'break' outside a loop, unclosed blocks).
 *
 * Owns: statements (if/elif/else, for with else, filters and recursive, set and block set,
 * macro, call, filter blocks, with, break/continue, print, raw is the lexer's; generation and
 * block render their body in place) and expressions (ternary, or/and/not, comparisons and
 * `in`, + - ~ * / // % **, unary signs, literals, attribute/item/slice access, calls with
 * keyword and * / ** arguments, filters, tests).
 * Does not own: evaluation (template_eval.c).
 *
 * Precedence, loosest first, as jinja2's parser: `x if c else y`, or, and, not, comparisons,
 * + -, ~, * / // %, **, unary - +, then postfix access and calls, then filters and tests. Note
 * that unary minus binds tighter than ** (`-2 ** 2` is 4, as in jinja2).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text/template_int.h"

#define MAX_PARSE_DEPTH 200

typedef struct {
    tp_arena *a;
    tp_token *t;
    size_t nt, i;
    int depth;
    int loop_depth;       /* for break/continue; a macro body starts at 0 */
    const char *tags[MAX_PARSE_DEPTH + 8];
    int tag_lines[MAX_PARSE_DEPTH + 8];
    int ntags;
} parser;

static tp_token *cur(parser *P) { return &P->t[P->i]; }
static tp_token *look(parser *P) { return &P->t[P->i + 1 < P->nt ? P->i + 1 : P->i]; }
static tp_token *advance(parser *P) {
    tp_token *t = &P->t[P->i];
    if (P->i + 1 < P->nt) P->i++;
    return t;
}

static const char *describe(tp_token *t) {
    static __thread char buf[96];
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_BLOCK_END: return "end of statement block";
    case TK_NAME: snprintf(buf, sizeof buf, "%.80s", t->s); return buf;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: return tp_op_text(t->op);
    }
}

__attribute__((noreturn, format(printf, 3, 4))) static void pfail(parser *P, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line <= 0) line = cur(P)->line;
    if (P->ntags > 0)
        tp_failf(P->a->fail, "line %d: syntax error in {%% %s %%} (line %d): %s", line,
                 P->tags[P->ntags - 1], P->tag_lines[P->ntags - 1], msg);
    tp_failf(P->a->fail, "line %d: syntax error: %s", line, msg);
}

static int is_name(tp_token *t, const char *kw) { return t->type == TK_NAME && !strcmp(t->s, kw); }
static int is_op(tp_token *t, int op) { return t->type == TK_OP && t->op == op; }

static void expect_op(parser *P, int op) {
    if (!is_op(cur(P), op)) pfail(P, 0, "expected '%s', got '%s'", tp_op_text(op), describe(cur(P)));
    advance(P);
}

static void expect_type(parser *P, int type, const char *what) {
    if (cur(P)->type != type) pfail(P, 0, "expected %s, got '%s'", what, describe(cur(P)));
    advance(P);
}

static const char *expect_name(parser *P) {
    if (cur(P)->type != TK_NAME) pfail(P, 0, "expected a name, got '%s'", describe(cur(P)));
    return advance(P)->s;
}

static tnode *mk(parser *P, int kind, int line) {
    tnode *n = tp_alloc(P->a, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

/* growable child list */
typedef struct { tnode **v; const char **kw; uint8_t *ops; int n, cap; } nvec;

static void nv_push(parser *P, nvec *nv, tnode *node, const char *kw, int op) {
    if (nv->n == nv->cap) {
        int cap = nv->cap ? nv->cap * 2 : 4;
        tnode **v = tp_alloc(P->a, (size_t)cap * sizeof *v);
        const char **k = tp_alloc(P->a, (size_t)cap * sizeof *k);
        uint8_t *o = tp_alloc(P->a, (size_t)cap);
        if (nv->n) {
            memcpy(v, nv->v, (size_t)nv->n * sizeof *v);
            memcpy(k, nv->kw, (size_t)nv->n * sizeof *k);
            memcpy(o, nv->ops, (size_t)nv->n);
        }
        nv->v = v;
        nv->kw = k;
        nv->ops = o;
        nv->cap = cap;
    }
    nv->v[nv->n] = node;
    nv->kw[nv->n] = kw;
    nv->ops[nv->n++] = (uint8_t)op;
}

static void nv_attach(tnode *n, nvec *nv) {
    n->v = nv->v;
    n->kw = nv->kw;
    n->ops = nv->ops;
    n->n = nv->n;
}

static void enter(parser *P) {
    if (++P->depth > MAX_PARSE_DEPTH) pfail(P, 0, "the template nests too deeply (more than %d levels)", MAX_PARSE_DEPTH);
}

/* ---- expressions ----------------------------------------------------------------------- */
static tnode *parse_expression(parser *P, int with_condexpr);
static tnode *parse_tuple(parser *P, int simplified, int with_condexpr, const char *const *extra_end,
                          int explicit_parens, int with_namespace);
static tnode *parse_unary(parser *P, int with_filter);
static tnode *parse_postfix(parser *P, tnode *node);
static tnode *parse_primary(parser *P, int with_namespace);

static void parse_call_args(parser *P, tnode *call) {
    nvec args = {0};
    int line = cur(P)->line, require_comma = 0, seen_kw = 0, seen_dyn = 0;
    expect_op(P, OP_LPAREN);
    while (!is_op(cur(P), OP_RPAREN)) {
        if (cur(P)->type == TK_EOF) pfail(P, line, "unexpected end of template in a call");
        if (require_comma) {
            expect_op(P, OP_COMMA);
            if (is_op(cur(P), OP_RPAREN)) break;
        }
        if (is_op(cur(P), OP_MUL) || is_op(cur(P), OP_POW)) {
            int dstar = cur(P)->op == OP_POW;
            advance(P);
            nv_push(P, &args, parse_expression(P, 1), dstar ? "**" : "*", 0);
            seen_dyn = 1;
        } else if (cur(P)->type == TK_NAME && is_op(look(P), OP_ASSIGN)) {
            const char *key = advance(P)->s;
            advance(P);
            nv_push(P, &args, parse_expression(P, 1), key, 0);
            seen_kw = 1;
        } else {
            if (seen_kw || seen_dyn) pfail(P, line, "invalid syntax for function call expression");
            nv_push(P, &args, parse_expression(P, 1), NULL, 0);
        }
        require_comma = 1;
    }
    expect_op(P, OP_RPAREN);
    nv_attach(call, &args);
}

static const char *label(parser *P, const char *fmt, const char *name) {
    size_t n = strlen(fmt) + strlen(name) + 1;
    char *s = tp_alloc(P->a, n);
    snprintf(s, n, fmt, name);
    return s;
}

static tnode *parse_call(parser *P, tnode *callee) {
    tnode *n = mk(P, NK_CALL, cur(P)->line);
    n->a = callee;
    n->attr = callee->kind == NK_ATTR ? label(P, "method '%s'", callee->name)
              : callee->kind == NK_NAME ? label(P, "call of '%s'", callee->name) : "call";
    parse_call_args(P, n);
    return n;
}

static const char *dotted_name(parser *P) {
    const char *name = expect_name(P);
    while (is_op(cur(P), OP_DOT)) {
        advance(P);
        const char *part = expect_name(P);
        size_t a = strlen(name), b = strlen(part);
        char *s = tp_alloc(P->a, a + b + 2);
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, part, b + 1);
        name = s;
    }
    return name;
}

static tnode *parse_filter(parser *P, tnode *node, int start_inline) {
    while (is_op(cur(P), OP_PIPE) || start_inline) {
        if (!start_inline) advance(P);
        int line = cur(P)->line;
        const char *name = dotted_name(P);
        tnode *f = mk(P, NK_FILTER, line);
        f->a = node;
        f->name = name;
        f->id = tp_filter_id(name);
        f->attr = label(P, "filter '%s'", name);
        if (is_op(cur(P), OP_LPAREN)) parse_call_args(P, f);
        node = f;
        start_inline = 0;
    }
    return node;
}

static tnode *parse_test(parser *P, tnode *node) {
    int line = advance(P)->line;   /* 'is' */
    int negated = 0;
    if (is_name(cur(P), "not")) { advance(P); negated = 1; }
    const char *name = dotted_name(P);
    tnode *t = mk(P, NK_TEST, line);
    t->a = node;
    t->name = name;
    t->op = (uint8_t)negated;
    t->id = tp_test_id(name);
    t->attr = label(P, "test '%s'", name);
    tp_token *c = cur(P);
    if (is_op(c, OP_LPAREN)) {
        parse_call_args(P, t);
    } else if ((c->type == TK_NAME || c->type == TK_STRING || c->type == TK_INT || c->type == TK_FLOAT ||
                is_op(c, OP_LPAREN) || is_op(c, OP_LBRACKET) || is_op(c, OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) pfail(P, 0, "you cannot chain multiple tests with is");
        enter(P);
        tnode *arg = parse_postfix(P, parse_primary(P, 0));
        P->depth--;
        nvec args = {0};
        nv_push(P, &args, arg, NULL, 0);
        nv_attach(t, &args);
    }
    return t;
}

static tnode *parse_list(parser *P) {
    tnode *n = mk(P, NK_LIST, cur(P)->line);
    nvec items = {0};
    expect_op(P, OP_LBRACKET);
    while (!is_op(cur(P), OP_RBRACKET)) {
        if (items.n) expect_op(P, OP_COMMA);
        if (is_op(cur(P), OP_RBRACKET)) break;
        nv_push(P, &items, parse_expression(P, 1), NULL, 0);
    }
    expect_op(P, OP_RBRACKET);
    nv_attach(n, &items);
    return n;
}

static tnode *parse_dict(parser *P) {
    tnode *n = mk(P, NK_DICT, cur(P)->line);
    nvec items = {0};
    expect_op(P, OP_LBRACE);
    while (!is_op(cur(P), OP_RBRACE)) {
        if (items.n) expect_op(P, OP_COMMA);
        if (is_op(cur(P), OP_RBRACE)) break;
        nv_push(P, &items, parse_expression(P, 1), NULL, 0);
        expect_op(P, OP_COLON);
        nv_push(P, &items, parse_expression(P, 1), NULL, 0);
    }
    expect_op(P, OP_RBRACE);
    nv_attach(n, &items);
    return n;
}

static tnode *parse_primary(parser *P, int with_namespace) {
    tp_token *t = cur(P);
    tnode *n;
    if (t->type == TK_NAME) {
        advance(P);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n = mk(P, NK_CONST, t->line);
            n->k = tp_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = mk(P, NK_CONST, t->line);
            n->k = tp_none();
        } else if (with_namespace && is_op(cur(P), OP_DOT)) {
            advance(P);
            n = mk(P, NK_NSREF, t->line);
            n->name = t->s;
            n->attr = expect_name(P);
        } else {
            n = mk(P, NK_NAME, t->line);
            n->name = t->s;
        }
    } else if (t->type == TK_STRING) {
        /* adjacent literals concatenate */
        size_t len = 0, k = P->i;
        while (P->t[k].type == TK_STRING) len += P->t[k++].len;
        char *s = tp_alloc(P->a, len + 1);
        size_t o = 0;
        while (cur(P)->type == TK_STRING) {
            memcpy(s + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            advance(P);
        }
        n = mk(P, NK_CONST, t->line);
        tp_str *str = tp_alloc(P->a, sizeof *str + len + 1);
        str->len = len;
        memcpy(str->s, s, len);
        n->k.t = TV_STR;
        n->k.u.s = str;
    } else if (t->type == TK_INT || t->type == TK_FLOAT) {
        advance(P);
        n = mk(P, NK_CONST, t->line);
        n->k = t->type == TK_INT ? tp_int(t->i) : tp_float(t->f);
    } else if (is_op(t, OP_LPAREN)) {
        advance(P);
        n = parse_tuple(P, 0, 1, NULL, 1, 0);
        expect_op(P, OP_RPAREN);
    } else if (is_op(t, OP_LBRACKET)) {
        n = parse_list(P);
    } else if (is_op(t, OP_LBRACE)) {
        n = parse_dict(P);
    } else {
        pfail(P, t->line, "unexpected '%s'", describe(t));
    }
    return n;
}

/* One subscript: an expression or a slice [start]:[stop][:[step]]. */
static tnode *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    tnode *parts[3] = {0};
    if (is_op(cur(P), OP_COLON)) {
        advance(P);
    } else {
        tnode *e = parse_expression(P, 1);
        if (!is_op(cur(P), OP_COLON)) return e;
        advance(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), OP_COLON) && !is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA))
        parts[1] = parse_expression(P, 1);
    if (is_op(cur(P), OP_COLON)) {
        advance(P);
        if (!is_op(cur(P), OP_RBRACKET) && !is_op(cur(P), OP_COMMA)) parts[2] = parse_expression(P, 1);
    }
    tnode *s = mk(P, NK_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static tnode *parse_subscript(parser *P, tnode *node) {
    tp_token *t = advance(P);
    if (is_op(t, OP_DOT)) {
        tp_token *at = advance(P);
        if (at->type == TK_NAME) {
            tnode *n = mk(P, NK_ATTR, t->line);
            n->a = node;
            n->name = at->s;
            return n;
        }
        if (at->type != TK_INT) pfail(P, at->line, "expected name or number");
        tnode *k = mk(P, NK_CONST, at->line);
        k->k = tp_int(at->i);
        tnode *n = mk(P, NK_ITEM, t->line);
        n->a = node;
        n->b = k;
        return n;
    }
    nvec args = {0};
    while (!is_op(cur(P), OP_RBRACKET)) {
        if (cur(P)->type == TK_EOF) pfail(P, t->line, "unexpected end of template in a subscript");
        if (args.n) expect_op(P, OP_COMMA);
        nv_push(P, &args, parse_subscribed(P), NULL, 0);
    }
    expect_op(P, OP_RBRACKET);
    tnode *n = mk(P, NK_ITEM, t->line);
    n->a = node;
    if (args.n == 1) {
        n->b = args.v[0];
    } else {
        tnode *tup = mk(P, NK_TUPLE, t->line);
        nv_attach(tup, &args);
        n->b = tup;
    }
    return n;
}

static tnode *parse_postfix(parser *P, tnode *node) {
    for (;;) {
        if (is_op(cur(P), OP_DOT) || is_op(cur(P), OP_LBRACKET)) node = parse_subscript(P, node);
        else if (is_op(cur(P), OP_LPAREN)) node = parse_call(P, node);
        else return node;
    }
}

static tnode *parse_filter_expr(parser *P, tnode *node) {
    for (;;) {
        if (is_op(cur(P), OP_PIPE)) node = parse_filter(P, node, 0);
        else if (is_name(cur(P), "is")) node = parse_test(P, node);
        else if (is_op(cur(P), OP_LPAREN)) node = parse_call(P, node);
        else return node;
    }
}

static tnode *parse_unary(parser *P, int with_filter) {
    enter(P);
    tp_token *t = cur(P);
    tnode *node;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        advance(P);
        node = mk(P, t->op == OP_SUB ? NK_NEG : NK_POS, t->line);
        node->a = parse_unary(P, 0);
    } else {
        node = parse_primary(P, 0);
    }
    node = parse_postfix(P, node);
    if (with_filter) node = parse_filter_expr(P, node);
    P->depth--;
    return node;
}

static tnode *binop(parser *P, int op, tnode *a, tnode *b, int line) {
    tnode *n = mk(P, NK_BIN, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_unary(P, 1);
    while (is_op(cur(P), OP_POW)) {
        advance(P);
        left = binop(P, OP_POW, left, parse_unary(P, 1), line);
    }
    return left;
}

static tnode *parse_math2(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_pow(P);
    while (is_op(cur(P), OP_MUL) || is_op(cur(P), OP_DIV) || is_op(cur(P), OP_FDIV) || is_op(cur(P), OP_MOD)) {
        int op = advance(P)->op;
        left = binop(P, op, left, parse_pow(P), line);
    }
    return left;
}

static tnode *parse_concat(parser *P) {
    int line = cur(P)->line;
    tnode *first = parse_math2(P);
    if (!is_op(cur(P), OP_TILDE)) return first;
    nvec args = {0};
    nv_push(P, &args, first, NULL, 0);
    while (is_op(cur(P), OP_TILDE)) {
        advance(P);
        nv_push(P, &args, parse_math2(P), NULL, 0);
    }
    tnode *n = mk(P, NK_CONCAT, line);
    nv_attach(n, &args);
    return n;
}

static tnode *parse_math1(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_concat(P);
    while (is_op(cur(P), OP_ADD) || is_op(cur(P), OP_SUB)) {
        int op = advance(P)->op;
        left = binop(P, op, left, parse_concat(P), line);
    }
    return left;
}

static tnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    tnode *expr = parse_math1(P);
    nvec ops = {0};
    for (;;) {
        tp_token *t = cur(P);
        int op;
        if (t->type == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LTEQ ||
                                 t->op == OP_GT || t->op == OP_GTEQ)) {
            op = t->op;
            advance(P);
        } else if (is_name(t, "in")) {
            op = OP_IN;
            advance(P);
        } else if (is_name(t, "not") && is_name(look(P), "in")) {
            op = OP_NOTIN;
            advance(P);
            advance(P);
        } else {
            break;
        }
        nv_push(P, &ops, parse_math1(P), NULL, op);
    }
    if (!ops.n) return expr;
    tnode *n = mk(P, NK_CMP, line);
    n->a = expr;
    nv_attach(n, &ops);
    return n;
}

static tnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = advance(P)->line;
        enter(P);
        tnode *n = mk(P, NK_NOT, line);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_not(P);
    while (is_name(cur(P), "and")) {
        advance(P);
        tnode *n = mk(P, NK_AND, line);
        n->a = left;
        n->b = parse_not(P);
        left = n;
    }
    return left;
}

static tnode *parse_or(parser *P) {
    int line = cur(P)->line;
    tnode *left = parse_and(P);
    while (is_name(cur(P), "or")) {
        advance(P);
        tnode *n = mk(P, NK_OR, line);
        n->a = left;
        n->b = parse_and(P);
        left = n;
    }
    return left;
}

static tnode *parse_condexpr(parser *P) {
    int line = cur(P)->line;
    tnode *expr1 = parse_or(P);
    while (is_name(cur(P), "if")) {
        advance(P);
        tnode *n = mk(P, NK_COND, line);
        n->a = parse_or(P);
        n->b = expr1;
        if (is_name(cur(P), "else")) {
            advance(P);
            enter(P);
            n->c = parse_condexpr(P);
            P->depth--;
        }
        expr1 = n;
    }
    return expr1;
}

static tnode *parse_expression(parser *P, int with_condexpr) {
    enter(P);
    tnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static int is_tuple_end(parser *P, const char *const *extra_end) {
    tp_token *t = cur(P);
    if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || is_op(t, OP_RPAREN)) return 1;
    for (int i = 0; extra_end && extra_end[i]; i++)
        if (is_name(t, extra_end[i])) return 1;
    return 0;
}

static tnode *parse_tuple(parser *P, int simplified, int with_condexpr, const char *const *extra_end,
                          int explicit_parens, int with_namespace) {
    int line = cur(P)->line, is_tuple = 0;
    nvec items = {0};
    for (;;) {
        if (items.n) expect_op(P, OP_COMMA);
        if (is_tuple_end(P, extra_end)) break;
        tnode *e = simplified ? parse_primary(P, with_namespace) : parse_expression(P, with_condexpr);
        nv_push(P, &items, e, NULL, 0);
        if (is_op(cur(P), OP_COMMA)) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) pfail(P, 0, "expected an expression, got '%s'", describe(cur(P)));
    }
    tnode *n = mk(P, NK_TUPLE, line);
    nv_attach(n, &items);
    return n;
}

/* ---- statements ------------------------------------------------------------------------ */
static tnode *subparse(parser *P, const char *const *end_names);

static void push_tag(parser *P, const char *tag, int line) {
    if (P->ntags >= MAX_PARSE_DEPTH) pfail(P, line, "blocks nest too deeply (more than %d levels)", MAX_PARSE_DEPTH);
    P->tags[P->ntags] = tag;
    P->tag_lines[P->ntags++] = line;
}

static void check_assignable(parser *P, tnode *t) {
    if (t->kind == NK_NAME || t->kind == NK_NSREF) return;
    if (t->kind == NK_TUPLE) {
        for (int i = 0; i < t->n; i++)
            if (t->v[i]->kind != NK_NAME && t->v[i]->kind != NK_NSREF) pfail(P, t->line, "can't assign to this target");
        return;
    }
    pfail(P, t->line, "can't assign to %s", t->kind == NK_CONST ? "a constant" : "this expression");
}

static tnode *parse_assign_target(parser *P, const char *const *extra_end, int with_namespace) {
    tnode *t = parse_tuple(P, 1, 1, extra_end, 0, with_namespace);
    check_assignable(P, t);
    return t;
}

/* Body up to one of end_names; the current token is left at that name. */
static tnode *parse_statements(parser *P, const char *const *end_names, int drop_needle) {
    if (is_op(cur(P), OP_COLON)) advance(P);
    expect_type(P, TK_BLOCK_END, "end of statement block");
    tnode *body = subparse(P, end_names);
    if (cur(P)->type == TK_EOF) {
        char want[160] = "";
        for (int i = 0; end_names[i]; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? " or " : "", end_names[i]);
        pfail(P, 0, "unexpected end of template; looking for %s", want);
    }
    if (drop_needle) advance(P);
    return body;
}

static void parse_signature(parser *P, tnode *n) {
    nvec params = {0};
    int have_default = 0;
    expect_op(P, OP_LPAREN);
    while (!is_op(cur(P), OP_RPAREN)) {
        if (params.n) expect_op(P, OP_COMMA);
        const char *name = expect_name(P);
        tnode *def = NULL;
        if (is_op(cur(P), OP_ASSIGN)) {
            advance(P);
            def = parse_expression(P, 1);
            have_default = 1;
        } else if (have_default) {
            pfail(P, 0, "non-default argument follows default argument");
        }
        nv_push(P, &params, def, name, 0);
    }
    expect_op(P, OP_RPAREN);
    nv_attach(n, &params);
}

/* Which of varargs / kwargs / caller a macro body mentions (jinja2 accepts surplus
 * arguments only then). */
static int scan_uses(const tnode *n) {
    if (!n) return 0;
    int u = 0;
    if (n->kind == NK_NAME) {
        if (!strcmp(n->name, "varargs")) u |= 1;
        else if (!strcmp(n->name, "kwargs")) u |= 2;
        else if (!strcmp(n->name, "caller")) u |= 4;
    }
    u |= scan_uses(n->a) | scan_uses(n->b) | scan_uses(n->c) | scan_uses(n->body) | scan_uses(n->else_);
    for (int i = 0; i < n->n; i++) u |= scan_uses(n->v[i]);
    return u;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const END_BLOCK[] = {"endblock", NULL};
static const char *const IN_END[] = {"in", NULL};
static const char *const RECURSIVE_END[] = {"recursive", NULL};

static tnode *parse_for(parser *P, int line) {
    tnode *n = mk(P, NK_FOR, line);
    n->a = parse_assign_target(P, IN_END, 0);
    if (!is_name(cur(P), "in")) pfail(P, 0, "expected 'in', got '%s'", describe(cur(P)));
    advance(P);
    n->b = parse_tuple(P, 0, 0, RECURSIVE_END, 0, 0);
    if (is_name(cur(P), "if")) {
        advance(P);
        n->c = parse_expression(P, 1);
    }
    if (is_name(cur(P), "recursive")) {
        advance(P);
        n->op = 1;
    }
    P->loop_depth++;
    n->body = parse_statements(P, END_FOR, 0);
    P->loop_depth--;
    if (!strcmp(advance(P)->s, "else")) n->else_ = parse_statements(P, END_FOR2, 1);
    return n;
}

static tnode *parse_if(parser *P, int line) {
    tnode *n = mk(P, NK_IF, line), *node = n;
    for (;;) {
        node->a = parse_tuple(P, 0, 0, NULL, 0, 0);
        node->body = parse_statements(P, END_IF, 0);
        tp_token *t = advance(P);
        if (!strcmp(t->s, "elif")) {
            tnode *e = mk(P, NK_IF, t->line);
            node->else_ = e;
            node = e;
            continue;
        }
        if (!strcmp(t->s, "else")) node->else_ = parse_statements(P, END_IF2, 1);
        break;
    }
    return n;
}

static tnode *parse_set(parser *P, int line) {
    tnode *target = parse_assign_target(P, NULL, 1);
    if (is_op(cur(P), OP_ASSIGN)) {
        advance(P);
        tnode *n = mk(P, NK_SET, line);
        n->a = target;
        n->b = parse_tuple(P, 0, 1, NULL, 0, 0);
        return n;
    }
    tnode *n = mk(P, NK_SETBLOCK, line);
    n->a = target;
    n->c = parse_filter(P, NULL, 0);
    n->body = parse_statements(P, END_SET, 1);
    return n;
}

static tnode *parse_macro_like(parser *P, tnode *n, const char *const *end) {
    int saved = P->loop_depth;
    P->loop_depth = 0;
    n->body = parse_statements(P, end, 1);
    P->loop_depth = saved;
    n->uses = (uint8_t)scan_uses(n->body);
    for (int i = 0; i < n->n; i++) n->uses |= (uint8_t)scan_uses(n->v[i]);
    return n;
}

static tnode *parse_statement(parser *P) {
    tp_token *t = cur(P);
    if (t->type != TK_NAME) pfail(P, 0, "tag name expected");
    const char *tag = t->s;
    int line = t->line;
    advance(P);
    push_tag(P, tag, line);
    tnode *n;
    if (!strcmp(tag, "for")) {
        n = parse_for(P, line);
    } else if (!strcmp(tag, "if")) {
        n = parse_if(P, line);
    } else if (!strcmp(tag, "set")) {
        n = parse_set(P, line);
    } else if (!strcmp(tag, "macro")) {
        n = mk(P, NK_MACRO, line);
        n->name = expect_name(P);
        parse_signature(P, n);
        parse_macro_like(P, n, END_MACRO);
    } else if (!strcmp(tag, "call")) {
        n = mk(P, NK_CALLBLOCK, line);
        if (is_op(cur(P), OP_LPAREN)) parse_signature(P, n);
        n->a = parse_expression(P, 1);
        if (n->a->kind != NK_CALL) pfail(P, line, "expected call");
        parse_macro_like(P, n, END_CALL);
    } else if (!strcmp(tag, "filter")) {
        n = mk(P, NK_FILTERBLOCK, line);
        n->c = parse_filter(P, NULL, 1);
        n->body = parse_statements(P, END_FILTER, 1);
    } else if (!strcmp(tag, "with")) {
        n = mk(P, NK_WITH, line);
        nvec vals = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (vals.n) expect_op(P, OP_COMMA);
            const char *name = expect_name(P);
            expect_op(P, OP_ASSIGN);
            nv_push(P, &vals, parse_expression(P, 1), name, 0);
        }
        nv_attach(n, &vals);
        n->body = parse_statements(P, END_WITH, 1);
    } else if (!strcmp(tag, "generation")) {
        /* transformers' AssistantTracker: renders its body (as a call block's caller) */
        n = mk(P, NK_SCOPE, line);
        n->body = parse_statements(P, END_GEN, 1);
    } else if (!strcmp(tag, "block")) {
        n = mk(P, NK_SCOPE, line);
        n->name = expect_name(P);
        if (is_name(cur(P), "scoped")) advance(P);
        if (is_name(cur(P), "required")) advance(P);
        n->body = parse_statements(P, END_BLOCK, 1);
        if (is_name(cur(P), n->name)) advance(P);
    } else if (!strcmp(tag, "print")) {
        n = mk(P, NK_BODY, line);
        nvec items = {0};
        while (cur(P)->type != TK_BLOCK_END) {
            if (items.n) expect_op(P, OP_COMMA);
            tnode *pr = mk(P, NK_PRINT, line);
            pr->a = parse_expression(P, 1);
            nv_push(P, &items, pr, NULL, 0);
        }
        nv_attach(n, &items);
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!P->loop_depth) pfail(P, line, "'%s' outside loop", tag);
        n = mk(P, tag[0] == 'b' ? NK_BREAK : NK_CONTINUE, line);
    } else if (!strcmp(tag, "extends") || !strcmp(tag, "include") || !strcmp(tag, "import") ||
               !strcmp(tag, "from") || !strcmp(tag, "autoescape")) {
        P->ntags--;
        pfail(P, line, "{%% %s %%} is not supported (a chat template is a single file)", tag);
    } else {
        P->ntags--;
        pfail(P, line, "unknown tag '%s'", tag);
    }
    P->ntags--;
    return n;
}

static tnode *subparse(parser *P, const char *const *end_names) {
    tnode *body = mk(P, NK_BODY, cur(P)->line);
    nvec stmts = {0};
    enter(P);
    while (cur(P)->type != TK_EOF) {
        tp_token *t = cur(P);
        if (t->type == TK_TEXT) {
            tnode *n = mk(P, NK_TEXT, t->line);
            tp_str *s = tp_alloc(P->a, sizeof *s + t->len + 1);
            s->len = t->len;
            memcpy(s->s, t->s, t->len);
            n->k.t = TV_STR;
            n->k.u.s = s;
            nv_push(P, &stmts, n, NULL, 0);
            advance(P);
        } else if (t->type == TK_VAR_BEGIN) {
            advance(P);
            tnode *n = mk(P, NK_PRINT, t->line);
            n->a = parse_tuple(P, 0, 1, NULL, 0, 0);
            expect_type(P, TK_VAR_END, "end of print statement");
            nv_push(P, &stmts, n, NULL, 0);
        } else if (t->type == TK_BLOCK_BEGIN) {
            advance(P);
            for (int i = 0; end_names && end_names[i]; i++)
                if (is_name(cur(P), end_names[i])) goto done;
            nv_push(P, &stmts, parse_statement(P), NULL, 0);
            expect_type(P, TK_BLOCK_END, "end of statement block");
        } else {
            pfail(P, t->line, "unexpected '%s'", describe(t));
        }
    }
done:
    P->depth--;
    nv_attach(body, &stmts);
    return body;
}

/* jinja2 rejects an unknown filter or test when it compiles the template, except inside an
 * if statement or an inline if (a "soft" frame), where it fails only if it runs. Loops,
 * macros, call / filter / with / set blocks start frames that are not soft again. */
static void check_unknown(parser *P, const tnode *n, int soft) {
    if (!n || n->fold) return;
    if ((n->kind == NK_FILTER || n->kind == NK_TEST) && n->id < 0 && !soft)
        pfail(P, n->line, "no %s named '%s'", n->kind == NK_FILTER ? "filter" : "test", n->name);
    int inner = soft;
    switch (n->kind) {
    case NK_IF: case NK_COND: inner = 1; break;
    case NK_FOR:
        check_unknown(P, n->b, soft);
        check_unknown(P, n->c, 0);
        check_unknown(P, n->body, 0);
        check_unknown(P, n->else_, 0);
        return;
    case NK_CALLBLOCK:
        check_unknown(P, n->a, soft);
        inner = 0;
        for (int i = 0; i < n->n; i++) check_unknown(P, n->v[i], 0);
        check_unknown(P, n->body, 0);
        return;
    case NK_MACRO: case NK_FILTERBLOCK: case NK_WITH: case NK_SCOPE: case NK_SETBLOCK: inner = 0; break;
    default: break;
    }
    check_unknown(P, n->a, inner);
    check_unknown(P, n->b, inner);
    check_unknown(P, n->c, inner);
    check_unknown(P, n->body, inner);
    check_unknown(P, n->else_, inner);
    for (int i = 0; i < n->n; i++) check_unknown(P, n->v[i], n->kind == NK_WITH ? soft : inner);
}

tnode *tp_parse(tp_arena *a, tp_token *toks, size_t ntok) {
    parser P = {.a = a, .t = toks, .nt = ntok};
    tnode *root = subparse(&P, NULL);
    if (cur(&P)->type != TK_EOF) pfail(&P, 0, "unexpected '%s'", describe(cur(&P)));
    P.ntags = 0;
    tp_fold_constants(root);   /* first: what jinja2 folds away is not checked */
    check_unknown(&P, root, 0);
    tp_scope_analyze(a, root);
    return root;
}
