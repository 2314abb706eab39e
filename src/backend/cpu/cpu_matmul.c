/* cpu_matmul.c — the CPU backend's fast matmul driver. See cpu_matmul.h.
 *
 * Shapes of the work:
 *  - Decode (n <= GEMV_MAX tokens): rows in chunks of a multiple of the table's panel width;
 *    each chunk runs the gemv kernel once per token, so a chunk's weights stream from memory
 *    once and the extra tokens hit the cache.
 *  - Prompts: chunks of PANELS panels; a thread packs its chunk's panels once, then sweeps
 *    the tokens in blocks of about ACT_BLOCK activation bytes (so they stay in L2 while the
 *    panels are reused from L1/L2).
 *  - Float weights: chunks of rows, tokens in blocks of about ACT_BLOCK bytes of floats.
 * Chunks are handed out by an atomic counter. Results do not depend on the split: each output
 * element is computed by one kernel call with the canonical order of kernels.h.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_matmul.h"
#include "format/quant.h"

#define GEMV_MAX 3          /* tokens up to which rows are decoded per token (no packing) */
#define PANELS 4            /* panels per prompt chunk */
#define ACT_BLOCK (256 << 10)

typedef struct {
    void *panels;           /* [PANELS] panels of the widest input seen */
    size_t panels_cap;
    float *wbuf;            /* [OB_KWBUF(n_in)] float-kernel scratch */
    size_t wbuf_cap;
} thread_scratch;

struct ob_cpu_mm {
    const ob_kernels *kt;
    int n_threads;
    thread_scratch *ts;     /* [n_threads] */
    void *act;              /* quantized activations of the current matmul */
    size_t act_cap;
};

static void *amalloc(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) ? NULL : p;
}

/* Grows *buf to at least need bytes (contents not kept). */
static int reserve(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    free(*buf);
    *buf = amalloc(need);
    *cap = *buf ? need : 0;
    return *buf ? 0 : -1;
}

ob_cpu_mm *ob_cpu_mm_new(int n_threads, const ob_kernels *kt) {
    ob_cpu_mm *mm = calloc(1, sizeof *mm);
    if (!mm) return NULL;
    mm->kt = kt ? kt : ob_kernels_best();
    mm->n_threads = n_threads < 1 ? 1 : n_threads;
    mm->ts = calloc((size_t)mm->n_threads, sizeof *mm->ts);
    if (!mm->ts) {
        free(mm);
        return NULL;
    }
    return mm;
}

void ob_cpu_mm_free(ob_cpu_mm *mm) {
    if (!mm) return;
    for (int i = 0; i < mm->n_threads; i++) {
        free(mm->ts[i].panels);
        free(mm->ts[i].wbuf);
    }
    free(mm->ts);
    free(mm->act);
    free(mm);
}

const ob_kernels *ob_cpu_mm_kernels(const ob_cpu_mm *mm) { return mm->kt; }

int ob_cpu_mm_supports(const ob_cpu_mm *mm, int type) {
    if (type < 0 || type >= OB_TYPE_COUNT) return 0;
    return mm->kt->gemm_f[type] != NULL || (ob_kfmt_get(type) && mm->kt->gemv[type] && mm->kt->pack[type]);
}

typedef struct {
    ob_cpu_mm *mm;
    const ob_weight *w;
    const ob_kfmt *f;       /* NULL for float weights */
    const float *x;
    float *y;
    int n;
    ob_q8act a;
    int64_t chunk;          /* rows per chunk */
    int64_t n_chunks;
    int tok_block;          /* tokens per block (prompts) */
    atomic_llong next;      /* next chunk to hand out */
    atomic_int next_q;      /* next activation row to quantize */
} mm_job;

static void quant_task(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    const ob_kfmt *f = j->f;
    int64_t k = j->w->n_in;
    for (int t; (t = atomic_fetch_add_explicit(&j->next_q, 1, memory_order_relaxed)) < j->n;)
        j->mm->kt->quant_row(j->x + t * k, k, f, j->a.qs + t * k, j->a.d + t * (k / f->qb), j->a.ac + t * (k / f->sb));
}

