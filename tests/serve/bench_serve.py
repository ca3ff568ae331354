#!/usr/bin/env python3
"""bench_serve.py PORT CLIENTS PROMPT_TOKENS MAX_TOKENS SECONDS [TEMPERATURE [VOCAB]] - serving benchmark.

CLIENTS concurrent streams, each sending streamed completions one after another:
a prompt of PROMPT_TOKENS random token ids (a 4K-context stream = prompt + MAX_TOKENS),
reading every event to `data: [DONE]`. After SECONDS no new request starts; the
benchmark ends when the running requests finish or 2 x SECONDS have passed.
The server's /metrics counters, read every 2 s, give the token rates (prompt and
generated) over the whole run and over its busiest 10 s. Prints one JSON line:
requests, errors, rates, time to first token and the gap between stream events
(p50/p99; an event may carry several tokens), per-stream decode rate. Not a test:
it never fails on speed."""
import http.client
import json
import random
import sys
import threading
import time

port, clients, prompt_tokens, max_tokens, seconds = (int(a) for a in sys.argv[1:6])
temperature = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
vocab = int(sys.argv[7]) if len(sys.argv) > 7 else 128000  # ids below the LLaMA-3 special tokens
lock = threading.Lock()
ttfts, itls, stream_rates, errors = [], [], [], []
totals = {"requests": 0, "prompt": 0, "out": 0}


def one_request(conn, rng):
    prompt = [rng.randrange(min(1000, vocab // 2), vocab) for _ in range(prompt_tokens)]
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                       "temperature": temperature, "seed": rng.randrange(1 << 30)})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
    stamps, usage = [], None
    while True:
        line = resp.readline()
        if not line:
            raise RuntimeError("stream ended before data: [DONE]")
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(f"error event: {event['error']}")
        if event["choices"] and event["choices"][0].get("text"):  # events may carry several tokens
            stamps.append(time.monotonic())
        usage = event.get("usage") or usage
    resp.read()
    if not usage or usage["completion_tokens"] != max_tokens:
        raise RuntimeError(f"usage {usage}")
    return t0, stamps, usage


def client(k, until):
    rng = random.Random(k)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    while time.monotonic() < until:
        try:
            t0, stamps, usage = one_request(conn, rng)
        except Exception as e:  # recorded and reported; the benchmark goes on
            with lock:
                errors.append(str(e)[:200])
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
            continue
        with lock:
            totals["requests"] += 1
            totals["prompt"] += usage["prompt_tokens"]
            totals["out"] += usage["completion_tokens"]
            if stamps:
                ttfts.append(stamps[0] - t0)
                itls.extend(b - a for a, b in zip(stamps, stamps[1:]))
                if len(stamps) > 1:
                    stream_rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))


def counters():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    got = {}
    for line in text.splitlines():
        for name in ("lizard_prompt_tokens_total", "lizard_generation_tokens_total"):
            if line.startswith(name + " "):
                got[name] = float(line.split()[1])
    return time.monotonic(), got.get("lizard_prompt_tokens_total", 0.0), got.get("lizard_generation_tokens_total", 0.0)


samples = []


def monitor(stop):
    while not stop.is_set():
        try:
            samples.append(counters())
        except OSError:
            pass
        stop.wait(2.0)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


start = time.monotonic()
until = start + seconds
stop = threading.Event()
watcher = threading.Thread(target=monitor, args=(stop,), daemon=True)
watcher.start()
threads = [threading.Thread(target=client, args=(k, until), daemon=True) for k in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join(max(0.0, start + 2 * seconds - time.monotonic()))
stop.set()
watcher.join()
samples.append(counters())
wall = time.monotonic() - start
rate = lambda a, b, i: (b[i] - a[i]) / (b[0] - a[0]) if b[0] > a[0] else 0.0
busiest = {"prompt_tok_s": 0.0, "output_tok_s": 0.0}
for i, a in enumerate(samples):  # the busiest 10 s of generation
    later = [b for b in samples[i:] if b[0] - a[0] >= 10.0]
    if later and rate(a, later[0], 2) > busiest["output_tok_s"]:
        busiest = {"prompt_tok_s": round(rate(a, later[0], 1), 1), "output_tok_s": round(rate(a, later[0], 2), 1)}
print(json.dumps({
    "clients": clients, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "temperature": temperature,
    "wall_s": round(wall, 1), "requests_done": totals["requests"], "still_running": sum(t.is_alive() for t in threads),
    "errors": len(errors), "first_errors": errors[:3],
    "prompt_tok_s": round(rate(samples[0], samples[-1], 1), 1), "output_tok_s": round(rate(samples[0], samples[-1], 2), 1),
    "busiest_10s": busiest,
    "ttft_p50_s": pct(ttfts, 50), "ttft_p99_s": pct(ttfts, 99),
    "event_gap_p50_ms": pct(itls, 50) and pct(itls, 50) * 1e3, "event_gap_p99_ms": pct(itls, 99) and pct(itls, 99) * 1e3,
    "stream_decode_tok_s_p50": pct(stream_rates, 50)}))
