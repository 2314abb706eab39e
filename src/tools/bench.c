/* bench.c — `1bit bench`: prompt-processing and decode speed, measured like llama-bench.
 *
 * Owns: the test matrix (prompt sizes x generation sizes x thread counts), timing with a
 * warm-up run excluded, mean and standard deviation of tokens/s over repetitions, and the
 * Markdown / JSON / JSONL report.
 * Method (as llama-bench): ppN decodes N random tokens in batches of -b into an empty cache;
 * tgN decodes N tokens one at a time into an empty cache. Each repetition starts from an
 * empty cache; the first (warm-up) run of each test is not counted. -d D (llama-bench's depth)
 * fills the cache with D tokens first, untimed. -npl P (llama-batched-bench's parallel count)
 * makes tgN decode P sequences at once, one token of each a step, every token's logits asked
 * for, as the server's decode steps do; its rate counts all P sequences' tokens.
 * Does not own: the serving benchmark against a URL (`--url`, `bench plot`: bench_serve.c), to
 * which ob_cmd_bench hands the command line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onebit.h"
#include "tools/bench_serve.h"
#include "tools/tools.h"

#define MAX_LIST 16

typedef struct { int v[MAX_LIST]; int n; } int_list;

static int parse_list(const char *flag, const char *s, int_list *out) {
    out->n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 1000000 || out->n == MAX_LIST) {
            fprintf(stderr, "bench: option '%s': bad value list '%s'\n", flag, s);
            return -1;
        }
        out->v[out->n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') { fprintf(stderr, "bench: option '%s': bad value list\n", flag); return -1; }
    }
    return out->n ? 0 : -1;
}

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit bench -m FILE.gguf [options]\n"
            "  -m, --model FILE       GGUF model\n"
            "  -p, --n-prompt LIST    prompt sizes, comma-separated (default 512)\n"
            "  -n, --n-gen LIST       generation sizes (default 128)\n"
            "  -t, --threads LIST     thread counts (default: all cores)\n"
            "  -b, --batch-size N     prompt tokens per forward pass (default 512)\n"
            "  -d, --n-depth LIST     tokens already in the cache when a test starts (default 0; filled untimed)\n"
            "  -npl, --parallel LIST  sequences decoding together in tgN, one token each a step, every\n"
            "                         token's logits computed (default 1; the rate counts all of them)\n"
            "  -r, --repetitions N    timed runs per test (default 5; a warm-up as llama-bench's comes first:\n"
            "                         the whole prompt for ppN, one token for tgN)\n"
            "  -o, --output FMT       md (default), json (array) or jsonl (one object per line)\n"
            "  -ctk, --cache-type-k T KV cache type of K: f16 (default), f32, q8_0\n"
            "  -ctv, --cache-type-v T KV cache type of V: f16 (default), f32, q8_0\n"
            "  -dev, --device D       cpu | cuda | auto (default: cuda when this build has it and a GPU is\n"
            "                         present, else cpu)\n"
            "  -ngl N                 accepted for llama-bench compatibility and ignored (all layers run on\n"
            "                         --device's device)\n"
            "serving load: 1bit bench --url http://HOST:PORT/v1 [options] (1bit bench --url --help lists them)\n"
            "chart of result files: 1bit bench plot a.json [b.json ...] [-o chart.svg]\n");
    return 2;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Buffers of one ob_decode call of up to n_batch tokens. */
typedef struct {
    int32_t *tok, *pos, *seq;
    int8_t *want;
} batch_bufs;

