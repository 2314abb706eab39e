#!/usr/bin/env python3
"""Where a recorded decode step's time goes, from a trace of every kernel's GPU start and duration.

Usage: step_gaps.py TRACE.csv [STEPS]
TRACE.csv has the columns "Start (ns)", "Duration (ns)" and "Name", one row a kernel, those of
replayed graphs included: bench/cuda/ktrace.cc writes it (CUPTI's records), as does Nsight
Systems (`nsys stats --report cuda_gpu_trace --format csv` of a run profiled with
`--cuda-graph-trace=node`). A step starts at its
`k_get_rows` kernel; the last STEPS steps (default 32) are kept, which share one kernel sequence.
Prints, by position in the step: the kernel, its median duration, the median time from the end
of the kernel before it to its start (negative: it started before that one ended, programmatic
dependent launch: its duration then includes its wait for that one) and the median time from the
end of the kernel before it to its own end (what it adds to the step: these sum to the span), then
the same by kernel and the step's median span against the sum of its kernels' durations.
"""
import csv
import statistics
import sys


def column(header, *keys):
    for i, h in enumerate(header):
        if all(k in h for k in keys):
            return i
    sys.exit("step_gaps: no column with %s in %s" % (keys, header))


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    head = next(i for i, r in enumerate(rows) if any("Start" in c for c in r))
    header, body = rows[head], rows[head + 1:]
    cs, cd, cn = column(header, "Start"), column(header, "Duration"), column(header, "Name")
    ev = sorted((int(float(r[cs])), int(float(r[cd])), r[cn]) for r in body if len(r) > max(cs, cd, cn))
    starts = [i for i, e in enumerate(ev) if "k_get_rows" in e[2]]
    if len(starts) < 3:
        sys.exit("step_gaps: fewer than 3 steps (k_get_rows) in the trace")
    steps = [ev[a:b] for a, b in zip(starts, starts[1:])]
    n = statistics.mode(len(s) for s in steps)
    steps = [s for s in steps if len(s) == n][-keep:]
    print("%d steps of %d GPU events each" % (len(steps), n))
    spans, busy = [], []
    for s in steps:
        spans.append((s[-1][0] + s[-1][1] - s[0][0]) / 1e3)
        busy.append(sum(e[1] for e in s) / 1e3)
    by_name = {}
    print("%4s %9s %9s %9s  %s" % ("pos", "dur us", "gap us", "adds us", "kernel"))
    for i in range(n):
        d = statistics.median(s[i][1] for s in steps) / 1e3
        g = statistics.median((s[i][0] - s[i - 1][0] - s[i - 1][1]) for s in steps) / 1e3 if i else 0.0
        a = statistics.median((s[i][0] + s[i][1] - s[i - 1][0] - s[i - 1][1]) for s in steps) / 1e3 if i else d
        name = steps[-1][i][2]
        short = name.split("(")[0][:90]
        t = by_name.setdefault(short, [0, 0.0, 0.0, 0.0])
        t[0] += 1
        t[1] += d
        t[2] += g
        t[3] += a
        print("%4d %9.2f %9.2f %9.2f  %s" % (i, d, g, a, short))
    print("\nby kernel: count, summed median durations, gaps before it and what it adds (us)")
    for k, (c, d, g, a) in sorted(by_name.items(), key=lambda kv: -kv[1][3]):
        print("%5d %9.1f %9.1f %9.1f  %s" % (c, d, g, a, k))
    print("\nstep span (first kernel's start to last's end): median %.1f us; kernels' durations summed: median %.1f us"
          % (statistics.median(spans), statistics.median(busy)))
    layer_summary([statistics.median((s[i][0] + s[i][1] - s[i - 1][0] - s[i - 1][1]) for s in steps) / 1e3 if i else 0.0
                   for i in range(n)], [e[2].split("(")[0][:90] for e in steps[-1]])


def layer_summary(adds, names):
    """The layers: the shortest period (3-40 kernels) of the names from the step's second kernel
    on, and by position in a layer the median over the inner layers of what each kernel adds."""
    n = len(names)
    best = None
    for p in range(3, 41):
        pairs = [(names[i], names[i + p]) for i in range(1, n - p - 1)]
        if len(pairs) >= 2 * p and sum(a == b for a, b in pairs) >= 0.9 * len(pairs):
            best = p
            break
    if not best:
        return
    layers = (n - 2) // best
    if layers < 3:
        return
    print("\na layer: %d kernels, %d layers; by position, the median over the inner layers of what each adds (us)" % (best, layers))
    total = 0.0
    for j in range(best):
        v = statistics.median(adds[1 + j + best * k] for k in range(1, layers - 1))
        total += v
        print("%4d %9.2f  %s" % (j, v, names[1 + j]))
    print("     %9.2f  the layer" % total)


if __name__ == "__main__":
    main()