static void int_task(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    const ob_kernels *kt = j->mm->kt;
    const ob_weight *w = j->w;
    const int64_t n_out = w->n_out;
    for (int64_t c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_chunks;) {
        int64_t r0 = c * j->chunk, r1 = r0 + j->chunk < n_out ? r0 + j->chunk : n_out;
        if (j->n <= GEMV_MAX) {
            for (int t = 0; t < j->n; t++) kt->gemv[w->type](w, r0, r1, &j->a, t, j->y + t * n_out + r0);
            continue;
        }
        thread_scratch *ts = &j->mm->ts[ith];
        size_t pb = ob_panel_bytes(w->n_in, kt->R, j->f);
        ob_panel p[PANELS];
        int np = 0;
        for (int64_t r = r0; r < r1; r += kt->R, np++) {
            ob_panel_init(&p[np], (uint8_t *)ts->panels + (size_t)np * pb, w->n_in, kt->R, j->f);
            p[np].nr = (int)(r1 - r < kt->R ? r1 - r : kt->R);
            kt->pack[w->type](w, r, &p[np]);
        }
        for (int t0 = 0; t0 < j->n; t0 += j->tok_block) {
            int t1 = t0 + j->tok_block < j->n ? t0 + j->tok_block : j->n;
            float *yt = j->y + (int64_t)t0 * n_out + r0;
            if (kt->gemm_np) kt->gemm_np(j->f, p, np, &j->a, t0, t1, yt, n_out);
            else
                for (int i = 0; i < np; i++) kt->gemm(j->f, &p[i], &j->a, t0, t1, yt + (int64_t)i * kt->R, n_out);
        }
    }
}

static void float_task(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    const ob_kernels *kt = j->mm->kt;
    const ob_weight *w = j->w;
    const int64_t n_out = w->n_out, k = w->n_in;
    float *wbuf = j->mm->ts[ith].wbuf;
    for (int64_t c; (c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_chunks;) {
        int64_t r0 = c * j->chunk, r1 = r0 + j->chunk < n_out ? r0 + j->chunk : n_out;
        for (int t0 = 0; t0 < j->n; t0 += j->tok_block) {
            int nt = j->n - t0 < j->tok_block ? j->n - t0 : j->tok_block;
            kt->gemm_f[w->type](w, r0, r1, j->x + (int64_t)t0 * k, nt, j->y + (int64_t)t0 * n_out + r0, n_out, wbuf);
        }
    }
}

/* Rows per chunk: about 8 chunks per thread, a multiple of unit, between unit and cap. */
static int64_t pick_chunk(int64_t n_out, int nth, int64_t unit, int64_t cap) {
    int64_t c = (n_out + 8 * nth - 1) / (8 * nth);
    c = (c + unit - 1) / unit * unit;
    if (c > cap) c = cap / unit * unit;
    return c < unit ? unit : c;
}

int ob_cpu_mm_run(ob_cpu_mm *mm, ob_pool *pool, const ob_weight *w, const float *x, float *y, int n) {
    const ob_kernels *kt = mm->kt;
    const int nth = ob_pool_size(pool);
    const int64_t k = w->n_in;
    mm_job j;
    memset(&j, 0, sizeof j);
    j.mm = mm;
    j.w = w;
    j.x = x;
    j.y = y;
    j.n = n;
    atomic_init(&j.next, 0);
    atomic_init(&j.next_q, 0);
    if (kt->gemm_f[w->type]) {
        for (int i = 0; i < mm->n_threads; i++)
            if (reserve((void **)&mm->ts[i].wbuf, &mm->ts[i].wbuf_cap, (size_t)OB_KWBUF(k) * sizeof(float))) return -1;
        j.chunk = pick_chunk(w->n_out, nth, n > 1 ? 16 : 4, n > 1 ? 64 : 256);
        j.n_chunks = (w->n_out + j.chunk - 1) / j.chunk;
        int64_t tb = ACT_BLOCK / (k * (int64_t)sizeof(float));
        j.tok_block = tb < 6 ? 6 : (int)(tb / 6 * 6);
        ob_pool_run(pool, float_task, &j);
        return 0;
    }
    j.f = ob_kfmt_get(w->type);
    if (reserve(&mm->act, &mm->act_cap, ob_q8act_bytes(n, k, j.f))) return -1;
    ob_q8act_init(&j.a, mm->act, n, k, j.f);
    if (n <= GEMV_MAX) {
        quant_task(&j, 0, 1); /* one or two rows: cheaper than waking the pool */
        j.chunk = pick_chunk(w->n_out, nth, kt->R, 512);
    } else {
        ob_pool_run(pool, quant_task, &j);
        size_t pb = ob_panel_bytes(k, kt->R, j.f) * PANELS;
        for (int i = 0; i < mm->n_threads; i++)
            if (reserve(&mm->ts[i].panels, &mm->ts[i].panels_cap, pb)) return -1;
        j.chunk = pick_chunk(w->n_out, nth, kt->R, (int64_t)kt->R * PANELS);
        int64_t tb = ACT_BLOCK / k;
        j.tok_block = tb < 8 ? 8 : (int)(tb / 8 * 8);
    }
    j.n_chunks = (w->n_out + j.chunk - 1) / j.chunk;
    ob_pool_run(pool, int_task, &j);
    return 0;
}
