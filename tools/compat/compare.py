#!/usr/bin/env python3
"""compare.py - the comparison step of the GGUF compatibility check (docs/compat.md).

Owns: reading raw float32 logit files [n_tokens][n_vocab] (llama_logits, ob_logits and the
transformers goldens tests/golden/<arch>/logits.f32), the max absolute difference and
top-1 (argmax) agreement between each pair, one Markdown table row per (arch, type); and the
tokenizer check (llama.cpp's ids of the golden texts against Hugging Face's).
Does not own: running the engines (compat.sh). Standard library only (no numpy here).

  compare.py header
  compare.py row ARCH TYPE N_VOCAB LLAMA.f32 OB.f32 HF.f32 [NOTE]   (a missing file: "fail")
  compare.py pair N_VOCAB A.f32 B.f32
  compare.py types MODEL.gguf          (tensor types in a GGUF file, e.g. "q4_0 x14, f32 x5")
  compare.py bytes A.gguf B.gguf [--by-type]  (tensors of the same name and type: identical bytes?)
  compare.py typediff A.gguf B.gguf    (does every tensor have the same type in both?)
  compare.py typelist MODEL.gguf BASE  (matrix types per layer role, compact)
  compare.py tokcheck LLAMA_LOGITS MODEL.gguf tokenizer_check.json [EXTRA LLAMA_LOGITS ARGS]
"""
import array
import json
import os
import struct
import subprocess
import sys

# ggml type ids (ggml.h) -> names, for the ones these files can hold.
GGML_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 10: "q2_K",
              11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 20: "iq4_nl", 23: "iq4_xs", 30: "bf16",
              34: "tq1_0", 35: "tq2_0", 36: "i2_s", 39: "mxfp4"}  # 36: bitnet.cpp's id (upstream has none)


def load(path, n_vocab):
    """Rows of logits, or None when the file is missing or empty (the engine failed)."""
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    if len(a) % n_vocab:
        sys.exit(f"compare.py: {path}: {len(a)} floats is not a multiple of n_vocab {n_vocab}")
    return [a[i:i + n_vocab] for i in range(0, len(a), n_vocab)]


def argmax(row):
    best = 0
    for i in range(1, len(row)):
        if row[i] > row[best]:  # ties -> lowest id, like the samplers
            best = i
    return best


def pair(a, b):
    """(max |a-b|, top-1 matches, n_tokens) or None when either side failed."""
    if a is None or b is None:
        return None
    if len(a) != len(b):
        sys.exit(f"compare.py: {len(a)} rows against {len(b)} rows")
    worst = 0.0
    top1 = 0
    for ra, rb in zip(a, b):
        worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)))
        top1 += argmax(ra) == argmax(rb)
    return worst, top1, len(a)


def fmt_diff(p):
    return "fail" if p is None else f"{p[0]:.2e}"


def fmt_top1(p):
    return "-" if p is None else f"{p[1]}/{p[2]}"


def cmd_row(argv):
    arch, typ, n_vocab, f_ll, f_ob, f_hf = argv[:6]
    note = argv[6] if len(argv) > 6 else ""
    n_vocab = int(n_vocab)
    ll, ob, hf = load(f_ll, n_vocab), load(f_ob, n_vocab), load(f_hf, n_vocab)
    p_lo, p_lh, p_oh = pair(ll, ob), pair(ll, hf), pair(ob, hf)
    print(f"| {arch} | {typ} | {fmt_diff(p_lo)} | {fmt_diff(p_lh)} | {fmt_diff(p_oh)} | "
          f"{fmt_top1(p_lo)} | {fmt_top1(p_lh)} | {fmt_top1(p_oh)} | {note} |")


def cmd_header():
    print("| arch | type | max abs llama.cpp - 1bit | max abs llama.cpp - HF | max abs 1bit - HF "
          "| top-1 llama.cpp = 1bit | top-1 llama.cpp = HF | top-1 1bit = HF | note |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def cmd_pair(argv):
    n_vocab = int(argv[0])
    p = pair(load(argv[1], n_vocab), load(argv[2], n_vocab))
    print("fail" if p is None else f"max_abs_diff {p[0]:.3e} top1 {p[1]}/{p[2]}")


# (bytes per block, elements per block) of the types above.
GGML_BLOCKS = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q4_0": (18, 32), "q4_1": (20, 32),
               "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32), "q2_K": (84, 256), "q3_K": (110, 256),
               "q4_K": (144, 256), "q5_K": (176, 256), "q6_K": (210, 256), "q8_K": (292, 256),
               "tq1_0": (54, 256), "tq2_0": (66, 256), "iq4_nl": (18, 32), "iq4_xs": (136, 256), "mxfp4": (17, 32)}


