/* safetensors.c — reader for Hugging Face safetensors checkpoints (one file or sharded).
 *
 * Owns: opening a .safetensors file, a model.safetensors.index.json or a directory holding
 * either; memory-mapping every shard once (read-only); validating each JSON header before any
 * tensor is exposed (header length, dtype, shape, data_offsets size and bounds, overlap,
 * unique names across shards, index entries present in the shard they name); a name lookup
 * table; conversion of F32 / F16 / BF16 / F64 tensors to float.
 * Does not own: what tensors mean (engine/arch, tools/convert), nor "__metadata__" contents
 * beyond checking it is an object of strings (nothing downstream reads it yet).
 *
 * Choices worth knowing:
 * - Tensor order is shard order (shard file names sorted), then data offset within a shard:
 *   deterministic whatever order the JSON keys come in.
 * - A tensor in a shard that the index's weight_map does not list is still exposed (as
 *   transformers loads every tensor of every listed shard); a listed tensor missing from its
 *   shard is an error.
 * - Unknown dtype strings load as OB_ST_OTHER (their size cannot be checked against the
 *   shape); ob_st_to_f32 refuses them. U16/U32/U64/F8_E8M0/C64 are also OB_ST_OTHER but their
 *   sizes are checked.
 * - ob_st_tensor.data points into the mapping at whatever alignment the header length gives:
 *   it may be unaligned for its dtype. Readers copy (memcpy), as ob_st_to_f32 does.
 * - Data is read as little-endian, as the format stores it; big-endian hosts are refused at
 *   compile time.
 */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place: big-endian hosts are not supported"
#endif

/* A header this big is not a real checkpoint (the largest real ones are a few MB): refusing it
 * keeps a corrupt length from making jansson parse gigabytes. */
#define ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

typedef struct {
    char *path;              /* as opened, for messages */
    const uint8_t *map;      /* [size] the whole file, PROT_READ */
    size_t size;
} st_file;

typedef struct {
    ob_st_tensor t;          /* first member: ob_st_tensor_at returns &entry->t */
    uint64_t begin, end;     /* data_offsets, relative to the data section */
    int file;                /* index into files */
} st_entry;

struct ob_st {
    st_file *files;          /* [n_files] */
    int n_files, cap_files;
    st_entry *entries;       /* [n_entries] shard order, then data offset */
    int64_t n_entries, cap_entries;
    int64_t *hash;           /* [hash_cap] open addressing: entry index + 1, 0 = empty */
    size_t hash_cap;         /* power of two, >= 2 * n_entries */
};

static const struct {
    const char *name;
    int dtype;
    int size;                /* bytes per element; 0: unknown (sub-byte packed) */
} st_dtypes[] = {
    {"F32", OB_ST_F32, 4},         {"F16", OB_ST_F16, 2},         {"BF16", OB_ST_BF16, 2},
    {"F64", OB_ST_F64, 8},         {"I8", OB_ST_I8, 1},           {"U8", OB_ST_U8, 1},
    {"I16", OB_ST_I16, 2},         {"I32", OB_ST_I32, 4},         {"I64", OB_ST_I64, 8},
    {"BOOL", OB_ST_BOOL, 1},       {"F8_E4M3", OB_ST_F8_E4M3, 1}, {"F8_E5M2", OB_ST_F8_E5M2, 1},
    /* Valid safetensors dtypes this engine has no enum value for: sizes still checked. */
    {"U16", OB_ST_OTHER, 2},       {"U32", OB_ST_OTHER, 4},       {"U64", OB_ST_OTHER, 8},
    {"F8_E8M0", OB_ST_OTHER, 1},   {"C64", OB_ST_OTHER, 8},
};

static int st_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int st_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *ob_st_dtype_name(int dtype) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype && dtype != OB_ST_OTHER) return st_dtypes[i].name;
    return "OTHER";
}

/* ---- files ---------------------------------------------------------------------------- */

