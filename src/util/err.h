/* err.h — the error-string convention: fill err (naming the file, key or tensor at fault)
 * and return -1, in one expression: `return ERR("gguf: key '%s' ...", key);`. */
#ifndef OB_ERR_H
#define OB_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static inline int ob_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Needs `err` and `errlen` in scope. */
#define ERR(...) ob_errf(err, errlen, __VA_ARGS__)

#endif
