#!/usr/bin/python3
"""Random training programs through `nabla exec`: every fused and threaded way against the plain one.

Each trial builds a small network of the ops the fusion passes rewrite: mul or matmul layers, weights
shared between layers of one shape (FuseGradOps' shared transpose and in-place partial gradients),
biases and tanh / relu / sigmoid / gelu (bias + activation fusion), residual adds, layer_norm, and a
loss of softmax + cross_entropy, softmax_with_cross_entropy or a mean of squares; sometimes an
intermediate is fetched (the passes must keep it). One sgd step runs plain (sequential executor),
with `--fuse` (sequential, and the task graph on 2 threads) and plain on 2 threads; every updated
parameter, the loss and the fetched intermediate must agree within 1e-5 (relative to their size).

Not part of CI (a minute per 40 trials); run after touching a fusion pass or the backward builder:
    /usr/bin/python3 scripts/sweep_fusion.py --trials 100 --seed 1
Exits 1 on a failure, printing the trial's folder.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = [("plain", ["--executor", "sequential"]), ("fused", ["--fuse", "--executor", "sequential"]),
            ("fused_2_threads", ["--fuse", "--threads", "2"]), ("plain_2_threads", ["--threads", "2"])]


def network(rng):
    """(program text, feeds, parameter names, fetched intermediates)."""
    batch = int(rng.integers(1, 6))
    widths = [int(rng.integers(1, 9)) for _ in range(4)]
    decl, ops, feeds = {}, [], {}
    count = [0]

    def new(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def param(name, shape, lo, hi):
        decl[name] = f"{{shape: {list(shape)}, dtype: float32, persistable: true}}"
        feeds[name] = rng.uniform(lo, hi, shape)

    decl["x"] = f"{{shape: [{batch}, {widths[0]}], dtype: float32, stop_gradient: true}}"
    feeds["x"] = rng.uniform(-1, 1, (batch, widths[0]))
    acts, weights = [("x", widths[0])], {}
    for _ in range(int(rng.integers(2, 7))):
        src, din = acts[int(rng.integers(0, len(acts)))]
        dout = widths[int(rng.integers(0, 4))]
        if rng.random() < 0.3 and din > 1:
            ln, scale, bias = new("ln"), new("ln_scale"), new("ln_bias")
            param(scale, (din,), 0.5, 1.5)
            param(bias, (din,), -0.5, 0.5)
            ops.append(f"{{type: layer_norm, inputs: {{X: [{src}], Scale: [{scale}], Bias: [{bias}]}}, outputs: "
                       f"{{Y: [{ln}], Mean: [{ln}_mean], Variance: [{ln}_var]}}, attrs: {{begin_norm_axis: 1}}}}")
            src = ln
        shared = weights.get((din, dout), [])
        if shared and rng.random() < 0.5:
            w = shared[int(rng.integers(0, len(shared)))]
        else:
            w = new("w")
            param(w, (din, dout), -0.8, 0.8)
            weights.setdefault((din, dout), []).append(w)
        h = new("h")
        ops.append(f"{{type: {'mul' if rng.random() < 0.6 else 'matmul'}, inputs: {{X: [{src}], Y: [{w}]}}, "
                   f"outputs: {{Out: [{h}]}}}}")
        if rng.random() < 0.7:
            b, hb = new("b"), new("hb")
            param(b, (dout,), -0.5, 0.5)
            ops.append(f"{{type: elementwise_add, inputs: {{X: [{h}], Y: [{b}]}}, outputs: {{Out: [{hb}]}}}}")
            h = hb
        act = str(rng.choice(["tanh", "relu", "sigmoid", "gelu", "none"]))
        if act != "none":
            a = new("a")
            ops.append(f"{{type: {act}, inputs: {{X: [{h}]}}, outputs: {{Out: [{a}]}}}}")
            h = a
        same = [n for n, width in acts if width == dout and n != "x"]
        if same and rng.random() < 0.4:
            r = new("r")
            ops.append(f"{{type: elementwise_add, inputs: {{X: [{h}], Y: [{same[int(rng.integers(0, len(same)))]}]}}, "
                       f"outputs: {{Out: [{r}]}}}}")
            h = r
        acts.append((h, dout))
    last, width = acts[-1]
    if width > 1 and rng.random() < 0.5:
        decl["label"] = f"{{shape: [{batch}, 1], dtype: int64, stop_gradient: true}}"
        feeds["label"] = rng.integers(0, width, (batch, 1))
        if rng.random() < 0.5:
            ops += [f"{{type: softmax, inputs: {{X: [{last}]}}, outputs: {{Out: [prob]}}}}",
                    "{type: cross_entropy, inputs: {X: [prob], Label: [label]}, outputs: {Y: [ce]}}"]
        else:
            ops.append(f"{{type: softmax_with_cross_entropy, inputs: {{Logits: [{last}], Label: [label]}}, "
                       "outputs: {Softmax: [sm], Loss: [ce]}}")
        ops.append("{type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}")
    else:
        ops += [f"{{type: elementwise_mul, inputs: {{X: [{last}], Y: [{last}]}}, outputs: {{Out: [sq]}}}}",
                "{type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}"]
    text = ("format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" +
            "\n".join(f"      {n}: {d}" for n, d in decl.items()) + "\n    ops:\n" +
            "\n".join("      - " + o for o in ops) + "\n")
    inner = [n for n, _ in acts[1:]]
    fetched = [inner[int(rng.integers(0, len(inner)))]] if inner and rng.random() < 0.5 else []
    params = [n for n, d in decl.items() if "persistable" in d]
    return text, feeds, params, fetched


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nabla", default=os.environ.get("NABLA_BIN", str(ROOT / "build" / "bin" / "nabla")))
    ap.add_argument("--work", help="folder for the trials (default: a temporary one, removed when all pass)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    work = pathlib.Path(a.work or tempfile.mkdtemp(prefix="nabla_sweep_fusion_"))
    bad = 0
    for trial in range(a.trials):
        text, feeds, params, fetched = network(rng)
        folder = work / f"trial{trial}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "p.yaml").write_text(text)
        args = []
        for n, x in feeds.items():
            np.save(folder / f"{n}.npy", x.astype(np.int64 if n == "label" else np.float32))
            args += ["--feed", f"{n}={folder / (n + '.npy')}"]
        names = params + ["loss"] + fetched
        got = {}
        for variant, extra in VARIANTS:
            r = subprocess.run([a.nabla, "exec", str(folder / "p.yaml"), *args, "--backward", "loss", "--sgd", "0.5",
                                *extra, "--fetch", ",".join(names), "--out", str(folder / variant)],
                               capture_output=True, text=True)
            if r.returncode:
                bad += 1
                print(f"FAILED {folder} {variant}: {r.stderr.strip()}")
                break
            got[variant] = {n: np.load(folder / variant / f"{n}.npy").astype(np.float64) for n in names}
        else:
            plain = got["plain"]
            for variant in got:
                for n in names:
                    err = np.abs(got[variant][n] - plain[n]).max()
                    if not np.isfinite(got[variant][n]).all() or err > 1e-5 * max(1.0, np.abs(plain[n]).max()):
                        bad += 1
                        print(f"MISMATCH {folder} {variant} {n}: max error {err:.3g}")
    print(f"sweep_fusion: {a.trials} trials, {bad} failures ({work})")
    if not bad and not a.work:
        shutil.rmtree(work)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
