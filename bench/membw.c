/* membw.c — this machine's memory read bandwidth, for the decode roofline of docs/bench.md.
 *
 * Owns: one number per (buffer size, thread count): bytes read per second when every thread
 * streams its own contiguous share of one buffer, summing it with the widest loads the CPU has
 * (the sum keeps the compiler from dropping the reads). Decode reads every weight once per
 * token, so "model bytes per token / this bandwidth" is the fastest a token can be produced.
 * The buffer is touched once before timing (pages mapped, as a model's weights are after the
 * first token) and each (size, threads) pair is timed REPS times; the best run is reported
 * (other load on the machine can only make a run slower), with the median beside it.
 *
 *   cc -O2 -pthread -o build/membw bench/membw.c
 *   build/membw [-s MiB[,MiB...]] [-t threads[,threads...]] [-r reps]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_add_epi64(a0);
}
#endif

static uint64_t sum_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) { a ^= q[i]; b ^= q[i + 1]; }
    return a ^ b;
}

static uint64_t (*sum_fn)(const uint8_t *, size_t) = sum_plain;
static const char *sum_name = "plain C";

typedef struct {
    const uint8_t *p;
    size_t n;
    pthread_barrier_t *bar;
    double t0, t1;
    uint64_t sink;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *run(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now();
    j->sink = sum_fn(j->p, j->n);
    j->t1 = now();
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One timed pass of nt threads over size bytes: bytes / (last finish - first start). */
static double pass(const uint8_t *buf, size_t size, int nt, uint64_t *sink) {
    pthread_t th[256];
    job jobs[256];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    size_t per = (size / (size_t)nt) & ~(size_t)255;
    for (int i = 0; i < nt; i++) {
        jobs[i] = (job){buf + per * (size_t)i, per, &bar, 0, 0, 0};
        if (i) pthread_create(&th[i], NULL, run, &jobs[i]);
    }
    run(&jobs[0]);
    for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    double t0 = jobs[0].t0, t1 = jobs[0].t1;
    for (int i = 0; i < nt; i++) {
        if (jobs[i].t0 < t0) t0 = jobs[i].t0;
        if (jobs[i].t1 > t1) t1 = jobs[i].t1;
        *sink ^= jobs[i].sink;
    }
    return (double)per * nt / (t1 - t0);
}

static int parse_list(const char *s, long *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || v <= 0) return -1;
        out[n++] = v;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    long sizes[16] = {64, 256, 1024, 2048}, threads[16] = {1, 2};
    int ns = 4, nt = 2, reps = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) ns = parse_list(argv[++i], sizes, 16);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) nt = parse_list(argv[++i], threads, 16);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-s MiB[,MiB...]] [-t threads[,threads...]] [-r reps]\n", argv[0]);
            return 2;
        }
    }
    if (ns < 1 || nt < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "membw: bad -s, -t or -r\n");
        return 2;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) sum_fn = sum_avx512, sum_name = "AVX-512 loads";
    else if (__builtin_cpu_supports("avx2")) sum_fn = sum_avx2, sum_name = "AVX2 loads";
#endif
    printf("# membw: read bandwidth, %s, best (median) of %d passes, GB/s = 1e9 bytes/s\n", sum_name, reps);
    printf("| buffer MiB | threads | best GB/s | median GB/s |\n| ---: | ---: | ---: | ---: |\n");
    uint64_t sink = 0;
    for (int si = 0; si < ns; si++) {
        size_t size = (size_t)sizes[si] << 20;
        uint8_t *buf = aligned_alloc(4096, size);
        if (!buf) { fprintf(stderr, "membw: cannot allocate %ld MiB\n", sizes[si]); return 1; }
        for (size_t i = 0; i < size; i += 64) buf[i] = (uint8_t)(i * 2654435761u >> 24); /* map every page */
        for (int ti = 0; ti < nt; ti++) {
            int t = (int)(threads[ti] > 256 ? 256 : threads[ti]);
            double r[1000];
            pass(buf, size, t, &sink); /* warm-up */
            for (int k = 0; k < reps; k++) r[k] = pass(buf, size, t, &sink);
            qsort(r, (size_t)reps, sizeof r[0], cmp_d);
            printf("| %ld | %d | %.2f | %.2f |\n", sizes[si], t, r[reps - 1] / 1e9, r[reps / 2] / 1e9);
            fflush(stdout);
        }
        free(buf);
    }
    fprintf(stderr, "(checksum %llx)\n", (unsigned long long)sink);
    return 0;
}
