/* gguf.c — GGUF v2/v3 reader (memory-mapped, validates everything) and writer.
 *
 * Owns: parsing the header, metadata and tensor infos with a bounds-checked cursor; the typed
 * getters; writing files (metadata, tensor infos, aligned data through path.tmp + rename).
 * Does not own: what keys mean (engine/arch), block layouts and row sizes (quant.c).
 *
 * Memory: every copy the reader makes (keys, strings, tensor names, parsed arrays) lives in
 * one arena freed by ob_gguf_close, so an error halfway through a file leaks nothing. Numeric
 * arrays and tensor data are not copied: they point into the mapping. Every count read from
 * the file is checked against the bytes left before anything is allocated for it, so memory
 * stays a small multiple of the file size whatever the file claims.
 *
 * Deliberately stricter than llama.cpp (which is the oracle for what real files contain):
 *  - every ne must be >= 1 (llama.cpp accepts 0-element tensors) and n_dims must be 1..4
 *    (llama.cpp accepts n_dims 0; its writer never emits it);
 *  - tensors may come in any order but must not overlap (llama.cpp requires them packed in
 *    file order, which implies this);
 *  - bools must be 0 or 1; keys and tensor names must be non-empty and free of NUL bytes.
 * More permissive: arrays of arrays (in the spec, refused by llama.cpp) up to depth 8.
 * A file truncated by another process while mapped can still raise SIGBUS: out of scope.
 */
#include "format/gguf.h"
#include "format/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c moves little-endian fields with plain memcpy: a big-endian host needs byte swaps"
#endif

#define GGUF_MAX_DEPTH 8       /* arrays of arrays: a top-level array is depth 1 */
#define GGUF_KV_MIN_BYTES 14   /* key length u64 + 1 key byte + type u32 + a 1-byte value */
#define GGUF_TI_MIN_BYTES 33   /* name length u64 + 1 byte + n_dims u32 + 1 ne + type u32 + offset u64 */
#define GGUF_NAME_MAX 63       /* llama.cpp refuses tensor names of GGML_MAX_NAME (64) bytes or more */
#define GGUF_SHOW 96           /* a name shown in a message: at most this many chars */

/* ---- small helpers ---------------------------------------------------------------------- */

static int mul_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static int add_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        int k = snprintf(err, errlen, "gguf: ");
        if (k >= 0 && (size_t)k < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* A key or tensor name as it may appear in a message: printable ASCII kept, other bytes as
 * \xNN, cut short, so a hostile name can neither garble a terminal nor crowd out the rest. */
static void show(char dst[GGUF_SHOW + 8], const char *s, uint64_t n) {
    size_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (k + 4 > GGUF_SHOW) { memcpy(dst + k, "...", 3); k += 3; break; }
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') dst[k++] = (char)ch;
        else k += (size_t)snprintf(dst + k, 5, "\\x%02x", ch);
    }
    dst[k] = 0;
}

static const uint8_t vtype_sizes[OB_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Bytes of one packed element of a numeric (or bool) type; 0 for STRING, ARRAY, unknown. */
static size_t vtype_size(int t) { return t >= 0 && t < OB_GGUF_TYPE_COUNT ? vtype_sizes[t] : 0; }
static int is_unsigned(int t) { return t == OB_GGUF_UINT8 || t == OB_GGUF_UINT16 || t == OB_GGUF_UINT32 || t == OB_GGUF_UINT64; }
static int is_signed(int t) { return t == OB_GGUF_INT8 || t == OB_GGUF_INT16 || t == OB_GGUF_INT32 || t == OB_GGUF_INT64; }
static int is_float(int t) { return t == OB_GGUF_FLOAT32 || t == OB_GGUF_FLOAT64; }

const char *ob_gguf_vtype_name(int t) {
    static const char *names[OB_GGUF_TYPE_COUNT] = {"uint8", "int8", "uint16", "int16", "uint32",
        "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"};
    return t >= 0 && t < OB_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

/* One packed little-endian element into a value (unsigned and bool -> u64, signed -> i64,
 * floats -> f64). */
static void decode_scalar(int t, const uint8_t *p, ob_gguf_value *v) {
    v->type = t;
    switch (t) {
    case OB_GGUF_UINT8: case OB_GGUF_BOOL: v->v.u64 = p[0]; break;
    case OB_GGUF_INT8: { int8_t x; memcpy(&x, p, 1); v->v.i64 = x; break; }
    case OB_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u64 = x; break; }
    case OB_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i64 = x; break; }
    case OB_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u64 = x; break; }
    case OB_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i64 = x; break; }
    case OB_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f64 = x; break; }
    case OB_GGUF_UINT64: memcpy(&v->v.u64, p, 8); break;
    case OB_GGUF_INT64: memcpy(&v->v.i64, p, 8); break;
    case OB_GGUF_FLOAT64: memcpy(&v->v.f64, p, 8); break;
    default: v->v.u64 = 0; break;
    }
}

/* ---- arena: every reader-side copy, freed in one go --------------------------------------- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t mem[];
} arena_chunk;

static void *arena_alloc(arena_chunk **head, size_t n) {
    const size_t a = _Alignof(max_align_t), chunk = 64 * 1024;
    if (n == 0) n = 1;
    if (n > SIZE_MAX - a - sizeof(arena_chunk)) return NULL;
    n = (n + a - 1) / a * a;
    arena_chunk *c = *head;
    if (c && c->cap - c->used >= n) {
        void *p = (char *)c->mem + c->used;
        c->used += n;
        return p;
    }
    size_t cap = n > chunk ? n : chunk;
    arena_chunk *nc = malloc(sizeof *nc + cap);
    if (!nc) return NULL;
    nc->used = n;
    nc->cap = cap;
    if (c && n > chunk / 4) { nc->next = c->next; c->next = nc; } /* big one-off: keep filling c */
    else { nc->next = c; *head = nc; }
    return nc->mem;
}

static void *arena_zalloc(arena_chunk **head, size_t n) {
    void *p = arena_alloc(head, n);
    if (p) memset(p, 0, n);
    return p;
}

static void arena_free(arena_chunk *c) {
    while (c) { arena_chunk *n = c->next; free(c); c = n; }
}

/* ---- hash index of names (keys, tensor names): duplicate checks and lookups in O(1) ------- */

typedef struct { const char *s; size_t n; int64_t idx; } hslot; /* s == NULL: empty */
typedef struct { hslot *slot; size_t cap, count; } htab;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

static int64_t htab_find(const htab *h, const char *s, size_t n) {
    if (!h->cap) return -1;
    for (size_t i = hash_bytes(s, n) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
        const hslot *e = &h->slot[i];
        if (!e->s) return -1;
        if (e->n == n && memcmp(e->s, s, n) == 0) return e->idx;
    }
}

