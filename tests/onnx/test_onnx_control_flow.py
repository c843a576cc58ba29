"""Loop and If imported as nabla's while and conditional_block: outputs
against numpy, gradients through the loop and the branches against central
differences, and a constant If condition inlining its branch."""
import numpy as np
import pytest

import onnx_util

W = np.linspace(-1, 1, 6).reshape(2, 3)
TRIPS = 6


def reference(x, w):
    """y: a loop of at most TRIPS steps that stops once sum(y) >= 40; z: an
    if on sum(x) > 0; loss: sum(z)."""
    y = x.copy()
    for i in range(TRIPS):
        y = y * 1.5 + w + i
        if not y.sum() < 40:
            break
    z = y * 2 if x.sum() > 0 else y - w
    return y, z, z.sum()


def control_flow_model(path, cond_constant=None):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    body = h.make_graph(
        [h.make_node("Cast", ["it"], ["itf"], to=T.FLOAT),
         h.make_node("Mul", ["y_in", "c15"], ["y1"]),
         h.make_node("Add", ["y1", "w"], ["y2"]),
         h.make_node("Add", ["y2", "itf"], ["y_out"]),
         h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         h.make_node("Less", ["s", "lim"], ["c_out"])],
        "body",
        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("y_in", T.FLOAT, [2, 3])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, [2, 3])],
        [nh.from_array(np.array(1.5, np.float32), "c15"), nh.from_array(np.array(40.0, np.float32), "lim")])
    then_g = h.make_graph([h.make_node("Mul", ["y", "two"], ["t_out"])], "then", [],
                          [h.make_tensor_value_info("t_out", T.FLOAT, [2, 3])],
                          [nh.from_array(np.array(2.0, np.float32), "two")])
    else_g = h.make_graph([h.make_node("Sub", ["y", "w"], ["e_out"])], "else", [],
                          [h.make_tensor_value_info("e_out", T.FLOAT, [2, 3])])
    inits = [nh.from_array(np.array(TRIPS, np.int64), "M"), nh.from_array(W.astype(np.float32), "w"),
             nh.from_array(np.array(0.0, np.float32), "zero")]
    nodes = [h.make_node("Loop", ["M", "", "x"], ["y"], body=body)]
    if cond_constant is None:
        nodes += [h.make_node("ReduceSum", ["x"], ["xs"], keepdims=0), h.make_node("Greater", ["xs", "zero"], ["pos"])]
    else:
        inits.append(nh.from_array(np.array(cond_constant), "pos"))
    nodes += [h.make_node("If", ["pos"], ["z"], then_branch=then_g, else_branch=else_g),
              h.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)]
    g = h.make_graph(nodes, "control_flow", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3]), h.make_tensor_value_info("z", T.FLOAT, [2, 3]),
                      h.make_tensor_value_info("loss", T.FLOAT, [])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)


# Both branches; one stops early (sum >= 40), the other runs all TRIPS steps.
XS = [np.full((2, 3), 0.5, np.float32), np.full((2, 3), -0.1, np.float32)]


