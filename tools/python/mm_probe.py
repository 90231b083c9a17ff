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
