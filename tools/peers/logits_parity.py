#!/usr/bin/env python3
"""logits_parity.py: one teacher-forced prompt through onnxruntime-genai, g4cu and HF fp32 on the
same weights; how close each runtime is to HF.

    python3 tools/peers/logits_parity.py --pkg PKG --hf HF_DIR [--g4cu build-gpu/g4cu]
        [--backend cuda] [--hf-device cuda] [--n 64] [--no-ort] [--work DIR] [--json F]

PKG is a g4cu / onnxruntime-genai package (the f16 one: the bytes both runtimes read) and HF_DIR
the checkpoint it was exported from. The prompt: --n ids drawn as g4cu bench draws them, minus
the package's special and placeholder ids (tools/python/peer_ids.py). Logits of every position:
  HF     tools/python/bench_hf.py HF_DIR --logits (float32 weights and math, eager attention)
  g4cu   g4cu logits PKG --ids ... --backend B --out F.npy
  ORT    tools/peers/ort_genai.py PKG --logits (the package's CUDA provider; skipped with --no-ort
         or when onnxruntime_genai does not import: the reason is printed and kept in the json;
         G4_ORT_PYTHONPATH / G4_ORT_LD_LIBRARY_PATH are prepended to that run's environment)
all soft-capped, float32 [n, vocab]. Per position: rel err ||a - hf|| / ||hf|| and whether a's
argmax is HF's; then mean / max rel err and the top-1 agreement of each runtime against HF (and of
g4cu against ORT). Prints a table; --json writes every number. Exit 0 when the runs it could do
finished (the numbers are the result, not a pass / fail), 1 on a failed run."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "python"))
import peer_ids  # noqa: E402


def run(cmd, what, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return f"{what} exited {p.returncode}: " + " | ".join(tail)
    return None


def ort_env():
    """The environment of the onnxruntime-genai run: G4_ORT_PYTHONPATH and G4_ORT_LD_LIBRARY_PATH
    (the peers stage: the carried onnxruntime-genai + onnxruntime-gpu, the CUDA libraries of the
    image's python nvidia packages) prepended for that process only, so the HF run keeps the
    image's own packages."""
    env = dict(os.environ)
    for var in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        extra = os.environ.get("G4_ORT_" + var)
        if extra:
            env[var] = extra + (":" + env[var] if env.get(var) else "")
    return env


def compare(a, ref):
    """Per position: rel err of a against ref and top-1 agreement."""
    rel = np.linalg.norm(a - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    top1 = a.argmax(axis=1) == ref.argmax(axis=1)
    return rel, top1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pkg", required=True)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--g4cu", default="build-gpu/g4cu")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--hf-device", default="cuda")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--work", help="where the .npy files go (default: a temporary dir)")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="g4-parity-")
    os.makedirs(work, exist_ok=True)
    vocab = peer_ids.vocab_size(pkg_dir=a.pkg)
    ids = peer_ids.bench_ids(a.n, vocab, peer_ids.special_ids(a.pkg, a.hf))
    ids_file = os.path.join(work, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(map(str, ids)) + "\n")
    py = sys.executable
    npy = {k: os.path.join(work, f"{k}.npy") for k in ("hf", "g4cu", "ort")}
    err = {}
    err["hf"] = run([py, os.path.join(here, "..", "python", "bench_hf.py"), a.hf, "--logits",
                     ids_file, "--out", npy["hf"], "--device", a.hf_device], "HF fp32")
    err["g4cu"] = run([a.g4cu, "logits", a.pkg, "--ids", ",".join(map(str, ids)), "--backend",
                       a.backend, "--out", npy["g4cu"]], "g4cu logits")
    if a.no_ort:
        err["ort"] = "skipped (--no-ort)"
    else:
        env = ort_env()
        chk = subprocess.run([py, os.path.join(here, "ort_genai.py"), "--check"],
                             capture_output=True, text=True, env=env)
        err["ort"] = (run([py, os.path.join(here, "ort_genai.py"), a.pkg, "--logits", ids_file,
                           "--out", npy["ort"]], "onnxruntime-genai", env)
                      if chk.returncode == 0 else
                      "not available: " + (chk.stderr or chk.stdout).strip())
    for k, e in err.items():
        if e:
            print(f"logits_parity: {k}: {e}")
    if err["hf"]:
        sys.exit(1)
    hf = np.load(npy["hf"]).astype(np.float32)
    got = {k: np.load(npy[k]).astype(np.float32) for k in ("g4cu", "ort") if not err[k]}
    res = {"package": os.path.abspath(a.pkg), "hf": os.path.abspath(a.hf), "n": a.n, "ids": ids,
           "g4cu_backend": a.backend, "hf_device": a.hf_device,
           "errors": {k: v for k, v in err.items() if v}, "runtimes": {}}
    for k, v in got.items():
        if v.shape != hf.shape or not np.isfinite(v).all():
            msg = (f"shape {list(v.shape)} != HF's {list(hf.shape)}" if v.shape != hf.shape
                   else f"{int((~np.isfinite(v)).sum())} non-finite logits")
            print(f"logits_parity: {k}: {msg}")
            res["errors"][k] = msg
            continue
        rel, top1 = compare(v, hf)
        res["runtimes"][k] = {"rel_err": rel.tolist(), "top1": top1.astype(int).tolist(),
                              "rel_err_mean": float(rel.mean()), "rel_err_max": float(rel.max()),
                              "top1_agree": float(top1.mean())}
    if "g4cu" in res["runtimes"] and "ort" in res["runtimes"]:
        rel, top1 = compare(got["g4cu"], got["ort"])
        res["g4cu_vs_ort"] = {"rel_err_mean": float(rel.mean()), "top1_agree": float(top1.mean())}
    names = {"ort": "onnxruntime-genai vs HF fp32", "g4cu": f"g4cu ({a.backend}) vs HF fp32"}
    cols = [k for k in ("ort", "g4cu") if k in res["runtimes"]]
    print("| pos | " + " | ".join(f"{names[k]}: rel err | top-1" for k in cols) + " |")
    print("|---:|" + "---:|:---:|" * len(cols))
    for i in range(a.n):
        print(f"| {i} | " + " | ".join(
            f"{res['runtimes'][k]['rel_err'][i]:.2e} | {'=' if res['runtimes'][k]['top1'][i] else 'x'}"
            for k in cols) + " |")
    for k in cols:
        r = res["runtimes"][k]
        print(f"{names[k]}: rel err mean {r['rel_err_mean']:.3e}, max {r['rel_err_max']:.3e}, "
              f"top-1 agreement {100 * r['top1_agree']:.1f}% ({sum(r['top1'])}/{a.n})")
    if "g4cu_vs_ort" in res:
        print(f"g4cu vs onnxruntime-genai: rel err mean {res['g4cu_vs_ort']['rel_err_mean']:.3e}, "
              f"top-1 agreement {100 * res['g4cu_vs_ort']['top1_agree']:.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    sys.exit(1 if err["g4cu"] or "g4cu" in res["errors"] else 0)


if __name__ == "__main__":
    main()
