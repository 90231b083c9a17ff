#!/usr/bin/env python3
"""Output-KL scale fit of a Q4 package ("dwq", after MLX's distilled weight quantization): the
fp16 model is the teacher, the package's 4-bit model the student, and each block's scale is moved
by gradient descent so that the student's next-token distribution comes closer to the teacher's
on calibration text. The codes and zero points stay as the package has them (unless --reround;
--codes fits the codes too), so the result is the same plain MatMulNBits package (block 32, fp16
scales, uint4 zero points) with other scale (code) bytes: the same size, loaded unchanged by
onnxruntime and g4cu.

    python3 tools/python/dwq_fit.py HF_DIR Q4_PKG OUT_PKG --calib TEXT [--calib-tokens 8192]
            [--seq 256] [--batch 8] [--steps 300] [--minutes M] [--lr 1e-3] [--wd 0]
            [--val-frac 0.1] [--val-max 64] [--eval-every 25] [--patience 4] [--seed 0]
            [--reround N | --codes [--code-lr 1e-3]] [--device cuda|cpu] [--threads N]
            [--cache-gb 8] [--log-every 10]

HF_DIR: the HF checkpoint the package was exported from (train_proxy.py's OUT/hf: transformers'
Gemma4ForConditionalGeneration, fp16 safetensors); Q4_PKG: a `g4cu quantize` output of that
export (any --method, --keep-auto too: linears kept fp16 stay the HF weights); OUT_PKG: written
as a copy of Q4_PKG in which only the decoder's MatMulNBits scale initializers differ (and with
--reround or --codes their code initializers). TEXT: calibration text (the train split, never
the text the result is measured on), tokenized with Q4_PKG/tokenizer.json like train_proxy.py
does.

How:
1. Every com.microsoft MatMulNBits node of Q4_PKG/decoder/model.onnx names its weight
   "<component>.<path>.weight_t_Q4" (the exporter's naming: the HF text model's parameter path,
   "model.layers.3.mlp.up_proj" or "lm_head", behind the component "decoder."); the path is
   looked up in the HF model (model.* in its text decoder, lm_head its output embedding). A node
   whose path does not resolve to an nn.Linear, or whose K / N / block differ from that linear's,
   is a one-line error; so is a dequantized weight (q - zp) * s0 whose relative Frobenius
   distance to the HF weight exceeds MAP_REL_MAX (a mis-mapped node lands near 1.4, 4-bit
   quantization near 0.1).
2. Teacher: the HF model in fp32. Student: a copy whose matched linears compute with
   W[n, k] = (q[n, k] - zp[n, b]) * s[n, b], b = k // 32, q and zp frozen, s = s0 * exp(t[n, b])
   with t trainable (0 at the start: the student starts as the package): Adam's step on t is a
   relative step on s, so one learning rate suits scales of every magnitude. The lm_head gets
   its own quantized module, so the (tied) input embedding keeps the fp16 weights.
3. Loss: KL(teacher || student) of the next-token distributions at every position of windows
   of --seq tokens (<bos> + a contiguous piece of TEXT), mean over positions; AdamW on t only
   (--wd: its decoupled decay pulls t toward 0, the package's scales; 0 by default), batches
   of --batch windows drawn from a seeded permutation of the fit windows, a new permutation
   for each pass: with enough --calib-tokens every step sees windows it has not seen before.
   Held-out early stop: the last --val-frac of the windows (at most --val-max; the end of the
   calibration text, so other documents than the fit's) are never fitted; every --eval-every
   steps (and at the last) their KL is measured with the fp16 scales, the scales of the best
   such step are kept (the start, step 0, if none is below it), and the fit stops after
   --patience evaluations without a new best, at --steps, or when --minutes runs out
   (--val-frac 0: no validation, the last step's scales are written). The fit
   windows' KL, measured on the first of them (the first steps' windows), and the validation
   KL are printed as the package started and as written: on the trained proxy, 256 windows
   fitted for ~16 passes cut their own KL by 70-78% and the held-out text's by 25-31%.
   Deterministic for a seed on one device.
   --reround N: every N steps (not after the last) the codes are re-chosen for the current
   scales, q = clip(rint(W / s + zp), 0, 15). Off by default: it throws away the clipping the
   quantizer chose, and on the tiny fixture it ended above the plain fit (held-out KLD 0.00502
   vs 0.00444 at 200 steps). The teacher's logits of the validation windows and of the fit
   windows' probe are kept when they fit in --cache-gb, those of all fit windows too when the
   fit makes more than one pass over them (else computed for each batch).
   --codes: the codes are fitted with the scales. On the trained proxy the scales alone ran out
   of capacity (fresh windows, no second pass: the fit windows' KL stalled at -43% after ~300
   steps, validation -31%: not an overfit), and one scale per 32 weights is all they can move;
   the codes are the other 31/32 of the bits. Each code gets a latent v (fp32, in code steps
   relative to its zero point), the forward uses rint(v) and the gradient passes through the
   rounding as if it were v (straight-through); v starts at the package's code plus the HF
   weight's rounding residual, clipped inside the bin (QLinear.init_codes says why in code
   units and why from the HF weight), and has its own Adam lr --code-lr (in code steps; small:
   a code flips only where the KL's gradient keeps pushing its latent for many steps) and no
   decay, halved at every validation without a new best (on the fixture a constant lr stalled
   after ~120 fresh steps, its flips turned to noise, and the scales-only fit caught up by 320;
   halved, the fit went on falling); after each step v is kept inside codes 0..15. The zero
   points stay: with the latent relative to the zero point, moving a zero point would only
   shift which 16 codes a block can reach, and the package's quantizer chose that range from
   all 32 weights. The early stop is
   the same; the codes of the best validation step (rint of the latent) are written. The
   latent, its gradient and Adam moments are 16 bytes a weight (3.2 GB for the proxy's 200M),
   the forward's saved codes and the best step's int8 codes ~5 more; --code-lr 0 gives the
   scales-only fit's package byte for byte.
4. The scales are rounded to fp16 (clamped to [2^-24, 65504]) (the KLs above are those of the
   rounded scales, exactly what the package will hold); then OUT_PKG is written: the whole
   package copied, the new scales (codes) written
   over the old ones at their initializers' bytes: in model.onnx.data at the external-data
   offset, or in model.onnx's raw_data for small inline initializers (model.onnx re-serialized;
   checked to round-trip byte for byte first). Nothing is written when a check fails.

Needs torch, transformers, tokenizers, onnx, numpy (the GPU image's python3 has them; here
/work/mm-venv). Prints the batch KL per step, the fit and validation KL at each evaluation,
with the time.
"""
import argparse
import copy
import math
import os
import re
import shutil
import sys
import time

