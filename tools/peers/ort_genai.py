#!/usr/bin/env python3
"""onnxruntime-genai peer benchmark on a g4cu package dir (GPU machine; onnxruntime-genai-cuda
0.18 with onnxruntime-gpu, see ../shared/bench/PEERS.md for the environment):

    python3 tools/peers/ort_genai.py PKG [--reps 5] [--json F]
    python3 tools/peers/ort_genai.py PKG --logits IDS_FILE --out F.npy
    python3 tools/peers/ort_genai.py --check [PKG]   (exit 0 when onnxruntime_genai imports)

The package runs as it is (its genai_config.json: the CUDA provider options the exporter wrote),
text only, batch 1, greedy, through og.Generator, with the definitions of `g4cu bench`
(api/g4cu_dev_bench_model.c, ../shared/bench/TARGETS.md):
  prefill_<n>_ms   append_tokens() of an n-token prompt (n = 128, 512, 2048) + the first
                   generate_next_token(), i.e. ttft_<n>_ms: the prompt's forward and the first
                   token id on the host. Where the forward runs (append_tokens() or the first
                   generate_next_token()) is the runtime's business, so the prefill figure counts
                   both; picking one greedy token is tens of microseconds of it.
                   prefill_<n>_append_ms keeps append_tokens() alone.
  decode_tok_s     128 new tokens after a 128-token prompt: 127 / time of the 127
                   generate_next_token() calls after the first (each runs one decode step)
  ttft_4k_ms, decode_4k_tok_s, ttft_16k_ms, decode_16k_tok_s: the same after 4096- and 16384-token
                   prompts (3 timed runs at most)
search options: max_length = min_length = prompt + new tokens (EOS never ends a random-weight
run early), do_sample False. Each run is a new og.Generator (empty KV cache); median of --reps
runs after one warm-up run. Ids: tools/python/peer_ids.py (g4cu bench's draws, minus the
package's special and placeholder ids).

--logits: teacher-forced logits of the ids in IDS_FILE (.npy or comma / space separated text):
append_tokens(ids) then generator.get_output("logits"); when that holds only the last position
(a decoder that slices), the ids are appended one at a time and get_logits() read after each.
Saved as float32 [n, vocab] .npy (soft-capped, as the decoder outputs them)."""
import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import peer_ids  # noqa: E402

try:
    import numpy as np
    import onnxruntime_genai as og
except ImportError as e:  # reported as one line by --check and by a run
    og = None
    import_error = e

LENGTHS = (128, 512, 2048)
LONG = (4096, 16384)
NEW = 128


def generator(model, max_length):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length, min_length=max_length, do_sample=False)
    return og.Generator(model, params)


def run_once(model, ids, new):
    """One generation of `new` tokens after ids: (append ms, ttft ms, decode tok/s or None)."""
    g = generator(model, len(ids) + new)
    prompt = np.asarray(ids, dtype=np.int32)
    t0 = time.perf_counter()
    g.append_tokens(prompt)
    t1 = time.perf_counter()
    g.generate_next_token()
    t2 = time.perf_counter()
    rate = None
    if new > 1:
        for _ in range(new - 1):
            g.generate_next_token()
        t3 = time.perf_counter()
        got = len(g.get_sequence(0))  # (a list in 0.18's bindings; numpy in older ones)
        if got != len(ids) + new:
            raise SystemExit(f"ort_genai: expected {len(ids) + new} tokens in the sequence, got "
                             f"{got}")
        rate = (new - 1) / (t3 - t2)
    del g
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3, rate


def median_runs(model, ids, new, reps):
    run_once(model, ids, new)  # warm-up
    runs = [run_once(model, ids, new) for _ in range(reps)]
    med = lambda k: statistics.median(r[k] for r in runs) if runs[0][k] is not None else None
    return med(0), med(1), med(2)


