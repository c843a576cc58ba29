#!/usr/bin/env python3
"""Writes DIR/train.csv and DIR/eval.csv: three Gaussian blobs in 4-D, the
columns f0..f3 and an integer label. Only the standard library, seeded."""
import os
import random
import sys

CENTERS = [(2.0, 0.0, -1.0, 1.0), (-2.0, 1.0, 1.0, -1.0), (0.0, -2.0, 0.5, 2.0)]


def write(path, count, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        f.write("f0,f1,f2,f3,label\n")
        for i in range(count):
            label = i % len(CENTERS)
            point = [c + rng.gauss(0.0, 0.7) for c in CENTERS[label]]
            f.write(",".join(f"{v:.5f}" for v in point) + f",{label}\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "data"
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "train.csv"), 300, 1)
    write(os.path.join(out, "eval.csv"), 90, 2)


if __name__ == "__main__":
    main()
