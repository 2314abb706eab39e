/* template_int.h — internals shared by the template engine's files: the arena, the value
 * model, the token and syntax-tree types, and the calls the files make into one another.
 * Nothing outside src/text/template*.c includes this.
 *
 * Memory: a compiled template's tree lives in its own arena; a render allocates every value
 * from a per-render arena freed in one go at the end (values are immutable once built, as
 * under jinja2's ImmutableSandboxedEnvironment, so sharing needs no reference counts). Errors
 * longjmp to the entry point (compile or render), which frees the arena: no path leaks.
 */
#ifndef OB_TEMPLATE_INT_H
#define OB_TEMPLATE_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "text/template.h"

/* ---- failure context and arena --------------------------------------------------------- */
typedef struct {
    jmp_buf jb;
    char *err;
    size_t errlen;
} tp_fail;

typedef struct tp_chunk {
    struct tp_chunk *next;
    size_t cap, used;
    max_align_t data[];
} tp_chunk;

typedef struct {
    tp_chunk *head;
    size_t total, limit;   /* bytes taken from malloc; limit 0 = none */
    tp_fail *fail;         /* where to jump when the limit or malloc fails */
    const int *line;       /* the template line being evaluated, for the message (may be NULL) */
} tp_arena;

void *tp_alloc(tp_arena *a, size_t n);       /* zeroed; never NULL (jumps on failure) */
char *tp_strndup(tp_arena *a, const char *s, size_t n);
void tp_arena_free(tp_arena *a);
__attribute__((noreturn, format(printf, 2, 3))) void tp_failf(tp_fail *f, const char *fmt, ...);

/* ---- UTF-8 and Python character classes ------------------------------------------------ */
int tp_utf8_valid(const char *s, size_t n);
/* Decodes the code point at s[*i] (valid UTF-8 assumed) and advances *i. */
uint32_t tp_utf8_next(const char *s, size_t n, size_t *i);
/* Start of the code point that ends at s[i-1]. */
size_t tp_utf8_prev(const char *s, size_t i);
int tp_utf8_put(char *dst, uint32_t cp);     /* writes 1..4 bytes, returns the count */
size_t tp_utf8_count(const char *s, size_t n);
int tp_isspace(uint32_t cp);                 /* Python str.isspace / regex \s */
int tp_isprintable(uint32_t cp);             /* Python str.isprintable, without unassigned */
uint32_t tp_toupper(uint32_t cp);
uint32_t tp_tolower(uint32_t cp);
int tp_iscased(uint32_t cp);
int tp_isalpha(uint32_t cp);
int tp_isdigit(uint32_t cp);

/* ---- values ---------------------------------------------------------------------------- */
enum {
    TV_MISSING,  /* an argument not given (never visible to templates) */
    TV_UNDEF,    /* jinja2 Undefined */
    TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR,
    TV_LIST,     /* list, or tuple when tuple != 0 */
    TV_DICT,     /* insertion-ordered */
    TV_NS,       /* namespace(): the one mutable object (attribute assignment) */
    TV_MACRO, TV_LOOP, TV_FUNC, TV_METHOD, TV_CYCLER, TV_JOINER,
    TV_ITER,     /* a one-shot iterator: what map, select, reverse... return (a generator) */
};

/* Kinds of TV_LIST: Python's list, tuple, groupby's named tuple, and dict views. */
enum { SEQ_LIST, SEQ_TUPLE, SEQ_GROUP, SEQ_ITEMS, SEQ_KEYS, SEQ_VALUES };
#define STR_MARKUP 1

typedef struct tp_str { size_t len; char s[]; } tp_str;   /* NUL-terminated UTF-8 */
struct tv;
typedef struct tp_list { size_t n, cap; struct tv *v; } tp_list;
typedef struct tp_dict { size_t n, cap; struct tv *k, *v; } tp_dict;

typedef struct tv {
    uint8_t t;
    uint8_t sub;          /* TV_LIST: SEQ_*; TV_STR: STR_MARKUP for a Markup (|safe) string */
    uint16_t ukind;       /* TV_UNDEF: what was missing (0 a name, else 1 + owner type) */
    int32_t fn;           /* TV_FUNC: builtin function id */
    union {
        int64_t i;        /* TV_INT, TV_BOOL */
        double f;
        tp_str *s;
        tp_list *l;
        tp_dict *d;       /* TV_DICT, TV_NS */
        struct tp_macro *m;
        struct tp_loop *lp;
        struct tp_method *bm;
        struct tp_cycler *cy;
        struct tp_iter *it;
        const char *name; /* TV_UNDEF: the missing name or attribute (may be NULL) */
    } u;
} tv;

struct tnode;
struct tp_frame;
typedef struct tp_macro {
    const struct tnode *def;      /* NK_MACRO or NK_CALLBLOCK */
    struct tp_frame *closure;
    tv caller;                    /* the caller macro a call block passes, or TV_MISSING */
} tp_macro;
typedef struct tp_method { tv self; const char *name; } tp_method;
typedef struct tp_iter { struct tp_list *items; size_t pos; const char *kind; } tp_iter;
typedef struct tp_cycler { tp_list *items; size_t pos; int used; tp_str *sep; } tp_cycler;
typedef struct tp_loop {
    tp_list *items;
    size_t i;
    int depth;                    /* 1 for the outermost loop */
    const struct tnode *node;     /* the for statement (recursive loops call it again) */
    struct tp_frame *frame;       /* the frame the for statement runs in */
    tp_list *last_changed;        /* loop.changed()'s memory, NULL before the first call */
} tp_loop;

