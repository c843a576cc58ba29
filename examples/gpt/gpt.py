#!/usr/bin/python3
"""The character-level GPT of gpt.yaml built through nabla's Program API, and trained a few steps.

    PYTHONPATH=build/python /usr/bin/python3 examples/gpt/gpt.py [--steps 20] [--layers 3 --dim 128 --heads 4 --seq 128]

build() makes, var for var and op for op, the program make_gpt_program.py writes as YAML (the same
names, attributes and initialisers, so the two load as one program and give the same loss from the
same seed: tests/python/test_gpt.py checks both). main() appends the backward part and gpt_run.yaml's
AdamW (lr 3e-3, beta2 0.99, weight decay 0.01, clipping to global norm 1; no warm-up or cosine
schedule here) and trains on windows of the fortunes (/usr/share/games/fortunes), printing the loss.
"""
import argparse
import glob
import math
import os

import numpy as np

import nabla

VOCAB = 256


def build(layers=3, dim=128, heads=4, seq=128):
    """The GPT as a nabla.Program: tokens [-1, seq] int64 and labels [-1, seq, 1] int64 in, `loss` out."""
    assert dim % heads == 0
    head_dim = dim // heads
    p = nabla.Program()
    seeds = iter(range(1, 10000))  # one seed per random initialiser, in declaration order, as the YAML

    def normal(std):
        # The YAML writes std with 10 significant digits; the same value here keeps the programs equal.
        return {"type": "gaussian_random", "mean": 0.0, "std": float(f"{std:.10g}"), "seed": next(seeds)}

    def const(value):
        return {"type": "fill_constant", "value": value}

    def param(name, shape, init):
        p.create_var(name, shape, "float32", persistable=True, init=init)

    def layer_norm(x, name):
        param(f"{name}_scale", [dim], const(1.0))
        param(f"{name}_bias", [dim], const(0.0))
        p.append_op("layer_norm", {"X": [x], "Scale": [f"{name}_scale"], "Bias": [f"{name}_bias"]},
                    {"Y": [name], "Mean": [f"{name}_mean"], "Variance": [f"{name}_var"]},
                    {"begin_norm_axis": 2, "epsilon": 1e-5})
        return name

    def linear(x, name, fan_in, fan_out, std):
        param(f"{name}_w", [fan_in, fan_out], normal(std))
        param(f"{name}_b", [fan_out], const(0.0))
        p.append_op("mul", {"X": [x], "Y": [f"{name}_w"]}, {"Out": [f"{name}_xw"]}, {"x_num_col_dims": 2})
        p.append_op("elementwise_add", {"X": [f"{name}_xw"], "Y": [f"{name}_b"]}, {"Out": [name]}, {"axis": -1})
        return name

    std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
    p.create_var("tokens", [-1, seq], "int64", stop_gradient=True)
    p.create_var("labels", [-1, seq, 1], "int64", stop_gradient=True)
    param("wte", [VOCAB, dim], normal(std))
    param("wpe", [seq, dim], normal(std))
    p.append_op("lookup_table_v2", {"Ids": ["tokens"], "W": ["wte"]}, {"Out": ["tok_emb"]})
    p.append_op("elementwise_add", {"X": ["tok_emb"], "Y": ["wpe"]}, {"Out": ["h0"]}, {"axis": -1})
    h = "h0"
    for i in range(layers):
        pre = f"l{i}"
        x = layer_norm(h, f"{pre}_ln1")
        qkv = []
        for part in ("q", "k", "v"):
            lin = linear(x, f"{pre}_{part}", dim, dim, std)
            p.append_op("reshape", {"X": [lin]}, {"Out": [f"{pre}_{part}h"]}, {"shape": [0, 0, heads, head_dim]})
            qkv.append(f"{pre}_{part}h")
        p.append_op("flash_attn", {"q": [qkv[0]], "k": [qkv[1]], "v": [qkv[2]]},
                    {"out": [f"{pre}_atth"], "softmax_lse": [f"{pre}_lse"]}, {"causal": True})
        p.append_op("reshape", {"X": [f"{pre}_atth"]}, {"Out": [f"{pre}_att"]}, {"shape": [0, 0, dim]})
        proj = linear(f"{pre}_att", f"{pre}_proj", dim, dim, proj_std)
        p.append_op("elementwise_add", {"X": [h], "Y": [proj]}, {"Out": [f"{pre}_h1"]})
        x = layer_norm(f"{pre}_h1", f"{pre}_ln2")
        fc = linear(x, f"{pre}_fc", dim, 4 * dim, std)
        p.append_op("gelu", {"X": [fc]}, {"Out": [f"{pre}_gelu"]})
        out = linear(f"{pre}_gelu", f"{pre}_out", 4 * dim, dim, proj_std)
        p.append_op("elementwise_add", {"X": [f"{pre}_h1"], "Y": [out]}, {"Out": [f"{pre}_h2"]})
        h = f"{pre}_h2"
    x = layer_norm(h, "lnf")
    p.append_op("matmul", {"X": [x], "Y": ["wte"]}, {"Out": ["logits"]}, {"transpose_Y": True})
    p.append_op("softmax_with_cross_entropy", {"Logits": ["logits"], "Label": ["labels"]},
                {"Softmax": ["prob"], "Loss": ["ce"]})
    p.append_op("mean", {"X": ["ce"]}, {"Out": ["loss"]})
    return p


def append_training(program):
    """The backward part and gpt_run.yaml's AdamW (constant rate), as `nabla run` appends them."""
    param_grads = nabla.append_backward(program, "loss")
    nabla.append_optimizer(program, param_grads, type="adamw", lr=0.003, beta2=0.99, weight_decay=0.01,
                           clip_global_norm=1.0)
    return program


def fortunes(pattern="/usr/share/games/fortunes/*"):
    """The fortune files' bytes, one array per file (the .dat indexes and .u8 links left out)."""
    files = sorted(f for f in glob.glob(pattern)
                   if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
    return [np.frombuffer(open(f, "rb").read(), dtype=np.uint8) for f in files]


def batches(texts, batch, seq, rng):
    """Random windows of seq + 1 bytes: (tokens [batch, seq], labels [batch, seq, 1]), forever."""
    texts = [t for t in texts if len(t) > seq + 1]
    while True:
        rows = []
        for _ in range(batch):
            t = texts[rng.integers(len(texts))]
            at = rng.integers(len(t) - seq - 1)
            rows.append(t[at:at + seq + 1].astype(np.int64))
        w = np.stack(rows)
        yield w[:, :-1].copy(), w[:, 1:, None].copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    program = append_training(build(a.layers, a.dim, a.heads, a.seq))
    exe = nabla.Executor(threads=a.threads, seed=a.seed)
    data = batches(fortunes(), a.batch, a.seq, np.random.default_rng(a.seed))
    for step in range(a.steps):
        tokens, labels = next(data)
        (loss,) = exe.run(program, feed={"tokens": tokens, "labels": labels}, fetch_list=["loss"])
        print(f"step {step + 1}: loss {float(loss.reshape(-1)[0]):.4f}", flush=True)


if __name__ == "__main__":
    main()
