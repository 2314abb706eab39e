/* template_eval.c — the evaluator: walks the syntax tree, executes statements into the output
 * buffer and evaluates expressions, with jinja2's scoping.
 *
 * Owns: frames and name lookup, statements (output, if, for with its loop object, filters,
 * else and recursion, set / block set / namespace attribute set, macros and call blocks,
 * filter blocks, with, break and continue), expression nodes, calls (macros, builtins,
 * methods), compile / render entry points and the render limits.
 * Does not own: the Python semantics of values and operators (template_value.c,
 * template_ops.c), filters, tests and methods (template_filters.c, template_methods.c).
 *
 * Scoping, as jinja2: a for loop's body gets a fresh frame per iteration (assignments in it
 * are gone at the next iteration and after the loop), so do macro bodies, call blocks and
 * with blocks; if blocks share their parent's frame; a macro sees the frame it was defined in
 * as it is when the macro runs. Namespaces are the way to carry values out of a loop.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

#define DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)512 << 20)
#define DEFAULT_MAX_STEPS 50000000ull
#define DEFAULT_MAX_DEPTH 1000

void tp_step(tp_render *r) {
    if (++r->steps > r->max_steps)
        tp_rfail(r, "step limit (%llu) exceeded: the template runs too long", (unsigned long long)r->max_steps);
}

/* ---- frames ---------------------------------------------------------------------------- */
static tp_frame *frame_new(tp_render *r, tp_frame *parent) {
    tp_frame *f = tp_alloc(&r->ar, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(tp_render *r, tp_frame *f, const char *name, tv v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **nn = tp_alloc(&r->ar, cap * sizeof *nn);
        tv *nv = tp_alloc(&r->ar, cap * sizeof *nv);
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static tv lookup(tp_frame *f, const char *name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name)) return f->vals[i].t == TV_MISSING ? tp_undef(name, -1) : f->vals[i];
    int id = tp_func_id(name);
    if (id >= 0) {
        tv v = {.t = TV_FUNC, .fn = id};
        return v;
    }
    return tp_undef(name, -1);
}

/* A new frame with the names jinja2 starts as missing in it (template_scope.c). */
static tp_frame *frame_start(tp_render *r, tp_frame *parent, const char *const *undef, int n) {
    tp_frame *f = frame_new(r, parent);
    for (int i = 0; i < n; i++) frame_set(r, f, undef[i], (tv){.t = TV_MISSING});
    return f;
}

/* ---- arguments ------------------------------------------------------------------------- */
static void args_push(tp_render *r, tp_args *a, int *cap, tv v, const char *kw) {
    if (a->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        tv *nv = tp_alloc(&r->ar, (size_t)nc * sizeof *nv);
        const char **nk = tp_alloc(&r->ar, (size_t)nc * sizeof *nk);
        if (a->n) {
            memcpy(nv, a->v, (size_t)a->n * sizeof *nv);
            memcpy(nk, a->kw, (size_t)a->n * sizeof *nk);
        }
        a->v = nv;
        a->kw = nk;
        *cap = nc;
    }
    a->v[a->n] = v;
    a->kw[a->n++] = kw;
}

/* Evaluates a call's arguments; *x and **x expand. Room is left for one more (caller). */
static void eval_args(tp_render *r, tp_frame *f, const tnode *n, tp_args *out) {
    int cap = 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n->n; i++) {
        tv v = tp_eval(r, f, n->v[i]);
        const char *kw = n->kw[i];
        if (kw && !strcmp(kw, "*")) {
            r->line = n->line;
            r->what = "call";
            tv l = tp_iter_list(r, v);
            for (size_t k = 0; k < l.u.l->n; k++) args_push(r, out, &cap, l.u.l->v[k], NULL);
        } else if (kw && !strcmp(kw, "**")) {
            r->line = n->line;
            r->what = "call";
            if (v.t != TV_DICT) tp_rfail(r, "argument after ** must be a mapping, not %s", tp_type_name(v));
            for (size_t k = 0; k < v.u.d->n; k++) {
                if (v.u.d->k[k].t != TV_STR) tp_rfail(r, "keywords must be strings");
                args_push(r, out, &cap, v.u.d->v[k], v.u.d->k[k].u.s->s);
            }
        } else {
            args_push(r, out, &cap, v, kw);
        }
    }
    args_push(r, out, &cap, tp_undef(NULL, -1), NULL);   /* reserve a slot */
    out->n--;
}

