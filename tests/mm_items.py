"""Synthetic training items for the train_mm_proxy.py checks (tests/mm_guard_check.py,
tests/mm_pad_check.py): random-pixel images and noise clips with the trainer's own prompts,
image patches and log-mel features, uncollated (train_mm_proxy.collate makes the batches); and
the trainer's model in fp32 that every check starts from; the checks' tokenizer and their
counted expectations; the ci preset's data plan with noise clips (ci_data)."""
import os
import sys
import tempfile

import numpy as np


class Img:  # image_inputs' input: anything with convert() giving an H x W x 3 uint8 array
    def __init__(self, a):
        self.a = a

    def convert(self, mode):
        return self.a


def mm_items(tmp, tok, seed, image_texts, clips):
    """tmp: the train_mm_proxy module; image_texts: the answers of the 192 x 816 images; clips:
    (answer, samples at 16 kHz) of the noise clips. Returns {"image": [...], "audio": [...]}."""
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    pr, fe = tmp.Prompter(tok), Gemma4AudioFeatureExtractor()
    r = np.random.default_rng(seed)
    imgs, auds = [], []
    for text in image_texts:
        pv, pp, n = tmp.image_inputs(Img(r.integers(0, 256, (192, 816, 3), dtype=np.uint8)))
        imgs.append(dict(kind="image", pv=pv, pp=pp, ids=pr.prompt("image", n),
                         tgt=pr.target(text)))
    for text, n in clips:
        f = fe([r.normal(0, 0.1, n).astype(np.float32)], return_tensors="np", padding="longest")
        m = f["input_features_mask"][0]
        auds.append(dict(kind="audio", feats=f["input_features"][0], mask=m,
                         ids=pr.prompt("audio", tmp.audio_token_count(m)), tgt=pr.target(text)))
    return {"image": imgs, "audio": auds}


