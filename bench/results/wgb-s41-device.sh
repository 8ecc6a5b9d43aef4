#!/usr/bin/env bash
# Session 41's last device script (never ran: the device budget was spent on refused starts), for
# bench/results/wgb-s41-pending.diff (delta_wgb_kernel: the state block carried in registers, by_mul
# where every decay is finite, P's factors hoisted; store_o, also in it at first, landed with the
# split of cuda/sm90a/delta_rule_chunked_wgb.cu). Delta tests,
# memcheck, racecheck over the bf16k cases, gla rows of three binaries interleaved (prev = f12b15e's
# tinygml-bench: rebuild that as the tree before the diff; ab = the diff without the hoisted P
# factors, new = the whole diff), ncu by CUDA line.
# Binaries built here, stripped, packed as build-dev/bins-s42.txz (bins/: tinygml_tests, tinygml-bench,
# bench-f12b15e, bench-ab, bench-prof = tinygml-bench built with -DCMAKE_CUDA_FLAGS=-lineinfo), carried
# with this script (bench/results/ncu_sum.py, tracked, summarizes the ncu report).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; W=/tmp/w; mkdir -p $W
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -c "import tarfile; tarfile.open('build-dev/bins-s42.txz').extractall('build-dev')"
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name --format=csv,noheader
T=build-dev/bins/tinygml_tests; X=build-dev/bins/tinygml-bench; P=build-dev/bins/bench-f12b15e; XP=build-dev/bins/bench-prof
mkdir -p /tmp/tg_t/{0,1,2,b,c}
for s in 0 1 2; do
  TEST_TMPDIR=/tmp/tg_t/$s/ GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$s timeout 200 $T --gtest_brief=1 --gtest_filter='*Delta*:*delta*:*Chunk*' > $W/tests$s.log 2>&1 &
done
TEST_TMPDIR=/tmp/tg_t/b/ TG_TEST_SMALL=1 timeout 200 compute-sanitizer --tool racecheck $T --gtest_filter="*full_gla_bf16k*:*full_gla_bf16_no_state*:*full_gla_linear_zero_gates_bf16*" > $W/racecheck.log 2>&1 &
TEST_TMPDIR=/tmp/tg_t/c/ TG_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck $T --gtest_filter="*full_gla_*:*FailedGraph*" > $W/memcheck.log 2>&1 &
wait
el "tests and sanitizers"
{ for f in tests0 tests1 tests2 memcheck racecheck; do echo "== $f"; grep -E "^\[  PASSED|^\[  FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^\[==========\]" $W/$f.log | tail -3; grep -B3 -A14 "Failure" $W/$f.log | head -40; done; } > $OUT/summary.log
cat $OUT/summary.log
for rep in 1 2; do
  for b in prev ab new; do
    B=$X; [ $b = prev ] && B=$P; [ $b = ab ] && B=build-dev/bins/bench-ab
    timeout 60 $B --quick --only gla.prefill.bf16,gla.prefill.bf16/tf32 $W/r$rep$b.json > $W/r$rep$b.log 2>&1
    grep -hE "^(copy|device)|^gla\.prefill" $W/r$rep$b.log | sed "s/^/$rep $b /"
  done
done > $OUT/bench.log
cp $W/r1new.json $OUT/ops-r1.json
el bench
cut -c1-175 $OUT/bench.log
row=gla.prefill.bf16
timeout 60 ncu --kernel-name regex:delta_wgb_kernel --launch-count 1 --set full --import-source yes \
  -o /tmp/$row -f $XP --quick --only $row > /tmp/ncu-$row.log 2>&1; echo "$row ncu rc $?"
ncu -i /tmp/$row.ncu-rep --page raw --csv > /tmp/$row-raw.csv 2>/dev/null
ncu -i /tmp/$row.ncu-rep --page source --csv --print-source cuda > /tmp/$row-cuda.csv 2>/tmp/$row-cuda.err
ncu -i /tmp/$row.ncu-rep --page source --csv --print-source sass > /tmp/$row-sass.csv 2>/tmp/$row-sass.err
python3 bench/results/ncu_sum.py /tmp/$row-raw.csv /tmp/$row-cuda.csv /tmp/$row-sass.csv > $OUT/ncu.txt 2>&1
head -75 $OUT/ncu.txt
el ncu
