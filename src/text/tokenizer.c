/* tokenizer.c — text <-> token ids from a GGUF vocabulary (tokenizer.ggml.*).
 *
 * Owns: reading and validating the tokenizer.ggml.* keys (ob_tokenizer_load_gguf), building the
 * tokenizer from a source-neutral ob_tokenizer_spec (ob_tokenizer_build, see tokenizer_spec.h),
 * special-token matching, the two models, and the public calls of onebit.h's tokenizer section.
 *   - "gpt2": byte-level BPE. Text is split by the pre-tokenizer's regexes (pretok.c), each word's
 *     bytes become the tokens of their GPT-2 bytes_to_unicode characters, and ranked merges are
 *     applied lowest rank first (a heap over adjacent pairs, so a long word costs n log n).
 *   - "llama": SentencePiece BPE. Spaces become U+2581 (one is prepended to each text fragment when
 *     add_space_prefix), adjacent symbols merge highest score first when their concatenation is a
 *     token, and what forms no token falls back to <0xXX> byte tokens (else <unk>).
 * Does not own: the split regexes (pretok.c), chat templates, tokenizer.json (a later loader
 * fills an ob_tokenizer_spec and reuses everything below the GGUF section).
 *
 * Reference behaviour is llama.cpp's llama-vocab.cpp (which wrote these files) and, where the two
 * differ, Hugging Face tokenizers (the oracle): special tokens are found leftmost-longest; control,
 * unknown and byte tokens never come out of merges (SentencePiece keeps them out of its piece
 * table), so the literal text "<0x41>" or "</s>" typed by a user stays text.
 *
 * A loaded tokenizer is read-only: encode and token_bytes may run from many threads at once.
 * Encode allocates scratch per call (prompt processing, not the decode loop); token_bytes is a
 * copy out of the decoded-piece cache built at load time and never allocates.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static uint32_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a, folded */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return (uint32_t)(h ^ (h >> 32));
}

