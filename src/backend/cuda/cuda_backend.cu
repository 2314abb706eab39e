/* cuda_backend.cu — the CUDA backend's op table: device setup, memory, and dispatch to the
 * op families' files.
 *
 * Owns: choosing and checking the GPU (present, compute capability 8.0 or newer), one stream on
 * which every op is queued in order, the cuBLAS handle, device allocations (weights uploaded
 * once and freed with the backend), the host index arrays' device copies (cu_idx: token ids,
 * positions and sequence ids are the only host data an op receives; each distinct array is
 * copied once through pinned memory and reused by every layer), and the scratch growth rule.
 * Only the new token ids go up and only the logits come down per step: activations and the
 * KV cache stay on the device (engine/forward.c allocates them through this table).
 * Does not own: kernels (cuda_matmul.cu, cuda_ops.cu, cuda_attn.cu), recorded steps (cuda_graph.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_quant.cuh"

void cu_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "cuda backend: %s: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    abort();
}

void cu_check_blas(cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "cuda backend: %s: %s\n", what, cublasGetStatusString(e));
    abort();
}

static cu_state *st(ob_backend *b) { return (cu_state *)b->priv; }

/* The int8 activation codes (cu_xq_tag) stay valid only until something may write their source:
 * every op forgets them, except the matmuls, which only read their input (never in place) and
 * forget them afterwards when an output overlaps their source. */
static void xq_forget(cu_state *s) {
    cu_xq_tag(s, NULL, 0, 0);
    cu_xc_tag(s, NULL, 0, 0); /* the f16 activations of the cuBLAS path likewise (cuda_matmul.cu) */
}
static void xq_forget_if(cu_state *s, const float *y, size_t n) {
    const float *src = s->xq_src, *hs = s->xc_src;
    if (src && y < src + (size_t)s->xq_n * s->xq_dim && src < y + n) cu_xq_tag(s, NULL, 0, 0);
    if (hs && y < hs + s->xc_nx && hs < y + n) cu_xc_tag(s, NULL, 0, 0);
}

static void track(cu_state *s, void *p) {
    if (s->n_allocs == s->cap_allocs) {
        int cap = s->cap_allocs ? 2 * s->cap_allocs : 256;
        void **n = (void **)realloc(s->allocs, (size_t)cap * sizeof *n);
        if (!n) { fprintf(stderr, "cuda backend: out of host memory\n"); abort(); }
        s->allocs = n;
        s->cap_allocs = cap;
    }
    s->allocs[s->n_allocs++] = p;
}

static void untrack(cu_state *s, void *p) {
    for (int i = s->n_allocs - 1; i >= 0; i--)
        if (s->allocs[i] == p) { s->allocs[i] = s->allocs[--s->n_allocs]; return; }
}

unsigned *cu_grid_bar(cu_state *s) {
    if (!s->grid_bar) {
        cu_reserve(s, (void **)&s->grid_bar, &s->grid_bar_cap, CU_GRID_BYTES);
        if (s->grid_bar) cu_check(cudaMemsetAsync(s->grid_bar, 0, CU_GRID_BYTES, s->stream), "grid barrier");
    }
    return s->grid_bar;
}

unsigned long long *cu_grid_cnt(cu_state *s, int nb) {
    unsigned *bar = nb >= 1 && nb <= CU_GRID_MAXB ? cu_grid_bar(s) : NULL;
    return bar ? (unsigned long long *)((char *)bar + CU_GRID_CNT0) + (nb - 1) : NULL;
}

