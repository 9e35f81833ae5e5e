#!/usr/bin/env python3
"""Records PyTorch's outputs and gradients of smelt-nn's primitives on
shared random inputs, as testdata/nn/torch_ref.safetensors (F32).

For each case NAME the file holds NAME.in.<input>, NAME.out (forward),
NAME.dy (a random upstream gradient) and NAME.grad.<input> (the gradient of
sum(out * dy)); optimizer cases hold the parameter after each step.
crates/smelt-nn/tests/torch_ref.rs replays them; it needs no PyTorch.

    PYTHONPATH=<dir with torch> python3 scripts/nn_torch_ref.py
"""
import json
import struct
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_default_dtype(torch.float32)
tensors = {}


def put(name, t):
    tensors[name] = t.detach().clone().contiguous().float()


def case(name, fn, inputs, grads=True, attrs=None):
    """fn(*inputs) -> out; records inputs, out, dy and input grads."""
    ins = [x.clone().requires_grad_(grads and x.is_floating_point() and not k.startswith("ids"))
           for k, x in inputs.items()]
    out = fn(*ins)
    put(f"{name}.out", out)
    for (k, x) in zip(inputs, inputs.values()):
        put(f"{name}.in.{k}", x)
    if grads:
        dy = torch.randn_like(out)
        put(f"{name}.dy", dy)
        (out * dy).sum().backward()
        for k, x in zip(inputs, ins):
            if x.grad is not None:
                put(f"{name}.grad.{k}", x.grad)


r = torch.randn
case("conv2d_groups", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
     {"x": r(2, 4, 7, 6), "w": r(6, 2, 3, 3), "b": r(6)})
case("conv2d_dilated", lambda x, w: F.conv2d(x, w, None, stride=1, padding=2, dilation=2),
     {"x": r(1, 3, 9, 9), "w": r(4, 3, 3, 3)})
case("conv2d_depthwise", lambda x, w: F.conv2d(x, w, None, padding=1, groups=4),
     {"x": r(2, 4, 6, 6), "w": r(4, 1, 3, 3)})
case("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     {"x": r(2, 4, 5, 5), "w": r(4, 3, 3, 3), "b": r(3)})
case("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), {"x": r(2, 3, 7, 7)})
case("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1), {"x": r(2, 3, 7, 7)})
case("global_avg_pool", lambda x: x.mean(dim=(2, 3)), {"x": r(2, 3, 5, 5)})
case("batch_norm_train", lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True, eps=1e-5),
     {"x": r(4, 3, 5, 5), "gamma": r(3), "beta": r(3)})
rm, rv = r(3), torch.rand(3) + 0.5
put("batch_norm_eval.in.running_mean", rm)
put("batch_norm_eval.in.running_var", rv)
case("batch_norm_eval", lambda x, g, b: F.batch_norm(x, rm, rv, g, b, training=False, eps=1e-5),
     {"x": r(4, 3, 5, 5), "gamma": r(3), "beta": r(3)})
# Running statistics after one training step (momentum 0.1), from 0 and 1.
x = r(4, 3, 5, 5)
run_m, run_v = torch.zeros(3), torch.ones(3)
F.batch_norm(x, run_m, run_v, None, None, training=True, momentum=0.1)
put("batch_norm_running.in.x", x)
put("batch_norm_running.mean", run_m)
put("batch_norm_running.var", run_v)
case("layer_norm", lambda x, g, b: F.layer_norm(x, (8,), g, b, eps=1e-5),
     {"x": r(3, 5, 8), "gamma": r(8), "beta": r(8)})
case("group_norm", lambda x, g, b: F.group_norm(x, 3, g, b, eps=1e-5),
     {"x": r(2, 6, 4, 4), "gamma": r(6), "beta": r(6)})
for act in ["relu", "gelu", "silu", "sigmoid", "tanh"]:
    fn = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[act]
    case(act, fn, {"x": r(64) * 3})
case("softmax", lambda x: F.softmax(x, dim=-1), {"x": r(4, 10) * 2})
case("linear", lambda x, w, b: F.linear(x, w, b), {"x": r(5, 7), "w": r(3, 7), "b": r(3)})

T, B, I, H = 6, 3, 5, 4
lstm = torch.nn.LSTM(I, H)
def run_lstm(x, wi, wh, bi, bh, h0, c0):
    out = torch._VF.lstm(x, (h0[None], c0[None]), [wi, wh, bi, bh], True, 1, 0.0, False, False, False)[0]
    return out
case("lstm", run_lstm, {"x": r(T, B, I), "w_ih": r(4 * H, I) * 0.5, "w_hh": r(4 * H, H) * 0.5,
                        "b_ih": r(4 * H) * 0.5, "b_hh": r(4 * H) * 0.5, "h0": r(B, H), "c0": r(B, H)})
def run_gru(x, wi, wh, bi, bh, h0):
    out = torch._VF.gru(x, h0[None], [wi, wh, bi, bh], True, 1, 0.0, False, False, False)[0]
    return out
case("gru", run_gru, {"x": r(T, B, I), "w_ih": r(3 * H, I) * 0.5, "w_hh": r(3 * H, H) * 0.5,
                      "b_ih": r(3 * H) * 0.5, "b_hh": r(3 * H) * 0.5, "h0": r(B, H)})
ids = torch.tensor([3, 0, 9, 3, 7, 1, 3])
put("embedding.in.ids", ids.float())
case("embedding", lambda t: F.embedding(ids, t), {"table": r(10, 4)})
labels = torch.tensor([0, 4, 2, 2, 1, 3])
put("cross_entropy.in.labels", labels.float())
case("cross_entropy", lambda x: F.cross_entropy(x, labels), {"logits": r(6, 5) * 2})
case("mse", lambda a, b: F.mse_loss(a, b), {"a": r(4, 5), "b": r(4, 5)})

# Optimizers: three steps from the same parameter on recorded gradients.
p0 = r(12)
grads = [r(12) for _ in range(3)]
put("optim.p0", p0)
for i, g in enumerate(grads):
    put(f"optim.grad{i}", g)
for name, make in [
    ("sgd", lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("sgd_nesterov", lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.01)),
    ("adamw", lambda p: torch.optim.AdamW([p], lr=0.01, weight_decay=0.1)),
]:
    p = torch.nn.Parameter(p0.clone())
    opt = make(p)
    for i, g in enumerate(grads):
        p.grad = g.clone()
        opt.step()
        put(f"{name}.step{i}", p)

# safetensors, written by hand (F32 only).
header, blobs, offset = {}, [], 0
for k in sorted(tensors):
    b = tensors[k].numpy().astype("<f4").tobytes()
    header[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [offset, offset + len(b)]}
    blobs.append(b)
    offset += len(b)
header["__metadata__"] = {"torch": torch.__version__}
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
out = sys.argv[1] if len(sys.argv) > 1 else "testdata/nn/torch_ref.safetensors"
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
print(f"{len(tensors)} tensors, {offset} bytes -> {out}")