/* s must outlive the table (it is not copied). Returns -1 on out of memory. */
static int htab_put(htab *h, const char *s, size_t n, int64_t idx) {
    if ((h->count + 1) * 2 > h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        hslot *ns = calloc(cap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < h->cap; i++) {
            if (!h->slot[i].s) continue;
            size_t j = hash_bytes(h->slot[i].s, h->slot[i].n) & (cap - 1);
            while (ns[j].s) j = (j + 1) & (cap - 1);
            ns[j] = h->slot[i];
        }
        free(h->slot);
        h->slot = ns;
        h->cap = cap;
    }
    size_t j = hash_bytes(s, n) & (h->cap - 1);
    while (h->slot[j].s) j = (j + 1) & (h->cap - 1);
    h->slot[j] = (hslot){s, n, idx};
    h->count++;
    return 0;
}

static void htab_free(htab *h) { free(h->slot); h->slot = NULL; h->cap = h->count = 0; }

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct { const char *key; uint64_t key_len; ob_gguf_value val; } kv_entry;

struct ob_gguf {
    const uint8_t *base;     /* [size] the file's bytes: our mapping or the caller's buffer */
    size_t size;
    void *map;               /* non-NULL when we own an mmap of size bytes */
    uint32_t version;
    size_t alignment;
    size_t data_off;         /* file offset of the data section */
    int64_t n_kv, n_tensors;
    kv_entry *kv;            /* [n_kv] in file order */
    ob_gguf_tensor *tensors; /* [n_tensors] in file order */
    htab kv_index, tensor_index;
    arena_chunk *arena;
};

/* Cursor over the file; where (e.g. "key 'general.name'") prefixes every message. */
typedef struct { ob_gguf_t *g; size_t pos; char *err; size_t errlen; } cur;

static size_t left(const cur *c) { return c->g->size - c->pos; }

static int oom(cur *c, const char *where) { return fail(c->err, c->errlen, "%s: out of memory", where); }

