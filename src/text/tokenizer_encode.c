/* tokenizer_encode.c — text -> token ids.
 *
 * Owns: ob_tokenizer_encode and everything on its way: finding added / special tokens in the
 * text, the tokenizer.json pipeline (normalizer, added tokens matched after normalization,
 * pre-tokenizer chain), the four models (byte-level BPE, Hugging Face BPE over characters with
 * byte fallback, WordPiece, SentencePiece BPE by score) and the post-processor's ids.
 *   - GGUF vocabularies follow llama.cpp: control / user-defined tokens split the text first,
 *     byte-level BPE words come from the tokenizer.ggml.pre regexes, SPM fragments get U+2581.
 *   - tokenizer.json vocabularies follow Hugging Face tokenizers (the oracle) step by step:
 *     AddedVocabulary::extract_and_normalize, PreTokenizer, Model::tokenize, TemplateProcessing.
 * Does not own: building the tables (tokenizer.c), the normalizer and pre-tokenizer steps
 * (normalize.c, prechain.c), decoding (detok.c).
 *
 * Encode allocates its scratch per call (prompt processing, not the decode loop), and each thread
 * keeps a bounded cache of the ids of recent short BPE words (see the word cache below).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"
#include "text/unicode.h"

/* Merge candidates live in a 4-ary min-heap of bare 64-bit keys: priority in the high half
 * (BPE: rank; SPM: score, descending), left symbol position in the low half (ties go left, as in
 * llama.cpp and Hugging Face). An entry is re-checked when popped rather than removed when its
 * pair changes: the pair now at that position is merged iff its priority is still the key's. */

/* ---- word cache ------------------------------------------------------------------------------
 * Text repeats its words, and the BPE of a word is a pure function of the word, so each thread
 * keeps the ids of recent short words: direct-mapped, WC_SLOTS entries (about 400 KB), allocated
 * on the thread's first encode and freed when the thread exits. Entries carry the tokenizer's
 * uid, so a thread that switches tokenizers never sees another one's ids. */
#define WC_SLOTS 4096
#define WC_MAX_BYTES 32
#define WC_MAX_IDS 12
typedef struct {
    uint64_t uid, hash;
    uint8_t len, n_ids;
    char bytes[WC_MAX_BYTES];
    int32_t ids[WC_MAX_IDS];
} wc_entry;

static pthread_key_t wc_key;
static pthread_once_t wc_once = PTHREAD_ONCE_INIT;
static int wc_ok;

static void wc_init(void) { wc_ok = pthread_key_create(&wc_key, free) == 0; }

static wc_entry *wc_get(void) {
    pthread_once(&wc_once, wc_init);
    if (!wc_ok) return NULL;
    wc_entry *w = pthread_getspecific(wc_key);
    if (!w && (w = calloc(WC_SLOTS, sizeof *w)) && pthread_setspecific(wc_key, w) != 0) {
        free(w);
        w = NULL;
    }
    return w;
}

typedef struct {
    const ob_tokenizer_t *t;
    int32_t *out;
    int64_t max_out, n;
    int failed;
    int parse_special;
    /* per-word scratch, grown on demand: [cap] symbols */
    size_t cap;
    int32_t *id, *prev, *next, *start, *len, *node;
    uint64_t *heap;               /* [3 * cap]: n - 1 initial pairs + at most 2 per merge */
    size_t n_heap;
    int32_t *node_l, *node_r, *node_n;   /* SPM merge tree: [2 * cap] */
    int32_t *stack;               /* [2 * cap] */
    char *buf;                    /* [buf_cap] byte-level word / escaped SPM text */
    size_t buf_cap;
    ob_strbuf wb;                    /* HF BPE / WordPiece: one candidate token text */
    ob_strbuf norm, norm_tmp;        /* the normalized text of one piece */
    ob_prechain_scratch *pre;
    wc_entry *wc;                 /* this thread's word cache, or NULL */
} enc_ctx;

