/* quantize.c — `1bit quantize IN.gguf OUT.gguf TYPE`: a GGUF file to another weight type,
 * the way llama.cpp's llama-quantize does it.
 *
 * Owns: the command line (llama-quantize's names and options), choosing each tensor's type
 * through quant_plan.c (the same mixes and per-tensor rules), the importance matrix
 * (format/imatrix.h: which values go with which tensor, per expert), copying every metadata
 * key and setting general.file_type / quantization_version / quantize.imatrix.* as
 * llama-quantize does, and streaming the tensors: each one is decoded to f32 a slab of rows
 * at a time, quantized on all threads and handed to the GGUF writer, so memory holds one
 * output tensor plus one slab.
 * Does not own: the codes (format/quant_search.h), the file format (format/gguf.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onebit.h"
#include "format/gguf.h"
#include "format/imatrix.h"
#include "format/quant.h"
#include "format/quant_tensor.h"
#include "format/quant_search.h"
#include "tools/quant_plan.h"
#include "tools/tools.h"
#include "util/err.h"

#define SLAB_FLOATS (16u << 20) /* rows decoded at a time: at most 64 MiB of f32 (or one row) */

typedef struct {
    const ob_gguf_t *in;
    int *types;               /* [n_tensors] output type */
    const float **imp;        /* [n_tensors] importance (ne0 * experts values) or NULL */
    int n_threads, allow_requantize;
    float *f32;               /* [SLAB] decoded rows */
    size_t f32_cap;
    size_t bytes_in, bytes_out;
    int64_t n_elements;
} qz_state;

/* ---- threads: rows of a slab split in contiguous ranges --------------------------------- */

typedef struct {
    int type;
    const float *src;
    uint8_t *dst;
    int64_t row0, nrows, ncols, rows_per_expert; /* row0: index of the slab's first row in the tensor */
    const float *imp;
    int ith, nth;
} qz_job;

static void *qz_worker(void *arg) {
    qz_job *j = arg;
    int64_t per = (j->nrows + j->nth - 1) / j->nth, lo = per * j->ith, hi = lo + per < j->nrows ? lo + per : j->nrows;
    size_t row_bytes = ob_type_row_size(j->type, j->ncols);
    /* rows of one expert share one importance vector: quantize runs of rows within an expert */
    for (int64_t r = lo; r < hi;) {
        int64_t g = j->row0 + r, e = g / j->rows_per_expert, end = (e + 1) * j->rows_per_expert - j->row0;
        int64_t n = (end < hi ? end : hi) - r;
        ob_quantize_rows(j->type, j->src + r * j->ncols, j->dst + (size_t)r * row_bytes, n, j->ncols,
                         j->imp ? j->imp + e * j->ncols : NULL);
        r += n;
    }
    return NULL;
}

static void quantize_slab(qz_state *s, int type, const float *src, uint8_t *dst, int64_t row0, int64_t nrows,
                          int64_t ncols, int64_t rows_per_expert, const float *imp) {
    int nth = s->n_threads;
    if (nth > nrows) nth = (int)nrows;
    if (nth < 1) nth = 1;
    qz_job jobs[256];
    pthread_t th[256];
    for (int i = 0; i < nth; i++) {
        jobs[i] = (qz_job){type, src, dst, row0, nrows, ncols, rows_per_expert, imp, i, nth};
        if (i > 0 && pthread_create(&th[i], NULL, qz_worker, &jobs[i]) != 0) jobs[i].nth = -1; /* run it here below */
    }
    qz_worker(&jobs[0]);
    for (int i = 1; i < nth; i++) {
        if (jobs[i].nth == -1) {
            jobs[i].nth = nth;
            qz_worker(&jobs[i]);
        } else {
            pthread_join(th[i], NULL);
        }
    }
}

/* ---- one tensor --------------------------------------------------------------------------- */

