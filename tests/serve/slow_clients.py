#!/usr/bin/env python3
"""Slow-client load on a running `smelt serve`: IDLE connections that never
finish a request (half send nothing, half stop in the middle of their
headers, as slowloris does) beside STREAMS real streaming clients.

1. STREAMS concurrent streams alone: the baseline wall time.
2. IDLE sockets opened and left hanging, then the same STREAMS streams
   again: they must finish in at most --slack times the baseline.
3. Every hanging socket must be closed by the server: those with partial
   headers within the header timeout, the silent ones within the idle
   timeout (plus --margin seconds each).

Prints one line per phase and `N passed, N failed`.

Usage: slow_clients.py BASE_URL [--idle 500] [--streams 32] [--max-tokens 16]
                       [--header-timeout 10] [--idle-timeout 60]
                       [--slack 1.5] [--margin 5]
"""

import argparse
import http.client
import json
import select
import socket
import sys
import threading
import time
import urllib.parse

from checks import Checks

check = Checks(show_passes=True)


def stream(base, prompt, max_tokens, results, i):
    u = urllib.parse.urlparse(base)
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    pieces = 0
    done = False
    for raw in resp:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data:") and '"content":"' in line:
            pieces += 1
    conn.close()
    results[i] = (resp.status == 200 and done, pieces, time.monotonic() - t)


def run_streams(base, n, max_tokens):
    """n concurrent streams; (all well formed, wall seconds, pieces)."""
    results = [None] * n
    threads = [threading.Thread(target=stream, args=(base, f"Say something about the number {i}.",
                                                      max_tokens, results, i)) for i in range(n)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t
    return all(r and r[0] for r in results), wall, sum(r[1] for r in results if r)


def watch(socks, opened, within, closed):
    """Records in `closed[kind]` the seconds after `opened` at which the
    server closed each socket, for at most `within` seconds."""
    pending = {s.fileno(): (s, kind) for s, kind in socks}
    deadline = opened + within
    while pending and time.monotonic() < deadline:
        readable, _, _ = select.select(list(pending), [], [], 0.2)
        for fd in readable:
            s, kind = pending[fd]
            try:
                data = s.recv(4096)
            except ConnectionError:
                data = b""
            if not data:
                closed.setdefault(kind, []).append(time.monotonic() - opened)
                del pending[fd]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--idle", type=int, default=500)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--header-timeout", type=float, default=10)
    ap.add_argument("--idle-timeout", type=float, default=60)
    ap.add_argument("--slack", type=float, default=1.5)
    ap.add_argument("--margin", type=float, default=5)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.base)

    ok, base_wall, base_pieces = run_streams(a.base, a.streams, a.max_tokens)
    check("baseline streams", ok, f"{a.streams} streams in {base_wall:.1f} s, {base_pieces} chunks")

    socks = []
    opened = time.monotonic()
    for i in range(a.idle):
        s = socket.create_connection((u.hostname, u.port), timeout=30)
        if i % 2:
            s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: app".encode())
        socks.append((s, "partial headers" if i % 2 else "silent"))
    check("hanging connections opened", len(socks) == a.idle, f"{len(socks)} in {time.monotonic() - opened:.1f} s")

    # A watcher notes when the server closes each hanging socket, while the
    # streams run beside them.
    closed = {}
    watcher = threading.Thread(target=watch, args=(socks, opened, a.idle_timeout + a.margin + 5, closed))
    watcher.start()
    ok, wall, pieces = run_streams(a.base, a.streams, a.max_tokens)
    check("streams beside hanging connections", ok and wall <= a.slack * base_wall,
          f"{a.streams} streams in {wall:.1f} s ({wall / base_wall:.2f}x the baseline), {pieces} chunks")
    watcher.join()
    for kind, limit in [("partial headers", a.header_timeout), ("silent", a.idle_timeout)]:
        times = closed.get(kind, [])
        want = sum(1 for _, k in socks if k == kind)
        latest = max(times) if times else float("nan")
        check(f"{kind} connections closed by the server", len(times) == want and latest <= limit + a.margin,
              f"{len(times)}/{want} closed, the last after {latest:.1f} s (timeout {limit} s)")
    for s, _ in socks:
        s.close()
    check.finish()


if __name__ == "__main__":
    main()
