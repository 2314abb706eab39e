/* kernels_avx512.c — the kernel table for AVX-512 F/BW/VL/DQ with VNNI (Ice Lake, Sapphire
 * Rapids, Zen 4 and later). Built with those target flags (Makefile) and used only after
 * ob_kernels_avx512() has checked the CPU.
 *
 * Owns: the fast versions of kernels.h's operations for this instruction set.
 *  - Decode (gemv_*): 16 weight rows at a time. Each row's block is unpacked to u8 codes in
 *    registers and multiplied with the token's int8 codes by vpdpbusd; the 16 rows' integer
 *    sums are then reduced into one vector (lane = row), so the float step of kernels.h's
 *    formula runs once per block for 16 rows. Block types of 32 or 128 elements handle two
 *    blocks per 64-byte vector.
 *  - Prompts (gemm): a packed panel of 16 rows (lane = row, four codes per lane) times up to 8
 *    tokens whose four activation bytes are broadcast from memory into each vpdpbusd.
 *  - Float weights: 4 rows x 6 tokens of f32 FMAs, f16 / bf16 widened in registers.
 * Does not own: the definition of the results (kernels_scalar.c; these must match it bit for
 * bit), threads (cpu_matmul.c).
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "format/quant.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#include <immintrin.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define INLINE static inline __attribute__((always_inline))
#define UNROLL8 _Pragma("GCC unroll 8")
#define UNROLL4 _Pragma("GCC unroll 4")
#define UNROLL16 _Pragma("GCC unroll 16")

/* ---- small helpers ------------------------------------------------------------------------ */

/* acc += u8 codes w . s8 activation dword at a4, broadcast (vpdpbusd with {1to16}). Written in
 * asm because GCC copies the accumulator around the intrinsic and does not fold the broadcast. */
INLINE __m512i dpbusd_b(__m512i acc, __m512i w, const int8_t *a4) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)a4));
    return acc;
}

/* Level 1-2 of the 16-row reduction: z[i] holds rows 4i..4i+3, one partial per 128-bit lane. */
INLINE void red_l12(const __m512i v[16], __m512i z[4]) {
    __m512i w[8];
    UNROLL8 for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    UNROLL4 for (int i = 0; i < 4; i++)
        z[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(w[2 * i], w[2 * i + 1]), _mm512_unpackhi_epi64(w[2 * i], w[2 * i + 1]));
}

/* Lane r = sum of all lanes of v[r]. */
INLINE __m512i hsum16(const __m512i v[16]) {
    __m512i z[4], u[2];
    red_l12(v, z);
    UNROLL4 for (int i = 0; i < 2; i++)
        u[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0x88), _mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
}

/* Two blocks per vector: lane r of *s0 = the lanes of v[r] in 128-bit groups PA (block 0),
 * of *s1 = the groups PB (block 1). IA/IB select them: 0x88/0xDD pair groups {0,1} and {2,3},
 * 0x44/0xEE pair {0,2} and {1,3}. */
INLINE void hsum16x2(const __m512i v[16], const int ia, const int ib, __m512i *s0, __m512i *s1) {
    __m512i z[4], u[2];
    red_l12(v, z);
    for (int i = 0; i < 2; i++) {
        if (ia == 0x88)
            u[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0x88), _mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0xDD));
        else
            u[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0x44), _mm512_shuffle_i32x4(z[2 * i], z[2 * i + 1], 0xEE));
    }
    (void)ib;
    *s0 = _mm512_shuffle_i32x4(u[0], u[1], 0x88);
    *s1 = _mm512_shuffle_i32x4(u[0], u[1], 0xDD);
}

/* fp16 scales of 16 rows: the 16-bit value at base + idx[r] (HI: the upper half of the dword
 * at base + idx[r], i.e. the scale sits 2 bytes further). */
INLINE __m512 gather_half(const uint8_t *base, __m512i idx, const int hi) {
    __m512i g = _mm512_i32gather_epi32(idx, (const void *)base, 1);
    if (hi) g = _mm512_srli_epi32(g, 16);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

INLINE __m512 kstep(__m512 acc, __m512i isum, __m512 dw, float da) {
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum), dw), _mm512_set1_ps(da), acc);
}

/* Row offsets (bytes) of up to 16 rows from the first; rows past nr repeat the last one. */
INLINE __m512i row_index(int nr, size_t rb) {
    int32_t idx[16];
    for (int i = 0; i < 16; i++) idx[i] = (int32_t)((size_t)(i < nr ? i : nr - 1) * rb);
    return _mm512_loadu_si512(idx);
}

#define GEMV_PROLOGUE(QB, SB)                                                                  \
    const int64_t k = w->n_in, nb = k / (QB);                                                  \
    const size_t rb = w->row_bytes;                                                            \
    const int8_t *qs = a->qs + t * k;                                                          \
    const float *da = a->d + t * nb;                                                           \
    const int32_t *ac = a->ac + t * (k / (SB));                                                \
    (void)ac;                                                                                  \
    (void)rb;                                                                                  \
    for (int64_t r = r0; r < r1; r += 16) {                                                    \
        const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;                                       \
        const uint8_t *base = (const uint8_t *)w->data + (size_t)r * rb;                       \
        const __m512i vidx = row_index(nr, rb);                                                \
        (void)vidx;                                                                            \
        const uint8_t *rowp[16];                                                               \
        for (int i = 0; i < 16; i++) rowp[i] = base + (size_t)(i < nr ? i : nr - 1) * rb;      \
        const char *pfb = (const char *)base + 16 * rb;                                        \
        (void)pfb;                                                                             \
        __m512 acc = _mm512_setzero_ps();

/* Software prefetch of the next 16-row group: rows are contiguous, so the group after this one
 * is the 16 * rb bytes after it; step STEP (of S bytes per row) of row I fetches the line at
 * (STEP * 16 + I) * S, which sweeps that region in order while this group is computed. The 16
 * interleaved row streams of a group defeat the hardware prefetcher on short rows. Into L2
 * (T1): from DRAM 8-15% faster than into L1 for every type (fewer L1 fill buffers held), the
 * same in cache. */
#define GEMV_PREFETCH(STEP, I, S)                                                              \
    for (int pf_o = 0; pf_o < (S); pf_o += 64)                                                 \
        _mm_prefetch(pfb + ((size_t)(STEP) * 16 + (I)) * (S) + pf_o, _MM_HINT_T1)

#define GEMV_EPILOGUE                                                                          \
        acc = _mm512_mul_ps(acc, _mm512_set1_ps(w->scale));                                    \
        _mm512_mask_storeu_ps(y + (r - r0), (__mmask16)((1u << nr) - 1), acc);                 \
    }