import numpy as np

BLOCK = 32  # the one MatMulNBits block size g4cu takes (quant/q4.h G4_Q4_BLOCK)
# Largest relative Frobenius distance ||(q - zp) s0 - W|| / ||W|| accepted for a matched linear:
# 4-bit asymmetric blocks of 32 give ~0.1 on trained weights, a node mapped to another linear
# of the same shape ~1.4 (two unrelated matrices of similar norm).
MAP_REL_MAX = 0.3
FP16_MAX = 65504.0
FP16_MIN_SUB = 2.0 ** -24  # the smallest positive fp16 (subnormal)
# --codes: the latent codes' default Adam step, in code steps (on the fixture's one-pass fits
# 1e-3 beat 3e-4 and 3e-3, with the halving too: bench/NOTES.md "The output-KL fit moves the
# codes too")
CODE_LR = 1e-3


def die(msg):
    print(f"dwq_fit: {msg}", file=sys.stderr)
    sys.exit(1)


# --- the package side ----------------------------------------------------------------------------


class PkgTensor:
    """One initializer: its numpy value and where its bytes live (for writing back in place)."""

    def __init__(self, init, data_path):
        from onnx import TensorProto, helper

        self.name = init.name
        self.proto = init
        self.shape = tuple(init.dims)
        self.dtype = helper.tensor_dtype_to_np_dtype(init.data_type)
        self.external = init.data_location == TensorProto.EXTERNAL
        n = int(np.prod(self.shape)) if self.shape else 1
        nbytes = n * np.dtype(self.dtype).itemsize
        if self.external:
            kv = {e.key: e.value for e in init.external_data}
            if kv.get("location") != os.path.basename(data_path):
                die(f"{init.name}: external data in '{kv.get('location')}', expected "
                    f"'{os.path.basename(data_path)}'")
            self.offset = int(kv.get("offset", 0))
            self.length = int(kv.get("length", nbytes))
            if self.length != nbytes:
                die(f"{init.name}: external length {self.length}, expected {nbytes} for "
                    f"{self.shape} {np.dtype(self.dtype).name}")
            with open(data_path, "rb") as f:
                f.seek(self.offset)
                raw = f.read(nbytes)
            if len(raw) != nbytes:
                die(f"{init.name}: {data_path} ends before offset {self.offset} + {nbytes}")
        else:
            raw = init.raw_data
            if len(raw) != nbytes:
                die(f"{init.name}: {len(raw)} raw bytes, expected {nbytes} (not raw_data?)")
        self.value = np.frombuffer(raw, dtype=self.dtype).reshape(self.shape).copy()


