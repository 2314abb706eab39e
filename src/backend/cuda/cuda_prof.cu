/* cuda_prof.cu — per-op GPU times (OB_CUDA_PROFILE=1), for finding where a step's time goes.
 *
 * Owns: a pair of CUDA events around every op the backend queues, harvested at each sync, summed
 * per op name (matmul names carry the weight type and shape) and printed, slowest first, with
 * the bytes each op must read when the backend is freed. Recording is off while profiling (the
 * events would be captured into the graph). Costs nothing when the variable is unset.
 * Does not own: the ops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

#define PROF_EVENTS 8192
#define PROF_NAMES 256

typedef struct {
    char name[80];
    double ms, bytes;
    long calls;
} prof_row;

struct cu_prof {
    cudaEvent_t ev[PROF_EVENTS][2];
    int which[PROF_EVENTS];
    double bytes[PROF_EVENTS];
    int n_ev;
    prof_row rows[PROF_NAMES];
    int n_rows;
};

void cu_prof_init(cu_state *s) {
    const char *e = getenv("OB_CUDA_PROFILE");
    if (!e || strcmp(e, "1") != 0) return;
    cu_prof *p = (cu_prof *)calloc(1, sizeof *p);
    if (!p) return;
    for (int i = 0; i < PROF_EVENTS; i++)
        for (int k = 0; k < 2; k++) cudaEventCreate(&p->ev[i][k]);
    s->prof = p;
    s->graphs_off = 1;
}

void cu_prof_harvest(cu_state *s) {
    cu_prof *p = s->prof;
    if (!p || !p->n_ev) return;
    cudaStreamSynchronize(s->stream);
    for (int i = 0; i < p->n_ev; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, p->ev[i][0], p->ev[i][1]);
        prof_row *r = &p->rows[p->which[i]];
        r->ms += ms;
        r->bytes += p->bytes[i];
        r->calls++;
    }
    p->n_ev = 0;
}

int cu_prof_begin(cu_state *s) {
    cu_prof *p = s->prof;
    if (!p) return -1;
    if (p->n_ev == PROF_EVENTS) cu_prof_harvest(s);
    cudaEventRecord(p->ev[p->n_ev][0], s->stream);
    return p->n_ev++;
}

void cu_prof_end(cu_state *s, int slot, const char *name, double bytes) {
    cu_prof *p = s->prof;
    if (!p || slot < 0) return;
    cudaEventRecord(p->ev[slot][1], s->stream);
    int k = 0;
    while (k < p->n_rows && strcmp(p->rows[k].name, name) != 0) k++;
    if (k == p->n_rows) {
        if (p->n_rows == PROF_NAMES) k = PROF_NAMES - 1; /* lumped into the last row */
        else snprintf(p->rows[p->n_rows++].name, sizeof p->rows[0].name, "%s", name);
    }
    p->which[slot] = k;
    p->bytes[slot] = bytes;
}

static int by_time(const void *a, const void *b) {
    double d = ((const prof_row *)b)->ms - ((const prof_row *)a)->ms;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

void cu_prof_report(cu_state *s) {
    cu_prof *p = s->prof;
    if (!p) return;
    cu_prof_harvest(s);
    double total = 0;
    for (int i = 0; i < p->n_rows; i++) total += p->rows[i].ms;
    qsort(p->rows, (size_t)p->n_rows, sizeof p->rows[0], by_time);
    fprintf(stderr, "cuda profile (GPU time per op, all calls; GB/s = bytes the op must read / time)\n");
    fprintf(stderr, "%-44s %8s %10s %9s %7s %8s\n", "op", "calls", "total ms", "avg us", "share", "GB/s");
    for (int i = 0; i < p->n_rows; i++) {
        prof_row *r = &p->rows[i];
        fprintf(stderr, "%-44s %8ld %10.2f %9.2f %6.1f%% %8.0f\n", r->name, r->calls, r->ms, 1e3 * r->ms / r->calls,
                100 * r->ms / total, r->ms > 0 ? r->bytes / (r->ms * 1e-3) / 1e9 : 0);
    }
    for (int i = 0; i < PROF_EVENTS; i++)
        for (int k = 0; k < 2; k++) cudaEventDestroy(p->ev[i][k]);
    free(p);
    s->prof = NULL;
}
