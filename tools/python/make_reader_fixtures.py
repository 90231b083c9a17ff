#!/usr/bin/env python3
"""Writes the small files that tests/test_fidelity_readers.c reads with fidelity/npy.h, using
numpy (never our own code), plus a plain text sidecar `expected.txt` with every value the C test
checks.

    python tools/python/make_reader_fixtures.py [--out tests/fixtures/readers]

Deterministic: numpy Generator PCG64 seed 20260801; re-running gives byte-identical files with
the same numpy version (recorded in the README beside the files).

expected.txt, one line per array, tab-separated:
    file  member  dtype  shape  sum  values
  dtype:  float32 float16 float64 int64 int32 bool uint8 bfloat16 (ONNX names)
  shape:  "()" for 0-d, else "d0,d1,..."
  sum:    exact integer sum of the elements for integer/bool arrays, "-" for floats
  values: every element in C order, floats as Python float.hex() of the exact value (so no
          decimal rounding is involved), ints in decimal; or "formula:<name>" for the large
          array whose elements follow a generator formula the C test recomputes:
            u8mod: element i = (7*i + 3) % 256
"""
import argparse
import io
import os
import struct
import zipfile
import zlib

import numpy as np

SEED = 20260801
BIG_N = 70001  # > 2^16 elements, so zip sizes and deflate blocks exceed 16-bit ranges


def u8mod(n):
    return ((7 * np.arange(n, dtype=np.int64) + 3) % 256).astype(np.uint8)


def fmt_values(a):
    flat = np.asarray(a).reshape(-1)
    if flat.dtype.kind == "f" or str(flat.dtype) == "bfloat16":
        return " ".join(float(x).hex() for x in flat.astype(np.float64))
    return " ".join(str(int(x)) for x in flat)


ONNX_NAME = {
    "float32": "float32", "float16": "float16", "float64": "float64", "int64": "int64",
    "int32": "int32", "bool": "bool", "uint8": "uint8",
}


def line(file, member, a, dtype=None, values=None):
    a = np.asarray(a)
    dtype = dtype or ONNX_NAME[str(a.dtype)]
    shape = "()" if a.ndim == 0 else ",".join(str(d) for d in a.shape)
    s = "-" if a.dtype.kind == "f" or dtype == "bfloat16" else str(int(a.astype(np.int64).sum()))
    return "\t".join([file, member, dtype, shape, s, values or fmt_values(a)])


