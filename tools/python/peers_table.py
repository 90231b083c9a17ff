#!/usr/bin/env python3
"""peers_table.py: the peers stage's table (tools/gpu/run.sh peers): g4cu beside onnxruntime-genai,
llama.cpp and HF transformers on the same GPU and weights, from the JSON each driver wrote.

    python3 tools/python/peers_table.py --g4cu G.json [--g4cu-version S] [--ort-f16 F]
        [--ort-q4 F] [--hf F] [--llama F] [--parity F] [--md OUT.md] [--json OUT.json]

Inputs (a missing one is a column that says why: PATH.error, when there, holds the reason):
  --g4cu     `g4cu bench F16 Q4 --json` (packages "f16" / "q4")
  --ort-*    tools/peers/ort_genai.py --json on the f16 / Q4 package
  --hf       tools/python/bench_hf.py --json --long 4096,16384 on the HF checkpoint (bf16, fp16)
  --llama    tools/peers/llamacpp.sh bench's OUT_JSON (f16 and Q4_K_M GGUFs)
  --parity   tools/peers/logits_parity.py --json
Rows: prefill 128 / 512 / 2048 (tok/s), TTFT on a 128-token prompt (ms), decode 128 after 128,
after 4k and after 16k (tok/s). Ratio = how many times g4cu's figure is better (tok/s: g4cu /
peer; ms: peer / g4cu), against g4cu on the same weights' precision (f16 beside f16, fp16 and
bf16; Q4 beside Q4 and Q4_K_M). llama.cpp figures are llama-bench's: pp<n> at depth 0, tg128 at
depth 128 / 4096 / 16384; it has no TTFT."""
import argparse
import json
import os

ROWS = [  # (label, unit, g4cu key, ORT key, HF key, llama.cpp (n_prompt, n_gen, n_depth))
    ("prefill 128", "tok/s", "prefill_128_tok_s", "prefill_128_tok_s", "prefill_128_tok_s", (128, 0, 0)),
    ("prefill 512", "tok/s", "prefill_512_tok_s", "prefill_512_tok_s", "prefill_512_tok_s", (512, 0, 0)),
    ("prefill 2048", "tok/s", "prefill_2048_tok_s", "prefill_2048_tok_s", "prefill_2048_tok_s", (2048, 0, 0)),
    ("TTFT, 128-token prompt", "ms", "ttft_128_ms", "ttft_128_ms", "ttft_128_ms", None),
    ("decode 128 after 128", "tok/s", "decode_tok_s", "decode_tok_s", "decode_tok_s", (0, 128, 128)),
    ("decode 128 after 4k", "tok/s", "decode_4k_tok_s", "decode_4k_tok_s", "decode_4k_tok_s", (0, 128, 4096)),
    ("decode 128 after 16k", "tok/s", "decode_16k_tok_s", "decode_16k_tok_s", "decode_16k_tok_s", (0, 128, 16384)),
]


def load(path):
    """(dict, None) or (None, why)."""
    if not path:
        return None, "not run"
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f), None
        except ValueError as e:
            return None, f"{path}: not JSON ({e})"
    if os.path.isfile(path + ".error"):
        with open(path + ".error", encoding="utf-8") as f:
            return None, f.read().strip() or "failed"
    return None, f"{path}: missing"


def num(d, key):
    if d is None or key is None:
        return None
    v = d.get(key)
    return v if isinstance(v, (int, float)) and v > 0 else None


def llama_value(run, spec):
    if run is None or spec is None:
        return None
    for r in run.get("rows", []):
        if (r.get("n_prompt"), r.get("n_gen"), r.get("n_depth")) == spec:
            return r.get("avg_ts")
    return None


def fmt(v, unit):
    if v is None:
        return "-"
    return f"{v:.1f}" if unit == "ms" or v < 1000 else f"{v:,.0f}"


