"""The eager half of the Python API (docs/python.md): nabla.tensor, operators, nabla.call,
nabla.ops.*, no_grad, backward and retain_graph, the Tape and its program
run back through the Executor, and the seed's three networks against PyTorch."""
import importlib.util
import os
import pathlib
import shutil

import numpy as np
import pytest
import torch

import nabla

SEED = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "seed_networks.py"


def seed_module():
    spec = importlib.util.spec_from_file_location("seed_networks", SEED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("net", ["softmax_regression", "mlp", "rnn"])
def test_seed_networks_match_torch(net):
    seed = seed_module()
    diffs = seed.max_diffs(net, seed.seed_data())
    assert len(diffs) >= 3  # the loss and at least two gradients
    for key, diff in diffs.items():
        assert diff < 1e-5, (net, key, diff)


def test_tensor_from_numpy_shares_and_converts(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = nabla.tensor(a, requires_grad=True, name="a")
    assert t.shape == (3, 4) and t.dtype == np.float32 and t.name == "a" and t.requires_grad and t.is_leaf
    assert t.grad is None
    out = t.numpy()
    assert np.shares_memory(out, a) and not out.flags.writeable
    np.testing.assert_array_equal(out, a)
    for dt in (np.float64, np.int32, np.int64, np.bool_):
        b = np.ones(5, dt)
        assert nabla.tensor(b).dtype == dt and nabla.tensor(b).numpy().dtype == dt
    assert nabla.tensor(np.arange(12, dtype=np.float32)[::2]).numpy().tolist() == list(range(0, 12, 2))
    assert nabla.tensor([[1.0, 2.0]]).dtype == np.float64  # anything np.asarray takes
    with pytest.raises(nabla.Error, match="dtype"):
        nabla.tensor(np.array(["x"]))


def test_operators_match_numpy_and_torch_gradients(rng):
    xa = rng.standard_normal((4, 3))
    ya = rng.standard_normal((4, 3)) + 3.0
    wa = rng.standard_normal((3, 2))
    ba = rng.standard_normal(3)
    x, y, w, b = (nabla.tensor(v, requires_grad=True) for v in (xa, ya, wa, ba))
    out = ((x + y) * x - y / 2.0 + b - 1.0) / y
    out = (-out + 2.0 * out - 3.0 / y) @ w
    loss = nabla.ops.mean(out)
    tx, ty, tw, tb = (torch.tensor(v, requires_grad=True) for v in (xa, ya, wa, ba))
    tout = ((tx + ty) * tx - ty / 2.0 + tb - 1.0) / ty
    tout = (-tout + 2.0 * tout - 3.0 / ty) @ tw
    tloss = tout.mean()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    mixed = np.ones(3) - x  # NumPy on the left defers to the tensor
    assert isinstance(mixed, nabla.Tensor) and mixed.requires_grad
    np.testing.assert_allclose(mixed.numpy(), 1 - xa)
    loss.backward()
    tloss.backward()
    for ours, theirs in ((x, tx), (y, ty), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_call_returns_slots_and_lists():
    x = nabla.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    out = nabla.call("split", {"X": x}, {"num": 3, "axis": 1}, output_counts={"Out": 3})
    assert isinstance(out["Out"], list) and len(out["Out"]) == 3
    np.testing.assert_array_equal(out["Out"][2].numpy(), [[2], [5]])
    joined = nabla.call("concat", {"X": [out["Out"][2], out["Out"][0]]}, {"axis": 1})
    assert set(joined) == {"Out"}
    np.testing.assert_array_equal(joined["Out"].numpy(), [[2, 0], [5, 3]])
    nabla.ops.mean(joined["Out"]).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.25, 0, 0.25], [0.25, 0, 0.25]])
    with pytest.raises(nabla.Error, match="no_such_op"):
        nabla.call("no_such_op", {"X": x})
    with pytest.raises(nabla.Error, match="has no attribute 'nmu'"):
        nabla.call("split", {"X": x}, {"nmu": 3})


