"""Every example program exported to ONNX and imported back gives the
outputs of the original (run in test mode, as the export means it, with the
same weights)."""
import pathlib

import numpy as np
import pytest
import yaml

import onnx_util
import safetensors_names

PROGRAMS = sorted(
    p for p in [*onnx_util.REPO.glob("examples/*.yaml"), *onnx_util.REPO.glob("examples/*/*.yaml")]
    if "nabla-program/" in p.read_text())
# Programs with an op that has no ONNX exporter yet, and what the error names
# (none now: the RNN's while loop and tensor array export as a Loop).
NOT_EXPORTABLE = {}


def as_test_mode(src, dst):
    """The program with batch_norm and dropout in test mode (what export means)."""
    program = yaml.safe_load(src.read_text())
    for op in program["blocks"][0]["ops"]:
        if op["type"] in ("batch_norm", "dropout"):
            op.setdefault("attrs", {})["is_test"] = True
    dst.write_text(yaml.safe_dump(program))


def feeds_for(program_path, rng):
    program = yaml.safe_load(program_path.read_text())
    feeds = {}
    for name, var in program["blocks"][0]["vars"].items():
        if var.get("persistable") or var.get("type", "dense") != "dense":
            continue
        shape = [3 if d == -1 else d for d in var["shape"]]
        if var["dtype"] == "int64":
            feeds[name] = rng.integers(0, 10, size=shape).astype(np.int64)
        else:
            feeds[name] = rng.standard_normal(shape).astype(var["dtype"])
    return feeds


def test_every_example_program_is_listed():
    assert len(PROGRAMS) >= 5, PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: str(p.relative_to(onnx_util.REPO)))
def test_export_import_round_trip(program, tmp_path):
    import onnx

    model = tmp_path / "model.onnx"
    if program.name in NOT_EXPORTABLE:
        p = onnx_util.run("export", program, "-o", model, check=False)
        assert p.returncode == 2 and NOT_EXPORTABLE[program.name] in p.stderr, p.stderr
        assert not model.exists()
        return
    onnx_util.run("export", program, "-o", model)
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    outputs = [o.name for o in m.graph.output]
    back, weights = onnx_util.import_model(model, tmp_path)
    # Every persistable the graph reads comes back under its own name.
    assert {i.name for i in m.graph.initializer if not i.name.startswith("const_")} <= safetensors_names.names(weights)

    original = tmp_path / "original.yaml"
    as_test_mode(program, original)
    feeds = feeds_for(program, np.random.default_rng(5))
    # The exported constants (a causal mask) come back as weights the
    # original program has no var for.
    original_weights = tmp_path / "original.safetensors"
    declared = yaml.safe_load(program.read_text())["blocks"][0]["vars"]
    safetensors_names.subset(weights, original_weights, set(declared))
    want = onnx_util.exec_program(original, feeds, outputs, tmp_path / "a", weights=original_weights)
    got = onnx_util.exec_program(back, feeds, outputs, tmp_path / "b", weights=weights)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_imported_program_fine_tunes_with_nabla_run(tmp_path):
    """An imported model trains with `nabla run --weights` (its persistable
    vars have no init: of their own); without --weights it is an error."""
    src = onnx_util.REPO / "examples" / "models" / "softmax_regression.yaml"
    onnx_util.run("export", src, "-o", tmp_path / "m.onnx", "--output", "loss")
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    data = "/usr/share/datasets/fashion-mnist/t10k-%s-idx%d-ubyte.gz"
    if not pathlib.Path(data % ("images", 3)).exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    config = tmp_path / "run.yaml"
    config.write_text(f"""seed: 1
program: {program}
loss: loss
optimizer: {{type: sgd, lr: 0.1}}
data:
  format: idx
  train:
    files: {{images: {data % ('images', 3)}, labels: {data % ('labels', 1)}}}
    feeds: {{image: images, label: labels}}
  batch_size: 64
steps: 5
""")
    p = onnx_util.run("run", config, "--weights", weights, "--progress", "none")
    assert "train loss" in p.stdout, p.stdout
    p = onnx_util.run("run", config, "--progress", "none", check=False)
    assert p.returncode == 2 and "pass --weights" in p.stderr, p.stderr


