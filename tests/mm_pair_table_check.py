#!/usr/bin/env python3
"""tools/python/mm_pair_table.py on two hand-written train.json files whose table is written out
here by hand (run by tests/test_mm_pair_table.sh). Python 3 standard library only.

A: 100 of 100 steps, held-out rows at steps 0, 50, 100, an LM warm phase with copy rows; B:
stopped at 75 of 100, rows at 0, 50, 75, with a tied read-out head A lacks (its CER and token
frames), an LM warm phase without copy rows; step 50's greedy answers (stopped share, distinct
count) in both. Every value is a multiple of 1/16 or has at most one more decimal than
printed, so no row depends on how a tie rounds. Then: a different seed is said; a train.json
without step_seconds, a held-out row without "rolled", a file that is not JSON and a file that
does not exist each give one line on stderr and exit 1 (no traceback). With A alone:
A's column of the same hand-written table, its rows where A has a value (35 of 45)."""
import copy, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "python", "mm_pair_table.py")
fails = 0

A = {"preset": "proxy", "seed": 0, "device": "cuda", "steps": 100, "stopped_at": None,
     "step_seconds": {"first_5": [1.5, 0.8], "median": 0.7, "max": 1.5, "over_2x_median": 1},
     "seconds": {"train": 336.0, "data_wait": 12.5, "lm_warm": 20.0},
     "lm_warm": {"final_loss": 4.375, "copy": {"final": 5.25, "plain_final": 4.0625}},
     "heldout": [
         {"step": 0, "image": {"loss": 4.0, "zeroed": 4.25, "rolled": 4.5, "soft_rms": 0.1},
          "audio": {"loss": 3.5, "zeroed": 3.5, "rolled": 3.625, "ctc": 5.0, "ctc_cer": 0.9,
                    "ctc_cer_other": 0.95}, "text_rms": 0.2, "seconds": 1.0},
         {"step": 50, "image": {"loss": 3.0, "zeroed": 3.5, "rolled": 3.75,
                                "decode": {"exact": 0.25, "ocrbench": 0.5, "cer": 0.4, "eos": 0.75,
                                           "answers": ["ab", "ab", "cd", "1,5"]}},
          "audio": {"loss": 3.25, "zeroed": 3.25, "rolled": 3.375, "ctc_cer": 0.5,
                    "decode": {"exact": 0.0, "wer": 1.25, "cer": 0.8, "eos": 0.5,
                               "answers": ["x y", "x y"]}}, "seconds": 1.0},
         {"step": 100, "image": {"loss": 2.5, "zeroed": 3.5, "rolled": 3.25},
          "audio": {"loss": 3.0, "zeroed": 3.125, "rolled": 3.0625}, "seconds": 1.0}]}
B = {"preset": "proxy", "seed": 0, "device": "cuda", "steps": 100, "stopped_at": 75,
     "step_seconds": {"first_5": [1.5, 0.9], "median": 0.875, "max": 1.6, "over_2x_median": 1},
     "seconds": {"train": 350.0, "data_wait": 40.3}, "lm_warm": {"final_loss": 3.875},
     "heldout": [
         {"step": 0, "image": {"loss": 4.0, "zeroed": 4.25, "rolled": 4.5},
          "audio": {"loss": 3.5, "zeroed": 3.5, "rolled": 3.625, "ctc_cer": 0.9,
                    "tied_cer": 0.95, "tied_peaks": 0.125}},
         {"step": 50, "image": {"loss": 2.75, "zeroed": 3.5, "rolled": 4.0,
                                "decode": {"exact": 0.5, "ocrbench": 0.75, "eos": 1.0,
                                           "answers": ["ab", "cd", "ef", "gh"]}},
          "audio": {"loss": 3.125, "zeroed": 3.5, "rolled": 3.25, "ctc_cer": 0.375,
                    "tied_cer": 0.625, "tied_peaks": 0.375,
                    "decode": {"exact": 0.125, "wer": 0.875, "eos": 0.625,
                               "answers": ["x y", "x z", "x y"]}}},
         {"step": 75, "image": {"loss": 2.625, "zeroed": 3.5, "rolled": 3.875},
          "audio": {"loss": 3.0, "zeroed": 3.5, "rolled": 3.5}}]}

