/* attn_tile.h — inner loops of tiled attention (attn_tile.c), per instruction set, same bits in all. */
#ifndef OB_ATTN_TILE_H
#define OB_ATTN_TILE_H

typedef struct {
    /* s[k] = (fma chain over d of q[d] * kt[d * ldk + k], from 0) * scale, for k < nk; returns
     * the largest of mx and those s[k] (NaN never taken) */
    float (*scores)(const float *kt, int ldk, const float *q, int hd, int nk, float scale, float *s, float mx);
    /* o[d] = fma(p[k], v[k * hd + d], o[d]) for k = 0..nk-1 in order, d < hd */
    void (*pv)(float *o, const float *p, const float *v, int nk, int hd);
    /* dst[d * ldk + k] = src[k * hd + d] for k < nk, d < hd (data movement only) */
    void (*transpose)(const float *src, int nk, int hd, float *dst, int ldk);
} ob_attn_tile;

const ob_attn_tile *ob_attn_tile_scalar(void);
/* The version for a kernel table of this name ("avx512*", "avx2", "avx-vnni"; else plain C). */
const ob_attn_tile *ob_attn_tile_for(const char *table_name);

#endif
