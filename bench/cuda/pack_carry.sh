#!/bin/sh
# Makes the git-ignored folders the H200 calls carry (docs/cuda.md, "Running it on the GPU
# machine"), on the Debian build machine, from a `make CUDA=1` build:
#   .gpu/deps.tar.xz   headers and shared libraries of build/1bit's dependencies that the GPU
#                      image lacks (everything ldd lists but glibc, libstdc++/libgcc and CUDA's)
#   .peer/llama.tar.zst + .peer/zstd/   llama.cpp's source from LLAMA_BUNDLE (a git bundle),
#                      without .git, docs, models and the non-CUDA GPU backends, and a zstd binary
# The three folders go into .git/info/exclude; the working tree that travels stays under 64 MiB.
set -eu
cd "$(dirname "$0")/../.."
LLAMA_BUNDLE=${LLAMA_BUNDLE:-../peers/package/llama/gitRelease.bundle}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/deps/include" "$T/deps/lib" .gpu .peer/zstd
cp -r /usr/include/jansson.h /usr/include/jansson_config.h /usr/include/microhttpd.h /usr/include/pcre2.h \
      /usr/include/utf8proc.h /usr/include/unicode /usr/include/x86_64-linux-gnu/curl "$T/deps/include/"
for l in $(ldd build/1bit | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libresolv|libcuda|libcudart|libcublas|libcublasLt)\.so'); do
    cp -L "$l" "$T/deps/lib/"
done
(cd "$T/deps/lib" && for n in microhttpd curl jansson pcre2-8 utf8proc icuuc; do ln -sf "$(ls lib$n.so.* | head -1)" lib$n.so; done)
tar cJf .gpu/deps.tar.xz -C "$T/deps" .
git clone -q "$LLAMA_BUNDLE" "$T/llsrc"
tar cf - -C "$T" --exclude=llsrc/.git --exclude=llsrc/docs --exclude=llsrc/models --exclude=llsrc/media \
    --exclude=llsrc/benches --exclude=llsrc/ggml/src/ggml-hexagon --exclude=llsrc/ggml/src/ggml-sycl \
    --exclude=llsrc/ggml/src/ggml-opencl --exclude=llsrc/ggml/src/ggml-vulkan --exclude=llsrc/tools/ui/tests llsrc |
    zstd -q -f -10 -o .peer/llama.tar.zst
cp /usr/bin/zstd .peer/zstd/
for l in liblzma.so.5 liblz4.so.1 libzstd.so.1 libz.so.1; do cp -L /lib/x86_64-linux-gnu/$l .peer/zstd/; done
for d in /.gpu/ /.peer/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
ls -l .gpu .peer
