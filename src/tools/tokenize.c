/* tokenize.c — `1bit tokenize`: the token ids of a text, or the text of ids.
 *
 * Owns: option parsing, reading the input (-p, --file, or JSON lines with --jsonl), printing ids
 * as a JSON array (decoded text as-is, or as JSON strings in --jsonl mode), and --bench (encode
 * speed on one thread). Everything else is the engine API (onebit.h).
 * Does not own: tokenizing (text/).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onebit.h"
#include "tools/tools.h"

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit tokenize (-m FILE.gguf | --tokenizer tokenizer.json) (-p TEXT | --file F | --jsonl F) [options]\n"
            "  -m, --model FILE       a GGUF file (its tokenizer.ggml.* keys; weights are not loaded)\n"
            "  --tokenizer FILE       a Hugging Face tokenizer.json (or a GGUF file)\n"
            "  -p, --prompt TEXT      the text (with --decode: a JSON array of ids)\n"
            "  --file F               read the text (or the ids) from a file\n"
            "  --jsonl F              many inputs: one JSON string (or id array) per line, one JSON\n"
            "                         result per line on stdout ('-' reads stdin)\n"
            "  --no-special           do not add the special tokens the tokenizer puts around a text\n"
            "                         (BOS, EOS, [CLS]/[SEP]), as Hugging Face's add_special_tokens=false\n"
            "  --no-parse-special     treat special tokens' text as plain text (split_special_tokens)\n"
            "  --decode               ids -> text\n"
            "  --skip-special         with --decode: leave special tokens out\n"
            "  --bench N              encode each sample (a --file line, a --jsonl string) on one thread,\n"
            "                         N times over; report the best pass (thread CPU time) as JSON\n");
    return 2;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; }
            b = nb;
        }
    }
    if (f != stdin) fclose(f);
    if (b) { b[n < cap ? n : cap - 1] = 0; *len = n; }
    return b;
}

/* ids of text, grown as needed; NULL on failure */
static int32_t *encode(const ob_tokenizer_t *t, const char *s, size_t n, int add, int parse, int *count) {
    int cap = 256;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return NULL;
    int k = ob_tokenizer_encode(t, s, n, add, parse, ids, cap);
    if (k > cap) {
        int32_t *ni = realloc(ids, (size_t)k * sizeof *ids);
        if (!ni) { free(ids); return NULL; }
        ids = ni;
        k = ob_tokenizer_encode(t, s, n, add, parse, ids, k);
    }
    if (k < 0) { free(ids); return NULL; }
    *count = k;
    return ids;
}

static void print_ids(const int32_t *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    puts("]");
}

/* A JSON array of ids -> ids; NULL (with a message) when it is not one. */
static int32_t *parse_ids(json_t *j, const char *what, int *n) {
    if (!json_is_array(j)) { fprintf(stderr, "tokenize: %s: expected a JSON array of token ids\n", what); return NULL; }
    size_t k = json_array_size(j);
    int32_t *ids = malloc((k + 1) * sizeof *ids);
    if (!ids) return NULL;
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(j, i);
        if (!json_is_integer(x) || json_integer_value(x) < INT32_MIN || json_integer_value(x) > INT32_MAX) {
            fprintf(stderr, "tokenize: %s: element %zu is not a token id\n", what, i);
            free(ids);
            return NULL;
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    *n = (int)k;
    return ids;
}

static char *decode(const ob_tokenizer_t *t, const int32_t *ids, int n, int skip, int *len) {
    int k = ob_tokenizer_decode(t, ids, n, skip, NULL, 0);
    char *s = k >= 0 ? malloc((size_t)k + 1) : NULL;
    if (!s) return NULL;
    ob_tokenizer_decode(t, ids, n, skip, s, k);
    s[k] = 0;
    *len = k;
    return s;
}

static int run_jsonl(const ob_tokenizer_t *t, const char *path, int dec, int add, int parse, int skip) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) { fprintf(stderr, "tokenize: %s: cannot open\n", path); return 1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long no = 0;
    int rc = 0;
    while ((got = getline(&line, &cap, f)) > 0 && rc == 0) {
        no++;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        char what[64];
        snprintf(what, sizeof what, "line %ld", no);
        if (!j) { fprintf(stderr, "tokenize: %s: line %ld: %s\n", path, no, je.text); rc = 1; break; }
        if (dec) {
            int n = 0, len = 0;
            int32_t *ids = parse_ids(j, what, &n);
            char *s = ids ? decode(t, ids, n, skip, &len) : NULL;
            json_t *o = s ? json_stringn(s, (size_t)len) : NULL;
            char *d = o ? json_dumps(o, JSON_ENCODE_ANY) : NULL;
            if (d) puts(d);
            else rc = 1;
            free(d); json_decref(o); free(s); free(ids);
        } else if (!json_is_string(j)) {
            fprintf(stderr, "tokenize: %s: %s: expected a JSON string\n", path, what);
            rc = 1;
        } else {
            int n = 0;
            int32_t *ids = encode(t, json_string_value(j), json_string_length(j), add, parse, &n);
            if (ids) print_ids(ids, n);
            else { fprintf(stderr, "tokenize: %s: %s: encoding failed\n", path, what); rc = 1; }
            free(ids);
        }
        json_decref(j);
    }
    free(line);
    if (f != stdin) fclose(f);
    fflush(stdout);
    return rc;
}

