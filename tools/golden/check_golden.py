#!/usr/bin/env python3
"""Sanity-check tests/golden/ with plain Python (no numpy).

    python3 tools/golden/check_golden.py [tests/golden]
"""
import array
import json
import math
import os
import struct
import sys

WANT = {"llama": "F16", "mistral": "F16", "qwen2": "F16", "qwen3": "F16", "bitnet": "BF16"}


def read_f32(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def check_aq(d, meta, cfg, nt):
    """aq_codes.i8 / aq_absmax.f32: sizes, and every row holds a +-127 (its absmax element)."""
    errs = []
    codes = array.array("b")
    with open(os.path.join(d, "aq_codes.i8"), "rb") as f:
        codes.frombytes(f.read())
    amax = read_f32(os.path.join(d, "aq_absmax.f32"))
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    widths = [cfg["hidden_size"], cfg["num_attention_heads"] * hd, cfg["hidden_size"], cfg["intermediate_size"]]
    widths = widths * meta["n_layers"]
    if len(codes) != nt * sum(widths) or len(amax) != nt * len(widths):
        return [f"aq sizes {len(codes)} codes / {len(amax)} absmax"]
    if not all(k in meta["files"] for k in ("aq_codes.i8", "aq_absmax.f32")):
        errs.append("aq files not in meta.json files")
    off = 0
    for w in widths:
        for _ in range(nt):
            if max(abs(v) for v in codes[off:off + w]) != 127:
                errs.append(f"aq row at byte {off} has no +-127")
                break
            off += w
    if not all(math.isfinite(a) and a > 0 for a in amax):
        errs.append("aq absmax not finite / positive")
    return errs


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    ok = True
    for name, want in WANT.items():
        d = os.path.join(root, name)
        meta = json.load(open(os.path.join(d, "meta.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        toks = json.load(open(os.path.join(d, "tokens.json")))["tokens"]
        nt, nv = meta["n_tokens"], meta["n_vocab"]
        lg = read_f32(os.path.join(d, "logits.f32"))
        hd = read_f32(os.path.join(d, "hidden.f32"))
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        dts = sorted({v["dtype"] for k, v in hdr.items() if k != "__metadata__"})
        maxabs = max(abs(x) for x in lg)
        errs = []
        if len(toks) != nt or not all(0 <= t < nv for t in toks) or len(set(toks)) == nt:
            errs.append("tokens")
        if len(lg) != nt * nv or nv != cfg["vocab_size"]:
            errs.append(f"logits size {len(lg)} != {nt}*{nv}")
        if len(hd) != meta["n_layers"] * nt * cfg["hidden_size"]:
            errs.append("hidden size")
        if not all(math.isfinite(x) for x in lg) or maxabs == 0:
            errs.append("logits not finite / all zero")
        if abs(maxabs - meta["max_abs_logit"]) > 1e-6 * max(1, maxabs):
            errs.append("max_abs_logit mismatch")
        if dts != [want]:
            errs.append(f"safetensors dtypes {dts} != {want}")
        if cfg.get("bos_token_id") != 318 or cfg.get("eos_token_id") != 319:
            errs.append("bos/eos ids")
        aq = os.path.join(d, "aq_codes.i8")
        if os.path.exists(aq):  # bitnet, made with make_golden.py --aq-codes
            errs += check_aq(d, meta, cfg, nt)
        ok &= not errs
        print(f"{name:8s} tokens={nt} vocab={nv} logits={len(lg)} floats max|logit|={maxabs:.4f} "
              f"safetensors={dts} tensors={len(hdr) - ('__metadata__' in hdr)} "
              f"{'OK' if not errs else 'FAIL ' + '; '.join(errs)}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