def test_bfloat16_tensors_read_back_as_float32():
    # NumPy has no bfloat16: .numpy() is an exact float32 copy (as `nabla exec
    # --fetch` writes bf16 vars) and .dtype names the type.
    x = nabla.tensor(np.array([[1.0, 1.00390625, -3.5], [1e-3, 0.1, 65504.0]], dtype=np.float32))
    low = nabla.call("cast", {"X": x}, {"in_dtype": "float32", "out_dtype": "bfloat16"})["Out"]
    assert low.dtype == "bfloat16"
    got = low.numpy()
    assert got.dtype == np.float32 and got.shape == (2, 3)
    want = torch.from_numpy(x.numpy().copy()).bfloat16().float().numpy()
    np.testing.assert_array_equal(got, want)
    assert float(nabla.ops.mean(nabla.call("cast", {"X": low}, {"in_dtype": "bfloat16", "out_dtype": "float32"})[
        "Out"])) == pytest.approx(float(want.mean()))


def test_ops_namespace_from_the_registry():
    assert "mul" in dir(nabla.ops) and "softmax_with_cross_entropy" in dir(nabla.ops)
    doc = nabla.ops.scale.__doc__
    assert "Inputs:" in doc and "scale (float, default 1.0)" in doc
    x = nabla.tensor(np.array([1.0, 2.0], np.float32))
    np.testing.assert_allclose(nabla.ops.scale(x, scale=3, bias=1).numpy(), [4, 7])
    np.testing.assert_allclose(nabla.ops.scale(X=x).numpy(), [1, 2])
    out = nabla.ops.softmax_with_cross_entropy(nabla.tensor(np.zeros((2, 4), np.float32)), np.array([[1], [3]]))
    assert out.Loss is out["Loss"] is out[1]
    np.testing.assert_allclose(out.Loss.numpy(), np.log(4) * np.ones((2, 1)), rtol=1e-6)
    with pytest.raises(TypeError, match="no input or attribute 'bogus'"):
        nabla.ops.scale(x, bogus=1)


@pytest.mark.skipif(not os.environ.get("NABLA_TEST_PLUGIN"), reason="the build has no test plugin")
def test_a_plugin_op_is_a_python_function_with_its_gradient():
    nabla.load_plugin(os.environ["NABLA_TEST_PLUGIN"])
    assert nabla.ops.acme_cube.__doc__.startswith("Out = X^3")
    x = nabla.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    y = nabla.ops.acme_cube(x)
    np.testing.assert_allclose(y.numpy(), [1.0, -8.0, 0.125])
    nabla.ops.reduce_sum(y, reduce_all=True).backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0, 0.75])


