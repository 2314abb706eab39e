/* cpu_backend.c — the CPU reference backend: every op of backend.h in plain C.
 *
 * Owns: the reference semantics of each op (the oracle later SIMD and CUDA kernels are tested
 * against), split over the thread pool. Matmul dequantizes one weight row at a time with the
 * reference routines of format/quant and dots it with every token's activations, so a row is
 * decoded once per batch, not once per token.
 * The fast path (cpu_matmul.c over kernels_*.c) takes every matmul whose weight type has
 * kernels; this file's plain-C loop remains for the other types and when OB_CPU_KERNELS=reference
 * (for A/B comparisons).
 * Does not own: SIMD kernels (kernels_*.c), the fast matmul driver (cpu_matmul.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attn.h"
#include "backend/cpu/cpu_matmul.h"
#include "util/threadpool.h"
#include "format/quant.h"
#include "format/quant_tensor.h"

typedef struct {
    ob_pool *pool;
    int n_threads;
    float **row_scratch;   /* [n_threads][row_cap]: one dequantized weight row per thread */
    int64_t row_cap;
    float *xrot;           /* [xrot_cap]: activations rotated for lean4 weights */
    size_t xrot_cap;
    ob_cpu_mm *mm;         /* fast matmul driver, NULL when OB_CPU_KERNELS=reference */
    const ob_kernels *kt;  /* its kernel table (row ops, attention), NULL likewise */
    /* rope's cos/sin of the last call's positions: every layer of a forward pass rotates the same
     * positions, so the table is computed once per pass (grows at warm-up only) */
    float *rope_cs;        /* [rope_n][n_rot/2][2] */
    int32_t *rope_pos;     /* [rope_n] */
    int rope_n, rope_cap;  /* positions in the table, capacity of rope_pos */
    int64_t rope_cs_cap;   /* capacity of rope_cs in (cos, sin) pairs */
    ob_rope rope_key;
} cpu_state;

static cpu_state *st(ob_backend *b) { return (cpu_state *)b->priv; }
static void pick_kernels(void);

static int cpu_init(ob_backend *b, const ob_backend_opts *o, char *err, size_t errlen) {
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
    int n = o && o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    s->pool = ob_pool_new(n);
    s->n_threads = ob_pool_size(s->pool);
    s->row_scratch = calloc((size_t)s->n_threads, sizeof(float *));
    b->priv = s;
    pick_kernels();
    const char *want = getenv("OB_CPU_KERNELS");
    if (!want || strcmp(want, "reference") != 0) {
        s->mm = ob_cpu_mm_new(s->n_threads, NULL);
        if (!s->mm) { snprintf(err, errlen, "cpu backend: out of memory"); return -1; }
        s->kt = ob_cpu_mm_kernels(s->mm);
    }
    return 0;
}

static void cpu_free(ob_backend *b) {
    cpu_state *s = st(b);
    if (!s) return;
    ob_pool_free(s->pool);
    ob_cpu_mm_free(s->mm);
    free(s->rope_cs);
    free(s->rope_pos);
    for (int i = 0; i < s->n_threads; i++) free(s->row_scratch[i]);
    free(s->row_scratch);
    free(s->xrot);
    free(s);
    b->priv = NULL;
}

static int cpu_mem_info(ob_backend *b, size_t *free_bytes, size_t *total_bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *total_bytes = (size_t)pages * (size_t)psz;
    *free_bytes = (size_t)avail * (size_t)psz;
    return 0;
}

static void *cpu_alloc(ob_backend *b, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? (size + 63) & ~(size_t)63 : 64) != 0) return NULL;
    return p;
}

static void cpu_dealloc(ob_backend *b, void *p) { free(p); }
static const void *cpu_upload(ob_backend *b, const void *host, size_t size) { return host; }
static void cpu_download(ob_backend *b, void *host, const void *dev, size_t size) {
    if (host != dev) memcpy(host, dev, size);
}

static int cpu_supports(ob_backend *b, int type) {
    const ob_type_traits *t = ob_type_get(type);
    return t && t->to_float;
}

