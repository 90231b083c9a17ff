#!/usr/bin/env python3
"""The trained proxy's text corpus (tools/python/prepare_corpus.py's train.txt, test.txt and
corpus.json) packed with xz for the GPU machine's carry: 2.2 MiB instead of 10.6. With .debs, .whl
and the tracked tree the fidelity calls sent 61.5 of the 62 MiB tools/gpu/carry_size.sh allows,
so one more session of logs in the tree would have had them refused.

    python3 tools/python/corpus_xz.py pack   [.carry/corpus [.carry/corpus-xz]]
    python3 tools/python/corpus_xz.py unpack [.carry/corpus-xz [.carry/corpus]]

unpack (tools/gpu/run.sh corpus_unpack, on the GPU machine) checks each text's sha256 against
corpus.json's train_sha256 / test_sha256 and writes the folder whole or not at all; pack checks the
same before it writes, so a corpus.json that does not name its files is refused at this end.
"""
import hashlib
import json
import lzma
import os
import shutil
import sys

NAMES = ("train", "test")


def fail(msg):
    sys.exit(f"corpus_xz: {msg}")


def checked(meta, name, data, where):
    want = meta.get(name + "_sha256")
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        fail(f"{where}: sha256 {got}, corpus.json says {want}")
    return data


def write_whole(dst, files):
    """files: {name: bytes}; dst appears complete or is left as it was."""
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name, data in files.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")


def main(argv):
    if len(argv) < 1 or argv[0] not in ("pack", "unpack") or len(argv) > 3:
        fail("usage: corpus_xz.py pack|unpack [SRC [DST]]")
    mode = argv[0]
    src = argv[1] if len(argv) > 1 else (".carry/corpus" if mode == "pack" else ".carry/corpus-xz")
    dst = argv[2] if len(argv) > 2 else (".carry/corpus-xz" if mode == "pack" else ".carry/corpus")
    meta_bytes = read(os.path.join(src, "corpus.json"))
    try:
        meta = json.loads(meta_bytes)
    except ValueError as e:
        fail(f"{src}/corpus.json: not JSON ({e})")
    files = {"corpus.json": meta_bytes}
    for name in NAMES:
        if mode == "pack":
            path = os.path.join(src, name + ".txt")
            data = checked(meta, name, read(path), path)
            files[name + ".txt.xz"] = lzma.compress(data, preset=9)
        else:
            path = os.path.join(src, name + ".txt.xz")
            try:
                data = lzma.decompress(read(path))
            except lzma.LZMAError as e:
                fail(f"{path}: not xz data ({e})")
            files[name + ".txt"] = checked(meta, name, data, path)
    write_whole(dst, files)
    size = sum(len(v) for v in files.values())
    print(f"corpus_xz: wrote {dst} ({size / 1048576:.2f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
