#!/usr/bin/env python3
"""Is a greedy CUDA-vs-CPU difference a near-tie or a decode bug? (run.sh stage alt_greedy)

usage: greedy_ties.py --prompt-len P --gen-cuda G.json --gen-cpu G.json --cuda L.npy --cpu L.npy

G.json: `g4cu generate --json` of the same prompt on each backend; L.npy: `g4cu logits` [seq,
vocab] float32 of the prompt followed by the CUDA run's tokens but its last (teacher-forced), on
each backend. Row P - 1 + j is the distribution of generated token j.

Prints, for the CUDA tokens:
  - decode vs prefill: at how many steps the CUDA decode step's token is the CUDA prefill's argmax
    (the one-token decode path against the prefill path, which `g4cu compare` checks against HF),
    and the prefill's margin where it is not;
  - the first step where the CPU prefers another token: the CPU's margin between its choice and the
    CUDA token, against the two backends' logit differences on those two tokens: a near-tie when
    the margin is within that difference (and, with --row-tol T, the backends' largest difference
    on the row is <= T: how far apart two correct backends may be, e.g. HF fp16's own error from
    `g4cu compare`); else the CUDA token is not explained by the backends' numeric difference.
Exit 0 when every step is explained (decode == prefill argmax or within the prefill's margin of
the backends' difference, and the first CPU disagreement a near-tie), 1 otherwise, 2 on bad input.
"""
import argparse, json, sys

import numpy as np


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--gen-cuda", required=True)
    ap.add_argument("--gen-cpu", required=True)
    ap.add_argument("--cuda", required=True)
    ap.add_argument("--cpu", required=True)
    ap.add_argument("--row-tol", type=float, default=None,
                    help="also require the backends' largest logit difference on the row <= this")
    a = ap.parse_args(argv)
    try:
        tc = json.load(open(a.gen_cuda))["tokens"]
        tp = json.load(open(a.gen_cpu))["tokens"]
        lc = np.load(a.cuda).astype(np.float64)
        lp = np.load(a.cpu).astype(np.float64)
    except (OSError, KeyError, ValueError) as e:
        print(f"greedy_ties: unreadable input: {e}")
        return 2
    P, n = a.prompt_len, len(tc)
    if lc.shape != lp.shape or lc.ndim != 2 or lc.shape[0] < P - 1 + n:
        print(f"greedy_ties: logits shapes {lc.shape} / {lp.shape}, expected [>= {P - 1 + n}, vocab] both")
        return 2
    def judge(r, pref, tok, ref):
        """ref's margin of pref over tok at row r against the backends' difference on the two
        tokens (and, with --row-tol, their largest difference on the row)."""
        m = float(ref[r, pref] - ref[r, tok])
        d2 = abs(lc[r, pref] - lp[r, pref]) + abs(lc[r, tok] - lp[r, tok])
        diff = float(np.abs(lc[r] - lp[r]).max())
        close = a.row_tol is None or diff <= a.row_tol
        verdict = ("a near-tie" if m <= d2 and close else
                   "the backends disagree: look for a bug" if not close else "NOT a tie: look for a bug")
        return m <= d2 and close, (f"margin {m:.4g}, the backends' difference on the two tokens {d2:.4g}, "
                                   f"on the row up to {diff:.4g}: {verdict}")

    ok = True
    same = 0
    for j, t in enumerate(tc):
        r = P - 1 + j
        arg = int(lc[r].argmax())
        if arg == t:
            same += 1
        else:
            good, why = judge(r, arg, t, lc)
            ok &= good
            print(f"  step {j}: CUDA decode chose {t}, the CUDA prefill prefers {arg}: {why}")
    print(f"decode vs prefill (CUDA): {same} of {n} steps the decode token is the prefill's argmax")
    first = next((j for j in range(min(n, len(tp))) if tc[j] != tp[j]), None)
    if first is None:
        print(f"cuda == cpu greedy over {min(n, len(tp))} tokens")
    else:
        r = P - 1 + first
        c_cpu = int(lp[r].argmax())
        good, why = judge(r, c_cpu, tc[first], lp)
        ok &= good
        print(f"first difference at step {first}: CUDA {tc[first]}, CPU greedy {tp[first]} (CPU "
              f"teacher-forced argmax {c_cpu}); CPU {why}")
    print("greedy_ties: " + ("explained" if ok else "NOT explained"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
