/* embedded.c — the default model, compiled into the binary.
 *
 * The trained demo model (models/demo-tq2_0.gguf, docs/demo-model.md) is included as raw bytes
 * with the assembler's .incbin and registered under OB_DEFAULT_MODEL, so `1bit serve` and
 * `1bit run` without -m need no file. `make EMBED_MODEL=` builds without it; then the default
 * model name fails to open with a message saying so.
 */
#include "onebit.h"
#include "format/gguf.h"

#ifdef OB_EMBED_MODEL_PATH
/* 64-byte alignment: tensor data offsets in a GGUF are aligned relative to the file start. */
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".global ob_embedded_model_start\n"
        "ob_embedded_model_start:\n"
        ".incbin \"" OB_EMBED_MODEL_PATH "\"\n"
        ".global ob_embedded_model_end\n"
        "ob_embedded_model_end:\n"
        ".previous\n");
extern const unsigned char ob_embedded_model_start[], ob_embedded_model_end[];

__attribute__((constructor)) static void register_embedded(void) {
    ob_gguf_register_builtin(OB_DEFAULT_MODEL, ob_embedded_model_start,
                             (size_t)(ob_embedded_model_end - ob_embedded_model_start));
}
#endif

int ob_has_default_model(void) {
#ifdef OB_EMBED_MODEL_PATH
    return 1;
#else
    return 0;
#endif
}