/* ---- tokens ---------------------------------------------------------------------------- */
enum {
    TK_EOF, TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
};
enum {  /* operators */
    OP_ADD = 1, OP_SUB, OP_DIV, OP_FDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE,
    OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
    OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT, OP_COLON,
    OP_PIPE, OP_COMMA, OP_SEMICOLON,
    OP_IN, OP_NOTIN,  /* comparison operators that are names in the source */
};
typedef struct {
    uint8_t type, op;
    int line;
    const char *s;       /* TK_TEXT, TK_NAME, TK_STRING: arena copy, NUL-terminated */
    size_t len;
    int64_t i;
    double f;
} tp_token;

/* Tokenizes src (already validated UTF-8) with trim_blocks and lstrip_blocks. */
tp_token *tp_lex(tp_arena *a, const char *src, size_t len, size_t *ntok);
const char *tp_op_text(int op);
const char *tp_op_label(int op);   /* "operator '+'", for messages */

/* ---- syntax tree ----------------------------------------------------------------------- */
enum {
    /* expressions */
    NK_CONST, NK_NAME, NK_LIST, NK_TUPLE, NK_DICT, NK_ATTR, NK_ITEM, NK_SLICE, NK_CALL,
    NK_FILTER, NK_TEST, NK_NEG, NK_POS, NK_NOT, NK_BIN, NK_CMP, NK_AND, NK_OR, NK_COND,
    NK_CONCAT, NK_NSREF,
    /* statements */
    NK_BODY, NK_TEXT, NK_PRINT, NK_IF, NK_FOR, NK_SET, NK_SETBLOCK, NK_MACRO, NK_CALLBLOCK,
    NK_FILTERBLOCK, NK_WITH, NK_SCOPE, NK_BREAK, NK_CONTINUE,
};
typedef struct tnode {
    uint8_t kind;
    uint8_t op;            /* NK_BIN: OP_*; NK_TEST: negated; NK_FOR: recursive */
    uint8_t fold;          /* an expression jinja2 evaluates when it compiles (template_fold.c) */
    uint8_t uses;          /* NK_MACRO/CALLBLOCK: 1 varargs, 2 kwargs, 4 caller referenced */
    int line;
    int id;                /* NK_FILTER / NK_TEST: builtin id */
    struct tnode *a, *b, *c;
    struct tnode **v;      /* children: items, arguments, statements, defaults */
    const char **kw;       /* NK_CALL/FILTER/TEST: keyword per argument (NULL = positional);
                            * NK_MACRO/CALLBLOCK/WITH: parameter / target names */
    uint8_t *ops;          /* NK_CMP: operator per operand */
    int n;
    const char *name;      /* NK_NAME, NK_ATTR, NK_FILTER, NK_TEST, NK_MACRO, NK_NSREF */
    const char *attr;      /* NK_NSREF: the attribute; NK_CALL/FILTER/TEST: a label for
                            * messages ("filter 'trim'") */
    tv k;                  /* NK_CONST, NK_TEXT */
    struct tnode *body, *else_;
    const char **undef;    /* frame nodes: names the frame starts as missing (template_scope.c) */
    int nundef;
    const char **undef_else;   /* NK_FOR: the same for its else block */
    int nundef_else;
} tnode;

struct ob_tmpl {
    tp_arena arena;
    tp_fail fail;
    tnode *root;
};

tnode *tp_parse(tp_arena *a, tp_token *toks, size_t ntok);
void tp_scope_analyze(tp_arena *a, tnode *root);
void tp_fold_constants(tnode *root);

/* ---- builtins: ids resolved at parse time ---------------------------------------------- */
int tp_filter_id(const char *name);   /* -1 if unknown */
int tp_filter_needs_context(int id);  /* map, select, ...: jinja2 cannot run them when compiling */
int tp_test_id(const char *name);
int tp_func_id(const char *name);     /* global functions: range, namespace, ... */
const char *tp_filter_name(int id);
const char *tp_test_name(int id);

/* ---- render state ---------------------------------------------------------------------- */
typedef struct tp_frame {
    struct tp_frame *parent;
    size_t n, cap;
    const char **names;
    tv *vals;
} tp_frame;

typedef struct { char *p; size_t n, cap; } tp_buf;

typedef struct {
    int n;
    tv *v;
    const char **kw;     /* kw[i] NULL = positional */
} tp_args;

typedef struct tp_render {
    tp_arena ar;
    tp_fail fail;
    tp_buf *out;
    size_t max_output;
    uint64_t steps, max_steps;
    int depth, max_depth;
    int line;            /* line of the construct being evaluated, for messages */
    int64_t now;
    tp_frame *globals;
    const char *what;    /* construct being evaluated, for messages */
    int const_mode;      /* evaluating at compile time: names and calls are not constant */
    int soft_slices;     /* inside a folded expression: a failed slice is an Undefined */
} tp_render;