static int fill_tensor(void *ctx, int64_t idx, void *dst, size_t size, char *err, size_t errlen) {
    qz_state *s = ctx;
    const ob_gguf_tensor *t = ob_gguf_tensor_at(s->in, idx);
    int to = s->types[idx];
    s->bytes_in += t->size;
    s->bytes_out += size;
    if (to == t->type) {
        memcpy(dst, t->data, size);
        return 0;
    }
    const ob_type_traits *from = ob_type_get(t->type);
    int64_t ncols = t->ne[0], nrows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t src_row = ob_type_row_size(t->type, ncols), dst_row = ob_type_row_size(to, ncols);
    size_t slab_rows = SLAB_FLOATS / (size_t)ncols ? SLAB_FLOATS / (size_t)ncols : 1;
    if ((size_t)slab_rows * (size_t)ncols > s->f32_cap) {
        free(s->f32);
        s->f32_cap = slab_rows * (size_t)ncols;
        s->f32 = malloc(s->f32_cap * sizeof(float));
        if (!s->f32) {
            s->f32_cap = 0;
            return ERR("out of memory decoding '%s'", t->name);
        }
    }
    /* i2_s has one scale for the whole tensor: decode every row before writing (one slab) */
    if (to == OB_TYPE_I2_S && slab_rows < (size_t)nrows) {
        slab_rows = (size_t)nrows;
        free(s->f32);
        s->f32_cap = slab_rows * (size_t)ncols;
        if (!(s->f32 = malloc(s->f32_cap * sizeof(float)))) {
            s->f32_cap = 0;
            return ERR("out of memory decoding '%s'", t->name);
        }
    }
    float tensor_scale = ob_tensor_scale(t->type, t->data, ncols, nrows); /* i2_s: its tail; else 1 */
    for (int64_t r0 = 0; r0 < nrows; r0 += (int64_t)slab_rows) {
        int64_t n = nrows - r0 < (int64_t)slab_rows ? nrows - r0 : (int64_t)slab_rows;
        from->to_float((const uint8_t *)t->data + (size_t)r0 * src_row, s->f32, n * ncols);
#ifndef OB_NO_LEAN
        if (t->type == OB_TYPE_LEAN4) ob_lean_rotate(s->f32, n * ncols); /* back to the original rows */
#endif
        if (tensor_scale != 1.0f)
            for (int64_t i = 0; i < n * ncols; i++) s->f32[i] *= tensor_scale;
        for (int64_t i = 0; i < n * ncols; i++)
            if (!isfinite(s->f32[i]))
                return ERR("tensor '%s' holds a non-finite value (%g) in row %lld; refusing to quantize it", t->name,
                           (double)s->f32[i], (long long)(r0 + i / ncols));
        if (to == OB_TYPE_I2_S || to == OB_TYPE_LEAN4) { /* whole-tensor types (format/quant_tensor.h) */
            if (ob_tensor_quantize(to, s->f32, (uint8_t *)dst + (size_t)r0 * dst_row, ncols, n))
                return ERR("tensor '%s' cannot be written as %s", t->name, ob_type_name(to));
            continue;
        }
        quantize_slab(s, to, s->f32, (uint8_t *)dst + (size_t)r0 * dst_row, r0, n, ncols, t->ne[1], s->imp[idx]);
    }
    return 0;
}

/* ---- command line ------------------------------------------------------------------------- */

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit quantize [options] IN.gguf OUT.gguf TYPE [THREADS]\n"
            "  TYPE   llama-quantize's file types: %s\n"
            "         (Q4_K = Q4_K_M, Q3_K = Q3_K_M, Q5_K = Q5_K_M; or the number, e.g. 15)\n"
            "  --imatrix FILE               importance matrix (llama-imatrix's GGUF or legacy .dat)\n"
            "  --pure                       every quantized tensor gets TYPE's base type (no mix rules)\n"
            "  --output-tensor-type T       type of output.weight (f16, q8_0, q6_K, ...)\n"
            "  --token-embedding-type T     type of token_embd.weight\n"
            "  --leave-output-tensor        keep output.weight as it is\n"
            "  --allow-requantize           allow tensors that are already quantized as input\n"
            "  --dry-run                    print each tensor's type and the sizes; write nothing\n"
            "  -t, --threads N              threads (default: all cores)\n",
            ob_qmix_names());
    return 2;
}

