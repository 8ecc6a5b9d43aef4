#!/usr/bin/env bash
# End-to-end tokens/s of the shipped models: prompt processing and generation,
# batch 1 and 16, on the CPU and (when a GPU is present) CUDA. Prints a table
# and writes bench/models.json (or $2). Usage: bench/models.sh [BUILD] [OUT.json]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/models.json}
RUN="$BUILD/tinygml-run"
PROMPT=$(head -n 1 tests/fixtures/recall_heldout.txt | cut -f1)
N=${N_GEN:-32}
devices="cpu"
if "$RUN" -m models/llama-recall.gguf -p x -n 1 --device cuda -q >/dev/null 2>&1; then devices="cpu cuda"; fi
printf '%-22s %-5s %5s %14s %14s\n' model dev batch "prompt tok/s" "gen tok/s"
echo "[" > "$OUT"
first=1
for model in models/llama-recall.gguf models/hybrid-recall.gguf; do
  for dev in $devices; do
    for b in 1 16; do
      log=$("$RUN" -m "$model" -p "$PROMPT" -n "$N" --ignore-eos --warmup --device "$dev" -b "$b" -t 2 -q 2>&1 >/dev/null)
      pp=$(echo "$log" | sed -n 's/^prompt:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
      tg=$(echo "$log" | sed -n 's/^generation:.*(\s*\([0-9.]*\) tokens\/s)/\1/p')
      printf '%-22s %-5s %5d %14s %14s\n' "$(basename "$model")" "$dev" "$b" "$pp" "$tg"
      [ $first -eq 1 ] || echo "," >> "$OUT"; first=0
      printf '  {"model": "%s", "device": "%s", "batch": %d, "prompt_tokens_per_s": %s, "gen_tokens_per_s": %s}' \
        "$(basename "$model")" "$dev" "$b" "${pp:-null}" "${tg:-null}" >> "$OUT"
    done
  done
done
printf '\n]\n' >> "$OUT"
