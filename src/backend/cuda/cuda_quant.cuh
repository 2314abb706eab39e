/* cuda_quant.cuh — device decoders of every weight type, eight elements at a time.
 *
 * Owns: deq8<T>(row, j, v): elements [8j, 8j+8) of a row of type T as float, the same values
 * the reference routines of format/quant_ref*.c produce (layouts are documented there; this
 * file only restates the arithmetic). Every block size is a multiple of 8 except the
 * one-element types (f32, f16, bf16), which also have deq1 for rows whose length is not.
 * i2_s gives the unscaled trits (the per-tensor scale is applied once per dot product) and
 * lean4 the rotated values (the activations are rotated the same way, cuda_matmul.cu).
 * q4_0, q8_0, tq2_0 and q6_K rows are uploaded packed instead (cu_pack_rows: every block's code
 * bytes first, its scales and d after them), so that a block's codes are as aligned as their
 * row; deq8r decodes them (deq8 has the file layouts of the other types), and q8_load
 * (cuda_q8.cuh) likewise.
 * Does not own: which kernel uses a decoder (cuda_matmul.cu), the type numbering (format/quant.h).
 */
#ifndef OB_CUDA_QUANT_CUH
#define OB_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "format/quant.h"
}

/* fp16 field at a 2-byte aligned address (every fp16 field of every block is) */
__device__ __forceinline__ float ld_h(const uint8_t *p) { return __half2float(__ushort_as_half(*(const unsigned short *)p)); }
/* four bytes at a 2-byte aligned address, little-endian */
__device__ __forceinline__ uint32_t ld_u32a2(const uint8_t *p) {
    const unsigned short *s = (const unsigned short *)p;
    return (uint32_t)s[0] | ((uint32_t)s[1] << 16);
}
/* eight bytes at a 2-byte aligned address */
__device__ __forceinline__ void ld_8a2(const uint8_t *p, uint8_t q[8]) {
    uint32_t a = ld_u32a2(p), b = ld_u32a2(p + 4);
#pragma unroll
    for (int i = 0; i < 4; i++) { q[i] = (uint8_t)(a >> (8 * i)); q[4 + i] = (uint8_t)(b >> (8 * i)); }
}

__constant__ static const int8_t cu_iq4nl_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
__constant__ static const int8_t cu_mxfp4_grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
__constant__ static const int8_t cu_lean_grid[16] = {-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127};

/* q4_K / q5_K 6-bit scale and min codes of sub-block j */
__host__ __device__ __forceinline__ void k4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* 2^(e - 128), mxfp4's block scale */
__device__ __forceinline__ float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return __uint_as_float(bits);
}

/* Elements s*8 .. s*8+7 of a 32-element block whose 16 quant bytes hold element l in the low
 * nibble of byte l and l + 16 in the high nibble (q4_0, q4_1, iq4_nl, mxfp4, q5_*). */
__device__ __forceinline__ void nib8(const uint8_t *qs, int s, int out[8]) {
    uint8_t q[8];
#pragma unroll
    for (int i = 0; i < 8; i++) q[i] = qs[8 * (s & 1) + i];
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = s < 2 ? q[i] & 0x0f : q[i] >> 4;
}

template <int T> struct cu_type;

#define CU_TYPE(T, BS, TS) template <> struct cu_type<T> { enum { block = BS, bytes = TS }; }
CU_TYPE(OB_TYPE_F32, 1, 4); CU_TYPE(OB_TYPE_F16, 1, 2); CU_TYPE(OB_TYPE_BF16, 1, 2);
CU_TYPE(OB_TYPE_Q4_0, 32, 18); CU_TYPE(OB_TYPE_Q4_1, 32, 20); CU_TYPE(OB_TYPE_Q5_0, 32, 22);
CU_TYPE(OB_TYPE_Q5_1, 32, 24); CU_TYPE(OB_TYPE_Q8_0, 32, 34); CU_TYPE(OB_TYPE_Q2_K, 256, 84);
CU_TYPE(OB_TYPE_Q3_K, 256, 110); CU_TYPE(OB_TYPE_Q4_K, 256, 144); CU_TYPE(OB_TYPE_Q5_K, 256, 176);
CU_TYPE(OB_TYPE_Q6_K, 256, 210); CU_TYPE(OB_TYPE_IQ4_NL, 32, 18); CU_TYPE(OB_TYPE_IQ4_XS, 256, 136);
CU_TYPE(OB_TYPE_TQ1_0, 256, 54); CU_TYPE(OB_TYPE_TQ2_0, 256, 66); CU_TYPE(OB_TYPE_I2_S, 128, 32);
CU_TYPE(OB_TYPE_MXFP4, 32, 17); CU_TYPE(OB_TYPE_LEAN4, 128, 68);
#undef CU_TYPE

