#!/usr/bin/env python3
"""serve_guard_check.py: `g4cu serve`'s guard over plain HTTP (run by tests/test_serve_guard.sh).

Servers on the tiny fixture, each on a free port (--port 0), driven with raw sockets:
 A  --api-key-file, --cors-origin, --drain-timeout 2: the key on every route but /health (401
    with OpenAI's error body), Host (403 for a rebinding name), Origin (403; the server's own and
    the allowed one pass, the allowed one gets CORS headers and a preflight), one log line per
    request with its tokens and never the prompt, two Content-Length (400), a NUL in content
    (400 naming it), an empty data: URL (400; under ASan, LeakSanitizer at the exit), SIGTERM
    with a client still sending: a new connect is refused at once, exit 0 by the drain deadline
 B  --api-key, --timeout 3, default limits: a request sent a byte a second (headers, then a
    body) is cut off by the deadline; 1.1M tiny content parts refused by the JSON value limit,
    30,000 large parts parsed in linear time; PNG / JPEG headers of 13000x13000 refused
 C  (not under ASan) RLIMIT_AS: 12 concurrent 30 MB bodies run it out of memory: 503s, and it
    keeps serving, exit 0 (no abort)
 D  (not under ASan) --max-request-memory 256: the abuse cases (20 concurrent 30 MB bodies,
    1.1M parts, the image headers, slow clients), then the peak RSS (VmHWM) against the stated
    bound: the idle RSS + --max-request-memory + 1 MiB per connection
 and at start: --queue 0 refused, --host 0.0.0.0 without a key warns, G4CU_API_KEY taken.
"""
import json
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

G4CU = os.environ["G4CU"]
PKG = os.environ["G4_TINY_PKG"]
FIX = os.environ["G4_FIXTURES"]
TOK = f"{FIX}/chat/chat_bpe.json"
failures = 0
n_checks = 0
n_sent = 0  # requests sent (each gets one log line)


def check(name, ok, detail=""):
    global failures, n_checks
    n_checks += 1
    if not ok:
        failures += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(detail)[:400]}", flush=True)
    return ok


def asan_build():
    try:
        out = subprocess.run(["ldd", G4CU], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "libasan" in out


ASAN = asan_build()


# --- the server process ------------------------------------------------------------------------
class Server:
    def __init__(self, extra, env=None, preexec=None):
        self.err = tempfile.NamedTemporaryFile(prefix="serve_guard_", suffix=".log", delete=False)
        cmd = [G4CU, "serve", PKG, "--tokenizer", TOK, "--backend", "cpu", "--port", "0"] + extra
        e = dict(os.environ)
        e.pop("G4CU_API_KEY", None)
        e.update(env or {})
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=e,
                                  preexec_fn=preexec)
        line = self.p.stdout.readline().decode()
        m = re.search(r"http://[0-9.]+:(\d+) ", line)
        self.port = int(m.group(1)) if m else 0
        if not self.port:
            self.p.wait(30)
            raise SystemExit(f"the server did not start: {line!r} {self.log()}")

    def log(self):
        if hasattr(self, "final_log"):
            return self.final_log
        with open(self.err.name, errors="replace") as f:
            return f.read()

    def status(self, field):
        with open(f"/proc/{self.p.pid}/status") as f:
            for ln in f:
                if ln.startswith(field + ":"):
                    return int(ln.split()[1])
        return -1

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=60):
        """SIGTERM; the exit status and the seconds it took (None: still running, killed)."""
        t0 = time.monotonic()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        self.final_log = self.log()
        os.unlink(self.err.name)
        return rc, time.monotonic() - t0


