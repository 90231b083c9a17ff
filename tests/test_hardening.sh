#!/usr/bin/env bash
# test_hardening.sh: the classes of bad input that used to hang the engine, damage a file or
# pass a broken check (the README's bad-input rows cite these checks by name):
#   inputs   every file read is a regular file, opened without blocking, size-bounded
#            (FIFOs, devices, a directory, a 3 GB sparse config; each command under a timeout,
#            so a hang fails instead of stalling the suite);
#   outputs  never a device, a FIFO, a directory or one of the command's inputs (by inode);
#            an eval output directory never inside the package;
#   checks   NaN weights refused naming the tensor (inspect, logits, generate, quantize); NaN audio
#            samples refused (the compare checks are in test_compare_checks.c, quantize's in
#            test_q4_writer.c);
#   evals    a fingerprint on every prediction: --resume and eval-merge refuse another package,
#            tokenizer or settings; an item longer than the context is recorded as failed and
#            the run goes on, the score says how many failed;
#   no shell bench --hf spawns the interpreter with an argument vector, finds its script from
#            the binary, checks it before the benchmark and reports its exit code;
#   nothing dropped: audio past the tower's window said on stderr and in --json (asr, eval);
#            a failed write to stdout is an error; sampling options without --temperature are
#            refused; --prompt - reads stdin;
#   progress plain progress lines when stderr is not a terminal (eval).
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
media="$G4_FIXTURES/frontends/media"
T="timeout 60" # a command that would block (a FIFO) fails the check instead of hanging

# --- inputs: regular files only, never blocking, bounded --------------------------------------
p=$(pkg fifocfg) && rm "$p/genai_config.json" && mkfifo "$p/genai_config.json"
expect "input: FIFO as genai_config.json" 1 "genai_config.json: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" inspect "$p"
p=$(pkg zerocfg) && ln -sf /dev/zero "$p/genai_config.json"
expect "input: /dev/zero as genai_config.json" 1 "genai_config.json: is a character device, not a regular file" \
    $T "$G4CU" inspect "$p"
p=$(pkg bigcfg) && truncate -s 3G "$p/genai_config.json" # sparse: no disk used
expect "input: 3 GB genai_config.json" 1 "genai_config.json: 3221225472 bytes, over the 67108864-byte limit" \
    $T "$G4CU" inspect "$p"
p=$(pkg fifoonnx) && rm "$p/decoder/model.onnx" && mkfifo "$p/decoder/model.onnx"
expect "input: FIFO as model.onnx" 1 "decoder/model.onnx: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" inspect "$p"
p=$(pkg fifodata) && rm "$p/decoder/model.onnx.data" && mkfifo "$p/decoder/model.onnx.data"
expect "input: FIFO as model.onnx.data" 1 "model.onnx.data: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" inspect "$p"
mkfifo "$tmp/fifo"
expect "input: FIFO as the tokenizer" 1 "$tmp/fifo: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tmp/fifo" --prompt hi
expect "input: FIFO as the audio" 1 "$tmp/fifo: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" asr "$G4_TINY_PKG" "$tmp/fifo" --tokenizer "$tok"
expect "input: /dev/urandom as the image" 1 "/dev/urandom: is a character device, not a regular file" \
    $T "$G4CU" vqa "$G4_TINY_PKG" /dev/urandom "what?" --tokenizer "$tok"
expect "input: FIFO as the manifest" 1 "$tmp/fifo: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" eval "$tmp/fifo" --task librispeech "$G4_TINY_PKG" --out "$tmp/e0"
expect "input: FIFO as the reference dump" 1 "$tmp/fifo: is a FIFO \(named pipe\), not a regular file" \
    $T "$G4CU" compare "$G4_TINY_PKG" "$tmp/fifo"
mkdir -p "$tmp/e1" && mkfifo "$tmp/e1/predictions.jsonl"
printf '{"id": "s", "audio": "%s", "transcript": "a", "category": "c"}\n' \
    "$media/silence_1s.wav" >"$tmp/m1.jsonl"
expect "input: FIFO as the predictions file" 1 "predictions.jsonl: is a FIFO \(named pipe\)[,;] (not a regular file|an output must be a new or a regular file)" \
    $T "$G4CU" eval "$tmp/m1.jsonl" --task librispeech "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e1" --resume