@pytest.mark.parametrize("k", [0, 1])
def test_loop_and_if_outputs_and_gradients(tmp_path, k):
    control_flow_model(tmp_path / "cf.onnx")
    program, weights = onnx_util.import_model(tmp_path / "cf.onnx", tmp_path)
    text = program.read_text()
    assert "type: while" in text and "type: conditional_block" in text
    x = XS[k]
    got = onnx_util.exec_program(program, {"x": x}, ["y", "z"], tmp_path / "fwd", weights=weights)
    y, z, _ = reference(x.astype(np.float64), W)
    np.testing.assert_allclose(got["y"], y, rtol=1e-5)
    np.testing.assert_allclose(got["z"], z, rtol=1e-5)
    # The gradient of loss through the branch taken and every step of the
    # loop, against central differences of the reference.
    grads = onnx_util.exec_program(program, {"x": x}, ["w@GRAD", "x@GRAD"], tmp_path / "bwd", weights=weights,
                                   extra=["--backward", "loss", "--params", "w,x"])
    eps = 1e-6
    for name, base in [("w", W), ("x", x.astype(np.float64))]:
        want = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            hi, lo = base.copy(), base.copy()
            hi[i] += eps
            lo[i] -= eps
            args_hi = (x.astype(np.float64), hi) if name == "w" else (hi, W)
            args_lo = (x.astype(np.float64), lo) if name == "w" else (lo, W)
            want[i] = (reference(*args_hi)[2] - reference(*args_lo)[2]) / (2 * eps)
        np.testing.assert_allclose(grads[f"{name}@GRAD"], want, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("cond", [True, False])
def test_constant_if_inlines_its_branch(tmp_path, cond):
    control_flow_model(tmp_path / "cf.onnx", cond_constant=cond)
    program, weights = onnx_util.import_model(tmp_path / "cf.onnx", tmp_path)
    assert "conditional_block" not in program.read_text()
    x = XS[0]
    got = onnx_util.exec_program(program, {"x": x}, ["z"], tmp_path / "fwd", weights=weights)
    y, _, _ = reference(x.astype(np.float64), W)
    np.testing.assert_allclose(got["z"], y * 2 if cond else y - W, rtol=1e-5)


def test_loop_scan_outputs_are_one_line_errors(tmp_path):
    """A Loop with scan outputs (a stacked tensor of run-time length) is
    refused naming the node, exit 2, nothing written."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Identity", ["y_in"], ["y_out"]),
         h.make_node("Identity", ["y_in"], ["scan"])], "body",
        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("y_in", T.FLOAT, [2])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, [2]),
         h.make_tensor_value_info("scan", T.FLOAT, [2])])
    g = h.make_graph([h.make_node("Loop", ["", "", "x"], ["y", "ys"], body=body, name="the_loop")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2]), h.make_tensor_value_info("ys", T.FLOAT, None)])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), tmp_path / "scan.onnx")
    p = onnx_util.run("import", tmp_path / "scan.onnx", "-o", tmp_path / "p.yaml", check=False)
    assert p.returncode == 2 and "'the_loop' (Loop)" in p.stderr and "scan outputs" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_sequence_lens_at_run_time(tmp_path, cell):
    """A bidirectional LSTM/GRU exported by PyTorch, its sequence_lens made a
    graph input (run-time lengths, one per row): each row's outputs and last
    states against PyTorch run on that row's own prefix; Y is 0 past it."""
    torch = pytest.importorskip("torch")
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    torch.manual_seed(0)
    net = getattr(torch.nn, cell)(4, 5, bidirectional=True)
    x = torch.randn(6, 3, 4)
    torch.onnx.export(net, (x,), tmp_path / "rnn.onnx", input_names=["x"], output_names=["y", "h"] +
                      (["c"] if cell == "LSTM" else []), opset_version=13)
    m = onnx.load(tmp_path / "rnn.onnx")
    node = next(n for n in m.graph.node if n.op_type == cell)
    while len(node.input) < 5:
        node.input.append("")
    node.input[4] = "lens"
    m.graph.input.append(h.make_tensor_value_info("lens", T.INT32, [3]))
    onnx.save(m, tmp_path / "lens.onnx")
    program, weights = onnx_util.import_model(tmp_path / "lens.onnx", tmp_path)
    lens = np.array([6, 2, 4], np.int32)
    outs = ["y", "h"] + (["c"] if cell == "LSTM" else [])
    got = onnx_util.exec_program(program, {"x": x.numpy(), "lens": lens}, outs, tmp_path / "run", weights=weights)
    with torch.no_grad():
        for b, n in enumerate(lens):
            y, state = net(x[:n, b:b + 1])
            want_h = state[0] if cell == "LSTM" else state
            np.testing.assert_allclose(got["y"][:n, b], y[:, 0].numpy(), rtol=1e-4, atol=1e-5)
            assert not got["y"][n:, b].any()
            np.testing.assert_allclose(got["h"][:, b], want_h[:, 0].numpy(), rtol=1e-4, atol=1e-5)
            if cell == "LSTM":
                np.testing.assert_allclose(got["c"][:, b], state[1][:, 0].numpy(), rtol=1e-4, atol=1e-5)


def test_torch_scripted_loop_and_if_with_gradients(tmp_path):
    """A recurrent cell written as a Python for loop and an if, scripted by
    torch.jit and exported (PyTorch writes Loop and If): outputs and the
    gradients of a loss through every step against PyTorch's autograd."""
    torch = pytest.importorskip("torch")

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 5)
            self.rec = torch.nn.Linear(5, 5)
            self.register_buffer("weight", torch.linspace(-1, 1, 15).reshape(3, 5))

        def forward(self, x):
            h = torch.zeros(x.size(1), 5)
            for i in range(x.size(0)):
                h = torch.tanh(self.lin(x[i]) + self.rec(h))
            if h.sum() > 0:
                y = h * 2
            else:
                y = h - 1
            return y, (y * self.weight).mean()

    torch.manual_seed(0)
    cell = Cell()
    x = torch.randn(6, 3, 4)
    torch.onnx.export(torch.jit.script(cell), (x,), tmp_path / "cell.onnx", input_names=["x"],
                      output_names=["y", "loss"], opset_version=13)
    program, weights = onnx_util.import_model(tmp_path / "cell.onnx", tmp_path)
    assert "type: while" in program.read_text()
    params = ["lin.weight", "rec.weight", "rec.bias"]
    got = onnx_util.exec_program(program, {"x": x.numpy()}, ["y", "loss", *[p + "@GRAD" for p in params]],
                                 tmp_path / "run", weights=weights,
                                 extra=["--backward", "loss", "--params", ",".join(params)])
    y, loss = cell(x)
    loss.backward()
    np.testing.assert_allclose(got["y"], y.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["loss"].reshape(()), loss.item(), rtol=1e-4)
    named = dict(cell.named_parameters())
    for p in params:
        np.testing.assert_allclose(got[p + "@GRAD"], named[p].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=p)


