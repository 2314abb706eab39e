/* imatrix.c — reading llama.cpp importance-matrix files (imatrix.h).
 *
 * Owns: both on-disk formats and their normalisation to mean squared activations.
 *  - GGUF: for every weight W, an f32 tensor "W.in_sum2" of ne0 * n_expert sums of squared
 *    activations and an f32 tensor "W.counts" of n_expert token counts. Value = sum / count,
 *    or 1 for an expert with count 0 (it never ran, so nothing is known).
 *  - legacy (.dat): int32 n_entries, then per entry int32 name length, the name, int32 ncall,
 *    int32 nval, nval f32 sums (already averaged per call, times ncall); optionally int32
 *    chunk count, int32 length and the dataset name. Value = sum / ncall (ncall > 0).
 * The file is told apart by its first four bytes ("GGUF"). Every length is checked against
 * the bytes left, so a damaged file is refused with a message, never read past its end.
 * Does not own: GGUF parsing (gguf.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/imatrix.h"
#include "format/quant.h"
#include "util/err.h"

typedef struct {
    char *name;
    float *v;
    int64_t n;
} im_entry;

struct ob_imatrix {
    im_entry *e;
    int n, cap;
    int chunks;
    char *dataset;
};

void ob_imatrix_free(ob_imatrix_t *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->e[i].name);
        free(m->e[i].v);
    }
    free(m->e);
    free(m->dataset);
    free(m);
}

static im_entry *add_entry(ob_imatrix_t *m, const char *name, size_t name_len, int64_t n) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        im_entry *e = realloc(m->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        m->e = e;
        m->cap = cap;
    }
    im_entry *e = &m->e[m->n];
    e->name = malloc(name_len + 1);
    e->v = malloc((size_t)(n > 0 ? n : 1) * sizeof *e->v);
    if (!e->name || !e->v) {
        free(e->name);
        free(e->v);
        return NULL;
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    e->n = n;
    m->n++;
    return e;
}

static int check_values(const char *path, const im_entry *e, char *err, size_t errlen) {
    for (int64_t i = 0; i < e->n; i++)
        if (!isfinite(e->v[i]) || e->v[i] < 0)
            return ERR("%s: entry '%s' value %lld is %g (importance values must be finite and >= 0)", path, e->name,
                       (long long)i, (double)e->v[i]);
    return 0;
}

/* ---- GGUF ----------------------------------------------------------------------------- */

static int load_gguf(const char *path, ob_imatrix_t *m, char *err, size_t errlen) {
    ob_gguf_t *g = NULL;
    if (ob_gguf_open(path, &g, err, errlen)) return -1;
    int rc = -1;
    int64_t v;
    if (ob_gguf_get_i64(g, "imatrix.chunk_count", &v, err, errlen) == 1) m->chunks = (int)v;
    const ob_gguf_value *ds = ob_gguf_get(g, "imatrix.datasets");
    if (ds && ds->type == OB_GGUF_ARRAY && ds->v.arr.elem_type == OB_GGUF_STRING && ds->v.arr.n > 0)
        m->dataset = strdup(ds->v.arr.items[0].v.str.ptr);
    static const char sums_sfx[] = ".in_sum2", counts_sfx[] = ".counts";
    for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        size_t l = strlen(t->name), ls = sizeof sums_sfx - 1;
        if (l <= ls || strcmp(t->name + l - ls, sums_sfx) != 0) continue;
        char cname[512];
        if (l - ls + sizeof counts_sfx > sizeof cname) {
            ERR("%s: tensor name '%s' is too long", path, t->name);
            goto done;
        }
        memcpy(cname, t->name, l - ls);
        strcpy(cname + l - ls, counts_sfx);
        const ob_gguf_tensor *c = ob_gguf_find_tensor(g, cname);
        if (!c) {
            ERR("%s: '%s' has no matching '%s'", path, t->name, cname);
            goto done;
        }
        if (t->type != OB_TYPE_F32 || c->type != OB_TYPE_F32) {
            ERR("%s: '%s' and '%s' must be f32 (they are %s and %s)", path, t->name, cname, ob_type_name(t->type),
                ob_type_name(c->type));
            goto done;
        }
        int64_t nval = (int64_t)(t->size / 4), ncount = (int64_t)(c->size / 4);
        if (ncount < 1 || nval % ncount != 0) {
            ERR("%s: '%s' has %lld values for %lld counts (not a whole number per expert)", path, t->name, (long long)nval,
                (long long)ncount);
            goto done;
        }
        im_entry *e = add_entry(m, t->name, l - ls, nval);
        if (!e) {
            ERR("%s: out of memory", path);
            goto done;
        }
        const uint8_t *sp = t->data, *cp = c->data;
        int64_t per = nval / ncount;
        for (int64_t j = 0; j < ncount; j++) {
            float cnt;
            memcpy(&cnt, cp + 4 * j, 4);
            float count = (float)lroundf(cnt); /* llama.cpp stores counts as f32 and rounds them back */
            for (int64_t k = 0; k < per; k++) {
                float s;
                memcpy(&s, sp + 4 * (j * per + k), 4);
                e->v[j * per + k] = count > 0 ? s / count : 1.0f;
            }
        }
        if (check_values(path, e, err, errlen)) goto done;
    }
    if (m->n == 0) {
        ERR("%s: a GGUF file without any '*.in_sum2' tensor is not an importance matrix", path);
        goto done;
    }
    rc = 0;