# --- outputs: a FIFO or a device written in place, never replaced; never a directory or an input
# Through a symlink to /dev/null: an engine that regressed would replace the link, not the
# system's /dev/null (as root, renaming over /dev/null itself would replace the device).
ln -s /dev/null "$tmp/devnull"
$T "$G4CU" logits "$G4_TINY_PKG" --ids 2,3 --out "$tmp/devnull" >/dev/null 2>"$tmp/err"
[ $? -eq 0 ] && [ -L "$tmp/devnull" ] && [ -c /dev/null ] && ! ls "$tmp"/devnull.tmp-* >/dev/null 2>&1
check "output: --out /dev/null is written in place (still a device, the link kept)" $?
"$G4CU" features "$G4_TINY_PKG" --audio "$media/silence_1s.wav" --out "$tmp/feat.npy" >/dev/null 2>&1
(cat "$tmp/fifo" >"$tmp/from_fifo" &) # the reader: the write waits for it, as a shell's would
$T "$G4CU" features "$G4_TINY_PKG" --audio "$media/silence_1s.wav" --out "$tmp/fifo" >/dev/null 2>"$tmp/err"
rc=$?
sleep 0.2
[ $rc -eq 0 ] && [ -p "$tmp/fifo" ] && [ -s "$tmp/feat.npy" ] && cmp -s "$tmp/feat.npy" "$tmp/from_fifo"
check "output: --out a FIFO is streamed in place (the same bytes as a file; still a FIFO)" $?
"$G4CU" logits "$G4_TINY_PKG" --ids 2,3 --out "$tmp/l_file.npy" >/dev/null 2>&1
$T "$G4CU" logits "$G4_TINY_PKG" --ids 2,3 --out /dev/stdout >"$tmp/l_stdout.npy" 2>"$tmp/err" &&
    $T "$G4CU" logits "$G4_TINY_PKG" --ids 2,3 --out /dev/stdout 2>"$tmp/err" | cat >"$tmp/l_pipe.npy"
[ $? -eq 0 ] && [ -s "$tmp/l_file.npy" ] && cmp -s "$tmp/l_file.npy" "$tmp/l_stdout.npy" &&
    cmp -s "$tmp/l_file.npy" "$tmp/l_pipe.npy"
check "output: --out /dev/stdout (a file, a pipe) gets the same bytes" $?
expect "output: --json a directory" 1 "$tmp: is a directory; an output must be a new or a regular file" \
    $T "$G4CU" compare "$G4_TINY_PKG" "$G4_FIXTURES/refdumps/mobius-tiny-f16/len1.npz" --json "$tmp"
cp "$media/silence_1s.wav" "$tmp/rec.wav" && cp "$tmp/rec.wav" "$tmp/rec.orig"
expect "output: the input itself" 1 "$tmp/rec.wav: is an input of this command \(the same file as $tmp/rec.wav\)" \
    $T "$G4CU" features "$G4_TINY_PKG" --audio "$tmp/rec.wav" --out "$tmp/rec.wav"
ln "$tmp/rec.wav" "$tmp/link.wav"
expect "output: a hard link of the input" 1 "$tmp/link.wav: is an input of this command \(the same file as $tmp/rec.wav\)" \
    $T "$G4CU" features "$G4_TINY_PKG" --audio "$tmp/rec.wav" --out "$tmp/link.wav"
expect "output: an input through /dev/fd" 1 "/dev/fd/3: is an input of this command \(the same file as $tmp/rec.wav\)" \
    $T sh -c '"$1" features "$2" --audio "$3" --out /dev/fd/3 3<>"$3"' sh "$G4CU" "$G4_TINY_PKG" "$tmp/rec.wav"
cmp -s "$tmp/rec.wav" "$tmp/rec.orig"
check "output: the recording is unchanged" $?
p=$(pkg evalpkg)
expect "output: eval --out inside the package" 1 "$p/decoder/ev: is inside the input package $p" \
    $T "$G4CU" eval "$tmp/m1.jsonl" --task librispeech "$p" --tokenizer "$tok" --out "$p/decoder/ev"
