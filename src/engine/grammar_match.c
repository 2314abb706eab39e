/* grammar_match.c — the incremental grammar matcher and the logits filter.
 *
 * Owns: the per-request state: the set of parse stacks the output so far allows, advancing it over
 * bytes, the token mask (which vocabulary tokens may come next) and the ob_req_params callbacks.
 * Does not own: grammar construction (grammar_gbnf.c, grammar_schema.c), the vocabulary trie
 * (grammar_vocab.c), sampling.
 *
 * Representation. A parse stack is a linked list of frames (pos, aux, parent): pos is the next
 * element of some alternative, aux is a repetition count (GE_REP frames) or a partial UTF-8 code
 * point (terminal frames). Frames are hash-consed ("nodes"), so equal stacks are equal node ids,
 * and a set of stacks is a sorted array of ids, itself interned as a "DFA state". The stacks of a
 * state always have a terminal on top (class or token), or are empty (node 0: the match is
 * complete). Advancing over one byte is a pure function of (state, byte), cached in a dense
 * 256-entry row per state: once warm, the matcher is a lazily built DFA over the pushdown
 * language, and the expensive stack manipulation happens once per distinct (state, byte).
 *
 * Filter. The allowed tokens are found by walking the vocabulary trie in preorder with a stack of
 * states (one per depth): a dead transition skips the whole subtree. The resulting bitmask is
 * cached per state (a few slots, least recently used), so a state seen before (the inside of a
 * JSON string, say) costs one pass over the logits.
 *
 * Limits. Nodes, states and per-step work are bounded. Between steps, caches past a soft size
 * are flushed (the current stacks are re-interned into empty tables). Inside a step, a transition
 * that would pass a hard limit counts as dead: a token is then refused that might have been
 * valid, never the other way round, so the output still matches.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_int.h"

typedef struct { int32_t pos; uint32_t aux; int32_t parent; uint32_t mark; } gnode;
typedef struct { uint32_t off, n, hash; int32_t mask; uint8_t accept, tokens; } gset;

#define N_MASK_SLOTS 16
#define SOFT_NODES (1 << 18)
#define HARD_NODES (1 << 21)
#define SOFT_SETS 2048
#define HARD_SETS (1 << 15)
#define SOFT_ITEMS (1 << 20)
#define HARD_ITEMS (1 << 23)
#define MAX_WORK (1 << 18)       /* frames expanded in one transition */
#define CALL_WORK (1 << 20)      /* frames expanded in one filter or accept call (the test suite
                                  * peaks at ~3k, a 150k vocabulary included) */
#define MAX_SET 8192             /* stacks in one state */

/* rows[] entries: 0 unknown, 1 dead, else target state + 2 */
#define T_UNKNOWN 0
#define T_DEAD 1

/* aux of a terminal frame holding a partial code point */
#define PART_FLAG 0x80000000u
#define PART_ANY 0x40000000u   /* every completion is in the class: the bits read are not kept */
#define PART(acc, rem, len) (PART_FLAG | ((uint32_t)(len) << 26) | ((uint32_t)(rem) << 24) | (acc))

struct ob_grammar_state {
    ob_grammar_t *g;
    ob_grammar_vocab_t *v;
    gnode *nodes;  int32_t n_nodes, cap_nodes;
    int32_t *nhash; uint32_t nhmask;
    uint32_t gen;
    gset *sets;    int32_t n_sets, cap_sets;
    int32_t *items; uint32_t n_items, cap_items;
    int32_t *shash; uint32_t shmask;
    int32_t *rows;                      /* [cap_sets][256] */
    uint64_t *masks;                    /* [N_MASK_SLOTS][words] */
    int32_t mask_owner[N_MASK_SLOTS];
    uint32_t mask_used[N_MASK_SLOTS];
    uint8_t mask_any[N_MASK_SLOTS];
    uint32_t tick;
    int32_t words;
    int32_t *work;  int32_t n_work, cap_work;
    int32_t *out;   int32_t n_out, cap_out;
    int32_t *dstack;                    /* [max_depth + 1] */
    int32_t start, cur;
    int failed, eog, abort;
    uint32_t steps;
    uint32_t call_steps;                /* run_work steps since the filter/accept call began */
};

/* ---- nodes --------------------------------------------------------------------------------- */

static uint32_t mix3(uint32_t a, uint32_t b, uint32_t c) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL ^ (uint64_t)b * 0xC2B2AE3D27D4EB4FULL ^ (uint64_t)c * 0x165667B19E3779F9ULL;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return (uint32_t)(h ^ (h >> 32));
}

