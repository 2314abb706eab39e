#!/bin/sh
# The foundation benchmark (docs/bench.md): 1bit bench and llama.cpp's llama-bench on the same
# random-weight GGUF files, same prompt/generation sizes and threads, run one after the other.
#   LLAMA_BENCH  path of a llama-bench built from llama.cpp's public source (not part of this repo)
#   MODELS       folder for the generated models (default /tmp/1bit-models)
#   REPS         timed repetitions (default 3); THREADS (default 2); P (512), N (128)
set -eu
cd "$(dirname "$0")/.."
OB=./build/1bit
LB=${LLAMA_BENCH:-../peers/llama.cpp/build/bin/llama-bench}
M=${MODELS:-/tmp/1bit-models}
REPS=${REPS:-3}; T=${THREADS:-2}; P=${P:-512}; N=${N:-128}
mkdir -p "$M"
make -s
gen() { [ -f "$M/$2" ] || $OB convert --random "bench/configs/$1" -o "$M/$2" --type "$3"; }
gen llama-3.2-1b.json llama-3.2-1b-f16.gguf f16
gen bitnet-2b-llamacpp-arch.json bitnet-2b-llamacpp-tq2_0.gguf tq2_0
gen bitnet-b1.58-2b-4t.json bitnet-b1.58-2b-tq2_0.gguf tq2_0
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "1bit: $(git rev-parse --short HEAD)   llama.cpp: $($LB --help 2>&1 | sed -n 's/.*build: \([0-9a-f]*\).*/\1/p' | head -1)"
for f in llama-3.2-1b-f16.gguf bitnet-2b-llamacpp-tq2_0.gguf; do
    echo; echo "### $f"
    echo; echo "llama-bench -m $f -p $P -n $N -r $REPS -t $T"; echo
    $LB -m "$M/$f" -p "$P" -n "$N" -r "$REPS" -t "$T" -o md 2>/dev/null
    echo; echo "1bit bench -m $f -p $P -n $N -r $REPS -t $T"; echo
    $OB bench -m "$M/$f" -p "$P" -n "$N" -r "$REPS" -t "$T"
done
f=bitnet-b1.58-2b-tq2_0.gguf
echo; echo "### $f (bitnet-b1.58: int8 activations, squared ReLU; llama.cpp has no such architecture)"
echo; echo "1bit bench -m $f -p $P -n $N -r $REPS -t $T"; echo
$OB bench -m "$M/$f" -p "$P" -n "$N" -r "$REPS" -t "$T"