[ ! -e "$p/decoder/ev" ]
check "output: nothing made inside the package" $?

# --- checks: NaN weights, NaN audio ------------------------------------------------------------
p=$(pkg nanw)
off=$("$G4CU" inspect "$p" | awk '$1 == "decoder.model.layers.1.mlp.up_proj.weight_t" {sub("@", "", $6); print $6}')
[ -n "$off" ]
check "weights: the tensor's offset (from inspect)" $?
printf '\000\176' | dd of="$p/decoder/model.onnx.data" bs=1 seek=$((off + 10)) conv=notrunc 2>/dev/null # element 5 = 0x7e00, NaN
"$G4CU" inspect "$p" >"$tmp/insp" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "inconsistency: .*decoder/model.onnx: tensor 'decoder.model.layers.1.mlp.up_proj.weight_t' holds 1 NaN/Inf value (the first at element 5: nan)" "$tmp/insp"
check "weights: NaN in a decoder weight: inspect" $?
expect "weights: NaN in a decoder weight: logits" 1 \
    "decoder/model.onnx: tensor 'decoder.model.layers.1.mlp.up_proj.weight_t' holds 1 NaN/Inf value \(the first at element 5: nan\): the package's weights are corrupt" \
    $T "$G4CU" logits "$p" --ids 2,3 --out "$tmp/l.npy"
[ ! -e "$tmp/l.npy" ]
check "weights: no logits written" $?
expect "weights: NaN in a decoder weight: generate" 1 "tensor 'decoder.model.layers.1.mlp.up_proj.weight_t' holds 1 NaN/Inf value" \
    $T "$G4CU" generate "$p" --ids 2,3
# rtn rounds a NaN weight to finite scales and garbage codes: quantize refuses the source
# (every method reads the linears through the same plan), and nothing is written
for m in rtn kquant; do
    expect "weights: NaN in a decoder weight: quantize --method $m" 1 \
        "decoder/model.onnx: tensor 'decoder.model.layers.1.mlp.up_proj.weight_t' holds 1 NaN/Inf value \(the first at element 5: nan\): the package's weights are corrupt" \
        $T "$G4CU" quantize "$p" "$tmp/nanq_$m" --method $m
    [ ! -e "$tmp/nanq_$m" ] && [ -z "$(ls -d "$tmp"/nanq_$m.tmp-* 2>/dev/null)" ]
    check "weights: quantize --method $m left no output" $?
done
cp "$media/tone_1s_f32.wav" "$tmp/nan.wav"
printf '\000\000\300\177' | dd of="$tmp/nan.wav" bs=1 seek=$((44 + 4 * 100)) conv=notrunc 2>/dev/null
# A header that says 1 Hz: 50,000 samples would be 800 M samples at 16 kHz (it aborted asking
# for 6.4 GB); refused by its rate
{ printf 'RIFF'; printf '\xc4\x86\x01\x00'; printf 'WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00'
  printf '\x01\x00\x00\x00\x02\x00\x00\x00\x02\x00\x10\x00'; printf 'data\xa0\x86\x01\x00'
  head -c 100000 /dev/zero; } >"$tmp/1hz.wav"
expect "audio: a 1 Hz WAV" 1 "$tmp/1hz.wav: a sample rate of 1 Hz: expected 1000 to 768000 Hz" \
    $T "$G4CU" asr "$G4_TINY_PKG" "$tmp/1hz.wav" --tokenizer "$tok"
expect "audio: a 1 Hz WAV (features)" 1 "$tmp/1hz.wav: a sample rate of 1 Hz" \
    $T "$G4CU" features "$G4_TINY_PKG" --audio "$tmp/1hz.wav"
expect "audio: a NaN sample" 1 "$tmp/nan.wav: sample 100 \(frame 100, channel 0\) is NaN: expected finite audio samples" \
    $T "$G4CU" asr "$G4_TINY_PKG" "$tmp/nan.wav" --tokenizer "$tok"

# --- evals never mix models; a failed item is recorded and the run goes on --------------------
printf '{"id": "s%d", "audio": "%s", "transcript": "a", "category": "c"}\n' \
    1 "$media/silence_1s.wav" 2 "$media/short_200.wav" >"$tmp/m2.jsonl"
