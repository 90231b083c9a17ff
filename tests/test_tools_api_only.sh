#!/usr/bin/env bash
# test_tools_api_only.sh: the g4cu command runs on the public C API (include/g4cu.h, issue 20):
# a tools/ file may include <g4cu.h>, base/ (utilities, not the engine), other tools/ headers
# that keep the rule, the build's generated headers (version.h, commands.inc) and system
# headers; not engine/, loader/, quant/, kernels/, fidelity/, eval/ nor api/. A file that
# includes a tools/ header breaking the rule breaks it too (followed to a fixed point).
# The files that do not keep it yet are listed below, by name; the list only shrinks: a file
# that breaks the rule and is not listed fails, and so does a listed file that keeps the rule
# now (take it off the list) or no longer exists. First the check runs on a small planted tree,
# where an indirect and a direct offender must be found and a clean file must not.
set -u
src=${G4_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

# Not on the API yet (README.md "The C API" says which commands are).
allowed=(
)

# offenders ROOT: prints the tools/ files under ROOT that break the rule, sorted.
offenders() {
    local root=$1 f inc changed
    declare -A bad=()
    local files=()
    for f in "$root"/tools/*.c "$root"/tools/*.h; do [ -e "$f" ] && files+=("${f#"$root"/}"); done
    # Direct: an include of an internal folder, "folder/x.h" or <folder/x.h>.
    for f in "${files[@]}"; do
        if grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<](engine|loader|quant|kernels|fidelity|eval|api)/' \
            "$root/$f"; then
            bad[$f]=1
        fi
    done
    # Indirect: a tools/ header that breaks it, to a fixed point.
    changed=1
    while [ $changed -eq 1 ]; do
        changed=0
        for f in "${files[@]}"; do
            [ -n "${bad[$f]:-}" ] && continue
            while read -r inc; do
                if [ -n "${bad[$inc]:-}" ]; then
                    bad[$f]=1
                    changed=1
                    break
                fi
            done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"(tools\/[^"]*)".*/\1/p' \
                "$root/$f")
        done
    done
    for f in "${!bad[@]}"; do echo "$f"; done | sort
}

fail=0
# Self-check: a.c includes b.h, which includes engine/; c.c includes <kernels/...>; d.c only
# <g4cu.h>, base/ and a clean tools/ header.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools"
printf '#include "tools/b.h"\n' >"$tmp/tools/a.c"
printf '#include <stdio.h>\n  #  include "engine/pipeline.h"\n' >"$tmp/tools/b.h"
printf '#include <kernels/backend.h>\n' >"$tmp/tools/c.c"
printf '#include <g4cu.h>\n#include "base/base.h"\n#include "tools/e.h"\n' >"$tmp/tools/d.c"
printf '#include "base/base.h"\n' >"$tmp/tools/e.h"
got=$(offenders "$tmp" | tr '\n' ' ')
if [ "$got" != "tools/a.c tools/b.h tools/c.c " ]; then
    echo "FAIL self-check: found '$got', expected 'tools/a.c tools/b.h tools/c.c '"
    fail=1
fi

found=$(offenders "$src")
for f in $found; do
    if ! printf '%s\n' "${allowed[@]}" | grep -qxF "$f"; then
        echo "FAIL $f includes an engine header (directly or through a tools/ header): use" \
            "include/g4cu.h (extend it if it lacks something)"
        grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<](engine|loader|quant|kernels|fidelity|eval|api|tools)/' \
            "$src/$f" | sed 's/^/    /'
        fail=1
    fi
done
for f in "${allowed[@]}"; do
    if [ ! -e "$src/$f" ]; then
        echo "FAIL $f is on the allow-list but does not exist: take it off"
        fail=1
    elif ! grep -qxF "$f" <<<"$found"; then
        echo "FAIL $f is on the allow-list but keeps the rule now: take it off"
        fail=1
    fi
done
n_tools=$(ls "$src"/tools/*.c "$src"/tools/*.h | wc -l)
echo "test_tools_api_only: $((n_tools - ${#allowed[@]})) of $n_tools tools/ files on the C API only," \
    "${#allowed[@]} allowed"
[ $fail -eq 0 ] && echo "test_tools_api_only: ok"
exit $fail
