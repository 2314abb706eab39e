/* backend.c — picks a backend by device name: the one place device dispatch happens.
 * OB_BACKEND_FUSED=plain gives the CPU backend the fused entries composed from its plain ops
 * (backend_fused.c), for tests of the engine's fused call sites. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static ob_backend *cpu_new(void) {
    ob_backend *b = ob_backend_cpu_new();
    const char *f = getenv("OB_BACKEND_FUSED");
    if (b && f && !strcmp(f, "plain")) ob_backend_plain_fused(b);
    return b;
}

ob_backend *ob_backend_by_name(const char *name, char *err, size_t errlen) {
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
