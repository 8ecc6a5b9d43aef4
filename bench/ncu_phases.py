#!/usr/bin/env python3
"""bench/ncu_phases.py CSV WARPS - a kernel's executed instructions and stall samples by stretch.

CSV is the output of `ncu --set full --page source --print-source sass --csv ...` for one launch
(tinygml-run under ncu, as bench/NOTES.md session 60 ran it); WARPS is the launch's warp count
(blocks x threads / 32). The SASS is cut after every executed barrier (BAR.SYNC, BAR.RED), the
programmatic-dependent-launch trigger (PREEXIT) and wait (ACQBULK), and every EXIT; each stretch
prints its executed warp instructions per warp and its warp-stall samples (all samples, issued or
not). Nothing here is a test.
"""
import csv
import sys


def num(x):
    x = x.replace(",", "")
    try:
        return float(x)
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, warps = sys.argv[1], float(sys.argv[2])
    lines = open(path).read().splitlines()
    head = [k for k, line in enumerate(lines) if line.startswith('"Address","Source"')]
    if not head:
        sys.exit(f"{path}: no SASS source table (ncu --page source --print-source sass --csv)")
    rows = list(csv.reader(lines[head[0]:]))
    hdr = rows[0]
    rows = [r for r in rows[1:] if len(r) == len(hdr)]
    col = {h: k for k, h in enumerate(hdr)}
    ie_col, st_col = col["Instructions Executed"], col["Warp Stall Sampling (All Samples)"]
    total_i = total_s = acc_i = acc_s = 0.0
    for r in rows:
        ie, st = num(r[ie_col]), num(r[st_col])
        acc_i += ie
        acc_s += st
        src = r[1].strip()
        if ie > 0 and any(k in src for k in ("ACQBULK", "BAR.SYNC", "BAR.RED", "EXIT")):
            print(f"{r[0][-5:]} {src[:45]:45s} instr/warp {acc_i / warps:7.1f} samples {acc_s:5.0f}")
            total_i += acc_i
            total_s += acc_s
            acc_i = acc_s = 0.0
    total_i += acc_i
    total_s += acc_s
    print(f"{'total':51s} instr/warp {total_i / warps:7.1f} samples {total_s:5.0f}")


if __name__ == "__main__":
    main()