static uint64_t hash_u64(uint64_t x) {     /* splitmix64 finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- the tokenizer ------------------------------------------------------------------------- */

enum { TOKF_EOG = 1, TOKF_MERGE = 2, TOKF_EMIT = 4 };

struct ob_tokenizer {
    int model;                 /* ob_tok_model */
    int32_t n_vocab;
    char *text;                /* all token texts back to back */
    size_t *text_off;          /* [n_vocab + 1] */
    size_t max_text_len;
    char *piece;               /* decoded bytes of every token, back to back */
    size_t *piece_off;         /* [n_vocab + 1] */
    uint8_t *type;             /* [n_vocab] OB_TOKTYPE_* (end markers promoted to control) */
    uint8_t *flags;            /* [n_vocab] TOKF_*: EOG; may be a merge result; may be emitted */
    float *score;              /* [n_vocab] SPM only */
    str_map vocab;             /* text -> id (last id wins for duplicate texts, as llama.cpp) */
    u64_map merges;            /* BPE: (left << 32 | right) -> v0 rank, v1 result id */
    int64_t n_merges_skipped;
    int32_t byte_tok[256];     /* token of each byte (BPE: its bytes_to_unicode char; SPM: <0xXX>); -1 */
    char b2u[256][2];          /* BPE: UTF-8 of each byte's bytes_to_unicode char */
    uint8_t b2u_len[256];
    ob_pretok_t *pre;
    int ignore_merges;
    u64_map trie;              /* special tokens: (node << 8 | byte) -> v0 child node */
    int32_t *trie_term;        /* [n_trie_nodes] token ending at the node, -1 */
    int32_t n_trie_nodes;
    uint8_t trie_first[256];   /* bytes some special token starts with */
    int has_user_defined;
    int spm_split;             /* SPM: no mergeable token has U+2581 after another character */
    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;
};

static const char *tok_text(const ob_tokenizer_t *t, int32_t id, size_t *len) {
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

static int str_map_init(str_map *m, size_t n) {
    size_t cap = pow2_at_least(n * 2 + 1);
    m->slot = calloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    return m->slot ? 0 : -1;
}

/* Insert or replace (the later id wins). */
static void str_map_put(const ob_tokenizer_t *t, str_map *m, int32_t id) {
    size_t len;
    const char *s = tok_text(t, id, &len);
    uint32_t h = hash_bytes(s, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        str_slot *sl = &m->slot[i];
        if (sl->id1 == 0) { sl->id1 = (uint32_t)id + 1; sl->hash = h; return; }
        if (sl->hash == h) {
            size_t ol;
            const char *o = tok_text(t, (int32_t)sl->id1 - 1, &ol);
            if (ol == len && memcmp(o, s, len) == 0) { sl->id1 = (uint32_t)id + 1; return; }
        }
    }
}

static int32_t str_map_get(const ob_tokenizer_t *t, const char *s, size_t len) {
    if (len == 0 || len > t->max_text_len) return -1;
    uint32_t h = hash_bytes(s, len);
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

static int u64_map_init(u64_map *m, size_t n) {
    size_t cap = pow2_at_least(n * 2 + 1);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return -1;
    for (size_t i = 0; i < cap; i++) m->slot[i].key = U64_EMPTY;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

static const u64_slot *u64_map_get(const u64_map *m, uint64_t key) {
    if (!m->slot) return NULL;
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        const u64_slot *sl = &m->slot[i];
        if (sl->key == key) return sl;
        if (sl->key == U64_EMPTY) return NULL;
    }
}

/* Inserts unless present (the first value wins). Returns 1 if inserted, 0 if present, -1 on OOM. */
static int u64_map_add(u64_map *m, uint64_t key, int32_t v0, int32_t v1) {
    if ((m->n + 1) * 2 > m->mask + 1) {      /* grow */
        u64_map g;
        if (u64_map_init(&g, (m->mask + 1)) != 0) return -1;
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slot[i].key != U64_EMPTY) {
                size_t j = hash_u64(m->slot[i].key) & g.mask;
                while (g.slot[j].key != U64_EMPTY) j = (j + 1) & g.mask;
                g.slot[j] = m->slot[i];
            }
        g.n = m->n;
        free(m->slot);
        *m = g;
    }
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        u64_slot *sl = &m->slot[i];
        if (sl->key == key) return 0;
        if (sl->key == U64_EMPTY) { sl->key = key; sl->v0 = v0; sl->v1 = v1; m->n++; return 1; }
    }
}

/* ---- GPT-2 bytes_to_unicode -----------------------------------------------------------------
 * Printable Latin-1 bytes stand for themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD)
 * map in byte order to U+0100.. so every byte is a visible character. */

static void b2u_table(uint16_t cp[256], int16_t rev[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) rev[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = (uint16_t)(keep ? b : 256 + n++);
        rev[cp[b]] = (int16_t)b;
    }
}

/* UTF-8 of a code point below U+0800 (all the table needs). */
static size_t put_cp2(char *dst, unsigned cp) {
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static unsigned utf8_decode(const unsigned char *s, size_t l) {
    if (l == 1) return s[0];
    if (l == 2) return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    if (l == 3) return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

/* "<0xXX>" -> XX, else -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decoded bytes of token id into dst (NULL: just count). */
static size_t decode_piece(const ob_tokenizer_t *t, int32_t id, const int16_t *rev, char *dst) {
    size_t n, o = 0;
    const char *s = tok_text(t, id, &n);
    int ty = t->type[id];
    if (ty == OB_TOKTYPE_CONTROL || ty == OB_TOKTYPE_USER_DEFINED || ty == OB_TOKTYPE_UNKNOWN) {
        if (dst) memcpy(dst, s, n);
        return n;
    }
    if (ty == OB_TOKTYPE_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) { if (dst) dst[0] = (char)b; return 1; }
        if (t->model == OB_TOK_MODEL_SPM) { if (dst) memcpy(dst, s, n); return n; }
    }
    for (size_t i = 0; i < n;) {
        size_t l = ob_utf8_len((const unsigned char *)s + i, n - i);
        if (t->model == OB_TOK_MODEL_SPM) {
            if (l == 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { if (dst) dst[o] = ' '; o++; i += 3; continue; }
        } else if (l < 3) {
            unsigned cp = utf8_decode((const unsigned char *)s + i, l);
            if (!(l == 1 && (unsigned char)s[i] >= 0x80) && cp < 324 && rev[cp] >= 0) {
                if (dst) dst[o] = (char)rev[cp];
                o++; i += l;
                continue;
            }
        }
        /* not in the alphabet: the character's own bytes */
        if (dst) memcpy(dst + o, s + i, l);
        o += l; i += l;
    }
    return o;
}

/* ---- building ------------------------------------------------------------------------------ */

/* Texts llama.cpp treats as end of generation whatever the file says (llama-vocab.cpp's list),
 * plus the FIM pad/repo/file-separator markers it adds through its FIM ids. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
    NULL,
};

static int32_t find_text(const ob_tokenizer_t *t, const char *s) {
    return str_map_get(t, s, strlen(s));
}

static void mark_eog(ob_tokenizer_t *t) {
    for (const char *const *e = eog_texts; *e; e++) {
        int32_t id = find_text(t, *e);
        if (id < 0) continue;
        t->flags[id] |= TOKF_EOG;
        /* llama.cpp: an end marker that is not typed control is a converter bug; treat it as one */
        if (t->type[id] != OB_TOKTYPE_CONTROL) t->type[id] = OB_TOKTYPE_CONTROL;
    }
    /* gpt-oss (o200k_harmony) and solar-open end a message with <|end|> but keep generating
     * (the turn ends at <|return|> / <|call|>): there <|end|> is an ordinary user-defined marker. */
    int32_t end = find_text(t, "<|end|>");
    int32_t ret = find_text(t, "<|return|>"), call = find_text(t, "<|call|>");
    int32_t calls = find_text(t, "<|calls|>"), flush = find_text(t, "<|flush|>");
    if (end >= 0 && ((ret >= 0 && (call >= 0 || calls >= 0)) || ((call >= 0 || calls >= 0) && flush >= 0))) {
        t->flags[end] &= (uint8_t)~TOKF_EOG;
        t->type[end] = OB_TOKTYPE_USER_DEFINED;
    }
    /* Gemma 4 and PaddleOCR use </s> inside turns. */
    int32_t s = find_text(t, "</s>");
    if (s >= 0 && find_text(t, "<|tool_response>") >= 0) {
        t->flags[s] &= (uint8_t)~TOKF_EOG;
        t->type[s] = OB_TOKTYPE_NORMAL;
    }
}

static int build_trie(ob_tokenizer_t *t) {
    size_t total = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->type[id];
        if (ty == OB_TOKTYPE_CONTROL || ty == OB_TOKTYPE_USER_DEFINED || ty == OB_TOKTYPE_UNKNOWN)
            total += t->text_off[id + 1] - t->text_off[id];
    }
    if (total > INT32_MAX / 2) return -1;
    t->trie_term = malloc(total * sizeof *t->trie_term);
    if (!t->trie_term || u64_map_init(&t->trie, total) != 0) return -1;
    t->trie_term[0] = -1;
    t->n_trie_nodes = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->type[id];
        if (ty != OB_TOKTYPE_CONTROL && ty != OB_TOKTYPE_USER_DEFINED && ty != OB_TOKTYPE_UNKNOWN) continue;
        size_t n;
        const unsigned char *s = (const unsigned char *)tok_text(t, id, &n);
        if (n == 0) continue;
        if (ty == OB_TOKTYPE_USER_DEFINED) t->has_user_defined = 1;
        t->trie_first[s[0]] = 1;
        int32_t node = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t key = ((uint64_t)node << 8) | s[i];
            const u64_slot *sl = u64_map_get(&t->trie, key);
            if (sl) { node = sl->v0; continue; }
            int32_t child = t->n_trie_nodes++;
            t->trie_term[child] = -1;
            if (u64_map_add(&t->trie, key, child, 0) < 0) return -1;
            node = child;
        }
        t->trie_term[node] = id;   /* duplicate texts: the later id, as the vocab map */
    }
    return 0;
}