/* --bench: samples are the lines of --file, or the strings of --jsonl; each is encoded on its
 * own (as a server sees prompts), reps times, on this thread; the best rep is reported, in CPU
 * time of this thread (what a shared machine's scheduler does to the wall clock is left out)
 * and in wall time. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { const char *s; size_t n; } bsample;

static int bench(const ob_tokenizer_t *t, const bsample *smp, size_t ns, int reps, int add, int parse) {
    size_t cap = 1 << 16;
    int32_t *ids = malloc(sizeof *ids * cap);
    if (!ids) return 1;
    double best = 1e30, best_wall = 1e30;
    long tokens = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < ns; i++) bytes += smp[i].n;
    for (int r = 0; r < reps; r++) {
        tokens = 0;
        int64_t t0 = ob_time_us();
        double c0 = cpu_s();
        for (size_t i = 0; i < ns; i++) {
            int k = ob_tokenizer_encode(t, smp[i].s, smp[i].n, add, parse, ids, (int)cap);
            if (k < 0) { fprintf(stderr, "tokenize: --bench: encoding failed\n"); free(ids); return 1; }
            if ((size_t)k > cap) {   /* grow and redo, outside the timing that matters little */
                int32_t *ni = realloc(ids, sizeof *ids * (size_t)k);
                if (!ni) { free(ids); return 1; }
                ids = ni;
                cap = (size_t)k;
            }
            tokens += k;
        }
        double sec = cpu_s() - c0, wall = (double)(ob_time_us() - t0) / 1e6;
        if (sec < best) best = sec;
        if (wall < best_wall) best_wall = wall;
    }
    printf("{\"samples\": %zu, \"bytes\": %zu, \"tokens\": %ld, \"reps\": %d, \"best_cpu_seconds\": %.4f, "
           "\"best_wall_seconds\": %.4f, \"MB_per_s\": %.3f, \"tokens_per_s\": %.0f}\n", ns, bytes, tokens, reps, best,
           best_wall, (double)bytes / 1e6 / best, tokens / best);
    free(ids);
    return 0;
}

/* The strings of a JSON-lines file, for --bench (kept in the returned array of json_t). */
static json_t *read_jsonl(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (json_is_string(j)) json_array_append_new(arr, j);
        else json_decref(j);
    }
    free(line);
    if (f != stdin) fclose(f);
    return arr;
}

int ob_cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *prompt = NULL, *file = NULL, *jsonl = NULL;
    int add = 1, parse = 1, dec = 0, skip = 0, reps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer")) && i + 1 < argc) path = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(a, "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--jsonl") && i + 1 < argc) jsonl = argv[++i];
        else if (!strcmp(a, "--no-special")) add = 0;
        else if (!strcmp(a, "--no-parse-special")) parse = 0;
        else if (!strcmp(a, "--decode")) dec = 1;
        else if (!strcmp(a, "--skip-special")) skip = 1;
        else if (!strcmp(a, "--bench") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else { fprintf(stderr, "tokenize: unknown or incomplete option '%s'\n", a); return usage(); }
    }
    if (!path) { fprintf(stderr, "tokenize: give -m FILE.gguf or --tokenizer tokenizer.json\n"); return usage(); }
    if (!!prompt + !!file + !!jsonl != 1) { fprintf(stderr, "tokenize: give exactly one of -p, --file, --jsonl\n"); return usage(); }
    if (reps < 0 || (reps && !file && !jsonl)) { fprintf(stderr, "tokenize: --bench N needs --file or --jsonl, and N >= 1\n"); return 2; }
    char err[512];
    ob_tokenizer_t *t = NULL;
    if (ob_tokenizer_load(path, &t, err, sizeof err) != 0) { fprintf(stderr, "tokenize: %s\n", err); return 1; }
    int rc = 0;
    if (reps && jsonl) {
        json_t *arr = read_jsonl(jsonl);
        size_t ns = json_array_size(arr);
        bsample *smp = calloc(ns + 1, sizeof *smp);
        for (size_t i = 0; smp && i < ns; i++) {
            smp[i].s = json_string_value(json_array_get(arr, i));
            smp[i].n = json_string_length(json_array_get(arr, i));
        }
        rc = arr && smp ? bench(t, smp, ns, reps, add, parse) : 1;
        free(smp);
        json_decref(arr);
    } else if (jsonl) {
        rc = run_jsonl(t, jsonl, dec, add, parse, skip);
    } else {
        size_t len = prompt ? strlen(prompt) : 0;
        char *text = prompt ? NULL : read_all(file, &len);
        if (!prompt && !text) { fprintf(stderr, "tokenize: %s: cannot read\n", file); ob_tokenizer_free(t); return 1; }
        const char *s = prompt ? prompt : text;
        if (reps) {
            size_t ns = 0;
            bsample *smp = malloc(sizeof *smp * (len / 1 + 2));
            for (size_t i = 0; smp && i <= len;) {
                size_t e = i;
                while (e < len && s[e] != '\n') e++;
                smp[ns].s = s + i;
                smp[ns++].n = e - i;
                i = e + 1;
            }
            rc = smp ? bench(t, smp, ns, reps, add, parse) : 1;
            free(smp);
        } else if (dec) {
            json_error_t je;
            json_t *j = json_loadb(s, len, JSON_DECODE_ANY, &je);
            int n = 0, dl = 0;
            int32_t *ids = j ? parse_ids(j, prompt ? "-p" : file, &n) : NULL;
            if (!j) fprintf(stderr, "tokenize: %s: %s\n", prompt ? "-p" : file, je.text);
            char *out = ids ? decode(t, ids, n, skip, &dl) : NULL;
            if (out) { fwrite(out, 1, (size_t)dl, stdout); putchar('\n'); }
            else rc = 1;
            free(out); free(ids); json_decref(j);
        } else {
            int n = 0;
            int32_t *ids = encode(t, s, len, add, parse, &n);
            if (ids) print_ids(ids, n);
            else { fprintf(stderr, "tokenize: encoding failed\n"); rc = 1; }
            free(ids);
        }
        free(text);
    }
    ob_tokenizer_free(t);
    return rc;
}
