/* template_fold.c — jinja2's compile-time constant folding, reduced to the one thing it changes
 * in what a template renders: how a failed slice behaves.
 *
 * jinja2 compiles a slice (`x[1:]`) to a plain Python subscript, so slicing what is not a list
 * or string is an error. But its optimizer first evaluates every expression made only of
 * constants (top down: the largest such expression wins) through the sandbox's getitem, for
 * which a failed slice is an Undefined, and keeps the result when it is a plain literal
 * (None, a number, a string, or lists, tuples and dicts of those); and a {{ }} whose expression
 * is constant is written as the text of its value, whatever it is. So `{{ 1[1:] }}` prints
 * nothing, `{% set y = (not 1[1:]) %}` sets True, but `{% set y = 1[1:] %}` fails. This file
 * finds those expressions by evaluating them with the render-time evaluator in a constant mode
 * (names, calls and context filters are not constant) and marks them; the evaluator then
 * treats failed slices inside them as Undefined.
 *
 * Does not own: evaluation (template_eval.c).
 */
#include <stdlib.h>
#include <string.h>

#include "text/template_int.h"

/* jinja2.compiler.has_safe_repr */
static int safe_value(tv v, int depth) {
    if (depth > 100) return 0;
    switch (v.t) {
    case TV_NONE: case TV_BOOL: case TV_INT: case TV_FLOAT: case TV_STR: return 1;
    case TV_LIST:
        if (v.sub != SEQ_LIST && v.sub != SEQ_TUPLE) return 0;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!safe_value(v.u.l->v[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        for (size_t i = 0; i < v.u.d->n; i++)
            if (!safe_value(v.u.d->k[i], depth + 1) || !safe_value(v.u.d->v[i], depth + 1)) return 0;
        return 1;
    default: return 0;
    }
}

/* Evaluates n as a constant; returns -1 when it is not one, else whether the value is a safe
 * literal. */
static int try_const(tp_render *r, tp_frame *f, const tnode *n) {
    volatile int result = -1;
    if (!setjmp(r->fail.jb)) {
        tv v = tp_eval(r, f, n);
        result = safe_value(v, 0);
    }
    tp_arena_free(&r->ar);
    r->depth = 0;
    r->steps = 0;
    return result;
}

static void fold(tp_render *r, tp_frame *f, tnode *n, int output) {
    if (!n) return;
    if (n->kind < NK_BODY) {
        if (n->kind != NK_CONST && n->kind != NK_SLICE && n->kind != NK_NSREF) {
            int c = try_const(r, f, n);
            if (c > 0 || (c == 0 && output)) {
                n->fold = 1;
                return;
            }
        }
        fold(r, f, n->a, 0);
        fold(r, f, n->b, 0);
        fold(r, f, n->c, 0);
        for (int i = 0; i < n->n; i++) fold(r, f, n->v[i], 0);
        return;
    }
    switch (n->kind) {
    case NK_PRINT: fold(r, f, n->a, 1); return;
    case NK_SET: fold(r, f, n->b, 0); return;
    case NK_FOR: fold(r, f, n->b, 0); fold(r, f, n->c, 0); break;
    case NK_IF: fold(r, f, n->a, 0); break;
    case NK_SETBLOCK: case NK_FILTERBLOCK: break;   /* their filter chains run on the body */
    case NK_CALLBLOCK: fold(r, f, n->a, 0); /* fall through */
    case NK_MACRO: case NK_WITH:
        for (int i = 0; i < n->n; i++) fold(r, f, n->v[i], 0);
        break;
    case NK_BODY:
        for (int i = 0; i < n->n; i++) fold(r, f, n->v[i], 0);
        return;
    default: break;
    }
    fold(r, f, n->body, 0);
    fold(r, f, n->else_, 0);
}

void tp_fold_constants(tnode *root) {
    tp_render *r = calloc(1, sizeof *r);
    if (!r) return;   /* folding only refines errors into Undefined; without it nothing breaks */
    char err[128];
    r->fail.err = err;
    r->fail.errlen = sizeof err;
    r->ar.fail = &r->fail;
    r->ar.limit = (size_t)16 << 20;
    r->max_output = (size_t)1 << 20;
    r->max_steps = 100000;
    r->max_depth = 1000;
    r->const_mode = 1;
    r->soft_slices = 1;
    tp_frame empty = {0};
    fold(r, &empty, root, 0);
    tp_arena_free(&r->ar);
    free(r);
}