def test_nested_loops_read_outer_values_and_counters(tmp_path):
    """A Loop inside a Loop's body: the inner body reads a graph initializer
    (w) and the outer counter; y = x + 6 w + 2 (0 + 1 + 2), and the gradient
    of sum(y) w.r.t. w (through both whiles) is 6."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    inner = h.make_graph(
        [h.make_node("Identity", ["ci"], ["co"]), h.make_node("Add", ["zi", "w"], ["z1"]),
         h.make_node("Cast", ["oi"], ["oif"], to=T.FLOAT), h.make_node("Add", ["z1", "oif"], ["zo"])],
        "inner", [h.make_tensor_value_info("ii", T.INT64, []), h.make_tensor_value_info("ci", T.BOOL, []),
                  h.make_tensor_value_info("zi", T.FLOAT, [2])],
        [h.make_tensor_value_info("co", T.BOOL, []), h.make_tensor_value_info("zo", T.FLOAT, [2])])
    outer = h.make_graph(
        [h.make_node("Identity", ["c"], ["c2"]), h.make_node("Loop", ["two", "", "yi"], ["yo"], body=inner)],
        "outer", [h.make_tensor_value_info("oi", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                  h.make_tensor_value_info("yi", T.FLOAT, [2])],
        [h.make_tensor_value_info("c2", T.BOOL, []), h.make_tensor_value_info("yo", T.FLOAT, [2])],
        [nh.from_array(np.array(2, np.int64), "two")])
    g = h.make_graph([h.make_node("Loop", ["three", "", "x"], ["y"], body=outer),
                      h.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
                     "nested", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2]), h.make_tensor_value_info("loss", T.FLOAT, [])],
                     [nh.from_array(np.array(3, np.int64), "three"),
                      nh.from_array(np.array([0.5, -1.0], np.float32), "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, tmp_path / "nested.onnx")
    program, weights = onnx_util.import_model(tmp_path / "nested.onnx", tmp_path)
    got = onnx_util.exec_program(program, {"x": np.array([1.0, 2.0], np.float32)}, ["y", "w@GRAD"], tmp_path / "run",
                                 weights=weights, extra=["--backward", "loss", "--params", "w"])
    np.testing.assert_array_equal(got["y"], [10.0, 2.0])
    np.testing.assert_array_equal(got["w@GRAD"], [6.0, 6.0])