void tp_bind(tp_render *r, const char *what, tp_args *a, int np, const char *const *names, tv *out) {
    for (int i = 0; i < np; i++) out[i] = (tv){.t = TV_MISSING};
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i]) {
            if (pos >= np) tp_rfail(r, "%s takes at most %d argument%s (%d given)", what, np, np == 1 ? "" : "s", a->n);
            out[pos++] = a->v[i];
            continue;
        }
        int j = 0;
        while (j < np && strcmp(names[j], a->kw[i])) j++;
        if (j == np) tp_rfail(r, "%s got an unexpected keyword argument '%s'", what, a->kw[i]);
        if (out[j].t != TV_MISSING) tp_rfail(r, "%s got multiple values for argument '%s'", what, a->kw[i]);
        out[j] = a->v[i];
    }
}

/* ---- output capture -------------------------------------------------------------------- */
static int exec_body(tp_render *r, tp_frame *f, const tnode *body);

static tv capture(tp_render *r, tp_frame *f, const tnode *body) {
    tp_buf *saved = r->out, buf = {0};
    r->out = &buf;
    exec_body(r, f, body);
    r->out = saved;
    return tp_buf_str(r, &buf);
}

/* ---- macros ---------------------------------------------------------------------------- */
tv tp_call_macro(tp_render *r, tp_macro *m, tp_args *a, const char *name) {
    const tnode *d = m->def;
    if (++r->depth > r->max_depth) tp_rfail(r, "macro calls nest too deeply (more than %d levels)", r->max_depth);
    tp_frame *mf = frame_start(r, m->closure, d->undef, d->nundef);
    int np = d->n, pos = 0;
    tv *set = tp_alloc(&r->ar, ((size_t)np + 1) * sizeof *set);
    tv varargs = tp_list_new(r, 0), kwargs = tp_dict_new(r, 0);
    varargs.sub = SEQ_TUPLE;
    tv caller = m->caller;
    for (int i = 0; i < a->n; i++) {
        if (!a->kw[i]) {
            if (pos < np) set[pos++] = a->v[i];
            else if (d->uses & 1) tp_list_push(r, &varargs, a->v[i]);
            else tp_rfail(r, "macro '%s' takes not more than %d argument(s)", name, np);
            continue;
        }
        int j = 0;
        while (j < np && strcmp(d->kw[j], a->kw[i])) j++;
        if (j < np) {
            if (set[j].t != TV_MISSING) tp_rfail(r, "macro '%s' got multiple values for argument '%s'", name, a->kw[i]);
            set[j] = a->v[i];
        } else if (!strcmp(a->kw[i], "caller")) {
            caller = a->v[i];
        } else if (d->uses & 2) {
            tp_dict_set(r, &kwargs, tp_str_c(r, a->kw[i]), a->v[i]);
        } else {
            tp_rfail(r, "macro '%s' takes no keyword argument '%s'", name, a->kw[i]);
        }
    }
    for (int i = 0; i < np; i++) {
        if (set[i].t == TV_MISSING)
            set[i] = d->v[i] ? tp_eval(r, mf, d->v[i]) : tp_undef(d->kw[i], -1);
        frame_set(r, mf, d->kw[i], set[i]);
    }
    if (d->uses & 1) frame_set(r, mf, "varargs", varargs);
    if (d->uses & 2) frame_set(r, mf, "kwargs", kwargs);
    if (caller.t != TV_MISSING) frame_set(r, mf, "caller", caller);
    tv out = capture(r, mf, d->body);
    r->depth--;
    return out;
}

static tv make_macro(tp_render *r, const tnode *def, tp_frame *closure) {
    tp_macro *m = tp_alloc(&r->ar, sizeof *m);
    m->def = def;
    m->closure = closure;
    m->caller.t = TV_MISSING;
    tv v = {.t = TV_MACRO};
    v.u.m = m;
    return v;
}

/* ---- for loops ------------------------------------------------------------------------- */
static void assign(tp_render *r, tp_frame *f, const tnode *target, tv v);

