/* fuzz_json_schema.c — libFuzzer harness for the grammar engine (src/engine/grammar*.c).
 *
 * Input: a JSON Schema, or "G:" followed by GBNF text. The schema goes through
 * ob_grammar_json_schema_to_gbnf and ob_grammar_parse_gbnf (a syntax error in the generated text
 * is a converter bug: abort), then a few random walks drive the matcher through its token API on a
 * small synthetic vocabulary (filter, pick an allowed token, accept). Checked: no crash, hang or
 * sanitizer report; a chosen allowed token never fails the state; a walk that completes a schema
 * grammar is JSON (jansson parses it).
 *
 * Build and run (docs/grammar.md has the last result):
 *   make fuzz
 *   mkdir -p build/fuzz/corpus-json_schema
 *   OB_FUZZ_SEEDS=build/fuzz/corpus-json_schema ./build/fuzz/fuzz_json_schema \
 *       build/fuzz/corpus-json_schema -max_total_time=300 -timeout=10 -rss_limit_mb=2048
 * (OB_FUZZ_SEEDS writes a few seed schemas and grammars into the directory first.)
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "text/tokenizer.h"
#include "text/tokenizer_spec.h"

static ob_tokenizer_t *tok;
static ob_grammar_vocab_t *voc;
static int32_t n_vocab;

static const char *const SEEDS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\"]}",
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"number\",\"exclusiveMinimum\":-1.5},{\"type\":\"null\"}]},\"minItems\":1,\"maxItems\":4}",
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}}}},\"$ref\":\"#/$defs/n\"}",
    "{\"type\":\"string\",\"pattern\":\"^(a|b[0-9]{2,3})+\\\\.x?$\"}",
    "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1,\"x\",null]}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"const\":true}},\"additionalProperties\":{\"type\":\"boolean\"}}]}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\",\"format\":\"date-time\"},\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"}}}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"type\":\"string\",\"minLength\":2}],\"items\":{\"type\":\"integer\",\"maximum\":-7}}",
    "{\"oneOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":[\"integer\",\"null\"]}],\"description\":\"x\"}",
    "{}",
    "G:root ::= (\"a\" | [^\\n\\x00-\\x1f] b)* \"!\"\nb ::= [0-9]{1,3} | \"\\u00e9\"",
    "G:root ::= x{2,5} <[3]> !<[4]>\nx ::= [a-z]+ \" \"?",
};

static ob_tokenizer_t *make_vocab(void) {
    static const char *const P[] = {"{\"", "\":", "\",", "\"}", "}", "{", "[", "]", ",", ":", "\"", "true", "false", "null",
        "\\n", "\\\"", "\\u00", "\\\\", "0", "1", "12", "-", ".", "e+", "\xE2\x96\x81", "\xE2\x96\x81\"", "\n", "ab", "name",
        "age", "\xC3\xA9", "\xE6\xBC\xA2", "\xF0\x9F\x98\x80", "<|x|>", "2024-01-02", "T", "Z", ":00", "x", "id"};
    int np = (int)(sizeof P / sizeof P[0]), n = 256 + 1 + np;
    const char **text = calloc((size_t)n, sizeof *text);
    size_t *len = calloc((size_t)n, sizeof *len);
    uint8_t *type = calloc((size_t)n, 1);
    char (*bytes)[8] = calloc(256, sizeof *bytes);
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        text[b] = bytes[b];
        len[b] = 6;
        type[b] = OB_TOKTYPE_BYTE;
    }
    text[256] = "</s>";
    len[256] = 4;
    type[256] = OB_TOKTYPE_CONTROL;
    for (int i = 0; i < np; i++) { text[257 + i] = P[i]; len[257 + i] = strlen(P[i]); type[257 + i] = OB_TOKTYPE_NORMAL; }
    ob_tokenizer_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.model = OB_TOK_MODEL_SPM;
    sp.n_tokens = n;
    sp.text = text;
    sp.text_len = len;
    sp.type = type;
    sp.bos = sp.unk = sp.pad = sp.eot = sp.eom = -1;
    sp.eos = 256;
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) sp.extra_eog[i] = -1;
    ob_tokenizer_t *t = NULL;
    char err[256];
    if (ob_tokenizer_build(&sp, &t, err, sizeof err) != 0) { fprintf(stderr, "vocab: %s\n", err); abort(); }
    free(text); free(len); free(type); free(bytes);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    tok = make_vocab();
    char err[256];
    voc = ob_grammar_vocab_new(tok, err, sizeof err);
    if (!voc) { fprintf(stderr, "vocab index: %s\n", err); abort(); }
    n_vocab = ob_tokenizer_n_vocab(tok);
    const char *dir = getenv("OB_FUZZ_SEEDS");
    for (size_t i = 0; dir && i < sizeof SEEDS / sizeof SEEDS[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%02zu", dir, i);
        FILE *f = fopen(path, "wb");
        if (f) { fputs(SEEDS[i], f); fclose(f); }
    }
    return 0;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xFF51AFD7ED558CCDULL; x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ULL; x ^= x >> 33;
    return x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[512];
    int is_gbnf = size >= 2 && text[0] == 'G' && text[1] == ':';
    ob_grammar_t *g = NULL;
    if (is_gbnf) {
        g = ob_grammar_parse_gbnf(text + 2, err, sizeof err);
    } else {
        char *gb = ob_grammar_json_schema_to_gbnf(text, "", err, sizeof err);
        if (gb) {
            g = ob_grammar_parse_gbnf(gb, err, sizeof err);
            /* The converter must write valid GBNF: refusals may only be about the language
             * (left recursion through $ref, rules that never finish), never syntax. */
            if (!g && strstr(err, "line ")) { fprintf(stderr, "converter wrote bad GBNF: %s\n%s\n", err, gb); abort(); }
            free(gb);
        }
    }
    free(text);
    if (!g) return 0;
    uint64_t seed = size;
    for (size_t i = 0; i < size; i++) seed = seed * 131 + data[i];
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int32_t *ok = malloc((size_t)n_vocab * sizeof *ok);
    char *out = malloc(1 << 14);
    for (int walk = 0; walk < 3; walk++) {
        ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
        if (!st) break;   /* e.g. a token id outside this vocabulary */
        size_t n = 0;
        int ended = 0;
        for (int step = 0; step < 48; step++) {
            for (int32_t i = 0; i < n_vocab; i++) logits[i] = 0;
            ob_grammar_state_filter(st, logits, n_vocab);
            int32_t n_ok = 0;
            for (int32_t i = 0; i < n_vocab; i++) if (logits[i] == 0) ok[n_ok++] = i;
            if (!n_ok) abort();   /* the filter always leaves something (EOG at least) */
            /* favour ending so walks finish: EOG when allowed, half of the time */
            seed = mix(seed + (uint64_t)step + 1000003u * (uint64_t)walk);
            int32_t t = ok[seed % (uint64_t)n_ok];
            if (ob_grammar_state_complete(st) && (seed >> 40) % 2) t = 256;
            int was_failed = ob_grammar_state_failed(st);
            ob_grammar_state_accept(st, t);
            if (!was_failed && t != 256 && ob_grammar_state_failed(st)) {
                /* an allowed token failed the state: only acceptable if a limit was hit */
                fprintf(stderr, "allowed token %d failed the state after %zu bytes\n", t, n);
                abort();
            }
            if (t == 256) { ended = 1; break; }
            int l = ob_tokenizer_token_bytes(tok, t, out + n, (int)((1 << 14) - n));
            if (l > 0 && n + (size_t)l < (1 << 14)) n += (size_t)l;
            if (ob_grammar_state_done(st)) { ended = 1; break; }
        }
        if (!is_gbnf && ended && ob_grammar_state_complete(st)) {
            json_error_t je;
            json_t *v = json_loadb(out, n, JSON_DECODE_ANY, &je);
            if (!v) { fprintf(stderr, "output is not JSON (%s): %.*s\n", je.text, (int)n, out); abort(); }
            json_decref(v);
        }
        ob_grammar_state_free(st);
    }
    free(logits);
    free(ok);
    free(out);
    ob_grammar_free(g);
    return 0;
}
