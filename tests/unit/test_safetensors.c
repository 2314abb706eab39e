/* test_safetensors.c — the safetensors reader against files written by hand here.
 *
 * Owns: a tiny writer (header JSON + data built byte by byte, so the reader is not checked
 * against itself), value checks for F32 / F16 / BF16 / F64, a two-shard checkpoint with its
 * index, and every bad-file case the reader must refuse with a message naming the culprit.
 * Scratch files live under ob_test_tmpdir().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/safetensors.h"
#include "test.h"

/* ---- a hand-rolled writer ------------------------------------------------------------- */

typedef struct {
    char json[8192];
    size_t jlen;
    uint8_t data[8192];
    size_t dlen;
} sb_t;

static void sb_init(sb_t *b, const char *metadata_json) {
    b->dlen = 0;
    b->jlen = (size_t)snprintf(b->json, sizeof b->json, "{");
    if (metadata_json)
        b->jlen += (size_t)snprintf(b->json + b->jlen, sizeof b->json - b->jlen,
                                    "\"__metadata__\":%s", metadata_json);
}

/* An entry with explicit (possibly wrong) shape text and offsets; no data appended. */
static void sb_entry(sb_t *b, const char *name, const char *dtype, const char *shape,
                     long long begin, long long end) {
    b->jlen += (size_t)snprintf(b->json + b->jlen, sizeof b->json - b->jlen,
                                "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}",
                                b->json[b->jlen - 1] == '{' ? "" : ",", name, dtype, shape, begin, end);
}

/* A well-formed entry whose bytes are appended to the data section. */
static void sb_add(sb_t *b, const char *name, const char *dtype, const char *shape,
                   const void *bytes, size_t n) {
    sb_entry(b, name, dtype, shape, (long long)b->dlen, (long long)(b->dlen + n));
    if (n) memcpy(b->data + b->dlen, bytes, n);
    b->dlen += n;
}

static void sb_bytes(sb_t *b, const void *bytes, size_t n) {
    memcpy(b->data + b->dlen, bytes, n);
    b->dlen += n;
}

static int write_raw(const char *path, const void *a, size_t na, const void *c, size_t nc) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(a, 1, na, f) == na && (nc == 0 || fwrite(c, 1, nc, f) == nc);
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes header length (u64 little-endian) + header text + data. */
static int write_st_text(const char *path, const char *json, const void *data, size_t dlen) {
    size_t jl = strlen(json);
    uint8_t *buf = malloc(8 + jl);
    if (!buf) return -1;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    int r = write_raw(path, buf, 8 + jl, data, dlen);
    free(buf);
    return r;
}

static int sb_write(sb_t *b, const char *path) {
    snprintf(b->json + b->jlen, sizeof b->json - b->jlen, "}");
    return write_st_text(path, b->json, b->data, b->dlen);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/st_%s", ob_test_tmpdir(), name);
}

/* Opens path expecting failure; checks the message mentions each of want1/want2 (if given). */
static void expect_fail(const char *path, const char *want1, const char *want2) {
    char err[1024] = "";
    ob_st_t *st = (ob_st_t *)1;
    int r = ob_st_open(path, &st, err, sizeof err);
    CHECK_EQ_INT(r, -1);
    CHECK(st == NULL);
    if (r == 0) ob_st_close(st);
    if (want1 && !strstr(err, want1)) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, want1);
    if (want1) CHECK(strstr(err, want1) != NULL);
    if (want2 && !strstr(err, want2)) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, want2);
    if (want2) CHECK(strstr(err, want2) != NULL);
    if (ob_test_verbose) fprintf(stderr, "  (expected) %s\n", err);
}

static void expect_text_fail(const char *name, const char *json, const void *data, size_t dlen,
                             const char *want2) {
    char path[512];
    tmp_path(path, sizeof path, name);
    CHECK_EQ_INT(write_st_text(path, json, data, dlen), 0);
    expect_fail(path, name, want2); /* the file name is always in the message */
}

/* ---- fixtures ------------------------------------------------------------------------- */

static const float f32_vals[6] = {1.0f, -2.0f, 0.5f, 3.25f, -0.0f, 1e-3f};
static const uint16_t f16_bits[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001}; /* 1, -2.5, 65504, 2^-24 */
static const float f16_vals[4] = {1.0f, -2.5f, 65504.0f, 5.9604644775390625e-8f};
static const uint16_t bf16_bits[4] = {0x3F80, 0xC040, 0x4049, 0x0000}; /* 1, -3, 3.140625, 0 */
static const float bf16_vals[4] = {1.0f, -3.0f, 3.140625f, 0.0f};

