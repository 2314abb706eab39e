/* cuda_attn.cuh — one span of the decode attention (flash-decoding, cuda_attn.cu describes it),
 * as a device function of four warps, so that both the attention kernel (a block of four warps)
 * and the whole-layer decode kernel (cuda_layer.cu: two groups of four warps a block) run the
 * same arithmetic.
 */
#ifndef OB_CUDA_ATTN_CUH
#define OB_CUDA_ATTN_CUH

#include <cuda_fp16.h>
#include <math.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/cuda_rows.cuh"

#define AT_WARPS 4
#define AT_MAXK 8 /* head_dim up to 256 = 8 values per lane */
#define AT_UNROLL 4    /* positions a warp takes per step */
#define AT_SPLIT_MAX (AT_WARPS * AT_MAXK * 32) /* spans per token: their merge weights reuse the warps' merge buffer */
#define AT_SPAN_MIN (AT_WARPS * AT_UNROLL) /* positions: a token's context is cut into spans no shorter than one step of the block */

__device__ __forceinline__ float kv_elem(const uint8_t *row, int type, int d) {
    if (type == OB_TYPE_F16) return __half2float(((const __half *)row)[d]);
    if (type == OB_TYPE_F32) return ((const float *)row)[d];
    const uint8_t *b = row + (d >> 5) * 34; /* q8_0 */
    return __half2float(*(const __half *)b) * (float)(int8_t)b[2 + (d & 31)];
}

/* The four warps' merge buffers of one span. */
struct at_smem {
    float m[AT_WARPS], l[AT_WARPS], o[AT_WARPS][AT_MAXK * 32];
};

/* The spans token i's positions are cut into: ns of the n_split blocks, none shorter than
 * AT_SPAN_MIN positions (decided on the device from the position, so a recorded graph stays right
 * as the context grows). */
__device__ __forceinline__ int attn_spans(const ob_attn_args &a, int n_split, int i) {
    return min(n_split, (a.pos[i] + 1 + AT_SPAN_MIN - 1) / AT_SPAN_MIN);
}

/* What the attention of one step takes over from rope_kv (cu_rope_attention: tokens of distinct
 * sequences): a.q, k and v hold the unrotated heads; every span rotates its query head, and the
 * span holding the token's own position rotates its K head and writes K and V there itself before
 * reading them (no other span reads that position; the spans of a KV head's other query heads
 * write the same bytes). The caller puts the token's angles in at_rope_smem's cs (rope_angles)
 * before attn_span synchronizes the group. on = 0: a.q is rotated and the caches are written
 * (rope_kv ran). */
struct at_rope {
    const float *k, *v; /* [n][n_head_kv * head_dim] */
    ob_rope r;
    int on;
};
struct at_rope_smem {
    float cs[AT_MAXK * 32], q[AT_MAXK * 32], k[AT_MAXK * 32]; /* angles (rope_angles), the unrotated q and K heads */
};

/* The int8 codes of the attention's output for the projection after it (`wo`), made where the
 * output is written (cu_attention: OB_CUDA_ATTN_CODES, on by default), so that no quantizer launch
 * sits between attention and `wo`: each head's 32-element blocks at their own scale (quant_elem's
 * block mode). The separate quantizer (quant_regs) would give a row that lies on the int8 grid of
 * its max one scale for the whole row instead; an attention output never does but by construction
 * (BitNet's on-grid rows come from act_quant_i8, which makes its own codes), and where one did, the
 * block codes are the closer ones. Rows of n_head * head_dim values; q = NULL: none made. */
struct at_codes {
    int8_t *q;
    float2 *xs;
};

/* Output element d of head h, token i: v stored (d < head_dim), and its code when c asks, which
 * takes every lane of the warp, lane d % 32 of the 32 of d's block (head_dim a multiple of 32). */
__device__ __forceinline__ void attn_out(const ob_attn_args &a, const at_codes &c, int i, int h, int d, float v) {
    const size_t e = (size_t)h * a.head_dim + d, row = (size_t)a.n_head * a.head_dim;
    if (d < a.head_dim) a.out[(size_t)i * row + e] = v;
    if (c.q) quant_elem(v, (int)e, 0.0f, 0.0f, false, c.q + i * row, c.xs + i * (row / 32));
}

/* Query head h of token i against span split of its positions, by the calling group of AT_WARPS
 * warps (warp index (threadIdx.x / 32) % AT_WARPS; group_sync() synchronizes exactly that group);
 * spans past the token's ns return at once (uniformly: the whole group). With one span the group
 * writes the output; otherwise the last span of (i, h) to finish merges them (cnt, part). MK: the
 * head values a lane holds (head_dim <= 32 MK; AT_MAXK, or the fewest for the head size:
 * cu_attention's OB_CUDA_ATTN_MK=1, the same arithmetic in less code); KT >= 0: the type of both
 * caches, known at compile time (else a.type_k / a.type_v at run time). QR (ro.on, a RoPE whose
 * pairs are neighbour lanes or registers of one lane: at_qr_ok): each lane loads its q values and
 * rotates them with its pair partner's (a shuffle, or its own register), so that only the span
 * writing the token's K and V row waits at a barrier; the caller has synchronized the group after
 * rope_angles. */
