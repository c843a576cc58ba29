"""ONNX models in and out (docs/onnx.md): the importer and exporter of
`nabla import` and `nabla export`, on Program objects and NumPy weights.

    program, weights = nabla.onnx.load("model.onnx")
    (y,) = nabla.Executor().run(program, feed={**weights, "x": x}, fetch_list=["y"])
    nabla.onnx.save(program, "out.onnx", weights=weights)
"""
from . import _nabla

__all__ = ["load", "save"]


def load(path, input_shapes=None):
    """Converts an ONNX model: returns (Program, {persistable var: ndarray}).
    input_shapes={"x": [8, 3, 32, 32]} fixes a graph input's dims (dynamic
    ones included), so shape arithmetic on it folds."""
    shapes = {name: [int(d) for d in dims] for name, dims in (input_shapes or {}).items()}
    return _nabla._onnx_load(str(path), shapes)


def save(program, path, weights=None, outputs=None, opset=17):
    """Writes block 0's forward ops (for inference) as an ONNX model at path,
    checked by onnx's checker and shape inference. weights: {name: ndarray}
    for persistable vars (the others take their init: values). outputs: the
    graph outputs (default: every var written and never read)."""
    if isinstance(outputs, str):  # one name, not its characters
        outputs = [outputs]
    _nabla._onnx_save(program, str(path), dict(weights or {}), list(outputs or []), int(opset))