static int nodes_rehash(ob_grammar_state_t *st, uint32_t cap) {
    int32_t *h = malloc((size_t)cap * sizeof *h);
    if (!h) return -1;
    memset(h, 0xFF, (size_t)cap * sizeof *h);
    for (int32_t i = 1; i < st->n_nodes; i++) {
        uint32_t k = mix3((uint32_t)st->nodes[i].pos, st->nodes[i].aux, (uint32_t)st->nodes[i].parent) & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = i;
    }
    free(st->nhash);
    st->nhash = h;
    st->nhmask = cap - 1;
    return 0;
}

/* The node for frame (pos, aux, parent); -1 (and abort) past the limit or out of memory. */
static int32_t node(ob_grammar_state_t *st, int32_t pos, uint32_t aux, int32_t parent) {
    uint32_t k = mix3((uint32_t)pos, aux, (uint32_t)parent) & st->nhmask;
    for (int32_t id; (id = st->nhash[k]) >= 0; k = (k + 1) & st->nhmask) {
        const gnode *n = &st->nodes[id];
        if (n->pos == pos && n->aux == aux && n->parent == parent) return id;
    }
    if (st->n_nodes >= HARD_NODES) { st->abort = 1; return -1; }
    if (st->n_nodes == st->cap_nodes) {
        int32_t cap = st->cap_nodes * 2;
        gnode *nn = realloc(st->nodes, (size_t)cap * sizeof *nn);
        if (!nn) { st->abort = 1; return -1; }
        st->nodes = nn;
        st->cap_nodes = cap;
    }
    int32_t id = st->n_nodes++;
    st->nodes[id] = (gnode){pos, aux, parent, 0};
    if ((uint32_t)st->n_nodes * 2 > st->nhmask + 1) {
        if (nodes_rehash(st, (st->nhmask + 1) * 2)) { st->n_nodes--; st->abort = 1; return -1; }
    } else st->nhash[k] = id;
    return id;
}

/* ---- sets (DFA states) ------------------------------------------------------------------------ */

static uint32_t hash_items(const int32_t *it, int32_t n) {
    uint64_t h = 0x84222325CBF29CE4ULL ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) { h ^= (uint32_t)it[i]; h *= 0x100000001B3ULL; h ^= h >> 31; }
    return (uint32_t)(h ^ (h >> 32));
}

static int sets_rehash(ob_grammar_state_t *st, uint32_t cap) {
    int32_t *h = malloc((size_t)cap * sizeof *h);
    if (!h) return -1;
    memset(h, 0xFF, (size_t)cap * sizeof *h);
    for (int32_t i = 0; i < st->n_sets; i++) {
        uint32_t k = st->sets[i].hash & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = i;
    }
    free(st->shash);
    st->shash = h;
    st->shmask = cap - 1;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Interns st->out[0..n_out) (sorted and deduplicated here). Returns the state, or -1. */
static int32_t set_intern(ob_grammar_state_t *st) {
    int32_t n = st->n_out, *it = st->out;
    if (n == 0 || st->abort) return -1;
    if (n > 1) {
        if (n < 16) {
            for (int32_t i = 1; i < n; i++) {
                int32_t x = it[i], j = i;
                while (j > 0 && it[j - 1] > x) { it[j] = it[j - 1]; j--; }
                it[j] = x;
            }
        } else qsort(it, (size_t)n, sizeof *it, cmp_i32);
        int32_t m = 1;
        for (int32_t i = 1; i < n; i++) if (it[i] != it[m - 1]) it[m++] = it[i];
        n = m;
    }
    uint32_t h = hash_items(it, n);
    uint32_t k = h & st->shmask;
    for (int32_t id; (id = st->shash[k]) >= 0; k = (k + 1) & st->shmask) {
        const gset *s = &st->sets[id];
        if (s->hash == h && s->n == (uint32_t)n && memcmp(st->items + s->off, it, (size_t)n * sizeof *it) == 0) return id;
    }
    if (st->n_sets >= HARD_SETS || st->n_items + (uint32_t)n > HARD_ITEMS) { st->abort = 1; return -1; }
    if (st->n_sets == st->cap_sets) {
        int32_t cap = st->cap_sets * 2;
        gset *ns = realloc(st->sets, (size_t)cap * sizeof *ns);
        if (!ns) { st->abort = 1; return -1; }
        st->sets = ns;
        int32_t *nr = realloc(st->rows, (size_t)cap * 256 * sizeof *nr);
        if (!nr) { st->abort = 1; return -1; }
        st->rows = nr;
        st->cap_sets = cap;
    }
    if (st->n_items + (uint32_t)n > st->cap_items) {
        uint32_t cap = st->cap_items;
        while (cap < st->n_items + (uint32_t)n) cap *= 2;
        int32_t *ni = realloc(st->items, (size_t)cap * sizeof *ni);
        if (!ni) { st->abort = 1; return -1; }
        st->items = ni;
        st->cap_items = cap;
    }
    int32_t id = st->n_sets++;
    gset *s = &st->sets[id];
    s->off = st->n_items;
    s->n = (uint32_t)n;
    s->hash = h;
    s->mask = -1;
    s->accept = it[0] == 0;
    s->tokens = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = it[i] ? st->g->elems[st->nodes[it[i]].pos].type : GE_END;
        if (t == GE_TOKEN || t == GE_NTOKEN) s->tokens = 1;
    }
    memcpy(st->items + st->n_items, it, (size_t)n * sizeof *it);
    st->n_items += (uint32_t)n;
    memset(st->rows + (size_t)id * 256, 0, 256 * sizeof *st->rows);
    if ((uint32_t)st->n_sets * 2 > st->shmask + 1) {
        if (sets_rehash(st, (st->shmask + 1) * 2)) { st->abort = 1; return -1; }
    } else st->shash[k] = id;
    return id;
}