static int st_map_file(ob_st_t *st, const char *path, int *file_out, char *err, size_t errlen) {
    if (st->n_files == st->cap_files) {
        int cap = st->cap_files ? st->cap_files * 2 : 4;
        st_file *f = realloc(st->files, (size_t)cap * sizeof *f);
        if (!f) return st_err(err, errlen, "%s: out of memory", path);
        st->files = f;
        st->cap_files = cap;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return st_err(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return st_err(err, errlen, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return st_err(err, errlen, "%s: file is %zu bytes, too short for the 8-byte header length "
                      "(truncated or not a safetensors file)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return st_err(err, errlen, "%s: cannot mmap: %s", path, strerror(e));
    char *copy = strdup(path);
    if (!copy) {
        munmap(map, size);
        return st_err(err, errlen, "%s: out of memory", path);
    }
    st_file *f = &st->files[st->n_files];
    f->path = copy;
    f->map = map;
    f->size = size;
    *file_out = st->n_files++;
    return 0;
}

static st_entry *st_new_entry(ob_st_t *st) {
    if (st->n_entries == st->cap_entries) {
        int64_t cap = st->cap_entries ? st->cap_entries * 2 : 64;
        st_entry *e = realloc(st->entries, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        st->entries = e;
        st->cap_entries = cap;
    }
    st_entry *e = &st->entries[st->n_entries];
    memset(e, 0, sizeof *e);
    return e;
}

/* ---- one header ----------------------------------------------------------------------- */

static int st_parse_entry(ob_st_t *st, int fi, const char *name, json_t *v, uint64_t data_size,
                          char *err, size_t errlen) {
    const char *path = st->files[fi].path;
    if (!json_is_object(v))
        return st_err(err, errlen, "%s: tensor '%s': entry is not a JSON object", path, name);

    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return st_err(err, errlen, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    const char *dts = json_string_value(jd);
    int dtype = OB_ST_OTHER, esize = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++) {
        if (strcmp(st_dtypes[i].name, dts) == 0) {
            dtype = st_dtypes[i].dtype;
            esize = st_dtypes[i].size;
            break;
        }
    }

    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return st_err(err, errlen, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    size_t nd = json_array_size(js);
    if (nd > OB_ST_MAX_DIMS)
        return st_err(err, errlen, "%s: tensor '%s': shape has %zu dims, at most %d supported",
                      path, name, nd, OB_ST_MAX_DIMS);
    int64_t shape[OB_ST_MAX_DIMS] = {0};
    int has_zero = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return st_err(err, errlen, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                          path, name, i);
        shape[i] = (int64_t)json_integer_value(d);
        if (shape[i] == 0) has_zero = 1;
    }
    int64_t n = 1;
    if (has_zero) {
        n = 0;
    } else {
        for (size_t i = 0; i < nd; i++) {
            if (shape[i] > INT64_MAX / n)
                return st_err(err, errlen, "%s: tensor '%s': element count of shape overflows",
                              path, name);
            n *= shape[i];
        }
    }

    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return st_err(err, errlen, "%s: tensor '%s': \"data_offsets\" is not [begin, end] integers",
                      path, name);
    long long b = json_integer_value(json_array_get(jo, 0));
    long long e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return st_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] are not 0 <= begin <= end",
                      path, name, b, e);
    uint64_t begin = (uint64_t)b, end = (uint64_t)e;
    if (end > data_size)
        return st_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] out of bounds: the data "
                      "section is %llu bytes (truncated file?)", path, name, b, e,
                      (unsigned long long)data_size);
    if (esize > 0) {
        if (n > INT64_MAX / esize)
            return st_err(err, errlen, "%s: tensor '%s': byte size of shape overflows", path, name);
        uint64_t need = (uint64_t)n * (uint64_t)esize;
        if (end - begin != need)
            return st_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] span %llu bytes but "
                          "%s x %lld elements need %llu", path, name, b, e,
                          (unsigned long long)(end - begin), dts, (long long)n,
                          (unsigned long long)need);
    }

    st_entry *en = st_new_entry(st);
    char *nm = en ? strdup(name) : NULL;
    if (!nm) return st_err(err, errlen, "%s: out of memory", path);
    const uint8_t *base = st->files[fi].map;
    uint64_t hlen;
    memcpy(&hlen, base, 8);
    en->t.name = nm;
    en->t.dtype = dtype;
    en->t.n_dims = (int)nd;
    memcpy(en->t.shape, shape, sizeof shape);
    en->t.n_elements = n;
    en->t.data = base + 8 + hlen + begin;
    en->t.size = (size_t)(end - begin);
    en->begin = begin;
    en->end = end;
    en->file = fi;
    st->n_entries++;
    return 0;
}

static int st_cmp_offset(const void *pa, const void *pb) {
    const st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->t.name, b->t.name);
}