static int rd(cur *c, void *dst, size_t n, const char *where, const char *what) {
    if (n > left(c))
        return fail(c->err, c->errlen, "%s: %s (%zu bytes at offset %zu) is past the end of the file (%zu bytes)",
                    where, what, n, c->pos, c->g->size);
    memcpy(dst, c->g->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_str(cur *c, const char *where, const char *what, const char **out, uint64_t *len) {
    uint64_t n = 0;
    if (rd(c, &n, 8, where, what)) return -1;
    if (n > left(c))
        return fail(c->err, c->errlen, "%s: %s length %" PRIu64 " exceeds the %zu bytes left in the file (at offset %zu)",
                    where, what, n, left(c), c->pos);
    char *s = arena_alloc(&c->g->arena, (size_t)n + 1);
    if (!s) return oom(c, where);
    memcpy(s, c->g->base + c->pos, (size_t)n);
    s[n] = 0;
    c->pos += (size_t)n;
    *out = s;
    *len = n;
    return 0;
}

static int rd_array(cur *c, ob_gguf_value *v, const char *where, int depth);

static int rd_value(cur *c, int type, ob_gguf_value *v, const char *where) {
    v->type = type;
    if (type == OB_GGUF_STRING) return rd_str(c, where, "string", &v->v.str.ptr, &v->v.str.len);
    if (type == OB_GGUF_ARRAY) return rd_array(c, v, where, 1);
    size_t sz = vtype_size(type);
    if (sz == 0) return fail(c->err, c->errlen, "%s: unknown value type %d", where, type);
    uint8_t b[8];
    if (rd(c, b, sz, where, ob_gguf_vtype_name(type))) return -1;
    if (type == OB_GGUF_BOOL && b[0] > 1)
        return fail(c->err, c->errlen, "%s: bool value %u is neither 0 nor 1", where, b[0]);
    decode_scalar(type, b, v);
    return 0;
}

static int rd_array(cur *c, ob_gguf_value *v, const char *where, int depth) {
    uint32_t et = 0;
    uint64_t n = 0;
    if (depth > GGUF_MAX_DEPTH)
        return fail(c->err, c->errlen, "%s: arrays nested more than %d deep", where, GGUF_MAX_DEPTH);
    if (rd(c, &et, 4, where, "array element type") || rd(c, &n, 8, where, "array length")) return -1;
    if (et >= OB_GGUF_TYPE_COUNT)
        return fail(c->err, c->errlen, "%s: unknown array element type %" PRIu32, where, et);
    /* The smallest encoding of one element bounds n before anything is allocated. */
    size_t min = et == OB_GGUF_STRING ? 8 : et == OB_GGUF_ARRAY ? 12 : vtype_size((int)et);
    if (n > left(c) / min)
        return fail(c->err, c->errlen, "%s: array of %" PRIu64 " %s elements cannot fit in the %zu bytes left in the file (at offset %zu)",
                    where, n, ob_gguf_vtype_name((int)et), left(c), c->pos);
    v->type = OB_GGUF_ARRAY;
    v->v.arr.elem_type = (int)et;
    v->v.arr.n = n;
    v->v.arr.data = NULL;
    v->v.arr.items = NULL;
    if (min == vtype_size((int)et)) { /* numeric: points into the file */
        const uint8_t *p = c->g->base + c->pos;
        if (et == OB_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return fail(c->err, c->errlen, "%s: bool array element %" PRIu64 " is %u, neither 0 nor 1",
                                where, i, p[i]);
        v->v.arr.data = p;
        c->pos += (size_t)(n * min);
        return 0;
    }
    if (n == 0) return 0;
    ob_gguf_value *items = arena_zalloc(&c->g->arena, (size_t)n * sizeof *items); /* n <= size/8 */
    if (!items) return oom(c, where);
    v->v.arr.items = items;
    for (uint64_t i = 0; i < n; i++) {
        int rc = et == OB_GGUF_STRING ? rd_value(c, OB_GGUF_STRING, &items[i], where)
                                      : rd_array(c, &items[i], where, depth + 1);
        if (rc) return -1;
    }
    return 0;
}

static int rd_kvs(cur *c) {
    ob_gguf_t *g = c->g;
    char where[GGUF_SHOW + 64], name[GGUF_SHOW + 8] = "";
    for (int64_t i = 0; i < g->n_kv; i++) {
        kv_entry *e = &g->kv[i];
        uint32_t type = 0;
        if (i == 0) snprintf(where, sizeof where, "kv 0");
        else snprintf(where, sizeof where, "kv %" PRId64 " (after key '%s')", i, name);
        if (rd_str(c, where, "key", &e->key, &e->key_len)) return -1;
        show(name, e->key, e->key_len);
        if (e->key_len == 0) return fail(c->err, c->errlen, "%s: key is empty", where);
        if (memchr(e->key, 0, (size_t)e->key_len))
            return fail(c->err, c->errlen, "%s: key '%s' contains a NUL byte", where, name);
        snprintf(where, sizeof where, "key '%s'", name);
        int64_t prev = htab_find(&g->kv_index, e->key, (size_t)e->key_len);
        if (prev >= 0)
            return fail(c->err, c->errlen, "duplicate key '%s' (kv %" PRId64 " and kv %" PRId64 ")", name, prev, i);
        if (htab_put(&g->kv_index, e->key, (size_t)e->key_len, i)) return oom(c, where);
        if (rd(c, &type, 4, where, "value type")) return -1;
        if (type >= OB_GGUF_TYPE_COUNT)
            return fail(c->err, c->errlen, "%s: unknown value type %" PRIu32, where, type);
        if (rd_value(c, (int)type, &e->val, where)) return -1;
    }
    g->alignment = OB_GGUF_DEFAULT_ALIGNMENT;
    const ob_gguf_value *a = ob_gguf_get(g, "general.alignment");
    if (a && a->type != OB_GGUF_UINT32)
        return fail(c->err, c->errlen, "key 'general.alignment' has type %s, must be uint32", ob_gguf_vtype_name(a->type));
    if (a && (a->v.u64 == 0 || (a->v.u64 & (a->v.u64 - 1)) != 0))
        return fail(c->err, c->errlen, "key 'general.alignment' is %" PRIu64 ", must be a nonzero power of two", a->v.u64);
    if (a) g->alignment = (size_t)a->v.u64;
    return 0;
}

static int rd_tensor_info(cur *c, int64_t i, const char *prev_name) {
    ob_gguf_t *g = c->g;
    ob_gguf_tensor *t = &g->tensors[i];
    char where[GGUF_SHOW + 64], name[GGUF_SHOW + 8];
    uint64_t name_len = 0, off = 0;
    uint32_t n_dims = 0, type = 0;
    if (i == 0) snprintf(where, sizeof where, "tensor 0");
    else snprintf(where, sizeof where, "tensor %" PRId64 " (after tensor '%s')", i, prev_name);
    if (rd_str(c, where, "name", &t->name, &name_len)) return -1;
    show(name, t->name, name_len);
    if (name_len == 0) return fail(c->err, c->errlen, "%s: name is empty", where);
    if (memchr(t->name, 0, (size_t)name_len))
        return fail(c->err, c->errlen, "%s: name '%s' contains a NUL byte", where, name);
    snprintf(where, sizeof where, "tensor '%s'", name);
    int64_t prev = htab_find(&g->tensor_index, t->name, (size_t)name_len);
    if (prev >= 0)
        return fail(c->err, c->errlen, "duplicate tensor name '%s' (tensors %" PRId64 " and %" PRId64 ")", name, prev, i);
    if (htab_put(&g->tensor_index, t->name, (size_t)name_len, i)) return oom(c, where);

    if (rd(c, &n_dims, 4, where, "n_dims")) return -1;
    if (n_dims < 1 || n_dims > OB_GGUF_MAX_DIMS)
        return fail(c->err, c->errlen, "%s: n_dims %" PRIu32 " is not in 1..%d", where, n_dims, OB_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t nel = 1;
    for (int d = 0; d < OB_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && rd(c, &t->ne[d], 8, where, "ne")) return -1;
        if (t->ne[d] < 1)
            return fail(c->err, c->errlen, "%s: ne[%d] = %" PRId64 ", every dimension must be >= 1", where, d, t->ne[d]);
        if (!mul_ok(nel, (uint64_t)t->ne[d], &nel) || nel > INT64_MAX)
            return fail(c->err, c->errlen, "%s: element count of shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] overflows int64",
                        where, t->ne[0], d > 0 ? t->ne[1] : 1, d > 1 ? t->ne[2] : 1, d > 2 ? t->ne[3] : 1);
    }
    if (rd(c, &type, 4, where, "type")) return -1;
    const ob_type_traits *tr = type <= INT_MAX ? ob_type_get((int)type) : NULL;
    if (!tr || tr->block_size <= 0)
        return fail(c->err, c->errlen, "%s: unknown tensor type %" PRIu32, where, type);
    t->type = (int)type;
    if (t->ne[0] % tr->block_size != 0)
        return fail(c->err, c->errlen, "%s: ne[0] = %" PRId64 " is not a multiple of the block size %d of type %s",
                    where, t->ne[0], tr->block_size, tr->name);
    uint64_t size;
    if (!mul_ok((uint64_t)(t->ne[0] / tr->block_size), (uint64_t)tr->type_size, &size) ||
        !mul_ok(size, (uint64_t)t->ne[1], &size) || !mul_ok(size, (uint64_t)t->ne[2], &size) ||
        !mul_ok(size, (uint64_t)t->ne[3], &size) || size > SIZE_MAX / 2)
        return fail(c->err, c->errlen, "%s: size in bytes of a %s tensor of %" PRIu64 " elements overflows", where, tr->name, nel);
    /* rows plus the per-tensor tail of types that have one (i2_s: its scale) */
    t->size = ob_type_tensor_size(t->type, t->ne[0], t->ne[1] * t->ne[2] * t->ne[3]);
    if (rd(c, &off, 8, where, "offset")) return -1;
    if (off % g->alignment != 0)
        return fail(c->err, c->errlen, "%s: offset %" PRIu64 " is not a multiple of the alignment %zu", where, off, g->alignment);
    t->offset = off;
    return 0;
}

typedef struct { uint64_t off, end; int64_t idx; } span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Places every tensor inside the data section and refuses overlaps. */
static int place_tensors(cur *c) {
    ob_gguf_t *g = c->g;
    uint64_t start;
    if (!add_ok(c->pos, g->alignment - 1, &start)) start = UINT64_MAX;
    else start -= start % g->alignment;
    if (g->n_tensors == 0) { g->data_off = start < g->size ? (size_t)start : g->size; return 0; }
    if (start > g->size)
        return fail(c->err, c->errlen, "data section would start at offset %" PRIu64 " (tensor infos end at %zu, alignment %zu), past the end of the file (%zu bytes); first tensor '%s'",
                    start, c->pos, g->alignment, g->size, g->tensors[0].name);
    g->data_off = (size_t)start;
    size_t room = g->size - g->data_off;
    span *sp = malloc((size_t)g->n_tensors * sizeof *sp);
    if (!sp) return oom(c, "tensor placement");
    char name[GGUF_SHOW + 8], other[GGUF_SHOW + 8];
    int rc = 0;
    for (int64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        ob_gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->size > room - t->offset) {
            show(name, t->name, strlen(t->name));
            rc = fail(c->err, c->errlen, "tensor '%s': data [offset %" PRIu64 ", size %zu) extends past end of file (%zu bytes; data section starts at %zu)",
                      name, t->offset, t->size, g->size, g->data_off);
            break;
        }
        t->data = g->base + g->data_off + (size_t)t->offset;
        sp[i] = (span){t->offset, t->offset + t->size, i};
    }
    if (rc == 0) {
        qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
        int64_t far = 0; /* the span reaching furthest so far */
        for (int64_t i = 1; i < g->n_tensors && rc == 0; i++) {
            if (sp[i].off < sp[far].end) {
                const ob_gguf_tensor *a = &g->tensors[sp[far].idx], *b = &g->tensors[sp[i].idx];
                show(name, a->name, strlen(a->name));
                show(other, b->name, strlen(b->name));
                rc = fail(c->err, c->errlen, "tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64 ", %" PRIu64 ") overlap",
                          name, sp[far].off, sp[far].end, other, sp[i].off, sp[i].end);
            }
            if (sp[i].end > sp[far].end) far = i;
        }
    }
    free(sp);
    return rc;
}

static int parse(ob_gguf_t *g, char *err, size_t errlen) {
    cur c = {g, 0, err, errlen};
    uint64_t n_tensors = 0, n_kv = 0;
    if (g->size < 4) return fail(err, errlen, "header: file is %zu bytes, too short for the GGUF magic", g->size);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        char m[GGUF_SHOW + 8];
        show(m, (const char *)g->base, 4);
        return fail(err, errlen, "header: bad magic '%s' (expected 'GGUF'): not a GGUF file", m);
    }
    c.pos = 4;
    if (rd(&c, &g->version, 4, "header", "version")) return -1;
    if (g->version == 1)
        return fail(err, errlen, "header: version 1 (GGUFv1) is not supported; convert the model again with a current tool");
    if (g->version != 0 && (g->version & 0xffff) == 0)
        return fail(err, errlen, "header: version 0x%08" PRIx32 " looks byte-swapped: big-endian GGUF files are not supported", g->version);
    if (g->version != 2 && g->version != 3)
        return fail(err, errlen, "header: version %" PRIu32 " is not supported (this reader knows 2 and 3)", g->version);
    if (rd(&c, &n_tensors, 8, "header", "n_tensors") || rd(&c, &n_kv, 8, "header", "n_kv")) return -1;
    if (n_kv > left(&c) / GGUF_KV_MIN_BYTES)
        return fail(err, errlen, "header: n_kv %" PRIu64 " cannot fit in the %zu bytes left in the file", n_kv, left(&c));
    if (n_tensors > left(&c) / GGUF_TI_MIN_BYTES)
        return fail(err, errlen, "header: n_tensors %" PRIu64 " cannot fit in the %zu bytes left in the file", n_tensors, left(&c));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if (!(g->kv = arena_zalloc(&g->arena, (size_t)n_kv * sizeof *g->kv))) return oom(&c, "metadata");
    if (rd_kvs(&c)) return -1;

    if (n_tensors > left(&c) / GGUF_TI_MIN_BYTES)
        return fail(err, errlen, "header: n_tensors %" PRIu64 " cannot fit in the %zu bytes left after the metadata", n_tensors, left(&c));
    if (!(g->tensors = arena_zalloc(&g->arena, (size_t)n_tensors * sizeof *g->tensors))) return oom(&c, "tensor infos");
    char prev[GGUF_SHOW + 8] = "";
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (rd_tensor_info(&c, i, prev)) return -1;
        show(prev, g->tensors[i].name, strlen(g->tensors[i].name));
    }
    return place_tensors(&c);
}

