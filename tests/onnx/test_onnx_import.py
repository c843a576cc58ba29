"""Converters checked past what ONNX's node tests feed them: values against
numpy, and refusals in one line naming the node and the file."""
import json

import numpy as np
import pytest

import onnx_util

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def save(tmp_path, nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return path


def run(tmp_path, path, feeds, fetches):
    program, weights = onnx_util.import_model(path, tmp_path)
    return onnx_util.exec_program(program, feeds, fetches, tmp_path / "out", weights=weights)


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_pow_keeps_the_exponent_and_the_base_dtype(tmp_path):
    """ONNX's Pow computes base ** exponent and gives the base's dtype
    (numpy's power, then astype). An integer base with a float exponent is
    computed in float64 and truncated back: the constant 0.5 was converted
    to the base's int64 (0), so 4 ** 0.5 gave 1. A constant float base is
    never converted to an integer exponent's dtype (2.5 is not 2)."""
    path = save(tmp_path, [
        helper.make_node("Pow", ["x", "half"], ["root"], name="int_root"),
        helper.make_node("Pow", ["i", "e"], ["ipow"], name="int_base_float_exp"),
        helper.make_node("Pow", ["base", "k"], ["fpow"], name="float_base_int_exp"),
    ], [info("x", TensorProto.INT64, [1, 3]), info("i", TensorProto.INT32, [4]), info("e", TensorProto.FLOAT, [4]),
        info("k", TensorProto.INT64, [3])],
        [info("root", TensorProto.INT64, [1, 3]), info("ipow", TensorProto.INT32, [4]),
         info("fpow", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array(2.5, np.float32), "base")])
    feeds = {"x": np.array([[4, 9, 16]], np.int64), "i": np.array([8, 2, 27, 10], np.int32),
             "e": np.array([1 / 3, 0.5, 1 / 3, 2.0], np.float32), "k": np.array([0, 1, 3], np.int64)}
    got = run(tmp_path, path, feeds, ["root", "ipow", "fpow"])
    assert got["root"].dtype == np.int64 and got["ipow"].dtype == np.int32 and got["fpow"].dtype == np.float32
    np.testing.assert_array_equal(got["root"], [[2, 3, 4]])
    np.testing.assert_array_equal(got["ipow"], np.power(feeds["i"], feeds["e"]).astype(np.int32))
    np.testing.assert_allclose(got["fpow"], [1.0, 2.5, 15.625], rtol=1e-6)


def test_gather_wraps_run_time_negative_indices(tmp_path):
    """ONNX's Gather takes indices in [-s, s - 1]; nabla's gather in [0, s).
    Constant indices were wrapped at import, run-time ones failed at exec:
    they are wrapped in the graph now (int64 and int32, any rank)."""
    path = save(tmp_path, [
        helper.make_node("Gather", ["x", "i"], ["rows"], axis=0, name="rows"),
        helper.make_node("Gather", ["x", "j"], ["cols"], axis=1, name="cols"),
        helper.make_node("Gather", ["x", "k"], ["grid"], axis=0, name="grid"),
    ], [info("x", TensorProto.FLOAT, [4, 3]), info("i", TensorProto.INT64, [3]), info("j", TensorProto.INT32, [2]),
        info("k", TensorProto.INT64, [2, 2])],
        [info("rows", TensorProto.FLOAT, [3, 3]), info("cols", TensorProto.FLOAT, [4, 2]),
         info("grid", TensorProto.FLOAT, [2, 2, 3])])
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    feeds = {"x": x, "i": np.array([0, -1, -4]), "j": np.array([-3, 2], np.int32), "k": np.array([[-2, 1], [3, -1]])}
    got = run(tmp_path, path, feeds, ["rows", "cols", "grid"])
    np.testing.assert_array_equal(got["rows"], np.take(x, feeds["i"], axis=0))
    np.testing.assert_array_equal(got["cols"], np.take(x, feeds["j"], axis=1))
    np.testing.assert_array_equal(got["grid"], np.take(x, feeds["k"], axis=0))


def import_fails(tmp_path, path):
    out = tmp_path / "out.yaml"
    p = onnx_util.run("import", path, "-o", out, check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert not out.exists()
    assert str(path) in p.stderr, p.stderr  # the file, with the node
    return p.stderr


def test_gather_run_time_indices_into_a_dynamic_dim_are_refused(tmp_path):
    path = save(tmp_path, [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="pick")],
                [info("x", TensorProto.FLOAT, ["n", 3]), info("i", TensorProto.INT64, [2])],
                [info("y", TensorProto.FLOAT, [2, 3])])
    err = import_fails(tmp_path, path)
    assert "node 'pick' (Gather)" in err and "dynamic dim" in err and "--input-shape" in err, err


def cpu_kernels(op):
    ops = json.loads(onnx_util.run("ops", "--json").stdout)["ops"]
    return set(next(o for o in ops if o["type"] == op)["kernels"].get("cpu", []))


INT_NODES = {
    "Concat": ("concat", lambda: helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat_ids"), 5,
               lambda a, b: np.concatenate([a, b])),
    "Clip": ("clip", lambda: helper.make_node("Clip", ["a", "lo", "hi"], ["y"], name="clip_ids"), 3,
             lambda a, b: np.clip(a, 0, 5)),
    "Abs": ("abs", lambda: helper.make_node("Abs", ["a"], ["y"], name="abs_ids"), 3, lambda a, b: np.abs(a)),
    "Relu": ("relu", lambda: helper.make_node("Relu", ["a"], ["y"], name="relu_ids"), 3,
             lambda a, b: np.maximum(a, 0)),
    "MatMul": ("matmul", lambda: helper.make_node("MatMul", ["m", "w"], ["y"], name="matmul_ids"), 3,
               None),
}


@pytest.mark.parametrize("op_type", sorted(INT_NODES))
def test_integer_inputs_of_float_only_ops_are_refused_by_node(tmp_path, op_type):
    """Concat, Clip, Abs, Relu and MatMul on int64 are valid ONNX; nabla's
    ops have float kernels only. Abs, Relu and MatMul imported and failed at
    exec ("no kernel"), Concat and Clip failed naming a line of the
    generated program. The converter asks the kernel registry, so an op that
    gains the dtype's kernel (concat's int kernels are on their way)
    converts, and its values are checked instead."""
    nabla_op, make, n_out, reference = INT_NODES[op_type]
    node = make()
    a = np.array([-1, 2, 9], np.int64)
    b = np.array([7, -3], np.int64)
    feeds = {"a": a, "b": b}
    inits = [numpy_helper.from_array(np.array(0, np.int64), "lo"), numpy_helper.from_array(np.array(5, np.int64), "hi")]
    inputs = [info(n, TensorProto.INT64, [len(feeds[n])]) for n in ("a", "b") if n in node.input]
    out_shape = [n_out]
    if op_type == "MatMul":
        inputs = [info("m", TensorProto.INT64, [1, 2])]
        inits = [numpy_helper.from_array(np.arange(6, dtype=np.int64).reshape(2, 3), "w")]
        feeds = {"m": np.array([[2, -1]], np.int64)}
        out_shape = [1, 3]
        reference = lambda a, b: feeds["m"] @ np.arange(6).reshape(2, 3)  # noqa: E731
    else:
        inits = [t for t in inits if t.name in node.input]
    path = save(tmp_path, [node], inputs, [info("y", TensorProto.INT64, out_shape)], inits, opset=14)  # Relu's ints
    if "int64" in cpu_kernels(nabla_op):
        got = run(tmp_path, path, feeds, ["y"])
        np.testing.assert_array_equal(got["y"], reference(a, b))
        return
    err = import_fails(tmp_path, path)
    assert f"no converter for node '{node.name}' ({op_type})" in err and "int64" in err, err
    assert f"nabla's {nabla_op} has cpu kernels for" in err, err
