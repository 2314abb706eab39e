/* quant_convert.c — a whole tensor stored as another type of exactly the same values (the engine's
 * load_weight, for a backend's weight_as): tq1_0 as tq2_0 (always), tq1_0 or tq2_0 as i2_s where
 * every block of values has one scale (a trained BitNet's do), any other pair a row at a time,
 * kept only where the values come back bit for bit.
 *
 * The ternary rewrites work block by block, so they run on several threads (OB_CONVERT_THREADS,
 * default: the cores this process may run on, at most 16): a BitNet-2B's projections are 2G weights, about a
 * second on one core. Each thread rewrites its blocks and notes the scale they hold; the result is
 * kept only if every thread's blocks agree (one pass over the source, not a scan and a rewrite).
 * Owns: ob_tensor_convert, the ternary rewrites' scale rule. Does not own: the layouts, which the
 * rewrites follow (quant_ref.c: tq1_0, tq2_0; quant_tensor.c: i2_s's field order and its tail).
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/quant.h"
#include "format/quant_int.h"
#include "format/quant_tensor.h"

#define CONV_GRAIN 4096 /* blocks a thread at least (1M weights) */
#define CONV_THREADS_MAX 16

/* One thread's share of a rewrite: blocks [b0, b1) of 256 elements. */
typedef struct conv_job {
    const uint8_t *src;
    uint8_t *dst;
    int64_t b0, b1;
    int from, to;
    int bad;    /* a block the one-scale rule refuses (i2_s targets) */
    uint16_t d; /* the f16 scale of its blocks of values, 0: none seen */
} conv_job;

/* The one-scale rule for a block of f16 scale h (i2_s targets): an inf / NaN or negative d refuses
 * even a block of zeros (0 * d is then not +0, i2_s's zero), a block of values needs d > 0 and
 * the same d as every other block of values (*d: that d, 0 until one is seen). 0, or -1: refused. */
static int conv_note(uint16_t *d, uint16_t h, int values) {
    if ((h & 0x7c00) == 0x7c00 || (h & 0x8000) || (values && (h == 0 || (*d && h != *d)))) return -1;
    if (values) *d = h;
    return 0;
}

/* tq2_0 (66-byte blocks: 64 bytes of codes, f16 d) to i2_s's codes (64 bytes a block): each
 * 128-element half is one i2_s block with the four 2-bit fields of every byte in reverse order
 * (quant_tensor.c's layout). A code 3 refuses (i2_s has none). */
static void conv_tq2_i2s(conv_job *j) {
    uint16_t d = 0;
    int bad = 0;
    for (int64_t ib = j->b0; ib < j->b1 && !bad; ib++) {
        const uint8_t *b = j->src + ib * 66;
        uint8_t *o = j->dst + ib * 64;
        uint64_t three = 0, values = 0;
        for (int i = 0; i < 64; i += 8) {
            uint64_t w;
            memcpy(&w, b + i, 8);
            three |= w & (w >> 1) & 0x5555555555555555ull;
            values |= w ^ 0x5555555555555555ull; /* (a field other than 1, i.e. a value other than 0) */
            w = (w >> 2 & 0x3333333333333333ull) | (w & 0x3333333333333333ull) << 2;
            w = (w >> 4 & 0x0f0f0f0f0f0f0f0full) | (w & 0x0f0f0f0f0f0f0f0full) << 4;
            memcpy(o + i, &w, 8);
        }
        bad = three != 0 || conv_note(&d, (uint16_t)(b[64] | b[65] << 8), values != 0);
    }
    j->bad = bad;
    j->d = d;
}

/* tq1_0 (54-byte blocks) to tq2_0 (every block, d copied) or to i2_s's codes (the one-scale rule). */
static void conv_tq1(conv_job *j) {
    const int i2s = j->to == OB_TYPE_I2_S;
    uint16_t d = 0;
    int bad = 0;
    for (int64_t ib = j->b0; ib < j->b1 && !bad; ib++) {
        const uint8_t *b = j->src + ib * 54;
        uint8_t *o = j->dst + ib * (i2s ? 64 : 66);
        const int values = ob_tq1_0_block_fields(b, o, i2s);
        if (i2s) bad = conv_note(&d, (uint16_t)(b[52] | b[53] << 8), values);
        else memcpy(o + 64, b + 52, 2);
    }
    j->bad = bad;
    j->d = d;
}

static void *conv_main(void *arg) {
    conv_job *j = arg;
    if (j->from == OB_TYPE_TQ2_0) conv_tq2_i2s(j);
    else conv_tq1(j);
    return NULL;
}

/* Threads for nblk blocks: OB_CONVERT_THREADS (1 .. 16), else the cores this process may run on
 * (its affinity) up to 16; at least CONV_GRAIN blocks each. */
