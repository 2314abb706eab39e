/* template_scope.c — jinja2's compile-time symbol analysis, reduced to the one thing it decides
 * that a dynamic lookup would get wrong: which names a frame starts with as "missing".
 *
 * jinja2 gives every frame (the template, a for loop's body, a macro, a call / filter / with /
 * set block) its own variables and decides, when it compiles, how each starts: a name whose
 * first use in the frame is a load starts as the context's value; a name stored in the frame
 * and known to an enclosing frame starts as that frame's value; a name stored first, and
 * unknown to the enclosing frames, starts missing, so a loop or macro that reads it before the
 * store sees an Undefined even when the render variables have that name
 * (`{% for m in x %}{{ y }}{% endfor %}{% set y = 1 %}` prints nothing for y). If statements
 * do not make frames; a name stored in only some of their branches starts as the context's
 * value (or the enclosing frame's). This file mirrors jinja2's idtracking for that, and marks
 * each frame node with its missing names; the evaluator binds them when the frame starts.
 *
 * Does not own: parsing (template_parse.c), evaluation (template_eval.c).
 */
#include <string.h>

#include "text/template_int.h"

enum { K_RESOLVE, K_UNDEF, K_ALIAS, K_PARAM };

typedef struct scope {
    struct scope *parent;
    const char **names;   /* refs: names defined in this frame */
    uint8_t *kinds;
    int n, cap;
    const char **stores;  /* names stored in this frame */
    int ns, scap;
} scope;

typedef struct { tp_arena *a; } an;

static int find_in(const char *const *v, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i], name)) return i;
    return -1;
}

static int find_ref(const scope *s, const char *name) {
    for (; s; s = s->parent)
        if (find_in(s->names, s->n, name) >= 0) return 1;
    return 0;
}

static void grow(an *A, const char ***v, uint8_t **k, int n, int *cap) {
    if (n < *cap) return;
    int nc = *cap ? *cap * 2 : 8;
    const char **nv = tp_alloc(A->a, (size_t)nc * sizeof *nv);
    if (n) memcpy(nv, *v, (size_t)n * sizeof *nv);
    *v = nv;
    if (k) {
        uint8_t *nk = tp_alloc(A->a, (size_t)nc);
        if (n) memcpy(nk, *k, (size_t)n);
        *k = nk;
    }
    *cap = nc;
}

static void define(an *A, scope *s, const char *name, int kind) {
    int i = find_in(s->names, s->n, name);
    if (i >= 0) { s->kinds[i] = (uint8_t)kind; return; }
    grow(A, &s->names, &s->kinds, s->n, &s->cap);
    s->names[s->n] = name;
    s->kinds[s->n++] = (uint8_t)kind;
}

static void add_store(an *A, scope *s, const char *name) {
    if (find_in(s->stores, s->ns, name) >= 0) return;
    grow(A, &s->stores, NULL, s->ns, &s->scap);
    s->stores[s->ns++] = name;
}

static void sc_load(an *A, scope *s, const char *name) {
    if (!find_ref(s, name)) define(A, s, name, K_RESOLVE);
}

static void sc_store(an *A, scope *s, const char *name) {
    add_store(A, s, name);
    if (find_in(s->names, s->n, name) >= 0) return;
    define(A, s, name, s->parent && find_ref(s->parent, name) ? K_ALIAS : K_UNDEF);
}

static void sc_param(an *A, scope *s, const char *name) {
    add_store(A, s, name);
    define(A, s, name, K_PARAM);
}

static scope *copy_scope(an *A, const scope *s) {
    scope *c = tp_alloc(A->a, sizeof *c);
    *c = *s;
    c->names = NULL; c->kinds = NULL; c->n = c->cap = 0;
    c->stores = NULL; c->ns = c->scap = 0;
    for (int i = 0; i < s->n; i++) define(A, c, s->names[i], s->kinds[i]);
    for (int i = 0; i < s->ns; i++) add_store(A, c, s->stores[i]);
    return c;
}

/* jinja2's Symbols.branch_update: merge the branches of an if; a name stored in some branches
 * but not all starts as the enclosing frame's value, or the context's. */
static void branch_update(an *A, scope *s, scope **br, int nbr) {
    const char *names[256];
    int counts[256], nn = 0;
    for (int b = 0; b < nbr; b++)
        for (int i = 0; i < br[b]->ns; i++) {
            const char *name = br[b]->stores[i];
            if (find_in(s->stores, s->ns, name) >= 0) continue;
            int k = find_in(names, nn, name);
            if (k < 0 && nn < 256) { names[nn] = name; counts[nn++] = 1; }
            else if (k >= 0) counts[k]++;
        }
    for (int b = 0; b < nbr; b++) {
        for (int i = 0; i < br[b]->n; i++) define(A, s, br[b]->names[i], br[b]->kinds[i]);
        for (int i = 0; i < br[b]->ns; i++) add_store(A, s, br[b]->stores[i]);
    }
    for (int k = 0; k < nn; k++) {
        if (counts[k] == nbr) continue;
        define(A, s, names[k], s->parent && find_ref(s->parent, names[k]) ? K_ALIAS : K_RESOLVE);
    }
}

