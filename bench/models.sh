#!/usr/bin/env bash
# End-to-end tokens/s: prompt processing and generation.
#  - the shipped models, batch 1 and 16, on the CPU (-t 2) and (when a GPU is
#    present) CUDA;
#  - the synthetic llamas of BENCHMARKS.md (random weights, tinygml-synth):
#    0.26M F32 and 125M F16, prompt 64 tokens, 32 generated, batch 1, -t 2 (on
#    the CPU twice: the file mapped, and read with --no-mmap, "cpu/read");
#    with LLAMA_BENCH=/path/to/llama-bench, llama.cpp on the same files in the
#    same run (llama-bench -t 2 -p 64 -n 32 -r 3 $LLAMA_BENCH_ARGS, default
#    "--repack 0,1": with and without its extra (repacked / AMX) weight
#    buffers), REPS times in turn with tinygml; the medians are printed at the
#    end and every run is in the JSON (with the 1-minute load average);
#  - the 125M synthetic llama quantized by tinygml-quantize to Q8_0 and Q4_0,
#    same prompt / generation, CPU -t 2, and llama.cpp on the same quantized
#    files when llama-bench is there (LLAMA_BENCH, default
#    build-peer/llama-cpu/build/bin/llama-bench if it exists, which
#    `../shared/peers/llama_cpp.sh build-peer/llama-cpu cpu` builds; each repack
#    setting separately). SKIP_QUANT=1 skips.
# Prints a table and writes bench/models.json (or $2).
# Usage: bench/models.sh [BUILD] [OUT.json]
#   env: N_GEN (32), SYNTH (BUILD/tinygml-synth), SYNTH_DIR (/tmp/tinygml-synth),
#        SKIP_SHIPPED=1, SKIP_SYNTH=1, SKIP_QUANT=1, LLAMA_BENCH, LLAMA_BENCH_ARGS, REPS (1),
#        QUANTIZE (BUILD/tinygml-quantize: the 125M CPU and 1.1B CUDA Q8_0 / Q4_0 rows)
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/models.json}
RUN="$BUILD/tinygml-run"
SYNTH=${SYNTH:-$BUILD/tinygml-synth}
QUANTIZE=${QUANTIZE:-$BUILD/tinygml-quantize}
SYNTH_DIR=${SYNTH_DIR:-/tmp/tinygml-synth}
if [ -z "${LLAMA_BENCH:-}" ] && [ -x build-peer/llama-cpu/build/bin/llama-bench ]; then
  LLAMA_BENCH=build-peer/llama-cpu/build/bin/llama-bench
