/* pretok.c — named split-regex configurations and the PCRE2 splitter (see pretok.h).
 *
 * Owns: the tokenizer.ggml.pre table and splitting text into pieces.
 * Does not own: what happens to a piece (tokenizer.c).
 *
 * The regexes are the ones the models' tokenizer.json files carry (Hugging Face tokenizers runs
 * them with Oniguruma). PCRE2 understands them as written, including (?i:...) and lookahead, so
 * unlike llama.cpp (std::regex) nothing is rewritten. The name -> family mapping follows
 * llama.cpp's llama-vocab.cpp, since that is what wrote tokenizer.ggml.pre into the files.
 * PCRE2_MATCH_INVALID_UTF makes invalid UTF-8 unmatchable rather than an error, so those bytes
 * land in gap pieces and still reach the byte-level BPE.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/pretok.h"
#include "text/unicode.h"

/* ---- regexes ---------------------------------------------------------------------------- */

/* GPT-2's split. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3 (and several later models): letters may take one leading non-letter, digits in
 * groups of up to three, newlines kept with preceding whitespace. */
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
                  "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen 2: as Llama 3 but every digit is its own piece. */
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
                 "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen 3.5: combining marks stay with their letters. */
#define RE_QWEN35 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}" \
                  "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-4o / Llama 4 (o200k): case-aware words with an optional contraction. */
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                 "(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
                 "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" \
                 "(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
                 "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral Tekken. */
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" \
                  "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek V3: digits in threes, kana/CJK runs, then the main split. */
#define RE_DSV3_MAIN "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" \
                     "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*" \
                     "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_SEED_CODER "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}" \
                      "| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BAILING "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}" \
                   "| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_MINICPM5 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+" \
                    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

/* ---- names (tokenizer.ggml.pre values, grouped as llama.cpp groups them) ------------------- */

static const char *const N_DEFAULT[] = {"default", NULL};
static const char *const N_LLAMA3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                       "pixtral", "midm-2.0", "lfm2", "jina-v5-nano", NULL};
static const char *const N_LLAMA3_PLAIN[] = {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe", NULL};
static const char *const N_QWEN2[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2",
                                      "hunyuan", "megrez", "solar-open", "grok-2", NULL};
static const char *const N_QWEN35[] = {"qwen35", NULL};
static const char *const N_GPT2[] = {"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat",
                                     "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert",
                                     "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
                                     "jina-v1-en", "jina-v2-code", "roberta-bpe", NULL};
static const char *const N_STARCODER[] = {"starcoder", "refact", "command-r", "smollm", "codeshell",
                                          "exaone", "minerva-7b", "mellum2", NULL};
static const char *const N_FALCON[] = {"falcon", NULL};
static const char *const N_DSCODER[] = {"deepseek-coder", NULL};
static const char *const N_DSV3[] = {"deepseek-v3", "hunyuan-dense", "joyai-llm", NULL};
static const char *const N_GPT4O[] = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", NULL};
static const char *const N_TEKKEN[] = {"tekken", NULL};
static const char *const N_SEED[] = {"seed-coder", NULL};
static const char *const N_BAILING[] = {"bailingmoe", "bailingmoe2", "llada-moe", NULL};
static const char *const N_MINICPM5[] = {"minicpm5", NULL};
static const char *const N_BLOOM[] = {"bloom", "poro-chat", "gpt3-finnish", NULL};
static const char *const N_VIKING[] = {"viking", NULL};
static const char *const N_LAGUNA[] = {"laguna", NULL};

static const ob_pretok_def defs[] = {
    /* llama.cpp's fallback for a BPE vocabulary without (or with "default") pre-tokenizer */
    {N_DEFAULT, {"[\\p{P}\\$\\+<=>\\^~\\|]+",
                 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                 "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
    {N_LLAMA3, {RE_LLAMA3}, 1, 1},
    {N_LLAMA3_PLAIN, {RE_LLAMA3}, 0, 0},
    {N_QWEN2, {RE_QWEN2}, 0, 0},
    {N_QWEN35, {RE_QWEN35}, 0, 0},
    {N_GPT2, {RE_GPT2}, 0, 0},
    {N_STARCODER, {"\\p{N}", RE_GPT2}, 0, 0},
    {N_FALCON, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, 0, 0},
    {N_DSCODER, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                 "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}, 0, 0},
    {N_DSV3, {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
              RE_DSV3_MAIN}, 0, 0},
    {N_GPT4O, {RE_GPT4O}, 0, 0},
    {N_TEKKEN, {RE_TEKKEN}, 1, 1},
    {N_SEED, {RE_SEED_CODER}, 0, 0},
    {N_BAILING, {RE_BAILING}, 0, 0},
    {N_MINICPM5, {"\\p{N}{1,3}", RE_MINICPM5}, 1, 0},
    {N_BLOOM, {RE_BLOOM}, 0, 0},
    {N_VIKING, {RE_BLOOM, "\\p{N}"}, 0, 0},
    {N_LAGUNA, {"[^\\n]+|[\\n]+", RE_QWEN2}, 0, 0},
};

const ob_pretok_def *ob_pretok_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        for (const char *const *n = defs[i].names; *n; n++)
            if (strcmp(*n, name) == 0) return &defs[i];
    return NULL;
}

void ob_pretok_names(char *buf, size_t len) {
    size_t used = 0;
    if (!buf || len == 0) return;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        for (const char *const *n = defs[i].names; *n; n++) {
            int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", *n);
            if (w < 0 || (size_t)w >= len - used) return;
            used += (size_t)w;
        }
}

/* ---- compiled splitter ------------------------------------------------------------------ */

struct ob_pretok {
    int n;
    pcre2_code *re[OB_PRETOK_MAX_REGEX];
};

void ob_pretok_free(ob_pretok_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p);
}

int ob_pretok_new(const char *const *regex, int n, ob_pretok_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (n < 1 || n > OB_PRETOK_MAX_REGEX || !regex) {
        snprintf(err, errlen, "pre-tokenizer: %d regexes (1..%d allowed)", n, OB_PRETOK_MAX_REGEX);
        return -1;
    }
    ob_pretok_t *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, errlen, "pre-tokenizer: out of memory"); return -1; }
    for (int i = 0; i < n; i++) {
        char e2[300];
        if (!regex[i]) {
            snprintf(err, errlen, "pre-tokenizer regex %d: missing", i);
            ob_pretok_free(p);
            return -1;
        }
        /* the same compilation as tokenizer.json regexes (unicode.c): Oniguruma's \s, classes
         * widened to the Unicode version utf8proc knows */
        p->re[i] = ob_regex_compile(regex[i], strlen(regex[i]), 0, e2, sizeof e2);
        if (!p->re[i]) {
            snprintf(err, errlen, "pre-tokenizer regex %d: %s", i, e2);
            ob_pretok_free(p);
            return -1;
        }
        p->n = i + 1;
    }
    *out = p;
    return 0;
}

