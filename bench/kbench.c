/* kbench.c — microbenchmark of the CPU matmul kernels, robust to a loaded machine.
 *
 * Owns: timing one matmul shape through the fast driver (cpu_matmul.c) or the reference path,
 * for A/B decisions between kernels. Each measurement is the minimum over many short runs:
 * other processes can only make a run slower, so the minimum converges to the unloaded time
 * when single runs are shorter than a scheduler time slice. Reports the time per call, the
 * weight bytes streamed per second (decode is bound by this) and multiply-adds per second.
 *
 *   make build/kbench   (or: cc -O2 -Isrc -Iinclude bench/kbench.c build/lib1bit.a -lm -pthread)
 *   build/kbench TYPE N_IN N_OUT N_TOKENS [-t threads] [-r reps] [-k kernels] [-ref]
 *   e.g. build/kbench tq2_0 2560 6912 1      build/kbench q4_0 2048 8192 64 -t 2
 * -k scalar|avx2|avx-vnni|avx512|avx512-amx forces a table (default: the best this CPU runs).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/kernels.h"
#include "format/quant.h"
#include "format/quant_tensor.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE N_IN N_OUT N_TOKENS [-t threads] [-r reps] [-k table]\n", argv[0]);
        return 2;
    }
    int type = ob_type_from_name(argv[1]);
    int64_t n_in = atoll(argv[2]), n_out = atoll(argv[3]);
    int n = atoi(argv[4]), threads = 1, reps = 200;
    const char *kname = NULL;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kname = argv[++i];
    }
    size_t total = ob_type_tensor_size(type, n_in, n_out);
    if (type < 0 || !total || n < 1 || reps < 1 || reps > 100000) {
        fprintf(stderr, "kbench: bad type or shape\n");
        return 2;
    }
    const ob_kernels *kt = NULL;
    if (kname) {
        const ob_kernels *all[] = {ob_kernels_scalar(), ob_kernels_avx2(), ob_kernels_avxvnni(), ob_kernels_avx512(),
                                   ob_kernels_amx()};
        for (int i = 0; i < 5; i++)
            if (all[i] && !strcmp(all[i]->name, kname)) kt = all[i];
        if (!kt) { fprintf(stderr, "kbench: table %s not available here\n", kname); return 2; }
    }
    float *src = malloc((size_t)(n_in * n_out) * sizeof(float));
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < n_in * n_out; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        src[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    void *data = NULL;
    if (posix_memalign(&data, 64, total + 64) || ob_tensor_quantize(type, src, data, n_in, n_out)) {
        fprintf(stderr, "kbench: cannot quantize to %s\n", argv[1]);
        return 1;
    }
    free(src);
    ob_weight w = {data, type, n_in, n_out, ob_type_row_size(type, n_in), ob_tensor_scale(type, data, n_in, n_out)};
    float *x = malloc((size_t)n * n_in * sizeof(float)), *y = malloc((size_t)n * n_out * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n * n_in; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    ob_pool *pool = ob_pool_new(threads);
    ob_cpu_mm *mm = ob_cpu_mm_new(ob_pool_size(pool), kt);
    if (!ob_cpu_mm_supports(mm, type)) { fprintf(stderr, "kbench: no kernel for %s\n", argv[1]); return 1; }
    double *t = malloc((size_t)reps * sizeof(double));
    ob_cpu_mm_run(mm, pool, &w, x, y, n); /* warm-up: scratch, page faults */
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        ob_cpu_mm_run(mm, pool, &w, x, y, n);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    double best = t[0], med = t[reps / 2];
    printf("%s %s n_in %lld n_out %lld tokens %d threads %d: best %.1f us (median %.1f) | %.2f GB/s weights | %.1f GMAC/s\n",
           ob_cpu_mm_kernels(mm)->name, argv[1], (long long)n_in, (long long)n_out, n, ob_pool_size(pool), best * 1e6,
           med * 1e6, total / best / 1e9, (double)n_in * n_out * n / best / 1e9);
    ob_cpu_mm_free(mm);
    ob_pool_free(pool);
    return 0;
}