NEW_OPS_PROGRAM = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 8], dtype: float32, stop_gradient: true}
      shape: {shape: [2], dtype: int64, stop_gradient: true}
      starts: {shape: [1], dtype: int64, stop_gradient: true}
      lo: {shape: [1], dtype: float32, stop_gradient: true}
      hi: {shape: [1], dtype: float32, stop_gradient: true}
      times: {shape: [2], dtype: int32, stop_gradient: true}
    ops:
      - {type: elu, inputs: {X: [x]}, outputs: {Out: [elu]}, attrs: {alpha: 0.5}}
      - {type: softplus, inputs: {X: [x]}, outputs: {Out: [softplus]}, attrs: {beta: 2.0}}
      - {type: hard_swish, inputs: {X: [x]}, outputs: {Out: [hard_swish]}}
      - {type: swish, inputs: {X: [x]}, outputs: {Out: [swish]}, attrs: {beta: 1.5}}
      - {type: logsigmoid, inputs: {X: [x]}, outputs: {Out: [logsigmoid]}}
      - {type: tanh_shrink, inputs: {X: [x]}, outputs: {Out: [tanh_shrink]}}
      - {type: relu6, inputs: {X: [x]}, outputs: {Out: [relu6]}, attrs: {threshold: 1.0}}
      - {type: hard_sigmoid, inputs: {X: [x]}, outputs: {Out: [hard_sigmoid]}, attrs: {slope: 0.3, offset: 0.4}}
      - {type: hard_shrink, inputs: {X: [x]}, outputs: {Out: [hard_shrink]}, attrs: {threshold: 0.3}}
      - {type: softshrink, inputs: {X: [x]}, outputs: {Out: [softshrink]}, attrs: {lambda: 0.2}}
      - {type: thresholded_relu, inputs: {X: [x]}, outputs: {Out: [thresholded_relu]}, attrs: {threshold: 0.1}}
      - {type: sin, inputs: {X: [x]}, outputs: {Out: [sin]}}
      - {type: cos, inputs: {X: [x]}, outputs: {Out: [cos]}}
      - {type: asin, inputs: {X: [sin]}, outputs: {Out: [asin]}}
      - {type: acos, inputs: {X: [cos]}, outputs: {Out: [acos]}}
      - {type: atan, inputs: {X: [x]}, outputs: {Out: [atan]}}
      - {type: floor, inputs: {X: [x]}, outputs: {Out: [floor]}}
      - {type: ceil, inputs: {X: [x]}, outputs: {Out: [ceil]}}
      - {type: softsign, inputs: {X: [x]}, outputs: {Out: [softsign]}}
      - {type: reciprocal, inputs: {X: [x]}, outputs: {Out: [reciprocal]}}
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [x4]}, attrs: {scale: 4.0}}
      - {type: round, inputs: {X: [x4]}, outputs: {Out: [round]}}
      - {type: abs, inputs: {X: [x]}, outputs: {Out: [absx]}}
      - {type: rsqrt, inputs: {X: [absx]}, outputs: {Out: [rsqrt]}}
      - {type: pow, inputs: {X: [x]}, outputs: {Out: [cube]}, attrs: {factor: 3.0}}
      - {type: tril_triu, inputs: {X: [x]}, outputs: {Out: [triu]}, attrs: {diagonal: 1, lower: false}}
      - {type: reduce_max, inputs: {X: [x]}, outputs: {Out: [rmax]}, attrs: {dim: [1]}}
      - {type: reduce_min, inputs: {X: [x]}, outputs: {Out: [rmin]}, attrs: {dim: [0], keep_dim: true}}
      - {type: reduce_prod, inputs: {X: [x]}, outputs: {Out: [rprod]}, attrs: {dim: [1]}}
      - {type: arg_min, inputs: {X: [x]}, outputs: {Out: [argmin]}, attrs: {axis: 1}}
      - {type: reshape, inputs: {X: [x], Shape: [shape]}, outputs: {Out: [reshaped]}}
      - {type: slice, inputs: {Input: [x], StartsTensor: [starts]}, outputs: {Out: [sliced]},
         attrs: {axes: [1], ends: [6]}}
      - {type: clip, inputs: {X: [x], Min: [lo], Max: [hi]}, outputs: {Out: [clipped]}, attrs: {min: 0.0, max: 0.0}}
      - {type: expand, inputs: {X: [x], ExpandTimes: [times]}, outputs: {Out: [tiled]}}
      - {type: fill_constant, inputs: {ShapeTensor: [shape]}, outputs: {Out: [filled]},
         attrs: {value: 2.5, dtype: float32}}
