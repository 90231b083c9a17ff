#!/usr/bin/env python3
"""Independent INT4 (MatMulNBits) fixtures for g4cu's quant tests, made by onnxruntime.

Writes tests/fixtures/q4/ (see the README.md written beside the output):

  decoder/model.onnx(+.data)  the tiny f16 package's decoder quantized by onnxruntime's own
                              MatMulNBitsQuantizer: block 32, asymmetric, k_quant algorithm
                              (KQuantWeightOnlyQuantConfig) for every linear whose K gives an even
                              block count; the linears with an odd block count (K=16: one block) are
                              quantized in a second pass by the DEFAULT algorithm (RTN, C++),
                              because onnxruntime's k_quant packer (neural_compressor
                              weight_only.py make_matmul_weight_only_node) packs the zero points
                              across the whole flattened [N*k_blocks] array and then fails to
                              reshape them to [N, -1] when k_blocks is odd. The MatMulNBits
                              tensors are then renamed to Olive's names (olive_names); bytes,
                              shapes and graph are onnxruntime's.
  ids.txt                     the token ids of the logits runs
  logits_f16.npy              onnxruntime CPU logits, float32 [S, vocab]: embedding model, then
  logits_q4.npy               the f16 / the Q4 decoder graph with empty past KV (one prefill)
  kquant_cases.onnx           fp16 weights of assorted distributions ("<case>.src") and the
                              MatMulNBits tensors onnxruntime's k_quant made from them
  writer_case.onnx            a small input graph with the rewrite's corner cases (see
                              make_writer_case); no expected values
  dequant_cases.onnx          random MatMulNBits weights (odd/even K, odd/even block counts, with
                              and without zero points, 1-D and 2-D scales) and "<case>.expected":
                              what onnxruntime's MatMulNBits CPU kernel computes for A = identity,
                              i.e. the dequantized weight [K, N] as onnxruntime defines it

Run from the repository root with the venv that has onnxruntime:
  /work/venv-hf/bin/python tools/python/make_q4_fixture.py
Nothing here is produced by g4cu; the C tests compare g4cu against these files.
"""

import argparse
import contextlib
import io
import logging
import os
import sys
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import (
    KQuantWeightOnlyQuantConfig,
    MatMulNBitsQuantizer,
)

BLOCK = 32
IR_VERSION = 10  # onnx helper's default (14) is newer than onnxruntime 1.30 accepts (13)
SEED = 20261129
IDS = [2, 17, 563, 88, 1001, 5, 240, 777, 31, 64, 900, 12, 345, 678, 2, 99, 1023, 4, 256, 511]


def matmul_weights(model):
    """{node name: (weight name, K, N)} of MatMuls whose B is a 2-D initializer."""
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
            k, nn = inits[n.input[1]].dims
            out[n.name] = (n.input[1], k, nn)
    return out


