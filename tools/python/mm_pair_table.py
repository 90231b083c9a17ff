#!/usr/bin/env python3
"""Two recipes of the multimodal proxy side by side (issue 35; tools/gpu/run.sh's mm_make with
MM_TRAIN_ARGS_B trains B beside A on the same GPU and data): one table from the two runs'
train.json files (tools/python/train_mm_proxy.py). With one file, that run's column alone
(mm_make without B writes it as RUN.md; a run of another start is compared by naming both).

    python3 tools/python/mm_pair_table.py A/train.json [B/train.json] [--a ARGS] [--b ARGS]
        [--out PAIR.md]

Rows, a column per run and B - A where both have a value:
  steps done      the joint phase's steps done of its planned steps ("stopped": --minutes ran
                  out first; train.json's stopped_at, else steps)
  step s median   the joint steps' median seconds (step_seconds.median)
  data wait s     seconds the steps waited on the loaders (seconds.data_wait)
  train s         the joint phase's seconds (seconds.train)
  LM warm loss    the --lm-warm-steps phase's final loss (lm_warm.final_loss; its last 50
                  steps), and with --lm-copy its copy rows' and plain rows' (lm_warm.copy.final,
                  .plain_final): a decoder that learnt to copy has copy under plain
                  (these three: only where a run has them)
then for each held-out evaluation (--eval-every: train.json's heldout, by step) and kind
(image, audio): the held-out answer loss as is, the zeroed and rolled gaps (zeroed / rolled
minus as is: how much the answers depend on the item's own media), the read-out heads' CER
(ctc_cer: --ctc-weight's / --v-aux-weight's head; tied_cer: --ctc-tied's / --v-aux-tied's), the
tied head's token frames (tied_peaks: the share of frames whose argmax is not the blank; ~0: CTC
on its all-blank plateau, bench/NOTES.md "The tied head's plateau") and,
with --eval-decode, the greedy answers' exact match and OCRBench accuracy (image) or WER
(audio), the share of answers that stopped at an end id (decode.eos) and how many
differ (decode.answers: one stock answer for every item says the decoder ignores the media).
A value only one run has (another head, an evaluation at a step the other did not
reach) is "-" for the other. The table is printed and, with --out, written there.
A file that is not JSON, or a train.json without what a row needs (steps, step_seconds.median,
seconds.data_wait, seconds.train; a held-out row's step, loss, zeroed, rolled): one line naming
the file and the key, exit 1.
Python 3 standard library only (tests/mm_pair_table_check.py).
"""
import argparse
import json
import sys


class Missing(Exception):
    pass


def need(j, name, *keys):
    """j[keys[0]][keys[1]]...; a key absent (or not a number where a number is read): Missing."""
    x = j
    for k in keys:
        if not isinstance(x, dict) or k not in x or x[k] is None:
            raise Missing(f"{name}: no \"{'.'.join(keys)}\" (a train_mm_proxy.py train.json?)")
        x = x[k]
    return x


def get(j, *keys):
    """j[keys[0]][keys[1]]... or None."""
    for k in keys:
        if not isinstance(j, dict) or j.get(k) is None:
            return None
        j = j[k]
    return j


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise Missing(f"{path}: cannot read ({e.strerror})")
    except ValueError as e:
        raise Missing(f"{path}: not JSON ({e})")


# held-out rows a kind: (label, fmt, value of the kind's record r); None: not in this run
HELD = (
    ("loss", "{:.4f}", lambda r: r["loss"]),
    ("zeroed gap", "{:+.4f}", lambda r: r["zeroed"] - r["loss"]),
    ("rolled gap", "{:+.4f}", lambda r: r["rolled"] - r["loss"]),
    ("head CER", "{:.3f}", lambda r: get(r, "ctc_cer")),
    ("tied head CER", "{:.3f}", lambda r: get(r, "tied_cer")),
    ("tied head token frames", "{:.3f}", lambda r: get(r, "tied_peaks")),
    ("answers exact", "{:.3f}", lambda r: get(r, "decode", "exact")),
    ("answers OCRBench", "{:.3f}", lambda r: get(r, "decode", "ocrbench")),
    ("answers WER", "{:.3f}", lambda r: get(r, "decode", "wer")),
    ("answers stopped", "{:.3f}", lambda r: get(r, "decode", "eos")),
    ("answers distinct", "{:.0f}", lambda r: distinct(get(r, "decode", "answers"))),
)