"""


def test_new_ops_and_tensor_attributes_round_trip(tmp_path):
    """The math, activation and reduction exporters, and run-time shapes,
    bounds and sizes (tensor-valued attribute inputs): exported, checked,
    imported back (the importer's side checked against ONNX's node tests),
    the same outputs as the original."""
    import onnx

    src = tmp_path / "ops.yaml"
    src.write_text(NEW_OPS_PROGRAM)
    model = tmp_path / "ops.onnx"
    onnx_util.run("export", src, "-o", model)
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    outputs = [o.name for o in m.graph.output]
    assert {"triu", "reshaped", "sliced", "clipped", "tiled", "filled", "argmin"} <= set(outputs), outputs
    back, weights = onnx_util.import_model(model, tmp_path)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    x[0, :4] = [0.125, -0.375, 0.625, -0.125]  # halves after the scale by 4: round's ties
    feeds = {"x": x, "shape": np.array([4, 6]),
             "starts": np.array([2]), "lo": np.array([-0.5], np.float32), "hi": np.array([0.7], np.float32),
             "times": np.array([2, 3], np.int32)}
    want = onnx_util.exec_program(src, feeds, outputs, tmp_path / "a")
    got = onnx_util.exec_program(back, feeds, outputs, tmp_path / "b", weights=weights)
    assert got["reshaped"].shape == (4, 6) and got["sliced"].shape == (3, 4) and got["tiled"].shape == (6, 24)
    assert got["filled"].shape == (4, 6)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_split_sections_list_exports_as_one_tensor(tmp_path):
    """split's SectionsTensorList ([1] tensors) becomes Split's one int64
    split input, a Concat of them (nabla's own concat is float only, so this
    one does not import back: the importer's Split reads a run-time tensor,
    tested by the node tests)."""
    import onnx

    src = tmp_path / "split.yaml"
    src.write_text("""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 8], dtype: float32, stop_gradient: true}
      sec0: {shape: [1], dtype: int32, stop_gradient: true}
      sec1: {shape: [1], dtype: int64, stop_gradient: true}
    ops:
      - {type: split, inputs: {X: [x], SectionsTensorList: [sec0, sec1]}, outputs: {Out: [part0, part1]},
         attrs: {axis: 1}}
