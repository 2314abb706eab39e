/* serve.c — `1bit serve`: the OpenAI-compatible server, launched like llama-server.
 *
 * Owns: the command line (one table of flags, llama-server's names), the model load (in a
 * thread, so /health answers 503 while it runs; -hf downloads first), creating the scheduler,
 * starting HTTP, and a clean shutdown on SIGTERM/SIGINT (streams end, requests are cancelled,
 * the listener closes, everything is freed) well within 5 s.
 * Does not own: HTTP (server/http.c), the API (server/openai_*.c), batching (the scheduler).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "onebit.h"
#include "server/server.h"
#include "tools/tools.h"

#ifndef OB_BUILD_NUMBER
#define OB_BUILD_NUMBER 0
#endif
#ifndef OB_GIT_COMMIT
#define OB_GIT_COMMIT "unknown"
#endif

enum { F_STR, F_INT, F_BOOL, F_NOOP, F_NOOP_VAL, F_NGL, F_FLOAT };

#define OFF(field) offsetof(ob_serve_config, field)
static const struct flag {
    const char *s, *l;           /* short and long names (either may be NULL) */
    int type;
    size_t off;
    int lo, hi;
    const char *arg, *help;
} flags[] = {
    {"-m", "--model", F_STR, OFF(model), 0, 0, "FILE", "GGUF model to serve (default: the demo model built into 1bit)"},
    {"-hf", "--hf-repo", F_STR, OFF(hf_repo), 0, 0, "REPO[:QUANT]", "download a GGUF from Hugging Face into the cache (resumable, sha256-verified) and serve it"},
    {NULL, "--hf-cache", F_STR, OFF(hf_cache), 0, 0, "DIR", "download folder for -hf (default $XDG_CACHE_HOME/1bit or ~/.cache/1bit)"},
    {NULL, "--host", F_STR, OFF(host), 0, 0, "ADDR", "address to listen on (default 127.0.0.1)"},
    {NULL, "--port", F_INT, OFF(port), 0, 65535, "N", "port to listen on (default 8080; 0: any free port)"},
    {"-c", "--ctx-size", F_INT, OFF(n_ctx), 0, 1 << 22, "N", "context size of each slot (default: the model's, at most 4096)"},
    {"-np", "--parallel", F_INT, OFF(n_parallel), 1, 256, "N", "slots: requests generated at once in one batch (default 4)"},
    {"-t", "--threads", F_INT, OFF(n_threads), 0, 1024, "N", "CPU threads (default: all cores)"},
    {"-b", "--batch-size", F_INT, OFF(n_batch), 1, 65536, "N", "most tokens in one forward pass (default 512)"},
    {"-ub", "--ubatch-size", F_INT, OFF(n_ubatch), 1, 65536, "N", "accepted for llama-server compatibility (the batch is -b)"},
    {"-dev", "--device", F_STR, OFF(device), 0, 0, "DEV", "cpu, cuda or auto (default: cuda when this build has it and a GPU is present, else cpu)"},
    {"-ngl", "--n-gpu-layers", F_NGL, OFF(n_gpu_layers), 0, 0, "N", "accepted for compatibility and ignored (a number, 'auto' or 'all'): every layer runs on --device's device"},
    {NULL, "--jinja", F_BOOL, OFF(jinja), 0, 0, NULL, "accepted: chat templates are always Jinja"},
    {NULL, "--chat-template-file", F_STR, OFF(chat_template_file), 0, 0, "FILE", "chat template to use instead of the model's"},
    {"-a", "--alias", F_STR, OFF(alias), 0, 0, "NAME", "model id reported by /v1/models (default: the file's name)"},
    {NULL, "--api-key", F_STR, OFF(api_key), 0, 0, "KEY", "require 'Authorization: Bearer KEY' (then remote hosts and origins are accepted)"},
    {NULL, "--api-key-file", F_STR, OFF(api_key_file), 0, 0, "FILE", "read the API key from the first line of FILE"},
    {NULL, "--metrics", F_BOOL, OFF(metrics), 0, 0, NULL, "serve Prometheus metrics at GET /metrics"},
    {NULL, "--embeddings", F_BOOL, OFF(embeddings), 0, 0, NULL, "serve POST /v1/embeddings (pooling as the model declares; mean if none)"},
    {NULL, "--embedding", F_BOOL, OFF(embeddings), 0, 0, NULL, "same as --embeddings"},
    {NULL, "--reranking", F_BOOL, OFF(reranking), 0, 0, NULL, "accepted; /v1/rerank answers 501 (no ranking head in this build)"},
    {"-to", "--timeout", F_INT, OFF(timeout_s), 1, 86400, "S", "idle connection timeout in seconds (default 600)"},
    {NULL, "--body-limit", F_INT, OFF(max_body_mb), 1, 4096, "MB", "largest request body (default 16); larger ones get 413"},
    {NULL, "--max-header-size", F_INT, OFF(max_header), 1024, 1 << 20, "BYTES", "largest request line + headers (default 16384); larger ones get 431"},
    {NULL, "--max-connections", F_INT, OFF(max_conns), 1, 65536, "N", "open connections (default 256); a request beyond gets 503 + Retry-After"},
    {NULL, "--max-queue", F_INT, OFF(max_queue), 1, 65536, "N", "requests waiting for a slot (default 64); beyond, 503 + Retry-After"},
    {NULL, "--request-timeout", F_INT, OFF(request_timeout_s), 0, 86400, "S", "most seconds one request may take, queue + generation (default 600; 0: no limit); then it ends as finish_reason 'length'"},
    {"-n", "--n-predict", F_INT, OFF(n_predict), -1, 1 << 30, "N", "default max tokens of a request (default -1: until the context is full)"},
    {NULL, "--temp", F_FLOAT, OFF(sp.temp), 0, 100, "T", "default temperature (0.8; 0: greedy)"},
    {NULL, "--top-k", F_INT, OFF(sp.top_k), 0, 1 << 30, "K", "default top-k (40; 0: off)"},
    {NULL, "--top-p", F_FLOAT, OFF(sp.top_p), 0, 1, "P", "default top-p (0.95; 1: off)"},
    {NULL, "--min-p", F_FLOAT, OFF(sp.min_p), 0, 1, "P", "default min-p (0.05; 0: off)"},
    {NULL, "--repeat-penalty", F_FLOAT, OFF(sp.repeat_penalty), 0, 10, "R", "default repeat penalty (1: off)"},
    {NULL, "--presence-penalty", F_FLOAT, OFF(sp.presence_penalty), -2, 2, "P", "default presence penalty (0: off)"},
    {NULL, "--frequency-penalty", F_FLOAT, OFF(sp.frequency_penalty), -2, 2, "P", "default frequency penalty (0: off)"},
    {"-s", "--seed", F_INT, OFF(seed), -1, 2147483647, "S", "default seed (-1: a fresh one per request)"},
    {"-fa", "--flash-attn", F_NOOP_VAL, 0, 0, 0, "on|off|auto", "accepted for compatibility (no effect)"},
    {NULL, "--reasoning-format", F_NOOP_VAL, 0, 0, 0, "FMT", "accepted for compatibility: <think> text is always returned as reasoning_content"},
    {NULL, "--no-webui", F_NOOP, 0, 0, 0, NULL, "accepted for compatibility (there is no web UI)"},
    {NULL, "--no-mmap", F_NOOP, 0, 0, 0, NULL, "accepted for compatibility (no effect)"},
    {"-cb", "--cont-batching", F_NOOP, 0, 0, 0, NULL, "accepted: batching is always continuous"},
    {NULL, "--keep", F_NOOP_VAL, 0, 0, 0, "N", "accepted for compatibility (no effect: a prompt longer than the context is refused)"},
    {NULL, "--no-warmup", F_NOOP, 0, 0, 0, NULL, "accepted for compatibility (there is no warm-up)"},
    {NULL, "--mlock", F_NOOP, 0, 0, 0, NULL, "accepted for compatibility (no effect)"},
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

static int usage(FILE *f) {
    fprintf(f, "usage: 1bit serve -m FILE.gguf [options]   (or -hf REPO[:QUANT])\n\n"
               "An OpenAI-compatible HTTP server; accepts llama-server's flags. Endpoints: docs/serve.md.\n\n");
    for (size_t i = 0; i < N_FLAGS; i++) {
        char names[64];
        snprintf(names, sizeof names, "%s%s%s %s", flags[i].s ? flags[i].s : "", flags[i].s && flags[i].l ? ", " : "",
                 flags[i].l ? flags[i].l : "", flags[i].arg ? flags[i].arg : "");
        fprintf(f, "  %-34s %s\n", names, flags[i].help);
    }
    fprintf(f, "  %-34s %s\n  %-34s %s\n", "--version", "print 'version: N (commit)' and exit", "-h, --help", "this help");
    return f == stderr ? 2 : 0;
}

static int parse_flags(int argc, char **argv, ob_serve_config *cfg) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char name[64];
        /* --flag=value */
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        const struct flag *f = NULL;
        for (size_t k = 0; k < N_FLAGS && !f; k++)
            if ((flags[k].s && !strcmp(name, flags[k].s)) || (flags[k].l && !strcmp(name, flags[k].l))) f = &flags[k];
        if (!f) { fprintf(stderr, "serve: unknown option '%s' (see 1bit serve --help)\n", a); return -1; }
        int needs = f->type != F_BOOL && f->type != F_NOOP;
        if (needs) {
            if (eq) val = eq + 1;
            else if (i + 1 < argc) val = argv[++i];
            else { fprintf(stderr, "serve: option '%s' needs a value\n", name); return -1; }
        } else if (eq) {
            fprintf(stderr, "serve: option '%s' takes no value\n", name);
            return -1;
        }
        char *base = (char *)cfg + f->off;
        if (f->type == F_STR) {
            if (!*val) { fprintf(stderr, "serve: option '%s' needs a non-empty value\n", name); return -1; }
            *(const char **)base = val;
        } else if (f->type == F_INT || f->type == F_NGL) {
            char *end;
            errno = 0;
            long v = strtol(val, &end, 10);
            if (f->type == F_NGL && (!strcmp(val, "auto") || !strcmp(val, "all"))) v = 999, end = (char *)val + strlen(val);
            if (*end || end == val || errno || (f->type == F_INT && (v < f->lo || v > f->hi)) || (f->type == F_NGL && v < -1)) {
                if (f->type == F_INT) fprintf(stderr, "serve: option '%s': '%s' is not an integer in %d..%d\n", name, val, f->lo, f->hi);
                else fprintf(stderr, "serve: option '%s': '%s' is not a number, 'auto' or 'all'\n", name, val);
                return -1;
            }
            *(int *)base = (int)v;
        } else if (f->type == F_FLOAT) {
            char *end;
            double v = strtod(val, &end);
            if (*end || end == val || !(v >= f->lo && v <= f->hi)) {
                fprintf(stderr, "serve: option '%s': '%s' is not a number in %d..%d\n", name, val, f->lo, f->hi);
                return -1;
            }
            *(float *)base = (float)v;
        } else if (f->type == F_BOOL) {
            *(int *)base = 1;
        }
    }
    return 0;
}

