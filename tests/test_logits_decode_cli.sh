#!/usr/bin/env bash
# test_logits_decode_cli.sh: `g4cu logits --decode-from N` (issue 35's decode-vs-prefill check)
# on the CPU backend, the oracle: ids[0, N) as generate's prompt, then one decode step per id,
# on an audio prompt (a lone placeholder, expanded before N), on text prompts and on a prompt of
# two prefill chunks with the audio block across their boundary:
#   - the summary's decode rows equal the plain prefill's within cpu-f32 (rel err <= 1e-4) with
#     the argmax equal on every decode row (m of m, m counted here from the ids), row N - 1 as
#     generate's step has the prefill's argmax, each step's sampled id (the sample op) is the
#     argmax of the row it capped (m + 1 of m + 1), and rows < N are byte-identical to the prefill's
#     (--prefill-out, itself byte-identical to a plain `g4cu logits` of the ids);
#   - the comparison itself can fail: --against the prefill of a sequence whose decode ids differ
#     must report a large rel err and fewer equal argmaxes; --against the prefill's own file
#     reports what the built-in prefill did;
#   - the errors: N past the ids, N at or before a placeholder (the row named), the options that
#     need --decode-from.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
wav="$G4_FIXTURES/frontends/media/tone_1s_f32.wav"
ph_aud=$("$G4CU" tokenize "$tok" "<|audio|>")
n_aud=$("$G4CU" features "$G4_TINY_PKG" --audio "$wav" | sed -nE 's/.* ([0-9]+) soft tokens.*/\1/p')
[ -n "$n_aud" ] && [ "$n_aud" -gt 1 ]
check "audio soft tokens from g4cu features ($n_aud)" $?

