#!/bin/sh
# One H200 call on a fresh machine for the BitNet-2B shape alone (docs/bench.md, run 37): builds
# 1bit there (sm_90 only: SM90=0 for sm_80 + sm_90), writes one random-weight file
# (bench/configs/bitnet-2b-llamacpp-arch.json, TYPE=tq1_0 by default; about 40 s) into /tmp/m, then
# by the argument:
#   load           the process's whole time for load and one token, three rounds alternating:
#                  the file's types kept (OB_BACKEND_TQ1_AS_TQ2=0), converted on one thread
#                  (OB_CONVERT_THREADS=1), converted on every core (the default); then tg128 and
#                  pp512 kept and converted, and the trace of a replayed step
#                  (h200_timeline.sh: what each kernel of a layer adds)
#   ab VAR "VALS"  tg128 with VAR at each value, ROUNDS (default 2) rounds alternating
# TEST=1 runs the CUDA suites first (test_unit cuda_host cuda_kernels cuda_golden). Carry .gpu
# (deps.tar.xz). Output under $OUT.
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/deps /tmp/m && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
ARCH=; [ "${SM90:-1}" = 1 ] && ARCH='-gencode arch=compute_90,code=sm_90'
make CUDA=1 ${ARCH:+CUDA_ARCH="$ARCH"} -j16 build/1bit build/test_unit >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
T=${TYPE:-tq1_0} F=/tmp/m/bn-${TYPE:-tq1_0}.gguf
secs() { awk "BEGIN{print $(date +%s.%N) - $1}"; }
[ -f "$F" ] || ( t0=$(date +%s.%N); ./build/1bit convert --random bench/configs/bitnet-2b-llamacpp-arch.json -o "$F" --type "$T" \
    >/dev/null 2>&1; echo "convert $T rc $? $(secs "$t0") s" ) > "$OUT/convert.txt" 2>&1 &
[ "$TEST" = 1 ] && ./build/test_unit cuda_host cuda_kernels cuda_golden 2>&1 | grep -v "convert: wrote" > "$OUT/test-cuda.log"
wait
cat "$OUT/convert.txt" "$OUT/test-cuda.log" 2>/dev/null | tail -5
tg() { env "$1" ./build/1bit bench -m "$F" $2 -r 3 --device cuda 2>&1 | grep -E "tg|pp|rror" | sed "s/^/$1 /"; }
case "$1" in
load)
    for r in 1 2 3; do for e in OB_BACKEND_TQ1_AS_TQ2=0 OB_CONVERT_THREADS=1 X=1; do
        t0=$(date +%s.%N); env $e ./build/1bit bench -m "$F" -p 0 -n 1 -r 1 --device cuda >/dev/null 2>&1
        echo "load+1 $e rc $? $(secs "$t0") s"
    done; done | tee "$OUT/load.txt"
    for e in X=1 OB_BACKEND_TQ1_AS_TQ2=0; do tg $e "-p 512 -n 128"; done | tee "$OUT/tg.txt"
    OUT=$OUT timeout 120 sh bench/cuda/h200_timeline.sh "$PWD/build/1bit" "bn-$T" X=1 2>&1 | tail -14 ;;
ab)
    for r in $(seq "${ROUNDS:-2}"); do for v in $3; do tg "$2=$v" "-p 0 -n 128"; done; done | tee "$OUT/ab.txt" ;;
*) [ -z "$1" ] || echo "h200_bitnet.sh: unknown mode '$1' (load, ab VAR \"VALS\")" ;;
esac
