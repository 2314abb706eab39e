/* test_gguf.c — GGUF reader/writer: a round trip through every value type (arrays of arrays
 * and of strings included) and several tensor types, the typed getters, the writer's own
 * checks (suite "gguf"); and hand-broken files, one per validation the reader makes, each
 * checked for a clean -1 and a message naming the key or tensor at fault (suite "gguf_bad").
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static const char *tmpfile_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", ob_test_tmpdir(), name);
    return buf;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = p ? fread(p, 1, (size_t)sz, f) : 0;
    fclose(f);
    return p;
}

static int spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static size_t esize(int t) {
    static const size_t s[OB_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t >= 0 && t < OB_GGUF_TYPE_COUNT ? s[t] : 0;
}

/* Deep equality of two values (numeric arrays compared byte for byte). */
static int val_eq(const ob_gguf_value *a, const ob_gguf_value *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case OB_GGUF_INT8: case OB_GGUF_INT16: case OB_GGUF_INT32: case OB_GGUF_INT64: return a->v.i64 == b->v.i64;
    case OB_GGUF_FLOAT32: case OB_GGUF_FLOAT64: return memcmp(&a->v.f64, &b->v.f64, 8) == 0;
    case OB_GGUF_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0 &&
               a->v.str.ptr[a->v.str.len] == 0 && b->v.str.ptr[b->v.str.len] == 0;
    case OB_GGUF_ARRAY:
        if (a->v.arr.elem_type != b->v.arr.elem_type || a->v.arr.n != b->v.arr.n) return 0;
        if (esize(a->v.arr.elem_type))
            return a->v.arr.n == 0 || memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * esize(a->v.arr.elem_type)) == 0;
        for (uint64_t i = 0; i < a->v.arr.n; i++)
            if (!val_eq(&a->v.arr.items[i], &b->v.arr.items[i])) return 0;
        return 1;
    default: return a->v.u64 == b->v.u64;
    }
}

/* ---- the round-trip file ------------------------------------------------------------------ */

static const float rt_f32[24] = {0.f, 1.f, -1.f, 0.5f, 3.25f, -7.75f, 1e-7f, 1e7f, 2, 3, 4, 5,
                                 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, -0.f};
static uint16_t rt_f16[32];
static uint8_t rt_q8[3 * 34];

/* Tensors added with NULL data: bytes derived from the index, so the reader can check them. */
static uint8_t fill_byte(int64_t ti, size_t j) { return (uint8_t)(ti * 31 + j * 7 + 1); }

static int fill_cb(void *ctx, int64_t ti, void *dst, size_t size, char *err, size_t errlen) {
    int *calls = ctx;
    (*calls)++;
    for (size_t j = 0; j < size; j++) ((uint8_t *)dst)[j] = fill_byte(ti, j);
    return 0;
}

static int fill_fail_cb(void *ctx, int64_t ti, void *dst, size_t size, char *err, size_t errlen) {
    snprintf(err, errlen, "quantizer exploded");
    return -1;
}

/* Array of arrays: [[7,8,9] (u32), ["p","q"], [[-5] (i64)], [] (f32)], depth 3. */
static ob_gguf_value nest_u32, nest_str, nest_inner_i64, nest_mid, nest_empty, nest_items[4], nest_strs[2], nest_mid_items[1];
static const uint32_t nest_u32_data[3] = {7, 8, 9};
static const int64_t nest_i64_data[1] = {-5};

static ob_gguf_value make_nested(void) {
    nest_u32 = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    nest_u32.v.arr.elem_type = OB_GGUF_UINT32;
    nest_u32.v.arr.n = 3;
    nest_u32.v.arr.data = nest_u32_data;
    nest_strs[0] = (ob_gguf_value){.type = OB_GGUF_STRING, .v.str = {"p", 1}};
    nest_strs[1] = (ob_gguf_value){.type = OB_GGUF_STRING, .v.str = {"q", 1}};
    nest_str = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    nest_str.v.arr.elem_type = OB_GGUF_STRING;
    nest_str.v.arr.n = 2;
    nest_str.v.arr.items = nest_strs;
    nest_inner_i64 = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    nest_inner_i64.v.arr.elem_type = OB_GGUF_INT64;
    nest_inner_i64.v.arr.n = 1;
    nest_inner_i64.v.arr.data = nest_i64_data;
    nest_mid_items[0] = nest_inner_i64;
    nest_mid = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    nest_mid.v.arr.elem_type = OB_GGUF_ARRAY;
    nest_mid.v.arr.n = 1;
    nest_mid.v.arr.items = nest_mid_items;
    nest_empty = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    nest_empty.v.arr.elem_type = OB_GGUF_FLOAT32;
    nest_items[0] = nest_u32;
    nest_items[1] = nest_str;
    nest_items[2] = nest_mid;
    nest_items[3] = nest_empty;
    ob_gguf_value outer = {.type = OB_GGUF_ARRAY};
    outer.v.arr.elem_type = OB_GGUF_ARRAY;
    outer.v.arr.n = 4;
    outer.v.arr.items = nest_items;
    return outer;
}

static const uint8_t a_u8[3] = {1, 2, 255};
static const int8_t a_i8[3] = {-128, 0, 127};
static const uint16_t a_u16[2] = {0, 65535};
static const int16_t a_i16[2] = {-32768, 32767};
static const uint32_t a_u32[3] = {0, 1, 4294967295u};
static const int32_t a_i32[2] = {INT32_MIN, INT32_MAX};
static const float a_f32[3] = {2.7f, -2.7f, 1e30f};
static const uint8_t a_bool[3] = {1, 0, 1};
static const uint64_t a_u64[2] = {UINT64_MAX, 42};
static const int64_t a_i64[2] = {INT64_MIN, INT64_MAX};
static const double a_f64[2] = {3.141592653589793, -1e-300};
static const char *const a_str[4] = {"alpha", "", "x\0y", "\xc3\xbcn\xc3\xaf"};
static const size_t a_str_len[4] = {5, 0, 3, 5};

/* Expected key order after the writer (t.replaced keeps its first slot). */
static const char *const rt_keys[] = {"general.name", "t.u8", "t.replaced", "t.i8", "t.u16", "t.i16", "t.u32",
    "t.i32", "t.f32", "t.bool", "t.bool0", "t.str", "t.strn", "t.empty", "t.u64", "t.i64", "t.f64",
    "t.arr.u8", "t.arr.i8", "t.arr.u16", "t.arr.i16", "t.arr.u32", "t.arr.i32", "t.arr.f32", "t.arr.bool",
    "t.arr.u64", "t.arr.i64", "t.arr.f64", "t.arr.none", "t.arr.str", "t.arr.nest"};
#define RT_NKV ((int)(sizeof rt_keys / sizeof rt_keys[0]))

typedef struct { const char *name; int type, n_dims; int64_t ne[4]; const void *data; size_t size; } rt_tensor;
static rt_tensor rt_t[5];

static void rt_init(void) {
    for (int i = 0; i < 32; i++) rt_f16[i] = ob_fp32_to_fp16((float)i * 0.25f - 3.f);
    for (size_t i = 0; i < sizeof rt_q8; i++) rt_q8[i] = (uint8_t)(i * 13 + 5);
    rt_t[0] = (rt_tensor){"tok_embd.weight", OB_TYPE_F32, 2, {8, 3, 1, 1}, rt_f32, 96};
    rt_t[1] = (rt_tensor){"blk.0.attn_q.weight", OB_TYPE_F16, 2, {16, 2, 1, 1}, rt_f16, 64};
    rt_t[2] = (rt_tensor){"blk.0.ffn.weight", OB_TYPE_Q8_0, 2, {64, 2, 1, 1}, NULL, 136};
    rt_t[3] = (rt_tensor){"blk.0.norm.weight", OB_TYPE_F32, 4, {4, 1, 2, 3}, NULL, 96};
    rt_t[4] = (rt_tensor){"output.weight", OB_TYPE_Q8_0, 3, {32, 1, 3, 1}, rt_q8, 102};
}

