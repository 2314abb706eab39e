/* constraint.c — response_format and forced tool calls, as sampling constraints.
 *
 * Owns: the bridge from a request's constraint (json_object, json_schema, tool_choice
 * required / a named function) to the scheduler's per-request filter/accept callbacks
 * (ob_req_params.filter, .accept, .filter_user). Each choice of a request (n > 1) gets its
 * own clone, since the grammar state advances with that choice's tokens.
 * Does not own: the grammar itself. The JSON-schema grammar engine (src/engine/grammar*) is
 * not in this tree yet; until it lands every constructor refuses with a message the handler
 * turns into HTTP 501, so nothing is "enforced" that is not.
 */
#include <stdlib.h>

#include "server/server.h"
#include "util/err.h"

struct ob_constraint {
    ob_constraint_kind kind;
};

int ob_constraint_available(void) { return 0; }

ob_constraint *ob_constraint_new(const ob_server *S, ob_constraint_kind kind, json_t *schema, const char *tool_name,
                                 char *err, size_t errlen) {
    (void)S; (void)schema; (void)tool_name;
    ERR("%s needs the grammar engine, which this build does not have yet",
        kind == OB_CONSTRAINT_TOOL_CALL ? "tool_choice 'required' or a named function"
        : kind == OB_CONSTRAINT_JSON_SCHEMA ? "response_format json_schema" : "response_format json_object");
    return NULL;
}

ob_constraint *ob_constraint_clone(const ob_constraint *c) {
    if (!c) return NULL;
    ob_constraint *d = malloc(sizeof *d);
    if (d) *d = *c;
    return d;
}

void ob_constraint_free(ob_constraint *c) { free(c); }

void ob_constraint_bind(ob_constraint *c, ob_req_params *p) {
    (void)c;
    p->filter = NULL;
    p->accept = NULL;
    p->filter_user = NULL;
}
