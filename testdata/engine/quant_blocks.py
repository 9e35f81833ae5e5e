#!/usr/bin/env python3
"""Quantized weights, their dequantization by the `gguf` package, and
matmuls computed the way ggml's CPU backend computes them: the independent
references for smelt's fast CPU block decoders and Q8 matmuls.

usage: quant_blocks.py OUT_DIR ROWS COLS N TYPE...
Writes, little-endian:
  OUT_DIR/x.f32       N × COLS activations
  OUT_DIR/TYPE.q      the raw GGUF blocks of a ROWS × COLS weight
  OUT_DIR/TYPE.f32    gguf.quants.dequantize of them
  OUT_DIR/TYPE.mm     N × ROWS: x · wᵀ with x rounded to Q8 blocks and
                      integer block dot products (ggml's vec_dot_type path),
                      summed in float64
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

out, rows, cols, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(7)
w = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 2.0, (rows, 1))).astype(np.float32)
x = (rng.standard_normal((n, cols)) * rng.uniform(0.1, 5.0, (n, 1))).astype(np.float32)
x.astype("<f4").tofile(f"{out}/x.f32")

# Activations to Q8 blocks as ggml's AVX2 quantize_row_q8_0/q8_1 do it, in
# float32: id = 127/amax, q = round-half-even(x·id), d = f16(amax/127),
# s = f16(amax/127 · Σq).
xb = x.reshape(n, -1, 32)
amax = np.abs(xb).max(-1, keepdims=True)
with np.errstate(divide="ignore"):
    inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
xq = np.round(xb * inv).astype(np.int64)
d32 = (amax / np.float32(127)).astype(np.float32)[..., 0]
xd = d32.astype(np.float16).astype(np.float64)
xs = (d32 * xq.sum(-1).astype(np.float32)).astype(np.float16).astype(np.float64)

for name in sys.argv[5:]:
    qtype = GGMLQuantizationType[name]
    q = quantize(w, qtype)
    q.tofile(f"{out}/{name}.q")
    dequantize(q, qtype).astype("<f4").tofile(f"{out}/{name}.f32")
    # Each weight block's integer quants, scale and minimum, from its bytes.
    blocks = q.reshape(rows, -1, q.shape[1] * 32 // cols)
    wd = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    wm = np.zeros_like(wd)
    if name == "Q8_0":
        wq = blocks[..., 2:34].view(np.int8).astype(np.int64)
    else:
        nib = blocks[..., 2:18] if name == "Q4_0" else blocks[..., 4:20]
        wq = np.concatenate([nib & 15, nib >> 4], -1).astype(np.int64)
        if name == "Q4_0":
            wq -= 8
        else:
            wm = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    isum = np.einsum("nbk,mbk->nmb", xq, wq).astype(np.float64)
    mm = (isum * xd[:, None, :] * wd[None, :, :]).sum(-1) + (xs[:, None, :] * wm[None, :, :]).sum(-1)
    mm.astype("<f4").tofile(f"{out}/{name}.mm")
