#!/bin/sh
# GPU calls 2 and 3 of the H200 run (docs/bench.md, "H200 (CUDA)"), on the machine h200_test.sh
# left warm. `tables`: waits for h200_setup.sh (llama.cpp's CUDA build and the models), then
# 1bit bench --device cuda and llama-bench -ngl 99 -fa on on the same files (tg128, pp512,
# pp4096; 3 repetitions, engines alternating per file; FILES="..." for fewer, waiting only for
# those and llama.cpp's build, while the setup's other conversions may still run: noisier
# small-model figures). `serve`: the transformers baseline and
# serving throughput (1bit serve vs llama-server, 64 slots each, the same 1B Q4_0 file,
# 1bit bench --url --compare at 1/8/32/64 streams). `serveab`: the same sweep, 1bit's build/
# against build-b/ of `h200_test.sh abbuild DEFS` (a build option, e.g. -DOB_CUDA_LD16=0). `batched`:
# batched decode without HTTP, 1bit bench -d 128 -npl 1,8,32,64 -n 64 against llama-batched-bench
# -npp 128 -ntg 64 -npl 1,8,32,64 (S_TG: every sequence's tokens over the generation time; one run,
# no warm-up, as that tool does) on the 1B Q4_0 / Q4_K_M and 8B Q4_K_M files (FILES). `batchab "ENV1"
# "ENV2" ...`: 1bit alone, batched decode (-npl 1,8,16,32,64; NPL=...) after a 128-position
# context (D=...) of the 1B Q4_0 and 8B Q4_K_M files (FILES="..."), with each environment setting
# (e.g. "X=1" "OB_CUDA_F16_COPY=0" "OB_CUDA_GEMV_COPY_MAX=8"), twice alternating, then the per-op
# profile at 32 streams of the 1B with each (NOPROF=1: none).
# Raw results under $OUT.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
trap 'OUT=$OUT sh bench/cuda/out_fit.sh' EXIT # (at most 8 files come back from a call)
# a machine h200_test.sh did not set up (a fresh one: the last was given back between calls) has
# neither the build nor the models: say so at once instead of waiting out the call's limit
[ -f /tmp/bg.log ] || { echo "h200_bench.sh: no h200_setup.sh on this machine (fresh?): run bench/cuda/h200_test.sh first"; exit 1; }
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
# batchab needs only its files (each renamed into place when complete), tables and batched
# their files and llama.cpp's build, the rest the whole setup
TFILES=${FILES:-l1b-Q4_0 l1b-Q4_K_M l1b-f16 bn-q4_0 l8b-Q4_K_M l8b-Q8_0 bn-tq2_0 bn-tq1_0 bn-i2_s}
BFILES=${FILES:-l1b-Q4_0 l1b-Q4_K_M l8b-Q4_K_M}
case "$1" in batchab) NEED=${FILES:-l1b-Q4_0 l8b-Q4_K_M} ;; tables) NEED=$TFILES ;; batched) NEED=$BFILES ;; *) NEED= ;; esac
have() { [ -n "$NEED" ] || return 1; for f in $NEED; do [ -f /tmp/m/$f.gguf ] || return 1; done
         [ "$1" = batchab ] || grep -q "llama.cpp built" /tmp/bg.log; }
i=0; until grep -q "setup done" /tmp/bg.log 2>/dev/null || have $1 || [ $i -gt 420 ]; do
    sleep 3; i=$((i+3)); done
tail -16 /tmp/bg.log; tail -3 /tmp/llama-build.log
M=/tmp/m; LB=/tmp/llsrc/b/bin/llama-bench; LS=/tmp/llsrc/b/bin/llama-server
ob() { ./build/1bit bench -m $M/$1 -p 512,4096 -n 128 -r 3 --device cuda -o jsonl 2>>$OUT/err.log | tee -a $OUT/ob.jsonl |
       python3 -c "import sys,json;[print('1bit',sys.argv[1],r['n_prompt'],r['n_gen'],round(r['avg_ts'],1)) for r in map(json.loads,sys.stdin)]" $1; }
lb() { [ -x $LB ] || { echo "llama.cpp $1: $LB not built (yet; /tmp/llama-build.log): no figures"; return; }
       LD_LIBRARY_PATH= $LB -m $M/$1 -p 512,4096 -n 128 -r 3 -ngl 99 -fa on -o jsonl 2>>$OUT/err.log | tee -a $OUT/lb.jsonl |
       python3 -c "import sys,json;[print('llama.cpp',sys.argv[1],r['n_prompt'],r['n_gen'],round(r['avg_ts'],1)) for r in map(json.loads,sys.stdin)]" $1; }