""")
    onnx_util.run("export", src, "-o", tmp_path / "split.onnx")
    m = onnx.load(tmp_path / "split.onnx")
    onnx.checker.check_model(m, full_check=True)
    nodes = {n.output[0]: n for n in m.graph.node}
    split = next(n for n in m.graph.node if n.op_type == "Split")
    concat = nodes[split.input[1]]
    assert concat.op_type == "Concat" and len(concat.input) == 2
    # sec0 (int32) is cast to int64 first; sec1 goes in as it is.
    assert nodes[concat.input[0]].op_type == "Cast" and concat.input[1] == "sec1"


ATTENTION_PROGRAM = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 5, 3, 4], dtype: float32, stop_gradient: true}
      w: {shape: [3, 4, 2, 8], dtype: float32, stop_gradient: true}
      w1: {shape: [60, 2, 4], dtype: float32, stop_gradient: true}
      q: {shape: [2, 3, 2, 8], dtype: float32, stop_gradient: true}
      k: {shape: [2, 5, 2, 8], dtype: float32, stop_gradient: true}
      v: {shape: [2, 5, 2, 6], dtype: float32, stop_gradient: true}
      mask: {shape: [3, 5], dtype: float32, stop_gradient: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}, attrs: {x_num_col_dims: 2, y_num_col_dims: 2}}
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [xw1]}}
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v]}, outputs: {out: [causal], softmax_lse: [lse1]},
         attrs: {causal: true}}
      - {type: flash_attn, inputs: {q: [q], k: [k], v: [v], attn_mask: [mask]},
         outputs: {out: [masked], softmax: [probs], softmax_lse: [lse2]}, attrs: {return_softmax: true}}
"""


def test_mul_and_flash_attn_round_trip(tmp_path):
    """mul with x_num_col_dims 2 (a dynamic batch) and y_num_col_dims 2, and
    with a rank-3 Y,
    flash_attn as a MatMul/Softmax chain: causal with seq_q < seq_k (the
    bottom-right diagonal), an additive mask and its probabilities."""
    import onnx

    src = tmp_path / "attn.yaml"
    src.write_text(ATTENTION_PROGRAM)
    model = tmp_path / "attn.onnx"
    onnx_util.run("export", src, "-o", model)
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    outputs = [o.name for o in m.graph.output]
    assert set(outputs) == {"xw", "xw1", "causal", "masked", "probs"}, outputs
    back, weights = onnx_util.import_model(model, tmp_path)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 5, 3, 4)).astype(np.float32),
             "w": rng.standard_normal((3, 4, 2, 8)).astype(np.float32),
             "w1": rng.standard_normal((60, 2, 4)).astype(np.float32),
             "q": rng.standard_normal((2, 3, 2, 8)).astype(np.float32),
             "k": rng.standard_normal((2, 5, 2, 8)).astype(np.float32),
             "v": rng.standard_normal((2, 5, 2, 6)).astype(np.float32),
             "mask": np.where(rng.random((3, 5)) < 0.3, -1e9, 0.0).astype(np.float32)}
    want = onnx_util.exec_program(src, feeds, outputs, tmp_path / "a")
    got = onnx_util.exec_program(back, feeds, outputs, tmp_path / "b", weights=weights)
    assert got["xw"].shape == (2, 5, 2, 8) and got["xw1"].shape == (2, 2, 4)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_exported_rnn_loop_fine_tunes_after_import(tmp_path):
    """fashion_mnist_rnn's while loop, exported as a Loop and imported back
    as a while, trains with `nabla run --weights`: 20 Adam steps bring the
    loss below chance (ln 10), gradients through every step of the loop."""
    src = onnx_util.REPO / "examples" / "models" / "fashion_mnist_rnn.yaml"
    onnx_util.run("export", src, "-o", tmp_path / "rnn.onnx", "--output", "loss")
    program, weights = onnx_util.import_model(tmp_path / "rnn.onnx", tmp_path)
    assert "type: while" in program.read_text()
    data = "/usr/share/datasets/fashion-mnist/t10k-%s-idx%d-ubyte.gz"
    if not pathlib.Path(data % ("images", 3)).exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    config = tmp_path / "run.yaml"
    config.write_text(f"""seed: 1
program: {program}
loss: loss
optimizer: {{type: adam, lr: 0.001}}
data:
  format: idx
  train:
    files: {{images: {data % ('images', 3)}, labels: {data % ('labels', 1)}}}
    feeds: {{image: images, label: labels}}
  batch_size: 32
steps: 20
""")
    p = onnx_util.run("run", config, "--weights", weights, "--progress", "none")
    loss = float(next(line for line in p.stdout.splitlines() if line.startswith("train loss")).split()[2])
    assert loss < np.log(10), p.stdout


