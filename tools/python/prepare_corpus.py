#!/usr/bin/env python3
"""Makes the English text corpus of the trained proxy models (tools/python/train_proxy.py) from a
Debian package: the Python 3.11 documentation's reStructuredText sources, Debian package
`python3.11-doc` (the package `python3-doc` depends on), license: PSF License Agreement
(Python Software Foundation License Version 2; /usr/share/doc/python3.11-doc/copyright).

    python3 tools/python/prepare_corpus.py [--out .carry/corpus] [--deb FILE.deb]

1. `apt-get download python3.11-doc` into OUT (unless --deb names the .deb), `dpkg -x` it;
2. every `usr/share/doc/python3.11/html/_sources/**/*.rst.txt` is one document (~500 of them,
   12 MB of running English prose with reST markup); each document's text is kept as it is
   except that runs of 3+ newlines become 2 and trailing spaces go;
3. the split is by document: sorted by path, every 20th document (offset 7) is held out;
   OUT/train.txt and OUT/test.txt hold the documents joined by a blank line, and
   OUT/corpus.json names the package, its version, the sha256 of the .deb and of both files,
   and the documents of each split.
Deterministic: the same .deb gives the same files byte for byte. Runs here (Debian, apt) and its
output is carried to the GPU machine, which has no network (tools/gpu/run.sh stage fidelity).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys

PACKAGE = "python3.11-doc"
LICENSE = "PSF License Agreement (Python Software Foundation License Version 2)"
SOURCES = "usr/share/doc/python3.11/html/_sources"
HOLD_EVERY, HOLD_OFFSET = 20, 7


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def clean(text):
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".carry/corpus")
    ap.add_argument("--deb", help="an already downloaded python3.11-doc .deb")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    deb = args.deb
    if not deb:
        subprocess.run(["apt-get", "download", PACKAGE], cwd=args.out, check=True)
        debs = sorted(glob.glob(os.path.join(args.out, PACKAGE + "_*.deb")))
        if not debs:
            sys.exit(f"prepare_corpus: apt-get download {PACKAGE} left no .deb in {args.out}")
        deb = debs[-1]
    version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    xdir = os.path.join(args.out, "x")
    subprocess.run(["dpkg", "-x", deb, xdir], check=True)
    root = os.path.join(xdir, SOURCES)
    docs = sorted(os.path.relpath(p, root)
                  for p in glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True))
    if len(docs) < 100:
        sys.exit(f"prepare_corpus: {root}: only {len(docs)} .rst.txt documents")
    split = {"train": [], "test": []}
    for i, d in enumerate(docs):
        split["test" if i % HOLD_EVERY == HOLD_OFFSET else "train"].append(d)
    meta = {"package": PACKAGE, "version": version, "license": LICENSE,
            "deb_sha256": sha256(deb), "documents": {}}
    for name, names in split.items():
        path = os.path.join(args.out, name + ".txt")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for j, d in enumerate(names):
                with open(os.path.join(root, d), encoding="utf-8", errors="replace") as g:
                    f.write(("\n" if j else "") + clean(g.read()))
        meta[name + "_sha256"] = sha256(path)
        meta[name + "_bytes"] = os.path.getsize(path)
        meta["documents"][name] = names
        print(f"prepare_corpus: {path}: {len(names)} documents, {os.path.getsize(path):,} bytes")
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(meta, f, indent=1)
    subprocess.run(["rm", "-rf", xdir], check=True)
    if not args.deb:
        os.remove(deb)  # the carried folder keeps only the text (~11 MB)


if __name__ == "__main__":
    main()
