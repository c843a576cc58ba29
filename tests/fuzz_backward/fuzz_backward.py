#!/usr/bin/python3
"""Differential fuzzer of nabla's backward builder against PyTorch autograd.

Generates small random float64 programs (chains and diamonds of elementwise
add/sub/mul/div with random broadcasting `axis`, mul/matmul, tanh, sigmoid,
relu, exp, square, scale, mean, reduce_sum; shapes with 1s; var names reused
so that intermediate and fed vars are overwritten, in place or later (a fed
var's gradient is that of the value it was fed with, as a PyTorch leaf's);
some with a
while loop or a conditional_block whose body updates carried vars in place
and reads root vars that are overwritten after it), runs them with
`nabla exec --backward`, and compares the loss and every fed var's gradient
with torch_program.py (the same YAML under PyTorch autograd).

Several programs share one nabla run: their vars are prefixed apart and
their losses summed, so each program's gradients are unchanged and process
start-up is paid once per batch. A mismatching batch is rerun program by
program to find the culprit, which --save writes as a regression case
(tests/overwrite/cases/<name>/) that overwrite_test then runs for good.

  /usr/bin/python3 tests/fuzz_backward/fuzz_backward.py --nabla build/bin/nabla [--seed 1] [--count 300]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_program import TorchProgram  # noqa: E402

UNARY = ["tanh", "sigmoid", "relu", "exp", "square", "scale"]
BINARY = ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"]


class Gen:
    """One random program: a list of op dicts over named vars with known shapes."""

    def __init__(self, rng):
        self.rng = rng
        self.shapes = {}  # var -> shape, the vars the current block sees
        self.feeds = {}  # var -> ndarray
        self.ops = []  # the current block's ops (root first)
        self.live = []  # intermediate vars of the current block, overwrite candidates
        self.blocks = []  # op lists of the sub-blocks; an op's sub_block k names blocks[k - 1]
        self.state_vars = []  # (name, type) of step_scopes vars
        self.overwritable_feeds = []  # feeds an op may overwrite (x@GRAD is then the fed value's gradient)
        self.n = 0

    def new_name(self, base):
        self.n += 1
        return f"{base}{self.n}"

    def feed(self, shape, positive=False, fixed=False):
        name = self.new_name("f")
        if not positive and not fixed:
            self.overwritable_feeds.append(name)
        if positive:
            arr = self.rng.uniform(0.5, 2.0, size=shape)
        else:
            arr = self.rng.uniform(-1.5, 1.5, size=shape)
        self.feeds[name] = arr.astype(np.float64)
        self.shapes[name] = list(shape)
        return name

    def pick(self, shape=None):
        pool = [v for v in self.shapes if shape is None or self.shapes[v] == list(shape)]
        return pool[self.rng.integers(len(pool))] if pool else None

    def out_name(self, shape, inputs):
        """A fresh name, or an intermediate of the same shape to overwrite (an input: in place)."""
        r = self.rng.random()
        same = [v for v in self.live if self.shapes[v] == list(shape)]
        if self.rng.random() < 0.15:
            same += [f for f in self.overwritable_feeds if f in self.shapes and self.shapes[f] == list(shape)]
        if same and r < 0.45:
            in_place = [v for v in inputs if v in same]
            if in_place and self.rng.random() < 0.5:
                return in_place[0]
            return same[self.rng.integers(len(same))]
        name = self.new_name("v")
        self.live.append(name)
        return name

    def emit(self, t, inputs, out_shape, attrs=None, slots=("X", "Y")):
        out = self.out_name(out_shape, [v for v in inputs])
        op = {"type": t, "inputs": {s: [v] for s, v in zip(slots, inputs)}, "outputs": {"Out": [out]}}
        if attrs:
            op["attrs"] = attrs
        self.ops.append(op)
        self.shapes[out] = list(out_shape)
        return out

    def broadcast_y(self, xshape):
        """A Y shape Paddle's axis broadcasting puts on X, and the axis."""
        rank = len(xshape)
        if self.rng.random() < 0.4:
            return list(xshape), -1
        length = int(self.rng.integers(1, rank + 1))
        axis = int(self.rng.integers(0, rank - length + 1))
        y = [d if self.rng.random() < 0.6 else 1 for d in xshape[axis:axis + length]]
        if axis + length == rank and self.rng.random() < 0.5:
            axis = -1
        return y, axis

    def step(self):
        choice = self.rng.random()
        x = self.pick()
        xs = self.shapes[x]
        if choice < 0.4:
            t = BINARY[self.rng.integers(len(BINARY))]
            yshape, axis = self.broadcast_y(xs)
            if t == "elementwise_div":
                y = self.feed(yshape, positive=True)
            else:
                y = self.pick(yshape) if self.rng.random() < 0.6 else None
                y = y or self.feed(yshape)
            return self.emit(t, [x, y], xs, {"axis": axis} if axis != -1 or self.rng.random() < 0.3 else None)
        if choice < 0.55 and len(xs) == 2:
            n = int(self.rng.integers(1, 4))
            if self.rng.random() < 0.5:
                y = self.pick([xs[1], n]) or self.feed([xs[1], n])
                return self.emit("mul", [x, y], [xs[0], n])
            ty = bool(self.rng.random() < 0.5)
            y = self.feed([n, xs[1]] if ty else [xs[1], n])
            alpha = float(self.rng.choice([1.0, 0.5]))
            return self.emit("matmul", [x, y], [xs[0], n], {"transpose_Y": ty, "alpha": alpha})
        if choice < 0.9:
            t = UNARY[self.rng.integers(len(UNARY))]
            if t == "exp" and x in self.live:
                t = "tanh"  # keep values small: exp of exp overflows the comparison
            attrs = {"scale": float(self.rng.choice([2.0, -0.5])), "bias": float(self.rng.choice([0.0, 0.25]))} \
                if t == "scale" else None
            return self.emit(t, [x], xs, attrs, slots=("X",))
        if len(xs) == 2 and xs[0] > 1:
            return self.emit("reduce_sum", [x], [1, xs[1]], {"dim": [0], "keep_dim": True}, slots=("X",))
        return self.emit("square", [x], xs, slots=("X",))

    def sub_block(self, kind):
        """A while loop (1..3 steps) or a conditional_block whose body updates
        carried vars (and its own) in place; the body reads root vars too."""
        shape = self.shapes[self.pick()]
        carried = []
        for _ in range(int(self.rng.integers(1, 3))):
            c = self.new_name("c")
            self.ops.append({"type": "assign", "inputs": {"X": [self.pick(shape)]}, "outputs": {"Out": [c]}})
            self.shapes[c] = list(shape)
            carried.append(c)
        if kind == "while":
            i, n, more = self.new_name("i"), self.new_name("n"), self.new_name("more")
            steps = float(self.rng.integers(1, 4))
            self.ops += [
                {"type": "fill_constant", "outputs": {"Out": [i]}, "attrs": {"shape": [1], "dtype": "int64",
                                                                             "value": 0.0}},
                {"type": "fill_constant", "outputs": {"Out": [n]}, "attrs": {"shape": [1], "dtype": "int64",
                                                                             "value": steps}},
                {"type": "less_than", "inputs": {"X": [i], "Y": [n]}, "outputs": {"Out": [more]}}]
        else:
            a, b, flag = self.feed([1], fixed=True), self.feed([1], fixed=True), self.new_name("flag")
            self.ops.append({"type": "less_than", "inputs": {"X": [a], "Y": [b]}, "outputs": {"Out": [flag]}})
        root_ops, root_live, root_shapes = self.ops, self.live, dict(self.shapes)
        self.ops, self.live = [], list(carried)
        for _ in range(int(self.rng.integers(1, 6))):
            self.step()
        body = self.ops
        local = set(self.live) - set(carried)
        if kind == "while":
            body += [{"type": "increment", "inputs": {"X": [i]}, "outputs": {"Out": [i]}},
                     {"type": "less_than", "inputs": {"X": [i], "Y": [n]}, "outputs": {"Out": [more]}}]
        reads = list(dict.fromkeys(v for op in body for vs in op["inputs"].values() for v in vs if v not in local))
        writes = list(dict.fromkeys(v for op in body for vs in op["outputs"].values() for v in vs
                                    if v not in local))
        self.blocks.append(body)
        state = self.new_name("st")
        self.state_vars.append(state)
        if kind == "while":
            op = {"type": "while", "inputs": {"X": [v for v in reads if v != more], "Condition": [more]},
                  "outputs": {"Out": writes, "StepScopes": [state]}, "attrs": {"sub_block": len(self.blocks)}}
        else:
            op = {"type": "conditional_block", "inputs": {"Cond": [flag], "Input": reads},
                  "outputs": {"Out": writes, "Scope": [state]},
                  "attrs": {"sub_block": len(self.blocks), "is_scalar_condition": True}}
        # Feeds made for the body are root vars: they stay visible.
        root_shapes.update({f: self.shapes[f] for f in self.feeds})
        self.ops, self.live, self.shapes = root_ops, root_live + carried, root_shapes
        self.ops.append(op)
        return carried[-1]

    def build(self):
        rank = int(self.rng.integers(1, 3))
        base = [int(self.rng.integers(1, 4)) for _ in range(rank)]
        self.feed(base)
        if self.rng.random() < 0.5:
            self.feed(base)
        loop_at = int(self.rng.integers(0, 4)) if self.rng.random() < 0.4 else -1
        for k in range(int(self.rng.integers(2, 9))):
            if k == loop_at:
                self.sub_block("while" if self.rng.random() < 0.6 else "conditional_block")
            self.step()
        # The loss reads the last value of one or two vars (diamonds meet here).
        ends = [self.ops[-1]["outputs"]["Out"][0]]
        if self.live and self.rng.random() < 0.5:
            ends.append(self.live[self.rng.integers(len(self.live))])
        means = []
        for e in dict.fromkeys(ends):
            m = self.new_name("m")
            self.ops.append({"type": "mean", "inputs": {"X": [e]}, "outputs": {"Out": [m]}})
            means.append(m)
        loss = means[0]
        if len(means) > 1:
            loss = self.new_name("loss")
            self.ops.append({"type": "sum", "inputs": {"X": means}, "outputs": {"Out": [loss]}})
        return loss


