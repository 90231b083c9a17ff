#!/usr/bin/env bash
# test_mm_data.sh: tools/python/make_mm_data.py's item plan (issue 35) on a small synthetic corpus:
# the same seed gives the same plan and another seed another; no held-out OCR string is a train
# string, no held-out sentence a train sentence, every held-out sentence's words are train words;
# the held-out voice (en-us+f4, variant f4) and font family (FreeSerif) never appear in training
# and take every other held-out item; the resampler turns a 440 Hz tone at 22050 Hz into the
# 440 Hz tone at 16 kHz (max error 1e-4 away from the edges) and removes a 9 kHz one (above the
# new Nyquist frequency: max 1e-3); every canvas size is a multiple of 48 within the 70-token
# patch budget; the carried plan's gzip files are byte-stable and read back; the plan and speech
# steps as the GPU machine runs them (a stand-in espeak-ng under a prefix: WAV format, lengths,
# seconds, resume). Needs numpy only (no espeak-ng, fonts or PIL): the interpreter is $G4_MM_PYTHON,
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
# The carried plan: gzipped JSON lines, the same bytes for the same items (no name or time in
# the gzip header), read back as written; a plain file beside it is read first.
items = p0["image"][:5]
g1, g2 = os.path.join(d, "a.jsonl.gz"), os.path.join(d, "b.jsonl.gz")
m.write_jsonl(g1, items)
m.write_jsonl(g2, items)
check("the same items, the same gzip bytes", open(g1, "rb").read() == open(g2, "rb").read())
check("read_jsonl(X.gz) gives the items back", m.read_jsonl(g1) == items)
check("read_jsonl(X) falls back to X.gz", m.read_jsonl(g1[:-3]) == items)
m.write_jsonl(g1[:-3], items[:2])
check("read_jsonl(X) reads X where it exists", m.read_jsonl(g1[:-3]) == items[:2])

# plan -> speech as the GPU machine runs them, with a stand-in espeak-ng under a prefix (a tone
# at 22050 Hz whose length follows the text, the voice and rate in its frequency): every planned
# utterance gets a 16 kHz mono 16-bit WAV and its "seconds"; a second run resumes (keeps the
# files) and writes the same speech.jsonl; a prefix without English data is refused.
import json, shutil, subprocess, wave
here = os.path.join(sys.argv[1], "make_mm_data.py")
out = os.path.join(d, "mm")
r = subprocess.run([sys.executable, here, "plan", out, "--corpus", d, "--preset", "tiny",
                    "--seed", "3"], capture_output=True, text=True)
check(f"plan: exit {r.returncode} {r.stderr.strip()[-200:]}", r.returncode == 0)
class B: pass
b = B(); b.seed, b.preset = 3, "tiny"
want = m.plan(b, d)[0]
check("plan: speech.jsonl.gz and images.jsonl.gz hold plan()'s items",
      m.read_jsonl(os.path.join(out, "speech.jsonl.gz")) == want["audio"] and
      m.read_jsonl(os.path.join(out, "images.jsonl.gz")) == want["image"])
pre = os.path.join(d, "espeak")
os.makedirs(os.path.join(pre, "usr/bin"))
os.makedirs(os.path.join(pre, "usr/lib/x86_64-linux-gnu/espeak-ng-data"))
exe = os.path.join(pre, "usr/bin/espeak-ng")
open(exe, "w").write(f"""#!{sys.executable}
import os, sys, wave, numpy as np
a = sys.argv[1:]
if "--version" in a:  # as espeak-ng 1.51: --path ignored, the data from ESPEAK_DATA_PATH
    dp = os.environ.get("ESPEAK_DATA_PATH", "/usr/lib/x86_64-linux-gnu")
    print(f"fake espeak-ng 0  Data at: {{dp}}/espeak-ng-data"); sys.exit(0)
assert a[0].startswith("--path="), a
v, s, w, text = a[a.index("-v") + 1], int(a[a.index("-s") + 1]), a[a.index("-w") + 1], a[-1]
n = int(22050 * 0.06 * len(text) * 170 / s)
f = 200 + 10 * len(v) + s
x = (0.5 * np.sin(2 * np.pi * f * np.arange(n) / 22050) * 32767).astype("<i2")
with wave.open(w, "wb") as o:
    o.setnchannels(1), o.setsampwidth(2), o.setframerate(22050), o.writeframes(x.tobytes())
""")
os.chmod(exe, 0o755)
r = subprocess.run([sys.executable, here, "speech", out, "--espeak", pre, "--jobs", "2"],
                   capture_output=True, text=True)
check(f"speech without English data refused: exit {r.returncode}",
      r.returncode != 0 and "no English data" in r.stderr + r.stdout)
open(os.path.join(pre, "usr/lib/x86_64-linux-gnu/espeak-ng-data/en_dict"), "w").write("x")
r = subprocess.run([sys.executable, here, "speech", out, "--espeak", pre, "--jobs", "2"],
                   capture_output=True, text=True)
check(f"speech: exit {r.returncode} {r.stderr.strip()[-300:]}", r.returncode == 0)
sp = m.read_jsonl(os.path.join(out, "speech.jsonl")) if r.returncode == 0 else []
ok = len(sp) == len(want["audio"]) > 0
for it in sp:
    with wave.open(os.path.join(out, "speech", it["split"], it["id"] + ".wav")) as w:
        n = w.getnframes()
        ok &= (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        ok &= abs(it["seconds"] - n / 16000) < 1e-3
        x = np.frombuffer(w.readframes(n), "<i2")
        ok &= abs(int(np.abs(x).max()) - round(0.7 * 32767)) <= 1  # the peak it scales to
    want_n = int(22050 * 0.06 * len(it["text"]) * 170 / it["rate"]) * 16000 // 22050
    ok &= n == want_n
check(f"{len(sp)} utterances: 16 kHz mono 16-bit WAV, peak 0.7, length and seconds right", ok)
info = json.load(open(os.path.join(out, "data.json")))
data_at = os.path.join(pre, "usr/lib/x86_64-linux-gnu/espeak-ng-data")
check(f"data.json: espeak-ng's version with the prefix's data ({info.get('espeak_ng')}) and the "
      "seconds in all",
      info.get("espeak_ng") == f"fake espeak-ng 0  Data at: {data_at}" and
      abs(info.get("speech_seconds", -1) - sum(i["seconds"] for i in sp)) < 0.2)
first = open(os.path.join(out, "speech.jsonl"), "rb").read()
wav0 = os.path.join(out, "speech", sp[0]["split"], sp[0]["id"] + ".wav") if sp else ""
t0 = os.stat(wav0).st_mtime_ns if sp else 0
r = subprocess.run([sys.executable, here, "speech", out, "--espeak", pre, "--jobs", "1"],
                   capture_output=True, text=True)
check("a second speech run keeps the files and writes the same speech.jsonl",
      r.returncode == 0 and sp and os.stat(wav0).st_mtime_ns == t0 and
      open(os.path.join(out, "speech.jsonl"), "rb").read() == first)
print(f"test_mm_data: {len(fails)} failed")
sys.exit(1 if fails else 0)
PY
