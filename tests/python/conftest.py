"""Shared fixtures: paths of the repository's examples, the seed's data."""
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def examples():
    return EXAMPLES


@pytest.fixture
def rng():
    return np.random.default_rng(1234567890)


def nabla_bin():
    return os.environ.get("NABLA_BIN")


def opencl_available():
    """Whether this build of the module reaches an OpenCL device (PoCL's CPU device counts)."""
    import nabla  # here, not at the top: test_package runs before the module is importable

    try:
        nabla.tensor(np.zeros(1, np.float32), device="opencl")
        return True
    except nabla.Error:
        return False
