"""What the multimodal proxy's CPU probes share (tools/python/mm_audio_probe.py, listening;
tools/python/mm_vision_probe.py, reading; issue 35): the decoder's shape between
train_mm_proxy's `ci` and `proxy` presets (the tokenizer: train_mm_proxy.make_tokenizer), the
hook that zeroes or rolls a media embedder's soft tokens (is the medium read at all?), and the
error rates. The model, data and renderers are train_mm_proxy's own (imported there)."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mm_parity import edits, words  # noqa: E402
from train_mm_proxy import ctc_collapse  # noqa: E402
from train_proxy import PRESETS as TEXT_PRESETS  # noqa: E402

# text 128 x 6 (tiny's kinds, a window over the whole prompt)
TEXT = dict(TEXT_PRESETS["tiny"], hidden=128, mlp=512, layers=6, shared=2, window=256,
            positions=512, ple=32,
            types=["sliding_attention", "sliding_attention", "full_attention"] * 2)


def clip_spread(mean):
    """How far apart clips' time-averaged vectors are (mean: clips x D): the mean pairwise
    relative difference (|m_i - m_j| / |m_i|) and the mean pairwise cosine. A tower that has
    collapsed to one vector gives ~0 and ~1."""
    iu = torch.triu_indices(len(mean), len(mean), 1)
    diff = (mean[:, None] - mean[None]).norm(dim=-1) / mean.norm(dim=-1)[:, None]
    cos = torch.nn.functional.cosine_similarity(mean[:, None], mean[None], dim=-1)
    return float(diff[iu[0], iu[1]].mean()), float(cos[iu[0], iu[1]].mean())


def wer(refs, hyps):
    """Word error rate over the set (mm_parity's words: lower-cased, punctuation stripped)."""
    err = sum(edits(words(r), words(h)) for r, h in zip(refs, hyps))
    return err / max(1, sum(len(words(r)) for r in refs))


def cer(refs, hyps):
    """Character error rate over the set: character edits / reference characters, the strings
    as they are (case and punctuation count: an OCR answer must spell them)."""
    err = sum(edits(r, h) for r, h in zip(refs, hyps))
    return err / max(1, sum(len(r) for r in refs))


class SoftTokens:
    """A forward hook on a media embedder (embed_audio, embed_vision): keeps its output
    (self.last) and, by self.mode, hands the decoder zeros ("zero") or the batch neighbour's
    soft tokens ("shuf", rolled by self.shift rows along dimension 0) in their place.
    embed_audio's output is B x T x D (shift 1: one clip); embed_vision's is the batch's valid
    soft tokens flat (sum of n_i x D): shift n rolls by one image when every image of the batch
    has n soft tokens."""

    def __init__(self):
        self.mode, self.last, self.shift = None, None, 1

    def __call__(self, mod, inp, out):
        self.last = out.detach()
        if self.mode == "zero":
            return torch.zeros_like(out)
        if self.mode == "shuf":
            return torch.roll(out, self.shift, 0)
        return out


def ctc_greedy(lp, n, alphabet):
    """Greedy CTC decoding of lp (T x classes log-probabilities, class 0 the blank, class c the
    alphabet's character c - 1) over its first n frames: repeats merged, blanks dropped."""
    return "".join(alphabet[c - 1] for c in ctc_collapse(lp[:n].argmax(-1).tolist(), 0))


def train_ctc(net, draw, steps, lr, every=0, probe=None, clip=5.0):
    """The CTC read-outs' optimisation (mm_audio_readout, mm_vision_readout): AdamW (weight
    decay 0.01), lr warm-up over 100 steps then cosine to 0 over steps, gradient norm clipped.
    draw(step) -> (log-probabilities T x B x C, targets concatenated, input lengths, target
    lengths); probe(step, losses) is called every `every` steps (not at the last). Returns the
    per-step losses."""
    import math

    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    run = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))
        lp, tg, n_in, n_tg = draw(step)
        loss = torch.nn.functional.ctc_loss(lp, tg, n_in, n_tg, blank=0, reduction="mean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        run.append(loss.item())
        if every and (step + 1) % every == 0 and step + 1 < steps and probe:
            probe(step + 1, run)
    return run