def test_fill_constant_str_value_exports_and_imports_exactly(tmp_path):
    """fill_constant's str_value (the exact form of a value the float attribute cannot hold) is what
    the exporter writes, and a ConstantOfShape value float cannot hold imports into str_value: an
    int64 past 2^24 and a float64 of 0.1 come back exact. A float32 Out whose str_value float32
    does not hold is refused by name rather than rounded."""
    import onnx
    from onnx import helper, TensorProto

    src = tmp_path / "fill.yaml"
    src.write_text("""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars: {}
    ops:
      - {type: fill_constant, outputs: {Out: [big]}, attrs: {shape: [2], dtype: int64, value: 7.0,
         str_value: "123456789012"}}
      - {type: fill_constant, outputs: {Out: [half]}, attrs: {shape: [3], dtype: float64, value: 7.0,
         str_value: "-0.5"}}
""")
    model = tmp_path / "fill.onnx"
    onnx_util.run("export", src, "-o", model)
    onnx.checker.check_model(onnx.load(model), full_check=True)
    back, weights = onnx_util.import_model(model, tmp_path)
    got = onnx_util.exec_program(back, {}, ["big", "half"], tmp_path / "b", weights=weights)
    assert got["big"].dtype == np.int64 and (got["big"] == 123456789012).all()
    assert (got["half"] == -0.5).all()

    # A float64 0.1 would be rounded through a float tensor: refused, naming the op and why.
    src.write_text(src.read_text().replace('"-0.5"', '"0.1"'))
    p = onnx_util.run("export", src, "-o", tmp_path / "refused.onnx", check=False)
    assert p.returncode == 2 and "str_value" in p.stderr and "fill_constant" in p.stderr, p.stderr

    # ConstantOfShape values float does not hold, from outside, with the shape a graph input: a
    # constant shape folds at import into an initializer, which held the value exactly already;
    # a run-time one becomes fill_constant, which read 123456790528 and 0.10000000149 before.
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["i"],
                              value=helper.make_tensor("v", TensorProto.INT64, [1], [123456789012])),
             helper.make_node("ConstantOfShape", ["shape"], ["d"],
                              value=helper.make_tensor("w", TensorProto.DOUBLE, [1], [0.1]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("i", TensorProto.INT64, [None]),
                               helper.make_tensor_value_info("d", TensorProto.DOUBLE, [None])])
    outside = tmp_path / "outside.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), outside)
    (tmp_path / "outside").mkdir()
    back, weights = onnx_util.import_model(outside, tmp_path / "outside")
    assert "str_value" in back.read_text()
    got = onnx_util.exec_program(back, {"shape": np.array([3], np.int64)}, ["i", "d"], tmp_path / "c",
                                 weights=weights)
    assert (got["i"] == 123456789012).all() and (got["d"] == 0.1).all(), got


def export_round_trip(tmp_path, program_text, feeds, want_outputs):
    """Exports the program (checked by onnx's checker), imports it back and
    returns (original's outputs, the round trip's outputs, the ONNX model)."""
    import onnx

    src = tmp_path / "p.yaml"
    src.write_text(program_text)
    model = tmp_path / "p.onnx"
    onnx_util.run("export", src, "-o", model)
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    outputs = [o.name for o in m.graph.output]
    assert set(outputs) == set(want_outputs), outputs
    back, weights = onnx_util.import_model(model, tmp_path)
    want = onnx_util.exec_program(src, feeds, outputs, tmp_path / "a")
    got = onnx_util.exec_program(back, feeds, outputs, tmp_path / "b", weights=weights)
    return want, got, m


