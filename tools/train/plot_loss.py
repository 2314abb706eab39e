#!/usr/bin/env python3
"""Loss curve of the demo models as an SVG (Python standard library only).

    python3 tools/train/plot_loss.py tools/train/train_log.csv docs/img/demo-loss.svg

Reads train.py's train_log.csv: training loss of both models every 25 steps (lines) and the
validation loss every 200 steps (dots), against tokens seen. The y axis is cut at Y_MAX so the
first steps (loss ~9) do not flatten the rest.
"""
import csv
import sys

W, H, ML, MR, MT, MB = 760, 440, 64, 20, 36, 52
Y_MAX = 6.0
SERIES = [("train_loss_ternary", "val_loss_ternary", "#d62728", "BitNet b1.58 (ternary, QAT)"),
          ("train_loss_twin", "val_loss_twin", "#1f77b4", "F16 twin (Llama)")]


def main(src, dst):
    rows = list(csv.DictReader(open(src)))
    xs = [int(r["tokens"]) / 1e6 for r in rows]
    x_max = max(xs)
    ys = [float(r[k]) for r in rows for k, _, _, _ in SERIES]
    y_min = min(ys)
    y_lo = max(0.0, int(y_min * 2) / 2 - 0.5)
    y_hi = Y_MAX

    def px(x):
        return ML + (W - ML - MR) * x / x_max

    def py(y):
        y = min(max(y, y_lo), y_hi)
        return MT + (H - MT - MB) * (1 - (y - y_lo) / (y_hi - y_lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">Demo models: loss per token (nats) '
           'against tokens seen</text>']
    # grid and axes
    y = y_lo
    while y <= y_hi + 1e-9:
        out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ML - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
        y += 0.5
    step = 25 if x_max > 150 else 10 if x_max > 40 else 5
    x = 0
    while x <= x_max + 1e-9:
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{MT}" y2="{H - MB}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{H - MB + 16}" text-anchor="middle">{x:g}</text>')
        x += step
    out.append(f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{(ML + W - MR) / 2}" y="{H - 14}" text-anchor="middle">tokens seen (millions)</text>')
    for i, (tk, vk, col, label) in enumerate(SERIES):
        pts = " ".join(f"{px(x):.1f},{py(float(r[tk])):.1f}" for x, r in zip(xs, rows))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="1.5"/>')
        for x, r in zip(xs, rows):
            if r[vk]:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(float(r[vk])):.1f}" r="3" fill="white" '
                           f'stroke="{col}" stroke-width="1.5"/>')
        ly = MT + 18 + 18 * i
        out.append(f'<line x1="{W - MR - 250}" x2="{W - MR - 226}" y1="{ly}" y2="{ly}" stroke="{col}" stroke-width="2"/>')
        out.append(f'<text x="{W - MR - 220}" y="{ly + 4}">{label}</text>')
    ly = MT + 18 + 18 * len(SERIES)
    out.append(f'<circle cx="{W - MR - 238}" cy="{ly}" r="3" fill="white" stroke="#333"/>')
    out.append(f'<text x="{W - MR - 220}" y="{ly + 4}">held-out loss (32 windows)</text>')
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