int ob_gguf_open_buffer(const void *data, size_t size, ob_gguf_t **out, char *err, size_t errlen) {
    if (!out) return fail(err, errlen, "open_buffer: out is NULL");
    *out = NULL;
    if (!data && size) return fail(err, errlen, "open_buffer: data is NULL");
    ob_gguf_t *g = calloc(1, sizeof *g);
    if (!g) return fail(err, errlen, "out of memory");
    g->base = data ? data : (const uint8_t *)"";
    g->size = data ? size : 0;
    if (parse(g, err, errlen)) { ob_gguf_close(g); return -1; }
    *out = g;
    return 0;
}

/* Named in-memory files (a model compiled into the binary): ob_gguf_open resolves these names
 * before the file system. Registered once at start-up, read-only afterwards. */
#define MAX_BUILTIN 4
static struct { const char *name; const void *data; size_t size; } builtins[MAX_BUILTIN];
static int n_builtins;

void ob_gguf_register_builtin(const char *name, const void *data, size_t size) {
    if (n_builtins < MAX_BUILTIN && name && data && size) {
        builtins[n_builtins].name = name;
        builtins[n_builtins].data = data;
        builtins[n_builtins].size = size;
        n_builtins++;
    }
}

int ob_gguf_open(const char *path, ob_gguf_t **out, char *err, size_t errlen) {
    if (!out) return fail(err, errlen, "open: out is NULL");
    *out = NULL;
    if (!path) return fail(err, errlen, "open: path is NULL");
    for (int i = 0; i < n_builtins; i++)
        if (strcmp(path, builtins[i].name) == 0) return ob_gguf_open_buffer(builtins[i].data, builtins[i].size, out, err, errlen);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* NONBLOCK: a FIFO must not hang us */
    if (fd < 0) return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : 0;
    if (e || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return fail(err, errlen, "%s: %s", path, e ? strerror(e) : !S_ISREG(st.st_mode) ? "not a regular file" : "file is empty");
    }
    size_t size = (size_t)st.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (m == MAP_FAILED) return fail(err, errlen, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    ob_gguf_t *g = calloc(1, sizeof *g);
    if (!g) { munmap(m, size); return fail(err, errlen, "%s: out of memory", path); }
    g->map = m;
    g->base = m;
    g->size = size;
    char msg[1024] = "";
    if (parse(g, msg, sizeof msg)) {
        fail(err, errlen, "%s: %s", path, strncmp(msg, "gguf: ", 6) == 0 ? msg + 6 : msg);
        ob_gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void ob_gguf_close(ob_gguf_t *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    htab_free(&g->kv_index);
    htab_free(&g->tensor_index);
    arena_free(g->arena);
    free(g);
}

uint32_t ob_gguf_version(const ob_gguf_t *g) { return g ? g->version : 0; }
size_t ob_gguf_alignment(const ob_gguf_t *g) { return g ? g->alignment : 0; }
size_t ob_gguf_file_size(const ob_gguf_t *g) { return g ? g->size : 0; }
int64_t ob_gguf_n_kv(const ob_gguf_t *g) { return g ? g->n_kv : 0; }
int64_t ob_gguf_n_tensors(const ob_gguf_t *g) { return g ? g->n_tensors : 0; }

const char *ob_gguf_kv_key(const ob_gguf_t *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

const ob_gguf_value *ob_gguf_kv_value(const ob_gguf_t *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i].val : NULL;
}

const ob_gguf_value *ob_gguf_get(const ob_gguf_t *g, const char *key) {
    if (!g || !key) return NULL;
    int64_t i = htab_find(&g->kv_index, key, strlen(key));
    return i < 0 ? NULL : &g->kv[i].val;
}

const ob_gguf_tensor *ob_gguf_tensor_at(const ob_gguf_t *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ob_gguf_tensor *ob_gguf_find_tensor(const ob_gguf_t *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = htab_find(&g->tensor_index, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- typed getters ------------------------------------------------------------------------ */

static int no_convert(const char *key, const ob_gguf_value *v, const char *want, char *err, size_t errlen) {
    char k[GGUF_SHOW + 8];
    show(k, key, strlen(key));
    return fail(err, errlen, "key '%s' is %s, which does not convert to %s", k, ob_gguf_vtype_name(v->type), want);
}

int ob_gguf_get_i64(const ob_gguf_t *g, const char *key, int64_t *out, char *err, size_t errlen) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    if (!v) return 0;
    if (is_signed(v->type)) { *out = v->v.i64; return 1; }
    if (is_unsigned(v->type) && v->v.u64 <= INT64_MAX) { *out = (int64_t)v->v.u64; return 1; }
    if (is_unsigned(v->type)) {
        char k[GGUF_SHOW + 8];
        show(k, key, strlen(key));
        return fail(err, errlen, "key '%s' is %s %" PRIu64 ", which does not fit int64", k, ob_gguf_vtype_name(v->type), v->v.u64);
    }
    return no_convert(key, v, "int64", err, errlen);
}

int ob_gguf_get_f64(const ob_gguf_t *g, const char *key, double *out, char *err, size_t errlen) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    if (!v) return 0;
    if (is_float(v->type)) { *out = v->v.f64; return 1; }
    /* integers: only when the double holds the value exactly (|x| <= 2^53 always does) */
    if (is_signed(v->type)) {
        double d = (double)v->v.i64;
        if (d < 9223372036854775808.0 && (int64_t)d == v->v.i64) { *out = d; return 1; }
    } else if (is_unsigned(v->type)) {
        double d = (double)v->v.u64;
        if (d < 18446744073709551616.0 && (uint64_t)d == v->v.u64) { *out = d; return 1; }
    }
    return no_convert(key, v, is_signed(v->type) || is_unsigned(v->type) ? "float64 exactly" : "float64", err, errlen);
}

int ob_gguf_get_bool(const ob_gguf_t *g, const char *key, int *out, char *err, size_t errlen) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    if (!v) return 0;
    if (v->type != OB_GGUF_BOOL) return no_convert(key, v, "bool", err, errlen);
    *out = v->v.u64 != 0;
    return 1;
}

int ob_gguf_get_str(const ob_gguf_t *g, const char *key, const char **out, char *err, size_t errlen) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    if (!v) return 0;
    if (v->type != OB_GGUF_STRING) return no_convert(key, v, "string", err, errlen);
    *out = v->v.str.ptr;
    return 1;
}

/* Out-of-range, non-array or non-numeric: 0. Unsigned above INT64_MAX saturates; floats are
 * truncated toward zero and saturate (NaN gives 0). */
static ob_gguf_value arr_elem(const ob_gguf_value *arr, uint64_t i) {
    ob_gguf_value v = {.type = -1};
    size_t sz = arr && arr->type == OB_GGUF_ARRAY ? vtype_size(arr->v.arr.elem_type) : 0;
    if (sz && i < arr->v.arr.n && arr->v.arr.data)
        decode_scalar(arr->v.arr.elem_type, (const uint8_t *)arr->v.arr.data + i * sz, &v);
    return v;
}

int64_t ob_gguf_arr_i64(const ob_gguf_value *arr, uint64_t i) {
    ob_gguf_value v = arr_elem(arr, i);
    if (v.type < 0) return 0;
    if (is_signed(v.type)) return v.v.i64;
    if (is_float(v.type)) {
        if (v.v.f64 != v.v.f64) return 0;
        if (v.v.f64 >= 9223372036854775807.0) return INT64_MAX;
        if (v.v.f64 <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)v.v.f64;
    }
    return v.v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v.v.u64;
}

double ob_gguf_arr_f64(const ob_gguf_value *arr, uint64_t i) {
    ob_gguf_value v = arr_elem(arr, i);
    if (v.type < 0) return 0;
    if (is_signed(v.type)) return (double)v.v.i64;
    if (is_float(v.type)) return v.v.f64;
    return (double)v.v.u64;
}

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct { char *key; ob_gguf_value val; } wkv; /* val owns its strings and arrays */
typedef struct {
    char *name;
    int type, n_dims;
    int64_t ne[OB_GGUF_MAX_DIMS];
    size_t size;
    const void *data;  /* caller's, or NULL: produced by the fill callback */
    uint64_t offset;   /* set by ob_gguf_writer_write */
} wtensor;

struct ob_gguf_writer {
    wkv *kv;            /* [n_kv] insertion order */
    int64_t n_kv, cap_kv;
    wtensor *t;         /* [n_t] */
    int64_t n_t, cap_t;
    htab kv_index, t_index;
    char err[512];      /* first failure of a void setter, reported by ob_gguf_writer_write */
};

__attribute__((format(printf, 2, 3)))
static void w_fail(ob_gguf_writer_t *w, const char *fmt, ...) {
    if (w->err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static void val_free(ob_gguf_value *v) {
    if (v->type == OB_GGUF_STRING) {
        free((void *)v->v.str.ptr);
    } else if (v->type == OB_GGUF_ARRAY) {
        ob_gguf_value *items = (ob_gguf_value *)v->v.arr.items;
        if (items)
            for (uint64_t i = 0; i < v->v.arr.n; i++) val_free(&items[i]);
        free(items);
        free((void *)v->v.arr.data);
    }
    memset(v, 0, sizeof *v);
}

/* Deep copy of src into dst with the same checks the reader applies, so a file we write is
 * a file we can read. On failure dst owns nothing and err says why (key named by caller). */
static int val_clone(ob_gguf_value *dst, const ob_gguf_value *src, int depth, char *err, size_t errlen) {
    memset(dst, 0, sizeof *dst);
    int t = src->type;
    static const uint64_t umax[OB_GGUF_TYPE_COUNT] = {[OB_GGUF_UINT8] = UINT8_MAX, [OB_GGUF_UINT16] = UINT16_MAX,
        [OB_GGUF_UINT32] = UINT32_MAX, [OB_GGUF_UINT64] = UINT64_MAX, [OB_GGUF_BOOL] = 1};
    static const int64_t smax[OB_GGUF_TYPE_COUNT] = {[OB_GGUF_INT8] = INT8_MAX, [OB_GGUF_INT16] = INT16_MAX,
        [OB_GGUF_INT32] = INT32_MAX, [OB_GGUF_INT64] = INT64_MAX};
    if (t < 0 || t >= OB_GGUF_TYPE_COUNT) return snprintf(err, errlen, "unknown value type %d", t), -1;
    if ((is_unsigned(t) || t == OB_GGUF_BOOL) && src->v.u64 > umax[t])
        return snprintf(err, errlen, "value %" PRIu64 " does not fit %s", src->v.u64, ob_gguf_vtype_name(t)), -1;
    if (is_signed(t) && (src->v.i64 > smax[t] || src->v.i64 < -smax[t] - 1))
        return snprintf(err, errlen, "value %" PRId64 " does not fit %s", src->v.i64, ob_gguf_vtype_name(t)), -1;
    if (t == OB_GGUF_STRING) {
        const char *p = src->v.str.ptr;
        uint64_t n = src->v.str.len;
        if (!p && n) return snprintf(err, errlen, "string of %" PRIu64 " bytes has a NULL pointer", n), -1;
        char *s = n < SIZE_MAX ? malloc((size_t)n + 1) : NULL;
        if (!s) return snprintf(err, errlen, "out of memory"), -1;
        if (n) memcpy(s, p, (size_t)n);
        s[n] = 0;
        *dst = (ob_gguf_value){.type = t, .v.str = {s, n}};
        return 0;
    }
    if (t != OB_GGUF_ARRAY) { *dst = *src; return 0; }

    int et = src->v.arr.elem_type;
    uint64_t n = src->v.arr.n, bytes;
    if (depth >= GGUF_MAX_DEPTH) return snprintf(err, errlen, "arrays nested more than %d deep", GGUF_MAX_DEPTH), -1;
    if (et < 0 || et >= OB_GGUF_TYPE_COUNT) return snprintf(err, errlen, "unknown array element type %d", et), -1;
    size_t sz = vtype_size(et);
    if (!mul_ok(n, sz ? sz : sizeof(ob_gguf_value), &bytes) || bytes > SIZE_MAX / 2)
        return snprintf(err, errlen, "array of %" PRIu64 " elements is too large", n), -1;
    dst->type = OB_GGUF_ARRAY;
    dst->v.arr.elem_type = et;
    if (n == 0) return 0;
    if (sz) {
        if (!src->v.arr.data) return snprintf(err, errlen, "numeric array of %" PRIu64 " elements has NULL data", n), -1;
        uint8_t *d = malloc((size_t)bytes);
        if (!d) return snprintf(err, errlen, "out of memory"), -1;
        memcpy(d, src->v.arr.data, (size_t)bytes);
        if (et == OB_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++) d[i] = d[i] != 0;
        dst->v.arr.data = d;
        dst->v.arr.n = n;
        return 0;
    }
    if (!src->v.arr.items) return snprintf(err, errlen, "%s array of %" PRIu64 " elements has NULL items", ob_gguf_vtype_name(et), n), -1;
    ob_gguf_value *items = calloc((size_t)n, sizeof *items);
    if (!items) return snprintf(err, errlen, "out of memory"), -1;
    dst->v.arr.items = items;
    for (uint64_t i = 0; i < n; i++) {
        const ob_gguf_value *s = &src->v.arr.items[i];
        int rc = s->type != et ? (snprintf(err, errlen, "element %" PRIu64 " of a %s array has type %s", i,
                                           ob_gguf_vtype_name(et), ob_gguf_vtype_name(s->type)), -1)
                               : val_clone(&items[i], s, depth + 1, err, errlen);
        if (rc) { dst->v.arr.n = i; val_free(dst); return -1; }
    }
    dst->v.arr.n = n;
    return 0;
}

ob_gguf_writer_t *ob_gguf_writer_new(void) { return calloc(1, sizeof(ob_gguf_writer_t)); }

void ob_gguf_writer_free(ob_gguf_writer_t *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); val_free(&w->kv[i].val); }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    htab_free(&w->kv_index);
    htab_free(&w->t_index);
    free(w);
}

static int grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* Stores an owned value under key (replacing in place if the key exists); on failure frees v. */
static void w_put(ob_gguf_writer_t *w, const char *key, ob_gguf_value *v) {
    size_t n = strlen(key);
    int64_t i = htab_find(&w->kv_index, key, n);
    if (i >= 0) { val_free(&w->kv[i].val); w->kv[i].val = *v; return; }
    char *k = strdup(key);
    if (!k || grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv) ||
        htab_put(&w->kv_index, k, n, w->n_kv)) {
        free(k);
        val_free(v);
        w_fail(w, "key '%s': out of memory", key);
        return;
    }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].val = *v;
    w->n_kv++;
}