/* Grows every thread's row scratch to hold n floats. Runs before an op is dispatched, so the
 * only allocations happen the first time a new row length is seen (at warm-up). */
static void reserve_rows(cpu_state *s, int64_t n) {
    if (n <= s->row_cap) return;
    for (int i = 0; i < s->n_threads; i++) {
        free(s->row_scratch[i]);
        s->row_scratch[i] = malloc((size_t)n * sizeof(float));
    }
    s->row_cap = n;
}

/* Even split of [0, total) into nth parts: part ith is [*lo, *hi). */
static void split(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (total + nth - 1) / nth;
    *lo = per * ith;
    *hi = *lo + per;
    if (*lo > total) *lo = total;
    if (*hi > total) *hi = total;
}

static float dot_f32_scalar(const float *a, const float *b, int64_t n) {
    /* Eight independent partial sums: lets the compiler vectorise without -ffast-math. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float sum = 0;
    for (; i < n; i++) sum += a[i] * b[i];
    return sum + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#if defined(__x86_64__)
#include <immintrin.h>
/* AVX2+FMA dot product, chosen at run time. The reference stays plain C: this only changes
 * the summation order, which every test tolerates. */
__attribute__((target("avx2,fma"))) static float dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* F16 rows through F16C: the software conversion is the slowest part of an F16 matmul. */
__attribute__((target("avx2,f16c"))) static void f16_row_f16c(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = ob_fp16_to_fp32(h[i]);
}
#endif

static float (*dot_f32)(const float *, const float *, int64_t) = dot_f32_scalar;

/* Picks the widest dot product this CPU runs; called once from init. */
static void pick_kernels(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) dot_f32 = dot_f32_avx2;
#endif
}

