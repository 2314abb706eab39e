/* run.c — `1bit run`: one prompt's continuation in the terminal.
 *
 * Owns: option parsing, feeding the prompt in batches, the sample-decode loop, streaming the
 * text to stdout and the speed report to stderr. Everything else is the engine API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "tools/tools.h"

static int usage(void) {
    fprintf(stderr,
            "usage: 1bit run -m FILE.gguf -p TEXT [options]\n"
            "  -m, --model FILE      GGUF model (default: the demo model built into 1bit)\n"
            "  -p, --prompt TEXT     prompt text\n"
            "  -n, --n-predict N     tokens to generate (default 128)\n"
            "  -c, --ctx-size N      context size (default: prompt + n, at most the model's)\n"
            "  -t, --threads N       CPU threads (default: all cores)\n"
            "  -b, --batch-size N    prompt tokens per forward pass (default 512)\n"
            "  --temp T              temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N,\n"
            "  --presence-penalty P, --frequency-penalty P, --seed S\n"
            "  --ignore-eos          keep generating past end-of-generation tokens\n"
            "  -dev, --device D      cpu | cuda | auto (default: cuda when this build has it and a GPU is\n"
            "                        present, else cpu)\n"
            "  -ngl, --n-gpu-layers N  accepted for llama.cpp compatibility and ignored: every layer runs on\n"
            "                        --device's device\n");
    return 2;
}

/* Parses a number option; exits the command with a message naming the flag on bad input. */
static int num_arg(int argc, char **argv, int *i, double *out) {
    if (*i + 1 >= argc) { fprintf(stderr, "run: option '%s' needs a value\n", argv[*i]); return -1; }
    char *end;
    *out = strtod(argv[*i + 1], &end);
    if (*end || end == argv[*i + 1]) { fprintf(stderr, "run: option '%s': '%s' is not a number\n", argv[*i], argv[*i + 1]); return -1; }
    (*i)++;
    return 0;
}

