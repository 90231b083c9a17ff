#!/usr/bin/env python3
"""Instructions a Q4 GEMV kernel issues per step of its main loop, by kind, from its SASS.

    python3 tools/python/gemv_sass_steps.py SASS.txt KERNEL [--words N]

SASS.txt: `cuobjdump -sass OBJ | c++filt` (tools/gemv_sass.sh makes it); KERNEL: a substring
of the demangled name that picks one function, e.g. 'gemv_q4_v3_kernel<1, 2, 4, false>'.
--words: lane-words of codes a step consumes (default 8: E = 2 items of 4 words; the third
design's plain <1, 2, ...> and fused <2, 1, ...> both have E = 2).

The main loop is the backward branch whose body holds the most HMMA (none anywhere: the most
weight loads, gemv_q4_v3_kernel's probe forms without the MMA); its steps are the code
between two loop-exit checks (conditional forward branches to the loop's last 8 instructions),
walked on the steady-state path: the refill loads taken, the end-of-group flush (a forward
branch over a CALL) skipped. Predicated-off instructions count: they issue. The first and last
step are left out (loop entry / exit code), the middle ones averaged.

A loop with HMMA nested inside the main loop (an experiment's blocks of U steps without
per-step tests, as gemv_q4_v3_kernel's LOOP 2 had; measured slower on the H200 and removed) is
reported too, as "block loop": one iteration walked with every forward branch that skips HMMA
not taken (the steps) and every one that skips none taken (the group events at the block's end:
the load cursor's wrap, the flush), divided into its steps (HMMA / --words). First a line of
the whole function's HMMA, weight loads, x loads and prefetches (a probe form keeps or drops
these: tools/gemv_sass.sh). Needs no GPU.
"""
import argparse
import collections
import re
import sys


def kind(s):
    pred = s.startswith('@')
    op = s.split()[1] if pred else s.split()[0]
    if op.startswith('HMMA'):
        return 'HMMA'
    if op.startswith('LDG'):
        return 'LDG weights (q, s, z)' if '.NA' in op else 'LDG x'
    if op.startswith('LDS'):
        return 'LDS x'
    if op.startswith('LOP3'):
        if ', 0xea,' in s and ('0xf000f,' in s or '0xf000f0,' in s):
            return 'LOP3 nibble -> fp16 (dequant)'
        if re.search(r'0x(f|f0|6400|d400|f0f|f0f0|44800000),', s):
            return 'zp extraction'
        return 'LOP3 other'
    if op.startswith('SHF') and ', 0x8,' in s:
        return 'SHF w >> 8 (dequant)'
    if op.startswith('IMAD') and '0x10001' in s:
        return 'zp extraction'
    if op.startswith('PRMT'):
        return 'zp extraction'
    if op.startswith('HADD2.F32'):
        return 'scale fp16 -> fp32 (HADD2.F32)'
    if op.startswith(('HADD2', 'HFMA2', 'HSUB2')):
        return 'HADD2 / HFMA2 (q - zp)'
    if op.startswith('HMUL2'):
        return 'HMUL2 (scale)'
    if op.startswith(('FFMA', 'FMUL', 'FADD')):
        return 'FFMA / FMUL (fp32)'
    if op.startswith(('LEA', 'IADD3', 'IMAD.X', 'IMAD.IADD', 'IMAD.WIDE')) and not pred:
        return 'address'
    if op.startswith(('MOV', 'CS2R', 'IMAD.MOV', 'IMAD.U32', 'UMOV')):
        return 'MOV'
    if op.startswith(('BSSY', 'BSYNC', 'WARPSYNC')):
        return 'convergence (BSSY, BSYNC, WARPSYNC)'
    return 'loop / cursor (ISETP, BRA, counters, group change)'


def target(s):
    """The target of a branch (BRA 0x.., BRA P1, 0x.., BRA.U !UP0, 0x..), else None."""
    m = re.search(r'\bBRA(?:\.[A-Z.]+)?\s+(?:!?U?P[T0-9]+,\s*)?(0x[0-9a-f]+)', s)
    return int(m.group(1), 16) if m else None


