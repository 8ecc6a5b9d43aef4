#!/usr/bin/env bash
# (kept with bench/results/wgb-s42-early-q.diff: build prev = the tree, new = the tree with the diff applied, pack
# build-dev/bins-s42d.txz with bins/bench-prev, bins/tinygml-bench, bins/tinygml_tests, stripped; carry both)
# session 42 call C: prev = f7c2072 (call B's new); new = + GATED_DELTA's Q K^T and Q S issued with K S and K K^T as a second
# wgmma group (wait_group 1), in flight through the substitution until A2's wait. Tests, sanitizers, rows (3 rounds).

set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; W=/tmp/w; mkdir -p $W
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -c "import tarfile; tarfile.open('build-dev/bins-s42d.txz').extractall('build-dev')"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name --format=csv,noheader
B=build-dev/bins; T=$B/tinygml_tests
mkdir -p /tmp/tg_t/{0,1,2,b,c,f}
TEST_TMPDIR=/tmp/tg_t/f/ timeout 120 $T --gtest_brief=1 --gtest_filter='*full_gdn*bf16*:*full_gdn_T1*:*full_gla_bf16k*:*FailedGraph*:*NanInput*' > $W/first.log 2>&1
grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]" $W/first.log | tail -3; grep -B2 -A12 "Failure" $W/first.log | head -60
el first
for s in 0 1 2; do
  TEST_TMPDIR=/tmp/tg_t/$s/ GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$s timeout 240 $T --gtest_brief=1 --gtest_filter='*Delta*:*delta*:*Chunk*' > $W/tests$s.log 2>&1 &
done
RF="*full_gla_bf16k*:*full_gla_bf16_no_state*:*full_gla_linear_zero_gates_bf16*:*full_gdn_bf16k*:*full_gdn_linear_zero_gates_bf16*:*full_gdn_log_gates_to__30_bf16*"
TEST_TMPDIR=/tmp/tg_t/b/ TG_TEST_SMALL=1 timeout 330 compute-sanitizer --tool racecheck $T --gtest_brief=1 --gtest_filter="$RF" > $W/racecheck.log 2>&1 &
TEST_TMPDIR=/tmp/tg_t/c/ TG_TEST_SMALL=1 timeout 330 compute-sanitizer --tool memcheck $T --gtest_brief=1 --gtest_filter="*full_gla_*:*full_gdn_*:*FailedGraph*:*NanInput*" > $W/memcheck.log 2>&1 &
wait
el "tests and sanitizers"
{ for f in tests0 tests1 tests2 memcheck racecheck; do echo "== $f"; grep -E "^\[  PASSED|^\[  FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^\[==========\]" $W/$f.log | tail -3; grep -B3 -A14 "Failure" $W/$f.log | head -40; done; } > $OUT/summary.log
cat $OUT/summary.log
ROWS=gla.prefill.bf16,gdn.prefill.bf16
for rep in 1 2 3; do
  for b in prev new; do
    X=$B/tinygml-bench; [ $b = prev ] && X=$B/bench-prev
    timeout 60 $X --quick --only $ROWS $W/r$rep$b.json > $W/r$rep$b.log 2>&1
    grep -hE "^(copy|device)|^g(la|dn)\.prefill" $W/r$rep$b.log | sed "s/^/$rep $b /"
  done
done > $OUT/bench.log
cp $W/r1new.json $OUT/ops-r1new.json
el bench
cut -c1-175 $OUT/bench.log
