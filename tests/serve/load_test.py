#!/usr/bin/env python3
"""load_test.py PORT SECONDS CLIENTS - CLIENTS concurrent streaming clients against
`lizard serve` for SECONDS: each sends streamed completions one after another and
reads every event to `data: [DONE]`. Passes with zero errors and every request
answered; prints requests, tokens, p50/p99 latency and time to first token."""
import http.client
import json
import sys
import threading
import time

port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
lock = threading.Lock()
latencies, ttfts, errors, tokens = [], [], [], [0]


def one_request(conn, i):
    body = json.dumps({"prompt": f"Lizard number {i} basks on a warm rock", "max_tokens": 16, "stream": True,
                       "ignore_eos": True, "temperature": 0.7, "seed": i})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
    first, done, finish, usage, buf = None, False, None, None, b""
    while not done:
        line = resp.readline()
        if not line:
            raise RuntimeError("stream ended before data: [DONE]")
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            done = True
            break
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(f"error event: {event['error']}")
        if first is None:
            first = time.monotonic() - t0
        finish = event["choices"][0]["finish_reason"] or finish
        usage = event.get("usage") or usage
    resp.read()
    if finish != "length" or not usage or usage["completion_tokens"] != 16:
        raise RuntimeError(f"finish_reason {finish}, usage {usage}")
    return time.monotonic() - t0, first, usage["completion_tokens"]


def client(k, until):
    i = k * 1000000
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.monotonic() < until:
        i += 1
        try:
            lat, first, n = one_request(conn, i)
            with lock:
                latencies.append(lat)
                ttfts.append(first)
                tokens[0] += n
        except Exception as e:  # every failure is counted and shown
            with lock:
                errors.append(f"client {k}: {e}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


until = time.monotonic() + seconds
threads = [threading.Thread(target=client, args=(k, until)) for k in range(clients)]
t0 = time.monotonic()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.monotonic() - t0
print(f"load: {clients} streaming clients, {wall:.1f} s: {len(latencies)} requests answered, {len(errors)} errors, "
      f"{tokens[0]} tokens ({tokens[0] / wall:.0f} tok/s); latency p50 {pct(latencies, 50) * 1000:.0f} ms "
      f"p99 {pct(latencies, 99) * 1000:.0f} ms; first token p50 {pct(ttfts, 50) * 1000:.0f} ms "
      f"p99 {pct(ttfts, 99) * 1000:.0f} ms")
for e in errors[:10]:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors or not latencies else 0)
