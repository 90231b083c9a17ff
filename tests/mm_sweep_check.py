#!/usr/bin/env python3
"""tests/test_mm_sweep.sh's checks of tools/python/mm_warm_timing.py's batch sweep (--batches)
and loader measurement (--loader-workers) (issue 35: how fast can the proxy train on one GPU?),
on the CPU, the tiny preset on the ci plan (tests/mm_items.ci_data: noise clips of 2 s):
  1. --batches 2,4 --rounds 2 --a-warm with the recipe's options (--pad-to 64
     --strict-determinism --split-digits --ctc-tied --a-lr-mult 0.3): one header line, then
     exactly 2 rows a kind (joint, a_warm), batches 2 then 4 with 1 + 1 and 2 + 2 items, each
     "median of 2", a finite median > 0, min <= median, items/s = batch / median (to the
     printed rounding), no OOM row, no other line;
  2. --batches 2,4,6 --inject-oom 4 (the joint step raises torch's out-of-memory error after its
     image half at batch 4): rows 2 and 6 measured, row 4 "OOM (injected ...)", exit 0: the
     sweep goes on past it;
  3. the loader rows, --loader-workers 0,1 --loader-batches 3 --batch 4 (no model): two rows,
     W 0 (0 + 0 workers, the trainer's cache: 16 items) and 1 (1 image + 0 audio), each
     "3 batches = 12 items" (3 x 4, counted from the batches' rows), items/s = 12 / seconds;
     again at --loader-warmup 0 --loader-batches 5 --reps 2 --pad-to 64 --batch 6, W 1:
     "5 batches = 30 items" (--a-speed-perturb: the ci plan's clips have a fixed length that a
     slower rendering passes; tools/gpu/run.sh's mm_speed dry run reads it on the tiny plan);
  4. render_items (the sweep's fixed items) by one worker process = rendered here, array for
     array (10 items a kind: the ci plan's 8, then 2 second renderings);
  5. the single form as before (no --batches): --batch 4 --rounds 2 and --a-warm --count-ops
     print the base version's lines (their form, numbers aside: the same text, the same
     order, one line and two); the recipe options without --batches or --loader-workers, odd
     --batches, --ctc-tied without a CTC weight and --gpu-busy off CUDA are refused in one line
     (exit 1; --gpu-busy's profiled step itself runs on the GPU only: the mm_speed stage).
Prints one line per check and the count; exit 1 on the first failure."""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, ci_data  # noqa: E402

CHECKS = Checks("mm_sweep_check")
fail, expect = CHECKS.fail, CHECKS.expect
TIMING = os.path.join(os.path.dirname(tmp.__file__), "mm_warm_timing.py")
N = r"\d+\.\d{3}"
ROW = re.compile(r"mm_warm_timing: sweep (joint|a_warm) batch (\d+) \((\d+) images \+ (\d+) "
                 r"clips\): (?:(" + N + r") s a step \(median of (\d+), min (" + N + r")\), "
                 r"(\d+\.\d) items/s, peak - \(not CUDA\)|OOM \((.*)\))$")
LOADER = re.compile(r"mm_warm_timing: loader (\d+) workers \((\d+) image \+ (\d+) audio\), "
                    r"batch (\d+) \(reps (\d+), speed perturb ([0-9.]+)(, cached)?\): (\d+) "
                    r"batches = (\d+) items in (" + N + r") s after (\d+) warm-up \(" + N +
                    r" s\): (\d+\.\d) items/s \(waits: image " + N + " s, audio " + N + r" s\)$")
# the base version's single-form lines (mm_warm_timing.py before the sweep), numbers as N
SINGLE = re.compile(r"mm_warm_timing: tiny, 2 images \(\+ 2 clips in the joint step\), 2 rounds "
                    r"on cpu \(1 threads\): warm step median N s \(min N\), joint step median "
                    r"N s \(min N\): warm / joint N$".replace("N", N))
SINGLE_A = re.compile((r"mm_warm_timing: tiny, 2 images \(\+ 2 clips in the joint step and the "
                       r"audio warm step, AudioChars' CTC in both\), 2 rounds on cpu \(1 "
                       r"threads\): warm step median N s \(min N\), warm \+ audio step median "
                       r"N s \(min N\), joint step median N s \(min N\): warm / joint N, warm \+ "
                       r"audio / joint N, warm \+ audio / warm N$").replace("N", N))
OPS = re.compile(r"mm_warm_timing: launch-like ops a step \(step_ops\): warm \d+ \(backward \d+, "
                 r"optimizer \d+, other \d+\); a_warm \d+ \(backward \d+, optimizer \d+, other "
                 r"\d+\); joint \d+ \(backward \d+, forward \d+, optimizer \d+, other \d+\)$")