static void rt_set_kv(ob_gguf_writer_t *w) {
    ob_gguf_writer_set_str(w, "general.name", "round trip");
    ob_gguf_writer_set_u8(w, "t.u8", 250);
    ob_gguf_writer_set_u32(w, "t.replaced", 1);
    ob_gguf_writer_set_i8(w, "t.i8", -120);
    ob_gguf_writer_set_u16(w, "t.u16", 65000);
    ob_gguf_writer_set_i16(w, "t.i16", -32000);
    ob_gguf_writer_set_u32(w, "t.u32", 4000000000u);
    ob_gguf_writer_set_i32(w, "t.i32", -2000000000);
    ob_gguf_writer_set_f32(w, "t.f32", 1.5f);
    ob_gguf_writer_set_bool(w, "t.bool", 7);
    ob_gguf_writer_set_bool(w, "t.bool0", 0);
    ob_gguf_writer_set_str(w, "t.str", "hello");
    ob_gguf_writer_set_strn(w, "t.strn", "a\0b", 3);
    ob_gguf_writer_set_str(w, "t.empty", "");
    ob_gguf_writer_set_u64(w, "t.u64", UINT64_MAX);
    ob_gguf_writer_set_i64(w, "t.i64", INT64_MIN);
    ob_gguf_writer_set_f64(w, "t.f64", -2.5e300);
    ob_gguf_writer_set_arr(w, "t.arr.u8", OB_GGUF_UINT8, a_u8, 3);
    ob_gguf_writer_set_arr(w, "t.arr.i8", OB_GGUF_INT8, a_i8, 3);
    ob_gguf_writer_set_arr(w, "t.arr.u16", OB_GGUF_UINT16, a_u16, 2);
    ob_gguf_writer_set_arr(w, "t.arr.i16", OB_GGUF_INT16, a_i16, 2);
    ob_gguf_writer_set_arr(w, "t.arr.u32", OB_GGUF_UINT32, a_u32, 3);
    ob_gguf_writer_set_arr(w, "t.arr.i32", OB_GGUF_INT32, a_i32, 2);
    ob_gguf_writer_set_arr(w, "t.arr.f32", OB_GGUF_FLOAT32, a_f32, 3);
    ob_gguf_writer_set_arr(w, "t.arr.bool", OB_GGUF_BOOL, a_bool, 3);
    ob_gguf_writer_set_arr(w, "t.arr.u64", OB_GGUF_UINT64, a_u64, 2);
    ob_gguf_writer_set_arr(w, "t.arr.i64", OB_GGUF_INT64, a_i64, 2);
    ob_gguf_writer_set_arr(w, "t.arr.f64", OB_GGUF_FLOAT64, a_f64, 2);
    ob_gguf_writer_set_arr(w, "t.arr.none", OB_GGUF_UINT32, NULL, 0);
    ob_gguf_writer_set_arr_str(w, "t.arr.str", a_str, a_str_len, 4);
    ob_gguf_value nest = make_nested();
    ob_gguf_writer_set_value(w, "t.arr.nest", &nest);
    ob_gguf_writer_set_str(w, "t.replaced", "two"); /* replaces in place */
}

static int rt_write(const char *path, int *fill_calls, char *err, size_t errlen) {
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    rt_set_kv(w);
    for (int i = 0; i < 5; i++) {
        int64_t idx = ob_gguf_writer_add_tensor(w, rt_t[i].name, rt_t[i].type, rt_t[i].n_dims, rt_t[i].ne,
                                                rt_t[i].data, err, errlen);
        CHECK_EQ_INT(idx, i);
    }
    int rc = ob_gguf_writer_write(w, path, fill_cb, fill_calls, err, errlen);
    ob_gguf_writer_free(w);
    return rc;
}

static void check_arr(const ob_gguf_t *g, const char *key, int et, const void *data, uint64_t n) {
    const ob_gguf_value *v = ob_gguf_get(g, key);
    CHECK(v != NULL);
    if (!v) return;
    CHECK_EQ_INT(v->type, OB_GGUF_ARRAY);
    CHECK_EQ_INT(v->v.arr.elem_type, et);
    CHECK_EQ_INT(v->v.arr.n, n);
    CHECK(n == 0 || memcmp(v->v.arr.data, data, n * esize(et)) == 0);
}