class QLinearSpec:
    """A MatMulNBits node of the package: W [K, N] as codes q [N, kb*32], zero points zp [N, kb]
    and scales s0 [N, kb] (float32 of the stored fp16), plus the initializers they came from."""

    def __init__(self, node, inits, data_path):
        attrs = {a.name: a for a in node.attribute}
        self.node = node.name
        self.K, self.N = int(attrs["K"].i), int(attrs["N"].i)
        self.bits = int(attrs["bits"].i) if "bits" in attrs else 4
        self.block = int(attrs["block_size"].i)
        if self.bits != 4 or self.block != BLOCK:
            die(f"{node.name}: bits {self.bits} block_size {self.block}, expected 4 and {BLOCK}")
        ins = list(node.input)
        if len(ins) < 3 or any(x for x in ins[4:]):
            die(f"{node.name}: inputs {ins}, expected A, B, scales[, zero_points] only")
        for x in ins[1:4]:
            if x and x not in inits:
                die(f"{node.name}: input '{x}' is not an initializer")
        K, N, kb = self.K, self.N, (self.K + BLOCK - 1) // BLOCK
        self.kb = kb
        self.q_t = PkgTensor(inits[ins[1]], data_path)
        self.s_t = PkgTensor(inits[ins[2]], data_path)
        self.zp_t = PkgTensor(inits[ins[3]], data_path) if len(ins) > 3 and ins[3] else None
        if self.q_t.value.size != N * kb * BLOCK // 2 or self.q_t.dtype != np.uint8:
            die(f"{ins[1]}: {self.q_t.shape} {self.q_t.dtype}, expected uint8 [{N}, {kb}, 16]")
        if self.s_t.value.size != N * kb or self.s_t.dtype != np.float16:
            die(f"{ins[2]}: {self.s_t.shape} {self.s_t.dtype}, expected fp16 [{N} * {kb}]")
        packed = self.q_t.value.reshape(N, kb * BLOCK // 2)
        q = np.empty((N, kb * BLOCK), np.uint8)
        q[:, 0::2], q[:, 1::2] = packed & 15, packed >> 4  # low nibble = even k (quant/q4.h)
        self.q = q
        if self.zp_t is not None:
            zb = (kb + 1) // 2
            if self.zp_t.value.size != N * zb or self.zp_t.dtype != np.uint8:
                die(f"{ins[3]}: {self.zp_t.shape} {self.zp_t.dtype}, expected uint8 [{N} * {zb}]")
            zpk = self.zp_t.value.reshape(N, zb)
            zp = np.empty((N, 2 * zb), np.uint8)
            zp[:, 0::2], zp[:, 1::2] = zpk & 15, zpk >> 4
            self.zp = zp[:, :kb]
        else:
            self.zp = np.full((N, kb), 8, np.uint8)  # the op's default zero point
        self.s0 = self.s_t.value.reshape(N, kb).astype(np.float32)
        # the module path in the HF text model: "<component>.<path>.weight_t_Q4[...]"
        m = re.match(r"^[^.]+\.(.+)\.weight_t_Q4", ins[1])
        if not m:
            die(f"{node.name}: weight '{ins[1]}' is not named <component>.<path>.weight_t_Q4")
        self.path = m.group(1)

    def dequant(self):
        """(q - zp) * s0 as W [N, K] float32 (HF's nn.Linear layout: out x in)."""
        w = (self.q.reshape(self.N, self.kb, BLOCK).astype(np.float32)
             - self.zp[:, :, None].astype(np.float32)) * self.s0[:, :, None]
        return w.reshape(self.N, self.kb * BLOCK)[:, :self.K]

    def packed_codes(self, q):
        """q [N, kb*32] codes -> the initializer's bytes (padding codes past K as they were)."""
        q = q.astype(np.uint8)
        return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8).reshape(self.q_t.shape)


def load_package(pkg):
    import onnx

    path = os.path.join(pkg, "decoder", "model.onnx")
    data_path = path + ".data"
    raw = open(path, "rb").read()
    model = onnx.ModelProto()
    model.ParseFromString(raw)
    inits = {i.name: i for i in model.graph.initializer}
    specs = [QLinearSpec(n, inits, data_path) for n in model.graph.node
             if n.op_type == "MatMulNBits" and n.domain == "com.microsoft"]
    if not specs:
        die(f"{path}: no com.microsoft MatMulNBits node (not a Q4 package?)")
    return model, raw, specs


# --- the model side ------------------------------------------------------------------------------


def resolve(hf, path):
    """The HF nn.Linear of an exporter path: "model.X" in the text decoder, "lm_head" the output
    embedding (the exporter names the text model's parameters as in Gemma4ForCausalLM)."""
    import torch

    if path == "lm_head":
        mod = hf.get_output_embeddings()
    elif path.startswith("model."):
        try:
            mod = hf.get_decoder().get_submodule(path[len("model."):])
        except AttributeError:
            mod = None
    else:
        mod = None
    return mod if isinstance(mod, torch.nn.Linear) else None


# --codes: how far inside the outermost bins a latent code is kept (in code steps): the latent
# starts EDGE_GAP or more inside its code's bin and stays in [-zp - 0.5 + EDGE_GAP,
# 15 - zp + 0.5 - EDGE_GAP], so every code rint(v) + zp is in 0..15 without a clamp (a clamp
# would stop the straight-through gradient, and a latent pushed past it would never come back).
EDGE_GAP = 1.0 / 64


