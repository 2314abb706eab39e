/* test.h — the C test runner's macros.
 *
 * A suite is declared with OB_SUITE(name) { ... } in any C file under tests/unit; it registers
 * itself before main runs, so adding a suite edits no shared file. Checks count passes and
 * failures; the runner prints one "N passed, N failed" line at the end.
 */
#ifndef OB_TEST_H
#define OB_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*ob_test_fn)(void);
void ob_test_register(const char *name, ob_test_fn fn);
void ob_test_result(int ok, const char *file, int line, const char *expr);
extern int ob_test_verbose;

#define OB_SUITE(name)                                                              \
    static void ob_suite_##name(void);                                              \
    __attribute__((constructor)) static void ob_suite_reg_##name(void) {            \
        ob_test_register(#name, ob_suite_##name);                                   \
    }                                                                               \
    static void ob_suite_##name(void)

#define CHECK(cond) ob_test_result(!!(cond), __FILE__, __LINE__, #cond)
#define CHECK_EQ_INT(a, b)                                                          \
    do {                                                                            \
        long long _a = (long long)(a), _b = (long long)(b);                         \
        if (_a != _b) fprintf(stderr, "  %s:%d: %s == %lld, expected %lld\n",      \
                              __FILE__, __LINE__, #a, _a, _b);                      \
        ob_test_result(_a == _b, __FILE__, __LINE__, #a " == " #b);                 \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                       \
    do {                                                                            \
        double _a = (double)(a), _b = (double)(b);                                  \
        int _ok = fabs(_a - _b) <= (tol);                                           \
        if (!_ok) fprintf(stderr, "  %s:%d: %s = %g, expected %g (tol %g)\n",      \
                          __FILE__, __LINE__, #a, _a, _b, (double)(tol));           \
        ob_test_result(_ok, __FILE__, __LINE__, #a " ~ " #b);                       \
    } while (0)
#define CHECK_STR(a, b)                                                             \
    do {                                                                            \
        const char *_a = (a), *_b = (b);                                            \
        int _ok = _a && _b && strcmp(_a, _b) == 0;                                  \
        if (!_ok) fprintf(stderr, "  %s:%d: %s = \"%s\", expected \"%s\"\n",       \
                          __FILE__, __LINE__, #a, _a ? _a : "(null)", _b ? _b : "(null)"); \
        ob_test_result(_ok, __FILE__, __LINE__, #a " == " #b);                      \
    } while (0)

/* Directory for scratch files (tests/tmp), created by the runner. */
const char *ob_test_tmpdir(void);

#endif
