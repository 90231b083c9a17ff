# compare_json.sh: reads `g4cu compare --json F` reports (fidelity/report_json.c, as cJSON
# prints them: one "key":<tab>value per line) for the shell tests, instead of scraping the text
# table. Sourced by tests/test_text_vs_hf.sh and test_towers_vs_hf.sh.

# cj_rows FILE: one line per tensor: "NAME PASS TOLERANCE ARGMAX_AGREE ARGMAX_ROWS" (the argmax
# fields are - where the tensor has none).
cj_rows() {
    awk -F'\t' '
        function val(s) { gsub(/[",]/, "", s); return s }
        function flush() { if (name != "") print name, pass, tol, agree, rows; name = "" }
        /^\t\t\t"name":/ { flush(); name = val($NF); pass = "false"; tol = "-"; agree = "-"; rows = "-" }
        /^\t\t\t"tolerance":/ { tol = val($NF) }
        /^\t\t\t"argmax_agree":/ { agree = val($NF) }
        /^\t\t\t"argmax_rows":/ { rows = val($NF) }
        /^\t\t\t"pass":/ { pass = val($NF) }
        END { flush() }' "$1"
}
# cj_total FILE: how many tensors were compared.
cj_total() { cj_rows "$1" | wc -l; }
# cj_ok FILE [TOLERANCE]: how many passed (under that named tolerance, when given).
cj_ok() { cj_rows "$1" | awk -v t="${2:-}" '$2 == "true" && (t == "" || $3 == t)' | wc -l; }
# cj_pass FILE NAME: status 0 when tensor NAME was compared and passed.
cj_pass() { cj_rows "$1" | awk -v n="$2" '$1 == n && $2 == "true" { found = 1 } END { exit !found }'; }
# cj_argmax FILE: "AGREE/ROWS" of the logits' argmax, empty when the report has none.
cj_argmax() { cj_rows "$1" | awk '$1 == "logits" && $4 != "-" { print $4 "/" $5 }'; }