static tv run_loop(tp_render *r, tp_frame *f, const tnode *n, tv iterable, int depth, int capture_out) {
    r->line = n->line;
    r->what = "for loop";
    tv all = tp_iter_list(r, iterable);
    tv items = all;
    if (n->c) {
        items = tp_list_new(r, all.u.l->n);
        for (size_t i = 0; i < all.u.l->n; i++) {
            tp_step(r);
            tp_frame *tf = frame_new(r, f);
            assign(r, tf, n->a, all.u.l->v[i]);
            if (tp_truthy(tp_eval(r, tf, n->c))) tp_list_push(r, &items, all.u.l->v[i]);
        }
    }
    tp_buf *saved = r->out, buf = {0};
    if (capture_out) r->out = &buf;
    if (items.u.l->n == 0) {
        if (n->else_) exec_body(r, frame_start(r, f, n->undef_else, n->nundef_else), n->else_);
    } else {
        tp_loop *lp = tp_alloc(&r->ar, sizeof *lp);
        lp->items = items.u.l;
        lp->depth = depth;
        lp->node = n;
        lp->frame = f;
        tv loopv = {.t = TV_LOOP};
        loopv.u.lp = lp;
        for (size_t i = 0; i < items.u.l->n; i++) {
            tp_step(r);
            lp->i = i;
            tp_frame *it = frame_start(r, f, n->undef, n->nundef);
            frame_set(r, it, "loop", loopv);
            assign(r, it, n->a, items.u.l->v[i]);
            if (exec_body(r, it, n->body) == FLOW_BREAK) break;
        }
    }
    if (!capture_out) return tp_none();
    r->out = saved;
    return tp_buf_str(r, &buf);
}

/* ---- calls ----------------------------------------------------------------------------- */
tv tp_call(tp_render *r, tv callee, tp_args *a) {
    switch (callee.t) {
    case TV_MACRO:
        return tp_call_macro(r, callee.u.m, a, callee.u.m->def->name ? callee.u.m->def->name : "caller");
    case TV_FUNC: return tp_call_func(r, callee.fn, a);
    case TV_METHOD: return tp_call_method(r, callee.u.bm, a);
    case TV_LOOP: {
        tp_loop *lp = callee.u.lp;
        if (!lp->node->op) tp_rfail(r, "loop() can only be called in a recursive loop");
        if (a->n != 1 || a->kw[0]) tp_rfail(r, "loop() takes exactly one argument");
        if (++r->depth > r->max_depth) tp_rfail(r, "recursive loops nest too deeply");
        tv out = run_loop(r, lp->frame, lp->node, a->v[0], lp->depth + 1, 1);
        r->depth--;
        return out;
    }
    case TV_JOINER: {
        tp_cycler *j = callee.u.cy;
        if (!j->used) { j->used = 1; return tp_str_c(r, ""); }
        tv s = {.t = TV_STR};
        s.u.s = j->sep;
        return s;
    }
    case TV_UNDEF: tp_undef_fail(r, callee);
    default: tp_rfail(r, "'%s' object is not callable", tp_type_name(callee));
    }
}

/* ---- assignment ------------------------------------------------------------------------ */
static void assign(tp_render *r, tp_frame *f, const tnode *target, tv v) {
    if (target->kind == NK_NAME) {
        frame_set(r, f, target->name, v);
    } else if (target->kind == NK_NSREF) {
        tv ns = lookup(f, target->name);
        r->line = target->line;
        r->what = "set";
        if (ns.t != TV_NS) tp_rfail(r, "cannot assign attribute on non-namespace object");
        tp_dict_set(r, &ns, tp_str_c(r, target->attr), v);
    } else {  /* tuple unpacking */
        r->line = target->line;
        r->what = "unpacking";
        tv l = tp_iter_list(r, v);
        if ((int)l.u.l->n != target->n)
            tp_rfail(r, "%s values to unpack (expected %d, got %zu)", (int)l.u.l->n > target->n ? "too many" : "not enough",
                     target->n, l.u.l->n);
        for (int i = 0; i < target->n; i++) assign(r, f, target->v[i], l.u.l->v[i]);
    }
}

/* Applies a filter chain (innermost node has a == NULL) to a value. */
static tv apply_chain(tp_render *r, tp_frame *f, const tnode *n, tv in) {
    if (!n) return in;
    tv x = n->a ? apply_chain(r, f, n->a, in) : in;
    tp_args args;
    eval_args(r, f, n, &args);
    r->line = n->line;
    r->what = n->attr;
    if (n->id < 0) tp_rfail(r, "no filter named '%s'", n->name);
    return tp_apply_filter(r, n->id, x, &args);
}