fi
PROMPT=$(head -n 1 tests/fixtures/recall_heldout.txt | cut -f1)
N=${N_GEN:-32}
devices="cpu"
if "$RUN" -m models/llama-recall.gguf -p x -n 1 --device cuda -q >/dev/null 2>&1; then devices="cpu cuda"; fi
printf '%-24s %-5s %5s %14s %14s\n' model dev batch "prompt tok/s" "gen tok/s"
echo "[" > "$OUT"
first=1
row() {  # model dev batch prompt n_gen [read]: "read" loads with --no-mmap (CPU: huge pages)
  local log pp tg how=mmap flags=()
  if [ "${6:-}" = read ]; then how=read; flags=(--no-mmap); fi
  log=$("$RUN" -m "$1" -p "$4" -n "$5" --ignore-eos --warmup --temp 0 --device "$2" -b "$3" -t 2 -q "${flags[@]}" 2>&1 >/dev/null)
  pp=$(echo "$log" | sed -n 's/^prompt:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
  tg=$(echo "$log" | sed -n 's/^generation:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
  printf '%-24s %-5s %5d %14s %14s\n' "$(basename "$1")" "$2$([ $how = read ] && echo /read)" "$3" "$pp" "$tg"
  [ $first -eq 1 ] || echo "," >> "$OUT"; first=0
  printf '  {"model": "%s", "device": "%s", "load": "%s", "batch": %d, "prompt_tokens_per_s": %s, "gen_tokens_per_s": %s, "load1": %s}' \
    "$(basename "$1")" "$2" "$how" "$3" "${pp:-null}" "${tg:-null}" "$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT"
}
if [ -z "${SKIP_SHIPPED:-}" ]; then
  for model in models/llama-recall.gguf models/hybrid-recall.gguf; do
    for dev in $devices; do
      for b in 1 16; do row "$model" "$dev" "$b" "$PROMPT" "$N"; done
    done
  done
fi
if [ -z "${SKIP_SYNTH:-}" ] && [ -x "$SYNTH" ]; then
  mkdir -p "$SYNTH_DIR"
  # 63 bytes + BOS = 64 prompt tokens
  P64=$(printf 'the quick brown fox jumps over the lazy dog %.0s' 1 2 | cut -c1-63)
  for spec in "0.26m llama-0.26m-f32" "125m llama-125m-f16"; do
    set -- $spec
    f="$SYNTH_DIR/$2.gguf"
    [ -f "$f" ] || "$SYNTH" --preset "$1" -o "$f" >/dev/null
    for rep in $(seq "${REPS:-1}"); do
      for dev in $devices; do row "$f" "$dev" 1 "$P64" "$N"; done
      row "$f" cpu 1 "$P64" "$N" read  # the CPU decoding from huge pages (README, --no-mmap)
      if [ -n "${LLAMA_BENCH:-}" ]; then
        # shellcheck disable=SC2086  # LLAMA_BENCH_ARGS is a list of flags
        "$LLAMA_BENCH" -m "$f" -t 2 -p 64 -n "$N" -r 3 ${LLAMA_BENCH_ARGS:---repack 0,1} -o jsonl 2>/dev/null |
          python3 -c '
import json, sys
name, load, out = sys.argv[1], sys.argv[2], open(sys.argv[3], "a")
for line in sys.stdin:
    r = json.loads(line)
    test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
    print("%-24s %-5s %5s %14s %14s  (repack %d, +- %.1f)" % ("llama.cpp " + name, "cpu", 1,
          "%.1f" % r["avg_ts"] if r["n_prompt"] else "", "%.1f" % r["avg_ts"] if r["n_gen"] else "",
          r["repack"], r["stddev_ts"]))
    out.write(",\n  {\"model\": \"%s\", \"device\": \"cpu\", \"peer\": \"llama.cpp\", \"repack\": %d, \"test\": \"%s\", "
              "\"tokens_per_s\": %.2f, \"stddev\": %.2f, \"load1\": %s}" % (name, r["repack"], test, r["avg_ts"], r["stddev_ts"], load))
' "$(basename "$f")" "$(cut -d' ' -f1 /proc/loadavg)" "$OUT" || true
        first=0
      fi
    done
  done
  # the 125M llama quantized (CPU only: the CUDA backend has no quantized kernels yet)
  if [ -z "${SKIP_QUANT:-}" ] && [ -x "$QUANTIZE" ]; then
    for ty in q8_0 q4_0; do
      q="$SYNTH_DIR/llama-125m-$ty.gguf"
      [ -s "$q" ] || "$QUANTIZE" "$SYNTH_DIR/llama-125m-f16.gguf" "$q" "$ty" 2>/dev/null
      row "$q" cpu 1 "$P64" "$N"
      if [ -n "${LLAMA_BENCH:-}" ]; then
        # each repack setting and test on its own: llama-bench's repack 1 can
        # die on a CPU whose extra buffer kernels fault (2026-12-03: its AMX
        # prompt kernels under this VM, Q4_0 and Q8_0 pp64; tg ran) and must
        # not take the other rows with it
        for rp in 0 1; do
          for t in "-p 64 -n 0" "-p 0 -n $N"; do
            # shellcheck disable=SC2086  # $t is two flags
            "$LLAMA_BENCH" -m "$q" -t 2 $t -r 3 --repack $rp 2>&1 | grep -E "pp64|tg$N|error|failed" |
              sed "s/^/llama.cpp llama-125m-$ty (repack $rp): /" ||
              echo "llama.cpp llama-125m-$ty (repack $rp, $t): no result (llama-bench failed)"
          done
        done
      fi
    done
  fi
fi


# Synthetic llamas at real sizes (tinygml-synth presets 125m and 1.1b, F16):
# prompt of 512 tokens, 128 generated, batch 1 and 16, on CUDA by default
# (SYNTH_DEVICES="cpu cuda" adds the CPU; SKIP_REALSIZE=1 skips; SYNTH_PRESETS picks
# other tinygml-synth presets, e.g. 0.26m for a quick check). The 1.1B rows print
# the weight-read floor beside the generation rate: weight bytes (the GGUF's
# size) / the device-to-device copy bandwidth measured in this run by
# tinygml-bench (read + write, as bench/README.md counts it). With
# tinygml-quantize built (the quant branch), the 1.1B file is also quantized
# to Q8_0 and Q4_0 and run the same way, floor beside it.
SYNTH_BIN="$SYNTH"
if [ -z "${SKIP_SYNTH:-}" ] && [ -z "${SKIP_REALSIZE:-}" ] && [ -x "$SYNTH_BIN" ]; then
  mkdir -p "$SYNTH_DIR"
  sdev=${SYNTH_DEVICES:-$(echo "$devices" | grep -o cuda || true)}
  copy_gbs=""
  if [ -x "$BUILD/bench/tinygml-bench" ] && echo "$sdev" | grep -q cuda; then
    copy_gbs=$("$BUILD/bench/tinygml-bench" /dev/null --quick --only none 2>/dev/null |
      sed -n 's/.*read + write): \([0-9.]*\) GB\/s.*/\1/p')
  fi
  # a 511-byte prompt (+ BOS = 512 tokens), built without a pipe (pipefail + head would SIGPIPE)
  P512=""
  i=0
  while [ ${#P512} -lt 511 ]; do i=$((i + 1)); P512+="the quick brown fox $i "; done
  P512=${P512:0:511}
  printf '\n%-22s %-5s %5s %14s %14s %18s\n' model dev batch "prompt tok/s" "gen tok/s" "weight floor tok/s"
  realsize_rows() {  # file label preset: batch 1 and 16 on each device
    local f=$1 label=$2 preset=$3 wbytes log pp tg floor dev b
    wbytes=$(stat -c %s "$f")
    for dev in $sdev; do
      for b in 1 16; do
        log=$("$RUN" -m "$f" -p "$P512" -n 128 --ignore-eos --warmup --temp 0 --device "$dev" -b "$b" -t 2 -q 2>&1 >/dev/null) || true
        pp=$(echo "$log" | sed -n 's/^prompt:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
        tg=$(echo "$log" | sed -n 's/^generation:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
        floor=""
        if [ "$preset" = 1.1b ] && [ "$dev" = cuda ] && [ "$b" = 1 ] && [ -n "$copy_gbs" ]; then
          floor=$(awk -v c="$copy_gbs" -v w="$wbytes" 'BEGIN { printf "%.0f", c * 1e9 / w }')
        fi
        printf '%-22s %-5s %5d %14s %14s %18s\n' "$label" "$dev" "$b" "$pp" "$tg" "$floor"
        [ $first -eq 1 ] || echo "," >> "$OUT"; first=0
        printf '  {"model": "%s", "device": "%s", "batch": %d, "prompt_tokens": 512, "gen_tokens": 128, "prompt_tokens_per_s": %s, "gen_tokens_per_s": %s, "weight_bytes": %s, "copy_gbs": %s, "weight_floor_tokens_per_s": %s}' \
          "$label" "$dev" "$b" "${pp:-null}" "${tg:-null}" "$wbytes" "${copy_gbs:-null}" "${floor:-null}" >> "$OUT"
      done
    done
  }
  for preset in ${SYNTH_PRESETS:-125m 1.1b}; do
    [ -n "$sdev" ] || break
    f="$SYNTH_DIR/tinygml-synth-$preset.gguf"
    [ -s "$f" ] || "$SYNTH_BIN" --preset "$preset" -o "$f" >/dev/null
    ty=f16
    [ "$preset" != 0.26m ] || ty=f32
    realsize_rows "$f" "synth-$preset-$ty" "$preset"
    # the 1.1B llama quantized (issue 13: batch-1 CUDA decode >= 75% of the
    # weight floor): needs tinygml-quantize (QUANTIZE=path; skipped without it)
    if [ "$preset" = 1.1b ]; then
      if [ -x "$QUANTIZE" ]; then
        for q in q8_0 q4_0; do
          qf="$SYNTH_DIR/tinygml-synth-$preset-$q.gguf"
          [ -s "$qf" ] || "$QUANTIZE" "$f" "$qf" "$q" >/dev/null
          realsize_rows "$qf" "synth-$preset-$q" "$preset"
        done
      else
        echo "(synth-1.1b q8_0/q4_0 rows skipped: no $QUANTIZE)"
      fi
    fi
  done
fi
printf '\n]\n' >> "$OUT"
if [ "${REPS:-1}" -gt 1 ] && command -v python3 >/dev/null; then
  python3 - "$OUT" <<'PY'
import json, statistics, sys
rows, med = json.load(open(sys.argv[1])), {}
for r in rows:
    if r.get("peer"):
        med.setdefault((r["model"], "llama.cpp repack %d" % r["repack"], r["test"]), []).append(r["tokens_per_s"])
    elif r["batch"] == 1:
        for key, test in (("prompt_tokens_per_s", "prompt"), ("gen_tokens_per_s", "gen")):
            if r[key] is not None:
                med.setdefault((r["model"], "tinygml " + r["device"] + ("/read" if r.get("load") == "read" else ""), test), []).append(r[key])
print("\nmedians over the runs (tokens/s):")
for (m, who, test), v in sorted(med.items()):
    print("  %-24s %-22s %-6s %10.1f  (%d runs: %s)" % (m, who, test, statistics.median(v), len(v), " ".join("%.0f" % x for x in v)))
PY
fi
