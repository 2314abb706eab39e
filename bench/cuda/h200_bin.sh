#!/bin/sh
# An H200 call without the build there: runs build/1bit made on the Debian machine (sm_90 only:
# make BUILD=build CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90"), carried stripped and
# compressed as .gpu/bin/1bit.xz (strip -o /tmp/1bit.s build/1bit && xz -c /tmp/1bit.s >
# .gpu/bin/1bit.xz), with .gpu/deps.tar.xz's libraries. Saves the ~90 s a CUDA build takes there
# when a call only measures. Makes the Llama-3.2-1B Q4_0 file (and BitNet TQ2_0 with BN=1) in
# /tmp/m, then:
#   ab VAR "VALUES"   tg128 with VAR at each value, twice alternating
#   greedy VAR "VALUES"  the md5 of 48 greedy tokens with each value (the same text: the same argmax)
#   timeline VAR=v ... each kernel of a replayed step with each setting (as h200_test.sh timeline)
# Files: FILES="l1b-Q4_0 bn-tq2_0" (default the first). Logs under $OUT.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/deps build /tmp/m && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export LD_LIBRARY_PATH=/tmp/deps/lib
[ -x build/1bit ] || { xz -dc .gpu/bin/1bit.xz > build/1bit && chmod +x build/1bit; } || exit 1
M=/tmp/m
[ -f $M/l1b-Q4_0.gguf ] || { ./build/1bit convert --random bench/configs/llama-3.2-1b.json -o $M/l1b-f16.gguf --type f16 >/dev/null 2>&1 &&
    ./build/1bit quantize $M/l1b-f16.gguf $M/l1b-Q4_0.gguf Q4_0 16 >/dev/null 2>&1; } || echo "model l1b-Q4_0 failed"
[ "$BN" = 1 ] && [ ! -f $M/bn-tq2_0.gguf ] && { ./build/1bit convert --random bench/configs/bitnet-2b-llamacpp-arch.json \
    -o $M/bn-tq2_0.gguf --type tq2_0 >/dev/null 2>&1 || echo "model bn-tq2_0 failed"; }
FILES=${FILES:-l1b-Q4_0}
mode=$1; shift
case "$mode" in
ab)
    for f in $FILES; do for rep in 1 2; do for v in $2; do env $1=$v ./build/1bit bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 |
        grep -E "tg128|rror" | sed "s/^/$1=$v $f /"; done; done; done | tee $OUT/ab-$1.txt ;;
greedy)
    for f in $FILES; do for v in $2; do printf "%s=%s %s " "$1" "$v" "$f"; env $1=$v ./build/1bit run -m $M/$f.gguf -p "Once upon a time" \
        -n 48 --temp 0 --ignore-eos --device cuda 2>/dev/null | md5sum; done; done | tee $OUT/greedy-$1.txt ;;
timeline)
    CU=/usr/local/cuda; LIBC=$(dirname "$(find $CU/lib64/ $CU/extras/CUPTI/ -name 'libcupti.so*' 2>/dev/null | head -1)")
    if ! g++ -O2 -shared -fPIC -o build/ktrace.so bench/cuda/ktrace.cc -I$CU/include -I$CU/extras/CUPTI/include -L$LIBC -lcupti 2>/dev/null; then
        mkdir -p /tmp/cupti && xz -dc .gpu/kt/libcupti.so.13.xz > /tmp/cupti/libcupti.so.13 && cp .gpu/kt/ktrace.so build/ && LIBC=/tmp/cupti
    fi
    for f in $FILES; do for e in "$@"; do
        env $e LD_LIBRARY_PATH=$LIBC:$LD_LIBRARY_PATH CUDA_INJECTION64_PATH=$PWD/build/ktrace.so KTRACE_OUT=/tmp/k-$f.csv \
            ./build/1bit bench -m $M/$f.gguf -p 0 -n 64 -r 3 --device cuda 2>&1 | grep -E "tg64|rror" | sed "s/^/traced $e $f /"
        T=$OUT/timeline-$f-$(echo $e | tr '=,' '__').txt
        python3 bench/cuda/step_gaps.py /tmp/k-$f.csv 32 > $T 2>&1
        tail -9 $T; done; done ;;
*) echo "h200_bin.sh: ab | greedy | timeline" ;;
esac