/* ---- loading ----------------------------------------------------------------------------- */
static char *read_file(const char *path, size_t limit) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    ob_sbuf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len <= limit) ob_sbuf_put(&b, chunk, n);
    fclose(f);
    if (!b.p) return strdup("");
    return b.p;
}

static void *load_main(void *arg) {
    ob_server *S = arg;
    char *err = S->load_error;
    size_t errlen = sizeof S->load_error;
    const ob_serve_config *c = &S->cfg;
    char *path = NULL;
    if (c->hf_repo) {
        if (ob_hf_download(c->hf_repo, c->hf_cache, &path, err, errlen)) goto fail;
    } else {
        path = strdup(c->model);
    }
    S->model_path = path;
    ob_model_params mp = ob_model_default_params();
    mp.device = c->device ? c->device : "auto";
    mp.n_threads = c->n_threads;
    if (ob_model_load(path, &mp, &S->model, err, errlen)) goto fail;
    S->tok = ob_model_tokenizer(S->model);
    if (ob_srv_chat_load(S, path, c->chat_template_file, err, errlen)) goto fail;
    S->tool_format = ob_srv_chat_tool_format(S->chat_template);
    if (!S->model_id) {
        const char *base = strrchr(path, '/');
        S->model_id = strdup(base ? base + 1 : path);
    }
    ob_sched_params sp = ob_sched_default_params();
    sp.n_slots = c->n_parallel;
    sp.n_ctx = c->n_ctx;
    sp.n_batch = c->n_batch;
    sp.max_queue = c->max_queue;
    if (ob_sched_new(S->model, &sp, &S->sched, err, errlen)) goto fail;
    if (c->embeddings) {
        ob_ctx_params cp = {ob_sched_n_ctx(S->sched), 1, 512, OB_KV_F16, OB_KV_F16};
        if (ob_ctx_new(S->model, &cp, &S->embd_ctx, err, errlen)) goto fail;
        ob_ctx_set_embeddings(S->embd_ctx, 1);
    }
    atomic_store(&S->state, OB_SERVER_READY);
    return NULL;
fail:
    atomic_store(&S->state, OB_SERVER_FAILED);
    return NULL;
}

