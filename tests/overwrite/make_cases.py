#!/usr/bin/python3
"""Writes the overwrite regression cases: programs that overwrite vars (in
block 0, in while bodies, in conditional blocks) with PyTorch's loss and
gradients for them.

Each case is a folder cases/<name>/ with program.yaml, case.yaml (loss,
feeds, expected), inputs/*.npy and expected/*.npy, all float64. The
reference runs the same YAML through tests/fuzz_backward/torch_program.py
(PyTorch autograd), so nothing here restates the math.

Run with Debian's interpreter: /usr/bin/python3 tests/overwrite/make_cases.py
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz_backward"))
from torch_program import TorchProgram  # noqa: E402


def save_case(name, program, loss, feeds, wanted):
    ref = TorchProgram(program).grads(feeds, loss, wanted)
    d = os.path.join(HERE, "cases", name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    with open(os.path.join(d, "program.yaml"), "w") as f:
        f.write(program)
    lines = [f"loss: {loss}", "feeds:"]
    for var, arr in feeds.items():
        np.save(os.path.join(d, "inputs", f"{var}.npy"), arr)
        lines.append(f"  {var}: inputs/{var}.npy")
    lines.append("expected:")
    for var, arr in ref.items():
        np.save(os.path.join(d, "expected", f"{var}.npy"), np.asarray(arr, dtype=np.float64))
        lines.append(f"  '{var}': expected/{var}.npy")
    with open(os.path.join(d, "case.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {d}")


def rand(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float64)


HEADER = "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"


def var_lines(decls):
    return "".join(f"      {n}: {{shape: {list(s)}, dtype: float64}}\n" for n, s in decls)


def loop_head(steps):
    return (f"      - {{type: fill_constant, outputs: {{Out: [i]}}, attrs: {{shape: [1], dtype: int64, value: 0.0}}}}\n"
            f"      - {{type: fill_constant, outputs: {{Out: [n]}}, attrs: {{shape: [1], dtype: int64, "
            f"value: {float(steps)}}}}}\n"
            "      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}\n")


LOOP_TAIL = ("      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i]}}\n"
             "      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [more]}}\n")


def body(ops):
    return "  - idx: 1\n    parent: 0\n    ops:\n" + "".join(f"      - {o}\n" for o in ops) + LOOP_TAIL


def main():
    rng = np.random.default_rng(16)

    # The issue's first program: y is overwritten after mul read it.
    prog = HEADER + var_lines([("x", (3, 4)), ("w", (3, 4))]) + """    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {scale: 2.0}}
      - {type: elementwise_mul, inputs: {X: [y], Y: [w]}, outputs: {Out: [z]}}
      - {type: tanh, inputs: {X: [z]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
"""
    save_case("block0_overwrite", prog, "loss", {"x": rand(rng, 3, 4), "w": rand(rng, 3, 4)}, ["x", "w"])

    # Fed vars overwritten after ops read them: x@GRAD and w@GRAD are the
    # gradients of the fed values, as PyTorch's leaves; fetching w gives its
    # last value.
    prog = HEADER + var_lines([("x", (3, 4)), ("w", (3, 4))]) + """    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [z]}}
      - {type: tanh, inputs: {X: [z]}, outputs: {Out: [w]}}
      - {type: square, inputs: {X: [x]}, outputs: {Out: [x]}}
      - {type: elementwise_add, inputs: {X: [w], Y: [x]}, outputs: {Out: [w]}}
      - {type: mean, inputs: {X: [w]}, outputs: {Out: [loss]}}
