#!/bin/sh
# First GPU call of the H200 run: build with CUDA there, `make test-cuda`, copy bandwidth (and
# once a machine, bench/cuda/syncs.cu's, persist.cu's and tmabw.cu's lines, after it in copybw.txt), and
# h200_setup.sh started in the background (llama.cpp's build, the benchmark models) for
# h200_bench.sh on the same machine. Then, by the argument:
#   probe    tg128/pp512 with recorded steps (CUDA graphs) off and on (OB_CUDA_GRAPH=0/1)
#   profile  per-op GPU times of decode (OB_CUDA_PROFILE=1, eager launches) on three models
#   quick    tg128/pp512 of four files, the profile of two, then the switches off and on
#            (OB_CUDA_LAYER on five files, OB_CUDA_PDL: tg128), and Nsight Compute's kernel times
#            and sections of decode (LLAMA=0: no llama.cpp build). At most 8 files come back.
#   check    after a change: tg128/pp512 of Llama-1B Q4_0 and BitNet TQ2_0, BitNet's profile
#   ab VAR VALUES [VAR VALUES ...]  each switch at each of its values (e.g. "0 1"), twice
#            alternating: tg128 of the 1-2B files (FILES="..." for fewer; ARGS="-p 512,4096 -n 0"
#            PAT=pp for prompts instead; the 8B files once setup has written them), then the per-op
#            profile (OB_CUDA_PROFILE=1) of Llama-1B Q4_0 as built (PROF=FILE another file,
#            PROFENV="VAR=v" with a setting)
#   abbuild DEFS [DEFS2]  build options against the default build: build-b/ built with the
#            nvcc definitions DEFS (e.g. "-DOB_CUDA_PDL_EARLY=0"), build-c/ with DEFS2 if given
#            (TESTB=1 runs their `make test-cuda` too), then tg128 of the 1-2B files (FILES="..."
#            for fewer) with each binary, twice (the second time in the reverse order), and the
#            per-op profile of the first file with each (and the ffn kernel's stretch trace, OB_CUDA_FFN_TRACE=1).
#            Make does not see a change of DEFS: on a
#            warm machine, rm -rf build-b build-c first
#   stalls   Nsight Compute's stall reasons by source line of the decode attention (Llama-1B Q4_0)
#            and the row kernel (BitNet I2_S's norms), built with -lineinfo in build-b/: the
#            reports, their source pages as CSV and the lines with the most samples
#            (bench/cuda/ncu_lines.py)
#   timeline each kernel of a replayed decode step in place (CUPTI's kernel records,
#            bench/cuda/ktrace.cc; bench/cuda/step_gaps.py): durations and the gaps between them
#            (FILES="...", TLENV="VAR=v VAR2=w": a trace with each setting)
#   steps    what the GPU idles between decode steps: tg128 of the 1-2B files (FILES="...") with
#            OB_CUDA_STEP_TIMES=1 (replays' median GPU time against the host's time between launches)
#   (none)   build, tests and the background setup only (before h200_bench.sh)
# NOTEST=1 skips `make test-cuda` (a later call on the same machine); ONCE=0 the once-a-machine benchmarks.
# Build dependencies the GPU image lacks travel in .gpu/deps.tar.xz (headers and shared
# libraries of the Debian build machine). Logs under $OUT.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
trap 'OUT=$OUT sh bench/cuda/out_fit.sh' EXIT # (at most 8 files come back from a call)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/deps && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
make CUDA=1 -j16 build/1bit build/test_unit >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
[ -f /tmp/bg.log ] || LLAMA=${LLAMA:-1} setsid nohup sh bench/cuda/h200_setup.sh >/tmp/bg.log 2>&1 < /dev/null &
/usr/local/cuda/bin/nvcc -O2 -o build/copybw bench/cuda/copybw.cu && ./build/copybw | tee $OUT/copybw.txt
# what a cluster barrier, a dependent launch and a persistent kernel's phase cost, and what a
# persistent 1B layer could reach (docs/cuda.md item 1): once a machine and source (the carried
# tree's times are the copy's, so the source's md5 says), after the bandwidth in copybw.txt
once() { [ "$(md5sum < bench/cuda/$1.cu)" = "$(cat build/$1.md5 2>/dev/null)" ] || { /usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -Isrc \
    -o build/$1 bench/cuda/$1.cu && md5sum < bench/cuda/$1.cu > build/$1.md5 && timeout 120 ./build/$1 | tee -a $OUT/copybw.txt; }; }
