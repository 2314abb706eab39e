/* perplexity.c — `1bit perplexity`: perplexity of a model over a text file.
 *
 * Owns: tokenizing the file, cutting it into chunks of -c tokens, scoring each chunk with one
 * forward pass, and the report. Method (default, as llama.cpp's llama-perplexity): each chunk
 * starts with BOS when the vocabulary adds one, and only the second half of each chunk is
 * scored, so every scored token has at least n_ctx/2 tokens of context. --score-all scores
 * every token after the first of each chunk and --no-bos feeds the chunks as they are: the
 * convention of a plain "non-overlapping windows" evaluation in transformers.
 * KL divergence: --kl-divergence-base FILE alone saves the distributions of every scored
 * position to FILE; with --kl-divergence it compares this model against FILE instead (the
 * file format and the statistics are kld.c's, docs/kld.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "tools/tools.h"

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit perplexity -m FILE.gguf -f TEXT_FILE [options]\n"
            "  -c, --ctx-size N   tokens per chunk (default 512)\n"
            "  -b, --batch-size N tokens per forward pass (default: the chunk)\n"
            "  --chunks N         score at most N chunks (default: all)\n"
            "  --score-all        score every token after the first of each chunk (default: second half)\n"
            "  --no-bos           do not start chunks with BOS\n"
            "  -t, --threads N    CPU threads\n"
            "  -dev, --device D   cpu | cuda | auto (default: cuda when this build has it and a GPU is present)\n"
            "  -ngl N             accepted for llama.cpp compatibility and ignored (--device picks the device)\n"
            "  -o json            print one JSON object instead of text\n"
            "  --kl-divergence-base F  save every scored position's distribution to F (the base model's run)\n"
            "  --kl-divergence    with --kl-divergence-base F: compare this model against F (KL divergence,\n"
            "                     same-top-token rate, PPL ratio); -c, --chunks, --score-all, --no-bos come from F\n"
            "  --kl-top-k N       tokens kept per position in F (default 64; the rest is one bucket, docs/kld.md)\n");
    return 2;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *len = (size_t)n; }
    return buf;
}

int ob_perplexity_compute(ob_model_t *m, const char *text, size_t len, const ob_ppl_opts *o, ob_ppl_result *res,
                          char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    const ob_tokenizer_t *tok = ob_model_tokenizer(m);
    int n_ctx = o->n_ctx, n_batch = o->n_batch > 0 && o->n_batch < o->n_ctx ? o->n_batch : o->n_ctx;
    int need = ob_tokenizer_encode(tok, text, len, 0, 0, NULL, 0);
    int32_t *ids = need > 0 ? malloc((size_t)need * sizeof *ids) : NULL;
    int n_tok = ids ? ob_tokenizer_encode(tok, text, len, 0, 0, ids, need) : -1;
    int bos = o->no_bos ? -1 : ob_tokenizer_bos(tok);
    int first = bos >= 0 ? 1 : 0; /* chunk positions taken by BOS */
    int per_chunk = n_ctx - first;
    int n_chunks = n_tok > 0 ? n_tok / per_chunk : 0;
    if (o->max_chunks > 0 && n_chunks > o->max_chunks) n_chunks = o->max_chunks;
    int rc = -1;
    ob_ctx_t *c = NULL;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk), *pos = malloc((size_t)n_ctx * sizeof *pos);
    int8_t *want = malloc((size_t)n_ctx);
    if (n_chunks < 1) {
        snprintf(err, errlen, "the text has %d tokens, fewer than one chunk of %d", n_tok, per_chunk);
        goto out;
    }
    ob_ctx_params cp = {n_ctx, 1, n_batch, OB_KV_F16, OB_KV_F16};
    if (ob_ctx_new(m, &cp, &c, err, errlen)) goto out;
    int V = ob_model_get_info(m)->n_vocab;
    int64_t t0 = ob_time_us();
    for (int ch = 0; ch < n_chunks; ch++) {
        if (first) chunk[0] = bos;
        memcpy(chunk + first, ids + (size_t)ch * per_chunk, (size_t)per_chunk * sizeof *chunk);
        int start = o->score_all ? 1 : n_ctx / 2; /* first scored position: predicted by logits of start-1 */
        ob_kv_seq_truncate(c, 0, 0);
        for (int i0 = 0; i0 < n_ctx; i0 += n_batch) {
            int cnt = n_ctx - i0 < n_batch ? n_ctx - i0 : n_batch;
            int n_out = 0;
            for (int k = 0; k < cnt; k++) {
                pos[k] = i0 + k;
                want[k] = i0 + k >= start - 1 && i0 + k < n_ctx - 1;
            }
            ob_batch b = {cnt, chunk + i0, pos, NULL, want};
            if (ob_decode(c, &b, err, errlen)) goto out;
            for (int k = 0; k < cnt; k++) {
                if (!want[k]) continue;
                const float *l = ob_get_logits(c, n_out++);
                float mx = -INFINITY;
                for (int v = 0; v < V; v++) if (l[v] > mx) mx = l[v];
                double sum = 0;
                for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
                double lp = (double)l[chunk[i0 + k + 1]] - mx - log(sum);
                if (o->on_token && o->on_token(o->user, l, V, chunk[i0 + k + 1], err, errlen)) goto out;
                res->nll_sum -= lp;
                res->nll_sq += lp * lp;
                res->scored++;
            }
        }
        if (o->progress)
            fprintf(stderr, "[%d/%d] ppl %.4f (%.1f s)\n", ch + 1, n_chunks, exp(res->nll_sum / res->scored),
                    (ob_time_us() - t0) / 1e6);
    }
    res->chunks = n_chunks;
    res->bos = first;
    double mean = res->nll_sum / res->scored, var = res->nll_sq / res->scored - mean * mean;
    res->ppl = exp(mean);
    /* Standard error of the mean NLL, propagated to perplexity (as llama-perplexity reports). */
    res->ppl_stderr = res->scored > 1 && var > 0 ? res->ppl * sqrt(var / (res->scored - 1)) : 0;
    rc = 0;
