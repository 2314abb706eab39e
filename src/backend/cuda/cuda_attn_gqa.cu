/* cuda_attn_gqa.cu — the decode attention of a batch on the tensor cores, one block per (token,
 * KV head) (the default from 5 tokens, OB_CUDA_ATTN_GQA=N from N, =0 off: +10% to +150% batched
 * decode against the split kernel, docs/bench.md run 14).
 *
 * Owns: k_attn_gqa, for batches of tokens at any positions of any sequences (the server's steps)
 * over f16 K/V caches with head size 64 or 128 and at most 16 query heads a KV head. The split
 * kernel (cuda_attn.cu) gives each (token, query head) its own block, so each K/V row is read
 * once per query head of its group, one position at a time per warp. Here the group's query heads
 * are the rows of one A fragment (zeros past the group), the sequence's cache is walked in tiles
 * of 64 positions shared by the block's 4 warps (warp w takes positions 16 w .. 16 w + 15 of every
 * tile), and each warp keeps its own online softmax over its positions (cuda_mma.cuh's walk and
 * step, as the prompt kernel); at the end the four warps' states are merged in shared memory.
 * Precision as the prompt kernel's (f16 Q and P, f32 sums: about 1e-3). As `attention` it
 * writes no int8 codes for `wo` (that matmul quantizes its input itself when it takes codes), and
 * rope_kv runs before it (cu_rope_attention_ok declines those batches). Its fused form
 * (k_attn_gqa<D, true>, cu_rope_attention_gqa: the default from one token, OB_CUDA_ATTN_GQA_ROPE=N
 * from N, =0 off; +2.7% to +19% single-token decode against the split kernel's fused form on
 * groups of 4, 2 and 1 query heads a KV head, docs/bench.md runs 15-16) takes rope_attention's contract
 * for steps of distinct sequences: RoPE of q and K, the token's cache rows and the codes for
 * `wo`, in the same launch.
 * Does not own: the other attention kernels, the RoPE arithmetic (cuda_rows.cuh).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attn.cuh"
#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_mma.cuh"

#define GQ_THREADS 128 /* 4 warps: a quarter of each tile's positions each */
#define GQ_MAXG 16     /* query heads a KV head at most (one A fragment's rows) */

/* Where the merge keeps warp w's state: rows' maxima and sums [4][16], outputs [4][16][D]. */
template <int D> __host__ __device__ constexpr size_t gq_merge_bytes() { return sizeof(float) * (2 * 4 * 16 + 4 * 16 * D); }
template <int D> __host__ __device__ constexpr size_t gq_smem() { return mp_smem<D>() > gq_merge_bytes<D>() ? mp_smem<D>() : gq_merge_bytes<D>(); }
/* The fused form's own part after it: the token's K and V rows [2][D] as f16 (kept until the last
 * tile). Its angles [D] and rotated query heads [GQ_MAXG][D] (floats, read until the query
 * fragments are made) take the second tile buffer's K rows, which nothing uses before the walk
 * issues tile 1: 17 KB for D = 128, 9 KB for 64; with them outside, a D = 128 block took 79 KB, two
 * blocks an SM instead of three. */
template <int D> __host__ __device__ constexpr size_t gq_smem_rope() { return gq_smem<D>() + sizeof(__half) * 2 * D; }
static_assert(sizeof(float) * (64 + GQ_MAXG * 64) <= sizeof(__half) * MP_K * (64 + 8), "angles and queries fit a K tile");
static_assert(sizeof(float) * (128 + GQ_MAXG * 128) <= sizeof(__half) * MP_K * (128 + 8), "angles and queries fit a K tile");

/* What the fused form (cu_rope_attention_gqa) takes over from rope_kv, for a step of tokens of
 * distinct sequences: k / v the unrotated K and V rows of the batch [n][n_head_kv * D], the
 * RoPE, and the output's int8 codes for `wo` (cd.q NULL: none). */
struct gq_rope {
    const float *k, *v;
    ob_rope r;
    at_codes cd;
    const float *ang_r; /* OB_CUDA_ANGLES (gq_angles_plan): the step's angles [n][n_rot] to read, or NULL; */
    float *ang_w;       /* ... where to write them (the step's first launch), or NULL */
};

