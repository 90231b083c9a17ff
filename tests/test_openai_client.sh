#!/usr/bin/env bash
# test_openai_client.sh: the official `openai` Python client (PyPI, pinned in
# tools/python/requirements-openai.txt) against `g4cu serve` on the tiny fixture:
# tools/python/openai_client_check.py starts the server on a free port (--port 0) and checks
# chat (plain and streamed), an image (data: URL), audio (input_audio) and a transcription
# against HF's texts, the model list, a BadRequestError and exit 0 after SIGTERM.
# Then tools/python/clients_sampling_check.py: the sampling fields through the same client.
# The interpreter: $G4_OPENAI_PYTHON, else the venv tools/install_deps.sh makes
# (.tools/openai-venv). Without it, or without its modules, the test skips (77) saying why;
# under CI=true (.ci/run, after install_deps.sh) that is a failure: CI must run the client.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_OPENAI_PYTHON:-$G4_SOURCE_DIR/.tools/openai-venv/bin/python}
missing() {
    if [ "${CI:-}" = true ]; then
        echo "test_openai_client: FAIL: $1 (tools/install_deps.sh makes it; CI must run this)" >&2
        exit 1
    fi
    echo "test_openai_client: skipped: $1 (run tools/install_deps.sh)"
    exit 77
}
[ -x "$py" ] || missing "no Python at $py"
"$py" -c 'import openai, tokenizers' 2>/dev/null || missing "$py has no openai or tokenizers module"
if "$G4CU" serve 2>&1 | grep -q 'without libmicrohttpd'; then
    missing "g4cu was built without libmicrohttpd"
fi
out=$("$py" "$G4_SOURCE_DIR/tools/python/openai_client_check.py" --g4cu "$G4CU" 2>&1)
rc=$?
echo "$out"
echo "openai $("$py" -c 'import openai; print(openai.__version__)')"
# The summary line must be there too: a script that died before its checks exits non-zero,
# and one that skipped a check would count fewer than its 9.
if [ $rc -ne 0 ] || ! grep -Eq '^openai client: 9 checks, 0 failed' <<<"$out"; then
    echo "test_openai_client: FAIL (exit $rc)" >&2
    exit 1
fi
# The sampling fields through the same client (tools/python/clients_sampling_check.py: logprobs
# plain and streamed, json_schema / json_object, n, logit_bias, tools, the 400s).
out=$("$py" "$G4_SOURCE_DIR/tools/python/clients_sampling_check.py" --g4cu "$G4CU" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! grep -Eq '^clients sampling: 10 checks, 0 failed' <<<"$out"; then
    echo "test_openai_client: sampling FAIL (exit $rc)" >&2
    exit 1
fi
echo "test_openai_client: ok"
