#!/usr/bin/env python3
"""Runs the public mobius exporter (pip package `mobius-onnx` 0.1.0) on an HF Gemma-4 checkpoint
dir, the way tests/fixtures/mobius-tiny-f16/package was made:

    python tools/python/export_package.py HF_DIR OUT_DIR
      == mobius build --config HF_DIR --dtype f16 --ep cuda --runtime ort-genai OUT_DIR
         (plus the one config fix below)

Why the wrapper: transformers 5.17's Gemma4TextConfig folds `global_head_dim` into
`per_layer_config` (full-attention layers get {"head_dim": global_head_dim}) and no longer
exposes the attribute, while mobius 0.1.0 reads `config.global_head_dim` (falling back to
`head_dim`, which would give full layers the sliding head width). We restore the attribute from
`per_layer_config` on the loaded config and allow the global `head_dim` read the exporter does;
Afterwards genai_config.json's model.type becomes "gemma4": mobius writes "gemma4_text", which
onnxruntime-genai 0.18 refuses for a package with an embedding component ("Decoder-only CPU
embedding requires the dynamic-batching Engine"), while with "gemma4" (its multimodal type) it
runs the same files; g4cu reads both. `--keep-model-type` leaves mobius's value.
Extra arguments after OUT_DIR are passed to `mobius build`.
"""
import json
import os
import sys

import transformers
from mobius.__main__ import main as mobius_main


def _restore_global_head_dim(cfg):
    tc = getattr(cfg, "text_config", None)
    if tc is None or getattr(tc, "model_type", "") != "gemma4_text":
        return cfg
    full = [i for i, t in enumerate(tc.layer_types) if t == "full_attention"]
    dims = {tc.per_layer_config[i].head_dim for i in full}
    if len(dims) != 1:
        raise SystemExit(f"full-attention layers disagree on head_dim: {sorted(dims)}")
    object.__setattr__(tc, "global_head_dim", dims.pop())
    # The exporter reads the (sliding) head_dim globally; transformers guards that read.
    tc.allow_global_per_layer_attribute_access = True
    return cfg


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    hf_dir, out_dir, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    keep_type = "--keep-model-type" in extra
    extra = [a for a in extra if a != "--keep-model-type"]
    orig = transformers.AutoConfig.from_pretrained

    def patched(*a, **k):
        return _restore_global_head_dim(orig(*a, **k))

    transformers.AutoConfig.from_pretrained = patched
    mobius_main(["build", "--config", hf_dir, "--dtype", "f16", "--ep", "cuda",
                 "--runtime", "ort-genai", *extra, out_dir])
    cfg_path = os.path.join(out_dir, "genai_config.json")
    if not keep_type and os.path.exists(cfg_path):
        with open(cfg_path) as f:
            cfg = json.load(f)
        if cfg.get("model", {}).get("type") == "gemma4_text" and "embedding" in cfg["model"]:
            cfg["model"]["type"] = "gemma4"
            with open(cfg_path + ".tmp", "w") as f:
                json.dump(cfg, f, indent=4)
            os.replace(cfg_path + ".tmp", cfg_path)
            print("  genai_config: model.type gemma4_text -> gemma4 (what onnxruntime-genai "
                  "0.18 loads with an embedding component)")


if __name__ == "__main__":
    main()
