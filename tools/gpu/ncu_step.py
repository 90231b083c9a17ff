#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration of the last decode step's kernels by kernel name.

usage: ncu_step.py NCU.csv   (ncu --csv --metrics gpu__time_duration.sum --log-file NCU.csv)
The last full step: the kernels between the last two launches of the sampler's last kernel.
"""
import collections, csv, sys

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    us = v / 1000.0 if unit.startswith("n") else v if unit.startswith("u") else v * 1000.0
    name = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = name[5:] if name.startswith("void ") else name
    rows.append((int(r["ID"]), name.split("(")[0].split("<")[0], us))
rows.sort()
if not rows:
    sys.exit("no kernel rows")
# a step ends with the sampler's last kernel (lg_select, else lg_pass1): take the kernels
# between the last two of them
mark = "lg_select" if any(n == "lg_select" for _, n, _ in rows) else "lg_pass1"
ends = [i for i, (_, n, _) in enumerate(rows) if n == mark]
lo, hi = (ends[-2] + 1, ends[-1] + 1) if len(ends) >= 2 else (0, len(rows))
step = rows[lo:hi]
by = collections.defaultdict(lambda: [0, 0.0])
for _, n, us in step:
    by[n][0] += 1
    by[n][1] += us
tot = sum(us for _, _, us in step)
print(f"last step: {len(step)} kernels, sum of their own durations {tot:.1f} us "
      f"({len(rows)} kernels profiled, {len(ends)} sampler launches)")
for n, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"  {n:60s} {c:4d} x {us / c:7.2f} us = {us:8.1f} us")
