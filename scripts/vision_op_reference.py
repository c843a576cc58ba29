#!/usr/bin/python3
"""Writes PyTorch forward references for conv2d, pool2d and batch_norm.

Each case is a folder under tests/reference/vision_ops/<name>/ with
  program.yaml      the op twice, on float32 and on float64 vars (`<slot>_f32`, `<slot>_f64`)
  case.yaml         feeds (var -> file) and fetched outputs (var -> expected file)
  inputs/*.npy      the feeds: the same values in both dtypes (drawn as float32)
  expected/*.npy    PyTorch's outputs computed in float64
tests/ops/vision_ops_test.cc runs each program with `nabla exec` and compares.

Run with Debian's interpreter: /usr/bin/python3 scripts/vision_op_reference.py
"""
import math
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference", "vision_ops")


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    return repr(v)


def save_case(name, op, inputs, outputs, attrs, expected, inplace=None):
    """inputs: slot -> float32 array; outputs: output slots in order; expected:
    output slot -> float64 array; inplace: output slot -> input slot it shares a var with."""
    inplace = inplace or {}
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "inputs"))
    os.makedirs(os.path.join(d, "expected"))
    vars_lines, ops_lines, feeds, fetches = [], [], [], []
    for suffix, dtype in (("f32", np.float32), ("f64", np.float64)):
        ins, outs = {}, {}
        for slot, arr in inputs.items():
            var = f"{slot}_{suffix}"
            np.save(os.path.join(d, "inputs", f"{var}.npy"), arr.astype(dtype))
            shape = yaml_value(list(arr.shape))
            vars_lines.append(f"      {var}: {{shape: {shape}, dtype: {np.dtype(dtype).name}, stop_gradient: true}}")
            feeds.append(f"  {var}: inputs/{var}.npy")
            ins[slot] = var
        for slot in outputs:
            var = ins[inplace[slot]] if slot in inplace else f"{slot}_out_{suffix}"
            outs[slot] = var
            if slot in expected:
                fetches.append(f"  '{var}': expected/{slot}.npy")
        in_map = ", ".join(f"{k}: [{v}]" for k, v in ins.items())
        out_map = ", ".join(f"{k}: [{v}]" for k, v in outs.items())
        attr_map = ", ".join(f"{k}: {yaml_value(v)}" for k, v in attrs.items())
        ops_lines.append(f"      - {{type: {op}, inputs: {{{in_map}}}, outputs: {{{out_map}}}, attrs: {{{attr_map}}}}}")
    for slot, arr in expected.items():
        np.save(os.path.join(d, "expected", f"{slot}.npy"), arr.astype(np.float64))
    program = ["format: nabla-program/1", "blocks:", "  - idx: 0", "    parent: -1", "    vars:"]
    program += vars_lines + ["    ops:"] + ops_lines
    with open(os.path.join(d, "program.yaml"), "w") as f:
        f.write("\n".join(program) + "\n")
    with open(os.path.join(d, "case.yaml"), "w") as f:
        f.write("\n".join(["feeds:"] + feeds + ["expected:"] + fetches) + "\n")
    print(f"wrote {d}")


def t(a):
    return torch.tensor(a, dtype=torch.float64)


