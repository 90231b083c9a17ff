#!/usr/bin/env bash
# test_mm_data.sh: tools/python/make_mm_data.py's item plan (issue 35) on a small synthetic corpus:
# the same seed gives the same plan and another seed another; no held-out OCR string is a train
# string, no held-out sentence a train sentence, every held-out sentence's words are train words;
# the held-out voice (en-us+f4, variant f4) and font family (FreeSerif) never appear in training
# and take every other held-out item; the resampler turns a 440 Hz tone at 22050 Hz into the
# 440 Hz tone at 16 kHz (max error 1e-4 away from the edges) and removes a 9 kHz one (above the
# new Nyquist frequency: max 1e-3); every canvas size is a multiple of 48 within the 70-token
# patch budget. Needs numpy only (no espeak-ng, fonts or PIL): the interpreter is $G4_MM_PYTHON,
# else .tools/ort-venv's (tools/install_deps.sh); without numpy the test skips (77).
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_MM_PYTHON:-$G4_SOURCE_DIR/.tools/ort-venv/bin/python}
if [ ! -x "$py" ] || ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "test_mm_data: skipped: no numpy at $py (run tools/install_deps.sh)"
    exit 77
fi
"$py" - "$G4_SOURCE_DIR/tools/python" <<'PY'
import os, random, sys, tempfile
sys.path.insert(0, sys.argv[1])
import numpy as np
import make_mm_data as m

fails = []
def check(what, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        fails.append(what)

# A corpus of plain sentences (4-14 words), deterministic; test.txt reuses the train words.
r = random.Random(5)
words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"]
def text(n):
    paras = []
    for _ in range(n):
        s = " ".join(r.choice(words) for _ in range(r.randint(4, 12)))
        paras.append(s[0].upper() + s[1:] + ".")
    return "\n\n".join(paras)
d = tempfile.mkdtemp()
open(os.path.join(d, "train.txt"), "w").write(text(200))
open(os.path.join(d, "test.txt"), "w").write(text(40))

class A: pass
def plan(seed):
    a = A(); a.seed, a.preset = seed, "tiny"
    return m.plan(a, d)[0]
p0, p0b, p1 = plan(0), plan(0), plan(1)
check("same seed, same plan", p0 == p0b)
check("another seed, another plan", p0 != p1)
au, im = p0["audio"], p0["image"]
tr_s = {i["text"] for i in au if i["split"] == "train"}
te_s = [i["text"] for i in au if i["split"] == "test"]
check(f"{len(te_s)} held-out sentences, none a train sentence", te_s and not set(te_s) & tr_s)
vocab = {w for s in m.sentences(open(os.path.join(d, "train.txt")).read()) for w in m.words_of(s)}
check("held-out sentences use train words only", all(set(m.words_of(s)) <= vocab for s in te_s))
tr_o = {i["text"] for i in im if i["split"] == "train"}
te_o = [i["text"] for i in im if i["split"] == "test"]
check(f"{len(te_o)} held-out strings, none a train string", te_o and not set(te_o) & tr_o)
check("no train voice uses the held-out variant f4",
      all("+f4" not in i["voice"] for i in au if i["split"] == "train"))
te_a = [i for i in au if i["split"] == "test"]
check("every other held-out utterance has the held-out voice",
      all((i["voice"] == m.HELD_OUT_VOICE) == (k % 2 == 1) for k, i in enumerate(te_a)))
fam = dict(m.FONTS)
check("no train image uses the held-out font family",
      all(fam[i["font"]] != m.HELD_OUT_FAMILY for i in im if i["split"] == "train"))
te_i = [i for i in im if i["split"] == "test"]
check("every other held-out image has the held-out font family",
      all((fam[i["font"]] == m.HELD_OUT_FAMILY) == (k % 2 == 1) for k, i in enumerate(te_i)))

t = np.arange(22050) / 22050
y = m.resample(np.sin(2 * np.pi * 440 * t), 22050, 16000)
ref = np.sin(2 * np.pi * 440 * np.arange(len(y)) / 16000)
check(f"440 Hz tone resampled to 16 kHz: {len(y)} samples, max error "
      f"{np.abs(y - ref)[64:-64].max():.2e} <= 1e-4",
      len(y) == 16000 and np.abs(y - ref)[64:-64].max() <= 1e-4)
y9 = m.resample(np.sin(2 * np.pi * 9000 * t), 22050, 16000)
check(f"9 kHz tone removed: max {np.abs(y9)[64:-64].max():.2e} <= 1e-3",
      np.abs(y9)[64:-64].max() <= 1e-3)
sizes = m.fixed_sizes()
check(f"{len(sizes)} canvas sizes, multiples of 48 within 70 x 9 patches",
      sizes and all(h % 48 == 0 and w % 48 == 0 and h * w <= 70 * 9 * 256 for h, w in sizes))
print(f"test_mm_data: {len(fails)} failed")
sys.exit(1 if fails else 0)
PY