# --- HTTP over a socket ------------------------------------------------------------------------
class Resp:
    def __init__(self, raw):
        self.status, self.headers, self.body = 0, {}, b""
        head, sep, body = raw.partition(b"\r\n\r\n")
        while head.startswith(b"HTTP/1.1 100"):  # (an interim 100 Continue)
            head, sep, body = body.partition(b"\r\n\r\n")
        if not sep or not head.startswith(b"HTTP/1."):
            return
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out, rest = b"", body
            while rest:
                size, _, rest = rest.partition(b"\r\n")
                n = int(size.split(b";")[0] or b"0", 16)
                if not n:
                    break
                out, rest = out + rest[:n], rest[n + 2:]
            body = out
        self.body = body

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def error(self):
        j = self.json()
        e = j.get("error") if isinstance(j, dict) else None
        return e if isinstance(e, dict) else {}

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


def read_all(s):
    chunks = []
    try:
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            chunks.append(b)
    except OSError:
        pass
    return b"".join(chunks)


def request(port, method, path, body=b"", headers=(), host=None, clen=True, timeout=120):
    global n_sent
    n_sent += 1
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    h = f"{method} {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\nConnection: close\r\n"
    for k, v in headers:
        h += f"{k}: {v}\r\n"
    if clen and (body or method == "POST"):
        h += f"Content-Length: {len(body)}\r\n"
    try:
        s.sendall(h.encode() + b"\r\n" + body)
    except OSError:
        pass
    r = Resp(read_all(s))
    s.close()
    return r


def post_expect(port, path, body, headers=()):
    """A large POST the way curl sends it: `Expect: 100-continue`, the body only after a 100
    (a refusal from the headers comes back without the body being sent)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    h = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
         "Expect: 100-continue\r\n")
    for k, v in headers:
        h += f"{k}: {v}\r\n"
    try:
        s.sendall(h.encode() + b"\r\n")
        first = b""
        while b"\r\n\r\n" not in first:
            b = s.recv(4096)
            if not b:
                break
            first += b
        if first.startswith(b"HTTP/1.1 100"):
            s.sendall(body)
            first += read_all(s)
        else:
            first += read_all(s)
    except OSError:
        first = b""
    s.close()
    return Resp(first)


def chat_body(content, **kw):
    d = {"messages": [{"role": "user", "content": content}]}
    d.update(kw)
    return json.dumps(d).encode()


def post_chat(port, content, headers=(), **kw):
    return request(port, "POST", "/v1/chat/completions", chat_body(content, **kw),
                   [("Content-Type", "application/json")] + list(headers))


def slow_client(port, send, interval, out, key, limit=12.0):
    """Sends `send` a byte every `interval` s; out[key]: seconds until the server closed the
    connection (None: still open after `limit` s or the bytes ran out)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    t0 = time.monotonic()
    out[key] = None
    for i in range(len(send)):
        try:
            s.send(send[i:i + 1])
        except OSError:
            out[key] = time.monotonic() - t0
            break
        r, _, _ = select.select([s], [], [], interval)
        if r:
            try:
                got = s.recv(4096)
            except OSError:
                got = b""
            if not got or got.startswith(b"HTTP/1.1 4"):
                out[key] = time.monotonic() - t0
                break
        if time.monotonic() - t0 > limit:
            break
    s.close()


# --- request bodies for the abuse cases ------------------------------------------------------------
def png_header(w, h):
    ihdr = b"IHDR" + w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + ihdr + b"\0\0\0\0" + b"\0" * 64


def jpeg_header(w, h):
    app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0\x00\x11\x08" + h.to_bytes(2, "big") + w.to_bytes(2, "big") + b"\x03" + \
        b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + app0 + sof0 + b"\0" * 64


def image_part(data, mime):
    import base64
    return {"type": "image_url",
            "image_url": {"url": f"data:{mime};base64," + base64.b64encode(data).decode()}}


def tiny_parts_body(n):
    part = b'{"type":"text","text":"a"}'
    return (b'{"messages":[{"role":"user","content":[' + b",".join([part] * n) + b"]}]}")


def big_text_body(mb):
    return chat_body("x" * (mb << 20), max_tokens=0)


def many_big_parts_body(n, size):
    parts = [{"type": "text", "text": "y" * size} for _ in range(n)]
    return chat_body(parts, max_tokens=0)


def concurrent(fn, args_list):
    out = [None] * len(args_list)

    def run(i):
        out[i] = fn(*args_list[i])
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(args_list))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


