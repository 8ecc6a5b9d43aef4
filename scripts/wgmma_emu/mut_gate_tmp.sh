#!/usr/bin/env bash
# mutations.sh - the emulator's own test: each mutation below edits a copy of SRC's kernel
# (cuda/sm90a/delta_rule_chunked_wg.cu; delta_rule_chunked_wgb.cu for b(), cuda/chunk_parts.cuh for
# c(), cuda/sm90a/wgmma.cuh for w()), builds the emulator on it and runs the cases matching its filter. A planted bug must be caught (a mismatch or a finding,
# exit 1); a benign_* rewrite (same results, no new hazard) must not be. A mutation whose text is
# not in this tree is reported n/a. Run by `make mutations`; SRC and BUILD as for the Makefile.
# EDITS may also read text['k'], text['b'], text['c'], text['w'] (the files' current text) to choose an edit.
# Logs: BUILD/mutations/NAME.log. Exit 1 if a bug was missed, a benign rewrite flagged or a
# mutated copy did not build.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
src="$(cd "${SRC:-$root}" && pwd)"
build="${BUILD:-$root/build-wgmma-emu}"
kernel=cuda/sm90a/delta_rule_chunked_wg.cu
kernel_b=cuda/sm90a/delta_rule_chunked_wgb.cu
logs="$build/mutations"
# the mutations edit delta_wg_kernel: delta_wgb_kernel (the BF16 kernel) is left out of
# their builds unless TG_EMU_WGB=1 (then its wgb_* runs join the filters' cases)
export TG_EMU_WGB="${TG_EMU_WGB:-0}"
mkdir -p "$logs"
caught=0 bugs=0 quiet=0 benign=0 na=0 bad=0

