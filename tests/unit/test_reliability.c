/* test_reliability.c — regressions for what fuzzing found (docs/reliability.md lists each
 * finding), replayed through the same entry points as the harnesses in tests/fuzz/, with the
 * answer each input must get. Leaks show under `make test-asan` (LeakSanitizer); the checks on
 * values hold in every build. */
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "server/gen.h"
#include "server/http.h"
#include "test.h"
#include "text/tokenizer.h"

/* A server with the demo model's tokenizer and chat template and no weights, as
 * tests/fuzz/fuzz_request.c builds it. */
static int srv_init(ob_server *S) {
    char err[512];
    memset(S, 0, sizeof *S);
    S->cfg.sp = ob_sampler_default_params();
    S->cfg.n_predict = -1;
    S->cfg.seed = 1;
    S->model_id = strdup("t");
    ob_gguf_t *g = NULL;
    ob_tokenizer_t *t = NULL;
    if (ob_gguf_open(OB_DEFAULT_MODEL, &g, err, sizeof err) || ob_tokenizer_load_gguf(g, &t, err, sizeof err)) {
        fprintf(stderr, "  reliability: %s\n", err);
        ob_gguf_close(g);
        return -1;
    }
    ob_gguf_close(g);
    S->tok = t;
    if (ob_srv_chat_load(S, OB_DEFAULT_MODEL, NULL, err, sizeof err)) return -1;
    atomic_store(&S->state, OB_SERVER_READY);
    return 0;
}

static void srv_free(ob_server *S) {
    ob_srv_chat_free(S);
    ob_tokenizer_free((ob_tokenizer_t *)S->tok);
    free(S->model_id);
}

/* Parses body with API api (0 chat, 3 Anthropic Messages); returns rc, fills status/err and
 * the rendered prompt (malloc'd, or NULL). */
static int parse(ob_server *S, int api, const char *body, int *status, char *err, size_t errlen, char **prompt) {
    json_error_t je;
    json_t *b = json_loads(body, JSON_REJECT_DUPLICATES, &je);
    if (!b) { fprintf(stderr, "  bad test body: %s\n", je.text); return -2; }
    ob_gen_req q = {0};
    *status = 0;
    err[0] = 0;
    int rc = api == 0 ? ob_gen_parse_chat(S, b, &q, status, err, errlen) : ob_gen_parse_resp(S, b, 1, &q, status, err, errlen);
    *prompt = rc == 0 && q.prompt_text ? strdup(q.prompt_text) : NULL;
    ob_gen_req_free(&q);
    json_decref(b);
    return rc;
}

OB_SUITE(fuzz_found) {
    if (!ob_has_default_model()) { fprintf(stderr, "  fuzz_found: no demo model in this build: skipped\n"); return; }
    ob_server S;
    if (srv_init(&S)) { CHECK(0); return; }
    char err[1024], *prompt;
    int status;

    /* fuzz_request: an Anthropic tool_use block without "input" leaked an empty object; its
     * arguments are "{}" */
    int rc = parse(&S, 3, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                          "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\"}]},"
                          "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"r\"}]}]}",
                   &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, 0);
    CHECK(prompt && strstr(prompt, "\"arguments\": {}"));
    free(prompt);
    /* fuzz_request: an Anthropic tool without "input_schema" leaked the empty object its parameters
     * became (the leak shows under ASan); the tool still reaches the template */
    rc = parse(&S, 3, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
                      "\"tools\":[{\"name\":\"f\"},{\"name\":\"g\",\"input_schema\":{\"type\":\"object\"}}]}",
               &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, 0);
    CHECK(prompt && strstr(prompt, "\"f\"") && strstr(prompt, "\"g\""));
    free(prompt);
    /* ... and a tool_use whose name is not a string was passed on silently: now a 400 */
    rc = parse(&S, 3, "{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":{\"a\":1}}]}]}",
               &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(status, 400);
    CHECK(strstr(err, "content[0].name") != NULL);
    /* a tool_result without tool_use_id was dropped from the conversation: now a 400 */
    rc = parse(&S, 3, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"r\"}]}]}",
               &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(status, 400);
    CHECK(strstr(err, "tool_use_id") != NULL);

    /* a tool_result without content leaked the empty string put in its place; it is a tool
     * turn with empty content */
    rc = parse(&S, 3, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t9\"}]}]}",
               &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, 0);
    CHECK(prompt && strstr(prompt, "<tool_response>\n\n</tool_response>"));
    free(prompt);

    /* fuzz_request: a chat tool call without "arguments", rendered inline (a template without
     * tool support), leaked an empty object; it renders as {} */
    rc = parse(&S, 0, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
                      "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}]}",
               &status, err, sizeof err, &prompt);
    CHECK_EQ_INT(rc, 0);
    CHECK(prompt && strstr(prompt, "{\"name\": \"get\", \"arguments\": {}}"));
    free(prompt);
    srv_free(&S);
}

/* The locality check behind the no-key policy (http.c): only parsed loopback addresses,
 * localhost, and an explicit bound address are local. "127.0.0.1.evil.example" passed before
 * (a prefix compare): a DNS name an attacker controls, i.e. DNS rebinding. */
OB_SUITE(http_local) {
    const char *local[] = {"localhost", "LocalHost:8080", "127.0.0.1", "127.0.0.1:80", "127.255.0.9", "[::1]", "[::1]:8080",
                           "[::ffff:127.0.0.1]:1", "http://localhost:3000", "https://127.0.0.1", "http://[::1]:5173/x"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++) {
        if (!ob_http_host_is_local("127.0.0.1", local[i])) fprintf(stderr, "  not local: %s\n", local[i]);
        CHECK(ob_http_host_is_local("127.0.0.1", local[i]));
    }
    const char *remote[] = {"127.0.0.1.evil.example", "127.0.0.1.nip.io:80", "localhost.evil.example", "localhost.", "evil.example",
                            "http://127.0.0.1.evil.example", "null", "", "127.1", "0x7f000001", "10.0.0.1", "[::2]", "[::ffff:10.0.0.1]",
                            "example.com@127.0.0.1", "0.0.0.0", "[::]", "file://"};
    for (size_t i = 0; i < sizeof remote / sizeof *remote; i++) {
        if (ob_http_host_is_local("127.0.0.1", remote[i])) fprintf(stderr, "  local: %s\n", remote[i]);
        CHECK(!ob_http_host_is_local("127.0.0.1", remote[i]));
    }
    /* an explicit --host is local; the wildcards are not a name anyone is reached by */
    CHECK(ob_http_host_is_local("192.168.1.5", "192.168.1.5:8080"));
    CHECK(ob_http_host_is_local("myhost.lan", "MyHost.lan:80"));
    CHECK(!ob_http_host_is_local("0.0.0.0", "0.0.0.0:8080"));
    CHECK(!ob_http_host_is_local("::", "[::]:8080"));
    CHECK(!ob_http_host_is_local(NULL, "192.168.1.5"));
}