static void (*row_to_float(int type))(const void *, float *, int64_t) {
#if defined(__x86_64__)
    if (type == OB_TYPE_F16 && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2")) return f16_row_f16c;
#endif
    return ob_type_get(type)->to_float;
}

typedef struct {
    cpu_state *s;
    const ob_weight *w;
    const float *x;
    float *y;
    int n;
} matmul_job;

/* Tokens are taken in blocks whose activations stay in L2 while every weight row of the
 * thread's share streams past once per block. */
#define TOKEN_BLOCK 32

static void matmul_task(void *ctx, int ith, int nth) {
    matmul_job *j = ctx;
    const ob_weight *w = j->w;
    void (*to_float)(const void *, float *, int64_t) = row_to_float(w->type);
    float *row = j->s->row_scratch[ith];
    int64_t lo, hi;
    split(w->n_out, ith, nth, &lo, &hi);
    for (int t0 = 0; t0 < j->n; t0 += TOKEN_BLOCK) {
        int t1 = t0 + TOKEN_BLOCK < j->n ? t0 + TOKEN_BLOCK : j->n;
        for (int64_t r = lo; r < hi; r++) {
            const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            const float *wr;
            if (w->type == OB_TYPE_F32) {
                wr = (const float *)src;
            } else {
                to_float(src, row, w->n_in);
                wr = row;
            }
            if (w->scale == 1.0f) {
                for (int i = t0; i < t1; i++) j->y[(size_t)i * w->n_out + r] = dot_f32(wr, j->x + (size_t)i * w->n_in, w->n_in);
            } else { /* a per-tensor scale (i2_s): the dot of the trits, then one multiply, as bitnet.cpp */
                for (int i = t0; i < t1; i++)
                    j->y[(size_t)i * w->n_out + r] = dot_f32(wr, j->x + (size_t)i * w->n_in, w->n_in) * w->scale;
            }
        }
    }
}

#ifndef OB_NO_LEAN
typedef struct { const float *x; float *out; int n; int64_t dim; } rot_job;

/* lean4: each token's activations rotated block by block, as the weights were at conversion. */
static void rotate_task(void *ctx, int ith, int nth) {
    rot_job *j = ctx;
    int64_t lo, hi;
    split(j->n, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    memcpy(j->out + (size_t)lo * j->dim, j->x + (size_t)lo * j->dim, (size_t)(hi - lo) * j->dim * sizeof(float));
    ob_lean_rotate(j->out + (size_t)lo * j->dim, (hi - lo) * j->dim);
}
#endif

static void cpu_matmul(ob_backend *b, const ob_weight *w, const float *x, float *y, int n) {
    cpu_state *s = st(b);
    reserve_rows(s, w->n_in);
#ifndef OB_NO_LEAN
    if (w->type == OB_TYPE_LEAN4) {
        size_t need = (size_t)n * (size_t)w->n_in;
        if (need > s->xrot_cap) { /* grows at warm-up only: the largest batch x widest input */
            free(s->xrot);
            s->xrot = malloc(need * sizeof(float));
            s->xrot_cap = s->xrot ? need : 0;
            if (!s->xrot) abort(); /* like the other scratch: no error path in the op table */
        }
        rot_job rj = {x, s->xrot, n, w->n_in};
        ob_pool_run(s->pool, rotate_task, &rj);
        x = s->xrot;
    }
#endif
    if (s->mm && ob_cpu_mm_supports(s->mm, w->type)) {
        if (ob_cpu_mm_run(s->mm, s->pool, w, x, y, n) != 0) abort(); /* scratch: no error path in the op table */
        return;
    }
    matmul_job j = {s, w, x, y, n};
    ob_pool_run(s->pool, matmul_task, &j);
}

static void cpu_get_rows(ob_backend *b, const ob_weight *w, const int32_t *ids, int n, float *y) {
    const ob_type_traits *t = ob_type_get(w->type);
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * w->n_in;
        t->to_float((const uint8_t *)w->data + (size_t)ids[i] * w->row_bytes, yi, w->n_in);
#ifndef OB_NO_LEAN
        if (w->type == OB_TYPE_LEAN4) ob_lean_rotate(yi, w->n_in); /* its own inverse: back to the original row */
#endif
        if (w->scale != 1.0f)
            for (int64_t k = 0; k < w->n_in; k++) yi[k] *= w->scale;
    }
}

/* ---- fast row ops: the table's vector kernels, rows split over the pool when there are many -- */

#define PAR_MIN 16384 /* elements below which an op stays on the calling thread */

typedef enum { ROW_RMS, ROW_AQ, ROW_GLU, ROW_ADD, ROW_BIAS, ROW_ROPE } row_kind;

typedef struct {
    cpu_state *s;
    row_kind kind;
    float *y;
    const float *x, *w;
    int64_t n, dim;        /* rows (flat ops: chunks of dim elements) */
    int64_t total;         /* flat ops: element count */
    float eps;
    int act;
    int n_head, head_dim;  /* rope */
    const ob_rope *r;
} rows_job;

static void rope_row(const rows_job *j, int64_t i);

static void rows_range(const rows_job *j, int64_t lo, int64_t hi) {
    const ob_kernels *kt = j->s->kt;
    for (int64_t i = lo; i < hi; i++) {
        switch (j->kind) {
        case ROW_RMS: kt->rms_row(j->x + i * j->dim, j->w, j->y + i * j->dim, (int)j->dim, j->eps); break;
        case ROW_AQ: kt->aq_row(j->y + i * j->dim, (int)j->dim); break;
        case ROW_BIAS: kt->add(j->y + i * j->dim, j->w, j->dim); break;
        case ROW_ROPE: rope_row(j, i); break;
        case ROW_GLU:
        case ROW_ADD: {
            int64_t a = i * j->dim, len = a + j->dim < j->total ? j->dim : j->total - a;
            if (j->kind == ROW_GLU) kt->glu(j->act, j->y + a, j->x + a, len);
            else kt->add(j->y + a, j->x + a, len);
            break;
        }
        }
    }
}

static void rows_task(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    split(j->n, ith, nth, &lo, &hi);
    rows_range(j, lo, hi);
}

static void rows_run(rows_job *j) {
    if (j->n * j->dim >= PAR_MIN && j->n > 1) ob_pool_run(j->s->pool, rows_task, j);
    else rows_range(j, 0, j->n);
}

/* flat ops cut into rows of this many elements */
#define FLAT_CHUNK 4096

static void cpu_rmsnorm(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps) {
    cpu_state *s = st(b);
    if (s->kt) {
        rows_job j = {.s = s, .kind = ROW_RMS, .y = y, .x = x, .w = w, .n = n, .dim = dim, .eps = eps};
        rows_run(&j);
        return;
    }
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        double ss = 0;
        for (int k = 0; k < dim; k++) ss += (double)xi[k] * xi[k];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int k = 0; k < dim; k++) yi[k] = xi[k] * inv * (w ? w[k] : 1.0f);
    }
}