/* ---- statements ------------------------------------------------------------------------ */
static int exec(tp_render *r, tp_frame *f, const tnode *n) {
    tp_step(r);
    if (++r->depth > r->max_depth) tp_rfail(r, "the template nests too deeply");
    int flow = FLOW_NORMAL;
    switch (n->kind) {
    case NK_TEXT: tp_buf_put(r, r->out, n->k.u.s->s, n->k.u.s->len); break;
    case NK_PRINT: {
        tv v = tp_eval(r, f, n->a);
        r->line = n->line;
        r->what = "{{ }}";
        tp_to_str(r, r->out, v);
        break;
    }
    case NK_BODY: flow = exec_body(r, f, n); break;
    case NK_IF:
        for (const tnode *c = n; c;) {
            if (c->kind != NK_IF) { flow = exec_body(r, f, c); break; }
            if (tp_truthy(tp_eval(r, f, c->a))) { flow = exec_body(r, f, c->body); break; }
            c = c->else_;
        }
        break;
    case NK_FOR: run_loop(r, f, n, tp_eval(r, f, n->b), 1, 0); break;
    case NK_SET: assign(r, f, n->a, tp_eval(r, f, n->b)); break;
    case NK_SETBLOCK:
        assign(r, f, n->a, apply_chain(r, f, n->c, capture(r, frame_start(r, f, n->undef, n->nundef), n->body)));
        break;
    case NK_MACRO: frame_set(r, f, n->name, make_macro(r, n, f)); break;
    case NK_CALLBLOCK: {
        const tnode *call = n->a;
        tv callee = tp_eval(r, f, call->a);
        tp_args args;
        eval_args(r, f, call, &args);
        args.v[args.n] = make_macro(r, n, f);
        args.kw[args.n++] = "caller";
        r->line = n->line;
        r->what = "call block";
        tv out = tp_call(r, callee, &args);
        tp_to_str(r, r->out, out);
        break;
    }
    case NK_FILTERBLOCK: {
        tv s = apply_chain(r, f, n->c, capture(r, frame_start(r, f, n->undef, n->nundef), n->body));
        r->line = n->line;
        r->what = "filter block";
        tp_to_str(r, r->out, s);
        break;
    }
    case NK_WITH: {
        tp_frame *wf = frame_start(r, f, n->undef, n->nundef);
        for (int i = 0; i < n->n; i++) frame_set(r, wf, n->kw[i], tp_eval(r, f, n->v[i]));
        flow = exec_body(r, wf, n->body);
        break;
    }
    case NK_SCOPE: exec_body(r, frame_start(r, f, n->undef, n->nundef), n->body); break;
    case NK_BREAK: flow = FLOW_BREAK; break;
    case NK_CONTINUE: flow = FLOW_CONTINUE; break;
    default: tp_rfail(r, "internal error: statement kind %d", n->kind);
    }
    r->depth--;
    return flow;
}

static int exec_body(tp_render *r, tp_frame *f, const tnode *body) {
    if (!body) return FLOW_NORMAL;
    if (body->kind != NK_BODY) return exec(r, f, body);
    for (int i = 0; i < body->n; i++) {
        int flow = exec(r, f, body->v[i]);
        if (flow != FLOW_NORMAL) return flow;
    }
    return FLOW_NORMAL;
}

/* ---- expressions ----------------------------------------------------------------------- */
static tv eval_cmp(tp_render *r, tp_frame *f, const tnode *n) {
    tv left = tp_eval(r, f, n->a);
    for (int i = 0; i < n->n; i++) {
        tv right = tp_eval(r, f, n->v[i]);
        int op = n->ops[i], ok;
        r->line = n->line;
        r->what = tp_op_label(op);
        switch (op) {
        case OP_EQ: ok = tp_eq(left, right); break;
        case OP_NE: ok = !tp_eq(left, right); break;
        case OP_IN: ok = tp_contains(r, right, left); break;
        case OP_NOTIN: ok = !tp_contains(r, right, left); break;
        default: ok = tp_cmp(r, left, right, op); break;
        }
        if (!ok) return tp_bool(0);
        left = right;
    }
    return tp_bool(1);
}

