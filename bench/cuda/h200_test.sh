#!/bin/sh
# First GPU call: build with CUDA there, `make test-cuda`, copy bandwidth, and a quick speed
# probe of two models (logs under $OUT). Build dependencies the GPU image lacks travel in
# .gpu/deps.tar.xz (headers and shared libraries of this repo's Debian build machine).
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
head -2 /etc/os-release; nproc
mkdir -p /tmp/deps && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
t0=$(date +%s)
make CUDA=1 -j16 build/1bit build/test_unit >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
/usr/local/cuda/bin/nvcc -O2 -o build/copybw bench/cuda/copybw.cu && ./build/copybw | tee $OUT/copybw.txt
make test-cuda 2>&1 | tee $OUT/test-cuda.log | tail -40
M=/tmp/models; mkdir -p $M
./build/1bit convert --random bench/configs/llama-3.2-1b.json -o $M/l1b-f16.gguf --type f16 >/dev/null 2>&1
./build/1bit quantize $M/l1b-f16.gguf $M/l1b-q4_0.gguf Q4_0 >/dev/null 2>&1
./build/1bit convert --random bench/configs/bitnet-2b-llamacpp-arch.json -o $M/bn-tq2_0.gguf --type tq2_0 >/dev/null 2>&1
for f in l1b-q4_0 l1b-f16 bn-tq2_0; do
    ./build/1bit bench -m $M/$f.gguf -p 512 -n 128 -r 3 --device cuda 2>&1 | tee -a $OUT/probe.txt | grep -E "tg|pp|error|rror"
done