void cu_reserve(cu_state *s, void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return;
    if (s->cap) { /* no allocation inside a recording: it is dropped and the step runs eagerly */
        s->cap_bad = 1;
        return;
    }
    cu_graph_forget(s); /* recordings name the old buffer */
    if (*buf) cu_check(cudaFree(*buf), "cudaFree (scratch)"); /* synchronizes: queued users are done */
    *buf = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc(buf, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        fprintf(stderr, "cuda backend: out of GPU memory for %.1f MiB of scratch (%.1f MiB free of %.1f MiB)\n",
                bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
        abort();
    }
    *cap = bytes;
}

/* cu_idx, never overwriting the slot whose copy is keep (an array the same op already holds). */
static const int32_t *cu_idx_keep(cu_state *s, const int32_t *host, int n, const int32_t *keep) {
    if (n <= 0) return NULL;
    if (s->cap) { /* recording: the step's arrays live in the recording's own buffer */
        for (int k = 0; k < 3; k++)
            if (host == s->cap_arr[k] && n == s->cap->n) return s->cap->dev + (size_t)k * n;
        s->cap_bad = 1;
        return s->cap->dev;
    }
    for (int i = 0; i < CU_IDX_SLOTS; i++) {
        cu_idx_slot *sl = &s->idx[i];
        if (sl->n == n && memcmp(sl->host, host, (size_t)n * sizeof *host) == 0) return sl->dev;
    }
    if (keep && s->idx[s->idx_next].dev == keep) s->idx_next = (s->idx_next + 1) % CU_IDX_SLOTS;
    cu_idx_slot *sl = &s->idx[s->idx_next];
    s->idx_next = (s->idx_next + 1) % CU_IDX_SLOTS;
    cu_check(cudaEventSynchronize(sl->done), "index copy");
    if (n > sl->cap) { /* warm-up only: the largest batch */
        if (sl->host) cudaFreeHost(sl->host);
        if (sl->dev) cudaFree(sl->dev);
        cu_check(cudaMallocHost((void **)&sl->host, (size_t)n * sizeof(int32_t)), "cudaMallocHost (index array)");
        cu_check(cudaMalloc((void **)&sl->dev, (size_t)n * sizeof(int32_t)), "cudaMalloc (index array)");
        sl->cap = n;
    }
    memcpy(sl->host, host, (size_t)n * sizeof *host);
    sl->n = n;
    cu_check(cudaMemcpyAsync(sl->dev, sl->host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice, s->stream), "index copy");
    cu_check(cudaEventRecord(sl->done, s->stream), "index copy");
    return sl->dev;
}

const int32_t *cu_idx(cu_state *s, const int32_t *host, int n) { return cu_idx_keep(s, host, n, NULL); }

/* The positions and sequence ids of an op: the second copy never takes the first's slot (a hit
 * for pos in an old slot, then a miss for seq landing on that slot, would alias them). */
static void cu_idx_ps(cu_state *s, const int32_t *pos, const int32_t *seq, int n, const int32_t **dpos, const int32_t **dseq) {
    *dpos = cu_idx_keep(s, pos, n, NULL);
    *dseq = cu_idx_keep(s, seq, n, *dpos);
}

/* Whether the current GPU (compute capability major) runs this build's sm_90 code: programmatic
 * dependent launch needs both the GPU and device code compiled for it (cu_dep is
 * empty in code compiled for an older architecture, e.g. sm_80 PTX compiled for a Hopper GPU at
 * load; launched with PDL, its kernels would not wait for their predecessors). A one-thread
 * kernel reports the architecture its code was compiled for. */
__global__ void k_arch_probe(int *arch) {
#ifdef __CUDA_ARCH__
    *arch = __CUDA_ARCH__;
#endif
}
static int cu_sm90(int major) {
    int *d = NULL, arch = 0;
    if (major >= 9 && cudaMalloc((void **)&d, sizeof(int)) == cudaSuccess) {
        k_arch_probe<<<1, 1>>>(d);
        if (cudaMemcpy(&arch, d, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) arch = 0;
        cudaFree(d);
    }
    cudaGetLastError();
    return arch >= 900;
}

static int cu_init(ob_backend *b, const ob_backend_opts *o, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "device 'cuda': no usable NVIDIA GPU found (%s); use --device cpu",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        return -1;
    }
    int dev = o ? o->device_index : 0;
    if (dev < 0 || dev >= count) {
        snprintf(err, errlen, "device 'cuda': GPU index %d does not exist (this machine has %d)", dev, count);
        return -1;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) {
        snprintf(err, errlen, "device 'cuda': cannot read GPU %d's properties: %s", dev, cudaGetErrorString(e));
        return -1;
    }
    if (p.major < 8) {
        snprintf(err, errlen, "device 'cuda': GPU %d (%s) has compute capability %d.%d; the CUDA backend needs 8.0 or newer "
                 "(Ampere, Ada, Hopper, Blackwell); use --device cpu", dev, p.name, p.major, p.minor);
        return -1;
    }
    cu_state *s = (cu_state *)calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "cuda backend: out of memory"); return -1; }
    b->priv = s;
    s->dev = dev;
    s->sm_count = p.multiProcessorCount;
    const char *gr = getenv("OB_CUDA_GRAPH"), *at = getenv("OB_CUDA_ATTN_TILES");
    s->graphs_off = gr && !strcmp(gr, "0");
    const char *stt = getenv("OB_CUDA_STEP_TIMES");
    if (stt && !strcmp(stt, "1")) cu_steps_init(s);
    s->attn_tile = !at ? 2 : !strcmp(at, "0") ? 0 : !strcmp(at, "f32") ? 1 : 2;
    const char *pin = getenv("OB_CUDA_PINNED");
    s->pinned = !(pin && !strcmp(pin, "0"));
    const char *mp = getenv("OB_CUDA_MAPPED");
    s->mapped = s->pinned && p.canMapHostMemory && !(mp && !strcmp(mp, "0"));
    const char *mq = getenv("OB_CUDA_MMQ");
    s->mmq = mq && !strcmp(mq, "1");
    const char *fc = getenv("OB_CUDA_F16_COPY");
    s->f16_copy = !(fc && !strcmp(fc, "0"));
    const char *gm = getenv("OB_CUDA_GEMV_MAX");
    s->gemv_max = gm && atoi(gm) >= 1 && atoi(gm) <= CU_GEMV_MAX ? atoi(gm) : 12;
    const char *gc = getenv("OB_CUDA_GEMV_COPY_MAX");
    s->gemv_copy_max = gc && atoi(gc) >= 1 && atoi(gc) <= CU_GEMV_MAX ? atoi(gc) : 4;
    const char *gn = getenv("OB_CUDA_GRAPH_MAX");
    s->graph_max_n = gn && atoi(gn) >= 1 ? atoi(gn) : 64;
    const char *ly = getenv("OB_CUDA_LAYER");
    s->layer = ly && !strcmp(ly, "1");
    const char *ft = getenv("OB_CUDA_FFN_TRACE");
    s->ffn_trace = ft && !strcmp(ft, "1");
    const char *lt = getenv("OB_CUDA_LAYER_TRACE");
    s->layer_trace = lt && !strcmp(lt, "1");
    const char *rw = getenv("OB_CUDA_ROWS_WIDE");
    /* the whole-layer kernel's norms sum in the order of its 256-thread blocks: the ops' norms do
     * the same when it is on, so that both paths give the same bits */
    s->rows_wide = rw && !strcmp(rw, "0") ? 0 : (rw && !strcmp(rw, "1")) || s->layer ? 1 : 2;
    const char *rsl = getenv("OB_CUDA_ROWS_SLICES");
    s->rows_slices = rsl && atoi(rsl) > 0 ? atoi(rsl) : 0;
    const char *wp = getenv("OB_CUDA_ROWS_WPRE");
    s->rows_wpre = !(wp && !strcmp(wp, "0"));
    const char *gd = getenv("OB_CUDA_GV_DIRECT");
    /* matrices of at most this many MiB read in place (0: none); larger ones stage (runs 19, 20) */
    const long gdv = gd ? strtol(gd, NULL, 10) : 256;
    s->gv_direct = gdv < 0 ? 0 : gdv > (1L << 20) ? 1 << 20 : (int)gdv;
    const char *gh = getenv("OB_CUDA_GV_HOLD");
    s->gv_hold = !gh ? 1 : !strcmp(gh, "0") ? 0 : !strcmp(gh, "2") ? 2 : !strcmp(gh, "4") ? 4 : 1;
    const char *g2 = getenv("OB_CUDA_GV_TWO");
    s->gv_two = !(g2 && !strcmp(g2, "0"));
    const char *ra = getenv("OB_CUDA_ROPE_ATTN");
    s->rope_attn = !(ra && !strcmp(ra, "0"));
    const char *ac = getenv("OB_CUDA_ATTN_CODES");
    s->attn_codes = !(ac && !strcmp(ac, "0"));
    const char *sp = getenv("OB_CUDA_ATTN_SPLIT");
    s->attn_split = sp && atoi(sp) >= 1 && atoi(sp) <= 16 ? atoi(sp) : 2;
    const char *gq = getenv("OB_CUDA_ATTN_GQA");
    s->attn_gqa = !gq ? 5 : atoi(gq) >= 1 ? atoi(gq) : 0;
    /* its fused form from one token (=N: from N tokens; =0 off; unset, off with the grouped
     * kernel), spans for long contexts, the GLU's codes for ffn_down: defaults since run 15;
     * the fused form on every group size since run 16; the GLU codes where their launch is one
     * wave since run 18 (docs/bench.md) */
    const char *gqr = getenv("OB_CUDA_ATTN_GQA_ROPE");
    s->attn_gqa_rope = !gqr ? (s->attn_gqa ? 1 : 0) : atoi(gqr) >= 1 ? atoi(gqr) : 0;
    const char *glc = getenv("OB_CUDA_GLU_CODES");
    s->glu_codes = !glc ? 3 : !strcmp(glc, "0") ? 0 : !strcmp(glc, "1") ? 1 : !strcmp(glc, "2") ? 2 : 3;
    const char *gqs = getenv("OB_CUDA_ATTN_GQA_SPLIT");
    const long gqn = gqs ? strtol(gqs, NULL, 10) : 1; /* (anything else but 0: the default) */
    s->attn_gqa_split = gqs && !strcmp(gqs, "0") ? 0 : gqn >= 64 && gqn <= (1L << 20) ? (int)gqn : GQ_SPAN_MIN;
    const char *an = getenv("OB_CUDA_ANGLES");
    s->angles = !(an && !strcmp(an, "0"));
    const char *bfu = getenv("OB_CUDA_BLAS_FUSE");
    s->blas_fuse = !bfu ? 2 : !strcmp(bfu, "0") ? 0 : !strcmp(bfu, "1") ? 1 : 2;
    const char *mk = getenv("OB_CUDA_ATTN_MK");
    s->attn_mk = !mk ? 2 : !strcmp(mk, "0") ? 0 : !strcmp(mk, "1") ? 1 : 2;
    cu_prof_init(s);
    snprintf(s->name, sizeof s->name, "%s", p.name);
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "device 'cuda': cannot start GPU %d (%s): %s", dev, p.name, cudaGetErrorString(e));
        return -1;
    }
    const char *pdl = getenv("OB_CUDA_PDL");
    const int sm90 = cu_sm90(p.major);
    if (p.major >= 9 && !sm90)
        fprintf(stderr, "cuda backend: GPU %d (%s) is sm_%d%d but runs this build's code for an older architecture: programmatic "
                "launch off (slower; make CUDA=1 builds sm_90 code)\n", dev, p.name, p.major, p.minor);
    s->pdl = sm90 && !(pdl && !strcmp(pdl, "0"));
    /* one token's feed-forward block in one launch (cuda_ffn.cu): by default with bulk copies on
     * Hopper (=2, which needs the sm_90 code: programmatic launch on), run 29; =1 threads' copies
     * (slower than the separate ops, run 28), =0 off */
    const char *ff = getenv("OB_CUDA_FFN");
    s->ffn = !ff ? (s->pdl && p.major == 9 ? 2 : 0) : !strcmp(ff, "1") ? 1 : !strcmp(ff, "2") && s->pdl ? 2 : 0;
    /* its grid barrier needs every block resident at once. A plain launch has them all while no
     * other grid-barrier kernel runs beside it: this process runs one backend's steps at a time,
     * and processes without MPS take turns on the GPU. OB_CUDA_FFN_COOP=1 (a GPU shared through
     * MPS with another such process) launches it cooperatively, which guarantees it: -1.4% tg128
     * on Llama-3.2-1B Q4_0 (run 29) */
    const char *fc2 = getenv("OB_CUDA_FFN_COOP");
    s->ffn_coop = p.cooperativeLaunch && fc2 && !strcmp(fc2, "1");
    const char *fk = getenv("OB_CUDA_FFN_K");
    s->ffn_k = !(fk && !strcmp(fk, "0"));
    /* its ternary forms (BitNet's layers), a type mask: by default tq1_0 alone (tg128 +2.0% on
     * BitNet-2B TQ1_0, TQ2_0 -1.5%, run 34); OB_CUDA_FFN_T=1 tq2_0 too, =0 neither */
    const char *fft = getenv("OB_CUDA_FFN_T");
    s->ffn_t = !fft ? 1 : !strcmp(fft, "1") ? 3 : 0;
    for (int i = 0; i < CU_IDX_SLOTS; i++)
        if ((e = cudaEventCreateWithFlags(&s->idx[i].done, cudaEventDisableTiming)) != cudaSuccess) {
            snprintf(err, errlen, "device 'cuda': %s", cudaGetErrorString(e));
            return -1;
        }
    if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(s->blas, s->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "device 'cuda': cuBLAS could not start on GPU %d (%s)", dev, p.name);
        return -1;
    }
    if (s->attn_tile) cu_attention_tiles_init(s);
    if (s->attn_gqa || s->attn_gqa_rope) cu_attention_gqa_init(s);
    return 0;
}

