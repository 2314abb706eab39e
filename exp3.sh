#!/bin/sh
# EXPERIMENT (not for commit): Nsight Systems timeline of recorded decode steps
mkdir -p /tmp/deps && tar xJf .gpu/deps.tar.xz -C /tmp/deps
export C_INCLUDE_PATH=/tmp/deps/include LIBRARY_PATH=/tmp/deps/lib LD_LIBRARY_PATH=/tmp/deps/lib
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys /opt/nvidia/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS"; [ -n "$NSYS" ] && $NSYS --version
make CUDA=1 CUDA_ARCH="-gencode arch=compute_90,code=sm_90" -j16 build/1bit >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
M=/tmp/m; mkdir -p $M
./build/1bit convert --random bench/configs/bitnet-2b-llamacpp-arch.json -o $M/bn-i2_s.gguf --type i2_s >/dev/null 2>&1 &
./build/1bit convert --random bench/configs/llama-3.2-1b.json -o $M/l1b-q4_0.gguf --type q4_0 >/dev/null 2>&1 &
wait
[ -n "$NSYS" ] || exit 0
for f in l1b-q4_0 bn-i2_s; do
  timeout 120 $NSYS profile -o /tmp/p-$f -f true --trace=cuda --cuda-graph-trace=node ./build/1bit bench -m $M/$f.gguf -p 0 -n 32 -r 1 --device cuda > $OUT/nsys-$f.log 2>&1
  timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o /tmp/t-$f /tmp/p-$f.nsys-rep >> $OUT/nsys-$f.log 2>&1
  ls /tmp/t-$f* >> $OUT/nsys-$f.log; gzip -c /tmp/t-$f*cuda_gpu_trace*.csv > $OUT/trace-$f.csv.gz
done
tail -5 $OUT/nsys-*.log