int ob_cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *device = "auto";
    double n_predict = 128, n_ctx = 0, threads = 0, n_batch = 512, v;
    int ignore_eos = 0;
    ob_sampler_params sp = ob_sampler_default_params();
    sp.seed = 0xC0FFEE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model_path = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if ((!strcmp(a, "--device") || !strcmp(a, "-dev")) && i + 1 < argc) device = argv[++i];
        else if ((!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) && i + 1 < argc) i++;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (num_arg(argc, argv, &i, &n_predict)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (num_arg(argc, argv, &i, &n_ctx)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (num_arg(argc, argv, &i, &threads)) return 2; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (num_arg(argc, argv, &i, &n_batch)) return 2; }
        else if (!strcmp(a, "--temp")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.temp = (float)v; }
        else if (!strcmp(a, "--top-k")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.top_k = (int)v; }
        else if (!strcmp(a, "--top-p")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.top_p = (float)v; }
        else if (!strcmp(a, "--min-p")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.min_p = (float)v; }
        else if (!strcmp(a, "--repeat-penalty")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.repeat_penalty = (float)v; }
        else if (!strcmp(a, "--repeat-last-n")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.penalty_last_n = (int)v; }
        else if (!strcmp(a, "--presence-penalty")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.presence_penalty = (float)v; }
        else if (!strcmp(a, "--frequency-penalty")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.frequency_penalty = (float)v; }
        else if (!strcmp(a, "--seed")) { if (num_arg(argc, argv, &i, &v)) return 2; sp.seed = (uint64_t)v; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage();
        else { fprintf(stderr, "run: unknown or incomplete option '%s'\n", a); return usage(); }
    }
    if (!model_path && !ob_has_default_model()) {
        fprintf(stderr, "run: no model given (-m FILE.gguf), and this build has no default model\n");
        return usage();
    }
    if (!model_path) model_path = OB_DEFAULT_MODEL;
    if (!prompt) { fprintf(stderr, "run: no prompt given (-p TEXT)\n"); return usage(); }
    if (n_predict < 0 || n_predict > 1e7 || n_batch < 1 || n_batch > 65536 || threads < 0 || threads > 1024 || n_ctx < 0 || n_ctx > 1e7) {
        fprintf(stderr, "run: an option value is out of range\n");
        return 2;
    }

    char err[1024];
    ob_model_params mp = ob_model_default_params();
    mp.device = device;
    mp.n_threads = (int)threads;
    ob_model_t *m = NULL;
    if (ob_model_load(model_path, &mp, &m, err, sizeof err)) { fprintf(stderr, "run: %s\n", err); return 1; }
    const ob_model_info *info = ob_model_get_info(m);
    const ob_tokenizer_t *tok = ob_model_tokenizer(m);

    size_t plen = strlen(prompt);
    int cap = (int)plen + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n_prompt = ob_tokenizer_encode(tok, prompt, plen, 1, 1, ids, cap);
    int rc = 1;
    ob_ctx_t *c = NULL;
    ob_sampler_t *smp = NULL;
    if (n_prompt < 0 || n_prompt > cap) { fprintf(stderr, "run: could not tokenize the prompt\n"); goto out; }
    if (n_prompt == 0) { fprintf(stderr, "run: the prompt has no tokens\n"); goto out; }
    ob_ctx_params cp = ob_ctx_default_params();
    int want_ctx = n_prompt + (int)n_predict;
    cp.n_ctx = n_ctx > 0 ? (int)n_ctx : (want_ctx < info->n_ctx_train ? want_ctx : info->n_ctx_train);
    cp.n_batch = (int)n_batch;
    if (n_prompt >= cp.n_ctx) {
        fprintf(stderr, "run: the prompt (%d tokens) exceeds the available context size (%d)\n", n_prompt, cp.n_ctx);
        goto out;
    }
    if (ob_ctx_new(m, &cp, &c, err, sizeof err)) { fprintf(stderr, "run: %s\n", err); goto out; }
    smp = ob_sampler_new(&sp, info->n_vocab);
    if (!smp) { fprintf(stderr, "run: invalid sampler parameters (temperature, top-k/p, min-p or penalties)\n"); goto out; }
    int32_t *pos = malloc((size_t)cp.n_batch * sizeof *pos);

    int64_t t0 = ob_time_us();
    for (int i0 = 0; i0 < n_prompt; i0 += cp.n_batch) {
        int cnt = n_prompt - i0 < cp.n_batch ? n_prompt - i0 : cp.n_batch;
        for (int k = 0; k < cnt; k++) pos[k] = i0 + k;
        ob_batch b = {cnt, ids + i0, pos, NULL, NULL};
        if (ob_decode(c, &b, err, sizeof err)) { fprintf(stderr, "run: %s\n", err); free(pos); goto out; }
    }
    for (int i = 0; i < n_prompt; i++) ob_sampler_accept(smp, ids[i]);
    int64_t t1 = ob_time_us();
    int n_gen = 0, p = n_prompt;
    char piece[256];
    while (n_gen < (int)n_predict && p < cp.n_ctx) {
        int32_t next = ob_sampler_sample(smp, ob_get_logits(c, 0));
        ob_sampler_accept(smp, next);
        n_gen++;
        if (!ignore_eos && ob_tokenizer_is_eog(tok, next)) break;
        int len = ob_tokenizer_token_bytes(tok, next, piece, sizeof piece);
        if (len > 0) fwrite(piece, 1, (size_t)(len < (int)sizeof piece ? len : (int)sizeof piece), stdout);
        fflush(stdout);
        if (n_gen == (int)n_predict) break;
        ob_batch b = {1, &next, &p, NULL, NULL};
        if (ob_decode(c, &b, err, sizeof err)) { fprintf(stderr, "\nrun: %s\n", err); free(pos); goto out; }
        p++;
    }
    int64_t t2 = ob_time_us();
    printf("\n");
    double pms = (t1 - t0) / 1e3, gms = (t2 - t1) / 1e3;
    fprintf(stderr, "prompt: %d tokens in %.1f ms (%.2f tok/s)\n", n_prompt, pms, n_prompt / (pms / 1e3));
    fprintf(stderr, "decode: %d tokens in %.1f ms (%.2f tok/s)\n", n_gen, gms, n_gen > 0 ? n_gen / (gms / 1e3) : 0.0);
    free(pos);
    rc = 0;
out:
    ob_sampler_free(smp);
    ob_ctx_free(c);
    free(ids);
    ob_model_free(m);
    return rc;
}
