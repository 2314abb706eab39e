/* kernels_common.c — the parts of the kernel layer every instruction set shares.
 *
 * Owns: each integer weight type's ob_kfmt and its block decoder (the scalar definition of
 * "code, sub-block scale, min, block scale" that kernels.h's formula computes with), the
 * memory layouts of q8 activations and GEMM panels, the row-mode test of the activation
 * quantizer, the generic panel packer, and picking the best table for this CPU.
 * Does not own: any SIMD code (kernels_<isa>.c), the byte layouts themselves
 * (format/quant_ref*.c and quant_tensor.c define them; the decoders here read the same bytes
 * and tests/unit/test_kernels.c checks them against those references).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend/cpu/kernels.h"
#include "format/quant.h"
#include "format/quant_int.h"

static inline float half_at(const uint8_t *p) { return ob_fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8))); }

/* ---- formats ----------------------------------------------------------------------------- */

static const ob_kfmt fmt_q8_0 = {32, 32, 128, 0, 0, 255};
static const ob_kfmt fmt_q4_0 = {32, 32, 8, 0, 0, 15};
static const ob_kfmt fmt_q4_1 = {32, 32, 0, 0, 1, 15};
static const ob_kfmt fmt_q5_0 = {32, 32, 16, 0, 0, 31};
static const ob_kfmt fmt_q5_1 = {32, 32, 0, 0, 1, 31};
static const ob_kfmt fmt_iq4_nl = {32, 32, 128, 0, 0, 255};
static const ob_kfmt fmt_mxfp4 = {32, 32, 12, 0, 0, 24};
static const ob_kfmt fmt_tq = {256, 256, 1, 0, 0, 3};
static const ob_kfmt fmt_i2_s = {128, 128, 1, 0, 0, 3};
static const ob_kfmt fmt_q2_K = {256, 16, 0, 1, 1, 3};
static const ob_kfmt fmt_q3_K = {256, 16, 4, 1, 0, 7};
static const ob_kfmt fmt_q4_K = {256, 32, 0, 1, 1, 15};
static const ob_kfmt fmt_q5_K = {256, 32, 0, 1, 1, 31};
static const ob_kfmt fmt_q6_K = {256, 16, 32, 1, 0, 63};
static const ob_kfmt fmt_iq4_xs = {256, 32, 128, 1, 0, 255};

const ob_kfmt *ob_kfmt_get(int type) {
    switch (type) {
    case OB_TYPE_Q8_0: return &fmt_q8_0;
    case OB_TYPE_Q4_0: return &fmt_q4_0;
    case OB_TYPE_Q4_1: return &fmt_q4_1;
    case OB_TYPE_Q5_0: return &fmt_q5_0;
    case OB_TYPE_Q5_1: return &fmt_q5_1;
    case OB_TYPE_IQ4_NL: return &fmt_iq4_nl;
    case OB_TYPE_MXFP4: return &fmt_mxfp4;
    case OB_TYPE_TQ1_0:
    case OB_TYPE_TQ2_0: return &fmt_tq;
    case OB_TYPE_I2_S: return &fmt_i2_s;
    case OB_TYPE_Q2_K: return &fmt_q2_K;
    case OB_TYPE_Q3_K: return &fmt_q3_K;
    case OB_TYPE_Q4_K: return &fmt_q4_K;
    case OB_TYPE_Q5_K: return &fmt_q5_K;
    case OB_TYPE_Q6_K: return &fmt_q6_K;
    case OB_TYPE_IQ4_XS: return &fmt_iq4_xs;
    default: return NULL;
    }
}

/* ---- layouts ----------------------------------------------------------------------------- */

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t ob_q8act_bytes(int64_t n, int64_t k, const ob_kfmt *f) {
    return al64((size_t)(n * k)) + al64((size_t)(n * (k / f->qb)) * sizeof(float)) +
           al64((size_t)(n * (k / f->sb)) * sizeof(int32_t));
}

void ob_q8act_init(ob_q8act *a, void *mem, int64_t n, int64_t k, const ob_kfmt *f) {
    uint8_t *p = mem;
    a->qs = (int8_t *)p;
    p += al64((size_t)(n * k));
    a->d = (float *)p;
    p += al64((size_t)(n * (k / f->qb)) * sizeof(float));
    a->ac = (int32_t *)p;
    a->k = k;
    a->qb = f->qb;
    a->sb = f->sb;
}

size_t ob_panel_bytes(int64_t k, int R, const ob_kfmt *f) {
    size_t nsb = (size_t)(k / f->sb), nqb = (size_t)(k / f->qb), planes = f->has_sc ? 2 : 1;
    return planes * al64((size_t)k * R) + 2 * al64(nsb * R * sizeof(int32_t)) + 2 * al64(nqb * R * sizeof(float));
}

