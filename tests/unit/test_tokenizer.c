/* test_tokenizer.c — the GGUF-vocabulary tokenizer (src/text/tokenizer.c, pretok.c).
 *
 * Builds small vocabularies with the GGUF writer and checks exact ids for hand-worked inputs:
 * a byte-level BPE (256 byte tokens, a few ranked merges, special tokens) under the llama-bpe,
 * qwen2 and gpt-2 pre-tokenizers, and a SentencePiece vocabulary (pieces with scores, <0xXX>
 * byte tokens). Also: round trips of random bytes / random UTF-8, refusal of bad vocabularies
 * with the key named, and load/encode speed on a 150k-token, 150k-merge vocabulary (timing
 * checks are skipped when OB_TEST_NO_TIMING is set, e.g. under valgrind).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/gguf.h"
#include "test.h"
#include "text/pretok.h"
#include "text/tokenizer.h"
#include "text/tokenizer_spec.h"

#define G "\xC4\xA0"   /* U+0120, GPT-2's character for the space byte */
#define SP "\xE2\x96\x81" /* U+2581, SentencePiece's space */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GPT-2 bytes_to_unicode, written out independently of the tokenizer's table. */
static size_t b2u(int b, char *out) {
    int cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static ob_tokenizer_t *load(ob_gguf_writer_t *w, char *err, size_t errlen) {
    char path[256];
    ob_gguf_t *g = NULL;
    ob_tokenizer_t *t = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_test.gguf", ob_test_tmpdir());
    int rc = ob_gguf_writer_write(w, path, NULL, NULL, err, errlen);
    ob_gguf_writer_free(w);
    if (rc != 0) { fprintf(stderr, "  writer: %s\n", err); return NULL; }
    if (ob_gguf_open(path, &g, err, errlen) != 0) { fprintf(stderr, "  open: %s\n", err); return NULL; }
    if (ob_tokenizer_load_gguf(g, &t, err, errlen) != 0) t = NULL;
    ob_gguf_close(g);   /* the tokenizer must not keep pointers into the file */
    remove(path);
    return t;
}

static int ids_eq(const int32_t *a, int na, const int32_t *b, int nb, const char *what) {
    int ok = na == nb;
    for (int i = 0; ok && i < na; i++) ok = a[i] == b[i];
    if (!ok) {
        fprintf(stderr, "  %s: got [", what);
        for (int i = 0; i < na; i++) fprintf(stderr, "%s%d", i ? " " : "", a[i]);
        fprintf(stderr, "], expected [");
        for (int i = 0; i < nb; i++) fprintf(stderr, "%s%d", i ? " " : "", b[i]);
        fprintf(stderr, "]\n");
    }
    return ok;
}

#define ENC_EQ(t, text, bos, special, ...)                                                      \
    do {                                                                                        \
        static const int32_t _exp[] = {__VA_ARGS__};                                            \
        int32_t _got[256];                                                                      \
        int _n = ob_tokenizer_encode((t), (text), strlen(text), (bos), (special), _got, 256);   \
        CHECK(ids_eq(_got, _n, _exp, (int)(sizeof _exp / sizeof _exp[0]), #text));              \
    } while (0)

/* Concatenated bytes of n ids; returns the length (or -1). */
static long decode_all(const ob_tokenizer_t *t, const int32_t *ids, int n, char *buf, long cap) {
    long o = 0;
    for (int i = 0; i < n; i++) {
        int l = ob_tokenizer_token_bytes(t, ids[i], NULL, 0);
        if (l < 0 || o + l > cap) return -1;
        if (ob_tokenizer_token_bytes(t, ids[i], buf + o, l) != l) return -1;
        o += l;
    }
    return o;
}

/* ---- byte-level BPE vocabulary ------------------------------------------------------------
 * ids 0..255: byte b. Then (id: text, merge rank):                                           */
enum {
    T_LL = 256, T_HE, T_EL, T_HELL, T_HELLO, T_GW, T_OR, T_GWOR, T_LD, T_GWORLD, T_BANG2, T_12, T_123,
    T_GQUOTE, T_QLL, T_XYZ, T_GG, T_HE_UP, T_HELL_UP, T_HELLO_UP, T_G123,
    T_EOT, T_IM_START, T_IM_END, T_TOOL, T_S1, T_S1S2, T_EOT_ID, T_BOT, N_BPE
};
static const char *const bpe_extra[] = {
    "ll", "he", "el", "hell", "hello", G "w", "or", G "wor", "ld", G "world", "!!", "12", "123",
    G "'", "'ll", "xyz", G G, "He", "Hell", "Hello", G "123",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>", "<s1>", "<s1><s2>", "<|eot_id|>",
    "<|begin_of_text|>",
};
/* rank = index. "q z" (no token "qz") and "nospace" are skipped. */
static const char *const bpe_merges[] = {
    "l l", "h e", "e l", "he ll", "hell o", G " w", "o r", G "w or", "l d", G "wor ld",
    "! !", "1 2", "12 3", G " '", "' ll", G " " G, "H e", "He ll", "Hell o", G " 123",
    "q z", "nospace",
};

static ob_gguf_writer_t *bpe_writer(const char *pre) {
    static char bytes[256][3];
    const char *tok[N_BPE];
    int32_t type[N_BPE];
    for (int b = 0; b < 256; b++) {
        size_t l = b2u(b, bytes[b]);
        bytes[b][l] = 0;
        tok[b] = bytes[b];
        type[b] = OB_TOKTYPE_NORMAL;
    }
    for (int i = 256; i < N_BPE; i++) { tok[i] = bpe_extra[i - 256]; type[i] = OB_TOKTYPE_NORMAL; }
    for (int i = T_EOT; i <= T_BOT; i++) type[i] = OB_TOKTYPE_CONTROL;
    type[T_TOOL] = OB_TOKTYPE_USER_DEFINED;
    type[T_EOT_ID] = OB_TOKTYPE_NORMAL;   /* mistyped by a converter: promoted as llama.cpp does */
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, N_BPE);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, type, N_BPE);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bpe_merges, NULL,
                               sizeof bpe_merges / sizeof bpe_merges[0]);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", T_BOT);
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", T_EOT);
    return w;
}