def test_no_grad():
    w = nabla.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    with nabla.no_grad():
        assert not nabla.grad_enabled()
        y = w * 2.0
        assert not y.requires_grad
        with pytest.raises(nabla.Error, match=r"nabla\.no_grad\(\)"):
            y.backward() if y.numel() == 1 else nabla.ops.mean(y).backward()
    assert nabla.grad_enabled()
    # Writing a leaf that requires grad in place is refused while recording; the
    # error tells a Python user how to turn recording off.
    with pytest.raises(nabla.Error, match=r"nabla\.no_grad\(\)"):
        w.copy_(np.zeros((2, 2), np.float32))
    with nabla.no_grad():
        w.copy_(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(w.numpy(), np.zeros((2, 2), np.float32))

    @nabla.no_grad()
    def step():
        return w + 1.0

    assert not step().requires_grad and (w + 1.0).requires_grad


def test_retain_graph_and_double_backward(rng):
    a = rng.standard_normal((3,)).astype(np.float64)
    x = nabla.tensor(a, requires_grad=True)
    loss = nabla.ops.mean(nabla.ops.tanh(x))
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()  # the graph was kept: gradients accumulate
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(nabla.Error) as info:
        loss.backward()  # freed now
    assert "\n" not in str(info.value)
    np.testing.assert_allclose(first, (1 - np.tanh(a) ** 2) / 3)
    with pytest.raises(nabla.Error, match="one element|1 element|exactly one"):
        nabla.ops.tanh(x).backward()


def test_tape_show_and_to_program_run_back_through_the_executor(rng):
    xa = rng.standard_normal((4, 3)).astype(np.float32)
    wa = rng.standard_normal((3, 2)).astype(np.float32)
    with nabla.Tape() as tape:
        x = nabla.tensor(xa, name="x")
        w = nabla.tensor(wa, requires_grad=True, name="w")
        loss = nabla.ops.mean(nabla.ops.tanh(x @ w))
    assert not tape.recording and len(tape) == 3
    loss.backward()
    dot = tape.show()
    assert dot.lstrip().startswith("digraph") and "tanh" in dot
    if shutil.which("dot"):  # a notebook shows the tape as SVG
        assert "<svg" in tape._repr_svg_()
    program = tape.to_program()
    assert isinstance(program, nabla.Program)
    names = {name: param for name, _, param in tape.leaves()}
    assert names == {"x": False, "w": True}
    pairs = nabla.append_backward(program, tape.var_name(loss))
    assert pairs == [("w", "w@GRAD")]
    got_loss, got_grad = nabla.Executor().run(program, feed=tape.feed(), fetch_list=[tape.var_name(loss), "w@GRAD"])
    np.testing.assert_allclose(got_loss, loss.numpy().reshape(got_loss.shape), rtol=1e-6)
    np.testing.assert_allclose(got_grad, w.grad.numpy(), rtol=1e-5)


def test_errors_leave_the_interpreter_alive():
    x = nabla.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(nabla.Error, match="elementwise_add|shape"):
        x + nabla.tensor(np.ones((4, 5), np.float32))
    with pytest.raises(nabla.Error, match="matmul|shape"):
        x @ x
    assert (x + x).shape == (2, 3)


def test_split_infers_its_output_count_from_num_and_sections():
    x = nabla.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    parts = nabla.ops.split(x, num=3, axis=1)
    assert isinstance(parts, list) and len(parts) == 3
    np.testing.assert_array_equal(parts[1].numpy(), [[1], [4]])
    halves = nabla.ops.split(x, sections=[2, -1], axis=1)
    assert [p.shape for p in halves] == [(2, 2), (2, 1)]
    out = nabla.call("split", {"X": x}, {"num": 3, "axis": 1})
    assert len(out["Out"]) == 3
    nabla.ops.mean(nabla.ops.concat(parts, axis=1)).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 1 / 6))
    with pytest.raises(nabla.Error, match="output_counts gives output slot 'Out' 2 tensors, but .* make it 3"):
        nabla.ops.split(x, num=3, axis=1, output_counts={"Out": 2})


def test_ops_fast_path_matches_the_general_path():
    a = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
    x = nabla.tensor(a, requires_grad=True)
    y = nabla.tensor(a * 2)
    # Positional tensors take the fast path; ndarrays, keywords and None the general one.
    for z in (nabla.ops.elementwise_add(x, y), nabla.ops.elementwise_add(x, a * 2), nabla.ops.elementwise_add(X=x, Y=y),
              nabla.ops.elementwise_add(x, y, axis=-1), x + y, x + a * 2, a * 2 + x):
        np.testing.assert_allclose(z.numpy(), a * 3)
        assert z.requires_grad
    np.testing.assert_allclose((x @ y).numpy(), a @ (a * 2), rtol=1e-6)
    np.testing.assert_allclose((a @ y).numpy(), a @ (a * 2), rtol=1e-6)
    np.testing.assert_allclose((x - y).numpy(), -a)
    np.testing.assert_allclose((x / y).numpy(), np.full_like(a, 0.5))
    np.testing.assert_allclose((x * y).numpy(), a * a * 2)
    loss = nabla.ops.softmax_with_cross_entropy(x, nabla.tensor(np.array([[0], [1]], dtype=np.int64)))
    assert {"Loss", "Softmax"} <= set(loss.keys())
    with pytest.raises(nabla.Error, match="elementwise_add"):
        nabla.ops.elementwise_add(x, nabla.tensor(np.ones(3, dtype=np.float32)))
    with pytest.raises(TypeError, match="takes 2 input"):
        nabla.ops.elementwise_add(x, y, y)
    with pytest.raises((TypeError, nabla.Error)):
        x + "text"
    assert nabla.ops.tanh.__call__(x).shape == (2, 2)


