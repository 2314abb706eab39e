#!/bin/sh
# The serving comparison of docs/bench.md ("Serving benchmark"): 1bit serve and llama-server on
# the same GGUF file, same slots (-np), same threads (-t), same context per slot and the same chat
# template, measured by `1bit bench --url ... --compare ...` in one run (steps alternate between
# the servers). Both servers (and the client) run under NICE (default "nice -n -20" when root) so
# that on a shared machine they get the cores over other jobs, equally. Linux's autogroup
# scheduler (kernel.sched_autogroup_enabled=1) weighs sessions, not processes, against each
# other, so nice alone would only rank processes inside this script's session: the script runs in
# a session of its own (setsid) whose autogroup gets the same nice value.
#
#   MODEL    GGUF file (default /work/models/qwen3-0.6b-q4_0.gguf; bench/cpu.sh makes it)
#   NP       slots (default 2); THREADS (default 2); CTX context per slot (default 1024)
#   LLAMA_SERVER  (default ../peers/llama.cpp/build/bin/llama-server)
#   OUT      prefix of the results (default docs/img/serve-cpu: .json and .svg)
#   BENCH    extra arguments of 1bit bench (default: the sweep below)
# llama-server runs with bench/noamx.c preloaded (its AMX path crashes on this machine).
# The template file is given to both because the random-weight test files carry none.
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-/work/models/qwen3-0.6b-q4_0.gguf}
NP=${NP:-2}; THREADS=${THREADS:-2}; CTX=${CTX:-1024}
LS=${LLAMA_SERVER:-../peers/llama.cpp/build/bin/llama-server}
OUT=${OUT:-docs/img/serve-cpu}
BENCH=${BENCH:-"--prompt-tokens 128 --gen-tokens 64 --concurrency 1,2,4 --requests 8 --rounds 2 --timeout 300 --progress"}
if [ "$(id -u)" = 0 ]; then NICE=${NICE-"nice -n -20"}; else NICE=${NICE-}; fi
if [ -z "${SERVE_CPU_SESSION-}" ] && command -v setsid >/dev/null; then
    SERVE_CPU_SESSION=1 exec setsid -w "$0" "$@"
fi
if [ -n "$NICE" ] && [ -w /proc/self/autogroup ]; then echo "${NICE##* }" >/proc/self/autogroup; fi
make -s build/1bit
cc -O2 -shared -fPIC -o build/noamx.so bench/noamx.c -ldl
P1=18301; P2=18302
$NICE ./build/1bit serve -m "$MODEL" --port $P1 -np $NP -t $THREADS -c $CTX --chat-template-file bench/chatml.jinja \
    >build/serve-1bit.log 2>&1 &
A=$!
# llama-server's -c is the total of all slots.
LD_PRELOAD=$(pwd)/build/noamx.so $NICE $LS -m "$MODEL" --port $P2 -np $NP -t $THREADS -c $((CTX * NP)) --jinja \
    --chat-template-file bench/chatml.jinja >build/serve-llama.log 2>&1 &
B=$!
trap 'kill $A $B 2>/dev/null' EXIT
for p in $P1 $P2; do
    i=0
    until curl -sf http://127.0.0.1:$p/health >/dev/null; do
        i=$((i + 1)); [ $i -lt 300 ] || { echo "server on port $p did not start" >&2; exit 1; }
        sleep 1
    done
done
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(uname -sr)"
echo "1bit: $(./build/1bit serve --version 2>&1 | head -1); llama-server: $($LS --version 2>&1 | grep version)"
[ -r /proc/self/autogroup ] && echo "autogroup: $(cat /proc/self/autogroup)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
date -u +"start %Y-%m-%dT%H:%M:%SZ"
$NICE ./build/1bit bench --url http://127.0.0.1:$P1/v1 --label 1bit --compare http://127.0.0.1:$P2/v1 --label2 llama-server \
    $BENCH -o "$OUT.json" --svg "$OUT.svg"
date -u +"end %Y-%m-%dT%H:%M:%SZ"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
