#!/usr/bin/env python3
"""Load on a running `smelt serve`: CLIENTS concurrent streaming clients,
each sending REQUESTS chat requests one after another, over loopback.

Every stream must be well formed (HTTP 200, `data: {json}` chunks, one id,
the role first, one finish_reason, a usage chunk, `data: [DONE]` last),
every request must complete, and each client must get its own answer: the
text of every stream must equal the answer the same prompt gets when sent
alone, first (greedy), so nothing is lost or mixed between clients.

Clients that leave mid-stream must free their slots: DISCONNECTS more
clients join the load, each asking for a long answer (--long-tokens of
counting, far more steps than the checks wait) and closing the connection after its first
piece of text. Then SLOTS+2 long streams are opened at once (SLOTS holding a
slot, two waiting) and all closed. Each time the server must be idle
(`/health`: no slot processing, nothing waiting) within --idle-within
seconds, and then answer a request again.

With --bench, measures instead the total generation throughput with
CLIENTS concurrent streams.

Usage: load.py BASE_URL [--clients 32] [--requests 3] [--max-tokens 8]
                        [--disconnects 4] [--slots 4] [--long-tokens 900] [--bench]
"""

import argparse
import http.client
import json
import re
import socket
import sys
import threading
import time
import urllib.parse

TOPICS = ["cats", "rivers", "chess", "tea", "the moon", "bridges", "owls", "rain", "glass", "maps",
          "salt", "kites", "bees", "clocks", "ferns", "snow"]


def prompt_for(client, k):
    # Few distinct prompts (their answers alone are computed first), spread
    # so that clients running side by side ask different things.
    return f"Say one short sentence about {TOPICS[(client + 5 * k) % 8]}."


