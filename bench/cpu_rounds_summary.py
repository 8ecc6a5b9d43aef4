#!/usr/bin/env python3
# Medians of interleaved CPU rounds (the log of tinygml-bench-cpu --only mm.q runs, each after a line
# "### round R bench-cpu BUILD (load1 L, ...)", and bench/cpu_quant_rounds.sh lines); a BUILD path
# containing "q4-base" is "before", any other "after". Usage: bench/cpu_rounds_summary.py LOG
import re, statistics, sys
cur = None; mm = {}; models = {}; loads = []
for line in open(sys.argv[1]):
    m = re.match(r"### round (\d+) bench-cpu (\S+) \(load1 ([\d.]+)", line)
    if m:
        cur = "before" if "q4-base" in m.group(2) else "after"; loads.append(float(m.group(3))); continue
    m = re.match(r"threads 2; memcpy .*?, ([\d.]+) GB/s \(2 threads\)", line)
    if m: copy = float(m.group(1)); continue
    m = re.match(r"(mm\.\S+)\s+mul_mat .*?tokens(?:, weights rotated)?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
    if m:
        mm.setdefault((m.group(1), cur), []).append((float(m.group(2)), float(m.group(3)), float(m.group(4)), copy)); continue
    w = line.split()
    if line.startswith("round ") and "crashed" not in line:
        loads.append(float(w[-1]))
        if w[3].startswith("tinygml"):
            who = ("after" if "q4-base" not in w[3] else "before") + "/" + w[3].split("/")[-1]
            for i in (4, 6):
                models.setdefault((w[2], who, w[i]), []).append(float(w[i + 1]))
        else:
            models.setdefault((w[2], w[3], w[4]), []).append(float(w[5]))
med = statistics.median
print("load1 range %.2f-%.2f" % (min(loads), max(loads)))
for key in sorted(mm):
    v = mm[key]
    print("%-16s %-6s us med %.1f best-of-bests %.1f  GB/s(median us) %.1f  %%copy %.0f%%  (n=%d, copy med %.1f)" % (
        key[0], key[1], med([x[0] for x in v]), min(x[1] for x in v), med([x[2] for x in v]),
        100 * med([x[2] / x[3] for x in v]), len(v), med([x[3] for x in v])))
for key in sorted(models):
    v = models[key]
    print("%-5s %-22s %-5s %8.1f  (%s)" % (key[0], key[1], key[2], med(v), " ".join("%.0f" % x for x in v)))