# field NAME LINE: a number of the summary line
rel_of() { sed -nE 's/.*\): rel err ([0-9.e+-]+) .*/\1/p' <<<"$1"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 <= b + 0) }'; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 > b + 0) }'; }
# npy_rows_equal A B ROWS: the first ROWS rows of two float32 [rows, V] .npy files are the same
# bytes (headers compared too: the writer's, the same shape)
npy_rows_equal() {
    local hl v
    hl=$(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')
    v=$(head -c $((hl + 10)) "$1" | LC_ALL=C grep -ao "'shape': ([0-9]*, [0-9]*)" |
        LC_ALL=C sed -E 's/.*, ([0-9]+)\)/\1/')
    [[ $hl =~ ^[0-9]+$ && $v =~ ^[0-9]+$ ]] && cmp -s -n $((hl + 10 + $3 * v * 4)) "$1" "$2"
}

# decode_case NAME N_GIVEN ROW0 IDS [MEDIA...]: ROW0 = where N lands among the expanded rows
decode_case() {
    local name=$1 N=$2 r0=$3 ids=$4
    shift 4
    local n rows m line rel
    n=$(tr ',' '\n' <<<"$ids" | wc -l)
    rows=$((r0 + n - N)) m=$((n - N))
    line=$("$G4CU" logits "$G4_TINY_PKG" --ids "$ids" "$@" --decode-from "$N" \
        --out "$tmp/$name.dec.npy" --prefill-out "$tmp/$name.pf.npy" \
        --step-out "$tmp/$name.step.npy" --sampled-out "$tmp/$name.smp.npy" 2>"$tmp/err")
    check "$name: exit 0" $?
    echo "  $line"
    grep -q "^decode vs prefill (cpu): rows $r0\.\.$((rows - 1)) ($m rows): " <<<"$line"
    check "$name: the decode rows are $r0..$((rows - 1))" $?
    rel=$(rel_of "$line")
    le "$rel" 1e-4
    check "$name: decode vs prefill rel err $rel <= 1e-4 (cpu-f32)" $?
    grep -q "argmax equal $m of $m[;)]" <<<"$line" && ! grep -q "first differing" <<<"$line"
    check "$name: argmax equal on every decode row ($m of $m)" $?
    local st="; row $((r0 - 1)) as generate's prompt step: rel err [0-9.e+-]+"
    grep -qE "$st, argmax ([0-9]+) \(prefill \1\);" <<<"$line"
    check "$name: row $((r0 - 1)) as generate's step has the prefill's argmax" $?
    grep -q "; sampled id = its row's argmax on $((m + 1)) of $((m + 1))$" <<<"$line"
    check "$name: each step's sampled id is its row's argmax ($((m + 1)) of $((m + 1)))" $?
    npy_rows_equal "$tmp/$name.dec.npy" "$tmp/$name.pf.npy" "$r0"
    check "$name: rows < $r0 byte-identical to the prefill's" $?
    "$G4CU" logits "$G4_TINY_PKG" --ids "$ids" "$@" --out "$tmp/$name.plain.npy" 2>"$tmp/err" &&
        cmp -s "$tmp/$name.plain.npy" "$tmp/$name.pf.npy"
    check "$name: --prefill-out = a plain g4cu logits, byte for byte" $?
    grep -aq "($rows, " "$tmp/$name.dec.npy" && grep -aq "(1, " "$tmp/$name.step.npy" &&
        grep -aq "($rows, 1)" "$tmp/$name.smp.npy"
    check "$name: --out and --sampled-out have $rows rows, --step-out one" $?
}

ids_aud="2,5,$ph_aud,9,7,11,300,41,17,99"
r0_aud=$((4 + n_aud + 1)) # N = 4 given; the lone placeholder at 2 became n_aud + 2 rows
decode_case audio 4 "$r0_aud" "$ids_aud" --audio "$wav" --tokenizer "$tok"
decode_case text 3 3 "2,5,17,9,7,11,300,41,17,99,4,8"
decode_case text_n1 1 1 "2,5,17,9"
# past one prefill chunk (generate's 512 rows): the audio block across the chunks' boundary, so
# the second chunk's soft rows start where the first's end (a wrong offset moves rows >= 512)
long=2
for ((i = 1; i < 505; i++)); do long="$long,$((3 + (i * 37) % 900))"; done
long="$long,$ph_aud"
for ((i = 0; i < 14; i++)); do long="$long,$((5 + i * 11))"; done
decode_case two_chunks 516 $((516 + n_aud + 1)) "$long" --audio "$wav" --tokenizer "$tok"

# the comparison can fail: the prefill of the same prompt with other decode ids
"$G4CU" logits "$G4_TINY_PKG" --ids "2,5,$ph_aud,9,7,12,301,40,18,98" --audio "$wav" \
    --tokenizer "$tok" --out "$tmp/other.npy" 2>"$tmp/err"
check "the other sequence's prefill" $?
line=$("$G4CU" logits "$G4_TINY_PKG" --ids "$ids_aud" --audio "$wav" --tokenizer "$tok" \
    --decode-from 4 --out "$tmp/x.npy" --against "$tmp/other.npy" 2>"$tmp/err")
check "--against another sequence: exit 0 (a measurement)" $?
echo "  $line"
rel=$(rel_of "$line")
gt "$rel" 1e-2 && grep -qE "argmax equal [0-9]+ of 6 \(first differing row" <<<"$line" &&
    ! grep -q "argmax equal 6 of 6" <<<"$line"
check "--against another sequence: rel err $rel > 1e-2, an argmax differs" $?
line2=$("$G4CU" logits "$G4_TINY_PKG" --ids "$ids_aud" --audio "$wav" --tokenizer "$tok" \
    --decode-from 4 --out "$tmp/x.npy" --against "$tmp/audio.pf.npy" 2>"$tmp/err")
line1=$("$G4CU" logits "$G4_TINY_PKG" --ids "$ids_aud" --audio "$wav" --tokenizer "$tok" \
    --decode-from 4 --out "$tmp/x.npy" 2>"$tmp/err")
[ -n "$line1" ] && [ "$(sed "s#$tmp/audio.pf.npy#prefill#g" <<<"$line2")" = "$line1" ]
check "--against the prefill's own file: the built-in summary" $?

# errors
err1 "N past the ids" "decode_from 11: expected 1\.\.10 (the ids given)" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2,5,17,9,7,11,300,41,17,99 --decode-from 11 \
    --out "$tmp/x.npy"
err1 "N at the lone placeholder" \
    "decode_from 2: the last media placeholder is at row $((2 + n_aud)); every placeholder must" \
    "$G4CU" logits "$G4_TINY_PKG" --ids "$ids_aud" --audio "$wav" --tokenizer "$tok" \
    --decode-from 2 --out "$tmp/x.npy"
full_aud="$("$G4CU" tokenize "$tok" "<|audio>")"
for ((i = 0; i < n_aud; i++)); do full_aud="$full_aud,$ph_aud"; done
full_aud="$full_aud,$("$G4CU" tokenize "$tok" "<audio|>")"
err1 "N inside a typed-out block" \
    "decode_from 4: the last media placeholder is at row $((1 + n_aud))" \
    "$G4CU" logits "$G4_TINY_PKG" --ids "2,$full_aud,9" --audio "$wav" --decode-from 4 \
    --out "$tmp/x.npy"
err1 "--against without --decode-from" "need --decode-from" \
    "$G4CU" logits "$G4_TINY_PKG" --ids 2,5 --against "$tmp/other.npy" --out "$tmp/x.npy"
err1 "--against of another shape" "logits \[1, [0-9]*\], expected \[$((r0_aud + 6)), " \
    "$G4CU" logits "$G4_TINY_PKG" --ids "$ids_aud" --audio "$wav" --tokenizer "$tok" \
    --decode-from 4 --against "$tmp/audio.step.npy" --out "$tmp/x.npy"
finish test_logits_decode_cli
