"""nabla.onnx: load a PyTorch-exported model, run it, save it back."""
import numpy as np
import pytest
import torch

import nabla

onnx = pytest.importorskip("onnx")


def test_load_run_save_round_trip(tmp_path):
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2)).eval()
    x = torch.randn(3, 6)
    torch.onnx.export(m, (x,), tmp_path / "m.onnx", input_names=["x"], output_names=["y"], opset_version=13,
                      dynamic_axes={"x": {0: "n"}})
    program, weights = nabla.onnx.load(tmp_path / "m.onnx")
    assert isinstance(program, nabla.Program) and set(weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    (y,) = nabla.Executor().run(program, feed={**weights, "x": x.numpy()}, fetch_list=["y"])
    np.testing.assert_allclose(y, m(x).detach().numpy(), rtol=1e-5, atol=1e-6)

    nabla.onnx.save(program, tmp_path / "back.onnx", weights=weights, outputs=["y"])
    onnx.checker.check_model(onnx.load(tmp_path / "back.onnx"), full_check=True)
    program2, weights2 = nabla.onnx.load(tmp_path / "back.onnx", input_shapes={"x": [3, 6]})
    (y2,) = nabla.Executor().run(program2, feed={**weights2, "x": x.numpy()}, fetch_list=["y"])
    np.testing.assert_allclose(y2, y, rtol=1e-6)


def test_errors_are_nabla_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff")
    with pytest.raises(nabla.Error, match="not an ONNX model"):
        nabla.onnx.load(bad)
    p = nabla.Program.from_yaml("""
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 4], dtype: float32}
    ops:
      - {type: fill_zeros_like, inputs: {X: [x]}, outputs: {Out: [z]}}
""")
    with pytest.raises(nabla.Error, match="fill_zeros_like"):
        nabla.onnx.save(p, tmp_path / "z.onnx")
    assert not (tmp_path / "z.onnx").exists()


def test_save_checks_weights_and_takes_one_output_name(tmp_path):
    p = nabla.Program.from_yaml("""
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 4], dtype: float32}
      w: {shape: [4, 3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [y]}}
      - {type: softmax, inputs: {X: [y]}, outputs: {Out: [prob]}}
""")
    out = tmp_path / "m.onnx"
    with pytest.raises(nabla.Error, match="tensor 'W' names no var"):
        nabla.onnx.save(p, out, weights={"W": np.ones((4, 3), np.float32)})
    with pytest.raises(nabla.Error, match=r"tensor 'w' has shape \[1\] but the var is declared \[4, 3\]"):
        nabla.onnx.save(p, out, weights={"w": np.ones(1, np.float32)})
    with pytest.raises(nabla.Error, match="tensor 'w' is float64 but the var is float32"):
        nabla.onnx.save(p, out, weights={"w": np.ones((4, 3))})
    assert not out.exists()
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    nabla.onnx.save(p, out, weights={"w": w}, outputs="prob")  # one name, not its letters
    program, weights = nabla.onnx.load(out)
    np.testing.assert_array_equal(weights["w"], w)