static void rt_check_values(const ob_gguf_t *g) {
    char err[512];
    int64_t i64 = 0;
    double f = 0;
    int b = -1;
    const char *s = NULL;
    const ob_gguf_value *v;

    CHECK_EQ_INT(ob_gguf_n_kv(g), RT_NKV);
    for (int i = 0; i < RT_NKV && i < ob_gguf_n_kv(g); i++) CHECK_STR(ob_gguf_kv_key(g, i), rt_keys[i]);
    CHECK(ob_gguf_kv_key(g, RT_NKV) == NULL);
    CHECK(ob_gguf_kv_value(g, -1) == NULL);
    CHECK(ob_gguf_get(g, "absent") == NULL);

    CHECK_EQ_INT(ob_gguf_get_str(g, "general.name", &s, err, sizeof err), 1);
    CHECK_STR(s, "round trip");
    CHECK_EQ_INT(ob_gguf_get_str(g, "t.replaced", &s, err, sizeof err), 1);
    CHECK_STR(s, "two");
    v = ob_gguf_get(g, "t.u8");
    CHECK(v && v->type == OB_GGUF_UINT8 && v->v.u64 == 250);
    v = ob_gguf_get(g, "t.i8");
    CHECK(v && v->type == OB_GGUF_INT8 && v->v.i64 == -120);
    v = ob_gguf_get(g, "t.u16");
    CHECK(v && v->type == OB_GGUF_UINT16 && v->v.u64 == 65000);
    v = ob_gguf_get(g, "t.i16");
    CHECK(v && v->type == OB_GGUF_INT16 && v->v.i64 == -32000);
    v = ob_gguf_get(g, "t.u32");
    CHECK(v && v->type == OB_GGUF_UINT32 && v->v.u64 == 4000000000u);
    v = ob_gguf_get(g, "t.i32");
    CHECK(v && v->type == OB_GGUF_INT32 && v->v.i64 == -2000000000);
    v = ob_gguf_get(g, "t.f32");
    CHECK(v && v->type == OB_GGUF_FLOAT32 && v->v.f64 == 1.5);
    v = ob_gguf_get(g, "t.bool");
    CHECK(v && v->type == OB_GGUF_BOOL && v->v.u64 == 1);
    v = ob_gguf_get(g, "t.u64");
    CHECK(v && v->type == OB_GGUF_UINT64 && v->v.u64 == UINT64_MAX);
    v = ob_gguf_get(g, "t.i64");
    CHECK(v && v->type == OB_GGUF_INT64 && v->v.i64 == INT64_MIN);
    v = ob_gguf_get(g, "t.f64");
    CHECK(v && v->type == OB_GGUF_FLOAT64 && v->v.f64 == -2.5e300);
    v = ob_gguf_get(g, "t.strn");
    CHECK(v && v->type == OB_GGUF_STRING && v->v.str.len == 3 && memcmp(v->v.str.ptr, "a\0b", 4) == 0);
    v = ob_gguf_get(g, "t.empty");
    CHECK(v && v->type == OB_GGUF_STRING && v->v.str.len == 0 && v->v.str.ptr && v->v.str.ptr[0] == 0);

    /* typed getters: lossless widening, refusals name key and both types */
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.u8", &i64, err, sizeof err), 1);
    CHECK_EQ_INT(i64, 250);
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.i16", &i64, err, sizeof err), 1);
    CHECK_EQ_INT(i64, -32000);
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.u32", &i64, err, sizeof err), 1);
    CHECK_EQ_INT(i64, 4000000000LL);
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.i64", &i64, err, sizeof err), 1);
    CHECK(i64 == INT64_MIN);
    i64 = 77;
    err[0] = 0;
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.u64", &i64, err, sizeof err), -1);
    CHECK(strstr(err, "'t.u64'") && strstr(err, "uint64") && strstr(err, "int64"));
    CHECK_EQ_INT(i64, 77);
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.f32", &i64, err, sizeof err), -1);
    CHECK(strstr(err, "'t.f32'") && strstr(err, "float32"));
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.bool", &i64, err, sizeof err), -1);
    CHECK_EQ_INT(ob_gguf_get_i64(g, "t.str", &i64, err, sizeof err), -1);
    CHECK(strstr(err, "'t.str'") && strstr(err, "string") && strstr(err, "int64"));
    CHECK_EQ_INT(ob_gguf_get_i64(g, "absent", &i64, err, sizeof err), 0);
    CHECK_EQ_INT(i64, 77);

    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.f32", &f, err, sizeof err), 1);
    CHECK(f == 1.5);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.f64", &f, err, sizeof err), 1);
    CHECK(f == -2.5e300);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.u32", &f, err, sizeof err), 1);
    CHECK(f == 4000000000.0);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.i8", &f, err, sizeof err), 1);
    CHECK(f == -120.0);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.i64", &f, err, sizeof err), 1); /* -2^63 is exact */
    CHECK(f == -9223372036854775808.0);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.u64", &f, err, sizeof err), -1); /* 2^64-1 is not */
    CHECK(strstr(err, "'t.u64'") != NULL);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "t.bool", &f, err, sizeof err), -1);
    CHECK_EQ_INT(ob_gguf_get_f64(g, "absent", &f, err, sizeof err), 0);

    CHECK_EQ_INT(ob_gguf_get_bool(g, "t.bool", &b, err, sizeof err), 1);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(ob_gguf_get_bool(g, "t.bool0", &b, err, sizeof err), 1);
    CHECK_EQ_INT(b, 0);
    CHECK_EQ_INT(ob_gguf_get_bool(g, "t.u8", &b, err, sizeof err), -1);
    CHECK(strstr(err, "'t.u8'") && strstr(err, "uint8") && strstr(err, "bool"));
    CHECK_EQ_INT(ob_gguf_get_str(g, "t.u32", &s, err, sizeof err), -1);
    CHECK(strstr(err, "'t.u32'") && strstr(err, "uint32") && strstr(err, "string"));

    check_arr(g, "t.arr.u8", OB_GGUF_UINT8, a_u8, 3);
    check_arr(g, "t.arr.i8", OB_GGUF_INT8, a_i8, 3);
    check_arr(g, "t.arr.u16", OB_GGUF_UINT16, a_u16, 2);
    check_arr(g, "t.arr.i16", OB_GGUF_INT16, a_i16, 2);
    check_arr(g, "t.arr.u32", OB_GGUF_UINT32, a_u32, 3);
    check_arr(g, "t.arr.i32", OB_GGUF_INT32, a_i32, 2);
    check_arr(g, "t.arr.f32", OB_GGUF_FLOAT32, a_f32, 3);
    check_arr(g, "t.arr.bool", OB_GGUF_BOOL, a_bool, 3);
    check_arr(g, "t.arr.u64", OB_GGUF_UINT64, a_u64, 2);
    check_arr(g, "t.arr.i64", OB_GGUF_INT64, a_i64, 2);
    check_arr(g, "t.arr.f64", OB_GGUF_FLOAT64, a_f64, 2);
    check_arr(g, "t.arr.none", OB_GGUF_UINT32, NULL, 0);

    /* element accessors */
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u8"), 2), 255);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.i8"), 0), -128);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u16"), 1), 65535);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.i16"), 0), -32768);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u32"), 2), 4294967295LL);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.i32"), 0), INT32_MIN);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.f32"), 1), -2);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.bool"), 1), 0);
    CHECK(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u64"), 0) == INT64_MAX); /* saturates */
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u64"), 1), 42);
    CHECK(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.i64"), 0) == INT64_MIN);
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.u8"), 3), 0); /* out of range */
    CHECK_EQ_INT(ob_gguf_arr_i64(ob_gguf_get(g, "t.arr.str"), 0), 0); /* not numeric */
    CHECK(ob_gguf_arr_f64(ob_gguf_get(g, "t.arr.f32"), 0) == (double)2.7f);
    CHECK(ob_gguf_arr_f64(ob_gguf_get(g, "t.arr.f64"), 0) == 3.141592653589793);
    CHECK(ob_gguf_arr_f64(ob_gguf_get(g, "t.arr.i32"), 1) == (double)INT32_MAX);
    CHECK(ob_gguf_arr_f64(ob_gguf_get(g, "t.arr.u16"), 1) == 65535.0);

    v = ob_gguf_get(g, "t.arr.str");
    CHECK(v && v->type == OB_GGUF_ARRAY && v->v.arr.elem_type == OB_GGUF_STRING && v->v.arr.n == 4);
    if (v && v->v.arr.n == 4 && v->v.arr.items)
        for (int i = 0; i < 4; i++) {
            const ob_gguf_value *it = &v->v.arr.items[i];
            CHECK(it->type == OB_GGUF_STRING && it->v.str.len == a_str_len[i] &&
                  memcmp(it->v.str.ptr, a_str[i], a_str_len[i]) == 0 && it->v.str.ptr[a_str_len[i]] == 0);
        }

    v = ob_gguf_get(g, "t.arr.nest");
    ob_gguf_value want = make_nested();
    CHECK(v && val_eq(v, &want));
    if (v && v->v.arr.n == 4 && v->v.arr.items) { /* and by hand, so val_eq is not the only judge */
        const ob_gguf_value *mid = &v->v.arr.items[2];
        CHECK(mid->type == OB_GGUF_ARRAY && mid->v.arr.elem_type == OB_GGUF_ARRAY && mid->v.arr.n == 1);
        if (mid->v.arr.n == 1) CHECK_EQ_INT(ob_gguf_arr_i64(&mid->v.arr.items[0], 0), -5);
        CHECK_EQ_INT(ob_gguf_arr_i64(&v->v.arr.items[0], 2), 9);
        CHECK_STR(v->v.arr.items[1].v.arr.items[1].v.str.ptr, "q");
        CHECK_EQ_INT(v->v.arr.items[3].v.arr.n, 0);
    }
}

static void rt_check_tensors(const ob_gguf_t *g, size_t align) {
    CHECK_EQ_INT(ob_gguf_n_tensors(g), 5);
    for (int i = 0; i < 5 && i < ob_gguf_n_tensors(g); i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        CHECK_STR(t->name, rt_t[i].name);
        CHECK(ob_gguf_find_tensor(g, rt_t[i].name) == t);
        CHECK_EQ_INT(t->type, rt_t[i].type);
        CHECK_EQ_INT(t->n_dims, rt_t[i].n_dims);
        for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], rt_t[i].ne[d]);
        CHECK_EQ_INT(t->size, rt_t[i].size);
        CHECK_EQ_INT(t->offset % align, 0);
        CHECK_EQ_INT((uintptr_t)t->data % align, 0); /* the mapping is page-aligned */
        if (rt_t[i].data) {
            CHECK(memcmp(t->data, rt_t[i].data, t->size) == 0);
        } else {
            size_t bad = 0;
            for (size_t j = 0; j < t->size; j++) bad += ((const uint8_t *)t->data)[j] != fill_byte(i, j);
            CHECK_EQ_INT(bad, 0);
        }
    }
    CHECK(ob_gguf_tensor_at(g, 5) == NULL);
    CHECK(ob_gguf_find_tensor(g, "absent") == NULL);
}

