/* threadpool.c — persistent workers woken by a generation counter.
 *
 * A decode step issues a few hundred small ops, so waking the workers must cost far less than
 * an op. Workers spin on the counter with a pause instruction (SPIN_NS by default), yielding the
 * core now and then in case it is oversubscribed, and only then sleep on a condition variable.
 * ob_pool_run takes the mutex and signals only when some worker is actually asleep (the
 * `sleeping` count), so a run on a hot pool is one atomic increment to start it and one
 * counter to wait on. The caller does its own share of the work (thread index 0).
 *
 * Sleeping is race-free: a worker announces itself in `sleeping` and then re-checks the
 * generation under the mutex; the caller bumps the generation before reading `sleeping`
 * (both sequentially consistent), so either the caller sees the sleeper and signals, or the
 * sleeper sees the new generation and does not wait.
 */
#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define SPIN_NS 2000000L   /* how long an idle worker polls before sleeping by default (2 ms) */
#define YIELD_EVERY 256    /* polls (pause: ~40-140 cycles each) between sched_yield calls */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield"); }
#else
static inline void cpu_relax(void) {}
#endif

struct ob_pool {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* [n-1] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;      /* bumped once per job */
    atomic_int pending;          /* workers still running the current job */
    atomic_int sleeping;         /* workers waiting (or about to wait) on cv */
    atomic_int stop;
    ob_pool_fn fn;
    void *ctx;
    long spin_ns;                /* how long an idle worker polls before sleeping */
};

typedef struct { ob_pool *p; int ith; } worker_arg;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    ob_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g == seen && !atomic_load(&p->stop)) {
            long t0 = now_ns();
            for (unsigned spins = 1;; spins++) {
                cpu_relax();
                g = atomic_load_explicit(&p->generation, memory_order_acquire);
                if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
                if (spins % YIELD_EVERY == 0) {
                    if (now_ns() - t0 > p->spin_ns) break;
                    sched_yield();
                }
            }
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

ob_pool *ob_pool_new(int n_threads) {
    ob_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads < 1 ? 1 : n_threads;
    p->spin_ns = SPIN_NS;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)p->n, sizeof *p->threads);
    if (!p->threads) p->n = 1;
    for (int i = 1; i < p->n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->p = p;
            wa->ith = i;
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void ob_pool_free(ob_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int ob_pool_size(const ob_pool *p) { return p ? p->n : 1; }

void ob_pool_set_spin(ob_pool *p, long ns) {
    if (p) p->spin_ns = ns < 0 ? 0 : ns;
}

void ob_pool_run(ob_pool *p, ob_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: before the read of sleeping below */
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    for (unsigned spins = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        cpu_relax();
        if (spins % YIELD_EVERY == 0) sched_yield(); /* a worker was preempted: let it run */
    }
}
