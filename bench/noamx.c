/* noamx.c — LD_PRELOAD shim that hides AMX from llama.cpp (bench/cpu.sh runs llama-bench with it).
 *
 * On this machine llama.cpp's AMX buffer type crashes in llama_decode on q4_0 / q8_0 weights
 * (docs/compat.md) and llama-bench has no switch for it (llama_model_params.use_extra_bufts is
 * not exposed). ggml enables AMX only if arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) succeeds,
 * so this shim makes exactly that request fail; everything else, including llama.cpp's other
 * extra buffer type (CPU_REPACK, its repacked AVX-512 kernels), is untouched.
 *
 *   cc -O2 -shared -fPIC -o build/noamx.so bench/noamx.c -ldl
 *   LD_PRELOAD=build/noamx.so llama-bench ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>

#define ARCH_REQ_XCOMP_PERM 0x1023

long syscall(long n, ...) {
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_arch_prctl && a[0] == ARCH_REQ_XCOMP_PERM) {
        errno = EPERM;
        return -1;
    }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