ev() { "$G4CU" eval "$tmp/m2.jsonl" --task librispeech --max-new 2 "$@"; }
ev "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e2" --limit 1 >/dev/null 2>"$tmp/err"
check "eval: a first run" $?
grep -q '"fingerprint":"[0-9a-f]\{16\}"' "$tmp/e2/predictions.jsonl" && grep -q '"fingerprint":[[:space:]]*{' "$tmp/e2/run.json"
check "eval: the fingerprint is recorded (predictions and run file)" $?
p=$(pkg otherpkg) && sed -i 's/"max_length": [0-9]*/"max_length": 77/' "$p/genai_config.json"
expect "eval: resume with another package" 1 "predictions.jsonl:1: predicted with another package \(fingerprint [0-9a-f]{16}, this run's is" \
    ev "$p" --tokenizer "$tok" --out "$tmp/e2" --resume
cp "$tok" "$tmp/tok2.json" && printf ' ' >>"$tmp/tok2.json"
expect "eval: resume with another tokenizer" 1 "predictions.jsonl:1: predicted with another tokenizer" \
    ev "$G4_TINY_PKG" --tokenizer "$tmp/tok2.json" --out "$tmp/e2" --resume
ev "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e2" --resume >/dev/null 2>&1
check "eval: resume with the same package and tokenizer" $?
ev "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e3" --shard 0/2 >/dev/null 2>&1 &&
    ev "$p" --tokenizer "$tok" --out "$tmp/e3" --shard 1/2 >/dev/null 2>&1
check "eval: two shards on two packages" $?
expect "eval-merge: shards of two packages" 1 "predictions.shard-1-of-2.jsonl:1: fingerprint [0-9a-f]{16}, but .*predictions.shard-0-of-2.jsonl:1's is [0-9a-f]{16}: these predictions were made by different packages" \
    "$G4CU" eval-merge "$tmp/e3" --task librispeech
# An item whose prompt is longer than the context (a 31 s clip at context 120): recorded as
# failed, the run goes on, the score counts it; a resume does not stop at it.
p=$(pkg ctx120) && sed -i 's/"context_length": [0-9]*/"context_length": 120/' "$p/genai_config.json"
printf '{"id": "s%d", "audio": "%s", "transcript": "a", "category": "c"}\n' \
    1 "$media/long_31s.flac" 2 "$media/silence_1s.wav" >"$tmp/m3.jsonl"
"$G4CU" eval "$tmp/m3.jsonl" --task librispeech --max-new 2 "$p" --tokenizer "$tok" --out "$tmp/e4" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "over 2 items (1 failed: scored as empty responses)" "$tmp/out" &&
    grep -q "m3.jsonl:1 (id 's1'): prompt of [0-9]* tokens is longer than the model's context of 120 tokens; recorded as failed" "$tmp/err" &&
    grep -q '"id":"s1".*"prediction":"","error":"prompt of [0-9]* tokens is longer' "$tmp/e4/predictions.jsonl" &&
    grep -q '"id":"s2".*"stop_reason"' "$tmp/e4/predictions.jsonl" && grep -q '"failed":[[:space:]]*1,' "$tmp/e4/scores.json"
check "eval: an item longer than the context is recorded as failed and the run goes on" $?
"$G4CU" eval "$tmp/m3.jsonl" --task librispeech --max-new 2 "$p" --tokenizer "$tok" --out "$tmp/e4" --resume >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "2 of 2 items already predicted" "$tmp/err" && grep -q "(1 failed" "$tmp/out"
check "eval: a resume goes past the failed item" $?

# More shards than items: the empty shard succeeds with 0 items (eval_gpus.sh and the Slurm
# merge job wait for every shard to succeed), and eval-merge scores the whole
"$G4CU" eval "$tmp/m1.jsonl" --task librispeech --max-new 2 "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e6" --shard 1/2 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "shard 1 of 2: 0 items" "$tmp/out" && [ -f "$tmp/e6/predictions.shard-1-of-2.jsonl" ] &&
    [ ! -s "$tmp/e6/predictions.shard-1-of-2.jsonl" ] && grep -q "selects no items" "$tmp/err"
