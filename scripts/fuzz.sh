#!/usr/bin/env bash
# fuzz.sh [SECONDS] - build the GGUF reader's libFuzzer target with clang++
# (-fsanitize=fuzzer,address,undefined) into build-fuzz/ and run it for
# SECONDS (default 60) from the seed corpus tests/fuzz/corpus/, inputs up to
# 4096 bytes. Exits non-zero on any finding (crash, sanitizer report, leak,
# timeout, an allocation over 64 MB, a failed round-trip check).
# Needs clang++ and libFuzzer's runtime (Debian: clang-14, libclang-rt-14-dev).
# New inputs go to build-fuzz/corpus/; crash inputs to build-fuzz/artifacts/.
set -uo pipefail
secs="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
cxx="${FUZZ_CXX:-clang++}"
mkdir -p "$out/corpus" "$out/artifacts"
rm -f "$out/artifacts/"*

srcs=(tests/fuzz/gguf_fuzz.cpp src/gguf_read.cpp src/gguf_get.cpp src/gguf_write.cpp src/error.cpp)
echo "fuzz: building $out/gguf_fuzz with $cxx"
"$cxx" -std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -I"$root/src" "${srcs[@]/#/$root/}" -o "$out/gguf_fuzz" || {
    echo "fuzz: build failed (is libFuzzer installed? Debian: apt-get install clang-14 libclang-rt-14-dev)"
    exit 2
}

echo "fuzz: running for ${secs}s"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
"$out/gguf_fuzz" -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/" "$out/corpus" "$root/tests/fuzz/corpus" \
    >"$out/fuzz.log" 2>&1
rc=$?
tail -n 25 "$out/fuzz.log"
if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$out/artifacts")" ]; then
    echo "fuzz: FINDINGS (exit $rc): see $out/fuzz.log and $out/artifacts/"
    exit 1
fi
echo "fuzz: clean; $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/fuzz.log")"