void ob_panel_init(ob_panel *p, void *mem, int64_t k, int R, const ob_kfmt *f) {
    size_t nsb = (size_t)(k / f->sb), nqb = (size_t)(k / f->qb);
    uint8_t *m = mem;
    p->codes = m;
    m += al64((size_t)k * R);
    p->codes2 = NULL;
    if (f->has_sc) {
        p->codes2 = m;
        m += al64((size_t)k * R);
    }
    p->sc = (int32_t *)m;
    m += al64(nsb * R * sizeof(int32_t));
    p->mn = (int32_t *)m;
    m += al64(nsb * R * sizeof(int32_t));
    p->dw = (float *)m;
    m += al64(nqb * R * sizeof(float));
    p->dm = (float *)m;
    p->R = R;
    p->nr = 0;
}

/* ---- block decoders: the scalar definition of each integer type ---------------------------
 * Each reads block b of a row exactly as format/quant_ref*.c's to_float does and returns the
 * unsigned codes (value = dw * sc_j * (code - off) + dm * mn_j; see kernels.h). */

static void dec_q8_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 34;
    *dw = half_at(blk);
    for (int i = 0; i < 32; i++) codes[i] = (uint8_t)((int8_t)blk[2 + i] + 128);
}

static void dec_q4_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 18;
    *dw = half_at(blk);
    for (int j = 0; j < 16; j++) {
        codes[j] = blk[2 + j] & 15;
        codes[j + 16] = blk[2 + j] >> 4;
    }
}

static void dec_tq2_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 66;
    *dw = half_at(blk + 64);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int m = 0; m < 32; m++) codes[h * 128 + k * 32 + m] = (blk[h * 32 + m] >> (2 * k)) & 3;
}

/* tq1_0: trit k of byte q is ((uint8_t)(q * 3^k) * 3) >> 8 (quant_ref.c explains the encoding). */
static void tq1_span(const uint8_t *in, uint8_t *codes, int nbytes, int ntrits) {
    for (int k = 0; k < ntrits; k++)
        for (int m = 0; m < nbytes; m++) {
            static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
            uint8_t q = (uint8_t)(in[m] * pow3[k]);
            codes[k * nbytes + m] = (uint8_t)((q * 3) >> 8);
        }
}

static void dec_tq1_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 54;
    *dw = half_at(blk + 52);
    tq1_span(blk, codes, 32, 5);
    tq1_span(blk + 32, codes + 160, 16, 5);
    tq1_span(blk + 48, codes + 240, 4, 4);
}

/* i2_s: element j of a 128-element block in byte j % 32 at bits 6 - 2 * (j / 32); the
 * per-tensor scale is ob_weight.scale, applied after the sum. */
static void dec_i2_s(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 32;
    *dw = 1.0f;
    for (int g = 0; g < 4; g++)
        for (int m = 0; m < 32; m++) codes[g * 32 + m] = (blk[m] >> (6 - 2 * g)) & 3;
}