static ob_tokenizer_t *bpe(const char *pre) {
    char err[512] = "";
    ob_tokenizer_t *t = load(bpe_writer(pre), err, sizeof err);
    if (!t) fprintf(stderr, "  bpe(%s): %s\n", pre ? pre : "-", err);
    return t;
}

static void test_bpe_ids(void) {
    const char *x = "Hello world!!  123456 'll";
    ob_tokenizer_t *ll = bpe("llama-bpe"), *qw = bpe("qwen2"), *g2 = bpe("gpt-2");
    CHECK(ll && qw && g2);
    if (!ll || !qw || !g2) { ob_tokenizer_free(ll); ob_tokenizer_free(qw); ob_tokenizer_free(g2); return; }
    CHECK_EQ_INT(ob_tokenizer_n_vocab(ll), N_BPE);
    CHECK_EQ_INT(ob_tokenizer_bos(ll), T_BOT);
    CHECK_EQ_INT(ob_tokenizer_eos(ll), T_EOT);
    CHECK_EQ_INT(ob_tokenizer_n_merges_skipped(ll), 2);

    /* Splits: llama-bpe "Hello" " world" "!!" " " " " "123" "456" " '" "ll" (digits in threes,
     * the space before digits alone); qwen2 the same with single digits; gpt-2 keeps " 123456". */
    ENC_EQ(ll, x, 0, 0, T_HELLO_UP, T_GWORLD, T_BANG2, ' ', ' ', T_123, '4', '5', '6', T_GQUOTE, T_LL);
    ENC_EQ(qw, x, 0, 0, T_HELLO_UP, T_GWORLD, T_BANG2, ' ', ' ', '1', '2', '3', '4', '5', '6', T_GQUOTE, T_LL);
    ENC_EQ(g2, x, 0, 0, T_HELLO_UP, T_GWORLD, T_BANG2, ' ', T_G123, '4', '5', '6', T_GQUOTE, T_LL);
    /* contractions are their own piece */
    ENC_EQ(qw, "we'll", 0, 0, 'w', 'e', T_QLL);
    ENC_EQ(ll, "WE'LL", 0, 0, 'W', 'E', '\'', 'L', 'L');

    /* Merges by rank, not left to right: in "ell", "l l" (rank 0) beats "e l" (rank 2). */
    ENC_EQ(qw, "ell", 0, 0, 'e', T_LL);
    ENC_EQ(qw, "hello", 0, 0, T_HELLO);
    ENC_EQ(qw, "hel", 0, 0, T_HE, 'l');
    /* llama-bpe ignores merges for a word that is a token; qwen2 does not */
    ENC_EQ(ll, "xyz", 0, 0, T_XYZ);
    ENC_EQ(qw, "xyz", 0, 0, 'x', 'y', 'z');
    /* newline and control bytes map through bytes_to_unicode */
    ENC_EQ(qw, "\n\t", 0, 0, '\n', '\t');

    /* BOS: llama-bpe adds it by default, qwen2 and gpt-2 do not; add_bos=0 never */
    ENC_EQ(ll, "xyz", 1, 0, T_BOT, T_XYZ);
    ENC_EQ(qw, "xyz", 1, 0, 'x', 'y', 'z');
    ENC_EQ(g2, "a", 1, 0, 'a');
    ENC_EQ(ll, "", 1, 0, T_BOT);
    CHECK_EQ_INT(ob_tokenizer_encode(qw, "", 0, 1, 1, NULL, 0), 0);

    /* Special tokens */
    ENC_EQ(qw, "a<|im_start|>b<|im_end|>", 0, 1, 'a', T_IM_START, 'b', T_IM_END);
    ENC_EQ(qw, "<|im_start|>", 0, 0, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>');
    ENC_EQ(qw, "<s1><s2><s1>", 0, 1, T_S1S2, T_S1);               /* longest first */
    ENC_EQ(qw, "x<tool>y", 0, 0, 'x', T_TOOL, 'y');                /* user-defined: always */
    ENC_EQ(qw, "<|eot_id|>", 0, 1, T_EOT_ID);
    ENC_EQ(qw, "<|endoftext|><|endoftext|>", 0, 1, T_EOT, T_EOT);
    ENC_EQ(qw, "<|endoftext", 0, 1, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't');

    /* end of generation */
    CHECK(ob_tokenizer_is_eog(qw, T_EOT));
    CHECK(ob_tokenizer_is_eog(qw, T_IM_END));
    CHECK(ob_tokenizer_is_eog(qw, T_EOT_ID));
    CHECK(!ob_tokenizer_is_eog(qw, T_IM_START));
    CHECK(!ob_tokenizer_is_eog(qw, 'a'));
    CHECK(!ob_tokenizer_is_eog(qw, -1));
    CHECK(!ob_tokenizer_is_eog(qw, N_BPE));
    CHECK(!ob_tokenizer_is_eog(NULL, 0));

    /* max_out: the needed count comes back, nothing is written past max_out */
    int32_t buf[8];
    for (int i = 0; i < 8; i++) buf[i] = -7;
    CHECK_EQ_INT(ob_tokenizer_encode(qw, x, strlen(x), 0, 0, buf, 3), 13);
    CHECK_EQ_INT(buf[0], T_HELLO_UP);
    CHECK_EQ_INT(buf[2], T_BANG2);
    CHECK_EQ_INT(buf[3], -7);
    CHECK_EQ_INT(ob_tokenizer_encode(qw, x, strlen(x), 0, 0, NULL, 0), 13);
    CHECK_EQ_INT(ob_tokenizer_encode(qw, NULL, 3, 0, 0, buf, 8), -1);
    CHECK_EQ_INT(ob_tokenizer_encode(NULL, "a", 1, 0, 0, buf, 8), -1);

    /* token bytes */
    char tb[32];
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, ' ', tb, sizeof tb), 1);
    CHECK(tb[0] == ' ');
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, 0xFF, tb, sizeof tb), 1);
    CHECK((unsigned char)tb[0] == 0xFF);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, T_GWORLD, tb, sizeof tb), 6);
    CHECK(memcmp(tb, " world", 6) == 0);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, T_IM_START, tb, sizeof tb), 12);
    CHECK(memcmp(tb, "<|im_start|>", 12) == 0);
    memset(tb, '#', sizeof tb);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, T_GWORLD, tb, 3), 6);
    CHECK(memcmp(tb, " wo#", 4) == 0);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, N_BPE, tb, sizeof tb), -1);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(qw, -1, tb, sizeof tb), -1);

    ob_tokenizer_free(ll); ob_tokenizer_free(qw); ob_tokenizer_free(g2);
}