/* The cache entry for word w (NULL: not cacheable); *hit: it holds w's ids. */
static wc_entry *wc_find(enc_ctx *c, const char *w, size_t n, int *hit) {
    *hit = 0;
    if (!c->wc || n == 0 || n > WC_MAX_BYTES) return NULL;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)w[i]) * 1099511628211ULL;
    wc_entry *e = &c->wc[(h ^ (h >> 29)) & (WC_SLOTS - 1)];
    *hit = e->uid == c->t->uid && e->hash == h && e->len == n && memcmp(e->bytes, w, n) == 0;
    if (!*hit) { e->uid = 0; e->hash = h; }
    return e;
}

/* After a word's ids were emitted from position from: keep them in e when they fit. */
static void wc_store(enc_ctx *c, wc_entry *e, const char *w, size_t n, int64_t from) {
    if (!e || c->failed || c->n - from > WC_MAX_IDS || c->n > c->max_out) return;
    e->len = (uint8_t)n;
    memcpy(e->bytes, w, n);
    e->n_ids = (uint8_t)(c->n - from);
    memcpy(e->ids, c->out + from, sizeof *e->ids * e->n_ids);
    e->uid = c->t->uid;
}

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
    ob_strbuf_free(&c->wb); ob_strbuf_free(&c->norm); ob_strbuf_free(&c->norm_tmp);
    ob_prechain_scratch_free(c->pre);
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

/* -- BPE by rank (byte-level and Hugging Face) -- */

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

/* Merges symbols c->id[0, ni) lowest rank first (ties: leftmost) and emits the result. A symbol
 * of -1 (a byte with no token) becomes <unk> where there is one. */
static void bpe_merge_emit(enc_ctx *c, int32_t ni) {
    const ob_tokenizer_t *t = c->t;
    if (ni <= 0) return;
    for (int32_t i = 0; i < ni; i++) {
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
}

/* A byte-level word: its bytes are the initial symbols. */
typedef int (*word_fn)(enc_ctx *c, const char *w, size_t n);

/* A word's ids from this thread's cache, or from f (then kept). */
static int cached_word(enc_ctx *c, const char *w, size_t n, word_fn f) {
    int hit;
    wc_entry *e = wc_find(c, w, n, &hit);
    if (hit) {
        for (int i = 0; i < e->n_ids; i++) emit(c, e->ids[i]);
        return 0;
    }
    int64_t from = c->n;
    int rc = f(c, w, n);
    wc_store(c, e, w, n, from);
    return rc;
}

static int bpe_word_uncached(enc_ctx *c, const char *w, size_t n);
static int bpe_word(void *vc, const char *w, size_t n) { return cached_word(vc, w, n, bpe_word_uncached); }

static int bpe_word_uncached(enc_ctx *c, const char *w, size_t n) {
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
        int32_t id = tok_find(t, c->buf, o);
        if (id >= 0 && (t->flags[id] & TOKF_EMIT)) { emit(c, id); return 0; }
    }
    for (size_t i = 0; i < n; i++) c->id[i] = t->byte_tok[u[i]];
    bpe_merge_emit(c, (int32_t)n);
    return 0;
}

/* The model token of a candidate text, or -1. */
static int32_t model_tok(const ob_tokenizer_t *t, const char *s, size_t n) {
    int32_t id = tok_find(t, s, n);
    return id >= 0 && (t->flags[id] & TOKF_EMIT) ? id : -1;
}

/* Hugging Face BPE::merge_word: each character (with continuing_subword_prefix when not first,
 * end_of_word_suffix when last) is a symbol if it is a token, else its bytes' <0xXX> tokens
 * (byte_fallback), else <unk> (consecutive ones fused when fuse_unk). */
static int hfbpe_word_uncached(enc_ctx *c, const char *w, size_t n);
static int hfbpe_word(void *vc, const char *w, size_t n) { return cached_word(vc, w, n, hfbpe_word_uncached); }

