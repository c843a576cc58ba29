"""A recorded tape as a program the Executor runs as it is (parameters keep
their recorded values), with append_backward's gradients equal to eager
backward(); backward twice; no_grad inside a Tape."""
import numpy as np
import pytest
import torch

import nabla


def mlp_data(rng):
    return {
        "x": rng.standard_normal((6, 4)).astype(np.float32),
        "label": rng.integers(0, 3, size=(6, 1)).astype(np.int64),
        "w1": (0.5 * rng.standard_normal((4, 5))).astype(np.float32),
        "b1": (0.1 * rng.standard_normal((5,))).astype(np.float32),
        "w2": (0.5 * rng.standard_normal((5, 3))).astype(np.float32),
        "b2": (0.1 * rng.standard_normal((3,))).astype(np.float32),
    }


PARAMS = ("w1", "b1", "w2", "b2")


def record_mlp(d):
    """The MLP forward, recorded; loss left unnamed (its name is 't<id>')."""
    with nabla.Tape() as tape:
        t = {k: nabla.tensor(d[k], requires_grad=k in PARAMS, name=k) for k in d}
        hidden = nabla.ops.tanh(t["x"] @ t["w1"] + t["b1"])
        out = nabla.ops.softmax_with_cross_entropy(hidden @ t["w2"] + t["b2"], t["label"])
        loss = nabla.ops.mean(out.Loss)
    return tape, t, loss


def torch_mlp(d):
    p = {k: torch.tensor(d[k], dtype=torch.float64, requires_grad=True) for k in PARAMS}
    x = torch.tensor(d["x"], dtype=torch.float64)
    logits = torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(d["label"][:, 0]))
    loss.backward()
    return loss.item(), {k: p[k].grad.numpy() for k in PARAMS}


def test_to_program_runs_as_recorded_with_the_eager_gradients(rng):
    d = mlp_data(rng)
    tape, t, loss = record_mlp(d)
    loss.backward()
    prog = tape.to_program()
    forward_only = prog.clone()
    assert loss.name and tape.var_name(loss) == loss.name
    pairs = nabla.append_backward(prog, loss.name)
    (got,) = nabla.Executor().run(forward_only, fetch_list=[loss.name])
    np.testing.assert_allclose(got, loss.numpy().reshape(got.shape), rtol=1e-6)
    assert sorted(pairs) == sorted((p, p + "@GRAD") for p in PARAMS)
    fetch = [loss.name] + [p + "@GRAD" for p in PARAMS]
    want_loss, want_grads = torch_mlp(d)
    # The data fed by name, the parameters from the recorded values; then
    # no feed at all (every leaf as recorded), then tape.feed().
    for feed in ({"x": d["x"], "label": d["label"]}, None, tape.feed()):
        got = nabla.Executor().run(prog, feed=feed, fetch_list=fetch)
        np.testing.assert_allclose(got[0], loss.numpy().reshape(got[0].shape), rtol=1e-6)
        np.testing.assert_allclose(got[0].item(), want_loss, rtol=2e-4)
        for p, g in zip(PARAMS, got[1:]):
            np.testing.assert_allclose(g, t[p].grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=p)
            np.testing.assert_allclose(g, want_grads[p], rtol=2e-4, atol=1e-6, err_msg=p)


