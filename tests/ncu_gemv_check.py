#!/usr/bin/env python3
"""tools/gpu/ncu_gemv.py on synthetic Nsight Compute csv files whose answers are known."""
import csv, io, os, subprocess, sys, tempfile

SRC = os.environ.get("G4_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TOOL = os.path.join(SRC, "tools", "gpu", "ncu_gemv.py")
HDR = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
       "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
       "Metric Value"]
S = "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio"


def launch(w, i, name, grid, block, us_ns, dram_mb, stalls):
    m = [("gpu__time_duration.sum", "nsecond", f"{us_ns:,}"),
         ("dram__bytes_read.sum", "Mbyte", str(dram_mb)),
         ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "41.5"),
         ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "30"),
         ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "25"),
         ("smsp__issue_active.avg.pct_of_peak_sustained_active", "%", "44"),
         ("smsp__inst_executed.sum", "inst", "2,000,000"),
         ("launch__registers_per_thread", "register/thread", "128"),
         ("launch__grid_size", "", str(grid)), ("launch__block_size", "", str(block))]
    m += [(S % r, "", str(v)) for r, v in stalls.items()]
    for name_, unit, val in m:
        w.writerow([i, 1, "g4cu", "h", name, 1, 7, f"({block}, 1, 1)", f"({grid}, 1, 1)", 0, "9.0",
                    "s", name_, unit, val])


def csvfile(d, fname, rows):
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(HDR)
    for r in rows:
        launch(w, *r)
    p = os.path.join(d, fname)
    with open(p, "w") as f:
        f.write("==PROF== Connected to process 1\n" + buf.getvalue())
    return p


fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


with tempfile.TemporaryDirectory() as d:
    st1 = {"long_scoreboard": 3.5, "wait": 0.5, "math_pipe_throttle": 1.25, "barrier": 0.1}
    k1 = "void g4k::<unnamed>::gemv_q4_v3_kernel<2, 1, 4, false>(void *, const __half *)"
    k2 = "void (anonymous namespace)::gemv_f16_mma_kernel<8>(int)"
    a = csvfile(d, "ncu_gemv_gate_up.csv", [
        (0, k1, 132, 256, 10000, 22, st1), (1, k1, 132, 256, 12000, 22, st1),
        (2, k1, 264, 256, 5000, 5, st1),  # another grid: a new run
        (3, k2, 96, 256, 4000, 8, {"wait": 2.0, "selected": 1.0})])
    b = csvfile(d, "ncu_gemv_empty.csv", [])
    r = subprocess.run([sys.executable, TOOL, a], capture_output=True, text=True)
    out = r.stdout
    lines = [l for l in out.splitlines() if l.startswith("  ")]
    check(r.returncode == 0, f"exit 0 on a good file (got {r.returncode}: {r.stderr.strip()})")
    check("gate_up: 3 kernel runs" in out, "three runs (grid change splits one kernel)")
    check(len(lines) == 3, f"three kernel lines (got {len(lines)})")
    l0 = lines[0] if lines else ""
    check("gemv_q4_v3_kernel<2,1,4,false>" in l0 and "unnamed" not in l0 and "g4k" not in l0,
          "name shortened to the identifier and template arguments")
    check("132x256" in l0 and "n2 " in l0, "grid x block and two launches in the first run")
    check("11.00 us" in l0, "mean duration 11 us of 10 and 12")
    check("22.00 MB" in l0 and " 2000 GB/s" in l0, "22 MB over 11 us = 2000 GB/s")
    check("stalls long_scoreboard 3.50, math_pipe_throttle 1.25, wait 0.50" in l0,
          "the three largest stalls in order")
    check(len(lines) > 2 and "gemv_f16_mma_kernel<8>" in lines[2] and " 2000 GB/s" in lines[2],
          "anonymous namespace dropped; 8 MB / 4 us")
    r = subprocess.run([sys.executable, TOOL, b], capture_output=True, text=True)
    check(r.returncode == 1 and "no kernel rows" in r.stdout, "exit 1 on a file without kernels")
    r = subprocess.run([sys.executable, TOOL], capture_output=True, text=True)
    check(r.returncode != 0, "no arguments: usage, non-zero exit")
print(f"ncu_gemv_check: {fails} failed")
sys.exit(1 if fails else 0)
