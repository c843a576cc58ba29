#!/usr/bin/python3
"""Writes gpt.yaml, the character-level GPT that gpt_run.yaml trains.

    /usr/bin/python3 examples/gpt/make_gpt_program.py [--layers 3 --dim 128 --heads 4 --seq 128] [-o FILE]

Byte tokens (vocabulary 256) -> token embedding (lookup_table_v2) + position
embedding -> `layers` pre-norm blocks (layer_norm, causal multi-head
attention through flash_attn, output projection, residual; layer_norm, a
4x gelu MLP, residual) -> final layer_norm -> logits tied to the token
embedding (matmul with transpose_Y) -> softmax_with_cross_entropy -> mean.
Initialisation as GPT-2: every weight N(0, 0.02), the projections that
write into the residual stream N(0, 0.02 / sqrt(2 * layers)), biases 0,
layer_norm scales 1. gpt_torch.py builds the same model in PyTorch.
"""
import argparse
import math
import os

VOCAB = 256


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("-o", "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt.yaml"))
    a = ap.parse_args()
    open(a.out, "w").write(program(a.layers, a.dim, a.heads, a.seq))
    print(a.out)


def program(layers, dim, heads, seq):
    assert dim % heads == 0
    head_dim = dim // heads
    seeds = iter(range(1, 10000))
    vars_, ops = [], []

    def var(name, shape, dtype="float32", init=None, stop_gradient=False):
        parts = [f"shape: [{', '.join(map(str, shape))}]", f"dtype: {dtype}"]
        if init:
            parts.append("persistable: true")
            parts.append(f"init: {init}")
        if stop_gradient:
            parts.append("stop_gradient: true")
        vars_.append(f"      {name}: {{{', '.join(parts)}}}")

    def normal(std):
        return f"{{type: gaussian_random, mean: 0.0, std: {std:.10g}, seed: {next(seeds)}}}"

    def const(value):
        return f"{{type: fill_constant, value: {value}}}"

    def op(type_, inputs, outputs, attrs=None):
        ins = ", ".join(f"{k}: [{', '.join(v)}]" for k, v in inputs.items())
        outs = ", ".join(f"{k}: [{', '.join(v)}]" for k, v in outputs.items())
        s = f"      - {{type: {type_}, inputs: {{{ins}}}, outputs: {{{outs}}}"
        if attrs:
            s += ", attrs: {" + ", ".join(f"{k}: {v}" for k, v in attrs.items()) + "}"
        ops.append(s + "}")

    def layer_norm(x, name):
        var(f"{name}_scale", [dim], init=const(1.0))
        var(f"{name}_bias", [dim], init=const(0.0))
        op("layer_norm", {"X": [x], "Scale": [f"{name}_scale"], "Bias": [f"{name}_bias"]},
           {"Y": [name], "Mean": [f"{name}_mean"], "Variance": [f"{name}_var"]},
           {"begin_norm_axis": 2, "epsilon": 1e-5})
        return name

    def linear(x, name, fan_in, fan_out, std):
        var(f"{name}_w", [fan_in, fan_out], init=normal(std))
        var(f"{name}_b", [fan_out], init=const(0.0))
        op("mul", {"X": [x], "Y": [f"{name}_w"]}, {"Out": [f"{name}_xw"]}, {"x_num_col_dims": 2})
        op("elementwise_add", {"X": [f"{name}_xw"], "Y": [f"{name}_b"]}, {"Out": [name]}, {"axis": -1})
        return name

    std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
    var("tokens", [-1, seq], "int64", stop_gradient=True)
    var("labels", [-1, seq, 1], "int64", stop_gradient=True)
    var("wte", [VOCAB, dim], init=normal(std))
    var("wpe", [seq, dim], init=normal(std))
    op("lookup_table_v2", {"Ids": ["tokens"], "W": ["wte"]}, {"Out": ["tok_emb"]})
    op("elementwise_add", {"X": ["tok_emb"], "Y": ["wpe"]}, {"Out": ["h0"]}, {"axis": -1})
    h = "h0"
    for i in range(layers):
        p = f"l{i}"
        x = layer_norm(h, f"{p}_ln1")
        qkv = []
        for part in ("q", "k", "v"):
            lin = linear(x, f"{p}_{part}", dim, dim, std)
            op("reshape", {"X": [lin]}, {"Out": [f"{p}_{part}h"]}, {"shape": f"[0, 0, {heads}, {head_dim}]"})
            qkv.append(f"{p}_{part}h")
        op("flash_attn", {"q": [qkv[0]], "k": [qkv[1]], "v": [qkv[2]]},
           {"out": [f"{p}_atth"], "softmax_lse": [f"{p}_lse"]}, {"causal": "true"})
        op("reshape", {"X": [f"{p}_atth"]}, {"Out": [f"{p}_att"]}, {"shape": f"[0, 0, {dim}]"})
        proj = linear(f"{p}_att", f"{p}_proj", dim, dim, proj_std)
        op("elementwise_add", {"X": [h], "Y": [proj]}, {"Out": [f"{p}_h1"]})
        x = layer_norm(f"{p}_h1", f"{p}_ln2")
        fc = linear(x, f"{p}_fc", dim, 4 * dim, std)
        op("gelu", {"X": [fc]}, {"Out": [f"{p}_gelu"]})
        out = linear(f"{p}_gelu", f"{p}_out", 4 * dim, dim, proj_std)
        op("elementwise_add", {"X": [f"{p}_h1"], "Y": [out]}, {"Out": [f"{p}_h2"]})
        h = f"{p}_h2"
    x = layer_norm(h, "lnf")
    op("matmul", {"X": [x], "Y": ["wte"]}, {"Out": ["logits"]}, {"transpose_Y": "true"})
    op("softmax_with_cross_entropy", {"Logits": ["logits"], "Label": ["labels"]},
       {"Softmax": ["prob"], "Loss": ["ce"]})
    op("mean", {"X": ["ce"]}, {"Out": ["loss"]})
    head = (f"# A character-level GPT: {layers} pre-norm blocks, D {dim}, {heads} heads of {head_dim}, T {seq},\n"
            f"# byte vocabulary ({VOCAB}), logits tied to the token embedding. Written by\n"
            f"# make_gpt_program.py --layers {layers} --dim {dim} --heads {heads} --seq {seq};\n"
            f"# gpt_run.yaml trains it, gpt_torch.py is the same model in PyTorch.\n")
    return (head + "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + "\n".join(vars_) +
            "\n    ops:\n" + "\n".join(ops) + "\n")


if __name__ == "__main__":
    main()
