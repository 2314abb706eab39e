#!/bin/sh
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
make CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90" -j16 build/1bit >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
M=/tmp/m
for f in bn-i2_s l1b-q4_0; do for rep in 1 2; do for v in 1 2; do
  OB_CUDA_ROWS_WIDE=$v ./build/1bit bench -m $M/$f.gguf -p 0 -n 128 -r 3 --device cuda 2>&1 | grep -E "tg128|rror" | sed "s/^/wide=$v $f /"; done; done; done | tee $OUT/wide.txt