template <int MK = AT_MAXK, int KT = -1, bool QR = false, typename SYNC>
__device__ __forceinline__ void attn_span(const ob_attn_args &a, size_t krb, size_t vrb, size_t khb, size_t vhb, int n_split, float *part,
                                          int *cnt, int h, int i, int split, at_smem &sh, SYNC group_sync, const at_rope &ro,
                                          at_rope_smem *rs, const at_codes &cd = at_codes{}) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & (AT_WARPS - 1);
    const int hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
    const int tk = KT >= 0 ? KT : a.type_k, tv = KT >= 0 ? KT : a.type_v;
    /* this token's spans (attn_spans; the spans past the last non-empty one are empty); the
     * blocks past them end at once */
    const int np = a.pos[i] + 1, ns = attn_spans(a, n_split, i), span = (np + ns - 1) / ns;
    if (split >= ns) return;
    const int p0 = split * span, p1 = min(np, p0 + span);
    const float *q = a.q + ((size_t)i * a.n_head + h) * hd;
    const uint8_t *kb = (const uint8_t *)a.k + (size_t)a.seq[i] * a.n_ctx * krb + (size_t)kh * khb;
    const uint8_t *vb = (const uint8_t *)a.v + (size_t)a.seq[i] * a.n_ctx * vrb + (size_t)kh * vhb;
    if (ro.on) { /* rope_kv's part, with its arithmetic (cuda_rows.cuh); rs->cs: the caller's angles */
        /* own: the one non-empty span holding the position (spans past it are empty when 16
         * positions a span cannot cover the context) */
        const int gt = threadIdx.x & (AT_WARPS * 32 - 1), own = p0 < np && p1 == np;
        const float *kin = ro.k + ((size_t)i * a.n_head_kv + kh) * hd;
        if (!QR || own) { /* the same for the whole group */
            for (int d = gt; d < hd; d += AT_WARPS * 32) {
                if (!QR) rs->q[d] = q[d];
                if (own) rs->k[d] = kin[d];
            }
            group_sync();
        }
        if (own) { /* q8_0: hd is a multiple of 32, so whole warps take an element block */
            const float *vin = ro.v + ((size_t)i * a.n_head_kv + kh) * hd;
            uint8_t *kd = (uint8_t *)kb + (size_t)a.pos[i] * krb, *vd = (uint8_t *)vb + (size_t)a.pos[i] * vrb;
            for (int e = gt; e < hd; e += AT_WARPS * 32) {
                kv_put(kd, tk, rope_elem(rs->k, e, rs->cs, ro.r), e);
                kv_put(vd, tv, vin[e], e);
            }
            group_sync(); /* the group reads them below */
        }
    }
    float qv[MK], acc[MK];
    if constexpr (QR) { /* ro.on: the pairs are (d, d ^ 1), or (d, d +- half) with half a multiple of 32 */
        float raw[MK];
#pragma unroll
        for (int k = 0; k < MK; k++) raw[k] = lane + 32 * k < hd ? q[lane + 32 * k] : 0.0f;
#pragma unroll
        for (int k = 0; k < MK; k++) {
            const int d = lane + 32 * k;
            float xp = 0.0f;
            if (ro.r.style == OB_ROPE_NEOX) {
                const int kk = rope_partner(ro.r, d) >> 5; /* the partner's register: the same lane */
#pragma unroll
                for (int j = 0; j < MK; j++) xp = j == kk ? raw[j] : xp;
            } else {
                xp = __shfl_xor_sync(0xffffffffu, raw[k], 1);
            }
            qv[k] = d < hd ? rope_pair(raw[k], xp, d, rs->cs, ro.r) * a.scale : 0.0f;
            acc[k] = 0.0f;
        }
    } else {
#pragma unroll
        for (int k = 0; k < MK; k++) {
            const int d = lane + 32 * k;
            qv[k] = d < hd ? (ro.on ? rope_elem(rs->q, d, rs->cs, ro.r) : q[d]) * a.scale : 0.0f;
            acc[k] = 0.0f;
        }
    }
    float m = -INFINITY, l = 0.0f;
    /* AT_UNROLL positions per step (p, p + AT_WARPS, ...): all their K and V loads are issued
     * before the scores need them */
    for (int p = p0 + warp; p < p1; p += AT_WARPS * AT_UNROLL) {
        float sc[AT_UNROLL], vx[AT_UNROLL][MK];
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
            const int pu = p + u * AT_WARPS;
            sc[u] = 0.0f;
#pragma unroll
            for (int k = 0; k < MK; k++) vx[u][k] = 0.0f;
            if (pu < p1) {
                const uint8_t *kr = kb + (size_t)pu * krb, *vr = vb + (size_t)pu * vrb;
#pragma unroll
                for (int k = 0; k < MK; k++) {
                    const int d = lane + 32 * k;
                    if (d < hd) {
                        vx[u][k] = kv_elem(vr, tv, d);
                        sc[u] = fmaf(qv[k], kv_elem(kr, tk, d), sc[u]);
                    }
                }
            }
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
            if (p + u * AT_WARPS < p1) mn = fmaxf(mn, sc[u]);
        }
        const float corr = __expf(m - mn); /* mn is finite: position p is in the span */
        float e[AT_UNROLL];
        l *= corr;
