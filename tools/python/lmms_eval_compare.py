"""lmms_eval_compare.py: lmms-eval's run against `g4cu serve` next to `g4cu eval`'s run of the
same manifest (tools/lmms_eval_check.sh makes both). Standard library only.

    lmms_eval_compare.py --task ocr|asr --manifest M.jsonl --lmms-dir DIR --eval-dir DIR
                         --serve-log serve.log --lmms-log lmms.log --expect-requests N

Checks, each printed as "ok ..." or "FAIL ...":
  - every manifest item has one logged lmms-eval sample (doc_id = the item's line) and one
    `g4cu eval` prediction, and the two texts are identical, byte for byte (greedy decoding:
    the same prompt gives the same tokens on both routes);
  - no sample holds lmms-eval's failure text ("[LMMS_EVAL_REQUEST_FAILED ...") and its log has
    no failed attempt ("Attempt N/5 failed"): a refused request is retried, then scored as the
    answer, and lmms-eval still exits 0;
  - the server logged exactly N chat requests (the items of both tasks: no retry happened), all
    200;
  - the scores: WER equal to `g4cu eval`'s (both are 100 * edits / reference words over the same
    texts, so equal to the last digit printed: relative 1e-12 covers the decimal printing); for
    OCRBench, lmms-eval's per-item score equal to `g4cu eval`'s, and its aggregate (its sum over
    1000, the benchmark's size: ocrbench_aggregate_accuracy) equal to g4cu's raw score / 1000.
Exit 0 when every check passed, 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import sys

FAILED_TEXT = "[LMMS_EVAL_REQUEST_FAILED"
REL_TOL = 1e-12  # decimal printing of the same double on both sides


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", choices=["ocr", "asr"], required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--lmms-dir", required=True)
    ap.add_argument("--eval-dir", required=True)
    ap.add_argument("--serve-log")
    ap.add_argument("--lmms-log")
    ap.add_argument("--expect-requests", type=int)
    a = ap.parse_args()
    fails = 0

    def check(ok, what):
        nonlocal fails
        print(("ok   " if ok else "FAIL ") + what)
        fails += not ok

    task = {"ocr": "g4cu_ocr_local", "asr": "g4cu_asr_local"}[a.task]
    items = [json.loads(line) for line in open(a.manifest, encoding="utf-8") if line.strip()]
    samples_files = sorted(glob.glob(os.path.join(a.lmms_dir, "*", f"*_samples_{task}.jsonl")))
    results_files = sorted(glob.glob(os.path.join(a.lmms_dir, "*", "*_results.json")))
    if len(samples_files) != 1 or len(results_files) != 1:
        check(False, f"{task}: expected one samples file and one results file under {a.lmms_dir}, "
                     f"found {samples_files} {results_files}")
        return 1
    samples = {}
    for line in open(samples_files[0], encoding="utf-8"):
        s = json.loads(line)
        samples[s["doc_id"]] = s
    preds = {}
    for line in open(os.path.join(a.eval_dir, "predictions.jsonl"), encoding="utf-8"):
        p = json.loads(line)
        preds[p["id"]] = p
    scores = json.load(open(os.path.join(a.eval_dir, "scores.json"), encoding="utf-8"))
    results = json.load(open(results_files[0], encoding="utf-8"))["results"][task]

    # the predictions, item by item
    same = 0
    for k, it in enumerate(items):
        s, p = samples.get(k), preds.get(it["id"])
        if s is None or p is None:
            check(False, f"{task} item {k} ('{it['id']}'): lmms-eval sample {s is not None}, "
                         f"g4cu eval prediction {p is not None}")
            continue
        # "resps" is the raw reply; lmms-eval leaves it out where it equals filtered_resps
        raw = s.get("resps", s["filtered_resps"])
        raw = raw[0] if isinstance(raw, list) else raw
        if raw.startswith(FAILED_TEXT):
            check(False, f"{task} item {k} ('{it['id']}'): the request failed: {raw[:200]}")
        elif "error" in p:
            check(False, f"{task} item {k} ('{it['id']}'): g4cu eval failed: {p['error']}")
        elif raw != p["prediction"]:
            check(False, f"{task} item {k} ('{it['id']}'): serve {raw!r} != eval {p['prediction']!r}")
        else:
            same += 1
    check(same == len(items) and len(samples) == len(items),
          f"{task}: {same} of {len(items)} predictions identical ({len(samples)} samples logged)")

    # the scores
    if a.task == "asr":
        lm, ev = results["wer,none"], scores["value"]
        check(abs(lm - ev) <= REL_TOL * abs(ev), f"{task}: WER lmms-eval {lm!r} = g4cu eval {ev!r}")
    else:
        ev_items = {x["id"]: x["score"] for x in scores["items"]}
        diff = [it["id"] for k, it in enumerate(items)
                if k in samples and samples[k]["ocrbench_accuracy"]["score"] != ev_items.get(it["id"])]
        check(not diff, f"{task}: per-item OCRBench scores equal (differ: {diff})")
        lm, raw = results["ocrbench_accuracy,none"], scores["scores"]["ocrbench_raw_score"]
        check(abs(lm - raw / 1000) <= REL_TOL, f"{task}: ocrbench_accuracy lmms-eval {lm!r} = g4cu "
                                               f"raw score {raw!r} / 1000 (g4cu's mean {scores['value']!r})")

    # no request failed or was retried
    if a.lmms_log:
        log = open(a.lmms_log, encoding="utf-8", errors="replace").read()
        attempts = len(re.findall(r"Attempt \d+/\d+ failed", log))
        check(attempts == 0 and FAILED_TEXT not in log, f"lmms-eval log: {attempts} failed attempts")
    if a.serve_log and a.expect_requests is not None:
        lines = [ln for ln in open(a.serve_log, encoding="utf-8", errors="replace")
                 if " POST /v1/chat/completions " in ln]
        bad = [ln.strip() for ln in lines if " POST /v1/chat/completions 200 " not in ln]
        check(len(lines) == a.expect_requests and not bad,
              f"serve log: {len(lines)} chat requests (expected {a.expect_requests}), "
              f"{len(bad)} not 200 {bad[:3]}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