def bench(pkg, reps):
    vocab = peer_ids.vocab_size(pkg_dir=pkg)
    skip = peer_ids.special_ids(pkg)
    with open(os.path.join(pkg, "genai_config.json"), encoding="utf-8") as f:
        ctx = int(json.load(f)["model"]["context_length"])
    ids = peer_ids.bench_ids(max(LONG) + NEW, vocab, skip)
    t = time.perf_counter()
    model = og.Model(pkg)
    r = {"load_s": time.perf_counter() - t, "model_type": None}
    with open(os.path.join(pkg, "genai_config.json"), encoding="utf-8") as f:
        r["model_type"] = json.load(f)["model"]["type"]
    for n in LENGTHS:
        app, ttft, _ = median_runs(model, ids[:n], 1, reps)
        r[f"prefill_{n}_append_ms"], r[f"ttft_{n}_ms"] = app, ttft
        r[f"prefill_{n}_ms"], r[f"prefill_{n}_tok_s"] = ttft, n / (ttft / 1e3)
        print(f"ort_genai {pkg}: prefill {n}: {ttft:.2f} ms incl. the first token "
              f"({n / (ttft / 1e3):.0f} tok/s; append_tokens alone {app:.2f} ms)", flush=True)
    _, ttft, rate = median_runs(model, ids[:128], NEW, reps)
    r["ttft_128_ms"], r["decode_tok_s"] = ttft, rate
    print(f"ort_genai {pkg}: decode {NEW} after 128: {rate:.1f} tok/s (TTFT {ttft:.2f} ms)",
          flush=True)
    for n in LONG:
        k = f"{n // 1024}k"
        if n + NEW > ctx:
            r[f"ttft_{k}_ms"] = r[f"decode_{k}_tok_s"] = -1
            continue
        _, ttft, rate = median_runs(model, ids[:n], NEW, min(reps, 3))
        r[f"ttft_{k}_ms"], r[f"decode_{k}_tok_s"] = ttft, rate
        print(f"ort_genai {pkg}: decode {NEW} after {n}: {rate:.1f} tok/s (TTFT {ttft:.1f} ms)",
              flush=True)
    del model
    return r


def logits(pkg, ids):
    model = og.Model(pkg)
    g = generator(model, len(ids) + 1)
    g.append_tokens(np.asarray(ids, dtype=np.int32))
    try:
        out = np.asarray(g.get_output("logits"), dtype=np.float32)
        out = out.reshape(-1, out.shape[-1])
    except RuntimeError as e:  # (a pipeline state may not expose the decoder's outputs)
        print(f"ort_genai: get_output('logits'): {e}; reading get_logits() per token")
        out = np.zeros((0, 0), dtype=np.float32)
    how = "get_output('logits') after append_tokens"
    if out.shape[0] != len(ids):  # only the last position: one token at a time
        del g
        g = generator(model, len(ids) + 1)
        rows = []
        for i in ids:
            g.append_tokens(np.asarray([i], dtype=np.int32))
            rows.append(np.asarray(g.get_logits(), dtype=np.float32).reshape(-1))
        out, how = np.stack(rows), "get_logits() after each of append_tokens([id])"
    return out, how


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pkg", nargs="?")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--logits", metavar="IDS_FILE")
    ap.add_argument("--out", help="--logits: the .npy to write")
    ap.add_argument("--check", action="store_true", help="only check that onnxruntime_genai imports")
    a = ap.parse_args()
    if og is None:
        print(f"ort_genai: cannot import onnxruntime_genai / numpy: {import_error}", file=sys.stderr)
        sys.exit(1)
    version = getattr(og, "__version__", "?")
    if a.check:
        print(f"ort_genai: ok (onnxruntime-genai {version}, {og.__file__})")
        return
    if not a.pkg or not os.path.isfile(os.path.join(a.pkg, "genai_config.json")):
        print(f"ort_genai: {a.pkg}: no genai_config.json (expected a package directory)",
              file=sys.stderr)
        sys.exit(1)
    if a.logits:
        if not a.out:
            print("ort_genai: --logits needs --out F.npy", file=sys.stderr)
            sys.exit(1)
        ids = peer_ids.read_ids(a.logits)
        out, how = logits(a.pkg, ids)
        np.save(a.out, out)
        print(f"ort_genai: logits [{out.shape[0]}, {out.shape[1]}] of {len(ids)} ids -> {a.out} "
              f"({how})")
        return
    res = {"onnxruntime_genai": version, "package": os.path.abspath(a.pkg), "reps": a.reps}
    try:
        import onnxruntime
        # (PEERS.md's carried onnxruntime/ has an empty __init__.py: the library names it)
        libs = glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi",
                                      "libonnxruntime.so.*"))
        res["onnxruntime"] = (getattr(onnxruntime, "__version__", None) or
                              (os.path.basename(libs[0])[len("libonnxruntime.so."):] if libs else "?"))
    except ImportError:
        res["onnxruntime"] = "?"
    res.update(bench(a.pkg, a.reps))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
