/* cuda_int.h — state shared by the CUDA backend's files (C++ only, not part of backend.h).
 *
 * Owns: the backend state (device, stream, cuBLAS handle, scratch buffers sized at warm-up),
 * the error check that aborts on a failed CUDA call inside an op (ops have no error path: a
 * failure there is a bug or a lost device), the cache of small host index arrays (token ids,
 * positions, sequence ids) copied to the device, and the entry points of each op family's file.
 * Does not own: the op table (cuda_backend.cu), kernels (cuda_*.cu).
 */
#ifndef OB_CUDA_INT_H
#define OB_CUDA_INT_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/backend.h"
extern "C" {
#include "format/quant.h"
}

#define CU_IDX_SLOTS 8

/* A device copy of a small host int32 array, kept while its contents are asked for again: every
 * layer of one forward pass passes the same positions and sequence ids. */
typedef struct {
    int32_t *host;    /* pinned [cap] */
    int32_t *dev;     /* [cap] */
    int n, cap;
    cudaEvent_t done; /* the copy out of host has finished: host may be rewritten */
} cu_idx_slot;

/* tokens up to which matmul runs the fused decode kernels (above: dequantize + tensor cores; for
 * int8-path weights in steps of distinct sequences from 13, or from 5 once the weight has its f16
 * copy, cu_gemv_takes: run 12, +70% batched decode at 32 streams; run 13, the copies +33% to +48%
 * at 12-64 streams); 64 measured 12% / 33% less serving throughput at 32 / 64 streams
 * (docs/bench.md, run 10) */
#define CU_GEMV_MAX 32
#define CU_ATTN_RUN_MIN 64 /* tokens from which one sequence's consecutive positions take the prompt attention kernels */
#define CU_MULTI_MAX 3  /* weights of one cu_matmul_multi call */
#define CU_QROW_MAX 32768 /* longest row the int8 activation quantizer takes (32 values per thread) */

#define GQ_SPAN_MIN 256  /* the grouped decode attention's spans: at most the context over this (cuda_attn_gqa.cu, OB_CUDA_ATTN_GQA_SPLIT) */
#define CU_GRAPHS 16      /* recorded steps kept (least recently used goes first) */

typedef struct cu_prof cu_prof; /* cuda_prof.cu */

/* A weight's f16 copy for the tensor-core path (cuda_matmul.cu). */
typedef struct {
    const void *q; /* the weight's data as uploaded */
    void *h;       /* [n_out][n_in] f16 */
} cu_f16c;

/* One recorded decode step (cuda_graph.cu). */
typedef struct {
    uint64_t key;          /* engine's step key; 0: slot unused */
    int n;                 /* tokens */
    int seen;              /* ran once eagerly (scratch has its final size) */
    int broken;            /* recording failed once: this key runs eagerly */
    uint64_t last_use;
    cudaGraphExec_t exec;
    int32_t *host;         /* pinned [3][n]: ids, positions, sequences; the graph copies them in first */
    int32_t *dev;          /* [3][n] */
    cudaEvent_t done;      /* the last replay has read host */
} cu_graph;

/* A down weight's copy in the one-token feed-forward kernel's chunks (cuda_ffn.cu). */
typedef struct {
    const void *src; /* the weight's data as uploaded */
    uint8_t *dst;    /* its chunks of K blocks a row (NULL: its memory was refused) */
    int K;
} cu_ffn_down;

/* Rows per block the decode matmul picked for a kernel and shape (cuda_gemv.cu, gv_rows). */
#define CU_ROWS_MEMO 32
typedef struct {
    const void *k;
    size_t rb;
    long rows;
    int weights, R;
    int fits; /* R's blocks all fit on the GPU at once (one wave) */
} cu_rows_pick;