"""
    save_case("fed_overwrite", prog, "loss", {"x": rand(rng, 3, 4), "w": rand(rng, 3, 4)}, ["x", "w"])

    # An overwritten var read by two ops, then overwritten again in place.
    prog = HEADER + var_lines([("x", (2, 3)), ("w", (3, 3))]) + """    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {scale: 1.5, bias: 0.5}}
      - {type: mul, inputs: {X: [y], Y: [w]}, outputs: {Out: [z]}}
      - {type: elementwise_mul, inputs: {X: [y], Y: [z]}, outputs: {Out: [u]}}
      - {type: sigmoid, inputs: {X: [u]}, outputs: {Out: [y]}}
      - {type: square, inputs: {X: [y]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
"""
    save_case("two_readers", prog, "loss", {"x": rand(rng, 2, 3), "w": rand(rng, 3, 3, scale=0.5)}, ["x", "w"])

    # A var overwritten three times, each version read by the next op and
    # one also by a later op.
    prog = HEADER + var_lines([("x", (4,)), ("w", (4,))]) + """    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [y]}}
      - {type: tanh, inputs: {X: [y]}, outputs: {Out: [y]}}
      - {type: elementwise_add, inputs: {X: [y], Y: [x]}, outputs: {Out: [keep]}}
      - {type: exp, inputs: {X: [y]}, outputs: {Out: [y]}}
      - {type: elementwise_mul, inputs: {X: [y], Y: [keep]}, outputs: {Out: [y]}}
      - {type: reduce_sum, inputs: {X: [y]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
"""
    save_case("three_overwrites", prog, "loss", {"x": rand(rng, 4), "w": rand(rng, 4)}, ["x", "w"])

    # The issue's while body that updates h in place.
    steps = 4
    decls = [("x", (2, 3)), ("w", (3, 4)), ("u", (4, 4)), ("h0", (2, 4))]
    prog = HEADER + var_lines(decls) + "      steps: {type: step_scopes}\n    ops:\n" + loop_head(steps) + """\
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: assign, inputs: {X: [h0]}, outputs: {Out: [h]}}
      - type: while
        inputs: {X: [h, u, xw, i, n], Condition: [more]}
        outputs: {Out: [h, i, more], StepScopes: [steps]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [h]}, outputs: {Out: [loss]}}
""" + body(["{type: mul, inputs: {X: [h], Y: [u]}, outputs: {Out: [b]}}",
            "{type: elementwise_add, inputs: {X: [b], Y: [xw]}, outputs: {Out: [s]}}",
            "{type: tanh, inputs: {X: [s]}, outputs: {Out: [h]}}"])
    feeds = {"x": rand(rng, 2, 3), "w": rand(rng, 3, 4, scale=0.5), "u": rand(rng, 4, 4, scale=0.5),
             "h0": rand(rng, 2, 4)}
    save_case("while_inplace", prog, "loss", feeds, ["x", "w", "u", "h0"])

    # The issue's second bug: two carried states, acc reads h's new value,
    # both written the safe way (fresh var, then assign).
    decls = [("x", (2, 3)), ("w", (3, 4)), ("u", (4, 4)), ("h0", (2, 4)), ("acc0", (2, 4))]
    prog = HEADER + var_lines(decls) + "      steps: {type: step_scopes}\n    ops:\n" + loop_head(steps) + """\
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: assign, inputs: {X: [h0]}, outputs: {Out: [h]}}
      - {type: assign, inputs: {X: [acc0]}, outputs: {Out: [acc]}}
      - type: while
        inputs: {X: [h, acc, u, xw, i, n], Condition: [more]}
        outputs: {Out: [h, acc, i, more], StepScopes: [steps]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [acc]}, outputs: {Out: [loss]}}
""" + body(["{type: mul, inputs: {X: [h], Y: [u]}, outputs: {Out: [b]}}",
            "{type: elementwise_add, inputs: {X: [b], Y: [xw]}, outputs: {Out: [s]}}",
            "{type: tanh, inputs: {X: [s]}, outputs: {Out: [hn]}}",
            "{type: assign, inputs: {X: [hn]}, outputs: {Out: [h]}}",
            "{type: elementwise_mul, inputs: {X: [acc], Y: [h]}, outputs: {Out: [accn]}}",
            "{type: assign, inputs: {X: [accn]}, outputs: {Out: [acc]}}"])
    feeds = {"x": rand(rng, 2, 3), "w": rand(rng, 3, 4, scale=0.5), "u": rand(rng, 4, 4, scale=0.5),
             "h0": rand(rng, 2, 4), "acc0": rand(rng, 2, 4)}
    save_case("while_two_states", prog, "loss", feeds, ["x", "w", "u", "h0", "acc0"])

    # A loop body that overwrites two carried vars in place, each read after.
    prog = HEADER + var_lines(decls) + "      steps: {type: step_scopes}\n    ops:\n" + loop_head(3) + """\
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: assign, inputs: {X: [h0]}, outputs: {Out: [h]}}
      - {type: assign, inputs: {X: [acc0]}, outputs: {Out: [acc]}}
      - type: while
        inputs: {X: [h, acc, u, xw, i, n], Condition: [more]}
        outputs: {Out: [h, acc, i, more], StepScopes: [steps]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [acc]}, outputs: {Out: [loss]}}
