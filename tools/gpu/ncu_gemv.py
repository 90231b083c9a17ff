#!/usr/bin/env python3
"""Summarises Nsight Compute csv files of the GEMV kernels (run.sh stage ncu_gemv).

usage: ncu_gemv.py NCU_GEMV_SHAPE.csv ...   (ncu --csv --metrics ... --log-file FILE)

ncu's csv has one line per (launch, metric). For each file (one bench shape) this prints one line
per run of consecutive launches of the same kernel and launch shape (a bench row replays its
kernel several times): the kernel, grid x block, registers, launches, then the mean over the run
of the duration, the DRAM read rate (bytes / duration) and its % of peak, SM throughput %,
achieved occupancy %, issue-slot use %, instructions issued a launch, and the three largest warp
stall reasons (stalled warps per issued instruction, ncu's ratio).
"""
import csv, os, re, sys

STALL = "smsp__average_warps_issue_stalled_"


def read(path):
    """{launch id: {"name", metric: float}} in launch order."""
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    out = {}
    for r in csv.DictReader(lines):
        i = int(r["ID"])
        k = out.setdefault(i, {"name": r["Kernel Name"]})
        v = r["Metric Value"].replace(",", "")
        try:
            x = float(v)
        except ValueError:
            continue
        unit = r.get("Metric Unit", "")
        if r["Metric Name"] == "gpu__time_duration.sum":  # to microseconds
            x = x / 1000.0 if unit.startswith("n") else x * 1000.0 if unit.startswith("m") else x
        if r["Metric Name"] == "dram__bytes_read.sum":
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
                     "GB": 1e9}
            x *= scale.get(unit, 1)
        k[r["Metric Name"]] = x
    return [out[i] for i in sorted(out)]


def short(name):
    """The kernel's identifier and template arguments, without namespaces, `void` or parameters."""
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)
    name = re.sub(r"^void\s+", "", name)
    name = re.sub(r"^(\w+::)+", "", name)
    return name.split("(", 1)[0].replace(" ", "")


def runs(launches):
    """Consecutive launches of one kernel and launch shape, as lists."""
    out = []
    for k in launches:
        key = (short(k["name"]), k.get("launch__grid_size"), k.get("launch__block_size"))
        if out and out[-1][0] == key:
            out[-1][1].append(k)
        else:
            out.append((key, [k]))
    return out


def mean(ks, m):
    v = [k[m] for k in ks if m in k]
    return sum(v) / len(v) if v else float("nan")


def summarise(path):
    lines = []
    for (name, grid, block), ks in runs(read(path)):
        us = mean(ks, "gpu__time_duration.sum")
        dram = mean(ks, "dram__bytes_read.sum")
        stalls = sorted(((mean(ks, m), m[len(STALL):].replace("_per_issue_active.ratio", ""))
                         for m in ks[0] if m.startswith(STALL)), reverse=True)[:3]
        lines.append(
            f"  {name[:44]:44s} {int(grid or 0):6d}x{int(block or 0):<4d} reg {int(mean(ks, 'launch__registers_per_thread')):3d}"
            f" n{len(ks):<3d} {us:8.2f} us  dram {dram / 1e6:7.2f} MB {dram / us / 1e3 if us else 0:7.0f} GB/s"
            f" ({mean(ks, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):4.1f}%)"
            f"  sm {mean(ks, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'):4.1f}%"
            f"  occ {mean(ks, 'sm__warps_active.avg.pct_of_peak_sustained_active'):4.1f}%"
            f"  issue {mean(ks, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):4.1f}%"
            f"  inst {mean(ks, 'smsp__inst_executed.sum') / 1e6:6.2f} M"
            f"  stalls " + ", ".join(f"{n} {v:.2f}" for v, n in stalls))
    return lines


def main(paths):
    if not paths:
        sys.exit("usage: ncu_gemv.py NCU.csv ...")
    bad = 0
    for p in paths:
        shape = os.path.basename(p).replace("ncu_gemv_", "").replace(".csv", "")
        try:
            lines = summarise(p)
        except (OSError, KeyError, ValueError) as e:
            print(f"{shape}: unreadable ({e})")
            bad += 1
            continue
        print(f"{shape}: {len(lines)} kernel runs" if lines else f"{shape}: no kernel rows")
        print("\n".join(lines))
        bad += not lines
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
