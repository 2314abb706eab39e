/* test_grammar.c — grammars (src/engine/grammar*.c): GBNF parsing and its errors, byte-level
 * matching, JSON Schema conversion (acceptance tables of valid and invalid documents, refused
 * schemas), the token mask against an independent per-token check, and constrained sampling:
 * random logits through filter + sampler + accept for many seeds on two vocabularies (the golden
 * Qwen3 tokenizer, converted, and a synthetic SentencePiece vocabulary with multi-byte and
 * partial-UTF-8 tokens), where every finished output must parse (jansson) and validate against
 * the schema under a small validator written here (independent of the converter; patterns are
 * checked with PCRE2). Also prints the filter's time per step on a synthetic 150k-token
 * vocabulary (printed, not asserted).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar.h"
#include "engine/grammar_int.h"
#include "onebit.h"
#include "test.h"
#include "text/tokenizer.h"
#include "text/tokenizer_spec.h"
#include "tools/tools.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of this thread: the speed figures should not count other processes on a busy machine. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_s;
static uint64_t rnd(void) {
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static double rndf(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* ---- GBNF ------------------------------------------------------------------------------------ */

static int gm(const char *gbnf, const char *s) {
    char err[256];
    ob_grammar_t *g = ob_grammar_parse_gbnf(gbnf, err, sizeof err);
    if (!g) { fprintf(stderr, "  grammar refused: %s\n", err); return -1; }
    int r = ob_grammar_match(g, s, strlen(s));
    ob_grammar_free(g);
    return r;
}

/* The grammar must be refused with a message containing want. */
static int gerr(const char *gbnf, const char *want) {
    char err[256] = "";
    ob_grammar_t *g = ob_grammar_parse_gbnf(gbnf, err, sizeof err);
    if (g) { ob_grammar_free(g); fprintf(stderr, "  accepted, expected error '%s'\n", want); return 0; }
    if (!strstr(err, want)) { fprintf(stderr, "  error '%s', expected '%s'\n", err, want); return 0; }
    return 1;
}