/* BPE merges -> (left, right) -> rank, result. */
static int build_merges(ob_tokenizer_t *t, const ob_tokenizer_spec *s) {
    size_t cap = 64;
    char *buf = malloc(cap);
    if (!buf || u64_map_init(&t->merges, (size_t)s->n_merges) != 0) { free(buf); return -1; }
    for (int64_t r = 0; r < s->n_merges; r++) {
        const char *m = s->merge[r];
        size_t n = m ? s->merge_len[r] : 0, sp = 1;
        while (sp < n && m[sp] != ' ') sp++;   /* split at the first space after the first byte */
        if (sp >= n || r > INT32_MAX) { t->n_merges_skipped++; continue; }
        int32_t a = str_map_get(t, m, sp), b = str_map_get(t, m + sp + 1, n - sp - 1);
        if (n > cap) {
            char *nb = realloc(buf, n * 2);
            if (!nb) { free(buf); return -1; }
            buf = nb; cap = n * 2;
        }
        memcpy(buf, m, sp);
        memcpy(buf + sp, m + sp + 1, n - sp - 1);
        int32_t res = str_map_get(t, buf, n - 1);
        if (a < 0 || b < 0 || res < 0) { t->n_merges_skipped++; continue; }
        int rc = u64_map_add(&t->merges, ((uint64_t)a << 32) | (uint32_t)b, (int32_t)r, res);
        if (rc < 0) { free(buf); return -1; }
        if (rc == 0) t->n_merges_skipped++;   /* a repeated pair: the lower rank stays */
    }
    free(buf);
    return 0;
}

void ob_tokenizer_free(ob_tokenizer_t *t) {
    if (!t) return;
    free(t->text); free(t->text_off);
    free(t->piece); free(t->piece_off);
    free(t->type); free(t->flags); free(t->score);
    free(t->vocab.slot); free(t->merges.slot);
    ob_pretok_free(t->pre);
    free(t->trie.slot); free(t->trie_term);
    free(t);
}

#define OOM() do { snprintf(err, errlen, "tokenizer: out of memory"); goto fail; } while (0)

int ob_tokenizer_build(const ob_tokenizer_spec *s, ob_tokenizer_t **out, char *err, size_t errlen) {
    uint16_t b2u[256];
    int16_t u2b[324];
    ob_tokenizer_t *t = NULL;
    *out = NULL;
    if (!s || (s->model != OB_TOK_MODEL_BPE && s->model != OB_TOK_MODEL_SPM)) {
        snprintf(err, errlen, "tokenizer: unknown model %d", s ? s->model : -1);
        return -1;
    }
    if (s->n_tokens <= 0 || s->n_tokens >= INT32_MAX || !s->text || !s->text_len) {
        snprintf(err, errlen, "tokenizer: no tokens");
        return -1;
    }
    const int32_t *idp[] = {&s->bos, &s->eos, &s->unk, &s->pad, &s->eot, &s->eom};
    static const char *const idn[] = {"bos", "eos", "unk", "pad", "eot", "eom"};
    for (int i = 0; i < 6; i++)
        if (*idp[i] < -1 || *idp[i] >= s->n_tokens) {
            snprintf(err, errlen, "tokenizer: %s id %d out of range (%d tokens)", idn[i], *idp[i], s->n_tokens);
            return -1;
        }
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++)
        if (s->extra_eog[i] < -1 || s->extra_eog[i] >= s->n_tokens) {
            snprintf(err, errlen, "tokenizer: end-of-generation id %d out of range (%d tokens)",
                     s->extra_eog[i], s->n_tokens);
            return -1;
        }
    if (s->model == OB_TOK_MODEL_BPE && (s->n_pre_regex < 1 || !s->pre_regex)) {
        snprintf(err, errlen, "tokenizer: byte-level BPE without pre-tokenizer regexes");
        return -1;
    }
    if (s->n_merges < 0 || (s->n_merges > 0 && (!s->merge || !s->merge_len))) {
        snprintf(err, errlen, "tokenizer: bad merge list");
        return -1;
    }

    t = calloc(1, sizeof *t);
    if (!t) OOM();
    int32_t n = s->n_tokens;
    t->model = s->model;
    t->n_vocab = n;
    t->bos = s->bos; t->eos = s->eos; t->unk = s->unk; t->pad = s->pad; t->eot = s->eot; t->eom = s->eom;
    t->add_bos = !!s->add_bos; t->add_eos = !!s->add_eos; t->add_space_prefix = !!s->add_space_prefix;
    t->ignore_merges = s->model == OB_TOK_MODEL_BPE && s->ignore_merges;

    /* texts */
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!s->text[i] && s->text_len[i]) { snprintf(err, errlen, "tokenizer: token %d has no text", i); goto fail; }
        if (s->text_len[i] > SIZE_MAX / 4 - total) OOM();
        total += s->text_len[i];
        if (s->text_len[i] > t->max_text_len) t->max_text_len = s->text_len[i];
    }
    t->text = malloc(total + 1);
    t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
    t->type = malloc((size_t)n);
    t->flags = calloc((size_t)n, 1);
    if (!t->text || !t->text_off || !t->type || !t->flags) OOM();
    total = 0;
    for (int32_t i = 0; i < n; i++) {
        t->text_off[i] = total;
        if (s->text_len[i]) memcpy(t->text + total, s->text[i], s->text_len[i]);
        total += s->text_len[i];
        int ty = s->type ? s->type[i] : OB_TOKTYPE_NORMAL;
        t->type[i] = (uint8_t)(ty <= OB_TOKTYPE_BYTE ? ty : OB_TOKTYPE_UNDEFINED);
    }
    t->text_off[n] = total;
    if (s->model == OB_TOK_MODEL_SPM) {
        t->score = malloc((size_t)n * sizeof *t->score);
        if (!t->score) OOM();
        for (int32_t i = 0; i < n; i++) t->score[i] = s->score ? s->score[i] : 0.0f;
    }

    if (str_map_init(&t->vocab, (size_t)n) != 0) OOM();
    for (int32_t i = 0; i < n; i++)
        if (t->text_off[i + 1] > t->text_off[i]) str_map_put(t, &t->vocab, i);

    mark_eog(t);
    const int32_t eog_ids[] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++) if (eog_ids[i] >= 0) t->flags[eog_ids[i]] |= TOKF_EOG;
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) if (s->extra_eog[i] >= 0) t->flags[s->extra_eog[i]] |= TOKF_EOG;

    /* Which tokens merges may produce and encode may emit (SentencePiece: unused pieces merge
     * but are then split back into their parts). */
    for (int32_t i = 0; i < n; i++) {
        int ty = t->type[i];
        if (ty == OB_TOKTYPE_NORMAL || ty == OB_TOKTYPE_USER_DEFINED || ty == OB_TOKTYPE_UNDEFINED)
            t->flags[i] |= TOKF_MERGE | TOKF_EMIT;
        else if (ty == OB_TOKTYPE_UNUSED)
            t->flags[i] |= TOKF_MERGE;
    }

    if (s->model == OB_TOK_MODEL_SPM) {
        t->spm_split = 1;
        for (int32_t i = 0; i < n && t->spm_split; i++) {
            size_t l;
            const char *x = tok_text(t, i, &l);
            if (!(t->flags[i] & TOKF_MERGE)) continue;
            for (size_t k = 1; k + 3 <= l; k++)
                if (memcmp(x + k, "\xE2\x96\x81", 3) == 0 && (k < 3 || memcmp(x + k - 3, "\xE2\x96\x81", 3) != 0)) {
                    t->spm_split = 0;
                    break;
                }
        }
    }

    /* byte tokens */
    b2u_table(b2u, u2b);
    for (int b = 0; b < 256; b++) {
        char tmp[8];
        size_t l;
        if (s->model == OB_TOK_MODEL_BPE) {
            l = put_cp2(tmp, b2u[b]);
            memcpy(t->b2u[b], tmp, l);
            t->b2u_len[b] = (uint8_t)l;
        } else {
            snprintf(tmp, sizeof tmp, "<0x%02X>", b);
            l = 6;
        }
        t->byte_tok[b] = str_map_get(t, tmp, l);
        if (t->byte_tok[b] < 0 && s->model == OB_TOK_MODEL_SPM) {
            tmp[0] = (char)b;                 /* llama.cpp: fall back to the byte itself */
            t->byte_tok[b] = str_map_get(t, tmp, 1);
        }
    }

    /* decoded pieces */
    t->piece_off = malloc(((size_t)n + 1) * sizeof *t->piece_off);
    if (!t->piece_off) OOM();
    total = 0;
    for (int32_t i = 0; i < n; i++) {
        t->piece_off[i] = total;
        total += decode_piece(t, i, u2b, NULL);
    }
    t->piece_off[n] = total;
    t->piece = malloc(total + 1);
    if (!t->piece) OOM();
    for (int32_t i = 0; i < n; i++) decode_piece(t, i, u2b, t->piece + t->piece_off[i]);

    if (s->model == OB_TOK_MODEL_BPE) {
        if (build_merges(t, s) != 0) OOM();
        if (ob_pretok_new(s->pre_regex, s->n_pre_regex, &t->pre, err, errlen) != 0) goto fail;
    }
    if (build_trie(t) != 0) OOM();

    *out = t;
    return 0;