/* ---- expanding frames ------------------------------------------------------------------------ */

static void push_work(ob_grammar_state_t *st, int32_t id) {
    if (id < 0) { st->abort = 1; return; }
    if (st->n_work == st->cap_work) {
        int32_t cap = st->cap_work * 2;
        int32_t *w = realloc(st->work, (size_t)cap * sizeof *w);
        if (!w) { st->abort = 1; return; }
        st->work = w;
        st->cap_work = cap;
    }
    st->work[st->n_work++] = id;
}

static void push_out(ob_grammar_state_t *st, int32_t id) {
    if (st->n_out >= MAX_SET) { st->abort = 1; return; }
    if (st->n_out == st->cap_out) {
        int32_t cap = st->cap_out * 2;
        int32_t *o = realloc(st->out, (size_t)cap * sizeof *o);
        if (!o) { st->abort = 1; return; }
        st->out = o;
        st->cap_out = cap;
    }
    st->out[st->n_out++] = id;
}

/* Continue after the element at pos (its frame's parent is parent). */
static void push_next(ob_grammar_state_t *st, int32_t pos, int32_t parent) {
    if (st->g->elems[pos + 1].type == GE_END) push_work(st, parent);
    else push_work(st, node(st, pos + 1, 0, parent));
}

/* Pushes every alternative of rule r with continuation frame base. */
static void push_rule(ob_grammar_state_t *st, int32_t r, int32_t base) {
    const ob_grammar_t *g = st->g;
    if (base < 0) { st->abort = 1; return; }
    const ob_grule *ru = &g->rules[r];
    for (int32_t a = 0; a < ru->n_alt; a++) {
        int32_t s = g->alts[ru->alt_off + a];
        if (g->elems[s].type == GE_END) push_work(st, base);
        else push_work(st, node(st, s, 0, base));
    }
}

static void new_gen(ob_grammar_state_t *st) {
    if (++st->gen == 0) {   /* wrapped: old marks could collide */
        for (int32_t i = 0; i < st->n_nodes; i++) st->nodes[i].mark = 0;
        st->gen = 1;
    }
    st->n_work = st->n_out = 0;
    st->abort = 0;
    st->steps = 0;
}

/* Expands the work list until every stack has a terminal on top (into out). Each node is
 * expanded once per generation: stacks reachable two ways are found once, and nothing loops. */