static void cu_free(ob_backend *b) {
    cu_state *s = st(b);
    if (!s) return;
    cudaSetDevice(s->dev);
    if (s->stream) cudaStreamSynchronize(s->stream);
    cu_prof_report(s);
    cu_steps_report(s);
    cu_layer_trace_report(s);
    cu_ffn_trace_report(s);
    cu_graph_free(s);
    for (int i = 0; i < s->n_allocs; i++) cudaFree(s->allocs[i]);
    free(s->allocs);
    for (int i = 0; i < s->n_f16c; i++) cudaFree(s->f16c[i].h);
    free(s->f16c);
    free(s->ang_pos);
    cu_ffn_free(s);
    void *scratch[] = {s->wdeq, s->xconv, s->xrot, s->xq, s->xq2, s->ytmp, s->attn_part, s->attn_cnt, s->grid_bar, s->layer_ticks, s->ang,
                       s->ffn_part, s->ffn_ticks};
    for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) if (scratch[i]) cudaFree(scratch[i]);
    for (int i = 0; i < CU_IDX_SLOTS; i++) {
        if (s->idx[i].host) cudaFreeHost(s->idx[i].host);
        if (s->idx[i].dev) cudaFree(s->idx[i].dev);
        if (s->idx[i].done) cudaEventDestroy(s->idx[i].done);
    }
    if (s->blas) cublasDestroy(s->blas);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
    b->priv = NULL;
}

