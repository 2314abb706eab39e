/* test_kld.c — `1bit perplexity --kl-divergence-base / --kl-divergence` (kld.c, docs/kld.md).
 *
 * On the golden Llama model (f32 as the base): the model against itself gives KL exactly 0 and
 * the same top token everywhere; q8_0 gives a small positive KL, q4_0 a larger one; the file
 * carries the run's settings; another text, a truncated or foreign file is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onebit.h"
#include "test.h"
#include "tools/tools.h"

static const char *kld_text =
    "The quick brown fox jumps over the lazy dog. A tiny model reads this text in small chunks, and every "
    "position it scores is saved by the base run so that a quantized copy can be compared token by token. "
    "Pack my box with five dozen liquor jugs; how vexingly quick daft zebras jump! Sphinx of black quartz, "
    "judge my vow. The five boxing wizards jump quickly over the fence while the dog sleeps in the sun.";

static int run(const char *gguf, const char *kld, int compare, int top_k, ob_kld_report *r, ob_ppl_result *pr, char *err,
               size_t errlen) {
    ob_model_t *m = NULL;
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    if (ob_model_load(gguf, &mp, &m, err, errlen)) return -1;
    ob_ppl_opts o = {32, 0, 0, 1, 0, 0, NULL, NULL};
    ob_kld_settings ks = {o.n_ctx, o.max_chunks, o.score_all, !o.no_bos};
    ob_kld_t *k = NULL;
    int rc = compare ? ob_kld_open(kld, &ks, &k, err, errlen)
                     : ob_kld_create(kld, &ks, ob_model_get_info(m)->n_vocab, top_k, &k, err, errlen);
    if (!rc) {
        o.n_ctx = ks.n_ctx, o.max_chunks = ks.n_chunks, o.score_all = ks.score_all, o.no_bos = !ks.bos;
        o.on_token = ob_kld_token, o.user = k;
        rc = ob_perplexity_compute(m, kld_text, strlen(kld_text), &o, pr, err, errlen);
        if (!rc) rc = ob_kld_finish(k, r, err, errlen);
    }
    ob_kld_close(k);
    ob_model_free(m);
    return rc;
}

OB_SUITE(kld) {
    char base[256], kf[256], kf8[256], err[512];
    const char *types[] = {"f32", "q8_0", "q4_0"};
    char paths[3][256];
    for (int i = 0; i < 3; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/kld-llama-%s.gguf", ob_test_tmpdir(), types[i]);
        char *argv[] = {"convert", "tests/golden/llama", "-o", paths[i], "--type", (char *)types[i], NULL};
        CHECK_EQ_INT(ob_cmd_convert(6, argv), 0);
    }
    snprintf(base, sizeof base, "%s", paths[0]);
    snprintf(kf, sizeof kf, "%s/llama-f32.kld", ob_test_tmpdir());
    snprintf(kf8, sizeof kf8, "%s/llama-f32-k8.kld", ob_test_tmpdir());
    ob_kld_report r, r8;
    ob_ppl_result pr, pr0;
    CHECK_EQ_INT(run(base, kf, 0, 400, &r, &pr0, err, sizeof err), 0); /* K >= vocab (320): the exact KL */
    CHECK(r.n == pr0.scored && r.n > 50);
    CHECK_EQ_INT(run(base, kf8, 0, 8, &r, &pr0, err, sizeof err), 0);

    /* the model against itself */
    CHECK_EQ_INT(run(base, kf, 1, 0, &r, &pr, err, sizeof err), 0);
    CHECK(r.kl_mean == 0 && r.kl_max == 0);
    CHECK(r.same_top == 1.0);
    CHECK_NEAR(r.ppl / pr0.ppl, 1.0, 1e-6);
    CHECK(r.ln_ppl_ratio == 0 && r.dp_rms == 0);
    CHECK_EQ_INT(run(base, kf8, 1, 0, &r8, &pr, err, sizeof err), 0);
    CHECK(r8.kl_mean == 0 && r8.same_top == 1.0);

    /* q8_0: small and positive; q4_0: larger; top-8 + the rest bucket is a lower bound */
    ob_kld_report q8, q4, q4k;
    CHECK_EQ_INT(run(paths[1], kf, 1, 0, &q8, &pr, err, sizeof err), 0);
    CHECK_EQ_INT(run(paths[2], kf, 1, 0, &q4, &pr, err, sizeof err), 0);
    CHECK_EQ_INT(run(paths[2], kf8, 1, 0, &q4k, &pr, err, sizeof err), 0);
    if (ob_test_verbose)
        fprintf(stderr, "  KL vs f32: q8_0 %.6f (same top %.3f), q4_0 %.6f (same top %.3f), q4_0 top-8 %.6f\n", q8.kl_mean,
                q8.same_top, q4.kl_mean, q4.same_top, q4k.kl_mean);
    CHECK(q8.kl_mean > 0 && q8.kl_mean < 0.01);
    CHECK(q4.kl_mean > 5 * q8.kl_mean);
    CHECK(q8.same_top > q4.same_top && q8.same_top >= 0.9);
    /* a lower bound; loose here, where the tiny random model spreads its mass (PPL ~1300 of 320) */
    CHECK(q4k.kl_mean <= q4.kl_mean * (1 + 1e-9) && q4k.kl_mean > 0);
    CHECK(q4.kl_pct[4] <= q4.kl_pct[0] && q4.kl_min <= q4.kl_pct[7] && q4.kl_pct[0] <= q4.kl_max);
    CHECK(q4.kl_stderr > 0 && q4.kl_stderr < q4.kl_mean);
    CHECK(fabs(q4.ppl - pr.ppl) < 1e-6 * pr.ppl);

    /* Settings come from the file: a base made with --score-all adopts it. */
    ob_kld_settings ks;
    ob_kld_t *k = NULL;
    CHECK_EQ_INT(ob_kld_open(kf, &ks, &k, err, sizeof err), 0);
    CHECK(ks.n_ctx == 32 && ks.score_all == 1 && ks.bos == 1 && ks.n_chunks == 0);
    ob_kld_close(k);

    /* Refusals: another text, a foreign file, a truncated file. */
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(base, NULL, &m, err, sizeof err), 0);
    CHECK_EQ_INT(ob_kld_open(kf, &ks, &k, err, sizeof err), 0);
    ob_ppl_opts o = {32, 0, 0, 1, 0, 0, ob_kld_token, k};
    const char *other = "Completely different words make different tokens at every position of this chunk, so the "
                        "comparison must stop at the first one that differs from the base file's tokens.";
    CHECK_EQ_INT(ob_perplexity_compute(m, other, strlen(other), &o, &pr, err, sizeof err), -1);
    CHECK(strstr(err, "another text") != NULL);
    ob_kld_close(k);
    ob_model_free(m);
    CHECK_EQ_INT(ob_kld_open(base, &ks, &k, err, sizeof err), -1); /* a GGUF file */
    CHECK(strstr(err, "not a complete 1bit KL base file") != NULL);
    FILE *f = fopen(kf, "r+b");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    CHECK(truncate(kf, len - 5) == 0);
    CHECK_EQ_INT(ob_kld_open(kf, &ks, &k, err, sizeof err), -1);
    remove(kf);
    remove(kf8);
    for (int i = 0; i < 3; i++) remove(paths[i]);
}
