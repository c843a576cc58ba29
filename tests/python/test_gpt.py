"""The GPT example from Python (examples/gpt/gpt.py): the program it builds through the Program API
is the one make_gpt_program.py writes as YAML (gpt.yaml), gives the same losses step for step, and
AdamW lowers its loss on the fortunes."""
import importlib.util
import pathlib

import numpy as np
import pytest

import nabla

GPT = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gpt"


def load(name):
    spec = importlib.util.spec_from_file_location(name, GPT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_size_is_gpt_yaml():
    built = load("gpt").build()
    yaml = nabla.Program.load(GPT / "gpt.yaml")
    assert built.ops() == yaml.ops()
    # The same vars; the YAML declares every parameter first, Python as the ops come.
    by_name = lambda p: sorted(p.vars(), key=lambda v: v["name"])  # noqa: E731
    assert by_name(built) == by_name(yaml)


def test_same_losses_as_the_yaml_program(rng):
    gpt = load("gpt")
    sizes = dict(layers=2, dim=32, heads=2, seq=16)
    built = gpt.append_training(gpt.build(**sizes))
    yaml = gpt.append_training(nabla.Program.from_yaml(load("make_gpt_program").program(**sizes)))
    a, b = nabla.Executor(threads=1, seed=3), nabla.Executor(threads=1, seed=3)
    losses = []
    for _ in range(3):
        tokens = rng.integers(0, 256, (4, 16))
        labels = rng.integers(0, 256, (4, 16, 1))
        feed = {"tokens": tokens, "labels": labels}
        (la,) = a.run(built, feed=feed, fetch_list=["loss"])
        (lb,) = b.run(yaml, feed=feed, fetch_list=["loss"])
        assert la.tobytes() == lb.tobytes()  # one program: the same bits
        losses.append(float(la.reshape(-1)[0]))
    assert losses[0] == pytest.approx(np.log(256), rel=0.05)  # N(0, 0.02) weights: near uniform


@pytest.mark.skipif(not pathlib.Path("/usr/share/games/fortunes").is_dir(), reason="fortunes are not installed")
def test_a_few_steps_on_the_fortunes_lower_the_loss():
    gpt = load("gpt")
    program = gpt.append_training(gpt.build(layers=1, dim=64, heads=2, seq=32))
    exe = nabla.Executor(threads=1, seed=1)
    data = gpt.batches(gpt.fortunes(), 16, 32, np.random.default_rng(1))
    losses = []
    for _ in range(30):
        tokens, labels = next(data)
        (loss,) = exe.run(program, feed={"tokens": tokens, "labels": labels}, fetch_list=["loss"])
        losses.append(float(loss.reshape(-1)[0]))
    assert np.isfinite(losses).all()
    # From ln 256 = 5.55 at the start to the letter frequencies of English text (about 3.3) and below.
    assert np.mean(losses[:3]) > 5.0
    assert np.mean(losses[-5:]) < 3.6, losses
