/* outparse.c — what a model wrote: content, reasoning (<think>), tool calls.
 *
 * Owns: an incremental parser fed with released text (after stop strings and UTF-8 safety)
 * that reports content and reasoning deltas as soon as they cannot be the start of a marker,
 * and each tool call once it is complete, in the model family's own format:
 *   hermes (Qwen 2.5/3, ChatML)  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   llama3 (Llama 3.x)           {"name": "f", "parameters": {...}}  or  <|python_tag|>{...}
 *   mistral                      [TOOL_CALLS][{"name": "f", "arguments": {...}}]  or
 *                                [TOOL_CALLS]f[ARGS]{...}
 *   harmony (gpt-oss)            <|channel|>analysis<|message|>...<|end|><|start|>assistant
 *                                <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>
 * A call that does not parse is returned as content, never dropped.
 * Does not own: tokens, stop strings (text.c), JSON replies (openai_*.c).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

enum { M_CONTENT, M_THINK, M_TOOL, M_REST, M_H_HEADER, M_H_BODY };
enum { H_CONTENT, H_REASONING, H_TOOL };

static void emit_text(ob_out_fn fn, void *user, ob_out_kind k, const char *s, size_t n) {
    if (!n) return;
    ob_out_ev ev = {k, s, n, NULL, NULL};
    fn(user, &ev);
}

static void emit_tool(ob_outp *p, ob_out_fn fn, void *user, const char *name, json_t *args) {
    char *a = NULL;
    if (json_is_string(args)) a = strdup(json_string_value(args));
    else a = json_dumps(args ? args : json_object(), JSON_COMPACT);
    ob_out_ev ev = {OB_OUT_TOOL, NULL, 0, name, a ? a : "{}"};
    fn(user, &ev);
    free(a);
    p->n_tools++;
}

/* Earliest full marker in s[0..n): its index in *which and position; else -1 with *safe set
 * to the length that cannot be the start of any marker. */
static long find_marker(const char *s, size_t n, const char *const *mk, int n_mk, int *which, size_t *safe) {
    long best = -1;
    for (int k = 0; k < n_mk; k++) {
        size_t ml = strlen(mk[k]);
        for (size_t i = 0; i + ml <= n; i++) {
            if (best >= 0 && (long)i >= best) break;
            if (!memcmp(s + i, mk[k], ml)) { best = (long)i; *which = k; break; }
        }
    }
    if (best >= 0) return best;
    size_t hold = 0;
    for (int k = 0; k < n_mk; k++) {
        size_t ml = strlen(mk[k]);
        for (size_t h = ml - 1; h > hold; h--)
            if (h <= n && !memcmp(s + n - h, mk[k], h)) { hold = h; break; }
    }
    *safe = n - hold;
    return -1;
}

static void consume(ob_sbuf *b, size_t n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

/* One JSON call object {"name", "arguments"|"parameters"} -> a tool event. */
static int call_from_json(ob_outp *p, ob_out_fn fn, void *user, json_t *o) {
    json_t *name = json_object_get(o, "name");
    if (!json_is_string(name)) {
        json_t *f = json_object_get(o, "function"); /* {"type":"function","function":{...}} */
        if (json_is_object(f)) return call_from_json(p, fn, user, f);
        return -1;
    }
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    emit_tool(p, fn, user, json_string_value(name), args);
    return 0;
}

/* A JSON object or array of call objects. Returns 0 if all of s was calls. */
static int calls_from_text(ob_outp *p, ob_out_fn fn, void *user, const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j) return -1;
    int rc = 0;
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        if (!json_array_size(j)) rc = -1;
        json_array_foreach(j, i, v) if (!json_is_object(v) || (!json_is_string(json_object_get(v, "name")) &&
                                                                 !json_is_object(json_object_get(v, "function")))) rc = -1;
        if (!rc) json_array_foreach(j, i, v) call_from_json(p, fn, user, v);
    } else if (json_is_object(j)) {
        json_t *name = json_object_get(j, "name");
        rc = json_is_string(name) ? call_from_json(p, fn, user, j) : -1;
    } else {
        rc = -1;
    }
    json_decref(j);
    return rc;
}

