#!/usr/bin/env bash
# test_quant_imx_bytes.sh: `g4cu quantize --imatrix`'s decoder bytes do not depend on the thread
# count, and its speed-ups kept them (issue 33, branch imxfast). On the tiny trained fixture
# (tests/fixtures/fidelity-tiny) and its calib.txt, each of three runs at --threads 1 and 3:
#   im64    --imatrix --calib-tokens 64: the default rule, every linear's directions read
#           against the sampling noise (g4_cov_dirs_shrunk, a few each);
#   im64r32 the same under G4_IMATRIX_RANK=32: 32 directions for every linear (1 + 32 terms a
#           block, what the proxy's linears take from 16,384 tokens: imx_err's last chunk of one);
#   gimx    --method gptq_imx --calib-tokens 256: GPTQ with the imatrix search's candidates
#           (kquant.h g4_imx_candidates, the same code).
# Checks per run: the two thread counts write the same decoder data (cmp), and its SHA-256 is the
# one recorded from the code BEFORE imxfast's changes (commit 639677f: the memo of each block's
# candidates, the sweeps' paired moves, the 4-wide last chunk and the dynamic tiles all claim the
# same bytes). A deliberate change of the search's output changes these sums: record the new
# ones then, with the KLD measured (bench/NOTES.md), not to make this test pass.
# 3 runs x 2 thread counts, ~20 s (RelWithDebInfo, an idle 2-core machine).
set -u
: "${G4CU:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
fx="$G4_FIXTURES/fidelity-tiny"
pkg="$fx/package"

# run NAME EXPECTED_SHA256 [ENV=V] -- ARGS...: quantize at 1 and 3 threads, compare
run() {
    local name=$1 want=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    local t
    for t in 1 3; do
        env "${envs[@]}" "$G4CU" quantize "$pkg" "$tmp/$name.t$t" --threads "$t" \
            --calib "$fx/calib.txt" "$@" >"$tmp/$name.t$t.txt" 2>&1
        check "$name, $t threads: exit 0" $?
    done
    local a="$tmp/$name.t1/decoder/model.onnx.data" b="$tmp/$name.t3/decoder/model.onnx.data"
    cmp -s "$a" "$b"
    check "$name: 1 and 3 threads write the same decoder bytes" $?
    local got
    got=$(sha256sum "$a" | cut -d' ' -f1)
    [ "$got" = "$want" ]
    local ok=$?
    [ $ok -ne 0 ] && echo "  $name: sha256 $got, recorded $want"
    check "$name: the decoder bytes of the code before imxfast" $ok
}

run im64 85879ec9ec05d7a4c94319638d973779d99e3eed5362650e3e1245149d44aa00 \
    -- --imatrix --calib-tokens 64
run im64r32 f31588039b60774bddf2b682aaa67817b6e2768939f7622ac119e350d235e14a G4_IMATRIX_RANK=32 \
    -- --imatrix --calib-tokens 64
run gimx 5aafd705107f36906d3583f1e8f59819b1a9083bfca8932397b2ed430c9d703a \
    -- --method gptq_imx --calib-tokens 256
# the runs did what they say: 32 directions for all 83 linears under G4_IMATRIX_RANK=32
grep -q "^imatrix: X^T X of 83 linears from 64 tokens .*, 32 covariance directions for 83, " \
    "$tmp/im64r32.t1.txt"
check "im64r32: 32 directions for each of the 83 linears" $?
finish test_quant_imx_bytes
