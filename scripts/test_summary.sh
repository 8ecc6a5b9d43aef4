#!/usr/bin/env bash
# test_summary.sh BUILD - after ctest: one line saying how many tests were
# skipped and how many of those are GPU tests that found no CUDA device
# (from the gtest output ctest keeps in Testing/Temporary/LastTest.log).
set -uo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
skipped=$(awk '/^\[  SKIPPED \] [0-9]+ tests?, listed below:/ { n += $4 } END { print n + 0 }' "$log")
gpu=$(grep -cxE 'no CUDA device|built without CUDA' "$log")
if [ "$skipped" -eq 0 ]; then
  echo "make test: no test skipped"
elif [ "$gpu" -gt 0 ]; then
  echo "make test: $skipped tests skipped, $gpu of them GPU tests (no CUDA device here: they run on a machine with an NVIDIA GPU)"
else
  echo "make test: $skipped tests skipped (see ctest's list above)"
fi
