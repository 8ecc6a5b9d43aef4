#!/usr/bin/env bash
# llama_interop.sh - GGUF files that travel both ways between tinygml and
# llama.cpp (issue 13). Not in CI: it needs llama.cpp built for the CPU
# (../shared/peers/llama_cpp.sh DIR cpu, TARGETS="llama-bench llama-quantize"
# at least; its libllama.so is what this script links against).
#
#   scripts/llama_interop.sh [BUILD] [LLAMA_DIR]     (defaults: build, build-peer/llama-cpu)
#
# Steps (each prints PASS, FAIL or SKIP with the reason; the exit status is 1
# when any step FAILs):
#  1. llama.cpp loads the shipped models/llama-recall.gguf (byte-level "gpt2"
#     vocabulary), tokenizes each held-out prompt exactly as tinygml does
#     (BOS + one token per byte), and its greedy completions of all held-out
#     prompts (tests/fixtures/recall_heldout.txt) equal tinygml-run's.
#  2. models/hybrid-recall.gguf: llama.cpp has no 'tghybrid' architecture, so
#     only its vocabulary is checked (llama.cpp's refusal must name the
#     architecture, not the tokenizer).
#  3. Q8_0 and Q4_0 files written by tinygml-quantize run in llama.cpp, with
#     the same greedy answers as tinygml on the same file (needs the quant
#     branch: SKIP when BUILD/tinygml-quantize is not built). Quantized runs may
#     differ on a few prompts (at most 4 of 200): llama.cpp also rounds the
#     activations to 8 bits in its quantized dot products.
#  4. Q8_0 and Q4_0 files written by llama-quantize (--pure: one type for every
#     quantizable matrix) run in tinygml, with the same answers as llama.cpp
#     on the same file (needs llama-quantize, and tinygml's quantized types).
set -uo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA=${2:-$ROOT/build-peer/llama-cpu}
cd "$ROOT"
RUN="$BUILD/tinygml-run"
QUANT="$BUILD/tinygml-quantize"
HELDOUT=tests/fixtures/recall_heldout.txt
LIB="$LLAMA/build/bin"
N=8  # tokens at most: the answers are 2 bytes + EOS
tmp=$(mktemp -d /tmp/llama_interop.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failed=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }
skip() { echo "SKIP: $*"; }

[ -x "$RUN" ] || { echo "error: $RUN not built (cmake --build $BUILD --target tinygml-run)"; exit 2; }
if [ ! -f "$LIB/libllama.so" ] || [ ! -f "$LLAMA/include/llama.h" ]; then
  echo "error: no llama.cpp build in $LLAMA (libllama.so in $LIB): build it with"
  echo "  TARGETS=\"llama-bench llama-quantize\" nice ../shared/peers/llama_cpp.sh $LLAMA cpu"
  exit 2
fi
echo "llama.cpp: $LLAMA ($(grep -m1 -o 'LLAMA_BUILD_NUMBER [0-9]*' "$LLAMA/build/CMakeCache.txt" 2>/dev/null || echo 'build number unknown'))"
GREEDY="$tmp/llama_greedy"
g++ -std=c++17 -O2 scripts/llama_greedy.cpp -I"$LLAMA/include" -I"$LLAMA/ggml/include" -L"$LIB" -lllama -lggml \
    -lggml-base -Wl,-rpath,"$LIB" -o "$GREEDY" || { echo "error: cannot build scripts/llama_greedy.cpp"; exit 2; }

# tinygml's greedy completions: prompt<TAB>completion, one line per prompt. F32
# K/V caches on both sides (tinygml-run's default is F16, as llama.cpp's; the
# comparison allows no difference, so both keep the caches exact)
tinygml_answers() {  # MODEL OUT
  local model=$1 out=$2 prompt expected text
  : >"$out"
  while IFS=$'\t' read -r prompt expected; do
    text=$("$RUN" -m "$model" -p "$prompt" -n $N --temp 0 --device cpu -t 2 -ctk f32 -ctv f32 2>"$tmp/run.err") || {
      cat "$tmp/run.err" >&2; return 1; }
    printf '%s\t%s\n' "$prompt" "${text#"$prompt"}" >>"$out"
  done <"$HELDOUT"
}
llama_answers() {  # MODEL OUT: prompt<TAB>completion (the token counts go to OUT.ntok)
  "$GREEDY" "$1" "$HELDOUT" $N 2 >"$2.raw" 2>"$tmp/llama.err" || { cat "$tmp/llama.err" >&2; return 1; }
  cut -f1,2 "$2.raw" >"$2"
  cut -f1,3 "$2.raw" >"$2.ntok"
}
# correct answers in OUT (vs the held-out file), as "k/n"
score() { paste <(cut -f2 "$HELDOUT") <(cut -f2 "$1") | awk -F'\t' '{n++; if ($1 == $2) k++} END {printf "%d/%d", k, n}'; }
# The runs agree on every prompt (or, with MAX_DIFF, on all but that many:
# quantized files, where llama.cpp also rounds the activations to 8 bits in
# its dot products and tinygml may not): PASS, else FAIL with the differences.
compare() {  # WHAT TINYGML_OUT LLAMA_OUT [MAX_DIFF]
  local what=$1 a=$2 b=$3 max=${4:-0} nd n
  n=$(wc -l <"$a")
  nd=$(paste "$a" "$b" | awk -F'\t' '$2 != $4' | wc -l)
  if [ "$nd" -eq 0 ]; then
    pass "$what: llama.cpp's greedy output equals tinygml's on all $n held-out prompts" \
         "(correct: tinygml $(score "$a"), llama.cpp $(score "$b"))"
  elif [ "$nd" -le "$max" ]; then
    pass "$what: llama.cpp's greedy output equals tinygml's on $((n - nd)) of $n held-out prompts (at most $max may" \
         "differ; correct: tinygml $(score "$a"), llama.cpp $(score "$b"))"
  else
    fail "$what: $nd of $n held-out prompts differ (tinygml $(score "$a"), llama.cpp $(score "$b")); first ones:"
  fi
  [ "$nd" -gt 0 ] && paste "$a" "$b" | awk -F'\t' '$2 != $4 {printf "    %s -> tinygml %s, llama.cpp %s\n", $1, $2, $4}' | head -5
  return 0
}

