"""Bad ONNX input and unexportable programs: one line naming the node (or
op) and what is missing, exit 2, nothing written."""
import numpy as np
import pytest

import onnx_util

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def linear_model():
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [f32("x", [2, 4])], [f32("y", [2, 3])],
                 [w])


def import_fails(tmp_path, path, *extra):
    out = tmp_path / "out.yaml"
    p = onnx_util.run("import", path, "-o", out, *extra, check=False)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert not out.exists() and not (tmp_path / "out.safetensors").exists()
    return p.stderr


def test_op_without_converter_names_node_and_op(tmp_path):
    m = model([helper.make_node("Sinh", ["x"], ["y"], name="the_sinh")], [f32("x", [3])], [f32("y", [3])])
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "node 'the_sinh' (Sinh)" in err and "needs nabla op sinh" in err
    # Where: the file too (a node's error named the node only).
    assert f"{tmp_path / 'm.onnx'}: no converter for node 'the_sinh'" in err, err


def test_attribute_value_without_converter(tmp_path):
    m = model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="tk", axis=0)],
              [f32("x", [5, 2])], [f32("v", [2, 2]), helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2])],
              [numpy_helper.from_array(np.array([2], dtype=np.int64), "k")])
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "node 'tk' (TopK)" in err and "an axis other than the last" in err, err


def test_dtype_without_converter(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [3])
    m = model([helper.make_node("Identity", ["x"], ["y"], name="ident")], [x], [x])
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "graph input 'x' (read by node 'ident' (Identity)) has dtype UINT8" in err, err


@pytest.mark.parametrize("to", [TensorProto.FLOAT16, TensorProto.INT8])
def test_cast_to_a_dtype_nabla_lacks_names_node_and_dtype(tmp_path, to):
    m = model([helper.make_node("Cast", ["x"], ["h"], to=to, name="narrow"), helper.make_node("Cast", ["h"], ["y"], to=1)],
              [f32("x", [3])], [f32("y", [3])])
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "node 'narrow' (Cast)" in err and TensorProto.DataType.Name(to) in err, err


def test_bfloat16_initializers_and_casts(tmp_path):
    """bfloat16 (nabla has it): an initializer in raw bytes and one in
    int32_data (ONNX's typed form: the 16 bits), and casts both ways."""
    values = np.array([1.0, -2.5, 0.15625, 2.0**18], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact: these values fit bfloat16
    raw = helper.make_tensor("braw", TensorProto.BFLOAT16, [4], bits.tobytes(), raw=True)
    typed = helper.make_tensor("btyped", TensorProto.BFLOAT16, [4], values.tolist())  # helper stores the bits
    assert list(typed.int32_data) == bits.tolist()
    m = model([helper.make_node("Cast", ["braw"], ["a"], to=1), helper.make_node("Cast", ["btyped"], ["b"], to=1),
               helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
               helper.make_node("Cast", ["xb"], ["c"], to=1)],
              [f32("x", [4])], [f32("a", [4]), f32("b", [4]), f32("c", [4])], [raw, typed])
    onnx.save(m, tmp_path / "m.onnx")
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    x = np.array([1.0, 1.00390625, -7.0, 0.5], np.float32)  # 1 + 2^-8 rounds to 1 in bfloat16
    got = onnx_util.exec_program(program, {"x": x}, ["a", "b", "c"], tmp_path / "run", weights=weights)
    np.testing.assert_array_equal(got["a"], values)
    np.testing.assert_array_equal(got["b"], values)
    np.testing.assert_array_equal(got["c"], [1.0, 1.0, -7.0, 0.5])


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_file(tmp_path, keep):
    data = linear_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    err = import_fails(tmp_path, path)
    assert "cut.onnx" in err


def test_sizes_checked_before_allocation(tmp_path):
    m = linear_model()
    t = m.graph.initializer[0]
    del t.dims[:]
    t.dims.extend([1 << 20, 1 << 20])  # 4 TiB claimed, 48 bytes present
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "initializer 'w'" in err


def test_external_data(tmp_path):
    m = linear_model()
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    x = np.ones((2, 4), np.float32)
    y = onnx_util.exec_program(program, {"x": x}, ["y"], tmp_path / "run", weights=weights)["y"]
    np.testing.assert_allclose(y, x @ np.arange(12, dtype=np.float32).reshape(4, 3))
    # A truncated external file, then a missing one.
    (tmp_path / "w.bin").write_bytes((tmp_path / "w.bin").read_bytes()[:20])
    assert "runs past the end" in import_fails(tmp_path, tmp_path / "m.onnx")
    (tmp_path / "w.bin").unlink()
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "initializer 'w'" in err and "w.bin is missing" in err


def test_input_shape_must_match(tmp_path):
    onnx.save(linear_model(), tmp_path / "m.onnx")
    assert "--input-shape x" in import_fails(tmp_path, tmp_path / "m.onnx", "--input-shape", "x=2,5")
    assert "--input-shape nope" in import_fails(tmp_path, tmp_path / "m.onnx", "--input-shape", "nope=1")


def test_export_of_op_without_exporter(tmp_path):
    program = tmp_path / "p.yaml"
    program.write_text("""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 4], dtype: float32}
    ops:
      - {type: fill_zeros_like, inputs: {X: [x]}, outputs: {Out: [z]}}
""")
    p = onnx_util.run("export", program, "-o", tmp_path / "m.onnx", check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "fill_zeros_like" in p.stderr, p.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_one_hot_depth_out_of_range(tmp_path):
    depth = numpy_helper.from_array(np.array(0.0, np.float32), "depth")
    values = numpy_helper.from_array(np.array([0, 1], np.float32), "values")
    m = model([helper.make_node("OneHot", ["ids", "depth", "values"], ["y"], name="hot")],
              [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])], [f32("y", [3, 0])], [depth, values])
    onnx.save(m, tmp_path / "m.onnx")
    err = import_fails(tmp_path, tmp_path / "m.onnx")
    assert "node 'hot' (OneHot)" in err and "depth 0" in err, err


def test_export_output_listed_twice(tmp_path):
    """--output s,s named the graph output twice (ONNX's checker let it
    pass): refused, naming the output."""
    program = tmp_path / "p.yaml"
    program.write_text("""format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: softmax, inputs: {X: [x]}, outputs: {Out: [s]}}
""")
    p = onnx_util.run("export", program, "-o", tmp_path / "m.onnx", "--output", "s,s", check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "--output s" in p.stderr and "twice" in p.stderr, p.stderr
    assert not (tmp_path / "m.onnx").exists()