def flow(v):
    """YAML flow style, which nabla's loader and PyYAML both read."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(flow(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def to_yaml(progs):
    """progs: list of (prefix, Gen, loss). One block; the vars of each program carry its prefix."""
    def p(prefix, name):
        return prefix + name
    lines = ["format: nabla-program/1", "blocks:", "  - idx: 0", "    parent: -1", "    vars:"]
    for prefix, g, _ in progs:
        for name in g.feeds:
            lines.append(f"      {p(prefix, name)}: {{shape: {flow(g.shapes[name])}, dtype: float64}}")
        for name in g.state_vars:
            lines.append(f"      {p(prefix, name)}: {{type: step_scopes}}")
    offsets, next_block = [], 1
    for _, g, _ in progs:
        offsets.append(next_block - 1)
        next_block += len(g.blocks)

    def emit(prefix, offset, ops):
        out = []
        for op in ops:
            renamed = dict(op)
            for key in ("inputs", "outputs"):
                renamed[key] = {s: [p(prefix, v) for v in vs] for s, vs in op.get(key, {}).items()}
            if "sub_block" in op.get("attrs", {}):
                renamed["attrs"] = dict(op["attrs"], sub_block=op["attrs"]["sub_block"] + offset)
            out.append("      - " + flow(renamed))
        return out

    lines.append("    ops:")
    for (prefix, g, _), offset in zip(progs, offsets):
        lines += emit(prefix, offset, g.ops)
    losses = [p(prefix, loss) for prefix, _, loss in progs]
    total = losses[0]
    if len(losses) > 1:
        total = "total_loss"
        lines.append("      - " + flow({"type": "sum", "inputs": {"X": losses}, "outputs": {"Out": [total]}}))
    for (prefix, g, _), offset in zip(progs, offsets):
        for k, body in enumerate(g.blocks):
            lines += [f"  - idx: {offset + k + 1}", "    parent: 0", "    ops:"] + emit(prefix, offset, body)
    return "\n".join(lines) + "\n", total


def run_nabla(nabla, yaml_text, loss, feeds, fetch, work, executor):
    prog = os.path.join(work, "program.yaml")
    with open(prog, "w") as f:
        f.write(yaml_text)
    args = [nabla, "exec", prog, "--backward", loss, "--executor", executor, "--fetch", ",".join(fetch),
            "--out", os.path.join(work, "out")]
    for name, arr in feeds.items():
        path = os.path.join(work, f"{name}.npy")
        np.save(path, arr)
        args += ["--feed", f"{name}={path}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return {v: np.load(os.path.join(work, "out", f"{v}.npy")) for v in fetch}, ""


def compare(progs, nabla, work, executor):
    """Returns a list of (index in progs, message) for the programs that disagree."""
    yaml_text, total = to_yaml(progs)
    feeds, expected = {}, {}
    ref = TorchProgram(yaml_text)
    all_feeds = {prefix + n: a for prefix, g, _ in progs for n, a in g.feeds.items()}
    want = ref.grads(all_feeds, total, list(all_feeds))
    fetch = [total]
    owner = {}
    for i, (prefix, g, loss) in enumerate(progs):
        for n in g.feeds:
            grad = want[prefix + n + "@GRAD"]
            feeds[prefix + n] = all_feeds[prefix + n]
            if np.any(grad != 0):  # a feed the loss never reaches has no gradient var to fetch
                fetch.append(prefix + n + "@GRAD")
                expected[prefix + n + "@GRAD"] = grad
                owner[prefix + n + "@GRAD"] = i
    expected[total] = want[total]
    got, err = run_nabla(nabla, yaml_text, total, feeds, fetch, work, executor)
    if got is None:
        return [(-1, f"nabla failed: {err}")]
    bad = []
    for var, exp in expected.items():
        g = got[var].reshape(exp.shape) if got[var].size == exp.size else got[var]
        if g.shape != exp.shape or not np.allclose(g, exp, rtol=1e-7, atol=1e-9):
            err = np.max(np.abs(g - exp)) if g.shape == exp.shape else "shape"
            bad.append((owner.get(var, -1), f"{var}: max abs error {err}"))
    return bad


def save_case(root, name, g, loss):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "overwrite"))
    yaml_text, _ = to_yaml([("", g, loss)])
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    with open(os.path.join(d, "program.yaml"), "w") as f:
        f.write(yaml_text)
    ref = TorchProgram(yaml_text).grads(g.feeds, loss, list(g.feeds))
    lines = [f"loss: {loss}", "feeds:"]
    for n, a in g.feeds.items():
        np.save(os.path.join(d, "inputs", f"{n}.npy"), a)
        lines.append(f"  {n}: inputs/{n}.npy")
    lines.append("expected:")
    for v, a in ref.items():
        if v != loss and not np.any(a != 0):
            continue
        np.save(os.path.join(d, "expected", f"{v}.npy"), np.asarray(a, dtype=np.float64))
        lines.append(f"  '{v}': expected/{v}.npy")
    with open(os.path.join(d, "case.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nabla", required=True, help="the nabla binary")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300, help="programs to generate")
    ap.add_argument("--batch", type=int, default=25, help="programs per nabla run")
    ap.add_argument("--executor", default="both", choices=["sequential", "taskgraph", "both"])
    ap.add_argument("--save", metavar="DIR", help="write each mismatching program as a regression case under DIR")
    ap.add_argument("--show", type=int, metavar="INDEX", help="print program INDEX of this seed and exit")
    args = ap.parse_args()

    start = time.time()
    rng = np.random.default_rng(args.seed)
    programs = []
    for _ in range(args.count):
        g = Gen(rng)
        programs.append((g, g.build()))
    if args.show is not None:
        print(to_yaml([("", *programs[args.show])])[0], end="")
        return 0
    executors = ["sequential", "taskgraph"] if args.executor == "both" else [args.executor]
    failures = []
    with tempfile.TemporaryDirectory(prefix="nabla_fuzz_") as work:
        for b in range(0, len(programs), args.batch):
            chunk = [(f"p{i}_", *programs[i]) for i in range(b, min(b + args.batch, len(programs)))]
            ex = executors[(b // args.batch) % len(executors)]
            bad = compare(chunk, args.nabla, work, ex)
            if not bad:
                continue
            # Alone, each program says whether it is the culprit.
            for k, (prefix, g, loss) in enumerate(chunk):
                alone = compare([("", g, loss)], args.nabla, work, ex)
                if alone:
                    failures.append((b + k, ex, alone))
    for index, ex, msgs in failures:
        print(f"MISMATCH seed {args.seed} program {index} ({ex}): " + "; ".join(m for _, m in msgs))
        if args.save:
            g, loss = programs[index]
            print("  saved", save_case(args.save, f"fuzz_seed{args.seed}_{index}", g, loss))
    print(f"fuzz_backward: {len(programs)} programs, seed {args.seed}, {len(failures)} mismatches, "
          f"{time.time() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
