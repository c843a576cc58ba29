#!/usr/bin/python3
"""Writes PyTorch reference cases for nabla's gradient parity tests.

Each case is a folder under tests/reference/<name>/ with
  program.yaml      the network as a nabla program (docs/program-format.md)
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


def cnn(rng):
    """The example CNN's structure (examples/models/fashion_mnist_cnn.yaml) at small sizes."""
    n, size, c1, c2, hidden, classes = 6, 8, 4, 6, 10, 5
    flat = c2 * (size // 4) ** 2
    x = rng.uniform(0.0, 1.0, (n, 1, size, size)).astype(np.float32)
    y = rng.integers(0, classes, size=(n, 1)).astype(np.int64)
    w = {
        "conv1_w": (rng.standard_normal((c1, 1, 3, 3)) / 3.0).astype(np.float32),
        "bn1_scale": rng.uniform(0.5, 1.5, c1).astype(np.float32),
        "bn1_bias": (0.1 * rng.standard_normal(c1)).astype(np.float32),
        "conv2_w": (rng.standard_normal((c2, c1, 3, 3)) / np.sqrt(9 * c1)).astype(np.float32),
        "bn2_scale": rng.uniform(0.5, 1.5, c2).astype(np.float32),
        "bn2_bias": (0.1 * rng.standard_normal(c2)).astype(np.float32),
        "fc1_w": (rng.standard_normal((flat, hidden)) / np.sqrt(flat)).astype(np.float32),
        "fc1_b": (0.1 * rng.standard_normal(hidden)).astype(np.float32),
        "fc2_w": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
        "fc2_b": (0.1 * rng.standard_normal(classes)).astype(np.float32),
    }
    tw = {k: t64(v) for k, v in w.items()}
    F = torch.nn.functional
    stats = {k: torch.zeros(c, dtype=torch.float64) for k, c in (("bn1_mean", c1), ("bn2_mean", c2))}
    stats.update({k: torch.ones(c, dtype=torch.float64) for k, c in (("bn1_var", c1), ("bn2_var", c2))})
    h = torch.tensor(x, dtype=torch.float64)
    for i in (1, 2):
        h = F.conv2d(h, tw[f"conv{i}_w"], padding=1)
        # Paddle's momentum 0.9 is PyTorch's 0.1; the running variance is
        # checked against the biased batch variance (as Paddle), so it is
        # computed here rather than taken from PyTorch (unbiased).
        mean_b, var_b = h.mean(dim=(0, 2, 3)), h.var(dim=(0, 2, 3), unbiased=False)
        stats[f"bn{i}_mean"] = 0.9 * stats[f"bn{i}_mean"] + 0.1 * mean_b.detach()
        stats[f"bn{i}_var"] = 0.9 * stats[f"bn{i}_var"] + 0.1 * var_b.detach()
        h = F.batch_norm(h, None, None, tw[f"bn{i}_scale"], tw[f"bn{i}_bias"], training=True, eps=1e-5)
        h = F.max_pool2d(F.relu(h), 2, 2)
    h = F.relu(h.reshape(n, flat) @ tw["fc1_w"] + tw["fc1_b"])
    logits = h @ tw["fc2_w"] + tw["fc2_b"]
    loss = F.cross_entropy(logits, torch.tensor(y[:, 0]))
    loss.backward()
    params = "".join(f"      {k}: {{shape: {list(v.shape)}, dtype: float32, persistable: true}}\n" for k, v in w.items())
    program = f"""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {{shape: [-1, 1, {size}, {size}], dtype: float32, stop_gradient: true}}
      label: {{shape: [-1, 1], dtype: int64}}
{params}      bn1_mean: {{shape: [{c1}], dtype: float32, persistable: true, stop_gradient: true, init: {{type: fill_constant, value: 0.0}}}}
      bn1_var: {{shape: [{c1}], dtype: float32, persistable: true, stop_gradient: true, init: {{type: fill_constant, value: 1.0}}}}
      bn2_mean: {{shape: [{c2}], dtype: float32, persistable: true, stop_gradient: true, init: {{type: fill_constant, value: 0.0}}}}
      bn2_var: {{shape: [{c2}], dtype: float32, persistable: true, stop_gradient: true, init: {{type: fill_constant, value: 1.0}}}}
    ops:
      - {{type: conv2d, inputs: {{Input: [x], Filter: [conv1_w]}}, outputs: {{Output: [c1]}}, attrs: {{paddings: [1, 1]}}}}
      - {{type: batch_norm, inputs: {{X: [c1], Scale: [bn1_scale], Bias: [bn1_bias], Mean: [bn1_mean], Variance: [bn1_var]}}, outputs: {{Y: [b1], MeanOut: [bn1_mean], VarianceOut: [bn1_var], SavedMean: [sm1], SavedVariance: [sv1]}}}}
      - {{type: relu, inputs: {{X: [b1]}}, outputs: {{Out: [r1]}}}}
      - {{type: pool2d, inputs: {{X: [r1]}}, outputs: {{Out: [p1]}}, attrs: {{pooling_type: max, ksize: [2, 2], strides: [2, 2]}}}}
      - {{type: conv2d, inputs: {{Input: [p1], Filter: [conv2_w]}}, outputs: {{Output: [c2]}}, attrs: {{paddings: [1, 1]}}}}
      - {{type: batch_norm, inputs: {{X: [c2], Scale: [bn2_scale], Bias: [bn2_bias], Mean: [bn2_mean], Variance: [bn2_var]}}, outputs: {{Y: [b2], MeanOut: [bn2_mean], VarianceOut: [bn2_var], SavedMean: [sm2], SavedVariance: [sv2]}}}}
      - {{type: relu, inputs: {{X: [b2]}}, outputs: {{Out: [r2]}}}}
      - {{type: pool2d, inputs: {{X: [r2]}}, outputs: {{Out: [p2]}}, attrs: {{pooling_type: max, ksize: [2, 2], strides: [2, 2]}}}}
      - {{type: reshape, inputs: {{X: [p2]}}, outputs: {{Out: [flat]}}, attrs: {{shape: [0, {flat}]}}}}
      - {{type: mul, inputs: {{X: [flat], Y: [fc1_w]}}, outputs: {{Out: [xw1]}}}}
      - {{type: elementwise_add, inputs: {{X: [xw1], Y: [fc1_b]}}, outputs: {{Out: [z1]}}, attrs: {{axis: 1}}}}
      - {{type: relu, inputs: {{X: [z1]}}, outputs: {{Out: [h1]}}}}
      - {{type: mul, inputs: {{X: [h1], Y: [fc2_w]}}, outputs: {{Out: [hw2]}}}}
      - {{type: elementwise_add, inputs: {{X: [hw2], Y: [fc2_b]}}, outputs: {{Out: [logits]}}, attrs: {{axis: 1}}}}
      - type: softmax_with_cross_entropy
        inputs: {{Logits: [logits], Label: [label]}}
        outputs: {{Softmax: [prob], Loss: [ce]}}
      - {{type: mean, inputs: {{X: [ce]}}, outputs: {{Out: [loss]}}}}
"""
    expected = {"loss": f32(loss).reshape(1)}
    expected.update({f"{k}@GRAD": f32(v.grad) for k, v in tw.items()})
    expected.update({k: f32(v) for k, v in stats.items()})
    save_case("cnn", program, "loss", dict(x=x, label=y, **w), expected)


def main():
    rng = np.random.default_rng(20261122)
    softmax_regression(rng)
    mlp(rng)
    rnn(rng)
    cnn(rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
