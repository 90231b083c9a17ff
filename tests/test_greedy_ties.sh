#!/usr/bin/env bash
# test_greedy_ties.sh: tools/python/greedy_ties.py (issue 30's alt_greedy: near-tie or decode bug)
# on synthetic logits whose answers are known: a CPU-preferred token within the backends'
# difference on the two tokens (a near-tie, exit 0; with --row-tol: only if the rows are that close),
# a decode token that is not the prefill's argmax by more than the difference (exit 1), a short
# logits file (exit 2). Needs numpy: $G4_MM_PYTHON, else .tools/ort-venv's; else skips (77).
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_MM_PYTHON:-$G4_SOURCE_DIR/.tools/ort-venv/bin/python}
if [ ! -x "$py" ] || ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "test_greedy_ties: skipped: no numpy at $py (run tools/install_deps.sh)"
    exit 77
fi
"$py" - "$G4_SOURCE_DIR/tools/python/greedy_ties.py" <<'PY'
import json, os, subprocess, sys, tempfile
import numpy as np
tool = sys.argv[1]
fails = 0
def check(c, what):
    global fails
    print(("ok   " if c else "FAIL ") + what)
    fails += not c
with tempfile.TemporaryDirectory() as d:
    P, V = 4, 10
    tc, tp = [1, 2, 3, 4], [1, 2, 5, 5]
    def run(lc, lp, *extra):
        np.save(f"{d}/c.npy", lc); np.save(f"{d}/p.npy", lp)
        json.dump({"tokens": tc}, open(f"{d}/gc.json", "w"))
        json.dump({"tokens": tp}, open(f"{d}/gp.json", "w"))
        return subprocess.run([sys.executable, tool, "--prompt-len", str(P), "--gen-cuda", f"{d}/gc.json",
                               "--gen-cpu", f"{d}/gp.json", "--cuda", f"{d}/c.npy", "--cpu", f"{d}/p.npy", *extra],
                              capture_output=True, text=True)
    lc = np.zeros((P - 1 + 4, V), np.float32)
    for j, t in enumerate(tc):
        lc[P - 1 + j, t] = 5
    lp = lc.copy()
    lp[P + 1, 5], lc[P + 1, 5] = 5.01, 4.99
    r = run(lc, lp)
    check(r.returncode == 0 and "4 of 4 steps" in r.stdout, "decode tokens are the prefill's argmax: 4 of 4")
    check("first difference at step 2" in r.stdout and "CPU margin 0.01" in r.stdout and "a near-tie" in r.stdout,
          "step 2: margin 0.01 within the difference 0.02: a near-tie, exit 0")
    lp2 = lp.copy(); lp2[P + 1, 5] = 6.0
    r = run(lc, lp2)
    check(r.returncode == 0 and "a near-tie" in r.stdout, "margin 1.0 within the two tokens' difference 1.01: a near-tie")
    r = run(lc, lp2, "--row-tol", "0.5")
    check(r.returncode == 1 and "the backends disagree" in r.stdout, "the same with --row-tol 0.5 (rows 1.01 apart): exit 1")
    r = run(lc, lp, "--row-tol", "0.5")
    check(r.returncode == 0 and "a near-tie" in r.stdout, "the first case within --row-tol 0.5: exit 0")
    lc3 = lc.copy(); lc3[P, 7] = 5.5  # step 1: the CUDA prefill prefers 7 by 0.5
    r = run(lc3, lp, "--row-tol", "0.5")
    check(r.returncode == 1 and "3 of 4 steps" in r.stdout and "look for a bug" in r.stdout,
          "decode token 0.5 below the prefill's argmax where the backends are 5.5 apart, --row-tol 0.5: exit 1")
    lc4 = lc.copy(); lc4[P, 7] = 5.5; lp4 = lp.copy(); lp4[P, 7] = 5.4  # two-token difference 0.1
    r = run(lc4, lp4)
    check(r.returncode == 1 and "NOT a tie" in r.stdout,
          "decode token 0.5 below the prefill's argmax, the backends 0.1 apart on those two: not a tie, exit 1")
    r = run(lc[:3], lp[:3])
    check(r.returncode == 2, "logits shorter than the tokens: exit 2")
print(f"test_greedy_ties: {fails} failed")
sys.exit(1 if fails else 0)
PY