/* The types uploaded in the packed row layout (cu_pack_rows, below). */
__host__ __device__ constexpr bool cu_packed_type(int type) {
    return type == OB_TYPE_Q4_0 || type == OB_TYPE_Q8_0 || type == OB_TYPE_TQ2_0 || type == OB_TYPE_Q6_K;
}

/* Element e of a row of a one-element type. */
template <int T> __device__ __forceinline__ float deq1(const uint8_t *row, int64_t e) {
    if (T == OB_TYPE_F32) return ((const float *)row)[e];
    if (T == OB_TYPE_F16) return __half2float(((const __half *)row)[e]);
    return __bfloat162float(((const __nv_bfloat16 *)row)[e]);
}

/* Eight q6_K values of group g from their ql and qh bytes, times dl. */
__device__ __forceinline__ void q6k_vals(const uint8_t ql[8], const uint8_t qh[8], int g, float dl, float v[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int x = ((g >= 2 ? ql[i] >> 4 : ql[i] & 0x0f) | (((qh[i] >> (2 * g)) & 3) << 4)) - 32;
        v[i] = dl * (float)x;
    }
}

/* Eight f16 / bf16 values from their 16 bytes (deq8's, and the decode matmul's rows read in place) */
template <int T> __device__ __forceinline__ void deq8_u4(uint4 u, float v[8]) {
    static_assert(T == OB_TYPE_F16 || T == OB_TYPE_BF16, "16-bit float types");
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (T == OB_TYPE_F16) {
            const float2 f = __half22float2(*(const __half2 *)&w[i]);
            v[2 * i] = f.x; v[2 * i + 1] = f.y;
        } else {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
}

template <int T> __device__ __forceinline__ void deq8(const uint8_t *row, int64_t j, float v[8]) {
    static_assert(!cu_packed_type(T), "q4_0, q8_0, tq2_0 and q6_K rows are packed: deq8r");
    constexpr int BS = cu_type<T>::block, TS = cu_type<T>::bytes;
    if constexpr (T == OB_TYPE_F32) {
        const float4 *p = (const float4 *)row + 2 * j;
        float4 a = p[0], b = p[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else if constexpr (T == OB_TYPE_F16 || T == OB_TYPE_BF16) {
        deq8_u4<T>(((const uint4 *)row)[j], v);
    } else if constexpr (BS == 32) {
        const uint8_t *b = row + (j >> 2) * TS;
        const int s = (int)(j & 3);
        if constexpr (T == OB_TYPE_MXFP4) {
            const float d = e8m0_half(b[0]);
            int q[8];
            nib8(b + 1, s, q);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = (float)cu_mxfp4_grid[q[i]] * d;
        } else {
            int q[8];
            const float d = ld_h(b);
            const uint8_t *qs = b + (T == OB_TYPE_IQ4_NL ? 2 : T == OB_TYPE_Q4_1 ? 4 : T == OB_TYPE_Q5_0 ? 6 : 8);
            nib8(qs, s, q);
            if constexpr (T == OB_TYPE_Q5_0 || T == OB_TYPE_Q5_1) {
                const uint32_t qh = ld_u32a2(b + (T == OB_TYPE_Q5_0 ? 2 : 4));
#pragma unroll
                for (int i = 0; i < 8; i++) q[i] |= ((qh >> (8 * s + i)) & 1) << 4;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if (T == OB_TYPE_Q5_0) v[i] = (float)(q[i] - 16) * d;
                else if (T == OB_TYPE_IQ4_NL) v[i] = d * (float)cu_iq4nl_grid[q[i]];
                else v[i] = (float)q[i] * d + ld_h(b + 2); /* q4_1, q5_1: d * q + m */
            }
        }
    } else if constexpr (T == OB_TYPE_I2_S) {
        const uint8_t *b = row + (j >> 4) * 32;
        const int e0 = (int)(j & 15) * 8, g = e0 >> 5, m = e0 & 31;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(((b[m + i] >> (6 - 2 * g)) & 3) - 1);
    } else if constexpr (T == OB_TYPE_LEAN4) {
        const uint8_t *b = row + (j >> 4) * 68;
        const int e0 = (int)(j & 15) * 8, hi = e0 >= 64;
        const float d = ld_h(b + 2 * hi);
        uint8_t q[8];
        ld_8a2(b + 4 + (e0 & 63), q);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * (float)cu_lean_grid[hi ? q[i] >> 4 : q[i] & 0x0f];
    } else { /* 256-element super-blocks */
        const uint8_t *b = row + (j >> 5) * TS;
        const int e0 = (int)(j & 31) * 8;
        if constexpr (T == OB_TYPE_TQ1_0) {
            const float d = ld_h(b + 52);
            int nb, k, m;
            const uint8_t *base;
            if (e0 < 160) { base = b; nb = 32; k = e0 / 32; m = e0 % 32; }
            else if (e0 < 240) { base = b + 32; nb = 16; k = (e0 - 160) / 16; m = (e0 - 160) % 16; }
            else { base = b + 48; nb = 4; k = (e0 - 240) / 4; m = (e0 - 240) % 4; }
            const uint8_t p3 = (uint8_t)(k == 0 ? 1 : k == 1 ? 3 : k == 2 ? 9 : k == 3 ? 27 : 81);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int mm = m + i; /* span 2 has 4 bytes: its 8 elements cross two trit positions */
                uint8_t pp = p3;
                if (nb == 4 && mm >= 4) { mm -= 4; pp = (uint8_t)(pp * 3); }
                uint8_t q = (uint8_t)(base[mm] * pp);
                v[i] = (float)(((q * 3) >> 8) - 1) * d;
            }
        } else if constexpr (T == OB_TYPE_Q4_K || T == OB_TYPE_Q5_K) {
            const float d = ld_h(b), dmin = ld_h(b + 2);
            const int c = e0 >> 6, o = e0 & 63, hi = o >= 32, l = o & 31;
            int sc, m;
            k4_scale_min(2 * c + hi, b + 4, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *qs = b + (T == OB_TYPE_Q4_K ? 16 : 48) + 32 * c + l;
            uint8_t q[8];
            ld_8a2(qs, q);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int x = hi ? q[i] >> 4 : q[i] & 0x0f;
                if (T == OB_TYPE_Q5_K) x += (b[16 + l + i] >> (2 * c + hi) & 1) << 4;
                v[i] = d1 * (float)x - m1;
            }
        } else if constexpr (T == OB_TYPE_Q2_K) {
            const float d = ld_h(b + 80), dmin = ld_h(b + 82);
            const uint8_t sc = b[e0 >> 4];
            const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
            const int sh = 2 * ((e0 & 127) >> 5);
            const uint8_t *qs = b + 16 + (e0 >> 7) * 32 + (e0 & 31);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = dl * (float)((qs[i] >> sh) & 3) - ml;
        } else if constexpr (T == OB_TYPE_Q3_K) {
            const float d = ld_h(b + 108);
            const uint8_t *s = b + 96;
            const int jj = e0 >> 4;
            const int lo = jj < 8 ? s[jj] & 0x0f : s[jj - 8] >> 4;
            const int code = (lo | (((s[8 + jj % 4] >> (2 * (jj / 4))) & 3) << 4)) - 32;
            const float dl = d * (float)code;
            const int sh = 2 * ((e0 & 127) >> 5);
            const uint8_t *qs = b + 32 + (e0 >> 7) * 32 + (e0 & 31);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int e = e0 + i, hbit = (b[e & 31] >> (e >> 5)) & 1;
                v[i] = dl * (float)(((qs[i] >> sh) & 3) - (hbit ? 0 : 4));
            }
        } else if constexpr (T == OB_TYPE_IQ4_XS) {
            const float d = ld_h(b);
            const unsigned sh = (unsigned)(b[2] | (b[3] << 8));
            const int jj = e0 >> 5, l = e0 & 31;
            const int ls = ((b[4 + jj / 2] >> (4 * (jj % 2))) & 0x0f) | (int)(((sh >> (2 * jj)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            const uint8_t *q = b + 8 + 16 * jj + (l & 15);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = dl * (float)cu_iq4nl_grid[l < 16 ? q[i] & 0x0f : q[i] >> 4];
        }
    }
}

/* ---- packed row layouts ---------------------------------------------------------------------
 * A row of nb blocks becomes each part of every block in turn: q4_0 [nb x 16 nibble bytes][nb x d],
 * q8_0 [nb x 32 codes][nb x d], tq2_0 [nb x 64 codes][nb x d] (but see OB_CUDA_TQ2_ALIGN below),
 * q6_K [nb x 192 (ql, qh)][nb x 16 scales][nb x d]. The same bytes (row_bytes unchanged), the
 * same values; every block's codes are then as aligned as their row (16 bytes for every Llama
 * shape), where the file's 18-, 34-, 66- and 210-byte blocks sit at every 2-byte offset, lane by
 * lane. */
/* A packed type's block parts in the file's block: offset and length of the codes, the scales
 * (q6_K only; else length 0) and d. */
struct cu_parts {
    int bytes, c_off, c_len, s_off, s_len, d_off;
};
__host__ __device__ constexpr cu_parts cu_parts_of(int type) {
    return type == OB_TYPE_Q4_0 ? cu_parts{18, 2, 16, 0, 0, 0}
         : type == OB_TYPE_Q8_0 ? cu_parts{34, 2, 32, 0, 0, 0}
         : type == OB_TYPE_TQ2_0 ? cu_parts{66, 0, 64, 0, 0, 64}
                                : cu_parts{210, 0, 192, 192, 16, 208};
}
/* tq2_0's codes 16-byte aligned in every row (default 1; 0: the layout above). BitNet's tq2_0 rows
 * of 660 and 1782 bytes are 16-byte aligned one row in four and one in eight, so most lanes would
 * load their codes a word or a byte pair at a time, where i2_s's 640- and 1728-byte rows take
 * 16-byte loads. Here a packed tq2_0 row's codes start at the row's first 16-byte boundary, the o
 * bytes before it (o even, at most the row's 2 nb bytes of d's, else 0) holding its first o / 2
 * d's, the others after the codes. The layout then depends on where the row lies mod 16: it is
 * packed at an address of the alignment its readers see (uploads: malloc'd and cudaMalloc'd
 * bases, both 16-byte aligned), and staging copies keep that alignment (gv_stage, the feed-forward
 * kernel's bulk copies). Run 36, two builds side by side: BitNet-2B TQ2_0 tg128 +1.2% (ffn_down
 * 10.58 -> 10.21 us, QKV 10.21 -> 9.98), TQ1_0 (taken as tq2_0) +1.3%. */
#ifndef OB_CUDA_TQ2_ALIGN
#define OB_CUDA_TQ2_ALIGN 1
#endif
/* The bytes of d's before a packed tq2_0 row's codes, for a row at address a of nb blocks. */
__host__ __device__ __forceinline__ int cu_tq2_lead(uintptr_t a, int nb) {
    const int o = (int)((0u - (unsigned)a) & 15u);
    return OB_CUDA_TQ2_ALIGN && (o & 1) == 0 && o <= 2 * nb ? o : 0;
}
/* Block k's parts in a packed row of nb blocks. */
struct cu_pk {
    const uint8_t *codes, *scales, *d; /* scales: q6_K only */
};
template <int T> __host__ __device__ __forceinline__ cu_pk cu_pk_at(const uint8_t *row, int nb, int k) {
    constexpr cu_parts P = cu_parts_of(T);
    if constexpr (T == OB_TYPE_TQ2_0 && OB_CUDA_TQ2_ALIGN) {
        const int o = cu_tq2_lead((uintptr_t)row, nb);
        return {row + o + P.c_len * k, row, 2 * k < o ? row + 2 * k : row + P.c_len * nb + 2 * k};
    }
    return {row + P.c_len * k, row + P.c_len * nb + P.s_len * k, row + (P.c_len + P.s_len) * nb + 2 * k};
}

/* The packed layout of n_out rows of type (dst and src of the tensor's size; other types: copied). */
static inline void cu_pack_rows(int type, const uint8_t *src, uint8_t *dst, int64_t n_in, int64_t n_out) {
    const size_t rb = ob_type_row_size(type, n_in);
    if (!cu_packed_type(type)) {
        memcpy(dst, src, rb * (size_t)n_out);
        return;
    }
    const cu_parts P = cu_parts_of(type);
    const size_t nb = rb / (size_t)P.bytes;
    for (int64_t r = 0; r < n_out; r++) {
        const uint8_t *s = src + (size_t)r * rb;
        uint8_t *row = dst + (size_t)r * rb;
        for (size_t k = 0; k < nb; k++) {
            const uint8_t *b = s + k * (size_t)P.bytes;
            if (type == OB_TYPE_TQ2_0 && OB_CUDA_TQ2_ALIGN) { /* (where cu_pk_at reads them: row's own address) */
                const cu_pk p = cu_pk_at<OB_TYPE_TQ2_0>(row, (int)nb, (int)k);
                memcpy((uint8_t *)p.codes, b + P.c_off, (size_t)P.c_len);
                memcpy((uint8_t *)p.d, b + P.d_off, 2);
                continue;
            }
            memcpy(row + P.c_len * k, b + P.c_off, (size_t)P.c_len);
            if (P.s_len) memcpy(row + P.c_len * nb + P.s_len * k, b + P.s_off, (size_t)P.s_len);
            memcpy(row + (P.c_len + P.s_len) * nb + 2 * k, b + P.d_off, 2);
        }
    }
}

/* deq8 of a row as uploaded (rb: the row's bytes, which give nb): the packed types here, the
 * others deq8. */
template <int T> __device__ __forceinline__ void deq8r(const uint8_t *row, int64_t j, size_t rb, float v[8]) {
    if constexpr (cu_packed_type(T)) {
        const int nb = (int)(rb / cu_type<T>::bytes);
        if constexpr (T == OB_TYPE_Q4_0) {
            const cu_pk p = cu_pk_at<T>(row, nb, (int)(j >> 2));
            const float d = ld_h(p.d);
            int q[8];
            nib8(p.codes, (int)(j & 3), q);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = (float)(q[i] - 8) * d;
        } else if constexpr (T == OB_TYPE_Q8_0) {
            const cu_pk p = cu_pk_at<T>(row, nb, (int)(j >> 2));
            const float d = ld_h(p.d);
            uint8_t q[8];
            ld_8a2(p.codes + 8 * (j & 3), q);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = (float)(int8_t)q[i] * d;
        } else if constexpr (T == OB_TYPE_TQ2_0) {
            const cu_pk p = cu_pk_at<T>(row, nb, (int)(j >> 5));
            const float d = ld_h(p.d);
            const int e0 = (int)(j & 31) * 8, half = e0 >> 7, k = (e0 & 127) >> 5, m = e0 & 31;
            uint8_t q[8];
            ld_8a2(p.codes + half * 32 + m, q);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = (float)(((q[i] >> (2 * k)) & 3) - 1) * d;
        } else {
            const cu_pk p = cu_pk_at<T>(row, nb, (int)(j >> 5));
            const int e0 = (int)(j & 31) * 8, h = e0 >> 7, l = e0 & 127, g = l >> 5, m = l & 31;
            const float dl = ld_h(p.d) * (float)(int8_t)p.scales[8 * h + (m >> 4) + 2 * g];
            uint8_t ql[8], qh[8];
            ld_8a2(p.codes + 64 * h + m + 32 * (g & 1), ql);
            ld_8a2(p.codes + 128 + 32 * h + m, qh);
            q6k_vals(ql, qh, g, dl, v);
        }
    } else {
        deq8<T>(row, j, v);
    }
}

/* One switch over the types every kernel handles: F(T) is instantiated per type. */
#define CU_FOR_TYPE(type, F)                                                                   \
    switch (type) {                                                                            \
    case OB_TYPE_F32: F(OB_TYPE_F32); break;       case OB_TYPE_F16: F(OB_TYPE_F16); break;     \
    case OB_TYPE_BF16: F(OB_TYPE_BF16); break;     case OB_TYPE_Q4_0: F(OB_TYPE_Q4_0); break;   \
    case OB_TYPE_Q4_1: F(OB_TYPE_Q4_1); break;     case OB_TYPE_Q5_0: F(OB_TYPE_Q5_0); break;   \
    case OB_TYPE_Q5_1: F(OB_TYPE_Q5_1); break;     case OB_TYPE_Q8_0: F(OB_TYPE_Q8_0); break;   \
    case OB_TYPE_Q2_K: F(OB_TYPE_Q2_K); break;     case OB_TYPE_Q3_K: F(OB_TYPE_Q3_K); break;   \
    case OB_TYPE_Q4_K: F(OB_TYPE_Q4_K); break;     case OB_TYPE_Q5_K: F(OB_TYPE_Q5_K); break;   \
    case OB_TYPE_Q6_K: F(OB_TYPE_Q6_K); break;     case OB_TYPE_IQ4_NL: F(OB_TYPE_IQ4_NL); break; \
    case OB_TYPE_IQ4_XS: F(OB_TYPE_IQ4_XS); break; case OB_TYPE_TQ1_0: F(OB_TYPE_TQ1_0); break; \
    case OB_TYPE_TQ2_0: F(OB_TYPE_TQ2_0); break;   case OB_TYPE_I2_S: F(OB_TYPE_I2_S); break;   \
    case OB_TYPE_MXFP4: F(OB_TYPE_MXFP4); break;   case OB_TYPE_LEAN4: F(OB_TYPE_LEAN4); break; \
    default: fprintf(stderr, "cuda backend: weight type %d reached a kernel without support\n", type); abort(); \
    }

#endif