/* n random tokens of sequence s at positions p0.. in batches of n_batch; 0 or -1. */
static int decode_run(ob_ctx_t *c, int n_vocab, int s, int p0, int n, int n_batch, batch_bufs *bb, uint64_t *rng) {
    char err[512];
    for (int i0 = 0; i0 < n; i0 += n_batch) {
        int cnt = n - i0 < n_batch ? n - i0 : n_batch;
        for (int k = 0; k < cnt; k++) {
            bb->tok[k] = (int32_t)(rng_next(rng) % (uint64_t)n_vocab);
            bb->pos[k] = p0 + i0 + k;
            bb->seq[k] = s;
        }
        ob_batch b = {cnt, bb->tok, bb->pos, bb->seq, NULL};
        if (ob_decode(c, &b, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return -1; }
    }
    return 0;
}

/* One timed run: each of the par sequences filled with depth tokens (untimed), then a prompt of
 * n_prompt tokens on sequence 0, then n_gen steps of one token of every sequence; returns
 * seconds, or -1 on error. */
static double run_once(ob_ctx_t *c, int n_vocab, int n_prompt, int n_gen, int n_batch, int depth, int par, batch_bufs *bb,
                       uint64_t *rng) {
    char err[512];
    for (int s = 0; s < par; s++) {
        ob_kv_seq_truncate(c, s, 0);
        if (decode_run(c, n_vocab, s, 0, depth, n_batch, bb, rng)) return -1;
    }
    int64_t t0 = ob_time_us();
    if (decode_run(c, n_vocab, 0, depth, n_prompt, n_batch, bb, rng)) return -1;
    for (int s = 0; s < par; s++) bb->want[s] = 1;
    for (int i = 0; i < n_gen; i++) {
        for (int s = 0; s < par; s++) {
            bb->tok[s] = (int32_t)(rng_next(rng) % (uint64_t)n_vocab);
            bb->pos[s] = depth + n_prompt + i;
            bb->seq[s] = s;
        }
        ob_batch b = {par, bb->tok, bb->pos, bb->seq, bb->want};
        if (ob_decode(c, &b, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return -1; }
    }
    return (ob_time_us() - t0) / 1e6;
}

typedef struct {
    int n_prompt, n_gen, threads, depth, par;
    double avg, sd;
    double *samples;
    int n_samples;
} result;

int ob_cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "plot")) return ob_bench_plot_cmd(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--url")) return ob_bench_serve_cmd(argc, argv);
    const char *model_path = NULL, *fmt = "md", *device = "auto";
    int_list lp = {{512}, 1}, ln = {{128}, 1}, lt = {{0}, 1}, ld = {{0}, 1}, lpar = {{1}, 1};
    int n_batch = 512, reps = 5, type_k = OB_KV_F16, type_v = OB_KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model_path = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) && has) { if (parse_list(a, argv[++i], &lp)) return 2; }
        else if ((!strcmp(a, "-n") || !strcmp(a, "--n-gen")) && has) { if (parse_list(a, argv[++i], &ln)) return 2; }
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) { if (parse_list(a, argv[++i], &lt)) return 2; }
        else if ((!strcmp(a, "-d") || !strcmp(a, "--n-depth")) && has) { if (parse_list(a, argv[++i], &ld)) return 2; }
        else if ((!strcmp(a, "-npl") || !strcmp(a, "--parallel")) && has) { if (parse_list(a, argv[++i], &lpar)) return 2; }
        else if ((!strcmp(a, "-b") || !strcmp(a, "--batch-size")) && has) n_batch = atoi(argv[++i]);
        else if ((!strcmp(a, "-r") || !strcmp(a, "--repetitions")) && has) reps = atoi(argv[++i]);
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has) fmt = argv[++i];
        else if ((!strcmp(a, "--device") || !strcmp(a, "-dev")) && has) device = argv[++i];
        else if ((!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) && has) i++;
        else if ((!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v")) && has) {
            int kv = ob_kv_type_from_name(argv[++i]);
            if (kv < 0) { fprintf(stderr, "bench: %s '%s': not a KV cache type (f16, f32, q8_0)\n", a, argv[i]); return 2; }
            if (a[3] == 'k' || !strcmp(a, "--cache-type-k")) type_k = kv;
            else type_v = kv;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        else { fprintf(stderr, "bench: unknown or incomplete option '%s'\n", a); return usage(); }
    }
    if (!model_path) { fprintf(stderr, "bench: no model given (-m FILE.gguf)\n"); return usage(); }
    if (n_batch < 1 || n_batch > 65536 || reps < 1 || reps > 1000) { fprintf(stderr, "bench: -b or -r out of range\n"); return 2; }
    for (int i = 0; i < lpar.n; i++)
        if (lpar.v[i] < 1 || lpar.v[i] > n_batch) {
            fprintf(stderr, "bench: -npl %d: between 1 and the batch size (-b %d)\n", lpar.v[i], n_batch);
            return 2;
        }
    if (strcmp(fmt, "md") && strcmp(fmt, "json") && strcmp(fmt, "jsonl")) { fprintf(stderr, "bench: -o must be md, json or jsonl\n"); return 2; }

    /* Tests as llama-bench lists them: for each thread count and depth, every prompt size alone,
     * then every generation size alone (at each parallel count). */
    static result res[MAX_LIST * MAX_LIST * MAX_LIST * 2];
    int n_res = 0;
    for (int t = 0; t < lt.n; t++)
        for (int d = 0; d < ld.n; d++) {
            for (int i = 0; i < lp.n; i++)
                if (lp.v[i] > 0) res[n_res++] = (result){lp.v[i], 0, lt.v[t], ld.v[d], 1, 0, 0, NULL, 0};
            for (int i = 0; i < ln.n; i++)
                for (int k = 0; k < lpar.n && ln.v[i] > 0; k++)
                    res[n_res++] = (result){0, ln.v[i], lt.v[t], ld.v[d], lpar.v[k], 0, 0, NULL, 0};
        }
    char err[1024];
    int rc = 0;
    const ob_model_info *info = NULL;
    for (int r = 0; r < n_res && rc == 0; r++) {
        result *R = &res[r];
        ob_model_params mp = ob_model_default_params();
        mp.device = device;
        mp.n_threads = R->threads;
        ob_model_t *m = NULL;
        if (ob_model_load(model_path, &mp, &m, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); return 1; }
        info = ob_model_get_info(m);
        static ob_model_info keep; /* outlives the model: its strings are copied */
        static char keep_name[256], keep_arch[64], keep_type[32];
        keep = *info;
        snprintf(keep_name, sizeof keep_name, "%s", info->name ? info->name : "");
        snprintf(keep_arch, sizeof keep_arch, "%s", info->arch ? info->arch : "");
        snprintf(keep_type, sizeof keep_type, "%s", info->type_name ? info->type_name : "");
        keep.name = keep_name, keep.arch = keep_arch, keep.type_name = keep_type;
        info = &keep;
        ob_ctx_params cp = ob_ctx_default_params();
        cp.n_ctx = R->depth + R->n_prompt + R->n_gen + 1;
        cp.n_seq = R->par;
        cp.n_batch = n_batch;
        cp.type_k = type_k;
        cp.type_v = type_v;
        ob_ctx_t *c = NULL;
        if (ob_ctx_new(m, &cp, &c, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); ob_model_free(m); return 1; }
        batch_bufs bb = {malloc((size_t)n_batch * sizeof(int32_t)), malloc((size_t)n_batch * sizeof(int32_t)),
                         malloc((size_t)n_batch * sizeof(int32_t)), malloc((size_t)n_batch)};
        uint64_t rng = 0x9E3779B97F4A7C15ull;
        R->samples = calloc((size_t)reps, sizeof(double));
        if (!bb.tok || !bb.pos || !bb.seq || !bb.want || !R->samples) { fprintf(stderr, "bench: out of memory\n"); rc = 1; }
        int n_tok = R->n_prompt + R->n_gen * R->par;
        for (int k = -1; k < reps && rc == 0; k++) { /* k = -1: warm-up, as llama-bench: the whole prompt, or one step */
            double s = run_once(c, info->n_vocab, R->n_prompt, k < 0 && R->n_gen ? 1 : R->n_gen, n_batch, R->depth, R->par, &bb, &rng);
            if (s < 0) { rc = 1; break; }
            if (k >= 0) R->samples[R->n_samples++] = n_tok / s;
        }
        double sum = 0, sq = 0;
        for (int k = 0; k < R->n_samples; k++) sum += R->samples[k];
        R->avg = R->n_samples ? sum / R->n_samples : 0;
        for (int k = 0; k < R->n_samples; k++) sq += (R->samples[k] - R->avg) * (R->samples[k] - R->avg);
        R->sd = R->n_samples > 1 ? sqrt(sq / (R->n_samples - 1)) : 0;
        if (R->threads <= 0) R->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
        free(bb.tok);
        free(bb.pos);
        free(bb.seq);
        free(bb.want);
        ob_ctx_free(c);
        ob_model_free(m);
        if (!strcmp(fmt, "md")) {
            if (r == 0) {
                printf("| model | size | params | backend | threads | test | t/s |\n");
                printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
            }
            char test[64];
            int len = R->n_prompt ? snprintf(test, sizeof test, "pp%d", R->n_prompt) : snprintf(test, sizeof test, "tg%d", R->n_gen);
            if (R->par > 1) len += snprintf(test + len, sizeof test - (size_t)len, " x%d", R->par);
            if (R->depth) snprintf(test + len, sizeof test - (size_t)len, " @ d%d", R->depth);
            printf("| %s %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f |\n", info->arch, info->type_name,
                   info->size_bytes / 1073741824.0, info->n_params / 1e9, info->device, R->threads, test, R->avg, R->sd);
        } else {
            const char *sep = !strcmp(fmt, "json") ? (r == 0 ? "[\n  " : ",\n  ") : "";
            printf("%s{\"model\": \"%s\", \"model_filename\": \"%s\", \"arch\": \"%s\", \"type\": \"%s\", "
                   "\"model_size\": %llu, \"model_n_params\": %llu, \"backend\": \"%s\", \"n_batch\": %d, "
                   "\"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_parallel\": %d, \"threads\": %d, "
                   "\"repetitions\": %d, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ts\": [",
                   sep, info->name, model_path, info->arch, info->type_name, (unsigned long long)info->size_bytes,
                   (unsigned long long)info->n_params, info->device, n_batch, R->n_prompt, R->n_gen, R->depth, R->par, R->threads,
                   R->n_samples, R->avg, R->sd);
            for (int k = 0; k < R->n_samples; k++) printf("%s%.6f", k ? ", " : "", R->samples[k]);
            printf("]}%s", !strcmp(fmt, "jsonl") ? "\n" : "");
            if (!strcmp(fmt, "json") && r == n_res - 1) printf("\n]\n");
        }
        fflush(stdout);
        free(R->samples);
    }
    return rc;
}