void ob_gguf_writer_set_value(ob_gguf_writer_t *w, const char *key, const ob_gguf_value *v) {
    if (!w) return;
    if (!key || !key[0]) { w_fail(w, "a key is NULL or empty"); return; }
    if (!v) { w_fail(w, "key '%s': value is NULL", key); return; }
    ob_gguf_value copy;
    char why[256];
    if (val_clone(&copy, v, 0, why, sizeof why)) { w_fail(w, "key '%s': %s", key, why); return; }
    w_put(w, key, &copy);
}

static void w_scalar(ob_gguf_writer_t *w, const char *key, int type, uint64_t u, int64_t i, double f) {
    ob_gguf_value v = {.type = type};
    if (is_signed(type)) v.v.i64 = i;
    else if (is_float(type)) v.v.f64 = f;
    else v.v.u64 = u;
    ob_gguf_writer_set_value(w, key, &v);
}

void ob_gguf_writer_set_u8(ob_gguf_writer_t *w, const char *k, uint8_t v) { w_scalar(w, k, OB_GGUF_UINT8, v, 0, 0); }
void ob_gguf_writer_set_i8(ob_gguf_writer_t *w, const char *k, int8_t v) { w_scalar(w, k, OB_GGUF_INT8, 0, v, 0); }
void ob_gguf_writer_set_u16(ob_gguf_writer_t *w, const char *k, uint16_t v) { w_scalar(w, k, OB_GGUF_UINT16, v, 0, 0); }
void ob_gguf_writer_set_i16(ob_gguf_writer_t *w, const char *k, int16_t v) { w_scalar(w, k, OB_GGUF_INT16, 0, v, 0); }
void ob_gguf_writer_set_u32(ob_gguf_writer_t *w, const char *k, uint32_t v) { w_scalar(w, k, OB_GGUF_UINT32, v, 0, 0); }
void ob_gguf_writer_set_i32(ob_gguf_writer_t *w, const char *k, int32_t v) { w_scalar(w, k, OB_GGUF_INT32, 0, v, 0); }
void ob_gguf_writer_set_u64(ob_gguf_writer_t *w, const char *k, uint64_t v) { w_scalar(w, k, OB_GGUF_UINT64, v, 0, 0); }
void ob_gguf_writer_set_i64(ob_gguf_writer_t *w, const char *k, int64_t v) { w_scalar(w, k, OB_GGUF_INT64, 0, v, 0); }
void ob_gguf_writer_set_f32(ob_gguf_writer_t *w, const char *k, float v) { w_scalar(w, k, OB_GGUF_FLOAT32, 0, 0, v); }
void ob_gguf_writer_set_f64(ob_gguf_writer_t *w, const char *k, double v) { w_scalar(w, k, OB_GGUF_FLOAT64, 0, 0, v); }
void ob_gguf_writer_set_bool(ob_gguf_writer_t *w, const char *k, int v) { w_scalar(w, k, OB_GGUF_BOOL, v != 0, 0, 0); }

