/* threadpool.c — persistent workers woken by a generation counter.
 *
 * Workers spin briefly on the counter (a decode step issues hundreds of small ops, and a
 * futex wake per op costs more than the op), then sleep on a condition variable.
 */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ROUNDS 20000

struct ob_pool {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* [n-1] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;      /* bumped once per job */
    atomic_int pending;          /* workers still running the current job */
    atomic_int stop;
    ob_pool_fn fn;
    void *ctx;
};

typedef struct { ob_pool *p; int ith; } worker_arg;

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    ob_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop) && spins < SPIN_ROUNDS) {
            spins++;
            if ((spins & 63) == 0) sched_yield();
        }
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
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
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)p->n, sizeof *p->threads);
    for (int i = 1; i < p->n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->p = p;
        wa->ith = i;
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

void ob_pool_run(ob_pool *p, ob_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) sched_yield();
}