/* ---- q8_0 --------------------------------------------------------------------------------- */

static void gemv_q8_0(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(32, 32)
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m512i av = _mm512_loadu_si512(qs + b * 32);
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b / 2, i, 68);
            const uint8_t *p = rowp[i] + b * 34 + 2;
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                                           _mm256_loadu_si256((const __m256i *)(p + 34)), 1);
            s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(v, x80), av);
        }
        __m512i i0, i1;
        hsum16x2(s, 0x88, 0xDD, &i0, &i1);
        i0 = _mm512_add_epi32(i0, _mm512_set1_epi32(ac[b]));
        i1 = _mm512_add_epi32(i1, _mm512_set1_epi32(ac[b + 1]));
        acc = kstep(acc, i0, gather_half(base + b * 34, vidx, 0), da[b]);
        acc = kstep(acc, i1, gather_half(base + (b + 1) * 34, vidx, 0), da[b + 1]);
    }
    if (b < nb) {
        const __m512i av = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(qs + b * 32)));
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            __m512i v = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(rowp[i] + b * 34 + 2)));
            s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(v, x80), av);
        }
        __m512i i0, i1;
        hsum16x2(s, 0x88, 0xDD, &i0, &i1);
        i0 = _mm512_add_epi32(i0, _mm512_set1_epi32(ac[b]));
        acc = kstep(acc, i0, gather_half(base + b * 34, vidx, 0), da[b]);
    }
    GEMV_EPILOGUE
}

/* ---- q4_0: two blocks' nibbles as [b lo | b+1 lo | b hi | b+1 hi] ---------------------------- */

static void gemv_q4_0(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(32, 32)
    const __m512i m4 = _mm512_set1_epi8(15);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i av = _mm512_loadu_si512(qs + b * 32); /* [b 0-15, b 16-31, b+1 0-15, b+1 16-31] */
        av = _mm512_shuffle_i32x4(av, av, _MM_SHUFFLE(3, 1, 2, 0));
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b / 2, i, 36);
            const uint8_t *p = rowp[i] + b * 18 + 2;
            __m256i y2 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                                 _mm_loadu_si128((const __m128i *)(p + 18)), 1);
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(y2), _mm256_srli_epi16(y2, 4), 1);
            s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, m4), av);
        }
        __m512i i0, i1;
        hsum16x2(s, 0x44, 0xEE, &i0, &i1);
        i0 = _mm512_add_epi32(i0, _mm512_set1_epi32(ac[b]));
        i1 = _mm512_add_epi32(i1, _mm512_set1_epi32(ac[b + 1]));
        acc = kstep(acc, i0, gather_half(base + b * 18, vidx, 0), da[b]);
        acc = kstep(acc, i1, gather_half(base + (b + 1) * 18, vidx, 0), da[b + 1]);
    }
    if (b < nb) {
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(qs + b * 32));
        /* [b lo, 0, b hi, 0] so the pair reduction's block 0 holds it */
        __m512i av = _mm512_inserti32x4(_mm512_zextsi128_si512(_mm256_castsi256_si128(a1)), _mm256_extracti128_si256(a1, 1), 2);
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(rowp[i] + b * 18 + 2));
            __m512i v = _mm512_inserti32x4(_mm512_zextsi128_si512(x), _mm_srli_epi16(x, 4), 2);
            s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, m4), av);
        }
        __m512i i0, i1;
        hsum16x2(s, 0x44, 0xEE, &i0, &i1);
        i0 = _mm512_add_epi32(i0, _mm512_set1_epi32(ac[b]));
        acc = kstep(acc, i0, gather_half(base + b * 18, vidx, 0), da[b]);
    }
    GEMV_EPILOGUE
}

/* ---- tq2_0: 64 code bytes = 4 vectors of 2-bit fields ---------------------------------------- */

static void gemv_tq2_0(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(256, 256)
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = qs + b * 256;
        __m512i av[4];
        for (int j = 0; j < 4; j++) /* field j of byte m: element 32j + m (first half), 128 + 32j + m */
            av[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q + 32 * j))),
                                       _mm256_loadu_si256((const __m256i *)(q + 128 + 32 * j)), 1);
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b, i, 64); /* of 66: the next step's first line covers the rest */
            __m512i v = _mm512_loadu_si512(rowp[i] + b * 66);
            __m512i x = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, m3), av[0]);
            x = _mm512_dpbusd_epi32(x, _mm512_and_si512(_mm512_srli_epi16(v, 2), m3), av[1]);
            x = _mm512_dpbusd_epi32(x, _mm512_and_si512(_mm512_srli_epi16(v, 4), m3), av[2]);
            s[i] = _mm512_dpbusd_epi32(x, _mm512_and_si512(_mm512_srli_epi16(v, 6), m3), av[3]);
        }
        __m512i isum = _mm512_add_epi32(hsum16(s), _mm512_set1_epi32(ac[b]));
        acc = kstep(acc, isum, gather_half(base + b * 66 + 62, vidx, 1), da[b]);
    }
    GEMV_EPILOGUE
}

/* ---- tq1_0: trit k of byte q is t_k = (3 p_k) >> 8 with p_k = q * 3^k mod 256, and p_{k+1} =
 * 3 p_k mod 256, so 256 t_k = 3 p_k - p_{k+1}: the trits' dot product is linear in the bytes p_k,
 *   256 * sum_k t_k . a_k = 3 * sum_k p_k . a_k + sum_k p_{k+1} . (-a_k),
 * two vpdpbusd per position on p_k (kept by byte adds: p + p + p, wrapping) and no per-trit
 * extraction. Exact: each lane's sum is 256 times the trit sum (|3A + B| < 2^23 per lane). One
 * masked 52-byte load covers all three spans; trit position k pairs with the activations laid
 * out in av[k]. */