fail:
    ob_tokenizer_free(t);
    return -1;
}

int64_t ob_tokenizer_n_merges_skipped(const ob_tokenizer_t *t) {
    return t ? t->n_merges_skipped : 0;
}

/* ---- encoding ------------------------------------------------------------------------------ */

/* Merge candidates live in a 4-ary min-heap of bare 64-bit keys: priority in the high half
 * (BPE: rank; SPM: score, descending), left symbol position in the low half (ties go left, as in
 * llama.cpp and Hugging Face). An entry is re-checked when popped rather than removed when its
 * pair changes: the pair now at that position is merged iff its priority is still the key's. */

typedef struct {
    const ob_tokenizer_t *t;
    int32_t *out;
    int64_t max_out, n;
    int failed;
    /* per-word scratch, grown on demand: [cap] symbols */
    size_t cap;
    int32_t *id, *prev, *next, *start, *len, *node;
    uint64_t *heap;               /* [3 * cap]: n - 1 initial pairs + at most 2 per merge */
    size_t n_heap;
    int32_t *node_l, *node_r, *node_n;   /* SPM merge tree: [2 * cap] */
    int32_t *stack;               /* [2 * cap] */
    char *buf;                    /* [buf_cap] byte-level word / escaped SPM text */
    size_t buf_cap;
} enc_ctx;

static void emit(enc_ctx *c, int32_t id) {
    if (c->n < c->max_out) c->out[c->n] = id;
    c->n++;
}

static void *grow(void *p, size_t n, size_t size, int *ok) {
    void *q = realloc(p, n * size);
    if (!q) { *ok = 0; return p; }
    return q;
}

static int ensure(enc_ctx *c, size_t n) {
    if (n <= c->cap) return 0;
    if (n > (size_t)INT32_MAX / 4) return -1;
    size_t cap = c->cap ? c->cap : 64;
    while (cap < n) cap *= 2;
    int ok = 1;
    c->id = grow(c->id, cap, sizeof(int32_t), &ok);
    c->prev = grow(c->prev, cap, sizeof(int32_t), &ok);
    c->next = grow(c->next, cap, sizeof(int32_t), &ok);
    c->start = grow(c->start, cap, sizeof(int32_t), &ok);
    c->len = grow(c->len, cap, sizeof(int32_t), &ok);
    c->node = grow(c->node, cap, sizeof(int32_t), &ok);
    c->heap = grow(c->heap, cap * 3, sizeof(uint64_t), &ok);
    c->node_l = grow(c->node_l, cap * 2, sizeof(int32_t), &ok);
    c->node_r = grow(c->node_r, cap * 2, sizeof(int32_t), &ok);
    c->node_n = grow(c->node_n, cap * 2, sizeof(int32_t), &ok);
    c->stack = grow(c->stack, cap * 2, sizeof(int32_t), &ok);
    if (!ok) return -1;
    c->cap = cap;
    return 0;
}

