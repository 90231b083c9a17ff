#!/usr/bin/env python3
"""Markdown tables for bench/RESULTS.md from `g4cu bench --kernels --json` and
`g4cu bench PKG [PKG2] --json` outputs (no third-party packages).

    python3 tools/python/bench_tables.py kernels KBENCH.json [--filter S]
    python3 tools/python/bench_tables.py model BENCH.json
"""
import json
import sys

COPY, PEAK = 4250.0, 795.0


def kernels(path, filt=None):
    d = json.load(open(path))
    print(f"device: {d['device']}\n")
    print("| op | shape | ms | GB/s | % copy | TFLOP/s | % peak | baseline | base ms | ours/base speed |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in d["rows"]:
        if filt and filt not in r["op"] + " " + r["shape"]:
            continue
        base = r["baseline_ms"]
        ratio = f"{base / r['median_ms']:.2f}x" if base > 0 else "-"
        print(f"| {r['op']} | {r['shape']} | {r['median_ms']:.4f} | {r['gbps']:.0f} | "
              f"{100 * r['gbps'] / COPY:.1f}% | {r['tflops']:.1f} | {100 * r['tflops'] / PEAK:.1f}% | "
              f"{r['baseline'] or '-'} | {base if base > 0 else '-'} | {ratio} |")


def model(path):
    d = json.load(open(path))
    print(f"backend {d['backend']}, median of {d['reps']} runs\n")
    print("| package | weights GiB | prefill 128 tok/s | prefill 512 tok/s | prefill 2048 tok/s "
          "| prefill 16000 tok/s | TTFT 128 ms | decode tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in d["packages"].items():
        long_ = r.get("prefill_16000_tok_s", -1)  # absent from older runs' JSON
        long_s = f"{long_:.0f}" if long_ > 0 else "-"
        print(f"| {name} | {r['weights_gib']:.2f} | {r['prefill_128_tok_s']:.0f} | "
              f"{r['prefill_512_tok_s']:.0f} | {r['prefill_2048_tok_s']:.0f} | {long_s} | "
              f"{r['ttft_128_ms']:.2f} | {r['decode_tok_s']:.1f} |")
    # the PLE table in pinned host memory, and the towers (absent from older runs' JSON)
    print("\n| package | PLE table GiB | weights GiB, PLE on host | TTFT 128 ms, PLE on host "
          "| decode tok/s, PLE on host | vision 768x768 ms | audio 30 s ms | VQA TTFT ms "
          "| ASR TTFT ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    na = lambda v, f: f.format(v) if v is not None and v >= 0 else "-"
    for name, r in d["packages"].items():
        ple = r.get("ple_gib")
        print(f"| {name} | {na(ple, '{:.2f}')} | "
              f"{na(r['weights_gib'] - ple if ple else None, '{:.2f}')} | "
              f"{na(r.get('ple_host_ttft_128_ms'), '{:.2f}')} | "
              f"{na(r.get('ple_host_decode_tok_s'), '{:.1f}')} | "
              f"{na(r.get('vision_768_ms'), '{:.2f}')} | {na(r.get('audio_30s_ms'), '{:.2f}')} | "
              f"{na(r.get('vqa_ttft_768_ms'), '{:.2f}')} | {na(r.get('asr_ttft_30s_ms'), '{:.2f}')} |")

if __name__ == "__main__":
    if sys.argv[1] == "kernels":
        kernels(sys.argv[2], sys.argv[4] if len(sys.argv) > 4 else None)
    else:
        model(sys.argv[2])
