#!/usr/bin/env bash
# Interleaved rounds on the CPU (-t 2): tinygml-run against llama.cpp's
# llama-bench on the same quantized files (the 125M synthetic llama through
# tinygml-quantize: Q4_0, Q8_0; more with TYPES), each round and type: every
# build of BUILDS mapped and read (--no-mmap), then llama-bench --repack 0,1
# (-r 3); one raw line per figure with the 1-minute load average, and the
# medians at the end.
# Usage: bench/cpu_quant_rounds.sh [BUILD] [ROUNDS]
#   env: BUILDS (BUILD; e.g. "build /tmp/base/build" for before/after in the same rounds),
#        MODEL (125m; tinygml-synth's preset: 125m or 1.1b),
#        TYPES ("q4_0 q8_0"), SYNTH_DIR (/tmp/tinygml-synth), N_GEN (32),
#        LLAMA_BENCH (build-peer/llama-cpu/build/bin/llama-bench, which
#        `../shared/peers/llama_cpp.sh build-peer/llama-cpu cpu` builds; skipped when absent)
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-3}
SYNTH_DIR=${SYNTH_DIR:-/tmp/tinygml-synth}
N=${N_GEN:-32}
LLAMA_BENCH=${LLAMA_BENCH:-build-peer/llama-cpu/build/bin/llama-bench}
P64=$(printf 'the quick brown fox jumps over the lazy dog %.0s' 1 2 | cut -c1-63)  # + BOS = 64 tokens
mkdir -p "$SYNTH_DIR"
MODEL=${MODEL:-125m}
f16="$SYNTH_DIR/llama-$MODEL-f16.gguf"
[ -s "$f16" ] || "$BUILD/tinygml-synth" --preset "$MODEL" -o "$f16" >/dev/null
load1() { cut -d' ' -f1 /proc/loadavg; }
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for round in $(seq "$ROUNDS"); do
  for ty in ${TYPES:-q4_0 q8_0}; do
    f="$SYNTH_DIR/llama-$MODEL-$ty.gguf"
    [ -s "$f" ] || "$BUILD/tinygml-quantize" "$f16" "$f" "$ty" >/dev/null 2>&1
    for b in ${BUILDS:-$BUILD}; do
      for how in mmap read; do
        flags=()
        [ $how = read ] && flags=(--no-mmap)
        log=$("$b/tinygml-run" -m "$f" -p "$P64" -n "$N" --ignore-eos --warmup --temp 0 --device cpu -t 2 -q \
          "${flags[@]}" 2>&1 >/dev/null)
        pp=$(echo "$log" | sed -n 's/^prompt:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
        tg=$(echo "$log" | sed -n 's/^generation:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
        echo "round $round $ty tinygml:$b/$how pp64 ${pp:-nan} tg$N ${tg:-nan} load1 $(load1)" | tee -a "$raw"
      done
    done
    if [ -x "$LLAMA_BENCH" ]; then
      # generation with and without repacking; the prompt in a call of its own
      # per repack setting (this build's pp64 with --repack 1 dies of SIGILL
      # here: a crash is printed as such and the rounds go on)
      for args in "-p 0 -n $N --repack 0,1" "-p 64 -n 0 --repack 0" "-p 64 -n 0 --repack 1"; do
        # shellcheck disable=SC2086  # args is a list of flags
        lines=$("$LLAMA_BENCH" -m "$f" -t 2 $args -r 3 -o jsonl 2>/dev/null) || echo "round $round $ty llama.cpp ($args) crashed (status $?) load1 $(load1)" | tee -a "$raw"
        echo "$lines" | python3 -c '
import json, sys
for line in sys.stdin:
    if not line.strip(): continue
    r = json.loads(line)
    test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
    print("%d %s %.1f %.1f" % (r["repack"], test, r["avg_ts"], r["stddev_ts"]))
' | while read -r rp test ts sd; do
          echo "round $round $ty llama.cpp/repack$rp $test $ts (+- $sd) load1 $(load1)" | tee -a "$raw"
        done
      done
    fi
  done
done
python3 - "$raw" <<'PY'
import statistics, sys
med = {}
for line in open(sys.argv[1]):
    w = line.split()
    if "crashed" in line: continue
    if w[3].startswith("tinygml"):
        for i in (4, 6):
            if w[i + 1] != "nan": med.setdefault((w[2], w[3], w[i]), []).append(float(w[i + 1]))
    else:
        med.setdefault((w[2], w[3], w[4]), []).append(float(w[5]))
print("medians over %s (tokens/s):" % "the rounds")
for (ty, who, test), v in sorted(med.items()):
    print("  %-5s %-34s %-5s %9.1f  (%d: %s)" % (ty, who, test, statistics.median(v), len(v), " ".join("%.0f" % x for x in v)))
PY