/* cos/sin of token i's pairs from the cached table (the reference's arithmetic, computed once). */
static void rope_row(const rows_job *j, int64_t i) {
    const ob_rope *r = j->r;
    const int half = r->n_rot / 2;
    const float *cs = j->s->rope_cs + i * half * 2;
    for (int h = 0; h < j->n_head; h++) {
        float *v = j->y + (i * j->n_head + h) * j->head_dim;
        for (int k = 0; k < half; k++) {
            const int a = r->style == OB_ROPE_NEOX ? k : 2 * k, bi = r->style == OB_ROPE_NEOX ? k + half : 2 * k + 1;
            const float c = cs[2 * k], sn = cs[2 * k + 1], x0 = v[a], x1 = v[bi];
            v[a] = x0 * c - x1 * sn;
            v[bi] = x0 * sn + x1 * c;
        }
    }
}

static int rope_table(cpu_state *s, int n, const int32_t *pos, const ob_rope *r) {
    const int half = r->n_rot / 2;
    if (s->rope_n && n == s->rope_n && !memcmp(&s->rope_key, r, sizeof *r) && !memcmp(s->rope_pos, pos, (size_t)n * 4))
        return 0;
    if (n > s->rope_cap || (int64_t)n * half > s->rope_cs_cap) { /* grows at warm-up only */
        free(s->rope_cs);
        free(s->rope_pos);
        s->rope_cs = malloc(((size_t)n * half + 1) * 2 * sizeof(float));
        s->rope_pos = malloc((size_t)n * sizeof(int32_t));
        s->rope_cap = s->rope_cs && s->rope_pos ? n : 0;
        s->rope_cs_cap = s->rope_cap ? (int64_t)n * half : 0;
        s->rope_n = 0;
        if (!s->rope_cap) return -1;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < half; k++) {
            double inv_freq = pow((double)r->theta, -2.0 * k / r->n_rot);
            if (r->freq_factors) inv_freq /= r->freq_factors[k];
            double ang = (double)pos[i] * r->freq_scale * inv_freq;
            s->rope_cs[((size_t)i * half + k) * 2] = (float)cos(ang);
            s->rope_cs[((size_t)i * half + k) * 2 + 1] = (float)sin(ang);
        }
    memcpy(s->rope_pos, pos, (size_t)n * 4);
    s->rope_key = *r;
    s->rope_n = n;
    return 0;
}

static void cpu_rope(ob_backend *b, float *x, int n, int n_head, int head_dim, const int32_t *pos, const ob_rope *r) {
    cpu_state *s = st(b);
    if (s->kt && rope_table(s, n, pos, r) == 0) {
        rows_job j = {.s = s, .kind = ROW_ROPE, .y = x, .n = n, .dim = (int64_t)n_head * head_dim, .n_head = n_head, .head_dim = head_dim, .r = r};
        rows_run(&j);
        return;
    }
    int half = r->n_rot / 2;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < half; k++) {
            double inv_freq = pow((double)r->theta, -2.0 * k / r->n_rot);
            if (r->freq_factors) inv_freq /= r->freq_factors[k];
            double ang = (double)pos[i] * r->freq_scale * inv_freq;
            float c = (float)cos(ang), sn = (float)sin(ang);
            for (int h = 0; h < n_head; h++) {
                float *v = x + ((size_t)i * n_head + h) * head_dim;
                int a = r->style == OB_ROPE_NEOX ? k : 2 * k;
                int bi = r->style == OB_ROPE_NEOX ? k + half : 2 * k + 1;
                float x0 = v[a], x1 = v[bi];
                v[a] = x0 * c - x1 * sn;
                v[bi] = x0 * sn + x1 * c;
            }
        }
    }
}

