#!/usr/bin/env bash
# bench/llama_cuda_pack.sh SRC OUT.gz - llama.cpp's llama-bench for the GPU
# machine, built here (no device time): SRC is a source tree fetched by
# ../shared/peers/llama_cpp.sh SRC; the build goes to SRC/build-cuda-static
# (CUDA for sm_90, static libraries: one binary that needs only the CUDA
# runtime and cuBLAS of the toolkit there), ~25 min at -j2 (nice 19). The
# binary is stripped and gzipped (~44 MB, under the device call's 64 MiB
# carry limit); carry OUT.gz and give it to bench/gpu_decode.sh as PEER_GZ.
set -euo pipefail
SRC=${1:?usage: llama_cuda_pack.sh SRC OUT.gz}; OUT=${2:?usage: llama_cuda_pack.sh SRC OUT.gz}
B="$SRC/build-cuda-static"
if [ ! -x "$B/bin/llama-bench" ]; then
  nice -n 19 cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF >/dev/null
  nice -n 19 cmake --build "$B" -j "$(nproc)" --target llama-bench
fi
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
strip -o "$tmp" "$B/bin/llama-bench"
mkdir -p "$(dirname "$OUT")"
gzip -9 -c "$tmp" > "$OUT"
echo "wrote $OUT ($(du -h "$OUT" | cut -f1))"
