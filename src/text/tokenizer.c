/* tokenizer.c — building a tokenizer from an ob_tokenizer_spec, and the per-token queries.
 *
 * Owns: ob_tokenizer_build (see tokenizer_spec.h): the token arena and text -> id map, token types
 * and end-of-generation marks, merge tables (ranked pairs for byte-level and Hugging Face BPE),
 * the added / special token tries, byte tokens, the decoded piece of every token; and the small
 * queries of onebit.h (n_vocab, bos, eos, is_eog, token_bytes).
 * Does not own: encoding (tokenizer_encode.c), decoding text (detok.c), reading GGUF keys
 * (tokenizer_gguf.c) or tokenizer.json (tokenizer_json.c).
 *
 * Reference behaviour is llama.cpp's llama-vocab.cpp for vocabularies read from GGUF and Hugging
 * Face tokenizers (the oracle) for tokenizer.json: control, unknown and byte tokens never come
 * out of merges (SentencePiece keeps them out of its piece table), so the literal text "<0x41>"
 * or "</s>" typed by a user stays text.
 *
 * A built tokenizer is read-only: encode and token_bytes may run from many threads at once.
 * token_bytes is a copy out of the decoded-piece cache built here and never allocates.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
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
    uint32_t h = tok_hash_bytes(s, len);
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

static int u64_map_init(u64_map *m, size_t n) {
    size_t cap = pow2_at_least(n * 2 + 1);
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) return -1;
    for (size_t i = 0; i < cap; i++) m->slot[i].key = U64_EMPTY;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

/* Inserts unless present (the first value wins). Returns 1 if inserted, 0 if present, -1 on OOM. */
static int u64_map_add(u64_map *m, uint64_t key, int32_t v0, int32_t v1) {
    if ((m->n + 1) * 2 > m->mask + 1) {      /* grow */
        u64_map g;
        if (u64_map_init(&g, (m->mask + 1)) != 0) return -1;
        for (size_t i = 0; i <= m->mask; i++)
            if (m->slot[i].key != U64_EMPTY) {
                size_t j = tok_hash_u64(m->slot[i].key) & g.mask;
                while (g.slot[j].key != U64_EMPTY) j = (j + 1) & g.mask;
                g.slot[j] = m->slot[i];
            }
        g.n = m->n;
        free(m->slot);
        *m = g;
    }
    for (size_t i = tok_hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
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
int ob_tok_parse_byte(const char *s, size_t n) {
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
        int b = ob_tok_parse_byte(s, n);
        if (b >= 0) { if (dst) dst[0] = (char)b; return 1; }
        if (!t->byte_level) { if (dst) memcpy(dst, s, n); return n; }
    }
    if (t->model == OB_TOK_MODEL_WORDPIECE) {   /* the piece of a word: "##ing" -> "ing" */
        size_t k = t->cont_prefix_len && n >= t->cont_prefix_len && memcmp(s, t->cont_prefix, t->cont_prefix_len) == 0
                       ? t->cont_prefix_len : 0;
        if (dst) memcpy(dst, s + k, n - k);
        return n - k;
    }
    for (size_t i = 0; i < n;) {
        size_t l = ob_utf8_len((const unsigned char *)s + i, n - i);
        if (!t->byte_level) {
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
    return tok_find(t, s, strlen(s));
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

static int trie_init(ob_trie *tr, size_t total) {
    if (total > INT32_MAX / 2) return -1;
    tr->term = malloc(total * sizeof *tr->term);
    if (!tr->term || u64_map_init(&tr->edge, total) != 0) return -1;
    tr->term[0] = -1;
    tr->n_nodes = 1;
    return 0;
}

/* Duplicate texts: the later id wins, as in the vocab map. */
static int trie_add(ob_trie *tr, const unsigned char *s, size_t n, int32_t id) {
    if (n == 0) return 0;
    tr->first[s[0]] = 1;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = ((uint64_t)node << 8) | s[i];
        const u64_slot *sl = u64_map_get(&tr->edge, key);
        if (sl) { node = sl->v0; continue; }
        int32_t child = tr->n_nodes++;
        tr->term[child] = -1;
        if (u64_map_add(&tr->edge, key, child, 0) < 0) return -1;
        node = child;
    }
    tr->term[node] = id;
    return 0;
}

static void trie_free(ob_trie *tr) {
    free(tr->edge.slot);
    free(tr->term);
}

static int is_special_type(int ty) {
    return ty == OB_TOKTYPE_CONTROL || ty == OB_TOKTYPE_USER_DEFINED || ty == OB_TOKTYPE_UNKNOWN;
}

/* GGUF: control, user-defined and unknown tokens. tokenizer.json: added tokens, the ones marked
 * normalized by their normalized text in a second trie (Hugging Face matches those after the
 * normalizer ran). */
static int build_tries(ob_tokenizer_t *t) {
    size_t total = 1, ntotal = 1;
    ob_strbuf nb = {0}, tmp = {0};
    int rc = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n = t->text_off[id + 1] - t->text_off[id];
        if (t->hf ? (t->added && (t->added[id] & OB_ADDED)) : is_special_type(t->type[id])) {
            if (t->hf && (t->added[id] & OB_ADDED_NORMALIZED)) ntotal += 4 * n + 16;   /* normalizing may grow it */
            else total += n;
        }
    }
    if (trie_init(&t->trie, total) != 0 || trie_init(&t->ntrie, ntotal) != 0) goto done;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const unsigned char *s = (const unsigned char *)tok_text(t, id, &n);
        if (!t->hf) {
            if (!is_special_type(t->type[id])) continue;
            if (t->type[id] == OB_TOKTYPE_USER_DEFINED && n) t->has_user_defined = 1;
            if (trie_add(&t->trie, s, n, id)) goto done;
            continue;
        }
        if (!t->added || !(t->added[id] & OB_ADDED)) continue;
        if (!(t->added[id] & OB_ADDED_SPECIAL) && n) t->has_user_defined = 1;
        if (!(t->added[id] & OB_ADDED_NORMALIZED)) {
            if (trie_add(&t->trie, s, n, id)) goto done;
            continue;
        }
        if (ob_norm_apply(t->norm, (const char *)s, n, &nb, &tmp)) goto done;
        if (nb.n > 4 * n + 15) continue;   /* cannot happen with the supported normalizers */
        if (trie_add(&t->ntrie, (const unsigned char *)nb.p, nb.n, id)) goto done;
    }
    rc = 0;
done:
    ob_strbuf_free(&nb);
    ob_strbuf_free(&tmp);
    return rc;
}

/* BPE merges -> (left, right) -> rank, result. A repeated pair keeps its first rank (llama.cpp)
 * or its last (Hugging Face builds a map from the list, later entries overwriting). */
static int build_merges(ob_tokenizer_t *t, const ob_tokenizer_spec *s) {
    size_t cap = 64;
    char *buf = malloc(cap);
    if (!buf || u64_map_init(&t->merges, (size_t)s->n_merges) != 0) { free(buf); return -1; }
    for (int64_t r = 0; r < s->n_merges; r++) {
        const char *m = s->merge[r];
        size_t n = m ? s->merge_len[r] : 0, sp = 1;
        if (s->merge_split) sp = s->merge_split[r];
        else while (sp < n && m[sp] != ' ') sp++;   /* split at the first space after the first byte */
        if (sp >= n || r > INT32_MAX) { t->n_merges_skipped++; continue; }
        int32_t a = tok_find(t, m, sp), b = tok_find(t, m + sp + 1, n - sp - 1);
        if (n > cap) {
            char *nb = realloc(buf, n * 2);
            if (!nb) { free(buf); return -1; }
            buf = nb; cap = n * 2;
        }
        /* the result drops the right part's continuing_subword_prefix (Hugging Face) */
        size_t skip = 0, rl = n - sp - 1;
        if (t->cont_prefix_len && rl >= t->cont_prefix_len && memcmp(m + sp + 1, t->cont_prefix, t->cont_prefix_len) == 0)
            skip = t->cont_prefix_len;
        memcpy(buf, m, sp);
        memcpy(buf + sp, m + sp + 1 + skip, rl - skip);
        int32_t res = tok_find(t, buf, sp + rl - skip);
        if (a < 0 || b < 0 || res < 0) { t->n_merges_skipped++; continue; }
        uint64_t key = ((uint64_t)a << 32) | (uint32_t)b;
        int rc = u64_map_add(&t->merges, key, (int32_t)r, res);
        if (rc < 0) { free(buf); return -1; }
        if (rc == 0) {
            t->n_merges_skipped++;
            if (t->hf) {
                u64_slot *sl = (u64_slot *)u64_map_get(&t->merges, key);
                sl->v0 = (int32_t)r;
                sl->v1 = res;
            }
        }
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
    trie_free(&t->trie); trie_free(&t->ntrie);
    free(t->added);
    ob_norm_free(t->norm);
    ob_prechain_free(t->prechain);
    ob_decoder_free(t->decoder);
    free(t->cont_prefix); free(t->eow_suffix);
    free(t);
}

#define OOM() do { snprintf(err, errlen, "tokenizer: out of memory"); goto fail; } while (0)

static char *dup_affix(const char *s, size_t *len) {
    *len = s ? strlen(s) : 0;
    if (!*len) return NULL;
    char *d = malloc(*len + 1);
    if (d) memcpy(d, s, *len + 1);
    else *len = 0;
    return d;
}

int ob_tokenizer_build(const ob_tokenizer_spec *s, ob_tokenizer_t **out, char *err, size_t errlen) {
    uint16_t b2u[256];
    int16_t u2b[324];
    ob_tokenizer_t *t = NULL;
    *out = NULL;
    if (!s) { snprintf(err, errlen, "tokenizer: no description"); return -1; }
    /* Take the pipeline objects first, so every failure below frees them. */
    t = calloc(1, sizeof *t);
    if (!t) {
        ob_norm_free(s->norm); ob_prechain_free(s->prechain); ob_decoder_free(s->decoder);
        snprintf(err, errlen, "tokenizer: out of memory");
        return -1;
    }
    static atomic_uint_fast64_t next_uid = 1;
    t->uid = (uint64_t)atomic_fetch_add(&next_uid, 1);
    t->norm = s->norm;
    t->prechain = s->prechain;
    t->decoder = s->decoder;
    if (s->model < OB_TOK_MODEL_BPE || s->model > OB_TOK_MODEL_WORDPIECE) {
        snprintf(err, errlen, "tokenizer: unknown model %d", s->model);
        goto fail;
    }
    if (s->n_tokens <= 0 || s->n_tokens >= INT32_MAX || !s->text || !s->text_len) {
        snprintf(err, errlen, "tokenizer: no tokens");
        goto fail;
    }
    const int32_t *idp[] = {&s->bos, &s->eos, &s->unk, &s->pad, &s->eot, &s->eom};
    static const char *const idn[] = {"bos", "eos", "unk", "pad", "eot", "eom"};
    for (int i = 0; i < 6; i++)
        if (*idp[i] < -1 || *idp[i] >= s->n_tokens) {
            snprintf(err, errlen, "tokenizer: %s id %d out of range (%d tokens)", idn[i], *idp[i], s->n_tokens);
            goto fail;
        }
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++)
        if (s->extra_eog[i] < -1 || s->extra_eog[i] >= s->n_tokens) {
            snprintf(err, errlen, "tokenizer: end-of-generation id %d out of range (%d tokens)",
                     s->extra_eog[i], s->n_tokens);
            goto fail;
        }
    if (s->model == OB_TOK_MODEL_BPE && !s->hf && (s->n_pre_regex < 1 || !s->pre_regex)) {
        snprintf(err, errlen, "tokenizer: byte-level BPE without pre-tokenizer regexes");
        goto fail;
    }
    if (s->n_merges < 0 || (s->n_merges > 0 && (!s->merge || !s->merge_len))) {
        snprintf(err, errlen, "tokenizer: bad merge list");
        goto fail;
    }
    if (s->n_post_pre < 0 || s->n_post_pre > OB_TOK_MAX_POST || s->n_post_suf < 0 || s->n_post_suf > OB_TOK_MAX_POST) {
        snprintf(err, errlen, "tokenizer: too many post-processor tokens");
        goto fail;
    }
    for (int i = 0; i < s->n_post_pre + s->n_post_suf; i++) {
        int32_t id = i < s->n_post_pre ? s->post_pre[i] : s->post_suf[i - s->n_post_pre];
        if (id < 0 || id >= s->n_tokens) {
            snprintf(err, errlen, "tokenizer: post-processor token id %d out of range (%d tokens)", id, s->n_tokens);
            goto fail;
        }
    }

    int32_t n = s->n_tokens;
    t->hf = !!s->hf;
    t->byte_level = s->model == OB_TOK_MODEL_BPE || (s->hf && ob_prechain_byte_level(s->prechain));
    t->byte_fallback = !!s->byte_fallback;
    t->fuse_unk = !!s->fuse_unk;
    t->wp_max_chars = s->wp_max_chars > 0 ? s->wp_max_chars : 100;
    t->cont_prefix = dup_affix(s->cont_prefix, &t->cont_prefix_len);
    t->eow_suffix = dup_affix(s->eow_suffix, &t->eow_suffix_len);
    if (s->model == OB_TOK_MODEL_WORDPIECE && !s->cont_prefix) t->cont_prefix = dup_affix("##", &t->cont_prefix_len);
    if (s->hf) {
        memcpy(t->post_pre, s->post_pre, sizeof t->post_pre);
        memcpy(t->post_suf, s->post_suf, sizeof t->post_suf);
        t->n_post_pre = s->n_post_pre;
        t->n_post_suf = s->n_post_suf;
        if (s->added) {
            t->added = malloc((size_t)n);
            if (!t->added) OOM();
            memcpy(t->added, s->added, (size_t)n);
        }
    } else {
        if (s->add_bos && s->bos >= 0) t->post_pre[t->n_post_pre++] = s->bos;
        if (s->add_eos && s->eos >= 0) t->post_suf[t->n_post_suf++] = s->eos;
    }
    t->model = s->model;
    t->n_vocab = n;
    t->bos = s->bos; t->eos = s->eos; t->unk = s->unk; t->pad = s->pad; t->eot = s->eot; t->eom = s->eom;
    t->add_bos = !!s->add_bos; t->add_eos = !!s->add_eos; t->add_space_prefix = !!s->add_space_prefix;
    t->ignore_merges = (s->model == OB_TOK_MODEL_BPE || s->model == OB_TOK_MODEL_HF_BPE) && s->ignore_merges;

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
        if (t->hf) {
            /* Hugging Face: merges only make what the merge list says; the model's vocabulary
             * (not tokens that exist only as added tokens) is what it may emit. */
            if (ty != OB_TOKTYPE_UNUSED && (!t->added || !(t->added[i] & OB_ADDED) || (t->added[i] & OB_ADDED_MODEL)))
                t->flags[i] |= TOKF_MERGE | TOKF_EMIT;
        } else if (ty == OB_TOKTYPE_NORMAL || ty == OB_TOKTYPE_USER_DEFINED || ty == OB_TOKTYPE_UNDEFINED)
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
    memcpy(t->u2b, u2b, sizeof t->u2b);
    for (int b = 0; b < 256; b++) {
        char tmp[8];
        size_t l;
        l = put_cp2(tmp, b2u[b]);
        memcpy(t->b2u[b], tmp, l);
        t->b2u_len[b] = (uint8_t)l;
        if (!t->byte_level) {
            snprintf(tmp, sizeof tmp, "<0x%02X>", b);
            l = 6;
        }
        t->byte_tok[b] = tok_find(t, tmp, l);
        if (t->byte_tok[b] >= 0 && !(t->flags[t->byte_tok[b]] & TOKF_EMIT) && t->hf) t->byte_tok[b] = -1;
        if (t->byte_tok[b] < 0 && s->model == OB_TOK_MODEL_SPM) {
            tmp[0] = (char)b;                 /* llama.cpp: fall back to the byte itself */
            t->byte_tok[b] = tok_find(t, tmp, 1);
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

    if (s->model == OB_TOK_MODEL_BPE || s->model == OB_TOK_MODEL_HF_BPE)
        if (build_merges(t, s) != 0) OOM();
    if (s->model == OB_TOK_MODEL_BPE && !s->hf &&
        ob_pretok_new(s->pre_regex, s->n_pre_regex, &t->pre, err, errlen) != 0)
        goto fail;

    if (build_tries(t) != 0) OOM();

    *out = t;
    return 0;
fail:
    ob_tokenizer_free(t);
    return -1;
}

int64_t ob_tokenizer_n_merges_skipped(const ob_tokenizer_t *t) {
    return t ? t->n_merges_skipped : 0;
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