static int hfbpe_word_uncached(enc_ctx *c, const char *w, size_t n) {
    const ob_tokenizer_t *t = c->t;
    if (t->byte_level) {   /* a ByteLevel pre-tokenizer hands raw bytes: spell them in its alphabet */
        if (ensure_buf(c, 2 * n) != 0) return c->failed = 1;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(c->buf + o, t->b2u[(unsigned char)w[i]], 2);
            o += t->b2u_len[(unsigned char)w[i]];
        }
        w = c->buf;
        n = o;
    }
    if (t->ignore_merges) {
        int32_t id = model_tok(t, w, n);
        if (id >= 0) { emit(c, id); return 0; }
    }
    size_t per = 1 + t->cont_prefix_len + t->eow_suffix_len;
    if (n > (size_t)INT32_MAX / 8 / per || ensure(c, n * per + 1) != 0) return c->failed = 1;
    int32_t ns = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n;) {
        size_t l = ob_utf8_len((const unsigned char *)w + i, n - i);
        c->wb.n = 0;
        if ((i > 0 && ob_strbuf_put(&c->wb, t->cont_prefix, t->cont_prefix_len)) || ob_strbuf_put(&c->wb, w + i, l) ||
            (i + l == n && ob_strbuf_put(&c->wb, t->eow_suffix, t->eow_suffix_len)))
            return c->failed = 1;
        i += l;
        int32_t id = model_tok(t, c->wb.p, c->wb.n);
        if (id >= 0) {
            if (unk_pending) { c->id[ns++] = t->unk; unk_pending = 0; }
            c->id[ns++] = id;
            continue;
        }
        if (t->byte_fallback) {
            size_t k = 0;
            while (k < c->wb.n && t->byte_tok[(unsigned char)c->wb.p[k]] >= 0) k++;
            if (k == c->wb.n) {
                for (k = 0; k < c->wb.n; k++) c->id[ns++] = t->byte_tok[(unsigned char)c->wb.p[k]];
                continue;
            }
        }
        if (t->unk >= 0) {
            if (unk_pending && !t->fuse_unk) c->id[ns++] = t->unk;
            unk_pending = 1;
        }
    }
    if (unk_pending) c->id[ns++] = t->unk;
    bpe_merge_emit(c, ns);
    return 0;
}

/* -- WordPiece (Hugging Face WordPiece::tokenize) -- */

static int wp_word(void *vc, const char *w, size_t n) {
    enc_ctx *c = vc;
    const ob_tokenizer_t *t = c->t;
    if (n > (size_t)INT32_MAX / 8 || ensure(c, n + 1) != 0) return c->failed = 1;
    /* character starts */
    int32_t nc = 0;
    for (size_t i = 0; i < n; i += ob_utf8_len((const unsigned char *)w + i, n - i)) c->start[nc++] = (int32_t)i;
    c->start[nc] = (int32_t)n;
    int32_t nt = 0;
    int bad = nc > t->wp_max_chars;
    for (int32_t cs = 0; !bad && cs < nc;) {
        int32_t found = -1, ce = nc;
        size_t plen = cs > 0 ? t->cont_prefix_len : 0;
        /* the longest candidate is no longer than the longest token */
        while (ce > cs && plen + (size_t)(c->start[ce] - c->start[cs]) > t->max_text_len) ce--;
        for (; ce > cs; ce--) {
            c->wb.n = 0;
            if ((plen && ob_strbuf_put(&c->wb, t->cont_prefix, plen)) ||
                ob_strbuf_put(&c->wb, w + c->start[cs], (size_t)(c->start[ce] - c->start[cs])))
                return c->failed = 1;
            if ((found = model_tok(t, c->wb.p, c->wb.n)) >= 0) break;
        }
        if (found < 0) { bad = 1; break; }
        c->id[nt++] = found;
        cs = ce;
    }
    if (bad) {
        if (t->unk < 0) return c->failed = 1;   /* Hugging Face: MissingUnkToken */
        emit(c, t->unk);
        return 0;
    }
    for (int32_t i = 0; i < nt; i++) emit(c, c->id[i]);
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
    int32_t id = tok_find(c->t, c->buf + c->start[l], (size_t)c->len[l] + (size_t)c->len[r]);
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
            int32_t id = tok_find(t, c->buf + pos, kl);
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


/* -- added tokens -- */

/* Longest entry of tr starting at s[0]; returns its id and length, or -1. */
static int32_t trie_longest(const ob_trie *tr, const unsigned char *s, size_t n, size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        const u64_slot *sl = u64_map_get(&tr->edge, ((uint64_t)node << 8) | s[j]);
        if (!sl) break;
        node = sl->v0;
        if (tr->term[node] >= 0) { best = tr->term[node]; *mlen = j + 1; }
    }
    return best;
}