def test_binary_axis_aligns_the_lower_rank_operand_either_side(tmp_path):
    """Paddle's axis places the operand of lower rank at dims [axis, ...) of
    the other, X as well as Y, trailing 1s that do not fit dropped: each
    becomes an Unsqueeze (or a Squeeze) before ONNX's numpy broadcasting. An
    X of [3] added at axis 1 of a [1, 3, 3] Y was exported as a bare Add,
    which aligns it with Y's last dim: other values, and exit 0."""
    program = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x3: {shape: [3], dtype: float32}
      y133: {shape: [1, 3, 3], dtype: float32}
      y234: {shape: [2, 3, 4], dtype: float32}
      x41: {shape: [4, 1], dtype: float32}
    ops:
      - {type: elementwise_add, inputs: {X: [x3], Y: [y133]}, outputs: {Out: [square]}, attrs: {axis: 1}}
      - {type: elementwise_sub, inputs: {X: [x3], Y: [y234]}, outputs: {Out: [lowx]}, attrs: {axis: 1}}
      - {type: elementwise_mul, inputs: {X: [x41], Y: [y234]}, outputs: {Out: [fitted]}, attrs: {axis: 2}}
      - {type: elementwise_div, inputs: {X: [y234], Y: [x41]}, outputs: {Out: [fittedy]}, attrs: {axis: 2}}
"""
    rng = np.random.default_rng(5)
    feeds = {"x3": np.array([1, 2, 3], np.float32), "y133": np.zeros((1, 3, 3), np.float32),
             "y234": rng.standard_normal((2, 3, 4)).astype(np.float32),
             "x41": rng.uniform(1, 2, (4, 1)).astype(np.float32)}
    want, got, _ = export_round_trip(tmp_path, program, feeds, ["square", "lowx", "fitted", "fittedy"])
    # nabla's own values, as numpy computes them with the axis applied.
    np.testing.assert_array_equal(want["square"], np.broadcast_to(feeds["x3"].reshape(1, 3, 1), (1, 3, 3)))
    np.testing.assert_allclose(want["lowx"], feeds["x3"].reshape(3, 1) - feeds["y234"], rtol=1e-6)
    np.testing.assert_allclose(want["fitted"], feeds["x41"].reshape(4) * feeds["y234"], rtol=1e-6)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_softmax_with_cross_entropy_without_softmax(tmp_path):
    """use_softmax false: Logits are probabilities, Softmax their copy and
    the loss -log(max(p[label], 1e-20)) (0 at ignore_index), the kernel's
    clipped log, so a 0 probability gives 46.05 rather than inf. It was
    exported with a Softmax applied once more."""
    program = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      p: {shape: [2, 3], dtype: float32}
      l: {shape: [2, 1], dtype: int64}
      q: {shape: [2, 2, 3], dtype: float64}
      m: {shape: [2, 2, 1], dtype: int64}
    ops:
      - {type: softmax_with_cross_entropy, inputs: {Logits: [p], Label: [l]}, outputs: {Softmax: [s], Loss: [loss]},
         attrs: {use_softmax: false}}
      - {type: softmax_with_cross_entropy, inputs: {Logits: [q], Label: [m]}, outputs: {Softmax: [s3], Loss: [loss3]},
         attrs: {use_softmax: false, ignore_index: 1}}
"""
    feeds = {"p": np.array([[0.7, 0.2, 0.1], [0.1, 0.9, 0.0]], np.float32), "l": np.array([[0], [2]]),
             "q": np.array([[[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]], [[0.1, 0.1, 0.8], [1.0, 0.0, 0.0]]]),
             "m": np.array([[[2], [1]], [[0], [1]]])}
    want, got, m = export_round_trip(tmp_path, program, feeds, ["s", "loss", "s3", "loss3"])
    assert "Softmax" not in {n.op_type for n in m.graph.node}
    np.testing.assert_allclose(want["loss"], [[-np.log(0.7)], [-np.log(1e-20)]], rtol=1e-6)
    np.testing.assert_allclose(want["loss3"], [[[-np.log(0.25)], [0.0]], [[-np.log(0.1)], [0.0]]], rtol=1e-12)
    np.testing.assert_array_equal(want["s"], feeds["p"])
    for name in want:
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_reduce_over_every_listed_dim(tmp_path):
    """A dim list naming every dim (negative ones too) reduces everything, as
    reduce_all does: nabla's [1] without keep_dim, which was exported as
    ONNX's scalar and refused by the checker."""
    program = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: reduce_sum, inputs: {X: [x]}, outputs: {Out: [total]}, attrs: {dim: [0, 1]}}
      - {type: reduce_mean, inputs: {X: [x]}, outputs: {Out: [average]}, attrs: {dim: [-1, 0]}}
      - {type: reduce_max, inputs: {X: [x]}, outputs: {Out: [kept]}, attrs: {dim: [1, 0], keep_dim: true}}
      - {type: reduce_min, inputs: {X: [x]}, outputs: {Out: [rows]}, attrs: {dim: [-1]}}
