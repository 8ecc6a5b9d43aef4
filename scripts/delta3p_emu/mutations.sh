#!/bin/bash
# mutations.sh - the emulator's own test: each mutation edits a copy of SRC's cuda/ (and takes src/ as it
# is), builds the emulator on it and runs the cases its filter names; a planted bug must be reported (a
# mismatch, a hazard or a deadlock: emu exits 1), a benign rewrite must pass. Logs: BUILD/mutations/.
# Env: SRC (tree), BUILD (the emulator's build folder; emu_rt.o already there); MUTS="name ..." runs only those
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${SRC:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$(cd "$HERE/../.." && pwd)/build-delta3p-emu}
OUT=$BUILD/mutations
mkdir -p "$OUT"
fail=0
# name | expect (bug / ok) | file under cuda/ | python literal old | python literal new | case filter
run() {
    local name=$1 expect=$2 file=$3 old=$4 new=$5 filt=$6
    if [ -n "${MUTS:-}" ] && [[ " $MUTS " != *" $name "* ]]; then return; fi
    local tree=$OUT/$name/tree kb=$OUT/$name/build
    rm -rf "$OUT/$name"
    mkdir -p "$tree"
    cp -r "$SRC/cuda" "$tree/cuda"
    ln -s "$SRC/src" "$tree/src"
    if ! python3 - "$tree/cuda/$file" "$old" "$new" <<'PY'
import sys
p, old, new = sys.argv[1], eval(sys.argv[2]), eval(sys.argv[3])
s = open(p).read()
if s.count(old) != 1:
    sys.exit(3)
open(p, 'w').write(s.replace(old, new))
PY
    then
        printf '%-34s n/a (text not found once in cuda/%s)\n' "$name" "$file"
        return
    fi
    if ! make -s -C "$HERE" -j2 SRC="$tree" BUILD="$BUILD" KBUILD="$kb" "$kb/emu" >"$OUT/$name.build.log" 2>&1; then
        printf '%-34s BUILD FAILED (%s)\n' "$name" "$OUT/$name.build.log"
        fail=1
        return
    fi
    "$kb/emu" "$filt" >"$OUT/$name.log" 2>&1
    local rc=$?
    local what
    what=$(grep -m1 -oE "FINDING \[[0-9]+ x\] [^:(]*" "$OUT/$name.log" | sed "s/FINDING \[[0-9]* x\] //" | cut -c1-90)
    [ -z "$what" ] && what=$(grep -m1 -o MISMATCH "$OUT/$name.log")
    if [ "$expect" = bug ]; then
        if [ $rc -eq 1 ]; then printf '%-34s caught: %s\n' "$name" "${what:-exit 1}"
        else printf '%-34s MISSED (exit %d; %s)\n' "$name" $rc "$OUT/$name.log"; fail=1; fi
    else
        if [ $rc -eq 0 ]; then printf '%-34s passes (benign)\n' "$name"
        else printf '%-34s FLAGGED a benign rewrite (%s)\n' "$name" "$OUT/$name.log"; fail=1; fi
    fi
    rm -rf "$tree" "$kb/gen"
}
# the state pass: the chunk loop's first barrier (buffer landed, sS of chunk c - 1 in place)
run state_no_first_barrier bug delta_rule_state_pass.cu \
    "'        __syncthreads();  // chunk c\\'s buffer and sS'" "'        // (removed)  // chunk c\\'s buffer and sS'" T130_bv16
# ... its second barrier made conditional away (V' complete, reads of sS done)
run state_no_second_barrier bug delta_rule_state_pass.cu \
    "'if (DELTA || FO) __syncthreads();'" "'if (DELTA && !FO) __syncthreads();'" T130_bv16
# ... the same on s2 trees (GATED_DELTA keeps the barrier; n/a elsewhere)
run state_no_second_barrier_s2 bug delta_rule_state_pass.cu \
    "'if (DELTA || (FO && !s2)) __syncthreads();'" "'if (DELTA && !FO) __syncthreads();'" gd_T130_bv16
# the mbarrier wait before a chunk's bulk-copied rows are read
run state_no_mbar_wait bug delta_rule_state_pass.cu \
    "'mbar_wait(&full[c % NB], (unsigned)(c / NB) & 1u);'" "'(void)full;'" T130_bv16