/* Parses and validates the header of an already mapped file, appending its tensors. */
static int st_parse_file(ob_st_t *st, int fi, char *err, size_t errlen) {
    const st_file *f = &st->files[fi];
    uint64_t hlen;
    memcpy(&hlen, f->map, 8);
    if (hlen > ST_MAX_HEADER)
        return st_err(err, errlen, "%s: header length %llu exceeds the %llu-byte limit "
                      "(corrupt or not a safetensors file)", f->path, (unsigned long long)hlen,
                      (unsigned long long)ST_MAX_HEADER);
    if (hlen > f->size - 8)
        return st_err(err, errlen, "%s: header length %llu runs past the end of the %zu-byte file "
                      "(truncated?)", f->path, (unsigned long long)hlen, f->size);
    uint64_t data_size = f->size - 8 - hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return st_err(err, errlen, "%s: header is not valid JSON (line %d, column %d): %s",
                      f->path, je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return st_err(err, errlen, "%s: header is not a JSON object", f->path);
    }

    int64_t first = st->n_entries;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                json_decref(root);
                return st_err(err, errlen, "%s: \"__metadata__\" is not a JSON object", f->path);
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    int r = st_err(err, errlen, "%s: __metadata__ field '%s' is not a string",
                                   f->path, mk);
                    json_decref(root);
                    return r;
                }
            }
            continue;
        }
        if (st_parse_entry(st, fi, key, v, data_size, err, errlen) != 0) {
            json_decref(root);
            return -1;
        }
    }
    json_decref(root);

    /* Overlap: after sorting by begin, a non-empty range must start at or after the furthest
     * end seen so far. Empty ranges hold no bytes and overlap nothing. */
    int64_t n = st->n_entries - first;
    if (n < 2) return 0; /* nothing to overlap (and no entries array yet when the header is "{}") */
    st_entry *es = st->entries + first;
    qsort(es, (size_t)n, sizeof *es, st_cmp_offset);
    int64_t far = -1; /* entry with the furthest end */
    for (int64_t i = 0; i < n; i++) {
        if (es[i].begin == es[i].end) continue;
        if (far >= 0 && es[i].begin < es[far].end)
            return st_err(err, errlen, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                          f->path, es[far].t.name, (unsigned long long)es[far].begin,
                          (unsigned long long)es[far].end, es[i].t.name,
                          (unsigned long long)es[i].begin, (unsigned long long)es[i].end);
        if (far < 0 || es[i].end > es[far].end) far = i;
    }
    return 0;
}

/* ---- name table ----------------------------------------------------------------------- */

static uint64_t st_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int st_build_hash(ob_st_t *st, char *err, size_t errlen) {
    size_t cap = 16;
    while (cap < (size_t)st->n_entries * 2) cap *= 2;
    st->hash = calloc(cap, sizeof *st->hash);
    if (!st->hash) return st_err(err, errlen, "out of memory for the tensor name table");
    st->hash_cap = cap;
    for (int64_t i = 0; i < st->n_entries; i++) {
        const char *name = st->entries[i].t.name;
        size_t h = (size_t)st_hash_str(name) & (cap - 1);
        while (st->hash[h]) {
            const st_entry *o = &st->entries[st->hash[h] - 1];
            if (strcmp(o->t.name, name) == 0)
                return st_err(err, errlen, "tensor '%s' appears twice: in %s and in %s", name,
                              st->files[o->file].path, st->files[st->entries[i].file].path);
            h = (h + 1) & (cap - 1);
        }
        st->hash[h] = i + 1;
    }
    return 0;
}

const ob_st_tensor *ob_st_find(const ob_st_t *st, const char *name) {
    if (!st || !name || !st->hash) return NULL;
    size_t h = (size_t)st_hash_str(name) & (st->hash_cap - 1);
    while (st->hash[h]) {
        const st_entry *e = &st->entries[st->hash[h] - 1];
        if (strcmp(e->t.name, name) == 0) return &e->t;
        h = (h + 1) & (st->hash_cap - 1);
    }
    return NULL;
}

/* ---- index (sharded checkpoint) ------------------------------------------------------- */

/* Shard names are relative to the index's directory: an absolute path or a ".." component
 * would let an index reach files outside the checkpoint. */
static int st_shard_name_ok(const char *s) {
    if (!*s || s[0] == '/') return 0;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!q) break;
        p = q + 1;
    }
    return 1;
}

