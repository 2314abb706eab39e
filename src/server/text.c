/* text.c — generated token bytes -> text a client may see.
 *
 * Owns: UTF-8 safety (a character split across tokens is held until complete; bytes that can
 * never form a character become U+FFFD, so every delta is valid UTF-8 for JSON) and stop
 * strings (text that could still become a stop string is held back; a stop string is never
 * released, also when it spans tokens).
 * Does not own: what the text means (outparse.c), tokens (the engine).
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

/* Length of the UTF-8 sequence a lead byte starts, 0 for a byte that cannot lead. */
static int seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether s[0..n) with n == seq_len is a valid character (no overlong forms or surrogates). */
static int valid_seq(const unsigned char *s, int n) {
    for (int i = 1; i < n; i++) if ((s[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0;
    if (n == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0;
    if (n == 4 && s[0] == 0xF0 && s[1] < 0x90) return 0;
    if (n == 4 && s[0] == 0xF4 && s[1] >= 0x90) return 0;
    return 1;
}

size_t ob_utf8_sanitize(const char *str, size_t n, int final, ob_sbuf *out) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0; /* run: start of valid bytes not yet copied */
    while (i < n) {
        int l = seq_len(s[i]);
        if (l == 1) { i++; continue; }
        if (l > 1 && i + (size_t)l > n) {
            /* Incomplete at the end: wait for more, unless what is there is already wrong. */
            int ok = 1;
            for (size_t k = i + 1; k < n; k++) if ((s[k] & 0xC0) != 0x80) ok = 0;
            if (ok && !final) break;
        } else if (l > 1 && valid_seq(s + i, l)) {
            i += (size_t)l;
            continue;
        }
        ob_sbuf_put(out, str + run, i - run);
        ob_sbuf_puts(out, "\xEF\xBF\xBD");
        i++;
        run = i;
    }
    ob_sbuf_put(out, str + run, i - run);
    return i;
}

int ob_textacc_feed(ob_textacc *a, const char *bytes, size_t n, ob_sbuf *out) {
    if (a->stopped) return 1;
    /* Hold only valid text: sanitize first, keeping an incomplete character in a scratch. */
    ob_sbuf_put(&a->pend, bytes, n);
    ob_sbuf clean = {0};
    size_t used = ob_utf8_sanitize(a->pend.p, a->pend.len, 0, &clean);
    size_t tail = a->pend.len - used; /* incomplete character, still raw */
    /* Earliest complete stop string. */
    const char *cut = NULL;
    for (int k = 0; k < a->n_stop; k++) {
        if (!a->stop[k][0] || !clean.p) continue;
        const char *f = strstr(clean.p, a->stop[k]);
        if (f && (!cut || f < cut)) cut = f;
    }
    if (cut) {
        ob_sbuf_put(out, clean.p, (size_t)(cut - clean.p));
        ob_sbuf_free(&clean);
        a->stopped = 1;
        a->pend.len = 0;
        return 1;
    }
    /* Longest suffix of the clean text that is a prefix of some stop string stays held. */
    size_t hold = 0;
    for (int k = 0; k < a->n_stop; k++) {
        size_t sl = strlen(a->stop[k]);
        for (size_t h = sl - (sl > 0); h > hold; h--) {
            if (h <= clean.len && !memcmp(clean.p + clean.len - h, a->stop[k], h)) { hold = h; break; }
        }
    }
    size_t rel = clean.len - hold;
    if (rel) ob_sbuf_put(out, clean.p, rel);
    /* Keep: held clean text + raw incomplete tail. */
    ob_sbuf keep = {0};
    if (hold) ob_sbuf_put(&keep, clean.p + rel, hold);
    if (tail) ob_sbuf_put(&keep, a->pend.p + used, tail);
    ob_sbuf_free(&clean);
    ob_sbuf_free(&a->pend);
    a->pend = keep;
    return 0;
}

void ob_textacc_flush(ob_textacc *a, ob_sbuf *out) {
    if (!a->stopped && a->pend.len) ob_utf8_sanitize(a->pend.p, a->pend.len, 1, out);
    a->pend.len = 0;
}

void ob_textacc_free(ob_textacc *a) { ob_sbuf_free(&a->pend); }

int ob_token_raw(const ob_tokenizer_t *t, int32_t id, ob_sbuf *out) {
    char small[256];
    int n = ob_tokenizer_token_bytes(t, id, small, sizeof small);
    if (n < 0) return -1;
    if (n <= (int)sizeof small) return ob_sbuf_put(out, small, (size_t)n);
    char *big = malloc((size_t)n);
    if (!big) return -1;
    ob_tokenizer_token_bytes(t, id, big, n);
    int rc = ob_sbuf_put(out, big, (size_t)n);
    free(big);
    return rc;
}

int ob_token_text(const ob_tokenizer_t *t, int32_t id, ob_sbuf *out) {
    ob_sbuf raw = {0};
    if (ob_token_raw(t, id, &raw)) { ob_sbuf_free(&raw); return -1; }
    ob_utf8_sanitize(raw.p ? raw.p : "", raw.len, 1, out);
    ob_sbuf_free(&raw);
    return 0;
}