if [ "$1" = batched ]; then
    LBB=/tmp/llsrc/b/bin/llama-batched-bench
    for f in $BFILES; do
        [ -f $M/$f.gguf ] || { echo "batched: $M/$f.gguf not written (yet)"; continue; }
        ./build/1bit bench -m $M/$f.gguf -p 0 -n 64 -d 128 -npl 1,8,32,64 -r 3 --device cuda -o jsonl 2>>$OUT/err.log |
            python3 -c "import sys,json;[print('1bit',sys.argv[1],r['n_parallel'],round(r['avg_ts'],1)) for r in map(json.loads,sys.stdin)]" $f
        LD_LIBRARY_PATH= $LBB -m $M/$f.gguf -ngl 99 -fa on -c 16384 -b 2048 -ub 512 -npp 128 -ntg 64 -npl 1,8,32,64 \
            --output-format jsonl 2>>$OUT/err.log | grep '^{' |
            python3 -c "import sys,json;[print('llama.cpp',sys.argv[1],r['pl'],round(r['speed_tg'],1)) for r in map(json.loads,sys.stdin)]" $f
    done | tee $OUT/batched.txt
    exit 0
fi
if [ "$1" = batchab ]; then # FILES, D (context before the steps), NPL (streams); NOPROF=1: no profiles
    shift
    D=${D:-128}
    for f in ${FILES:-l1b-Q4_0 l8b-Q4_K_M}; do
        [ -f $M/$f.gguf ] || { echo "batchab: $M/$f.gguf not written (yet)"; continue; }
        for rep in 1 2; do for e in "$@"; do
            env $e ./build/1bit bench -m $M/$f.gguf -p 0 -n 64 -d $D -npl ${NPL:-1,8,16,32,64} -r 3 --device cuda 2>&1 |
                grep -E "tg|rror" | sed "s/^/$e $f /"
        done; done; done | tee $OUT/batchab-d$D.txt
    [ "$NOPROF" = 1 ] && exit 0
    for e in "$@"; do echo "== $e"; env $e OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/l1b-Q4_0.gguf -p 0 -n 32 -d $D -npl 32 -r 1 \
        --device cuda 2>&1 | head -24; done > $OUT/batchab-prof-d$D.txt
    exit 0
fi
if [ "$1" = tables ]; then
# (FILES: fewer; the ternary files have no llama.cpp CUDA kernels: 1bit only)
for f in $TFILES; do [ -f $M/$f.gguf ] || { echo "tables: $M/$f.gguf not written (yet)"; continue; }; case $f in bn-tq*|bn-i2_s) ob $f.gguf ;; *) ob $f.gguf; lb $f.gguf ;; esac; done | tee $OUT/table.txt
ls -l $M | awk '{print $5, $9}' >$OUT/sizes.txt
exit 0
fi
up() { python3 -c "import urllib.request,sys;urllib.request.urlopen('http://127.0.0.1:$1/health',timeout=2)" 2>/dev/null; }
# the sweep against the servers on 8081 and 8082 (labels $1 and $2), then both stopped;
# --api completions: llama-server's chat endpoint parses the output and fails some random-weight streams
sweep() {
    i=0; until (up 8081 && up 8082) || [ $i -gt 60 ]; do sleep 1; i=$((i+1)); done
    timeout 200 ./build/1bit bench --url http://127.0.0.1:8081 --compare http://127.0.0.1:8082 --label $1 --label2 $2 \
        --api completions --concurrency 1,8,32,64 --prompt-tokens 128 --gen-tokens 64 -o $OUT/serve.json 2>&1 | tail -22 | tee $OUT/serve.txt
    kill %1 %2 2>/dev/null
}
if [ "$1" = serveab ]; then # build/ against build-b/ of `h200_test.sh abbuild`, 1bit alone, the same file
    ./build/1bit serve -m $M/l1b-Q4_0.gguf --device cuda -np 64 -c 512 --port 8081 >$OUT/serve1.log 2>&1 &
    ./build-b/1bit serve -m $M/l1b-Q4_0.gguf --device cuda -np 64 -c 512 --port 8082 >$OUT/serve2.log 2>&1 &
    sweep build build-b
    exit 0
fi
PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout 150 python3 bench/cuda/hf_baseline.py bench/configs/llama-3.2-1b.json 2>&1 | grep -E "^hf|^transformers" | tee $OUT/hf.txt
# serving
./build/1bit serve -m $M/l1b-Q4_0.gguf --device cuda -np 64 -c 512 --port 8081 >$OUT/serve1.log 2>&1 &
LD_LIBRARY_PATH= $LS -m $M/l1b-Q4_0.gguf -ngl 99 -fa on -np 64 -c 32768 --port 8082 >$OUT/serve2.log 2>&1 &
sweep 1bit llama.cpp