# the table's rows, worked out by hand from A and B above
ROWS = """\
| steps done | 100 of 100 | 75 of 100 (stopped) | -25 |
| step s median | 0.700 | 0.875 | +0.175 |
| data wait s | 12.5 | 40.3 | +27.8 |
| train s | 336.0 | 350.0 | +14.0 |
| LM warm loss | 4.3750 | 3.8750 | -0.5000 |
| LM warm copy rows loss | 5.2500 | - | - |
| LM warm plain rows loss | 4.0625 | - | - |
| step 0 image loss | 4.0000 | 4.0000 | +0.0000 |
| step 0 image zeroed gap | +0.2500 | +0.2500 | +0.0000 |
| step 0 image rolled gap | +0.5000 | +0.5000 | +0.0000 |
| step 0 audio loss | 3.5000 | 3.5000 | +0.0000 |
| step 0 audio zeroed gap | +0.0000 | +0.0000 | +0.0000 |
| step 0 audio rolled gap | +0.1250 | +0.1250 | +0.0000 |
| step 0 audio head CER | 0.900 | 0.900 | +0.000 |
| step 0 audio tied head CER | - | 0.950 | - |
| step 0 audio tied head token frames | - | 0.125 | - |
| step 50 image loss | 3.0000 | 2.7500 | -0.2500 |
| step 50 image zeroed gap | +0.5000 | +0.7500 | +0.2500 |
| step 50 image rolled gap | +0.7500 | +1.2500 | +0.5000 |
| step 50 image answers exact | 0.250 | 0.500 | +0.250 |
| step 50 image answers OCRBench | 0.500 | 0.750 | +0.250 |
| step 50 image answers stopped | 0.750 | 1.000 | +0.250 |
| step 50 image answers distinct | 3 | 4 | +1 |
| step 50 audio loss | 3.2500 | 3.1250 | -0.1250 |
| step 50 audio zeroed gap | +0.0000 | +0.3750 | +0.3750 |
| step 50 audio rolled gap | +0.1250 | +0.1250 | +0.0000 |
| step 50 audio head CER | 0.500 | 0.375 | -0.125 |
| step 50 audio tied head CER | - | 0.625 | - |
| step 50 audio tied head token frames | - | 0.375 | - |
| step 50 audio answers exact | 0.000 | 0.125 | +0.125 |
| step 50 audio answers WER | 1.250 | 0.875 | -0.375 |
| step 50 audio answers stopped | 0.500 | 0.625 | +0.125 |
| step 50 audio answers distinct | 1 | 2 | +1 |
| step 75 image loss | - | 2.6250 | - |
| step 75 image zeroed gap | - | +0.8750 | - |
| step 75 image rolled gap | - | +1.2500 | - |
| step 75 audio loss | - | 3.0000 | - |
| step 75 audio zeroed gap | - | +0.5000 | - |
| step 75 audio rolled gap | - | +0.5000 | - |
| step 100 image loss | 2.5000 | - | - |
| step 100 image zeroed gap | +1.0000 | - | - |
| step 100 image rolled gap | +0.7500 | - | - |
| step 100 audio loss | 3.0000 | - | - |
| step 100 audio zeroed gap | +0.1250 | - | - |
| step 100 audio rolled gap | +0.0625 | - | - |
""".splitlines()


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print(f"FAIL {what}")


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f) if not isinstance(obj, str) else f.write(obj)
    return path


def one_line_error(r, want, what):
    """exit 1, stderr one line containing want, no traceback"""
    lines = r.stderr.splitlines()
    check(r.returncode == 1, f"{what}: exit {r.returncode}, expected 1")
    check(len(lines) == 1, f"{what}: {len(lines)} stderr lines, expected 1: {r.stderr!r}")
    check(want in r.stderr, f"{what}: stderr {r.stderr!r} lacks {want!r}")
    check("Traceback" not in r.stderr, f"{what}: a traceback")
    check(r.stdout == "", f"{what}: stdout {r.stdout!r}")