static int ensure_buf(enc_ctx *c, size_t n) {
    if (n <= c->buf_cap) return 0;
    size_t cap = c->buf_cap ? c->buf_cap : 256;
    while (cap < n) cap *= 2;
    char *b = realloc(c->buf, cap);
    if (!b) return -1;
    c->buf = b;
    c->buf_cap = cap;
    return 0;
}

static void ctx_free(enc_ctx *c) {
    free(c->id); free(c->prev); free(c->next); free(c->start); free(c->len); free(c->node);
    free(c->heap); free(c->node_l); free(c->node_r); free(c->node_n); free(c->stack); free(c->buf);
}

static void heap_push(enc_ctx *c, uint64_t x) {
    uint64_t *h = c->heap;
    size_t i = c->n_heap++;
    while (i) {
        size_t p = (i - 1) / 4;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static uint64_t heap_pop(enc_ctx *c) {
    uint64_t *h = c->heap, top = h[0], x = h[--c->n_heap];
    size_t i = 0, m = c->n_heap;
    for (;;) {
        size_t k = 4 * i + 1, e = k + 4 < m ? k + 4 : m, best = k;
        if (k >= m) break;
        for (size_t j = k + 1; j < e; j++) if (h[j] < h[best]) best = j;
        if (h[best] >= x) break;
        h[i] = h[best];
        i = best;
    }
    if (m) h[i] = x;
    return top;
}

/* -- byte-level BPE -- */

/* The merge of symbol l with its right neighbour, or NULL. */
static const u64_slot *bpe_pair(const enc_ctx *c, int32_t l) {
    if (l < 0) return NULL;
    int32_t r = c->next[l];
    if (r < 0 || c->id[l] < 0 || c->id[r] < 0) return NULL;
    return u64_map_get(&c->t->merges, ((uint64_t)c->id[l] << 32) | (uint32_t)c->id[r]);
}

static void bpe_try(enc_ctx *c, int32_t l) {
    const u64_slot *m = bpe_pair(c, l);
    if (m) heap_push(c, ((uint64_t)(uint32_t)m->v0 << 32) | (uint32_t)l);
}

static int bpe_word(void *vc, const char *w, size_t n) {
    enc_ctx *c = vc;
    const ob_tokenizer_t *t = c->t;
    const unsigned char *u = (const unsigned char *)w;
    if (ensure(c, n) != 0) return c->failed = 1;
    if (t->ignore_merges) {
        if (ensure_buf(c, 2 * n) != 0) return c->failed = 1;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(c->buf + o, t->b2u[u[i]], 2);
            o += t->b2u_len[u[i]];
        }
        int32_t id = str_map_get(t, c->buf, o);
        if (id >= 0 && (t->flags[id] & TOKF_EMIT)) { emit(c, id); return 0; }
    }
    int32_t ni = (int32_t)n;
    for (int32_t i = 0; i < ni; i++) {
        c->id[i] = t->byte_tok[u[i]];
        c->prev[i] = i - 1;
        c->next[i] = i + 1 < ni ? i + 1 : -1;
    }
    c->n_heap = 0;
    for (int32_t i = 0; i + 1 < ni; i++) bpe_try(c, i);
    while (c->n_heap) {
        uint64_t key = heap_pop(c);
        int32_t l = (int32_t)(key & 0xFFFFFFFFu);
        const u64_slot *m = bpe_pair(c, l);
        if (!m || (uint32_t)m->v0 != (uint32_t)(key >> 32)) continue;   /* stale */
        int32_t r = c->next[l];
        c->id[l] = m->v1;
        c->id[r] = -2;                     /* merged away */
        c->next[l] = c->next[r];
        if (c->next[r] >= 0) c->prev[c->next[r]] = l;
        bpe_try(c, c->prev[l]);
        bpe_try(c, l);
    }
    for (int32_t i = 0; i >= 0; i = c->next[i]) {
        if (c->id[i] >= 0) emit(c, c->id[i]);
        else if (t->unk >= 0) emit(c, t->unk);   /* a byte the vocabulary lacks */
    }
    return 0;
}

/* -- SentencePiece BPE -- */

static uint32_t score_key(float f) {      /* descending order of f as an ascending uint32 */
    uint32_t u;
    if (f == 0.0f) f = 0.0f;              /* -0 == +0 */
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* The token symbol l and its right neighbour would merge into, or -1. */
static int32_t spm_pair(const enc_ctx *c, int32_t l) {
    if (l < 0 || c->len[l] == 0) return -1;
    int32_t r = c->next[l];
    if (r < 0) return -1;
    int32_t id = str_map_get(c->t, c->buf + c->start[l], (size_t)c->len[l] + (size_t)c->len[r]);
    return id >= 0 && (c->t->flags[id] & TOKF_MERGE) ? id : -1;
}

static void spm_try(enc_ctx *c, int32_t l) {
    int32_t id = spm_pair(c, l);
    if (id >= 0) heap_push(c, ((uint64_t)score_key(c->t->score[id]) << 32) | (uint32_t)l);
}

static void spm_emit_bytes(enc_ctx *c, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = c->t->byte_tok[(unsigned char)s[i]];
        if (id >= 0) emit(c, id);
        else if (c->t->unk >= 0) { emit(c, c->t->unk); i += ob_utf8_len((const unsigned char *)s + i, n - i) - 1; }
    }
}

/* BPE by score over buf[off, off + m). */
static int spm_segment(enc_ctx *c, size_t off, size_t m) {
    const ob_tokenizer_t *t = c->t;
    if (ensure(c, m) != 0) return c->failed = 1;
    int32_t ns = 0;
    for (size_t i = off; i < off + m;) {
        size_t l = ob_utf8_len((const unsigned char *)c->buf + i, off + m - i);
        c->start[ns] = (int32_t)i;
        c->len[ns] = (int32_t)l;
        c->node[ns] = ns;
        c->node_l[ns] = c->node_r[ns] = -1;
        c->node_n[ns] = (int32_t)l;
        c->prev[ns] = ns - 1;
        c->next[ns] = -1;
        if (ns) c->next[ns - 1] = ns;
        ns++;
        i += l;
    }
    int32_t n_nodes = ns;
    c->n_heap = 0;
    for (int32_t i = 0; i + 1 < ns; i++) spm_try(c, i);
    while (c->n_heap) {
        uint64_t key = heap_pop(c);
        int32_t l = (int32_t)(key & 0xFFFFFFFFu);
        int32_t id = spm_pair(c, l);
        if (id < 0 || score_key(t->score[id]) != (uint32_t)(key >> 32)) continue;   /* stale */
        int32_t r = c->next[l], k = n_nodes++;
        c->node_l[k] = c->node[l];
        c->node_r[k] = c->node[r];
        c->node_n[k] = c->len[l] + c->len[r];
        c->node[l] = k;
        c->len[l] = c->node_n[k];
        c->len[r] = 0;
        c->next[l] = c->next[r];
        if (c->next[r] >= 0) c->prev[c->next[r]] = l;
        spm_try(c, c->prev[l]);
        spm_try(c, l);
    }
    /* Emit; a symbol that is no emittable token is split back along its merges (an unused piece),
     * and a single character that is no token becomes bytes. */
    for (int32_t i = 0; i >= 0; i = c->next[i]) {
        int32_t sp = 0;
        c->stack[sp++] = c->node[i];
        size_t pos = (size_t)c->start[i];
        while (sp) {
            int32_t k = c->stack[--sp];
            size_t kl = (size_t)c->node_n[k];
            int32_t id = str_map_get(t, c->buf + pos, kl);
            if (id >= 0 && (t->flags[id] & TOKF_EMIT)) { emit(c, id); pos += kl; continue; }
            if (c->node_l[k] >= 0) { c->stack[sp++] = c->node_r[k]; c->stack[sp++] = c->node_l[k]; continue; }
            spm_emit_bytes(c, c->buf + pos, kl);
            pos += kl;
        }
    }
    return 0;
}

static int is_sp(const char *p) { return memcmp(p, "\xE2\x96\x81", 3) == 0; }

static int spm_fragment(enc_ctx *c, const char *s, size_t n, int prefix) {
    if (n > (size_t)INT32_MAX / 4) return c->failed = 1;
    if (ensure_buf(c, 3 * n + 3) != 0) return c->failed = 1;
    size_t m = 0;
    if (prefix) { memcpy(c->buf, "\xE2\x96\x81", 3); m = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(c->buf + m, "\xE2\x96\x81", 3); m += 3; }
        else c->buf[m++] = s[i];
    }
    if (!c->t->spm_split) return m ? spm_segment(c, 0, m) : 0;
    /* No token has a U+2581 right after another character, so no merge can cross the start of
     * a U+2581 run that follows other text: each such word is merged on its own (same result,
     * and scratch sized to a word rather than the whole text). */
    size_t w = 0;
    for (size_t i = 3; i + 3 <= m; i++)
        if (is_sp(c->buf + i) && !is_sp(c->buf + i - 3)) {
            if (spm_segment(c, w, i - w)) return 1;
            w = i;
            i += 2;
        }
    return m > w ? spm_segment(c, w, m - w) : 0;
}

