#!/usr/bin/python3
"""Writes PyTorch bf16-autocast references for nabla's mixed-precision parity tests.

For each case of tests/reference/ named below, the same network and inputs run in
float32 under torch.autocast('cpu', dtype=torch.bfloat16), with every matmul and
convolution output cast back to float32 at once: the placement nabla's
mixed-precision pass uses (nabla/mixed_precision.h). Loss and gradients go to
tests/bf16/reference/<case>/<var>.npy.

Run with Debian's interpreter: /usr/bin/python3 tests/bf16/bf16_reference.py
"""
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "..", "reference")
F = torch.nn.functional


def load(case):
    d = os.path.join(INPUTS, case, "inputs")
    return {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".npy")}


def params(feeds, names):
    return {k: torch.tensor(feeds[k], requires_grad=True) for k in names}


def save(case, loss, p):
    d = os.path.join(HERE, "reference", case)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "loss.npy"), loss.detach().float().numpy().reshape(1))
    for k, v in p.items():
        np.save(os.path.join(d, f"{k}@GRAD.npy"), v.grad.float().numpy())
    print(f"wrote {d}")


def mlp():
    f = load("mlp")
    p = params(f, ["w1", "b1", "w2", "b2"])
    x, y = torch.tensor(f["x"]), torch.tensor(f["label"][:, 0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = torch.tanh((x @ p["w1"]).float() + p["b1"])
        logits = (h @ p["w2"]).float() + p["b2"]
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    save("mlp", loss, p)


def cnn():
    f = load("cnn")
    names = ["conv1_w", "bn1_scale", "bn1_bias", "conv2_w", "bn2_scale", "bn2_bias", "fc1_w", "fc1_b", "fc2_w",
             "fc2_b"]
    p = params(f, names)
    x, y = torch.tensor(f["x"]), torch.tensor(f["label"][:, 0])
    n = x.shape[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x
        for i in (1, 2):
            h = F.conv2d(h, p[f"conv{i}_w"], padding=1).float()
            h = F.batch_norm(h, None, None, p[f"bn{i}_scale"], p[f"bn{i}_bias"], training=True, eps=1e-5)
            h = F.max_pool2d(F.relu(h), 2, 2)
        h = F.relu((h.reshape(n, -1) @ p["fc1_w"]).float() + p["fc1_b"])
        logits = (h @ p["fc2_w"]).float() + p["fc2_b"]
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    save("cnn", loss, p)


if __name__ == "__main__":
    mlp()
    cnn()
