"""Every example program exported to ONNX and imported back gives the
outputs of the original (run in test mode, as the export means it, with the
same weights)."""
import pathlib

import numpy as np
import pytest
import yaml

import onnx_util
import safetensors_names

PROGRAMS = sorted(
    p for p in [*onnx_util.REPO.glob("examples/*.yaml"), *onnx_util.REPO.glob("examples/*/*.yaml")]
    if "nabla-program/" in p.read_text())
# Programs whose ops have no exporter yet, with the op the error names.
NOT_EXPORTABLE = {"fashion_mnist_rnn.yaml": "write_to_array"}


def as_test_mode(src, dst):
    """The program with batch_norm and dropout in test mode (what export means)."""
    program = yaml.safe_load(src.read_text())
    for op in program["blocks"][0]["ops"]:
        if op["type"] in ("batch_norm", "dropout"):
            op.setdefault("attrs", {})["is_test"] = True
    dst.write_text(yaml.safe_dump(program))


def feeds_for(program_path, rng):
    program = yaml.safe_load(program_path.read_text())
    feeds = {}
    for name, var in program["blocks"][0]["vars"].items():
        if var.get("persistable") or var.get("type", "dense") != "dense":
            continue
        shape = [3 if d == -1 else d for d in var["shape"]]
        if var["dtype"] == "int64":
            feeds[name] = rng.integers(0, 10, size=shape).astype(np.int64)
        else:
            feeds[name] = rng.standard_normal(shape).astype(var["dtype"])
    return feeds


def test_every_example_program_is_listed():
    assert len(PROGRAMS) >= 5, PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: str(p.relative_to(onnx_util.REPO)))
def test_export_import_round_trip(program, tmp_path):
    import onnx

    model = tmp_path / "model.onnx"
    if program.name in NOT_EXPORTABLE:
        p = onnx_util.run("export", program, "-o", model, check=False)
        assert p.returncode == 2 and NOT_EXPORTABLE[program.name] in p.stderr, p.stderr
        assert not model.exists()
        return
    onnx_util.run("export", program, "-o", model)
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    outputs = [o.name for o in m.graph.output]
    back, weights = onnx_util.import_model(model, tmp_path)
    # Every persistable the graph reads comes back under its own name.
    assert {i.name for i in m.graph.initializer if not i.name.startswith("const_")} <= safetensors_names.names(weights)

    original = tmp_path / "original.yaml"
    as_test_mode(program, original)
    feeds = feeds_for(program, np.random.default_rng(5))
    want = onnx_util.exec_program(original, feeds, outputs, tmp_path / "a", weights=weights)
    got = onnx_util.exec_program(back, feeds, outputs, tmp_path / "b", weights=weights)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_imported_program_fine_tunes_with_nabla_run(tmp_path):
    """An imported model trains with `nabla run --weights` (its persistable
    vars have no init: of their own); without --weights it is an error."""
    src = onnx_util.REPO / "examples" / "models" / "softmax_regression.yaml"
    onnx_util.run("export", src, "-o", tmp_path / "m.onnx", "--output", "loss")
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    data = "/usr/share/datasets/fashion-mnist/t10k-%s-idx%d-ubyte.gz"
    if not pathlib.Path(data % ("images", 3)).exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    config = tmp_path / "run.yaml"
    config.write_text(f"""seed: 1
program: {program}
loss: loss
optimizer: {{type: sgd, lr: 0.1}}
data:
  format: idx
  train:
    files: {{images: {data % ('images', 3)}, labels: {data % ('labels', 1)}}}
    feeds: {{image: images, label: labels}}
  batch_size: 64
steps: 5
""")
    p = onnx_util.run("run", config, "--weights", weights, "--progress", "none")
    assert "train loss" in p.stdout, p.stdout
    p = onnx_util.run("run", config, "--progress", "none", check=False)
    assert p.returncode == 2 and "pass --weights" in p.stderr, p.stderr