static int skip_arrays(const char *key) { return strncmp(key, "t.arr.", 6) == 0; }

static void test_roundtrip(void) {
    char path[512], path2[512], path3[512], tmp[600], err[512] = "";
    int calls = 0;
    rt_init();
    tmpfile_path(path, sizeof path, "rt.gguf");
    int rc = rt_write(path, &calls, err, sizeof err);
    if (rc) fprintf(stderr, "  write: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(calls, 2); /* only the tensors added without data */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!file_exists(tmp));

    ob_gguf_t *g = NULL;
    rc = ob_gguf_open(path, &g, err, sizeof err);
    if (rc) fprintf(stderr, "  open: %s\n", err);
    CHECK_EQ_INT(rc, 0);
    if (!g) return;
    CHECK_EQ_INT(ob_gguf_version(g), 3);
    CHECK_EQ_INT(ob_gguf_alignment(g), 32);
    CHECK_EQ_INT(ob_gguf_file_size(g) % 32, 0);
    rt_check_values(g);
    rt_check_tensors(g, 32);

    /* the same file through a caller buffer */
    size_t n = 0;
    uint8_t *bytes = slurp(path, &n);
    CHECK_EQ_INT(n, ob_gguf_file_size(g));
    ob_gguf_t *gb = NULL;
    CHECK_EQ_INT(ob_gguf_open_buffer(bytes, n, &gb, err, sizeof err), 0);
    if (gb) {
        CHECK_EQ_INT(ob_gguf_n_kv(gb), RT_NKV);
        CHECK(ob_gguf_tensor_at(gb, 0)->data >= (const void *)bytes &&
              ob_gguf_tensor_at(gb, 0)->data < (const void *)(bytes + n)); /* not copied */
        ob_gguf_close(gb);
    }

    /* copy_kv + the same tensors from the reader reproduces the file byte for byte */
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_copy_kv(w, g, NULL);
    for (int i = 0; i < 5; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, err, sizeof err), i);
    }
    tmpfile_path(path2, sizeof path2, "rt_copy.gguf");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path2, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    size_t n2 = 0;
    uint8_t *bytes2 = slurp(path2, &n2);
    CHECK_EQ_INT(n2, n);
    CHECK(bytes2 && n2 == n && memcmp(bytes, bytes2, n) == 0);
    free(bytes2);

    /* copy_kv with a skip function: deep copies survive the source being closed */
    w = ob_gguf_writer_new();
    ob_gguf_writer_copy_kv(w, g, skip_arrays);
    ob_gguf_writer_copy_kv(w, g, NULL); /* again: every key replaced in place, order kept */
    tmpfile_path(path3, sizeof path3, "rt_skip.gguf");
    ob_gguf_t *g3 = NULL;
    CHECK_EQ_INT(ob_gguf_writer_write(w, path3, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    CHECK_EQ_INT(ob_gguf_open(path3, &g3, err, sizeof err), 0);
    if (g3) {
        CHECK_EQ_INT(ob_gguf_n_kv(g3), RT_NKV);
        CHECK_EQ_INT(ob_gguf_n_tensors(g3), 0);
        CHECK_STR(ob_gguf_kv_key(g3, 0), "general.name");
        CHECK_STR(ob_gguf_kv_key(g3, 17), "t.arr.u8"); /* skipped first time, appended second */
        for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) {
            const ob_gguf_value *a = ob_gguf_kv_value(g, i), *b = ob_gguf_get(g3, ob_gguf_kv_key(g, i));
            CHECK(b && val_eq(a, b));
        }
        ob_gguf_close(g3);
    }
    w = ob_gguf_writer_new();
    ob_gguf_writer_copy_kv(w, g, skip_arrays);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path3, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    CHECK_EQ_INT(ob_gguf_open(path3, &g3, err, sizeof err), 0);
    if (g3) {
        CHECK_EQ_INT(ob_gguf_n_kv(g3), 17);
        CHECK(ob_gguf_get(g3, "t.arr.nest") == NULL);
        CHECK(ob_gguf_get(g3, "t.strn") && val_eq(ob_gguf_get(g3, "t.strn"), ob_gguf_get(g, "t.strn")));
        ob_gguf_close(g3);
    }
    free(bytes);
    ob_gguf_close(g);
}

/* general.alignment = 64: offsets, the data start and the file end land on 64, padding is zero. */
static void test_alignment64(void) {
    char path[512], err[512] = "";
    static const float one[3] = {1, 2, 3};
    static uint8_t q[34 * 3];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(0x80 | i);
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "general.architecture", "test");
    ob_gguf_writer_set_u32(w, "general.alignment", 64);
    int64_t ne1[1] = {3}, ne2[2] = {32, 3};
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "a", OB_TYPE_F32, 1, ne1, one, err, sizeof err), 0);
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "b", OB_TYPE_Q8_0, 2, ne2, q, err, sizeof err), 1);
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "c", OB_TYPE_F32, 1, ne1, one, err, sizeof err), 2);
    tmpfile_path(path, sizeof path, "align64.gguf");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), 0);
    if (!g) return;
    CHECK_EQ_INT(ob_gguf_alignment(g), 64);
    CHECK_EQ_INT(ob_gguf_file_size(g) % 64, 0);
    const uint8_t *base = ob_gguf_tensor_at(g, 0)->data;
    CHECK_EQ_INT(ob_gguf_tensor_at(g, 0)->offset, 0);
    CHECK_EQ_INT(ob_gguf_tensor_at(g, 1)->offset, 64);
    CHECK_EQ_INT(ob_gguf_tensor_at(g, 2)->offset, 192);
    CHECK(memcmp(ob_gguf_tensor_at(g, 1)->data, q, sizeof q) == 0);
    size_t nonzero = 0;
    const uint8_t *end = base + 256;
    for (int i = 0; i < 3; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
        const uint8_t *p = (const uint8_t *)t->data + t->size;
        const uint8_t *next = i < 2 ? ob_gguf_tensor_at(g, i + 1)->data : end;
        for (; p < next; p++) nonzero += *p != 0;
    }
    CHECK_EQ_INT(nonzero, 0);
    ob_gguf_close(g);
}