def test_to_program_feeds_override_and_parameters_live_in_the_scope(rng):
    d = mlp_data(rng)
    tape, t, loss = record_mlp(d)
    prog = tape.to_program()
    nabla.append_backward(prog, loss.name)
    exe = nabla.Executor()
    # A new batch fed by name replaces the recorded one...
    x2 = rng.standard_normal(d["x"].shape).astype(np.float32)
    (got,) = exe.run(prog, feed={"x": x2}, fetch_list=[loss.name])
    want, _ = torch_mlp(dict(d, x=x2))
    np.testing.assert_allclose(got.item(), want, rtol=2e-4)
    # ...and a parameter, once in the executor's scope, is the scope's (an
    # optimizer writing it in place is seen by the next run), not reset to
    # the recorded value.
    exe_w1 = exe.get("w1")
    np.testing.assert_array_equal(exe_w1, d["w1"])
    w1_new = (d["w1"] * 0.5).astype(np.float32)
    exe.run(prog, feed={"w1": w1_new}, fetch_list=[loss.name])
    (got,) = exe.run(prog, fetch_list=[loss.name])
    want, _ = torch_mlp(dict(d, w1=w1_new))
    np.testing.assert_allclose(got.item(), want, rtol=2e-4)
    # The program holds a copy: changing the eager tensor later (which
    # shares d["w1"]'s memory) does not change what a fresh executor runs.
    recorded, _ = torch_mlp(d)
    with nabla.no_grad():
        t["w1"].copy_(np.zeros_like(d["w1"]))
    assert not d["w1"].any()
    (got,) = nabla.Executor().run(prog, fetch_list=[loss.name])
    np.testing.assert_allclose(got.item(), recorded, rtol=2e-4)


def test_to_program_still_checks_feeds(rng):
    d = mlp_data(rng)
    tape, _, loss = record_mlp(d)
    prog = tape.to_program()
    with pytest.raises(nabla.Error, match="no var 'nope'"):
        nabla.Executor().run(prog, feed={"nope": d["x"]}, fetch_list=[loss.name])
    with pytest.raises(nabla.Error, match="feed must be a dict"):
        nabla.Executor().run(prog, feed=[d["x"]], fetch_list=[loss.name])


def test_backward_twice_is_a_clear_error_and_retain_graph_accumulates():
    a = np.array([0.5, -1.0, 2.0], np.float32)
    x = nabla.tensor(a, requires_grad=True, name="x")
    y = nabla.ops.mean(nabla.ops.tanh(x))
    y.backward()
    first = x.grad.numpy().copy()
    np.testing.assert_allclose(first, (1 - np.tanh(a) ** 2) / 3, rtol=1e-6)
    with pytest.raises(nabla.Error) as info:
        y.backward()
    msg = str(info.value)
    assert "second time" in msg and "retain_graph=True" in msg and "\n" not in msg
    np.testing.assert_array_equal(x.grad.numpy(), first, err_msg="a refused backward adds nothing")

    z = nabla.ops.mean(nabla.ops.tanh(x))
    x.grad = None
    z.backward(retain_graph=True)
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * first, rtol=1e-6)


def test_no_grad_nested_inside_a_tape(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    w = nabla.tensor(a, requires_grad=True, name="w")
    with nabla.Tape() as tape:
        h = nabla.ops.tanh(w)
        with nabla.no_grad():
            assert not nabla.grad_enabled()
            scale = nabla.ops.exp(w)  # not recorded; a constant below
            with nabla.no_grad():
                assert not nabla.grad_enabled()
            assert not nabla.grad_enabled(), "the inner no_grad leaves the outer one on"
        assert nabla.grad_enabled()
        loss = nabla.ops.mean(h * scale)
    assert not scale.requires_grad and scale.is_leaf
    assert len(tape) == 3  # tanh, elementwise_mul, mean: not exp
    assert "exp" not in tape.show()
    leaves = {name: param for name, _, param in tape.leaves()}
    assert leaves.get("w") is True and list(leaves.values()).count(False) == 1
    loss.backward()
    # d/dw mean(tanh(w) * c) with c = exp(w) held constant.
    np.testing.assert_allclose(w.grad.numpy(), (1 - np.tanh(a) ** 2) * np.exp(a) / a.size, rtol=1e-5)
    prog = tape.to_program()
    nabla.append_backward(prog, loss.name)
    got_loss, got_grad = nabla.Executor().run(prog, fetch_list=[loss.name, "w@GRAD"])
    np.testing.assert_allclose(got_loss, loss.numpy().reshape(got_loss.shape), rtol=1e-6)
    np.testing.assert_allclose(got_grad, w.grad.numpy(), rtol=1e-5)