static void run_work(ob_grammar_state_t *st) {
    const ob_grammar_t *g = st->g;
    while (st->n_work && !st->abort) {
        int32_t x = st->work[--st->n_work];
        if (++st->steps > MAX_WORK || ++st->call_steps > CALL_WORK) { st->abort = 1; break; }
        if (x == 0) { push_out(st, 0); continue; }
        gnode *nd = &st->nodes[x];
        if (nd->mark == st->gen) continue;
        nd->mark = st->gen;
        int32_t pos = nd->pos, parent = nd->parent;
        uint32_t aux = nd->aux;
        const ob_gelem *e = &g->elems[pos];
        switch (e->type) {
        case GE_CLASS: case GE_TOKEN: case GE_NTOKEN:
            push_out(st, x);
            break;
        case GE_REF: {
            int32_t base = g->elems[pos + 1].type == GE_END ? parent : node(st, pos + 1, 0, parent);
            push_rule(st, e->arg, base);
            break;
        }
        case GE_REP: {
            const ob_grep *rp = &g->reps[e->arg];
            uint32_t c = aux;
            if (rp->max < 0 || c < (uint32_t)rp->max) {
                /* unbounded and past the minimum: counting further changes nothing */
                uint32_t c2 = (rp->max < 0 && c >= (uint32_t)rp->min) ? c : c + 1;
                push_rule(st, rp->rule, node(st, pos, c2, parent));
            }
            if (c >= (uint32_t)rp->min) push_next(st, pos, parent);
            break;
        }
        default:
            st->abort = 1;   /* GE_END is never a frame's position */
        }
    }
}

/* ---- transitions ------------------------------------------------------------------------------ */

static int class_hits(const ob_grammar_t *g, int32_t cl, uint32_t lo, uint32_t hi) {
    const ob_grange *r = g->ranges + g->classes[cl].off;
    int32_t a = 0, b = g->classes[cl].n;
    while (a < b) {   /* first range with r.hi >= lo */
        int32_t m = (a + b) / 2;
        if (r[m].hi < lo) a = m + 1; else b = m;
    }
    return a < g->classes[cl].n && r[a].lo <= hi;
}

static int class_covers(const ob_grammar_t *g, int32_t cl, uint32_t lo, uint32_t hi) {
    const ob_grange *r = g->ranges + g->classes[cl].off;
    int32_t a = 0, b = g->classes[cl].n;
    while (a < b) {
        int32_t m = (a + b) / 2;
        if (r[m].hi < lo) a = m + 1; else b = m;
    }
    return a < g->classes[cl].n && r[a].lo <= lo && r[a].hi >= hi;
}

/* Feeds byte b to the terminal frame x: a complete code point in the class continues after it;
 * a valid prefix whose completions meet the class becomes a partial frame. When every valid
 * completion is in the class, the partial frame forgets the bits read so far (PART_ANY): the
 * inside of a JSON string then has one partial state per remaining length instead of one per
 * prefix, which keeps the number of DFA states (and the first walk of the trie) small. */
static void step_terminal(ob_grammar_state_t *st, int32_t x, unsigned b) {
    const ob_grammar_t *g = st->g;
    const gnode nd = st->nodes[x];
    const ob_gelem *e = &g->elems[nd.pos];
    if (e->type != GE_CLASS) return;
    uint32_t acc, rem, len;
    if (!(nd.aux & PART_FLAG)) {
        if (b < 0x80) {
            if (class_hits(g, e->arg, b, b)) push_next(st, nd.pos, nd.parent);
            return;
        }
        if (b >= 0xC2 && b <= 0xDF) { acc = b & 0x1F; len = 2; }
        else if (b >= 0xE0 && b <= 0xEF) { acc = b & 0x0F; len = 3; }
        else if (b >= 0xF0 && b <= 0xF4) { acc = b & 0x07; len = 4; }
        else return;
        rem = len - 1;
    } else if (nd.aux & PART_ANY) {
        if ((b & 0xC0) != 0x80) return;
        rem = ((nd.aux >> 24) & 3) - 1;
        len = (nd.aux >> 26) & 7;
        if (rem == 0) push_next(st, nd.pos, nd.parent);
        else push_out(st, node(st, nd.pos, PART(0, rem, len) | PART_ANY, nd.parent));
        return;
    } else {
        if ((b & 0xC0) != 0x80) return;
        acc = nd.aux & 0x1FFFFF;
        rem = (nd.aux >> 24) & 3;
        len = (nd.aux >> 26) & 7;
        if (rem == len - 1) {   /* first continuation byte: the lead byte's extra limits */
            if (len == 3 && acc == 0 && b < 0xA0) return;      /* overlong */
            if (len == 3 && acc == 0xD && b > 0x9F) return;    /* surrogate */
            if (len == 4 && acc == 0 && b < 0x90) return;      /* overlong */
            if (len == 4 && acc == 4 && b > 0x8F) return;      /* > U+10FFFF */
        }
        acc = (acc << 6) | (b & 0x3F);
        rem--;
        if (rem == 0) {
            if (class_hits(g, e->arg, acc, acc)) push_next(st, nd.pos, nd.parent);
            return;
        }
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = acc << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_cp[len]) lo = min_cp[len];
    if (hi > OB_CP_MAX) hi = OB_CP_MAX;
    if (lo > hi || !class_hits(g, e->arg, lo, hi)) return;
    /* right after E0 ED F0 F4 the next byte has extra limits: keep those leads exact */
    int special = rem == len - 1 && ((len == 3 && (acc == 0 || acc == 0xD)) || (len == 4 && (acc == 0 || acc == 4)));
    uint32_t aux = !special && class_covers(g, e->arg, lo, hi) ? PART(0, rem, len) | PART_ANY : PART(acc, rem, len);
    push_out(st, node(st, nd.pos, aux, nd.parent));
}