/* Nesting at exactly the limit (8) round-trips; the writer refuses 9. Empty files work. */
static void test_nesting_and_empty(void) {
    char path[512], err[512] = "";
    ob_gguf_value lv[10];
    static const uint8_t leaf[2] = {4, 2};
    lv[0] = (ob_gguf_value){.type = OB_GGUF_ARRAY};
    lv[0].v.arr.elem_type = OB_GGUF_UINT8;
    lv[0].v.arr.n = 2;
    lv[0].v.arr.data = leaf;
    for (int i = 1; i < 10; i++) {
        lv[i] = (ob_gguf_value){.type = OB_GGUF_ARRAY};
        lv[i].v.arr.elem_type = OB_GGUF_ARRAY;
        lv[i].v.arr.n = 1;
        lv[i].v.arr.items = &lv[i - 1];
    }
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_value(w, "deep8", &lv[7]);
    tmpfile_path(path, sizeof path, "deep.gguf");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), 0);
    if (g) {
        const ob_gguf_value *v = ob_gguf_get(g, "deep8");
        CHECK(v && val_eq(v, &lv[7]));
        for (int d = 0; v && d < 7; d++) v = v->v.arr.items;
        CHECK(v && v->v.arr.elem_type == OB_GGUF_UINT8 && ob_gguf_arr_i64(v, 1) == 2);
        ob_gguf_close(g);
    }
    w = ob_gguf_writer_new();
    ob_gguf_writer_set_value(w, "deep9", &lv[8]);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "'deep9'") && strstr(err, "nested"));
    ob_gguf_writer_free(w);

    w = ob_gguf_writer_new();
    tmpfile_path(path, sizeof path, "empty.gguf");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), 0);
    if (g) {
        CHECK_EQ_INT(ob_gguf_n_kv(g), 0);
        CHECK_EQ_INT(ob_gguf_n_tensors(g), 0);
        CHECK_EQ_INT(ob_gguf_file_size(g), 32); /* 24-byte header padded to 32, as llama.cpp writes */
        ob_gguf_close(g);
    }
}

/* The writer's own refusals: each names the tensor or key, and leaves no file behind. */
static void test_writer_errors(void) {
    char path[512], tmp[600], err[512];
    static const float d[64];
    int64_t ne[4] = {32, 2, 1, 1}, bad[2] = {33, 1}, zero[2] = {32, 0};
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.q", OB_TYPE_Q8_0, 2, bad, d, err, sizeof err), -1);
    CHECK(strstr(err, "'w.q'") && strstr(err, "block size"));
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.z", OB_TYPE_F32, 2, zero, d, err, sizeof err), -1);
    CHECK(strstr(err, "'w.z'") && strstr(err, "ne[1]"));
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.d", OB_TYPE_F32, 5, ne, d, err, sizeof err), -1);
    CHECK(strstr(err, "'w.d'") && strstr(err, "n_dims"));
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.d", OB_TYPE_F32, 0, ne, d, err, sizeof err), -1);
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.t", 4, 2, ne, d, err, sizeof err), -1);
    CHECK(strstr(err, "'w.t'") && strstr(err, "unknown tensor type"));
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "", OB_TYPE_F32, 2, ne, d, err, sizeof err), -1);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, longname, OB_TYPE_F32, 2, ne, d, err, sizeof err), -1);
    longname[63] = 0;
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, longname, OB_TYPE_F32, 1, ne, d, err, sizeof err), 0);
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.ok", OB_TYPE_F32, 2, ne, NULL, err, sizeof err), 1);
    CHECK_EQ_INT(ob_gguf_writer_add_tensor(w, "w.ok", OB_TYPE_F32, 2, ne, d, err, sizeof err), -1);
    CHECK(strstr(err, "'w.ok'") && strstr(err, "twice"));

    tmpfile_path(path, sizeof path, "werr.gguf");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), -1); /* w.ok has no data */
    CHECK(strstr(err, "'w.ok'") && strstr(err, "fill"));
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, fill_fail_cb, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "'w.ok'") && strstr(err, "quantizer exploded"));
    CHECK(!file_exists(path) && !file_exists(tmp));
    int calls = 0;
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, fill_cb, &calls, err, sizeof err), 0);
    CHECK_EQ_INT(calls, 1);
    CHECK(file_exists(path) && !file_exists(tmp));

    /* general.alignment must be a uint32 power of two */
    ob_gguf_writer_set_u64(w, "general.alignment", 64);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, fill_cb, &calls, err, sizeof err), -1);
    CHECK(strstr(err, "'general.alignment'") && strstr(err, "uint32"));
    ob_gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, fill_cb, &calls, err, sizeof err), -1);
    CHECK(strstr(err, "'general.alignment'") && strstr(err, "power of two"));
    ob_gguf_writer_set_u32(w, "general.alignment", 16);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, fill_cb, &calls, err, sizeof err), 0);
    ob_gguf_writer_free(w);

    /* bools are written as 0/1 whatever nonzero byte the caller used */
    static const uint8_t bools[3] = {0, 5, 255};
    w = ob_gguf_writer_new();
    ob_gguf_writer_set_arr(w, "w.bools", OB_GGUF_BOOL, bools, 3);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), 0);
    if (g) {
        const ob_gguf_value *v = ob_gguf_get(g, "w.bools");
        CHECK(v && v->v.arr.n == 3 && memcmp(v->v.arr.data, "\x00\x01\x01", 3) == 0);
        ob_gguf_close(g);
    }

    /* a bad setter is remembered and reported by write */
    w = ob_gguf_writer_new();
    ob_gguf_writer_set_arr(w, "w.strs", OB_GGUF_STRING, d, 2);
    ob_gguf_writer_set_u32(w, "fine", 1);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "'w.strs'") != NULL);
    ob_gguf_writer_free(w);
    w = ob_gguf_writer_new();
    ob_gguf_value badv = {.type = OB_GGUF_UINT8, .v.u64 = 300};
    ob_gguf_writer_set_value(w, "w.u8", &badv);
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "'w.u8'") && strstr(err, "300"));
    ob_gguf_writer_free(w);
    w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "", "x");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "empty") != NULL);
    ob_gguf_writer_free(w);
    ob_gguf_writer_free(NULL);

    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.gguf", ob_test_tmpdir());
    w = ob_gguf_writer_new();
    CHECK_EQ_INT(ob_gguf_writer_write(w, nodir, NULL, NULL, err, sizeof err), -1);
    CHECK(strstr(err, "no/such/dir") != NULL);
    ob_gguf_writer_free(w);
}

OB_SUITE(gguf) {
    test_roundtrip();
    test_alignment64();
    test_nesting_and_empty();
    test_writer_errors();
}

/* ---- hand-broken files -------------------------------------------------------------------- */

typedef struct { uint8_t *p; size_t n, cap; } bb; /* byte builder */

static void bb_put(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t x) { bb_put(b, &x, 1); }
static void bb_u32(bb *b, uint32_t x) { bb_put(b, &x, 4); }
static void bb_u64(bb *b, uint64_t x) { bb_put(b, &x, 8); }
static void bb_str(bb *b, const char *s) { bb_u64(b, strlen(s)); bb_put(b, s, strlen(s)); }
static void bb_hdr(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_t);
    bb_u64(b, n_kv);
}
static void bb_key(bb *b, const char *key, uint32_t type) { bb_str(b, key); bb_u32(b, type); }
static void bb_kv_u32(bb *b, const char *key, uint32_t v) { bb_key(b, key, OB_GGUF_UINT32); bb_u32(b, v); }
static void bb_kv_str(bb *b, const char *key, const char *v) { bb_key(b, key, OB_GGUF_STRING); bb_str(b, v); }
static void bb_ti(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_put(b, &ne[d], 8);
    bb_u32(b, type);
    bb_u64(b, off);
}
/* Pads to align and appends n data bytes. */
static void bb_data(bb *b, size_t align, size_t n) {
    while (b->n % align) bb_u8(b, 0);
    for (size_t i = 0; i < n; i++) bb_u8(b, (uint8_t)i);
}

/* Opens b from an exact-size heap copy (so a sanitizer sees any over-read), expects -1, a
 * NULL handle and every needle in the message; frees b. */
