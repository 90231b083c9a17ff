#!/usr/bin/env bash
# carry_size.sh PATH...: what a device call with `carry` PATH... sends, against the device tool's
# 64 MiB (the tracked tree and the untracked, not ignored files travel too: a call over it is
# refused before it runs, and a refused chained call loses the warm machine; sixteenth session).
# Exit 1 when the total passes LIMIT_MIB (default 62: a margin for the call's own writes).
# Example: tools/gpu/carry_size.sh .debs .whl .carry/corpus
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=${LIMIT_MIB:-62}
tracked=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s + 0}')
untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r stat -c %s | awk '{s += $1} END {print s + 0}')
{
    echo "$tracked tracked files"
    echo "$untracked untracked, not ignored files"
    for p in "$@"; do
        [ -e "$p" ] || { echo "carry_size: $p: no such path" >&2; exit 1; }
        echo "$(du -sb "$p" | cut -f1) $p"
    done
} | awk -v lim="$limit" '{printf "%6.2f MiB %s\n", $1 / 1048576, substr($0, index($0, " ") + 1); s += $1}
    END {printf "%6.2f MiB in all (limit %d of the device tool'"'"'s 64)\n", s / 1048576, lim;
         exit s / 1048576 > lim}'
