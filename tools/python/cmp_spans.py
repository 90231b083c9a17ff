#!/usr/bin/env python3
"""The per-span summary of a `g4cu compare --json` report (issue 35: where 4 bits hurt on a prompt
with an image and an audio clip).

    python3 tools/python/cmp_spans.py REPORT.json [LABEL]

With media, compare splits every per-token tensor of the decoder by the kind of its rows' prompt
positions (fidelity/report_json.c "spans": text, image = the image soft-token rows, audio = the
audio soft-token rows; the markers around them count as text). This prints one line per kind:
the worst decoder layer's rel err on that kind's rows (the "layer_<i>" tensors: component
"text", kind "layer"), its cosine and how many rows were compared (an HF dump holds a subset of
the rows: mm_reference.py), then final_norm's and logits' rel err on the same kind. A
non-finite value (null in the JSON) counts as the worst. Without spans, one line saying so.
Standard library only; summary() is also read by mm_report.py.
"""
import json
import math
import sys

KINDS = ("text", "image", "audio")


def rel(t, kind):
    """(rel err, cosine, rows) of tensor t on kind's rows; rel inf where the JSON has null."""
    s = t.get("spans", {}).get(kind, {})
    rows = s.get("rows", 0)
    if not rows:
        return None
    r = s.get("rel")
    return (math.inf if r is None else r), s.get("cosine"), rows


def summary(report):
    """{kind: {"positions", "layer", "rel", "cosine", "rows", "final_norm", "logits"}} from a
    parsed report, or {} when it has no spans."""
    spans = report.get("spans")
    if not spans:
        return {}
    tensors = report.get("tensors", [])
    out = {}
    for kind in KINDS:
        best = None
        for t in tensors:
            if t.get("component") != "text" or t.get("kind") != "layer":
                continue
            v = rel(t, kind)
            if v and (best is None or v[0] > best[1][0]):
                best = (t["name"], v)
        e = {"positions": spans.get(kind, {}).get("positions", 0)}
        if best:
            e.update(layer=best[0], rel=best[1][0], cosine=best[1][1], rows=best[1][2])
        for name in ("final_norm", "logits"):
            t = next((x for x in tensors if x.get("name") == name), None)
            v = rel(t, kind) if t else None
            e[name] = v[0] if v else None
        out[kind] = e
    return out


def fmt(x):
    return "-" if x is None else "non-finite" if math.isinf(x) else f"{x:.3e}"


def lines(report, label):
    s = summary(report)
    if not s:
        return [f"{label}: no spans (the prompt has no image or audio soft token)"]
    res = []
    for kind in KINDS:
        e = s[kind]
        if "layer" not in e:  # (a dump without the decoder's layers: tiny2-clipped)
            res.append(f"{label} {kind} rows (of {e['positions']} positions): no decoder layer "
                       f"in the report; final_norm {fmt(e['final_norm'])}, logits "
                       f"{fmt(e['logits'])}")
            continue
        cos = "-" if e["cosine"] is None else f"{e['cosine']:.8f}"
        res.append(f"{label} {kind} rows ({e['rows']} of {e['positions']} positions): worst "
                   f"decoder layer {e['layer']} rel err {fmt(e['rel'])} (cosine {cos}); "
                   f"final_norm {fmt(e['final_norm'])}, logits {fmt(e['logits'])}")
    return res


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) == 3 else path
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    print("\n".join(lines(report, label)))


if __name__ == "__main__":
    main()
