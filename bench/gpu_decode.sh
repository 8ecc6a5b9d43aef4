#!/usr/bin/env bash
# bench/gpu_decode.sh BINDIR - one device-machine run of the CUDA decode work:
# (BUILD=1) configure and build BINDIR's programs, the CUDA tests it touches (TESTS, a
# gtest filter), compute-sanitizer memcheck and racecheck over a subset
# (SAN=1, SAN_FILTER, shapes shrunk by TG_TEST_SMALL=1; the three at once), bench rows (BENCH:
# id prefixes, "none" for none),
# then tinygml-run tok/s of the synthetic
# llamas (MODELS of 1b, 1b-q4_0, 1b-q8_0, 125m; BATCHES) once per value of
# an A/B switch (environment variable AB_VAR set to each of AB_VALS, in
# turn, REPS rounds), an ncu table of one decode step (NCU_MODELS, for
# each of NCU_AB_VALS), and the step's kernel timeline as it replays
# (TIMELINE_MODELS: names from MODELS, or recall for the shipped llama-recall;
# for each of AB_VALS: bench/timeline.cpp, built here when
# the toolkit has CUPTI).
# Logs under $OUT (default /tmp/out); a short table last.
# AB_VAR=ENV: each of AB_VALS is a comma-separated list of assignments
# (VAR=v,VAR2=w; "-" for none), for A/B of several switches at once.
# TIMELINE_BRIEF=1 prints only each timeline's step line (its span).
# PEER_GZ=FILE: llama.cpp's llama-bench (bench/llama_cuda_pack.sh, carried
# to the machine) on the same MODELS files, PEER_REPS rounds (5).
#   BUILD=1 SAN=1 AB_VAR=TG_CUDA_NORM_FOLD AB_VALS="0 1" bench/gpu_decode.sh build-gpu
#   AB_VAR=ENV AB_VALS="- TG_CUDA_MMV_TRIGGER=1 TG_CUDA_PDL_MASK=1,TG_CUDA_MMV_TRIGGER=1" \
#     TIMELINE_MODELS="1b recall" TIMELINE_BRIEF=1 bench/gpu_decode.sh build-gpu
set -uo pipefail
B=${1:-build}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
if [ "${BUILD:-0}" = 1 ]; then
  T="tinygml_tests tinygml-bench tinygml-run tinygml-synth tinygml-quantize"
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build "$B" -j16 --target $T; } > $OUT/build.log 2>&1 ||
    { grep -E "error|Error" -A3 $OUT/build.log | head -40; exit 1; }
  el build
fi
MODELS=${MODELS:-1b 125m}
S=/tmp/synth; mkdir -p $S
( for m in $MODELS; do
    [ -f $S/$m.gguf ] && continue
    case $m in
      1b) $B/tinygml-synth --preset 1.1b -o $S/1b.gguf ;;
      125m) $B/tinygml-synth --preset 125m -o $S/125m.gguf ;;
      1b-q*) [ -f $S/1b.gguf ] || $B/tinygml-synth --preset 1.1b -o $S/1b.gguf
             $B/tinygml-quantize $S/1b.gguf $S/$m.gguf ${m#1b-} ;;
    esac >/dev/null
  done; echo synth done ) > $OUT/synth.log 2>&1 &
SP=$!
# the tests and both sanitizers run at once (timing does not matter there;
# each process gets its own TEST_TMPDIR so the tests' temp files never meet):
# on the H200 this took ~250 s where one after the other took ~450
mkdir -p /tmp/tg_t/tests /tmp/tg_t/memcheck /tmp/tg_t/racecheck
pids=()
if [ "${TESTS:-none}" != none ]; then
  TEST_TMPDIR=/tmp/tg_t/tests/ timeout ${TEST_S:-200} $B/tests/tinygml_tests --gtest_brief=1 --gtest_filter="$TESTS" \
    > $OUT/tests.log 2>&1 & pids+=("tests:$!")
