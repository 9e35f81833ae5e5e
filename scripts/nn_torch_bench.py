#!/usr/bin/env python3
"""PyTorch's side of the training-speed comparison: the same models as
`smelt train cnn|rnn` (LeNet on 8x8 digits, the character LSTM), the same
batch, Adam, on random data of the same shapes; prints steps/s.

    python3 scripts/nn_torch_bench.py --model cnn --batch 32 --steps 300 [--device cuda]

scripts/bench-nn.sh runs it beside smelt in the same run.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CharLstm(nn.Module):
    def __init__(self, vocab, embed, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.fc(out.reshape(-1, out.shape[-1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["cnn", "rnn"], default="cnn")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--embed", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=96)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    if a.model == "cnn":
        model = LeNet().to(dev)
        batches = [(torch.rand(a.batch, 1, 8, 8, device=dev), torch.randint(0, 10, (a.batch,), device=dev))
                   for _ in range(16)]
    else:
        model = CharLstm(a.vocab, a.embed, a.hidden).to(dev)
        batches = [(torch.randint(0, a.vocab, (a.seq, a.batch), device=dev),
                    torch.randint(0, a.vocab, (a.seq * a.batch,), device=dev)) for _ in range(16)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        # smelt reads the loss back every step; so does this.
        return loss.item()

    for i in range(a.warmup):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(a.steps):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"torch {a.model} {dev} batch {a.batch} threads {torch.get_num_threads()}: "
          f"{a.steps / dt:.2f} steps/s")


if __name__ == "__main__":
    main()
