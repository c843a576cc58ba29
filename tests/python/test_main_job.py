"""The Python main job (examples/python/train_fashion_mnist.py) on a slice of
Fashion-MNIST: the program it builds trains, and Adam lowers the loss."""
import importlib.util
import pathlib

import numpy as np
import pytest

import nabla

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "train_fashion_mnist.py"
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def load_script():
    spec = importlib.util.spec_from_file_location("train_fashion_mnist", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_program_matches_the_yaml_model(examples):
    job = load_script()
    built = job.build_mlp()
    yaml = nabla.Program.load(examples / "models" / "fashion_mnist_mlp.yaml")
    strip = lambda p: [(o["type"], o["inputs"], o["outputs"]) for o in p.ops()]  # noqa: E731
    assert strip(built) == strip(yaml)


def test_adam_step_matches_numpy():
    job = load_script()
    p = job.build_mlp()
    pairs = nabla.append_backward(p, "loss")
    job.add_adam(p, pairs, lr=0.01)
    exe = nabla.Executor(threads=1)
    rng = np.random.default_rng(0)
    x = rng.random((16, 784), dtype=np.float32)
    y = rng.integers(0, 10, (16, 1))
    w0 = None
    # Step 1 initializes; step 2's update is checked against Adam by hand.
    (w0,) = exe.run(p, feed={"image": x, "label": y}, fetch_list=["fc3_b"])
    m, v = exe.get("fc3_b@moment1"), exe.get("fc3_b@moment2")
    w1, g = exe.run(p, feed={"image": x, "label": y}, fetch_list=["fc3_b", "fc3_b@GRAD"])
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    lr_t = 0.01 * np.sqrt(1 - 0.999**2) / (1 - 0.9**2)
    np.testing.assert_allclose(w1, w0 - lr_t * m / (np.sqrt(v) + 1e-8 * np.sqrt(1 - 0.999**2)), rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not DATA.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_one_epoch_on_a_slice_learns():
    acc = load_script().main(["--limit", "3000", "--threads", "1"])
    assert acc > 0.6  # ten classes: chance is 0.1