void ob_gguf_writer_set_str(ob_gguf_writer_t *w, const char *key, const char *v) {
    if (w && !v) { w_fail(w, "key '%s': string is NULL", key ? key : "(null)"); return; }
    ob_gguf_writer_set_strn(w, key, v, v ? strlen(v) : 0);
}

void ob_gguf_writer_set_strn(ob_gguf_writer_t *w, const char *key, const char *v, size_t len) {
    ob_gguf_value val = {.type = OB_GGUF_STRING, .v.str = {v, len}};
    ob_gguf_writer_set_value(w, key, &val);
}

void ob_gguf_writer_set_arr(ob_gguf_writer_t *w, const char *key, int elem_type, const void *data, uint64_t n) {
    if (!w) return;
    if (vtype_size(elem_type) == 0) {
        w_fail(w, "key '%s': set_arr takes numeric or bool elements, not %s", key ? key : "(null)", ob_gguf_vtype_name(elem_type));
        return;
    }
    ob_gguf_value val = {.type = OB_GGUF_ARRAY, .v.arr = {elem_type, n, data, NULL}};
    ob_gguf_writer_set_value(w, key, &val);
}

void ob_gguf_writer_set_arr_str(ob_gguf_writer_t *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t n) {
    if (!w) return;
    if (n && !strs) { w_fail(w, "key '%s': string array is NULL", key ? key : "(null)"); return; }
    if (n > SIZE_MAX / sizeof(ob_gguf_value)) { w_fail(w, "key '%s': string array too large", key ? key : "(null)"); return; }
    ob_gguf_value *items = n ? malloc((size_t)n * sizeof *items) : NULL;
    if (n && !items) { w_fail(w, "key '%s': out of memory", key ? key : "(null)"); return; }
    for (uint64_t i = 0; i < n; i++)
        items[i] = (ob_gguf_value){.type = OB_GGUF_STRING, .v.str = {strs[i], lens ? lens[i] : strs[i] ? strlen(strs[i]) : 0}};
    ob_gguf_value val = {.type = OB_GGUF_ARRAY, .v.arr = {OB_GGUF_STRING, n, NULL, items}};
    ob_gguf_writer_set_value(w, key, &val);
    free(items);
}