[ "$ONCE" = 0 ] || { once syncs; once persist; once tmabw; } # (ONCE=0: not on this machine)
# NOTEST=1: a later call on the same machine (the tests ran in the first)
[ "$NOTEST" = 1 ] || timeout 400 make test-cuda 2>&1 | grep -v "convert: wrote" | tee $OUT/test-cuda.log | tail -6
M=/tmp/m
# every GGUF is written to NAME.tmp and renamed when complete, so a file that exists is whole
waitfor() { i=0; while [ ! -f $M/$1 ] && [ $i -lt 240 ]; do sleep 1; i=$((i+1)); done; }
waitfor l1b-Q4_0.gguf
ab() { # VAR model bench-args pattern [values]: each value of VAR, twice alternating
    for rep in 1 2; do for v in ${5:-0 1}; do env $1=$v ./build/1bit bench -m $M/$2.gguf $3 -r 3 --device cuda 2>&1 |
        grep -E "$4|rror" | sed "s/^/$1=$v $2 /"; done; done; }
case "$1" in
probe)
    for g in 0 1; do OB_CUDA_GRAPH=$g ./build/1bit bench -m $M/l1b-Q4_0.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 |
        grep -E "tg|pp|rror" | sed "s/^/graph=$g /"; done | tee $OUT/probe.txt
    waitfor bn-tq2_0.gguf
    for g in 0 1; do OB_CUDA_GRAPH=$g ./build/1bit bench -m $M/bn-tq2_0.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 |
        grep -E "tg|rror" | sed "s/^/graph=$g /"; done | tee -a $OUT/probe.txt ;;
quick)
    waitfor l1b-Q4_K_M.gguf
    for f in l1b-Q4_0 l1b-Q4_K_M l1b-f16; do ./build/1bit bench -m $M/$f.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg|pp|rror" | sed "s/^/$f /"; done | tee $OUT/quick.txt
    waitfor bn-tq2_0.gguf
    ./build/1bit bench -m $M/bn-tq2_0.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg|pp|rror" | sed "s/^/bn-tq2_0 /" | tee -a $OUT/quick.txt
    for f in l1b-Q4_0 bn-tq2_0; do OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/$f.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 | head -30; done >> $OUT/quick.txt
    # the switches, each off and on, twice alternating: the whole-layer decode kernel (default) against
    # the separate ops, programmatic dependent launch
    { ab OB_CUDA_LAYER l1b-Q4_0 "-p 0 -n 128" tg; ab OB_CUDA_LAYER l1b-Q4_K_M "-p 0 -n 128" tg; ab OB_CUDA_LAYER bn-tq2_0 "-p 0 -n 128" tg
      waitfor bn-i2_s.gguf; ab OB_CUDA_LAYER bn-tq1_0 "-p 0 -n 128" tg; ab OB_CUDA_LAYER bn-i2_s "-p 0 -n 128" tg
      ab OB_CUDA_PDL l1b-Q4_0 "-p 0 -n 128" tg; } | tee $OUT/ab.txt
    # each kernel's own time (Nsight Compute serializes them: no overlap) for one decode token
    # of each model, recorded steps as in use: skip the warm-up and the first tokens
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    for f in l1b-Q4_0 bn-tq2_0; do timeout 150 $NCU --clock-control none --csv --launch-skip 300 --launch-count 100 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum ./build/1bit bench -m $M/$f.gguf -p 0 -n 32 -r 1 \
        --device cuda > $OUT/ncu-$f.csv 2>/dev/null; done
    # throughput, occupancy, stall reasons and memory traffic of the whole-layer kernel (two launches)
    timeout 150 $NCU --clock-control none --kernel-name regex:k_layer --launch-skip 100 --launch-count 2 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
        env OB_CUDA_LAYER=1 ./build/1bit bench -m $M/l1b-Q4_0.gguf -p 0 -n 16 -r 1 --device cuda > $OUT/ncu-layer.txt 2>/dev/null ;;
