#!/usr/bin/env python3
"""gguf_bytes.py — bytes of weights one decode step reads from a GGUF file (stdlib only).

Prints "<bytes_per_token> <file_tensor_bytes> <n_params>" for FILE: every tensor's bytes, except
that token_embd.weight counts as one row when the file has its own output.weight (the embedding
lookup reads one row per token); with tied embeddings the whole table is read by the output
matmul. Tensor byte sizes are taken from the gaps between tensor offsets, so any type (including
ones this script does not know) is sized exactly as the file lays it out.
usage: gguf_bytes.py FILE.gguf
"""
import struct
import sys


def main(path):
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # header + tensor infos fit in far less
        f.seek(0, 2)
        file_size = f.tell()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def rstr():
        nonlocal pos
        n = rd("Q")
        s = data[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    fmts = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rval(t):
        nonlocal pos
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            if et == 8:
                return [rstr() for _ in range(n)]
            pos += sizes[et] * n
            return None
        return rd(fmts[t])

    magic, version = rd("I"), rd("I")
    if magic != 0x46554747:
        sys.exit("not a GGUF file")
    n_tensors, n_kv = rd("Q"), rd("Q")
    align = 32
    for _ in range(n_kv):
        key = rstr()
        val = rval(rd("I"))
        if key == "general.alignment":
            align = val
    tensors = []
    for _ in range(n_tensors):
        name = rstr()
        nd = rd("I")
        dims = [rd("Q") for _ in range(nd)]
        ttype, off = rd("I"), rd("Q")
        tensors.append((off, name, dims))
    data_start = (pos + align - 1) // align * align
    data_size = file_size - data_start
    tensors.sort()
    total, n_params = 0, 0
    by_name = {}
    for i, (off, name, dims) in enumerate(tensors):
        end = tensors[i + 1][0] if i + 1 < len(tensors) else data_size
        by_name[name] = (end - off, dims)
        total += end - off
        p = 1
        for d in dims:
            p *= d
        n_params += p
    per_token = total
    if "output.weight" in by_name and "token_embd.weight" in by_name:
        b, dims = by_name["token_embd.weight"]
        per_token -= b - b // dims[1]
    print(per_token, total, n_params)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