static void check_values(const ob_st_t *st, const char *name, const float *want, int n) {
    const ob_st_tensor *t = ob_st_find(st, name);
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(t->n_elements, n);
    float got[16] = {0};
    char err[256] = "";
    CHECK_EQ_INT(ob_st_to_f32(t, got, err, sizeof err), 0);
    int same = 1;
    for (int i = 0; i < n; i++) same &= memcmp(&got[i], &want[i], 4) == 0;
    if (!same) fprintf(stderr, "  values of %s differ\n", name);
    CHECK(same);
}

static void test_single_file(void) {
    sb_t b;
    sb_init(&b, "{\"format\":\"pt\"}");
    /* Odd name lengths make the data section start unaligned: the reader must cope. */
    sb_add(&b, "w.f32", "F32", "[2,3]", f32_vals, sizeof f32_vals);
    sb_add(&b, "w.f16", "F16", "[4]", f16_bits, sizeof f16_bits);
    sb_add(&b, "w.bf16", "BF16", "[2,2]", bf16_bits, sizeof bf16_bits);
    double d = -1.5;
    sb_add(&b, "scalar", "F64", "[]", &d, sizeof d);
    int32_t ints[3] = {1, 2, 3};
    sb_add(&b, "ids", "I32", "[3]", ints, sizeof ints);
    sb_add(&b, "empty", "F32", "[0,5]", NULL, 0);
    uint8_t q[4] = {1, 2, 3, 4};
    sb_add(&b, "weird", "Q9_X", "[4]", q, sizeof q); /* unknown dtype: loads, not convertible */
    char path[512];
    tmp_path(path, sizeof path, "single.safetensors");
    CHECK_EQ_INT(sb_write(&b, path), 0);

    char err[512] = "";
    ob_st_t *st = NULL;
    int r = ob_st_open(path, &st, err, sizeof err);
    if (r) fprintf(stderr, "  %s\n", err);
    CHECK_EQ_INT(r, 0);
    if (r) return;
    CHECK_EQ_INT(ob_st_n_tensors(st), 7);

    const ob_st_tensor *t = ob_st_find(st, "w.f32");
    CHECK(t && t->dtype == OB_ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(t && t->size == 24);
    check_values(st, "w.f32", f32_vals, 6);
    t = ob_st_find(st, "w.f16");
    CHECK(t && t->dtype == OB_ST_F16 && t->n_dims == 1 && t->shape[0] == 4 && t->size == 8);
    check_values(st, "w.f16", f16_vals, 4);
    t = ob_st_find(st, "w.bf16");
    CHECK(t && t->dtype == OB_ST_BF16 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 2);
    check_values(st, "w.bf16", bf16_vals, 4);
    t = ob_st_find(st, "scalar");
    CHECK(t && t->dtype == OB_ST_F64 && t->n_dims == 0 && t->n_elements == 1);
    float one = -1.5f;
    check_values(st, "scalar", &one, 1);
    t = ob_st_find(st, "empty");
    CHECK(t && t->n_elements == 0 && t->size == 0 && t->n_dims == 2 && t->shape[1] == 5);

    t = ob_st_find(st, "ids");
    CHECK(t && t->dtype == OB_ST_I32);
    if (t) {
        int32_t got[3];
        memcpy(got, t->data, sizeof got); /* raw bytes exposed as stored */
        CHECK(got[0] == 1 && got[1] == 2 && got[2] == 3);
        float dst[3];
        err[0] = 0;
        CHECK_EQ_INT(ob_st_to_f32(t, dst, err, sizeof err), -1);
        CHECK(strstr(err, "ids") != NULL && strstr(err, "I32") != NULL);
    }
    t = ob_st_find(st, "weird");
    CHECK(t && t->dtype == OB_ST_OTHER && t->size == 4);
    if (t) {
        float dst[4];
        err[0] = 0;
        CHECK_EQ_INT(ob_st_to_f32(t, dst, err, sizeof err), -1);
        CHECK(strstr(err, "weird") != NULL);
    }
    CHECK_STR(ob_st_dtype_name(OB_ST_BF16), "BF16");
    CHECK_STR(ob_st_dtype_name(OB_ST_F8_E4M3), "F8_E4M3");
    CHECK(ob_st_find(st, "nope") == NULL);
    CHECK(ob_st_tensor_at(st, 7) == NULL && ob_st_tensor_at(st, -1) == NULL);

    /* Order: data offset order, whatever the JSON key order. */
    const ob_st_tensor *t0 = ob_st_tensor_at(st, 0), *t1 = ob_st_tensor_at(st, 1);
    CHECK(t0 && t1 && (const uint8_t *)t0->data <= (const uint8_t *)t1->data);
    int found_all = 1;
    for (int64_t i = 0; i < ob_st_n_tensors(st); i++) {
        const ob_st_tensor *ti = ob_st_tensor_at(st, i);
        found_all &= ti && ob_st_find(st, ti->name) == ti;
    }
    CHECK(found_all);
    ob_st_close(st);

    /* A directory holding model.safetensors opens the same file. */
    char dir[512], mpath[600];
    tmp_path(dir, sizeof dir, "dir_single");
    mkdir(dir, 0755);
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", dir);
    CHECK_EQ_INT(sb_write(&b, mpath), 0);
    st = NULL;
    r = ob_st_open(dir, &st, err, sizeof err);
    CHECK_EQ_INT(r, 0);
    if (!r) {
        CHECK_EQ_INT(ob_st_n_tensors(st), 7);
        check_values(st, "w.bf16", bf16_vals, 4);
        ob_st_close(st);
    }

    /* An empty header "{}" is a valid file with no tensors. */
    tmp_path(path, sizeof path, "empty.safetensors");
    CHECK_EQ_INT(write_st_text(path, "{}  ", NULL, 0), 0); /* writers pad the header with spaces */
    st = NULL;
    CHECK_EQ_INT(ob_st_open(path, &st, err, sizeof err), 0);
    CHECK_EQ_INT(ob_st_n_tensors(st), 0);
    CHECK(ob_st_find(st, "x") == NULL);
    ob_st_close(st);
    /* ... padded with a carriage return (fuzz_safetensors: the overlap check indexed a NULL
     * entries array, undefined behaviour that clang's UBSan reports; docs/reliability.md) */
    CHECK_EQ_INT(write_st_text(path, "{}\r", NULL, 0), 0);
    st = NULL;
    CHECK_EQ_INT(ob_st_open(path, &st, err, sizeof err), 0);
    CHECK_EQ_INT(ob_st_n_tensors(st), 0);
    ob_st_close(st);
}

/* Two shards + index. Returns 0 if written. extra_in_2: a tensor name also put in shard 2;
 * map_override: replaces the weight_map text. */
static int write_sharded(const char *dir, const char *extra_in_2, const char *map_override) {
    mkdir(dir, 0755);
    char p[600];
    sb_t b;
    sb_init(&b, NULL);
    sb_add(&b, "a.weight", "F32", "[2,3]", f32_vals, sizeof f32_vals);
    sb_add(&b, "a.bias", "BF16", "[4]", bf16_bits, sizeof bf16_bits);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    if (sb_write(&b, p)) return -1;
    sb_init(&b, "{\"format\":\"pt\"}");
    sb_add(&b, "b.weight", "F16", "[2,2]", f16_bits, sizeof f16_bits);
    if (extra_in_2) sb_add(&b, extra_in_2, "F32", "[1]", f32_vals, 4);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    if (sb_write(&b, p)) return -1;
    const char *map = map_override ? map_override :
        "{\"a.weight\":\"model-00001-of-00002.safetensors\","
        "\"a.bias\":\"model-00001-of-00002.safetensors\","
        "\"b.weight\":\"model-00002-of-00002.safetensors\"}";
    char idx[2048];
    snprintf(idx, sizeof idx, "{\"metadata\":{\"total_size\":48},\"weight_map\":%s}", map);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    return write_raw(p, idx, strlen(idx), NULL, 0);
}

static void test_sharded(void) {
    char dir[512], idx[600], err[1024] = "";
    tmp_path(dir, sizeof dir, "sharded");
    CHECK_EQ_INT(write_sharded(dir, NULL, NULL), 0);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    const char *paths[2] = {idx, dir};
    for (int k = 0; k < 2; k++) {
        ob_st_t *st = NULL;
        int r = ob_st_open(paths[k], &st, err, sizeof err);
        if (r) fprintf(stderr, "  %s\n", err);
        CHECK_EQ_INT(r, 0);
        if (r) continue;
        CHECK_EQ_INT(ob_st_n_tensors(st), 3);
        check_values(st, "a.weight", f32_vals, 6);
        check_values(st, "a.bias", bf16_vals, 4);
        check_values(st, "b.weight", f16_vals, 4);
        const ob_st_tensor *t = ob_st_find(st, "b.weight");
        CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 2);
        /* shard order: shard 1's tensors first */
        CHECK(ob_st_tensor_at(st, 2) == t);
        ob_st_close(st);
    }
}