def ratio(ours, peer, unit):
    if ours is None or peer is None:
        return ""
    return f" ({(ours / peer if unit == 'tok/s' else peer / ours):.1f}x)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("g4cu", "g4cu-version", "ort-f16", "ort-q4", "hf", "llama", "parity", "md", "json"):
        ap.add_argument("--" + k)
    a = ap.parse_args()
    g4, g4_why = load(a.g4cu)
    pk = (g4 or {}).get("packages", {})
    ort = {k: load(p) for k, p in (("f16", a.ort_f16), ("q4", a.ort_q4))}
    hf, hf_why = load(a.hf)
    llama, llama_why = load(a.llama)
    parity, parity_why = load(a.parity)
    runs = (llama or {}).get("runs", {})

    # columns: (title, precision group, value getter, why-missing)
    cols = []
    for grp, g4k, llk in (("f16", "f16", "f16"), ("Q4", "q4", "q4_k_m")):
        ours = pk.get(g4k)
        cols.append((f"g4cu {grp}", g4k, lambda row, d=ours: num(d, row[2]),
                     None if ours else (g4_why or f"no {g4k} package in the bench json"), True))
        od, ow = ort[g4k]
        cols.append((f"onnxruntime-genai {grp}", g4k, lambda row, d=od: num(d, row[3]), ow, False))
        lr = runs.get(llk)
        lw = llama_why or (lr or {}).get("error") or (None if lr else "not run")
        cols.append((f"llama.cpp {'F16' if grp == 'f16' else 'Q4_K_M'}", g4k,
                     lambda row, d=lr: llama_value(d, row[5]), lw, False))
        if grp == "f16":
            for dt in ("fp16", "bf16"):
                hd = (hf or {}).get(dt)
                cols.append((f"HF {dt}", g4k, lambda row, d=hd: num(d, row[4]),
                             hf_why or (None if hd else f"no {dt} result"), False))
    out_rows = []
    lines = ["| | " + " | ".join(c[0] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for row in ROWS:
        label, unit = row[0], row[1]
        cells, rec = [], {"row": label, "unit": unit}
        for title, grp, get, why, is_ours in cols:
            v = get(row) if why is None else None
            ours = num(pk.get(grp), row[2])
            rec[title] = v
            cells.append(fmt(v, unit) + ("" if is_ours else ratio(ours, v, unit)))
        out_rows.append(rec)
        lines.append(f"| {label} ({unit}) | " + " | ".join(cells) + " |")
    notes = ["", "Ratios: how many times g4cu (same precision group) is faster; '-': not measured.",
             "Prefill: g4cu bench times the prompt's forward; onnxruntime-genai append_tokens() + "
             "the first generate_next_token() (the first token included); HF one forward "
             "without a cache; llama.cpp llama-bench pp<n>. Decode after N: llama-bench tg128 at "
             "depth N (no TTFT in llama-bench)."]
    for title, _, _, why, _ in cols:
        if why:
            notes.append(f"- {title}: {why}")
    notes.append("")
    notes.append("Versions and builds:")
    notes.append(f"- g4cu: {a.g4cu_version or '?'} (`g4cu bench`, {g4.get('reps') if g4 else '?'} reps, "
                 f"backend {g4.get('backend') if g4 else '?'})")
    for k, (od, _) in ort.items():
        if od:
            notes.append(f"- onnxruntime-genai {od.get('onnxruntime_genai')} with onnxruntime "
                         f"{od.get('onnxruntime')} ({k}: {od.get('package')}, model.type "
                         f"{od.get('model_type')}, {od.get('reps')} reps, load {od.get('load_s', 0):.1f} s)")
    if llama:
        rows = [r for v in runs.values() for r in v.get("rows", [])]
        commit = rows[0].get("build_commit") if rows else "?"
        notes.append(f"- llama.cpp: {'; '.join(llama.get('source', []))} (build_commit {commit}); "
                     f"`{llama.get('cmake')}`; llama-bench -fa 1 -ngl 99"
                     + (f"; {rows[0].get('gpu_info')}" if rows else ""))
    if hf:
        notes.append(f"- HF transformers {hf.get('transformers', '?')}, torch {hf.get('torch')}, "
                     f"sdpa, {hf.get('device')}")
    par = []
    if parity:
        par = ["", "Logits parity (teacher-forced, %d random non-special ids, %s vs HF fp32):"
               % (parity.get("n", 0), os.path.basename(parity.get("package", "?"))),
               "| runtime | rel err mean | rel err max | top-1 agreement |", "|---|---:|---:|---:|"]
        names = {"ort": "onnxruntime-genai (CUDA)", "g4cu": f"g4cu ({parity.get('g4cu_backend')})"}
        for k, r in parity.get("runtimes", {}).items():
            par.append(f"| {names.get(k, k)} | {r['rel_err_mean']:.3e} | {r['rel_err_max']:.3e} | "
                       f"{100 * r['top1_agree']:.1f}% |")
        for k, e in parity.get("errors", {}).items():
            par.append(f"| {names.get(k, k)} | {e} | | |")
        if "g4cu_vs_ort" in parity:
            v = parity["g4cu_vs_ort"]
            par.append(f"| g4cu vs onnxruntime-genai | {v['rel_err_mean']:.3e} | | "
                       f"{100 * v['top1_agree']:.1f}% |")
    elif a.parity:
        par = ["", f"Logits parity: {parity_why}"]
    md = "\n".join(lines + notes + par) + "\n"
    print(md, end="")
    if a.md:
        with open(a.md, "w", encoding="utf-8") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"rows": out_rows, "missing": {c[0]: c[3] for c in cols if c[3]},
                       "g4cu": g4, "ort": {k: v[0] for k, v in ort.items()}, "hf": hf,
                       "llama": llama, "parity": parity}, f, indent=1)


if __name__ == "__main__":
    main()