def make_qlinear_class():
    import torch

    class QLinear(torch.nn.Module):
        """y = x W^T (+ bias) with W [N, K] = ((q - zp) * s0 * exp(t)) per block of 32 along K.
        qz = q - zp as float [N, kb, 32] (frozen; --reround re-chooses q), zp_f [N, kb] the zero
        points, s0 [N, kb] the package's scales (frozen), t [N, kb] (trained).
        With codes (--codes): qz is replaced by rint(v), v [N, kb, 32] a trained latent in code
        units relative to the zero point (straight-through: the forward uses rint(v), the
        gradient passes as if it were v); see init_codes for why code units."""

        def __init__(self, spec, bias):
            super().__init__()
            self.K, self.N, self.kb = spec.K, spec.N, spec.kb
            self.register_buffer("qz", torch.from_numpy(
                spec.q.reshape(spec.N, spec.kb, BLOCK).astype(np.float32)
                - spec.zp[:, :, None].astype(np.float32)))
            self.register_buffer("zp_f", torch.from_numpy(spec.zp.astype(np.float32)))
            self.register_buffer("s0", torch.from_numpy(spec.s0.copy()))
            self.t = torch.nn.Parameter(torch.zeros(spec.N, spec.kb))
            self.v = None  # the latent codes (init_codes)
            self.bias = bias  # None for every linear of this model; kept if present
            self.round_fp16 = False  # True: compute with the fp16 scales the package will hold

        def init_codes(self, w):
            """Makes the codes trainable, from w [N, K] the HF weight (fp32). The latent is in
            units of the package's scale s0, not of the moving s: v = (q - zp) + r, where the
            written code is rint(v) + zp. A latent weight W' in weight units rounded with the
            current s (rint(W' / s)) would flip codes wherever s moves (Adam moves log s by ~0.02
            on average, 0.2 at most on the proxy: a code of magnitude 8 crosses a boundary), as
            --reround does, which lost to the scales-only fit on the fixture; in units of s0 a
            code flips only where the KL's gradient pushes its own latent across, and with the
            latent frozen (--code-lr 0) the fit is the scales-only one exactly.
            r: the HF weight's rounding residual w / s0 - (q - zp), clipped into the bin
            (+-(0.5 - EDGE_GAP)), so the start is the package's codes exactly (step 0 is the
            package) while the latent remembers which codes were close calls (a weight halfway
            between two codes flips with a small push, one at a code's centre needs a long one;
            AdaRound's observation). The package's dequantized weight would start every latent at
            its centre and lose that; the HF weight is there anyway (the teacher)."""
            import torch.nn.functional as F

            wp = F.pad(w, (0, self.kb * BLOCK - self.K)).reshape(self.N, self.kb, BLOCK)
            h = 0.5 - EDGE_GAP
            r = (wp / self.s0[:, :, None] - self.qz).clamp(-h, h)
            r = r.reshape(self.N, -1)
            r[:, self.K:] = 0  # padding codes past K: at their centre, they get no gradient
            v = self.qz + r.reshape(self.N, self.kb, BLOCK)
            self.v = torch.nn.Parameter(v)
            # the latent's range: codes 0..15 (relative to the zero point), EDGE_GAP inside
            self.register_buffer("v_lo", -self.zp_f[:, :, None] - h)
            self.register_buffer("v_hi", 15 - self.zp_f[:, :, None] + h)

        def project(self):
            """After an optimizer step: the latent back into the codes' range (see EDGE_GAP)."""
            self.v.data.copy_(torch.maximum(torch.minimum(self.v.data, self.v_hi), self.v_lo))

        def codes(self):
            """q - zp [N, kb, 32] as the forward uses them: rint(v) with v's gradient (STE)."""
            if self.v is None:
                return self.qz
            return torch.round(self.v).detach() + (self.v - self.v.detach())

        def scales(self):
            s = (self.s0 * torch.exp(self.t)).clamp(FP16_MIN_SUB, FP16_MAX)
            return s.half().float() if self.round_fp16 else s

        def forward(self, x):
            w = (self.codes() * self.scales()[:, :, None]).reshape(self.N, self.kb * BLOCK)
            return torch.nn.functional.linear(x, w[:, :self.K].to(x.dtype), self.bias)

    return QLinear