/* ---- bad files ------------------------------------------------------------------------ */

static void test_bad_files(void) {
    char path[512];
    uint8_t zeros[64] = {0};

    /* truncated before the header length */
    tmp_path(path, sizeof path, "short.safetensors");
    CHECK_EQ_INT(write_raw(path, "\x05\0\0", 3, NULL, 0), 0);
    expect_fail(path, "short.safetensors", "too short");

    /* header length past the end of the file (truncated header) */
    {
        const char *json = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        uint8_t buf[128];
        uint64_t jl = strlen(json);
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(jl >> (8 * i));
        memcpy(buf + 8, json, jl);
        tmp_path(path, sizeof path, "trunc_header.safetensors");
        CHECK_EQ_INT(write_raw(path, buf, 8 + (size_t)jl - 10, NULL, 0), 0);
        expect_fail(path, "trunc_header.safetensors", "header length");
    }

    /* header length huge */
    {
        uint8_t buf[16] = {0, 0, 0, 0, 0, 1, 0, 0, '{', '}'}; /* 2^40 */
        tmp_path(path, sizeof path, "huge.safetensors");
        CHECK_EQ_INT(write_raw(path, buf, sizeof buf, NULL, 0), 0);
        expect_fail(path, "huge.safetensors", "header length");
    }

    /* bad JSON / not an object */
    expect_text_fail("badjson.safetensors", "{\"x\": {\"dtype\": ", NULL, 0, "JSON");
    expect_text_fail("array.safetensors", "[1, 2]", NULL, 0, "not a JSON object");

    /* truncated data: header promises 24 bytes, 12 present */
    expect_text_fail("trunc_data.safetensors",
                     "{\"cut.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                     zeros, 12, "cut.w");

    /* wrong data_offsets size for dtype x shape */
    expect_text_fail("size.safetensors",
                     "{\"bad.size\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}",
                     zeros, 24, "bad.size");
    expect_text_fail("size16.safetensors",
                     "{\"half\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                     zeros, 8, "half");

    /* out of bounds: second tensor past the data section */
    {
        sb_t b;
        sb_init(&b, NULL);
        sb_entry(&b, "ok", "F32", "[6]", 0, 24);
        sb_entry(&b, "past.end", "F32", "[6]", 24, 48);
        sb_bytes(&b, zeros, 24);
        tmp_path(path, sizeof path, "oob.safetensors");
        CHECK_EQ_INT(sb_write(&b, path), 0);
        expect_fail(path, "past.end", "out of bounds");
    }

    /* overlap */
    {
        sb_t b;
        sb_init(&b, NULL);
        sb_entry(&b, "first", "F32", "[6]", 0, 24);
        sb_entry(&b, "second", "F32", "[6]", 16, 40);
        sb_bytes(&b, zeros, 40);
        tmp_path(path, sizeof path, "overlap.safetensors");
        CHECK_EQ_INT(sb_write(&b, path), 0);
        expect_fail(path, "first", "second");
        /* an identical range twice is an overlap too */
        sb_init(&b, NULL);
        sb_entry(&b, "twin1", "F32", "[2]", 0, 8);
        sb_entry(&b, "twin2", "F32", "[2]", 0, 8);
        sb_bytes(&b, zeros, 8);
        tmp_path(path, sizeof path, "overlap2.safetensors");
        CHECK_EQ_INT(sb_write(&b, path), 0);
        expect_fail(path, "twin1", "twin2");
    }

    /* begin > end, negative offsets, non-integer offsets, wrong arity */
    expect_text_fail("rev.safetensors",
                     "{\"rev\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", zeros, 8, "rev");
    expect_text_fail("neg.safetensors",
                     "{\"neg\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", zeros, 8, "neg");
    expect_text_fail("arity.safetensors",
                     "{\"ar\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}}", zeros, 8, "ar");
    expect_text_fail("flt.safetensors",
                     "{\"fl\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4.0]}}", zeros, 8, "fl");

    /* shapes: negative, overflowing element count, too many dims, non-array */
    expect_text_fail("negshape.safetensors",
                     "{\"nshape\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", NULL, 0, "nshape");
    expect_text_fail("ovf.safetensors",
                     "{\"ovf\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
                     NULL, 0, "overflow");
    expect_text_fail("ovf2.safetensors",
                     "{\"ovf2\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}",
                     NULL, 0, "ovf2");
    expect_text_fail("dims.safetensors",
                     "{\"dims9\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                     zeros, 1, "dims9");
    expect_text_fail("noshape.safetensors",
                     "{\"nos\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", zeros, 1, "nos");
    expect_text_fail("dtnum.safetensors",
                     "{\"dtn\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", zeros, 1, "dtn");
    expect_text_fail("notobj.safetensors", "{\"str\":\"hello\"}", NULL, 0, "str");

    /* metadata must be an object of strings */
    expect_text_fail("meta.safetensors", "{\"__metadata__\":{\"n\":5}}", NULL, 0, "__metadata__");

    /* duplicate name inside one header */
    expect_text_fail("dupkey.safetensors",
                     "{\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", zeros, 2, "dup");

    /* not there at all; a directory without a model */
    tmp_path(path, sizeof path, "does_not_exist.safetensors");
    expect_fail(path, "does_not_exist", NULL);
    tmp_path(path, sizeof path, "emptydir");
    mkdir(path, 0755);
    expect_fail(path, "emptydir", "model.safetensors");
}

static void test_bad_index(void) {
    char dir[512], idx[600];

    /* missing shard */
    tmp_path(dir, sizeof dir, "missing_shard");
    CHECK_EQ_INT(write_sharded(dir,
        NULL, "{\"a.weight\":\"model-00001-of-00002.safetensors\","
              "\"a.bias\":\"model-00001-of-00002.safetensors\","
              "\"b.weight\":\"model-00002-of-00002.safetensors\","
              "\"c.weight\":\"model-00003-of-00003.safetensors\"}"), 0);
    expect_fail(dir, "model-00003-of-00003.safetensors", NULL);

    /* duplicate name across shards */
    tmp_path(dir, sizeof dir, "dup_shards");
    CHECK_EQ_INT(write_sharded(dir, "a.weight", NULL), 0);
    expect_fail(dir, "a.weight", "twice");

    /* the index claims a tensor its shard lacks (it lives in the other shard) */
    tmp_path(dir, sizeof dir, "wrong_shard");
    CHECK_EQ_INT(write_sharded(dir, NULL,
        "{\"a.weight\":\"model-00001-of-00002.safetensors\","
        "\"a.bias\":\"model-00001-of-00002.safetensors\","
        "\"b.weight\":\"model-00001-of-00002.safetensors\"}"), 0);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    expect_fail(idx, "b.weight", "model-00001-of-00002.safetensors");

    /* ... or lives in another listed shard */
    tmp_path(dir, sizeof dir, "swapped_shard");
    CHECK_EQ_INT(write_sharded(dir, NULL,
        "{\"a.weight\":\"model-00001-of-00002.safetensors\","
        "\"a.bias\":\"model-00002-of-00002.safetensors\","
        "\"b.weight\":\"model-00002-of-00002.safetensors\"}"), 0);
    expect_fail(dir, "a.bias", "model-00001-of-00002.safetensors");

    /* the index claims a tensor no shard has */
    tmp_path(dir, sizeof dir, "ghost");
    CHECK_EQ_INT(write_sharded(dir, NULL,
        "{\"a.weight\":\"model-00001-of-00002.safetensors\","
        "\"ghost.weight\":\"model-00002-of-00002.safetensors\"}"), 0);
    expect_fail(dir, "ghost.weight", NULL);

    /* a shard path escaping the checkpoint directory */
    tmp_path(dir, sizeof dir, "escape");
    CHECK_EQ_INT(write_sharded(dir, NULL, "{\"a.weight\":\"../single.safetensors\"}"), 0);
    expect_fail(dir, "a.weight", NULL);

    /* no weight_map; bad JSON */
    tmp_path(dir, sizeof dir, "nomap");
    CHECK_EQ_INT(write_sharded(dir, NULL, "{}"), 0);
    expect_fail(dir, "weight_map", NULL);
    tmp_path(dir, sizeof dir, "badidx");
    mkdir(dir, 0755);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    CHECK_EQ_INT(write_raw(idx, "{\"weight_map\": {", 16, NULL, 0), 0);
    expect_fail(idx, "index.json", "JSON");

    /* a bad shard: the message names the shard file and the tensor */
    tmp_path(dir, sizeof dir, "bad_shard");
    CHECK_EQ_INT(write_sharded(dir, NULL, NULL), 0);
    char p[700];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    CHECK_EQ_INT(write_st_text(p, "{\"b.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,6]}}",
                               "\0\0\0\0\0\0\0\0", 8), 0);
    expect_fail(dir, "model-00002-of-00002.safetensors", "b.weight");
}

OB_SUITE(safetensors) {
    test_single_file();
    test_sharded();
    test_bad_files();
    test_bad_index();
}
