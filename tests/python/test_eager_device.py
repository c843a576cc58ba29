"""Choosing the device of eager tensors: nabla.tensor(device=) and
nabla.set_default_device, checked on the CPU and, where the build has an
OpenCL device (PoCL in CI), on OpenCL against the CPU."""
import numpy as np
import pytest

import nabla
from conftest import opencl_available


@pytest.fixture(autouse=True)
def back_to_cpu():
    yield
    nabla.set_default_device("cpu")


needs_opencl = pytest.mark.skipif(not opencl_available(), reason="no OpenCL device in this build")


def mlp(device, x, label, params):
    """The seed's MLP (tanh hidden layer, softmax cross entropy) on `device`;
    returns the loss and the parameters' gradients as ndarrays."""
    ts = {k: nabla.tensor(v, requires_grad=True, name=k, device=device) for k, v in params.items()}
    xt = nabla.tensor(x, name="x", device=device)
    lt = nabla.tensor(label, name="label", device=device)
    hidden = nabla.ops.tanh(xt @ ts["w1"] + ts["b1"])
    out = nabla.ops.softmax_with_cross_entropy(hidden @ ts["w2"] + ts["b2"], lt)
    loss = nabla.ops.mean(out.Loss)
    assert loss.device == device and hidden.device == device
    loss.backward()
    for t in ts.values():
        assert t.grad.device == device
    return loss.numpy().copy(), {k: t.grad.numpy().copy() for k, t in ts.items()}


def mlp_inputs(rng):
    x = rng.standard_normal((8, 5)).astype(np.float32)
    label = rng.integers(0, 3, size=(8, 1)).astype(np.int64)
    params = {
        "w1": (0.5 * rng.standard_normal((5, 7))).astype(np.float32),
        "b1": (0.1 * rng.standard_normal((7,))).astype(np.float32),
        "w2": (0.5 * rng.standard_normal((7, 3))).astype(np.float32),
        "b2": (0.1 * rng.standard_normal((3,))).astype(np.float32),
    }
    return x, label, params


def test_cpu_device_and_default(rng):
    assert nabla.default_device() == "cpu"
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = nabla.tensor(a, device="cpu")
    assert t.device == "cpu"
    np.testing.assert_array_equal(t.numpy(), a)
    assert np.shares_memory(t.numpy(), a), "a CPU tensor shares the ndarray"
    nabla.set_default_device("cpu")
    assert nabla.tensor(a).device == "cpu" and (t * 2.0).device == "cpu"


def test_device_names_come_from_the_registry_and_resolve_back():
    # `null` (the core's dry-run device) was named "opencl:0" when every
    # non-CPU device was taken for OpenCL.
    specs = {"cpu": "cpu", "null": "null"}
    if opencl_available():
        specs.update({"opencl": "opencl:0", "opencl:0": "opencl:0"})
    for spec, name in specs.items():
        t = nabla.tensor(np.ones(3, np.float32), device=spec)
        assert t.device == name
        assert nabla.tensor(t, device=t.device).device == name
        nabla.set_default_device(spec)
        assert nabla.default_device() == name


@pytest.mark.parametrize("spec", ["cuda", "gpu", "opencl:x", "opencl:-1", "CPU", ""])
def test_unknown_devices_are_one_line_errors_naming_the_device(spec):
    with pytest.raises(nabla.Error) as info:
        nabla.tensor(np.zeros(2, np.float32), device=spec)
    msg = str(info.value)
    assert "nabla.tensor" in msg and f"'{spec}'" in msg and "\n" not in msg
    with pytest.raises(nabla.Error, match="set_default_device"):
        nabla.set_default_device(spec)
    assert nabla.default_device() == "cpu", "a refused device changes nothing"


def test_device_must_be_a_string():
    with pytest.raises(nabla.Error, match="device must be a str"):
        nabla.tensor(np.zeros(2, np.float32), device=0)


@needs_opencl
def test_missing_opencl_index_is_an_error():
    with pytest.raises(nabla.Error, match="opencl:999"):
        nabla.tensor(np.zeros(2, np.float32), device="opencl:999")


