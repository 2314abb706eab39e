/* cuda_graph.cu — decode steps recorded as CUDA graphs and replayed.
 *
 * Owns: the recordings (one per engine step key: context, token count, output rows), their
 * life cycle and what makes a replay correct. A decode step is a few hundred small kernels;
 * launched one by one, the CPU's launch cost and the gaps between kernels exceed the kernels'
 * own time on the 1-2B models. Replaying a graph costs one launch.
 *  - The first step of a key runs eagerly (scratch buffers reach their size), the second is
 *    recorded by stream capture and launched, later ones are replays.
 *  - Steps of up to s->graph_max_n tokens (OB_CUDA_GRAPH_MAX, 64 by default) are recorded, but not
 *    one sequence's run of CU_ATTN_RUN_MIN or more (a prompt chunk: its attention kernel is chosen
 *    from the positions on the host), so that a key never replays another kind of step's kernels.
 *  - The only inputs that change between steps of one key are the token ids, positions and
 *    sequence ids: a recording starts with a copy of them from its pinned host buffer, which
 *    graph_begin refills before each replay; cu_idx hands the ops the recording's device copy.
 *    Everything else a kernel reads (weights, the context's buffers, scratch) keeps its address;
 *    every kernel that depends on positions reads them on the device (attention chooses its
 *    spans there).
 *  - Freeing any buffer or growing scratch forgets every recording (cu_graph_forget), since a
 *    recording names addresses.
 *  - Anything not recordable during a recording (scratch growth, an unexpected index array, a
 *    capture error) marks the key broken: graph_end reports it, the engine issues the ops again
 *    eagerly, and that key is never recorded again.
 * OB_CUDA_GRAPH=0 turns recording off (for A/B timing).
 * Does not own: the ops (cuda_*.cu), the step key (engine/forward.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_int.h"

/* OB_CUDA_STEP_TIMES=1 (a measurement): for every replay, the GPU's time from an event recorded
 * before its launch to one after it (the stream is idle when the host launches a step, so that is
 * the graph's own time), and the host's time from one replay's launch to the next. Their medians,
 * reported at the end, say how long the GPU idles between the steps of a run of decode steps: the
 * logits' download after the graph, the host's wake-up, its own work and its next launch. */
struct cu_steps {
    cudaEvent_t ev[2];
    int pending;          /* ev holds a replay not yet read */
    double last_us;       /* the host's clock at the last launch (0: none yet) */
    float *gpu, *between; /* [n] each: us */
    int n, n_between, cap;
};

static double steps_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

void cu_steps_init(cu_state *s) {
    cu_steps *st = (cu_steps *)calloc(1, sizeof *st);
    if (!st || cudaEventCreate(&st->ev[0]) != cudaSuccess || cudaEventCreate(&st->ev[1]) != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "cuda backend: OB_CUDA_STEP_TIMES: no events; not measured\n");
        free(st);
        return;
    }
    s->steps = st;
}

/* The last replay's GPU time into the record. */
static void steps_harvest(cu_steps *st) {
    float ms = 0;
    if (!st->pending || cudaEventSynchronize(st->ev[1]) != cudaSuccess || cudaEventElapsedTime(&ms, st->ev[0], st->ev[1]) != cudaSuccess)
        return;
    st->pending = 0;
    if (st->n < st->cap) st->gpu[st->n++] = ms * 1000.0f;
}

/* Before a replay's launch (after after: the event after it). */
static void steps_mark(cu_state *s, int after) {
    cu_steps *st = s->steps;
    if (after) {
        if (cudaEventRecord(st->ev[1], s->stream) == cudaSuccess) st->pending = 1;
        return;
    }
    steps_harvest(st);
    if (st->n >= st->cap || st->n_between >= st->cap) {
        const int cap = st->cap ? 2 * st->cap : 4096;
        float *g = (float *)realloc(st->gpu, cap * sizeof(float)), *b = g ? (float *)realloc(st->between, cap * sizeof(float)) : NULL;
        if (g) st->gpu = g;
        if (b) st->between = b;
        if (g && b) st->cap = cap;
    }
    const double now = steps_now_us();
    if (st->last_us > 0 && st->n_between < st->cap) st->between[st->n_between++] = (float)(now - st->last_us);
    st->last_us = now;
    cudaEventRecord(st->ev[0], s->stream);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n) {
    qsort(v, n, sizeof *v, cmp_float);
    return n ? v[n / 2] : 0.0f;
}

void cu_steps_report(cu_state *s) {
    cu_steps *st = s->steps;
    if (!st) return;
    steps_harvest(st);
    /* (the time between launches holds the gaps between a benchmark's repetitions too: the median) */
    if (st->n && st->n_between) {
        const float g = median(st->gpu, st->n), w = median(st->between, st->n_between);
        fprintf(stderr, "cuda step times: %d replays, median GPU time %.1f us, median time between launches %.1f us (GPU idle about %.1f us a step)\n",
                st->n, g, w, w - g);
    }
    cudaEventDestroy(st->ev[0]);
    cudaEventDestroy(st->ev[1]);
    free(st->gpu);
    free(st->between);
    free(st);
    s->steps = NULL;
}

