#!/usr/bin/env python3
"""The reference for smelt's Gemma 3 arithmetic where llama.cpp's outputs
cannot reach (positions beyond the sliding window, RoPE scaling on global
layers only): a small random Gemma 3 written with the `gguf` package, and
its logits from the independent numpy forward pass of `gemma3_numpy.py`.

usage: gemma3_ref.py OUT_DIR ID,ID,...
Writes OUT_DIR/model.gguf and OUT_DIR/logits.f32: the logits of every
position, little-endian f32, positions × vocab.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemma3_numpy import forward  # noqa: E402

out, ids = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]

# Small, but with every shape distinct: head_dim (key_length) is not
# n_embd / n_head, there are two query heads per KV head, and layers 0-4 and
# 6 slide while layer 5 is global.
E, F, H, HKV, HD, V, L = 64, 96, 4, 2, 32, 300, 7
SWA, BASE, ROPE_FACTOR, EPS = 5, 1e6, 2.0, 1e-6
rng = np.random.default_rng(3)

w = GGUFWriter(f"{out}/model.gguf", "gemma3")
w.add_uint32("gemma3.context_length", 128)
w.add_uint32("gemma3.embedding_length", E)
w.add_uint32("gemma3.block_count", L)
w.add_uint32("gemma3.feed_forward_length", F)
w.add_uint32("gemma3.attention.head_count", H)
w.add_uint32("gemma3.attention.head_count_kv", HKV)
w.add_uint32("gemma3.attention.key_length", HD)
w.add_uint32("gemma3.attention.value_length", HD)
w.add_float32("gemma3.attention.layer_norm_rms_epsilon", EPS)
w.add_float32("gemma3.rope.freq_base", BASE)
w.add_string("gemma3.rope.scaling.type", "linear")
w.add_float32("gemma3.rope.scaling.factor", ROPE_FACTOR)
w.add_uint32("gemma3.attention.sliding_window", SWA)
w.add_uint32("gemma3.vocab_size", V)

weights = {}


def tensor(name, rows, cols, qtype, scale, mean=0.0):
    """Adds a random rows × cols weight of `qtype`; keeps what it decodes to."""
    x = (mean + rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == Q.F32:
        data = x
    elif qtype == Q.F16:
        data = x.astype(np.float16)
    else:
        data = quantize(x, qtype)
    w.add_tensor(name, data, raw_dtype=qtype if qtype not in (Q.F32, Q.F16) else None)
    weights[name] = dequantize(data, qtype).astype(np.float64).reshape(rows, cols)


def norm(name, n):
    # GGUF norm weights already hold Gemma's 1 + w: used as they are.
    tensor(name, 1, n, Q.F32, 0.2, mean=1.0)


tensor("token_embd.weight", V, E, Q.Q8_0, 0.5)
norm("output_norm.weight", E)
for i in range(L):
    p = f"blk.{i}."
    norm(p + "attn_norm.weight", E)
    tensor(p + "attn_q.weight", H * HD, E, Q.F16, 0.15)
    tensor(p + "attn_k.weight", HKV * HD, E, Q.Q5_0, 0.15)
    tensor(p + "attn_v.weight", HKV * HD, E, Q.Q8_0, 0.15)
    norm(p + "attn_q_norm.weight", HD)
    norm(p + "attn_k_norm.weight", HD)
    tensor(p + "attn_output.weight", E, H * HD, Q.F32, 0.1)
    norm(p + "post_attention_norm.weight", E)
    norm(p + "ffn_norm.weight", E)
    tensor(p + "ffn_gate.weight", F, E, Q.Q8_0, 0.15)
    tensor(p + "ffn_up.weight", F, E, Q.F32, 0.15)
    tensor(p + "ffn_down.weight", E, F, Q.Q5_0, 0.1)
    norm(p + "post_ffw_norm.weight", E)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

hp = dict(
    n_embd=E, n_head=H, n_head_kv=HKV, head_dim=HD, n_layer=L, eps=EPS,
    n_swa=SWA, base=BASE, base_swa=1e4, rope_scale=1 / ROPE_FACTOR,
    attn_scale=1 / np.sqrt(HD),
)
logits = forward(weights.__getitem__, weights["token_embd.weight"], hp, ids)
open(f"{out}/logits.f32", "wb").write(logits.astype("<f4").tobytes())
