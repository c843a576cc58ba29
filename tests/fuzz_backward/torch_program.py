"""Runs a nabla program (YAML, docs/program-format.md) with PyTorch autograd, as the reference
for nabla's backward builder.

Vars live in a dict, so an op that overwrites a var rebinds the name and
autograd keeps every earlier value: exactly the semantics nabla's backward
must reproduce. Only the ops the overwrite tests and the fuzzer use are
known; an unknown op is an error, never a guess.
"""
import numpy as np
import torch
import yaml


def _align_y(x, y, axis):
    """Paddle's elementwise broadcasting: Y's dims line up with X's from `axis`."""
    if y.dim() == x.dim():
        return y
    if axis == -1:
        axis = x.dim() - y.dim()
    shape = [1] * axis + list(y.shape) + [1] * (x.dim() - axis - y.dim())
    return y.reshape(shape)


def _mul(x, y, a):
    xn, yn = a.get("x_num_col_dims", 1), a.get("y_num_col_dims", 1)
    x2 = x.reshape(int(np.prod(x.shape[:xn])), -1)
    y2 = y.reshape(int(np.prod(y.shape[:yn])), -1)
    return (x2 @ y2).reshape(list(x.shape[:xn]) + list(y.shape[yn:]))


def _matmul(x, y, a):
    if a.get("transpose_X", False):
        x = x.transpose(-1, -2)
    if a.get("transpose_Y", False):
        y = y.transpose(-1, -2)
    return (x @ y) * a.get("alpha", 1.0)


def _scale(x, a):
    s, b = a.get("scale", 1.0), a.get("bias", 0.0)
    return x * s + b if a.get("bias_after_scale", True) else (x + b) * s


def _reduce_sum(x, a):
    if a.get("reduce_all", False):
        out = x.sum()
        return out.reshape([1] * x.dim()) if a.get("keep_dim", False) else out.reshape(1)
    dims = a.get("dim", [0])
    dims = [d % x.dim() for d in (dims if isinstance(dims, list) else [dims])]
    out = x.sum(dim=dims, keepdim=a.get("keep_dim", False))
    return out.reshape(1) if out.dim() == 0 else out


def _elementwise(fn):
    return lambda ins, a: {"Out": fn(ins["X"][0], _align_y(ins["X"][0], ins["Y"][0], a.get("axis", -1)))}


def _unary(fn):
    return lambda ins, a: {"Out": fn(ins["X"][0])}


def _fill_constant(ins, a):
    dtype = {"float32": torch.float64, "float64": torch.float64, "int64": torch.int64, "int32": torch.int64,
             "bool": torch.bool}[a.get("dtype", "float32")]
    return {"Out": torch.full(a["shape"], a.get("value", 0.0), dtype=dtype)}


OPS = {
    "elementwise_add": _elementwise(lambda x, y: x + y),
    "elementwise_sub": _elementwise(lambda x, y: x - y),
    "elementwise_mul": _elementwise(lambda x, y: x * y),
    "elementwise_div": _elementwise(lambda x, y: x / y),
    "mul": lambda ins, a: {"Out": _mul(ins["X"][0], ins["Y"][0], a)},
    "matmul": lambda ins, a: {"Out": _matmul(ins["X"][0], ins["Y"][0], a)},
    "tanh": _unary(torch.tanh),
    "sigmoid": _unary(torch.sigmoid),
    "relu": _unary(torch.relu),
    "exp": _unary(torch.exp),
    "square": _unary(lambda x: x * x),
    "assign": _unary(lambda x: x),
    "scale": lambda ins, a: {"Out": _scale(ins["X"][0], a)},
    "mean": lambda ins, a: {"Out": ins["X"][0].mean().reshape(1)},
    "reduce_sum": lambda ins, a: {"Out": _reduce_sum(ins["X"][0], a)},
    "sum": lambda ins, a: {"Out": sum(ins["X"][1:], ins["X"][0])},
    "fill_constant": _fill_constant,
    "increment": lambda ins, a: {"Out": ins["X"][0] + int(a.get("step", 1.0))},
    "less_than": lambda ins, a: {"Out": ins["X"][0] < ins["Y"][0]},
}


class TorchProgram:
    def __init__(self, text):
        self.prog = yaml.safe_load(text)
        self.blocks = {b["idx"]: b for b in self.prog["blocks"]}

    def run_block(self, idx, env, max_steps=1000):
        for op in self.blocks[idx].get("ops", []):
            t, a = op["type"], op.get("attrs", {}) or {}
            ins = {slot: [env[n] for n in names] for slot, names in (op.get("inputs") or {}).items()}
            if t == "while":
                steps = 0
                while bool(env[op["inputs"]["Condition"][0]].reshape(-1)[0]):
                    steps += 1
                    assert steps <= max_steps, "while ran past max_steps"
                    self.run_block(a["sub_block"], env)
                continue
            if t == "conditional_block":
                if all(bool(env[c].reshape(-1)[0]) for c in op["inputs"]["Cond"]):
                    self.run_block(a["sub_block"], env)
                continue
            if t not in OPS:
                raise KeyError(f"torch_program: op '{t}' has no reference")
            outs = OPS[t](ins, a)
            for slot, names in (op.get("outputs") or {}).items():
                for n in names:
                    env[n] = outs[slot]

    def grads(self, feeds, loss, wanted):
        """feeds: name -> ndarray. Returns {loss: value, 'x@GRAD': ...} for x in `wanted` (float feeds)."""
        leaves = {}
        env = {}
        for name, arr in feeds.items():
            if np.issubdtype(arr.dtype, np.floating):
                leaves[name] = torch.tensor(arr, dtype=torch.float64, requires_grad=True)
                env[name] = leaves[name]
            else:
                env[name] = torch.tensor(arr)
        self.run_block(0, env)
        env[loss].sum().backward()
        out = {loss: env[loss].detach().numpy()}
        for name in wanted:
            g = leaves[name].grad
            out[name + "@GRAD"] = np.zeros_like(feeds[name], dtype=np.float64) if g is None else g.numpy()
        return out
