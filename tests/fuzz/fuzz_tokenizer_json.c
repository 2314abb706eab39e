/* fuzz_tokenizer_json.c — libFuzzer harness for the tokenizer.json loader and the pipeline it
 * builds (src/text/: tokenizer_json.c, normalize.c, prechain.c, tokenizer*.c, detok.c, unicode.c).
 *
 * Input: a tokenizer.json, optionally followed by "\n\x01\n" and a text. The file goes through
 * ob_tokenizer_from_json; when it builds, the text (or a few fixed ones) is encoded with and
 * without special tokens, the ids are decoded (with and without skip_special) and streamed, and
 * ids made from the input bytes (in range or not) are decoded too. Checked: no crash, hang, leak or
 * sanitizer report; a refused file always comes with an error message; decoding yields valid
 * UTF-8; streaming adds up to the full decode whenever that has no U+FFFD (detok.c names the two
 * decoder corners where Hugging Face's full decode replaces more than a stream can know).
 *
 * Build and run (docs/tokenizers.md has the last result):
 *   make build/fuzz/fuzz_tokenizer_json
 *   mkdir -p build/fuzz/corpus-tokenizer_json
 *   ./build/fuzz/fuzz_tokenizer_json build/fuzz/corpus-tokenizer_json tests/fuzz/seeds-tokenizer_json \
 *       -max_total_time=600 -timeout=10 -rss_limit_mb=2048 -max_len=8192
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "text/pretok.h"
#include "text/tokenizer_json.h"

static int valid_utf8(const char *s, int n) {
    for (int i = 0; i < n;) {
        size_t l = ob_utf8_len((const unsigned char *)s + i, (size_t)(n - i));
        if (l == 1 && (unsigned char)s[i] >= 0x80) return 0;
        i += (int)l;
    }
    return 1;
}

/* A decoder step whose output depends on the end of the text (Strip with stop > 0, BPEDecoder's
 * last-token rule): a stream cannot know the end, so the add-up check is skipped (detok.c). */
static int end_rule(const json_t *d) {
    if (json_is_array(d)) {
        for (size_t i = 0; i < json_array_size(d); i++) if (end_rule(json_array_get(d, i))) return 1;
        return 0;
    }
    if (!json_is_object(d)) return 0;
    const char *ty = json_string_value(json_object_get(d, "type"));
    if (ty && !strcmp(ty, "BPEDecoder")) return 1;
    if (ty && !strcmp(ty, "Strip") && json_integer_value(json_object_get(d, "stop")) != 0) return 1;
    return end_rule(json_object_get(d, "decoders"));
}

static int stream_exact = 1;

static void exercise(const ob_tokenizer_t *t, const char *text, size_t len) {
    int32_t ids[4096];
    char buf[65536];
    for (int mode = 0; mode < 4; mode++) {
        int n = ob_tokenizer_encode(t, text, len, mode & 1, mode >> 1, ids, 4096);
        if (n < 0 || n > 4096) continue;
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= ob_tokenizer_n_vocab(t)) abort();
        for (int skip = 0; skip < 2; skip++) {
            int dl = ob_tokenizer_decode(t, ids, n, skip, buf, (int)sizeof buf);
            if (dl < 0) continue;
            if (dl <= (int)sizeof buf && !valid_utf8(buf, dl)) abort();
            int exact = stream_exact && dl <= (int)sizeof buf && !memmem(buf, (size_t)dl, "\xEF\xBF\xBD", 3);
            ob_detok_t *d = ob_detok_new(t, skip);
            if (!d) continue;
            size_t al = 0, cl;
            int ok = 1;
            for (int i = 0; i < n && ok; i++) {
                const char *c = ob_detok_push(d, ids[i], &cl);
                if (!c) { ok = 0; break; }
                if (!valid_utf8(c, (int)cl)) abort();
                if (exact && (al + cl > (size_t)dl || memcmp(buf + al, c, cl) != 0)) abort();
                al += cl;
            }
            const char *c = ok ? ob_detok_flush(d, &cl) : NULL;
            if (c && exact && (al + cl != (size_t)dl || memcmp(buf + al, c, cl) != 0)) abort();
            ob_detok_free(d);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *sep = memmem(data, size, "\n\x01\n", 3);
    size_t jl = sep ? (size_t)(sep - (const char *)data) : size;
    json_error_t je;
    json_t *j = json_loadb((const char *)data, jl, JSON_ALLOW_NUL, &je);
    if (!j) return 0;
    char err[512] = "";
    ob_tokenizer_t *t = NULL;
    int rc = ob_tokenizer_from_json(j, NULL, "fuzz.json", &t, err, sizeof err);
    stream_exact = !end_rule(json_object_get(j, "decoder"));
    json_decref(j);
    if (rc != 0) {
        if (t || !err[0]) abort();   /* a refusal always says why */
        return 0;
    }
    if (sep) exercise(t, sep + 3, size - jl - 3);
    static const char *const fixed[] = {"Hello world! I'm here.", "  \t\n\nx  y", "日本語のテキスト 😀👍🏽", "<s>[CLS]<|endoftext|>a",
                                        "\xC3\x28\xFF\xE2\x82", "élan NAÏVE 123456 ##ing"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) exercise(t, fixed[i], strlen(fixed[i]));
    /* ids straight from the input bytes: decode must cope with any id */
    int32_t ids[64];
    int n = 0;
    for (size_t i = 0; i + 4 <= size && n < 64; i += 4) memcpy(&ids[n++], data + i, 4);
    char buf[4096];
    int dl = ob_tokenizer_decode(t, ids, n, 0, buf, (int)sizeof buf);
    if (dl >= 0 && dl <= (int)sizeof buf && !valid_utf8(buf, dl)) abort();
    ob_tokenizer_free(t);
    return 0;
}