/* A token's context in spans of whole tiles (the default, OB_CUDA_ATTN_GQA_SPLIT=0 off; +60%
 * single-token decode at 4096 positions, run 15): the grid's third dimension, S, fixed by the
 * shapes so that a recorded step stays right as the context grows;
 * ns of the S blocks take a span each (whole tiles, about the context over ns; ns at most the
 * context over min: GQ_SPAN_MIN, or OB_CUDA_ATTN_GQA_SPLIT=N; so every span but the last, which
 * may hold one position, holds min / 2 positions or more, rounded up to whole tiles),
 * the blocks past ns end at once; with one span the block writes the output itself, else each writes
 * its rows' (unnormalized outputs, max, sum) to part and counts itself on cnt (one counter a
 * (token, KV head), 0 between launches), and the last to arrive merges them in span order. */
#define GQ_SPLIT_MAX 32
struct gq_split {
    int S, min;
    float *part; /* [n][n_head_kv][S][G][D + 2] */
    int *cnt;    /* [n][n_head_kv] */
};

/* Output element d of query head h, token i: stored, and in the fused form its code too (attn_out:
 * every lane of the warp, 32 dims of one head). */
template <int D, bool FUSED>
__device__ __forceinline__ void gq_out(const ob_attn_args &a, const gq_rope &f, int i, int h, int d, float y) {
    if (FUSED) attn_out(a, f.cd, i, h, d, y);
    else a.out[((size_t)i * a.n_head + h) * D + d] = y;
}

/* FUSED (cu_rope_attention_gqa): before the wait, the token's angles and the first tile's rows
 * before its own position (written by earlier steps: the kernels before the previous one have
 * ended, cu_dep); after it, the group's query heads rotated into shared memory and, in the span
 * that holds the position, the token's K head rotated, both rows written to the caches (rope_kv's
 * arithmetic and bytes) and kept to be put into the tile that holds the position (whose copy may
 * have read that row before it was written); the output's codes as the split kernel makes them
 * (attn_out). */
