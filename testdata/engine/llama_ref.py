#!/usr/bin/env python3
"""An independent Llama forward pass in numpy (float64) over a GGUF file read
and dequantized by the `gguf` package: the reference for smelt's forward
pass arithmetic.

usage: llama_ref.py OUT_DIR MODEL.gguf ID,ID,...
Writes OUT_DIR/logits.f32: the logits of every position, little-endian f32,
positions × vocab.
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

out, path, ids = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
r = GGUFReader(path)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
assert arch == "llama", arch


def meta(key, default=None):
    f = r.fields.get(f"{arch}.{key}")
    return default if f is None else f.contents()


tensors = {t.name: t for t in r.tensors}


def weight(name):
    t = tensors[name]
    return dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
        [int(d) for d in reversed(t.shape)]
    )


n_layer, n_head = meta("block_count"), meta("attention.head_count")
n_kv = meta("attention.head_count_kv", n_head)
eps = meta("attention.layer_norm_rms_epsilon")
base = meta("rope.freq_base", 10000.0)
emb = weight("token_embd.weight")
hd = emb.shape[1] // n_head
n_rot = meta("rope.dimension_count", hd)
n = len(ids)


def rms_norm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, heads):
    # Adjacent pairs (GGUF's Llama layout), angle pos · base^(-2i/n_rot).
    x = x.reshape(n, heads, hd).copy()
    theta = np.arange(n)[:, None] * base ** (-np.arange(0, n_rot, 2) / n_rot)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
    x[..., 0:n_rot:2] = x0 * c - x1 * s
    x[..., 1:n_rot:2] = x0 * s + x1 * c
    return x


x = emb[ids]
mask = np.triu(np.full((n, n), -np.inf), 1)
for i in range(n_layer):
    p = f"blk.{i}."
    h = rms_norm(x, weight(p + "attn_norm.weight"))
    q = rope(h @ weight(p + "attn_q.weight").T, n_head)
    k = rope(h @ weight(p + "attn_k.weight").T, n_kv)
    v = (h @ weight(p + "attn_v.weight").T).reshape(n, n_kv, hd)
    att = np.empty((n, n_head, hd))
    for head in range(n_head):
        kv = head * n_kv // n_head
        s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        att[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
    x = x + att.reshape(n, -1) @ weight(p + "attn_output.weight").T
    h = rms_norm(x, weight(p + "ffn_norm.weight"))
    g = h @ weight(p + "ffn_gate.weight").T
    u = h @ weight(p + "ffn_up.weight").T
    x = x + (g / (1 + np.exp(-g)) * u) @ weight(p + "ffn_down.weight").T
out_w = weight("output.weight") if "output.weight" in tensors else emb
logits = rms_norm(x, weight("output_norm.weight")) @ out_w.T
open(f"{out}/logits.f32", "wb").write(logits.astype("<f4").tobytes())