static int cu_mem_info(ob_backend *b, size_t *free_bytes, size_t *total_bytes) {
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -1;
}

static void *cu_alloc(ob_backend *b, size_t size) {
    void *p = NULL;
    if (cudaMalloc(&p, size ? size : 64) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error so later calls are not blamed */
        return NULL;
    }
    track(st(b), p);
    return p;
}

static void cu_dealloc(ob_backend *b, void *p) {
    if (!p) return;
    cu_f16_copy_forget(st(b), p);
    cu_ffn_forget(st(b), p);
    xq_forget(st(b)); /* a new buffer may take its address */
    cu_graph_forget(st(b)); /* a recording may name it, and a new buffer may take its address */
    st(b)->ang_n = 0;       /* likewise RoPE frequency factors the step's angles name */
    untrack(st(b), p);
    cudaFree(p);
}

/* Weights get 16 spare bytes: the staged matmul (cuda_gemv.cu) copies whole 16-byte words. The
 * copy runs on the backend's stream and is waited for: a plain cudaMemcpy from pageable memory runs
 * on the legacy stream, which does not order the backend's non-blocking stream, and may return
 * before its last bytes have reached the GPU, so a kernel launched right after could read the
 * buffer before the copy lands (test_angles saw caches that kv_write had read half-copied). */