static void gemv_tq1_0(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(256, 256)
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = qs + b * 256;
        __m512i av[5], nv[5]; /* position k: elements 32k.., 160 + 16k.., 240 + 4k.. (k < 4), zeros */
        UNROLL8 for (int k = 0; k < 5; k++) {
            int32_t t4 = 0;
            if (k < 4) memcpy(&t4, q + 240 + 4 * k, 4);
            av[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q + 32 * k))),
                                       _mm256_set_m128i(_mm_cvtsi32_si128(t4), _mm_loadu_si128((const __m128i *)(q + 160 + 16 * k))), 1);
            nv[k] = _mm512_sub_epi8(_mm512_setzero_si512(), av[k]);
        }
        __m512i s[16];
        UNROLL16 for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b, i, 54);
            __m512i p = _mm512_maskz_loadu_epi8(0x000FFFFFFFFFFFFFull, rowp[i] + b * 54);
            __m512i x3 = _mm512_setzero_si512(), x1 = _mm512_setzero_si512();
            UNROLL8 for (int k = 0; k < 5; k++) {
                x3 = _mm512_dpbusd_epi32(x3, p, av[k]);
                p = _mm512_add_epi8(_mm512_add_epi8(p, p), p);
                x1 = _mm512_dpbusd_epi32(x1, p, nv[k]);
            }
            s[i] = _mm512_add_epi32(_mm512_add_epi32(x3, x1), _mm512_add_epi32(x3, x3));
        }
        __m512i isum = _mm512_add_epi32(_mm512_srai_epi32(hsum16(s), 8), _mm512_set1_epi32(ac[b]));
        acc = kstep(acc, isum, gather_half(base + b * 54 + 50, vidx, 1), da[b]);
    }
    GEMV_EPILOGUE
}

/* ---- i2_s: two 128-element blocks per 64 bytes; group g of a block at bits 6 - 2g ----------- */

static void gemv_i2_s(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(128, 128)
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        const int8_t *q = qs + b * 128;
        __m512i av[4];
        for (int g = 0; g < 4; g++) {
            __m256i lo = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
            av[g] = two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(q + 128 + 32 * g)), 1)
                        : _mm512_zextsi256_si512(lo);
        }
        const __mmask64 lm = two ? ~0ull : 0xFFFFFFFFull;
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b / 2, i, 64);
            __m512i v = _mm512_maskz_loadu_epi8(lm, rowp[i] + b * 32);
            __m512i x = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(v, 6), m3), av[0]);
            x = _mm512_dpbusd_epi32(x, _mm512_and_si512(_mm512_srli_epi16(v, 4), m3), av[1]);
            x = _mm512_dpbusd_epi32(x, _mm512_and_si512(_mm512_srli_epi16(v, 2), m3), av[2]);
            s[i] = _mm512_dpbusd_epi32(x, _mm512_and_si512(v, m3), av[3]);
        }
        __m512i i0, i1;
        hsum16x2(s, 0x88, 0xDD, &i0, &i1);
        acc = kstep(acc, _mm512_add_epi32(i0, _mm512_set1_epi32(ac[b])), one, da[b]);
        if (two) acc = kstep(acc, _mm512_add_epi32(i1, _mm512_set1_epi32(ac[b + 1])), one, da[b + 1]);
    }
    GEMV_EPILOGUE
}

/* ---- q4_K / q5_K ---------------------------------------------------------------------------
 * Sub-block sums are at most 4 * 31 * 127 per dword lane after vpdpbusd, so vpdpwssd with the
 * scale in the low 16 bits of each dword multiplies and accumulates them exactly.
 * The 12 packed scale bytes of 16 rows are decoded together per block: the 16-byte headers
 * (d, dmin, scales) of four rows fill one vector, one row per 128-bit lane, which k4_hdr turns
 * into [8 scales | 8 mins] per lane (llama.cpp's kmask arithmetic, lanes instead of words). The
 * mins' term sum_j mn_j * ac_j of 16 rows is then one vpmaddwd per 4 rows and a transpose-add. */

static const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;

/* The 12 scale bytes to 8 scales (sm[0..1]) and 8 mins (sm[2..3]), one byte each (panel packing). */
INLINE void k4_unpack(const uint8_t *s12, uint32_t sm[4]) {
    uint32_t u[3];
    memcpy(u, s12, 12);
    sm[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    sm[2] = u[1] & kmask1;
    sm[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    sm[0] = u[0] & kmask1;
}

/* Header lanes [d|dmin, u0, u1, u2] -> [sm0, sm1, sm2, sm3] of llama.cpp's get_scale_min_k4:
 * sm0 = u0 & 0x3f.., sm1 = (u2 & 0x0f..) | ((u0 >> 2) & 0x30..), sm2 = u1 & 0x3f..,
 * sm3 = ((u2 >> 4) & 0x0f..) | ((u1 >> 2) & 0x30..). */
INLINE __m512i k4_hdr(__m512i h) {
    const __m512i cnt = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    const __m512i m1 = _mm512_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,
                                        0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f,
                                        0x0f0f0f0f, 0x3f3f3f3f);
    const __m512i m2 = _mm512_set_epi32(0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030,
                                        0, 0x30303030, 0, 0x30303030, 0);
    __m512i lo = _mm512_srlv_epi32(_mm512_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1)), cnt);  /* u0, u2, u1, u2 >> 4 */
    __m512i hi = _mm512_and_si512(_mm512_srli_epi32(_mm512_shuffle_epi32(h, _MM_SHUFFLE(2, 0, 1, 0)), 2), m2); /* -, u0, -, u1 */
    return _mm512_ternarylogic_epi32(lo, m1, hi, 0xEA); /* (lo & m1) | hi */
}

/* Lane r of the result from z, whose dword 4l + j holds row 4j + l (the transpose-adds below). */
INLINE __m512i rows4x4(__m512i z) {
    return _mm512_permutexvar_epi32(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), z);
}