static const char *skip_ws(const char *s, const char *e) {
    while (s < e && isspace((unsigned char)*s)) s++;
    return s;
}

/* Everything after a "rest of output" marker, at the end of generation. */
static void finish_rest(ob_outp *p, ob_out_fn fn, void *user) {
    const char *s = p->tool.p ? p->tool.p : "", *e = s + p->tool.len;
    s = skip_ws(s, e);
    int ok = 0;
    if (p->fmt == OB_TOOLS_MISTRAL && s < e && *s != '[') {
        /* [TOOL_CALLS]name[ARGS]{json}, possibly repeated with [TOOL_CALLS] between. */
        ok = 1;
        int n_ok = 0;
        while (s < e && ok) {
            const char *a = strstr(s, "[ARGS]");
            if (!a) { ok = 0; break; }
            char name[256];
            size_t nl = (size_t)(a - s) < sizeof name - 1 ? (size_t)(a - s) : sizeof name - 1;
            memcpy(name, s, nl);
            name[nl] = 0;
            const char *js = a + 6, *nx = strstr(js, "[TOOL_CALLS]");
            const char *je = nx ? nx : e;
            json_error_t err;
            json_t *args = json_loadb(js, (size_t)(je - js), JSON_DECODE_ANY, &err);
            if (!args || !nl) { json_decref(args); ok = 0; break; }
            emit_tool(p, fn, user, name, args);
            json_decref(args);
            n_ok++;
            s = nx ? skip_ws(nx + 12, e) : e;
        }
        if (!ok && n_ok) ok = 1; /* what parsed was sent; drop nothing silently below */
    } else if (p->fmt == OB_TOOLS_LLAMA3) {
        /* One JSON call, or several separated by ';'. */
        ok = calls_from_text(p, fn, user, s, (size_t)(e - s)) == 0;
        if (!ok && memchr(s, ';', (size_t)(e - s))) {
            const char *q = s;
            ok = 1;
            while (q < e && ok) {
                const char *semi = memchr(q, ';', (size_t)(e - q));
                const char *qe = semi ? semi : e;
                ok = calls_from_text(p, fn, user, q, (size_t)(qe - q)) == 0;
                q = semi ? semi + 1 : e;
            }
        }
    } else {
        ok = calls_from_text(p, fn, user, s, (size_t)(e - s)) == 0;
    }
    if (!ok && p->n_tools == 0) {
        const char *mk = p->fmt == OB_TOOLS_MISTRAL ? "[TOOL_CALLS]" : p->fmt == OB_TOOLS_LLAMA3 && p->tool_name ? "<|python_tag|>" : "";
        emit_text(fn, user, OB_OUT_CONTENT, mk, strlen(mk));
        emit_text(fn, user, OB_OUT_CONTENT, p->tool.p, p->tool.len);
    }
    p->tool.len = 0;
}

void ob_outp_init(ob_outp *p, ob_tool_format fmt, int parse_tools, int in_think) {
    memset(p, 0, sizeof *p);
    p->fmt = fmt;
    p->parse_tools = parse_tools;
    p->parse_think = 1;
    p->mode = in_think ? M_THINK : M_CONTENT;
    p->at_start = 1;
}

/* Harmony header "<|channel|>commentary to=functions.f <|constrain|>json": what follows. */
static int harmony_kind(ob_outp *p, const char *h) {
    const char *to = strstr(h, "to=");
    free(p->tool_name);
    p->tool_name = NULL;
    if (to) {
        to += 3;
        if (!strncmp(to, "functions.", 10)) to += 10;
        size_t n = 0;
        while (to[n] && !isspace((unsigned char)to[n]) && to[n] != '<') n++;
        p->tool_name = strndup(to, n);
        return p->parse_tools ? H_TOOL : H_CONTENT;
    }
    const char *ch = strstr(h, "<|channel|>");
    if (ch && !strncmp(ch + 11, "analysis", 8)) return H_REASONING;
    return H_CONTENT;
}