static int st_cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int st_open_index(ob_st_t *st, const char *path, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return st_err(err, errlen, "%s: cannot read index JSON (line %d, column %d): %s", path,
                      je.line, je.column, je.text);
    int rc = -1;
    const char **shards = NULL;
    char *full = NULL;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        st_err(err, errlen, "%s: missing or non-object \"weight_map\"", path);
        goto done;
    }
    size_t n_map = json_object_size(wm);
    if (n_map == 0) {
        st_err(err, errlen, "%s: \"weight_map\" is empty", path);
        goto done;
    }

    /* Distinct shard names, sorted: each shard is opened once, in a stable order. */
    shards = malloc(n_map * sizeof *shards);
    if (!shards) {
        st_err(err, errlen, "%s: out of memory", path);
        goto done;
    }
    size_t n_shards = 0;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v) || !st_shard_name_ok(json_string_value(v))) {
            st_err(err, errlen, "%s: weight_map entry for tensor '%s' is not a relative shard file name",
                   path, key);
            goto done;
        }
        shards[n_shards++] = json_string_value(v);
    }
    qsort(shards, n_shards, sizeof *shards, st_cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_shards; i++)
        if (u == 0 || strcmp(shards[u - 1], shards[i]) != 0) shards[u++] = shards[i];
    n_shards = u;

    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    for (size_t i = 0; i < n_shards; i++) {
        size_t flen = dlen + strlen(shards[i]) + 1;
        free(full);
        full = malloc(flen);
        if (!full) {
            st_err(err, errlen, "%s: out of memory", path);
            goto done;
        }
        memcpy(full, path, dlen);
        memcpy(full + dlen, shards[i], flen - dlen);
        int fi;
        char sub[512];
        if (st_map_file(st, full, &fi, sub, sizeof sub) != 0) {
            st_err(err, errlen, "%s: shard '%s': %s", path, shards[i], sub);
            goto done;
        }
        if (st_parse_file(st, fi, err, errlen) != 0) goto done;
    }
    if (st_build_hash(st, err, errlen) != 0) goto done;

    json_object_foreach(wm, key, v) {
        const char *want = json_string_value(v);
        const ob_st_tensor *t = ob_st_find(st, key);
        if (!t) {
            st_err(err, errlen, "%s: tensor '%s' is mapped to shard '%s' but that shard does not "
                   "contain it", path, key, want);
            goto done;
        }
        const char *got = st->files[((const st_entry *)t)->file].path;
        size_t gl = strlen(got), wl = strlen(want);
        if (gl < wl || strcmp(got + gl - wl, want) != 0 || (gl > wl && got[gl - wl - 1] != '/')) {
            st_err(err, errlen, "%s: tensor '%s' is mapped to shard '%s' but is in %s", path, key,
                   want, got);
            goto done;
        }
    }
    rc = 0;
done:
    free(full);
    free(shards);
    json_decref(root);
    return rc;
}

/* ---- public --------------------------------------------------------------------------- */

static int st_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int st_ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int ob_st_open(const char *path, ob_st_t **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!path || !out) return st_err(err, errlen, "ob_st_open: NULL path or out");
    ob_st_t *st = calloc(1, sizeof *st);
    if (!st) return st_err(err, errlen, "%s: out of memory", path);

    char *dirpath = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + 40;
        dirpath = malloc(n);
        if (!dirpath) {
            st_err(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        const char *sep = st_ends_with(path, "/") ? "" : "/";
        /* A single file wins over an index, as transformers picks it first. */
        snprintf(dirpath, n, "%s%smodel.safetensors", path, sep);
        if (!st_is_file(dirpath)) {
            snprintf(dirpath, n, "%s%smodel.safetensors.index.json", path, sep);
            if (!st_is_file(dirpath)) {
                st_err(err, errlen, "%s: directory holds neither model.safetensors nor "
                       "model.safetensors.index.json", path);
                goto fail;
            }
        }
        path = dirpath;
    }

    if (st_ends_with(path, ".json")) {
        if (st_open_index(st, path, err, errlen) != 0) goto fail;
    } else {
        int fi;
        if (st_map_file(st, path, &fi, err, errlen) != 0) goto fail;
        if (st_parse_file(st, fi, err, errlen) != 0) goto fail;
        if (st_build_hash(st, err, errlen) != 0) goto fail;
    }
    free(dirpath);
    *out = st;
    return 0;
fail:
    free(dirpath);
    ob_st_close(st);
    return -1;
}

void ob_st_close(ob_st_t *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_entries; i++) free((char *)st->entries[i].t.name);
    for (int i = 0; i < st->n_files; i++) {
        munmap((void *)st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->entries);
    free(st->files);
    free(st->hash);
    free(st);
}

int64_t ob_st_n_tensors(const ob_st_t *st) {
    return st ? st->n_entries : 0;
}

const ob_st_tensor *ob_st_tensor_at(const ob_st_t *st, int64_t i) {
    if (!st || i < 0 || i >= st->n_entries) return NULL;
    return &st->entries[i].t;
}

int ob_st_to_f32(const ob_st_tensor *t, float *dst, char *err, size_t errlen) {
    if (!t || !dst) return st_err(err, errlen, "ob_st_to_f32: NULL tensor or destination");
    const uint8_t *src = t->data;
    int64_t n = t->n_elements;
    switch (t->dtype) {
    case OB_ST_F32:
        if (n > 0) memcpy(dst, src, (size_t)n * 4);
        return 0;
    case OB_ST_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = ob_fp16_to_fp32(h);
        }
        return 0;
    case OB_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = ob_bf16_to_fp32(h);
        }
        return 0;
    case OB_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    default:
        return st_err(err, errlen, "tensor '%s': dtype %s cannot be converted to f32 "
                      "(only F32, F16, BF16, F64)", t->name, ob_st_dtype_name(t->dtype));
    }
}
