/* bench_svg.c — the chart of the serving benchmark, written as plain SVG text (no plotting
 * stack): three panels against concurrency (log2 axis) — aggregate output tokens/s, time to
 * first token (p50 solid, p99 dashed) and per-request decode tokens/s (p50) — one colored line
 * per server of each result file; and `1bit bench plot`, which overlays result files.
 * Does not own: the numbers (bench_serve_stats.c) or the result files' making (bench_serve.c).
 */
#include <math.h>
#include <string.h>

#include "tools/bench_serve.h"

#define PANEL_W 340
#define PANEL_H 250
#define LEFT 62
#define TOP 80
#define GAP 40

static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define N_COLORS (sizeof COLORS / sizeof COLORS[0])

/* Text with &, <, >, " and ' escaped; control bytes dropped (XML 1.0 forbids most of them). */
static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

typedef struct { const char *label; int color; json_t *steps; } series;

/* The value at path "a.b" of a step; NAN when absent or null. */
static double step_value(json_t *step, const char *key, const char *sub) {
    json_t *v = json_object_get(step, key);
    if (sub) v = json_object_get(v, sub);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static double nice_max(double v) {
    if (!(v > 0) || !isfinite(v)) return 1;
    double e = pow(10, floor(log10(v))), m = v / e;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * e;
}

typedef struct { double cmin, cmax; int conc[64], n_conc; } xaxis;

static double x_of(const xaxis *X, double c) {
    if (X->cmax <= X->cmin) return PANEL_W / 2.0;
    return 12 + (PANEL_W - 24) * (log2(c) - log2(X->cmin)) / (log2(X->cmax) - log2(X->cmin));
}

static void panel(FILE *f, int px, const char *title, const series *S, int n, const xaxis *X, const char *key,
                  const char *sub, const char *sub_dashed) {
    double ymax = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        json_t *st;
        json_array_foreach(S[i].steps, k, st) {
            double a = step_value(st, key, sub), b = sub_dashed ? step_value(st, key, sub_dashed) : NAN;
            if (isfinite(a) && a > ymax) ymax = a;
            if (isfinite(b) && b > ymax) ymax = b;
        }
    }
    ymax = nice_max(ymax);
    fprintf(f, "<g transform=\"translate(%d,%d)\">\n", px, TOP);
    fprintf(f, "<text x=\"%d\" y=\"-12\" font-size=\"13\" font-weight=\"bold\">", 0);
    xml_text(f, title);
    fprintf(f, "</text>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", PANEL_W, PANEL_H);
    for (int t = 0; t <= 5; t++) {
        double y = PANEL_H - PANEL_H * t / 5.0, v = ymax * t / 5;
        fprintf(f, "<line x1=\"0\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PANEL_W, y, y);
        fprintf(f, "<text x=\"-6\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", y + 4, v);
    }
    for (int c = 0; c < X->n_conc; c++) {
        double x = x_of(X, X->conc[c]);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"0\" y2=\"%d\" stroke=\"#f0f0f0\"/>\n", x, x, PANEL_H);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%d</text>\n", x, PANEL_H + 16, X->conc[c]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">concurrency (requests in flight)</text>\n",
            PANEL_W / 2, PANEL_H + 34);
    for (int pass = 0; pass < (sub_dashed ? 2 : 1); pass++) {
        const char *s2 = pass ? sub_dashed : sub;
        for (int i = 0; i < n; i++) {
            /* Points in concurrency order (a result file lists its steps as run). */
            double xs[64], ys[64];
            int np = 0;
            size_t k;
            json_t *st;
            json_array_foreach(S[i].steps, k, st) {
                double c = step_value(st, "concurrency", NULL), v = step_value(st, key, s2);
                if (!isfinite(c) || c < 1 || !isfinite(v) || np == 64) continue;
                int j = np++;
                while (j > 0 && xs[j - 1] > c) { xs[j] = xs[j - 1], ys[j] = ys[j - 1]; j--; }
                xs[j] = c, ys[j] = v;
            }
            const char *col = COLORS[S[i].color % N_COLORS];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                    pass ? " stroke-dasharray=\"5,4\"" : "");
            for (int j = 0; j < np; j++) fprintf(f, "%s%.1f,%.1f", j ? " " : "", x_of(X, xs[j]), PANEL_H - PANEL_H * ys[j] / ymax);
            fputs("\"/>\n", f);
            for (int j = 0; j < np; j++) {
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", x_of(X, xs[j]),
                        PANEL_H - PANEL_H * ys[j] / ymax, col);
                xml_text(f, S[i].label);
                fprintf(f, ", concurrency %g: %.4g</title></circle>\n", xs[j], ys[j]);
            }
        }
    }
    fputs("</g>\n", f);
}