static void expect_bad_(bb *b, const char *n1, const char *n2, int line) {
    uint8_t *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    ob_gguf_t *g = (ob_gguf_t *)copy;
    char err[512] = "";
    int rc = ob_gguf_open_buffer(copy, b->n, &g, err, sizeof err);
    int ok = rc == -1 && g == NULL && strncmp(err, "gguf: ", 6) == 0 && strstr(err, n1) && (!n2 || strstr(err, n2));
    if (!ok) fprintf(stderr, "  test_gguf.c:%d: rc %d, error \"%s\", wanted \"%s\"%s%s\n", line, rc, err, n1,
                     n2 ? " and " : "", n2 ? n2 : "");
    CHECK(ok);
    if (rc == 0) ob_gguf_close(g);
    free(copy);
    free(b->p);
    *b = (bb){0};
}
#define EXPECT_BAD(b, n1, n2) expect_bad_(&(b), n1, n2, __LINE__)

static void expect_good_(bb *b, int line) {
    ob_gguf_t *g = NULL;
    char err[512] = "";
    int rc = ob_gguf_open_buffer(b->p, b->n, &g, err, sizeof err);
    if (rc) fprintf(stderr, "  test_gguf.c:%d: unexpected error \"%s\"\n", line, err);
    CHECK_EQ_INT(rc, 0);
    ob_gguf_close(g);
    free(b->p);
    *b = (bb){0};
}
#define EXPECT_GOOD(b) expect_good_(&(b), __LINE__)

static const int64_t ne8[1] = {8};

/* A valid file of two f32 [8] tensors, 'a' at 0 and 'b' at 32; the last byte of the file is
 * the last byte of 'b', so any truncation must fail. */
static void base_file(bb *b) {
    bb_hdr(b, 3, 2, 2);
    bb_kv_str(b, "general.name", "x");
    bb_kv_u32(b, "general.alignment", 32);
    bb_ti(b, "a", 1, ne8, OB_TYPE_F32, 0);
    bb_ti(b, "b", 1, ne8, OB_TYPE_F32, 32);
    bb_data(b, 32, 64);
}

/* One tensor 'w' with the given shape/type/offset, data of n bytes. */
static void one_tensor(bb *b, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off, size_t n) {
    bb_hdr(b, 3, 1, 1);
    bb_kv_str(b, "general.name", "x");
    bb_ti(b, "w", n_dims, ne, type, off);
    bb_data(b, 32, n);
}

static void test_bad_header(void) {
    bb b = {0};
    base_file(&b);
    EXPECT_GOOD(b);
    base_file(&b);
    memcpy(b.p, "GGUX", 4);
    EXPECT_BAD(b, "magic", "GGUX");
    base_file(&b);
    b.p[4] = 1;
    EXPECT_BAD(b, "version 1 (GGUFv1)", "not supported");
    base_file(&b);
    b.p[4] = 4;
    EXPECT_BAD(b, "version 4", "not supported");
    base_file(&b);
    b.p[4] = 0;
    EXPECT_BAD(b, "version 0", NULL);
    base_file(&b);
    b.p[4] = 0, b.p[7] = 3; /* a big-endian v3 file */
    EXPECT_BAD(b, "byte-swapped", NULL);
    bb_put(&b, "GGU", 3);
    EXPECT_BAD(b, "too short", NULL);
    bb_hdr(&b, 2, 0, 0); /* v2 with nothing in it is fine */
    EXPECT_GOOD(b);
    bb_hdr(&b, 3, 0, (uint64_t)1 << 40);
    EXPECT_BAD(b, "n_kv", "cannot fit");
    bb_hdr(&b, 3, (uint64_t)1 << 40, 0);
    EXPECT_BAD(b, "n_tensors", "cannot fit");
    bb_hdr(&b, 3, UINT64_MAX, UINT64_MAX);
    EXPECT_BAD(b, "n_kv", NULL);
    /* n_tensors fits the file but not what is left after the metadata */
    bb_hdr(&b, 3, 2, 1);
    bb_kv_str(&b, "general.name", "a long enough value to leave room for two tensor infos.......");
    EXPECT_BAD(b, "n_tensors 2", "after the metadata");
}

static void test_bad_kv(void) {
    bb b = {0};
    /* huge key length, huge string value length */
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, (uint64_t)1 << 62);
    bb_put(&b, "keykeykeykeykey", 15);
    EXPECT_BAD(b, "kv 0", "length 4611686018427387904");
    bb_hdr(&b, 3, 0, 2);
    bb_kv_u32(&b, "first", 1);
    bb_u64(&b, UINT64_MAX);
    bb_put(&b, "keykeykeykeykey", 15);
    EXPECT_BAD(b, "after key 'first'", "exceeds");
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "tokenizer.chat_template", OB_GGUF_STRING);
    bb_u64(&b, (uint64_t)1 << 61);
    bb_put(&b, "{{ x }}", 7);
    EXPECT_BAD(b, "key 'tokenizer.chat_template'", "exceeds");
    /* empty key, NUL in a key, duplicate key */
    bb_hdr(&b, 3, 0, 1);
    bb_kv_u32(&b, "", 1);
    EXPECT_BAD(b, "kv 0", "empty");
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, OB_GGUF_UINT8);
    bb_u8(&b, 1);
    EXPECT_BAD(b, "'a\\x00b'", "NUL");
    bb_hdr(&b, 3, 0, 3);
    bb_kv_u32(&b, "general.file_type", 1);
    bb_kv_u32(&b, "other", 2);
    bb_kv_str(&b, "general.file_type", "again");
    EXPECT_BAD(b, "duplicate key 'general.file_type'", NULL);
    /* unknown value types */
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "weird", 13);
    bb_u64(&b, 0);
    EXPECT_BAD(b, "key 'weird'", "unknown value type 13");
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "weird", 0xffffffffu);
    bb_u64(&b, 0);
    EXPECT_BAD(b, "key 'weird'", "unknown value type");
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "weird.arr", OB_GGUF_ARRAY);
    bb_u32(&b, 99);
    bb_u64(&b, 1);
    bb_u64(&b, 0);
    EXPECT_BAD(b, "key 'weird.arr'", "unknown array element type 99");
    /* bools other than 0/1 */
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "flag", OB_GGUF_BOOL);
    bb_u8(&b, 2);
    EXPECT_BAD(b, "key 'flag'", "bool");
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "flags", OB_GGUF_ARRAY);
    bb_u32(&b, OB_GGUF_BOOL);
    bb_u64(&b, 3);
    bb_put(&b, "\x01\x00\x05", 3);
    EXPECT_BAD(b, "key 'flags'", "element 2");
    /* huge array counts: refused before any allocation */
    static const uint32_t et[4] = {OB_GGUF_UINT8, OB_GGUF_UINT64, OB_GGUF_STRING, OB_GGUF_ARRAY};
    for (int i = 0; i < 4; i++) {
        bb_hdr(&b, 3, 0, 1);
        bb_key(&b, "tokenizer.ggml.tokens", OB_GGUF_ARRAY);
        bb_u32(&b, et[i]);
        bb_u64(&b, (uint64_t)1 << 60);
        bb_put(&b, "0123456789abcdef0123456789abcdef", 32);
        EXPECT_BAD(b, "key 'tokenizer.ggml.tokens'", "1152921504606846976");
    }
    /* a string element longer than the file */
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "tokenizer.ggml.merges", OB_GGUF_ARRAY);
    bb_u32(&b, OB_GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "a b");
    bb_u64(&b, 1000);
    bb_put(&b, "c d", 3);
    EXPECT_BAD(b, "key 'tokenizer.ggml.merges'", "length 1000");
    /* nesting: 8 levels are fine, 9 are not */
    for (int depth = 8; depth <= 9; depth++) {
        bb_hdr(&b, 3, 0, 1);
        bb_key(&b, "deep", OB_GGUF_ARRAY);
        for (int d = 1; d < depth; d++) { bb_u32(&b, OB_GGUF_ARRAY); bb_u64(&b, 1); }
        bb_u32(&b, OB_GGUF_UINT8);
        bb_u64(&b, 1);
        bb_u8(&b, 7);
        if (depth == 8) EXPECT_GOOD(b);
        else EXPECT_BAD(b, "key 'deep'", "nested more than 8");
    }
    /* hostile bytes in a key are shown escaped, not raw */
    bb_hdr(&b, 3, 0, 2);
    bb_kv_u32(&b, "\x1b[31mred", 1);
    bb_kv_u32(&b, "\x1b[31mred", 1);
    EXPECT_BAD(b, "duplicate key '\\x1b[31mred'", NULL);
}

