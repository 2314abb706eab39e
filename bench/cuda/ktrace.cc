// ktrace.cc — every kernel's GPU start and duration, from CUPTI's activity records, as a CSV for
// bench/cuda/step_gaps.py: where a replayed decode step's time goes, kernel by kernel in place
// (the GPU machine has Nsight Compute, which runs kernels one at a time, but no Nsight Systems).
//
// A CUDA injection library: the driver loads it into the traced program at CUDA's start
// (CUDA_INJECTION64_PATH=/path/ktrace.so), so the program is not changed. The kernels of a
// replayed CUDA graph come as records of their own. Concurrent-kernel records do not serialize
// the kernels; compare the traced run's tok/s with an untraced one to see what tracing costs.
//
//   g++ -O2 -shared -fPIC -o ktrace.so bench/cuda/ktrace.cc -I$CUDA/include -L$CUPTI_LIB -lcupti
//   CUDA_INJECTION64_PATH=$PWD/ktrace.so KTRACE_OUT=trace.csv ./build/1bit bench ... --device cuda
//
// Output: "Start (ns)","Duration (ns)","Name" (demangled), one row a kernel, in completion order.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = (size_t)8 << 20;
    *buf = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
    CUpti_Activity *r = nullptr;
    while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        int status = 0;
        char *name = abi::__cxa_demangle(k->name, nullptr, nullptr, &status);
        fprintf(out, "%llu,%llu,\"%s\"\n", (unsigned long long)k->start, (unsigned long long)(k->end - k->start),
                name ? name : k->name);
        free(name);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "ktrace: %zu records dropped\n", dropped);
    free(buf);
}

static void finish() {
    cuptiActivityFlushAll(1);
    if (out) fclose(out);
    out = nullptr;
}

extern "C" int InitializeInjection(void) {
    const char *path = getenv("KTRACE_OUT");
    out = fopen(path ? path : "ktrace.csv", "w");
    if (!out) {
        fprintf(stderr, "ktrace: cannot write %s\n", path ? path : "ktrace.csv");
        return 0;
    }
    fprintf(out, "\"Start (ns)\",\"Duration (ns)\",\"Name\"\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI refused the kernel activity records\n");
        return 0;
    }
    atexit(finish);
    return 1;
}