# the LM warm phase's rows: (label, keys); a row only where a run has the value
LM_WARM = (("LM warm loss", ("lm_warm", "final_loss")),
           ("LM warm copy rows loss", ("lm_warm", "copy", "final")),
           ("LM warm plain rows loss", ("lm_warm", "copy", "plain_final")))


def distinct(answers):
    """How many different answers (None without a list)."""
    return None if answers is None else len({json.dumps(x) for x in answers})


def held_rows(j, name):
    """{step: {kind: record}} of train.json's heldout, each record's loss / zeroed / rolled
    checked present."""
    out = {}
    for i, row in enumerate(j.get("heldout") or []):
        step = need(row, f"{name}: heldout[{i}]", "step")
        out[step] = {}
        for kind in ("image", "audio"):
            if kind in row:
                for k in ("loss", "zeroed", "rolled"):
                    need(row, f"{name}: heldout[{i}]", kind, k)
                out[step][kind] = row[kind]
    return out


def signed(f):
    """The format f with a sign (B - A's column)."""
    return f if f.startswith("{:+") else "{:+" + f[2:]


def rows(a, b, na, nb):
    """[(label, A text, B text, B - A text)]."""
    def steps(j, name):
        n = need(j, name, "steps")
        stop = j.get("stopped_at")
        return (stop, n) if stop else (n, n)

    def steps_text(s):
        return f"{s[0]} of {s[1]}" + (" (stopped)" if s[0] < s[1] else "")

    sa, sb = steps(a, na), steps(b, nb)
    out = [("steps done", steps_text(sa), steps_text(sb), f"{sb[0] - sa[0]:+d}")]
    for label, keys, f in (("step s median", ("step_seconds", "median"), "{:.3f}"),
                           ("data wait s", ("seconds", "data_wait"), "{:.1f}"),
                           ("train s", ("seconds", "train"), "{:.1f}")):
        x, y = need(a, na, *keys), need(b, nb, *keys)
        out.append((label, f.format(x), f.format(y), signed(f).format(y - x)))
    for label, keys in LM_WARM:
        x, y = get(a, *keys), get(b, *keys)
        if x is not None or y is not None:
            out.append(pair_row(label, "{:.4f}", x, y))
    ha, hb = held_rows(a, na), held_rows(b, nb)
    for step in sorted(set(ha) | set(hb)):
        for kind in ("image", "audio"):
            ra, rb = ha.get(step, {}).get(kind), hb.get(step, {}).get(kind)
            if ra is None and rb is None:
                continue
            for label, f, val in HELD:
                x = val(ra) if ra is not None else None
                y = val(rb) if rb is not None else None
                if x is not None or y is not None:
                    out.append(pair_row(f"step {step} {kind} {label}", f, x, y))
    return out


def pair_row(label, f, x, y):
    """(label, A text, B text, B - A text) of values x, y (None: "-")."""
    d = "-" if x is None or y is None else signed(f).format(y - x)
    return (label, "-" if x is None else f.format(x), "-" if y is None else f.format(y), d)


def table(a, b, pa, pb, args_a, args_b):
    name_a = f"A: {pa}" + (f" ({args_a})" if args_a else "")
    if b is None:  # one run: its own column of the table of the run beside itself
        return "\n".join(["# One recipe (mm_make)", "", name_a, "", "| row | A |", "|---|---:|"] +
                         [f"| {r} | {x} |" for r, x, _, _ in rows(a, a, pa, pa)]) + "\n"
    lines = ["# Two recipes in one start (mm_make, MM_TRAIN_ARGS_B)", "", name_a,
             f"B: {pb}" + (f" ({args_b})" if args_b else ""), ""]
    for k in ("preset", "seed", "device"):
        if a.get(k) != b.get(k):
            lines.append(f"{k}: A {a.get(k)}, B {b.get(k)} (not the same)")
    lines += ["| row | A | B | B - A |", "|---|---:|---:|---:|"]
    lines += [f"| {r} | {x} | {y} | {d} |" for r, x, y, d in rows(a, b, pa, pb)]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="run A's train.json")
    ap.add_argument("b", nargs="?", help="run B's train.json (none: A's column alone)")
    ap.add_argument("--a", dest="args_a", default="", help="A's training arguments (a label)")
    ap.add_argument("--b", dest="args_b", default="", help="B's training arguments (a label)")
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args()
    try:
        b = None if args.b is None else load(args.b)
        text = table(load(args.a), b, args.a, args.b, args.args_a, args.args_b)
    except Missing as e:
        print(f"mm_pair_table: {e}", file=sys.stderr)
        return 1
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
