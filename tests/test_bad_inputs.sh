#!/usr/bin/env bash
# test_bad_inputs.sh: the command-level rows of the README's "Bad inputs" table that no other
# test checks through g4cu: broken packages through `g4cu inspect` and `g4cu generate`, bad
# tokenizers, bad media through `g4cu vqa` / `g4cu asr`, prompts and media that do not fit the
# context, bad reference dumps through `g4cu compare`, and bad manifests and an interrupted run
# through `g4cu eval`. Each check: the exit code, exactly one line on stderr, and the pattern
# the table gives (check names are the table's citations). The broken inputs are made here
# from the committed fixtures.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
tok="$G4_FIXTURES/chat/chat_bpe.json"
media="$G4_FIXTURES/frontends/media"

# --- packages (g4cu inspect checks everything at open; generate opens the same way) ----------
expect "package: not a directory" 1 "^g4cu: $tmp/none: not a package directory$" \
    "$G4CU" inspect "$tmp/none"
p=$(pkg nocomp) && rm -rf "$p/vision_encoder"
expect "package: missing component dir" 1 \
    "vision_encoder/model.onnx: missing vision_encoder component \(genai_config.json names" \
    "$G4CU" inspect "$p"
p=$(pkg trunc) && truncate -s 1000000 "$p/decoder/model.onnx.data"
expect "package: truncated .onnx.data" 1 \
    "decoder/model.onnx: tensor '[^']+': external offset [0-9]+ \+ length [0-9]+ runs past the end of model.onnx.data \(1000000 bytes; truncated file\?\)" \
    "$G4CU" generate "$p" --ids 2,3
p=$(pkg garbage) && head -c 4096 /dev/urandom >"$p/embedding/model.onnx"
expect "package: garbage model.onnx" 1 \
    "embedding/model.onnx: not a valid ONNX ModelProto \(protobuf decode failed\)" \
    "$G4CU" generate "$p" --ids 2,3
p=$(pkg empty) && : >"$p/audio_encoder/model.onnx"
expect "package: empty model.onnx" 1 "audio_encoder/model.onnx: .*no graph" "$G4CU" inspect "$p"
p=$(pkg jsontype) && sed -i 's/"hidden_size": 64/"hidden_size": "64"/' "$p/genai_config.json"
expect "package: wrong JSON type" 1 \
    "genai_config.json: model.decoder.hidden_size: expected an integer, found a string" \
    "$G4CU" generate "$p" --ids 2,3
p=$(pkg badjson) && printf '{"model": {' >"$p/genai_config.json"
expect "package: invalid JSON" 1 "genai_config.json: invalid JSON near byte [0-9]+" \
    "$G4CU" inspect "$p"
p=$(pkg noconfig) && rm "$p/genai_config.json"
expect "package: missing genai_config.json" 1 "genai_config.json: cannot open" \
    "$G4CU" inspect "$p"
p=$(pkg nodata) && rm "$p/decoder/model.onnx.data"
expect "package: missing model.onnx.data" 1 \
    "decoder/model.onnx: tensor '[^']+': .*decoder/model.onnx.data: cannot open: No such file or directory" \
    "$G4CU" inspect "$p"
p=$(pkg noonnx) && rm "$p/decoder/model.onnx"
expect "package: missing model.onnx" 1 \
    "decoder/model.onnx: missing decoder component \(genai_config.json names 'decoder/model.onnx'\)" \
    "$G4CU" inspect "$p"
p=$(pkg layers) && sed -i 's/"num_hidden_layers": 10/"num_hidden_layers": 11/' "$p/genai_config.json"
expect "package: weights do not match config (layers)" 1 \
    "decoder/model.onnx: 10 decoder layers have a q_proj, but genai_config.json says num_hidden_layers = 11" \
    "$G4CU" generate "$p" --ids 2,3
p=$(pkg vocab) && sed -i 's/"vocab_size": 1024/"vocab_size": 2048/' "$p/genai_config.json"
expect "package: weights do not match config (vocab)" 1 \
    "tensor 'embedding.embed_tokens.weight' is \[1024, 64\], but genai_config.json says vocab_size 2048" \
    "$G4CU" inspect "$p"

