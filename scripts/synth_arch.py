#!/usr/bin/env python3
"""Write a synthetic GGUF of one architecture: the tensor names, shapes and
metadata llama.cpp's converter writes, seeded random weights, and a real
vocabulary from testdata/tokenizer.

The tiny shapes are the test models of tests/arch_*.rs, whose llama.cpp
outputs scripts/record_arch.py recorded into testdata/arch/; the large ones
(qwen3-8b, qwen3moe-30b-a3b) are benchmark models, written at F16 (or Q8_0)
for llama-quantize to turn into Q4_K_M.

Weights come from a counter-based generator (splitmix64 of the tensor's name
and the element's index), so the same arguments give the same bytes on any
numpy. They are large enough that the attention and the output
distribution are peaked: query and key projections of gain 2, logits of
standard deviation ~5.

usage: synth_arch.py ARCH OUT.gguf [--shape NAME] [--type TYPE]
  ARCH:  qwen2 | qwen3 | qwen3moe | gemma2 | mistral | phi3 | gpt-oss
  SHAPE: tiny (default) | qwen3-8b | qwen3moe-30b-a3b
  TYPE:  the matmul weights' type: Q8_0 (tiny's default; mistral's F32),
         F16 (the large shapes' default), Q4_0, Q4_1, Q5_0, Q5_1, BF16, F32

Prints the SHA-256 of the file it wrote.
"""
import argparse
import gzip
import hashlib
import os
import sys
import struct
from dataclasses import dataclass, field

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, Keys as K, MODEL_TENSOR as T

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@dataclass
class Shape:
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx: int = 4096
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    # Positions a sliding-window layer sees (0: the architecture's default).
    n_swa: int = 0


# The test models: small enough for a 2-core CI machine, each sized to reach
# what its architecture adds (head sizes unlike n_embd / n_head, windows
# shorter than the recorded sequences, several experts per token).
TINY = {
    "qwen2": Shape(128, 2, 384, 4, 2, 32, n_ctx=32768),
    "qwen3": Shape(128, 2, 384, 4, 2, 64, n_ctx=40960),
    "qwen3moe": Shape(128, 2, 384, 4, 2, 64, n_ctx=40960, n_expert=8, n_expert_used=2, n_ff_exp=64),
    "gemma2": Shape(128, 3, 256, 4, 2, 64, n_ctx=8192, n_swa=8),
    "mistral": Shape(128, 1, 384, 4, 2, 32, n_ctx=32768, n_swa=8),
    "phi3": Shape(128, 2, 256, 4, 4, 32, n_ctx=131072),
    "gpt-oss": Shape(128, 2, 0, 4, 2, 64, n_ctx=131072, n_expert=4, n_expert_used=2, n_ff_exp=128, n_swa=8),
}

# Mistral's reference runs windows apart from their sequence (see
# record_arch.py), which RoPE makes exact only up to f32 rounding: F32
# weights keep that rounding from flipping 8-bit activation roundings.
TINY_TYPE = {"mistral": "F32"}

LARGE = {
    # Qwen3-8B: untied output, 36 layers, GQA 32/8 of 128.
    "qwen3-8b": ("qwen3", Shape(4096, 36, 12288, 32, 8, 128, n_ctx=40960)),
    # Llama-70B's layer shape (GQA 64/8 of 128, FFN 28672) with 100 layers:
    # 86B parameters, 85 GiB at Q8_0, more than one 80 GB card holds (a
    # layer split's test).
    "qwen3-86b": ("qwen3", Shape(8192, 100, 28672, 64, 8, 128, n_ctx=8192)),
    # Qwen3-30B-A3B: 128 experts of 768, 8 used, GQA 32/4 of 128.
    "qwen3moe-30b-a3b": (
        "qwen3moe",
        Shape(2048, 48, 6144, 32, 4, 128, n_ctx=40960, n_expert=128, n_expert_used=8, n_ff_exp=768),
    ),
}

