#!/usr/bin/env python3
"""Where a graph-replayed decode step's time goes, from a kernel trace (issue 30).

usage: ktrace_step.py CSV [--layers N] [--top K] [--skip S] [--graph ID] [--split-after NAME]
                          [--width W] [--json FILE]

CSV (or CSV.gz): tools/gpu/kernel_trace.c's rows (G4_KTRACE_OUT of `g4cu generate ... --backend cuda` or bench
run with LD_PRELOAD=libg4ktrace.so): one row per kernel with its in-situ start and end (ns).

Steps: the kernels of the graph with the most kernel records (the decode step's graph; --graph
picks another), sorted by start, cut into launches where a graph node id repeats: each kernel
node runs once per launch, so a node seen again starts the next launch. This does not rely on
how CUPTI numbers the correlation ids of graph kernels (the number of distinct ids a step is
printed as a check: one cudaGraphLaunch, 1 expected). A trace without graph kernels (eager
steps) can be cut with --split-after NAME (a step ends with each kernel of that short name).
The first --skip steps are dropped (warm-up), then the steps whose kernel-name sequence is not
the most common one (a cut-off last launch, another path) are left out and counted.

Per kernel i of a step (sorted by start; times in us):
  dur   = end_i - start_i (in situ: under PDL it includes the wait for the previous kernel)
  gap   = start_i - end_{i-1} (negative: it started before its predecessor ended)
  idle  = max(0, start_i - F_{i-1})             the bubble with no kernel running before it
  crit  = max(0, end_i - max(F_{i-1}, start_i)) how far it pushes the step's end beyond F
  with F_{i-1} = max(end_0 .. end_{i-1}) (= end_{i-1} while ends increase, the usual case).
  The step's wall (first start to last end) = sum over its kernels of idle + crit exactly, so
  "us/step" (idle + crit) and "share" attribute the whole wall time.

Layers: the step's name sequence divided at a marker kernel. N (the number of layers) is
--layers, else the count a step shared by the most distinct kernel names (ties: the larger
count; a guess: where layers differ, e.g. E2B's sliding / full attention kernels, 28 + 7, pass
--layers). Per-layer names: those occurring a multiple of N times a step (k N: k a layer); the
marker is the per-layer name that comes first, and layer j runs from its (j k)-th occurrence to
the next layer's; the last layer ends at the last per-layer kernel. Before the first marker is
the prefix (embedding, PLE rows), after the last layer the suffix (final norm, lm_head,
sampler). Layers with different kernel sequences are listed as kinds. No per-layer name: no
layer table (the rest is printed).
Python 3 stdlib only.
"""
import argparse, collections, csv, gzip, json, statistics, sys


def short_name(name):
    """'void ns::k<4, true>(float const*, int)' -> 'ns::k<4, true>' (template arguments kept:
    they tell the variants apart)."""
    s = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    if s.startswith("void "):
        s = s[5:]
    depth = 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            return s[:i]
    return s


def read_trace(path):
    kernels, mem = [], []
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as f:
        for r in csv.DictReader(f):
            rec = {"kind": r["kind"], "start": int(r["start_ns"]), "end": int(r["end_ns"]),
                   "graph": int(r["graph_id"]), "node": int(r["graph_node_id"]),
                   "corr": int(r["correlation_id"]), "stream": int(r["stream_id"])}
            if r["kind"] == "kernel":
                rec["name"] = short_name(r["name"])
                rec["full"] = r["name"]
                rec["grid"] = [int(r[k]) for k in ("grid_x", "grid_y", "grid_z")]
                rec["block"] = [int(r[k]) for k in ("block_x", "block_y", "block_z")]
                rec["smem"] = int(r["static_smem"]) + int(r["dynamic_smem"])
                rec["regs"] = int(r["registers"])
                kernels.append(rec)
            else:
                rec["name"] = r["name"]
                mem.append(rec)
    return kernels, mem


def order(ks):
    return sorted(ks, key=lambda k: (k["start"], k["end"], k["node"]))