static int encode_text(enc_ctx *c, const char *s, size_t n, int prefix) {
    if (n == 0) return 0;
    if (c->t->model == OB_TOK_MODEL_SPM) return spm_fragment(c, s, n, prefix);
    if (ob_pretok_split(c->t->pre, s, n, bpe_word, c) != 0) c->failed = 1;
    return c->failed;
}

/* Longest special token starting at s[0] that may be matched; returns its id and length. */
static int32_t match_special(const ob_tokenizer_t *t, const unsigned char *s, size_t n, int parse_special,
                             size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        const u64_slot *sl = u64_map_get(&t->trie, ((uint64_t)node << 8) | s[j]);
        if (!sl) break;
        node = sl->v0;
        int32_t id = t->trie_term[node];
        if (id >= 0 && (parse_special || t->type[id] == OB_TOKTYPE_USER_DEFINED)) { best = id; *mlen = j + 1; }
    }
    return best;
}

int ob_tokenizer_encode(const ob_tokenizer_t *t, const char *text, size_t len, int add_bos,
                        int parse_special, int32_t *out, int max_out) {
    if (!t || (!text && len) || (!out && max_out > 0)) return -1;
    enc_ctx c = {0};
    c.t = t;
    c.out = out;
    c.max_out = max_out > 0 ? max_out : 0;
    /* add_bos asks for what the vocabulary adds around a text, as llama.cpp's add_special:
     * BOS when add_bos_token, EOS when add_eos_token. */
    if (add_bos && t->add_bos && t->bos >= 0) emit(&c, t->bos);
    /* Special tokens split the text first: user-defined ones always (Hugging Face matches added
     * tokens that are not special in any text), control and unknown ones when parse_special. */
    int scan = parse_special || t->has_user_defined;
    const unsigned char *u = (const unsigned char *)text;
    size_t frag = 0, i = 0;
    int prev_special = 1;   /* SPM: a text fragment at the start or after a special gets the prefix */
    while (scan && i < len && !c.failed) {
        size_t ml = 0;
        int32_t id = t->trie_first[u[i]] ? match_special(t, u + i, len - i, parse_special, &ml) : -1;
        if (id < 0) { i++; continue; }
        if (i > frag) encode_text(&c, text + frag, i - frag, t->add_space_prefix && prev_special);
        emit(&c, id);
        prev_special = 1;
        i += ml;
        frag = i;
    }
    if (!c.failed && len > frag) encode_text(&c, text + frag, len - frag, t->add_space_prefix && prev_special);
    if (add_bos && t->add_eos && t->eos >= 0) emit(&c, t->eos);
    ctx_free(&c);
    if (c.failed || c.n > INT_MAX) return -1;
    return (int)c.n;
}

/* ---- queries ------------------------------------------------------------------------------- */