def timing(data, extra, rc=0):
    """mm_warm_timing.py DATA (tiny preset, one thread, the CPU) + extra: its lines that start
    with mm_warm_timing (the profiler's own log lines aside), after checking its exit status."""
    res = subprocess.run([sys.executable, TIMING, data, "--preset", "tiny", "--threads", "1",
                          "--device", "cpu"] + extra, capture_output=True, text=True,
                         timeout=300)
    expect(res.returncode == rc, f"{' '.join(extra)}: exit {res.returncode} (expected {rc}): "
           f"{res.stderr[-600:]}")
    return [x for x in res.stdout.splitlines() if x.startswith("mm_warm_timing")], res


def sweep_rows(lines, what):
    """The sweep's rows of lines as (kind, batch, images, clips, median, n, min, items/s, oom),
    after checking that every other line is the one header."""
    head = [x for x in lines if x.startswith("mm_warm_timing: sweep, ")]
    expect(len(head) == 1, f"{what}: {len(head)} header lines: {lines}")
    rows = []
    for x in lines:
        if x in head:
            continue
        m = ROW.match(x)
        if not m:
            fail(f"{what}: not a sweep row: {x!r}")
        k, b, i, c, med, n, mn, ips, oom = m.groups()
        rows.append((k, int(b), int(i), int(c), None if med is None else float(med),
                     None if n is None else int(n), None if mn is None else float(mn),
                     None if ips is None else float(ips), oom))
    return rows