check "eval: an empty shard is a success with 0 items" $?
"$G4CU" eval "$tmp/m1.jsonl" --task librispeech --max-new 2 "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e6" --shard 0/2 >/dev/null 2>&1 &&
    "$G4CU" eval-merge "$tmp/e6" --task librispeech >"$tmp/out" 2>&1
[ $? -eq 0 ] && grep -q "over 1 items" "$tmp/out"
check "eval-merge after an empty shard" $?

# --- no shell: bench --hf --------------------------------------------------------------------
cat >"$tmp/py" <<'EOF'
#!/bin/sh
# a stand-in interpreter: records its arguments, one per line; --check passes unless FAKE_FAIL
printf '%s\n' "$@" >>"$FAKE_LOG"
[ "$2" = --check ] && exit "${FAKE_FAIL:-0}"
while [ $# -gt 0 ]; do [ "$1" = --json ] && printf '{"bf16": {"decode_tok_s": 10, "ttft_128_ms": 5}}\n' >"$2"; shift; done
exit "${FAKE_RUN_EXIT:-0}"
EOF
chmod +x "$tmp/py"
# The benchmark between the peer's check and its run, on a text-only copy of the tiny package
# at context 300: five rows (pp128, tg128 and its TTFT, greedy and sampled) instead of the
# towers and the 512- and 2048-token prefills, about 40 s of CPU a run under ASan;
# the whole table is test_bench_cli's.
bp=$(pkg textonly) && rm -r "$bp"/vision_encoder "$bp"/audio_encoder "$bp"/image_processor.json \
    "$bp"/audio_feature_extraction.json && python3 - "$bp/genai_config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
del c["model"]["vision"], c["model"]["speech"]
c["model"]["context_length"] = 300
json.dump(c, open(sys.argv[1], "w"), indent=4)
EOF
check "bench --hf: a text-only package at context 300" $?
hostile="x'; touch $tmp/PWNED; echo '"
(cd / && FAKE_LOG="$tmp/log1" FAKE_FAIL=3 G4_PYTHON="$tmp/py" "$G4CU" bench "$bp" --backend cpu --reps 1 --hf "$hostile" >"$tmp/out" 2>"$tmp/err")
rc=$?
[ $rc -eq 1 ] && [ ! -e "$tmp/PWNED" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
    grep -q "checking the peer before the benchmark): $tmp/py exited with code 3" "$tmp/err" &&
    [ ! -s "$tmp/out" ] && [ "$(sed -n 3p "$tmp/log1")" = "$hostile" ] &&
    [ "$(sed -n 1p "$tmp/log1")" = "$(realpath "$G4_SOURCE_DIR/tools/python/bench_hf.py")" ]
check "bench --hf: no shell, script found from the binary, checked first, exit code reported" $?
FAKE_LOG="$tmp/log2" FAKE_RUN_EXIT=5 G4_PYTHON="$tmp/py" "$G4CU" bench "$bp" --backend cpu --reps 1 --hf "$tmp" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "bench --hf: $tmp/py exited with code 5" "$tmp/err"
check "bench --hf: the peer's exit code, not a wait status" $?
FAKE_LOG="$tmp/log3" G4_PYTHON="$tmp/py" "$G4CU" bench "$bp" --backend cpu --reps 1 --hf "$tmp" -o csv >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "vs HF bf16: decode" "$tmp/err"
check "bench --hf: a peer that runs" $?
# bench prints each measurement on stderr as it is measured: as many lines as the table's rows
rows=$(($(wc -l <"$tmp/out") - 1)) lines=$(grep -c "^bench: f16 " "$tmp/err")
[ "$rows" -ge 5 ] && [ "$lines" -eq "$rows" ] && grep -q "^bench: f16 pp128: .* tok/s (1 reps)$" "$tmp/err"
check "bench: each of the $rows measurements printed as it is measured ($lines lines)" $?
# a binary outside the source tree (an out-of-tree build): the script from the configured source
# (the peer's check fails on purpose: the benchmark itself is not needed for this)
mkdir -p "$tmp/elsewhere/bin" && cp "$G4CU" "$tmp/elsewhere/bin/g4cu"
FAKE_LOG="$tmp/log4" FAKE_FAIL=3 G4_PYTHON="$tmp/py" "$tmp/elsewhere/bin/g4cu" bench "$bp" --backend cpu --reps 1 --hf "$tmp" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "exited with code 3" "$tmp/err" &&
    [ "$(sed -n 1p "$tmp/log4")" = "$(realpath "$G4_SOURCE_DIR/tools/python/bench_hf.py")" ]
check "bench --hf: the script found from an out-of-tree binary" $?

# --- nothing dropped silently -------------------------------------------------------------------
# (one file is transcribed in windows, all of it: test_asr_long.c; several go one window each)
"$G4CU" asr "$G4_TINY_PKG" "$media/long_31s.flac" "$media/tone_1s_f32.wav" --tokenizer "$tok" \
    --max-new 2 --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "long_31s.flac: 31.0 s of audio, only the first 30.0 s were used" "$tmp/err" &&
    head -n1 "$tmp/out" | grep -q '"audio_truncated":\[{"file":"[^"]*long_31s.flac","seconds":31,"used_seconds":30}\]'
check "asr of several files: audio past the window said on stderr and in --json" $?
printf '{"id": "long", "audio": "%s", "transcript": "a", "category": "c"}\n' \
    "$media/long_31s.flac" >"$tmp/m4.jsonl"
"$G4CU" eval "$tmp/m4.jsonl" --task librispeech --max-new 2 "$G4_TINY_PKG" --tokenizer "$tok" --out "$tmp/e5" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "(id 'long'): .*long_31s.flac: 31.0 s of audio, only the first 30.0 s were used" "$tmp/err" &&
    grep -q '"audio_truncated_s":31' "$tmp/e5/predictions.jsonl"
check "eval: audio past the window said on stderr and in the prediction" $?
# progress: stderr is a file here, so plain lines (no \r bar): at least the last one
grep -q "^librispeech: 1/1 (100%)" "$tmp/err" && ! grep -q "$(printf '\r')" "$tmp/err"
check "eval: plain progress lines when stderr is not a terminal" $?
if [ -w /dev/full ]; then
    expect "stdout: generate > /dev/full" 1 "writing the output to stdout failed" \
        sh -c '"$1" generate "$2" --tokenizer "$3" --prompt hi --max-new 2 >/dev/full' sh "$G4CU" "$G4_TINY_PKG" "$tok"
fi
expect "generate: --top-k without --temperature" 1 "--top-k only applies when sampling: add --temperature T" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt hi --top-k 5
expect "generate: --seed without --temperature" 1 "--seed only applies when sampling" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --ids 2,3 --seed 7
printf 'Describe the weather.' | "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt - --max-new 3 --json >"$tmp/a"
"$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "Describe the weather." --max-new 3 --json >"$tmp/b"
[ -s "$tmp/a" ] && [ "$(grep -o '"tokens":\[[0-9,]*\],"prompt_tokens":[0-9]*' "$tmp/a")" = "$(grep -o '"tokens":\[[0-9,]*\],"prompt_tokens":[0-9]*' "$tmp/b")" ]
check "generate: --prompt - reads the prompt from stdin" $?

# --- the smaller items of issue 34 -------------------------------------------------------------
expect "generate: <|video|> typed in the prompt" 1 "placeholder token '<\|video\|>' itself" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tok" --prompt "see <|video|>"
printf '\n  \n' >"$tmp/empty.jsonl"
expect "vqa --batch: an empty file" 1 "$tmp/empty.jsonl: no items" \
    "$G4CU" vqa "$G4_TINY_PKG" --tokenizer "$tok" --batch "$tmp/empty.jsonl"
printf '{"image": "%s", "question": "q", "id": "a"}\n' "$media/square_rgb.png" "$media/square_rgb.png" >"$tmp/dup.jsonl"
expect "vqa --batch: a duplicate id" 1 "$tmp/dup.jsonl:2: id \"a\" again \(also $tmp/dup.jsonl:1\)" \
    "$G4CU" vqa "$G4_TINY_PKG" --tokenizer "$tok" --batch "$tmp/dup.jsonl"

finish test_hardening
