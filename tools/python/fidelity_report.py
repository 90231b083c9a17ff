#!/usr/bin/env python3
"""Writes FIDELITY.md from the `g4cu perplexity --json` results of the fidelity stage
(tools/gpu/run.sh fidelity_run): perplexity of the f16 package and of each Q4 variant on the
proxy's held-out text, KL-divergence statistics and top-1 agreement against f16, decoder bytes;
the same for the full-size random E2B when its results exist.

    python3 tools/python/fidelity_report.py DIR OUT.md

DIR holds train.json (train_proxy.py), corpus.json (prepare_corpus.py) and, per model M
(proxy, e2b) and variant V (f16, q4, ...), M_V.json (g4cu perplexity --json) and M_V.bytes (the
decoder's model.onnx.data size); M_sens.md (g4cu compare --sensitivity --md) and M_layers.svg
are linked when present; M_linerr.json (g4cu compare --linear-error --json: each linear's
layer-output error in each package) gives "Which linears each method helps"; NAME.dwq.log
(run.sh fid_dwq's output-KL fits) the fits' steps. Standard library only.

    python3 tools/python/fidelity_report.py --linerr LINERR.json   (that section alone, to stdout)
    python3 tools/python/fidelity_report.py --dwq DIR|LOG...   (the fits' table from NAME.dwq.log
                                                                files, a DIR's *.dwq.log; same)
"""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(d, model):
    rows = []
    base = load(os.path.join(d, f"{model}_f16.json"))
    if not base:
        return [f"(no results for {model})", ""]
    fb = int(open(os.path.join(d, f"{model}_f16.bytes")).read().split()[0])
    rows.append(f"ctx {base['ctx']}, {base['chunks']} chunks, {base['scored_tokens']} scored "
                f"tokens, backend {base['backend']}")
    rows.append("")
    rows.append("| variant | decoder bytes | vs f16 | PPL | mean KLD | median KLD | 99% KLD | "
                "same top p | RMS dp |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows.append(f"| f16 | {fb:,} | 1.000 | {base['ppl']:.4f} +/- {base['ppl_stderr']:.4f} | "
                "- | - | - | - | - |")
    variants = sorted(os.path.basename(p)[len(model) + 1:-5]
                      for p in glob.glob(os.path.join(d, f"{model}_*.json")))
    for v in [v for v in variants if v != "f16"]:
        r = load(os.path.join(d, f"{model}_{v}.json"))
        if not r or "kld_mean" not in r:
            continue
        try:
            b = int(open(os.path.join(d, f"{model}_{v}.bytes")).read().split()[0])
        except OSError:
            b = 0
        rows.append(f"| {v} | {b:,} | {b / fb:.3f} | {r['ppl']:.4f} +/- {r['ppl_stderr']:.4f} | "
                    f"{r['kld_mean']:.5f} +/- {r['kld_mean_stderr']:.5f} | "
                    f"{r['kld_median']:.5f} | {r['kld_p99']:.5f} | "
                    f"{100 * r['same_top']:.2f} % | {100 * r['rms_dp']:.3f} % |")
    rows.append("")
    return rows


def fmt_ratio(s):
    if s is None or s.get("geo_ratio") is None:
        return "kept" if s and s.get("kept") == s.get("linears") else "-"
    return f"{s['geo_ratio']:.3f}"


def linerr_section(le, top=12):
    """Markdown lines from a `g4cu compare --linear-error --json` object: per package, by kind,
    by layer (geometric mean of e / e_base over the linears quantized in both) and the linears
    with the most error in the baseline."""
    pk = le["packages"]
    base = pk[0]["name"]
    L = ["Which linears each method helps (`g4cu compare --linear-error`): each decoder linear's "
         "layer-output error on the calibration tokens, e = tr(dW^T H dW) / tr(W^T H W) with "
         "H = X^T X of the f16 model's inputs to it (the loss gptq and fit minimise); "
         f"{len(le['linears'])} linears, {le['calib_tokens']} tokens, ratios against {base} "
         f"(geometric mean of e / e_{base} over the linears quantized in both; below: linears "
         f"with e under {base}'s; kept: stored fp16).", "",
         "| package | kept | mean e | e / e_base | below |", "|---|---:|---:|---:|---:|"]
    for p in pk:
        a = p["all"]
        L.append(f"| {p['name']} | {a['kept']} | {a['mean_e']:.3e} | {fmt_ratio(a)} | "
                 f"{a['below']}/{a['linears']} |")
    kinds = list(pk[0]["by_kind"])
    L += ["", "By kind (e / e_base):", "",
          "| kind | " + " | ".join(p["name"] for p in pk[1:]) + " |",
          "|---|" + "---:|" * (len(pk) - 1)]
    for k in kinds:
        L.append(f"| {k} | " + " | ".join(fmt_ratio(p["by_kind"][k]) for p in pk[1:]) + " |")
    L += ["", "By layer (e / e_base; lm_head is -1):", "",
          "| layer | " + " | ".join(p["name"] for p in pk[1:]) + " |",
          "|---:|" + "---:|" * (len(pk) - 1)]
    for l in pk[0]["by_layer"]:
        L.append(f"| {l} | " + " | ".join(fmt_ratio(p["by_layer"][l]) for p in pk[1:]) + " |")
    rows = sorted(le["linears"], key=lambda r: -(r["e"][0] or 0))[:top]
    L += ["", f"The {len(rows)} linears with the most error in {base} (e_{base}; the others: "
          "e / e_base, kept when stored fp16):", "",
          f"| linear | K x N | e_{base} | " + " | ".join(p["name"] for p in pk[1:]) + " |",
          "|---|---|---:|" + "---:|" * (len(pk) - 1)]
    for r in rows:
        cells = []
        for i in range(1, len(pk)):
            if r["kept"][i]:
                cells.append("kept")
            elif r["e"][0] and r["e"][i] is not None:
                cells.append(f"{r['e'][i] / r['e'][0]:.3f}")
            else:
                cells.append("-")
        L.append(f"| {r['name'].replace('.weight_t', '')} | {r['K']} x {r['N']} | "
                 f"{r['e'][0]:.3e} | " + " | ".join(cells) + " |")
    L.append("")
    return L


