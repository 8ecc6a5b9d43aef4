#!/usr/bin/env bash
# fuzz.sh [SECONDS] - build the libFuzzer targets with clang++
# (-fsanitize=fuzzer,address,undefined) into build-fuzz/ and run them for
# SECONDS in all (default 60), split between them: the GGUF reader
# (gguf_fuzz, seeds tests/fuzz/corpus/, inputs up to 4096 bytes) gets half,
# the session state loader (state_fuzz, seeds tests/fuzz/state_corpus/,
# inputs up to 8192 bytes) the other half. Exits non-zero on any finding
# (crash, sanitizer report, leak, timeout, an allocation over 64 MB, a failed
# check in a target).
# Needs clang++ and libFuzzer's runtime (Debian: clang-14, libclang-rt-14-dev).
# New inputs go to build-fuzz/corpus*/; crash inputs to build-fuzz/artifacts*/.
set -uo pipefail
secs="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
cxx="${FUZZ_CXX:-clang++}"
flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all)
mkdir -p "$out/corpus" "$out/artifacts" "$out/corpus_state" "$out/artifacts_state" "$out/obj"
rm -f "$out/artifacts/"* "$out/artifacts_state/"*
fail_build() {
    echo "fuzz: build failed (is libFuzzer installed? Debian: apt-get install clang-14 libclang-rt-14-dev)"
    exit 2
}

srcs=(tests/fuzz/gguf_fuzz.cpp src/gguf_read.cpp src/gguf_get.cpp src/gguf_write.cpp src/file_replace.cpp src/error.cpp)
echo "fuzz: building $out/gguf_fuzz with $cxx"
"$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -I"$root/src" "${srcs[@]/#/$root/}" \
    -o "$out/gguf_fuzz" || fail_build

# the state loader needs the whole CPU engine and models/: one object per file
# (the SIMD tables need their own ISA flags), two at a time
echo "fuzz: building $out/state_fuzz with $cxx"
lib=$(cd "$root" && ls src/*.cpp src/cpu_fast/*.cpp ggml_ops/*.cpp models/model.cpp models/session.cpp models/state.cpp)
export cxx root out
printf '%s\n' $lib | xargs -P 2 -I{} sh -c '
    f={}; o="$out/obj/$(echo "$f" | tr / _).o"; isa=""
    case "$f" in
        */simd_avx512.cpp) isa="-mavx512f -mavx512bw -mavx2 -mfma -mf16c" ;;
        */simd_avx2.cpp) isa="-mavx2 -mfma -mf16c" ;;
    esac
    "$cxx" -std=c++17 -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all \
        -fsanitize=fuzzer-no-link,address,undefined $isa -I"$root/src" -I"$root/models" -c "$root/$f" -o "$o"' \
    || fail_build
"$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -I"$root/src" -I"$root/models" \
    "$root/tests/fuzz/state_fuzz.cpp" "$out"/obj/*.o -lpthread -o "$out/state_fuzz" || fail_build

run() {  # name seconds max_len corpus seeds artifacts
    echo "fuzz: running $1 for $2s"
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    "$out/$1" -max_total_time="$2" -max_len="$3" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
        -print_final_stats=1 -artifact_prefix="$6/" "$4" "$5" >"$out/$1.log" 2>&1
    local rc=$?
    tail -n 25 "$out/$1.log"
    if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$6")" ]; then
        echo "fuzz: $1: FINDINGS (exit $rc): see $out/$1.log and $6/"
        return 1
    fi
    echo "fuzz: $1 clean; $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$1.log")"
}
half=$((secs / 2))
rc=0
run gguf_fuzz $((secs - half)) 4096 "$out/corpus" "$root/tests/fuzz/corpus" "$out/artifacts" || rc=1
run state_fuzz $((half > 0 ? half : 1)) 8192 "$out/corpus_state" "$root/tests/fuzz/state_corpus" \
    "$out/artifacts_state" || rc=1
exit $rc