def zip64_npz(path, arrays):
    """A stored .npz whose central directory uses zip64 extra fields for the sizes and the
    offset, and a zip64 end record + locator (what zipfile writes for members > 4 GiB, forced
    here on small members). Built by hand with struct; np.load must read it back."""
    out = io.BytesIO()
    central = []
    for name, a in arrays.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
        data = buf.getvalue()
        fname = (name + ".npy").encode()
        crc = zlib.crc32(data) & 0xFFFFFFFF
        off = out.tell()
        # local header: zip64 extra with both sizes, 32-bit fields 0xffffffff
        lextra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc,
                              0xFFFFFFFF, 0xFFFFFFFF, len(fname), len(lextra)))
        out.write(fname + lextra + data)
        cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21,
                                   crc, 0xFFFFFFFF, 0xFFFFFFFF, len(fname), len(cextra), 0, 0,
                                   0, 0, 0xFFFFFFFF) + fname + cextra)
    cd_off = out.tell()
    for c in central:
        out.write(c)
    cd_size = out.tell() - cd_off
    z64_off = out.tell()
    n = len(central)
    out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, cd_size, cd_off))
    out.write(struct.pack("<IIQI", 0x07064B50, 0, z64_off, 1))
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                          0xFFFFFFFF, 0))
    with open(path, "wb") as f:
        f.write(out.getvalue())
    with zipfile.ZipFile(path) as zf:  # the standard library must agree it is zip64
        assert all(i.file_size == i.compress_size for i in zf.infolist())
    back = np.load(path)
    for name, a in arrays.items():
        assert np.array_equal(back[name], a), name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "tests", "fixtures", "readers"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    lines = []

    # --- single .npy files (np.save: format 1.0) ---------------------------------------------
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    np.save(os.path.join(out, "f32_2d.npy"), f32)
    lines.append(line("f32_2d.npy", "-", f32))

    f16 = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, np.inf, np.nan], dtype=np.float16)
    np.save(os.path.join(out, "f16_special.npy"), f16)
    lines.append(line("f16_special.npy", "-", f16))

    i64 = np.array([0, -1, 2**40 + 3, -(2**62), 2**63 - 1], dtype=np.int64)
    np.save(os.path.join(out, "i64.npy"), i64)
    lines.append(line("i64.npy", "-", i64))

    scalar = np.array(3.25, dtype=np.float64)  # 0-d
    np.save(os.path.join(out, "scalar_f64.npy"), scalar)
    lines.append(line("scalar_f64.npy", "-", scalar))

    # format versions 2.0 and 3.0 (uint32 header length), written by numpy's own writer
    i32 = rng.integers(-1000, 1000, size=(2, 2, 3), dtype=np.int32)
    with open(os.path.join(out, "v2_i32.npy"), "wb") as f:
        np.lib.format.write_array(f, i32, version=(2, 0))
    lines.append(line("v2_i32.npy", "-", i32))
    u1 = rng.integers(0, 256, size=(4,), dtype=np.uint8)
    with open(os.path.join(out, "v3_u8.npy"), "wb") as f:
        np.lib.format.write_array(f, u1, version=(3, 0))
    lines.append(line("v3_u8.npy", "-", u1))

    # Fortran order: the reader must refuse it with a clear error
    np.save(os.path.join(out, "fortran.npy"), np.asfortranarray(f32))

    # What our .npy writer must reproduce byte for byte (formula arrays the C test rebuilds):
    #   w_f32 [2, 3]: i * 0.5 - 1      w_i32 [4]: i*i - 3      w_i64 [0-d]: -123456789012
    np.save(os.path.join(out, "w_f32.npy"), (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))
    np.save(os.path.join(out, "w_i32.npy"), (np.arange(4, dtype=np.int32) ** 2 - 3))
    np.save(os.path.join(out, "w_i64.npy"), np.array(-123456789012, dtype=np.int64))

    # --- .npz: np.savez (stored) and np.savez_compressed (deflated), same members ----------
    members = {
        "x": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "ids": rng.integers(0, 1024, size=(7,), dtype=np.int64),
        "big": u8mod(BIG_N),
        "scalar": np.array(-0.125, dtype=np.float64),
        "mask": np.array([True, False, True, True, False]),
        "h": rng.standard_normal((3, 2)).astype(np.float16),
        "layer.0": np.arange(3, dtype=np.int32),  # a dot inside a member name
    }
    positional = np.linspace(-1, 1, 5).astype(np.float32)  # becomes member arr_0
    for fname, saver in (("stored.npz", np.savez), ("deflated.npz", np.savez_compressed)):
        saver(os.path.join(out, fname), positional, **members)
        lines.append(line(fname, "arr_0", positional))
        for k, v in members.items():
            if k == "big":
                lines.append(line(fname, k, v, values="formula:u8mod"))
            else:
                lines.append(line(fname, k, v))
        with zipfile.ZipFile(os.path.join(out, fname)) as zf:
            methods = {i.compress_type for i in zf.infolist()}
        assert methods == ({zipfile.ZIP_STORED} if saver is np.savez else {zipfile.ZIP_DEFLATED})

    z64 = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.array([1.5, -2.0], np.float32)}
    zip64_npz(os.path.join(out, "zip64.npz"), z64)
    for k, v in z64.items():
        lines.append(line("zip64.npz", k, v))

    with open(os.path.join(out, "expected.txt"), "w") as f:
        f.write("# written by tools/python/make_reader_fixtures.py; see its docstring\n")
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} arrays to {out}; numpy {np.__version__}")


if __name__ == "__main__":
    main()
