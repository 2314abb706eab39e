/* registry.c — `1bit registry`: the architectures and weight types this build runs, read
 * from the architecture table and the type table (never a hand-kept list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/arch.h"
#include "format/quant.h"
#include "tools/tools.h"

int ob_cmd_registry(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: 1bit registry\n  lists architectures (GGUF name, Hugging Face class) and weight types per backend\n");
        return 0;
    }
    printf("architectures:\n");
    printf("  %-14s %-22s %s\n", "gguf", "hugging face", "notes");
    for (int i = 0; i < ob_arch_count(); i++) {
        const ob_arch *a = ob_arch_at(i);
        printf("  %-14s %-22s %s\n", a->gguf_name, a->hf_class ? a->hf_class : "-", a->note);
    }
    char err[256];
    ob_backend *cpu = ob_backend_by_name("cpu", err, sizeof err);
    printf("\nweight types (cpu backend):\n ");
    for (int t = 0; t < OB_TYPE_COUNT; t++)
        if (cpu && cpu->supports(cpu, t)) printf(" %s", ob_type_name(t));
    for (int t = OB_TYPE_EXT_FIRST; t < OB_TYPE_EXT_END; t++) /* 1bit's own types (lean4) */
        if (cpu && cpu->supports(cpu, t)) printf(" %s", ob_type_name(t));
    printf("\n");
    free(cpu);
    return 0;
}