def conv_case(rng, name, x_shape, w_shape, strides=(1, 1), paddings=(0, 0), dilations=(1, 1), groups=1,
              algo="EXPLICIT", nhwc=False):
    """x_shape is NCHW; with nhwc the op sees (and returns) the NHWC transpose."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    kh, kw = w_shape[2], w_shape[3]
    if algo == "VALID":
        pads = (0, 0, 0, 0)
    elif algo == "SAME":
        pads = []
        for size, k, s, dl in ((x_shape[2], kh, strides[0], dilations[0]), (x_shape[3], kw, strides[1], dilations[1])):
            out = (size + s - 1) // s
            total = max((out - 1) * s + (k - 1) * dl + 1 - size, 0)
            pads += [total // 2, total - total // 2]
        pads = tuple(pads)
    elif len(paddings) == 2:
        pads = (paddings[0], paddings[0], paddings[1], paddings[1])
    else:
        pads = tuple(paddings)
    top, bottom, left, right = pads
    xp = F.pad(t(x), (left, right, top, bottom))
    y = F.conv2d(xp, t(w), stride=strides, dilation=dilations, groups=groups)
    if algo == "SAME" and strides == (1, 1):
        # PyTorch's own 'same' must agree with the padding computed above.
        same = F.conv2d(t(x), t(w), padding="same", dilation=dilations, groups=groups)
        assert torch.allclose(same, y)
    attrs = {"strides": list(strides), "paddings": list(paddings), "dilations": list(dilations), "groups": groups,
             "padding_algorithm": algo}
    out = y.numpy()
    if nhwc:
        attrs["data_format"] = "NHWC"
        x, out = x.transpose(0, 2, 3, 1).copy(), out.transpose(0, 2, 3, 1).copy()
    save_case(name, "conv2d", {"Input": x, "Filter": w}, ["Output"], attrs, {"Output": out})


def pool_reference(x, kind, ksize, strides, pads, exclusive, ceil_mode):
    """Pooling with explicit (top, bottom, left, right) pads from PyTorch ops."""
    top, bottom, left, right = pads
    if top == bottom and left == right and 2 * top <= ksize[0] and 2 * left <= ksize[1]:
        if kind == "max":
            return F.max_pool2d(x, ksize, strides, (top, left), ceil_mode=ceil_mode)
        return F.avg_pool2d(x, ksize, strides, (top, left), ceil_mode=ceil_mode, count_include_pad=not exclusive)
    assert not ceil_mode, "asymmetric pads are checked without ceil_mode"
    if kind == "max":
        return F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), ksize, strides)
    total = F.avg_pool2d(F.pad(x, (left, right, top, bottom)), ksize, strides, divisor_override=1)
    if not exclusive:
        return total / (ksize[0] * ksize[1])
    count = F.avg_pool2d(F.pad(torch.ones_like(x), (left, right, top, bottom)), ksize, strides, divisor_override=1)
    return total / count


def pool_case(rng, name, x_shape, attrs, nhwc=False):
    x = rng.standard_normal(x_shape).astype(np.float32)
    kind = attrs["pooling_type"]
    tx = t(x)
    if attrs.get("global_pooling"):
        y = tx.amax(dim=(2, 3), keepdim=True) if kind == "max" else tx.mean(dim=(2, 3), keepdim=True)
    elif attrs.get("adaptive"):
        fn = F.adaptive_max_pool2d if kind == "max" else F.adaptive_avg_pool2d
        y = fn(tx, attrs["ksize"])
    else:
        p = attrs.get("paddings", [0, 0])
        pads = (p[0], p[0], p[1], p[1]) if len(p) == 2 else tuple(p)
        y = pool_reference(tx, kind, attrs["ksize"], attrs.get("strides", [1, 1]), pads,
                           attrs.get("exclusive", True), attrs.get("ceil_mode", False))
    out = y.numpy()
    if nhwc:
        attrs = dict(attrs, data_format="NHWC")
        x, out = x.transpose(0, 2, 3, 1).copy(), out.transpose(0, 2, 3, 1).copy()
    save_case(name, "pool2d", {"X": x}, ["Out"], attrs, {"Out": out})


def bn_case(rng, name, x_shape, attrs, nhwc=False):
    c = x_shape[1]
    x = (2 * rng.standard_normal(x_shape) + 0.5).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    mean = rng.standard_normal(c).astype(np.float32)
    var = rng.uniform(0.5, 2.0, c).astype(np.float32)
    # Float attributes reach the kernels as float32 values.
    eps = float(np.float32(attrs.get("epsilon", 1e-5)))
    momentum = float(np.float32(attrs.get("momentum", 0.9)))
    global_stats = attrs.get("is_test", False) or attrs.get("use_global_stats", False)
    tx = t(x)
    dims = [0] + list(range(2, len(x_shape)))
    if global_stats:
        m, v = t(mean), t(var)
        mean_out, var_out = t(mean), t(var)
    else:
        m, v = tx.mean(dim=dims), tx.var(dim=dims, unbiased=False)
        mean_out = momentum * t(mean) + (1 - momentum) * m
        var_out = momentum * t(var) + (1 - momentum) * v
    y = F.batch_norm(tx, m, v, t(scale), t(bias), training=False, eps=eps)
    if not global_stats:
        # PyTorch's training mode normalizes the same way (its running
        # variance is unbiased, so only Y is taken from it).
        ty = F.batch_norm(tx, None, None, t(scale), t(bias), training=True, eps=eps)
        assert torch.allclose(ty, y)
    y = y.numpy()
    if nhwc:
        attrs = dict(attrs, data_layout="NHWC")
        x, y = x.transpose(0, 2, 3, 1).copy(), y.transpose(0, 2, 3, 1).copy()
    expected = {"Y": y, "MeanOut": mean_out.numpy(), "VarianceOut": var_out.numpy(),
                "SavedMean": m.numpy(), "SavedVariance": (1.0 / torch.sqrt(v + eps)).numpy()}
    save_case(name, "batch_norm", {"X": x, "Scale": scale, "Bias": bias, "Mean": mean, "Variance": var},
              ["Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"], attrs, expected,
              inplace={"MeanOut": "Mean", "VarianceOut": "Variance"})


def main():
    rng = np.random.default_rng(15)
    shutil.rmtree(ROOT, ignore_errors=True)
    conv_case(rng, "conv_pad1", (2, 3, 6, 6), (4, 3, 3, 3), paddings=(1, 1))
    conv_case(rng, "conv_stride2_asym_pad", (2, 2, 7, 8), (3, 2, 3, 3), strides=(2, 2), paddings=(1, 0, 2, 1))
    conv_case(rng, "conv_dilation2", (1, 2, 9, 9), (2, 2, 3, 3), paddings=(2, 1), dilations=(2, 2))
    conv_case(rng, "conv_groups2", (2, 4, 6, 6), (6, 2, 3, 3), paddings=(1, 1), groups=2)
    conv_case(rng, "conv_depthwise_mult2", (2, 3, 7, 7), (6, 1, 3, 3), strides=(2, 2), paddings=(1, 1), groups=3)
    conv_case(rng, "conv_same_stride2", (1, 2, 7, 6), (3, 2, 3, 4), strides=(2, 2), algo="SAME")
    conv_case(rng, "conv_same_dilation2", (1, 2, 8, 8), (2, 2, 3, 3), dilations=(2, 2), algo="SAME")
    conv_case(rng, "conv_valid", (1, 2, 5, 6), (2, 2, 2, 3), paddings=(3, 3), algo="VALID")
    conv_case(rng, "conv_1x1_rect_stride", (2, 5, 4, 6), (3, 5, 1, 1), strides=(1, 2))
    conv_case(rng, "conv_mnist_like", (4, 8, 14, 14), (16, 8, 3, 3), paddings=(1, 1))
    conv_case(rng, "conv_nhwc_stride2_groups2", (2, 4, 7, 6), (6, 2, 3, 3), strides=(2, 2), paddings=(1, 1),
              groups=2, nhwc=True)
    pool_case(rng, "pool_max_2x2", (2, 3, 6, 6), {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2]})
    pool_case(rng, "pool_max_pad_ceil", (1, 2, 7, 7),
              {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True})
    pool_case(rng, "pool_max_ceil_drops_pad_window", (1, 1, 5, 5),
              {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True})
    pool_case(rng, "pool_max_asym_pad", (1, 2, 5, 6),
              {"pooling_type": "max", "ksize": [2, 3], "strides": [2, 1], "paddings": [1, 0, 0, 2]})
    pool_case(rng, "pool_avg_exclusive_pad", (2, 2, 6, 6),
              {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]})
    pool_case(rng, "pool_avg_inclusive_pad", (2, 2, 6, 6),
              {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "exclusive": False})
    pool_case(rng, "pool_avg_inclusive_ceil", (1, 2, 6, 6),
              {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "exclusive": False,
               "ceil_mode": True})
    pool_case(rng, "pool_avg_exclusive_ceil", (1, 2, 6, 6),
              {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True})
    pool_case(rng, "pool_avg_exclusive_asym_pad", (1, 2, 5, 5),
              {"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2], "paddings": [1, 0, 0, 1]})
    pool_case(rng, "pool_avg_adaptive", (1, 2, 7, 5), {"pooling_type": "avg", "ksize": [3, 2], "adaptive": True})
    pool_case(rng, "pool_max_adaptive", (1, 2, 6, 7), {"pooling_type": "max", "ksize": [4, 3], "adaptive": True})
    pool_case(rng, "pool_avg_global", (2, 3, 5, 4), {"pooling_type": "avg", "global_pooling": True})
    pool_case(rng, "pool_max_nhwc_pad_ceil", (2, 3, 7, 7),
              {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True},
              nhwc=True)
    pool_case(rng, "pool_avg_nhwc", (2, 3, 6, 6), {"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2]},
              nhwc=True)
    pool_case(rng, "pool_max_global", (2, 3, 5, 4), {"pooling_type": "max", "ksize": [2, 2], "global_pooling": True})
    bn_case(rng, "bn_train_nchw", (4, 3, 5, 5), {})
    bn_case(rng, "bn_train_nhwc", (3, 4, 3, 5), {}, nhwc=True)
    bn_case(rng, "bn_train_2d_momentum", (6, 4), {"momentum": 0.7, "epsilon": 1e-3})
    bn_case(rng, "bn_is_test", (3, 3, 4, 4), {"is_test": True})
    bn_case(rng, "bn_use_global_stats", (3, 2, 3, 3), {"use_global_stats": True})


if __name__ == "__main__":
    main()
