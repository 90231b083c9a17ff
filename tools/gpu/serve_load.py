#!/usr/bin/env python3
"""Load test of a running `g4cu serve` (the GPU stage `serve` of tools/gpu/run.sh; Python's
standard library only): REQUESTS requests from CLIENTS concurrent clients on 127.0.0.1, every
MALFORMED_EVERY-th one malformed (bad JSON, wrong content type, a bad field) or cut off mid-body;
every STREAM_EVERY-th well-formed one streamed (server-sent events). --clients 32 is the
issue-31 load (32 concurrent streams against `serve --parallel 32`); --greedy and
--prompt-words make its greedy, ~128-token prompts. Prints one summary line:

  serve load: N requests (G well-formed, B malformed) from C clients in S s: F failed, M
  mis-answered; R req/s, T completion tok/s; latency p50 X s p99 Y s; streamed TTFT p50 Z s

then the batch size over the run, from the server's /metrics (sampled every --metrics-every s
while the load runs, and the g4cu_batch_size histogram's change over the run):

  serve batch: mean B rows a decode step over K steps; running slots sampled p50 X max Y; steps
  by rows: <=1 a, <=2 b, ...

then where the scheduler's rounds went over the run (the change of /metrics'
g4cu_batch_seconds_total by phase; the rest of the wall time is the scheduler waiting for work):

  serve rounds: K rounds, S steps in W s: prefill P s in own forwards (C chunks, T tokens in
  all), decode D s (X ms a step), accept A s, submit U s, sched Y s; idle Z s

(prefill seconds are the prompt chunks run in forwards of their own: with prompts as rows of
the decode step, the server's default, only media prompts'; the other prompts' time is in
decode. The chunks and tokens count every prompt's, rows or own forward: engine/batch.h)

and writes --json with the same numbers (batch_size_mean, batch_steps, batch_running_samples,
batch_size_buckets, rounds, round_seconds {phase: s}, prefill_chunks, prefill_tokens). Exit 1 when any well-formed request failed or any malformed one was not
answered 4xx (a cut-off body expects no answer)."""
import argparse
import http.client
import json
import socket
import statistics
import sys
import threading
import time


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def one(port, body, ctype="application/json", stream=False, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": ctype})
    r = c.getresponse()
    ttft = None
    tokens = 0
    if stream and r.status == 200:
        text = []
        for line in r:
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            ch = ev["choices"][0]
            if ch["delta"].get("content"):
                if ttft is None:
                    ttft = time.monotonic() - t0
                text.append(ch["delta"]["content"])
            if "usage" in ev:
                tokens = ev["usage"]["completion_tokens"]
        payload = None
    else:
        payload = r.read()
        if r.status == 200:
            tokens = json.loads(payload)["usage"]["completion_tokens"]
    c.close()
    return r.status, time.monotonic() - t0, ttft, tokens, payload


def metrics(port):
    """The server's /metrics as {name (with its labels): value} (None when unreachable)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        c.close()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and " " in line:
            k, v = line.rsplit(" ", 1)
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def batch_buckets(m):
    """The g4cu_batch_size histogram's cumulative buckets {le: count} of a metrics dict."""
    pre = 'g4cu_batch_size_bucket{le="'
    return {k[len(pre):-2]: v for k, v in m.items() if k.startswith(pre)}


def cut_off(port, body):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 3])
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", "--concurrency", type=int, default=16,
                    help="concurrent clients (32: the issue-31 load against --parallel 32)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--greedy", action="store_true", help="temperature 0 (default: 0.8, seed 7)")
    ap.add_argument("--prompt-words", type=int, default=0,
                    help="a prompt of about this many words (0: one short sentence)")
    ap.add_argument("--metrics-every", type=float, default=0.25,
                    help="seconds between /metrics samples of the batch size (0: none)")
    ap.add_argument("--malformed-every", type=int, default=10)
    ap.add_argument("--stream-every", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    prompt = "Describe the weather in a few words."
    if a.prompt_words > 0:
        words = ("the quick brown fox jumps over a lazy dog while rain falls on the old town "
                 "and wind moves the trees").split()
        prompt = " ".join(words[i % len(words)] for i in range(a.prompt_words)) + ". " + prompt
    req = {"messages": [{"role": "user", "content": prompt}], "max_tokens": a.max_tokens}
    if not a.greedy:
        req.update(temperature=0.8, seed=7)
    good = json.dumps(req).encode()
    good_stream = json.dumps(dict(req, stream=True)).encode()
    lock = threading.Lock()
    st = {"lat": [], "ttft": [], "tokens": 0, "failed": [], "mis": [], "good": 0, "bad": 0}
    nxt = [0]

    def client():
        while True:
            with lock:
                k = nxt[0]
                nxt[0] += 1
            if k >= a.requests:
                return
            try:
                if a.malformed_every and k % a.malformed_every == a.malformed_every - 1:
                    with lock:
                        st["bad"] += 1
                    kind = (k // a.malformed_every) % 4
                    if kind == 3:
                        cut_off(a.port, good)
                        continue
                    body, ctype, want = [(b'{"messages": [', "application/json", 400),
                                         (good, "text/plain", 415),
                                         (b'{"messages": [], "max_tokens": -1}', "application/json", 400)][kind]
                    status, _, _, _, payload = one(a.port, body, ctype)
                    ok = status == want and "error" in json.loads(payload)
                    if not ok:
                        with lock:
                            st["mis"].append(f"request {k}: {status} (want {want})")
                    continue
                with lock:
                    st["good"] += 1
                stream = a.stream_every and k % a.stream_every == 0
                status, dt, ttft, tokens, payload = one(a.port, good_stream if stream else good,
                                                        stream=stream)
                with lock:
                    if status != 200:
                        st["failed"].append(f"request {k}: {status} {payload[:200] if payload else ''}")
                    else:
                        st["lat"].append(dt)
                        st["tokens"] += tokens
                        if ttft is not None:
                            st["ttft"].append(ttft)
            except Exception as e:  # a failed well-formed request (or a crash of the server)
                with lock:
                    st["failed"].append(f"request {k}: {e!r}")

    m0 = metrics(a.port) or {}
    samples = []  # (g4cu_batch_running, g4cu_batch_decoding) while the load runs
    stop = threading.Event()

    def sampler():
        while not stop.wait(a.metrics_every):
            m = metrics(a.port)
            if m and "g4cu_batch_running" in m:
                samples.append((m["g4cu_batch_running"], m.get("g4cu_batch_decoding", 0)))

    sth = threading.Thread(target=sampler, daemon=True) if a.metrics_every > 0 else None
    t0 = time.monotonic()
    th = [threading.Thread(target=client) for _ in range(a.clients)]
    if sth:
        sth.start()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    if sth:
        sth.join()
    m1 = metrics(a.port) or {}
    steps = m1.get("g4cu_batch_size_count", 0) - m0.get("g4cu_batch_size_count", 0)
    rows = m1.get("g4cu_batch_size_sum", 0) - m0.get("g4cu_batch_size_sum", 0)
    b0, b1 = batch_buckets(m0), batch_buckets(m1)
    buckets = {le: b1[le] - b0.get(le, 0) for le in b1}
    phases = ("prefill", "decode", "accept", "submit", "sched")

    def delta(name):
        return m1.get(name, 0) - m0.get(name, 0) if name in m1 else None

    split = {p: delta(f'g4cu_batch_seconds_total{{phase="{p}"}}') for p in phases}
    rounds = delta("g4cu_batch_rounds_total")
    res = {"requests": a.requests, "well_formed": st["good"], "malformed": st["bad"],
           "clients": a.clients, "max_tokens": a.max_tokens, "seconds": wall,
           "failed": len(st["failed"]), "mis_answered": len(st["mis"]),
           "req_per_s": len(st["lat"]) / wall, "completion_tok_per_s": st["tokens"] / wall,
           "latency_p50_s": pct(st["lat"], 0.5), "latency_p99_s": pct(st["lat"], 0.99),
           "ttft_p50_s": pct(st["ttft"], 0.5), "ttft_p99_s": pct(st["ttft"], 0.99),
           "batch_steps": steps, "batch_size_mean": rows / steps if steps else float("nan"),
           "batch_size_buckets": buckets,
           "batch_running_samples": [r for r, _ in samples],
           "batch_decoding_samples": [d for _, d in samples],
           "rounds": rounds, "round_seconds": split,
           "prefill_chunks": delta("g4cu_batch_prefill_chunks_total"),
           "prefill_tokens": delta("g4cu_batch_prefill_tokens_total")}
    print(f"serve load: {a.requests} requests ({st['good']} well-formed, {st['bad']} malformed) from "
          f"{a.clients} clients in {wall:.1f} s: {res['failed']} failed, {res['mis_answered']} "
          f"mis-answered; {res['req_per_s']:.2f} req/s, {res['completion_tok_per_s']:.1f} completion "
          f"tok/s; latency p50 {res['latency_p50_s']:.3f} s p99 {res['latency_p99_s']:.3f} s; "
          f"streamed TTFT p50 {res['ttft_p50_s']:.3f} s")
    run = [r for r, _ in samples]
    prev, by_rows = 0, []
    for le, v in buckets.items():  # cumulative counts -> steps in each bucket
        by_rows.append(f"<={le} {int(v - prev)}")
        prev = v
    print(f"serve batch: mean {res['batch_size_mean']:.2f} rows a decode step over {int(steps)} steps; "
          f"running slots sampled p50 {pct(run, 0.5):.0f} max {max(run) if run else float('nan'):.0f} "
          f"({len(run)} samples); steps by rows: {', '.join(by_rows) if by_rows else 'none'}")
    if rounds is not None and None not in split.values():  # (a server without the split: none)
        busy = sum(split.values())
        print(f"serve rounds: {int(rounds)} rounds, {int(steps)} steps in {wall:.2f} s: prefill "
              f"{split['prefill']:.3f} s in own forwards ({int(res['prefill_chunks'] or 0)} chunks, "
              f"{int(res['prefill_tokens'] or 0)} tokens in all), decode {split['decode']:.3f} s "
              f"({1e3 * split['decode'] / steps if steps else float('nan'):.2f} ms a step), accept "
              f"{split['accept']:.3f} s, submit {split['submit']:.3f} s, sched {split['sched']:.3f} s; "
              f"idle {wall - busy:.3f} s")
    for m in (st["failed"] + st["mis"])[:10]:
        print("  " + m)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if st["failed"] or st["mis"] else 0


if __name__ == "__main__":
    sys.exit(main())