static void test_bpe_flags(void) {
    char err[512];
    /* add_bos_token / add_eos_token override the pre-tokenizer's default */
    ob_gguf_writer_t *w = bpe_writer("qwen2");
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 1);
    ob_tokenizer_t *t = load(w, err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        ENC_EQ(t, "a", 1, 0, T_BOT, 'a', T_EOT);
        ENC_EQ(t, "a", 0, 0, 'a');
        ob_tokenizer_free(t);
    }
    w = bpe_writer("llama-bpe");
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    t = load(w, err, sizeof err);
    CHECK(t != NULL);
    if (t) { ENC_EQ(t, "a", 1, 0, 'a'); ob_tokenizer_free(t); }
    /* no pre key: llama.cpp's "default" split ('s', digits and punctuation runs apart) */
    t = bpe(NULL);
    CHECK(t != NULL);
    if (t) { ENC_EQ(t, "ab!!12", 0, 0, 'a', 'b', T_BANG2, T_12); ob_tokenizer_free(t); }
    /* eot_token_id marks end of generation */
    w = bpe_writer("qwen2");
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", T_S1);
    t = load(w, err, sizeof err);
    CHECK(t != NULL);
    if (t) { CHECK(ob_tokenizer_is_eog(t, T_S1)); CHECK(!ob_tokenizer_is_eog(t, T_S1S2)); ob_tokenizer_free(t); }
}

/* decode(encode(x)) == x for random bytes: invalid UTF-8, emoji, specials' text, whitespace. */
static void test_bpe_roundtrip(void) {
    static const char *const frags[] = {"\xF0\x9F\x98\x80", "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",
                                        "<|im_start|>", "<tool>", "<s1><s2>", "  ", "\r\n", "'ll", "123",
                                        "\xE4\xBD\xA0\xE5\xA5\xBD", "\xC3\xA9", "\xED\xA0\x80", "\xC0\xAF",
                                        "\xFF", "\x80", "\xF4\x90\x80\x80", "hello", "\x00"};
    const char *pres[] = {"llama-bpe", "qwen2", "gpt-2", "default", "deepseek-v3", "gpt-4o"};
    char text[256], back[4096];
    int32_t ids[1024];
    int fails = 0, runs = 0;
    for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
        ob_tokenizer_t *t = bpe(pres[p]);
        CHECK(t != NULL);
        if (!t) continue;
        for (int it = 0; it < 300; it++) {
            size_t n = 0, want = rnd() % 120;
            while (n < want) {
                uint64_t r = rnd() % 10;
                if (r < 4) {
                    text[n++] = (char)(rnd() % 256);
                } else if (r < 7) {
                    text[n++] = "abcdefghijklmnopqrstuvwxyz       .,!?0123456789\n"[rnd() % 48];
                } else {
                    const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
                    size_t fl = f[0] ? strlen(f) : 1;
                    if (n + fl > sizeof text) break;
                    memcpy(text + n, f, fl);
                    n += fl;
                }
            }
            for (int special = 0; special < 2; special++) {
                int k = ob_tokenizer_encode(t, text, n, 0, special, ids, 1024);
                long m = k >= 0 && k <= 1024 ? decode_all(t, ids, k, back, sizeof back) : -1;
                runs++;
                if (m != (long)n || memcmp(back, text, n) != 0) fails++;
            }
        }
        ob_tokenizer_free(t);
    }
    CHECK_EQ_INT(fails, 0);
    CHECK_EQ_INT(runs, 3600);
}

