#!/usr/bin/env python3
"""The seconds of a --v-warm-steps step (train_mm_proxy.vision_warm_step: the image half-batch
through the vision tower and embed_vision, VisionAux's CTC alone) against a joint step
(train_step: the same image half-batch and an audio half-batch through the towers and the
decoder, both backwards), on the same fixed batches, interleaved (warm, joint, warm, ...) so
that the machine's load falls on both alike (bench/NOTES.md "vpre: a vision-only warm phase").
--a-warm: a third step in each round, the warm step with --a-warm's audio half (the same image
half-batch and the joint step's clips through the audio tower and embed_audio, AudioChars' CTC
added; its own warm optimizer over both sides and both heads), and the joint step then carries
that head's loss too (--ctc-weight 0.5 --ctc-units chars, as the runs it stands for); the order
in a round: warm, warm + audio, joint (bench/NOTES.md "awarm: the warm phase for the audio side").
--count-ops: then one more step of each kind under torch.profiler, its launch-like ops counted
as train_mm_proxy.step_ops counts them (the GPU step is launch-bound: bench/NOTES.md "The
multimodal proxy's step is CPU-bound"), one line.

--batches B1,B2,... (the sweep; issue 35's "how fast can the proxy train": bench/NOTES.md "How
fast can the proxy train: the batch sweep"): one model, one optimizer, and for each batch size B
in turn (B / 2 images + B / 2 clips, the first of the plan's train items as the single form's)
--rounds timed steps of the joint step (and, with --a-warm, then of the warm + audio step) after
one untimed step of each; one row a (kind, B): the median seconds a step, B / that as items/s and,
on CUDA, torch.cuda.max_memory_allocated over that row's steps (the peak reset before each row);
--gpu-busy (CUDA) adds the seconds the GPU itself worked in one more, profiled step (kernels and
copies summed): near the median, the step waits on the GPU; far below it, on the host.
An out-of-memory error at a size prints that row as OOM, frees what the step held, and the sweep
goes on. The sweep runs as the trainer runs: its determinism settings
(train_mm_proxy.deterministic_mode, --strict-determinism), the groups at lr 0 out of the backward
(train_groups: the proxy preset's audio side unless --a-lr-mult X), the warm step with only the
warm optimizer's tensors needing a gradient (vision_warm's), and the recipe options that change
what a step computes: --pad-to, --split-digits, --ctc-weight / --ctc-units / --ctc-at (default,
as the single form: 0.5, chars, embed with --a-warm, none without), --ctc-tied; the image aux
head at weight 0.5 (the recipe's --v-aux-weight). Left out (a step's cost barely moves): the
init-only options (--a-res-scale, --v-proj-init), the learning rates' values (--tower-joint-lr-
mult), --dec-freeze-steps (its first joint steps skip the decoder's weight gradients and AdamW:
cheaper, and only 100 of 480), --lm-copy / --lm-warm-steps (the LM warm phase is its own step).
--loader-workers W1,W2,... (the loader measurement): the trainer's own two loaders (Items,
collate, forever: the same augmentations, --reps renderings and --a-speed-perturb, its seeds,
W split as stream_workers splits --workers, page-locked on CUDA), no model: for each W, after
--loader-warmup batches (default: one a worker of the image loader, at least 2), --loader-batches
joint batches of --batch (an image half then an audio half, as a step takes them) timed; one row:
the items counted, the seconds, items/s, and the seconds spent waiting on each half.
Either or both replace the single form (nothing else is timed); the recipe options are refused
in the single form (the loader reads --pad-to and --split-digits, the sweep all of them).

    python3 tools/python/mm_warm_timing.py DATA [--preset tiny] [--batch 16] [--rounds 20]
                                                [--threads 1] [--device cpu] [--a-warm]
                                                [--count-ops]
    python3 tools/python/mm_warm_timing.py DATA --batches 64,128,256 [--rounds 5] [--a-warm]
                                                [--pad-to 64] [--strict-determinism] ...
                                                [--render-workers N]
                                                [--loader-workers 7,14] [--loader-batches 20]

DATA: make_mm_data.py's folder (the first half-batch of train images and clips, rendering 0).
The single form prints each kind's median and the ratio, one line; the sweep and the loader
one line a row."""
import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_mm_proxy as tmp  # noqa: E402