""" + body(["{type: mul, inputs: {X: [h], Y: [u]}, outputs: {Out: [h]}}",
            "{type: elementwise_add, inputs: {X: [h], Y: [xw]}, outputs: {Out: [h]}}",
            "{type: tanh, inputs: {X: [h]}, outputs: {Out: [h]}}",
            "{type: elementwise_mul, inputs: {X: [acc], Y: [h]}, outputs: {Out: [acc]}}",
            "{type: elementwise_add, inputs: {X: [acc], Y: [h]}, outputs: {Out: [acc]}}",
            "{type: sigmoid, inputs: {X: [acc]}, outputs: {Out: [acc]}}"])
    save_case("while_two_inplace", prog, "loss", feeds, ["x", "w", "u", "h0", "acc0"])

    # An LSTM cell as a while loop (c and h updated in place), for 1..4
    # steps: each case checks the gradients after one more step.
    for steps in range(1, 5):
        decls = [("x", (2, 3)), ("h0", (2, 4)), ("c0", (2, 4))]
        for g in "ifog":
            decls += [(f"w{g}", (3, 4)), (f"u{g}", (4, 4))]
        gates = []
        for g, act in zip("ifog", ["sigmoid", "sigmoid", "sigmoid", "tanh"]):
            gates += [f"{{type: mul, inputs: {{X: [x], Y: [w{g}]}}, outputs: {{Out: [xg{g}]}}}}",
                      f"{{type: mul, inputs: {{X: [h], Y: [u{g}]}}, outputs: {{Out: [hg{g}]}}}}",
                      f"{{type: elementwise_add, inputs: {{X: [xg{g}], Y: [hg{g}]}}, outputs: {{Out: [p{g}]}}}}",
                      f"{{type: {act}, inputs: {{X: [p{g}]}}, outputs: {{Out: [gate{g}]}}}}"]
        gates += ["{type: elementwise_mul, inputs: {X: [gatef], Y: [c]}, outputs: {Out: [c]}}",
                  "{type: elementwise_mul, inputs: {X: [gatei], Y: [gateg]}, outputs: {Out: [ig]}}",
                  "{type: elementwise_add, inputs: {X: [c], Y: [ig]}, outputs: {Out: [c]}}",
                  "{type: tanh, inputs: {X: [c]}, outputs: {Out: [tc]}}",
                  "{type: elementwise_mul, inputs: {X: [gateo], Y: [tc]}, outputs: {Out: [h]}}"]
        weights = ", ".join(f"w{g}, u{g}" for g in "ifog")
        prog = HEADER + var_lines(decls) + "      steps: {type: step_scopes}\n    ops:\n" + loop_head(steps) + f"""\
      - {{type: assign, inputs: {{X: [h0]}}, outputs: {{Out: [h]}}}}
      - {{type: assign, inputs: {{X: [c0]}}, outputs: {{Out: [c]}}}}
      - type: while
        inputs: {{X: [h, c, x, {weights}, i, n], Condition: [more]}}
        outputs: {{Out: [h, c, i, more], StepScopes: [steps]}}
        attrs: {{sub_block: 1}}
      - {{type: elementwise_mul, inputs: {{X: [h], Y: [c]}}, outputs: {{Out: [hc]}}}}
      - {{type: mean, inputs: {{X: [hc]}}, outputs: {{Out: [loss]}}}}