with tempfile.TemporaryDirectory() as tmp:
    a, b = write(f"{tmp}/a.json", A), write(f"{tmp}/b.json", B)
    out = f"{tmp}/PAIR.md"
    r = run(a, b, "--a", "--steps 100", "--b", "--steps 100 --lm-copy 0.3", "--out", out)
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    got = [x for x in lines if x.startswith("| ") and not x.startswith("| row ")]
    check(len(got) == len(ROWS) == 45, f"{len(got)} rows, expected {len(ROWS)} (45)")
    for i, (g, w) in enumerate(zip(got, ROWS)):
        check(g == w, f"row {i}: {g!r}, expected {w!r}")
    check(f"A: {a} (--steps 100)" in lines, "no line naming A and its arguments")
    check(f"B: {b} (--steps 100 --lm-copy 0.3)" in lines, "no line naming B and its arguments")
    check("| row | A | B | B - A |" in lines, "no header row")
    check(not any("not the same" in x for x in lines), "same preset / seed / device said to differ")
    check(os.path.exists(out) and open(out).read() == r.stdout, "--out differs from stdout")
    print(r.stdout, end="")

    # A alone: A's column of ROWS, less the rows only B has
    r = run(a, "--a", "--steps 100", "--out", out)
    check(r.returncode == 0, f"A alone: exit {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    got = [x for x in lines if x.startswith("| ") and not x.startswith("| row ")]
    want = [" | ".join(w.split(" | ")[:2]) + " |" for w in ROWS if w.split(" | ")[1] != "-"]
    check(len(got) == len(want) == 35, f"A alone: {len(got)} rows, expected {len(want)} (35)")
    for i, (g, w) in enumerate(zip(got, want)):
        check(g == w, f"A alone row {i}: {g!r}, expected {w!r}")
    check("| row | A |" in lines and f"A: {a} (--steps 100)" in lines, "A alone: no header / A line")
    check(not any(x.startswith("B:") for x in lines), "A alone: a B line")
    check(os.path.exists(out) and open(out).read() == r.stdout, "A alone: --out differs")

    # another seed: said in one line
    b2 = copy.deepcopy(B)
    b2["seed"] = 1
    r = run(a, write(f"{tmp}/b2.json", b2))
    check(r.returncode == 0 and "seed: A 0, B 1 (not the same)" in r.stdout.splitlines(),
          f"a different seed not said: {r.stdout[:300]!r}")
    check("preset:" not in r.stdout, "the same preset said")

    # a missing key: one line naming the file and the key
    b3 = copy.deepcopy(B)
    del b3["step_seconds"]
    p3 = write(f"{tmp}/b3.json", b3)
    one_line_error(run(a, p3), f'{p3}: no "step_seconds.median"', "no step_seconds")
    a4 = copy.deepcopy(A)
    del a4["heldout"][1]["audio"]["rolled"]
    p4 = write(f"{tmp}/a4.json", a4)
    one_line_error(run(p4, b), f'{p4}: heldout[1]: no "audio.rolled"', "no held-out rolled")
    a5 = copy.deepcopy(A)
    a5["seconds"]["data_wait"] = None
    p5 = write(f"{tmp}/a5.json", a5)
    one_line_error(run(p5, b), f'{p5}: no "seconds.data_wait"', "data_wait null")
    p6 = write(f"{tmp}/bad.json", "{ not json")
    one_line_error(run(a, p6), f"{p6}: not JSON", "not JSON")
    one_line_error(run(a, f"{tmp}/none.json"), f"{tmp}/none.json: cannot read", "no file")
    r = run(a, p3, "--out", f"{tmp}/x.md")
    check(not os.path.exists(f"{tmp}/x.md"), "--out written despite the error")

    # no held-out evaluation (--eval-every 0: heldout []): the run and LM warm rows only
    a7, b7 = copy.deepcopy(A), copy.deepcopy(B)
    a7["heldout"], b7["heldout"] = [], []
    r = run(write(f"{tmp}/a7.json", a7), write(f"{tmp}/b7.json", b7))
    got = [x for x in r.stdout.splitlines() if x.startswith("| ") and not x.startswith("| row ")]
    check(r.returncode == 0 and got == ROWS[:7], f"no held-out rows: {got}")

    # no LM warm phase in either run: no LM warm row
    a8, b8 = copy.deepcopy(A), copy.deepcopy(B)
    del a8["lm_warm"], b8["lm_warm"]
    r = run(write(f"{tmp}/a8.json", a8), write(f"{tmp}/b8.json", b8))
    got = [x for x in r.stdout.splitlines() if x.startswith("| ") and not x.startswith("| row ")]
    check(r.returncode == 0 and got == ROWS[:4] + ROWS[7:], f"no LM warm: {len(got)} rows")

print(f"mm_pair_table_check: {fails} failed")
sys.exit(1 if fails else 0)
