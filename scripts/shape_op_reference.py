#!/usr/bin/python3
"""Writes tests/reference/shape_ops/: a small network of the shape,
elementwise and activation ops, its loss and gradients from PyTorch, for the
parity test (`nabla exec --backward`). The ops' forward rows are in the op
test table (scripts/op_table_reference.py).

Run with Debian's interpreter: /usr/bin/python3 scripts/shape_op_reference.py
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import f32, save_case, t64  # noqa: E402

F = torch.nn.functional


def network(rng):
    """Several §6 ops in one program whose loss and gradients PyTorch computes."""
    n, d, h, c = 4, 6, 5, 3
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, c, (n, 1)).astype(np.int64)
    w = {
        "w1": (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(h)).astype(np.float32),
        "w2": (rng.standard_normal((h, c)) / np.sqrt(h)).astype(np.float32),
        "floor": (0.1 * rng.standard_normal(h)).astype(np.float32),
        "cap": (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32),
        "expo": rng.uniform(1.0, 2.0, (1, 1)).astype(np.float32),
        "table": rng.standard_normal((7, d)).astype(np.float32),
    }
    idx = np.array([6, 2, 2, 0], dtype=np.int64)
    tw = {k: t64(v) for k, v in w.items()}
    xt = torch.tensor(x, dtype=torch.float64)
    e = torch.index_select(tw["table"], 0, torch.tensor(idx))             # gather
    z = (xt + e) @ tw["w1"] + tw["b1"]
    a = F.gelu(z)                                                          # gelu
    a = torch.maximum(a, tw["floor"])                                      # elementwise_max, axis 1
    a = torch.minimum(a, tw["cap"])                                        # elementwise_min, axis 1
    a = F.leaky_relu(a, float(np.float32(0.02)))                                             # leaky_relu
    s = torch.stack([a, F.gelu(z, approximate="tanh")], 1)                 # stack -> [n, 2, h]
    s = s[:, :, 1:]                                                        # slice -> [n, 2, h-1]
    u = s.unsqueeze(1).squeeze(1)                                          # unsqueeze / squeeze
    f = u.reshape(n, -1)                                                   # flatten -> [n, 2(h-1)]
    f = f[:, :h] + f[:, h - 2:2 * h - 2].repeat(1, 1)                      # slice, expand(1,1)
    r = torch.pow(torch.abs(f) + 1.0, tw["expo"])                          # elementwise_pow
    logits = r @ tw["w2"]
    lp = F.log_softmax(logits, -1)                                         # log_softmax
    onehot = F.one_hot(torch.tensor(y[:, 0]), c).to(torch.float64)         # one_hot
    loss = -(lp * onehot).sum() / n
    loss.backward()
    ops = f"""      - {{type: gather, inputs: {{X: [table], Index: [idx]}}, outputs: {{Out: [e]}}}}
      - {{type: elementwise_add, inputs: {{X: [x], Y: [e]}}, outputs: {{Out: [xe]}}}}
      - {{type: mul, inputs: {{X: [xe], Y: [w1]}}, outputs: {{Out: [xw]}}}}
      - {{type: elementwise_add, inputs: {{X: [xw], Y: [b1]}}, outputs: {{Out: [z]}}, attrs: {{axis: 1}}}}
      - {{type: gelu, inputs: {{X: [z]}}, outputs: {{Out: [g]}}}}
      - {{type: elementwise_max, inputs: {{X: [g], Y: [floor]}}, outputs: {{Out: [a1]}}, attrs: {{axis: 1}}}}
      - {{type: elementwise_min, inputs: {{X: [a1], Y: [cap]}}, outputs: {{Out: [a2]}}, attrs: {{axis: 1}}}}
      - {{type: leaky_relu, inputs: {{X: [a2]}}, outputs: {{Out: [a3]}}}}
      - {{type: gelu, inputs: {{X: [z]}}, outputs: {{Out: [gt]}}, attrs: {{approximate: true}}}}
      - {{type: stack, inputs: {{X: [a3, gt]}}, outputs: {{Y: [s]}}, attrs: {{axis: 1}}}}
      - {{type: slice, inputs: {{Input: [s]}}, outputs: {{Out: [s1]}}, attrs: {{axes: [-1], starts: [1], ends: [100]}}}}
      - {{type: unsqueeze, inputs: {{X: [s1]}}, outputs: {{Out: [u1]}}, attrs: {{axes: [1]}}}}
      - {{type: squeeze, inputs: {{X: [u1]}}, outputs: {{Out: [u2]}}, attrs: {{axes: [1]}}}}
      - {{type: flatten, inputs: {{X: [u2]}}, outputs: {{Out: [f]}}}}
      - {{type: slice, inputs: {{Input: [f]}}, outputs: {{Out: [fa]}}, attrs: {{axes: [1], starts: [0], ends: [{h}]}}}}
      - {{type: slice, inputs: {{Input: [f]}}, outputs: {{Out: [fb0]}}, attrs: {{axes: [1], starts: [{h - 2}], ends: [{2 * h - 2}]}}}}
      - {{type: expand, inputs: {{X: [fb0]}}, outputs: {{Out: [fb]}}, attrs: {{expand_times: [1, 1]}}}}
      - {{type: elementwise_add, inputs: {{X: [fa], Y: [fb]}}, outputs: {{Out: [f2]}}}}
      - {{type: abs, inputs: {{X: [f2]}}, outputs: {{Out: [fabs]}}}}
      - {{type: scale, inputs: {{X: [fabs]}}, outputs: {{Out: [base]}}, attrs: {{bias: 1.0}}}}
      - {{type: elementwise_pow, inputs: {{X: [base], Y: [expo]}}, outputs: {{Out: [r]}}}}
      - {{type: mul, inputs: {{X: [r], Y: [w2]}}, outputs: {{Out: [logits]}}}}
      - {{type: log_softmax, inputs: {{X: [logits]}}, outputs: {{Out: [lp]}}}}
      - {{type: one_hot, inputs: {{X: [label]}}, outputs: {{Out: [onehot]}}, attrs: {{depth: {c}}}}}
      - {{type: elementwise_mul, inputs: {{X: [lp], Y: [onehot]}}, outputs: {{Out: [picked]}}}}
      - {{type: reduce_sum, inputs: {{X: [picked]}}, outputs: {{Out: [total]}}, attrs: {{reduce_all: true}}}}
      - {{type: scale, inputs: {{X: [total]}}, outputs: {{Out: [loss]}}, attrs: {{scale: {-1.0 / n}}}}}
      - {{type: arg_max, inputs: {{X: [logits]}}, outputs: {{Out: [pred]}}, attrs: {{axis: -1}}}}
"""
    params = "".join(f"      {k}: {{shape: {list(v.shape)}, dtype: float32, persistable: true}}\n" for k, v in w.items())
    program = f"""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {{shape: [-1, {d}], dtype: float32, stop_gradient: true}}
      label: {{shape: [-1, 1], dtype: int64}}
      idx: {{shape: [-1], dtype: int64}}
{params}    ops:
{ops}"""
    expected = {"loss": f32(loss).reshape(1)}
    expected.update({f"{k}@GRAD": f32(v.grad) for k, v in tw.items()})
    save_case("shape_ops", program, "loss", dict(x=x, label=y, idx=idx, **w), expected)


def main():
    network(np.random.default_rng(20261125))
    return 0


if __name__ == "__main__":
    sys.exit(main())