# --- A: key, Host / Origin, log line, header and content checks, SIGTERM ---------------------------
def server_a():
    global n_sent
    keyf = tempfile.NamedTemporaryFile("w", delete=False)
    keyf.write("test-key-123\n")
    keyf.close()
    A = Server(["--api-key-file", keyf.name, "--cors-origin", "http://good.example",
                "--drain-timeout", "2"])
    n_sent = 0
    os.unlink(keyf.name)
    p = A.port
    key = [("Authorization", "Bearer test-key-123")]

    r = request(p, "GET", "/v1/models")
    e = r.error()
    check("key: no Authorization -> 401 with OpenAI's error body",
          r.status == 401 and isinstance(e.get("message"), str) and
          e.get("type") == "invalid_request_error" and e.get("code") == "invalid_api_key" and
          r.headers.get("www-authenticate") == "Bearer", r)
    r = request(p, "GET", "/v1/models", headers=[("Authorization", "Bearer test-key-124")])
    check("key: a wrong key -> 401", r.status == 401 and r.error().get("message"), r)
    r = request(p, "GET", "/v1/models", headers=[("Authorization", "test-key-123")])
    check("key: without `Bearer ` -> 401", r.status == 401, r)
    r = request(p, "GET", "/v1/models", headers=key)
    check("key: the right key -> 200", r.status == 200 and r.json()["data"], r)
    r = request(p, "GET", "/health")
    check("key: /health needs none", r.status == 200, r)
    r = post_chat(p, "hi", max_tokens=2)
    check("key: POST chat without it -> 401", r.status == 401, r)
    r = request(p, "GET", "/nowhere")
    check("key: an unknown route without it -> 401, not 404", r.status == 401, r)

    for host, want in [("evil.example", 403), (f"evil.example:{p}", 403),
                       (f"localhost.evil.example:{p}", 403), (f"127.0.0.1.nip.io:{p}", 403),
                       (f"localhost:{p}", 200), ("localhost", 200), (f"127.0.0.1:{p}", 200),
                       (f"[::1]:{p}", 200), (f"127.0.0.2:{p}", 200)]:
        r = request(p, "GET", "/v1/models", headers=key, host=host)
        check(f"Host {host} -> {want}", r.status == want, r)
    r = request(p, "GET", "/v1/models", headers=key, host=f"evil.example:{p}")
    check("Host: the 403 names the Host", "evil.example" in r.error().get("message", ""), r)

    own = f"http://127.0.0.1:{p}"
    for origin, want in [("http://evil.example", 403), ("null", 403),
                         (f"http://localhost:{p + 1}", 403), (own, 200),
                         ("http://good.example", 200)]:
        r = request(p, "GET", "/v1/models", headers=key + [("Origin", origin)])
        check(f"Origin {origin} -> {want}", r.status == want, r)
    r = request(p, "GET", "/v1/models", headers=key + [("Origin", "http://good.example")])
    check("Origin: the allowed one gets Access-Control-Allow-Origin",
          r.headers.get("access-control-allow-origin") == "http://good.example", r.headers)
    r = request(p, "GET", "/v1/models", headers=key + [("Origin", own)])
    check("Origin: the server's own gets no CORS header",
          "access-control-allow-origin" not in r.headers, r.headers)
    pre = [("Origin", "http://good.example"), ("Access-Control-Request-Method", "POST"),
           ("Access-Control-Request-Headers", "authorization, content-type")]
    r = request(p, "OPTIONS", "/v1/chat/completions", headers=pre)
    check("CORS preflight from the allowed origin -> 204 with its headers",
          r.status == 204 and "POST" in r.headers.get("access-control-allow-methods", "") and
          "Authorization" in r.headers.get("access-control-allow-headers", ""), r)
    r = request(p, "OPTIONS", "/v1/chat/completions",
                headers=[("Origin", "http://evil.example")] + pre[1:])
    check("CORS preflight from another origin -> 403", r.status == 403, r)
    r = request(p, "POST", "/v1/chat/completions", chat_body("hi", max_tokens=2),
                headers=key + [("Content-Type", "application/json"),
                               ("Origin", "http://evil.example")])
    check("Origin: a cross-site POST with the key is still refused", r.status == 403, r)

    marker = "zebra-secret-42"
    r = post_chat(p, f"{marker} says hello", key, max_tokens=4)
    u = (r.json() or {}).get("usage", {})
    check("chat with the key -> 200 with usage", r.status == 200 and u.get("prompt_tokens", 0) > 0, r)
    rs = post_chat(p, f"{marker} streams", key, max_tokens=3, stream=True)
    check("streamed chat with the key -> 200", rs.status == 200 and b"[DONE]" in rs.body, rs)

    body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
    raw = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n"
           f"Authorization: Bearer test-key-123\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    s = socket.create_connection(("127.0.0.1", p), timeout=60)
    s.sendall(raw)
    r = Resp(read_all(s))
    s.close()
    check("two Content-Length headers -> 400 naming them",
          r.status == 400 and "Content-Length" in r.error().get("message", ""), r)
    raw = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n"
           f"Authorization: Bearer test-key-123\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", p), timeout=60)
    s.sendall(raw + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
    n_sent += 2  # (the two raw ones)
    r = Resp(read_all(s))
    s.close()
    check("Content-Length with Transfer-Encoding -> 400", r.status == 400, r)

    r = post_chat(p, "before\u0000after", key, max_tokens=2)
    m = r.error().get("message", "")
    check("a NUL in content -> 400 naming it", r.status == 400 and "NUL" in m and '"content"' in m, r)
    r = post_chat(p, [{"type": "text", "text": "ok"}, {"type": "text", "text": "x\u0000"}], key,
                  max_tokens=2)
    check("a NUL in a text part -> 400", r.status == 400 and "NUL" in r.error().get("message", ""), r)
    bd = "guardbd"
    form = (f"--{bd}\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nsay\0more\r\n"
            f"--{bd}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\nRIFF\r\n--{bd}--\r\n").encode()
    r = request(p, "POST", "/v1/audio/transcriptions", form,
                key + [("Content-Type", f"multipart/form-data; boundary={bd}")])
    check("a NUL in the transcription's prompt field -> 400 naming it",
          r.status == 400 and '"prompt"' in r.error().get("message", "") and
          "NUL" in r.error().get("message", ""), r)
    r = post_chat(p, "a \\u0000 written out is fine", key, max_tokens=2)
    check("an escaped backslash before u0000 is text, not a NUL", r.status == 200, r)
    for _ in range(3):
        r = post_chat(p, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}],
                      key, max_tokens=2)
    check("an empty data: URL -> 400", r.status == 400 and "empty" in r.error().get("message", ""), r)
    r = post_chat(p, [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}], key,
                  max_tokens=2)
    check("empty input_audio data -> 400", r.status == 400, r)

    # the log: one line per request, its tokens, never its content
    log = A.log()
    lines = [ln for ln in log.splitlines() if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", ln)]
    fmt = re.compile(r"^\S+Z (\S+) (\S+) (\d{3}) prompt_tokens=(\d+) completion_tokens=(\d+) "
                     r"ms=(\d+)$")
    bad = [ln for ln in lines if not fmt.match(ln)]
    check("log: every line is time method route status tokens ms", lines and not bad, bad or log)
    chat = [fmt.match(ln).groups() for ln in lines
            if fmt.match(ln) and fmt.match(ln).group(2) == "/v1/chat/completions" and
            fmt.match(ln).group(3) == "200"]
    want = (str(u.get("prompt_tokens")), str(u.get("completion_tokens")))
    check("log: the chat's line has its usage", any(g[3:5] == want for g in chat), (chat, want))
    check("log: the streamed chat's line has tokens",
          sum(1 for g in chat if int(g[4]) > 0) >= 2, chat)
    check("log: 401 and 403 lines", any(" 401 " in ln for ln in lines) and
          any(" 403 " in ln for ln in lines), lines[:5])
    check("log: one line per request", len(lines) == n_sent, (len(lines), n_sent))
    check("log: never the content", marker not in log and "says hello" not in log,
          [ln for ln in log.splitlines() if marker in ln])

    # SIGTERM with a generation running (2048 tokens: ~40 s on the CPU) and a client still
    # sending its body: new connections refused at once, the generation cancelled at the drain
    # deadline (2 s; the read deadline, 30 s, is not what ends it), exit 0
    gen = {}

    def long_chat():
        # (to the context's end, 4,000 tokens: ~6 s on an idle core of the CI machine, past the
        # 3.5 s of the signal's delay + the drain deadline; 2,048 finished first when idle)
        gen["r"] = post_chat(p, "count", key, max_tokens=4000, temperature=1.0, seed=3)
    tg = threading.Thread(target=long_chat)
    tg.start()
    slow = {}
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n"
            "Authorization: Bearer test-key-123\r\nContent-Type: application/json\r\n"
            "Content-Length: 400\r\n\r\n").encode()
    t = threading.Thread(target=slow_client, args=(p, head + b" " * 400, 0.02, slow, "x", 30.0))
    t.start()
    time.sleep(1.5)  # the headers are in, the body trickles
    t0 = time.monotonic()
    A.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    refused, took = False, None
    try:
        c = socket.create_connection(("127.0.0.1", p), timeout=3)
        c.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n".encode())
        got = c.recv(100)
        refused = not got
        c.close()
    except OSError:
        refused = True
    took = time.monotonic() - t0
    check("SIGTERM: a new connection is refused at once", refused and took < 1.5, (refused, took))
    rc, _ = A.stop(timeout=30)
    secs = time.monotonic() - t0  # (from the signal)
    t.join()
    tg.join()
    check("SIGTERM: exit 0 within the drain deadline (+2 s)", rc == 0 and secs < 4.0,
          (rc, round(secs, 1)))
    r = gen.get("r")
    u = (r.json() or {}).get("usage", {}) if r else {}
    check("SIGTERM: the running generation was answered, cut short by the deadline",
          r and r.status == 200 and 0 < u.get("completion_tokens", 0) < 4000, (u, r))
    if ASAN:
        print("     (ASan: the exit status includes LeakSanitizer's verdict on the empty data: "
              "URLs)")


