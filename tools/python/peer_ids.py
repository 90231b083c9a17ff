"""Token ids for the peer benchmarks, drawn as `g4cu bench` draws them
(api/g4cu_dev_bench_model.c: xorshift64 13/7/17 from 0x5eed, id = 3 + state % (vocab - 3)),
minus the ids a runtime may treat specially: every *_token_id(s) / *_token_index in the package's genai_config.json and processor
JSONs and in an HF config.json (bos / eos / pad, the image / audio / video placeholders and their
begin / end markers). A drawn special id is skipped (the next draw takes its place), as g4cu
bench redraws the image / audio placeholders; a peer's prompt differs from g4cu bench's only
where g4cu's holds one of the other special ids (a begin / end marker); speed does not depend on
the values."""
import json
import os

M64 = (1 << 64) - 1


def _collect(obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith(("token_id", "token_ids", "token_index")):
                for x in (v if isinstance(v, list) else [v]):
                    if isinstance(x, int) and not isinstance(x, bool):
                        out.add(x)
            else:
                _collect(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _collect(v, out)


def special_ids(*dirs):
    """The special ids named in the JSON configs of the given package / HF dirs (None skipped)."""
    out = set()
    names = ("genai_config.json", "config.json", "generation_config.json", "image_processor.json",
             "audio_feature_extraction.json", "processor_config.json")
    for d in dirs:
        if not d:
            continue
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p):
                with open(p, encoding="utf-8") as f:
                    _collect(json.load(f), out)
    return out


def vocab_size(pkg_dir=None, hf_dir=None):
    if pkg_dir and os.path.isfile(os.path.join(pkg_dir, "genai_config.json")):
        with open(os.path.join(pkg_dir, "genai_config.json"), encoding="utf-8") as f:
            return int(json.load(f)["model"]["vocab_size"])
    with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    return int(c.get("text_config", c)["vocab_size"])


def bench_ids(n, vocab, skip=()):
    """n ids as g4cu bench draws them, skipping the ids in `skip`."""
    s, out = 0x5EED, []
    while len(out) < n:
        s ^= (s << 13) & M64
        s ^= s >> 7
        s ^= (s << 17) & M64
        i = 3 + s % (vocab - 3)
        if i not in skip:
            out.append(i)
    return out


def read_ids(path):
    """Ids from a .npy file or a text file of comma / whitespace separated integers."""
    if path.endswith(".npy"):
        import numpy as np
        return [int(x) for x in np.load(path).reshape(-1)]
    with open(path, encoding="utf-8") as f:
        return [int(x) for x in f.read().replace(",", " ").split()]