# --- tokenizer (generate --prompt, vqa, asr and eval load it the same way) -------------------
printf '{"model": ' >"$tmp/tok.json"
expect "tokenizer: invalid tokenizer.json" 1 "tok.json: unexpected end of file at byte [0-9]+" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tmp/tok.json" --prompt hi --max-new 1
expect "tokenizer: missing tokenizer file" 1 "none.json: cannot open: No such file or directory" \
    "$G4CU" generate "$G4_TINY_PKG" --tokenizer "$tmp/none.json" --prompt hi --max-new 1
expect "tokenizer: package without tokenizer.json" 1 \
    "the package has no tokenizer.json; pass one with --tokenizer F" \
    "$G4CU" generate "$G4_TINY_PKG" --prompt hi --max-new 1

# --- backend ------------------------------------------------------------------------------------
# Without a usable GPU, --backend cuda is a user error (on the GPU machine this check is moot:
# test_cuda_oom.c covers the GPU's own limit there).
if "$G4CU" --version | grep -q 'built without CUDA'; then # (cmake -DG4CU_CUDA=OFF)
    expect "backend: --backend cuda in a build without CUDA" 1 \
        "^g4cu: --backend cuda: this g4cu was built without CUDA \(cmake -DG4CU_CUDA=OFF\); use --backend cpu$" \
        "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --max-new 1 --backend cuda
elif nvidia-smi -L >/dev/null 2>&1; then
    echo "skip backend: --backend cuda without a GPU (this machine has one)"
else
    expect "backend: --backend cuda without a usable GPU" 1 "^g4cu: --backend cuda: no usable GPU \(.+\)$" \
        "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --max-new 1 --backend cuda
fi
expect "backend: unknown backend" 1 "^g4cu: --backend 'tpu': expected cpu or cuda$" \
    "$G4CU" generate "$G4_TINY_PKG" --ids 2,3 --max-new 1 --backend tpu

# --- media through the chat pipeline (vqa / asr) ------------------------------------------------
head -c 2000 "$media/square_rgb.png" >"$tmp/cut.png"
expect "vqa: truncated PNG" 1 "^g4cu: $tmp/cut.png: truncated or corrupt PNG" \
    "$G4CU" vqa "$G4_TINY_PKG" "$tmp/cut.png" "What is it?" --tokenizer "$tok"
expect "vqa: CMYK JPEG" 1 "cmyk.jpg: CMYK JPEG is not supported" \
    "$G4CU" vqa "$G4_TINY_PKG" "$media/cmyk.jpg" "What is it?" --tokenizer "$tok"
expect "vqa: audio file as the image" 1 "tone_1s_f32.wav: not a PNG or JPEG image" \
    "$G4CU" vqa "$G4_TINY_PKG" "$media/tone_1s_f32.wav" "What is it?" --tokenizer "$tok"
head -c 1500 "$media/photo.jpg" >"$tmp/cut.jpg"
expect "vqa: truncated JPEG" 1 "^g4cu: $tmp/cut.jpg: truncated or corrupt JPEG \(" \
    "$G4CU" vqa "$G4_TINY_PKG" "$tmp/cut.jpg" "What is it?" --tokenizer "$tok"
: >"$tmp/empty.png"
expect "vqa: empty image file" 1 "empty.png: empty file, expected a PNG or JPEG image" \
    "$G4CU" vqa "$G4_TINY_PKG" "$tmp/empty.png" "What is it?" --tokenizer "$tok"
# FLAC: libsndfile stops at the first bad frame; what decoded before it is not used (as
# python-soundfile raises there too)
head -c 20000 "$media/speech_7.3s_8k.flac" >"$tmp/cut.flac"
expect "asr: truncated FLAC" 1 "cut.flac: decoding failed after [0-9]+ of 58400 frames \(" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/cut.flac" --tokenizer "$tok"
head -c 60 "$media/speech_7.3s_8k.flac" >"$tmp/cut_header.flac"
expect "asr: FLAC cut in its header" 1 "cut_header.flac: not a sound file libsndfile can read \(" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/cut_header.flac" --tokenizer "$tok"
{ head -c 8000 "$media/speech_7.3s_8k.flac"; head -c 50000 /dev/zero; } >"$tmp/corrupt.flac"
expect "asr: corrupt FLAC frames" 1 "corrupt.flac: decoding failed after [0-9]+ of 58400 frames \(" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/corrupt.flac" --tokenizer "$tok"
: >"$tmp/empty.wav"
expect "asr: 0-byte audio file" 1 "empty.wav: not a sound file libsndfile can read \(" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/empty.wav" --tokenizer "$tok"
expect "asr: missing audio file" 1 "none.wav: cannot open: No such file or directory" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/none.wav" --tokenizer "$tok"
printf 'RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00' >"$tmp/zero.wav"
expect "asr: 0-length WAV" 1 "zero.wav: contains no audio samples" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/zero.wav" --tokenizer "$tok"
{ printf 'RIFF\x88\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x64\x00\x00\x00'; head -c 100 /dev/zero; } >"$tmp/short.wav"
expect "asr: 50-sample WAV (shorter than one frame)" 1 "short.wav: .*too short" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp/short.wav" --tokenizer "$tok"
expect "asr: a directory as the audio" 1 "$tmp: is a directory, not a regular file" \
    "$G4CU" asr "$G4_TINY_PKG" "$tmp" --tokenizer "$tok"

