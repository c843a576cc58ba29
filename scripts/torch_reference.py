#!/usr/bin/python3
"""Writes PyTorch reference cases for nabla's gradient parity tests.

Each case is a folder under tests/reference/<name>/ with
  program.yaml      the network as a nabla program (SPEC §2)
  case.yaml         loss var, feeds (var -> file), fetched gradients (var -> file)
  inputs/*.npy      feeds, parameters included (a feed may set a parameter)
  expected/*.npy    PyTorch's loss and gradients, computed in float64 and stored
                    as float32 so nabla's float32 run is compared with the exact value

Run with Debian's interpreter: /usr/bin/python3 scripts/torch_reference.py
"""
import os
import sys

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference")


def save_case(name, program, loss, feeds, grads):
    """feeds: var -> np array; grads: var -> torch tensor (requires_grad, after backward)."""
    d = os.path.join(ROOT, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    with open(os.path.join(d, "program.yaml"), "w") as f:
        f.write(program)
    lines = [f"loss: {loss}", "feeds:"]
    for var, arr in feeds.items():
        np.save(os.path.join(d, "inputs", f"{var}.npy"), arr)
        lines.append(f"  {var}: inputs/{var}.npy")
    lines.append("expected:")
    for var, arr in grads.items():
        np.save(os.path.join(d, "expected", f"{var}.npy"), arr)
        lines.append(f"  '{var}': expected/{var}.npy")
    with open(os.path.join(d, "case.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {d}")


def t64(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def f32(t):
    return t.detach().numpy().astype(np.float32)


def softmax_regression(rng):
    n, dim, classes = 16, 20, 5
    x = rng.standard_normal((n, dim)).astype(np.float32)
    y = rng.integers(0, classes, size=(n, 1)).astype(np.int64)
    w = (0.1 * rng.standard_normal((dim, classes))).astype(np.float32)
    b = (0.1 * rng.standard_normal((classes,))).astype(np.float32)
    tw, tb = t64(w), t64(b)
    # The seed post also takes the gradient of the input X and of the logits
    # Z; the eager tests check those (tests/eager). The program keeps x a
    # feed, so they are extra files, not in case.yaml's `expected:`.
    tx = t64(x)
    logits = tx @ tw + tb
    logits.retain_grad()
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y[:, 0]))
    loss.backward()
    program = f"""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {{shape: [-1, {dim}], dtype: float32, stop_gradient: true}}
      label: {{shape: [-1, 1], dtype: int64}}
      w: {{shape: [{dim}, {classes}], dtype: float32, persistable: true}}
      b: {{shape: [{classes}], dtype: float32, persistable: true}}
    ops:
      - {{type: mul, inputs: {{X: [x], Y: [w]}}, outputs: {{Out: [xw]}}}}
      - {{type: elementwise_add, inputs: {{X: [xw], Y: [b]}}, outputs: {{Out: [logits]}}, attrs: {{axis: 1}}}}
      - type: softmax_with_cross_entropy
        inputs: {{Logits: [logits], Label: [label]}}
        outputs: {{Softmax: [prob], Loss: [ce]}}
      - {{type: mean, inputs: {{X: [ce]}}, outputs: {{Out: [loss]}}}}
"""
    save_case("softmax_regression", program, "loss", {"x": x, "label": y, "w": w, "b": b},
              {"loss": f32(loss).reshape(1), "w@GRAD": f32(tw.grad), "b@GRAD": f32(tb.grad)})
    d = os.path.join(ROOT, "softmax_regression", "expected")
    np.save(os.path.join(d, "x@GRAD.npy"), f32(tx.grad))
    np.save(os.path.join(d, "logits@GRAD.npy"), f32(logits.grad))


def mlp(rng):
    n, dim, hidden, classes = 16, 24, 32, 6
    x = rng.standard_normal((n, dim)).astype(np.float32)
    y = rng.integers(0, classes, size=(n, 1)).astype(np.int64)
    w1 = (rng.standard_normal((dim, hidden)) / np.sqrt(dim)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal((hidden,))).astype(np.float32)
    w2 = (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal((classes,))).astype(np.float32)
    tw1, tb1, tw2, tb2 = t64(w1), t64(b1), t64(w2), t64(b2)
    h = torch.tanh(torch.tensor(x, dtype=torch.float64) @ tw1 + tb1)
    logits = h @ tw2 + tb2
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y[:, 0]))
    loss.backward()
    program = f"""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {{shape: [-1, {dim}], dtype: float32, stop_gradient: true}}
      label: {{shape: [-1, 1], dtype: int64}}
      w1: {{shape: [{dim}, {hidden}], dtype: float32, persistable: true}}
      b1: {{shape: [{hidden}], dtype: float32, persistable: true}}
      w2: {{shape: [{hidden}, {classes}], dtype: float32, persistable: true}}
      b2: {{shape: [{classes}], dtype: float32, persistable: true}}
    ops:
      - {{type: mul, inputs: {{X: [x], Y: [w1]}}, outputs: {{Out: [xw1]}}}}
      - {{type: elementwise_add, inputs: {{X: [xw1], Y: [b1]}}, outputs: {{Out: [z1]}}, attrs: {{axis: 1}}}}
      - {{type: tanh, inputs: {{X: [z1]}}, outputs: {{Out: [h1]}}}}
      - {{type: mul, inputs: {{X: [h1], Y: [w2]}}, outputs: {{Out: [hw2]}}}}
      - {{type: elementwise_add, inputs: {{X: [hw2], Y: [b2]}}, outputs: {{Out: [logits]}}, attrs: {{axis: 1}}}}
      - type: softmax_with_cross_entropy
        inputs: {{Logits: [logits], Label: [label]}}
        outputs: {{Softmax: [prob], Loss: [ce]}}
      - {{type: mean, inputs: {{X: [ce]}}, outputs: {{Out: [loss]}}}}
"""
    save_case("mlp", program, "loss", {"x": x, "label": y, "w1": w1, "b1": b1, "w2": w2, "b2": b2},
              {"loss": f32(loss).reshape(1), "w1@GRAD": f32(tw1.grad), "b1@GRAD": f32(tb1.grad),
               "w2@GRAD": f32(tw2.grad), "b2@GRAD": f32(tb2.grad)})


