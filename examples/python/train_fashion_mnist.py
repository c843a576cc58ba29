#!/usr/bin/python3
"""The main job in Python: build the 784-256-256-10 MLP program of
examples/models/fashion_mnist_mlp.yaml with the Program API, append its
backward part (seed 002's append_backward), add one Adam op per parameter
(append_optimizer), train on Fashion-MNIST (Debian's dataset-fashion-mnist)
and print the test accuracy.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_fashion_mnist.py

One epoch at batch 64 takes a few seconds on two cores and reaches about 85 %
test accuracy (--epochs N for more).
"""
import argparse
import pathlib
import time

import numpy as np

import nabla

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def load(split):
    images = nabla.datasets.read_idx(DATA / f"{split}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    labels = nabla.datasets.read_idx(DATA / f"{split}-labels-idx1-ubyte.gz").astype(np.int64).reshape(-1, 1)
    return images, labels


def build_mlp():
    """The forward program: what examples/models/fashion_mnist_mlp.yaml says."""
    p = nabla.Program()
    p.create_var("image", [-1, 784], "float32", stop_gradient=True)
    p.create_var("label", [-1, 1], "int64")
    layers = [(784, 256, "kaiming_uniform"), (256, 256, "kaiming_uniform"), (256, 10, "xavier_uniform")]
    x = "image"
    for i, (n_in, n_out, init) in enumerate(layers, start=1):
        w, b = f"fc{i}_w", f"fc{i}_b"
        p.create_var(w, [n_in, n_out], persistable=True, init={"type": init, "seed": 10 + i})
        p.create_var(b, [n_out], persistable=True, init={"type": "fill_constant", "value": 0.0})
        p.append_op("mul", {"X": x, "Y": w}, {"Out": f"fc{i}_xw"})
        out = "logits" if i == len(layers) else f"fc{i}"
        p.append_op("elementwise_add", {"X": f"fc{i}_xw", "Y": b}, {"Out": out}, {"axis": 1})
        if i < len(layers):
            p.append_op("relu", {"X": out}, {"Out": f"h{i}"})
            x = f"h{i}"
    p.append_op("softmax_with_cross_entropy", {"Logits": "logits", "Label": "label"}, {"Softmax": "prob", "Loss": "ce"})
    p.append_op("mean", {"X": "ce"}, {"Out": "loss"})
    return p


def add_adam(p, param_grads, lr, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """Paddle's optimizer.minimize after append_backward: one adam op per
    (parameter, gradient) pair, its moments and beta powers persistable,
    built as `nabla run` builds it (nabla/train.h)."""
    nabla.append_optimizer(p, param_grads, "adam", lr=lr, beta1=beta1, beta2=beta2, epsilon=epsilon)


def accuracy(exe, program, images, labels, batch=1000):
    correct = 0
    for i in range(0, len(images), batch):
        feed = {"image": images[i : i + batch], "label": labels[i : i + batch]}
        (logits,) = exe.run(program, feed=feed, fetch_list=["logits"])
        correct += int((logits.argmax(1) == labels[i : i + batch, 0]).sum())
    return correct / len(images)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--threads", type=int, default=0, help="executor threads (0: all cores)")
    ap.add_argument("--limit", type=int, default=0, help="train and test on the first N images only (a quick check)")
    args = ap.parse_args(argv)

    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    if args.limit:
        train_x, train_y, test_x, test_y = train_x[: args.limit], train_y[: args.limit], test_x[: args.limit], test_y[: args.limit]

    train = build_mlp()
    infer = train.clone()  # the forward part only, for evaluation
    # fuse: the fusion pass `nabla run` applies (the loss stays fetchable).
    param_grads = nabla.append_backward(train, "loss", fuse=True)
    print("parameters and gradients:", ", ".join(f"{p} -> {g}" for p, g in param_grads))
    add_adam(train, param_grads, args.lr)

    # One executor, one scope: the eval program reads the parameters that the
    # training program updates.
    exe = nabla.Executor(threads=args.threads)
    rng = np.random.default_rng(1)
    for epoch in range(1, args.epochs + 1):
        start = time.time()
        order = rng.permutation(len(train_x))
        losses = []
        for i in range(0, len(order) - args.batch_size + 1, args.batch_size):
            idx = order[i : i + args.batch_size]
            (loss,) = exe.run(train, feed={"image": train_x[idx], "label": train_y[idx]}, fetch_list=["loss"])
            losses.append(float(loss[0]))
        acc = accuracy(exe, infer, test_x, test_y)
        print(f"epoch {epoch}: mean loss {np.mean(losses):.4f}, test accuracy {100 * acc:.2f} % ({time.time() - start:.1f} s)")
    return acc


if __name__ == "__main__":
    main()
