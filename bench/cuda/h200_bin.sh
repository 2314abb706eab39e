#!/bin/sh
# An H200 call without the build there: runs a 1bit built on the Debian machine (sm_90 only:
# make BUILD=build CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90"), carried stripped and
# compressed as .gpu/bin/1bit.xz (strip -o /tmp/1bit.s build/1bit && xz -c /tmp/1bit.s >
# .gpu/bin/1bit.xz; .gpu is git-ignored, so the call names it in carry), with .gpu/deps.tar.xz's
# libraries. Saves the ~90 s a CUDA build takes there when a call only measures. It is unpacked
# to /tmp/1bit on every call (a warm machine's build/1bit may be another binary). Makes the
# Llama-3.2-1B Q4_0 file, and BitNet TQ2_0 where FILES names it, in /tmp/m (waiting for
# h200_setup.sh's where that one runs), then:
#   ab VAR "VALUES"      tg128 with VAR at each value, twice alternating
#   greedy VAR "VALUES"  48 greedy tokens with each value: the output's bytes and md5 (the same
#                        text: the same argmax; 0 bytes: the run failed)
#   timeline [VAR=v ...] each kernel of a replayed step with each setting (default X=1: none):
#                        bench/cuda/h200_timeline.sh, as h200_test.sh timeline
#   test                 `make test-cuda` without the build: the CUDA suites of a test_unit built
#                        here the same way, carried as .gpu/bin/test_unit.xz (strip -o /tmp/tu
#                        build/test_unit && xz -c /tmp/tu > .gpu/bin/test_unit.xz); no models made
# Files: FILES="l1b-Q4_0 bn-tq2_0" (default the first). Logs under $OUT.
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/deps /tmp/m && tar xJf .gpu/deps.tar.xz -C /tmp/deps || exit 1
export LD_LIBRARY_PATH=/tmp/deps/lib
if [ "$1" = test ]; then # (the suites make their own models from tests/golden, in process)
    xz -dc .gpu/bin/test_unit.xz > /tmp/test_unit && chmod +x /tmp/test_unit || { echo "h200_bin.sh: no .gpu/bin/test_unit.xz"; exit 1; }
    /tmp/test_unit cuda_host cuda_kernels cuda_golden 2>&1 | grep -v "convert: wrote" | tee "$OUT/test-cuda.log" | tail -6
    exit 0
fi
B=/tmp/1bit
xz -dc .gpu/bin/1bit.xz > $B && chmod +x $B || { echo "h200_bin.sh: no .gpu/bin/1bit.xz"; exit 1; }
M=/tmp/m
FILES=${FILES:-l1b-Q4_0}
if [ -f /tmp/bg.log ]; then # h200_setup.sh writes the same files: wait for its
    for f in $FILES; do i=0; while [ ! -f $M/$f.gguf ] && [ $i -lt 240 ]; do sleep 1; i=$((i + 1)); done; done
fi
[ -f $M/l1b-f16.gguf ] || $B convert --random bench/configs/llama-3.2-1b.json -o $M/l1b-f16.gguf --type f16 >/dev/null 2>&1
[ -f $M/l1b-Q4_0.gguf ] || $B quantize $M/l1b-f16.gguf $M/l1b-Q4_0.gguf Q4_0 16 >/dev/null 2>&1 || echo "model l1b-Q4_0 failed"
case " $FILES " in *" bn-tq2_0 "*)
    [ -f $M/bn-tq2_0.gguf ] || $B convert --random bench/configs/bitnet-2b-llamacpp-arch.json -o $M/bn-tq2_0.gguf --type tq2_0 \
        >/dev/null 2>&1 || echo "model bn-tq2_0 failed" ;;
esac
mode=$1
[ $# -gt 0 ] && shift
case "$mode" in
ab)
    for f in $FILES; do for _ in 1 2; do for v in $2; do env "$1=$v" $B bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 |
        grep -E "tg128|rror" | sed "s/^/$1=$v $f /"; done; done; done | tee "$OUT/ab-$1.txt" ;;
greedy)
    for f in $FILES; do for v in $2; do
        env "$1=$v" $B run -m $M/$f.gguf -p "Once upon a time" -n 48 --temp 0 --ignore-eos --device cuda > /tmp/greedy.txt 2>/dev/null
        echo "$1=$v $f bytes $(wc -c < /tmp/greedy.txt) md5 $(md5sum < /tmp/greedy.txt | cut -c1-32)"; done; done | tee "$OUT/greedy-$1.txt" ;;
timeline) OUT=$OUT sh bench/cuda/h200_timeline.sh $B "$FILES" "$@" ;;
*) echo "h200_bin.sh: ab VAR VALUES | greedy VAR VALUES | timeline [VAR=v ...] | test" ;;
esac
