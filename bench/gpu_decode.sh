#!/usr/bin/env bash
# bench/gpu_decode.sh BINDIR - one device-machine run of the decode work
# (branch decode): the CUDA tests it touches, the quantized GEMV rows, the
# 1.1B (F16, Q8_0, Q4_0) and 125M synthetic llamas' tok/s with the fused-job
# quantized GEMV and the per-product kernel before it (TG_CUDA_MMQ_KERNEL=1),
# and an ncu table of one decode step. Logs under $OUT (default /tmp/out).
# SAN=1 adds compute-sanitizer memcheck and racecheck over the new tests.
set -uo pipefail
B=${1:-build}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
S=/tmp/synth; mkdir -p $S
( $B/tinygml-synth --preset 1.1b -o $S/1b.gguf >/dev/null && $B/tinygml-quantize $S/1b.gguf $S/1b-q4_0.gguf Q4_0 >/dev/null &&
  $B/tinygml-quantize $S/1b.gguf $S/1b-q8_0.gguf Q8_0 >/dev/null; $B/tinygml-synth --preset 125m -o $S/125m.gguf >/dev/null
  echo synth done ) > $OUT/synth.log 2>&1 &
SP=$!
F=${TESTS:-'*CudaFuse*:*CudaQuant*'}
timeout ${TEST_S:-110} $B/tinygml_tests --gtest_filter="$F" > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]|fuse     \].*q[48]_" $OUT/tests.log | head -40
el tests
if [ "${SAN:-0}" = 1 ]; then
  SF=${SAN_FILTER:-'*CudaFuseLayer*q*:CudaQuant.DecodeVariants*'}
  TG_TEST_SMALL=1 timeout 120 compute-sanitizer --tool memcheck $B/tinygml_tests --gtest_filter="$SF" > $OUT/memcheck.log 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | tail -3
  TG_TEST_SMALL=1 timeout 120 compute-sanitizer --tool racecheck $B/tinygml_tests --gtest_filter="$SF" > $OUT/racecheck.log 2>&1
  grep -E "RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | tail -3
  el sanitizers
fi
if [ "${BENCH_ONLY:-mmq.decode}" != none ]; then
  timeout 60 $B/tinygml-bench $OUT/mm.json --quick --only ${BENCH_ONLY:-mmq.decode} > $OUT/bench.log 2>&1
  grep -E "^mm|copy" $OUT/bench.log | head -40
  el bench
fi
wait $SP; cat $OUT/synth.log; ls -la $S; el synth
P=""; i=0; while [ ${#P} -lt 511 ]; do i=$((i+1)); P+="the quick brown fox $i "; done; P=${P:0:511}
for m in ${MODELS:-1b-q4_0 1b-q8_0 1b 125m}; do for k in ${KERNELS:-0 1}; do for b in ${BATCHES:-1 16}; do
  [ $k = 1 ] && [[ $m != *q* ]] && continue
  r=$(TG_CUDA_MMQ_KERNEL=$k timeout 40 $B/tinygml-run -m $S/$m.gguf -p "$P" -n 128 -b $b --temp 0 --ignore-eos --warmup --device cuda -q 2>&1 | grep -E "prompt|generation" | tr '\n' ' ')
  echo "$m mmq_kernel=$k b$b: $r"
done; done; done | tee $OUT/runs.log
el runs
for m in ${NCU_MODELS:-1b-q4_0 1b}; do
  [ "$m" = none ] && continue
  TG_CUDA_GRAPHS=0 timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count 260 --csv \
    $B/tinygml-run -m $S/$m.gguf -p "hello" -n 40 --ignore-eos --device cuda -q > $OUT/ncu_$m.csv 2>$OUT/ncu_$m.err
  python3 - $OUT/ncu_$m.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>5]
if not rows: print("no ncu rows"); sys.exit()
h=rows[0]; ki=h.index("Kernel Name"); vi=h.index("Metric Value")
tot=collections.defaultdict(float); cnt=collections.Counter()
for r in rows[1:]:
  try: v=float(r[vi].replace(",",""))
  except: continue
  k=r[ki][:70]; tot[k]+=v; cnt[k]+=1
T=sum(tot.values()); n=sum(cnt.values())
print(f"{sys.argv[1].split('/')[-1]}: {n} kernels, {T/1e3:.1f} us ({h[vi]} in ns)")
for k,v in sorted(tot.items(),key=lambda x:-x[1])[:16]: print(f"{v/1e3:8.1f} us {cnt[k]:4d}x {v/cnt[k]/1e3:6.2f}  {k}")
PY
done
el done
