#!/usr/bin/env bash
# Model loading time, memory-mapped (the default) vs read (--no-mmap), on the
# 1.1B F16 synthetic llama (tinygml-synth --preset 1.1b, 2.21 GB), written to
# a temporary file and deleted afterwards. For each mode it prints the
# median over RUNS runs of tinygml-run's "model loaded in" time and of the
# time to the first token (load + a 1-token prompt pass that reads every
# weight: with mmap the file's pages are read there, when first touched):
#  - warm: the file is in the page cache (it was just written and read);
#  - cold: the page cache dropped before each run (echo 3 > drop_caches),
#    only when this user may write /proc/sys/vm/drop_caches (root); else
#    the cold rows say so.
# Usage: bench/load_mmap.sh [BUILD] [DEVICE]     (DEVICE cpu (default) or cuda)
#   env: RUNS (5), SYNTH_DIR (/tmp), KEEP=1 keeps the file
set -euo pipefail
BUILD=${1:-build}
DEV=${2:-cpu}
RUN="$BUILD/tinygml-run"
SYNTH="$BUILD/tinygml-synth"
RUNS=${RUNS:-5}
F="${SYNTH_DIR:-/tmp}/tinygml-load-1.1b.$$.gguf"
[ -x "$RUN" ] && [ -x "$SYNTH" ] || { echo "error: build tinygml-run and tinygml-synth in $BUILD first"; exit 2; }
[ "${KEEP:-0}" = 1 ] || trap 'rm -f "$F"' EXIT
"$SYNTH" --preset 1.1b -o "$F" >/dev/null 2>&1
size=$(stat -c %s "$F")
can_drop=0
if [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# one run: prints "load_ms first_token_ms"
one() {  # extra flags...
  local log load pp
  log=$("$RUN" -m "$F" -p "" -n 1 --device "$DEV" -t 2 -q "$@" 2>&1 >/dev/null)
  load=$(echo "$log" | sed -n 's/.*model loaded in \([0-9.]*\) ms.*/\1/p')
  pp=$(echo "$log" | sed -n 's/^prompt:.* in *\([0-9.]*\) ms.*/\1/p')
  [ -n "$load" ] && [ -n "$pp" ] || { echo "error: tinygml-run said: $log" >&2; exit 1; }
  awk -v l="$load" -v p="$pp" 'BEGIN {print l, l + p}'
}
rows() {  # cache mode flags...
  local cache=$1 mode=$2 i loads=() firsts=()
  shift 2
  for i in $(seq "$RUNS"); do
    if [ "$cache" = cold ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
    read -r l f < <(one "$@")
    loads+=("$l"); firsts+=("$f")
  done
  printf '%-5s %-5s %12.1f %18.1f\n' "$cache" "$mode" "$(printf '%s\n' "${loads[@]}" | median)" \
    "$(printf '%s\n' "${firsts[@]}" | median)"
}
echo "1.1B F16 synthetic llama, $size bytes, device $DEV, median of $RUNS runs"
printf '%-5s %-5s %12s %18s\n' cache mode "load ms" "first token ms"
cat "$F" >/dev/null  # warm
rows warm mmap
rows warm read --no-mmap
if [ "$can_drop" = 1 ]; then
  rows cold mmap
  rows cold read --no-mmap
else
  echo "cold: skipped (cannot write /proc/sys/vm/drop_caches: run as root for cold-cache rows)"
fi
