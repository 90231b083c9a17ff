#!/usr/bin/env python3
"""What a train_mm_proxy --lm-warm-steps step costs (issue 35, bench/NOTES.md "lmwarm"): one
lm_warm step (the decoder alone on packed text rows: forward, CE, backward, clip, AdamW) of a
preset's model (the proxy's by default) on --rows rows of the trainer's row length (its ops do
not depend on the rows: each op runs once whatever the batch), profiled on the CPU: the
launch-like ops of that step (train_mm_proxy.step_ops, the CPU's stand-in for a GPU step's
launches; the GPU step is launch-bound: bench/NOTES.md "The multimodal proxy's step is
CPU-bound") and the CPU seconds of --steps more unprofiled steps (median, one thread).

    python3 tools/python/mm_lm_warm_cost.py [--preset proxy] [--rows 2] [--steps 3]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import check_tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(tmp.PRESETS), default="proxy")
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    if a.rows < 1 or a.steps < 1:
        raise SystemExit("mm_lm_warm_cost: --rows and --steps >= 1")
    torch.set_num_threads(1)
    texts = ["The cat sat down on the old red mat today.", "Open the red door.", "835,618",
             "We walk to the river in the morning.", "blue sky", "25/07/1974"]
    with tempfile.TemporaryDirectory() as d:
        tok = check_tokenizer(tmp, texts, os.path.join(d, "tok.json"))
    # (the vocabulary's size moves the LM head's FLOPs, not the op count; the tokenizer here
    # is the checks' small one: the seconds below are for its vocabulary)
    p = dict(tmp.PRESETS[a.preset], vocab=tok.get_vocab_size(), batch=a.rows)
    torch.manual_seed(0)
    model = tmp.build_model(p, tok, 0).train()
    opt = tmp.make_optimizer(model, p, None, None, "foreach")
    pr = tmp.Prompter(tok)
    args = types.SimpleNamespace(lm_warm_steps=1, seed=0, max_skips=10, minutes=60)
    cpu = torch.device("cpu")
    tmp.lm_warm(args, p, model, opt, pr, texts * 20, 0, cpu, False, {"lm_warm": []},
                time.time())  # (a first step: allocations, lazy inits)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        tmp.lm_warm(args, p, model, opt, pr, texts * 20, 0, cpu, False, {"lm_warm": []},
                    time.time())
    ops = tmp.step_ops(prof.events())
    args.lm_warm_steps = a.steps
    info = tmp.lm_warm(args, p, model, opt, pr, texts * 20, 0, cpu, False, {"lm_warm": []},
                       time.time())
    print(f"mm_lm_warm_cost: preset {a.preset}, {a.rows} rows x {info['row_ids']} ids, vocab "
          f"{p['vocab']}: launch-like ops a step {ops['total']} (phases {ops['phase']}); CPU "
          f"step median {statistics.median([info['step_seconds']['median']]):.3f} s over "
          f"{a.steps} (one thread)")


if __name__ == "__main__":
    main()