/* ---- SentencePiece vocabulary ---------------------------------------------------------------
 * 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces with scores. */
enum { S_UNK = 0, S_BOS = 1, S_EOS = 2, S_BYTE0 = 3 };
enum { S_SP = 259, S_H, S_E, S_L, S_O, S_W, S_R, S_D, S_Z, S_Q, S_A,
       S_LL, S_EL, S_HE, S_SPHE, S_LLO, S_SPH, S_SPW, S_OR, S_LD, S_ZQ, S_FOO, S_SPHEL, N_SPM };
static const struct { const char *text; float score; int type; } spm_pieces[] = {
    {SP, -1, 1}, {"h", -10, 1}, {"e", -10, 1}, {"l", -10, 1}, {"o", -10, 1}, {"w", -10, 1}, {"r", -10, 1},
    {"d", -10, 1}, {"z", -10, 1}, {"q", -10, 1}, {"a", -10, 1},
    {"ll", -1, 1}, {"el", -1.5f, 1}, {"he", -2, 1}, {SP "he", -3, 1}, {"llo", -2.5f, 1}, {SP "h", -4, 1},
    {SP "w", -3, 1}, {"or", -2, 1}, {"ld", -2.2f, 1},
    {"zq", 5, OB_TOKTYPE_UNUSED}, {"<foo>", 0, OB_TOKTYPE_USER_DEFINED}, {SP "hel", -5, 1},
};

/* extra: also the piece "z▁" (id N_SPM), which stops merges being done word by word */
static ob_gguf_writer_t *spm_writer_x(int extra) {
    static char bytes[256][8];
    const char *tok[N_SPM + 1];
    float score[N_SPM + 1];
    int32_t type[N_SPM + 1];
    int n = N_SPM + !!extra;
    tok[N_SPM] = "z" SP;
    score[N_SPM] = 10;
    type[N_SPM] = OB_TOKTYPE_NORMAL;
    tok[0] = "<unk>"; tok[1] = "<s>"; tok[2] = "</s>";
    type[0] = OB_TOKTYPE_UNKNOWN; type[1] = type[2] = OB_TOKTYPE_CONTROL;
    score[0] = score[1] = score[2] = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[S_BYTE0 + b] = bytes[b];
        type[S_BYTE0 + b] = OB_TOKTYPE_BYTE;
        score[S_BYTE0 + b] = 0;
    }
    for (int i = S_SP; i < N_SPM; i++) {
        tok[i] = spm_pieces[i - S_SP].text;
        score[i] = spm_pieces[i - S_SP].score;
        type[i] = spm_pieces[i - S_SP].type;
    }
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, (uint64_t)n);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, type, (uint64_t)n);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, score, (uint64_t)n);
    return w;
}

static ob_gguf_writer_t *spm_writer(void) { return spm_writer_x(0); }