def rnn(rng):
    """The seed post's unrolled RNN: h_t = tanh(concat(x_t, h_{t-1}) W + b)."""
    n, steps, dim, hidden, classes = 8, 6, 5, 12, 4
    xs = [rng.standard_normal((n, dim)).astype(np.float32) for _ in range(steps)]
    y = rng.integers(0, classes, size=(n, 1)).astype(np.int64)
    h0 = np.zeros((n, hidden), dtype=np.float32)
    w = (rng.standard_normal((dim + hidden, hidden)) / np.sqrt(dim + hidden)).astype(np.float32)
    b = (0.1 * rng.standard_normal((hidden,))).astype(np.float32)
    v = (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    c = (0.1 * rng.standard_normal((classes,))).astype(np.float32)
    tw, tb, tv, tc = t64(w), t64(b), t64(v), t64(c)
    h = torch.tensor(h0, dtype=torch.float64)
    for t in range(steps):
        h = torch.tanh(torch.cat([torch.tensor(xs[t], dtype=torch.float64), h], dim=1) @ tw + tb)
    logits = h @ tv + tc
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y[:, 0]))
    loss.backward()
    vars_ = [f"      x{t}: {{shape: [-1, {dim}], dtype: float32, stop_gradient: true}}" for t in range(steps)]
    vars_ += [f"      h0: {{shape: [-1, {hidden}], dtype: float32, stop_gradient: true}}",
              "      label: {shape: [-1, 1], dtype: int64}",
              f"      w: {{shape: [{dim + hidden}, {hidden}], dtype: float32, persistable: true}}",
              f"      b: {{shape: [{hidden}], dtype: float32, persistable: true}}",
              f"      v: {{shape: [{hidden}, {classes}], dtype: float32, persistable: true}}",
              f"      c: {{shape: [{classes}], dtype: float32, persistable: true}}"]
    ops = []
    for t in range(steps):
        ops.append(f"      - {{type: concat, inputs: {{X: [x{t}, h{t}]}}, outputs: {{Out: [xh{t}]}}, attrs: {{axis: 1}}}}")
        ops.append(f"      - {{type: mul, inputs: {{X: [xh{t}], Y: [w]}}, outputs: {{Out: [z{t}]}}}}")
        ops.append(f"      - {{type: elementwise_add, inputs: {{X: [z{t}], Y: [b]}}, outputs: {{Out: [a{t}]}}, attrs: {{axis: 1}}}}")
        ops.append(f"      - {{type: tanh, inputs: {{X: [a{t}]}}, outputs: {{Out: [h{t + 1}]}}}}")
    ops.append(f"      - {{type: mul, inputs: {{X: [h{steps}], Y: [v]}}, outputs: {{Out: [hv]}}}}")
    ops.append("      - {type: elementwise_add, inputs: {X: [hv], Y: [c]}, outputs: {Out: [logits]}, attrs: {axis: 1}}")
    ops.append("      - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]}, "
               "outputs: {Softmax: [prob], Loss: [ce]}}")
    ops.append("      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}")
    program = ("format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + "\n".join(vars_) +
               "\n    ops:\n" + "\n".join(ops) + "\n")
    feeds = {f"x{t}": xs[t] for t in range(steps)}
    feeds.update({"h0": h0, "label": y, "w": w, "b": b, "v": v, "c": c})
    expected = {"loss": f32(loss).reshape(1), "w@GRAD": f32(tw.grad), "b@GRAD": f32(tb.grad),
                "v@GRAD": f32(tv.grad), "c@GRAD": f32(tc.grad)}
    save_case("rnn_unrolled", program, "loss", feeds, expected)
    save_case("rnn_while", rnn_while_program(steps, dim, hidden, classes), "loss", feeds, expected)