static void step_harmony(ob_outp *p, ob_out_fn fn, void *user, int *progress) {
    static const char *const content_mk[] = {"<|channel|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>"};
    static const char *const body_mk[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
    static const char *const head_mk[] = {"<|message|>"};
    int which = 0;
    size_t safe = 0;
    ob_sbuf *b = &p->buf;
    if (p->mode == M_CONTENT) {
        long at = find_marker(b->p, b->len, content_mk, 5, &which, &safe);
        if (at < 0) { emit_text(fn, user, OB_OUT_CONTENT, b->p, safe); consume(b, safe); return; }
        emit_text(fn, user, OB_OUT_CONTENT, b->p, (size_t)at);
        consume(b, (size_t)at);
        if (which <= 1) { p->mode = M_H_HEADER; p->tool.len = 0; }
        if (which != 0) consume(b, strlen(content_mk[which])); /* keep <|channel|> in the header */
        *progress = 1;
    } else if (p->mode == M_H_HEADER) {
        long at = find_marker(b->p, b->len, head_mk, 1, &which, &safe);
        if (at < 0) return;
        ob_sbuf_put(&p->tool, b->p, (size_t)at);
        consume(b, (size_t)at + 11);
        int kind = harmony_kind(p, p->tool.p ? p->tool.p : "");
        p->tool.len = 0;
        p->mode = M_H_BODY;
        p->at_start = kind; /* reused: the body's kind */
        *progress = 1;
    } else if (p->mode == M_H_BODY) {
        int kind = p->at_start;
        long at = find_marker(b->p, b->len, body_mk, 4, &which, &safe);
        size_t take = at < 0 ? safe : (size_t)at;
        if (kind == H_TOOL) ob_sbuf_put(&p->tool, b->p, take);
        else emit_text(fn, user, kind == H_REASONING ? OB_OUT_REASONING : OB_OUT_CONTENT, b->p, take);
        consume(b, take);
        if (at < 0) return;
        consume(b, strlen(body_mk[which]));
        if (kind == H_TOOL) {
            json_error_t je;
            json_t *args = json_loadb(p->tool.p ? p->tool.p : "", p->tool.len, JSON_DECODE_ANY, &je);
            if (args) emit_tool(p, fn, user, p->tool_name, args);
            else emit_text(fn, user, OB_OUT_CONTENT, p->tool.p, p->tool.len);
            json_decref(args);
            p->tool.len = 0;
        }
        p->mode = which == 3 ? M_H_HEADER : M_CONTENT;
        *progress = 1;
    }
}

static void step(ob_outp *p, ob_out_fn fn, void *user, int *progress) {
    ob_sbuf *b = &p->buf;
    int which = 0;
    size_t safe = 0;
    if (p->fmt == OB_TOOLS_HARMONY) { step_harmony(p, fn, user, progress); return; }
    if (p->mode == M_THINK) {
        static const char *const mk[] = {"</think>"};
        long at = find_marker(b->p, b->len, mk, 1, &which, &safe);
        size_t take = at < 0 ? safe : (size_t)at;
        emit_text(fn, user, OB_OUT_REASONING, b->p, take);
        consume(b, take);
        if (at < 0) return;
        consume(b, 8);
        p->mode = M_CONTENT;
        p->at_start = 0;
        p->strip_ws = 1; /* "</think>\n\n" */
        *progress = 1;
    } else if (p->mode == M_CONTENT) {
        if (p->strip_ws) {
            while (b->len && isspace((unsigned char)b->p[0])) consume(b, 1);
            if (!b->len) return;
            p->strip_ws = 0;
        }
        const char *mk[3];
        int n = 0, think_k = -1, tool_k = -1;
        if (p->at_start && p->parse_think) { think_k = n; mk[n++] = "<think>"; }
        if (p->parse_tools) {
            tool_k = n;
            mk[n++] = p->fmt == OB_TOOLS_HERMES ? "<tool_call>" : p->fmt == OB_TOOLS_MISTRAL ? "[TOOL_CALLS]" : "<|python_tag|>";
        }
        if (p->at_start) {
            /* Llama 3 writes a bare JSON call as its whole answer. */
            const char *s = skip_ws(b->p ? b->p : "", b->p + b->len);
            if (p->parse_tools && p->fmt == OB_TOOLS_LLAMA3 && s < b->p + b->len && *s == '{') {
                ob_sbuf_put(&p->tool, s, (size_t)(b->p + b->len - s));
                b->len = 0;
                p->mode = M_REST;
                return;
            }
        }
        long at = find_marker(b->p ? b->p : "", b->len, mk, n, &which, &safe);
        size_t take = at < 0 ? safe : (size_t)at;
        if (p->at_start) {
            /* Leading whitespace may still precede <think>: hold it. */
            size_t ws = 0;
            while (ws < take && isspace((unsigned char)b->p[ws])) ws++;
            if (ws == take && at < 0) return;
            if (at >= 0 && which == think_k && ws == take) take = 0, consume(b, ws);
            else p->at_start = 0;
            if (at >= 0 && which == think_k && take) take += 7, at = -1, *progress = 1; /* <think> after text is text */
        }
        emit_text(fn, user, OB_OUT_CONTENT, b->p, take);
        consume(b, take);
        if (at < 0) return;
        *progress = 1;
        if (which == think_k) { consume(b, 7); p->mode = M_THINK; return; }
        if (which == tool_k) {
            consume(b, strlen(mk[which]));
            p->tool.len = 0;
            p->mode = p->fmt == OB_TOOLS_HERMES ? M_TOOL : M_REST;
            if (p->fmt == OB_TOOLS_LLAMA3) p->tool_name = strdup("python_tag"); /* marks the marker for finish_rest */
        }
    } else if (p->mode == M_TOOL) {
        static const char *const mk[] = {"</tool_call>"};
        long at = find_marker(b->p, b->len, mk, 1, &which, &safe);
        if (at < 0) return;
        if (calls_from_text(p, fn, user, b->p, (size_t)at)) {
            emit_text(fn, user, OB_OUT_CONTENT, "<tool_call>", 11);
            emit_text(fn, user, OB_OUT_CONTENT, b->p, (size_t)at + 12);
        }
        consume(b, (size_t)at + 12);
        p->strip_ws = 1;
        p->mode = M_CONTENT;
        *progress = 1;
    } else if (p->mode == M_REST) {
        ob_sbuf_put(&p->tool, b->p, b->len);
        b->len = 0;
    }
}

void ob_outp_feed(ob_outp *p, const char *text, size_t len, ob_out_fn fn, void *user) {
    ob_sbuf_put(&p->buf, text, len);
    int progress;
    do {
        progress = 0;
        if (p->buf.len || p->mode == M_H_HEADER) step(p, fn, user, &progress);
    } while (progress && p->buf.len);
}

void ob_outp_end(ob_outp *p, ob_out_fn fn, void *user) {
    /* Whatever was held as a possible marker prefix is plain text now. */
    ob_sbuf *b = &p->buf;
    if (p->mode == M_TOOL) {
        if (calls_from_text(p, fn, user, b->p ? b->p : "", b->len)) { /* unterminated <tool_call> */
            emit_text(fn, user, OB_OUT_CONTENT, "<tool_call>", 11);
            emit_text(fn, user, OB_OUT_CONTENT, b->p, b->len);
        }
    } else if (p->mode == M_REST) {
        ob_sbuf_put(&p->tool, b->p ? b->p : "", b->len);
        finish_rest(p, fn, user);
    } else if (p->mode == M_H_BODY && p->at_start == H_TOOL) {
        ob_sbuf_put(&p->tool, b->p ? b->p : "", b->len);
        json_error_t je;
        json_t *args = json_loadb(p->tool.p ? p->tool.p : "", p->tool.len, JSON_DECODE_ANY, &je);
        if (args) emit_tool(p, fn, user, p->tool_name, args);
        else emit_text(fn, user, OB_OUT_CONTENT, p->tool.p, p->tool.len);
        json_decref(args);
    } else if (p->mode == M_H_BODY && p->at_start == H_REASONING) {
        emit_text(fn, user, OB_OUT_REASONING, b->p, b->len);
    } else if (p->mode == M_THINK) {
        emit_text(fn, user, OB_OUT_REASONING, b->p, b->len);
    } else if (p->mode != M_H_HEADER) {
        emit_text(fn, user, OB_OUT_CONTENT, b->p, b->len);
    }
    b->len = 0;
}

void ob_outp_free(ob_outp *p) {
    ob_sbuf_free(&p->buf);
    ob_sbuf_free(&p->tool);
    free(p->tool_name);
    p->tool_name = NULL;
}