static void test_spm(void) {
    char err[512] = "";
    ob_tokenizer_t *t = load(spm_writer(), err, sizeof err);
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "  spm: %s\n", err); return; }
    /* llama.cpp's SPM defaults: bos 1, eos 2, add_bos, add_space_prefix */
    CHECK_EQ_INT(ob_tokenizer_bos(t), S_BOS);
    CHECK_EQ_INT(ob_tokenizer_eos(t), S_EOS);
    CHECK(ob_tokenizer_is_eog(t, S_EOS));
    CHECK(!ob_tokenizer_is_eog(t, S_BOS));
    /* "▁hello": ll (-1) first, el is then stale, he (-2), llo (-2.5), ▁he (-3): [▁he, llo].
     * Left to right (or lowest score first) would build ▁h, ▁he, ▁hel: [▁hel, l, o]. */
    ENC_EQ(t, "hello", 0, 0, S_SPHE, S_LLO);
    ENC_EQ(t, "hello", 1, 0, S_BOS, S_SPHE, S_LLO);
    ENC_EQ(t, "hello world", 0, 0, S_SPHE, S_LLO, S_SPW, S_OR, S_LD);
    /* byte fallback for what forms no piece: é = C3 A9 */
    ENC_EQ(t, "h\xC3\xA9", 0, 0, S_SPH, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9);
    ENC_EQ(t, "\xFF", 0, 0, S_SP, S_BYTE0 + 0xFF);
    /* an unused piece merges (zq, score 5) but is split back into its parts */
    ENC_EQ(t, "zq", 0, 0, S_SP, S_Z, S_Q);
    /* control text typed by a user stays text; parsed when asked; the prefix follows a special */
    ENC_EQ(t, "</s>", 0, 0, S_SP, S_BYTE0 + '<', S_BYTE0 + '/', S_BYTE0 + 's', S_BYTE0 + '>');
    ENC_EQ(t, "</s>", 0, 1, S_EOS);
    ENC_EQ(t, "<s>hello", 0, 1, S_BOS, S_SPHE, S_LLO);
    ENC_EQ(t, "a<foo>a", 0, 0, S_SP, S_A, S_FOO, S_SP, S_A);
    ENC_EQ(t, "", 1, 1, S_BOS);
    /* pieces decode with spaces back */
    char tb[16];
    CHECK_EQ_INT(ob_tokenizer_token_bytes(t, S_SPHE, tb, sizeof tb), 3);
    CHECK(memcmp(tb, " he", 3) == 0);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(t, S_BYTE0 + 0xC3, tb, sizeof tb), 1);
    CHECK((unsigned char)tb[0] == 0xC3);
    CHECK_EQ_INT(ob_tokenizer_token_bytes(t, S_EOS, tb, sizeof tb), 4);
    CHECK(memcmp(tb, "</s>", 4) == 0);

    /* round trip of random UTF-8 text (and of invalid bytes) through byte fallback */
    static const char *const cps[] = {"h", "e", "l", "o", "w", "r", "d", "z", "q", " ", "  ", "\n",
                                      "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "\xE2\x96\x81", "<", "s", ">"};
    char text[256], want[260], back[4096];
    int32_t ids[2048];
    int fails = 0;
    for (int it = 0; it < 1000; it++) {
        size_t n = 0, len = rnd() % 60;
        int invalid = it % 4 == 3;
        while (n < len) {
            if (invalid && rnd() % 5 == 0) { text[n++] = (char)(0x80 + rnd() % 128); continue; }
            const char *c = cps[rnd() % (sizeof cps / sizeof cps[0])];
            size_t cl = strlen(c);
            if (n + cl > sizeof text) break;
            memcpy(text + n, c, cl);
            n += cl;
        }
        want[0] = ' ';
        memcpy(want + 1, text, n);
        int k = ob_tokenizer_encode(t, text, n, 0, 0, ids, 2048);
        long m = k >= 0 && k <= 2048 ? decode_all(t, ids, k, back, sizeof back) : -1;
        /* "▁" typed by the user decodes as a space, like SentencePiece */
        for (size_t i = 0; i + 3 <= n + 1; i++)
            if (memcmp(want + i, SP, 3) == 0) { want[i] = ' '; memmove(want + i + 1, want + i + 3, n + 1 - i - 3); n -= 2; }
        size_t wn = n ? n + 1 : 0;   /* the prefix comes with text only */
        if (m != (long)wn || memcmp(back, want, wn) != 0) fails++;
    }
    CHECK_EQ_INT(fails, 0);
    ob_tokenizer_free(t);

    /* A piece with U+2581 after a letter: merges may cross words, the result is still exact */
    t = load(spm_writer_x(1), err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        ENC_EQ(t, "z z", 0, 0, S_SP, N_SPM, S_Z);
        ENC_EQ(t, "hello world", 0, 0, S_SPHE, S_LLO, S_SPW, S_OR, S_LD);
        ob_tokenizer_free(t);
    }
    t = load(spm_writer(), err, sizeof err);
    if (t) {
        ENC_EQ(t, "z z", 0, 0, S_SP, S_Z, S_SP, S_Z);
        ob_tokenizer_free(t);
    }

    /* add_space_prefix false */
    ob_gguf_writer_t *w = spm_writer();
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    ob_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    t = load(w, err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        ENC_EQ(t, "hello", 1, 0, S_HE, S_LLO);
        ENC_EQ(t, "hello world", 0, 0, S_HE, S_LLO, S_SPW, S_OR, S_LD);
        ob_tokenizer_free(t);
    }
}

/* ---- bad vocabularies ------------------------------------------------------------------------ */

static void expect_refused(ob_gguf_writer_t *w, const char *needle, const char *needle2) {
    char err[2048] = "";
    ob_tokenizer_t *t = load(w, err, sizeof err);
    CHECK(t == NULL);
    int ok = strstr(err, needle) != NULL && (!needle2 || strstr(err, needle2) != NULL);
    if (!ok) fprintf(stderr, "  error \"%s\" does not name %s %s\n", err, needle, needle2 ? needle2 : "");
    CHECK(ok);
    ob_tokenizer_free(t);
}

/* A stream's window (64 ids) full of empty pieces at the text's start: the first non-empty piece
 * still loses the space SentencePiece prepended, as in the full decode (the window used to count
 * as the start used up once any piece was in it). */
static void test_spm_stream_empty(void) {
    static const char *tok[] = {"<unk>", "<s>", "</s>", "", "\xE2\x96\x81" "a"};
    static const int32_t type[] = {OB_TOKTYPE_UNKNOWN, OB_TOKTYPE_CONTROL, OB_TOKTYPE_CONTROL, OB_TOKTYPE_USER_DEFINED,
                                   OB_TOKTYPE_NORMAL};
    static const float score[] = {0, 0, 0, 0, -1};
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, 5);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, type, 5);
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, score, 5);
    char err[512] = "";
    ob_tokenizer_t *t = load(w, err, sizeof err);
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "  spm empty piece: %s\n", err); return; }
    int32_t ids[72];
    for (int i = 0; i < 70; i++) ids[i] = 3;
    ids[70] = 4;
    ids[71] = 4;
    char full[64], got[64];
    int fl = ob_tokenizer_decode(t, ids, 72, 0, full, (int)sizeof full);
    CHECK(fl == 3 && memcmp(full, "a a", 3) == 0);
    ob_detok_t *d = ob_detok_new(t, 0);
    size_t gl = 0, cl;
    for (int i = 0; d && i <= 72; i++) {
        const char *c = i < 72 ? ob_detok_push(d, ids[i], &cl) : ob_detok_flush(d, &cl);
        if (!c || gl + cl > sizeof got) { gl = 0; break; }
        memcpy(got + gl, c, cl);
        gl += cl;
    }
    CHECK(fl >= 0 && gl == (size_t)fl && memcmp(got, full, gl) == 0);
    if (fl < 0 || gl != (size_t)fl) fprintf(stderr, "  spm empty pieces: streamed '%.*s', full '%.*s'\n", (int)gl, got, fl > 0 ? fl : 0, full);
    ob_detok_free(d);
    ob_tokenizer_free(t);
}