/* The state after byte b from state s: a state id or -1 (dead). Cached in rows. */
static int32_t trans_compute(ob_grammar_state_t *st, int32_t s, unsigned b) {
    new_gen(st);
    uint32_t off = st->sets[s].off, n = st->sets[s].n;
    for (uint32_t i = 0; i < n && !st->abort; i++) {
        int32_t x = st->items[off + i];
        if (x) step_terminal(st, x, b);
    }
    run_work(st);
    int32_t t = set_intern(st);
    if (!st->abort) st->rows[(size_t)s * 256 + b] = t < 0 ? T_DEAD : t + 2;
    return t;
}

static inline int32_t trans(ob_grammar_state_t *st, int32_t s, unsigned b) {
    int32_t t = st->rows[(size_t)s * 256 + b];
    if (t == T_UNKNOWN) return trans_compute(st, s, b);
    return t - 2;
}

/* The start state (stacks of root's alternatives). */
static int32_t start_state(ob_grammar_state_t *st) {
    new_gen(st);
    push_work(st, node(st, 0, 0, 0));
    run_work(st);
    return set_intern(st);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void tables_clear(ob_grammar_state_t *st) {
    st->n_nodes = 1;
    st->nodes[0] = (gnode){-1, 0, -1, 0};
    memset(st->nhash, 0xFF, ((size_t)st->nhmask + 1) * sizeof *st->nhash);
    st->n_sets = 0;
    st->n_items = 0;
    memset(st->shash, 0xFF, ((size_t)st->shmask + 1) * sizeof *st->shash);
    for (int i = 0; i < N_MASK_SLOTS; i++) st->mask_owner[i] = -1;
}

void ob_grammar_state_free(ob_grammar_state_t *st) {
    if (!st) return;
    ob_grammar_free(st->g);
    ob_grammar_vocab_free(st->v);
    free(st->nodes); free(st->nhash); free(st->sets); free(st->items); free(st->shash);
    free(st->rows); free(st->masks); free(st->work); free(st->out); free(st->dstack);
    free(st);
}

ob_grammar_state_t *ob_grammar_state_new_vocab(const ob_grammar_t *g, const ob_grammar_vocab_t *v,
                                               char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    if (!g) { snprintf(err, errlen, "grammar: no grammar"); return NULL; }
    if (v && g->max_token >= v->n_vocab) {
        snprintf(err, errlen, "grammar: token <[%d]> is outside the vocabulary (%d tokens)", g->max_token, v->n_vocab);
        return NULL;
    }
    ob_grammar_state_t *st = calloc(1, sizeof *st);
    if (!st) goto oom;
    st->g = ob_grammar_ref(g);
    st->v = v ? ob_grammar_vocab_ref(v) : NULL;
    st->cap_nodes = 1024;
    st->nodes = malloc((size_t)st->cap_nodes * sizeof *st->nodes);
    st->nhmask = 2047;
    st->nhash = malloc(((size_t)st->nhmask + 1) * sizeof *st->nhash);
    st->cap_sets = 64;
    st->sets = malloc((size_t)st->cap_sets * sizeof *st->sets);
    st->rows = malloc((size_t)st->cap_sets * 256 * sizeof *st->rows);
    st->shmask = 255;
    st->shash = malloc(((size_t)st->shmask + 1) * sizeof *st->shash);
    st->cap_items = 1024;
    st->items = malloc((size_t)st->cap_items * sizeof *st->items);
    st->cap_work = st->cap_out = 256;
    st->work = malloc((size_t)st->cap_work * sizeof *st->work);
    st->out = malloc((size_t)st->cap_out * sizeof *st->out);
    if (!st->nodes || !st->nhash || !st->sets || !st->rows || !st->shash || !st->items || !st->work || !st->out) goto oom;
    if (v) {
        st->words = (v->n_vocab + 63) / 64;
        st->masks = malloc((size_t)N_MASK_SLOTS * (size_t)st->words * sizeof *st->masks);
        st->dstack = malloc(((size_t)v->max_depth + 2) * sizeof *st->dstack);
        if (!st->masks || !st->dstack) goto oom;
    }
    tables_clear(st);
    st->start = st->cur = start_state(st);
    if (st->cur < 0) {
        snprintf(err, errlen, "grammar: the start of the grammar expands to more than %d alternatives", MAX_SET);
        ob_grammar_state_free(st);
        return NULL;
    }
    return st;
oom:
    snprintf(err, errlen, "grammar: out of memory");
    ob_grammar_state_free(st);
    return NULL;
}

ob_grammar_state_t *ob_grammar_state_new(const ob_grammar_t *g, const ob_tokenizer_t *tok) {
    char err[256];
    ob_grammar_vocab_t *v = NULL;
    if (tok && !(v = ob_grammar_vocab_new(tok, err, sizeof err))) return NULL;
    ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, v, err, sizeof err);
    ob_grammar_vocab_free(v);   /* the state holds its own reference */
    return st;
}

