#!/usr/bin/env python3
"""Differential fuzzing of the template engine against jinja2: generates random templates from a
grammar of the constructs chat templates use (literals, variables, operators, filters, tests,
methods, if / for / set / macro / namespace, whitespace control), renders each with jinja2
(oracle.py) and with a driver linked against the C engine, and prints every case where the
outputs differ, or one fails and the other does not.

  python3 tools/templates/difffuzz.py DRIVER [N] [SEED]

DRIVER reads a JSON array of {"t": template, "v": variables} and writes a JSON array of
{"ok": bool, "text"|"error": ...} (docs/templates.md shows the ten-line one used).
"""
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

VARS = {
    "s": "Hello World", "u": "  héllo \u00e9t\u00e9\n", "n": 3, "f": 2.5, "neg": -7, "z": 0, "t": True,
    "nil": None, "l": [3, 1, 2], "ls": ["b", "A", "c"], "e": [], "d": {"b": 1, "a": [1, 2], "c": None},
    "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": " hi "},
             {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
             {"role": "tool", "content": "{\"r\": 1}"}],
}
NAMES = list(VARS) + ["missing"]
FILTERS = ["trim", "length", "upper", "lower", "title", "capitalize", "first", "last", "list", "string", "tojson",
           "tojson(indent=2)", "join(', ')", "join", "default('D')", "default('D', true)", "int", "float", "abs", "round",
           "round(1)", "sort", "sort(reverse=true)", "unique|list", "reverse|list", "items|list", "dictsort", "sum",
           "max", "min", "map('string')|list", "map(attribute='role')|list", "select|list", "reject('none')|list",
           "selectattr('role', 'equalto', 'user')|list", "rejectattr('content')|list", "batch(2)|list", "wordcount",
           "replace('l', 'L')", "indent(2)", "center(9)", "truncate(5, true, '')", "count", "e", "safe", "pprint"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "boolean", "true", "false", "odd", "even", "lower", "upper", "divisibleby(2)", "in([1, 2, 3])", "eq(3)",
         "ne('x')", "gt(1)", "lt(2.5)", "callable", "escaped"]
METHODS = ["strip()", "strip('H')", "split()", "split('o')", "rsplit(' ', 1)", "upper()", "lower()", "title()",
           "startswith('H')", "endswith('d')", "replace('o', '0')", "find('o')", "count('l')", "splitlines()",
           "lstrip()", "rstrip('\\n')", "capitalize()", "isdigit()", "format(1)", "partition(' ')", "zfill(4)",
           "get('a')", "get('zz', 5)", "items()|list", "keys()|list", "values()|list", "index(1)", "count(1)"]
LITS = ["1", "0", "-2", "2.5", "1e3", "'a'", "'Ab c'", "''", "none", "true", "false", "[1, 2]", "[]", "(1, 'x')",
        "{'k': 1}", "'\\n'", "'é'"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]


def expr(r, depth=0):
    k = r.random()
    if depth > 3 or k < 0.3:
        return r.choice(LITS) if r.random() < 0.4 else r.choice(NAMES)
    if k < 0.45:
        return f"({expr(r, depth + 1)} {r.choice(OPS)} {expr(r, depth + 1)})"
    if k < 0.6:
        return f"{expr(r, depth + 1)}|{r.choice(FILTERS)}"
    if k < 0.7:
        return f"({expr(r, depth + 1)} is {'not ' if r.random() < 0.3 else ''}{r.choice(TESTS)})"
    if k < 0.8:
        return f"{r.choice(NAMES)}.{r.choice(METHODS)}"
    if k < 0.87:
        sub = r.choice(["0", "-1", "1:", "::-1", ":2", "'a'", "'role'"])
        return f"{expr(r, depth + 1)}[{sub}]"
    if k < 0.93:
        return f"({expr(r, depth + 1)} if {expr(r, depth + 1)} else {expr(r, depth + 1)})"
    return f"(not {expr(r, depth + 1)})"


def ws(r):
    return r.choice(["", "", " ", "\n", "  \n", "\n  "])


def tag(r, body):
    return "{%" + r.choice(["", "-", "+"]) + " " + body + " " + r.choice(["", "-", "+"]) + "%}"


def stmt(r, depth=0):
    k = r.random()
    if depth > 2 or k < 0.35:
        return ws(r) + "{{" + r.choice(["", "-"]) + " " + expr(r) + " " + r.choice(["", "-"]) + "}}" + ws(r)
    if k < 0.5:
        return tag(r, f"if {expr(r)}") + block(r, depth) + (tag(r, "else") + block(r, depth) if r.random() < 0.5 else "") + tag(r, "endif")
    if k < 0.65:
        target = r.choice(["x", "k, v"])
        it = r.choice(["l", "ls", "msgs", "d.items()", "s", "range(3)", "e", "d", "msgs|selectattr('content')"])
        cond = f" if {expr(r)}" if r.random() < 0.2 else ""
        inner = block(r, depth) + ("{{ loop.index }}{{ loop.last }}" if r.random() < 0.5 else "")
        return tag(r, f"for {target} in {it}{cond}") + inner + tag(r, "endfor")
    if k < 0.75:
        return tag(r, f"set {r.choice(NAMES[:-1])} = {expr(r)}")
    if k < 0.82:
        return tag(r, "set ns = namespace(a=0)") + tag(r, "for x in l") + tag(r, "set ns.a = ns.a + x") + tag(r, "endfor") + "{{ ns.a }}"
    if k < 0.9:
        return tag(r, "macro m(a, b=2)") + "[{{ a }}{{ b }}]" + tag(r, "endmacro") + "{{ m(" + expr(r) + ") }}"
    return "{# c #}" + ws(r) + "{{ " + expr(r) + " }}"


def block(r, depth):
    return "".join(stmt(r, depth + 1) for _ in range(r.randint(1, 3)))


def main():
    driver = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    r = random.Random(seed)
    cases = ["".join(stmt(r) for _ in range(r.randint(1, 4))) for _ in range(n)]
    # a fresh copy each time: some failing Python operations mutate their operand first
    # (x|indent does `x += "\n"`, which extends a list in place)
    want = [oracle.render(t, copy.deepcopy(VARS)) for t in cases]
    with tempfile.TemporaryDirectory() as tmp:
        jobs = os.path.join(tmp, "jobs.json")
        out = os.path.join(tmp, "out.json")
        with open(jobs, "w", encoding="utf-8") as f:
            json.dump([{"t": t, "v": VARS} for t in cases], f)
        subprocess.run([driver, jobs, out], check=True)
        with open(out, encoding="utf-8") as f:
            got = json.load(f)
    bad = 0
    for t, w, g in zip(cases, want, got):
        same = w["ok"] == g["ok"] and (w["text"] == g["text"] if w["ok"] else True)
        # addresses and generator reprs differ by nature
        if not same and w["ok"] and g["ok"] and (" at 0x" in w["text"]):
            continue
        if not same:
            bad += 1
            print("TEMPLATE:", repr(t))
            print("  jinja2:", repr(w.get("text", w.get("error")))[:300])
            print("  1bit:  ", repr(g.get("text", g.get("error")))[:300])
    print(f"{n} templates, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
