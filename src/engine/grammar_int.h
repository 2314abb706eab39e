/* grammar_int.h — the compiled grammar shared by the grammar_*.c files (not a public header).
 *
 * Owns: the flat element layout the matcher walks and the limits every stage enforces.
 * A grammar is an array of elements. Each rule has alternatives; each alternative is a run of
 * elements ended by GE_END, and a rule lists the start positions of its alternatives. A matcher
 * "position" is an index into elems: the next element to match in some alternative. Position 0
 * holds the start sequence [REF root, END].
 *
 * Character classes are stored normalized: sorted, disjoint, non-adjacent code point ranges
 * (negation already applied, surrogates D800-DFFF removed), so a class is always a positive set
 * and the UTF-8 matcher can test "could any completion of these bytes be in the class" exactly.
 * Repetition x{m,n} is one GE_REP element whose matcher frame carries the count, so a large
 * bound costs no grammar size.
 */
#ifndef OB_GRAMMAR_INT_H
#define OB_GRAMMAR_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar.h"

enum {
    GE_END = 0,    /* end of an alternative */
    GE_CLASS,      /* arg: class index; one code point */
    GE_REF,        /* arg: rule index */
    GE_REP,        /* arg: repetition index (rule, min, max) */
    GE_TOKEN,      /* arg: token id; exactly that token */
    GE_NTOKEN,     /* arg: token id; any one token but that one */
};

typedef struct { int32_t type, arg; } ob_gelem;
typedef struct { uint32_t lo, hi; } ob_grange;            /* inclusive */
typedef struct { int32_t off, n; } ob_gclass;             /* ranges[off .. off+n) */
typedef struct { int32_t rule, min, max; } ob_grep;        /* max < 0: unbounded */
typedef struct { int32_t alt_off, n_alt; int32_t name; } ob_grule; /* alts[alt_off ..]; name: offset in names */

struct ob_grammar {
    atomic_int refs;
    ob_gelem *elems;   int32_t n_elems;
    int32_t *alts;     int32_t n_alts;   /* start position of each alternative, grouped by rule */
    ob_grule *rules;   int32_t n_rules;
    ob_grange *ranges; int32_t n_ranges;
    ob_gclass *classes; int32_t n_classes;
    ob_grep *reps;     int32_t n_reps;
    char *names;       size_t names_len; /* rule names, NUL-separated (messages and debugging) */
    int32_t root;
    int32_t max_token;   /* largest token id a GE_TOKEN/GE_NTOKEN names; -1: none */
};

/* Limits: past these a grammar or schema is refused with a message, never run. */
#define OB_GRAMMAR_MAX_TEXT      (8u << 20)   /* bytes of GBNF text */
#define OB_GRAMMAR_MAX_RULES     200000
#define OB_GRAMMAR_MAX_ELEMS     (4 << 20)
#define OB_GRAMMAR_MAX_NEST      1000         /* parentheses inside one rule */
#define OB_GRAMMAR_MAX_REPEAT    10000000     /* m and n of {m,n} */
#define OB_GRAMMAR_MAX_NULL_REP  10000        /* bound of a repetition whose body can match nothing */

#define OB_CP_MAX 0x10FFFFu

/* ---- vocabulary index (grammar_vocab.c) ----
 * Every token's bytes in a trie laid out in preorder, so the matcher walks it as a flat array:
 * node i has its byte, its depth (1 = first byte) and skip = the index just past its subtree;
 * the tokens whose bytes end at node i are sorted[nodes[i].tok_lo .. nodes[i + 1].tok_lo)
 * (nodes[n_nodes] is a sentinel). Token ids in sorted[] are ordered by their bytes. */
typedef struct { int32_t skip, tok_lo; uint16_t depth; uint8_t byte, pad; } ob_gvnode;

enum { OB_GTOK_TEXT = 0, OB_GTOK_EOG = 1, OB_GTOK_NONE = 2 };  /* matched by bytes / end / never */

#define OB_GRAMMAR_MAX_TOKEN_BYTES 2048   /* longer tokens are never allowed (none exist in practice) */

struct ob_grammar_vocab {
    atomic_int refs;
    int32_t n_vocab;
    int32_t n_nodes;
    ob_gvnode *nodes;        /* [n_nodes + 1] */
    int32_t *sorted;         /* [n_sorted] */
    int32_t n_sorted;
    int32_t max_depth;
    char *bytes;             /* every token's bytes back to back */
    uint32_t *off;           /* [n_vocab + 1] */
    uint8_t *kind;           /* [n_vocab] OB_GTOK_* */
    int32_t *eog;            /* end-of-generation ids */
    int32_t n_eog;
};

ob_grammar_vocab_t *ob_grammar_vocab_ref(const ob_grammar_vocab_t *v);

const char *ob_grammar_rule_name(const ob_grammar_t *g, int32_t rule);
ob_grammar_t *ob_grammar_ref(const ob_grammar_t *g);

/* Initial-state sanity check run by the parser (grammar_match.c): 0, or -1 with err when the
 * start of the grammar alone exceeds the matcher's per-step limits. */
int ob_grammar_check_start(const ob_grammar_t *g, char *err, size_t errlen);

/* Code point range lists: sort and merge in place (returns the count); the complement over
 * U+0000..U+10FFFF into out (capacity n + 1). */
int32_t ob_granges_merge(ob_grange *r, int32_t n);
int32_t ob_granges_complement(const ob_grange *in, int32_t n, ob_grange *out);

/* Growable byte buffer used by the text generators. */
typedef struct { char *p; size_t n, cap; int oom; } ob_gbuf;
void ob_gbuf_put(ob_gbuf *b, const char *s, size_t n);
void ob_gbuf_puts(ob_gbuf *b, const char *s);
void ob_gbuf_printf(ob_gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A code point as a GBNF character-class / literal character (escaped when not plain ASCII). */
void ob_gbuf_cp(ob_gbuf *b, uint32_t cp);

/* Strict UTF-8 decode of one code point at s[0..n): returns its length (1..4) and *cp, or 0 for
 * invalid (overlong, surrogate, > U+10FFFF, truncated). */
int ob_grammar_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Regular expression (JSON Schema "pattern", an ECMA-262 subset) -> GBNF rules for the content of
 * a JSON string whose decoded text matches. Appends the rules to out, named prefix + "...", the
 * entry rule being `<name>`. json_char is the rule name for one JSON string character. Returns 0,
 * or -1 with err. */
int ob_grammar_regex_to_gbnf(const char *pattern, const char *name, const char *json_char,
                             ob_gbuf *out, char *err, size_t errlen);

#endif
