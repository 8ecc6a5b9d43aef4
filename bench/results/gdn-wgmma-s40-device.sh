#!/usr/bin/env bash
# session 40 call B: GATED_DELTA on the wgmma kernel. Delta tests, memcheck and racecheck beside them,
# then gdn/gla rows (two rounds, wgmma vs mma.sync).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; W=/tmp/w; mkdir -p $W
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -c "import tarfile; tarfile.open('build-dev/bins-s40b.txz').extractall('build-dev')"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name --format=csv,noheader
T=build-dev/bins/tests/tinygml_tests; X=build-dev/bins/bench/tinygml-bench
mkdir -p /tmp/tg_t/{0,1,2,b,c}
mkdir -p /tmp/tg_t/{3,4}
for s in 0 1; do
  TEST_TMPDIR=/tmp/tg_t/$s/ GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$s timeout 200 $T --gtest_brief=1 --gtest_filter='*Delta*:*delta*:*Chunk*' > $OUT/tests$s.log 2>&1 &
  TG_WG_LATE=1 TEST_TMPDIR=/tmp/tg_t/$((s+3))/ GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$s timeout 200 $T --gtest_brief=1 --gtest_filter='*Delta*:*delta*:*Chunk*' > $OUT/late$s.log 2>&1 &
done
R="Cuda/CudaDeltaChunked.MatchesFloat64Oracle/"
RF="${R}full_gdn_T1:${R}full_gdn_log_gates_to__30_bf16:${R}full_gdn_Hv4Hk1_Dv256_bf16_state:${R}full_gdn_linear_zero_gates_bf16:${R}full_gdn_log__inf_gates_f16_no_state:${R}full_gla_T1_f16:${R}full_gla_bf16_no_state"
TG_WG_LATE=1 TEST_TMPDIR=/tmp/tg_t/b/ TG_TEST_SMALL=1 timeout 200 compute-sanitizer --tool racecheck $T --gtest_filter="$RF" > $OUT/racecheck.log 2>&1 &
TG_WG_LATE=1 TEST_TMPDIR=/tmp/tg_t/c/ TG_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck $T --gtest_filter='Cuda/CudaDeltaChunked*:CudaDeltaChunkedState*' > $OUT/memcheck.log 2>&1 &
wait
el "tests and sanitizers"
echo "==== summary"
for f in tests0 tests1 late0 late1 memcheck racecheck; do echo "== $f"; grep -E "^\[  PASSED|^\[  FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^\[==========\]" $OUT/$f.log | tail -3; grep -B3 -A14 "Failure" $OUT/$f.log | head -60; done
for rep in 1 2; do
  timeout 60 $X --quick --only gdn.prefill,gdn.prefill.bf16,gdn.prefill.bf16/mma,gla.prefill.bf16 $W/r$rep.json > $W/r$rep.log 2>&1
  grep -hE "^(copy|device)|^(gla|gdn)\.prefill(\.bf16)?(/mma)? " $W/r$rep.log | sed "s/^/$rep /"
  TG_WG_LATE=1 timeout 60 $X --quick --only gdn.prefill.bf16 $W/l$rep.json > $W/l$rep.log 2>&1
  grep -hE "^gdn\.prefill\.bf16 " $W/l$rep.log | sed "s/^/$rep LATE /"
done > $OUT/bench.log
cp $W/r1.json $OUT/ops-r1.json; cp $W/r1.log $OUT/bench-r1.log
el bench
cut -c1-160 $OUT/bench.log