static const void *cu_upload(ob_backend *b, const void *host, size_t size) {
    void *p = cu_alloc(b, size + 16);
    if (!p) return NULL;
    cu_state *s = st(b);
    if (cudaMemcpyAsync(p, host, size, cudaMemcpyHostToDevice, s->stream) != cudaSuccess || cudaStreamSynchronize(s->stream) != cudaSuccess) {
        cudaGetLastError();
        cu_dealloc(b, p);
        return NULL;
    }
    return p;
}

/* A weight in the layout the decoders read: the packed rows of cu_pack_rows for q4_0, q8_0, tq2_0
 * and q6_K (the bytes past the rows as they are), any other type as it is. */
static const void *cu_upload_weight(ob_backend *b, const void *host, size_t size, int type, int64_t n_in, int64_t n_out) {
    const size_t rows = ob_type_row_size(type, n_in) * (size_t)n_out;
    if (!cu_packed_type(type)) return cu_upload(b, host, size);
    if (rows == 0 || rows > size) { /* the decoders would read unpacked bytes as packed */
        fprintf(stderr, "cuda backend: a %s weight of %lld x %lld needs %zu bytes of rows, got %zu\n", ob_type_name(type),
                (long long)n_out, (long long)n_in, rows, size);
        return NULL;
    }
    uint8_t *tmp = (uint8_t *)malloc(size);
    if (!tmp) return NULL;
    cu_pack_rows(type, (const uint8_t *)host, tmp, n_in, n_out);
    memcpy(tmp + rows, (const uint8_t *)host + rows, size - rows);
    const void *p = cu_upload(b, tmp, size);
    free(tmp);
    return p;
}

static long downloads; /* download calls, every backend of the process (tests) */
extern "C" long ob_cuda_downloads(void) { return __atomic_load_n(&downloads, __ATOMIC_RELAXED); }

static void cu_download(ob_backend *b, void *host, const void *dev, size_t size) {
    cu_state *s = st(b);
    __atomic_add_fetch(&downloads, 1, __ATOMIC_RELAXED);
    cu_check(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, s->stream), "download");
    cu_check(cudaStreamSynchronize(s->stream), "download");
}

/* The engine's per-step download buffers (logits) are page-locked, so that the copy runs at full
 * bus speed without CUDA's staging copy (+4% tg128 on Llama-3.2-1B Q4_0, docs/cuda.md); plain heap
 * memory with OB_CUDA_PINNED=0 or when the pinned allocation fails. */
static void *cu_host_alloc(ob_backend *b, size_t size) {
    void *p = NULL;
    if (st(b)->pinned && cudaMallocHost(&p, size) == cudaSuccess) return p;
    cudaGetLastError();
    return malloc(size);
}

/* Whether cu_host_alloc's buffer p is page-locked (else heap memory, after a failed pinned
 * allocation or with OB_CUDA_PINNED=0); *at its attributes. */
static int cu_host_pinned(ob_backend *b, void *p, cudaPointerAttributes *at) {
    if (p && st(b)->pinned && cudaPointerGetAttributes(at, p) == cudaSuccess && at->type == cudaMemoryTypeHost) return 1;
    cudaGetLastError();
    return 0;
}

static void cu_host_free(ob_backend *b, void *p) {
    cudaPointerAttributes at;
    if (cu_host_pinned(b, p, &at)) {
        cu_graph_forget(st(b)); /* a recording may write it (host_dev) */
        cudaFreeHost(p);
    } else {
        free(p);
    }
}

/* The logits written by the vocabulary matmul's kernel straight into the page-locked buffer, in
 * the GPU's address space: no download after the step (the copy engine's ~0.5 MB of a 128k
 * vocabulary, and its start, are GPU idle time between decode steps; docs/cuda.md). NULL for heap
 * memory, with OB_CUDA_MAPPED=0, or on a GPU that cannot map host memory. */