typedef struct {
    int dev;
    char name[256];
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    cu_idx_slot idx[CU_IDX_SLOTS];
    int idx_next;
    void *wdeq;            /* [wdeq_cap bytes]: a weight dequantized to f16 for the tensor-core path */
    size_t wdeq_cap;
    void *xconv;           /* [xconv_cap bytes]: activations converted to f16/bf16 */
    size_t xconv_cap;
    const float *xc_src;   /* xconv holds xc_src[xc_nx] converted (xc_bf: to bf16; NULL: nothing), made by a */
    size_t xc_nx;          /* product's conversion or by the row op that wrote xc_src; forgotten as the */
    int xc_bf;             /* codes' tag is (cu_xc_tag) */
    float *xrot;           /* [xrot_cap floats]: activations rotated for lean4 weights */
    size_t xrot_cap;
    void *xq;              /* [xq_cap bytes]: activations as int8 codes + block scales (cuda_gemv.cu) */
    size_t xq_cap;
    void *xq2;             /* [xq2_cap bytes]: a second such buffer, for codes a matmul makes of its output while it */
    size_t xq2_cap;        /* reads its input's from xq (GLU codes); the two are swapped after that launch */
    const float *xq_src;   /* xq holds the codes of xq_src[xq_n][xq_dim] (NULL: of nothing); every op */
    int xq_n, xq_dim;      /* that may write memory forgets it (cu_xq_tag(s, NULL, ...)) */
    float *ytmp;           /* [ytmp_cap bytes]: a matmul's output before it is added (fallback of matmul_add) */
    size_t ytmp_cap;
    float *attn_part;      /* [attn_cap bytes]: flash-decoding partial results */
    size_t attn_cap;
    int *attn_cnt;         /* [attn_cnt_cap bytes]: spans finished per (token, head); 0 between launches */
    size_t attn_cnt_cap;
    void **allocs;         /* every live device allocation (uploads are freed with the backend) */
    int n_allocs, cap_allocs;
    cu_graph graphs[CU_GRAPHS];
    uint64_t graph_tick;
    int graphs_off;        /* OB_CUDA_GRAPH=0 */
    struct cu_steps *steps; /* OB_CUDA_STEP_TIMES=1: replays' GPU times and the host's time between launches (cuda_graph.cu) */
    int attn_tile;         /* prompt attention: 2 the tensor-core kernel where it applies (cuda_attn_mma.cu), else the
                            * float32 tiled one (cuda_attn.cu); 1 (OB_CUDA_ATTN_TILES=f32) the float32 tiled kernel
                            * only; 0 (OB_CUDA_ATTN_TILES=0) the split kernel for prompts too */
    cu_rows_pick gv_memo[CU_ROWS_MEMO];
    int glu_codes;         /* the one-token GLU makes its output's int8 codes for the matmul reading it (cuda_gemv.cu): 3 (default)
                            * where its launch is one wave, 1 (OB_CUDA_GLU_CODES=1) on q4_0 gates, 2 (=2) every type, 0 (=0) off */
    int gv_direct;         /* one token's f16 / bf16 decode matmul reads the rows of a call of at most this
                            * many MiB in place, not staged (cuda_gemv.cu, k_gv's DIRECT instance; run 19:
                            * Llama-1B F16 +6%, the 525-657 MB output matrices faster staged; run 20: the
                            * 8B's 224 MiB gate + up faster in place): OB_CUDA_GV_DIRECT=N, default 256;
                            * 0 stages every one */
    int gv_two;            /* several weights of two types on one input (Q4_K_M's Q, K and V) in one launch (cu_gemv_multi2); OB_CUDA_GV_TWO=0: a launch a type */
    int gv_hold;           /* one token's int8 decode matmul: the lanes' codes in registers, two rows at a time
                            * (cuda_gemv.cu, gv_rows_q8_held). 1 (default): up to two sub-blocks a lane, and
                            * three or four on rows long enough for all four warps (the 8B's ffn_down) in an
                            * instance of its own; 2: up to two only; 4: up to four on every row (it loses on
                            * BitNet's 2560-value rows); 0: off. Set by OB_CUDA_GV_HOLD */
    int gemv_max;          /* OB_CUDA_GEMV_MAX (1..CU_GEMV_MAX): most tokens of an int8-path weight on the staged kernel's
                            * dp4a path in a batch of distinct sequences (prompts: CU_GEMV_MAX; cu_gemv_takes) */
    int gemv_copy_max;     /* OB_CUDA_GEMV_COPY_MAX (1..CU_GEMV_MAX, default 4): the same for a weight with an f16 copy */
    int step_distinct;     /* the step's tokens are all of distinct sequences (backend step_kind) */
    int graph_max_n;       /* OB_CUDA_GRAPH_MAX: most tokens of a step that is recorded (cuda_graph.cu) */
    int blas_fuse;         /* cuBLAS products (cuda_matmul.cu): one conversion of an input for all its products, matmul_add's
                            * add in the product (beta 1) (1), and the row ops' f16 copies of their outputs (2, default);
                            * OB_CUDA_BLAS_FUSE=0 none */
    int mmq;               /* OB_CUDA_MMQ=1: matmuls the staged kernel does not take on cuda_mmq.cu's int8 tensor-core kernel */
    int pinned;            /* the engine's logits buffers page-locked (cuda_backend.cu), unless OB_CUDA_PINNED=0 */
    int mapped;            /* host_dev hands out those buffers' device addresses (the logits written in place), unless
                            * OB_CUDA_MAPPED=0 or the GPU cannot map host memory */
    int layer;             /* OB_CUDA_LAYER=1: the whole-layer decode kernel (cuda_layer.cu; 0.74-0.84x of the ops, docs/cuda.md) */
    unsigned *grid_bar;    /* the grid barriers (cuda_grid.cuh) of the layer kernel and the ffn kernel, one at a time on
                            * the stream: [0] blocks arrived, [1] generation; from byte CU_GRID_CNT0 the growing
                            * counters of grid_sync_cnt, one a grid size (cu_grid_cnt); zeroed once (cu_grid_bar) */
    size_t grid_bar_cap;
    int layer_trace;       /* OB_CUDA_LAYER_TRACE=1: time the layer kernel's stretches (printed at the end) */
    unsigned long long *layer_ticks;
    size_t layer_ticks_cap;
    int layer_grid;        /* its blocks (all resident at once), 0 before the first call */
    int rows_wide;         /* row ops on 1024 threads from 2048 values (cuda_ops.cu): 2 all (default), 1 those without a norm
                            * (OB_CUDA_ROWS_WIDE=1, or OB_CUDA_LAYER=1), 0 none (OB_CUDA_ROWS_WIDE=0) */
    int rows_slices;       /* OB_CUDA_ROWS_SLICES=N: a decode row op's blocks a row at most N (0, default: 2 an SM, at
                            * most one a 256 values: 8 on the 1B's rows; one-token row ops at most ffn_free once the
                            * feed-forward kernel ran: its next norm starts on the SMs it leaves free, one block each,
                            * +4.3% on the 1B Q4_0, run 28; alone 4 is level), else those with act_quant_i8 at most 8
                            * (ROWS_AQ_SLICES: BitNet's norms, +2.1%, run 37) */
    int rows_wpre;         /* RMSNorm's weights read before the row kernel waits (cuda_ops.cu), unless OB_CUDA_ROWS_WPRE=0 */
    int rope_attn;         /* decode's rope_kv inside the attention kernel (cu_rope_attention), unless OB_CUDA_ROPE_ATTN=0 */
    int attn_codes;        /* the decode attention makes its output's int8 codes (cuda_attn.cu), unless OB_CUDA_ATTN_CODES=0 */
    int attn_split;        /* OB_CUDA_ATTN_SPLIT: blocks per SM from which the decode attention takes one span a token */
    int attn_gqa;          /* OB_CUDA_ATTN_GQA=N (default 5, 0: off): decode batches of N+ tokens on the grouped tensor-core kernel (cuda_attn_gqa.cu) */
    int attn_gqa_rope;     /* OB_CUDA_ATTN_GQA_ROPE=N (default 1; 0 off; unset, off with OB_CUDA_ATTN_GQA=0): steps of N+ distinct sequences on its fused form (rope_attention) */
    int angles;            /* a step's RoPE angles computed once, by its first launch of the grouped attention's fused form, and
                            * read by the later layers' (cu_rope_attention_gqa; tg128 +1.4-5.9%, run 22), unless OB_CUDA_ANGLES=0: by
                            * every layer's */
    float *ang;            /* [ang_cap bytes]: those angles, [n][n_rot] (a token's cos of each pair, then its sin) */
    size_t ang_cap;
    int32_t *ang_pos;      /* host [ang_n]: the positions whose angles ang holds (ang_n 0: none; every recording forgets them) */
    int ang_n, ang_pos_cap;
    ob_rope ang_rope;      /* ... and their rope */
    const int32_t *ang_host; /* the host positions of the rope_attention call under way (NULL: none) */
    unsigned long ang_launch; /* s->launches after the launch that wrote them */
    unsigned long ang_touch;  /* ... after the last launch that read or wrote them */
    unsigned long launches;  /* kernels launched by cu_launch so far */
    int attn_gqa_split;    /* that kernel cuts long contexts into spans, at most the context over GQ_SPAN_MIN (cuda_attn_gqa.cu);
                            * OB_CUDA_ATTN_GQA_SPLIT=N (64 to 2^20): over N; 0: not cut */
    int attn_mk;           /* the decode attention's instance for the head size with q in registers (2, default), without (OB_CUDA_ATTN_MK=1), the general one (=0) (cuda_attn.cu) */
    int pdl;               /* programmatic dependent launches (cu_launch): sm_90+, unless OB_CUDA_PDL=0 */
    cu_graph *cap;         /* the step being recorded, or NULL */
    const int32_t *cap_arr[3]; /* its host index arrays: cu_idx maps them to cap->dev */
    int cap_bad;           /* something not recordable happened during the recording */
    const char *cap_why;   /* ... an operation that failed there (said when the recording is dropped), or NULL */
    cu_prof *prof;         /* OB_CUDA_PROFILE=1: per-op GPU times, else NULL */
    int f16_copy;          /* weights that reach the tensor-core path keep their f16 copy while memory allows (cuda_matmul.cu),
                            * unless OB_CUDA_F16_COPY=0 */
    cu_f16c *f16c;         /* those copies */
    int n_f16c, cap_f16c;
    int f16c_full;         /* a copy was refused for memory (said once) */
    int ffn;               /* one token's feed-forward block in one launch where it applies (cuda_ffn.cu): 2 (default on sm_90,
                            * its weights staged by bulk copies), 1 (OB_CUDA_FFN=1: threads' copies), 0 off */
    int ffn_coop;          /* its launches cooperative (OB_CUDA_FFN_COOP=1: a GPU shared through MPS) */
    int ffn_free;          /* the SMs its last launch left free (0: none yet, or a one-token call since declined): decode row ops take at most that many blocks a row */
    int ffn_k;             /* q4_K weights taken (OB_CUDA_FFN_K=0: not) */
    int ffn_t;             /* ternary weights taken, with BitNet's sub-norm and act_quant_i8: 1 tq1_0, 2 tq2_0 (OB_CUDA_FFN_T) */
    struct cu_ffn_fit {    /* its launch plans, one a down type kind (q6_K's, the others'; Q4_K_M mixes both): */
        int t, td, d, k, per; /* for gate / up type t, down type td, rows of d values (k 0: they do not fit; d 0: none yet) */
        int64_t ff;        /* and ff intermediate ones */
        size_t rb, smem;
    } ffn_fit[2];
    float *ffn_part;       /* [ffn_part_cap bytes]: its blocks' shares of down's outputs */
    size_t ffn_part_cap;
    cu_ffn_down *ffn_d;    /* its down copies */
    int n_ffn_d, cap_ffn_d;
    int ffn_trace;         /* OB_CUDA_FFN_TRACE=1: time its stretches (printed at the end) */
    long long *ffn_ticks;
    size_t ffn_ticks_cap;
    int ffn_trace_nb;
} cu_state;