static int type_arg(const char *opt, const char *v, int *out) {
    int t = ob_type_from_name(v);
    const ob_type_traits *tr = ob_type_get(t);
    if (!tr || !ob_tensor_can_quantize(t)) {
        fprintf(stderr, "quantize: %s '%s' is not a type this build can write\n", opt, v);
        return -1;
    }
    *out = t;
    return 0;
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int ob_cmd_quantize(int argc, char **argv) {
    const char *pos[4] = {0}, *imatrix_path = NULL;
    int npos = 0, n_threads = 0, dry_run = 0;
    ob_qplan plan = {0};
    plan.output_type = plan.token_embd_type = -1;
    qz_state s = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--imatrix") && i + 1 < argc) imatrix_path = argv[++i];
        else if (!strcmp(a, "--pure")) plan.pure = 1;
        else if (!strcmp(a, "--leave-output-tensor")) plan.leave_output = 1;
        else if (!strcmp(a, "--allow-requantize")) s.allow_requantize = 1;
        else if (!strcmp(a, "--dry-run")) dry_run = 1;
        else if (!strcmp(a, "--output-tensor-type") && i + 1 < argc) {
            if (type_arg(a, argv[++i], &plan.output_type)) return 2;
        } else if (!strcmp(a, "--token-embedding-type") && i + 1 < argc) {
            if (type_arg(a, argv[++i], &plan.token_embd_type)) return 2;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "quantize: unknown or incomplete option '%s'\n", a);
            return usage();
        } else if (npos < 4) pos[npos++] = a;
        else return usage();
    }
    if (npos < 3 - dry_run) return usage();
    if (dry_run && npos == 2) { /* llama-quantize --dry-run IN TYPE */
        pos[2] = pos[1];
        pos[1] = "";
    }
    const char *in_path = pos[0], *out_path = pos[1];
    plan.mix = ob_qmix_by_name(pos[2]);
    if (!plan.mix) {
        fprintf(stderr, "quantize: unknown type '%s' (one of: %s)\n", pos[2], ob_qmix_names());
        return 2;
    }
    if (npos == 4) n_threads = atoi(pos[3]);
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads > 256) n_threads = 256;
    if (n_threads < 1) n_threads = 1;
    s.n_threads = n_threads;
    if (same_file(in_path, out_path)) {
        fprintf(stderr, "quantize: input and output are the same file: '%s'\n", in_path);
        return 2;
    }

    char err[1024] = "";
    size_t errlen = sizeof err;
    ob_gguf_t *in = NULL;
    ob_imatrix_t *im = NULL;
    ob_gguf_writer_t *w = NULL;
    int rc = 1, n = 0;
    int *order = NULL;
    const char **names = NULL;
    if (ob_gguf_open(in_path, &in, err, errlen)) goto done;
    if (imatrix_path && ob_imatrix_load(imatrix_path, &im, err, errlen)) goto done;
    n = (int)ob_gguf_n_tensors(in);
    s.in = in;
    s.types = calloc((size_t)n + 1, sizeof *s.types);
    s.imp = calloc((size_t)n + 1, sizeof *s.imp);
    order = calloc((size_t)n + 1, sizeof *order);
    names = calloc((size_t)n + 1, sizeof *names);
    if (!s.types || !s.imp || !order || !names) {
        ERR("out of memory");
        goto done;
    }
    const char *arch = NULL;
    if (ob_gguf_get_str(in, "general.architecture", &arch, err, errlen) != 1) {
        if (!err[0]) ERR("%s: no general.architecture key: not a model file", in_path);
        goto done;
    }
    plan.has_imatrix = im != NULL;
    ob_qplan_file(&plan, in, s.types);

    /* checks, in llama.cpp's order, so the first complaint is the one llama-quantize makes */
    for (int i = 0; i < n; i++) names[i] = ob_gguf_tensor_at(in, i)->name;
    ob_qplan_order(names, order, n);
    for (int k = 0; k < n; k++) {
        int i = order[k];
        const ob_gguf_tensor *t = ob_gguf_tensor_at(in, i);
        int to = s.types[i];
        if (to == t->type) continue;
        const ob_type_traits *from = ob_type_get(t->type);
        int64_t nrows = t->ne[1] * t->ne[2] * t->ne[3];
        if (!from || !from->to_float || ob_type_tensor_size(t->type, t->ne[0], nrows) != t->size) {
            ERR("tensor '%s' has type %s, which this build cannot decode to requantize it", t->name, ob_type_name(t->type));
            goto done;
        }
        if (t->type != OB_TYPE_F32 && t->type != OB_TYPE_F16 && t->type != OB_TYPE_BF16 && !s.allow_requantize) {
            ERR("tensor '%s' is already quantized (%s); requantizing loses quality, pass --allow-requantize to do it anyway",
                t->name, ob_type_name(t->type));
            goto done;
        }
        const ob_type_traits *tt = ob_type_get(to);
        if (!tt || !ob_tensor_can_quantize(to) || t->ne[0] % tt->block_size != 0) {
            ERR("tensor '%s' cannot be written as %s (row of %lld)", t->name, ob_type_name(to), (long long)t->ne[0]);
            goto done;
        }
        if (im) {
            int64_t nv = 0;
            const float *v = ob_imatrix_find(im, t->name, &nv);
            if (v && nv == t->ne[0] * t->ne[2]) s.imp[i] = v;
            else if (v && strcmp(t->name, "token_embd.weight") != 0) {
                ERR("the importance matrix has %lld values for '%s', which needs %lld (a different model?)",
                    (long long)nv, t->name, (long long)(t->ne[0] * t->ne[2]));
                goto done;
            }
        }
        if (!s.imp[i] && ob_qplan_needs_imatrix(&plan, t->name, to)) {
            ERR("%s needs an importance matrix for tensor '%s' (%s); pass --imatrix FILE", plan.mix->name, t->name,
                ob_type_name(to));
            goto done;
        }
    }

    if (dry_run) {
        size_t total_in = 0, total_out = 0;
        int64_t nel = 0;
        for (int i = 0; i < n; i++) {
            const ob_gguf_tensor *t = ob_gguf_tensor_at(in, i);
            size_t out = ob_type_row_size(s.types[i], t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
            if (s.types[i] == t->type) out = t->size;
            printf("%-40s %-8s -> %-8s %10.3f MiB\n", t->name, ob_type_name(t->type), ob_type_name(s.types[i]), out / 1048576.0);
            total_in += t->size;
            total_out += out;
            nel += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        }
        printf("%s: %.2f MiB -> %.2f MiB (%.2f bits per weight)\n", plan.mix->name, total_in / 1048576.0, total_out / 1048576.0,
               nel ? 8.0 * (double)total_out / (double)nel : 0.0);
        rc = 0;
        goto done;
    }
    w = ob_gguf_writer_new();
    ob_gguf_writer_copy_kv(w, in, NULL);
    ob_gguf_writer_set_u32(w, "general.quantization_version", 2);
    ob_gguf_writer_set_u32(w, "general.file_type", (uint32_t)plan.mix->ftype);
    for (int i = 0; i < n; i++)
        if (s.types[i] == OB_TYPE_LEAN4) { /* readers without lean support refuse the file by this key */
            const char *req[] = {"lean4"};
            ob_gguf_writer_set_arr_str(w, "1bit.requires", req, NULL, 1);
            break;
        }
    if (im) {
        char file[128];
        snprintf(file, sizeof file, "%s", imatrix_path); /* llama-quantize keeps 127 characters */
        ob_gguf_writer_set_str(w, "quantize.imatrix.file", file);
        if (ob_imatrix_dataset(im)) {
            snprintf(file, sizeof file, "%s", ob_imatrix_dataset(im));
            ob_gguf_writer_set_str(w, "quantize.imatrix.dataset", file);
        }
        ob_gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)ob_imatrix_n_entries(im));
        if (ob_imatrix_chunks(im) > 0) ob_gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", (uint32_t)ob_imatrix_chunks(im));
    }
    for (int i = 0; i < n; i++) {
        const ob_gguf_tensor *t = ob_gguf_tensor_at(in, i);
        if (ob_gguf_writer_add_tensor(w, t->name, s.types[i], t->n_dims, t->ne, NULL, err, errlen) < 0) goto done;
        s.n_elements += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    fprintf(stderr, "quantize: %s -> %s as %s%s, %d threads%s\n", in_path, out_path, plan.mix->name, plan.pure ? " (pure)" : "",
            n_threads, im ? ", with an importance matrix" : "");
    int64_t t0 = ob_time_us();
    if (ob_gguf_writer_write(w, out_path, fill_tensor, &s, err, errlen)) goto done;
    /* distinct types in order of first use (lean4's id is outside the GGUF range) */
    int kinds[64], counts[64], nk = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < nk && kinds[j] != s.types[i]) j++;
        if (j == nk && nk < 64) kinds[nk++] = s.types[i], counts[j] = 0;
        if (j < nk) counts[j]++;
    }
    fprintf(stderr, "quantize: %.2f MiB -> %.2f MiB (%.2f bits per weight) in %.1f s; tensors:", s.bytes_in / 1048576.0,
            s.bytes_out / 1048576.0, s.n_elements ? 8.0 * (double)s.bytes_out / (double)s.n_elements : 0.0, (ob_time_us() - t0) / 1e6);
    for (int j = 0; j < nk; j++) fprintf(stderr, " %s x%d", ob_type_name(kinds[j]), counts[j]);
    fprintf(stderr, "\n");
    rc = 0;
done:
    if (rc) fprintf(stderr, "quantize: %s\n", err);
    ob_gguf_writer_free(w);
    ob_imatrix_free(im);
    ob_gguf_close(in);
    free(s.types);
    free(s.imp);
    free(s.f32);
    free(order);
    free(names);
    return rc;
}