# --- B: deadlines, JSON and image limits -------------------------------------------------------------
def server_b():
    B = Server(["--api-key", "k2", "--timeout", "3"])
    p = B.port
    key = [("Authorization", "Bearer k2")]
    slow = {}
    h = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nAuthorization: Bearer k2"
         "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
    # the headers a byte a second; a body a byte a second after headers sent at once
    def slow_body():
        s = socket.create_connection(("127.0.0.1", p), timeout=30)
        s.sendall(h)
        t0 = time.monotonic()
        slow["body"] = None
        for _ in range(100):
            try:
                s.send(b" ")
            except OSError:
                slow["body"] = time.monotonic() - t0
                break
            r, _, _ = select.select([s], [], [], 1.0)
            if r and not s.recv(4096):
                slow["body"] = time.monotonic() - t0
                break
            if time.monotonic() - t0 > 12:
                break
        s.close()
    ts = [threading.Thread(target=slow_client, args=(p, h, 1.0, slow, "headers")),
          threading.Thread(target=slow_body)]
    for t in ts:
        t.start()

    t0 = time.monotonic()
    r = request(p, "POST", "/v1/chat/completions", tiny_parts_body(1_100_000),
                [("Content-Type", "application/json")] + key)
    dt = time.monotonic() - t0
    check("1.1M tiny content parts -> 400 naming the limit",
          r.status == 400 and "--max-json-values" in r.error().get("message", ""), r)
    check("1.1M tiny content parts: refused in under 10 s", dt < 10, round(dt, 2))
    t0 = time.monotonic()
    r = request(p, "POST", "/v1/chat/completions", many_big_parts_body(30000, 700),
                [("Content-Type", "application/json")] + key)
    dt = time.monotonic() - t0
    check("30,000 parts of 700 bytes (21 MB): parsed, then max_tokens 0 -> 400",
          r.status == 400 and "max_tokens" in r.error().get("message", ""), r)
    check("30,000 large parts: in under 10 s (linear)", dt < 10, round(dt, 2))

    for name, data, mime in [("PNG", png_header(13000, 13000), "image/png"),
                             ("JPEG", jpeg_header(13000, 13000), "image/jpeg")]:
        t0 = time.monotonic()
        r = post_chat(p, [image_part(data, mime), {"type": "text", "text": "what?"}], key,
                      max_tokens=2)
        m = r.error().get("message", "")
        check(f"a {name} header of 13000x13000 -> 400 from its header",
              r.status == 400 and "13000x13000" in m and "--max-image-pixels" in m, r)
        check(f"the {name} refusal takes under 1 s", time.monotonic() - t0 < 1.0)
    r = post_chat(p, [image_part(png_header(5000, 5000), "image/png")], key, max_tokens=2)
    check("a 5000x5000 PNG header passes the pixel limit (the decoder then refuses the bytes)",
          r.status == 400 and "--max-image-pixels" not in r.error().get("message", ""), r)

    for t in ts:
        t.join()
    for k in ("headers", "body"):
        check(f"a request sent a byte a second ({k}) is cut off by --timeout 3",
              slow.get(k) is not None and 2.5 <= slow[k] <= 6.0, slow.get(k))
    r = request(p, "GET", "/v1/models", headers=key)
    check("B still serves after the abuse", r.status == 200, r)
    rc, _ = B.stop()
    check("B: exit 0", rc == 0, rc)