@needs_opencl
def test_mlp_on_opencl_matches_cpu(rng):
    x, label, params = mlp_inputs(rng)
    loss_cpu, grads_cpu = mlp("cpu", x, label, params)
    loss_cl, grads_cl = mlp("opencl:0", x, label, params)
    np.testing.assert_allclose(loss_cl, loss_cpu, rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(grads_cl[k], grads_cpu[k], rtol=1e-4, atol=1e-6, err_msg=k)


@needs_opencl
def test_default_device_places_new_tensors_and_operands(rng):
    a = rng.standard_normal((2, 2)).astype(np.float32)
    nabla.set_default_device("opencl")
    assert nabla.default_device() == "opencl:0"
    t = nabla.tensor(a, requires_grad=True)
    assert t.device == "opencl:0"
    assert nabla.tensor(a, device="cpu").device == "cpu", "device= overrides the default"
    # An ndarray operand goes to the tensor's device.
    y = t * a + np.ones((2, 2), np.float32)
    assert y.device == "opencl:0"
    nabla.ops.mean(y).backward()
    np.testing.assert_allclose(t.grad.numpy(), a / 4, rtol=1e-6)
    # nabla.tensor(t, device=) copies a tensor across devices.
    back = nabla.tensor(t, device="cpu")
    assert back.device == "cpu" and not back.requires_grad
    np.testing.assert_array_equal(back.numpy(), a)


@needs_opencl
def test_ops_without_an_opencl_kernel_give_opencl_results(rng):
    """layer_norm and transpose have no OpenCL kernel: they run on host copies, and their
    results (and their gradients) come back to OpenCL, so a pre-norm block chains on it. They
    stayed on the CPU, and the next matmul with an OpenCL weight failed (mixed devices)."""
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    got = {}
    for device in ("cpu", "opencl:0"):
        xt = nabla.tensor(x, requires_grad=True, device=device)
        wt = nabla.tensor(w, requires_grad=True, device=device)
        n = nabla.call("layer_norm", {"X": xt}, {"begin_norm_axis": 2})["Y"]
        t = nabla.ops.transpose(n @ wt, axis=[0, 2, 1])
        assert n.device == device and t.device == device
        nabla.ops.mean(t * t).backward()
        assert xt.grad.device == device and wt.grad.device == device
        got[device] = (t.numpy().copy(), xt.grad.numpy().copy(), wt.grad.numpy().copy())
    for a, b in zip(got["opencl:0"], got["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_opencl
def test_gelu_tanh_form_on_opencl_saturates_as_on_the_cpu():
    """PoCL's float tanh stops at 1 - 2^-24, and the tanh form's derivative multiplies
    1 - tanh^2 by v^3: at v = 40 it was 1.0004, at -40 -4e-4 (exactly 1 and 0)."""
    x = np.array([-40.0, -12.0, -3.0, 0.5, 12.0, 40.0], np.float32)
    got = {}
    for device in ("cpu", "opencl:0"):
        t = nabla.tensor(x, requires_grad=True, device=device)
        y = nabla.call("gelu", {"X": t}, {"approximate": True})["Out"]
        nabla.ops.reduce_sum(y, reduce_all=True).backward()
        got[device] = (y.numpy().copy(), t.grad.numpy().copy())
    for a, b in zip(got["opencl:0"], got["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-30)
    np.testing.assert_array_equal(got["opencl:0"][1][[0, 5]], [0.0, 1.0])


@needs_opencl
def test_mixing_devices_in_one_call_is_an_error():
    a = nabla.tensor(np.ones((2, 2), np.float32), name="a", device="cpu")
    b = nabla.tensor(np.ones((2, 2), np.float32), name="b", device="opencl")
    with pytest.raises(nabla.Error) as info:
        a + b
    msg = str(info.value)
    assert "elementwise_add" in msg and "'b'" in msg and "cpu" in msg and "opencl:0" in msg


@needs_opencl
def test_ndarray_inputs_of_a_call_go_to_its_tensors_device(rng):
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([[0], [2], [1], [2]], np.int64)
    t = nabla.tensor(logits, requires_grad=True, device="opencl")
    # The default device is the CPU; the labels follow the logits.
    out = nabla.ops.softmax_with_cross_entropy(t, labels)
    assert out.Loss.device == "opencl:0"
    by_call = nabla.call("softmax_with_cross_entropy", {"Logits": t, "Label": labels})
    np.testing.assert_array_equal(by_call["Loss"].numpy(), out.Loss.numpy())
    nabla.ops.mean(out.Loss).backward()
    cpu = nabla.tensor(logits, requires_grad=True)
    nabla.ops.mean(nabla.ops.softmax_with_cross_entropy(cpu, labels).Loss).backward()
    np.testing.assert_allclose(t.grad.numpy(), cpu.grad.numpy(), rtol=1e-5, atol=1e-7)
    # ...and with OpenCL the default, onto a CPU tensor's device.
    nabla.set_default_device("opencl")
    assert nabla.ops.softmax_with_cross_entropy(cpu, labels).Loss.device == "cpu"


def test_a_cpu_session_never_loads_opencl():
    """The OpenCL backend is a device plugin loaded when a device asks for it:
    a fresh interpreter that imports nabla and computes on the CPU maps
    neither it, CLBlast nor PoCL (the ICD loader comes with Debian's oneDNN);
    asking for `opencl` loads the plugin (where it exists)."""
    import subprocess
    import sys

    code = r"""
import numpy as np, nabla
def mapped():
    text = open("/proc/self/maps").read()
    return [lib for lib in ("libnabla_opencl", "libclblast", "libpocl") if lib in text]
t = nabla.tensor(np.ones((2, 3), np.float32), requires_grad=True)
nabla.ops.mean(t * 2.0).backward()
print("cpu", mapped())
try:
    nabla.tensor(np.zeros(1, np.float32), device="opencl")
    print("opencl", mapped())
except nabla.Error as e:
    print("opencl unavailable", e)
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "cpu []" in out, out
    if opencl_available():
        assert "libnabla_opencl" in out.split("opencl", 1)[1], out


NAN_KEEPERS = ("relu", "tanh", "hard_sigmoid", "sigmoid", "gelu", "leaky_relu", "relu6", "brelu", "hard_swish",
               "soft_relu", "elu", "softplus", "softsign", "swish", "logsigmoid", "stanh", "tanh_shrink", "exp")


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_activations_keep_nan(device):
    """A NaN input gives a NaN output, as in PyTorch, on every device: a clamp in the wrong argument order had
    tanh(NaN) = -1, hard_sigmoid(NaN) = 1 and relu(NaN) = 0 on the CPU, hiding a diverged run."""
    x = np.array([np.nan, -2.0, 0.5, 3.0] * 5, np.float32)  # past one vector: the loop body and its tail
    for name in NAN_KEEPERS:
        out = getattr(nabla.ops, name)(nabla.tensor(x, device=device)).numpy()
        assert np.isnan(out[::4]).all(), f"{name}(NaN) on {device}: {out[::4]}"
        assert np.isfinite(np.delete(out, np.s_[::4])).all(), name
