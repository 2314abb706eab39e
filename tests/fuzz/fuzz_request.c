/* fuzz_request.c — libFuzzer harness for request JSON -> the internal request: what the server's
 * POST handlers do with a body before anything reaches the scheduler (src/server/openai_gen.c,
 * openai_resp.c, chat.c, constraint.c, and through them the template engine, the tokenizer and
 * the grammar compiler).
 *
 * Input: one selector byte, then the body. Selector bits 0-1: the API (chat completions,
 * completions, Responses, Anthropic Messages); bit 2: the chat template (the demo model's
 * own, or Llama 3.1's with inline tools from tests/fuzz/seeds-template); bits 3-4: the tool-call
 * format the constraint grammar is built for. The body is parsed as ob_gen_body does
 * (duplicates refused), turned into an ob_gen_req by ob_gen_parse_* (prompt rendered and
 * tokenized), and its grammar constraint compiled by ob_gen_constrain. No model weights are
 * used: the demo model's tokenizer and template stand in for a loaded server. Checked: no
 * crash, hang, leak or sanitizer report; a refusal always has a message and a 4xx/5xx status;
 * an accepted request has prompt tokens in the vocabulary and a max_tokens the API allows.
 *
 * Seeds: tests/fuzz/seeds-request/; dictionary tests/fuzz/request.dict.
 * Build and run (docs/reliability.md has the last result):
 *   make build/fuzz/fuzz_request && tests/fuzz/run.sh request 600
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/gen.h"
#include "text/tokenizer.h"

static ob_server S[2];

static void server_init(ob_server *s, const char *template_file) {
    char err[512];
    s->cfg.sp = ob_sampler_default_params();
    s->cfg.n_predict = -1;
    s->cfg.seed = 1;
    s->model_id = strdup("fuzz");
    ob_tokenizer_t *t = NULL;
    if (!S[0].tok) {
        ob_gguf_t *g = NULL;
        if (ob_gguf_open(OB_DEFAULT_MODEL, &g, err, sizeof err) || ob_tokenizer_load_gguf(g, &t, err, sizeof err)) {
            fprintf(stderr, "fuzz_request: %s\n", err);
            abort();
        }
        ob_gguf_close(g);
        s->tok = t;
    } else {
        s->tok = S[0].tok;
    }
    if (ob_srv_chat_load(s, OB_DEFAULT_MODEL, template_file, err, sizeof err)) { fprintf(stderr, "fuzz_request: %s\n", err); abort(); }
    atomic_store(&s->state, OB_SERVER_READY);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    if (!ob_has_default_model()) { fprintf(stderr, "fuzz_request: this build has no demo model\n"); abort(); }
    server_init(&S[0], NULL);
    server_init(&S[1], "tests/fuzz/seeds-template/model-llama-3.1.jinja");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0];
    ob_server *s = &S[(sel >> 2) & 1];
    s->tool_format = (ob_tool_format)((sel >> 3) & 3);
    json_error_t je;
    json_t *b = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
    if (!b) return 0;
    if (!json_is_object(b)) { json_decref(b); return 0; }
    char err[1024] = "";
    int status = 0, rc;
    ob_gen_req q = {0};
    switch (sel & 3) {
    case 0: rc = ob_gen_parse_chat(s, b, &q, &status, err, sizeof err); break;
    case 1: rc = ob_gen_parse_completion(s, b, &q, &status, err, sizeof err); break;
    default: rc = ob_gen_parse_resp(s, b, (sel & 3) == 3, &q, &status, err, sizeof err); break;
    }
    if (rc == 0) rc = ob_gen_constrain(s, &q, &status, err, sizeof err);
    if (rc) {
        if (!err[0] || status < 400 || status > 599) abort();
    } else {
        int32_t nv = ob_tokenizer_n_vocab(s->tok);
        /* completions may carry raw token ids: the scheduler refuses bad ones (tested there) */
        if ((sel & 3) != 1)
            for (int32_t i = 0; i < q.n_prompt; i++) if (q.prompt[i] < 0 || q.prompt[i] >= nv) abort();
        if (q.max_tokens == 0 || q.n < 1 || q.n > 16 || !q.model) abort();
    }
    ob_gen_req_free(&q);
    json_decref(b);
    return 0;
}
