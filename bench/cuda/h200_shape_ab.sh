#!/bin/sh
# Decode A/B on a few layers of a large shape (one GPU call, 1bit alone), on the machine that
# `h200_test.sh abbuild DEFS` left with build/ and build-b/: writes CONFIG with LAYERS layers as
# F16 (random weights), quantizes it to TYPE on every core, then tg128 of each variant, twice
# alternating. A variant is "build" (the default build), "build-b" (the other one) or NAME=VALUE
# (an environment switch for build/1bit). Results in $OUT/shape-ab.txt. Without variants it only
# writes the file (nice'd; started in the background beside h200_test.sh, it waits for that
# script's build), so that a later call with variants finds it.
#   sh bench/cuda/h200_shape_ab.sh config.json layers type [variant...]
# e.g. sh bench/cuda/h200_shape_ab.sh bench/configs/llama-3.1-8b.json 4 Q4_K_M build build-b OB_CUDA_GV_HOLD=2
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
CFG=$1; L=$2; T=$3; shift 3
export LD_LIBRARY_PATH=/tmp/deps/lib
M=/tmp/shape-ab; mkdir -p $M
i=0; while [ ! -f build/copybw ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done # h200_test.sh's build is done
if [ ! -f $M/$T.gguf ]; then
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['num_hidden_layers']=int(sys.argv[2]); json.dump(c,open(sys.argv[3],'w'))" \
    $CFG $L $M/config.json
nice -n 5 ./build/1bit convert --random $M/config.json -o $M/f16.gguf --type f16 >/dev/null || exit 1
nice -n 5 ./build/1bit quantize $M/f16.gguf $M/tmp-$T.gguf $T 16 >/dev/null 2>&1 || { echo "quantize $T failed"; exit 1; }
mv $M/tmp-$T.gguf $M/$T.gguf
fi
[ $# -gt 0 ] || exit 0
for rep in 1 2; do
    for v in "$@"; do
        case $v in
        build|build-b) ./$v/1bit bench -m $M/$T.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 ;;
        *) env "$v" ./build/1bit bench -m $M/$T.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 ;;
        esac | grep -E "tg|rror" | sed "s/^/$v $T x$L /"
    done
done | tee $OUT/shape-ab.txt