static void test_bad_vocab(void) {
    int32_t types3[3] = {1, 1, 1}, badtype[N_BPE];
    float scores3[3] = {0, 0, 0};
    const char *one[] = {"a"};
    ob_gguf_writer_t *w;

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, types3, 3);
    expect_refused(w, "tokenizer.ggml.token_type", NULL);

    w = spm_writer();
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, scores3, 3);
    expect_refused(w, "tokenizer.ggml.scores", NULL);

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", N_BPE);
    expect_refused(w, "tokenizer.ggml.bos_token_id", NULL);

    w = spm_writer();
    ob_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 100000);
    expect_refused(w, "tokenizer.ggml.eos_token_id", NULL);

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.eos_token_id", "2");
    expect_refused(w, "tokenizer.ggml.eos_token_id", NULL);

    w = bpe_writer("nonesuch-7");
    expect_refused(w, "tokenizer.ggml.pre", "nonesuch-7");

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    expect_refused(w, "tokenizer.ggml.model", "bert");

    w = ob_gguf_writer_new();
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", one, NULL, 1);
    expect_refused(w, "tokenizer.ggml.model", NULL);

    w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_refused(w, "tokenizer.ggml.tokens", NULL);

    w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", one, NULL, 0);
    expect_refused(w, "tokenizer.ggml.tokens", NULL);

    w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", OB_GGUF_INT32, types3, 3);
    expect_refused(w, "tokenizer.ggml.tokens", NULL);

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.merges", OB_GGUF_INT32, types3, 3);
    expect_refused(w, "tokenizer.ggml.merges", NULL);

    w = ob_gguf_writer_new();   /* gpt2 without merges */
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", one, NULL, 1);
    expect_refused(w, "tokenizer.ggml.merges", NULL);

    for (int i = 0; i < N_BPE; i++) badtype[i] = 1;
    badtype[7] = 9;
    w = bpe_writer("qwen2");
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, badtype, N_BPE);
    expect_refused(w, "tokenizer.ggml.token_type", NULL);

    w = bpe_writer("qwen2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.add_bos_token", "yes");
    expect_refused(w, "tokenizer.ggml.add_bos_token", NULL);

    w = spm_writer();
    ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_INT8, types3, 3);
    expect_refused(w, "tokenizer.ggml.scores", NULL);

    /* a spec-level check: a regex that does not compile is named */
    const char *tok[] = {"a", "b"};
    size_t lens[] = {1, 1};
    const char *re[] = {"(unclosed"};
    ob_tokenizer_spec s = {.model = OB_TOK_MODEL_BPE, .n_tokens = 2, .text = tok, .text_len = lens,
                           .pre_regex = re, .n_pre_regex = 1, .bos = -1, .eos = -1, .unk = -1, .pad = -1,
                           .eot = -1, .eom = -1, .extra_eog = {-1, -1, -1, -1, -1, -1, -1, -1}};
    ob_tokenizer_t *t = NULL;
    char err[256] = "";
    CHECK_EQ_INT(ob_tokenizer_build(&s, &t, err, sizeof err), -1);
    CHECK(strstr(err, "regex") != NULL);
    CHECK(t == NULL);
}

/* Random vocabularies (empty and duplicate tokens, any types and scores, merges that refer to
 * nothing, no byte tokens) must load or be refused, and then encode anything without crashing;
 * every id that comes out is in range. Most useful under the sanitizers. */
static void test_fuzz(void) {
    static const char alphabet[] = "ab <>|/\xC4\xA0\xE2\x96\x81\xFF\n";
    int loaded = 0, bad_ids = 0, neg = 0;
    for (int it = 0; it < 60; it++) {
        int n = 1 + (int)(rnd() % 40), nm = (int)(rnd() % 40);
        char tokbuf[40][8], merbuf[40][20];
        const char *tok[40], *mer[40];
        int32_t type[40];
        float score[40];
        for (int i = 0; i < n; i++) {
            int l = (int)(rnd() % 5);
            for (int k = 0; k < l; k++) tokbuf[i][k] = alphabet[rnd() % (sizeof alphabet - 1)];
            tokbuf[i][l] = 0;
            tok[i] = tokbuf[i];
            type[i] = (int32_t)(rnd() % 7);
            score[i] = (float)((int)(rnd() % 9) - 4);
        }
        for (int i = 0; i < nm; i++) {
            if (rnd() % 4) snprintf(merbuf[i], sizeof merbuf[i], "%s %s", tok[rnd() % n], tok[rnd() % n]);
            else snprintf(merbuf[i], sizeof merbuf[i], "%c", alphabet[rnd() % 4]);
            mer[i] = merbuf[i];
        }
        int spm = it % 2;
        ob_gguf_writer_t *w = ob_gguf_writer_new();
        ob_gguf_writer_set_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
        ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", it % 3 ? "llama-bpe" : "default");
        ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, (uint64_t)n);
        ob_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OB_GGUF_INT32, type, (uint64_t)n);
        ob_gguf_writer_set_arr(w, "tokenizer.ggml.scores", OB_GGUF_FLOAT32, score, (uint64_t)n);
        ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mer, NULL, (uint64_t)nm);
        if (rnd() % 2) ob_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)(rnd() % (uint64_t)n));
        char err[512];
        ob_tokenizer_t *t = load(w, err, sizeof err);
        if (!t) continue;
        loaded++;
        for (int k = 0; k < 20; k++) {
            char text[64];
            int32_t ids[256];
            size_t l = rnd() % sizeof text;
            for (size_t i = 0; i < l; i++) text[i] = rnd() % 3 ? alphabet[rnd() % (sizeof alphabet - 1)] : (char)rnd();
            int c = ob_tokenizer_encode(t, text, l, 1, (int)(k % 2), ids, 256);
            if (c < 0) neg++;
            for (int i = 0; i < c && i < 256; i++) {
                if (ids[i] < 0 || ids[i] >= n) bad_ids++;
                else if (ob_tokenizer_token_bytes(t, ids[i], NULL, 0) < 0) bad_ids++;
            }
        }
        ob_tokenizer_free(t);
    }
    CHECK(loaded > 30);
    CHECK_EQ_INT(bad_ids, 0);
    CHECK_EQ_INT(neg, 0);
}

