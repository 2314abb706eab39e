/* runner.c — runs the registered suites (all, or those named on the command line) and
 * prints the final "N passed, N failed" line. Exit status 1 if any check failed. Scratch files
 * go to a directory of this run's own (tests/tmp/unit-<pid>, removed at the end, kept when a
 * check failed), so that two runs in one checkout do not overwrite each other's files. */
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#define MAX_SUITES 256

static struct { const char *name; ob_test_fn fn; } suites[MAX_SUITES];
static int n_suites;
static int n_pass, n_fail;
int ob_test_verbose;

void ob_test_register(const char *name, ob_test_fn fn) {
    if (n_suites < MAX_SUITES) { suites[n_suites].name = name; suites[n_suites].fn = fn; n_suites++; }
}

void ob_test_result(int ok, const char *file, int line, const char *expr) {
    if (ok) { n_pass++; return; }
    n_fail++;
    fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, expr);
}

static char tmpdir[64];

const char *ob_test_tmpdir(void) {
    if (!tmpdir[0]) {
        mkdir("tests/tmp", 0755);
        snprintf(tmpdir, sizeof tmpdir, "tests/tmp/unit-%ld", (long)getpid());
    }
    mkdir(tmpdir, 0755);
    return tmpdir;
}

/* Removes the scratch directory with everything in it. */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void tmpdir_remove(void) {
    if (tmpdir[0]) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int cmp_suite(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    int ran = 0;
    qsort(suites, (size_t)n_suites, sizeof suites[0], cmp_suite);
    if (getenv("OB_TEST_VERBOSE")) ob_test_verbose = 1;
    for (int i = 0; i < n_suites; i++) {
        int want = argc < 2;
        for (int a = 1; a < argc; a++) if (strcmp(argv[a], suites[i].name) == 0) want = 1;
        if (!want) continue;
        int f0 = n_fail, p0 = n_pass;
        suites[i].fn();
        fprintf(stderr, "suite %-20s %d passed, %d failed\n", suites[i].name, n_pass - p0, n_fail - f0);
        ran++;
    }
    if (ran == 0 && argc >= 2) { fprintf(stderr, "no suite matched\n"); return 2; }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    if (!n_fail) tmpdir_remove();
    else if (tmpdir[0]) fprintf(stderr, "scratch files kept in %s\n", tmpdir);
    return n_fail ? 1 : 0;
}