static void *cu_host_dev(ob_backend *b, void *p) {
    cudaPointerAttributes at;
    return st(b)->mapped && cu_host_pinned(b, p, &at) ? at.devicePointer : NULL;
}

static int cu_supports(ob_backend *b, int type) { return cu_matmul_supports(type); }


/* Profiled op: the GPU time of call under name (only computed when profiling) */
#define PROF(s, name, bytes, call)                       \
    do {                                                 \
        int slot_ = cu_prof_begin(s);                    \
        call;                                            \
        if (slot_ >= 0) cu_prof_end(s, slot_, name, bytes); \
    } while (0)

/* The profile's name of a matmul op: op, type, shape (n_out < 0: only n_in), batch size class. */
static const char *mm_name(const cu_state *s, char *buf, size_t cap, const char *op, const ob_weight *w, long long n_out, int n) {
    if (!s->prof) return "";
    const char *nc = n == 1 ? "=1" : n <= 8 ? "<=8" : n <= 32 ? "<=32" : ">32";
    if (n_out < 0) snprintf(buf, cap, "%s %s %lld n%s", op, ob_type_name(w->type), (long long)w->n_in, nc);
    else snprintf(buf, cap, "%s %s %lldx%lld n%s", op, ob_type_name(w->type), (long long)w->n_in, n_out, nc);
    return buf;
}

/* matmul, or with add matmul_add */
static void matmul_op(ob_backend *b, const ob_weight *w, const float *x, float *y, int n, int add) {
    cu_state *s = st(b);
    char buf[80];
    const char *name = mm_name(s, buf, sizeof buf, add ? "matmul+add" : "matmul", w, w->n_out, n);
    PROF(s, name, (double)w->row_bytes * w->n_out, add ? cu_matmul_add(s, w, x, y, n) : cu_matmul(s, w, x, y, n));
    xq_forget_if(s, y, (size_t)n * w->n_out);
}

static void cu_op_matmul(ob_backend *b, const ob_weight *w, const float *x, float *y, int n) { matmul_op(b, w, x, y, n, 0); }
static void cu_op_matmul_add(ob_backend *b, const ob_weight *w, const float *x, float *y, int n) { matmul_op(b, w, x, y, n, 1); }

static void cu_op_matmul_multi(ob_backend *b, const ob_weight *const *ws, float *const *ys, int count, const float *x, int n) {
    cu_state *s = st(b);
    char buf[80], op[24];
    double bytes = 0;
    for (int i = 0; i < count; i++) bytes += (double)ws[i]->row_bytes * ws[i]->n_out;
    snprintf(op, sizeof op, "matmul x%d", count);
    const char *name = mm_name(s, buf, sizeof buf, op, ws[0], -1, n);
    PROF(s, name, bytes, cu_matmul_multi(s, ws, ys, count, x, n));
    for (int i = 0; i < count; i++) xq_forget_if(s, ys[i], (size_t)n * ws[i]->n_out);
}

static void cu_op_matmul_glu(ob_backend *b, ob_act act, const ob_weight *g, const ob_weight *u, const float *x, float *gate,
                             float *up, int n, const ob_weight *out_to) {
    cu_state *s = st(b);
    char buf[80];
    const char *name = mm_name(s, buf, sizeof buf, "matmul+glu", g, g->n_out, n);
    xq_forget_if(s, gate, (size_t)n * g->n_out); /* (before: the op may tag its output's codes) */
    xq_forget_if(s, up, (size_t)n * u->n_out);
    PROF(s, name, 2.0 * g->row_bytes * g->n_out, cu_matmul_glu(s, act, g, u, x, gate, up, n, out_to));
}

static int cu_op_ffn_decode(ob_backend *b, ob_act act, const float *w, float eps, const ob_weight *g, const ob_weight *u,
                            const ob_weight *d, const float *sw, int aq, float *x, float *h, float *gate, float *up, int n) {
    cu_state *s = st(b);
    cu_ffn_plan p;
    if (!cu_ffn_takes(s, g, u, d, n, sw || aq, &p)) {
        if (n == 1) s->ffn_free = 0; /* (the row ops' cap is for the norm after the kernel, not after the separate ops) */
        return 0;
    }
    int took = 0;
    char name[40] = "";
    if (s->prof) snprintf(name, sizeof name, "ffn %s%s n=1", ob_type_name(p.type), p.dtype == OB_TYPE_Q6_K ? " + q6_K" : "");
    PROF(s, name, 2.0 * g->row_bytes * g->n_out + (double)d->row_bytes * d->n_out, took = cu_ffn(s, &p, act, w, eps, g, u, d, sw, aq, x, gate));
    if (took) xq_forget(s);
    return took;
}