INLINE void gemv_kq45(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y, const int five) {
    GEMV_PROLOGUE(256, 32)
    const int bs = five ? 176 : 144, qoff = five ? 48 : 16;
    const __m512i m4 = _mm512_set1_epi8(15);
    /* scale of each dword of chunk vector j from the broadcast [8 scales | 8 mins]: sub-blocks
     * (0, 2), (1, 3), (4, 6), (5, 7) in the low / high 256 bits (see the loads below) */
    const __m512i shc[4] = {
        _mm512_set_epi32(-2139062270, -2139062270, -2139062270, -2139062270, -2139062270, -2139062270, -2139062270, -2139062270,
                         -2139062272, -2139062272, -2139062272, -2139062272, -2139062272, -2139062272, -2139062272, -2139062272),
        _mm512_set_epi32(-2139062269, -2139062269, -2139062269, -2139062269, -2139062269, -2139062269, -2139062269, -2139062269,
                         -2139062271, -2139062271, -2139062271, -2139062271, -2139062271, -2139062271, -2139062271, -2139062271),
        _mm512_set_epi32(-2139062266, -2139062266, -2139062266, -2139062266, -2139062266, -2139062266, -2139062266, -2139062266,
                         -2139062268, -2139062268, -2139062268, -2139062268, -2139062268, -2139062268, -2139062268, -2139062268),
        _mm512_set_epi32(-2139062265, -2139062265, -2139062265, -2139062265, -2139062265, -2139062265, -2139062265, -2139062265,
                         -2139062267, -2139062267, -2139062267, -2139062267, -2139062267, -2139062267, -2139062267, -2139062267)};
    /* q5_K: the fifth bit of chunk vector j is bit (0, 2), (1, 3), (4, 6), (5, 7) (low / high 256
     * bits) of qh[l]; a dword rotation by (4 - bit) mod 32 brings it to bit 4 of the same byte */
    const __m512i hrot[4] = {_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4),
                             _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
                             _mm512_set_epi32(30, 30, 30, 30, 30, 30, 30, 30, 0, 0, 0, 0, 0, 0, 0, 0),
                             _mm512_set_epi32(29, 29, 29, 29, 29, 29, 29, 29, 31, 31, 31, 31, 31, 31, 31, 31)};
    const __m512i b4 = _mm512_set1_epi8(16);
    _Alignas(64) uint8_t scm[16][16]; /* [row][8 scales, 8 mins] of the block */
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = qs + b * 256;
        __m512i av[4];
        UNROLL4 for (int j = 0; j < 4; j++) /* sub-blocks (2c, 2c + 2) for j = 0, 2 ... see shc */
            av[j] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q + (j >> 1) * 128 + (j & 1) * 32))),
                _mm256_loadu_si256((const __m256i *)(q + (j >> 1) * 128 + (j & 1) * 32 + 64)), 1);
        /* the 8 activation sums of the block as 16-bit words in every 128-bit lane (|ac| <= 32 * 127) */
        const __m512i acw = _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(_mm256_loadu_si256((const __m256i *)(ac + b * 8))));
        __m512i hm[4], hd[4];
        UNROLL4 for (int g = 0; g < 4; g++) {
            __m512i h = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rowp[4 * g] + b * bs)));
            h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(rowp[4 * g + 1] + b * bs)), 1);
            h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(rowp[4 * g + 2] + b * bs)), 2);
            h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(rowp[4 * g + 3] + b * bs)), 3);
            hd[g] = h;
            const __m512i sm = k4_hdr(h);
            _mm512_store_si512(scm[4 * g], sm);
            hm[g] = _mm512_madd_epi16(_mm512_unpackhi_epi8(sm, _mm512_setzero_si512()), acw); /* mins x ac, pairs */
        }
        __m512i s[16];
        for (int i = 0; i < 16; i++) {
            GEMV_PREFETCH(b, i, bs);
            const uint8_t *blk = rowp[i] + b * bs;
            const __m512i scb = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)scm[i]));
            const uint8_t *qp = blk + qoff;
            __m512i qh2 = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16))) : _mm512_setzero_si512();
            __m512i x = _mm512_setzero_si512();
            UNROLL4 for (int zz = 0; zz < 2; zz++) {
                __m512i v = _mm512_loadu_si512(qp + 64 * zz); /* chunks 2zz, 2zz+1 */
                __m512i c0, c1;
                if (five) { /* (nibble & 15) | (rotated qh & 16) */
                    c0 = _mm512_ternarylogic_epi32(v, m4, _mm512_and_si512(_mm512_rolv_epi32(qh2, hrot[2 * zz]), b4), 0xEA);
                    c1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m4,
                                                   _mm512_and_si512(_mm512_rolv_epi32(qh2, hrot[2 * zz + 1]), b4), 0xEA);
                } else {
                    c0 = _mm512_and_si512(v, m4);
                    c1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
                __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c0, av[2 * zz]);
                __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c1, av[2 * zz + 1]);
                x = _mm512_dpwssd_epi32(x, d0, _mm512_shuffle_epi8(scb, shc[2 * zz]));
                x = _mm512_dpwssd_epi32(x, d1, _mm512_shuffle_epi8(scb, shc[2 * zz + 1]));
            }
            s[i] = x;
        }
        __m512i isum = hsum16(s);
        /* transpose-adds: rows 4g + l in lane l of hm[g], four pair sums each; header dword 0 likewise */
        __m512i w0 = _mm512_add_epi32(_mm512_unpacklo_epi32(hm[0], hm[1]), _mm512_unpackhi_epi32(hm[0], hm[1]));
        __m512i w1 = _mm512_add_epi32(_mm512_unpacklo_epi32(hm[2], hm[3]), _mm512_unpackhi_epi32(hm[2], hm[3]));
        __m512i imn = rows4x4(_mm512_add_epi32(_mm512_unpacklo_epi64(w0, w1), _mm512_unpackhi_epi64(w0, w1)));
        __m512i dd = rows4x4(_mm512_unpacklo_epi64(_mm512_unpacklo_epi32(hd[0], hd[1]), _mm512_unpacklo_epi32(hd[2], hd[3]))); /* d | dmin << 16 */
        __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        __m512 dm = _mm512_xor_ps(_mm512_set1_ps(-0.0f), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
        acc = kstep(acc, isum, dw, da[b]);
        acc = kstep(acc, imn, dm, da[b]);
    }
    GEMV_EPILOGUE
}

static void gemv_q4_K(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    gemv_kq45(w, r0, r1, a, t, y, 0);
}
static void gemv_q5_K(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    gemv_kq45(w, r0, r1, a, t, y, 1);
}

/* ---- q6_K: codes in natural order per 128-element half; 16-element sub-blocks are 4 lanes ----
 * The offset -32 goes into each vpdpbusd's starting value (per lane -32 * the sum of its four
 * activations, once per block), so a lane holds sum (code - 32) * a, |.| <= 4 * 32 * 127: exact
 * in the 16 bits that vpdpwssd multiplies by the sub-block scale. */