def post(base, path, body, timeout=300):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def stream_chat(base, prompt, max_tokens):
    """Returns (text, usage) or raises AssertionError naming what was wrong."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    conn, resp = post(base, "/v1/chat/completions", body)
    try:
        assert resp.status == 200, f"status {resp.status}: {resp.read()[:200]!r}"
        assert resp.getheader("Content-Type", "").startswith("text/event-stream"), resp.getheader("Content-Type")
        payloads = []
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                payloads.append(line[5:].strip())
            else:
                assert line == "" or line.startswith(":"), f"not SSE: {line!r}"
    finally:
        conn.close()
    assert payloads and payloads[-1] == "[DONE]", f"no [DONE] at the end: {payloads[-3:]}"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all("error" not in c for c in chunks), chunks
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1, f"ids {ids}"
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant", chunks[0]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length"), finishes
    usage = chunks[-1].get("usage")
    assert chunks[-1]["choices"] == [] and usage, chunks[-1]
    assert 0 < usage["completion_tokens"] <= max_tokens, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    return text, usage


def whole_chat(base, prompt, max_tokens):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    conn, resp = post(base, "/v1/chat/completions", body)
    data = resp.read()
    conn.close()
    assert resp.status == 200, data
    return json.loads(data)["choices"][0]["message"]["content"]


def health(base):
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", "/health")
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.status == 200, data
    return json.loads(data)


def wait_health(base, within, what, ok):
    """Polls /health until ok(h) holds; raises naming `what` after `within` s."""
    deadline = time.monotonic() + within
    while True:
        h = health(base)
        if ok(h):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {within} s: /health says {h}")
        time.sleep(0.02)


# SmolLM2 counts on greedily from here, past 900 tokens without an end of
# generation (checked: 900 tokens, finish_reason "length", about 60 s alone
# on the 2-core machine), so only a cancel ends these streams early.
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"


def open_long_stream(base, long_tokens):
    """Sends a streaming request for a long answer on a raw socket, so the
    test decides when the connection drops."""
    u = urllib.parse.urlparse(base)
    body = json.dumps({"prompt": COUNTING, "max_tokens": long_tokens, "temperature": 0,
                       "stream": True}).encode()
    s = socket.create_connection((u.hostname, u.port), timeout=120)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {u.netloc}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
              f"Connection: close\r\n\r\n".encode() + body)
    return s


def read_until_text(s):
    """Reads a stream until a chunk carries generated text, so that the
    generation is known to be running."""
    seen = b""
    while not re.search(rb'"text":"[^"]', seen):
        data = s.recv(4096)
        assert data, f"the stream ended before any text: {seen[-300:]!r}"
        seen += data
    assert seen.startswith(b"HTTP/1.1 200"), seen[:200]


def leave_mid_stream(base, long_tokens):
    s = open_long_stream(base, long_tokens)
    try:
        read_until_text(s)
    finally:
        s.close()


def run_clients(base, n_clients, n_requests, max_tokens, expected, disconnects=0, long_tokens=900,
                timeout=600):
    results = {}
    errors = []
    lock = threading.Lock()

    def client(i):
        for k in range(n_requests):
            p = prompt_for(i, k)
            try:
                text, usage = stream_chat(base, p, max_tokens)
                with lock:
                    results[(i, k)] = (text, usage)
                if expected is not None and text != expected[p]:
                    raise AssertionError(f"client {i} request {k}: {text!r}, alone {expected[p]!r}")
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    errors.append(f"client {i} request {k}: {type(e).__name__}: {e}")

    def leaver(i):
        try:
            leave_mid_stream(base, long_tokens)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"disconnecting client {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    # The leavers start among the others, spread over the run.
    for d in range(disconnects):
        threads.insert((d + 1) * len(threads) // (disconnects + 1), threading.Thread(target=leaver, args=(d,)))
    start = time.monotonic()
    deadline = start + timeout
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
    elapsed = time.monotonic() - start
    hung = [t for t in threads if t.is_alive()]
    if hung:
        errors.append(f"{len(hung)} clients did not finish within {timeout} s")
    return results, errors, elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--disconnects", type=int, default=4)
    ap.add_argument("--slots", type=int, default=4, help="the server's --parallel")
    ap.add_argument("--long-tokens", type=int, default=900)
    ap.add_argument("--idle-within", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds the clients may take")
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()

    if a.bench:
        results, errors, elapsed = run_clients(a.base, a.clients, a.requests, a.max_tokens, None)
        tokens = sum(u["completion_tokens"] for _, u in results.values())
        print(f"{a.clients} concurrent streams: {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:.1f} tokens/s"
              f" ({len(errors)} errors)")
        for e in errors[:5]:
            print(e, file=sys.stderr)
        sys.exit(1 if errors else 0)

    prompts = sorted({prompt_for(i, k) for i in range(a.clients) for k in range(a.requests)})
    expected = {p: whole_chat(a.base, p, a.max_tokens) for p in prompts}
    results, errors, elapsed = run_clients(a.base, a.clients, a.requests, a.max_tokens, expected,
                                           a.disconnects, a.long_tokens, a.timeout)
    total = a.clients * a.requests
    if len(results) != total and not errors:
        errors.append(f"{total - len(results)} requests lost")
    idle = lambda h: h["slots_processing"] == 0 and h["requests_waiting"] == 0  # noqa: E731
    try:
        # The leavers asked for far more tokens than the run took: only
        # cancelling them frees their slots this soon.
        wait_health(a.base, a.idle_within, "idle after the load", idle)
        # Every slot busy and two requests waiting, then all leave at once.
        streams = []
        try:
            for i in range(a.slots):
                streams.append(open_long_stream(a.base, a.long_tokens))
                read_until_text(streams[-1])
            for i in range(2):
                streams.append(open_long_stream(a.base, a.long_tokens))
            wait_health(a.base, 60, "slots full and two waiting",
                        lambda h: h["slots_processing"] == a.slots and h["requests_waiting"] == 2)
        finally:
            for s in streams:
                s.close()
        wait_health(a.base, a.idle_within, "idle after the disconnects", idle)
        p = prompts[0]
        text = whole_chat(a.base, p, a.max_tokens)
        assert text == expected[p], f"after the disconnects: {text!r}, before {expected[p]!r}"
    except Exception as e:  # noqa: BLE001
        errors.append(f"disconnects: {type(e).__name__}: {e}")
    for e in errors[:20]:
        print(e, file=sys.stderr)
    tokens = sum(u["completion_tokens"] for _, u in results.values())
    print(f"{len(results)} streams, {tokens} tokens in {elapsed:.2f} s")
    print(f"{total - len(errors)} passed, {len(errors)} failed")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
