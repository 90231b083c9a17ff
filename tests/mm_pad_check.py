#!/usr/bin/env python3
"""tests/test_mm_pad.sh's checks of train_mm_proxy.py's --pad-to (collate's bucketing, issue 35:
the GPU step is CPU-bound and cuDNN plans attention anew for each sequence length), on the CPU
in fp32, with a tiny Gemma-4 (the ci preset's shapes) and two half-batches whose items differ in
length (2 synthetic images with targets of 1 and 9 words, 2 synthetic clips of 1.0 s and 1.7 s):
  1. the shapes: pad 64 rounds each half-batch's sequence length and the clips' frames up to the
     next multiple of 64, above the unpadded lengths (else the check below compares nothing);
  2. for pad 64 and pad 7, each half-batch's loss equals the unpadded one within 1e-6
     (relative) and every parameter's gradient within 5e-5 (the norm of the difference over
     the gradient's norm). Not bit-identical: fp32 sums over other lengths round otherwise (at
     106 positions torch's CPU attention sums the second key block's 42 scores with a scalar
     tail, at 112 or 128 in whole vectors: those two agree to the bit); measured worst 7.1e-6
     (image, a q_norm weight: a sum over every position and head), 8.2e-7 (audio);
  3. noise in the padded audio frames (mask False) leaves the audio loss within 1e-6; the
     controls (the comparison can fail): the padded labels set to a real token change the image
     loss by more than 1e-3; the same noise in the valid frames changes the audio loss by more
     than 1e-3.
Prints one line per check; exit 1 on the first failure."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import check_tokenizer, fp32_model, mm_items  # noqa: E402


def fail(msg):
    print(f"mm_pad_check: FAIL: {msg}")
    sys.exit(1)


def items(tok):
    return mm_items(tmp, tok, 1, ("42", "the quick brown fox jumps over the lazy dog"),
                    (("the cat sat", 16000), ("open the door", 27200)))


def loss_grads(model, b):
    b = dict(b)
    lab = b.pop("labels")
    model.zero_grad(set_to_none=True)
    logits = model(**b).logits
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             lab.reshape(-1), ignore_index=-100)
    loss.backward()
    return loss.item(), {n: x.grad.clone() for n, x in model.named_parameters()
                         if x.grad is not None}


def main():
    tok = check_tokenizer(tmp, ["the quick brown fox jumps over the lazy dog blue sky 42 cat sat open door"])
    p = dict(tmp.PRESETS["ci"], vocab=tok.get_vocab_size())
    model = fp32_model(tmp, p, tok)
    its = items(tok)
    n_checks = 0

    base = {k: tmp.collate(v) for k, v in its.items()}
    ref = {k: loss_grads(model, b) for k, b in base.items()}
    for pad in (64, 7):
        padded = {k: tmp.collate(v, pad=pad) for k, v in its.items()}
        # 1. the lengths are rounded up, and longer than the unpadded ones
        for k in ("image", "audio"):
            T0, T = base[k]["input_ids"].shape[1], padded[k]["input_ids"].shape[1]
            if T % pad or T <= T0 or T - T0 >= pad:
                fail(f"pad {pad}: {k} sequence length {T} from {T0}")
            n_checks += 1
        F0, F = base["audio"]["input_features"].shape[1], padded["audio"]["input_features"].shape[1]
        if F % pad or F <= F0 or F - F0 >= pad:
            fail(f"pad {pad}: audio frames {F} from {F0}")
        n_checks += 1
        # 2. the same loss and gradients
        for k in ("image", "audio"):
            loss, grads = loss_grads(model, padded[k])
            l0, g0 = ref[k]
            if abs(loss - l0) > 1e-6 * abs(l0):
                fail(f"pad {pad}: {k} loss {loss:.9f}, unpadded {l0:.9f}")
            if grads.keys() != g0.keys():
                fail(f"pad {pad}: {k}: other parameters got gradients")
            worst, wn = max((float((grads[n] - g0[n]).norm() / g0[n].norm().clamp_min(1e-30)), n)
                            for n in g0)
            if worst > 5e-5:
                fail(f"pad {pad}: {k} gradients differ by {worst:.2e} (relative)")
            n_checks += 2
            print(f"mm_pad_check: pad {pad}: {k} length {base[k]['input_ids'].shape[1]} -> "
                  f"{padded[k]['input_ids'].shape[1]}"
                  + (f", frames {F0} -> {F}" if k == "audio" else "") +
                  f"; loss {loss:.7f} vs {l0:.7f}; {len(g0)} gradients within {worst:.1e} ({wn})")

    # 3. the controls: padding that is not inert changes the loss
    b = tmp.collate(its["image"], pad=64)
    lab, att = b["labels"], b["attention_mask"]
    b["labels"] = torch.where(att == 0, torch.full_like(lab, 5), lab)
    l_bad = loss_grads(model, b)[0]
    if abs(l_bad - ref["image"][0]) <= 1e-3 * abs(ref["image"][0]):
        fail(f"labelled padding left the image loss at {l_bad:.6f} (the check is void)")
    n_checks += 1
    b = tmp.collate(its["audio"], pad=64)
    m = b["input_features_mask"]
    noise = torch.randn(b["input_features"].shape, generator=torch.Generator().manual_seed(0))
    b["input_features"] = torch.where(m[..., None], b["input_features"], noise)
    a_pad = loss_grads(model, b)[0]  # noise in the padded frames (mask False): inert too
    if abs(a_pad - ref["audio"][0]) > 1e-6 * abs(ref["audio"][0]):
        fail(f"noise in the masked padded frames moved the audio loss to {a_pad:.9f}")
    b["input_features"] = torch.where(m[..., None], noise, b["input_features"])
    a_bad = loss_grads(model, b)[0]  # the same noise in the valid frames: the loss moves
    if abs(a_bad - ref["audio"][0]) <= 1e-3 * abs(ref["audio"][0]):
        fail(f"noisy valid frames left the audio loss at {a_bad:.6f} (the check is void)")
    n_checks += 2
    print(f"mm_pad_check: controls: labelled padding image loss {l_bad:.4f} vs "
          f"{ref['image'][0]:.4f}; noise in the masked frames {a_pad:.7f}, in the valid frames "
          f"{a_bad:.4f} vs "
          f"{ref['audio'][0]:.4f}")
    print(f"mm_pad_check: ok ({n_checks} checks)")


if __name__ == "__main__":
    main()