static void test_bad_alignment(void) {
    bb b = {0};
    static const uint32_t bad[2] = {0, 3};
    for (int i = 0; i < 2; i++) {
        bb_hdr(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", bad[i]);
        EXPECT_BAD(b, "'general.alignment'", "power of two");
    }
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "general.alignment", OB_GGUF_UINT64);
    bb_u64(&b, 32);
    EXPECT_BAD(b, "'general.alignment'", "uint64");
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "general.alignment", OB_GGUF_INT32);
    bb_u32(&b, 32);
    EXPECT_BAD(b, "'general.alignment'", "must be uint32");
    /* a power of two larger than the file pushes the data section past its end */
    bb_hdr(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 1u << 20);
    bb_ti(&b, "w", 1, ne8, OB_TYPE_F32, 0);
    bb_data(&b, 32, 32);
    EXPECT_BAD(b, "data section", "'w'");
    /* alignment 1 is legal: data right after the infos, odd offsets fine */
    bb_hdr(&b, 3, 2, 1);
    bb_kv_u32(&b, "general.alignment", 1);
    int64_t ne3[1] = {3};
    bb_ti(&b, "w", 1, ne3, OB_TYPE_I8, 0);
    bb_ti(&b, "v", 1, ne3, OB_TYPE_I8, 3);
    bb_data(&b, 1, 6);
    EXPECT_GOOD(b);
}

static void test_bad_tensors(void) {
    bb b = {0};
    int64_t ne[4];
    /* name: huge length, empty, duplicate */
    bb_hdr(&b, 3, 1, 0);
    bb_u64(&b, (uint64_t)1 << 40);
    bb_put(&b, "0123456789abcdef0123456789abcdef0123456789abcdef", 48);
    EXPECT_BAD(b, "tensor 0", "name length");
    bb_hdr(&b, 3, 2, 0);
    bb_ti(&b, "blk.0.attn_k.weight", 1, ne8, OB_TYPE_F32, 0);
    bb_ti(&b, "", 1, ne8, OB_TYPE_F32, 32);
    bb_data(&b, 32, 64);
    EXPECT_BAD(b, "after tensor 'blk.0.attn_k.weight'", "name is empty");
    bb_hdr(&b, 3, 2, 0);
    bb_ti(&b, "blk.0.attn_k.weight", 1, ne8, OB_TYPE_F32, 0);
    bb_ti(&b, "blk.0.attn_k.weight", 1, ne8, OB_TYPE_F32, 32);
    bb_data(&b, 32, 64);
    EXPECT_BAD(b, "duplicate tensor name 'blk.0.attn_k.weight'", NULL);
    /* n_dims 0 and 5 */
    ne[0] = ne[1] = ne[2] = ne[3] = 1;
    one_tensor(&b, 0, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "n_dims 0");
    int64_t ne5[5] = {8, 1, 1, 1, 1};
    one_tensor(&b, 5, ne5, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "n_dims 5");
    /* ne 0, negative, product overflow, byte size overflow */
    ne[0] = 8, ne[1] = 0;
    one_tensor(&b, 2, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "ne[1] = 0");
    ne[0] = -8;
    one_tensor(&b, 1, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "ne[0] = -8");
    ne[0] = INT64_MIN;
    one_tensor(&b, 1, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "ne[0]");
    ne[0] = (int64_t)1 << 32, ne[1] = (int64_t)1 << 31, ne[2] = 2;
    one_tensor(&b, 3, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "overflows int64");
    ne[0] = (int64_t)1 << 62;
    one_tensor(&b, 1, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "size in bytes");
    ne[0] = (int64_t)1 << 40, ne[1] = (int64_t)1 << 20;
    one_tensor(&b, 2, ne, OB_TYPE_F32, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "past end of file");
    /* type unknown (4 is a removed GGML type; 1000 never existed), ne[0] vs block size */
    one_tensor(&b, 1, ne8, 4, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "unknown tensor type 4");
    one_tensor(&b, 1, ne8, 1000, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "unknown tensor type 1000");
    one_tensor(&b, 1, ne8, 0x80000000u, 0, 32);
    EXPECT_BAD(b, "tensor 'w'", "unknown tensor type");
    ne[0] = 33;
    one_tensor(&b, 1, ne, OB_TYPE_Q8_0, 0, 64);
    EXPECT_BAD(b, "tensor 'w'", "block size 32");
    ne[0] = 128;
    one_tensor(&b, 1, ne, OB_TYPE_Q4_K, 0, 256);
    EXPECT_BAD(b, "tensor 'w'", "block size 256");
    ne[0] = 256;
    one_tensor(&b, 1, ne, OB_TYPE_TQ2_0, 0, 66); /* a ternary row exactly fits */
    EXPECT_GOOD(b);
    /* offsets: misaligned, past the end, size past the end, overflowing */
    one_tensor(&b, 1, ne8, OB_TYPE_F32, 8, 64);
    EXPECT_BAD(b, "tensor 'w'", "offset 8 is not a multiple of the alignment 32");
    one_tensor(&b, 1, ne8, OB_TYPE_F32, 64, 64);
    EXPECT_BAD(b, "tensor 'w': data [offset 64, size 32)", "past end of file");
    one_tensor(&b, 1, ne8, OB_TYPE_F32, 0, 31);
    EXPECT_BAD(b, "tensor 'w'", "past end of file");
    one_tensor(&b, 1, ne8, OB_TYPE_F32, UINT64_MAX - 31, 32);
    EXPECT_BAD(b, "tensor 'w'", "past end of file");
    /* overlaps: partial, identical, nested, listed out of order */
    bb_hdr(&b, 3, 2, 0);
    int64_t ne16[1] = {16};
    bb_ti(&b, "blk.0.ffn_up.weight", 1, ne16, OB_TYPE_F32, 0);
    bb_ti(&b, "blk.0.ffn_down.weight", 1, ne16, OB_TYPE_F32, 32);
    bb_data(&b, 32, 96);
    EXPECT_BAD(b, "'blk.0.ffn_up.weight' [0, 64)", "'blk.0.ffn_down.weight' [32, 96) overlap");
    bb_hdr(&b, 3, 3, 0);
    bb_ti(&b, "c", 1, ne8, OB_TYPE_F32, 64);
    bb_ti(&b, "big", 1, ne16, OB_TYPE_F32, 0);
    bb_ti(&b, "d", 1, ne8, OB_TYPE_F32, 128);
    bb_data(&b, 32, 160);
    EXPECT_GOOD(b); /* out of file order but disjoint */
    bb_hdr(&b, 3, 3, 0);
    bb_ti(&b, "big", 1, ne16, OB_TYPE_F32, 0);
    bb_ti(&b, "d", 1, ne8, OB_TYPE_F32, 96);
    bb_ti(&b, "inner", 1, ne8, OB_TYPE_F32, 32);
    bb_data(&b, 32, 128);
    EXPECT_BAD(b, "'big'", "'inner'");
    bb_hdr(&b, 3, 2, 0);
    bb_ti(&b, "x", 1, ne8, OB_TYPE_F32, 32);
    bb_ti(&b, "y", 1, ne8, OB_TYPE_F32, 32);
    bb_data(&b, 32, 64);
    EXPECT_BAD(b, "overlap", "[32, 64)");
}