# the sweep's recipe options (train_mm_proxy.py's of the same names: what a step computes)
SWEEP_OPTIONS = [
    ("--pad-to", dict(type=int, default=0, help="collate's --pad-to (the recipe's 64)")),
    ("--strict-determinism", dict(action="store_true",
                                  help="deterministic_mode(strict): the trainer's option")),
    ("--split-digits", dict(action="store_true", help="the tokenizer's (the trainer's option)")),
    ("--ctc-weight", dict(type=float, help="the audio CTC head's weight (default 0.5 with "
                          "--a-warm, else none)")),
    ("--ctc-units", dict(choices=["tokens", "chars"], help="the head (default chars)")),
    ("--ctc-at", dict(choices=["embed", "tower"], help="where it reads (default embed)")),
    ("--ctc-tied", dict(action="store_true", help="the tied CTC head too (the trainer's)")),
    ("--a-lr-mult", dict(type=float, help="the audio side's lr multiplier (the preset's; 0: "
                         "frozen, no backward into it)")),
    ("--gpu-busy", dict(action="store_true", help="one more step a row under torch.profiler: "
                        "the seconds its CUDA kernels and copies ran (CUDA only)")),
    ("--top-ops", dict(type=int, default=0, help="with --gpu-busy: the row also names the N "
                       "ops of most GPU time in its profiled step")),
]


def device_seconds(events):
    """The seconds of device work in profiler events: the CUDA kernels, copies and fills
    summed (overlapping ones as if serial: the trainer runs one stream). A record_function
    range (the trainer's mm_forward_image, mm_backward_audio, ...) also appears as a CUDA
    event, spanning its first to last kernel with the idle gaps between: it is no work of its
    own and is left out (counting them made the first H100 sweep say 0.608 s a step where the
    kernels took 0.252 s: bench/NOTES.md "The batch sweep on the H100")."""
    from torch.autograd import DeviceType

    return sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False)) / 1e6


def top_ops(rows, n):
    """The n ops of most device time in profiler rows (prof.key_averages()): [(name, ms,
    calls)], most first. An op row is a host-side one (aten::mul, ...) whose kernels ran on the
    device (self_device_time_total: its own kernels, not its children's); the kernels' own rows
    (device-side: the same time again) and the record_function ranges are left out."""
    from torch.autograd import DeviceType

    ops = [(r.key, r.self_device_time_total / 1e3, r.count) for r in rows
           if r.device_type == DeviceType.CPU and not getattr(r, "is_user_annotation", False)
           and r.self_device_time_total > 0]
    return sorted(ops, key=lambda o: -o[1])[:n]


