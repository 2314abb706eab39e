/* logits_common.c — what llama_logits.c and ob_logits.c share; see logits_common.h. */
#include "logits_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lc_option(lc_args *a, int argc, char **argv, int *i) {
    const char *s = argv[*i];
    if (*i + 1 >= argc) return 0;
    if (!strcmp(s, "-t")) a->tok_path = argv[++*i];
    else if (!strcmp(s, "--ids")) a->ids_arg = argv[++*i];
    else if (!strcmp(s, "-o")) a->out_path = argv[++*i];
    else if (!strcmp(s, "--threads")) a->n_threads = atoi(argv[++*i]);
    else return 0;
    return 1;
}

int lc_positional(lc_args *a, const char *arg) {
    if (arg[0] == '-') { fprintf(stderr, "%s: unknown or incomplete option '%s'\n", a->prog, arg); return -1; }
    if (a->model_path) { fprintf(stderr, "%s: unexpected argument '%s'\n", a->prog, arg); return -1; }
    a->model_path = arg;
    return 0;
}

/* Reads every integer of the array after "tokens" in a small JSON file. Minimal on purpose:
 * it accepts {"tokens": [1, 2, 3]} and anything else with that key and a flat int array. */
static int read_tokens(const char *prog, const char *path, int32_t **out, int *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno)); return -1; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = 2 * cap + 8192;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); fprintf(stderr, "%s: out of memory\n", prog); return -1; }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096) break;
    }
    fclose(f);
    buf[len] = 0;
    char *p = strstr(buf, "\"tokens\"");
    p = p ? strchr(p, '[') : NULL;
    if (!p) { fprintf(stderr, "%s: %s: no \"tokens\": [...] array\n", prog, path); free(buf); return -1; }
    p++;
    int n = 0, ncap = 0;
    int32_t *ids = NULL;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') p++;
        if (*p == ']') break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff) {
            fprintf(stderr, "%s: %s: bad token id near '%.20s'\n", prog, path, p);
            free(ids); free(buf);
            return -1;
        }
        if (n == ncap) {
            ncap = ncap ? 2 * ncap : 64;
            int32_t *ni = realloc(ids, (size_t)ncap * sizeof *ids);
            if (!ni) { free(ids); free(buf); fprintf(stderr, "%s: out of memory\n", prog); return -1; }
            ids = ni;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(buf);
    if (n == 0) { fprintf(stderr, "%s: %s: the token list is empty\n", prog, path); free(ids); return -1; }
    *out = ids;
    *n_out = n;
    return 0;
}

/* "1,2,3" -> ids. */
static int parse_ids(const char *prog, const char *s, int32_t **out, int *n_out) {
    int n = 1;
    for (const char *c = s; *c; c++) n += *c == ',';
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
            fprintf(stderr, "%s: --ids: bad token id near '%s'\n", prog, p);
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) { fprintf(stderr, "%s: --ids: empty list\n", prog); free(ids); return -1; }
    *out = ids;
    *n_out = k;
    return 0;
}

int lc_load_tokens(const lc_args *a, int32_t **out, int *n_out) {
    return a->tok_path ? read_tokens(a->prog, a->tok_path, out, n_out) : parse_ids(a->prog, a->ids_arg, out, n_out);
}

int lc_write_logits(const char *prog, const char *path, int n_tokens, int n_vocab,
                    const float *(*row)(void *ud, int i), void *ud) {
    FILE *f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno)); return 1; }
    for (int i = 0; i < n_tokens; i++) {
        const float *r = row(ud, i);
        if (!r) { fprintf(stderr, "%s: no logits for position %d\n", prog, i); fclose(f); return 1; }
        if (fwrite(r, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
            fprintf(stderr, "%s: %s: write failed\n", prog, path);
            fclose(f);
            return 1;
        }
    }
    if (fclose(f) != 0) { fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno)); return 1; }
    return 0;
}