/* Aborts with the call and CUDA's message when e is an error. */
void cu_check(cudaError_t e, const char *what);
/* cu_check for a stream operation: inside a recording an error drops the recording instead (the
 * step then runs eagerly, cuda_graph.cu; a failed call invalidates the whole capture). */
static inline void cu_check_op(cu_state *s, cudaError_t e, const char *what) {
    if (e != cudaSuccess && s->cap) {
        cudaGetLastError();
        s->cap_bad = 1;
        s->cap_why = what;
        return;
    }
    cu_check(e, what);
}
void cu_check_blas(cublasStatus_t e, const char *what);
/* Last launch's error. */
#define CU_LAUNCHED(what) cu_check(cudaGetLastError(), what)

/* Programmatic dependent launch (sm_90 and newer, s->pdl; OB_CUDA_PDL=0 turns it off): a kernel
 * launched by cu_launch may be scheduled while the stream's previous kernel still runs, so that
 * its launch and its prologue (k_gv: the weights' staging copies) overlap that kernel's tail.
 * Hence every kernel of this backend calls cu_dep() in every thread before it reads or writes
 * memory an earlier op may touch: it waits until the previous kernel has finished and its
 * writes are visible (which, as that kernel waited for its own predecessor, orders it after
 * every earlier op), then lets the next kernel be scheduled. Before the PDL machine (sm_80) both
 * are no-ops and launches are ordered as usual. What no op writes during a step (weights, norm
 * weights, biases, RoPE frequency factors, positions copied before the step) a kernel reads
 * before cu_dep(): read after, such small constants come from HBM on the critical path (a decode
 * step streams the weights through L2), about 1-2 us each (docs/cuda.md). The next kernel is let
 * go only here, after the wait: letting it go at the start of every kernel, so that a chain of
 * kernels waits resident ahead of the running one, was slower (tg128 -7% Llama-3.2-1B Q4_0, -8%
 * Q4_K_M, -12% BitNet-2B TQ2_0; docs/cuda.md). */
