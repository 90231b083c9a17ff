#!/usr/bin/env bash
# test_mm_data.sh: tools/python/make_mm_data.py's item plan (issue 35) on a small synthetic corpus:
# the same seed gives the same plan and another seed another; no held-out OCR string is a train
# string, no held-out sentence a train sentence, every held-out sentence's words are train words;
# the held-out voice (en-us+f4, variant f4) and font family (FreeSerif) never appear in training
# and take every other held-out item; the resampler turns a 440 Hz tone at 22050 Hz into the
# 440 Hz tone at 16 kHz (max error 1e-4 away from the edges) and removes a 9 kHz one (above the
# new Nyquist frequency: max 1e-3), each of its outputs the windowed sinc written out per output; every canvas size is a multiple of 48 within the 70-token
# patch budget; the carried plan's gzip files are byte-stable and read back; the plan and speech
# steps as the GPU machine runs them (a stand-in espeak-ng under a prefix: WAV format, lengths,
# seconds, resume); the proxy's wide cut of the train speech (prose_sentences on a handwritten
# reST page; a wide plan's held-out rules, replacements and unchanged images); speed_perturb's
# lengths and pitch; --diverse's lists and plans (off: main 54537a4's bytes; on: the held-out
# items unchanged, 582 voices and 30 fonts at proxy's train counts); the speech step refusing a
# variant missing from the data, the media step a missing font. Needs numpy only (no espeak-ng,
# fonts or PIL): the interpreter is $G4_MM_PYTHON, else .tools/ort-venv's
# (tools/install_deps.sh); without numpy the test skips (77).
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
# every output of resample against the windowed sinc written out per output (input position
# t = n x src / dst, taps m = floor(t) - 31 .. floor(t) + 32 of the zero-padded input, weight
# cut sinc(cut (t - m)) x Blackman(t - m)), for rates that give 1, 160 and 320 phases
rx = np.random.default_rng(4).normal(0, 0.3, 1000)
for src, dst in ((32000, 16000), (17300, 16000), (22050, 16000)):
    y = m.resample(rx, src, dst)
    g = np.gcd(src, dst)
    cut = 0.95 * min(1.0, dst / src)
    want = []
    for n in range(len(rx) * (dst // g) // (src // g)):
        t = n * (src // g) / (dst // g)
        ms = np.arange(int(t) - 31, int(t) + 33)
        dd = t - ms
        w = 0.42 + 0.5 * np.cos(np.pi * dd / 32) + 0.08 * np.cos(2 * np.pi * dd / 32)
        xs = np.where((ms >= 0) & (ms < len(rx)), rx[np.clip(ms, 0, len(rx) - 1)], 0.0)
        want.append(float((xs * cut * np.sinc(cut * dd) * np.where(np.abs(dd) < 32, w, 0)).sum()))
    err = np.abs(y - np.array(want)).max() if len(y) == len(want) else np.inf
    check(f"resample {src} -> {dst} Hz: {len(y)} outputs (want {len(want)}), each the windowed "
          f"sinc written out: max error {err:.1e} <= 1e-12", err <= 1e-12)
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
# a variant the plan names and the data lacks is refused in one line naming it (the first,
# sorted); then VARIANTS and the held-out f4 are written as files of voices/!v
vdir = os.path.join(pre, "usr/lib/x86_64-linux-gnu/espeak-ng-data/voices/!v")
os.makedirs(vdir)
first_v = sorted({i["voice"].split("+")[1] for i in want["audio"] if "+" in i["voice"]})[0]
r = subprocess.run([sys.executable, here, "speech", out, "--espeak", pre, "--jobs", "2"],
                   capture_output=True, text=True)
check(f"speech without the variant files refused: exit {r.returncode} {r.stderr.strip()}",
      r.returncode == 1 and f"variant {first_v} is not in" in r.stderr and
      len(r.stderr.strip().splitlines()) == 1)
for v in m.VARIANTS[1:] + [m.HELD_OUT_VOICE[m.HELD_OUT_VOICE.index("+"):]]:
    open(os.path.join(vdir, v[1:]), "w").write("language variant\n")
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
# media: a font of the plan (train items' too) missing from the roots is refused in one line
# naming it (the first, sorted), before any rendering (no PIL needed to get there)
os.makedirs(os.path.join(d, "nofonts"))
r = subprocess.run([sys.executable, here, "media", out, "--fonts", os.path.join(d, "nofonts"),
                    "--jobs", "1"], capture_output=True, text=True)
first_f = sorted({i["font"] for i in want["image"]})[0]
check(f"media without the fonts refused: exit {r.returncode} {r.stderr.strip()}",
      r.returncode == 1 and f"font {first_f} not under" in r.stderr and
      len(r.stderr.strip().splitlines()) == 1)
# The wide cut of the proxy's train speech (prose_sentences) on a handwritten reST page: an
# indented directive body is prose, a literal block (after "::" or a code directive) is not, a
# list item loses its bullet, inline markup reads as its text, "?" ends a sentence, 20 words
# are kept and 21 are not; sentences() (the narrow cut) keeps the first sentence alone.
page = "\n\n".join([
    "Intro sentence has six words here.",
    ".. function:: spam(eggs)",
    "   Return the spam of ``eggs`` as a :class:`list`.",
    "   Raise an error if :func:`ham <mod.ham>` fails?",
    "   For example::",
    "      Prints nothing at all here today.",
    "   After the example comes more text.",
    "* A list item with enough words.",
    ".. code-block:: python",
    "   This line is code not prose.",
    "=====",
    " ".join(["One"] + ["word"] * 19) + ".",
    " ".join(["Two"] + ["word"] * 20) + "."])
want = ["Intro sentence has six words here.", "Return the spam of eggs as a list.",
        "Raise an error if ham fails?", "After the example comes more text.",
        "A list item with enough words.", " ".join(["One"] + ["word"] * 19) + "."]
got = m.prose_sentences(page)
check(f"prose_sentences on a reST page: {len(got)} sentences, the 6 written by hand", got == want)
check("sentences() on it: the unindented plain one alone",
      m.sentences(page) == ["Intro sentence has six words here."])
marks = {":func:`len`": "len", ":ref:`the tutorial <tut-x>`": "the tutorial",
         ":meth:`~dict.get`": "dict.get", "``None``": "None", "*very*": "very",
         "**bold**": "bold", "`Python <https://python.org>`_": "Python", "a * b": "a * b"}
bad = {k: m.plain_text(k) for k, v in marks.items() if m.plain_text(k) != v}
check(f"plain_text reads {len(marks)} markups as their text (wrong: {bad})", not bad)

# A plan with the wide cut (WIDE_SPEECH) against the same counts without it, on a corpus whose
# train.txt has indented prose (the wide cut's alone) and whose test.txt has 10 sentences of
# that prose among 30 of its own: the train speech takes sentences of both cuts, each clip a
# sentence of its own; no held-out sentence is a train speech sentence, and a held-out one that
# the wide cut made a train sentence gives its place to the next that is not (counted in the
# stats), the other held-out items and every image item as in the narrow plan; held-out words
# are train speech words; f4 never in training.
r = random.Random(9)
def sent():
    s = " ".join(r.choice(words) for _ in range(r.randint(4, 12)))
    return s[0].upper() + s[1:] + "."
indented = [sent() for _ in range(120)]
d2 = tempfile.mkdtemp()
open(os.path.join(d2, "train.txt"), "w").write(
    text(100) + "\n\n.. function:: f()\n\n" + "\n\n".join("   " + s for s in indented))
open(os.path.join(d2, "test.txt"), "w").write(text(30) + "\n\n" + "\n\n".join(indented[:10]))
counts = dict(train_audio=150, test_audio=20, train_images=48, test_images=6)
m.PRESETS.update(wide_check=counts, narrow_check=counts)
m.WIDE_SPEECH.add("wide_check")
def plan2(preset):
    a = A(); a.seed, a.preset = 0, preset
    return m.plan(a, d2)
(pw, sw), (pn, sn) = plan2("wide_check"), plan2("narrow_check")
narrow = set(m.sentences(open(os.path.join(d2, "train.txt")).read()))
tr_w = [i["text"] for i in pw["audio"] if i["split"] == "train"]
check(f"wide plan: {len(tr_w)} train clips, {len(set(tr_w))} sentences, "
      f"{len(set(tr_w) - narrow)} of the indented prose, "
      f"of {sw.get('speech_train_sentences')} (narrow {len(narrow)})",
      len(set(tr_w)) == len(tr_w) == 150 and set(tr_w) - narrow and
      sw.get("speech_train_sentences") == len(narrow | set(indented)))
check("narrow plan: the train speech is sentences()' only",
      {i["text"] for i in pn["audio"] if i["split"] == "train"} <= narrow)
te_w = [i for i in pw["audio"] if i["split"] == "test"]
te_n = [i for i in pn["audio"] if i["split"] == "test"]
moved = [k for k, (a, b) in enumerate(zip(te_w, te_n)) if a != b]
check(f"held-out speech: {len(moved)} of {len(te_w)} replaced, each a train sentence of the wide "
      f"cut (stats {sw.get('speech_test_replaced')}), the rest the narrow plan's items",
      len(te_w) == len(te_n) == 20 and moved and sw.get("speech_test_replaced") == len(moved)
      and all(te_n[k]["text"] in set(tr_w) | set(indented) for k in moved)
      and all(dict(te_w[k], text=te_n[k]["text"]) == te_n[k] for k in moved))
check("no held-out sentence is a train speech sentence",
      not {i["text"] for i in te_w} & (narrow | set(indented)))
vw = {w for s in narrow | set(indented) for w in m.words_of(s)}
check("held-out speech uses train speech words only",
      all(set(m.words_of(i["text"])) <= vw for i in te_w))
check("the wide plan's images are the narrow plan's", pw["image"] == pn["image"])
check("no train voice of the wide plan uses the held-out variant f4",
      all("+f4" not in i["voice"] for i in pw["audio"] if i["split"] == "train"))

# --speech-pieces N (the tiny plan on the first corpus, the wide plan on the second, N 40): the
# plan with pieces is the plan without them + N utterances at the end (every other item equal;
# the gzipped file's text a prefix); each piece 1-4 consecutive words of a train clip's
# sentence as written (inner commas kept, no , . ? ! at its end), its words no held-out
# answer's (audio or image), ids train_p00000.., category piece, split train, voice without
# f4, rate 140-200, pitch 30-70, snr 15-40 (the train clips' ranges); every length 1-4 drawn;
# the stats; another seed other pieces; N < 0 refused.
def runs_of(s):
    w = s.split()
    return {" ".join(w[i:i + n]).rstrip(",.?!") for n in range(1, 5)
            for i in range(len(w) - n + 1)}
for corpus, preset in ((d, "tiny"), (d2, "wide_check")):
    a = A(); a.seed, a.preset = 0, preset
    base, st0 = m.plan(a, corpus)
    a.speech_pieces = 40
    more, st1 = m.plan(a, corpus)
    n_old = len(base["audio"])
    check(f"{preset} + 40 pieces: the other items unchanged, the pieces last",
          more["image"] == base["image"] and more["audio"][:n_old] == base["audio"] and
          len(more["audio"]) == n_old + 40)
    ga, gb = os.path.join(d, "pa.jsonl.gz"), os.path.join(d, "pb.jsonl.gz")
    m.write_jsonl(ga, base["audio"]), m.write_jsonl(gb, more["audio"])
    import gzip
    check(f"{preset}: speech.jsonl.gz's text without pieces a prefix of the one with",
          gzip.open(gb).read().startswith(gzip.open(ga).read()))
    pcs = more["audio"][n_old:]
    said = {i["text"] for i in base["audio"] if i["split"] == "train"}
    runs = set().union(*(runs_of(s) for s in said))
    held = {tuple(m.words_of(i["text"])) for k in ("audio", "image") for i in base[k]
            if i["split"] == "test"}
    check(f"{preset}: pieces' ids, category, split",
          [i["id"] for i in pcs] == [f"train_p{k:05d}" for k in range(40)] and
          all(i["category"] == "piece" and i["split"] == "train" for i in pcs))
    check(f"{preset}: each piece 1-4 consecutive words of a train clip's sentence "
          f"(e.g. {[i['text'] for i in pcs[:3]]})",
          all(1 <= len(i["text"].split()) <= 4 and i["text"] in runs for i in pcs))
    check(f"{preset}: lengths 1-4 all drawn ({sorted({len(i['text'].split()) for i in pcs})})",
          {len(i["text"].split()) for i in pcs} == {1, 2, 3, 4})
    check(f"{preset}: no piece has a held-out answer's words",
          not any(tuple(m.words_of(i["text"])) in held for i in pcs))
    check(f"{preset}: pieces' voices and draws in the train clips' ranges",
          all("+f4" not in i["voice"] and 140 <= i["rate"] <= 200 and 30 <= i["pitch"] <= 70
              and 15 <= i["snr_db"] <= 40 for i in pcs))
    check(f"{preset}: stats {st1.get('speech_pieces')} pieces, none without",
          st1.get("speech_pieces") == 40 and "speech_pieces" not in st0 and
          {k: v for k, v in st1.items() if not k.startswith("speech_piece")} == st0)
    a.seed = 1
    check(f"{preset}: another seed, other pieces",
          [i["text"] for i in m.plan(a, corpus)[0]["audio"][-40:]] != [i["text"] for i in pcs])
r = subprocess.run([sys.executable, here, "plan", os.path.join(d, "neg"), "--corpus", d,
                    "--preset", "tiny", "--speech-pieces", "-1"], capture_output=True, text=True)
check(f"--speech-pieces -1 refused: exit {r.returncode} {r.stderr.strip()}",
      r.returncode == 1 and "expected 0 or more" in r.stderr)

# --diverse (issue 35): the train items draw their variant from WIDE_VARIANTS and their font
# from WIDE_FONTS. The lists: sorted as written, no repeats, 97 variants ("" and 96 of the 101
# files of the carried voices/!v: f4, "Mr serious" and RicishayMax 1-3 out) holding VARIANTS,
# never f4; 30 fonts (the 34 TTF files of the three .debs less FreeSerif's 4) holding FONTS's
# 11 train files, never FreeSerif. Off: the plans' gzipped files are the bytes main's
# make_mm_data.py (54537a4, before --diverse) wrote for the same corpus and preset (the sha256
# below: written by that version, not by this one); on: the held-out items are the plan
# without it's, line for line, and so are every train item's text and id; every train voice is
# one of VOICES + one of WIDE_VARIANTS, every train font one of WIDE_FONTS; with proxy's
# train counts (16,000 clips, 20,000 images: big_check) all 6 x 97 = 582 voices, all 97
# variants and all 30 fonts are drawn (a given voice is missed with probability
# (581/582)^16000 = 1.1e-12, a font (29/30)^20000 ~ e^-678: with the seed fixed the counts are
# exact), against 54 and 11 without it; with --speech-pieces the pieces draw from the wide list
# too (held-out items still the same); data.json records diverse, train_variants 97,
# train_fonts 30 only when on; --preset ci --diverse is refused.
import gzip, hashlib
check(f"WIDE_VARIANTS: {len(m.WIDE_VARIANTS)} sorted, distinct, VARIANTS in it, no f4",
      len(m.WIDE_VARIANTS) == 97 and m.WIDE_VARIANTS == sorted(set(m.WIDE_VARIANTS)) and
      set(m.VARIANTS) <= set(m.WIDE_VARIANTS) and "+f4" not in m.WIDE_VARIANTS and
      all(v == "" or (v[0] == "+" and " " not in v) for v in m.WIDE_VARIANTS))
wf = [f for f, _ in m.WIDE_FONTS]
check(f"WIDE_FONTS: {len(wf)} files sorted, distinct, FONTS' train files in it, no FreeSerif",
      len(wf) == 30 and wf == sorted(set(wf)) and
      {f for f, fam in m.FONTS if fam != m.HELD_OUT_FAMILY} <= set(wf) and
      all(fam != m.HELD_OUT_FAMILY and "FreeSerif" not in f for f, fam in m.WIDE_FONTS) and
      all(dict(m.FONTS).get(f, fam) == fam for f, fam in m.WIDE_FONTS))
m.PRESETS.update(big_check=dict(train_audio=16000, test_audio=20, train_images=20000,
                                test_images=6))
m.WIDE_SPEECH.add("big_check")
def gz_sha(items):
    p = os.path.join(d, "sha.jsonl.gz")
    m.write_jsonl(p, items)
    return hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
OFF_SHA = {  # (speech, images) of main's 54537a4 on these corpora, seed 0
    "tiny": ("2b6190f37d87f7da", "bc17351cf8a6a0e6"),
    "wide_check": ("0cf8237b7565687d", "465c1aa523356da1"),
    "big_check": ("8b8e15cd945e59d0", "867a0ed942524a61")}
def variant(v):
    return v[v.index("+"):] if "+" in v else ""
for corpus, preset in ((d, "tiny"), (d2, "wide_check"), (d2, "big_check")):
    a = A(); a.seed, a.preset = 0, preset
    off, st_off = m.plan(a, corpus)
    a.diverse = False
    off2 = m.plan(a, corpus)[0]
    got = (gz_sha(off["audio"]), gz_sha(off["image"]))
    check(f"{preset} without --diverse: the plan of main 54537a4 ({got})",
          got == OFF_SHA[preset] and off2 == off)
    a.diverse = True
    on, st_on = m.plan(a, corpus)
    for k in ("audio", "image"):
        te0 = [json.dumps(i) for i in off[k] if i["split"] == "test"]
        te1 = [json.dumps(i) for i in on[k] if i["split"] == "test"]
        tr0 = [(i["id"], i["text"]) for i in off[k] if i["split"] == "train"]
        tr1 = [(i["id"], i["text"]) for i in on[k] if i["split"] == "train"]
        check(f"{preset} --diverse {k}: {len(te1)} held-out lines the plan without it's, the "
              f"{len(tr1)} train ids and texts too", te0 == te1 and len(te1) > 0 and tr0 == tr1)
    tr_a = [i for i in on["audio"] if i["split"] == "train"]
    tr_i = [i for i in on["image"] if i["split"] == "train"]
    voices = {i["voice"] for i in tr_a}
    fonts = {i["font"] for i in tr_i}
    ok = all(i["voice"].split("+")[0] in m.VOICES and variant(i["voice"]) in m.WIDE_VARIANTS
             and "+f4" not in i["voice"] for i in tr_a)
    ok &= all(i["font"] in wf and "FreeSerif" not in i["font"] for i in tr_i)
    nv, nf = len({variant(v) for v in voices}), len(fonts)
    n_off = (len({i["voice"] for i in off["audio"] if i["split"] == "train"}),
             len({i["font"] for i in off["image"] if i["split"] == "train"}))
    want = (582, 97, 30) if preset == "big_check" else None
    check(f"{preset} --diverse: train voices / variants / fonts in the wide lists, no f4 or "
          f"FreeSerif: {len(voices)} voices, {nv} variants, {nf} fonts (without it "
          f"{n_off[0]} voices, {n_off[1]} fonts)",
          ok and (want is None or ((len(voices), nv, nf) == want and n_off == (54, 11))) and
          (want is not None or nf > n_off[1] or len(tr_i) < 12))
    check(f"{preset}: stats diverse only when on ({st_on.get('train_variants')}, "
          f"{st_on.get('train_fonts')})",
          st_on.get("diverse") is True and st_on.get("train_variants") == 97 and
          st_on.get("train_fonts") == 30 and "diverse" not in st_off and
          {k: v for k, v in st_on.items() if k not in ("diverse", "train_variants",
                                                       "train_fonts")} == st_off)
    if preset == "big_check":
        continue
    a.speech_pieces = 40
    onp = m.plan(a, corpus)[0]
    pv = {variant(i["voice"]) for i in onp["audio"][-40:]}
    check(f"{preset} --diverse + 40 pieces: held-out items the same, pieces' variants in the "
          f"wide list ({len(pv)}, {len(pv - set(m.VARIANTS))} of them not in VARIANTS)",
          [i for i in onp["audio"] if i["split"] == "test"] ==
          [i for i in off["audio"] if i["split"] == "test"] and onp["image"] == on["image"] and
          pv <= set(m.WIDE_VARIANTS) and pv - set(m.VARIANTS) and
          all("+f4" not in i["voice"] for i in onp["audio"][-40:]))
for args, want in (([], False), (["--diverse"], True)):
    o = os.path.join(d, "dj" + str(want))
    r = subprocess.run([sys.executable, here, "plan", o, "--corpus", d, "--preset", "tiny"]
                       + args, capture_output=True, text=True)
    info = json.load(open(os.path.join(o, "data.json"))) if r.returncode == 0 else {}
    check(f"plan {args}: exit {r.returncode}, data.json diverse {info.get('diverse')}",
          r.returncode == 0 and ("diverse" in info) == want and
          (not want or (info["train_variants"], info["train_fonts"]) == (97, 30)))
r = subprocess.run([sys.executable, here, "plan", os.path.join(d, "ci"), "--preset", "ci",
                    "--diverse"], capture_output=True, text=True)
check(f"--preset ci --diverse refused: exit {r.returncode} {r.stderr.strip()}",
      r.returncode == 1 and "one voice and one font" in r.stderr)

# speed_perturb: a 440 Hz tone of 2 s at factors 0.9, 17/16 and 1.1 is 32000 x 16000 / (16000 x
# factor) samples long (floor) and peaks at 440 x factor Hz (the FFT's bin, 0.5 Hz here: tempo
# and pitch together); factor 1 is the tone itself; a factor off the 1/160 grid is refused;
# in audio_samples the same item with a "speed" differs only by the speech's new length (the
# silence and noise draws are the item's noise seed's, as without it).
tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(32000) / 16000)
for f, src in ((0.9, 14400), (17 / 16, 17000), (1.1, 17600)):
    y = m.speed_perturb(tone, f)
    spec = np.abs(np.fft.rfft(y[:28000] * np.hanning(28000)))
    peak = np.argmax(spec) * 16000 / 28000
    check(f"speed {f:.4f}: {len(y)} samples (want {32000 * 16000 // src}), peak {peak:.1f} Hz "
          f"(want {440 * f:.1f} +- 0.6)",
          len(y) == 32000 * 16000 // src and abs(peak - 440 * f) <= 0.6)
check("speed 1: the samples themselves", m.speed_perturb(tone, 1.0) is tone)
try:
    m.speed_perturb(tone, 1.003)
    check("speed 1.003 (off the 1/160 grid) refused", False)
except SystemExit as e:
    check(f"speed 1.003 (off the 1/160 grid) refused: {e}", "1/160" in str(e))
sd = os.path.join(d2, "speech", "train")
os.makedirs(sd)
with wave.open(os.path.join(sd, "x.wav"), "wb") as w:
    w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
    w.writeframes(np.rint(tone * 32767).astype("<i2").tobytes())
it = dict(id="x", split="train", snr_db=20.0, noise_seed=12345)
n1, n2 = len(m.audio_samples(it, d2)), len(m.audio_samples(dict(it, speed=0.9), d2))
check(f"audio_samples at speed 0.9: {n2} samples = {n1} + {32000 * 16000 // 14400 - 32000}",
      n2 - n1 == 32000 * 16000 // 14400 - 32000)
print(f"test_mm_data: {len(fails)} failed")
sys.exit(1 if fails else 0)
PY