static void cu_op_get_rows(ob_backend *b, const ob_weight *w, const int32_t *ids, int n, float *y) {
    cu_state *s = st(b);
    xq_forget(s);
    const int32_t *d = cu_idx(s, ids, n);
    PROF(s, "get_rows", (double)w->row_bytes * n, cu_get_rows(s, w, d, n, y));
}

static void cu_op_rmsnorm(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps) {
    cu_state *s = st(b);
    PROF(s, "rmsnorm", 4.0 * n * dim, cu_rmsnorm(s, x, w, y, n, dim, eps));
}

static void cu_op_rmsnorm_act_quant(ob_backend *b, const float *x, const float *w, float *y, int n, int dim, float eps) {
    cu_state *s = st(b);
    PROF(s, "rmsnorm_act_quant", 4.0 * n * dim, cu_rmsnorm_act_quant(s, x, w, y, n, dim, eps));
}

static void cu_op_rope(ob_backend *b, float *x, int n, int n_head, int head_dim, const int32_t *pos, const ob_rope *r) {
    cu_state *s = st(b);
    xq_forget(s);
    const int32_t *d = cu_idx(s, pos, n);
    PROF(s, "rope", 4.0 * n * n_head * head_dim, cu_rope(s, x, n, n_head, head_dim, d, r));
}

static void cu_op_rope_kv(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r) {
    cu_state *s = st(b);
    xq_forget(s);
    ob_attn_args d = *a;
    cu_idx_ps(s, a->pos, a->seq, a->n, &d.pos, &d.seq);
    PROF(s, "rope_kv", 4.0 * a->n * (a->n_head + 3 * a->n_head_kv) * a->head_dim, cu_rope_kv(s, &d, q, k, v, r));
}

static void cu_op_kv_write(ob_backend *b, void *cache, int type, const float *x, int n, int dim, int n_ctx, const int32_t *pos,
                           const int32_t *seq) {
    cu_state *s = st(b);
    xq_forget(s);
    const int32_t *dpos, *dseq;
    cu_idx_ps(s, pos, seq, n, &dpos, &dseq);
    PROF(s, "kv_write", 4.0 * n * dim, cu_kv_write(s, cache, type, x, n, dim, n_ctx, dpos, dseq));
}

/* The tiled prompt kernel where it applies, else the split kernel (d: a with device index arrays). */
static void attention_any(cu_state *s, const ob_attn_args *d, const ob_attn_args *a) {
    if (!cu_attention_tiles(s, d, a->pos, a->seq)) cu_attention(s, d);
}

/* The profile's bytes of an attention: every query head reads its K/V head's rows up to its position. */
static double attn_bytes(const cu_state *s, const ob_attn_args *a) {
    double bytes = 0;
    if (s->prof)
        for (int i = 0; i < a->n; i++)
            bytes += (double)(a->pos[i] + 1) * a->n_head_kv * ((double)ob_type_row_size(a->type_k, a->head_dim) +
                                                                ob_type_row_size(a->type_v, a->head_dim));
    return bytes;
}

static void cu_op_attention(ob_backend *b, const ob_attn_args *a) {
    cu_state *s = st(b);
    xq_forget(s);
    ob_attn_args d = *a;
    cu_idx_ps(s, a->pos, a->seq, a->n, &d.pos, &d.seq);
    PROF(s, a->n == 1 ? "attention n=1" : "attention n>1", attn_bytes(s, a), attention_any(s, &d, a));
}

static int cu_op_rope_attention(ob_backend *b, const ob_attn_args *a, float *q, float *k, const float *v, const ob_rope *r) {
    cu_state *s = st(b);
    if (!cu_rope_attention_ok(s, a, r)) return 0;
    xq_forget(s);
    ob_attn_args d = *a;
    d.q = q;
    cu_idx_ps(s, a->pos, a->seq, a->n, &d.pos, &d.seq);
    s->ang_host = a->pos; /* (the step's angles are known by their host positions) */
    PROF(s, a->n == 1 ? "rope+attention n=1" : "rope+attention n>1", attn_bytes(s, a), cu_rope_attention(s, &d, k, v, r));
    s->ang_host = NULL;
    return 1;
}

static int cu_op_layer_decode(ob_backend *b, const ob_layer_args *l) {
    cu_state *s = st(b);
    if (!s->layer) return 0;
    ob_layer_args d = *l;
    cu_idx_ps(s, l->attn.pos, l->attn.seq, 1, &d.attn.pos, &d.attn.seq); /* (kept for the ops when the kernel declines) */
    if (!cu_layer(s, &d)) return 0;
    xq_forget(s);
    return 1;
}