/* ---- pre-tokenizer names --------------------------------------------------------------------- */

static int collect(void *ctx, const char *s, size_t n) {
    char *acc = ctx;
    size_t l = strlen(acc);
    if (l + n + 3 >= 512) return 1;
    acc[l] = '[';
    memcpy(acc + l + 1, s, n);
    acc[l + 1 + n] = ']';
    acc[l + 2 + n] = 0;
    return 0;
}

static void split_eq(const char *pre, const char *text, const char *want) {
    const ob_pretok_def *d = ob_pretok_find(pre);
    CHECK(d != NULL);
    if (!d) return;
    int n = 0;
    while (n < OB_PRETOK_MAX_REGEX && d->regex[n]) n++;
    ob_pretok_t *p = NULL;
    char err[256], acc[512] = "";
    CHECK_EQ_INT(ob_pretok_new(d->regex, n, &p, err, sizeof err), 0);
    if (!p) return;
    CHECK_EQ_INT(ob_pretok_split(p, text, strlen(text), collect, acc), 0);
    if (strcmp(acc, want) != 0) fprintf(stderr, "  %s: %s\n   expected %s\n", pre, acc, want);
    CHECK(strcmp(acc, want) == 0);
    ob_pretok_free(p);
}

static void test_pretok(void) {
    const char *x = "Hello world!!  123456 'll we'll\n\n  x";
    split_eq("llama-bpe", x, "[Hello][ world][!!][ ][ ][123][456][ '][ll][ we]['ll][\n\n][ ][ x]");
    split_eq("qwen2", x, "[Hello][ world][!!][ ][ ][1][2][3][4][5][6][ '][ll][ we]['ll][\n\n][ ][ x]");
    split_eq("gpt-2", x, "[Hello][ world][!!][ ][ 123456][ '][ll][ we]['ll][\n\n ][ x]");
    split_eq("default", x, "[Hello][ world][!!][ ][ ][123][456][ ]['][ll][ we]['][ll][\n\n ][ x]");
    split_eq("gpt-4o", "HelloWorld we'll", "[Hello][World][ we'll]");
    split_eq("deepseek-v3", "ab1234\xE4\xBD\xA0\xE5\xA5\xBD", "[ab][123][4][\xE4\xBD\xA0\xE5\xA5\xBD]");
    /* every name in the table compiles */
    static const char *const names[] = {"default", "llama3", "llama-bpe", "dbrx", "qwen2", "qwen35", "gpt-2", "gpt2",
                                        "starcoder", "falcon", "deepseek-coder", "deepseek-v3", "gpt-4o", "tekken",
                                        "seed-coder", "bailingmoe", "minicpm5", "bloom", "viking", "laguna"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const ob_pretok_def *d = ob_pretok_find(names[i]);
        CHECK(d != NULL);
        if (!d) continue;
        int n = 0;
        while (n < OB_PRETOK_MAX_REGEX && d->regex[n]) n++;
        ob_pretok_t *p = NULL;
        char err[256];
        int rc = ob_pretok_new(d->regex, n, &p, err, sizeof err);
        if (rc) fprintf(stderr, "  %s: %s\n", names[i], err);
        CHECK_EQ_INT(rc, 0);
        ob_pretok_free(p);
    }
    CHECK(ob_pretok_find("no-such-pre") == NULL);
    /* an empty match is a split point, not a loop */
    const char *re[] = {"(?=b)"};
    ob_pretok_t *p = NULL;
    char err[256], acc[512] = "";
    CHECK_EQ_INT(ob_pretok_new(re, 1, &p, err, sizeof err), 0);
    if (p) {
        CHECK_EQ_INT(ob_pretok_split(p, "abab", 4, collect, acc), 0);
        CHECK(strcmp(acc, "[a][ba][b]") == 0);
        ob_pretok_free(p);
    }
}

/* ---- scale: 150k tokens, 150k merges ---------------------------------------------------------- */

