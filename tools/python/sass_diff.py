#!/usr/bin/env python3
"""sass_diff.py BEFORE AFTER [REGEX]: two demangled `cuobjdump -sass` dumps of one source file
(e.g. tools/gemv_sass.sh's GEMV_SASS_KEEP, before and after a refactor) compared function by
function, for changes that must leave the machine code alone (issue 29's folds: branch
prunespread, branch gvfold).

For each function whose name matches REGEX (default: all): the instruction text (addresses,
encodings and column padding stripped) and then, stricter, the 128-bit encodings (control bits:
stalls, barriers, register reuse). Prints one line a function, `identical text (N instructions),
encodings identical` or what differs (instruction counts, ~lines changed), then the totals.
Exit status 0 when every matching function is in both dumps and identical to the encodings,
1 otherwise, 2 on a usage error.
"""
import difflib
import re
import sys

FUNC = re.compile(r'Function : (.*)$')
# /*0040*/   BSSY B0, 0x520 ;   /* 0x000004d000007945 */
INSN = re.compile(r'\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]+) \*/')
CTRL = re.compile(r'\s+/\* (0x[0-9a-f]+) \*/\s*$')  # the encoding's second half


def parse(path):
    """{function name: (instruction texts, encoding words)} of one dump."""
    funcs, name, text, enc = {}, None, [], []
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            m = FUNC.search(line)
            if m:
                if name is not None:
                    funcs[name] = (text, enc)
                name, text, enc = m.group(1).strip(), [], []
                continue
            if name is None:
                continue
            m = INSN.match(line)
            if m:
                text.append(re.sub(r'\s+', ' ', m.group(1)).rstrip(' ;'))
                enc.append(m.group(2))
                continue
            m = CTRL.match(line)
            if m:
                enc.append(m.group(1))
    if name is not None:
        funcs[name] = (text, enc)
    return funcs


def short(name):
    name = name.replace('(anonymous namespace)::', '')
    return re.sub(r'^void |\(.*$', '', name)


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__.split('\n\n')[0] + '\n')
        return 2
    before, after = parse(argv[1]), parse(argv[2])
    if not before or not after:
        sys.stderr.write(f'sass_diff.py: no functions in {argv[1] if not before else argv[2]}\n')
        return 2
    rx = re.compile(argv[3] if len(argv) == 4 else '')
    names = sorted(n for n in set(before) | set(after) if rx.search(n))
    if not names:
        sys.stderr.write(f'sass_diff.py: no function matches {argv[3]!r}\n')
        return 2
    bad = 0
    for n in names:
        if n not in before or n not in after:
            print(f'{short(n)}: only {"after" if n in after else "before"}')
            bad += 1
            continue
        (ta, ea), (tb, eb) = before[n], after[n]
        if ta == tb:
            same = ea == eb
            bad += not same
            print(f'{short(n)}: identical text ({len(ta)} instructions), encodings '
                  f'{"identical" if same else "DIFFER"}')
            continue
        bad += 1
        sm = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
        changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes()
                      if op != 'equal')
        print(f'{short(n)}: DIFFER: {len(ta)} -> {len(tb)} instructions, ~{changed} lines changed')
    print(f'{len(names)} functions, {len(names) - bad} identical')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
