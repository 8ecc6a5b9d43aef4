#!/usr/bin/env bash
# bench/gpu_chunk.sh BINDIR [BEFORE_BINDIR] - one device-machine run of the
# chunked delta rule (issue 10): the delta-rule tests, compute-sanitizer
# memcheck over the chunked tests and racecheck over a subset that reaches
# every kernel, the gdn/gla bench rows (and the same rows of a second build in
# the same run, for before/after), optionally ncu tables and fla's kernels.
# BINDIR holds tinygml_tests and tinygml-bench (a build dir's tests/ and bench/
# flattened, or a copy of both). Logs under $OUT (default /tmp/out).
#   NCU=1   ncu of the single kernel (gdn.prefill.bf16) and the three
#           chunk-parallel kernels (gdn.long)
#   FLA=1   bench/fla_delta.py beside it: fla-core and einops wheels in .whl/
#           (bench/README.md), installed into /tmp/site; FLA_S its time limit
set -uo pipefail
B=${1:?BINDIR}; A=${2:-}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
bin() { [ -x "$1/$2" ] && echo "$1/$2" || echo "$1/${3:-tests}/$2"; }
T=$(bin "$B" tinygml_tests tests); X=$(bin "$B" tinygml-bench bench)
timeout ${TEST_S:-90} "$T" --gtest_filter='*Delta*:*delta*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]" $OUT/tests.log | head -20
el tests
for o in gdn gla; do timeout 60 "$X" --quick --only $o $OUT/bench-$o.json > $OUT/bench-$o.log 2>&1; done
grep -hE "copy|prefill|long" $OUT/bench-g*.log | cut -c1-170
if [ -n "$A" ]; then
  XA=$(bin "$A" tinygml-bench bench)
  for o in gdn gla; do timeout 60 "$XA" --quick --only $o $OUT/before-$o.json > $OUT/before-$o.log 2>&1; done
  echo "before:"; grep -hE "copy|prefill|long" $OUT/before-g*.log | cut -c1-170
fi
el bench
R="Cuda/CudaDeltaChunked.MatchesFloat64Oracle/"
# single kernel: 16 warps (bv128, generic tiles), 8 warps (D24), DKP > 128, 16-bit o; chunk-parallel: both modes,
# element loads, D256 (one load buffer), bv8 state pass
RF="${R}fused_generic_gdn_D128_bv128:${R}fused_gdn_D128_bv128_f16:${R}fused_gla_D24_linear_gates:${R}fused_gdn_D256_bf16:${R}fused_bf16_out"
RF+=":${R}gdn_D128_bv128_f16:${R}gla_D128_bv128_no_state:${R}gdn_Dk32_Dv13_element_loads:${R}gdn_D256:${R}gdn_Dk64_Dv20_bv8"
# the single kernel's full case (Dk 128, 128-column slices): both modes, exact decays, no l2norm with 16-bit o
RF+=":${R}full_gdn_f32_io:${R}full_gla_bf16_no_state:${R}full_gdn_log_gates_to__30:${R}full_gdn_no_l2norm_f16_out"
TG_TEST_SMALL=1 timeout 150 compute-sanitizer --tool racecheck "$T" --gtest_filter="$RF" > $OUT/racecheck.log 2>&1
grep -E "RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" $OUT/racecheck.log
TG_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck "$T" \
  --gtest_filter='Cuda/CudaDeltaChunked*:CudaDeltaChunkedState*' > $OUT/memcheck.log 2>&1
grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED" $OUT/memcheck.log
el sanitizers
if [ "${NCU:-0}" = 1 ]; then
  S="--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section SpeedOfLight"
  timeout 60 ncu --kernel-name regex:delta_chunked_kernel --launch-count 1 $S "$X" --quick --only gdn.prefill.bf16 > $OUT/ncu.log 2>&1
  timeout 60 ncu --kernel-name regex:'delta_(prep|state|out)_kernel' --launch-count 3 $S "$X" --quick --only gdn.long > $OUT/ncu-3p.log 2>&1
  grep -E "delta_|Duration|Issue Slots Busy|Warp Cycles Per Issued" $OUT/ncu.log $OUT/ncu-3p.log | head -30
  el ncu
fi
if [ "${FLA:-0}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > $OUT/fla.log 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  PYTHONUNBUFFERED=1 timeout ${FLA_S:-240} python3 bench/fla_delta.py $OUT/fla.json --ours $OUT/bench-gdn.json >> $OUT/fla.log 2>&1
  echo "fla rc $?"; tail -20 $OUT/fla.log
  el fla
fi