done:
    ob_gguf_close(g);
    return rc;
}

/* ---- legacy .dat ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t left;
} rd;

static int rd_bytes(rd *r, void *dst, size_t n) {
    if (r->left < n) return -1;
    memcpy(dst, r->p, n);
    r->p += n;
    r->left -= n;
    return 0;
}

static int load_legacy(const char *path, const uint8_t *data, size_t size, ob_imatrix_t *m, char *err, size_t errlen) {
    rd r = {data, size};
    int32_t n_entries;
    if (rd_bytes(&r, &n_entries, 4) || n_entries < 1)
        return ERR("%s: not an importance matrix (neither GGUF nor a legacy file with entries)", path);
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (rd_bytes(&r, &len, 4) || len < 1 || (size_t)len > r.left)
            return ERR("%s: entry %d: bad name length (file truncated or not an importance matrix)", path, i);
        const char *name = (const char *)r.p;
        r.p += len;
        r.left -= (size_t)len;
        if (rd_bytes(&r, &ncall, 4) || rd_bytes(&r, &nval, 4) || nval < 1 || (size_t)nval > r.left / 4)
            return ERR("%s: entry %d ('%.*s'): bad value count (file truncated?)", path, i, len, name);
        im_entry *e = add_entry(m, name, (size_t)len, nval);
        if (!e) return ERR("%s: out of memory", path);
        for (int32_t k = 0; k < nval; k++) {
            float s;
            rd_bytes(&r, &s, 4);
            e->v[k] = ncall > 0 ? s / (float)ncall : s;
        }
        if (check_values(path, e, err, errlen)) return -1;
    }
    int32_t chunks, dlen;
    if (!rd_bytes(&r, &chunks, 4)) {
        m->chunks = chunks;
        if (!rd_bytes(&r, &dlen, 4) && dlen > 0 && (size_t)dlen <= r.left) {
            m->dataset = malloc((size_t)dlen + 1);
            if (m->dataset) {
                memcpy(m->dataset, r.p, (size_t)dlen);
                m->dataset[dlen] = 0;
            }
        }
    }
    return 0;
}

int ob_imatrix_load(const char *path, ob_imatrix_t **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ERR("%s: cannot open the importance matrix", path);
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    ob_imatrix_t *m = calloc(1, sizeof *m);
    if (!m) {
        fclose(f);
        return ERR("%s: out of memory", path);
    }
    int rc;
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        fclose(f);
        rc = load_gguf(path, m, err, errlen);
    } else {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = size > 0 ? malloc((size_t)size) : NULL;
        if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) rc = ERR("%s: cannot read the importance matrix", path);
        else rc = load_legacy(path, buf, (size_t)size, m, err, errlen);
        free(buf);
        fclose(f);
    }
    if (rc) {
        ob_imatrix_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

const float *ob_imatrix_find(const ob_imatrix_t *m, const char *tensor, int64_t *n) {
    for (int i = 0; m && i < m->n; i++)
        if (!strcmp(m->e[i].name, tensor)) {
            *n = m->e[i].n;
            return m->e[i].v;
        }
    return NULL;
}

int ob_imatrix_n_entries(const ob_imatrix_t *m) { return m ? m->n : 0; }
int ob_imatrix_chunks(const ob_imatrix_t *m) { return m ? m->chunks : 0; }
const char *ob_imatrix_dataset(const ob_imatrix_t *m) { return m ? m->dataset : NULL; }