echo "== 1. the shipped llama model in llama.cpp"
M=models/llama-recall.gguf
if llama_answers "$M" "$tmp/ll.txt"; then
  # BOS + one token per byte, as tinygml's tokenizer
  bad_tok=$(awk -F'\t' '{ if ($2 != length($1) + 1) print $1 }' "$tmp/ll.txt.ntok" | head -3)
  if [ -z "$bad_tok" ]; then pass "llama.cpp tokenizes every held-out prompt as BOS + one token per byte"
  else fail "llama.cpp tokenizes differently (BOS + bytes expected), e.g. '$bad_tok'"; fi
  tinygml_answers "$M" "$tmp/tg.txt" && compare "llama-recall.gguf (F32)" "$tmp/tg.txt" "$tmp/ll.txt"
else
  fail "llama.cpp cannot load $M: $(tail -n 3 "$tmp/llama.err")"
fi

echo "== 2. the shipped hybrid model's vocabulary"
if "$GREEDY" models/hybrid-recall.gguf "$HELDOUT" 1 2 >/dev/null 2>"$tmp/hy.err"; then
  fail "llama.cpp loaded the tghybrid model (it has no such architecture: unexpected)"
elif grep -q "unknown tokenizer" "$tmp/hy.err"; then
  fail "llama.cpp refuses the hybrid model's tokenizer: $(grep -m1 'unknown tokenizer' "$tmp/hy.err")"
else
  pass "llama.cpp refuses hybrid-recall.gguf for its architecture only: $(grep -m1 -o "unknown model architecture: '[a-z]*'" "$tmp/hy.err" || tail -n 1 "$tmp/hy.err")"
fi

echo "== 3. files quantized by tinygml-quantize, in llama.cpp"
if [ ! -x "$QUANT" ]; then
  skip "$QUANT is not built (tinygml-quantize comes with the quant branch; run this script again after the merge)"
else
  for T in Q8_0 Q4_0; do  # the issue's spelling of tinygml-quantize's TYPE
    Q="$tmp/llama-recall.tg-$T.gguf"
    if ! "$QUANT" "$M" "$Q" "$T" >"$tmp/q.log" 2>&1; then fail "tinygml-quantize $T: $(tail -n 2 "$tmp/q.log")"; continue; fi
    # a quantized copy of an F32 file is much smaller (Q8_0 ~0.27x, Q4_0 ~0.14x of the matrices)
    if [ "$(stat -c %s "$Q")" -gt $(( $(stat -c %s "$M") * 6 / 10 )) ]; then
      fail "tinygml-quantize $T wrote $(stat -c %s "$Q") bytes from $(stat -c %s "$M"): not quantized?"; continue; fi
    if ! llama_answers "$Q" "$tmp/ll.$T.txt"; then fail "llama.cpp cannot load tinygml-quantize's $T file: $(tail -n 3 "$tmp/llama.err")"; continue; fi
    tinygml_answers "$Q" "$tmp/tg.$T.txt" || { fail "tinygml cannot run its own $T file"; continue; }
    compare "tinygml-quantize $T" "$tmp/tg.$T.txt" "$tmp/ll.$T.txt" 4
  done
fi

echo "== 4. files quantized by llama-quantize, in tinygml"
if [ ! -x "$LIB/llama-quantize" ]; then
  skip "$LIB/llama-quantize is not built (TARGETS=\"... llama-quantize\" in llama_cpp.sh)"
else
  for T in Q8_0 Q4_0; do
    Q="$tmp/llama-recall.ll-$T.gguf"
    if ! "$LIB/llama-quantize" --pure "$M" "$Q" "$T" 2 >"$tmp/lq.log" 2>&1; then
      fail "llama-quantize $T: $(tail -n 2 "$tmp/lq.log")"; continue; fi
    if ! "$RUN" -m "$Q" -p "a1=p1 ?a1=" -n 2 --device cpu >/dev/null 2>"$tmp/run.err"; then
      if grep -q "is not supported" "$tmp/run.err"; then
        skip "tinygml does not read $T yet ($(grep -m1 -o "ggml type [0-9]* ([a-z0-9_]*) is not supported" "$tmp/run.err")): needs the quant branch"
      else
        fail "tinygml cannot load llama-quantize's $T file: $(tail -n 1 "$tmp/run.err")"
      fi
      continue
    fi
    llama_answers "$Q" "$tmp/ll.q$T.txt" || { fail "llama.cpp cannot run its own $T file"; continue; }
    tinygml_answers "$Q" "$tmp/tg.q$T.txt" || { fail "tinygml failed on llama-quantize's $T file"; continue; }
    compare "llama-quantize $T" "$tmp/tg.q$T.txt" "$tmp/ll.q$T.txt" 4
  done
fi
[ "$failed" -eq 0 ] && echo "llama_interop: all steps that ran passed" || echo "llama_interop: FAILURES above"
exit "$failed"