def build_student(hf, specs):
    """A deep copy of the teacher with each matched linear replaced; returns (student, modules)
    with modules[i] the QLinear of specs[i]. Checks shapes and the dequantized weights."""
    import torch

    QLinear = make_qlinear_class()
    seen, worst = {}, (0.0, "")
    for sp in specs:
        lin = resolve(hf, sp.path)
        if lin is None:
            die(f"{sp.node}: '{sp.path}' is no nn.Linear of the HF model (unmatched MatMulNBits)")
        if sp.path in seen:
            die(f"{sp.node}: '{sp.path}' is matched by {seen[sp.path]} too")
        seen[sp.path] = sp.node
        if tuple(lin.weight.shape) != (sp.N, sp.K):
            die(f"{sp.node}: K {sp.K} N {sp.N}, but HF '{sp.path}' weight is "
                f"{tuple(lin.weight.shape)} (expected [{sp.N}, {sp.K}])")
        w = lin.weight.detach().float().cpu().numpy()
        rel = float(np.linalg.norm(sp.dequant() - w) / max(np.linalg.norm(w), 1e-30))
        if not rel <= MAP_REL_MAX:
            die(f"{sp.node}: dequantized weight is {rel:.3f} (relative) from HF '{sp.path}', "
                f"expected <= {MAP_REL_MAX}: mis-mapped node or another model")
        worst = max(worst, (rel, sp.path))
    print(f"dwq_fit: {len(specs)} MatMulNBits matched to HF linears; (q - zp) * s vs HF weight: "
          f"largest relative distance {worst[0]:.3f} ({worst[1]}), limit {MAP_REL_MAX}",
          flush=True)
    student = copy.deepcopy(hf)
    mods = []
    for sp in specs:
        lin = resolve(student, sp.path)
        q = QLinear(sp, lin.bias).to(lin.weight.device)
        if sp.path == "lm_head":
            student.set_output_embeddings(q)  # unties: the input embedding keeps fp16 weights
        else:
            parent, _, leaf = sp.path[len("model."):].rpartition(".")
            owner = student.get_decoder().get_submodule(parent) if parent else student.get_decoder()
            setattr(owner, leaf, q)
        mods.append(q)
    for p in student.parameters():
        p.requires_grad_(False)
    for q in mods:
        q.t.requires_grad_(True)
    return student, mods


# --- calibration data and the loss ---------------------------------------------------------------


