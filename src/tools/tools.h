/* tools.h — entry points of the subcommands (each a thin front over the engine API). */
#ifndef OB_TOOLS_H
#define OB_TOOLS_H

int ob_cmd_convert(int argc, char **argv);
int ob_cmd_run(int argc, char **argv);
int ob_cmd_bench(int argc, char **argv);
int ob_cmd_registry(int argc, char **argv);
int ob_cmd_tokenize(int argc, char **argv);
int ob_cmd_serve(int argc, char **argv);
int ob_cmd_perplexity(int argc, char **argv);
int ob_cmd_template(int argc, char **argv);

#include <stddef.h>
#include "onebit.h"

typedef struct {
    int n_ctx;        /* tokens per chunk */
    int n_batch;      /* tokens per forward pass (0: the chunk) */
    int max_chunks;   /* 0: all */
    int score_all;    /* score every token after the first (else the second half of each chunk) */
    int no_bos;       /* do not start chunks with BOS */
    int progress;     /* per-chunk lines on stderr */
} ob_ppl_opts;

typedef struct {
    double nll_sum, nll_sq, ppl, ppl_stderr;
    long scored;
    int chunks, bos;
} ob_ppl_result;

/* Perplexity of text (len bytes) under m; the method is described in perplexity.c. */
int ob_perplexity_compute(ob_model_t *m, const char *text, size_t len, const ob_ppl_opts *o, ob_ppl_result *res,
                          char *err, size_t errlen);

#endif
