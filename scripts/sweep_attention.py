#!/usr/bin/python3
"""Random attention programs through `nabla exec`, fused and not, against PyTorch.

Each trial writes attention as a user would (transpose -> matmul(transpose_Y, alpha = 1/sqrt(d))
[-> elementwise_add(mask)] -> softmax -> matmul -> transpose) with random batch, lengths (equal or
not, across the 128-row tiles), heads, head sizes (dim_v too), dtype and mask: none, fed as data
(a bias with -1e9 entries, a key-padding mask with -inf, a per-head bias) or built in the program
from fill_constant + tril_triu (-1e9, -1e4 or -3e38 on a random diagonal; causal ones become
flash_attn's causal). It runs the program with `--fuse` (the attention becomes flash_attn) and
without, on both executors, and compares the loss and the gradients of q, k and v with PyTorch's
unfused attention in the same dtype, scaled as each program scales: matmul's alpha is a float
attribute, flash_attn's scale is exact.

Not part of CI (a minute per 40 trials); run after touching flash_attn or the attention fusion:
    /usr/bin/python3 scripts/sweep_attention.py --trials 100 --seed 7
Exits 1 on a mismatch, printing the trial's configuration and its folder.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def program(b, tq, tk, h, d, dv, dtype, mask):
    vs = [f"      {n}: {{shape: [{b}, {t}, {h}, {w}], dtype: {dtype}, stop_gradient: {str(n == 'w').lower()}}}"
          for n, t, w in (("q", tq, d), ("k", tk, d), ("v", tk, dv), ("w", tq, dv))]
    ops = []
    for n in "qkv":  # through an op, so the gradients reach the fed q, k, v
        ops += [f"{{type: scale, inputs: {{X: [{n}]}}, outputs: {{Out: [{n}4]}}, attrs: {{scale: 1.0}}}}",
                f"{{type: transpose, inputs: {{X: [{n}4]}}, outputs: {{Out: [{n}t]}}, attrs: {{axis: [0, 2, 1, 3]}}}}"]
    ops.append(f"{{type: matmul, inputs: {{X: [qt], Y: [kt]}}, outputs: {{Out: [s]}}, "
               f"attrs: {{transpose_Y: true, alpha: {1 / np.sqrt(d)!r}}}}}")
    scores = "s"
    if mask is not None:
        if mask[0] == "feed":
            vs.append(f"      mask: {{shape: {list(mask[1].shape)}, dtype: {dtype}, stop_gradient: true}}")
        else:
            _, diag, value = mask
            ops += [f"{{type: fill_constant, outputs: {{Out: [big]}}, attrs: {{shape: [{tq}, {tk}], dtype: {dtype}, "
                    f"value: {value}}}}}",
                    f"{{type: tril_triu, inputs: {{X: [big]}}, outputs: {{Out: [mask]}}, "
                    f"attrs: {{lower: false, diagonal: {diag}}}}}"]
        ops.append("{type: elementwise_add, inputs: {X: [s], Y: [mask]}, outputs: {Out: [sm]}}")
        scores = "sm"
    ops += [f"{{type: softmax, inputs: {{X: [{scores}]}}, outputs: {{Out: [p]}}, attrs: {{axis: -1}}}}",
            "{type: matmul, inputs: {X: [p], Y: [vt]}, outputs: {Out: [o]}}",
            "{type: transpose, inputs: {X: [o]}, outputs: {Out: [ot]}, attrs: {axis: [0, 2, 1, 3]}}",
            "{type: elementwise_mul, inputs: {X: [ot], Y: [w]}, outputs: {Out: [y]}}",
            "{type: reduce_sum, inputs: {X: [y]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}"]
    return ("format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + "\n".join(vs) +
            "\n    ops:\n" + "\n".join("      - " + o for o in ops) + "\n")


def random_mask(rng, b, tq, tk, h, dtype):
    """(kind, ...) and the mask's value as PyTorch adds it; None when the trial shows no key to a row."""
    kind = int(rng.integers(0, 6))
    if kind == 0:
        return None, None
    if kind == 1:
        m = np.where(rng.random((tq, tk)) < 0.2, -1e9, rng.uniform(-3, 0, (tq, tk)))
        m[:, 0] = 0
    elif kind == 2:
        m = np.zeros((b, 1, 1, tk))
        m[..., tk // 2 + 1:] = -np.inf
    elif kind == 3:
        m = rng.uniform(-2, 2, (1, h, tq, tk))
    else:
        diag = tk - tq + 1 if kind == 4 else int(rng.choice([0, 2, tk - tq + 2]))
        if diag < 0:
            return "skip", None  # a row that sees no key: PyTorch gives NaN, nabla zeros
        value = str(rng.choice(["-1e9", "-1e4", "-3e38"]))
        keep = np.triu(np.ones((tq, tk)), diag) > 0
        return ("const", diag, value), np.where(keep, float(value), 0.0)
    return ("feed", m.astype(dtype)), m


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--nabla", default=os.environ.get("NABLA_BIN", str(ROOT / "build" / "bin" / "nabla")))
    ap.add_argument("--work", help="folder for the trials (default: a temporary one, removed when all pass)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    work = pathlib.Path(a.work or tempfile.mkdtemp(prefix="nabla_sweep_attention_"))
    bad = runs = 0
    for trial in range(a.trials):
        b, h = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        d = int(rng.choice([1, 3, 8, 16, 33, 64, 80, 96, 128]))
        dv = d if rng.random() < 0.7 else int(rng.choice([1, 5, 32]))
        tq = int(rng.choice([1, 2, 7, 64, 127, 128, 129, 200, 257]))
        tk = tq if rng.random() < 0.6 else int(rng.choice([1, 5, 128, 130, 300]))
        dtype = str(rng.choice(["float32", "float64"]))
        npdt = np.float32 if dtype == "float32" else np.float64
        mask, mval = random_mask(rng, b, tq, tk, h, npdt)
        if mask == "skip":
            continue
        feeds = {"q": rng.uniform(-2, 2, (b, tq, h, d)), "k": rng.uniform(-2, 2, (b, tk, h, d)),
                 "v": rng.uniform(-1, 1, (b, tk, h, dv)), "w": rng.uniform(-1, 1, (b, tq, h, dv))}
        if mask is not None and mask[0] == "feed":
            feeds["mask"] = mask[1]
        feeds = {n: x.astype(npdt) for n, x in feeds.items()}
        folder = work / f"trial{trial}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "p.yaml").write_text(program(b, tq, tk, h, d, dv, dtype, mask))
        args = []
        for n, x in feeds.items():
            np.save(folder / f"{n}.npy", x)
            args += ["--feed", f"{n}={folder / (n + '.npy')}"]
        def reference(scale):
            tq_, tk_, tv_ = (torch.tensor(feeds[n], requires_grad=True) for n in "qkv")
            s = tq_.permute(0, 2, 1, 3) @ tk_.permute(0, 2, 3, 1) * scale
            if mval is not None:
                s = s + torch.tensor(mval.astype(npdt))
            o = (torch.softmax(s, -1) @ tv_.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
            loss = (o * torch.tensor(feeds["w"])).sum()
            loss.backward()
            return {"loss": loss.detach().numpy(), "q@GRAD": tq_.grad.numpy(), "k@GRAD": tk_.grad.numpy(),
                    "v@GRAD": tv_.grad.numpy()}

        # matmul's alpha is a float attribute; flash_attn (the fused program) scales exactly.
        want_unfused = reference(float(np.float32(1 / np.sqrt(d))))
        want_fused = reference(1 / np.sqrt(d))
        tol = 1e-3 if dtype == "float32" else 1e-7
        config = dict(batch=b, seq_q=tq, seq_k=tk, heads=h, dim=d, dim_v=dv, dtype=dtype,
                      mask=None if mask is None else mask[0] if mask[0] == "feed" else mask)
        for fuse in ([], ["--fuse"]):
            for executor in ("sequential", "taskgraph"):
                runs += 1
                out = folder / f"out{''.join(fuse)}_{executor}"
                want = want_fused if fuse else want_unfused
                r = subprocess.run([a.nabla, "exec", str(folder / "p.yaml"), *args, "--backward", "loss", *fuse,
                                    "--executor", executor, "--fetch", ",".join(want), "--out", str(out)],
                                   capture_output=True, text=True)
                if r.returncode:
                    bad += 1
                    print(f"FAILED {folder} {fuse} {executor}: {r.stderr.strip()}", config)
                    continue
                for n, x in want.items():
                    got = np.load(out / f"{n}.npy").astype(np.float64)
                    err = np.abs(got - x).max()
                    scale = max(np.abs(x).max(), 1e-3)
                    if not np.isfinite(got).all() or err > tol * scale:
                        bad += 1
                        print(f"MISMATCH {folder} {fuse} {executor} {n}: max error {err:.3g} of {scale:.3g}", config)
    print(f"sweep_attention: {a.trials} trials, {runs} runs, {bad} failures ({work})")
    if not bad and not a.work:
        shutil.rmtree(work)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
