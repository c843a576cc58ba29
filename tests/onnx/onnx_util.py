"""Shared by the ONNX tests: the nabla binary, import + exec of a model."""
import os
import pathlib
import re
import subprocess

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]


def nabla_bin():
    path = os.environ.get("NABLA_BIN")
    if not path:
        path = str(REPO / "build" / "bin" / "nabla")
    return path


class NablaCrashed(Exception):
    """nabla died by a signal or a sanitizer report: never an expected
    outcome, so callers that turn failures into reasons do not catch it."""


# AddressSanitizer, LeakSanitizer, ... and UBSan's "FILE:LINE:COL: runtime error:".
_SANITIZER_REPORT = re.compile(r"ERROR: \w+Sanitizer|: runtime error: ")


def run(*args, check=True):
    p = subprocess.run([nabla_bin(), *map(str, args)], capture_output=True, text=True)
    if p.returncode < 0 or _SANITIZER_REPORT.search(p.stderr):
        how = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        raise NablaCrashed(f"nabla {' '.join(map(str, args))}: {how}: {p.stderr.strip()[-2000:]}")
    if check and p.returncode != 0:
        raise RuntimeError(f"nabla {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def import_model(model, out_dir, input_shapes=None):
    """nabla import MODEL -o out_dir/program.yaml; returns (program, weights)."""
    program = pathlib.Path(out_dir) / "program.yaml"
    weights = pathlib.Path(out_dir) / "program.safetensors"
    args = ["import", model, "-o", program, "--weights", weights]
    for name, dims in (input_shapes or {}).items():
        args += ["--input-shape", f"{name}=" + ",".join(map(str, dims))]
    run(*args)
    return program, weights


def exec_program(program, feeds, fetches, out_dir, weights=None, extra=()):
    """nabla exec with .npy feeds; returns {fetch: array}."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["exec", program, "--out", out_dir / "fetched", "--fetch", ",".join(fetches), *extra]
    if weights:
        args += ["--weights", weights]
    for i, (name, value) in enumerate(feeds.items()):
        path = out_dir / f"feed{i}.npy"
        np.save(path, value)
        args += ["--feed", f"{name}={path}"]
    run(*args)
    return {f: np.load(out_dir / "fetched" / f"{f}.npy") for f in fetches}
