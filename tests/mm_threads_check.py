#!/usr/bin/env python3
"""Checks tools/python/train_mm_proxy.py's loader workers' native thread pools (issue 35: numpy's
OpenBLAS sizes its pool to the machine's cores when numpy is imported, and each forked
DataLoader worker kept that size: 14 workers x 16 threads on the H100 host's 16 cores), on the
CPU:
- openblas_pools finds numpy's OpenBLAS in this process, and its pool can be set (to 3 here,
  standing in for the GPU host's 16: what a worker inherits without the fix);
- a worker of forever() (the trainer's loader, 2 workers) reports, from inside, OpenBLAS at 1
  thread and OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS = 1, where a worker of
  the same loader with worker_init replaced by a no-op reports the parent's 3 and no env (so
  the check sees a regression that drops the fix);
- the trainer's audio batches (Items with --a-speed-perturb 0.1: make_mm_data.resample's
  products and the feature extractor's mel product, both OpenBLAS) are bit-identical whether
  rendered in this process with the pool at 3, by workers at 1 (the fix), or by workers at 3.
Prints one line per check and the count; exit 1 on the first failure."""
import hashlib
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                "python"))
import train_mm_proxy as tmp  # noqa: E402
from mm_items import Checks, ci_data  # noqa: E402

CHECKS = Checks("mm_threads_check")
fail, expect = CHECKS.fail, CHECKS.expect
PARENT_POOL = 3


def threads():
    """This process's thread count (the kernel's)."""
    with open("/proc/self/status") as f:
        return int(f.read().split("Threads:")[1].split()[0])


class Probe:
    """A dataset whose items say, from the process that renders them, how many OpenBLAS
    libraries it holds, the first one's pool size, its thread count after a product large
    enough for OpenBLAS to use its pool, and whether the three env vars read 1, as ids collate
    keeps (kind audio, one frame)."""

    def __init__(self, n):
        self.n = n
        r = np.random.default_rng(0)
        self.a, self.b = r.random((400, 257)), r.random((257, 128))  # (the mel product's size)

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        self.a @ self.b
        pools = [get() for _, get, _ in tmp.openblas_pools()]
        env = all(os.environ.get(v) == "1" for v in tmp.NATIVE_THREAD_VARS)
        return dict(kind="audio", feats=np.zeros((1, 128), np.float32), mask=np.ones(1, bool),
                    ids=[len(pools), pools[0] if pools else -1, threads(), int(env)], tgt=[1])


def probe_rows(batches=3):
    """forever(Probe) with 2 workers, batch 4: the rows of `batches` batches (lists of ints)."""
    s = tmp.forever(Probe(64), 4, 0, 2)
    rows = [r for _ in range(batches) for r in next(s)["input_ids"].tolist()]
    s.close()
    return rows


def audio_sha(ds, workers, batches=3):
    """sha256 of forever(ds)'s first `batches` batches of 4 (ids, labels, features, mask)."""
    h, n = hashlib.sha256(), 0
    s = tmp.forever(ds, 4, 1, workers)
    for _ in range(batches):
        b = next(s)
        for k in ("input_ids", "labels", "input_features", "input_features_mask"):
            h.update(b[k].numpy().tobytes())
        n += len(b["input_ids"])
    s.close()
    return h.hexdigest(), n


def main():
    pools = tmp.openblas_pools()
    expect(len(pools) >= 1, "openblas_pools: no OpenBLAS library found in this process (numpy "
           "imported): the workers' limit would set nothing")
    for _, get, put in pools:
        put(PARENT_POOL)
    sizes = [get() for _, get, _ in pools]
    expect(sizes == [PARENT_POOL] * len(pools), f"the parent's pools set to {PARENT_POOL}: {sizes}")
    print(f"mm_threads_check: {len(pools)} OpenBLAS pool(s) ({os.path.basename(pools[0][0])}), "
          f"the parent's at {PARENT_POOL}")

    fixed = probe_rows()
    expect(len(fixed) == 12, f"the probe loader: {len(fixed)} rows, expected 3 x 4")
    expect(all(r[0] == len(pools) and r[1] == 1 and r[3] == 1 for r in fixed),
           f"a worker with worker_init: rows (libraries, pool, threads, env=1) {fixed}: expected "
           f"{len(pools)} libraries, pool 1, env 1")
    keep = tmp.worker_init
    tmp.worker_init = lambda _worker_id: None  # (the regression: the fix dropped)
    try:
        bare = probe_rows()
    finally:
        tmp.worker_init = keep
    expect(all(r[1] == PARENT_POOL and r[3] == 0 for r in bare),
           f"a worker without worker_init: rows {bare}: expected pool {PARENT_POOL}, env not 1 "
           "(the check would not see the fix dropped)")
    print(f"mm_threads_check: a loader worker: OpenBLAS at 1 thread (without worker_init: "
          f"{PARENT_POOL}); its thread counts {sorted({r[2] for r in fixed})} (without: "
          f"{sorted({r[2] for r in bare})}; not checked: the queue's feeder and idle pool "
          "threads count too)")

    with tempfile.TemporaryDirectory() as d:
        data = ci_data(tmp, d, seconds=4)
        audio, _ = tmp.load_items(data)
        tr_a = [i for i in audio if i["split"] == "train"]
        for i in tr_a:  # the proxy's clips: silence before and after, noise at 10 dB
            i.pop("samples", None)
            i["snr_db"] = 10

        class Ids:  # (prompt ids: the clip's frame count, as Prompter's length depends on it)
            def prompt(self, kind, n):
                return [5] * n

            def target(self, text):
                return [6, 7]

        from transformers.models.gemma4.feature_extraction_gemma4 import \
            Gemma4AudioFeatureExtractor

        ds = tmp.Items(tr_a, "audio", data, [], Ids(), Gemma4AudioFeatureExtractor(), 4,
                       speed=0.1)
        expect(sum("speed" in tmp.rendering(tr_a, k, 0.1) for k in range(len(ds))) >= 16,
               "the audio items: fewer than 16 speed-perturbed renderings")
        here, n0 = audio_sha(ds, 0)
        with_fix, n1 = audio_sha(ds, 2)
        tmp.worker_init = lambda _worker_id: None
        try:
            without, n2 = audio_sha(ds, 2)
        finally:
            tmp.worker_init = keep
    expect(n0 == n1 == n2 == 12, f"audio rows {n0}, {n1}, {n2}: expected 3 x 4 each")
    expect(here == with_fix == without,
           f"audio batches: in this process (pool {PARENT_POOL}) {here[:16]}, workers at 1 "
           f"{with_fix[:16]}, workers at {PARENT_POOL} {without[:16]}: expected one sha256")
    print(f"mm_threads_check: 3 audio batches (speed perturbed) sha256 {here[:16]} in this "
          f"process, in workers at 1 thread and at {PARENT_POOL}")
    print(f"mm_threads_check: {CHECKS.n} checks passed")


if __name__ == "__main__":
    main()