fi
if [ "${SAN:-0}" = 1 ]; then
  SF=${SAN_FILTER:-'*CudaFuse*'}
  for tool in memcheck racecheck; do
    TEST_TMPDIR=/tmp/tg_t/$tool/ TG_TEST_SMALL=1 timeout ${SAN_S:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/tests/tinygml_tests --gtest_brief=1 --gtest_filter="$SF" > $OUT/$tool.log 2>&1 & pids+=("$tool:$!")
  done
fi
for p in "${pids[@]}"; do
  name=${p%%:*}; wait ${p#*:}; echo "$name rc $?"
  if [ "$name" = tests ]; then
    grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]" $OUT/tests.log | head -20
    grep -B2 -A10 "Failure" $OUT/tests.log | head -60
  else
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" $OUT/$name.log | tail -3
  fi
done
[ ${#pids[@]} -gt 0 ] && el "tests and sanitizers"
for row in ${BENCH:-decode}; do
  [ "$row" = none ] && continue
  timeout 90 $B/bench/tinygml-bench $OUT/bench-$row.json --quick --only $row > $OUT/bench-$row.log 2>&1
  grep -E "^(mm|attn|kv|rope|decode|gdn|gla|llama|hybrid)|copy" $OUT/bench-$row.log | head -30
done
el bench
wait $SP; cat $OUT/synth.log; el synth
P=""; i=0; while [ ${#P} -lt 511 ]; do i=$((i+1)); P+="the quick brown fox $i "; done; P=${P:0:511}
AB_VAR=${AB_VAR:-TG_CUDA_NOTHING}
# the environment assignments of A/B value v (AB_VAR=ENV: v itself, "," -> " ", "-" none)
ab_env() { if [ "$AB_VAR" = ENV ]; then [ "$1" = - ] && echo TG_CUDA_NOTHING=1 || echo "${1//,/ }"; else echo "$AB_VAR=$1"; fi; }
ab_name() { if [ "$AB_VAR" = ENV ]; then echo "$1"; else echo "$AB_VAR=$1"; fi; }
for rep in $(seq ${REPS:-2}); do for m in $MODELS; do for b in ${BATCHES:-1}; do for v in ${AB_VALS:-1}; do
  r=$(env $(ab_env "$v") timeout 60 $B/tinygml-run -m $S/$m.gguf -p "$P" -n 128 -b $b --temp 0 --ignore-eos --warmup --device cuda -q 2>&1 | grep -E "prompt|generation" | tr '\n' ' ')
  echo "$m b$b $(ab_name "$v"): $r"
done; done; done; done | tee $OUT/runs.log
el runs
# llama.cpp on the same files (PEER_GZ: llama-bench gzipped by bench/llama_cuda_pack.sh, carried)
if [ -n "${PEER_GZ:-}" ] && [ -f "$PEER_GZ" ]; then
  gzip -dc "$PEER_GZ" > /tmp/tg_llama_bench && chmod +x /tmp/tg_llama_bench
  for m in $MODELS; do
    timeout 120 /tmp/tg_llama_bench -m $S/$m.gguf -ngl 99 -fa 1 -p 512 -n 128 -r ${PEER_REPS:-5} > $OUT/llama_$m.log 2>&1
    echo "llama.cpp $m: $(grep -E 'pp512|tg128' $OUT/llama_$m.log | awk -F'|' '{printf "%s %s  ", $(NF-2), $(NF-1)}')"
  done
  el peer
fi
for m in ${NCU_MODELS:-none}; do for v in ${NCU_AB_VALS:-1}; do
  [ "$m" = none ] && continue
  f=$OUT/ncu_${m}_$(printf '%s' "$v" | tr -c 'A-Za-z0-9_-' '_').csv
  env $(ab_env "$v") TG_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count ${NCU_COUNT:-260} --csv \
    $B/tinygml-run -m $S/$m.gguf -p "$P" -n 40 --ignore-eos --device cuda -q > $f 2>$f.err
  echo "$m $(ab_name "$v")"; python3 - $f <<'PY'
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
for k,v in sorted(tot.items(),key=lambda x:-x[1])[:12]: print(f"{v/1e3:8.1f} us {cnt[k]:4d}x {v/cnt[k]/1e3:6.2f}  {k}")
PY
done; done
if [ "${TIMELINE_MODELS:-none}" != none ]; then
  [ -x $B/bench/tinygml-timeline ] || cmake --build "$B" -j16 --target tinygml-timeline > $OUT/build_timeline.log 2>&1
  for m in $TIMELINE_MODELS; do for v in ${AB_VALS:-1}; do
    f=$OUT/timeline_${m}_$(printf '%s' "$v" | tr -c 'A-Za-z0-9_-' '_').txt
    case $m in recall) path=models/llama-recall.gguf; pr=16 ;; *) path=$S/$m.gguf; pr=512 ;; esac
    env $(ab_env "$v") timeout 90 $B/bench/tinygml-timeline $path --prompt $pr --steps 20 > $f 2>&1
    if [ "${TIMELINE_BRIEF:-0}" = 1 ]; then echo "$m $(ab_name "$v"): $(grep '^step' $f)"; continue; fi
    echo "$m $(ab_name "$v")"; sed -n '2p' $f; sed -n '/^by kernel/,$p' $f | head -14
  done; done
  el timeline
fi
el done
