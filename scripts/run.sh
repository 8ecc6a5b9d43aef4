#!/usr/bin/env bash
# make run: run the shipped toy model when it is built, else the example.
set -euo pipefail
BUILD=${1:-build}
if [ -x "$BUILD/tinygml-run" ] && [ -f models/hybrid-recall.gguf ]; then
  exec ./scripts/demo.sh "$BUILD"
fi
exec "$BUILD/tinygml-example"