#pragma unroll
        for (int u = 0; u < AT_UNROLL; u++) {
            e[u] = p + u * AT_WARPS < p1 ? __expf(sc[u] - mn) : 0.0f;
            l += e[u];
        }
        m = mn;
#pragma unroll
        for (int k = 0; k < MK; k++) {
            const int d = lane + 32 * k;
            if (d >= hd) continue;
            float o = acc[k] * corr;
#pragma unroll
            for (int u = 0; u < AT_UNROLL; u++)
                if (p + u * AT_WARPS < p1) o += e[u] * vx[u][k];
            acc[k] = o;
        }
    }
    /* merge the warps */
    float *sm = sh.m, *sl = sh.l;
    float(*so)[AT_MAXK * 32] = sh.o;
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int k = 0; k < MK; k++) so[warp][lane + 32 * k] = acc[k];
    group_sync();
    if (warp != 0) return;
    float M = -INFINITY;
    for (int w = 0; w < AT_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0.0f, o[MK];
#pragma unroll
    for (int k = 0; k < MK; k++) o[k] = 0.0f;
    for (int w = 0; w < AT_WARPS; w++) {
        const float f = sm[w] == -INFINITY ? 0.0f : __expf(sm[w] - M);
        L += sl[w] * f;
#pragma unroll
        for (int k = 0; k < MK; k++) o[k] += so[w][lane + 32 * k] * f;
    }
    if (ns == 1) {
        const float inv = L > 0 ? 1.0f / L : 0.0f;
#pragma unroll
        for (int k = 0; k < MK; k++)
            if (32 * k < hd) attn_out(a, cd, i, h, lane + 32 * k, o[k] * inv);
        return;
    }
    float *pp = part + (((size_t)i * a.n_head + h) * n_split + split) * (hd + 2);
    if (lane == 0) { pp[0] = M; pp[1] = L; }
#pragma unroll
    for (int k = 0; k < MK; k++)
        if (lane + 32 * k < hd) pp[2 + lane + 32 * k] = o[k];
    /* the last of the token's ns spans to finish merges them all, and resets the counter */
    __threadfence();
    __syncwarp(); /* every lane's stores are fenced before lane 0 counts the span */
    int last = 0;
    if (lane == 0) last = atomicAdd(&cnt[(size_t)i * a.n_head + h], 1) == ns - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence();
    const float *pb = part + ((size_t)i * a.n_head + h) * n_split * (hd + 2);
    /* lanes take spans for the max and the sum (a span with no position holds max -inf, sum 0),
     * then every span's weight exp(m_s - M) / L goes to shared memory for the vectors */
    float *wsp = so[0]; /* AT_SPLIT_MAX floats: ns <= n_split fits (cu_attention) */
    __syncwarp();       /* every lane has read so */
    M = -INFINITY;
    for (int sp = lane; sp < ns; sp += 32) M = fmaxf(M, __ldcg(pb + (size_t)sp * (hd + 2)));
#pragma unroll
    for (int o2 = 16; o2 > 0; o2 >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o2));
    L = 0.0f;
    for (int sp = lane; sp < ns; sp += 32) {
        const float ms = __ldcg(pb + (size_t)sp * (hd + 2));
        const float f = ms != -INFINITY ? __expf(ms - M) : 0.0f;
        wsp[sp] = f;
        L += __ldcg(pb + (size_t)sp * (hd + 2) + 1) * f;
    }
#pragma unroll
    for (int o2 = 16; o2 > 0; o2 >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o2);
    __syncwarp();
    const float inv = L > 0 ? 1.0f / L : 0.0f;
    for (int d0 = 0; d0 < hd; d0 += 32) { /* whole warps: one block of codes a step */
        const int d = d0 + lane;
        float od = 0.0f;
        if (d < hd)
#pragma unroll 8
            for (int sp = 0; sp < ns; sp++) od += __ldcg(pb + (size_t)sp * (hd + 2) + 2 + d) * wsp[sp];
        attn_out(a, cd, i, h, d, od * inv);
    }
    if (lane == 0) cnt[(size_t)i * a.n_head + h] = 0;
}

#endif