/* GGUF rule: control / unknown tokens only when parse_special; user-defined ones always. */
static int32_t match_special(const ob_tokenizer_t *t, const unsigned char *s, size_t n, int parse_special,
                             size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        const u64_slot *sl = u64_map_get(&t->trie.edge, ((uint64_t)node << 8) | s[j]);
        if (!sl) break;
        node = sl->v0;
        int32_t id = t->trie.term[node];
        if (id >= 0 && (parse_special || t->type[id] == OB_TOKTYPE_USER_DEFINED)) { best = id; *mlen = j + 1; }
    }
    return best;
}

static int32_t last_cp(const char *s, size_t n) {
    size_t k = n;
    while (k > 0 && n - k < 4) {
        k--;
        if (((unsigned char)s[k] & 0xC0) != 0x80) break;
    }
    int32_t cp = -1;
    if (k < n && ob_utf8_next((const unsigned char *)s + k, n - k, &cp) != n - k) cp = -1;
    return cp;
}

static size_t ws_run_before(const char *s, size_t end) {   /* start of the whitespace run ending at end */
    while (end > 0) {
        int32_t cp = last_cp(s, end);
        if (!ob_uni_is_whitespace(cp)) break;
        char tmp[4];
        end -= ob_utf8_put(cp, tmp);
    }
    return end;
}

static size_t ws_run_after(const char *s, size_t n) {      /* length of the whitespace run at s */
    size_t i = 0;
    while (i < n) {
        int32_t cp;
        size_t l = ob_utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!ob_uni_is_whitespace(cp)) break;
        i += l;
    }
    return i;
}

typedef int (*piece_fn)(enc_ctx *c, const char *s, size_t n, int at_start);

/* Hugging Face AddedVocabulary::find_matches over s: leftmost-longest, non-overlapping matches of
 * the trie, filtered by the token's flags; the text between goes to fn. */
static int added_split(enc_ctx *c, const ob_trie *tr, const char *s, size_t n, int parse_special, int at_start,
                       piece_fn fn) {
    const ob_tokenizer_t *t = c->t;
    const unsigned char *u = (const unsigned char *)s;
    size_t done = 0, i = 0;
    while (i < n && !c->failed) {
        size_t ml = 0;
        int32_t id = tr->first[u[i]] ? trie_longest(tr, u + i, n - i, &ml) : -1;
        if (id < 0) { i++; continue; }
        size_t ms = i, me = i + ml;
        i = me;
        uint8_t f = t->added[id];
        if ((f & OB_ADDED_SPECIAL) && !parse_special) continue;
        if (f & OB_ADDED_SINGLE_WORD) {
            int32_t a, b = -1;
            a = ms ? last_cp(s, ms) : -1;
            if (me < n) ob_utf8_next(u + me, n - me, &b);
            if ((ms && ob_uni_is_word(a)) || (me < n && ob_uni_is_word(b))) continue;
        }
        if (f & OB_ADDED_LSTRIP) {
            size_t ns = ws_run_before(s, ms);
            ms = ns > done ? ns : done;
        }
        if (f & OB_ADDED_RSTRIP) me += ws_run_after(s + me, n - me);
        if (ms < done) continue;   /* inside the whitespace a previous token took */
        if (ms > done && fn(c, s + done, ms - done, at_start && done == 0)) return c->failed = 1;
        emit(c, id);
        done = me;
        if (i < done) i = done;
    }
    if (!c->failed && n > done && fn(c, s + done, n - done, at_start && done == 0)) return c->failed = 1;
    return c->failed;
}

