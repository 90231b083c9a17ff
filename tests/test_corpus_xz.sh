#!/usr/bin/env bash
# test_corpus_xz.sh: tools/python/corpus_xz.py, the proxy corpus packed for the GPU machine's carry
# and unpacked there by tools/gpu/run.sh (corpus_unpack): the round trip gives the same bytes, a
# damaged or mislabelled file is refused with one line naming it, and a refused unpack leaves no
# folder (nor its .tmp) behind, so the fidelity stage cannot train on a half-written corpus.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
cx="$G4_SOURCE_DIR/tools/python/corpus_xz.py"
src="$tmp/corpus"
mkdir -p "$src"
python3 - "$src" <<'PY'
import hashlib, json, os, random, sys
d = sys.argv[1]
rng = random.Random(7)
words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
text = {n: "\n\n".join(" ".join(rng.choice(words) for _ in range(60)) for _ in range(k))
        for n, k in (("train", 200), ("test", 20))}
meta = {"package": "test"}
for n, t in text.items():
    b = t.encode()
    open(os.path.join(d, n + ".txt"), "wb").write(b)
    meta[n + "_sha256"] = hashlib.sha256(b).hexdigest()
json.dump(meta, open(os.path.join(d, "corpus.json"), "w"))
PY
python3 "$cx" pack "$src" "$tmp/xz" >/dev/null
check "pack writes two .xz and corpus.json" $([ "$(ls "$tmp/xz" | sort | tr '\n' ' ')" = "corpus.json test.txt.xz train.txt.xz " ]; echo $?)
check "the packed train text is smaller" $([ "$(stat -c %s "$tmp/xz/train.txt.xz")" -lt "$(($(stat -c %s "$src/train.txt") / 3))" ]; echo $?)
python3 "$cx" unpack "$tmp/xz" "$tmp/back" >/dev/null
for f in train.txt test.txt corpus.json; do
    check "round trip: $f byte for byte" $(cmp -s "$src/$f" "$tmp/back/$f"; echo $?)
done
check "round trip: three files, no more" $([ "$(ls "$tmp/back" | wc -l)" -eq 3 ]; echo $?)

# test.txt.xz replaced by valid xz of other bytes: the sha256 check, not the decoder, refuses it
cp -r "$tmp/xz" "$tmp/bad"
printf 'other text' | python3 -c "import lzma, sys; sys.stdout.buffer.write(lzma.compress(sys.stdin.buffer.read()))" >"$tmp/bad/test.txt.xz"
err1 "unpack: wrong test text named" "bad/test.txt.xz: sha256 [0-9a-f]*, corpus.json says" python3 "$cx" unpack "$tmp/bad" "$tmp/out"
check "unpack refused: no folder" $([ ! -e "$tmp/out" ] && [ ! -e "$tmp/out.tmp" ]; echo $?)
# truncated xz
head -c 1000 "$tmp/xz/train.txt.xz" >"$tmp/bad/train.txt.xz"
err1 "unpack: truncated train xz" "bad/train.txt.xz: not xz data" python3 "$cx" unpack "$tmp/bad" "$tmp/out"
check "truncated: no folder" $([ ! -e "$tmp/out" ] && [ ! -e "$tmp/out.tmp" ]; echo $?)
# an existing good folder is left as it was when the new unpack is refused
err1 "unpack over a good folder refused" "sha256\|not xz data" python3 "$cx" unpack "$tmp/bad" "$tmp/back"
check "the good folder kept" $(cmp -s "$src/train.txt" "$tmp/back/train.txt"; echo $?)
# pack refuses a corpus.json that does not name its texts
cp -r "$src" "$tmp/src2" && printf 'x' >>"$tmp/src2/train.txt"
err1 "pack: changed train text" "src2/train.txt: sha256" python3 "$cx" pack "$tmp/src2" "$tmp/xz2"
check "pack refused: no folder" $([ ! -e "$tmp/xz2" ]; echo $?)
cp "$src/train.txt" "$tmp/src2/" && rm "$tmp/src2/test.txt"
err1 "pack: missing test text" "src2/test.txt: No such file" python3 "$cx" pack "$tmp/src2" "$tmp/xz2"
err1 "usage" "usage: corpus_xz.py pack|unpack" python3 "$cx" squash
finish test_corpus_xz
