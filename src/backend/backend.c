/* backend.c — picks a backend by device name: the one place device dispatch happens.
 * OB_BACKEND_FUSED=plain gives the CPU backend the fused entries composed from its plain ops
 * (backend_fused.c), for tests of the engine's fused call sites. Weights taken in another type of
 * the same values (weight_as, converted at load): OB_BACKEND_TQ1_AS_TQ2=1 has any backend take
 * tq1_0 weights as tq2_0, =0 none at all (whatever the other says); OB_BACKEND_TQ2_AS_I2S=1 tq1_0
 * as tq2_0 and tq2_0 as i2_s too (where a tensor's blocks share one scale), =0 not tq2_0 as i2_s. CUDA's default is both (its
 * tq2_0 decoders are cheaper than tq1_0's, its i2_s ones than tq2_0's: docs/cuda.md), the CPU's
 * neither. */
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

int ob_backend_ternary_as_i2_s(ob_backend *b, int type) {
    return type == OB_TYPE_TQ2_0 ? OB_TYPE_I2_S : ob_backend_tq1_as_tq2(b, type);
}

static ob_backend *by_name(const char *name, char *err, size_t errlen);

ob_backend *ob_backend_by_name(const char *name, char *err, size_t errlen) {
    ob_backend *b = by_name(name, err, errlen);
    if (!b) return b;
    const char *t = getenv("OB_BACKEND_TQ1_AS_TQ2"), *i = getenv("OB_BACKEND_TQ2_AS_I2S");
    if (i && !strcmp(i, "1")) b->weight_as = ob_backend_ternary_as_i2_s;
    if (i && !strcmp(i, "0") && b->weight_as == ob_backend_ternary_as_i2_s) b->weight_as = ob_backend_tq1_as_tq2;
    if (t && !strcmp(t, "1") && !b->weight_as) b->weight_as = ob_backend_tq1_as_tq2;
    if (t && !strcmp(t, "0")) b->weight_as = NULL; /* (whatever the other says) */
    b->weight_as_hint = b->weight_as ? "OB_BACKEND_TQ1_AS_TQ2=0 keeps the file's types" : NULL;
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
