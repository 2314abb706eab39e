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


STR_METHODS = ["strip()", "strip('H')", "split()", "split('o')", "rsplit(' ', 1)", "upper()", "lower()", "title()",
               "startswith('H')", "endswith('d')", "replace('o', '0')", "find('o')", "count('l')", "splitlines()",
               "lstrip()", "rstrip('\\n')", "capitalize()", "isdigit()", "partition(' ')", "zfill(12)", "center(15, '*')",
               "format(1)", "split('l', 1)", "endswith(('x', 'd'))", "swapcase()", "index('l')"]
STR_FILTERS = ["trim", "length", "upper", "lower", "title", "capitalize", "first", "last", "list", "string", "tojson",
               "wordcount", "replace('l', 'L')", "indent(2)", "center(9)", "truncate(5, true, '')", "e", "safe", "reverse",
               "default('D', true)", "int", "float", "striptags", "urlencode", "count", "pprint"]
NUM_FILTERS = ["abs", "round", "round(1)", "int", "float", "string", "tojson", "default(0)", "filesizeformat"]
SEQ_FILTERS = ["length", "first", "last", "list", "join(', ')", "join", "tojson", "tojson(indent=2)", "sort",
               "sort(reverse=true)", "unique|list", "reverse|list", "sum", "max", "min", "map('string')|list",
               "select|list", "reject('odd')|list", "batch(2)|list", "slice(2)|list", "string", "pprint", "count"]
MSG_FILTERS = ["map(attribute='role')|list", "selectattr('role', 'equalto', 'user')|list", "rejectattr('content')|list",
               "map(attribute='content', default='-')|join('/')", "groupby('role')|map(attribute='grouper')|list",
               "sort(attribute='role')|map(attribute='role')|join", "tojson", "length", "first", "last|tojson"]
DICT_FILTERS = ["dictsort", "dictsort(by='value', reverse=true)", "items|list", "tojson", "tojson(sort_keys=true)",
                "list", "length", "pprint", "string", "xmlattr"]


def typed(r, kind, depth):
    """An expression of a kind: str, num, seq, dict, msgs or any."""
    leaf = depth > 3 or r.random() < 0.35
    if kind == "str":
        if leaf:
            return r.choice(["s", "u", "'a'", "'Ab c'", "''", "'\\n'", "'é'", "d.a|string", "msgs[1].content"])
        k = r.random()
        if k < 0.3:
            return f"{typed(r, 'str', depth + 1)}.{r.choice(STR_METHODS)}" if r.random() < 0.5 else f"({typed(r, 'str', depth + 1)}).{r.choice(STR_METHODS[:8])}"
        if k < 0.55:
            return f"({typed(r, 'any', depth + 1)} ~ {typed(r, 'any', depth + 1)})"
        if k < 0.7:
            return f"({typed(r, 'str', depth + 1)} + {typed(r, 'str', depth + 1)})"
        if k < 0.85:
            return f"{typed(r, 'str', depth + 1)}[{r.choice(['0', '-1', '1:', '::-1', ':2', '1:-1'])}]"
        return f"({typed(r, 'str', depth + 1)} if {typed(r, 'any', depth + 1)} else {typed(r, 'str', depth + 1)})"
    if kind == "num":
        if leaf:
            return r.choice(["n", "f", "neg", "z", "1", "2.5", "-3", "1e3", "l|length", "s|length"])
        op = r.choice(["+", "-", "*", "/", "//", "%", "**"]) if r.random() < 0.8 else "+"
        a, b = typed(r, "num", depth + 1), typed(r, "num", depth + 1)
        if op == "**":
            b = r.choice(["2", "0", "-1", "3"])  # (x ** 0.5 of a negative x is complex: not supported)
        return f"({a} {op} {b})"
    if kind == "seq":
        if leaf:
            return r.choice(["l", "ls", "e", "[1, 2]", "(1, 'x')", "range(3)|list", "d.a", "s.split()"])
        return f"({typed(r, 'seq', depth + 1)} + {typed(r, 'seq', depth + 1)})" if r.random() < 0.3 else f"{typed(r, 'seq', depth + 1)}[{r.choice(['1:', '::-1', ':2'])}]"
    if kind == "dict":
        return r.choice(["d", "{'k': 1, 'a': 'b'}", "msgs[2].tool_calls[0].function", "dict(x=n, y=s)", "{}"])
    if kind == "msgs":
        return r.choice(["msgs", "msgs[1:]", "msgs[::-1]"])
    # any
    k = r.random()
    if leaf or k < 0.12:
        return r.choice(LITS) if r.random() < 0.4 else r.choice(NAMES)
    if k < 0.3:
        return typed(r, r.choice(["str", "num", "seq"]), depth)
    if k < 0.5:
        kind2 = r.choice(["str", "num", "seq", "dict", "msgs"])
        fl = {"str": STR_FILTERS, "num": NUM_FILTERS, "seq": SEQ_FILTERS, "dict": DICT_FILTERS, "msgs": MSG_FILTERS}[kind2]
        return f"{typed(r, kind2, depth + 1)}|{r.choice(fl)}"
    if k < 0.6:
        return f"({typed(r, 'any', depth + 1)} is {'not ' if r.random() < 0.3 else ''}{r.choice(TESTS)})"
    if k < 0.72:
        op = r.choice(["==", "!=", "<", ">=", "in", "not in", "and", "or"])
        if op in ("in", "not in"):
            return f"({typed(r, 'str', depth + 1)} {op} {typed(r, 'str', depth + 1)})"
        if op in ("<", ">="):
            kk = r.choice(["str", "num"])
            return f"({typed(r, kk, depth + 1)} {op} {typed(r, kk, depth + 1)})"
        return f"({typed(r, 'any', depth + 1)} {op} {typed(r, 'any', depth + 1)})"
    if k < 0.8:
        return "d." + r.choice(["get('a')", "get('zz', 5)", "items()|list", "keys()|list", "values()|list", "b", "zz", "c"])
    if k < 0.9:
        return f"({typed(r, 'any', depth + 1)} if {typed(r, 'any', depth + 1)} else {typed(r, 'any', depth + 1)})"
    return f"(not {typed(r, 'any', depth + 1)})"


