#!/usr/bin/env python3
"""Checks a Q4 package written by `g4cu quantize` with onnx and onnxruntime (an independent peer).

  /work/venv-hf/bin/python tools/python/check_q4_package.py F16_PKG Q4_PKG [--ours LOGITS.npy]

1. The graph: every MatMul with a 2-D initializer weight became a com.microsoft MatMulNBits named
   "<old>_Q4" with inputs [A, W_Q4, W_scales, W_zero_point] and attributes K, N, bits=4,
   block_size=32 only; its output renamed "<old>_Q4" in every reader and value_info entry; every
   other node, the graph inputs/outputs, the local functions, opsets and model metadata unchanged.
2. onnxruntime (CPU) loads and runs the Q4 decoder (embedding from F16_PKG, empty past KV).
3. Same graph, same numbers: onnxruntime's own quantizer run on F16_PKG's decoder (the path of
   make_q4_fixture.py), its weights then replaced by ours, gives exactly the logits of our
   package: so our rewrite is equivalent to onnxruntime's.
4. With --ours (g4cu logits on Q4_PKG, the fixture's ids): ours against onnxruntime's on it.
Exits 1 when a check fails.
"""

import argparse
import logging
import os
import sys
import tempfile

import numpy as np
import onnx
import onnx_ir as ir

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_q4_fixture import IDS, matmul_weights, quantize_decoder, run_logits  # noqa: E402


def check_graph(f16_path, q4_path):
    a = onnx.load(f16_path, load_external_data=False)
    b = onnx.load(q4_path, load_external_data=False)
    problems = []
    lin = matmul_weights(a)
    outs = {o.name for o in a.graph.output}
    ren = {n.output[0]: n.output[0] + "_Q4" for n in a.graph.node if n.name in lin and n.output[0] not in outs}
    if len(a.graph.node) != len(b.graph.node):
        problems.append(f"node count {len(b.graph.node)} != {len(a.graph.node)}")
    for na, nb in zip(a.graph.node, b.graph.node):
        if na.name in lin:
            w, k, n = lin[na.name]
            want = onnx.helper.make_node(
                "MatMulNBits",
                [ren.get(na.input[0], na.input[0]), w + "_Q4", w + "_scales", w + "_zero_point"],
                [ren.get(na.output[0], na.output[0])],
                name=na.name + "_Q4",
                domain="com.microsoft",
                K=k,
                N=n,
                bits=4,
                block_size=32,
            )
            if nb != want:
                problems.append(f"node {na.name}: got\n{nb}\nexpected\n{want}")
        else:
            want = onnx.NodeProto()
            want.CopyFrom(na)
            for i, x in enumerate(want.input):
                want.input[i] = ren.get(x, x)
            if nb != want:
                problems.append(f"node {na.name} changed")
    if list(a.graph.input) != list(b.graph.input) or list(a.graph.output) != list(b.graph.output):
        problems.append("graph inputs or outputs changed")
    va = [onnx.ValueInfoProto() for _ in a.graph.value_info]
    for v, src in zip(va, a.graph.value_info):
        v.CopyFrom(src)
        v.name = ren.get(v.name, v.name)
    if va != list(b.graph.value_info):
        problems.append("value_info differs beyond the renames")
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if getattr(a, field) != getattr(b, field):
            problems.append(f"model {field} changed")
    if list(a.functions) != list(b.functions) or list(a.metadata_props) != list(b.metadata_props):
        problems.append("local functions or metadata_props changed")
    if {(o.domain, o.version) for o in b.opset_import} != {(o.domain, o.version) for o in a.opset_import} | {("com.microsoft", 1)}:
        problems.append("opset imports")
    w_left = [t.name for t in b.graph.initializer if t.name in {w for w, _, _ in lin.values()}]
    if w_left:
        problems.append(f"fp16 weights left: {w_left[:3]}")
    return len(lin), problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("f16")
    ap.add_argument("q4")
    ap.add_argument("--ours", help="g4cu logits of Q4_PKG for the fixture ids (.npy)")
    a = ap.parse_args()
    logging.disable(logging.INFO)  # the quantizer logs every node
    fail = False
    n, problems = check_graph(os.path.join(a.f16, "decoder", "model.onnx"), os.path.join(a.q4, "decoder", "model.onnx"))
    print(f"graph: {n} MatMul -> MatMulNBits; {len(problems)} problems")
    for p in problems[:10]:
        print("  " + p)
    fail |= bool(problems)

    ours_ort = run_logits(a.f16, os.path.join(a.q4, "decoder", "model.onnx"), IDS)
    f16 = run_logits(a.f16, os.path.join(a.f16, "decoder", "model.onnx"), IDS)
    print(f"onnxruntime runs the Q4 decoder: logits {ours_ort.shape}, Q4 - f16 RMS {np.sqrt(np.mean((ours_ort - f16) ** 2)):.4g}")

    with tempfile.TemporaryDirectory() as tmp:
        quantize_decoder(os.path.join(a.f16, "decoder", "model.onnx"), tmp)  # onnxruntime's graph
        ref = onnx.load(os.path.join(tmp, "model.onnx"))
        ours = {t.name: t for t in onnx.load(os.path.join(a.q4, "decoder", "model.onnx")).graph.initializer}
        n_sub = 0
        for t in ref.graph.initializer:
            if t.name in ours and t.name.endswith(("_Q4", "_scales", "_zero_point")):
                arr = onnx.numpy_helper.to_array(ours[t.name], base_dir=os.path.join(a.q4, "decoder"))
                t.CopyFrom(onnx.numpy_helper.from_array(arr.reshape(tuple(t.dims)), t.name))
                n_sub += 1
        hyb = os.path.join(tmp, "hybrid")
        os.makedirs(hyb)
        ir.save(ir.from_proto(ref), os.path.join(hyb, "model.onnx"), external_data="model.onnx.data")
        h = run_logits(a.f16, os.path.join(hyb, "model.onnx"), IDS)
        d = np.abs(h - ours_ort).max()
        print(f"onnxruntime's graph with our {n_sub // 3} weights vs our package: max |diff| {d:.3g} (must be 0)")
        fail |= d != 0 or n_sub == 0
    if a.ours:
        o = np.load(a.ours).reshape(ours_ort.shape)
        d = o - ours_ort
        print(f"g4cu logits vs onnxruntime on our package: RMS {np.sqrt(np.mean(d**2)):.3g}, max {np.abs(d).max():.3g}, "
              f"top-1 agreement {np.mean(o.argmax(1) == ours_ort.argmax(1)):.2f}")
    print("FAIL" if fail else "OK")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
