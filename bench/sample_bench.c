/* sample_bench.c — how long the server's sampling of one decode step takes, serial and spread
 * over a thread pool (the scheduler's sampling workers, engine/scheduler.c).
 *
 * Owns: R requests' samplers with llama.cpp's default chain (temp 0.8, top_k 40, top_p 0.95,
 * min_p 0.05; seeded), R random logits rows of V values (a 128K vocabulary by default); each
 * step samples and accepts one token per row. Reports the minimum over reps of a step's time
 * (other processes can only make a run slower), serial and on T threads, and checks that both
 * choose the same tokens (each request's sampler is its own).
 *
 *   make build/sample_bench && build/sample_bench [-r ROWS] [-v VOCAB] [-t THREADS] [-n REPS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onebit.h"
#include "util/threadpool.h"

typedef struct {
    ob_sampler_t **smp;
    const float *logits;
    int32_t *tok;
    int rows, vocab;
} job;

static void run_rows(void *ctx, int ith, int nth) {
    job *j = ctx;
    for (int i = ith; i < j->rows; i += nth) {
        j->tok[i] = ob_sampler_sample(j->smp[i], j->logits + (size_t)i * j->vocab);
        ob_sampler_accept(j->smp[i], j->tok[i]);
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The minimum step time over reps (fresh samplers of the same seeds each time: the same tokens). */
static double measure(ob_pool *pool, int rows, int vocab, const float *logits, int reps, int32_t *tok) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        ob_sampler_t **smp = malloc(sizeof *smp * (size_t)rows);
        for (int i = 0; i < rows; i++) {
            ob_sampler_params p = ob_sampler_default_params();
            p.seed = 1000 + (uint64_t)i;
            smp[i] = ob_sampler_new(&p, vocab);
        }
        job j = {smp, logits, tok, rows, vocab};
        const double t0 = now_ms();
        ob_pool_run(pool, run_rows, &j);
        const double t = now_ms() - t0;
        if (t < best) best = t;
        for (int i = 0; i < rows; i++) ob_sampler_free(smp[i]);
        free(smp);
    }
    return best;
}

int main(int argc, char **argv) {
    int rows = 64, vocab = 128256, threads = 2, reps = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-v")) vocab = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) reps = atoi(argv[i + 1]);
        else { fprintf(stderr, "usage: %s [-r ROWS] [-v VOCAB] [-t THREADS] [-n REPS]\n", argv[0]); return 2; }
    }
    if (rows < 1 || vocab < 2 || threads < 1 || reps < 1) { fprintf(stderr, "sample_bench: bad argument\n"); return 2; }
    float *logits = malloc(sizeof(float) * (size_t)rows * vocab);
    int32_t *a = malloc(sizeof(int32_t) * (size_t)rows), *b = malloc(sizeof(int32_t) * (size_t)rows);
    if (!logits || !a || !b) { fprintf(stderr, "sample_bench: out of memory\n"); return 1; }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)rows * vocab; i++) { /* logits of a spread like a model's: N(0, 3) roughly */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        logits[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 12.0 - 6.0);
    }
    ob_pool *pool = ob_pool_new(threads);
    const double serial = measure(NULL, rows, vocab, logits, reps, a);
    const double par = measure(pool, rows, vocab, logits, reps, b);
    const int same = !memcmp(a, b, sizeof(int32_t) * (size_t)rows);
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the tokens: compare builds */
    for (int i = 0; i < rows; i++) h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
    printf("rows %d vocab %d: serial %.3f ms (%.4f ms a row), %d threads %.3f ms (%.2fx), tokens %s (hash %016llx)\n", rows,
           vocab, serial, serial / rows, ob_pool_size(pool), par, serial / par, same ? "equal" : "DIFFERENT", (unsigned long long)h);
    ob_pool_free(pool);
    free(logits);
    free(a);
    free(b);
    return same ? 0 : 1;
}