@pytest.mark.parametrize("act", ["", "relu", "tanh", "sigmoid"])
def test_fc_and_its_gradient_through_the_unfused_grad_ops(act):
    # fc's grad maker emits the bias/activation grad op, then mul_grad, which
    # pass the product's gradient through a var of their own: eager runs them
    # as the backward builder does.
    rng = np.random.default_rng(1)
    xa, wa, ba = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((4, 2, 3), (3, 5), (5,)))
    x, w, b = (nabla.tensor(v, requires_grad=True) for v in (xa, wa, ba))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (xa, wa, ba))
    out = nabla.ops.fc(x, w, b, in_num_col_dims=2, activation_type=act)
    fns = {"": lambda v: v, "relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}
    tout = fns[act](tx @ tw + tb)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    nabla.ops.mean(out * out).backward()
    (tout * tout).mean().backward()
    for got, want in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_a_read_only_array_is_copied_not_shared():
    frozen = bytes(np.ones(3, np.float32).tobytes())
    t = nabla.tensor(np.frombuffer(frozen, np.float32))
    with nabla.no_grad():
        t.copy_(np.full(3, 5.0, np.float32))
    assert t.numpy().tolist() == [5.0, 5.0, 5.0]
    assert np.frombuffer(frozen, np.float32).tolist() == [1.0, 1.0, 1.0]


def test_python_numbers_in_arithmetic_as_torch_computes_them(rng):
    x64 = nabla.tensor(np.array([1.0, 2.0, 3.0]))
    # float64 scalars stay float64 (a float32 attribute rounded them).
    assert (x64 - 1073741825).numpy().tolist() == [-1073741824.0, -1073741823.0, -1073741822.0]
    np.testing.assert_array_equal((x64 + 0.1).numpy(), np.array([1.0, 2.0, 3.0]) + 0.1)
    np.testing.assert_array_equal((x64 * 1e-50).numpy(), np.array([1.0, 2.0, 3.0]) * 1e-50)
    np.testing.assert_array_equal((x64 / 1e-45).numpy(), np.array([1.0, 2.0, 3.0]) / 1e-45)
    # Division rounds once, as x / c, not x * (1 / c) (PyTorch's own 3 / t
    # is 3 * t.reciprocal(), so NumPy is the reference).
    a = rng.standard_normal(10000).astype(np.float32)
    np.testing.assert_array_equal((nabla.tensor(a) / 3).numpy(), a / np.float32(3))
    np.testing.assert_array_equal((3 / nabla.tensor(a)).numpy(), np.float32(3) / a)
    # Integer tensors: an int keeps the dtype; what PyTorch would promote to
    # float, or wrap, is refused rather than truncated.
    i = nabla.tensor(np.array([1, 2, 3], np.int32))
    assert (i * 2 + 1).numpy().tolist() == [3, 5, 7] and (i * 2).dtype == np.int32
    with pytest.raises(nabla.Error, match="float scalar with a tensor of dtype int32"):
        i * 2.5
    with pytest.raises(nabla.Error, match="true division of a tensor of dtype int32"):
        i / 2
    with pytest.raises(nabla.Error, match="does not fit a tensor of dtype int32"):
        i + 2**40


def test_float_and_bool_of_a_tensor_need_one_element():
    assert float(nabla.tensor(np.array([2.5]))) == 2.5
    assert not bool(nabla.tensor(np.array([0.0]))) and bool(nabla.tensor(np.array([3])))
    with pytest.raises(nabla.Error, match="expected one element"):
        float(nabla.tensor(np.array([1.0, 2.0])))
    with pytest.raises(nabla.Error, match="ambiguous"):
        bool(nabla.tensor(np.array([1.0, 2.0])))


def test_threads_running_backward_into_one_leaf_add_up():
    import threading

    w = nabla.tensor(np.zeros(64), requires_grad=True)

    def work():
        for _ in range(50):
            nabla.ops.reduce_sum(w * 2.0).backward()

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert w.grad.numpy().tolist() == [600.0] * 64