def gpu_busy(run, n_top=0):
    """The seconds of device work (device_seconds) of one call of run() profiled, that call's
    wall seconds (the profiler's host overhead in it) and its n_top ops (top_ops)."""
    act = torch.profiler.ProfilerActivity
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[act.CPU, act.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return device_seconds(prof.events()), wall, top_ops(prof.key_averages(), n_top)


def int_list(spec, flag, least):
    """A comma-separated list of integers, each `least` or more (else one line, exit 1)."""
    try:
        vals = [int(x) for x in spec.split(",")]
    except ValueError:
        vals = []
    if not vals or any(v < least for v in vals):
        raise SystemExit(f"mm_warm_timing: {flag} {spec}: expected integers, {least} or more, "
                         "comma-separated")
    return vals


def loader_row(args, p, dev, tr_i, tr_a, fonts, pr, fe, w):
    """One loader row: train_mm_proxy.main's two streams (its Items, forever and collate, its
    seeds 0 and 1, w split by stream_workers, its cache rule, pinned on CUDA) with w workers,
    --loader-warmup joint batches untimed, then --loader-batches timed; prints the items counted
    (each half's rows), the seconds, items/s and each half's waits. The workers end with it."""
    half = args.batch // 2
    wi, wa = tmp.stream_workers(w)
    cache = tmp.cache_items(w, len(tr_i) + len(tr_a))
    streams = [tmp.item_stream(items, kind, args.data, fonts, pr, fe, p, cache, half, seed, w,
                               args.pad_to, dev.type == "cuda")
               for seed, (kind, items) in enumerate((("image", tr_i), ("audio", tr_a)))]
    warm = max(2, wi) if args.loader_warmup is None else args.loader_warmup
    t0 = time.perf_counter()
    for _ in range(warm):
        for s in streams:
            next(s)
    t1 = time.perf_counter()
    waits, items = [0.0, 0.0], 0
    for _ in range(args.loader_batches):
        for k, s in enumerate(streams):
            tw = time.perf_counter()
            items += len(next(s)["input_ids"])
            waits[k] += time.perf_counter() - tw
    sec = time.perf_counter() - t1
    for s in streams:
        s.close()
    del streams
    gc.collect()
    print(f"mm_warm_timing: loader {w} workers ({wi} image + {wa} audio), batch {2 * half} "
          f"(reps {p['reps']}, speed perturb {p.get('a_speed_perturb', 0.0):g}"
          + (", cached" if cache else "") + f"): {args.loader_batches} batches = {items} items "
          f"in {sec:.3f} s after {warm} warm-up ({t1 - t0:.3f} s): {items / sec:.1f} items/s "
          f"(waits: image {waits[0]:.3f} s, audio {waits[1]:.3f} s)", flush=True)


def _one(x):  # (render_items' collate: the item as Items gives it)
    return x


def render_items(ds, n, workers):
    """ds.render(k) for k < n (Items: the first n train items, then later renderings), by
    `workers` processes (0: here), in order; each worker's native pools at one thread, as the
    trainer's (train_mm_proxy.worker_init)."""
    if not workers:
        return [ds.render(k) for k in range(n)]
    dl = torch.utils.data.DataLoader(ds, batch_size=None, sampler=range(n), num_workers=workers,
                                     collate_fn=_one, worker_init_fn=tmp.worker_init)
    return list(dl)


def sweep(args, p, dev, tok, pr, fe, fonts, tr_i, tr_a, batches):
    """--batches: the rows (the module's docstring)."""
    if args.gpu_busy and dev.type != "cuda":
        raise SystemExit(f"mm_warm_timing: --gpu-busy: the device's own time needs CUDA (not "
                         f"{dev})")
    tmp.deterministic_mode(args.strict_determinism)
    ctc_w = args.ctc_weight if args.ctc_weight is not None else 0.5 if args.a_warm else 0.0
    units, at = args.ctc_units or "chars", args.ctc_at or "embed"
    if args.a_warm and not ctc_w:
        raise SystemExit("mm_warm_timing: --a-warm with --ctc-weight 0: its warm step is the "
                         "audio CTC head's")
    if args.ctc_tied and (not ctc_w or at != "embed"):
        raise SystemExit("mm_warm_timing: --ctc-tied needs --ctc-weight W > 0 and --ctc-at "
                         "embed (the trainer's rule)")
    if args.a_warm and not p.get("a_lr_mult", 1.0):
        raise SystemExit("mm_warm_timing: --a-warm with the audio side at lr x 0: give "
                         "--a-lr-mult X (the trainer's rule)")
    tr = time.perf_counter()  # (the fixed items first: the workers fork before CUDA starts)
    most = max(batches) // 2
    fixed = {kind: render_items(tmp.Items(items, kind, args.data, fonts, pr, fe, 1), most,
                                args.render_workers)
             for kind, items in (("image", tr_i), ("audio", tr_a))}
    tr = time.perf_counter() - tr
    torch.manual_seed(0)
    model = tmp.build_model(p, tok, 0, v_pos_init=args.v_pos_init).to(dev).train()
    turn = pr.id["<turn|>"]
    vaux = tmp.VisionAux(model, "".join(i["text"] for i in tr_i), 0, tok, turn).to(dev)
    head = None
    if ctc_w:
        head = (tmp.AudioChars(model, at, 0, tok, turn) if units == "chars" else
                tmp.CtcHead(model, p["vocab"], at)).to(dev)
    tied = tmp.TiedCtcHead(model, p["vocab"], 0).to(dev) if args.ctc_tied else None
    opt = tmp.make_optimizer(model, p, head, dev, "auto", vaux, 1.0, tied)
    for g in opt.param_groups:
        g["lr"] = p["lr"] * g["mult"]
    heads = [h for h in (vaux, head, tied) if h is not None]
    wopt = wlive = None
    if args.a_warm:
        wopt = tmp.warm_optimizer(model, p, vaux, tmp.opt_impl(opt), head, tied)
        for g in wopt.param_groups:
            g["lr"] = p["lr"] * g["mult"]
        wlive = [x for g in wopt.param_groups for x in g["params"]]
    kinds = ["joint"] + (["a_warm"] if args.a_warm else [])
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    amp = cuda
    guard = tmp.StepGuard(len(batches) * len(kinds) * (args.rounds + 1) + 3)
    losses = {k: [] for k in ("image", "audio", "ctc", "ctc_tied", "a_var", "a_cov", "v_aux",
                              "v_aux_tied", "v_warm", "v_warm_tied", "a_warm", "a_warm_tied")}
    n_params = sum(x.numel() for x in model.parameters())
    print(f"mm_warm_timing: sweep, {args.preset} ({n_params:,} parameters) on {dev} "
          f"({torch.get_num_threads()} threads): pad-to {args.pad_to}, strict determinism "
          f"{'on' if args.strict_determinism else 'off'}, joint step: image aux x 0.5"
          + (f", audio ctc x {ctc_w:g} ({units} at {at})" if head is not None else "")
          + (", tied ctc" if tied is not None else "")
          + f", audio side lr x {p.get('a_lr_mult', 1.0):g}; {args.rounds} rounds a row after "
          f"1 untimed; {most} images + {most} clips rendered in {tr:.1f} s",
          flush=True)

    def oom_after_image(model_, b, lab, amp_):  # (--inject-oom: after the image half's forward)
        loss = tmp.half_loss(model_, b, lab, amp_)
        if "input_features" in b:
            raise torch.OutOfMemoryError("injected (--inject-oom)")
        return loss

    def run(kind, r, bt, loss_fn, live):
        if kind == "joint":
            tmp.train_step(model, opt, bt, r, guard, losses, head, ctc_w, amp, live=live,
                           loss_fn=loss_fn, vaux=vaux, vaux_w=0.5, tied=tied, tied_w=ctc_w)
        else:
            tmp.vision_warm_step(model, vaux, wopt, dict(bt["image"]), r, guard, losses, amp,
                                 wlive, head, dict(bt["audio"]), tied, 1.0)

    def free():  # what a failed step left: gradients, the heads' captured frames, the cache
        for o in (opt, wopt):
            if o is not None:
                o.zero_grad(set_to_none=True)
        for h in heads:
            if getattr(h, "tap", None) is not None:
                h.tap.frames = h.tap.valid = None
        vaux.frames = None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()

    for B in batches:
        h = B // 2
        what = f"batch {B} ({h} images + {h} clips)"
        err, bt = None, None
        try:
            bt = {k: {n: v.to(dev) for n, v in tmp.collate(fixed[k][:h], args.pad_to).items()}
                  for k in ("image", "audio")}
        except torch.OutOfMemoryError as e:
            err = str(e).splitlines()[0][:200]
        for kind in kinds:
            if err is not None:  # (the batch itself did not fit)
                print(f"mm_warm_timing: sweep {kind} {what}: OOM ({err})", flush=True)
                continue
            if kind == "joint":
                live = tmp.train_groups(opt, [g["lr"] > 0 for g in opt.param_groups])
            else:  # (vision_warm's: only the warm optimizer's tensors need a gradient)
                keep = {id(x) for x in wlive}
                for x in list(model.parameters()) + [x for hd in heads for x in hd.parameters()]:
                    x.requires_grad_(id(x) in keep)
                live = wlive
            loss_fn = oom_after_image if args.inject_oom == B else tmp.half_loss
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            secs, oom, busy = [], None, ""
            try:
                for r in range(args.rounds + 1):  # round 0: untimed (first use of the shapes)
                    sync()
                    t0 = time.perf_counter()
                    run(kind, r, bt, loss_fn, live)
                    sync()
                    if r:
                        secs.append(time.perf_counter() - t0)
                if args.gpu_busy:  # (after the timed rounds: the profiler slows the host)
                    try:
                        g, w, top = gpu_busy(lambda: run(kind, args.rounds + 1, bt, loss_fn,
                                                         live), args.top_ops)
                        pct = 100 * g / statistics.median(secs)
                        busy = (f", GPU busy {g:.3f} s a step ({pct:.0f}% of the median; the "
                                f"profiled step {w:.3f} s)")
                        if top:
                            busy += ("; top ops, GPU ms (calls): " +
                                     ", ".join(f"{k} {ms:.1f} ({c})" for k, ms, c in top))
                    except torch.OutOfMemoryError:
                        raise
                    except Exception as e:  # (a profiler's failure costs the column, not the row)
                        busy = f", GPU busy ? ({type(e).__name__}: {str(e)[:100]})"
            except torch.OutOfMemoryError as e:
                oom = str(e).splitlines()[0][:200]
            if oom is not None:
                free()
                print(f"mm_warm_timing: sweep {kind} {what}: OOM ({oom})", flush=True)
                continue
            med = statistics.median(secs)
            peak = (f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if cuda else
                    "peak - (not CUDA)")
            print(f"mm_warm_timing: sweep {kind} {what}: {med:.3f} s a step (median of "
                  f"{len(secs)}, min {min(secs):.3f}), {B / med:.1f} items/s, {peak}{busy}",
                  flush=True)
        bt = None
        free()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--preset", choices=sorted(tmp.PRESETS), default="tiny")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--v-pos-init", type=float, default=0.02)
    ap.add_argument("--count-ops", action="store_true",
                    help="count each step kind's launch-like ops (one profiled step each)")
    ap.add_argument("--a-warm", action="store_true",
                    help="also time the warm step with the audio side (vision_warm_step's head)")
    ap.add_argument("--batches", metavar="B1,B2,...",
                    help="the sweep: these batch sizes (even, 2 or more) instead of --batch")
    ap.add_argument("--loader-workers", metavar="W1,W2,...",
                    help="the loader measurement: the trainer's loaders with W workers each")
    ap.add_argument("--loader-batches", type=int, default=20,
                    help="joint batches timed a loader row (after the warm-up)")
    ap.add_argument("--loader-warmup", type=int,
                    help="joint batches taken before a loader row's clock starts (default: the "
                    "image loader's workers, at least 2)")
    ap.add_argument("--reps", type=int, help="the loader's renderings of each item (the preset's)")
    ap.add_argument("--a-speed-perturb", type=float, metavar="F",
                    help="the loader's speed perturbation of the clips (the trainer's option)")
    ap.add_argument("--render-workers", type=int, default=0,
                    help="the sweep's fixed batches rendered by this many processes (0: here)")
    for flag, kw in SWEEP_OPTIONS:
        ap.add_argument(flag, **kw)
    ap.add_argument("--inject-oom", type=int, metavar="B",
                    help="a test hook: the sweep's joint step at batch B raises an "
                    "out-of-memory error after its image half (tests/mm_sweep_check.py)")
    args = ap.parse_args()
    if args.rounds < 2 or args.batch < 2:
        raise SystemExit("mm_warm_timing: --rounds and --batch: expected 2 or more")
    if args.top_ops < 0 or (args.top_ops and not args.gpu_busy):
        raise SystemExit(f"mm_warm_timing: --top-ops {args.top_ops}: expected 0 or more, and "
                         "--gpu-busy (the ops are its profiled step's)")
    batches = int_list(args.batches, "--batches", 2) if args.batches is not None else None
    if batches and any(b % 2 for b in batches):
        raise SystemExit(f"mm_warm_timing: --batches {args.batches}: expected even sizes")
    workers = (int_list(args.loader_workers, "--loader-workers", 0)
               if args.loader_workers is not None else None)
    if batches is None and workers is None:
        given = [flag for flag, kw in SWEEP_OPTIONS + [("--inject-oom", {})]
                 if getattr(args, flag[2:].replace("-", "_")) not in (None, False, 0)]
        if given:
            raise SystemExit(f"mm_warm_timing: {', '.join(given)}: the sweep's options (give "
                             "--batches; the loader's --pad-to and --split-digits too)")
    if args.loader_batches < 1 or (args.loader_warmup is not None and args.loader_warmup < 0):
        raise SystemExit("mm_warm_timing: --loader-batches: expected 1 or more, "
                         "--loader-warmup 0 or more")
    if args.threads:  # (0: torch's choice, as the trainer's --threads 0)
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    p = dict(tmp.PRESETS[args.preset])
    for k in ("reps", "a_speed_perturb", "a_lr_mult"):
        if getattr(args, k) is not None:
            p[k] = getattr(args, k)
    audio, images = tmp.load_items(args.data)
    tr_a = tmp.train_split(audio)
    tr_i = tmp.train_split(images)
    with tempfile.TemporaryDirectory() as d:
        tok = tmp.make_tokenizer([i["text"] for i in tr_a + tr_i], p["vocab"],
                                 os.path.join(d, "tokenizer.json"), args.split_digits)
    pr = tmp.Prompter(tok)
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe, fonts, half = Gemma4AudioFeatureExtractor(), tmp.mmd.font_roots(None), args.batch // 2
    if workers is not None:
        pools = [f"{os.path.basename(path)} {get()}" for path, get, _ in tmp.openblas_pools()]
        print("loader threads: this process's OpenBLAS pools: " + (", ".join(pools) or "none "
              "found") + "; each loader worker's: 1 (train_mm_proxy.worker_init)", flush=True)
        for w in workers:
            loader_row(args, p, dev, tr_i, tr_a, fonts, pr, fe, w)
    if batches is not None:
        sweep(args, p, dev, tok, pr, fe, fonts, tr_i, tr_a, batches)
    if workers is not None or batches is not None:
        return
    torch.manual_seed(0)
    model = tmp.build_model(p, tok, 0, v_pos_init=args.v_pos_init).to(dev).train()
    vaux = tmp.VisionAux(model, "".join(i["text"] for i in tr_i), 0, tok,
                         pr.id["<turn|>"]).to(dev)
    batches = {}
    for kind, items in (("image", tr_i), ("audio", tr_a)):
        ds = tmp.Items(items, kind, args.data, fonts, pr, fe, 1)
        batches[kind] = {k: v.to(dev) for k, v in
                         tmp.collate([ds.render(k) for k in range(half)]).items()}
    head = tmp.AudioChars(model, "embed", 0, tok, pr.id["<turn|>"]).to(dev) if args.a_warm \
        else None
    opt = tmp.make_optimizer(model, p, head, dev, "auto", vaux)
    for g in opt.param_groups:
        g["lr"] = p["lr"] * g["mult"]
    wopts = {}  # (a warm optimizer each, as each run has its own)
    for kind, h in (("warm", None), ("a_warm", head)):
        if kind == "warm" or head is not None:
            o = tmp.warm_optimizer(model, p, vaux, tmp.opt_impl(opt), h)
            for g in o.param_groups:
                g["lr"] = p["lr"] * g["mult"]
            wopts[kind] = (o, [x for g in o.param_groups for x in g["params"]], h)
    live = tmp.trained_params(opt)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    guard, losses = tmp.StepGuard(3 * args.rounds + 3), {k: [] for k in (
        "image", "audio", "ctc", "a_var", "a_cov", "v_aux", "v_warm", "a_warm")}
    amp = dev.type == "cuda"
    secs = {k: [] for k in list(wopts) + ["joint"]}
    def run(kind, r):
        if kind == "joint":
            tmp.train_step(model, opt, batches, r, guard, losses, head, 0.5 if head else 0.0,
                           amp, live=live, vaux=vaux, vaux_w=0.5)
        else:
            o, wlive, h = wopts[kind]
            tmp.vision_warm_step(model, vaux, o, dict(batches["image"]), r, guard, losses, amp,
                                 wlive, h, dict(batches["audio"]))

    for r in range(args.rounds + 1):  # round 0: warm-up of each, not counted
        t = {}
        for kind in secs:
            sync()
            t0 = time.time()
            run(kind, r)
            sync()
            t[kind] = time.time() - t0
        if r:
            for k, v in t.items():
                secs[k].append(v)
    med = {k: statistics.median(v) for k, v in secs.items()}
    w, j = med["warm"], med["joint"]
    print(f"mm_warm_timing: {args.preset}, {half} images (+ {half} clips in the joint step"
          + (" and the audio warm step, AudioChars' CTC in both" if head else "") + "), "
          f"{args.rounds} rounds on {dev} ({args.threads} threads): warm step median {w:.3f} s "
          f"(min {min(secs['warm']):.3f}), "
          + (f"warm + audio step median {med['a_warm']:.3f} s (min {min(secs['a_warm']):.3f}), "
             if head else "")
          + f"joint step median {j:.3f} s (min {min(secs['joint']):.3f}): warm / joint "
          f"{w / j:.3f}"
          + (f", warm + audio / joint {med['a_warm'] / j:.3f}, warm + audio / warm "
             f"{med['a_warm'] / w:.3f}" if head else ""))
    if args.count_ops:
        ops = {}
        for kind in secs:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as pr_:
                run(kind, args.rounds + 1)
            ops[kind] = tmp.step_ops(pr_.events())
        print("mm_warm_timing: launch-like ops a step (step_ops): " + "; ".join(
            f"{k} {v['total']} ({', '.join(f'{a} {b}' for a, b in sorted(v['phase'].items()))})"
            for k, v in ops.items()))


if __name__ == "__main__":
    main()
