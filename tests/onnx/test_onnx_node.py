"""ONNX's backend node tests through `nabla import` + `nabla exec`.

The cases come from python3-onnx's own generators (onnx.backend.test.case.node),
written to a temp dir at test time, never checked in. Every case whose ops
have a converter is run; the others, and the runs that fail, are listed with
their reason. The pass count may not drop below PASS_FLOOR: raise it when a
converter lands.
"""
import collections
import concurrent.futures
import os
import pathlib
import re
import warnings

import numpy as np
import pytest

import onnx_util

# Passing cases at the last change of the importer (raise it, never lower it).
PASS_FLOOR = 533


def collect_cases():
    # onnx 1.12's generators still name numpy's removed aliases.
    for alias, kind in [("float", float), ("int", int), ("bool", bool), ("object", object), ("complex", complex)]:
        if alias not in np.__dict__:
            setattr(np, alias, kind)
    onnx_node = pytest.importorskip("onnx.backend.test.case.node")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in onnx_node.collect_testcases(None) if c.kind == "node"]


def convertible_ops():
    lines = onnx_util.run("import", "--list").stdout.splitlines()
    return {line.split()[0] for line in lines if "not converted" not in line}, {
        line.split()[0]: line.split("(not converted: ", 1)[1].rstrip(")") for line in lines if "not converted" in line
    }


def run_case(case, index, root):
    """Returns None when the case passes, else the reason."""
    import onnx

    d = pathlib.Path(root) / f"{index:04d}_{case.name}"
    d.mkdir(parents=True)
    model = case.model
    onnx.save(model, d / "model.onnx")
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    feeds_in, expected = case.data_sets[0]
    feeds = {}
    for name, value in zip(inputs, feeds_in):
        value = np.asarray(value)
        if value.ndim == 0:
            return "a scalar (rank-0) input: nabla vars have rank >= 1"
        feeds[name] = value
    try:
        program, weights = onnx_util.import_model(d / "model.onnx", d)
        got = onnx_util.exec_program(program, feeds, outputs, d, weights=weights)
    except RuntimeError as e:
        # The message without the temp dir, so equal reasons group.
        message = str(e).split(": exit ", 1)[1].split(": ", 1)[1]
        return re.sub(r"\S*/model\.onnx( \(imported\))?(:\d+:\d+)?:? ?", "", message)
    for name, want in zip(outputs, expected):
        want = np.asarray(want)
        have = got[name]
        if want.shape == () and have.shape == (1,):
            have = have.reshape(())  # nabla's scalars are [1]
        if have.shape != want.shape:
            return f"output {name}: shape {have.shape}, expected {want.shape}"
        if have.dtype != want.dtype:
            return f"output {name}: dtype {have.dtype}, expected {want.dtype}"
        if want.dtype.kind in "fc":
            if not np.allclose(have, want, rtol=case.rtol, atol=case.atol, equal_nan=True):
                err = np.max(np.abs(have.astype(np.float64) - want))
                return f"output {name}: values differ (max abs error {err:.3g})"
        elif not np.array_equal(have, want):
            return f"output {name}: values differ"
    return None


def test_onnx_node_cases(tmp_path):
    cases = collect_cases()
    ops, missing = convertible_ops()
    results = {}
    runnable = []
    # A few generators emit one name twice (opset variants).
    seen = collections.Counter(c.name for c in cases)
    for case in cases:
        lacking = sorted({n.op_type for n in case.model.graph.node if n.op_type not in ops})
        if lacking:
            op = lacking[0]
            results[case.name] = f"no converter for ONNX op {op}" + (f" ({missing[op]})" if op in missing else "")
        else:
            runnable.append(case)
    workers = max(1, min(4, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        reasons = pool.map(lambda ic: run_case(ic[1], ic[0], tmp_path), enumerate(runnable))
        for case, reason in zip(runnable, reasons):
            results[case.name] = reason
    passed = sorted(n for n, r in results.items() if r is None)
    failed = {n: r for n, r in results.items() if r is not None}
    by_reason = collections.Counter(r if r.startswith("no converter") else "run: " + r for r in failed.values())
    print(f"\nONNX node tests: {len(passed)} of {len(results)} pass ({len(runnable)} had converters for every op)")
    print("not passing, by reason:")
    for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {count:4d}  {reason}")
    out = os.environ.get("NABLA_ONNX_NODE_REPORT")
    if out:
        with open(out, "w") as f:
            for name in sorted(results):
                f.write(f"{name}\t{results[name] or 'pass'}\n")
    assert len(passed) >= PASS_FLOOR, f"{len(passed)} node tests pass, fewer than the recorded {PASS_FLOOR}"
