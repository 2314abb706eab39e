#!/bin/sh
# Background half of the H200 benchmark (docs/bench.md, "H200 (CUDA)"), started by
# h200_test.sh with setsid so that it runs on while the tests run: llama.cpp's CUDA build from
# .peer/llama.tar.zst (80fb11a without .git, docs, models and non-CUDA GPU backends; a zstd
# binary travels beside it in .peer/zstd for images without one; its CUDA tools built on the
# Debian machine would save the build's ~10 device minutes, but are ~43 MB compressed, more than
# the 64 MiB a call carries leaves beside the 36 MB tree and .gpu) and the random-weight models
# of the published shapes, in /tmp/m. Everything is nice'd; progress in /tmp/bg.log, "setup
# done" last. The 8B shape is written as F16 and then quantized by `1bit quantize` on every
# core: `convert --random --type Q4_K_M` quantizes on one thread and did not finish in 13 minutes.
cd "$(dirname "$0")/../.."
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
M=/tmp/m; mkdir -p $M
# LLAMA=0: models of the 1-2B shapes only (no llama.cpp build, no 8B files), for a quick call.
[ "${LLAMA:-1}" = 1 ] && (
  Z=zstd; command -v zstd >/dev/null || Z="env LD_LIBRARY_PATH=.peer/zstd .peer/zstd/zstd"
  $Z -dc .peer/llama.tar.zst | tar xf - -C /tmp && cd /tmp/llsrc && unset C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH &&
  nice -n 10 cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/llama-cmake.log 2>&1 &&
  nice -n 10 cmake --build b -j12 --target llama-bench llama-server llama-batched-bench >/tmp/llama-build.log 2>&1 && echo "llama.cpp built"
) &
OB=./build/1bit
r() { [ -f $M/$2 ] || nice -n 5 $OB convert --random bench/configs/$1 -o $M/$2 --type $3 >/dev/null 2>&1 || echo "convert $2 failed"; }
r llama-3.2-1b.json l1b-f16.gguf f16
# the 8B chain beside the 1-2B files (each convert --random is one thread; every file is written
# to NAME.tmp and renamed when complete, so a file that exists is whole)
[ "${LLAMA:-1}" = 1 ] && (
  r llama-3.1-8b.json l8b-f16.gguf f16
  for t in Q4_K_M Q8_0 Q4_0; do nice -n 5 $OB quantize $M/l8b-f16.gguf $M/l8b-$t.gguf $t 16 >/dev/null 2>&1 || echo "quantize 8B $t failed"; done
) &
for t in Q4_0 Q4_K_M Q8_0; do nice -n 5 $OB quantize $M/l1b-f16.gguf $M/l1b-$t.gguf $t 16 >/dev/null 2>&1 || echo "quantize $t failed"; done
for t in tq2_0 tq1_0 i2_s q4_0; do r bitnet-2b-llamacpp-arch.json bn-$t.gguf $t & done
# Qwen3-0.6B's shape: groups of 2 query heads a KV head; and the same with one KV head a query
# head (MHA; not a published shape): the grouped attention's fused form on groups of 2 and 1
r qwen3-0.6b.json q06-q4_0.gguf q4_0 &
r qwen3-0.6b-mha.json q06mha-q4_0.gguf q4_0 &
wait
ls -la $M
echo "setup done"