# --- context ----------------------------------------------------------------------------------
# The tiny package with a 120-token context and a 70-token image budget: one image and the chat
# template (80 tokens) fit; a second image, 5x3 (HF's rule: resized to 288x480, 18x30 patches,
# 60 soft tokens + its two markers), makes 142 tokens, which do not.
p=$(pkg ctx120)
sed -i 's/"context_length": 4096/"context_length": 120/' "$p/genai_config.json"
sed -i 's/"max_soft_tokens": 280/"max_soft_tokens": 70/' "$p/image_processor.json"
"$G4CU" generate "$p" --tokenizer "$tok" --image "$media/square_rgb.png" --prompt hi --max-new 2 \
    --json >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && grep -q '"prompt_tokens":80' "$tmp/out"; then
    echo "ok   context: one image fits (80 prompt tokens)"
    pass=$((pass + 1))
else
    echo "FAIL context: one image fits: $(cat "$tmp/err" "$tmp/out")"
    fail=$((fail + 1))
fi
expect "context: more images than fit" 1 \
    "^g4cu: prompt of 142 tokens is longer than the model's context of 120 tokens$" \
    "$G4CU" generate "$p" --tokenizer "$tok" --image "$media/square_rgb.png" \
    --image "$media/tiny_5x3.png" --prompt hi --max-new 2
expect "context: text prompt longer than the context" 1 \
    "prompt of [0-9]+ tokens is longer than the model's context of 120 tokens" \
    "$G4CU" generate "$p" --tokenizer "$tok" --prompt "$(printf 'hello world %.0s' {1..80})"
# Prompt + max_new beyond the context is not an error: generation stops where the context ends.
"$G4CU" generate "$p" --ids "$(seq -s, 3 112)" --max-new 50 --json >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && grep -q '"stop_reason":"context"' "$tmp/out" && grep -q '"new_tokens":11' "$tmp/out"; then
    echo "ok   context: generation stops at the context's end (110 + 11 tokens, stop_reason context)"
    pass=$((pass + 1))
else
    echo "FAIL context: generation at the context's end: $(cat "$tmp/err" "$tmp/out")"
    fail=$((fail + 1))
fi

# --- reference dumps (g4cu compare) -----------------------------------------------------------
head -c 3000 "$G4_FIXTURES/refdumps/tiny2/len1.npz" >"$tmp/cut.npz"
expect "compare: truncated .npz dump" 1 \
    "cut.npz: no zip end-of-central-directory record: not a .npz archive or truncated" \
    "$G4CU" compare "$G4_FIXTURES/tiny2/package" "$tmp/cut.npz"
echo "hi" >"$tmp/text.npz"
expect "compare: text file as the dump" 1 "text.npz: 3 bytes: too short for a zip archive" \
    "$G4CU" compare "$G4_FIXTURES/tiny2/package" "$tmp/text.npz"

# --- eval (g4cu eval: a bad manifest line, an interrupted run, resumed) ------------------------
# Three short clips of the front-end fixtures, librispeech prompts, 4 new tokens each (greedy:
# the same predictions every run).
printf '%s\n' '{"id": "u1", "audio": "tone_1s_f32.wav", "transcript": "a tone", "category": "c"}' \
    '{"id": "u2", "audio": "silence_1s.wav", "transcript": "nothing", "category": "c"}' \
    '{"id": "u3", "audio": "short_200.wav", "transcript": "short", "category": "c"}' >"$tmp/m.jsonl"
