#!/usr/bin/env bash
# test_layering.sh: no #include runs from a lower layer to a higher one. The layers, lowest
# first (README.md "Layout"; CMake links them in this order, with no rescan):
#   base < loader < quant < kernels < engine < {fidelity, eval} < api < tools
# (api/: the public C API, whose developer and measuring parts, include/g4cu_dev.h and
# include/g4cu_eval.h, run fidelity/ and eval/)
# A file may include its own folder and the folders below it; fidelity/ and eval/ include
# neither each other; inside kernels/, only kernels/bench/ includes kernels/bench/, and the CPU
# references (kernels/ref/) include nothing of kernels/ but kernels/ref/. tests/ may include
# anything. Checked on every "folder/file" include of the C, CUDA and header files; first it
# checks itself on a small tree with one planted upward include, which must be found.
set -u
src=${G4_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

rank() {
    case $1 in
    base) echo 0 ;; loader) echo 1 ;; quant) echo 2 ;; kernels) echo 3 ;; engine) echo 4 ;;
    fidelity | eval) echo 5 ;; api) echo 6 ;; tools) echo 7 ;; *) echo -1 ;;
    esac
}

# check ROOT: prints one line per upward include under ROOT; returns 1 when any.
check() {
    local root=$1 bad=0 file line inc from to rf rt
    while IFS=: read -r file line inc; do
        from=${file#"$root"/}
        inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$inc")
        [[ $inc == */* ]] || continue # generated headers (onnx.pb-c.h) and system-style names
        to=${inc%%/*}
        rf=$(rank "${from%%/*}")
        rt=$(rank "$to")
        local why=""
        if [ "$rt" -lt 0 ]; then
            why="includes a folder outside the layers"
        elif [ "$rt" -gt "$rf" ]; then
            why="includes a higher layer"
        elif [ "$rt" -eq "$rf" ] && [ "$to" != "${from%%/*}" ]; then
            why="fidelity/ and eval/ must not include each other"
        elif [[ $inc == kernels/bench/* && $from != kernels/bench/* && ${from%%/*} == kernels ]]; then
            why="kernel code includes a bench"
        elif [[ $from == kernels/ref/* && $inc == kernels/* && $inc != kernels/ref/* ]]; then
            why="a CPU reference includes kernel code"
        fi
        if [ -n "$why" ]; then
            echo "FAIL test_layering: $from:$line: #include \"$inc\": $why"
            bad=1
        fi
    done < <(cd "$root" && grep -rnE --include='*.c' --include='*.h' --include='*.cu' \
        --include='*.cuh' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' \
    api base loader quant kernels engine fidelity eval tools 2>/dev/null | sed "s|^|$root/|")
    return $bad
}

# Self-check: a tree with allowed includes and one planted violation per rule.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{base,loader,quant,kernels/ref,kernels/bench,engine,fidelity,eval,api,tools}
printf '#include "base/base.h"\n#include "onnx.pb-c.h"\n' >"$tmp/loader/ok.c"
printf '#include "kernels/ops.h"\n#include "engine/x.h"\n' >"$tmp/tools/ok.c"
printf '#include "kernels/bench/kbench.h"\n' >"$tmp/kernels/bench/ok.cu"
printf '#include "engine/text_model.h"\n' >"$tmp/quant/up.c"
printf '#include "eval/metrics.h"\n' >"$tmp/fidelity/side.c"
printf '#include "kernels/bench/kbench.h"\n' >"$tmp/kernels/k.cu"
printf '#include "kernels/ops.h"\n' >"$tmp/kernels/ref/r.c"
printf '#include "serve/x.h"\n' >"$tmp/engine/out.c"
printf '#include "fidelity/ppl.h"\n#include "eval/runner.h"\n' >"$tmp/api/ok.c"
printf '#include "api/api_internal.h"\n' >"$tmp/eval/up.c"
got=$(check "$tmp")
n=$(grep -c '^FAIL' <<<"$got")
if [ "$n" -ne 6 ] || grep -q 'ok\.c\|ok\.cu' <<<"$got"; then
    echo "FAIL test_layering: the self-check found $n of the 6 planted violations:"
    echo "$got"
    exit 1
fi

if check "$src"; then
    n=$(cd "$src" && grep -rhE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
        '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]+/' \
        api base loader quant kernels engine fidelity eval tools | wc -l)
    echo "test_layering: $n includes checked, none runs upward (self-check: 6 of 6 planted found)"
    exit 0
fi
exit 1