void ob_gguf_writer_copy_kv(ob_gguf_writer_t *w, const ob_gguf_t *g, int (*skip)(const char *key)) {
    if (!w || !g) return;
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!skip || !skip(g->kv[i].key)) ob_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].val);
}

int64_t ob_gguf_writer_add_tensor(ob_gguf_writer_t *w, const char *name, int type, int n_dims,
                                  const int64_t *ne, const void *data, char *err, size_t errlen) {
    if (!w) return fail(err, errlen, "add_tensor: writer is NULL");
    if (!name || !name[0]) return fail(err, errlen, "add_tensor: tensor name is NULL or empty");
    size_t nlen = strlen(name);
    if (nlen > GGUF_NAME_MAX)
        return fail(err, errlen, "tensor '%s': name is %zu bytes, llama.cpp allows at most %d", name, nlen, GGUF_NAME_MAX);
    if (htab_find(&w->t_index, name, nlen) >= 0) return fail(err, errlen, "tensor '%s': added twice", name);
    if (n_dims < 1 || n_dims > OB_GGUF_MAX_DIMS || !ne)
        return fail(err, errlen, "tensor '%s': n_dims %d is not in 1..%d", name, n_dims, OB_GGUF_MAX_DIMS);
    const ob_type_traits *tr = ob_type_get(type);
    if (!tr || tr->block_size <= 0) return fail(err, errlen, "tensor '%s': unknown tensor type %d", name, type);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    uint64_t nel = 1, size;
    for (int d = 0; d < OB_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1) return fail(err, errlen, "tensor '%s': ne[%d] = %" PRId64 ", every dimension must be >= 1", name, d, t.ne[d]);
        if (!mul_ok(nel, (uint64_t)t.ne[d], &nel) || nel > INT64_MAX)
            return fail(err, errlen, "tensor '%s': element count overflows int64", name);
    }
    if (t.ne[0] % tr->block_size)
        return fail(err, errlen, "tensor '%s': ne[0] = %" PRId64 " is not a multiple of the block size %d of type %s",
                    name, t.ne[0], tr->block_size, tr->name);
    if (!mul_ok((uint64_t)(t.ne[0] / tr->block_size), (uint64_t)tr->type_size, &size) ||
        !mul_ok(size, nel / (uint64_t)t.ne[0], &size) || size > SIZE_MAX / 2)
        return fail(err, errlen, "tensor '%s': size in bytes overflows", name);
    t.size = ob_type_tensor_size(type, t.ne[0], (int64_t)(nel / (uint64_t)t.ne[0])); /* with i2_s's tail */
    if (!(t.name = strdup(name)) || grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t) ||
        htab_put(&w->t_index, t.name, nlen, w->n_t)) {
        free(t.name);
        return fail(err, errlen, "tensor '%s': out of memory", name);
    }
    w->t[w->n_t] = t;
    return w->n_t++;
}