__attribute__((noreturn, format(printf, 2, 3))) void tp_rfail(tp_render *r, const char *fmt, ...);

static inline int tp_is_tuple(tv v) { return v.t == TV_LIST && (v.sub == SEQ_TUPLE || v.sub == SEQ_GROUP); }
static inline int tp_is_view(tv v) { return v.t == TV_LIST && v.sub >= SEQ_ITEMS; }
int tp_hashable(tv v);   /* Python: lists, dicts and views are not; a tuple is if its items are */
static inline int tp_unhashable(tv v) { return !tp_hashable(v); }
static inline int tp_is_markup(tv v) { return v.t == TV_STR && v.sub == STR_MARKUP; }

/* value construction */
tv tp_undef(const char *name, int owner_type);
tv tp_none(void);
tv tp_bool(int b);
tv tp_int(int64_t i);
tv tp_float(double f);
tv tp_str_n(tp_render *r, const char *s, size_t n);
tv tp_str_c(tp_render *r, const char *s);
tv tp_list_new(tp_render *r, size_t cap);
void tp_list_push(tp_render *r, tv *list, tv item);
tv tp_dict_new(tp_render *r, size_t cap);
void tp_dict_set(tp_render *r, tv *dict, tv key, tv val);
tv *tp_dict_find(const tp_dict *d, tv key);
tv *tp_dict_find_c(const tp_dict *d, const char *key);
tv tp_from_json(tp_render *r, const json_t *j);
tv tp_iter_new(tp_render *r, tv list, const char *kind);   /* wraps a list as an iterator */
tv tp_markup(tv s);                                         /* the string as a Markup */
tv tp_escape(tp_render *r, tv v);                           /* markupsafe.escape(v) */

/* buffers */
void tp_buf_put(tp_render *r, tp_buf *b, const char *s, size_t n);
void tp_buf_putc(tp_render *r, tp_buf *b, char c);
void tp_buf_printf(tp_render *r, tp_buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
tv tp_buf_str(tp_render *r, tp_buf *b);

/* Python semantics */
const char *tp_type_name(tv v);        /* 'str', 'int', 'dict', ... as Python names them */
int tp_truthy(tv v);
int tp_eq(tv a, tv b);
int tp_cmp(tp_render *r, tv a, tv b, int op);   /* OP_LT/LTEQ/GT/GTEQ; fails on bad types */
void tp_to_str(tp_render *r, tp_buf *b, tv v);  /* str(v) */
void tp_repr(tp_render *r, tp_buf *b, tv v);    /* repr(v) */
tv tp_str_of(tp_render *r, tv v);               /* str(v) as a value */
void tp_float_repr(double f, char *buf);        /* repr(float): buf of 32 bytes */
int tp_contains(tp_render *r, tv container, tv item);
tv tp_iter_list(tp_render *r, tv v);            /* list(v) for iteration; fails if not iterable */
int64_t tp_len(tp_render *r, tv v);
tv tp_getattr(tp_render *r, tv obj, const char *name);
tv tp_getitem(tp_render *r, tv obj, tv key);
/* soft: what is not sliceable, or bad indices, give an Undefined instead of an error */
tv tp_slice(tp_render *r, tv obj, tv start, tv stop, tv step, int soft);
tv tp_binop(tp_render *r, int op, tv a, tv b);
void tp_check_defined(tp_render *r, tv v);     /* fails with jinja2's message on Undefined */
void tp_undef_fail(tp_render *r, tv v) __attribute__((noreturn));
void tp_json_dump(tp_render *r, tp_buf *b, tv v, const char *indent, const char *item_sep,
                  const char *key_sep, int sort_keys, int ensure_ascii, int level);
tv tp_percent_format(tp_render *r, tv fmt, tv args);
tv tp_pprint(tp_render *r, tv v);               /* pprint.pformat(v) */

/* evaluation (template_eval.c) */
tv tp_eval(tp_render *r, tp_frame *f, const tnode *n);
tv tp_call(tp_render *r, tv callee, tp_args *a);
tv tp_call_macro(tp_render *r, tp_macro *m, tp_args *a, const char *name);
void tp_step(tp_render *r);

/* builtins (template_filters.c, template_methods.c) */
tv tp_apply_filter(tp_render *r, int id, tv in, tp_args *a);
int tp_apply_test(tp_render *r, int id, tv in, tp_args *a);
tv tp_call_func(tp_render *r, int id, tp_args *a);
tv tp_call_method(tp_render *r, tp_method *m, tp_args *a);
int tp_has_method(tv self, const char *name);
tv tp_loop_attr(tp_render *r, tp_loop *lp, const char *name);

/* Argument binding: fills out[np] from positional and keyword arguments by parameter name;
 * unfilled slots are TV_MISSING. Fails naming `what` on unknown or surplus arguments. */
void tp_bind(tp_render *r, const char *what, tp_args *a, int np, const char *const *names, tv *out);

#endif
