#!/usr/bin/env python3
"""Exact arithmetic for llama.cpp's Gemma 3 cases: the float64 forward pass
of `gemma3_numpy.py` on gemma-3-270m-q4_k_m.gguf (weights dequantized by the
`gguf` package), teacher-forced on each case of the greedy reference, giving
the log-probability of each of llama.cpp's ten candidates at every step.

llama.cpp rounds as it goes (f16 caches and attention, 8-bit activations,
a GELU table) and so moves log-probabilities by a few hundredths of a nat,
now and then by tenths. Exact arithmetic tells which side of a near tie
the model itself is on.

usage: gemma3_exact.py MODEL.gguf REFERENCE.json OUT.json
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemma3_numpy import forward  # noqa: E402

model, reference, out = sys.argv[1:4]
r = GGUFReader(model)
tensors = {t.name: t for t in r.tensors}
cache = {}


def weight(name):
    if name not in cache:
        t = tensors[name]
        shape = [int(d) for d in reversed(t.shape)]
        cache[name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
    return cache[name]


def meta(key, default=None):
    f = r.fields.get(f"gemma3.{key}")
    return default if f is None else f.contents()


t = tensors["token_embd.weight"]
embeddings = dequantize(t.data, t.tensor_type).reshape(-1, meta("embedding_length"))
head_dim = meta("attention.key_length")
scaling = meta("rope.scaling.factor", 1.0) if meta("rope.scaling.type") == "linear" else 1.0
hp = dict(
    n_embd=meta("embedding_length"),
    n_head=meta("attention.head_count"),
    n_head_kv=meta("attention.head_count_kv"),
    head_dim=head_dim,
    n_layer=meta("block_count"),
    eps=meta("attention.layer_norm_rms_epsilon"),
    n_swa=meta("attention.sliding_window", 0),
    base=meta("rope.freq_base", 10000.0),
    base_swa=10000.0,
    rope_scale=1 / scaling,
    attn_scale=1 / np.sqrt(head_dim),
)

cases = []
for case in json.load(open(reference))["cases"]:
    np_ = len(case["prompt_ids"])
    ids = case["prompt_ids"] + case["output_ids"][:-1]
    logits = forward(weight, embeddings, hp, ids)[np_ - 1 :]
    lp = logits - logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    steps = [
        [[tok, round(float(lp[s, tok]), 6)] for tok, _ in step["top"]]
        for s, step in enumerate(case["steps"])
    ]
    cases.append({"prompt": case["prompt"], "steps": steps})
    print(case["prompt"], file=sys.stderr)
json.dump(
    {
        "generator": "testdata/gemma/gemma3_exact.py (numpy float64)",
        "note": "per case and step: [token id, exact log-probability] of llama.cpp's top 10",
        "cases": cases,
    },
    open(out, "w"),
    indent=None,
)
