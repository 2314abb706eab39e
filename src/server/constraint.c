/* constraint.c — response_format and forced tool calls, as sampling constraints.
 *
 * Owns: the bridge from a request's constraint (response_format json_object / json_schema,
 * tool_choice "required" or a named function) to the scheduler's per-request callbacks
 * (ob_req_params.filter / .accept / .filter_user): a grammar compiled once per request, and
 * one matcher state per choice (n > 1), since a state advances with its choice's tokens. A
 * forced tool call is a GBNF grammar of the model family's own call syntax around the JSON
 * schema of the function's parameters, so the reply parses as a tool call (outparse.c).
 * Does not own: the grammar engine (src/engine/grammar*), which this file uses when it is in
 * the tree; without it every constructor refuses, and the handler answers 501, so nothing is
 * claimed to be enforced that is not.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "util/err.h"

#if __has_include("engine/grammar.h")
#include "engine/grammar.h"
#define HAVE_GRAMMAR 1
#else
#define HAVE_GRAMMAR 0
#endif

struct ob_constraint {
    void *grammar;               /* ob_grammar_t */
    const ob_server *S;
};

int ob_constraint_available(void) { return HAVE_GRAMMAR; }

#if HAVE_GRAMMAR
/* The vocabulary index is built once per model, on first use. */
static pthread_mutex_t vocab_mu = PTHREAD_MUTEX_INITIALIZER;
static ob_grammar_vocab_t *vocab;
static const ob_tokenizer_t *vocab_tok;

static ob_grammar_vocab_t *get_vocab(const ob_server *S, char *err, size_t errlen) {
    pthread_mutex_lock(&vocab_mu);
    if (!vocab || vocab_tok != S->tok) {
        ob_grammar_vocab_free(vocab);
        vocab = ob_grammar_vocab_new(S->tok, err, errlen);
        vocab_tok = vocab ? S->tok : NULL;
    }
    ob_grammar_vocab_t *v = vocab;
    pthread_mutex_unlock(&vocab_mu);
    return v;
}

static void lit(ob_sbuf *g, const char *s) {
    char small[512];
    size_t need = ob_grammar_gbnf_literal(s, strlen(s), small, sizeof small);
    if (need < sizeof small) { ob_sbuf_puts(g, small); return; }
    char *big = malloc(need + 1);
    if (!big) return;
    ob_grammar_gbnf_literal(s, strlen(s), big, need + 1);
    ob_sbuf_puts(g, big);
    free(big);
}

/* root ::= call-0 | call-1 ... where call-i is the family's syntax around f<i>-root. */
static char *tool_gbnf(const ob_server *S, json_t *tools, const char *only, char *err, size_t errlen) {
    ob_sbuf g = {0}, rules = {0};
    size_t i;
    json_t *t;
    int n = 0;
    ob_sbuf_puts(&g, "root ::= ");
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        json_t *params = json_object_get(f, "parameters");
        json_t *any = json_pack("{s:s}", "type", "object");
        char *schema = json_dumps(json_is_object(params) ? params : any, JSON_COMPACT);
        json_decref(any);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "f%zu-", i);
        char *args = ob_grammar_json_schema_to_gbnf(schema, prefix, err, errlen);
        free(schema);
        if (!args) { ob_sbuf_free(&g); ob_sbuf_free(&rules); return NULL; }
        ob_sbuf_puts(&rules, args);
        ob_sbuf_puts(&rules, "\n");
        free(args);
        char *qn = json_dumps(json_object_get(f, "name"), JSON_ENCODE_ANY);
        ob_sbuf head = {0};
        const char *tail = "";
        switch (S->tool_format) {
        case OB_TOOLS_LLAMA3: ob_sbuf_printf(&head, "{\"name\": %s, \"parameters\": ", qn); tail = "}"; break;
        case OB_TOOLS_MISTRAL: ob_sbuf_printf(&head, "[TOOL_CALLS][{\"name\": %s, \"arguments\": ", qn); tail = "}]"; break;
        case OB_TOOLS_HARMONY: ob_sbuf_printf(&head, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", name); break;
        default: ob_sbuf_printf(&head, "<tool_call>\n{\"name\": %s, \"arguments\": ", qn); tail = "}\n</tool_call>"; break;
        }
        free(qn);
        if (n++) ob_sbuf_puts(&g, " | ");
        ob_sbuf_puts(&g, "(");
        lit(&g, head.p);
        ob_sbuf_printf(&g, " %sroot", prefix);
        if (*tail) { ob_sbuf_puts(&g, " "); lit(&g, tail); }
        ob_sbuf_puts(&g, ")");
        ob_sbuf_free(&head);
    }
    ob_sbuf_puts(&g, "\n");
    ob_sbuf_put(&g, rules.p ? rules.p : "", rules.len);
    ob_sbuf_free(&rules);
    if (!n) { ob_sbuf_free(&g); ERR("no function in 'tools' to call"); return NULL; }
    return g.p;
}
#endif

