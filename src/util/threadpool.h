/* threadpool.h — persistent worker threads (the CPU backend's ops, the scheduler's sampling).
 *
 * Owns: n-1 workers created once; ob_pool_run hands every thread (the caller too) the same
 * function with its thread index and waits until all return. No thread is created per op.
 * Does not own: how an op splits its work (the op takes ith/nth and picks its share).
 */
#ifndef OB_THREADPOOL_H
#define OB_THREADPOOL_H

typedef struct ob_pool ob_pool;
typedef void (*ob_pool_fn)(void *ctx, int ith, int nth);

ob_pool *ob_pool_new(int n_threads);
void ob_pool_free(ob_pool *p);
int ob_pool_size(const ob_pool *p);
/* How long idle workers poll for the next job before sleeping (default 2 ms; set it before the
 * first run): short for a pool with one job per GPU step, where spinning would burn the cores. */
void ob_pool_set_spin(ob_pool *p, long ns);
/* Runs fn(ctx, i, n) on every thread i in [0, n), returning when all are done. */
void ob_pool_run(ob_pool *p, ob_pool_fn fn, void *ctx);

#endif
