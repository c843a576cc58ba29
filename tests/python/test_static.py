"""The static half of the Python API (docs/python.md): programs, append_backward (seed 002), the
Executor against NumPy and PyTorch, plugins, the registry, errors."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import nabla

LINEAR = """
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 4], dtype: float32, stop_gradient: true}
      w: {shape: [4, 3], dtype: float32, persistable: true,
          init: {type: uniform_random, min: -0.5, max: 0.5, seed: 1}}
      b: {shape: [3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.1}}
      v: {shape: [3, 2], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [h]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [a]}}
      - {type: mul, inputs: {X: [a], Y: [v]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
"""


def linear():
    return nabla.Program.from_yaml(LINEAR)


# ---------------------------------------------------------------- programs


def test_yaml_round_trip(examples):
    p = nabla.Program.load(examples / "models" / "fashion_mnist_mlp.yaml")
    text = p.to_yaml()
    q = nabla.Program.from_yaml(text)
    assert q.to_yaml() == text
    assert [o["type"] for o in q.ops()] == [o["type"] for o in p.ops()]
    assert q.ops()[0]["inputs"] == {"X": ["image"], "Y": ["fc1_w"]}


def test_program_built_in_python_runs():
    p = nabla.Program()
    p.create_var("x", [-1, 3], "float32", stop_gradient=True)
    p.create_var("s", [1], "float32", persistable=True, init={"type": "fill_constant", "value": 2})
    p.append_op("elementwise_mul", {"X": "x", "Y": "s"}, {"Out": "y"})
    p.append_op("scale", {"X": ["y"]}, {"Out": ["z"]}, {"scale": 3, "bias": 1.0})
    assert p.ops()[1]["attrs"]["scale"] == 3.0 and p.ops()[1]["attrs"]["bias_after_scale"] is True
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (z,) = nabla.Executor().run(p, feed={"x": x}, fetch_list=["z"])
    np.testing.assert_allclose(z, x * 2 * 3 + 1)
    # Written and read back, the program runs the same.
    (z2,) = nabla.Executor().run(nabla.Program.from_yaml(p.to_yaml()), feed={"x": x}, fetch_list=["z"])
    np.testing.assert_array_equal(z, z2)


def test_append_op_errors_leave_the_program_unchanged():
    p = linear()
    before = p.to_yaml()
    with pytest.raises(nabla.Error, match="unknown op type 'no_such_op'"):
        p.append_op("no_such_op", {"X": "x"}, {"Out": "q"})
    with pytest.raises(nabla.Error, match="has no attribute 'sclae'"):
        p.append_op("scale", {"X": "y"}, {"Out": "q"}, {"sclae": 2.0})
    with pytest.raises(nabla.Error, match="expected a float but received str"):
        p.append_op("scale", {"X": "y"}, {"Out": "q"}, {"scale": "2"})
    with pytest.raises(nabla.Error, match="input var 'nothing'"):
        p.append_op("scale", {"X": "nothing"}, {"Out": "q"})
    with pytest.raises(nabla.Error, match="elementwise_add"):  # shapes [?, 2] and [7] do not broadcast
        p.create_var("c7", [7], "float32", persistable=True, init={"type": "fill_constant", "value": 0.0})
        p.append_op("elementwise_add", {"X": "y", "Y": "c7"}, {"Out": "q"})
    with pytest.raises(nabla.Error, match="unknown input slot.*'ScaleTensr'"):
        p.append_op("scale", {"X": "y", "ScaleTensr": "y"}, {"Out": "q"})
    with pytest.raises(nabla.Error, match="unknown output slot.*'Outt'"):
        p.append_op("scale", {"X": "y"}, {"Out": "q", "Outt": "q2"})
    assert [o["type"] for o in p.ops()] == [o["type"] for o in nabla.Program.from_yaml(before).ops()]


def test_create_var_checks_dims_and_refuses_a_second_declaration():
    p = nabla.Program()
    with pytest.raises(nabla.Error, match=r"create_var\('x'\): expected dims >= 0 or -1.*has -5"):
        p.create_var("x", [-5, 3], "float32")
    with pytest.raises(nabla.Error, match="more elements than a 64-bit count holds"):
        p.create_var("x", [2**40, 2**40], "float32")
    p.create_var("x", [-1, 3], "float32")
    p.append_op("scale", {"X": "x"}, {"Out": "y"})
    with pytest.raises(nabla.Error, match=r"create_var\('x'\): block 0 already declares it \(\[-1, 3\] float32\)"):
        p.create_var("x", [7], "int64")
    assert [v["dtype"] for v in p.vars() if v["name"] == "x"] == ["float32"]


def test_executor_thread_counts_are_bounded():
    for bad in (-1, 100000):
        with pytest.raises(nabla.Error, match="threads"):
            nabla.Executor(threads=bad)
    nabla.Executor(threads=4096)


DROPOUT = """
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [64, 32], dtype: float32, stop_gradient: true}
    ops:
      - {type: dropout, inputs: {X: [x]}, outputs: {Out: [y], Mask: [m]},
         attrs: {dropout_prob: 0.5, dropout_implementation: upscale_in_train}}
"""


def test_run_step_numbers_the_random_draws():
    """step= is the number dropout draws by: the same step, the same mask, in any executor and any order;
    another step, another mask; None counts runs."""
    prog = nabla.Program.from_yaml(DROPOUT)
    x = np.ones((64, 32), np.float32)

    def mask(exe, step=None):
        return exe.run(prog, feed={"x": x}, fetch_list=["y"], step=step)[0] != 0

    a, b = nabla.Executor(seed=7), nabla.Executor(seed=7)
    m3 = mask(a, 3)
    assert 0.3 < m3.mean() < 0.7
    np.testing.assert_array_equal(mask(b, 0), mask(a, 0))
    np.testing.assert_array_equal(mask(b, 3), m3, err_msg="the same step draws the same mask")
    np.testing.assert_array_equal(mask(a, 3), m3)
    assert (mask(a, 4) != m3).any(), "another step draws another mask"
    c = nabla.Executor(seed=7)
    np.testing.assert_array_equal(mask(c), mask(a, 0), err_msg="step=None numbers runs from 0")
    np.testing.assert_array_equal(mask(c), mask(a, 1))
    np.testing.assert_array_equal(mask(b, 2**64 - 1), mask(c, 2**64 - 1), err_msg="the whole 64-bit range")
    for bad, what in ((-1, "non-negative"), (-2**70, "non-negative"), (2**64, "below 2\\^64"), (1.5, "int"),
                      (True, "int"), ("3", "int")):
        with pytest.raises(nabla.Error, match=what):
            a.run(prog, feed={"x": x}, fetch_list=["y"], step=bad)


# ---------------------------------------------------------- append_backward


def test_append_backward_pairs_all_parameters():
    p = linear()
    pairs = nabla.append_backward(p, "loss")
    assert pairs == [("w", "w@GRAD"), ("b", "b@GRAD"), ("v", "v@GRAD")]
    types = [o["type"] for o in p.ops()]
    assert types[:5] == ["mul", "elementwise_add", "tanh", "mul", "mean"]
    # The seed: fill_constant writes loss@GRAD = 1, then the grad ops in reverse.
    assert types[5] == "fill_constant" and p.ops()[5]["outputs"]["Out"] == ["loss@GRAD"]
    assert types[6:] == ["mean_grad", "mul_grad", "tanh_grad", "elementwise_add_grad", "mul_grad"]
    assert p.backward == ("loss", pairs)
    assert "param_grads: [[w, w@GRAD], [b, b@GRAD], [v, v@GRAD]]" in p.to_yaml().replace("\n", " ") or "w@GRAD" in p.to_yaml()


def test_append_backward_parameter_list_filters_and_orders():
    p = linear()
    assert nabla.append_backward(p, "loss", parameter_list=["v", "w"]) == [("v", "v@GRAD"), ("w", "w@GRAD")]
    assert p.backward == ("loss", [("v", "v@GRAD"), ("w", "w@GRAD")])


def test_append_backward_no_grad_set_cuts_the_branch():
    p = linear()
    pairs = nabla.append_backward(p, "loss", no_grad_set={"a"})
    # Nothing flows below `a`: only v gets a gradient.
    assert pairs == [("v", "v@GRAD")]
    types = [o["type"] for o in p.ops()]
    assert "tanh_grad" not in types and "elementwise_add_grad" not in types


def test_append_backward_accepts_a_set_of_params_and_tuple():
    p = linear()
    assert nabla.append_backward(p, "loss", ("b",), ["w"]) == [("b", "b@GRAD")]


def test_append_backward_errors_leave_the_program_unchanged():
    p = linear()
    before = p.to_yaml()
    with pytest.raises(nabla.Error, match="nope"):
        nabla.append_backward(p, "nope")
    with pytest.raises(nabla.Error, match="one element|1 element|exactly one"):
        nabla.append_backward(p, "y")  # not a scalar
    with pytest.raises(nabla.Error, match="parameter_list"):
        nabla.append_backward(p, "loss", parameter_list="w")
    assert p.to_yaml() == before
    assert nabla.append_backward(p, "loss")  # still usable


def test_gradients_match_torch(rng):
    p = linear()
    nabla.append_backward(p, "loss")
    x = rng.standard_normal((5, 4)).astype(np.float32)
    exe = nabla.Executor()
    loss, w, b, v, gw, gb, gv = exe.run(p, feed={"x": x}, fetch_list=["loss", "w", "b", "v", "w@GRAD", "b@GRAD", "v@GRAD"])
    tw, tb, tv = (torch.tensor(a, requires_grad=True) for a in (w, b, v))
    tl = (torch.tanh(torch.tensor(x) @ tw + tb) @ tv).mean()
    tl.backward()
    np.testing.assert_allclose(loss, [tl.item()], rtol=1e-5)
    for ours, theirs in ((gw, tw), (gb, tb), (gv, tv)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ executor


def test_executor_feeds_and_fetches_all_dtypes():
    p = nabla.Program()
    for dt in ("float32", "float64", "int32", "int64", "bool"):
        p.create_var("in_" + dt, [-1], dt, stop_gradient=True)
        p.append_op("assign", {"X": "in_" + dt}, {"Out": "out_" + dt})
    feed = {
        "in_float32": np.array([1.5, -2], np.float32),
        "in_float64": np.array([1e300, 3], np.float64),
        "in_int32": np.array([7, -8], np.int32),
        "in_int64": np.array([2**40, 1], np.int64),
        "in_bool": np.array([True, False]),
    }
    out = nabla.Executor().run(p, feed=feed, fetch_list=["out_" + k[3:] for k in feed])
    for got, want in zip(out, feed.values()):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_feed_is_not_copied_and_never_written():
    p = nabla.Program()
    p.create_var("x", [-1], "float32", stop_gradient=True)
    p.append_op("assign", {"X": "x"}, {"Out": "y"})
    x = np.arange(4, dtype=np.float32)
    (y,) = nabla.Executor().run(p, feed={"x": x}, fetch_list=["x"])
    assert np.shares_memory(x, y)  # the fed var is the caller's array
    x_strided = np.arange(8, dtype=np.float32)[::2]  # not C-contiguous: copied once
    (y2,) = nabla.Executor().run(p, feed={"x": x_strided}, fetch_list=["y"])
    np.testing.assert_array_equal(y2, x_strided)
    ro = np.arange(3, dtype=np.float32)
    ro.flags.writeable = False
    (y3,) = nabla.Executor().run(p, feed={"x": ro}, fetch_list=["y"])
    np.testing.assert_array_equal(y3, ro)
    # A read-only feed is copied: a fetched alias would be a writable view
    # of memory its owner declared immutable (np.frombuffer of bytes).
    frozen = bytes(np.ones(3, np.float32).tobytes())
    (x4,) = nabla.Executor().run(p, feed={"x": np.frombuffer(frozen, np.float32)}, fetch_list=["x"])
    x4[0] = 42.0
    assert np.frombuffer(frozen, np.float32).tolist() == [1.0, 1.0, 1.0]


def test_append_optimizer_builds_the_update_nabla_run_builds(rng):
    p = linear()
    pairs = nabla.append_backward(p, "loss")
    assert nabla.append_optimizer(p, pairs, "momentum", lr=0.1, momentum=0.5) == "optimizer@learning_rate"
    assert [o["type"] for o in p.ops()][-3:] == ["momentum"] * 3
    x = rng.standard_normal((8, 4)).astype(np.float32)
    exe = nabla.Executor(threads=1)
    w1, v1 = exe.run(p, feed={"x": x}, fetch_list=["w", "w@velocity"])
    w2, v2, g2 = exe.run(p, feed={"x": x}, fetch_list=["w", "w@velocity", "w@GRAD"])
    np.testing.assert_allclose(v2, 0.5 * v1 + g2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w2, w1 - 0.1 * v2, rtol=1e-5, atol=1e-7)
    # A bad request leaves the program as it was.
    before = p.to_yaml()
    with pytest.raises(nabla.Error, match="rmsprop"):
        nabla.append_optimizer(p, pairs, "rmsprop")
    assert p.to_yaml() == before


def test_parameters_persist_across_runs_and_sgd_updates_them(rng):
    p = linear()
    pairs = nabla.append_backward(p, "loss")
    p.create_var("lr", [1], "float32", persistable=True, init={"type": "fill_constant", "value": 0.1})
    for param, grad in pairs:
        p.append_op("sgd", {"Param": param, "Grad": grad, "LearningRate": "lr"}, {"ParamOut": param})
    x = rng.standard_normal((8, 4)).astype(np.float32)
    exe = nabla.Executor(threads=1)
    (w0,) = exe.run(p, feed={"x": x}, fetch_list=["w"])  # after the first step
    w1, g1 = exe.run(p, feed={"x": x}, fetch_list=["w", "w@GRAD"])
    w0_before = w0.copy()
    np.testing.assert_allclose(w1, w0 - 0.1 * g1, rtol=1e-6)
    exe.run(p, feed={"x": x})
    np.testing.assert_array_equal(w0, w0_before)
    # A fresh executor starts again from the initializers.
    (w_fresh,) = nabla.Executor().run(p, feed={"x": x}, fetch_list=["w"])
    assert not np.allclose(w_fresh, w1)
    # Feeding a parameter sets it and never writes into the caller's array.
    w_set = np.ones((4, 3), np.float32)
    exe.run(p, feed={"x": x, "w": w_set})
    np.testing.assert_array_equal(w_set, np.ones((4, 3), np.float32))
    assert not np.allclose(exe.get("w"), 1.0)


def test_bad_feeds_raise_and_the_interpreter_lives_on():
    p = linear()
    exe = nabla.Executor()
    x = np.ones((2, 4), np.float32)
    cases = [
        ({"x": x.astype(np.float64)}, ["y"], "feed 'x' has dtype float64 but var 'x' is declared float32"),
        ({"x": np.ones((2, 5), np.float32)}, ["y"], r"feed 'x' has shape \[2, 5\] but var 'x' is declared with shape \[-1, 4\]"),
        ({"nope": x}, ["y"], "feed 'nope': the program has no var 'nope' in block 0"),
        ({}, ["y"], "op 'mul' reads var 'x' but nothing provides it"),
        ({"x": x}, ["zz"], "fetch_list: the program has no var 'zz'"),
        ({"x": np.array(["a"])}, ["y"], "expected dtype float32, float64, int32, int64 or bool"),
        ({"x": object()}, ["y"], "feed 'x'"),
    ]
    for feed, fetch, message in cases:
        with pytest.raises(nabla.Error, match=message) as info:
            exe.run(p, feed=feed, fetch_list=fetch)
        assert isinstance(info.value, RuntimeError) and "\n" not in str(info.value)
    # A forgotten feed on a later run is an error, not the last run's data.
    exe.run(p, feed={"x": x}, fetch_list=["y"])
    with pytest.raises(nabla.Error, match="nothing provides it"):
        exe.run(p, feed={}, fetch_list=["y"])
    (y,) = exe.run(p, feed={"x": x}, fetch_list=["y"])
    assert y.shape == (2, 2)


def test_runtime_shape_mismatch_is_an_error():
    p = nabla.Program.from_yaml(
        """
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      a: {shape: [-1, 3], dtype: float32}
      b: {shape: [-1, 3], dtype: float32}
    ops:
      - {type: elementwise_add, inputs: {X: [a], Y: [b]}, outputs: {Out: [c]}}
"""
    )
    with pytest.raises(nabla.Error, match="elementwise_add"):
        nabla.Executor().run(p, feed={"a": np.ones((2, 3), np.float32), "b": np.ones((4, 3), np.float32)}, fetch_list=["c"])


def test_bad_programs_raise_with_positions(tmp_path):
    with pytest.raises(nabla.Error, match=r"<string>:\d+:\d+"):
        nabla.Program.from_yaml("format: nabla-program/1\nblocks: [")
    with pytest.raises(nabla.Error, match="unknown op|no_such_op"):
        nabla.Program.from_yaml(LINEAR.replace("type: tanh", "type: no_such_op"))
    with pytest.raises(nabla.Error, match="missing.yaml"):
        nabla.Program.load(tmp_path / "missing.yaml")
    with pytest.raises(nabla.Error, match="device"):
        nabla.Executor(device="tpu")
    with pytest.raises(nabla.Error, match="threads"):
        nabla.Executor(threads=-1)
    assert nabla.Program.from_yaml(LINEAR).ops()  # alive and well


# ---------------------------------------------------------- registry, plugins


def test_ops_list_is_what_nabla_ops_json_prints():
    ops = nabla.ops_list()
    by_type = {o["type"]: o for o in ops}
    assert {"mul", "matmul", "softmax_with_cross_entropy", "adam", "while"} <= set(by_type)
    mul = by_type["mul"]
    assert [s["name"] for s in mul["inputs"]] == ["X", "Y"]
    assert {a["name"]: a["default"] for a in mul["attrs"]}["x_num_col_dims"] == 1
    assert mul["has_gradient"] and "float32" in mul["kernels"]["cpu"]
    binary = os.environ.get("NABLA_BIN")
    if binary:
        printed = json.loads(subprocess.run([binary, "ops", "--json"], check=True, capture_output=True, text=True).stdout)
        # Other tests may have loaded a plugin into this process.
        standard = {p["path"] for p in printed["plugins"]}
        assert printed["ops"] == [o for o in ops if o["plugin_path"] in standard]


@pytest.mark.skipif(not os.environ.get("NABLA_TEST_PLUGIN"), reason="the build has no test plugin")
def test_load_plugin_adds_ops():
    path = os.environ["NABLA_TEST_PLUGIN"]
    added = nabla.load_plugin(path)
    assert {"acme_cube", "acme_cube_grad", "acme_bad_cube"} <= set(added)
    assert "acme_cube" in {o["type"] for o in nabla.ops_list()}
    assert nabla.load_plugin(path) == added  # the same file twice is a no-op
    p = nabla.Program()
    p.create_var("x", [3], "float64", stop_gradient=False)
    p.append_op("acme_cube", {"X": "x"}, {"Out": "y"})
    (y,) = nabla.Executor().run(p, feed={"x": np.array([1.0, 2.0, -3.0])}, fetch_list=["y"])
    np.testing.assert_array_equal(y, [1.0, 8.0, -27.0])
    with pytest.raises(nabla.Error, match="missing"):
        nabla.load_plugin("/nonexistent/libmissing.so")


def test_opencl_executor_matches_cpu(rng):
    try:
        exe = nabla.Executor(device="opencl")
    except nabla.Error as e:  # a build without OpenCL, or no platform: said in one line
        assert "opencl" in str(e).lower() or "device" in str(e)
        pytest.skip(str(e))
    p = linear()
    nabla.append_backward(p, "loss")
    x = rng.standard_normal((6, 4)).astype(np.float32)
    fetch = ["y", "loss", "w@GRAD", "b@GRAD"]
    for ours, ref in zip(exe.run(p, feed={"x": x}, fetch_list=fetch), nabla.Executor().run(p, feed={"x": x}, fetch_list=fetch)):
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