/* Output stream that counts bytes (for padding) and remembers the first write error. */
typedef struct { FILE *f; uint64_t pos; int bad; } wout;

static void put(wout *o, const void *p, size_t n) {
    if (o->bad || n == 0) return;
    errno = 0;
    if (fwrite(p, 1, n, o->f) != n) o->bad = errno ? errno : EIO;
    o->pos += n;
}
static void put_u32(wout *o, uint32_t x) { put(o, &x, 4); }
static void put_u64(wout *o, uint64_t x) { put(o, &x, 8); }
static void put_str(wout *o, const char *s, uint64_t n) { put_u64(o, n); put(o, s, (size_t)n); }
static void put_pad(wout *o, size_t align) {
    static const uint8_t zero[4096];
    while (!o->bad && o->pos % align) {
        uint64_t k = align - o->pos % align;
        put(o, zero, k < sizeof zero ? (size_t)k : sizeof zero);
    }
}

static void put_array(wout *o, const ob_gguf_value *v);

static void put_value(wout *o, const ob_gguf_value *v) {
    uint8_t b[8];
    switch (v->type) {
    case OB_GGUF_UINT8: case OB_GGUF_BOOL: b[0] = (uint8_t)v->v.u64; put(o, b, 1); break;
    case OB_GGUF_INT8: { int8_t x = (int8_t)v->v.i64; put(o, &x, 1); break; }
    case OB_GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u64; put(o, &x, 2); break; }
    case OB_GGUF_INT16: { int16_t x = (int16_t)v->v.i64; put(o, &x, 2); break; }
    case OB_GGUF_UINT32: put_u32(o, (uint32_t)v->v.u64); break;
    case OB_GGUF_INT32: { int32_t x = (int32_t)v->v.i64; put(o, &x, 4); break; }
    case OB_GGUF_FLOAT32: { float x = (float)v->v.f64; put(o, &x, 4); break; }
    case OB_GGUF_UINT64: put_u64(o, v->v.u64); break;
    case OB_GGUF_INT64: put(o, &v->v.i64, 8); break;
    case OB_GGUF_FLOAT64: put(o, &v->v.f64, 8); break;
    case OB_GGUF_STRING: put_str(o, v->v.str.ptr, v->v.str.len); break;
    case OB_GGUF_ARRAY: put_array(o, v); break;
    }
}

static void put_array(wout *o, const ob_gguf_value *v) {
    int et = v->v.arr.elem_type;
    put_u32(o, (uint32_t)et);
    put_u64(o, v->v.arr.n);
    if (vtype_size(et)) { put(o, v->v.arr.data, (size_t)(v->v.arr.n * vtype_size(et))); return; }
    for (uint64_t i = 0; i < v->v.arr.n; i++) put_value(o, &v->v.arr.items[i]);
}

static size_t w_alignment(const ob_gguf_writer_t *w, const char *path, char *err, size_t errlen) {
    int64_t i = htab_find(&w->kv_index, "general.alignment", strlen("general.alignment"));
    if (i < 0) return OB_GGUF_DEFAULT_ALIGNMENT;
    const ob_gguf_value *v = &w->kv[i].val;
    if (v->type != OB_GGUF_UINT32)
        return fail(err, errlen, "%s: key 'general.alignment' has type %s, must be uint32", path, ob_gguf_vtype_name(v->type)), 0;
    if (v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)))
        return fail(err, errlen, "%s: key 'general.alignment' is %" PRIu64 ", must be a nonzero power of two", path, v->v.u64), 0;
    return (size_t)v->v.u64;
}

int ob_gguf_writer_write(ob_gguf_writer_t *w, const char *path, ob_gguf_fill_fn fill, void *ctx,
                         char *err, size_t errlen) {
    if (!w || !path) return fail(err, errlen, "write: writer or path is NULL");
    if (w->err[0]) return fail(err, errlen, "%s: %s", path, w->err);
    size_t align = w_alignment(w, path, err, errlen);
    if (!align) return -1;
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        if (!t->data && !fill)
            return fail(err, errlen, "%s: tensor '%s' has no data and no fill callback was given", path, t->name);
        t->offset = off;
        if (!add_ok(off, t->size, &off) || !add_ok(off, align - 1, &off))
            return fail(err, errlen, "%s: tensor '%s': data section size overflows", path, t->name);
        off -= off % align;
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return fail(err, errlen, "%s: out of memory", path);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    wout o = {fopen(tmp, "wb"), 0, 0};
    if (!o.f) {
        fail(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = 0;
    void *buf = NULL;
    size_t buf_cap = 0;

    put(&o, "GGUF", 4);
    put_u32(&o, 3);
    put_u64(&o, (uint64_t)w->n_t);
    put_u64(&o, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        put_str(&o, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(&o, (uint32_t)w->kv[i].val.type);
        put_value(&o, &w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&o, t->name, strlen(t->name));
        put_u32(&o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put(&o, &t->ne[d], 8);
        put_u32(&o, (uint32_t)t->type);
        put_u64(&o, t->offset);
    }
    put_pad(&o, align);
    for (int64_t i = 0; i < w->n_t && rc == 0 && !o.bad; i++) {
        const wtensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            if (t->size > buf_cap) {
                free(buf);
                buf_cap = 0;
                if (!(buf = malloc(t->size))) { rc = fail(err, errlen, "%s: tensor '%s': out of memory for %zu bytes", path, t->name, t->size); break; }
                buf_cap = t->size;
            }
            memset(buf, 0, t->size);
            char why[512] = "";
            if (fill(ctx, i, buf, t->size, why, sizeof why) != 0) {
                rc = fail(err, errlen, "%s: tensor '%s': fill callback failed: %s", path, t->name, why[0] ? why : "(no message)");
                break;
            }
            src = buf;
        }
        put(&o, src, t->size);
        put_pad(&o, align);
    }
    free(buf);
    if (rc == 0 && !o.bad && fflush(o.f) != 0) o.bad = errno ? errno : EIO;
    if (rc == 0 && !o.bad && fsync(fileno(o.f)) != 0) o.bad = errno ? errno : EIO;
    if (fclose(o.f) != 0 && !o.bad) o.bad = errno ? errno : EIO;
    if (rc == 0 && o.bad) rc = fail(err, errlen, "%s: write failed: %s", tmp, strerror(o.bad));
    if (rc == 0 && rename(tmp, path) != 0) rc = fail(err, errlen, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}