static long graph_replays; /* steps replayed, every backend of the process (tests) */

extern "C" long ob_cuda_graph_replays(void) { return __atomic_load_n(&graph_replays, __ATOMIC_RELAXED); }

static void graph_reset(cu_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->host) cudaFreeHost(g->host);
    if (g->dev) cudaFree(g->dev);
    if (g->done) cudaEventDestroy(g->done);
    memset(g, 0, sizeof *g);
}

void cu_graph_forget(cu_state *s) {
    for (int i = 0; i < CU_GRAPHS; i++) {
        cu_graph *g = &s->graphs[i];
        if (g->exec) cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->seen = 0; /* run eagerly once more: scratch may have to grow first */
    }
}

void cu_graph_free(cu_state *s) {
    for (int i = 0; i < CU_GRAPHS; i++) graph_reset(&s->graphs[i]);
}

static cu_graph *graph_find(cu_state *s, uint64_t key, int n) {
    cu_graph *lru = &s->graphs[0];
    for (int i = 0; i < CU_GRAPHS; i++) {
        cu_graph *g = &s->graphs[i];
        if (g->key == key && g->n == n) return g;
        if (g->last_use < lru->last_use) lru = g;
    }
    graph_reset(lru);
    lru->key = key;
    lru->n = n;
    return lru;
}

int cu_graph_begin(cu_state *s, uint64_t key, const int32_t *ids, const int32_t *pos, const int32_t *seq, int n) {
    if (s->graphs_off || n < 1 || n > s->graph_max_n || s->cap) return 0;
    if (n >= CU_ATTN_RUN_MIN) { /* a prompt run takes other attention kernels than a batch of the same size */
        int run = 1;
        for (int i = 1; i < n && run; i++) run = seq[i] == seq[0] && pos[i] == pos[0] + i;
        if (run) return 0;
    }
    cu_graph *g = graph_find(s, key, n);
    g->last_use = ++s->graph_tick;
    if (g->broken) return 0;
    if (!g->seen) {
        g->seen = 1;
        return 0;
    }
    if (!g->host) {
        if (cudaMallocHost((void **)&g->host, 3 * (size_t)n * sizeof(int32_t)) != cudaSuccess ||
            cudaMalloc((void **)&g->dev, 3 * (size_t)n * sizeof(int32_t)) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            g->broken = 1;
            return 0;
        }
    }
    cu_check(cudaEventSynchronize(g->done), "graph input");
    memcpy(g->host, ids, (size_t)n * sizeof(int32_t));
    memcpy(g->host + n, pos, (size_t)n * sizeof(int32_t));
    memcpy(g->host + 2 * n, seq, (size_t)n * sizeof(int32_t));
    if (g->exec) {
        if (s->steps) steps_mark(s, 0);
        cu_check(cudaGraphLaunch(g->exec, s->stream), "cudaGraphLaunch");
        if (s->steps) steps_mark(s, 1);
        cu_check(cudaEventRecord(g->done, s->stream), "graph input");
        __atomic_add_fetch(&graph_replays, 1, __ATOMIC_RELAXED);
        return 1;
    }
    if (cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        g->broken = 1;
        return 0;
    }
    s->cap = g;
    s->cap_bad = 0;
    s->cap_why = NULL;
    s->cap_arr[0] = ids;
    s->cap_arr[1] = pos;
    s->cap_arr[2] = seq;
    if (cudaMemcpyAsync(g->dev, g->host, 3 * (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, s->stream) != cudaSuccess)
        s->cap_bad = 1;
    return 0;
}

int cu_graph_end(cu_state *s) {
    cu_graph *g = s->cap;
    if (!g) return 0;
    s->cap = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
    if (e == cudaSuccess && !s->cap_bad && graph) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || s->cap_bad || !g->exec) {
        /* not an expected refusal (scratch growth, an index array): say so once per key */
        if (e != cudaSuccess || s->cap_why)
            fprintf(stderr, "cuda backend: a decode step could not be recorded as a CUDA graph (%s%s%s%s); it runs eagerly\n",
                    s->cap_why ? s->cap_why : "", s->cap_why ? " failed inside it" : "", s->cap_why && e != cudaSuccess ? ": " : "",
                    e != cudaSuccess ? cudaGetErrorString(e) : "");
        s->cap_why = NULL;
        cudaGetLastError();
        if (g->exec) cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->broken = 1;
        s->cap_bad = 0;
        return -1;
    }
    cu_check(cudaGraphLaunch(g->exec, s->stream), "cudaGraphLaunch");
    cu_check(cudaEventRecord(g->done, s->stream), "graph input");
    return 0;
}
