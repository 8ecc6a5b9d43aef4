#!/usr/bin/env bash
# GPU verification in one go (run on the GPU machine): build, all tests,
# bench, then compute-sanitizer memcheck and racecheck over the CUDA tests
# with shrunken shapes. Logs go to $OUT (or ./gpu-logs).
set -uo pipefail
OUT=${OUT:-gpu-logs}; mkdir -p "$OUT"
STEPS=${STEPS:-build,test,bench,memcheck,racecheck}
FILTER=${FILTER:-*Cuda*}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if has build; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON > "$OUT/build.log" 2>&1 &&
  cmake --build build-gpu -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "build ok ($(( $(date +%s) - t0 )) s)"
fi
T=build-gpu/tests/tinygml_tests
if has test; then
  $T --gtest_brief=1 ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$OUT/tests.log" 2>&1
  echo "tests rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests from .* ran" "$OUT/tests.log" | head -40
  grep -B3 -A12 "Failure" "$OUT/tests.log" | head -80
fi
if has bench; then
  timeout 180 build-gpu/bench/tinygml-bench "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? ($(( $(date +%s) - t0 )) s)"; tail -30 "$OUT/bench.log"
fi
for tool in memcheck racecheck; do
  has $tool || continue
  TG_TEST_SMALL=1 timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool $tool --error-exitcode 9 \
    $T --gtest_brief=1 --gtest_filter="$FILTER" > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " "$OUT/$tool.log" | head; grep -m5 -A6 "^========= [A-Z]" "$OUT/$tool.log" | head -40
done
