#!/bin/sh
# The whole-layer decode kernel (cuda_layer.cu, OB_CUDA_LAYER=1) against the separate ops (the
# default) on the 1-2B files: tg128 (three runs each), one file after another; then the kernel's
# stretch times (OB_CUDA_LAYER_TRACE=1, block 0, cycles) on Llama-1B Q4_0 and BitNet TQ2_0. Runs after
# h200_test.sh on the same machine (its build, /tmp/m from h200_setup.sh). Logs under $OUT.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
M=/tmp/m
export LD_LIBRARY_PATH=/tmp/deps/lib
i=0; while [ ! -f $M/bn-q4_0.gguf ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done # written after bn-i2_s
for f in l1b-Q4_0 l1b-Q4_K_M l1b-Q8_0 l1b-f16 bn-tq2_0 bn-tq1_0 bn-i2_s; do
    for v in OB_CUDA_LAYER=0 OB_CUDA_LAYER=1; do
        env $v ./build/1bit bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg|rror" | sed "s/^/$v $f /"
    done
done | tee $OUT/layer-ab.txt
for f in l1b-Q4_0 bn-tq2_0; do
    OB_CUDA_LAYER=1 OB_CUDA_LAYER_TRACE=1 ./build/1bit bench -m $M/$f.gguf -p 0 -n 64 -r 1 --device cuda 2>&1 |
        grep "layer kernel" | sed "s/^/$f /"
done | tee $OUT/layer-trace.txt
