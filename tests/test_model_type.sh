#!/usr/bin/env bash
# test_model_type.sh: genai_config.json's model.type. The mobius exporter writes "gemma4_text"
# (the shipped fixture); onnxruntime-genai 0.18 runs a package with an embedding component only
# as "gemma4", which tools/python/export_package.py writes. g4cu reads both as the same model
# and refuses any other type with one line naming the file and the value.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"

grep -q '"type": "gemma4_text"' "$G4_TINY_PKG/genai_config.json"
check "the fixture is the exporter's gemma4_text" $?
"$G4CU" inspect "$G4_TINY_PKG" --summary >"$tmp/a.txt" 2>&1
check "gemma4_text: inspect exit 0" $?

# The same files with model.type "gemma4" (data files linked, not copied: read-only use).
mk() { # mk DIR TYPE
    mkdir -p "$1"
    for c in decoder embedding vision_encoder audio_encoder; do ln -s "$G4_TINY_PKG/$c" "$1/$c"; done
    cp "$G4_TINY_PKG"/*_*.json "$1/" 2>/dev/null
    sed "s/\"type\": \"gemma4_text\"/\"type\": \"$2\"/" "$G4_TINY_PKG/genai_config.json" >"$1/genai_config.json"
}
mk "$tmp/g4" gemma4
"$G4CU" inspect "$tmp/g4" --summary >"$tmp/b.txt" 2>&1
check "gemma4: inspect exit 0" $?
grep -q "model type 'gemma4'" "$tmp/b.txt"
check "gemma4: inspect names the type" $?
"$G4CU" logits "$G4_TINY_PKG" --ids 2,5,17 --out "$tmp/a.npy" >/dev/null 2>&1 &&
    "$G4CU" logits "$tmp/g4" --ids 2,5,17 --out "$tmp/b.npy" >/dev/null 2>&1 && cmp -s "$tmp/a.npy" "$tmp/b.npy"
check "gemma4 and gemma4_text give the same logits" $?

mk "$tmp/llama" llama
err1 "another model.type is refused" "genai_config.json: model.type is 'llama'; expected 'gemma4' or 'gemma4_text'" \
    "$G4CU" inspect "$tmp/llama"
finish test_model_type
