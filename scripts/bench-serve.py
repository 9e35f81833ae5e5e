#!/usr/bin/env python3
"""Total generation throughput of `smelt serve` with 1, 4 and 16 concurrent
streams (or --streams), one server per count started with `--parallel N`;
with --replicas, one server per replica count and stream count, compared.

Each of the N clients streams --requests completions of --max-tokens
tokens, one after another, all at once with the others. The prompts count
("7, 8, 9, ...") so that every answer runs to --max-tokens (SmolLM2 counts
on greedily for hundreds of tokens) and each client starts from its own
number. Reported per N: generated tokens over the wall time of the whole
run (prompts included), and the mean rate a single stream saw.

With `--replicas 1,2` each count R runs as `--replicas R --parallel
ceil(N / R)` (every stream holds a slot either way; --parallel overrides
it) on the first R adapters of --devices (default: the first R hardware
GPUs), and the table gives each row's throughput over the first count's.

Only the standard library. Examples (what the figures in the report came
from):

    cargo build --release -p smelt-cli
    python3 scripts/bench-serve.py --threads 2 --streams 1,4,16

    # two GPUs: one replica against two, 32 streams
    python3 scripts/bench-serve.py -m MODEL.gguf --streams 32 --replicas 1,2 \
        --max-tokens 256 --requests 2 --ctx 1024
"""

import argparse
import http.client
import json
import os
import shlex
import subprocess
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def default_model():
    cache = os.environ.get("SMELT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "smelt")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def start_server(a, parallel, replicas):
    """Starts `smelt serve` on a free loopback port; returns (process, port)."""
    cmd = [a.smelt, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
           "--parallel", str(parallel), "--ctx", str(a.ctx), "--queue", str(parallel * replicas)]
    if replicas > 1:
        cmd += ["--replicas", str(replicas)]
    if a.devices:
        # The first R adapters of --devices; one alone is --device.
        devices = a.devices.split(",")[:replicas]
        if len(devices) < replicas:
            sys.exit(f"--devices {a.devices} names fewer than {replicas} adapters")
        cmd += ["--device", devices[0]] if replicas == 1 else ["--devices", ",".join(devices)]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    cmd += shlex.split(a.server_args)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    for line in proc.stderr:
        if "on http://" in line:
            port = int(line.split("on http://")[1].split()[0].rsplit(":", 1)[1])
            # Keep draining stderr so the server never blocks on it.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, port
    proc.wait()
    sys.exit(f"smelt serve did not start: {' '.join(cmd)}")


def stream_completion(port, prompt, max_tokens):
    """Streams one completion; returns (tokens, seconds from first to last
    piece of text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
    first = last = None
    usage = None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        if "error" in chunk:
            raise RuntimeError(chunk["error"])
        if chunk.get("usage"):
            usage = chunk["usage"]
        if chunk["choices"] and chunk["choices"][0]["text"]:
            last = time.monotonic()
            first = first or last
    conn.close()
    if usage is None:
        raise RuntimeError("no usage chunk")
    return usage["completion_tokens"], (last - first) if first else 0.0


def warm_up(port, replicas):
    """One short completion per replica at once (they spread over the
    replicas): first-touch of the weights, the kernels built."""
    threads = [threading.Thread(target=stream_completion, args=(port, "0, 1, 2,", 4))
               for _ in range(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run(a, n, replicas):
    parallel = a.parallel or -(-n // replicas)
    proc, port = start_server(a, parallel, replicas)
    try:
        warm_up(port, replicas)
        tokens = [0] * n
        rates = []
        errors = []
        lock = threading.Lock()

        def client(i):
            for k in range(a.requests):
                start = 7 + 50 * i + 13 * k
                prompt = ", ".join(str(v) for v in range(start, start + 8)) + ","
                try:
                    got, secs = stream_completion(port, prompt, a.max_tokens)
                except Exception as e:  # noqa: BLE001 - reported, then fatal
                    with lock:
                        errors.append(f"client {i}: {e}")
                    return
                with lock:
                    tokens[i] += got
                    if secs > 0:
                        rates.append((got - 1) / secs)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if errors:
        sys.exit("\n".join(errors))
    total = sum(tokens)
    mean_rate = sum(rates) / len(rates) if rates else 0.0
    return total, wall, mean_rate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smelt", default=os.path.join(ROOT, "target", "release", "smelt"))
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (0: the server's default)")
    ap.add_argument("--streams", default="1,4,16", help="comma-separated concurrent stream counts")
    ap.add_argument("--replicas", default="1", help="comma-separated replica counts (serve --replicas)")
    ap.add_argument("--parallel", type=int, default=0,
                    help="slots per replica (default: enough for every stream)")
    ap.add_argument("--requests", type=int, default=2, help="completions per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--devices", default="",
                    help="GPU adapters, comma-separated: R replicas take the first R (default: "
                         "--backend auto's GPU, and the first hardware GPUs for replicas)")
    ap.add_argument("--server-args", default="", help="more smelt serve flags, e.g. \"--devices 0,1\"")
    a = ap.parse_args()
    counts = [int(x) for x in a.replicas.split(",")]
    print(f"# {os.path.basename(a.model)}, -t {a.threads}, {a.requests} × {a.max_tokens} tokens per stream"
          + (f", serve {a.server_args}" if a.server_args else ""))
    print("replicas  streams  tokens  wall_s  total_tok/s  per_stream_tok/s  vs_first")
    for n in (int(x) for x in a.streams.split(",")):
        first = None
        for r in counts:
            total, wall, rate = run(a, n, r)
            rate_total = total / wall
            first = first or rate_total
            print(f"{r:8d}  {n:7d}  {total:6d}  {wall:6.2f}  {rate_total:11.1f}  {rate:16.1f}"
                  f"  {rate_total / first:7.2f}x", flush=True)


if __name__ == "__main__":
    main()