# The vocabulary each architecture's synthetic model borrows.
VOCAB = {
    "qwen2": "qwen2",
    "qwen3": "qwen2",
    "qwen3moe": "qwen2",
    "gemma2": "llama-spm",
    "mistral": "llama-spm",
    "phi3": "phi-3",
    "gpt-oss": "qwen2",
}

GGUF_ARCH = {"mistral": "llama", "gpt-oss": "gpt-oss"}

FILE_TYPE = {Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q4_1: 3, Q.Q8_0: 7, Q.Q5_0: 8, Q.Q5_1: 9, Q.BF16: 32}


def splitmix_uniform(name: str, n: int, start: int = 0) -> np.ndarray:
    """n values uniform in [-1, 1), a function of (name, index) only."""
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    with np.errstate(over="ignore"):
        x = np.arange(start + 1, start + n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x += np.uint64(seed)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    # 24 bits: exact in f32.
    return ((x >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / (1 << 24))) - np.float32(1.0)


@dataclass
class Tensor:
    name: str
    shape: tuple  # numpy order: (..., rows, cols); GGUF dims are reversed
    qtype: Q
    # Values: uniform(-1, 1) · scale + offset.
    scale: float
    offset: float = 0.0
    # Values in [lo, hi] instead (rope factors), when set.
    range01: tuple | None = None


@dataclass
class Model:
    arch: str
    meta: list = field(default_factory=list)  # (key, value)
    tensors: list = field(default_factory=list)


def uniform_std(std: float) -> float:
    """The half-width of a uniform distribution of standard deviation std."""
    return std * 3**0.5


def build(arch: str, s: Shape, wtype: Q, n_vocab: int) -> Model:
    m = Model(GGUF_ARCH.get(arch, arch))
    E, hd = s.n_embd, s.head_dim
    qd, kvd = s.n_head * hd, s.n_head_kv * hd
    name = lambda t, bid=None, suffix="weight": gguf.TENSOR_NAMES[t].format(bid=bid) + "." + suffix

    def add(t, shape, scale, bid=None, suffix="weight", qtype=None, offset=0.0, range01=None):
        plain = len(shape) == 1 or qtype == Q.F32
        m.tensors.append(Tensor(name(t, bid, suffix), tuple(shape), Q.F32 if plain else (qtype or wtype), scale, offset, range01))

    def matmul(t, rows, cols, bid, gain=1.0):
        add(t, (rows, cols), uniform_std(gain / cols**0.5), bid)

    def norm(t, n, bid=None, centre=1.0):
        add(t, (n,), 0.1, bid, offset=centre)

    def meta(key, value):
        m.meta.append((key.format(arch=m.arch), value))

    meta(K.LLM.CONTEXT_LENGTH, s.n_ctx)
    meta(K.LLM.EMBEDDING_LENGTH, E)
    meta(K.LLM.BLOCK_COUNT, s.n_layer)
    meta(K.Attention.HEAD_COUNT, s.n_head)
    meta(K.Attention.HEAD_COUNT_KV, s.n_head_kv)
    meta(K.Attention.LAYERNORM_RMS_EPS, 1e-6)
    if s.n_ff:
        meta(K.LLM.FEED_FORWARD_LENGTH, s.n_ff)

    # Token embedding, and an output projection giving logits of std ~5.
    add(T.TOKEN_EMBD, (n_vocab, E), 1.0)
    norm(T.OUTPUT_NORM, E)
    tied = arch in ("qwen2", "qwen3", "qwen3moe", "gemma2")
    if arch in ("qwen3moe", "qwen3") and s.n_layer > 2:
        tied = False  # the real 8B and 30B-A3B untie them
    out_scale = uniform_std(5.0 / E**0.5)
    if tied:
        # The tied table is the output: scale it for the logits.
        m.tensors[0].scale = out_scale
    else:
        add(T.OUTPUT, (n_vocab, E), out_scale)

    for i in range(s.n_layer):
        norm(T.ATTN_NORM, E, i)
        # Gemma 2's scores reach its soft cap of 50 with a gain of 4.
        qk_gain = 4.0 if arch == "gemma2" else 2.0
        if arch == "phi3":
            matmul(T.ATTN_QKV, qd + 2 * kvd, E, i, gain=qk_gain)
        else:
            matmul(T.ATTN_Q, qd, E, i, gain=qk_gain)
            matmul(T.ATTN_K, kvd, E, i, gain=qk_gain)
            matmul(T.ATTN_V, kvd, E, i)
        if arch in ("qwen2", "gpt-oss"):
            for t, n in ((T.ATTN_Q, qd), (T.ATTN_K, kvd), (T.ATTN_V, kvd)):
                add(t, (n,), 0.3, i, suffix="bias")
        if arch in ("qwen3", "qwen3moe"):
            # Per-head norms of weight ~2: q·k/sqrt(hd) of std ~4.
            norm(T.ATTN_Q_NORM, hd, i, centre=2.0)
            norm(T.ATTN_K_NORM, hd, i, centre=2.0)
        matmul(T.ATTN_OUT, E, qd, i)
        if arch == "gpt-oss":
            add(T.ATTN_OUT, (E,), 0.3, i, suffix="bias")
            add(T.ATTN_SINKS, (s.n_head,), 2.0, i)
        # Gemma's embeddings, tied and times sqrt(E), would outweigh the
        # layers' normed outputs (every token then predicts itself) unless
        # those are as large.
        if arch == "gemma2":
            norm(T.ATTN_POST_NORM, E, i, centre=6.0)
        if arch == "gpt-oss":
            norm(T.ATTN_POST_NORM, E, i)  # gpt-oss's pre-FFN norm
        else:
            norm(T.FFN_NORM, E, i)
        if s.n_expert:
            add(T.FFN_GATE_INP, (s.n_expert, E), uniform_std(1.5 / E**0.5), i, qtype=Q.F32)
            f = s.n_ff_exp
            for t, shape in ((T.FFN_GATE_EXP, (s.n_expert, f, E)), (T.FFN_UP_EXP, (s.n_expert, f, E)),
                             (T.FFN_DOWN_EXP, (s.n_expert, E, f))):
                add(t, shape, uniform_std(1.0 / shape[-1] ** 0.5), i)
            if arch == "gpt-oss":
                add(T.FFN_GATE_INP, (s.n_expert,), 0.3, i, suffix="bias")
                for t, n in ((T.FFN_GATE_EXP, f), (T.FFN_UP_EXP, f), (T.FFN_DOWN_EXP, E)):
                    add(t, (s.n_expert, n), 0.3, i, suffix="bias", qtype=Q.F32)
        elif arch == "phi3":
            matmul(T.FFN_UP, 2 * s.n_ff, E, i)  # gate rows, then up rows
            matmul(T.FFN_DOWN, E, s.n_ff, i)
        else:
            matmul(T.FFN_GATE, s.n_ff, E, i)
            matmul(T.FFN_UP, s.n_ff, E, i)
            matmul(T.FFN_DOWN, E, s.n_ff, i)
        if arch == "gemma2":
            norm(T.FFN_POST_NORM, E, i, centre=6.0)

    # Architecture metadata, as the converter writes it.
    if arch in ("qwen2", "qwen3", "qwen3moe"):
        meta(K.Rope.FREQ_BASE, 1000000.0)
    if arch in ("qwen3", "qwen3moe", "gemma2", "gpt-oss"):
        meta(K.Attention.KEY_LENGTH, hd)
        meta(K.Attention.VALUE_LENGTH, hd)
    if s.n_expert:
        meta(K.LLM.EXPERT_COUNT, s.n_expert)
        meta(K.LLM.EXPERT_USED_COUNT, s.n_expert_used)
        meta(K.LLM.EXPERT_FEED_FORWARD_LENGTH, s.n_ff_exp)
    if arch == "gemma2":
        meta(K.LLM.ATTN_LOGIT_SOFTCAPPING, 50.0)
        meta(K.LLM.FINAL_LOGIT_SOFTCAPPING, 30.0)
        meta(K.Attention.SLIDING_WINDOW, s.n_swa)
    if arch == "mistral":
        meta(K.Rope.FREQ_BASE, 1000000.0)
        meta(K.Rope.DIMENSION_COUNT, hd)
        meta(K.LLM.VOCAB_SIZE, n_vocab)
        meta(K.Attention.SLIDING_WINDOW, s.n_swa)
    if arch == "phi3":
        # The 128k variant's LongRoPE: per-pair divisors for contexts past
        # the original one (long) and within it (short), and the magnitude
        # factor the converter derives from the two lengths. The original
        # context is small here so that tests reach both factor sets.
        orig = 256
        meta(K.Rope.FREQ_BASE, 10000.0)
        meta(K.Rope.DIMENSION_COUNT, hd)
        meta(K.Rope.SCALING_ORIG_CTX_LEN, orig)
        meta(K.Attention.SLIDING_WINDOW, 262144)
        scale = s.n_ctx / orig
        meta(K.Rope.SCALING_ATTN_FACTOR, (1 + np.log(scale) / np.log(orig)) ** 0.5)
        add(T.ROPE_FACTORS_LONG, (hd // 2,), 0, range01=(1.0, 40.0))
        add(T.ROPE_FACTORS_SHORT, (hd // 2,), 0, range01=(1.0, 1.5))
    if arch == "gpt-oss":
        meta(K.Rope.FREQ_BASE, 150000.0)
        meta(K.Attention.SLIDING_WINDOW, s.n_swa)
        meta(K.Rope.SCALING_TYPE, "yarn")
        meta(K.Rope.SCALING_FACTOR, 32.0)
        meta(K.Rope.SCALING_ORIG_CTX_LEN, 4096)
    return m


def values(t: Tensor, start: int, n: int) -> np.ndarray:
    u = splitmix_uniform(t.name, n, start)
    if t.range01 is not None:
        lo, hi = t.range01
        return lo + (u + 1) * np.float32((hi - lo) / 2)
    return u * np.float32(t.scale) + np.float32(t.offset)


def encode(t: Tensor, x: np.ndarray) -> np.ndarray:
    if t.qtype == Q.F32:
        return x.astype(np.float32)
    if t.qtype == Q.F16:
        return x.astype(np.float16)
    return gguf.quants.quantize(x, t.qtype)


def read_vocab(name: str) -> tuple[list[bytes], int]:
    """The raw `tokenizer.*` key-value records of a vocabulary fixture, and
    its token count. Copied as bytes: gguf-py's reader takes a minute over
    a 150k-token vocabulary."""
    path = os.path.join(REPO, "testdata", "tokenizer", f"ggml-vocab-{name}.gguf.gz")
    with gzip.open(path) as f:
        data = f.read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or version != 3:
        sys.exit(f"{path}: not a GGUF v3 file")
    at = 24
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(at: int, vtype: int) -> int:
        if vtype == 8:  # string
            return at + 8 + struct.unpack_from("<Q", data, at)[0]
        if vtype == 9:  # array
            sub, n = struct.unpack_from("<IQ", data, at)
            at += 12
            if sub in scalar:
                return at + n * scalar[sub]
            for _ in range(n):
                at = skip_value(at, sub)
            return at
        return at + scalar[vtype]

    records, n_tokens = [], 0
    for _ in range(n_kv):
        start = at
        klen = struct.unpack_from("<Q", data, at)[0]
        key = data[at + 8:at + 8 + klen].decode()
        at += 8 + klen
        vtype = struct.unpack_from("<I", data, at)[0]
        end = skip_value(at + 4, vtype)
        if key.startswith("tokenizer."):
            records.append(data[start:end])
        if key == "tokenizer.ggml.tokens":
            n_tokens = struct.unpack_from("<Q", data, at + 8)[0]
        at = end
    return records, n_tokens


def gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key: str, value) -> bytes:
    """One metadata record: strings, u32 counts, f32 values, bools."""
    V = gguf.GGUFValueType
    if isinstance(value, bool):
        return gguf_string(key) + struct.pack("<I?", V.BOOL, value)
    if isinstance(value, str):
        return gguf_string(key) + struct.pack("<I", V.STRING) + gguf_string(value)
    if isinstance(value, int):
        return gguf_string(key) + struct.pack("<II", V.UINT32, value)
    return gguf_string(key) + struct.pack("<If", V.FLOAT32, float(value))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("arch", choices=sorted(TINY))
    p.add_argument("out")
    p.add_argument("--shape", default="tiny", choices=["tiny", *LARGE])
    p.add_argument("--type", default=None, help="matmul weight type")
    a = p.parse_args()

    if a.shape == "tiny":
        shape = TINY[a.arch]
    else:
        arch, shape = LARGE[a.shape]
        if arch != a.arch:
            sys.exit(f"shape {a.shape} is a {arch} model")
    wtype = Q[a.type or ("F16" if a.shape != "tiny" else TINY_TYPE.get(a.arch, "Q8_0"))]
    if wtype not in FILE_TYPE:
        sys.exit(f"--type {a.type}: one of {', '.join(t.name for t in FILE_TYPE)}")

    tokenizer, n_vocab = read_vocab(VOCAB[a.arch])
    m = build(a.arch, shape, wtype, n_vocab)
    arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[m.arch]
    valid = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch_id]}

    kvs = [
        gguf_kv(K.General.ARCHITECTURE, m.arch),
        gguf_kv(K.General.NAME, f"synthetic {a.arch} {a.shape} {wtype.name}"),
        gguf_kv(K.General.FILE_TYPE, FILE_TYPE[wtype]),
        gguf_kv(K.General.QUANTIZATION_VERSION, gguf.GGML_QUANT_VERSION),
        *(gguf_kv(k, v) for k, v in m.meta),
        *tokenizer,
    ]
    infos, offset = [], 0
    for t in m.tensors:
        base = t.name.rsplit(".", 1)[0]
        generic = base.replace(base.split(".")[1], "{bid}", 1) if base.startswith("blk.") else base
        if generic not in valid:
            sys.exit(f"{t.name} is not a tensor of {m.arch} in gguf-py")
        block, type_size = gguf.GGML_QUANT_SIZES[t.qtype]
        dims = t.shape[::-1]  # GGUF order: the row length first
        info = gguf_string(t.name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        infos.append(info + struct.pack("<IQ", t.qtype, offset))
        offset += pad(int(np.prod(t.shape)) // block * type_size)

    sha = hashlib.sha256()

    class Hashed:
        """The output file, hashed as it is written."""

        def __init__(self, f):
            self.f, self.at = f, 0

        def write(self, b: bytes):
            self.f.write(b)
            sha.update(b)
            self.at += len(b)

        def tell(self) -> int:
            return self.at

    with open(a.out, "wb") as raw:
        f = Hashed(raw)
        f.write(struct.pack("<4sIQQ", b"GGUF", 3, len(m.tensors), len(kvs)))
        f.write(b"".join(kvs) + b"".join(infos))
        f.write(bytes(pad(f.tell()) - f.tell()))
        for t in m.tensors:
            # Whole rows at a time, to bound memory on the large shapes.
            cols = t.shape[-1]
            rows = int(np.prod(t.shape)) // cols
            step = max(1, (1 << 24) // cols)
            written = 0
            for r in range(0, rows, step):
                k = min(step, rows - r)
                data = encode(t, values(t, r * cols, k * cols).reshape(k, cols)).tobytes()
                f.write(data)
                written += len(data)
            f.write(bytes(pad(written) - written))
    # The tests compare this with the one their reference was recorded on.
    print(sha.hexdigest())


ALIGNMENT = 32  # GGUF's default


def pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


if __name__ == "__main__":
    main()