typedef struct {
    const ob_kernels *kt;
    void *cache;
    int type, n, dim, n_ctx;
    const float *x;
    const int32_t *pos, *seq;
} kv_job;

static void kv_task(void *ctx, int ith, int nth) {
    const kv_job *j = ctx;
    int64_t lo, hi;
    split(j->n, ith, nth, &lo, &hi);
    if (hi > lo)
        ob_cpu_kv_write(j->kt, j->cache, j->type, j->x + lo * j->dim, (int)(hi - lo), j->dim, j->n_ctx, j->pos + lo, j->seq + lo);
}

/* Rows are converted one by one (each the same bits whoever converts it): a prompt's rows split over the pool. */
static void cpu_kv_write(ob_backend *b, void *cache, int type, const float *x, int n, int dim, int n_ctx,
                         const int32_t *pos, const int32_t *seq) {
    cpu_state *s = st(b);
    kv_job j = {s->mm ? ob_cpu_mm_kernels(s->mm) : ob_kernels_scalar(), cache, type, n, dim, n_ctx, x, pos, seq};
    if ((int64_t)n * dim >= PAR_MIN && n > 1) ob_pool_run(s->pool, kv_task, &j);
    else kv_task(&j, 0, 1);
}

typedef struct { const ob_attn_args *a; cpu_state *s; } attn_job;

/* The reference: all scores, their maximum, exponentials summed in double, then the weighted
 * sum of V rows; cache rows of any type are widened to f32 with the reference routines. */
static void attn_task(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const ob_attn_args *a = j->a;
    int kv_dim = a->n_head_kv * a->head_dim, group = a->n_head / a->n_head_kv;
    float *scores = j->s->row_scratch[ith]; /* reserved to n_ctx + head_dim */
    float *row = scores + a->n_ctx;
    const ob_type_traits *tk = ob_type_get(a->type_k), *tv = ob_type_get(a->type_v);
    size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    int64_t lo, hi;
    split((int64_t)a->n * a->n_head, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int i = (int)(t / a->n_head), h = (int)(t % a->n_head), kh = h / group;
        const float *q = a->q + ((size_t)i * a->n_head + h) * a->head_dim;
        const uint8_t *kbase = (const uint8_t *)a->k + (size_t)a->seq[i] * a->n_ctx * krb + (size_t)kh * khb;
        const uint8_t *vbase = (const uint8_t *)a->v + (size_t)a->seq[i] * a->n_ctx * vrb + (size_t)kh * vhb;
        int np = a->pos[i] + 1;
        float mx = -INFINITY;
        for (int p = 0; p < np; p++) {
            tk->to_float(kbase + (size_t)p * krb, row, a->head_dim);
            scores[p] = dot_f32(q, row, a->head_dim) * a->scale;
            if (scores[p] > mx) mx = scores[p];
        }
        double sum = 0;
        for (int p = 0; p < np; p++) { scores[p] = expf(scores[p] - mx); sum += scores[p]; }
        float inv = (float)(1.0 / sum);
        float *o = a->out + ((size_t)i * a->n_head + h) * a->head_dim;
        for (int d = 0; d < a->head_dim; d++) o[d] = 0;
        for (int p = 0; p < np; p++) {
            float wgt = scores[p] * inv;
            tv->to_float(vbase + (size_t)p * vrb, row, a->head_dim);
            for (int d = 0; d < a->head_dim; d++) o[d] += wgt * row[d];
        }
    }
}