out:
    ob_ctx_free(c);
    free(chunk);
    free(pos);
    free(want);
    free(ids);
    return rc;
}

int ob_cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *fmt = "text", *kld_path = NULL;
    ob_ppl_opts o = {512, 0, 0, 0, 0, 1, NULL, NULL};
    int threads = 0, kld_compare = 0, kld_top_k = 64, set_c = 0;
    const char *device = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model_path = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has) text_path = argv[++i];
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && has) { o.n_ctx = atoi(argv[++i]); set_c = 1; }
        else if (!strcmp(a, "--kl-divergence-base") && has) kld_path = argv[++i];
        else if (!strcmp(a, "--kl-divergence")) kld_compare = 1;
        else if (!strcmp(a, "--kl-top-k") && has) kld_top_k = atoi(argv[++i]);
        else if ((!strcmp(a, "-b") || !strcmp(a, "--batch-size")) && has) o.n_batch = atoi(argv[++i]);
        else if (!strcmp(a, "--chunks") && has) o.max_chunks = atoi(argv[++i]);
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) threads = atoi(argv[++i]);
        else if ((!strcmp(a, "--device") || !strcmp(a, "-dev")) && has) device = argv[++i];
        else if ((!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) && has) i++;
        else if (!strcmp(a, "-o") && has) fmt = argv[++i];
        else if (!strcmp(a, "--score-all")) o.score_all = 1;
        else if (!strcmp(a, "--no-bos")) o.no_bos = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        else { fprintf(stderr, "perplexity: unknown or incomplete option '%s'\n", a); return usage(); }
    }
    if (!model_path || !text_path) return usage();
    if (o.n_ctx < 4 || o.n_ctx > 1 << 20 || o.n_batch < 0 || o.max_chunks < 0 || threads < 0) {
        fprintf(stderr, "perplexity: -c must be >= 4; -b, --chunks, -t must be >= 0\n");
        return 2;
    }
    if (strcmp(fmt, "text") && strcmp(fmt, "json")) { fprintf(stderr, "perplexity: -o must be text or json\n"); return 2; }
    if (kld_compare && !kld_path) { fprintf(stderr, "perplexity: --kl-divergence needs --kl-divergence-base FILE\n"); return 2; }
    if (kld_top_k < 1) { fprintf(stderr, "perplexity: --kl-top-k must be >= 1\n"); return 2; }
    o.progress = !strcmp(fmt, "text");
    size_t len = 0;
    char *text = read_file(text_path, &len);
    if (!text) { fprintf(stderr, "perplexity: cannot read '%s'\n", text_path); return 1; }
    char err[1024];
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = threads;
    mp.device = device;
    ob_model_t *m = NULL;
    if (ob_model_load(model_path, &mp, &m, err, sizeof err)) { fprintf(stderr, "perplexity: %s\n", err); free(text); return 1; }
    ob_ppl_result r;
    ob_kld_t *kld = NULL;
    ob_kld_report kr;
    ob_kld_settings ks = {o.n_ctx, o.max_chunks, o.score_all, !o.no_bos};
    int rc = 0;
    if (kld_path && kld_compare) {
        rc = ob_kld_open(kld_path, &ks, &kld, err, sizeof err);
        if (!rc && set_c && ks.n_ctx != o.n_ctx)
            rc = -1, snprintf(err, sizeof err, "-c %d differs from the base's -c %d (leave it out: it comes from the file)", o.n_ctx, ks.n_ctx);
        o.n_ctx = ks.n_ctx, o.max_chunks = ks.n_chunks, o.score_all = ks.score_all, o.no_bos = !ks.bos;
    } else if (kld_path) {
        rc = ob_kld_create(kld_path, &ks, ob_model_get_info(m)->n_vocab, kld_top_k, &kld, err, sizeof err);
    }
    if (kld) o.on_token = ob_kld_token, o.user = kld;
    if (!rc) rc = ob_perplexity_compute(m, text, len, &o, &r, err, sizeof err);
    if (!rc && kld) rc = ob_kld_finish(kld, &kr, err, sizeof err);
    ob_kld_close(kld);
    free(text);
    ob_model_free(m);
    if (rc) { fprintf(stderr, "perplexity: %s\n", err); return 1; }
    if (kld_compare) {
        if (strcmp(fmt, "json")) printf("perplexity: %.4f +/- %.4f over %ld tokens\n", r.ppl, r.ppl_stderr, r.scored);
        ob_kld_print(stdout, &kr, !strcmp(fmt, "json"));
        return 0;
    }
    if (kld_path && strcmp(fmt, "json")) fprintf(stderr, "perplexity: saved %ld positions to %s\n", kr.n, kld_path);
    if (!strcmp(fmt, "json"))
        printf("{\"model\": \"%s\", \"file\": \"%s\", \"n_ctx\": %d, \"chunks\": %d, \"tokens_scored\": %ld, "
               "\"score_all\": %s, \"bos\": %s, \"nll\": %.6f, \"ppl\": %.6f, \"ppl_stderr\": %.6f}\n",
               model_path, text_path, o.n_ctx, r.chunks, r.scored, o.score_all ? "true" : "false", r.bos ? "true" : "false",
               r.nll_sum / r.scored, r.ppl, r.ppl_stderr);
    else
        printf("perplexity: %.4f +/- %.4f over %ld tokens (%d chunks of %d, %s, %s)\n", r.ppl, r.ppl_stderr, r.scored,
               r.chunks, o.n_ctx, o.score_all ? "all tokens scored" : "second halves scored",
               r.bos ? "BOS first" : "no BOS");
    return 0;
}