# --- C: out of memory, answered -------------------------------------------------------------------
def server_c(vm):
    limit = (vm << 10) + (400 << 20)  # (12 bodies need ~1 GiB: 3 x 30 MB each)

    def lim():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    C = Server(["--max-request-memory", "65536", "--max-connections", "64"],
               env={"MALLOC_ARENA_MAX": "2"}, preexec=lim)
    p = C.port
    rs = concurrent(post_expect, [(p, "/v1/chat/completions", big_text_body(30))] * 12)
    codes = [r.status for r in rs]
    print(f"     RLIMIT_AS {limit >> 20} MiB: {codes}")
    check("12 x 30 MB under RLIMIT_AS: some answered 503 (out of memory)", 503 in codes, codes)
    check("12 x 30 MB under RLIMIT_AS: the others 400 (max_tokens 0) or no answer",
          all(c in (400, 503, 0) for c in codes), codes)
    check("out of memory: the server is alive", C.alive(), C.log()[-2000:])
    r = request(p, "GET", "/health")
    check("out of memory: it keeps serving", r.status == 200, r)
    r = post_chat(p, "hello", max_tokens=2)
    check("out of memory: a chat still works", r.status == 200, r)
    rc, _ = C.stop()
    check("out of memory: exit 0 (no abort)", rc == 0, (rc, C.log()[-1000:]))


