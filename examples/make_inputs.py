#!/usr/bin/python3
"""Writes the example's input tensors as .npy files.

Usage: /usr/bin/python3 examples/make_inputs.py OUT_DIR

Debian's NumPy lives at /usr/bin/python3 (the python3 on PATH may be another
interpreter without it).
"""
import os
import sys

import numpy as np


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    # A batch of 8 rows of 4 features, float32 as linear.yaml declares.
    x = rng.standard_normal((8, 4)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    print(f"wrote {os.path.join(out, 'x.npy')}: float32{list(x.shape)}")


if __name__ == "__main__":
    main()
