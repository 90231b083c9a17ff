#!/usr/bin/env python3
"""tools/python/ktrace_step.py on a synthetic trace whose answers are known by construction
(run by tests/test_ktrace_step.sh). Python 3 stdlib only.

The decode graph (id 7): 5 launches of 8 kernels, 100 us apart; per launch (ns from its start):
  emb [0, 1000]  then 2 layers of  A [+500 after the previous end, 2000 long]
  B [1000 before A's end, 3000 long]  C [at B's end, 1500 long],  then S [+200, 4000 long]
  = emb 0-1000, A 1500-3500, B 2500-5500, C 5500-7000, A 7500-9500, B 8500-11500,
  C 11500-13000, S 13200-17200: wall 17.2 us; per kernel idle + crit = 1, 2.5, 2, 1.5, 2.5, 2,
  1.5, 4.2 us (sum 17.2). Launch 0 (warm-up) has every duration doubled, launch 3's S is 7000
  long (wall 20.2 us), launch 4 is cut off after 3 kernels. Also: another graph (id 9, one
  launch of 2 kernels), eager kernels (graph 0: 3 steps p1, p2, p3, sample), host copies between
  launches, the rows shuffled.
"""
import csv, gzip, importlib.util, json, os, random, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "python", "ktrace_step.py")
COLS = ("kind,name,start_ns,end_ns,correlation_id,graph_id,graph_node_id,stream_id,device_id,"
        "grid_x,grid_y,grid_z,block_x,block_y,block_z,cluster_x,cluster_y,cluster_z,static_smem,"
        "dynamic_smem,registers,bytes,mangled").split(",")
EMB = "void g4k::emb_kernel(int const*, float*)"
A = "void gemv<4, true>(float const*, int)"   # commas and a template: the short name keeps <..>
B = "(anonymous namespace)::attn(float*)"
C = 'void add_norm<"x">(float*, float const*)'  # a quote inside the name: CSV escaping
S = "sample"
fails = 0


def row(kind, name, start, end, corr, graph, node, grid=(1, 1, 1), bytes_=0):
    r = dict.fromkeys(COLS, 0)
    r.update(kind=kind, name=name, start_ns=start, end_ns=end, correlation_id=corr,
             graph_id=graph, graph_node_id=node, stream_id=13, device_id=0, grid_x=grid[0],
             grid_y=grid[1], grid_z=grid[2], block_x=128, block_y=1, block_z=1,
             bytes=bytes_, mangled="_Z" + str(len(name)))
    return r


def decode_launch(j, t0, n_kernels=8):
    k = 2 if j == 0 else 1
    plan = [(EMB, 0, 1000)]  # (name, gap after the previous end, duration)
    for _ in range(2):
        plan += [(A, 500, 2000), (B, -1000, 3000), (C, 0, 1500)]
    plan.append((S, 200, 7000 if j == 3 else 4000))
    rows, end = [], None
    for node, (name, gap, dur) in enumerate(plan[:n_kernels]):
        start = t0 if end is None else end + k * gap
        end = start + k * dur
        rows.append(row("kernel", name, start, end, 500 + j, 7, 101 + node, grid=(node + 1, 2, 1)))
    return rows


def make_trace(path):
    rows = []
    for j in range(3):  # eager steps at 10 us apart
        t0 = 10_000 * j
        rows += [row("kernel", "void p1(int)", t0, t0 + 1000, 10 + 3 * j, 0, 0),
                 row("kernel", "void p2(int)", t0 + 1200, t0 + 2200, 11 + 3 * j, 0, 0),
                 row("kernel", "void p3(int)", t0 + 1400, t0 + 1800, 11 + 3 * j, 0, 0),
                 row("kernel", S, t0 + 2200, t0 + 3000, 12 + 3 * j, 0, 0)]
    for j in range(5):
        t0 = 1_000_000 + 100_000 * j
        ks = decode_launch(j, t0, 3 if j == 4 else 8)
        rows += ks
        end = max(int(k["end_ns"]) for k in ks)
        rows.append(row("memcpy", "[memcpy HtoD]", t0 - 3000, t0 - 2500, 900 + j, 0, 0, bytes_=16))
        rows.append(row("memcpy", "[memcpy DtoH]", end + 1000, end + 1400, 950 + j, 0, 0, bytes_=4))
    rows += [row("kernel", "void other(int)", 2_000_000, 2_001_000, 77, 9, 1),
             row("kernel", "void other(int)", 2_001_000, 2_002_000, 77, 9, 2)]
    random.Random(5).shuffle(rows)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLS, quoting=csv.QUOTE_NONNUMERIC)
        w.writeheader()
        w.writerows(rows)