def dwq_fit_row(name, path):
    """One row of the fits' table from a dwq_fit.py log (run.sh fid_dwq: NAME.dwq.log): the steps
    made, why the fit stopped, the step kept, seconds a step, the validation KL's change and the
    CPU cores its steps used (dwq_fit.py's "the steps used" line; else the whole process's
    (user + system) / wall, from the `time` line run.sh adds)."""
    steps, sps, stop, kept, val, cores = "-", "-", "ran to --steps", "-", "-", "-"
    steps_cores = None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return None
    for ln in lines:
        m = re.match(r"dwq_fit: step (\d+)/\d+ .*\(([0-9.]+) s/step\)", ln)
        if m:
            steps, sps = m.group(1), m.group(2)
        m = re.match(r"dwq_fit: (.*?)(?: after \d+/\d+ steps)?: stopping$", ln)
        if m:
            stop = m.group(1)
        m = re.match(r"dwq_fit: kept the scales of step (\d+) of", ln)
        if m:
            kept = m.group(1)
        m = re.search(r"validation KL [0-9.]+ -> [0-9.]+ \(([-+0-9.]+%)\)", ln)
        if m:
            val = m.group(1)
        m = re.match(r"dwq_fit: process ([0-9.]+) s wall, ([0-9.]+) s user, ([0-9.]+) s system", ln)
        if m and float(m.group(1)) > 0 and steps_cores is None:
            cores = f"{(float(m.group(2)) + float(m.group(3))) / float(m.group(1)):.1f}"
        m = re.match(r"dwq_fit: the steps used [0-9.]+ CPU s in [0-9.]+ s \(([0-9.]+) cores\)", ln)
        if m:  # the steps' own CPU, without the loading and tokenizing: preferred
            steps_cores = cores = f"{float(m.group(1)):.1f}"
    if steps == "-":
        return f"| {name} | - | no step logged (see {os.path.basename(path)}) | - | - | - | - |"
    return f"| {name} | {steps} | {stop} | {kept} | {sps} | {val} | {cores} |"


