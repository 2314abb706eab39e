#!/bin/sh
# Each kernel of a replayed decode step in place (h200_test.sh timeline, h200_bin.sh timeline):
# CUPTI's kernel records through an injection library (bench/cuda/ktrace.cc; the GPU machine has
# no Nsight Systems), their durations and the time from the kernel before each
# (bench/cuda/step_gaps.py), untraced tok/s beside the traced.
# Usage: h200_timeline.sh BINARY "FILES" [VAR=v ...]: the files in /tmp/m (already written), one
# trace with each setting (default X=1: none). Where the image lacks CUPTI, .gpu/kt holds
# ktrace.so built on the Debian machine and its libcupti.so.13.xz (the CUDA 13 toolkit's).
# Output under $OUT (timeline-FILE-SETTING.txt).
cd "$(dirname "$0")/../.." || exit 1
B=$1 FILES=$2 M=/tmp/m OUT=${OUT:-/tmp/out}
shift 2 || { echo "h200_timeline.sh BINARY FILES [VAR=v ...]"; exit 1; }
[ $# -gt 0 ] || set -- X=1
mkdir -p "$OUT"
CU=/usr/local/cuda; LIBC=$(dirname "$(find $CU/lib64/ $CU/extras/CUPTI/ -name 'libcupti.so*' 2>/dev/null | head -1)")
if ! g++ -O2 -shared -fPIC -o /tmp/ktrace.so bench/cuda/ktrace.cc -I$CU/include -I$CU/extras/CUPTI/include -L"$LIBC" -lcupti; then
    [ -f .gpu/kt/ktrace.so ] || { echo "timeline: no CUPTI here and no .gpu/kt"; exit 1; }
    mkdir -p /tmp/cupti && xz -dc .gpu/kt/libcupti.so.13.xz > /tmp/cupti/libcupti.so.13 && cp .gpu/kt/ktrace.so /tmp/ && LIBC=/tmp/cupti
fi
for f in $FILES; do for e in "$@"; do
    env $e $B bench -m $M/$f.gguf -p 0 -n 64 -r 3 --device cuda 2>&1 | grep -E "tg64|rror" | sed "s/^/untraced $e $f /"
    rm -f /tmp/k-$f.csv
    env $e LD_LIBRARY_PATH="$LIBC:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH=/tmp/ktrace.so KTRACE_OUT=/tmp/k-$f.csv \
        $B bench -m $M/$f.gguf -p 0 -n 64 -r 3 --device cuda 2>&1 | grep -E "tg64|rror|ktrace" | sed "s/^/traced $e $f /"
    T="$OUT/timeline-$f-$(echo "$e" | tr '=, ' '___').txt"
    python3 bench/cuda/step_gaps.py /tmp/k-$f.csv 32 > "$T" 2>&1
    tail -9 "$T"
done; done