int ob_grammar_check_start(const ob_grammar_t *g, char *err, size_t errlen) {
    ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, NULL, err, errlen);
    if (!st) return -1;
    ob_grammar_state_free(st);
    return 0;
}

/* Re-interns the current stacks into empty tables (caches past their soft size). */
static int flush(ob_grammar_state_t *st) {
    gset cs = st->sets[st->cur];
    int32_t n = (int32_t)cs.n;
    int32_t total = 0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t x = st->items[cs.off + i]; x > 0; x = st->nodes[x].parent) total++;
    /* Each stack as its frames bottom-up, with a -1 separator. */
    gnode *fr = malloc(((size_t)total + (size_t)n + 1) * sizeof *fr);
    if (!fr) return -1;
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t start = k;
        for (int32_t x = st->items[cs.off + i]; x > 0; x = st->nodes[x].parent) fr[k++] = st->nodes[x];
        for (int32_t a = start, b = k - 1; a < b; a++, b--) { gnode t = fr[a]; fr[a] = fr[b]; fr[b] = t; }
        fr[k++].pos = -1;
    }
    tables_clear(st);
    new_gen(st);
    for (int32_t i = 0; i < k;) {
        int32_t id = 0;
        for (; fr[i].pos >= 0; i++) id = node(st, fr[i].pos, fr[i].aux, id);
        i++;
        push_out(st, id);
    }
    free(fr);
    st->start = -1;
    st->cur = set_intern(st);
    if (st->cur < 0) { st->failed = 1; return -1; }
    return 0;
}

static void maybe_flush(ob_grammar_state_t *st) {
    if (st->n_nodes > SOFT_NODES || st->n_sets > SOFT_SETS || st->n_items > SOFT_ITEMS) flush(st);
}

void ob_grammar_state_reset(ob_grammar_state_t *st) {
    if (!st) return;
    st->failed = st->eog = 0;
    st->call_steps = 0;
    if (st->start < 0) {
        maybe_flush(st);
        st->start = start_state(st);
    }
    st->cur = st->start;
    if (st->cur < 0) st->failed = 1;
}

/* ---- bytes and tokens ------------------------------------------------------------------------- */

static int32_t walk(ob_grammar_state_t *st, int32_t s, const unsigned char *p, size_t n) {
    st->abort = 0;
    for (size_t i = 0; i < n && s >= 0; i++) s = trans(st, s, p[i]);
    return s;
}

int ob_grammar_state_accept_bytes(ob_grammar_state_t *st, const char *bytes, size_t n) {
    if (!st || st->failed || st->eog || (!bytes && n)) return -1;
    st->call_steps = 0;
    maybe_flush(st);
    if (st->failed) return -1;
    int32_t s = walk(st, st->cur, (const unsigned char *)bytes, n);
    if (s < 0 && st->abort && flush(st) == 0) { st->call_steps = 0; s = walk(st, st->cur, (const unsigned char *)bytes, n); }
    if (s < 0) return -1;
    st->cur = s;
    return 0;
}

/* After a token, from a state that has token frames: the union of the byte walk and the token
 * frames that match this token id. */