static void cpu_attention(ob_backend *b, const ob_attn_args *a) {
    cpu_state *s = st(b);
    if (s->mm) {
        reserve_rows(s, (int64_t)ob_cpu_attn_scratch(a->n_head, a->n_head_kv, a->head_dim));
        ob_cpu_attention(s->pool, ob_cpu_mm_kernels(s->mm), a, s->row_scratch);
        return;
    }
    reserve_rows(s, (int64_t)a->n_ctx + a->head_dim);
    attn_job j = {a, s};
    ob_pool_run(s->pool, attn_task, &j);
}

static void cpu_add(ob_backend *b, float *y, const float *x, size_t n) {
    cpu_state *s = st(b);
    if (s->kt) {
        rows_job j = {.s = s, .kind = ROW_ADD, .y = y, .x = x, .n = ((int64_t)n + FLAT_CHUNK - 1) / FLAT_CHUNK, .dim = FLAT_CHUNK, .total = (int64_t)n};
        rows_run(&j);
        return;
    }
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void cpu_add_bias(ob_backend *b, float *y, const float *bias, int n, int dim) {
    cpu_state *s = st(b);
    if (s->kt) {
        rows_job j = {.s = s, .kind = ROW_BIAS, .y = y, .w = bias, .n = n, .dim = dim};
        rows_run(&j);
        return;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < dim; k++) y[(size_t)i * dim + k] += bias[k];
}

static void cpu_glu(ob_backend *b, ob_act act, float *gate, const float *up, size_t n) {
    cpu_state *s = st(b);
    if (s->kt) {
        rows_job j = {.s = s, .kind = ROW_GLU, .y = gate, .x = up, .n = ((int64_t)n + FLAT_CHUNK - 1) / FLAT_CHUNK, .dim = FLAT_CHUNK, .total = (int64_t)n};
        j.act = act == OB_ACT_SILU ? 0 : 1;
        rows_run(&j);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], a;
        if (act == OB_ACT_SILU) {
            a = g / (1.0f + expf(-g));
        } else {
            float r = g > 0 ? g : 0;
            a = r * r;
        }
        gate[i] = a * up[i];
    }
}

static void cpu_act_quant_i8(ob_backend *b, float *x, int n, int dim) {
    cpu_state *s = st(b);
    if (s->kt) {
        rows_job j = {.s = s, .kind = ROW_AQ, .y = x, .n = n, .dim = dim};
        rows_run(&j);
        return;
    }
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * dim;
        float mx = 0;
        for (int k = 0; k < dim; k++) mx = fmaxf(mx, fabsf(xi[k]));
        if (mx < 1e-5f) mx = 1e-5f;
        float s = (1.0f / mx) * 127.0f; /* torch evaluates 127 / t as reciprocal(t) * 127: same bits */
        for (int k = 0; k < dim; k++) {
            float q = nearbyintf(xi[k] * s); /* round half to even, as torch.round */
            if (q > 127) q = 127;
            if (q < -128) q = -128;
            xi[k] = q / s;
        }
    }
}

static void cpu_copy(ob_backend *b, void *dst, const void *src, size_t size) { memmove(dst, src, size); }
static void cpu_sync(ob_backend *b) {}

ob_backend *ob_backend_cpu_new(void) {
    ob_backend *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->name = "cpu";
    b->host = 1;
    b->init = cpu_init;
    b->free = cpu_free;
    b->mem_info = cpu_mem_info;
    b->alloc = cpu_alloc;
    b->dealloc = cpu_dealloc;
    b->upload = cpu_upload;
    b->download = cpu_download;
    b->supports = cpu_supports;
    b->matmul = cpu_matmul;
    b->get_rows = cpu_get_rows;
    b->rmsnorm = cpu_rmsnorm;
    b->rope = cpu_rope;
    b->kv_write = cpu_kv_write;
    b->attention = cpu_attention;
    b->add = cpu_add;
    b->add_bias = cpu_add_bias;
    b->glu = cpu_glu;
    b->act_quant_i8 = cpu_act_quant_i8;
    b->copy = cpu_copy;
    b->sync = cpu_sync;
    return b;
}