def calib_windows(tok_path, text_path, n_tokens, seq):
    """Windows [n, seq]: <bos> + seq-1 consecutive ids of TEXT (encoded as train_proxy.py does:
    newline runs apart, no special tokens), from the start, without overlap."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tok_path)
    bos = tok.token_to_id("<bos>")
    if bos is None:
        die(f"{tok_path}: no <bos> token")
    text = open(text_path, encoding="utf-8").read()
    segs = [s for s in re.split(r"(\n+)", text) if s]
    ids = []
    for j in range(0, len(segs), 1000):  # only as much of TEXT as n_tokens needs (train.txt: 4M)
        ids += [t for e in tok.encode_batch(segs[j:j + 1000], add_special_tokens=False)
                for t in e.ids]
        if len(ids) >= n_tokens:
            break
    ids = ids[:n_tokens]
    n = len(ids) // (seq - 1)
    if n < 1:
        die(f"{text_path}: {len(ids)} tokens, a window needs {seq - 1} (lower --seq)")
    x = np.array(ids[:n * (seq - 1)], np.int64).reshape(n, seq - 1)
    return np.concatenate([np.full((n, 1), bos, np.int64), x], axis=1)


def kl(t_logits, s_logits):
    """Mean over positions of KL(teacher || student), both [B, S, V] logits."""
    import torch.nn.functional as F

    lt = F.log_softmax(t_logits.float(), dim=-1)
    ls = F.log_softmax(s_logits.float(), dim=-1)
    return (lt.exp() * (lt - ls)).sum(-1).mean()


# --- writing the package -------------------------------------------------------------------------


def write_package(src, out, model, raw, writes):
    """Copies src to out, then writes each (PkgTensor, new numpy array) over the old bytes."""
    if os.path.exists(out):
        die(f"{out}: exists (give a new directory)")
    # the inline initializers are rewritten through the parsed model: it must re-serialize to
    # the very bytes it was read from, so that nothing but those raw_data changes
    inline = [(t, v) for t, v in writes if not t.external]
    if inline and model.SerializeToString() != raw:
        die(f"{src}/decoder/model.onnx: does not re-serialize byte for byte; cannot rewrite it")
    tmp = out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    data = os.path.join(tmp, "decoder", "model.onnx.data")
    with open(data, "r+b") as f:
        for t, v in writes:
            b = np.ascontiguousarray(v.astype(t.dtype)).tobytes()
            assert len(b) == t.value.nbytes, t.name
            if t.external:
                f.seek(t.offset)
                f.write(b)
    if inline:
        for t, v in inline:
            t.proto.raw_data = np.ascontiguousarray(v.astype(t.dtype)).tobytes()
        new = model.SerializeToString()
        if len(new) != len(raw):
            die("decoder/model.onnx: re-serialized size changed")
        with open(os.path.join(tmp, "decoder", "model.onnx"), "wb") as f:
            f.write(new)
    os.rename(tmp, out)  # the package appears whole or not at all


# --- main ----------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf")
    ap.add_argument("pkg")
    ap.add_argument("out")
    ap.add_argument("--calib", required=True, help="calibration text (train split)")
    ap.add_argument("--calib-tokens", type=int, default=8192, help="tokens of TEXT used")
    ap.add_argument("--val-frac", type=float, default=0.1,
                    help="fraction of the windows kept for validation (0: none, last step kept)")
    ap.add_argument("--val-max", type=int, default=64, help="most validation windows")
    ap.add_argument("--eval-every", type=int, default=25, help="steps between validations")
    ap.add_argument("--patience", type=int, default=4,
                    help="validations without a new best before stopping")
    ap.add_argument("--seq", type=int, default=256, help="window length (with <bos>)")
    ap.add_argument("--batch", type=int, default=8, help="windows per step")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=0, help="time budget of the fit (0: none)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam step on log(scale)")
    ap.add_argument("--wd", type=float, default=0.0,
                    help="AdamW's decoupled decay of log(scale) toward 0 (the package's scales)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reround", type=int, default=0, help="re-choose codes every N steps")
    ap.add_argument("--codes", action="store_true",
                    help="fit the 4-bit codes too (latent codes, straight-through rounding)")
    ap.add_argument("--code-lr", type=float, default=CODE_LR,
                    help="--codes: Adam step on the latent codes, in code steps")
    ap.add_argument("--device", default=None, help="cuda when available, else cpu")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's choice)")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--cache-gb", type=float, default=8,
                    help="keep the teacher's logits when they fit in this many GiB")
    a = ap.parse_args()
    if a.codes and a.reround:
        die("--codes and --reround both choose the codes: give one")
    if not a.code_lr >= 0:
        die(f"--code-lr {a.code_lr}: expected >= 0")
    if not 0 <= a.val_frac < 1 or a.val_max < 1 or a.eval_every < 1 or a.patience < 1:
        die(f"--val-frac {a.val_frac} --val-max {a.val_max} --eval-every {a.eval_every} "
            f"--patience {a.patience}: expected 0 <= frac < 1 and the others >= 1")
    t_start = time.time()
    for p in (a.hf, a.pkg):
        if not os.path.isdir(p):
            die(f"{p}: not a directory")
    if os.path.exists(a.out):
        die(f"{a.out}: exists (give a new directory)")

    # the windows first: a split that leaves nothing to fit is refused before the models load
    win = calib_windows(os.path.join(a.pkg, "tokenizer.json"), a.calib, a.calib_tokens, a.seq)
    n_win = win.shape[0]
    n_val = min(a.val_max, max(1, round(a.val_frac * n_win))) if a.val_frac > 0 else 0
    n_fit = n_win - n_val
    if n_fit < 1:
        die(f"{a.calib}: {n_win} calibration windows of {a.seq} tokens leave none to fit after "
            f"{n_val} for validation (more --calib-tokens, a lower --seq or --val-frac 0)")

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    import transformers

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        # TF32 matmuls: logit errors ~1e-3 move a KL of ~1e-2 by ~1e-6, and the fit runs several
        # times faster
        torch.set_float32_matmul_precision("high")
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)

    model, raw, specs = load_package(a.pkg)
    # the checkpoint's own class (train_proxy.py: Gemma4ForConditionalGeneration), in fp32
    cfg = transformers.AutoConfig.from_pretrained(a.hf)
    arch = (getattr(cfg, "architectures", None) or [""])[0]
    if not hasattr(transformers, arch):
        die(f"{a.hf}/config.json: architecture '{arch}' is not a transformers class")
    hf = getattr(transformers, arch).from_pretrained(a.hf, dtype=torch.float32).to(dev).eval()
    student, mods = build_student(hf, specs)
    if a.codes:
        with torch.no_grad():
            for sp, q in zip(specs, mods):
                q.init_codes(resolve(hf, sp.path).weight.detach().float())
    student.eval()  # no dropout; gradients still flow to t
    win = torch.from_numpy(win)
    # the validation windows are the last ones: the end of the calibration text, other
    # documents than the fit's as far as the text allows (interleaved windows of one document
    # would share its names and topics and hide an overfit)
    fit_win, val_win = win[:n_fit], win[n_fit:]
    batch = min(a.batch, n_fit)
    passes = a.steps * batch / n_fit
    print(f"dwq_fit: {n_win} calibration windows of {a.seq} tokens from {a.calib}: {n_fit} fit, "
          f"{n_val} validation; batch {batch}, {a.steps} steps ({passes:.2f} passes over the fit "
          f"windows), lr {a.lr}, weight decay {a.wd}, seed {a.seed}, {dev}; "
          f"{sum(q.t.numel() for q in mods):,} scales trained" + (
              f", and {sum(q.v.numel() for q in mods):,} codes (lr {a.code_lr})" if a.codes
              else ""), flush=True)

    vocab = hf.get_output_embeddings().weight.shape[0]
    win_bytes = a.seq * vocab * 4
    budget = a.cache_gb * (1 << 30)

    def teacher_logits(w):
        with torch.no_grad():
            return torch.cat([hf(input_ids=w[i:i + batch].to(dev), use_cache=False).logits.float()
                              for i in range(0, w.shape[0], batch)])

    # the teacher's logits of the windows measured again and again: the validation windows and
    # a probe of as many fit windows (the first of the seeded order: the first steps' windows),
    # kept when they fit in --cache-gb (else recomputed at each evaluation)
    gen = torch.Generator().manual_seed(a.seed)
    order, pos = torch.randperm(n_fit, generator=gen), 0
    probe_win = fit_win[order[:min(n_fit, max(n_val, 8 * batch))]]
    sets = {"fit": [probe_win, None], "val": [val_win, None]}
    for v in sets.values():
        if v[0].shape[0] and v[0].shape[0] * win_bytes <= budget:
            v[1] = teacher_logits(v[0])
            budget -= v[0].shape[0] * win_bytes
    # the fit windows' logits are kept only when some are used again (more than one pass)
    t_cache = None
    if passes > 1 and n_fit * win_bytes <= budget:
        t_cache = teacher_logits(fit_win)

    def teacher(idx):
        if t_cache is not None:
            return t_cache[idx]
        with torch.no_grad():
            return hf(input_ids=fit_win[idx].to(dev), use_cache=False).logits.float()

    def set_kl(name):
        """KL over a window set with the scales as they will be stored (fp16)."""
        w, cached = sets[name]
        if w.shape[0] == 0:
            return float("nan")
        for q in mods:
            q.round_fp16 = True
        tot = 0.0
        with torch.no_grad():
            for i in range(0, w.shape[0], batch):
                x = w[i:i + batch].to(dev)
                t_l = cached[i:i + batch] if cached is not None else \
                    hf(input_ids=x, use_cache=False).logits.float()
                tot += float(kl(t_l, student(input_ids=x, use_cache=False).logits)) * x.shape[0]
        for q in mods:
            q.round_fp16 = False
        return tot / w.shape[0]

    fit0, val0 = set_kl("fit"), set_kl("val")
    print(f"dwq_fit: KL of {a.pkg}: fit windows {fit0:.6f} ({probe_win.shape[0]} of them), "
          f"validation {val0:.6f} ({n_val}) ({time.time() - t_start:.1f} s)", flush=True)

    w_hf = None
    if a.reround:
        w_hf = [resolve(hf, sp.path).weight.detach().float() for sp in specs]

    def snapshot():
        # --codes: the codes the forward uses (rint(v), int8: a quarter of the latent's bytes);
        # restored as the latent they round to, the state is the same model
        return [(q.t.detach().clone(), q.qz.clone() if a.reround else
                 torch.round(q.v.detach()).to(torch.int8) if a.codes else None) for q in mods]

    def codes_changed():
        """--codes: how many codes (within K) differ from the package's."""
        with torch.no_grad():
            return sum(int((torch.round(q.v).reshape(q.N, -1)[:, :q.K]
                            != q.qz.reshape(q.N, -1)[:, :q.K]).sum()) for q in mods)

    # the best validation KL so far and the scales (codes) that gave it: the start to begin with
    best, best_step, best_state, since = val0, 0, snapshot() if n_val else None, 0
    groups = [{"params": [q.t for q in mods]}]
    if a.codes:
        # the latent's own lr (in code steps: ~lr a step where the gradient keeps its sign, so a
        # code at its bin's centre flips after ~0.5 / lr such steps) and no decay
        groups.append({"params": [q.v for q in mods], "lr": a.code_lr, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=a.lr, weight_decay=a.wd)
    t_fit, done, run_loss, run_n = time.time(), 0, 0.0, 0
    c_fit = time.process_time()
    stop = ""
    for step in range(a.steps):
        if pos + batch > n_fit:  # a new pass: a new permutation from the same generator
            order, pos = torch.randperm(n_fit, generator=gen), 0
        idx = order[pos:pos + batch]
        pos += batch
        loss = kl(teacher(idx), student(input_ids=fit_win[idx].to(dev), use_cache=False).logits)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if a.codes:
            with torch.no_grad():
                for q in mods:
                    q.project()
        done = step + 1
        run_loss, run_n = run_loss + float(loss.detach()), run_n + 1
        # (never after the last step: the codes would change with no step to adapt the scales)
        if a.reround and done % a.reround == 0 and done < a.steps:
            with torch.no_grad():
                for q, w in zip(mods, w_hf):
                    s = q.scales()  # [N, kb]
                    zp = q.zp_f[:, :, None]  # [N, kb, 1]
                    wp = torch.nn.functional.pad(w, (0, q.kb * BLOCK - q.K))
                    codes = torch.clamp(torch.round(wp.reshape(q.N, q.kb, BLOCK) / s[:, :, None]
                                                    + zp), 0, 15).reshape(q.N, -1)
                    old = (q.qz + zp).reshape(q.N, -1)
                    codes[:, q.K:] = old[:, q.K:]  # padding codes past K keep their values
                    q.qz.copy_(codes.reshape(q.N, q.kb, BLOCK) - zp)
        el = time.time() - t_fit
        if a.minutes and el > a.minutes * 60 and done < a.steps:
            stop = f"--minutes {a.minutes} reached after {done}/{a.steps} steps"
        last = done == a.steps or stop
        if n_val and (done % a.eval_every == 0 or last):
            v = set_kl("val")
            mark = ""
            if v < best:
                best, best_step, best_state, since, mark = v, done, snapshot(), 0, " best"
            else:
                since += 1
                if a.codes:
                    # no new best: the codes' flips have turned to noise (fixture: validation
                    # and the running fit KL stall, then rise); halve the latent's lr
                    opt.param_groups[1]["lr"] *= 0.5
            print(f"dwq_fit: step {done}/{a.steps} fit KL {run_loss / run_n:.6f} (mean of the "
                  f"last {run_n} batches) validation KL {v:.6f}{mark} {el:.1f} s "
                  f"({el / done:.3f} s/step)" + (f"; {codes_changed():,} codes changed"
                                                 if a.codes else ""), flush=True)
            run_loss, run_n = 0.0, 0
            if not stop and since >= a.patience and done < a.steps:
                stop = (f"validation KL not below {best:.6f} (step {best_step}) for {since} "
                        f"evaluations after {done}/{a.steps} steps")
        elif done % a.log_every == 0 or done == 1 or last:
            print(f"dwq_fit: step {done}/{a.steps} KL {float(loss.detach()):.6f} {el:.1f} s "
                  f"({el / done:.3f} s/step)", flush=True)
        if stop:
            print(f"dwq_fit: {stop}: stopping", flush=True)
            break
    # the process's CPU over the steps alone (not the loading and tokenizing before): ~1 core
    # of python launching GPU work; run.sh runs quantizations beside the fits on the other cores
    el, cpu = time.time() - t_fit, time.process_time() - c_fit
    print(f"dwq_fit: the steps used {cpu:.1f} CPU s in {el:.1f} s ({cpu / max(el, 1e-9):.2f} "
          "cores)", flush=True)
    if n_val:  # the scales (codes) of the best validation step, not the last
        with torch.no_grad():
            for q, (t, qz) in zip(mods, best_state):
                q.t.copy_(t)
                if a.codes:
                    q.v.copy_(qz.float())
                elif qz is not None:
                    q.qz.copy_(qz)
    else:
        best_step = done
    fit1, val1 = set_kl("fit"), set_kl("val")
    tshift = torch.cat([q.t.detach().flatten() for q in mods]).abs()

    def pct(x, x0):
        return f"{100 * (x / x0 - 1):+.1f}%" if x0 > 0 else "n/a"

    print(f"dwq_fit: kept the scales of step {best_step} of {done} "
          f"({time.time() - t_fit:.1f} s); |log scale change| mean {float(tshift.mean()):.4f}, "
          f"max {float(tshift.max()):.4f}" + (
              f"; {codes_changed():,} of {sum(q.N * q.K for q in mods):,} codes changed"
              if a.codes else ""), flush=True)
    print(f"dwq_fit: fit KL {fit0:.6f} -> {fit1:.6f} ({pct(fit1, fit0)}); " + (
          f"validation KL {val0:.6f} -> {val1:.6f} ({pct(val1, val0)})" if n_val else
          "no validation windows"), flush=True)
    if not math.isfinite(fit1) or (n_val and not math.isfinite(val1)):
        die(f"KL {fit1} (fit) {val1} (validation) after the fit: nothing written")

    writes = []
    for sp, q in zip(specs, mods):
        s = q.scales().detach().cpu().numpy().astype(np.float16)
        if not np.all(np.isfinite(s)):
            die(f"{sp.s_t.name}: non-finite fitted scale: nothing written")
        writes.append((sp.s_t, s.reshape(sp.s_t.shape)))
        if a.reround:
            codes = (q.qz + q.zp_f[:, :, None]).round().cpu().numpy().reshape(sp.N, -1)
            writes.append((sp.q_t, sp.packed_codes(codes)))
        elif a.codes:
            codes = (torch.round(q.v.detach()) + q.zp_f[:, :, None]).cpu().numpy()
            codes = codes.reshape(sp.N, -1)
            codes[:, sp.K:] = sp.q[:, sp.K:]  # padding codes past K as they were
            if not np.all((codes >= 0) & (codes <= 15)):
                die(f"{sp.q_t.name}: a fitted code outside 0..15: nothing written")
            writes.append((sp.q_t, sp.packed_codes(codes)))
    write_package(a.pkg, a.out, model, raw, writes)
    print(f"dwq_fit: wrote {a.out} ({len(writes)} initializers replaced; "
          f"{time.time() - t_start:.1f} s in all)", flush=True)


if __name__ == "__main__":
    main()