def dwq_section(paths):
    """The output-KL fits' steps (run.sh fid_dwq) from NAME.dwq.log files (a directory: its
    *.dwq.log): time-capped, so a machine busy with the quantizations beside them (FID_OVERLAP)
    shows here as fewer steps or more s/step."""
    logs = []
    for p in paths:
        logs += sorted(glob.glob(os.path.join(p, "*.dwq.log"))) if os.path.isdir(p) else [p]
    rows = [r for r in (dwq_fit_row(os.path.basename(p)[:-len(".dwq.log")], p) for p in logs)
            if r]
    if not rows:
        return []
    return ["The output-KL fits (tools/python/dwq_fit.py, side by side; their logs: "
            "NAME.dwq.log): steps made, why each stopped, the step whose scales were kept, "
            "seconds a step, the validation KL's change and the cores its steps used (CPU "
            "seconds / wall seconds of the steps; else of the whole process).", "",
            "| fit | steps | stopped by | kept step | s/step | validation KL | cores |",
            "|---|---:|---|---:|---:|---:|---:|"] + rows + [""]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--linerr":
        le = load(sys.argv[2])
        if not le:
            sys.exit(f"fidelity_report: {sys.argv[2]}: not a --linear-error JSON")
        print("\n".join(linerr_section(le)))
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "--dwq":
        sec = dwq_section(sys.argv[2:])
        if not sec:
            sys.exit(f"fidelity_report: no dwq_fit.py log in {' '.join(sys.argv[2:])}")
        print("\n".join(sec))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, out = sys.argv[1], sys.argv[2]
    tr = load(os.path.join(d, "train.json")) or {}
    co = load(os.path.join(d, "corpus.json")) or {}
    L = ["# Quantization fidelity on learned weights (issue 19)", "",
         "Made by `tools/gpu/run.sh fidelity_bg fidelity_wait fidelity_run` (pipeline.sh: `train` ... "
         "`fidelity_measure`) "
         "(tools/python/fidelity_report.py). Statistics in llama-perplexity's definitions "
         "(eval/ppl.h): chunks of ctx tokens, each scored on its second half; KLD(f16 || Q4) "
         "per scored token; same top p = argmax agreement; dp = change in the probability of the "
         "correct token.", ""]
    L += ["## The trained proxy", ""]
    if tr:
        s = tr.get("shapes", {})
        L.append(f"train_proxy.py --preset {tr.get('preset')} --seed {tr.get('seed')}: "
                 f"{tr.get('parameters', 0):,} parameters ({tr.get('text_parameters', 0):,} in "
                 f"the text model), hidden {s.get('hidden')}, {s.get('layers')} layers, head_dim "
                 f"{s.get('head_dim')}/{s.get('global_hd')}, PLE {s.get('ple')}, vocab "
                 f"{s.get('vocab')}; {tr.get('steps')} steps"
                 + (f" (stopped at {tr['stopped_at']} by --minutes)" if tr.get("stopped_at")
                    else "")
                 + f" of {s.get('batch')} x {s.get('seq')} tokens on {tr.get('device')} in "
                 f"{tr.get('seconds', {}).get('train', 0):.0f} s; held-out loss "
                 f"{tr.get('held_out_loss', 0):.3f}.")
        L.append("")
    if co:
        L.append(f"Corpus: Debian package `{co.get('package')}` {co.get('version')} "
                 f"({co.get('license')}): the Python documentation's reST sources, split by "
                 f"document ({len(co.get('documents', {}).get('train', []))} train, "
                 f"{len(co.get('documents', {}).get('test', []))} held out).")
        L.append("")
    L += table(d, "proxy")
    L += dwq_section([d])
    for name, title in (("proxy_layers.svg", "Per-layer error of plain Q4 vs f16 (proxy)"),
                        ("proxy_sens.md", "Sensitivity ranking (proxy, g4cu compare "
                         "--sensitivity)")):
        if os.path.exists(os.path.join(d, name)):
            L += [f"{title}: [{name}]({name})", ""]
    sens = load(os.path.join(d, "proxy_sens.json"))
    if sens and sens.get("sensitivity"):
        rows = [r for r in sens["sensitivity"] if r.get("evaluated")]
        by_kind, by_layer = {}, {}
        for r in rows:
            by_kind.setdefault(r["kind"], []).append(r["kl_mean"])
            by_layer.setdefault(r["layer"], 0.0)
            by_layer[r["layer"]] = max(by_layer[r["layer"]], r["layer_kl"])
        L += ["Which kinds of linears hurt most (each linear quantized alone; KL(f16 || one Q4) "
              f"on {len(sens.get('ids', []))} held-out tokens):", "",
              "| kind | linears | mean KL | max KL |", "|---|---:|---:|---:|"]
        for k, v in sorted(by_kind.items(), key=lambda kv: -sum(kv[1]) / len(kv[1])):
            L.append(f"| {k} | {len(v)} | {sum(v) / len(v):.3e} | {max(v):.3e} |")
        L += ["", "Which layers hurt most (all of a layer's linears quantized together; lm_head "
              "is layer -1):", "", "| layer | KL |", "|---:|---:|"]
        for l, v in sorted(by_layer.items(), key=lambda kv: -kv[1])[:12]:
            L.append(f"| {l} | {v:.3e} |")
        L.append("")
    le = load(os.path.join(d, "proxy_linerr.json"))
    if le and le.get("packages"):
        L += linerr_section(le)
        for name, title in (("proxy_linerr.svg", "Mean e per layer of each package"),
                            ("proxy_linerr_kind.svg", "e per layer, by kind"),
                            ("proxy_linerr.md", "Every linear's e")):
            if os.path.exists(os.path.join(d, name)):
                L += [f"{title}: [{name}]({name})", ""]
    L += ["## Full-size E2B with random weights", "",
          "The same statistics on the random-weight E2B (tools/python/make_package.py), the text "
          "tokenized with the proxy's tokenizer (ids < 8192 are valid E2B ids): random weights "
          "give near-uniform distributions whose KLD says little about trained models.", ""]
    L += table(d, "e2b")
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