size_t ob_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }          /* no overlong 3-byte forms */
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }          /* no surrogates */
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }          /* no overlong 4-byte forms */
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }          /* nothing above U+10FFFF */
    else return 1;
    if (n < len || s[1] < lo || s[1] > hi) return 1;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 1;
    return len;
}

static int match_at(const pcre2_code *re, const char *s, size_t n, size_t pos, pcre2_match_data *md) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
    /* The JIT's default stack is small; the interpreter keeps its frames on the heap. */
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* Pieces of level `level` are handed to level+1; past the last regex they go to fn. */
static int split_level(const ob_pretok_t *p, pcre2_match_data **md, int level, const char *s,
                       size_t n, ob_pretok_fn fn, void *ctx) {
    if (n == 0) return 0;
    if (level == p->n) return fn(ctx, s, n) ? -1 : 0;
    size_t gap = 0, pos = 0;   /* gap: start of the text not yet handed on */
    while (pos < n) {
        int rc = match_at(p->re[level], s, n, pos, md[level]);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -1;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[level]);
        size_t ms = ov[0], me = ov[1];
        if (ms < gap || me < ms || me > n) return -1;   /* not produced by our patterns */
        if (ms > gap && split_level(p, md, level + 1, s + gap, ms - gap, fn, ctx)) return -1;
        if (me > ms) {
            if (split_level(p, md, level + 1, s + ms, me - ms, fn, ctx)) return -1;
            gap = pos = me;
        } else {
            /* An empty match (a lookahead-only pattern) is a split point. */
            gap = ms;
            if (ms >= n) break;
            pos = ms + ob_utf8_len((const unsigned char *)s + ms, n - ms);
        }
    }
    return n > gap ? split_level(p, md, level + 1, s + gap, n - gap, fn, ctx) : 0;
}

int ob_pretok_split(const ob_pretok_t *p, const char *text, size_t len, ob_pretok_fn fn, void *ctx) {
    pcre2_match_data *md[OB_PRETOK_MAX_REGEX] = {0};
    int rc = 0;
    if (!p || (!text && len)) return -1;
    for (int i = 0; i < p->n; i++) {
        md[i] = pcre2_match_data_create(1, NULL);
        if (!md[i]) { rc = -1; goto done; }
    }
    rc = split_level(p, md, 0, text, len, fn, ctx);
done:
    for (int i = 0; i < p->n; i++) pcre2_match_data_free(md[i]);
    return rc;
}
