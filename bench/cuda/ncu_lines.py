#!/usr/bin/env python3
"""Source lines of a kernel by Nsight Compute's warp-stall samples, most first, from the CSV that
`ncu --import REPORT --page source --csv --print-source cuda,sass` writes (h200_test.sh stalls).
Each line: its share of the samples, file:line, the source text and its three largest stall
reasons. A report of several launches adds their samples line by line.
    python3 bench/cuda/ncu_lines.py attn-src.csv [lines]"""
import csv
import sys


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    hdr, fp, lines = None, "?", {}
    for r in csv.reader(open(path, newline="")):
        if not r:
            continue
        if r[0] == "File Path":
            fp, hdr = r[1].split("/")[-1], None
        elif r[0] == "Line No":
            hdr = r
        elif hdr and r[0].isdigit():
            d = dict(zip(hdr, r))
            try:
                n = float(d.get("Warp Stall Sampling (All Samples)") or 0)
            except ValueError:
                n = 0.0
            if n <= 0:
                continue
            key = (fp, int(r[0]))
            e = lines.setdefault(key, [0.0, r[1].strip(), {}])
            e[0] += n
            for k, v in d.items():  # per-reason columns: stall_x (all samples), not the "(Not-issued)" ones
                if k.startswith("stall_") and "(" not in k and v:
                    e[2][k[6:]] = e[2].get(k[6:], 0.0) + float(v)
    total = sum(e[0] for e in lines.values()) or 1.0
    print(f"{total:.0f} samples")
    for (f, ln), (n, src, st) in sorted(lines.items(), key=lambda x: -x[1][0])[:top]:
        why = " ".join(f"{k}={v:.0f}" for k, v in sorted(st.items(), key=lambda x: -x[1])[:3] if v > 0)
        print(f"{100 * n / total:5.1f}% {f}:{ln} {src[:80]} | {why}")


if __name__ == "__main__":
    main()