static void gemv_q6_K(const ob_weight *w, int64_t r0, int64_t r1, const ob_q8act *a, int t, float *y) {
    GEMV_PROLOGUE(256, 16)
    const __m512i m4 = _mm512_set1_epi8(15), m33 = _mm512_set1_epi8(0x33), lo16 = _mm512_set1_epi32(0xffff);
    __m512i pidx[4];
    for (int g = 0; g < 4; g++)
        pidx[g] = _mm512_set_epi32(4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 3, 4 * g + 2, 4 * g + 2, 4 * g + 2, 4 * g + 2,
                                   4 * g + 1, 4 * g + 1, 4 * g + 1, 4 * g + 1, 4 * g, 4 * g, 4 * g, 4 * g);
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = qs + b * 256;
        __m512i av[4], off[4];
        UNROLL4 for (int j = 0; j < 4; j++) {
            av[j] = _mm512_loadu_si512(q + 64 * j);
            off[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), av[j]));
        }
        __m512i s[16];
        UNROLL16 for (int i = 0; i < 16; i++) { /* unrolled: +15% (q4_K / q5_K lose 20% so) */
            GEMV_PREFETCH(b, i, 210);
            const uint8_t *blk = rowp[i] + b * 210;
            const __m512i sc = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))), lo16);
            __m512i x = _mm512_setzero_si512();
            UNROLL4 for (int h = 0; h < 2; h++) {
                __m512i L = _mm512_loadu_si512(blk + 64 * h);
                __m256i Q = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
                /* high 2 bits of codes 0-31 | 32-63 at bits 0-1 (c0) and 4-5 (c1) of each byte */
                __m512i G = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(Q), _mm256_srli_epi16(Q, 2), 1), m33);
                __m512i c0 = _mm512_ternarylogic_epi32(L, m4, _mm512_slli_epi16(G, 4), 0xE2); /* m4 ? L : G << 4 */
                __m512i c1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(L, 4), m4, G, 0xE2);                  /* m4 ? L >> 4 : G */
                __m512i d0 = _mm512_dpbusd_epi32(off[2 * h], c0, av[2 * h]);
                __m512i d1 = _mm512_dpbusd_epi32(off[2 * h + 1], c1, av[2 * h + 1]);
                x = _mm512_dpwssd_epi32(x, d0, _mm512_permutexvar_epi32(pidx[2 * h], sc));
                x = _mm512_dpwssd_epi32(x, d1, _mm512_permutexvar_epi32(pidx[2 * h + 1], sc));
            }
            s[i] = x;
        }
        acc = kstep(acc, hsum16(s), gather_half(base + b * 210 + 206, vidx, 1), da[b]);
    }
    GEMV_EPILOGUE
}

/* ---- panel packing: SIMD row decoders (natural order, as the scalar decoders) + transpose ---- */

static void xdec_q8_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 34;
    *dw = _cvtsh_ss((uint16_t)(blk[0] | blk[1] << 8));
    _mm256_storeu_si256((__m256i *)codes, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80)));
}

static void xdec_q4_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 18;
    *dw = _cvtsh_ss((uint16_t)(blk[0] | blk[1] << 8));
    __m128i x = _mm_loadu_si128((const __m128i *)(blk + 2)), m4 = _mm_set1_epi8(15);
    _mm_storeu_si128((__m128i *)codes, _mm_and_si128(x, m4));
    _mm_storeu_si128((__m128i *)(codes + 16), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
}

static void xdec_tq2_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 66;
    *dw = _cvtsh_ss((uint16_t)(blk[64] | blk[65] << 8));
    __m512i v = _mm512_loadu_si512(blk), m3 = _mm512_set1_epi8(3);
    for (int j = 0; j < 4; j++) {
        __m512i c = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3);
        _mm256_storeu_si256((__m256i *)(codes + 32 * j), _mm512_castsi512_si256(c));
        _mm256_storeu_si256((__m256i *)(codes + 128 + 32 * j), _mm512_extracti64x4_epi64(c, 1));
    }
}

static void xdec_tq1_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 54;
    *dw = _cvtsh_ss((uint16_t)(blk[52] | blk[53] << 8));
    const __m512i c86 = _mm512_set1_epi8(86), c171 = _mm512_set1_epi8((char)171), one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2);
    __m512i p = _mm512_maskz_loadu_epi8(0x000FFFFFFFFFFFFFull, blk);
    for (int k = 0; k < 5; k++) {
        if (k) p = _mm512_add_epi8(_mm512_add_epi8(p, p), p);
        __m512i t = _mm512_maskz_mov_epi8(_mm512_cmpge_epu8_mask(p, c86), one);
        t = _mm512_mask_mov_epi8(t, _mm512_cmpge_epu8_mask(p, c171), two);
        _mm256_storeu_si256((__m256i *)(codes + 32 * k), _mm512_castsi512_si256(t));
        _mm_storeu_si128((__m128i *)(codes + 160 + 16 * k), _mm512_extracti32x4_epi32(t, 2));
        if (k < 4) {
            int32_t v = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(t, 3));
            memcpy(codes + 240 + 4 * k, &v, 4);
        }
    }
}

static void xdec_i2_s(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(row + b * 32)), m3 = _mm256_set1_epi8(3);
    *dw = 1.0f;
    for (int g = 0; g < 4; g++)
        _mm256_storeu_si256((__m256i *)(codes + 32 * g), _mm256_and_si256(_mm256_srli_epi16(v, 6 - 2 * g), m3));
}

INLINE void xdec_kq45(const uint8_t *blk, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm, const int five) {
    *dw = _cvtsh_ss((uint16_t)(blk[0] | blk[1] << 8));
    *dm = -_cvtsh_ss((uint16_t)(blk[2] | blk[3] << 8));
    uint32_t sm[4];
    k4_unpack(blk + 4, sm);
    const uint8_t *s8 = (const uint8_t *)sm;
    for (int j = 0; j < 8; j++) sc[j] = s8[j], mn[j] = s8[8 + j];
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i h = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(codes + 64 * c), lo);
        _mm256_storeu_si256((__m256i *)(codes + 64 * c + 32), hi);
    }
}

static void xdec_q4_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    xdec_kq45(row + b * 144, codes, sc, mn, dw, dm, 0);
}
static void xdec_q5_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    xdec_kq45(row + b * 176, codes, sc, mn, dw, dm, 1);
}

static void xdec_q6_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 210;
    *dw = _cvtsh_ss((uint16_t)(blk[208] | blk[209] << 8));
    _mm512_storeu_si512(sc, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192))));
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m512i L = _mm512_loadu_si512(blk + 64 * h);
        __m256i Q = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        __m512i H01 = _mm512_inserti64x4(_mm512_castsi256_si512(Q), _mm256_srli_epi16(Q, 2), 1);
        __m512i H23 = _mm512_srli_epi16(H01, 4);
        _mm512_storeu_si512(codes + 128 * h, _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_slli_epi16(_mm512_and_si512(H01, m3), 4)));
        _mm512_storeu_si512(codes + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                                  _mm512_slli_epi16(_mm512_and_si512(H23, m3), 4)));
    }
}

/* out[i] = dword i of r[0..15] (a 16 x 16 dword transpose). */
INLINE void tr16(const __m512i r[16], __m512i out[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i ab0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), ab1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i cd0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), cd1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        out[j] = _mm512_shuffle_i32x4(ab0, cd0, 0x88);
        out[4 + j] = _mm512_shuffle_i32x4(ab0, cd0, 0xDD);
        out[8 + j] = _mm512_shuffle_i32x4(ab1, cd1, 0x88);
        out[12 + j] = _mm512_shuffle_i32x4(ab1, cd1, 0xDD);
    }
}