static void test_gbnf(void) {
    CHECK_EQ_INT(gm("root ::= \"abc\"", "abc"), 1);
    CHECK_EQ_INT(gm("root ::= \"abc\"", "ab"), 0);
    CHECK_EQ_INT(gm("root ::= \"abc\"", "abcd"), 0);
    CHECK_EQ_INT(gm("root ::= [a-z]+ \"!\"", "hello!"), 1);
    CHECK_EQ_INT(gm("root ::= [a-z]+ \"!\"", "!"), 0);
    CHECK_EQ_INT(gm("root ::= [a-z]* \"!\"", "!"), 1);
    CHECK_EQ_INT(gm("root ::= [^a]*", "bcd\xC3\xA9\xE6\xBC\xA2\xF0\x9F\x98\x80"), 1);   /* é 漢 😀 */
    CHECK_EQ_INT(gm("root ::= [^a]*", "bca"), 0);
    CHECK_EQ_INT(gm("root ::= [^a]*", "\xC3"), 0);               /* truncated UTF-8 */
    CHECK_EQ_INT(gm("root ::= [^a]*", "\xC0\xAF"), 0);           /* overlong */
    CHECK_EQ_INT(gm("root ::= [^a]*", "\xED\xA0\x80"), 0);       /* surrogate */
    CHECK_EQ_INT(gm("root ::= [^a]*", "\xF4\x90\x80\x80"), 0);   /* > U+10FFFF */
    CHECK_EQ_INT(gm("root ::= .", "\xF4\x8F\xBF\xBF"), 1);       /* U+10FFFF */
    CHECK_EQ_INT(gm("root ::= [\\u00e9-\\u00ff]", "\xC3\xA9"), 1);
    CHECK_EQ_INT(gm("root ::= [\\u00e9-\\u00ff]", "\xC3\xA8"), 0);
    CHECK_EQ_INT(gm("root ::= [\\U0001F600]", "\xF0\x9F\x98\x80"), 1);
    CHECK_EQ_INT(gm("root ::= \"\\x41\\n\\t\\\"\\\\\"", "A\n\t\"\\"), 1);
    CHECK_EQ_INT(gm("root ::= x{2,4}\nx ::= \"ab\"", "abab"), 1);
    CHECK_EQ_INT(gm("root ::= x{2,4}\nx ::= \"ab\"", "ab"), 0);
    CHECK_EQ_INT(gm("root ::= x{2,4}\nx ::= \"ab\"", "abababab"), 1);
    CHECK_EQ_INT(gm("root ::= x{2,4}\nx ::= \"ab\"", "ababababab"), 0);
    CHECK_EQ_INT(gm("root ::= \"a\"{3}", "aaa"), 1);
    CHECK_EQ_INT(gm("root ::= \"a\"{3}", "aaaa"), 0);
    CHECK_EQ_INT(gm("root ::= \"a\"{2,}", "aaaaaaa"), 1);
    CHECK_EQ_INT(gm("root ::= \"a\"{2,}", "a"), 0);
    CHECK_EQ_INT(gm("root ::= \"ab\"{,2}", ""), 1);
    CHECK_EQ_INT(gm("root ::= \"ab\"{,2}", "ababab"), 0);
    CHECK_EQ_INT(gm("root ::= (\"a\" | \"b\")* \"c\"", "abbac"), 1);
    CHECK_EQ_INT(gm("root ::= (\"a\" | \"b\")* \"c\"", "abbacc"), 0);
    CHECK_EQ_INT(gm("root ::= (\"a\"?)*", "aaa"), 1);
    CHECK_EQ_INT(gm("root ::= (\"a\"? \"b\"?){2,3}", "abab"), 1);
    CHECK_EQ_INT(gm("root ::= (\"a\"? \"b\"?){2,3}", "abababa"), 0);
    CHECK_EQ_INT(gm("root ::= [a-z]{0,1000000} \"!\"", "hello!"), 1);   /* big bounds cost nothing */
    CHECK_EQ_INT(gm("root ::= \"x\" # comment\n  # more\nfoo ::= \"y\"", "x"), 1);
    CHECK_EQ_INT(gm("root ::= \"a\" |\n  \"b\"", "b"), 1);
    CHECK_EQ_INT(gm("root ::= (\n \"a\"\n \"b\" )", "ab"), 1);
    CHECK_EQ_INT(gm("root ::= a a\na ::= \"x\" | \"y\" a", "yxyyx"), 1);
    CHECK_EQ_INT(gm("root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"", "1+(2-(3+40))"), 1);
    CHECK_EQ_INT(gm("root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"", "1+(2-(3+40)"), 0);
    CHECK_EQ_INT(gm("root ::= \"\" \"a\" \"\"", "a"), 1);
    CHECK_EQ_INT(gm("root ::= ", ""), 1);
    /* ambiguous grammar: many paths to the same stacks, deduplicated */
    CHECK_EQ_INT(gm("root ::= (a | a | a)*\na ::= \"x\" | \"x\" \"x\" | [x]", "xxxxxxxxxxxxxxxxxxxx"), 1);
    /* peer grammars' style */
    CHECK_EQ_INT(gm("root ::= (\"1. \" move \" \" move \"\\n\")+\nmove ::= [a-h] [1-8]", "1. e4 e5\n1. d4 d5\n"), 1);

    /* errors name a line and column */
    CHECK(gerr("root ::= \"abc", "line 1 column 10: unterminated literal"));
    CHECK(gerr("root ::= x\nx ::= [a-", "line 2 column 7: unterminated character class"));
    CHECK(gerr("root ::= y\n", "line 1 column 10: undefined rule 'y'"));
    CHECK(gerr("foo ::= \"a\"", "no 'root' rule"));
    CHECK(gerr("root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule 'root' defined twice"));
    CHECK(gerr("root ::= (\"a\"", "expected ')'"));
    CHECK(gerr("root ::= \"a\")", "unbalanced ')'"));
    CHECK(gerr("root ::= *", "nothing before it to repeat"));
    CHECK(gerr("root ::= \"a\"{3,2}", "minimum above maximum"));
    CHECK(gerr("root ::= \"a\"{99999999999}", "repetition count larger than"));
    CHECK(gerr("root ::= \"\\q\"", "unknown escape"));
    CHECK(gerr("root ::= \"\\uD800\"", "surrogate"));
    CHECK(gerr("root ::= [z-a]", "range end"));
    CHECK(gerr("root ::= []", "empty character class"));
    CHECK(gerr("root ::= [^\\x00-\\U0010FFFF]", "matches nothing"));
    CHECK(gerr("root ::= \"a\" b ::= \"c\"", "missing newline"));
    CHECK(gerr("root ::= a\na ::= a \"x\" | \"y\"", "left recursion"));
    CHECK(gerr("root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left recursion"));
    CHECK(gerr("root ::= a\na ::= \"x\" a", "can never finish"));
    CHECK(gerr("root ::= (\"a\"?){0,100000}", "can match nothing"));
    CHECK(gerr("root ::= <think>", "<[id]>"));
    CHECK(gerr("root ::= \"\xFF\"", "invalid UTF-8"));
    CHECK(gerr("r00t ::= \"a\"\n\n\n  ?", "line 4 column 3"));
    {   /* nesting and size limits */
        size_t n = 5000;
        char *t = malloc(n * 2 + 32);
        strcpy(t, "root ::= ");
        size_t k = strlen(t);
        for (size_t i = 0; i < 1500; i++) t[k++] = '(';
        t[k++] = '"'; t[k++] = 'a'; t[k++] = '"';
        for (size_t i = 0; i < 1500; i++) t[k++] = ')';
        t[k] = 0;
        CHECK(gerr(t, "nested deeper"));
        free(t);
    }
    {   /* a chain of 100k rules: linear-time checks */
        size_t cap = 100000 * 40;
        char *t = malloc(cap);
        size_t k = (size_t)sprintf(t, "root ::= r0\n");
        for (int i = 0; i < 100000; i++) k += (size_t)sprintf(t + k, "r%d ::= \"x\" r%d | \"y\"\n", i, i + 1);
        sprintf(t + k, "r100000 ::= \"z\"\n");
        double t0 = now_s();
        CHECK_EQ_INT(gm(t, "xxxy"), 1);
        CHECK(now_s() - t0 < 5.0);
        free(t);
    }
}

/* ---- JSON Schema acceptance ---------------------------------------------------------------------- */

typedef struct { const char *schema; const char *ok[8]; const char *bad[8]; } case_t;

static const case_t CASES[] = {
    {"{\"type\":\"string\"}", {"\"\"", "\"a b\"", "\"\\u00e9\\n\\\"\"", "\"\xC3\xA9\"", "\"\\ud83d\\ude00\""},
     {"a", "\"\\u0000\"", "\"\\ud800\"", "\"\\x\"", "\"a\nb\"", "\"\\udc00\"", " \"a\"", "\"a\" "}},
    {"{\"type\":\"integer\"}", {"0", "-1", "1234567890123456"}, {"01", "1.5", "12345678901234567", "-", "+1", "1e3"}},
    {"{\"type\":\"number\"}", {"0", "-0.5", "1e10", "2.5E-3", "1.0"}, {".5", "1.", "1e", "1e999", "--1", "NaN"}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"True", "1", "null"}},
    {"{\"type\":\"null\"}", {"null"}, {"nul", "\"null\""}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1"}},
    {"{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1]}]}", {"\"red\"", "1", "null", "{\"a\":[1]}"}, {"\"blue\"", "2", "{\"a\": [1]}"}},
    {"{\"const\":\"only\"}", {"\"only\""}, {"\"other\""}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"abc\"", "\"\\n\\t\"", "\"\xE6\xBC\xA2\xE5\xAD\x97\""}, {"\"a\"", "\"abcd\""}},
    {"{\"type\":\"integer\",\"minimum\":-20,\"maximum\":305}", {"-20", "-9", "0", "7", "99", "305", "300", "-1"}, {"-21", "306", "1000", "-100", "-0"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", {"1", "9"}, {"0", "10", "-1"}},
    {"{\"type\":\"integer\",\"minimum\":1000}", {"1000", "1001", "99999", "123456789012345"}, {"999", "0", "-5"}},
    {"{\"type\":\"integer\",\"maximum\":-3}", {"-3", "-100"}, {"-2", "0", "5"}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "1", "0.5", "1.0", "1.000", "0.0001"}, {"1.01", "-0.5", "2", "1e0", "-0"}},
    {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":3}", {"-1.99", "2.9", "0", "-0.5", "-1"}, {"-2", "3", "3.0", "-2.0", "-2.5"}},
    {"{\"type\":\"number\",\"minimum\":2.5}", {"3", "3.5", "1000.5"}, {"2", "-3", "2.5", "2.99"}},   /* bounds rounded inward */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
     {"{\"a\":1}", "{\"a\": 1, \"b\": \"x\"}", "{\n  \"a\": 1,\n  \"b\": \"x\"\n}", "{ \"a\":1 }"},
     {"{}", "{\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1,\"c\":2}", "{\"a\":1,\"a\":2}", "{\"a\" :1}", "{\"a\":1,}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}}}",
     {"{}", "{\"a\":1}", "{\"b\":1}", "{\"c\":1}", "{\"a\":1,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":3}"},
     {"{\"c\":1,\"a\":1}", "{\"a\":1,\"a\":1}", "{,}"}},
    {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{\"id\":1}", "{\"id\":1,\"x\":true,\"yy\":false}", "{\"id\":1,\"i\":true,\"idx\":false,\"\":true}"},
     {"{\"id\":1,\"x\":1}", "{\"id\":1,\"id\":true}", "{\"x\":true}", "{\"id\":1,\"\\u0069d\":true}"}},
    {"{\"type\":\"object\",\"additionalProperties\":true,\"properties\":{\"k\":{\"const\":1}}}",
     {"{}", "{\"k\":1}", "{\"k\":1,\"z\":[1,{\"q\":null}]}", "{\"kk\":\"v\"}"}, {"{\"k\":2}", "{\"k\":1,\"k\":1}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"x\":{\"y\":[1,2,\"3\",true,null,-0.5e3]}}", "{ }"}, {"[]", "{\"x\"}", "{'x':1}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}", {"[1]", "[1, 2]", "[1,2,3]", "[ 1 ]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", {"[1,2]", "[1,2,3,4,5,6,7,8,9]"}, {"[1]", "[]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":0}", {"[]", "[ ]"}, {"[1]"}},
    {"{\"type\":\"array\"}", {"[]", "[1,\"a\",[null]]"}, {"[", "{}"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", {"[\"a\",1]"}, {"[\"a\"]", "[\"a\",1,2]", "[1,\"a\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"minItems\":1}", {"[\"a\"]", "[\"a\",1]"}, {"[]", "[\"a\",1,2]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},\"maxItems\":3}", {"[\"a\"]", "[\"a\",true]", "[\"a\",true,false]"}, {"[\"a\",true,false,true]", "[\"a\",1]", "[]"}},
    {"{\"type\":\"array\",\"items\":[{\"type\":\"null\"},{\"type\":\"boolean\"}]}", {"[null,true]"}, {"[null]", "[null,true,1]"}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"5", "\"a\""}, {"\"ab\"", "null"}},
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"]},"
     "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"]}]}",
     {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}"}, {"{\"kind\":\"a\",\"y\":\"s\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"anyOf\":[{\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":1}", "{\"b\":null}"}, {"{}", "{\"b\":1}"}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":1,\"b\":true}"}, {"{\"a\":1}", "{\"b\":true}"}},
    {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", {"0", "5"}, {"6", "-1"}},
    {"{\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"n\":{\"type\":\"integer\"}}}],\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},\"required\":[\"id\"]}}}",
     {"{\"id\":\"x\"}", "{\"id\":\"x\",\"n\":3}"}, {"{\"n\":3}"}},
    {"{\"$ref\":\"#/definitions/pos\",\"definitions\":{\"pos\":{\"type\":\"integer\",\"minimum\":1}}}", {"1", "42"}, {"0"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"}, {"{\"v\":1,\"kids\":[{}]}"}},
    {"{\"type\":\"object\",\"properties\":{\"self\":{\"$ref\":\"#\"}}}", {"{}", "{\"self\":{\"self\":{}}}"}, {"{\"self\":1}"}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", {"\"AB-123\""}, {"\"AB-12\"", "\"ab-123\"", "\"AB-1234\""}},
    {"{\"type\":\"string\",\"pattern\":\"a\\\"b|c\\\\\\\\d\"}", {"\"a\\\"b\"", "\"xxc\\\\dyy\"", "\"c\\\\d\""}, {"\"ab\"", "\"cd\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(?:foo|ba[rz])+(\\\\.txt)?$\"}", {"\"foo\"", "\"barbazfoo.txt\""}, {"\"fo\"", "\".txt\"", "\"foo.txt.txt\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[^a-z]\\\\s\\\\w*$\"}", {"\"A b_9\"", "\"1\\tx\"", "\"\\\" \""}, {"\"a b\"", "\"AB\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", "\"2023-12-31\"", "\"2023-04-30\""}, {"\"2023-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"", "\"2023-1-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}", {"\"23:59:59Z\"", "\"00:00:00.123+05:30\""}, {"\"24:00:00Z\"", "\"12:00:00\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-02T03:04:05Z\""}, {"\"2024-01-02 03:04:05Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"anything\""}, {"1"}},   /* unknown formats: annotations */
    {"{}", {"1", "\"s\"", "[]", "{\"a\":null}", "true"}, {"", "[", "tru"}},
    {"true", {"null", "[{}]"}, {"x"}},
    {"{\"description\":\"only annotations\",\"title\":\"t\"}", {"{}", "2"}, {"}"}},
    {"{\"type\":\"integer\",\"nullable\":true,\"minimum\":3}", {"3", "null"}, {"2", "\"x\""}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"z\"]}", {"{\"a\":1,\"z\":[]}"}, {"{\"a\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a/b~c\":{\"type\":\"integer\"},\"\xC3\xA9\":{\"type\":\"integer\"},\"q\\\"\":{\"type\":\"null\"}},\"required\":[\"a/b~c\"]}",
     {"{\"a/b~c\":1}", "{\"a/b~c\":1,\"\xC3\xA9\":2,\"q\\\"\":null}"}, {"{\"ab\":1}"}},
};

static int schema_match(ob_grammar_t *g, const char *s) { return ob_grammar_match(g, s, strlen(s)); }

static void test_schema_cases(int *n_cases) {
    char err[512];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_t *c = &CASES[i];
        ob_grammar_t *g = ob_grammar_from_json_schema(c->schema, err, sizeof err);
        if (!g) { fprintf(stderr, "  schema %s refused: %s\n", c->schema, err); CHECK(g != NULL); continue; }
        for (int k = 0; k < 8 && c->ok[k]; k++) {
            int m = schema_match(g, c->ok[k]);
            if (!m) fprintf(stderr, "  schema %s: should accept %s\n", c->schema, c->ok[k]);
            CHECK(m);
            (*n_cases)++;
        }
        for (int k = 0; k < 8 && c->bad[k]; k++) {
            int m = schema_match(g, c->bad[k]);
            if (m) fprintf(stderr, "  schema %s: should reject %s\n", c->schema, c->bad[k]);
            CHECK(!m);
            (*n_cases)++;
        }
        ob_grammar_free(g);
    }
}

static int serr(const char *schema, const char *want) {
    char err[512] = "";
    ob_grammar_t *g = ob_grammar_from_json_schema(schema, err, sizeof err);
    if (g) { ob_grammar_free(g); fprintf(stderr, "  schema %s accepted, expected '%s'\n", schema, want); return 0; }
    if (!strstr(err, want)) { fprintf(stderr, "  error '%s', expected '%s'\n", err, want); return 0; }
    return 1;
}

static void test_schema_errors(void) {
    CHECK(serr("{\"type\":", "invalid JSON at line 1"));
    CHECK(serr("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", "at /properties/a: unsupported keyword 'not'"));
    CHECK(serr("{\"type\":\"array\",\"uniqueItems\":true}", "unsupported keyword 'uniqueItems'"));
    CHECK(serr("{\"if\":{},\"then\":{}}", "unsupported keyword"));
    CHECK(serr("{\"$ref\":\"http://example.com/s.json\"}", "only references inside the schema"));
    CHECK(serr("{\"$ref\":\"#/$defs/missing\"}", "does not resolve"));
    CHECK(serr("false", "can never be satisfied"));
    CHECK(serr("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer"));
    CHECK(serr("{\"type\":\"integer\",\"minimum\":1.2,\"maximum\":1.8}", "no integer"));
    CHECK(serr("{\"type\":\"wat\"}", "unknown type"));
    CHECK(serr("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences"));
    CHECK(serr("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "lookaround"));
    CHECK(serr("{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchors"));
    CHECK(serr("{\"type\":\"string\",\"pattern\":\"[\"}", "unterminated"));
    CHECK(serr("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength is above maxLength"));
    CHECK(serr("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "exclude each other"));
    CHECK(serr("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}", "required but not allowed"));
    CHECK(serr("{\"type\":\"number\",\"multipleOf\":0.5}", "multipleOf"));
    CHECK(serr("{\"$ref\":\"#/$defs/a\",\"minimum\":1,\"$defs\":{\"a\":{}}}", "next to $ref"));
    CHECK(serr("{\"enum\":[1,2],\"type\":\"string\"}", "no enum/const value"));
    {   /* deep nesting */
        char *s = malloc(20000);
        size_t k = 0;
        for (int i = 0; i < 200; i++) k += (size_t)sprintf(s + k, "{\"type\":\"array\",\"items\":");
        k += (size_t)sprintf(s + k, "{}");
        for (int i = 0; i < 200; i++) s[k++] = '}';
        s[k] = 0;
        CHECK(serr(s, "nested deeper"));
        free(s);
    }
    {   /* a $ref cycle with no way out */
        CHECK(serr("{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"},\"minItems\":1}},\"$ref\":\"#/$defs/a\"}", "can never finish"));
    }
    /* the prefix form for embedding */
    char err[256];
    char *t = ob_grammar_json_schema_to_gbnf("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}", "f1-", err, sizeof err);
    CHECK(t != NULL);
    if (t) {
        char *full = malloc(strlen(t) + 256);
        sprintf(full, "root ::= \"<tool_call>{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" f1-root \"}</tool_call>\"\n%s", t);
        ob_grammar_t *g = ob_grammar_parse_gbnf(full, err, sizeof err);
        CHECK(g != NULL);
        const char *ok = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
        CHECK(g && schema_match(g, ok));
        CHECK(g && !schema_match(g, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>"));
        ob_grammar_free(g);
        free(full);
        free(t);
    }
    CHECK(ob_grammar_json_schema_to_gbnf("{}", "bad prefix", err, sizeof err) == NULL);
    char q[64];
    CHECK_EQ_INT(ob_grammar_gbnf_literal("a\"b\\\n", 5, q, sizeof q), 10);
    CHECK_STR(q, "\"a\\\"b\\\\\\n\"");
}

/* ---- an independent validator for the schema subset --------------------------------------------- */

static json_t *vdoc;

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int digits_ok(const char *s, int n) { for (int i = 0; i < n; i++) if (s[i] < '0' || s[i] > '9') return 0; return 1; }

static int valid_date(const char *s) {
    if (strlen(s) < 10 || !digits_ok(s, 4) || s[4] != '-' || !digits_ok(s + 5, 2) || s[7] != '-' || !digits_ok(s + 8, 2)) return 0;
    int y = atoi(s), m = atoi(s + 5), d = atoi(s + 8);
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= dm[m - 1] + (m == 2 && leap);
}

static int valid_time(const char *s) {
    if (!digits_ok(s, 2) || s[2] != ':' || !digits_ok(s + 3, 2) || s[5] != ':' || !digits_ok(s + 6, 2)) return 0;
    if (atoi(s) > 23 || atoi(s + 3) > 59 || atoi(s + 6) > 59) return 0;
    const char *p = s + 8;
    if (*p == '.') { p++; if (!(*p >= '0' && *p <= '9')) return 0; while (*p >= '0' && *p <= '9') p++; }
    if (*p == 'Z' || *p == 'z') return p[1] == 0;
    if ((*p == '+' || *p == '-') && digits_ok(p + 1, 2) && p[3] == ':' && digits_ok(p + 4, 2) && p[6] == 0)
        return atoi(p + 1) <= 23 && atoi(p + 4) <= 59;
    return 0;
}

static int valid_format(const char *f, const char *s) {
    if (!strcmp(f, "date")) return strlen(s) == 10 && valid_date(s);
    if (!strcmp(f, "time")) return valid_time(s);
    if (!strcmp(f, "date-time")) return strlen(s) > 11 && (s[10] == 'T' || s[10] == 't') && valid_date(s) && valid_time(s + 11);
    if (!strcmp(f, "uuid")) {
        if (strlen(s) != 36) return 0;
        for (int i = 0; i < 36; i++) {
            int dash = i == 8 || i == 13 || i == 18 || i == 23;
            if (dash ? s[i] != '-' : !strchr("0123456789abcdefABCDEF", s[i])) return 0;
        }
    }
    return 1;
}

static int valid_pattern(const char *pat, const char *s, size_t len) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static int validate(json_t *s, json_t *v);

static json_t *vresolve(const char *ref) {
    json_t *cur = vdoc;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 1);
    for (char *tok = strtok(buf, "/"); tok && cur; tok = strtok(NULL, "/")) cur = json_object_get(cur, tok);
    return cur;
}

static int is_type(const char *t, json_t *v) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return 0;
}

static double num(json_t *s, const char *k, int *has) {
    json_t *x = json_object_get(s, k);
    *has = json_is_number(x);
    return *has ? json_number_value(x) : 0;
}

static int validate(json_t *s, json_t *v) {
    if (json_is_true(s)) return 1;
    if (json_is_false(s)) return 0;
    json_t *x;
    if ((x = json_object_get(s, "$ref"))) return validate(vresolve(json_string_value(x)), v);
    size_t i;
    json_t *e;
    if ((x = json_object_get(s, "allOf"))) json_array_foreach(x, i, e) if (!validate(e, v)) return 0;
    if ((x = json_object_get(s, "anyOf"))) { int any = 0; json_array_foreach(x, i, e) any |= validate(e, v); if (!any) return 0; }
    if ((x = json_object_get(s, "oneOf"))) { int n = 0; json_array_foreach(x, i, e) n += validate(e, v); if (n != 1) return 0; }
    if ((x = json_object_get(s, "type"))) {
        int ok = 0;
        if (json_is_string(x)) ok = is_type(json_string_value(x), v);
        else json_array_foreach(x, i, e) ok |= is_type(json_string_value(e), v);
        if (!ok) return 0;
    }
    if ((x = json_object_get(s, "const")) && !json_equal(x, v)) return 0;
    if ((x = json_object_get(s, "enum"))) { int ok = 0; json_array_foreach(x, i, e) ok |= json_equal(e, v); if (!ok) return 0; }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *ap = json_object_get(s, "additionalProperties");
        if ((x = json_object_get(s, "required"))) json_array_foreach(x, i, e) if (!json_object_get(v, json_string_value(e))) return 0;
        const char *k;
        json_t *pv;
        json_object_foreach(v, k, pv) {
            json_t *ps = props ? json_object_get(props, k) : NULL;
            if (ps) { if (!validate(ps, pv)) return 0; }
            else if (ap && !validate(ap, pv)) return 0;
        }
    }
    if (json_is_array(v)) {
        json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items"), *extra = NULL;
        if (json_is_array(items)) { pre = items; items = json_object_get(s, "additionalItems"); }
        (void)extra;
        size_t np = pre ? json_array_size(pre) : 0;
        json_array_foreach(v, i, e) {
            json_t *is = i < np ? json_array_get(pre, i) : items;
            if (is && !validate(is, e)) return 0;
        }
        int h;
        double mn = num(s, "minItems", &h);
        if (h && json_array_size(v) < mn) return 0;
        double mx = num(s, "maxItems", &h);
        if (h && json_array_size(v) > mx) return 0;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        int h;
        double mn = num(s, "minLength", &h);
        if (h && utf8_chars(str) < mn) return 0;
        double mx = num(s, "maxLength", &h);
        if (h && utf8_chars(str) > mx) return 0;
        if ((x = json_object_get(s, "pattern")) && !valid_pattern(json_string_value(x), str, json_string_length(v))) return 0;
        if ((x = json_object_get(s, "format")) && !valid_format(json_string_value(x), str)) return 0;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        int h;
        double b = num(s, "minimum", &h);
        if (h && d < b) return 0;
        b = num(s, "maximum", &h);
        if (h && d > b) return 0;
        b = num(s, "exclusiveMinimum", &h);
        if (h && d <= b) return 0;
        b = num(s, "exclusiveMaximum", &h);
        if (h && d >= b) return 0;
    }
    return 1;
}

/* ---- vocabularies ----------------------------------------------------------------------------------- */

/* A SentencePiece vocabulary: 256 byte tokens, an EOS, a control token matched as text, and
 * n_extra generated pieces (JSON punctuation runs, words with and without a leading space,
 * numbers, escapes, CJK, emoji). */
static ob_tokenizer_t *synth_vocab(int n_extra, uint64_t seed) {
    static const char *const FIXED[] = {"{\"", "\":", "\",", "\"}", "\": \"", "\",\"", "}}", "]}", "[{", "},{", "\\n", "\\\"",
        "\\u00", "true", "false", "null", "0.", "12", "-1", "e+", "\xE2\x96\x81\"", "\xE2\x96\x81{", "\n", "\n\xE2\x96\x81\xE2\x96\x81",
        "\xE6\xBC\xA2\xE5\xAD\x97", "\xC3\xA9", "\xF0\x9F\x98\x80", "<|im_start|>", "2024-", "-0", "T1", ":00Z"};
    int n_fixed = (int)(sizeof FIXED / sizeof FIXED[0]);
    int n = 256 + 1 + n_fixed + n_extra;
    char **text = calloc((size_t)n, sizeof *text);
    size_t *len = calloc((size_t)n, sizeof *len);
    uint8_t *type = calloc((size_t)n, 1);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        text[k] = malloc(8);
        len[k] = (size_t)sprintf(text[k], "<0x%02X>", b);
        type[k++] = OB_TOKTYPE_BYTE;
    }
    text[k] = strdup("</s>");
    len[k] = 4;
    type[k++] = OB_TOKTYPE_CONTROL;
    for (int i = 0; i < n_fixed; i++) {
        text[k] = strdup(FIXED[i]);
        len[k] = strlen(FIXED[i]);
        type[k++] = OB_TOKTYPE_NORMAL;
    }
    uint64_t save = rng_s;
    rng_s = seed;
    static const char PUNCT[] = "{}[]\":,.-_/\\()'!?#$%&*+;<=>@^`|~";
    for (int i = 0; i < n_extra; i++) {
        char buf[64];
        int m = 0, kind = (int)(rnd() % 16);
        if (kind < 9) {   /* word */
            if (rnd() % 10 < 6) { memcpy(buf, "\xE2\x96\x81", 3); m = 3; }
            int l = 1 + (int)(rnd() % 9);
            for (int j = 0; j < l; j++) buf[m++] = (char)((j == 0 && rnd() % 8 == 0 ? 'A' : 'a') + rnd() % 26);
        } else if (kind < 11) {   /* punctuation */
            int l = 1 + (int)(rnd() % 4);
            for (int j = 0; j < l; j++) buf[m++] = PUNCT[rnd() % (sizeof PUNCT - 1)];
        } else if (kind < 13) {   /* digits */
            int l = 1 + (int)(rnd() % 4);
            for (int j = 0; j < l; j++) buf[m++] = (char)('0' + rnd() % 10);
        } else if (kind < 15) {   /* CJK */
            int l = 1 + (int)(rnd() % 3);
            for (int j = 0; j < l; j++) {
                uint32_t cp = 0x4E00 + (uint32_t)(rnd() % 0x5200);
                buf[m++] = (char)(0xE0 | (cp >> 12));
                buf[m++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                buf[m++] = (char)(0x80 | (cp & 0x3F));
            }
        } else {   /* whitespace runs */
            int l = 1 + (int)(rnd() % 8);
            for (int j = 0; j < l; j++) { memcpy(buf + m, "\xE2\x96\x81", 3); m += 3; }
        }
        text[k] = malloc((size_t)m + 1);
        memcpy(text[k], buf, (size_t)m);
        text[k][m] = 0;
        len[k] = (size_t)m;
        type[k++] = OB_TOKTYPE_NORMAL;
    }
    rng_s = save;
    ob_tokenizer_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.model = OB_TOK_MODEL_SPM;
    sp.n_tokens = n;
    sp.text = (const char *const *)text;
    sp.text_len = len;
    sp.type = type;
    sp.bos = sp.unk = sp.pad = sp.eot = sp.eom = -1;
    sp.eos = 256;
    for (int i = 0; i < OB_TOK_MAX_EXTRA_EOG; i++) sp.extra_eog[i] = -1;
    ob_tokenizer_t *t = NULL;
    char err[256];
    if (ob_tokenizer_build(&sp, &t, err, sizeof err) != 0) { fprintf(stderr, "  synth vocab: %s\n", err); t = NULL; }
    for (int i = 0; i < n; i++) free(text[i]);
    free(text); free(len); free(type);
    return t;
}

/* ---- mask consistency ------------------------------------------------------------------------------- */

/* Along random walks, the filter's mask must equal a token-by-token check (a fresh byte-only
 * matcher fed the output so far plus the token's bytes). */
static void test_mask_consistency(const ob_tokenizer_t *tok, const ob_grammar_vocab_t *voc, const char *schema, int walks) {
    char err[512];
    ob_grammar_t *g = ob_grammar_from_json_schema(schema, err, sizeof err);
    CHECK(g != NULL);
    if (!g) return;
    int32_t V = ob_tokenizer_n_vocab(tok);
    float *logits = malloc((size_t)V * sizeof *logits);
    char *out = malloc(1 << 16), *buf = malloc(1 << 16);
    int mismatches = 0, steps = 0;
    for (int w = 0; w < walks; w++) {
        ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
        size_t n = 0;
        for (int step = 0; step < 40 && !ob_grammar_state_done(st); step++) {
            for (int32_t i = 0; i < V; i++) logits[i] = 0;
            ob_grammar_state_filter(st, logits, V);
            int32_t allowed[4096], n_allowed = 0;
            for (int32_t t = 0; t < V; t++) {
                int in_mask = logits[t] == 0;
                int expect;
                if (ob_tokenizer_is_eog(tok, t)) expect = ob_grammar_state_complete(st);
                else {
                    int l = ob_tokenizer_token_bytes(tok, t, buf + n, (1 << 16) - (int)n);
                    memcpy(buf, out, n);
                    ob_grammar_state_t *chk = ob_grammar_state_new_vocab(g, NULL, err, sizeof err);
                    expect = l > 0 && ob_grammar_state_accept_bytes(chk, buf, n + (size_t)l) == 0;
                    ob_grammar_state_free(chk);
                }
                if (in_mask != expect && mismatches++ < 5)
                    fprintf(stderr, "  mask mismatch: token %d after '%.*s': mask %d, check %d\n", t, (int)n, out, in_mask, expect);
                if (in_mask && n_allowed < 4096) allowed[n_allowed++] = t;
            }
            steps++;
            if (!n_allowed) break;
            int32_t t = allowed[rnd() % (uint64_t)n_allowed];
            ob_grammar_state_accept(st, t);
            CHECK(!ob_grammar_state_failed(st));
            if (ob_tokenizer_is_eog(tok, t)) break;
            int l = ob_tokenizer_token_bytes(tok, t, out + n, (1 << 16) - (int)n);
            if (l > 0) n += (size_t)l;
        }
        ob_grammar_state_free(st);
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK(steps > walks * 5);
    free(logits); free(out); free(buf);
    ob_grammar_free(g);
}

/* ---- constrained sampling ---------------------------------------------------------------------------- */

typedef struct { int done, valid, parsed; } samp_stats;

/* Random logits (tokens with a closing character and EOG nudged up so outputs end), filter,
 * sample, accept; every finished output must parse and validate. */
static samp_stats sample_schema(const ob_tokenizer_t *tok, const ob_grammar_vocab_t *voc, const char *schema,
                                int seeds, int max_tokens) {
    samp_stats r = {0, 0, 0};
    char err[512];
    ob_grammar_t *g = schema ? ob_grammar_from_json_schema(schema, err, sizeof err) : ob_grammar_json_object();
    if (!g) { fprintf(stderr, "  schema refused: %s\n", err); CHECK(g != NULL); return r; }
    json_t *sch = schema ? json_loads(schema, JSON_DECODE_ANY, NULL) : json_pack("{s:s}", "type", "object");
    vdoc = sch;
    int32_t V = ob_tokenizer_n_vocab(tok);
    float *bias = calloc((size_t)V, sizeof *bias), *logits = malloc((size_t)V * sizeof *logits);
    char piece[4096];
    for (int32_t t = 0; t < V; t++) {
        int l = ob_tokenizer_token_bytes(tok, t, piece, sizeof piece);
        for (int i = 0; i < l && i < (int)sizeof piece; i++) if (strchr("\"}]", piece[i]) && piece[i]) { bias[t] = 3; break; }
        if (ob_tokenizer_is_eog(tok, t)) bias[t] = 5;
    }
    size_t cap = 1 << 20;
    char *out = malloc(cap);
    for (int seed = 0; seed < seeds; seed++) {
        ob_sampler_params sp = ob_sampler_default_params();
        sp.temp = 1.0f; sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0.0f; sp.seed = (uint64_t)seed * 7919 + 1;
        ob_sampler_t *smp = ob_sampler_new(&sp, V);
        ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
        CHECK(st != NULL);
        if (!st) { ob_sampler_free(smp); continue; }
        rng_s = 0x1234567ULL + (uint64_t)seed * 0x9E3779B97F4A7C15ULL;
        size_t n = 0;
        int ended = 0;
        for (int step = 0; step < max_tokens; step++) {
            for (int32_t i = 0; i < V; i++) logits[i] = (float)(rndf() * 8.0 - 4.0) + bias[i];
            ob_grammar_state_filter(st, logits, V);
            int32_t t = ob_sampler_sample(smp, logits);
            ob_sampler_accept(smp, t);
            ob_grammar_state_accept(st, t);
            if (ob_grammar_state_failed(st)) { fprintf(stderr, "  seed %d: state failed after '%.*s'\n", seed, (int)n, out); break; }
            if (ob_tokenizer_is_eog(tok, t)) { ended = 1; break; }
            int l = ob_tokenizer_token_bytes(tok, t, out + n, (int)(cap - n));
            if (l > 0) n += (size_t)l;
            if (ob_grammar_state_done(st)) { ended = 1; break; }
        }
        CHECK(!ob_grammar_state_failed(st));
        if (ended && ob_grammar_state_complete(st)) {
            r.done++;
            json_error_t je;
            json_t *v = json_loadb(out, n, JSON_DECODE_ANY, &je);
            if (v) {
                r.parsed++;
                if (validate(sch, v)) r.valid++;
                else fprintf(stderr, "  seed %d: output does not validate: %.*s\n", seed, (int)(n < 600 ? n : 600), out);
                json_decref(v);
            } else fprintf(stderr, "  seed %d: output does not parse (%s): %.*s\n", seed, je.text, (int)(n < 600 ? n : 600), out);
        }
        ob_grammar_state_free(st);
        ob_sampler_free(smp);
    }
    free(out); free(bias); free(logits);
    json_decref(sch);
    ob_grammar_free(g);
    CHECK_EQ_INT(r.parsed, r.done);
    CHECK_EQ_INT(r.valid, r.done);
    return r;
}

static const char *const SAMPLE_SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},\"active\":{\"type\":\"boolean\"},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1}},\"required\":[\"name\",\"age\"]}",
    "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":5},{\"type\":\"null\"},{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(\\\\.[a-z]+)?$\"}",
    "{\"type\":\"string\",\"pattern\":\"^[a-c\\\"\\\\\\\\\\n]{1,6}$\"}",
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"maxLength\":4},{\"type\":\"integer\"},{\"type\":\"boolean\"}],\"items\":false}",
    "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"t\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"u\":{\"type\":\"string\",\"format\":\"uuid\"}},\"required\":[\"d\",\"t\",\"u\"]}",
    "{\"type\":\"number\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":3}",
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},\"minItems\":2,\"maxItems\":4}",
    "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"null\"}}}]}",
    "{}",
    NULL,   /* json_object mode */
};

static void test_sampling(const ob_tokenizer_t *tok, const char *name, int seeds, int *n_done) {
    char err[256];
    ob_grammar_vocab_t *voc = ob_grammar_vocab_new(tok, err, sizeof err);
    CHECK(voc != NULL);
    if (!voc) return;
    int total = 0, done = 0;
    for (size_t i = 0; i < sizeof SAMPLE_SCHEMAS / sizeof SAMPLE_SCHEMAS[0]; i++) {
        samp_stats r = sample_schema(tok, voc, SAMPLE_SCHEMAS[i], seeds, 300);
        total += seeds;
        done += r.done;
        if (r.done < seeds / 4) fprintf(stderr, "  %s schema %zu: only %d of %d outputs finished\n", name, i, r.done, seeds);
        CHECK(r.done >= seeds / 4);
    }
    if (ob_test_verbose) printf("  sampling (%s): %d of %d outputs finished, all valid\n", name, done, total);
    *n_done += done;
    ob_grammar_vocab_free(voc);
}

/* ---- tokens in grammars, state API -------------------------------------------------------------------- */

static void test_tokens_and_api(const ob_tokenizer_t *tok) {
    char err[256];
    int32_t V = ob_tokenizer_n_vocab(tok);
    /* <[id]> matches one token whatever its bytes; !<[id]> any token but that one */
    char gb[256];
    snprintf(gb, sizeof gb, "root ::= \"a\" <[%d]> !<[%d]> \"z\"", 300, 301);
    ob_grammar_t *g = ob_grammar_parse_gbnf(gb, err, sizeof err);
    CHECK(g != NULL);
    ob_grammar_state_t *st = g ? ob_grammar_state_new(g, tok) : NULL;
    CHECK(st != NULL);
    float *l = malloc((size_t)V * sizeof *l);
    int32_t a = -1, z = -1;
    char b[64];
    for (int32_t t = 0; t < V; t++) {
        int n = ob_tokenizer_token_bytes(tok, t, b, sizeof b);
        if (n == 1 && b[0] == 'a' && a < 0) a = t;
        if (n == 1 && b[0] == 'z' && z < 0) z = t;
    }
    if (st && a >= 0 && z >= 0) {
        ob_grammar_state_accept(st, a);
        for (int32_t t = 0; t < V; t++) l[t] = 0;
        ob_grammar_state_filter(st, l, V);
        int n_ok = 0;
        for (int32_t t = 0; t < V; t++) n_ok += l[t] == 0;
        CHECK_EQ_INT(n_ok, 1);
        CHECK(l[300] == 0);
        ob_grammar_state_accept(st, 300);
        for (int32_t t = 0; t < V; t++) l[t] = 0;
        ob_grammar_state_filter(st, l, V);
        CHECK(l[301] != 0 && l[5] == 0 && l[a] == 0);
        ob_grammar_state_accept(st, 5);
        ob_grammar_state_accept(st, z);
        CHECK(ob_grammar_state_complete(st));
        CHECK(ob_grammar_state_done(st));
        CHECK(!ob_grammar_state_failed(st));
        /* a token the filter removes puts the state in failed, and then only EOG remains */
        ob_grammar_state_reset(st);
        ob_grammar_state_accept(st, z);
        CHECK(ob_grammar_state_failed(st));
        CHECK(ob_grammar_state_done(st));
        for (int32_t t = 0; t < V; t++) l[t] = 0;
        ob_grammar_state_filter(st, l, V);
        for (int32_t t = 0; t < V; t++) if ((l[t] == 0) != (ob_tokenizer_is_eog(tok, t) != 0)) { CHECK(0); break; }
        /* a longer logits row than the vocabulary: the extra entries are removed */
        ob_grammar_state_reset(st);
        float *big = calloc((size_t)V + 10, sizeof *big);
        ob_grammar_state_filter(st, big, V + 10);
        CHECK(isinf(big[V + 3]) && big[a] == 0);
        free(big);
    }
    ob_grammar_state_free(st);
    ob_grammar_free(g);
    snprintf(gb, sizeof gb, "root ::= <[%d]>", V + 5);
    g = ob_grammar_parse_gbnf(gb, err, sizeof err);
    CHECK(g != NULL);
    ob_grammar_vocab_t *voc = ob_grammar_vocab_new(tok, err, sizeof err);
    st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
    CHECK(st == NULL && strstr(err, "outside the vocabulary"));
    ob_grammar_state_free(st);
    ob_grammar_free(g);
    /* the grammar and vocabulary may be freed while a state uses them */
    g = ob_grammar_json_object();
    st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
    ob_grammar_free(g);
    ob_grammar_vocab_free(voc);
    CHECK(st && ob_grammar_state_accept_bytes(st, "{\"k\": [1, 2]", 12) == 0);
    CHECK(st && ob_grammar_state_accept_bytes(st, "}x", 2) == -1);   /* rejected: unchanged */
    CHECK(st && !ob_grammar_state_complete(st) && ob_grammar_state_accept_bytes(st, "}", 1) == 0);
    CHECK(st && ob_grammar_state_complete(st) && ob_grammar_state_done(st));
    if (st) {
        for (int32_t t = 0; t < V; t++) l[t] = 1;
        ob_grammar_state_filter(st, l, V);
        for (int32_t t = 0; t < V; t++) if ((l[t] == 1) != (ob_tokenizer_is_eog(tok, t) != 0)) { CHECK(0); break; }
    }
    ob_grammar_state_free(st);
    free(l);
}

/* ---- long outputs: the caches are flushed and rebuilt past their soft limits ------------------------ */

static void test_long_output(const ob_tokenizer_t *tok) {
    char err[256];
    /* every count of the repetition is its own state: 6000 tokens pass the state cache's
     * soft limit (2048) several times */
    ob_grammar_t *g = ob_grammar_parse_gbnf("root ::= \"[\" ([a-z] | \" \"){0,100000} \"]\"", err, sizeof err);
    CHECK(g != NULL);
    ob_grammar_state_t *st = g ? ob_grammar_state_new(g, tok) : NULL;
    CHECK(st != NULL);
    if (!st) { ob_grammar_free(g); return; }
    int32_t V = ob_tokenizer_n_vocab(tok);
    float *l = malloc((size_t)V * sizeof *l);
    int32_t open = -1, close = -1;
    char b[64];
    for (int32_t t = 0; t < V; t++) {
        int n = ob_tokenizer_token_bytes(tok, t, b, sizeof b);
        if (n == 1 && b[0] == '[') open = t;
        if (n == 1 && b[0] == ']') close = t;
    }
    CHECK(open >= 0 && close >= 0);
    ob_grammar_state_accept(st, open);
    int bad = 0, len = 0;
    rng_s = 5;
    for (int step = 0; step < 6000 && !bad; step++) {
        for (int32_t t = 0; t < V; t++) l[t] = 0;
        ob_grammar_state_filter(st, l, V);
        int32_t pick = -1, n_ok = 0;
        for (int32_t t = 0; t < V; t++) {
            if (l[t] != 0 || t == close || ob_tokenizer_is_eog(tok, t)) continue;
            int n = ob_tokenizer_token_bytes(tok, t, b, sizeof b);
            int letters = n > 0;
            for (int i = 0; i < n && i < (int)sizeof b; i++) letters &= (b[i] >= 'a' && b[i] <= 'z') || b[i] == ' ';
            if (!letters) { bad = 1; fprintf(stderr, "  long output: token %d allowed at step %d\n", t, step); break; }
            if (rnd() % (uint64_t)++n_ok == 0) pick = t;
        }
        if (pick < 0) { bad = 1; break; }
        len += ob_tokenizer_token_bytes(tok, pick, b, sizeof b);
        ob_grammar_state_accept(st, pick);
        if (ob_grammar_state_failed(st)) bad = 1;
    }
    CHECK(!bad);
    CHECK(len >= 6000);
    ob_grammar_state_accept(st, close);
    CHECK(ob_grammar_state_complete(st) && ob_grammar_state_done(st));
    ob_grammar_state_reset(st);
    CHECK(!ob_grammar_state_complete(st) && ob_grammar_state_accept_bytes(st, "[ab]", 4) == 0 && ob_grammar_state_complete(st));
    free(l);
    ob_grammar_state_free(st);
    ob_grammar_free(g);
}

/* ---- speed on a 150k vocabulary ---------------------------------------------------------------------- */

static void test_speed(void) {
    double t0 = cpu_s();
    ob_tokenizer_t *tok = synth_vocab(150000, 42);
    CHECK(tok != NULL);
    if (!tok) return;
    double t1 = cpu_s();
    char err[512];
    ob_grammar_vocab_t *voc = ob_grammar_vocab_new(tok, err, sizeof err);
    double t2 = cpu_s();
    CHECK(voc != NULL);
    ob_grammar_t *g = ob_grammar_from_json_schema(SAMPLE_SCHEMAS[0], err, sizeof err);
    CHECK(g != NULL);
    if (!voc || !g) { ob_tokenizer_free(tok); return; }
    int32_t V = ob_tokenizer_n_vocab(tok);
    float *l = malloc((size_t)V * sizeof *l);
    ob_grammar_state_t *st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
    double ts = cpu_s();
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    ob_grammar_state_filter(st, l, V);
    double t_start = cpu_s() - ts;
    ob_grammar_state_accept_bytes(st, "{\"name\": \"", 10);
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    ts = cpu_s();
    ob_grammar_state_filter(st, l, V);
    double t_cold = cpu_s() - ts;
    int n_ok = 0;
    for (int32_t i = 0; i < V; i++) n_ok += l[i] == 0;
    /* a fresh state with the same vocabulary: walks the trie again with warm nothing */
    ob_grammar_state_t *st2 = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
    ob_grammar_state_accept_bytes(st2, "{\"name\": \"", 10);
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    ts = cpu_s();
    ob_grammar_state_filter(st2, l, V);
    double t_cold2 = cpu_s() - ts;
    ob_grammar_state_free(st2);
    for (int32_t i = 0; i < V; i++) l[i] = 0;
    ts = cpu_s();
    for (int r = 0; r < 20; r++) ob_grammar_state_filter(st, l, V);
    double t_warm = (cpu_s() - ts) / 20;
    ob_grammar_state_free(st);
    /* random generation: average over all steps (cold and warm states alike) */
    ob_sampler_params sp = ob_sampler_default_params();
    sp.temp = 1.0f; sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0; sp.seed = 3;
    ob_sampler_t *smp = ob_sampler_new(&sp, V);
    double tf = 0, tmax = 0;
    int steps = 0, outputs = 0;
    rng_s = 99;
    for (int o = 0; o < 8; o++) {
        st = ob_grammar_state_new_vocab(g, voc, err, sizeof err);
        for (int s = 0; s < 150 && !ob_grammar_state_done(st); s++) {
            for (int32_t i = 0; i < V; i++) l[i] = (float)(rndf() * 8 - 4);
            ts = cpu_s();
            ob_grammar_state_filter(st, l, V);
            double dt = cpu_s() - ts;
            tf += dt;
            if (dt > tmax) tmax = dt;
            if (getenv("OB_GRAMMAR_SLOW") && dt > 0.003) fprintf(stderr, "  slow step: %.2f ms at step %d of output %d\n", dt * 1e3, s, o);
            steps++;
            int32_t t = ob_sampler_sample(smp, l);
            ob_grammar_state_accept(st, t);
            CHECK(!ob_grammar_state_failed(st));
            if (ob_tokenizer_is_eog(tok, t)) break;
        }
        outputs++;
        ob_grammar_state_free(st);
    }
    ob_sampler_free(smp);
    printf("  grammar speed, %d-token synthetic vocabulary (%d trie nodes): vocab index %.1f ms (tokenizer build %.0f ms)\n",
           V, voc->n_nodes, (t2 - t1) * 1e3, (t1 - t0) * 1e3);
    printf("  filter: start of object %.2f ms; inside a string: first %.2f ms (fresh state %.2f ms), cached %.3f ms "
           "(%d tokens allowed); random walk: %.3f ms/step average, %.2f ms worst over %d steps\n",
           t_start * 1e3, t_cold * 1e3, t_cold2 * 1e3, t_warm * 1e3, n_ok, tf / steps * 1e3, tmax * 1e3, steps);
    CHECK(n_ok > V / 2);
    free(l);
    ob_grammar_free(g);
    ob_grammar_vocab_free(voc);
    ob_tokenizer_free(tok);
}

OB_SUITE(grammar) {
    test_gbnf();
    int n_cases = 0;
    test_schema_cases(&n_cases);
    test_schema_errors();
    if (ob_test_verbose) printf("  %d schema acceptance cases\n", n_cases);

    /* the golden Qwen3 tokenizer (byte-level BPE, 320 tokens) */
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/grammar-qwen3.gguf", ob_test_tmpdir());
    char *argv[] = {"convert", "tests/golden/qwen3", "-o", path, "--type", "f32", NULL};
    CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 1;
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(path, &mp, &m, err, sizeof err), 0);
    int n_done = 0;
    if (m) {
        const ob_tokenizer_t *tok = ob_model_tokenizer(m);
        ob_grammar_vocab_t *voc = ob_grammar_vocab_new(tok, err, sizeof err);
        test_mask_consistency(tok, voc, SAMPLE_SCHEMAS[0], 4);
        ob_grammar_vocab_free(voc);
        test_tokens_and_api(tok);
        test_long_output(tok);
        test_sampling(tok, "qwen3 golden", 24, &n_done);
        ob_model_free(m);
    }
    remove(path);

    ob_tokenizer_t *syn = synth_vocab(3000, 7);
    CHECK(syn != NULL);
    if (syn) {
        ob_grammar_vocab_t *voc = ob_grammar_vocab_new(syn, err, sizeof err);
        test_mask_consistency(syn, voc, SAMPLE_SCHEMAS[2], 3);
        test_mask_consistency(syn, voc, SAMPLE_SCHEMAS[3], 3);
        ob_grammar_vocab_free(voc);
        test_sampling(syn, "synthetic", 24, &n_done);
        ob_tokenizer_free(syn);
    }
    test_speed();
}
