/* backend.c — picks a backend by device name: the one place device dispatch happens.
 * OB_BACKEND_FUSED=plain gives the CPU backend the fused entries composed from its plain ops
 * (backend_fused.c), for tests of the engine's fused call sites. OB_BACKEND_TQ1_AS_TQ2=1 has any
 * backend take tq1_0 weights as tq2_0 (weight_as: the same values, converted at load), =0 none:
 * CUDA's default is to take them so (its tq2_0 decoders are cheaper, docs/cuda.md), the CPU's not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "format/quant.h"

static ob_backend *cpu_new(void) {
    ob_backend *b = ob_backend_cpu_new();
    const char *f = getenv("OB_BACKEND_FUSED");
    if (b && f && !strcmp(f, "plain")) ob_backend_plain_fused(b);
    return b;
}

int ob_backend_tq1_as_tq2(ob_backend *b, int type) {
    (void)b;
    return type == OB_TYPE_TQ1_0 ? OB_TYPE_TQ2_0 : type;
}

static ob_backend *by_name(const char *name, char *err, size_t errlen);

ob_backend *ob_backend_by_name(const char *name, char *err, size_t errlen) {
    ob_backend *b = by_name(name, err, errlen);
    const char *t = getenv("OB_BACKEND_TQ1_AS_TQ2");
    if (b && t && !strcmp(t, "1") && !b->weight_as) b->weight_as = ob_backend_tq1_as_tq2;
    if (b && t && !strcmp(t, "0")) b->weight_as = NULL;
    return b;
}

static ob_backend *by_name(const char *name, char *err, size_t errlen) {
    if (!name || !*name || strcmp(name, "cpu") == 0) return cpu_new();
#ifdef OB_CUDA
    if (strcmp(name, "auto") == 0) return ob_backend_cuda_usable() ? ob_backend_cuda_new() : cpu_new();
    if (strcmp(name, "cuda") == 0 || strcmp(name, "gpu") == 0) return ob_backend_cuda_new();
#else
    if (strcmp(name, "auto") == 0) return cpu_new();
    if (strcmp(name, "cuda") == 0 || strcmp(name, "gpu") == 0) {
        snprintf(err, errlen, "device 'cuda': this build has no CUDA backend (rebuild with `make CUDA=1`)");
        return NULL;
    }
#endif
    snprintf(err, errlen, "unknown device '%s' (expected cpu, cuda or auto)", name);
    return NULL;
}