int32_t ob_tokenizer_n_vocab(const ob_tokenizer_t *t) { return t ? t->n_vocab : 0; }
int32_t ob_tokenizer_bos(const ob_tokenizer_t *t) { return t ? t->bos : -1; }
int32_t ob_tokenizer_eos(const ob_tokenizer_t *t) { return t ? t->eos : -1; }

int ob_tokenizer_is_eog(const ob_tokenizer_t *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    return (t->flags[id] & TOKF_EOG) != 0;
}

int ob_tokenizer_token_bytes(const ob_tokenizer_t *t, int32_t id, char *buf, int buflen) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    size_t n = t->piece_off[id + 1] - t->piece_off[id];
    if (n > INT_MAX) return -1;
    if (buf && buflen > 0) memcpy(buf, t->piece + t->piece_off[id], n < (size_t)buflen ? n : (size_t)buflen);
    return (int)n;
}

/* ---- GGUF ---------------------------------------------------------------------------------- */

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_MERGES "tokenizer.ggml.merges"

static int is_int_type(int vt) {
    return vt == OB_GGUF_UINT8 || vt == OB_GGUF_INT8 || vt == OB_GGUF_UINT16 || vt == OB_GGUF_INT16 ||
           vt == OB_GGUF_UINT32 || vt == OB_GGUF_INT32 || vt == OB_GGUF_UINT64 || vt == OB_GGUF_INT64;
}

static const char *arr_desc(const ob_gguf_value *v, char *buf, size_t len) {
    if (v->type != OB_GGUF_ARRAY) return ob_gguf_vtype_name(v->type);
    snprintf(buf, len, "array of %s", ob_gguf_vtype_name(v->v.arr.elem_type));
    return buf;
}

/* An optional token id key: absent -> def (dropped when out of range, as llama.cpp does for its
 * defaults); present -> must be a valid id. */