ob_constraint *ob_constraint_new(const ob_server *S, ob_constraint_kind kind, json_t *schema, const char *tool_name,
                                 char *err, size_t errlen) {
#if HAVE_GRAMMAR
    ob_grammar_t *g = NULL;
    char e2[512] = "";
    if (kind == OB_CONSTRAINT_JSON_OBJECT) {
        g = ob_grammar_json_object();
    } else if (kind == OB_CONSTRAINT_JSON_SCHEMA) {
        char *text = json_dumps(schema, JSON_COMPACT);
        g = text ? ob_grammar_from_json_schema(text, e2, sizeof e2) : NULL;
        free(text);
        if (!g) { ERR("'response_format.json_schema.schema': %s", e2); return NULL; }
    } else {
        char *gbnf = tool_gbnf(S, schema, tool_name, e2, sizeof e2);
        if (!gbnf) { ERR("tools: %s", e2); return NULL; }
        g = ob_grammar_parse_gbnf(gbnf, e2, sizeof e2);
        free(gbnf);
        if (!g) { ERR("tools: the call grammar does not compile: %s", e2); return NULL; }
    }
    if (!g) { ERR("out of memory"); return NULL; }
    if (!get_vocab(S, e2, sizeof e2)) { ob_grammar_free(g); ERR("grammar vocabulary: %s", e2); return NULL; }
    ob_constraint *c = calloc(1, sizeof *c);
    c->grammar = g;
    c->S = S;
    return c;
#else
    (void)S; (void)schema; (void)tool_name;
    ERR("%s needs the grammar engine, which this build does not have yet",
        kind == OB_CONSTRAINT_TOOL_CALL ? "tool_choice 'required' or a named function"
        : kind == OB_CONSTRAINT_JSON_SCHEMA ? "response_format json_schema" : "response_format json_object");
    return NULL;
#endif
}

void ob_constraint_free(ob_constraint *c) {
    if (!c) return;
#if HAVE_GRAMMAR
    ob_grammar_free(c->grammar);
#endif
    free(c);
}

void *ob_constraint_bind(ob_constraint *c, ob_req_params *p, char *err, size_t errlen) {
#if HAVE_GRAMMAR
    char e2[256];
    ob_grammar_state_t *st = ob_grammar_state_new_vocab(c->grammar, get_vocab(c->S, e2, sizeof e2), err, errlen);
    if (!st) return NULL;
    p->filter = ob_grammar_state_filter;
    p->accept = ob_grammar_state_accept;
    p->filter_user = st;
    return st;
#else
    (void)c; (void)p;
    ERR("no grammar engine");
    return NULL;
#endif
}

void ob_constraint_state_free(void *state) {
#if HAVE_GRAMMAR
    ob_grammar_state_free(state);
#else
    (void)state;
#endif
}
