# ncu_sum.py RAW.csv SOURCE.csv...: stall reasons, key counters and the top stall lines of an ncu report
# exported as --page raw --csv and --page source --csv (session 41 device scripts).
import csv, sys, collections, re
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
h, u, v = rows[0], rows[1], rows[2]
st = []
for j, c in enumerate(h):
    if c.startswith("smsp__pcsamp_warps_issue_stalled_") and not c.endswith("_not_issued"):
        try: st.append((float(v[j].replace(",", "")), c[len("smsp__pcsamp_warps_issue_stalled_"):]))
        except: pass
tot = sum(x for x, _ in st) or 1
print("stalls:", ", ".join(f"{c} {100*x/tot:.1f}%" for x, c in sorted(st, reverse=True)[:12]))
for j, c in enumerate(h):
    if c in ("gpu__time_duration.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
             "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
             "smsp__inst_executed.sum", "launch__registers_per_thread",
             "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
             "smsp__issue_active.avg.pct_of_peak_sustained_active", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"):
        print(c, u[j], v[j])
for path in sys.argv[2:]:
    rr = list(csv.reader(open(path, errors="replace")))
    hi = None
    for i, r in enumerate(rr):
        if any("Warp Stall Sampling (All" in c for c in r): hi = i; break
    print("==", path, "rows", len(rr), "header at", hi)
    if hi is None:
        print(rr[:3]); continue
    H = rr[hi]; si = [j for j, c in enumerate(H) if "Warp Stall Sampling (All" in c][0]
    srcj = [j for j, c in enumerate(H) if c.lower() in ("source", "sass")]
    print("columns:", H[:8])
    ie = [j for j, c in enumerate(H) if c == "Instructions Executed"]
    by_op_i = collections.Counter(); itot = 0
    for r in rr[hi + 1:]:
        if not ie or len(r) <= ie[0]: continue
        try: x = float(r[ie[0]].replace(",", ""))
        except: continue
        itot += x
        txt = r[srcj[0]] if srcj else r[1]
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_.]+)", txt)
        by_op_i[(m.group(2).split(".")[0] if m else txt[:12])] += x
    print("instructions executed (warp level):", itot, "by opcode:", ", ".join(f"{k} {100*x/(itot or 1):.1f}%" for k, x in by_op_i.most_common(18)))
    by_op = collections.Counter(); by_line = collections.Counter(); total = 0
    for r in rr[hi + 1:]:
        if len(r) <= si: continue
        try: x = float(r[si].replace(",", ""))
        except: continue
        total += x
        txt = r[srcj[0]] if srcj else r[1]
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_.]+)", txt)
        by_op[(m.group(2).split(".")[0] if m else txt[:12])] += x
        by_line[(r[0], txt.strip()[:110])] += x
    total = total or 1
    print("by opcode:", ", ".join(f"{k} {100*x/total:.1f}%" for k, x in by_op.most_common(14)))
    for (a, t), x in by_line.most_common(45): print(f"{100*x/total:5.1f}%  {a[:8]:>8}  {t}")
