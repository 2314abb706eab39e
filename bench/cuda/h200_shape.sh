#!/bin/sh
# Where a large shape's decode time goes, on a few of its layers (one GPU call, 1bit alone):
# builds as h200_test.sh does, writes CONFIG with LAYERS layers as F16 (random weights), quantizes
# it to each of TYPES on every core, then for each file: tg128, the per-op profile
# (OB_CUDA_PROFILE=1, eager launches) and Nsight Compute's time and DRAM bytes of every kernel of
# two decode tokens; for the last type, Nsight Compute's sections (throughput, stalls, memory,
# occupancy) of the decode matmul's launches of one token. Logs under $OUT.
#   sh bench/cuda/h200_shape.sh [config.json] [layers] ["types"]
# Defaults: bench/configs/llama-3.1-8b.json, 4 layers, "Q8_0 Q4_K_M".
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
CFG=${1:-bench/configs/llama-3.1-8b.json}; L=${2:-4}; TYPES=${3:-"Q8_0 Q4_K_M"}
mkdir -p /tmp/deps && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
make CUDA=1 -j16 build/1bit >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
M=/tmp/shape; mkdir -p $M
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['num_hidden_layers']=int(sys.argv[2]); json.dump(c,open(sys.argv[3],'w'))" \
    $CFG $L $M/config.json
./build/1bit convert --random $M/config.json -o $M/f16.gguf --type f16 >/dev/null || exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
K=$((L * 10 + 4)) # about a token's kernels
for t in $TYPES; do
    ./build/1bit quantize $M/f16.gguf $M/$t.gguf $t 16 >/dev/null 2>&1 || { echo "quantize $t failed"; continue; }
    ./build/1bit bench -m $M/$t.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg|rror" | sed "s/^/$t /"
    OB_CUDA_PROFILE=1 ./build/1bit bench -m $M/$t.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 | grep -vE "^\||^bench" | head -14
    timeout 120 $NCU --clock-control none --csv --launch-skip $((K * 12)) --launch-count $((K * 2)) \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum ./build/1bit bench -m $M/$t.gguf -p 0 -n 32 -r 1 \
        --device cuda > $OUT/ncu-$t.csv 2>/dev/null
done | tee $OUT/shape.txt
t=${TYPES##* }
timeout 150 $NCU --clock-control none --kernel-name regex:k_gv --launch-skip $((L * 5 * 12)) --launch-count 5 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    ./build/1bit bench -m $M/$t.gguf -p 0 -n 32 -r 1 --device cuda > $OUT/ncu-gv-$t.txt 2>/dev/null
echo "shape done"