template <int D, bool FUSED>
__global__ void __launch_bounds__(GQ_THREADS) k_attn_gqa(ob_attn_args a, size_t krb, size_t vrb, size_t khb, size_t vhb, gq_rope f, gq_split sp) {
    extern __shared__ __align__(16) __half gq_sm[];
    __shared__ int gq_last;
    const int kh = blockIdx.x, i = blockIdx.y, split = blockIdx.z, G = a.n_head / a.n_head_kv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int p_last = a.pos[i], np = p_last + 1; /* (the index arrays are copied before the previous kernel) */
    int ns = min(sp.S, (np + sp.min - 1) / sp.min);
    const int per = ((np + ns - 1) / ns + MP_K - 1) / MP_K * MP_K; /* whole tiles a span */
    ns = (np + per - 1) / per;                                     /* (none empty) */
    if (split >= ns) return;
    const int p0 = split * per, pe = min(np, p0 + per) - 1, own = pe == p_last; /* own: the span of the token's position */
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i] * a.n_ctx * vrb + (size_t)kh * vhb;
    float *cs = (float *)(gq_sm + MP_K * (D + 8)), *qs = cs + D; /* buffer 1's K rows (mp_smem's layout) */
    __half *kvr = (__half *)((uint8_t *)gq_sm + gq_smem<D>());
    const float *qi = a.q + ((size_t)i * a.n_head + (size_t)kh * G) * D;
    if constexpr (FUSED) {
        if (f.ang_r) { /* written by an earlier launch, which has ended: a launch came between (gq_angles_plan, cu_dep) */
            for (int e = threadIdx.x; e < f.r.n_rot; e += GQ_THREADS) cs[e] = __ldcg(f.ang_r + (size_t)i * f.r.n_rot + e);
        } else {
            rope_angles(cs, p_last, f.r);
            if (f.ang_w && kh == 0 && split == 0) { /* (the whole block alike) */
                __syncthreads();
                for (int e = threadIdx.x; e < f.r.n_rot; e += GQ_THREADS) f.ang_w[(size_t)i * f.r.n_rot + e] = cs[e];
            }
        }
        mp_tile<D, GQ_THREADS>(gq_sm, 0, kb, vb, krb, vrb, p0, min(pe, p_last - 1));
        cu_dep();
        __syncthreads(); /* the angles */
        for (int e = threadIdx.x; e < G * D; e += GQ_THREADS) qs[e] = rope_elem(qi + (size_t)(e / D) * D, e % D, cs, f.r);
        if (own) {
            const float *kin = f.k + ((size_t)i * a.n_head_kv + kh) * D, *vin = f.v + ((size_t)i * a.n_head_kv + kh) * D;
            for (int d = threadIdx.x; d < D; d += GQ_THREADS) {
                const __half kv = __float2half_rn(rope_elem(kin, d, cs, f.r)), vv = __float2half_rn(vin[d]);
                ((__half *)(kb + (size_t)p_last * krb))[d] = kv;
                ((__half *)(vb + (size_t)p_last * vrb))[d] = vv;
                kvr[d] = kv;
                kvr[D + d] = vv;
            }
        }
        __syncthreads(); /* qs and kvr */
        qi = qs;
    } else {
        cu_dep();
        mp_tile<D, GQ_THREADS>(gq_sm, 0, kb, vb, krb, vrb, p0, pe);
    }

    /* rows g and g + 8: query heads kh G + g and kh G + g + 8 of token i (zeros past the group) */
    uint32_t qf[D / 16][4];
    mp_qfrag<D>(qf, qi + (size_t)g * D, qi + (size_t)(g + 8) * D, g < G, g + 8 < G, a.scale * MP_LOG2E);
    if (FUSED) __syncthreads(); /* qs read: the walk's first copy may fill buffer 1 */
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    mp_walk<D, GQ_THREADS>(gq_sm, kb, vb, krb, vrb, pe, [&](const __half *Ks, const __half *Vs, int k0) {
        if (FUSED && own && p_last < k0 + MP_K) { /* the tile of the token's own position (the whole block alike) */
            constexpr int LD = D + 8;
            for (int d = threadIdx.x; d < D; d += GQ_THREADS) {
                ((__half *)Ks)[(p_last - k0) * LD + d] = kvr[d];
                ((__half *)Vs)[(p_last - k0) * LD + d] = kvr[D + d];
            }
            __syncthreads();
        }
        const int w0 = k0 + 16 * warp; /* the warp's first position: it has one at least (positions are p0 .. pe) */
        if (w0 <= pe) mp_step<D, 2>(Ks, Vs, 16 * warp, k0, w0 + 15 > pe, pe, pe, qf, o, m0, m1, l0, l1);
    }, p0);
    mp_sums(l0, l1);

    /* the merge: warp w's maxima, sums and outputs (a warp that had no position: -inf, 0, 0) */
    float *mm = (float *)gq_sm, *ll = mm + 4 * 16, *oo = ll + 4 * 16;
    if (c == 0) {
        mm[warp * 16 + g] = m0;
        mm[warp * 16 + g + 8] = m1;
        ll[warp * 16 + g] = l0;
        ll[warp * 16 + g + 8] = l1;
    }
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        float *r0 = oo + ((size_t)warp * 16 + g) * D + 8 * j + 2 * c, *r1 = r0 + 8 * D;
        r0[0] = o[j][0];
        r0[1] = o[j][1];
        r1[0] = o[j][2];
        r1[1] = o[j][3];
    }
    __syncthreads();
    const size_t ci = (size_t)i * a.n_head_kv + kh;
    float *pt = sp.part + ci * sp.S * G * (D + 2); /* this (token, KV head)'s spans: [S][G][D + 2] */
    for (int e = threadIdx.x; e < G * D; e += GQ_THREADS) {
        const int r = e / D, d = e % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, mm[w * 16 + r]);
        float L = 0.0f, v = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const float fw = mp_ex2(mm[w * 16 + r] - M); /* (warp 0 always had the span's first position: M is finite) */
            L += fw * ll[w * 16 + r];
            v += fw * oo[((size_t)w * 16 + r) * D + d];
        }
        if (ns > 1) { /* this span's part */
            float *pr = pt + ((size_t)split * G + r) * (D + 2);
            pr[d] = v;
            if (d == 0) {
                pr[D] = M;
                pr[D + 1] = L;
            }
            continue;
        }
        const float y = L > 0.0f ? v / L : 0.0f;
        gq_out<D, FUSED>(a, f, i, kh * G + r, d, y);
    }
    if (ns == 1) return;
    __threadfence(); /* this span's part, before its count */
    __syncthreads();
    if (threadIdx.x == 0) gq_last = atomicAdd(&sp.cnt[ci], 1) == ns - 1;
    __syncthreads();
    if (!gq_last) return;
    __threadfence(); /* the other spans' parts, after their counts */
    float *wt = (float *)gq_sm, *lt = wt + GQ_MAXG * GQ_SPLIT_MAX; /* each row's span weights and sum */
    if (threadIdx.x < G) {
        const int r = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        for (int k = 0; k < ns; k++) M = fmaxf(M, __ldcg(pt + ((size_t)k * G + r) * (D + 2) + D));
        for (int k = 0; k < ns; k++) {
            const float *pr = pt + ((size_t)k * G + r) * (D + 2);
            const float fw = mp_ex2(__ldcg(pr + D) - M);
            wt[r * GQ_SPLIT_MAX + k] = fw;
            L += fw * __ldcg(pr + D + 1);
        }
        lt[r] = L;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * D; e += GQ_THREADS) {
        const int r = e / D, d = e % D;
        float v = 0.0f;
        for (int k = 0; k < ns; k++) v += wt[r * GQ_SPLIT_MAX + k] * __ldcg(pt + ((size_t)k * G + r) * (D + 2) + d);
        const float L = lt[r], y = L > 0.0f ? v / L : 0.0f;
        gq_out<D, FUSED>(a, f, i, kh * G + r, d, y);
    }
    if (threadIdx.x == 0) sp.cnt[ci] = 0; /* for the next launch */
}