def graph_steps(kernels, graph):
    """(graph id, launches): the chosen graph's kernels cut where a node id repeats."""
    counts = collections.Counter(k["graph"] for k in kernels if k["graph"] != 0)
    if not counts:
        return None, []
    if graph is None:
        graph = max(counts, key=lambda g: (counts[g], -g))
    elif graph not in counts:
        sys.exit(f"ktrace_step: no kernel of graph {graph} (graphs: {sorted(counts)})")
    steps, cur, seen = [], [], set()
    for k in order(k for k in kernels if k["graph"] == graph):
        if k["node"] in seen:
            steps.append(cur)
            cur, seen = [], set()
        cur.append(k)
        seen.add(k["node"])
    if cur:
        steps.append(cur)
    return graph, steps


def eager_steps(kernels, name):
    steps, cur = [], []
    for k in order(k for k in kernels if k["graph"] == 0):
        cur.append(k)
        if k["name"] == name:
            steps.append(cur)
            cur = []
    return steps  # (kernels after the last NAME: not a whole step)


def step_rows(step):
    """Per kernel (dur, gap, idle, crit) in ns, and the step's wall; sum(idle + crit) == wall."""
    rows, front, prev_end = [], None, None
    for k in step:
        dur = k["end"] - k["start"]
        gap = None if prev_end is None else k["start"] - prev_end
        if front is None:
            idle, crit, front = 0, dur, k["end"]
        else:
            idle = max(0, k["start"] - front)
            crit = max(0, k["end"] - max(front, k["start"]))
            front = max(front, k["end"])
        prev_end = k["end"]
        rows.append((dur, gap, idle, crit))
    return rows, front - step[0]["start"]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def us(ns):
    return None if ns is None else ns / 1000.0


def detect_layers(names, n_layers):
    """(N, marker, k, [(lo, hi) per layer], prefix end, suffix start), or a str: why not."""
    cnt = collections.Counter(names)
    if n_layers is None:
        by = collections.Counter(c for c in cnt.values() if c > 1)
        if not by:
            return "no kernel name occurs more than once a step"
        n_layers = max(by, key=lambda c: (by[c], c))
    per_layer = [n for n in cnt if cnt[n] % n_layers == 0]
    if not per_layer:
        return (f"no kernel name occurs a multiple of {n_layers} times a step "
                f"(counts: {sorted(set(cnt.values()))})")
    first = {n: names.index(n) for n in cnt}
    marker = min(per_layer, key=lambda n: first[n])
    k = cnt[marker] // n_layers
    starts = [i for i, n in enumerate(names) if n == marker][::k]
    last = max(i for i, n in enumerate(names) if n in per_layer)
    bounds = [(starts[j], starts[j + 1]) for j in range(len(starts) - 1)]
    bounds.append((starts[-1], last + 1))
    return n_layers, marker, k, bounds, starts[0], last + 1


def class_table(positions, pos_stats, per):
    """Per name over the given positions, in order of first appearance: count / per, means."""
    by = collections.OrderedDict()
    for i in positions:
        by.setdefault(pos_stats[i]["name"], []).append(i)
    out = []
    for name, idx in by.items():
        st = [pos_stats[i] for i in idx]
        out.append({"name": name, "count": len(idx) / per,
                    "dur_us": mean(s["dur_us"] for s in st),
                    "gap_us": mean(s["gap_us"] for s in st),
                    "idle_us": mean(s["idle_us"] for s in st),
                    "crit_us": mean(s["crit_us"] for s in st),
                    "dur_sum_us": sum(s["dur_us"] for s in st) / per,
                    "attrib_us": sum(s["idle_us"] + s["crit_us"] for s in st) / per})
    return out


def fmt(x, w=8, p=2):
    return f"{'-':>{w}}" if x is None else f"{x:{w}.{p}f}"