/* Decodes 16 rows (padding rows repeat the last one with zero scales) block by block into
 * natural-order codes, 64 elements per row at a time, and transposes them into the panel. */
INLINE void pack16(const ob_weight *w, int64_t r0, ob_panel *p, ob_kdec_fn dec) {
    const ob_kfmt *f = ob_kfmt_get(w->type);
    const int64_t k = w->n_in, nb = k / f->qb, nsub = f->qb / f->sb;
    const int step = f->qb < 64 ? 64 / f->qb : 1; /* blocks per 64-code group */
    const size_t gb = w->row_bytes / (size_t)nb;   /* bytes per block (about: i2_s rows end in a scale) */
    _Alignas(64) uint8_t codes[16][256];
    int32_t sc[16], mn[16];
    p->scale = w->scale;
    for (int64_t b = 0; b < nb; b += step) {
        const int nblk = b + step <= nb ? step : (int)(nb - b);
        for (int r = 0; r < 16; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + (r < p->nr ? r : p->nr - 1)) * w->row_bytes;
            /* the same bytes of the row two panels on: 16 interleaved row streams are more than the
             * hardware prefetcher follows (a prefetch past the matrix is harmless) */
            for (size_t o = (size_t)b * gb; o < (size_t)(b + nblk) * gb; o += 64)
                _mm_prefetch((const char *)row + 32 * w->row_bytes + o, _MM_HINT_T0);
            for (int s = 0; s < step; s++) {
                float dw = 0, dm = 0;
                if (s >= nblk) { /* past the last block: zero codes, nothing stored */
                    memset(codes[r] + s * f->qb, 0, (size_t)f->qb);
                    continue;
                }
                mn[0] = 0;
                dec(row, b + s, codes[r] + s * f->qb, sc, mn, &dw, &dm);
                const int live = r < p->nr;
                if (f->has_sc)
                    for (int j = 0; j < nsub; j++) p->sc[((b + s) * nsub + j) * 16 + r] = live ? sc[j] : 0;
                if (f->has_mn) {
                    for (int j = 0; j < nsub; j++) p->mn[((b + s) * nsub + j) * 16 + r] = live ? mn[j] : 0;
                    p->dm[(b + s) * 16 + r] = live ? dm : 0;
                }
                p->dw[(b + s) * 16 + r] = live ? dw : 0;
            }
        }
        const int ncodes = nblk * f->qb; /* codes of this step per row */
        for (int g = 0; g < (ncodes + 63) / 64; g++) {
            __m512i in[16], out[16];
            for (int r = 0; r < 16; r++) in[r] = _mm512_load_si512(codes[r] + 64 * g);
            tr16(in, out);
            uint8_t *dst = p->codes + (b * f->qb + 64 * g) * 16;
            const int nq = ncodes - 64 * g >= 64 ? 16 : (ncodes - 64 * g) / 4;
            for (int i = 0; i < nq; i++) _mm512_store_si512(dst + 64 * i, out[i]);
        }
    }
}

#define PACK(T) \
    static void pack_##T(const ob_weight *w, int64_t r0, ob_panel *p) { pack16(w, r0, p, xdec_##T); }
PACK(q8_0) PACK(q4_0) PACK(tq2_0) PACK(tq1_0) PACK(i2_s) PACK(q4_K) PACK(q5_K) PACK(q6_K)

/* types without a vector decoder: the scalar one, still transposed by SIMD */
static void pack_any(const ob_weight *w, int64_t r0, ob_panel *p) { pack16(w, r0, p, ob_kdec_get(w->type)); }

/* ---- GEMM on packed panels ------------------------------------------------------------------
 * Tile: 16 rows (one vector, lane = row) x C tokens. Per group of 4 elements one load of the
 * panel and C vpdpbusd whose activation dword is broadcast from memory. */

INLINE void gemm_tile(const int QB, const int SB, const int OFF, const int SC, const int MN, const int C,
                      const ob_panel *p, const ob_q8act *a, int t, float *y, int64_t ldy) {
    const int64_t k = a->k, nb = k / QB, nsb = k / SB, nsub = QB / SB;
    const int8_t *q[8];
    const int32_t *ac[8];
    const float *da[8];
    UNROLL8 for (int c = 0; c < C; c++) {
        q[c] = a->qs + (t + c) * k;
        ac[c] = a->ac + (t + c) * nsb;
        da[c] = a->d + (t + c) * nb;
    }
    __m512 facc[8];
    UNROLL8 for (int c = 0; c < C; c++) facc[c] = _mm512_setzero_ps();
    const uint8_t *codes = p->codes;
    for (int64_t b = 0; b < nb; b++) {
        __m512i isum[8];
        UNROLL8 for (int c = 0; c < C; c++) isum[c] = _mm512_setzero_si512();
        for (int j = 0; j < nsub; j++) {
            const int64_t js = b * nsub + j;
            __m512i iacc[8];
            UNROLL8 for (int c = 0; c < C; c++) iacc[c] = OFF ? _mm512_set1_epi32(ac[c][js]) : _mm512_setzero_si512();
            for (int i = 0; i < SB / 4; i++) {
                const int64_t kk = js * SB + 4 * i;
                const __m512i wv = _mm512_load_si512(codes + kk * 16);
                UNROLL8 for (int c = 0; c < C; c++) iacc[c] = dpbusd_b(iacc[c], wv, q[c] + kk);
            }
            if (SC) {
                const __m512i scv = _mm512_load_si512(p->sc + js * 16);
                UNROLL8 for (int c = 0; c < C; c++) {
                    __m512i m = _mm512_mullo_epi32(iacc[c], scv);
                    isum[c] = _mm512_add_epi32(isum[c], m);
                }
            } else {
                UNROLL8 for (int c = 0; c < C; c++) isum[c] = iacc[c];
            }
        }
        const __m512 dw = _mm512_load_ps(p->dw + b * 16);
        UNROLL8 for (int c = 0; c < C; c++) facc[c] = kstep(facc[c], isum[c], dw, da[c][b]);
        if (MN) {
            const __m512 dm = _mm512_load_ps(p->dm + b * 16);
            UNROLL8 for (int c = 0; c < C; c++) {
                __m512i m = _mm512_setzero_si512();
                for (int j = 0; j < nsub; j++)
                    m = _mm512_add_epi32(m, _mm512_mullo_epi32(_mm512_load_si512(p->mn + (b * nsub + j) * 16),
                                                               _mm512_set1_epi32(ac[c][b * nsub + j])));
                facc[c] = kstep(facc[c], m, dm, da[c][b]);
            }
        }
    }
    const __mmask16 sm = (__mmask16)((1u << p->nr) - 1);
    const __m512 ts = _mm512_set1_ps(p->scale);
    UNROLL8 for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(y + c * ldy, sm, _mm512_mul_ps(facc[c], ts));
}