def rnn_while_program(steps, dim, hidden, classes):
    """The same RNN written as a loop: the inputs go into a tensor array, and
    a while loop reads step i, updates h in place and counts i up. Its
    gradients must equal the unrolled program's (and PyTorch's)."""
    vars_ = [f"      x{t}: {{shape: [-1, {dim}], dtype: float32, stop_gradient: true}}" for t in range(steps)]
    vars_ += [f"      h0: {{shape: [-1, {hidden}], dtype: float32, stop_gradient: true}}",
              "      label: {shape: [-1, 1], dtype: int64}",
              f"      xs: {{shape: [-1, {dim}], dtype: float32, type: tensor_array, stop_gradient: true}}",
              f"      w: {{shape: [{dim + hidden}, {hidden}], dtype: float32, persistable: true}}",
              f"      b: {{shape: [{hidden}], dtype: float32, persistable: true}}",
              f"      v: {{shape: [{hidden}, {classes}], dtype: float32, persistable: true}}",
              f"      c: {{shape: [{classes}], dtype: float32, persistable: true}}",
              "      steps: {type: step_scopes}"]
    ops = []
    for t in range(steps):
        ops.append(f"      - {{type: fill_constant, outputs: {{Out: [at{t}]}}, attrs: {{shape: [1], dtype: int64, value: {t}.0}}}}")
        ops.append(f"      - {{type: write_to_array, inputs: {{X: [x{t}], I: [at{t}]}}, outputs: {{Out: [xs]}}}}")
    ops += ["      - {type: assign, inputs: {X: [h0]}, outputs: {Out: [h]}}",
            "      - {type: fill_constant, outputs: {Out: [i]}, attrs: {shape: [1], dtype: int64, value: 0.0}}",
            f"      - {{type: fill_constant, outputs: {{Out: [n]}}, attrs: {{shape: [1], dtype: int64, value: {steps}.0}}}}",
            "      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}",
            "      - type: while",
            "        inputs: {X: [xs, i, n, h, w, b], Condition: [more]}",
            "        outputs: {Out: [h, i, more], StepScopes: [steps]}",
            "        attrs: {sub_block: 1}",
            "      - {type: mul, inputs: {X: [h], Y: [v]}, outputs: {Out: [hv]}}",
            "      - {type: elementwise_add, inputs: {X: [hv], Y: [c]}, outputs: {Out: [logits]}, attrs: {axis: 1}}",
            "      - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]}, "
            "outputs: {Softmax: [prob], Loss: [ce]}}",
            "      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}"]
    body = ["      - {type: read_from_array, inputs: {X: [xs], I: [i]}, outputs: {Out: [x]}}",
            "      - {type: concat, inputs: {X: [x, h]}, outputs: {Out: [xh]}, attrs: {axis: 1}}",
            "      - {type: mul, inputs: {X: [xh], Y: [w]}, outputs: {Out: [z]}}",
            "      - {type: elementwise_add, inputs: {X: [z], Y: [b]}, outputs: {Out: [a]}, attrs: {axis: 1}}",
            "      - {type: tanh, inputs: {X: [a]}, outputs: {Out: [h_next]}}",
            "      - {type: assign, inputs: {X: [h_next]}, outputs: {Out: [h]}}",
            "      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i]}}",
            "      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}"]
    return ("format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + "\n".join(vars_) +
            "\n    ops:\n" + "\n".join(ops) + "\n  - idx: 1\n    parent: 0\n    ops:\n" + "\n".join(body) + "\n")


def main():
    rng = np.random.default_rng(20261122)
    softmax_regression(rng)
    mlp(rng)
    rnn(rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