static void visit(an *A, scope *s, const tnode *n);

static void store_target(an *A, scope *s, const tnode *t) {
    if (t->kind == NK_NAME) sc_store(A, s, t->name);
    else if (t->kind == NK_NSREF) sc_load(A, s, t->name);
    else for (int i = 0; i < t->n; i++) store_target(A, s, t->v[i]);
}

/* An if and its elif chain: branches are the body, the elifs (each an if of its own, without
 * an else, as jinja2's parser builds them) and the final else. */
static void visit_if(an *A, scope *s, const tnode *n, int single) {
    visit(A, s, n->a);
    scope *br[3];
    br[0] = copy_scope(A, s);
    visit(A, br[0], n->body);
    br[1] = copy_scope(A, s);
    br[2] = copy_scope(A, s);
    if (!single) {
        const tnode *e = n->else_;
        while (e && e->kind == NK_IF) {
            visit_if(A, br[1], e, 1);
            e = e->else_;
        }
        visit(A, br[2], e);
    }
    branch_update(A, s, br, 3);
}

/* FrameSymbolVisitor: what a node loads and stores in the frame it runs in. */
static void visit(an *A, scope *s, const tnode *n) {
    if (!n) return;
    switch (n->kind) {
    case NK_NAME: sc_load(A, s, n->name); return;
    case NK_NSREF: sc_load(A, s, n->name); return;
    case NK_SET: visit(A, s, n->b); store_target(A, s, n->a); return;
    case NK_SETBLOCK: store_target(A, s, n->a); return;
    case NK_FOR: visit(A, s, n->b); return;
    case NK_MACRO: sc_store(A, s, n->name); return;
    case NK_CALLBLOCK: visit(A, s, n->a); return;
    case NK_FILTERBLOCK: visit(A, s, n->c); return;
    case NK_WITH: for (int i = 0; i < n->n; i++) visit(A, s, n->v[i]); return;
    case NK_SCOPE: return;
    case NK_IF: visit_if(A, s, n, 0); return;
    default:
        visit(A, s, n->a);
        visit(A, s, n->b);
        visit(A, s, n->c);
        for (int i = 0; i < n->n; i++) visit(A, s, n->v[i]);
        return;
    }
}

static void frames_in(an *A, scope *s, const tnode *n);

/* Analyzes one frame: parameters, then its body; records its missing names; then the frames
 * nested in it. */
static void frame(an *A, scope *parent, tnode *owner, const tnode *body, const tnode *params_of, int is_for,
                  const tnode *defaults_of, int else_branch) {
    scope *s = tp_alloc(A->a, sizeof *s);
    s->parent = parent;
    if (is_for) {
        sc_param(A, s, "loop");
        const tnode *t = params_of->a;
        if (t->kind == NK_NAME) sc_param(A, s, t->name);
        else for (int i = 0; i < t->n; i++) if (t->v[i]->kind == NK_NAME) sc_param(A, s, t->v[i]->name);
    } else if (params_of) {
        for (int i = 0; i < params_of->n; i++) sc_param(A, s, params_of->kw[i]);
        if (params_of->kind != NK_WITH) {
            sc_param(A, s, "varargs");
            sc_param(A, s, "kwargs");
            sc_param(A, s, "caller");
        }
    }
    if (defaults_of)
        for (int i = 0; i < defaults_of->n; i++) visit(A, s, defaults_of->v[i]);
    visit(A, s, body);
    int nu = 0;
    for (int i = 0; i < s->n; i++) nu += s->kinds[i] == K_UNDEF;
    if (nu) {
        const char **u = tp_alloc(A->a, (size_t)nu * sizeof *u);
        int k = 0;
        for (int i = 0; i < s->n; i++)
            if (s->kinds[i] == K_UNDEF) u[k++] = s->names[i];
        if (else_branch) { owner->undef_else = u; owner->nundef_else = nu; }
        else { owner->undef = u; owner->nundef = nu; }
    }
    frames_in(A, s, body);
}

/* Finds the frames a frame's statements open (if statements do not open one). */
static void frames_in(an *A, scope *s, const tnode *n) {
    if (!n) return;
    tnode *m = (tnode *)n;
    switch (n->kind) {
    case NK_BODY: for (int i = 0; i < n->n; i++) frames_in(A, s, n->v[i]); return;
    case NK_IF: frames_in(A, s, n->body); frames_in(A, s, n->else_); return;
    case NK_FOR:
        frame(A, s, m, n->body, n, 1, NULL, 0);
        if (n->else_) frame(A, s, m, n->else_, NULL, 0, NULL, 1);
        return;
    case NK_MACRO: case NK_CALLBLOCK: frame(A, s, m, n->body, n, 0, n, 0); return;
    case NK_WITH: frame(A, s, m, n->body, n, 0, NULL, 0); return;
    case NK_FILTERBLOCK: case NK_SETBLOCK: case NK_SCOPE: frame(A, s, m, n->body, NULL, 0, NULL, 0); return;
    default: return;
    }
}

void tp_scope_analyze(tp_arena *a, tnode *root) {
    an A = {a};
    frame(&A, NULL, root, root, NULL, 0, NULL, 0);
}