#define GEMM_FMT(NAME, QB, SB, OFF, SC, MN)                                                     \
    static void NAME(const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) { \
        int t = t0;                                                                             \
        for (; t + 8 <= t1; t += 8) gemm_tile(QB, SB, OFF, SC, MN, 8, p, a, t, y + (t - t0) * ldy, ldy); \
        if (t + 4 <= t1) { gemm_tile(QB, SB, OFF, SC, MN, 4, p, a, t, y + (t - t0) * ldy, ldy); t += 4; } \
        if (t + 2 <= t1) { gemm_tile(QB, SB, OFF, SC, MN, 2, p, a, t, y + (t - t0) * ldy, ldy); t += 2; } \
        if (t < t1) gemm_tile(QB, SB, OFF, SC, MN, 1, p, a, t, y + (t - t0) * ldy, ldy);        \
    }

GEMM_FMT(gemm_b32, 32, 32, 1, 0, 0)    /* q8_0 q4_0 q5_0 iq4_nl mxfp4 */
GEMM_FMT(gemm_m32, 32, 32, 0, 0, 1)    /* q4_1 q5_1 */
GEMM_FMT(gemm_b128, 128, 128, 1, 0, 0) /* i2_s */
GEMM_FMT(gemm_b256, 256, 256, 1, 0, 0) /* tq1_0 tq2_0 */
GEMM_FMT(gemm_k4, 256, 32, 0, 1, 1)    /* q4_K q5_K */
GEMM_FMT(gemm_x4, 256, 32, 1, 1, 0)    /* iq4_xs */
GEMM_FMT(gemm_k2, 256, 16, 0, 1, 1)    /* q2_K */
GEMM_FMT(gemm_k6, 256, 16, 1, 1, 0)    /* q3_K q6_K */

static void gemm(const ob_kfmt *f, const ob_panel *p, const ob_q8act *a, int t0, int t1, float *y, int64_t ldy) {
    if (f->qb == 32) (f->has_mn ? gemm_m32 : gemm_b32)(p, a, t0, t1, y, ldy);
    else if (f->qb == 128) gemm_b128(p, a, t0, t1, y, ldy);
    else if (!f->has_sc) gemm_b256(p, a, t0, t1, y, ldy);
    else if (f->sb == 32) (f->has_mn ? gemm_k4 : gemm_x4)(p, a, t0, t1, y, ldy);
    else (f->has_mn ? gemm_k2 : gemm_k6)(p, a, t0, t1, y, ldy);
}

/* ---- activation quantizer ----------------------------------------------------------------- */

static int on_grid(const float *x, int64_t k, float id) {
    const __m512 vid = _mm512_set1_ps(id), tol = _mm512_set1_ps(1e-3f);
    for (int64_t i = 0; i < k; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vid);
        __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r)), tol, _CMP_LE_OQ) != 0xFFFF) return 0;
    }
    return 1;
}

static void quant_row(const float *x, int64_t k, const ob_kfmt *f, int8_t *qs, float *d, int32_t *ac) {
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), vmax);
    const float amax = _mm512_reduce_max_ps(vmax);
    const float dr = amax / 127.0f, idr = amax > 0 ? 1.0f / dr : 0.0f;
    const int row_mode = amax > 0 && on_grid(x, k, idr);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const int nsub16 = f->sb / 16;
    for (int64_t b = 0; b < k / f->qb; b++) {
        const float *xb = x + b * f->qb;
        float db = dr, id = idr;
        if (!row_mode) {
            __m512 m = _mm512_setzero_ps();
            for (int i = 0; i < f->qb; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + i)), m);
            const float bmax = _mm512_reduce_max_ps(m);
            db = bmax / 127.0f;
            id = db != 0 ? 1.0f / db : 0.0f;
        }
        d[b] = db;
        const __m512 vid = _mm512_set1_ps(id);
        __m512i ssum = _mm512_setzero_si512();
        for (int i = 0; i < f->qb; i += 16) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + i), vid));
            v = _mm512_max_epi32(_mm512_min_epi32(v, hi), lo);
            _mm_storeu_si128((__m128i *)(qs + b * f->qb + i), _mm512_cvtepi32_epi8(v));
            ssum = _mm512_add_epi32(ssum, v);
            if ((i / 16) % nsub16 == nsub16 - 1) {
                int32_t s = _mm512_reduce_add_epi32(ssum);
                ac[(b * f->qb + i) / f->sb] = f->off ? -f->off * s : s;
                ssum = _mm512_setzero_si512();
            }
        }
    }
}

/* ---- float weights -------------------------------------------------------------------------- */

INLINE __m512 load_w(const int type, const void *row, int64_t i, __mmask16 m) {
    if (type == OB_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (type == OB_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The canonical tree of ob_sum16. */
INLINE float hsum_ps(__m512 v) {
    __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

INLINE void ftile(const int type, const int RR, const int C, const ob_weight *w, int64_t r, const float *x, int t,
                  float *y, int64_t ldy) {
    const int64_t k = w->n_in;
    const void *rows[4];
    UNROLL4 for (int i = 0; i < RR; i++) rows[i] = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
    __m512 acc[4][6];
    UNROLL4 for (int i = 0; i < RR; i++)
        UNROLL8 for (int c = 0; c < C; c++) acc[i][c] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k; kk += 16) {
        const __mmask16 m = k - kk >= 16 ? 0xFFFF : (__mmask16)((1u << (k - kk)) - 1);
        __m512 wv[4];
        UNROLL4 for (int i = 0; i < RR; i++) {
            /* 1 KiB ahead in each row: four row streams at once keep only part of the
             * bandwidth with the hardware prefetcher alone */
            if (C == 1) _mm_prefetch((const char *)rows[i] + kk * (type == OB_TYPE_F32 ? 4 : 2) + 1024, _MM_HINT_T0);
            wv[i] = load_w(type, rows[i], kk, m);
        }
        UNROLL8 for (int c = 0; c < C; c++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (t + c) * k + kk);
            UNROLL4 for (int i = 0; i < RR; i++) acc[i][c] = _mm512_fmadd_ps(wv[i], xv, acc[i][c]);
        }
    }
    UNROLL8 for (int c = 0; c < C; c++)
        UNROLL4 for (int i = 0; i < RR; i++) y[(t + c) * ldy + i] = hsum_ps(acc[i][c]) * w->scale;
}

INLINE void gemm_f_type(const int type, const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y,
                        int64_t ldy) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        int t = 0;
        for (; t + 6 <= n; t += 6) ftile(type, 4, 6, w, r, x, t, y + (r - r0), ldy);
        for (; t < n; t++) ftile(type, 4, 1, w, r, x, t, y + (r - r0), ldy);
    }
    for (; r < r1; r++) {
        int t = 0;
        for (; t + 6 <= n; t += 6) ftile(type, 1, 6, w, r, x, t, y + (r - r0), ldy);
        for (; t < n; t++) ftile(type, 1, 1, w, r, x, t, y + (r - r0), ldy);
    }
}

