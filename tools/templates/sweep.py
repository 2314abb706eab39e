#!/usr/bin/env python3
"""Renders every .jinja template of a directory over every conversation of
tests/templates/conversations with both Python's jinja2 (as transformers sets it up, oracle.py)
and `1bit template`, and reports every pair whose outputs differ (or where one fails and the
other does not, or the raise_exception messages differ).

  python3 tools/templates/sweep.py DIR [--bin build/1bit]

e.g. DIR = a llama.cpp checkout's models/templates (68 real templates): docs/templates.md
records the last run. Run from the repository root.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

SPECIAL = {"bos_token": "<BOS>", "eos_token": "<EOS>", "unk_token": "<UNK>", "pad_token": "<PAD>"}


def render_c(binary, template_path, conv, tmp):
    cfg = os.path.join(tmp, "tokenizer_config.json")
    with open(cfg, "w", encoding="utf-8") as f:
        json.dump(SPECIAL, f)
    msgs = os.path.join(tmp, "messages.json")
    with open(msgs, "w", encoding="utf-8") as f:
        json.dump({"messages": conv["messages"], **({"tools": conv["tools"]} if "tools" in conv else {})}, f)
    cmd = [binary, "template", "--tokenizer-config", cfg, "--chat-template-file", template_path,
           "--messages", msgs, "--now", str(oracle.FIXED_NOW)]
    if not conv.get("add_generation_prompt", True):
        cmd.append("--no-generation-prompt")
    for k, v in conv.get("vars", {}).items():
        cmd += ["--var", f"{k}={json.dumps(v)}"]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode:
        return {"ok": False, "error": p.stderr.decode("utf-8", "replace")}
    return {"ok": True, "text": p.stdout.decode("utf-8")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bin", default="build/1bit")
    a = ap.parse_args()
    convs = {}
    for p in sorted(glob.glob("tests/templates/conversations/*.json")):
        with open(p, encoding="utf-8") as f:
            convs[os.path.basename(p)[:-5]] = json.load(f)
    pairs = differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        for t in sorted(glob.glob(os.path.join(a.dir, "*.jinja"))):
            with open(t, encoding="utf-8", newline="") as f:
                src = f.read()
            for name, conv in convs.items():
                want = oracle.render(src, oracle.chat_variables(SPECIAL, conv))
                got = render_c(a.bin, t, conv, tmp)
                pairs += 1
                same = want["ok"] == got["ok"] and (
                    want["text"] == got["text"] if want["ok"] else not want.get("raise") or want["raise"] in got["error"])
                if not same:
                    differ += 1
                    print(f"DIFFER {os.path.basename(t)} / {name}\n  jinja2: {str(want)[:300]}\n  1bit:   {str(got)[:300]}")
    print(f"{pairs} pairs, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
