/* grammar_vocab.c — the per-tokenizer index the grammar matcher masks logits with.
 *
 * Owns: reading every token's bytes once (ob_tokenizer_token_bytes), classifying tokens
 * (matched by bytes / end-of-generation / never: empty or longer than
 * OB_GRAMMAR_MAX_TOKEN_BYTES), and the preorder byte trie described in grammar_int.h.
 * Does not own: matching (grammar_match.c).
 *
 * Building sorts the token ids by their bytes and emits trie nodes from the sorted order: a token
 * shares the nodes of its longest common prefix with the previous one, so the trie is built in
 * one pass after the sort, and its preorder is the sorted order (the walk in the matcher touches
 * memory front to back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_int.h"

typedef struct { const unsigned char *p; uint32_t len; int32_t id; } tokref;

static int cmp_tok(const void *a, const void *b) {
    const tokref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

ob_grammar_vocab_t *ob_grammar_vocab_ref(const ob_grammar_vocab_t *v) {
    ob_grammar_vocab_t *m = (ob_grammar_vocab_t *)v;
    atomic_fetch_add(&m->refs, 1);
    return m;
}

void ob_grammar_vocab_free(ob_grammar_vocab_t *v) {
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
    free(v->nodes);
    free(v->sorted);
    free(v->bytes);
    free(v->off);
    free(v->kind);
    free(v->eog);
    free(v);
}

ob_grammar_vocab_t *ob_grammar_vocab_new(const ob_tokenizer_t *tok, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) { err = dummy; errlen = sizeof dummy; }
    int32_t n = tok ? ob_tokenizer_n_vocab(tok) : 0;
    if (n <= 0) { snprintf(err, errlen, "grammar: tokenizer has no tokens"); return NULL; }
    ob_grammar_vocab_t *v = calloc(1, sizeof *v);
    tokref *refs = NULL;
    if (!v) goto oom;
    atomic_init(&v->refs, 1);
    v->n_vocab = n;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->kind = malloc((size_t)n);
    if (!v->off || !v->kind) goto oom;
    /* bytes */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int l = ob_tokenizer_token_bytes(tok, i, NULL, 0);
        if (l < 0) l = 0;
        if (total + (size_t)l > UINT32_MAX - 1) { snprintf(err, errlen, "grammar: vocabulary text larger than 4 GiB"); goto fail; }
        total += (size_t)l;
    }
    v->bytes = malloc(total + 1);
    if (!v->bytes) goto oom;
    total = 0;
    int32_t n_text = 0, n_eog = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = (uint32_t)total;
        int l = ob_tokenizer_token_bytes(tok, i, NULL, 0);
        if (l < 0) l = 0;
        if (l > 0) ob_tokenizer_token_bytes(tok, i, v->bytes + total, l);
        total += (size_t)l;
        if (ob_tokenizer_is_eog(tok, i)) { v->kind[i] = OB_GTOK_EOG; n_eog++; }
        else if (l == 0 || l > OB_GRAMMAR_MAX_TOKEN_BYTES) v->kind[i] = OB_GTOK_NONE;
        else { v->kind[i] = OB_GTOK_TEXT; n_text++; }
    }
    v->off[n] = (uint32_t)total;
    v->eog = malloc(((size_t)n_eog + 1) * sizeof *v->eog);
    refs = malloc(((size_t)n_text + 1) * sizeof *refs);
    v->sorted = malloc(((size_t)n_text + 1) * sizeof *v->sorted);
    if (!v->eog || !refs || !v->sorted) goto oom;
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (v->kind[i] == OB_GTOK_EOG) v->eog[v->n_eog++] = i;
        if (v->kind[i] != OB_GTOK_TEXT) continue;
        refs[k++] = (tokref){(const unsigned char *)v->bytes + v->off[i], v->off[i + 1] - v->off[i], i};
    }
    qsort(refs, (size_t)n_text, sizeof *refs, cmp_tok);

    /* Nodes: at most one per byte of all tokens; count the exact number first. */
    size_t n_nodes = 0;
    for (int32_t i = 0; i < n_text; i++) {
        uint32_t lcp = 0;
        if (i > 0) {
            uint32_t m = refs[i].len < refs[i - 1].len ? refs[i].len : refs[i - 1].len;
            while (lcp < m && refs[i].p[lcp] == refs[i - 1].p[lcp]) lcp++;
        }
        n_nodes += refs[i].len - lcp;
    }
    if (n_nodes >= INT32_MAX) { snprintf(err, errlen, "grammar: vocabulary trie too large"); goto fail; }
    v->nodes = malloc((n_nodes + 1) * sizeof *v->nodes);
    if (!v->nodes) goto oom;
    int32_t path[OB_GRAMMAR_MAX_TOKEN_BYTES + 1];   /* node index at each depth (1-based) */
    int32_t nn = 0, depth = 0;
    for (int32_t i = 0; i < n_text; i++) {
        uint32_t lcp = 0;
        if (i > 0) {
            uint32_t m = refs[i].len < refs[i - 1].len ? refs[i].len : refs[i - 1].len;
            while (lcp < m && refs[i].p[lcp] == refs[i - 1].p[lcp]) lcp++;
        }
        while ((uint32_t)depth > lcp) v->nodes[path[depth--]].skip = nn;
        for (uint32_t d = lcp; d < refs[i].len; d++) {
            v->nodes[nn] = (ob_gvnode){0, i, (uint16_t)(d + 1), refs[i].p[d], 0};
            path[++depth] = nn++;
        }
        v->sorted[i] = refs[i].id;
        if (depth > v->max_depth) v->max_depth = depth;
    }
    while (depth > 0) v->nodes[path[depth--]].skip = nn;
    v->nodes[nn] = (ob_gvnode){nn + 1, n_text, 0, 0, 0};   /* sentinel */
    v->n_nodes = nn;
    v->n_sorted = n_text;
    free(refs);
    return v;
oom:
    snprintf(err, errlen, "grammar: out of memory building the vocabulary index");
fail:
    free(refs);
    ob_grammar_vocab_free(v);
    return NULL;
}