int ob_bench_svg_write(FILE *f, json_t *const *docs, const char *const *names, int n, char *err, size_t errlen) {
    series S[64];
    int ns = 0;
    xaxis X = {INFINITY, -INFINITY, {0}, 0};
    static char labels[64][320];
    for (int d = 0; d < n; d++) {
        json_t *targets = json_object_get(docs[d], "targets");
        if (!json_is_array(targets) || !json_array_size(targets)) {
            snprintf(err, errlen, "%s: not a result of '1bit bench --url' (no 'targets' array)", names && names[d] ? names[d] : "result");
            return -1;
        }
        size_t k;
        json_t *t;
        json_array_foreach(targets, k, t) {
            json_t *steps = json_object_get(t, "steps");
            if (!json_is_array(steps)) {
                snprintf(err, errlen, "%s: targets[%zu] has no 'steps' array", names && names[d] ? names[d] : "result", k);
                return -1;
            }
            if (ns == 64) break;
            const char *l = json_string_value(json_object_get(t, "label"));
            if (!l) l = json_string_value(json_object_get(t, "url"));
            if (!l) l = "?";
            if (n > 1 && names && names[d]) snprintf(labels[ns], sizeof labels[ns], "%s (%s)", l, names[d]);
            else snprintf(labels[ns], sizeof labels[ns], "%s", l);
            S[ns] = (series){labels[ns], ns, steps};
            ns++;
            size_t j;
            json_t *st;
            json_array_foreach(steps, j, st) {
                double c = step_value(st, "concurrency", NULL);
                if (!isfinite(c) || c < 1) continue;
                if (c < X.cmin) X.cmin = c;
                if (c > X.cmax) X.cmax = c;
                int seen = 0;
                for (int q = 0; q < X.n_conc; q++) seen |= X.conc[q] == (int)c;
                if (!seen && X.n_conc < 64) X.conc[X.n_conc++] = (int)c;
            }
        }
    }
    if (X.n_conc == 0) { snprintf(err, errlen, "no steps with a concurrency to plot"); return -1; }
    int W = LEFT + 3 * PANEL_W + 2 * (GAP + LEFT - 30) + 20;
    int legend_y = TOP + PANEL_H + 60, H = legend_y + 20 * ns + 16;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    /* Subtitle: the workload of the first file. */
    json_t *set = json_object_get(docs[0], "settings");
    char sub[400] = "";
    if (json_object_get(set, "replay"))
        snprintf(sub, sizeof sub, "replay of %s, max %lld generated tokens", json_string_value(json_object_get(set, "replay")),
                 (long long)json_integer_value(json_object_get(set, "gen_tokens")));
    else if (set)
        snprintf(sub, sizeof sub, "prompt ~%lld tokens, %lld generated tokens per request",
                 (long long)json_integer_value(json_object_get(set, "prompt_tokens")),
                 (long long)json_integer_value(json_object_get(set, "gen_tokens")));
    const char *host = json_string_value(json_object_get(docs[0], "host")), *when = json_string_value(json_object_get(docs[0], "finished_utc"));
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"16\" font-weight=\"bold\">1bit bench --url: throughput and latency against concurrency</text>\n", LEFT);
    fprintf(f, "<text x=\"%d\" y=\"40\" font-size=\"12\" fill=\"#444\">", LEFT);
    xml_text(f, sub);
    if (host) { fputs(" · ", f); xml_text(f, host); }
    if (when) { fputs(" · ", f); xml_text(f, when); }
    fputs("</text>\n", f);
    int step = PANEL_W + GAP + LEFT - 30;
    panel(f, LEFT, "Output tokens/s, all requests", S, ns, &X, "output_tokens_per_s", NULL, NULL);
    panel(f, LEFT + step, "Time to first token, ms (p50 solid, p99 dashed)", S, ns, &X, "ttft_ms", "p50", "p99");
    panel(f, LEFT + 2 * step, "Decode tokens/s of one request (p50)", S, ns, &X, "decode_tokens_per_s", "p50", NULL);
    for (int i = 0; i < ns; i++) {
        int y = legend_y + 20 * i;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>\n", LEFT, LEFT + 24, y, y,
                COLORS[S[i].color % N_COLORS]);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\">", LEFT + 32, y + 4);
        xml_text(f, S[i].label);
        json_t *t = NULL;
        /* the model and URL of this series, when the file has them */
        for (int d = 0, c = 0; d < n && !t; d++) {
            size_t k;
            json_t *x;
            json_array_foreach(json_object_get(docs[d], "targets"), k, x) if (c++ == i) { t = x; break; }
        }
        const char *m = json_string_value(json_object_get(t, "model")), *u = json_string_value(json_object_get(t, "url"));
        if (m || u) {
            fputs(" — ", f);
            if (m) xml_text(f, m);
            if (u) { fputs(" at ", f); xml_text(f, u); }
        }
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? (snprintf(err, errlen, "write error"), -1) : 0;
}

int ob_bench_plot_cmd(int argc, char **argv) {
    const char *out = NULL, *files[64];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "usage: 1bit bench plot a.json [b.json ...] [-o chart.svg]\n");
            return 2;
        } else if (nf < 64) files[nf++] = argv[i];
    }
    if (!nf) { fprintf(stderr, "usage: 1bit bench plot a.json [b.json ...] [-o chart.svg]\n"); return 2; }
    json_t *docs[64];
    char names[64][128];
    const char *np[64];
    int rc = 0, nd = 0;
    for (int i = 0; i < nf; i++) {
        json_error_t je;
        json_t *j = json_load_file(files[i], 0, &je);
        if (!j || !json_is_object(j)) {
            fprintf(stderr, "bench plot: %s: %s\n", files[i], j ? "not a JSON object" : je.text);
            json_decref(j);
            rc = 1;
            break;
        }
        const char *b = strrchr(files[i], '/');
        b = b ? b + 1 : files[i];
        size_t l = strlen(b);
        if (l > 5 && !strcmp(b + l - 5, ".json")) l -= 5;
        snprintf(names[i], sizeof names[i], "%.*s", (int)l, b);
        np[i] = names[i];
        docs[nd++] = j;
    }
    if (rc == 0) {
        char err[512];
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) { fprintf(stderr, "bench plot: -o %s: cannot write it\n", out); rc = 1; }
        else {
            int e = ob_bench_svg_write(f, docs, np, nd, err, sizeof err);
            if (e) fprintf(stderr, "bench plot: %s\n", err);
            if ((out && fclose(f)) || e) rc = 1;
        }
    }
    for (int i = 0; i < nd; i++) json_decref(docs[i]);
    return rc;
}
