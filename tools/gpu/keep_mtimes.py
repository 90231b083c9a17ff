#!/usr/bin/env python3
"""keep_mtimes.py OLD NEW: tools/gpu/pipeline.sh start's timestamps for a fresh copy of the tree.

NEW is the tree just copied (tar keeps the carried modification times), OLD the copy an earlier
start made, whose build folders (build-gpu, ...) pipeline.sh moves into NEW. make decides what to
rebuild by comparing times, and the carried times cannot be trusted against the build's: an edit
made while the earlier start's build ran has an earlier time than its objects (and a clock
skewed between the two machines shifts every one). So the times are set from the bytes:

  a regular file of NEW with the same bytes as OLD's file of the same path takes OLD's time
  (what the build saw: nothing is rebuilt for it); every other regular file of NEW (changed,
  new, or OLD's was not a regular file) gets now, after every object the build has written, so
  make rebuilds what depends on it.

Top-level build* folders (the build outputs themselves) and symbolic links are left alone.
Prints one line: how many files were kept, changed and new."""
import os
import sys


def same_bytes(a, b, size):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while size > 0:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True
            size -= len(x)
    return True


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: keep_mtimes.py OLD NEW")
    old, new = sys.argv[1], sys.argv[2]
    if not os.path.isdir(new):
        sys.exit(f"keep_mtimes: {new} is not a folder")
    kept = changed = added = 0
    for root, dirs, files in os.walk(new):
        rel = os.path.relpath(root, new)
        if rel == ".":
            dirs[:] = [d for d in dirs if not d.startswith("build")]
        for f in files:
            p = os.path.join(root, f)
            st = os.lstat(p)
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            q = os.path.join(old, rel, f)
            try:
                so = os.lstat(q)
            except FileNotFoundError:
                so = None
            if so is not None and not os.path.islink(q) and os.path.isfile(q) \
                    and so.st_size == st.st_size and same_bytes(p, q, st.st_size):
                os.utime(p, ns=(so.st_atime_ns, so.st_mtime_ns))
                kept += 1
            else:
                os.utime(p)  # now
                if so is None:
                    added += 1
                else:
                    changed += 1
    print(f"keep_mtimes: {kept} files as before, {changed} changed, {added} new")


if __name__ == "__main__":
    main()