static void gemm_f32(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_F32, w, r0, r1, x, n, y, ldy);
}
static void gemm_f16(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_F16, w, r0, r1, x, n, y, ldy);
}
static void gemm_bf16(const ob_weight *w, int64_t r0, int64_t r1, const float *x, int n, float *y, int64_t ldy, float *wb) {
    gemm_f_type(OB_TYPE_BF16, w, r0, r1, x, n, y, ldy);
}

/* ---- attention helpers ---------------------------------------------------------------------- */

static float dot_f32(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return hsum_ps(acc);
}

static float dot_f16(const float *a, const uint16_t *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i)), acc);
    }
    return hsum_ps(acc);
}

static void f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

static void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

static void axpy(float *y, float a, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static void axpy_f16(float *y, float a, const uint16_t *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, xv, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* ---- row ops ---------------------------------------------------------------------------------- */

static void rms_row(const float *x, const float *w, float *y, int dim, float eps) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int k = 0;
    for (; k + 16 <= dim; k += 16) {
        __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + k)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + k + 8));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; k < dim; k++) ss += (double)x[k] * x[k];
    const float inv = (float)(1.0 / __builtin_sqrt(ss / dim + eps));
    const __m512 vi = _mm512_set1_ps(inv);
    for (k = 0; k < dim; k += 16) {
        const __mmask16 m = dim - k >= 16 ? 0xFFFF : (__mmask16)((1u << (dim - k)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), vi);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + k));
        _mm512_mask_storeu_ps(y + k, m, v);
    }
}

static void aq_row(float *x, int dim) {
    __m512 vm = _mm512_setzero_ps();
    for (int k = 0; k < dim; k += 16) {
        const __mmask16 m = dim - k >= 16 ? 0xFFFF : (__mmask16)((1u << (dim - k)) - 1);
        vm = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + k)), vm);
    }
    float mx = _mm512_reduce_max_ps(vm);
    if (mx < 1e-5f) mx = 1e-5f;
    const __m512 s = _mm512_set1_ps((1.0f / mx) * 127.0f), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (int k = 0; k < dim; k += 16) {
        const __mmask16 m = dim - k >= 16 ? 0xFFFF : (__mmask16)((1u << (dim - k)) - 1);
        __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_max_ps(_mm512_min_ps(q, hi), lo);
        _mm512_mask_storeu_ps(x + k, m, _mm512_div_ps(q, s));
    }
}

/* e^x: x = n ln2 + r, |r| <= ln2/2, Cephes' polynomial, then scalef by 2^n (which saturates to 0
 * and inf); NaN passes through. */
INLINE __m512 exp_ps(__m512 x) {
    const __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512 e = _mm512_scalef_ps(p, n);
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

static void glu(int act, float *gate, const float *up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), a;
        if (act == 0) {
            a = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(zero, g))));
        } else {
            __m512 r = _mm512_max_ps(g, zero);
            a = _mm512_mul_ps(r, r);
        }
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

static void add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
    }
}

static const ob_kernels table = {
    .name = "avx512",
    .R = 16,
    .quant_row = quant_row,
    .gemv = {[OB_TYPE_Q8_0] = gemv_q8_0, [OB_TYPE_Q4_0] = gemv_q4_0, [OB_TYPE_TQ2_0] = gemv_tq2_0,
             [OB_TYPE_TQ1_0] = gemv_tq1_0, [OB_TYPE_I2_S] = gemv_i2_s, [OB_TYPE_Q4_K] = gemv_q4_K,
             [OB_TYPE_Q5_K] = gemv_q5_K, [OB_TYPE_Q6_K] = gemv_q6_K, [OB_TYPE_Q4_1] = ob_kgemv_generic,
             [OB_TYPE_Q5_0] = ob_kgemv_generic, [OB_TYPE_Q5_1] = ob_kgemv_generic, [OB_TYPE_IQ4_NL] = ob_kgemv_generic,
             [OB_TYPE_MXFP4] = ob_kgemv_generic, [OB_TYPE_Q2_K] = ob_kgemv_generic, [OB_TYPE_Q3_K] = ob_kgemv_generic,
             [OB_TYPE_IQ4_XS] = ob_kgemv_generic},
    .pack = {[OB_TYPE_Q8_0] = pack_q8_0, [OB_TYPE_Q4_0] = pack_q4_0, [OB_TYPE_TQ2_0] = pack_tq2_0,
             [OB_TYPE_TQ1_0] = pack_tq1_0, [OB_TYPE_I2_S] = pack_i2_s, [OB_TYPE_Q4_K] = pack_q4_K,
             [OB_TYPE_Q5_K] = pack_q5_K, [OB_TYPE_Q6_K] = pack_q6_K, [OB_TYPE_Q4_1] = pack_any, [OB_TYPE_Q5_0] = pack_any,
             [OB_TYPE_Q5_1] = pack_any, [OB_TYPE_IQ4_NL] = pack_any, [OB_TYPE_MXFP4] = pack_any, [OB_TYPE_Q2_K] = pack_any,
             [OB_TYPE_Q3_K] = pack_any, [OB_TYPE_IQ4_XS] = pack_any},
    .gemm = gemm,
    .gemm_f = {[OB_TYPE_F32] = gemm_f32, [OB_TYPE_F16] = gemm_f16, [OB_TYPE_BF16] = gemm_bf16},
    .rms_row = rms_row,
    .aq_row = aq_row,
    .glu = glu,
    .add = add,
    .dot_f32 = dot_f32,
    .f16_to_f32 = f16_to_f32,
    .f32_to_f16 = f32_to_f16,
    .axpy = axpy,
    .axpy_f16 = axpy_f16,
    .dot_f16 = dot_f16,
};

const ob_kernels *ob_kernels_avx512_table(void) { return &table; }

#else
const ob_kernels *ob_kernels_avx512_table(void) { return 0; }
#endif