def report(title, paths, words, steps=1):
    """Counts by kind a step: paths of `steps` steps each, averaged."""
    tot = collections.Counter(kind(s) for p in paths for s in p)
    n = len(paths) * steps
    print(title)
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f'  {k:52s} {v / n:6.2f} a step {v / n / words:6.2f} a lane-word')
    t = sum(tot.values())
    if n:
        print(f'  {"total":52s} {t / n:6.2f} a step {t / n / words:6.2f} a lane-word')
    else:
        print('  no step found (a probe form\'s loop without loads or MMA)')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('sass')
    ap.add_argument('kernel')
    ap.add_argument('--words', type=int, default=8)
    a = ap.parse_args()
    funcs = open(a.sass).read().split('Function : ')
    body = [f for f in funcs if a.kernel in f.split('\n')[0]]
    if len(body) != 1:
        sys.exit(f'gemv_sass_steps: {len(body)} functions match {a.kernel!r}, expected 1')
    ins = []
    for line in body[0].split('\n'):
        m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', line)
        if m and m.group(2).strip() != 'NOP':
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    whole = collections.Counter(kind(s) for _, s in ins)
    pf = sum(s.split()[1 if s.startswith('@') else 0].startswith('CCTL') for _, s in ins)
    print(f'{a.kernel}: whole function: {whole["HMMA"]} HMMA, {whole["LDG weights (q, s, z)"]} '
          f'LDG weights, {whole["LDG x"]} LDG x, {whole["LDS x"]} LDS x, {pf} prefetch (CCTL)')
    at = {addr: i for i, (addr, _) in enumerate(ins)}
    best = None
    loops = []
    for i, (addr, s) in enumerate(ins):
        t = target(s)
        if t is not None and t < addr and t in at:
            j = at[t]
            h = sum('HMMA' in x for _, x in ins[j:i + 1])
            w = sum(kind(x) == 'LDG weights (q, s, z)' for _, x in ins[j:i + 1])
            loops.append((h, j, i))
            if not best or (h, 0 if h else w) > best[0]: # (the first of equals)
                best = ((h, 0 if h else w), j, i)
    if not best:
        sys.exit('gemv_sass_steps: no loop')
    _, lo, hi = best
    loop = ins[lo:hi + 1]
    tail = loop[-8][0]

    exits = [i for i, (_, s) in enumerate(loop)
             if s.startswith('@') and target(s) is not None and target(s) >= tail]
    steps = []
    for e0, e1 in zip(exits, exits[1:] + [len(loop)]):
        path, i = [], e0 - 1 # from the compare before the exit branch
        while i < min(e1 - 1, len(loop)):
            addr, s = loop[i]
            path.append(s)
            t = target(s)
            if t is not None and i != e0 and t > addr and t in at and at[t] - lo < len(loop):
                skipped = loop[i + 1:at[t] - lo]
                if not s.startswith('@') or any('CALL' in x for _, x in skipped):
                    i = at[t] - lo
                    continue
            i += 1
        steps.append(path)
    mid = steps[1:-1] if len(steps) > 2 else steps
    report(f'{a.kernel}: loop {loop[0][0]:#x}-{loop[-1][0]:#x}, {len(loop)} instructions, '
           f'{len(steps)} steps; steady step = mean of {len(mid)}', mid, a.words)

    inner = [(h, j, i) for h, j, i in loops if h and lo <= j and i <= hi and (j, i) != (lo, hi)]
    if not inner:
        return
    h, j, i = min(inner, key=lambda x: x[2] - x[1])
    path, k = [], j
    while k <= i:
        addr, s = ins[k]
        path.append(s)
        t = target(s)
        if t is not None and k != i and t > addr and t in at and at[t] <= i + 1:
            if not any('HMMA' in x for _, x in ins[k + 1:at[t]]):
                k = at[t]
                continue
        k += 1
    u = h // a.words
    report(f'{a.kernel}: block loop {ins[j][0]:#x}-{ins[i][0]:#x}, {i - j + 1} instructions, '
           f'{u} steps; a block\'s steady path = {len(path)} instructions, per step / {u}',
           [path], a.words, u)


if __name__ == '__main__':
    main()