# --- D: RSS against the stated bound --------------------------------------------------------------
def server_d():
    """Returns the idle server's VmSize (kB) for C's RLIMIT_AS."""
    budget = 256
    D = Server(["--max-request-memory", str(budget), "--timeout", "3"],
               env={"G4CU_API_KEY": "from-env"})
    p = D.port
    key = [("Authorization", "Bearer from-env")]
    r1 = request(p, "GET", "/v1/models")
    r2 = request(p, "GET", "/v1/models", headers=key)
    check("G4CU_API_KEY: 401 without it, 200 with it", r1.status == 401 and r2.status == 200,
          (r1, r2))
    r = post_chat(p, "hello", key, max_tokens=2)
    check("D: a chat works", r.status == 200, r)
    idle, vm = D.status("VmRSS"), D.status("VmSize")
    slow = {}
    h = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n"
         "Authorization: Bearer from-env\r\n"
         "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode()
    ts = [threading.Thread(target=slow_client, args=(p, h + b" " * 1000, 0.5, slow, i))
          for i in range(8)]
    for t in ts:
        t.start()
    rs = concurrent(post_expect, [(p, "/v1/chat/completions", big_text_body(30), key)] * 20)
    codes = [r.status for r in rs]
    check("D: 20 x 30 MB at once: 400 or 503 (the budget), every one answered",
          codes.count(400) >= 1 and codes.count(503) >= 1 and
          codes.count(400) + codes.count(503) == 20, codes)
    r503 = [r for r in rs if r.status == 503]
    check("D: the budget's 503 says so, with Retry-After",
          r503 and all("--max-request-memory" in r.error().get("message", "") and
                        r.headers.get("retry-after") == "1" for r in r503), r503[:1])
    r = request(p, "POST", "/v1/chat/completions", tiny_parts_body(1_100_000),
                [("Content-Type", "application/json")] + key)
    check("D: 1.1M parts -> 400", r.status == 400, r)
    for data, mime in [(png_header(13000, 13000), "image/png"),
                       (jpeg_header(13000, 13000), "image/jpeg")]:
        r = post_chat(p, [image_part(data, mime)], key, max_tokens=2)
        check(f"D: 13000x13000 {mime} -> 400", r.status == 400, r)
    for t in ts:
        t.join()
    peak = D.status("VmHWM")
    n_conn = 20 + 8 + 1
    bound = idle + (budget << 10) + n_conn * 1024
    print(f"     RSS: idle {idle >> 10} MiB, peak {peak >> 10} MiB, bound {bound >> 10} MiB "
          f"(idle + --max-request-memory {budget} MiB + {n_conn} connections x 1 MiB)")
    check("D: the peak RSS is within the stated bound", 0 < peak <= bound, (idle, peak, bound))
    check("D: the bodies were read (the peak is over idle + 60 MiB)", peak > idle + (60 << 10),
          (idle, peak))
    r = post_chat(p, "hello again", key, max_tokens=2)
    check("D: still serving", r.status == 200, r)
    rc, _ = D.stop()
    check("D: exit 0", rc == 0, rc)
    return vm


