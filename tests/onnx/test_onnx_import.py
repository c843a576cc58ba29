"""Converters checked past what ONNX's node tests feed them: values against
numpy, and refusals in one line naming the node and the file."""
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
