/* test_demo.c — the demo model compiled into the binary against transformers.
 *
 * tests/demo/greedy.json holds transformers' greedy continuations of held-out sentences from the
 * checkpoint that models/demo-tq2_0.gguf was converted from (tools/train/train.py). The built-in
 * model must tokenize each prompt to the same ids and continue it greedily with the same tokens.
 * The held-out sentences ("text" cases) must continue exactly as in transformers. For the chat
 * cases, BitNet's int8 activation quantizer can flip a code at a rounding tie (docs/golden.md)
 * and so an argmax between two nearly equal logits: their tokens are compared with teacher
 * forcing (transformers' token is fed back), and 95% must agree.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "onebit.h"
#include "test.h"

OB_SUITE(demo) {
    char err[512];
    CHECK(ob_has_default_model());
    ob_model_params mp = ob_model_default_params();
    mp.n_threads = 2;
    ob_model_t *m = NULL;
    CHECK_EQ_INT(ob_model_load(OB_DEFAULT_MODEL, &mp, &m, err, sizeof err), 0);
    json_error_t je;
    json_t *d = json_load_file("tests/demo/greedy.json", 0, &je);
    CHECK(d != NULL);
    if (!m || !d) { ob_model_free(m); json_decref(d); return; }
    const ob_tokenizer_t *tok = ob_model_tokenizer(m);
    size_t ci;
    json_t *cs;
    long total = 0, agree = 0;
    int n_cases = 0;
    json_array_foreach(json_object_get(d, "cases"), ci, cs) {
        const char *kind = json_string_value(json_object_get(cs, "kind"));
        json_t *want = json_object_get(cs, "ternary_ids"), *pids = json_object_get(cs, "prompt_ids");
        if (!want || !pids) continue;
        int np = (int)json_array_size(pids), ng = (int)json_array_size(want);
        int32_t ids[1024];
        if (kind && !strcmp(kind, "text")) {
            const char *prompt = json_string_value(json_object_get(cs, "prompt"));
            int n = ob_tokenizer_encode(tok, prompt, strlen(prompt), 1, 1, ids, 1024);
            int same = n == np;
            for (int k = 0; same && k < n; k++) same = ids[k] == json_integer_value(json_array_get(pids, (size_t)k));
            if (!same) fprintf(stderr, "  demo: case %zu: prompt ids differ from transformers'\n", ci);
            CHECK(same);
        }
        for (int k = 0; k < np && k < 1024; k++) ids[k] = (int32_t)json_integer_value(json_array_get(pids, (size_t)k));
        ob_ctx_params cp = {.n_ctx = np + ng + 1, .n_seq = 1, .n_batch = np};
        ob_ctx_t *c = NULL;
        CHECK_EQ_INT(ob_ctx_new(m, &cp, &c, err, sizeof err), 0);
        if (!c) continue;
        int32_t pos[1024];
        for (int k = 0; k < np; k++) pos[k] = k;
        ob_batch b = {np, ids, pos, NULL, NULL};
        CHECK_EQ_INT(ob_decode(c, &b, err, sizeof err), 0);
        int V = ob_model_get_info(m)->n_vocab, first_diff = -1;
        for (int g = 0; g < ng; g++) {
            const float *l = ob_get_logits(c, 0);
            int32_t best = 0;
            for (int v = 1; v < V; v++) if (l[v] > l[best]) best = v;
            int32_t ref = (int32_t)json_integer_value(json_array_get(want, (size_t)g));
            if (best == ref) agree++;
            else if (first_diff < 0) first_diff = g;
            total++;
            int32_t p = np + g;
            /* Teacher forcing: feed transformers' token, so one early difference does not
             * derail the rest of the comparison. */
            ob_batch sb = {1, &ref, &p, NULL, NULL};
            if (ob_decode(c, &sb, err, sizeof err)) break;
        }
        if (first_diff >= 0) fprintf(stderr, "  demo: case %zu (%s): first differing token at %d of %d\n", ci, kind, first_diff, ng);
        if (kind && !strcmp(kind, "text")) CHECK_EQ_INT(first_diff, -1);
        ob_ctx_free(c);
        n_cases++;
    }
    CHECK(n_cases >= 3);
    if (ob_test_verbose) fprintf(stderr, "  demo: %ld of %ld greedy tokens agree with transformers over %d cases\n", agree, total, n_cases);
    CHECK(agree * 100 >= total * 95);
    json_decref(d);
    ob_model_free(m);
}