printf '%s\n' '{"id": "u1", "audio": "tone_1s_f32.wav", "transcript": "a tone", "category": "c"}' \
    '{"id": "u2", "transcript": "nothing", "category": "c"}' >"$tmp/bad_m.jsonl"
eval_cmd() { # manifest out-dir [options]
    local m=$1 d=$2
    shift 2
    "$G4CU" eval "$m" --task librispeech "$G4_TINY_PKG" --tokenizer "$tok" --data-dir "$media" \
        --out "$d" --max-new 4 "$@"
}
expect "eval: manifest line without its media field" 1 "bad_m.jsonl:2: field 'audio'" \
    eval_cmd "$tmp/bad_m.jsonl" "$tmp/bad_run"
printf '%s\n' '{"id": "u1", "audio": "nope.wav", "transcript": "a tone", "category": "c"}' >"$tmp/nomedia.jsonl"
expect "eval: manifest media file missing" 1 \
    "nomedia.jsonl:1: field 'audio': .*nope.wav is not a readable file \(relative paths are resolved against --data-dir" \
    eval_cmd "$tmp/nomedia.jsonl" "$tmp/nomedia_run"
printf '%s\n' '{"id": "u1", "audio": "tone_1s_f32.wav", "transcript": "a tone", "category": "c"}' \
    '{"id": "u2", "audio": ' >"$tmp/badjson.jsonl"
expect "eval: manifest line not valid JSON" 1 "badjson.jsonl:2: not valid JSON \(at column [0-9]+\); expected one object" \
    eval_cmd "$tmp/badjson.jsonl" "$tmp/badjson_run"
printf '%s\n' '{"id": "u1", "image": "square_rgb.png", "question": "q", "answers": ["a"]}' >"$tmp/kind.jsonl"
expect "eval: media of the wrong kind for the task" 1 \
    "kind.jsonl:1: field 'image': task librispeech takes audio items \(field 'audio'\)" \
    eval_cmd "$tmp/kind.jsonl" "$tmp/kind_run"
expect "eval: missing manifest" 1 "none.jsonl: cannot open: No such file or directory" \
    eval_cmd "$tmp/none.jsonl" "$tmp/none_run"
eval_cmd "$tmp/m.jsonl" "$tmp/full" >"$tmp/out" 2>"$tmp/err"
rc=$?
mkdir -p "$tmp/cut"
n_whole=$(head -2 "$tmp/full/predictions.jsonl" | wc -c)
# an interrupted run: two whole lines and 40 bytes of the third (no newline)
head -c $((n_whole + 40)) "$tmp/full/predictions.jsonl" >"$tmp/cut/predictions.jsonl"
if [ $rc -ne 0 ] || [ "$(wc -l <"$tmp/full/predictions.jsonl")" -ne 3 ]; then
    echo "FAIL eval: the uninterrupted run: exit $rc: $(cat "$tmp/err")"
    fail=$((fail + 1))
else
    expect "eval: interrupted run, without --resume" 1 \
        "predictions.jsonl:3: torn last line \(40 bytes without a newline: the run was interrupted\); finish it with g4cu eval ... --resume" \
        eval_cmd "$tmp/m.jsonl" "$tmp/cut"
    eval_cmd "$tmp/m.jsonl" "$tmp/cut" --resume >"$tmp/out" 2>"$tmp/err"
    rc=$?
    # the same predictions as the uninterrupted run (timings aside)
    strip() { sed -E 's/,"item_ms".*//' "$1"; }
    if [ $rc -eq 0 ] && grep -q "dropped a torn last line (40 bytes)" "$tmp/err" &&
        grep -q "2 of 3 items already predicted" "$tmp/err" &&
        [ "$(strip "$tmp/cut/predictions.jsonl")" = "$(strip "$tmp/full/predictions.jsonl")" ]; then
        echo "ok   eval: interrupted run resumed: the torn line dropped, 1 item predicted, predictions as uninterrupted"
        pass=$((pass + 1))
    else
        echo "FAIL eval: interrupted run resumed: exit $rc: $(cat "$tmp/err")"
        diff <(strip "$tmp/full/predictions.jsonl") <(strip "$tmp/cut/predictions.jsonl") | head -5
        fail=$((fail + 1))
    fi
    expect "eval: finished run again, without --resume" 1 \
        "predictions.jsonl already holds 3 predictions; pass --resume to continue that run" \
        eval_cmd "$tmp/m.jsonl" "$tmp/cut"
fi

finish test_bad_inputs
