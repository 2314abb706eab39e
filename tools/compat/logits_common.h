/* logits_common.h — what llama_logits.c and ob_logits.c share (docs/compat.md).
 *
 * Owns: the command-line options both programs take (MODEL.gguf, -t, --ids, -o, --threads),
 * reading the token ids (a {"tokens": [...]} JSON file or a comma-separated list), and writing
 * logits as raw little-endian float32 [n_tokens][n_vocab]. Every message starts with the
 * program's name (lc_args.prog).
 * Does not own: loading or running a model (each program's own engine), the comparison
 * (compare.py).
 */
#ifndef COMPAT_LOGITS_COMMON_H
#define COMPAT_LOGITS_COMMON_H

#include <stdint.h>

typedef struct {
    const char *prog;        /* "llama_logits" or "ob_logits", the prefix of every message */
    const char *model_path;  /* the one positional argument */
    const char *tok_path;    /* -t FILE */
    const char *ids_arg;     /* --ids LIST */
    const char *out_path;    /* -o FILE */
    int n_threads;           /* --threads N (the caller sets the default) */
} lc_args;

/* If argv[*i] is -t, --ids, -o or --threads with its value, takes it (advancing *i past the
 * value) and returns 1; otherwise returns 0 and leaves *i alone. */
int lc_option(lc_args *a, int argc, char **argv, int *i);

/* For an argument no option took: the model path the first time, otherwise an error
 * ("unknown or incomplete option" / "unexpected argument", printed). Returns 0 or -1. */
int lc_positional(lc_args *a, const char *arg);

/* The token ids of -t (tok_path) or else --ids (ids_arg), malloc'ed into *out. 0, or -1
 * with a message. */
int lc_load_tokens(const lc_args *a, int32_t **out, int *n_out);

/* Writes row(ud, i) (n_vocab floats each) for i = 0..n_tokens-1 to path. 0, or 1 with a
 * message (a NULL row is an error). */
int lc_write_logits(const char *prog, const char *path, int n_tokens, int n_vocab,
                    const float *(*row)(void *ud, int i), void *ud);

#endif
