#!/usr/bin/env bash
# test_compare_spans.sh: tools/python/cmp_spans.py, the per-span summary lines that
# tools/gpu/run.sh's mm_run prints for each compare of the image + audio prompt (issue 35), on
# `g4cu compare --json` of the committed multimodal dump refdumps/mm/tiny2.npz: one line per
# kind (text, image, audio) naming the decoder layer whose rel err on that kind's rows is the
# largest, which the test finds itself in the report; a report where one layer's image rows are
# non-finite (null) names that layer, "non-finite"; a text-only report says it has no spans.
# (The spans' rows and values: tests/test_compare_checks.c, tests/test_report.c.)
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
script="$here/../tools/python/cmp_spans.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

"$G4CU" compare "$G4_FIXTURES/tiny2/package" "$G4_FIXTURES/refdumps/mm/tiny2.npz" \
    --json "$tmp/mm.json" >"$tmp/mm.txt" 2>&1 || bad "compare on mm/tiny2.npz: exit $?"
python3 "$script" "$tmp/mm.json" q4x >"$tmp/lines" 2>&1 || bad "cmp_spans.py: exit $?"
cat "$tmp/lines"
[ "$(wc -l <"$tmp/lines")" -eq 3 ] || bad "expected 3 lines"
for kind in text image audio; do
    # the largest rel err of a layer_<i> tensor on this kind's rows, and how many rows
    want=$(python3 - "$tmp/mm.json" "$kind" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
best = max((t["spans"][sys.argv[2]]["rel"], t["name"], t["spans"][sys.argv[2]]["rows"])
           for t in r["tensors"] if re.fullmatch(r"layer_\d+", t["name"]))
print(f"worst decoder layer {best[1]} rel err {best[0]:.3e}", best[2])
PY
)
    rows=${want##* } want=${want% *}
    grep -q "^q4x $kind rows ($rows of [0-9]* positions): $want (cosine" "$tmp/lines" ||
        bad "$kind: expected '$want' with $rows rows"
done
grep -q "^q4x image rows (.* of 63 positions)" "$tmp/lines" || bad "image: expected 63 positions"

# layer_2's image rows non-finite (null, as report_json.c writes NaN / Inf): the worst
python3 - "$tmp/mm.json" "$tmp/nan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["tensors"]:
    if t["name"] == "layer_2":
        t["spans"]["image"]["rel"] = None
json.dump(r, open(sys.argv[2], "w"))
PY
python3 "$script" "$tmp/nan.json" n | grep -q "^n image rows .*worst decoder layer layer_2 rel err non-finite" ||
    bad "a null rel err is not named the worst"

# a text prompt: no spans
"$G4CU" compare "$G4_FIXTURES/tiny2/package" "$G4_FIXTURES/refdumps/tiny2/len7.npz" \
    --json "$tmp/text.json" >/dev/null 2>&1 || bad "compare on tiny2/len7.npz: exit $?"
[ "$(python3 "$script" "$tmp/text.json" t)" = "t: no spans (the prompt has no image or audio soft token)" ] ||
    bad "text-only report: $(python3 "$script" "$tmp/text.json" t)"
echo "test_compare_spans: $fail failed"
[ $fail -eq 0 ]