int ob_cmd_serve(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) {
            printf("version: %d (%s)\nbuilt with 1bit %s\n", OB_BUILD_NUMBER, OB_GIT_COMMIT, OB_VERSION_STRING);
            return 0;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
    }
    static ob_server S_; /* static: handlers may still hold it while the process exits */
    ob_server *S = &S_;
    ob_serve_config *c = &S->cfg;
    c->port = 8080;
    c->n_parallel = 4;
    c->n_batch = 512;
    c->max_body_mb = 16;
    c->timeout_s = 600;
    c->max_header = 16384;
    c->max_conns = 256;
    c->max_queue = 64;
    c->request_timeout_s = 600;
    c->sp = ob_sampler_default_params();
    c->n_predict = -1;
    c->seed = -1;
    if (parse_flags(argc, argv, c)) return 2;
    if (c->n_predict == 0) { fprintf(stderr, "serve: option '--n-predict' must be -1 or at least 1\n"); return 2; }
    if (!c->model && !c->hf_repo) {
        if (!ob_has_default_model()) {
            fprintf(stderr, "serve: no model given (-m FILE.gguf or -hf REPO[:QUANT]), and this build has no default model\n");
            return 2;
        }
        c->model = OB_DEFAULT_MODEL; /* the demo model built into the binary */
    }
    if (c->model && c->hf_repo) { fprintf(stderr, "serve: give -m or -hf, not both\n"); return 2; }
    char *key = NULL;
    if (c->api_key_file) {
        key = read_file(c->api_key_file, 4096);
        if (!key) { fprintf(stderr, "serve: --api-key-file '%s': cannot read it\n", c->api_key_file); return 2; }
        key[strcspn(key, "\r\n")] = 0;
        if (!*key) { fprintf(stderr, "serve: --api-key-file '%s' is empty\n", c->api_key_file); free(key); return 2; }
        c->api_key = key;
    }
    if (c->chat_template_file) {
        FILE *tf = fopen(c->chat_template_file, "rb");
        if (!tf) { fprintf(stderr, "serve: --chat-template-file '%s': cannot read it\n", c->chat_template_file); return 2; }
        fclose(tf);
    }
    if (c->alias) S->model_id = strdup(c->alias);
    else if (!strcmp(c->model ? c->model : "", OB_DEFAULT_MODEL)) S->model_id = strdup("1bit-demo");
    S->t_start_us = ob_time_us();
    S->t_start_wall = (long)time(NULL);
    pthread_mutex_init(&S->embd_mu, NULL);

    /* Signals go to this thread only (sigwait below); the others inherit the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    ob_http_config hc = {.host = c->host, .port = c->port, .api_key = c->api_key, .max_body = (size_t)c->max_body_mb << 20,
                         .max_header = (size_t)c->max_header, .max_conns = c->max_conns, .timeout_s = c->timeout_s,
                         .request_timeout_s = c->request_timeout_s, .routes = ob_server_routes,
                         .n_routes = ob_server_n_routes, .app = S};
    ob_http_t *h = NULL;
    if (ob_http_start(&hc, &h, err, sizeof err)) { fprintf(stderr, "serve: %s\n", err); free(key); return 1; }
    fprintf(stderr, "serve: listening on http://%s:%d (loading the model)\n", c->host ? c->host : "127.0.0.1", ob_http_port(h));
    pthread_t loader;
    pthread_create(&loader, NULL, load_main, S);
    int loaded = 0, rc = 0;
    for (;;) {
        struct timespec ts = {0, 50 * 1000000L};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT) break;
        int st = atomic_load(&S->state);
        if (!loaded && st != OB_SERVER_LOADING) {
            loaded = 1;
            if (st == OB_SERVER_FAILED) {
                fprintf(stderr, "serve: cannot load the model: %s\n", S->load_error);
                rc = 1;
                break;
            }
            const ob_model_info *mi = ob_model_get_info(S->model);
            fprintf(stderr, "serve: ready: %s (%s, %s), %d slots x %d context, http://%s:%d\n", S->model_id, mi->arch,
                    mi->type_name, ob_sched_n_slots(S->sched), ob_sched_n_ctx(S->sched), c->host ? c->host : "127.0.0.1",
                    ob_http_port(h));
        }
    }
    /* Shutdown: streams notice 'stopping' within 50 ms and cancel their requests. */
    int64_t t0 = ob_time_us();
    atomic_store(&S->stopping, 1);
    ob_http_quiesce(h);
    pthread_join(loader, NULL);
    ob_http_stop(h);
    ob_sched_free(S->sched);
    ob_ctx_free(S->embd_ctx);
    ob_model_free(S->model);
    fprintf(stderr, "serve: stopped in %.0f ms\n", (ob_time_us() - t0) / 1e3);
    free(S->model_path);
    free(S->model_id);
    ob_srv_chat_free(S);
    free(key);
    return rc;
}