def expr(r, depth=0):
    # mostly well-typed expressions (so that most renders succeed), some free-form ones
    if r.random() < 0.8:
        return typed(r, "any", depth)
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
    if k < 0.86:
        return tag(r, "macro m(a, b=2)") + "[{{ a }}{{ b }}]" + tag(r, "endmacro") + "{{ m(" + expr(r) + ") }}"
    return r.choice(EXTRA)(r, depth)


def _call_block(r, depth):
    return (tag(r, "macro w(x)") + "<{{ caller(x) }}{{ varargs }}{{ kwargs }}>" + tag(r, "endmacro") +
            tag(r, "call(v) w(" + expr(r) + ")") + "c{{ v }}" + block(r, depth) + tag(r, "endcall"))


def _loopctl(r, depth):
    ctl = r.choice(["break", "continue"])
    return (tag(r, "for x in " + r.choice(["l", "ls", "msgs", "range(4)", "'abc'"])) +
            "{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }}|{{ loop.revindex }}" +
            tag(r, f"if {expr(r)}") + tag(r, ctl) + tag(r, "endif") + "{{ x }}" + tag(r, "endfor"))


def _blocks(r, depth):
    kind = r.random()
    if kind < 0.3:
        return tag(r, "set v") + block(r, depth) + tag(r, "endset") + "[{{ v }}]"
    if kind < 0.5:
        return tag(r, "filter " + r.choice(["upper", "trim", "replace('a', 'b')", "indent(2)"])) + block(r, depth) + tag(r, "endfilter")
    if kind < 0.7:
        return tag(r, f"with q = {expr(r)}") + "{{ q }}" + block(r, depth) + tag(r, "endwith")
    if kind < 0.85:
        return "{% raw %}{{ raw }}{% endraw %}" + ws(r)
    return tag(r, "for x in [[1, [2, 3]], 4] recursive") + "({% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }}{% endif %})" + tag(r, "endfor")


def _formats(r, depth):
    return "{{ " + r.choice([
        f"'%s-%d-%.2f-%r' % ({expr(r)}, n, f, s)", f"'{{}}|{{!r}}|{{:>6}}'.format({expr(r)}, s, n)",
        f"'%(k)s' % {{'k': {expr(r)}}}", f"{expr(r)}|format(1)", f"dict(a={expr(r)})|tojson(sort_keys=true)",
        f"namespace(v={expr(r)}).v", f"[{expr(r)}, {expr(r)}]|map('tojson')|join(',')",
    ]) + " }}"


EXTRA = [_call_block, _loopctl, _blocks, _formats]


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