# --- at start ------------------------------------------------------------------------------------
def start_checks():
    r = subprocess.run([G4CU, "serve", PKG, "--queue", "0", "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    check("--queue 0 is refused at start with a clear error",
          r.returncode == 1 and "--queue" in r.stderr and "'0'" in r.stderr, r.stderr)
    # (a package that does not load: the warning comes before the model, nothing listens)
    e = dict(os.environ)
    e.pop("G4CU_API_KEY", None)
    r = subprocess.run([G4CU, "serve", "/nonexistent/pkg", "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, timeout=60, env=e)
    check("--host 0.0.0.0 without a key: a warning",
          "warning" in r.stderr and "0.0.0.0" in r.stderr, r.stderr)
    r = subprocess.run([G4CU, "serve", "/nonexistent/pkg", "--host", "0.0.0.0", "--port", "0",
                        "--api-key", "k"], capture_output=True, text=True, timeout=60, env=e)
    check("--host 0.0.0.0 with a key: no warning", "warning" not in r.stderr, r.stderr)
    r = subprocess.run([G4CU, "serve", PKG, "--api-key-file", "/nonexistent/key", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    check("--api-key-file missing: exit 1 naming it",
          r.returncode == 1 and "/nonexistent/key" in r.stderr, r.stderr)


def main():
    t0 = time.monotonic()
    for part in [start_checks, server_a, server_b]:
        t = time.monotonic()
        part()
        print(f"     ({part.__name__}: {time.monotonic() - t:.1f} s)")
    if ASAN:
        print("     (ASan build: the RLIMIT_AS and RSS cases skipped: ASan maps terabytes of "
              "shadow and keeps freed memory in quarantine)")
    else:
        t = time.monotonic()
        vm = server_d()
        print(f"     (server_d: {time.monotonic() - t:.1f} s)")
        t = time.monotonic()
        server_c(vm)
        print(f"     (server_c: {time.monotonic() - t:.1f} s)")
    print(f"serve guard: {n_checks} checks, {failures} failed ({time.monotonic() - t0:.1f} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