static void cu_op_add(ob_backend *b, float *y, const float *x, size_t n) {
    cu_state *s = st(b);
    xq_forget(s);
    PROF(s, "add", 8.0 * n, cu_add(s, y, x, n));
}
static void cu_op_add_bias(ob_backend *b, float *y, const float *bias, int n, int dim) {
    cu_state *s = st(b);
    xq_forget(s);
    PROF(s, "add_bias", 4.0 * n * dim, cu_add_bias(s, y, bias, n, dim));
}
static void cu_op_glu(ob_backend *b, ob_act act, float *gate, const float *up, size_t n) {
    cu_state *s = st(b);
    xq_forget(s);
    PROF(s, "glu", 8.0 * n, cu_glu(s, act, gate, up, n));
}
static void cu_op_act_quant_i8(ob_backend *b, float *x, int n, int dim) {
    cu_state *s = st(b);
    xq_forget(s);
    PROF(s, "act_quant_i8", 4.0 * n * dim, cu_act_quant_i8(s, x, n, dim));
}

static void cu_op_copy(ob_backend *b, void *dst, const void *src, size_t size) {
    cu_state *s = st(b);
    xq_forget(s);
    PROF(s, "copy", (double)size, cu_check_op(s, cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, s->stream), "copy"));
}

static void cu_op_sync(ob_backend *b) {
    cu_state *s = st(b);
    cu_check(cudaStreamSynchronize(s->stream), "sync");
    cu_prof_harvest(s);
}

static int cu_op_graph_begin(ob_backend *b, uint64_t key, const int32_t *ids, const int32_t *pos, const int32_t *seq, int n) {
    xq_forget(st(b)); /* a replay runs no host code: start every step from nothing */
    st(b)->ang_n = 0; /* a replay or a recording writes the angles where the host does not see it */
    return cu_graph_begin(st(b), key, ids, pos, seq, n);
}
static void cu_op_step_kind(ob_backend *b, int distinct) { st(b)->step_distinct = distinct; }
static int cu_op_graph_end(ob_backend *b) {
    xq_forget(st(b));
    st(b)->ang_n = 0;
    return cu_graph_end(st(b));
}

extern "C" int ob_backend_cuda_usable(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    for (int i = 0; i < count; i++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) == cudaSuccess && major >= 8) return 1;
    }
    return 0;
}

extern "C" ob_backend *ob_backend_cuda_new(void) {
    ob_backend *b = (ob_backend *)calloc(1, sizeof *b);
    if (!b) return NULL;
    b->name = "cuda";
    /* (f16 copies of a loaded model's weights are kept while the larger of 2 GiB and a fifth of the
     * GPU stays free: docs/cuda.md, "Matmul") */
    b->mem_hint = "a model already loaded on this GPU may hold f16 copies of its weights (OB_CUDA_F16_COPY=0 turns them off)";
    b->init = cu_init;
    b->free = cu_free;
    b->mem_info = cu_mem_info;
    b->alloc = cu_alloc;
    b->dealloc = cu_dealloc;
    b->upload = cu_upload;
    b->upload_weight = cu_upload_weight;
    b->download = cu_download;
    b->supports = cu_supports;
    /* tq1_0 weights computed as tq2_0 (converted at load, exactly the same values): its decoders
     * are cheaper, BitNet-2B's decode +27% for 22% more GPU memory (docs/cuda.md, run 35); and
     * tq2_0 ones of one scale a tensor (a trained BitNet's) as i2_s, cheaper again (run 36);
     * OB_BACKEND_TQ1_AS_TQ2=0 keeps both in the file's type, OB_BACKEND_TQ2_AS_I2S=0 tq2_0 (backend.c) */
    b->weight_as = ob_backend_ternary_as_i2_s;
    b->matmul = cu_op_matmul;
    b->get_rows = cu_op_get_rows;
    b->rmsnorm = cu_op_rmsnorm;
    b->rope = cu_op_rope;
    b->kv_write = cu_op_kv_write;
    b->attention = cu_op_attention;
    b->add = cu_op_add;
    b->add_bias = cu_op_add_bias;
    b->glu = cu_op_glu;
    b->act_quant_i8 = cu_op_act_quant_i8;
    b->copy = cu_op_copy;
    b->sync = cu_op_sync;
    b->graph_begin = cu_op_graph_begin;
    b->graph_end = cu_op_graph_end;
    b->step_kind = cu_op_step_kind;
    b->matmul_add = cu_op_matmul_add;
    b->matmul_multi = cu_op_matmul_multi;
    b->matmul_glu = cu_op_matmul_glu;
    b->rope_kv = cu_op_rope_kv;
    b->rmsnorm_act_quant = cu_op_rmsnorm_act_quant;
    b->rope_attention = cu_op_rope_attention;
    b->layer_decode = cu_op_layer_decode;
    b->ffn_decode = cu_op_ffn_decode;
    b->host_alloc = cu_host_alloc;
    b->host_free = cu_host_free;
    b->host_dev = cu_host_dev;
    return b;
}
