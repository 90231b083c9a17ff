#!/usr/bin/env bash
# lmms_eval_check.sh: lmms-eval's OpenAI-compatible model (`--model openai`, its defaults:
# num_concurrent=32, 5 retries) against `g4cu serve`, offline, on two local tasks
# (tools/lmms_eval/: an OCRBench-style one on the smoke set's two document images, a
# LibriSpeech-style one on 8 of its utterances), then `g4cu eval` on the same manifests with the
# same prompts and max_new_tokens; tools/python/lmms_eval_compare.py checks that every
# prediction is identical, the scores equal, and that no request failed or was retried.
#
#   tools/lmms_eval_check.sh [--out DIR] [--g4cu BIN] [--package PKG --tokenizer TOK]
#                            [--backend cpu|cuda] [--data DIR]
#
# Defaults: build/g4cu, the tiny fixture package (random weights: the answers are noise, but
# greedy noise, the same on both routes), the CPU backend, .smoke-data (tools/fetch_smoke_set.sh),
# a new folder under /tmp. Needs .tools/lmms-venv (tools/lmms_eval_venv.sh: ~6 GB, so not in
# CI). Prints the timings; exit 0 when every check passed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
g4cu=$src/build/g4cu
pkg=$src/tests/fixtures/mobius-tiny-f16/package
tok=$src/tests/fixtures/chat/chat_bpe.json
backend=cpu
data=$src/.smoke-data
out=""
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2 ;;
    --g4cu) g4cu=$2 ;;
    --package) pkg=$2 ;;
    --tokenizer) tok=$2 ;;
    --backend) backend=$2 ;;
    --data) data=$2 ;;
    *)
        echo "lmms_eval_check: unknown argument '$1' (see the header of $0)" >&2
        exit 2
        ;;
    esac
    shift 2
done
venv=${G4_LMMS_VENV:-$src/.tools/lmms-venv}
[ -x "$venv/bin/lmms-eval" ] || {
    echo "lmms_eval_check: no lmms-eval in $venv: run tools/lmms_eval_venv.sh" >&2
    exit 1
}
[ -x "$g4cu" ] || { echo "lmms_eval_check: $g4cu: not an executable (build first)" >&2; exit 1; }
[ -f "$data/skimage/page.png" ] && [ -d "$data/librivox" ] || {
    echo "lmms_eval_check: $data: not the smoke set (tools/fetch_smoke_set.sh $data)" >&2
    exit 1
}
data=$(realpath "$data")
[ -n "$out" ] || out=$(mktemp -d /tmp/lmms_eval_check.XXXXXX)
mkdir -p "$out"
out=$(realpath "$out")
for d in tasks lmms eval-ocr eval-asr; do
    [ ! -e "$out/$d" ] || { echo "lmms_eval_check: $out/$d exists: give an empty --out" >&2; exit 1; }
done

# The task folder lmms-eval reads: the YAMLs and utils.py, and each manifest with absolute media
# paths (lmms-eval sends an image's bytes, and an audio file's path as audio_url, which the
# server reads under --media-dir). `g4cu eval` reads the same two files.
mkdir "$out/tasks"
cp "$src"/tools/lmms_eval/*.yaml "$src/tools/lmms_eval/utils.py" "$out/tasks/"
for t in ocr asr; do
    sed -E "s#\"(image|audio)\": \"#\"\\1\": \"$data/#" "$src/tools/lmms_eval/${t}_local.jsonl" \
        >"$out/tasks/${t}_local.jsonl"
done
n_ocr=$(grep -c . "$out/tasks/ocr_local.jsonl")
n_asr=$(grep -c . "$out/tasks/asr_local.jsonl")
# one max_new_tokens for both tasks and both routes, from the YAMLs
max_new=$(sed -nE 's/^ *max_new_tokens: *([0-9]+).*/\1/p' "$out"/tasks/*.yaml | sort -u)
[ "$(wc -l <<<"$max_new")" -eq 1 ] || { echo "lmms_eval_check: the YAMLs' max_new_tokens differ" >&2; exit 1; }

# 1. g4cu serve with its defaults (one state, the queue), the smoke set as --media-dir
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; true' EXIT
"$g4cu" serve "$pkg" --tokenizer "$tok" --backend "$backend" --port 0 --media-dir "$data" \
    >"$out/serve.out" 2>"$out/serve.log" &
srv=$!
for _ in $(seq 600); do
    grep -q 'listening on' "$out/serve.out" 2>/dev/null && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
done
port=$(sed -nE 's#.*listening on http://[^:]+:([0-9]+).*#\1#p' "$out/serve.out")
[ -n "$port" ] || { echo "lmms_eval_check: g4cu serve did not start:" >&2; cat "$out/serve.log" >&2; exit 1; }
head -n1 "$out/serve.out"

# 2. lmms-eval, offline, its default concurrency and retries
t0=$(date +%s.%N)
lmms_rc=0
(cd "$out" && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$venv/bin/lmms-eval" eval --model openai \
    --model_args "model=package,base_url=http://127.0.0.1:$port/v1,api_key=none" \
    --tasks g4cu_ocr_local,g4cu_asr_local --include_path "$out/tasks" --log_samples \
    --output_path "$out/lmms") >"$out/lmms.log" 2>&1 || lmms_rc=$?
t1=$(date +%s.%N)
kill "$srv"
wait "$srv" || true
srv=""
[ $lmms_rc -eq 0 ] || { echo "lmms_eval_check: lmms-eval exited $lmms_rc:" >&2; tail -n 20 "$out/lmms.log" >&2; exit 1; }

# 3. g4cu eval on the same manifests, the same max_new_tokens (greedy, one item at a time)
"$g4cu" eval "$out/tasks/ocr_local.jsonl" --task ocrbench "$pkg" --tokenizer "$tok" \
    --backend "$backend" --max-new "$max_new" --out "$out/eval-ocr" >"$out/eval-ocr.log" 2>&1
t2=$(date +%s.%N)
"$g4cu" eval "$out/tasks/asr_local.jsonl" --task librispeech "$pkg" --tokenizer "$tok" \
    --backend "$backend" --max-new "$max_new" --out "$out/eval-asr" >"$out/eval-asr.log" 2>&1
t3=$(date +%s.%N)

# 4. the comparison
py=$venv/bin/python
rc=0
"$py" "$src/tools/python/lmms_eval_compare.py" --task ocr --manifest "$out/tasks/ocr_local.jsonl" \
    --lmms-dir "$out/lmms" --eval-dir "$out/eval-ocr" || rc=1
"$py" "$src/tools/python/lmms_eval_compare.py" --task asr --manifest "$out/tasks/asr_local.jsonl" \
    --lmms-dir "$out/lmms" --eval-dir "$out/eval-asr" --serve-log "$out/serve.log" \
    --lmms-log "$out/lmms.log" --expect-requests $((n_ocr + n_asr)) || rc=1
grep -A4 '^|    Tasks' "$out/lmms.log" || true
grep -h -E '^(ocrbench|librispeech) ' "$out/eval-ocr.log" "$out/eval-asr.log" || true
printf 'timings: lmms-eval against g4cu serve %.1f s (%d + %d items, max_new_tokens %s, backend %s); g4cu eval %.1f s + %.1f s\n' \
    "$(awk "BEGIN{print $t1 - $t0}")" "$n_ocr" "$n_asr" "$max_new" "$backend" \
    "$(awk "BEGIN{print $t2 - $t1}")" "$(awk "BEGIN{print $t3 - $t2}")"
echo "lmms_eval_check: $([ $rc -eq 0 ] && echo ok || echo FAILED) (files in $out)"
exit $rc
