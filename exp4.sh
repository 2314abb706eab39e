#!/bin/sh
# EXPERIMENT (not for commit): stall reasons of the row kernel and decode attention, caches not flushed
mkdir -p /tmp/deps && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
[ -x build/1bit ] || make CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90" -j16 build/1bit >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
M=/tmp/m; mkdir -p $M
[ -f $M/bn-i2_s.gguf ] || ./build/1bit convert --random bench/configs/bitnet-2b-llamacpp-arch.json -o $M/bn-i2_s.gguf --type i2_s >/dev/null 2>&1 &
[ -f $M/l1b-q4_0.gguf ] || ./build/1bit convert --random bench/configs/llama-3.2-1b.json -o $M/l1b-q4_0.gguf --type q4_0 >/dev/null 2>&1 &
wait
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
S="--clock-control none --cache-control none --section SpeedOfLight --section WarpStateStats --print-details all"
timeout 100 $NCU $S --kernel-name regex:k_rows --launch-skip 240 --launch-count 4 ./build/1bit bench -m $M/bn-i2_s.gguf -p 0 -n 8 -r 1 --device cuda > $OUT/ncu-rows.txt 2>&1
timeout 100 $NCU $S --kernel-name regex:k_attn --launch-skip 100 --launch-count 2 ./build/1bit bench -m $M/l1b-q4_0.gguf -p 0 -n 16 -r 1 --device cuda > $OUT/ncu-attn.txt 2>&1
grep -E "k_rows|k_attn|Duration|Elapsed|SM Active|Stall|stall" $OUT/ncu-*.txt | head -60