def check(what, got, want):
    global fails
    ok = (got is None and want is None) if want is None or got is None else (
        abs(got - want) < 1e-9 if isinstance(want, float) else got == want)
    if not ok:
        fails += 1
        print(f"FAIL {what}: got {got!r}, want {want!r}")
    return ok


def run(args, expect_rc=0):
    p = subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)
    if p.returncode != expect_rc:
        global fails
        fails += 1
        print(f"FAIL ktrace_step.py {' '.join(args)}: exit {p.returncode}, want {expect_rc}\n"
              f"{p.stdout}{p.stderr}")
        if expect_rc == 0:
            sys.exit(f"test_ktrace_step: {fails} failed")
    return p


def main():
    tmp = tempfile.mkdtemp()
    csv_path, js = os.path.join(tmp, "k.csv"), os.path.join(tmp, "k.json")
    make_trace(csv_path)
    p = run([csv_path, "--skip", "1", "--top", "3", "--json", js])
    print(p.stdout, end="")
    r = json.load(open(js))
    check("graph", r["graph_id"], 7)
    check("launches", r["launches"], 5)
    check("steps", r["steps"], 3)
    check("other_sequence", r["other_sequence"], 1)
    check("kernels_per_step", r["kernels_per_step"], 8)
    check("correlation ids a step", r["correlation_ids_per_step"], 1.0)
    check("wall mean", r["wall_us"]["mean"], 18.2)
    check("wall median", r["wall_us"]["median"], 17.2)
    check("wall max", r["wall_us"]["max"], 20.2)
    check("period", r["period_us"]["mean"], 100.0)
    check("between", r["between_us"]["mean"], 82.8)
    check("copies", r["copies_between_steps"], {"[memcpy DtoH]": 1.0, "[memcpy HtoD]": 1.0})
    check("dur sum", r["dur_sum_us"], 19.0)  # 1 + 2 (2 + 3 + 1.5) + mean S 5
    want = [  # name, count, dur, gap, idle, crit, attrib a step
        ("g4k::emb_kernel", 1, 1.0, None, 0.0, 1.0, 1.0),
        ("gemv<4, true>", 2, 2.0, 0.5, 0.5, 2.0, 5.0),
        ("attn", 2, 3.0, -1.0, 0.0, 2.0, 4.0),
        ('add_norm<"x">', 2, 1.5, 0.0, 0.0, 1.5, 3.0),
        ("sample", 1, 5.0, 0.2, 0.2, 5.0, 5.2)]
    check("kernel classes", [k["name"] for k in r["kernels"]], [w[0] for w in want])
    for k, w in zip(r["kernels"], want):
        for key, v in zip(("count", "dur_us", "gap_us", "idle_us", "crit_us", "attrib_us"), w[1:]):
            check(f"{w[0]} {key}", k[key], None if v is None else float(v))
    check("attribution sums to the wall", sum(k["attrib_us"] for k in r["kernels"]), 18.2)
    L = r["layers"]
    check("layers", L["n"], 2)
    check("detected", L["detected"], True)
    check("marker", (L["marker"], L["marker_per_layer"]), ("gemv<4, true>", 1))
    check("prefix", (L["prefix"]["kernels"], L["prefix"]["us"]), (1, 1.0))
    check("suffix kernels", L["suffix"]["kernels"], 1)
    check("suffix us", L["suffix"]["us"], 5.2)
    check("per layer", L["per_layer_us"], [6.0, 6.0])
    check("layer span", L["span_us"], 5.5)
    check("kinds", L["kinds"], [{"layers": [0, 1], "kernels": 3, "us": 6.0}])
    lw = [("gemv<4, true>", 1.0, 2.5), ("attn", 1.0, 2.0), ('add_norm<"x">', 1.0, 1.5)]
    check("layer classes", [(k["name"], k["count"], k["attrib_us"]) for k in L["kernels"]], lw)
    check("grid of #3", r["positions"][3]["grid"], [4, 2, 1])
    for line in ("#7    L-   sample", "#1    L0   gemv<4, true>", "#4    L1   gemv<4, true>"):
        if line not in p.stdout:
            check(f"top line '{line}'", "missing", "present")
    # the same trace gzipped reads the same
    with open(csv_path, "rb") as f, gzip.open(csv_path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    run([csv_path + ".gz", "--skip", "1", "--json", js])
    check(".gz wall", json.load(open(js))["wall_us"]["mean"], 18.2)
    # --layers 2 gives the same division; --layers 3 has no name occurring 3 times: an error
    run([csv_path, "--skip", "1", "--layers", "2", "--json", js])
    check("--layers 2", json.load(open(js))["layers"]["per_layer_us"], [6.0, 6.0])
    e = run([csv_path, "--skip", "1", "--layers", "3", "--json", js])
    check("--layers 3 message", "no kernel name occurs a multiple of 3 times" in e.stdout, True)
    check("--layers 3: no layers", "layers" in json.load(open(js)), False)
    # a marker twice a layer: the division at every 2nd occurrence of the first per-layer name
    spec = importlib.util.spec_from_file_location("ktrace_step", TOOL)
    ks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ks)
    seq = ["e", "g", "a", "g", "n", "g", "a", "g", "n", "s"]
    check("detect_layers k = 2", ks.detect_layers(seq, 2), (2, "g", 2, [(1, 5), (5, 9)], 1, 9))
    check("detect_layers auto", ks.detect_layers(seq, None), (2, "g", 2, [(1, 5), (5, 9)], 1, 9))
    check("detect_layers none", ks.detect_layers(["x", "y"], None),
          "no kernel name occurs more than once a step")
    # default --skip 2: the warm-up and launch 1 dropped, 2 steps left (walls 17.2, 20.2)
    run([csv_path, "--json", js])
    r2 = json.load(open(js))
    check("default skip steps", r2["steps"], 2)
    check("default skip wall", r2["wall_us"]["mean"], 18.7)
    # --graph 9: one launch of 2 kernels, nothing left after the default --skip
    e = run([csv_path, "--graph", "9"], expect_rc=1)
    check("--graph 9 message", "none left after --skip 2" in e.stderr, True)
    # the eager kernels cut after each `sample`: 3 steps of p1 [0,1], p2 [1.2,2.2], p3 [1.4,1.8]
    # (inside p2: it extends nothing, and sample's bubble is measured from p2's end, not p3's)
    run([csv_path, "--split-after", "sample", "--skip", "0", "--json", js])
    r3 = json.load(open(js))
    check("eager steps", (r3["steps"], r3["kernels_per_step"]), (3, 4))
    check("eager wall", r3["wall_us"]["mean"], 3.0)
    k3 = {k["name"]: k for k in r3["kernels"]}
    check("eager p2 gap / idle", (k3["p2"]["gap_us"], k3["p2"]["idle_us"]), (0.2, 0.2))
    check("eager p3 gap / idle + crit", (k3["p3"]["gap_us"], k3["p3"]["attrib_us"]), (-0.8, 0.0))
    check("eager sample gap / idle / crit",
          (k3["sample"]["gap_us"], k3["sample"]["idle_us"], k3["sample"]["crit_us"]), (0.4, 0.0, 0.8))
    check("eager attribution sums to the wall", sum(k["attrib_us"] for k in r3["kernels"]), 3.0)
    check("eager: no layers", "layers" in r3, False)
    print(f"test_ktrace_step: {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
