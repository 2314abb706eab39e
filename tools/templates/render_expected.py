#!/usr/bin/env python3
"""Writes the expected outputs the C template tests compare against, rendered by Python's jinja2
configured as transformers configures it (see oracle.py).

  tests/templates/expected.json   every (model template x conversation) of manifest.json:
                                  {"<template>/<conversation>": {"ok": true, "text": ...} or
                                   {"ok": false, "error": ..., "raise": <raise_exception msg>}}
  tests/templates/snippets.json   every case of snippet_cases.py with its expected result

Run from the repository root:  python3 tools/templates/render_expected.py
Needs: Python 3 with jinja2 >= 3.1 (this tree's expectations were written with jinja2 3.1.6).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
import snippet_cases  # noqa: E402

ROOT = "tests/templates"


def main():
    import jinja2

    with open(os.path.join(ROOT, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["now"] == oracle.FIXED_NOW
    expected = {}
    for t in manifest["templates"]:
        with open(os.path.join(ROOT, t["file"]), encoding="utf-8", newline="") as f:
            source = f.read()
        for c in manifest["conversations"]:
            with open(os.path.join(ROOT, "conversations", c + ".json"), encoding="utf-8") as f:
                conv = json.load(f)
            expected[f"{t['name']}/{c}"] = oracle.render(source, oracle.chat_variables(t["special"], conv))
    with open(os.path.join(ROOT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "results": expected}, f, ensure_ascii=False, indent=1)

    snippets = []
    for case in snippet_cases.CASES:
        source, variables = (case, {}) if isinstance(case, str) else case
        variables = json.loads(json.dumps(variables))  # what the C side gets: JSON types only
        r = oracle.render(source, variables)
        snippets.append({"template": source, "vars": variables, **r})
    with open(os.path.join(ROOT, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "now": oracle.FIXED_NOW, "cases": snippets}, f, ensure_ascii=False, indent=1)

    ok = sum(r["ok"] for r in expected.values())
    print(f"{len(expected)} template renders ({ok} ok, {len(expected) - ok} expected errors); "
          f"{len(snippets)} snippets ({sum(s['ok'] for s in snippets)} ok)")


if __name__ == "__main__":
    main()