static int conv_threads(int64_t nblk) {
    const char *e = getenv("OB_CONVERT_THREADS");
    cpu_set_t cs;
    long n = e && *e ? strtol(e, NULL, 10) : sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n > CONV_THREADS_MAX) n = CONV_THREADS_MAX;
    if (n > nblk / CONV_GRAIN) n = nblk / CONV_GRAIN;
    return n < 1 ? 1 : (int)n;
}

/* The ternary rewrite from -> to of nblk 256-element blocks into dst: 0, or -1 where the
 * one-scale rule refuses (i2_s targets; then *scale is unset). Threads that cannot be created
 * leave their blocks to the caller's thread. */
static int conv_ternary(int from, int to, const void *src, uint8_t *dst, int64_t nblk, float *scale) {
    conv_job jobs[CONV_THREADS_MAX];
    pthread_t th[CONV_THREADS_MAX] = {0};
    int started[CONV_THREADS_MAX] = {0};
    const int n = conv_threads(nblk);
    for (int i = 0; i < n; i++) {
        jobs[i] = (conv_job){src, dst, nblk * i / n, nblk * (i + 1) / n, from, to, 0, 0};
        started[i] = i > 0 && pthread_create(&th[i], NULL, conv_main, &jobs[i]) == 0;
    }
    for (int i = 0; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else conv_main(&jobs[i]);
    }
    uint16_t d = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i].bad || (jobs[i].d && d && jobs[i].d != d)) return -1;
        if (jobs[i].d) d = jobs[i].d;
    }
    if (scale) *scale = ob_fp16_to_fp32(d);
    return 0;
}

/* Any other pair a row at a time (two rows of floats, in cache, instead of two whole tensors of
 * them), so only for types of self-contained blocks: no tensor tail (i2_s), no rotation (lean4).
 * Its time is the target's quantizer (tq2_0's: about 13 of 16 ns a weight on the 2-core machine). */
static void *conv_rows(int from, int to, const void *src, int64_t ne0, int64_t n_rows, size_t *size) {
    const ob_type_traits *tf = ob_type_get(from), *tt = ob_type_get(to);
    if (!tf || !tt || tf->tensor_tail || tt->tensor_tail || from == OB_TYPE_LEAN4 || to == OB_TYPE_LEAN4) return NULL;
    const size_t rf = ob_type_row_size(from, ne0), rt = ob_type_row_size(to, ne0), bytes = ob_type_tensor_size(to, ne0, n_rows);
    if (!rf || !rt || !bytes || n_rows < 1) return NULL;
    float *a = malloc((size_t)ne0 * sizeof(float)), *b = malloc((size_t)ne0 * sizeof(float));
    uint8_t *dst = malloc(bytes);
    int ok = a && b && dst;
    for (int64_t r = 0; ok && r < n_rows; r++) {
        const uint8_t *in = (const uint8_t *)src + (size_t)r * rf;
        uint8_t *out = dst + (size_t)r * rt;
        ok = ob_tensor_dequantize(from, in, a, ne0, 1) == 0 && ob_tensor_quantize(to, a, out, ne0, 1) == 0 &&
             ob_tensor_dequantize(to, out, b, ne0, 1) == 0 && memcmp(a, b, (size_t)ne0 * sizeof(float)) == 0;
    }
    free(a);
    free(b);
    if (!ok) {
        free(dst);
        return NULL;
    }
    *size = bytes;
    return dst;
}

void *ob_tensor_convert(int from, int to, const void *src, int64_t ne0, int64_t n_rows, size_t *size) {
    const int tern = (from == OB_TYPE_TQ1_0 && (to == OB_TYPE_TQ2_0 || to == OB_TYPE_I2_S)) || (from == OB_TYPE_TQ2_0 && to == OB_TYPE_I2_S);
    if (!tern) return conv_rows(from, to, src, ne0, n_rows, size);
    if (ne0 <= 0 || ne0 % 256 || n_rows < 1 || n_rows > INT64_MAX / ne0) return NULL;
    const int64_t n = ne0 * n_rows;
    const size_t bytes = ob_type_tensor_size(to, ne0, n_rows);
    uint8_t *dst = bytes ? malloc(bytes) : NULL;
    float s;
    if (!dst) return NULL;
    if (conv_ternary(from, to, src, dst, n / 256, to == OB_TYPE_I2_S ? &s : NULL)) {
        free(dst);
        return NULL;
    }
    if (to == OB_TYPE_I2_S) { /* the tail: the scale as f32, then zeros */
        memset(dst + n / 4, 0, 32);
        memcpy(dst + n / 4, &s, 4);
    }
    *size = bytes;
    return dst;
}