# the wrong parity: waits for the phase that has not come (deadlock) or passes too early
run state_mbar_parity bug delta_rule_state_pass.cu \
    "'(unsigned)(c / NB) & 1u)'" "'(unsigned)(c / NB + 1) & 1u)'" gd_T130_bv16
# the next chunk's copies issued before the barrier that ends the reads of that buffer
run state_issue_before_barrier bug delta_rule_state_pass.cu \
    "'        __syncthreads();  // chunk c\\'s buffer and sS (written at the end of chunk c - 1) are in place\n        // the buffer of chunk c + NB - 1 was chunk c - 1\\'s: every warp is past it\n        if (c + NB - 1 < a.NC) issue(c + NB - 1);'" \
    "'        if (c + NB - 1 < a.NC) issue(c + NB - 1);\n        __syncthreads();'" T200_bv
# an ldmatrix A fragment's k half 4 columns off (chunk_mma.cuh; 8 bytes: a misaligned row address)
run mma_lda16_k_off bug chunk_mma.cuh \
    "'const __half *p = base + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3);'" \
    "'const __half *p = base + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 2);'" T130_bv16
# ... its rows g and g + 8 swapped in the k0 fragment (aligned, wrong values: a mismatch)
run mma_lda16_rows_swapped bug chunk_mma.cuh \
    "'f0.x[0] = h16_lo(r[0]), f0.x[1] = h16_lo(r[1]), f0.x[2] = h16_hi(r[0]), f0.x[3] = h16_hi(r[1]);'" \
    "'f0.x[0] = h16_lo(r[1]), f0.x[1] = h16_lo(r[0]), f0.x[2] = h16_hi(r[1]), f0.x[3] = h16_hi(r[0]);'" T130_bv16
# the prep: the barrier after the norms and row maxima
run prep_no_norm_barrier bug sm90a/delta_rule_prep_wgb.cu \
    "'    }\n    __syncthreads();\n    const int flags = *sTab;'" "'    }\n    const int flags = *sTab;'" T130_bv16
# the prep: the proxy fence before the wgmmas read the cp.async tiles
run prep_no_proxy_fence bug sm90a/delta_rule_prep_wgb.cu \
    "'    cp_wait0();\n    proxy_fence();\n    __syncthreads();\n\n    // 1:'" "'    cp_wait0();\n    __syncthreads();\n\n    // 1:'" T130_bv16
# the gates kernel (gate_unit): the __syncwarp before the warp copies its gate arrays out
run gates_no_syncwarp bug delta_rule_phases.cuh \
    "'    __syncwarp();\n    for (int i = lane; i < kGateWords; i += 32) g[i] = s[i];'" "'    for (int i = lane; i < kGateWords; i += 32) g[i] = s[i];'" T130_bv16
# s2 trees (bench/results/state2-vd-s48.diff; n/a elsewhere): the state warps write the next state into
# the copy the output warps read in this chunk
run s2_same_copy bug delta_rule_state_pass.cu \
    "'float *const sSn = sS + (s2 && !(c & 1) ? DK * VS : 0);'" "'float *const sSn = sS + (s2 && (c & 1) ? DK * VS : 0);'" gl_T130_bv16
# ... the same on trees whose state copies are SSZ floats each (the transposed copy, session 49)
run s2_same_copy_ssz bug delta_rule_state_pass.cu \
    "'float *const sSn = sS + (s2 && !(c & 1) ? SSZ : 0);'" "'float *const sSn = sS + (s2 && (c & 1) ? SSZ : 0);'" gl_T130_bv16
# results/gla-balanced-warps-s49.diff's trees: warps 8-15 take the same state columns as warps 0-7 (n/a elsewhere)
run bal_same_state_tiles bug delta_rule_state_pass.cu \
    "'return 8 * (BAL ? (tid >> 8) + 2 * r : r);'" "'return 8 * (BAL ? 2 * r : r);'" gl_T130_bv32
# benign: a second identical barrier after the first one in the state pass's chunk loop
run benign_state_extra_barrier ok delta_rule_state_pass.cu \
    "'        __syncthreads();  // chunk c\\'s buffer and sS'" "'        __syncthreads();\n        __syncthreads();  // chunk c\\'s buffer and sS'" T130_bv16
exit $fail