def print_classes(title, rows, total, width):
    print(f"{title:{width}s} {'n':>5s} {'dur us':>8s} {'gap us':>8s} {'idle us':>8s} "
          f"{'crit us':>8s} {'us/' + ('step' if 'step' in title else 'layer'):>9s} {'share':>6s}")
    for r in rows:
        n = r["count"]
        cnt = f"{int(n):5d}" if n == int(n) else f"{n:5.2f}"
        print(f"  {r['name'][:width - 2]:{width - 2}s} {cnt} {fmt(r['dur_us'])} {fmt(r['gap_us'])} "
              f"{fmt(r['idle_us'])} {fmt(r['crit_us'])} {fmt(r['attrib_us'], 9)} "
              f"{100 * r['attrib_us'] / total:5.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, help="layers a step (default: detected)")
    ap.add_argument("--top", type=int, default=10, help="positions that extend the step most")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps dropped (default 2)")
    ap.add_argument("--graph", type=int, help="graph id (default: the one with most kernels)")
    ap.add_argument("--split-after", metavar="NAME", help="eager trace: a step ends with NAME")
    ap.add_argument("--width", type=int, default=48, help="name column width")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()

    kernels, mem = read_trace(a.csv)
    if not kernels:
        sys.exit(f"ktrace_step: no kernel rows in {a.csv}")
    if a.split_after:
        graph, steps, how = None, eager_steps(kernels, a.split_after), f"eager, split after {a.split_after}"
    else:
        graph, steps = graph_steps(kernels, a.graph)
        how = f"graph {graph}"
        if graph is None:
            sys.exit("ktrace_step: no graph-launched kernel in the trace (eager steps: --split-after NAME)")
    launches = len(steps)
    steps = steps[a.skip:]
    if not steps:
        sys.exit(f"ktrace_step: {launches} steps, none left after --skip {a.skip}")
    sigs = collections.Counter(tuple(k["name"] for k in s) for s in steps)
    sig = max(sigs, key=lambda s: (sigs[s], len(s)))
    other = len(steps) - sigs[sig]
    steps = [s for s in steps if tuple(k["name"] for k in s) == sig]
    names, nk = list(sig), len(sig)

    per_step = [step_rows(s) for s in steps]
    walls = [w for _, w in per_step]
    pos = []
    for i in range(nk):
        col = [rows[i] for rows, _ in per_step]
        k0 = steps[0][i]
        pos.append({"index": i, "name": names[i],
                    "dur_us": us(mean(c[0] for c in col)), "gap_us": us(mean(c[1] for c in col)),
                    "idle_us": us(mean(c[2] for c in col)), "crit_us": us(mean(c[3] for c in col)),
                    "grid": k0["grid"], "block": k0["block"], "smem": k0["smem"], "regs": k0["regs"]})
    wall_mean = us(mean(walls))
    starts = [s[0]["start"] for s in steps]
    period = [b - a_ for a_, b in zip(starts, starts[1:])]
    between = [s2[0]["start"] - max(k["end"] for k in s1) for s1, s2 in zip(steps, steps[1:])]
    corr = mean(len({k["corr"] for k in s}) for s in steps)
    # host copies between a step's last kernel and the next step's first (staged inputs, token)
    ends = [(max(k["end"] for k in s1), s2[0]["start"]) for s1, s2 in zip(steps, steps[1:])]
    copies = collections.Counter()
    for m in mem:
        for lo, hi in ends:
            if lo <= m["start"] < hi:
                copies[m["name"]] += 1
    res = {"trace": a.csv, "steps_from": how, "graph_id": graph, "launches": launches,
           "skipped": a.skip, "steps": len(steps), "other_sequence": other,
           "kernels_per_step": nk, "correlation_ids_per_step": corr,
           "wall_us": {"mean": wall_mean, "median": us(statistics.median(walls)),
                       "min": us(min(walls)), "max": us(max(walls))},
           "period_us": {"mean": us(mean(period)), "median": us(statistics.median(period))}
           if period else None,
           "between_us": {"mean": us(mean(between)), "median": us(statistics.median(between))}
           if between else None,
           "copies_between_steps": {k: v / len(ends) for k, v in copies.items()} if ends else {},
           "dur_sum_us": sum(p["dur_us"] for p in pos), "positions": pos}
    res["kernels"] = class_table(range(nk), pos, 1)

    print(f"ktrace_step: {how}: {launches} launches, {a.skip} dropped (warm-up), {len(steps)} steps "
          f"of {nk} kernels ({other} with another kernel sequence left out; "
          f"{corr:g} correlation id(s) a step)")
    print(f"step wall (first start to last end): mean {wall_mean:.1f} us, median "
          f"{res['wall_us']['median']:.1f} us (min {res['wall_us']['min']:.1f}, max "
          f"{res['wall_us']['max']:.1f}); sum of in-situ durations {res['dur_sum_us']:.1f} us")
    if period:
        cp = ", ".join(f"{v:g} {k}" for k, v in sorted(res["copies_between_steps"].items()))
        print(f"step period (start to next start): mean {res['period_us']['mean']:.1f} us, median "
              f"{res['period_us']['median']:.1f} us; between steps (no kernel): mean "
              f"{res['between_us']['mean']:.1f} us{' (' + cp + ' a gap)' if cp else ''}")
    print()
    print_classes("per kernel name, a step", res["kernels"], wall_mean, a.width)

    lay = detect_layers(names, a.layers)
    if isinstance(lay, str):
        print(f"\nlayers: none ({lay})")
        lay = None
    if lay:
        n, marker, k, bounds, pre_end, suf_start = lay
        def seg_us(lo, hi):
            return sum(pos[i]["idle_us"] + pos[i]["crit_us"] for i in range(lo, hi))
        def seg_span(lo, hi):
            return us(mean(max(s[i]["end"] for i in range(lo, hi)) - s[lo]["start"] for s in steps))
        layer_us = [seg_us(lo, hi) for lo, hi in bounds]
        kinds = collections.OrderedDict()
        for j, (lo, hi) in enumerate(bounds):
            kinds.setdefault(tuple(names[lo:hi]), []).append(j)
        lpos = [i for lo, hi in bounds for i in range(lo, hi)]
        res["layers"] = {
            "n": n, "marker": marker, "marker_per_layer": k, "detected": a.layers is None,
            "prefix": {"kernels": pre_end, "us": seg_us(0, pre_end)},
            "suffix": {"kernels": nk - suf_start, "us": seg_us(suf_start, nk)},
            "layer_us": {"mean": mean(layer_us), "min": min(layer_us), "max": max(layer_us)},
            "span_us": mean(seg_span(lo, hi) for lo, hi in bounds),
            "per_layer_us": layer_us,
            "kinds": [{"layers": js, "kernels": len(k), "us": mean(layer_us[j] for j in js)}
                      for k, js in kinds.items()],
            "kernels": class_table(lpos, pos, n)}
        L = res["layers"]
        print()
        every = f"every {k}th {marker}" if k > 1 else f"a {marker}"
        print(f"layers: {n} ({'detected' if a.layers is None else '--layers'}; each from {every} "
              f"to the next); prefix {pre_end} kernels {L['prefix']['us']:.1f} us, "
              f"suffix {L['suffix']['kernels']} kernels {L['suffix']['us']:.1f} us")
        print(f"a layer: mean {L['layer_us']['mean']:.2f} us of the wall (min "
              f"{L['layer_us']['min']:.2f}, max {L['layer_us']['max']:.2f}), first start to last "
              f"end {L['span_us']:.2f} us; {n} layers = {sum(layer_us):.1f} us of {wall_mean:.1f}")
        for kd in L["kinds"]:
            js = kd["layers"]
            shown = ",".join(map(str, js[:12])) + (",..." if len(js) > 12 else "")
            print(f"  kind of {kd['kernels']} kernels: {len(js)} layers ({shown}), "
                  f"{kd['us']:.2f} us each")
        print_classes("per kernel name, a layer", L["kernels"], L["layer_us"]["mean"], a.width)

    if a.top > 0:
        layer_of = {}
        if lay:
            for j, (lo, hi) in enumerate(lay[3]):
                for i in range(lo, hi):
                    layer_of[i] = j
        top = sorted(pos, key=lambda p: -(p["idle_us"] + p["crit_us"]))[:a.top]
        print()
        print(f"the {len(top)} kernels that extend the step most (position, layer, grid x block):")
        for p in top:
            ly = layer_of.get(p["index"], "-")
            g = "x".join(map(str, p["grid"])) + " x " + "x".join(map(str, p["block"]))
            print(f"  #{p['index']:<4d} L{ly!s:3s} {p['name'][:a.width - 2]:{a.width - 2}s} dur "
                  f"{p['dur_us']:7.2f} gap {fmt(p['gap_us'], 7)} idle {p['idle_us']:6.2f} crit "
                  f"{p['crit_us']:7.2f}  {g}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
