"""nabla.train.run: a run config run from Python exactly as `nabla run` runs
it (the same checkpoints bit for bit at one thread), Ctrl-C stopping it at a
step boundary, the GIL released while it trains; the pass pipeline behind
append_backward; nabla.datasets.read_idx."""
import gzip
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import yaml

import nabla

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="dataset-fashion-mnist is not installed")


def example_config(name, **changes):
    """An example run config as a dict, its program made absolute so the dict
    (or a copy of the file elsewhere) runs from any folder."""
    config = yaml.safe_load((REPO / "examples" / name).read_text())
    config["program"] = str(REPO / "examples" / config["program"])
    config.update(changes)
    return config


def checkpoints(folder):
    return sorted(pathlib.Path(folder).glob("ckpt-*.safetensors"))


@needs_data
@pytest.mark.skipif(not os.environ.get("NABLA_BIN"), reason="NABLA_BIN is not set")
def test_run_matches_nabla_run_bit_for_bit(tmp_path, monkeypatch):
    config = example_config("fashion_mnist_mlp.yaml", threads=1)
    config_file = tmp_path / "mlp.yaml"
    config_file.write_text(yaml.safe_dump(config))
    (tmp_path / "cli").mkdir()
    subprocess.run([os.environ["NABLA_BIN"], "run", str(config_file), "--steps", "30", "--progress", "none"],
                   cwd=tmp_path / "cli", check=True, stdout=subprocess.DEVNULL)
    (cli,) = checkpoints(tmp_path / "cli" / config["checkpoint"]["dir"])

    for name, source in (("file", config_file), ("dict", config)):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        summary = nabla.train.run(source, steps=30, progress="none")
        assert summary["steps"] == 30
        assert summary["run"] == 1
        assert summary["stopped_by_signal"] is None
        assert summary["eval"]["samples"] == 10000
        (py,) = checkpoints(tmp_path / name / config["checkpoint"]["dir"])
        assert summary["last_checkpoint"] == str(pathlib.Path(config["checkpoint"]["dir"]) / py.name)
        assert py.name == cli.name
        assert py.read_bytes() == cli.read_bytes(), f"{name}: the checkpoint differs from nabla run's"
        assert (tmp_path / name / config["logging"]["metrics_file"]).is_file()