def tone_clip(sentence, seconds):
    """ci_data(tones=True)'s clip of sentence number `sentence`: 4 equal segments, each a sine
    at a frequency drawn log-uniform in 200-4000 Hz, + white noise, all from that number's own
    generator: the train and the held-out clip of a sentence are the same samples, as the ci
    plan's held-out clips are its train clips (make_mm_data.plan_ci), and they carry something
    to read, as espeak-ng's speech does (ci_data's noise clips carry nothing that the held-out
    clip shares). int16 samples at 16 kHz."""
    n = 16000 * seconds
    r = np.random.default_rng([sentence, 4])
    f = np.exp(r.uniform(np.log(200), np.log(4000), 4))
    t = np.arange(n) / 16000.0
    x = np.sin(2 * np.pi * f[np.minimum(np.arange(n) * 4 // n, 3)] * t)
    return (6000 * x + r.normal(0, 1000, n)).astype("<i2")


def ci_data(tmp, d, seconds=1, tones=False, pieces=0):
    """The ci preset's data plan under d/data (tools/python/make_mm_data.py plan) with `seconds`
    (whole) of noise for each clip (tones: tone_clip's, each sentence's own signal, the held-out
    clip the train clip's samples), written as the speech step writes its WAVs (no espeak-ng
    needed); its path. tmp: the train_mm_proxy module (its make_mm_data helpers). pieces:
    plan's --speech-pieces (the piece clips come last, so the others' noise is as without them;
    with tones, piece k is tone_clip(1000 + k))."""
    import subprocess
    import wave

    here = os.path.dirname(tmp.__file__)
    data = os.path.join(d, "data")
    subprocess.run([sys.executable, os.path.join(here, "make_mm_data.py"), "plan", data,
                    "--preset", "ci"] + (["--speech-pieces", str(pieces)] if pieces else []),
                   check=True, capture_output=True)
    audio = tmp.mmd.read_jsonl(os.path.join(data, "speech.jsonl.gz"))
    r = np.random.default_rng(0)
    for it in audio:
        os.makedirs(os.path.join(data, "speech", it["split"]), exist_ok=True)
        with wave.open(os.path.join(data, "speech", it["split"], it["id"] + ".wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            k = (int(it["id"].split("_a")[1]) if "_a" in it["id"] else
                 1000 + int(it["id"].split("_p")[1]))
            w.writeframes((tone_clip(k, seconds) if tones else
                           r.normal(0, 3000, 16000 * seconds).astype("<i2")).tobytes())
        it["seconds"] = float(seconds)
    tmp.mmd.write_jsonl(os.path.join(data, "speech.jsonl"), audio)
    return data


def fp32_model(tmp, p, tok, attn="sdpa"):
    """The trainer's model (tmp.model_config of preset dict p) in fp32, initialised from torch
    seed 0, in train mode as the trainer runs it (Gemma-4 has no dropout: the same numbers)."""
    import torch
    from transformers import Gemma4ForConditionalGeneration

    torch.manual_seed(0)
    model = Gemma4ForConditionalGeneration._from_config(tmp.model_config(p, tok),
                                                        dtype=torch.float32,
                                                        attn_implementation=attn)
    return model.train()


def check_tokenizer(tmp, words, path=None):
    """The mm checks' tokenizer: train_proxy's BPE (vocab 480) trained on WORDS (a list of
    strings) and the trainer's prompts, 40 times over; written to PATH (default a temporary
    file, gone on return)."""
    from train_proxy import train_tokenizer

    text = "\n\n".join((list(words) + [tmp.SYSTEM, tmp.OCR_PROMPT, tmp.ASR_PROMPT, "system",
                                        "user", "model"]) * 40)
    if path:
        return train_tokenizer(text, 480, path)
    with tempfile.TemporaryDirectory() as d:
        return train_tokenizer(text, 480, os.path.join(d, "tokenizer.json"))


class Checks:
    """Counted expectations: the first that fails prints NAME: FAIL: MSG and exits 1."""

    def __init__(self, name):
        self.name, self.n = name, 0

    def fail(self, msg):
        print(f"{self.name}: FAIL: {msg}")
        sys.exit(1)

    def expect(self, cond, msg):
        self.n += 1
        if not cond:
            self.fail(msg)


# The image answers the read-out and warm-phase checks train their tokenizer on: digits,
# punctuation, upper and lower case, an apostrophe, a space-separated run
READOUT_TEXTS = ["stop 42", "Main St.", "x-ray 7/8", "Hello, world", "the cat's hat", "a b c",
                 "READ 100", "quiet"]


def ctc_label_rows(targets, turn, width, at):
    """collate's label rows for the CTC heads' loss(labels): row b holds transcript targets[b]
    then <turn|> from column at + b (a different offset a row), -100 elsewhere."""
    import torch

    lab = torch.full((len(targets), width), -100)
    for b, t in enumerate(targets):
        lab[b, at + b:at + b + len(t) + 1] = torch.tensor(t + [turn])
    return lab


def full_ctc_loss(lp, targets, rows, valid, blank):
    """torch's CTC over the full vocabulary, the reference the heads' reduced CTC is checked
    against: lp T x R x (V+1) log-probabilities of rows `rows` of a batch, targets[r] each row's
    labels, valid the batch's B x T frame mask."""
    import torch

    t = [torch.tensor(targets[r]) for r in rows]
    return torch.nn.functional.ctc_loss(
        lp, torch.nn.utils.rnn.pad_sequence(t, batch_first=True),
        torch.tensor([int(valid[r].sum()) for r in rows]), torch.tensor([len(u) for u in t]),
        blank=blank, reduction="mean")


def audio_stub(dim):
    """A module with the attributes the trainer's audio read-out heads hook (CtcHead,
    AudioChars): model.audio_tower passes its input frames through as last_hidden_state with the
    mask, model.embed_audio doubles them (text and multimodal width `dim`): the heads' input is
    then a known function of the test's frames."""
    import types

    import torch

    class Tower(torch.nn.Module):
        def forward(self, x, mask):
            return types.SimpleNamespace(last_hidden_state=x, attention_mask=mask)

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.text_hidden_size = self.multimodal_hidden_size = dim

        def forward(self, x):
            return 2.0 * x

    m = torch.nn.Module()
    m.model = torch.nn.Module()
    m.model.audio_tower, m.model.embed_audio = Tower(), Embed()
    return m


def tensors(path):
    """Every tensor of a safetensors file, by name."""
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def layout(ts):
    """{name: (shape, dtype)} of a tensors() dict: what a saved file's readers depend on."""
    return {k: (tuple(v.shape), v.dtype) for k, v in ts.items()}


def side_moved(ts_a, ts_b, parts):
    """True when the tensors whose names hold one of `parts` (e.g. ".vision_tower.") exist and at
    least one of them differs between the two tensors() dicts."""
    import torch

    side = [k for k in ts_a if any(p in k for p in parts)]
    return bool(side) and any(not torch.equal(ts_a[k], ts_b[k]) for k in side)


def tool_refusals(script, base, cases, expect):
    """The python tool `script` with the arguments `base` and each (extra flags, want) of
    `cases` must be refused in one line: exit 1 and one stderr line that holds `want`, checked
    by expect(ok, msg) (Checks.expect, or a caller's own). Returns those lines, one a case."""
    import subprocess

    lines = []
    for extra, want in cases:
        res = subprocess.run([sys.executable, script] + base + extra, capture_output=True,
                             text=True, timeout=300)
        err = res.stderr.splitlines()
        expect(res.returncode == 1 and len(err) == 1 and want in err[0],
               f"{os.path.basename(script)} {' '.join(extra)}: exit {res.returncode}, stderr "
               f"{res.stderr[-300:]!r} (expected exit 1 and one line holding {want!r})")
        lines.append(err[0] if err else "")
    return lines


def trainer_refusals(tmp, base, cases, expect):
    """tool_refusals of train_mm_proxy.py (tmp: the module) with the arguments `base` (its OUT,
    --data, --preset, ...)."""
    return tool_refusals(os.path.join(os.path.dirname(tmp.__file__), "train_mm_proxy.py"),
                         base, cases, expect)


def ci_trainer_runs(tmp, data, d, variants, fail, steps=6, stdout=None):
    """train_mm_proxy.py on the ci preset's `data`, `steps` steps of 8 on one CPU thread, no
    export, no held-out evaluation (a variant's own --eval-every comes later and wins), once a
    (name, extra flags) of `variants`, each into d/name: {name: (its train.json, the sha256 of
    its hf/model.safetensors, that file's tensors)}, and each run's stdout into stdout[name]
    when a dict is given; a run that exits non-zero fails the check with its stderr's tail."""
    import hashlib
    import json
    import subprocess

    trainer = os.path.join(os.path.dirname(tmp.__file__), "train_mm_proxy.py")
    runs = {}
    for name, extra in variants:
        out = os.path.join(d, name)
        res = subprocess.run([sys.executable, trainer, out, "--data", data, "--preset", "ci",
                              "--batch", "8", "--steps", str(steps), "--device", "cpu",
                              "--threads", "1",
                              "--no-export", "--minutes", "30", "--eval-every", "0"] + extra,
                             capture_output=True, text=True)
        if res.returncode:
            fail(f"{name}: exit {res.returncode}: {res.stderr[-600:]}")
        if stdout is not None:
            stdout[name] = res.stdout
        j = json.load(open(os.path.join(out, "train.json")))
        st = os.path.join(out, "hf", "model.safetensors")
        runs[name] = (j, hashlib.sha256(open(st, "rb").read()).hexdigest(), tensors(st))
    return runs


def grad_by_side(tmp, model):
    """{vision, audio, decoder: the sum of |gradient| over that side's parameters (the trainer's
    SIDES prefixes; a parameter with no gradient counts 0)}."""
    moved = {}
    for n, x in model.named_parameters():
        side = tmp.side_of(n)
        g = 0.0 if x.grad is None else float(x.grad.abs().sum())
        moved[side] = moved.get(side, 0.0) + g
    return moved