def gguf_read(path):
    """(tensors, data_start) of a GGUF file; tensors: name -> (type name, shape, offset, n bytes)."""
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    if f.read(4) != b"GGUF":
        sys.exit(f"compare.py: {path}: not a GGUF file")
    rd("I")  # version
    n_tensors, n_kv = rd("Q"), rd("Q")
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def value(vt):
        if vt == 8:  # string
            return f.read(rd("Q"))
        if vt == 9:  # array
            et, n = rd("I"), rd("Q")
            if et in sizes:
                f.seek(sizes[et] * n, 1)
            else:
                for _ in range(n):
                    value(et)
            return None
        return struct.unpack("<" + "BbHhIif?"[vt] if vt < 8 else "<" + {10: "Q", 11: "q", 12: "d"}[vt],
                             f.read(sizes[vt]))[0]

    for _ in range(n_kv):
        key = f.read(rd("Q"))
        v = value(rd("I"))
        if key == b"general.alignment":
            alignment = v
    tensors = {}
    for _ in range(n_tensors):
        name = f.read(rd("Q")).decode()
        nd = rd("I")
        shape = [rd("Q") for _ in range(nd)]
        t = GGML_TYPES.get(rd("I"), "?")
        off = rd("Q")
        n = 1
        for d in shape:
            n *= d
        bs, be = GGML_BLOCKS.get(t, (0, 1))
        # i2_s: 2 bits a weight, then one f32 scale and 28 bytes of padding per tensor (docs/compat.md)
        tensors[name] = (t, shape, off, n // 4 + 32 if t == "i2_s" else n // be * bs)
    data_start = (f.tell() + alignment - 1) // alignment * alignment
    f.close()
    return tensors, data_start


def cmd_types(argv):
    tensors, _ = gguf_read(argv[0])
    counts = {}
    for t, _, _, _ in tensors.values():
        counts[t] = counts.get(t, 0) + 1
    print(", ".join(f"{t} x{n}" for t, n in sorted(counts.items(), key=lambda kv: -kv[1])))


def cmd_bytes(argv):
    """Tensors of the same name and type in two GGUF files: how many hold identical bytes.
    With --by-type the differing tensors are counted per type instead of named."""
    by_type = "--by-type" in argv
    argv = [a for a in argv if a != "--by-type"]
    (ta, da), (tb, db) = gguf_read(argv[0]), gguf_read(argv[1])
    fa, fb = open(argv[0], "rb"), open(argv[1], "rb")
    same, differ, skipped = 0, [], []
    for name, (t, shape, off, nb) in sorted(ta.items()):
        if name not in tb or tb[name][0] != t or tb[name][1] != shape or nb == 0:
            skipped.append(name)
            continue
        fa.seek(da + off)
        fb.seek(db + tb[name][2])
        if fa.read(nb) == fb.read(nb):
            same += 1
        else:
            differ.append(f"{name} ({t})")
    n_differ = len(differ)
    if by_type and differ:  # "q4_K x14, q6_K x2" instead of every name
        counts = {}
        for d in differ:
            t = d[d.rindex("(") + 1:-1]
            counts[t] = counts.get(t, 0) + 1
        differ = [f"{t} x{n}" for t, n in sorted(counts.items())]
    print(f"{same} identical" + (f", {n_differ} differ: {', '.join(differ)}" if differ else "") +
          (f", {len(skipped)} not comparable (type/shape/absent)" if skipped else ""))


def cmd_typediff(argv):
    """Do two GGUF files give every tensor the same type? (a quantizer's plan against another's)"""
    (ta, _), (tb, _) = gguf_read(argv[0]), gguf_read(argv[1])
    diff = [f"{n} ({t} / {tb[n][0] if n in tb else 'absent'})" for n, (t, _, _, _) in sorted(ta.items())
            if n not in tb or tb[n][0] != t]
    print(f"all {len(ta)} the same" if not diff else f"{len(diff)} of {len(ta)} differ: {', '.join(diff[:6])}")


def cmd_typelist(argv):
    """Matrix types in a compact form: 'name=type' outside the layers, then per layer role the
    types of layers 0.. ('-' for BASE), roles all BASE left out (test_quant_files.c's form)."""
    tensors, _ = gguf_read(argv[0])
    base = argv[1]
    other, roles = [], {}
    for name, (t, shape, _, _) in tensors.items():
        if len(shape) < 2:
            continue
        short = name[:-len(".weight")] if name.endswith(".weight") else name
        if short.startswith("blk."):
            _, layer, role = short.split(".", 2)
            roles.setdefault(role, {})[int(layer)] = t
        else:
            other.append(f"{short}={t}")
    out = sorted(other)
    for role in sorted(roles):
        seq = [roles[role][k] for k in sorted(roles[role])]
        if any(t != base for t in seq):
            out.append(f"{role}=" + ",".join("-" if t == base else t for t in seq))
    print(" ".join(out))


def cmd_tokcheck(argv):
    tool, model, check, extra = argv[0], argv[1], argv[2], argv[3:]
    samples = json.load(open(check))["samples"]
    ok = 0
    for s in samples:
        # The goldens' BOS is added by the post-processor: compare ids_with_special.
        r = subprocess.run([tool, model, "--tokenize", s["text"]] + extra, capture_output=True, text=True)
        if r.returncode != 0:
            why = [l.split("error loading model: ", 1)[1] for l in r.stderr.splitlines() if "error loading model: " in l]
            print(f"llama.cpp could not load the file: {why[-1] if why else r.stderr.strip()[-200:]}")
            return 1
        got = json.loads(r.stdout)["tokens"]
        want = s["ids_with_special"]
        if got == want:
            ok += 1
        else:
            n = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            print(f"tokenize MISMATCH {s['text']!r}: first difference at {n}: llama.cpp {got[n:n + 6]} HF {want[n:n + 6]}")
    print(f"tokenizer: llama.cpp = HF on {ok}/{len(samples)} texts")
    return 0 if ok == len(samples) else 1


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == "header":
        cmd_header()
    elif cmd == "row" and len(argv) >= 6:
        cmd_row(argv)
    elif cmd == "pair" and len(argv) == 3:
        cmd_pair(argv)
    elif cmd == "bytes" and len(argv) in (2, 3):
        cmd_bytes(argv)
    elif cmd == "types" and len(argv) == 1:
        cmd_types(argv)
    elif cmd == "typediff" and len(argv) == 2:
        cmd_typediff(argv)
    elif cmd == "typelist" and len(argv) == 2:
        cmd_typelist(argv)
    elif cmd == "tokcheck" and len(argv) >= 3:
        sys.exit(cmd_tokcheck(argv))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
