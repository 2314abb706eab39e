/* tools.h — entry points of the subcommands (each a thin front over the engine API). */
#ifndef OB_TOOLS_H
#define OB_TOOLS_H

int ob_cmd_convert(int argc, char **argv);
int ob_cmd_quantize(int argc, char **argv);
int ob_cmd_run(int argc, char **argv);
int ob_cmd_bench(int argc, char **argv);
int ob_cmd_registry(int argc, char **argv);
int ob_cmd_tokenize(int argc, char **argv);
int ob_cmd_serve(int argc, char **argv);
int ob_cmd_perplexity(int argc, char **argv);
int ob_cmd_template(int argc, char **argv);

#include <stddef.h>
#include <stdio.h>
#include "onebit.h"

typedef struct {
    int n_ctx;        /* tokens per chunk */
    int n_batch;      /* tokens per forward pass (0: the chunk) */
    int max_chunks;   /* 0: all */
    int score_all;    /* score every token after the first (else the second half of each chunk) */
    int no_bos;       /* do not start chunks with BOS */
    int progress;     /* per-chunk lines on stderr */
    /* Called for every scored position with its logits [n_vocab] and the token that follows
     * (kld.c's ob_kld_token); nonzero stops the run with err. NULL: none. */
    int (*on_token)(void *user, const float *logits, int n_vocab, int next, char *err, size_t errlen);
    void *user;
} ob_ppl_opts;

typedef struct {
    double nll_sum, nll_sq, ppl, ppl_stderr;
    long scored;
    int chunks, bos;
} ob_ppl_result;

/* ---- KL divergence against a base model's saved distributions (kld.c, docs/kld.md) ---- */
typedef struct ob_kld ob_kld_t;

typedef struct {
    int n_ctx, n_chunks, score_all, bos; /* the perplexity run that made (or must match) the file */
} ob_kld_settings;

#define OB_KLD_NPCT 8 /* percentiles reported: 99.9, 99, 95, 90, 50, 10, 5, 1 */

typedef struct {
    long n;                               /* scored positions */
    double kl_mean, kl_stderr, kl_max, kl_min, kl_pct[OB_KLD_NPCT];
    double same_top, same_top_stderr;     /* fraction of positions whose most probable token agrees */
    double ppl, ppl_base, ln_ppl_ratio, ln_ppl_ratio_stderr;
    double dp_mean, dp_rms;               /* p(next token) of the model minus the base's */
} ob_kld_report;

/* A new base file for a model of n_vocab tokens keeping the top_k tokens of each position. */
int ob_kld_create(const char *path, const ob_kld_settings *s, int n_vocab, int top_k, ob_kld_t **out, char *err,
                  size_t errlen);
/* An existing base file; fills s with the settings the comparison run must use. */
int ob_kld_open(const char *path, ob_kld_settings *s, ob_kld_t **out, char *err, size_t errlen);
/* The on_token hook: writes the position (created file) or compares against it (opened file). */
int ob_kld_token(void *user, const float *logits, int n_vocab, int next, char *err, size_t errlen);
/* Completes the file, or computes the report of a comparison. */
int ob_kld_finish(ob_kld_t *k, ob_kld_report *r, char *err, size_t errlen);
void ob_kld_close(ob_kld_t *k);
void ob_kld_print(FILE *out, const ob_kld_report *r, int json);

/* Perplexity of text (len bytes) under m; the method is described in perplexity.c. */
int ob_perplexity_compute(ob_model_t *m, const char *text, size_t len, const ob_ppl_opts *o, ob_ppl_result *res,
                          char *err, size_t errlen);

#endif