"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want, got, _ = export_round_trip(tmp_path, program, {"x": x}, ["total", "average", "kept", "rows"])
    np.testing.assert_array_equal(want["total"], [15.0])
    assert want["kept"].shape == (1, 1) and want["rows"].shape == (2,)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)


def test_arg_extremum_flatten_keeps_dims(tmp_path):
    """arg_max/arg_min with flatten search all of X; with keepdims Out is
    rank(X) 1s (ONNX's ArgMax of the flattened X gives [1]), which the
    checker refused."""
    program = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
      z: {shape: [2, 3, 2], dtype: float32}
    ops:
      - {type: arg_max, inputs: {X: [x]}, outputs: {Out: [kept]}, attrs: {flatten: true, keepdims: true}}
      - {type: arg_min, inputs: {X: [z]}, outputs: {Out: [kept3]}, attrs: {flatten: true, keepdims: true}}
      - {type: arg_max, inputs: {X: [z]}, outputs: {Out: [flat]}, attrs: {flatten: true}}
"""
    rng = np.random.default_rng(6)
    feeds = {"x": np.array([[0, 5, 1], [2, 4, 3]], np.float32), "z": rng.standard_normal((2, 3, 2)).astype(np.float32)}
    want, got, _ = export_round_trip(tmp_path, program, feeds, ["kept", "kept3", "flat"])
    np.testing.assert_array_equal(want["kept"], [[1]])
    np.testing.assert_array_equal(want["kept3"], np.reshape(np.argmin(feeds["z"]), (1, 1, 1)))
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_softmax_with_cross_entropy_label_of_lower_rank(tmp_path):
    """A hard Label of Logits' rank less one (fusing softmax and
    cross_entropy writes it: [N] for [N, C]) is ONNX's label form, and the
    Loss has its shape: it was squeezed and the loss unsqueezed as for a
    [N, 1] label, which the checker refused."""
    program = """format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
      l: {shape: [2], dtype: int64}
      z: {shape: [2, 2, 3], dtype: float32}
      m: {shape: [2, 2], dtype: int64}
    ops:
      - {type: softmax_with_cross_entropy, inputs: {Logits: [x], Label: [l]}, outputs: {Softmax: [s], Loss: [loss]}}
      - {type: softmax_with_cross_entropy, inputs: {Logits: [z], Label: [m]}, outputs: {Softmax: [s3], Loss: [loss3]},
         attrs: {ignore_index: 0}}
"""
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "l": np.array([2, 0]),
             "z": rng.standard_normal((2, 2, 3)).astype(np.float32), "m": np.array([[0, 1], [2, 2]])}
    want, got, _ = export_round_trip(tmp_path, program, feeds, ["s", "loss", "s3", "loss3"])
    assert want["loss"].shape == (2,) and want["loss3"].shape == (2, 2)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