static int read_id(const ob_gguf_t *g, const char *key, int32_t def, int32_t n, int32_t *out,
                   char *err, size_t errlen) {
    int64_t v = 0;
    int rc = ob_gguf_get_i64(g, key, &v, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) { *out = def >= 0 && def < n ? def : -1; return 0; }
    if (v < 0 || v >= n) {
        snprintf(err, errlen, "%s: token id %lld is out of range (the vocabulary has %d tokens)",
                 key, (long long)v, n);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int read_bool(const ob_gguf_t *g, const char *key, int *out, char *err, size_t errlen) {
    int v = 0, rc = ob_gguf_get_bool(g, key, &v, err, errlen);
    if (rc < 0) return -1;
    if (rc > 0) *out = !!v;
    return 0;
}

static const ob_gguf_value *get_str_array(const ob_gguf_t *g, const char *key, char *err, size_t errlen,
                                          int *bad) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    char tn[64];
    *bad = 0;
    if (!v) return NULL;
    if (v->type != OB_GGUF_ARRAY || v->v.arr.elem_type != OB_GGUF_STRING || (v->v.arr.n && !v->v.arr.items)) {
        snprintf(err, errlen, "%s: expected an array of strings, found %s", key, arr_desc(v, tn, sizeof tn));
        *bad = 1;
        return NULL;
    }
    return v;
}

int ob_tokenizer_load_gguf(const ob_gguf_t *g, ob_tokenizer_t **out, char *err, size_t errlen) {
    ob_tokenizer_spec s;
    const char *model = NULL, *pre_name = NULL;
    const char **texts = NULL, **merges = NULL;
    size_t *lens = NULL, *merge_lens = NULL;
    uint8_t *types = NULL;
    float *scores = NULL;
    int rc = -1, bad = 0;
    char tn[64];

    *out = NULL;
    memset(&s, 0, sizeof s);
    if (!g) { snprintf(err, errlen, "tokenizer: no file"); return -1; }

    int got = ob_gguf_get_str(g, KEY_MODEL, &model, err, errlen);
    if (got < 0) return -1;
    if (got == 0) { snprintf(err, errlen, "%s: missing (the file carries no tokenizer)", KEY_MODEL); return -1; }
    if (strcmp(model, "gpt2") == 0) s.model = OB_TOK_MODEL_BPE;
    else if (strcmp(model, "llama") == 0) s.model = OB_TOK_MODEL_SPM;
    else {
        snprintf(err, errlen, "%s: tokenizer model '%s' is not supported (supported: gpt2, llama)", KEY_MODEL, model);
        return -1;
    }

    /* tokens */
    const ob_gguf_value *tv = get_str_array(g, KEY_TOKENS, err, errlen, &bad);
    if (bad) return -1;
    if (!tv) { snprintf(err, errlen, "%s: missing", KEY_TOKENS); return -1; }
    if (tv->v.arr.n == 0) { snprintf(err, errlen, "%s: the vocabulary is empty", KEY_TOKENS); return -1; }
    if (tv->v.arr.n >= (uint64_t)INT32_MAX) {
        snprintf(err, errlen, "%s: %llu tokens is more than this engine supports", KEY_TOKENS,
                 (unsigned long long)tv->v.arr.n);
        return -1;
    }
    int32_t n = (int32_t)tv->v.arr.n;
    texts = malloc((size_t)n * sizeof *texts);
    lens = malloc((size_t)n * sizeof *lens);
    types = malloc((size_t)n);
    if (!texts || !lens || !types) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
    for (int32_t i = 0; i < n; i++) {
        const ob_gguf_value *it = &tv->v.arr.items[i];
        if (it->type != OB_GGUF_STRING || (!it->v.str.ptr && it->v.str.len)) {
            snprintf(err, errlen, "%s[%d]: expected a string, found %s", KEY_TOKENS, i, ob_gguf_vtype_name(it->type));
            goto done;
        }
        texts[i] = it->v.str.ptr;
        lens[i] = (size_t)it->v.str.len;
        types[i] = OB_TOKTYPE_NORMAL;
    }

    /* token types */
    const ob_gguf_value *yv = ob_gguf_get(g, KEY_TYPES);
    if (yv) {
        if (yv->type != OB_GGUF_ARRAY || !is_int_type(yv->v.arr.elem_type)) {
            snprintf(err, errlen, "%s: expected an array of integers, found %s", KEY_TYPES, arr_desc(yv, tn, sizeof tn));
            goto done;
        }
        if (yv->v.arr.n != (uint64_t)n) {
            snprintf(err, errlen, "%s: %llu entries for %d tokens in %s", KEY_TYPES,
                     (unsigned long long)yv->v.arr.n, n, KEY_TOKENS);
            goto done;
        }
        for (int32_t i = 0; i < n; i++) {
            int64_t ty = ob_gguf_arr_i64(yv, (uint64_t)i);
            if (ty < 0 || ty > OB_TOKTYPE_BYTE) {
                snprintf(err, errlen, "%s[%d]: %lld is not a token type (0..6)", KEY_TYPES, i, (long long)ty);
                goto done;
            }
            types[i] = (uint8_t)ty;
        }
    }

    /* scores */
    const ob_gguf_value *sv = ob_gguf_get(g, KEY_SCORES);
    if (sv) {
        int et = sv->type == OB_GGUF_ARRAY ? sv->v.arr.elem_type : -1;
        if (et != OB_GGUF_FLOAT32 && et != OB_GGUF_FLOAT64 && et != OB_GGUF_INT32) {
            snprintf(err, errlen, "%s: expected an array of floats, found %s", KEY_SCORES, arr_desc(sv, tn, sizeof tn));
            goto done;
        }
        if (sv->v.arr.n != (uint64_t)n) {
            snprintf(err, errlen, "%s: %llu entries for %d tokens in %s", KEY_SCORES,
                     (unsigned long long)sv->v.arr.n, n, KEY_TOKENS);
            goto done;
        }
        scores = malloc((size_t)n * sizeof *scores);
        if (!scores) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
        for (int32_t i = 0; i < n; i++) scores[i] = (float)ob_gguf_arr_f64(sv, (uint64_t)i);
    }

    /* model-specific keys and defaults (llama.cpp's) */
    const ob_pretok_def *pre = NULL;
    int32_t def_bos = -1, def_eos = -1, def_unk = -1;
    s.add_bos = 0;
    if (s.model == OB_TOK_MODEL_SPM) {
        def_bos = 1; def_eos = 2; def_unk = 0;
        s.add_bos = 1;
        s.add_space_prefix = 1;
    } else {
        const ob_gguf_value *mv = get_str_array(g, KEY_MERGES, err, errlen, &bad);
        if (bad) goto done;
        if (!mv) { snprintf(err, errlen, "%s: missing (a gpt2 vocabulary needs its merges)", KEY_MERGES); goto done; }
        s.n_merges = (int64_t)mv->v.arr.n;
        if (mv->v.arr.n > (uint64_t)INT32_MAX) { snprintf(err, errlen, "%s: too many merges", KEY_MERGES); goto done; }
        if (s.n_merges) {
            merges = malloc((size_t)s.n_merges * sizeof *merges);
            merge_lens = malloc((size_t)s.n_merges * sizeof *merge_lens);
            if (!merges || !merge_lens) { snprintf(err, errlen, "tokenizer: out of memory"); goto done; }
            for (int64_t i = 0; i < s.n_merges; i++) {
                const ob_gguf_value *it = &mv->v.arr.items[i];
                int ok = it->type == OB_GGUF_STRING && (it->v.str.ptr || !it->v.str.len);
                merges[i] = ok ? it->v.str.ptr : "";
                merge_lens[i] = ok ? (size_t)it->v.str.len : 0;
            }
        }
        got = ob_gguf_get_str(g, KEY_PRE, &pre_name, err, errlen);
        if (got < 0) goto done;
        if (got == 0) pre_name = "default";   /* llama.cpp: warns, quality degraded */
        pre = ob_pretok_find(pre_name);
        if (!pre) {
            char names[1500];
            ob_pretok_names(names, sizeof names);
            snprintf(err, errlen, "%s: unknown pre-tokenizer '%s' (known: %s)", KEY_PRE, pre_name, names);
            goto done;
        }
        s.add_bos = pre->add_bos;
        s.ignore_merges = pre->ignore_merges;
        s.pre_regex = pre->regex;
        while (s.n_pre_regex < OB_PRETOK_MAX_REGEX && pre->regex[s.n_pre_regex]) s.n_pre_regex++;
    }

    if (read_id(g, "tokenizer.ggml.bos_token_id", def_bos, n, &s.bos, err, errlen) ||
        read_id(g, "tokenizer.ggml.eos_token_id", def_eos, n, &s.eos, err, errlen) ||
        read_id(g, "tokenizer.ggml.unknown_token_id", def_unk, n, &s.unk, err, errlen) ||
        read_id(g, "tokenizer.ggml.padding_token_id", -1, n, &s.pad, err, errlen) ||
        read_id(g, "tokenizer.ggml.eot_token_id", -1, n, &s.eot, err, errlen) ||
        read_id(g, "tokenizer.ggml.eom_token_id", -1, n, &s.eom, err, errlen))
        goto done;
    static const char *const fim_keys[] = {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                           "tokenizer.ggml.fim_sep_token_id"};
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) s.extra_eog[i] = -1;
    for (int i = 0; i < 3; i++)
        if (read_id(g, fim_keys[i], -1, n, &s.extra_eog[i], err, errlen)) goto done;
    if (read_bool(g, "tokenizer.ggml.add_bos_token", &s.add_bos, err, errlen) ||
        read_bool(g, "tokenizer.ggml.add_eos_token", &s.add_eos, err, errlen) ||
        read_bool(g, "tokenizer.ggml.add_space_prefix", &s.add_space_prefix, err, errlen))
        goto done;
    if (s.model != OB_TOK_MODEL_SPM) s.add_space_prefix = 0;   /* SPM-only behaviour */

    s.n_tokens = n;
    s.text = texts;
    s.text_len = lens;
    s.type = types;
    s.score = scores;
    s.merge = merges;
    s.merge_len = merge_lens;
    rc = ob_tokenizer_build(&s, out, err, errlen);
done:
    free(texts); free(lens); free(types); free(scores); free(merges); free(merge_lens);
    return rc;
}