static void test_scale(void) {
    enum { N_L1 = 26 * 26, N_TOK = 150000 };
    int timing = getenv("OB_TEST_NO_TIMING") == NULL;
    int n_l2 = N_TOK - 256 - N_L1, n_merge = N_L1 + n_l2;
    char (*txt)[8] = malloc((size_t)N_TOK * sizeof *txt);
    char (*mer)[12] = malloc((size_t)n_merge * sizeof *mer);
    const char **tok = malloc((size_t)N_TOK * sizeof *tok), **mp = malloc((size_t)n_merge * sizeof *mp);
    CHECK(txt && mer && tok && mp);
    if (!txt || !mer || !tok || !mp) { free(txt); free(mer); free(tok); free(mp); return; }
    for (int b = 0; b < 256; b++) { size_t l = b2u(b, txt[b]); txt[b][l] = 0; }
    /* level 1: every pair of letters; level 2: pairs of level-1 tokens (4 letters, unique) */
    for (int i = 0; i < N_L1; i++) {
        snprintf(txt[256 + i], 8, "%c%c", 'a' + i / 26, 'a' + i % 26);
        snprintf(mer[i], 12, "%c %c", 'a' + i / 26, 'a' + i % 26);
    }
    for (int k = 0; k < n_l2; k++) {
        int i = k / N_L1, j = k % N_L1;
        char *d = txt[256 + N_L1 + k];
        memcpy(d, txt[256 + i], 2);
        memcpy(d + 2, txt[256 + j], 2);
        d[4] = 0;
        snprintf(mer[N_L1 + k], 12, "%s %s", txt[256 + i], txt[256 + j]);
    }
    for (int i = 0; i < N_TOK; i++) tok[i] = txt[i];
    for (int i = 0; i < n_merge; i++) mp[i] = mer[i];

    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/tokenizer_scale.gguf", ob_test_tmpdir());
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    ob_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, NULL, N_TOK);
    ob_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mp, NULL, (uint64_t)n_merge);
    int rc = ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err);
    ob_gguf_writer_free(w);
    free(tok); free(mp);
    CHECK_EQ_INT(rc, 0);
    ob_gguf_t *g = NULL;
    ob_tokenizer_t *t = NULL;
    if (rc == 0 && ob_gguf_open(path, &g, err, sizeof err) == 0) {
        double t0 = now_s();
        rc = ob_tokenizer_load_gguf(g, &t, err, sizeof err);
        double dt = now_s() - t0;
        CHECK_EQ_INT(rc, 0);
        if (timing) {
            if (dt >= 0.5) fprintf(stderr, "  load of 150k tokens + merges took %.3f s\n", dt);
            CHECK(dt < 0.5);
        }
        if (ob_test_verbose) fprintf(stderr, "  tokenizer load 150k/150k: %.1f ms\n", dt * 1e3);
        ob_gguf_close(g);
    }
    remove(path);
    free(mer);
    if (!t) { free(txt); return; }
    CHECK_EQ_INT(ob_tokenizer_n_merges_skipped(t), 0);

    /* one 200k-letter word "abab...": "a b" then "ab ab" -> 50000 x "abab"; linear-ish, not n^2 */
    size_t wl = 200000;
    char *word = malloc(wl);
    int32_t *ids = malloc(sizeof(int32_t) * 1100000);
    if (word && ids) {
        for (size_t i = 0; i < wl; i++) word[i] = i % 2 ? 'b' : 'a';
        double t0 = now_s();
        int n = ob_tokenizer_encode(t, word, wl, 0, 0, ids, 1100000);
        double dt = now_s() - t0;
        CHECK_EQ_INT(n, 50000);
        int32_t abab = -1;
        for (int32_t i = 256 + N_L1; i < N_TOK; i++) if (memcmp(txt[i], "abab", 4) == 0) { abab = i; break; }
        int same = n == 50000;
        for (int i = 0; same && i < n; i++) same = ids[i] == abab;
        CHECK(same);
        if (timing) CHECK(dt < 0.5);
        if (ob_test_verbose) fprintf(stderr, "  encode of one 200k-byte word: %.1f ms\n", dt * 1e3);

        /* 1 MB of random words and bytes: round trip and throughput */
        size_t tl = 1000000;
        char *text = malloc(tl), *back = malloc(tl * 2);
        if (text && back) {
            for (size_t i = 0; i < tl; i++) {
                uint64_t r = rnd() % 100;
                text[i] = r < 15 ? ' ' : r < 18 ? (char)(rnd() % 256) : (char)('a' + rnd() % 26);
            }
            t0 = now_s();
            n = ob_tokenizer_encode(t, text, tl, 0, 1, ids, 1100000);
            dt = now_s() - t0;
            CHECK(n > 0 && n <= 1100000);
            if (timing) CHECK(dt < 2.0);
            if (ob_test_verbose) fprintf(stderr, "  encode of 1 MB: %d tokens in %.1f ms\n", n, dt * 1e3);
            long m = n > 0 && n <= 1100000 ? decode_all(t, ids, n, back, (long)tl * 2) : -1;
            CHECK(m == (long)tl && memcmp(back, text, tl) == 0);
        }
        free(text); free(back);
    }
    free(word); free(ids); free(txt);
    ob_tokenizer_free(t);
}

OB_SUITE(tokenizer) {
    test_pretok();
    test_bpe_ids();
    test_bpe_flags();
    test_bpe_roundtrip();
    test_spm();
    test_spm_stream_empty();
    test_bad_vocab();
    test_fuzz();
    test_scale();
}
