"""Python threads: Executor.run and eager backward release the GIL, so two
threads with their own executors (or their own tensors) run side by side and
give what they give one after the other."""
import threading

import numpy as np

import nabla

# An MLP trained with adam: enough ops and state (moments, beta powers) that a
# run sharing anything with another thread would show in the numbers.
MLP = """
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 16], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64, stop_gradient: true}
      w1: {shape: [16, 64], dtype: float32, persistable: true,
           init: {type: uniform_random, min: -0.3, max: 0.3, seed: SEED}}
      b1: {shape: [64], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      w2: {shape: [64, 5], dtype: float32, persistable: true,
           init: {type: uniform_random, min: -0.3, max: 0.3, seed: SEED}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w1]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b1]}, outputs: {Out: [h]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [a]}}
      - {type: mul, inputs: {X: [a], Y: [w2]}, outputs: {Out: [logits]}}
      - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]},
         outputs: {Softmax: [sm], Loss: [losses]}}
      - {type: mean, inputs: {X: [losses]}, outputs: {Out: [loss]}}
"""

STEPS = 40


def training_program(seed):
    p = nabla.Program.from_yaml(MLP.replace("SEED", str(seed)))
    nabla.append_optimizer(p, nabla.append_backward(p, "loss"), "adam", lr=0.01)
    return p


def batches(seed):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((32, 16)).astype(np.float32), rng.integers(0, 5, (32, 1)).astype(np.int64))
            for _ in range(STEPS)]


def train(seed, threads):
    """The losses of STEPS adam steps and the final w1, on an executor of its own."""
    p = training_program(seed)
    exe = nabla.Executor(threads=threads)
    losses = []
    for x, label in batches(seed):
        (loss,) = exe.run(p, feed={"x": x, "label": label}, fetch_list=["loss"])
        losses.append(loss.copy())
    return np.concatenate(losses), exe.get("w1")


def run_in_threads(fn, args_list):
    results, errors = [None] * len(args_list), []

    def work(i, args):
        try:
            results[i] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in 120 s"
    assert not errors, errors
    return results


def test_two_threads_with_their_own_executors_train_as_one_after_the_other():
    for threads in (1, 2):
        sequential = [train(11, threads), train(22, threads)]
        concurrent = run_in_threads(train, [(11, threads), (22, threads)])
        for (losses, w1), (seq_losses, seq_w1) in zip(concurrent, sequential):
            np.testing.assert_array_equal(losses, seq_losses)
            np.testing.assert_array_equal(w1, seq_w1)
        # The two models differ, so the comparison above could tell them apart.
        assert not np.array_equal(sequential[0][1], sequential[1][1])
        assert sequential[0][0][-1] < sequential[0][0][0]  # and they train


def eager_step(seed):
    rng = np.random.default_rng(seed)
    w = nabla.tensor((0.3 * rng.standard_normal((16, 64))).astype(np.float32), requires_grad=True)
    v = nabla.tensor((0.3 * rng.standard_normal((64, 5))).astype(np.float32), requires_grad=True)
    grads = []
    for x, label in batches(seed)[:10]:
        out = nabla.ops.softmax_with_cross_entropy(nabla.ops.tanh(nabla.tensor(x) @ w) @ v, label)
        loss = nabla.ops.mean(out.Loss)
        loss.backward()
        grads.append((loss.numpy().copy(), w.grad.numpy().copy(), v.grad.numpy().copy()))
        w.zero_grad()
        v.zero_grad()
    return grads


def test_eager_backward_in_two_threads_matches_one_after_the_other():
    sequential = [eager_step(3), eager_step(4)]
    concurrent = run_in_threads(eager_step, [(3,), (4,)])
    for got, want in zip(concurrent, sequential):
        for g, w in zip(got, want):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)


def test_executor_run_lets_other_python_threads_run():
    # One run long enough to see (a few hundred milliseconds) while the main
    # thread notes the time in a loop. Holding the GIL through the run would
    # stop the loop for the whole run: a gap as long as the run.
    import time

    p = nabla.Program.from_yaml("""
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [512, 512], dtype: float32, stop_gradient: true}
    ops:
""" + "".join(f"      - {{type: matmul, inputs: {{X: [{'x' if i == 0 else f'y{i - 1}'}], Y: [x]}}, "
              f"outputs: {{Out: [y{i}]}}, attrs: {{alpha: 0.002}}}}\n" for i in range(60)))
    x = np.full((512, 512), 1.0, np.float32)
    exe = nabla.Executor(threads=1, executor="sequential")
    exe.run(p, feed={"x": x}, fetch_list=["y59"])  # prepared once, so the timed run is all kernels
    span = []

    def work():
        t0 = time.monotonic()
        exe.run(p, feed={"x": x}, fetch_list=["y59"])
        span.extend([t0, time.monotonic()])

    t = threading.Thread(target=work)
    stamps = [time.monotonic()]
    t.start()
    while t.is_alive():
        stamps.append(time.monotonic())
    t.join()
    stamps.append(time.monotonic())
    start, end = span
    inside = [s for s in stamps if start <= s <= end]
    gaps = np.diff([start] + inside + [end])
    assert end - start > 0.05, f"the run took {end - start:.3f} s, too short to tell"
    assert gaps.max() < 0.75 * (end - start), (
        f"the main thread stood still for {gaps.max():.3f} s of a {end - start:.3f} s run")