# mut NAME FILTER EDITS: EDITS are Python calls k(old, new[, count]) on the TF32 kernel's file,
# b(...) on the BF16 kernel's, c(...) on chunk_parts.cuh and w(...) on wgmma.cuh; the mutation applies only if every old
# text is found
mut() {
    local name=$1 filter=$2 edits=$3 m="$build/mut/$1" log="$logs/$1.log"
    rm -rf "$m"
    mkdir -p "$m/src/cuda/sm90a"
    cp "$src"/cuda/*.cuh "$m/src/cuda/"
    cp "$src"/cuda/sm90a/* "$m/src/cuda/sm90a/"
    ln -s "$src/src" "$m/src/src"
    if ! python3 - "$m/src/$kernel" "$m/src/cuda/chunk_parts.cuh" "$m/src/$kernel_b" "$edits" "$m/src/cuda/sm90a/wgmma.cuh" <<'PY'; then
import sys
import os
files = {'k': sys.argv[1], 'c': sys.argv[2], 'b': sys.argv[3], 'w': sys.argv[5]}
text = {f: open(p).read() if os.path.exists(p) else '' for f, p in files.items()}
def edit(f, old, new, count=-1):
    if old not in text[f]:
        sys.exit(3)
    text[f] = text[f].replace(old, new, count)
def k(old, new, count=-1): edit('k', old, new, count)
def c(old, new, count=-1): edit('c', old, new, count)
def b(old, new, count=-1): edit('b', old, new, count)
def w(old, new, count=-1): edit('w', old, new, count)
exec(sys.argv[4])
for f, p in files.items():
    if text[f] or os.path.exists(p):
        open(p, 'w').write(text[f])
PY
        printf "%-26s n/a (does not apply to this tree)\n" "$name"
        na=$((na + 1))
        rm -rf "$m"
        return
    fi
    if ! make -s -C "$here" SRC="$m/src" BUILD="$build" KBUILD="$m/build" "$m/build/emu" >"$log" 2>&1; then
        printf "%-26s BUILD FAILED (%s)\n" "$name" "$log"
        bad=$((bad + 1))
        return
    fi
    "$m/build/emu" "$filter" >>"$log" 2>&1
    local rc=$?
    local mm nf kinds what
    mm=$(grep -c MISMATCH "$log")
    nf=$(grep -c "FINDING \[" "$log")
    kinds=$(grep "FINDING \[" "$log" | sed 's/.*x\] //' | sort -u | head -2 | paste -sd ';' -)
    rm -rf "$m"
    what=$(printf "mismatches %2d  findings %3d" "$mm" "$nf")
    [ -n "$kinds" ] && what="$what  $kinds"
    if [[ $name == benign_* ]]; then
        benign=$((benign + 1))
        if [ $rc -eq 0 ]; then quiet=$((quiet + 1)); printf "%-26s not flagged (benign)\n" "$name"
        else bad=$((bad + 1)); printf "%-26s FLAGGED, rc %d: %s\n" "$name" $rc "$what"; fi
    else
        bugs=$((bugs + 1))
        if [ $rc -eq 1 ]; then caught=$((caught + 1)); printf "%-26s caught: %s\n" "$name" "$what"
        elif [ $rc -eq 0 ] || [ $rc -eq 2 ]; then bad=$((bad + 1)); printf "%-26s MISSED (rc %d)\n" "$name" $rc
        else caught=$((caught + 1)); printf "%-26s caught: the emulator stopped, rc %d (%s)\n" "$name" $rc "$log"; fi
    fi
}

echo "mutations of $src (filters pick the cases; each builds the emulator once)"
# shared by both kernel versions
# delta_wg_kernel<DELTA> only (GATED_DELTA; gates_in_phaseA edits the GATED_LINEAR path)
# delta_wgb_kernel (its wgb_* runs joined in: TG_EMU_WGB=1 for these): a lost lo product must fail
# the BF16 kernel's near-F32 tier, a copy read before its wait or a wrong MN-major step its checks
# (wgb_no_P_lo: the P lo descriptor as the plain kernel wrote it, or as delta_wgb_kernel<DELTA> does)
export TG_EMU_WGB=1
# delta_wgb_kernel<true> (GATED_DELTA on BF16 products; n/a on trees with the plain GATED_LINEAR-only
# kernel): U's lo tile lost in P U, barrier (1c) gone (Kw over the raw K and Q tiles while other
# warpgroups' Q K^T and Q S read them), R's hi at the wrong columns (8 on, in the warpgroup's own
# 32), T's tile without the diagonal of every fourth row; the benign one multiplies w's factors the
# other way round (the same F32 product)
# GATED_LINEAR's segment kernels (delta_wgb_seg_kernel<SEG>; n/a on trees without them): the prologue's gamma
# product dropped, the last earlier segment's state not added, a segment's decay left at 1, the call's state
# copied with one entry a thread zeroed (segment 0's output pass then starts from another state)
# the combine's keep-zero rule on gamma's NaN instead of the NaN flag: a segment's decays inf, then 0 (gamma NaN,
# no decay NaN) turns the exact-zero entries before it NaN, where the walk keeps them zero
# the BF16 kernels' gate arrays made beforehand (a.G; n/a on trees without it): one gate buffer (the next chunk's
# copy lands over the arrays being read), the wrong chunk's arrays copied, the copy issued after its group's commit
# (so cp.async.wait_group 0 does not wait for it)
mut wgbgate_one_buffer wgb_gl_T130_g0.2 "b('(PRE ? c * kGB : 0)', '0'); b('cp_gates(sb + bF<DELTA> + buf * kGB,', 'cp_gates(sb + bF<DELTA>,')"
mut wgbgate_wrong_chunk wgb_gd_T130_g0.2 "b('gu0 + c0 / kC);', 'gu0 + (c0 / kC + 1) % 3);')"
mut wgbgate_after_commit wgbseg2_gl_T130_g0.2 "b('        if (pre) cp_gates(sb + bF<DELTA> + buf * kGB, a.G, gu0 + c0 / kC);\n        cp_commit();', '        cp_commit();\n        if (pre) cp_gates(sb + bF<DELTA> + buf * kGB, a.G, gu0 + c0 / kC);')"
rmdir "$build/mut" 2>/dev/null

echo "mutations: $caught/$bugs planted bugs caught, $quiet/$benign benign rewrites not flagged, $na n/a (do not apply to this tree)"
[ $bad -eq 0 ]