tv tp_eval(tp_render *r, tp_frame *f, const tnode *n) {
    if (++r->depth > r->max_depth) tp_rfail(r, "the template nests too deeply");
    tp_step(r);
    if (n->fold && !r->soft_slices) {
        r->soft_slices = 1;
        r->depth--;
        tv v = tp_eval(r, f, n);
        r->soft_slices = 0;
        return v;
    }
    tv v;
    switch (n->kind) {
    case NK_CONST: v = n->k; break;
    case NK_NAME:
        if (r->const_mode) tp_rfail(r, "not constant");
        v = lookup(f, n->name);
        break;
    case NK_LIST: case NK_TUPLE:
        v = tp_list_new(r, (size_t)n->n);
        for (int i = 0; i < n->n; i++) v.u.l->v[i] = tp_eval(r, f, n->v[i]);
        v.u.l->n = (size_t)n->n;
        v.sub = n->kind == NK_TUPLE ? SEQ_TUPLE : SEQ_LIST;
        break;
    case NK_DICT:
        v = tp_dict_new(r, (size_t)n->n / 2);
        for (int i = 0; i + 1 < n->n; i += 2) {
            tv k = tp_eval(r, f, n->v[i]), val = tp_eval(r, f, n->v[i + 1]);
            r->line = n->line;
            r->what = "dict literal";
            if (tp_unhashable(k))
                tp_rfail(r, "unhashable type: '%s'", tp_type_name(k));
            tp_dict_set(r, &v, k, val);
        }
        break;
    case NK_ATTR: {
        tv obj = tp_eval(r, f, n->a);
        r->line = n->line;
        r->what = NULL;
        v = tp_getattr(r, obj, n->name);
        break;
    }
    case NK_ITEM: {
        tv obj = tp_eval(r, f, n->a);
        if (n->b->kind == NK_SLICE) {
            const tnode *s = n->b;
            tv p[3];
            const tnode *parts[3] = {s->a, s->b, s->c};
            for (int i = 0; i < 3; i++) p[i] = parts[i] ? tp_eval(r, f, parts[i]) : tp_none();
            r->line = n->line;
            r->what = "slice";
            v = tp_slice(r, obj, p[0], p[1], p[2], r->soft_slices);
        } else {
            tv key = tp_eval(r, f, n->b);
            r->line = n->line;
            r->what = NULL;
            v = tp_getitem(r, obj, key);
        }
        break;
    }
    case NK_CALL: {
        if (r->const_mode) tp_rfail(r, "not constant");
        tv callee = tp_eval(r, f, n->a);
        tp_args args;
        eval_args(r, f, n, &args);
        r->line = n->line;
        r->what = n->attr;
        v = tp_call(r, callee, &args);
        break;
    }
    case NK_FILTER: case NK_TEST: {
        int is_filter = n->kind == NK_FILTER;
        if (r->const_mode && is_filter && (n->id < 0 || tp_filter_needs_context(n->id))) tp_rfail(r, "not constant");
        tv in = tp_eval(r, f, n->a);
        tp_args args;
        eval_args(r, f, n, &args);
        r->line = n->line;
        r->what = n->attr;
        if (n->id < 0) tp_rfail(r, "no %s named '%s'", is_filter ? "filter" : "test", n->name);
        v = is_filter ? tp_apply_filter(r, n->id, in, &args) : tp_bool(tp_apply_test(r, n->id, in, &args) ^ (n->op != 0));
        break;
    }
    case NK_NEG: case NK_POS: {
        tv x = tp_eval(r, f, n->a);
        r->line = n->line;
        r->what = n->kind == NK_NEG ? "unary -" : "unary +";
        if (x.t == TV_UNDEF) tp_undef_fail(r, x);
        if (x.t == TV_FLOAT) v = tp_float(n->kind == NK_NEG ? -x.u.f : x.u.f);
        else if (x.t == TV_INT || x.t == TV_BOOL) {
            if (n->kind == NK_NEG && x.u.i == INT64_MIN) tp_rfail(r, "integer overflow");
            v = tp_int(n->kind == NK_NEG ? -x.u.i : x.u.i);
        } else tp_rfail(r, "bad operand type for %s: '%s'", r->what, tp_type_name(x));
        break;
    }
    case NK_NOT: v = tp_bool(!tp_truthy(tp_eval(r, f, n->a))); break;
    case NK_BIN: {
        tv a = tp_eval(r, f, n->a), b = tp_eval(r, f, n->b);
        r->line = n->line;
        r->what = tp_op_label(n->op);
        v = tp_binop(r, n->op, a, b);
        break;
    }
    case NK_CMP: v = eval_cmp(r, f, n); break;
    case NK_AND: v = tp_eval(r, f, n->a); if (tp_truthy(v)) v = tp_eval(r, f, n->b); break;
    case NK_OR: v = tp_eval(r, f, n->a); if (!tp_truthy(v)) v = tp_eval(r, f, n->b); break;
    case NK_COND:
        if (tp_truthy(tp_eval(r, f, n->a))) v = tp_eval(r, f, n->b);
        else v = n->c ? tp_eval(r, f, n->c) : tp_undef(NULL, -1);
        break;
    case NK_CONCAT: {
        tp_buf b = {0};
        for (int i = 0; i < n->n; i++) {
            tv x = tp_eval(r, f, n->v[i]);
            r->line = n->line;
            r->what = "~";
            tp_to_str(r, &b, x);
        }
        v = tp_buf_str(r, &b);
        break;
    }
    default: tp_rfail(r, "internal error: expression kind %d", n->kind);
    }
    r->depth--;
    return v;
}