static int model_word(void *vc, const char *w, size_t n) {
    enc_ctx *c = vc;
    switch (c->t->model) {
    case OB_TOK_MODEL_BPE: return bpe_word(vc, w, n);
    case OB_TOK_MODEL_HF_BPE: return hfbpe_word(vc, w, n);
    case OB_TOK_MODEL_WORDPIECE: return wp_word(vc, w, n);
    }
    return c->failed = 1;
}

/* A piece of normalized text with no added token in it: pre-tokenizer, then the model. */
static int hf_words(enc_ctx *c, const char *s, size_t n, int at_start) {
    if (ob_prechain_run(c->t->prechain, &c->pre, s, n, at_start, model_word, c) != 0) c->failed = 1;
    return c->failed;
}

/* A piece of raw text between raw-matched added tokens: normalize, then match the normalized
 * added tokens in it. The normalized text lives in c->norm until the next piece. */
static int hf_piece(enc_ctx *c, const char *s, size_t n, int at_start) {
    const ob_tokenizer_t *t = c->t;
    if (t->norm) {
        if (ob_norm_apply(t->norm, s, n, &c->norm, &c->norm_tmp) != 0) return c->failed = 1;
        s = c->norm.p ? c->norm.p : "";
        n = c->norm.n;
    }
    if (t->ntrie.n_nodes > 1) return added_split(c, &t->ntrie, s, n, c->parse_special, at_start, hf_words);
    return n ? hf_words(c, s, n, at_start) : 0;
}

static int encode_text(enc_ctx *c, const char *s, size_t n, int prefix) {
    if (n == 0) return 0;
    if (c->t->model == OB_TOK_MODEL_SPM) return spm_fragment(c, s, n, prefix);
    if (ob_pretok_split(c->t->pre, s, n, bpe_word, c) != 0) c->failed = 1;
    return c->failed;
}

int ob_tokenizer_encode(const ob_tokenizer_t *t, const char *text, size_t len, int add_bos,
                        int parse_special, int32_t *out, int max_out) {
    if (!t || (!text && len) || (!out && max_out > 0)) return -1;
    enc_ctx c = {0};
    c.t = t;
    c.out = out;
    c.max_out = max_out > 0 ? max_out : 0;
    c.parse_special = parse_special;
    c.wc = wc_get();
    /* add_bos asks for what the vocabulary adds around a text: the post-processor's tokens
     * (tokenizer.json) or BOS / EOS as add_bos_token / add_eos_token say (GGUF). */
    if (add_bos) for (int i = 0; i < t->n_post_pre; i++) emit(&c, t->post_pre[i]);
    if (t->hf) {
        if (t->added) added_split(&c, &t->trie, text ? text : "", len, parse_special, 1, hf_piece);
        else hf_piece(&c, text ? text : "", len, 1);
    } else {
        /* Special tokens split the text first: user-defined ones always (Hugging Face matches added
         * tokens that are not special in any text), control and unknown ones when parse_special. */
        int scan = parse_special || t->has_user_defined;
        const unsigned char *u = (const unsigned char *)text;
        size_t frag = 0, i = 0;
        int prev_special = 1;   /* SPM: a text fragment at the start or after a special gets the prefix */
        while (scan && i < len && !c.failed) {
            size_t ml = 0;
            int32_t id = t->trie.first[u[i]] ? match_special(t, u + i, len - i, parse_special, &ml) : -1;
            if (id < 0) { i++; continue; }
            if (i > frag) encode_text(&c, text + frag, i - frag, t->add_space_prefix && prev_special);
            emit(&c, id);
            prev_special = 1;
            i += ml;
            frag = i;
        }
        if (!c.failed && len > frag) encode_text(&c, text + frag, len - frag, t->add_space_prefix && prev_special);
    }
    if (add_bos) for (int i = 0; i < t->n_post_suf; i++) emit(&c, t->post_suf[i]);
    ctx_free(&c);
    if (c.failed || c.n > INT_MAX) return -1;
    return (int)c.n;
}
