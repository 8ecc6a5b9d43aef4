#!/usr/bin/env bash
# make run: the shipped models answer a few held-out associative-recall
# prompts (greedy: --temp 0, the default samples), on CUDA when a GPU is
# present, else on the CPU.
set -euo pipefail
BUILD=${1:-build}
RUN="$BUILD/tinygml-run"
HELDOUT=tests/fixtures/recall_heldout.txt
for model in models/hybrid-recall.gguf models/llama-recall.gguf; do
  echo "== $model"
  ok=0; n=0
  while IFS=$'\t' read -r prompt expected; do
    out=$("$RUN" -m "$model" -p "$prompt" -n 4 --temp 0 2>/tmp/tinygml-run.$$.err) || { cat /tmp/tinygml-run.$$.err; exit 1; }
    answer=${out#"$prompt"}
    n=$((n + 1)); mark="wrong"
    [ "$answer" = "$expected" ] && { ok=$((ok + 1)); mark="ok"; }
    printf '  %-52s -> %-3s (expected %s) %s\n' "$prompt" "$answer" "$expected" "$mark"
  done < <(head -n 5 "$HELDOUT")
  echo "  $ok/$n correct; last run:"
  sed 's/^/    /' /tmp/tinygml-run.$$.err
done
rm -f /tmp/tinygml-run.$$.err