@contextlib.contextmanager
def quiet():
    """The quantizers print a progress bar and numpy warns on the k_quant candidates whose
    least-squares system is singular (0/0, never selected); neither is an error."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def olive_names(model):
    """Renames each MatMulNBits node's tensors to the names Olive gives them in the published
    packages ("<W>_Q4", "<W>_scales", "<W>_zero_point"; onnxruntime's k_quant writes "<W>_Q4G32",
    "<W>_scale", "<W>_zp" and its RTN "<W>_zero_points"). Only names change: the bytes, shapes
    (onnxruntime's 2-D scales and zero points) and the graph stay as onnxruntime wrote them."""
    ren = {}
    for n in model.graph.node:
        if n.op_type != "MatMulNBits":
            continue
        b = n.input[1]
        base = b[: -len("_Q4G32")] if b.endswith("_Q4G32") else b[: -len("_Q4")]
        for slot, suffix in ((1, "_Q4"), (2, "_scales"), (3, "_zero_point")):
            ren[n.input[slot]] = base + suffix
            n.input[slot] = base + suffix
    for t in model.graph.initializer:
        t.name = ren.get(t.name, t.name)
    assert len({t.name for t in model.graph.initializer}) == len(model.graph.initializer)


def quantize_decoder(src, dst_dir):
    model = onnx.load(src)  # loads the external data
    linears = matmul_weights(model)
    odd = [name for name, (_, k, _) in linears.items() if ((k + BLOCK - 1) // BLOCK) % 2 == 1]
    q = MatMulNBitsQuantizer(
        model,
        bits=4,
        block_size=BLOCK,
        is_symmetric=False,
        nodes_to_exclude=odd,
        algo_config=KQuantWeightOnlyQuantConfig(),
    )
    with quiet():
        q.process()
    model = q.model.model
    # Second pass: the default (RTN) algorithm for what k_quant could not pack.
    q2 = MatMulNBitsQuantizer(model, bits=4, block_size=BLOCK, is_symmetric=False)
    with quiet():
        q2.process()
    model = q2.model.model
    olive_names(model)
    left = [n.name for n in model.graph.node if n.op_type == "MatMul"]
    assert not left, f"MatMuls left unquantized: {left}"
    n_q = sum(n.op_type == "MatMulNBits" for n in model.graph.node)
    assert n_q == len(linears), (n_q, len(linears))
    os.makedirs(dst_dir, exist_ok=True)
    for f in ("model.onnx", "model.onnx.data"):
        if os.path.exists(os.path.join(dst_dir, f)):
            os.remove(os.path.join(dst_dir, f))
    # onnx_ir's writer: tensors over 256 bytes to model.onnx.data (packed densely in 1.1.0).
    ir.save(ir.from_proto(model), os.path.join(dst_dir, "model.onnx"), external_data="model.onnx.data")
    return len(linears) - len(odd), len(odd)


def run_logits(pkg, decoder_path, ids):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    cpu = ["CPUExecutionProvider"]
    emb = ort.InferenceSession(os.path.join(pkg, "embedding", "model.onnx"), so, providers=cpu)
    dec = ort.InferenceSession(decoder_path, so, providers=cpu)
    x = np.array([ids], dtype=np.int64)
    feeds = {"input_ids": x}
    for i in emb.get_inputs():
        if i.name != "input_ids":
            feeds[i.name] = np.zeros((0, i.shape[-1]), np.float16)
    embeds, ple = emb.run(["inputs_embeds", "per_layer_inputs"], feeds)
    s = x.shape[1]
    f = {"inputs_embeds": embeds, "per_layer_inputs": ple, "attention_mask": np.ones((1, s), np.int64)}
    for i in dec.get_inputs():
        if i.name.startswith("past_key_values"):
            f[i.name] = np.zeros((1, 1, 0, i.shape[-1]), np.float16)
        elif i.name == "position_ids":
            f[i.name] = np.arange(s, dtype=np.int64)[None]
        elif i.name == "input_ids":
            f[i.name] = x
    logits = dec.run(["logits"], f)[0]
    return logits[0].astype(np.float32)


# --- k-quant cases ----------------------------------------------------------------------------


def kquant_weights(rng):
    """(name, fp16 [K, N]) pairs: assorted distributions and awkward blocks."""
    cases = []
    cases.append(("gauss_k256_n16", rng.normal(0, 0.02, (256, 16))))
    cases.append(("uniform_k64_n8", rng.uniform(-1, 1, (64, 8))))
    w = rng.normal(0, 0.02, (128, 16))
    m = rng.random(w.shape) < 0.01
    w[m] *= 20  # rare outliers, as in trained LLM weights
    cases.append(("outliers_k128_n16", w))
    cases.append(("laplace_k192_n12", rng.laplace(0, 0.05, (192, 12))))
    cases.append(("padded_k100_n7", rng.normal(0, 0.5, (100, 7))))  # 4 blocks, last padded
    # One column per awkward block kind, 8 blocks each (K=256).
    cols = []
    blocks = {
        "zeros": lambda: np.zeros(32),
        "const": lambda: np.full(32, 0.3),
        "one_nonzero": lambda: np.eye(1, 32, 7)[0] * 0.25,
        "positive": lambda: rng.uniform(0.5, 2.0, 32),
        "negative": lambda: -rng.uniform(0.001, 0.01, 32),
        "tiny": lambda: rng.normal(0, 1e-6, 32),  # fp16 subnormals
        "large": lambda: rng.normal(0, 1000, 32),
        "two_level": lambda: np.where(rng.random(32) < 0.5, -0.1, 0.2),
        "ramp": lambda: np.linspace(-1, 1, 32),
    }
    for kind in blocks:
        cols.append(np.concatenate([blocks[kind]() if b % 2 == 0 else rng.normal(0, 0.02, 32) for b in range(8)]))
    cases.append(("special_k256_n9", np.stack(cols, axis=1)))
    return [(n, w.astype(np.float16)) for n, w in cases]


def make_kquant_cases(path, rng):
    cases = kquant_weights(rng)
    nodes, inputs, outputs, inits = [], [], [], []
    for name, w in cases:
        k, n = w.shape
        inputs.append(helper.make_tensor_value_info(f"{name}.x", TensorProto.FLOAT16, [1, k]))
        outputs.append(helper.make_tensor_value_info(f"{name}.y", TensorProto.FLOAT16, [1, n]))
        inits.append(numpy_helper.from_array(w, f"{name}.weight_t"))
        nodes.append(helper.make_node("MatMul", [f"{name}.x", f"{name}.weight_t"], [f"{name}.y"], name=f"{name}/MatMul"))
    g = helper.make_graph(nodes, "kquant_cases", inputs, outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    q = MatMulNBitsQuantizer(model, bits=4, block_size=BLOCK, is_symmetric=False, algo_config=KQuantWeightOnlyQuantConfig())
    with quiet():
        q.process()
    model = q.model.model
    assert not [n for n in model.graph.node if n.op_type == "MatMul"]
    for name, w in cases:  # keep the sources (unused initializers) for the C test
        model.graph.initializer.append(numpy_helper.from_array(w, f"{name}.src"))
    onnx.save(model, path)
    so = ort.SessionOptions()
    so.log_severity_level = 3  # it drops the unused "<case>.src" tensors, as it should
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])  # must load and run
    sess.run(None, {f"{n}.x": np.ones((1, w.shape[0]), np.float16) for n, w in cases})
    return [n for n, _ in cases]


# --- dequantization cases ---------------------------------------------------------------------


def make_dequant_cases(path, rng):
    """MatMulNBits with random packed data; expected = ORT's output for A = I (the weight)."""
    specs = [  # name, K, N, zero points, 2-D scales/zp (onnxruntime) or 1-D (Olive), bias
        ("even_k64_n5", 64, 5, True, False, False),  # 2 blocks
        ("odd_k96_n3", 96, 3, True, False, False),  # 3 blocks: zp high nibble of the last byte unused
        ("pad_k80_n4", 80, 4, True, True, False),  # 3 blocks, last one half padding
        ("one_k16_n6", 16, 6, True, True, False),  # K < block: 1 block, 16 of 32 used
        ("nozp_k64_n3", 64, 3, False, False, False),  # default zero point 8
        ("odd_k33_n2", 33, 2, True, False, False),  # odd K: element 32 alone in block 1
        ("bias_k64_n4", 64, 4, True, False, True),
    ]
    models = []
    for name, k, n, has_zp, two_d, has_bias in specs:
        kb = (k + BLOCK - 1) // BLOCK
        q = rng.integers(0, 256, (n, kb, BLOCK // 2), dtype=np.uint8)
        # scale = m * 2^e with m < 64: (q - zp) * scale is exact in fp16, so A = I reproduces it.
        m = rng.integers(1, 64, (n, kb))
        e = rng.integers(-16, -8, (n, kb))
        sign = np.where(rng.random((n, kb)) < 0.2, -1.0, 1.0)
        scales = (sign * m * np.exp2(e)).astype(np.float16)
        zp = rng.integers(0, 256, (n, (kb + 1) // 2), dtype=np.uint8)
        if kb % 2:  # Olive pads the unused high nibble with 8; keep the file canonical
            zp[:, -1] = (zp[:, -1] & 0x0F) | 0x80
        inits = [
            numpy_helper.from_array(q, f"{name}.weight_t_Q4"),
            numpy_helper.from_array(scales if two_d else scales.reshape(-1), f"{name}.weight_t_scales"),
        ]
        ins = ["A", f"{name}.weight_t_Q4", f"{name}.weight_t_scales"]
        if has_zp:
            inits.append(numpy_helper.from_array(zp if two_d else zp.reshape(-1), f"{name}.weight_t_zero_point"))
            ins.append(f"{name}.weight_t_zero_point")
        if has_bias:
            bias = (rng.integers(-64, 64, n) * 2.0**-10).astype(np.float16)
            inits.append(numpy_helper.from_array(bias, f"{name}.bias"))
            ins += ["", f"{name}.bias"] if has_zp else ["", "", f"{name}.bias"]  # g_idx unused
        node = helper.make_node(
            "MatMulNBits", ins, ["Y"], name=f"{name}/MatMulNBits", domain="com.microsoft", K=k, N=n, bits=4, block_size=BLOCK
        )
        g = helper.make_graph(
            [node],
            name,
            [helper.make_tensor_value_info("A", TensorProto.FLOAT16, [1, k, k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, [1, k, n])],
            inits,
        )
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)], ir_version=IR_VERSION
        )
        sess = ort.InferenceSession(mdl.SerializeToString(), providers=["CPUExecutionProvider"])
        y = sess.run(None, {"A": np.eye(k, dtype=np.float16)[None]})[0][0]  # [K, N]
        # Sanity check of our reading of the contract (not what the C test compares against).
        qq = np.stack([q & 15, q >> 4], axis=-1).reshape(n, kb * BLOCK).astype(np.float32)
        z = np.stack([zp & 15, zp >> 4], axis=-1).reshape(n, -1)[:, :kb] if has_zp else np.full((n, kb), 8)
        w = (qq - np.repeat(z, BLOCK, axis=1)) * np.repeat(scales.astype(np.float32), BLOCK, axis=1)
        w = w[:, :k].T
        if has_bias:
            w = w + bias.astype(np.float32)[None, :]
        assert np.array_equal(y.astype(np.float32), w.astype(np.float16).astype(np.float32)), name
        models.append((node, inits, y))
    # One file: every case's node and tensors, plus "<case>.expected" fp16 [K, N].
    nodes, inits, outs = [], [], []
    for (node, ini, y), spec in zip(models, specs):
        name = spec[0]
        node.output[0] = f"{name}.y"
        node.input[0] = f"{name}.a"
        nodes.append(node)
        inits += ini
        inits.append(numpy_helper.from_array(y, f"{name}.expected"))
        outs.append(helper.make_tensor_value_info(f"{name}.y", TensorProto.FLOAT16, None))
    ins = [helper.make_tensor_value_info(f"{s[0]}.a", TensorProto.FLOAT16, [1, s[1], s[1]]) for s in specs]
    g = helper.make_graph(nodes, "dequant_cases", ins, outs, inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)], ir_version=IR_VERSION
        )
    onnx.save(mdl, path)
    return [s[0] for s in specs]


# --- an input graph for the writer's corner cases -----------------------------------------------


def make_writer_case(path, rng):
    """A small graph with what the tiny decoder lacks: a weight read by two MatMuls (quantized
    once, shared), a MatMul feeding a MatMul directly (both outputs renamed), a MatMul writing a
    graph output (name kept), a weight also read by a Gather (the fp16 copy stays), a MatMul whose
    B is computed (left alone), a 3-D weight (left alone), value_info on renamed values."""
    f16 = TensorProto.FLOAT16
    w1 = numpy_helper.from_array(rng.normal(0, 0.1, (64, 64)).astype(np.float16), "w1.weight_t")
    w2 = numpy_helper.from_array(rng.normal(0, 0.1, (64, 64)).astype(np.float16), "w2.weight_t")
    w3 = numpy_helper.from_array(rng.normal(0, 0.1, (1, 64, 8)).astype(np.float16), "w3.weight_3d")
    idx = numpy_helper.from_array(np.array([1, 5], dtype=np.int64), "idx")
    nodes = [
        helper.make_node("MatMul", ["x", "w1.weight_t"], ["h1"], name="m1"),
        helper.make_node("MatMul", ["h1", "w2.weight_t"], ["h2"], name="m2"),
        helper.make_node("MatMul", ["h2", "w1.weight_t"], ["y"], name="m3"),
        helper.make_node("Gather", ["w2.weight_t", "idx"], ["g"], name="gather"),
        helper.make_node("Transpose", ["h1"], ["h1t"], name="t", perm=[1, 0]),
        helper.make_node("MatMul", ["h1", "h1t"], ["z"], name="m4"),
        helper.make_node("MatMul", ["x", "w3.weight_3d"], ["u"], name="m5"),
    ]
    g = helper.make_graph(
        nodes,
        "writer_case",
        [helper.make_tensor_value_info("x", f16, [1, 64])],
        [helper.make_tensor_value_info(n, f16, None) for n in ("y", "g", "z", "u")],
        [w1, w2, w3, idx],
        value_info=[helper.make_tensor_value_info("h1", f16, [1, 64]), helper.make_tensor_value_info("h2", f16, [1, 64])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    model.metadata_props.add(key="kept", value="by the rewrite")
    onnx.save(model, path)
    ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # a valid graph


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pkg", default="tests/fixtures/mobius-tiny-f16/package")
    ap.add_argument("--out", default="tests/fixtures/q4")
    a = ap.parse_args()
    logging.disable(logging.INFO)  # the quantizer logs every node it skips
    rng = np.random.default_rng(SEED)
    os.makedirs(a.out, exist_ok=True)
    n_k, n_rtn = quantize_decoder(os.path.join(a.pkg, "decoder", "model.onnx"), os.path.join(a.out, "decoder"))
    with open(os.path.join(a.out, "ids.txt"), "w") as f:
        f.write(",".join(map(str, IDS)) + "\n")
    l16 = run_logits(a.pkg, os.path.join(a.pkg, "decoder", "model.onnx"), IDS)
    l4 = run_logits(a.pkg, os.path.join(a.out, "decoder", "model.onnx"), IDS)
    np.save(os.path.join(a.out, "logits_f16.npy"), l16)
    np.save(os.path.join(a.out, "logits_q4.npy"), l4)
    kc = make_kquant_cases(os.path.join(a.out, "kquant_cases.onnx"), rng)
    dc = make_dequant_cases(os.path.join(a.out, "dequant_cases.onnx"), rng)
    make_writer_case(os.path.join(a.out, "writer_case.onnx"), rng)
    d = l4 - l16
    print(f"decoder: {n_k} linears by k_quant, {n_rtn} by the default RTN (odd block count)")
    print(f"logits [{l16.shape[0]}, {l16.shape[1]}]: f16 rms {np.sqrt(np.mean(l16**2)):.4g}, "
          f"q4-f16 rms {np.sqrt(np.mean(d**2)):.4g} max {np.abs(d).max():.4g}, "
          f"top-1 agreement {np.mean(l16.argmax(1) == l4.argmax(1)):.3f}")
    print(f"kquant cases: {kc}\ndequant cases: {dc}")
    print(f"versions: onnxruntime {ort.__version__}, onnx {onnx.__version__}, onnx_ir {ir.__version__}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