/* ---- entry points ---------------------------------------------------------------------- */
/* A zeroed state whose arena reports failures through fail (both inside it). Not inlined:
 * its locals must not live in the callers' setjmp frames. */
__attribute__((noinline)) static void *new_state(size_t size, size_t fail_off, size_t arena_off, size_t limit, char *err, size_t errlen) {
    char *p = calloc(1, size);
    if (!p) {
        snprintf(err, errlen, "template: out of memory");
        return NULL;
    }
    tp_fail *f = (tp_fail *)(p + fail_off);
    tp_arena *a = (tp_arena *)(p + arena_off);
    f->err = err;
    f->errlen = errlen;
    a->fail = f;
    a->limit = limit;
    return p;
}

int ob_tmpl_compile(const char *src, size_t len, ob_tmpl_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!src) return ob_tmpl_compile("", 0, out, err, errlen);
    ob_tmpl_t *t = new_state(sizeof *t, offsetof(ob_tmpl_t, fail), offsetof(ob_tmpl_t, arena), (size_t)256 << 20, err, errlen);
    if (!t) return -1;
    if (setjmp(t->fail.jb)) {
        tp_arena_free(&t->arena);
        free(t);
        return -1;
    }
    if (!tp_utf8_valid(src, len)) tp_failf(&t->fail, "template: the text is not valid UTF-8");
    size_t ntok;
    tp_token *toks = tp_lex(&t->arena, src, len, &ntok);
    t->root = tp_parse(&t->arena, toks, ntok);
    *out = t;
    return 0;
}

void ob_tmpl_free(ob_tmpl_t *t) {
    if (!t) return;
    tp_arena_free(&t->arena);
    free(t);
}

int ob_tmpl_render(const ob_tmpl_t *t, const json_t *vars, const ob_tmpl_opts *opts,
                   char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (vars && !json_is_object(vars)) {
        snprintf(err, errlen, "template: the variables must be a JSON object");
        return -1;
    }
    ob_tmpl_opts o = opts ? *opts : (ob_tmpl_opts){0};
    tp_render *r = new_state(sizeof *r, offsetof(tp_render, fail), offsetof(tp_render, ar),
                             o.max_memory ? o.max_memory : DEFAULT_MAX_MEMORY, err, errlen);
    if (!r) return -1;
    r->ar.line = &r->line;
    r->max_output = o.max_output ? o.max_output : DEFAULT_MAX_OUTPUT;
    r->max_steps = o.max_steps ? o.max_steps : DEFAULT_MAX_STEPS;
    r->max_depth = o.max_depth > 0 ? o.max_depth : DEFAULT_MAX_DEPTH;
    r->now = o.now;
    if (setjmp(r->fail.jb)) {
        tp_arena_free(&r->ar);
        free(r);
        return -1;
    }
    tp_buf buf = {0};
    r->out = &buf;
    r->globals = frame_new(r, NULL);
    if (vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val)
            frame_set(r, r->globals, tp_strndup(&r->ar, key, strlen(key)), tp_from_json(r, val));
    }
    exec_body(r, frame_start(r, r->globals, t->root->undef, t->root->nundef), t->root);
    char *s = malloc(buf.n + 1);
    if (!s) tp_failf(&r->fail, "line %d: out of memory", r->line);
    if (buf.n) memcpy(s, buf.p, buf.n);
    s[buf.n] = 0;
    *out = s;
    if (out_len) *out_len = buf.n;
    tp_arena_free(&r->ar);
    free(r);
    return 0;
}