void cu_attention_gqa_init(cu_state *s) {
    const char *what = "grouped attention (shared memory)";
    cu_check(cudaFuncSetAttribute(k_attn_gqa<64, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gq_smem<64>()), what);
    cu_check(cudaFuncSetAttribute(k_attn_gqa<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gq_smem<128>()), what);
    cu_check(cudaFuncSetAttribute(k_attn_gqa<64, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gq_smem_rope<64>()), what);
    cu_check(cudaFuncSetAttribute(k_attn_gqa<128, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gq_smem_rope<128>()), what);
}

/* the shapes the kernel takes: f16 caches, head size 64 / 128, at most GQ_MAXG query heads a KV head */
static int gq_shape_ok(const ob_attn_args *a) {
    return a->type_k == OB_TYPE_F16 && a->type_v == OB_TYPE_F16 && (a->head_dim == 64 || a->head_dim == 128) && a->n_head_kv > 0 &&
           a->n_head % a->n_head_kv == 0 && a->n_head / a->n_head_kv <= GQ_MAXG;
}

int cu_attention_gqa_ok(const cu_state *s, const ob_attn_args *a) { return s->attn_gqa && a->n >= s->attn_gqa && gq_shape_ok(a); }

int cu_rope_attention_gqa_ok(const cu_state *s, const ob_attn_args *a, const ob_rope *r) {
    return s->attn_gqa_rope && a->n >= s->attn_gqa_rope && gq_shape_ok(a) && r->n_rot >= 0 && r->n_rot <= a->head_dim;
}

/* The spans a token's context may take (gq_split's S): one, unless spans are on (the default) and
 * the batch's (token, KV head) blocks are fewer than the SMs: then enough for about two blocks an
 * SM at the longest context, at most the context over s->attn_gqa_split; reserves their scratch. */
static gq_split gq_splits(cu_state *s, const ob_attn_args *a) {
    const int blocks = a->n * a->n_head_kv;
    int S = 1;
    if (s->attn_gqa_split && blocks < s->sm_count) {
        S = (2 * s->sm_count + blocks - 1) / blocks;
        const int max_s = (a->n_ctx + s->attn_gqa_split - 1) / s->attn_gqa_split;
        if (S > max_s) S = max_s;
        if (S > GQ_SPLIT_MAX) S = GQ_SPLIT_MAX; /* (the merge's weights in shared memory) */
        if (S < 1) S = 1;
    }
    gq_split sp = {S, s->attn_gqa_split > 0 ? s->attn_gqa_split : GQ_SPAN_MIN, NULL, NULL};
    if (S > 1) {
        cu_attn_scratch(s, (size_t)a->n * a->n_head * S * (a->head_dim + 2), (size_t)blocks);
        sp.part = s->attn_part;
        sp.cnt = s->attn_cnt;
    }
    return sp;
}

template <int D, bool FUSED> static void gq_launch(cu_state *s, const ob_attn_args *a, const gq_rope &f) {
    const int kv_dim = a->n_head_kv * a->head_dim;
    const size_t krb = ob_type_row_size(a->type_k, kv_dim), vrb = ob_type_row_size(a->type_v, kv_dim);
    const size_t khb = ob_type_row_size(a->type_k, a->head_dim), vhb = ob_type_row_size(a->type_v, a->head_dim);
    const gq_split sp = gq_splits(s, a);
    const dim3 grid((unsigned)a->n_head_kv, (unsigned)a->n, (unsigned)sp.S);
    cu_launch(s, FUSED ? "rope+attention (grouped)" : "attention (grouped)", grid, GQ_THREADS, FUSED ? gq_smem_rope<D>() : gq_smem<D>(),
              k_attn_gqa<D, FUSED>, *a, krb, vrb, khb, vhb, f, sp);
}

