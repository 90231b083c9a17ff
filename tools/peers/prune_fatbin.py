#!/usr/bin/env python3
"""Zero the GPU code a shared library carries for other GPUs than one SM, in place of a copy.

    python3 tools/peers/prune_fatbin.py IN.so OUT.so [--keep-sm 90] [--list]

Why: onnxruntime-gpu's CUDA provider (284 MB) holds cubins for every SM from 75 to 120 plus
PTX; they are compressed already, so the file barely compresses and takes 5+ device calls to
carry to the GPU machine (64 MiB a call). The driver loads only the cubin of the device's SM
(sm_90 on the H200), so the other entries' payloads are overwritten with zeros (which compress
to nothing); every container and entry header stays as it was, so offsets and sizes in the
library are unchanged. Refuses (exit 1) when no sm_KEEP cubin is found.

Fat binary layout (containers of magic 0xBA55ED50 in .nv_fatbin): a 16-byte header (magic u32,
version u16, header size u16, size of the entries u64), then entries: kind u16 (1 PTX, 2 ELF),
u16, entry header size u32, padded payload size u32, u32, payload size u32, u32, minor u32,
sm arch u32, ..., the payload right after the entry header.
"""
import argparse
import collections
import struct
import sys

MAGIC = 0xBA55ED50


def containers(buf):
    i = buf.find(struct.pack("<I", MAGIC))
    while i >= 0:
        if i + 16 <= len(buf):
            _, ver, hsz, size = struct.unpack_from("<IHHQ", buf, i)
            end = i + hsz + size
            if ver == 1 and hsz == 16 and end <= len(buf):
                yield i, end
                i = buf.find(struct.pack("<I", MAGIC), end)
                continue
        i = buf.find(struct.pack("<I", MAGIC), i + 4)


def entries(buf, start, end):
    p = start + 16
    while p + 64 <= end:
        kind, _, esz, padded, _, dsz, _, _minor, sm = struct.unpack_from("<HHIIIIIII", buf, p)
        if esz < 64 or p + esz + padded > end:
            raise ValueError(f"bad fatbin entry at {p:#x} (size {esz}, payload {padded})")
        yield kind, sm, p + esz, padded
        p += esz + padded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("inp")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--keep-sm", type=int, default=90)
    ap.add_argument("--list", action="store_true", help="only print the entries by kind and SM")
    a = ap.parse_args()
    buf = bytearray(open(a.inp, "rb").read())
    tally = collections.Counter()
    zeroed = kept = 0
    for s, e in containers(buf):
        for kind, sm, data, n in entries(buf, s, e):
            tally[("ptx" if kind == 1 else "elf" if kind == 2 else f"kind{kind}", sm)] += n
            if kind == 2 and sm == a.keep_sm:
                kept += n
            elif not a.list:
                buf[data:data + n] = bytes(n)
                zeroed += n
    for (k, sm), n in sorted(tally.items()):
        print(f"  {k} sm_{sm}: {n / 1e6:.1f} MB")
    if a.list:
        return 0
    if not kept:
        print(f"{a.inp}: no sm_{a.keep_sm} cubin: refusing to prune", file=sys.stderr)
        return 1
    if not a.out:
        print("prune_fatbin: OUT missing", file=sys.stderr)
        return 1
    open(a.out, "wb").write(buf)
    print(f"{a.out}: kept {kept / 1e6:.1f} MB of sm_{a.keep_sm} cubins, zeroed {zeroed / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
