#!/usr/bin/env bash
# test_clients_sampling.sh: the official `openai` Python client against `g4cu serve`'s sampling
# fields on the tiny fixture (tools/python/clients_sampling_check.py: logprobs plain and
# streamed, json_schema / json_object, n, logit_bias, tools, the 400s). The interpreter and the skip
# rules are test_openai_client.sh's: $G4_OPENAI_PYTHON, else .tools/openai-venv; without it a
# skip (77), a failure under CI=true.
set -u
: "${G4CU:?run through ctest}" "${G4_SOURCE_DIR:?run through ctest}"
py=${G4_OPENAI_PYTHON:-$G4_SOURCE_DIR/.tools/openai-venv/bin/python}
missing() {
    if [ "${CI:-}" = true ]; then
        echo "test_clients_sampling: FAIL: $1 (tools/install_deps.sh makes it; CI must run this)" >&2
        exit 1
    fi
    echo "test_clients_sampling: skipped: $1 (run tools/install_deps.sh)"
    exit 77
}
[ -x "$py" ] || missing "no Python at $py"
"$py" -c 'import openai' 2>/dev/null || missing "$py has no openai module"
if "$G4CU" serve 2>&1 | grep -q 'without libmicrohttpd'; then
    missing "g4cu was built without libmicrohttpd"
fi
out=$("$py" "$G4_SOURCE_DIR/tools/python/clients_sampling_check.py" --g4cu "$G4CU" 2>&1)
rc=$?
echo "$out"
# the summary must be there with every check counted (a script that stopped early counts fewer)
if [ $rc -ne 0 ] || ! grep -Eq '^clients sampling: 10 checks, 0 failed' <<<"$out"; then
    echo "test_clients_sampling: FAIL (exit $rc)" >&2
    exit 1
fi
echo "test_clients_sampling: ok"