""" + body(gates)
        feeds = {"x": rand(rng, 2, 3), "h0": rand(rng, 2, 4), "c0": rand(rng, 2, 4)}
        for g in "ifog":
            feeds[f"w{g}"] = rand(rng, 3, 4, scale=0.5)
            feeds[f"u{g}"] = rand(rng, 4, 4, scale=0.5)
        save_case(f"lstm_while_{steps}", prog, "loss", feeds, list(feeds))

    # conditional_block whose body overwrites the carried y and a local t.
    for taken in (True, False):
        decls = [("x", (2, 3)), ("w", (2, 3)), ("a", (1,)), ("b", (1,))]
        prog = HEADER + var_lines(decls) + "      branch: {type: step_scopes}\n    ops:\n" + """\
      - {type: less_than, inputs: {X: [a], Y: [b]}, outputs: {Out: [flag]}}
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {scale: 0.5}}
      - type: conditional_block
        inputs: {Cond: [flag], Input: [y, w]}
        outputs: {Out: [y], Scope: [branch]}
        attrs: {sub_block: 1, is_scalar_condition: true}
      - {type: elementwise_mul, inputs: {X: [y], Y: [x]}, outputs: {Out: [yx]}}
      - {type: mean, inputs: {X: [yx]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_mul, inputs: {X: [y], Y: [w]}, outputs: {Out: [t]}}
      - {type: tanh, inputs: {X: [t]}, outputs: {Out: [t]}}
      - {type: elementwise_add, inputs: {X: [t], Y: [y]}, outputs: {Out: [y]}}
      - {type: square, inputs: {X: [y]}, outputs: {Out: [y]}}
      - {type: elementwise_mul, inputs: {X: [y], Y: [t]}, outputs: {Out: [y]}}
"""
        feeds = {"x": rand(rng, 2, 3), "w": rand(rng, 2, 3),
                 "a": np.array([0.0 if taken else 2.0]), "b": np.array([1.0])}
        save_case("cond_overwrite_" + ("taken" if taken else "skipped"), prog, "loss", feeds, ["x", "w"])


    # A fed x read by elementwise_mul (whose grad op reads it), then updated
    # in place by a while, then overwritten: the mul reads a copy made before
    # the loop, and x@GRAD is the gradient of the fed value.
    prog = HEADER + var_lines([("x", (2,)), ("w", (2,))]) + "      steps: {type: step_scopes}\n    ops:\n" + """\
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [z]}}
""" + loop_head(2) + """\
      - type: while
        inputs: {X: [x, w, i, n], Condition: [more]}
        outputs: {Out: [x, i, more], StepScopes: [steps]}
        attrs: {sub_block: 1}
      - {type: tanh, inputs: {X: [x]}, outputs: {Out: [x]}}
      - {type: elementwise_add, inputs: {X: [x], Y: [z]}, outputs: {Out: [s]}}
      - {type: mean, inputs: {X: [s]}, outputs: {Out: [loss]}}
""" + body(["{type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [x]}}"])
    save_case("fed_read_then_carried_then_overwritten", prog, "loss", {"x": rand(rng, 2), "w": rand(rng, 2)},
              ["x", "w"])


    # Nested: a while body whose conditional_block (taken on odd steps)
    # overwrites the loop-carried h in place after an op read it.
    prog = HEADER + var_lines([("x", (2, 3)), ("w", (3, 3)), ("h0", (2, 3))]) + """\
      steps: {type: step_scopes}
    ops:
""" + loop_head(4) + """\
      - {type: assign, inputs: {X: [h0]}, outputs: {Out: [h]}}
      - {type: fill_constant, outputs: {Out: [two]}, attrs: {shape: [1], dtype: int64, value: 2.0}}
      - type: while
        inputs: {X: [h, x, w, i, n, two], Condition: [more]}
        outputs: {Out: [h, i, more], StepScopes: [steps]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [h]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    vars:
      branch: {type: step_scopes}
    ops:
      - {type: mul, inputs: {X: [h], Y: [w]}, outputs: {Out: [h]}}
      - {type: elementwise_add, inputs: {X: [h], Y: [x]}, outputs: {Out: [h]}}
      - {type: less_than, inputs: {X: [i], Y: [two]}, outputs: {Out: [early]}}
      - type: conditional_block
        inputs: {Cond: [early], Input: [h, x]}
        outputs: {Out: [h], Scope: [branch]}
        attrs: {sub_block: 2, is_scalar_condition: true}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [h]}}
""" + LOOP_TAIL + """\
  - idx: 2
    parent: 1
    ops:
      - {type: elementwise_mul, inputs: {X: [h], Y: [x]}, outputs: {Out: [t]}}
      - {type: sigmoid, inputs: {X: [t]}, outputs: {Out: [h]}}
      - {type: elementwise_mul, inputs: {X: [h], Y: [t]}, outputs: {Out: [h]}}
"""
    save_case("while_with_cond_overwrite", prog, "loss",
              {"x": rand(rng, 2, 3), "w": rand(rng, 3, 3, scale=0.5), "h0": rand(rng, 2, 3)}, ["x", "w", "h0"])


if __name__ == "__main__":
    main()
