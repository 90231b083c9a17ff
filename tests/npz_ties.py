"""npz_ties.py IN OUT ROW GAP [MEMBERS]: a copy of a multimodal dump whose logits_argmax names at
ROW an id other than its own (the engine's id stays the dump's second best), with the near-tie
members of mm_reference.py (logits_top_ids / logits_top_vals / logits_row_rms, k = 2, RMS 1):
every other row has its id first by a gap of 1, ROW's stand-in id is first by GAP. MEMBERS (a
count, default 3) keeps only the first that many of the three. Python's standard library only
(npz = a zip of .npy files), so the test needs no numpy."""
import ast
import struct
import sys
import zipfile


def read_npy(b):
    assert b[:6] == b"\x93NUMPY", "not an .npy"
    hl = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
    start = 10 if b[6] == 1 else 12
    h = ast.literal_eval(b[start:start + hl].decode("latin1"))
    return h, b[start + hl:]


def npy(descr, shape, data):
    h = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h += b" " * (pad % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def main():
    src, dst, row, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    keep = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    h, raw = read_npy(members["logits_argmax.npy"])
    assert h["descr"] == "<i8" and len(h["shape"]) == 1, h
    ids = list(struct.unpack(f"<{h['shape'][0]}q", raw))
    ours = ids[row]
    ids[row] = ours - 1 if ours > 0 else ours + 1  # any id but ours
    top, vals = [], []
    for r, i in enumerate(ids):
        top += [i, ours if r == row else i + 1]
        vals += [1.0, 1.0 - (gap if r == row else 1.0)]
    S = len(ids)
    members["logits_argmax.npy"] = npy("<i8", [S], struct.pack(f"<{S}q", *ids))
    extra = [("logits_top_ids.npy", npy("<i8", [S, 2], struct.pack(f"<{2 * S}q", *top))),
             ("logits_top_vals.npy", npy("<f4", [S, 2], struct.pack(f"<{2 * S}f", *vals))),
             ("logits_row_rms.npy", npy("<f4", [S], struct.pack(f"<{S}f", *[1.0] * S)))]
    for name, data in extra[:keep]:
        members[name] = data
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)


main()
