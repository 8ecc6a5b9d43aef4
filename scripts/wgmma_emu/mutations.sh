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
mut swizzle_r_plus1 T130_g0.2 "k('^ (r & 7)) << 4)', '^ ((r + 1) & 7)) << 4)')"
mut qs_jump_B_506 T64 "k('TG_WG_BLOCK(\"m64n32k8\", TG_ACC16, 506, 1018) TG_WG_BLOCK', 'TG_WG_BLOCK(\"m64n32k8\", TG_ACC16, 506, 506) TG_WG_BLOCK', 1)"
mut arow_swap T64 "k('8 * ((r >> 1) & 1); }', '8 * (r & 1); }')"
mut upd_first_overwrite T64 "k('TG_WG_HEAD(\"m64n64k8\", TG_ACC32, 32, 33, 1)', 'TG_WG_HEAD(\"m64n64k8\", TG_ACC32, 32, 33, 0)')"
mut no_barrier_2 T130_g0.2 "k('        __syncthreads();  // (2)', '        // (2)')"
mut no_fence_1 T64 "k('        proxy_fence();\n        __syncthreads();  // (1)', '        __syncthreads();  // (1)')"
mut no_fence_3 T130_g0.2 "k('        proxy_fence();\n        __syncthreads();  // (3)', '        __syncthreads();  // (3)')"
mut gates_before_phaseA T130_g0.2 "k('        const int flags = *sTab;\n', '        const int flags = *sTab;\n        if (warp == 0 && more) gates(gl, bl);\n')"
mut Kt_gla_no_beta T64 "k('sDl[t] * sB[t];', 'sDl[t];')"
mut P_mask_lt T64 "k('const float p0 = s <= t ?', 'const float p0 = s < t ?')"
mut misaligned_P T64 "k('*(float2 *)&at(oP, kC, t, s) = make_float2(p0, p1);', '*(float2 *)((char *)&at(oP, kC, t, s) + 4) = make_float2(p0, p1);')"
mut acc_in_flight T64 "k('        uint4 rv[M];\n        if (more) {', '        uint4 rv[M];\n        accQ[3] += 1e-30f;\n        if (more) {')"
mut decay_tab_bug T130_inf "c('return sZ[t] > s ? 0.0f : ep[t] * em[s];', 'return sZ[t] >= s ? 0.0f : ep[t] * em[s];')"
mut benign_gates_after_wait T130_g0.2 "k('            if (warp == 0) gates(gl, bl);\n            store_qk(0', '            store_qk(0'); k('        wg_wait0();\n        pin(accQ), pin(accS);', '        wg_wait0();\n        if (more && warp == 0) gates(gl, bl);\n        pin(accQ), pin(accS);')"
# delta_wg_kernel<DELTA> only (GATED_DELTA; gates_in_phaseA edits the GATED_LINEAR path)
mut no_barrier_1a gd_T64 "k('            __syncthreads();  // (1a)', '            // (1a)')"
mut no_fence_1b gd_T64 "k('            proxy_fence();\n            __syncthreads();  // (1b)', '            __syncthreads();  // (1b)')"
mut no_barrier_1c gd_T130_g0.2 "k('            __syncthreads();  // (1c)', '            // (1c)')"
mut R_no_beta gd_T64 "k('x = tf32r(sB[t] * (x - keep_zero_mul', 'x = tf32r(1.0f * (x - keep_zero_mul')"
mut T_tile_no_diag gd_T64 "k('make_float4(s0 <= t ? tf32r(x.x)', 'make_float4(s0 < t ? tf32r(x.x)')"
mut no_barrier_T_over_A gd_T64 "k('invert_unit_lower_doubling<kNT>(sAm, sTm);\n            __syncthreads();\n', 'invert_unit_lower_doubling<kNT>(sAm, sTm);\n')"
# the doubling's products on tensor cores (chunk_parts.cuh, session 55): the barrier between its two steps dropped,
# either __syncwarp before a step's second product (which reads the warp's own X) dropped, the last product reading
# T_11's block above the diagonal (the first step's X, not zeros) and the third reading T_00's (under gates of
# -0.1 a token those far blocks are damped below the 2e-3 tolerance: a case with weak gates and beta 1)
mut tri_no_barrier gd_T64 "c('    }\n    __syncthreads();\n    if (warp < 4) {\n        // 32 -> 64', '    }\n    if (warp < 4) {\n        // 32 -> 64')"
mut tri_no_syncwarp_first gd_T64 "c('        __syncwarp();  // (the warp\'s own X tile', '        // (the warp\'s own X tile')"
mut tri_no_syncwarp_last gd_T64 "c('        __syncwarp();  // (the warp\'s own X columns', '        // (the warp\'s own X columns')"
mut tri_last_reads_x gd_T64_weak "c('mma3_tile(sT + 32 * kPS + 32, sT + 32 + n8, 0, 2, d);', 'mma3_tile(sT + 32 * kPS + 32, sT + 32 + n8, 0, 4, d);')"
mut tri_third_reads_x gd_T64_weak "c('kb = n8 >= 16 ? 2 : 0;', 'kb = 0;')"
mut dT_at_oK gd_T64 "k('dT = sdesc(sb + oAf)', 'dT = sdesc(sb + oK)')"
mut Kt_keeps_beta gd_T64 "k('const float w = DELTA ? sDl[t] : sDl[t] * sB[t];', 'const float w = sDl[t] * sB[t];')"
mut T_tile_at_oQ gd_T64 "k('*(float4 *)(sm + oAf + sw(kC, t, s0)) =', '*(float4 *)(sm + oQ + sw(kC, t, s0)) =')"
mut T_desc_off gd_T64 "k('dT = sdesc(sb + oAf)', 'dT = sdesc(sb + oAf + 128)')"
mut gates_in_phaseA gl_T130_g0.2 "k('        if constexpr (!DELTA) p_and_qs();', '        if (warp == 0 && more) gates(gl, bl);\n        if constexpr (!DELTA) p_and_qs();')"
mut U_reads_other_rows gd_T64 "k('wg_pv(accR, dT, dVo);', 'wg_pv(accR, dT, sdesc(sb + oV + 32 * (wg ^ 1) * 128));')"
mut A_decay_off_by_one gd_T64 "k('sB[t] * accA[r + 1] * decay(t, s + 1)', 'sB[t] * accA[r + 1] * decay(t, s)')"
mut benign_A_diag_included gd_T64 "k('const float a0 = s < t ?', 'const float a0 = s <= t ?')"
mut benign_R_d0_plain_mul gd_T130_inf "k('x = tf32r(sB[t] * (x - keep_zero_mul(sD0[t], accR[r])));', 'x = tf32r(sB[t] * (x - sD0[t] * accR[r]));')"
# delta_wgb_kernel (its wgb_* runs joined in: TG_EMU_WGB=1 for these): a lost lo product must fail
# the BF16 kernel's near-F32 tier, a copy read before its wait or a wrong MN-major step its checks
# (wgb_no_P_lo: the P lo descriptor as the plain kernel wrote it, or as delta_wgb_kernel<DELTA> does)
export TG_EMU_WGB=1
mut wgb_no_P_lo wgb_gl_T130_g0.2 "p = '        wgb_pv(accQ, dPh + (bPl - bPh) / 16, dVb + bd);\n'; b(p if p in text['b'] else '        wgb_pv(accQ, dPh + kPl, dVb + bd);\n', '')"
mut wgb_no_cp_wait wgb_gl_T130_g0.2 "b('        cp_wait0();\n        proxy_fence();\n        __syncthreads();  // (2)', '        proxy_fence();\n        __syncthreads();  // (2)')"
mut wgb_pv_mn_step wgb_gl_T64 "p = 'TG_WB_3(\"m64n32k16\", TG_ACC16, 2, 128, 0, 1)'; (b if p in text['b'] else w)(p, 'TG_WB_3(\"m64n32k16\", TG_ACC16, 2, 64, 0, 1)')"
# delta_wgb_kernel<true> (GATED_DELTA on BF16 products; n/a on trees with the plain GATED_LINEAR-only
# kernel): U's lo tile lost in P U, barrier (1c) gone (Kw over the raw K and Q tiles while other
# warpgroups' Q K^T and Q S read them), R's hi at the wrong columns (8 on, in the warpgroup's own
# 32), T's tile without the diagonal of every fourth row; the benign one multiplies w's factors the
# other way round (the same F32 product)
mut wgb_gd_no_PU_lo wgb_gd_T64 "b('        if constexpr (DELTA) wgb_pv(accQ, dPh, dRlb);\n', '')"
mut wgb_gd_no_barrier_1c wgb_gd_T130_g0.2 "b('            __syncthreads();  // (1c)', '            // (1c)')"
mut wgb_gd_R_hi_column wgb_gd_T64 "b('*(uint32_t *)(vraw + off) = hi, *(uint32_t *)(sm + bRl + off) = lo;\n            }\n            __syncthreads();  // (1a)', '*(uint32_t *)(vraw + sw2(kC, t, 32 * wg + (acol(r) ^ 8))) = hi, *(uint32_t *)(sm + bRl + off) = lo;\n            }\n            __syncthreads();  // (1a)')"
mut wgb_gd_T_tile_no_diag wgb_gd_T64 "b('bf_split(s0 <= t ? x.x : 0.0f', 'bf_split(s0 < t ? x.x : 0.0f')"
mut wgb_gd_diag_no_syncwarp wgb_gd_T64 "b('                __syncwarp();\n                if (lane < 16) invert_diag16', '                if (lane < 16) invert_diag16')"
mut wgb_no_norm_barrier wgb_gl_T130_g0.2 "b('                norms(c);\n                __syncthreads();  // (3)\n            }\n        }', '                norms(c);\n            }\n        }')"
mut wgb_gd_write_q_in_flight wgb_gd_T130_g0.2 "b('            wg_commit();\n            wg_wait0();\n            pin(accQ), pin(accP), pin(accU);', '            wg_commit();\n            __syncthreads();\n            *(uint32_t *)(qraw + 16 * tid) = 0u;\n            wg_wait0();\n            pin(accQ), pin(accP), pin(accU);')"
mut wgb_gd_S_written_q_in_flight wgb_gd_T64 "b('            wg_wait1();\n            pin(accR), pin(accA);', '            wg_wait1();\n            pin(accR), pin(accA);\n            *(uint32_t *)(sm + bSh + 4 * tid) = 0u;')"
mut wgb_gd_accQ_in_flight wgb_gd_T64 "b('            wg_wait1();\n            pin(accR), pin(accA);', '            wg_wait1();\n            pin(accR), pin(accA);\n            accQ[0] += 1.0f;')"
mut wgb_by_mul_plain wgb_gl_T130_big_first "c('    if (fin) f([](float d, float x) { return d * x; });\n    else f(', '    f([](float d, float x) { return d * x; });\n    if (false) f(')"
mut benign_wgb_gd_w_commuted wgb_gd_T130_inf "b('const float w = DELTA ? sDl[t] * sNk[t] :', 'const float w = DELTA ? sNk[t] * sDl[t] :')"
# GATED_LINEAR's segment kernels (delta_wgb_seg_kernel<SEG>; n/a on trees without them): the prologue's gamma
# product dropped, the last earlier segment's state not added, a segment's decay left at 1, the call's state
# copied with one entry a thread zeroed (segment 0's output pass then starts from another state)
mut wgbseg_no_gamma wgbseg3_gl_T130_g0.2 "b('return x == 0.0f && !gnan ? 0.0f : gam * x;', 'return x;')"
mut wgbseg_no_last_state wgbseg3_gl_T130_g0.2 "b('for (int i = 1; i < sg; i++) {', 'for (int i = 1; i < sg - 1; i++) {')"
mut wgbseg_decay_one wgbseg3_gl_T130_g0.2 "b('gseg = keep_zero_mul(dl, gseg),', 'gseg = 1.0f,')"
mut wgbseg_no_state_copy wgbseg2_gl_T130_g0.2 "b('if (load_state) put_slot(a.nseg - 1);', 'if (load_state) { put_slot(a.nseg - 1); slot(a.nseg - 1)[tid % 8].x = 0.0f; }')"
# the combine's keep-zero rule on gamma's NaN instead of the NaN flag: a segment's decays inf, then 0 (gamma NaN,
# no decay NaN) turns the exact-zero entries before it NaN, where the walk keeps them zero
mut wgbseg_kz_on_gamma_nan wgbseg3_gl_T320_zero_v_mid "b('return x == 0.0f && !gnan ? 0.0f : gam * x;', 'return x == 0.0f && gam == gam ? 0.0f : gam * x;')"
# the BF16 kernels' gate arrays made beforehand (a.G; n/a on trees without it): one gate buffer (the next chunk's
# copy lands over the arrays being read), the wrong chunk's arrays copied, the copy issued after its group's commit
# (so cp.async.wait_group 0 does not wait for it)
mut wgbgate_one_buffer wgb_gl_T130_g0.2 "b('(PRE ? c * kGB : 0)', '0'); b('cp_gates(sb + bF<DELTA> + buf * kGB,', 'cp_gates(sb + bF<DELTA>,')"
mut wgbgate_wrong_chunk wgb_gd_T130_g0.2 "b('gu0 + c0 / kC);', 'gu0 + (c0 / kC + 1) % 3);')"
mut wgbgate_after_commit wgbseg2_gl_T130_g0.2 "b('        if (PRE) cp_gates(sb + bF<DELTA> + buf * kGB, a.G, gu0 + c0 / kC);\n        cp_commit();', '        cp_commit();\n        if (PRE) cp_gates(sb + bF<DELTA> + buf * kGB, a.G, gu0 + c0 / kC);')"
rmdir "$build/mut" 2>/dev/null

echo "mutations: $caught/$bugs planted bugs caught, $quiet/$benign benign rewrites not flagged, $na n/a (do not apply to this tree)"
[ $bad -eq 0 ]
