#!/usr/bin/env python3
"""Record llama.cpp's outputs on a synthetic model of one architecture
(scripts/synth_arch.py), as the reference tests/arch_*.rs compare against.

For each fixed text, tokenized by llama.cpp: the top-10 log-probabilities
at every position (one request per prefix, n_predict 1, n_probs 10: the
prefix is cached, so each evaluates one token), and a greedy continuation of
the text's first tokens with each step's top 10.

Mistral's sliding window is not in llama.cpp's llama graph. Its model has
one layer, where a window of W positions is exact to reproduce: position
i's logits are those of the window's W tokens run alone (RoPE depends on
relative positions only), so each position is a request of its window.

usage: LLAMA_SERVER=path/to/llama-server record_arch.py ARCH OUT.json
  writes testdata/arch/ARCH.json by default
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import synth_arch  # noqa: E402

TEXTS = [
    "The capital of France is Paris, and the capital of Italy is Rome. The largest city in the world",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman and his three daughters.",
]
# Tokens of each text that a greedy continuation starts from, and its length.
GREEDY_PROMPT = 6
GREEDY_STEPS = 24
# Positions each teacher-forced sequence keeps.
MAX_POSITIONS = 40


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def partial_utf8_tokens(arch: str) -> list[int]:
    """Tokens whose text is not whole UTF-8 (byte tokens of multi-byte
    characters): llama-server reports no probabilities for a step that
    samples one, so they are banned from sampling (`logit_bias`). The
    probabilities it reports are of the raw logits, which the ban leaves
    alone."""
    records, _ = synth_arch.read_vocab(synth_arch.VOCAB[arch])
    fields = {}
    for rec in records:
        klen = struct.unpack_from("<Q", rec, 0)[0]
        key = rec[8:8 + klen].decode()
        at = 8 + klen
        vtype = struct.unpack_from("<I", rec, at)[0]
        if key == "tokenizer.ggml.model":
            slen = struct.unpack_from("<Q", rec, at + 4)[0]
            fields[key] = rec[at + 12:at + 12 + slen].decode()
        if vtype != 9 or key not in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            continue
        sub, n = struct.unpack_from("<IQ", rec, at + 4)
        at += 16
        values = []
        for _ in range(n):
            if sub == 8:
                slen = struct.unpack_from("<Q", rec, at)[0]
                values.append(rec[at + 8:at + 8 + slen].decode())
                at += 8 + slen
            else:
                values.append(struct.unpack_from("<i", rec, at)[0])
                at += 4
        fields[key] = values
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    # GPT-2's byte-to-character map, inverted.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable + [256 + i for i in range(256 - len(printable))]
    byte_of = {chr(c): b for b, c in zip(printable + [b for b in range(256) if b not in printable], chars)}
    bad = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == 6:  # a byte token, <0xXX>
            if int(t[3:5], 16) >= 0x80:
                bad.append(i)
        elif ty == 1 and fields["tokenizer.ggml.model"] == "gpt2" and all(c in byte_of for c in t):
            try:
                bytes(byte_of[c] for c in t).decode("utf-8")
            except UnicodeDecodeError:
                bad.append(i)
    return bad


def top10(port: int, prompt: list[int], banned: list[int]) -> list:
    """The top-10 (id, logprob) after `prompt`, best first."""
    r = post(port, "/completion", {
        "prompt": prompt, "n_predict": 1, "n_probs": 10, "temperature": 0,
        "cache_prompt": True, "logit_bias": [[t, False] for t in banned],
    })
    probs = r["completion_probabilities"][0]
    return [[p["id"], round(p["logprob"], 6)] for p in probs["top_logprobs"]]


class Server:
    def __init__(self, binary: str, model: str, n_ctx: int, kv_type: str):
        self.port = 18000 + os.getpid() % 1000
        self.args = [binary, "-m", model, "-c", str(n_ctx), "-np", "1", "-t", "2",
                     "-ctk", kv_type, "-ctv", kv_type, "--port", str(self.port), "--no-webui"]
        if kv_type == "f32":
            self.args[-3:-3] = ["-fa", "off"]
        # Its log goes to a file: a pipe nobody reads would fill and stall it.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"llama-server exited: {self.log.read().decode()[-3000:]}")
        sys.exit("llama-server did not start")

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def record_run(server: Server, texts: list[str], window: int, banned: list[int]) -> dict:
    port = server.port
    sequences, greedy = [], []
    for text in texts:
        tokens = post(port, "/tokenize", {"content": text, "add_special": True})["tokens"][:MAX_POSITIONS]
        # With a window, position i is its window alone (see the docstring).
        start = (lambda i: max(0, i + 1 - window)) if window else (lambda i: 0)
        top = [top10(port, tokens[start(i):i + 1], banned) for i in range(len(tokens))]
        sequences.append({"text": text, "tokens": tokens, "top": top})

        prompt = tokens[:GREEDY_PROMPT]
        out, steps = [], []
        for _ in range(GREEDY_STEPS):
            seq = prompt + out
            # Greedy: the raw top-1, whatever the ban sampled.
            t = top10(port, seq[start(len(seq) - 1):], banned)
            out.append(t[0][0])
            steps.append(t)
        greedy.append({"prompt": prompt, "output": out, "top": steps})
    return {"sequences": sequences, "greedy": greedy}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("arch", choices=sorted(synth_arch.TINY))
    p.add_argument("out", nargs="?")
    a = p.parse_args()
    binary = os.environ.get("LLAMA_SERVER")
    if not binary:
        sys.exit("set LLAMA_SERVER to a llama-server binary")
    out = a.out or os.path.join(HERE, "..", "testdata", "arch", f"{a.arch}.json")

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, f"{a.arch}.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "synth_arch.py"), a.arch, model], check=True)
        with open(model, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        window = synth_arch.TINY[a.arch].n_swa if a.arch == "mistral" else 0
        # A window run alone sits at other positions than in the sequence:
        # exact up to RoPE's f32 rounding with an F32 cache and no flash
        # attention (which would round the rotated keys to f16).
        kv_type = "f32" if window else "f16"
        banned = partial_utf8_tokens(a.arch)
        # Phi-3's LongRoPE: contexts up to the original one take the short
        # factors, longer ones the long factors (llama-server pads contexts
        # to 256).
        contexts = [256, 512] if a.arch == "phi3" else [256]
        runs = []
        for n_ctx in contexts:
            server = Server(binary, model, n_ctx, kv_type)
            try:
                version = subprocess.run([binary, "--version"], capture_output=True, text=True).stderr.strip()
                run = {"n_ctx": n_ctx, "kv_type": kv_type, **record_run(server, TEXTS, window, banned)}
                runs.append(run)
            finally:
                server.close()
    doc = {
        "generator": "scripts/record_arch.py " + a.arch,
        "llama_cpp": version.splitlines()[0] if version else "?",
        "server": " ".join(os.path.basename(x) if i in (0, 2) else x for i, x in enumerate(server.args)
                           if x not in ("--port", str(server.port))),
        "model": {"arch": a.arch, "generator": f"scripts/synth_arch.py {a.arch}", "sha256": sha},
        "runs": runs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
