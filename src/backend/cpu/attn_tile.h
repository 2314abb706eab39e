/* attn_tile.h — inner loops of tiled attention (attn_tile.c), per instruction set, same bits in all. */
#ifndef OB_ATTN_TILE_H
#define OB_ATTN_TILE_H

#define OB_ATTN_NQ 4 /* queries per call of scores / pv at most (they share each K and V load) */

typedef struct {
    /* For each query i < nq (1..OB_ATTN_NQ, each q[i] of hd floats): s[i * lds + k] = (fma chain
     * over d of q[i][d] * kt[d * ldk + k], from 0) * scale, for k < nk; mx[i] becomes the largest
     * of mx[i] and those s (NaN never taken). Each query's bits are those it gets alone. */
    void (*scores)(const float *kt, int ldk, const float *const *q, int nq, int hd, int nk, float scale, float *s,
                   int lds, float *mx);
    /* For each query i < nq (1..OB_ATTN_NQ): o[i * hd + d] = fma(p[i * ldp + k], v[k * hd + d],
     * o[i * hd + d]) for k = 0..nk-1 in order, d < hd */
    void (*pv)(float *o, const float *p, int ldp, int nq, const float *v, int nk, int hd);
    /* s[k] = ob_attn_exp(s[k] - mx) for k < n; returns their sum, taken as 16 partial sums
     * (element k into sum k % 16, in order) added by ob_sum16's tree */
    float (*softmax)(float *s, int n, float mx);
    /* dst[d * ldk + k] = src[k * hd + d] for k < nk, d < hd (data movement only) */
    void (*transpose)(const float *src, int nk, int hd, float *dst, int ldk);
} ob_attn_tile;

/* exp(x) as attention defines it, the same bits in every version: 0 below -87.3 (and for -inf),
 * else n = rint(x * log2 e), r = x - n * ln 2 (two fma), exp(r) by Cephes' degree-5 polynomial
 * (Horner, fma), times 2^n. Within 2 ulp of exp for x <= 0 (a score minus its running max). */
float ob_attn_exp(float x);

const ob_attn_tile *ob_attn_tile_scalar(void);
/* The version for a kernel table of this name ("avx512*", "avx2", "avx-vnni"; else plain C). */
const ob_attn_tile *ob_attn_tile_for(const char *table_name);

#endif
