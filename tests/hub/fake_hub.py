#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on loopback, speaking the parts of
its HTTP API that `smelt pull` uses:

  GET /api/models/{org}/{repo}[?blobs=true]
      {"id", "siblings": [{"rfilename", "size", "lfs": {"sha256", "size"}}]}
  GET /{org}/{repo}/resolve/main/{file}
      302 to /cdn/{sha256}, as the hub redirects to its CDN
  GET /cdn/{sha256}
      the bytes, with Range requests (206 + Content-Range, 416)

Every file in ROOT is in the one repository REPO. With --token, both API
and download need `Authorization: Bearer TOKEN` (401 otherwise).
--cut-first F: the first download of each file stops after a fraction F of
its bytes (the connection closes mid-body). --corrupt: downloads send
wrong bytes. Each request is logged as a JSON line to --log.

Prints `port N` on stdout once listening.

Usage: fake_hub.py ROOT REPO [--port 0] [--token T] [--cut-first 0.5]
                   [--corrupt] [--log FILE]
"""

import argparse
import hashlib
import http.server
import json
import os
import re
import sys
import threading


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("repo")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token")
    ap.add_argument("--cut-first", type=float)
    ap.add_argument("--corrupt", action="store_true")
    ap.add_argument("--log")
    a = ap.parse_args()

    files = {}
    for name in sorted(os.listdir(a.root)):
        path = os.path.join(a.root, name)
        if os.path.isfile(path):
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            files[name] = (path, os.path.getsize(path), h.hexdigest())
    by_sha = {sha: (path, size) for path, size, sha in files.values()}
    cut_done = set()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def record(self, status):
            if a.log:
                with lock, open(a.log, "a") as f:
                    f.write(json.dumps({"path": self.path, "range": self.headers.get("Range"),
                                        "status": status}) + "\n")

        def reply(self, status, body=b"", headers=()):
            self.record(status)
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def authorized(self):
            if a.token and self.headers.get("Authorization") != f"Bearer {a.token}":
                self.reply(401, b'{"error": "Invalid credentials"}', [("Content-Type", "application/json")])
                return False
            return True

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == f"/api/models/{a.repo}":
                if not self.authorized():
                    return
                siblings = [{"rfilename": "README.md"}] + [
                    {"rfilename": n, "size": s, "lfs": {"sha256": sha, "size": s, "pointerSize": 135}}
                    for n, (_, s, sha) in files.items()]
                body = json.dumps({"id": a.repo, "siblings": siblings}).encode()
                return self.reply(200, body, [("Content-Type", "application/json")])
            prefix = f"/{a.repo}/resolve/main/"
            if path.startswith(prefix):
                if not self.authorized():
                    return
                name = path[len(prefix):]
                if name not in files:
                    return self.reply(404, b"Entry not found")
                return self.reply(302, b"", [("Location", f"/cdn/{files[name][2]}")])
            m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
            if m and m.group(1) in by_sha:
                return self.blob(*by_sha[m.group(1)], m.group(1))
            self.reply(404, b"not found")

        def blob(self, path, size, sha):
            start = 0
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-", rng)
                if not m or int(m.group(1)) >= size:
                    return self.reply(416, b"", [("Content-Range", f"bytes */{size}")])
                start = int(m.group(1))
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            if a.corrupt:
                data = bytes(b ^ 0x5A for b in data)
            status = 206 if rng else 200
            self.record(status)
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            with lock:
                cut = a.cut_first is not None and sha not in cut_done
                cut_done.add(sha)
            if cut:
                self.wfile.write(data[: int(size * a.cut_first) - start])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"port {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
