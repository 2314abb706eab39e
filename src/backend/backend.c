/* backend.c — picks a backend by device name: the one place device dispatch happens. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"

ob_backend *ob_backend_by_name(const char *name, char *err, size_t errlen) {
    if (!name || !*name || strcmp(name, "cpu") == 0) return ob_backend_cpu_new();
#ifdef OB_CUDA
    if (strcmp(name, "auto") == 0) return ob_backend_cuda_usable() ? ob_backend_cuda_new() : ob_backend_cpu_new();
    if (strcmp(name, "cuda") == 0 || strcmp(name, "gpu") == 0) return ob_backend_cuda_new();
#else
    if (strcmp(name, "auto") == 0) return ob_backend_cpu_new();
    if (strcmp(name, "cuda") == 0 || strcmp(name, "gpu") == 0) {
        snprintf(err, errlen, "device 'cuda': this build has no CUDA backend (rebuild with `make CUDA=1`)");
        return NULL;
    }
#endif
    snprintf(err, errlen, "unknown device '%s' (expected cpu, cuda or auto)", name);
    return NULL;
}