/* Every proper prefix of a valid file (values of every kind, two tensors whose data runs to
 * the last byte) must fail cleanly: through a caller buffer and through a mapped file. */
static void test_truncation(void) {
    char path[512], err[512];
    static const float d[16];
    ob_gguf_writer_t *w = ob_gguf_writer_new();
    ob_gguf_writer_set_str(w, "general.name", "trunc");
    ob_gguf_writer_set_u8(w, "k.u8", 1);
    ob_gguf_writer_set_i64(w, "k.i64", -1);
    ob_gguf_writer_set_f32(w, "k.f32", 1);
    ob_gguf_writer_set_bool(w, "k.bool", 1);
    ob_gguf_writer_set_arr(w, "k.arr", OB_GGUF_INT32, a_i32, 2);
    ob_gguf_writer_set_arr_str(w, "k.strs", a_str, a_str_len, 4);
    ob_gguf_value nest = make_nested();
    ob_gguf_writer_set_value(w, "k.nest", &nest);
    int64_t ne[2] = {8, 2}, ne2[1] = {8};
    ob_gguf_writer_add_tensor(w, "t0", OB_TYPE_F32, 2, ne, d, err, sizeof err);
    ob_gguf_writer_add_tensor(w, "t1", OB_TYPE_F32, 1, ne2, d, err, sizeof err);
    tmpfile_path(path, sizeof path, "trunc.gguf");
    CHECK_EQ_INT(ob_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), 0);
    ob_gguf_writer_free(w);
    size_t n = 0;
    uint8_t *full = slurp(path, &n);
    CHECK(full && n > 300);
    if (!full) return;
    ob_gguf_t *g = NULL;
    CHECK_EQ_INT(ob_gguf_open_buffer(full, n, &g, err, sizeof err), 0);
    ob_gguf_close(g);
    size_t bad = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, full, len);
        err[0] = 0;
        g = (ob_gguf_t *)p;
        int rc = ob_gguf_open_buffer(p, len, &g, err, sizeof err);
        if (rc != -1 || g != NULL || strncmp(err, "gguf: ", 6) != 0) {
            if (bad++ < 3) fprintf(stderr, "  truncated to %zu: rc %d, \"%s\"\n", len, rc, err);
            if (rc == 0) ob_gguf_close(g);
        }
        free(p);
    }
    CHECK_EQ_INT(bad, 0);

    /* through ob_gguf_open: empty file, mid-metadata, mid-data; the message names the path */
    const size_t cuts[4] = {0, 5, n / 2, n - 1};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(spit(path, full, cuts[i]), 0);
        err[0] = 0;
        CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), -1);
        CHECK(g == NULL && strstr(err, path) != NULL);
    }
    CHECK(strstr(err, "tensor 't1'") != NULL); /* the last cut is inside t1's data */
    CHECK_EQ_INT(ob_gguf_open("/nonexistent/dir/x.gguf", &g, err, sizeof err), -1);
    CHECK(strstr(err, "/nonexistent/dir/x.gguf") != NULL);
    CHECK_EQ_INT(ob_gguf_open(ob_test_tmpdir(), &g, err, sizeof err), -1); /* a directory */
    CHECK_EQ_INT(ob_gguf_open_buffer(NULL, 0, &g, err, sizeof err), -1);
    CHECK_EQ_INT(ob_gguf_open_buffer(full, 0, &g, NULL, 0), -1); /* no err buffer: still fine */
    free(full);
}

/* Random corruption of a valid file: open either fails with a message or succeeds with every
 * value and tensor byte readable (a sanitizer build checks the reads). */
static void test_mutations(void) {
    char err[512];
    bb b = {0};
    bb_hdr(&b, 3, 2, 4);
    bb_kv_str(&b, "general.name", "m");
    bb_kv_u32(&b, "general.alignment", 32);
    bb_key(&b, "toks", OB_GGUF_ARRAY);
    bb_u32(&b, OB_GGUF_STRING);
    bb_u64(&b, 3);
    bb_str(&b, "a");
    bb_str(&b, "bc");
    bb_str(&b, "");
    bb_key(&b, "nest", OB_GGUF_ARRAY);
    bb_u32(&b, OB_GGUF_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, OB_GGUF_UINT16);
    bb_u64(&b, 2);
    bb_u32(&b, 0x00050004);
    bb_u32(&b, OB_GGUF_STRING);
    bb_u64(&b, 1);
    bb_str(&b, "z");
    bb_ti(&b, "a", 1, ne8, OB_TYPE_F32, 0);
    bb_ti(&b, "b", 1, ne8, OB_TYPE_F32, 32);
    bb_data(&b, 32, 64);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int n_ok = 0, n_fail = 0, silent = 0;
    uint8_t *p = malloc(b.n);
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(p, b.p, b.n);
        int flips = 1 + iter % 4;
        for (int f = 0; f < flips; f++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t at = (size_t)(s % b.n);
            p[at] = (iter & 1) ? (uint8_t)(s >> 32) : (uint8_t)(p[at] ^ (1u << ((s >> 40) % 8)));
        }
        ob_gguf_t *g = NULL;
        err[0] = 0;
        if (ob_gguf_open_buffer(p, b.n, &g, err, sizeof err) != 0) {
            n_fail++;
            silent += err[0] == 0;
            continue;
        }
        n_ok++;
        unsigned sum = 0;
        for (int64_t i = 0; i < ob_gguf_n_kv(g); i++) {
            const ob_gguf_value *v = ob_gguf_kv_value(g, i);
            sum += (unsigned)strlen(ob_gguf_kv_key(g, i));
            if (v->type == OB_GGUF_STRING) sum += (unsigned)v->v.str.len + (unsigned char)v->v.str.ptr[v->v.str.len];
            if (v->type == OB_GGUF_ARRAY) sum += (unsigned)ob_gguf_arr_i64(v, v->v.arr.n ? v->v.arr.n - 1 : 0);
        }
        for (int64_t i = 0; i < ob_gguf_n_tensors(g); i++) {
            const ob_gguf_tensor *t = ob_gguf_tensor_at(g, i);
            for (size_t j = 0; j < t->size; j++) sum += ((const uint8_t *)t->data)[j];
        }
        (void)sum;
        ob_gguf_close(g);
    }
    free(p);
    free(b.p);
    CHECK(n_fail > 1000); /* most corruptions are caught... */
    CHECK(n_ok > 100);    /* ...some land in data or string bytes and are legitimately fine */
    CHECK_EQ_INT(silent, 0);
}

/* A bad file on disk: the message carries the path and the tensor. */
static void test_bad_file_on_disk(void) {
    char path[512], err[512] = "";
    bb b = {0};
    int64_t ne[1] = {33};
    one_tensor(&b, 1, ne, OB_TYPE_Q8_0, 0, 64);
    tmpfile_path(path, sizeof path, "bad_block.gguf");
    CHECK_EQ_INT(spit(path, b.p, b.n), 0);
    free(b.p);
    ob_gguf_t *g = (ob_gguf_t *)path;
    CHECK_EQ_INT(ob_gguf_open(path, &g, err, sizeof err), -1);
    CHECK(g == NULL);
    CHECK(strstr(err, path) && strstr(err, "tensor 'w'") && strstr(err, "block size"));
}

OB_SUITE(gguf_bad) {
    test_bad_header();
    test_bad_kv();
    test_bad_alignment();
    test_bad_tensors();
    test_truncation();
    test_mutations();
    test_bad_file_on_disk();
}
