/* tokenizer_int.h — the tokenizer's private state, shared by its source files.
 *
 * Owns: struct ob_tokenizer and the small lookup helpers every tokenizer_*.c file uses:
 *   tokenizer.c         building from an ob_tokenizer_spec, queries, token bytes
 *   tokenizer_encode.c  text -> ids (added tokens, normalizer, pre-tokenizer, models, post-processor)
 *   tokenizer_gguf.c    the tokenizer.ggml.* keys -> spec
 *   tokenizer_json.c    tokenizer.json -> spec
 *   detok.c             ids -> text (decoder chain, streaming)
 * Does not own: anything a front end sees (onebit.h).
 */
#ifndef OB_TOKENIZER_INT_H
#define OB_TOKENIZER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "text/normalize.h"
#include "text/prechain.h"
#include "text/pretok.h"
#include "text/tokenizer.h"
#include "text/tokenizer_spec.h"

/* ---- hash maps -----------------------------------------------------------------------------
 * Open addressing, linear probing, power-of-two capacity, load <= 1/2. Two kinds:
 * str_map: token text -> id (the text lives in the tokenizer's arena, slots hold id + hash);
 * u64_map: 64-bit key -> two int32 values (merge pair -> rank/result; trie edge -> child). */

typedef struct { uint32_t id1, hash; } str_slot;   /* id1 = id + 1; 0 = empty */
typedef struct { str_slot *slot; size_t mask; } str_map;

#define U64_EMPTY UINT64_MAX
typedef struct { uint64_t key; int32_t v0, v1; } u64_slot;
typedef struct { u64_slot *slot; size_t mask, n; } u64_map;

/* A byte trie of added / special token texts: (node << 8 | byte) -> child node. */
typedef struct {
    u64_map edge;
    int32_t *term;             /* [n_nodes] token ending at the node, -1 */
    int32_t n_nodes;
    uint8_t first[256];        /* bytes some entry starts with */
} ob_trie;

enum { TOKF_EOG = 1, TOKF_MERGE = 2, TOKF_EMIT = 4 };

typedef struct ob_decoder ob_decoder_t;

struct ob_tokenizer {
    int model;                 /* ob_tok_model */
    uint64_t uid;              /* unique per built tokenizer (word cache entries carry it) */
    int32_t n_vocab;
    char *text;                /* all token texts back to back */
    size_t *text_off;          /* [n_vocab + 1] */
    size_t max_text_len;
    char *piece;               /* decoded bytes of every token, back to back */
    size_t *piece_off;         /* [n_vocab + 1] */
    uint8_t *type;             /* [n_vocab] OB_TOKTYPE_* (end markers promoted to control) */
    uint8_t *flags;            /* [n_vocab] TOKF_*: EOG; may be a merge result; may be emitted */
    uint8_t *added;            /* [n_vocab] OB_ADDED_* (tokenizer.json added tokens); NULL if none */
    float *score;              /* [n_vocab] SPM only */
    str_map vocab;             /* text -> id (last id wins for duplicate texts, as llama.cpp) */
    u64_map merges;            /* BPE: (left << 32 | right) -> v0 rank, v1 result id */
    int64_t n_merges_skipped;
    int32_t byte_tok[256];     /* token of each byte (BPE: its bytes_to_unicode char; SPM: <0xXX>); -1 */
    char b2u[256][2];          /* BPE: UTF-8 of each byte's bytes_to_unicode char */
    uint8_t b2u_len[256];
    int16_t u2b[324];          /* code point of the byte alphabet -> byte; -1 */
    ob_pretok_t *pre;          /* GGUF byte-level BPE: split regexes */
    int ignore_merges;
    ob_trie trie;              /* GGUF: control / user-defined / unknown tokens; json: raw-matched added tokens */
    ob_trie ntrie;             /* json: added tokens matched after normalization (by normalized text) */
    int has_user_defined;
    int spm_split;             /* SPM: no mergeable token has U+2581 after another character */
    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;
    /* tokenizer.json pipeline (hf != 0) */
    int hf;
    ob_norm_t *norm;
    ob_prechain_t *prechain;
    int byte_level;            /* the pre-tokenizer ends in ByteLevel: words are raw bytes */
    ob_decoder_t *decoder;
    int byte_fallback, fuse_unk;
    char *cont_prefix, *eow_suffix;   /* BPE / WordPiece affixes; NULL: none */
    size_t cont_prefix_len, eow_suffix_len;
    int wp_max_chars;
    int32_t post_pre[OB_TOK_MAX_POST], post_suf[OB_TOK_MAX_POST];   /* ids added around a text */
    int n_post_pre, n_post_suf;
};

static inline const char *tok_text(const ob_tokenizer_t *t, int32_t id, size_t *len) {
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

static inline uint32_t tok_hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a, folded */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return (uint32_t)(h ^ (h >> 32));
}

static inline uint64_t tok_hash_u64(uint64_t x) {     /* splitmix64 finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The id of a token text, or -1. */
static inline int32_t tok_find(const ob_tokenizer_t *t, const char *s, size_t len) {
    if (len == 0 || len > t->max_text_len) return -1;
    uint32_t h = tok_hash_bytes(s, len);
    for (size_t i = h & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        const str_slot *sl = &t->vocab.slot[i];
        if (sl->id1 == 0) return -1;
        if (sl->hash == h) {
            size_t ol;
            const char *o = tok_text(t, (int32_t)sl->id1 - 1, &ol);
            if (ol == len && memcmp(o, s, len) == 0) return (int32_t)sl->id1 - 1;
        }
    }
}

static inline const u64_slot *u64_map_get(const u64_map *m, uint64_t key) {
    if (!m->slot) return NULL;
    for (size_t i = tok_hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        const u64_slot *sl = &m->slot[i];
        if (sl->key == key) return sl;
        if (sl->key == U64_EMPTY) return NULL;
    }
}

/* "<0xXX>" -> XX, else -1. */
int ob_tok_parse_byte(const char *s, size_t n);

/* detok.c */
int ob_decoder_from_json(const json_t *j, const char *where, ob_decoder_t **out, char *err, size_t errlen);
void ob_decoder_free(ob_decoder_t *d);

#endif
