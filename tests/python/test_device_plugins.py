"""Device plugins loaded through the C ABI, from Python: a run config passed
to nabla.train.run names a device its own `plugins:` add (toy_cdev, written
in C, whose ops run their CPU kernels on host copies) and trains,
checkpoints and resumes there as on the CPU; once load_plugin has loaded a
device plugin (the skeleton frozen at C ABI version 2), its device is a name
the Executor and append_backward take."""
import os
import pathlib
import subprocess
import sys

import pytest

import nabla
from test_train import checkpoints, tiny_config

REPO = pathlib.Path(__file__).resolve().parents[2]
C_DEVICE = os.environ.get("NABLA_TEST_C_DEVICE")
SKELETON_V2 = os.environ.get("NABLA_TEST_DEVICE_PLUGIN")


@pytest.mark.skipif(not C_DEVICE, reason="the build has no C device plugin (NABLA_TEST_C_DEVICE)")
def test_a_config_trains_on_a_device_its_plugins_add(tmp_path, monkeypatch):
    # toy_cdev counts its memory without a lock: one thread. Fusion runs on
    # the cpu only (sgd's update inside the GEMM rounds differently): off.
    def config(device):
        return tiny_config(tmp_path, plugins=[C_DEVICE], device=device, executor="sequential", fuse=False)

    (tmp_path / "cpu").mkdir()
    monkeypatch.chdir(tmp_path / "cpu")
    on_cpu = nabla.train.run(config("cpu"), steps=10)

    (tmp_path / "dev").mkdir()
    monkeypatch.chdir(tmp_path / "dev")
    assert nabla.train.run(config("toy_cdev"), steps=5)["steps"] == 5
    resumed = nabla.train.run(config("toy_cdev"), steps=10, resume=True)
    assert resumed["steps"] == 10 and resumed["run"] == 1
    (dev,) = [p for p in checkpoints("ckpt") if p.name == "ckpt-00000010.safetensors"]
    (cpu,) = [p for p in checkpoints(tmp_path / "cpu" / "ckpt") if p.name == dev.name]
    assert dev.read_bytes() == cpu.read_bytes(), "the checkpoint differs from the cpu run's"

    # An unknown name still points into the config and lists the plugin's device.
    with pytest.raises(nabla.Error, match=r"<dict>:\d+:\d+: device must be a registered device, .*"
                                          r"toy_cdev\), but received 'toy_cdv'"):
        nabla.train.run(config("toy_cdv"))


# Run in a child interpreter: the skeleton adds kernels to standard ops,
# which the other tests' registry (nabla.ops_list() against `nabla ops
# --json`) must not see.
LOADED_DEVICE_SCRIPT = r"""
import sys
import numpy as np
import nabla

plugin, program_file = sys.argv[1:]
try:
    nabla.Executor(device="skeleton")  # not loaded yet
    raise SystemExit("Executor took a device no plugin added")
except nabla.Error as e:
    assert "Executor: unknown device 'skeleton'; registered devices: " in str(e), e
nabla.load_plugin(plugin)
program = nabla.Program.load(program_file)
x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
(on_cpu,) = nabla.Executor(device="cpu").run(program, feed={"x": x}, fetch_list=["y"])
(on_skeleton,) = nabla.Executor(device="skeleton:0").run(program, feed={"x": x}, fetch_list=["y"])
np.testing.assert_array_equal(on_skeleton, on_cpu)
np.testing.assert_array_equal(on_cpu, np.maximum(x - 0.5, 0))

# The passes take its name (no fusion off the cpu) ...
p = nabla.Program()
p.create_var("x", [-1, 3], stop_gradient=True)
p.create_var("b", [3], persistable=True, init={"type": "fill_constant", "value": 0.1})
p.append_op("elementwise_add", {"X": "x", "Y": "b"}, {"Out": "h"})
p.append_op("relu", {"X": "h"}, {"Out": "r"})
p.append_op("mean", {"X": "r"}, {"Out": "loss"})
nabla.append_backward(p, "loss", fuse=True, device="skeleton")
assert "relu" in [op["type"] for op in p.ops()], p.ops()
# ... and a misspelt one is an error that lists it.
try:
    nabla.append_backward(p, "loss", device="skeletn")
    raise SystemExit("append_backward took device 'skeletn'")
except nabla.Error as e:
    assert str(e).startswith("append_backward: device must be a registered device NAME or NAME:N ("), e
    assert "skeleton" in str(e) and "but received 'skeletn'" in str(e), e
print("ok")
"""


@pytest.mark.skipif(not SKELETON_V2, reason="the build has no device plugin (NABLA_TEST_DEVICE_PLUGIN)")
def test_a_loaded_device_plugin_is_a_device_name():
    program = REPO / "tests" / "plugins" / "abi_v2" / "programs" / "add_relu.yaml"
    done = subprocess.run([sys.executable, "-c", LOADED_DEVICE_SCRIPT, SKELETON_V2, str(program)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