__device__ __forceinline__ void cu_dep() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Launches k<<<grid, block, smem>>>(args...) on s's stream (see cu_dep) and checks the launch;
 * coop: as a cooperative launch (every block resident at once, or none started: the kernels with
 * a grid barrier, cuda_grid.cuh, where another stream or process shares the GPU). */
template <typename... P, typename... A>
static inline void cu_launch_as(cu_state *s, const char *what, int coop, dim3 grid, dim3 block, size_t smem, void (*k)(P...), A... args) {
    cudaLaunchConfig_t c = {};
    cudaLaunchAttribute at[2];
    int na = 0;
    if (s->pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (coop) {
        at[na].id = cudaLaunchAttributeCooperative;
        at[na++].val.cooperative = 1;
    }
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = s->stream;
    c.attrs = at;
    c.numAttrs = na;
    s->launches++;
    cu_check_op(s, cudaLaunchKernelEx(&c, k, args...), what);
}

template <typename... P, typename... A>
static inline void cu_launch(cu_state *s, const char *what, dim3 grid, dim3 block, size_t smem, void (*k)(P...), A... args) {
    cu_launch_as(s, what, 0, grid, block, smem, k, args...);
}

/* Room for one more element in the host array *p of *cap elements of elem bytes that holds n
 * (doubled, from 64); 0 when out of memory (*p as it was). */
static inline int cu_grow(void **p, int n, int *cap, size_t elem) {
    if (n < *cap) return 1;
    const int c = *cap ? 2 * *cap : 64;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* The grid barrier's counters, zeroed at their first use (NULL inside a recording before it: the
 * recording is then dropped, cu_reserve). */
unsigned *cu_grid_bar(cu_state *s);
/* grid_sync_cnt's counter for grids of nb blocks (NULL: none yet, inside a recording; nb past
 * CU_GRID_MAXB). It relies on cu_dep's rule (every kernel waits, in every thread, for the
 * previous one to end): a launch reads its target only once every earlier launch has added its
 * grid size. */
#define CU_GRID_CNT0 16
#define CU_GRID_MAXB 256
#define CU_GRID_BYTES (CU_GRID_CNT0 + CU_GRID_MAXB * 8)
unsigned long long *cu_grid_cnt(cu_state *s, int nb);

/* Device copy of host[n] (see cu_idx_slot). */
const int32_t *cu_idx(cu_state *s, const int32_t *host, int n);
/* Grows a scratch buffer (warm-up only: the forward pass reaches its largest shapes first). */
void cu_reserve(cu_state *s, void **buf, size_t *cap, size_t bytes);

/* cuda_graph.cu: the backend's graph_begin / graph_end, and forgetting every recording (after a
 * buffer a recording may name was freed or moved) */
int cu_graph_begin(cu_state *s, uint64_t key, const int32_t *ids, const int32_t *pos, const int32_t *seq, int n);
int cu_graph_end(cu_state *s);
void cu_graph_forget(cu_state *s);
void cu_graph_free(cu_state *s);
/* OB_CUDA_STEP_TIMES=1: starts the record (at init); the medians on stderr and the record freed (at free) */
void cu_steps_init(cu_state *s);
void cu_steps_report(cu_state *s);

/* cuda_prof.cu: per-op GPU times when OB_CUDA_PROFILE=1 (begin returns a slot, or -1 when off) */
void cu_prof_init(cu_state *s);
int cu_prof_begin(cu_state *s);
void cu_prof_end(cu_state *s, int slot, const char *name, double bytes);
void cu_prof_harvest(cu_state *s);
void cu_prof_report(cu_state *s);

/* cuda_matmul.cu */
int cu_matmul_supports(int type);
void cu_matmul(cu_state *s, const ob_weight *w, const float *x, float *y, int n);
void cu_get_rows(cu_state *s, const ob_weight *w, const int32_t *ids, int n, float *y);
/* Forgets (and frees) the f16 copy of the weight at data, if it has one (its memory is freed). */
void cu_f16_copy_forget(cu_state *s, const void *data);
/* Nonzero when the weight at data has an f16 copy. */
int cu_f16_copy_has(const cu_state *s, const void *data);
/* the fused ops of backend.h (matmul_add, matmul_multi with count <= CU_MULTI_MAX, matmul_glu) */
void cu_matmul_add(cu_state *s, const ob_weight *w, const float *x, float *y, int n);
void cu_matmul_multi(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n);
void cu_matmul_glu(cu_state *s, ob_act act, const ob_weight *g, const ob_weight *u, const float *x, float *gate, float *up, int n,
                   const ob_weight *out_to);

/* cuda_gemv.cu: the staged decode kernel for n <= CU_GEMV_MAX tokens (x already rotated for
 * lean4); each returns 0 without launching anything when the weights do not suit it */
int cu_gemv(cu_state *s, const ob_weight *w, const float *x, float *y, int n, int add);
/* Nonzero when the staged decode kernel takes n tokens of w: up to CU_GEMV_MAX, but int8-path
 * types in a step of distinct sequences only up to s->gemv_max, or s->gemv_copy_max where w has
 * an f16 copy (above: cuBLAS, whose 16-bit activations differ from the int8 path's codes: a prompt
 * keeps the products of token-by-token decoding). */
int cu_gemv_takes(const cu_state *s, const ob_weight *w, int n);
/* Nonzero when w (NULL: no) on n tokens reads int8 codes of its input that its producer may hand
 * it (cu_gemv_takes on an int8-path type but lean4, which quantizes its rotated input): the rule
 * of the attention's codes for `wo` and the GLU's for `ffn_down` */
int cu_reads_codes(const cu_state *s, const ob_weight *w, int n);
/* y = x . W^T for any weight cu_gemv declines (n <= CU_GEMV_MAX), float path, rows read in place */
void cu_gemv_fallback(cu_state *s, const ob_weight *w, const float *x, float *y, int n);
/* The int8 activation buffers for n rows of dim (grown as needed), and what they hold. */
void cu_xq_bufs(cu_state *s, int n, int dim, int8_t **codes, float2 **scales);
/* The codes of x[n][dim] in the codes buffer: quantized (cu_quant_rows) and tagged unless the tag
 * says the buffer holds them already */
void cu_xq_codes(cu_state *s, const float *x, int n, int dim, int8_t **codes, float2 **scales);
void cu_xq_tag(cu_state *s, const float *src, int n, int dim);
/* xconv holds src[nx] as f16 (bf16 when bf); NULL: nothing (cuda_matmul.cu) */
void cu_xc_tag(cu_state *s, const float *src, size_t nx, int bf);
/* an f16 copy of n rows of dim that a row op writes for the cuBLAS products that may read them
 * (xconv, reserved), or NULL where none would */
__half *cu_xc_rows(cu_state *s, int n, int dim);
/* cuda_ops.cu: the int8 codes and block scales of n rows of dim (a multiple of 32, at most
 * CU_QROW_MAX), as the CPU's quantizer makes them (cuda_q8.cuh, quant_regs) */
void cu_quant_rows(cu_state *s, const float *x, int n, int dim, int8_t *q, float2 *xs);
/* cuda_mmq.cu: y (add: +=) = x . W^T on the int8 tensor cores for n > CU_GEMV_MAX tokens when
 * OB_CUDA_MMQ=1 and w's type has one integer sum per sub-block; 0 when it declines */
int cu_mmq(cu_state *s, const ob_weight *w, const float *x, float *y, int n, int add);
/* whether cu_mmq would take w at n tokens */
int cu_mmq_takes(const cu_state *s, const ob_weight *w, int n);
int cu_gemv_multi(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n);
/* the same for weights of two types (a pair k_gv2 is built for); 0 when it declines */
int cu_gemv_multi2(cu_state *s, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n);
int cu_gemv_glu(cu_state *s, int relu2, const ob_weight *g, const ob_weight *u, const float *x, float *out, int n, const ob_weight *out_to);

/* cuda_ops.cu: row-wise ops, arguments as backend.h's (index arrays already on the device) */
void cu_rmsnorm(cu_state *s, const float *x, const float *w, float *y, int n, int dim, float eps);
void cu_rope(cu_state *s, float *x, int n, int n_head, int head_dim, const int32_t *pos, const ob_rope *r);
/* rope of q and k, then kv_write of k and v, as backend.h's rope_kv (a's pos / seq on the device) */
void cu_rope_kv(cu_state *s, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r);
void cu_kv_write(cu_state *s, void *cache, int type, const float *x, int n, int dim, int n_ctx, const int32_t *pos,
                 const int32_t *seq);
void cu_add(cu_state *s, float *y, const float *x, size_t n);
void cu_add_bias(cu_state *s, float *y, const float *bias, int n, int dim);
void cu_glu(cu_state *s, ob_act act, float *gate, const float *up, size_t n);
void cu_act_quant_i8(cu_state *s, float *x, int n, int dim);
void cu_rmsnorm_act_quant(cu_state *s, const float *x, const float *w, float *y, int n, int dim, float eps);

/* cuda_attn.cu: a->pos / a->seq already on the device; the tiled prompt kernel (when s->attn_tile,
 * for a chunk of one sequence's consecutive positions, which the host arrays show) returns 0
 * without launching anything when the batch does not suit it */
void cu_attention(cu_state *s, const ob_attn_args *a);
/* backend.h's rope_attention: rope_kv and the split attention kernel in one launch, for tokens of
 * distinct sequences (a->q, k, v unrotated; a's pos / seq on the device), where _ok says it
 * applies (on: s->rope_attn, and the shapes suit it) */
int cu_rope_attention_ok(const cu_state *s, const ob_attn_args *a, const ob_rope *r);
void cu_rope_attention(cu_state *s, const ob_attn_args *a, const float *k, const float *v, const ob_rope *r);
void cu_attention_tiles_init(cu_state *s);
/* cuda_attn_mma.cu: the tensor-core prompt kernel for f16 caches and head size 64 or 128 (0: not
 * launched, the batch does not suit it); krb..vhb as cu_attention computes them */
int cu_attention_mma(cu_state *s, const ob_attn_args *a, size_t krb, size_t vrb, size_t khb, size_t vhb);
void cu_attention_mma_init(cu_state *s);
/* cuda_attn_gqa.cu: a batch's decode attention on the tensor cores, a block per (token, KV head),
 * where _ok says it applies (OB_CUDA_ATTN_GQA, default 5 tokens; f16 caches, head size 64 / 128, at most 16
 * query heads a KV head); 0: not launched */
int cu_attention_gqa_ok(const cu_state *s, const ob_attn_args *a);
int cu_attention_gqa(cu_state *s, const ob_attn_args *a);
/* its fused form for steps of distinct sequences (rope_attention's contract: RoPE, the cache
 * writes and the output's codes for `wo` in the same launch; from one token by
 * default, OB_CUDA_ATTN_GQA_ROPE=N from N); 0: not launched */
int cu_rope_attention_gqa_ok(const cu_state *s, const ob_attn_args *a, const ob_rope *r);
int cu_rope_attention_gqa(cu_state *s, const ob_attn_args *a, const float *k, const float *v, const ob_rope *r);
/* the int8 codes of an attention's output for `wo` where it reads them (cuda_attn.cu: q NULL none) */
void cu_attn_codes(cu_state *s, const ob_attn_args *a, int8_t **q, float2 **xs);
void cu_attention_gqa_init(cu_state *s);
int cu_attention_tiles(cu_state *s, const ob_attn_args *a, const int32_t *host_pos, const int32_t *host_seq);
/* spans per token of the decode attention (reserves their scratch: s->attn_part, s->attn_cnt) */
int cu_attn_splits(cu_state *s, const ob_attn_args *a);
/* that scratch: at least part_floats partial results and counters (zero between launches) */
void cu_attn_scratch(cu_state *s, size_t part_floats, size_t counters);
/* cuda_layer.cu: one decode layer in one launch (backend.h's layer_decode; l's pos / seq on the
 * device, profiled as one op), 0 without launching anything when the kernel is off or the layer
 * does not suit it */
int cu_layer(cu_state *s, const ob_layer_args *l);
void cu_layer_trace_report(cu_state *s);
/* cuda_ffn.cu: backend.h's ffn_decode for one token where _takes says it applies (s->ffn, q4_0
 * or q4_K weights, or with bulk copies ternary ones, whose split fits the GPU; sub: a sub-norm or
 * act_quant_i8 comes with it, which the ternary forms alone take: then it has made down's chunked
 * copy and the plan that cu_ffn launches, sw the sub-norm's weights or NULL, aq act_quant_i8, hb
 * the GLU values' buffer [n_ff]); _forget drops the copy
 * of the weight at data (freed), _free every copy */
typedef struct {
    int K, per;           /* sub-blocks a block, norm values a thread */
    size_t smem;
    const uint8_t *down;  /* down's chunked copy */
    int type, dtype;      /* gate and up's type, down's (q4_0 and q4_0, q4_K and q4_K or q6_K, a ternary type thrice) */
} cu_ffn_plan;
int cu_ffn_takes(cu_state *s, const ob_weight *g, const ob_weight *u, const ob_weight *dw, int n, int sub, cu_ffn_plan *p);
int cu_ffn(cu_state *s, const cu_ffn_plan *p, ob_act act, const float *w, float eps, const ob_weight *g, const ob_weight *u,
           const ob_weight *dw, const float *sw, int aq, float *x, float *hb);
void cu_ffn_forget(cu_state *s, const void *data);
void cu_ffn_free(cu_state *s);
void cu_ffn_trace_report(cu_state *s);

#endif
