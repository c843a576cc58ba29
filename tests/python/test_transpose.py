"""transpose against NumPy for every permutation of ranks 2-5 and each dtype:
the kernel has three paths (a tiled matrix, contiguous trailing runs, the
per-element walk), and every permutation picks one of them."""
import itertools

import numpy as np
import pytest

import nabla


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
def test_transpose_matches_numpy_for_every_permutation(rank):
    rng = np.random.default_rng(rank)
    shape = tuple(int(d) for d in rng.integers(1, 5, rank))
    x = rng.standard_normal(shape)
    for perm in itertools.permutations(range(rank)):
        for dtype in (np.float32, np.float64, np.int32, np.int64):
            xx = x.astype(dtype)
            got = nabla.ops.transpose(nabla.tensor(xx), axis=list(perm)).numpy()
            np.testing.assert_array_equal(got, np.transpose(xx, perm), err_msg=f"shape {shape} axis {perm} {dtype}")