def check_measured(r, what):
    k, b, i, c, med, n, mn, ips, oom = r
    expect(oom is None, f"{what}: {k} batch {b} OOM: {oom}")
    expect(i == c == b // 2, f"{what}: {k} batch {b}: {i} images + {c} clips")
    expect(n == 2, f"{what}: {k} batch {b}: median of {n} (--rounds 2)")
    expect(math.isfinite(med) and med > 0 and 0 < mn <= med,
           f"{what}: {k} batch {b}: median {med}, min {mn}")
    # (the row's medians are rounded to 1 ms: items/s within what that rounding allows)
    expect(b / (med + 5e-4) - 0.05 <= ips <= b / max(med - 5e-4, 1e-9) + 0.05,
           f"{what}: {k} batch {b}: {ips} items/s for a median of {med} s")


def check_sweep(data):
    lines, _ = timing(data, ["--batches", "2,4", "--rounds", "2", "--a-warm", "--pad-to", "64",
                             "--strict-determinism", "--split-digits", "--ctc-tied",
                             "--a-lr-mult", "0.3"])
    rows = sweep_rows(lines, "sweep")
    head = lines[0]
    expect("pad-to 64, strict determinism on" in head and "tied ctc" in head and
           "audio side lr x 0.3" in head, f"sweep: the header misses the options: {head!r}")
    for kind in ("joint", "a_warm"):
        mine = [r for r in rows if r[0] == kind]
        expect([r[1] for r in mine] == [2, 4], f"sweep: {kind} rows at batches "
               f"{[r[1] for r in mine]} (expected exactly 2 and 4)")
        for r in mine:
            check_measured(r, "sweep")
    expect(len(rows) == 4, f"sweep: {len(rows)} rows (expected 4)")
    print(f"mm_sweep_check: sweep --batches 2,4 --rounds 2 --a-warm (recipe options): 2 rows a "
          f"kind, e.g. joint at 4: {rows[2][4]:.3f} s a step, {rows[2][7]} items/s")


def check_oom(data):
    lines, _ = timing(data, ["--batches", "2,4,6", "--rounds", "2", "--inject-oom", "4",
                             "--render-workers", "1"])
    rows = sweep_rows(lines, "oom")
    expect([(r[0], r[1]) for r in rows] == [("joint", 2), ("joint", 4), ("joint", 6)],
           f"oom: rows {[(r[0], r[1]) for r in rows]}")
    check_measured(rows[0], "oom")
    check_measured(rows[2], "oom")
    expect(rows[1][4] is None and rows[1][8] is not None and "injected" in rows[1][8],
           f"oom: batch 4's row is not the OOM row: {lines[2]!r}")
    print(f"mm_sweep_check: --inject-oom 4: the row says {lines[2].split(': ', 2)[2]!r}, batch "
          "6 measured after it")


def check_render(data):
    """render_items (the sweep's fixed items) by a worker process gives what rendering here
    gives, array for array, in order (the stage renders with all cores)."""
    import numpy as np
    import mm_warm_timing as mwt
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    audio, images = tmp.load_items(data)
    tok = tmp.make_tokenizer([i["text"] for i in audio + images], 480,
                             os.path.join(os.path.dirname(data), "tok.json"))
    pr, fe, fonts = tmp.Prompter(tok), Gemma4AudioFeatureExtractor(), tmp.mmd.font_roots(None)
    n = 0
    for kind, items in (("image", images), ("audio", audio)):
        tr = [i for i in items if i["split"] == "train"]
        ds = tmp.Items(tr, kind, data, fonts, pr, fe, 1)
        here, there = mwt.render_items(ds, 10, 0), mwt.render_items(ds, 10, 1)
        expect(len(here) == len(there) == 10, f"render {kind}: {len(here)}, {len(there)} items")
        for a, b in zip(here, there):
            expect(a.keys() == b.keys(), f"render {kind}: keys {a.keys()} vs {b.keys()}")
            for k in a:
                same = (np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else
                        a[k] == b[k])
                expect(same, f"render {kind}: {k} differs between 0 and 1 worker")
                n += 1
    print(f"mm_sweep_check: render_items by a worker = here ({n} fields of 10 + 10 items, 2 of "
          "them past the 8 planned: a second rendering)")


def loader_rows(lines, what):
    rows = []
    for x in lines:
        m = LOADER.match(x)
        if not m:
            fail(f"{what}: not a loader row: {x!r}")
        rows.append(m.groups())
    return rows


def check_loader(data):
    lines, _ = timing(data, ["--loader-workers", "0,1", "--loader-batches", "3", "--batch", "4"])
    rows = loader_rows(lines, "loader")
    expect(len(rows) == 2, f"loader: {len(rows)} rows (expected 2): {lines}")
    for row, (w, wi, wa, cached) in zip(rows, ((0, 0, 0, True), (1, 1, 0, False))):
        rw, rwi, rwa, b, reps, sp, c, n, items, sec, warm, ips = row
        expect((int(rw), int(rwi), int(rwa), bool(c)) == (w, wi, wa, cached),
               f"loader: W {w}: row says {rw} workers ({rwi} + {rwa}), cached {bool(c)}")
        expect(int(b) == 4 and int(n) == 3 and int(items) == 3 * 4,
               f"loader: W {w}: {n} batches of {b} = {items} items (expected 3 x 4 = 12)")
        expect(int(warm) == 2, f"loader: W {w}: {warm} warm-up batches (expected 2)")
        sec = float(sec)  # (printed to 1 ms: items/s within what that rounding allows)
        expect(12 / (sec + 5e-4) - 0.05 <= float(ips) <= 12 / max(sec - 5e-4, 1e-9) + 0.05,
               f"loader: W {w}: {ips} items/s for 12 items in {sec} s")
    lines, _ = timing(data, ["--loader-workers", "1", "--loader-batches", "5", "--loader-warmup",
                             "0", "--batch", "6", "--reps", "2", "--pad-to", "64"])
    rows = loader_rows(lines, "loader 2")
    expect(len(rows) == 1, f"loader 2: {len(rows)} rows")
    rw, rwi, rwa, b, reps, sp, c, n, items, sec, warm, ips = rows[0]
    expect((int(b), int(n), int(items), int(warm), int(reps)) == (6, 5, 30, 0, 2),
           f"loader 2: {rows[0]} (expected 5 batches of 6 = 30 items, 0 warm-up, reps 2)")
    print("mm_sweep_check: loader W 0 and 1: 3 batches = 12 items each; W 1 with reps 2 and "
          f"--pad-to 64, no warm-up: 5 batches = 30 items ({ips} items/s)")


def check_single(data):
    lines, _ = timing(data, ["--batch", "4", "--rounds", "2"])
    expect(len(lines) == 1 and SINGLE.match(lines[0]),
           f"single: not the base version's line: {lines}")
    lines, _ = timing(data, ["--batch", "4", "--rounds", "2", "--a-warm", "--count-ops"])
    expect(len(lines) == 2 and SINGLE_A.match(lines[0]) and OPS.match(lines[1]),
           f"single --a-warm --count-ops: not the base version's lines: {lines}")
    for extra, want in ((["--pad-to", "64"], "--pad-to: the sweep's options"),
                        (["--ctc-tied", "--strict-determinism"],
                         "--strict-determinism, --ctc-tied: the sweep's options"),
                        (["--batches", "2,3"], "--batches 2,3: expected even sizes"),
                        (["--batches", "0"], "--batches 0: expected integers, 2 or more"),
                        (["--loader-workers", "-1"], "--loader-workers -1: expected integers"),
                        (["--batches", "2", "--ctc-tied"], "--ctc-tied needs --ctc-weight"),
                        (["--batches", "2", "--gpu-busy"], "--gpu-busy: the device's own time "
                         "needs CUDA"),
                        (["--batches", "2", "--top-ops", "5"], "--top-ops 5: expected 0 or "
                         "more, and --gpu-busy"),
                        (["--batches", "2", "--top-ops", "-1"], "--top-ops -1: expected 0 or "
                         "more")):
        _, res = timing(data, extra, rc=1)
        err = res.stderr.strip().splitlines()
        expect(len(err) == 1 and want in err[0], f"{' '.join(extra)}: stderr {err} (expected "
               f"one line holding {want!r})")
    print("mm_sweep_check: the single form prints the base version's lines (plain; --a-warm "
          "--count-ops); 9 refusals in one line")


def check_device_seconds():
    """mm_warm_timing.device_seconds on hand-made profiler events: CUDA kernels and copies
    count, a record_function range's CUDA span (is_user_annotation) and CPU events do not
    (the first H100 sweep summed the ranges too: 0.608 s a step for 0.252 s of kernels)."""
    import types

    from torch.autograd import DeviceType

    sys.path.insert(0, os.path.dirname(TIMING))
    import mm_warm_timing

    def ev(dev, us, ann=False):
        return types.SimpleNamespace(device_type=dev, is_user_annotation=ann,
                                     time_range=types.SimpleNamespace(elapsed_us=lambda: us))

    events = [ev(DeviceType.CUDA, 120), ev(DeviceType.CUDA, 30),  # a kernel, a copy
              ev(DeviceType.CUDA, 165400, ann=True),  # mm_forward_audio's span
              ev(DeviceType.CPU, 9000), ev(DeviceType.CPU, 5000, ann=True)]
    got = mm_warm_timing.device_seconds(events)
    expect(abs(got - 150e-6) < 1e-12, f"device_seconds: {got} s (expected 150 us: 120 + 30)")
    expect(mm_warm_timing.device_seconds([]) == 0, "device_seconds of no events is not 0")
    print(f"mm_sweep_check: device_seconds: {got * 1e6:.0f} us of 2 kernels, the annotation "
          "range and the CPU events left out")


def check_top_ops():
    """mm_warm_timing.top_ops on hand-made key_averages rows: the host-side ops with device
    time, most first, n of them; the kernels' own (device-side) rows, the record_function
    ranges and ops without device time left out."""
    import types

    from torch.autograd import DeviceType

    sys.path.insert(0, os.path.dirname(TIMING))
    import mm_warm_timing

    def row(key, dev, us, count, ann=False):
        return types.SimpleNamespace(key=key, device_type=dev, self_device_time_total=us,
                                     count=count, is_user_annotation=ann)

    rows = [row("aten::copy_", DeviceType.CPU, 42369, 4008),
            row("mm_forward_audio", DeviceType.CPU, 165400, 1, ann=True),
            row("void elementwise_kernel<128, 2>", DeviceType.CUDA, 25974, 1492),
            row("aten::mul", DeviceType.CPU, 59216, 3750),
            row("aten::linear", DeviceType.CPU, 0, 728),
            row("aten::mm", DeviceType.CPU, 30614, 1089)]
    got = mm_warm_timing.top_ops(rows, 2)
    want = [("aten::mul", 59.216, 3750), ("aten::copy_", 42.369, 4008)]
    expect(len(got) == 2 and [(k, c) for k, _, c in got] == [(k, c) for k, _, c in want] and
           all(abs(g[1] - w[1]) < 1e-9 for g, w in zip(got, want)),
           f"top_ops(rows, 2): {got} (expected {want})")
    got = mm_warm_timing.top_ops(rows, 10)
    expect([k for k, _, _ in got] == ["aten::mul", "aten::copy_", "aten::mm"],
           f"top_ops(rows, 10): {[k for k, _, _ in got]} (expected the 3 host-side ops with "
           "device time)")
    expect(mm_warm_timing.top_ops(rows, 0) == [], "top_ops(rows, 0) is not empty")
    print("mm_sweep_check: top_ops: 3 of 6 rows are ops (a kernel's row, a range and an op "
          "without device time left out), most GPU time first")


def main():
    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=2)
        check_device_seconds()
        check_top_ops()
        check_single(data)
        check_render(data)
        check_sweep(data)
        check_oom(data)
        check_loader(data)
    print(f"mm_sweep_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