int cu_attention_gqa(cu_state *s, const ob_attn_args *a) {
    if (!cu_attention_gqa_ok(s, a)) return 0;
    if (a->head_dim == 64) gq_launch<64, false>(s, a, gq_rope{});
    else gq_launch<128, false>(s, a, gq_rope{});
    return 1;
}

/* OB_CUDA_ANGLES (on unless 0): whether the fused form reads the step's RoPE angles (ang_r) or computes them and
 * writes them (ang_w), by the host positions of the call (s->ang_host): the launch whose positions
 * and rope are those of the angles s->ang holds reads them (the later layers of a step), if another
 * launch came after the writer's (the reader reads before its dependency wait: only a launch
 * between, whose wait follows the writer's end, orders them), any other computes and writes them
 * and they become the record, unless the launch just before it read or wrote them (the writer,
 * too, writes before its wait, so a launch between orders it after them): then it computes them
 * only and the record stays. Every graph_begin / graph_end forgets the record (a replay writes the
 * table with positions the host does not see, and a recording must hold its own writer), and so
 * does every dealloc (the rope's frequency factors are known by their address). */
static long angles_read; /* launches that read the step's angles, every backend (tests) */
extern "C" long ob_cuda_angles_read(void) { return __atomic_load_n(&angles_read, __ATOMIC_RELAXED); }

static void gq_angles_plan(cu_state *s, const ob_attn_args *a, const ob_rope *r, gq_rope *f) {
    if (!s->angles || !s->ang_host || r->n_rot <= 0) return;
    const size_t bytes = (size_t)a->n * r->n_rot * sizeof(float), pb = (size_t)a->n * sizeof(int32_t);
    const ob_rope *o = &s->ang_rope;
    if (s->ang_n == a->n && o->style == r->style && o->n_rot == r->n_rot && o->theta == r->theta && o->freq_scale == r->freq_scale &&
        o->freq_factors == r->freq_factors && !memcmp(s->ang_pos, s->ang_host, pb) && s->ang_cap >= bytes &&
        s->launches > s->ang_launch) {
        f->ang_r = s->ang;
        __atomic_add_fetch(&angles_read, 1, __ATOMIC_RELAXED);
        return;
    }
    if (s->ang_touch && s->launches == s->ang_touch) return; /* the launch before read or wrote them, maybe still: computed only */
    s->ang_n = 0;
    cu_reserve(s, (void **)&s->ang, &s->ang_cap, bytes);
    if (s->ang_cap < bytes) return; /* (none inside a recording: it is dropped) */
    if (a->n > s->ang_pos_cap) {
        int32_t *p = (int32_t *)realloc(s->ang_pos, pb);
        if (!p) return;
        s->ang_pos = p;
        s->ang_pos_cap = a->n;
    }
    memcpy(s->ang_pos, s->ang_host, pb);
    s->ang_n = a->n;
    s->ang_rope = *r;
    f->ang_w = s->ang;
}

static long gqa_rope_launches; /* the fused form's launches, every backend (tests) */
extern "C" long ob_cuda_gqa_rope_launches(void) { return __atomic_load_n(&gqa_rope_launches, __ATOMIC_RELAXED); }

int cu_rope_attention_gqa(cu_state *s, const ob_attn_args *a, const float *k, const float *v, const ob_rope *r) {
    if (!cu_rope_attention_gqa_ok(s, a, r)) return 0;
    gq_rope f = {k, v, *r, {}, NULL, NULL};
    cu_attn_codes(s, a, &f.cd.q, &f.cd.xs);
    gq_angles_plan(s, a, r, &f);
    if (a->head_dim == 64) gq_launch<64, true>(s, a, f);
    else gq_launch<128, true>(s, a, f);
    if (f.ang_w) s->ang_launch = s->launches;
    if (f.ang_w || f.ang_r) s->ang_touch = s->launches;
    cu_xq_tag(s, f.cd.q ? a->out : NULL, a->n, a->n_head * a->head_dim);
    __atomic_add_fetch(&gqa_rope_launches, 1, __ATOMIC_RELAXED);
    return 1;
}