ab)
    FILES=${FILES:-l1b-Q4_0 l1b-Q4_K_M l1b-Q8_0 l1b-f16 bn-tq2_0 bn-tq1_0 bn-i2_s}
    for f in $FILES; do waitfor $f.gguf; done
    shift
    while [ $# -ge 2 ]; do
        for f in $FILES; do ab $1 $f "${ARGS:--p 0 -n 128}" "${PAT:-tg}" "$2"; done | tee $OUT/ab-$1.txt
        shift 2
    done
    # PROF=FILE: the profile of that file (default l1b-Q4_0); PROFENV="VAR=v ...": with those settings
    waitfor ${PROF:-l1b-Q4_0}.gguf
    env $PROFENV OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/${PROF:-l1b-Q4_0}.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 | head -16 | tee $OUT/profile.txt ;;
abbuild)
    FILES=${FILES:-l1b-Q4_0 l1b-Q4_K_M bn-tq2_0}
    BUILDS="build build-b"
    [ -n "$3" ] && BUILDS="build build-b build-c"
    for b in $BUILDS; do
        case $b in build) continue ;; build-b) D=$2 ;; build-c) D=$3 ;; esac
        make CUDA=1 BUILD=$b CUDA_ARCH="-gencode arch=compute_90,code=sm_90 $D" -j16 $b/1bit >$OUT/$b.log 2>&1 || { tail -30 $OUT/$b.log; exit 1; }
        # TESTB=1: `make test-cuda` of that build too (for options that change the sums' order)
        [ "$TESTB" = 1 ] && timeout 400 make BUILD=$b CUDA_ARCH="-gencode arch=compute_90,code=sm_90 $D" -j16 test-cuda 2>&1 |
            grep -v "convert: wrote" | tee $OUT/test-cuda-${b#build-}.log | tail -4
    done
    for f in $FILES; do waitfor $f.gguf; done
    # twice, the second time in the reverse order (an effect of the order cancels in the means)
    REV=$(echo $BUILDS | tr ' ' '\n' | tac | tr '\n' ' ')
    for f in $FILES; do for order in "$BUILDS" "$REV"; do for b in $order; do ./$b/1bit bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 |
        grep -E "tg|rror" | sed "s/^/$b $f /"; done; done; done | tee $OUT/abbuild.txt
    # the per-op profile of the first file with each binary (where the option's time goes)
    set -- $FILES
    for b in $BUILDS; do OB_CUDA_PROFILE=1 ./$b/1bit bench -m $M/$1.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 | head -16 |
        sed "s/^/$b /"; done > $OUT/abbuild-prof.txt
    # and the feed-forward kernel's stretches with each (where the file takes it; a line each)
    for b in $BUILDS; do OB_CUDA_FFN_TRACE=1 ./$b/1bit bench -m $M/$1.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 |
        grep "ffn kernel" | sed "s/^/$b /"; done >> $OUT/abbuild-prof.txt ;;
check)
    waitfor bn-tq2_0.gguf
    for f in l1b-Q4_0 bn-tq2_0; do ./build/1bit bench -m $M/$f.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg|pp|rror" | sed "s/^/$f /"; done | tee $OUT/check.txt
    OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/bn-tq2_0.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 | head -16 | tee -a $OUT/check.txt ;;
stalls)
    # where the decode attention and the row kernel stall, by source line (build-b with -lineinfo;
    # Nsight Compute's source counters, caches not flushed): Llama-3.2-1B Q4_0 at positions past
    # 100 (16 attention launches a token), BitNet-2B I2_S's norms
    make CUDA=1 BUILD=build-b CUDA_ARCH="-gencode arch=compute_90,code=sm_90 -lineinfo" -j16 build-b/1bit >$OUT/build-b.log 2>&1 || exit 1
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    S="--clock-control none --cache-control none --import-source yes --section SpeedOfLight --section WarpStateStats --section SourceCounters"
    waitfor bn-i2_s.gguf
    timeout 150 $NCU $S --kernel-name regex:k_attn --launch-skip 1700 --launch-count 1 -o /tmp/attn ./build-b/1bit bench -m $M/l1b-Q4_0.gguf \
        -p 0 -n 128 -r 1 --device cuda > $OUT/stalls-attn.txt 2>&1
    timeout 150 $NCU $S --kernel-name regex:k_rows --launch-skip 240 --launch-count 3 -o /tmp/rows ./build-b/1bit bench -m $M/bn-i2_s.gguf \
        -p 0 -n 16 -r 1 --device cuda > $OUT/stalls-rows.txt 2>&1
    for r in attn rows; do
        $NCU --import /tmp/$r.ncu-rep --page details >> $OUT/stalls-$r.txt 2>&1
        $NCU --import /tmp/$r.ncu-rep --page source --csv --print-source cuda,sass > /tmp/$r-src.csv 2>&1
        python3 bench/cuda/ncu_lines.py /tmp/$r-src.csv 25 | tee $OUT/$r-lines.txt
    done ;;
steps)
    for f in ${FILES:-l1b-Q4_0 l1b-Q4_K_M l1b-f16 bn-tq2_0 bn-i2_s}; do waitfor $f.gguf
        OB_CUDA_STEP_TIMES=1 ./build/1bit bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg128|step times|rror" |
            sed "s/^/$f /"; done | tee $OUT/steps.txt ;;
timeline)
    # each kernel of a replayed decode step in place (bench/cuda/h200_timeline.sh); FILES= (default
    # Llama-1B Q4_0 and BitNet TQ2_0), TLENV="VAR=v ..." one trace with each setting (default X=1: none)
    FILES=${FILES:-l1b-Q4_0 bn-tq2_0}
    for f in $FILES; do waitfor $f.gguf; done
    OUT=$OUT sh bench/cuda/h200_timeline.sh $PWD/build/1bit "$FILES" ${TLENV:-X=1} ;;
profile)
    prof() { OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/$1.gguf -p $2 -n 64 -r 1 --device cuda 2>&1 | head -40 | tee $OUT/prof-$1.txt; }
    prof l1b-Q4_0 512
    waitfor l1b-f16.gguf && prof l1b-f16 0
    waitfor bn-tq2_0.gguf && prof bn-tq2_0 0 ;;
esac
