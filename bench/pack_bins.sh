#!/usr/bin/env bash
# bench/pack_bins.sh BUILD OUT.tgz - the programs that bench/gpu_decode.sh and
# bench/gpu_chunk.sh run, from a CUDA build made here (sm_90, the project's
# default CUDA architecture), packed for a device call so that the call does
# not spend its minutes building: ~45 MB gzipped, under the call's 64 MiB
# carry limit. Put OUT in an ignored folder, carry it, and on the machine:
#   tar xzf OUT.tgz -C DIR && bench/gpu_decode.sh DIR/bins   (no BUILD=1)
#   bench/gpu_chunk.sh DIR/bins
# The programs load the toolkit's CUDA runtime and cuBLAS there (nvcc 13 on
# both machines); tests that read the shipped models use the source path
# compiled into them, the same on both machines in session 36.
set -euo pipefail
B=${1:?usage: pack_bins.sh BUILD OUT.tgz}; OUT=${2:?usage: pack_bins.sh BUILD OUT.tgz}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bins/tests" "$tmp/bins/bench"
cp "$B/tests/tinygml_tests" "$tmp/bins/tests/"
cp "$B/bench/tinygml-bench" "$tmp/bins/bench/"
if [ -x "$B/bench/tinygml-timeline" ]; then cp "$B/bench/tinygml-timeline" "$tmp/bins/bench/"; fi
cp "$B/tinygml-run" "$B/tinygml-synth" "$B/tinygml-quantize" "$tmp/bins/"
mkdir -p "$(dirname "$OUT")"
tar czf "$OUT" -C "$tmp" bins
echo "wrote $OUT ($(du -h "$OUT" | cut -f1))"
