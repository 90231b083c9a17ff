#!/usr/bin/env bash
# lmms_eval_venv.sh: makes the venv .tools/lmms-venv (ignored) with lmms-eval 0.7.3 and the
# packages pinned by tools/python/requirements-lmms.txt, each installed with --no-deps (that file
# says why), from PyPI with Debian's python3 (python3-venv). Made again only when that file
# changes (its hash in the venv). ~6 GB (torch and its CUDA libraries: PyPI has no CPU-only
# torch), so it is not part of tools/install_deps.sh; tools/lmms_eval_check.sh uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${G4_LMMS_VENV:-.tools/lmms-venv}
req=tools/python/requirements-lmms.txt
req_sha=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" = "$req_sha" ]; then
    echo "lmms_eval_venv: $venv up to date"
    exit 0
fi
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$req"
"$venv/bin/python" -c 'import torch, lmms_eval.evaluator' # everything the check imports is there
echo "$req_sha" >"$venv/.requirements.sha256"
echo "lmms_eval_venv: $venv: lmms-eval $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lmms_eval"))')"