/* q4_K / q5_K's 12-byte packing of eight 6-bit scales and mins (quant_ref_k.c). */
static void k4_scale_min(int j, const uint8_t q[12], int32_t *s, int32_t *m) {
    if (j < 4) {
        *s = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *s = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void dec_q4_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 144;
    *dw = half_at(blk);
    *dm = -half_at(blk + 2);
    for (int j = 0; j < 8; j++) k4_scale_min(j, blk + 4, &sc[j], &mn[j]);
    const uint8_t *qs = blk + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            codes[64 * c + l] = qs[32 * c + l] & 15;
            codes[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
}

static void dec_q5_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 176;
    *dw = half_at(blk);
    *dm = -half_at(blk + 2);
    for (int j = 0; j < 8; j++) k4_scale_min(j, blk + 4, &sc[j], &mn[j]);
    const uint8_t *qh = blk + 16, *qs = blk + 48;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            codes[64 * c + l] = (uint8_t)((qs[32 * c + l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4));
            codes[64 * c + 32 + l] = (uint8_t)((qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
        }
}

static void dec_q6_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 210;
    *dw = half_at(blk + 208);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)blk[192 + j];
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        uint8_t *c = codes + 128 * h;
        for (int l = 0; l < 32; l++) {
            c[l] = (uint8_t)((ql[l] & 15) | ((qh[l] & 3) << 4));
            c[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            c[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            c[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

/* q4_1 / q5_1 / q5_0: byte j holds elements j (low nibble) and j + 16; q5's fifth bits are a
 * little-endian 32-bit word, bit i for element i (quant_ref_legacy.c). */
static uint32_t le32_at(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void nibbles32(const uint8_t *qs, uint32_t qh, int five, uint8_t *codes) {
    for (int j = 0; j < 16; j++) {
        codes[j] = (uint8_t)((qs[j] & 15) | (five ? ((qh >> j) & 1) << 4 : 0));
        codes[j + 16] = (uint8_t)((qs[j] >> 4) | (five ? ((qh >> (j + 16)) & 1) << 4 : 0));
    }
}

static void dec_q4_1(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 20;
    *dw = half_at(blk), *dm = half_at(blk + 2), mn[0] = 1;
    nibbles32(blk + 4, 0, 0, codes);
}

static void dec_q5_0(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 22;
    *dw = half_at(blk);
    nibbles32(blk + 6, le32_at(blk + 2), 1, codes);
}

static void dec_q5_1(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 24;
    *dw = half_at(blk), *dm = half_at(blk + 2), mn[0] = 1;
    nibbles32(blk + 8, le32_at(blk + 4), 1, codes);
}

static void dec_iq4_nl(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 18;
    *dw = half_at(blk);
    for (int j = 0; j < 16; j++) {
        codes[j] = (uint8_t)(ob_iq4nl_grid[blk[2 + j] & 15] + 128);
        codes[j + 16] = (uint8_t)(ob_iq4nl_grid[blk[2 + j] >> 4] + 128);
    }
}

/* mxfp4: the e2m1 grid doubled (0..12 and negatives), code = value + 12; the block scale byte is
 * an e8m0 exponent holding 2^(e - 128) (quant_ref_legacy.c). */
static void dec_mxfp4(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    static const int8_t grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const uint8_t *blk = row + b * 17;
    uint32_t bits = blk[0] < 2 ? 0x00200000u << blk[0] : (uint32_t)(blk[0] - 1) << 23;
    memcpy(dw, &bits, 4);
    for (int j = 0; j < 16; j++) {
        codes[j] = (uint8_t)(grid[blk[1 + j] & 15] + 12);
        codes[j + 16] = (uint8_t)(grid[blk[1 + j] >> 4] + 12);
    }
}

static void dec_iq4_xs(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 136;
    *dw = half_at(blk);
    unsigned sh = (unsigned)(blk[2] | blk[3] << 8);
    for (int j = 0; j < 8; j++) {
        sc[j] = (((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | (int)(((sh >> (2 * j)) & 3) << 4)) - 32;
        const uint8_t *q = blk + 8 + 16 * j;
        for (int l = 0; l < 16; l++) {
            codes[32 * j + l] = (uint8_t)(ob_iq4nl_grid[q[l] & 15] + 128);
            codes[32 * j + 16 + l] = (uint8_t)(ob_iq4nl_grid[q[l] >> 4] + 128);
        }
    }
}

/* q2_K / q3_K 2-bit fields: element e in byte (e / 128) * 32 + e % 32 at bits 2 * ((e % 128) / 32). */
static int two_bits(const uint8_t *qs, int e) { return (qs[(e >> 7) * 32 + (e & 31)] >> (2 * ((e & 127) >> 5))) & 3; }

static void dec_q2_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 84;
    *dw = half_at(blk + 80), *dm = -half_at(blk + 82);
    for (int j = 0; j < 16; j++) sc[j] = blk[j] & 15, mn[j] = blk[j] >> 4;
    for (int e = 0; e < 256; e++) codes[e] = (uint8_t)two_bits(blk + 16, e);
}

static void dec_q3_K(const uint8_t *row, int64_t b, uint8_t *codes, int32_t *sc, int32_t *mn, float *dw, float *dm) {
    const uint8_t *blk = row + b * 110, *hm = blk, *s = blk + 96;
    *dw = half_at(blk + 108);
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
        sc[j] = (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    }
    for (int e = 0; e < 256; e++) codes[e] = (uint8_t)(two_bits(blk + 32, e) + 4 * ((hm[e & 31] >> (e >> 5)) & 1));
}

ob_kdec_fn ob_kdec_get(int type) {
    switch (type) {
    case OB_TYPE_Q8_0: return dec_q8_0;
    case OB_TYPE_Q4_0: return dec_q4_0;
    case OB_TYPE_TQ2_0: return dec_tq2_0;
    case OB_TYPE_TQ1_0: return dec_tq1_0;
    case OB_TYPE_I2_S: return dec_i2_s;
    case OB_TYPE_Q4_K: return dec_q4_K;
    case OB_TYPE_Q5_K: return dec_q5_K;
    case OB_TYPE_Q6_K: return dec_q6_K;
    case OB_TYPE_Q4_1: return dec_q4_1;
    case OB_TYPE_Q5_0: return dec_q5_0;
    case OB_TYPE_Q5_1: return dec_q5_1;
    case OB_TYPE_IQ4_NL: return dec_iq4_nl;
    case OB_TYPE_MXFP4: return dec_mxfp4;
    case OB_TYPE_IQ4_XS: return dec_iq4_xs;
    case OB_TYPE_Q2_K: return dec_q2_K;
    case OB_TYPE_Q3_K: return dec_q3_K;
    default: return NULL;
    }
}

/* ---- activation quantizer's row test ------------------------------------------------------ */

int ob_q8_on_grid(const float *x, int64_t k, float id) {
    for (int64_t i = 0; i < k; i++) {
        float v = x[i] * id;
        if (!(fabsf(v - ob_rne(v)) <= 1e-3f)) return 0;
    }
    return 1;
}

/* ---- generic packer ----------------------------------------------------------------------- */

void ob_kpack_generic(const ob_weight *w, int64_t r0, ob_panel *p) {
    int R = p->R;
    p->scale = w->scale;
    const ob_kfmt *f = ob_kfmt_get(w->type);
    ob_kdec_fn dec = ob_kdec_get(w->type);
    int64_t k = w->n_in, nb = k / f->qb, nsub = f->qb / f->sb;
    uint8_t codes[256];
    int32_t sc[16], mn[16];
    for (int r = 0; r < R; r++) {
        if (r >= p->nr) { /* padding rows: zero codes and scales, so they add nothing */
            for (int64_t i = 0; i < k / 4; i++) memset(p->codes + (i * R + r) * 4, 0, 4);
            for (int64_t j = 0; j < k / f->sb; j++) p->sc[j * R + r] = p->mn[j * R + r] = 0;
            for (int64_t b = 0; b < nb; b++) p->dw[b * R + r] = p->dm[b * R + r] = 0;
            continue;
        }
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            float dw = 0, dm = 0;
            for (int j = 0; j < 16; j++) sc[j] = 1, mn[j] = 0;
            dec(row, b, codes, sc, mn, &dw, &dm);
            for (int i = 0; i < f->qb / 4; i++) memcpy(p->codes + ((b * f->qb / 4 + i) * R + r) * 4, codes + 4 * i, 4);
            for (int j = 0; j < nsub; j++) {
                p->sc[(b * nsub + j) * R + r] = sc[j];
                p->mn[(b * nsub + j) * R + r] = mn[j];
            }
            p->dw[b * R + r] = dw;
            p->dm[b * R + r] = dm;
        }
    }
}

/* ---- dispatch ----------------------------------------------------------------------------- */

/* The CPU checks live here, in a file compiled for the baseline, so nothing built with wider
 * target flags runs before them. */
#if defined(__x86_64__)
static int cpu_has(const char *const *feat) {
    __builtin_cpu_init();
    for (; *feat; feat++) {
        int ok = 0;
#define F(name) else if (!strcmp(*feat, name)) ok = __builtin_cpu_supports(name)
        if (0) {}
        F("avx2"); F("fma"); F("f16c"); F("avx512f"); F("avx512bw"); F("avx512vl"); F("avx512dq"); F("avx512vnni");
        F("avxvnni"); F("amx-tile"); F("amx-int8");
#undef F
        if (!ok) return 0;
    }
    return 1;
}
#endif

const ob_kernels *ob_kernels_avx2(void) {
#if defined(__x86_64__)
    static const char *const need[] = {"avx2", "fma", "f16c", NULL};
    if (cpu_has(need)) return ob_kernels_avx2_table();
#endif
    return NULL;
}

const ob_kernels *ob_kernels_avxvnni(void) {
#if defined(__x86_64__)
    static const char *const need[] = {"avx2", "fma", "f16c", "avxvnni", NULL};
    if (cpu_has(need)) return ob_kernels_avxvnni_table();
#endif
    return NULL;
}

const ob_kernels *ob_kernels_avx512(void) {
#if defined(__x86_64__)
    static const char *const need[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni", NULL};
    if (cpu_has(need)) return ob_kernels_avx512_table();
#endif
    return NULL;
}

/* AMX needs the kernel's permission for the tile state (Linux 5.16+), asked once per process. */
const ob_kernels *ob_kernels_amx(void) {
#if defined(__x86_64__) && defined(__linux__)
    static const char *const need[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni",
                                       "amx-tile", "amx-int8", NULL};
    static int granted = -1; /* racing first calls both ask; the answer is the same */
    if (!cpu_has(need) || !ob_kernels_amx_table()) return NULL;
    if (granted < 0) granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    if (granted) return ob_kernels_amx_table();
#endif
    return NULL;
}

const ob_kernels *ob_kernels_best(void) {
    const char *want = getenv("OB_CPU_KERNELS");
    const ob_kernels *all[] = {ob_kernels_amx(), ob_kernels_avx512(), ob_kernels_avxvnni(), ob_kernels_avx2(), ob_kernels_scalar()};
    for (size_t i = 0; want && *want && i < sizeof all / sizeof all[0]; i++)
        if (all[i] && strcmp(all[i]->name, want) == 0) return all[i];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) return all[i];
    return ob_kernels_scalar();
}