def tiny_config(tmp_path, **changes):
    """Three classes in 4 features, a linear classifier, as the C++ run tests."""
    rng = np.random.default_rng(0)
    labels = np.arange(300) % 3
    centers = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [-1, -1, 0, 0]], np.float32)
    x = centers[labels] + rng.uniform(-0.6, 0.6, (300, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", labels.reshape(-1, 1).astype(np.int64))
    program = {
        "format": "nabla-program/1",
        "blocks": [{
            "idx": 0, "parent": -1,
            "vars": {
                "x": {"shape": [-1, 4], "dtype": "float32", "stop_gradient": True},
                "label": {"shape": [-1, 1], "dtype": "int64"},
                "w": {"shape": [4, 3], "dtype": "float32", "persistable": True,
                      "init": {"type": "uniform_random", "min": -0.1, "max": 0.1, "seed": 3}},
                "b": {"shape": [3], "dtype": "float32", "persistable": True,
                      "init": {"type": "fill_constant", "value": 0.0}},
            },
            "ops": [
                {"type": "mul", "inputs": {"X": ["x"], "Y": ["w"]}, "outputs": {"Out": ["xw"]}},
                {"type": "elementwise_add", "inputs": {"X": ["xw"], "Y": ["b"]}, "outputs": {"Out": ["logits"]},
                 "attrs": {"axis": 1}},
                {"type": "softmax_with_cross_entropy", "inputs": {"Logits": ["logits"], "Label": ["label"]},
                 "outputs": {"Softmax": ["prob"], "Loss": ["ce"]}},
                {"type": "mean", "inputs": {"X": ["ce"]}, "outputs": {"Out": ["loss"]}},
            ],
        }],
    }
    config = {
        "seed": 5, "threads": 1, "loss": "loss", "program": program,
        "optimizer": {"type": "sgd", "lr": 0.1},
        "data": {"format": "npy", "train": {"files": {"x": str(tmp_path / "x.npy"), "y": str(tmp_path / "y.npy")},
                                            "feeds": {"x": "x", "label": "y"}},
                 "batch_size": 16},
        "metrics": {"accuracy": {}},
        "checkpoint": {"dir": "ckpt", "every_steps": 5, "keep_last": 2},
        "logging": {"progress": "none", "every_steps": 1, "metrics_file": "m.csv"},
    }
    config.update(changes)
    return config


def test_a_second_run_goes_to_a_numbered_folder_and_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny_config(tmp_path)
    first = nabla.train.run(config, steps=10)
    assert first["run"] == 1 and first["checkpoint_dir"] == "ckpt"
    second = nabla.train.run(config, steps=5)
    assert second["run"] == 2
    assert second["checkpoint_dir"] == os.path.join("run-2", "ckpt")
    assert second["metrics_file"] == os.path.join("run-2", "m.csv")
    assert [p.name for p in checkpoints("run-2/ckpt")] == ["ckpt-00000005.safetensors"]
    resumed = nabla.train.run(config, steps=15, resume=True)
    assert resumed["run"] == 2 and resumed["steps"] == 15
    assert checkpoints("run-2/ckpt")[-1].name == "ckpt-00000015.safetensors"
    assert checkpoints("ckpt")[-1].name == "ckpt-00000010.safetensors"


def test_bad_configs_and_overrides_are_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nabla.Error, match=r"<dict>:\d+:\d+: device must be a registered device.*'gpu'"):
        nabla.train.run(tiny_config(tmp_path, device="gpu"))
    with pytest.raises(TypeError, match="unknown override lr"):
        nabla.train.run(tiny_config(tmp_path), lr=0.5)
    with pytest.raises(TypeError, match="a path or a dict"):
        nabla.train.run(42)
    with pytest.raises(ValueError, match="progress must be one of auto, bar, lines, none.*'fancy'"):
        nabla.train.run(tiny_config(tmp_path), progress="fancy")
    with pytest.raises(TypeError, match="resume must be True or False.*'no'"):
        nabla.train.run(tiny_config(tmp_path), resume="no")
    # 0 is refused as --epochs 0 is, not taken for "not given" (it trained
    # the config's epochs).
    for key in ("epochs", "steps"):
        with pytest.raises(nabla.Error, match=f"nabla.train.run: {key} must be >= 1, but received 0"):
            nabla.train.run(tiny_config(tmp_path), **{key: 0})


def test_the_gil_is_released_while_it_trains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        start = time.monotonic()
        nabla.train.run(tiny_config(tmp_path, checkpoint={"dir": "ckpt", "keep_last": 1}), steps=1500)
        end = time.monotonic()
    finally:
        done.set()
        t.join()
    # Had the run held the GIL, the other thread could not have run during it.
    during = [x for x in ticks if start < x < end]
    assert len(during) >= 10, (len(during), end - start)


CTRL_C = r"""
import os, pathlib, signal, sys, threading, time
import nabla
config = eval(sys.argv[1])
before = signal.getsignal(signal.SIGINT)

def interrupt():
    # A few step rows in the metrics file: training is under way.
    metrics = pathlib.Path("m.csv")
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) > 3):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
try:
    nabla.train.run(config, steps=10_000_000)
    print("not interrupted")
except KeyboardInterrupt as e:
    print("KeyboardInterrupt:", e)
assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)
# The interpreter goes on, and the run resumes from the checkpoint it wrote.
stopped = int(sorted(pathlib.Path("ckpt").glob("ckpt-*.safetensors"))[-1].name[5:13])
print("checkpoint at", stopped)
summary = nabla.train.run(config, steps=stopped + 7, resume=True)
print("resumed to", summary["steps"] - stopped, "more, run", summary["run"])
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(2)
    print("python's handler is gone")
except KeyboardInterrupt:
    print("python's handler is back")
"""


def test_ctrl_c_stops_at_a_step_with_a_checkpoint_and_raises_keyboard_interrupt(tmp_path):
    config = tiny_config(tmp_path)
    config["data"]["batch_size"] = 1
    config["checkpoint"] = {"dir": "ckpt", "keep_last": 2}  # the stop writes the only checkpoint
    done = subprocess.run([sys.executable, "-c", CTRL_C, repr(config)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "KeyboardInterrupt: nabla.train.run stopped after step" in out, out + done.stderr
    assert "stopped by SIGINT after step" in done.stderr, done.stderr
    assert "resumed to 7 more, run 1" in out, out + done.stderr
    assert "python's handler is back" in out, out + done.stderr


def test_append_backward_runs_the_pipeline_fusion_and_precision():
    def build():
        p = nabla.Program()
        p.create_var("x", [-1, 4], stop_gradient=True)
        p.create_var("w", [4, 3], persistable=True, init={"type": "uniform_random", "min": -0.5, "max": 0.5, "seed": 2})
        p.create_var("b", [3], persistable=True, init={"type": "fill_constant", "value": 0.1})
        p.append_op("mul", {"X": "x", "Y": "w"}, {"Out": "xw"})
        p.append_op("elementwise_add", {"X": "xw", "Y": "b"}, {"Out": "h"}, {"axis": 1})
        p.append_op("relu", {"X": "h"}, {"Out": "r"})
        p.append_op("mean", {"X": "r"}, {"Out": "loss"})
        return p

    plain, fused = build(), build()
    pg = nabla.append_backward(plain, "loss")
    fpg = nabla.append_backward(fused, "loss", fuse=True)
    assert [p for p, _ in pg] == [p for p, _ in fpg]
    types = [op["type"] for op in fused.ops()]
    assert "fc" in types and "relu" not in types and "mul" not in types, types
    nabla.append_optimizer(plain, pg, lr=0.1)
    nabla.append_optimizer(fused, fpg, lr=0.1, fuse=True)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    losses = []
    for program in (plain, fused):
        exe = nabla.Executor(threads=1)
        losses.append([exe.run(program, feed={"x": x}, fetch_list=["loss"])[0] for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)

    bf16 = build()
    nabla.append_backward(bf16, "loss", precision="bf16")  # bf16, or fp32 with a note on an older CPU
    with pytest.raises(nabla.Error, match="precision must be one of fp32, bf16, but received 'fp16'"):
        nabla.append_backward(build(), "loss", precision="fp16")


def test_read_idx_matches_the_format(tmp_path):
    data = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = bytes([0, 0, 0x08, 3]) + b"".join(int(d).to_bytes(4, "big") for d in data.shape) + data.tobytes()
    (tmp_path / "a.idx").write_bytes(raw)
    with gzip.open(tmp_path / "a.idx.gz", "wb") as f:
        f.write(raw)
    for name in ("a.idx", "a.idx.gz"):
        got = nabla.datasets.read_idx(tmp_path / name)
        assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
        np.testing.assert_array_equal(got, data)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun (libopenmpi-dev)")
def test_data_parallel_under_mpirun(tmp_path):
    config = tiny_config(tmp_path)
    config["data"]["batch_size"] = 20
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    # A file per rank: mpirun may interleave the ranks' stdout mid-line.
    script = ("import nabla; s = nabla.train.run('cfg.yaml', steps=15); r = nabla.train.world()[0]; "
              "open(f\"rank{r}-world{s['world_size']}-steps{s['steps']}\", 'w').close()")
    done = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-c", script],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if "collective_ops" in done.stderr and "not loaded" in done.stderr:
        pytest.skip("the collective_ops plugin is not built (no MPI at build time)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0-world2-steps15", "rank1-world2-steps15"]
    assert "2 ranks (MPI, data parallel), global batch 20" in done.stdout
    assert checkpoints(tmp_path / "ckpt")[-1].name == "ckpt-00000015.safetensors"


DP_STEP = r"""
import numpy as np
import nabla

def build():
    p = nabla.Program()
    p.create_var("x", [-1, 4], stop_gradient=True)
    p.create_var("y", [-1, 1], stop_gradient=True)
    p.create_var("w", [4, 1], persistable=True, init={"type": "uniform_random", "min": -0.5, "max": 0.5, "seed": 2})
    p.append_op("mul", {"X": "x", "Y": "w"}, {"Out": "p"})
    p.append_op("elementwise_sub", {"X": "p", "Y": "y"}, {"Out": "e"})
    p.append_op("square", {"X": "e"}, {"Out": "s"})
    p.append_op("mean", {"X": "s"}, {"Out": "loss"})
    return p

rank, size = nabla.train.world()
rng = np.random.default_rng(0)
x = rng.normal(size=(8, 4)).astype(np.float32)
y = rng.normal(size=(8, 1)).astype(np.float32)
dp, ref = build(), build()
nabla.append_optimizer(dp, nabla.append_backward(dp, "loss"), lr=0.1)
nabla.append_optimizer(ref, nabla.append_backward(ref, "loss", data_parallel=False), lr=0.1)
assert any(op["type"] == "c_allreduce_sum" for op in dp.ops())
assert not any(op["type"] == "c_allreduce_sum" for op in ref.ops())
a, b = nabla.Executor(threads=1), nabla.Executor(threads=1)
for _ in range(3):
    a.run(dp, feed={"x": x[rank::size], "y": y[rank::size]})  # this rank's half of the batch
    b.run(ref, feed={"x": x, "y": y})                        # the whole batch in one process
np.testing.assert_allclose(a.get("w"), b.get("w"), rtol=1e-5, atol=1e-6)
# A file per rank: mpirun may interleave the ranks' stdout mid-line.
open(f"matches-{rank}-of-{size}", "w").close()
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun (libopenmpi-dev)")
def test_append_backward_under_mpirun_steps_as_the_whole_batch(tmp_path):
    done = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, "-c",
                           DP_STEP], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    if "collective_ops" in done.stderr and "not loaded" in done.stderr:
        pytest.skip("the collective_ops plugin is not built (no MPI at build time)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.glob("matches-*")) == ["matches-0-of-2", "matches-1-of-2"], done.stdout
    assert nabla.train.world() == (0, 1)
    with pytest.raises(nabla.Error, match="data_parallel=True needs several ranks"):
        p = nabla.Program()
        p.create_var("w", [1], persistable=True, init={"type": "fill_constant", "value": 1.0})
        p.append_op("mean", {"X": "w"}, {"Out": "loss"})
        nabla.append_backward(p, "loss", data_parallel=True)
