#!/usr/bin/env bash
# test_clients.sh: three clients no one here wrote, the official `openai` package, `litellm` and
# `langchain-openai` (PyPI, pinned in tools/python/requirements-openai.txt), against `g4cu serve`
# on the tiny fixture: tools/python/clients_check.py runs a multi-turn chat (plain and streamed),
# logprobs with top_logprobs, response_format json_schema (langchain: with_structured_output),
# an image and audio through each. The interpreter: $G4_OPENAI_PYTHON, else the venv
# tools/install_deps.sh makes (.tools/openai-venv). Without it or its modules the test skips (77)
# saying why; under CI=true (.ci/run, after install_deps.sh) that is a failure.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_OPENAI_PYTHON:-$G4_SOURCE_DIR/.tools/openai-venv/bin/python}
missing() {
    if [ "${CI:-}" = true ]; then
        echo "test_clients: FAIL: $1 (tools/install_deps.sh makes it; CI must run this)" >&2
        exit 1
    fi
    echo "test_clients: skipped: $1 (run tools/install_deps.sh)"
    exit 77
}
[ -x "$py" ] || missing "no Python at $py"
"$py" -c 'import openai, litellm, langchain_openai, tokenizers' 2>/dev/null ||
    missing "$py lacks openai, litellm, langchain_openai or tokenizers"
if "$G4CU" serve 2>&1 | grep -q 'without libmicrohttpd'; then
    missing "g4cu was built without libmicrohttpd"
fi
out=$("$py" "$G4_SOURCE_DIR/tools/python/clients_check.py" --g4cu "$G4CU" 2>&1)
rc=$?
echo "$out"
# 3 clients x 6 checks (multi-turn, streamed, image, audio, logprobs, json_schema) + the exit: a
# script that died early or skipped a check counts fewer
if [ $rc -ne 0 ] || ! grep -Eq '^clients: 19 checks, 0 failed' <<<"$out"; then
    echo "test_clients: FAIL (exit $rc)" >&2
    exit 1
fi
echo "test_clients: ok"