static int32_t accept_with_tokens(ob_grammar_state_t *st, int32_t s, int32_t tok, int32_t by_bytes) {
    const ob_grammar_t *g = st->g;
    new_gen(st);
    uint32_t off = st->sets[s].off, n = st->sets[s].n;
    for (uint32_t i = 0; i < n; i++) {
        int32_t x = st->items[off + i];
        if (!x) continue;
        const ob_gelem *e = &g->elems[st->nodes[x].pos];
        if ((e->type == GE_TOKEN && e->arg == tok) || (e->type == GE_NTOKEN && e->arg != tok))
            push_next(st, st->nodes[x].pos, st->nodes[x].parent);
    }
    run_work(st);
    if (by_bytes >= 0)
        for (uint32_t i = 0; i < st->sets[by_bytes].n; i++) push_out(st, st->items[st->sets[by_bytes].off + i]);
    return set_intern(st);
}

static int32_t accept_token(ob_grammar_state_t *st, int32_t s, int32_t token) {
    const ob_grammar_vocab_t *v = st->v;
    int32_t t = -1;
    int abort = 0;
    if (v->kind[token] == OB_GTOK_TEXT) {
        t = walk(st, s, (const unsigned char *)v->bytes + v->off[token], v->off[token + 1] - v->off[token]);
        abort = st->abort;
    }
    if (st->sets[s].tokens) { t = accept_with_tokens(st, s, token, t); abort |= st->abort; }
    st->abort = abort;
    return t;
}

void ob_grammar_state_accept(void *state, int32_t token) {
    ob_grammar_state_t *st = state;
    if (!st || st->failed || st->eog) return;
    const ob_grammar_vocab_t *v = st->v;
    if (!v || token < 0 || token >= v->n_vocab) { st->failed = 1; return; }
    st->call_steps = 0;
    maybe_flush(st);
    if (st->failed) return;
    int32_t s = st->cur;
    if (v->kind[token] == OB_GTOK_EOG && !st->sets[s].tokens) {
        st->eog = 1;
        if (!st->sets[s].accept) st->failed = 1;   /* the filter's last resort: output incomplete */
        return;
    }
    int32_t t = accept_token(st, s, token);
    if (t < 0 && st->abort && flush(st) == 0) {   /* a limit, not a mismatch: once more from empty caches */
        st->call_steps = 0;
        t = accept_token(st, s = st->cur, token);
    }
    if (t < 0) {
        if (v->kind[token] == OB_GTOK_EOG) { st->eog = 1; if (!st->sets[s].accept) st->failed = 1; }
        else st->failed = 1;
        return;
    }
    st->cur = t;
}

int ob_grammar_state_complete(const ob_grammar_state_t *st) {
    return st && !st->failed && st->cur >= 0 && st->sets[st->cur].accept;
}

int ob_grammar_state_failed(const ob_grammar_state_t *st) { return !st || st->failed; }

int ob_grammar_state_done(const ob_grammar_state_t *st) {
    if (!st || st->failed || st->eog) return 1;
    const gset *s = &st->sets[st->cur];
    return s->accept && s->n == 1;
}

int ob_grammar_match(const ob_grammar_t *g, const char *bytes, size_t n) {
    ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, NULL, NULL, 0);
    int ok = st && ob_grammar_state_accept_bytes(st, bytes, n) == 0 && ob_grammar_state_complete(st);
    ob_grammar_state_free(st);
    return ok;
}

/* ---- the token mask ----------------------------------------------------------------------------- */

/* Fills mask (words) with the tokens allowed from state s. Returns the number of allowed tokens;
 * st->abort set if a limit cut the walk short (the mask is then a safe subset). */
static int64_t build_mask(ob_grammar_state_t *st, int32_t s, uint64_t *mask) {
    const ob_grammar_vocab_t *v = st->v;
    const ob_gvnode *tn = v->nodes;
    const int32_t *sorted = v->sorted;
    int32_t *ds = st->dstack;
    int any_abort = 0;
    int64_t count = 0;
    memset(mask, 0, (size_t)st->words * sizeof *mask);
    ds[0] = s;
    for (int32_t i = 0, nn = v->n_nodes; i < nn;) {
        const ob_gvnode *x = &tn[i];
        int32_t from = ds[x->depth - 1];
        int32_t t = st->rows[(size_t)from * 256 + x->byte];
        if (t == T_UNKNOWN) {
            t = trans_compute(st, from, x->byte) + 2;
            any_abort |= st->abort;
            if (t < 2) t = T_DEAD;
        }
        if (t == T_DEAD) { i = x->skip; continue; }
        ds[x->depth] = t - 2;
        for (int32_t k = x->tok_lo, e = tn[i + 1].tok_lo; k < e; k++) {
            int32_t id = sorted[k];
            mask[id >> 6] |= 1ull << (id & 63);
            count++;
        }
        i++;
    }
    const gset *S = &st->sets[s];
    if (S->tokens) {
        const ob_grammar_t *g = st->g;
        for (uint32_t i = 0; i < S->n; i++) {
            int32_t x = st->items[S->off + i];
            if (!x) continue;
            const ob_gelem *e = &g->elems[st->nodes[x].pos];
            if (e->type == GE_TOKEN) {
                if (!(mask[e->arg >> 6] >> (e->arg & 63) & 1)) count++;
                mask[e->arg >> 6] |= 1ull << (e->arg & 63);
            } else if (e->type == GE_NTOKEN) {
                for (int32_t id = 0; id < v->n_vocab; id++)
                    if (id != e->arg && v->kind[id] != OB_GTOK_EOG && !(mask[id >> 6] >> (id & 63) & 1)) {
                        mask[id >> 6] |= 1ull << (id & 63);
                        count++;
                    }
            }
        }
    }
    if (S->accept)
        for (int32_t i = 0; i < v->n_eog; i++) {
            int32_t id = v->eog[i];
            if (!(mask[id >> 6] >> (id & 63) & 1)) count++;
            mask[id >> 6] |= 1ull << (id & 63);
        }
    st->abort = any_abort;
    return count;
}

/* The cached mask slot for the current state, building it on a miss; -1 on failure. */
static int get_mask(ob_grammar_state_t *st) {
    int32_t s = st->cur;
    st->tick++;
    int slot = st->sets[s].mask;
    if (slot >= 0 && st->mask_owner[slot] == s) { st->mask_used[slot] = st->tick; return slot; }
    slot = 0;
    for (int i = 0; i < N_MASK_SLOTS; i++) {
        if (st->mask_owner[i] < 0) { slot = i; break; }
        if (st->mask_used[i] < st->mask_used[slot]) slot = i;
    }
    if (st->mask_owner[slot] >= 0 && st->mask_owner[slot] < st->n_sets) st->sets[st->mask_owner[slot]].mask = -1;
    uint64_t *m = st->masks + (size_t)slot * st->words;
    int64_t cnt = build_mask(st, s, m);
    if (st->abort) {
        /* A limit was hit mid-walk: start over from empty caches once; keep the result either way
         * (a subset of the allowed tokens), but do not cache a cut-short mask. */
        if (flush(st)) return -1;
        s = st->cur;
        st->call_steps = 0;
        cnt = build_mask(st, s, m);
        if (st->abort) { st->mask_owner[slot] = -1; st->mask_any[slot] = cnt > 0; return slot; }
    }
    st->mask_owner[slot] = s;
    st->mask_used[slot] = st->tick;
    st->mask_any[slot] = cnt > 0;
    st->sets[s].mask = slot;
    return slot;
}

static void only_eog(const ob_grammar_vocab_t *v, float *logits, int32_t n_vocab) {
    if (v->n_eog == 0) return;   /* nothing can end the request: leave the logits alone */
    for (int32_t i = 0; i < n_vocab; i++)
        if (i >= v->n_vocab || v->kind[i] != OB_GTOK_EOG) logits[i] = -INFINITY;
}

void ob_grammar_state_filter(void *state, float *logits, int32_t n_vocab) {
    ob_grammar_state_t *st = state;
    if (!st || !st->v || !logits || n_vocab <= 0) return;
    const ob_grammar_vocab_t *v = st->v;
    if (!st->failed && !st->eog) maybe_flush(st);
    if (st->failed || st->eog) { only_eog(v, logits, n_vocab); return; }
    st->call_steps = 0;
    int slot = get_mask(st);
    if (slot < 0 || !st->mask_any[slot]) { only_eog(v, logits, n_vocab); return; }
    const uint64_t *m = st->masks + (size_t)slot * st->words;
    int32_t nv = n_vocab < v->n_vocab ? n_vocab : v->n_vocab;
    for (int32_t w = 0; w * 64 < nv; w++) {
        uint64_t z = ~m[w];
        while (z) {
            int32_t id = w * 64 + __builtin_ctzll(z);
            if (id >= nv) break;
            logits[id] = -INFINITY;
            z &= z - 1;
        }
    }
    for (int32_t i = nv; i < n_vocab; i++) logits[i] = -INFINITY;
}
